//! `pointact run --xarm ADDR | --widowx PORT`: one typed instruction on a physical arm (or one of
//! `pointact emulate`'s), from a real camera placed by a hand-eye calibration.
//!
//! What stands between the instruction and the motion, in order: the camera and its calibration
//! are opened and a frame is checked before the robot is connected; the pointer answers; the
//! executor plans; the safety gate checks every step at the chosen speed scale; the whole plan is
//! printed and the user must type `y` (unless `--yes`). Ctrl-C at any point stops the arm and exits
//! 130. The simulator's own `run` (no `--xarm`/`--widowx`) is in `run.rs`.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use pointact::camera::calibrated::Calibrated;
use pointact::camera::{Camera, CameraSpec};
use pointact::executor::{Branch, Event, Plan};
use pointact::kinematics::RobotModel;
use pointact::pointing::{ModelOptions, PointerKind};
use pointact::robot::dynamixel::widowx::WidowX;
use pointact::robot::settings::{self, DriverSettings};
use pointact::robot::xarm::XarmRobot;
use pointact::robot::Robot;
use pointact::runner::record::{robot::RobotTap, DatasetRecorder};
use pointact::runner::{run_task, RunError};
use pointact::safety::SafetyConfig;

use super::{announce_model, end_stream, runtime, stages::print_event, INTERRUPTED};

/// Default speed scale on a physical arm: a quarter of the planned speed, so a person watching
/// can stop a motion that looks wrong before it arrives.
pub const HARDWARE_SPEED_SCALE: f64 = 0.25;

/// Which arm, where.
pub enum Target {
    Xarm(String),
    Widowx(String),
}

/// Everything a robot run needs, as parsed by `run`.
pub struct RobotRun<'a> {
    pub target: Target,
    pub driver: Option<&'a Path>,
    pub instruction: &'a str,
    pub branch: Branch,
    pub camera: &'a str,
    pub calibration: Option<&'a Path>,
    pub pointer: PointerKind,
    pub model: &'a ModelOptions,
    pub speed_scale: Option<f64>,
    pub table_z: Option<f64>,
    pub dry_run: bool,
    pub yes: bool,
    pub dataset: &'a super::DatasetCli,
}

pub fn run(a: RobotRun<'_>) -> Result<ExitCode> {
    anyhow::ensure!(
        !a.instruction.trim().is_empty(),
        "--instruction is empty: say what to do, e.g. \"put the pepper in the pan\""
    );
    anyhow::ensure!(
        a.pointer != PointerKind::Oracle,
        "--pointer oracle reads the simulator's ground truth, which a robot run does not have: \
         use --pointer qwen (--model DIR) or --pointer openai (--endpoint URL)"
    );
    let robot_name = match a.target {
        Target::Xarm(_) => "xarm6",
        Target::Widowx(_) => "widowx250",
    };
    let model = Arc::new(RobotModel::builtin(robot_name)?);
    let driver = match a.driver {
        Some(p) => settings::load(p)?,
        None => settings::builtin(robot_name)?,
    };
    driver
        .check_model(&model.config)
        .with_context(|| format!("driver settings for {robot_name}"))?;

    // The camera first: a missing device or calibration ends the run before the arm is touched.
    let spec: CameraSpec = a.camera.parse()?;
    let (camera, camera_size) = open_camera(&spec, a.calibration)?;
    // The dataset next: a folder of another robot or size is refused before the arm is touched.
    let mut recorder = a.dataset.open_robot(&model, camera_size)?;
    // The table as stated: the flag, else driver.toml's; unstated, the camera's is used.
    let table_z = a.table_z.or(driver.table_z());
    let safety = SafetyConfig {
        table_z: table_z.unwrap_or(0.0),
        table_stated: table_z.is_some(),
        dry_run: a.dry_run,
        speed_scale: a.speed_scale.unwrap_or(HARDWARE_SPEED_SCALE),
        ..SafetyConfig::default()
    };
    println!(
        "robot     {robot_name} at {} (speed scale {:.2}{})",
        match &a.target {
            Target::Xarm(addr) | Target::Widowx(addr) => addr.as_str(),
        },
        safety.speed_scale,
        if a.dry_run { ", dry run" } else { "" }
    );
    announce_model(a.pointer, a.model);
    let mut pointer =
        pointact::pointing::open(a.pointer, a.model, Some(super::stream_to_stderr()))?;
    let rt = runtime()?;
    let outcome = match &a.target {
        Target::Xarm(addr) => {
            let s = xarm_settings(a.driver, addr)?;
            rt.block_on(async {
                let robot = XarmRobot::connect(model.clone(), &s)
                    .await
                    .with_context(|| format!("connecting to the xArm at {addr}"))?;
                drive(robot, camera, &mut pointer, &a, safety, recorder.as_mut()).await
            })?
        }
        Target::Widowx(port) => {
            let mut s = driver
                .as_dynamixel()
                .context("--widowx needs Dynamixel driver settings (kind = \"dynamixel\")")?
                .clone();
            s.bus.serial_port = port.to_string();
            rt.block_on(async {
                let robot = WidowX::connect(&s, model.clone())
                    .await
                    .with_context(|| format!("connecting to the WidowX on {port}"))?;
                drive(robot, camera, &mut pointer, &a, safety, recorder.as_mut()).await
            })?
        }
    };
    end_stream();
    Ok(outcome)
}

/// Opens `spec`, places it by the calibration file, and checks one frame (its size is returned).
/// A RealSense has no idea where it stands: without a calibration its points would be in the
/// camera frame, so it is refused.
fn open_camera(
    spec: &CameraSpec,
    calibration: Option<&Path>,
) -> Result<(Box<dyn Camera + Send>, (u32, u32))> {
    let base_from_camera = match calibration {
        Some(path) => Some(
            pointact::geometry::calibration::Extrinsics::load(path)
                .with_context(|| format!("--calibration {}", path.display()))?
                .base_from_camera,
        ),
        None if matches!(spec, CameraSpec::RealSense { .. }) => anyhow::bail!(
            "--camera realsense needs --calibration FILE (where the camera is in the robot base \
             frame): run `pointact calibrate hand-eye` first"
        ),
        None => None,
    };
    let (camera, size) = open_robot_camera(spec)?;
    let camera: Box<dyn Camera + Send> = match base_from_camera {
        Some(base_from_camera) => Box::new(Calibrated {
            camera,
            base_from_camera,
        }),
        None => camera,
    };
    Ok((camera, size))
}

/// Opens a camera that looks at a robot (not the simulator's own), and checks that it delivers a
/// valid frame before anything moves; returns it with the frame's size.
pub fn open_robot_camera(spec: &CameraSpec) -> Result<(Box<dyn Camera + Send>, (u32, u32))> {
    if let CameraSpec::Sim { .. } = spec {
        anyhow::bail!(
            "--camera sim is the built-in simulator's camera, which does not see this robot: \
             use realsense[:SERIAL], or tcp:HOST:PORT from `pointact emulate xarm --sim`"
        );
    }
    let mut camera = pointact::runner::open_camera(spec)?;
    let frame = camera.capture().context("first frame from the camera")?;
    frame.validate()?;
    println!(
        "camera    {}x{} ({} valid depth pixels)",
        frame.depth.width,
        frame.depth.height,
        frame.depth.valid_count()
    );
    Ok((camera, frame.rgb.dimensions()))
}

/// `HOST` or `HOST:PORT` (an IPv6 address in brackets with a port: `[::1]:502`).
fn split_host_port(addr: &str) -> Result<(String, Option<u16>)> {
    if let Some(rest) = addr.strip_prefix('[') {
        let (host, tail) = rest
            .split_once(']')
            .with_context(|| format!("--xarm `{addr}`: missing `]`"))?;
        let port = match tail.strip_prefix(':') {
            Some(p) => Some(
                p.parse()
                    .with_context(|| format!("--xarm `{addr}`: port"))?,
            ),
            None if tail.is_empty() => None,
            None => anyhow::bail!("--xarm `{addr}`: expected `[HOST]:PORT`"),
        };
        return Ok((host.to_string(), port));
    }
    match addr.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => Ok((
            host.to_string(),
            Some(
                port.parse()
                    .with_context(|| format!("--xarm `{addr}`: `{port}` is not a port number"))?,
            ),
        )),
        _ => Ok((addr.to_string(), None)),
    }
}

/// Asks the user to approve the printed plan. `--yes` approves; end of input or anything but
/// `y`/`yes` declines.
fn confirm(plan: &Plan, yes: bool) -> bool {
    ask(
        &format!("execute these {} steps on the robot?", plan.steps.len()),
        yes,
    )
}

/// Asks a yes/no question on stdin (`--yes` answers yes without asking); end of input or anything
/// but `y`/`yes` is no.
pub fn ask(question: &str, yes: bool) -> bool {
    use std::io::{BufRead, Write};
    if yes {
        println!("confirm   {question} --yes");
        return true;
    }
    print!("confirm   {question} [y/N] ");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    let answer = line.trim().to_ascii_lowercase();
    let ok = answer == "y" || answer == "yes";
    if !ok {
        println!();
    }
    ok
}

/// The xArm driver settings (`driver`, else the built-in ones) pointed at `addr` (HOST or
/// HOST:PORT, the command port), checked.
pub fn xarm_settings(
    driver: Option<&Path>,
    addr: &str,
) -> Result<pointact::robot::settings::XarmSettings> {
    let settings = match driver {
        Some(p) => settings::load(p)?,
        None => settings::builtin("xarm6")?,
    };
    let mut s = settings
        .as_xarm()
        .context("--xarm needs xArm driver settings (kind = \"xarm\")")?
        .clone();
    let (host, port) = split_host_port(addr)?;
    s.network.address = host;
    if let Some(p) = port {
        s.network.command_port = p;
    }
    DriverSettings::Xarm(s.clone()).validate("--xarm")?;
    Ok(s)
}

/// Runs the task on `robot` (every stage printed, the plan confirmed unless `--yes`), stopping it
/// on Ctrl-C; keeps the run in `recorder`'s dataset when there is one; prints the outcome and
/// returns the exit code.
async fn drive<R: Robot>(
    mut robot: R,
    camera: Box<dyn Camera + Send>,
    pointer: &mut pointact::pointing::ModelPointer,
    a: &RobotRun<'_>,
    safety: SafetyConfig,
    recorder: Option<&mut DatasetRecorder>,
) -> Result<ExitCode> {
    // With a dataset the camera is shared: the run captures through the tap, which also reads it
    // while steps run.
    let (mut camera, tap): (Box<dyn Camera + Send>, _) = match &recorder {
        Some(rec) => {
            let tap = RobotTap::start(
                camera,
                robot.model().clone(),
                rec.fps(),
                rec.frame_size(),
                rec.keeps_depth(),
            )
            .map_err(|e| anyhow::anyhow!("--dataset: {e}"))?;
            (Box::new(tap.camera()), Some(tap))
        }
        None => (camera, None),
    };
    let mut approved = false;
    let mut approve = |plan: &Plan| {
        approved = confirm(plan, a.yes);
        approved
    };
    let mut on_event = |e: Event<'_>| {
        end_stream();
        if let Some(tap) = &tap {
            tap.observe(&e);
        }
        print_event(&e);
    };
    let result = tokio::select! {
        r = run_task(
            &mut robot,
            &mut camera,
            pointer,
            a.instruction,
            a.branch,
            safety,
            &mut approve,
            &mut on_event,
        ) => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    let Some(result) = result else {
        // The run's future is gone (mid-motion, the servo feed with it); stop explicitly.
        let stopped = robot.stop().await;
        eprintln!(
            "\ninterrupt Ctrl-C: {}",
            match stopped {
                Ok(()) => "the arm was stopped".to_string(),
                Err(e) => format!("the stop command FAILED ({e}): use the emergency stop"),
            }
        );
        if tap.is_some() {
            eprintln!("dataset   the interrupted run is not kept");
        }
        return Ok(ExitCode::from(INTERRUPTED));
    };
    if let (Some(tap), Some(rec)) = (tap, recorder) {
        keep_run(tap, rec, &result, approved, a)?;
    }
    match result {
        Ok(o) if o.executed => {
            // The camera's look is a report, not the judge: the motions are done either way.
            let camera = match &o.verdict {
                Some(v) if v.verified => "verified by camera",
                Some(_) => "NOT verified by camera (see `verify` above)",
                None => "not checked by camera",
            };
            println!("outcome   DONE: every step executed, {camera}");
            Ok(ExitCode::SUCCESS)
        }
        Ok(_) => {
            println!("outcome   dry run: every motion planned and checked, nothing moved");
            Ok(ExitCode::SUCCESS)
        }
        Err(RunError::Declined) => {
            println!("outcome   not approved: nothing moved");
            Ok(ExitCode::FAILURE)
        }
        Err(e) if approved => {
            Err(anyhow::Error::new(e).context("the run stopped during motion; the arm was stopped"))
        }
        Err(e) => Err(anyhow::Error::new(e).context("the run ended before any motion")),
    }
}

/// Appends a finished robot run to the dataset (a run that moved: every step executed, or it
/// stopped during motion) and waits until it is written.
fn keep_run(
    tap: RobotTap,
    rec: &mut DatasetRecorder,
    result: &Result<pointact::runner::RunOutcome, RunError>,
    approved: bool,
    a: &RobotRun<'_>,
) -> Result<()> {
    let run = tap.finish();
    let outcome = match result {
        Ok(o) if o.executed => Ok(()),
        Err(e) if approved && !matches!(e, RunError::Declined) => Err(e.to_string()),
        // A dry run, a declined plan, or an error before the plan was approved.
        _ => {
            println!("dataset   episode left out: nothing moved");
            return Ok(());
        }
    };
    let kept = rec
        .keep_robot_run(run, a.instruction, a.branch, outcome)
        .and_then(|k| rec.settle().map(|_| k));
    println!("{}", super::recorded_line(&kept));
    kept.map(|_| ())
        .map_err(|e| anyhow::anyhow!("--dataset: the episode could not be written: {e}"))
}

#[cfg(test)]
mod tests {
    use super::split_host_port;

    #[test]
    fn xarm_addresses_with_and_without_ports() {
        let p = |s: &str| split_host_port(s).unwrap();
        assert_eq!(p("192.168.1.185"), ("192.168.1.185".into(), None));
        assert_eq!(p("127.0.0.1:15502"), ("127.0.0.1".into(), Some(15502)));
        assert_eq!(p("[::1]:502"), ("::1".into(), Some(502)));
        assert_eq!(p("::1"), ("::1".into(), None));
        assert!(split_host_port("host:99999").is_err());
        assert!(split_host_port("[::1").is_err());
    }
}
