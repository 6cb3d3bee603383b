//! UFACTORY xArm controller: its private TCP protocol (`proto`, pure codec shared by both sides of
//! the wire) and a loopback emulator of the controller (`emulator`) for tests and demos.
//! The async client and the `Robot` implementation sit on top of `proto` (issue #12).

pub mod emulator;
pub mod proto;
