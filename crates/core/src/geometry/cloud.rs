//! Depth image -> point cloud in the robot base frame.
//!
//! Deprojection with distortion costs ten fixed-point iterations per pixel, but the ray of a pixel
//! depends only on the intrinsics. [`RayTable`] therefore computes every pixel's normalised ray
//! once, with the same code as [`Intrinsics::deproject`] (so the fast path and the golden-tested
//! path agree bit for bit in the camera frame), and the per-frame loop is a handful of
//! multiply-adds per pixel. Build one `RayTable` per camera stream and reuse it.

use super::depth::DepthImage;
use super::error::GeometryError;
use super::intrinsics::{Distortion, Intrinsics};
use crate::nalgebra::Isometry3;

/// Axis-aligned box in the base frame (metres); both corners inclusive.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CropBox {
    /// Lower corner `[x, y, z]`.
    pub min: [f64; 3],
    /// Upper corner `[x, y, z]`.
    pub max: [f64; 3],
}

impl CropBox {
    /// Whether `p` lies inside (inclusive).
    pub fn contains(&self, p: [f64; 3]) -> bool {
        (0..3).all(|i| p[i] >= self.min[i] && p[i] <= self.max[i])
    }

    fn validate(&self) -> Result<(), GeometryError> {
        for i in 0..3 {
            if !(self.min[i].is_finite() && self.max[i].is_finite()) || self.min[i] > self.max[i] {
                return Err(GeometryError::InvalidOption {
                    field: "crop",
                    reason: format!(
                        "needs finite min <= max on every axis, got min {:?} max {:?}",
                        self.min, self.max
                    ),
                });
            }
        }
        Ok(())
    }
}

/// What [`RayTable::cloud`] keeps.
#[derive(Clone, Debug, PartialEq)]
pub struct CloudOptions {
    /// Use every `stride`-th pixel in both directions (1 = all).
    pub stride: usize,
    /// Keep only points inside this base-frame box.
    pub crop: Option<CropBox>,
    /// Drop depths below this (metres). RealSense returns garbage below its minimum range.
    pub depth_min_m: f32,
    /// Drop depths above this (metres); far depth is noisy and rarely part of the workspace.
    pub depth_max_m: f32,
    /// Threads for the conversion: 1 (default) runs on the caller's thread, 0 uses
    /// `std::thread::available_parallelism()`. Images below ~64k sampled pixels always use one.
    pub threads: usize,
}

impl Default for CloudOptions {
    /// Every valid pixel, no crop.
    fn default() -> Self {
        CloudOptions {
            stride: 1,
            crop: None,
            depth_min_m: 0.0,
            depth_max_m: f32::INFINITY,
            threads: 1,
        }
    }
}

impl CloudOptions {
    /// The thread count `threads` stands for (0 = the machine's available parallelism).
    pub fn resolved_threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }

    fn validate(&self) -> Result<(), GeometryError> {
        if self.stride == 0 {
            return Err(GeometryError::InvalidOption {
                field: "stride",
                reason: "must be >= 1".into(),
            });
        }
        if self.depth_min_m.is_nan()
            || self.depth_max_m.is_nan()
            || self.depth_min_m > self.depth_max_m
        {
            return Err(GeometryError::InvalidOption {
                field: "depth_min_m/depth_max_m",
                reason: format!(
                    "need depth_min_m <= depth_max_m, got {} and {}",
                    self.depth_min_m, self.depth_max_m
                ),
            });
        }
        if let Some(c) = &self.crop {
            c.validate()?;
        }
        Ok(())
    }
}

/// A point cloud in the base frame, with the pixel each point came from.
///
/// Points are f32 (image-derived data; a 640x480 cloud is 3.7 MB instead of 7.4 MB). `pixels[i]`
/// is the row-major pixel index `v * image_width + u` of `points[i]`; it is strictly increasing,
/// which lets [`PointCloud::indices_near_pixel`] find the points under a VLM's 2D point with a
/// binary search per row instead of a scan.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PointCloud {
    /// Points `[x, y, z]` in the base frame, metres.
    pub points: Vec<[f32; 3]>,
    /// Source pixel of each point, `v * image_width + u`, strictly increasing.
    pub pixels: Vec<u32>,
    /// Width of the source image.
    pub image_width: usize,
    /// Height of the source image.
    pub image_height: usize,
}

impl PointCloud {
    /// Number of points.
    pub fn len(&self) -> usize {
        self.points.len()
    }

    /// Whether the cloud has no point.
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Source pixel `(u, v)` of point `i`.
    pub fn pixel_of(&self, i: usize) -> Option<(usize, usize)> {
        let p = *self.pixels.get(i)? as usize;
        Some((p % self.image_width.max(1), p / self.image_width.max(1)))
    }

    /// Indices of the points whose source pixel lies within `radius_px` (Euclidean, in pixels) of
    /// `(u, v)`, in increasing pixel order.
    pub fn indices_near_pixel(&self, u: f64, v: f64, radius_px: f64) -> Vec<usize> {
        let mut out = Vec::new();
        if !(u.is_finite() && v.is_finite() && radius_px >= 0.0) || self.image_width == 0 {
            return out;
        }
        let w = self.image_width as i64;
        let h = self.image_height as i64;
        let v_lo = ((v - radius_px).ceil() as i64).max(0);
        let v_hi = ((v + radius_px).floor() as i64).min(h - 1);
        let u_lo = ((u - radius_px).ceil() as i64).max(0);
        let u_hi = ((u + radius_px).floor() as i64).min(w - 1);
        if v_lo > v_hi || u_lo > u_hi {
            return out;
        }
        for row in v_lo..=v_hi {
            let first = (row * w + u_lo) as u32;
            let last = (row * w + u_hi) as u32;
            let start = self.pixels.partition_point(|&p| p < first);
            for (i, &p) in self.pixels.iter().enumerate().skip(start) {
                if p > last {
                    break;
                }
                let du = (p as i64 % w) as f64 - u;
                let dv = row as f64 - v;
                if du * du + dv * dv <= radius_px * radius_px {
                    out.push(i);
                }
            }
        }
        out
    }

    /// The point whose source pixel is closest to `(u, v)`, if one is within `max_radius_px`.
    pub fn nearest_to_pixel(&self, u: f64, v: f64, max_radius_px: f64) -> Option<usize> {
        let w = self.image_width.max(1);
        self.indices_near_pixel(u, v, max_radius_px)
            .into_iter()
            .min_by(|&a, &b| {
                let dist = |i: usize| {
                    let p = self.pixels[i] as usize;
                    let (du, dv) = ((p % w) as f64 - u, (p / w) as f64 - v);
                    du * du + dv * dv
                };
                dist(a).total_cmp(&dist(b))
            })
    }
}

/// Per-pixel rays of one camera stream, computed once.
#[derive(Clone, Debug)]
pub struct RayTable {
    intrinsics: Intrinsics,
    rays: Rays,
}

/// Pinhole rays are separable (x depends on u only, y on v only), so two short vectors replace
/// the full table and keep it in L1 cache; distorted models need the full table, stored as two
/// planes (structure of arrays) so the per-row loop reads them with vector loads.
#[derive(Clone, Debug)]
enum Rays {
    Separable { xs: Vec<f32>, ys: Vec<f32> },
    Full { xs: Vec<f32>, ys: Vec<f32> },
}

impl RayTable {
    /// Validates the intrinsics and computes every pixel's ray with [`Intrinsics::ray_xy`].
    pub fn new(intrinsics: &Intrinsics) -> Result<Self, GeometryError> {
        intrinsics.validate()?;
        if !intrinsics.model.can_deproject() {
            return Err(GeometryError::NotDeprojectable {
                model: intrinsics.model,
            });
        }
        if intrinsics.width.saturating_mul(intrinsics.height) > u32::MAX as usize {
            return Err(GeometryError::InvalidIntrinsics {
                field: "width",
                reason: "image too large for u32 pixel indices".into(),
            });
        }
        let (w, h) = (intrinsics.width, intrinsics.height);
        let rays = if intrinsics.model == Distortion::None {
            // Same f32 operations as `ray_xy_f32` for the pinhole model, one axis at a time.
            let xs = (0..w)
                .map(|u| (u as f32 - intrinsics.cx as f32) / intrinsics.fx as f32)
                .collect();
            let ys = (0..h)
                .map(|v| (v as f32 - intrinsics.cy as f32) / intrinsics.fy as f32)
                .collect();
            Rays::Separable { xs, ys }
        } else {
            let mut xs = Vec::with_capacity(w * h);
            let mut ys = Vec::with_capacity(w * h);
            for v in 0..h {
                for u in 0..w {
                    let [x, y] = intrinsics.ray_xy([u as f64, v as f64])?;
                    xs.push(x);
                    ys.push(y);
                }
            }
            Rays::Full { xs, ys }
        };
        Ok(RayTable {
            intrinsics: intrinsics.clone(),
            rays,
        })
    }

    /// The intrinsics the table was built for.
    pub(crate) fn intrinsics(&self) -> &Intrinsics {
        &self.intrinsics
    }

    /// The normalised ray `(x, y)` of integer pixel `(u, v)` (the point at depth `d` is
    /// `(d x, d y, d)`); `None` outside the image.
    pub(crate) fn ray(&self, u: usize, v: usize) -> Option<[f32; 2]> {
        if u >= self.intrinsics.width || v >= self.intrinsics.height {
            return None;
        }
        Some(match &self.rays {
            Rays::Separable { xs, ys } => [xs[u], ys[v]],
            Rays::Full { xs, ys } => {
                let i = v * self.intrinsics.width + u;
                [xs[i], ys[i]]
            }
        })
    }

    /// Errors unless `depth` has the table's size and a consistent buffer.
    pub(crate) fn check_depth(&self, depth: &DepthImage) -> Result<(), GeometryError> {
        depth.check()?;
        if depth.width != self.intrinsics.width || depth.height != self.intrinsics.height {
            return Err(GeometryError::SizeMismatch {
                depth_width: depth.width,
                depth_height: depth.height,
                intrinsics_width: self.intrinsics.width,
                intrinsics_height: self.intrinsics.height,
            });
        }
        Ok(())
    }

    /// Converts a depth image to a base-frame cloud: deproject every `stride`-th valid pixel whose
    /// depth is within `[depth_min_m, depth_max_m]`, map it with `base_from_camera`, and keep it
    /// if it is inside the crop box. Points come out in row-major pixel order whatever the
    /// thread count.
    ///
    /// Camera-frame points equal [`Intrinsics::deproject`] exactly; the transform runs in f32, so
    /// base-frame points differ from an f64 transform by f32 rounding only (~1e-7 relative).
    pub fn cloud(
        &self,
        depth: &DepthImage,
        base_from_camera: &Isometry3<f64>,
        opts: &CloudOptions,
    ) -> Result<PointCloud, GeometryError> {
        let mut out = PointCloud::default();
        self.cloud_into(depth, base_from_camera, opts, &mut out)?;
        Ok(out)
    }

    /// [`RayTable::cloud`] into an existing cloud, reusing its buffers: a camera loop that keeps
    /// one `PointCloud` per stream allocates (and page-faults) nothing per frame. On error `out`
    /// is left empty.
    pub fn cloud_into(
        &self,
        depth: &DepthImage,
        base_from_camera: &Isometry3<f64>,
        opts: &CloudOptions,
        out: &mut PointCloud,
    ) -> Result<(), GeometryError> {
        out.points.clear();
        out.pixels.clear();
        out.image_width = depth.width;
        out.image_height = depth.height;
        opts.validate()?;
        self.check_depth(depth)?;
        let (w, h, s) = (depth.width, depth.height, opts.stride);
        let kernel = Kernel::new(base_from_camera, opts);
        let rows: Vec<usize> = (0..h).step_by(s).collect();
        let per_row = w.div_ceil(s);
        let capacity = rows.len() * per_row;
        // Every sampled pixel gets a slot; the kernel writes unconditionally and advances only
        // for kept points (branch-free compaction), then the tail is cut off.
        let (points, pixels) = (&mut out.points, &mut out.pixels);
        points.resize(capacity, [0.0; 3]);
        pixels.resize(capacity, 0);
        let threads = opts.resolved_threads().min(rows.len().max(1));
        let kept = if threads <= 1 || capacity < MIN_PIXELS_PER_THREAD * 2 {
            self.convert_rows(depth, &rows, &kernel, s, points, pixels)
        } else {
            let band = rows.len().div_ceil(threads);
            let counts: Vec<usize> =
                std::thread::scope(|scope| {
                    let mut pts_rest: &mut [[f32; 3]] = points;
                    let mut pix_rest: &mut [u32] = pixels;
                    let mut handles = Vec::new();
                    for band_rows in rows.chunks(band) {
                        let len = band_rows.len() * per_row;
                        let (pts, pts_next) = std::mem::take(&mut pts_rest).split_at_mut(len);
                        let (pix, pix_next) = std::mem::take(&mut pix_rest).split_at_mut(len);
                        pts_rest = pts_next;
                        pix_rest = pix_next;
                        let kernel = &kernel;
                        handles.push(scope.spawn(move || {
                            self.convert_rows(depth, band_rows, kernel, s, pts, pix)
                        }));
                    }
                    handles
                        .into_iter()
                        .map(|handle| match handle.join() {
                            Ok(n) => n,
                            Err(panic) => std::panic::resume_unwind(panic),
                        })
                        .collect()
                });
            // Move each band's points down behind the previous band's.
            let mut kept = 0;
            for (k, &count) in counts.iter().enumerate() {
                let start = k * band * per_row;
                points.copy_within(start..start + count, kept);
                pixels.copy_within(start..start + count, kept);
                kept += count;
            }
            kept
        };
        points.truncate(kept);
        pixels.truncate(kept);
        Ok(())
    }

    /// Converts the given rows into `points`/`pixels` (which have a slot per sampled pixel);
    /// returns how many points were kept.
    ///
    /// Two passes per row. The first computes every pixel's base-frame point and keep flag into
    /// row-sized scratch planes: no data-dependent control flow, so it compiles to SIMD. The
    /// second compacts: it writes every pixel's point at slot `n` and advances `n` only for kept
    /// ones (no branch to mispredict on holes or crop edges). Strided conversions use one scalar
    /// pass instead, since the first pass would compute pixels that are then skipped.
    fn convert_rows(
        &self,
        depth: &DepthImage,
        rows: &[usize],
        k: &Kernel,
        stride: usize,
        points: &mut [[f32; 3]],
        pixels: &mut [u32],
    ) -> usize {
        let w = depth.width;
        let mut scratch = RowScratch::new(if stride == 1 { w } else { 0 });
        let mut n = 0;
        for &v in rows {
            let row = &depth.data[v * w..(v + 1) * w];
            let base = (v * w) as u32;
            let (xs, ys) = match &self.rays {
                Rays::Separable { xs, ys } => (&xs[..], RowY::Const(ys[v])),
                Rays::Full { xs, ys } => (
                    &xs[v * w..(v + 1) * w],
                    RowY::Slice(&ys[v * w..(v + 1) * w]),
                ),
            };
            if stride == 1 {
                match (ys, k.crop.is_some()) {
                    (RowY::Const(y), true) => k.transform_row::<true>(row, xs, |_| y, &mut scratch),
                    (RowY::Const(y), false) => {
                        k.transform_row::<false>(row, xs, |_| y, &mut scratch)
                    }
                    (RowY::Slice(ys), true) => {
                        k.transform_row::<true>(row, xs, |i| ys[i], &mut scratch)
                    }
                    (RowY::Slice(ys), false) => {
                        k.transform_row::<false>(row, xs, |i| ys[i], &mut scratch)
                    }
                }
                n = scratch.compact(base, points, pixels, n);
            } else {
                for u in (0..w).step_by(stride) {
                    let y = match ys {
                        RowY::Const(y) => y,
                        RowY::Slice(ys) => ys[u],
                    };
                    let (b, keep) = k.point(row[u], xs[u], y);
                    points[n] = b;
                    pixels[n] = base + u as u32;
                    n += keep as usize;
                }
            }
        }
        n
    }
}

/// The y ray coordinates of one row: constant (pinhole) or per pixel (distorted).
#[derive(Clone, Copy)]
enum RowY<'a> {
    Const(f32),
    Slice(&'a [f32]),
}

/// Below this many sampled pixels per thread, spawning costs more than it saves.
const MIN_PIXELS_PER_THREAD: usize = 32 * 1024;

/// One row of base-frame points and keep flags, as planes.
struct RowScratch {
    x: Vec<f32>,
    y: Vec<f32>,
    z: Vec<f32>,
    keep: Vec<u32>,
}

impl RowScratch {
    fn new(width: usize) -> Self {
        RowScratch {
            x: vec![0.0; width],
            y: vec![0.0; width],
            z: vec![0.0; width],
            keep: vec![0; width],
        }
    }

    /// Appends the kept points of the row at slot `n`; returns the new count.
    #[inline(always)]
    fn compact(
        &self,
        base: u32,
        points: &mut [[f32; 3]],
        pixels: &mut [u32],
        mut n: usize,
    ) -> usize {
        let len = self.keep.len();
        let (x, y, z, keep) = (
            &self.x[..len],
            &self.y[..len],
            &self.z[..len],
            &self.keep[..len],
        );
        for i in 0..len {
            points[n] = [x[i], y[i], z[i]];
            pixels[n] = base + i as u32;
            n += keep[i] as usize;
        }
        n
    }
}

/// The per-frame constants of the conversion, in f32.
struct Kernel {
    r: [[f32; 3]; 3],
    t: [f32; 3],
    crop: Option<([f32; 3], [f32; 3])>,
    dmin: f32,
    dmax: f32,
}

impl Kernel {
    fn new(base_from_camera: &Isometry3<f64>, opts: &CloudOptions) -> Self {
        let m = base_from_camera.to_homogeneous().map(|x| x as f32);
        Kernel {
            r: [0, 1, 2].map(|i| [m[(i, 0)], m[(i, 1)], m[(i, 2)]]),
            t: [m[(0, 3)], m[(1, 3)], m[(2, 3)]],
            crop: opts
                .crop
                .map(|c| (c.min.map(|x| x as f32), c.max.map(|x| x as f32))),
            dmin: opts.depth_min_m,
            dmax: opts.depth_max_m,
        }
    }

    /// Base-frame point of depth `d` on ray `(x, y, 1)` and whether to keep it. The camera-frame
    /// point `(d x, d y, d)` is exactly `Intrinsics::deproject`'s.
    #[inline(always)]
    fn point(&self, d: f32, x: f32, y: f32) -> ([f32; 3], bool) {
        let (r, t) = (&self.r, &self.t);
        let (px, py, pz) = (d * x, d * y, d);
        let b = [
            r[0][0] * px + r[0][1] * py + r[0][2] * pz + t[0],
            r[1][0] * px + r[1][1] * py + r[1][2] * pz + t[1],
            r[2][0] * px + r[2][1] * py + r[2][2] * pz + t[2],
        ];
        let mut keep = keep_depth(d, self.dmin, self.dmax);
        if let Some((lo, hi)) = &self.crop {
            keep &= inside(&b, lo, hi);
        }
        (b, keep)
    }

    /// First pass over a full row (see `convert_rows`): same arithmetic as [`Kernel::point`],
    /// written over equal-length slices so the bounds checks vanish and the loop vectorises.
    #[inline(always)]
    fn transform_row<const CROP: bool>(
        &self,
        depth: &[f32],
        xs: &[f32],
        y_at: impl Fn(usize) -> f32,
        out: &mut RowScratch,
    ) {
        let len = out.keep.len();
        let (depth, xs) = (&depth[..len], &xs[..len]);
        let (ox, oy, oz, ok) = (
            &mut out.x[..len],
            &mut out.y[..len],
            &mut out.z[..len],
            &mut out.keep[..len],
        );
        let (r, t) = (&self.r, &self.t);
        let (lo, hi) = self.crop.unwrap_or(([0.0; 3], [0.0; 3]));
        for i in 0..len {
            let d = depth[i];
            let (px, py, pz) = (d * xs[i], d * y_at(i), d);
            let b = [
                r[0][0] * px + r[0][1] * py + r[0][2] * pz + t[0],
                r[1][0] * px + r[1][1] * py + r[1][2] * pz + t[1],
                r[2][0] * px + r[2][1] * py + r[2][2] * pz + t[2],
            ];
            let mut keep = keep_depth(d, self.dmin, self.dmax);
            if CROP {
                keep &= inside(&b, &lo, &hi);
            }
            ox[i] = b[0];
            oy[i] = b[1];
            oz[i] = b[2];
            ok[i] = keep as u32;
        }
    }
}

/// Inside the box, inclusive. Non-short-circuit `&` keeps it branch-free.
#[inline(always)]
fn inside(b: &[f32; 3], lo: &[f32; 3], hi: &[f32; 3]) -> bool {
    (b[0] >= lo[0])
        & (b[0] <= hi[0])
        & (b[1] >= lo[1])
        & (b[1] <= hi[1])
        & (b[2] >= lo[2])
        & (b[2] <= hi[2])
}

/// Valid (finite, > 0) and within the range; NaN fails every comparison.
#[inline(always)]
fn keep_depth(d: f32, dmin: f32, dmax: f32) -> bool {
    (d > 0.0) & (d >= dmin) & (d <= dmax) & (d < f32::INFINITY)
}

/// One-shot conversion: builds a [`RayTable`] and calls [`RayTable::cloud`]. Keep the table
/// instead when converting more than one frame of the same stream.
pub fn depth_to_cloud(
    depth: &DepthImage,
    intrinsics: &Intrinsics,
    base_from_camera: &Isometry3<f64>,
    opts: &CloudOptions,
) -> Result<PointCloud, GeometryError> {
    RayTable::new(intrinsics)?.cloud(depth, base_from_camera, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_cloud() -> PointCloud {
        // 5x4 image, every other pixel present.
        let pixels: Vec<u32> = (0..20).step_by(2).collect();
        PointCloud {
            points: vec![[0.0; 3]; pixels.len()],
            pixels,
            image_width: 5,
            image_height: 4,
        }
    }

    #[test]
    fn indices_near_pixel_finds_exactly_the_pixels_in_the_disc() {
        let c = small_cloud();
        let got = c.indices_near_pixel(2.0, 1.0, 1.0);
        let px: Vec<(usize, usize)> = got.iter().map(|&i| c.pixel_of(i).unwrap()).collect();
        // Present pixels: even linear indices. Disc of radius 1 around (2, 1): (2,0), (1,1),
        // (2,1), (3,1), (2,2) -> linear 2, 6, 7, 8, 12 -> present: 2, 6, 8, 12.
        assert_eq!(px, vec![(2, 0), (1, 1), (3, 1), (2, 2)]);
        // (4, 3) itself is absent; (4, 2) (linear 14, point 7) is nearer than (3, 3).
        assert_eq!(c.nearest_to_pixel(4.0, 3.0, 0.5), None);
        assert_eq!(c.nearest_to_pixel(4.2, 3.0, 1.5), Some(7));
    }
}
