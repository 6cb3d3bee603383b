//! `pointact eval sim`: a suite of simulated tasks over seeded episodes, with a progress bar, a
//! success table and a JSON record. `pointact eval bridge`: the same suite, each episode driven
//! through a bridge server (ours in process, or `--server`) over the SimplerEnv protocol.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::{Args, Subcommand};
use pointact::executor::Branch;
use pointact::runner::eval::run_suite_observed;
use pointact::runner::eval::EvalReport;
use pointact::runner::eval::SuiteEvent;
use pointact::runner::EpisodeOptions;
use pointact::sim::oracle::OracleOptions;
use pointact::sim::tasks::Suite;

use super::{finish_viz, runtime, RerunCli};

#[derive(Subcommand)]
pub enum EvalCommand {
    /// All tasks of a simulated suite over seeded episodes.
    Sim(EvalSimCli),
    /// Our simulator's suite through a bridge server and its protocol (the Rust evaluator; for
    /// SimplerEnv itself run sim/simplerenv/run.py against `serve bridge`).
    Bridge(EvalBridgeCli),
    /// `ask` (Embodied-R) on generated spatial questions (`train spatial-data`): accuracy per
    /// question type, as VSI-Bench's table.
    Spatial(Box<super::ask::EvalSpatialCli>),
}

#[derive(Args)]
pub struct EvalSimCli {
    /// tabletop (8 xArm 6 tasks), bridge (4 WidowX tasks) or clutter (3 xArm 6 + 3 WidowX tasks
    /// with tall obstacles in the way; touching one fails the episode).
    #[arg(long, default_value = "tabletop")]
    suite: String,
    /// p (affordance) or v (visual trace).
    #[arg(long, default_value = "p")]
    branch: Branch,
    #[command(flatten)]
    conditions: super::ConditionsCli,
    /// Episodes per task (seeds 0..N), 1 to 100000.
    #[arg(long, default_value_t = 24, value_parser = super::values::episodes)]
    episodes: u64,
    /// Write every episode's result here (rewritten atomically as episodes finish, so an
    /// interrupted run keeps what finished).
    #[arg(long, default_value = "eval-sim.json")]
    json: PathBuf,
    /// Sweep instead of one suite: oracle noise 0 / 8 / 16 / 24 px × branch p / v × suites
    /// tabletop and bridge, under the other condition flags (the realistic sweep:
    /// `--sweep --sensor realsense --calib-error-mm 2 --calib-error-deg 0.2`). Prints one table;
    /// --json gets every run's report.
    #[arg(long, conflicts_with_all = ["resume", "suite", "branch"])]
    sweep: bool,
    /// Continue an interrupted run from its JSON: the episodes it holds are not run again
    /// (suite, branch, conditions and episodes must be the same).
    #[arg(long)]
    resume: Option<PathBuf>,
    #[command(flatten)]
    dataset: super::DatasetCli,
    #[command(flatten)]
    rerun: RerunCli,
}

pub fn run(which: EvalCommand) -> Result<ExitCode> {
    match which {
        EvalCommand::Sim(a) => sim(a),
        EvalCommand::Bridge(a) => bridge(a),
        EvalCommand::Spatial(a) => super::ask::eval_spatial(*a),
    }
}

#[derive(Args)]
pub struct EvalBridgeCli {
    /// bridge (4 WidowX tasks) or tabletop (8 xArm 6 tasks).
    #[arg(long, default_value = "bridge")]
    suite: String,
    /// A running bridge server (`ws://HOST:PORT` or `HOST:PORT`); default: one started in this
    /// process on a free loopback port, with the oracle pointer.
    #[arg(long)]
    server: Option<String>,
    /// delta (SimplerEnv's stock 7-D delta end-effector controller) or joint (8-D joint targets).
    #[arg(long, default_value = "delta", value_parser = ["delta", "joint"])]
    control_mode: String,
    /// Executor branch of the in-process server: p (affordance) or v (visual trace).
    #[arg(long, default_value = "p")]
    branch: Branch,
    /// Episodes per task (seeds 0..N), 1 to 100000.
    #[arg(long, default_value_t = 24, value_parser = super::values::episodes)]
    episodes: u64,
    /// Control steps per episode (5 Hz), 1 to 100000; our simulator has no official budget.
    #[arg(long, default_value_t = 300, value_parser = super::values::control_steps)]
    max_steps: u64,
    /// Write every episode's result here.
    #[arg(long, default_value = "eval-bridge.json")]
    json: PathBuf,
    #[command(flatten)]
    dataset: super::DatasetCli,
}

fn bridge(a: EvalBridgeCli) -> Result<ExitCode> {
    use pointact::bridge::remote::ControlMode;
    use pointact::bridge::{BridgeClient, BridgeServer};
    use pointact::runner::pointer::SessionPointer;
    use pointact::runner::remote::{run_remote_suite, RemoteOptions, SuiteDataset};

    let suite = Suite::parse(&a.suite)?;
    let control_mode = ControlMode::from_name(&a.control_mode)
        .ok_or_else(|| anyhow::anyhow!("unknown control mode {:?}", a.control_mode))?;
    let options = RemoteOptions {
        episode: EpisodeOptions {
            branch: a.branch,
            ..Default::default()
        },
        control_mode,
        max_steps: a.max_steps,
        ..Default::default()
    };
    let seeds: Vec<u64> = (0..a.episodes).collect();
    // The dataset is checked and opened (or refused) before anything else is written.
    let mut recorder = match &a.dataset.dataset {
        Some(_) => {
            pointact::runner::record::frames_per_control_step(
                a.dataset.dataset_fps as u32,
                options.control_freq,
            )
            .map_err(|e| anyhow::anyhow!("--dataset-fps: {e}"))?;
            Some(open_suite_dataset(&a.dataset, suite, &options.episode)?)
        }
        None => None,
    };
    // Our own server runs the branch asked for; another server's policy is its own.
    let branch = match (&a.server, a.branch) {
        (Some(_), _) => "remote",
        (None, Branch::Affordance) => "p",
        (None, Branch::Trace) => "v",
    };
    write_report(
        &a.json,
        &EvalReport::new(suite, &options.episode, &seeds, Vec::new(), true),
    )?;
    let stop = super::stop_on_ctrl_c()?;
    let bar = episode_bar(suite.tasks().len() * seeds.len());
    let mut dataset_err = None;
    let mut on_kept = |kept: &Result<
        pointact::runner::record::Kept,
        pointact::dataset::DatasetError,
    >| { stop_if_not_kept(kept, &bar, &mut dataset_err, &stop) };
    let mut ok = 0;
    let rt = runtime()?;
    let report = rt.block_on(async {
        let (addr, shutdown) = match &a.server {
            Some(s) => {
                // Unreachable is a refusal of the whole run, not a table of failed episodes.
                BridgeClient::connect(s)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot reach the bridge server at {s}: {e}"))?;
                (s.clone(), None)
            }
            None => {
                // One in-process server drives one arm.
                let mut robots: Vec<String> = suite
                    .tasks()
                    .iter()
                    .filter_map(|t| t.instantiate(0).ok())
                    .map(|e| e.robot)
                    .collect();
                robots.sort();
                robots.dedup();
                if robots.len() > 1 {
                    anyhow::bail!(
                        "suite {} mixes arms ({}); the in-process bridge server drives one: run it \
                         with `eval sim --suite {}`, or give --server",
                        suite.name(),
                        robots.join(", "),
                        suite.name()
                    );
                }
                let robot = robots.pop().unwrap_or_else(|| "widowx250".to_string());
                let config = super::serve::session_config(
                    SessionPointer::Oracle(OracleOptions::default()),
                    &robot,
                    a.branch,
                    None,
                )?;
                let server = BridgeServer::bind("127.0.0.1:0", config).await?;
                let addr = server.local_addr()?.to_string();
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                tokio::spawn(server.serve(async {
                    let _ = rx.await;
                }));
                (addr, Some(tx))
            }
        };
        println!("server    ws://{addr}/ ({} control)", control_mode.name());
        let report = run_remote_suite(
            suite,
            &seeds,
            &options,
            || BridgeClient::connect(&addr),
            &stop,
            recorder.as_mut().map(|recorder| SuiteDataset {
                recorder,
                branch: branch.to_string(),
                on_kept: &mut on_kept,
            }),
            &mut |done, _, r| {
                ok += r.success as usize;
                bar.set_position(done as u64);
                bar.set_message(format!("{ok}/{done} succeeded"));
            },
        )
        .await;
        drop(shutdown);
        Ok::<_, anyhow::Error>(report)
    })?;
    bar.finish_and_clear();
    println!("{report}");
    write_report(&a.json, &report)?;
    println!("wrote {}", a.json.display());
    settle_dataset(recorder.as_mut(), &mut dataset_err);
    if let Some(e) = dataset_err {
        anyhow::bail!("--dataset: an episode could not be written, the run stopped: {e}");
    }
    if report.interrupted {
        return Ok(ExitCode::from(super::INTERRUPTED));
    }
    Ok(ExitCode::SUCCESS)
}

/// An episode that could not be kept stops the run: every later one would be lost the same way.
/// The first error is kept for the end of the run.
fn stop_if_not_kept(
    kept: &Result<pointact::runner::record::Kept, pointact::dataset::DatasetError>,
    bar: &indicatif::ProgressBar,
    dataset_err: &mut Option<String>,
    stop: &std::sync::atomic::AtomicBool,
) {
    if let Err(e) = kept {
        bar.println(super::recorded_line(kept));
        dataset_err.get_or_insert(e.to_string());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Waits for the episodes still being written (after Ctrl-C too) and prints the dataset's size,
/// or keeps the first error.
fn settle_dataset(
    recorder: Option<&mut pointact::runner::record::DatasetRecorder>,
    dataset_err: &mut Option<String>,
) {
    if let Some(r) = recorder {
        match r.settle() {
            Ok(w) => println!(
                "dataset   {}: {} episodes, {} frames",
                w.root().display(),
                w.info().total_episodes,
                w.info().total_frames
            ),
            Err(e) => {
                dataset_err.get_or_insert(e.to_string());
            }
        }
    }
}

/// The sweep's axes.
const SWEEP_NOISE: [f64; 4] = [0.0, 8.0, 16.0, 24.0];
const SWEEP_SUITES: [Suite; 2] = [Suite::Tabletop, Suite::Bridge];
const SWEEP_BRANCHES: [Branch; 2] = [Branch::Affordance, Branch::Trace];

fn sweep(a: EvalSimCli) -> Result<ExitCode> {
    let seeds: Vec<u64> = (0..a.episodes).collect();
    let runs: Vec<(Suite, Branch, f64)> = SWEEP_SUITES
        .iter()
        .flat_map(|&s| {
            SWEEP_BRANCHES
                .iter()
                .flat_map(move |&b| SWEEP_NOISE.iter().map(move |&n| (s, b, n)))
        })
        .collect();
    let total: usize = runs
        .iter()
        .map(|(s, _, _)| s.tasks().len() * seeds.len())
        .sum();
    let mut base = EpisodeOptions::default();
    a.conditions.apply(&mut base);
    let conditions =
        EvalReport::new(Suite::Tabletop, &base, &seeds, Vec::new(), false).conditions();
    println!(
        "sweep     {conditions} (noise varied), {} seeds per task",
        seeds.len()
    );
    // The output file is proven writable before the first episode.
    write_json(&a.json, &Vec::<EvalReport>::new())?;
    let stop = super::stop_on_ctrl_c()?;
    let bar = episode_bar(total);
    let rt = runtime()?;
    let mut reports: Vec<EvalReport> = Vec::new();
    let (mut done_before, mut ok) = (0, 0);
    for (suite, branch, noise) in runs {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        let mut opts = EpisodeOptions {
            branch,
            ..base.clone()
        };
        opts.oracle.noise_px = noise;
        let report = rt.block_on(run_suite_observed(
            suite,
            &seeds,
            &opts,
            Vec::new(),
            &stop,
            None,
            &mut |e| {
                if let SuiteEvent::Finished { done, record, .. } = e {
                    ok += record.success as usize;
                    bar.set_position((done_before + done) as u64);
                    bar.set_message(format!(
                        "{} {:?} {noise} px: {ok}/{} succeeded",
                        suite.name(),
                        branch,
                        done_before + done
                    ));
                }
            },
        ));
        done_before += report.episodes.len();
        reports.push(report);
        write_json(&a.json, &reports)?;
    }
    bar.finish_and_clear();
    println!("{}", sweep_table(&reports));
    println!("wrote {}", a.json.display());
    if reports.iter().any(|r| r.interrupted) || reports.len() < SWEEP_NOISE.len() * 4 {
        eprintln!("interrupted: the table holds the runs that finished");
        return Ok(ExitCode::from(super::INTERRUPTED));
    }
    Ok(ExitCode::SUCCESS)
}

/// Rows suite × branch, columns noise: success rates (episodes in brackets when a run stopped).
fn sweep_table(reports: &[EvalReport]) -> String {
    let mut out = format!("{:<10} {:<11}", "suite", "branch");
    for n in SWEEP_NOISE {
        out += &format!(" {:>15}", format!("{n} px"));
    }
    for suite in SWEEP_SUITES {
        for branch in SWEEP_BRANCHES {
            out += &format!("\n{:<10} {:<11}", suite.name(), format!("{branch:?}"));
            for n in SWEEP_NOISE {
                let cell = reports
                    .iter()
                    .find(|r| {
                        r.suite == suite.name()
                            && r.branch == format!("{branch:?}")
                            && r.noise_px == n
                    })
                    .map_or("-".to_string(), |r| {
                        let s = r.episodes.iter().filter(|e| e.success).count();
                        format!(
                            "{:.1}% ({s}/{})",
                            100.0 * r.success_rate(),
                            r.episodes.len()
                        )
                    });
                out += &format!(" {cell:>15}");
            }
        }
    }
    out
}

fn sim(a: EvalSimCli) -> Result<ExitCode> {
    if a.sweep {
        if a.dataset.dataset.is_some() {
            anyhow::bail!("--dataset records one suite, not a --sweep: run the suite alone");
        }
        return sweep(a);
    }
    let suite = Suite::parse(&a.suite)?;
    let mut opts = EpisodeOptions {
        branch: a.branch,
        ..Default::default()
    };
    a.conditions.apply(&mut opts);
    let seeds: Vec<u64> = (0..a.episodes).collect();
    let resumed = match &a.resume {
        Some(path) => {
            let text = pointact::input::read_text(path, pointact::input::MAX_DATA_BYTES)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            let earlier: EvalReport = serde_json::from_str(&text).map_err(|e| {
                anyhow::anyhow!("{} is not an eval sim report: {e}", path.display())
            })?;
            EvalReport::check_resumable(&earlier, suite, &opts, &seeds)
                .map_err(|why| anyhow::anyhow!("cannot resume from {}: {why}", path.display()))?;
            println!(
                "resumed   {} finished episodes from {}",
                earlier.episodes.len(),
                path.display()
            );
            earlier.episodes
        }
        None => Vec::new(),
    };
    // The dataset is opened (or refused) before anything else is written.
    let mut recorder = match &a.dataset.dataset {
        Some(_) => Some(open_suite_dataset(&a.dataset, suite, &opts)?),
        None => None,
    };
    // The output file is proven writable before the first episode.
    write_report(
        &a.json,
        &EvalReport::new(suite, &opts, &seeds, resumed.clone(), true),
    )?;
    let stop = super::stop_on_ctrl_c()?;
    let bar = episode_bar(suite.tasks().len() * seeds.len());
    let mut viz = a.rerun.open("pointact-eval")?;
    let mut dataset_err = None;
    let mut ok = 0;
    let mut finished = Vec::new();
    let mut last_write = Instant::now();
    let mut write_err = None;
    let report = runtime()?.block_on(run_suite_observed(
        suite,
        &seeds,
        &opts,
        resumed,
        &stop,
        recorder.as_mut(),
        &mut |e| match e {
            SuiteEvent::Recorded(kept) => stop_if_not_kept(kept, &bar, &mut dataset_err, &stop),
            SuiteEvent::Started { task, seed } => {
                if let Some(v) = viz.as_mut() {
                    v.begin_episode(&format!("{task} seed {seed}"));
                }
            }
            SuiteEvent::Episode(e) => {
                if let Some(v) = viz.as_mut() {
                    v.on_event(&e);
                }
            }
            SuiteEvent::Finished {
                done,
                total: _,
                record: r,
            } => {
                ok += r.success as usize;
                bar.set_position(done as u64);
                bar.set_message(format!("{ok}/{done} succeeded"));
                if let Some(v) = viz.as_mut() {
                    v.log_outcome(r.success, &r.detail);
                }
                finished.push(r.clone());
                // At most about once a second: the whole file is rewritten each time.
                if last_write.elapsed() >= Duration::from_secs(1) {
                    let partial = EvalReport::new(suite, &opts, &seeds, finished.clone(), true);
                    if let Err(e) = write_report(&a.json, &partial) {
                        write_err.get_or_insert(e);
                    }
                    last_write = Instant::now();
                }
            }
        },
    ));
    bar.finish_and_clear();
    // What finished is printed and saved before anything else can fail (a dead viewer).
    println!("{report}");
    write_report(&a.json, &report)?;
    println!("wrote {}", a.json.display());
    if let Some(e) = write_err {
        eprintln!(
            "warning: an intermediate write of {} failed: {e:#}",
            a.json.display()
        );
    }
    finish_viz(viz)?;
    settle_dataset(recorder.as_mut(), &mut dataset_err);
    if let Some(e) = dataset_err {
        anyhow::bail!("--dataset: an episode could not be written, the run stopped: {e}");
    }
    if report.interrupted {
        eprintln!(
            "interrupted: continue with the same arguments and --resume {}",
            a.json.display()
        );
        return Ok(ExitCode::from(super::INTERRUPTED));
    }
    Ok(ExitCode::SUCCESS)
}

/// The dataset every episode of `suite` goes to: one robot's, so a suite mixing arms is refused
/// before anything runs.
fn open_suite_dataset(
    d: &super::DatasetCli,
    suite: Suite,
    opts: &EpisodeOptions,
) -> Result<pointact::runner::record::DatasetRecorder> {
    let episodes: Vec<_> = suite
        .tasks()
        .iter()
        .map(|t| t.instantiate(0))
        .collect::<Result<_, _>>()?;
    let mut robots: Vec<&str> = episodes.iter().map(|e| e.robot.as_str()).collect();
    robots.sort();
    robots.dedup();
    if robots.len() > 1 {
        anyhow::bail!(
            "suite {} mixes arms ({}); a dataset holds one robot's episodes",
            suite.name(),
            robots.join(", ")
        );
    }
    let first = episodes
        .first()
        .ok_or_else(|| anyhow::anyhow!("suite {} has no task", suite.name()))?;
    d.open(first, opts)?
        .ok_or_else(|| anyhow::anyhow!("no --dataset folder given"))
}

/// The progress bar of a suite of `total` episodes.
fn episode_bar(total: usize) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} episodes ({eta}) {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// Writes the report atomically: a temporary file beside it, then a rename, so a reader (or an
/// interrupted run) never finds half a file.
fn write_report(path: &Path, report: &EvalReport) -> Result<()> {
    write_json(path, report)
}

/// Writes `value` as JSON atomically (see [`write_report`]).
fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "eval".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_string_pretty(value)?)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            anyhow::anyhow!("cannot write {}: {e}", path.display())
        })
}
