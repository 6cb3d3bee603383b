//! Python operator semantics on parsed JSON values: the arithmetic and comparisons the released
//! code applies to coordinates straight from `json.loads` (without numpy).
//!
//! `bool` is an `int` (True is 1); `int` arithmetic is exact; `int` meets `float` by converting
//! the int with `float()` (which raises `OverflowError` past `f64::MAX`), except comparisons,
//! which are exact; `float ** 2` raises `OverflowError` when a finite base overflows (Python's
//! `float_pow`), while `float + float` quietly gives `inf`. Strings, `None`, lists and dicts raise
//! `TypeError` in arithmetic; in comparisons `str`/`str` and `list`/`list` are ordered,
//! everything else mixed raises.

use std::cmp::Ordering;

use super::pyint::PyInt;
use super::pyjson::Value;

/// The released code raised inside a `try` (which exception does not matter there: every
/// `except` catches `Exception`). Carries the Python class for diagnostics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raised(pub &'static str);

pub(crate) const TYPE_ERROR: Raised = Raised("TypeError");
pub(crate) const OVERFLOW: Raised = Raised("OverflowError");

/// A Python number.
#[derive(Clone, Debug, PartialEq)]
pub enum Num {
    /// `int` (and `bool`).
    Int(PyInt),
    /// `float`.
    Float(f64),
}

impl Num {
    /// A JSON value as a Python number; `None` for anything else.
    pub fn of(v: &Value) -> Option<Num> {
        match v {
            Value::Bool(b) => Some(Num::Int(PyInt::from_i64(i64::from(*b)))),
            Value::Int(i) => Some(Num::Int(i.clone())),
            Value::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    /// `float(self)`.
    pub fn to_f64(&self) -> Result<f64, Raised> {
        match self {
            Num::Int(i) => i.to_f64().ok_or(OVERFLOW),
            Num::Float(f) => Ok(*f),
        }
    }

    /// `self - other`.
    pub fn sub(&self, other: &Num) -> Result<Num, Raised> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Ok(Num::Int(a.sub(b))),
            _ => Ok(Num::Float(self.to_f64()? - other.to_f64()?)),
        }
    }

    /// `self + other`.
    pub fn add(&self, other: &Num) -> Result<Num, Raised> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Ok(Num::Int(a.add(b))),
            _ => Ok(Num::Float(self.to_f64()? + other.to_f64()?)),
        }
    }

    /// `self ** 2`.
    pub fn square(&self) -> Result<Num, Raised> {
        match self {
            Num::Int(a) => Ok(Num::Int(a.mul(a))),
            Num::Float(f) => {
                let r = f * f;
                if r.is_infinite() && f.is_finite() {
                    Err(Raised("OverflowError"))
                } else {
                    Ok(Num::Float(r))
                }
            }
        }
    }

    /// `math.sqrt(self)`.
    pub fn sqrt(&self) -> Result<f64, Raised> {
        let v = self.to_f64()?;
        if v < 0.0 {
            return Err(Raised("ValueError"));
        }
        Ok(v.sqrt())
    }

    /// Exact ordering (`None` when a NaN is involved).
    pub fn cmp(&self, other: &Num) -> Option<Ordering> {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => Some(a.cmp(b)),
            (Num::Int(a), Num::Float(f)) => a.cmp_f64(*f),
            (Num::Float(f), Num::Int(b)) => b.cmp_f64(*f).map(Ordering::reverse),
            (Num::Float(a), Num::Float(b)) => a.partial_cmp(b),
        }
    }
}

/// An ordering comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
}

impl CmpOp {
    fn holds(self, o: Option<Ordering>) -> bool {
        match (self, o) {
            (_, None) => false,
            (CmpOp::Lt, Some(o)) => o == Ordering::Less,
            (CmpOp::Le, Some(o)) => o != Ordering::Greater,
            (CmpOp::Gt, Some(o)) => o == Ordering::Greater,
        }
    }
}

/// `a == b` as Python (never raises).
pub fn py_eq(a: &Value, b: &Value) -> bool {
    if let (Some(x), Some(y)) = (Num::of(a), Num::of(b)) {
        return x.cmp(&y) == Some(Ordering::Equal);
    }
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        (Value::Dict(x), Value::Dict(y)) => {
            fn keys(d: &[(String, Value)]) -> Vec<&String> {
                let mut k: Vec<&String> = d.iter().map(|(k, _)| k).collect();
                k.sort();
                k.dedup();
                k
            }
            let (kx, ky) = (keys(x), keys(y));
            kx == ky
                && kx.iter().all(|k| match (a.get(k), b.get(k)) {
                    (Some(p), Some(q)) => py_eq(p, q),
                    _ => false,
                })
        }
        _ => false,
    }
}

/// `a OP b` as Python: numbers exactly, `str` by code point, `list` lexicographically (first
/// unequal element decides, else the lengths); any other pairing raises `TypeError`.
pub fn py_compare(a: &Value, op: CmpOp, b: &Value) -> Result<bool, Raised> {
    if let (Some(x), Some(y)) = (Num::of(a), Num::of(b)) {
        return Ok(op.holds(x.cmp(&y)));
    }
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => Ok(op.holds(Some(x.as_str().cmp(y.as_str())))),
        (Value::List(x), Value::List(y)) => {
            for (p, q) in x.iter().zip(y) {
                if !py_eq(p, q) {
                    return py_compare(p, op, q);
                }
            }
            Ok(op.holds(Some(x.len().cmp(&y.len()))))
        }
        _ => Err(TYPE_ERROR),
    }
}

/// `v OP f` for a JSON value against a Python float (exact for ints).
pub fn py_compare_f64(v: &Value, op: CmpOp, f: f64) -> Result<bool, Raised> {
    let n = Num::of(v).ok_or(TYPE_ERROR)?;
    Ok(op.holds(n.cmp(&Num::Float(f))))
}

/// Python's builtin `min(a, b, c)` on floats: keeps the first unless a later one is strictly
/// smaller (so a NaN in front stays, a NaN later is skipped).
pub fn py_min3(a: f64, b: f64, c: f64) -> f64 {
    let mut m = a;
    if b < m {
        m = b;
    }
    if c < m {
        m = c;
    }
    m
}

/// Python's builtin `max(a, b)` on floats: keeps `a` unless `b` is strictly greater.
pub fn py_max2(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_min_max_nan_order() {
        assert!(py_min3(f64::NAN, 1.0, 2.0).is_nan());
        assert_eq!(py_min3(1.0, f64::NAN, 0.5), 0.5);
        assert!(py_max2(f64::NAN, 3.0).is_nan());
        assert_eq!(py_max2(3.0, f64::NAN), 3.0);
    }

    #[test]
    fn comparisons() {
        let i = |v: i64| Value::Int(PyInt::from_i64(v));
        assert_eq!(py_compare(&i(1), CmpOp::Le, &Value::Float(1.0)), Ok(true));
        assert_eq!(py_compare(&Value::Bool(true), CmpOp::Lt, &i(2)), Ok(true));
        assert_eq!(
            py_compare(&Value::Str("a".into()), CmpOp::Lt, &Value::Str("b".into())),
            Ok(true)
        );
        assert_eq!(
            py_compare(&Value::Str("a".into()), CmpOp::Lt, &i(1)),
            Err(TYPE_ERROR)
        );
        assert_eq!(
            py_compare(&Value::Float(f64::NAN), CmpOp::Le, &i(1)),
            Ok(false)
        );
        let l = |v: Vec<Value>| Value::List(v);
        assert_eq!(
            py_compare(&l(vec![i(1), i(2)]), CmpOp::Lt, &l(vec![i(1), i(3)])),
            Ok(true)
        );
        assert_eq!(
            py_compare(&l(vec![i(1)]), CmpOp::Lt, &l(vec![i(1), i(0)])),
            Ok(true)
        );
        assert_eq!(
            py_compare(&l(vec![i(1)]), CmpOp::Lt, &l(vec![Value::Str("x".into())])),
            Err(TYPE_ERROR)
        );
    }

    #[test]
    fn float_square_overflows_like_python() {
        assert_eq!(Num::Float(1e200).square(), Err(Raised("OverflowError")));
        assert_eq!(
            Num::Float(f64::INFINITY).square(),
            Ok(Num::Float(f64::INFINITY))
        );
    }
}
