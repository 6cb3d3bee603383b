//! Both branches, from pointing answers to a `Plan`: a list of motions and gripper commands, each
//! starting where the previous one ends. Planning reads the frame and the robot's joints only; it
//! moves nothing.

use k::nalgebra::{Isometry3, Point3};

use super::correct::PlaceSpot;
use super::perceive::{object_blob, ray_to_height, ObjectBlob, PerceiveError};
use super::Relation;
use pointact_core::camera::lift::{lift, LiftError};
use pointact_core::camera::Frame;
use pointact_core::geometry::RobustDepthOptions;
use pointact_core::kinematics::RobotModel;
use pointact_core::planning::{
    fold_yaw, top_down, Attached, MotionError, MotionPlanner, Trajectory,
};

/// Which executor turns points into motion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch {
    /// Affordance branch (-P): grasp point + place point.
    Affordance,
    /// Visual-trace branch (-V): an 8-point object-centric trace.
    Trace,
}

impl std::str::FromStr for Branch {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "p" | "affordance" => Ok(Branch::Affordance),
            "v" | "trace" => Ok(Branch::Trace),
            other => Err(format!(
                "unknown branch `{other}`: use p (affordance) or v (visual trace)"
            )),
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone)]
pub enum Step {
    /// Follow a trajectory with the fingers at `gripper_opening` (0 closed … 1 open).
    /// `transit`: a move between places (not the final approach into the object or the place),
    /// checked against the obstacles seen on the table; approach moves stay inside the keep-out
    /// zones around the grasp and the place.
    Move {
        /// What the move is for ("move above the grasp"), for display and errors.
        label: String,
        /// Joint-space path to follow, starting where the previous step ended.
        trajectory: Trajectory,
        /// Finger opening held during the move, 0 closed … 1 open.
        gripper_opening: f64,
        /// Whether this is a move between places, checked against the table obstacles.
        transit: bool,
        /// The object in the hand during the move (its spheres on the tip), for the checks.
        held: Option<Attached>,
    },
    /// Move the fingers to `width` (m). `expect_object`: a closed-loop check that the fingers stopped
    /// on something (the grasp held) before the plan continues.
    Gripper {
        /// What the command is for ("close on the object"), for display and errors.
        label: String,
        /// Target finger gap, m.
        width: f64,
        /// Whether the fingers must stop on the object (checked after the command).
        expect_object: bool,
    },
}

impl Step {
    /// The step's label, whichever kind it is.
    pub fn label(&self) -> &str {
        match self {
            Step::Move { label, .. } | Step::Gripper { label, .. } => label,
        }
    }
}

/// The 3D targets a plan was built from (for printing, visualisation and tests).
#[derive(Debug, Clone, Default)]
pub struct Targets {
    /// Height of the table top, base frame, m.
    pub table_z: f64,
    /// Tool (TCP) pose at the grasp, base frame; `None` when the plan grasps nothing.
    pub grasp: Option<Isometry3<f64>>,
    /// Tool (TCP) pose where the object is released (the trace's end on the trace branch), base
    /// frame; `None` when nothing is placed.
    pub place: Option<Isometry3<f64>>,
    /// Lifted trace points (trace branch).
    pub trace: Vec<Point3<f64>>,
}

/// What the executor hands the runner: steps to check and execute in order, and their targets.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The steps, in execution order.
    pub steps: Vec<Step>,
    /// The 3D targets the steps were built from.
    pub targets: Targets,
}

impl From<LiftError> for PlanError {
    fn from(e: LiftError) -> Self {
        PlanError::Perceive(e.into())
    }
}

/// Why the task planner could not turn the points into a plan.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The depth image did not give the geometry needed (object, table, place, width).
    #[error(transparent)]
    Perceive(#[from] PerceiveError),
    /// The motion planner found no motion for a step (IK, collisions, limits).
    #[error(transparent)]
    Motion(#[from] MotionError),
    /// The pointer's answer cannot be used as it is (too few trace points, no place point).
    #[error("{0}")]
    Answer(String),
}

/// Tunables of grasping and placing, in metres.
#[derive(Debug, Clone, PartialEq)]
pub struct GraspParams {
    /// How far below the object's top the fingertips close (capped by half the object's height).
    pub grasp_depth: f64,
    /// Lowest fingertip height above the table (the TCP is raised further by the tool's reach
    /// beyond it, `RobotModel::tool_reach_beyond_tip`).
    pub min_tcp_height: f64,
    /// Approach from this far above the grasp.
    pub approach: f64,
    /// Carry the object at least this high above the table.
    pub carry_height: f64,
    /// Release with the object's bottom this far above the place surface.
    pub release_gap: f64,
    /// Peak of the trace's height profile above the chord from start to end.
    pub trace_lift: f64,
    /// Rise of a pick-up trace (no place): its points after the first climb to this height.
    pub pick_up_lift: f64,
}

impl Default for GraspParams {
    fn default() -> Self {
        GraspParams {
            grasp_depth: 0.03,
            min_tcp_height: 0.006,
            approach: 0.10,
            carry_height: 0.20,
            release_gap: 0.015,
            trace_lift: 0.10,
            pick_up_lift: 0.12,
        }
    }
}

/// Where to grasp an object from above: the centre of its top. The camera sees only the near side
/// of a round object, so the centroid of the visible top is pulled toward the camera; across the
/// narrow direction the top of a lying cylinder or a sphere is a parabola in height whose vertex is
/// above the axis, so a curved top is centred on the fitted vertex. Flat tops keep the centroid.
fn top_centre(blob: &ObjectBlob, top: f64) -> k::nalgebra::Point2<f64> {
    let band: Vec<&Point3<f64>> = blob.points.iter().filter(|q| q.z > top - 0.012).collect();
    let n = band.len().max(1) as f64;
    let cx = band.iter().map(|q| q.x).sum::<f64>() / n;
    let cy = band.iter().map(|q| q.y).sum::<f64>() / n;
    let dir = k::nalgebra::Vector2::new(blob.narrow_yaw.cos(), blob.narrow_yaw.sin());
    // Least squares z = a d² + b d + c over d = offset along the narrow direction.
    let mut m = k::nalgebra::Matrix3::<f64>::zeros();
    let mut r = k::nalgebra::Vector3::<f64>::zeros();
    for q in &band {
        let d = (q.x - cx) * dir.x + (q.y - cy) * dir.y;
        let row = k::nalgebra::Vector3::new(d * d, d, 1.0);
        m += row * row.transpose();
        r += row * q.z;
    }
    let centroid = k::nalgebra::Point2::new(cx, cy);
    match m.lu().solve(&r) {
        // Curvature of a radius-10 cm (or tighter) round top: z ≈ −d²/(2r).
        Some(c) if c[0] < -5.0 => {
            let shift = (-c[1] / (2.0 * c[0])).clamp(-0.03, 0.03);
            centroid + dir * shift
        }
        _ => centroid,
    }
}

/// A grasp computed from the object under a pixel.
struct Grasp {
    pose: Isometry3<f64>,
    /// TCP height above the object's bottom (the table), kept while carrying.
    hold_offset: f64,
}

/// Turns the points of one task into a [`Plan`] for one robot: grasps from the objects under the
/// points, places, traces, each motion made by a [`MotionPlanner`]. ("Task" planner, so that
/// "planner" alone means the motion planner.)
pub struct TaskPlanner<'a, M: MotionPlanner> {
    /// The robot the plan is for.
    pub model: &'a RobotModel,
    /// Makes each motion of the plan.
    pub motion: M,
    /// Grasp and place tunables.
    pub params: GraspParams,
    /// Height of the table top, base frame, m.
    pub table_z: f64,
    /// Points this much above the table are objects (m, [`super::perceive::Table`]).
    pub min_object_height: f64,
}

impl<'a, M: MotionPlanner> TaskPlanner<'a, M> {
    /// Grasp pose for the object under `px`. `use_point`: grasp at the lifted point itself (a part
    /// from OFG), else at the centre of the object's top.
    fn grasp(
        &mut self,
        frame: &Frame,
        px: [f64; 2],
        use_point: bool,
        q_now: &[f64],
    ) -> Result<(Grasp, ObjectBlob), PlanError> {
        let p = self.params.clone();
        let blob = object_blob(frame, px, self.table_z, self.min_object_height, 0.15)?;
        let top = blob
            .points
            .iter()
            .map(|q| q.z)
            .fold(f64::NEG_INFINITY, f64::max);
        let xy = if use_point {
            lift(frame, px, &RobustDepthOptions::grasp())?.xy()
        } else {
            top_centre(&blob, top)
        };
        let top_here = if use_point { blob.top_z } else { top };
        let height = (top_here - self.table_z).max(0.0);
        let floor = self.table_z + p.min_tcp_height + self.model.tool_reach_beyond_tip();
        let z = (top_here - p.grasp_depth.min(0.5 * height)).max(floor);
        // What the fingers close on: the object's points within a finger's reach of the grasp,
        // across the closing direction. Wider than the open gripper: no grasp to try.
        let open = self.model.config.gripper.open_width;
        let across = k::nalgebra::Vector2::new(blob.narrow_yaw.cos(), blob.narrow_yaw.sin());
        let (lo, hi) = blob
            .points
            .iter()
            .filter(|q| (q.xy() - xy).norm() < 0.025 && q.z > z)
            .map(|q| (q.xy() - xy).dot(&across))
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), d| {
                (l.min(d), h.max(d))
            });
        if hi - lo > open {
            return Err(PerceiveError::TooWide {
                width_m: hi - lo,
                open_m: open,
            }
            .into());
        }
        let now_yaw = tool_yaw(self.model, q_now)?;
        // Fingers close across the narrowest direction; `top_down` takes the yaw 90° from it.
        let yaw = fold_yaw(blob.narrow_yaw - std::f64::consts::FRAC_PI_2, now_yaw);
        let pose = top_down(self.model, xy.x, xy.y, z, yaw);
        Ok((
            Grasp {
                pose,
                hold_offset: z - self.table_z,
            },
            blob,
        ))
    }

    /// Open, approach, descend, close (checked): the common start of both branches. Returns the
    /// joints at the grasp and the object now in the hand (from its blob), which the planner
    /// checks the later moves with.
    fn pick(
        &mut self,
        grasp: &Grasp,
        blob: &ObjectBlob,
        q0: &[f64],
        steps: &mut Vec<Step>,
    ) -> Result<(Vec<f64>, Option<Attached>), PlanError> {
        let model = self.model;
        self.motion.set_hand(1.0, None);
        let g = &model.config.gripper;
        let (open, closed) = (g.open_width, g.closed_width);
        steps.push(Step::Gripper {
            label: "open the gripper".into(),
            width: open,
            expect_object: false,
        });
        let gp = grasp.pose;
        let above = with_z(&gp, gp.translation.z + self.params.approach);
        let t = self.motion.joint_move_to("pre-grasp", q0, &above)?;
        let q1 = t.end().to_vec();
        steps.push(Step::Move {
            label: "move above the grasp".into(),
            trajectory: t,
            gripper_opening: 1.0,
            transit: true,
            held: None,
        });
        let t = self.motion.line_to("descend to grasp", &q1, &gp)?;
        let q2 = t.end().to_vec();
        steps.push(Step::Move {
            label: "descend".into(),
            trajectory: t,
            gripper_opening: 1.0,
            transit: false,
            held: None,
        });
        steps.push(Step::Gripper {
            label: "close on the object".into(),
            width: closed,
            expect_object: true,
        });
        let held = Attached::from_points(&gp, &blob.points, self.table_z);
        self.motion.set_hand(0.0, held.clone());
        Ok((q2, held))
    }

    /// Affordance branch: grasp at `grasp_px`, place at `place` (None: pick up and hold).
    pub(crate) fn affordance(
        &mut self,
        frame: &Frame,
        grasp_px: [f64; 2],
        grasp_is_part: bool,
        place: Option<PlaceSpot>,
        relation: Relation,
        q0: &[f64],
    ) -> Result<Plan, PlanError> {
        let (grasp, blob) = self.grasp(frame, grasp_px, grasp_is_part, q0)?;
        let mut steps = Vec::new();
        let (q, held) = self.pick(&grasp, &blob, q0, &mut steps)?;
        let lift_z = (self.table_z + self.params.carry_height)
            .max(grasp.pose.translation.z + self.params.approach);
        let up = with_z(&grasp.pose, lift_z);
        let t = self.motion.line_to("lift", &q, &up)?;
        let mut q = t.end().to_vec();
        steps.push(Step::Move {
            label: "lift".into(),
            trajectory: t,
            gripper_opening: 0.0,
            transit: false,
            held: held.clone(),
        });
        let mut targets = Targets {
            table_z: self.table_z,
            grasp: Some(grasp.pose),
            ..Targets::default()
        };
        if let Some(spot) = place.filter(|_| relation != Relation::PickUp) {
            let mut surface = lift(frame, spot.px, &RobustDepthOptions::surface())?;
            if let Some(xy) = spot.xy {
                surface.x = xy.x;
                surface.y = xy.y;
            }
            let release_z = surface.z + grasp.hold_offset + self.params.release_gap;
            let carry_z = lift_z.max(release_z + self.params.approach);
            let place = top_down(
                self.model,
                surface.x,
                surface.y,
                release_z,
                yaw_of(self.model, &grasp.pose),
            );
            let t = self
                .motion
                .joint_move_to("carry", &q, &with_z(&place, carry_z))?;
            q = t.end().to_vec();
            steps.push(Step::Move {
                label: "carry above the place".into(),
                trajectory: t,
                gripper_opening: 0.0,
                transit: true,
                held: held.clone(),
            });
            let t = self.motion.line_to("lower to place", &q, &place)?;
            q = t.end().to_vec();
            steps.push(Step::Move {
                label: "lower".into(),
                trajectory: t,
                gripper_opening: 0.0,
                transit: false,
                held: held.clone(),
            });
            self.release_and_retreat(&place, &mut q, &mut steps)?;
            targets.place = Some(place);
        }
        Ok(Plan { steps, targets })
    }

    /// Trace branch: grasp at the first trace point, follow the lifted trace, release at the last
    /// (at `end_xy` when a depth check moved the place).
    /// With a pick-up intent the trace is a lift: every later point sits on a straight rise of
    /// `pick_up_lift` and the object stays in the hand. A named part is grasped at the point itself.
    pub(crate) fn trace(
        &mut self,
        frame: &Frame,
        trace_px: &[[f64; 2]],
        end_xy: Option<k::nalgebra::Point2<f64>>,
        intent: Option<&super::Intent>,
        q0: &[f64],
    ) -> Result<Plan, PlanError> {
        if trace_px.len() < 2 {
            return Err(PlanError::Answer(format!(
                "a visual trace needs at least 2 points, got {}",
                trace_px.len()
            )));
        }
        let first = trace_px[0];
        let last = trace_px[trace_px.len() - 1];
        let pick_up = intent.is_some_and(|i| i.relation == Relation::PickUp);
        let by_part = intent.is_some_and(|i| i.part.is_some());
        let start = lift(frame, first, &RobustDepthOptions::grasp())?;
        let (grasp, blob) = self.grasp(frame, first, by_part, q0)?;
        let end = if pick_up {
            // In the air: its own depth would hit whatever is behind it.
            ray_to_height(frame, last, start.z + self.params.pick_up_lift)?
        } else {
            let mut end = lift(frame, last, &RobustDepthOptions::surface())?;
            if let Some(xy) = end_xy {
                end.x = xy.x;
                end.y = xy.y;
            }
            end
        };
        let mut steps = Vec::new();
        let (mut q, held) = self.pick(&grasp, &blob, q0, &mut steps)?;
        let yaw = yaw_of(self.model, &grasp.pose);
        let n = trace_px.len() - 1;
        let tcp_start = grasp.pose.translation.vector;
        let (tcp_end_z, lift_peak) = if pick_up {
            (tcp_start.z + (end.z - start.z), 0.0)
        } else {
            (
                end.z + grasp.hold_offset + self.params.release_gap,
                self.params.trace_lift,
            )
        };
        let mut trace = vec![start];
        let mut poses = vec![grasp.pose];
        for (i, px) in trace_px.iter().enumerate().skip(1) {
            let s = i as f64 / n as f64;
            let bump = 4.0 * lift_peak * s * (1.0 - s);
            let (p, tcp_z) = if i == n {
                (end, tcp_end_z)
            } else {
                // Middle points: on the height profile, not their own depth (which would hit the
                // table behind the moving object).
                let z_ref = start.z + (end.z - start.z) * s + bump;
                let p = ray_to_height(frame, *px, z_ref)?;
                (p, tcp_start.z + (tcp_end_z - tcp_start.z) * s + bump)
            };
            trace.push(p);
            poses.push(top_down(self.model, p.x, p.y, tcp_z, yaw));
        }
        // Between the grasp and the place the trace moves among the other objects: its middle
        // points must be clear of them (the two ends enter the object and the place on purpose).
        // The arm's links only: the held object's cover (its box down to the table, in spheres)
        // is too coarse for a trace that leaves the table a few centimetres up by design; free
        // carries check it.
        if poses.len() > 2 {
            self.motion.set_hand(0.0, None);
            let checked =
                self.motion
                    .check_poses("follow the trace", &q, &poses[1..poses.len() - 1]);
            self.motion.set_hand(0.0, held.clone());
            checked?;
        }
        let t = self.motion.path_through("follow the trace", &q, &poses)?;
        q = t.end().to_vec();
        steps.push(Step::Move {
            label: "follow the trace".into(),
            trajectory: t,
            gripper_opening: 0.0,
            // Starts in the object and ends in the place: the gate checks it against the table
            // (its middle points were checked against the world above).
            transit: false,
            held: held.clone(),
        });
        let place = *poses.last().unwrap_or(&grasp.pose);
        if !pick_up {
            self.release_and_retreat(&place, &mut q, &mut steps)?;
        }
        Ok(Plan {
            steps,
            targets: Targets {
                table_z: self.table_z,
                grasp: Some(grasp.pose),
                place: Some(place),
                trace,
            },
        })
    }

    fn release_and_retreat(
        &mut self,
        place: &Isometry3<f64>,
        q: &mut Vec<f64>,
        steps: &mut Vec<Step>,
    ) -> Result<(), PlanError> {
        let model = self.model;
        steps.push(Step::Gripper {
            label: "release".into(),
            width: model.config.gripper.open_width,
            expect_object: false,
        });
        self.motion.set_hand(1.0, None);
        let up = with_z(place, place.translation.z + self.params.approach);
        let t = self.motion.line_to("retreat", q, &up)?;
        *q = t.end().to_vec();
        steps.push(Step::Move {
            label: "retreat".into(),
            trajectory: t,
            gripper_opening: 1.0,
            transit: false,
            held: None,
        });
        let home = model.home().to_vec();
        let t = self.motion.joint_move(q, home)?;
        *q = t.end().to_vec();
        steps.push(Step::Move {
            label: "return home".into(),
            trajectory: t,
            gripper_opening: 1.0,
            transit: true,
            held: None,
        });
        Ok(())
    }
}

fn with_z(p: &Isometry3<f64>, z: f64) -> Isometry3<f64> {
    let mut out = *p;
    out.translation.z = z;
    out
}

/// Yaw of the fingers' closing direction minus π/2, i.e. the `yaw` that `top_down` was given.
fn yaw_of(model: &RobotModel, pose: &Isometry3<f64>) -> f64 {
    let c = pose.rotation * k::nalgebra::Vector3::from(model.config.closing_axis);
    c.y.atan2(c.x) - std::f64::consts::FRAC_PI_2
}

fn tool_yaw(model: &RobotModel, q: &[f64]) -> Result<f64, PlanError> {
    let pose = model.fk(q).map_err(MotionError::from)?;
    Ok(yaw_of(model, &pose))
}
