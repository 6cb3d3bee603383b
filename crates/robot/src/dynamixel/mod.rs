//! ROBOTIS DYNAMIXEL servos on a serial bus (Protocol 2.0): the wire format (`proto`), a client
//! (`bus`), the serial port (`serial`), the WidowX 250 driver (`widowx`) and a bus emulator on a pseudo-terminal (`emulator`).
//!
//! The layers are kept apart so that the emulator and the driver share one encoder and decoder
//! (`proto`) but nothing else: the emulator answers from its own control tables, so a driver bug
//! cannot be mirrored by an emulator bug built from the same code.

pub(crate) mod bus;
pub mod emulator;
pub mod proto;
pub mod serial;
pub mod widowx;

use proto::{ProtocolError, StatusError};

/// Everything that can go wrong on the bus or in the WidowX driver. Errors that concern one
/// servo name it; those that concern a joint name the joint too, since that is what a person at
/// the robot can find.
#[derive(Debug, thiserror::Error)]
pub enum DynamixelError {
    /// The serial port could not be opened (missing adapter, no permission, bad settings).
    #[error("cannot open serial port `{port}`: {detail} (is the adapter plugged in, and may this user open it? see docs/hardware.md, WidowX 250)")]
    Open {
        /// The serial device path that was asked for.
        port: String,
        /// The operating system's reason.
        detail: String,
    },
    /// Reading or writing the open serial port failed.
    #[error("serial port: {0}")]
    Io(#[from] std::io::Error),
    /// No status packet (not even part of one) within the bus timeout.
    #[error("servo {id} did not answer within {timeout_s:.3} s")]
    Timeout {
        /// The servo that was asked.
        id: u8,
        /// The bus timeout that ran out (s).
        timeout_s: f64,
    },
    /// Bytes that are not a valid packet, or a packet that does not answer what was asked.
    #[error("bad packet while waiting for servo {id}: {source}")]
    Protocol {
        /// The servo whose answer was awaited.
        id: u8,
        /// What was wrong with the bytes.
        #[source]
        source: ProtocolError,
    },
    /// The servo answered with an error number.
    #[error("servo {id} refused the instruction: {error}")]
    Status {
        /// The servo that refused.
        id: u8,
        /// The error number from its status packet.
        #[source]
        error: StatusError,
    },
    /// A servo raised its alert bit; `status` is its Hardware Error Status (control table 70).
    #[error("joint `{joint}` (servo {id}{}): hardware error {status:#04x}: {}", if *.shadow { ", shadow" } else { "" }, proto::hardware_error::describe(*.status))]
    Hardware {
        /// The joint the servo drives.
        joint: String,
        /// The servo's bus id.
        id: u8,
        /// Whether the servo is a shadow (one that follows its joint's primary servo).
        shadow: bool,
        /// The Hardware Error Status bits (see `proto::hardware_error`).
        status: u8,
    },
    /// A servo is not configured the way the driver settings say (found at connect).
    #[error("joint `{joint}` (servo {id}): {detail}")]
    Setup {
        /// The joint the servo drives.
        joint: String,
        /// The servo's bus id.
        id: u8,
        /// Which setting differs, and how.
        detail: String,
    },
    /// A joint is not where it was commanded (a servo that refused a goal, or is blocked).
    #[error("joint `{joint}` (servo {id}) is {error_rad:.3} rad from its goal (allowed {allowed_rad:.3})")]
    Tracking {
        /// The joint that is off.
        joint: String,
        /// The servo's bus id.
        id: u8,
        /// How far the joint is from its goal (rad).
        error_rad: f64,
        /// The largest distance the driver accepts (rad).
        allowed_rad: f64,
    },
    /// A trajectory or command that does not fit this arm (wrong number of joints).
    #[error("{0}")]
    Command(String),
}
