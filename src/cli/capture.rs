//! `pointact capture`: frames from a RealSense into a recorded-frames folder.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct CaptureCli {
    /// Output folder; frames go to DIR/0000, DIR/0001, … (rgb.png, depth.png, camera.toml, frame.toml).
    #[arg(long)]
    out: PathBuf,
    /// How many frames to write.
    #[arg(long, default_value_t = 1)]
    frames: usize,
    /// Device frames per written frame: their depth is combined by a per-pixel temporal median
    /// (zeros ignored); 1 = no median.
    #[arg(long, default_value_t = 1)]
    median: usize,
    /// Serial number of the RealSense to open (default: the first one found).
    #[arg(long)]
    serial: Option<String>,
    /// A calibration file whose [extrinsics] place the camera in the robot base frame (default:
    /// identity, i.e. points stay in the camera frame).
    #[arg(long)]
    calibration: Option<PathBuf>,
    /// Replace the frames of a non-empty --out folder.
    #[arg(long)]
    force: bool,
}

#[cfg(not(feature = "realsense"))]
pub fn run(a: CaptureCli) -> Result<ExitCode> {
    let _ = a;
    eprintln!("{}", pointact::camera::NO_REALSENSE);
    Ok(ExitCode::from(super::NOT_BUILT))
}

#[cfg(feature = "realsense")]
pub fn run(a: CaptureCli) -> Result<ExitCode> {
    use pointact::camera::realsense::{device::RealSenseCamera, RealSenseOptions};
    use pointact::camera::{record, Camera};
    anyhow::ensure!(a.frames >= 1, "--frames must be at least 1");
    let base_from_camera = match &a.calibration {
        Some(path) => pointact::geometry::calibration::Extrinsics::load(path)?.base_from_camera,
        None => pointact::nalgebra::Isometry3::identity(),
    };
    // The device first: a failed open leaves --out untouched.
    let mut cam = RealSenseCamera::open(RealSenseOptions {
        serial: a.serial.clone(),
        median_frames: a.median,
        base_from_camera,
        ..Default::default()
    })?;
    let info = cam.info().clone();
    println!(
        "camera    {} serial {} firmware {}, depth scale {} m/unit",
        info.name, info.serial, info.firmware, info.depth_scale_m
    );
    record::prepare_out_dir(&a.out, a.force)?;
    for i in 0..a.frames {
        let frame = cam.capture()?;
        let dir = record::frame_dir(&a.out, i);
        record::write_frame(&frame, &dir)?;
        println!(
            "captured  {} ({} valid depth pixels)",
            dir.display(),
            frame.depth.valid_count()
        );
    }
    Ok(ExitCode::SUCCESS)
}
