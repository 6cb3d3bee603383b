//! The sympy step of `grade_answer`: `simplify(parse_expr(f"({gt})-({given})")) == 0`, for the
//! expressions this module can evaluate exactly; everything else is "not equal".
//!
//! mathruler first refuses (not equal) an expression with more than two distinct letters (after
//! removing `sqrt` and `frac`), one containing `^{` or `^(`, or matching `\^[0-9]+\^` or
//! `\^[0-9][0-9]+`; then `^` becomes `**` and sympy parses it with the standard transformations
//! plus `implicit_multiplication_application`. Reproduced here:
//!
//! * Python's number tokens: integers (`Integer`), decimals and exponents (`Float` at 53 bits,
//!   exactly an IEEE double while the literal has at most 15 significant digits and stays in the
//!   normal range);
//! * names: every multi-letter name is split into one-letter symbols and digit runs
//!   (`ab2` → `a*b*2`, so `on` − `no` = 0), juxtaposition is multiplication (`2x`, `2(3)`, `(a)(b)`);
//! * `+ - * / **` with Python precedence, unary signs, parentheses;
//! * sympy's number arithmetic: rationals exact; a Float meeting a Rational rounds the Rational
//!   to 53 bits first; `Rational / Float` is `Rational * (1/Float)` (two roundings); a Float result
//!   of exactly zero becomes sympy's exact `0`;
//! * symbols: exact rational functions with rational coefficients (so `x+1` vs `1+x`,
//!   `a/b` vs `1/b*a`, `(a+b)^2` vs `a^2+2ab+b^2` are equal), integer powers.
//!
//! Not reproduced (graded not equal here; sympy may say equal): functions and constants (`sqrt`,
//! `pi`, `E`-free `e` is a plain symbol and works, but `oo`, `re`, `im`, `ln`, `id`, … and Greek
//! names `mu nu pi xi` are sympy objects), Python keywords (`in`, `or`, … are syntax errors in
//! sympy too), Floats mixed with symbols, Floats of more than 15 significant digits or outside
//! the double range, Float powers other than small non-negative integers, non-integer exponents,
//! hex/imaginary/underscored literals, leading-zero integers, non-ASCII names, `!`, `%`, `//`,
//! commas, brackets, and expressions over 1000 characters, with numbers past 4096 bits or
//! polynomials past 2000 terms (sympy would take very long on those).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

use super::pyint::{ratio_to_f64, PyInt};
use super::pystr::re;

const MAX_EXPR_CHARS: usize = 1000;
const MAX_BITS: u64 = 4_096;
const MAX_TERMS: usize = 2_000;
const MAX_PRODUCT_PAIRS: usize = 4_000;
const MAX_NESTING: usize = 100;

static BAD_REGEX: LazyLock<Regex> = LazyLock::new(|| re(r"\^[0-9]+\^|\^[0-9][0-9]+"));

/// Names sympy's parser resolves to something other than a plain symbol (functions, constants,
/// Python builtins, Greek letter names, keywords) among those that can pass the two-letter limit.
const SPECIAL_NAMES: &[&str] = &[
    "all", "csc", "eye", "ff", "fft", "fu", "gff", "id", "im", "jn", "li", "ln", "nan", "ntt",
    "oo", "pi", "re", "rf", "yn", "zoo", "mu", "nu", "xi", "sqrt", "frac", "as", "if", "in", "is",
    "or", "and", "not", "del", "def", "for", "try", "else", "elif", "from", "pass", "with",
    "assert",
];

/// `are_equal_under_sympy(gt, given)` for what this module can evaluate.
pub fn equal_under_sympy(gt: &str, given: &str) -> bool {
    let expr = format!("({gt})-({given})");
    if expr.chars().count() > MAX_EXPR_CHARS || !should_allow_eval(&expr) {
        return false;
    }
    let py = expr.replace('^', "**");
    let Some(tokens) = tokenize(&py) else {
        return false;
    };
    let mut p = Parser {
        t: tokens,
        i: 0,
        depth: 0,
    };
    match p.expr() {
        Some(v) if p.i == p.t.len() => v.is_zero(),
        _ => false,
    }
}

fn should_allow_eval(expr: &str) -> bool {
    let stripped = expr.replace("sqrt", "").replace("frac", "");
    let mut letters: Vec<char> = stripped.chars().filter(|c| c.is_alphabetic()).collect();
    letters.sort_unstable();
    letters.dedup();
    letters.len() <= 2 && !expr.contains("^{") && !expr.contains("^(") && !BAD_REGEX.is_match(expr)
}

// ---------------------------------------------------------------------------------------------
// rationals and rational functions
// ---------------------------------------------------------------------------------------------

/// An exact rational `n/d`, `d > 0`, not necessarily reduced.
#[derive(Clone, Debug)]
struct Q {
    n: PyInt,
    d: PyInt,
}

impl Q {
    fn int(v: i64) -> Q {
        Q {
            n: PyInt::from_i64(v),
            d: PyInt::from_i64(1),
        }
    }
    fn checked(n: PyInt, d: PyInt) -> Option<Q> {
        (n.bit_len() <= MAX_BITS && d.bit_len() <= MAX_BITS).then_some(Q { n, d })
    }
    fn is_zero(&self) -> bool {
        self.n.is_zero()
    }
    fn add(&self, o: &Q) -> Option<Q> {
        if self.d == o.d {
            return Q::checked(self.n.add(&o.n), self.d.clone());
        }
        Q::checked(self.n.mul(&o.d).add(&o.n.mul(&self.d)), self.d.mul(&o.d))
    }
    fn mul(&self, o: &Q) -> Option<Q> {
        Q::checked(self.n.mul(&o.n), self.d.mul(&o.d))
    }
    fn neg(&self) -> Q {
        Q {
            n: self.n.neg(),
            d: self.d.clone(),
        }
    }
    fn inv(&self) -> Option<Q> {
        if self.is_zero() {
            return None;
        }
        if self.n.is_negative() {
            Some(Q {
                n: self.d.neg(),
                d: self.n.neg(),
            })
        } else {
            Some(Q {
                n: self.d.clone(),
                d: self.n.clone(),
            })
        }
    }
    /// The integer value when this is one.
    fn as_small_int(&self) -> Option<i64> {
        let (q, r) = self.n.divmod_abs(&self.d);
        if !r.is_zero() {
            return None;
        }
        let v = q.to_i64()?;
        Some(if self.n.is_negative() { -v } else { v })
    }
    fn to_f64(&self) -> Option<f64> {
        ratio_to_f64(&self.n, &self.d)
    }
    fn pow(&self, e: i64) -> Option<Q> {
        let base = if e < 0 { self.inv()? } else { self.clone() };
        let bits = base.n.bit_len().max(base.d.bit_len());
        if bits.saturating_mul(e.unsigned_abs()) > MAX_BITS {
            return None;
        }
        let mut acc = Q::int(1);
        for _ in 0..e.unsigned_abs() {
            acc = acc.mul(&base)?;
        }
        Some(acc)
    }
    /// The exact value of a finite double.
    fn of_f64(f: f64) -> Q {
        if f == 0.0 {
            return Q::int(0);
        }
        let bits = f.to_bits();
        let exp = ((bits >> 52) & 0x7ff) as i64;
        let frac = bits & ((1u64 << 52) - 1);
        let (mant, e2) = if exp == 0 {
            (frac, -1074)
        } else {
            (frac | (1u64 << 52), exp - 1075)
        };
        let m = PyInt::from_i128(i128::from(mant) * if f < 0.0 { -1 } else { 1 });
        let two = |k: i64| {
            let mut p = PyInt::from_i64(1);
            let chunk = PyInt::from_i64(1 << 30);
            let mut k = k;
            while k >= 30 {
                p = p.mul(&chunk);
                k -= 30;
            }
            p.mul(&PyInt::from_i64(1 << k))
        };
        if e2 >= 0 {
            Q {
                n: m.mul(&two(e2)),
                d: PyInt::from_i64(1),
            }
        } else {
            Q { n: m, d: two(-e2) }
        }
    }
}

/// Monomial: sorted (letter, exponent) pairs.
type Mono = Vec<(char, u32)>;

#[derive(Clone, Debug)]
struct Poly(BTreeMap<Mono, Q>);

impl Poly {
    fn constant(q: Q) -> Poly {
        let mut m = BTreeMap::new();
        if !q.is_zero() {
            m.insert(Vec::new(), q);
        }
        Poly(m)
    }
    fn symbol(c: char) -> Poly {
        let mut m = BTreeMap::new();
        m.insert(vec![(c, 1)], Q::int(1));
        Poly(m)
    }
    fn is_zero(&self) -> bool {
        self.0.values().all(Q::is_zero)
    }
    fn add(&self, o: &Poly) -> Option<Poly> {
        let mut m = self.0.clone();
        for (k, v) in &o.0 {
            let s = match m.get(k) {
                Some(a) => a.add(v)?,
                None => v.clone(),
            };
            if s.is_zero() {
                m.remove(k);
            } else {
                m.insert(k.clone(), s);
            }
        }
        (m.len() <= MAX_TERMS).then_some(Poly(m))
    }
    fn neg(&self) -> Poly {
        Poly(self.0.iter().map(|(k, v)| (k.clone(), v.neg())).collect())
    }
    fn mul(&self, o: &Poly) -> Option<Poly> {
        if self.0.len().saturating_mul(o.0.len()) > MAX_PRODUCT_PAIRS {
            return None;
        }
        let mut out: BTreeMap<Mono, Q> = BTreeMap::new();
        for (ka, va) in &self.0 {
            for (kb, vb) in &o.0 {
                let mut k: BTreeMap<char, u32> = ka.iter().copied().collect();
                for &(c, e) in kb {
                    *k.entry(c).or_insert(0) += e;
                }
                let k: Mono = k.into_iter().collect();
                let prod = va.mul(vb)?;
                let sum = match out.get(&k) {
                    Some(cur) => cur.add(&prod)?,
                    None => prod,
                };
                out.insert(k, sum);
            }
        }
        out.retain(|_, v| !v.is_zero());
        (out.len() <= MAX_TERMS).then_some(Poly(out))
    }
}

/// A rational function `num / den`.
#[derive(Clone, Debug)]
struct RatFn {
    num: Poly,
    den: Poly,
}

impl RatFn {
    fn of_q(q: Q) -> RatFn {
        RatFn {
            num: Poly::constant(q),
            den: Poly::constant(Q::int(1)),
        }
    }
    fn add(&self, o: &RatFn) -> Option<RatFn> {
        Some(RatFn {
            num: self.num.mul(&o.den)?.add(&o.num.mul(&self.den)?)?,
            den: self.den.mul(&o.den)?,
        })
    }
    fn mul(&self, o: &RatFn) -> Option<RatFn> {
        Some(RatFn {
            num: self.num.mul(&o.num)?,
            den: self.den.mul(&o.den)?,
        })
    }
    fn inv(&self) -> Option<RatFn> {
        (!self.num.is_zero()).then(|| RatFn {
            num: self.den.clone(),
            den: self.num.clone(),
        })
    }
    fn neg(&self) -> RatFn {
        RatFn {
            num: self.num.neg(),
            den: self.den.clone(),
        }
    }
    fn pow(&self, e: i64) -> Option<RatFn> {
        let base = if e < 0 { self.inv()? } else { self.clone() };
        let mut acc = RatFn::of_q(Q::int(1));
        for _ in 0..e.unsigned_abs() {
            acc = acc.mul(&base)?;
        }
        Some(acc)
    }
}

// ---------------------------------------------------------------------------------------------
// sympy values
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Val {
    Rat(Q),
    Float(f64),
    Sym(RatFn),
}

/// A Float result as sympy keeps it: exact zero becomes `S.Zero`; overflow or a subnormal
/// (outside what a double models of mpmath's unbounded exponent) is unsupported.
fn float_result(f: f64) -> Option<Val> {
    if f == 0.0 {
        Some(Val::Rat(Q::int(0)))
    } else if !f.is_finite() || f.abs() < f64::MIN_POSITIVE {
        None
    } else {
        Some(Val::Float(f))
    }
}

impl Val {
    fn is_zero(&self) -> bool {
        match self {
            Val::Rat(q) => q.is_zero(),
            Val::Float(f) => *f == 0.0,
            Val::Sym(r) => r.num.is_zero(),
        }
    }

    fn as_ratfn(&self) -> Option<RatFn> {
        match self {
            Val::Rat(q) => Some(RatFn::of_q(q.clone())),
            Val::Sym(r) => Some(r.clone()),
            Val::Float(_) => None,
        }
    }

    fn sym(r: RatFn) -> Val {
        Val::Sym(r)
    }

    fn neg(&self) -> Val {
        match self {
            Val::Rat(q) => Val::Rat(q.neg()),
            Val::Float(f) => Val::Float(-f),
            Val::Sym(r) => Val::Sym(r.neg()),
        }
    }

    fn add(&self, o: &Val) -> Option<Val> {
        match (self, o) {
            (Val::Rat(a), Val::Rat(b)) => Some(Val::Rat(a.add(b)?)),
            (Val::Float(a), Val::Float(b)) => float_result(a + b),
            (Val::Float(a), Val::Rat(b)) | (Val::Rat(b), Val::Float(a)) => {
                float_result(a + b.to_f64()?)
            }
            _ => Some(Val::sym(self.as_ratfn()?.add(&o.as_ratfn()?)?)),
        }
    }

    fn sub(&self, o: &Val) -> Option<Val> {
        match (self, o) {
            (Val::Float(a), Val::Rat(b)) => float_result(a - b.to_f64()?),
            (Val::Rat(a), Val::Float(b)) => float_result(a.to_f64()? - b),
            _ => self.add(&o.neg()),
        }
    }

    fn mul(&self, o: &Val) -> Option<Val> {
        match (self, o) {
            (Val::Rat(a), Val::Rat(b)) => Some(Val::Rat(a.mul(b)?)),
            (Val::Float(a), Val::Float(b)) => float_result(a * b),
            (Val::Float(a), Val::Rat(b)) | (Val::Rat(b), Val::Float(a)) => {
                float_result(a * b.to_f64()?)
            }
            _ => Some(Val::sym(self.as_ratfn()?.mul(&o.as_ratfn()?)?)),
        }
    }

    fn div(&self, o: &Val) -> Option<Val> {
        match (self, o) {
            (Val::Rat(a), Val::Rat(b)) => Some(Val::Rat(a.mul(&b.inv()?)?)),
            (Val::Float(a), Val::Float(b)) => {
                if *b == 0.0 {
                    None
                } else {
                    float_result(a / b)
                }
            }
            (Val::Float(a), Val::Rat(b)) => {
                if b.is_zero() {
                    None
                } else {
                    float_result(a / b.to_f64()?)
                }
            }
            // Rational.__truediv__(Float) is self * (1/other).
            (Val::Rat(a), Val::Float(b)) => {
                let inv = float_result(1.0 / b)?;
                Val::Rat(a.clone()).mul(&inv)
            }
            _ => Some(Val::sym(self.as_ratfn()?.mul(&o.as_ratfn()?.inv()?)?)),
        }
    }

    fn pow(&self, e: &Val) -> Option<Val> {
        let Val::Rat(eq) = e else { return None };
        let n = eq.as_small_int()?;
        if n.abs() > 64 {
            return None;
        }
        match self {
            Val::Rat(q) => Some(Val::Rat(q.pow(n)?)),
            Val::Float(f) => {
                if n < 0 {
                    return None;
                }
                float_result(Q::of_f64(*f).pow(n)?.to_f64()?)
            }
            Val::Sym(r) => Some(Val::Sym(r.pow(n)?)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// tokens and parser (Python expression grammar)
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Int(String),
    Float(String),
    Sym(char),
    Op(&'static str),
}

fn is_atom_end(t: &Tok) -> bool {
    matches!(t, Tok::Int(_) | Tok::Float(_) | Tok::Sym(_) | Tok::Op(")"))
}

fn is_atom_start(t: &Tok) -> bool {
    matches!(t, Tok::Int(_) | Tok::Float(_) | Tok::Sym(_) | Tok::Op("("))
}

/// Python tokens, sympy's name splitting, and the implicit `*` between juxtaposed atoms.
fn tokenize(s: &str) -> Option<Vec<Tok>> {
    let c: Vec<char> = s.chars().collect();
    let mut raw: Vec<Vec<Tok>> = Vec::new();
    let mut i = 0;
    let digit = |k: usize| c.get(k).is_some_and(|ch| ch.is_ascii_digit());
    while i < c.len() {
        let ch = c[i];
        if ch.is_ascii_digit() || (ch == '.' && digit(i + 1)) {
            let start = i;
            while digit(i) {
                i += 1;
            }
            let mut is_float = false;
            if c.get(i) == Some(&'.') {
                is_float = true;
                i += 1;
                while digit(i) {
                    i += 1;
                }
            }
            if matches!(c.get(i), Some('e' | 'E')) {
                let mut k = i + 1;
                if matches!(c.get(k), Some('+' | '-')) {
                    k += 1;
                }
                if digit(k) {
                    while digit(k) {
                        k += 1;
                    }
                    i = k;
                    is_float = true;
                }
            }
            if matches!(c.get(i), Some('j' | 'J' | '_')) {
                return None;
            }
            let text: String = c[start..i].iter().collect();
            if is_float {
                raw.push(vec![Tok::Float(text)]);
            } else {
                if text.len() > 1 && text.starts_with('0') {
                    return None;
                }
                if text == "0" && matches!(c.get(i), Some('x' | 'X' | 'b' | 'B' | 'o' | 'O')) {
                    return None;
                }
                raw.push(vec![Tok::Int(text)]);
            }
            continue;
        }
        if ch.is_ascii_alphabetic() {
            let start = i;
            while c.get(i).is_some_and(|ch| ch.is_ascii_alphanumeric()) {
                i += 1;
            }
            if matches!(c.get(i), Some('_'))
                || c.get(i)
                    .is_some_and(|ch| !ch.is_ascii() && ch.is_alphanumeric())
            {
                return None;
            }
            let name: String = c[start..i].iter().collect();
            if SPECIAL_NAMES.contains(&name.as_str()) {
                return None;
            }
            // split_symbols: letters become symbols, digit runs numbers.
            let mut parts = Vec::new();
            let nc: Vec<char> = name.chars().collect();
            let mut k = 0;
            while k < nc.len() {
                if nc[k].is_ascii_digit() {
                    let s0 = k;
                    while k < nc.len() && nc[k].is_ascii_digit() {
                        k += 1;
                    }
                    let d: String = nc[s0..k].iter().collect();
                    if d.len() > 1 && d.starts_with('0') {
                        return None;
                    }
                    parts.push(Tok::Int(d));
                } else {
                    parts.push(Tok::Sym(nc[k]));
                    k += 1;
                }
            }
            raw.push(parts);
            continue;
        }
        let op: &'static str = match ch {
            '*' if c.get(i + 1) == Some(&'*') => "**",
            '*' => "*",
            '/' if c.get(i + 1) == Some(&'/') => return None,
            '/' => "/",
            '+' => "+",
            '-' => "-",
            '(' => "(",
            ')' => ")",
            _ => return None,
        };
        i += op.len();
        raw.push(vec![Tok::Op(op)]);
    }
    let mut out: Vec<Tok> = Vec::new();
    for group in raw {
        for t in group {
            if let Some(prev) = out.last() {
                if is_atom_end(prev) && is_atom_start(&t) {
                    out.push(Tok::Op("*"));
                }
            }
            out.push(t);
        }
    }
    Some(out)
}

/// Significant digits of a decimal literal as `decimal.Decimal` counts them (leading zeros
/// dropped, trailing zeros kept).
fn significant_digits(lit: &str) -> usize {
    let mant = lit.split(['e', 'E']).next().unwrap_or("");
    let digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    let trimmed = digits.trim_start_matches('0');
    trimmed.len().max(1)
}

struct Parser {
    t: Vec<Tok>,
    i: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }

    fn eat(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Op(o)) if *o == op) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expr(&mut self) -> Option<Val> {
        let mut v = self.term()?;
        loop {
            if self.eat("+") {
                v = v.add(&self.term()?)?;
            } else if self.eat("-") {
                v = v.sub(&self.term()?)?;
            } else {
                return Some(v);
            }
        }
    }

    fn term(&mut self) -> Option<Val> {
        let mut v = self.unary()?;
        loop {
            if self.eat("*") {
                v = v.mul(&self.unary()?)?;
            } else if self.eat("/") {
                v = v.div(&self.unary()?)?;
            } else {
                return Some(v);
            }
        }
    }

    fn unary(&mut self) -> Option<Val> {
        if self.eat("-") {
            return Some(self.unary()?.neg());
        }
        if self.eat("+") {
            return self.unary();
        }
        self.power()
    }

    fn power(&mut self) -> Option<Val> {
        let base = self.atom()?;
        if self.eat("**") {
            let e = self.unary()?;
            return base.pow(&e);
        }
        Some(base)
    }

    fn atom(&mut self) -> Option<Val> {
        let t = self.peek()?.clone();
        self.i += 1;
        match t {
            Tok::Int(d) => Some(Val::Rat(Q {
                n: PyInt::from_decimal_digits(&d, false),
                d: PyInt::from_i64(1),
            })),
            Tok::Float(lit) => {
                if significant_digits(&lit) > 15 {
                    return None;
                }
                let f: f64 = lit.parse().ok()?;
                if f != 0.0 && (!f.is_finite() || f.abs() < f64::MIN_POSITIVE) {
                    return None;
                }
                Some(Val::Float(f))
            }
            Tok::Sym(c) => Some(Val::Sym(RatFn {
                num: Poly::symbol(c),
                den: Poly::constant(Q::int(1)),
            })),
            Tok::Op("(") => {
                self.depth += 1;
                if self.depth > MAX_NESTING {
                    return None;
                }
                let v = self.expr()?;
                self.depth -= 1;
                self.eat(")").then_some(v)
            }
            Tok::Op(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_follow_sympy() {
        assert!(equal_under_sympy("0.1", "1/10"));
        assert!(equal_under_sympy("1/3+1/6", "0.5"));
        assert!(!equal_under_sympy("0.1+0.2", "0.3"));
        assert!(equal_under_sympy("2^-1", "1/2"));
        assert!(!equal_under_sympy("0.333", "1/3"));
        assert!(equal_under_sympy("7/2", "3.5"));
    }

    #[test]
    fn symbols_follow_sympy() {
        assert!(equal_under_sympy("a", "a"));
        assert!(equal_under_sympy("no", "on"));
        assert!(equal_under_sympy("x+1", "1+x"));
        assert!(equal_under_sympy("2x", "x*2"));
        assert!(equal_under_sympy("(a+b)^2", "a^2+2ab+b^2"));
        assert!(!equal_under_sympy("a", "b"));
        assert!(!equal_under_sympy("pi", "pi")); // a sympy constant: not modelled
        assert!(!equal_under_sympy("abc", "cba")); // three letters: refused by mathruler
    }
}
