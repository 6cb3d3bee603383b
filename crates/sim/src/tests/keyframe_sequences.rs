//! Renders the camera sequences of `tests/fixtures/keyframes/` that the key-frame extractor
//! (`pointact_core::camera::keyframes`) is checked on against the released Python + OpenCV
//! pipeline (`tests/fixtures/gen_keyframes_golden.py`).
//!
//! Regenerate (then rerun the golden script):
//! `cargo test -p pointact-sim --release -- --ignored keyframe_sequences`
//!
//! The scene is a room whose walls and floor are printed with grids of random colours (plenty of
//! corners for ORB) with a few solids standing on the floor. The camera mostly turns about a
//! fixed eye: for a pure rotation two views are related exactly by a homography, so the overlap
//! the extractor measures is well defined and two implementations can be compared on it. Some
//! sequences add a modest translation. Speeds vary so that sequences end with few key frames
//! (the "fewer than 4" path), with many, and one with more than 32 (the thinning path).

use std::path::PathBuf;
use std::sync::Arc;

use k::nalgebra::{Isometry3, Point3, Rotation3, Translation3, UnitQuaternion, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::render::{render, FaceTexture, PinholeCamera, RenderOptions};
use crate::{Primitive, RenderScene, NO_PART};
use pointact_core::camera::RgbImage;
use pointact_core::geometry::Shape;

const WIDTH: usize = 320;
const HEIGHT: usize = 240;
const HFOV_DEG: f64 = 60.0;
/// Half the side of the square room, m.
const ROOM: f64 = 2.5;
const WALL_HEIGHT: f64 = 4.0;

/// A grid of random colours on a `cols × rows` face.
fn grid(rng: &mut ChaCha8Rng, cols: usize, rows: usize) -> Arc<FaceTexture> {
    let cells = (0..cols * rows)
        .map(|_| {
            let base: f32 = rng.gen_range(0.02..0.9);
            [
                (base * rng.gen_range(0.4..1.2f32)).min(1.0),
                (base * rng.gen_range(0.4..1.2f32)).min(1.0),
                (base * rng.gen_range(0.4..1.2f32)).min(1.0),
            ]
        })
        .collect();
    Arc::new(FaceTexture {
        cols,
        rows,
        cells,
        supersample: 3,
    })
}

/// A thin printed panel centred at `centre` whose printed (+z) face looks along `normal`, with
/// its texture rows running along `up`.
fn panel(
    centre: Vector3<f64>,
    normal: Vector3<f64>,
    up: Vector3<f64>,
    half: (f64, f64),
    texture: Arc<FaceTexture>,
    instance: u16,
) -> Primitive {
    let z = normal.normalize();
    let y = (up - z * up.dot(&z)).normalize();
    let x = y.cross(&z);
    let rot = Rotation3::from_basis_unchecked(&[x, y, z]);
    Primitive {
        shape: Shape::Cuboid {
            half_extents: Vector3::new(half.0, half.1, 0.01),
        },
        world_from_shape: Isometry3::from_parts(
            Translation3::from(centre - z * 0.01),
            UnitQuaternion::from_rotation_matrix(&rot),
        ),
        color: [0.5, 0.5, 0.5],
        instance,
        part: NO_PART,
        texture: Some(texture),
    }
}

fn room() -> RenderScene {
    let mut rng = ChaCha8Rng::seed_from_u64(2011);
    let up = Vector3::z();
    let mut prims = Vec::new();
    let walls = [
        (Vector3::new(ROOM, 0.0, 0.0), -Vector3::x()),
        (Vector3::new(-ROOM, 0.0, 0.0), Vector3::x()),
        (Vector3::new(0.0, ROOM, 0.0), -Vector3::y()),
        (Vector3::new(0.0, -ROOM, 0.0), Vector3::y()),
    ];
    for (i, (at, normal)) in walls.into_iter().enumerate() {
        let tex = grid(&mut rng, 34, 27);
        let centre = at + Vector3::new(0.0, 0.0, WALL_HEIGHT / 2.0);
        prims.push(panel(
            centre,
            normal,
            up,
            (ROOM, WALL_HEIGHT / 2.0),
            tex,
            2 + i as u16,
        ));
    }
    let floor = grid(&mut rng, 30, 30);
    prims.push(panel(
        Vector3::zeros(),
        up,
        Vector3::x(),
        (ROOM, ROOM),
        floor,
        1,
    ));
    // Solids on the floor: boxes with printed tops, cylinders and balls in plain colours.
    for i in 0..10 {
        let (x, y) = loop {
            let p: (f64, f64) = (rng.gen_range(-2.2..2.2), rng.gen_range(-2.2..2.2));
            if (p.0 * p.0 + p.1 * p.1).sqrt() > 0.9 {
                break p;
            }
        };
        let color = [
            rng.gen_range(0.1..0.95f32),
            rng.gen_range(0.1..0.95f32),
            rng.gen_range(0.1..0.95f32),
        ];
        let size: f64 = rng.gen_range(0.12..0.3);
        let yaw: f64 = rng.gen_range(0.0..std::f64::consts::PI);
        let (shape, z, texture) = match i % 3 {
            0 => (
                Shape::Cuboid {
                    half_extents: Vector3::new(size, size * 0.8, size * 1.5),
                },
                size * 1.5,
                Some(grid(&mut rng, 4, 4)),
            ),
            1 => (
                Shape::Cylinder {
                    radius: size * 0.7,
                    half_height: size * 2.0,
                },
                size * 2.0,
                None,
            ),
            _ => (Shape::Sphere { radius: size }, size, None),
        };
        prims.push(Primitive {
            shape,
            world_from_shape: Isometry3::from_parts(
                Translation3::new(x, y, z),
                UnitQuaternion::from_euler_angles(0.0, 0.0, yaw),
            ),
            color,
            instance: 10 + i,
            part: NO_PART,
            texture,
        });
    }
    RenderScene { primitives: prims }
}

/// One camera pose: eye (m) and viewing direction as yaw / pitch (degrees).
#[derive(Clone, Copy)]
struct Pose {
    eye: [f64; 3],
    yaw: f64,
    pitch: f64,
}

fn camera(p: Pose) -> PinholeCamera {
    let (y, t) = (p.yaw.to_radians(), p.pitch.to_radians());
    let eye = Point3::new(p.eye[0], p.eye[1], p.eye[2]);
    let dir = Vector3::new(t.cos() * y.cos(), t.cos() * y.sin(), t.sin());
    PinholeCamera::look_at_hfov(
        eye,
        eye + dir,
        Vector3::z(),
        WIDTH,
        HEIGHT,
        HFOV_DEG.to_radians(),
    )
    .expect("a valid camera")
}

/// A steady motion: `n` frames from `start`, each adding the per-frame yaw, pitch and eye steps.
fn steady(n: usize, start: Pose, dyaw: f64, dpitch: f64, deye: [f64; 3]) -> Vec<Pose> {
    (0..n)
        .map(|i| {
            let k = i as f64;
            Pose {
                eye: [
                    start.eye[0] + k * deye[0],
                    start.eye[1] + k * deye[1],
                    start.eye[2] + k * deye[2],
                ],
                yaw: start.yaw + k * dyaw,
                pitch: start.pitch + k * dpitch,
            }
        })
        .collect()
}

/// Yaw steps given frame by frame (pitch and eye fixed).
fn stepped(start: Pose, steps: &[f64]) -> Vec<Pose> {
    let mut p = start;
    let mut out = vec![p];
    for s in steps {
        p.yaw += s;
        out.push(p);
    }
    out
}

fn sequences() -> Vec<(&'static str, Vec<Pose>)> {
    let at = |yaw: f64, pitch: f64| Pose {
        eye: [0.0, 0.0, 1.2],
        yaw,
        pitch,
    };
    let still = [0.0; 3];
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut walk = |n: usize, scale: f64| {
        let steps: Vec<f64> = (1..n)
            .map(|_| rng.gen_range(-scale..scale) + scale * 0.5)
            .collect();
        steps
    };
    let walk_a = walk(14, 12.0);
    let walk_b = walk(14, 20.0);
    let accelerate: Vec<f64> = (1..13).map(|i| i as f64 * 1.5).collect();
    let decelerate: Vec<f64> = (1..13).rev().map(|i| i as f64 * 1.5).collect();
    let sway: Vec<f64> = (1..14)
        .map(|i| 30.0 * ((i as f64 * 0.7).sin() - ((i - 1) as f64 * 0.7).sin()))
        .collect();
    // Between two views 40° apart: every frame overlaps the previous key frame by about a third,
    // so every frame is a key frame and the 36 of them exceed the 32 allowed.
    let swing: Vec<f64> = (1..36)
        .map(|i| if i % 2 == 1 { 40.0 } else { -40.0 })
        .collect();
    vec![
        ("pan_slow_a", steady(10, at(10.0, -5.0), 1.5, 0.0, still)),
        ("pan_slow_b", steady(12, at(100.0, -10.0), -2.5, 0.0, still)),
        ("tilt_slow", steady(10, at(200.0, -20.0), 0.0, 1.5, still)),
        ("pan_medium_a", steady(14, at(30.0, -8.0), 6.0, 0.0, still)),
        (
            "pan_medium_b",
            steady(14, at(250.0, -15.0), -7.0, 0.0, still),
        ),
        (
            "pan_medium_c",
            steady(16, at(-60.0, -5.0), 8.0, 0.0, [0.02, 0.0, 0.0]),
        ),
        ("pan_medium_d", steady(12, at(140.0, 0.0), 10.0, 0.5, still)),
        ("pan_tilt", steady(14, at(70.0, -25.0), 5.0, 2.0, still)),
        ("pan_fast_a", steady(10, at(0.0, -10.0), 18.0, 0.0, still)),
        ("pan_fast_b", steady(10, at(180.0, -5.0), -22.0, 0.0, still)),
        ("pan_fast_c", steady(10, at(45.0, -12.0), 26.0, 0.0, still)),
        ("tilt_fast", steady(10, at(300.0, -35.0), 2.0, 7.0, still)),
        ("accelerate", stepped(at(20.0, -10.0), &accelerate)),
        ("decelerate", stepped(at(160.0, -10.0), &decelerate)),
        ("sway", stepped(at(90.0, -12.0), &sway)),
        ("walk_a", stepped(at(210.0, -8.0), &walk_a)),
        ("walk_b", stepped(at(330.0, -14.0), &walk_b)),
        ("look_down", steady(12, at(120.0, -45.0), 6.0, 0.0, still)),
        (
            "slide_and_turn",
            steady(12, at(15.0, -10.0), 4.0, 0.0, [0.0, 0.03, 0.0]),
        ),
        (
            "forward",
            steady(12, at(0.0, -10.0), 1.0, 0.0, [0.06, 0.0, 0.0]),
        ),
        ("swing", stepped(at(60.0, -10.0), &swing)),
    ]
}

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/keyframes")
}

#[test]
#[ignore = "writes tests/fixtures/keyframes; run on purpose to regenerate the fixtures"]
fn keyframe_sequences() {
    let scene = room();
    let options = RenderOptions::default();
    let root = out_dir();
    for (name, poses) in sequences() {
        let dir = root.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).expect("old sequence removed");
        }
        std::fs::create_dir_all(&dir).expect("sequence folder");
        for (i, pose) in poses.iter().enumerate() {
            let out = render(&scene, &camera(*pose), &options);
            // Every pixel sees something: the room is closed around the camera's views.
            let seen = out.instance.iter().filter(|&&id| id != 0).count();
            assert!(
                seen * 10 >= out.instance.len() * 9,
                "{name} frame {i}: {seen} px hit"
            );
            let img = RgbImage::from_raw(out.width, out.height, out.rgb).expect("RGB8 buffer");
            img.save(dir.join(format!("{i:04}.png")))
                .expect("frame written");
        }
    }
}
