//! A Dynamixel bus emulator on a pseudo-terminal: the servos of a `driver.toml` answering Protocol
//! 2.0 the way X-series servos do, so the driver (or any Dynamixel tool) can be run without a
//! robot. `pointact emulate widowx` runs one and prints the pty's path.
//!
//! Why a pty: the driver opens a serial device path, so the emulator must be one; a pty is that,
//! with the same termios calls, and needs no hardware or privileges.
//!
//! What it models, per servo: a control table (the X-series items in `proto::table`), PING, READ,
//! WRITE, SYNC_READ, SYNC_WRITE and REBOOT with the servo's error numbers (access, data length,
//! data range, data limit for goals outside Min/Max Position Limit, which come from the model's
//! joint limits), EEPROM items locked while torque is on; positions that move toward the goal at
//! the profile velocity (velocity-based profiles only; acceleration is not modelled: a servo
//! reaches its profile velocity at once) or, in PWM mode, at a speed proportional to Goal PWM up to
//! the travel limits (and an optional object between the fingers, where the gripper stalls).
//! Shadow servos carry their primary's id as Secondary ID, obey every write addressed to it
//! without answering, and, being bolted to the same joint, always sit where their primary is.
//!
//! Faults to test drivers against (`Emulator` methods): a hardware error on one servo (alert bit
//! in every status, Hardware Error Status set, torque off as Shutdown says), a bus that stops
//! answering, replies with a broken CRC, replies cut short.
//!
//! Not modelled: timing of the real bus (answers are immediate), Return Delay Time, BULK_*,
//! REG_WRITE/ACTION, time-based profiles (such a servo moves at its Velocity Limit), current and
//! velocity control modes (they hold still), gravity.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::proto::{self, table, Decoder, Packet, Request, Status, StatusError};
use super::widowx::GripperLinkage;
use crate::settings::{DynamixelGripperMode, DynamixelSettings};
use pointact_core::kinematics::RobotModel;

/// Bytes of control table kept per servo (up to Present Temperature, 146).
const TABLE_SIZE: usize = 147;
/// Model numbers reported to PING: XM430-W350 for every arm servo (the real wrist_rotate is an
/// XL430-W250; the driver does not look), XL430-W250 for the gripper.
const MODEL_XM430_W350: u16 = 1020;
const MODEL_XL430_W250: u16 = 1060;
const FIRMWARE: u8 = 46;
/// Velocity Limit of the WidowX motors: 131 × 0.229 rev/min = π rad/s (Interbotix
/// `interbotix_xsarm_control/config/wx250s.yaml`; unit from the ROBOTIS e-Manual).
const VELOCITY_LIMIT: u32 = 131;
/// Shutdown bits set at the factory: overheating, electrical shock, overload.
const SHUTDOWN_DEFAULT: u8 = 0x34;
/// Present Current reported while a servo pushes against a stop (mA units of 2.69 mA: ~0.5 A).
const STALL_CURRENT: i16 = 200;

/// How a faulty bus answers; set with `Emulator::set_fault`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// A healthy bus: every request is answered correctly.
    #[default]
    None,
    /// Requests are received and acted on, but nothing is answered (a cable pulled after the
    /// last request, a servo power supply that died).
    Silent,
    /// Every status packet's CRC is wrong.
    CorruptCrc,
    /// The answer to each request stops halfway through its last status packet (the line
    /// dropped mid-reply).
    Truncate,
}

/// Why the emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// Opening the pseudo-terminal the emulated bus runs on failed.
    #[error("cannot create a pseudo-terminal: {0}")]
    Pty(#[source] std::io::Error),
    /// The starting joint positions do not fit the settings: a wrong number of values, or a value
    /// outside its joint's limits.
    #[error("joint positions: {0}")]
    Pose(String),
}

/// Which writable items exist and where they live.
struct Writable {
    item: table::Item,
    eeprom: bool,
}

const WRITABLE: &[Writable] = &[
    Writable {
        item: table::ID,
        eeprom: true,
    },
    Writable {
        item: table::BAUD_RATE,
        eeprom: true,
    },
    Writable {
        item: table::RETURN_DELAY_TIME,
        eeprom: true,
    },
    Writable {
        item: table::DRIVE_MODE,
        eeprom: true,
    },
    Writable {
        item: table::OPERATING_MODE,
        eeprom: true,
    },
    Writable {
        item: table::SECONDARY_ID,
        eeprom: true,
    },
    Writable {
        item: table::PROTOCOL_TYPE,
        eeprom: true,
    },
    Writable {
        item: table::PWM_LIMIT,
        eeprom: true,
    },
    Writable {
        item: table::VELOCITY_LIMIT,
        eeprom: true,
    },
    Writable {
        item: table::MAX_POSITION_LIMIT,
        eeprom: true,
    },
    Writable {
        item: table::MIN_POSITION_LIMIT,
        eeprom: true,
    },
    Writable {
        item: table::SHUTDOWN,
        eeprom: true,
    },
    Writable {
        item: table::TORQUE_ENABLE,
        eeprom: false,
    },
    Writable {
        item: table::LED,
        eeprom: false,
    },
    Writable {
        item: table::STATUS_RETURN_LEVEL,
        eeprom: false,
    },
    Writable {
        item: table::GOAL_PWM,
        eeprom: false,
    },
    Writable {
        item: table::GOAL_CURRENT,
        eeprom: false,
    },
    Writable {
        item: table::GOAL_VELOCITY,
        eeprom: false,
    },
    Writable {
        item: table::PROFILE_ACCELERATION,
        eeprom: false,
    },
    Writable {
        item: table::PROFILE_VELOCITY,
        eeprom: false,
    },
    Writable {
        item: table::GOAL_POSITION,
        eeprom: false,
    },
];

/// One emulated servo.
#[derive(Debug, Clone)]
struct Servo {
    id: u8,
    model: u16,
    table: [u8; TABLE_SIZE],
    /// Position in ticks, continuous (Present Position is its rounding).
    position: f64,
    /// The primary this servo is bolted to (a shadow), whose position it shares.
    follows: Option<u8>,
    /// Whether the last motion step ended against a stop (PWM mode).
    blocked: bool,
}

impl Servo {
    fn get(&self, item: table::Item) -> i64 {
        let a = item.address as usize;
        let bytes = &self.table[a..a + item.size as usize];
        match *bytes {
            [a] => a as i64,
            [a, b] => i16::from_le_bytes([a, b]) as i64,
            [a, b, c, d] => i32::from_le_bytes([a, b, c, d]) as i64,
            _ => 0,
        }
    }

    fn set(&mut self, item: table::Item, value: i64) {
        let a = item.address as usize;
        let n = item.size as usize;
        self.table[a..a + n].copy_from_slice(&value.to_le_bytes()[..n]);
    }

    fn torque(&self) -> bool {
        self.get(table::TORQUE_ENABLE) != 0
    }

    fn hardware_error(&self) -> u8 {
        self.table[table::HARDWARE_ERROR_STATUS.address as usize]
    }

    fn mode(&self) -> u8 {
        self.table[table::OPERATING_MODE.address as usize]
    }

    /// Ticks per second of a value in 0.229 rev/min units.
    fn ticks_per_s(units: f64) -> f64 {
        units * table::VELOCITY_UNIT_RPM / 60.0 * 4096.0
    }

    /// Moves for `dt` seconds; `stop_low` is an extra lower stop (an object in the gripper).
    fn advance(&mut self, dt: f64, stop_low: Option<f64>) {
        let vmax = Self::ticks_per_s(self.get(table::VELOCITY_LIMIT) as f64);
        let lo = self.get(table::MIN_POSITION_LIMIT) as f64;
        let hi = self.get(table::MAX_POSITION_LIMIT) as f64;
        let mut velocity = 0.0;
        self.blocked = false;
        if self.torque() && self.hardware_error() == 0 {
            match self.mode() {
                table::MODE_POSITION
                | table::MODE_EXTENDED_POSITION
                | table::MODE_CURRENT_BASED_POSITION => {
                    let goal = self.get(table::GOAL_POSITION) as f64;
                    let time_based =
                        self.get(table::DRIVE_MODE) as u8 & table::DRIVE_MODE_TIME_BASED != 0;
                    let profile = self.get(table::PROFILE_VELOCITY) as f64;
                    let v = if profile > 0.0 && !time_based {
                        Self::ticks_per_s(profile).min(vmax)
                    } else {
                        vmax
                    };
                    let v = v.max(0.0);
                    let d = goal - self.position;
                    let step = d.clamp(-v * dt, v * dt);
                    self.position += step;
                    if dt > 0.0 {
                        velocity = step / dt;
                    }
                }
                table::MODE_PWM => {
                    let limit = self.get(table::PWM_LIMIT).max(1) as f64;
                    let pwm = self.get(table::GOAL_PWM) as f64;
                    let v = pwm / limit * vmax;
                    let low = stop_low.map_or(lo, |s| s.max(lo));
                    let target = self.position + v * dt;
                    let clamped = target.clamp(low.min(self.position), hi.max(self.position));
                    self.blocked = v != 0.0 && clamped != target;
                    self.position = clamped;
                    velocity = v;
                }
                _ => {}
            }
        }
        self.update_present(velocity);
    }

    fn update_present(&mut self, velocity_ticks: f64) {
        let present = self.position.round() as i64;
        self.set(table::PRESENT_POSITION, present);
        let units = velocity_ticks / Self::ticks_per_s(1.0);
        self.set(table::PRESENT_VELOCITY, units.round() as i64);
        let moving = match self.mode() {
            table::MODE_PWM => velocity_ticks != 0.0 && !self.blocked,
            _ => (self.get(table::GOAL_POSITION) - present).abs() > 0 && self.torque(),
        };
        self.set(table::MOVING, moving as i64);
        let current = if self.blocked {
            STALL_CURRENT * self.get(table::GOAL_PWM).signum() as i16
        } else {
            0
        };
        self.set(table::PRESENT_CURRENT, current as i64);
        self.set(
            table::PRESENT_PWM,
            if self.torque() {
                self.get(table::GOAL_PWM)
            } else {
                0
            },
        );
    }

    fn status(&self, error: Option<StatusError>, data: Vec<u8>) -> Status {
        let mut byte = error.map_or(0, StatusError::number);
        if self.hardware_error() != 0 {
            byte |= proto::ALERT_BIT;
        }
        Status::new(self.id, byte, data)
    }

    /// Checks a write of `data` at `address` against the control table: whole writable items
    /// only, EEPROM only with torque off, values in range. Does not apply it.
    fn check_write(&self, address: u16, data: &[u8]) -> Result<(), StatusError> {
        let end = address as usize + data.len();
        let mut at = address as usize;
        while at < end {
            let Some(w) = WRITABLE.iter().find(|w| w.item.address as usize == at) else {
                let inside = WRITABLE.iter().any(|w| {
                    let a = w.item.address as usize;
                    at > a && at < a + w.item.size as usize
                });
                return Err(if inside {
                    StatusError::DataLength
                } else {
                    StatusError::Access
                });
            };
            let size = w.item.size as usize;
            if at + size > end {
                return Err(StatusError::DataLength);
            }
            if w.eeprom && self.torque() {
                return Err(StatusError::Access);
            }
            let bytes = &data[at - address as usize..at - address as usize + size];
            let value: i64 = match *bytes {
                [a] => a as i64,
                [a, b] => i16::from_le_bytes([a, b]) as i64,
                [a, b, c, d] => i32::from_le_bytes([a, b, c, d]) as i64,
                _ => 0,
            };
            self.check_value(w.item, value)?;
            at += size;
        }
        Ok(())
    }

    fn check_value(&self, item: table::Item, value: i64) -> Result<(), StatusError> {
        let range = |ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(StatusError::DataRange)
            }
        };
        match item {
            table::TORQUE_ENABLE => {
                range((0..=1).contains(&value))?;
                if value == 1 && self.hardware_error() != 0 {
                    // A servo shut down by a hardware error stays off until rebooted.
                    return Err(StatusError::ResultFail);
                }
                Ok(())
            }
            table::OPERATING_MODE => range([0, 1, 3, 4, 5, 16].contains(&value)),
            table::DRIVE_MODE => range((0..=13).contains(&value)),
            table::GOAL_POSITION
                if self.mode() == table::MODE_POSITION
                    || self.mode() == table::MODE_CURRENT_BASED_POSITION =>
            {
                let lo = self.get(table::MIN_POSITION_LIMIT);
                let hi = self.get(table::MAX_POSITION_LIMIT);
                if (lo..=hi).contains(&value) {
                    Ok(())
                } else {
                    Err(StatusError::DataLimit)
                }
            }
            table::GOAL_PWM => {
                let limit = self.get(table::PWM_LIMIT);
                if (-limit..=limit).contains(&value) {
                    Ok(())
                } else {
                    Err(StatusError::DataLimit)
                }
            }
            table::PROFILE_VELOCITY | table::PROFILE_ACCELERATION => {
                range((0..=32767).contains(&value))
            }
            table::VELOCITY_LIMIT => range((0..=1023).contains(&value)),
            table::PWM_LIMIT => range((0..=885).contains(&value)),
            table::MAX_POSITION_LIMIT | table::MIN_POSITION_LIMIT => {
                range((0..=4095).contains(&value))
            }
            table::ID => range((0..=252).contains(&value)),
            table::SECONDARY_ID => range((0..=252).contains(&value) || value == 255),
            _ => Ok(()),
        }
    }

    /// Stores a write `check_write` accepted (so it lies inside the table).
    fn apply_write(&mut self, address: u16, data: &[u8]) {
        let a = address as usize;
        self.table[a..a + data.len()].copy_from_slice(data);
        self.id = self.table[table::ID.address as usize];
        if !self.torque() {
            self.blocked = false;
        }
    }

    fn read(&self, address: u16, len: u16) -> Result<Vec<u8>, StatusError> {
        let a = address as usize;
        let n = len as usize;
        if n == 0 || a + n > TABLE_SIZE {
            return Err(StatusError::Access);
        }
        Ok(self.table[a..a + n].to_vec())
    }
}

/// The servos of one bus and the faults it shows: everything but the pty, so it can be driven
/// directly (tests, fuzzing) with packets in and reply bytes out.
#[derive(Debug)]
pub struct BusState {
    servos: Vec<Servo>,
    fault: Fault,
    /// Object between the fingers: the gripper servo's lowest reachable tick while closing.
    object_ticks: Option<f64>,
    gripper_id: u8,
    settings: DynamixelSettings,
    linkage: GripperLinkage,
    finger_range: (f64, f64),
    last: Instant,
}

impl BusState {
    /// The servos of `settings`, arm at `q` (rad, `arm_joints` order) and fingers open, with
    /// position limits from `model`'s joint limits and the gripper's finger range.
    pub(crate) fn new(
        settings: &DynamixelSettings,
        model: &RobotModel,
        q: &[f64],
    ) -> Result<Self, EmulatorError> {
        let limits = model.joint_limits();
        if q.len() != settings.joints.len() || limits.len() != settings.joints.len() {
            return Err(EmulatorError::Pose(format!(
                "{} joint values for {} joints",
                q.len(),
                settings.joints.len()
            )));
        }
        let pos = settings.position;
        let max_tick = pos.ticks_per_revolution as i64 - 1;
        let mut servos = Vec::new();
        let blank = |id: u8, model_number: u16| {
            let mut s = Servo {
                id,
                model: model_number,
                table: [0; TABLE_SIZE],
                position: 0.0,
                follows: None,
                blocked: false,
            };
            s.set(table::MODEL_NUMBER, model_number as i64);
            s.set(table::FIRMWARE_VERSION, FIRMWARE as i64);
            s.set(table::ID, id as i64);
            s.set(table::BAUD_RATE, 3);
            s.set(table::SECONDARY_ID, 255);
            s.set(table::PROTOCOL_TYPE, 2);
            s.set(table::PWM_LIMIT, crate::settings::DYNAMIXEL_MAX_PWM as i64);
            s.set(table::VELOCITY_LIMIT, VELOCITY_LIMIT as i64);
            s.set(table::SHUTDOWN, SHUTDOWN_DEFAULT as i64);
            s.set(table::STATUS_RETURN_LEVEL, 2);
            s.set(table::OPERATING_MODE, table::MODE_POSITION as i64);
            s
        };
        let place = |s: &mut Servo, ticks: f64| {
            s.position = ticks;
            s.set(table::GOAL_POSITION, ticks.round() as i64);
            s.update_present(0.0);
        };
        for ((j, l), q) in settings.joints.iter().zip(limits).zip(q) {
            if !l.contains(*q) {
                return Err(EmulatorError::Pose(format!(
                    "joint `{}` = {q} is outside its limits [{}, {}]",
                    j.name, l.lower, l.upper
                )));
            }
            let lo = (pos.ticks(l.lower) as i64).clamp(0, max_tick);
            let hi = (pos.ticks(l.upper) as i64).clamp(0, max_tick);
            let ticks = pos.ticks(*q) as f64;
            let mut primary = blank(j.id, MODEL_XM430_W350);
            primary.set(table::DRIVE_MODE, j.reversed as i64);
            primary.set(table::MIN_POSITION_LIMIT, lo);
            primary.set(table::MAX_POSITION_LIMIT, hi);
            place(&mut primary, ticks);
            if let Some(sid) = j.shadow_id {
                let mut shadow = primary.clone();
                shadow.id = sid;
                shadow.set(table::ID, sid as i64);
                shadow.set(table::DRIVE_MODE, (!j.reversed) as i64);
                shadow.set(table::SECONDARY_ID, j.id as i64);
                shadow.follows = Some(j.id);
                servos.push(primary);
                servos.push(shadow);
            } else {
                servos.push(primary);
            }
        }
        let g = &settings.gripper;
        let linkage = GripperLinkage {
            horn_radius: g.horn_radius,
            arm_length: g.arm_length,
        };
        let gc = model.config.gripper;
        let finger_range = (
            gc.closed_units.min(gc.open_units),
            gc.closed_units.max(gc.open_units),
        );
        let tick_of_finger = |x: f64| pos.ticks(linkage.servo_angle(x)) as i64;
        let mut gripper = blank(g.id, MODEL_XL430_W250);
        gripper.set(table::MIN_POSITION_LIMIT, tick_of_finger(finger_range.0));
        gripper.set(table::MAX_POSITION_LIMIT, tick_of_finger(finger_range.1));
        let gripper_mode = match g.mode {
            DynamixelGripperMode::Pwm => table::MODE_PWM,
            DynamixelGripperMode::Position => table::MODE_POSITION,
        };
        gripper.set(table::OPERATING_MODE, gripper_mode as i64);
        place(&mut gripper, tick_of_finger(gc.open_units) as f64);
        servos.push(gripper);
        Ok(BusState {
            servos,
            fault: Fault::None,
            object_ticks: None,
            gripper_id: g.id,
            settings: settings.clone(),
            linkage,
            finger_range,
            last: Instant::now(),
        })
    }

    fn index(&self, id: u8) -> Option<usize> {
        self.servos.iter().position(|s| s.id == id)
    }

    /// Moves every servo to `now`; shadows take their primary's position.
    pub(crate) fn advance(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        let gripper = self.gripper_id;
        let object = self.object_ticks;
        for s in &mut self.servos {
            let stop = if s.id == gripper { object } else { None };
            if s.follows.is_none() {
                s.advance(dt, stop);
            }
        }
        for i in 0..self.servos.len() {
            if let Some(p) = self.servos[i].follows {
                if let Some(pi) = self.index(p) {
                    let position = self.servos[pi].position;
                    self.servos[i].position = position;
                    self.servos[i].update_present(0.0);
                }
            }
        }
    }

    /// The servos that execute a packet sent to `id`: the servo with that id and the shadows
    /// whose Secondary ID it is (they act, never answer).
    fn addressed(&self, id: u8) -> Vec<usize> {
        (0..self.servos.len())
            .filter(|&i| {
                let s = &self.servos[i];
                id == proto::BROADCAST_ID || s.id == id || s.get(table::SECONDARY_ID) == id as i64
            })
            .collect()
    }

    /// Acts on one instruction packet at time `now` and returns the bytes the bus answers.
    pub(crate) fn handle(&mut self, packet: &Packet, now: Instant) -> Vec<u8> {
        self.advance(now);
        let replies = self.respond(packet);
        let mut out = Vec::new();
        let count = replies.len();
        for (i, r) in replies.into_iter().enumerate() {
            let mut bytes = r.encode();
            match self.fault {
                Fault::None => {}
                Fault::Silent => continue,
                Fault::CorruptCrc => {
                    if let Some(last) = bytes.last_mut() {
                        *last ^= 0xFF;
                    }
                }
                Fault::Truncate if i + 1 == count => bytes.truncate(bytes.len() / 2),
                Fault::Truncate => {}
            }
            out.extend(bytes);
        }
        out
    }

    fn respond(&mut self, packet: &Packet) -> Vec<Status> {
        if packet.instruction == proto::instruction::STATUS {
            return Vec::new();
        }
        let id = packet.id;
        let targets = self.addressed(id);
        // Only a servo addressed by its own id (or, for PING, by broadcast) answers.
        let answers = |s: &Servo| s.id == id;
        let request = match Request::parse(packet) {
            Ok(r) => r,
            Err(_) => {
                return targets
                    .iter()
                    .map(|&i| &self.servos[i])
                    .filter(|s| s.id == id)
                    .map(|s| s.status(Some(StatusError::DataLength), Vec::new()))
                    .collect();
            }
        };
        match request {
            Request::Ping => targets
                .iter()
                .map(|&i| &self.servos[i])
                .filter(|s| s.id == id || id == proto::BROADCAST_ID)
                .map(|s| {
                    let mut d = s.model.to_le_bytes().to_vec();
                    d.push(FIRMWARE);
                    s.status(None, d)
                })
                .collect(),
            Request::Read { address, len } => targets
                .iter()
                .map(|&i| &self.servos[i])
                .filter(|s| s.id == id)
                .map(|s| match s.read(address, len) {
                    Ok(d) => s.status(None, d),
                    Err(e) => s.status(Some(e), Vec::new()),
                })
                .collect(),
            Request::Write { address, data } => {
                let mut out = Vec::new();
                for i in targets {
                    let result = self.servos[i].check_write(address, &data);
                    if result.is_ok() {
                        self.write(i, address, &data);
                    }
                    let s = &self.servos[i];
                    if answers(s) {
                        out.push(s.status(result.err(), Vec::new()));
                    }
                }
                out
            }
            Request::SyncRead { address, len, ids } => {
                let mut out = Vec::new();
                for want in ids {
                    // A missing servo breaks the chain: the ones after it wait for its answer.
                    let Some(i) = self.index(want) else { break };
                    let s = &self.servos[i];
                    out.push(match s.read(address, len) {
                        Ok(d) => s.status(None, d),
                        Err(e) => s.status(Some(e), Vec::new()),
                    });
                }
                out
            }
            Request::SyncWrite {
                address, entries, ..
            } => {
                for (target, data) in entries {
                    for i in self.addressed(target) {
                        if target != proto::BROADCAST_ID
                            && self.servos[i].check_write(address, &data).is_ok()
                        {
                            self.write(i, address, &data);
                        }
                    }
                }
                Vec::new()
            }
            Request::Reboot => {
                let mut out = Vec::new();
                for i in targets {
                    let s = &mut self.servos[i];
                    s.set(table::HARDWARE_ERROR_STATUS, 0);
                    s.set(table::TORQUE_ENABLE, 0);
                    s.update_present(0.0);
                    if answers(s) {
                        out.push(s.status(None, Vec::new()));
                    }
                }
                out
            }
            Request::Other(_) => targets
                .iter()
                .map(|&i| &self.servos[i])
                .filter(|s| s.id == id)
                .map(|s| s.status(Some(StatusError::Instruction), Vec::new()))
                .collect(),
        }
    }

    fn write(&mut self, i: usize, address: u16, data: &[u8]) {
        let s = &mut self.servos[i];
        s.apply_write(address, data);
        s.update_present(0.0);
    }

    /// Makes the bus answer every following request the way `fault` describes.
    pub fn set_fault(&mut self, fault: Fault) {
        self.fault = fault;
    }

    /// Sets a servo's Hardware Error Status; the servo turns torque off when a bit is one its
    /// Shutdown item lists (as the real ones do).
    pub fn inject_hardware_error(&mut self, id: u8, status: u8) -> bool {
        let Some(i) = self.index(id) else {
            return false;
        };
        let s = &mut self.servos[i];
        s.set(table::HARDWARE_ERROR_STATUS, status as i64);
        if status & s.get(table::SHUTDOWN) as u8 != 0 {
            s.set(table::TORQUE_ENABLE, 0);
        }
        s.update_present(0.0);
        true
    }

    /// An object of `width` (m, finger gap) between the fingers: closing stalls there.
    pub fn set_gripper_object(&mut self, width: Option<f64>, model: &RobotModel) {
        self.object_ticks = width.map(|w| {
            let x = model
                .config
                .gripper
                .units_for_width(w)
                .clamp(self.finger_range.0, self.finger_range.1);
            self.settings.position.ticks(self.linkage.servo_angle(x)) as f64
        });
    }

    /// A control table item of servo `id`, as the servo would report it now.
    pub fn register(&self, id: u8, item: table::Item) -> Option<i64> {
        self.index(id).map(|i| self.servos[i].get(item))
    }
}

/// A running emulator: the pty, and the thread that answers on it. Dropping it stops the thread
/// and closes the pty.
pub struct Emulator {
    path: PathBuf,
    state: Arc<Mutex<BusState>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The slave side stays open here so the line settings survive clients coming and going, and
    /// the master never reads end-of-file between them.
    _slave: OwnedFd,
}

impl Emulator {
    /// Starts the servos of `settings` (see `BusState::new`) on a new pty.
    pub fn start(
        settings: &DynamixelSettings,
        model: &RobotModel,
        q: &[f64],
    ) -> Result<Emulator, EmulatorError> {
        let state = BusState::new(settings, model, q)?;
        let (master, slave, path) = open_pty().map_err(EmulatorError::Pty)?;
        let state = Arc::new(Mutex::new(state));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let state = state.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("dynamixel-emulator".into())
                .spawn(move || serve(master, state, stop))
                .map_err(EmulatorError::Pty)?
        };
        Ok(Emulator {
            path,
            state,
            stop,
            thread: Some(thread),
            _slave: slave,
        })
    }

    /// The device path to open (`/dev/pts/N`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bus state, moved to the present, for inspection or fault injection.
    pub fn state(&self) -> MutexGuard<'_, BusState> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.advance(Instant::now());
        s
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A pty in raw mode: (master, slave, slave path).
fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd, PathBuf)> {
    let last = std::io::Error::last_os_error;
    // SAFETY: plain libc calls on descriptors this function owns; each result is checked.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        if m < 0 {
            return Err(last());
        }
        let master = OwnedFd::from_raw_fd(m);
        if libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
            return Err(last());
        }
        let mut name = [0 as libc::c_char; 128];
        if libc::ptsname_r(m, name.as_mut_ptr(), name.len()) != 0 {
            return Err(last());
        }
        let cpath = std::ffi::CStr::from_ptr(name.as_ptr());
        let path = PathBuf::from(cpath.to_string_lossy().into_owned());
        let s = libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
        if s < 0 {
            return Err(last());
        }
        let slave = OwnedFd::from_raw_fd(s);
        let mut tio: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(s, &mut tio) != 0 {
            return Err(last());
        }
        libc::cfmakeraw(&mut tio);
        if libc::tcsetattr(s, libc::TCSANOW, &tio) != 0 {
            return Err(last());
        }
        Ok((master, slave, path))
    }
}

/// The emulator thread: reads requests from the master side and writes the answers.
fn serve(master: OwnedFd, state: Arc<Mutex<BusState>>, stop: Arc<AtomicBool>) {
    let fd = master.as_raw_fd();
    let mut decoder = Decoder::new();
    let mut buf = [0u8; 512];
    while !stop.load(Ordering::Relaxed) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the duration of the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, 20) };
        if ready <= 0 || pfd.revents & libc::POLLIN == 0 {
            if pfd.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
                break;
            }
            if pfd.revents & libc::POLLHUP != 0 {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        }
        // SAFETY: reads into a buffer of the given length from a descriptor we own.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        decoder.push(&buf[..n as usize]);
        while let Some(packet) = decoder.next_packet() {
            let Ok(packet) = packet else { continue };
            let reply = {
                let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                s.handle(&packet, Instant::now())
            };
            write_all(fd, &reply);
        }
    }
}

fn write_all(fd: RawFd, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice to a descriptor we own.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}
