//! The simulator behind the `Robot` and `Camera` seams: `SimRobot` streams checked trajectories into
//! the physics world as kinematic joint targets; `SimCamera` renders the same world. Both share one
//! world, so the camera sees what the robot did.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use super::physics::SimWorld;
use super::render::{render, PinholeCamera, RenderOptions};
use crate::camera::{Camera, CameraError, Frame, RgbImage, Segmentation};
use crate::geometry::{DepthImage, Intrinsics};
use crate::kinematics::RobotModel;
use crate::robot::{JointState, Robot, RobotError};
use crate::safety::{CheckedGripper, CheckedTrajectory};

/// One world shared by the simulated devices (single-threaded: the executor awaits on one task).
pub type SharedWorld = Rc<RefCell<SimWorld>>;

pub struct SimRobot {
    world: SharedWorld,
    model: Arc<RobotModel>,
    /// Joint positions after the last command.
    q: Vec<f64>,
    /// Every simulation step's state since the last `take_states` (what the arm executed).
    states: Vec<JointState>,
}

impl SimRobot {
    /// Puts the arm at `q` (the world is stepped once so the links are there).
    pub fn new(
        world: SharedWorld,
        model: Arc<RobotModel>,
        q: Vec<f64>,
    ) -> Result<Self, RobotError> {
        {
            let mut w = world.borrow_mut();
            let opening = w.gripper_opening();
            w.set_robot(&q, opening).map_err(sim)?;
            w.step();
        }
        Ok(SimRobot {
            world,
            model,
            q,
            states: Vec::new(),
        })
    }

    /// Records the state after a simulation step.
    fn record(&mut self, w: &SimWorld) {
        let g = &self.model.config.gripper;
        self.states.push(JointState {
            stamp_s: Some(w.time()),
            q: self.q.clone(),
            gripper_width: g.closed_width + w.gripper_opening() * (g.open_width - g.closed_width),
        });
    }
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
        let o = self.world.borrow().gripper_opening();
        Ok(g.closed_width + o * (g.open_width - g.closed_width))
    }

    async fn execute(&mut self, trajectory: &CheckedTrajectory) -> Result<(), RobotError> {
        let traj = trajectory.trajectory();
        let world = self.world.clone();
        let mut w = world.borrow_mut();
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
        let g = &self.model.config.gripper;
        let target =
            ((command.width() - g.closed_width) / (g.open_width - g.closed_width)).clamp(0.0, 1.0);
        let world = self.world.clone();
        let mut w = world.borrow_mut();
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

pub struct SimCamera {
    world: SharedWorld,
    camera: PinholeCamera,
    pub options: RenderOptions,
}

impl SimCamera {
    pub fn new(world: SharedWorld, options: RenderOptions) -> Self {
        let spec = world.borrow().scene().camera.clone();
        let camera = PinholeCamera {
            width: spec.width,
            height: spec.height,
            fx: spec.fx,
            fy: spec.fy,
            cx: spec.cx,
            cy: spec.cy,
            world_from_camera: spec.world_from_camera(),
        };
        SimCamera {
            world,
            camera,
            options,
        }
    }

    pub fn pinhole(&self) -> &PinholeCamera {
        &self.camera
    }
}

impl Camera for SimCamera {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        let w = self.world.borrow();
        let out = render(&w.render_scene(), &self.camera, &self.options);
        let c = &self.camera;
        let (wd, ht) = (c.width as usize, c.height as usize);
        let rgb = RgbImage::from_raw(c.width, c.height, out.rgb)
            .ok_or_else(|| CameraError::Device("renderer returned a short colour buffer".into()))?;
        let frame = Frame {
            rgb,
            depth: DepthImage::new(wd, ht, out.depth_m)?,
            intrinsics: Intrinsics::pinhole(wd, ht, c.fx, c.fy, c.cx, c.cy),
            // The simulation's world frame is the robot base frame.
            base_from_camera: c.world_from_camera,
            segmentation: Some(Segmentation {
                instance: out.instance,
                part: out.part,
            }),
            stamp_s: w.time(),
        };
        frame.validate()?;
        Ok(frame)
    }
}
