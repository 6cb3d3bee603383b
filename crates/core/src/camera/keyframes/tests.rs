//! Analytic checks of the pieces: sampling rules, the overlap fill, RANSAC, FAST/ORB, matching.

use super::*;
use image::{GrayImage, Luma};
use k::nalgebra::Matrix3;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn sample_indices_keep_one_per_second_and_the_last() {
    assert_eq!(sample_indices(10, 3.0), vec![0, 3, 6, 9]);
    assert_eq!(sample_indices(11, 3.0), vec![0, 3, 6, 9, 10]);
    assert_eq!(sample_indices(11, 3.9), vec![0, 3, 6, 9, 10]);
    assert_eq!(sample_indices(4, 0.5), vec![0, 1, 2, 3]);
    assert_eq!(sample_indices(3, f64::NAN), vec![0, 1, 2]);
    assert_eq!(sample_indices(1, 30.0), vec![0]);
    assert_eq!(sample_indices(0, 30.0), Vec::<usize>::new());
    assert_eq!(sample_indices(61, 30.0), vec![0, 30, 60]);
}

#[test]
fn constrained_sampling_rounds_half_to_even() {
    let l = |n: usize| (0..n).collect::<Vec<usize>>();
    // Short lists are returned unchanged.
    assert_eq!(constrained_sampling(&l(3), 4), l(3));
    assert_eq!(constrained_sampling(&l(4), 4), l(4));
    // n = 5, m = 4: step 1.5, i·step = 0, 1.5 → round 0, 2 → indices 1, 3.
    assert_eq!(constrained_sampling(&l(5), 4), vec![0, 1, 3, 4]);
    // n = 7, m = 4: step 2.5 → round(2.5) = 2 (half to even, not 3).
    assert_eq!(constrained_sampling(&l(7), 4), vec![0, 1, 3, 6]);
    // n = 7, m = 6: step 1.25 → 0, 1.25, 2.5, 3.75 → 0, 1, 2, 4.
    assert_eq!(constrained_sampling(&l(7), 6), vec![0, 1, 2, 3, 5, 6]);
    // n = 11, m = 6: step 2.25 → 0, 2.25, 4.5, 6.75 → 0, 2, 4, 7.
    assert_eq!(constrained_sampling(&l(11), 6), vec![0, 1, 3, 5, 8, 10]);
    // n = 36, m = 32: step 34/30; i = 15 gives 17.0, i = 0 gives 0.
    let s = constrained_sampling(&l(36), 32);
    assert_eq!(s.len(), 32);
    assert_eq!((s[0], s[1], s[16], s[31]), (0, 1, 18, 35));
    // Items, not indices, are sampled.
    let words = ["a", "b", "c", "d", "e"];
    assert_eq!(constrained_sampling(&words, 4), vec!["a", "b", "d", "e"]);
}

fn translation(dx: f64, dy: f64) -> Matrix3<f64> {
    Matrix3::new(1.0, 0.0, dx, 0.0, 1.0, dy, 0.0, 0.0, 1.0)
}

#[test]
fn overlap_of_known_homographies() {
    let (w, h) = (320, 240);
    assert_eq!(overlap_ratio(&Matrix3::identity(), w, h), 1.0);
    // Half the width: 160 columns, give or take the boundary column.
    for dx in [160.0, -160.0] {
        let r = overlap_ratio(&translation(dx, 0.0), w, h);
        assert!((r - 0.5).abs() <= 1.0 / 320.0 + 1e-12, "dx {dx}: {r}");
    }
    let r = overlap_ratio(&translation(0.0, 60.0), w, h);
    assert!((r - 0.75).abs() <= 1.0 / 240.0 + 1e-12, "{r}");
    assert_eq!(overlap_ratio(&translation(400.0, 0.0), w, h), 0.0);
    assert_eq!(overlap_ratio(&translation(0.0, -300.0), w, h), 0.0);
    // Scaling by ½ about the origin covers a quarter (the corner pixels on the outline count).
    let half = Matrix3::new(0.5, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 1.0);
    let r = overlap_ratio(&half, w, h);
    assert!((r - 0.25).abs() < 0.01, "{r}");
    // A 45° rotation about the centre, against the exact area of the clipped polygon.
    let (c, s) = (
        std::f64::consts::FRAC_1_SQRT_2,
        std::f64::consts::FRAC_1_SQRT_2,
    );
    let (cx, cy) = (160.0, 120.0);
    let rot = translation(cx, cy)
        * Matrix3::new(c, -s, 0.0, s, c, 0.0, 0.0, 0.0, 1.0)
        * translation(-cx, -cy);
    let r = overlap_ratio(&rot, w, h);
    let exact = clipped_area(&rot, w as f64, h as f64) / (w as f64 * h as f64);
    assert!((r - exact).abs() < 0.01, "{r} vs {exact}");
}

/// Exact area of the image rectangle mapped by `hm`, clipped to the image (Sutherland–Hodgman,
/// shoelace formula).
fn clipped_area(hm: &Matrix3<f64>, w: f64, h: f64) -> f64 {
    let mut poly: Vec<[f64; 2]> = [[0.0, 0.0], [w, 0.0], [w, h], [0.0, h]]
        .iter()
        .map(|p| apply(hm, *p).expect("finite"))
        .collect();
    let planes: [(usize, f64, bool); 4] =
        [(0, 0.0, true), (0, w, false), (1, 0.0, true), (1, h, false)];
    for (axis, v, keep_above) in planes {
        let inside = |p: &[f64; 2]| {
            if keep_above {
                p[axis] >= v
            } else {
                p[axis] <= v
            }
        };
        let mut out = Vec::new();
        for i in 0..poly.len() {
            let (a, b) = (poly[i], poly[(i + 1) % poly.len()]);
            if inside(&a) {
                out.push(a);
            }
            if inside(&a) != inside(&b) {
                let t = (v - a[axis]) / (b[axis] - a[axis]);
                out.push([a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1])]);
            }
        }
        poly = out;
    }
    let n = poly.len();
    (0..n)
        .map(|i| poly[i][0] * poly[(i + 1) % n][1] - poly[(i + 1) % n][0] * poly[i][1])
        .sum::<f64>()
        .abs()
        / 2.0
}

#[test]
fn ransac_recovers_a_homography_through_30_percent_outliers() {
    let truth = Matrix3::new(0.93, -0.12, 25.0, 0.08, 1.05, -14.0, 2e-4, -1e-4, 1.0);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut src = Vec::new();
    let mut dst = Vec::new();
    for i in 0..200 {
        let s = [rng.gen_range(0.0..320.0), rng.gen_range(0.0..240.0)];
        let d = if i % 10 < 3 {
            [rng.gen_range(0.0..320.0), rng.gen_range(0.0..240.0)]
        } else {
            apply(&truth, s).expect("finite")
        };
        src.push(s);
        dst.push(d);
    }
    let fit = find_homography(&src, &dst, &RansacParams::default()).expect("a model");
    let err = (fit.h - truth).abs().max();
    assert!(err < 1e-6, "max entry error {err:e}\n{}", fit.h);
    let inliers = fit.inliers.iter().filter(|&&m| m).count();
    // 140 true inliers; a random outlier lands within 5 px now and then.
    assert!((140..=146).contains(&inliers), "{inliers}");
    // Fewer than 4 points: no model, as OpenCV returns none.
    assert!(find_homography(&src[..3], &dst[..3], &RansacParams::default()).is_none());
    // All points on one line: every sample is degenerate.
    let line: Vec<[f64; 2]> = (0..20).map(|i| [i as f64, 2.0 * i as f64]).collect();
    assert!(find_homography(&line, &line, &RansacParams::default()).is_none());
}

/// A board of separated squares of varied grey on a dark ground (every square gives four
/// L-corners, which FAST fires on; a true checkerboard's X-junctions do not have a 9-pixel arc).
fn board(side: u32) -> GrayImage {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let cell = 20;
    let mut img = GrayImage::from_pixel(side, side, Luma([30]));
    let cells = side / cell;
    for cy in 0..cells {
        for cx in 0..cells {
            if (cx + cy) % 2 == 1 {
                continue;
            }
            let v: u8 = rng.gen_range(120..=250);
            let (inset, size) = (rng.gen_range(2..5), rng.gen_range(10..15));
            for y in 0..size {
                for x in 0..size {
                    img.put_pixel(cx * cell + inset + x, cy * cell + inset + y, Luma([v]));
                }
            }
        }
    }
    img
}

#[test]
fn orb_finds_the_same_keypoints_on_a_rotated_board() {
    let img = board(260);
    let rot = image::imageops::rotate90(&img);
    let p = OrbParams::default();
    let pattern = test_pattern();
    let a = detect_and_describe(&img, &p, &pattern);
    let b = detect_and_describe(&rot, &p, &pattern);
    assert!(a.keypoints.len() > 100, "{} keypoints", a.keypoints.len());
    assert!(a.keypoints.len() <= p.n_features + 10);
    assert_eq!(a.keypoints.len(), b.keypoints.len());
    let mut found = 0;
    let mut good_desc = 0;
    for (ka, da) in a.keypoints.iter().zip(&a.descriptors) {
        // rotate90 (clockwise) sends level pixel (x, y) to (h_l − 1 − y, x).
        let s = p.scale_factor.powi(ka.level as i32);
        let hl = (260.0 / s).round();
        let (lx, ly) = ((ka.x / s).round(), (ka.y / s).round());
        let want = (hl - 1.0 - ly, lx);
        let hit = b.keypoints.iter().zip(&b.descriptors).find(|(kb, _)| {
            kb.level == ka.level && (kb.x / s).round() == want.0 && (kb.y / s).round() == want.1
        });
        if let Some((kb, db)) = hit {
            found += 1;
            let turn = (kb.angle - ka.angle - std::f32::consts::FRAC_PI_2)
                .rem_euclid(std::f32::consts::TAU);
            let turn = turn.min(std::f32::consts::TAU - turn);
            assert!(turn < 0.01, "angle {} → {}", ka.angle, kb.angle);
            if hamming(da, db) <= 32 {
                good_desc += 1;
            }
        }
    }
    let n = a.keypoints.len();
    assert!(
        found * 100 >= 98 * n,
        "{found} of {n} keypoints found rotated"
    );
    assert!(
        good_desc * 100 >= 90 * found,
        "{good_desc} of {found} descriptors kept"
    );
}

#[test]
fn level_quotas_share_500_geometrically() {
    let q = level_quotas(&OrbParams::default());
    assert_eq!(q.len(), 8);
    assert_eq!(q.iter().sum::<usize>(), 500);
    assert!(q.windows(2).take(6).all(|w| w[0] > w[1]), "{q:?}");
    assert_eq!(q[0], 109); // 500 · (1 − 1/1.2) / (1 − 1.2⁻⁸) = 108.6
}

#[test]
fn cross_check_keeps_only_mutual_nearest_pairs() {
    let d = |bits: &[usize]| {
        let mut x = [0u8; 32];
        for &b in bits {
            x[b / 8] |= 1 << (b % 8);
        }
        x
    };
    let query = [d(&[0, 1, 2, 3]), d(&[100, 101, 102]), d(&[0, 1, 2])];
    let train = [d(&[100, 101, 102, 103]), d(&[0, 1, 2, 3, 4]), d(&[200])];
    // q0 → t1 (1 bit) and t1 → q0 (1 bit, q2 is 2): kept. q1 → t0 (1 bit) and t0 → q1: kept.
    // q2 → t1 (2 bits) but t1 → q0: dropped. t2 is nobody's nearest.
    let m = cross_check_match(&query, &train);
    let pairs: Vec<(usize, usize, u32)> =
        m.iter().map(|m| (m.query, m.train, m.distance)).collect();
    assert_eq!(pairs, vec![(0, 1, 1), (1, 0, 1)]);
    assert!(cross_check_match(&query, &[]).is_empty());
    // Ties go to the lowest index on both sides.
    let m = cross_check_match(&[d(&[5])], &[d(&[6]), d(&[7])]);
    assert_eq!((m[0].query, m[0].train, m[0].distance), (0, 0, 2));
}

#[test]
fn gray_uses_opencv_fixed_point_weights() {
    let rgb = image::RgbImage::from_raw(4, 1, vec![255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 200, 30])
        .expect("size");
    let g = to_gray(&rgb);
    // round(255·0.299) = 76, round(255·0.587) = 150, round(255·0.114) = 29; and a mixed pixel
    // (10·4899 + 200·9617 + 30·1868 + 8192) >> 14 = 124.
    assert_eq!(g.as_raw(), &vec![76, 150, 29, 124]);
}

#[test]
fn selection_refuses_nothing_and_notes_a_single_frame() {
    let o = KeyframeOptions::default();
    assert_eq!(select_keyframes(&[], &o), Err(KeyframeError::NoFrames));
    let f = image::RgbImage::new(64, 48);
    let one = select_keyframes(std::slice::from_ref(&f), &o).expect("one frame");
    assert_eq!(one.selected, vec![0]);
    assert!(one.note.is_some());
    let other = image::RgbImage::new(32, 48);
    assert!(matches!(
        select_keyframes(&[f.clone(), other], &o),
        Err(KeyframeError::SizeMismatch { index: 1, .. })
    ));
    assert_eq!(
        select_keyframes(&[image::RgbImage::new(0, 0)], &o),
        Err(KeyframeError::EmptyFrame(0))
    );
    // Blank frames have no features: every frame is a key frame and the new reference.
    let r = select_keyframes(&[f.clone(), f.clone(), f], &o).expect("blank frames");
    assert_eq!(r.keyframes, vec![0, 1, 2]);
    assert_eq!(r.selected, vec![0, 1, 2]);
    assert!(r
        .compared
        .iter()
        .all(|c| c.overlap == Overlap::NoDescriptors && c.keyframe));
    assert_eq!(r.compared[1].reference, 1);
}
