//! Parsing the model's `<think>…</think><answer><point>[[x, y], …]</point></answer>` reply.
//!
//! The text comes from a sampled language model, so anything can arrive: truncation at the token
//! limit, stray whitespace, floats where integers were trained, a forgotten wrapper tag, or
//! garbage. The parser is a hand-written byte scanner (no regex, no recursion, one pass per tag) that
//! accepts every reading whose meaning is unambiguous and returns a typed error, carrying the raw
//! text, for everything else. It never panics, whatever the input (a property test in
//! `crates/pointing/src/tests/pointing_fuzz.rs` drives it with well over 100 000 arbitrary and near-valid inputs).
//!
//! # What is accepted
//! * Whitespace (including newlines) between any two tokens, and inside tags (`< point >`,
//!   `</ answer>`); tag names in any letter case.
//! * A missing `<think>` block; a `</think>` without its opening tag (chat templates that pre-fill
//!   `<think>` produce this), whose reasoning is then everything before it; an unterminated
//!   `<think>`, whose reasoning runs up to the answer.
//! * A missing `<answer>` wrapper when a `<point>` block is present: the point block is
//!   self-delimiting, and Embodied-R1's no-thinking variant asks for a bare `<point>` block.
//! * A missing `</answer>` or `</point>` (generation stopped after the list closed): the list's own
//!   brackets say it is complete.
//! * Inside `<answer>` without `<point>` tags, a bare list `[[x, y], …]`.
//! * A single bare point `[x, y]` instead of a list of one.
//! * Coordinates as integers or floats, with sign, fraction, exponent (`+1.5e2`, `.5`, `3.`), and a
//!   trailing comma inside a point or list (Python's `literal_eval`, which the Embodied-R1 evaluation
//!   uses, accepts it).
//! * Any text after `</answer>` (or after `</point>` when there is no answer wrapper).
//!
//! # What is not
//! * If a `<think>` block is closed, the answer is only looked for after it: reasoning that quotes
//!   the format (`… I will answer <point>[[x1, y1]]</point> …`) must not become the answer. Think
//!   tags that come only after the first `<answer>`/`<point>` tag are ignored (they are not the
//!   reasoning, and a stray `</think>` must not hide the answer before it).
//! * If there is an `<answer>` block, the points must be inside it.
//! * Only the first point block counts; later ones are ignored.
//! * Text between the list and `</point>` is an error: it means the list was not what the model
//!   meant to finish.
//! * Values ≤ 1 are *not* taken as normalized coordinates (Embodied-R1's evaluation has such a
//!   fallback): the model emits absolute pixels, and (1, 1) is a legitimate pixel.
//! * `NaN`, `inf` and literals that overflow `f64` (`1e999`) are [`PointingError::NonFinite`].
//!
//! # Bounds
//! Points are continuous pixel coordinates of the image the model saw, so the valid range is
//! inclusive of both edges: `x ∈ [0, width]`, `y ∈ [0, height]`. A point on the far edge (`x = width`)
//! is where the model points at the image border; a consumer that samples a pixel there must clamp
//! to `width - 1` itself.

use std::fmt;

use super::ability::Ability;
use pointact_vlm::{ImageSize, ModelImageMap};

/// A parsed and validated answer.
///
/// `points` are in **model pixels** (the image after `smart_resize`), as the model emitted them; call
/// [`PointAnswer::to_original`] before using them on the camera image. [`parse_answer`] guarantees:
/// at least one point, every coordinate finite and inside the bounds it was given, and exactly
/// [`super::VTG_POINT_COUNT`] points for VTG.
#[derive(Debug, Clone, PartialEq)]
pub struct PointAnswer {
    /// The ability the answer was parsed for.
    pub ability: Ability,
    /// The text of the think block, trimmed; `None` when there is none or it is blank.
    pub reasoning: Option<String>,
    /// `[x, y]` in model pixels, in the order the model gave them (for VTG: the trajectory order).
    pub points: Vec<[f64; 2]>,
    /// The full model output, for logs and error reports.
    pub raw: String,
}

impl PointAnswer {
    /// The points mapped to original-image pixels.
    pub fn to_original(&self, map: &ModelImageMap) -> Vec<[f64; 2]> {
        self.points.iter().map(|&p| map.to_original(p)).collect()
    }
}

/// What exactly was wrong inside a point list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListProblem {
    /// Expected `[` (start of the list or of a point); `found` is `None` at end of input.
    ExpectedOpenBracket {
        /// The character found instead.
        found: Option<char>,
    },
    /// Expected a number.
    ExpectedNumber {
        /// The character found instead.
        found: Option<char>,
    },
    /// A run of number-like characters that is not a number (`12px`, `1.2.3`, `-`).
    InvalidNumber {
        /// The offending text.
        text: String,
    },
    /// Expected `,` or `]` after an element.
    ExpectedCommaOrClose {
        /// The character found instead.
        found: Option<char>,
    },
    /// A point with other than 2 coordinates.
    WrongArity {
        /// How many coordinates it had.
        coordinates: usize,
    },
    /// Text after the list where `</point>`, `</answer>` or the end belongs.
    TrailingText {
        /// The character found.
        found: Option<char>,
    },
}

/// Shows `None` as "end of input" so messages read naturally.
struct Found(Option<char>);

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(c) => write!(f, "{c:?}"),
            None => f.write_str("end of input"),
        }
    }
}

impl fmt::Display for ListProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListProblem::ExpectedOpenBracket { found } => {
                write!(f, "expected '[', found {}", Found(*found))
            }
            ListProblem::ExpectedNumber { found } => {
                write!(f, "expected a number, found {}", Found(*found))
            }
            ListProblem::InvalidNumber { text } => write!(f, "{text:?} is not a number"),
            ListProblem::ExpectedCommaOrClose { found } => {
                write!(f, "expected ',' or ']', found {}", Found(*found))
            }
            ListProblem::WrongArity { coordinates } => {
                write!(f, "a point has {coordinates} coordinates, expected 2")
            }
            ListProblem::TrailingText { found } => {
                write!(
                    f,
                    "expected the closing tag after the list, found {}",
                    Found(*found)
                )
            }
        }
    }
}

/// Why a model reply could not be turned into a [`PointAnswer`]. Every variant carries the raw reply
/// (`raw`), so a caller can log or retry with full context; `Display` stays short.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PointingError {
    /// Neither a `<point>` block nor an `<answer>` block holding a list.
    #[error("the model reply has no <point> block (nor a point list inside <answer>)")]
    MissingPointBlock {
        /// The model reply.
        raw: String,
    },
    /// The point list does not parse.
    #[error("malformed point list at byte {offset}{}: {problem} (near {near:?})", point_suffix(*point))]
    MalformedList {
        /// What was wrong.
        problem: ListProblem,
        /// Index (0-based) of the point being read, if inside one.
        point: Option<usize>,
        /// Byte offset into `raw` where it went wrong.
        offset: usize,
        /// A few characters of `raw` around `offset`.
        near: String,
        /// The model reply.
        raw: String,
    },
    /// A coordinate is NaN or infinite, or a literal too large for `f64`.
    #[error("point {point} has a non-finite coordinate {text:?} at byte {offset}")]
    NonFinite {
        /// Index (0-based) of the point.
        point: usize,
        /// The literal as written.
        text: String,
        /// Byte offset of the literal in `raw`.
        offset: usize,
        /// The model reply.
        raw: String,
    },
    /// The list is `[]`.
    #[error("the model returned an empty point list")]
    EmptyList {
        /// The model reply.
        raw: String,
    },
    /// A point lies outside the model image (`x ∈ [0, width]`, `y ∈ [0, height]`).
    #[error("point {index} ({}, {}) is outside the model image [0, {}] x [0, {}]", point[0], point[1], bounds.width, bounds.height)]
    OutOfBounds {
        /// Index (0-based) of the first such point.
        index: usize,
        /// The point, in model pixels.
        point: [f64; 2],
        /// The bounds it was checked against (model pixels).
        bounds: ImageSize,
        /// The model reply.
        raw: String,
    },
    /// The ability fixes the number of points (VTG: 8) and the answer has another.
    #[error("{ability} needs exactly {expected} points, got {got}")]
    WrongPointCount {
        /// The ability whose rule was broken.
        ability: Ability,
        /// How many it needs.
        expected: usize,
        /// How many there were.
        got: usize,
        /// The model reply.
        raw: String,
    },
}

fn point_suffix(point: Option<usize>) -> String {
    point.map(|i| format!(" (point {i})")).unwrap_or_default()
}

impl PointingError {
    /// The model reply that failed to parse.
    pub fn raw(&self) -> &str {
        match self {
            PointingError::MissingPointBlock { raw }
            | PointingError::MalformedList { raw, .. }
            | PointingError::NonFinite { raw, .. }
            | PointingError::EmptyList { raw }
            | PointingError::OutOfBounds { raw, .. }
            | PointingError::WrongPointCount { raw, .. } => raw,
        }
    }
}

/// Parses a model reply for `ability`, checking points against `bounds`, the size of the image the
/// model saw (model pixels, i.e. after `smart_resize`).
///
/// See the module documentation for what is tolerated. Errors are checked in this order: no block,
/// malformed list / non-finite number (whichever comes first in the text), empty list, point out of
/// bounds (the first one), wrong point count.
pub fn parse_answer(
    raw: &str,
    ability: Ability,
    bounds: ImageSize,
) -> Result<PointAnswer, PointingError> {
    let s = raw.as_bytes();

    // 1. The think block, and where the answer may start. Think tags count only if they come before
    //    the first <answer>/<point> tag, so a stray `</think>` after the answer cannot hide it.
    let first_block = [
        find_tag(s, 0, "answer", false),
        find_tag(s, 0, "point", false),
    ]
    .into_iter()
    .flatten()
    .map(|(start, _)| start)
    .min();
    let before_block = |pos: usize| first_block.is_none_or(|block| pos < block);
    let (reasoning_span, search_from, think_open_end) = match find_tag(s, 0, "think", false) {
        Some((open_start, open_end)) if before_block(open_start) => {
            match find_tag(s, open_end, "think", true) {
                Some((close_start, close_end)) => (Some((open_end, close_start)), close_end, None),
                // Unterminated: the reasoning runs up to wherever the answer turns out to start.
                None => (None, open_end, Some(open_end)),
            }
        }
        _ => match find_tag(s, 0, "think", true) {
            Some((close_start, close_end)) if before_block(close_start) => {
                (Some((0, close_start)), close_end, None)
            }
            _ => (None, 0, None),
        },
    };

    // 2. The answer region: inside <answer>…</answer> if there is one, else the rest of the text.
    let answer = find_tag(s, search_from, "answer", false);
    let (region_start, region_end) = match answer {
        Some((_, open_end)) => (
            open_end,
            find_tag(s, open_end, "answer", true).map_or(s.len(), |(close_start, _)| close_start),
        ),
        None => (search_from, s.len()),
    };

    // 3. The list: in a <point> block, or bare inside <answer>.
    let point_open = find_tag(
        s.get(..region_end).unwrap_or(s),
        region_start,
        "point",
        false,
    );
    let list_start = match (point_open, answer) {
        (Some((_, open_end)), _) => open_end,
        (None, Some(_)) if s.get(skip_ws(s, region_start)) == Some(&b'[') => region_start,
        _ => {
            return Err(PointingError::MissingPointBlock {
                raw: raw.to_owned(),
            })
        }
    };
    // An unterminated think block ends where the answer (or the bare point block) begins.
    let reasoning_span = reasoning_span.or(think_open_end.and_then(|open_end| {
        let answer_start = answer.or(point_open).map(|(start, _)| start)?;
        Some((open_end, answer_start))
    }));

    let mut scanner = Scanner {
        raw,
        s,
        pos: list_start,
    };
    let points = scanner.point_list()?;
    if point_open.is_some() {
        scanner.point_close()?;
    } else {
        scanner.answer_close(region_end)?;
    }

    // 4. Validation.
    if points.is_empty() {
        return Err(PointingError::EmptyList {
            raw: raw.to_owned(),
        });
    }
    if let Some((index, &point)) = points
        .iter()
        .enumerate()
        .find(|(_, p)| !bounds.contains(**p))
    {
        return Err(PointingError::OutOfBounds {
            index,
            point,
            bounds,
            raw: raw.to_owned(),
        });
    }
    if let Some(expected) = ability.required_points() {
        if points.len() != expected {
            return Err(PointingError::WrongPointCount {
                ability,
                expected,
                got: points.len(),
                raw: raw.to_owned(),
            });
        }
    }

    let reasoning = reasoning_span
        .and_then(|(a, b)| raw.get(a..b))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    Ok(PointAnswer {
        ability,
        reasoning,
        points,
        raw: raw.to_owned(),
    })
}

/// ASCII whitespace plus vertical tab (which `u8::is_ascii_whitespace` leaves out).
fn is_ws(b: u8) -> bool {
    b.is_ascii_whitespace() || b == 0x0b
}

fn skip_ws(s: &[u8], mut pos: usize) -> usize {
    while pos < s.len() && is_ws(s[pos]) {
        pos += 1;
    }
    pos
}

/// If a tag `<name>` (or `</name>` when `closing`) starts at `pos`, its end (one past `>`).
/// Whitespace is allowed after `<`, around `/` and before `>`; the name matches in any letter case.
fn tag_at(s: &[u8], pos: usize, name: &str, closing: bool) -> Option<usize> {
    if s.get(pos) != Some(&b'<') {
        return None;
    }
    let mut p = skip_ws(s, pos + 1);
    if closing {
        if s.get(p) != Some(&b'/') {
            return None;
        }
        p = skip_ws(s, p + 1);
    }
    let end = p.checked_add(name.len())?;
    if !s.get(p..end)?.eq_ignore_ascii_case(name.as_bytes()) {
        return None;
    }
    p = skip_ws(s, end);
    (s.get(p) == Some(&b'>')).then_some(p + 1)
}

/// The first tag `<name>` / `</name>` at or after `from`: `(start, end)` byte offsets. Both are char
/// boundaries, since `<` and `>` are ASCII and never occur inside a multi-byte UTF-8 sequence.
fn find_tag(s: &[u8], from: usize, name: &str, closing: bool) -> Option<(usize, usize)> {
    let mut pos = from;
    while pos < s.len() {
        let rel = s[pos..].iter().position(|&b| b == b'<')?;
        let start = pos + rel;
        if let Some(end) = tag_at(s, start, name, closing) {
            return Some((start, end));
        }
        pos = start + 1;
    }
    None
}

/// Cursor over the point list. It only ever steps over ASCII bytes, so `pos` is always a char
/// boundary of `raw`.
struct Scanner<'a> {
    raw: &'a str,
    s: &'a [u8],
    pos: usize,
}

impl Scanner<'_> {
    fn ws(&mut self) {
        self.pos = skip_ws(self.s, self.pos);
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn found(&self) -> Option<char> {
        self.raw.get(self.pos..).and_then(|t| t.chars().next())
    }

    fn error(&self, problem: ListProblem, point: Option<usize>, offset: usize) -> PointingError {
        PointingError::MalformedList {
            problem,
            point,
            offset,
            near: near(self.raw, offset),
            raw: self.raw.to_owned(),
        }
    }

    /// `[[x, y], …]` (or a single bare `[x, y]`), trailing commas allowed.
    fn point_list(&mut self) -> Result<Vec<[f64; 2]>, PointingError> {
        self.ws();
        if self.peek() != Some(b'[') {
            return Err(self.error(
                ListProblem::ExpectedOpenBracket {
                    found: self.found(),
                },
                None,
                self.pos,
            ));
        }
        let list_open = self.pos;
        self.pos += 1;
        self.ws();
        match self.peek() {
            Some(b']') => {
                self.pos += 1;
                return Ok(Vec::new());
            }
            Some(b'[') => {}
            // A single bare point: re-read it from its bracket as a point.
            _ => {
                self.pos = list_open;
                return Ok(vec![self.point(0)?]);
            }
        }
        let mut points = Vec::new();
        loop {
            self.ws();
            match self.peek() {
                // Only reachable after a trailing comma: `[[1, 2],]`.
                Some(b']') => {
                    self.pos += 1;
                    return Ok(points);
                }
                Some(b'[') => {}
                _ => {
                    return Err(self.error(
                        ListProblem::ExpectedOpenBracket {
                            found: self.found(),
                        },
                        Some(points.len()),
                        self.pos,
                    ))
                }
            }
            let p = self.point(points.len())?;
            points.push(p);
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(points);
                }
                _ => {
                    return Err(self.error(
                        ListProblem::ExpectedCommaOrClose {
                            found: self.found(),
                        },
                        None,
                        self.pos,
                    ))
                }
            }
        }
    }

    /// One point `[x, y]` starting at the `[` under the cursor (the caller has checked it).
    fn point(&mut self, index: usize) -> Result<[f64; 2], PointingError> {
        let open = self.pos;
        self.pos += 1;
        let mut coords = [0.0; 2];
        let mut count = 0usize;
        loop {
            self.ws();
            // `[]`, or the close after a trailing comma `[1, 2,]`.
            if self.peek() == Some(b']') {
                self.pos += 1;
                break;
            }
            let value = self.number(index)?;
            if count < 2 {
                coords[count] = value;
            }
            count += 1;
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    break;
                }
                _ => {
                    return Err(self.error(
                        ListProblem::ExpectedCommaOrClose {
                            found: self.found(),
                        },
                        Some(index),
                        self.pos,
                    ))
                }
            }
        }
        if count != 2 {
            return Err(self.error(
                ListProblem::WrongArity { coordinates: count },
                Some(index),
                open,
            ));
        }
        Ok(coords)
    }

    /// A number literal: the longest run of `[0-9A-Za-z+-.]`, parsed as `f64`. Taking letters into
    /// the run makes `12px` one bad token instead of a number followed by junk, and lets `NaN`/`inf`
    /// be recognised (and rejected) by name.
    fn number(&mut self, index: usize) -> Result<f64, PointingError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        {
            self.pos += 1;
        }
        let text = self.raw.get(start..self.pos).unwrap_or_default();
        if text.is_empty() {
            return Err(self.error(
                ListProblem::ExpectedNumber {
                    found: self.found(),
                },
                Some(index),
                start,
            ));
        }
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            Ok(_) => Err(PointingError::NonFinite {
                point: index,
                text: text.to_owned(),
                offset: start,
                raw: self.raw.to_owned(),
            }),
            Err(_) => Err(self.error(
                ListProblem::InvalidNumber {
                    text: text.to_owned(),
                },
                Some(index),
                start,
            )),
        }
    }

    /// After the list of a `<point>` block: `</point>`, or (tolerated) `</answer>` or the end.
    fn point_close(&mut self) -> Result<(), PointingError> {
        self.ws();
        if self.pos >= self.s.len()
            || tag_at(self.s, self.pos, "point", true).is_some()
            || tag_at(self.s, self.pos, "answer", true).is_some()
        {
            return Ok(());
        }
        Err(self.error(
            ListProblem::TrailingText {
                found: self.found(),
            },
            None,
            self.pos,
        ))
    }

    /// After a bare list inside `<answer>`: only whitespace up to `</answer>` (or the end).
    fn answer_close(&mut self, region_end: usize) -> Result<(), PointingError> {
        self.ws();
        if self.pos >= region_end {
            return Ok(());
        }
        Err(self.error(
            ListProblem::TrailingText {
                found: self.found(),
            },
            None,
            self.pos,
        ))
    }
}

/// Up to ~24 bytes of `raw` either side of `offset`, widened to char boundaries.
fn near(raw: &str, offset: usize) -> String {
    let a = raw.floor_char_boundary(offset.saturating_sub(24));
    let b = raw.ceil_char_boundary(offset.saturating_add(24));
    raw.get(a..b).unwrap_or_default().to_owned()
}
