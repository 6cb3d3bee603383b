//! `pointact bench render`: simulator camera frames per second on one thread, against the same
//! renderer with culling switched off (every primitive intersected at every pixel), in one run.
//!
//! The scene is what a tabletop task typically shows: a big table box, ten objects of three to
//! eight primitives, and fifteen robot-link primitives, seen at 640×480 by a RealSense-like
//! camera that orbits slightly from frame to frame.

use std::f64::consts::PI;
use std::fmt;
use std::time::Instant;

use k::nalgebra::{Isometry3, Point3, Translation3, UnitQuaternion, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::geometry::{Intrinsics, Shape};
use crate::sim::render::{
    render, render_brute_force, PinholeCamera, RenderError, RenderOptions, RenderOutput,
};
use crate::sim::{
    Primitive, RenderScene, FIRST_OBJECT_INSTANCE, NO_PART, ROBOT_INSTANCE, TABLE_INSTANCE,
};

/// The bar the simulator needs to run closed-loop tasks at camera rate on one core.
pub(crate) const GOAL_FRAMES_PER_S: f64 = 10.0;

/// Options of `pointact bench render`.
pub(crate) struct RenderBenchArgs {
    /// Frames timed for our renderer (the brute-force peer times a fifth of them, at least one).
    pub frames: usize,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum RenderBenchError {
    #[error("--frames must be at least 1")]
    NoFrames,
    #[error(transparent)]
    Render(#[from] RenderError),
}

/// One renderer's timing.
#[derive(Debug, Clone)]
pub(crate) struct Timing {
    pub name: String,
    pub frames: usize,
    pub seconds: f64,
}

impl Timing {
    pub(crate) fn frames_per_s(&self) -> f64 {
        self.frames as f64 / self.seconds
    }
}

pub(crate) struct RenderBenchReport {
    pub cpu: String,
    pub width: u32,
    pub height: u32,
    pub primitives: usize,
    pub ours: Timing,
    pub ours_noisy: Timing,
    pub brute: Timing,
    /// Whether the culled and brute-force frames were bit-identical on every frame both rendered.
    pub identical: bool,
    /// Fraction of pixels that hit something (sanity: the scene is in view).
    pub coverage: f64,
}

/// The benchmark scene (58 primitives): table, ten objects (3–8 primitives each), fifteen
/// robot-link primitives.
pub fn typical_scene(seed: u64) -> RenderScene {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut prims = vec![Primitive {
        shape: Shape::Cuboid {
            half_extents: Vector3::new(0.5, 0.75, 0.025),
        },
        world_from_shape: at(0.45, 0.0, -0.025, 0.0),
        color: [0.45, 0.32, 0.2],
        instance: TABLE_INSTANCE,
        part: NO_PART,
        texture: None,
    }];
    for k in 0..10u16 {
        let x = rng.gen_range(0.25..0.8);
        let y = rng.gen_range(-0.5..0.5);
        let yaw = rng.gen_range(-PI..PI);
        let color = [
            rng.gen_range(0.1..0.9),
            rng.gen_range(0.1..0.9),
            rng.gen_range(0.1..0.9),
        ];
        let base = at(x, y, 0.0, yaw);
        let instance = FIRST_OBJECT_INSTANCE + k;
        let mut add = |shape: Shape, local: Isometry3<f64>, part: u8| {
            prims.push(Primitive {
                shape,
                world_from_shape: base * local,
                color,
                instance,
                part,
                texture: None,
            })
        };
        match k % 5 {
            // A tower of three blocks.
            0 => {
                for j in 0..3 {
                    let z = 0.02 + 0.04 * j as f64;
                    add(
                        cuboid(0.02, 0.02, 0.02),
                        at(0.0, 0.0, z, 0.3 * j as f64),
                        NO_PART,
                    );
                }
            }
            // A dumbbell: two balls on a bar (part 1 = bar).
            1 => {
                add(
                    Shape::Sphere { radius: 0.03 },
                    at(0.0, -0.06, 0.03, 0.0),
                    NO_PART,
                );
                add(
                    Shape::Sphere { radius: 0.03 },
                    at(0.0, 0.06, 0.03, 0.0),
                    NO_PART,
                );
                add(capsule(0.01, 0.05), rot_x(0.0, 0.0, 0.03, PI / 2.0), 1);
            }
            // A mug: body, two handle bars and a grip (part 1 = handle).
            2 => {
                add(cyl(0.04, 0.05), at(0.0, 0.0, 0.05, 0.0), NO_PART);
                add(capsule(0.008, 0.02), rot_x(0.055, 0.0, 0.075, PI / 2.0), 1);
                add(capsule(0.008, 0.02), rot_x(0.055, 0.0, 0.025, PI / 2.0), 1);
                add(capsule(0.008, 0.025), at(0.075, 0.0, 0.05, 0.0), 1);
            }
            // A bottle: body, neck, cap.
            3 => {
                add(cyl(0.035, 0.08), at(0.0, 0.0, 0.08, 0.0), NO_PART);
                add(capsule(0.015, 0.03), at(0.0, 0.0, 0.19, 0.0), NO_PART);
                add(cyl(0.017, 0.01), at(0.0, 0.0, 0.235, 0.0), 1);
            }
            // A bowl: base disc and a ring of six wall slabs, plus a spoon.
            _ => {
                add(cyl(0.05, 0.006), at(0.0, 0.0, 0.006, 0.0), NO_PART);
                for j in 0..6 {
                    let a = j as f64 * PI / 3.0;
                    add(
                        cuboid(0.005, 0.045, 0.025),
                        at(0.075 * a.cos(), 0.075 * a.sin(), 0.03, a),
                        NO_PART,
                    );
                }
                add(capsule(0.006, 0.06), rot_x(0.0, 0.0, 0.04, 1.2), 1);
            }
        }
    }
    // The arm: base, shoulder, upper arm, elbow, forearm, wrist, flange, gripper (15 primitives),
    // bent over the table the way it is between two motions.
    let link = |shape: Shape, pose: Isometry3<f64>, part: u8| Primitive {
        shape,
        world_from_shape: pose,
        color: [0.85, 0.85, 0.88],
        instance: ROBOT_INSTANCE,
        part,
        texture: None,
    };
    let from_to = |a: Vector3<f64>, b: Vector3<f64>| {
        let axis = b - a;
        let rot = UnitQuaternion::rotation_between(&Vector3::z(), &axis)
            .unwrap_or_else(UnitQuaternion::identity);
        (
            Isometry3::from_parts(Translation3::from((a + b) / 2.0), rot),
            axis.norm() / 2.0,
        )
    };
    let joints = [
        Vector3::new(0.0, 0.0, 0.0),
        Vector3::new(0.0, 0.0, 0.27),
        Vector3::new(0.18, 0.05, 0.52),
        Vector3::new(0.42, 0.08, 0.42),
        Vector3::new(0.48, 0.09, 0.3),
    ];
    prims.push(link(cyl(0.07, 0.06), at(0.0, 0.0, 0.06, 0.0), NO_PART));
    for (j, w) in joints.windows(2).enumerate() {
        let (pose, half) = from_to(w[0], w[1]);
        prims.push(link(capsule(0.045 - 0.006 * j as f64, half), pose, NO_PART));
        prims.push(link(
            cyl(0.055 - 0.006 * j as f64, 0.04),
            Isometry3::from_parts(
                Translation3::from(w[1]),
                UnitQuaternion::from_axis_angle(&Vector3::y_axis(), PI / 2.0),
            ),
            NO_PART,
        ));
    }
    let tip = joints[4];
    prims.push(link(
        cyl(0.03, 0.02),
        at(tip.x, tip.y, tip.z - 0.03, 0.0),
        NO_PART,
    ));
    prims.push(link(
        cuboid(0.02, 0.05, 0.015),
        at(tip.x, tip.y, tip.z - 0.065, 0.0),
        NO_PART,
    ));
    prims.push(link(
        cuboid(0.008, 0.006, 0.03),
        at(tip.x, tip.y + 0.03, tip.z - 0.11, 0.0),
        1,
    ));
    prims.push(link(
        cuboid(0.008, 0.006, 0.03),
        at(tip.x, tip.y - 0.03, tip.z - 0.11, 0.0),
        2,
    ));
    prims.push(link(
        Shape::Sphere { radius: 0.02 },
        at(tip.x, tip.y, tip.z - 0.04, 0.0),
        NO_PART,
    ));
    prims.push(link(
        capsule(0.012, 0.03),
        rot_x(tip.x, tip.y, tip.z, PI / 2.0),
        NO_PART,
    ));
    RenderScene { primitives: prims }
}

/// A RealSense-like 640×480 view (fx = fy = 615 px) from the far side of the table, orbiting
/// `frame`·0.5° about the vertical axis through the table centre.
pub fn typical_camera(frame: usize) -> Result<PinholeCamera, RenderError> {
    let a = frame as f64 * 0.5f64.to_radians();
    let centre = Vector3::new(0.45, 0.0, 0.0);
    let offset = Vector3::new(0.85, 0.35, 0.6);
    let rotated = UnitQuaternion::from_axis_angle(&Vector3::z_axis(), a) * offset;
    PinholeCamera::look_at(
        Point3::from(centre + rotated),
        Point3::new(0.35, 0.0, 0.1),
        Vector3::z(),
        Intrinsics::pinhole(640, 480, 615.0, 615.0, 319.5, 239.5),
    )
}

pub(crate) fn run(args: &RenderBenchArgs) -> Result<RenderBenchReport, RenderBenchError> {
    if args.frames == 0 {
        return Err(RenderBenchError::NoFrames);
    }
    let scene = typical_scene(7);
    let cameras = (0..args.frames)
        .map(typical_camera)
        .collect::<Result<Vec<_>, _>>()?;
    let clean = RenderOptions::default();
    let noisy = RenderOptions::realsense_like();

    let time = |name: &str, frames: usize, f: &dyn Fn(&PinholeCamera) -> RenderOutput| {
        let start = Instant::now();
        let outs: Vec<RenderOutput> = cameras[..frames].iter().map(f).collect();
        let timing = Timing {
            name: name.to_string(),
            frames,
            seconds: start.elapsed().as_secs_f64(),
        };
        (timing, outs)
    };
    let brute_frames = args.frames.div_ceil(5);
    let (ours, ours_out) = time("ours (culled)", args.frames, &|c| render(&scene, c, &clean));
    let (ours_noisy, _) = time("ours + realsense_like noise/holes", args.frames, &|c| {
        render(&scene, c, &noisy)
    });
    let (brute, brute_out) = time("brute force (peer)", brute_frames, &|c| {
        render_brute_force(&scene, c, &clean)
    });
    let identical = brute_out.iter().zip(&ours_out).all(|(a, b)| a == b);
    let first = &ours_out[0];
    let coverage = first.instance.iter().filter(|&&i| i != 0).count() as f64
        / first.instance.len().max(1) as f64;
    Ok(RenderBenchReport {
        cpu: crate::cpu_model(),
        width: first.width,
        height: first.height,
        primitives: scene.primitives.len(),
        ours,
        ours_noisy,
        brute,
        identical,
        coverage,
    })
}

impl fmt::Display for RenderBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "bench render: {}x{}, {} primitives (table, 10 objects, 15 robot links), one thread, {:.0}% of pixels hit",
            self.width,
            self.height,
            self.primitives,
            100.0 * self.coverage
        )?;
        writeln!(f, "  cpu: {}", self.cpu)?;
        for t in [&self.ours, &self.ours_noisy, &self.brute] {
            writeln!(
                f,
                "  {:<36} {:>4} frames  {:>8.2} ms/frame  {:>7.2} frames/s",
                t.name,
                t.frames,
                1e3 * t.seconds / t.frames as f64,
                t.frames_per_s()
            )?;
        }
        let speedup = self.ours.frames_per_s() / self.brute.frames_per_s();
        writeln!(
            f,
            "  speed-up vs brute force: {speedup:.1}x; outputs identical on the {} shared frames: {}",
            self.brute.frames,
            if self.identical { "yes" } else { "NO" }
        )?;
        let fps = self.ours.frames_per_s();
        write!(
            f,
            "  goal >= {GOAL_FRAMES_PER_S} frames/s on one core: {} ({fps:.1})",
            if fps >= GOAL_FRAMES_PER_S {
                "met"
            } else {
                "NOT met"
            }
        )
    }
}

fn at(x: f64, y: f64, z: f64, yaw: f64) -> Isometry3<f64> {
    Isometry3::new(Vector3::new(x, y, z), Vector3::z() * yaw)
}

fn rot_x(x: f64, y: f64, z: f64, angle: f64) -> Isometry3<f64> {
    Isometry3::new(Vector3::new(x, y, z), Vector3::x() * angle)
}

fn cuboid(x: f64, y: f64, z: f64) -> Shape {
    Shape::Cuboid {
        half_extents: Vector3::new(x, y, z),
    }
}

fn cyl(radius: f64, half_height: f64) -> Shape {
    Shape::Cylinder {
        radius,
        half_height,
    }
}

fn capsule(radius: f64, half_height: f64) -> Shape {
    Shape::Capsule {
        radius,
        half_height,
    }
}
