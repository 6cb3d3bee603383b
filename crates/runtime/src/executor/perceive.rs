//! From frame pixels to base-frame geometry for the executor (points themselves are lifted by
//! `camera::lift`): cast a pixel ray onto a horizontal plane, find the table, and cut the object under a point out of the depth image to get
//! its top, extent and principal axis (the grasp yaw).

use k::nalgebra::{Point3, Vector3};

use pointact_core::camera::lift::LiftError;
use pointact_core::camera::Frame;
use pointact_core::geometry::{
    fit_table_plane, CloudOptions, CropBox, GeometryError, PlaneOptions, RayTable,
};
use pointact_core::planning::{cloud_field, CloudWorldOptions, Sphere, World, WorldError};

/// Why the depth image could not give the geometry a plan needs.
#[derive(Debug, thiserror::Error)]
pub enum PerceiveError {
    /// A pixel could not be lifted or deprojected through the camera intrinsics.
    #[error(transparent)]
    Lift(#[from] LiftError),
    /// A pixel's ray is parallel to the plane or meets it behind the camera.
    #[error(
        "pixel ({u:.1}, {v:.1}) does not look at the plane z = {z:.3} m in front of the camera"
    )]
    NoRayHit {
        /// Pixel column, px.
        u: f64,
        /// Pixel row, px.
        v: f64,
        /// Height of the plane, base frame, m.
        z: f64,
    },
    /// RANSAC found no table plane in the cloud under the workspace.
    #[error("cannot find the table plane under the workspace: {0} (is the camera pose in the calibration file right?)")]
    Table(GeometryError),
    /// A point lifted from the image lies outside the robot's workspace box (allowing 10 cm below
    /// its floor), which usually means a wrong camera pose.
    #[error("the {what} lifts to ({x:.3}, {y:.3}, {z:.3}) m in the robot base frame, outside the workspace box: is the camera pose in the calibration file right?")]
    OutsideWorkspace {
        /// Which point, e.g. "place point".
        what: &'static str,
        /// Base-frame x, m.
        x: f64,
        /// Base-frame y, m.
        y: f64,
        /// Base-frame z, m.
        z: f64,
    },
    /// No depth point stands above the table near the pixel (or the answer had no points: then
    /// the pixel is (-1, -1)).
    #[error("nothing stands on the table at pixel ({u:.1}, {v:.1})")]
    NoObject {
        /// Pixel column, px.
        u: f64,
        /// Pixel row, px.
        v: f64,
    },
    /// The pixel falls on the robot itself and no object segment is near it.
    #[error("pixel ({u:.1}, {v:.1}) is on the robot, and no object is near it")]
    OnRobot {
        /// Pixel column, px.
        u: f64,
        /// Pixel row, px.
        v: f64,
    },
    /// No spot on or beside the target can take the object.
    #[error("no place to put the object: {why}")]
    NoPlace {
        /// What ruled the place out.
        why: String,
    },
    /// The object is wider across the closing direction than the gripper opens.
    #[error("the object is {width_m:.3} m wide where the fingers close; the gripper opens to {open_m:.3} m")]
    TooWide {
        /// Measured width where the fingers would close, m.
        width_m: f64,
        /// The gripper's full opening, m.
        open_m: f64,
    },
    /// Building the point cloud or a fit on it failed.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// The obstacle field for free-space moves could not be built from the depth cloud.
    #[error("obstacles from depth: {0}")]
    World(#[from] WorldError),
}

/// Where the ray through pixel `px` meets the horizontal plane at height `z` (base frame). Used for
/// the middle points of a visual trace, whose own depth would hit the table behind them.
pub(crate) fn ray_to_height(
    frame: &Frame,
    px: [f64; 2],
    z: f64,
) -> Result<Point3<f64>, PerceiveError> {
    let dir_cam = frame.intrinsics.deproject(px, 1.0)?;
    let origin = frame.base_from_camera * Point3::origin();
    let dir: Vector3<f64> = frame.base_from_camera.rotation * dir_cam;
    let miss = PerceiveError::NoRayHit {
        u: px[0],
        v: px[1],
        z,
    };
    if dir.z.abs() < 1e-9 {
        return Err(miss);
    }
    let t = (z - origin.z) / dir.z;
    if !(t.is_finite() && t > 0.0) {
        return Err(miss);
    }
    Ok(origin + dir * t)
}

/// The table as the depth sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Table {
    /// Height of its top under the base origin (m).
    pub z: f64,
    /// How high above it a point must stand to belong to an object (m): 4 mm, or three times the
    /// depth noise measured on the table itself (a RealSense at a metre: about a centimetre).
    pub min_object_height: f64,
}

/// The table top in the base frame, by RANSAC on the cloud inside `crop`.
pub(crate) fn table_height(frame: &Frame, crop: CropBox) -> Result<Table, PerceiveError> {
    let rays = RayTable::new(&frame.intrinsics)?;
    let cloud = rays.cloud(
        &frame.depth,
        &frame.base_from_camera,
        &CloudOptions {
            stride: 4,
            crop: Some(crop),
            ..CloudOptions::default()
        },
    )?;
    let plane =
        fit_table_plane(&cloud.points, &PlaneOptions::default()).map_err(PerceiveError::Table)?;
    // z of the plane under the origin: n·p = offset → z = offset / n_z.
    Ok(Table {
        z: plane.offset / plane.normal.z,
        min_object_height: (3.0 * plane.rms_m).max(0.004),
    })
}

/// The object under a pixel, cut out of the depth image.
#[derive(Debug, Clone)]
pub(crate) struct ObjectBlob {
    /// Base-frame points of the object surface seen by the camera.
    pub points: Vec<Point3<f64>>,
    /// The image pixels of `points` (index `v · width + u`, same order).
    pub pixels: Vec<usize>,
    /// Highest point near the seed (m).
    pub top_z: f64,
    /// Centroid of the points.
    pub centroid: Point3<f64>,
    /// Horizontal direction (yaw, rad) across which the object is narrowest: the fingers should
    /// close along it. Found by sweeping the footprint's width over directions (calipers), which
    /// is well defined for square blocks where the principal axes are not.
    pub narrow_yaw: f64,
    /// The footprint width along `narrow_yaw` (m).
    pub narrow_width: f64,
    /// Spread along the major horizontal axis (m, 2·√eigenvalue·√3: a box's length).
    pub major_extent: f64,
}

/// Region-grows from `px` over neighbouring pixels whose 3D points stand more than `min_height`
/// above the table and continue the surface (depth steps under 1.5 cm), within `max_radius` of the
/// seed. The seed is the nearest such pixel within 6 px, so a point on an object edge still works.
pub(crate) fn object_blob(
    frame: &Frame,
    px: [f64; 2],
    table_z: f64,
    min_height: f64,
    max_radius: f64,
) -> Result<ObjectBlob, PerceiveError> {
    let (w, h) = (frame.depth.width, frame.depth.height);
    let point_at = |u: usize, v: usize| -> Option<Point3<f64>> {
        let d = frame.depth.get(u, v)?;
        if !(d.is_finite() && d > 0.0) {
            return None;
        }
        let p = frame
            .intrinsics
            .deproject([u as f64, v as f64], d as f64)
            .ok()?;
        let b = frame.base_from_camera * Point3::from(p);
        (b.z > table_z + min_height).then_some(b)
    };
    let no_object = || PerceiveError::NoObject { u: px[0], v: px[1] };
    let (cu, cv) = (px[0].round() as i64, px[1].round() as i64);
    let mut seed = None;
    'search: for r in 0..=6i64 {
        for dv in -r..=r {
            for du in -r..=r {
                if du.abs().max(dv.abs()) != r {
                    continue;
                }
                let (u, v) = (cu + du, cv + dv);
                if u < 0 || v < 0 || u >= w as i64 || v >= h as i64 {
                    continue;
                }
                if let Some(p) = point_at(u as usize, v as usize) {
                    seed = Some((u as usize, v as usize, p));
                    break 'search;
                }
            }
        }
    }
    let (su, sv, sp) = seed.ok_or_else(no_object)?;
    let mut seen = vec![false; w * h];
    let mut stack = vec![(su, sv, sp)];
    seen[sv * w + su] = true;
    let mut points = Vec::new();
    let mut pixels = Vec::new();
    while let Some((u, v, p)) = stack.pop() {
        points.push(p);
        pixels.push(v * w + u);
        let neighbours = [
            (u.wrapping_sub(1), v),
            (u + 1, v),
            (u, v.wrapping_sub(1)),
            (u, v + 1),
        ];
        for (nu, nv) in neighbours {
            if nu >= w || nv >= h || seen[nv * w + nu] {
                continue;
            }
            if let Some(np) = point_at(nu, nv) {
                if (np - p).norm() < 0.015 && (np - sp).xy().norm() < max_radius {
                    seen[nv * w + nu] = true;
                    stack.push((nu, nv, np));
                }
            }
        }
    }
    if points.len() < 5 {
        return Err(no_object());
    }
    let n = points.len() as f64;
    let centroid = Point3::from(points.iter().map(|p| p.coords).sum::<Vector3<f64>>() / n);
    let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
    for p in &points {
        let d = p - centroid;
        sxx += d.x * d.x;
        sxy += d.x * d.y;
        syy += d.y * d.y;
    }
    let (sxx, sxy, syy) = (sxx / n, sxy / n, syy / n);
    let tr = sxx + syy;
    let det = sxx * syy - sxy * sxy;
    let disc = (tr * tr / 4.0 - det).max(0.0).sqrt();
    let l1 = tr / 2.0 + disc;
    // Near the seed: the top of the part being grasped, not of the whole object.
    let top_z = points
        .iter()
        .filter(|p| (*p - sp).xy().norm() < 0.03)
        .map(|p| p.z)
        .fold(f64::NEG_INFINITY, f64::max);
    let (narrow_yaw, narrow_width) = narrowest_direction(&points);
    Ok(ObjectBlob {
        narrow_yaw,
        narrow_width,
        top_z: if top_z.is_finite() { top_z } else { sp.z },
        centroid,
        major_extent: 2.0 * (3.0 * l1).sqrt(),
        points,
        pixels,
    })
}

/// How wide the object is where top-down fingers close on it: the narrowest width of its points
/// within `depth` of its top (or of its upper half, when it is lower than twice that), so a
/// spoon lying on a towel is as wide as the spoon.
pub(crate) fn grip_width(blob: &ObjectBlob, table_z: f64, depth: f64) -> f64 {
    let top = blob
        .points
        .iter()
        .map(|p| p.z)
        .fold(f64::NEG_INFINITY, f64::max);
    let band = depth.min(0.5 * (top - table_z)).max(0.0) + 0.005;
    let upper: Vec<Point3<f64>> = blob
        .points
        .iter()
        .filter(|p| p.z >= top - band)
        .copied()
        .collect();
    if upper.len() < 3 {
        return blob.narrow_width;
    }
    narrowest_direction(&upper).1
}

/// The horizontal direction of least width of a point set, at 1° resolution over half a turn.
fn narrowest_direction(points: &[Point3<f64>]) -> (f64, f64) {
    let step = (points.len() / 600).max(1);
    let sample: Vec<&Point3<f64>> = points.iter().step_by(step).collect();
    let mut best = (0.0, f64::INFINITY);
    for i in 0..180 {
        let th = (i as f64).to_radians();
        let (c, s) = (th.cos(), th.sin());
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for p in &sample {
            let d = p.x * c + p.y * s;
            lo = lo.min(d);
            hi = hi.max(d);
        }
        if hi - lo < best.1 {
            best = (th, hi - lo);
        }
    }
    best
}

/// The world the planner and the gate check free-space moves against: the table, and the frame's
/// cloud inside `crop` (every second pixel) as a distance field (`planning::cloud_field`), without
/// the robot's own points and without `remove` (the object about to be grasped).
pub(crate) fn planning_world(
    frame: &Frame,
    table_z: f64,
    crop: CropBox,
    robot_spheres: &[Sphere],
    remove: &[Point3<f64>],
) -> Result<World, PerceiveError> {
    let rays = RayTable::new(&frame.intrinsics)?;
    let cloud = rays.cloud(
        &frame.depth,
        &frame.base_from_camera,
        &CloudOptions {
            stride: 2,
            crop: Some(crop),
            ..CloudOptions::default()
        },
    )?;
    let field = cloud_field(
        &cloud.points,
        table_z,
        robot_spheres,
        remove,
        &CloudWorldOptions {
            crop,
            ..CloudWorldOptions::default()
        },
    )?;
    Ok(World {
        field: Some(std::sync::Arc::new(field)),
        ..World::table(table_z)
    })
}

/// A 320×240 frame of a synthetic tabletop (exact depth, blank colour) from a camera at `eye`
/// looking at `target`: the executor's perception tests' input.
/// The medoid of an answer's points: the one nearest all the others, robust to a stray point.
pub(crate) fn medoid(points: &[[f64; 2]]) -> Option<[f64; 2]> {
    points
        .iter()
        .min_by(|a, b| {
            let cost = |p: &[f64; 2]| -> f64 {
                points
                    .iter()
                    .map(|q| ((p[0] - q[0]).powi(2) + (p[1] - q[1]).powi(2)).sqrt())
                    .sum()
            };
            cost(a).total_cmp(&cost(b))
        })
        .copied()
}

#[cfg(test)]
pub(crate) fn synthetic_frame(
    scene: &pointact_core::geometry::synthetic::TabletopScene,
    eye: Point3<f64>,
    target: Point3<f64>,
) -> Frame {
    let intrinsics =
        pointact_core::geometry::Intrinsics::pinhole(320, 240, 300.0, 300.0, 160.0, 120.0);
    let base_from_camera =
        pointact_core::geometry::synthetic::camera_look_at(eye, target, Vector3::z())
            .expect("pose");
    let rays = RayTable::new(&intrinsics).expect("rays");
    Frame {
        rgb: pointact_core::camera::RgbImage::new(320, 240),
        depth: scene.render(&rays, &base_from_camera),
        intrinsics,
        base_from_camera,
        stamp_s: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pointact_core::geometry::synthetic::{SceneBox, TabletopScene};

    fn frame_of(scene: &TabletopScene) -> Frame {
        synthetic_frame(
            scene,
            Point3::new(-0.2, 0.0, 0.9),
            Point3::new(0.45, 0.0, scene.table_height_m),
        )
    }

    /// The table's height, not its negative: tables above and below the robot base (the sim's
    /// tables are all at 0, where the sign does not show).
    #[test]
    fn table_height_is_the_plane_height_above_or_below_the_base() {
        for h in [-0.06, 0.0, 0.04] {
            let scene = TabletopScene {
                table_height_m: h,
                boxes: vec![SceneBox {
                    min: [0.4, -0.05, h],
                    max: [0.5, 0.05, h + 0.1],
                }],
            };
            let crop = CropBox {
                min: [0.1, -0.4, h - 0.1],
                max: [0.9, 0.4, h + 0.1],
            };
            let table = table_height(&frame_of(&scene), crop).expect("table");
            let z = table.z;
            assert!(table.min_object_height < 0.005, "exact depth: 4 mm");
            assert!((z - h).abs() < 1e-3, "table at {h}: found {z}");
            // The box on it is an object standing on that table.
            let frame = frame_of(&scene);
            let px = frame
                .intrinsics
                .project(
                    &(frame.base_from_camera.inverse() * Point3::new(0.45, 0.0, h + 0.1)).coords,
                )
                .expect("in view");
            let blob = object_blob(&frame, px, z, 0.004, 0.15).expect("the box");
            assert!((blob.top_z - (h + 0.1)).abs() < 2e-3, "{}", blob.top_z);
        }
    }
}
