//! One frame and one instruction to a plan: find the table, ask the pointer the abilities the
//! branch needs, build the world from the depth cloud (without the object about to be grasped),
//! and plan the motions in it: free-space moves collision-aware, approaches straight. Reads the
//! frame and the joints only; moves nothing (the runner does, after the gate re-checks the moves
//! in the same world).

use super::event::Event;
use super::perceive::{object_blob, planning_world, table_height, PerceiveError};
use super::plan::{medoid, Branch, GraspParams, Plan, PlanError, TaskPlanner};
use super::{parse_instruction, InstructionError, Relation};
use crate::camera::Frame;
use crate::geometry::CropBox;
use crate::kinematics::RobotModel;
use crate::planning::{robot_spheres, RrtPlanner, SpheresError, World};
use crate::pointing::{Ability, Pointer, PointerError};

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
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
    #[error("collision model: {0}")]
    CollisionModel(#[from] SpheresError),
}

/// A plan and the world its free-space moves were planned in (the gate re-checks them there).
#[derive(Debug, Clone)]
pub struct TaskPlan {
    pub plan: Plan,
    pub world: World,
}

/// Plans `instruction` with `branch` on `frame`, the arm at joints `q0`; `on_event` sees the table
/// height, every answer, the plan and the obstacle count.
pub fn plan_task<P: Pointer + ?Sized>(
    frame: &Frame,
    pointer: &mut P,
    instruction: &str,
    branch: Branch,
    model: &RobotModel,
    q0: &[f64],
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<TaskPlan, TaskError> {
    let ws = &model.config.workspace;
    let table_z = table_height(
        frame,
        CropBox {
            min: [ws.min[0], ws.min[1], ws.min[2] - 0.1],
            max: [ws.max[0], ws.max[1], ws.min[2] + 0.1],
        },
    )?;
    on_event(Event::TableHeight(table_z));
    let mut ask = |ability: Ability,
                   query: &str,
                   on_event: &mut dyn FnMut(Event<'_>)|
     -> Result<Vec<[f64; 2]>, TaskError> {
        let pointing = pointer
            .point(frame, ability, query)
            .map_err(|source| TaskError::Pointer { ability, source })?;
        on_event(Event::Asked {
            ability,
            query,
            pointing: &pointing,
        });
        Ok(pointing.points_px())
    };
    enum Answers {
        Affordance {
            intent: super::Intent,
            grasp_px: [f64; 2],
            is_part: bool,
            place_px: Option<[f64; 2]>,
        },
        Trace {
            points: Vec<[f64; 2]>,
            intent: Option<super::Intent>,
        },
    }
    let answers = match branch {
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
            Answers::Affordance {
                intent,
                grasp_px,
                is_part,
                place_px,
            }
        }
        Branch::Trace => {
            let points = ask(Ability::Vtg, instruction, on_event)?;
            // The grammar only refines a trace (pick up, named part); any instruction may be traced.
            Answers::Trace {
                points,
                intent: parse_instruction(instruction).ok(),
            }
        }
    };
    // The world the free-space moves avoid: everything the camera sees standing on the table
    // except the robot and the object about to be grasped (the fingers enter it on purpose).
    let grasp_px = match &answers {
        Answers::Affordance { grasp_px, .. } => Some(*grasp_px),
        Answers::Trace { points, .. } => points.first().copied(),
    };
    let target = match grasp_px {
        // The grasp's own perception (planning reports it as it would the grasp itself).
        Some(px) => {
            object_blob(frame, px, table_z, 0.004, 0.15)
                .map_err(PlanError::from)?
                .points
        }
        None => Vec::new(),
    };
    let world = planning_world(
        frame,
        table_z,
        CropBox {
            min: [ws.min[0] - 0.1, ws.min[1] - 0.1, table_z - 0.01],
            max: [ws.max[0] + 0.1, ws.max[1] + 0.1, ws.max[2]],
        },
        // Fingers open: the widest the robot gets.
        &robot_spheres(model, q0, 1.0),
        &target,
    )?;
    on_event(Event::Obstacles {
        count: world.field.as_ref().map_or(0, |f| f.occupied()),
    });
    let mut planner = TaskPlanner {
        model,
        motion: RrtPlanner::new(model, world)?,
        params: GraspParams {
            carry_height: model
                .config
                .carry_height
                .unwrap_or(GraspParams::default().carry_height),
            ..GraspParams::default()
        },
        table_z,
    };
    let plan = match answers {
        Answers::Affordance {
            intent,
            grasp_px,
            is_part,
            place_px,
        } => planner.affordance(frame, grasp_px, is_part, place_px, intent.relation, q0)?,
        Answers::Trace { points, intent } => planner.trace(frame, &points, intent.as_ref(), q0)?,
    };
    on_event(Event::Planned(&plan));
    let world = planner.motion.world().clone();
    Ok(TaskPlan { plan, world })
}
