//! Exact ray intersection with the four primitive shapes, in the shape's own frame.
//!
//! Everything here is plain `f64` arithmetic on `[f64; 3]` so that the renderer's culled and
//! brute-force paths, which both call these functions with bit-identical inputs, get bit-identical
//! answers (no fused multiply-add, no reordering).

use pointact_core::geometry::Shape;

/// Which piece of a shape's surface a ray hit; enough, with the hit point, to recover the outward
/// normal without a second intersection. One byte, so the renderer keeps one per pixel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Surface {
    /// No hit (background).
    None,
    /// Box face with outward normal −x, +x, −y, +y, −z, +z.
    NegX,
    PosX,
    NegY,
    PosY,
    NegZ,
    PosZ,
    /// Curved side of a cylinder or capsule.
    Side,
    /// Flat end cap of a cylinder at z = +h / z = −h.
    CapPos,
    CapNeg,
    /// Hemispherical end of a capsule centred at z = +h / z = −h.
    DomePos,
    DomeNeg,
    /// A sphere.
    Sphere,
}

pub(crate) const BOX_FACES: [Surface; 6] = [
    Surface::NegX,
    Surface::PosX,
    Surface::NegY,
    Surface::PosY,
    Surface::NegZ,
    Surface::PosZ,
];

/// Whether the shape's sizes are finite and non-negative, which the intersection routines assume.
pub(crate) fn shape_is_valid(shape: &Shape) -> bool {
    let ok = |x: f64| x.is_finite() && x >= 0.0;
    match *shape {
        Shape::Cuboid { half_extents: h } => h.iter().all(|&x| ok(x)),
        Shape::Cylinder {
            radius,
            half_height,
        }
        | Shape::Capsule {
            radius,
            half_height,
        } => ok(radius) && ok(half_height),
        Shape::Sphere { radius } => ok(radius),
    }
}

/// Ray parameter and surface piece of the first crossing after `t_min`.
#[inline]
pub(crate) fn intersect(
    shape: &Shape,
    o: [f64; 3],
    d: [f64; 3],
    t_min: f64,
) -> Option<(f64, Surface)> {
    match *shape {
        Shape::Cuboid { half_extents: h } => hit_box([h.x, h.y, h.z], o, d, t_min),
        Shape::Cylinder {
            radius,
            half_height,
        } => hit_cylinder(radius, half_height, o, d, t_min),
        Shape::Sphere { radius } => hit_sphere(radius, o, d, t_min).map(|t| (t, Surface::Sphere)),
        Shape::Capsule {
            radius,
            half_height,
        } => hit_capsule(radius, half_height, o, d, t_min),
    }
}

/// Outward unit normal at surface point `p` (shape frame) of the piece `surface`.
pub(crate) fn local_normal(shape: &Shape, surface: Surface, p: [f64; 3]) -> [f64; 3] {
    let h = match *shape {
        Shape::Cylinder { half_height, .. } | Shape::Capsule { half_height, .. } => half_height,
        _ => 0.0,
    };
    match surface {
        Surface::NegX => [-1.0, 0.0, 0.0],
        Surface::PosX => [1.0, 0.0, 0.0],
        Surface::NegY => [0.0, -1.0, 0.0],
        Surface::PosY => [0.0, 1.0, 0.0],
        Surface::NegZ | Surface::CapNeg => [0.0, 0.0, -1.0],
        Surface::PosZ | Surface::CapPos => [0.0, 0.0, 1.0],
        Surface::Side => unit([p[0], p[1], 0.0]),
        Surface::DomePos => unit([p[0], p[1], p[2] - h]),
        Surface::DomeNeg => unit([p[0], p[1], p[2] + h]),
        Surface::Sphere => unit(p),
        Surface::None => [0.0, 0.0, 0.0],
    }
}

fn unit(v: [f64; 3]) -> [f64; 3] {
    let n = (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
    if n > 0.0 {
        [v[0] / n, v[1] / n, v[2] / n]
    } else {
        [0.0, 0.0, 0.0]
    }
}

/// Roots of `a·t² + 2·b·t + c = 0` (`a > 0`), ascending, in the cancellation-free form
/// (`q/a` and `c/q`) so that hits far from the ray origin keep full relative precision.
#[inline]
fn quadratic(a: f64, b: f64, c: f64) -> Option<(f64, f64)> {
    let disc = b * b - a * c;
    if disc < 0.0 {
        return None;
    }
    let s = disc.sqrt();
    let q = if b >= 0.0 { -b - s } else { -b + s };
    if q == 0.0 {
        return Some((0.0, 0.0));
    }
    let (t0, t1) = (q / a, c / q);
    Some(if t0 <= t1 { (t0, t1) } else { (t1, t0) })
}

/// Slab test; remembers which slab set the entry and exit so the face (and its normal) is known.
#[inline]
fn hit_box(h: [f64; 3], o: [f64; 3], d: [f64; 3], t_min: f64) -> Option<(f64, Surface)> {
    let mut t_near = f64::NEG_INFINITY;
    let mut near_face = 0;
    let mut t_far = f64::INFINITY;
    let mut far_face = 0;
    for i in 0..3 {
        if d[i] == 0.0 {
            // Parallel to this slab: either always inside it or never.
            if o[i].abs() > h[i] {
                return None;
            }
            continue;
        }
        let inv = 1.0 / d[i];
        let t_lo = (-h[i] - o[i]) * inv;
        let t_hi = (h[i] - o[i]) * inv;
        let (t0, f0, t1, f1) = if inv > 0.0 {
            (t_lo, 2 * i, t_hi, 2 * i + 1)
        } else {
            (t_hi, 2 * i + 1, t_lo, 2 * i)
        };
        if t0 > t_near {
            t_near = t0;
            near_face = f0;
        }
        if t1 < t_far {
            t_far = t1;
            far_face = f1;
        }
    }
    if t_near > t_far {
        None
    } else if t_near > t_min {
        Some((t_near, BOX_FACES[near_face]))
    } else if t_far > t_min {
        Some((t_far, BOX_FACES[far_face]))
    } else {
        None
    }
}

#[inline]
fn hit_sphere(r: f64, o: [f64; 3], d: [f64; 3], t_min: f64) -> Option<f64> {
    let a = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
    let b = o[0] * d[0] + o[1] * d[1] + o[2] * d[2];
    let c = o[0] * o[0] + o[1] * o[1] + o[2] * o[2] - r * r;
    let (t0, t1) = quadratic(a, b, c)?;
    if t0 > t_min {
        Some(t0)
    } else if t1 > t_min {
        Some(t1)
    } else {
        None
    }
}

/// Crossings of the infinite cylinder x² + y² = r² restricted to |z| ≤ h, folded into `best`.
#[inline]
fn side_hits(r: f64, h: f64, o: [f64; 3], d: [f64; 3], t_min: f64, best: &mut (f64, Surface)) {
    let a = d[0] * d[0] + d[1] * d[1];
    if a <= 0.0 {
        return;
    }
    let b = o[0] * d[0] + o[1] * d[1];
    let c = o[0] * o[0] + o[1] * o[1] - r * r;
    if let Some((t0, t1)) = quadratic(a, b, c) {
        for t in [t0, t1] {
            if t > t_min && t < best.0 && (o[2] + t * d[2]).abs() <= h {
                *best = (t, Surface::Side);
                // Roots are ascending, so the first accepted one is the nearest.
                return;
            }
        }
    }
}

#[inline]
fn hit_cylinder(r: f64, h: f64, o: [f64; 3], d: [f64; 3], t_min: f64) -> Option<(f64, Surface)> {
    let mut best = (f64::INFINITY, Surface::None);
    side_hits(r, h, o, d, t_min, &mut best);
    if d[2] != 0.0 {
        for (zc, surface) in [(h, Surface::CapPos), (-h, Surface::CapNeg)] {
            let t = (zc - o[2]) / d[2];
            if t > t_min && t < best.0 {
                let x = o[0] + t * d[0];
                let y = o[1] + t * d[1];
                if x * x + y * y <= r * r {
                    best = (t, surface);
                }
            }
        }
    }
    (best.1 != Surface::None).then_some(best)
}

/// A capsule is the union of the finite cylinder and two spheres; the first entry into a union of
/// convex pieces is the earliest entry into any piece, and the cylinder's flat caps lie inside the
/// spheres, so only the curved side and the two spheres need testing.
#[inline]
fn hit_capsule(r: f64, h: f64, o: [f64; 3], d: [f64; 3], t_min: f64) -> Option<(f64, Surface)> {
    let mut best = (f64::INFINITY, Surface::None);
    side_hits(r, h, o, d, t_min, &mut best);
    for (zc, surface) in [(h, Surface::DomePos), (-h, Surface::DomeNeg)] {
        if let Some(t) = hit_sphere(r, [o[0], o[1], o[2] - zc], d, t_min) {
            if t < best.0 {
                best = (t, surface);
            }
        }
    }
    (best.1 != Surface::None).then_some(best)
}
