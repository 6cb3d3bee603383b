//! The simulated camera's geometry: an ideal pinhole (no distortion) in the OpenCV optical frame.

use k::nalgebra::{Isometry3, Point3, Vector3};

use super::RenderError;
use pointact_core::geometry::{Distortion, Intrinsics};

/// An ideal pinhole camera in the OpenCV optical frame (x right, y down, z forward, metres).
///
/// Pixel convention (the same as librealsense's `rs2_project_point_to_pixel` /
/// `rs2_deproject_pixel_to_point`): pixel coordinates are continuous, origin top-left, and **pixel
/// `(i, j)` is sampled at `(u, v) = (i, j)`**, i.e. pixel centres sit at integer coordinates. The
/// renderer shoots one ray per pixel through `x = (i − cx)/fx, y = (j − cy)/fy, z = 1`, so a depth
/// read at pixel `(i, j)` deprojects with the very formula the real pipeline uses
/// (`P = depth · [(i − cx)/fx, (j − cy)/fy, 1]`), and a point projected to `(u, v)` lands in the
/// pixel `(round(u), round(v))`. A centred principal point is therefore `((width − 1)/2,
/// (height − 1)/2)`, not `width/2`.
#[derive(Debug, Clone, PartialEq)]
pub struct PinholeCamera {
    /// The crate's one pinhole model; the renderer needs its distortion to be `None`.
    pub intrinsics: Intrinsics,
    /// Pose of the optical frame in the world (maps camera-frame points to world points).
    pub world_from_camera: Isometry3<f64>,
}

impl PinholeCamera {
    /// A camera at `eye` whose optical axis points at `target`; `up_hint` is the world direction
    /// that should appear "up" in the image (its component along the optical axis is ignored).
    pub fn look_at(
        eye: Point3<f64>,
        target: Point3<f64>,
        up_hint: Vector3<f64>,
        intrinsics: Intrinsics,
    ) -> Result<Self, RenderError> {
        let cam = PinholeCamera {
            intrinsics,
            world_from_camera: look_at_pose(&eye, &target, &up_hint)?,
        };
        cam.validate()?;
        Ok(cam)
    }

    /// Like [`PinholeCamera::look_at`] with square pixels from a horizontal field of view and the
    /// principal point at the image centre `((width − 1)/2, (height − 1)/2)`.
    pub fn look_at_hfov(
        eye: Point3<f64>,
        target: Point3<f64>,
        up_hint: Vector3<f64>,
        width: usize,
        height: usize,
        hfov_rad: f64,
    ) -> Result<Self, RenderError> {
        if !(hfov_rad > 0.0 && hfov_rad < std::f64::consts::PI) {
            return Err(RenderError::InvalidIntrinsics(format!(
                "horizontal field of view {hfov_rad} rad is not in (0, pi)"
            )));
        }
        let f = width as f64 / (2.0 * (hfov_rad / 2.0).tan());
        let c = |n: usize| (n as f64 - 1.0) / 2.0;
        Self::look_at(
            eye,
            target,
            up_hint,
            Intrinsics::pinhole(width, height, f, f, c(width), c(height)),
        )
    }

    /// Image width in pixels.
    pub fn width(&self) -> u32 {
        self.intrinsics.width as u32
    }

    /// Image height in pixels.
    pub fn height(&self) -> u32 {
        self.intrinsics.height as u32
    }

    /// Checks what would make rendering meaningless (zero-sized image, non-positive focal length).
    /// (The renderer shoots ideal pinhole rays: a distortion model is refused, not ignored.)
    pub fn validate(&self) -> Result<(), RenderError> {
        let i = &self.intrinsics;
        i.validate()
            .map_err(|e| RenderError::InvalidIntrinsics(e.to_string()))?;
        if i.width > u32::MAX as usize || i.height > u32::MAX as usize {
            return Err(RenderError::InvalidIntrinsics(format!(
                "image size {}x{} is too large",
                i.width, i.height
            )));
        }
        if i.model != Distortion::None {
            return Err(RenderError::InvalidIntrinsics(format!(
                "the renderer is an ideal pinhole; distortion model {} is not drawn",
                i.model.name()
            )));
        }
        Ok(())
    }

    pub(crate) fn camera_from_world(&self) -> Isometry3<f64> {
        self.world_from_camera.inverse()
    }

    /// Direction of the ray through pixel coordinates `(u, v)` in the camera frame, scaled so that
    /// its z component is 1: a ray parameter `t` is then directly the z-depth of the point.
    pub fn ray_camera(&self, u: f64, v: f64) -> Vector3<f64> {
        let i = &self.intrinsics;
        Vector3::new((u - i.cx) / i.fx, (v - i.cy) / i.fy, 1.0)
    }

    /// Camera-frame point seen at pixel coordinates `(u, v)` with z-depth `depth_m`
    /// (librealsense's deprojection without distortion).
    pub fn deproject(&self, u: f64, v: f64, depth_m: f64) -> Point3<f64> {
        Point3::from(self.ray_camera(u, v) * depth_m)
    }

    /// World point seen at pixel coordinates `(u, v)` with z-depth `depth_m`.
    pub fn deproject_world(&self, u: f64, v: f64, depth_m: f64) -> Point3<f64> {
        self.world_from_camera * self.deproject(u, v, depth_m)
    }

    /// Pixel coordinates `(u, v)` and z-depth of a camera-frame point; `None` behind the camera.
    pub fn project_camera(&self, p: &Point3<f64>) -> Option<(f64, f64, f64)> {
        let i = &self.intrinsics;
        (p.z > 0.0).then(|| (i.fx * p.x / p.z + i.cx, i.fy * p.y / p.z + i.cy, p.z))
    }

    /// Pixel coordinates `(u, v)` and z-depth of a world point; `None` behind the camera.
    pub fn project_world(&self, p: &Point3<f64>) -> Option<(f64, f64, f64)> {
        self.project_camera(&(self.world_from_camera.inverse_transform_point(p)))
    }
}

/// OpenCV optical frame at `eye` looking at `target` (the one look-at of the crate,
/// `geometry::camera_look_at`), with the renderer's error type.
fn look_at_pose(
    eye: &Point3<f64>,
    target: &Point3<f64>,
    up_hint: &Vector3<f64>,
) -> Result<Isometry3<f64>, RenderError> {
    if !(eye.iter().chain(target.iter()).all(|v| v.is_finite())) {
        return Err(RenderError::DegenerateLookAt(format!(
            "eye {eye:?} and target {target:?} are not finite"
        )));
    }
    pointact_core::geometry::synthetic::camera_look_at(*eye, *target, *up_hint).map_err(|_| {
        RenderError::DegenerateLookAt(format!(
            "eye {eye:?}, target {target:?} and up hint {up_hint:?}: the points coincide or the view is parallel to up"
        ))
    })
}
