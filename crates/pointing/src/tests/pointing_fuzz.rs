//! `parse_answer` never panics and every `Ok` it returns is valid, over well over 100 000 inputs.
//!
//! Three properties, each driven by its own `TestRunner` so the number of cases actually run can be
//! counted and asserted (a panic inside `parse_answer` is caught by the runner and fails the test):
//!
//! | test | inputs | cases |
//! | --- | --- | --- |
//! | `arbitrary_strings` | any Unicode string, lossy-decoded random bytes, strings over a tag/bracket/digit-heavy alphabet | [`ARBITRARY_CASES`] |
//! | `near_valid_replies` | well-formed replies with random tag drops/typos, whitespace, number forms (NaN, inf, `1e999`, 400-digit literals, signs, exponents), arity, then truncated / spliced / cut | [`NEAR_VALID_CASES`] |
//! | `valid_replies_round_trip` | replies with in-bounds points in many spellings: must parse to exactly those points | [`VALID_CASES`] |
//!
//! All four abilities and a spread of bounds (including 0×0 and `u32::MAX`) are drawn in every test.
//! The total is checked at compile time to be at least 100 000.

use super::fuzz::run;
use crate::{parse_answer, Ability, ImageSize, PointingError};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const ARBITRARY_CASES: u32 = 40_000;
const NEAR_VALID_CASES: u32 = 50_000;
const VALID_CASES: u32 = 20_000;
const _: () = assert!(ARBITRARY_CASES + NEAR_VALID_CASES + VALID_CASES >= 100_000);

/// The contract of `parse_answer`, checked on any result; `true` when it parsed.
fn check_invariants(raw: &str, ability: Ability, bounds: ImageSize) -> Result<bool, TestCaseError> {
    match parse_answer(raw, ability, bounds) {
        Ok(a) => {
            prop_assert_eq!(&a.raw, raw);
            prop_assert_eq!(a.ability, ability);
            prop_assert!(!a.points.is_empty());
            for &[x, y] in &a.points {
                prop_assert!(x.is_finite() && y.is_finite());
                prop_assert!(
                    (0.0..=f64::from(bounds.width)).contains(&x),
                    "x {} out of {}",
                    x,
                    bounds
                );
                prop_assert!(
                    (0.0..=f64::from(bounds.height)).contains(&y),
                    "y {} out of {}",
                    y,
                    bounds
                );
            }
            if ability == Ability::Vtg {
                prop_assert_eq!(a.points.len(), 8);
            }
            if let Some(r) = &a.reasoning {
                prop_assert!(!r.trim().is_empty());
            }
            Ok(true)
        }
        Err(e) => {
            prop_assert_eq!(e.raw(), raw);
            let _ = e.to_string();
            if let PointingError::MalformedList { offset, .. }
            | PointingError::NonFinite { offset, .. } = &e
            {
                prop_assert!(*offset <= raw.len());
            }
            Ok(false)
        }
    }
}

fn ability() -> impl Strategy<Value = Ability> {
    prop::sample::select(Ability::ALL.to_vec())
}

fn bounds() -> impl Strategy<Value = ImageSize> {
    prop_oneof![
        8 => (1u32..2000, 1u32..2000).prop_map(|(w, h)| ImageSize::new(w, h)),
        1 => Just(ImageSize::new(0, 0)),
        1 => Just(ImageSize::new(u32::MAX, u32::MAX)),
        1 => Just(ImageSize::new(644, 476)),
    ]
}

/// Pieces that steer random text towards the parser's interesting paths.
const FRAGMENTS: &[&str] = &[
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<point>",
    "</point>",
    "< point >",
    "</ point>",
    "<POINT>",
    "<Answer>",
    "<",
    ">",
    "/",
    "[",
    "]",
    "[[",
    "]]",
    ",",
    " ",
    "\n",
    "\t",
    "0",
    "1",
    "9",
    "-",
    "+",
    ".",
    "e",
    "E",
    "1e999",
    "NaN",
    "inf",
    "-inf",
    "infinity",
    "x",
    "é",
    "☕",
    "\u{0}",
    "\u{b}",
    "\r\n",
    "212",
    "305.5",
    "1e-400",
];

#[test]
fn arbitrary_strings() {
    let text = prop_oneof![
        3 => any::<String>(),
        2 => prop::collection::vec(any::<u8>(), 0..200)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        5 => prop::collection::vec(prop::sample::select(FRAGMENTS), 0..80).prop_map(|v| v.concat()),
    ];
    let _ = run(
        "arbitrary_strings",
        ARBITRARY_CASES,
        (text, ability(), bounds()),
        |(raw, ability, bounds)| check_invariants(&raw, ability, bounds),
    );
}

/// How to spell one coordinate; rendered against the axis length by [`Num::render`].
#[derive(Debug, Clone)]
enum Num {
    /// In range, as an integer (`frac` of the axis; 0 and 1 hit the edges).
    Int(f64),
    /// In range, as a float in one of four spellings.
    Float(f64, u8),
    /// Out of range: negative, or beyond the axis.
    Outside(f64, bool),
    /// Any `f64` bit pattern (NaN, inf, subnormals…), as `Display` writes it.
    AnyF64(f64),
    /// Any `i64`.
    AnyI64(i64),
    /// A hand-picked hostile literal.
    Special(&'static str),
    /// A literal of `n` nines (overflows `f64` beyond ~309 digits).
    Nines(usize),
    /// `0.000…1` with `n` zeros (underflows to 0 for large `n`).
    Tiny(usize),
}

const SPECIALS: &[&str] = &[
    "NaN",
    "nan",
    "inf",
    "-inf",
    "+Infinity",
    "1e999",
    "-1e400",
    "1e-400",
    "1e",
    "e5",
    "-",
    "+",
    ".",
    "..",
    "1.2.3",
    "0x10",
    "1_000",
    "12px",
    "٣",
    "",
    "-0",
    "+.5",
    "5.",
    "1e+308",
    "1.8e308",
    "4.9e-324",
    "0e0",
    "00012",
];

impl Num {
    /// Picks a spelling from random bits: the low 4 bits choose the kind (only in-range kinds when
    /// `clean`), the high 53 bits give the fraction of the axis, the rest pick details.
    ///
    /// Deriving everything from one `u64` keeps the proptest value tree small; a per-field strategy
    /// tree made generation, not parsing, the cost of this test.
    fn from_bits(bits: u64, clean: bool) -> Num {
        let kind = bits & 0xf;
        let detail = (bits >> 4) as usize;
        let frac = (bits >> 11) as f64 / (1u64 << 53) as f64;
        match kind {
            9 => Num::Int(if detail & 1 == 1 { 1.0 } else { 0.0 }),
            _ if kind < 10 || clean => {
                if kind % 5 < 3 {
                    Num::Int(frac)
                } else {
                    Num::Float(frac, (detail % 4) as u8)
                }
            }
            10 => Num::Outside(frac, detail & 1 == 1),
            11 => Num::AnyF64(f64::from_bits(bits.rotate_left(29) ^ bits)),
            12 => Num::AnyI64(bits.rotate_left(7) as i64),
            13 => Num::Special(SPECIALS[detail % SPECIALS.len()]),
            14 => Num::Nines(1 + detail % 400),
            _ => Num::Tiny(1 + detail % 400),
        }
    }

    fn render(&self, max: u32) -> String {
        let m = f64::from(max);
        match *self {
            Num::Int(f) => ((f * m).floor() as u64).to_string(),
            Num::Float(f, 0) => (f * m).to_string(),
            Num::Float(f, 1) => format!("{:.2}", (f * m * 100.0).floor() / 100.0),
            Num::Float(f, 2) => format!("{:e}", f * m),
            Num::Float(f, _) => format!("+{:E}", f * m),
            Num::Outside(f, true) => format!("-{}", f * 10.0 + 1e-9),
            Num::Outside(f, false) => (m + 1.0 + f * m).to_string(),
            Num::AnyF64(v) => v.to_string(),
            Num::AnyI64(v) => v.to_string(),
            Num::Special(s) => s.to_owned(),
            Num::Nines(n) => "9".repeat(n),
            Num::Tiny(n) => format!("0.{}1", "0".repeat(n)),
        }
    }
}

const WS: &[&str] = &["", "", "", " ", "  ", "\n", "\n  ", "\t", "\r\n"];

/// One point from three random words: x, y (and a spare third coordinate), then arity, spacing and
/// a trailing comma from the third word.
fn render_point([xb, yb, misc]: [u64; 3], clean: bool, bounds: ImageSize) -> String {
    let arity = if clean {
        2
    } else {
        [2, 2, 2, 2, 2, 2, 2, 2, 0, 1, 3][(misc % 11) as usize]
    };
    let nums = [
        Num::from_bits(xb, clean).render(bounds.width),
        Num::from_bits(yb, clean).render(bounds.height),
        Num::from_bits(misc, clean).render(bounds.width),
    ];
    let (w1, w2) = (
        WS[(misc >> 8) as usize % WS.len()],
        WS[(misc >> 16) as usize % WS.len()],
    );
    let trailing = if (misc >> 24) & 3 == 0 { "," } else { "" };
    format!(
        "[{w1}{}{trailing}{w2}]",
        nums[..arity].join(&format!("{w1},{w2}"))
    )
}

fn ws() -> impl Strategy<Value = &'static str> {
    prop::sample::select(WS)
}

/// A tag, or (rarely) a damaged version of it.
fn tag(name: &'static str, closing: bool) -> impl Strategy<Value = String> {
    let slash = if closing { "/" } else { "" };
    prop_oneof![
        24 => Just(format!("<{slash}{name}>")),
        2 => Just(String::new()),
        1 => Just(format!("< {slash} {} >", name.to_uppercase())),
        1 => Just(format!("<{slash}{name}")),
        1 => Just(format!("{slash}{name}>")),
        1 => Just(format!("<{slash}{name}s>")),
    ]
}

/// A reply built like the model's, with damage: tags dropped or mangled, hostile numbers, wrong
/// arity, odd list shapes, 0–12 points (8 often, for VTG), then one of: nothing, a cut at a random
/// character, a spliced-in fragment, or a removed slice.
fn near_valid_reply() -> impl Strategy<Value = (String, Ability, ImageSize)> {
    let list = (
        (
            any::<bool>(),
            prop::collection::vec(any::<[u64; 3]>(), 8..13),
        ),
        prop::sample::select(vec![0usize, 1, 2, 3, 7, 8, 8, 8, 8, 9, 12]),
        ws(),
        prop::sample::select(vec![0u8, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3]),
    );
    let reasoning = prop::sample::select(vec![
        "",
        "The pepper is on the left.",
        "Answer format: <point>[[x1, y1]]</point>",
        "line one\nline two",
        "坐标 ☕",
    ]);
    let tags = (
        (tag("think", false), reasoning, tag("think", true)),
        (tag("answer", false), tag("point", false), ws(), ws()),
        (
            tag("point", true),
            tag("answer", true),
            prop::sample::select(vec!["", ".", "\nDone.", "<point>[[1,1]]</point>"]),
        ),
    );
    let damage = (
        0u8..6,
        any::<usize>(),
        0usize..8,
        prop::sample::select(FRAGMENTS),
    );
    (list, tags, damage, ability(), bounds()).prop_map(
        |(((clean, points), count, w, shape), tags, (op, at, len, frag), ability, bounds)| {
            let ((t0, r, t1), (a0, p0, w0, w1), (p1, a1, tail)) = tags;
            let points: Vec<String> = points
                .iter()
                .take(count)
                .map(|&p| render_point(p, clean, bounds))
                .collect();
            let list = match shape {
                // Well-formed outer list, with and without a trailing comma.
                0 => format!("[{w}{}{w}]", points.join(&format!(",{w}"))),
                1 => format!("[{}, ]", points.join(",")),
                // Missing outer brackets, or one extra nesting level.
                2 => points.join(","),
                _ => format!("[[{}]]", points.join(",")),
            };
            let reply = format!("{t0}{r}{t1}{a0}{p0}{w0}{list}{w1}{p1}{a1}{tail}");
            (mutate(reply, op, at, len, frag), ability, bounds)
        },
    )
}

/// Damage a reply: keep it, cut it at a char, splice a fragment in, or remove a slice.
fn mutate(reply: String, op: u8, at: usize, len: usize, frag: &str) -> String {
    let chars: Vec<char> = reply.chars().collect();
    let n = chars.len();
    let at = if n == 0 { 0 } else { at % (n + 1) };
    match op {
        0..=2 => reply,
        3 => chars[..at].iter().collect(),
        4 => {
            let mut s: String = chars[..at].iter().collect();
            s.push_str(frag);
            s.extend(&chars[at..]);
            s
        }
        _ => {
            let end = (at + len).min(n);
            chars[..at].iter().chain(&chars[end..]).collect()
        }
    }
}

#[test]
fn near_valid_replies() {
    let parsed = run(
        "near_valid_replies",
        NEAR_VALID_CASES,
        near_valid_reply(),
        |(raw, ability, bounds)| check_invariants(&raw, ability, bounds),
    );
    // The generator must reach the success path often, or the invariants on `Ok` go untested.
    assert!(
        parsed >= NEAR_VALID_CASES as usize / 10,
        "only {parsed} near-valid replies parsed"
    );
}

#[test]
fn valid_replies_round_trip() {
    let case = (ability(), (1u32..3000, 1u32..3000)).prop_flat_map(|(ability, (w, h))| {
        let count = match ability {
            Ability::Vtg => 8..9usize,
            _ => 1..10usize,
        };
        let coord = |max: u32| {
            prop_oneof![
                (0..=max).prop_map(|v| v.to_string()),
                (0.0..=f64::from(max)).prop_map(|v| v.to_string()),
                (0.0..=f64::from(max)).prop_map(|v| format!("{v:e}")),
                (0.0..=f64::from(max)).prop_map(|v| format!("{v:.3}")),
                Just(max.to_string()),
                Just("0".to_owned()),
            ]
        };
        (
            Just(ability),
            Just(ImageSize::new(w, h)),
            prop::collection::vec((coord(w), coord(h)), count),
            ws(),
            any::<bool>(),
            any::<bool>(),
        )
    });
    let parsed = run(
        "valid_replies_round_trip",
        VALID_CASES,
        case,
        |(ability, bounds, coords, w, think, wrap)| {
            let list: Vec<String> = coords
                .iter()
                .map(|(x, y)| format!("[{x},{w}{y}]"))
                .collect();
            let point = format!("<point>{w}[{}]{w}</point>", list.join(&format!(",{w}")));
            let answer = if wrap {
                format!("<answer>{point}</answer>")
            } else {
                point
            };
            let raw = if think {
                format!("<think>reason</think>{w}{answer}")
            } else {
                answer
            };
            let a = parse_answer(&raw, ability, bounds)
                .map_err(|e| TestCaseError::fail(format!("{raw:?}: {e}")))?;
            let expected: Vec<[f64; 2]> = coords
                .iter()
                .map(|(x, y)| [x.parse::<f64>().unwrap(), y.parse::<f64>().unwrap()])
                .collect();
            prop_assert_eq!(a.points, expected);
            prop_assert_eq!(a.reasoning.as_deref(), think.then_some("reason"));
            check_invariants(&raw, ability, bounds)
        },
    );
    assert_eq!(parsed, VALID_CASES as usize);
}
