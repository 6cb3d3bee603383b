//! Typed errors of the kinematics stage. Each names the file and the field at fault, because the
//! usual cause is a hand-edited robot description and the user needs to know where to look.

use std::path::PathBuf;

/// Errors of loading a robot description and of checking joint values against it.
#[derive(Debug, thiserror::Error)]
pub enum KinematicsError {
    /// A robot description file that is missing or cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `robot.toml` is not valid TOML or does not match the expected layout.
    #[error("{file}: invalid TOML: {detail}")]
    Toml {
        /// The file.
        file: String,
        /// The parser's message.
        detail: String,
    },
    /// The URDF does not parse or cannot be turned into a kinematic chain.
    #[error("{file}: invalid URDF: {detail}")]
    Urdf {
        /// The file.
        file: String,
        /// The parser's message.
        detail: String,
    },
    /// A field that parses but has an unusable value, or disagrees with the URDF.
    #[error("{file}: field `{field}`: {detail}")]
    Field {
        /// The file.
        file: String,
        /// The offending field.
        field: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A robot name that is not built in.
    ///
    /// `or_folder`: where a folder holding robot.toml and its URDF is accepted too, the message
    /// says so (the simulator takes built-in robots only).
    #[error("unknown robot `{name}`: built-in robots are {known}{}", if *or_folder { "; or pass a folder holding robot.toml and its URDF" } else { "" })]
    UnknownRobot {
        /// The name asked for.
        name: String,
        /// The built-in robots' names, comma-separated.
        known: String,
        /// Whether a folder would have been accepted instead of a name.
        or_folder: bool,
    },
    /// A joint vector whose length differs from the arm's number of joints.
    #[error("expected {expected} joint values, got {got}")]
    JointCount {
        /// The arm's number of joints.
        expected: usize,
        /// Values given.
        got: usize,
    },
    /// A joint value outside the joint's limits.
    #[error("joint `{joint}` = {value} is outside its limits [{lower}, {upper}]")]
    OutOfLimits {
        /// The joint's name.
        joint: String,
        /// The value given (rad, or m for a prismatic joint).
        value: f64,
        /// Its lower limit, same unit.
        lower: f64,
        /// Its upper limit, same unit.
        upper: f64,
    },
    /// A joint value that is NaN or infinite.
    #[error("joint `{joint}` is not a finite number ({value})")]
    NonFinite {
        /// The joint's name.
        joint: String,
        /// The value given.
        value: f64,
    },
}

/// Why inverse kinematics found no joint configuration.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum IkError {
    /// The target pose has a NaN or infinite component.
    #[error("target pose is not finite")]
    NonFiniteTarget,
    /// The seed's length differs from the arm's number of joints.
    #[error("seed has {got} joint values, the arm has {expected}")]
    SeedLength {
        /// The arm's number of joints.
        expected: usize,
        /// Values in the seed.
        got: usize,
    },
    /// No attempt converged within tolerance; the best residual is reported.
    #[error(
        "pose unreachable: no IK solution after {attempts} attempts \
         (best residual {best_position_error_m:.2e} m, {best_rotation_error_rad:.2e} rad)"
    )]
    Unreachable {
        /// Attempts made (the configured maximum).
        attempts: usize,
        /// Position error of the best attempt (smallest position + rotation error), m.
        best_position_error_m: f64,
        /// Rotation error of the best attempt, rad.
        best_rotation_error_rad: f64,
    },
}
