//! Did it work? After the release (or the lift, for a pick-up) the runner looks again, and the
//! outcome says "verified by camera" only when the new depth agrees with what the plan meant to
//! do. The simulator's judge stays the only source of success in `eval`; this check is what a
//! physical arm has instead, and `eval` measures how often it is right. Its aim is to never say
//! "verified" of a failure: every doubt is "not verified", at the price of false alarms.
//!
//! It compares the frame the plan was made from with the new one, pixel by pixel (the camera does
//! not move with the arm, so a pixel sees the same ray in both): a pixel *rose* when its height
//! above the table grew by more than a threshold (a fraction of the object's height, never under
//! twice the depth noise). Then:
//!
//! 1. **Were the answers the plan used the right ones?** The pointer is asked REG again on the
//!    planning frame, for the object (its answer must snap to the segment that was grasped) and,
//!    when the target was segmented then, for the target (its answer must snap to the segment the
//!    object was put in or on). A confused answer chose the grasp or the place otherwise.
//! 2. **Which object moved.** REG for the object on the new frame: its answer snaps to an object
//!    segment, and the pixels of that segment that rose are the object where it arrived. None
//!    rose: the object meant is where it was, or nothing moved. Depth alone cannot tell two
//!    objects apart; a second, independent answer can. (Each extra answer may itself be confused,
//!    which makes false alarms, never false claims by itself.)
//! 3. **Is it still?** The runner looks twice, the arm held still in between
//!    (`runner::task::LOOK_INTERVAL_S`); object pixels whose height changed between the two looks
//!    mean it still moves (swinging in the hand, rolling, settling), and where it ends is unknown.
//! 4. **Where it arrived**, against the goal:
//!    * in / on X: X is found again by a fresh REG answer, its top-view footprint (the object's
//!      changed pixels left out) overlapping the one planned with; the object's centre (of its
//!      upper half, as seen) lies over X's footprint *now* (X may have been pushed); for "on" its
//!      top rose by X's height (within −30 / +20 %), for "in" its middle is at most 1 cm above
//!      X's rim;
//!    * in / on X when X could not be segmented while planning (a towel, or an answer off X then):
//!      if a fresh answer finds X standing out of the table now, the in / on rules above, with X
//!      as seen now; otherwise within 5 cm of the fresh answer for X;
//!    * left / right of X: as the judge defines it, from what the camera sees, with 2.5 cm to spare
//!      on each limit (the camera sees near sides only): along the camera's image-right on the
//!      table, the object's near edge lies beyond X's far edge by 2.5–22.5 cm, across it the
//!      centres differ by at most X's half width + 5.5 cm, and the object's top is no higher than
//!      its own height allows (it rests on the table, not on X);
//!    * near X: the centre within 15 cm of X's segment; a trace's end with no instruction read:
//!      within 5 cm of the planned spot;
//!    * pick-up: the fingers still hold something, and the object is seen above where it lay
//!      (or, hidden by the hand, its old spot changed and a fresh answer does not find it there).
//!
//! What it cannot see: contact (an object resting on a rim at a plausible height and place looks
//! like one inside), and motion slower than the two looks can show.
//! Measured against the judge in the README ("The camera check against the judge").
//!
//! Any doubt (no answer, no segment, a frame of another size) is "not verified", with the reason.

use k::nalgebra::{Point2, Point3, Vector3};

use super::correct::{
    convex_hull, inside_convex, shared_pixels, shares_most, snap_to_object, DepthView,
};
use super::event::Event;
pub use super::event::Verdict;
use super::perceive::medoid;
use super::perceive::{ObjectBlob, Table};
use pointact_core::camera::Frame;
use pointact_core::kinematics::RobotModel;
use pointact_core::planning::robot_spheres;
use pointact_pointing::{Ability, Pointer};

/// Fewest risen pixels that make an object seen where it arrived.
const MIN_ARRIVED: usize = 30;
/// Largest gap beside the reference that still counts (m, as the judge's rule).
const BESIDE_MAX_GAP: f64 = 0.25;
/// How far outside the planned target's footprint the target found again may reach (m): a
/// segment of the same container seen from one more angle, the object now in it.
const SAME_TARGET_MARGIN: f64 = 0.02;
/// How far outside a footprint an object's centre may be and still be over it (m): what the
/// camera sees of a flat target under an object is less than the target.
const INSIDE_MARGIN: f64 = 0.01;
/// How far above a container's rim the middle of an object in it may be (m, the judge's rule).
const RIM_ALLOWANCE: f64 = 0.01;
/// Cells of the top view that joins a target's segments (m).
const FOOTPRINT_CELL: f64 = 0.005;
/// Lateral slack beyond the reference's half width (m, as the judge's rule).
const BESIDE_SLACK: f64 = 0.08;
/// How far inside each of the judge's beside limits the camera's measure must be (m): the camera
/// sees an object's near sides only, through a calibration a few millimetres off, so its gaps
/// and offsets are 1–2 cm off the true ones (measured: a gap seen as 1.6 cm was 0.7 cm short).
const BESIDE_CERTAINTY: f64 = 0.025;
/// Object pixels that may change height between two looks of a still scene (depth noise and
/// edge artefacts), at least, and the fraction of its pixels (1 / this) otherwise.
const STILL_PIXELS: usize = 20;
const STILL_FRACTION: usize = 50;
/// The quantile of a target's heights taken as its top (its rim).
const TARGET_TOP_QUANTILE: f64 = 0.98;

/// What the camera should see after the task, written down when the plan was made.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// The table as the planning frame saw it (height and object threshold).
    pub table: Table,
    /// The REG phrase of the moved object ("the apple"); `None` when the trace branch read no
    /// object from its instruction (then every risen pixel counts as the object).
    pub object_query: Option<String>,
    /// The object's pixels in the planning frame.
    pub object_pixels: Vec<usize>,
    /// Its top above the table (m).
    pub object_height: f64,
    /// The target's pixels in the planning frame, when its answer snapped to a segment (empty
    /// otherwise): a fresh answer on that frame must find them again, or the plan put the object
    /// on whatever a confused answer chose.
    pub target_pixels: Vec<usize>,
    /// Where the object should end up.
    pub goal: Goal,
}

/// Where the object should end up.
#[derive(Debug, Clone)]
pub enum Goal {
    /// Picked up and held.
    Held,
    /// In or on a target seen when planning (its segment's footprint hull, and its top).
    Inside {
        /// The target phrase from the instruction ("pan"), asked for again with REG.
        target: String,
        /// True for "on" (rest on its top), false for "in" (inside it).
        on_top: bool,
        /// Convex hull of the target's footprint when planning, base-frame x, y, m.
        hull: Vec<Point2<f64>>,
        /// Height of its rim or top when planning (a high quantile of its points), base frame, m.
        top_z: f64,
    },
    /// On the camera's image right (`right`) or left of the target, resting on the table.
    Beside {
        /// The target phrase from the instruction, asked for again with REG.
        target: String,
        /// True for the image's right side, false for its left.
        right: bool,
    },
    /// Within `radius` of the target when one is named (of its segment when it stands out of
    /// the table, else of the point answered for it: a towel), else of `xy`.
    Near {
        /// The target phrase, if the instruction named one.
        target: Option<String>,
        /// Measure to the target's segment (true) or to the point answered for it (false).
        stands: bool,
        /// The planned spot, base-frame x, y, m; used when no target is named.
        xy: Point2<f64>,
        /// Largest allowed distance, m.
        radius: f64,
        /// `Some(on_top)` when the instruction said in / on the target and it could not be
        /// segmented when planning: if it stands out of the table now, the in / on rules apply.
        support: Option<bool>,
    },
}

impl Goal {
    /// The target the goal names, if any.
    fn target(&self) -> Option<&str> {
        match self {
            Goal::Held => None,
            Goal::Inside { target, .. } | Goal::Beside { target, .. } => Some(target),
            Goal::Near { target, .. } => target.as_deref(),
        }
    }
}

/// The arm's state around the check: joints when the plan was made and now, and whether the
/// fingers hold something now.
pub struct ArmThen<'a> {
    /// The robot, to mask its own pixels out of the depth comparison.
    pub model: &'a RobotModel,
    /// Joint positions when the plan was made, rad.
    pub q_before: &'a [f64],
    /// Joint positions now, rad.
    pub q_after: &'a [f64],
    /// Whether the fingers hold something now.
    pub holds: bool,
}

/// The frames the check compares.
pub struct Looks<'a> {
    /// The frame the plan was made from.
    pub before: &'a Frame,
    /// A frame taken a moment before `after`, the arm at rest in between (`None`: looked once,
    /// and whether the object still moves is not checked).
    pub earlier: Option<&'a Frame>,
    /// The frame checked.
    pub after: &'a Frame,
}

/// Checks `expect` on `looks.after` against `looks.before` (the planning frame); asks `pointer`
/// REG again, for the object and the target on both frames (its answers go to `on_event`).
pub fn verify<P: Pointer + ?Sized>(
    looks: &Looks<'_>,
    arm: &ArmThen<'_>,
    expect: &Expectation,
    pointer: &mut P,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Verdict {
    let checked = check(looks, arm, expect, pointer, on_event);
    Verdict {
        verified: checked.is_ok(),
        detail: checked.unwrap_or_else(|why| why),
    }
}

fn check<P: Pointer + ?Sized>(
    looks: &Looks<'_>,
    arm: &ArmThen<'_>,
    expect: &Expectation,
    pointer: &mut P,
    on_event: &mut dyn FnMut(Event<'_>),
) -> Result<String, String> {
    let (before, after) = (looks.before, looks.after);
    let size = |f: &Frame| (f.depth.width, f.depth.height);
    if size(before) != size(after) || looks.earlier.is_some_and(|e| size(e) != size(after)) {
        return Err("the new frames have another size than the planning frame".into());
    }
    let vb = DepthView::new(
        before,
        expect.table,
        &robot_spheres(arm.model, arm.q_before, 1.0),
    );
    let va = DepthView::new(
        after,
        expect.table,
        &robot_spheres(arm.model, arm.q_after, 1.0),
    );
    let thr = (0.4 * expect.object_height)
        .min(0.03)
        .max(2.0 * expect.table.min_object_height);
    // How much a pixel's height changed (only where both frames see the scene, not the robot).
    let delta = |i: usize| Some(va.seen(i)?.1 - vb.seen(i)?.1);
    let mut ask_on = |frame: &Frame, query: &str| -> Result<Vec<[f64; 2]>, String> {
        let pointing = pointer
            .point(frame, Ability::Reg, query)
            .map_err(|e| format!("the pointer could not find {query} again: {e}"))?;
        on_event(Event::Asked {
            ability: Ability::Reg,
            query,
            pointing: &pointing,
        });
        Ok(pointing.points_px())
    };
    // 0. Was the object grasped the one meant? A fresh answer on the planning frame must find
    // the segment that was grasped (the grasp may have come from a confused answer).
    if let Some(q) = expect.object_query.as_deref() {
        let meant = segment_of(&vb, &ask_on(before, q)?, q)?;
        if !shares_most(&meant.pixels, &expect.object_pixels) {
            let shared = shared_pixels(&meant.pixels, &expect.object_pixels);
            return Err(format!(
                "a fresh answer finds {q} elsewhere than the object that was grasped ({shared} pixels shared)"
            ));
        }
    }
    // 0'. Was the target the one meant? The same question about the place, when its answer
    // snapped to a segment then: a confused answer would have chosen where the object went.
    if let (Some(t), false) = (expect.goal.target(), expect.target_pixels.is_empty()) {
        let q = format!("the {t}");
        let meant = segment_of(&vb, &ask_on(before, &q)?, &q)?;
        if !shares_most(&meant.pixels, &expect.target_pixels) {
            let shared = shared_pixels(&meant.pixels, &expect.target_pixels);
            return Err(format!(
                "a fresh answer finds {q} elsewhere than where the object was put ({shared} pixels shared)"
            ));
        }
    }
    let mut ask = |query: &str| ask_on(after, query);
    // 1. Which object moved: REG again; its segment's risen pixels are the object.
    let found: Option<Result<ObjectBlob, String>> = expect
        .object_query
        .as_deref()
        .map(|q| segment_of(&va, &ask(q)?, q));
    let arrived: Vec<usize> = match &found {
        Some(Ok(blob)) => blob
            .pixels
            .iter()
            .copied()
            .filter(|&i| delta(i).is_some_and(|d| d > thr))
            .collect(),
        Some(Err(_)) => Vec::new(),
        None => (0..va.pixel_count())
            .filter(|&i| delta(i).is_some_and(|d| d > thr))
            .collect(),
    };
    let name = expect.object_query.as_deref().unwrap_or("the object");
    // The object's pixels now: those of its segment that changed height since the plan (not only
    // the risen ones), what a target's footprint must leave out. Unchanged pixels of the segment
    // stay: an object resting in a basket or on a block is one depth segment with it.
    let object_px: Vec<usize> = match &found {
        Some(Ok(blob)) => blob
            .pixels
            .iter()
            .copied()
            .filter(|&i| delta(i).is_some_and(|d| d.abs() > thr))
            .chain(arrived.iter().copied())
            .collect(),
        _ => arrived.clone(),
    };
    // Still? The arm stood still between the two looks: object pixels that changed height then
    // mean it still moves (swinging in the hand, rolling, settling) and may end elsewhere.
    if let Some(earlier) = looks.earlier {
        let ve = DepthView::new(
            earlier,
            expect.table,
            &robot_spheres(arm.model, arm.q_after, 1.0),
        );
        let (seen, moved) = object_px
            .iter()
            .filter_map(|&i| Some(va.seen(i)?.1 - ve.seen(i)?.1))
            .fold((0usize, 0usize), |(n, m), d| {
                (n + 1, m + usize::from(d.abs() > thr))
            });
        tracing::debug!(seen, moved, "verify: {name} between the two looks");
        if moved > STILL_PIXELS.max(seen / STILL_FRACTION) {
            return Err(format!(
                "{name} still moves: {moved} of its {seen} pixels changed between the two looks"
            ));
        }
    }
    if let Goal::Held = expect.goal {
        if !arm.holds {
            return Err("the fingers hold nothing at the end".into());
        }
        if arrived.len() >= MIN_ARRIVED {
            return Ok(format!("{name} is in the hand, above where it lay"));
        }
        // In the hand, the object may hide behind the fingers; then its spot must have changed,
        // and a fresh answer must not find it lying where it was.
        if let Some(Ok(_)) = &found {
            return Err(format!(
                "{name} is found where it lay: another object was lifted"
            ));
        }
        let (seen, changed) = expect
            .object_pixels
            .iter()
            .filter_map(|&i| delta(i))
            .fold((0usize, 0usize), |(n, c), d| {
                (n + 1, c + usize::from(d.abs() > thr))
            });
        return if seen > 0 && 2 * changed >= seen {
            Ok(format!(
                "{name}'s spot changed ({changed} of {seen} pixels) and the fingers hold something"
            ))
        } else {
            Err(format!(
                "{name}'s spot did not change ({changed} of {seen} pixels)"
            ))
        };
    }
    if let Some(Err(why)) = found {
        return Err(why);
    }
    if arrived.len() < MIN_ARRIVED {
        return Err(format!(
            "{name} is found on a segment that did not move (it is where it was, or another object was moved)"
        ));
    }
    let pts: Vec<Point3<f64>> = arrived
        .iter()
        .filter_map(|&i| va.seen(i).map(|s| s.0))
        .collect();
    let mut zs: Vec<f64> = pts.iter().map(|p| p.z).collect();
    zs.sort_by(f64::total_cmp);
    let (low_z, top_z) = (percentile(&zs, 0.05), percentile(&zs, 0.95));
    // The centre from the upper half of what is seen: the camera also sees the object's near
    // side, which would pull a centroid of every point towards it.
    let upper: Vec<&Point3<f64>> = pts
        .iter()
        .filter(|p| p.z >= (low_z + top_z) / 2.0)
        .collect();
    let n = upper.len().max(1) as f64;
    let centre = Point2::new(
        upper.iter().map(|p| p.x).sum::<f64>() / n,
        upper.iter().map(|p| p.y).sum::<f64>() / n,
    );
    match &expect.goal {
        Goal::Held => unreachable!("handled above"),
        Goal::Inside {
            target,
            on_top,
            hull,
            top_z: target_top,
        } => {
            // The target found again by a fresh answer, as a footprint without the object: the
            // one planned with (a confused answer now could name another) if it overlaps the
            // planned footprint.
            let query = format!("the {target}");
            let again = segment_of(&va, &ask(&query)?, &query)?;
            let found = footprint(&va, &again, &object_px);
            let over = found
                .iter()
                .filter(|p| within(hull, p.xy(), SAME_TARGET_MARGIN))
                .count();
            if over < MIN_ARRIVED {
                return Err(format!(
                    "the {target} found now is not the one the object was put {} ({over} of {} points over the planned footprint)",
                    if *on_top { "on" } else { "in" },
                    found.len()
                ));
            }
            let support = Support {
                target,
                on_top: *on_top,
                footprint: &found,
                top_z: *target_top,
            };
            rests_on(name, &support, centre, top_z, expect.object_height)
        }
        Goal::Beside { target, right } => {
            let query = format!("the {target}");
            let t = segment_of(&va, &ask(&query)?, &query)?;
            let tpts: Vec<Point2<f64>> = footprint(&va, &t, &object_px)
                .iter()
                .map(|p| p.xy())
                .collect();
            if tpts.len() < MIN_ARRIVED {
                return Err(format!("{name} and the {target} are one segment now"));
            }
            // The camera's x axis on the table (the judge's "image right").
            let x = after.base_from_camera.rotation * Vector3::x();
            let mut dir = Vector3::new(x.x, x.y, 0.0);
            if dir.norm() < 1e-6 {
                return Err("the camera looks straight down its x axis".into());
            }
            dir = dir.normalize() * if *right { 1.0 } else { -1.0 };
            let across = Vector3::z().cross(&dir);
            let range = |ps: &[Point2<f64>], d: &Vector3<f64>| {
                let mut v: Vec<f64> = ps.iter().map(|p| p.x * d.x + p.y * d.y).collect();
                v.sort_by(f64::total_cmp);
                (percentile(&v, 0.02), percentile(&v, 0.98))
            };
            let flat: Vec<Point2<f64>> = pts.iter().map(|p| p.xy()).collect();
            let (o_lo, _) = range(&flat, &dir);
            let (_, t_hi) = range(&tpts, &dir);
            let (o0, o1) = range(&flat, &across);
            let (t0, t1) = range(&tpts, &across);
            let gap = o_lo - t_hi;
            let lateral = ((o0 + o1) / 2.0 - (t0 + t1) / 2.0).abs();
            let side = if *right { "right" } else { "left" };
            if !(BESIDE_CERTAINTY..=BESIDE_MAX_GAP - BESIDE_CERTAINTY).contains(&gap) {
                return Err(format!(
                    "{name} is {:.1} cm beyond the {target}'s {side} edge ({:.1}–{:.1} cm wanted, to be sure)",
                    100.0 * gap,
                    100.0 * BESIDE_CERTAINTY,
                    100.0 * (BESIDE_MAX_GAP - BESIDE_CERTAINTY)
                ));
            }
            if lateral > (t1 - t0) / 2.0 + BESIDE_SLACK - BESIDE_CERTAINTY {
                return Err(format!(
                    "{name} is {:.1} cm off the {target}'s line, too far to be {side} of it",
                    100.0 * lateral
                ));
            }
            // On the table, not on something: its top no higher than its own height allows.
            let allowed = expect.object_height + (0.3 * expect.object_height).max(0.015);
            if top_z - expect.table.z > allowed {
                return Err(format!(
                    "{name}'s top is {:.1} cm above the table, it is {:.1} cm tall: it does not rest on the table",
                    100.0 * (top_z - expect.table.z),
                    100.0 * expect.object_height
                ));
            }
            Ok(format!(
                "{name} arrived {:.1} cm to the {side} of the {target}",
                100.0 * gap
            ))
        }
        Goal::Near {
            target,
            stands,
            xy,
            radius,
            support,
        } => {
            let (to, what) = match target {
                Some(target) => {
                    let query = format!("the {target}");
                    let answer = ask(&query)?;
                    // In / on a target that could not be segmented when planning (a towel, or an
                    // answer off its object then): if the fresh answer finds it standing out of
                    // the table now, the object must rest on or in it, not merely near it.
                    if let Some(on_top) = *support {
                        let found = segment_of(&va, &answer, &query)
                            .map(|seg| footprint(&va, &seg, &object_px))
                            .unwrap_or_default();
                        if found.len() >= MIN_ARRIVED {
                            let mut zs: Vec<f64> = found.iter().map(|p| p.z).collect();
                            zs.sort_by(f64::total_cmp);
                            let support = Support {
                                target,
                                on_top,
                                footprint: &found,
                                top_z: percentile(&zs, TARGET_TOP_QUANTILE),
                            };
                            return rests_on(name, &support, centre, top_z, expect.object_height);
                        }
                    }
                    let d = if *stands {
                        segment_of(&va, &answer, &query)?
                            .points
                            .iter()
                            .map(|p| (p.xy() - centre).norm())
                            .fold(f64::INFINITY, f64::min)
                    } else {
                        let at = medoid(&answer)
                            .ok_or_else(|| format!("no point for the {target}"))
                            .and_then(|m| va.locate(m).map_err(|e| e.to_string()))?;
                        (at.xy() - centre).norm()
                    };
                    (d, format!("the {target}"))
                }
                None => ((xy - centre).norm(), "the planned spot".to_string()),
            };
            if to <= *radius {
                Ok(format!("{name} arrived {:.1} cm from {what}", 100.0 * to))
            } else {
                Err(format!(
                    "{name} is {:.1} cm from {what} (at most {:.1} wanted)",
                    100.0 * to,
                    100.0 * radius
                ))
            }
        }
    }
}

/// The top view of what stands on the table around a segment: every object point (not the
/// robot, not `without`'s pixels) connected to `seed`'s points through neighbouring occupied
/// cells of [`FOOTPRINT_CELL`]. A container's walls, which depth splits into
/// separate image segments, join into one ring here.
fn footprint(view: &DepthView<'_>, seed: &ObjectBlob, without: &[usize]) -> Vec<Point3<f64>> {
    use std::collections::{HashMap, VecDeque};
    let mut excluded = vec![false; view.pixel_count()];
    without.iter().for_each(|&i| excluded[i] = true);
    let cell = |p: Point2<f64>| {
        (
            (p.x / FOOTPRINT_CELL).floor() as i64,
            (p.y / FOOTPRINT_CELL).floor() as i64,
        )
    };
    let mut cells: HashMap<(i64, i64), Vec<Point3<f64>>> = HashMap::new();
    for (i, _) in excluded.iter().enumerate().filter(|(_, x)| !**x) {
        if let Some((p, h)) = view.seen(i) {
            if h > view.min_height {
                cells.entry(cell(p.xy())).or_default().push(p);
            }
        }
    }
    let mut queue: VecDeque<(i64, i64)> = seed
        .pixels
        .iter()
        .zip(&seed.points)
        .filter(|(i, _)| !excluded[**i])
        .map(|(_, p)| cell(p.xy()))
        .filter(|c| cells.contains_key(c))
        .collect();
    let mut seen: std::collections::HashSet<(i64, i64)> = queue.iter().copied().collect();
    let mut out = Vec::new();
    while let Some(c) = queue.pop_front() {
        out.extend(cells[&c].iter().copied());
        for dx in -1..=1 {
            for dy in -1..=1 {
                let n = (c.0 + dx, c.1 + dy);
                if cells.contains_key(&n) && seen.insert(n) {
                    queue.push_back(n);
                }
            }
        }
    }
    out
}

/// A target the object should rest on or in, as seen after the task.
struct Support<'a> {
    target: &'a str,
    on_top: bool,
    /// Its top-view footprint now, the object left out.
    footprint: &'a [Point3<f64>],
    /// Its top (a container's rim) above the table frame's origin (m).
    top_z: f64,
}

/// The in / on rules: the object's centre over the target's footprint *now* (a target pushed
/// aside by the placement is judged where it is), and heights: on X, the object's top rose by X's
/// height (it stands on X's top, not on the table beside a flat X, not tilted on its edge); in X,
/// its middle is at most [`RIM_ALLOWANCE`] above X's rim (not resting on it).
fn rests_on(
    name: &str,
    support: &Support<'_>,
    centre: Point2<f64>,
    top_z: f64,
    h: f64,
) -> Result<String, String> {
    let Support {
        target,
        on_top,
        footprint,
        top_z: target_top,
    } = *support;
    let word = if on_top { "on" } else { "in" };
    let now = convex_hull(footprint.iter().map(|p| p.xy()).collect());
    tracing::debug!(
        top_z,
        target_top,
        h,
        cx = centre.x,
        cy = centre.y,
        "verify: {name} {word} the {target}"
    );
    if !within(&now, centre, INSIDE_MARGIN) {
        return Err(format!(
            "{name}'s centre ({:.3}, {:.3}) is not over the {target}'s footprint",
            centre.x, centre.y
        ));
    }
    if on_top {
        // X's top as measured is its highest point (a plate's rim), a little above where the
        // object stands.
        let off = top_z - (target_top + h);
        if off < -(0.3 * h).max(0.025) || off > (0.2 * h).max(0.015) {
            return Err(format!(
                "{name}'s top is {:.1} cm {} where it would be standing on the {target}",
                100.0 * off.abs(),
                if off > 0.0 { "above" } else { "below" }
            ));
        }
    } else if top_z - 0.5 * h > target_top + RIM_ALLOWANCE {
        // The judge's rule: the centre no higher than the rim plus an allowance.
        return Err(format!(
            "{name}'s middle is {:.1} cm above the {target}'s rim: it is not down in it",
            100.0 * (top_z - 0.5 * h - target_top)
        ));
    }
    Ok(format!(
        "{name} arrived {word} the {target} (centre over its footprint)"
    ))
}

/// Whether `p` lies inside the convex polygon `hull` or within `margin` of its edge.
fn within(hull: &[Point2<f64>], p: Point2<f64>, margin: f64) -> bool {
    if inside_convex(hull, p) {
        return true;
    }
    let n = hull.len();
    (0..n).any(|i| {
        let (a, b) = (hull[i], hull[(i + 1) % n]);
        let ab = b - a;
        let t = ((p - a).dot(&ab) / ab.norm_squared().max(1e-12)).clamp(0.0, 1.0);
        (a + ab * t - p).norm() <= margin
    })
}

/// The object segment a fresh answer for `query` points at (see `snap_to_object`).
fn segment_of(
    view: &DepthView<'_>,
    answer: &[[f64; 2]],
    query: &str,
) -> Result<ObjectBlob, String> {
    snap_to_object(view, answer, "check", None)
        .map(|(_, blob, _)| blob)
        .map_err(|e| format!("{query} is not found again: {e}"))
}

/// The `q`-quantile of sorted values (nearest rank).
fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// What to check after a task, from the planning frame's answers: the held object's segment, the
/// intent, and the place (its spot and the target's segment when one was found).
pub(super) fn expectation(
    view: &DepthView<'_>,
    intent: Option<&super::Intent>,
    held: &ObjectBlob,
    place: Option<(&super::correct::PlaceSpot, Option<&ObjectBlob>)>,
) -> Expectation {
    use super::Relation;
    let table = Table {
        z: view.table_z,
        min_object_height: view.min_height,
    };
    let spot_xy = place.and_then(|(spot, _)| {
        spot.xy
            .or_else(|| view.locate(spot.px).ok().map(|p| p.xy()))
    });
    let goal = match (intent, place) {
        (Some(i), _) if i.relation == Relation::PickUp => Goal::Held,
        (None, None) => Goal::Held,
        (Some(i), Some((_, Some(t)))) if matches!(i.relation, Relation::In | Relation::On) => {
            Goal::Inside {
                target: i.target.clone().unwrap_or_default(),
                on_top: i.relation == Relation::On,
                hull: super::correct::convex_hull(t.points.iter().map(|p| p.xy()).collect()),
                // Its rim (the blob's own `top_z` is the top near the answered point: a bowl's
                // floor when that was answered).
                top_z: {
                    let mut zs: Vec<f64> = t.points.iter().map(|p| p.z).collect();
                    zs.sort_by(f64::total_cmp);
                    percentile(&zs, TARGET_TOP_QUANTILE)
                },
            }
        }
        (Some(i), _) if matches!(i.relation, Relation::LeftOf | Relation::RightOf) => {
            Goal::Beside {
                target: i.target.clone().unwrap_or_default(),
                right: i.relation == Relation::RightOf,
            }
        }
        // A target too flat to stand out of the table (a towel), or only "near": close to a
        // fresh answer for it.
        (Some(i), _) => {
            let near = i.relation == Relation::Near;
            Goal::Near {
                target: i.target.clone(),
                stands: near,
                xy: spot_xy.unwrap_or(held.centroid.xy()),
                radius: if near { 0.15 } else { 0.05 },
                support: matches!(i.relation, Relation::In | Relation::On)
                    .then_some(i.relation == Relation::On),
            }
        }
        (None, Some(_)) => Goal::Near {
            target: None,
            stands: false,
            xy: spot_xy.unwrap_or(held.centroid.xy()),
            radius: 0.05,
            support: None,
        },
    };
    let target_pixels = match (&goal, place) {
        (Goal::Inside { .. }, Some((_, Some(t)))) => t.pixels.clone(),
        _ => Vec::new(),
    };
    Expectation {
        table,
        object_query: intent.map(|i| i.object_query()),
        object_pixels: held.pixels.clone(),
        object_height: (held.top_z - view.table_z).max(0.0),
        target_pixels,
        goal,
    }
}
