//! UFACTORY xArm controller: its private TCP protocol (`proto`, pure codec shared by both sides of
//! the wire), a loopback emulator of the controller (`emulator`) for tests and demos, the async
//! client (`client`, with the report streams in `report` and the xArm Gripper in `gripper`) and the
//! `Robot` implementation on top of it (`driver::XarmRobot`).

pub(crate) mod client;
pub(crate) mod driver;
pub mod emulator;
mod gripper;
pub mod proto;
pub(crate) mod report;

pub use client::XarmClient;
pub use driver::XarmRobot;
