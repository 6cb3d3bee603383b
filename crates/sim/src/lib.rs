//! Built-in tabletop simulator, a *world* for the runner: scenes from TOML, rigid-body physics
//! (rapier3d) for the objects, the robot driven kinematically from joint commands (`SimRobot`), a
//! ray-cast RGB-D camera (`SimCamera`) whose ground-truth labels stay in the world, the oracle
//! pointer that reads them, and task suites whose success is judged from the final object poses
//! only. It imports no executor: `runner` connects the world to the executor.
//!
//! The world frame of a simulation is the robot base frame (x forward, z up, metres); the table top
//! is the plane z = `scene.table.height` (usually 0: the robot base stands on the table).

#![warn(missing_docs)]

mod beside;
mod convert;
pub mod devices;
pub(crate) mod judge;
pub(crate) mod objects;
pub mod oracle;
pub(crate) mod physics;
pub mod render;
pub mod scene;
pub mod tasks;

pub use judge::{judge, Judgement};
pub use physics::{Contact, ContactWith, PhysicsError, RobotTouch, SimWorld, ToolVisual, Toucher};

use k::nalgebra::Isometry3;

use pointact_core::geometry::Shape;

/// Instance id 0 is "nothing" (background); the table is 1; scene objects count from 2;
/// robot links use `ROBOT_INSTANCE`.
pub const BACKGROUND_INSTANCE: u16 = 0;
/// Instance id of the table.
pub const TABLE_INSTANCE: u16 = 1;
/// Instance id of the first scene object; object `i` (file order) is `FIRST_OBJECT_INSTANCE + i`.
pub const FIRST_OBJECT_INSTANCE: u16 = 2;
/// Instance id shared by every robot link (and the attached tool).
pub const ROBOT_INSTANCE: u16 = u16::MAX;
/// Part id 0 means "no named part".
pub const NO_PART: u8 = 0;

/// One solid to draw: what the camera sees of the world at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Primitive {
    /// Geometry, centred on its own origin.
    pub shape: Shape,
    /// Pose of the shape in the world (robot base) frame.
    pub world_from_shape: Isometry3<f64>,
    /// Linear RGB albedo in [0, 1].
    pub color: [f32; 3],
    /// Ground-truth instance id drawn in the label image (see `BACKGROUND_INSTANCE` and the rest).
    pub instance: u16,
    /// Functional part (e.g. a mug's handle) within the instance; `NO_PART` for none.
    pub part: u8,
    /// A pattern printed on the shape's +z face (cuboids only; `color` shades the other faces).
    /// `None` for plain solids: everything but calibration targets.
    pub texture: Option<std::sync::Arc<render::FaceTexture>>,
}

/// Everything the renderer needs; produced by the physics world each frame.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RenderScene {
    /// Every solid in the world: table, objects, robot links and the tool attached to them.
    pub primitives: Vec<Primitive>,
}

#[cfg(test)]
mod tests;
