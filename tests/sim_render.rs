//! The simulated camera against closed-form answers: depths of spheres, boxes, cylinders and
//! capsules placed on the optical axis, occlusion and ids, Lambert shading, culled == brute force,
//! deprojection landing on the surfaces, and the sensor model's determinism, bias and hole placement.

use std::f64::consts::PI;

use pointact::geometry::{Intrinsics, Shape};
use pointact::nalgebra::{Isometry3, Point3, Vector3};
use pointact::sim::render::{
    linear_to_srgb, render, render_brute_force, PinholeCamera, RenderError, RenderOptions,
    RenderOutput,
};
use pointact::sim::{Primitive, RenderScene, BACKGROUND_INSTANCE, NO_PART};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const W: u32 = 101;
const H: u32 = 81;
const F: f64 = 120.0;
/// Odd image sizes put the principal point on a pixel centre.
const CX: f64 = 50.0;
const CY: f64 = 40.0;

fn camera(eye: [f64; 3], target: [f64; 3], up: [f64; 3]) -> PinholeCamera {
    PinholeCamera::look_at(
        Point3::from(eye),
        Point3::from(target),
        Vector3::from(up),
        Intrinsics::pinhole(W as usize, H as usize, F, F, CX, CY),
    )
    .unwrap()
}

/// Camera at the origin looking down world +x, world z up (so image up is +z, image right is −y).
fn forward_camera() -> PinholeCamera {
    camera([0.0; 3], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0])
}

fn prim(shape: Shape, pose: Isometry3<f64>, instance: u16, part: u8) -> Primitive {
    Primitive {
        shape,
        world_from_shape: pose,
        color: [0.5, 0.5, 0.5],
        instance,
        part,
        texture: None,
    }
}

fn at(x: f64, y: f64, z: f64) -> Isometry3<f64> {
    Isometry3::translation(x, y, z)
}

fn clean() -> RenderOptions {
    RenderOptions::default()
}

fn px(out: &RenderOutput, u: u32, v: u32) -> usize {
    out.index(u, v).unwrap()
}

fn scene(primitives: Vec<Primitive>) -> RenderScene {
    RenderScene { primitives }
}

#[test]
fn sphere_ahead_gives_distance_minus_radius_at_the_principal_point() {
    let (d, r) = (1.3, 0.2);
    let s = scene(vec![prim(
        Shape::Sphere { radius: r },
        at(d, 0.0, 0.0),
        5,
        NO_PART,
    )]);
    let out = render(&s, &forward_camera(), &clean());
    let i = px(&out, CX as u32, CY as u32);
    assert!(
        (out.depth_m[i] as f64 - (d - r)).abs() < 1e-6,
        "{}",
        out.depth_m[i]
    );
    assert_eq!(out.instance[i], 5);
    // Background: nothing hit in the corner.
    let c = px(&out, 0, 0);
    assert_eq!(
        (out.depth_m[c], out.instance[c], out.part[c]),
        (0.0, BACKGROUND_INSTANCE, NO_PART)
    );
}

#[test]
fn fronto_parallel_box_face_has_constant_depth_over_its_exact_footprint() {
    // Front face at x = 0.9 spanning |y| <= 0.3, |z| <= 0.2; the camera sits inside both slabs so
    // no side face can be seen.
    let s = scene(vec![prim(
        Shape::Cuboid {
            half_extents: Vector3::new(0.1, 0.3, 0.2),
        },
        at(1.0, 0.0, 0.0),
        3,
        NO_PART,
    )]);
    let cam = forward_camera();
    let out = render(&s, &cam, &clean());
    let mut covered = 0;
    for v in 0..H {
        for u in 0..W {
            let i = px(&out, u, v);
            let ray = cam.ray_camera(u as f64, v as f64);
            // Camera x = −world y, camera y = −world z.
            let expected = (0.9 * ray.x).abs() <= 0.3 && (0.9 * ray.y).abs() <= 0.2;
            if out.instance[i] == 3 {
                covered += 1;
                assert!(
                    (out.depth_m[i] - 0.9).abs() < 1e-6,
                    "depth {}",
                    out.depth_m[i]
                );
            }
            // Pixels right on the footprint boundary may go either way.
            let margin = (0.9 * ray.x).abs() - 0.3;
            let margin_y = (0.9 * ray.y).abs() - 0.2;
            if margin.abs() > 1e-9 && margin_y.abs() > 1e-9 {
                assert_eq!(out.instance[i] == 3, expected, "pixel ({u}, {v})");
            }
        }
    }
    assert!(covered > 1000, "{covered}");
}

#[test]
fn cylinder_from_the_side_and_from_the_top() {
    let (d, r, h) = (1.0, 0.1, 0.15);
    let cyl = Shape::Cylinder {
        radius: r,
        half_height: h,
    };
    // Side view: axis vertical, the nearest generator line is at depth d − r for |z| <= h.
    let s = scene(vec![prim(cyl, at(d, 0.0, 0.0), 4, NO_PART)]);
    let cam = forward_camera();
    let out = render(&s, &cam, &clean());
    let mut rows = 0;
    for v in 0..H {
        let i = px(&out, CX as u32, v);
        let z_world = -(v as f64 - CY) / F * (d - r);
        if z_world.abs() < h - 1e-3 {
            rows += 1;
            assert_eq!(out.instance[i], 4);
            assert!((out.depth_m[i] as f64 - (d - r)).abs() < 1e-6);
        } else if z_world.abs() > h * (d + r) / (d - r) + 1e-3 {
            assert_eq!(out.instance[i], BACKGROUND_INSTANCE, "row {v}");
        }
    }
    assert!(rows > 20);
    // Off-centre on the principal row: depth of the circle x² + y² = r² along the ray.
    for u in [CX as u32 + 3, CX as u32 + 7] {
        let i = px(&out, u, CY as u32);
        let k = (u as f64 - CX) / F; // world y = −k · depth, world x = depth
                                     // (t − d)² + (k t)² = r²  →  nearest root
        let (a, b, c) = (1.0 + k * k, -2.0 * d, d * d - r * r);
        let t = (-b - (b * b - 4.0 * a * c).sqrt()) / (2.0 * a);
        assert!(
            (out.depth_m[i] as f64 - t).abs() < 1e-6,
            "u {u}: {} vs {t}",
            out.depth_m[i]
        );
    }

    // Top view: camera 1.5 m above the cylinder's axis looking down; only the top cap is visible.
    let top = camera([0.0, 0.0, 1.5], [0.0; 3], [1.0, 0.0, 0.0]);
    let s = scene(vec![prim(cyl, at(0.0, 0.0, 0.0), 4, NO_PART)]);
    let out = render(&s, &top, &clean());
    let mut n = 0;
    for (i, &inst) in out.instance.iter().enumerate() {
        if inst == 4 {
            n += 1;
            assert!((out.depth_m[i] as f64 - (1.5 - h)).abs() < 1e-6);
        }
    }
    let disk_px = PI * (r * F / (1.5 - h)).powi(2);
    assert!(
        (n as f64 - disk_px).abs() < 0.1 * disk_px,
        "{n} vs {disk_px}"
    );
}

#[test]
fn capsule_from_the_side_and_from_the_top() {
    let (d, r, h) = (1.2, 0.05, 0.1);
    let cap = Shape::Capsule {
        radius: r,
        half_height: h,
    };
    let s = scene(vec![prim(cap, at(d, 0.0, 0.0), 6, NO_PART)]);
    let out = render(&s, &forward_camera(), &clean());
    let i = px(&out, CX as u32, CY as u32);
    assert!((out.depth_m[i] as f64 - (d - r)).abs() < 1e-6);
    // The rounded end: a row past the cylinder part still hits the dome, farther than d − r.
    let v_dome = (CY - (h + 0.5 * r) / (d - r) * F).round() as u32;
    let j = px(&out, CX as u32, v_dome);
    assert_eq!(out.instance[j], 6);
    assert!(out.depth_m[j] as f64 > d - r + 1e-4);

    let top = camera([0.0, 0.0, 1.0], [0.0; 3], [1.0, 0.0, 0.0]);
    let s = scene(vec![prim(cap, at(0.0, 0.0, 0.0), 6, NO_PART)]);
    let out = render(&s, &top, &clean());
    let i = px(&out, CX as u32, CY as u32);
    assert!((out.depth_m[i] as f64 - (1.0 - h - r)).abs() < 1e-6);
}

#[test]
fn nearer_object_wins_instance_depth_and_part() {
    let s = scene(vec![
        prim(Shape::Sphere { radius: 0.3 }, at(2.0, 0.0, 0.0), 2, 0),
        prim(Shape::Sphere { radius: 0.1 }, at(1.0, 0.0, 0.0), 3, 7),
    ]);
    let out = render(&s, &forward_camera(), &clean());
    let i = px(&out, CX as u32, CY as u32);
    assert_eq!((out.instance[i], out.part[i]), (3, 7));
    assert!((out.depth_m[i] - 0.9).abs() < 1e-6);
    // Outside the small sphere's disk, the big one shows.
    let u = (CX + 0.2 / 1.7 * F).round() as u32;
    let j = px(&out, u, CY as u32);
    assert_eq!((out.instance[j], out.part[j]), (2, 0));
}

#[test]
fn segmentation_reports_instance_and_part_of_each_primitive() {
    // A "mug": body (part 0) and handle (part 2) of instance 9, beside a ball (instance 10).
    let s = scene(vec![
        prim(
            Shape::Cylinder {
                radius: 0.05,
                half_height: 0.06,
            },
            at(1.0, 0.1, 0.0),
            9,
            NO_PART,
        ),
        prim(
            Shape::Cuboid {
                half_extents: Vector3::new(0.01, 0.03, 0.04),
            },
            at(1.0, 0.0, 0.0),
            9,
            2,
        ),
        prim(
            Shape::Sphere { radius: 0.05 },
            at(1.0, -0.15, 0.0),
            10,
            NO_PART,
        ),
    ]);
    let cam = forward_camera();
    let out = render(&s, &cam, &clean());
    let look = |p: [f64; 3]| {
        let (u, v, _) = cam.project_world(&Point3::from(p)).unwrap();
        let i = px(&out, u.round() as u32, v.round() as u32);
        (out.instance[i], out.part[i])
    };
    assert_eq!(look([1.0, 0.1, 0.0]), (9, NO_PART));
    assert_eq!(look([1.0, 0.0, 0.0]), (9, 2));
    assert_eq!(look([1.0, -0.15, 0.0]), (10, NO_PART));
    assert_eq!(look([1.0, 0.0, 0.3]), (BACKGROUND_INSTANCE, NO_PART));
    let ids: std::collections::BTreeSet<_> = out.instance.iter().copied().collect();
    assert_eq!(ids.into_iter().collect::<Vec<_>>(), vec![0, 9, 10]);
}

fn srgb8(linear: f64) -> u8 {
    (linear_to_srgb(linear) * 255.0).round() as u8
}

/// A thin plate 1 m ahead whose camera-facing face normal is (−cos α, 0, sin α): turned up
/// towards a light overhead by α. Returns the plate and a point on the middle of that face.
fn tilted_plate(y: f64, alpha: f64, instance: u16) -> (Primitive, Point3<f64>) {
    let centre = Vector3::new(1.0, y, 0.0);
    let normal = Vector3::new(-alpha.cos(), 0.0, alpha.sin());
    let plate = Primitive {
        shape: Shape::Cuboid {
            half_extents: Vector3::new(0.005, 0.08, 0.08),
        },
        world_from_shape: Isometry3::new(centre, Vector3::y() * alpha),
        color: [0.8, 0.6, 0.4],
        instance,
        part: NO_PART,
        texture: None,
    };
    (plate, Point3::from(centre + 0.005 * normal))
}

#[test]
fn lambert_shading_follows_the_angle_to_the_light_and_backfaces_get_ambient_only() {
    // Light from straight above; one face turned 60 degrees up towards it, one only 10 degrees
    // (grazing light), both facing the camera well.
    let opts = RenderOptions {
        light_dir_world: Vector3::new(0.0, 0.0, 1.0),
        ambient: 0.2,
        ..RenderOptions::default()
    };
    let (steep, steep_pt) = tilted_plate(0.15, 60f64.to_radians(), 2);
    let (grazing, grazing_pt) = tilted_plate(-0.15, 10f64.to_radians(), 3);
    let s = scene(vec![steep, grazing]);
    let cam = forward_camera();
    let rgb_at = |out: &RenderOutput, p: &Point3<f64>, instance: u16| {
        let (u, v, _) = cam.project_world(p).unwrap();
        let i = px(out, u.round() as u32, v.round() as u32);
        assert_eq!(out.instance[i], instance);
        [out.rgb[3 * i], out.rgb[3 * i + 1], out.rgb[3 * i + 2]]
    };
    let out = render(&s, &cam, &opts);
    let lit = rgb_at(&out, &steep_pt, 2);
    let dim = rgb_at(&out, &grazing_pt, 3);
    let expect =
        |cos: f64| [0.8f32, 0.6, 0.4].map(|albedo| srgb8(albedo as f64 * (0.2 + 0.8 * cos)));
    assert_eq!(lit, expect(60f64.to_radians().sin()));
    assert_eq!(dim, expect(10f64.to_radians().sin()));
    for ch in 0..3 {
        assert!(lit[ch] > dim[ch] + 20, "{lit:?} vs {dim:?}");
    }

    // Light from behind the plates: the visible faces turn away from it and keep only ambient.
    let back = RenderOptions {
        light_dir_world: Vector3::new(1.0, 0.0, 0.0),
        ..opts
    };
    let out = render(&s, &cam, &back);
    assert_eq!(rgb_at(&out, &steep_pt, 2), expect(0.0));
    assert_eq!(rgb_at(&out, &grazing_pt, 3), expect(0.0));
    // Background colour, encoded.
    let b = px(&out, 0, 0);
    let bg = back.background.map(|c| srgb8(c as f64));
    assert_eq!(&out.rgb[3 * b..3 * b + 3], &bg);
}

fn random_shape(rng: &mut ChaCha8Rng) -> Shape {
    let r = rng.gen_range(0.02..0.3);
    let h = rng.gen_range(0.0..0.3);
    match rng.gen_range(0..4) {
        0 => Shape::Cuboid {
            half_extents: Vector3::new(
                rng.gen_range(0.01..0.4),
                rng.gen_range(0.01..0.4),
                rng.gen_range(0.01..0.4),
            ),
        },
        1 => Shape::Cylinder {
            radius: r,
            half_height: h,
        },
        2 => Shape::Sphere { radius: r },
        _ => Shape::Capsule {
            radius: r,
            half_height: h,
        },
    }
}

/// Random primitives all around a camera at the origin (some behind it, some straddling its
/// plane, a few very close), each with its own instance id so hits can be traced back.
fn random_scene(seed: u64, n: usize) -> RenderScene {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let primitives = (0..n)
        .map(|k| {
            let t = Vector3::new(
                rng.gen_range(-1.0..3.0),
                rng.gen_range(-1.5..1.5),
                rng.gen_range(-1.0..1.0),
            );
            let axis = Vector3::new(
                rng.gen_range(-PI..PI),
                rng.gen_range(-PI..PI),
                rng.gen_range(-PI..PI),
            );
            Primitive {
                shape: random_shape(&mut rng),
                world_from_shape: Isometry3::new(t, axis),
                color: [rng.gen(), rng.gen(), rng.gen()],
                instance: 2 + k as u16,
                part: (k % 3) as u8,
                texture: None,
            }
        })
        .collect();
    RenderScene { primitives }
}

#[test]
fn culled_renderer_equals_brute_force_bit_for_bit() {
    for seed in 0..6 {
        let s = random_scene(seed, 40);
        let cam = camera([-0.2, 0.1, 0.05], [1.0, -0.1, 0.0], [0.1, 0.0, 1.0]);
        let opts = if seed % 2 == 0 {
            clean()
        } else {
            RenderOptions {
                seed,
                ..RenderOptions::realsense_like()
            }
        };
        let a = render(&s, &cam, &opts);
        let b = render_brute_force(&s, &cam, &opts);
        assert!(a.instance.iter().filter(|&&i| i != 0).count() > 1000);
        assert!(a == b, "seed {seed}: culled and brute-force frames differ");
    }
    // Degenerate primitives (NaN pose, negative radius) are skipped by both paths, not drawn.
    let mut s = random_scene(99, 10);
    let before = render(&s, &forward_camera(), &clean());
    s.primitives.push(prim(
        Shape::Sphere { radius: -0.5 },
        at(1.0, 0.0, 0.0),
        500,
        NO_PART,
    ));
    s.primitives.push(prim(
        Shape::Sphere { radius: 0.5 },
        at(f64::NAN, 0.0, 0.0),
        501,
        NO_PART,
    ));
    let after = render(&s, &forward_camera(), &clean());
    assert!(before == after);
    assert!(after == render_brute_force(&s, &forward_camera(), &clean()));
    // A camera with a zero focal length sees nothing rather than garbage.
    let mut blind = forward_camera();
    blind.intrinsics.fx = 0.0;
    let out = render(&s, &blind, &clean());
    assert!(out.instance.iter().all(|&i| i == BACKGROUND_INSTANCE));
    assert!(out.depth_m.iter().all(|&d| d == 0.0));
    // The benchmark scene too, at full resolution.
    let s = pointact_bench::render::typical_scene(3);
    let cam = pointact_bench::render::typical_camera(5).unwrap();
    assert!(render(&s, &cam, &clean()) == render_brute_force(&s, &cam, &clean()));
}

/// Signed distance from a shape-frame point to the shape's surface.
fn signed_distance(shape: &Shape, p: &Point3<f64>) -> f64 {
    match *shape {
        Shape::Cuboid { half_extents: h } => {
            let q = p.coords.abs() - h;
            q.sup(&Vector3::zeros()).norm() + q.max().min(0.0)
        }
        Shape::Cylinder {
            radius,
            half_height,
        } => {
            let dx = (p.x * p.x + p.y * p.y).sqrt() - radius;
            let dz = p.z.abs() - half_height;
            dx.max(dz).min(0.0) + (dx.max(0.0).powi(2) + dz.max(0.0).powi(2)).sqrt()
        }
        Shape::Sphere { radius } => p.coords.norm() - radius,
        Shape::Capsule {
            radius,
            half_height,
        } => {
            let z = p.z.clamp(-half_height, half_height);
            (p.coords - Vector3::new(0.0, 0.0, z)).norm() - radius
        }
    }
}

#[test]
fn deprojected_depth_lands_on_the_hit_primitive_surface() {
    for seed in 10..14 {
        let s = random_scene(seed, 30);
        let cam = camera([-0.3, 0.0, 0.1], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]);
        let out = render(&s, &cam, &clean());
        let mut checked = 0;
        for v in 0..H {
            for u in 0..W {
                let i = px(&out, u, v);
                if out.instance[i] == BACKGROUND_INSTANCE {
                    continue;
                }
                let p = &s.primitives[(out.instance[i] - 2) as usize];
                let world = cam.deproject_world(u as f64, v as f64, out.depth_m[i] as f64);
                let local = p.world_from_shape.inverse_transform_point(&world);
                let sd = signed_distance(&p.shape, &local);
                assert!(sd.abs() < 1e-5, "seed {seed} pixel ({u},{v}): {sd}");
                checked += 1;
            }
        }
        assert!(checked > 1000);
    }
}

#[test]
fn camera_follows_opencv_axes_and_integer_pixel_centres() {
    let cam = forward_camera();
    // Image right is world −y, image down is world −z.
    let (u, v, z) = cam.project_world(&Point3::new(2.0, -0.1, 0.0)).unwrap();
    assert!(u > CX && (v - CY).abs() < 1e-12 && (z - 2.0).abs() < 1e-12);
    let (_, v, _) = cam.project_world(&Point3::new(2.0, 0.0, -0.1)).unwrap();
    assert!(v > CY);
    assert!(cam.project_world(&Point3::new(-1.0, 0.0, 0.0)).is_none());
    // Round trip.
    let p = cam.deproject_world(17.25, 63.5, 1.7);
    let (u, v, z) = cam.project_world(&p).unwrap();
    assert!((u - 17.25).abs() < 1e-9 && (v - 63.5).abs() < 1e-9 && (z - 1.7).abs() < 1e-12);
    // A tiny sphere centred on the ray through pixel (10, 20) shows up exactly there.
    let c = cam.deproject_world(10.0, 20.0, 1.0);
    let s = scene(vec![prim(
        Shape::Sphere { radius: 0.002 },
        Isometry3::translation(c.x, c.y, c.z),
        4,
        NO_PART,
    )]);
    let out = render(&s, &cam, &clean());
    let hits: Vec<usize> = (0..out.instance.len())
        .filter(|&i| out.instance[i] == 4)
        .collect();
    assert_eq!(hits, vec![px(&out, 10, 20)]);
    // Degenerate poses are errors, not NaN cameras.
    let err = PinholeCamera::look_at_hfov(
        Point3::origin(),
        Point3::new(0.0, 0.0, 1.0),
        Vector3::z(),
        64,
        48,
        1.0,
    );
    assert!(matches!(err, Err(RenderError::DegenerateLookAt(_))));
    let err = PinholeCamera::look_at_hfov(
        Point3::origin(),
        Point3::origin(),
        Vector3::z(),
        64,
        48,
        1.0,
    );
    assert!(matches!(err, Err(RenderError::DegenerateLookAt(_))));
    let err = PinholeCamera::look_at(
        Point3::origin(),
        Point3::new(1.0, 0.0, 0.0),
        Vector3::z(),
        Intrinsics::pinhole(0, 48, 50.0, 50.0, 0.0, 0.0),
    );
    assert!(matches!(err, Err(RenderError::InvalidIntrinsics(_))));
}

/// A wall 1 m ahead filling the view, with a ball in front of it.
fn wall_and_ball() -> RenderScene {
    scene(vec![
        prim(
            Shape::Cuboid {
                half_extents: Vector3::new(0.01, 2.0, 2.0),
            },
            at(1.01, 0.0, 0.0),
            2,
            NO_PART,
        ),
        prim(Shape::Sphere { radius: 0.1 }, at(0.6, 0.0, 0.0), 3, NO_PART),
    ])
}

#[test]
fn depth_noise_is_deterministic_and_unbiased() {
    let s = wall_and_ball();
    let cam = forward_camera();
    let opts = RenderOptions {
        depth_noise: 0.003,
        seed: 42,
        ..RenderOptions::default()
    };
    let a = render(&s, &cam, &opts);
    assert!(a == render(&s, &cam, &opts), "same seed, same frame");
    let other = render(
        &s,
        &cam,
        &RenderOptions {
            seed: 43,
            ..opts.clone()
        },
    );
    assert!(a.depth_m != other.depth_m);
    assert_eq!(a.rgb, other.rgb);
    assert_eq!(a.instance, other.instance);

    let exact = render(&s, &cam, &clean());
    let wall: Vec<usize> = (0..exact.instance.len())
        .filter(|&i| exact.instance[i] == 2)
        .collect();
    let n = wall.len() as f64;
    let err: Vec<f64> = wall
        .iter()
        .map(|&i| a.depth_m[i] as f64 - exact.depth_m[i] as f64)
        .collect();
    let mean = err.iter().sum::<f64>() / n;
    let sd = (err.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / n).sqrt();
    let sigma = 0.003; // z = 1 m on the wall
    assert!(
        mean.abs() < 4.0 * sigma / n.sqrt(),
        "bias {mean} over {n} pixels"
    );
    assert!((sd / sigma - 1.0).abs() < 0.1, "sd {sd}");
    // Farther means noisier, by z²: the ball at 0.5 m gets a quarter of the wall's sigma.
    let ball: Vec<usize> = (0..exact.instance.len())
        .filter(|&i| exact.instance[i] == 3)
        .collect();
    let ball_sd = (ball
        .iter()
        .map(|&i| {
            let z = exact.depth_m[i] as f64;
            ((a.depth_m[i] as f64 - z) / (z * z)).powi(2)
        })
        .sum::<f64>()
        / ball.len() as f64)
        .sqrt();
    assert!((ball_sd / 0.003 - 1.0).abs() < 0.2, "{ball_sd}");
}

#[test]
fn edge_holes_appear_only_on_silhouettes() {
    let s = wall_and_ball();
    let cam = forward_camera();
    let all = RenderOptions {
        edge_holes: 1.0,
        ..RenderOptions::default()
    };
    let out = render(&s, &cam, &all);
    let (w, h) = (W as usize, H as usize);
    let mut holes = 0;
    for v in 0..h {
        for u in 0..w {
            let i = v * w + u;
            let neighbours = [
                (u > 0).then(|| i - 1),
                (u + 1 < w).then(|| i + 1),
                (v > 0).then(|| i - w),
                (v + 1 < h).then(|| i + w),
            ];
            let silhouette = neighbours
                .iter()
                .flatten()
                .any(|&j| out.instance[j] != out.instance[i]);
            let hole = out.depth_m[i] == 0.0 && out.instance[i] != BACKGROUND_INSTANCE;
            // With probability 1 every silhouette pixel is a hole and nothing else is.
            assert_eq!(hole, silhouette, "pixel ({u},{v})");
            holes += hole as usize;
        }
    }
    assert!(holes > 40, "{holes}");
    // Half the probability, about half the holes; RGB and ids untouched.
    let half = render(
        &s,
        &cam,
        &RenderOptions {
            edge_holes: 0.5,
            seed: 1,
            ..RenderOptions::default()
        },
    );
    let half_holes = half
        .depth_m
        .iter()
        .zip(&half.instance)
        .filter(|(&d, &i)| d == 0.0 && i != 0)
        .count();
    assert!(
        (half_holes as f64 - holes as f64 / 2.0).abs() < 0.2 * holes as f64,
        "{half_holes} of {holes}"
    );
    assert_eq!(half.instance, out.instance);
    assert_eq!(half.rgb, out.rgb);
}

#[test]
fn realsense_preset_is_noisy_but_reproducible() {
    let s = pointact_bench::render::typical_scene(1);
    let cam = pointact_bench::render::typical_camera(0).unwrap();
    let opts = RenderOptions::realsense_like();
    assert!(opts.depth_noise > 0.0 && opts.edge_holes > 0.0);
    let a = render(&s, &cam, &opts);
    assert!(a == render(&s, &cam, &opts));
    let clean_frame = render(&s, &cam, &clean());
    assert_eq!(a.rgb, clean_frame.rgb);
    assert!(a.depth_m != clean_frame.depth_m);
    assert_eq!(RenderOptions::default().depth_noise, 0.0);
    assert_eq!(RenderOptions::default().edge_holes, 0.0);
}
