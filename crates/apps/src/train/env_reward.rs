//! An environment reward: the policy's points, executed in our simulator, scored by whether the
//! task succeeds. The released rewards grade points against annotated regions; this one grades
//! them by their consequence (a grasp point on the mug's rim that the gripper cannot close on, a
//! place point on the far edge of the plate the cup falls off), which is what a robot needs.
//!
//! A question is one pointing question the runner asks while planning a simulated task (REG for
//! the object, RRG for the place, VTG for the trace), asked about the planning frame. Its ground
//! truth, `<type>env</type>{…}`, names the episode (task, seed, branch), the question (ability and
//! the text it was asked with), the image sizes the policy's pixels refer to, and the answers to
//! the task's *other* questions, recorded from the simulator's oracle when the question was made.
//! Scoring is oracle-free: the episode is rebuilt from its seed, and the runner's questions are
//! answered from the response (the question asked) or from the recorded answers (the others; the
//! camera check's questions after the plan get the recorded answers too, and its verdict is not
//! part of the reward). The judge's verdict on the settled scene is the reward.
//!
//! Weights, ours (there is no environment reward in the released code): `overall = 0.1 ·
//! thinking_format + 0.1 · point_format + 0.8 · env_success`, the released format terms (the same
//! functions as `train::rewards`) beside the environment's.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::rewards::{point_format, thinking_format};
use crate::camera::Frame;
use crate::executor::{Branch, Event};
use crate::pointing::{
    parse_answer, Ability, ImageSize, ModelImageMap, Pointer, PointerError, Pointing,
};
use crate::runner::episode::{run_episode_with, run_now, EpisodeOptions};
use crate::sim::oracle::{OracleOptions, OraclePointer};
use crate::sim::tasks;

/// The pixel limits Embodied-R1 trained with (`min_pixels`, `max_pixels` of its data pipeline):
/// the policy's points are in the image resized within them.
pub const TRAIN_MIN_PIXELS: u64 = 512 * 512;
/// Upper limit of the same pipeline (1280 × 1280 px).
pub const TRAIN_MAX_PIXELS: u64 = 1280 * 1280;

/// Why an environment question could not be made or a response scored.
#[derive(Debug, thiserror::Error)]
pub enum EnvRewardError {
    /// The ground truth is not an `<type>env</type>` payload this code reads (a bad prefix, JSON or
    /// branch).
    #[error("the env ground truth is not valid: {0}")]
    GroundTruth(String),
    /// The simulated task could not be built or run, or its oracle plan failed.
    #[error("simulated task: {0}")]
    Task(String),
    /// Planning the task on that branch never asks a question of that ability.
    #[error("the task asks no {ability} question (branch {branch})")]
    NoSuchQuestion {
        /// The ability asked for.
        ability: Ability,
        /// The branch planned (`p` or `v`).
        branch: String,
    },
}

/// One answer the runner got while planning (frame pixels).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecordedAnswer {
    /// `reg`, `rrg`, `ofg` or `vtg`.
    pub ability: String,
    /// The text the question was asked with.
    pub query: String,
    /// The answer's points (frame pixels).
    pub points: Vec<[f64; 2]>,
}

/// The payload of `<type>env</type>`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EnvTruth {
    /// `suite/id`, e.g. `tabletop/cup_on_plate`.
    pub task: String,
    /// The episode's seed; with `task` it rebuilds the same scene.
    pub seed: u64,
    /// `p` (affordance) or `v` (visual trace).
    pub branch: String,
    /// The question the response answers (`reg`, `rrg` or `vtg`).
    pub ability: String,
    /// The text of that question.
    pub query: String,
    /// The frame's size, and the size of the image the policy saw (its pixels).
    pub image: [u32; 2],
    /// Width and height of the image the policy saw (px), the frame resized within
    /// [`TRAIN_MIN_PIXELS`]..[`TRAIN_MAX_PIXELS`].
    pub model_image: [u32; 2],
    /// The other questions' answers.
    pub answers: Vec<RecordedAnswer>,
}

/// A question made from a simulated task: the frame to show, the prompt, and the ground truth.
pub struct EnvQuestion {
    /// The planning frame the question is about.
    pub frame: Frame,
    /// The question as the policy is prompted with it.
    pub prompt: String,
    /// `<type>env</type>` followed by `truth` as JSON: what the scorer reads.
    pub ground_truth: String,
    /// The ground truth, unserialised.
    pub truth: EnvTruth,
    /// The oracle's answer to the question (frame pixels): a reference for tests and for data
    /// inspection, not part of the ground truth (scoring never sees it).
    pub reference: Vec<[f64; 2]>,
}

/// The environment reward's components, in this order: `overall`, `thinking_format`,
/// `point_format`, `env_success`; and the judge's sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvScore {
    /// Each component's name and value, in the order above (each in 0..=1).
    pub components: Vec<(&'static str, f64)>,
    /// The judge's sentence on the settled scene.
    pub detail: String,
}

impl EnvScore {
    /// The weighted total (the first component).
    pub fn overall(&self) -> f64 {
        self.components[0].1
    }
}

fn branch_of(name: &str) -> Result<Branch, EnvRewardError> {
    name.parse::<Branch>()
        .map_err(|e| EnvRewardError::GroundTruth(format!("branch {name:?}: {e}")))
}

/// Records the questions the runner asks while planning `task` at `seed` (a dry run with the
/// oracle) and makes the first `ability` question of them the one to answer.
pub async fn env_question(
    task: &str,
    seed: u64,
    ability: Ability,
) -> Result<EnvQuestion, EnvRewardError> {
    let branch = if ability == Ability::Vtg { "v" } else { "p" };
    let episode = tasks::task(task)
        .and_then(|t| t.instantiate(seed))
        .map_err(|e| EnvRewardError::Task(e.to_string()))?;
    let options = EpisodeOptions {
        branch: branch_of(branch)?,
        dry_run: true,
        ..EpisodeOptions::default()
    };
    let mut asked: Vec<RecordedAnswer> = Vec::new();
    let mut frame: Option<Frame> = None;
    let mut on_event = |e: Event<'_>| match e {
        Event::Captured(f) if frame.is_none() => frame = Some(f.clone()),
        Event::Asked {
            ability,
            query,
            pointing,
        } => asked.push(RecordedAnswer {
            ability: ability.as_str().to_string(),
            query: query.to_string(),
            points: pointing.points_px(),
        }),
        _ => {}
    };
    let result = run_episode_with(
        &episode,
        &options,
        |c| c,
        |truth| OraclePointer::new(truth, OracleOptions::default()),
        &mut on_event,
    )
    .await
    .map_err(|e| EnvRewardError::Task(e.to_string()))?;
    if let Some(e) = result.error {
        return Err(EnvRewardError::Task(format!(
            "the oracle's own plan failed: {e}"
        )));
    }
    let frame = frame.ok_or_else(|| EnvRewardError::Task("no frame was captured".into()))?;
    let i = asked
        .iter()
        .position(|a| a.ability == ability.as_str())
        .ok_or_else(|| EnvRewardError::NoSuchQuestion {
            ability,
            branch: branch.into(),
        })?;
    let question = asked.remove(i);
    let size = ImageSize::new(frame.rgb.width(), frame.rgb.height());
    let map = ModelImageMap::for_qwen25vl(size, TRAIN_MIN_PIXELS, TRAIN_MAX_PIXELS)
        .map_err(|e| EnvRewardError::Task(e.to_string()))?;
    let truth = EnvTruth {
        task: task.to_string(),
        seed,
        branch: branch.into(),
        ability: ability.as_str().to_string(),
        query: question.query.clone(),
        image: [size.width, size.height],
        model_image: [map.model().width, map.model().height],
        answers: asked,
    };
    Ok(EnvQuestion {
        frame,
        prompt: ability.prompt(&question.query),
        ground_truth: format!("<type>env</type>{}", json!(truth)),
        truth,
        reference: question.points,
    })
}

/// Scores `response` to the question in `ground_truth` (`<type>env</type>{…}`) by running it: a
/// plain function, the episode driven to its end in place (`runner::episode::run_now`).
pub(crate) fn env_reward(response: &str, ground_truth: &str) -> Result<EnvScore, EnvRewardError> {
    let payload = ground_truth
        .trim()
        .strip_prefix("<type>env</type>")
        .ok_or_else(|| {
            EnvRewardError::GroundTruth("it does not start with <type>env</type>".into())
        })?;
    let truth: EnvTruth =
        serde_json::from_str(payload).map_err(|e| EnvRewardError::GroundTruth(e.to_string()))?;
    let (think, point) = (thinking_format(response), point_format(response));
    let overall = |success: f64| 0.1 * think + 0.1 * point + 0.8 * success;
    let episode = tasks::task(&truth.task)
        .and_then(|t| t.instantiate(truth.seed))
        .map_err(|e| EnvRewardError::Task(e.to_string()))?;
    let options = EpisodeOptions {
        branch: branch_of(&truth.branch)?,
        ..EpisodeOptions::default()
    };
    let pointer = Replay {
        response: response.to_string(),
        truth: truth.clone(),
        answered: false,
    };
    let result = run_now(run_episode_with(
        &episode,
        &options,
        |c| c,
        |_| pointer,
        &mut |_| {},
    ))
    .map_err(|e| EnvRewardError::Task(e.to_string()))?;
    let success = f64::from(u8::from(result.success));
    Ok(EnvScore {
        components: vec![
            ("overall", overall(success)),
            ("thinking_format", think),
            ("point_format", point),
            ("env_success", success),
        ],
        detail: result.detail,
    })
}

/// Answers the runner from the response (the question it answers, the first time it is asked)
/// and from the recorded answers (every other question). Never the oracle.
struct Replay {
    response: String,
    truth: EnvTruth,
    answered: bool,
}

impl Pointer for Replay {
    fn name(&self) -> &str {
        "env replay"
    }

    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        let size = ImageSize::new(frame.rgb.width(), frame.rgb.height());
        if !self.answered
            && ability.as_str() == self.truth.ability
            && instruction == self.truth.query
        {
            self.answered = true;
            let [w, h] = self.truth.model_image;
            let map = ModelImageMap::new(size, ImageSize::new(w, h))
                .map_err(|e| PointerError::Backend(e.to_string()))?;
            let answer = parse_answer(&self.response, ability, map.model())?;
            return Ok(Pointing { answer, map });
        }
        let recorded = self
            .truth
            .answers
            .iter()
            .find(|a| a.ability == ability.as_str() && a.query == instruction)
            .ok_or_else(|| PointerError::NoSuchObject {
                phrase: instruction.to_string(),
            })?;
        // Recorded in frame pixels: the model image is the frame itself.
        let map =
            ModelImageMap::new(size, size).map_err(|e| PointerError::Backend(e.to_string()))?;
        let text = format!(
            "<point>{}</point>",
            json!(recorded
                .points
                .iter()
                .map(|p| [p[0].round() as i64, p[1].round() as i64])
                .collect::<Vec<_>>())
        );
        let answer = parse_answer(&text, ability, map.model())?;
        Ok(Pointing { answer, map })
    }
}
