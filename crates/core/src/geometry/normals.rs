//! Surface normals from the organised depth grid.
//!
//! A depth image is already a grid: the neighbours of a pixel are its neighbours on the surface
//! unless a depth edge lies between them. Central differences on that grid cost two subtractions
//! and a cross product per point, against a kNN search per point for an unorganised cloud, and
//! they never mix the two sides of an object edge as long as depth jumps are rejected. That is
//! the method here; [`normal_at_pixel`] adds a least-squares (PCA) fit over a window for the one
//! normal the executor needs at a grasp point, where robustness matters more than speed.
//!
//! All normals are in the base frame and oriented towards the camera (a surface is seen from its
//! front side).

use super::cloud::{PointCloud, RayTable};
use super::depth::DepthImage;
use super::error::GeometryError;
use super::plane::total_least_squares;
use crate::nalgebra::{Isometry3, Vector3};

/// Options of [`cloud_normals`].
#[derive(Clone, Debug, PartialEq)]
pub struct NormalOptions {
    /// Pixel offset of the neighbours used in the differences (>= 1). Larger is smoother.
    pub step: usize,
    /// A neighbour whose depth differs from the centre by more than this fraction of the centre
    /// depth is across an edge and is not used.
    pub max_relative_jump: f32,
}

impl Default for NormalOptions {
    /// Step 2, 5 % jump: a 70°-inclined surface at 1 m changes depth by ~1 % over 2 pixels on a
    /// 600 px focal length, an object edge by much more.
    fn default() -> Self {
        NormalOptions {
            step: 2,
            max_relative_jump: 0.05,
        }
    }
}

/// Normal of every point of `cloud` (which must come from `depth` through `rays`), in the base
/// frame; `None` where no neighbour pair on either axis is usable.
///
/// Along each image axis the tangent is the central difference `P(+step) - P(-step)`, or a
/// one-sided difference with the centre when one neighbour is missing or across an edge.
pub fn cloud_normals(
    rays: &RayTable,
    depth: &DepthImage,
    base_from_camera: &Isometry3<f64>,
    cloud: &PointCloud,
    opts: &NormalOptions,
) -> Result<Vec<Option<[f32; 3]>>, GeometryError> {
    rays.check_depth(depth)?;
    if opts.step == 0 || opts.max_relative_jump.is_nan() || opts.max_relative_jump <= 0.0 {
        return Err(GeometryError::InvalidOption {
            field: "step/max_relative_jump",
            reason: format!(
                "need step >= 1 and max_relative_jump > 0, got {} and {}",
                opts.step, opts.max_relative_jump
            ),
        });
    }
    if cloud.image_width != depth.width || cloud.image_height != depth.height {
        return Err(GeometryError::SizeMismatch {
            depth_width: depth.width,
            depth_height: depth.height,
            intrinsics_width: cloud.image_width,
            intrinsics_height: cloud.image_height,
        });
    }
    let rot = base_from_camera.rotation;
    let (w, h, s) = (depth.width as i64, depth.height as i64, opts.step as i64);
    // Camera-frame point at a pixel if valid and on the same surface as depth `dc`.
    let point = |u: i64, v: i64, dc: f32| -> Option<Vector3<f32>> {
        if u < 0 || v < 0 || u >= w || v >= h {
            return None;
        }
        let d = depth.data[(v * w + u) as usize];
        if !DepthImage::is_valid(d) || (d - dc).abs() > opts.max_relative_jump * dc {
            return None;
        }
        let [x, y] = rays.ray(u as usize, v as usize)?;
        Some(Vector3::new(d * x, d * y, d))
    };
    let tangent = |c: &Vector3<f32>, a: Option<Vector3<f32>>, b: Option<Vector3<f32>>| match (a, b)
    {
        (Some(a), Some(b)) => Some(b - a),
        (None, Some(b)) => Some(b - c),
        (Some(a), None) => Some(c - a),
        (None, None) => None,
    };
    let out = cloud
        .pixels
        .iter()
        .map(|&p| {
            let (u, v) = ((p as i64) % w, (p as i64) / w);
            let dc = depth.data[p as usize];
            let c = point(u, v, dc)?;
            let tu = tangent(&c, point(u - s, v, dc), point(u + s, v, dc))?;
            let tv = tangent(&c, point(u, v - s, dc), point(u, v + s, dc))?;
            let mut n = tu.cross(&tv);
            let norm = n.norm();
            if !(norm > 0.0 && norm.is_finite()) {
                return None;
            }
            n /= norm;
            if n.dot(&c) > 0.0 {
                n = -n; // face the camera (at the camera-frame origin)
            }
            let nb = rot * Vector3::new(n.x as f64, n.y as f64, n.z as f64);
            Some([nb.x as f32, nb.y as f32, nb.z as f32])
        })
        .collect();
    Ok(out)
}

/// Options of [`normal_at_pixel`].
#[derive(Clone, Debug, PartialEq)]
pub struct NormalAtPixelOptions {
    /// Side of the square window, odd >= 3.
    pub window: usize,
    /// Pixels whose depth differs from the window median by more than this fraction of it are
    /// left out (other side of an object edge).
    pub max_relative_jump: f32,
    /// Minimum fraction of the window's in-image pixels that must be valid and kept.
    pub min_valid_fraction: f32,
}

impl Default for NormalAtPixelOptions {
    fn default() -> Self {
        NormalAtPixelOptions {
            window: 9,
            max_relative_jump: 0.05,
            min_valid_fraction: 0.3,
        }
    }
}

/// Least-squares surface normal (base frame, facing the camera) at sub-pixel `(u, v)`: a plane
/// fitted by PCA to the camera-frame points of a window, after dropping pixels across a depth edge.
pub fn normal_at_pixel(
    rays: &RayTable,
    depth: &DepthImage,
    base_from_camera: &Isometry3<f64>,
    u: f64,
    v: f64,
    opts: &NormalAtPixelOptions,
) -> Result<Vector3<f64>, GeometryError> {
    rays.check_depth(depth)?;
    if opts.window < 3 || opts.window.is_multiple_of(2) {
        return Err(GeometryError::InvalidOption {
            field: "window",
            reason: format!("must be odd and >= 3, got {}", opts.window),
        });
    }
    let (ui, vi) = depth.pixel_index(u, v)?;
    let half = opts.window / 2;
    let (u0, u1) = (ui.saturating_sub(half), (ui + half).min(depth.width - 1));
    let (v0, v1) = (vi.saturating_sub(half), (vi + half).min(depth.height - 1));
    let total = (u1 - u0 + 1) * (v1 - v0 + 1);
    let mut samples: Vec<(usize, usize, f32)> = Vec::with_capacity(total);
    for row in v0..=v1 {
        for col in u0..=u1 {
            if let Some(d) = depth.get(col, row) {
                samples.push((col, row, d));
            }
        }
    }
    let too_few = |valid: usize| GeometryError::TooFewValidDepth {
        u,
        v,
        valid,
        total,
        min_fraction: opts.min_valid_fraction,
    };
    if samples.len() < 3 {
        return Err(too_few(samples.len()));
    }
    let mut ds: Vec<f32> = samples.iter().map(|s| s.2).collect();
    ds.sort_unstable_by(f32::total_cmp);
    let median = ds[ds.len() / 2];
    let pts: Vec<Vector3<f64>> = samples
        .iter()
        .filter(|s| (s.2 - median).abs() <= opts.max_relative_jump * median)
        .filter_map(|&(col, row, d)| {
            let [x, y] = rays.ray(col, row)?;
            Some(Vector3::new((d * x) as f64, (d * y) as f64, d as f64))
        })
        .collect();
    if pts.len() < 3 || (pts.len() as f32) < opts.min_valid_fraction * total as f32 {
        return Err(too_few(pts.len()));
    }
    let refs: Vec<&Vector3<f64>> = pts.iter().collect();
    let (mut n, _) = total_least_squares(&refs).ok_or(GeometryError::TooFew {
        what: "distinct points for a normal",
        got: 0,
        needed: 3,
    })?;
    let centroid = pts.iter().fold(Vector3::zeros(), |a, p| a + p) / pts.len() as f64;
    if n.dot(&centroid) > 0.0 {
        n = -n;
    }
    Ok(base_from_camera.rotation * n)
}
