//! `SimWorld`: rigid-body physics of one scene (rapier3d) with the robot driven kinematically.
//!
//! * Objects are dynamic bodies (one compound per object, mass spread by volume), the table is a
//!   fixed box, and every robot link with collision geometry is a kinematic position-based body:
//!   the arm goes exactly where the joint commands put it and pushes objects with unlimited force,
//!   like a stiff position-controlled industrial arm.
//! * The fingers are compliant (see [`SimWorld::step`]): a closing gripper stops where its fingers
//!   meet an object and squeezes it by [`FINGER_SQUEEZE_M`], so the pads press on it and rub on it
//!   with friction. On top of that an **attach rule** holds what is properly grasped (the pressure
//!   that rapier's soft contacts make from a millimetre of overlap varies with solver settings and
//!   let objects slip a centimetre in a lift): see [`SimWorld::step`] for the exact rule.
//! * Robot links collide with objects only, never with the table: nothing here stops the arm
//!   (that is the safety gate's job), and fingers driven below the table top pass through it.
//! * Collision shapes: boxes are exact, flat discs are exact cylinders, other curved solids are
//!   12-sided convex polyhedra (see `convert::to_shared_shape` for why); the renderer draws the
//!   exact shapes.
//! * Stepping is fixed-step ([`DEFAULT_DT`]) and single-threaded, and all bookkeeping is in scene
//!   order, so the same commands give bit-identical poses on the same machine.

use std::sync::Arc;

use k::nalgebra::{Isometry3, Point3, Vector3};
use rapier3d::prelude::{
    CoefficientCombineRule, ColliderBuilder, ColliderHandle, ContactPair, Group, InteractionGroups,
    InteractionTestMode, PhysicsWorld, RigidBodyBuilder, RigidBodyHandle,
};

use super::convert::{from_pose, from_vec, to_pose, to_shared_shape, volume};
use super::scene::{Scene, SceneObject};
use super::{
    Primitive, RenderScene, FIRST_OBJECT_INSTANCE, NO_PART, ROBOT_INSTANCE, TABLE_INSTANCE,
};
use pointact_core::geometry::Shape;
use pointact_core::kinematics::{KinematicsError, RobotModel};

mod finger;
mod gripper;

use finger::{Attachment, Finger};
pub(crate) use gripper::FINGER_FRICTION;

/// Physics time step: 240 Hz keeps 4 cm blocks stacked and 1 cm finger contacts stable.
pub(crate) const DEFAULT_DT: f64 = 1.0 / 240.0;
/// Largest move of an object in a 0.1 s window that still counts as resting, m.
pub(crate) const REST_MOVE_M: f64 = 0.0005;
/// Largest turn of an object in a 0.1 s window that still counts as resting, rad.
pub(crate) const REST_TURN_RAD: f64 = 0.005;
/// Consecutive resting windows `settle` waits for.
const REST_WINDOWS: u32 = 3;

/// Whether an object moved less than the rest thresholds between two poses.
fn pose_still(a: &Isometry3<f64>, b: &Isometry3<f64>) -> bool {
    (a.translation.vector - b.translation.vector).norm() < REST_MOVE_M
        && a.rotation.angle_to(&b.rotation) < REST_TURN_RAD
}

/// Surfaces closer than this count as touching (rapier also keeps "speculative" contacts between
/// shapes still apart, which must not count).
pub(crate) const TOUCH_DISTANCE_M: f64 = 0.001;
const GROUP_TABLE: Group = Group::GROUP_1;
const GROUP_OBJECT: Group = Group::GROUP_2;
const GROUP_ROBOT: Group = Group::GROUP_3;

/// Errors of the physics world: bad commands or names.
#[derive(Debug, thiserror::Error)]
pub enum PhysicsError {
    /// Forward kinematics of the robot failed, e.g. a joint command of the wrong length.
    #[error(transparent)]
    Kinematics(#[from] KinematicsError),
    /// An object name is not in the scene.
    #[error("unknown object `{name}`; the scene has {known}")]
    UnknownObject {
        /// The name as given.
        name: String,
        /// The scene's object names, comma-separated, for the message.
        known: String,
    },
    /// A gripper command was NaN, infinite or outside [0, 1].
    #[error("gripper opening must be a finite number in [0, 1], got {0}")]
    GripperOpening(f64),
}

/// What a collider belongs to (kept in its `user_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Table,
    Object { index: usize, part: u8 },
    Link { index: usize },
}

impl Owner {
    fn encode(self) -> u128 {
        match self {
            Owner::Table => 1,
            Owner::Object { index, part } => 2 | (u128::from(part) << 8) | ((index as u128) << 16),
            Owner::Link { index } => 3 | ((index as u128) << 16),
        }
    }
    fn decode(v: u128) -> Option<Owner> {
        let index = (v >> 16) as usize;
        match v & 0xff {
            1 => Some(Owner::Table),
            2 => Some(Owner::Object {
                index,
                part: ((v >> 8) & 0xff) as u8,
            }),
            3 => Some(Owner::Link { index }),
            _ => None,
        }
    }
}

/// What an object touches, as reported by [`SimWorld::contacts_of`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContactWith {
    /// The table top.
    Table,
    /// Another object and the part of it that is touched.
    Object {
        /// The other object's scene name.
        name: String,
        /// Its touched part, `None` where the primitive has no named part.
        part: Option<String>,
    },
    /// A robot link (fingers included).
    Robot {
        /// The link's name in the robot model.
        link: String,
    },
}

/// A solid fixed to the tool point (the `tip_link` frame, what IK and FK place) that only the
/// camera sees: no collider, no mass, unknown to the safety gate. For things the gripper holds
/// rigidly for a measurement, such as the hand-eye calibration target; keep them thin and close
/// to the fingers, since nothing checks them against the table or the arm.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolVisual {
    /// Geometry, centred on its own origin.
    pub shape: Shape,
    /// Pose of the shape in the tool-point frame.
    pub tcp_from_shape: Isometry3<f64>,
    /// Linear RGB albedo (of the faces the texture does not cover).
    pub color: [f32; 3],
    /// A pattern printed on the shape's +z face (cuboids only), e.g. a calibration board.
    pub texture: Option<Arc<crate::render::FaceTexture>>,
}

/// What of the robot touched an object (see [`SimWorld::first_robot_touch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Toucher {
    /// A robot link (fingers included).
    Link(String),
    /// The object the gripper held at that moment.
    Held(String),
}

/// The first time the robot touched an object.
#[derive(Debug, Clone, PartialEq)]
pub struct RobotTouch {
    /// The link, or the held object, that made the contact.
    pub by: Toucher,
    /// Simulated time of the step, s.
    pub time_s: f64,
}

/// One touching pair: which part of the queried object touches what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contact {
    /// The queried object's touching part, `None` where the primitive has no named part.
    pub part: Option<String>,
    /// What it touches.
    pub with: ContactWith,
}

#[derive(Debug)]
struct ObjectBody {
    body: RigidBodyHandle,
    initial: Isometry3<f64>,
}

#[derive(Debug)]
struct LinkBody {
    link: String,
    body: RigidBodyHandle,
    /// Index into `fingers` when this link is a finger.
    finger: Option<usize>,
}

/// The physical scene: objects, table and the kinematically driven robot.
pub struct SimWorld {
    pw: PhysicsWorld,
    scene: Scene,
    robot: Arc<RobotModel>,
    objects: Vec<ObjectBody>,
    links: Vec<LinkBody>,
    fingers: Vec<Finger>,
    visuals: Vec<(usize, Shape, Isometry3<f64>)>,
    robot_color: [f32; 3],
    q_cmd: Vec<f64>,
    gripper_cmd: f64,
    /// Actual gripper opening in [0, 1]: both fingers, coupled; stops short of the command on
    /// contact.
    opening: f64,
    /// Link poses for `q_cmd` with the fingers at opening 0, in `links` order.
    cmd_poses: Vec<Isometry3<f64>>,
    /// A collider-less kinematic body at the tool point: what a held object is fixed to.
    tcp_body: RigidBodyHandle,
    cmd_tcp: Isometry3<f64>,
    attachment: Option<Attachment>,
    /// Per object (scene order): the first step at which a robot link or the held object touched
    /// it. Kept from construction on; see [`SimWorld::first_robot_touch`].
    touches: Vec<Option<RobotTouch>>,
    /// Solids carried at the tool point that the camera sees but physics ignores (a calibration
    /// target); see [`SimWorld::mount_on_tool`].
    tool_visuals: Vec<ToolVisual>,
    dt: f64,
    time: f64,
    steps: u64,
}

impl std::fmt::Debug for SimWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimWorld")
            .field("scene", &self.scene.name)
            .field("robot", &self.robot.name())
            .field("time", &self.time)
            .finish_non_exhaustive()
    }
}

fn groups(member: Group, filter: Group) -> InteractionGroups {
    InteractionGroups::new(member, filter, InteractionTestMode::And)
}

impl SimWorld {
    /// Builds the world with the robot at its home pose, gripper open, objects at their scene poses
    /// (at rest on the table; call [`SimWorld::settle`] if the scene was hand-placed).
    pub fn new(scene: &Scene, robot: Arc<RobotModel>) -> Result<SimWorld, PhysicsError> {
        let mut pw = PhysicsWorld::new();
        pw.gravity = rapier3d::prelude::Vector::new(0.0, 0.0, -9.81);
        let ip = &mut pw.integration_parameters;
        ip.dt = DEFAULT_DT as f32;
        // Objects are centimetres, not metres: scale the solver's tolerances (allowed penetration
        // 0.25 mm, prediction 1 mm) to them.
        ip.length_unit = 0.05;
        ip.num_solver_iterations = 8;
        // Recycled contact manifolds (rapier's default) kept stale finger contacts; recompute them.
        ip.contact_recycling = false;
        ip.warmstart_joints = true;

        // Table.
        let (shape, pose) = scene.table.primitive();
        let table_body = pw.insert_body(RigidBodyBuilder::fixed().pose(to_pose(&pose)));
        let (shared, fix) = to_shared_shape(&shape);
        pw.insert_collider(
            ColliderBuilder::new(shared)
                .position(to_pose(&fix))
                .friction(scene.table.friction as f32)
                .collision_groups(groups(GROUP_TABLE, GROUP_OBJECT))
                .user_data(Owner::Table.encode()),
            Some(table_body),
        );

        // Objects.
        let mut objects = Vec::with_capacity(scene.objects.len());
        for (index, obj) in scene.objects.iter().enumerate() {
            objects.push(insert_object(&mut pw, index, obj));
        }

        // Robot links.
        let tree_poses = robot.link_poses(robot.home(), 0.0)?;
        let collision = robot.collision_shapes();
        let finger_joints: Vec<&urdf_rs::Joint> = robot
            .urdf
            .joints
            .iter()
            .filter(|j| {
                j.joint_type == urdf_rs::JointType::Prismatic
                    && !robot.config.arm_joints.contains(&j.name)
            })
            .collect();
        let mut links = Vec::new();
        let mut fingers = Vec::new();
        let mut cmd_poses = Vec::new();
        for (link, pose) in &tree_poses {
            let shapes: Vec<_> = collision.iter().filter(|s| s.link == *link).collect();
            if shapes.is_empty() {
                continue;
            }
            let index = links.len();
            let body =
                pw.insert_body(RigidBodyBuilder::kinematic_position_based().pose(to_pose(pose)));
            let joint = finger_joints.iter().find(|j| j.child.link == *link);
            let mut finger_shapes = Vec::new();
            for s in &shapes {
                let (shared, fix) = to_shared_shape(&s.shape);
                let local = s.link_from_shape * fix;
                let mut b = ColliderBuilder::new(shared.clone())
                    .position(to_pose(&local))
                    .collision_groups(groups(GROUP_ROBOT, GROUP_OBJECT))
                    .user_data(Owner::Link { index }.encode());
                b = if joint.is_some() {
                    b.friction(FINGER_FRICTION as f32)
                        .friction_combine_rule(CoefficientCombineRule::Max)
                } else {
                    b.friction(0.5)
                };
                pw.insert_collider(b, Some(body));
                finger_shapes.push((shared, local));
            }
            let finger = joint.map(|j| {
                fingers.push(Finger {
                    link_index: index,
                    axis: Vector3::from(*j.axis.xyz),
                    travel: j.limit.upper - j.limit.lower,
                    shapes: finger_shapes,
                });
                fingers.len() - 1
            });
            links.push(LinkBody {
                link: link.clone(),
                body,
                finger,
            });
            cmd_poses.push(*pose);
        }
        let tip = robot.config.tip_link.clone();
        let cmd_tcp = tree_poses
            .iter()
            .find(|(n, _)| *n == tip)
            .map(|(_, p)| *p)
            .unwrap_or_else(Isometry3::identity);
        let tcp_body =
            pw.insert_body(RigidBodyBuilder::kinematic_position_based().pose(to_pose(&cmd_tcp)));
        let visuals = robot
            .visual_shapes()
            .into_iter()
            .filter_map(|s| {
                let i = links.iter().position(|l| l.link == s.link)?;
                Some((i, s.shape, s.link_from_shape))
            })
            .collect();
        let robot_color = if robot.name().starts_with("xarm") {
            [0.75, 0.75, 0.74]
        } else {
            [0.06, 0.06, 0.07]
        };
        let q_cmd = robot.home().to_vec();
        let mut world = SimWorld {
            pw,
            scene: scene.clone(),
            robot,
            objects,
            links,
            fingers,
            visuals,
            robot_color,
            q_cmd,
            gripper_cmd: 1.0,
            opening: 1.0,
            cmd_poses,
            tcp_body,
            cmd_tcp,
            attachment: None,
            touches: vec![None; scene.objects.len()],
            tool_visuals: Vec::new(),
            dt: DEFAULT_DT,
            time: 0.0,
            steps: 0,
        };
        // Put the fingers at their open pose right away (no sweep from closed).
        for i in 0..world.fingers.len() {
            let pose = world.finger_pose(i, 1.0);
            let body = world.links[world.fingers[i].link_index].body;
            if let Some(b) = world.pw.bodies.get_mut(body) {
                b.set_position(to_pose(&pose), true);
            }
        }
        Ok(world)
    }

    /// The scene this world was built from (initial poses, parts, regions).
    pub fn scene(&self) -> &Scene {
        &self.scene
    }

    /// The kinematic model driving the robot's links.
    pub fn robot(&self) -> &Arc<RobotModel> {
        &self.robot
    }

    /// Simulated time since construction, s.
    pub fn time(&self) -> f64 {
        self.time
    }

    /// Fixed physics step, s.
    pub fn dt(&self) -> f64 {
        self.dt
    }

    /// Sets the robot's joint targets and gripper opening (0 closed … 1 open) for the next steps.
    /// The arm links reach the pose at the end of the next step (kinematic bodies, so keep each
    /// change small: what moves per step moves objects it hits); the fingers travel toward the
    /// opening at a finite speed and stop on contact.
    pub fn set_robot(&mut self, q: &[f64], gripper_opening: f64) -> Result<(), PhysicsError> {
        if !(gripper_opening.is_finite() && (0.0..=1.0).contains(&gripper_opening)) {
            return Err(PhysicsError::GripperOpening(gripper_opening));
        }
        let poses = self.robot.link_poses(q, 0.0)?;
        self.q_cmd = q.to_vec();
        self.gripper_cmd = gripper_opening;
        for (l, cmd) in self.links.iter().zip(self.cmd_poses.iter_mut()) {
            if let Some((_, p)) = poses.iter().find(|(n, _)| *n == l.link) {
                *cmd = *p;
            }
        }
        let tip = &self.robot.config.tip_link;
        if let Some((_, p)) = poses.iter().find(|(n, _)| n == tip) {
            self.cmd_tcp = *p;
        }
        Ok(())
    }

    /// The last joint command and gripper command.
    pub fn robot_command(&self) -> (&[f64], f64) {
        (&self.q_cmd, self.gripper_cmd)
    }

    /// Actual gripper opening in [0, 1] (both fingers; short of the command when the fingers are
    /// closed on something).
    pub fn gripper_opening(&self) -> f64 {
        if self.fingers.is_empty() {
            self.gripper_cmd
        } else {
            self.opening
        }
    }

    /// Advances the world by one fixed step.
    ///
    /// **Fingers.** The fingers are coupled, like a single-motor parallel gripper, and move toward
    /// the commanded opening at `FINGER_SPEED`. While closing, each finger sweeps its collision
    /// shapes along its closing direction, starting `FINGER_LOOKBACK_M` behind its current place,
    /// to find the first object surface in its way. While any finger is free the gripper keeps
    /// closing (pushing the object toward the middle); once every finger has met an object it
    /// stops `FINGER_SQUEEZE_M` past the nearest contact. Opening is never limited.
    ///
    /// **Attach rule.** After the physics step, if nothing is attached, an object is attached to
    /// the tool point (a fixed joint from a collider-less kinematic body at the TCP, so the object
    /// keeps its pose relative to the hand and still collides with everything) when all of these
    /// hold:
    /// 1. the gripper is closed on something: the command is below the actual opening (the fingers
    ///    were stopped by contact);
    /// 2. every finger touches that object (surfaces within `TOUCH_DISTANCE_M`);
    /// 3. the fingers touch it from opposite sides: the contact normals of the two fingers point
    ///    against each other (cosine below −0.7).
    ///
    /// The object is released (joint removed) as soon as the command opens beyond the opening at
    /// which it attached plus `RELEASE_MARGIN` (2 % of the range), i.e. when the gripper opens.
    /// Nothing else attaches or releases it.
    pub fn step(&mut self) {
        let dt = self.dt;
        self.advance_fingers();
        for (i, l) in self.links.iter().enumerate() {
            let pose = match l.finger {
                Some(fi) => self.finger_pose(fi, self.opening),
                None => self.cmd_poses[i],
            };
            if let Some(b) = self.pw.bodies.get_mut(l.body) {
                b.set_next_kinematic_position(to_pose(&pose));
            }
        }
        if let Some(b) = self.pw.bodies.get_mut(self.tcp_body) {
            b.set_next_kinematic_position(to_pose(&self.cmd_tcp));
        }
        self.pw.step();
        self.steps += 1;
        self.time = self.steps as f64 * dt;
        self.record_touches();
        self.update_attachment();
    }

    /// Notes, for every object not touched before, whether a robot link or the held object
    /// touches it after this step (surfaces within `TOUCH_DISTANCE_M`).
    fn record_touches(&mut self) {
        let held = self.attachment.as_ref().map(|a| a.object);
        for i in 0..self.objects.len() {
            if self.touches[i].is_some() {
                continue;
            }
            let Some(body) = self.pw.bodies.get(self.objects[i].body) else {
                continue;
            };
            let mut by = None;
            'colliders: for &ch in body.colliders() {
                for other in self.touching(ch) {
                    by = match self.owner(other) {
                        Some(Owner::Link { index }) => {
                            Some(Toucher::Link(self.links[index].link.clone()))
                        }
                        Some(Owner::Object { index, .. }) if index != i && held == Some(index) => {
                            Some(Toucher::Held(self.scene.objects[index].name.clone()))
                        }
                        _ => None,
                    };
                    if by.is_some() {
                        break 'colliders;
                    }
                }
            }
            if let Some(by) = by {
                self.touches[i] = Some(RobotTouch {
                    by,
                    time_s: self.time,
                });
            }
        }
    }

    /// The first time, since the world was built, that the robot touched `name`: one of its links
    /// (fingers included) or the object it held then. `None` if it never did.
    pub fn first_robot_touch(&self, name: &str) -> Option<&RobotTouch> {
        self.touches[self.index(name)?].as_ref()
    }

    /// Steps for `seconds` of simulated time (rounded up to whole steps).
    pub fn step_for(&mut self, seconds: f64) {
        let n = (seconds.max(0.0) / self.dt).ceil() as u64;
        for _ in 0..n {
            self.step();
        }
    }

    /// Steps (robot holding its command) until every object has stayed put for three consecutive
    /// 0.1 s windows (moved under `REST_MOVE_M` and turned under `REST_TURN_RAD` in each), at most
    /// `max_s` seconds. True if everything came to rest. Poses, not velocities, decide: soft
    /// contacts and joints can leave a small velocity on a body that does not move.
    pub fn settle(&mut self, max_s: f64) -> bool {
        let window = (0.1 / self.dt).ceil().max(1.0) as u64;
        let windows = ((max_s.max(0.0) / self.dt).ceil() as u64).div_ceil(window);
        let mut calm = 0;
        let mut before = self.object_poses();
        for _ in 0..windows {
            for _ in 0..window {
                self.step();
            }
            let now = self.object_poses();
            let still = before.iter().zip(&now).all(|(a, b)| pose_still(a, b));
            before = now;
            calm = if still { calm + 1 } else { 0 };
            if calm >= REST_WINDOWS {
                return true;
            }
        }
        false
    }

    fn object_poses(&self) -> Vec<Isometry3<f64>> {
        self.objects
            .iter()
            .map(|o| {
                self.pw
                    .bodies
                    .get(o.body)
                    .map_or(o.initial, |b| from_pose(b.position()))
            })
            .collect()
    }

    /// Object names in scene order.
    pub fn object_names(&self) -> Vec<&str> {
        self.scene.objects.iter().map(|o| o.name.as_str()).collect()
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.scene.objects.iter().position(|o| o.name == name)
    }

    fn unknown(&self, name: &str) -> PhysicsError {
        PhysicsError::UnknownObject {
            name: name.to_string(),
            known: self.object_names().join(", "),
        }
    }

    /// The scene description of an object.
    pub fn object(&self, name: &str) -> Option<&SceneObject> {
        self.scene.object(name)
    }

    /// World pose of an object's frame (base centre).
    pub fn object_pose(&self, name: &str) -> Option<Isometry3<f64>> {
        let i = self.index(name)?;
        self.pw
            .bodies
            .get(self.objects[i].body)
            .map(|b| from_pose(b.position()))
    }

    /// Pose of an object when the world was built.
    pub(crate) fn initial_pose(&self, name: &str) -> Option<Isometry3<f64>> {
        self.index(name).map(|i| self.objects[i].initial)
    }

    /// Moves an object (teleport, velocities zeroed). For resets and tests.
    pub fn set_object_pose(
        &mut self,
        name: &str,
        pose: &Isometry3<f64>,
    ) -> Result<(), PhysicsError> {
        let i = self.index(name).ok_or_else(|| self.unknown(name))?;
        if let Some(b) = self.pw.bodies.get_mut(self.objects[i].body) {
            b.set_position(to_pose(pose), true);
            b.set_linvel(rapier3d::prelude::Vector::ZERO, true);
            b.set_angvel(rapier3d::prelude::Vector::ZERO, true);
        }
        Ok(())
    }

    /// Instance id the renderer gives an object (`FIRST_OBJECT_INSTANCE` + scene index).
    pub fn instance_of(&self, name: &str) -> Option<u16> {
        let i = u16::try_from(self.index(name)?).ok()?;
        FIRST_OBJECT_INSTANCE.checked_add(i)
    }

    /// Object name of a render instance id.
    pub fn object_of_instance(&self, instance: u16) -> Option<&str> {
        let i = instance.checked_sub(FIRST_OBJECT_INSTANCE)?;
        self.scene
            .objects
            .get(usize::from(i))
            .map(|o| o.name.as_str())
    }

    /// Part id of an object's named part (as drawn in the renderer's part channel).
    pub fn part_id(&self, object: &str, part: &str) -> Option<u8> {
        self.scene.object(object)?.part_id(part)
    }

    /// World-axis-aligned bounds of an object at its current pose: (min, max).
    pub fn object_aabb(&self, name: &str) -> Option<(Point3<f64>, Point3<f64>)> {
        let obj = self.scene.object(name)?;
        let pose = self.object_pose(name)?;
        let mut lo = Vector3::repeat(f64::INFINITY);
        let mut hi = Vector3::repeat(f64::NEG_INFINITY);
        for axis in 0..3 {
            let mut w = Vector3::zeros();
            w[axis] = 1.0;
            // Direction in the object frame.
            let d = pose.rotation.inverse_transform_vector(&w);
            let (a, b) = obj.local_extent(&d);
            let c = pose.translation.vector[axis];
            lo[axis] = c + a;
            hi[axis] = c + b;
        }
        Some((Point3::from(lo), Point3::from(hi)))
    }

    /// Everything touching an object now (surfaces within `TOUCH_DISTANCE_M` after the last step),
    /// in a stable order.
    pub fn contacts_of(&self, name: &str) -> Vec<Contact> {
        let Some(i) = self.index(name) else {
            return Vec::new();
        };
        let obj = &self.scene.objects[i];
        let mut out: Vec<Contact> = Vec::new();
        let Some(body) = self.pw.bodies.get(self.objects[i].body) else {
            return out;
        };
        for &ch in body.colliders() {
            let Some(me) = self.owner(ch) else { continue };
            let my_part = match me {
                Owner::Object { part, .. } => obj.part_name(part).map(str::to_string),
                _ => None,
            };
            for other in self.touching(ch) {
                let with = match self.owner(other) {
                    Some(Owner::Table) => ContactWith::Table,
                    Some(Owner::Object { index, part }) if index != i => {
                        let o = &self.scene.objects[index];
                        ContactWith::Object {
                            name: o.name.clone(),
                            part: o.part_name(part).map(str::to_string),
                        }
                    }
                    Some(Owner::Link { index }) => ContactWith::Robot {
                        link: self.links[index].link.clone(),
                    },
                    _ => continue,
                };
                let c = Contact {
                    part: my_part.clone(),
                    with,
                };
                if !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        out
    }

    /// The colliders whose surfaces touch collider `ch` now (contact pairs with a touching
    /// manifold), from `ch`'s side.
    fn touching(&self, ch: ColliderHandle) -> impl Iterator<Item = ColliderHandle> + '_ {
        self.pw
            .contact_pairs_with(ch)
            .filter(|pair| touching_normal(pair).is_some())
            .map(move |pair| {
                if pair.collider1 == ch {
                    pair.collider2
                } else {
                    pair.collider1
                }
            })
    }

    fn owner(&self, ch: ColliderHandle) -> Option<Owner> {
        Owner::decode(self.pw.colliders.get(ch)?.user_data)
    }

    /// Fixes a camera-only solid to the tool point from now on (drawn with the robot's instance
    /// id, `ROBOT_INSTANCE`). Returns how many tool visuals there are.
    pub fn mount_on_tool(&mut self, visual: ToolVisual) -> usize {
        self.tool_visuals.push(visual);
        self.tool_visuals.len()
    }

    /// What the camera sees now: the table, the objects (with part ids), the robot links and what
    /// is mounted on the tool.
    pub fn render_scene(&self) -> RenderScene {
        let mut primitives = Vec::new();
        let (shape, pose) = self.scene.table.primitive();
        primitives.push(Primitive {
            shape,
            world_from_shape: pose,
            color: self.scene.table.color,
            instance: TABLE_INSTANCE,
            part: NO_PART,
            texture: None,
        });
        for (i, obj) in self.scene.objects.iter().enumerate() {
            let Some(pose) = self
                .pw
                .bodies
                .get(self.objects[i].body)
                .map(|b| from_pose(b.position()))
            else {
                continue;
            };
            let instance =
                FIRST_OBJECT_INSTANCE.saturating_add(u16::try_from(i).unwrap_or(u16::MAX));
            for p in &obj.primitives {
                primitives.push(Primitive {
                    shape: p.shape,
                    world_from_shape: pose * p.object_from_shape,
                    color: p.color,
                    instance,
                    part: p.part,
                    texture: None,
                });
            }
        }
        for (li, shape, local) in &self.visuals {
            let Some(b) = self.pw.bodies.get(self.links[*li].body) else {
                continue;
            };
            primitives.push(Primitive {
                shape: *shape,
                world_from_shape: from_pose(b.position()) * local,
                color: self.robot_color,
                instance: ROBOT_INSTANCE,
                part: NO_PART,
                texture: None,
            });
        }
        if let Some(tcp) = self
            .pw
            .bodies
            .get(self.tcp_body)
            .map(|b| from_pose(b.position()))
        {
            for v in &self.tool_visuals {
                primitives.push(Primitive {
                    shape: v.shape,
                    world_from_shape: tcp * v.tcp_from_shape,
                    color: v.color,
                    instance: ROBOT_INSTANCE,
                    part: NO_PART,
                    texture: v.texture.clone(),
                });
            }
        }
        RenderScene { primitives }
    }
}

/// The world-space normal (from collider 1 to collider 2) of a pair whose surfaces touch, if any
/// contact point is within `TOUCH_DISTANCE_M`.
fn touching_normal(pair: &ContactPair) -> Option<Vector3<f64>> {
    pair.manifolds()
        .iter()
        .find(|m| {
            m.points
                .iter()
                .any(|p| f64::from(p.dist) <= TOUCH_DISTANCE_M)
        })
        .map(|m| from_vec(m.data.normal))
}

fn insert_object(pw: &mut PhysicsWorld, index: usize, obj: &SceneObject) -> ObjectBody {
    let total: f64 = obj.primitives.iter().map(|p| volume(&p.shape)).sum();
    let density = obj.mass / total.max(1e-12);
    let body = pw.insert_body(
        RigidBodyBuilder::dynamic()
            .pose(to_pose(&obj.world_from_object))
            .linear_damping(0.05)
            // Spheres and lying capsules have no rolling resistance in a rigid-body model; damping
            // their spin stands in for it so a released fruit stops within a few centimetres.
            .angular_damping(if obj.rolls { 3.0 } else { 0.3 }),
    );
    for p in &obj.primitives {
        let (shared, fix) = to_shared_shape(&p.shape);
        pw.insert_collider(
            ColliderBuilder::new(shared)
                .position(to_pose(&(p.object_from_shape * fix)))
                .density(density as f32)
                .friction(obj.friction as f32)
                .collision_groups(groups(
                    GROUP_OBJECT,
                    GROUP_TABLE | GROUP_OBJECT | GROUP_ROBOT,
                ))
                .user_data(
                    Owner::Object {
                        index,
                        part: p.part,
                    }
                    .encode(),
                ),
            Some(body),
        );
    }
    ObjectBody {
        body,
        initial: obj.world_from_object,
    }
}
