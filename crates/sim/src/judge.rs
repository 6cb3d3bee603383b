//! Success of an episode, judged only from the physics world after it settles: never from what the
//! executor reports.
//!
//! `judge` first steps the world (robot holding its last command) until everything is at rest, at
//! most `SETTLE_MAX_S`; the goal object must then stay put for another 0.2 s (under 2 mm and
//! 0.02 rad). Then it checks the goal:
//!
//! * **Inside** — the object's centre (centre of its bounding box) lies in the container's open
//!   volume (floor to rim, plus 1 cm above the rim for objects that stick out), the object is at
//!   rest and no robot link touches it.
//! * **OnTop** — the object touches the support, does not touch the table (unless the support is a
//!   thin slab under 1 cm, such as a towel, which an overhanging object may reach past), no robot
//!   link touches it, and its centre lies over the support's footprint (5 mm margin). It must then
//!   stay put for `still_s` more seconds (moving less than 5 mm and 0.1 rad) and still touch the
//!   support.
//! * **Beside** — "right" / "left" mean the task camera's image right / left, measured on the
//!   table: the unit vector `d` is the camera's x axis with its vertical part removed (negated for
//!   left). Along `d`, the object's near edge must lie beyond the reference's far edge (gap ≥ 0)
//!   by at most 25 cm; across `d` (in the table plane), the centres may differ by at most half the
//!   reference's width plus 8 cm. The object must rest on the table (touch it), at rest, untouched
//!   by the robot. For the tabletop camera (facing the robot), image right is the robot's +y.
//! * **Lifted** — the episode ends holding the object: both fingers touch it, they touch no part but
//!   the named one (e.g. the knife's `handle`), and its centre is at least `min_lift_m` above where
//!   it started.
//!
//! **Obstacles** (the episode's `obstacles`, clutter tasks only): after the goal is judged, the
//! episode fails, whatever the goal's verdict, if the robot ever touched an obstacle (a link,
//! fingers included, or the object it held came within `TOUCH_DISTANCE_M` of it, at any step since
//! the world was built; the physics world records the first such touch per object), or if an
//! obstacle's centre ends more than [`OBSTACLE_MOVE_M`] from where the scene put it, or its up axis
//! more than [`OBSTACLE_TIP_RAD`] from upright (knocked by something else, e.g. the released
//! object). The detail names the obstacle and the link, and says what the goal alone gave.

use k::nalgebra::{Isometry3, Point3, Vector3};

use super::beside::{beside_margin, BesideGeometry, Side};
use super::physics::{ContactWith, SimWorld, Toucher, REST_MOVE_M, REST_TURN_RAD};
use super::scene::{Region, SceneObject};
use super::tasks::{Episode, Goal};
use pointact_core::geometry::Shape;

/// Longest the judge waits for the scene to come to rest, s.
pub(crate) const SETTLE_MAX_S: f64 = 3.0;
/// How long the goal object must then stay put (moving under 2 mm, turning under 0.02 rad), s.
const REST_CHECK_S: f64 = 0.2;
/// Height above a container's rim still counted as inside, m.
const RIM_ALLOWANCE_M: f64 = 0.01;
/// Supports thinner than this (towels) may be overhung onto the table.
const THIN_SUPPORT_M: f64 = 0.01;
/// An obstacle whose centre moved farther than this from its scene pose was hit, m.
pub(crate) const OBSTACLE_MOVE_M: f64 = 0.01;
/// An obstacle whose up axis turned farther than this from its scene pose was tipped, rad.
pub(crate) const OBSTACLE_TIP_RAD: f64 = 0.1;

/// The verdict, with a sentence saying why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// Whether the episode's goal held (and no obstacle was touched, moved or tipped).
    pub success: bool,
    /// One sentence saying why it passed or failed, for logs and reports.
    pub detail: String,
}

impl Judgement {
    fn pass(detail: String) -> Judgement {
        Judgement {
            success: true,
            detail,
        }
    }
    fn fail(detail: String) -> Judgement {
        Judgement {
            success: false,
            detail,
        }
    }
}

/// Settles `world` and judges the episode's goal, then its obstacles (see the module doc).
pub fn judge(world: &mut SimWorld, episode: &Episode) -> Judgement {
    let goal = judge_goal(world, &episode.goal);
    match obstacle_problem(world, &episode.obstacles) {
        None => goal,
        Some(why) => Judgement::fail(format!(
            "{why}; the goal alone {}: {}",
            if goal.success { "held" } else { "failed" },
            goal.detail
        )),
    }
}

/// Why the obstacles fail the episode (touched by the robot, moved or tipped), or `None`.
pub(crate) fn obstacle_problem(world: &SimWorld, obstacles: &[String]) -> Option<String> {
    for name in obstacles {
        let (Some(o), Some(pose), Some(start)) = (
            world.object(name),
            world.object_pose(name),
            world.initial_pose(name),
        ) else {
            return Some(format!("no obstacle `{name}` in the scene"));
        };
        if let Some(t) = world.first_robot_touch(name) {
            return Some(match &t.by {
                Toucher::Link(link) => {
                    format!("arm hit `{name}` (link `{link}`, t = {:.2} s)", t.time_s)
                }
                Toucher::Held(held) => {
                    format!("the carried `{held}` hit `{name}` (t = {:.2} s)", t.time_s)
                }
            });
        }
        let moved = (center_at(o, &pose) - center_at(o, &start)).norm();
        if moved > OBSTACLE_MOVE_M {
            return Some(format!(
                "`{name}` was moved {:.1} cm from where it stood",
                100.0 * moved
            ));
        }
        let tilt = (pose.rotation * Vector3::z()).angle(&(start.rotation * Vector3::z()));
        if tilt > OBSTACLE_TIP_RAD {
            return Some(format!("`{name}` was tipped {:.2} rad", tilt));
        }
    }
    None
}

/// Settles `world` and judges `goal` (see the module doc for each rule).
pub(crate) fn judge_goal(world: &mut SimWorld, goal: &Goal) -> Judgement {
    world.settle(SETTLE_MAX_S);
    let object = goal.object();
    let (Some(obj), Some(before)) = (world.object(object).cloned(), world.object_pose(object))
    else {
        return Judgement::fail(format!("no object `{object}` in the scene"));
    };
    // The goal object must stay put for a moment (others may still be rolling off somewhere).
    world.step_for(REST_CHECK_S);
    let Some(pose) = world.object_pose(object) else {
        return Judgement::fail(format!("no object `{object}` in the scene"));
    };
    let moved = (pose.translation.vector - before.translation.vector).norm();
    let turned = pose.rotation.angle_to(&before.rotation);
    if moved > 4.0 * REST_MOVE_M || turned > 4.0 * REST_TURN_RAD {
        return Judgement::fail(format!(
            "{object} is still moving {SETTLE_MAX_S} s after the end ({:.1} mm, {:.3} rad in {REST_CHECK_S} s)",
            1000.0 * moved,
            turned
        ));
    }
    match goal {
        Goal::Inside { container, .. } => inside(world, &obj, &pose, container),
        Goal::OnTop {
            support, still_s, ..
        } => on_top(world, &obj, &pose, support, *still_s),
        Goal::Beside {
            reference, side, ..
        } => beside(world, &obj, &pose, reference, *side),
        Goal::Lifted {
            part, min_lift_m, ..
        } => lifted(world, &obj, &pose, part.as_deref(), *min_lift_m),
    }
}

/// Centre of an object's local bounding box, placed at `pose`.
fn center_at(o: &SceneObject, pose: &Isometry3<f64>) -> Point3<f64> {
    let (lo, hi) = o.footprint();
    let c = (lo + hi) / 2.0;
    pose * Point3::new(c.x, c.y, o.height() / 2.0)
}

fn touched_by_robot(world: &SimWorld, name: &str) -> Option<String> {
    world
        .contacts_of(name)
        .into_iter()
        .find_map(|c| match c.with {
            ContactWith::Robot { link } => Some(link),
            _ => None,
        })
}

fn inside(
    world: &SimWorld,
    obj: &SceneObject,
    pose: &Isometry3<f64>,
    container: &str,
) -> Judgement {
    let name = &obj.name;
    let (Some(cont), Some(cpose)) = (world.object(container), world.object_pose(container)) else {
        return Judgement::fail(format!("no container `{container}` in the scene"));
    };
    let Some(inner) = cont.inner else {
        return Judgement::fail(format!("`{container}` is not a container"));
    };
    if let Some(link) = touched_by_robot(world, name) {
        return Judgement::fail(format!("{name} is still touched by the robot ({link})"));
    }
    // The open volume grown upward by the rim allowance.
    let grown = grow_up(&inner, RIM_ALLOWANCE_M).transformed(&cpose);
    let c = center_at(obj, pose);
    let local = grown.frame_from_region.inverse_transform_point(&c);
    if grown.shape.contains_local(&local) {
        Judgement::pass(format!(
            "{name} rests inside {container} (centre {:.1} cm above its floor)",
            100.0 * (local.z + half_height(&grown.shape))
        ))
    } else {
        Judgement::fail(format!(
            "{name}'s centre ({:.3}, {:.3}, {:.3}) is outside {container}'s open volume",
            c.x, c.y, c.z
        ))
    }
}

fn half_height(s: &Shape) -> f64 {
    s.local_half_extents().z
}

fn grow_up(r: &Region, dz: f64) -> Region {
    let shape = match r.shape {
        Shape::Cuboid { half_extents } => Shape::Cuboid {
            half_extents: half_extents + Vector3::new(0.0, 0.0, dz / 2.0),
        },
        Shape::Cylinder {
            radius,
            half_height,
        } => Shape::Cylinder {
            radius,
            half_height: half_height + dz / 2.0,
        },
        other => other,
    };
    Region {
        frame_from_region: r.frame_from_region * Isometry3::translation(0.0, 0.0, dz / 2.0),
        shape,
    }
}

/// Why `obj` (at `pose`) is not resting on `support`, or `None` if it is.
fn on_top_problem(
    world: &SimWorld,
    obj: &SceneObject,
    pose: &Isometry3<f64>,
    support: &str,
) -> Option<String> {
    let name = &obj.name;
    let (Some(sup), Some(spose)) = (world.object(support), world.object_pose(support)) else {
        return Some(format!("no support `{support}` in the scene"));
    };
    let contacts = world.contacts_of(name);
    if let Some(link) = touched_by_robot(world, name) {
        return Some(format!("{name} is still touched by the robot ({link})"));
    }
    let on_support = contacts
        .iter()
        .any(|c| matches!(&c.with, ContactWith::Object { name, .. } if name == support));
    if !on_support {
        return Some(format!("{name} does not touch {support}"));
    }
    let thin = sup.height() < THIN_SUPPORT_M;
    if !thin && contacts.iter().any(|c| c.with == ContactWith::Table) {
        return Some(format!("{name} touches the table, not only {support}"));
    }
    let c = spose.inverse_transform_point(&center_at(obj, pose));
    let (lo, hi) = sup.footprint();
    let m = 0.005;
    if c.x < lo.x - m || c.x > hi.x + m || c.y < lo.y - m || c.y > hi.y + m {
        return Some(format!("{name}'s centre is not over {support}"));
    }
    None
}

fn on_top(
    world: &mut SimWorld,
    obj: &SceneObject,
    pose: &Isometry3<f64>,
    support: &str,
    still_s: f64,
) -> Judgement {
    let name = &obj.name;
    if let Some(p) = on_top_problem(world, obj, pose, support) {
        return Judgement::fail(p);
    }
    if still_s > 0.0 {
        world.step_for(still_s);
        let Some(after) = world.object_pose(name) else {
            return Judgement::fail(format!("{name} vanished"));
        };
        let moved = (after.translation.vector - pose.translation.vector).norm();
        let turned = after.rotation.angle_to(&pose.rotation);
        if moved > 0.005 || turned > 0.1 {
            return Judgement::fail(format!(
                "{name} did not stay on {support}: moved {:.1} cm, turned {:.2} rad in {still_s} s",
                100.0 * moved,
                turned
            ));
        }
        if let Some(p) = on_top_problem(world, obj, &after, support) {
            return Judgement::fail(format!("after {still_s} s: {p}"));
        }
    }
    Judgement::pass(format!("{name} rests on {support}"))
}

fn beside(
    world: &SimWorld,
    obj: &SceneObject,
    pose: &Isometry3<f64>,
    reference: &str,
    side: Side,
) -> Judgement {
    let name = &obj.name;
    let (Some(refo), Some(rpose)) = (world.object(reference), world.object_pose(reference)) else {
        return Judgement::fail(format!("no reference `{reference}` in the scene"));
    };
    let word = match side {
        Side::Left => "left",
        Side::Right => "right",
    };
    if let Some(link) = touched_by_robot(world, name) {
        return Judgement::fail(format!("{name} is still touched by the robot ({link})"));
    }
    if !world
        .contacts_of(name)
        .iter()
        .any(|c| c.with == ContactWith::Table)
    {
        return Judgement::fail(format!("{name} does not rest on the table"));
    }
    let geo = BesideGeometry::new(&world.scene().camera, side);
    let margin = beside_margin(&geo, obj, pose, refo, &rpose);
    if margin >= 0.0 {
        Judgement::pass(format!(
            "{name} rests to the {word} of {reference} (margin {:.1} cm)",
            100.0 * margin
        ))
    } else {
        Judgement::fail(format!(
            "{name} is not to the {word} of {reference} (short by {:.1} cm)",
            -100.0 * margin
        ))
    }
}

fn lifted(
    world: &SimWorld,
    obj: &SceneObject,
    pose: &Isometry3<f64>,
    part: Option<&str>,
    min_lift_m: f64,
) -> Judgement {
    let name = &obj.name;
    let start = world.initial_pose(name).unwrap_or(obj.world_from_object);
    let lift = center_at(obj, pose).z - center_at(obj, &start).z;
    if world.held_object() != Some(name.as_str()) {
        return Judgement::fail(format!(
            "{name} is not held between the fingers at the end (lifted {:.1} cm)",
            100.0 * lift
        ));
    }
    if let Some(part) = part {
        let touched = world.parts_touched_by_fingers(name);
        if touched.iter().any(|p| p != part) {
            return Judgement::fail(format!(
                "{name} is held by {touched:?}, not only by its {part}"
            ));
        }
    }
    if lift < min_lift_m {
        return Judgement::fail(format!(
            "{name} is lifted {:.1} cm, less than {:.1} cm",
            100.0 * lift,
            100.0 * min_lift_m
        ));
    }
    Judgement::pass(format!(
        "{name} is held {}{:.1} cm above where it lay",
        part.map(|p| format!("by its {p}, ")).unwrap_or_default(),
        100.0 * lift
    ))
}
