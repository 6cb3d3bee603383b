//! Motion planning, and the collision model it owns.
//!
//! * [`collision`]: spheres per link, exact link primitives for the table, obstacles
//!   ([`ArmCollisionModel`], [`Obstacle`]); the safety gate re-checks with this same model.
//! * [`world`]: obstacles from the live depth cloud (occupied voxels).
//! * [`motion`]: the [`MotionPlanner`] seam and [`DirectPlanner`] (straight joint moves, IK-solved
//!   Cartesian paths); RRT-Connect on the sphere model arrives in a later issue as a second
//!   implementation producing the same [`Trajectory`].
//! * `trajectory`: joint-space paths and their time parameterisation under velocity and
//!   acceleration limits ([`Trajectory`], the type the safety gate checks).

pub mod checker;
pub mod collision;
pub mod field;
pub mod fk;
pub mod motion;
pub mod rrt;
pub mod spheres;
mod trajectory;
pub mod world;

pub use checker::{Attached, Checker, Hit};
pub use collision::{
    link_spheres, robot_spheres, shape_spheres, ArmCollisionModel, Contact, Obstacle, Sphere,
};
pub use field::DistanceField;
pub use fk::LinkTree;
pub use motion::{fold_yaw, top_down, DirectPlanner, MotionError, MotionPlanner};
pub use rrt::{path_length, rrt_connect, RrtError, RrtOptions, RrtPath};
pub use spheres::{Allowed, SphereModel, SpheresError};
pub use trajectory::{limit_tool_speed, JointPath, Trajectory, TrajectoryError};
pub use world::{cloud_field, obstacle_voxels, CloudWorldOptions, World, WorldError};
