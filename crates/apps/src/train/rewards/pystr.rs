//! Python `str` and `re` behaviour the rewards depend on: the whitespace set, `str.strip()`,
//! `float(str)`, and the released regexes translated with their exact semantics.
//!
//! Python's `\s` (for `str` patterns) and `str.strip()` / `str.isspace()` use one set: Unicode
//! `White_Space` plus U+001C..U+001F (the information separators, which Python counts as
//! whitespace and the regex crate's `\s` does not). Every `\s` below is written `[\s\x1C-\x1F]`.
//! Python's `.` without DOTALL excludes only `\n`, as the regex crate's does; `$` (no MULTILINE)
//! also matches before one final `\n`, written `\n?\z` here where it matters.

use std::sync::LazyLock;

use regex::Regex;

/// Python's `str.isspace()` for one character (== `\s` in a `str` pattern).
pub fn is_py_space(c: char) -> bool {
    matches!(c, '\t'..='\r' | '\u{1c}'..='\u{1f}' | ' ' | '\u{85}' | '\u{a0}' | '\u{1680}'
        | '\u{2000}'..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}')
}

/// Python's `str.strip()` with no argument.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Builds a regex from a pattern known to be valid (all patterns here are constants, covered by
/// the module's tests).
pub(crate) fn re(pattern: &str) -> Regex {
    match Regex::new(pattern) {
        Ok(r) => r,
        Err(e) => unreachable!("constant regex {pattern:?} does not compile: {e}"),
    }
}

/// `re.fullmatch(r"<think>.*?</think>\s*<answer>.*?</answer>", s, re.DOTALL)`.
static THINK_FORMAT: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?s)\A<think>.*?</think>[\s\x1C-\x1F]*<answer>.*?</answer>\z"));
/// `re.search(r"<point>(.*?)</point>", s, re.DOTALL)`.
static POINT_BLOCK: LazyLock<Regex> = LazyLock::new(|| re(r"(?s)<point>(.*?)</point>"));
/// `re.search(r"<depth>(.*?)</depth>", s, re.DOTALL)`.
static DEPTH_BLOCK: LazyLock<Regex> = LazyLock::new(|| re(r"(?s)<depth>(.*?)</depth>"));
/// `re.search(r"<answer>(.*?)</answer>", s)`: no DOTALL.
static ANSWER_BLOCK: LazyLock<Regex> = LazyLock::new(|| re(r"<answer>(.*?)</answer>"));

/// The released thinking-format reward: 1 when the whole string is `<think>…</think>`,
/// whitespace, `<answer>…</answer>` and nothing else (a trailing newline already fails).
pub fn thinking_format(s: &str) -> f64 {
    if THINK_FORMAT.is_match(s) {
        1.0
    } else {
        0.0
    }
}

/// The released point-format reward: 1 when `<point>…</point>` occurs anywhere (inside
/// `<think>` too).
pub fn point_format(s: &str) -> f64 {
    if POINT_BLOCK.is_match(s) {
        1.0
    } else {
        0.0
    }
}

/// The first `<point>` block's content, stripped (the released code parses only this one).
pub fn first_point_block(s: &str) -> Option<&str> {
    POINT_BLOCK
        .captures(s)
        .and_then(|c| c.get(1))
        .map(|m| py_strip(m.as_str()))
}

/// The first `<depth>` block's content, stripped.
pub fn first_depth_block(s: &str) -> Option<&str> {
    DEPTH_BLOCK
        .captures(s)
        .and_then(|c| c.get(1))
        .map(|m| py_strip(m.as_str()))
}

/// The first `<answer>` block on one line (no DOTALL), unstripped.
pub fn first_answer_block(s: &str) -> Option<&str> {
    ANSWER_BLOCK
        .captures(s)
        .and_then(|c| c.get(1))
        .map(|m| m.as_str())
}

/// Starts of the 10-digit runs of Unicode `Nd` characters in Python 3.11's database (Unicode
/// 14.0), each `start..start+10` mapping to 0..9: what `float()` and `int()` accept as digits.
const ND_RUNS: [u32; 66] = [
    0x30, 0x660, 0x6f0, 0x7c0, 0x966, 0x9e6, 0xa66, 0xae6, 0xb66, 0xbe6, 0xc66, 0xce6, 0xd66,
    0xde6, 0xe50, 0xed0, 0xf20, 0x1040, 0x1090, 0x17e0, 0x1810, 0x1946, 0x19d0, 0x1a80, 0x1a90,
    0x1b50, 0x1bb0, 0x1c40, 0x1c50, 0xa620, 0xa8d0, 0xa900, 0xa9d0, 0xa9f0, 0xaa50, 0xabf0, 0xff10,
    0x104a0, 0x10d30, 0x11066, 0x110f0, 0x11136, 0x111d0, 0x112f0, 0x11450, 0x114d0, 0x11650,
    0x116c0, 0x11730, 0x118e0, 0x11950, 0x11c50, 0x11d50, 0x11da0, 0x16a60, 0x16ac0, 0x16b50,
    0x1d7ce, 0x1d7d8, 0x1d7e2, 0x1d7ec, 0x1d7f6, 0x1e140, 0x1e2f0, 0x1e950, 0x1fbf0,
];

/// The decimal value of a Unicode `Nd` digit as Python 3.11 sees it.
pub fn py_decimal(c: char) -> Option<u32> {
    let cp = c as u32;
    let i = ND_RUNS.partition_point(|&s| s <= cp);
    if i == 0 {
        return None;
    }
    let start = ND_RUNS[i - 1];
    (cp - start < 10).then_some(cp - start)
}

/// Python's `float(s)` for a `str`: `None` where it raises `ValueError`.
///
/// Accepts what CPython does: surrounding whitespace (Python's set), any Unicode decimal digits,
/// one sign, `inf` / `infinity` / `nan` in any case, `1.`, `.5`, exponents, and single
/// underscores between digits.
pub fn py_float(s: &str) -> Option<f64> {
    // _PyUnicode_TransformDecimalAndSpaceToASCII: spaces -> ' ', digits -> ASCII, other
    // non-ASCII -> invalid.
    let mut ascii = String::with_capacity(s.len());
    for c in s.chars() {
        if is_py_space(c) {
            ascii.push(' ');
        } else if let Some(d) = py_decimal(c) {
            ascii.push(char::from(b'0' + d as u8));
        } else if c.is_ascii() {
            ascii.push(c);
        } else {
            return None;
        }
    }
    let t = ascii.trim_matches(' ');
    // Underscores only between two digits.
    let b = t.as_bytes();
    for (k, &c) in b.iter().enumerate() {
        if c == b'_' {
            let before = k > 0 && b[k - 1].is_ascii_digit();
            let after = b.get(k + 1).is_some_and(|c| c.is_ascii_digit());
            if !(before && after) {
                return None;
            }
        }
    }
    let t: String = t.chars().filter(|&c| c != '_').collect();
    let (neg, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, &t[..]),
    };
    let lower = body.to_ascii_lowercase();
    let v = if lower == "inf" || lower == "infinity" {
        f64::INFINITY
    } else if lower == "nan" {
        f64::NAN
    } else {
        static DEC: LazyLock<Regex> =
            LazyLock::new(|| re(r"\A(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\z"));
        if !DEC.is_match(body) {
            return None;
        }
        body.parse::<f64>().ok()?
    };
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_is_pythons() {
        assert_eq!(py_strip("\u{1c}\u{2003} a b\u{85}\n"), "a b");
        assert_eq!(py_strip("\u{200b}a"), "\u{200b}a");
        assert_eq!(
            thinking_format("<think>a</think>\u{1c}<answer>b</answer>"),
            1.0
        );
        assert_eq!(
            thinking_format("<think>a</think>\u{200b}<answer>b</answer>"),
            0.0
        );
        assert_eq!(thinking_format("<think>a</think><answer>b</answer>\n"), 0.0);
        assert_eq!(
            thinking_format("<think>a\n</think>\n<answer>\nb</answer>"),
            1.0
        );
    }

    #[test]
    fn regex_blocks() {
        let s = "<think><point> [1] </point></think><answer><point>[2]</point></answer>";
        assert_eq!(first_point_block(s), Some("[1]"));
        assert_eq!(first_answer_block("<answer>a\nb</answer>"), None);
        assert_eq!(
            first_answer_block("<answer>a</answer><answer>b</answer>"),
            Some("a")
        );
    }

    #[test]
    fn float_is_pythons() {
        assert_eq!(py_float(" 1_000.5 "), Some(1000.5));
        assert_eq!(py_float("１２"), Some(12.0));
        assert_eq!(py_float("١٢"), Some(12.0));
        assert_eq!(py_float("-Infinity"), Some(f64::NEG_INFINITY));
        assert!(py_float("nan").is_some_and(f64::is_nan));
        assert_eq!(py_float("1."), Some(1.0));
        assert_eq!(py_float(".5"), Some(0.5));
        for bad in [
            "", ".", "1e", "1__0", "_1", "1_", "0x10", "1,000", "infinit", "1 2", "--1",
        ] {
            assert_eq!(py_float(bad), None, "{bad}");
        }
    }
}
