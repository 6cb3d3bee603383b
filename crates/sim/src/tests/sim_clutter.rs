//! The clutter suite's judge rule in the physics world: a scripted carry over the wall solves the
//! episode and passes; the same solve fails once the wall has been moved; a carry through the
//! wall fails with the obstacle named, whether a link or the carried object touched it first.

use super::sim_physics_util::{model, pick_and_place_over, target_point};
use crate::judge::judge;
use crate::tasks::task;
use crate::tasks::Episode;
use crate::SimWorld;
use k::nalgebra::{Isometry3, Translation3};

fn wall_episode() -> (Episode, SimWorld) {
    let ep = task("clutter/xarm_block_over_wall")
        .unwrap()
        .instantiate(0)
        .unwrap();
    let world = ep.world(model("xarm6")).unwrap();
    (ep, world)
}

/// Picks the block and puts it in the bowl, carrying it so its bottom clears `clear_z`.
fn solve(ep: &Episode, world: &mut SimWorld, clear_z: f64) {
    let place = target_point(ep, world);
    pick_and_place_over(world, &ep.object, None, place, clear_z);
}

#[test]
fn over_the_wall_passes_and_a_moved_wall_fails() {
    let (ep, mut world) = wall_episode();
    assert_eq!(ep.obstacles, vec!["wall".to_string()]);
    let wall_h = world.object("wall").unwrap().height();
    solve(&ep, &mut world, wall_h);
    assert!(world.first_robot_touch("wall").is_none());
    let j = judge(&mut world, &ep);
    assert!(j.success, "{}", j.detail);

    // The same solve, then the wall pushed 2 cm: the goal holds, the episode fails.
    let (ep, mut world) = wall_episode();
    solve(&ep, &mut world, wall_h);
    let pose = world.object_pose("wall").unwrap();
    let pushed = Isometry3::from_parts(
        Translation3::from(pose.translation.vector + k::nalgebra::Vector3::x() * 0.02),
        pose.rotation,
    );
    world.set_object_pose("wall", &pushed).unwrap();
    let j = judge(&mut world, &ep);
    assert!(!j.success);
    assert!(
        j.detail.contains("`wall` was moved") && j.detail.contains("the goal alone held"),
        "{}",
        j.detail
    );
}

#[test]
fn carrying_through_the_wall_fails_and_names_it() {
    // Today's carry height (20-22 cm) through a 25 cm wall.
    let (ep, mut world) = wall_episode();
    solve(&ep, &mut world, 0.0);
    let touch = world
        .first_robot_touch("wall")
        .expect("the carry touches the wall");
    assert!(touch.time_s > 0.0);
    let j = judge(&mut world, &ep);
    assert!(!j.success);
    assert!(j.detail.contains("hit `wall`"), "{}", j.detail);

    // High enough for the fingers (tips 1 cm over the wall), too low for the block hanging
    // below them: the carried object is named.
    let (ep, mut world) = wall_episode();
    let block = world.object("red_block").unwrap().height();
    // pick_and_place_over puts the tool point at clear_z + (grasp height above the block's
    // bottom: 1.5 cm for a 4.5 cm block) + 3.5 cm; aim it 1 cm above the wall's top.
    let wall_h = world.object("wall").unwrap().height();
    let grasp_above_bottom = (block / 2.0 - 0.005).min(block - 0.03);
    solve(&ep, &mut world, wall_h + 0.01 - 0.035 - grasp_above_bottom);
    let j = judge(&mut world, &ep);
    assert!(!j.success);
    assert!(
        j.detail.contains("the carried `red_block` hit `wall`"),
        "{}",
        j.detail
    );
}

#[test]
fn episodes_without_obstacles_are_judged_as_before() {
    // A tabletop episode has no obstacles: nothing it touches on the way counts against it.
    let ep = task("tabletop/fruit_in_bowl")
        .unwrap()
        .instantiate(3)
        .unwrap();
    assert!(ep.obstacles.is_empty());
    let mut world = ep.world(model("xarm6")).unwrap();
    solve(&ep, &mut world, 0.0);
    let j = judge(&mut world, &ep);
    assert!(j.success, "{}", j.detail);
    assert!(!j.detail.contains("goal alone"), "{}", j.detail);
}
