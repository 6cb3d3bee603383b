//! `pointact calibrate hand-eye`: where a fixed camera is in the robot base frame, from pose pairs,
//! a recorded session or the simulator; prints per-view residuals and writes the calibration file
//! only when the solve succeeds.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use super::runtime;

#[derive(Subcommand)]
pub enum CalibrateCommand {
    /// Eye-to-hand: where a fixed camera is in the robot base frame, from pose pairs of a target
    /// held by the gripper. Writes DIR/<camera>.toml only when the solve succeeds.
    HandEye(HandEyeCli),
}

#[derive(Args)]
pub struct HandEyeCli {
    /// Recorded pose pairs, JSON (format: calibration/README.md, "Recorded pose pairs").
    #[arg(long)]
    samples: Option<PathBuf>,
    /// Camera name: the file written is DIR/<camera>.toml (default: front; with --sim: sim).
    #[arg(long)]
    camera: Option<String>,
    /// tsai (Tsai-Lenz 1989) or park (Park-Martin 1994). Tsai keeps only the motion pairs that
    /// OpenCV >= 4.10 keeps (both rotations between about 17 and 116 degrees).
    #[arg(long, default_value = "park")]
    method: pointact::calibrate::Method,
    /// With --method tsai: use every motion pair, as OpenCV <= 4.9 did.
    #[arg(long)]
    tsai_all_pairs: bool,
    /// Folder of the calibration files.
    #[arg(long, default_value = "calibration")]
    out: PathBuf,
    /// A recorded session: numbered frame folders + poses.json (see calibration/README.md);
    /// the tag is detected in every frame.
    #[arg(long, conflicts_with = "samples")]
    frames: Option<PathBuf>,
    /// Calibrate the simulator's camera: the tag rides on the simulated xArm 6's tool, and the
    /// result is compared with the camera's true pose.
    #[arg(long, conflicts_with_all = ["samples", "frames"])]
    sim: bool,
    /// With --sim or --xarm: views to plan, 3 to 1000.
    #[arg(long, default_value_t = 24, value_parser = super::values::views)]
    views: usize,
    /// With --sim or --xarm: edge of the tag's black square, metres (0.01 to 1).
    #[arg(long, default_value_t = 0.10, value_parser = super::values::tag_size)]
    tag_size: f64,
    /// With --sim or --xarm: also write the captured session here (replayable with --frames).
    #[arg(long)]
    save_session: Option<PathBuf>,
    /// Calibrate on a robot: move this xArm (HOST or HOST:PORT; `emulate xarm --sim calibration`
    /// here) through the views, with the tag on its tool, and capture the camera at each.
    #[arg(long, conflicts_with_all = ["samples", "frames", "sim"])]
    xarm: Option<String>,
    /// With --xarm: driver settings (default: the built-in robot-configs/xarm6/driver.toml).
    #[arg(long, requires = "xarm")]
    driver: Option<PathBuf>,
    /// With --xarm: the camera to calibrate, realsense[:SERIAL] (default) or tcp:HOST:PORT.
    #[arg(long, requires = "xarm")]
    source: Option<String>,
    /// With --xarm (required): roughly where the camera is in the robot base frame, X,Y,Z metres
    /// (a tape measure is enough: the views turn the tag towards it).
    #[arg(long, requires = "xarm", value_parser = super::values::point3, allow_hyphen_values = true)]
    camera_at: Option<[f64; 3]>,
    /// With --xarm: centre of the views in the base frame, X,Y,Z metres.
    #[arg(long, requires = "xarm", value_parser = super::values::point3, allow_hyphen_values = true, default_value = "0.5,0,0.3")]
    views_centre: [f64; 3],
    /// With --xarm: move without asking first.
    #[arg(long, requires = "xarm")]
    yes: bool,
    /// With --xarm: fraction (0, 1] of the planned speed (default 0.25).
    #[arg(long, requires = "xarm", value_parser = super::values::speed_scale)]
    speed_scale: Option<f64>,
    /// Write the calibration even when the sanity check calls the solve implausible (rotation
    /// RMS > 2°, translation RMS > 20 mm or camera > 5 m from the base); prints a warning.
    #[arg(long)]
    force: bool,
}

pub fn run(which: CalibrateCommand) -> Result<ExitCode> {
    match which {
        CalibrateCommand::HandEye(a) => hand_eye(a),
    }
}

fn hand_eye(a: HandEyeCli) -> Result<ExitCode> {
    use pointact::calibrate::{self, file, sim, target::session};
    let camera = a
        .camera
        .clone()
        .unwrap_or_else(|| if a.sim { "sim" } else { "front" }.to_string());
    let mut truth = None;
    let options = calibrate::file::CalibrateOptions {
        solve: calibrate::HandEyeOptions {
            method: a.method,
            tsai: calibrate::TsaiOptions {
                opencv_4_10_pair_filter: !a.tsai_all_pairs,
            },
        },
        limits: calibrate::file::SanityLimits::default(),
        force: a.force,
    };
    let (s, path, poses, forced) = if let Some(samples_path) = &a.samples {
        let samples = file::load_samples(samples_path)?;
        let w = file::solve_check_and_write(&samples, options, &a.out, &camera)?;
        (w.solution, w.path, samples.len(), w.forced)
    } else {
        let (views, target) = if a.sim {
            let mut opts = sim::SimCalibrationOptions {
                views: a.views,
                ..Default::default()
            };
            opts.target.size_m = a.tag_size;
            let run = runtime()?.block_on(sim::capture_sim_session(&opts))?;
            for v in &run.skipped {
                eprintln!("skipped   view {}: {}", v.view, v.reason);
            }
            if let Some(dir) = &a.save_session {
                session::write_session(dir, &run.info, &run.views)?;
                println!("session   {}", dir.display());
            }
            truth = Some(run.base_from_camera);
            (run.views, run.info.target)
        } else if let Some(addr) = &a.xarm {
            let run = live_session(&a, addr)?;
            if let Some(dir) = &a.save_session {
                session::write_session(dir, &run.0, &run.1)?;
                println!("session   {}", dir.display());
            }
            (run.1, run.0.target)
        } else if let Some(dir) = &a.frames {
            let s = session::read_session(dir)?;
            (s.views, s.info.target)
        } else {
            anyhow::bail!(
                "give --samples FILE.json (recorded pose pairs), --frames DIR (a recorded session), \
                 --xarm ADDR (a robot) or --sim (format: calibration/README.md)"
            );
        };
        let c = calibrate::calibrate_views(&views, &target, options, &a.out, &camera)?;
        for v in &c.skipped {
            eprintln!("no tag    view {}: {}", v.view, v.reason);
        }
        (c.solution, c.path, c.used.len(), c.forced)
    };
    println!("hand-eye  {} ({poses} poses, eye-to-hand)", s.method);
    println!("sample    rotation (deg)  translation (mm)");
    for (i, r) in s.residuals.per_sample.iter().enumerate() {
        println!(
            "{i:>6}    {:>14.4}  {:>16.3}",
            r.rotation_deg, r.translation_mm
        );
    }
    let r = &s.residuals;
    println!(
        "rms       {:>14.4}  {:>16.3}\nmax       {:>14.4}  {:>16.3}",
        r.rotation_rms_deg, r.translation_rms_mm, r.rotation_max_deg, r.translation_max_mm
    );
    let print_pose = |name: &str, iso: &pointact::nalgebra::Isometry3<f64>| {
        let t = iso.translation.vector;
        let q = iso.rotation;
        println!(
            "{name} t = ({:.4}, {:.4}, {:.4}) m, q = (w {:.6}, x {:.6}, y {:.6}, z {:.6})",
            t.x, t.y, t.z, q.w, q.i, q.j, q.k
        );
    };
    print_pose("base_from_camera   ", &s.base_from_camera);
    print_pose("gripper_from_target", &s.gripper_from_target);
    if let Some(truth) = truth {
        let d = truth.inverse() * s.base_from_camera;
        println!(
            "truth     the simulator's camera: off by {:.3} mm, {:.4} deg",
            d.translation.vector.norm() * 1e3,
            d.rotation.angle().to_degrees()
        );
    }
    println!("wrote     {}", path.display());
    if let Some(report) = forced {
        eprintln!(
            "warning   {} is implausible and was written only because of --force: {report}",
            path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `--xarm`: the standard views on a robot, through the safety gate, after the user agreed; Ctrl-C
/// stops the arm. Returns the session's description and its views.
fn live_session(
    a: &HandEyeCli,
    addr: &str,
) -> Result<(
    pointact::calibrate::target::session::SessionInfo,
    Vec<pointact::calibrate::target::views::CalibrationView>,
)> {
    use pointact::calibrate::sim::SimCalibrationOptions;
    use pointact::calibrate::target::session::SessionInfo;
    use pointact::calibrate::target::views::{
        capture_views, default_tcp_from_target, standard_view_poses,
    };
    use pointact::nalgebra::Point3;
    use pointact::robot::Robot;
    let Some(eye) = a.camera_at else {
        anyhow::bail!(
            "--xarm needs --camera-at X,Y,Z: roughly where the camera is in the robot base frame \
             (metres; the views turn the tag towards it)"
        );
    };
    let settings = super::run_robot::xarm_settings(a.driver.as_deref(), addr)?;
    let model = std::sync::Arc::new(pointact::kinematics::RobotModel::builtin("xarm6")?);
    let spec: pointact::camera::CameraSpec = a.source.as_deref().unwrap_or("realsense").parse()?;
    let (mut camera, _) = super::run_robot::open_robot_camera(&spec)?;
    let mut target = SimCalibrationOptions::default().target;
    target.size_m = a.tag_size;
    let tcp_from_target = default_tcp_from_target(&model, 0.02);
    let poses = standard_view_poses(
        &Point3::from(eye),
        &Point3::from(a.views_centre),
        &tcp_from_target,
        a.views,
        SimCalibrationOptions::default().seed,
    );
    let safety = pointact::safety::SafetyConfig {
        speed_scale: a
            .speed_scale
            .unwrap_or(super::run_robot::HARDWARE_SPEED_SCALE),
        ..Default::default()
    };
    let question = format!(
        "move the xArm at {addr} through {} calibration views at speed scale {:.2} (tag {} mm \
         on the tool, nothing else within reach)?",
        poses.len(),
        safety.speed_scale,
        target.size_m * 1e3
    );
    if !super::run_robot::ask(&question, a.yes) {
        anyhow::bail!("not approved: nothing moved");
    }
    let run = runtime()?.block_on(async {
        let mut robot = pointact::robot::xarm::XarmRobot::connect(model.clone(), &settings)
            .await
            .with_context(|| format!("connecting to the xArm at {addr}"))?;
        let r = tokio::select! {
            r = capture_views(&mut robot, &mut camera, &poses, safety, &[]) => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        };
        match r {
            Some(r) => Ok::<_, anyhow::Error>(r?),
            None => {
                let stopped = robot.stop().await;
                Err(super::Interrupted(format!(
                    "interrupted by Ctrl-C: {}; nothing was written",
                    match stopped {
                        Ok(()) => "the arm was stopped".to_string(),
                        Err(e) => format!("the stop command FAILED ({e}): use the emergency stop"),
                    }
                ))
                .into())
            }
        }
    })?;
    for v in &run.skipped {
        eprintln!("skipped   view {}: {}", v.view, v.reason);
    }
    Ok((
        SessionInfo {
            robot: "xarm6".into(),
            gripper_frame: model.config.tip_link.clone(),
            target,
        },
        run.views,
    ))
}
