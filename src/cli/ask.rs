//! `pointact ask` (Embodied-R over a video: key frames → descriptions → reasoning) and
//! `pointact keyframes` (the key-frame stage alone).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use pointact::ask::frames::{frames_dir, record_camera, record_dir, Video};
use pointact::ask::{ask, AskOptions, Describer, Stage};
use pointact::camera::keyframes::{select_keyframes, KeyframeOptions, Overlap};
use pointact::camera::{CameraError, CameraSpec};
use pointact::pointing::{ModelOptions, ModelPointer, PointerKind};
use pointact::train::consistency::{OpenAiReference, QwenReference, ReferenceModel};

use super::{announce_model, end_stream, finish_viz, RerunCli, NOT_BUILT};

/// Where the video comes from (one of the three).
#[derive(Args, Debug)]
pub struct VideoCli {
    /// A folder of images (.png, .jpg), taken in name order.
    #[arg(long, conflicts_with_all = ["record", "camera"])]
    frames: Option<PathBuf>,
    /// The rate of --frames' images (frames per second; default 1: every image is a sampled
    /// frame). Recordings and cameras give their own rate.
    #[arg(long, default_value_t = 1.0, value_parser = pointact::values::non_negative)]
    fps: f64,
    /// A recorded-frames folder (`pointact run --record`, `pointact capture`).
    #[arg(long, conflicts_with = "camera")]
    record: Option<PathBuf>,
    /// A live camera: realsense[:SERIAL], tcp:HOST:PORT, replay:DIR or sim[:TASK], recorded for
    /// --seconds.
    #[arg(long)]
    camera: Option<String>,
    /// How long to record from --camera (s).
    #[arg(long, default_value_t = 10.0, value_parser = pointact::values::non_negative)]
    seconds: f64,
}

impl VideoCli {
    /// The video, or the exit code of a camera this build lacks.
    fn load(&self) -> Result<Result<Video, ExitCode>> {
        let video = match (&self.frames, &self.record, &self.camera) {
            (Some(dir), _, _) => frames_dir(dir, self.fps)?,
            (_, Some(dir), _) => record_dir(dir)?,
            (_, _, Some(text)) => {
                let spec: CameraSpec = text.parse()?;
                let mut camera = match pointact::runner::open_camera(&spec) {
                    Ok(c) => c,
                    Err(CameraError::NotInThisBuild(why)) => {
                        eprintln!("{why}");
                        return Ok(Err(ExitCode::from(NOT_BUILT)));
                    }
                    Err(e) => return Err(e.into()),
                };
                eprintln!("camera    recording {} s from {text}", self.seconds);
                record_camera(&mut camera, self.seconds)?
            }
            (None, None, None) => anyhow::bail!("give --frames DIR, --record DIR or --camera SPEC"),
        };
        eprintln!(
            "video     {} frames at {:.3} fps",
            video.frames.len(),
            video.fps
        );
        Ok(Ok(video))
    }
}

#[derive(Args)]
pub struct KeyframesCli {
    #[command(flatten)]
    video: VideoCli,
    /// Overlap under which a frame becomes a key frame (released: 0.5).
    #[arg(long, default_value_t = 0.5, value_parser = pointact::values::probability)]
    threshold: f64,
    /// Copy the key frames here as 0000.png, 0001.png, … (refused when not empty).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn keyframes(a: KeyframesCli) -> Result<ExitCode> {
    if let Some(out) = &a.out {
        refuse_non_empty(out)?;
    }
    let video = match a.video.load()? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let kept = pointact::camera::keyframes::sample_indices(video.frames.len(), video.fps);
    let sampled: Vec<_> = kept.iter().map(|&i| video.frames[i].clone()).collect();
    let options = KeyframeOptions {
        overlap_threshold: a.threshold,
        ..KeyframeOptions::default()
    };
    let report = select_keyframes(&sampled, &options)?;
    println!(
        "sampled   {} of {} frames (1 fps)",
        kept.len(),
        video.frames.len()
    );
    for c in &report.compared {
        let overlap = match &c.overlap {
            Overlap::Ratio(r) => format!("overlap {r:.3}"),
            other => format!("{other:?}"),
        };
        println!(
            "frame {:>4} vs {:>4}: {:>4} matches, {:>4} inliers, {overlap}{}",
            kept[c.frame],
            kept[c.reference],
            c.matches,
            c.inliers,
            if c.keyframe { "  -> key frame" } else { "" }
        );
    }
    let chosen: Vec<usize> = report.selected.iter().map(|&i| kept[i]).collect();
    if let Some(note) = &report.note {
        println!("note      {note}");
    }
    println!("keyframes {chosen:?}");
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out)?;
        for (k, &i) in chosen.iter().enumerate() {
            let path = out.join(format!("{k:04}.png"));
            video.frames[i]
                .save(&path)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        }
        println!("wrote     {} key frames to {}", chosen.len(), out.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn refuse_non_empty(dir: &std::path::Path) -> Result<()> {
    let busy = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some());
    anyhow::ensure!(
        !busy,
        "--out {} is not empty: give an empty or new folder",
        dir.display()
    );
    Ok(())
}

#[derive(Args)]
pub struct AskCli {
    /// The question (multiple choice: put the options in it, e.g. "… A. left B. right").
    question: String,
    #[command(flatten)]
    video: VideoCli,
    /// The vision model that describes the key frames: qwen (local Qwen2.5-VL, --model) or
    /// openai (a server at --endpoint serving --model, e.g. Qwen2.5-VL-72B-Instruct as in the
    /// paper).
    #[arg(long, value_enum, default_value = "qwen")]
    vlm: PointerKind,
    #[command(flatten)]
    model: ModelOptions,
    /// The reasoning model: qwen (in process) or openai (a server).
    #[arg(long, value_enum, default_value = "qwen")]
    lm: PointerKind,
    /// qwen: a local folder or hub repo id of a Qwen2.5 text checkpoint (or a Qwen2.5-VL one,
    /// asked without images); openai: the model name the server serves.
    #[arg(long, default_value = "Qwen/Qwen2.5-3B-Instruct")]
    lm_model: String,
    /// The reasoning model's server (default: --endpoint).
    #[arg(long)]
    lm_endpoint: Option<String>,
    /// Most tokens of one key frame's description.
    #[arg(long, default_value_t = 512)]
    description_tokens: usize,
    /// Most tokens of the reasoning reply.
    #[arg(long, default_value_t = 1024)]
    reasoning_tokens: usize,
    /// Overlap under which a frame becomes a key frame (released: 0.5).
    #[arg(long, default_value_t = 0.5, value_parser = pointact::values::probability)]
    threshold: f64,
    #[command(flatten)]
    rerun: RerunCli,
}

/// The reasoning model as the reference-model trait the pipeline takes.
fn reasoner(pointer: ModelPointer) -> Box<dyn ReferenceModel> {
    match pointer {
        ModelPointer::Qwen(p) => Box::new(QwenReference::new(*p)),
        ModelPointer::Openai(p) => Box::new(OpenAiReference::new(*p)),
    }
}

pub fn run(a: AskCli) -> Result<ExitCode> {
    anyhow::ensure!(
        !a.question.trim().is_empty(),
        "the question is empty: ask something about the video"
    );
    anyhow::ensure!(
        a.vlm != PointerKind::Oracle && a.lm != PointerKind::Oracle,
        "--vlm and --lm take qwen or openai (the oracle answers only inside the simulator)"
    );
    let video = match a.video.load()? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let mut viz = a.rerun.open("pointact-ask")?;
    announce_model(a.vlm, &a.model);
    let mut describer: Box<dyn Describer> =
        match pointact::pointing::open(a.vlm, &a.model, Some(super::stream_to_stderr()))? {
            ModelPointer::Qwen(p) => p,
            ModelPointer::Openai(p) => p,
        };
    let lm_options = ModelOptions {
        model: a.lm_model.clone(),
        endpoint: a
            .lm_endpoint
            .clone()
            .unwrap_or_else(|| a.model.endpoint.clone()),
        ..a.model.clone()
    };
    announce_model(a.lm, &lm_options);
    let mut reasoner = reasoner(pointact::pointing::open(a.lm, &lm_options, None)?);
    let options = AskOptions {
        keyframes: KeyframeOptions {
            overlap_threshold: a.threshold,
            ..KeyframeOptions::default()
        },
        description_tokens: a.description_tokens,
        reasoning_tokens: a.reasoning_tokens,
        temperature: a.model.temperature,
    };
    let result = ask(
        &video,
        &a.question,
        describer.as_mut(),
        reasoner.as_mut(),
        &options,
        &mut |stage| {
            end_stream();
            print_stage(&stage, &video);
            if let (
                Some(v),
                Stage::Described {
                    k,
                    stamp_s,
                    image,
                    raw,
                    ..
                },
            ) = (viz.as_mut(), &stage)
            {
                v.log_keyframe(*k, *stamp_s, image, raw);
            }
        },
    );
    end_stream();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            finish_viz(viz)?;
            return Err(e.into());
        }
    };
    if let Some(v) = viz.as_mut() {
        v.log_reasoning(&a.question, &report.think, &report.answer);
    }
    finish_viz(viz)?;
    println!("think     {}", report.think);
    println!("answer    {}", report.answer);
    Ok(ExitCode::SUCCESS)
}

/// One stage on the terminal, as it ends.
fn print_stage(stage: &Stage<'_>, video: &Video) {
    match stage {
        Stage::Sampled { kept, total } => {
            println!("sampled   {} of {total} frames (1 fps)", kept.len())
        }
        Stage::Keyframes { frames, .. } => println!("keyframes {frames:?}"),
        Stage::Described {
            k,
            frame,
            description,
            ..
        } => {
            let name = video.names.get(*frame).map_or("", String::as_str);
            match &description.action {
                Some(action) => println!(
                    "frame {k}    {name}\n  action  {action}\n  view    {}",
                    description.view
                ),
                None => println!("frame {k}    {name}\n  view    {}", description.view),
            }
        }
        Stage::Reasoned { reply, .. } => println!("reply     {reply}"),
    }
}
