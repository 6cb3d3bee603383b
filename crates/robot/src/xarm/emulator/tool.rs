//! The robot's tool board and the xArm Gripper behind the controller's RS-485 tunnel
//! (xArm-Python-SDK v1.18.4 `xarm/x3/gripper.py`, `xarm/core/wrapper/uxbus_cmd.py`; UFACTORY
//! `p16-rs485-control-on-the-end-effector-124-127.md`): what TGPIO_R16B/W16B (127/128) and
//! RS485_RTU (124) reach.
//!
//! The gripper is a Modbus-RTU slave: enable, speed and target registers, a position that moves
//! towards the target at the set speed once enabled, a status register (stopped / moving /
//! object detected) and an error register. It answers only when the tool bus runs at its baud
//! rate (2 Mbps, index 11): a client that skips the SDK's baud check-and-set against a re-bauded
//! bus gets no answer, as on the real tool board.

use crate::xarm::proto::{
    gripper_reg, i32_to_registers, modbus_exception, modbus_fn, tool_reg, RtuReply, RtuRequest,
    RS485_HOST_TOOL,
};

/// Baud index the xArm Gripper listens at (2 Mbps in `XARM_RS485_BAUDS`).
pub const GRIPPER_BAUD_INDEX: u8 = 11;
/// Position register value when fully open (pulses).
pub const GRIPPER_OPEN_PULSES: f64 = 850.0;
/// Finger speed: pulses per second for each r/min of the speed register. The reference gives no
/// stroke time; this makes the SDK example's 5000 r/min a 1 s full stroke, slow enough that a
/// 10 Hz status poll sees the fingers moving.
const PULSES_PER_S_PER_RPM: f64 = GRIPPER_OPEN_PULSES / 5000.0;
/// Speed register at power-on (r/min): the SDK only writes it when a speed is given.
const DEFAULT_SPEED_RPM: u16 = 5000;
/// How far past the point of contact the drive is held while the fingers grip an object
/// (pulses, 3 % of the range): more than the lag at which the arm reports the fingers blocked
/// (2 %), so a held object keeps them blocked, and a fixed amount, so the squeeze does not grow
/// while the object is held.
const SQUEEZE_PULSES: f64 = 0.03 * GRIPPER_OPEN_PULSES;
/// Firmware version the gripper reports (>= 3.4.3: the SDK then waits on the status register).
const GRIPPER_VERSION: [u16; 3] = [3, 4, 3];

/// The xArm Gripper's registers and finger motion.
#[derive(Debug, Clone)]
pub struct Gripper {
    enabled: bool,
    mode: u16,
    speed_rpm: u16,
    target_regs: [u16; 2],
    /// Pulses (850 open .. 0 closed).
    position: f64,
    /// Where the drive holds the fingers while they grip an object (pulses): past the point of
    /// contact by [`SQUEEZE_PULSES`], a steady squeeze.
    hold: f64,
    error: u16,
    status: u16,
}

impl Default for Gripper {
    fn default() -> Self {
        Gripper {
            enabled: false,
            mode: 0,
            speed_rpm: DEFAULT_SPEED_RPM,
            target_regs: i32_to_registers(GRIPPER_OPEN_PULSES as i32),
            position: GRIPPER_OPEN_PULSES,
            hold: GRIPPER_OPEN_PULSES,
            error: 0,
            status: gripper_reg::STATUS_STOPPED,
        }
    }
}

impl Gripper {
    fn target(&self) -> f64 {
        let t = crate::xarm::proto::registers_to_i32(self.target_regs) as f64;
        t.clamp(0.0, GRIPPER_OPEN_PULSES)
    }

    /// Moves the fingers for `dt` seconds; returns the opening setpoint (0..1) for the arm.
    pub fn step(&mut self, dt: f64) -> f64 {
        if self.status == gripper_reg::STATUS_OBJECT {
            return self.hold / GRIPPER_OPEN_PULSES;
        }
        let target = self.target();
        if self.enabled && self.error == 0 && self.status != gripper_reg::STATUS_OBJECT {
            let max_step = self.speed_rpm as f64 * PULSES_PER_S_PER_RPM * dt;
            let d = target - self.position;
            if d.abs() <= max_step {
                self.position = target;
            } else {
                self.position += max_step * d.signum();
            }
        }
        self.position / GRIPPER_OPEN_PULSES
    }

    /// Takes in where the arm's fingers are: a blocked closing stops at the object.
    ///
    /// Once blocked, the gripper holds: the drive stays [`SQUEEZE_PULSES`] past the point of
    /// contact and the status stays "object" until a new target is written, or until the fingers
    /// are no longer blocked (the object slipped out), when the close goes on to its target. Were it
    /// to follow the fingers at every tick instead, the status would flap between "object" and
    /// "moving" and every other tick would drive the fingers a step further into the object, a
    /// squeeze growing for as long as the object is held, until the simulator pushes it out.
    pub fn observe(&mut self, opening: f64, blocked: bool) {
        let measured = (opening * GRIPPER_OPEN_PULSES).clamp(0.0, GRIPPER_OPEN_PULSES);
        if self.status == gripper_reg::STATUS_OBJECT {
            self.position = measured;
            if !blocked {
                self.status = gripper_reg::STATUS_MOVING;
            }
            return;
        }
        let moving = self.enabled && self.error == 0 && (self.target() - self.position).abs() > 0.5;
        if blocked && self.target() < self.position {
            self.position = measured;
            self.hold = (measured - SQUEEZE_PULSES).max(self.target());
            self.status = gripper_reg::STATUS_OBJECT;
        } else if moving {
            self.status = gripper_reg::STATUS_MOVING;
        } else {
            self.status = gripper_reg::STATUS_STOPPED;
        }
    }

    /// Current position register (pulses).
    pub fn position(&self) -> i32 {
        self.position.round() as i32
    }

    fn read(&self, addr: u16) -> Option<u16> {
        let pos = i32_to_registers(self.position());
        Some(match addr {
            gripper_reg::STATUS => self.status,
            gripper_reg::ERROR => self.error,
            gripper_reg::ENABLE => self.enabled as u16,
            gripper_reg::MODE => self.mode,
            gripper_reg::SPEED => self.speed_rpm,
            a if a == gripper_reg::TARGET_POSITION => self.target_regs[0],
            a if a == gripper_reg::TARGET_POSITION + 1 => self.target_regs[1],
            a if a == gripper_reg::POSITION => pos[0],
            a if a == gripper_reg::POSITION + 1 => pos[1],
            a if gripper_reg::VERSION.contains(&a) => {
                GRIPPER_VERSION[(a - gripper_reg::VERSION[0]) as usize]
            }
            _ => return None,
        })
    }

    /// Applies a register write; callers check `writable` first.
    fn write(&mut self, addr: u16, value: u16) {
        match addr {
            gripper_reg::ENABLE => self.enabled = value != 0,
            gripper_reg::MODE => self.mode = value,
            gripper_reg::SPEED => self.speed_rpm = value,
            gripper_reg::CLEAR_ERROR if value != 0 => self.error = 0,
            gripper_reg::SET_ZERO if value != 0 => {
                self.position = 0.0;
                self.target_regs = [0, 0];
            }
            a if a == gripper_reg::TARGET_POSITION => {
                self.target_regs[0] = value;
                // A new target releases an object hold: the fingers may open again.
                self.status = gripper_reg::STATUS_STOPPED;
            }
            a if a == gripper_reg::TARGET_POSITION + 1 => {
                self.target_regs[1] = value;
                self.status = gripper_reg::STATUS_STOPPED;
            }
            _ => {}
        }
    }

    /// One Modbus request addressed to this gripper.
    fn serve(&mut self, req: &RtuRequest) -> RtuReply {
        let slave = req.slave();
        match req {
            RtuRequest::ReadHolding { addr, count, .. } => {
                let values: Option<Vec<u16>> = (0..*count)
                    .map(|i| addr.checked_add(i).and_then(|a| self.read(a)))
                    .collect();
                match values {
                    Some(values) if *count > 0 && *count <= 125 => {
                        RtuReply::ReadHolding { slave, values }
                    }
                    _ => exception(
                        slave,
                        modbus_fn::READ_HOLDING,
                        modbus_exception::ILLEGAL_ADDRESS,
                    ),
                }
            }
            RtuRequest::WriteMultiple { addr, values, .. } => {
                // Check every address first, so a bad write changes nothing.
                let all_known =
                    (0..values.len() as u16).all(|i| addr.checked_add(i).is_some_and(writable));
                if !all_known {
                    return exception(
                        slave,
                        modbus_fn::WRITE_MULTIPLE,
                        modbus_exception::ILLEGAL_ADDRESS,
                    );
                }
                for (i, v) in values.iter().enumerate() {
                    self.write(addr + i as u16, *v);
                }
                RtuReply::WriteMultiple {
                    slave,
                    addr: *addr,
                    count: values.len() as u16,
                }
            }
        }
    }
}

/// Registers the gripper accepts writes to.
fn writable(addr: u16) -> bool {
    matches!(
        addr,
        gripper_reg::ENABLE
            | gripper_reg::MODE
            | gripper_reg::SPEED
            | gripper_reg::CLEAR_ERROR
            | gripper_reg::SET_ZERO
    ) || addr == gripper_reg::TARGET_POSITION
        || addr == gripper_reg::TARGET_POSITION + 1
}

fn exception(slave: u8, function: u8, code: u8) -> RtuReply {
    RtuReply::Exception {
        slave,
        function,
        code,
    }
}

/// The tool board: its baud register and the gripper on its RS-485 bus.
#[derive(Debug, Clone)]
pub struct ToolBoard {
    pub gripper: Gripper,
    baud_index: u8,
    /// Written to 0x1A0B; applied by the soft reboot (0x0607).
    pending_baud_index: u8,
}

impl Default for ToolBoard {
    fn default() -> Self {
        ToolBoard {
            gripper: Gripper::default(),
            baud_index: GRIPPER_BAUD_INDEX,
            pending_baud_index: GRIPPER_BAUD_INDEX,
        }
    }
}

/// Why a tunnelled request got no Modbus answer at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunnelFault {
    /// The PDU is not a Modbus request this bus understands (the controller's parameter warning).
    Malformed,
}

impl ToolBoard {
    /// TGPIO_R16B: a tool-board register.
    pub fn read16(&self, host: u8, addr: u16) -> i32 {
        match (host, addr) {
            (RS485_HOST_TOOL, tool_reg::BAUD_INDEX) => self.baud_index as i32,
            _ => 0,
        }
    }

    /// TGPIO_W16B: the SDK's re-baud sequence (0x1A0B then soft reboot 0x0607).
    pub fn write16(&mut self, host: u8, addr: u16, value: f32) {
        if host != RS485_HOST_TOOL {
            return;
        }
        match addr {
            tool_reg::SET_BAUD_INDEX if value.is_finite() && (0.0..13.0).contains(&value) => {
                self.pending_baud_index = value as u8;
            }
            tool_reg::SOFT_REBOOT => self.baud_index = self.pending_baud_index,
            _ => {}
        }
    }

    /// RS485_RTU: the reply PDU of the device the request reached (an exception when none did).
    pub fn rs485(&mut self, host: u8, pdu: &[u8]) -> Result<Vec<u8>, TunnelFault> {
        let req = match RtuRequest::decode(pdu) {
            Ok(Ok(r)) => r,
            Ok(Err((slave, function))) => {
                return Ok(exception(slave, function, modbus_exception::ILLEGAL_FUNCTION).encode())
            }
            Err(_) => return Err(TunnelFault::Malformed),
        };
        let slave = req.slave();
        let reachable = host == RS485_HOST_TOOL
            && slave == gripper_reg::SLAVE_ID
            && self.baud_index == GRIPPER_BAUD_INDEX;
        if !reachable {
            let function = match req {
                RtuRequest::ReadHolding { .. } => modbus_fn::READ_HOLDING,
                RtuRequest::WriteMultiple { .. } => modbus_fn::WRITE_MULTIPLE,
            };
            return Ok(exception(slave, function, modbus_exception::TARGET_NO_RESPONSE).encode());
        }
        Ok(self.gripper.serve(&req).encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(board: &mut ToolBoard, addr: u16, count: u16) -> RtuReply {
        let pdu = RtuRequest::ReadHolding {
            slave: 8,
            addr,
            count,
        }
        .encode();
        RtuReply::decode(&board.rs485(9, &pdu).unwrap()).unwrap()
    }

    fn write(board: &mut ToolBoard, addr: u16, values: Vec<u16>) -> RtuReply {
        let pdu = RtuRequest::WriteMultiple {
            slave: 8,
            addr,
            values,
        }
        .encode();
        RtuReply::decode(&board.rs485(9, &pdu).unwrap()).unwrap()
    }

    #[test]
    fn gripper_moves_only_when_enabled_at_its_speed() {
        let mut b = ToolBoard::default();
        write(
            &mut b,
            gripper_reg::TARGET_POSITION,
            i32_to_registers(350).to_vec(),
        );
        b.gripper.step(1.0);
        assert_eq!(
            b.gripper.position(),
            850,
            "a disabled gripper must not move"
        );
        write(&mut b, gripper_reg::ENABLE, vec![1]);
        // 5000 r/min = 850 pulses/s: 0.2 s moves 170 pulses.
        let opening = b.gripper.step(0.2);
        b.gripper.observe(opening, false);
        assert_eq!(b.gripper.position(), 680);
        assert_eq!(
            read(&mut b, gripper_reg::STATUS, 1),
            RtuReply::ReadHolding {
                slave: 8,
                values: vec![gripper_reg::STATUS_MOVING]
            }
        );
        let opening = b.gripper.step(1.0);
        b.gripper.observe(opening, false);
        assert_eq!(b.gripper.position(), 350);
        assert_eq!(
            read(&mut b, gripper_reg::POSITION, 2),
            RtuReply::ReadHolding {
                slave: 8,
                values: i32_to_registers(350).to_vec()
            }
        );
        assert_eq!(
            read(&mut b, gripper_reg::STATUS, 1),
            RtuReply::ReadHolding {
                slave: 8,
                values: vec![gripper_reg::STATUS_STOPPED]
            }
        );
    }

    #[test]
    fn a_blocked_close_reports_an_object() {
        let mut b = ToolBoard::default();
        write(&mut b, gripper_reg::ENABLE, vec![1]);
        write(
            &mut b,
            gripper_reg::TARGET_POSITION,
            i32_to_registers(0).to_vec(),
        );
        b.gripper.step(0.5);
        b.gripper.observe(0.5, true);
        assert_eq!(b.gripper.position(), 425);
        b.gripper.step(0.5);
        assert_eq!(b.gripper.position(), 425, "held by the object");
        // Still blocked: it holds, squeezing a fixed 3 % past the contact, not further.
        for _ in 0..10 {
            let drive = b.gripper.step(0.01);
            assert!((drive - (0.5 - 0.03)).abs() < 1e-9, "{drive}");
            b.gripper.observe(0.49, true);
        }
        assert_eq!(b.gripper.position(), 417, "where the fingers stand");
        assert_eq!(
            read(&mut b, gripper_reg::STATUS, 1),
            RtuReply::ReadHolding {
                slave: 8,
                values: vec![gripper_reg::STATUS_OBJECT]
            }
        );
        // The object slipped out: no longer blocked, the close goes on to its target.
        b.gripper.observe(0.47, false);
        for _ in 0..100 {
            let drive = b.gripper.step(0.05);
            b.gripper.observe(drive, false);
        }
        assert_eq!(b.gripper.position(), 0, "closed on nothing");
    }

    #[test]
    fn unknown_registers_wrong_slaves_and_baud_mismatch_are_refused() {
        let mut b = ToolBoard::default();
        assert!(matches!(
            read(&mut b, 0x4444, 1),
            RtuReply::Exception { code: 2, .. }
        ));
        let pdu = RtuRequest::ReadHolding {
            slave: 3,
            addr: 0,
            count: 1,
        }
        .encode();
        let r = RtuReply::decode(&b.rs485(9, &pdu).unwrap()).unwrap();
        assert!(matches!(r, RtuReply::Exception { code: 0x0B, .. }));
        // Re-baud to 115200 (index 5): the gripper no longer answers.
        assert_eq!(b.read16(9, tool_reg::BAUD_INDEX), 11);
        b.write16(9, tool_reg::SET_BAUD_INDEX, 5.0);
        b.write16(9, tool_reg::SOFT_REBOOT, 1.0);
        assert_eq!(b.read16(9, tool_reg::BAUD_INDEX), 5);
        assert!(matches!(
            read(&mut b, gripper_reg::STATUS, 1),
            RtuReply::Exception { code: 0x0B, .. }
        ));
        assert_eq!(b.rs485(9, &[8]), Err(TunnelFault::Malformed));
    }
}
