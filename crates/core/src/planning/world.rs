//! The world the arm moves in, as planning sees it: the table plane, named solids, and the live
//! depth cloud as a distance field ([`World`]). Planning sees only points and shapes (never a
//! camera or a simulator); the executor hands it the cloud.

use std::collections::HashSet;

use k::nalgebra::Point3;

use super::collision::{Obstacle, Sphere};
use super::field::DistanceField;
use crate::geometry::CropBox;

/// What the planner must keep clear of.
#[derive(Debug, Clone, PartialEq)]
pub struct World {
    /// Height of the table top (m): the plane every moving sphere stays above.
    pub table_z: f64,
    /// Spheres stay this far above the table (m).
    pub table_margin: f64,
    /// Known solids (fixtures, boxes, shelves).
    pub boxes: Vec<Obstacle>,
    /// The depth cloud's occupied voxels, when a cloud was given (shared: the planner and the
    /// gate read one field).
    pub field: Option<std::sync::Arc<DistanceField>>,
}

impl World {
    /// Only the table.
    pub fn table(table_z: f64) -> World {
        World {
            table_z,
            table_margin: 0.005,
            boxes: Vec::new(),
            field: None,
        }
    }
}

/// Why a depth cloud could not be turned into a [`World`]'s distance field.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WorldError {
    /// No point survived: all non-finite or outside the crop box.
    #[error("the depth cloud holds no usable point ({total} given, {non_finite} not finite, none of the rest inside the crop box)")]
    EmptyCloud {
        /// Points given.
        total: usize,
        /// Points with a NaN or infinite coordinate.
        non_finite: usize,
    },
    /// A [`CloudWorldOptions`] value out of range.
    #[error("{field}: {reason}")]
    Option {
        /// The option's name.
        field: &'static str,
        /// Why its value is invalid.
        reason: String,
    },
}

/// How a cloud becomes a [`DistanceField`].
#[derive(Debug, Clone, PartialEq)]
pub struct CloudWorldOptions {
    /// Base-frame box of points kept (the workspace, a little beyond).
    pub crop: CropBox,
    /// Cell edge (m).
    pub voxel: f64,
    /// Points closer than this to the table top are the table (m).
    pub above_table: f64,
    /// Occupy each point's column down to the table: the camera sees the top and the front of an
    /// object, the rest of it is below what it sees.
    pub fill_down: bool,
    /// Grid padding beyond the crop (m): free cells there give spheres near the crop's edge tight
    /// distances (a sphere centred outside the grid is judged from the nearest cell, looser).
    pub pad: f64,
}

impl Default for CloudWorldOptions {
    fn default() -> Self {
        CloudWorldOptions {
            crop: CropBox {
                min: [-1.0, -1.0, -0.5],
                max: [1.0, 1.0, 1.0],
            },
            voxel: 0.01,
            above_table: ABOVE_TABLE,
            fill_down: true,
            pad: 0.12,
        }
    }
}

/// The distance field of `cloud` (base frame) standing on the table at `table_z`: points on the
/// robot itself (within 2 cm of `robot_spheres`) and points of `remove` (cells within one voxel of
/// them: the object being grasped, which the fingers enter on purpose) are left out. NaN and
/// infinite points are skipped; a cloud with nothing left is an error (planning on an empty world
/// would be a guess, not a plan).
pub fn cloud_field(
    cloud: &[[f32; 3]],
    table_z: f64,
    robot_spheres: &[Sphere],
    remove: &[Point3<f64>],
    o: &CloudWorldOptions,
) -> Result<DistanceField, WorldError> {
    if !(o.voxel.is_finite() && o.voxel >= 0.002 && o.voxel <= 0.1) {
        return Err(WorldError::Option {
            field: "voxel",
            reason: format!("{} m is outside [0.002, 0.1]", o.voxel),
        });
    }
    if !(o.pad.is_finite() && o.pad >= 0.0 && table_z.is_finite()) {
        return Err(WorldError::Option {
            field: "pad",
            reason: "pad and table height must be finite".into(),
        });
    }
    let v = o.voxel;
    let key = |p: &Point3<f64>| {
        [
            (p.x / v).floor() as i64,
            (p.y / v).floor() as i64,
            (p.z / v).floor() as i64,
        ]
    };
    let mut removed: HashSet<[i64; 3]> = HashSet::new();
    for p in remove
        .iter()
        .filter(|p| p.coords.iter().all(|c| c.is_finite()))
    {
        let [i, j, k] = key(p);
        for di in -1..=1 {
            for dj in -1..=1 {
                for dk in -1..=1 {
                    removed.insert([i + di, j + dj, k + dk]);
                }
            }
        }
    }
    let floor = table_z + o.above_table;
    let mut cells: HashSet<[i64; 3]> = HashSet::new();
    let (mut non_finite, mut usable) = (0, 0);
    for p in cloud {
        if !p.iter().all(|c| c.is_finite()) {
            non_finite += 1;
            continue;
        }
        let q = Point3::new(p[0] as f64, p[1] as f64, p[2] as f64);
        if !o.crop.contains([q.x, q.y, q.z]) {
            continue;
        }
        usable += 1;
        if q.z < floor {
            continue;
        }
        if robot_spheres
            .iter()
            .any(|s| (q - s.center).norm() < s.radius + SELF_MARGIN)
        {
            continue;
        }
        let c = key(&q);
        if removed.contains(&c) {
            continue;
        }
        cells.insert(c);
    }
    if usable == 0 {
        return Err(WorldError::EmptyCloud {
            total: cloud.len(),
            non_finite,
        });
    }
    let lo = |a: usize| ((o.crop.min[a] - o.pad) / v).floor() as i64;
    let hi = |a: usize| ((o.crop.max[a] + o.pad) / v).ceil() as i64;
    let start = [lo(0), lo(1), ((table_z - o.pad) / v).floor() as i64];
    let dims = [
        (hi(0) - start[0]).max(1) as usize,
        (hi(1) - start[1]).max(1) as usize,
        (hi(2) - start[2]).max(1) as usize,
    ];
    let mut occ = vec![false; dims[0] * dims[1] * dims[2]];
    let table_cell = (floor / v).floor() as i64;
    for c in &cells {
        let (i, j) = ((c[0] - start[0]) as usize, (c[1] - start[1]) as usize);
        let bottom = if o.fill_down {
            table_cell.max(start[2])
        } else {
            c[2]
        };
        for k in bottom..=c[2] {
            if removed.contains(&[c[0], c[1], k]) {
                continue;
            }
            let k = (k - start[2]) as usize;
            if i < dims[0] && j < dims[1] && k < dims[2] {
                occ[(i * dims[1] + j) * dims[2] + k] = true;
            }
        }
    }
    let origin = Point3::new(start[0] as f64, start[1] as f64, start[2] as f64) * v;
    Ok(DistanceField::from_occupancy(origin, v, dims, &occ))
}

/// Points above the table by less than this are the table itself, not an obstacle (m).
const ABOVE_TABLE: f64 = 0.015;
/// The arm's own points are recognised within this distance of its sphere cover (m).
const SELF_MARGIN: f64 = 0.02;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_field_fills_down_removes_the_target_and_refuses_an_empty_cloud() {
        let o = CloudWorldOptions {
            crop: CropBox {
                min: [0.0, -0.3, -0.1],
                max: [0.6, 0.3, 0.5],
            },
            ..CloudWorldOptions::default()
        };
        // The top of a 10 cm block at (0.40, 0.10) and the top of the target at (0.30, -0.10).
        let mut cloud = Vec::new();
        for i in 0..5 {
            for j in 0..5 {
                let (dx, dy) = (i as f32 * 0.005, j as f32 * 0.005);
                cloud.push([0.40 + dx, 0.10 + dy, 0.10]);
                cloud.push([0.30 + dx, -0.10 + dy, 0.06]);
            }
        }
        cloud.push([f32::NAN, 0.0, 0.0]);
        cloud.push([0.2, 0.0, 0.001]); // table
        let target: Vec<Point3<f64>> = cloud
            .iter()
            .filter(|p| p[2] > 0.05 && p[2] < 0.07)
            .map(|p| Point3::new(p[0] as f64, p[1] as f64, p[2] as f64))
            .collect();
        let f = cloud_field(&cloud, 0.0, &[], &target, &o).expect("field");
        let hits = |x: f64, y: f64, z: f64| f.sphere_hits(&Point3::new(x, y, z), 0.005);
        // The block's column is solid from its top down to the table.
        assert!(hits(0.41, 0.11, 0.10) && hits(0.41, 0.11, 0.05) && hits(0.41, 0.11, 0.025));
        // Above it is free, and so is the removed target and the table itself.
        assert!(!hits(0.41, 0.11, 0.16));
        assert!(!hits(0.31, -0.09, 0.06) && !hits(0.31, -0.09, 0.03));
        assert!(!hits(0.2, 0.0, 0.04));
        // Without the removal the target is an obstacle.
        let g = cloud_field(&cloud, 0.0, &[], &[], &o).expect("field");
        assert!(g.sphere_hits(&Point3::new(0.31, -0.09, 0.03), 0.005));
        // The robot's own points are not obstacles.
        let robot = [Sphere {
            center: Point3::new(0.41, 0.11, 0.12),
            radius: 0.03,
        }];
        let h = cloud_field(&cloud, 0.0, &robot, &[], &o).expect("field");
        assert!(!h.sphere_hits(&Point3::new(0.41, 0.11, 0.05), 0.005));
        // Nothing usable: an error that says so.
        let bad = [[f32::NAN, 0.0, 0.0], [5.0, 5.0, 5.0]];
        assert_eq!(
            cloud_field(&bad, 0.0, &[], &[], &o),
            Err(WorldError::EmptyCloud {
                total: 2,
                non_finite: 1
            })
        );
        assert!(cloud_field(&[], 0.0, &[], &[], &o).is_err());
    }
}
