//! One task end to end on any camera, pointer and robot: look, ask the executor for a plan, check
//! the whole plan through the safety gate, then move, with a closed-loop check that the grasp held
//! (and one retry from a fresh look when it did not). On any other error after motion began the
//! robot is stopped before the error is returned.

use crate::executor::{
    plan_task, recovery_plan, verify, ArmThen, Branch, Event, Expectation, Looks, Plan, Step,
    TaskError, Verdict,
};
use pointact_core::camera::{Camera, CameraError, Frame};
use pointact_core::kinematics::RobotModel;
use pointact_core::planning::{Trajectory, World};
use pointact_core::safety::{
    CheckedGripper, CheckedTrajectory, SafetyConfig, SafetyError, SafetyGate, Transit,
};
use pointact_pointing::Pointer;
use pointact_robot::{JointState, Robot, RobotError};

/// Why a task run stopped short.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The camera failed to capture, or delivered an invalid frame.
    #[error("camera: {0}")]
    Camera(#[from] CameraError),
    /// The executor could not make a plan (instruction, pointer, perception, planning).
    #[error(transparent)]
    Task(#[from] TaskError),
    /// A step of the plan did not pass the safety gate; nothing of that plan moved.
    #[error("safety gate refused step {index} ({label}): {source}")]
    Safety {
        /// Index of the refused step in the plan.
        index: usize,
        /// The step's label.
        label: String,
        /// Why the gate refused it.
        #[source]
        source: SafetyError,
    },
    /// The table the camera measures is not where it was stated to be; nothing moved.
    #[error("{0}; nothing moved")]
    Table(#[source] SafetyError),
    /// The robot driver failed to read its state or to execute a command.
    #[error("robot: {0}")]
    Robot(#[from] RobotError),
    /// A gripper step meant to grasp the object closed on nothing, and no retry was left.
    #[error("grasp failed: the fingers closed to {width:.4} m, nothing is held")]
    GraspMissed {
        /// Gripper width after closing, m.
        width: f64,
    },
    /// The object left the fingers during a move that carried it (it slipped, or was dropped).
    #[error("the object was lost during `{step}`: the fingers closed to {width:.4} m")]
    GraspLost {
        /// Label of the move during which it was lost.
        step: String,
        /// Gripper width measured after the move, m.
        width: f64,
    },
    /// The checked plan was shown and not approved: nothing moved.
    #[error("the plan was not approved: nothing moved")]
    Declined,
}

/// A plan whose every step passed the gate.
enum CheckedStep {
    /// A motion, and whether the fingers should hold the object through it (checked after it).
    Move(CheckedTrajectory, bool),
    /// A gripper command, and whether the fingers should stop on the object (checked after it).
    Gripper(CheckedGripper, bool),
}

/// What a finished run did.
pub struct RunOutcome {
    /// The plan that ran last (the retry's, after a missed grasp).
    pub plan: Plan,
    /// Whether the plan was executed (false for a dry run).
    pub executed: bool,
    /// Plans tried (2: the first grasp closed on nothing and the task was planned again).
    pub attempts: usize,
    /// The camera's look after the plan ran (`None`: nothing ran, a dry run).
    pub verdict: Option<Verdict>,
}

/// How many times a task is planned and tried: once, and once more after a grasp that closed on
/// nothing (the arm goes home, the camera looks again, the pointer is asked again).
pub(crate) const ATTEMPTS: usize = 2;

/// Runs `instruction` with `branch`. `safety.dry_run` plans and checks without moving. `approve`
/// sees every checked plan before its first motion (a physical arm asks its user; the simulator
/// approves); `false` ends the run with [`RunError::Declined`].
///
/// Closed loop: when the fingers close on nothing, or the object leaves them during a move that
/// carries it, the arm opens, rises, goes home (a plan of its own, checked like any other), and the
/// task is planned again from a new frame, once.
#[allow(clippy::too_many_arguments)]
pub async fn run_task<R: Robot, C: Camera, P: Pointer + ?Sized>(
    robot: &mut R,
    camera: &mut C,
    pointer: &mut P,
    instruction: &str,
    branch: Branch,
    safety: SafetyConfig,
    approve: &mut (dyn FnMut(&Plan) -> bool + Send),
    on_event: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<RunOutcome, RunError> {
    on_event(Event::Instruction(instruction));
    let model = robot.model().clone();
    let mut attempt = 1;
    loop {
        let frame = camera.capture()?;
        frame.validate()?;
        on_event(Event::Captured(&frame));
        let q0 = robot.joint_positions().await?;
        let start = JointState {
            stamp_s: None,
            q: q0.clone(),
            gripper_width: robot.gripper_width().await?,
        };
        // Motions before this point (none in a first attempt) are not part of this plan.
        robot.take_states();
        on_event(Event::Robot {
            model: &model,
            state: &start,
        });
        let task = plan_task(&frame, pointer, instruction, branch, &model, &q0, on_event)?;
        // The gate's table is the one the plan was made over, and a stated one must agree.
        let safety = safety
            .with_measured_table(task.table_z)
            .map_err(RunError::Table)?;
        let plan = task.plan;
        let checked = check_plan(&plan, &model, &q0, &task.world, safety.clone())?;
        on_event(Event::Checked {
            steps: checked.len(),
        });
        if safety.dry_run {
            on_event(Event::DryRun);
            return Ok(RunOutcome {
                plan,
                executed: false,
                attempts: attempt,
                verdict: None,
            });
        }
        if !approve(&plan) {
            return Err(RunError::Declined);
        }
        match execute_plan(robot, &plan, &checked, &model, on_event).await {
            Ok(()) => {
                let verdict = look_again(
                    robot,
                    camera,
                    pointer,
                    (&frame, &q0),
                    &task.expect,
                    &safety,
                    on_event,
                )
                .await;
                on_event(Event::Verified(&verdict));
                return Ok(RunOutcome {
                    plan,
                    executed: true,
                    attempts: attempt,
                    verdict: Some(verdict),
                });
            }
            Err(e @ (RunError::GraspMissed { .. } | RunError::GraspLost { .. }))
                if attempt < ATTEMPTS =>
            {
                attempt += 1;
                let why = match e {
                    RunError::GraspLost { step, width } => format!(
                        "the object left the fingers during `{step}` (closed to {width:.4} m): going home to look again"
                    ),
                    other => format!("{other}: going home to look again"),
                };
                on_event(Event::Retry { why: &why, attempt });
                let q = robot.joint_positions().await?;
                let back = recovery_plan(&model, task.world.clone(), &q)?;
                let checked = check_plan(&back, &model, &q, &task.world, safety.clone())?;
                if !approve(&back) {
                    return Err(RunError::Declined);
                }
                execute_plan(robot, &back, &checked, &model, on_event).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// How long the arm stands still between the two looks after a plan (s): an object still
/// swinging in the hand, rolling or settling changes the depth in that time.
pub(crate) const LOOK_INTERVAL_S: f64 = 0.5;

/// After the plan: two new frames [`LOOK_INTERVAL_S`] apart (the arm held still in between, a
/// checked hold), and the executor's check of the second against the planning frame (`before`:
/// that frame and the joints then) and against the first (is anything still moving?). Never an
/// error: a camera, gate or pointer failure is a "not verified" with its reason, since the
/// motions are done either way.
#[allow(clippy::too_many_arguments)]
async fn look_again<R: Robot, C: Camera, P: Pointer + ?Sized>(
    robot: &mut R,
    camera: &mut C,
    pointer: &mut P,
    before: (&Frame, &[f64]),
    expect: &Expectation,
    safety: &SafetyConfig,
    on_event: &mut (dyn FnMut(Event<'_>) + Send),
) -> Verdict {
    let unverified = |detail: String| Verdict {
        verified: false,
        detail,
    };
    let mut look = || camera.capture().and_then(|f| f.validate().map(|()| f));
    let earlier = match look() {
        Ok(f) => f,
        Err(e) => return unverified(format!("no frame to check with: {e}")),
    };
    let (q, width) = match (robot.joint_positions().await, robot.gripper_width().await) {
        (Ok(q), Ok(w)) => (q, w),
        (Err(e), _) | (_, Err(e)) => return unverified(format!("no robot state: {e}")),
    };
    let model = robot.model().clone();
    if let Err(e) = hold_still(robot, &model, &q, width, safety).await {
        let _ = robot.stop().await;
        return unverified(format!("could not hold still between the two looks: {e}"));
    }
    let after = match look() {
        Ok(f) => f,
        Err(e) => return unverified(format!("no frame to check with: {e}")),
    };
    on_event(Event::Captured(&after));
    let arm = ArmThen {
        model: &model,
        q_before: before.1,
        q_after: &q,
        holds: holds_something(&model, width),
    };
    let looks = Looks {
        before: before.0,
        earlier: Some(&earlier),
        after: &after,
    };
    verify(&looks, &arm, expect, pointer, on_event)
}

/// The arm at rest at `q` for [`LOOK_INTERVAL_S`], through the gate like any motion.
async fn hold_still<R: Robot>(
    robot: &mut R,
    model: &RobotModel,
    q: &[f64],
    width: f64,
    safety: &SafetyConfig,
) -> Result<(), RunError> {
    let opening = model.config.gripper.opening_for_width(width);
    let hold = Trajectory::hold(q, LOOK_INTERVAL_S).ok_or_else(|| {
        RunError::Robot(RobotError::Config(format!(
            "the arm reports joints that cannot be held: {q:?}"
        )))
    })?;
    let checked = SafetyGate::new(model, safety.clone())
        .check(hold, q, opening, &[])
        .map_err(|source| RunError::Safety {
            index: 0,
            label: "hold still".into(),
            source,
        })?;
    robot.execute(&checked).await?;
    robot.take_states();
    Ok(())
}

/// Fingers this much wider than closed hold something (m).
const GRASP_MARGIN: f64 = 0.002;

/// Whether fingers at `width` hold something (they stopped short of closing).
fn holds_something(model: &RobotModel, width: f64) -> bool {
    width > model.config.gripper.closed_width + GRASP_MARGIN
}

/// Executes a checked plan step by step. Any error but a missed grasp (after which the arm is at
/// rest and may recover) stops the robot before it is returned.
async fn execute_plan<R: Robot>(
    robot: &mut R,
    plan: &Plan,
    checked: &[CheckedStep],
    model: &RobotModel,
    on_event: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<(), RunError> {
    for (index, (step, c)) in plan.steps.iter().zip(checked).enumerate() {
        on_event(Event::Step {
            index,
            label: step.label(),
        });
        let result = execute_step(robot, c, model, step.label()).await;
        let mut states = robot.take_states();
        if states.is_empty() {
            if let (Ok(q), Ok(gripper_width)) =
                (robot.joint_positions().await, robot.gripper_width().await)
            {
                states.push(JointState {
                    stamp_s: None,
                    q,
                    gripper_width,
                });
            }
        }
        on_event(Event::Moved {
            index,
            states: &states,
        });
        match result {
            Ok(Some(width)) => on_event(Event::GraspHeld { width }),
            Ok(None) => {}
            // The arm is at rest after the step; the runner may recover and try again.
            Err(e @ (RunError::GraspMissed { .. } | RunError::GraspLost { .. })) => return Err(e),
            Err(e) => {
                // Leave the robot at rest whatever went wrong; report the first error.
                let _ = robot.stop().await;
                return Err(e);
            }
        }
    }
    Ok(())
}

async fn execute_step<R: Robot>(
    robot: &mut R,
    step: &CheckedStep,
    model: &RobotModel,
    label: &str,
) -> Result<Option<f64>, RunError> {
    match step {
        CheckedStep::Move(t, holding) => {
            robot.execute(t).await?;
            if *holding {
                // Still holding? An object that slips out during the lift or the carry would
                // otherwise be "placed" from empty fingers.
                let width = robot.gripper_width().await?;
                if !holds_something(model, width) {
                    return Err(RunError::GraspLost {
                        step: label.to_string(),
                        width,
                    });
                }
            }
            Ok(None)
        }
        CheckedStep::Gripper(g, expect_object) => {
            robot.set_gripper(*g).await?;
            if *expect_object {
                let width = robot.gripper_width().await?;
                if !holds_something(model, width) {
                    return Err(RunError::GraspMissed { width });
                }
                return Ok(Some(width));
            }
            Ok(None)
        }
    }
}

/// Every step through the gate, in order, each motion from where the previous one ends.
fn check_plan(
    plan: &Plan,
    model: &RobotModel,
    q0: &[f64],
    world: &World,
    config: SafetyConfig,
) -> Result<Vec<CheckedStep>, RunError> {
    let gate = SafetyGate::new(model, config);
    let mut q = q0.to_vec();
    let mut out = Vec::with_capacity(plan.steps.len());
    for (index, step) in plan.steps.iter().enumerate() {
        let refuse = |source| RunError::Safety {
            index,
            label: step.label().to_string(),
            source,
        };
        match step {
            Step::Move {
                trajectory,
                gripper_opening,
                transit,
                held,
                ..
            } => {
                let c = if *transit {
                    let transit = Transit {
                        world,
                        held: held.as_ref(),
                    };
                    gate.check_transit(trajectory.clone(), &q, *gripper_opening, transit)
                } else {
                    gate.check(trajectory.clone(), &q, *gripper_opening, &world.boxes)
                }
                .map_err(refuse)?;
                q = trajectory.end().to_vec();
                out.push(CheckedStep::Move(c, held.is_some()));
            }
            Step::Gripper {
                width,
                expect_object,
                ..
            } => {
                out.push(CheckedStep::Gripper(
                    gate.check_gripper(*width).map_err(refuse)?,
                    *expect_object,
                ));
            }
        }
    }
    Ok(out)
}
