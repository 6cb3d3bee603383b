//! Table plane (RANSAC + least squares) and normals, on analytic scenes.

use crate::geometry::synthetic::camera_look_at;
use crate::geometry::synthetic::{SceneBox, TabletopScene};
use crate::geometry::{
    cloud_normals, fit_table_plane, normal_at_pixel, CloudOptions, Distortion, GeometryError,
    Intrinsics, NormalAtPixelOptions, NormalOptions, PlaneOptions, RayTable,
};
use k::nalgebra::{Isometry3, Point3, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn camera() -> Isometry3<f64> {
    camera_look_at(
        Point3::new(0.95, 0.05, 0.55),
        Point3::new(0.4, 0.0, 0.0),
        Vector3::z(),
    )
    .expect("look-at")
}

fn intrinsics() -> Intrinsics {
    Intrinsics {
        model: Distortion::BrownConrady,
        coeffs: [0.1715, -0.5263, -0.00121, 0.00043, 0.4874],
        ..Intrinsics::pinhole(320, 240, 300.2, 300.1, 161.3, 120.9)
    }
}

fn scene(table: f64) -> TabletopScene {
    TabletopScene {
        table_height_m: table,
        boxes: vec![
            SceneBox {
                min: [0.30, -0.15, table],
                max: [0.40, -0.05, table + 0.12],
            },
            SceneBox {
                min: [0.42, 0.02, table],
                max: [0.55, 0.15, table + 0.06],
            },
        ],
    }
}

#[test]
fn ransac_finds_the_table_under_boxes() {
    let rays = RayTable::new(&intrinsics()).expect("table");
    let depth = scene(0.03).render(&rays, &camera());
    let cloud = rays
        .cloud(&depth, &camera(), &CloudOptions::default())
        .expect("cloud");
    let plane = fit_table_plane(&cloud.points, &PlaneOptions::default()).expect("plane");
    assert!(plane.normal.z > 0.0, "normal must point up");
    assert!(plane.tilt() < 1e-4, "tilt {} rad", plane.tilt());
    // The bottom centimetre of the box sides lies inside the 1 cm inlier band and pulls the
    // least-squares fit by ~1e-5 m; the bare table below shows the fit itself is exact.
    assert!(
        (plane.offset - 0.03).abs() < 5e-5,
        "offset {}",
        plane.offset
    );
    let expected = cloud
        .points
        .iter()
        .filter(|p| (p[2] as f64 - 0.03).abs() <= 0.01)
        .count();
    assert_eq!(plane.inliers, expected);
    assert!(
        plane.inliers < cloud.len(),
        "box points must not be inliers"
    );
    assert!(plane.rms_m < 1e-3, "rms {}", plane.rms_m);
    assert!(plane.signed_distance(&Vector3::new(0.3, 0.0, 0.13)) > 0.09);

    let bare = TabletopScene {
        table_height_m: 0.03,
        boxes: vec![],
    }
    .render(&rays, &camera());
    let cloud = rays
        .cloud(&bare, &camera(), &CloudOptions::default())
        .expect("cloud");
    let plane = fit_table_plane(&cloud.points, &PlaneOptions::default()).expect("plane");
    assert!(
        (plane.offset - 0.03).abs() < 1e-6,
        "offset {}",
        plane.offset
    );
    assert!(plane.tilt() < 1e-5, "tilt {}", plane.tilt());
    assert_eq!(plane.inliers, cloud.len());
}

/// A tilted, noisy plane with 30 % outliers above it.
fn noisy_points(seed: u64, normal: Vector3<f64>, offset: f64) -> Vec<[f32; 3]> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = normal.normalize();
    let a = n.cross(&Vector3::x()).normalize();
    let b = n.cross(&a);
    (0..6000)
        .map(|i| {
            let p = if i % 10 < 7 {
                let (s, t) = (rng.gen_range(-0.5..0.5), rng.gen_range(-0.5..0.5));
                n * (offset + rng.gen_range(-0.003..0.003)) + a * s + b * t
            } else {
                Vector3::new(
                    rng.gen_range(-0.5..0.5),
                    rng.gen_range(-0.5..0.5),
                    rng.gen_range(0.02..0.4),
                )
            };
            [p.x as f32, p.y as f32, p.z as f32]
        })
        .collect()
}

#[test]
fn ransac_recovers_a_tilted_noisy_plane_deterministically() {
    let truth = Vector3::new(10f64.to_radians().sin(), 0.0, 10f64.to_radians().cos());
    let pts = noisy_points(7, truth, 0.05);
    let opts = PlaneOptions {
        seed: 3,
        ..PlaneOptions::default()
    };
    let plane = fit_table_plane(&pts, &opts).expect("plane");
    let angle = plane.normal.angle(&truth);
    assert!(angle < 0.5f64.to_radians(), "normal off by {angle} rad");
    assert!(
        (plane.offset - 0.05).abs() < 0.002,
        "offset {}",
        plane.offset
    );
    assert!(plane.inliers >= 4000, "{} inliers", plane.inliers);
    // Same input and seed: the very same plane.
    assert_eq!(fit_table_plane(&pts, &opts).expect("plane"), plane);
}

#[test]
fn a_plane_given_upside_down_is_returned_with_its_normal_up() {
    let pts = noisy_points(9, Vector3::new(0.0, 0.0, -1.0), -0.2);
    let plane = fit_table_plane(&pts, &PlaneOptions::default()).expect("plane");
    assert!(plane.normal.z > 0.999);
    assert!((plane.offset - 0.2).abs() < 0.002);
}

#[test]
fn too_few_inliers_is_an_error_with_counts() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let scattered: Vec<[f32; 3]> = (0..500)
        .map(|_| {
            [
                rng.gen_range(-1.0..1.0),
                rng.gen_range(-1.0..1.0),
                rng.gen_range(-1.0..1.0),
            ]
        })
        .collect();
    let opts = PlaneOptions {
        min_inliers: 200,
        ..PlaneOptions::default()
    };
    match fit_table_plane(&scattered, &opts) {
        Err(GeometryError::TooFewInliers {
            inliers,
            required,
            points,
        }) => {
            assert!(inliers < 200);
            assert_eq!((required, points), (200, 500));
        }
        other => panic!("expected TooFewInliers, got {other:?}"),
    }
    assert!(matches!(
        fit_table_plane(&[[0.0, 0.0, 0.0]; 2], &PlaneOptions::default()),
        Err(GeometryError::TooFew { got: 2, .. })
    ));
}

#[test]
fn walls_are_not_tables_unless_allowed() {
    let wall: Vec<[f32; 3]> = (0..40)
        .flat_map(|i| (0..40).map(move |j| [1.0, i as f32 * 0.01, j as f32 * 0.01]))
        .collect();
    assert!(matches!(
        fit_table_plane(&wall, &PlaneOptions::default()),
        Err(GeometryError::TooFewInliers { .. })
    ));
    let any = PlaneOptions {
        max_tilt_deg: 90.0,
        ..PlaneOptions::default()
    };
    let plane = fit_table_plane(&wall, &any).expect("wall");
    assert!(plane.normal.x.abs() > 0.9999);
    assert!((plane.signed_distance(&Vector3::new(1.0, 0.2, 0.2))).abs() < 1e-9);
}

#[test]
fn grid_normals_are_up_on_horizontal_faces_and_outward_on_the_front_face() {
    let rays = RayTable::new(&intrinsics()).expect("table");
    let scene = scene(0.0);
    let depth = scene.render(&rays, &camera());
    let cloud = rays
        .cloud(&depth, &camera(), &CloudOptions::default())
        .expect("cloud");
    let normals = cloud_normals(&rays, &depth, &camera(), &cloud, &NormalOptions::default())
        .expect("normals");
    assert_eq!(normals.len(), cloud.len());
    let known = normals.iter().filter(|n| n.is_some()).count();
    assert!(
        known * 100 >= cloud.len() * 95,
        "{known} of {}",
        cloud.len()
    );
    let (mut horizontal, mut front) = (0, 0);
    for (p, n) in cloud.points.iter().zip(&normals) {
        let Some(n) = n else { continue };
        let p = [p[0] as f64, p[1] as f64, p[2] as f64];
        let n = Vector3::new(n[0] as f64, n[1] as f64, n[2] as f64);
        assert!((n.norm() - 1.0).abs() < 1e-5);
        // Points well inside the table (away from boxes) or a box top.
        let near_box = scene
            .boxes
            .iter()
            .any(|b| (0..2).all(|i| p[i] > b.min[i] - 0.02 && p[i] < b.max[i] + 0.02));
        let on_top = scene.boxes.iter().any(|b| {
            (p[2] - b.max[2]).abs() < 1e-5
                && (0..2).all(|i| p[i] > b.min[i] + 0.01 && p[i] < b.max[i] - 0.01)
        });
        if (p[2].abs() < 1e-5 && !near_box) || on_top {
            assert!(n.z > 0.999, "horizontal face at {p:?}: normal {n:?}");
            horizontal += 1;
        }
        // The +x face of the first box faces the camera.
        let b = &scene.boxes[0];
        if (p[0] - b.max[0]).abs() < 1e-5
            && p[1] > b.min[1] + 0.01
            && p[1] < b.max[1] - 0.01
            && p[2] > 0.01
            && p[2] < b.max[2] - 0.01
        {
            assert!(n.x > 0.999, "front face at {p:?}: normal {n:?}");
            front += 1;
        }
    }
    assert!(horizontal > 10_000 && front > 50, "{horizontal} {front}");
}

#[test]
fn normal_at_pixel_fits_the_surface_under_the_pixel() {
    let k = intrinsics();
    let rays = RayTable::new(&k).expect("table");
    let scene = scene(0.0);
    let depth = scene.render(&rays, &camera());
    let camera_from_base = camera().inverse();
    let pixel_of = |p: Point3<f64>| {
        let c = camera_from_base * p;
        k.project(&c.coords).expect("in front")
    };
    let opts = NormalAtPixelOptions::default();
    let table_px = pixel_of(Point3::new(0.2, 0.2, 0.0));
    let n =
        normal_at_pixel(&rays, &depth, &camera(), table_px[0], table_px[1], &opts).expect("normal");
    assert!(n.z > 0.9999, "table normal {n:?}");
    let front_px = pixel_of(Point3::new(0.40, -0.10, 0.06));
    let n =
        normal_at_pixel(&rays, &depth, &camera(), front_px[0], front_px[1], &opts).expect("normal");
    assert!(n.x > 0.9999, "front-face normal {n:?}");
    // A window with no depth at all is refused.
    let mut empty = depth.clone();
    empty.data.iter_mut().for_each(|d| *d = 0.0);
    assert!(matches!(
        normal_at_pixel(&rays, &empty, &camera(), 10.0, 10.0, &opts),
        Err(GeometryError::TooFewValidDepth { valid: 0, .. })
    ));
}
