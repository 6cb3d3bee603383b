//! Task suites: all 18 tasks × 24 seeds lay out validly (on the table, apart, visible, reachable,
//! not already solved) and reproducibly, and a scripted ground-truth pick-and-place (the tests'
//! stand-in for the real executor) solves them in the physics world (over the obstacles of the
//! clutter tasks, touching none).
//!
//! `SEEDS=24 cargo test --release --test sim_physics_tasks` runs the scripted solve on all 24
//! episodes per task (about 20 s); by default it runs 3.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::sim_physics_util::{
    grasp_part_point, grasp_yaw, pick_and_place, pick_and_place_over, target_point, top_down,
};
use crate::judge::judge;
use crate::tasks::Goal;
use crate::tasks::Suite;
use crate::tasks::{all_tasks, task, Target, EPISODES_PER_TASK};
use crate::SimWorld;
use k::nalgebra::{Point3, Vector3};
use pointact_core::kinematics::{IkOptions, IkSolver, RobotModel};

fn models() -> BTreeMap<&'static str, Arc<RobotModel>> {
    ["xarm6", "widowx250"]
        .into_iter()
        .map(|n| (n, Arc::new(RobotModel::builtin(n).unwrap())))
        .collect()
}

#[test]
fn every_task_lays_out_24_valid_episodes() {
    let models = models();
    let tasks = all_tasks();
    assert_eq!(tasks.len(), 18);
    for spec in &tasks {
        let robot = match spec.suite {
            Suite::Tabletop => "xarm6",
            Suite::Bridge => "widowx250",
            Suite::Clutter if spec.id.starts_with("xarm") => "xarm6",
            Suite::Clutter => "widowx250",
        };
        let model = &models[robot];
        let ws = &model.config.workspace;
        let mut ik = IkSolver::new(model, IkOptions::default());
        let mut layouts = Vec::new();
        for seed in 0..EPISODES_PER_TASK {
            let ep = spec
                .instantiate(seed)
                .unwrap_or_else(|e| panic!("{}: {e}", spec.full_id()));
            let id = format!("{} seed {seed}", ep.task);
            assert_eq!(ep.robot, robot, "{id}");
            assert!(!ep.instruction.is_empty());
            assert_eq!(ep.goal.object(), ep.object, "{id}");
            let obj = ep.scene.object(&ep.object).expect("manipulated object");
            if let Some(part) = &ep.grasp_part {
                assert!(obj.part_id(part).is_some(), "{id}: no part {part}");
            }
            let cam = &ep.scene.camera;
            for o in &ep.scene.objects {
                let (lo, hi) = o.footprint();
                let c = (lo + hi) / 2.0;
                let centre = o.world_from_object * Point3::new(c.x, c.y, o.height() / 2.0);
                // Inside the robot's workspace box (x, y) and in the image with a margin.
                assert!(
                    (0..2).all(|i| centre[i] >= ws.min[i] && centre[i] <= ws.max[i]),
                    "{id}: {} at {centre:?} outside the workspace",
                    o.name
                );
                let [u, v] = cam.project(&centre).expect("in front of the camera");
                assert!(
                    (40.0..600.0).contains(&u) && (40.0..440.0).contains(&v),
                    "{id}: {} projects to ({u:.0}, {v:.0})",
                    o.name
                );
            }
            // Reachable top-down: above and at the grasp point, and above the target.
            let pose = obj.world_from_object;
            let (_, _, yaw) = pose.rotation.euler_angles();
            let grasp = match &ep.grasp_part {
                Some(p) => pose * obj.part_center(p).unwrap(),
                None => {
                    let (lo, hi) = obj.footprint();
                    let c = (lo + hi) / 2.0;
                    pose * Point3::new(c.x, c.y, obj.height() / 2.0)
                }
            };
            let mut goals = vec![
                (grasp.x, grasp.y, obj.height() + 0.10),
                (grasp.x, grasp.y, (obj.height() / 2.0).max(0.012)),
            ];
            let region = match &ep.target {
                Target::Object { name, region } => {
                    Some(region.transformed(&ep.scene.object(name).unwrap().world_from_object))
                }
                Target::Area { region } => Some(*region),
                Target::None => None,
            };
            if let Some(r) = region {
                let t = r.frame_from_region.translation.vector;
                assert!(
                    (0..2).all(|i| t[i] >= ws.min[i] && t[i] <= ws.max[i]),
                    "{id}: target {t:?} outside the workspace"
                );
                goals.push((t.x, t.y, t.z + 0.12));
            }
            let mut seed_q = model.home().to_vec();
            for (x, y, z) in goals {
                let target = top_down(robot, x, y, z, grasp_yaw(yaw));
                let sol = ik
                    .solve(&target, &seed_q)
                    .unwrap_or_else(|e| panic!("{id}: ({x:.3}, {y:.3}, {z:.3}) unreachable: {e}"));
                seed_q = sol.q;
            }
            layouts.push(
                ep.scene
                    .objects
                    .iter()
                    .map(|o| o.world_from_object.translation.vector)
                    .collect::<Vec<Vector3<f64>>>(),
            );
        }
        for i in 0..layouts.len() {
            for j in i + 1..layouts.len() {
                assert_ne!(
                    layouts[i],
                    layouts[j],
                    "{}: seeds {i} and {j}",
                    spec.full_id()
                );
            }
        }
    }
}

#[test]
fn episodes_are_reproducible() {
    let models = models();
    for spec in all_tasks() {
        for seed in [0, 7] {
            let a = spec.instantiate(seed).unwrap();
            let b = spec.instantiate(seed).unwrap();
            assert_eq!(a, b, "{} seed {seed}", spec.full_id());
        }
    }
    // The same episode and commands give bit-identical physics.
    let ep = task("tabletop/fruit_in_bowl")
        .unwrap()
        .instantiate(3)
        .unwrap();
    let run = || {
        let mut world = ep.world(models["xarm6"].clone()).unwrap();
        let target = target_point(&ep, &world);
        pick_and_place(&mut world, &ep.object, None, target);
        world
            .object_names()
            .iter()
            .map(|n| world.object_pose(n).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn every_episode_starts_at_rest_and_unsolved() {
    let models = models();
    for spec in all_tasks() {
        for seed in 0..EPISODES_PER_TASK {
            let ep = spec.instantiate(seed).unwrap();
            let mut world = ep.world(models[ep.robot.as_str()].clone()).unwrap();
            // The robot at home touches nothing and the layout is at rest as sampled.
            for o in &ep.scene.objects {
                let now = world.object_pose(&o.name).unwrap();
                let moved =
                    (now.translation.vector - o.world_from_object.translation.vector).norm();
                assert!(
                    moved < 0.003,
                    "{} seed {seed}: {} moved {moved:.4} m",
                    ep.task,
                    o.name
                );
            }
            let j = judge(&mut world, &ep);
            assert!(
                !j.success,
                "{} seed {seed} starts solved: {}",
                ep.task, j.detail
            );
        }
    }
}

#[test]
fn the_nearest_object_is_the_one_nearest_the_camera() {
    let spec = task("tabletop/nearest_right_of_box").unwrap();
    let mut chosen = std::collections::BTreeSet::new();
    for seed in 0..EPISODES_PER_TASK {
        let ep = spec.instantiate(seed).unwrap();
        let eye = ep.scene.camera.eye;
        let dist = |name: &str| {
            let o = ep.scene.object(name).unwrap();
            (o.world_from_object * Point3::new(0.0, 0.0, o.height() / 2.0) - eye).norm()
        };
        for other in ["can", "green_block", "orange"] {
            if other != ep.object {
                assert!(dist(&ep.object) + 0.03 < dist(other), "seed {seed}");
            }
        }
        assert!(matches!(&ep.goal, Goal::Beside { reference, .. } if reference == "box"));
        chosen.insert(ep.object.clone());
    }
    // The randomisation varies which object is nearest.
    assert!(chosen.len() >= 2, "{chosen:?}");
}

#[test]
fn scripted_pick_and_place_solves_every_task() {
    let models = models();
    let seeds: u64 = std::env::var("SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let t0 = std::time::Instant::now();
    let mut sim_s = 0.0;
    let mut failures = Vec::new();
    for spec in all_tasks() {
        for seed in 0..seeds {
            let ep = spec.instantiate(seed).unwrap();
            let mut world: SimWorld = ep.world(models[ep.robot.as_str()].clone()).unwrap();
            let grasp = grasp_part_point(&ep, &world);
            let place = target_point(&ep, &world);
            // Over the tallest obstacle (clutter tasks; 0 elsewhere).
            let clear_z = ep
                .obstacles
                .iter()
                .map(|o| world.object(o).unwrap().height())
                .fold(0.0, f64::max);
            pick_and_place_over(&mut world, &ep.object, grasp, place, clear_z);
            let j = judge(&mut world, &ep);
            sim_s += world.time();
            if !j.success {
                failures.push(format!("{} seed {seed}: {}", ep.task, j.detail));
            }
        }
    }
    println!(
        "{sim_s:.0} s simulated in {:.2?} ({:.0}x real time, IK included)",
        t0.elapsed(),
        sim_s / t0.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}
