//! Robot-R1's multiple-choice questions (arXiv 2506.00070), made from demonstrations recorded in
//! our simulator, and Robot-R1's reward.
//!
//! Robot-R1's code is not released; what is built here follows the paper and secondary summaries
//! of it (docs/references.md §9). Where they leave a choice open, the choice made is named below.
//!
//! # Demonstrations ([`record_demonstration`])
//! The oracle pointer runs the task on its seeded episode (`runner::run_prepared`, the same path
//! as `pointact run`) on `sim::devices::SimRobot`, whose step observer keeps every physics step's
//! joint state (the states the Moved events carry) and a snapshot of the scene every
//! `sample_every_s` of simulated time. The end
//! effector's position is the TCP's (`RobotModel::fk`), the gripper state the commanded one
//! (open/closed) and the measured finger gap. Only episodes the judge calls a success are used
//! (Robot-R1 learns from expert demonstrations); the others are counted in the [`Summary`].
//!
//! # Keyframes ([`keyframes`], ARM-style)
//! As ARM / PerAct's keypoint discovery: a state is a keyframe where the gripper's open/close
//! command changes (taken where the fingers have finished: the last still state before the arm
//! moves again), where the arm comes to rest (the first state of a run whose joint speed, over one
//! physics step, stays below `stop_speed`, default 0.03 rad/s: above half the largest change of
//! speed in one step at the joint acceleration limits, so the instant a trapezoidal profile passes
//! through rest between two chained motions is caught; a run must last `min_rest_s`, default 0),
//! and the last state. The *next waypoint* of a state is the first keyframe after it whose position is at least
//! `min_move_m` away (a gripper keyframe at the same place is not a place to move to).
//!
//! # Questions (three types, four options A–D, exactly one correct)
//! Each sampled state t (every `sample_every_s` along the demonstration, with the camera frame
//! rendered at that moment) gives, when it has a next waypoint k:
//! * **waypoint**: given the metadata, s_t and the image, which position is the next waypoint
//!   (s_k's xyz);
//! * **state**: given the metadata and the image, which position is the end effector at (s_t);
//! * **movement**: given the metadata, s_t and the image, which words describe s_k − s_t: the
//!   dominant axis (`forward`/`backward` = ±x, `left`/`right` = ±y, `up`/`down` = ±z in the base
//!   frame) with "slightly " in front when that component is under `slight_m` (default 5 cm),
//!   e.g. "slightly move backward".
//!
//! Distractors, drawn from a generator seeded by the episode seed (so questions are reproducible):
//! positions from the **reachable workspace**: uniform in the robot's workspace box (`robot.toml`)
//! above the table, kept only where IK puts the TCP there pointing down (the tabletop grasp
//! orientation), at least `delta_m` from the truth and from each other. δ defaults to **4 cm**:
//! the papers leave it unspecified; 4 cm is about half the gripper's opening, so no two options
//! could be the same grasp, and it is 40 times the printed precision (1 mm). Movement distractors
//! are three of the five other directions, each with "slightly" or not at random (never the
//! truth's direction with the other magnitude word, which would make the threshold the question).
//! The four options are shuffled by the same generator.
//!
//! The prompt carries Robot-R1's metadata: the axis directions, a reference point (the table
//! centre, on its top face), and the gripper's opening as a scale, all in metres in the robot base
//! frame; then the task, the state (except for the state question), the options, and the R1
//! think/answer instruction.
//!
//! # Output ([`generate`])
//! `OUT/robot_r1-<suite>-<id>.jsonl`, one [`QuestionRecord`] a line, with the frames as PNG under
//! `OUT/images/` (the record's `image` is relative to `OUT`). The fields the GRPO trainer reads
//! are `image`, `task_type` (`robot_r1`), `question` and `ground_truth`
//! (`<type>robot_r1</type>B`); the rest documents the question.
//!
//! # Reward ([`reward`])
//! `R = r_format + r_answer`, **unweighted** (0, 1 or 2), as the secondary sources describe it
//! (one summary's 0.4/0.6 weights with partial credit is unsupported and not used): `r_format` is
//! ms-swift's `Format` (the think/answer full match of [`super::consistency::format_reward`]);
//! `r_answer` is 1 when the letter of the first `<answer>…</answer>` block (or of the whole response
//! when there is none), normalised with Embodied-R's letter normaliser, equals the ground truth's
//! letter. Reading the answer block rather than the whole text (Embodied-R reads the whole text)
//! keeps an option letter mentioned in the reasoning from being taken for the answer.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::sync::{Arc, Mutex};

use image::RgbImage;
use k::nalgebra::{Isometry3, Translation3};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::consistency::{format_reward, normalize_choice, py_strip};
use crate::executor::Branch;
use crate::kinematics::{IkOptions, IkSolver, RobotModel};
use crate::robot::JointState;
use crate::runner::episode::sim_camera;
use crate::runner::{prepare_episode, EpisodeOptions};
use crate::sim::devices::SimRobot;
use crate::sim::oracle::OraclePointer;
use crate::sim::render::{render, RenderOptions};
use crate::sim::tasks;
use crate::sim::RenderScene;

/// The task type of the records and of the ground-truth envelope.
pub(crate) const TASK_TYPE: &str = "robot_r1";
/// Default minimum distance between position options, m (see the module docs).
pub(crate) const DEFAULT_DELTA_M: f64 = 0.04;
/// Option letters.
pub(crate) const LETTERS: [char; 4] = ['A', 'B', 'C', 'D'];

/// The three question types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionKind {
    /// Which position is the next keyframe (given the current state and image).
    Waypoint,
    /// Which position is the end effector at (given the image).
    State,
    /// Which direction does the end effector move to reach the next keyframe.
    Movement,
}

impl QuestionKind {
    pub(crate) const ALL: [QuestionKind; 3] = [
        QuestionKind::Waypoint,
        QuestionKind::State,
        QuestionKind::Movement,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            QuestionKind::Waypoint => "waypoint",
            QuestionKind::State => "state",
            QuestionKind::Movement => "movement",
        }
    }
}

/// How questions are made.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestionOptions {
    /// Minimum distance between position options (truth and distractors), m.
    pub delta_m: f64,
    /// Simulated time between sampled states (each gets a frame and its questions), s.
    pub sample_every_s: f64,
    /// A movement whose dominant component is shorter than this is "slight", m.
    pub slight_m: f64,
    /// The next waypoint must be at least this far from the current position, m.
    pub min_move_m: f64,
    /// Joint speed below which the arm counts as at rest, rad/s.
    pub stop_speed: f64,
    /// How long the arm must stay below `stop_speed` to have come to rest, s.
    pub min_rest_s: f64,
    /// Which question types to make.
    pub kinds: Vec<QuestionKind>,
    /// The executor branch the oracle demonstration uses.
    pub branch: Branch,
}

impl Default for QuestionOptions {
    fn default() -> Self {
        QuestionOptions {
            delta_m: DEFAULT_DELTA_M,
            sample_every_s: 0.5,
            slight_m: 0.05,
            min_move_m: 0.01,
            stop_speed: 0.03,
            min_rest_s: 0.0,
            kinds: QuestionKind::ALL.to_vec(),
            branch: Branch::Affordance,
        }
    }
}

/// Errors of making Robot-R1 questions or reading their ground truth.
#[derive(Debug, thiserror::Error)]
pub enum RobotR1Error {
    /// The task could not be found, built or run; `message` says what failed.
    #[error("task {task}: {message}")]
    Task {
        /// The task as named.
        task: String,
        /// What failed.
        message: String,
    },
    /// The question options are invalid (a distance or interval not above 0, no question types).
    #[error("invalid question options: {0}")]
    Options(String),
    /// Not enough distractor positions that far apart could be drawn from the workspace.
    #[error(
        "could not draw {wanted} distractors at least {delta_m} m apart from the reachable \
         workspace in {tries} tries: lower the distance (delta)"
    )]
    Distractors {
        /// Distractors asked for.
        wanted: usize,
        /// Least distance between the options, m.
        delta_m: f64,
        /// Draws tried.
        tries: usize,
    },
    /// A file or folder could not be written.
    #[error("{path}: {message}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The error, in words.
        message: String,
    },
    /// A ground truth without a `<type>…</type>` envelope or without a letter after it.
    #[error("not a Robot-R1 ground truth (`<type>robot_r1</type>X`): {0:?}")]
    GroundTruth(String),
}

// ---------------------------------------------------------------------------------------------
// The recording arm.

/// One recorded physics step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DemoState {
    /// Simulation time, s.
    pub stamp_s: f64,
    /// Arm joints, rad.
    pub q: Vec<f64>,
    /// TCP position in the robot base frame, m.
    pub xyz: [f64; 3],
    /// Measured finger gap, m.
    pub gripper_width: f64,
    /// The last gripper command closed the fingers.
    pub gripper_closed: bool,
}

/// What a demonstration keeps, fed by a `SimRobot` step observer: every physics step's state and
/// a scene snapshot every `snapshot_every` steps.
struct Recording {
    model: Arc<RobotModel>,
    history: Vec<DemoState>,
    snapshot_every: usize,
    snapshots: Vec<(usize, RenderScene)>,
    /// The first FK failure (a state the model cannot place), reported after the run.
    error: Option<String>,
}

impl Recording {
    fn push(&mut self, w: &crate::sim::SimWorld, state: &JointState) {
        let tcp = match self.model.fk(&state.q) {
            Ok(t) => t.translation.vector,
            Err(e) => {
                self.error.get_or_insert_with(|| e.to_string());
                return;
            }
        };
        if self.history.len().is_multiple_of(self.snapshot_every) {
            self.snapshots.push((self.history.len(), w.render_scene()));
        }
        self.history.push(DemoState {
            stamp_s: w.time(),
            q: state.q.clone(),
            xyz: [tcp.x, tcp.y, tcp.z],
            gripper_width: state.gripper_width,
            // The command, not the gap: fingers closed on an object stop short of closing.
            gripper_closed: w.robot_command().1 < 0.5,
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Demonstrations and keyframes.

/// A recorded oracle demonstration.
pub struct Demonstration {
    /// `suite/id`.
    pub task: String,
    /// The episode's seed.
    pub seed: u64,
    /// The task's language instruction.
    pub instruction: String,
    /// Whether the judge says the task was done.
    pub success: bool,
    /// The judge's words (or the run's error).
    pub detail: String,
    /// Every recorded physics step, in order.
    pub states: Vec<DemoState>,
    /// Indices into `states` (see [`keyframes`]).
    pub keyframes: Vec<usize>,
    /// The camera's frame at sampled states: `(state index, image)`.
    pub frames: Vec<(usize, RgbImage)>,
    /// Table centre on its top face, base frame, m.
    pub table_center: [f64; 3],
    /// Height of the table's top face, base frame, m.
    pub table_z: f64,
    /// The robot's kinematic model.
    pub model: Arc<RobotModel>,
}

/// Runs the oracle pointer through `task` at `seed` and records it (see the module docs).
pub(crate) fn record_demonstration(
    task: &str,
    seed: u64,
    options: &QuestionOptions,
) -> Result<Demonstration, RobotR1Error> {
    let err = |message: String| RobotR1Error::Task {
        task: task.to_owned(),
        message,
    };
    let episode = tasks::task(task)
        .and_then(|t| t.instantiate(seed))
        .map_err(|e| err(e.to_string()))?;
    let prepared = prepare_episode(&episode).map_err(|e| err(e.to_string()))?;
    let world = prepared.world.clone();
    let model = prepared.model.clone();
    let dt = world.lock().dt();
    let every = ((options.sample_every_s / dt).round() as usize).max(1);
    let recording = Arc::new(Mutex::new(Recording {
        model: model.clone(),
        history: Vec::new(),
        snapshot_every: every,
        snapshots: Vec::new(),
        error: None,
    }));
    let sink = recording.clone();
    let mut robot = SimRobot::new(world.clone(), model.clone(), model.home().to_vec())
        .map_err(|e| err(e.to_string()))?
        .with_step_observer(Box::new(move |w, state| {
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(w, state)
        }));
    let episode_options = EpisodeOptions {
        branch: options.branch,
        ..EpisodeOptions::default()
    };
    let mut camera = sim_camera(&world, &episode_options);
    let mut pointer = OraclePointer::new(prepared.truth, episode_options.oracle.clone());
    let result = crate::runner::episode::run_prepared_now(
        &episode,
        &episode_options,
        &world,
        &mut robot,
        &mut camera,
        &mut pointer,
    )
    .map_err(|e| err(e.to_string()))?;
    drop(robot);
    let Recording {
        history: states,
        snapshots,
        error,
        ..
    } = std::mem::replace(
        &mut *recording.lock().unwrap_or_else(|p| p.into_inner()),
        Recording {
            model: model.clone(),
            history: Vec::new(),
            snapshot_every: 1,
            snapshots: Vec::new(),
            error: None,
        },
    );
    if let Some(e) = error {
        return Err(err(format!(
            "a recorded state has no forward kinematics: {e}"
        )));
    }
    let keyframes = keyframes(&states, options.stop_speed, options.min_rest_s);
    let pinhole = camera.pinhole().clone();
    let render_options: RenderOptions = episode_options.render.clone();
    let frames = snapshots
        .iter()
        .map(|(i, scene)| {
            let out = render(scene, &pinhole, &render_options);
            RgbImage::from_raw(out.width, out.height, out.rgb)
                .map(|img| (*i, img))
                .ok_or_else(|| err("the renderer returned a short colour buffer".into()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let table = world.lock().scene().table.clone();
    Ok(Demonstration {
        task: episode.task.clone(),
        seed,
        instruction: episode.instruction.clone(),
        success: result.success,
        detail: result.detail,
        states,
        keyframes,
        frames,
        table_center: [table.center[0], table.center[1], table.height],
        table_z: table.height,
        model,
    })
}

/// ARM-style keyframes of a recorded stream (see the module docs): where the gripper command
/// changed (once the fingers are done), where the arm came to rest, and the last state. Sorted,
/// without duplicates; never holds index 0.
pub(crate) fn keyframes(states: &[DemoState], stop_speed: f64, min_rest_s: f64) -> Vec<usize> {
    let n = states.len();
    if n < 2 {
        return Vec::new();
    }
    // speed[i]: joint speed over the step that ended at state i.
    let speed: Vec<f64> = (0..n)
        .map(|i| {
            if i == 0 {
                return 0.0;
            }
            let dt = (states[i].stamp_s - states[i - 1].stamp_s).max(1e-9);
            states[i]
                .q
                .iter()
                .zip(&states[i - 1].q)
                .map(|(a, b)| (a - b).abs() / dt)
                .fold(0.0, f64::max)
        })
        .collect();
    let still = |i: usize| speed[i] < stop_speed;
    let mut keys = Vec::new();
    // Rest: a run of still states after motion (the first run, before any motion, is the start).
    let mut moved = false;
    let mut i = 1;
    while i < n {
        if !still(i) {
            moved = true;
            i += 1;
            continue;
        }
        let start = i;
        while i < n && still(i) {
            i += 1;
        }
        let end = i - 1; // last still state of the run
        let long_enough = states[end].stamp_s - states[start].stamp_s >= min_rest_s - 1e-9;
        if moved && long_enough {
            keys.push(start);
        }
    }
    // Gripper: the command changed at state c; the fingers are done at the last state before the
    // arm moves again (it holds its joints exactly while the gripper acts).
    for c in 1..n {
        if states[c].gripper_closed != states[c - 1].gripper_closed {
            let mut j = c;
            while j + 1 < n && speed[j + 1] < 1e-9 {
                j += 1;
            }
            keys.push(j);
        }
    }
    keys.push(n - 1);
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// The first keyframe after state `t` at least `min_move_m` from it.
pub(crate) fn next_waypoint(
    states: &[DemoState],
    keyframes: &[usize],
    t: usize,
    min_move_m: f64,
) -> Option<usize> {
    keyframes
        .iter()
        .copied()
        .find(|&k| k > t && dist(states[k].xyz, states[t].xyz) >= min_move_m)
}

fn dist(a: [f64; 3], b: [f64; 3]) -> f64 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
}

// ---------------------------------------------------------------------------------------------
// Questions.

/// The six movement directions (dominant axis and sign) and their words.
const DIRECTIONS: [(usize, f64, &str); 6] = [
    (0, 1.0, "forward"),
    (0, -1.0, "backward"),
    (1, 1.0, "left"),
    (1, -1.0, "right"),
    (2, 1.0, "up"),
    (2, -1.0, "down"),
];

fn direction_words(direction: usize, slight: bool) -> String {
    let word = DIRECTIONS[direction].2;
    if slight {
        format!("slightly move {word}")
    } else {
        format!("move {word}")
    }
}

/// Index into the six directions of `delta`'s dominant component, and whether it is slight.
fn direction_of(delta: [f64; 3], slight_m: f64) -> (usize, bool) {
    let axis = (0..3)
        .max_by(|&a, &b| delta[a].abs().total_cmp(&delta[b].abs()))
        .unwrap_or(0);
    let positive = delta[axis] >= 0.0;
    let index = axis * 2 + usize::from(!positive);
    (index, delta[axis].abs() < slight_m)
}

/// The textual direction of a movement `delta` (m, base frame): the dominant axis, "slightly"
/// under `slight_m`. E.g. `[0.0, 0.0, 0.2]` → "move up", `[-0.03, 0.01, 0.0]` → "slightly move
/// backward".
pub fn direction_label(delta: [f64; 3], slight_m: f64) -> String {
    let (d, slight) = direction_of(delta, slight_m);
    direction_words(d, slight)
}

/// A position as the options print it (metres, 1 mm).
pub(crate) fn format_xyz(p: [f64; 3]) -> String {
    format!("({:.3}, {:.3}, {:.3})", p[0], p[1], p[2])
}

/// Where distractor positions come from: the workspace box above the table, where IK reaches
/// with the gripper pointing down.
pub(crate) struct Workspace {
    pub min: [f64; 3],
    pub max: [f64; 3],
    orientation: k::nalgebra::UnitQuaternion<f64>,
    home: Vec<f64>,
    ik: IkSolver,
}

impl Workspace {
    /// The model's workspace box, cut at `table_z` from below; TCP orientation = at home.
    pub(crate) fn new(model: &RobotModel, table_z: f64) -> Result<Self, RobotR1Error> {
        let ws = &model.config.workspace;
        let home = model.home().to_vec();
        let orientation = model
            .fk(&home)
            .map_err(|e| RobotR1Error::Options(e.to_string()))?
            .rotation;
        let mut min = ws.min;
        min[2] = min[2].max(table_z);
        let ik = IkSolver::new(
            model,
            IkOptions {
                position_tolerance: 1e-4,
                rotation_tolerance: 1e-3,
                max_iterations: 40,
                max_attempts: 4,
                rng_seed: 0x00b0_70a1,
            },
        );
        Ok(Workspace {
            min,
            max: ws.max,
            orientation,
            home,
            ik,
        })
    }

    /// Whether the TCP can be at `p` pointing down.
    pub(crate) fn reachable(&mut self, p: [f64; 3]) -> bool {
        let target = Isometry3::from_parts(Translation3::new(p[0], p[1], p[2]), self.orientation);
        self.ik.solve(&target, &self.home).is_ok()
    }

    fn sample(&self, rng: &mut ChaCha8Rng) -> [f64; 3] {
        [0, 1, 2].map(|a| rng.gen_range(self.min[a]..=self.max[a]))
    }

    /// `count` reachable positions at least `delta` from each of `avoid` and from each other.
    pub(crate) fn distractors(
        &mut self,
        avoid: &[[f64; 3]],
        count: usize,
        delta: f64,
        rng: &mut ChaCha8Rng,
    ) -> Result<Vec<[f64; 3]>, RobotR1Error> {
        const TRIES: usize = 2000;
        let mut out: Vec<[f64; 3]> = Vec::with_capacity(count);
        for _ in 0..TRIES {
            if out.len() == count {
                break;
            }
            let p = self.sample(rng);
            // Rounded as printed, so the printed options keep the distance too.
            let p = p.map(|v| (v * 1000.0).round() / 1000.0);
            if avoid.iter().chain(&out).all(|&q| dist(p, q) >= delta) && self.reachable(p) {
                out.push(p);
            }
        }
        if out.len() < count {
            return Err(RobotR1Error::Distractors {
                wanted: count,
                delta_m: delta,
                tries: TRIES,
            });
        }
        Ok(out)
    }
}

/// One question with its options.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Question {
    pub kind: QuestionKind,
    /// The full prompt (metadata, question, options, answer format).
    pub prompt: String,
    /// Option texts, in letter order.
    pub options: Vec<String>,
    /// Index of the correct option.
    pub correct: usize,
    /// The positions behind the options (position questions), in letter order.
    pub option_xyz: Option<Vec<[f64; 3]>>,
}

impl Question {
    pub(crate) fn answer_letter(&self) -> char {
        LETTERS[self.correct]
    }
}

/// What every prompt of one demonstration shares.
pub(crate) struct PromptContext<'a> {
    pub instruction: &'a str,
    pub table_center: [f64; 3],
    pub gripper_open_width: f64,
}

fn metadata(ctx: &PromptContext<'_>) -> String {
    format!(
        "Scene metadata: positions are (x, y, z) in metres in the robot's base frame; +x points \
         forward (away from the robot base), +y to the robot's left, +z up. Reference point: the \
         centre of the table top is at {}. Scale: the gripper's fingers open to {:.1} cm.",
        format_xyz(ctx.table_center),
        ctx.gripper_open_width * 100.0
    )
}

fn state_line(s: &DemoState) -> String {
    format!(
        "The end effector is at {} with the gripper {}.",
        format_xyz(s.xyz),
        if s.gripper_closed { "closed" } else { "open" }
    )
}

const ANSWER_FORMAT: &str = "Output the thinking process in <think> </think> and the final answer \
     (only the letter of the option) in <answer> </answer> tags.";

fn prompt(
    ctx: &PromptContext<'_>,
    state: Option<&DemoState>,
    ask: &str,
    options: &[String],
) -> String {
    let mut p = format!(
        "The image shows a robot arm doing the task \"{}\".\n{}\n",
        ctx.instruction,
        metadata(ctx)
    );
    if let Some(s) = state {
        p.push_str(&state_line(s));
        p.push('\n');
    }
    p.push_str(ask);
    p.push('\n');
    for (letter, text) in LETTERS.iter().zip(options) {
        p.push_str(&format!("{letter}. {text}\n"));
    }
    p.push_str(ANSWER_FORMAT);
    p
}

fn shuffled<T: Clone>(truth: T, others: Vec<T>, rng: &mut ChaCha8Rng) -> (Vec<T>, usize) {
    let mut order: Vec<usize> = (0..=others.len()).collect();
    order.shuffle(rng);
    let all: Vec<T> = std::iter::once(truth).chain(others).collect();
    let correct = order.iter().position(|&o| o == 0).unwrap_or(0);
    (order.iter().map(|&o| all[o].clone()).collect(), correct)
}

/// The question of `kind` about state `t` (and its next waypoint `k`, needed for waypoint and
/// movement questions).
pub(crate) fn make_question(
    kind: QuestionKind,
    ctx: &PromptContext<'_>,
    current: &DemoState,
    next: Option<&DemoState>,
    options: &QuestionOptions,
    workspace: &mut Workspace,
    rng: &mut ChaCha8Rng,
) -> Result<Option<Question>, RobotR1Error> {
    let positions = |truth: [f64; 3], workspace: &mut Workspace, rng: &mut ChaCha8Rng| {
        let truth = truth.map(|v| (v * 1000.0).round() / 1000.0);
        let others = workspace.distractors(&[truth], 3, options.delta_m, rng)?;
        Ok::<_, RobotR1Error>(shuffled(truth, others, rng))
    };
    Ok(Some(match kind {
        QuestionKind::Waypoint => {
            let Some(next) = next else { return Ok(None) };
            let (xyz, correct) = positions(next.xyz, workspace, rng)?;
            let texts: Vec<String> = xyz.iter().map(|&p| format_xyz(p)).collect();
            Question {
                kind,
                prompt: prompt(
                    ctx,
                    Some(current),
                    "Which position will the end effector move to next (its next waypoint)?",
                    &texts,
                ),
                options: texts,
                correct,
                option_xyz: Some(xyz),
            }
        }
        QuestionKind::State => {
            let (xyz, correct) = positions(current.xyz, workspace, rng)?;
            let texts: Vec<String> = xyz.iter().map(|&p| format_xyz(p)).collect();
            Question {
                kind,
                prompt: prompt(
                    ctx,
                    None,
                    "Where is the end effector (the point between the fingertips) now?",
                    &texts,
                ),
                options: texts,
                correct,
                option_xyz: Some(xyz),
            }
        }
        QuestionKind::Movement => {
            let Some(next) = next else { return Ok(None) };
            let delta = [0, 1, 2].map(|a| next.xyz[a] - current.xyz[a]);
            let (d, slight) = direction_of(delta, options.slight_m);
            let mut others: Vec<usize> = (0..DIRECTIONS.len()).filter(|&o| o != d).collect();
            others.shuffle(rng);
            let distractors: Vec<String> = others[..3]
                .iter()
                .map(|&o| direction_words(o, rng.gen_bool(0.5)))
                .collect();
            let (texts, correct) = shuffled(direction_words(d, slight), distractors, rng);
            Question {
                kind,
                prompt: prompt(
                    ctx,
                    Some(current),
                    "How will the end effector move to reach its next waypoint?",
                    &texts,
                ),
                options: texts,
                correct,
                option_xyz: None,
            }
        }
    }))
}

/// One line of the output JSONL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct QuestionRecord {
    /// `suite/id/s<seed>/t<state>/<type>`, unique in a file.
    pub id: String,
    /// The frame, relative to the output folder.
    pub image: String,
    /// `robot_r1` (the ground truth's `<type>`).
    pub task_type: String,
    pub question_type: QuestionKind,
    /// The simulator task the demonstration ran (`suite/id`).
    pub task_kind: String,
    pub instruction: String,
    pub question: String,
    /// `<type>robot_r1</type>X`.
    pub ground_truth: String,
    /// The correct letter.
    pub answer: String,
    pub options: Vec<String>,
    /// The positions behind the options (waypoint and state questions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option_xyz: Option<Vec<[f64; 3]>>,
    pub seed: u64,
    /// Simulation time of the frame, s.
    pub time_s: f64,
    /// The end effector at that time.
    pub state_xyz: [f64; 3],
    pub gripper_closed: bool,
    /// The next waypoint's position (when there is one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_xyz: Option<[f64; 3]>,
}

/// What [`generate`] made.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The task (`suite/id`).
    pub task: String,
    /// Episodes run.
    pub episodes: usize,
    /// Episodes the judge called a success (the others give no questions).
    pub demonstrations: usize,
    /// `(seed, the judge's or the error's words)` of the episodes left out.
    pub failed: Vec<(u64, String)>,
    /// Questions written, all kinds together.
    pub questions: usize,
    /// Waypoint questions written.
    pub waypoint: usize,
    /// State questions written.
    pub state: usize,
    /// Movement questions written.
    pub movement: usize,
    /// Images written.
    pub images: usize,
    /// The JSONL written.
    pub jsonl: PathBuf,
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> RobotR1Error {
    RobotR1Error::Io {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

fn check(options: &QuestionOptions) -> Result<(), RobotR1Error> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(options.delta_m) {
        return Err(RobotR1Error::Options(format!(
            "delta {} m must be > 0",
            options.delta_m
        )));
    }
    if !positive(options.sample_every_s) {
        return Err(RobotR1Error::Options(format!(
            "sample interval {} s must be > 0",
            options.sample_every_s
        )));
    }
    if !(options.slight_m.is_finite() && options.min_move_m.is_finite() && options.stop_speed > 0.0)
    {
        return Err(RobotR1Error::Options(
            "thresholds must be finite, stop speed > 0".into(),
        ));
    }
    if options.kinds.is_empty() {
        return Err(RobotR1Error::Options("no question types asked for".into()));
    }
    Ok(())
}

/// A question about one sampled moment of a demonstration.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlacedQuestion {
    /// Index into [`Demonstration::frames`].
    pub frame: usize,
    pub question: Question,
    /// Index into [`Demonstration::states`] of the moment asked about.
    pub state: usize,
    /// Its next waypoint (index into the states).
    pub next: Option<usize>,
}

/// The questions of one recorded demonstration, with the frames they are about.
pub(crate) fn questions_for(
    demo: &Demonstration,
    options: &QuestionOptions,
) -> Result<Vec<PlacedQuestion>, RobotR1Error> {
    check(options)?;
    let mut rng = ChaCha8Rng::seed_from_u64(demo.seed ^ 0x0b07_0120_2506_0070);
    let mut workspace = Workspace::new(&demo.model, demo.table_z)?;
    let ctx = PromptContext {
        instruction: &demo.instruction,
        table_center: demo.table_center,
        gripper_open_width: demo.model.config.gripper.open_width,
    };
    let mut out = Vec::new();
    for (f, (t, _)) in demo.frames.iter().enumerate() {
        let next = next_waypoint(&demo.states, &demo.keyframes, *t, options.min_move_m);
        if next.is_none() {
            // After the last move: nothing left to predict; no state questions either (the demo
            // is over).
            continue;
        }
        for &kind in &options.kinds {
            let q = make_question(
                kind,
                &ctx,
                &demo.states[*t],
                next.map(|k| &demo.states[k]),
                options,
                &mut workspace,
                &mut rng,
            )?;
            if let Some(q) = q {
                out.push(PlacedQuestion {
                    frame: f,
                    question: q,
                    state: *t,
                    next,
                });
            }
        }
    }
    Ok(out)
}

/// `task` with `/` as `-` (file names).
fn slug(task: &str) -> String {
    task.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Records `task` once per seed, and writes its questions (see the module docs) to
/// `out_dir/robot_r1-<suite>-<id>.jsonl` with the frames under `out_dir/images/`. Deterministic:
/// the same task, seeds and options give the same files byte for byte.
pub fn generate(
    task: &str,
    seeds: impl IntoIterator<Item = u64>,
    options: &QuestionOptions,
    out_dir: &Path,
) -> Result<Summary, RobotR1Error> {
    check(options)?;
    let full = tasks::task(task)
        .map_err(|e| RobotR1Error::Task {
            task: task.to_owned(),
            message: e.to_string(),
        })?
        .full_id();
    let images = out_dir.join("images");
    std::fs::create_dir_all(&images).map_err(|e| io_err(&images, e))?;
    let jsonl = out_dir.join(format!("{TASK_TYPE}-{}.jsonl", slug(&full)));
    let mut lines = String::new();
    let mut summary = Summary {
        task: full.clone(),
        episodes: 0,
        demonstrations: 0,
        failed: Vec::new(),
        questions: 0,
        waypoint: 0,
        state: 0,
        movement: 0,
        images: 0,
        jsonl: jsonl.clone(),
    };
    for seed in seeds {
        summary.episodes += 1;
        let demo = record_demonstration(&full, seed, options)?;
        if !demo.success {
            tracing::warn!(task = %full, seed, "demonstration failed, no questions: {}", demo.detail);
            summary.failed.push((seed, demo.detail));
            continue;
        }
        summary.demonstrations += 1;
        let questions = questions_for(&demo, options)?;
        let mut written = std::collections::BTreeSet::new();
        for PlacedQuestion {
            frame: f,
            question: q,
            state: t,
            next,
        } in questions
        {
            let (_, img) = &demo.frames[f];
            let name = format!("{}-s{seed}-t{t:06}.png", slug(&full));
            let rel = format!("images/{name}");
            if written.insert(f) {
                let path = images.join(&name);
                img.save(&path).map_err(|e| io_err(&path, e))?;
                summary.images += 1;
            }
            let s = &demo.states[t];
            let letter = q.answer_letter();
            let record = QuestionRecord {
                id: format!("{full}/s{seed}/t{t}/{}", q.kind.name()),
                image: rel,
                task_type: TASK_TYPE.to_owned(),
                question_type: q.kind,
                task_kind: full.clone(),
                instruction: demo.instruction.clone(),
                question: q.prompt.clone(),
                ground_truth: format!("<type>{TASK_TYPE}</type>{letter}"),
                answer: letter.to_string(),
                options: q.options.clone(),
                option_xyz: q.option_xyz.clone(),
                seed,
                time_s: s.stamp_s,
                state_xyz: s.xyz,
                gripper_closed: s.gripper_closed,
                next_xyz: next.map(|k| demo.states[k].xyz),
            };
            match q.kind {
                QuestionKind::Waypoint => summary.waypoint += 1,
                QuestionKind::State => summary.state += 1,
                QuestionKind::Movement => summary.movement += 1,
            }
            summary.questions += 1;
            let line = serde_json::to_string(&record).map_err(|e| io_err(&jsonl, e))?;
            lines.push_str(&line);
            lines.push('\n');
        }
    }
    std::fs::write(&jsonl, lines).map_err(|e| io_err(&jsonl, e))?;
    Ok(summary)
}

// ---------------------------------------------------------------------------------------------
// Reward.

/// Robot-R1's reward of one response.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct RobotR1Score {
    /// `format + answer` (0, 1 or 2).
    pub overall: f64,
    pub format: f64,
    pub answer: f64,
}

static TYPE_TAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)<type>(.*?)</type>").unwrap_or_else(|e| unreachable!("constant regex: {e}"))
});
static ANSWER_BLOCK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)<answer>(.*?)</answer>")
        .unwrap_or_else(|e| unreachable!("constant regex: {e}"))
});

/// The correct letter of a `<type>robot_r1</type>X` ground truth (any type name is accepted;
/// the payload after the first tag, normalised like an answer, must be one letter A–H).
pub(crate) fn ground_truth_letter(ground_truth: &str) -> Result<char, RobotR1Error> {
    let bad = || RobotR1Error::GroundTruth(ground_truth.to_owned());
    let whole = TYPE_TAG.find(ground_truth).ok_or_else(bad)?;
    let letter = normalize_choice(py_strip(&ground_truth[whole.end()..]));
    let mut chars = letter.chars();
    match (chars.next(), chars.next()) {
        (Some(c @ 'A'..='H'), None) => Ok(c),
        _ => Err(bad()),
    }
}

/// The letter a response answers (Embodied-R's normaliser on its first answer block, or on the
/// whole response without one); may be a non-letter.
pub(crate) fn response_letter(response: &str) -> String {
    match ANSWER_BLOCK.captures(response).and_then(|c| c.get(1)) {
        Some(inner) => normalize_choice(inner.as_str()),
        None => normalize_choice(response),
    }
}

/// `r_format + r_answer` (see the module docs).
pub(crate) fn reward(response: &str, ground_truth: &str) -> Result<RobotR1Score, RobotR1Error> {
    let truth = ground_truth_letter(ground_truth)?;
    let format = format_reward(response);
    let answer = if response_letter(response) == truth.to_string() {
        1.0
    } else {
        0.0
    };
    Ok(RobotR1Score {
        overall: format + answer,
        format,
        answer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(t: f64, q: f64, x: f64, closed: bool) -> DemoState {
        DemoState {
            stamp_s: t,
            q: vec![q, 0.0],
            xyz: [x, 0.0, 0.3],
            gripper_width: 0.08,
            gripper_closed: closed,
        }
    }

    #[test]
    fn keyframes_are_rests_gripper_changes_and_the_end() {
        let dt = 0.1;
        let mut s = Vec::new();
        // still, move, rest (3), close the gripper (still), move, end.
        let qs = [0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.5, 2.0];
        let closed = [
            false, false, false, false, false, false, true, true, true, true, true,
        ];
        for (i, (&q, &c)) in qs.iter().zip(&closed).enumerate() {
            s.push(state(i as f64 * dt, q, q, c));
        }
        // index 4: first still state after motion; index 8: fingers done (last still before the
        // move at 9); 10: the last state.
        assert_eq!(keyframes(&s, 0.01, 0.0), vec![4, 8, 10]);
        // The next waypoint skips the gripper keyframe at the same place.
        assert_eq!(next_waypoint(&s, &[4, 8, 10], 5, 0.01), Some(10));
        assert_eq!(next_waypoint(&s, &[4, 8, 10], 0, 0.01), Some(4));
        assert_eq!(next_waypoint(&s, &[4, 8, 10], 10, 0.01), None);
    }

    #[test]
    fn direction_labels() {
        assert_eq!(direction_label([0.0, 0.0, 0.2], 0.05), "move up");
        assert_eq!(
            direction_label([-0.03, 0.01, 0.0], 0.05),
            "slightly move backward"
        );
        assert_eq!(direction_label([0.01, -0.3, 0.2], 0.05), "move right");
        assert_eq!(direction_label([0.1, 0.0, -0.04], 0.05), "move forward");
        assert_eq!(
            direction_label([0.0, 0.049, 0.0], 0.05),
            "slightly move left"
        );
        assert_eq!(direction_label([0.0, 0.0, -0.06], 0.05), "move down");
    }

    #[test]
    fn reward_is_format_plus_letter() {
        let gt = "<type>robot_r1</type>B";
        let r = |s| reward(s, gt).unwrap();
        assert_eq!(
            r("<think>A is too far; B.</think>\n<answer>B</answer>").overall,
            2.0
        );
        assert_eq!(
            r("<think>B is too far</think><answer>C</answer>").overall,
            1.0
        );
        let no_format = r("<answer>b</answer> trailing");
        assert_eq!((no_format.format, no_format.answer), (0.0, 1.0));
        assert_eq!(r("B").overall, 1.0);
        assert_eq!(r("the answer is unclear").overall, 0.0);
        assert!(reward("x", "B").is_err());
        assert!(reward("x", "<type>robot_r1</type>maybe").is_err());
    }
}
