//! The overlap ratio of the released extractor's `calculate_overlap_ratio`
//! (`train/conver_format/utils.py`, Embodied-R.code at 174ae99): the image corners
//! `[[0,0],[w,0],[w,h],[0,h]]` are mapped through the homography (`cv2.perspectiveTransform`),
//! the float32 result is truncated to int32 (`np.int32`), the polygon is filled on a w × h mask
//! (`cv2.fillPoly`, value 1), intersected with the filled full-image rectangle (which covers every
//! pixel), and the set pixels are counted over w · h. Measuring on the pixel grid, not the exact
//! polygon area, is part of what the extractor thresholds, so it is reproduced.
//!
//! The fill follows what `cv2.fillPoly` documents and draws
//! (<https://docs.opencv.org/4.x/d6/d6e/group__imgproc__draw.html>): integer vertices are pixel
//! centres, the interior is filled by the even–odd rule on each pixel row, and the outline itself
//! is drawn, so pixels on the boundary count.

use k::nalgebra::{Matrix3, Vector3};

/// `perspectiveTransform` of one point, rounded to f32 as OpenCV returns it for float32 input; a
/// point mapped to infinity lands on (0, 0), as OpenCV writes it.
fn transform(h: &Matrix3<f64>, x: f64, y: f64) -> [f32; 2] {
    let v = h * Vector3::new(x, y, 1.0);
    if v.z.abs() > f32::EPSILON as f64 {
        [(v.x / v.z) as f32, (v.y / v.z) as f32]
    } else {
        [0.0, 0.0]
    }
}

/// `np.int32` of a float32: truncation toward zero (saturated here where numpy's overflow is
/// undefined).
fn to_i32(v: f32) -> i64 {
    if v.is_nan() {
        0
    } else {
        v.trunc().clamp(i32::MIN as f32, i32::MAX as f32) as i64
    }
}

/// The mapped, truncated image corners of a `w × h` image.
pub(crate) fn mapped_corners(h: &Matrix3<f64>, w: u32, hgt: u32) -> [[i64; 2]; 4] {
    let (wf, hf) = (w as f64, hgt as f64);
    [[0.0, 0.0], [wf, 0.0], [wf, hf], [0.0, hf]].map(|[x, y]| {
        let p = transform(h, x, y);
        [to_i32(p[0]), to_i32(p[1])]
    })
}

/// Pixels of a `w × h` mask set by filling `poly` (closed, integer vertices).
pub(crate) fn fill_count(poly: &[[i64; 2]], w: u32, h: u32) -> usize {
    let (w, h) = (w as usize, h as usize);
    if w == 0 || h == 0 || poly.len() < 2 {
        return 0;
    }
    let mut mask = vec![false; w * h];
    let edges: Vec<([f64; 2], [f64; 2])> = (0..poly.len())
        .map(|i| {
            let a = poly[i];
            let b = poly[(i + 1) % poly.len()];
            ([a[0] as f64, a[1] as f64], [b[0] as f64, b[1] as f64])
        })
        .collect();
    let set_run = |y: usize, x0: f64, x1: f64, mask: &mut Vec<bool>| {
        let lo = x0.max(0.0);
        let hi = x1.min(w as f64 - 1.0);
        if lo > hi {
            return;
        }
        for x in lo as usize..=hi as usize {
            mask[y * w + x] = true;
        }
    };
    // Interior: even–odd spans between edge crossings of each row's centre line (half-open in y
    // so a vertex shared by two edges is crossed once).
    let mut xs = Vec::new();
    for y in 0..h {
        let yc = y as f64;
        xs.clear();
        for (a, b) in &edges {
            let (lo, hi) = if a[1] < b[1] { (a, b) } else { (b, a) };
            if lo[1] <= yc && yc < hi[1] {
                xs.push(lo[0] + (yc - lo[1]) * (hi[0] - lo[0]) / (hi[1] - lo[1]));
            }
        }
        xs.sort_by(|a, b| a.total_cmp(b));
        for pair in xs.chunks_exact(2) {
            set_run(
                y,
                (pair[0] - 0.5).ceil(),
                (pair[1] + 0.5).floor(),
                &mut mask,
            );
        }
    }
    // Outline: each edge drawn one pixel per step along its major axis, clipped to the image.
    for (a, b) in &edges {
        let (dx, dy) = (b[0] - a[0], b[1] - a[1]);
        if dy.abs() >= dx.abs() {
            if dy == 0.0 {
                if a[1] >= 0.0 && a[1] < h as f64 {
                    set_run(a[1] as usize, a[0].min(b[0]), a[0].max(b[0]), &mut mask);
                }
                continue;
            }
            let y0 = a[1].min(b[1]).max(0.0);
            let y1 = a[1].max(b[1]).min(h as f64 - 1.0);
            if y0 > y1 {
                continue;
            }
            for y in y0 as usize..=y1 as usize {
                let x = (a[0] + (y as f64 - a[1]) * dx / dy).round();
                set_run(y, x, x, &mut mask);
            }
        } else {
            let x0 = a[0].min(b[0]).max(0.0);
            let x1 = a[0].max(b[0]).min(w as f64 - 1.0);
            if x0 > x1 {
                continue;
            }
            for x in x0 as usize..=x1 as usize {
                let y = (a[1] + (x as f64 - a[0]) * dy / dx).round();
                if y >= 0.0 && y < h as f64 {
                    set_run(y as usize, x as f64, x as f64, &mut mask);
                }
            }
        }
    }
    mask.iter().filter(|&&m| m).count()
}

/// Share of a `w × h` image covered by the image rectangle mapped through `h` (the current frame's
/// footprint in the reference key frame), in [0, 1].
pub(crate) fn overlap_ratio(h: &Matrix3<f64>, w: u32, hgt: u32) -> f64 {
    let area = w as f64 * hgt as f64;
    if area == 0.0 {
        return 0.0;
    }
    fill_count(&mapped_corners(h, w, hgt), w, hgt) as f64 / area
}
