//! `pointact bench servo`: a checked trajectory streamed through `XarmRobot` (servo mode, one
//! SERVOJ request and reply per period) to the xArm emulator, against a peer in the same run:
//! the same servo loop feeding a sink that does nothing, which is what the timer alone delivers
//! on this machine. The ratio says what the wire, the emulator and the client add to the period
//! jitter.
//!
//! The emulator runs in this process on its own thread and runtime (as a separate controller
//! would), unless `--port` points at one already running (`pointact emulate xarm`).

use std::fmt;
use std::sync::Arc;

use crate::kinematics::{KinematicsError, RobotModel};
use crate::planning::{JointPath, Trajectory, TrajectoryError};
use crate::robot::servo::{self, ServoSink, ServoStats, ServoTiming};
use crate::robot::settings::{self, SettingsError, XarmSettings};
use crate::robot::xarm::emulator::{EmulatorError, EmulatorOptions, EmulatorThread, KinematicArm};
use crate::robot::xarm::XarmRobot;
use crate::robot::{Robot, RobotError};
use crate::safety::{CheckedTrajectory, SafetyConfig, SafetyError, SafetyGate};

/// Options of `pointact bench servo`.
pub struct ServoBenchArgs {
    /// Built-in robot name or folder (robot.toml, URDF, driver.toml).
    pub robot: String,
    /// Servo rate (Hz); the controller takes up to 250.
    pub rate_hz: f64,
    /// Length of the streamed trajectory (s); a shorter one than the joint limits allow is not
    /// sped up.
    pub seconds: f64,
    /// An emulator (or controller) to stream to: address and command, rich and real-time report
    /// ports. `None` starts one in this process.
    pub target: Option<(String, u16, u16, u16)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServoBenchError {
    #[error("--rate-hz must be in (0, 250] and --seconds in [0.5, 60]")]
    Args,
    #[error(transparent)]
    Kinematics(#[from] KinematicsError),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("robot `{0}` is not driven by an xArm controller")]
    NotXarm(String),
    #[error(transparent)]
    Trajectory(#[from] TrajectoryError),
    #[error("the benchmark trajectory did not pass the safety gate: {0}")]
    Safety(#[from] SafetyError),
    #[error(transparent)]
    Emulator(#[from] EmulatorError),
    #[error(transparent)]
    Robot(#[from] RobotError),
}

/// One streaming run's timing.
#[derive(Debug, Clone)]
pub struct ServoRow {
    pub name: String,
    pub stats: ServoStats,
}

impl ServoRow {
    /// Setpoints per second over the streamed span.
    pub(crate) fn achieved_hz(&self) -> f64 {
        let total: f64 = self.stats.periods_s.iter().sum();
        if total > 0.0 {
            self.stats.periods_s.len() as f64 / total
        } else {
            0.0
        }
    }
}

pub struct ServoBenchReport {
    pub cpu: String,
    pub robot: String,
    pub rate_hz: f64,
    pub seconds: f64,
    pub target: String,
    pub wire: ServoRow,
    pub peer: ServoRow,
}

/// The loop's own cost: a sink that accepts every setpoint at once.
struct NullSink;

impl ServoSink for NullSink {
    async fn send(&mut self, _q: &[f64]) -> Result<(), RobotError> {
        Ok(())
    }
    async fn stop(&mut self) -> Result<(), RobotError> {
        Ok(())
    }
}

/// A there-and-back joint trajectory from home lasting about `seconds`, checked at the model's
/// servo rate.
fn trajectory(model: &RobotModel, seconds: f64) -> Result<CheckedTrajectory, ServoBenchError> {
    let home = model.home().to_vec();
    let mut away = home.clone();
    away[0] += 0.5;
    let lim = &model.config.limits;
    let path = JointPath {
        waypoints: vec![home.clone(), away, home.clone()],
    };
    let t = Trajectory::time_parameterize(path, &lim.joint_velocity, &lim.joint_acceleration)?;
    let t = crate::planning::limit_tool_speed(t, model, lim.cartesian_speed)?;
    let t = if t.duration() < seconds {
        let factor = seconds / t.duration();
        t.slowed(factor)
    } else {
        t
    };
    Ok(SafetyGate::new(model, SafetyConfig::default()).check(t, &home, 1.0, &[])?)
}

/// Runs the benchmark (needs a tokio runtime with I/O and time).
pub async fn run(args: &ServoBenchArgs) -> Result<ServoBenchReport, ServoBenchError> {
    let ok = args.rate_hz.is_finite()
        && args.rate_hz > 0.0
        && args.rate_hz <= 250.0
        && (0.5..=60.0).contains(&args.seconds);
    if !ok {
        return Err(ServoBenchError::Args);
    }
    let model = Arc::new(RobotModel::resolve(&args.robot)?);
    // Where the model came from, the driver settings come from (built-in names first, as
    // `RobotModel::resolve` looks them up).
    let builtin = settings::BUILTIN_DRIVERS
        .iter()
        .any(|(n, _)| *n == args.robot);
    let driver = if builtin {
        settings::builtin(&args.robot)?
    } else {
        settings::load_for(std::path::Path::new(&args.robot))?
    };
    let mut settings: XarmSettings = driver
        .as_xarm()
        .cloned()
        .ok_or_else(|| ServoBenchError::NotXarm(args.robot.clone()))?;
    // The gate checks at the model's servo period: a copy of the model at the benchmark's rate.
    let mut at_rate = RobotModel::resolve(&args.robot)?;
    at_rate.config.servo_rate_hz = args.rate_hz;
    let checked = trajectory(&at_rate, args.seconds)?;

    let (_emulator, target) = match &args.target {
        Some((address, command, report, rt)) => {
            settings.network.address = address.clone();
            settings.network.command_port = *command;
            settings.network.state_report_port = *report;
            settings.network.realtime_report_port = *rt;
            (None, format!("{address}:{command}"))
        }
        None => {
            let home = model.home().to_vec();
            let options = EmulatorOptions {
                command_port: 0,
                report_port: 0,
                rt_port: 0,
                ..EmulatorOptions::default()
            };
            let emu =
                EmulatorThread::start(options, Box::new(KinematicArm::new(model.clone(), home)))?;
            settings.network.address = "127.0.0.1".into();
            settings.network.command_port = emu.ports[0];
            settings.network.state_report_port = emu.ports[1];
            settings.network.realtime_report_port = emu.ports[2];
            let target = format!("in-process emulator, 127.0.0.1:{}", emu.ports[0]);
            (Some(emu), target)
        }
    };

    let mut robot = XarmRobot::connect(model.clone(), &settings).await?;
    // The trajectory starts at home; an emulator started apart powers on elsewhere (all joints
    // 0). A planned move gets there first: a first setpoint far away is a controller error.
    let start = checked.trajectory().start().to_vec();
    robot.client().move_joint(&start, true).await?;
    robot.execute(&checked).await?;
    let wire = robot
        .last_servo_stats()
        .cloned()
        .ok_or_else(|| RobotError::Stopped("the servo loop kept no statistics".into()))?;
    let watchdog = ServoTiming::at(args.rate_hz).stop_after_s;
    let peer = servo::follow(&mut NullSink, &checked, watchdog).await?;
    Ok(ServoBenchReport {
        cpu: crate::cpu_model(),
        robot: model.name().to_string(),
        rate_hz: args.rate_hz,
        seconds: checked.trajectory().duration(),
        target,
        wire: ServoRow {
            name: "XarmRobot -> controller".into(),
            stats: wire,
        },
        peer: ServoRow {
            name: "timer only (peer)".into(),
            stats: peer,
        },
    })
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |s| format!("{:.3} ms", s * 1e3))
}

impl fmt::Display for ServoBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "bench servo  {} at {} Hz, {:.2} s trajectory",
            self.robot, self.rate_hz, self.seconds
        )?;
        writeln!(f, "cpu          {}", self.cpu)?;
        writeln!(f, "target       {}", self.target)?;
        writeln!(
            f,
            "{:<26} {:>9} {:>5} {:>11} {:>11} {:>11} {:>11}",
            "", "setpoints", "held", "achieved Hz", "p50 jitter", "p99 jitter", "max jitter"
        )?;
        for row in [&self.wire, &self.peer] {
            let j = |p| row.stats.jitter_percentile(self.rate_hz, p);
            writeln!(
                f,
                "{:<26} {:>9} {:>5} {:>11.2} {:>11} {:>11} {:>11}",
                row.name,
                row.stats.sent,
                row.stats.held,
                row.achieved_hz(),
                ms(j(50.0)),
                ms(j(99.0)),
                ms(j(100.0)),
            )?;
        }
        let p99 = |r: &ServoRow| r.stats.jitter_percentile(self.rate_hz, 99.0);
        match (p99(&self.wire), p99(&self.peer)) {
            (Some(w), Some(p)) if p > 0.0 => write!(f, "p99 jitter, wire / timer: {:.2}x", w / p),
            _ => write!(f, "p99 jitter, wire / timer: -"),
        }
    }
}

/// `XarmRobot` connected to an emulator started in this process for `bench soak servo`, the
/// settings as shipped; with the emulator (dropping it stops it) and a description.
pub(crate) async fn soak_robot(
    rate_hz: f64,
) -> Result<(XarmRobot, EmulatorThread, String), ServoBenchError> {
    let model = Arc::new(RobotModel::resolve("xarm6")?);
    let mut settings: XarmSettings = settings::builtin("xarm6")?
        .as_xarm()
        .cloned()
        .ok_or_else(|| ServoBenchError::NotXarm("xarm6".into()))?;
    let options = EmulatorOptions {
        command_port: 0,
        report_port: 0,
        rt_port: 0,
        ..EmulatorOptions::default()
    };
    let home = model.home().to_vec();
    let emu = EmulatorThread::start(options, Box::new(KinematicArm::new(model.clone(), home)))?;
    settings.network.address = "127.0.0.1".into();
    settings.network.command_port = emu.ports[0];
    settings.network.state_report_port = emu.ports[1];
    settings.network.realtime_report_port = emu.ports[2];
    let target = format!(
        "XarmRobot -> in-process emulator 127.0.0.1:{} ({rate_hz} Hz)",
        emu.ports[0]
    );
    let robot = XarmRobot::connect(model, &settings).await?;
    Ok((robot, emu, target))
}

/// [`trajectory`] for `robot`'s model checked at `rate_hz`.
pub(crate) fn there_and_back(
    robot: &XarmRobot,
    rate_hz: f64,
    seconds: f64,
) -> Result<CheckedTrajectory, ServoBenchError> {
    let mut at_rate = RobotModel::resolve(robot.model().name())?;
    at_rate.config.servo_rate_hz = rate_hz;
    trajectory(&at_rate, seconds)
}
