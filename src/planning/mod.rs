//! Motion planning. Today: joint-space paths and their time parameterisation under velocity and
//! acceleration limits (`Trajectory`), the type the safety gate checks. Collision-aware planning
//! (RRT-Connect on a sphere model of the arm) arrives in a later issue and will produce the same type.

mod trajectory;

pub use trajectory::{limit_tool_speed, JointPath, Trajectory, TrajectoryError};
