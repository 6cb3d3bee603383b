//! `pointact emulate`: robot controller emulators on this machine (loopback sockets, a pty), for
//! driver tests and demos without hardware.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use pointact::kinematics::RobotModel;
use pointact::robot::dynamixel::emulator::Emulator as BusEmulator;
use pointact::robot::settings;
use pointact::robot::xarm::emulator::{ControllerConfig, Emulator, EmulatorOptions, KinematicArm};

#[derive(Subcommand)]
pub enum EmulateCommand {
    /// The UFACTORY xArm controller: command socket, 30002 rich and 30000 real-time reports, the
    /// xArm Gripper behind the RS-485 tunnel (docs/hardware.md).
    Xarm(XarmEmulateCli),
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
    /// decides which code paths the SDK takes (xArm-Python-SDK v1.18.4 `xarm/x3/base.py` compares
    /// it; docs/references.md §1).
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
    /// Drive the built-in simulator's arm instead of the kinematic model, in TASK's scene
    /// (default tabletop/pepper_in_pan; `calibration`: no objects, the hand-eye tag on the tool).
    /// The simulator's camera is served on --camera-port (`--camera tcp:127.0.0.1:PORT`); Ctrl-C
    /// ends and judges the task.
    #[arg(long, num_args = 0..=1, default_missing_value = pointact::sim::tasks::DEFAULT_TASK)]
    sim: Option<String>,
    /// With --sim: the episode seed (object layout).
    #[arg(long, default_value_t = 0, requires = "sim")]
    seed: u64,
    /// With --sim: port of the camera frame server on 127.0.0.1 (0 = any free port, printed).
    #[arg(long, default_value_t = 0, requires = "sim")]
    camera_port: u16,
    /// Connections served at once on each socket (and on the camera port); one more is closed as
    /// soon as it arrives, so clients cannot take the emulator's last file descriptor.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_connections: u64,
}

/// The scene `emulate xarm --sim calibration` serves: the calibration rig's.
pub const CALIBRATION_SCENE: &str = "calibration";

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
        EmulateCommand::Widowx(a) => widowx(a),
    }
}

fn xarm(a: XarmEmulateCli) -> Result<ExitCode> {
    let model = Arc::new(RobotModel::resolve(&a.robot)?);
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
        max_connections: a.max_connections as usize,
    };
    if let Some(task) = &a.sim {
        return xarm_sim(&a, task, options);
    }
    let home = vec![0.0; model.joint_limits().len()];
    let arm = KinematicArm::new(model.clone(), home);
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
        print_ports(&emulator)?;
        emulator
            .run(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        println!("stopped");
        Ok(ExitCode::SUCCESS)
    })
}

fn print_ports(emulator: &Emulator) -> Result<()> {
    println!("command        {}", emulator.command_addr());
    println!("report         {}", emulator.report_addr());
    println!("real-time      {}", emulator.rt_addr());
    println!("ready          (Ctrl-C ends)");
    std::io::stdout().flush()?;
    Ok(())
}

/// `--sim TASK`: the simulator's arm behind the emulator, its camera on a frame server; at the
/// end the simulator judges the task (what a person at a real robot would look at).
fn xarm_sim(a: &XarmEmulateCli, task: &str, options: EmulatorOptions) -> Result<ExitCode> {
    use pointact::camera::{net, Camera};
    use pointact::sim::devices::{SimArm, SimCamera};
    if a.robot != "xarm6" {
        bail!(
            "--sim drives the simulator's xArm 6; --robot {} is not it",
            a.robot
        );
    }
    let (world, model, episode, eye) = if task == CALIBRATION_SCENE {
        let target = pointact::calibrate::sim::SimCalibrationOptions::default().target;
        let rig = pointact::calibrate::sim::SimRig::new(&target)?;
        (
            rig.camera.world().clone(),
            rig.model.clone(),
            None,
            Some(rig.eye),
        )
    } else {
        let spec = pointact::sim::tasks::task(task)?;
        let ep = spec.instantiate(a.seed)?;
        let prepared = pointact::runner::prepare_episode(&ep)?;
        if prepared.model.name() != "xarm6" {
            bail!(
                "task {} is set up for {}; the xArm emulator drives an xArm 6",
                spec.full_id(),
                prepared.model.name()
            );
        }
        (prepared.world, prepared.model, Some(ep), None)
    };
    let arm = SimArm::new(world.clone(), model.clone(), model.home().to_vec())?;
    let mut camera = SimCamera::new(world.clone(), Default::default());
    let rt = super::runtime()?;
    rt.block_on(async {
        let emulator = Emulator::bind(options, Box::new(arm))
            .await
            .context("starting the xArm emulator")?;
        let frames = net::bind_local(a.camera_port)
            .await
            .context("starting the camera frame server")?;
        let camera_addr = frames.local_addr()?;
        match &episode {
            Some(ep) => println!(
                "xarm emulator  the simulator's xArm 6 in {} (seed {}): \"{}\"",
                ep.task, a.seed, ep.instruction
            ),
            None => println!(
                "xarm emulator  the simulator's xArm 6 with the calibration tag on its tool"
            ),
        }
        println!("camera         tcp:{camera_addr}");
        if let Some(e) = eye {
            // What a tape measure would give at a real robot (calibrate hand-eye --camera-at).
            println!("camera at      {:.2},{:.2},{:.2}", e.x, e.y, e.z);
        }
        print_ports(&emulator)?;
        let stop = tokio::signal::ctrl_c();
        tokio::pin!(stop);
        tokio::select! {
            r = emulator.run(std::future::pending::<()>()) => r?,
            _ = net::serve(frames, a.max_connections as usize, move || camera.capture(), std::future::pending::<()>()) => {}
            _ = &mut stop => {}
        }
        Ok::<_, anyhow::Error>(())
    })?;
    match &episode {
        Some(ep) => {
            let mut w = world.lock();
            let j = pointact::sim::judge(&mut w, ep);
            println!(
                "judge          {}: {}",
                if j.success { "SUCCESS" } else { "FAILURE" },
                j.detail
            );
            Ok(if j.success {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        None => {
            println!("stopped");
            Ok(ExitCode::SUCCESS)
        }
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
    let emulator =
        BusEmulator::start(dxl, &model, model.home()).context("starting the emulator")?;
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
