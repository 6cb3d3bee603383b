//! What `truth.json` holds: per sequence the objects (name, phrase, pose, centre, size) and, for a
//! recorded change, where the moved object started and ended; per frame the camera (pose,
//! intrinsics) and the objects in view, read from the renderer's instance labels.
//!
//! Every number is rounded to 1 µm (or 1e-6) when it is made, so the questions, computed from
//! these values, can be recomputed from the file itself to the last digit.

use std::collections::BTreeMap;

use k::nalgebra::{Isometry3, Vector3};
use serde::{Deserialize, Serialize};

use crate::sim::render::{PinholeCamera, RenderOutput};
use crate::sim::scene::{Scene, SceneObject};
use crate::sim::SimWorld;

/// Rounds to 1e-6 (the written precision).
pub(crate) fn r6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn r6v(v: Vector3<f64>) -> [f64; 3] {
    [r6(v.x), r6(v.y), r6(v.z)]
}

/// A rigid pose: translation (m) and rotation as a unit quaternion `[x, y, z, w]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Pose {
    pub translation: [f64; 3],
    pub rotation_xyzw: [f64; 4],
}

impl Pose {
    pub(crate) fn of(iso: &Isometry3<f64>) -> Pose {
        let q = iso.rotation.quaternion();
        Pose {
            translation: r6v(iso.translation.vector),
            rotation_xyzw: [r6(q.i), r6(q.j), r6(q.k), r6(q.w)],
        }
    }
}

/// The pinhole intrinsics of every frame (no distortion: the renderer is an ideal pinhole).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IntrinsicsTruth {
    pub width: usize,
    pub height: usize,
    pub fx: f64,
    pub fy: f64,
    pub cx: f64,
    pub cy: f64,
}

/// One object of the scene.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ObjectTruth {
    /// The scene's name (`red_block`).
    pub name: String,
    /// How questions and descriptions name it: its first alias no other object of the scene has
    /// (`red block`), else the name with spaces.
    pub phrase: String,
    /// What counting questions count it as: the last word of its name (`block`).
    pub category: String,
    /// The renderer's instance id.
    pub instance: u16,
    /// Pose of the object's frame (base centre) in the world at the first frame.
    pub pose: Pose,
    /// Centre of its world axis-aligned bounds at the first frame, m.
    pub centre: [f64; 3],
    /// Extents along its own x, y, z (from its shapes), m: yaw does not change them.
    pub size_m: [f64; 3],
}

/// A recorded change: where the task's run moved its object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct MovedTruth {
    pub object: String,
    pub start_pose: Pose,
    pub end_pose: Pose,
    pub start_centre: [f64; 3],
    pub end_centre: [f64; 3],
    /// The first frame rendered after the move (the frames before show the start pose).
    pub first_frame_after: usize,
}

/// An object in view in one frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct VisibleObject {
    pub name: String,
    pub phrase: String,
    pub instance: u16,
    /// Pixels labelled with its instance.
    pub pixels: usize,
    /// Inclusive pixel bounds of those pixels: `[u_min, v_min, u_max, v_max]`.
    pub bbox: [u32; 4],
    /// Centre of its world axis-aligned bounds at this frame, m.
    pub centre: [f64; 3],
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FrameTruth {
    pub index: usize,
    /// `index / fps`, s.
    pub time_s: f64,
    /// The PNG, relative to the sequence's folder.
    pub image: String,
    /// The camera's optical frame (OpenCV: x right, y down, z forward) in the world, row-major
    /// 4 × 4.
    pub world_from_camera: [[f64; 4]; 4],
    pub intrinsics: IntrinsicsTruth,
    /// Objects with at least `min_pixels` labelled pixels, left to right by bbox centre.
    pub visible: Vec<VisibleObject>,
}

impl FrameTruth {
    /// The camera's optical centre in the world.
    pub(crate) fn eye(&self) -> [f64; 3] {
        let m = &self.world_from_camera;
        [m[0][3], m[1][3], m[2][3]]
    }

    /// Column `c` of the rotation (the camera's axis `c` in the world).
    pub(crate) fn axis(&self, c: usize) -> [f64; 3] {
        let m = &self.world_from_camera;
        [m[0][c], m[1][c], m[2][c]]
    }

    pub(crate) fn sees(&self, name: &str) -> bool {
        self.visible.iter().any(|v| v.name == name)
    }
}

/// A whole sequence (what `truth.json` holds).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SequenceTruth {
    pub id: String,
    /// `suite/id`.
    pub task: String,
    pub seed: u64,
    pub scene: String,
    pub fps: f64,
    /// The least labelled pixels for an object to count as in view.
    pub min_pixels: usize,
    pub table_height: f64,
    pub objects: Vec<ObjectTruth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<MovedTruth>,
    pub frames: Vec<FrameTruth>,
}

impl SequenceTruth {
    pub(crate) fn object(&self, name: &str) -> Option<&ObjectTruth> {
        self.objects.iter().find(|o| o.name == name)
    }

    /// The first frame each object is in view, for the objects seen at all, in scene order.
    pub(crate) fn first_seen(&self) -> Vec<(&ObjectTruth, usize)> {
        self.objects
            .iter()
            .filter_map(|o| {
                self.frames
                    .iter()
                    .position(|f| f.sees(&o.name))
                    .map(|i| (o, i))
            })
            .collect()
    }
}

/// The phrase of `obj`: its first alias that no other object of `scene` has, else its name with
/// spaces.
pub(crate) fn phrase_of(scene: &Scene, obj: &SceneObject) -> String {
    let shared = |a: &str| {
        scene
            .objects
            .iter()
            .filter(|o| o.name != obj.name)
            .any(|o| o.aliases.iter().any(|b| b.eq_ignore_ascii_case(a)))
    };
    obj.aliases
        .iter()
        .find(|a| !shared(a))
        .cloned()
        .unwrap_or_else(|| obj.name.replace('_', " "))
}

fn category_of(name: &str) -> String {
    name.rsplit('_').next().unwrap_or(name).to_string()
}

/// Centre of an object's world axis-aligned bounds now.
pub(crate) fn centre_now(world: &SimWorld, name: &str) -> Option<[f64; 3]> {
    world
        .object_aabb(name)
        .map(|(lo, hi)| r6v((lo.coords + hi.coords) / 2.0))
}

/// The scene's objects as the world holds them now.
pub(crate) fn objects_now(world: &SimWorld) -> Vec<ObjectTruth> {
    let scene = world.scene();
    scene
        .objects
        .iter()
        .filter_map(|o| {
            let pose = world.object_pose(&o.name)?;
            let (lo, hi) = o.footprint();
            Some(ObjectTruth {
                name: o.name.clone(),
                phrase: phrase_of(scene, o),
                category: category_of(&o.name),
                instance: world.instance_of(&o.name)?,
                pose: Pose::of(&pose),
                centre: centre_now(world, &o.name)?,
                size_m: [r6(hi.x - lo.x), r6(hi.y - lo.y), r6(o.height())],
            })
        })
        .collect()
}

/// The truth of one rendered frame: the camera and the objects whose instance labels cover at
/// least `min_pixels` pixels.
pub(crate) fn frame_truth(
    index: usize,
    fps: f64,
    camera: &PinholeCamera,
    out: &RenderOutput,
    world: &SimWorld,
    min_pixels: usize,
) -> FrameTruth {
    // instance → (pixels, bbox)
    let mut seen: BTreeMap<u16, (usize, [u32; 4])> = BTreeMap::new();
    let w = out.width as usize;
    for (i, &inst) in out.instance.iter().enumerate() {
        let (u, v) = ((i % w) as u32, (i / w) as u32);
        let e = seen.entry(inst).or_insert((0, [u, v, u, v]));
        e.0 += 1;
        e.1 = [e.1[0].min(u), e.1[1].min(v), e.1[2].max(u), e.1[3].max(v)];
    }
    let scene = world.scene();
    let mut visible: Vec<VisibleObject> = seen
        .into_iter()
        .filter(|(_, (n, _))| *n >= min_pixels)
        .filter_map(|(inst, (pixels, bbox))| {
            let name = world.object_of_instance(inst)?;
            let obj = scene.object(name)?;
            Some(VisibleObject {
                name: name.to_string(),
                phrase: phrase_of(scene, obj),
                instance: inst,
                pixels,
                bbox,
                centre: centre_now(world, name)?,
            })
        })
        .collect();
    visible.sort_by_key(|v| (v.bbox[0] + v.bbox[2], v.instance));
    let m = camera.world_from_camera.to_homogeneous();
    let i = &camera.intrinsics;
    FrameTruth {
        index,
        time_s: r6(index as f64 / fps),
        image: format!("{index:04}.png"),
        world_from_camera: std::array::from_fn(|r| std::array::from_fn(|c| r6(m[(r, c)]))),
        intrinsics: IntrinsicsTruth {
            width: i.width,
            height: i.height,
            fx: r6(i.fx),
            fy: r6(i.fy),
            cx: r6(i.cx),
            cy: r6(i.cy),
        },
        visible,
    }
}

/// Euclidean distance.
pub(crate) fn dist(a: [f64; 3], b: [f64; 3]) -> f64 {
    ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt()
}
