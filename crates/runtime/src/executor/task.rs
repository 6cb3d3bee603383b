//! One frame and one instruction to a plan: find the table, ask the pointer the abilities the
//! branch needs, build the world from the depth cloud (without the object about to be grasped),
//! and plan the motions in it: free-space moves collision-aware, approaches straight. Reads the
//! frame and the joints only; moves nothing (the runner does, after the gate re-checks the moves
//! in the same world).

use super::correct::{
    place_free, place_inside, shared_pixels, snap_to_object, Correction, DepthView, PlaceSpot,
};
use super::event::Event;
use super::perceive::medoid;
use super::perceive::{planning_world, table_height, ObjectBlob, PerceiveError};
use super::plan::{Branch, GraspParams, Plan, PlanError, Step, TaskPlanner};
use super::verify::{expectation, Expectation};
use super::{parse_instruction, InstructionError, Relation};
use pointact_core::camera::Frame;
use pointact_core::geometry::CropBox;
use pointact_core::kinematics::RobotModel;
use pointact_core::planning::{robot_spheres, RrtPlanner, SpheresError, World};
use pointact_pointing::{Ability, Pointer, PointerError};

/// Why a frame and an instruction gave no plan.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// The affordance branch could not read the instruction.
    #[error(transparent)]
    Instruction(#[from] InstructionError),
    /// The pointer failed to answer, or its answer did not parse.
    #[error("pointer ({ability}): {source}")]
    Pointer {
        /// The ability that was asked for.
        ability: Ability,
        /// The pointer's error.
        #[source]
        source: PointerError,
    },
    /// The depth image did not give the table, object or place the plan needs.
    #[error("perception: {0}")]
    Perceive(#[from] PerceiveError),
    /// The task planner could not build the plan's motions.
    #[error("planning: {0}")]
    Plan(#[from] PlanError),
    /// The robot's collision spheres could not be built for the planning world.
    #[error("collision model: {0}")]
    CollisionModel(#[from] SpheresError),
}

/// A plan, the world its free-space moves were planned in (the gate re-checks them there), and
/// what the camera should see afterwards.
#[derive(Debug, Clone)]
pub struct TaskPlan {
    /// The steps to check and run.
    pub plan: Plan,
    /// Obstacles from the depth cloud (without the object to grasp) the moves were planned in.
    pub world: World,
    /// What the camera should see when the plan has run (checked by [`super::verify`]).
    pub expect: Expectation,
    /// The table top the plan was made over, from the depth (base frame, m): the gate's table.
    pub table_z: f64,
}

/// The highest table looked for (m above the base): a table top above the base's plate (an arm
/// mounted in a cut-out) is a few centimetres up; higher surfaces are objects, not the table.
const TABLE_SEARCH_TOP_M: f64 = 0.10;

/// How far below the workspace box's floor answers and the table are still looked at (m): depth
/// noise on a table at the floor, and points answered on its surface.
const BELOW_FLOOR_M: f64 = 0.1;

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
            min: [ws.min[0], ws.min[1], ws.min[2] - BELOW_FLOOR_M],
            max: [
                ws.max[0],
                ws.max[1],
                TABLE_SEARCH_TOP_M.max(ws.min[2] + BELOW_FLOOR_M),
            ],
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
            end_xy: Option<k::nalgebra::Point2<f64>>,
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
    let (answers, grasp_blob, expect) = match branch {
        Branch::Affordance => {
            let intent = parse_instruction(instruction)?;
            let (grasp_pts, is_part) = match &intent.part {
                Some(_) => (ask(Ability::Ofg, &intent.instruction, on_event)?, true),
                None => (ask(Ability::Reg, &intent.object_query(), on_event)?, false),
            };
            // A part (a handle) is held across the part, whatever the whole object's width.
            let max_width = (!is_part).then_some(open_width);
            // Errors of the answer's points are the plan's (as the grasp's own perception).
            let (grasp_px, blob, c) = snap_to_object(&view, &grasp_pts, "grasp point", max_width)
                .map_err(PlanError::from)?;
            in_workspace(model, &blob.centroid, "object")?;
            corrected(c, on_event);
            let place = if intent.relation == Relation::PickUp {
                None
            } else {
                let pts = ask(Ability::Rrg, &intent.instruction, on_event)?;
                let place_px =
                    medoid(&pts).ok_or_else(|| PlanError::Answer("no place point".into()))?;
                let mut ask_reg =
                    |q: &str, on_event: &mut dyn FnMut(Event<'_>)| ask(Ability::Reg, q, on_event);
                Some(place_spot(
                    &view,
                    &intent,
                    place_px,
                    &blob,
                    &mut ask_reg,
                    on_event,
                )?)
            };
            let expect = expectation(
                &view,
                Some(&intent),
                &blob,
                place.as_ref().map(|(s, t)| (s, t.as_ref())),
            );
            (
                Answers::Affordance {
                    intent,
                    grasp_px,
                    is_part,
                    place: place.map(|p| p.0),
                },
                blob,
                expect,
            )
        }
        Branch::Trace => {
            let mut points = ask(Ability::Vtg, instruction, on_event)?;
            let intent = parse_instruction(instruction).ok();
            let (Some(&first), Some(&last)) = (points.first(), points.last()) else {
                return Err(PlanError::Answer("an empty visual trace".into()).into());
            };
            // The trace starts at the object it moves: its first point snapped like a grasp.
            let (start, blob, c) =
                snap_to_object(&view, &[first], "trace start", None).map_err(PlanError::from)?;
            in_workspace(model, &blob.centroid, "object")?;
            corrected(c, on_event);
            // It ends where the object goes: inside the target, or on free table.
            let pick_up = intent
                .as_ref()
                .is_none_or(|i| i.relation == Relation::PickUp);
            let (end, target) = if pick_up || points.len() < 2 {
                (PlaceSpot { px: last, xy: None }, None)
            } else {
                let intent = intent.as_ref().expect("not a pick-up");
                let mut ask_reg =
                    |q: &str, on_event: &mut dyn FnMut(Event<'_>)| ask(Ability::Reg, q, on_event);
                place_spot(&view, intent, last, &blob, &mut ask_reg, on_event)?
            };
            let expect = expectation(
                &view,
                intent.as_ref(),
                &blob,
                // Without an intent the plan still releases at the trace's end.
                (!pick_up || intent.is_none()).then_some((&end, target.as_ref())),
            );
            reshape_trace(&mut points, start, end.px);
            (
                Answers::Trace {
                    points,
                    end_xy: end.xy,
                    intent,
                },
                blob,
                expect,
            )
        }
    };
    // The world the free-space moves avoid: everything the camera sees standing on the table
    // except the robot and the object about to be grasped (the fingers enter it on purpose).
    let target = grasp_blob.points;
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
        Answers::Trace {
            points,
            end_xy,
            intent,
        } => planner.trace(frame, &points, end_xy, intent.as_ref(), q0)?,
    };
    on_event(Event::Planned(&plan));
    let world = planner.motion.world().clone();
    Ok(TaskPlan {
        plan,
        world,
        expect,
        table_z,
    })
}

/// An object or place the arm cannot reach by construction: its horizontal position outside the
/// workspace box (the gate keeps the TCP inside it), or far below or above it. Usually a camera
/// pose that is far off, so the error says so, before any motion.
fn in_workspace(
    model: &RobotModel,
    p: &k::nalgebra::Point3<f64>,
    what: &'static str,
) -> Result<(), PerceiveError> {
    let ws = &model.config.workspace;
    let inside = p.x >= ws.min[0]
        && p.x <= ws.max[0]
        && p.y >= ws.min[1]
        && p.y <= ws.max[1]
        && p.z >= ws.min[2] - BELOW_FLOOR_M
        && p.z <= ws.max[2];
    if inside {
        Ok(())
    } else {
        Err(PerceiveError::OutsideWorkspace {
            what,
            x: p.x,
            y: p.y,
            z: p.z,
        })
    }
}

/// After a grasp that closed on nothing: open the fingers, rise straight up by the approach
/// height, and go home through free space in `world` (the one the failed plan was made in), so
/// the camera sees the scene again without the arm in front of it.
pub fn recovery_plan(model: &RobotModel, world: World, q: &[f64]) -> Result<Plan, TaskError> {
    use pointact_core::planning::MotionPlanner;
    let mut motion = RrtPlanner::new(model, world)?;
    let g = &model.config.gripper;
    let mut steps = vec![Step::Gripper {
        label: "open the gripper".into(),
        width: g.open_width,
        expect_object: false,
    }];
    motion.set_hand(1.0, None);
    let mut up = model.fk(q).map_err(|e| PlanError::Motion(e.into()))?;
    up.translation.z += GraspParams::default().approach;
    let t = motion
        .line_to("rise after the miss", q, &up)
        .map_err(PlanError::from)?;
    let q_up = t.end().to_vec();
    steps.push(Step::Move {
        label: "rise after the miss".into(),
        trajectory: t,
        gripper_opening: 1.0,
        transit: false,
        held: None,
    });
    let t = motion
        .joint_move(&q_up, model.home().to_vec())
        .map_err(PlanError::from)?;
    steps.push(Step::Move {
        label: "return home".into(),
        trajectory: t,
        gripper_opening: 1.0,
        transit: true,
        held: None,
    });
    Ok(Plan {
        steps,
        targets: Default::default(),
    })
}

/// Asks REG about a phrase (the events go to the given observer).
type AskReg<'a> =
    dyn FnMut(&str, &mut dyn FnMut(Event<'_>)) -> Result<Vec<[f64; 2]>, TaskError> + 'a;

/// Where the held object goes: inside the target's segment for "in / on X" (asking REG for X),
/// else on free table beside things; a move is reported as [`Event::Corrected`]. A target REG
/// cannot find on the table (a flat towel) keeps the answered point.
fn place_spot(
    view: &DepthView<'_>,
    intent: &super::Intent,
    place_px: [f64; 2],
    held: &ObjectBlob,
    ask_reg: &mut AskReg<'_>,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<(PlaceSpot, Option<ObjectBlob>), TaskError> {
    let (spot, c, target) = place_spot_checked(view, intent, place_px, held, ask_reg, on_event)?;
    if let Some(c) = c {
        on_event(Event::Corrected(&c));
    }
    Ok((spot, target))
}

fn place_spot_checked(
    view: &DepthView<'_>,
    intent: &super::Intent,
    place_px: [f64; 2],
    held: &ObjectBlob,
    ask_reg: &mut AskReg<'_>,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<(PlaceSpot, Option<Correction>, Option<ObjectBlob>), TaskError> {
    match (intent.relation, &intent.target) {
        (Relation::In | Relation::On, Some(target)) => {
            let pts = ask_reg(&format!("the {target}"), on_event)?;
            match snap_to_object(view, &pts, "place target", None) {
                // The answer for the target found the object to be moved (most of the segment
                // is the object; a segment that merely joins it, a basket it touches in the
                // image, is more than that): a confused answer, and no place to put it.
                Ok((_, blob, _))
                    if 2 * shared_pixels(&blob.pixels, &held.pixels) >= blob.pixels.len() =>
                {
                    Err(PlanError::from(PerceiveError::NoPlace {
                        why: format!(
                            "the answer for the {target} points at the object to be moved itself"
                        ),
                    })
                    .into())
                }
                Ok((_, blob, _)) => {
                    // The held object's half width, and a little more, inside the rim.
                    let margin = 0.5 * held.narrow_width + 0.005;
                    let (spot, c) = place_inside(view, &blob, place_px, margin, target)
                        .map_err(PlanError::from)?;
                    Ok((spot, c, Some(blob)))
                }
                Err(PerceiveError::NoObject { .. }) => Ok((
                    PlaceSpot {
                        px: place_px,
                        xy: None,
                    },
                    None,
                    None,
                )),
                Err(e) => Err(PlanError::from(e).into()),
            }
        }
        _ => {
            let clearance = 0.5 * held.major_extent.max(held.narrow_width) + 0.01;
            let (spot, c) =
                place_free(view, place_px, clearance, &held.pixels).map_err(PlanError::from)?;
            Ok((spot, c, None))
        }
    }
}

/// A trace whose ends were corrected: the ends set to `start` and `end`, the points between moved
/// along with them (each by the blend of the two moves by its place along the trace), then
/// smoothed by a [1 2 1] filter, so a noisy answer becomes a smooth path between the right ends.
fn reshape_trace(points: &mut [[f64; 2]], start: [f64; 2], end: [f64; 2]) {
    let n = points.len();
    if n < 2 {
        return;
    }
    let (d0, d1) = (
        [start[0] - points[0][0], start[1] - points[0][1]],
        [end[0] - points[n - 1][0], end[1] - points[n - 1][1]],
    );
    for (i, p) in points.iter_mut().enumerate() {
        let s = i as f64 / (n - 1) as f64;
        p[0] += (1.0 - s) * d0[0] + s * d1[0];
        p[1] += (1.0 - s) * d0[1] + s * d1[1];
    }
    let raw = points.to_vec();
    for i in 1..n - 1 {
        for k in 0..2 {
            points[i][k] = 0.25 * raw[i - 1][k] + 0.5 * raw[i][k] + 0.25 * raw[i + 1][k];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reshaped_trace_keeps_its_corrected_ends_and_loses_its_zigzag() {
        // A straight trace with a zigzag, its ends then moved by 10 px right and 20 px down.
        let mut pts: Vec<[f64; 2]> = (0..8)
            .map(|i| [10.0 * i as f64, if i % 2 == 1 { 6.0 } else { 0.0 }])
            .collect();
        pts[7][1] = 0.0;
        reshape_trace(&mut pts, [10.0, 0.0], [70.0, 20.0]);
        assert_eq!(pts[0], [10.0, 0.0]);
        assert_eq!(pts[7], [70.0, 20.0]);
        // The zigzag's amplitude halves (a [1 2 1] filter of ±3 around a line).
        let line = |i: usize| {
            let s = i as f64 / 7.0;
            (1.0 - s) * 0.0 + s * 20.0
        };
        for (i, p) in pts.iter().enumerate().take(7).skip(1) {
            let off = p[1] - line(i) - 3.0;
            assert!(off.abs() <= 1.5 + 1e-9, "point {i}: {p:?}");
        }
    }
}
