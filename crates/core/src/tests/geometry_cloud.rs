//! Depth images, robust depth and point clouds through the public API.

use crate::geometry::synthetic::camera_look_at;
use crate::geometry::synthetic::{SceneBox, TabletopScene};
use crate::geometry::{
    depth_to_cloud, robust_depth, CloudOptions, CropBox, DepthImage, Distortion, GeometryError,
    Intrinsics, PointCloud, RayTable, RobustDepthOptions,
};
use k::nalgebra::{Isometry3, Point3, Vector3};

fn camera() -> Isometry3<f64> {
    camera_look_at(
        Point3::new(0.9, 0.1, 0.6),
        Point3::new(0.4, 0.0, 0.0),
        Vector3::z(),
    )
    .expect("valid look-at")
}

fn models() -> Vec<Intrinsics> {
    let base = Intrinsics::pinhole(160, 120, 150.2, 149.8, 80.3, 59.6);
    vec![
        base.clone(),
        Intrinsics {
            model: Distortion::BrownConrady,
            coeffs: [0.1715, -0.5263, -0.00121, 0.00043, 0.4874],
            ..base.clone()
        },
        Intrinsics {
            model: Distortion::InverseBrownConrady,
            coeffs: [-0.052, 0.061, 0.0013, -0.0021, -0.019],
            ..base
        },
    ]
}

/// A scene image with holes (0), NaN and negative values sprinkled in.
fn scene_depth(rays: &RayTable) -> DepthImage {
    let mut d = TabletopScene::example().render(rays, &camera());
    for (i, x) in d.data.iter_mut().enumerate() {
        match i % 37 {
            0 => *x = 0.0,
            1 => *x = f32::NAN,
            2 => *x = -1.0,
            3 => *x = f32::INFINITY,
            _ => {}
        }
    }
    d
}

/// The slow, obviously correct path: deproject each pixel with the golden-tested function and
/// transform it in f64.
fn reference_cloud(
    k: &Intrinsics,
    depth: &DepthImage,
    base_from_camera: &Isometry3<f64>,
    opts: &CloudOptions,
) -> Vec<(u32, [f64; 3])> {
    let mut out = Vec::new();
    for v in (0..depth.height).step_by(opts.stride) {
        for u in (0..depth.width).step_by(opts.stride) {
            let d = depth.data[v * depth.width + u];
            if !(d.is_finite() && d > 0.0 && d >= opts.depth_min_m && d <= opts.depth_max_m) {
                continue;
            }
            let p_cam = k
                .deproject([u as f64, v as f64], d as f64)
                .expect("deproject");
            let p = base_from_camera * Point3::from(p_cam);
            if let Some(c) = &opts.crop {
                if !c.contains([p.x, p.y, p.z]) {
                    continue;
                }
            }
            out.push(((v * depth.width + u) as u32, [p.x, p.y, p.z]));
        }
    }
    out
}

/// Compares the fast cloud with the reference. Points near a crop face may fall on either side
/// because of f32 vs f64 rounding; those are the only allowed differences in membership.
fn assert_matches_reference(
    cloud: &PointCloud,
    reference: &[(u32, [f64; 3])],
    crop: Option<CropBox>,
) {
    let near_face = |p: &[f64; 3]| {
        crop.is_some_and(|c| {
            (0..3).any(|i| (p[i] - c.min[i]).abs() < 1e-5 || (p[i] - c.max[i]).abs() < 1e-5)
        })
    };
    let mut j = 0;
    let mut compared = 0;
    for (i, &pix) in cloud.pixels.iter().enumerate() {
        while j < reference.len() && reference[j].0 < pix {
            assert!(
                near_face(&reference[j].1),
                "reference pixel {} missing from cloud",
                reference[j].0
            );
            j += 1;
        }
        let p = cloud.points[i];
        if j < reference.len() && reference[j].0 == pix {
            let r = reference[j].1;
            for a in 0..3 {
                let tol = 2e-6 * (1.0 + r[a].abs());
                assert!(
                    (p[a] as f64 - r[a]).abs() <= tol,
                    "pixel {pix} axis {a}: fast {} reference {}",
                    p[a],
                    r[a]
                );
            }
            compared += 1;
            j += 1;
        } else {
            let pf = [p[0] as f64, p[1] as f64, p[2] as f64];
            assert!(near_face(&pf), "cloud pixel {pix} not in the reference");
        }
    }
    assert!(
        compared > reference.len() * 99 / 100,
        "{compared} of {}",
        reference.len()
    );
}

#[test]
fn fast_cloud_equals_per_pixel_deproject_and_transform() {
    let crop = CropBox {
        min: [0.2, -0.3, -0.01],
        max: [0.7, 0.25, 0.15],
    };
    for k in models() {
        let rays = RayTable::new(&k).expect("table");
        let depth = scene_depth(&rays);
        for (stride, crop, threads) in [
            (1, None, 1),
            (1, Some(crop), 1),
            (3, Some(crop), 1),
            (2, None, 2),
            (1, Some(crop), 4),
        ] {
            let opts = CloudOptions {
                stride,
                crop,
                depth_min_m: 0.2,
                depth_max_m: 1.5,
                threads,
            };
            let cloud = rays.cloud(&depth, &camera(), &opts).expect("cloud");
            let reference = reference_cloud(&k, &depth, &camera(), &opts);
            assert!(!reference.is_empty());
            assert_matches_reference(&cloud, &reference, crop);
            assert!(
                cloud.pixels.windows(2).all(|w| w[0] < w[1]),
                "pixels must increase"
            );
        }
    }
}

#[test]
fn camera_frame_points_are_bit_identical_to_deproject() {
    for k in models() {
        let rays = RayTable::new(&k).expect("table");
        let depth = scene_depth(&rays);
        let cloud = rays
            .cloud(&depth, &Isometry3::identity(), &CloudOptions::default())
            .expect("cloud");
        assert!(cloud.len() > depth.data.len() / 2);
        for (i, &pix) in cloud.pixels.iter().enumerate().step_by(7) {
            let (u, v) = cloud.pixel_of(i).expect("pixel");
            assert_eq!(pix as usize, v * depth.width + u);
            let p = k
                .deproject([u as f64, v as f64], depth.data[pix as usize] as f64)
                .expect("deproject");
            assert_eq!(
                cloud.points[i],
                [p.x as f32, p.y as f32, p.z as f32],
                "pixel ({u}, {v}) {:?}",
                k.model
            );
        }
    }
}

#[test]
fn threads_do_not_change_the_result_and_buffers_are_reused() {
    let k = models()[1].clone();
    let rays = RayTable::new(&k).expect("table");
    let depth = scene_depth(&rays);
    let one = rays
        .cloud(&depth, &camera(), &CloudOptions::default())
        .expect("cloud");
    let mut out = PointCloud::default();
    for threads in [2, 3, 0] {
        let opts = CloudOptions {
            threads,
            ..CloudOptions::default()
        };
        rays.cloud_into(&depth, &camera(), &opts, &mut out)
            .expect("cloud");
        assert_eq!(out, one, "threads = {threads}");
    }
}

#[test]
fn invalid_depths_and_range_are_dropped() {
    let k = Intrinsics::pinhole(4, 2, 100.0, 100.0, 2.0, 1.0);
    let depth = DepthImage::new(
        4,
        2,
        vec![1.0, 0.0, f32::NAN, -2.0, f32::INFINITY, 0.05, 5.0, 2.0],
    )
    .expect("image");
    let opts = CloudOptions {
        depth_min_m: 0.1,
        depth_max_m: 3.0,
        ..CloudOptions::default()
    };
    let cloud = depth_to_cloud(&depth, &k, &Isometry3::identity(), &opts).expect("cloud");
    assert_eq!(cloud.pixels, vec![0, 7]);
    assert_eq!(cloud.points[0], [-0.02, -0.01, 1.0]);
}

#[test]
fn size_mismatch_names_both_sizes() {
    let k = Intrinsics::pinhole(640, 480, 600.0, 600.0, 320.0, 240.0);
    let depth = DepthImage::new(320, 240, vec![1.0; 320 * 240]).expect("image");
    let err = depth_to_cloud(&depth, &k, &Isometry3::identity(), &CloudOptions::default())
        .expect_err("sizes differ");
    assert!(matches!(err, GeometryError::SizeMismatch { .. }));
    let msg = err.to_string();
    assert!(msg.contains("320x240") && msg.contains("640x480"), "{msg}");
}

#[test]
fn bad_buffers_and_options_are_errors_not_panics() {
    assert!(matches!(
        DepthImage::new(4, 4, vec![1.0; 15]),
        Err(GeometryError::BufferLength {
            expected: 16,
            got: 15,
            ..
        })
    ));
    let k = Intrinsics::pinhole(4, 4, 10.0, 10.0, 2.0, 2.0);
    // Public fields can be made inconsistent; consumers re-check.
    let bad = DepthImage {
        width: 4,
        height: 4,
        data: vec![1.0; 3],
    };
    assert!(depth_to_cloud(&bad, &k, &Isometry3::identity(), &CloudOptions::default()).is_err());
    assert!(robust_depth(&bad, 1.0, 1.0, &RobustDepthOptions::default()).is_err());
    let good = DepthImage::new(4, 4, vec![1.0; 16]).expect("image");
    let zero_stride = CloudOptions {
        stride: 0,
        ..CloudOptions::default()
    };
    assert!(matches!(
        depth_to_cloud(&good, &k, &Isometry3::identity(), &zero_stride),
        Err(GeometryError::InvalidOption {
            field: "stride",
            ..
        })
    ));
    let inverted = CloudOptions {
        crop: Some(CropBox {
            min: [1.0, 0.0, 0.0],
            max: [0.0, 1.0, 1.0],
        }),
        ..CloudOptions::default()
    };
    assert!(depth_to_cloud(&good, &k, &Isometry3::identity(), &inverted).is_err());
    let mbc = Intrinsics {
        model: Distortion::ModifiedBrownConrady,
        ..k.clone()
    };
    assert!(matches!(
        RayTable::new(&mbc),
        Err(GeometryError::NotDeprojectable { .. })
    ));
    let zero_f = Intrinsics { fx: 0.0, ..k };
    assert!(matches!(
        RayTable::new(&zero_f),
        Err(GeometryError::InvalidIntrinsics { field: "fx", .. })
    ));
}

#[test]
fn from_u16_applies_the_depth_scale() {
    // L515: 0.25 mm per unit; D400 default: 1 mm.
    let l515 = DepthImage::from_u16(2, 1, &[4000, 0], 0.00025).expect("image");
    assert_eq!(l515.data, vec![1.0, 0.0]);
    assert_eq!(l515.get(0, 0), Some(1.0));
    assert_eq!(l515.get(1, 0), None, "raw 0 is invalid");
    let d400 = DepthImage::from_u16(2, 1, &[1500, 65535], 0.001).expect("image");
    assert!((d400.data[0] - 1.5).abs() < 1e-6 && (d400.data[1] - 65.535).abs() < 1e-3);
    assert!(DepthImage::from_u16(2, 1, &[1, 2], 0.0).is_err());
    assert!(DepthImage::from_u16(2, 2, &[1, 2], 0.001).is_err());
}

#[test]
fn robust_depth_takes_the_percentile_of_valid_pixels() {
    // 5x5 window over a 7x7 image: values 1..=25 row-major in the window, a few holes.
    let mut data = vec![0.0f32; 49];
    for v in 1..6 {
        for u in 1..6 {
            data[v * 7 + u] = ((v - 1) * 5 + (u - 1) + 1) as f32;
        }
    }
    data[7 + 1] = 0.0; // hole (was 1)
    data[2 * 7 + 2] = f32::NAN; // hole (was 7)
    let img = DepthImage::new(7, 7, data).expect("image");
    let opts = RobustDepthOptions {
        window: 5,
        percentile: 50.0,
        min_valid_fraction: 0.5,
    };
    // Valid: 2..=25 without 7 -> 23 values, median is the 12th: 2,3,4,5,6,8,9,10,11,12,13,14 -> 14.
    assert_eq!(robust_depth(&img, 3.0, 3.0, &opts).expect("depth"), 14.0);
    let low = RobustDepthOptions {
        percentile: 0.0,
        ..opts.clone()
    };
    assert_eq!(robust_depth(&img, 3.2, 2.8, &low).expect("depth"), 2.0);
    let high = RobustDepthOptions {
        percentile: 100.0,
        ..opts.clone()
    };
    assert_eq!(robust_depth(&img, 3.0, 3.0, &high).expect("depth"), 25.0);
}

#[test]
fn robust_depth_rejects_sparse_windows_with_counts() {
    let mut data = vec![0.0f32; 100];
    data[5 * 10 + 5] = 1.0;
    data[5 * 10 + 6] = 1.1;
    let img = DepthImage::new(10, 10, data).expect("image");
    let opts = RobustDepthOptions {
        window: 3,
        percentile: 50.0,
        min_valid_fraction: 0.3,
    };
    match robust_depth(&img, 5.0, 5.0, &opts) {
        Err(GeometryError::TooFewValidDepth { valid, total, .. }) => {
            assert_eq!((valid, total), (2, 9));
        }
        other => panic!("expected TooFewValidDepth, got {other:?}"),
    }
    let lenient = RobustDepthOptions {
        min_valid_fraction: 0.2,
        ..opts.clone()
    };
    assert!((robust_depth(&img, 5.0, 5.0, &lenient).expect("depth") - 1.05).abs() < 1e-6);
    // At the corner the window is clipped to 2x2 = 4 pixels, all holes.
    match robust_depth(&img, 0.0, 0.0, &lenient) {
        Err(GeometryError::TooFewValidDepth {
            valid: 0, total: 4, ..
        }) => {}
        other => panic!("expected an empty clipped window, got {other:?}"),
    }
    assert!(matches!(
        robust_depth(&img, 10.0, 2.0, &opts),
        Err(GeometryError::PixelOutsideImage {
            width: 10,
            height: 10,
            ..
        })
    ));
    assert!(matches!(
        robust_depth(&img, 5.0, 5.0, &RobustDepthOptions { window: 4, ..opts }),
        Err(GeometryError::InvalidOption {
            field: "window",
            ..
        })
    ));
}

#[test]
fn robust_low_percentile_ignores_background_bleed_at_an_edge() {
    // A box edge: the grasp point sits on the box (0.5 m) but a third of the window sees the
    // table behind it (0.8 m); the 25th percentile stays on the box, a mean would not.
    let k = Intrinsics::pinhole(40, 40, 50.0, 50.0, 20.0, 20.0);
    let data: Vec<f32> = (0..1600)
        .map(|i| if i % 40 < 22 { 0.5 } else { 0.8 })
        .collect();
    let img = DepthImage::new(40, 40, data).expect("image");
    let d = robust_depth(&img, 20.0, 20.0, &RobustDepthOptions::grasp()).expect("depth");
    assert_eq!(d, 0.5);
    let p = k.deproject([20.0, 20.0], d as f64).expect("deproject");
    assert!((p.z - 0.5).abs() < 1e-9);
}

#[test]
fn points_near_a_pixel_are_found_through_the_pixel_index() {
    let k = models()[0].clone();
    let rays = RayTable::new(&k).expect("table");
    let depth = scene_depth(&rays);
    let cloud = rays
        .cloud(
            &depth,
            &camera(),
            &CloudOptions {
                stride: 2,
                ..CloudOptions::default()
            },
        )
        .expect("cloud");
    let (u, v, r) = (81.3, 40.7, 4.5);
    let found = cloud.indices_near_pixel(u, v, r);
    let brute: Vec<usize> = (0..cloud.len())
        .filter(|&i| {
            let (pu, pv) = cloud.pixel_of(i).expect("pixel");
            let (du, dv) = (pu as f64 - u, pv as f64 - v);
            du * du + dv * dv <= r * r
        })
        .collect();
    assert!(!brute.is_empty());
    assert_eq!(found, brute);
    let nearest = cloud.nearest_to_pixel(u, v, r).expect("a point nearby");
    assert!(brute.contains(&nearest));
}

#[test]
fn synthetic_scene_depth_is_exact_on_the_table_and_boxes() {
    let k = models()[1].clone();
    let rays = RayTable::new(&k).expect("table");
    let scene = TabletopScene {
        table_height_m: 0.02,
        boxes: vec![SceneBox {
            min: [0.35, -0.05, 0.02],
            max: [0.45, 0.05, 0.12],
        }],
    };
    let depth = scene.render(&rays, &camera());
    let cloud = rays
        .cloud(&depth, &camera(), &CloudOptions::default())
        .expect("cloud");
    let (mut on_table, mut on_box) = (0, 0);
    for p in &cloud.points {
        let z = p[2] as f64;
        let in_box_xy = (0.35 - 1e-5..=0.45 + 1e-5).contains(&(p[0] as f64))
            && (-0.05 - 1e-5..=0.05 + 1e-5).contains(&(p[1] as f64));
        if (z - 0.02).abs() < 1e-5 {
            on_table += 1;
        } else if in_box_xy && z <= 0.12 + 1e-5 {
            on_box += 1;
        } else {
            panic!("point {p:?} is on neither the table nor the box");
        }
    }
    assert!(on_table > 1000 && on_box > 100, "{on_table} {on_box}");
}
