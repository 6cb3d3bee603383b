//! Python's `int`: arbitrary precision, because the released code does exact integer arithmetic
//! wherever the JSON it parsed holds integers.
//!
//! Why it matters for parity: `json.loads` turns `[[4294967296, 0]]` into Python ints of any size.
//! The Fréchet distance then squares them exactly, `math.sqrt` converts the exact sum to a float
//! (correctly rounded, `OverflowError` past `f64::MAX`), comparisons between ints and floats are
//! exact, and numpy picks int64 / uint64 / object arrays by the ints' magnitudes. An `f64` or
//! `i128` stand-in gets all of those wrong somewhere, so this is a small, plain bignum: sign and
//! magnitude in base 2³², schoolbook operations (the inputs are a few thousand digits at most:
//! `json.loads` refuses more than 4300).

use std::cmp::Ordering;

/// An integer of any size, as Python's `int`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PyInt {
    neg: bool,
    /// Little-endian base-2³² limbs, no trailing zero limb; zero is `[]` and never negative.
    mag: Vec<u32>,
}

impl PyInt {
    /// Zero.
    pub fn zero() -> Self {
        PyInt {
            neg: false,
            mag: Vec::new(),
        }
    }

    /// From a machine integer.
    pub fn from_i64(v: i64) -> Self {
        Self::from_i128(i128::from(v))
    }

    /// From a machine integer.
    pub fn from_i128(v: i128) -> Self {
        let neg = v < 0;
        let mut u = v.unsigned_abs();
        let mut mag = Vec::new();
        while u > 0 {
            mag.push((u & 0xffff_ffff) as u32);
            u >>= 32;
        }
        PyInt { neg, mag }
    }

    /// From ASCII decimal digits (no sign, no separators; the caller checked them).
    pub fn from_decimal_digits(digits: &str, neg: bool) -> Self {
        let mut mag: Vec<u32> = Vec::new();
        let bytes = digits.as_bytes();
        for chunk in bytes.chunks(9) {
            let mut mul: u64 = 1;
            let mut add: u64 = 0;
            for &b in chunk {
                mul *= 10;
                add = add * 10 + u64::from(b.wrapping_sub(b'0'));
            }
            mag_mul_small_add(&mut mag, mul as u32, add as u32);
        }
        Self::normalized(neg, mag)
    }

    fn normalized(neg: bool, mut mag: Vec<u32>) -> Self {
        while mag.last() == Some(&0) {
            mag.pop();
        }
        let neg = neg && !mag.is_empty();
        PyInt { neg, mag }
    }

    /// Whether this is zero.
    pub fn is_zero(&self) -> bool {
        self.mag.is_empty()
    }

    /// Whether this is below zero.
    pub fn is_negative(&self) -> bool {
        self.neg
    }

    /// Number of significant bits of the magnitude (0 for zero).
    pub fn bit_len(&self) -> u64 {
        mag_bit_len(&self.mag)
    }

    /// The value when it fits `i64` (numpy's int64 range).
    pub fn to_i64(&self) -> Option<i64> {
        if self.mag.len() > 2 {
            return None;
        }
        let u = self.low_u64();
        if self.neg {
            if u <= 1u64 << 63 {
                Some((u as i64).wrapping_neg())
            } else {
                None
            }
        } else if u < 1u64 << 63 {
            Some(u as i64)
        } else {
            None
        }
    }

    /// The value when it fits `u64` (numpy's uint64 range).
    pub fn to_u64(&self) -> Option<u64> {
        if self.neg || self.mag.len() > 2 {
            return None;
        }
        Some(self.low_u64())
    }

    fn low_u64(&self) -> u64 {
        let lo = u64::from(self.mag.first().copied().unwrap_or(0));
        let hi = u64::from(self.mag.get(1).copied().unwrap_or(0));
        lo | (hi << 32)
    }

    /// `-self`.
    pub fn neg(&self) -> Self {
        Self::normalized(!self.neg, self.mag.clone())
    }

    /// `self + other`, exact.
    pub fn add(&self, other: &Self) -> Self {
        if self.neg == other.neg {
            return Self::normalized(self.neg, mag_add(&self.mag, &other.mag));
        }
        match mag_cmp(&self.mag, &other.mag) {
            Ordering::Equal => Self::zero(),
            Ordering::Greater => Self::normalized(self.neg, mag_sub(&self.mag, &other.mag)),
            Ordering::Less => Self::normalized(other.neg, mag_sub(&other.mag, &self.mag)),
        }
    }

    /// `self - other`, exact.
    pub fn sub(&self, other: &Self) -> Self {
        self.add(&other.neg())
    }

    /// `self * other`, exact.
    pub fn mul(&self, other: &Self) -> Self {
        Self::normalized(self.neg != other.neg, mag_mul(&self.mag, &other.mag))
    }

    /// `float(self)`: correctly rounded (ties to even); `None` where Python raises
    /// `OverflowError` ("int too large to convert to float").
    pub fn to_f64(&self) -> Option<f64> {
        let v = round_to_f64(&self.mag, 0)?;
        Some(if self.neg { -v } else { v })
    }

    /// The exact integer value of a finite, integral `f64` (`int(f)` for such an `f`).
    pub fn from_integral_f64(f: f64) -> Self {
        if !f.is_finite() || f == 0.0 {
            return Self::zero();
        }
        let bits = f.to_bits();
        let neg = (bits >> 63) != 0;
        let exp = ((bits >> 52) & 0x7ff) as i64;
        let frac = bits & ((1u64 << 52) - 1);
        let (mant, e2) = if exp == 0 {
            (frac, -1074)
        } else {
            (frac | (1u64 << 52), exp - 1075)
        };
        let mut mag = vec![(mant & 0xffff_ffff) as u32, (mant >> 32) as u32];
        if e2 >= 0 {
            mag = mag_shl(&mag, e2 as u64);
        } else {
            mag = mag_shr(&mag, (-e2) as u64);
        }
        Self::normalized(neg, mag)
    }

    /// Python's `int < float` family: exact comparison; `None` when `f` is NaN (every ordering
    /// comparison is then false).
    pub fn cmp_f64(&self, f: f64) -> Option<Ordering> {
        if f.is_nan() {
            return None;
        }
        if f == f64::INFINITY {
            return Some(Ordering::Less);
        }
        if f == f64::NEG_INFINITY {
            return Some(Ordering::Greater);
        }
        let t = f.trunc();
        match self.cmp(&Self::from_integral_f64(t)) {
            Ordering::Equal => {
                let frac = f - t;
                Some(if frac > 0.0 {
                    Ordering::Less
                } else if frac < 0.0 {
                    Ordering::Greater
                } else {
                    Ordering::Equal
                })
            }
            other => Some(other),
        }
    }

    /// `divmod` of magnitudes: `(|self| / |d|, |self| % |d|)`, both non-negative. `d` must not be 0.
    pub fn divmod_abs(&self, d: &Self) -> (Self, Self) {
        let (q, r) = mag_divmod(&self.mag, &d.mag);
        (Self::normalized(false, q), Self::normalized(false, r))
    }

    /// `str(self)`.
    pub fn to_decimal_string(&self) -> String {
        if self.is_zero() {
            return "0".to_string();
        }
        let mut mag = self.mag.clone();
        let mut chunks: Vec<u32> = Vec::new();
        while !mag.is_empty() {
            let rem = mag_div_small(&mut mag, 1_000_000_000);
            chunks.push(rem);
        }
        let mut s = String::new();
        if self.neg {
            s.push('-');
        }
        let mut it = chunks.iter().rev();
        if let Some(first) = it.next() {
            s.push_str(&first.to_string());
        }
        for c in it {
            s.push_str(&format!("{c:09}"));
        }
        s
    }
}

impl Ord for PyInt {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.neg, other.neg) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => mag_cmp(&self.mag, &other.mag),
            (true, true) => mag_cmp(&other.mag, &self.mag),
        }
    }
}

impl PartialOrd for PyInt {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// `n / d` as Python's true division of ints: correctly rounded (ties to even). `None` when the
/// result overflows (`OverflowError: integer division result too large for a float`); `d` must
/// not be zero.
pub fn ratio_to_f64(n: &PyInt, d: &PyInt) -> Option<f64> {
    let neg = n.neg != d.neg;
    if n.is_zero() {
        return Some(if neg { -0.0 } else { 0.0 });
    }
    let bn = mag_bit_len(&n.mag) as i64;
    let bd = mag_bit_len(&d.mag) as i64;
    // Scale so that the quotient has at least 56 significant bits, then fold the remainder into a
    // sticky bit: rounding that quotient once gives the correctly rounded ratio.
    let s = (56 + bd - bn).max(0);
    let scaled = mag_shl(&n.mag, s as u64);
    let (q, r) = mag_divmod(&scaled, &d.mag);
    let mut q2 = mag_shl(&q, 1);
    if r.iter().any(|&l| l != 0) {
        if q2.is_empty() {
            q2.push(1);
        } else {
            q2[0] |= 1;
        }
    }
    let v = round_to_f64(&q2, -s - 1)?;
    Some(if neg { -v } else { v })
}

/// `mag × 2^exp2` rounded to the nearest `f64` (ties to even, subnormals included); `None` on
/// overflow.
fn round_to_f64(mag: &[u32], exp2: i64) -> Option<f64> {
    let bl = mag_bit_len(mag) as i64;
    if bl == 0 {
        return Some(0.0);
    }
    // Number of low bits to drop: keep 53 significant bits, or fewer below the normal range.
    let drop = (bl - 53).max(-1074 - exp2);
    let (mut q, e) = if drop <= 0 {
        (mag_low_u64(mag), exp2)
    } else {
        let q = mag_low_u64(&mag_shr(mag, drop as u64));
        let half = mag_bit(mag, (drop - 1) as u64);
        let sticky = drop >= 2 && mag_any_below(mag, (drop - 1) as u64);
        let mut q = q;
        if half && (sticky || q & 1 == 1) {
            q += 1;
        }
        (q, exp2 + drop)
    };
    if q == 0 {
        return Some(0.0);
    }
    // q ≤ 2^53 here; normalise 2^53 back to 53 bits.
    let mut e = e;
    if q == 1u64 << 53 {
        q >>= 1;
        e += 1;
    }
    let top = 63 - i64::from(q.leading_zeros()) + e; // value in [2^top, 2^(top+1))
    if top > 1023 {
        return None;
    }
    Some(ldexp(q as f64, e))
}

/// `m × 2^e`, exact whenever the result is representable (multiplies by powers of two in steps
/// that stay in the normal range until the last).
fn ldexp(mut m: f64, mut e: i64) -> f64 {
    while e > 1000 {
        m *= 2f64.powi(1000);
        e -= 1000;
    }
    while e < -1000 {
        m *= 2f64.powi(-1000);
        e += 1000;
    }
    m * 2f64.powi(e as i32)
}

fn mag_bit_len(m: &[u32]) -> u64 {
    match m.last() {
        None => 0,
        Some(&top) => (m.len() as u64 - 1) * 32 + u64::from(32 - top.leading_zeros()),
    }
}

fn mag_bit(m: &[u32], i: u64) -> bool {
    let limb = (i / 32) as usize;
    limb < m.len() && (m[limb] >> (i % 32)) & 1 == 1
}

/// Whether any bit strictly below bit `i` is set.
fn mag_any_below(m: &[u32], i: u64) -> bool {
    let limb = (i / 32) as usize;
    let bit = i % 32;
    if m.iter().take(limb.min(m.len())).any(|&l| l != 0) {
        return true;
    }
    limb < m.len() && bit > 0 && (m[limb] & ((1u32 << bit) - 1)) != 0
}

fn mag_low_u64(m: &[u32]) -> u64 {
    let lo = u64::from(m.first().copied().unwrap_or(0));
    let hi = u64::from(m.get(1).copied().unwrap_or(0));
    lo | (hi << 32)
}

fn mag_cmp(a: &[u32], b: &[u32]) -> Ordering {
    if a.len() != b.len() {
        return a.len().cmp(&b.len());
    }
    for (x, y) in a.iter().rev().zip(b.iter().rev()) {
        if x != y {
            return x.cmp(y);
        }
    }
    Ordering::Equal
}

fn mag_add(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    let mut out = Vec::with_capacity(long.len() + 1);
    let mut carry = 0u64;
    for (i, &l) in long.iter().enumerate() {
        let s = u64::from(l) + u64::from(short.get(i).copied().unwrap_or(0)) + carry;
        out.push(s as u32);
        carry = s >> 32;
    }
    if carry > 0 {
        out.push(carry as u32);
    }
    out
}

/// `a - b` for `a ≥ b`.
fn mag_sub(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut out = Vec::with_capacity(a.len());
    let mut borrow = 0i64;
    for (i, &l) in a.iter().enumerate() {
        let mut d = i64::from(l) - i64::from(b.get(i).copied().unwrap_or(0)) - borrow;
        if d < 0 {
            d += 1 << 32;
            borrow = 1;
        } else {
            borrow = 0;
        }
        out.push(d as u32);
    }
    while out.last() == Some(&0) {
        out.pop();
    }
    out
}

fn mag_mul(a: &[u32], b: &[u32]) -> Vec<u32> {
    if a.is_empty() || b.is_empty() {
        return Vec::new();
    }
    let mut out = vec![0u32; a.len() + b.len()];
    for (i, &x) in a.iter().enumerate() {
        let mut carry = 0u64;
        for (j, &y) in b.iter().enumerate() {
            let t = u64::from(x) * u64::from(y) + u64::from(out[i + j]) + carry;
            out[i + j] = t as u32;
            carry = t >> 32;
        }
        let mut k = i + b.len();
        while carry > 0 {
            let t = u64::from(out[k]) + carry;
            out[k] = t as u32;
            carry = t >> 32;
            k += 1;
        }
    }
    while out.last() == Some(&0) {
        out.pop();
    }
    out
}

fn mag_mul_small_add(m: &mut Vec<u32>, mul: u32, add: u32) {
    let mut carry = u64::from(add);
    for l in m.iter_mut() {
        let t = u64::from(*l) * u64::from(mul) + carry;
        *l = t as u32;
        carry = t >> 32;
    }
    if carry > 0 {
        m.push(carry as u32);
    }
}

/// Divides in place by a small divisor, returns the remainder.
fn mag_div_small(m: &mut Vec<u32>, d: u32) -> u32 {
    let mut rem = 0u64;
    for l in m.iter_mut().rev() {
        let cur = (rem << 32) | u64::from(*l);
        *l = (cur / u64::from(d)) as u32;
        rem = cur % u64::from(d);
    }
    while m.last() == Some(&0) {
        m.pop();
    }
    rem as u32
}

fn mag_shl(m: &[u32], bits: u64) -> Vec<u32> {
    if m.is_empty() {
        return Vec::new();
    }
    let limbs = (bits / 32) as usize;
    let b = (bits % 32) as u32;
    let mut out = vec![0u32; limbs];
    if b == 0 {
        out.extend_from_slice(m);
    } else {
        let mut carry = 0u32;
        for &l in m {
            out.push((l << b) | carry);
            carry = l >> (32 - b);
        }
        if carry > 0 {
            out.push(carry);
        }
    }
    out
}

fn mag_shr(m: &[u32], bits: u64) -> Vec<u32> {
    let limbs = (bits / 32) as usize;
    if limbs >= m.len() {
        return Vec::new();
    }
    let b = (bits % 32) as u32;
    let src = &m[limbs..];
    let mut out = Vec::with_capacity(src.len());
    for (i, &l) in src.iter().enumerate() {
        let hi = if b == 0 {
            0
        } else {
            src.get(i + 1).map_or(0, |&h| h << (32 - b))
        };
        out.push((l >> b) | hi);
    }
    while out.last() == Some(&0) {
        out.pop();
    }
    out
}

/// Long division of magnitudes (`b` non-zero): shift-and-subtract, quadratic but the operands
/// are small here.
fn mag_divmod(a: &[u32], b: &[u32]) -> (Vec<u32>, Vec<u32>) {
    if b.is_empty() {
        return (Vec::new(), a.to_vec());
    }
    if mag_cmp(a, b) == Ordering::Less {
        return (Vec::new(), a.to_vec());
    }
    if b.len() == 1 {
        let mut q = a.to_vec();
        let r = mag_div_small(&mut q, b[0]);
        let r = if r == 0 { Vec::new() } else { vec![r] };
        return (q, r);
    }
    let n = mag_bit_len(a);
    let mut q = vec![0u32; a.len()];
    let mut r: Vec<u32> = Vec::new();
    for i in (0..n).rev() {
        r = mag_shl(&r, 1);
        if mag_bit(a, i) {
            if r.is_empty() {
                r.push(1);
            } else {
                r[0] |= 1;
            }
        }
        if mag_cmp(&r, b) != Ordering::Less {
            r = mag_sub(&r, b);
            q[(i / 32) as usize] |= 1 << (i % 32);
        }
    }
    while q.last() == Some(&0) {
        q.pop();
    }
    (q, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(s: &str) -> PyInt {
        match s.strip_prefix('-') {
            Some(d) => PyInt::from_decimal_digits(d, true),
            None => PyInt::from_decimal_digits(s, false),
        }
    }

    #[test]
    fn decimal_round_trip_and_arithmetic() {
        let a = int("123456789012345678901234567890");
        assert_eq!(a.to_decimal_string(), "123456789012345678901234567890");
        let b = int("-987654321098765432109876543210");
        assert_eq!(
            a.add(&b).to_decimal_string(),
            "-864197532086419753208641975320"
        );
        assert_eq!(a.sub(&a), PyInt::zero());
        assert_eq!(
            int("4294967296")
                .mul(&int("4294967296"))
                .to_decimal_string(),
            "18446744073709551616"
        );
        assert_eq!(int("-0"), PyInt::zero());
    }

    #[test]
    fn float_conversion_is_correctly_rounded() {
        assert_eq!(int("9007199254740993").to_f64(), Some(9007199254740992.0)); // tie -> even
        assert_eq!(int("9007199254740995").to_f64(), Some(9007199254740996.0));
        assert_eq!(int(&format!("1{}", "0".repeat(308))).to_f64(), Some(1e308));
        assert_eq!(int(&format!("1{}", "0".repeat(309))).to_f64(), None);
        assert_eq!(ratio_to_f64(&int("1"), &int("10")), Some(0.1));
        assert_eq!(ratio_to_f64(&int("1"), &int("3")), Some(1.0 / 3.0));
        assert_eq!(ratio_to_f64(&int("500"), &int("1000")), Some(0.5));
        assert_eq!(
            ratio_to_f64(&int("1"), &int(&format!("1{}", "0".repeat(320)))),
            Some(1e-320)
        );
    }

    #[test]
    fn exact_comparison_with_floats() {
        let big = int("9007199254740993");
        assert_eq!(big.cmp_f64(9007199254740992.0), Some(Ordering::Greater));
        assert_eq!(int("3").cmp_f64(3.5), Some(Ordering::Less));
        assert_eq!(int("-3").cmp_f64(-3.5), Some(Ordering::Greater));
        assert_eq!(int("5").cmp_f64(f64::NAN), None);
        assert_eq!(int("5").cmp_f64(5.0), Some(Ordering::Equal));
        assert_eq!(int("9223372036854775808").to_i64(), None);
        assert_eq!(int("-9223372036854775808").to_i64(), Some(i64::MIN));
        assert_eq!(int("18446744073709551615").to_u64(), Some(u64::MAX));
    }
}
