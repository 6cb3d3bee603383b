//! Grasping in the simulator: straddle a block with open fingers, close, lift, release.

use super::sim_physics_util::{model, scene_with, top_down, Mover};
use crate::SimWorld;

/// A settled world with one 100 g cube of side `size` at `(x, y)`, turned `yaw`.
fn block_world(robot: &str, size: f64, x: f64, y: f64, yaw: f64) -> SimWorld {
    let scene = scene_with(
        robot,
        &format!(
            r#"
[[objects]]
name = "block"
color = [0.8, 0.1, 0.1]
mass = 0.1
pose = [{x}, {y}, {yaw}]
shape = {{ kind = "block", size = [{size}, {size}, {size}] }}
"#
        ),
    );
    let mut world = SimWorld::new(&scene, model(robot)).unwrap();
    assert!(world.settle(2.0));
    world
}

fn grasp_and_lift(robot: &str, size: f64, x: f64, y: f64, yaw: f64) {
    let mut world = block_world(robot, size, x, y, yaw);
    let z0 = world.object_pose("block").unwrap().translation.z;
    let mut m = Mover::new(&world);
    let grasp_z = size / 2.0 - 0.01;
    let above = top_down(robot, x, y, 0.15, yaw);
    let at = top_down(robot, x, y, grasp_z.max(0.008), yaw);
    let t = std::time::Instant::now();
    m.teleport(&mut world, &above, 1.0);
    m.go(&mut world, &at, 1.0, 1.0);
    m.grip(&mut world, 0.0, 1.0);
    let held = world.held_object().map(str::to_string);
    println!(
        "{robot}: openings after close {:?}, held {held:?}",
        world.gripper_opening()
    );
    let lifted = top_down(robot, x, y, grasp_z.max(0.008) + 0.10, yaw);
    m.go(&mut world, &lifted, 0.0, 1.5);
    m.grip(&mut world, 0.0, 0.5);
    let z1 = world.object_pose("block").unwrap().translation.z;
    println!(
        "{robot}: block rose {:.4} m (t {:.2} s sim in {:?})",
        z1 - z0,
        world.time(),
        t.elapsed()
    );
    assert!(z1 - z0 > 0.09, "block rose only {:.4} m", z1 - z0);
    assert_eq!(held.as_deref(), Some("block"));
    assert_eq!(world.attached_object(), Some("block"));
    m.grip(&mut world, 1.0, 1.0);
    assert_eq!(world.attached_object(), None);
    world.settle(2.0);
    let z2 = world.object_pose("block").unwrap().translation.z;
    assert!(
        (z2 - z0).abs() < 0.005,
        "released block at {z2}, started {z0}"
    );
    assert_eq!(world.held_object(), None);
}

#[test]
fn xarm_lifts_a_block_and_drops_it_when_opening() {
    grasp_and_lift("xarm6", 0.045, 0.45, 0.05, 0.3);
}

#[test]
fn widowx_lifts_a_block_and_drops_it_when_opening() {
    grasp_and_lift("widowx250", 0.035, 0.30, -0.05, -0.4);
}

/// A held object stays between the fingers through a jolt: the arm jumps 4 cm up within one
/// physics step (what a starved controller or a bunched servo stream can do). The attach rule's
/// joint is a stiff spring, so the object lags the hand for a moment; the fingers must not close
/// through it meanwhile (a real hand's fingers cannot pass through what they hold), or the width
/// reads as empty fingers and the run reports a lost grasp with the object still in the hand.
#[test]
fn a_jolt_does_not_close_the_fingers_through_a_held_object() {
    let (robot, size, x, y, yaw) = ("xarm6", 0.045, 0.45, 0.05, 0.3);
    let mut world = block_world(robot, size, x, y, yaw);
    let mut m = Mover::new(&world);
    let grasp_z = size / 2.0 - 0.01;
    m.teleport(&mut world, &top_down(robot, x, y, 0.15, yaw), 1.0);
    m.go(&mut world, &top_down(robot, x, y, grasp_z, yaw), 1.0, 1.0);
    m.grip(&mut world, 0.0, 1.0);
    assert_eq!(world.attached_object(), Some("block"));
    let held = world.gripper_opening();
    assert!(held > 0.3, "closed to {held} on a 45 mm block");
    for k in 1..=4 {
        let up = top_down(robot, x, y, grasp_z + 0.04 * k as f64, yaw);
        let sol = m.solver.solve(&up, &m.q).expect("IK");
        m.q = sol.q;
        m.tcp = up;
        world.set_robot(&m.q, 0.0).unwrap();
        for _ in 0..20 {
            world.step();
            let o = world.gripper_opening();
            assert!(
                o >= held - 1e-9,
                "jolt {k}: the fingers closed to {o:.4} through the held block (held at {held:.4})"
            );
        }
    }
    assert_eq!(world.attached_object(), Some("block"));
}
