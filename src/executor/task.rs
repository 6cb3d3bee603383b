//! One frame and one instruction to a plan: find the table, ask the pointer the abilities the
//! branch needs, build the world from the depth cloud (without the object about to be grasped),
//! and plan the motions in it: free-space moves collision-aware, approaches straight. Reads the
//! frame and the joints only; moves nothing (the runner does, after the gate re-checks the moves
//! in the same world).

use super::correct::{place_free, place_inside, snap_to_object, Correction, DepthView, PlaceSpot};
use super::event::Event;
use super::perceive::{planning_world, table_height, ObjectBlob, PerceiveError};
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
    let table = table_height(
        frame,
        CropBox {
            min: [ws.min[0], ws.min[1], ws.min[2] - 0.1],
            max: [ws.max[0], ws.max[1], ws.min[2] + 0.1],
        },
    )?;
    let table_z = table.z;
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
            place: Option<PlaceSpot>,
        },
        Trace {
            points: Vec<[f64; 2]>,
            intent: Option<super::Intent>,
        },
    }
    // The frame lifted once, for the depth checks of the answers (object-aware points).
    let robot_now = robot_spheres(model, q0, 1.0);
    let view = DepthView::new(frame, table, &robot_now);
    let corrected = |c: Option<Correction>, on_event: &mut dyn FnMut(Event<'_>)| {
        if let Some(c) = c {
            on_event(Event::Corrected(&c));
        }
    };
    let open_width = model.config.gripper.open_width;
    let (answers, grasp_blob) = match branch {
        Branch::Affordance => {
            let intent = parse_instruction(instruction)?;
            let (grasp_pts, is_part) = match &intent.part {
                Some(_) => (ask(Ability::Ofg, &intent.instruction, on_event)?, true),
                None => (ask(Ability::Reg, &intent.object_query(), on_event)?, false),
            };
            // A part (a handle) is held across the part, whatever the whole object's width.
            let max_width = (!is_part).then_some(open_width);
            let (grasp_px, blob, c) = snap_to_object(&view, &grasp_pts, "grasp point", max_width)?;
            corrected(c, on_event);
            let place = if intent.relation == Relation::PickUp {
                None
            } else {
                let pts = ask(Ability::Rrg, &intent.instruction, on_event)?;
                let place_px =
                    medoid(&pts).ok_or_else(|| PlanError::Answer("no place point".into()))?;
                let (spot, c) = place_spot(
                    &view,
                    &intent,
                    place_px,
                    &blob,
                    &mut |q: &str, on_event: &mut dyn FnMut(Event<'_>)| {
                        ask(Ability::Reg, q, on_event)
                    },
                    on_event,
                )?;
                corrected(c, on_event);
                Some(spot)
            };
            (
                Answers::Affordance {
                    intent,
                    grasp_px,
                    is_part,
                    place,
                },
                Some(blob),
            )
        }
        Branch::Trace => {
            let mut points = ask(Ability::Vtg, instruction, on_event)?;
            // The trace starts at the object it moves: its first point snapped like a grasp.
            let blob = match points.first().copied() {
                Some(first) => {
                    let (px, blob, c) = snap_to_object(&view, &[first], "trace start", None)?;
                    points[0] = px;
                    corrected(c, on_event);
                    Some(blob)
                }
                None => None,
            };
            // The grammar only refines a trace (pick up, named part); any instruction may be traced.
            (
                Answers::Trace {
                    points,
                    intent: parse_instruction(instruction).ok(),
                },
                blob,
            )
        }
    };
    // The world the free-space moves avoid: everything the camera sees standing on the table
    // except the robot and the object about to be grasped (the fingers enter it on purpose).
    let target = grasp_blob.map(|b| b.points).unwrap_or_default();
    let world = planning_world(
        frame,
        table_z,
        CropBox {
            min: [ws.min[0] - 0.1, ws.min[1] - 0.1, table_z - 0.01],
            max: [ws.max[0] + 0.1, ws.max[1] + 0.1, ws.max[2]],
        },
        // Fingers open: the widest the robot gets.
        &robot_now,
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
        min_object_height: table.min_object_height,
    };
    let plan = match answers {
        Answers::Affordance {
            intent,
            grasp_px,
            is_part,
            place,
        } => planner.affordance(frame, grasp_px, is_part, place, intent.relation, q0)?,
        Answers::Trace { points, intent } => planner.trace(frame, &points, intent.as_ref(), q0)?,
    };
    on_event(Event::Planned(&plan));
    let world = planner.motion.world().clone();
    Ok(TaskPlan { plan, world })
}

/// Where the held object goes: inside the target's segment for "in / on X" (asking REG for X),
/// else on free table beside things. A target REG cannot find on the table (a flat towel) keeps
/// the answered point.
fn place_spot(
    view: &DepthView<'_>,
    intent: &super::Intent,
    place_px: [f64; 2],
    held: &ObjectBlob,
    ask_reg: &mut dyn FnMut(&str, &mut dyn FnMut(Event<'_>)) -> Result<Vec<[f64; 2]>, TaskError>,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<(PlaceSpot, Option<Correction>), TaskError> {
    match (intent.relation, &intent.target) {
        (Relation::In | Relation::On, Some(target)) => {
            let pts = ask_reg(&format!("the {target}"), on_event)?;
            match snap_to_object(view, &pts, "place target", None) {
                Ok((_, blob, _)) => {
                    // The held object's half width, and a little more, inside the rim.
                    let margin = 0.5 * held.narrow_width + 0.005;
                    Ok(place_inside(view, &blob, place_px, margin, target)?)
                }
                Err(PerceiveError::NoObject { .. }) => Ok((
                    PlaceSpot {
                        px: place_px,
                        xy: None,
                    },
                    None,
                )),
                Err(e) => Err(e.into()),
            }
        }
        _ => {
            let clearance = 0.5 * held.major_extent.max(held.narrow_width) + 0.01;
            Ok(place_free(view, place_px, clearance, &held.pixels)?)
        }
    }
}
