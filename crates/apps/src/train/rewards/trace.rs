//! Distances between point sets and traces, and the linear ramps that turn them into rewards.
//!
//! * [`ramp`]: 1 at or below `lo`, 0 at or above `hi`, `1 - (d - lo)/(hi - lo)` between; a NaN
//!   distance fails both tests and yields NaN (kept: the released reward then is NaN).
//! * [`mean_min_distance`]: RoboPoint's "l1" reward distance, which is Euclidean (L2): for every
//!   predicted point the distance to the nearest ground-truth point, averaged — computed the way
//!   numpy does it, in the dtype `np.array` picked, so int64 wraps around (see `numpy`), NaN
//!   propagates through `np.min`, and an object array makes `np.sqrt` raise (reward 0).
//! * [`discrete_frechet`]: the textbook DP, `dp[i][j] = max(min(up, left, diag), d(i,j))`, in
//!   plain Python arithmetic (exact ints, `math.sqrt`), with Python's builtin `min`/`max` NaN
//!   behaviour (first argument wins unless strictly beaten).
//! * [`rmse_resampled`]: both traces linearly resampled (`np.interp` over `np.linspace(0, 1, n)`)
//!   to the longer length, then `sqrt(Σ(dx²+dy²)/n)`.

use super::numpy::{self, Array2, DType, Scalar};
use super::pyjson::Value;
use super::pyops::{py_max2, py_min3, Num, Raised, TYPE_ERROR};

/// The released `distance_to_reward(d, lo, hi)` (also inlined in the point-distance reward with
/// 10 / 50).
pub fn ramp(d: f64, lo: f64, hi: f64) -> f64 {
    if d <= lo {
        1.0
    } else if d >= hi {
        0.0
    } else {
        1.0 - (d - lo) / (hi - lo)
    }
}

/// Squared distance of two points in the promoted dtype, then `np.sqrt`.
fn numpy_dist(p: [Scalar; 2], g: [Scalar; 2], dtype: DType) -> f64 {
    match dtype {
        DType::Float64 | DType::Bool => {
            let dx = p[0].as_f64() - g[0].as_f64();
            let dy = p[1].as_f64() - g[1].as_f64();
            (dx * dx + dy * dy).sqrt()
        }
        DType::Int64 => {
            let i = |s: Scalar| match s {
                Scalar::I64(v) => v,
                Scalar::Bool(b) => i64::from(b),
                Scalar::U64(v) => v as i64,
                Scalar::F64(v) => v as i64,
            };
            let dx = i(p[0]).wrapping_sub(i(g[0]));
            let dy = i(p[1]).wrapping_sub(i(g[1]));
            (dx.wrapping_mul(dx).wrapping_add(dy.wrapping_mul(dy)) as f64).sqrt()
        }
        DType::UInt64 => {
            let u = |s: Scalar| match s {
                Scalar::U64(v) => v,
                Scalar::Bool(b) => u64::from(b),
                Scalar::I64(v) => v as u64,
                Scalar::F64(v) => v as u64,
            };
            let dx = u(p[0]).wrapping_sub(u(g[0]));
            let dy = u(p[1]).wrapping_sub(u(g[1]));
            (dx.wrapping_mul(dx).wrapping_add(dy.wrapping_mul(dy)) as f64).sqrt()
        }
    }
}

/// The released `robopoint_point_l1_reward(pred, gt)` before the ramp: mean over predicted points
/// of the distance to the nearest ground-truth point. `pred` is a non-empty list of 2-element
/// lists (the caller asserted that); `gt` is whatever the ground truth parsed to.
///
/// `Err` where numpy raises (the released function then returns 0). Ground-truth rows of one
/// element broadcast against both coordinates, as numpy does.
pub fn mean_min_distance(pred: &Value, gt: &Value) -> Result<f64, Raised> {
    let p: Array2 = numpy::array2(pred)?;
    let g: Array2 = numpy::array2(gt)?;
    if p.cols != 2 || !(g.cols == 1 || g.cols == 2) {
        return Err(Raised("ValueError"));
    }
    let dtype = numpy::sub_dtype(p.dtype, g.dtype)?;
    let mut sum = 0.0;
    for i in 0..p.rows {
        let mut min = f64::INFINITY;
        let mut nan = false;
        for j in 0..g.rows {
            let gp = if g.cols == 2 {
                [g.at(j, 0), g.at(j, 1)]
            } else {
                [g.at(j, 0), g.at(j, 0)]
            };
            let d = numpy_dist([p.at(i, 0), p.at(i, 1)], gp, dtype);
            if d.is_nan() {
                nan = true;
            } else if d < min {
                min = d;
            }
        }
        sum += if nan { f64::NAN } else { min };
    }
    Ok(sum / p.rows as f64)
}

/// The released point-distance reward: `ramp(mean_min_distance, 10, 50)`, 0 for an empty
/// prediction or wherever numpy raises.
pub fn point_distance_reward(pred: &Value, gt: &Value) -> f64 {
    match pred {
        Value::List(v) if v.is_empty() => 0.0,
        _ => mean_min_distance(pred, gt).map_or(0.0, |d| ramp(d, 10.0, 50.0)),
    }
}

/// Python numbers of a 2-element point list.
fn num_pair(p: &Value) -> Result<(Num, Num), Raised> {
    match p.as_list() {
        Some([x, y]) => Ok((Num::of(x).ok_or(TYPE_ERROR)?, Num::of(y).ok_or(TYPE_ERROR)?)),
        _ => Err(TYPE_ERROR),
    }
}

/// The released `compute_discrete_frechet_distance` (both traces non-empty lists of 2-element
/// lists). `Err` where Python raises (a non-number coordinate, a float square that overflows, an
/// int too large for `math.sqrt`).
pub fn discrete_frechet(a: &[Value], b: &[Value]) -> Result<f64, Raised> {
    let (n, m) = (a.len(), b.len());
    let pa = a.iter().map(num_pair).collect::<Result<Vec<_>, _>>();
    let pb = b.iter().map(num_pair).collect::<Result<Vec<_>, _>>();
    // Python raises at the first pair it computes; any failure is the same outcome.
    let (pa, pb) = (pa?, pb?);
    let mut dist = vec![0.0; n * m];
    for i in 0..n {
        for j in 0..m {
            let dx = pa[i].0.sub(&pb[j].0)?.square()?;
            let dy = pa[i].1.sub(&pb[j].1)?.square()?;
            dist[i * m + j] = dx.add(&dy)?.sqrt()?;
        }
    }
    let mut dp = vec![0.0; n * m];
    dp[0] = dist[0];
    for i in 1..n {
        dp[i * m] = py_max2(dp[(i - 1) * m], dist[i * m]);
    }
    for j in 1..m {
        dp[j] = py_max2(dp[j - 1], dist[j]);
    }
    for i in 1..n {
        for j in 1..m {
            let best = py_min3(
                dp[(i - 1) * m + j],
                dp[i * m + j - 1],
                dp[(i - 1) * m + j - 1],
            );
            dp[i * m + j] = py_max2(best, dist[i * m + j]);
        }
    }
    Ok(dp[n * m - 1])
}

/// The released `compute_rmse_with_interpolation`. Coordinates become float64 as numpy casts
/// them (`float()` of each; `Err` for an int past `f64::MAX`).
pub fn rmse_resampled(a: &[Value], b: &[Value]) -> Result<f64, Raised> {
    let coords = |t: &[Value]| -> Result<(Vec<f64>, Vec<f64>), Raised> {
        let mut xs = Vec::with_capacity(t.len());
        let mut ys = Vec::with_capacity(t.len());
        for p in t {
            let (x, y) = num_pair(p)?;
            xs.push(x.to_f64()?);
            ys.push(y.to_f64()?);
        }
        Ok((xs, ys))
    };
    let (ax, ay) = coords(a)?;
    let (bx, by) = coords(b)?;
    let n = a.len().max(b.len());
    let t_new = numpy::linspace01(n);
    let (ta, tb) = (numpy::linspace01(a.len()), numpy::linspace01(b.len()));
    let (ax, ay) = (
        numpy::interp(&t_new, &ta, &ax),
        numpy::interp(&t_new, &ta, &ay),
    );
    let (bx, by) = (
        numpy::interp(&t_new, &tb, &bx),
        numpy::interp(&t_new, &tb, &by),
    );
    let mut sum = 0.0;
    for k in 0..n {
        let dx = ax[k] - bx[k];
        let dy = ay[k] - by[k];
        sum += dx * dx + dy * dy;
    }
    Ok((sum / n as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::rewards::pyjson::loads;

    fn list(s: &str) -> Vec<Value> {
        match loads(s).unwrap() {
            Value::List(v) => v,
            _ => panic!(),
        }
    }

    #[test]
    fn ramp_ends() {
        assert_eq!(ramp(0.0, 10.0, 50.0), 1.0);
        assert_eq!(ramp(10.0, 10.0, 50.0), 1.0);
        assert_eq!(ramp(30.0, 10.0, 50.0), 0.5);
        assert_eq!(ramp(50.0, 10.0, 50.0), 0.0);
        assert_eq!(ramp(60.0, 10.0, 50.0), 0.0);
        assert!(ramp(f64::NAN, 10.0, 50.0).is_nan());
    }

    #[test]
    fn frechet_and_rmse_analytic() {
        let t = list("[[0, 0], [10, 0], [20, 5], [30, 5]]");
        assert_eq!(discrete_frechet(&t, &t), Ok(0.0));
        assert_eq!(rmse_resampled(&t, &t), Ok(0.0));
        let shifted = list("[[3, 4], [13, 4], [23, 9], [33, 9]]");
        assert_eq!(discrete_frechet(&t, &shifted), Ok(5.0));
        assert_eq!(rmse_resampled(&t, &shifted), Ok(5.0));
        // a 2-point line resampled to 3 points has its midpoint at (15, 0)
        let line = list("[[0, 0], [30, 0]]");
        let three = list("[[0, 0], [15, 0], [30, 0]]");
        assert_eq!(rmse_resampled(&line, &three), Ok(0.0));
        assert!(discrete_frechet(&list("[[1e200, 0]]"), &line).is_err());
    }

    #[test]
    fn int64_wraps_like_numpy() {
        let p = loads("[[4294967296, 0]]").unwrap();
        let g = loads("[[0, 0]]").unwrap();
        assert_eq!(mean_min_distance(&p, &g), Ok(0.0));
        let gf = loads("[[0.0, 0]]").unwrap();
        assert_eq!(mean_min_distance(&p, &gf), Ok(4294967296.0));
        assert_eq!(point_distance_reward(&loads("[]").unwrap(), &g), 0.0);
    }
}
