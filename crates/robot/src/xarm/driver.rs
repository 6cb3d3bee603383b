//! `XarmRobot`: the `Robot` trait on the xArm controller client.
//!
//! Checked trajectories are streamed in servo mode (1) through the one servo loop
//! (`servo::follow`, with `XarmClient` as its `ServoSink`) at the period the safety gate checked
//! them at; the controller plans nothing of ours. Before leaving servo mode the driver lets the
//! arm reach the last setpoint (switching modes stops the arm where it is), then checks that the
//! controller reported no error and that the joints ended at the trajectory's end.

use std::sync::Arc;
use std::time::Duration;

use super::client::XarmClient;
use super::proto::Mode;
use crate::servo::{self, ServoStats, ServoTiming};
use crate::settings::{DriverSettings, XarmSettings};
use crate::{JointState, Robot, RobotError};
use pointact_core::kinematics::RobotModel;
use pointact_core::safety::{CheckedGripper, CheckedTrajectory};

/// How far (rad, any joint) the arm may end from a trajectory's end. The controller tracks
/// servo targets to a small fraction of this; more means the arm did not follow (a stop, a
/// collision, a target it refused).
pub(crate) const END_TOLERANCE_RAD: f64 = 0.01;

/// An xArm 6 (or any xArm the model describes) behind its controller.
pub struct XarmRobot {
    client: XarmClient,
    model: Arc<RobotModel>,
    last_servo: Option<ServoStats>,
}

impl XarmRobot {
    /// Connects and brings the arm up as the SDK examples do (xArm-Python-SDK
    /// `example/wrapper/common/`): TCP offset and payload from the model and the settings,
    /// clean_error, motion_enable(8, 1), set_mode(0), set_state(0). Refuses settings that do not
    /// fit the model, and a controller whose axis count differs from the model's arm joints.
    pub async fn connect(
        model: Arc<RobotModel>,
        settings: &XarmSettings,
    ) -> Result<XarmRobot, RobotError> {
        DriverSettings::Xarm(settings.clone())
            .check_model(&model.config)
            .map_err(|e| RobotError::Config(e.to_string()))?;
        let client = XarmClient::connect(settings, &model.config.gripper).await?;
        let joints = model.config.arm_joints.len();
        if client.dof() != joints {
            return Err(RobotError::Config(format!(
                "the controller drives {} axes (version `{}`), robot `{}` has {joints} arm joints",
                client.dof(),
                client.version_text(),
                model.name()
            )));
        }
        let mut robot = XarmRobot {
            client,
            model,
            last_servo: None,
        };
        robot.startup().await?;
        Ok(robot)
    }

    /// TCP offset, payload, then clean_error → motion_enable → set_mode(0) → set_state(0); also
    /// the way back after a controller error.
    pub async fn startup(&mut self) -> Result<(), RobotError> {
        let payload = self.client.settings().payload.clone();
        let flange_from_tcp = self.model.tip_from_flange();
        let c = &mut self.client;
        c.set_tcp_offset(&flange_from_tcp).await?;
        c.set_load(payload.mass_kg, payload.center_of_mass).await?;
        c.clean_error().await?;
        c.motion_enable(true).await?;
        c.set_mode(Mode::Position).await?;
        c.start().await
    }

    /// The controller client, for what the `Robot` trait does not cover (planned moves, poses).
    pub fn client(&mut self) -> &mut XarmClient {
        &mut self.client
    }

    /// Timing of the last streamed trajectory (achieved periods, for `bench servo`).
    pub fn last_servo_stats(&self) -> Option<&ServoStats> {
        self.last_servo.as_ref()
    }

    async fn stream(&mut self, trajectory: &CheckedTrajectory) -> Result<(), RobotError> {
        let c = &mut self.client;
        c.set_mode(Mode::Servo).await?;
        c.start().await?;
        let watchdog = ServoTiming::at(1.0 / trajectory.dt()).stop_after_s;
        // A setpoint unanswered for the watchdog's period stops the arm like a stalled feed.
        c.servo_reply_timeout = Some(Duration::from_secs_f64(watchdog));
        let stats = servo::follow(c, trajectory, watchdog).await;
        c.servo_reply_timeout = None;
        let stats = stats.map_err(|e| c.lost_link(e))?;
        self.last_servo = Some(stats);
        let end = trajectory.trajectory().end().to_vec();
        let settle = c.settings().network.command_timeout();
        if let Err(e) = c.settle(&end, END_TOLERANCE_RAD, settle).await {
            return Err(c.stop_then(e).await);
        }
        if let Some(e) = c.fault().await? {
            return Err(c.stop_then(e).await);
        }
        c.set_mode(Mode::Position).await?;
        c.start().await?;
        let q = c.joint_positions().await?;
        let off = q
            .iter()
            .zip(&end)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        if off > END_TOLERANCE_RAD {
            return Err(RobotError::Stopped(format!(
                "the arm ended {off:.4} rad from the trajectory's end (tolerance \
                 {END_TOLERANCE_RAD} rad): joints {q:.4?}, end {end:.4?}"
            )));
        }
        Ok(())
    }
}

impl Robot for XarmRobot {
    fn model(&self) -> &Arc<RobotModel> {
        &self.model
    }

    async fn joint_positions(&mut self) -> Result<Vec<f64>, RobotError> {
        self.client.check_links()?;
        self.client.joint_positions().await
    }

    async fn gripper_width(&mut self) -> Result<f64, RobotError> {
        self.client.check_links()?;
        self.client.gripper_check_bus().await?;
        let p = self.client.gripper_position().await?;
        Ok(self.client.width_for_pulses(p))
    }

    async fn execute(&mut self, trajectory: &CheckedTrajectory) -> Result<(), RobotError> {
        self.client.check_links()?;
        self.client.start_recording();
        let r = self.stream(trajectory).await;
        self.client.stop_recording();
        r
    }

    async fn set_gripper(&mut self, command: CheckedGripper) -> Result<(), RobotError> {
        self.client.check_links()?;
        if !self.client.gripper_is_enabled() {
            self.client.gripper_enable().await?;
        }
        let pulses = self.client.pulses_for_width(command.width());
        self.client.start_recording();
        let r = self.client.gripper_move(pulses, true).await;
        self.client.stop_recording();
        r.map(|_| ())
    }

    async fn stop(&mut self) -> Result<(), RobotError> {
        self.client.stop().await
    }

    fn take_states(&mut self) -> Vec<JointState> {
        self.client.take_states()
    }
}
