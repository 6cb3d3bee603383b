//! Four rays at once against a cylinder or a box, in AVX lanes, with the scalar arithmetic of
//! [`super::intersect`] kept operation for operation (no fused multiply-add, the same order, the
//! same comparisons with NaN falling the same way), so each lane's answer is bit for bit the scalar
//! one. Why: the renderer's re-trace spends most of its time intersecting rays with the arm's
//! links (cylinders and boxes, about 95 % of those rays on a moving xArm), and consecutive pixels
//! of a row meet the same primitive. Capsules and spheres stay scalar. Without AVX (checked at
//! run time) the scalar function answers each lane.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::intersect::{intersect, Surface, BOX_FACES};
use pointact_core::geometry::Shape;

/// [`super::intersect::intersect`] for four rays sharing `o`: lane `i` of the answer is the
/// scalar answer for direction `d[.][i]`. Cylinders and boxes take AVX lanes where the CPU has
/// them; anything else is answered lane by lane by the scalar function.
pub(crate) fn intersect4(
    shape: &Shape,
    o: [f64; 3],
    d: [[f64; 4]; 3],
    t_min: f64,
) -> [Option<(f64, Surface)>; 4] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx") {
        match *shape {
            // SAFETY (both): the CPU has AVX (checked just above).
            Shape::Cylinder {
                radius,
                half_height,
            } => return unsafe { hit_cylinder4_avx(radius, half_height, o, d, t_min) },
            Shape::Cuboid { half_extents: h } => {
                return unsafe { hit_box4_avx([h.x, h.y, h.z], o, d, t_min) }
            }
            _ => {}
        }
    }
    std::array::from_fn(|i| intersect(shape, o, [d[0][i], d[1][i], d[2][i]], t_min))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn hit_cylinder4_avx(
    r: f64,
    h: f64,
    o: [f64; 3],
    d: [[f64; 4]; 3],
    t_min: f64,
) -> [Option<(f64, Surface)>; 4] {
    let (d0, d1, d2) = (
        _mm256_loadu_pd(d[0].as_ptr()),
        _mm256_loadu_pd(d[1].as_ptr()),
        _mm256_loadu_pd(d[2].as_ptr()),
    );
    let (o0, o1, o2) = (
        _mm256_set1_pd(o[0]),
        _mm256_set1_pd(o[1]),
        _mm256_set1_pd(o[2]),
    );
    let (tmin, inf, zero) = (
        _mm256_set1_pd(t_min),
        _mm256_set1_pd(f64::INFINITY),
        _mm256_setzero_pd(),
    );
    let abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(i64::MAX));
    // Surface codes per lane: 0 none, 1 side, 2 cap +h, 3 cap −h.
    let mut best_t = inf;
    let mut best_s = zero;

    // side_hits
    let a = _mm256_add_pd(_mm256_mul_pd(d0, d0), _mm256_mul_pd(d1, d1));
    let side_ok = _mm256_cmp_pd::<_CMP_NLE_UQ>(a, zero); // !(a <= 0), NaN passes as in scalar
    let b = _mm256_add_pd(_mm256_mul_pd(o0, d0), _mm256_mul_pd(o1, d1));
    let c = _mm256_set1_pd(o[0] * o[0] + o[1] * o[1] - r * r);
    let disc = _mm256_sub_pd(_mm256_mul_pd(b, b), _mm256_mul_pd(a, c));
    let real = _mm256_cmp_pd::<_CMP_NLT_UQ>(disc, zero); // !(disc < 0)
    let s = _mm256_sqrt_pd(disc);
    let neg_b = _mm256_xor_pd(b, _mm256_set1_pd(-0.0)); // `-b`: the sign flipped, as scalar negation
    let b_nonneg = _mm256_cmp_pd::<_CMP_GE_OQ>(b, zero);
    let q = _mm256_blendv_pd(_mm256_add_pd(neg_b, s), _mm256_sub_pd(neg_b, s), b_nonneg);
    let q_zero = _mm256_cmp_pd::<_CMP_EQ_OQ>(q, zero);
    let t0 = _mm256_blendv_pd(_mm256_div_pd(q, a), zero, q_zero);
    let t1 = _mm256_blendv_pd(_mm256_div_pd(c, q), zero, q_zero);
    let ordered = _mm256_cmp_pd::<_CMP_LE_OQ>(t0, t1);
    let lo = _mm256_blendv_pd(t1, t0, ordered);
    let hi = _mm256_blendv_pd(t0, t1, ordered);
    let live = _mm256_and_pd(side_ok, real);
    let hv = _mm256_set1_pd(h);
    // `t` is taken when past the near plane, nearer than `best` and within the height.
    let accept = |t: __m256d| {
        let z = _mm256_and_pd(_mm256_add_pd(o2, _mm256_mul_pd(t, d2)), abs_mask);
        let ahead = _mm256_and_pd(
            _mm256_cmp_pd::<_CMP_GT_OQ>(t, tmin),
            _mm256_cmp_pd::<_CMP_LT_OQ>(t, best_t),
        );
        _mm256_and_pd(
            live,
            _mm256_and_pd(ahead, _mm256_cmp_pd::<_CMP_LE_OQ>(z, hv)),
        )
    };
    let first = accept(lo);
    let second = _mm256_andnot_pd(first, accept(hi));
    best_t = _mm256_blendv_pd(best_t, lo, first);
    best_t = _mm256_blendv_pd(best_t, hi, second);
    best_s = _mm256_blendv_pd(best_s, _mm256_set1_pd(1.0), _mm256_or_pd(first, second));

    // caps
    let caps_ok = _mm256_cmp_pd::<_CMP_NEQ_UQ>(d2, zero); // d2 != 0 (NaN passes)
    let rr = _mm256_set1_pd(r * r);
    for (zc, code) in [(h, 2.0), (-h, 3.0)] {
        let t = _mm256_div_pd(_mm256_sub_pd(_mm256_set1_pd(zc), o2), d2);
        let x = _mm256_add_pd(o0, _mm256_mul_pd(t, d0));
        let y = _mm256_add_pd(o1, _mm256_mul_pd(t, d1));
        let inside = _mm256_cmp_pd::<_CMP_LE_OQ>(
            _mm256_add_pd(_mm256_mul_pd(x, x), _mm256_mul_pd(y, y)),
            rr,
        );
        let take = _mm256_and_pd(
            caps_ok,
            _mm256_and_pd(
                _mm256_and_pd(
                    _mm256_cmp_pd::<_CMP_GT_OQ>(t, tmin),
                    _mm256_cmp_pd::<_CMP_LT_OQ>(t, best_t),
                ),
                inside,
            ),
        );
        best_t = _mm256_blendv_pd(best_t, t, take);
        best_s = _mm256_blendv_pd(best_s, _mm256_set1_pd(code), take);
    }
    let (mut ts, mut ss) = ([0.0f64; 4], [0.0f64; 4]);
    _mm256_storeu_pd(ts.as_mut_ptr(), best_t);
    _mm256_storeu_pd(ss.as_mut_ptr(), best_s);
    let mut out = [None; 4];
    for ((o, &t), &code) in out.iter_mut().zip(&ts).zip(&ss) {
        *o = match code as u8 {
            1 => Some((t, Surface::Side)),
            2 => Some((t, Surface::CapPos)),
            3 => Some((t, Surface::CapNeg)),
            _ => None,
        };
    }
    out
}

/// The slab test of a cuboid with half extents `h`, four lanes: the axes run in the scalar
/// order with the same strict comparisons, so ties pick the same face.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn hit_box4_avx(
    h: [f64; 3],
    o: [f64; 3],
    d: [[f64; 4]; 3],
    t_min: f64,
) -> [Option<(f64, Surface)>; 4] {
    let zero = _mm256_setzero_pd();
    let mut t_near = _mm256_set1_pd(f64::NEG_INFINITY);
    let mut t_far = _mm256_set1_pd(f64::INFINITY);
    let (mut near_face, mut far_face) = (zero, zero);
    // Lanes parallel to a slab they lie outside of: no hit whatever the other axes say.
    let mut missed = zero;
    for (axis, row) in d.iter().enumerate() {
        let da = _mm256_loadu_pd(row.as_ptr());
        let parallel = _mm256_cmp_pd::<_CMP_EQ_OQ>(da, zero);
        if o[axis].abs() > h[axis] {
            missed = _mm256_or_pd(missed, parallel);
        }
        let inv = _mm256_div_pd(_mm256_set1_pd(1.0), da);
        let t_lo = _mm256_mul_pd(_mm256_set1_pd(-h[axis] - o[axis]), inv);
        let t_hi = _mm256_mul_pd(_mm256_set1_pd(h[axis] - o[axis]), inv);
        let forward = _mm256_cmp_pd::<_CMP_GT_OQ>(inv, zero);
        let (lo_face, hi_face) = (
            _mm256_set1_pd((2 * axis) as f64),
            _mm256_set1_pd((2 * axis + 1) as f64),
        );
        let t0 = _mm256_blendv_pd(t_hi, t_lo, forward);
        let f0 = _mm256_blendv_pd(hi_face, lo_face, forward);
        let t1 = _mm256_blendv_pd(t_lo, t_hi, forward);
        let f1 = _mm256_blendv_pd(lo_face, hi_face, forward);
        // A parallel lane skips the axis, as the scalar `continue` does.
        let nearer = _mm256_andnot_pd(parallel, _mm256_cmp_pd::<_CMP_GT_OQ>(t0, t_near));
        t_near = _mm256_blendv_pd(t_near, t0, nearer);
        near_face = _mm256_blendv_pd(near_face, f0, nearer);
        let farther = _mm256_andnot_pd(parallel, _mm256_cmp_pd::<_CMP_LT_OQ>(t1, t_far));
        t_far = _mm256_blendv_pd(t_far, t1, farther);
        far_face = _mm256_blendv_pd(far_face, f1, farther);
    }
    let tmin = _mm256_set1_pd(t_min);
    let open = _mm256_andnot_pd(
        _mm256_or_pd(missed, _mm256_cmp_pd::<_CMP_GT_OQ>(t_near, t_far)),
        _mm256_castsi256_pd(_mm256_set1_epi64x(-1)),
    );
    let near_ok = _mm256_and_pd(open, _mm256_cmp_pd::<_CMP_GT_OQ>(t_near, tmin));
    let far_ok = _mm256_andnot_pd(
        near_ok,
        _mm256_and_pd(open, _mm256_cmp_pd::<_CMP_GT_OQ>(t_far, tmin)),
    );
    let t = _mm256_blendv_pd(t_far, t_near, near_ok);
    let face = _mm256_blendv_pd(far_face, near_face, near_ok);
    let (mut ts, mut fs) = ([0.0f64; 4], [0.0f64; 4]);
    _mm256_storeu_pd(ts.as_mut_ptr(), t);
    _mm256_storeu_pd(fs.as_mut_ptr(), face);
    let hit = _mm256_movemask_pd(_mm256_or_pd(near_ok, far_ok));
    let mut out = [None; 4];
    for (i, o) in out.iter_mut().enumerate() {
        if hit >> i & 1 == 1 {
            *o = Some((ts[i], BOX_FACES[fs[i] as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Four directions from `o`, component by component: mostly towards `aim(rng, lane, axis)`,
    /// some zero or negative zero (parallel to a slab or the axis), some random.
    fn directions(
        rng: &mut ChaCha8Rng,
        o: [f64; 3],
        mut aim: impl FnMut(&mut ChaCha8Rng, usize, usize) -> f64,
    ) -> [[f64; 4]; 3] {
        let mut d = [[0.0; 4]; 3];
        for lane in 0..4 {
            for (k, row) in d.iter_mut().enumerate() {
                let toward = aim(rng, lane, k);
                row[lane] = match rng.gen_range(0..10) {
                    0 => 0.0,
                    1 => -0.0,
                    2 => rng.gen_range(-1.0..1.0),
                    _ => toward - o[k],
                };
            }
        }
        d
    }

    /// Asserts that every lane of `got` is the scalar answer bit for bit; the scalar hits.
    fn assert_lanes_are_scalar(
        got: [Option<(f64, Surface)>; 4],
        shape: &Shape,
        o: [f64; 3],
        d: [[f64; 4]; 3],
        t_min: f64,
    ) -> usize {
        let mut hits = 0;
        for (lane, got) in got.iter().enumerate() {
            let dl = [d[0][lane], d[1][lane], d[2][lane]];
            let want = intersect(shape, o, dl, t_min);
            hits += want.is_some() as usize;
            assert_eq!(
                got.map(|(t, s)| (t.to_bits(), s)),
                want.map(|(t, s)| (t.to_bits(), s)),
                "{shape:?} o {o:?} d {dl:?} t_min {t_min}"
            );
        }
        hits
    }

    /// Every lane equals the scalar answer bit for bit, over random rays from outside, inside,
    /// on the caps' planes and along the axis, with zero direction components.
    #[test]
    fn four_lanes_equal_the_scalar_intersection_bit_for_bit() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let (mut hits, runs) = (0usize, 200_000);
        for n in 0..runs {
            let r = rng.gen_range(0.0..0.1);
            let h = rng.gen_range(0.0..0.2);
            let mut o = [0.0; 3].map(|_| rng.gen_range(-0.5..0.5));
            if n % 7 == 0 {
                o[2] = if n % 2 == 0 { h } else { -h };
            }
            // Mostly aimed at a point near the cylinder, so that about half hit.
            let d = directions(&mut rng, o, |rng, _, k| {
                rng.gen_range(-1.3..1.3) * if k == 2 { h } else { r }
            });
            let t_min = if n % 5 == 0 { 0.0 } else { 1e-4 };
            let shape = Shape::Cylinder {
                radius: r,
                half_height: h,
            };
            hits += assert_lanes_are_scalar(intersect4(&shape, o, d, t_min), &shape, o, d, t_min);
        }
        assert!(
            hits > runs,
            "{hits} hits in {} rays: the rays must meet the cylinder often",
            4 * runs
        );
    }

    /// Every lane equals the scalar slab test bit for bit: rays from outside, inside and on the
    /// faces' planes, directions with zero and negative-zero components (parallel to a slab),
    /// flat boxes, and rays through edges where two slabs tie.
    #[test]
    fn four_lanes_equal_the_scalar_box_test_bit_for_bit() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (mut hits, runs) = (0usize, 200_000);
        for n in 0..runs {
            let mut h = [0.0; 3].map(|_| rng.gen_range(0.0..0.2));
            if n % 13 == 0 {
                h[n % 3] = 0.0;
            }
            let mut o = [0.0; 3].map(|_| rng.gen_range(-0.5..0.5));
            if n % 7 == 0 {
                let axis = n % 3;
                o[axis] = if n % 2 == 0 { h[axis] } else { -h[axis] };
            }
            // Aimed at a corner now and then, so that slabs tie.
            let corner: [bool; 4] = std::array::from_fn(|_| rng.gen_range(0..8) == 0);
            let d = directions(&mut rng, o, |rng, lane, k| {
                if corner[lane] {
                    h[k]
                } else {
                    rng.gen_range(-1.3..1.3) * h[k]
                }
            });
            let t_min = if n % 5 == 0 { 0.0 } else { 1e-4 };
            let shape = Shape::Cuboid {
                half_extents: h.into(),
            };
            hits += assert_lanes_are_scalar(intersect4(&shape, o, d, t_min), &shape, o, d, t_min);
        }
        assert!(
            hits > runs,
            "{hits} hits in {} rays: the rays must meet the box often",
            4 * runs
        );
    }
}
