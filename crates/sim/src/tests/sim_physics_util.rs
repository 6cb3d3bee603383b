//! Helpers shared by the simulator physics tests: tiny scenes and a top-down IK mover.
#![allow(dead_code)]

use std::sync::Arc;

use crate::scene::Scene;
use crate::SimWorld;
use k::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};
use pointact_core::kinematics::{IkOptions, IkSolver, RobotModel};

/// A scene for `robot` with the given `[[objects]]` TOML on the standard table and camera.
pub fn scene_with(robot: &str, objects: &str) -> Scene {
    let text = format!(
        r#"
name = "test"
robot = "{robot}"
[table]
center = [0.4, 0.0]
size = [1.2, 1.4]
color = [0.4, 0.3, 0.2]
[camera]
eye = [1.15, 0.0, 0.7]
target = [0.42, 0.0, 0.0]
width = 640
height = 480
fx = 605.0
fy = 605.0
cx = 320.0
cy = 240.0
{objects}
"#
    );
    Scene::from_toml_str(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"))
}

pub fn model(robot: &str) -> Arc<RobotModel> {
    Arc::new(RobotModel::builtin(robot).unwrap())
}

/// Tool pose pointing straight down at (x, y, z) with the fingers closing along (cos yaw, sin yaw).
/// xArm's tool approaches along its z axis, WidowX's along x; both close along y.
pub fn top_down(robot: &str, x: f64, y: f64, z: f64, yaw: f64) -> Isometry3<f64> {
    // The library's top-down pose closes the fingers along `yaw + 90°`.
    pointact_core::planning::top_down(&model(robot), x, y, z, yaw - std::f64::consts::FRAC_PI_2)
}

/// Moves the tool along straight lines with IK at 60 Hz, stepping physics in between.
pub struct Mover {
    pub robot: String,
    pub solver: IkSolver,
    pub q: Vec<f64>,
    pub tcp: Isometry3<f64>,
}

impl Mover {
    pub fn new(world: &SimWorld) -> Mover {
        let model = world.robot();
        let q = model.home().to_vec();
        Mover {
            robot: model.name().to_string(),
            solver: IkSolver::new(model, IkOptions::default()),
            tcp: model.fk(&q).unwrap(),
            q,
        }
    }

    /// Jumps (no physics) to a pose: for setting up far from objects.
    pub fn teleport(&mut self, world: &mut SimWorld, target: &Isometry3<f64>, gripper: f64) {
        let sol = self.solver.solve(target, &self.q).expect("IK");
        self.q = sol.q;
        self.tcp = *target;
        world.set_robot(&self.q, gripper).unwrap();
        world.step_for(0.05);
    }

    /// Straight-line move to `target` over `secs`, gripper command held at `gripper`.
    pub fn go(&mut self, world: &mut SimWorld, target: &Isometry3<f64>, gripper: f64, secs: f64) {
        let n = (secs * 60.0).ceil().max(1.0) as usize;
        let start = self.tcp;
        let per = (1.0 / 60.0 / world.dt()).round() as usize;
        for i in 1..=n {
            let t = i as f64 / n as f64;
            let pose = start.lerp_slerp(target, t);
            let sol = self.solver.solve(&pose, &self.q).expect("IK");
            let q0 = self.q.clone();
            for s in 1..=per {
                let a = s as f64 / per as f64;
                let q: Vec<f64> = q0
                    .iter()
                    .zip(&sol.q)
                    .map(|(a0, b)| a0 + a * (b - a0))
                    .collect();
                world.set_robot(&q, gripper).unwrap();
                world.step();
            }
            self.q = sol.q;
        }
        self.tcp = *target;
    }

    /// Holds the arm still with a new gripper command for `secs`.
    pub fn grip(&mut self, world: &mut SimWorld, gripper: f64, secs: f64) {
        world.set_robot(&self.q, gripper).unwrap();
        world.step_for(secs);
    }
}

/// How far the fingertips reach below the tool point when pointing down (WidowX's TCP sits 11 mm
/// short of the fingertips; xArm's is at them).
pub fn tip_below_tcp(robot: &str) -> f64 {
    if robot.starts_with("xarm") {
        0.0
    } else {
        0.012
    }
}

/// Closing direction (yaw) across an object's narrow side, folded into [-π/2, π/2].
pub fn grasp_yaw(object_yaw: f64) -> f64 {
    let mut a = object_yaw + std::f64::consts::FRAC_PI_2;
    while a > std::f64::consts::FRAC_PI_2 {
        a -= std::f64::consts::PI;
    }
    while a < -std::f64::consts::FRAC_PI_2 {
        a += std::f64::consts::PI;
    }
    a
}

/// A scripted pick-and-place from ground truth (the tests' stand-in for the real executor): grasp
/// `object` top-down across its narrow side at `grasp` (world point; object centre if `None`), lift,
/// carry over `place` (world point on the surface to put it on), lower, release, retreat.
pub fn pick_and_place(
    world: &mut SimWorld,
    object: &str,
    grasp: Option<k::nalgebra::Point3<f64>>,
    place: Option<k::nalgebra::Point3<f64>>,
) {
    pick_and_place_over(world, object, grasp, place, 0.0);
}

/// [`pick_and_place`] carrying high enough that the held object's bottom clears `clear_z` (the
/// top of the tallest obstacle) by 3.5 cm: lift straight up, move across, lower straight down.
pub fn pick_and_place_over(
    world: &mut SimWorld,
    object: &str,
    grasp: Option<k::nalgebra::Point3<f64>>,
    place: Option<k::nalgebra::Point3<f64>>,
    clear_z: f64,
) {
    let robot = world.robot().name().to_string();
    let obj = world.object(object).unwrap().clone();
    let pose = world.object_pose(object).unwrap();
    let (_, _, yaw) = pose.rotation.euler_angles();
    let gyaw = grasp_yaw(yaw);
    let h = obj.height();
    let base_z = pose.translation.z;
    let g = grasp.unwrap_or_else(|| {
        let (lo, hi) = obj.footprint();
        let c = (lo + hi) / 2.0;
        pose * k::nalgebra::Point3::new(c.x, c.y, 0.0)
    });
    let tip = tip_below_tcp(&robot);
    // Fingertips 1 cm below mid-height (at most 3 cm below the top), never below the table.
    let tcp_above_base = ((h / 2.0 - 0.005).min(h - 0.03) + tip).max(tip + 0.002);
    let grasp_z = base_z + tcp_above_base;
    let travel_z = if robot.starts_with("xarm") {
        0.22_f64
    } else {
        0.16
    }
    .max(clear_z + tcp_above_base + 0.035);
    let mut m = Mover::new(world);
    m.teleport(world, &top_down(&robot, g.x, g.y, travel_z, gyaw), 1.0);
    m.go(world, &top_down(&robot, g.x, g.y, grasp_z, gyaw), 1.0, 1.2);
    m.grip(world, 0.0, 0.8);
    m.go(world, &top_down(&robot, g.x, g.y, travel_z, gyaw), 0.0, 1.2);
    let Some(p) = place else {
        return;
    };
    m.go(world, &top_down(&robot, p.x, p.y, travel_z, gyaw), 0.0, 1.5);
    let down = p.z + tcp_above_base + 0.015;
    m.go(world, &top_down(&robot, p.x, p.y, down, gyaw), 0.0, 1.2);
    m.grip(world, 1.0, 0.6);
    m.go(world, &top_down(&robot, p.x, p.y, travel_z, gyaw), 1.0, 1.0);
}

/// Teleports `object` upright onto the surface point `p` (its base `lift` above it), turned to `yaw`.
pub fn place_at(world: &mut SimWorld, object: &str, p: k::nalgebra::Point3<f64>, yaw: f64) {
    let obj = world.object(object).unwrap().clone();
    // Put the footprint centre (not the origin) over the point.
    let (lo, hi) = obj.footprint();
    let c = (lo + hi) / 2.0;
    let rot = UnitQuaternion::from_euler_angles(0.0, 0.0, yaw);
    let off = rot * Vector3::new(c.x, c.y, 0.0);
    let pose = Isometry3::from_parts(
        Translation3::new(p.x - off.x, p.y - off.y, p.z + 0.003),
        rot,
    );
    world.set_object_pose(object, &pose).unwrap();
}

/// Surface point (bottom centre) of an episode's target region, world frame.
pub fn target_point(
    ep: &crate::tasks::Episode,
    world: &SimWorld,
) -> Option<k::nalgebra::Point3<f64>> {
    let region = ep.target_region_world(world)?;
    let c = region.frame_from_region.translation.vector;
    let hz = region.shape.local_half_extents().z;
    Some(k::nalgebra::Point3::new(c.x, c.y, c.z - hz))
}

/// World grasp point of an episode's grasp part (on the table plane), if it names one.
pub fn grasp_part_point(
    ep: &crate::tasks::Episode,
    world: &SimWorld,
) -> Option<k::nalgebra::Point3<f64>> {
    let part = ep.grasp_part.as_deref()?;
    let obj = world.object(&ep.object)?;
    let c = obj.part_center(part)?;
    Some(world.object_pose(&ep.object)? * k::nalgebra::Point3::new(c.x, c.y, 0.0))
}
