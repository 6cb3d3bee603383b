//! Embodied-R1's released reward functions, with exact parity.
//!
//! Source of truth: `pickxiguapi/Embodied-R1` at `e599e95`, `verl/utils/reward_score/embodiedr1.py`,
//! function `embodiedr1_compute_score(predict_str, ground_truth) -> dict`, which EasyR1's
//! `CustomRewardManager` (`verl/workers/reward/custom.py`, `score_function=embodiedr1`) calls once
//! per decoded response, putting `score["overall"]` on the response's last token and logging
//! every key. [`score`] is that function; `crates/apps/src/tests/rewards_golden.rs` checks it against the
//! released Python on the cases `tests/fixtures/gen_rewards_golden.py` generates (every
//! component within 1e-6, NaN equal to NaN, the same keys in the same order, the same exception
//! class). Where the released code and the paper disagree, **the released code is kept**.
//!
//! # Dispatch and weights (`overall`, then the components, in the released key order)
//!
//! | `<type>` | `overall` | components |
//! | --- | --- | --- |
//! | `general_qa` | 0.1·think + 0.9·acc | `thinking_format`, `general_qa_accuracy` |
//! | `spatial_qa` | 0.1·think + 0.9·acc | `thinking_format`, `spatial_qa_accuracy` |
//! | `point_ref` | 0.1·think + 0.1·point + 0.8·dist | `thinking_format`, `point_format`, `robopoint_point_distance` |
//! | `fsd_free_point` | 0.1·think + 0.1·point + 0.6·in_box + 0.2·dist | `thinking_format`, `point_format`, `fsd_point_in_box`, `fsd_point_distance` |
//! | `fsd_visual_trace` | 0.1·think + 0.1·point + 0.1·num + 0.3·fréchet + 0.4·rmse | `thinking_format`, `point_format`, `fsd_point_num`, `fsd_frechet_distance`, `fsd_rmse_distance` |
//! | `point_rec` | 0.1·think + 0.1·point + 0.8·in_mask | `thinking_format`, `point_format`, `refcoco_point_in_mask` |
//! | `grounding_rec` | same | `thinking_format`, `point_format`, `handal_point_in_mask` |
//! | `3d_position` | 0.1·think + 0.1·fmt3d + 0.8·pos | `thinking_format`, `point_format`, `open6dor_3d_position_reward` |
//!
//! Paper vs released code (released kept): the paper's REG/RRG formulas (e.g.
//! `R_RRG = 0.1·r_format + 0.2·r_dis + 0.7·r_mask`) are not what ships: format is two 0.1 terms
//! (think and point), `point_ref` is 0.2 format + 0.8 distance (its convex-hull in-region term is
//! commented out), REG/OFG are 0.2 format + 0.8 in-mask, and there is no environment reward.
//!
//! # Quirks reproduced (each is released behaviour a trainer would otherwise see differently)
//!
//! Envelope and format (`envelope`, `pystr`):
//! * The ground truth's first `<type>…</type>` anywhere (DOTALL) names the task, stripped; the
//!   payload is the rest after that tag, stripped; a missing tag is Python's `AttributeError`,
//!   an unknown (or differently cased) type its `ValueError` — both as [`RewardError`].
//! * `thinking_format` is a **full match** of `<think>.*?</think>\s*<answer>.*?</answer>`
//!   (DOTALL): text before `<think>` or anything after `</answer>`, even one newline, gives 0.
//! * `\s` and `str.strip()` are Python's: Unicode whitespace **plus U+001C..U+001F**; U+200B is
//!   not whitespace.
//! * `point_format` is 1 for a `<point>…</point>` anywhere, inside `<think>` too; only the
//!   **first** `<point>` block is ever parsed, wherever it is (a second one in `<answer>` is
//!   ignored).
//! * QA: the first `<answer>(.*?)</answer>` **without DOTALL**: a multi-line answer does not
//!   match and the **whole response** (stripped) is graded instead — so a bare `B` with no tags
//!   is graded correct.
//! * Format rewards are paid even when the task term fails (`<point>[]</point>` earns 0.2).
//!
//! JSON (`pyjson`): Python's `json.loads`: `NaN`/`Infinity` accepted, ints of any size (exact),
//! `1e400` = inf, trailing commas rejected, > 4300-digit ints raise `ValueError`, deep nesting
//! `RecursionError`. Points must be a list of 2-element lists (asserts inside the `try`: a
//! 3-element point, a dict, a string zeroes the task term and nothing else).
//!
//! `point_ref`: the ground truth is parsed **outside** the `try`, and only when the response
//! has a `<point>` block: then a malformed payload raises (`JSONDecodeError`, `ValueError`,
//! `RecursionError`), without one it is never read. Distance = mean over predicted points of the
//! nearest-GT Euclidean distance (named "l1", is L2), ramp 10 → 50 px; no penalty for extra
//! points; empty prediction 0. numpy semantics (`numpy`, `trace`): int64 arithmetic **wraps**
//! (`[[4294967296, 0]]` vs `[[0, 0]]` is distance 0, reward 1), uint64 likewise, int64 with
//! uint64 goes float64, ints past uint64 make an object array whose `np.sqrt` raises (0),
//! `bool − bool` raises (0), NaN distance → NaN reward (and NaN `overall`), GT rows of one
//! element broadcast to both coordinates.
//!
//! `fsd_free_point`: everything inside the `try` (a GT without exactly 8 free points, a
//! 3-element bbox, a list payload: task terms 0, no error). In-box is inclusive and uses Python
//! chained comparisons (exact int/float, `str` vs `str` ordered, `str` vs number raises → both
//! task terms 0; short-circuit, so an x outside the box never looks at y). The distance uses the
//! same 10/50 ramp against the 8 free points (not the box).
//!
//! `fsd_visual_trace`: GT `{"trajectory": [...]}` of any non-empty length; the prediction must
//! have exactly 8 points for any of num/fréchet/rmse (7 or 9 → all 0; empty → assert → 0).
//! `fsd_point_num` is set to 1 **before** the distances, so a raise there keeps num = 1:
//! Fréchet (ramp 10 → 100) in plain Python (exact ints, `float ** 2` overflow raises, builtin
//! `min`/`max` NaN order), then RMSE (ramp 5 → 50) after resampling both traces to the longer
//! length with `np.interp`; a raise in RMSE keeps the Fréchet term.
//!
//! `point_rec` / `grounding_rec` (`region`): prediction parsed first, then the GT (inside the
//! `try`: malformed GT → 0, no error); `segmentation` needs ≥ 3 vertices; even-odd ray casting
//! with the released half-open edge rule (left/bottom edges inside, right/top outside), implicit
//! closing, self-intersections by parity, x only evaluated on straddling edges.
//!
//! `3d_position` (`position3d`): the hard-coded 720×480 back-projection, the `between` typo
//! (target x against the y range), `back` dropped (0), `top` is `<=`, the undivided partial sum
//! when a later point raises, empty lists → format 1 but position 0.
//!
//! QA accuracy (`grade`, `latex`, `symbolic`): mathruler 0.1.0's `grade_answer`, whose sympy and
//! pylatexenc steps are reproduced for rational arithmetic, rational functions of one-letter
//! symbols and a LaTeX subset; outside those an answer is graded incorrect (listed in `grade`).
//!
//! # Never panics
//! Every input is data from outside: no `unwrap` on it, recursion bounded (JSON depth, LaTeX and
//! expression nesting), sympy-like evaluation bounded in size. `crates/apps/src/tests/rewards_golden.rs` fuzzes
//! it with proptest, including megabyte responses.

mod envelope;
mod error;
mod grade;
mod latex;
mod numpy;
mod position3d;
mod pyint;
mod pyjson;
mod pyops;
mod pystr;
mod region;
mod symbolic;
mod trace;

use serde::ser::{Serialize, SerializeMap, Serializer};

pub(crate) use error::RewardError;
pub(crate) use grade::grade_answer;
pub(crate) use pystr::re;
pub(crate) use pystr::{is_py_space, point_format, py_strip, thinking_format};

use pyjson::{loads, Value};
use pystr::{first_answer_block, first_point_block};

/// The task types the released function dispatches on (the `<type>` tag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaskType {
    /// `general_qa` (stage 1, ViRL).
    GeneralQa,
    /// `spatial_qa` (stage 1, WhatsUp, SAT).
    SpatialQa,
    /// `point_ref` (RoboPoint placement regions).
    PointRef,
    /// `fsd_free_point` (FSD free-space points, RRG).
    FsdFreePoint,
    /// `fsd_visual_trace` (FSD traces, VTG).
    FsdVisualTrace,
    /// `point_rec` (RoboRefIt, RefCOCO: REG).
    PointRec,
    /// `grounding_rec` (HANDAL part grounding: OFG).
    GroundingRec,
    /// `3d_position` (Open6DOR).
    Position3d,
}

impl TaskType {
    /// Every type, in the released dispatch order.
    pub(crate) const ALL: [TaskType; 8] = [
        TaskType::GeneralQa,
        TaskType::SpatialQa,
        TaskType::PointRef,
        TaskType::FsdFreePoint,
        TaskType::FsdVisualTrace,
        TaskType::PointRec,
        TaskType::GroundingRec,
        TaskType::Position3d,
    ];

    /// The `<type>` string.
    pub(crate) fn name(self) -> &'static str {
        match self {
            TaskType::GeneralQa => "general_qa",
            TaskType::SpatialQa => "spatial_qa",
            TaskType::PointRef => "point_ref",
            TaskType::FsdFreePoint => "fsd_free_point",
            TaskType::FsdVisualTrace => "fsd_visual_trace",
            TaskType::PointRec => "point_rec",
            TaskType::GroundingRec => "grounding_rec",
            TaskType::Position3d => "3d_position",
        }
    }

    /// The type a `<type>` string names (exact, case-sensitive, as the released `==` chain).
    pub(crate) fn from_name(name: &str) -> Option<TaskType> {
        TaskType::ALL.into_iter().find(|t| t.name() == name)
    }
}

impl std::fmt::Display for TaskType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The released score dict: named components in the released key order, `overall` first.
#[derive(Clone, Debug, PartialEq)]
pub struct Score {
    task: TaskType,
    components: Vec<(&'static str, f64)>,
}

impl Score {
    fn new(task: TaskType, components: Vec<(&'static str, f64)>) -> Self {
        Score { task, components }
    }

    /// The task it scored.
    pub fn task(&self) -> TaskType {
        self.task
    }

    /// `score["overall"]`, the scalar reward (may be NaN, as released).
    pub fn overall(&self) -> f64 {
        self.get("overall").unwrap_or(f64::NAN)
    }

    /// `score[name]`.
    pub(crate) fn get(&self, name: &str) -> Option<f64> {
        self.components
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
    }

    /// All `(name, value)` pairs in the released key order.
    pub(crate) fn components(&self) -> &[(&'static str, f64)] {
        &self.components
    }
}

/// A JSON object in the released key order (NaN / ±inf serialise as `null`, JSON has no such
/// numbers).
impl Serialize for Score {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.components.len()))?;
        for (k, v) in &self.components {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// `embodiedr1_compute_score(response, ground_truth)`.
pub fn score(response: &str, ground_truth: &str) -> Result<Score, RewardError> {
    let (ty, payload) = envelope::parse_ground_truth(ground_truth)?;
    let task = TaskType::from_name(ty).ok_or_else(|| RewardError::UnknownType(ty.to_string()))?;
    score_task(task, response, payload)
}

/// The predicted point list: the first `<point>` block as JSON, asserted to be a list of
/// 2-element lists (any failure is the released `try` giving up).
fn predicted_points(response: &str) -> Option<Vec<Value>> {
    let v = loads(first_point_block(response)?).ok()?;
    match v {
        Value::List(items) if items.iter().all(|p| p.is_list_of_len(2)) => Some(items),
        _ => None,
    }
}

/// `payload` parsed as a dict (`json.loads(...)` then `.get`; a non-dict raises
/// `AttributeError` inside the `try`).
fn payload_dict(payload: &str) -> Option<Value> {
    loads(payload).ok().filter(|v| matches!(v, Value::Dict(_)))
}

/// Scores one response for a known task; `payload` is the ground truth after its `<type>` tag,
/// stripped (what `parse_ground_truth` returns).
pub(crate) fn score_task(
    task: TaskType,
    response: &str,
    payload: &str,
) -> Result<Score, RewardError> {
    let think = thinking_format(response);
    let s = match task {
        TaskType::GeneralQa | TaskType::SpatialQa => {
            let acc = accuracy(response, payload);
            let key = if task == TaskType::GeneralQa {
                "general_qa_accuracy"
            } else {
                "spatial_qa_accuracy"
            };
            Score::new(
                task,
                vec![
                    ("overall", 0.1 * think + 0.9 * acc),
                    ("thinking_format", think),
                    (key, acc),
                ],
            )
        }
        TaskType::PointRef => {
            let pf = point_format(response);
            let mut dist = 0.0;
            if pf != 0.0 {
                let gt = loads(payload).map_err(RewardError::GroundTruth)?;
                if let Some(pred) = predicted_points(response) {
                    dist = trace::point_distance_reward(&Value::List(pred), &gt);
                }
            }
            Score::new(
                task,
                vec![
                    ("overall", 0.1 * think + 0.1 * pf + 0.8 * dist),
                    ("thinking_format", think),
                    ("point_format", pf),
                    ("robopoint_point_distance", dist),
                ],
            )
        }
        TaskType::FsdFreePoint => {
            let pf = point_format(response);
            let (in_box, dist) = if pf != 0.0 {
                free_point_terms(response, payload).unwrap_or((0.0, 0.0))
            } else {
                (0.0, 0.0)
            };
            Score::new(
                task,
                vec![
                    (
                        "overall",
                        0.1 * think + 0.1 * pf + 0.6 * in_box + 0.2 * dist,
                    ),
                    ("thinking_format", think),
                    ("point_format", pf),
                    ("fsd_point_in_box", in_box),
                    ("fsd_point_distance", dist),
                ],
            )
        }
        TaskType::FsdVisualTrace => {
            let pf = point_format(response);
            let (mut num, mut fr, mut rm) = (0.0, 0.0, 0.0);
            if pf != 0.0 {
                visual_trace_terms(response, payload, &mut num, &mut fr, &mut rm);
            }
            Score::new(
                task,
                vec![
                    (
                        "overall",
                        0.1 * think + 0.1 * pf + 0.1 * num + 0.3 * fr + 0.4 * rm,
                    ),
                    ("thinking_format", think),
                    ("point_format", pf),
                    ("fsd_point_num", num),
                    ("fsd_frechet_distance", fr),
                    ("fsd_rmse_distance", rm),
                ],
            )
        }
        TaskType::PointRec | TaskType::GroundingRec => {
            let pf = point_format(response);
            let in_mask = if pf != 0.0 {
                in_mask_term(response, payload).unwrap_or(0.0)
            } else {
                0.0
            };
            let key = if task == TaskType::PointRec {
                "refcoco_point_in_mask"
            } else {
                "handal_point_in_mask"
            };
            Score::new(
                task,
                vec![
                    ("overall", 0.1 * think + 0.1 * pf + 0.8 * in_mask),
                    ("thinking_format", think),
                    ("point_format", pf),
                    (key, in_mask),
                ],
            )
        }
        TaskType::Position3d => {
            let fmt = position3d::format_reward(response);
            let pos = if fmt != 0.0 {
                position3d::position_reward(response, payload)
            } else {
                0.0
            };
            Score::new(
                task,
                vec![
                    ("overall", 0.1 * think + 0.1 * fmt + 0.8 * pos),
                    ("thinking_format", think),
                    ("point_format", fmt),
                    ("open6dor_3d_position_reward", pos),
                ],
            )
        }
    };
    Ok(s)
}

/// The released `accuracy_reward`: the first one-line `<answer>` (else the whole response),
/// stripped, graded against the stripped ground truth.
fn accuracy(response: &str, gt: &str) -> f64 {
    let given = match first_answer_block(response) {
        Some(a) => py_strip(a),
        None => py_strip(response),
    };
    if grade_answer(given, py_strip(gt)) {
        1.0
    } else {
        0.0
    }
}

/// `(in_box, distance)` of `fsd_free_point`; `None` where the released `try` gives up before
/// assigning either.
fn free_point_terms(response: &str, payload: &str) -> Option<(f64, f64)> {
    let gt = payload_dict(payload)?;
    let empty = Value::List(Vec::new());
    let bbox = gt.get("bbox").unwrap_or(&empty).as_list()?;
    let key_points = gt.get("free_points").unwrap_or(&empty);
    let kp = key_points.as_list()?;
    if bbox.len() != 4 || kp.len() != 8 || !kp.iter().all(|p| p.is_list_of_len(2)) {
        return None;
    }
    let pred = predicted_points(response)?;
    let mut inside = 0usize;
    for p in &pred {
        let xy = p.as_list()?;
        if region::in_box(bbox, &xy[0], &xy[1]).ok()? {
            inside += 1;
        }
    }
    let in_box = if pred.is_empty() {
        0.0
    } else {
        inside as f64 / pred.len() as f64
    };
    Some((
        in_box,
        trace::point_distance_reward(&Value::List(pred), key_points),
    ))
}

/// `fsd_visual_trace`'s three terms, assigned in the released order so that a later raise keeps
/// the earlier ones.
fn visual_trace_terms(response: &str, payload: &str, num: &mut f64, fr: &mut f64, rm: &mut f64) {
    let Some(gt) = payload_dict(payload) else {
        return;
    };
    let empty = Value::List(Vec::new());
    let Some(gt_traj) = gt.get("trajectory").unwrap_or(&empty).as_list() else {
        return;
    };
    if gt_traj.is_empty() || !gt_traj.iter().all(|p| p.is_list_of_len(2)) {
        return;
    }
    let Some(pred) = predicted_points(response) else {
        return;
    };
    if pred.len() != 8 {
        return;
    }
    *num = 1.0;
    let Ok(dfd) = trace::discrete_frechet(&pred, gt_traj) else {
        return;
    };
    *fr = trace::ramp(dfd, 10.0, 100.0);
    if let Ok(r) = trace::rmse_resampled(&pred, gt_traj) {
        *rm = trace::ramp(r, 5.0, 50.0);
    }
}

/// How many point-in-polygon edge tests scoring this item makes: the predicted points times the
/// polygon's closed ring for `point_rec` / `grounding_rec`, 0 for every other task. Linear to
/// compute (two parses), so a server can bound an item's work before scoring it: the released
/// function has no bound, and 30 k points against a 30 k-vertex polygon (under 1 MB of text) are
/// 9·10^8 tests.
pub fn polygon_tests(response: &str, ground_truth: &str) -> u64 {
    let Ok((ty, payload)) = envelope::parse_ground_truth(ground_truth) else {
        return 0;
    };
    if !matches!(
        TaskType::from_name(ty),
        Some(TaskType::PointRec | TaskType::GroundingRec)
    ) {
        return 0;
    }
    let Some(points) = predicted_points(response) else {
        return 0;
    };
    let Ok(gt) = loads(payload) else { return 0 };
    let vertices = match gt.get("segmentation").and_then(Value::as_list) {
        Some(ring) => ring.len() as u64 + 1,
        None => return 0,
    };
    points.len() as u64 * vertices
}

/// The in-mask fraction of `point_rec` / `grounding_rec`.
fn in_mask_term(response: &str, payload: &str) -> Option<f64> {
    let pred = predicted_points(response)?;
    let gt = loads(payload).ok()?;
    let seg = match &gt {
        Value::Dict(_) => gt.get("segmentation")?,
        _ => return None,
    };
    if seg.as_list()?.len() < 3 {
        return None;
    }
    let inside = region::count_in_polygon(&pred, seg).ok()?;
    Some(if pred.is_empty() {
        0.0
    } else {
        inside as f64 / pred.len() as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_and_key_order() {
        let s = score(
            "<think>x</think><answer><point>[[100, 100]]</point></answer>",
            "<type>point_ref</type>[[100, 100]]",
        )
        .unwrap();
        let keys: Vec<&str> = s.components().iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "overall",
                "thinking_format",
                "point_format",
                "robopoint_point_distance"
            ]
        );
        assert!((s.overall() - 1.0).abs() < 1e-12);
        assert_eq!(serde_json::to_string(&s).unwrap().find("overall"), Some(2));
        assert_eq!(score("B", "no tag"), Err(RewardError::MissingType));
        assert_eq!(
            score("B", "<type>Point_Ref</type>[]")
                .unwrap_err()
                .python_exception(),
            "ValueError"
        );
        let err = score("<point>[[1, 2]]</point>", "<type>point_ref</type>[[1, 2]").unwrap_err();
        assert_eq!(err.python_exception(), "JSONDecodeError");
        // Without a <point> block the broken ground truth is never read.
        assert!(score("nothing", "<type>point_ref</type>[[1, 2]").is_ok());
    }
}
