//! Geometry: from pixels and depth to 3D points, clouds, the table plane, normals and smooth
//! SE(3) paths in the robot base frame.
//!
//! Conventions (the project's): f64 for robot math, f32 for image-derived data; the camera frame is
//! OpenCV's (x right, y down, z forward); transforms are named `a_from_b`. Projection and
//! deprojection reproduce librealsense's `rsutil.h` bit for bit (see [`intrinsics`]), so points
//! lifted here agree with the SDK and with `pyrealsense2`.
//!
//! | submodule | holds |
//! | --- | --- |
//! | [`intrinsics`] | [`Intrinsics`], [`Distortion`], `project` / `deproject` |
//! | [`depth`] | [`DepthImage`], [`robust_depth`] |
//! | [`cloud`] | [`RayTable`], [`PointCloud`], [`depth_to_cloud`] |
//! | [`plane`] | [`fit_table_plane`] (RANSAC + least squares) |
//! | [`normals`] | organised-grid normals, PCA normal at a pixel |
//! | [`calibration`] | [`Extrinsics`], [`CameraCalibration`], TOML files |
//! | [`ee_delta`] | SimplerEnv's delta end-effector controller both ways, `[p, q wxyz]` poses |
//! | [`interp`] | [`SePath`]: Catmull-Rom + slerp through waypoints |
//! | `shape` | [`Shape`]: box, cylinder, sphere, capsule primitives shared by links, objects, camera, safety |
//! | [`synthetic`] | analytic tabletop depth images for tests and benchmarks, [`camera_look_at`] |

pub mod calibration;
pub(crate) mod cloud;
pub(crate) mod depth;
mod distortion;
pub mod ee_delta;
pub(crate) mod error;
pub mod interp;
pub(crate) mod intrinsics;
pub(crate) mod normals;
pub(crate) mod plane;
mod shape;
pub mod synthetic;

pub use cloud::{depth_to_cloud, CloudOptions, CropBox, PointCloud, RayTable};
pub(crate) use depth::robust_depth;
pub use depth::{DepthImage, RobustDepthOptions};
pub use error::GeometryError;
pub use intrinsics::{Distortion, Intrinsics};

pub use normals::{cloud_normals, normal_at_pixel, NormalAtPixelOptions, NormalOptions};
pub use plane::{fit_table_plane, Plane, PlaneOptions};
pub use shape::Shape;
