//! The world the arm moves in, as planning sees it: solids made from the live depth cloud. Planning
//! sees only points and shapes (never a camera or a simulator); the executor hands it the cloud.

use std::collections::BTreeSet;

use k::nalgebra::{Isometry3, Point3, Vector3};

use super::collision::{Obstacle, Sphere};
use crate::geometry::Shape;

/// Points above the table by less than this are the table itself, not an obstacle (m).
const ABOVE_TABLE: f64 = 0.015;
/// The arm's own points are recognised within this distance of its sphere cover (m).
const SELF_MARGIN: f64 = 0.02;

/// Occupied cubes of `voxel` metres over every base-frame point of `cloud` standing more than
/// 1.5 cm on the table at `table_z`, except near the `keep_out` discs (x, y, radius): the object
/// being grasped and the place it goes, which the gripper enters on purpose, and except points on
/// the robot itself (`robot_spheres`, base frame, grown by 2 cm: the camera sees the arm).
/// Collision-aware planning (a later issue) will use a finer model of the same cloud.
pub fn obstacle_voxels(
    cloud: &[[f32; 3]],
    table_z: f64,
    voxel: f64,
    keep_out: &[(f64, f64, f64)],
    robot_spheres: &[Sphere],
) -> Vec<Obstacle> {
    let mut cells = BTreeSet::new();
    for p in cloud {
        let (x, y, z) = (p[0] as f64, p[1] as f64, p[2] as f64);
        if z < table_z + ABOVE_TABLE {
            continue;
        }
        if keep_out
            .iter()
            .any(|(kx, ky, r)| (x - kx).powi(2) + (y - ky).powi(2) < r * r)
        {
            continue;
        }
        let q = Point3::new(x, y, z);
        if robot_spheres
            .iter()
            .any(|s| (q - s.center).norm() < s.radius + SELF_MARGIN)
        {
            continue;
        }
        cells.insert((
            (x / voxel).floor() as i64,
            (y / voxel).floor() as i64,
            (z / voxel).floor() as i64,
        ));
    }
    let h = voxel / 2.0;
    cells
        .into_iter()
        .map(|(i, j, k)| {
            let c = Vector3::new(i as f64 + 0.5, j as f64 + 0.5, k as f64 + 0.5) * voxel;
            Obstacle {
                name: format!("object at ({:.2}, {:.2}, {:.2})", c.x, c.y, c.z),
                shape: Shape::Cuboid {
                    half_extents: Vector3::new(h, h, h),
                },
                world_from_shape: Isometry3::translation(c.x, c.y, c.z),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn voxels_skip_table_keep_out_and_robot() {
        let cloud = [
            [0.40f32, 0.00, 0.005], // table
            [0.40, 0.00, 0.05],     // obstacle
            [0.50, 0.10, 0.05],     // inside keep-out
            [0.20, -0.2, 0.05],     // on the robot
        ];
        let robot = [Sphere {
            center: Point3::new(0.2, -0.2, 0.06),
            radius: 0.01,
        }];
        let v = obstacle_voxels(&cloud, 0.0, 0.03, &[(0.5, 0.1, 0.05)], &robot);
        assert_eq!(v.len(), 1);
        let c = v[0].world_from_shape.translation.vector;
        assert!((c - Vector3::new(0.405, 0.015, 0.045)).norm() < 1e-9, "{c}");
    }
}
