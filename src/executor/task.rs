//! One frame and one instruction to a plan: find the table, ask the pointer the abilities the
//! branch needs, plan the motions, and collect the obstacles the gate will check the transit moves
//! against. Reads the frame and the joints only; moves nothing (the runner does, after the gate).

use super::event::Event;
use super::perceive::{obstacles, table_height, PerceiveError};
use super::plan::{medoid, Branch, GraspParams, Plan, PlanError, TaskPlanner};
use super::{parse_instruction, InstructionError, Relation};
use crate::camera::Frame;
use crate::geometry::CropBox;
use crate::kinematics::RobotModel;
use crate::planning::{robot_spheres, DirectPlanner, Obstacle};
use crate::pointing::{Ability, Pointer, PointerError};

/// Obstacle voxel edge (m).
const OBSTACLE_VOXEL: f64 = 0.03;
/// Radius around the grasp point where the cloud is the object being picked, not an obstacle (m).
const KEEP_OUT_GRASP: f64 = 0.08;
/// Radius around the place point where the cloud is the support or container (m).
const KEEP_OUT_PLACE: f64 = 0.13;

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
}

/// A plan and what its transit moves must avoid.
#[derive(Debug, Clone)]
pub struct TaskPlan {
    pub plan: Plan,
    pub obstacles: Vec<Obstacle>,
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
    let mut planner = TaskPlanner {
        model,
        motion: DirectPlanner::new(model),
        params: GraspParams {
            carry_height: model
                .config
                .carry_height
                .unwrap_or(GraspParams::default().carry_height),
            ..GraspParams::default()
        },
        table_z,
    };
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
            planner.affordance(frame, grasp_px, is_part, place_px, intent.relation, q0)?
        }
        Branch::Trace => {
            let pts = ask(Ability::Vtg, instruction, on_event)?;
            // The grammar only refines a trace (pick up, named part); any instruction may be traced.
            let intent = parse_instruction(instruction).ok();
            planner.trace(frame, &pts, intent.as_ref(), q0)?
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
    let obstacles = obstacles(
        frame,
        table_z,
        CropBox {
            min: [ws.min[0] - 0.1, ws.min[1] - 0.1, table_z],
            max: [ws.max[0] + 0.1, ws.max[1] + 0.1, ws.max[2]],
        },
        OBSTACLE_VOXEL,
        &keep_out,
        // Fingers open: the widest the robot gets.
        &robot_spheres(model, q0, 1.0),
    )?;
    on_event(Event::Obstacles {
        count: obstacles.len(),
    });
    Ok(TaskPlan { plan, obstacles })
}
