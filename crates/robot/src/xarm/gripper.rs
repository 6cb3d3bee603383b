//! The xArm Gripper, a Modbus-RTU slave behind the controller's RS-485 tunnel (register 124),
//! as xArm-Python-SDK v1.18.4 drives it (`xarm/x3/gripper.py`): the tool bus baud check, enable,
//! speed, target position in pulses, and the status poll that tells when the fingers stopped.
//!
//! Widths (m, what pointact speaks) map linearly onto pulses through robot.toml's gripper range
//! (`GripperConfig`, whose units are this gripper's pulses), clamped to the pulses driver.toml
//! says the gripper accepts.

use std::time::Duration;

use tokio::time::Instant;

use super::client::XarmClient;
use super::proto::{
    gripper_reg, i32_to_registers, modbus_exception, registers_to_i32, tool_reg, Command,
    ControllerError, Reply, RtuReply, RtuRequest,
};
use crate::RobotError;

/// Gripper status poll period. The SDK polls every 100 ms; half that ends a wait sooner after
/// the fingers stop, for one cheap request more per poll.
const POLL: Duration = Duration::from_millis(50);
/// Polls without ever seeing "moving" after which a move counts as done: the fingers were
/// already there or could not move (the SDK's `not_start_move_cnt > 20`).
const NOT_STARTED_POLLS: u32 = 20;
/// Within this many pulses of the target the fingers have arrived (the SDK's `<= 1`).
const ARRIVED_PULSES: i32 = 1;
/// Waits after writing the tool board's baud and after its soft reboot (the SDK's 0.3 s and
/// 1 s): the board is not reachable in between.
const BAUD_SETTLE: Duration = Duration::from_millis(300);
const REBOOT_SETTLE: Duration = Duration::from_secs(1);

impl XarmClient {
    /// Pulses for a finger width (m): robot.toml's range, clamped to driver.toml's pulses.
    pub fn pulses_for_width(&self, width: f64) -> i32 {
        let g = &self.settings().gripper;
        let p = self.gripper.units_for_width(width).round() as i32;
        p.clamp(g.closed_position, g.open_position)
    }

    /// Finger width (m) for a position reading in pulses.
    pub fn width_for_pulses(&self, pulses: i32) -> f64 {
        self.gripper.width_for_units(f64::from(pulses))
    }

    /// Checks the tool bus baud (TGPIO_R16B 0x0A0B) once per connection and, like the SDK's
    /// `checkset_modbus_baud`, sets it and soft-reboots the tool board when it differs.
    pub async fn gripper_check_bus(&mut self) -> Result<(), RobotError> {
        if self.gripper_bus_checked {
            return Ok(());
        }
        let g = self.settings().gripper.clone();
        let want = g
            .baud_index()
            .ok_or_else(|| RobotError::Config(format!("gripper baud {} is not settable", g.baud)))?
            as i32;
        let now = self.tool_baud_index().await?;
        if now != want {
            tracing::info!(
                "xarm: tool RS-485 baud index {now}, setting {want} ({} baud)",
                g.baud
            );
            let write = |addr, value| Command::TgpioWrite16 {
                host: g.rs485_host,
                addr,
                value,
                extra: Vec::new(),
            };
            self.request(write(tool_reg::SET_BAUD_INDEX, want as f32))
                .await?;
            tokio::time::sleep(BAUD_SETTLE).await;
            self.request(write(tool_reg::SOFT_REBOOT, 1.0)).await?;
            tokio::time::sleep(REBOOT_SETTLE).await;
            // The reboot interrupts the tool bus: the controller may raise an end-effector
            // communication error, which the SDK clears too.
            if let (Some(e), _) = self.error_warn().await? {
                if matches!(
                    e,
                    ControllerError::EndEffectorComm | ControllerError::EndModuleComm
                ) {
                    self.clean_error().await?;
                }
            }
            let after = self.tool_baud_index().await?;
            if after != want {
                return Err(RobotError::Stopped(format!(
                    "the tool board's RS-485 baud index stays {after} after setting {want}"
                )));
            }
        }
        self.gripper_bus_checked = true;
        Ok(())
    }

    async fn tool_baud_index(&mut self) -> Result<i32, RobotError> {
        let host = self.settings().gripper.rs485_host;
        match self
            .request(Command::TgpioRead16 {
                host,
                addr: tool_reg::BAUD_INDEX,
            })
            .await?
            .1
        {
            Reply::Register(v) => Ok(v),
            other => Err(RobotError::Protocol(format!(
                "TGPIO_R16B answered {other:?}"
            ))),
        }
    }

    /// Bus check, enable (0x0100) and finger speed (0x0303), then the gripper's error register.
    pub async fn gripper_enable(&mut self) -> Result<(), RobotError> {
        self.gripper_check_bus().await?;
        self.gripper_write(gripper_reg::ENABLE, &[1]).await?;
        let speed = self.settings().gripper.speed_rpm;
        self.gripper_write(gripper_reg::SPEED, &[speed]).await?;
        self.gripper_check_error().await?;
        self.gripper_enabled = true;
        Ok(())
    }

    /// Whether `gripper_enable` succeeded on this connection.
    pub fn gripper_is_enabled(&self) -> bool {
        self.gripper_enabled
    }

    /// Writes the target position (0x0700, pulses) and checks the error register; with `wait`,
    /// polls the status register (0x0000) until the fingers stopped — at the target, on an
    /// object, or not moving at all — bounded by the gripper's `motion_timeout_s`. Returns the
    /// position reached (pulses).
    pub async fn gripper_move(&mut self, pulses: i32, wait: bool) -> Result<i32, RobotError> {
        self.gripper_check_bus().await?;
        self.gripper_write(gripper_reg::TARGET_POSITION, &i32_to_registers(pulses))
            .await?;
        self.gripper_check_error().await?;
        if !wait {
            return self.gripper_position().await;
        }
        let timeout = self.settings().gripper.motion_timeout();
        let deadline = Instant::now() + timeout;
        let mut seen_moving = false;
        let mut idle = 0;
        loop {
            self.check_links()?;
            let status = self.gripper_status().await? & 0x03;
            let at = self.gripper_position().await?;
            let done = match status {
                gripper_reg::STATUS_MOVING => {
                    seen_moving = true;
                    false
                }
                gripper_reg::STATUS_OBJECT => true,
                _ => {
                    idle += 1;
                    seen_moving || (at - pulses).abs() <= ARRIVED_PULSES || idle > NOT_STARTED_POLLS
                }
            };
            if done {
                self.gripper_check_error().await?;
                return Ok(at);
            }
            if Instant::now() + POLL > deadline {
                return Err(RobotError::Timeout(timeout.as_secs_f64()));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Current finger position (0x0702, two registers, pulses); also recorded with the states.
    pub async fn gripper_position(&mut self) -> Result<i32, RobotError> {
        let v = self.gripper_read(gripper_reg::POSITION, 2).await?;
        let p = registers_to_i32([v[0], v[1]]);
        let w = self.width_for_pulses(p);
        self.record_gripper_width(w);
        Ok(p)
    }

    /// Status register (0x0000): bits 0-1 are 0 stopped, 1 moving, 2 object detected.
    pub async fn gripper_status(&mut self) -> Result<u16, RobotError> {
        Ok(self.gripper_read(gripper_reg::STATUS, 1).await?[0])
    }

    /// Error register (0x000F); 0 = none.
    pub async fn gripper_error(&mut self) -> Result<u16, RobotError> {
        Ok(self.gripper_read(gripper_reg::ERROR, 1).await?[0])
    }

    async fn gripper_check_error(&mut self) -> Result<(), RobotError> {
        match self.gripper_error().await? {
            0 => Ok(()),
            e => {
                self.gripper_enabled = false;
                Err(RobotError::Stopped(format!(
                    "the xArm Gripper reports error {e} (register 0x000F); clear it (register \
                     0x0109) and enable it again"
                )))
            }
        }
    }

    async fn gripper_read(&mut self, addr: u16, count: u16) -> Result<Vec<u16>, RobotError> {
        let slave = self.settings().gripper.slave_id;
        match self
            .rtu(RtuRequest::ReadHolding { slave, addr, count })
            .await?
        {
            RtuReply::ReadHolding { values, .. } if values.len() == count as usize => Ok(values),
            other => Err(RobotError::Protocol(format!(
                "xArm Gripper: reading {count} registers at 0x{addr:04X} answered {other:?}"
            ))),
        }
    }

    async fn gripper_write(&mut self, addr: u16, values: &[u16]) -> Result<(), RobotError> {
        let slave = self.settings().gripper.slave_id;
        let req = RtuRequest::WriteMultiple {
            slave,
            addr,
            values: values.to_vec(),
        };
        match self.rtu(req).await? {
            RtuReply::WriteMultiple { addr: a, count, .. }
                if a == addr && count as usize == values.len() =>
            {
                Ok(())
            }
            other => Err(RobotError::Protocol(format!(
                "xArm Gripper: writing 0x{addr:04X} answered {other:?}"
            ))),
        }
    }

    /// One Modbus-RTU exchange through the tunnel. A gripper that does not answer is the
    /// controller's end-effector communication error (C19); any other exception means we asked
    /// something the device does not have, a protocol error.
    async fn rtu(&mut self, req: RtuRequest) -> Result<RtuReply, RobotError> {
        let host = self.settings().gripper.rs485_host;
        let (status, reply) = self
            .request(Command::Rs485 {
                host,
                pdu: req.encode(),
            })
            .await?;
        if status.error() {
            if let Some(e) = self.fault().await? {
                return Err(e);
            }
        }
        let pdu = match reply {
            Reply::Rs485 { host: h, pdu } if h == host => pdu,
            other => {
                return Err(RobotError::Protocol(format!(
                    "RS-485 tunnel (host {host}) answered {other:?}"
                )))
            }
        };
        let reply = RtuReply::decode(&pdu)
            .map_err(|e| RobotError::Protocol(format!("xArm Gripper reply {pdu:02X?}: {e}")))?;
        let slave = match &reply {
            RtuReply::ReadHolding { slave, .. }
            | RtuReply::WriteMultiple { slave, .. }
            | RtuReply::Exception { slave, .. } => *slave,
        };
        if slave != req.slave() {
            return Err(RobotError::Protocol(format!(
                "Modbus reply from slave {slave} to a request for slave {}",
                req.slave()
            )));
        }
        match reply {
            RtuReply::Exception { code, function, .. } => {
                if code == modbus_exception::TARGET_NO_RESPONSE {
                    let e = ControllerError::EndEffectorComm;
                    Err(RobotError::Controller {
                        code: i32::from(e.code()),
                        detail: format!(
                            "{}: the xArm Gripper (slave {slave} on RS-485 host {host}) did \
                             not answer; check its cable and the tool bus baud",
                            e.meaning()
                        ),
                    })
                } else {
                    Err(RobotError::Protocol(format!(
                        "xArm Gripper refused Modbus function 0x{function:02X} with exception \
                         {code}"
                    )))
                }
            }
            r => Ok(r),
        }
    }
}
