//! Tests that name the crate's internals (protocol tables, encoders, private helpers): they
//! live inside the crate so that what they reach need not be public.

mod camera_net;
#[cfg(feature = "realsense")]
mod camera_realsense;
mod camera_realsense_logic;
mod camera_replay;
mod geometry_calibration;
mod geometry_cloud;
mod geometry_golden;
mod geometry_interp;
mod geometry_plane;
mod keyframes_golden;
mod safety;
#[allow(dead_code)]
#[path = "../../../../tests/common/temp.rs"]
mod temp;
