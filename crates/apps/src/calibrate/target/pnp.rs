//! Pose of a planar target from its image points (PnP for points on the plane z = 0).
//!
//! 1. **Undistort** each pixel to its normalised ray `(x, y)` with the camera's own model
//!    ([`Intrinsics::ray_xy`], librealsense's inversion), so the rest is pinhole maths.
//! 2. **Homography** from the plane `(X, Y)` to `(x, y)` (DLT, null vector by SVD); its first two
//!    columns are the rotation's first two columns and its third the translation, up to one scale
//!    ([Zhang 2000]); the rotation is the nearest one to `[h1, h2, h1 × h2]` (polar decomposition),
//!    the sign chosen to put the target in front of the camera.
//! 3. **Levenberg–Marquardt** on the 6-DoF pose, minimising the reprojection error of the
//!    undistorted rays scaled to pixels (`fx·Δx`, `fy·Δy`): the homography minimises an algebraic
//!    error, which weights the corners unevenly; this is the geometric error the detector's noise
//!    lives in. Analytic Jacobian, rotation updated on the left by `exp(δω)`.
//!
//! The residual reported back ([`TagPose::rms_px`]) is measured in the real (distorted) image:
//! the refined pose is projected with [`Intrinsics::project`] and compared with the detected
//! pixels.
//!
//! [Zhang 2000]: Z. Zhang, "A flexible new technique for camera calibration", PAMI 22(11).

use k::nalgebra::{
    Isometry3, Matrix2x3, Matrix3, Matrix6, Point2, Point3, Rotation3, SMatrix, Translation3,
    UnitQuaternion, Vector3, Vector6,
};

use super::TargetError;
use crate::geometry::Intrinsics;

/// A target pose measured in one image.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TagPose {
    /// Target frame → camera optical frame.
    pub camera_from_target: Isometry3<f64>,
    /// Root-mean-square distance between the detected corners and the refined pose's projection of
    /// them, pixels (distorted image).
    pub rms_px: f64,
    /// Levenberg–Marquardt iterations used.
    pub iterations: usize,
}

/// The tag's corners in the target frame: top-left, top-right, bottom-right, bottom-left of the
/// printed tag, in the plane z = 0 (see [`super`]).
pub(crate) fn tag_corners(size_m: f64) -> [Point3<f64>; 4] {
    let s = size_m / 2.0;
    [
        Point3::new(-s, s, 0.0),
        Point3::new(s, s, 0.0),
        Point3::new(s, -s, 0.0),
        Point3::new(-s, -s, 0.0),
    ]
}

/// `camera_from_target` of a square tag of edge `size_m` from its four corner pixels (in the
/// order of [`tag_corners`]).
pub(crate) fn solve_tag_pose(
    corners_px: &[[f64; 2]; 4],
    size_m: f64,
    intrinsics: &Intrinsics,
) -> Result<TagPose, TargetError> {
    if !(size_m.is_finite() && size_m > 0.0) {
        return Err(TargetError::Pose(format!(
            "tag size {size_m} m must be positive"
        )));
    }
    let object: Vec<Point2<f64>> = tag_corners(size_m).iter().map(|p| p.xy()).collect();
    solve_planar_pose(&object, corners_px, intrinsics)
}

/// `camera_from_target` of a planar target from ≥ 4 points: `object[i]` (the target's plane
/// z = 0, metres) is seen at `pixels[i]`.
pub(crate) fn solve_planar_pose(
    object: &[Point2<f64>],
    pixels: &[[f64; 2]],
    intrinsics: &Intrinsics,
) -> Result<TagPose, TargetError> {
    if object.len() != pixels.len() || object.len() < 4 {
        return Err(TargetError::Pose(format!(
            "need at least 4 point pairs, got {} object points and {} pixels",
            object.len(),
            pixels.len()
        )));
    }
    intrinsics
        .validate()
        .map_err(|e| TargetError::Pose(e.to_string()))?;
    let rays: Vec<[f64; 2]> = pixels
        .iter()
        .map(|p| {
            if !(p[0].is_finite() && p[1].is_finite()) {
                return Err(TargetError::Pose(format!("pixel {p:?} is not finite")));
            }
            intrinsics
                .ray_xy(*p)
                .map(|r| [r[0] as f64, r[1] as f64])
                .map_err(|e| TargetError::Pose(e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    let initial = from_homography(object, &rays)?;
    let (pose, iterations) = refine(object, &rays, initial, intrinsics.fx, intrinsics.fy);
    let mut sq = 0.0;
    for (o, p) in object.iter().zip(pixels) {
        let c = pose * Point3::new(o.x, o.y, 0.0);
        let q = intrinsics
            .project(&c.coords)
            .map_err(|e| TargetError::Pose(format!("refined pose: {e}")))?;
        sq += (q[0] - p[0]).powi(2) + (q[1] - p[1]).powi(2);
    }
    let rms_px = (sq / object.len() as f64).sqrt();
    if !rms_px.is_finite() {
        return Err(TargetError::Pose("refinement diverged".into()));
    }
    Ok(TagPose {
        camera_from_target: pose,
        rms_px,
        iterations,
    })
}

/// Initial pose from the plane → normalised-image homography.
fn from_homography(
    object: &[Point2<f64>],
    rays: &[[f64; 2]],
) -> Result<Isometry3<f64>, TargetError> {
    // Scale the plane to unit size so the DLT matrix is well conditioned.
    let scale = object
        .iter()
        .map(|p| p.coords.norm())
        .fold(0.0f64, f64::max);
    if !(scale.is_finite() && scale > 0.0) {
        return Err(TargetError::Pose(
            "object points are all at the origin".into(),
        ));
    }
    let n = object.len();
    // 2n × 9, padded with zero rows to at least 9 so the SVD returns the full right null space.
    let rows = (2 * n).max(9);
    let mut a = k::nalgebra::DMatrix::<f64>::zeros(rows, 9);
    for (i, (o, r)) in object.iter().zip(rays).enumerate() {
        let (xs, ys) = (o.x / scale, o.y / scale);
        let (u, v) = (r[0], r[1]);
        let row0 = [xs, ys, 1.0, 0.0, 0.0, 0.0, -u * xs, -u * ys, -u];
        let row1 = [0.0, 0.0, 0.0, xs, ys, 1.0, -v * xs, -v * ys, -v];
        for j in 0..9 {
            a[(2 * i, j)] = row0[j];
            a[(2 * i + 1, j)] = row1[j];
        }
    }
    let svd = a.svd(false, true);
    let vt = svd
        .v_t
        .ok_or_else(|| TargetError::Pose("SVD failed".into()))?;
    let (imin, _) =
        svd.singular_values
            .iter()
            .enumerate()
            .fold(
                (0, f64::INFINITY),
                |(bi, bv), (i, &v)| if v < bv { (i, v) } else { (bi, bv) },
            );
    let h = vt.row(imin);
    let mut m = Matrix3::new(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8]);
    let (h1, h2) = (m.column(0).into_owned(), m.column(1).into_owned());
    let norm = (h1.norm() + h2.norm()) / 2.0;
    if !(norm.is_finite() && norm > 0.0) {
        return Err(TargetError::Pose(
            "degenerate homography (points collinear?)".into(),
        ));
    }
    // The plane's origin must be in front of the camera.
    if m[(2, 2)] < 0.0 {
        m = -m;
    }
    let (h1, h2, h3) = (
        m.column(0).into_owned(),
        m.column(1).into_owned(),
        m.column(2).into_owned(),
    );
    let approx = Matrix3::from_columns(&[h1, h2, h1.cross(&h2) / norm]);
    let svd = approx.svd(true, true);
    let (u, vt) = (
        svd.u
            .ok_or_else(|| TargetError::Pose("SVD failed".into()))?,
        svd.v_t
            .ok_or_else(|| TargetError::Pose("SVD failed".into()))?,
    );
    let mut r = u * vt;
    if r.determinant() < 0.0 {
        let mut u = u;
        u.column_mut(2).neg_mut();
        r = u * vt;
    }
    // Columns 1-2 of H are norm·(r1, r2) for plane coordinates divided by `scale`.
    let t = h3 * scale / norm;
    let rot = UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix_unchecked(r));
    let pose = Isometry3::from_parts(Translation3::from(t), rot);
    if !(t.iter().all(|v| v.is_finite()) && t.z > 0.0) {
        return Err(TargetError::Pose(format!(
            "homography puts the target at {t:?}, not in front of the camera"
        )));
    }
    Ok(pose)
}

/// Levenberg–Marquardt on the pixel-scaled ray residuals; returns the pose and the iterations.
fn refine(
    object: &[Point2<f64>],
    rays: &[[f64; 2]],
    mut pose: Isometry3<f64>,
    fx: f64,
    fy: f64,
) -> (Isometry3<f64>, usize) {
    let cost = |pose: &Isometry3<f64>| -> f64 {
        object
            .iter()
            .zip(rays)
            .map(|(o, r)| {
                let c = pose * Point3::new(o.x, o.y, 0.0);
                if c.z <= 0.0 {
                    return f64::INFINITY;
                }
                (fx * (c.x / c.z - r[0])).powi(2) + (fy * (c.y / c.z - r[1])).powi(2)
            })
            .sum()
    };
    let mut current = cost(&pose);
    let mut lambda = 1e-3;
    let mut iterations = 0;
    for _ in 0..100 {
        iterations += 1;
        let mut jtj = Matrix6::<f64>::zeros();
        let mut jtr = Vector6::<f64>::zeros();
        for (o, r) in object.iter().zip(rays) {
            let rp = pose.rotation * Vector3::new(o.x, o.y, 0.0);
            let c = rp + pose.translation.vector;
            let iz = 1.0 / c.z;
            // d(pixel residual)/d(camera point).
            let dproj = Matrix2x3::new(
                fx * iz,
                0.0,
                -fx * c.x * iz * iz,
                0.0,
                fy * iz,
                -fy * c.y * iz * iz,
            );
            // d(camera point)/d(δω, δt): -[Rp]× and I.
            let mut dp = SMatrix::<f64, 3, 6>::zeros();
            dp.fixed_slice_mut::<3, 3>(0, 0)
                .copy_from(&(-rp.cross_matrix()));
            dp.fixed_slice_mut::<3, 3>(0, 3)
                .copy_from(&Matrix3::identity());
            let j = dproj * dp;
            let res = k::nalgebra::Vector2::new(fx * (c.x * iz - r[0]), fy * (c.y * iz - r[1]));
            jtj += j.transpose() * j;
            jtr += j.transpose() * res;
        }
        let mut accepted = false;
        while lambda < 1e10 {
            let mut a = jtj;
            for i in 0..6 {
                a[(i, i)] += lambda * jtj[(i, i)].max(1e-9);
            }
            let Some(delta) = a.cholesky().map(|c| c.solve(&(-jtr))) else {
                lambda *= 10.0;
                continue;
            };
            let w = Vector3::new(delta[0], delta[1], delta[2]);
            let dt = Vector3::new(delta[3], delta[4], delta[5]);
            let rot = UnitQuaternion::from_scaled_axis(w) * pose.rotation;
            let cand = Isometry3::from_parts(Translation3::from(pose.translation.vector + dt), rot);
            let c = cost(&cand);
            if c <= current {
                let small = delta.norm() < 1e-12;
                pose = cand;
                current = c;
                lambda = (lambda / 10.0).max(1e-12);
                accepted = !small;
                break;
            }
            lambda *= 10.0;
        }
        if !accepted {
            break;
        }
    }
    (pose, iterations)
}

/// Pixels of the tag's corners seen from `camera_from_target` (with the camera's distortion);
/// what a perfect detector would report. For tests and for checking a measured pose.
#[cfg(test)]
pub(crate) fn project_tag_corners(
    camera_from_target: &Isometry3<f64>,
    size_m: f64,
    intrinsics: &Intrinsics,
) -> Result<[[f64; 2]; 4], TargetError> {
    let mut out = [[0.0; 2]; 4];
    for (o, c) in out.iter_mut().zip(tag_corners(size_m)) {
        *o = intrinsics
            .project(&(camera_from_target * c).coords)
            .map_err(|e| TargetError::Pose(e.to_string()))?;
    }
    Ok(out)
}
