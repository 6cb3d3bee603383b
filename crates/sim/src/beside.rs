//! "Beside" on a tabletop: which way a side of a reference object lies in the camera's image, and
//! how well an object's footprint satisfies it. The task generator places targets with it and
//! the judge decides with it, so the two can never disagree.

use k::nalgebra::{Isometry3, Point3, Vector3};

use super::scene::{table_area, CameraSpec, Region, SceneObject};

/// Largest gap beside the reference still counted as "next to" it, m.
pub(crate) const BESIDE_MAX_GAP_M: f64 = 0.25;
/// Lateral slack beyond the reference's half width, m.
pub(crate) const BESIDE_LATERAL_SLACK_M: f64 = 0.08;

/// Which side of a reference object, as seen in the task camera's image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Towards the image's left edge (−u).
    Left,
    /// Towards the image's right edge (+u).
    Right,
}

/// The on-table direction of a side in the camera image, and the direction across it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BesideGeometry {
    /// Unit vector, in the table plane, pointing to the side.
    pub dir: Vector3<f64>,
    /// Unit vector in the table plane perpendicular to `dir`.
    pub across: Vector3<f64>,
}

impl BesideGeometry {
    pub fn new(camera: &CameraSpec, side: Side) -> BesideGeometry {
        let r = camera.image_right_on_table();
        let dir = match side {
            Side::Right => r,
            Side::Left => -r,
        };
        BesideGeometry {
            dir,
            across: Vector3::z().cross(&dir),
        }
    }

    /// The patch of table where an object put on this side of `refo` (at `pose`) should go:
    /// 5–20 cm beyond its far edge, as wide as the reference (at least 8 cm), 6 cm tall.
    pub(crate) fn target_area(
        &self,
        refo: &SceneObject,
        pose: &Isometry3<f64>,
        table_z: f64,
    ) -> Region {
        let (_, hi) = extent_along(refo, pose, &self.dir);
        let (a0, a1) = extent_along(refo, pose, &self.across);
        let along = hi + 0.125;
        let across = (a0 + a1) / 2.0;
        let c = self.dir * along + self.across * across;
        table_area(
            Point3::new(c.x, c.y, table_z),
            self.dir.y.atan2(self.dir.x),
            Vector3::new(0.075, ((a1 - a0) / 2.0).max(0.04), 0.03),
        )
    }
}

/// (min, max) of an object's projection on a world direction.
fn extent_along(o: &SceneObject, pose: &Isometry3<f64>, dir: &Vector3<f64>) -> (f64, f64) {
    let local = pose.rotation.inverse_transform_vector(dir);
    let (a, b) = o.local_extent(&local);
    let c = pose.translation.vector.dot(dir);
    (c + a, c + b)
}

/// How well `obj` satisfies "beside `refo`" in metres: the smallest slack of the three conditions
/// (gap ≥ 0, gap ≤ 25 cm, lateral offset within tolerance); ≥ 0 means satisfied.
pub(crate) fn beside_margin(
    geo: &BesideGeometry,
    obj: &SceneObject,
    pose: &Isometry3<f64>,
    refo: &SceneObject,
    ref_pose: &Isometry3<f64>,
) -> f64 {
    let (lo_o, _) = extent_along(obj, pose, &geo.dir);
    let (_, hi_r) = extent_along(refo, ref_pose, &geo.dir);
    let gap = lo_o - hi_r;
    let (o0, o1) = extent_along(obj, pose, &geo.across);
    let (r0, r1) = extent_along(refo, ref_pose, &geo.across);
    let lateral = ((o0 + o1) / 2.0 - (r0 + r1) / 2.0).abs();
    let tol = (r1 - r0) / 2.0 + BESIDE_LATERAL_SLACK_M;
    gap.min(BESIDE_MAX_GAP_M - gap).min(tol - lateral)
}
