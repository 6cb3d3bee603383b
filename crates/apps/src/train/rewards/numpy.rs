//! What numpy 2.x does with the JSON lists the released code hands it (`np.array(points)`,
//! `np.interp`, `np.linspace`), as far as the rewards can observe it.
//!
//! `np.array` of Python scalars picks one dtype for the whole nested list: all bools → `bool`;
//! ints (with bools) that fit int64 → `int64`; ints in [2⁶³, 2⁶⁴) (with bools) → `uint64`; int64
//! and uint64 values together → `float64`; any float → `float64`; an int outside
//! [−2⁶³, 2⁶⁴), `None` or a dict → `object`; a string → a `str` array (ragged rows raise
//! `ValueError`). Integer arrays then do **wrapping** arithmetic: `(2**32)**2` is 0 in int64,
//! which the released point-distance reward happily scores as a perfect hit. `bool - bool` raises
//! `TypeError`. Object and str arrays are not modelled: every use the rewards make of them either
//! raises in numpy too (the distance's `np.sqrt` of an object array, any arithmetic on a str
//! array) or is reported as raised here (see `region` for the one place that differs).

use super::pyjson::Value;
use super::pyops::Raised;

/// A numeric dtype numpy can pick for a list of JSON scalars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// `bool`
    Bool,
    /// `int64`
    Int64,
    /// `uint64`
    UInt64,
    /// `float64`
    Float64,
}

/// One element of a numeric array, always of the array's dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// `np.bool`
    Bool(bool),
    /// `np.int64`
    I64(i64),
    /// `np.uint64`
    U64(u64),
    /// `np.float64`
    F64(f64),
}

impl Scalar {
    /// The value as float64 (numpy's cast: correctly rounded).
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => f64::from(u8::from(b)),
            Scalar::I64(v) => v as f64,
            Scalar::U64(v) => v as f64,
            Scalar::F64(v) => v,
        }
    }

    /// Casts to `dtype` (only ever widening within what numpy's promotion does here).
    fn cast(self, dtype: DType) -> Scalar {
        match dtype {
            DType::Bool => self,
            DType::Int64 => match self {
                Scalar::Bool(b) => Scalar::I64(i64::from(b)),
                other => other,
            },
            DType::UInt64 => match self {
                Scalar::Bool(b) => Scalar::U64(u64::from(b)),
                other => other,
            },
            DType::Float64 => Scalar::F64(self.as_f64()),
        }
    }
}

/// A 2-D numeric array (row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct Array2 {
    /// The dtype numpy picked.
    pub dtype: DType,
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// `rows * cols` elements, all of `dtype`.
    pub data: Vec<Scalar>,
}

impl Array2 {
    /// Element `[r, c]`.
    pub fn at(&self, r: usize, c: usize) -> Scalar {
        self.data[r * self.cols + c]
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    I64,
    U64,
    F64,
}

fn kind_of(v: &Value) -> Result<Kind, Raised> {
    match v {
        Value::Bool(_) => Ok(Kind::Bool),
        Value::Float(_) => Ok(Kind::F64),
        Value::Int(i) => {
            if i.to_i64().is_some() {
                Ok(Kind::I64)
            } else if i.to_u64().is_some() {
                Ok(Kind::U64)
            } else {
                Err(Raised("object array"))
            }
        }
        Value::Str(_) => Err(Raised("str array")),
        Value::Null | Value::Dict(_) => Err(Raised("object array")),
        Value::List(_) => Err(Raised("ValueError")),
    }
}

/// numpy's dtype discovery over a set of element kinds.
fn discover(kinds: impl IntoIterator<Item = Kind>) -> DType {
    let (mut b, mut i, mut u, mut f) = (false, false, false, false);
    for k in kinds {
        match k {
            Kind::Bool => b = true,
            Kind::I64 => i = true,
            Kind::U64 => u = true,
            Kind::F64 => f = true,
        }
    }
    if f || (i && u) {
        DType::Float64
    } else if u {
        DType::UInt64
    } else if i {
        DType::Int64
    } else if b {
        DType::Bool
    } else {
        DType::Float64
    }
}

fn scalar_of(v: &Value, dtype: DType) -> Scalar {
    let s = match v {
        Value::Bool(b) => Scalar::Bool(*b),
        Value::Float(f) => Scalar::F64(*f),
        Value::Int(i) => match i.to_i64() {
            Some(x) => Scalar::I64(x),
            None => Scalar::U64(i.to_u64().unwrap_or(0)),
        },
        _ => Scalar::F64(f64::NAN),
    };
    s.cast(dtype)
}

/// `np.array(v)` when that is a 2-D numeric array: `v` is a non-empty list of equally long lists
/// of Python numbers. Anything else is reported as raised (ragged rows, nesting beyond 2-D,
/// non-list rows, or an object / str dtype); the callers only reach this where that is what
/// numpy's next operation does.
pub fn array2(v: &Value) -> Result<Array2, Raised> {
    let rows = v.as_list().ok_or(Raised("IndexError"))?;
    if rows.is_empty() {
        return Err(Raised("IndexError"));
    }
    let mut cols = None;
    let mut kinds = Vec::new();
    for r in rows {
        let r = r.as_list().ok_or(Raised("IndexError"))?;
        if *cols.get_or_insert(r.len()) != r.len() {
            return Err(Raised("ValueError"));
        }
        for e in r {
            kinds.push(kind_of(e)?);
        }
    }
    let cols = cols.unwrap_or(0);
    let dtype = discover(kinds);
    let mut data = Vec::with_capacity(rows.len() * cols);
    for r in rows {
        for e in r.as_list().unwrap_or(&[]) {
            data.push(scalar_of(e, dtype));
        }
    }
    Ok(Array2 {
        dtype,
        rows: rows.len(),
        cols,
        data,
    })
}

/// `np.array(v)` of a flat list of scalars (used for `np.max([a, b])`).
pub fn array1(v: &[Value]) -> Result<(DType, Vec<Scalar>), Raised> {
    let kinds = v.iter().map(kind_of).collect::<Result<Vec<_>, _>>()?;
    let dtype = discover(kinds);
    Ok((dtype, v.iter().map(|e| scalar_of(e, dtype)).collect()))
}

/// The dtype of `a - b` for two arrays (numpy's promotion); `bool - bool` raises.
pub fn sub_dtype(a: DType, b: DType) -> Result<DType, Raised> {
    use DType::*;
    Ok(match (a, b) {
        (Bool, Bool) => return Err(Raised("TypeError")),
        (Float64, _) | (_, Float64) => Float64,
        (Int64, UInt64) | (UInt64, Int64) => Float64,
        (UInt64, _) | (_, UInt64) => UInt64,
        _ => Int64,
    })
}

/// `np.linspace(0, 1, n)` (n ≥ 1): `i * (1/(n-1))`, the last forced to exactly 1.
pub fn linspace01(n: usize) -> Vec<f64> {
    if n <= 1 {
        return vec![0.0; n];
    }
    let step = 1.0 / (n - 1) as f64;
    let mut y: Vec<f64> = (0..n).map(|i| i as f64 * step + 0.0).collect();
    y[n - 1] = 1.0;
    y
}

/// `np.interp(x, xp, fp)` for increasing `xp` (numpy's C loop, including its retry from the right
/// end when the slope formula gives NaN).
pub fn interp(x: &[f64], xp: &[f64], fp: &[f64]) -> Vec<f64> {
    let n = xp.len();
    let (left, right) = (fp[0], fp[n - 1]);
    x.iter()
        .map(|&xv| {
            if n == 1 {
                return if xv < xp[0] {
                    left
                } else if xv > xp[0] {
                    right
                } else {
                    fp[0]
                };
            }
            if xv.is_nan() {
                return xv;
            }
            if xv < xp[0] {
                return left;
            }
            if xv > xp[n - 1] {
                return right;
            }
            let j = xp.partition_point(|&p| p <= xv).saturating_sub(1);
            if j == n - 1 || xp[j] == xv {
                return fp[j];
            }
            let slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
            let mut r = slope * (xv - xp[j]) + fp[j];
            if r.is_nan() {
                r = slope * (xv - xp[j + 1]) + fp[j + 1];
                if r.is_nan() && fp[j] == fp[j + 1] {
                    r = fp[j];
                }
            }
            r
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::rewards::pyjson::loads;

    fn dt(s: &str) -> Result<DType, Raised> {
        array2(&loads(s).unwrap()).map(|a| a.dtype)
    }

    #[test]
    fn dtype_discovery_matches_numpy() {
        assert_eq!(dt("[[1, 2]]"), Ok(DType::Int64));
        assert_eq!(dt("[[true, false]]"), Ok(DType::Bool));
        assert_eq!(dt("[[true, 2]]"), Ok(DType::Int64));
        assert_eq!(dt("[[1, 2.5]]"), Ok(DType::Float64));
        assert_eq!(
            dt("[[9223372036854775808, 9223372036854775808]]"),
            Ok(DType::UInt64)
        );
        assert_eq!(dt("[[9223372036854775808, 1]]"), Ok(DType::Float64));
        assert_eq!(dt("[[true, 9223372036854775808]]"), Ok(DType::UInt64));
        assert!(dt("[[18446744073709551616, 1]]").is_err());
        assert!(dt("[[1, 2], [3]]").is_err());
        assert!(dt("[[1, \"a\"]]").is_err());
    }

    #[test]
    fn linspace_and_interp() {
        assert_eq!(linspace01(1), vec![0.0]);
        assert_eq!(linspace01(3), vec![0.0, 0.5, 1.0]);
        let xp = linspace01(3);
        assert_eq!(
            interp(&linspace01(5), &xp, &[0.0, 10.0, 30.0]),
            vec![0.0, 5.0, 10.0, 20.0, 30.0]
        );
        assert_eq!(
            interp(&[0.0, 0.5, 1.0], &[0.0], &[7.0]),
            vec![7.0, 7.0, 7.0]
        );
    }
}
