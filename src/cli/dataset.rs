//! `pointact dataset info DIR`: what a LeRobotDataset folder holds.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;

#[derive(Subcommand)]
pub enum DatasetCommand {
    /// Episodes, frames, tasks, success rate and features of a LeRobotDataset v3.0 folder.
    Info {
        /// The dataset's folder (the one holding meta/info.json).
        dir: PathBuf,
    },
    /// One episode in rerun: its video with the points the pointer answered drawn over it, its
    /// state and plan step over time, its task and the judge's words.
    View {
        /// The dataset's folder.
        dir: PathBuf,
        /// Which episode (0-based).
        #[arg(long, default_value_t = 0)]
        episode: i64,
        /// Where to log (default: spawn a `rerun` viewer from PATH).
        #[arg(long, value_name = "save:FILE.rrd|spawn|connect[:URL]")]
        rerun: Option<pointact::viz::Sink>,
    },
}

pub fn run(which: DatasetCommand) -> Result<ExitCode> {
    match which {
        DatasetCommand::Info { dir } => info(&dir),
        DatasetCommand::View {
            dir,
            episode,
            rerun,
        } => view(&dir, episode, rerun.unwrap_or(pointact::viz::Sink::Spawn)),
    }
}

fn info(dir: &std::path::Path) -> Result<ExitCode> {
    let s = pointact::dataset::read::summary(dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let i = &s.info;
    println!("dataset   {}", dir.display());
    println!(
        "format    LeRobotDataset {}, {} fps",
        i.codebase_version, i.fps
    );
    println!("robot     {}", i.robot_type.as_deref().unwrap_or("(none)"));
    println!(
        "episodes  {} ({} frames, {:.1} s)",
        i.total_episodes,
        i.total_frames,
        i.total_frames as f64 / i.fps.max(1) as f64
    );
    let judged: Vec<bool> = s.episodes.iter().filter_map(|e| e.success).collect();
    if !judged.is_empty() {
        let ok = judged.iter().filter(|&&b| b).count();
        println!(
            "success   {ok}/{} ({:.1}%)",
            judged.len(),
            100.0 * ok as f64 / judged.len() as f64
        );
    }
    println!("tasks     {}", s.tasks.len());
    for (k, t) in s.tasks.iter().enumerate() {
        let n = s.episodes.iter().filter(|e| &e.task == t).count();
        println!("  {k:>3}  {n:>5} episodes  {t}");
    }
    println!("features");
    for (name, f) in &i.features.0 {
        let codec = f
            .info
            .as_ref()
            .and_then(|v| v.get("video.codec"))
            .and_then(|c| c.as_str())
            .map(|c| format!(" ({c})"))
            .unwrap_or_default();
        println!("  {name:<28} {:<8} {:?}{codec}", f.dtype, f.shape);
    }
    Ok(ExitCode::SUCCESS)
}

fn view(dir: &std::path::Path, episode: i64, sink: pointact::viz::Sink) -> Result<ExitCode> {
    let ep = pointact::dataset::read::episode(dir, episode)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let mut viz = pointact::viz::Viz::open("pointact-dataset", &sink)?;
    viz.log_dataset_episode(&ep);
    println!(
        "episode   {} of {}: {} ({} frames)",
        ep.index,
        dir.display(),
        ep.task,
        ep.length
    );
    super::finish_viz(Some(viz))?;
    Ok(ExitCode::SUCCESS)
}
