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
//!   `a/b` vs `1/b*a`, `(a+b)^2` vs `a^2+2ab+b^2` are equal), integer powers;
//! * `sqrt` and `pi` (the only sympy names that reach this step in graded answers, see
//!   tests/fixtures/gen_rewards_golden.py): values are rational functions over the letters, `√π`,
//!   the square roots of primes and opaque square roots (`Gen`). `sqrt` of a rational takes the
//!   squares out as sympy's `Integer._eval_power` does (`sqrt(8)` = `2√2`, `sqrt(1/2)` = `√2/2`);
//!   of a product, its positive number and π's even powers (`sqrt(8x)` = `2√2·√x`); letters stay
//!   under an opaque root (`sqrt(x**2)` is not `x`: sympy's symbols are complex), as does a sum,
//!   unless it is `a + b√c` with `a² − b²c` a rational square (denested, as `simplify` finds).
//!   Products of sums are expanded and quotients compared across (which is what `simplify`'s
//!   rationalising decides); a name that merely contains `sqrt` or `pi` (`xsqrt`) is split into
//!   letters like any other;
//! * Floats beside symbols, roots or π: a coefficient, rounded as sympy's `Add` collects it (a
//!   Rational meeting a Float is rounded first; `0.1pi+0.2pi` is not `0.3pi`), never merged with
//!   another monomial (`1.4142135623731` is not `sqrt(2)`); `sqrt` of a Float and `x**0.5` are
//!   the correctly rounded root, as mpmath's.
//!
//! Not reproduced (graded not equal here; sympy may say equal): other functions and constants
//! (`oo`, `re`, `im`, `ln`, `id`, … and Greek names `mu nu xi`), Python keywords (`in`, `or`, …
//! are syntax errors in sympy too), Floats beside symbols over a denominator (`1.5/x`), Floats of
//! more than 15 significant digits or outside the double range, Float powers other than small
//! non-negative integers and 0.5, non-integer exponents, fourth roots and nested opaque roots,
//! square roots of negative numbers (sympy's `I`), hex/imaginary/underscored literals,
//! leading-zero integers, non-ASCII names, `!`, `%`, `//`, commas, brackets, and expressions over
//! 1000 characters, with numbers past 4096 bits, radicands past 2^32 or polynomials past 2000
//! terms (sympy would take very long on those).

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
    "oo", "re", "rf", "yn", "zoo", "mu", "nu", "xi", "frac", "as", "if", "in", "is", "or", "and",
    "not", "del", "def", "for", "try", "else", "elif", "from", "pass", "with", "assert",
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
    RADICANDS.with(|r| r.borrow_mut().clear());
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

/// A generator of the polynomial ring the values live in. Square roots are generators whose square
/// reduces ([`reduce`]): `√p` for a prime `p` (so `√8` is `2·√2`, as sympy extracts it), and the
/// opaque `√P` of a radicand sympy cannot take apart (`sqrt(x**2)` stays `sqrt(x**2)`: symbols are
/// complex). `√π` is free: π is transcendental, `pi` is `√π²`. Distinct primes' square roots, π
/// and the letters are independent over the rationals, so a reduced polynomial is zero exactly
/// when the value is, which is what `simplify(…) == 0` decides for these expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Gen {
    Letter(char),
    SqrtPi,
    SqrtPrime(u64),
    /// Index into the evaluation's radicand table ([`RADICANDS`]).
    Radical(usize),
}

/// Monomial: sorted (generator, exponent) pairs.
type Mono = Vec<(Gen, u32)>;

thread_local! {
    /// The radicands of the `Gen::Radical`s of the expression being evaluated (reset per call).
    static RADICANDS: std::cell::RefCell<Vec<Poly>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The index of radicand `p`, added when new.
fn radical(p: Poly) -> Option<usize> {
    RADICANDS.with(|r| {
        let mut r = r.borrow_mut();
        if let Some(i) = r.iter().position(|q| q.same(&p)) {
            return Some(i);
        }
        (r.len() < 64).then(|| {
            r.push(p);
            r.len() - 1
        })
    })
}

fn radicand(i: usize) -> Option<Poly> {
    RADICANDS.with(|r| r.borrow().get(i).cloned())
}

/// A coefficient: an exact rational, or a Float (53 bits) as sympy keeps one beside a term.
#[derive(Clone, Debug)]
enum Num {
    Q(Q),
    F(f64),
}

impl Num {
    fn is_zero(&self) -> bool {
        match self {
            Num::Q(q) => q.is_zero(),
            Num::F(f) => *f == 0.0,
        }
    }
    fn is_float(&self) -> bool {
        matches!(self, Num::F(_))
    }
    fn neg(&self) -> Num {
        match self {
            Num::Q(q) => Num::Q(q.neg()),
            Num::F(f) => Num::F(-f),
        }
    }
    /// A Float result sympy can hold: finite, and not subnormal (mpmath's exponent is unbounded).
    fn float(f: f64) -> Option<Num> {
        (f.is_finite() && (f == 0.0 || f.abs() >= f64::MIN_POSITIVE)).then_some(Num::F(f))
    }
    /// Rational meets Float: the Rational rounded to 53 bits first, as sympy converts it.
    fn add(&self, o: &Num) -> Option<Num> {
        match (self, o) {
            (Num::Q(a), Num::Q(b)) => Some(Num::Q(a.add(b)?)),
            (Num::F(a), Num::F(b)) => Num::float(a + b),
            (Num::F(a), Num::Q(b)) | (Num::Q(b), Num::F(a)) => Num::float(a + b.to_f64()?),
        }
    }
    fn mul(&self, o: &Num) -> Option<Num> {
        match (self, o) {
            (Num::Q(a), Num::Q(b)) => Some(Num::Q(a.mul(b)?)),
            (Num::F(a), Num::F(b)) => Num::float(a * b),
            (Num::F(a), Num::Q(b)) | (Num::Q(b), Num::F(a)) => Num::float(a * b.to_f64()?),
        }
    }
    fn same(&self, o: &Num) -> bool {
        match (self, o) {
            (Num::Q(a), Num::Q(b)) => a.n.mul(&b.d) == b.n.mul(&a.d),
            (Num::F(a), Num::F(b)) => a == b,
            _ => false,
        }
    }
}

#[derive(Clone, Debug)]
struct Poly(BTreeMap<Mono, Num>);

impl Poly {
    fn constant(q: Q) -> Poly {
        Poly::term(Vec::new(), Num::Q(q))
    }
    fn term(m: Mono, c: Num) -> Poly {
        let mut t = BTreeMap::new();
        if !c.is_zero() {
            t.insert(m, c);
        }
        Poly(t)
    }
    fn gen(g: Gen) -> Poly {
        Poly::term(vec![(g, 1)], Num::Q(Q::int(1)))
    }
    fn is_zero(&self) -> bool {
        self.0.values().all(Num::is_zero)
    }
    fn has_float(&self) -> bool {
        self.0.values().any(Num::is_float)
    }
    /// Exactly the rational 1.
    fn is_one(&self) -> bool {
        self.0.len() == 1
            && self
                .0
                .get(&Vec::new())
                .is_some_and(|c| c.same(&Num::Q(Q::int(1))))
    }
    fn same(&self, o: &Poly) -> bool {
        self.0.len() == o.0.len()
            && self
                .0
                .iter()
                .zip(&o.0)
                .all(|((ka, va), (kb, vb))| ka == kb && va.same(vb))
    }
    fn add(&self, o: &Poly) -> Option<Poly> {
        let mut m = self.clone();
        m.add_in(o)?;
        Some(m)
    }
    /// `self += o`, a zero sum dropping its term (sympy's `Add` drops a 0 or 0.0 coefficient).
    fn add_in(&mut self, o: &Poly) -> Option<()> {
        for (k, v) in &o.0 {
            let s = match self.0.get(k) {
                Some(a) => a.add(v)?,
                None => v.clone(),
            };
            if s.is_zero() {
                self.0.remove(k);
            } else {
                self.0.insert(k.clone(), s);
            }
        }
        (self.0.len() <= MAX_TERMS).then_some(())
    }
    fn neg(&self) -> Poly {
        Poly(self.0.iter().map(|(k, v)| (k.clone(), v.neg())).collect())
    }
    fn mul(&self, o: &Poly) -> Option<Poly> {
        if self.0.len().saturating_mul(o.0.len()) > MAX_PRODUCT_PAIRS {
            return None;
        }
        // sympy distributes a number over a sum but never expands two sums holding a Float: the
        // rounding of such a product is not modelled.
        if (self.has_float() || o.has_float()) && self.0.len() > 1 && o.0.len() > 1 {
            return None;
        }
        let mut out = Poly(BTreeMap::new());
        for (ka, va) in &self.0 {
            for (kb, vb) in &o.0 {
                let mut k: BTreeMap<Gen, u32> = ka.iter().copied().collect();
                for &(g, e) in kb {
                    *k.entry(g).or_insert(0) += e;
                }
                out.add_in(&reduce(k, va.mul(vb)?)?)?;
            }
        }
        Some(out)
    }
    fn pow(&self, e: u32) -> Option<Poly> {
        let mut acc = Poly::constant(Q::int(1));
        for _ in 0..e {
            acc = acc.mul(self)?;
        }
        Some(acc)
    }
    /// The only term, when there is exactly one.
    fn single(&self) -> Option<(&Mono, &Num)> {
        (self.0.len() == 1).then(|| self.0.iter().next()).flatten()
    }
    /// Whether every generator is a number's (no letter, no opaque radical).
    fn is_numeric(&self) -> bool {
        self.0
            .keys()
            .flatten()
            .all(|(g, _)| matches!(g, Gen::SqrtPi | Gen::SqrtPrime(_)))
    }
}

/// One term `c · ∏ g^e` with the squares of square roots multiplied out: `√p² = p`, `√P² = P`.
fn reduce(k: BTreeMap<Gen, u32>, c: Num) -> Option<Poly> {
    let mut coef = c;
    let mut mono: Mono = Vec::with_capacity(k.len());
    let mut radicands: Vec<(usize, u32)> = Vec::new();
    for (g, e) in k {
        match g {
            Gen::SqrtPrime(p) if e >= 2 => {
                let p = i64::try_from(p).ok()?;
                coef = coef.mul(&Num::Q(Q::int(p).pow(i64::from(e / 2))?))?;
                if e % 2 == 1 {
                    mono.push((g, 1));
                }
            }
            Gen::Radical(i) if e >= 2 => {
                radicands.push((i, e / 2));
                if e % 2 == 1 {
                    mono.push((g, 1));
                }
            }
            _ if e > 0 => mono.push((g, e)),
            _ => {}
        }
    }
    let mut t = Poly::term(mono, coef);
    for (i, n) in radicands {
        t = t.mul(&radicand(i)?.pow(n)?)?;
    }
    Some(t)
}

/// A rational function `num / den`.
#[derive(Clone, Debug)]
struct RatFn {
    num: Poly,
    den: Poly,
}

impl RatFn {
    fn of_num(c: Num) -> RatFn {
        RatFn {
            num: Poly::term(Vec::new(), c),
            den: Poly::constant(Q::int(1)),
        }
    }
    fn of_poly(p: Poly) -> RatFn {
        RatFn {
            num: p,
            den: Poly::constant(Q::int(1)),
        }
    }
    fn has_float(&self) -> bool {
        self.num.has_float() || self.den.has_float()
    }
    fn add(&self, o: &RatFn) -> Option<RatFn> {
        if self.den.is_one() && o.den.is_one() {
            return Some(RatFn::of_poly(self.num.add(&o.num)?));
        }
        // Over a common denominator a Float's rounding would not be sympy's.
        if self.has_float() || o.has_float() {
            return None;
        }
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
        // An opaque radical is not invertible in this model (`√(x²)` may be ±x).
        let opaque = self
            .num
            .0
            .keys()
            .flatten()
            .any(|(g, _)| matches!(g, Gen::Radical(_)));
        if self.num.is_zero() || self.num.has_float() || opaque {
            return None;
        }
        // A number times square roots of primes inverts in place, as sympy's automatic
        // evaluation does (`1/sqrt(2)` is `sqrt(2)/2`, `sqrt(3)/sqrt(12)` is `1/2`); the rest
        // becomes the denominator.
        if let Some((m, Num::Q(q))) = self.num.single() {
            let mut scale = q.clone();
            let mut surds = true;
            for &(g, _) in m {
                match g {
                    Gen::SqrtPrime(p) => scale = scale.mul(&Q::int(i64::try_from(p).ok()?))?,
                    _ => surds = false,
                }
            }
            if surds {
                let inv = Poly::term(m.clone(), Num::Q(scale.inv()?));
                return Some(RatFn {
                    num: self.den.mul(&inv)?,
                    den: Poly::constant(Q::int(1)),
                });
            }
        }
        Some(RatFn {
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
        let mut acc = RatFn::of_num(Num::Q(Q::int(1)));
        for _ in 0..e.unsigned_abs() {
            acc = acc.mul(&base)?;
        }
        Some(acc)
    }
}

// ---------------------------------------------------------------------------------------------
// square roots
// ---------------------------------------------------------------------------------------------

/// Largest integer whose square root is taken apart: trial division up to 2^16 (tens of
/// microseconds), so that an answer full of `sqrt` calls stays cheap for the reward service.
const MAX_RADICAND: u64 = 1 << 32;

/// `√m` for an integer `0 < m ≤ MAX_RADICAND`: `(k, primes)` with `m = k² · ∏ primes`.
fn split_square(mut m: u64) -> Option<(u64, Vec<u64>)> {
    if m == 0 || m > MAX_RADICAND {
        return None;
    }
    let (mut k, mut primes) = (1u64, Vec::new());
    let mut p = 2u64;
    while p * p <= m {
        let mut e = 0;
        while m.is_multiple_of(p) {
            m /= p;
            e += 1;
        }
        k *= p.pow(e / 2);
        if e % 2 == 1 {
            primes.push(p);
        }
        p += if p == 2 { 1 } else { 2 };
    }
    if m > 1 {
        primes.push(m);
    }
    Some((k, primes))
}

/// `√q` for a rational `q ≥ 0`: `sqrt(n/d) = sqrt(n·d)/d`, squares taken out (sympy's
/// `Rational._eval_power` and `Integer._eval_power`).
fn sqrt_q(q: &Q) -> Option<Poly> {
    if q.is_zero() {
        return Some(Poly(BTreeMap::new()));
    }
    if q.n.is_negative() {
        return None;
    }
    let m = q.n.mul(&q.d).to_u64()?;
    let (k, primes) = split_square(m)?;
    let coef = Q::int(i64::try_from(k).ok()?).mul(&Q {
        n: PyInt::from_i64(1),
        d: q.d.clone(),
    })?;
    Some(Poly::term(
        primes.into_iter().map(|p| (Gen::SqrtPrime(p), 1)).collect(),
        Num::Q(coef),
    ))
}

/// The square root of a polynomial, as sympy evaluates `sqrt(…)` and `simplify` then decides.
fn sqrt_poly(p: &Poly) -> Option<Poly> {
    if p.is_zero() {
        return Some(Poly(BTreeMap::new()));
    }
    if p.has_float() {
        return None;
    }
    if let Some((m, Num::Q(c))) = p.single() {
        // A product: its positive number and π's even powers come out (`sqrt(8x) = 2√2·√x`,
        // `sqrt(-2x) = √2·sqrt(-x)`), letters stay under an opaque root (`sqrt(x**2)` is not x
        // for a complex x).
        let negative = c.n.is_negative();
        let mut out = sqrt_q(&if negative { c.neg() } else { c.clone() })?;
        let mut letters: Mono = Vec::new();
        for &(g, e) in m {
            match g {
                Gen::SqrtPi if e % 2 == 0 => {
                    out = out.mul(&Poly::term(vec![(g, e / 2)], Num::Q(Q::int(1))))?;
                }
                Gen::Letter(_) => letters.push((g, e)),
                // A fourth root (`sqrt(sqrt(2))`, `sqrt(sqrt(pi))`) or a nested opaque root.
                _ => return None,
            }
        }
        if !letters.is_empty() {
            let sign = Q::int(if negative { -1 } else { 1 });
            let r = radical(Poly::term(letters, Num::Q(sign)))?;
            out = out.mul(&Poly::gen(Gen::Radical(r)))?;
        } else if negative {
            // sympy's `I`: not modelled.
            return None;
        }
        return Some(out);
    }
    if p.is_numeric() {
        if let Some(d) = denest(p) {
            return Some(d);
        }
    } else if p
        .0
        .keys()
        .flatten()
        .any(|(g, _)| matches!(g, Gen::Radical(_)))
    {
        return None;
    }
    // A sum: sympy keeps `sqrt(x + 1)` as it is.
    Some(Poly::gen(Gen::Radical(radical(p.clone())?)))
}

/// `√(a + b√c) = √((a+d)/2) + sign(b)·√((a−d)/2)` when `d² = a² − b²c` is a rational square
/// (what `simplify` finds through `sqrtdenest` or the minimal polynomial).
fn denest(p: &Poly) -> Option<Poly> {
    if p.0.len() != 2 {
        return None;
    }
    let a = match p.0.get(&Vec::new())? {
        Num::Q(q) => q.clone(),
        Num::F(_) => return None,
    };
    let (m, b) = p.0.iter().find(|(k, _)| !k.is_empty())?;
    let Num::Q(b) = b else { return None };
    let mut c = Q::int(1);
    for &(g, e) in m {
        match (g, e) {
            (Gen::SqrtPrime(q), 1) => c = c.mul(&Q::int(i64::try_from(q).ok()?))?,
            _ => return None,
        }
    }
    let d2 = a.mul(&a)?.add(&b.mul(b)?.mul(&c)?.neg())?;
    let d = sqrt_q(&d2)?;
    let d = match d.single() {
        Some((k, Num::Q(d))) if k.is_empty() => d.clone(),
        None if d2.is_zero() => Q::int(0),
        _ => return None,
    };
    let half = Q {
        n: PyInt::from_i64(1),
        d: PyInt::from_i64(2),
    };
    let r1 = sqrt_q(&a.add(&d)?.mul(&half)?)?;
    let r2 = sqrt_q(&a.add(&d.neg())?.mul(&half)?)?;
    let r2 = if b.n.is_negative() { r2.neg() } else { r2 };
    r1.add(&r2)
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

    fn as_ratfn(&self) -> RatFn {
        match self {
            Val::Rat(q) => RatFn::of_num(Num::Q(q.clone())),
            Val::Float(f) => RatFn::of_num(Num::F(*f)),
            Val::Sym(r) => r.clone(),
        }
    }

    /// A symbolic result, or the number it came down to (`sqrt(2)*sqrt(2)` is the Integer 2).
    fn sym(r: RatFn) -> Val {
        if r.den.is_one() {
            if r.num.is_zero() {
                return Val::Rat(Q::int(0));
            }
            if let Some((m, c)) = r.num.single() {
                if m.is_empty() {
                    return match c {
                        Num::Q(q) => Val::Rat(q.clone()),
                        Num::F(f) => Val::Float(*f),
                    };
                }
            }
        }
        Val::Sym(r)
    }

    fn pi() -> Val {
        Val::Sym(RatFn::of_poly(Poly::term(
            vec![(Gen::SqrtPi, 2)],
            Num::Q(Q::int(1)),
        )))
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
            _ => Some(Val::sym(self.as_ratfn().add(&o.as_ratfn())?)),
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
            _ => Some(Val::sym(self.as_ratfn().mul(&o.as_ratfn())?)),
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
            // Rational.__truediv__(Float) is self * (1/other); so is any expression's.
            (_, Val::Float(b)) => {
                let inv = float_result(1.0 / b)?;
                self.mul(&inv)
            }
            _ => Some(Val::sym(self.as_ratfn().mul(&o.as_ratfn().inv()?)?)),
        }
    }

    fn pow(&self, e: &Val) -> Option<Val> {
        if let Val::Float(x) = e {
            // `4**0.5`: mpmath's power at 53 bits, which for 0.5 is the correctly rounded root.
            let base = match self {
                Val::Rat(q) => q.to_f64()?,
                Val::Float(f) => *f,
                Val::Sym(_) => return None,
            };
            return (*x == 0.5 && base >= 0.0)
                .then(|| float_result(base.sqrt()))
                .flatten();
        }
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
            Val::Sym(r) => Some(Val::sym(r.pow(n)?)),
        }
    }

    /// `sqrt(self)`.
    fn sqrt(&self) -> Option<Val> {
        match self {
            Val::Rat(q) => Some(Val::sym(RatFn::of_poly(sqrt_q(q)?))),
            Val::Float(f) => (*f >= 0.0).then(|| float_result(f.sqrt())).flatten(),
            Val::Sym(r) => {
                // sqrt(P/c) for a rational c: sqrt(P)·sqrt(1/c); other denominators are not
                // taken apart.
                let scale = match r.den.single() {
                    Some((m, Num::Q(c))) if m.is_empty() => sqrt_q(&c.inv()?)?,
                    _ => return None,
                };
                Some(Val::sym(RatFn::of_poly(sqrt_poly(&r.num)?.mul(&scale)?)))
            }
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
    /// `sqrt` called on the parenthesised expression after it.
    Sqrt,
    /// `pi`, sympy's `S.Pi`.
    Pi,
    Op(&'static str),
}

fn is_atom_end(t: &Tok) -> bool {
    matches!(
        t,
        Tok::Int(_) | Tok::Float(_) | Tok::Sym(_) | Tok::Pi | Tok::Op(")")
    )
}

fn is_atom_start(t: &Tok) -> bool {
    matches!(
        t,
        Tok::Int(_) | Tok::Float(_) | Tok::Sym(_) | Tok::Pi | Tok::Sqrt | Tok::Op("(")
    )
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
            // The whole name only: `xsqrt`, `pisqrt`, `sqrt2` are split into letters like any
            // name sympy does not know.
            if name == "sqrt" {
                if c.get(i) != Some(&'(') {
                    return None;
                }
                raw.push(vec![Tok::Sqrt]);
                continue;
            }
            if name == "pi" {
                raw.push(vec![Tok::Pi]);
                continue;
            }
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
            Tok::Sym(c) => Some(Val::Sym(RatFn::of_poly(Poly::gen(Gen::Letter(c))))),
            Tok::Pi => Some(Val::pi()),
            Tok::Sqrt => {
                if !self.eat("(") {
                    return None;
                }
                self.depth += 1;
                if self.depth > MAX_NESTING {
                    return None;
                }
                let v = self.expr()?;
                self.depth -= 1;
                if !self.eat(")") {
                    return None;
                }
                v.sqrt()
            }
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
        assert!(!equal_under_sympy("x", "pix")); // three letters: refused by mathruler
        assert!(!equal_under_sympy("abc", "cba")); // three letters: refused by mathruler
    }

    #[test]
    fn square_roots_and_pi_follow_sympy() {
        let equal = [
            ("sqrt(8)", "2sqrt(2)"),
            ("sqrt(2)/2", "1/sqrt(2)"),
            ("sqrt(8/7)", "sqrt(8)/sqrt(7)"),
            ("sqrt(6)", "sqrt(2)sqrt(3)"),
            ("3+2sqrt(2)", "(sqrt(2)+1)**2"),
            ("sqrt(2)-1", "1/(1+sqrt(2))"),
            (
                "(3sqrt(2)+2sqrt(3)-sqrt(30))/12",
                "1/(sqrt(2)+sqrt(3)+sqrt(5))",
            ),
            ("sqrt(2)+sqrt(3)", "sqrt(5+2sqrt(6))"),
            ("2-sqrt(3)", "sqrt(7-4sqrt(3))"),
            ("2pi", "pi+pi"),
            ("pi", "sqrt(pi)**2"),
            ("pi", "sqrt(pi**2)"),
            ("pi/sqrt(2)", "sqrt(2)pi/2"),
            ("x", "sqrt(x)**2"),
            ("x+1", "sqrt(x+1)**2"),
            ("sqrt(2)sqrt(x)", "sqrt(2x)"),
            ("sqrt(2)/2", "0.5sqrt(2)"),
            ("2sqrt(2)", "sqrt(2)/0.5"),
            ("sqrt(4)", "4**0.5"),
            ("0.3", "sqrt(0.09)"),
            ("sqrt(-2x)", "sqrt(2)sqrt(-x)"),
            ("sqrt(-x)**2", "-x"),
        ];
        for (a, b) in equal {
            assert!(equal_under_sympy(a, b), "{a} = {b}");
        }
        let unequal = [
            ("sqrt(8)", "3sqrt(2)"),
            ("sqrt(5)", "sqrt(2)+sqrt(3)"),
            ("x", "sqrt(x**2)"),
            ("sqrt(x)sqrt(y)", "sqrt(xy)"),
            ("0.3pi", "0.1pi+0.2pi"),
            ("pi", "3.14159"),
            ("sqrt(2)", "1.4142135623731"),
            ("sqrt(2)x", "xsqrt(2)"),
            ("2i", "sqrt(-4)"),
            ("sqrt(-x)", "sqrt(x)"),
            ("sqrt(2)", "2**1/2"),
        ];
        for (a, b) in unequal {
            assert!(!equal_under_sympy(a, b), "{a} != {b}");
        }
    }
}
