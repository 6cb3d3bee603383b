//! `pointact run` end to end in the simulator: reduced suites hold the success bars, a wrong point
//! makes a failed episode (the judge can fail), and bad input ends in a clear error with the robot
//! at rest.

use super::common::block_on;
use pointact::camera::lift::LiftError;
use pointact::camera::{Camera, CameraError, Frame};
use pointact::executor::perceive::PerceiveError;
use pointact::executor::{Branch, TaskError};
use pointact::nalgebra::Point3;
use pointact::pointing::{
    Ability, ImageSize, ModelImageMap, Pointer, PointerError, Pointing, PointingError,
};
use pointact::runner::eval::run_suite;
use pointact::runner::{run_episode, run_episode_with, EpisodeOptions, EpisodeResult, RunError};
use pointact::sim::devices::SharedWorld;
use pointact::sim::oracle::{OracleOptions, OraclePointer};
use pointact::sim::tasks::{task, Episode, Suite};

/// Seeds kept apart from the eval's 0..24, so the bars are checked on layouts nobody tuned on.
const SEEDS: [u64; 2] = [1001, 1002];

fn rate(suites: &[Suite], branch: Branch, noise_px: f64) -> (f64, Vec<String>) {
    let opts = EpisodeOptions {
        branch,
        oracle: OracleOptions {
            noise_px,
            ..OracleOptions::default()
        },
        ..EpisodeOptions::default()
    };
    rate_with(suites, &opts)
}

/// Realistic conditions: a RealSense-like sensor and a calibration off by 2 mm and 0.2°.
fn realistic(branch: Branch, noise_px: f64) -> EpisodeOptions {
    EpisodeOptions {
        branch,
        oracle: OracleOptions {
            noise_px,
            ..OracleOptions::default()
        },
        render: pointact::sim::render::RenderOptions::realsense_like(),
        calib_error_mm: 2.0,
        calib_error_deg: 0.2,
        ..EpisodeOptions::default()
    }
}

fn rate_with(suites: &[Suite], opts: &EpisodeOptions) -> (f64, Vec<String>) {
    let (mut ok, mut n, mut failures) = (0, 0, Vec::new());
    for suite in suites {
        let report = block_on(run_suite(*suite, &SEEDS, opts, &mut |_, _, _| {}));
        for e in &report.episodes {
            n += 1;
            if e.success {
                ok += 1;
            } else {
                failures.push(format!("{} seed {}: {}", e.task, e.seed, e.detail));
            }
        }
    }
    assert_eq!(n, 12 * SEEDS.len(), "both suites, 12 tasks");
    (ok as f64 / n as f64, failures)
}

#[test]
fn affordance_branch_meets_the_bar_without_noise() {
    let (r, f) = rate(&[Suite::Tabletop, Suite::Bridge], Branch::Affordance, 0.0);
    assert!(r >= 0.95, "branch P {:.1}% < 95%: {f:#?}", 100.0 * r);
}

#[test]
fn trace_branch_meets_the_bar_without_noise() {
    let (r, f) = rate(&[Suite::Tabletop, Suite::Bridge], Branch::Trace, 0.0);
    assert!(r >= 0.85, "branch V {:.1}% < 85%: {f:#?}", 100.0 * r);
}

#[test]
fn affordance_branch_meets_the_bar_with_8px_noise() {
    let (r, f) = rate(&[Suite::Tabletop, Suite::Bridge], Branch::Affordance, 8.0);
    assert!(
        r >= 0.80,
        "branch P at 8 px {:.1}% < 80%: {f:#?}",
        100.0 * r
    );
}

fn episode(name: &str, seed: u64) -> Episode {
    task(name).unwrap().instantiate(seed).unwrap()
}

/// A pointer that answers one ability with a fixed pixel and passes the rest to the oracle.
struct Override {
    inner: OraclePointer,
    ability: Ability,
    raw: String,
}

impl Pointer for Override {
    fn name(&self) -> &str {
        "override"
    }
    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        if ability != self.ability {
            return self.inner.point(frame, ability, instruction);
        }
        let size = ImageSize::new(frame.depth.width as u32, frame.depth.height as u32);
        Pointing::parse(&self.raw, ability, ModelImageMap::new(size, size).unwrap())
    }
}

fn point_answer(px: [f64; 2]) -> String {
    format!(
        "<think>wrong on purpose</think><answer><point>[[{:.0}, {:.0}]]</point></answer>",
        px[0], px[1]
    )
}

/// A table point in view, at least `clear` metres from every object, that satisfies `keep`.
fn empty_table_pixel(ep: &Episode, clear: f64, keep: impl Fn(&Point3<f64>) -> bool) -> [f64; 2] {
    let cam = &ep.scene.camera;
    for i in 0..40 {
        for j in 0..40 {
            let p = Point3::new(
                -0.1 + 1.0 * i as f64 / 39.0,
                -0.6 + 1.2 * j as f64 / 39.0,
                ep.scene.table.height,
            );
            let far = ep.scene.objects.iter().all(|o| {
                (o.world_from_object.translation.vector.xy() - p.coords.xy()).norm() > clear
            });
            if !far || !keep(&p) {
                continue;
            }
            if let Some(px) = cam.project(&p) {
                if px[0] > 20.0
                    && px[1] > 20.0
                    && px[0] < cam.intrinsics().width as f64 - 20.0
                    && px[1] < cam.intrinsics().height as f64 - 20.0
                {
                    return px;
                }
            }
        }
    }
    panic!("no empty table point in view");
}

fn run_with(ep: &Episode, branch: Branch, ability: Ability, raw: String) -> EpisodeResult {
    let opts = EpisodeOptions {
        branch,
        ..EpisodeOptions::default()
    };
    block_on(run_episode_with(
        ep,
        &opts,
        |c| c,
        |truth| Override {
            inner: OraclePointer::new(truth, OracleOptions::default()),
            ability,
            raw,
        },
        &mut |_| {},
    ))
    .unwrap()
}

/// A place beside things (not in or on a target, which the executor keeps inside the target's
/// segment): an answer on free table is taken as it is.
#[test]
fn a_wrong_place_point_executes_and_the_judge_fails_it() {
    let ep = episode("tabletop/carrot_left_of_plate", 3);
    // The same episode with the oracle succeeds...
    let good = block_on(run_episode(&ep, &EpisodeOptions::default(), &mut |_| {})).unwrap();
    assert!(good.success, "{}", good.detail);
    // ...and with the place point on empty table right of the plate (image right is base +y for
    // this camera) it runs to the end but fails.
    let plate_y = ep
        .scene
        .objects
        .iter()
        .find(|o| o.name == "plate")
        .expect("a plate")
        .world_from_object
        .translation
        .y;
    let px = empty_table_pixel(&ep, 0.15, |p| {
        p.x > 0.25 && p.coords.xy().norm() < 0.65 && p.y > plate_y + 0.1
    });
    let bad = run_with(&ep, Branch::Affordance, Ability::Rrg, point_answer(px));
    assert!(bad.executed && bad.error.is_none(), "{}", bad.detail);
    assert!(
        !bad.success,
        "judge accepted a carrot placed on the empty table: {}",
        bad.detail
    );
}

#[test]
fn affordance_branch_meets_the_bar_at_16px_with_realsense_depth_and_calibration_error() {
    let (r, f) = rate_with(
        &[Suite::Tabletop, Suite::Bridge],
        &realistic(Branch::Affordance, 16.0),
    );
    assert!(r >= 0.95, "branch P {:.1}% < 95%: {f:#?}", 100.0 * r);
}

#[test]
fn trace_branch_meets_the_bar_at_16px_with_realsense_depth_and_calibration_error() {
    let (r, f) = rate_with(
        &[Suite::Tabletop, Suite::Bridge],
        &realistic(Branch::Trace, 16.0),
    );
    assert!(r >= 0.90, "branch V {:.1}% < 90%: {f:#?}", 100.0 * r);
}

/// Far from every object: beyond what a depth check moves a point by (48 px).
#[test]
fn a_grasp_point_on_empty_table_stops_before_moving() {
    let ep = episode("tabletop/pepper_in_pan", 3);
    let px = empty_table_pixel(&ep, 0.32, |_| true);
    let r = run_with(&ep, Branch::Affordance, Ability::Reg, point_answer(px));
    assert!(
        !r.success && !r.moved && r.steps_executed == 0,
        "{}",
        r.detail
    );
    assert!(
        matches!(r.error, Some(RunError::Task(TaskError::Plan(_)))),
        "{:?}",
        r.error
    );
}

#[test]
fn an_unreachable_place_is_refused_before_any_motion() {
    let ep = episode("tabletop/carrot_left_of_plate", 3);
    let px = empty_table_pixel(&ep, 0.15, |p| p.coords.xy().norm() > 0.80);
    let r = run_with(&ep, Branch::Affordance, Ability::Rrg, point_answer(px));
    assert!(
        !r.success && !r.moved && r.steps_executed == 0,
        "{}",
        r.detail
    );
    assert!(
        matches!(
            r.error,
            Some(RunError::Task(TaskError::Plan(_))) | Some(RunError::Safety { .. })
        ),
        "{:?}",
        r.error
    );
}

#[test]
fn a_trace_with_fewer_than_eight_points_is_refused() {
    let ep = episode("tabletop/pepper_in_pan", 3);
    let raw = "<think>short</think><answer><point>[[300, 250], [310, 240], [320, 230], [330, 240], [340, 250]]</point></answer>";
    let r = run_with(&ep, Branch::Trace, Ability::Vtg, raw.to_string());
    assert!(!r.moved && r.steps_executed == 0, "{}", r.detail);
    match r.error {
        Some(RunError::Task(TaskError::Pointer {
            source:
                PointerError::Answer(PointingError::WrongPointCount {
                    expected: 8,
                    got: 5,
                    ..
                }),
            ..
        })) => {}
        other => panic!("expected a point-count error, got {other:?}"),
    }
}

#[test]
fn an_instruction_naming_no_object_in_the_scene_is_refused() {
    let mut ep = episode("tabletop/pepper_in_pan", 3);
    ep.instruction = "put the banana in the pan".into();
    let r = block_on(run_episode(&ep, &EpisodeOptions::default(), &mut |_| {})).unwrap();
    assert!(!r.moved && r.steps_executed == 0, "{}", r.detail);
    assert!(
        matches!(
            r.error,
            Some(RunError::Task(TaskError::Pointer {
                source: PointerError::NoSuchObject { .. },
                ..
            }))
        ),
        "{:?}",
        r.error
    );
}

/// The simulated camera with every depth pixel of one instance blanked (NaN or 0), as a RealSense
/// does on a black or shiny object. The labels come from the simulated world, not the frame.
struct Blanked<C> {
    inner: C,
    world: SharedWorld,
    instance: u16,
}

impl<C: Camera> Camera for Blanked<C> {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        let mut f = self.inner.capture()?;
        let seg = self.world.labels_of(&f).expect("simulator labels");
        for (i, d) in f.depth.data.iter_mut().enumerate() {
            if seg.instance[i] == self.instance {
                *d = if i % 2 == 0 { f32::NAN } else { 0.0 };
            }
        }
        Ok(f)
    }
}

#[test]
fn no_valid_depth_at_the_object_is_a_clear_error() {
    let ep = episode("tabletop/pepper_in_pan", 3);
    let model = ep.robot_model().unwrap();
    let instance = ep.world(model).unwrap().instance_of(&ep.object).unwrap();
    let r = block_on(run_episode_with(
        &ep,
        &EpisodeOptions::default(),
        |c| Blanked {
            world: c.world().clone(),
            inner: c,
            instance,
        },
        |truth| OraclePointer::new(truth, OracleOptions::default()),
        &mut |_| {},
    ))
    .unwrap();
    assert!(!r.moved && r.steps_executed == 0, "{}", r.detail);
    match &r.error {
        Some(RunError::Task(TaskError::Plan(e))) => {
            let msg = e.to_string();
            assert!(
                msg.contains("depth") || msg.contains("nothing stands"),
                "{msg}"
            );
        }
        Some(RunError::Task(TaskError::Perceive(PerceiveError::Lift(LiftError::Depth {
            ..
        })))) => {}
        other => panic!("expected a depth error, got {other:?}"),
    }
}

/// A camera pose far off (the calibration file of another setup, a camera moved after
/// calibration): the points lift outside anything the arm may reach, and the run says so, naming
/// the calibration, before any motion.
#[test]
fn a_calibration_far_off_is_a_perception_error_before_any_motion() {
    let ep = episode("tabletop/pepper_in_pan", 3);
    // 80 cm along the camera's x axis (image right: the base's y axis for this camera), more than
    // the objects' distance to the workspace's side.
    let off = k::nalgebra::Isometry3::translation(0.8, 0.0, 0.0);
    let r = block_on(run_episode_with(
        &ep,
        &EpisodeOptions::default(),
        |c| c.with_pose_error(off),
        |truth| OraclePointer::new(truth, OracleOptions::default()),
        &mut |_| {},
    ))
    .unwrap();
    assert!(!r.moved && r.steps_executed == 0, "{}", r.detail);
    match &r.error {
        Some(RunError::Task(TaskError::Perceive(PerceiveError::OutsideWorkspace {
            what,
            y,
            ..
        }))) => {
            assert_eq!(*what, "object");
            assert!(y.abs() > 0.5, "{y}");
        }
        Some(RunError::Task(TaskError::Perceive(PerceiveError::Table(_)))) => {}
        other => panic!("expected a perception error, got {other:?}"),
    }
    assert!(r.detail.contains("calibration"), "{}", r.detail);
}

#[test]
fn dry_run_checks_everything_and_moves_nothing() {
    let ep = episode("bridge/carrot_on_plate", 3);
    let opts = EpisodeOptions {
        dry_run: true,
        ..EpisodeOptions::default()
    };
    let r = block_on(run_episode(&ep, &opts, &mut |_| {})).unwrap();
    assert!(r.error.is_none(), "{}", r.detail);
    assert!(!r.executed && !r.moved && r.steps_executed == 0);
    assert!(!r.success, "a dry run never counts as success");
}

#[test]
fn transit_moves_are_checked_against_the_objects_seen_on_the_table() {
    use pointact::executor::Event;
    let ep = episode("tabletop/can_in_basket", 3);
    let mut obstacles = None;
    let r = block_on(run_episode(&ep, &EpisodeOptions::default(), &mut |e| {
        if let Event::Obstacles { count } = e {
            obstacles = Some(count);
        }
    }))
    .unwrap();
    assert!(r.success, "{}", r.detail);
    // The basket's walls and the other objects are seen; the arm itself and the can are not.
    let n = obstacles.expect("the executor reports its obstacles");
    assert!(n > 0, "no obstacles seen");
}

/// The clutter suite (walls and stacks between pick and place, tall objects beside the target,
/// both arms) on held-out seeds: the affordance branch plans its free-space moves around what the
/// camera sees (RRT-Connect in the depth world, the held object attached) and meets the issue's
/// bar; the judge fails any episode whose arm or load touched an obstacle.
#[test]
fn planned_free_space_moves_clear_the_clutter_suite() {
    let seeds = [1001, 1002, 1003, 1004];
    let report = block_on(run_suite(
        Suite::Clutter,
        &seeds,
        &EpisodeOptions::default(),
        &mut |_, _, _| {},
    ));
    let n = report.episodes.len();
    let failures: Vec<String> = report
        .episodes
        .iter()
        .filter(|e| !e.success)
        .map(|e| format!("{} seed {}: {}", e.task, e.seed, e.detail))
        .collect();
    assert_eq!(n, 6 * seeds.len(), "six clutter tasks");
    assert!(
        (n - failures.len()) as f64 >= 0.95 * n as f64,
        "clutter P {}/{n}: {failures:#?}",
        n - failures.len()
    );
}

/// The trace branch follows the trace it is given; one that runs through the wall is refused
/// before anything moves, naming the waypoint and what it hits.
#[test]
fn a_trace_through_the_wall_is_refused_before_any_motion_naming_the_waypoint() {
    let ep = episode("clutter/xarm_block_over_wall", 0);
    let opts = EpisodeOptions {
        branch: Branch::Trace,
        ..EpisodeOptions::default()
    };
    let r = block_on(run_episode(&ep, &opts, &mut |_| {})).unwrap();
    assert!(
        !r.success && !r.moved && r.steps_executed == 0,
        "{}",
        r.detail
    );
    assert!(
        r.detail.contains("follow the trace, waypoint") && r.detail.contains("collides"),
        "{}",
        r.detail
    );
}
