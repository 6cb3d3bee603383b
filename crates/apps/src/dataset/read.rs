//! What a dataset folder holds, read back for `pointact dataset info`: its info, its tasks, and
//! per episode its length, task and (for pointact's own episodes) the judge's verdict.

use std::path::Path;

use super::info::Info;
use super::tables;
use super::writer::{read_info, read_tasks};
use super::DatasetError;

/// One episode as its metadata row describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeSummary {
    /// Its index.
    pub index: i64,
    /// Frames.
    pub length: i64,
    /// Its first task string.
    pub task: String,
    /// The judge's verdict (`pointact/success`; absent in other recorders' episodes).
    pub success: Option<bool>,
    /// The judge's words (`pointact/detail`).
    pub detail: Option<String>,
}

/// A dataset folder's contents.
#[derive(Debug, Clone)]
pub struct Summary {
    /// `meta/info.json`.
    pub info: Info,
    /// The task strings, by index.
    pub tasks: Vec<String>,
    /// Every episode, in order.
    pub episodes: Vec<EpisodeSummary>,
}

/// Reads the summary of the dataset at `root`; a folder whose tables disagree with its info is
/// an error that says where.
pub fn summary(root: &Path) -> Result<Summary, DatasetError> {
    let info = read_info(root)?;
    let tasks = read_tasks(root)?;
    let mut episodes = Vec::new();
    for path in tables::table_files(&root.join("meta/episodes"))? {
        for b in tables::read_parquet(&path)? {
            let index = tables::i64_values(&b, "episode_index")?;
            let length = tables::i64_values(&b, "length")?;
            let task = task_names(&b)?;
            let success = tables::bool_values(&b, "pointact/success").ok();
            let detail = tables::str_values(&b, "pointact/detail").ok();
            for r in 0..b.num_rows() {
                episodes.push(EpisodeSummary {
                    index: index[r],
                    length: length[r],
                    task: task.get(r).cloned().unwrap_or_default(),
                    success: success.as_ref().and_then(|s| s[r]),
                    detail: detail.as_ref().and_then(|d| d[r].clone()),
                });
            }
        }
    }
    if episodes.len() as u64 != info.total_episodes {
        return Err(DatasetError::Table(format!(
            "{}: meta/episodes holds {} episodes, info.json says {}",
            root.display(),
            episodes.len(),
            info.total_episodes
        )));
    }
    Ok(Summary {
        info,
        tasks,
        episodes,
    })
}

/// The first string of each row's `tasks` list.
fn task_names(b: &arrow_array::RecordBatch) -> Result<Vec<String>, DatasetError> {
    use arrow_array::{Array, ListArray, StringArray};
    let c = tables::column(b, "tasks")?;
    let list = c
        .as_any()
        .downcast_ref::<ListArray>()
        .ok_or_else(|| DatasetError::Table("column `tasks` is not a list".into()))?;
    Ok((0..list.len())
        .map(|r| {
            let v = list.value(r);
            v.as_any()
                .downcast_ref::<StringArray>()
                .filter(|s| !s.is_empty())
                .map(|s| s.value(0).to_string())
                .unwrap_or_default()
        })
        .collect())
}
