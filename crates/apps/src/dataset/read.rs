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

/// One episode's frames as `pointact dataset view` shows them.
#[derive(Debug, Clone)]
pub struct EpisodeFrames {
    /// The episode's index.
    pub index: i64,
    /// The dataset's fps.
    pub fps: u32,
    /// Its task.
    pub task: String,
    /// Frames.
    pub length: usize,
    /// Names of `observation.state`'s entries (empty without that feature).
    pub state_names: Vec<String>,
    /// `observation.state`, row-major (`length × state_names.len()`).
    pub state: Vec<f32>,
    /// `pointact.plan_step` per frame, when the dataset has it.
    pub plan_step: Option<Vec<i64>>,
    /// Each colour video feature: its key, its file, and where the episode starts in it (s).
    /// Depth videos are left out: rerun's viewer decodes 8-bit colour video, not 12-bit depth.
    pub videos: Vec<(String, std::path::PathBuf, f64)>,
    /// `pointact/points`: every question asked and the points answered (frame pixels).
    pub points: Option<serde_json::Value>,
    /// The judge's verdict and words, for pointact's own episodes.
    pub success: Option<bool>,
    /// The judge's words.
    pub detail: Option<String>,
}

/// Episode `index` of the dataset at `root`, read from its tables.
pub fn episode(root: &Path, index: i64) -> Result<EpisodeFrames, DatasetError> {
    let info = read_info(root)?;
    let missing = || {
        DatasetError::Table(format!(
            "{} has no episode {index} (it holds 0 to {})",
            root.display(),
            info.total_episodes as i64 - 1
        ))
    };
    let (row, r) = find_episode_row(root, index)?.ok_or_else(missing)?;
    let int = |name: &str| -> Result<i64, DatasetError> { Ok(tables::i64_values(&row, name)?[r]) };
    let (from, to) = (int("dataset_from_index")?, int("dataset_to_index")?);
    let data_path = root.join(format!(
        "data/{}.parquet",
        super::info::chunk_file(
            int("data/chunk_index")? as u64,
            int("data/file_index")? as u64
        )
    ));
    let state_feature = info.features.get("observation.state");
    let width = state_feature.map_or(0, |f| f.len());
    let (mut state, mut plan_step) = (Vec::new(), Vec::new());
    let has_steps = info.features.get("pointact.plan_step").is_some();
    for b in tables::read_parquet(&data_path)? {
        let rows: Vec<usize> = tables::i64_values(&b, "index")?
            .iter()
            .enumerate()
            .filter(|(_, &i)| (from..to).contains(&i))
            .map(|(k, _)| k)
            .collect();
        if rows.is_empty() {
            continue;
        }
        if width > 0 {
            let all = tables::f32_rows(&b, "observation.state")?;
            for &k in &rows {
                state.extend_from_slice(&all[k * width..(k + 1) * width]);
            }
        }
        if has_steps {
            let all = tables::i64_values(&b, "pointact.plan_step")?;
            plan_step.extend(rows.iter().map(|&k| all[k]));
        }
    }
    let length = (to - from).max(0) as usize;
    if width > 0 && state.len() != length * width {
        return Err(DatasetError::Table(format!(
            "{} holds {} of episode {index}'s {length} frames",
            data_path.display(),
            state.len() / width
        )));
    }
    let videos = info
        .features
        .videos()
        .filter(|(_, f)| !f.is_depth_map())
        .map(|(key, _)| {
            let at = (
                int(&format!("videos/{key}/chunk_index"))? as u64,
                int(&format!("videos/{key}/file_index"))? as u64,
            );
            let from = tables::f64_values(&row, &format!("videos/{key}/from_timestamp"))?[r];
            let path = root.join(format!(
                "videos/{key}/{}.mp4",
                super::info::chunk_file(at.0, at.1)
            ));
            Ok((key.to_string(), path, from))
        })
        .collect::<Result<_, DatasetError>>()?;
    let text = |name: &str| {
        tables::str_values(&row, name)
            .ok()
            .and_then(|v| v[r].clone())
    };
    Ok(EpisodeFrames {
        index,
        fps: info.fps,
        task: task_names(&row)?.get(r).cloned().unwrap_or_default(),
        length,
        state_names: state_feature
            .and_then(|f| f.names.clone())
            .unwrap_or_default(),
        state,
        plan_step: has_steps.then_some(plan_step),
        videos,
        points: text("pointact/points").and_then(|t| serde_json::from_str(&t).ok()),
        success: tables::bool_values(&row, "pointact/success")
            .ok()
            .and_then(|v| v[r]),
        detail: text("pointact/detail"),
    })
}

/// The episodes-table batch holding episode `index`, and its row in it.
fn find_episode_row(
    root: &Path,
    index: i64,
) -> Result<Option<(arrow_array::RecordBatch, usize)>, DatasetError> {
    for path in tables::table_files(&root.join("meta/episodes"))? {
        for b in tables::read_parquet(&path)? {
            if let Some(r) = tables::i64_values(&b, "episode_index")?
                .iter()
                .position(|&i| i == index)
            {
                return Ok(Some((b, r)));
            }
        }
    }
    Ok(None)
}
