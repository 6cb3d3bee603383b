//! Typed errors of the kinematics stage. Each names the file and the field at fault, because the
//! usual cause is a hand-edited robot description and the user needs to know where to look.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum KinematicsError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: invalid TOML: {detail}")]
    Toml { file: String, detail: String },
    #[error("{file}: invalid URDF: {detail}")]
    Urdf { file: String, detail: String },
    #[error("{file}: field `{field}`: {detail}")]
    Field {
        file: String,
        field: String,
        detail: String,
    },
    /// `or_folder`: where a folder holding robot.toml and its URDF is accepted too, the message
    /// says so (the simulator takes built-in robots only).
    #[error("unknown robot `{name}`: built-in robots are {known}{}", if *or_folder { "; or pass a folder holding robot.toml and its URDF" } else { "" })]
    UnknownRobot {
        name: String,
        known: String,
        or_folder: bool,
    },
    #[error("expected {expected} joint values, got {got}")]
    JointCount { expected: usize, got: usize },
    #[error("joint `{joint}` = {value} is outside its limits [{lower}, {upper}]")]
    OutOfLimits {
        joint: String,
        value: f64,
        lower: f64,
        upper: f64,
    },
    #[error("joint `{joint}` is not a finite number ({value})")]
    NonFinite { joint: String, value: f64 },
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum IkError {
    #[error("target pose is not finite")]
    NonFiniteTarget,
    #[error("seed has {got} joint values, the arm has {expected}")]
    SeedLength { expected: usize, got: usize },
    #[error(
        "pose unreachable: no IK solution after {attempts} attempts \
         (best residual {best_position_error_m:.2e} m, {best_rotation_error_rad:.2e} rad)"
    )]
    Unreachable {
        attempts: usize,
        best_position_error_m: f64,
        best_rotation_error_rad: f64,
    },
}
