//! One task end to end on any camera, pointer and robot: look, point, lift, plan, check the whole
//! plan through the safety gate, then move — with a closed-loop check that the grasp held.
//! On any error after motion began the robot is stopped before the error is returned.

use super::plan::{medoid, Branch, Plan, PlanError, Planner, Step};
use super::{parse_instruction, InstructionError, Relation};
use crate::camera::{Camera, CameraError, Frame};
use crate::executor::motion::MotionPlanner;
use crate::executor::perceive::{obstacle_voxels, table_height, PerceiveError};
use crate::geometry::CropBox;
use crate::pointing::{Ability, Pointer, PointerError, Pointing};
use crate::robot::{JointState, Robot, RobotError};
use crate::safety::{
    CheckedGripper, CheckedTrajectory, Obstacle, SafetyConfig, SafetyError, SafetyGate,
};

/// Obstacle voxel edge (m).
const OBSTACLE_VOXEL: f64 = 0.03;
/// Radius around the grasp point where the cloud is the object being picked, not an obstacle (m).
const KEEP_OUT_GRASP: f64 = 0.08;
/// Radius around the place point where the cloud is the support or container (m).
const KEEP_OUT_PLACE: f64 = 0.13;

/// What happened, in order, for printing and logging.
#[derive(Debug)]
pub enum Event<'a> {
    Instruction(&'a str),
    /// The frame everything below was computed from.
    Captured(&'a Frame),
    /// The robot the task runs on and its state before anything moves (for visualisation).
    Robot {
        model: &'a std::sync::Arc<crate::kinematics::RobotModel>,
        state: &'a JointState,
    },
    Asked {
        ability: Ability,
        query: &'a str,
        pointing: &'a Pointing,
    },
    TableHeight(f64),
    /// Occupied voxels the gate checks the arm against.
    Obstacles {
        count: usize,
    },
    Planned(&'a Plan),
    Checked {
        steps: usize,
    },
    DryRun,
    Step {
        index: usize,
        label: &'a str,
    },
    GraspHeld {
        width: f64,
    },
    /// What the arm did while step `index` ran: the driver's recorded states, or one state read
    /// after the step when the driver records none. Sent whether the step succeeded or not.
    Moved {
        index: usize,
        states: &'a [JointState],
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("camera: {0}")]
    Camera(#[from] CameraError),
    #[error(transparent)]
    Instruction(#[from] InstructionError),
    #[error("pointer ({ability}): {source}")]
    Pointer {
        ability: Ability,
        #[source]
        source: PointerError,
    },
    #[error("perception: {0}")]
    Perceive(#[from] PerceiveError),
    #[error("planning: {0}")]
    Plan(#[from] PlanError),
    #[error("safety gate refused step {index} ({label}): {source}")]
    Safety {
        index: usize,
        label: String,
        #[source]
        source: SafetyError,
    },
    #[error("robot: {0}")]
    Robot(#[from] RobotError),
    #[error("grasp failed: the fingers closed to {width:.4} m, nothing is held")]
    GraspMissed { width: f64 },
}

/// A plan whose every step passed the gate.
enum CheckedStep {
    Move(CheckedTrajectory),
    Gripper(CheckedGripper, bool),
}

pub struct RunOutcome {
    pub plan: Plan,
    pub executed: bool,
}

/// Runs `instruction` with `branch`. `safety.dry_run` plans and checks without moving.
pub async fn run_task<R: Robot, C: Camera, P: Pointer>(
    robot: &mut R,
    camera: &mut C,
    pointer: &mut P,
    instruction: &str,
    branch: Branch,
    safety: SafetyConfig,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<RunOutcome, ExecError> {
    on_event(Event::Instruction(instruction));
    let model = robot.model().clone();
    let frame = camera.capture()?;
    frame.validate()?;
    on_event(Event::Captured(&frame));
    let q0 = robot.joint_positions().await?;
    let start = JointState {
        stamp_s: None,
        q: q0.clone(),
        gripper_width: robot.gripper_width().await?,
    };
    // Motions before this point (none in `run_task`) are not part of this run.
    robot.take_states();
    on_event(Event::Robot {
        model: &model,
        state: &start,
    });
    let ws = &model.config.workspace;
    let table_z = table_height(
        &frame,
        CropBox {
            min: [ws.min[0], ws.min[1], ws.min[2] - 0.1],
            max: [ws.max[0], ws.max[1], ws.min[2] + 0.1],
        },
    )?;
    on_event(Event::TableHeight(table_z));
    let mut planner = Planner {
        motion: MotionPlanner::new(&model),
        params: Default::default(),
        table_z,
    };
    let mut ask = |ability: Ability,
                   query: &str,
                   on_event: &mut dyn FnMut(Event<'_>)|
     -> Result<Vec<[f64; 2]>, ExecError> {
        let pointing = pointer
            .point(&frame, ability, query)
            .map_err(|source| ExecError::Pointer { ability, source })?;
        on_event(Event::Asked {
            ability,
            query,
            pointing: &pointing,
        });
        Ok(pointing.points_px())
    };
    let plan = match branch {
        Branch::Affordance => {
            let intent = parse_instruction(instruction)?;
            let (grasp_pts, is_part) = match &intent.part {
                Some(_) => (ask(Ability::Ofg, &intent.instruction, on_event)?, true),
                None => (ask(Ability::Reg, &intent.object_query(), on_event)?, false),
            };
            let grasp_px =
                medoid(&grasp_pts).ok_or_else(|| PlanError::Answer("no grasp point".into()))?;
            let place_px = if intent.relation == Relation::PickUp {
                None
            } else {
                let pts = ask(Ability::Rrg, &intent.instruction, on_event)?;
                Some(medoid(&pts).ok_or_else(|| PlanError::Answer("no place point".into()))?)
            };
            planner.affordance(&frame, grasp_px, is_part, place_px, intent.relation, &q0)?
        }
        Branch::Trace => {
            let pts = ask(Ability::Vtg, instruction, on_event)?;
            // The grammar only refines a trace (pick up, named part); any instruction may be traced.
            let intent = parse_instruction(instruction).ok();
            planner.trace(&frame, &pts, intent.as_ref(), &q0)?
        }
    };
    on_event(Event::Planned(&plan));
    // Everything standing on the table is an obstacle, except the object being picked and the
    // place it goes (the gripper enters both on purpose).
    let mut keep_out = Vec::new();
    if let Some(g) = plan.targets.grasp {
        keep_out.push((g.translation.x, g.translation.y, KEEP_OUT_GRASP));
    }
    if let Some(p) = plan.targets.place {
        keep_out.push((p.translation.x, p.translation.y, KEEP_OUT_PLACE));
    }
    let obstacles = obstacle_voxels(
        &frame,
        table_z,
        CropBox {
            min: [ws.min[0] - 0.1, ws.min[1] - 0.1, table_z],
            max: [ws.max[0] + 0.1, ws.max[1] + 0.1, ws.max[2]],
        },
        OBSTACLE_VOXEL,
        &keep_out,
        // Fingers open: the widest the robot gets.
        &crate::safety::robot_spheres(&model, &q0, 1.0),
    )?;
    on_event(Event::Obstacles {
        count: obstacles.len(),
    });
    let checked = check_plan(&plan, &model, &q0, &obstacles, safety.clone())?;
    on_event(Event::Checked {
        steps: checked.len(),
    });
    if safety.dry_run {
        on_event(Event::DryRun);
        return Ok(RunOutcome {
            plan,
            executed: false,
        });
    }
    for (index, (step, c)) in plan.steps.iter().zip(&checked).enumerate() {
        on_event(Event::Step {
            index,
            label: step.label(),
        });
        let result = execute_step(robot, c, &model).await;
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
            Err(e) => {
                // Leave the robot at rest whatever went wrong; report the first error.
                let _ = robot.stop().await;
                return Err(e);
            }
        }
    }
    Ok(RunOutcome {
        plan,
        executed: true,
    })
}

async fn execute_step<R: Robot>(
    robot: &mut R,
    step: &CheckedStep,
    model: &crate::kinematics::RobotModel,
) -> Result<Option<f64>, ExecError> {
    match step {
        CheckedStep::Move(t) => {
            robot.execute(t).await?;
            Ok(None)
        }
        CheckedStep::Gripper(g, expect_object) => {
            robot.set_gripper(*g).await?;
            if *expect_object {
                let width = robot.gripper_width().await?;
                if width <= model.config.gripper.closed_width + 0.002 {
                    return Err(ExecError::GraspMissed { width });
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
    model: &crate::kinematics::RobotModel,
    q0: &[f64],
    obstacles: &[Obstacle],
    config: SafetyConfig,
) -> Result<Vec<CheckedStep>, ExecError> {
    let gate = SafetyGate::new(model, config);
    let mut q = q0.to_vec();
    let mut out = Vec::with_capacity(plan.steps.len());
    for (index, step) in plan.steps.iter().enumerate() {
        let refuse = |source| ExecError::Safety {
            index,
            label: step.label().to_string(),
            source,
        };
        match step {
            Step::Move {
                trajectory,
                gripper_opening,
                transit,
                ..
            } => {
                let known = if *transit { obstacles } else { &[] };
                let c = gate
                    .check(trajectory.clone(), &q, *gripper_opening, known)
                    .map_err(refuse)?;
                q = trajectory.end().to_vec();
                out.push(CheckedStep::Move(c));
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
