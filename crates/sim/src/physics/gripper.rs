//! The gripper: compliant coupled fingers and the attach rule (see [`SimWorld::step`]).

use k::nalgebra::{Isometry3, Translation3, Vector3};
use rapier3d::parry::query::ShapeCastOptions;
use rapier3d::prelude::{ColliderHandle, FixedJointBuilder, QueryFilter, SpringCoefficients};

use super::finger::Attachment;
use super::{
    groups, touching_normal, ContactWith, Owner, SimWorld, GROUP_OBJECT, GROUP_ROBOT, GROUP_TABLE,
};
use crate::convert::{from_pose, to_pose, to_vec};

/// How far a closed finger presses into the object it meets: the pads press and rub on it (light
/// objects already lift by friction alone), and the attach rule makes the hold dependable.
pub const FINGER_SQUEEZE_M: f64 = 0.0015;
/// Finger pad friction (rubber); combined with an object's friction by taking the larger.
pub const FINGER_FRICTION: f64 = 1.5;
/// Finger travel speed, m/s per finger (both supported grippers close in well under a second).
const FINGER_SPEED: f64 = 0.08;
/// The attach rule wants the two fingers' contact normals at least this opposed (cosine).
const OPPOSED_COS: f64 = -0.7;
/// The attached object is let go once the command opens this much beyond the held opening.
const RELEASE_MARGIN: f64 = 0.02;

/// A closing finger looks this far back from where it is for the first object in its way, so it
/// notices objects it already overlaps.
const FINGER_LOOKBACK_M: f64 = 0.004;

impl SimWorld {
    /// Pose of the finger link `i` at opening `o`, for the commanded arm pose.
    pub(super) fn finger_pose(&self, i: usize, o: f64) -> Isometry3<f64> {
        let f = &self.fingers[i];
        self.cmd_poses[f.link_index] * Translation3::from(f.axis * (o * f.travel))
    }

    /// Moves the fingers one step toward the command (the finger part of [`SimWorld::step`]).
    pub(super) fn advance_fingers(&mut self) {
        let dt = self.dt;
        if let Some(f0) = self.fingers.first() {
            let cur = self.opening;
            let rate = FINGER_SPEED * dt / f0.travel;
            self.opening = if self.gripper_cmd >= cur {
                (cur + rate).min(self.gripper_cmd)
            } else {
                let squeeze = FINGER_SQUEEZE_M / f0.travel;
                // A held object stops the fingers where they hold it, wherever the object is:
                // the attach joint is a stiff spring, and in a jolt (a velocity jump of the
                // arm) the object lags the hand for a moment; fingers that closed into the gap
                // would read as empty (a lost grasp) while the object is still held.
                let floor = self
                    .attachment
                    .as_ref()
                    .map_or(0.0, |a| (a.opening - squeeze).min(cur));
                let want = (cur - rate).max(self.gripper_cmd).max(floor);
                // The fingers are coupled (one motor): they keep closing while any finger is free,
                // pushing the object toward the middle, and stop once every finger presses on it.
                let contacts: Option<Vec<f64>> = (0..self.fingers.len())
                    .map(|i| self.finger_contact_opening(i, cur, want))
                    .collect();
                match contacts {
                    Some(c) => {
                        let first = c.iter().copied().fold(f64::INFINITY, f64::min);
                        (first - squeeze).max(want).min(1.0)
                    }
                    None => want,
                }
            };
        }
    }

    /// Applies the attach rule (see [`SimWorld::step`]).
    pub(super) fn update_attachment(&mut self) {
        if let Some(a) = &self.attachment {
            if self.gripper_cmd > a.opening + RELEASE_MARGIN {
                let (joint, object) = (a.joint, a.object);
                self.attachment = None;
                self.pw.remove_impulse_joint(joint);
                self.set_robot_pushes(object, true);
            }
            return;
        }
        if self.fingers.len() < 2 || self.gripper_cmd >= self.opening - 1e-9 {
            return;
        }
        let Some(object) = self.pinched_object() else {
            return;
        };
        let (Some(obj_body), Some(tcp)) = (
            self.pw.bodies.get(self.objects[object].body),
            self.pw.bodies.get(self.tcp_body),
        ) else {
            return;
        };
        // Joint frames: the TCP itself on the hand side, and where the TCP sits in the object's
        // frame on the object side, so the joint holds the object exactly where it is now.
        let tcp_pose = from_pose(tcp.position());
        let object_from_tcp = from_pose(obj_body.position()).inverse() * tcp_pose;
        // Rapier's default joint (1 MHz, damping ratio 1) left a held knife trembling by a few
        // milliradians; this one is as stiff in practice (no visible sag) and still.
        let joint = FixedJointBuilder::new()
            .local_frame1(to_pose(&Isometry3::identity()))
            .local_frame2(to_pose(&object_from_tcp))
            .softness(SpringCoefficients::new(1000.0, 10.0));
        let handle = self
            .pw
            .insert_impulse_joint(self.tcp_body, self.objects[object].body, joint);
        self.attachment = Some(Attachment {
            object,
            joint: handle,
            opening: self.opening,
        });
        self.set_robot_pushes(object, false);
    }

    /// Whether contacts between the robot and an object produce forces. Off while the object is
    /// attached: the joint already holds it, and the squeezing fingers fighting the joint would
    /// make it jitter. The contacts are still detected (and reported by `contacts_of`).
    fn set_robot_pushes(&mut self, object: usize, on: bool) {
        let filter = if on {
            GROUP_TABLE | GROUP_OBJECT | GROUP_ROBOT
        } else {
            GROUP_TABLE | GROUP_OBJECT
        };
        let Some(body) = self.pw.bodies.get(self.objects[object].body) else {
            return;
        };
        let handles: Vec<ColliderHandle> = body.colliders().to_vec();
        for ch in handles {
            if let Some(c) = self.pw.colliders.get_mut(ch) {
                c.set_solver_groups(groups(GROUP_OBJECT, filter));
            }
        }
    }

    /// The object every finger touches, from opposite sides (attach conditions 2 and 3).
    fn pinched_object(&self) -> Option<usize> {
        let mut normals: Vec<Vec<(usize, Vector3<f64>)>> = Vec::new();
        for f in &self.fingers {
            let body = self.pw.bodies.get(self.links[f.link_index].body)?;
            let mut found = Vec::new();
            for &ch in body.colliders() {
                for pair in self.pw.contact_pairs_with(ch) {
                    let (other, sign) = if pair.collider1 == ch {
                        (pair.collider2, 1.0)
                    } else {
                        (pair.collider1, -1.0)
                    };
                    let Some(Owner::Object { index, .. }) = self.owner(other) else {
                        continue;
                    };
                    if let Some(n) = touching_normal(pair) {
                        // Normal pointing from the finger into the object.
                        found.push((index, n * sign));
                    }
                }
            }
            normals.push(found);
        }
        let (first, rest) = normals.split_first()?;
        first.iter().find_map(|&(index, n0)| {
            let opposed = rest.iter().all(|other| {
                other
                    .iter()
                    .any(|&(j, n)| j == index && n0.dot(&n) < OPPOSED_COS)
            });
            opposed.then_some(index)
        })
    }

    /// Lets go of the object the attach rule holds, as a slip would (fault injection for tests
    /// of the closed loop; nothing in a run calls it): the hold's joint is removed and the fingers
    /// close on whatever is left between them. The name of the object let go, if one was held.
    pub fn slip(&mut self) -> Option<String> {
        let a = self.attachment.take()?;
        self.pw.remove_impulse_joint(a.joint);
        self.set_robot_pushes(a.object, true);
        self.scene.objects.get(a.object).map(|o| o.name.clone())
    }

    /// Name of the object held by the attach rule, if any.
    pub fn attached_object(&self) -> Option<&str> {
        let a = self.attachment.as_ref()?;
        self.scene.objects.get(a.object).map(|o| o.name.as_str())
    }

    /// Opening at which finger `i`, closing from `cur` toward `want`, first touches an object;
    /// `None` when the way is clear.
    fn finger_contact_opening(&self, i: usize, cur: f64, want: f64) -> Option<f64> {
        let f = &self.fingers[i];
        let back = FINGER_LOOKBACK_M / f.travel;
        let start = cur + back;
        let start_pose = self.finger_pose(i, start);
        // Closing moves the finger against its joint axis.
        let dir = -(start_pose.rotation * f.axis);
        let max_dist = (start - want) * f.travel;
        let filter = QueryFilter::only_dynamic().groups(groups(GROUP_ROBOT, GROUP_OBJECT));
        let options = ShapeCastOptions {
            max_time_of_impact: max_dist as f32,
            target_distance: 0.0,
            stop_at_penetration: true,
            compute_impact_geometry_on_penetration: false,
        };
        let mut best: Option<f64> = None;
        for (shape, local) in &f.shapes {
            let pose = to_pose(&(start_pose * local));
            if let Some((_, hit)) =
                self.pw
                    .cast_shape(&pose, to_vec(&dir), shape.as_ref(), options, filter)
            {
                let d = f64::from(hit.time_of_impact);
                best = Some(best.map_or(d, |b: f64| b.min(d)));
            }
        }
        best.map(|d| start - d / f.travel)
    }

    /// Names of the finger links.
    pub fn finger_links(&self) -> Vec<&str> {
        self.fingers
            .iter()
            .map(|f| self.links[f.link_index].link.as_str())
            .collect()
    }

    /// The object held between the fingers, if any: one that every finger touches (surfaces within
    /// `TOUCH_DISTANCE_M`). Unlike [`SimWorld::attached_object`], this is pure geometry.
    pub fn held_object(&self) -> Option<&str> {
        if self.fingers.is_empty() {
            return None;
        }
        let fingers = self.finger_links();
        self.scene
            .objects
            .iter()
            .map(|o| o.name.as_str())
            .find(|name| {
                let contacts = self.contacts_of(name);
                fingers.iter().all(|f| {
                    contacts
                        .iter()
                        .any(|c| matches!(&c.with, ContactWith::Robot { link } if link == f))
                })
            })
    }

    /// Parts of `object` that the fingers touch.
    pub(crate) fn parts_touched_by_fingers(&self, object: &str) -> Vec<String> {
        let fingers = self.finger_links();
        let mut parts: Vec<String> = self
            .contacts_of(object)
            .into_iter()
            .filter(|c| matches!(&c.with, ContactWith::Robot { link } if fingers.contains(&link.as_str())))
            .filter_map(|c| c.part)
            .collect();
        parts.sort();
        parts.dedup();
        parts
    }
}
