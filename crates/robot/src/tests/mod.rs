//! Tests that name the crate's internals (protocol tables, encoders, private helpers): they
//! live inside the crate so that what they reach need not be public.

mod dynamixel_proto;
// The workspace's shared fuzzing helpers; these tests use part of them.
mod dynamixel_fuzz;
#[allow(dead_code)]
#[path = "../../../../tests/common/fuzz.rs"]
mod fuzz;
mod robot_servo;
mod robot_settings;
mod widowx_emulator;
mod xarm_client;
mod xarm_link_faults;
mod xarm_proto_fuzz;
