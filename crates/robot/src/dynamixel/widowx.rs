//! The Trossen/Interbotix WidowX 250 6-DOF on its Dynamixel bus: a `Robot`.
//!
//! What the driver relies on (Interbotix `wx250s.yaml`, Trossen `servos_wx250s.csv`,
//! `driver.toml`): one servo per arm joint in position control, shoulder and elbow doubled by
//! shadow servos that the robot itself configured to follow their primary (Secondary ID =
//! primary id, Drive Mode reversed). The driver therefore never
//! addresses a shadow with a command (it would fight its primary), but it reads every shadow's
//! position and alert bit, because a shadow that overheats or overloads leaves its joint at half
//! torque without the primary noticing.
//!
//! Angles: `DynamixelPosition` (4096 ticks per turn, 2048 = 0 rad). A `reversed` joint is reversed
//! in the servo (Drive Mode bit 0), so its readings are already in the joint's sense: the driver
//! checks the bit at connect instead of negating in software (which, with the bit set, would
//! reverse the joint twice).
//!
//! Motion: `execute` streams the checked trajectory's samples through the one servo loop
//! (`robot::servo`, which owns timing, hold and watchdog for every driver) at the period the safety
//! gate checked them (robot.toml `servo_rate_hz`). Each tick SYNC_READs every servo's Present
//! Position (the arm must have followed the previous goal) and SYNC_WRITEs the next goals
//! (Profile Acceleration, Profile Velocity and Goal Position are contiguous, 108..120). Any fault
//! (an alert bit, a joint far from its goal, a bus error) stops the arm (goal = present position)
//! before the error is returned.
//!
//! Gripper: PWM mode (Interbotix's default) squeezes with `gripper.pwm` until the fingers reach the
//! commanded width or stall on an object, and keeps squeezing a held object; position mode drives
//! the servo to the angle of the commanded finger position. The finger position follows the
//! horn-and-link geometry of `GripperLinkage`.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::bus::{self, Bus};
use super::proto::{table, Status};
use super::serial::SerialPort;
use super::DynamixelError;
use crate::servo::{self, ServoSink, ServoTiming};
use crate::settings::{DriverSettings, DynamixelBus, DynamixelGripperMode, DynamixelSettings};
use crate::{JointState, Robot, RobotError};
use pointact_core::kinematics::RobotModel;
use pointact_core::safety::{CheckedGripper, CheckedTrajectory};

/// Profile velocity and acceleration are set this much above what a step needs, so a servo that
/// fell behind (its own acceleration ramp, load) can catch up within the next steps instead of
/// lagging further at every one.
pub(crate) const PROFILE_HEADROOM: f64 = 1.25;

/// How far (rad) a joint may be from its goal, beyond the length of the current step, before the
/// motion counts as failed: a refused goal (a SYNC_WRITE is not answered, so a Data Limit error
/// is only visible this way) or a blocked joint.
pub(crate) const TRACKING_TOLERANCE_RAD: f64 = 0.1;

/// How close (rad) every joint must come to the trajectory's end before `execute` returns.
/// About 13 ticks: above a loaded servo's steady-state error, below anything a grasp would notice.
pub(crate) const SETTLE_TOLERANCE_RAD: f64 = 0.02;

/// Finger position (m) within which the gripper counts as at its target.
pub(crate) const GRIPPER_TOLERANCE_M: f64 = 0.0005;

/// A servo that moved at most this many ticks over `STALL_POLLS` polls has stalled.
const STALL_TICKS: i32 = 2;
const STALL_POLLS: u32 = 3;

/// The register a Control Table read of Drive Mode, Operating Mode and Secondary ID spans.
const MODE_BLOCK: table::Item = table::Item {
    address: 10,
    size: 3,
};

/// The gripper's horn-and-link geometry: a horn of radius r on the servo drives each finger
/// carriage through a link of length L, so the carriage sits at x = r·sin θ + √(L² − r²·cos² θ)
/// from the servo axis along its slide, for servo angle θ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GripperLinkage {
    pub horn_radius: f64,
    pub arm_length: f64,
}

impl GripperLinkage {
    /// Finger position (m) at servo angle `angle` (rad).
    pub(crate) fn finger_position(&self, angle: f64) -> f64 {
        let (r, l) = (self.horn_radius, self.arm_length);
        let c = r * angle.cos();
        r * angle.sin() + (l * l - c * c).max(0.0).sqrt()
    }

    /// Servo angle (rad, in −π/2..π/2) that puts the finger at `finger` (m): from
    /// (x − r·sin θ)² = L² − r²·cos² θ, sin θ = (x² + r² − L²) / (2·x·r).
    pub(crate) fn servo_angle(&self, finger: f64) -> f64 {
        let (r, l) = (self.horn_radius, self.arm_length);
        ((finger * finger + r * r - l * l) / (2.0 * finger * r))
            .clamp(-1.0, 1.0)
            .asin()
    }
}

/// How the arm servos read their profile registers (Drive Mode bit 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProfileKind {
    /// Profile Velocity in 0.229 rev/min, Profile Acceleration in 214.577 rev/min².
    Velocity,
    /// Profile Velocity is the move's duration (ms), Profile Acceleration its ramp time (ms).
    Time,
}

/// (Profile Acceleration, Profile Velocity) for one streamed step of `step_rad` in `dt` seconds
/// on a joint allowed `acc_limit` rad/s². Never 0: 0 means "unlimited" to the servo.
pub(crate) fn profile_registers(
    kind: ProfileKind,
    step_rad: f64,
    dt: f64,
    acc_limit: f64,
) -> (u32, u32) {
    match kind {
        ProfileKind::Velocity => {
            let rpm = step_rad.abs() / dt * PROFILE_HEADROOM * 60.0 / std::f64::consts::TAU;
            let rpm2 = acc_limit * PROFILE_HEADROOM * 3600.0 / std::f64::consts::TAU;
            let vel = (rpm / table::VELOCITY_UNIT_RPM).ceil().max(1.0) as u32;
            let acc = (rpm2 / table::ACCELERATION_UNIT_RPM2).ceil().max(1.0) as u32;
            (acc, vel)
        }
        ProfileKind::Time => {
            // Reach each goal within the step, with a quarter of it to ramp up and down.
            let ms = (dt * 1000.0).round().max(1.0) as u32;
            ((ms / 4).max(1), ms)
        }
    }
}

/// Opens the bus's serial port (raw 8N1, no flow control) for tokio.
pub(crate) fn open_port(bus: &DynamixelBus) -> Result<SerialPort, DynamixelError> {
    SerialPort::open(std::path::Path::new(&bus.serial_port), bus.baud).map_err(|e| {
        DynamixelError::Open {
            port: bus.serial_port.clone(),
            detail: e.to_string(),
        }
    })
}

/// The WidowX 250 driver. `P` is the port: a serial port on the robot, a pty in tests.
pub struct WidowX<P = SerialPort> {
    bus: Bus<P>,
    settings: DynamixelSettings,
    model: Arc<RobotModel>,
    linkage: GripperLinkage,
    profile: ProfileKind,
    /// Every servo on the bus in `settings.servo_ids()` order: joints, their shadows, gripper.
    ids: Vec<u8>,
    /// The last goal sent to each arm primary (joint order): where a stop leaves the goals when
    /// the bus no longer answers reads (finishing the step under way, never reversing it).
    last_goals: Vec<i32>,
    clock: Instant,
    states: Vec<JointState>,
    /// Rate of the trajectory being streamed (its checked period's inverse); robot.toml's
    /// `servo_rate_hz` outside `execute`.
    servo_rate: f64,
}

impl WidowX<SerialPort> {
    /// Opens `settings.bus.serial_port` and prepares the arm (see `start`).
    pub async fn connect(
        settings: &DynamixelSettings,
        model: Arc<RobotModel>,
    ) -> Result<Self, RobotError> {
        let port = open_port(&settings.bus)?;
        Self::start(port, settings, model).await
    }
}

impl<P: AsyncRead + AsyncWrite + Unpin> WidowX<P> {
    /// Checks every servo (present, no hardware error, configured as `settings` says), then
    /// turns torque on holding the present position, so the arm does not move at connect.
    pub(crate) async fn start(
        port: P,
        settings: &DynamixelSettings,
        model: Arc<RobotModel>,
    ) -> Result<Self, RobotError> {
        DriverSettings::Dynamixel(settings.clone())
            .check_model(&model.config)
            .map_err(|e| DynamixelError::Command(e.to_string()))?;
        let ids = settings.servo_ids();
        let servo_rate = model.config.servo_rate_hz;
        let mut w = WidowX {
            bus: Bus::new(port, settings.bus.timeout()),
            linkage: GripperLinkage {
                horn_radius: settings.gripper.horn_radius,
                arm_length: settings.gripper.arm_length,
            },
            settings: settings.clone(),
            model,
            profile: ProfileKind::Velocity,
            last_goals: Vec::new(),
            ids,
            clock: Instant::now(),
            states: Vec::new(),
            servo_rate,
        };
        w.setup().await?;
        Ok(w)
    }

    /// The joint a servo belongs to, and whether it is that joint's shadow.
    fn servo_role(&self, id: u8) -> (String, bool) {
        for j in &self.settings.joints {
            if j.id == id {
                return (j.name.clone(), false);
            }
            if j.shadow_id == Some(id) {
                return (j.name.clone(), true);
            }
        }
        ("gripper".to_string(), false)
    }

    fn setup_error(&self, id: u8, detail: String) -> DynamixelError {
        DynamixelError::Setup {
            joint: self.servo_role(id).0,
            id,
            detail,
        }
    }

    async fn setup(&mut self) -> Result<(), DynamixelError> {
        let ids = self.ids.clone();
        for &id in &ids {
            if let Err(e) = self.bus.ping(id).await {
                return Err(self.setup_error(id, format!("no answer to PING: {e}")));
            }
        }
        let hw = self
            .bus
            .sync_read(table::HARDWARE_ERROR_STATUS, &ids)
            .await?;
        if let Some(s) = hw.iter().find(|s| s.alert() || s.data[0] != 0) {
            return Err(self.hardware(s.id, s.data[0]));
        }

        let modes = self.bus.sync_read(MODE_BLOCK, &ids).await?;
        let torque = self.bus.sync_read(table::TORQUE_ENABLE, &ids).await?;
        let mode_of = |id: u8| {
            let i = ids.iter().position(|x| *x == id).unwrap_or(0);
            (
                modes[i].data[0],
                modes[i].data[1],
                modes[i].data[2],
                torque[i].data[0] != 0,
            )
        };
        let mut time_based: Option<bool> = None;
        let joints = self.settings.joints.clone();
        for j in &joints {
            let (drive, op, _, torque_on) = mode_of(j.id);
            let reverse = drive & table::DRIVE_MODE_REVERSE != 0;
            if reverse != j.reversed {
                return Err(self.setup_error(
                    j.id,
                    format!(
                        "Drive Mode reverse bit is {} but driver.toml says reversed = {}",
                        reverse as u8, j.reversed
                    ),
                ));
            }
            let mut servos = vec![(j.id, drive)];
            if let Some(s) = j.shadow_id {
                let (s_drive, _, secondary, _) = mode_of(s);
                if secondary != j.id {
                    return Err(self.setup_error(
                        s,
                        format!(
                            "shadow servo's Secondary ID is {secondary}, not its primary {}: it \
                             would not follow the joint's commands",
                            j.id
                        ),
                    ));
                }
                if (s_drive & table::DRIVE_MODE_REVERSE != 0) == reverse {
                    return Err(self.setup_error(
                        s,
                        "shadow servo turns the same way as its primary (Drive Mode bit 0): \
                         mounted mirrored, it must run reversed"
                            .to_string(),
                    ));
                }
                servos.push((s, s_drive));
            }
            for (id, d) in servos {
                let t = d & table::DRIVE_MODE_TIME_BASED != 0;
                match time_based {
                    Some(prev) if prev != t => {
                        return Err(self.setup_error(
                            id,
                            "arm servos disagree on the profile (Drive Mode bit 2, velocity- or \
                             time-based)"
                                .to_string(),
                        ))
                    }
                    _ => time_based = Some(t),
                }
            }
            let position_modes = [
                table::MODE_POSITION,
                table::MODE_EXTENDED_POSITION,
                table::MODE_CURRENT_BASED_POSITION,
            ];
            if !position_modes.contains(&op) {
                if torque_on {
                    return Err(self.setup_error(
                        j.id,
                        format!(
                            "Operating Mode is {op}, not position control, and torque is on: \
                             changing it needs torque off, which would drop the arm; power the \
                             arm down to a rest pose and reconnect"
                        ),
                    ));
                }
                for id in std::iter::once(j.id).chain(j.shadow_id) {
                    self.bus
                        .write(id, table::OPERATING_MODE, &[table::MODE_POSITION])
                        .await?;
                }
            }
        }
        self.profile = if time_based == Some(true) {
            ProfileKind::Time
        } else {
            ProfileKind::Velocity
        };

        // The gripper can be switched freely: with torque off it only goes limp.
        let g = self.settings.gripper.clone();
        let want = match g.mode {
            DynamixelGripperMode::Pwm => table::MODE_PWM,
            DynamixelGripperMode::Position => table::MODE_POSITION,
        };
        let (_, op, _, torque_on) = mode_of(g.id);
        if op != want {
            if torque_on {
                self.bus.write(g.id, table::TORQUE_ENABLE, &[0]).await?;
            }
            self.bus.write(g.id, table::OPERATING_MODE, &[want]).await?;
        }

        // Hold where the arm is: goal = present position, with the hold profile, then torque
        // on. A shadow takes both from its primary.
        let ticks = self.read_servos().await?;
        let goals: Vec<i32> = self
            .settings
            .joints
            .iter()
            .map(|j| self.tick_of(&ticks, j.id))
            .collect();
        let entries = self.hold_entries(&goals);
        self.bus
            .sync_write(table::PROFILE_ACCELERATION.address, 12, &entries)
            .await?;
        match g.mode {
            DynamixelGripperMode::Pwm => {
                self.bus
                    .write(g.id, table::GOAL_PWM, &0i16.to_le_bytes())
                    .await?;
            }
            DynamixelGripperMode::Position => {
                let t = self.tick_of(&ticks, g.id);
                self.bus
                    .write(g.id, table::GOAL_POSITION, &t.to_le_bytes())
                    .await?;
            }
        }
        let primaries: Vec<u8> = self
            .settings
            .joints
            .iter()
            .map(|j| j.id)
            .chain([g.id])
            .collect();
        for id in primaries {
            self.bus.write(id, table::TORQUE_ENABLE, &[1]).await?;
        }
        let torque = self.bus.sync_read(table::TORQUE_ENABLE, &ids).await?;
        if let Some(s) = torque.iter().find(|s| s.data[0] != 1) {
            return Err(self.setup_error(
                s.id,
                "torque did not come on (a shadow follows its primary only if its Secondary ID \
                 is the primary's id)"
                    .to_string(),
            ));
        }
        Ok(())
    }

    fn tick_of(&self, ticks: &[i32], id: u8) -> i32 {
        self.ids
            .iter()
            .position(|x| *x == id)
            .map(|i| ticks[i])
            .unwrap_or(self.settings.position.center_ticks as i32)
    }

    /// Reads every servo's Present Position (`ids` order); an alert bit on any of them becomes
    /// a hardware error naming its joint.
    async fn read_servos(&mut self) -> Result<Vec<i32>, DynamixelError> {
        let ids = self.ids.clone();
        let statuses = self.bus.sync_read(table::PRESENT_POSITION, &ids).await?;
        self.check_alerts(&statuses).await?;
        let ticks: Vec<i32> = statuses.iter().map(|s| bus::signed(&s.data)).collect();
        Ok(ticks)
    }

    /// The first servo whose status carries the alert bit, as a hardware error with its cause.
    async fn check_alerts(&mut self, statuses: &[Status]) -> Result<(), DynamixelError> {
        let Some(s) = statuses.iter().find(|s| s.alert()) else {
            return Ok(());
        };
        let status = self
            .bus
            .read(s.id, table::HARDWARE_ERROR_STATUS)
            .await?
            .data[0];
        Err(self.hardware(s.id, status))
    }

    fn hardware(&self, id: u8, status: u8) -> DynamixelError {
        let (joint, shadow) = self.servo_role(id);
        DynamixelError::Hardware {
            joint,
            id,
            shadow,
            status,
        }
    }

    fn arm_q(&self, ticks: &[i32]) -> Vec<f64> {
        self.settings
            .joints
            .iter()
            .map(|j| self.settings.position.radians(self.tick_of(ticks, j.id)))
            .collect()
    }

    fn finger_position(&self, ticks: i32) -> f64 {
        self.linkage
            .finger_position(self.settings.position.radians(ticks))
    }

    fn width_of(&self, ticks: &[i32]) -> f64 {
        let x = self.finger_position(self.tick_of(ticks, self.settings.gripper.id));
        self.model.config.gripper.width_for_units(x)
    }

    fn record(&mut self, ticks: &[i32]) {
        let state = JointState {
            stamp_s: Some(self.clock.elapsed().as_secs_f64()),
            q: self.arm_q(ticks),
            gripper_width: self.width_of(ticks),
        };
        self.states.push(state);
    }

    fn servo_period(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.model.config.servo_rate_hz)
    }

    /// Refuses a trajectory that does not fit the arm before anything is sent.
    fn check_shape(&self, trajectory: &CheckedTrajectory) -> Result<(), DynamixelError> {
        let n = self.settings.joints.len();
        let bad =
            trajectory.trajectory().start().len() != n || trajectory.trajectory().end().len() != n;
        if bad {
            return Err(DynamixelError::Command(format!(
                "trajectory has {} joint values per sample; the WidowX has {n} arm joints",
                trajectory.trajectory().start().len()
            )));
        }
        Ok(())
    }

    /// One streamed step: checks that the arm followed the previous goal (`followed`), then sends
    /// `q` with the profile that reaches it within one period.
    async fn step(
        &mut self,
        q: &[f64],
        followed: &mut Option<Followed>,
    ) -> Result<(), DynamixelError> {
        if q.len() != self.settings.joints.len() {
            return Err(DynamixelError::Command(format!(
                "setpoint has {} joint values; the WidowX has {} arm joints",
                q.len(),
                self.settings.joints.len()
            )));
        }
        let ticks = self.read_servos().await?;
        self.record(&ticks);
        let present = self.arm_q(&ticks);
        if let Some(f) = followed.as_ref() {
            for (j, joint) in self.settings.joints.iter().enumerate() {
                let allowed = f.step[j] + TRACKING_TOLERANCE_RAD;
                let error = (present[j] - f.goal[j]).abs();
                if error > allowed {
                    return Err(DynamixelError::Tracking {
                        joint: joint.name.clone(),
                        id: joint.id,
                        error_rad: error,
                        allowed_rad: allowed,
                    });
                }
            }
        }
        let from = followed.as_ref().map_or(&present, |f| &f.goal);
        let dt = 1.0 / self.servo_rate;
        let step: Vec<f64> = q.iter().zip(from).map(|(a, b)| (a - b).abs()).collect();
        let acc_limits = &self.model.config.limits.joint_acceleration;
        let mut entries = Vec::with_capacity(q.len());
        for (j, joint) in self.settings.joints.iter().enumerate() {
            let (acc, vel) = profile_registers(self.profile, step[j], dt, acc_limits[j]);
            let goal = self.settings.position.ticks(q[j]);
            entries.push((joint.id, registers(acc, vel, goal)));
        }
        self.bus
            .sync_write(table::PROFILE_ACCELERATION.address, 12, &entries)
            .await?;
        self.last_goals = entries
            .iter()
            .map(|(_, d)| i32::from_le_bytes([d[8], d[9], d[10], d[11]]))
            .collect();
        *followed = Some(Followed {
            goal: q.to_vec(),
            step,
        });
        Ok(())
    }

    /// Waits for the servos to finish the last step (within `SETTLE_TOLERANCE_RAD` of `end`).
    async fn settle(&mut self, end: &[f64]) -> Result<(), DynamixelError> {
        let dt = 1.0 / self.servo_rate;
        let settle = Duration::from_secs_f64((10.0 * dt).max(0.5));
        let deadline = Instant::now() + settle;
        loop {
            let ticks = self.read_servos().await?;
            self.record(&ticks);
            let present = self.arm_q(&ticks);
            let mut worst: Option<(usize, f64)> = None;
            for (j, (p, q)) in present.iter().zip(end).enumerate() {
                let e = (p - q).abs();
                if worst.is_none_or(|(_, w)| e > w) {
                    worst = Some((j, e));
                }
            }
            match worst {
                Some((j, e)) if e > SETTLE_TOLERANCE_RAD => {
                    if Instant::now() >= deadline {
                        let joint = &self.settings.joints[j];
                        return Err(DynamixelError::Tracking {
                            joint: joint.name.clone(),
                            id: joint.id,
                            error_rad: e,
                            allowed_rad: SETTLE_TOLERANCE_RAD,
                        });
                    }
                }
                _ => return Ok(()),
            }
            tokio::time::sleep(self.servo_period()).await;
        }
    }

    /// Goal = present position on every arm primary (and the gripper in position mode), with the
    /// hold profile. When the bus no longer answers reads, the last goals are sent again with that
    /// profile: a stop that still reaches the servos is better than none.
    async fn hold(&mut self) -> Result<(), DynamixelError> {
        match self.hold_sent().await? {
            None => Ok(()),
            Some(unread) => Err(unread),
        }
    }

    /// `hold`, telling apart a stop that went out unconfirmed: `Ok(Some(e))` when the positions
    /// could not be read (`e`) and the last goals were sent again instead.
    async fn hold_sent(&mut self) -> Result<Option<DynamixelError>, DynamixelError> {
        let read = self.read_servos_unchecked().await;
        let goals: Vec<i32> = match &read {
            Ok(ticks) => self
                .settings
                .joints
                .iter()
                .map(|j| self.tick_of(ticks, j.id))
                .collect(),
            Err(_) => self.last_goals.clone(),
        };
        let entries = self.hold_entries(&goals);
        self.bus
            .sync_write(table::PROFILE_ACCELERATION.address, 12, &entries)
            .await?;
        if self.settings.gripper.mode == DynamixelGripperMode::Position {
            if let Ok(ticks) = &read {
                let g = self.settings.gripper.id;
                let goal = self.tick_of(ticks, g);
                self.bus
                    .sync_write(
                        table::GOAL_POSITION.address,
                        4,
                        &[(g, goal.to_le_bytes().to_vec())],
                    )
                    .await?;
            }
        }
        Ok(read.err())
    }

    /// Goal `goals[j]` for each arm primary with the hold profile: robot.toml's joint velocity and
    /// acceleration limits, so a stop (or the first goal at connect) is neither a jump nor the
    /// crawl a slow streamed step's profile would leave behind. Records the goals.
    fn hold_entries(&mut self, goals: &[i32]) -> Vec<(u8, Vec<u8>)> {
        let limits = &self.model.config.limits;
        let entries = self
            .settings
            .joints
            .iter()
            .enumerate()
            .map(|(j, joint)| {
                let (acc, vel) = match self.profile {
                    ProfileKind::Velocity => profile_registers(
                        ProfileKind::Velocity,
                        limits.joint_velocity[j] / PROFILE_HEADROOM,
                        1.0,
                        limits.joint_acceleration[j],
                    ),
                    // Half a second to the goal, a quarter of it to ramp.
                    ProfileKind::Time => (125, 500),
                };
                (joint.id, registers(acc, vel, goals[j]))
            })
            .collect();
        self.last_goals = goals.to_vec();
        entries
    }

    /// Present positions without the alert check (a stop after a hardware error must not fail on
    /// the same alert).
    async fn read_servos_unchecked(&mut self) -> Result<Vec<i32>, DynamixelError> {
        let ids = self.ids.clone();
        let statuses = self.bus.sync_read(table::PRESENT_POSITION, &ids).await?;
        let ticks: Vec<i32> = statuses.iter().map(|s| bus::signed(&s.data)).collect();
        Ok(ticks)
    }

    /// Stops after a fault; a failure to stop is logged, the fault is what the caller sees.
    async fn stop_after(&mut self, fault: DynamixelError) -> RobotError {
        if let Err(e) = self.hold().await {
            tracing::warn!("WidowX: stopping after `{fault}` failed too: {e}");
        }
        fault.into()
    }

    async fn gripper_ticks(&mut self) -> Result<i32, DynamixelError> {
        let id = self.settings.gripper.id;
        let s = self.bus.read(id, table::PRESENT_POSITION).await?;
        if s.alert() {
            self.check_alerts(std::slice::from_ref(&s)).await?;
        }
        Ok(bus::signed(&s.data))
    }

    async fn move_gripper(&mut self, width: f64) -> Result<(), DynamixelError> {
        let g = self.settings.gripper.clone();
        let cfg = self.model.config.gripper;
        let target = cfg.units_for_width(width);
        let timeout = g.motion_timeout();
        let deadline = Instant::now() + timeout;
        let period = self.servo_period();
        let start_ticks = self.gripper_ticks().await?;
        let mut x = self.finger_position(start_ticks);
        if (x - target).abs() <= GRIPPER_TOLERANCE_M {
            return Ok(());
        }
        let closing = target < x;
        match g.mode {
            DynamixelGripperMode::Position => {
                let goal = self
                    .settings
                    .position
                    .ticks(self.linkage.servo_angle(target));
                self.bus
                    .write(g.id, table::GOAL_POSITION, &goal.to_le_bytes())
                    .await?;
            }
            DynamixelGripperMode::Pwm => {
                let pwm = if closing {
                    -(g.pwm as i16)
                } else {
                    g.pwm as i16
                };
                self.bus
                    .write(g.id, table::GOAL_PWM, &pwm.to_le_bytes())
                    .await?;
            }
        }
        let mut last = self.gripper_ticks().await?;
        let mut still = 0;
        loop {
            tokio::time::sleep(period).await;
            let ticks = self.gripper_ticks().await?;
            x = self.finger_position(ticks);
            let arrived = if closing {
                x <= target + GRIPPER_TOLERANCE_M
            } else {
                x >= target - GRIPPER_TOLERANCE_M
            };
            still = if (ticks - last).abs() <= STALL_TICKS {
                still + 1
            } else {
                0
            };
            last = ticks;
            let stalled = still >= STALL_POLLS;
            if arrived || stalled {
                // In PWM mode: stop pushing once there, or when blocked while opening; a stall
                // while closing is an object in the fingers, which must stay squeezed.
                if g.mode == DynamixelGripperMode::Pwm && (arrived || !closing) {
                    self.bus
                        .write(g.id, table::GOAL_PWM, &0i16.to_le_bytes())
                        .await?;
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                if g.mode == DynamixelGripperMode::Pwm {
                    self.bus
                        .write(g.id, table::GOAL_PWM, &0i16.to_le_bytes())
                        .await?;
                }
                return Err(DynamixelError::Timeout {
                    id: g.id,
                    timeout_s: timeout.as_secs_f64(),
                });
            }
        }
    }
}

/// The goal of the last streamed step and how far it was from the one before (rad per joint):
/// the arm must be within `step + TRACKING_TOLERANCE_RAD` of it one period later.
struct Followed {
    goal: Vec<f64>,
    step: Vec<f64>,
}

/// The WidowX as the servo loop's sink: each setpoint is one `WidowX::step`.
struct Stepper<'a, P> {
    arm: &'a mut WidowX<P>,
    followed: Option<Followed>,
}

impl<P: AsyncRead + AsyncWrite + Unpin> ServoSink for Stepper<'_, P> {
    async fn send(&mut self, q: &[f64]) -> Result<(), RobotError> {
        Ok(self.arm.step(q, &mut self.followed).await?)
    }

    /// A stop that went out without its read-back still stopped the arm (the goals were sent
    /// again, and a SYNC_WRITE needs no answer): the fault that caused it is the error to report.
    async fn stop(&mut self) -> Result<(), RobotError> {
        if let Some(unread) = self.arm.hold_sent().await? {
            tracing::warn!("WidowX: stopped on the last goals; positions unread: {unread}");
        }
        Ok(())
    }
}

/// Profile Acceleration, Profile Velocity and Goal Position as one 12-byte block (108..120).
fn registers(acc: u32, vel: u32, goal: i32) -> Vec<u8> {
    let mut data = Vec::with_capacity(12);
    data.extend_from_slice(&acc.to_le_bytes());
    data.extend_from_slice(&vel.to_le_bytes());
    data.extend_from_slice(&goal.to_le_bytes());
    data
}

impl<P: AsyncRead + AsyncWrite + Unpin> Robot for WidowX<P> {
    fn model(&self) -> &Arc<RobotModel> {
        &self.model
    }

    async fn joint_positions(&mut self) -> Result<Vec<f64>, RobotError> {
        let ticks = self.read_servos().await?;
        Ok(self.arm_q(&ticks))
    }

    async fn gripper_width(&mut self) -> Result<f64, RobotError> {
        let ticks = self.gripper_ticks().await?;
        Ok(self
            .model
            .config
            .gripper
            .width_for_units(self.finger_position(ticks)))
    }

    /// Streams the samples through the one servo loop (`robot::servo`: timing, hold, watchdog,
    /// stop on any fault), one `step` per tick, then waits for the arm to settle on the end.
    async fn execute(&mut self, trajectory: &CheckedTrajectory) -> Result<(), RobotError> {
        self.check_shape(trajectory)?;
        let rate = 1.0 / trajectory.dt();
        self.servo_rate = rate;
        let watchdog = ServoTiming::at(rate).stop_after_s;
        let mut sink = Stepper {
            arm: self,
            followed: None,
        };
        servo::follow(&mut sink, trajectory, watchdog).await?;
        match self.settle(trajectory.trajectory().end()).await {
            Ok(()) => Ok(()),
            Err(fault) => Err(self.stop_after(fault).await),
        }
    }

    async fn set_gripper(&mut self, command: CheckedGripper) -> Result<(), RobotError> {
        match self.move_gripper(command.width()).await {
            Ok(()) => Ok(()),
            Err(fault) => Err(self.stop_after(fault).await),
        }
    }

    async fn stop(&mut self) -> Result<(), RobotError> {
        Ok(self.hold().await?)
    }

    fn take_states(&mut self) -> Vec<JointState> {
        std::mem::take(&mut self.states)
    }
}
