//! `pointact emulate widowx`: a WidowX 250 Dynamixel bus on a pseudo-terminal, for the driver or
//! any Dynamixel tool to open as its serial port without a robot.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use pointact::kinematics::RobotModel;
use pointact::robot::dynamixel::emulator::Emulator;
use pointact::robot::settings;

#[derive(Subcommand)]
pub enum EmulateCommand {
    /// WidowX 250 servo bus (Protocol 2.0) on a pty: prints the device path on stdout, then
    /// answers as the robot's 9 servos until Ctrl-C.
    Widowx(WidowxCli),
}

#[derive(Args)]
pub struct WidowxCli {
    /// Built-in robot (widowx250) or a folder holding robot.toml, the URDF and driver.toml.
    #[arg(long, default_value = "widowx250")]
    robot: String,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_parser = super::values::non_negative)]
    seconds: Option<f64>,
}

pub fn run(which: EmulateCommand) -> Result<ExitCode> {
    match which {
        EmulateCommand::Widowx(a) => widowx(a),
    }
}

fn widowx(a: WidowxCli) -> Result<ExitCode> {
    let model = RobotModel::resolve(&a.robot)?;
    let driver = if settings::BUILTIN_DRIVERS.iter().any(|(n, _)| *n == a.robot) {
        settings::builtin(&a.robot)?
    } else {
        settings::load_for(std::path::Path::new(&a.robot))?
    };
    let Some(dxl) = driver.as_dynamixel() else {
        bail!(
            "robot `{}` is driven by `{}`, not a Dynamixel bus",
            a.robot,
            driver.kind()
        );
    };
    driver.check_model(&model.config)?;
    let emulator = Emulator::start(dxl, &model, model.home()).context("starting the emulator")?;
    // The path alone on stdout, so a script can read it; the explanation on stderr.
    println!("{}", emulator.path().display());
    std::io::stdout().flush()?;
    eprintln!(
        "emulating {} servos of `{}` (ids {:?}) at the home pose; baud rate is ignored on a pty.\n\
         Point bus.serial_port of a driver.toml at {} (or any Dynamixel tool). Ctrl-C stops.",
        dxl.servo_ids().len(),
        model.name(),
        dxl.servo_ids(),
        emulator.path().display()
    );
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if a.seconds
            .is_some_and(|s| start.elapsed().as_secs_f64() >= s)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(emulator);
    Ok(ExitCode::SUCCESS)
}
