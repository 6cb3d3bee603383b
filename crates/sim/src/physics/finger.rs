//! The gripper's state inside the world: its fingers and the object the attach rule holds.

use k::nalgebra::{Isometry3, Vector3};
use rapier3d::prelude::{ImpulseJointHandle, SharedShape};

/// A gripper finger: the child of a prismatic joint outside the arm chain.
#[derive(Debug)]
pub(super) struct Finger {
    pub(super) link_index: usize,
    /// Joint axis in the finger frame; the joint value grows as the gripper opens.
    pub(super) axis: Vector3<f64>,
    /// Joint travel from closed (opening 0) to open (opening 1), metres.
    pub(super) travel: f64,
    /// The finger's colliders in the finger frame, for sweeping it shut.
    pub(super) shapes: Vec<(SharedShape, Isometry3<f64>)>,
}

/// An object held by the attach rule.
#[derive(Debug)]
pub(super) struct Attachment {
    pub(super) object: usize,
    pub(super) joint: ImpulseJointHandle,
    /// Gripper opening when it attached.
    pub(super) opening: f64,
}
