//! The simulator behind the `Robot` and `Camera` seams: `SimRobot` streams checked trajectories into
//! the physics world as kinematic joint targets; `SimCamera` renders the same world. Both share one
//! world, so the camera sees what the robot did. `SimArm` is the same world behind the xArm
//! emulator's `EmulatedArm` seam, so a driver speaking the real protocol moves simulated objects.
//!
//! Ground truth stays here: a camera `Frame` carries no labels. `SimCamera` keeps the instance and
//! part labels of the frames it rendered in the shared world, where only simulator code (the
//! oracle pointer, tests) can read them.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use k::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};

use super::physics::SimWorld;
use super::render::{render, PinholeCamera, RenderOptions};
use pointact_core::camera::{Camera, CameraError, Frame, RgbImage};
use pointact_core::geometry::DepthImage;
use pointact_core::kinematics::RobotModel;
use pointact_core::safety::{CheckedGripper, CheckedTrajectory};
use pointact_robot::xarm::emulator::{ArmReading, EmulatedArm};
use pointact_robot::{JointState, Robot, RobotError};

/// Ground-truth labels per pixel of one rendered frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Segmentation {
    /// Instance id per pixel, row-major (see `sim` for the id scheme).
    pub instance: Vec<u16>,
    /// Functional-part id per pixel within its instance (0 = none).
    pub part: Vec<u8>,
    /// Image width, px.
    pub width: usize,
    /// Image height, px.
    pub height: usize,
    /// Where the camera truly was (base frame) when the frame's pose may be wrong (a simulated
    /// calibration error): ground truth projects with this one. None: the frame's own pose.
    pub true_base_from_camera: Option<Isometry3<f64>>,
}

/// The world shared by the simulated devices of one episode. `Send`, so an episode can run on any
/// task of a multi-threaded runtime (a server runs many at once); the lock is never held across
/// an await.
#[derive(Clone)]
pub struct SharedWorld {
    world: Arc<Mutex<SimWorld>>,
    labels: Arc<Mutex<VecDeque<Labelled>>>,
}

/// The labels of a frame rendered, with its simulation time.
type Labelled = (f64, Arc<Segmentation>);

/// Frames whose labels are kept: a task asks about its planning frame again after the frame
/// that checks the result (`executor::verify`), and a retry looks twice more.
const LABELLED_FRAMES: usize = 4;

impl SharedWorld {
    /// Shares `world`, with no labelled frames yet.
    pub fn new(world: SimWorld) -> Self {
        SharedWorld {
            world: Arc::new(Mutex::new(world)),
            labels: Arc::new(Mutex::new(VecDeque::new())),
        }
    }

    /// The world, for stepping or reading. A panic elsewhere while it was held leaves it usable
    /// (the simulation state is plain data).
    pub fn lock(&self) -> MutexGuard<'_, SimWorld> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ground-truth labels of `frame`, if this world's camera rendered it lately (matched by
    /// its simulation time and size; the last [`LABELLED_FRAMES`] are kept).
    pub fn labels_of(&self, frame: &Frame) -> Option<Arc<Segmentation>> {
        let kept = self.labels.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter()
            .rev()
            .find(|(stamp, seg)| {
                *stamp == frame.stamp_s
                    && seg.width == frame.depth.width
                    && seg.height == frame.depth.height
            })
            .map(|(_, seg)| seg.clone())
    }

    fn set_labels(&self, stamp: f64, seg: Segmentation) {
        let mut kept = self.labels.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() == LABELLED_FRAMES {
            kept.pop_front();
        }
        kept.push_back((stamp, Arc::new(seg)));
    }
}

impl std::fmt::Debug for SharedWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWorld").finish_non_exhaustive()
    }
}

/// Sees the world after every simulation step a `SimRobot` command takes, with the arm's state
/// then: how a demonstration recorder keeps every state and scene snapshots while the runner
/// drives the arm as usual.
pub(crate) type StepObserver = Box<dyn FnMut(&SimWorld, &JointState) + Send>;

/// The simulated arm: a [`Robot`] whose commands drive the robot of a [`SharedWorld`] and step
/// the simulation.
pub struct SimRobot {
    world: SharedWorld,
    model: Arc<RobotModel>,
    /// Joint positions after the last command.
    q: Vec<f64>,
    /// Every simulation step's state since the last `take_states` (what the arm executed).
    states: Vec<JointState>,
    observer: Option<StepObserver>,
}

impl SimRobot {
    /// Puts the arm at `q` (the world is stepped once so the links are there).
    pub fn new(
        world: SharedWorld,
        model: Arc<RobotModel>,
        q: Vec<f64>,
    ) -> Result<Self, RobotError> {
        let opening = world.lock().gripper_opening();
        place_arm(&world, &q, opening)?;
        Ok(SimRobot {
            world,
            model,
            q,
            states: Vec::new(),
            observer: None,
        })
    }

    /// Calls `observer` now (the arm as placed) and after every simulation step of every command.
    pub fn with_step_observer(mut self, observer: StepObserver) -> Self {
        self.observer = Some(observer);
        let world = self.world.clone();
        let w = world.lock();
        self.record(&w);
        self.states.clear();
        self
    }

    /// Records the state after a simulation step.
    fn record(&mut self, w: &SimWorld) {
        let g = &self.model.config.gripper;
        let state = JointState {
            stamp_s: Some(w.time()),
            q: self.q.clone(),
            gripper_width: g.closed_width + w.gripper_opening() * (g.open_width - g.closed_width),
        };
        if let Some(o) = self.observer.as_mut() {
            o(w, &state);
        }
        self.states.push(state);
    }
}

/// Puts the arm at `q` with the fingers commanded to `opening`, stepping once so the links are there.
fn place_arm(world: &SharedWorld, q: &[f64], opening: f64) -> Result<(), RobotError> {
    let mut w = world.lock();
    w.set_robot(q, opening).map_err(sim)?;
    w.step();
    Ok(())
}

fn sim(e: impl std::fmt::Display) -> RobotError {
    RobotError::Sim(e.to_string())
}

impl Robot for SimRobot {
    fn model(&self) -> &Arc<RobotModel> {
        &self.model
    }

    async fn joint_positions(&mut self) -> Result<Vec<f64>, RobotError> {
        Ok(self.q.clone())
    }

    async fn gripper_width(&mut self) -> Result<f64, RobotError> {
        let g = &self.model.config.gripper;
        let o = self.world.lock().gripper_opening();
        Ok(g.closed_width + o * (g.open_width - g.closed_width))
    }

    async fn execute(&mut self, trajectory: &CheckedTrajectory) -> Result<(), RobotError> {
        let traj = trajectory.trajectory();
        let world = self.world.clone();
        let mut w = world.lock();
        let (_, opening) = w.robot_command();
        let dt = w.dt();
        let n = (traj.duration() / dt).ceil() as usize;
        for i in 1..=n {
            let q = traj.sample(i as f64 * dt);
            w.set_robot(&q, opening).map_err(sim)?;
            w.step();
            self.q = q;
            self.record(&w);
        }
        Ok(())
    }

    async fn set_gripper(&mut self, command: CheckedGripper) -> Result<(), RobotError> {
        let target = self.model.config.gripper.opening_for_width(command.width());
        let world = self.world.clone();
        let mut w = world.lock();
        w.set_robot(&self.q, target).map_err(sim)?;
        // Wait until the fingers stop (reached the command or closed on an object), at most 2 s.
        let dt = w.dt();
        let mut still = 0.0;
        let mut last = w.gripper_opening();
        let mut t = 0.0;
        while t < 2.0 && still < 0.1 {
            w.step();
            self.record(&w);
            t += dt;
            let o = w.gripper_opening();
            still = if (o - last).abs() < 1e-5 {
                still + dt
            } else {
                0.0
            };
            last = o;
        }
        Ok(())
    }

    async fn stop(&mut self) -> Result<(), RobotError> {
        // Kinematic arm: it holds the last commanded pose by construction.
        Ok(())
    }

    fn take_states(&mut self) -> Vec<JointState> {
        std::mem::take(&mut self.states)
    }
}

/// The simulated arm moved by the xArm emulator's controller (`pointact emulate xarm --sim`): the
/// controller times every motion at its own tick (250 Hz, wall clock) and this arm advances the
/// physics by the same time, in whole physics steps, interpolating the joints across the steps of
/// one tick (kinematic links must move a little per step, or they push objects through each other).
pub struct SimArm {
    world: SharedWorld,
    model: Arc<RobotModel>,
    q: Vec<f64>,
    /// Time owed to the physics: controller time not yet stepped (less than one physics step).
    owed_s: f64,
}

/// The gripper counts as blocked (the xArm gripper's "object detected") when the fingers stand
/// this far (fraction of the range) short of a closing command.
const BLOCKED_OPENING: f64 = 0.02;

impl SimArm {
    /// Puts the arm at `q` with the fingers open (the world is stepped once so the links are there).
    pub fn new(
        world: SharedWorld,
        model: Arc<RobotModel>,
        q: Vec<f64>,
    ) -> Result<Self, RobotError> {
        place_arm(&world, &q, 1.0)?;
        Ok(SimArm {
            world,
            model,
            q,
            owed_s: 0.0,
        })
    }

    fn read(&self, w: &SimWorld) -> ArmReading {
        let (_, command) = w.robot_command();
        let opening = w.gripper_opening();
        ArmReading {
            q: self.q.clone(),
            gripper_opening: opening,
            gripper_blocked: command + BLOCKED_OPENING < opening,
        }
    }
}

impl EmulatedArm for SimArm {
    fn model(&self) -> &Arc<RobotModel> {
        &self.model
    }

    fn reading(&self) -> ArmReading {
        self.read(&self.world.lock())
    }

    fn step(&mut self, dt: f64, q: &[f64], gripper_opening: f64) -> ArmReading {
        let world = self.world.clone();
        let mut w = world.lock();
        // The controller checks its setpoints against the model's limits; anything else (a
        // wrong joint count, a non-finite opening) is held, not passed to the physics.
        let opening = if gripper_opening.is_finite() {
            gripper_opening.clamp(0.0, 1.0)
        } else {
            w.robot_command().1
        };
        let target = if q.len() == self.q.len() && q.iter().all(|v| v.is_finite()) {
            q.to_vec()
        } else {
            self.q.clone()
        };
        self.owed_s += dt.max(0.0);
        let n = (self.owed_s / w.dt()).floor() as usize;
        self.owed_s -= n as f64 * w.dt();
        let from = self.q.clone();
        for i in 1..=n {
            let f = i as f64 / n as f64;
            let qi: Vec<f64> = from
                .iter()
                .zip(&target)
                .map(|(a, b)| a + f * (b - a))
                .collect();
            if w.set_robot(&qi, opening).is_err() {
                break;
            }
            w.step();
            self.q = qi;
        }
        self.read(&w)
    }
}

/// The simulated RGB-D camera: a `Camera` that ray-casts the shared world from the scene's
/// camera and keeps each frame's ground-truth labels in the world.
pub struct SimCamera {
    world: SharedWorld,
    camera: PinholeCamera,
    /// Shading and sensor imperfections applied to each frame.
    pub options: RenderOptions,
    /// A calibration error: frames report `camera pose ∘ error` as their camera pose (see
    /// [`calibration_error`]) while the image is rendered from the true one.
    pose_error: Option<Isometry3<f64>>,
}

/// A rigid error of `mm` millimetres (a random direction) and `deg` degrees (about a random axis
/// through the camera centre), drawn from `seed`: what a hand-eye calibration that is off by that
/// much does to every lifted point. Right-multiplied onto the true camera pose.
pub fn calibration_error(mm: f64, deg: f64, seed: u64) -> Isometry3<f64> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xca11_b7a7_e000_0001);
    let mut unit = || loop {
        let v = Vector3::new(
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
            rng.gen_range(-1.0..1.0),
        );
        let n = v.norm();
        if n > 0.1 && n <= 1.0 {
            break v / n;
        }
    };
    let t = unit() * (mm * 1e-3);
    let axis = unit();
    Isometry3::from_parts(
        Translation3::from(t),
        UnitQuaternion::from_scaled_axis(axis * deg.to_radians()),
    )
}

impl SimCamera {
    /// A camera at the world's scene camera, rendering with `options`.
    pub fn new(world: SharedWorld, options: RenderOptions) -> Self {
        let camera = world.lock().scene().camera.pinhole.clone();
        SimCamera {
            world,
            camera,
            options,
            pose_error: None,
        }
    }

    /// Frames from now on report their camera pose off by `error` (a calibration error; the
    /// rendering and the ground truth keep the true pose).
    pub fn with_pose_error(mut self, error: Isometry3<f64>) -> Self {
        self.pose_error = Some(error);
        self
    }

    /// The true camera model (intrinsics and pose) frames are rendered with.
    pub fn pinhole(&self) -> &PinholeCamera {
        &self.camera
    }

    /// The world this camera renders (where the labels of its frames are kept).
    pub fn world(&self) -> &SharedWorld {
        &self.world
    }
}

impl Camera for SimCamera {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        // Snapshot under the lock, render outside it: an arm stepping the same world from another
        // thread (the xArm emulator's 250 Hz tick) must not wait for a whole render.
        let (scene, stamp_s) = {
            let w = self.world.lock();
            (w.render_scene(), w.time())
        };
        let out = render(&scene, &self.camera, &self.options);
        let c = &self.camera;
        let (wd, ht) = (c.intrinsics.width, c.intrinsics.height);
        let rgb = RgbImage::from_raw(c.width(), c.height(), out.rgb)
            .ok_or_else(|| CameraError::Device("renderer returned a short colour buffer".into()))?;
        let frame = Frame {
            rgb,
            depth: DepthImage::new(wd, ht, out.depth_m)?,
            intrinsics: c.intrinsics.clone(),
            // The simulation's world frame is the robot base frame.
            base_from_camera: match &self.pose_error {
                Some(e) => c.world_from_camera * e,
                None => c.world_from_camera,
            },
            stamp_s,
        };
        frame.validate()?;
        if out.instance.len() != wd * ht || out.part.len() != wd * ht {
            return Err(CameraError::Device(format!(
                "renderer returned {} labels for a {wd}x{ht} image",
                out.instance.len()
            )));
        }
        self.world.set_labels(
            stamp_s,
            Segmentation {
                instance: out.instance,
                part: out.part,
                width: wd,
                height: ht,
                true_base_from_camera: self.pose_error.map(|_| c.world_from_camera),
            },
        );
        Ok(frame)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks;

    /// The oracle's ground truth is found for frames this world's camera rendered, and only for
    /// them: a frame from another moment (or another camera) gets none, and only the latest few
    /// frames keep theirs.
    #[test]
    fn labels_belong_to_the_frame_they_were_rendered_for() {
        let ep = tasks::task(tasks::DEFAULT_TASK)
            .unwrap()
            .instantiate(0)
            .unwrap();
        let world = SharedWorld::new(ep.world(ep.robot_model().unwrap()).unwrap());
        let mut camera = SimCamera::new(world.clone(), RenderOptions::default());
        let frame = camera.capture().unwrap();
        let seg = world
            .labels_of(&frame)
            .expect("labels of the rendered frame");
        assert_eq!(seg.instance.len(), frame.depth.width * frame.depth.height);
        let object = world.lock().instance_of(&ep.object).unwrap();
        assert!(
            seg.instance.contains(&object),
            "the task's object is in view"
        );
        let mut later = frame.clone();
        later.stamp_s += 0.1;
        assert!(world.labels_of(&later).is_none());
        world.lock().step();
        let next = camera.capture().unwrap();
        // An earlier frame keeps its own labels (a task asks about its planning frame again).
        let (old, new) = (world.labels_of(&frame), world.labels_of(&next));
        assert!(
            old.as_ref()
                .zip(new.as_ref())
                .is_some_and(|(a, b)| Arc::ptr_eq(a, &seg) && !Arc::ptr_eq(a, b)),
            "each frame finds the labels rendered with it"
        );
        for _ in 1..LABELLED_FRAMES {
            world.lock().step();
            camera.capture().unwrap();
        }
        assert!(
            world.labels_of(&frame).is_none(),
            "only the last {LABELLED_FRAMES} frames keep their labels"
        );
        assert!(
            world.labels_of(&next).is_some(),
            "the newer frames keep theirs"
        );
    }
}
