//! The whole physical path on this machine: a task run by the runner through the real xArm driver
//! (`XarmRobot`: protocol, servo loop, gripper tunnel) against the controller emulator whose arm is
//! the simulator's (`SimArm`), judged by the simulator. The same seeded episodes run directly on
//! `SimRobot` give the reference: the protocol path must not turn a success into a failure.

use pointact::executor::{Branch, Event};
use pointact::runner::{run_episode, run_episode_xarm, EpisodeOptions, EpisodeResult, RunError};
use pointact::sim::oracle::{OracleOptions, OraclePointer};
use pointact::sim::tasks::task;

fn options(branch: Branch) -> EpisodeOptions {
    EpisodeOptions {
        branch,
        ..Default::default()
    }
}

/// Runs `id` seed `seed` through the xArm emulator; `answer` approves the plan or not. Returns the
/// result, the last plan's step count, the steps that reported motion and why the run retried
/// (each retry's reason: a failure message then says what happened).
fn via_xarm(
    id: &str,
    seed: u64,
    branch: Branch,
    answer: bool,
) -> (EpisodeResult, usize, usize, Vec<String>) {
    let ep = task(id).unwrap().instantiate(seed).unwrap();
    let (mut seen, mut moved_steps) = (0, 0);
    let mut retries = Vec::new();
    let r = super::common::block_on(run_episode_xarm(
        &ep,
        &options(branch),
        |c| c,
        |truth| OraclePointer::new(truth, OracleOptions::default()),
        &mut |plan| {
            seen = plan.steps.len();
            answer
        },
        &mut |e| match e {
            Event::Moved { states, .. } => moved_steps += usize::from(!states.is_empty()),
            Event::Retry { why, attempt } => retries.push(format!("attempt {attempt}: {why}")),
            _ => {}
        },
    ))
    .unwrap();
    (r, seen, moved_steps, retries)
}

#[test]
fn pepper_in_pan_succeeds_through_the_xarm_driver_and_emulator_as_it_does_on_the_sim_robot() {
    for branch in [Branch::Affordance, Branch::Trace] {
        let ep = task("tabletop/pepper_in_pan")
            .unwrap()
            .instantiate(0)
            .unwrap();
        let direct =
            super::common::block_on(run_episode(&ep, &options(branch), &mut |_| {})).unwrap();
        assert!(direct.success, "reference run failed: {}", direct.detail);
        let (r, seen, moved, retries) = via_xarm("tabletop/pepper_in_pan", 0, branch, true);
        assert!(
            r.success,
            "{branch:?} through the xArm emulator: {} ({:?})",
            r.detail, r.error
        );
        assert!(r.executed);
        assert_eq!(
            r.steps_executed, seen,
            "every step of the approved plan ran, once (retries: {retries:?})"
        );
        assert_eq!(
            r.steps_executed, direct.steps_executed,
            "same plan as on SimRobot"
        );
        // Every step reported what the arm did (from the controller's reports).
        assert_eq!(moved, seen);
    }
}

#[test]
fn a_plan_declined_at_the_prompt_moves_nothing_through_the_emulator() {
    let (r, seen, _, _) = via_xarm("tabletop/pepper_in_pan", 1, Branch::Affordance, false);
    assert!(seen > 0, "the approver saw the plan");
    assert!(matches!(r.error, Some(RunError::Declined)), "{:?}", r.error);
    assert!(!r.success && !r.executed);
    assert_eq!(r.steps_executed, 0);
    assert!(!r.moved, "the arm left home after a declined plan");
}
