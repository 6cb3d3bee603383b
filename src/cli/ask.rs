//! `pointact ask` (Embodied-R over a video: key frames → descriptions → reasoning) and
//! `pointact keyframes` (the key-frame stage alone).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use pointact::ask::frames::{frames_dir, record_camera, record_dir, Video};
use pointact::ask::{ask, video_keyframes, AskOptions, Describer, Stage, VideoKeyframes};
use pointact::camera::keyframes::{KeyframeOptions, Overlap};
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
    let options = KeyframeOptions {
        overlap_threshold: a.threshold,
        ..KeyframeOptions::default()
    };
    let VideoKeyframes {
        sampled: kept,
        report,
        frames: chosen,
    } = video_keyframes(&video, &options)?;
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
    #[command(flatten)]
    reasoning: ReasoningCli,
    #[command(flatten)]
    rerun: RerunCli,
}

/// The reasoning model and the pipeline's limits (`ask`, `eval spatial`).
#[derive(Args)]
pub struct ReasoningCli {
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
}

impl ReasoningCli {
    /// The reasoning model (its options are `base`'s with the --lm-* flags), as the
    /// reference-model trait the pipeline takes.
    pub fn open(&self, base: &ModelOptions) -> Result<Box<dyn ReferenceModel>> {
        anyhow::ensure!(
            self.lm != PointerKind::Oracle,
            "--lm takes qwen or openai (the oracle answers only inside the simulator)"
        );
        let options = ModelOptions {
            model: self.lm_model.clone(),
            endpoint: self
                .lm_endpoint
                .clone()
                .unwrap_or_else(|| base.endpoint.clone()),
            ..base.clone()
        };
        announce_model(self.lm, &options);
        Ok(match pointact::pointing::open(self.lm, &options, None)? {
            ModelPointer::Qwen(p) => Box::new(QwenReference::new(*p)),
            ModelPointer::Openai(p) => Box::new(OpenAiReference::new(*p)),
        })
    }

    /// The pipeline's options, the reasoning sampled at `temperature`.
    pub fn ask_options(&self, temperature: f64) -> AskOptions {
        AskOptions {
            keyframes: KeyframeOptions {
                overlap_threshold: self.threshold,
                ..KeyframeOptions::default()
            },
            description_tokens: self.description_tokens,
            reasoning_tokens: self.reasoning_tokens,
            temperature,
        }
    }
}

pub fn run(a: AskCli) -> Result<ExitCode> {
    anyhow::ensure!(
        !a.question.trim().is_empty(),
        "the question is empty: ask something about the video"
    );
    anyhow::ensure!(
        a.vlm != PointerKind::Oracle,
        "--vlm takes qwen or openai (the oracle describes only simulated sequences: eval spatial)"
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
    let mut reasoner = a.reasoning.open(&a.model)?;
    let options = a.reasoning.ask_options(a.model.temperature);
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

#[derive(Args)]
pub struct EvalSpatialCli {
    /// The questions (`questions.jsonl` of `train spatial-data`; the frames are beside it).
    #[arg(long)]
    questions: PathBuf,
    /// Who describes the key frames: oracle (the simulator's own words: the table measures the
    /// reasoning alone), qwen (local Qwen2.5-VL, --model) or openai (a server).
    #[arg(long, value_enum, default_value = "oracle")]
    vlm: PointerKind,
    #[command(flatten)]
    model: ModelOptions,
    #[command(flatten)]
    reasoning: ReasoningCli,
    /// Ask only the first N questions.
    #[arg(long)]
    limit: Option<usize>,
}

pub fn eval_spatial(a: EvalSpatialCli) -> Result<ExitCode> {
    use pointact::ask::eval::{eval_spatial, DescriberChoice};
    let mut model: Option<Box<dyn Describer>> = match a.vlm {
        PointerKind::Oracle => None,
        kind => {
            announce_model(kind, &a.model);
            Some(match pointact::pointing::open(kind, &a.model, None)? {
                ModelPointer::Qwen(p) => p,
                ModelPointer::Openai(p) => p,
            })
        }
    };
    let describer = match model.as_mut() {
        Some(d) => DescriberChoice::Model(d.as_mut()),
        None => DescriberChoice::Oracle,
    };
    let mut reasoner = a.reasoning.open(&a.model)?;
    let options = a.reasoning.ask_options(a.model.temperature);
    let mut unanswered = 0usize;
    let tally = eval_spatial(
        &a.questions,
        describer,
        reasoner.as_mut(),
        &options,
        a.limit,
        &mut |q, row, i, total| {
            if row.note.is_some() {
                unanswered += 1;
            }
            let said = match (&row.answer, &row.note) {
                (Some(answer), _) => format!("answer {answer:?}"),
                (None, Some(note)) => note.clone(),
                (None, None) => String::new(),
            };
            eprintln!(
                "[{}/{total}] {} score {:.2} (truth {}): {said}",
                i + 1,
                row.id,
                row.score,
                q.answer
            );
        },
    )?;
    println!("{tally}");
    if unanswered > 0 {
        println!("{unanswered} questions got no answer in the <think>/<answer> format (scored 0)");
    }
    Ok(ExitCode::SUCCESS)
}
