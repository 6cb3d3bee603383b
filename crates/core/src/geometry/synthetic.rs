//! Analytic tabletop depth images for tests and benchmarks.
//!
//! A level table and axis-aligned boxes are ray-cast exactly through a [`RayTable`], so the
//! expected 3D answer of every pixel is known in closed form: the plane fit must return the table
//! height, normals must be +z on the table and box tops, and the benchmark converts a realistic
//! scene without shipping image files.

use super::cloud::RayTable;
use super::depth::DepthImage;
use super::error::GeometryError;
use crate::nalgebra::{
    Isometry3, Matrix3, Point3, Rotation3, Translation3, UnitQuaternion, Vector3,
};

/// An axis-aligned box in the base frame (metres).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SceneBox {
    /// Lower corner.
    pub min: [f64; 3],
    /// Upper corner.
    pub max: [f64; 3],
}

/// A level table (the plane `z = table_height_m`, infinite) with boxes on it.
#[derive(Clone, Debug, PartialEq)]
pub struct TabletopScene {
    /// Table surface height in the base frame.
    pub table_height_m: f64,
    /// Boxes, usually standing on the table.
    pub boxes: Vec<SceneBox>,
}

impl TabletopScene {
    /// The benchmark scene: table at z = 0 with three boxes of different sizes in front of the
    /// robot.
    pub fn example() -> Self {
        TabletopScene {
            table_height_m: 0.0,
            boxes: vec![
                SceneBox {
                    min: [0.30, -0.15, 0.0],
                    max: [0.40, -0.05, 0.12],
                },
                SceneBox {
                    min: [0.45, 0.05, 0.0],
                    max: [0.60, 0.20, 0.06],
                },
                SceneBox {
                    min: [0.25, 0.10, 0.0],
                    max: [0.30, 0.15, 0.20],
                },
            ],
        }
    }

    /// Depth along each pixel's ray to the nearest surface (0 where the ray hits nothing), as a
    /// camera at `base_from_camera` with the rays of `rays` would measure it.
    pub fn render(&self, rays: &RayTable, base_from_camera: &Isometry3<f64>) -> DepthImage {
        let k = rays.intrinsics();
        let (w, h) = (k.width, k.height);
        let origin = base_from_camera.translation.vector;
        let rot = base_from_camera.rotation;
        let mut data = vec![0.0f32; w * h];
        for v in 0..h {
            for u in 0..w {
                let Some([x, y]) = rays.ray(u, v) else {
                    continue;
                };
                // Ray o + d * dir with dir = R (x, y, 1): d is then the camera-frame z (depth).
                let dir = rot * Vector3::new(x as f64, y as f64, 1.0);
                let mut best = f64::INFINITY;
                if dir.z.abs() > 1e-12 {
                    let d = (self.table_height_m - origin.z) / dir.z;
                    if d > 0.0 {
                        best = d;
                    }
                }
                for b in &self.boxes {
                    if let Some(d) = ray_box(&origin, &dir, b) {
                        best = best.min(d);
                    }
                }
                if best.is_finite() {
                    data[v * w + u] = best as f32;
                }
            }
        }
        DepthImage {
            width: w,
            height: h,
            data,
        }
    }
}

/// Entry distance of a ray into a box (slab method), `None` when it misses or starts inside.
fn ray_box(o: &Vector3<f64>, dir: &Vector3<f64>, b: &SceneBox) -> Option<f64> {
    let (mut t0, mut t1) = (f64::NEG_INFINITY, f64::INFINITY);
    for i in 0..3 {
        if dir[i].abs() < 1e-15 {
            if o[i] < b.min[i] || o[i] > b.max[i] {
                return None;
            }
            continue;
        }
        let (a, c) = ((b.min[i] - o[i]) / dir[i], (b.max[i] - o[i]) / dir[i]);
        t0 = t0.max(a.min(c));
        t1 = t1.min(a.max(c));
    }
    (t0 <= t1 && t0 > 0.0).then_some(t0)
}

/// `base_from_camera` for a camera at `eye` looking at `target` with the OpenCV optical frame
/// (z forward, x right, y down) and base `up` pointing up in the image. Errors when the view
/// direction is parallel to `up` or the points coincide, and when the vectors are too long to
/// normalise (a norm above ~1e154 overflows to infinity and would give a zero "unit" axis).
pub fn camera_look_at(
    eye: Point3<f64>,
    target: Point3<f64>,
    up: Vector3<f64>,
) -> Result<Isometry3<f64>, GeometryError> {
    let forward = target - eye;
    let right = forward.cross(&up);
    let (f, r) = (forward.norm(), right.norm());
    if !(f.is_finite() && r.is_finite()) || f < 1e-12 || r < 1e-9 * f * up.norm().max(1e-300) {
        return Err(GeometryError::InvalidOption {
            field: "camera_look_at",
            reason: "view direction is zero, not finite or parallel to `up`".into(),
        });
    }
    let z = forward.normalize();
    let x = right.normalize();
    let y = z.cross(&x);
    let r = Rotation3::from_matrix_unchecked(Matrix3::from_columns(&[x, y, z]));
    Ok(Isometry3::from_parts(
        Translation3::from(eye.coords),
        UnitQuaternion::from_rotation_matrix(&r),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn look_at_refuses_points_too_far_apart_to_normalise() {
        // Found by `fuzz_readers` through a scene file: with eye 1e308 m away the norm overflowed,
        // the "unit" axes came out zero and the pose was not a rotation.
        let up = Vector3::z();
        for eye in [Point3::new(0.0, 1e308, 0.36), Point3::new(1e200, 0.0, 1.0)] {
            assert!(
                camera_look_at(eye, Point3::origin(), up).is_err(),
                "{eye:?}"
            );
        }
        let pose = camera_look_at(Point3::new(1e5, 0.0, 1e5), Point3::origin(), up).unwrap();
        assert!((pose.rotation.coords.norm() - 1.0).abs() < 1e-12);
    }
}
