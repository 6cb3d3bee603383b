//! `run_task` shows the whole checked plan before the first motion: a plan that is not approved
//! moves nothing and ends in `RunError::Declined`; the gate's speed scale makes the executed motion
//! slower (the same plan, run at half speed, takes longer simulated time).

use pointact::executor::{Branch, Event};
use pointact::robot::Robot;
use pointact::runner::{run_task, RunError};
use pointact::safety::SafetyConfig;
use pointact::sim::devices::SimCamera;
use pointact::sim::oracle::{OracleOptions, OraclePointer};

/// Runs pepper-in-pan seed 3 with `scale` and `answer`; returns the result, the plan length the
/// approver saw, the steps executed (and whether the arm ended away from home), and the simulated
/// time spent.
fn run(scale: f64, answer: bool) -> (Result<(), RunError>, usize, (usize, bool), f64) {
    let super::common::SimTask {
        episode: ep,
        world,
        truth,
        mut robot,
        safety,
    } = super::common::sim_task("tabletop/pepper_in_pan", 3);
    let home = robot.model().home().to_vec();
    let mut camera = SimCamera::new(world.clone(), Default::default());
    let mut pointer = OraclePointer::new(truth, OracleOptions::default());
    let safety = SafetyConfig {
        speed_scale: scale,
        ..safety
    };
    let t0 = world.lock().time();
    let (mut seen, mut steps) = (0, 0);
    let result = super::common::block_on(run_task(
        &mut robot,
        &mut camera,
        &mut pointer,
        &ep.instruction,
        Branch::Affordance,
        safety,
        &mut |plan| {
            seen = plan.steps.len();
            answer
        },
        &mut |e| {
            if let Event::Step { .. } = e {
                steps += 1;
            }
        },
    ));
    let q = super::common::block_on(robot.joint_positions()).unwrap();
    let moved = q.iter().zip(&home).any(|(a, b)| (a - b).abs() > 1e-6);
    let spent = world.lock().time() - t0;
    (result.map(|_| ()), seen, (steps, moved), spent)
}

#[test]
fn a_declined_plan_moves_nothing() {
    let (result, seen, (steps, moved), spent) = run(1.0, false);
    assert!(matches!(result, Err(RunError::Declined)), "{result:?}");
    assert!(seen >= 4, "the approver saw {seen} steps");
    assert_eq!(steps, 0, "a step ran");
    assert!(
        !moved && spent == 0.0,
        "the arm moved ({spent} s simulated)"
    );
}

#[test]
fn half_speed_runs_the_same_plan_slower() {
    let (fast, n_fast, (steps_fast, _), t_fast) = run(1.0, true);
    let (slow, n_slow, (steps_slow, _), t_slow) = run(0.5, true);
    fast.unwrap();
    slow.unwrap();
    assert_eq!(n_fast, n_slow);
    assert_eq!((steps_fast, steps_slow), (n_fast, n_slow));
    // Motion dominates a run; gripper closing takes the same time at any scale.
    assert!(
        t_slow > 1.5 * t_fast,
        "{t_fast} s at full speed, {t_slow} s at half"
    );
}
