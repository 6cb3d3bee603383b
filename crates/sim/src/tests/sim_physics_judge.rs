//! Each judge both passes and fails: objects put where the goal wants them (teleported, or grasped
//! for real for the lift task) succeed; objects left elsewhere fail.

use super::sim_physics_util::{grasp_yaw, pick_and_place, place_at, target_point, top_down, Mover};
use crate::judge::judge;
use crate::tasks::task;
use crate::tasks::Episode;
use crate::SimWorld;
use k::nalgebra::Point3;

fn setup(id: &str, seed: u64) -> (Episode, SimWorld) {
    let ep = task(id).unwrap().instantiate(seed).unwrap();
    let world = ep.world(ep.robot_model().unwrap()).unwrap();
    (ep, world)
}

/// A free spot on the table well away from every object of the episode.
fn far_spot(ep: &Episode) -> Point3<f64> {
    if ep.robot == "xarm6" {
        Point3::new(0.72, -0.42, 0.0)
    } else {
        Point3::new(0.45, -0.35, 0.0)
    }
}

fn yaw_of(world: &SimWorld, name: &str) -> f64 {
    world.object_pose(name).unwrap().rotation.euler_angles().2
}

/// Teleports the episode's object onto its target and judges; then onto a far spot and judges.
fn pass_then_fail(id: &str) {
    for seed in [0, 1] {
        let (ep, mut world) = setup(id, seed);
        let target = target_point(&ep, &world).unwrap();
        let yaw = match &ep.target {
            crate::tasks::Target::Object { name, .. } => yaw_of(&world, name),
            _ => 0.0,
        };
        place_at(&mut world, &ep.object, target, yaw);
        let j = judge(&mut world, &ep);
        assert!(
            j.success,
            "{id} seed {seed}, placed on target: {}",
            j.detail
        );

        place_at(&mut world, &ep.object, far_spot(&ep), 0.3);
        let j = judge(&mut world, &ep);
        assert!(
            !j.success,
            "{id} seed {seed}, placed far away: {}",
            j.detail
        );
    }
}

#[test]
fn inside_container() {
    pass_then_fail("tabletop/fruit_in_bowl");
    pass_then_fail("tabletop/pepper_in_pan");
    pass_then_fail("tabletop/can_in_basket");
    pass_then_fail("bridge/put_eggplant_in_basket");
}

#[test]
fn on_top_of_support() {
    pass_then_fail("tabletop/cup_on_plate");
    pass_then_fail("tabletop/stack_blocks");
    pass_then_fail("bridge/spoon_on_towel");
    pass_then_fail("bridge/carrot_on_plate");
    pass_then_fail("bridge/stack_cube");
}

#[test]
fn beside_reference() {
    pass_then_fail("tabletop/nearest_right_of_box");
    pass_then_fail("tabletop/carrot_left_of_plate");
}

#[test]
fn wrong_side_and_on_top_are_not_beside() {
    let (ep, mut world) = setup("tabletop/nearest_right_of_box", 0);
    let boxp = world.object_pose("box").unwrap().translation.vector;
    // Image right is the robot's +y for the tabletop camera: put it on the left (-y) instead.
    place_at(
        &mut world,
        &ep.object,
        Point3::new(boxp.x, boxp.y - 0.15, 0.0),
        0.0,
    );
    let j = judge(&mut world, &ep);
    assert!(
        !j.success && j.detail.contains("not to the right"),
        "{}",
        j.detail
    );
    place_at(
        &mut world,
        &ep.object,
        Point3::new(boxp.x, boxp.y + 0.15, 0.0),
        0.0,
    );
    assert!(judge(&mut world, &ep).success);
    // On top of the box is not beside it.
    place_at(
        &mut world,
        &ep.object,
        Point3::new(boxp.x, boxp.y, 0.09),
        0.0,
    );
    let j = judge(&mut world, &ep);
    assert!(!j.success, "{}", j.detail);
}

#[test]
fn a_block_hanging_off_the_edge_does_not_count_as_stacked() {
    let (ep, mut world) = setup("tabletop/stack_blocks", 0);
    let y = world.object_pose("yellow_block").unwrap();
    // Centre 3.2 cm off a 4.5 cm block: it tips off.
    let p = y * Point3::new(0.032, 0.0, 0.045);
    let yaw = yaw_of(&world, "yellow_block");
    place_at(&mut world, "red_block", p, yaw);
    let j = judge(&mut world, &ep);
    assert!(!j.success, "{}", j.detail);
}

#[test]
fn an_object_still_held_over_the_target_does_not_count() {
    let (ep, mut world) = setup("tabletop/fruit_in_bowl", 0);
    let target = target_point(&ep, &world).unwrap();
    // Grasp the orange and hold it inside the bowl without letting go.
    let mut m = Mover::new(&world);
    let o = world.object_pose("orange").unwrap().translation.vector;
    m.teleport(&mut world, &top_down("xarm6", o.x, o.y, 0.2, 0.0), 1.0);
    m.go(
        &mut world,
        &top_down("xarm6", o.x, o.y, 0.025, 0.0),
        1.0,
        1.0,
    );
    m.grip(&mut world, 0.0, 0.6);
    m.go(&mut world, &top_down("xarm6", o.x, o.y, 0.2, 0.0), 0.0, 1.0);
    m.go(
        &mut world,
        &top_down("xarm6", target.x, target.y, 0.2, 0.0),
        0.0,
        1.0,
    );
    m.go(
        &mut world,
        &top_down("xarm6", target.x, target.y, 0.045, 0.0),
        0.0,
        1.0,
    );
    assert_eq!(world.attached_object(), Some("orange"));
    let j = judge(&mut world, &ep);
    assert!(
        !j.success && j.detail.contains("touched by the robot"),
        "{}",
        j.detail
    );
    // Letting go then succeeds.
    m.grip(&mut world, 1.0, 0.5);
    m.go(
        &mut world,
        &top_down("xarm6", target.x, target.y, 0.2, 0.0),
        1.0,
        1.0,
    );
    let j = judge(&mut world, &ep);
    assert!(j.success, "{}", j.detail);
}

#[test]
fn lifted_by_the_handle() {
    for seed in [0, 1] {
        // By the handle: success.
        let (ep, mut world) = setup("tabletop/knife_by_handle", seed);
        let handle = super::sim_physics_util::grasp_part_point(&ep, &world).unwrap();
        pick_and_place(&mut world, "knife", Some(handle), None);
        let j = judge(&mut world, &ep);
        assert!(j.success, "seed {seed}: {}", j.detail);

        // By the blade: held, but not by the handle.
        let (ep, mut world) = setup("tabletop/knife_by_handle", seed);
        let knife = world.object("knife").unwrap().clone();
        let pose = world.object_pose("knife").unwrap();
        let blade = pose * knife.part_center("blade").unwrap();
        pick_and_place(
            &mut world,
            "knife",
            Some(Point3::new(blade.x, blade.y, 0.0)),
            None,
        );
        let j = judge(&mut world, &ep);
        assert!(
            !j.success && j.detail.contains("not only by its handle"),
            "seed {seed}: {}",
            j.detail
        );

        // Grasped by the handle but not lifted: fails on height.
        let (ep, mut world) = setup("tabletop/knife_by_handle", seed);
        let (_, _, yaw) = world.object_pose("knife").unwrap().rotation.euler_angles();
        let mut m = Mover::new(&world);
        let gy = grasp_yaw(yaw);
        m.teleport(
            &mut world,
            &top_down("xarm6", handle.x, handle.y, 0.15, gy),
            1.0,
        );
        m.go(
            &mut world,
            &top_down("xarm6", handle.x, handle.y, 0.01, gy),
            1.0,
            1.0,
        );
        m.grip(&mut world, 0.0, 0.8);
        m.go(
            &mut world,
            &top_down("xarm6", handle.x, handle.y, 0.03, gy),
            0.0,
            0.5,
        );
        let j = judge(&mut world, &ep);
        assert!(
            !j.success && j.detail.contains("less than"),
            "seed {seed}: {}",
            j.detail
        );

        // Never grasped: fails.
        let (ep, mut world) = setup("tabletop/knife_by_handle", seed);
        let j = judge(&mut world, &ep);
        assert!(
            !j.success && j.detail.contains("not held"),
            "seed {seed}: {}",
            j.detail
        );
    }
}
