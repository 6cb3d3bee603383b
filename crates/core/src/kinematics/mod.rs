//! Robot models and kinematics: URDF → `k` chain, forward kinematics, Jacobian and inverse kinematics.
//!
//! `k` 0.32 parses the URDF and does FK and the geometric Jacobian; on top of it sits our own damped
//! least-squares IK with joint limits and random restarts, because `k::JacobianIkSolver` solves only a
//! fraction of random reachable poses (measured in `pointact bench ik`).

mod config;
mod error;
mod ik;
mod model;

pub use config::LimitsConfig;
pub use config::WorkspaceBox;
pub use config::{GripperConfig, RobotConfig};
pub use error::{IkError, KinematicsError};
pub use ik::IkSolution;
pub use ik::{IkOptions, IkSolver};
pub use model::LinkShape;
pub use model::{pose_error, JointLimit, RobotModel, BUILTIN_ROBOTS};
