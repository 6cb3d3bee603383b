//! Motion planning, and the collision model it owns.
//!
//! * [`collision`]: spheres per link, exact link primitives for the table, obstacles
//!   ([`ArmCollisionModel`], [`Obstacle`]); the safety gate re-checks with this same model.
//! * [`spheres`]: the fitted sphere model per link and the allowed self-collision pairs (stored
//!   in `robot-configs/*/spheres.toml`); [`fk`]: the link tree's forward kinematics for it.
//! * [`world`] and [`field`]: the table, known solids and the live depth cloud as a Euclidean
//!   distance field ([`World`]).
//! * [`checker`]: the planner's (and the gate's transit) collision check ([`Checker`]).
//! * [`rrt`]: RRT-Connect and shortcutting.
//! * [`motion`]: the [`MotionPlanner`] seam, [`DirectPlanner`] (straight joint moves, IK-solved
//!   Cartesian paths) and [`RrtPlanner`] (collision-free IK and RRT-Connect for free-space
//!   moves), both producing the same [`Trajectory`].
//! * `trajectory`: joint-space paths and their time parameterisation under velocity and
//!   acceleration limits ([`Trajectory`], the type the safety gate checks).

pub(crate) mod checker;
pub(crate) mod collision;
pub(crate) mod field;
pub mod fk;
pub(crate) mod motion;
pub(crate) mod rrt;
pub(crate) mod spheres;
mod trajectory;
pub(crate) mod world;

pub use checker::{Attached, Checker, Hit};
pub(crate) use collision::ArmCollisionModel;
pub use collision::{link_spheres, robot_spheres, Contact, Obstacle, Sphere};
pub use motion::{fold_yaw, top_down, DirectPlanner, MotionError, MotionPlanner, RrtPlanner};
pub use rrt::{path_length, rrt_connect, RrtError, RrtOptions, RrtPath};
pub use spheres::{Allowed, SphereModel, SpheresError};
pub use trajectory::{limit_tool_speed, JointPath, Trajectory, TrajectoryError};
pub use world::{cloud_field, CloudWorldOptions, World, WorldError};
