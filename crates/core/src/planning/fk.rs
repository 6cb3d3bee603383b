//! Forward kinematics of every link, compiled once from the URDF for the planner's inner loop.
//!
//! `RobotModel::link_poses` goes through `k`: a mutex, a joint-name search per node and a fresh
//! `Vec` of named poses per call, several microseconds. A collision check runs it thousands of
//! times per plan, so planning flattens the tree into an array in parent-before-child order and
//! fills a reusable buffer of poses. The result is the same as `link_poses` (tested to 1e-12).

use k::nalgebra::{Isometry3, Translation3, Unit, UnitQuaternion, Vector3};

use crate::kinematics::{KinematicsError, RobotModel};

/// How a node moves relative to its parent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Motion {
    /// A fixed joint (or the root): the node sits at its origin.
    Fixed,
    /// About `axis` by the arm joint `q[index]`.
    ArmRevolute {
        /// Rotation axis in the joint frame.
        axis: Unit<Vector3<f64>>,
        /// Index of the joint in the arm's joint vector.
        index: usize,
    },
    /// Along `axis` by the arm joint `q[index]`.
    ArmPrismatic {
        /// Translation axis in the joint frame.
        axis: Unit<Vector3<f64>>,
        /// Index of the joint in the arm's joint vector.
        index: usize,
    },
    /// A joint outside the arm (a finger): at `lower + opening × (upper − lower)`, as
    /// `RobotModel::link_poses` places it.
    Gripper {
        /// Joint axis in the joint frame.
        axis: Unit<Vector3<f64>>,
        /// Slides along `axis` when true, turns about it when false.
        prismatic: bool,
        /// Joint position at opening 0, rad (or m if prismatic).
        lower: f64,
        /// Joint position at opening 1, same unit.
        upper: f64,
    },
}

/// One link of the flattened tree.
#[derive(Debug, Clone)]
pub struct Node {
    /// The link's URDF name.
    pub link: String,
    /// Index of the parent node, `None` for the root link.
    pub parent: Option<usize>,
    /// Parent link frame → joint frame (the URDF joint origin; identity for the root).
    pub origin: Isometry3<f64>,
    /// How the joint moves the link relative to `origin`.
    pub motion: Motion,
}

/// The robot's links in parent-before-child order.
#[derive(Debug, Clone)]
pub struct LinkTree {
    nodes: Vec<Node>,
    dof: usize,
}

impl LinkTree {
    /// Flattens `model`'s URDF. Every link reachable from the root becomes a node.
    pub(crate) fn new(model: &RobotModel) -> Result<LinkTree, KinematicsError> {
        let urdf = &model.urdf;
        let arm = &model.config.arm_joints;
        let is_child = |l: &str| urdf.joints.iter().any(|j| j.child.link == l);
        let root = urdf
            .links
            .iter()
            .find(|l| !is_child(&l.name))
            .ok_or_else(|| KinematicsError::Urdf {
                file: model.source.clone(),
                detail: "no root link (every link is some joint's child)".into(),
            })?;
        let mut nodes = vec![Node {
            link: root.name.clone(),
            parent: None,
            origin: Isometry3::identity(),
            motion: Motion::Fixed,
        }];
        // Breadth-first from the root: a parent is always placed before its children.
        let mut i = 0;
        while i < nodes.len() {
            let parent_link = nodes[i].link.clone();
            for j in urdf.joints.iter().filter(|j| j.parent.link == parent_link) {
                let axis =
                    Unit::new_normalize(Vector3::new(j.axis.xyz[0], j.axis.xyz[1], j.axis.xyz[2]));
                let revolute = matches!(
                    j.joint_type,
                    urdf_rs::JointType::Revolute | urdf_rs::JointType::Continuous
                );
                let prismatic = matches!(j.joint_type, urdf_rs::JointType::Prismatic);
                let motion = match arm.iter().position(|n| *n == j.name) {
                    Some(index) if revolute => Motion::ArmRevolute { axis, index },
                    Some(index) if prismatic => Motion::ArmPrismatic { axis, index },
                    Some(_) => Motion::Fixed,
                    None if (revolute || prismatic) && j.limit.upper > j.limit.lower => {
                        Motion::Gripper {
                            axis,
                            prismatic,
                            lower: j.limit.lower,
                            upper: j.limit.upper,
                        }
                    }
                    None => Motion::Fixed,
                };
                nodes.push(Node {
                    link: j.child.link.clone(),
                    parent: Some(i),
                    origin: k::urdf::isometry_from(&j.origin),
                    motion,
                });
            }
            i += 1;
        }
        Ok(LinkTree {
            nodes,
            dof: arm.len(),
        })
    }

    /// All nodes, parents before children.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Index of the node of `link`.
    pub(crate) fn index_of(&self, link: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.link == link)
    }

    /// Number of arm joints `q` must hold.
    pub(crate) fn dof(&self) -> usize {
        self.dof
    }

    /// Base-frame pose of every node (same order as [`LinkTree::nodes`]) at arm joints `q` and
    /// gripper opening `opening` (0 closed … 1 open), written into `out` (resized as needed).
    /// `q` must hold [`LinkTree::dof`] finite values (the caller checks; this is the inner loop).
    pub(crate) fn poses_into(&self, q: &[f64], opening: f64, out: &mut Vec<Isometry3<f64>>) {
        out.clear();
        let g = if opening.is_finite() {
            opening.clamp(0.0, 1.0)
        } else {
            0.0
        };
        for n in &self.nodes {
            let local = match n.motion {
                Motion::Fixed => n.origin,
                Motion::ArmRevolute { axis, index } => {
                    n.origin * UnitQuaternion::from_axis_angle(&axis, q[index])
                }
                Motion::ArmPrismatic { axis, index } => {
                    n.origin * Translation3::from(axis.into_inner() * q[index])
                }
                Motion::Gripper {
                    axis,
                    prismatic,
                    lower,
                    upper,
                } => {
                    let v = lower + g * (upper - lower);
                    if prismatic {
                        n.origin * Translation3::from(axis.into_inner() * v)
                    } else {
                        n.origin * UnitQuaternion::from_axis_angle(&axis, v)
                    }
                }
            };
            let pose = match n.parent {
                Some(p) => out[p] * local,
                None => local,
            };
            out.push(pose);
        }
    }

    /// [`LinkTree::poses_into`] into a new vector.
    pub(crate) fn poses(&self, q: &[f64], opening: f64) -> Vec<Isometry3<f64>> {
        let mut out = Vec::with_capacity(self.nodes.len());
        self.poses_into(q, opening, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn matches_link_poses_of_k_on_both_arms() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for name in ["xarm6", "widowx250"] {
            let model = RobotModel::builtin(name).expect("model");
            let tree = LinkTree::new(&model).expect("tree");
            assert_eq!(tree.dof(), model.dof());
            for _ in 0..50 {
                let q: Vec<f64> = model
                    .joint_limits()
                    .iter()
                    .map(|l| rng.gen_range(l.lower.max(-3.0)..l.upper.min(3.0)))
                    .collect();
                let opening = rng.gen_range(0.0..1.0);
                let ours = tree.poses(&q, opening);
                let theirs = model.link_poses(&q, opening).expect("k");
                let mut matched = 0;
                for (link, pose) in &theirs {
                    let Some(i) = tree.index_of(link) else {
                        continue;
                    };
                    let (dp, dr) = crate::kinematics::pose_error(pose, &ours[i]);
                    assert!(dp < 1e-12 && dr < 1e-9, "{name} {link}: {dp} m, {dr} rad");
                    matched += 1;
                }
                assert_eq!(matched, tree.nodes().len(), "{name}: every node compared");
                // The tip agrees with the arm chain's FK too.
                let tip = tree.index_of(&model.config.tip_link).expect("tip");
                let (dp, _) = crate::kinematics::pose_error(&model.fk(&q).expect("fk"), &ours[tip]);
                assert!(dp < 1e-12);
            }
        }
    }
}
