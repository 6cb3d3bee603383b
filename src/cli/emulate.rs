//! `pointact emulate`: robot controller emulators on this machine's loopback, for driver tests and
//! demos without hardware.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use pointact::kinematics::RobotModel;
use pointact::robot::xarm::emulator::{ControllerConfig, Emulator, EmulatorOptions, KinematicArm};

#[derive(Subcommand)]
pub enum EmulateCommand {
    /// The UFACTORY xArm controller: command socket, 30002 rich and 30000 real-time reports, the
    /// xArm Gripper behind the RS-485 tunnel (README, "xArm emulator").
    Xarm(XarmEmulateCli),
}

#[derive(Args)]
pub struct XarmEmulateCli {
    /// Command socket port on 127.0.0.1 (a controller's is 502, which needs root; 0 = any free
    /// port, printed at start).
    #[arg(long, default_value_t = 502)]
    port: u16,
    /// Rich report port (30002). The official SDK chooses the report layout by this number, so
    /// keep 30002 when an SDK client connects.
    #[arg(long, default_value_t = 30002)]
    report_port: u16,
    /// Real-time report port (30000).
    #[arg(long, default_value_t = 30000)]
    rt_port: u16,
    /// Firmware version string GET_VERSION answers ("axis,type,robot-sn,box-sn,vX.Y.Z"); it
    /// decides which code paths the SDK takes (robots.md §1.6).
    #[arg(long, default_value = "6,6,XI1304,AC1303,v2.3.0", value_parser = version)]
    version: String,
    /// Robot description the arm is modelled from (built-in name or folder with robot.toml).
    #[arg(long, default_value = "xarm6")]
    robot: String,
    /// Rich report rate (Hz).
    #[arg(long, default_value_t = 5.0)]
    report_hz: f64,
    /// Real-time report rate (Hz); the model is stepped at this rate too.
    #[arg(long, default_value_t = 250.0)]
    rt_hz: f64,
    /// Drive the built-in simulator's arm instead of the kinematic model.
    #[arg(long)]
    sim: bool,
}

fn version(s: &str) -> Result<String, String> {
    pointact::robot::xarm::proto::parse_version(s)
        .map(|_| s.to_string())
        .map_err(|_| {
            format!(
                "`{s}` is not \"axis,type,robot-sn,box-sn,vX.Y.Z\" (e.g. 6,6,XI1304,AC1303,v2.3.0)"
            )
        })
}

pub fn run(which: EmulateCommand) -> Result<ExitCode> {
    match which {
        EmulateCommand::Xarm(a) => xarm(a),
    }
}

fn xarm(a: XarmEmulateCli) -> Result<ExitCode> {
    if a.sim {
        return super::not_built(
            "`emulate xarm --sim` (a simulator-backed arm behind the emulator)",
        );
    }
    let model = Arc::new(RobotModel::resolve(&a.robot)?);
    let home = vec![0.0; model.joint_limits().len()];
    let arm = KinematicArm::new(model.clone(), home);
    let mut parts = a.version.split(',');
    let options = EmulatorOptions {
        command_port: a.port,
        report_port: a.report_port,
        rt_port: a.rt_port,
        report_hz: a.report_hz,
        rt_hz: a.rt_hz,
        controller: ControllerConfig {
            robot_sn: parts.nth(2).unwrap_or_default().to_string(),
            control_box_sn: parts.next().unwrap_or_default().to_string(),
            version: a.version.clone(),
        },
    };
    let rt = super::runtime()?;
    rt.block_on(async {
        let emulator = Emulator::bind(options, Box::new(arm))
            .await
            .context("starting the xArm emulator")?;
        println!(
            "xarm emulator  {} ({}), version {}",
            model.name(),
            model.source,
            a.version
        );
        println!("command        {}", emulator.command_addr());
        println!("report         {}", emulator.report_addr());
        println!("real-time      {}", emulator.rt_addr());
        println!("ready          (Ctrl-C ends)");
        std::io::stdout().flush()?;
        emulator
            .run(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        println!("stopped");
        Ok(ExitCode::SUCCESS)
    })
}
