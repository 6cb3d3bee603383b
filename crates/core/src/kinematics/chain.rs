//! The arm chain flattened for the IK inner loop: forward kinematics and the geometric Jacobian with
//! no lock, no allocation and no per-node bookkeeping.
//!
//! Why it exists: `k` stores the chain as shared nodes behind mutexes and caches world transforms
//! per node; every FK there locks each node and every Jacobian allocates. IK evaluates FK a few
//! hundred times per solve, so that overhead was most of a solve's time and all of its tail
//! (`pointact bench ik`, docs/performance.md). `k` still parses the URDF and stays the reference
//! this is checked against (tests below).

use k::nalgebra::{Isometry3, Translation3, Unit, UnitQuaternion, Vector3};

/// One movable joint: the fixed transform from the previous joint's frame (every fixed joint in
/// between folded in, then this joint's origin), and its axis in its own frame.
#[derive(Debug, Clone)]
struct Joint {
    before: Isometry3<f64>,
    axis: Unit<Vector3<f64>>,
    linear: bool,
}

/// Base → tip as movable joints with the fixed transforms between them.
#[derive(Debug, Clone)]
pub(crate) struct FlatChain {
    joints: Vec<Joint>,
    /// Fixed transform from the last movable joint's frame to the tip.
    tail: Isometry3<f64>,
}

/// Where a joint sits after FK, in the base frame: the data its Jacobian column needs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct JointFrame {
    pub position: Vector3<f64>,
    pub axis: Vector3<f64>,
    pub linear: bool,
}

impl FlatChain {
    /// Flattens `k`'s serial chain (root first, as `k` walks it).
    pub(crate) fn new(arm: &k::SerialChain<f64>) -> Self {
        let mut joints = Vec::new();
        let mut pending = Isometry3::identity();
        for node in arm.iter() {
            let joint = node.joint();
            pending *= *joint.origin();
            let (axis, linear) = match &joint.joint_type {
                k::JointType::Fixed => continue,
                k::JointType::Rotational { axis } => (*axis, false),
                k::JointType::Linear { axis } => (*axis, true),
            };
            joints.push(Joint {
                before: pending,
                axis,
                linear,
            });
            pending = Isometry3::identity();
        }
        FlatChain {
            joints,
            tail: pending,
        }
    }

    /// Tip pose for joint values `q` (one per movable joint); each joint's base-frame position and
    /// axis written to `frames` (resized to the joint count) for `jacobian`.
    pub(crate) fn fk(&self, q: &[f64], frames: &mut Vec<JointFrame>) -> Isometry3<f64> {
        frames.resize(self.joints.len(), JointFrame::default());
        let mut t = Isometry3::identity();
        for ((j, &qi), frame) in self.joints.iter().zip(q).zip(frames.iter_mut()) {
            t *= j.before;
            let motion = if j.linear {
                Isometry3::from_parts(
                    Translation3::from(j.axis.into_inner() * qi),
                    UnitQuaternion::identity(),
                )
            } else {
                Isometry3::from_parts(
                    Translation3::identity(),
                    UnitQuaternion::from_axis_angle(&j.axis, qi),
                )
            };
            t *= motion;
            *frame = JointFrame {
                position: t.translation.vector,
                axis: t.rotation * j.axis.into_inner(),
                linear: j.linear,
            };
        }
        t * self.tail
    }
}

/// Column `i` of the geometric Jacobian of a tip at `tip` (rows: linear velocity of the tip point,
/// then angular velocity, base-frame axes), the convention of `k::jacobian`.
pub(crate) fn jacobian_column(frame: &JointFrame, tip: &Vector3<f64>) -> [f64; 6] {
    let a = frame.axis;
    if frame.linear {
        [a.x, a.y, a.z, 0.0, 0.0, 0.0]
    } else {
        let v = a.cross(&(tip - frame.position));
        [v.x, v.y, v.z, a.x, a.y, a.z]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinematics::{RobotModel, BUILTIN_ROBOTS};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// FK and every Jacobian entry equal `k`'s (the reference) on random joint vectors of every
    /// built-in robot, well beyond their limits too.
    #[test]
    fn fk_and_jacobian_equal_k_on_every_builtin_robot() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        for (name, _, _) in BUILTIN_ROBOTS {
            let model = RobotModel::builtin(name).unwrap();
            let arm = model.arm_chain();
            let flat = FlatChain::new(&arm);
            assert_eq!(flat.joints.len(), model.joint_limits().len(), "{name}");
            let mut frames = Vec::new();
            for _ in 0..200 {
                let q: Vec<f64> = (0..flat.joints.len())
                    .map(|_| rng.gen_range(-7.0..7.0))
                    .collect();
                arm.set_joint_positions_unchecked(&q);
                let want = arm.end_transform();
                let want_j = k::jacobian(&arm);
                let got = flat.fk(&q, &mut frames);
                let dp = (got.translation.vector - want.translation.vector).norm();
                // q and -q are one rotation.
                let (a, b) = (got.rotation.coords, want.rotation.coords);
                let dr = (a - b).norm().min((a + b).norm());
                assert!(
                    dp < 1e-12 && dr < 1e-12,
                    "{name} {q:?}: {dp} m, {dr} quaternion"
                );
                for (i, f) in frames.iter().enumerate() {
                    let col = jacobian_column(f, &got.translation.vector);
                    for (r, v) in col.iter().enumerate() {
                        let w = want_j[(r, i)];
                        assert!((v - w).abs() < 1e-12, "{name} J[{r},{i}] {v} vs {w}");
                    }
                }
            }
        }
    }
}
