//! `mathruler.grader.grade_answer` (mathruler 0.1.0), the QA accuracy check.
//!
//! The string normalisations are ported exactly, quirks included:
//!
//! * **mathd** (`normalize_answer` / `_strip_string`, from Hendrycks' MATH): strip, unwrap a
//!   whole-string `\text{…}`, drop newlines, `\!`, `\left`, `\right`, `^{\circ}`, `\$`, `%`, the
//!   part after a `\text{ ` unit (two or more of them raise → the unwrapped answer is used
//!   as is), add a leading `0` to `.5`, keep what follows `=` when at most two characters precede
//!   it (`k=5` → `5`), `\sqrt3` → `\sqrt{3}`, drop spaces, `\frac12` → `\frac{1}{2}`, `0.5` →
//!   `\frac{1}{2}`, canonical `a/b` → `\frac{a}{b}`. A trailing `\sqrt` or `\frac` raises (the
//!   unwrapped answer is used as is). Equal results → correct.
//! * **prm800k** (`_normalize`): `\text{…}` unwrap (Python `$`: before a final newline too), `$`,
//!   `%`, ` or `/` and ` → ` , `, million/billion/trillion → `*10^6/9/12`, the unit words
//!   (`degree cm centimeter meter mile second minute hour day week month year foot feet inch yard`,
//!   optional `es`/`s`, spaces and `^n`) removed **anywhere** (so `5 meters` → `5`), `^\circ`,
//!   enclosing braces, `,\!`; a string Python's `float()` accepts that is within 1e-7 of an
//!   integer becomes that integer (`2.00000001` → `2`, `1e3` → `1000`, `١٢` → `12`); LaTeX
//!   through pylatexenc (see `latex`); `- ` → `-`; `7 3/4` → `7+3/4`; spaces and braces dropped;
//!   lower case; a string that is an integer after removing well-formed thousands commas becomes
//!   `str(int(float(…)))` (truncating: `2,999.99999999` → `2999`).
//! * Then tuples/intervals (`(…)`, `[…]` with no bracket inside) are compared element-wise
//!   with matching brackets; an element pair that both look like fractions must match as text;
//!   an integer against a non-integer fails; anything else goes to sympy (see `symbolic`).
//!
//! A side effect kept: `(A)` grades equal to `A` (tuple of one element, then sympy `a - a = 0`),
//! and two-letter words whose letters are permutations grade equal (`on` vs `no`: sympy splits
//! them into products of symbols).
//!
//! Not reproduced (answers graded **incorrect** here where mathruler may say correct):
//! sympy equivalences beyond rational functions of single-letter symbols over square roots and π
//! (no `e` constants, trig, logarithms, factorials, floats beside symbols over a denominator,
//! floats of more than 15 significant digits, non-ASCII symbols; see `symbolic`), and LaTeX
//! outside the subset in `latex` (pylatexenc renders hundreds of macros).

use std::sync::LazyLock;

use regex::Regex;

use super::latex;
use super::pyint::PyInt;
use super::pystr::{py_float, py_strip, re};
use super::symbolic;

static TEXT_WRAP: LazyLock<Regex> = LazyLock::new(|| re(r"\A\\text\{(.+?)\}\n?\z"));
static COMMAS: LazyLock<Regex> = LazyLock::new(|| re(r"(\d)(,)(\d\d\d)(\z|\D)"));
static FRAC_LIKE: LazyLock<Regex> = LazyLock::new(|| re(r"\A-?[0-9]+.?/0*[1-9][0-9]*.?\n?\z"));
static DEGREE: LazyLock<Regex> = LazyLock::new(|| re(r"\^ *\\circ"));
static COMMA_BANG: LazyLock<Regex> = LazyLock::new(|| re(r",\\! *"));
static MINUS_SPACE: LazyLock<Regex> = LazyLock::new(|| re(r"- *"));
static MIXED: LazyLock<Regex> = LazyLock::new(|| re(r"([0-9]) +([0-9])"));
static UNITS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        "degree",
        "cm",
        "centimeter",
        "meter",
        "mile",
        "second",
        "minute",
        "hour",
        "day",
        "week",
        "month",
        "year",
        "foot",
        "feet",
        "inch",
        "yard",
    ]
    .iter()
    .map(|u| re(&format!(r"{u}(es)?(s)? *(\^[0-9]+)?")))
    .collect()
});

/// Python `len()` of a string.
fn py_len(s: &str) -> usize {
    s.chars().count()
}

/// `mathruler.math_normalize.normalize_answer`.
pub fn normalize_answer(answer: &str) -> String {
    let mut answer = py_strip(answer).to_string();
    if let Some(m) = TEXT_WRAP.captures(&answer).and_then(|c| c.get(1)) {
        answer = py_strip(m.as_str()).to_string();
    }
    strip_string(&answer).unwrap_or(answer)
}

/// `_strip_string`; `Err` where it raises (then `normalize_answer` returns its input).
fn strip_string(s: &str) -> Result<String, ()> {
    let mut s = s.replace('\n', "");
    s = s.replace("\\!", "");
    s = s.replace("\\\\", "\\");
    s = s.replace("tfrac", "frac").replace("dfrac", "frac");
    s = s.replace("\\left", "").replace("\\right", "");
    s = s.replace("^{\\circ}", "").replace("^\\circ", "");
    s = s.replace("\\$", "");
    if s.contains("\\text{ ") {
        let parts: Vec<&str> = s.split("\\text{ ").collect();
        if parts.len() != 2 {
            return Err(());
        }
        s = parts[0].to_string();
    }
    s = s.replace("\\%", "").replace('%', "");
    s = s.replace(" .", " 0.").replace("{.", "{0.");
    if s.is_empty() {
        return Ok(s);
    }
    if s.starts_with('.') {
        s = format!("0{s}");
    }
    {
        let parts: Vec<&str> = s.split('=').collect();
        if parts.len() == 2 && py_len(parts[0]) <= 2 {
            s = parts[1].to_string();
        }
    }
    s = fix_sqrt(&s)?;
    s = s.replace(' ', "");
    s = fix_fracs(&s)?;
    if s == "0.5" {
        s = "\\frac{1}{2}".to_string();
    }
    Ok(fix_a_slash_b(&s))
}

fn fix_sqrt(s: &str) -> Result<String, ()> {
    if !s.contains("\\sqrt") {
        return Ok(s.to_string());
    }
    let mut splits = s.split("\\sqrt");
    let mut out = splits.next().unwrap_or("").to_string();
    for split in splits {
        let mut chars = split.chars();
        let first = chars.next().ok_or(())?;
        if first != '{' {
            out.push_str("\\sqrt{");
            out.push(first);
            out.push('}');
            out.push_str(chars.as_str());
        } else {
            out.push_str("\\sqrt");
            out.push_str(split);
        }
    }
    Ok(out)
}

fn fix_fracs(s: &str) -> Result<String, ()> {
    let mut substrs = s.split("\\frac");
    let mut out = substrs.next().unwrap_or("").to_string();
    for substr in substrs {
        out.push_str("\\frac");
        let chars: Vec<char> = substr.chars().collect();
        let first = *chars.first().ok_or(())?;
        if first == '{' {
            out.push_str(substr);
            continue;
        }
        if chars.len() < 2 {
            return Ok(s.to_string());
        }
        let (a, b) = (chars[0], chars[1]);
        let rest: String = chars[2..].iter().collect();
        if b != '{' {
            out.push_str(&format!("{{{a}}}{{{b}}}{rest}"));
        } else {
            out.push_str(&format!("{{{a}}}{b}{rest}"));
        }
    }
    Ok(out)
}

/// Whether `int(s)` succeeds and `str(int(s)) == s`.
fn is_canonical_int(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let canonical = if digits == "0" {
        s == "0"
    } else {
        digits.starts_with(|c: char| ('1'..='9').contains(&c))
    };
    canonical && digits.bytes().all(|b| b.is_ascii_digit()) && digits.len() <= 4300
}

fn fix_a_slash_b(s: &str) -> String {
    let parts: Vec<&str> = s.split('/').collect();
    if parts.len() == 2 && is_canonical_int(parts[0]) && is_canonical_int(parts[1]) {
        return format!("\\frac{{{}}}{{{}}}", parts[0], parts[1]);
    }
    s.to_string()
}

/// `abs(x - int(round(x))) <= 1e-7`, false for inf/NaN (where `round` raises).
fn is_int_f64(x: f64) -> bool {
    x.is_finite() && (x - x.round_ties_even()).abs() <= 1e-7
}

/// `str(int(x))` of an integral or truncated float.
fn int_string(x: f64) -> String {
    PyInt::from_integral_f64(x).to_decimal_string()
}

fn strip_properly_formatted_commas(s: &str) -> String {
    let mut cur = s.to_string();
    loop {
        let next = COMMAS.replace_all(&cur, "${1}${3}${4}").into_owned();
        if next == cur {
            return next;
        }
        cur = next;
    }
}

fn str_is_int(s: &str) -> bool {
    py_float(&strip_properly_formatted_commas(s)).is_some_and(is_int_f64)
}

/// `_str_to_int`: `int(float(s.replace(",", "")))` as a string (`None` where it raises).
fn str_to_int(s: &str) -> Option<String> {
    let f = py_float(&s.replace(',', ""))?;
    f.is_finite().then(|| int_string(f.trunc()))
}

/// `mathruler.grader._normalize`; `None` where the LaTeX step is outside what `latex` renders
/// (the caller then grades incorrect).
pub fn normalize(expr: &str) -> Option<String> {
    let mut e = expr.to_string();
    if let Some(m) = TEXT_WRAP.captures(&e).and_then(|c| c.get(1)) {
        e = m.as_str().to_string();
    }
    e = e
        .replace("\\%", "%")
        .replace("\\$", "$")
        .replace(['$', '%'], "");
    e = e.replace(" or ", " , ").replace(" and ", " , ");
    e = e
        .replace("million", "*10^6")
        .replace("billion", "*10^9")
        .replace("trillion", "*10^12");
    for u in UNITS.iter() {
        e = u.replace_all(&e, "").into_owned();
    }
    e = DEGREE.replace_all(&e, "").into_owned();
    if e.len() >= 2 && e.starts_with('{') && e.ends_with('}') {
        e = e[1..e.len() - 1].to_string();
    }
    e = COMMA_BANG.replace_all(&e, "").into_owned();
    if let Some(f) = py_float(&e) {
        if is_int_f64(f) {
            e = int_string(f.round_ties_even());
        }
    }
    if e.contains('\\') {
        e = latex::parse_latex(&e)?;
    }
    e = MINUS_SPACE.replace_all(&e, "-").into_owned();
    e = MIXED.replace_all(&e, "${1}+${2}").into_owned();
    e = e.replace(' ', "");
    e = e.replace(['{', '}'], "");
    e = e.to_lowercase();
    if str_is_int(&e) {
        e = str_to_int(&e)?;
    }
    Some(e)
}

fn split_tuple(expr: &str) -> Vec<String> {
    let expr = strip_properly_formatted_commas(expr);
    if expr.is_empty() {
        return Vec::new();
    }
    let chars: Vec<char> = expr.chars().collect();
    let tuple_char = |c: char| "()[]".contains(c);
    if chars.len() > 2
        && tuple_char(chars[0])
        && tuple_char(chars[chars.len() - 1])
        && !chars[1..chars.len() - 1].iter().any(|&c| tuple_char(c))
    {
        let inner: String = chars[1..chars.len() - 1].iter().collect();
        return inner.split(',').map(|p| py_strip(p).to_string()).collect();
    }
    vec![expr]
}

/// `mathruler.grader.grade_answer(given, ground_truth)`.
pub fn grade_answer(given: &str, ground_truth: &str) -> bool {
    if normalize_answer(ground_truth) == normalize_answer(given) {
        return true;
    }
    let (Some(gt), Some(giv)) = (normalize(ground_truth), normalize(given)) else {
        return false;
    };
    if gt == giv {
        return true;
    }
    if giv.is_empty() {
        return false;
    }
    let gt_elems = split_tuple(&gt);
    let given_elems = split_tuple(&giv);
    if gt_elems.len() > 1
        && (gt.chars().next() != giv.chars().next() || gt.chars().last() != giv.chars().last())
    {
        return false;
    }
    if gt_elems.len() != given_elems.len() {
        return false;
    }
    for (g, h) in gt_elems.iter().zip(&given_elems) {
        let ok = if FRAC_LIKE.is_match(g) && FRAC_LIKE.is_match(h) {
            g == h
        } else if str_is_int(g) != str_is_int(h) {
            false
        } else {
            symbolic::equal_under_sympy(g, h)
        };
        if !ok {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mathd_normalisation() {
        assert_eq!(normalize_answer("\\frac12"), "\\frac{1}{2}");
        assert_eq!(normalize_answer("0.5"), "\\frac{1}{2}");
        assert_eq!(normalize_answer("1/2"), "\\frac{1}{2}");
        assert_eq!(normalize_answer(" \\text{ B } "), "B");
        assert_eq!(normalize_answer("k = 5"), "5");
        assert_eq!(normalize_answer("\\sqrt3"), "\\sqrt{3}");
        assert_eq!(normalize_answer("5\\sqrt"), "5\\sqrt");
    }

    #[test]
    fn prm800k_normalisation() {
        assert_eq!(normalize("2.00000001").as_deref(), Some("2"));
        assert_eq!(normalize("1e3").as_deref(), Some("1000"));
        assert_eq!(normalize("5 meters").as_deref(), Some("5"));
        assert_eq!(normalize("1 1/2").as_deref(), Some("1+1/2"));
        assert_eq!(normalize("2,999.99999999").as_deref(), Some("2999"));
        assert_eq!(normalize("Yes").as_deref(), Some("yes"));
    }

    #[test]
    fn grading() {
        assert!(grade_answer("A", "A"));
        assert!(grade_answer("(A)", "A"));
        assert!(grade_answer("on", "no"));
        assert!(!grade_answer("B", "C"));
        assert!(grade_answer("\\frac12", "0.5"));
        assert!(grade_answer("0.1", "1/10"));
        assert!(!grade_answer("0.1+0.2", "0.3"));
        assert!(!grade_answer("3/6", "1/2"));
        assert!(grade_answer("x+1", "1+x"));
        assert!(!grade_answer("[1,2]", "(1,2)"));
    }
}
