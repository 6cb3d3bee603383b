//! `pointact point`: one image (or one camera frame), one question; points as JSON on stdout and
//! an overlay PNG; with a camera frame, the points lifted to 3D too.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use pointact::camera::{CameraError, CameraSpec};
use pointact::geometry::RobustDepthOptions;
use pointact::pointing::{overlay, Ability, ModelOptions, PointReport, PointerKind};

use super::{announce_model, end_stream, finish_viz, RerunCli, NOT_BUILT};

#[derive(Args)]
pub struct PointCli {
    /// The image, a PNG (8- or 16-bit, RGB/RGBA/gray; converted to 8-bit RGB).
    #[arg(long, required_unless_present = "camera")]
    image: Option<PathBuf>,
    /// Instead of --image, one frame from a camera: sim[:TASK], replay:DIR, realsense[:SERIAL] or
    /// tcp:HOST:PORT (a frame server).
    /// The model sees its RGB; the JSON adds the points lifted to 3D (camera and base frame)
    /// with the frame's depth, intrinsics and extrinsics.
    #[arg(long, conflicts_with = "image")]
    camera: Option<String>,
    /// reg, rrg, ofg or vtg.
    #[arg(long)]
    ability: String,
    /// The text that fills the ability's prompt template.
    #[arg(long)]
    instruction: String,
    /// qwen (local, default) or openai (remote server).
    #[arg(long, value_enum, default_value = "qwen")]
    pointer: PointerKind,
    #[command(flatten)]
    model: ModelOptions,
    /// Where to write the overlay PNG (default: <image stem>.<ability>.png beside the image).
    #[arg(long)]
    overlay: Option<PathBuf>,
    #[command(flatten)]
    rerun: RerunCli,
}

pub fn run(a: PointCli) -> Result<ExitCode> {
    let ability: Ability = a.ability.parse()?;
    anyhow::ensure!(
        !a.instruction.trim().is_empty(),
        "--instruction is empty: give the text the {} prompt asks about",
        ability.as_str().to_uppercase()
    );
    let overlay_path = overlay_path(&a, ability);
    // The answer must not cost the input: refuse an overlay that would overwrite the image, and
    // prove the overlay can be written before the model is asked.
    if let Some(image) = &a.image {
        let same = match (image.canonicalize(), overlay_path.canonicalize()) {
            (Ok(i), Ok(o)) => i == o,
            _ => image == &overlay_path,
        };
        anyhow::ensure!(
            !same,
            "--overlay {} is the input image: give another path (the image would be overwritten)",
            overlay_path.display()
        );
    }
    let parent = match overlay_path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    pointact::camera::record::check_writable(&parent)
        .map_err(|e| anyhow::anyhow!("cannot write the overlay {}: {e}", overlay_path.display()))?;
    let mut viz = a.rerun.open("pointact-point")?;
    let (img, frame) = match (&a.image, &a.camera) {
        (Some(path), _) => (pointact::camera::image_file::read_rgb(path)?, None),
        (None, Some(spec)) => {
            let spec: CameraSpec = spec.parse()?;
            let frame = match pointact::runner::open_camera(&spec).and_then(|mut c| c.capture()) {
                Ok(f) => f,
                Err(CameraError::NotInThisBuild(why)) => {
                    eprintln!("{why}");
                    return Ok(ExitCode::from(NOT_BUILT));
                }
                Err(e) => return Err(e.into()),
            };
            (frame.rgb.clone(), Some(frame))
        }
        (None, None) => anyhow::bail!("give --image PNG or --camera SPEC"),
    };
    announce_model(a.pointer, &a.model);
    let mut pointer =
        pointact::pointing::open(a.pointer, &a.model, Some(super::stream_to_stderr()))?;
    let (reply, pointing) = pointer.ask(&img, ability, &a.instruction)?;
    end_stream();
    if let Some(reply) = &reply {
        if reply.model_size != reply.original_size {
            eprintln!(
                "image     {}x{} seen by the model as {}x{}",
                reply.original_size.width,
                reply.original_size.height,
                reply.model_size.width,
                reply.model_size.height
            );
        }
        let t = reply.timings;
        if let Some(v) = viz.as_mut() {
            v.log_timing("vlm/vision", t.vision_s);
            v.log_timing("vlm/prefill", t.prefill_s);
            v.log_timing("vlm/decode", t.decode_s);
        }
        eprintln!(
            "timing    vision {:.2} s, prefill {:.2} s ({} tokens), decode {:.2} tok/s",
            t.vision_s,
            t.prefill_s,
            t.prompt_tokens,
            t.decode_tokens_per_s()
        );
    }
    let report = PointReport::new(
        ability,
        &a.instruction,
        pointing.as_ref().ok(),
        reply.as_ref().map(|r| r.text.as_str()),
    );
    if let Some(v) = viz.as_mut() {
        // A camera frame brings depth and a pose: log it whole (as `run` does), else the image.
        match &frame {
            Some(f) => v.on_event(&pointact::executor::Event::Captured(f)),
            None => v.log_image(&img),
        }
        if let Ok(p) = &pointing {
            v.log_answer(ability, &a.instruction, p);
        }
    }
    finish_viz(viz)?;
    let pointing = match pointing {
        Ok(p) => p,
        Err(e) => {
            println!("{}", serde_json::to_string_pretty(&report.with_error(&e))?);
            return Err(e.into());
        }
    };
    overlay::draw_points(&img, ability, &pointing.points_px())
        .save(&overlay_path)
        .map_err(|e| anyhow::anyhow!("cannot write overlay {}: {e}", overlay_path.display()))?;
    let mut json = serde_json::to_value(report.with_overlay(&overlay_path))?;
    if let Some(frame) = &frame {
        // Objects (REG/OFG/VTG) by a low depth percentile, places (RRG) by the median, as the
        // executor lifts them.
        let opts = match ability {
            Ability::Rrg => RobustDepthOptions::surface(),
            _ => RobustDepthOptions::grasp(),
        };
        let lifted = pointact::camera::lift::lift_points(frame, &pointing.points_px(), &opts);
        json["lifted"] = serde_json::to_value(lifted)?;
    }
    println!("{}", serde_json::to_string_pretty(&json)?);
    Ok(ExitCode::SUCCESS)
}

/// Where the overlay goes: `--overlay`, or `<image stem>.<ability>.png` beside the image.
fn overlay_path(a: &PointCli, ability: Ability) -> PathBuf {
    a.overlay.clone().unwrap_or_else(|| match &a.image {
        Some(image) => {
            let stem = image
                .file_stem()
                .map_or_else(|| "image".into(), |s| s.to_string_lossy().into_owned());
            image.with_file_name(format!("{stem}.{}.png", ability.as_str()))
        }
        None => format!("camera.{}.png", ability.as_str()).into(),
    })
}
