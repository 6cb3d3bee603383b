//! The question makers: VSI-Bench's question types (Yang et al. 2024, arXiv 2412.14171, its
//! benchmark construction and question templates; the type names are those of `lmms_eval/tasks/vsibench/utils.py` in
//! github.com/vision-x-nyu/thinking-in-space at commit 51e089c) asked of one sequence's truth,
//! plus ours, `object_moved_direction`.
//!
//! Only objects seen in the video (in view in at least one frame) are asked about, as VSI-Bench
//! asks only about what its video shows. Where our scene differs from a room the wording says so:
//! distances are between object centres (the centres of their axis-aligned bounds), not "from the
//! closest point of each object", and counts are of objects "on the table in this video".
//!
//! Every answer has a margin, so no two options are equally right and a small error of the
//! simulator cannot flip it:
//! * `object_abs_distance`: pairs at least `MIN_PAIR_M` apart; metres to 0.01.
//! * `object_size_estimation`: the longest of the object's own extents, cm to 0.1.
//! * `object_counting`: categories with two or more objects seen, and all objects seen.
//! * `object_rel_distance`: the closest candidate at least `REL_DISTANCE_MARGIN_M` closer than
//!   the next.
//! * `object_rel_direction_{easy,medium,hard}`: standing at X (its centre, on the table plane)
//!   facing Y, the bearing of Z at least `ANGLE_MARGIN_DEG` from every boundary of the answer's
//!   sector (left/right: 0° and 180°; back: ±135°; quadrants: 0°, ±90°, 180°), with X, Y and Z
//!   pairwise at least `MIN_PAIR_M` apart. Easy asks left or right, medium left, right or back
//!   (back: a turn of at least 135°, VSI-Bench's words), hard the quadrant.
//! * `obj_appearance_order`: objects whose first frames in view differ (by at least
//!   `APPEARANCE_GAP_FRAMES`; 3 or 4 of them); the distractors are other orders.
//! * `object_moved_direction` (recorded changes): the move, in the table plane, split along the
//!   first frame's camera right and forward (both levelled); the larger part at least twice the
//!   other and the move at least `MIN_MOVE_M`. Left/right are the viewer's, toward/away from the
//!   camera.
//!
//! VSI-Bench's `route_planning` is not made: on a table a route "go forward until the cup, turn
//! left" has no walls or walkways to make one turn sequence the only right one. Its
//! `room_size_estimation` has no counterpart (a table, not a room).
//!
//! The correct option's letter is drawn by a generator seeded from the sequence, so the files
//! are the same for the same options.

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::truth::{dist, ObjectTruth, SequenceTruth};

/// Pairs of objects closer than this (m, centres) are not asked about.
pub(crate) const MIN_PAIR_M: f64 = 0.08;
/// The closest object must beat the next by this much (m).
pub(crate) const REL_DISTANCE_MARGIN_M: f64 = 0.05;
/// Bearings this close to a sector boundary (degrees) are not asked about.
pub(crate) const ANGLE_MARGIN_DEG: f64 = 20.0;
/// First appearances must be this many frames apart.
pub(crate) const APPEARANCE_GAP_FRAMES: usize = 1;
/// A move shorter than this (m) is not asked about.
pub(crate) const MIN_MOVE_M: f64 = 0.05;
/// At most this many relative-direction questions of each difficulty per sequence.
const REL_DIRECTION_PER_LEVEL: usize = 2;

/// VSI-Bench's question types (their names), and ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionType {
    /// How many objects (of a category).
    ObjectCounting,
    /// Metres between two objects' centres.
    ObjectAbsDistance,
    /// Longest dimension of an object, cm.
    ObjectSizeEstimation,
    /// Which of these is closest to X.
    ObjectRelDistance,
    /// Standing at X facing Y: is Z left or right.
    ObjectRelDirectionEasy,
    /// ... left, right or back.
    ObjectRelDirectionMedium,
    /// ... which quadrant.
    ObjectRelDirectionHard,
    /// The order objects first appear in.
    ObjAppearanceOrder,
    /// Ours: which way an object was moved during the video.
    ObjectMovedDirection,
}

impl QuestionType {
    /// Every type, in the order tables list them.
    pub const ALL: [QuestionType; 9] = [
        QuestionType::ObjectCounting,
        QuestionType::ObjectAbsDistance,
        QuestionType::ObjectSizeEstimation,
        QuestionType::ObjectRelDistance,
        QuestionType::ObjectRelDirectionEasy,
        QuestionType::ObjectRelDirectionMedium,
        QuestionType::ObjectRelDirectionHard,
        QuestionType::ObjAppearanceOrder,
        QuestionType::ObjectMovedDirection,
    ];

    /// The name in `question_type`.
    pub fn name(self) -> &'static str {
        match self {
            QuestionType::ObjectCounting => "object_counting",
            QuestionType::ObjectAbsDistance => "object_abs_distance",
            QuestionType::ObjectSizeEstimation => "object_size_estimation",
            QuestionType::ObjectRelDistance => "object_rel_distance",
            QuestionType::ObjectRelDirectionEasy => "object_rel_direction_easy",
            QuestionType::ObjectRelDirectionMedium => "object_rel_direction_medium",
            QuestionType::ObjectRelDirectionHard => "object_rel_direction_hard",
            QuestionType::ObjAppearanceOrder => "obj_appearance_order",
            QuestionType::ObjectMovedDirection => "object_moved_direction",
        }
    }

    /// Whether the answer is a number (scored by MRA) rather than a letter.
    pub fn is_number(self) -> bool {
        matches!(
            self,
            QuestionType::ObjectCounting
                | QuestionType::ObjectAbsDistance
                | QuestionType::ObjectSizeEstimation
        )
    }
}

impl std::fmt::Display for QuestionType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How an answer is scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerKind {
    /// An option letter, exact match.
    Choice,
    /// A number, Mean Relative Accuracy.
    Number,
}

/// One line of `questions.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpatialQuestion {
    /// `<sequence id>/<question type>/<n>`, unique in a file.
    pub id: String,
    /// The frames' folder, relative to the JSONL's folder (`sequences/<id>`).
    pub sequence: String,
    /// Frames per second of the sequence.
    pub fps: f64,
    /// What is asked.
    pub question_type: QuestionType,
    /// The question (options not included).
    pub question: String,
    /// `"A. …"` lines for a choice, empty for a number.
    pub options: Vec<String>,
    /// The correct letter, or the number as text.
    pub answer: String,
    /// How the answer is scored.
    pub kind: AnswerKind,
}

/// Option letters.
const LETTERS: [char; 4] = ['A', 'B', 'C', 'D'];

/// A question in the making: the sequence's questions get ids and the sequence's path later.
pub(crate) struct Draft {
    pub question_type: QuestionType,
    pub question: String,
    pub options: Vec<String>,
    pub answer: String,
}

fn number(question_type: QuestionType, question: String, answer: String) -> Draft {
    Draft {
        question_type,
        question,
        options: Vec::new(),
        answer,
    }
}

/// The truth among the distractors at a drawn position; options lettered.
fn choice(
    question_type: QuestionType,
    question: String,
    truth: String,
    distractors: Vec<String>,
    rng: &mut ChaCha8Rng,
) -> Draft {
    let mut all: Vec<(bool, String)> = std::iter::once((true, truth))
        .chain(distractors.into_iter().map(|d| (false, d)))
        .collect();
    all.shuffle(rng);
    let correct = all.iter().position(|(t, _)| *t).unwrap_or(0);
    Draft {
        question_type,
        question,
        options: all
            .iter()
            .zip(LETTERS)
            .map(|((_, text), l)| format!("{l}. {text}"))
            .collect(),
        answer: LETTERS[correct].to_string(),
    }
}

fn xy(a: [f64; 3]) -> [f64; 2] {
    [a[0], a[1]]
}

/// Signed bearing of `z` seen from `x` facing `y`, degrees, positive to the left (z up).
pub(crate) fn bearing_deg(x: [f64; 2], y: [f64; 2], z: [f64; 2]) -> f64 {
    let f = [y[0] - x[0], y[1] - x[1]];
    let v = [z[0] - x[0], z[1] - x[1]];
    let cross = f[0] * v[1] - f[1] * v[0];
    let dot = f[0] * v[0] + f[1] * v[1];
    cross.atan2(dot).to_degrees()
}

/// The answer of a relative-direction question of `level` (0 easy, 1 medium, 2 hard) for bearing
/// `b`, or `None` when `b` is within the margin of a boundary of its sector.
pub(crate) fn direction_answer(level: usize, b: f64) -> Option<&'static str> {
    let m = ANGLE_MARGIN_DEG;
    let a = b.abs();
    let side = if b > 0.0 { "left" } else { "right" };
    match level {
        0 => (m..=180.0 - m).contains(&a).then_some(side),
        1 => {
            if a >= 135.0 + m {
                Some("back")
            } else if (m..=135.0 - m).contains(&a) {
                Some(side)
            } else {
                None
            }
        }
        _ => {
            let away = [0.0, 90.0, 180.0].iter().all(|e| (a - e).abs() >= m);
            let front = a < 90.0;
            away.then_some(match (front, b > 0.0) {
                (true, true) => "front-left",
                (true, false) => "front-right",
                (false, true) => "back-left",
                (false, false) => "back-right",
            })
        }
    }
}

/// The options of a relative-direction level, in VSI-Bench's order.
fn direction_options(level: usize) -> &'static [&'static str] {
    match level {
        0 => &["left", "right"],
        1 => &["left", "right", "back"],
        _ => &["front-left", "front-right", "back-left", "back-right"],
    }
}

fn direction_question(level: usize, x: &str, y: &str, z: &str) -> String {
    let lead = format!("If I am standing by the {x} and facing the {y}, ");
    match level {
        0 => format!("{lead}is the {z} to my left or my right?"),
        1 => format!(
            "{lead}is the {z} to my left, right, or back? An object is to my back if I would \
             have to turn at least 135 degrees in order to face it."
        ),
        _ => format!(
            "{lead}is the {z} to my front-left, front-right, back-left, or back-right? The \
             directions refer to the quadrants of a Cartesian plane (if I am standing at the \
             origin and facing along the positive y-axis)."
        ),
    }
}

/// The questions of a sequence without a recorded change.
pub(crate) fn static_questions(seq: &SequenceTruth, rng: &mut ChaCha8Rng) -> Vec<Draft> {
    let first = seq.first_seen();
    let seen: Vec<&ObjectTruth> = first.iter().map(|(o, _)| *o).collect();
    let mut out = Vec::new();

    // object_counting
    if seen.len() >= 2 {
        out.push(number(
            QuestionType::ObjectCounting,
            "How many objects are on the table in this video?".into(),
            seen.len().to_string(),
        ));
    }
    let mut categories: Vec<&str> = seen.iter().map(|o| o.category.as_str()).collect();
    categories.sort_unstable();
    categories.dedup();
    for c in categories {
        let n = seen.iter().filter(|o| o.category == c).count();
        if n >= 2 {
            out.push(number(
                QuestionType::ObjectCounting,
                format!("How many {c}(s) are on the table in this video?"),
                n.to_string(),
            ));
        }
    }

    // object_abs_distance
    for (i, a) in seen.iter().enumerate() {
        for b in &seen[i + 1..] {
            let d = dist(a.centre, b.centre);
            if d >= MIN_PAIR_M {
                out.push(number(
                    QuestionType::ObjectAbsDistance,
                    format!(
                        "Measuring between the centres of the objects, what is the direct \
                         distance between the {} and the {} (in meters)?",
                        a.phrase, b.phrase
                    ),
                    format!("{d:.2}"),
                ));
            }
        }
    }

    // object_size_estimation
    for o in &seen {
        let longest = o.size_m.iter().copied().fold(0.0, f64::max) * 100.0;
        out.push(number(
            QuestionType::ObjectSizeEstimation,
            format!(
                "What is the length of the longest dimension (length, width, or height) of the \
                 {}, measured in centimeters?",
                o.phrase
            ),
            format!("{longest:.1}"),
        ));
    }

    // object_rel_distance
    for x in &seen {
        let mut others: Vec<(&ObjectTruth, f64)> = seen
            .iter()
            .filter(|o| o.name != x.name)
            .map(|o| (*o, dist(o.centre, x.centre)))
            .collect();
        if others.len() < 2 {
            continue;
        }
        others.sort_by(|a, b| a.1.total_cmp(&b.1));
        others.truncate(4);
        if others[1].1 - others[0].1 < REL_DISTANCE_MARGIN_M {
            continue;
        }
        let truth = others[0].0.phrase.clone();
        let distractors: Vec<String> = others[1..].iter().map(|(o, _)| o.phrase.clone()).collect();
        let draft = choice(
            QuestionType::ObjectRelDistance,
            String::new(),
            truth,
            distractors,
            rng,
        );
        let listed: Vec<&str> = draft
            .options
            .iter()
            .map(|o| o.get(3..).unwrap_or(""))
            .collect();
        out.push(Draft {
            question: format!(
                "Measuring between the centres of the objects, which of these objects ({}) is \
                 the closest to the {}?",
                listed.join(", "),
                x.phrase
            ),
            ..draft
        });
    }

    // object_rel_direction_{easy,medium,hard}
    let mut triples = Vec::new();
    for x in &seen {
        for y in &seen {
            for z in &seen {
                let names = [&x.name, &y.name, &z.name];
                if names[0] == names[1] || names[0] == names[2] || names[1] == names[2] {
                    continue;
                }
                let far = dist(x.centre, y.centre) >= MIN_PAIR_M
                    && dist(x.centre, z.centre) >= MIN_PAIR_M
                    && dist(y.centre, z.centre) >= MIN_PAIR_M;
                if far {
                    triples.push((*x, *y, *z));
                }
            }
        }
    }
    let levels = [
        QuestionType::ObjectRelDirectionEasy,
        QuestionType::ObjectRelDirectionMedium,
        QuestionType::ObjectRelDirectionHard,
    ];
    for (level, qt) in levels.into_iter().enumerate() {
        let mut valid: Vec<(&ObjectTruth, &ObjectTruth, &ObjectTruth, &str)> = triples
            .iter()
            .filter_map(|&(x, y, z)| {
                let b = bearing_deg(xy(x.centre), xy(y.centre), xy(z.centre));
                direction_answer(level, b).map(|a| (x, y, z, a))
            })
            .collect();
        valid.shuffle(rng);
        for (x, y, z, answer) in valid.into_iter().take(REL_DIRECTION_PER_LEVEL) {
            let distractors = direction_options(level)
                .iter()
                .filter(|o| **o != answer)
                .map(|o| o.to_string())
                .collect();
            out.push(choice(
                qt,
                direction_question(level, &x.phrase, &y.phrase, &z.phrase),
                answer.to_string(),
                distractors,
                rng,
            ));
        }
    }

    // obj_appearance_order
    let mut by_first = first.clone();
    by_first.sort_by_key(|(o, f)| (*f, o.instance));
    let mut kept: Vec<(&ObjectTruth, usize)> = Vec::new();
    for (o, f) in by_first {
        if kept
            .last()
            .is_none_or(|(_, g)| f >= g + APPEARANCE_GAP_FRAMES)
        {
            kept.push((o, f));
        }
    }
    kept.truncate(4);
    if kept.len() >= 3 {
        let order: Vec<&str> = kept.iter().map(|(o, _)| o.phrase.as_str()).collect();
        let truth = order.join(", ");
        let mut distractors: Vec<String> = Vec::new();
        for _ in 0..200 {
            if distractors.len() == 3 {
                break;
            }
            let mut p = order.clone();
            p.shuffle(rng);
            let text = p.join(", ");
            if text != truth && !distractors.contains(&text) {
                distractors.push(text);
            }
        }
        let mut listed = order.clone();
        listed.shuffle(rng);
        out.push(choice(
            QuestionType::ObjAppearanceOrder,
            format!(
                "What will be the first-time appearance order of the following objects in the \
                 video: {}?",
                listed.join(", ")
            ),
            truth,
            distractors,
            rng,
        ));
    }
    out
}

/// The direction of a move `d` (world, m) in the view of a camera whose levelled right and
/// forward axes are `right` and `forward`, or `None` without a clear winner (see the module docs).
pub(crate) fn moved_direction(
    d: [f64; 3],
    right: [f64; 2],
    forward: [f64; 2],
) -> Option<&'static str> {
    let a = d[0] * right[0] + d[1] * right[1];
    let b = d[0] * forward[0] + d[1] * forward[1];
    if (d[0] * d[0] + d[1] * d[1]).sqrt() < MIN_MOVE_M {
        return None;
    }
    if a.abs() >= 2.0 * b.abs() {
        Some(if a > 0.0 { "right" } else { "left" })
    } else if b.abs() >= 2.0 * a.abs() {
        Some(if b > 0.0 {
            "away from the camera"
        } else {
            "toward the camera"
        })
    } else {
        None
    }
}

/// Unit vector of `v`'s x, y; `None` when it is (nearly) vertical.
pub(crate) fn level(v: [f64; 3]) -> Option<[f64; 2]> {
    let n = (v[0] * v[0] + v[1] * v[1]).sqrt();
    (n > 1e-6).then(|| [v[0] / n, v[1] / n])
}

/// The question of a sequence with a recorded change, or why there is none.
pub(crate) fn moved_question(seq: &SequenceTruth, rng: &mut ChaCha8Rng) -> Result<Draft, String> {
    let m = seq.moved.as_ref().ok_or("no recorded change")?;
    let obj = seq
        .object(&m.object)
        .ok_or_else(|| format!("no object `{}`", m.object))?;
    let before = seq.frames[..m.first_frame_after.min(seq.frames.len())]
        .iter()
        .any(|f| f.sees(&m.object));
    let after = seq.frames[m.first_frame_after.min(seq.frames.len())..]
        .iter()
        .any(|f| f.sees(&m.object));
    if !(before && after) {
        return Err(format!(
            "the {} is not in view both before and after the move",
            obj.phrase
        ));
    }
    let f0 = seq.frames.first().ok_or("no frames")?;
    let (right, forward) = level(f0.axis(0))
        .zip(level(f0.axis(2)))
        .ok_or("the first frame looks straight down")?;
    let d = [0, 1, 2].map(|i| m.end_centre[i] - m.start_centre[i]);
    let answer = moved_direction(d, right, forward).ok_or_else(|| {
        format!(
            "the move ({:.2}, {:.2}) m has no clear direction in the first view",
            d[0], d[1]
        )
    })?;
    let all = ["left", "right", "toward the camera", "away from the camera"];
    let distractors = all
        .iter()
        .filter(|o| **o != answer)
        .map(|o| o.to_string())
        .collect();
    Ok(choice(
        QuestionType::ObjectMovedDirection,
        format!(
            "During the video the {} is moved. Relative to the camera's view in the first \
             frame, which way was the {} moved?",
            obj.phrase, obj.phrase
        ),
        answer.to_string(),
        distractors,
        rng,
    ))
}
