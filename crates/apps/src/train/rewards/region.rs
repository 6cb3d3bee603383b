//! Region tests: the inclusive box of `fsd_free_point` and the even-odd polygon of
//! `point_rec` / `grounding_rec`.
//!
//! Box: `x1 <= x <= x2 and y1 <= y <= y2` as Python evaluates it — chained comparisons that stop
//! at the first false one, exact int/float comparisons, and a `TypeError` (the whole in-box term
//! becomes 0) as soon as a compared pair is not orderable (a string coordinate against a number).
//!
//! Polygon: the released ray-casting loop over `np.array(segmentation)`, closed with the first
//! vertex when the last differs (`np.array_equal`, so a NaN vertex always gets closed). An edge
//! counts when `(yi > y) != (yj > y)` and `x < xi + (xj - xi)(y - yi)/(yj - yi)`. Consequences
//! kept: left and bottom edges count as inside, right and top edges as outside; vertices follow
//! the same half-open rule; self-intersecting polygons use even-odd (a pentagram's centre is
//! outside); horizontal edges never divide by zero. Arithmetic follows the array's dtype
//! (int64 differences and products wrap; the division is float64) and numpy-scalar-vs-Python
//! comparisons (int64 against an int exactly, against a float in float64; a Python int too large
//! for float64 against a float64 vertex raises). The x coordinate is only touched for edges that
//! straddle y, so a string x is harmless unless some edge straddles.
//!
//! Not reproduced: polygons whose `np.array` is an object or str array (vertices with ints beyond
//! uint64, strings, `None`): numpy would compare Python objects element by element; here the
//! in-mask term is 0 as for every other raise.

use std::cmp::Ordering;

use super::numpy::{self, DType, Scalar};
use super::pyint::PyInt;
use super::pyjson::Value;
use super::pyops::{py_compare, CmpOp, Num, Raised, OVERFLOW, TYPE_ERROR};

/// `bbox[0] <= x <= bbox[2] and bbox[1] <= y <= bbox[3]` with Python's short-circuit.
pub fn in_box(bbox: &[Value], x: &Value, y: &Value) -> Result<bool, Raised> {
    if bbox.len() != 4 {
        return Err(Raised("IndexError"));
    }
    Ok(py_compare(&bbox[0], CmpOp::Le, x)?
        && py_compare(x, CmpOp::Le, &bbox[2])?
        && py_compare(&bbox[1], CmpOp::Le, y)?
        && py_compare(y, CmpOp::Le, &bbox[3])?)
}

/// A numpy scalar compared with a Python value (`scalar > v`).
fn scalar_gt(s: Scalar, v: &Value) -> Result<bool, Raised> {
    let n = Num::of(v).ok_or(TYPE_ERROR)?;
    let ord: Option<Ordering> = match (s, &n) {
        (Scalar::F64(a), Num::Int(i)) => a.partial_cmp(&i.to_f64().ok_or(OVERFLOW)?),
        (Scalar::F64(a), Num::Float(f)) => a.partial_cmp(f),
        (s, Num::Float(f)) => s.as_f64().partial_cmp(f),
        (Scalar::I64(a), Num::Int(i)) => Some(PyInt::from_i64(a).cmp(i)),
        (Scalar::U64(a), Num::Int(i)) => Some(PyInt::from_i128(i128::from(a)).cmp(i)),
        (Scalar::Bool(a), Num::Int(i)) => Some(PyInt::from_i64(i64::from(a)).cmp(i)),
    };
    Ok(ord == Some(Ordering::Greater))
}

/// A value in numpy arithmetic: integer (int64/uint64 wrapping) or float64.
#[derive(Clone, Copy)]
enum NpNum {
    Int(i128),
    F(f64),
}

/// `v - s` for a Python value and a numpy scalar of the polygon's dtype.
fn py_minus_scalar(v: &Value, s: Scalar, dtype: DType) -> Result<NpNum, Raised> {
    let n = Num::of(v).ok_or(TYPE_ERROR)?;
    match (dtype, n) {
        (DType::Float64, n) => Ok(NpNum::F(n.to_f64()? - s.as_f64())),
        (_, Num::Float(f)) => Ok(NpNum::F(f - s.as_f64())),
        (DType::UInt64, Num::Int(i)) => {
            let a = i.to_u64().ok_or(OVERFLOW)?;
            Ok(NpNum::Int(i128::from(a.wrapping_sub(scalar_u64(s)))))
        }
        (_, Num::Int(i)) => {
            let a = i.to_i64().ok_or(OVERFLOW)?;
            Ok(NpNum::Int(i128::from(a.wrapping_sub(scalar_i64(s)))))
        }
    }
}

fn scalar_i64(s: Scalar) -> i64 {
    match s {
        Scalar::I64(v) => v,
        Scalar::U64(v) => v as i64,
        Scalar::Bool(b) => i64::from(b),
        Scalar::F64(v) => v as i64,
    }
}

fn scalar_u64(s: Scalar) -> u64 {
    match s {
        Scalar::U64(v) => v,
        Scalar::I64(v) => v as u64,
        Scalar::Bool(b) => u64::from(b),
        Scalar::F64(v) => v as u64,
    }
}

/// `a - b` of two polygon scalars (same dtype).
fn scalar_sub(a: Scalar, b: Scalar, dtype: DType) -> Result<NpNum, Raised> {
    match dtype {
        DType::Bool => Err(TYPE_ERROR),
        DType::Float64 => Ok(NpNum::F(a.as_f64() - b.as_f64())),
        DType::Int64 => Ok(NpNum::Int(i128::from(
            scalar_i64(a).wrapping_sub(scalar_i64(b)),
        ))),
        DType::UInt64 => Ok(NpNum::Int(i128::from(
            scalar_u64(a).wrapping_sub(scalar_u64(b)),
        ))),
    }
}

fn np_f64(v: NpNum) -> f64 {
    match v {
        NpNum::Int(i) => i as f64,
        NpNum::F(f) => f,
    }
}

fn np_mul(a: NpNum, b: NpNum, dtype: DType) -> NpNum {
    match (a, b) {
        (NpNum::Int(x), NpNum::Int(y)) => match dtype {
            DType::UInt64 => NpNum::Int(i128::from((x as u64).wrapping_mul(y as u64))),
            _ => NpNum::Int(i128::from((x as i64).wrapping_mul(y as i64))),
        },
        _ => NpNum::F(np_f64(a) * np_f64(b)),
    }
}

/// How many of `points` (2-element lists) the released `points_in_polygon_batch` puts inside
/// `polygon` (the parsed `segmentation`). `Err` where the released code raises.
pub fn count_in_polygon(points: &[Value], polygon: &Value) -> Result<usize, Raised> {
    let poly = numpy::array2(polygon)?;
    let dtype = poly.dtype;
    // Close the ring unless the first and last rows are equal (NaN never equals itself).
    let mut rows: Vec<Vec<Scalar>> = (0..poly.rows)
        .map(|r| (0..poly.cols).map(|c| poly.at(r, c)).collect())
        .collect();
    let eq = |a: &[Scalar], b: &[Scalar]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| x.as_f64() == y.as_f64() && x == y)
    };
    if !eq(&rows[0], &rows[rows.len() - 1]) {
        rows.push(rows[0].clone());
    }
    let mut inside_count = 0;
    for p in points {
        let [x, y] = match p.as_list() {
            Some([x, y]) => [x, y],
            _ => return Err(Raised("ValueError")),
        };
        if poly.cols < 2 {
            return Err(Raised("IndexError"));
        }
        let mut inside = false;
        let mut j = rows.len() - 1;
        for i in 0..rows.len() {
            let (xi, yi, xj, yj) = (rows[i][0], rows[i][1], rows[j][0], rows[j][1]);
            if scalar_gt(yi, y)? != scalar_gt(yj, y)? {
                let dx = scalar_sub(xj, xi, dtype)?;
                let dy = py_minus_scalar(y, yi, dtype)?;
                let prod = np_mul(dx, dy, dtype);
                let den = scalar_sub(yj, yi, dtype)?;
                let xint = xi.as_f64() + np_f64(prod) / np_f64(den);
                let xn = Num::of(x).ok_or(TYPE_ERROR)?;
                if xn.to_f64()? < xint {
                    inside = !inside;
                }
            }
            j = i;
        }
        if inside {
            inside_count += 1;
        }
    }
    Ok(inside_count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::rewards::pyjson::loads;

    fn count(pts: &str, poly: &str) -> Result<usize, Raised> {
        let p = loads(pts).unwrap();
        count_in_polygon(p.as_list().unwrap(), &loads(poly).unwrap())
    }

    #[test]
    fn square_half_open_edges() {
        let sq = "[[100, 100], [200, 100], [200, 200], [100, 200]]";
        assert_eq!(count("[[150, 150]]", sq), Ok(1));
        assert_eq!(count("[[100, 150]]", sq), Ok(1)); // left edge: inside
        assert_eq!(count("[[200, 150]]", sq), Ok(0)); // right edge: outside
        assert_eq!(count("[[150, 100]]", sq), Ok(1)); // bottom (smaller y): inside
        assert_eq!(count("[[150, 200]]", sq), Ok(0)); // top: outside
        assert_eq!(count("[[250, 150], [150, 150.5]]", sq), Ok(1));
        assert_eq!(count("[[\"x\", 500]]", sq), Ok(0)); // x never compared
        assert!(count("[[\"x\", 150]]", sq).is_err());
    }

    #[test]
    fn pentagram_centre_is_outside() {
        let star = "[[200, 50], [250, 350], [50, 150], [350, 150], [150, 350]]";
        assert_eq!(count("[[200, 220]]", star), Ok(0));
        assert_eq!(count("[[200, 100]]", star), Ok(1));
    }

    #[test]
    fn box_is_inclusive_and_short_circuits() {
        let b = loads("[100, 100, 200, 200]").unwrap();
        let b = b.as_list().unwrap();
        let v = |s: &str| loads(s).unwrap();
        assert_eq!(in_box(b, &v("100"), &v("200.0")), Ok(true));
        assert_eq!(in_box(b, &v("99.999"), &v("150")), Ok(false));
        assert_eq!(in_box(b, &v("50"), &v("\"x\"")), Ok(false));
        assert!(in_box(b, &v("150"), &v("\"x\"")).is_err());
    }
}
