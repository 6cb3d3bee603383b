//! Robot models and kinematics: URDF → `k` chain, forward kinematics, Jacobian and inverse kinematics.
//!
//! `k` 0.32 parses the URDF and does FK and the geometric Jacobian; IK runs on a flattened copy of
//! the chain checked against it (`chain`). On top of that sits our own damped
//! least-squares IK with joint limits and random restarts, because `k::JacobianIkSolver` solves only a
//! fraction of random reachable poses (measured in `pointact bench ik`).

mod chain;
mod config;
mod error;
mod ik;
mod model;

pub use config::{GripperConfig, LimitsConfig, RobotConfig, WorkspaceBox};
pub use error::{IkError, KinematicsError};
pub use ik::{IkOptions, IkSolution, IkSolver};
pub use model::{pose_error, JointLimit, LinkShape, RobotModel, BUILTIN_ROBOTS};
