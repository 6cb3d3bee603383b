//! The GRPO trainer's data: prompt records in the EasyR1 / Embodied-Points-200K layout, a loader
//! that never panics on a bad line, and a generator that makes records from our simulator.
//!
//! # Record format (one JSON object per JSONL line)
//! `{"id": "...", "problem": "<image>the question", "answer": "<type>point_rec</type>{...}",
//! "images": ["images/x.png"]}`: EasyR1's default keys (`prompt_key=problem`,
//! `answer_key=answer`, `image_key=images`), which is what [`write_records`] writes. The reader
//! also accepts the aliases other exports use: `prompt` / `question` for `problem` (first present
//! wins), `ground_truth` / `solution` for `answer` (the first of `answer`, `ground_truth`,
//! `solution` holding a `<type>` tag wins, so a Robot-R1 line, whose `answer` is the bare letter
//! and `ground_truth` the tagged one, reads right), and `image` (a string or a list) for `images`.
//! Image paths are relative to the JSONL file's folder; absolute paths are taken as they are.
//!
//! `<image>` in the problem marks where EasyR1 puts the image. The question given to the model
//! ([`Record::question`]) is the problem with every `<image>` removed and the rest trimmed; the
//! image goes before the text, as in every Embodied-R1 prompt (a problem without the marker, e.g.
//! a Robot-R1 line, is read the same way).
//!
//! Extra keys are kept out of [`Record`] but written by the generator for inspection: `ability`,
//! `task`, `seed`, and `reference`, the oracle pointer's own answer in the PNG's pixels (an
//! independent check of the ground truth: tests score it with the released reward).
//!
//! # What a loadable record is ([`load_records`])
//! A line is skipped and counted ([`SkipTally`], by [`SkipReason`]) when it is not a JSON object,
//! has no problem or no answer, names no image or one that is not a file, has no `<type>` tag or
//! one that nobody scores, or carries a ground truth its reward cannot read. Blank lines are not
//! records and are not counted. The types are the released ones ([`TaskType`], scored by
//! `train::rewards::score`) and ours: `env` (`train::env_reward`), `robot_r1`
//! (`train::robot_r1`) and `spatial` (Embodied-R's reasoning reward, [`super::spatial`]). A
//! `spatial` record is text-only: it needs no image, and one it names is not read.
//!
//! "Cannot read" for a released type: the released function raises for a bad ground truth only
//! for `point_ref` ([`RewardError::GroundTruth`]); every other type reads its ground truth inside
//! a `try` and silently scores 0, so a record with a broken payload would train on a constant
//! reward. The check is therefore both: the released `score` of a format-correct probe response
//! must not raise, and the payload must have the shape the released code reads (e.g.
//! `point_rec`: a dict whose `segmentation` has ≥ 3 `[x, y]` number pairs; `fsd_free_point`: a
//! 4-number `bbox` and exactly 8 `free_points`). Payloads are parsed with `serde_json`, stricter
//! than Python's `json.loads` (no `NaN`); what it refuses is skipped. `env`: the payload after a
//! leading `<type>env</type>` must be an [`EnvTruth`]; `robot_r1`: one option letter; `spatial`:
//! a `super::spatial::SpatialTruth` (a letter A–H, or a positive number).
//!
//! # Generator ([`generate`])
//! For each task of a suite and each seed: the episode's world is built and settled as the runner
//! builds it (`runner::prepare_episode`), the arm placed at home, the camera frame rendered, and
//! one record made per asked ability, its ground truth read from the simulator:
//! * REG → `point_rec` `{"segmentation": polygon}`: the convex hull of the manipulated object's
//!   visible pixels (instance segmentation; each pixel counted as its whole square, so every
//!   object pixel is strictly inside). The query is the runner's REG query ("the pepper").
//! * OFG → `grounding_rec`, the same for the pixels of the functional part (the renderer's
//!   part-level labels): the part the task grasps by (the runner then asks OFG with the
//!   instruction), else the object's `handle` if it has one ("the handle of the mug"); objects
//!   with neither give no OFG record. A convex hull over-covers concave parts (a C-shaped handle's
//!   hull holds its hole): the released polygons are outlines, ours are hulls.
//! * RRG → `fsd_free_point` `{"bbox": [x1, y1, x2, y2], "free_points": 8 × [x, y]}`: the bottom
//!   face of the task's target region (the floor of a container's open volume, the slab over a
//!   support's top, the table area beside an object: what the oracle's place point is the centre
//!   of), projected; the bbox bounds its outline (integers, outward), the points are its centre
//!   and 7 points halfway to its edge (integers). Pick-up tasks have no place and no RRG record.
//! * VTG → `fsd_visual_trace` `{"trajectory": 8 × [x, y]}`: the oracle pointer's trace.
//!
//! The question is the ability's Embodied-R1 template (`Ability::prompt`) filled as the runner
//! fills it. The saved PNG is the frame resized (Pillow's bicubic, `vlm::resize_bicubic_pil`) to
//! the size `vlm::smart_resize` gives under `min_pixels` [`MIN_PIXELS`] and the chosen
//! `max_pixels`: the size the model sees, so a processor with the same or larger budget leaves it
//! untouched and the model's pixel coordinates are the PNG's. Every ground-truth coordinate is in
//! those pixels (scaled from the frame with `ModelImageMap::to_model`), rounded to 0.1 px.
//!
//! Output: `OUT/records.jsonl` and `OUT/images/<suite>-<task>-s<seed>.png` (one frame per
//! episode, shared by its records). Deterministic: the same options give the same bytes.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use k::nalgebra::{Point3, Vector3};
use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::camera::{Camera, Frame};
use crate::executor::{parse_instruction, Intent};
use crate::geometry::Shape;
use crate::pointing::{Ability, ImageSize, ModelImageMap, Pointer, VTG_POINT_COUNT};
use crate::runner::episode::{prepare_episode, sim_camera, EpisodeOptions};
use crate::sim::devices::{Segmentation, SharedWorld, SimRobot};
use crate::sim::oracle::{LabelSource, OracleOptions, OraclePointer, OracleTruth};
use crate::sim::scene::Region;
use crate::sim::tasks::{Episode, Suite, TaskError, TaskSpec};
use crate::train::env_reward::EnvTruth;
use crate::train::rewards::{self, py_strip, RewardError, TaskType};
use crate::train::robot_r1;
use crate::vlm::{resize_bicubic_pil, DEFAULT_MIN_PIXELS, ER1_EVAL_MAX_PIXELS};

/// The JSONL file [`generate`] writes in its output folder.
pub(crate) const JSONL_NAME: &str = "records.jsonl";
/// The folder of the frames, beside the JSONL.
pub(crate) const IMAGES_DIR: &str = "images";
/// Where EasyR1 puts the image in a problem.
pub(crate) const IMAGE_MARKER: &str = "<image>";
/// The `min_pixels` of the saved frames: the Qwen2-VL processor's own default (56·56), so a small
/// `max_pixels` (tests) is never below it.
pub const MIN_PIXELS: u64 = DEFAULT_MIN_PIXELS;
/// The default `max_pixels`: Embodied-R1's evaluation budget, so the frames are the size the
/// released model is evaluated at.
pub const DEFAULT_MAX_PIXELS: u64 = ER1_EVAL_MAX_PIXELS;
/// Fewest visible pixels a REG/OFG target needs (in the frame): a sliver is no fair question.
pub(crate) const MIN_MASK_PIXELS: usize = 25;
/// A format-correct response that makes the released `score` read every ground truth it reads
/// outside its `try` (`point_ref` only reads it when the response has a `<point>` block).
const PROBE_RESPONSE: &str = "<think></think><answer><point>[[0, 0]]</point></answer>";

// ---------------------------------------------------------------------------------------------
// Records.

/// Who scores a record: the released function, or one of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKind {
    /// `train::rewards::score`.
    Released(TaskType),
    /// `train::env_reward::env_reward` (`<type>env</type>`).
    Env,
    /// `train::robot_r1::reward` (`<type>robot_r1</type>`).
    RobotR1,
    /// Embodied-R's reasoning reward on a text-only question (`<type>spatial</type>`, scored by
    /// `super::spatial::spatial_reward`; the payload is a `super::spatial::SpatialTruth`).
    Spatial,
}

impl RecordKind {
    /// The `<type>` string.
    pub(crate) fn name(self) -> &'static str {
        match self {
            RecordKind::Released(t) => t.name(),
            RecordKind::Env => "env",
            RecordKind::RobotR1 => robot_r1::TASK_TYPE,
            RecordKind::Spatial => super::spatial::TASK_TYPE,
        }
    }

    /// The kind a `<type>` string names (exact, as the released dispatch).
    pub(crate) fn from_name(name: &str) -> Option<RecordKind> {
        match name {
            "env" => Some(RecordKind::Env),
            n if n == robot_r1::TASK_TYPE => Some(RecordKind::RobotR1),
            n if n == super::spatial::TASK_TYPE => Some(RecordKind::Spatial),
            n => TaskType::from_name(n).map(RecordKind::Released),
        }
    }
}

impl fmt::Display for RecordKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One loaded prompt: what a rollout shows the policy and what its reward compares against.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// The line's `id`; a line without one gets `<file stem>:<line number>`.
    pub id: String,
    /// The problem without its `<image>` markers, trimmed (the image goes first).
    pub question: String,
    /// The whole ground truth, `<type>…</type>` envelope included (what the rewards take).
    pub ground_truth: String,
    /// Who scores it, from the ground truth's `<type>`.
    pub kind: RecordKind,
    /// Resolved paths, each an existing file; at least one, except for a text-only
    /// [`RecordKind::Spatial`] record, which has none.
    pub images: Vec<PathBuf>,
}

/// One JSONL line as [`write_records`] writes it (EasyR1 keys, then optional documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RecordLine {
    pub id: String,
    /// `<image>` then the question.
    pub problem: String,
    /// The ground truth, `<type>…</type>` first.
    pub answer: String,
    /// Relative to the JSONL's folder.
    pub images: Vec<String>,
    /// `reg`, `rrg`, `ofg` or `vtg`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ability: Option<String>,
    /// The simulated task (`suite/id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The oracle pointer's answer in the image's pixels (not read by the loader).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Vec<[f64; 2]>>,
}

/// The problem text EasyR1 expects for a question about one image.
pub(crate) fn problem_text(question: &str) -> String {
    format!("{IMAGE_MARKER}{question}")
}

/// The question a problem asks: its `<image>` markers removed, trimmed.
pub(crate) fn question_of(problem: &str) -> String {
    problem.replace(IMAGE_MARKER, "").trim().to_string()
}

/// Errors of loading or generating the data.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file or folder could not be read or written.
    #[error("{}: {message}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The error, in words.
        message: String,
    },
    /// The [`DataOptions`] ask for nothing (no episodes, no abilities) or for too few pixels.
    #[error("data options: {0}")]
    Options(String),
    /// An unknown task id, or a task that could not be built.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// An episode's frame could not be made (its instruction, world, home pose, capture or
    /// resize failed); `reason` says which.
    #[error("{task}: {reason}")]
    Frame {
        /// The task (`suite/id`, or the scene's name and seed).
        task: String,
        /// What failed.
        reason: String,
    },
}

fn io_err(path: &Path, e: impl fmt::Display) -> DataError {
    DataError::Io {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

/// Writes `lines` as JSONL at `path`, atomically (a temporary file beside it, then a rename), so
/// a reader never finds half a file.
pub(crate) fn write_records(path: &Path, lines: &[RecordLine]) -> Result<(), DataError> {
    let mut text = String::new();
    for line in lines {
        text.push_str(&serde_json::to_string(line).map_err(|e| io_err(path, e))?);
        text.push('\n');
    }
    let tmp = path.with_extension("jsonl.tmp");
    std::fs::write(&tmp, text).map_err(|e| io_err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))
}

// ---------------------------------------------------------------------------------------------
// Loading.

/// Why a line was not loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipReason {
    /// Not JSON, not a JSON object, or not UTF-8.
    InvalidJson,
    /// No `problem` (`prompt`, `question`) string.
    MissingProblem,
    /// No `answer` (`ground_truth`, `solution`) string.
    MissingAnswer,
    /// No image named, or a named image that is not a file.
    MissingImage,
    /// No `<type>…</type>` in the ground truth.
    MissingType,
    /// A `<type>` nobody scores.
    UnknownType,
    /// A ground truth its reward cannot read.
    UnparsableGroundTruth,
    /// A line longer than [`MAX_RECORD_BYTES`].
    TooLong,
}

impl SkipReason {
    /// The words after "skipped N records".
    pub(crate) fn describe(self) -> &'static str {
        match self {
            SkipReason::InvalidJson => "with invalid JSON (or not an object)",
            SkipReason::MissingProblem => "with no problem",
            SkipReason::MissingAnswer => "with no answer",
            SkipReason::MissingImage => "with a missing image",
            SkipReason::MissingType => "whose answer has no <type> tag",
            SkipReason::UnknownType => "of an unknown <type>",
            SkipReason::UnparsableGroundTruth => "whose ground truth the reward cannot read",
            SkipReason::TooLong => "longer than 1 MiB",
        }
    }
}

/// Skipped lines per reason: how many, and the first one's line number (1-based).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkipTally {
    by_reason: BTreeMap<SkipReason, (usize, usize)>,
}

impl SkipTally {
    pub(crate) fn add(&mut self, reason: SkipReason, line: usize) {
        let entry = self.by_reason.entry(reason).or_insert((0, line));
        entry.0 += 1;
    }

    /// Lines skipped for `reason`.
    pub fn count(&self, reason: SkipReason) -> usize {
        self.by_reason.get(&reason).map_or(0, |e| e.0)
    }

    /// The line number (1-based) of the first line skipped for `reason`.
    #[cfg(test)]
    pub(crate) fn first_line(&self, reason: SkipReason) -> Option<usize> {
        self.by_reason.get(&reason).map(|e| e.1)
    }

    /// Lines skipped for any reason.
    pub fn total(&self) -> usize {
        self.by_reason.values().map(|e| e.0).sum()
    }

    /// Whether no line was skipped.
    pub fn is_empty(&self) -> bool {
        self.by_reason.is_empty()
    }

    /// `(reason, count, first line)`, in [`SkipReason`] order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (SkipReason, usize, usize)> + '_ {
        self.by_reason.iter().map(|(r, (n, l))| (*r, *n, *l))
    }
}

/// One warning line per reason, e.g. "skipped 3 records with a missing image (first: line 7)".
impl fmt::Display for SkipTally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (reason, n, line)) in self.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            let s = if n == 1 { "" } else { "s" };
            write!(
                f,
                "skipped {n} record{s} {} (first: line {line})",
                reason.describe()
            )?;
        }
        Ok(())
    }
}

/// Reads a JSONL of records. A file that cannot be opened (or read) is an error; a bad line is
/// skipped and counted, never an error.
pub fn load_records(path: &Path) -> Result<(Vec<Record>, SkipTally), DataError> {
    pointact_core::input::regular_file(path).map_err(|e| io_err(path, e))?;
    let file = std::fs::File::open(path).map_err(|e| io_err(path, e))?;
    let base = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let fallback_id = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut reader = std::io::BufReader::new(file);
    let (mut records, mut tally) = (Vec::new(), SkipTally::default());
    let mut buf = Vec::new();
    for line_no in 1.. {
        buf.clear();
        let read = (&mut reader)
            .take(MAX_RECORD_BYTES + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| io_err(path, e))?;
        if read == 0 {
            break;
        }
        if buf.len() as u64 > MAX_RECORD_BYTES {
            // Skip the rest of the line without keeping it.
            if buf.last() != Some(&b'\n') {
                skip_line(&mut reader).map_err(|e| io_err(path, e))?;
            }
            tally.add(SkipReason::TooLong, line_no);
            continue;
        }
        let Ok(text) = std::str::from_utf8(&buf) else {
            tally.add(SkipReason::InvalidJson, line_no);
            continue;
        };
        // Editors on Windows start a UTF-8 file with a byte-order mark; it is not JSON.
        let text = if line_no == 1 {
            text.strip_prefix(UTF8_BOM).unwrap_or(text)
        } else {
            text
        };
        if text.trim().is_empty() {
            continue;
        }
        match parse_line(text, &base, &format!("{fallback_id}:{line_no}")) {
            Ok(r) => records.push(r),
            Err(reason) => tally.add(reason, line_no),
        }
    }
    Ok((records, tally))
}

/// Longest record line read (1 MiB): a real record is a question of a few hundred words and
/// the image's path; a longer one could not fit a model's positions anyway.
pub const MAX_RECORD_BYTES: u64 = 1 << 20;

/// Reads past the next newline (or to the end), keeping nothing.
fn skip_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok(());
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = chunk.len();
                reader.consume(n);
            }
        }
    }
}

/// The UTF-8 byte-order mark a file may start with (U+FEFF).
pub(crate) const UTF8_BOM: char = '\u{feff}';

/// One line to a record, or why not. `fallback_id` names a line without an `id`.
pub(crate) fn parse_line(line: &str, base: &Path, fallback_id: &str) -> Result<Record, SkipReason> {
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(line) else {
        return Err(SkipReason::InvalidJson);
    };
    let problem =
        first_string(&obj, &["problem", "prompt", "question"]).ok_or(SkipReason::MissingProblem)?;
    let answer = answer_of(&obj).ok_or(SkipReason::MissingAnswer)?;
    // A spatial record is a text-only question (Embodied-R trains its reasoning model on text);
    // any image it names is not read. Every other kind needs its image, checked before its type.
    let kind = classify(answer);
    let images = if kind == Ok(RecordKind::Spatial) {
        Vec::new()
    } else {
        images_of(&obj, base)?
    };
    let kind = kind?;
    let id = match obj.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => fallback_id.to_string(),
    };
    Ok(Record {
        id,
        question: question_of(problem),
        ground_truth: answer.to_string(),
        kind,
        images,
    })
}

fn first_string<'a>(obj: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .find_map(|k| obj.get(*k).and_then(Value::as_str))
}

/// The ground truth: the first of `answer`, `ground_truth`, `solution` with a `<type>` tag, else
/// the first present (which then fails the type check).
fn answer_of(obj: &Map<String, Value>) -> Option<&str> {
    let keys = ["answer", "ground_truth", "solution"];
    let present = || {
        keys.iter()
            .filter_map(|k| obj.get(*k).and_then(Value::as_str))
    };
    present()
        .find(|a| TYPE_TAG.is_match(a))
        .or_else(|| present().next())
}

/// The images named by `images` (or `image`), each resolved against `base` and existing.
fn images_of(obj: &Map<String, Value>, base: &Path) -> Result<Vec<PathBuf>, SkipReason> {
    let named: Vec<&str> = match obj.get("images").or_else(|| obj.get("image")) {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(items)) => items
            .iter()
            .map(Value::as_str)
            .collect::<Option<Vec<_>>>()
            .ok_or(SkipReason::MissingImage)?,
        _ => Vec::new(),
    };
    if named.is_empty() {
        return Err(SkipReason::MissingImage);
    }
    named
        .into_iter()
        .map(|n| {
            let p = Path::new(n);
            let p = if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            };
            p.is_file().then_some(p).ok_or(SkipReason::MissingImage)
        })
        .collect()
}

/// The released envelope rule: the first `<type>(.*?)</type>` anywhere (DOTALL).
static TYPE_TAG: LazyLock<Regex> = LazyLock::new(|| rewards::re(r"(?s)<type>(.*?)</type>"));

/// `(type, payload)`, both stripped as the released `parse_ground_truth` strips them.
fn envelope(gt: &str) -> Option<(&str, &str)> {
    let caps = TYPE_TAG.captures(gt)?;
    let (whole, ty) = (caps.get(0)?, caps.get(1)?);
    Some((py_strip(ty.as_str()), py_strip(&gt[whole.end()..])))
}

/// The kind of a ground truth, if its reward can read it (see the module docs).
pub fn classify(ground_truth: &str) -> Result<RecordKind, SkipReason> {
    let (ty, payload) = envelope(ground_truth).ok_or(SkipReason::MissingType)?;
    let kind = RecordKind::from_name(ty).ok_or(SkipReason::UnknownType)?;
    let readable = match kind {
        RecordKind::Released(task) => {
            !matches!(
                rewards::score(PROBE_RESPONSE, ground_truth),
                Err(RewardError::GroundTruth(_))
            ) && released_payload_ok(task, payload)
        }
        // As `env_reward` reads it: the tag first, then an `EnvTruth`.
        RecordKind::Env => ground_truth
            .trim()
            .strip_prefix("<type>env</type>")
            .is_some_and(|p| serde_json::from_str::<EnvTruth>(p).is_ok()),
        RecordKind::RobotR1 => robot_r1::ground_truth_letter(ground_truth).is_ok(),
        RecordKind::Spatial => super::spatial::SpatialTruth::parse(ground_truth).is_ok(),
    };
    if readable {
        Ok(kind)
    } else {
        Err(SkipReason::UnparsableGroundTruth)
    }
}

fn is_number_list(v: &Value, len: usize) -> bool {
    v.as_array()
        .is_some_and(|a| a.len() == len && a.iter().all(Value::is_number))
}

/// `v` is a list of `[x, y]` number pairs whose length `ok` accepts.
fn is_points(v: Option<&Value>, ok: impl Fn(usize) -> bool) -> bool {
    v.and_then(Value::as_array)
        .is_some_and(|a| ok(a.len()) && a.iter().all(|p| is_number_list(p, 2)))
}

/// Whether a released payload has the shape the released code reads (where a different shape
/// would zero the task term without an error).
fn released_payload_ok(task: TaskType, payload: &str) -> bool {
    if matches!(task, TaskType::GeneralQa | TaskType::SpatialQa) {
        return !payload.is_empty();
    }
    let Ok(v) = serde_json::from_str::<Value>(payload) else {
        return false;
    };
    match task {
        TaskType::GeneralQa | TaskType::SpatialQa => true,
        TaskType::PointRef => is_points(Some(&v), |n| n > 0),
        TaskType::FsdFreePoint => {
            v.get("bbox").is_some_and(|b| is_number_list(b, 4))
                && is_points(v.get("free_points"), |n| n == 8)
        }
        TaskType::FsdVisualTrace => is_points(v.get("trajectory"), |n| n > 0),
        TaskType::PointRec | TaskType::GroundingRec => is_points(v.get("segmentation"), |n| n >= 3),
        TaskType::Position3d => {
            v.get("direction").is_some_and(Value::is_string)
                && v.get("object")
                    .and_then(Value::as_array)
                    .is_some_and(|o| !o.is_empty() && o.iter().all(|p| is_number_list(p, 3)))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Generation.

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct DataOptions {
    /// The suite whose tasks are used; default tabletop.
    pub suite: Suite,
    /// Task ids of the suite to use (`cup_on_plate` or `tabletop/cup_on_plate`); empty: all.
    pub tasks: Vec<String>,
    /// Seeds `seed .. seed + episodes` of every task.
    pub episodes: u64,
    /// First seed; default 0.
    pub seed: u64,
    /// Which questions to ask of every episode; default all.
    pub abilities: Vec<Ability>,
    /// The saved frames' pixel budget (see the module docs).
    pub max_pixels: u64,
    /// Output folder: the JSONL and the frames' folder; default `grpo-data`.
    pub out: PathBuf,
}

impl Default for DataOptions {
    fn default() -> Self {
        DataOptions {
            suite: Suite::Tabletop,
            tasks: Vec::new(),
            episodes: 4,
            seed: 0,
            abilities: Ability::ALL.to_vec(),
            max_pixels: DEFAULT_MAX_PIXELS,
            out: PathBuf::from("grpo-data"),
        }
    }
}

/// Where [`generate`] is, after each episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Episodes finished.
    pub done: usize,
    /// Episodes in the whole run (tasks × seeds).
    pub total: usize,
    /// Records made so far.
    pub records: usize,
}

/// An episode, or one of its questions, that gave no record.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    /// `suite/id`.
    pub task: String,
    /// The episode's seed.
    pub seed: u64,
    /// `None`: the whole episode.
    pub ability: Option<Ability>,
    /// Why it gave no record.
    pub reason: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} seed {}", self.task, self.seed)?;
        if let Some(a) = self.ability {
            write!(f, " {a}")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// What [`generate`] made.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Episodes tried.
    pub episodes: usize,
    /// Frames written (one per episode that gave a record).
    pub images: usize,
    /// Records per ability.
    pub records: BTreeMap<Ability, usize>,
    /// Episodes and questions that gave no record, and why.
    pub skipped: Vec<Skipped>,
    /// The JSONL written.
    pub jsonl: PathBuf,
    /// The saved frames' size (width, height), from the first one.
    pub image_size: Option<[u32; 2]>,
}

impl Summary {
    /// Records written, over all abilities.
    pub fn total_records(&self) -> usize {
        self.records.values().sum()
    }
}

fn check(opts: &DataOptions) -> Result<(), DataError> {
    if opts.episodes == 0 {
        return Err(DataError::Options("no episodes asked for".into()));
    }
    if opts.abilities.is_empty() {
        return Err(DataError::Options("no abilities asked for".into()));
    }
    if opts.max_pixels < MIN_PIXELS {
        return Err(DataError::Options(format!(
            "max pixels {} is below the minimum {MIN_PIXELS}",
            opts.max_pixels
        )));
    }
    Ok(())
}

/// Makes the records (see the module docs); `progress` sees every finished episode. Episodes or
/// questions that cannot be made are listed in the summary, not errors; a file that cannot be
/// written is.
pub fn generate(
    opts: &DataOptions,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Summary, DataError> {
    check(opts)?;
    let tasks = opts.suite.select(&opts.tasks)?;
    let images_dir = opts.out.join(IMAGES_DIR);
    std::fs::create_dir_all(&images_dir).map_err(|e| io_err(&images_dir, e))?;
    let jsonl = opts.out.join(JSONL_NAME);
    let seeds = opts.seed..opts.seed.saturating_add(opts.episodes);
    let mut summary = Summary {
        episodes: 0,
        images: 0,
        records: BTreeMap::new(),
        skipped: Vec::new(),
        jsonl: jsonl.clone(),
        image_size: None,
    };
    let total = tasks.len() * seeds.clone().count();
    let mut lines = Vec::new();
    for spec in &tasks {
        for seed in seeds.clone() {
            summary.episodes += 1;
            episode_records(spec, seed, opts, &images_dir, &mut lines, &mut summary)?;
            progress(&Progress {
                done: summary.episodes,
                total,
                records: lines.len(),
            });
        }
    }
    write_records(&jsonl, &lines)?;
    Ok(summary)
}

/// The records of one episode, appended to `lines`; its frame is written when it gives any.
fn episode_records(
    spec: &TaskSpec,
    seed: u64,
    opts: &DataOptions,
    images_dir: &Path,
    lines: &mut Vec<RecordLine>,
    summary: &mut Summary,
) -> Result<(), DataError> {
    let task = spec.full_id();
    let skip = |ability: Option<Ability>, reason: String| Skipped {
        task: task.clone(),
        seed,
        ability,
        reason,
    };
    let shot = match Shot::take(spec, seed, opts.max_pixels) {
        Ok(s) => s,
        Err(reason) => {
            tracing::warn!(task = %task, seed, "no records: {reason}");
            summary.skipped.push(skip(None, reason));
            return Ok(());
        }
    };
    let name = format!("{}-s{seed}.png", task.replace('/', "-"));
    let rel = format!("{IMAGES_DIR}/{name}");
    let mut made = 0;
    for &ability in &opts.abilities {
        match shot.question(ability) {
            Ok(q) => {
                made += 1;
                *summary.records.entry(ability).or_default() += 1;
                lines.push(RecordLine {
                    id: format!("{task}/s{seed}/{ability}"),
                    problem: problem_text(&ability.prompt(&q.query)),
                    answer: q.ground_truth,
                    images: vec![rel.clone()],
                    ability: Some(ability.as_str().to_string()),
                    task: Some(task.clone()),
                    seed: Some(seed),
                    reference: q.reference,
                });
            }
            Err(reason) => summary.skipped.push(skip(Some(ability), reason)),
        }
    }
    if made > 0 {
        let path = images_dir.join(&name);
        shot.image.save(&path).map_err(|e| io_err(&path, e))?;
        summary.images += 1;
        summary
            .image_size
            .get_or_insert([shot.image.width(), shot.image.height()]);
    }
    Ok(())
}

/// A REG question about one object of a frame.
#[derive(Debug, Clone)]
pub struct ObjectQuestion {
    /// The object's scene name.
    pub object: String,
    /// The ability's prompt about the object's first alias (e.g. "the red block").
    pub question: String,
    /// `<type>point_rec</type>{"segmentation": hull}` in the image's pixels.
    pub ground_truth: String,
}

/// The first frame of `episode` (laid out by the caller, e.g. a task's episode moved into a
/// scene of one's own with `TaskSpec::episode_in`), resized for `max_pixels`, with one REG
/// question per object of its scene that is in view: many questions about one frame, where
/// `train data` asks about the task's object. Objects with too few visible pixels are left out.
pub fn object_questions(
    episode: Episode,
    max_pixels: u64,
) -> Result<(image::RgbImage, Vec<ObjectQuestion>), DataError> {
    let task = format!("{} (seed {})", episode.scene.name, episode.seed);
    let shot = Shot::of_episode(episode, max_pixels).map_err(|reason| DataError::Frame {
        task: task.clone(),
        reason,
    })?;
    let mut out = Vec::new();
    for obj in &shot.episode.scene.objects {
        let Ok(poly) = shot.polygon_of(&obj.name, None) else {
            continue;
        };
        let phrase = obj
            .aliases
            .first()
            .cloned()
            .unwrap_or_else(|| obj.name.replace('_', " "));
        out.push(ObjectQuestion {
            object: obj.name.clone(),
            question: Ability::Reg.prompt(&format!("the {phrase}")),
            ground_truth: format!(
                "<type>{}</type>{}",
                TaskType::PointRec.name(),
                json!({ "segmentation": poly })
            ),
        });
    }
    Ok((shot.image, out))
}

/// One question made from a shot.
struct Question {
    query: String,
    ground_truth: String,
    reference: Option<Vec<[f64; 2]>>,
}

/// One episode's first frame with what the simulator knows about it.
struct Shot {
    episode: Episode,
    world: SharedWorld,
    truth: OracleTruth,
    intent: Intent,
    frame: Frame,
    labels: Arc<Segmentation>,
    /// Frame pixels → saved-image pixels.
    map: ModelImageMap,
    /// The frame resized to `map.model()`.
    image: image::RgbImage,
}

impl Shot {
    /// Builds and settles the episode's world as the runner does, puts the arm at home and
    /// renders the camera's frame.
    fn take(spec: &TaskSpec, seed: u64, max_pixels: u64) -> Result<Shot, String> {
        let episode = spec.instantiate(seed).map_err(|e| e.to_string())?;
        Self::of_episode(episode, max_pixels)
    }

    /// [`Self::take`] for an episode laid out by the caller.
    fn of_episode(episode: Episode, max_pixels: u64) -> Result<Shot, String> {
        let intent = parse_instruction(&episode.instruction).map_err(|e| e.to_string())?;
        let prepared = prepare_episode(&episode).map_err(|e| e.to_string())?;
        let home = prepared.model.home().to_vec();
        SimRobot::new(prepared.world.clone(), prepared.model.clone(), home)
            .map_err(|e| format!("placing the arm at home: {e}"))?;
        let mut camera = sim_camera(&prepared.world, &EpisodeOptions::default());
        let frame = camera.capture().map_err(|e| e.to_string())?;
        let labels = match &prepared.truth.labels {
            LabelSource::World(w) => w.labels_of(&frame),
            LabelSource::Given(seg) => Some(seg.clone()),
        }
        .ok_or("the rendered frame has no labels")?;
        let size = ImageSize::new(frame.rgb.width(), frame.rgb.height());
        let map =
            ModelImageMap::for_qwen25vl(size, MIN_PIXELS, max_pixels).map_err(|e| e.to_string())?;
        let image = resize_bicubic_pil(&frame.rgb, map.model().width, map.model().height);
        Ok(Shot {
            episode,
            world: prepared.world,
            truth: prepared.truth,
            intent,
            frame,
            labels,
            map,
            image,
        })
    }

    fn question(&self, ability: Ability) -> Result<Question, String> {
        let mut reference = None;
        let (query, ty, payload) = match ability {
            Ability::Reg => {
                let query = self.intent.object_query();
                let poly = self.polygon(None)?;
                (query, TaskType::PointRec, json!({ "segmentation": poly }))
            }
            Ability::Ofg => {
                let (part, query) = self
                    .functional_part()
                    .ok_or("the object has no functional part (no grasp part, no handle)")?;
                let poly = self.polygon(Some(&part))?;
                (
                    query,
                    TaskType::GroundingRec,
                    json!({ "segmentation": poly }),
                )
            }
            Ability::Rrg => {
                let (bbox, free) = self.free_space()?;
                let payload = json!({ "bbox": bbox, "free_points": free });
                (
                    self.episode.instruction.clone(),
                    TaskType::FsdFreePoint,
                    payload,
                )
            }
            Ability::Vtg => {
                let query = self.episode.instruction.clone();
                let trace = self.oracle(ability, &query)?;
                if trace.len() != VTG_POINT_COUNT {
                    return Err(format!("the oracle's trace has {} points", trace.len()));
                }
                let payload = json!({ "trajectory": trace });
                reference = Some(trace);
                (query, TaskType::FsdVisualTrace, payload)
            }
        };
        // The oracle's answer is only a reference: a question it cannot answer is still asked.
        let reference = reference.or_else(|| self.oracle(ability, &query).ok());
        Ok(Question {
            ground_truth: format!("<type>{}</type>{payload}", ty.name()),
            query,
            reference,
        })
    }

    /// The oracle pointer's answer, in the saved image's pixels (0.1 px).
    fn oracle(&self, ability: Ability, query: &str) -> Result<Vec<[f64; 2]>, String> {
        let mut oracle = OraclePointer::new(self.truth.clone(), OracleOptions::default());
        let pointing = oracle
            .point(&self.frame, ability, query)
            .map_err(|e| format!("oracle: {e}"))?;
        Ok(pointing
            .points_px()
            .into_iter()
            .map(|p| round_point(self.map.to_model(p)))
            .collect())
    }

    /// The part OFG asks about and the query: the task's grasp part with its instruction (as the
    /// runner asks), else the object's handle.
    fn functional_part(&self) -> Option<(String, String)> {
        if let Some(part) = &self.episode.grasp_part {
            return Some((part.clone(), self.episode.instruction.clone()));
        }
        let object = self.episode.scene.object(&self.episode.object)?;
        object
            .parts
            .iter()
            .find(|p| *p == "handle")
            .map(|p| (p.clone(), format!("the {p} of the {}", self.intent.object)))
    }

    /// The convex hull of the manipulated object's (or its part's) visible pixels, saved-image
    /// pixels.
    fn polygon(&self, part: Option<&str>) -> Result<Vec<[f64; 2]>, String> {
        self.polygon_of(&self.episode.object, part)
    }

    /// [`Self::polygon`] of any object of the scene.
    fn polygon_of(&self, name: &str, part: Option<&str>) -> Result<Vec<[f64; 2]>, String> {
        let instance = self
            .world
            .lock()
            .instance_of(name)
            .ok_or_else(|| format!("no instance for `{name}`"))?;
        let part_id = match part {
            Some(p) => Some(
                self.episode
                    .scene
                    .object(name)
                    .and_then(|o| o.part_id(p))
                    .ok_or_else(|| format!("`{name}` has no part `{p}`"))?,
            ),
            None => None,
        };
        let seg = self.labels.as_ref();
        let keep =
            |i: usize| seg.instance[i] == instance && part_id.is_none_or(|id| seg.part[i] == id);
        let (hull, pixels) = mask_hull(seg.width, seg.height, keep);
        if pixels < MIN_MASK_PIXELS {
            let what = part.map_or(name.to_string(), |p| format!("{name}'s {p}"));
            return Err(format!(
                "only {pixels} pixels of the {what} in view (< {MIN_MASK_PIXELS})"
            ));
        }
        Ok(hull
            .into_iter()
            .map(|p| round_point(self.map.to_model(p)))
            .collect())
    }

    /// The RRG ground truth: the bbox of the target region's bottom face and 8 free points on
    /// it, saved-image pixels.
    fn free_space(&self) -> Result<([i64; 4], Vec<[i64; 2]>), String> {
        let region = self
            .episode
            .target_region_world(&self.world.lock())
            .ok_or("the task has no place to put the object (pick up)")?;
        let (outline, free) = face_points(&region);
        let camera = &self.episode.scene.camera;
        let to_image = |pts: Vec<Point3<f64>>| -> Result<Vec<[f64; 2]>, String> {
            pts.iter()
                .map(|p| camera.project(p).map(|px| self.map.to_model(px)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| "the place region is behind the camera".to_string())
        };
        let (outline, free) = (to_image(outline)?, to_image(free)?);
        let (lo, hi) = outline.iter().fold(
            ([f64::INFINITY; 2], [f64::NEG_INFINITY; 2]),
            |(lo, hi), p| {
                (
                    [lo[0].min(p[0]), lo[1].min(p[1])],
                    [hi[0].max(p[0]), hi[1].max(p[1])],
                )
            },
        );
        let size = self.map.model();
        let (w, h) = (f64::from(size.width), f64::from(size.height));
        let bbox = [
            lo[0].floor().max(0.0),
            lo[1].floor().max(0.0),
            hi[0].ceil().min(w - 1.0),
            hi[1].ceil().min(h - 1.0),
        ];
        let free: Vec<[i64; 2]> = free
            .iter()
            .map(|p| [p[0].round() as i64, p[1].round() as i64])
            .collect();
        let inside = |p: &[i64; 2]| {
            let (x, y) = (p[0] as f64, p[1] as f64);
            (bbox[0]..=bbox[2]).contains(&x) && (bbox[1]..=bbox[3]).contains(&y)
        };
        if !free.iter().all(inside) {
            return Err("the place region is out of view".into());
        }
        Ok((bbox.map(|v| v as i64), free))
    }
}

/// Rounds to 0.1 px (the written precision).
fn round_point(p: [f64; 2]) -> [f64; 2] {
    p.map(|v| (v * 10.0).round() / 10.0)
}

/// The bottom face of a region (where a placed object's base rests), in the world: its outline
/// (a cuboid's 4 corners, else 32 points of its ellipse) and 8 free points (the centre, and 7 at
/// half its extent, evenly around).
fn face_points(region: &Region) -> (Vec<Point3<f64>>, Vec<Point3<f64>>) {
    let half = region.shape.local_half_extents();
    let at = |x: f64, y: f64| region.frame_from_region * Point3::from(Vector3::new(x, y, -half.z));
    let ellipse = |n: usize, scale: f64| {
        (0..n).map(move |i| {
            let a = std::f64::consts::TAU * i as f64 / n as f64;
            (scale * half.x * a.cos(), scale * half.y * a.sin())
        })
    };
    let outline: Vec<Point3<f64>> = match region.shape {
        Shape::Cuboid { .. } => [(-1.0, -1.0), (1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)]
            .iter()
            .map(|(sx, sy)| at(sx * half.x, sy * half.y))
            .collect(),
        _ => ellipse(32, 1.0).map(|(x, y)| at(x, y)).collect(),
    };
    let free = std::iter::once((0.0, 0.0))
        .chain(ellipse(7, 0.5))
        .map(|(x, y)| at(x, y))
        .collect();
    (outline, free)
}

/// The convex hull of the pixels where `keep` holds (each pixel its whole square, centres at
/// integer coordinates), and how many pixels that is. Only the leftmost and rightmost pixel of
/// each row can be hull vertices, so only their corners are hulled.
pub(crate) fn mask_hull(
    width: usize,
    height: usize,
    keep: impl Fn(usize) -> bool,
) -> (Vec<[f64; 2]>, usize) {
    let mut corners = Vec::new();
    let mut count = 0;
    for v in 0..height {
        let mut ends: Option<(usize, usize)> = None;
        for u in 0..width {
            if keep(v * width + u) {
                count += 1;
                ends = Some(ends.map_or((u, u), |(lo, _)| (lo, u)));
            }
        }
        if let Some((lo, hi)) = ends {
            let (y0, y1) = (v as f64 - 0.5, v as f64 + 0.5);
            let (x0, x1) = (lo as f64 - 0.5, hi as f64 + 0.5);
            corners.extend([[x0, y0], [x0, y1], [x1, y0], [x1, y1]]);
        }
    }
    (convex_hull(corners), count)
}

/// Andrew's monotone chain: the hull's vertices counter-clockwise (in y-up terms), collinear
/// points dropped.
pub(crate) fn convex_hull(mut pts: Vec<[f64; 2]>) -> Vec<[f64; 2]> {
    pts.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
    pts.dedup();
    if pts.len() < 3 {
        return pts;
    }
    let cross = |o: [f64; 2], a: [f64; 2], b: [f64; 2]| {
        (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
    };
    let mut hull: Vec<[f64; 2]> = Vec::with_capacity(pts.len() * 2);
    for pass in 0..2 {
        let start = hull.len();
        let iter: Box<dyn Iterator<Item = &[f64; 2]>> = if pass == 0 {
            Box::new(pts.iter())
        } else {
            Box::new(pts.iter().rev())
        };
        for &p in iter {
            while hull.len() >= start + 2
                && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) <= 0.0
            {
                hull.pop();
            }
            hull.push(p);
        }
        // The last point of each chain is the first of the other.
        hull.pop();
    }
    hull
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_order_mark_does_not_cost_the_first_record() {
        let dir = std::env::temp_dir().join(format!("pointact-bom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.jsonl");
        let line = |id: &str| {
            let truth = r#"<type>spatial</type>{\"kind\":\"choice\",\"answer\":\"A\"}"#;
            format!(r#"{{"id": "{id}", "problem": "Which? A. cup B. box", "solution": "{truth}"}}"#)
        };
        let text = format!("\u{feff}{}\n{}\n", line("first"), line("second"));
        std::fs::write(&path, text).unwrap();
        let (records, skipped) = load_records(&path).unwrap();
        let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["first", "second"], "skipped: {skipped}");
        // Only at the very start: a mark on a later line is not a record.
        std::fs::write(&path, format!("{}\n\u{feff}{}\n", line("a"), line("b"))).unwrap();
        assert_eq!(load_records(&path).unwrap().0.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hull_of_a_rectangle_mask_is_its_pixel_outline() {
        let (w, h) = (10, 8);
        let (hull, n) = mask_hull(w, h, |i| {
            (2..=5).contains(&(i % w)) && (3..=4).contains(&(i / w))
        });
        assert_eq!(n, 8);
        let mut sorted = hull.clone();
        sorted.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
        assert_eq!(sorted, vec![[1.5, 2.5], [1.5, 4.5], [5.5, 2.5], [5.5, 4.5]]);
        assert!(mask_hull(w, h, |_| false).0.is_empty());
        // One pixel: its square.
        assert_eq!(mask_hull(w, h, |i| i == 0).0.len(), 4);
    }

    #[test]
    fn classify_reads_envelopes_and_payloads() {
        let seg = r#"{"segmentation": [[0, 0], [10, 0], [0, 10]]}"#;
        assert_eq!(
            classify(&format!("<type>point_rec</type>{seg}")),
            Ok(RecordKind::Released(TaskType::PointRec))
        );
        assert_eq!(
            classify(r#"<type>point_rec</type>{"segmentation": [[0, 0], [1, 1]]}"#),
            Err(SkipReason::UnparsableGroundTruth)
        );
        assert_eq!(classify("B"), Err(SkipReason::MissingType));
        assert_eq!(classify("<type>nope</type>B"), Err(SkipReason::UnknownType));
        assert_eq!(
            classify("<type>point_ref</type>[[1, 2]"),
            Err(SkipReason::UnparsableGroundTruth)
        );
        assert_eq!(classify("<type>robot_r1</type>C"), Ok(RecordKind::RobotR1));
        assert_eq!(
            classify("<type>robot_r1</type>maybe"),
            Err(SkipReason::UnparsableGroundTruth)
        );
        assert_eq!(
            classify("<type>env</type>{}"),
            Err(SkipReason::UnparsableGroundTruth)
        );
        let free = r#"{"bbox": [0, 0, 9, 9], "free_points": [[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1],[1,1]]}"#;
        assert!(classify(&format!("<type>fsd_free_point</type>{free}")).is_ok());
        assert_eq!(question_of("<image> Where? "), "Where?");
        assert_eq!(
            classify(r#"<type>spatial</type>{"kind": "choice", "answer": "B"}"#),
            Ok(RecordKind::Spatial)
        );
        assert_eq!(
            classify(r#"<type>spatial</type>{"kind": "number", "answer": "2.5"}"#),
            Ok(RecordKind::Spatial)
        );
        for bad in [
            r#"{"kind": "choice", "answer": "Z"}"#,
            r#"{"kind": "number", "answer": "-1"}"#,
            r#"{"kind": "number", "answer": "far"}"#,
            "B",
        ] {
            assert_eq!(
                classify(&format!("<type>spatial</type>{bad}")),
                Err(SkipReason::UnparsableGroundTruth),
                "{bad}"
            );
        }
    }

    #[test]
    fn spatial_records_need_no_image_and_others_still_do() {
        let base = Path::new("/nonexistent");
        let line = r#"{"problem": "Question: which?", "answer": "<type>spatial</type>{\"kind\": \"choice\", \"answer\": \"A\"}"}"#;
        let r = parse_line(line, base, "f:1").unwrap();
        assert_eq!((r.kind, r.images.len()), (RecordKind::Spatial, 0));
        let named = r#"{"problem": "q", "answer": "<type>spatial</type>{\"kind\": \"choice\", \"answer\": \"A\"}", "images": ["gone.png"]}"#;
        assert!(parse_line(named, base, "f:2").unwrap().images.is_empty());
        let general = r#"{"problem": "q", "answer": "<type>general_qa</type>A"}"#;
        assert_eq!(
            parse_line(general, base, "f:3"),
            Err(SkipReason::MissingImage)
        );
    }

    #[test]
    fn alias_keys_are_read() {
        // Any existing file serves as the image; an absolute path is taken as it is.
        let image = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let image = serde_json::to_string(&image).unwrap_or_default();
        let base = Path::new("/nonexistent");
        let line = format!(
            r#"{{"prompt": "<image>Where is it?", "ground_truth": "<type>general_qa</type>A", "image": {image}}}"#
        );
        let r = parse_line(&line, base, "f:1").unwrap();
        assert_eq!(
            (r.id.as_str(), r.question.as_str()),
            ("f:1", "Where is it?")
        );
        assert_eq!(r.kind, RecordKind::Released(TaskType::GeneralQa));
        let line = format!(
            r#"{{"id": 7, "question": "Which?", "answer": "B", "solution": "<type>robot_r1</type>B", "images": [{image}]}}"#
        );
        let r = parse_line(&line, base, "f:2").unwrap();
        assert_eq!((r.id.as_str(), r.kind), ("7", RecordKind::RobotR1));
        assert_eq!(r.ground_truth, "<type>robot_r1</type>B");
        let relative =
            r#"{"problem": "x", "answer": "<type>general_qa</type>A", "image": "Cargo.toml"}"#;
        assert_eq!(
            parse_line(relative, base, "f:3"),
            Err(SkipReason::MissingImage),
            "relative to the JSONL's folder"
        );
    }

    #[test]
    fn tally_prints_one_line_per_reason() {
        let mut t = SkipTally::default();
        t.add(SkipReason::MissingImage, 7);
        t.add(SkipReason::MissingImage, 9);
        t.add(SkipReason::InvalidJson, 3);
        assert_eq!(t.total(), 3);
        assert_eq!(
            t.to_string(),
            "skipped 1 record with invalid JSON (or not an object) (first: line 3)\nskipped 2 records with a missing image (first: line 7)"
        );
    }
}
