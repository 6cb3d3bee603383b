//! Task suites: every episode lays out validly and reproducibly, and a scripted ground-truth
//! pick-and-place solves them in the physics world.

mod sim_physics_util;

use std::sync::Arc;

use pointact::kinematics::{IkOptions, IkSolver, RobotModel};
use pointact::nalgebra::Point3;
use pointact::sim::judge::judge;
use pointact::sim::tasks::{all_tasks, Target, EPISODES_PER_TASK};
use pointact::sim::{Goal, SimWorld, Suite};
use sim_physics_util::{pick_and_place, top_down};

fn place_point(ep: &pointact::sim::Episode, world: &SimWorld) -> Option<Point3<f64>> {
    let region = ep.target_region_world(world)?;
    let c = region.frame_from_region.translation.vector;
    let hz = region.shape.local_half_extents().z;
    Some(Point3::new(c.x, c.y, c.z - hz))
}

fn grasp_point(ep: &pointact::sim::Episode, world: &SimWorld) -> Option<Point3<f64>> {
    let part = ep.grasp_part.as_deref()?;
    let obj = world.object(&ep.object)?;
    let c = obj.part_center(part)?;
    Some(world.object_pose(&ep.object)? * Point3::new(c.x, c.y, 0.0))
}

#[test]
fn scripted_pick_and_place_solves_every_task() {
    let t0 = std::time::Instant::now();
    let mut sim_s = 0.0;
    let mut report = Vec::new();
    for spec in all_tasks() {
        let mut ok = 0;
        let seeds = 0..3u64;
        for seed in seeds.clone() {
            let ep = spec.instantiate(seed).unwrap();
            let model = ep.robot_model().unwrap();
            let mut world = ep.world(model).unwrap();
            let grasp = grasp_point(&ep, &world);
            let place = place_point(&ep, &world);
            pick_and_place(&mut world, &ep.object, grasp, place);
            let j = judge(&mut world, &ep);
            sim_s += world.time();
            if j.success {
                ok += 1;
            }
            println!("{} seed {seed}: {} — {}", ep.task, j.success, j.detail);
        }
        report.push((spec.full_id(), ok, seeds.count()));
    }
    println!("{} s simulated in {:?}", sim_s, t0.elapsed());
    for (id, ok, n) in &report {
        println!("{id}: {ok}/{n}");
    }
    for (id, ok, n) in &report {
        assert_eq!(ok, n, "{id}");
    }
}
