//! `3d_position` (Open6DOR): predicted pixels plus depths back-projected with the released,
//! hard-coded camera, then judged against the ground-truth objects by a direction rule.
//!
//! Camera (kept exactly, whatever the real image size): principal point (360, 240) of a 720×480
//! image, `fu = 1.1547`, `fv = 0.7698`, so `X = (x − 360)/720 · d · fu`, `Y = (y − 240)/480 · d · fv`,
//! `Z = d` with `d = depth/1000` (metres from millimetres), then `world = M · [X, Y, Z, 1]` with
//! `M = [[−1, 0, 0, 0.5], [0, 0.70710678, −0.70710678, 0.7], [0, −0.70710678, −0.70710678, 1]]`
//! (the released code multiplies the row vector by `M.T`; every product is summed, so
//! `0 · inf = NaN` reaches every coordinate as in numpy).
//!
//! Rules (object = first ground-truth object, target = the back-projected point):
//! `left`: object.y > target.y; `right`: object.y < target.y; `front`: object.x < target.x;
//! `behind`: object.x > target.x; `top`: object.z <= target.z;
//! `between` (objects 0 and 1): min.x < target.x < max.x **or** min.y < target.**x** < max.y —
//! the released typo (target x against the y range) is kept;
//! `center` (all objects): min.x < target.x < max.x and min.y < target.y < max.y;
//! anything else — including `back`, which `evaluate_posi` knows but the caller never passes
//! on — scores 0. Comparisons are Python's (exact for int coordinates, false with NaN);
//! `between`/`center` take the max/min through numpy (NaN propagates).
//!
//! The per-point successes are summed and divided by the number of points; when a later point
//! raises (an `OverflowError` from a huge coordinate or depth, a missing object), the released
//! `except` keeps the **undivided partial sum** — kept. No points at all divides by zero:
//! reward 0.

use super::numpy::{self, DType, Scalar};
use super::pyint::{ratio_to_f64, PyInt};
use super::pyjson::{loads, Value};
use super::pyops::{py_compare_f64, CmpOp, Num, Raised, OVERFLOW, TYPE_ERROR};
use super::pystr::{first_depth_block, first_point_block};

/// The released view matrix's entry: 1/√2 truncated to 8 decimals (kept: the released value, not
/// `FRAC_1_SQRT_2`).
#[allow(clippy::approx_constant)]
const S: f64 = 0.70710678;

/// The released `pixel_to_world(x, y, dep)`.
pub fn pixel_to_world(x: f64, y: f64, dep: f64) -> [f64; 3] {
    let xc = (x - 360.0) / 720.0 * dep * 1.1547;
    let yc = (y - 240.0) / 480.0 * dep * 0.7698;
    let p = [xc, yc, dep, 1.0];
    let m = [[-1.0, 0.0, 0.0, 0.5], [0.0, S, -S, 0.7], [0.0, -S, -S, 1.0]];
    let row = |r: [f64; 4]| ((p[0] * r[0] + p[1] * r[1]) + p[2] * r[2]) + p[3] * r[3];
    [row(m[0]), row(m[1]), row(m[2])]
}

/// The released `embodied_r1_3d_point_format_reward`: both `<point>[[x, y], …]</point>` and
/// `<depth>[d, …]</depth>` present, JSON lists of numbers (bools count), of equal length.
pub fn format_reward(s: &str) -> f64 {
    let ok = || -> Option<()> {
        let pts = loads(first_point_block(s)?).ok()?;
        let deps_src = first_depth_block(s)?;
        let pts = pts.as_list()?;
        for p in pts {
            match p.as_list() {
                Some([x, y]) if x.is_number() && y.is_number() => {}
                _ => return None,
            }
        }
        let deps = loads(deps_src).ok()?;
        let deps = deps.as_list()?;
        (deps.iter().all(Value::is_number) && deps.len() == pts.len()).then_some(())
    };
    // The released function checks for the <depth> tag before parsing either block.
    if first_point_block(s).is_none() || first_depth_block(s).is_none() {
        return 0.0;
    }
    if ok().is_some() {
        1.0
    } else {
        0.0
    }
}

/// `float(depth / 1000)`: Python's true division (int / int correctly rounded).
fn depth_metres(d: &Value) -> Result<f64, Raised> {
    match Num::of(d).ok_or(TYPE_ERROR)? {
        Num::Int(i) => ratio_to_f64(&i, &PyInt::from_i64(1000)).ok_or(OVERFLOW),
        Num::Float(f) => Ok(f / 1000.0),
    }
}

/// `x - 360.0` and friends need `float(x)`.
fn coord(v: &Value) -> Result<f64, Raised> {
    Num::of(v).ok_or(TYPE_ERROR)?.to_f64()
}

/// Max and min of a list of JSON scalars through numpy (NaN propagates), compared with a Python
/// float as numpy does: everything in float64.
fn np_max_min(vals: &[Value]) -> Result<(f64, f64), Raised> {
    let (dtype, s): (DType, Vec<Scalar>) = numpy::array1(vals)?;
    if s.is_empty() {
        return Err(Raised("ValueError"));
    }
    let _ = dtype;
    let f: Vec<f64> = s.iter().map(|v| v.as_f64()).collect();
    Ok(max_min(&f))
}

/// `(np.max(v), np.min(v))` of a non-empty float64 vector: NaN if any element is NaN.
fn max_min(f: &[f64]) -> (f64, f64) {
    if f.iter().any(|v| v.is_nan()) {
        return (f64::NAN, f64::NAN);
    }
    let max = f.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = f.iter().copied().fold(f64::INFINITY, f64::min);
    (max, min)
}

fn between_open(lo: f64, v: f64, hi: f64) -> bool {
    lo < v && v < hi
}

/// Column `k` of each object (each a 3-element list, checked by the caller).
fn column(objects: &[Value], k: usize) -> Vec<Value> {
    objects
        .iter()
        .map(|o| o.as_list().map_or(Value::Null, |l| l[k].clone()))
        .collect()
}

/// The released `calculate_xy_depth_reward` for one back-projected point: 1.0 or 0.0.
fn direction_success(objects: &[Value], direction: &str, t: [f64; 3]) -> Result<f64, Raised> {
    let first = || -> Result<&[Value], Raised> {
        objects
            .first()
            .and_then(Value::as_list)
            .ok_or(Raised("IndexError"))
    };
    let hit = match direction {
        "left" => py_compare_f64(&first()?[1], CmpOp::Gt, t[1])?,
        "right" => py_compare_f64(&first()?[1], CmpOp::Lt, t[1])?,
        "front" => py_compare_f64(&first()?[0], CmpOp::Lt, t[0])?,
        "behind" => py_compare_f64(&first()?[0], CmpOp::Gt, t[0])?,
        "top" => py_compare_f64(&first()?[2], CmpOp::Le, t[2])?,
        "between" => {
            if objects.len() < 2 {
                return Err(Raised("IndexError"));
            }
            let pair = &objects[..2];
            let (max_x, min_x) = np_max_min(&column(pair, 0))?;
            let (max_y, min_y) = np_max_min(&column(pair, 1))?;
            between_open(min_x, t[0], max_x) || between_open(min_y, t[0], max_y)
        }
        "center" => {
            // np.max(objects, axis=0): one array over every coordinate (z included).
            let arr = numpy::array2(&Value::List(objects.to_vec()))?;
            let col =
                |k: usize| -> Vec<f64> { (0..arr.rows).map(|r| arr.at(r, k).as_f64()).collect() };
            let (max_x, min_x) = max_min(&col(0));
            let (max_y, min_y) = max_min(&col(1));
            between_open(min_x, t[0], max_x) && between_open(min_y, t[1], max_y)
        }
        _ => false,
    };
    Ok(if hit { 1.0 } else { 0.0 })
}

/// The position term of `3d_position` (called only when [`format_reward`] is 1).
pub fn position_reward(response: &str, payload: &str) -> f64 {
    let mut acc = 0.0;
    let run = |acc: &mut f64| -> Result<(), Raised> {
        let gt = loads(payload).map_err(|_| Raised("JSONDecodeError"))?;
        if !matches!(gt, Value::Dict(_)) {
            return Err(Raised("AttributeError"));
        }
        let empty = Value::List(Vec::new());
        let objects = gt.get("object").unwrap_or(&empty);
        let objects = objects.as_list().ok_or(Raised("AssertionError"))?;
        let direction = match gt.get("direction") {
            Some(Value::Str(d)) => d.as_str(),
            _ => return Err(Raised("AssertionError")),
        };
        if !objects.iter().all(|o| o.is_list_of_len(3)) {
            return Err(Raised("AssertionError"));
        }
        let pts = loads(first_point_block(response).unwrap_or(""))
            .map_err(|_| Raised("JSONDecodeError"))?;
        let deps = loads(first_depth_block(response).unwrap_or(""))
            .map_err(|_| Raised("JSONDecodeError"))?;
        let (Some(pts), Some(deps)) = (pts.as_list(), deps.as_list()) else {
            return Err(Raised("AssertionError"));
        };
        if pts.len() != deps.len() {
            return Err(Raised("AssertionError"));
        }
        for (p, d) in pts.iter().zip(deps) {
            let xy = p.as_list().ok_or(TYPE_ERROR)?;
            if xy.len() < 2 {
                return Err(Raised("IndexError"));
            }
            // Python evaluates the arguments left to right: x, y, then the depth.
            let (x, y) = (coord(&xy[0]), coord(&xy[1]));
            let dep = depth_metres(d)?;
            let t = pixel_to_world(x?, y?, dep);
            *acc += direction_success(objects, direction, t)?;
        }
        if pts.is_empty() {
            return Err(Raised("ZeroDivisionError"));
        }
        *acc /= pts.len() as f64;
        Ok(())
    };
    match run(&mut acc) {
        Ok(()) => acc,
        Err(_) => acc,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principal_point_projects_onto_the_optical_axis() {
        let w = pixel_to_world(360.0, 240.0, 1.0);
        assert_eq!(w[0], 0.5);
        assert!((w[1] - (0.7 - S)).abs() < 1e-12);
        assert!((w[2] - (1.0 - S)).abs() < 1e-12);
        assert!(pixel_to_world(360.0, f64::INFINITY, 1.0)[0].is_nan());
    }

    #[test]
    fn partial_sum_is_kept_when_a_later_point_raises() {
        let resp = format!(
            "<point>[[360, 240], [100, 100]]</point><depth>[500, {}]</depth>",
            "9".repeat(400)
        );
        let gt = r#"{"object": [[0.3, 5.0, 0.2]], "direction": "left"}"#;
        assert_eq!(format_reward(&resp), 1.0);
        assert_eq!(position_reward(&resp, gt), 1.0);
        let back = r#"{"object": [[5.0, 5.0, 0.2]], "direction": "back"}"#;
        assert_eq!(
            position_reward("<point>[[360, 240]]</point><depth>[500]</depth>", back),
            0.0
        );
    }
}
