//! Scenes: the table, the camera and the objects of one simulated tabletop, read from TOML.
//!
//! The built-in scenes in `sim/scenes/` are compiled into the binary so `pointact` runs from any
//! folder; `Scene::resolve` also accepts a path to a scene file. The world frame is the robot base
//! frame (x forward, z up, metres); the robot base stands on the table, so the table top is usually
//! z = 0. See `sim/scenes/README.md` for the file format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k::nalgebra::{Isometry3, Point3, Translation3, UnitQuaternion, Vector2, Vector3};
use serde::Deserialize;

use super::objects::{support_extent, ObjectKind, Tint};
use super::render::{PinholeCamera, RenderError};
use pointact_core::geometry::{Intrinsics, Shape};

/// Scene files compiled into the binary: (name, TOML text).
pub const BUILTIN_SCENES: &[(&str, &str)] = &[
    (
        "tabletop_nearest_right_of_box",
        include_str!("../../../sim/scenes/tabletop_nearest_right_of_box.toml"),
    ),
    (
        "tabletop_knife_by_handle",
        include_str!("../../../sim/scenes/tabletop_knife_by_handle.toml"),
    ),
    (
        "tabletop_pepper_in_pan",
        include_str!("../../../sim/scenes/tabletop_pepper_in_pan.toml"),
    ),
    (
        "tabletop_stack_blocks",
        include_str!("../../../sim/scenes/tabletop_stack_blocks.toml"),
    ),
    (
        "tabletop_cup_on_plate",
        include_str!("../../../sim/scenes/tabletop_cup_on_plate.toml"),
    ),
    (
        "tabletop_fruit_in_bowl",
        include_str!("../../../sim/scenes/tabletop_fruit_in_bowl.toml"),
    ),
    (
        "tabletop_can_in_basket",
        include_str!("../../../sim/scenes/tabletop_can_in_basket.toml"),
    ),
    (
        "tabletop_carrot_left_of_plate",
        include_str!("../../../sim/scenes/tabletop_carrot_left_of_plate.toml"),
    ),
    (
        "bridge_spoon_on_towel",
        include_str!("../../../sim/scenes/bridge_spoon_on_towel.toml"),
    ),
    (
        "bridge_carrot_on_plate",
        include_str!("../../../sim/scenes/bridge_carrot_on_plate.toml"),
    ),
    (
        "bridge_stack_cube",
        include_str!("../../../sim/scenes/bridge_stack_cube.toml"),
    ),
    (
        "bridge_eggplant_in_basket",
        include_str!("../../../sim/scenes/bridge_eggplant_in_basket.toml"),
    ),
    (
        "clutter_xarm_block_over_wall",
        include_str!("../../../sim/scenes/clutter_xarm_block_over_wall.toml"),
    ),
    (
        "clutter_xarm_fruit_past_bottle",
        include_str!("../../../sim/scenes/clutter_xarm_fruit_past_bottle.toml"),
    ),
    (
        "clutter_xarm_block_past_stack",
        include_str!("../../../sim/scenes/clutter_xarm_block_past_stack.toml"),
    ),
    (
        "clutter_widowx_block_over_wall",
        include_str!("../../../sim/scenes/clutter_widowx_block_over_wall.toml"),
    ),
    (
        "clutter_widowx_carrot_past_bottle",
        include_str!("../../../sim/scenes/clutter_widowx_carrot_past_bottle.toml"),
    ),
    (
        "clutter_widowx_block_past_stack",
        include_str!("../../../sim/scenes/clutter_widowx_block_past_stack.toml"),
    ),
];

/// Why a scene could not be loaded. Each names the file (and object) at fault, because scenes are
/// hand-written and the fix is an edit there.
#[derive(Debug, thiserror::Error)]
pub enum SceneError {
    /// A scene file could not be read from disk.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file that failed.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid TOML or does not match the scene file's schema.
    #[error("{file}: invalid scene TOML: {detail}")]
    Toml {
        /// Source of the text (a path, or `sim/scenes/<name>.toml` for a built-in).
        file: String,
        /// The parser's message.
        detail: String,
    },
    /// A value parsed but is out of range or inconsistent (bad size, colour, friction, shape,
    /// part, or overlapping layout).
    #[error("{file}: {field}: {detail}")]
    Field {
        /// Source of the text.
        file: String,
        /// Dotted path of the offending entry, e.g. `table.friction`.
        field: String,
        /// What is wrong and what is allowed.
        detail: String,
    },
    /// A name given as a scene is neither a built-in scene nor (for the caller) a file path.
    #[error("unknown scene `{name}`: built-in scenes are {known}; or pass a path to a .toml file")]
    UnknownScene {
        /// The name as given.
        name: String,
        /// The built-in scene names, for the message.
        known: String,
    },
}

/// The table: a fixed slab whose top is the plane z = `height`.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Height of the top face in the world (robot base) frame, m.
    pub height: f64,
    /// Centre of the top face in x, y.
    pub center: [f64; 2],
    /// Extent in x, y (m).
    pub size: [f64; 2],
    /// Slab thickness below the top face, m.
    pub thickness: f64,
    /// Linear RGB in [0, 1].
    pub color: [f32; 3],
    /// Coulomb friction coefficient of the top, in [0, 5].
    pub friction: f64,
}

impl Table {
    /// The table as a primitive (box), for physics and rendering.
    pub(crate) fn primitive(&self) -> (Shape, Isometry3<f64>) {
        let shape = Shape::Cuboid {
            half_extents: Vector3::new(
                self.size[0] / 2.0,
                self.size[1] / 2.0,
                self.thickness / 2.0,
            ),
        };
        let pose = Isometry3::translation(
            self.center[0],
            self.center[1],
            self.height - self.thickness / 2.0,
        );
        (shape, pose)
    }
}

/// The scene's camera: where it stands and looks (`eye`, `target`, `up`: world points/vector, as
/// the scene file says it) and the crate's one pinhole model for its `width` × `height` image.
/// The pose is derived by the one look-at (`geometry::camera_look_at`, through
/// [`PinholeCamera::look_at`]) when the scene is loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct CameraSpec {
    /// Optical centre, world frame, m.
    pub eye: Point3<f64>,
    /// World point the optical axis passes through, m.
    pub target: Point3<f64>,
    /// World direction that appears up in the image (need not be orthogonal to the view axis).
    pub up: Vector3<f64>,
    /// The rendered camera: intrinsics and the pose from `eye`, `target`, `up`.
    pub pinhole: PinholeCamera,
}

/// Most primitives (boxes, cylinders, spheres, capsules) a scene's objects may hold together:
/// the physics' broad phase pairs them up, and 100 000 would ask for gigabytes. A built-in scene
/// holds a few dozen; 4096 in one compound load and plan in about a second.
pub const MAX_SCENE_PRIMITIVES: usize = 4096;

/// Largest width or height of a scene camera, pixels (8K; a RealSense streams at most 1920).
pub const MAX_IMAGE_SIDE: u32 = 8192;

/// `[camera]` of a scene file, flat as users write it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CameraFile {
    eye: [f64; 3],
    target: [f64; 3],
    #[serde(default = "z_up")]
    up: [f64; 3],
    width: u32,
    height: u32,
    fx: f64,
    fy: f64,
    cx: f64,
    cy: f64,
}

fn z_up() -> [f64; 3] {
    [0.0, 0.0, 1.0]
}

impl TryFrom<CameraFile> for CameraSpec {
    type Error = String;
    fn try_from(c: CameraFile) -> Result<Self, String> {
        let vals = c.eye.iter().chain(&c.target).chain(&c.up);
        if !vals.copied().all(f64::is_finite) {
            return Err("eye, target and up must be finite".into());
        }
        // The renderer holds several full-size buffers per frame (colour, depth, labels, noise):
        // a 30000² camera asked for tens of GB and aborted.
        for (name, side) in [("width", c.width), ("height", c.height)] {
            if !(1..=MAX_IMAGE_SIDE).contains(&side) {
                return Err(format!(
                    "{name} {side} is outside [1, {MAX_IMAGE_SIDE}] pixels"
                ));
            }
        }
        for (name, f) in [("fx", c.fx), ("fy", c.fy)] {
            if !(f.is_finite() && f > 0.0) {
                return Err(format!(
                    "{name} {f} must be a positive focal length in pixels"
                ));
            }
        }
        for (name, v) in [("cx", c.cx), ("cy", c.cy)] {
            if !v.is_finite() {
                return Err(format!("{name} {v} must be finite"));
            }
        }
        let intrinsics =
            Intrinsics::pinhole(c.width as usize, c.height as usize, c.fx, c.fy, c.cx, c.cy);
        CameraSpec::new(c.eye.into(), c.target.into(), c.up.into(), intrinsics)
    }
}

impl CameraSpec {
    /// A camera at `eye` looking at `target`, image "up" toward `up`. Errors name what is wrong.
    pub(crate) fn new(
        eye: Point3<f64>,
        target: Point3<f64>,
        up: Vector3<f64>,
        intrinsics: Intrinsics,
    ) -> Result<Self, String> {
        let pinhole = PinholeCamera::look_at(eye, target, up, intrinsics).map_err(|e| match e {
            RenderError::DegenerateLookAt(_) => {
                "eye must differ from target and the view must not be parallel to up".to_string()
            }
            other => other.to_string(),
        })?;
        Ok(CameraSpec {
            eye,
            target,
            up,
            pinhole,
        })
    }

    /// Camera pose in the OpenCV convention (x right, y down, z forward): maps camera-frame points to
    /// the world.
    pub fn world_from_camera(&self) -> Isometry3<f64> {
        self.pinhole.world_from_camera
    }

    /// Pinhole intrinsics of the `width` × `height` image, px.
    pub fn intrinsics(&self) -> &Intrinsics {
        &self.pinhole.intrinsics
    }

    /// Pixel (u, v) of a world point, or `None` behind the camera. No bounds check.
    pub fn project(&self, world_point: &Point3<f64>) -> Option<[f64; 2]> {
        self.pinhole
            .project_world(world_point)
            .filter(|(_, _, z)| *z > 1e-6)
            .map(|(u, v, _)| [u, v])
    }

    /// Unit direction, in the table plane, of "right" in the image: the camera's x axis with its
    /// vertical component removed. Spatial task words ("to the right of") use it.
    pub(crate) fn image_right_on_table(&self) -> Vector3<f64> {
        let x = self.world_from_camera().rotation * Vector3::x();
        let h = Vector3::new(x.x, x.y, 0.0);
        let n = h.norm();
        if n < 1e-9 {
            Vector3::y()
        } else {
            h / n
        }
    }
}

/// Where an object may be put when an episode randomises the scene: uniform in these ranges
/// (world x, y in metres, yaw in radians).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    /// Range of the world x of the object origin, [min, max], m.
    pub x: [f64; 2],
    /// Range of the world y of the object origin, [min, max], m.
    pub y: [f64; 2],
    /// Range of the rotation about world z, [min, max], rad; a full turn when omitted.
    #[serde(default = "full_turn")]
    pub yaw: [f64; 2],
}

fn full_turn() -> [f64; 2] {
    [-std::f64::consts::PI, std::f64::consts::PI]
}

/// A region of space (a box or cylinder) in some frame: a container's inside, a place target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Region {
    /// Pose of the shape's centre in the region's parent frame.
    pub frame_from_region: Isometry3<f64>,
    /// The box or cylinder, centred on its own origin.
    pub shape: Shape,
}

impl Region {
    /// The same region expressed in a frame where the parent frame sits at `a_from_frame`.
    pub(crate) fn transformed(&self, a_from_frame: &Isometry3<f64>) -> Region {
        Region {
            frame_from_region: a_from_frame * self.frame_from_region,
            shape: self.shape,
        }
    }
}

/// One primitive of an object, placed in the object frame.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectPrimitive {
    /// Geometry, centred on its own origin.
    pub shape: Shape,
    /// Pose of the shape in the object frame.
    pub object_from_shape: Isometry3<f64>,
    /// Linear RGB in [0, 1] it is rendered with (part colour, fixed tint or the object's colour).
    pub color: [f32; 3],
    /// Part id: index into `SceneObject::parts` plus one (`NO_PART` = 0 is never used by objects).
    pub part: u8,
}

/// An object of the scene, built and placed.
#[derive(Debug, Clone, PartialEq)]
pub struct SceneObject {
    /// Unique name in the scene ("red_block"); what tasks, judges and executors refer to.
    pub name: String,
    /// Phrases an instruction may use for it ("pepper", "red pepper").
    pub aliases: Vec<String>,
    /// Kind from the scene file ("mug", "bowl", …).
    pub kind: String,
    /// Main colour, linear RGB in [0, 1], for primitives without a part colour or fixed tint.
    pub color: [f32; 3],
    /// Total mass, kg; spread over the primitives by volume.
    pub mass: f64,
    /// Coulomb friction coefficient, in [0, 5].
    pub friction: f64,
    /// Resting pose on the table (origin at the base centre, z = table height).
    pub world_from_object: Isometry3<f64>,
    /// The shapes the object is made of, object frame.
    pub primitives: Vec<ObjectPrimitive>,
    /// Functional part names; part id `i + 1` is `parts[i]`.
    pub parts: Vec<String>,
    /// Open volume of a container, object frame.
    pub inner: Option<Region>,
    /// Randomisation ranges for episodes; `None` keeps the written pose.
    pub placement: Option<Placement>,
    /// True for shapes that roll (spheres, lying capsules): physics damps their spin.
    pub rolls: bool,
}

impl SceneObject {
    /// Part id of a named part.
    pub fn part_id(&self, part: &str) -> Option<u8> {
        self.parts
            .iter()
            .position(|p| p == part)
            .and_then(|i| u8::try_from(i + 1).ok())
    }

    /// Name of a part id.
    pub(crate) fn part_name(&self, id: u8) -> Option<&str> {
        self.parts
            .get(usize::from(id).checked_sub(1)?)
            .map(String::as_str)
    }

    /// Extent of the object along a unit direction `dir` given in the object frame: (min, max) of
    /// the projections of all its primitives.
    pub(crate) fn local_extent(&self, dir: &Vector3<f64>) -> (f64, f64) {
        self.primitives
            .iter()
            .map(|p| {
                let c = p.object_from_shape.translation.vector.dot(dir);
                let e = support_extent(&p.shape, &p.object_from_shape.rotation, dir);
                (c - e, c + e)
            })
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (a, b)| {
                (lo.min(a), hi.max(b))
            })
    }

    /// Height of the object's top above its base.
    pub fn height(&self) -> f64 {
        self.local_extent(&Vector3::z()).1
    }

    /// Footprint on the table in the object frame: (min xy, max xy).
    pub fn footprint(&self) -> (Vector2<f64>, Vector2<f64>) {
        let (x0, x1) = self.local_extent(&Vector3::x());
        let (y0, y1) = self.local_extent(&Vector3::y());
        (Vector2::new(x0, y0), Vector2::new(x1, y1))
    }

    /// Where something put "in"/"on" this object should end up, in the object frame: the inside of
    /// a container, else a slab above the middle of the top face (the top 4 cm over the inner 60 %
    /// of the footprint).
    pub(crate) fn place_region(&self) -> Region {
        if let Some(inner) = self.inner {
            return inner;
        }
        let (lo, hi) = self.footprint();
        let c = (lo + hi) / 2.0;
        let h = (hi - lo) * 0.3;
        let top = self.height();
        Region {
            frame_from_region: Isometry3::translation(c.x, c.y, top + 0.02),
            shape: Shape::Cuboid {
                half_extents: Vector3::new(h.x, h.y, 0.02),
            },
        }
    }

    /// Centre of a part's primitives (object frame), e.g. where to grasp a handle.
    pub fn part_center(&self, part: &str) -> Option<Point3<f64>> {
        let id = self.part_id(part)?;
        let (sum, n) = self
            .primitives
            .iter()
            .filter(|p| p.part == id)
            .fold((Vector3::zeros(), 0.0), |(s, n), p| {
                (s + p.object_from_shape.translation.vector, n + 1.0)
            });
        (n > 0.0).then(|| Point3::from(sum / n))
    }
}

/// A whole scene: table, camera, objects (in file order, which fixes their instance ids).
#[derive(Debug, Clone, PartialEq)]
pub struct Scene {
    /// The `name` the scene file gives itself.
    pub name: String,
    /// Robot the scene is laid out for (`xarm6`, `widowx250`).
    pub robot: String,
    /// The table the robot and objects stand on.
    pub table: Table,
    /// The scene's one RGB-D camera.
    pub camera: CameraSpec,
    /// The objects, in file order (the renderer's instance id is `FIRST_OBJECT_INSTANCE` + index).
    pub objects: Vec<SceneObject>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SceneFile {
    name: String,
    robot: String,
    table: TableFile,
    camera: CameraFile,
    #[serde(default)]
    objects: Vec<ObjectFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TableFile {
    #[serde(default)]
    height: f64,
    center: [f64; 2],
    size: [f64; 2],
    #[serde(default = "default_table_thickness")]
    thickness: f64,
    color: [f32; 3],
    #[serde(default = "default_friction")]
    friction: f64,
}

fn default_table_thickness() -> f64 {
    0.05
}
fn default_friction() -> f64 {
    0.8
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectFile {
    name: String,
    #[serde(default)]
    aliases: Vec<String>,
    color: [f32; 3],
    #[serde(default)]
    part_colors: BTreeMap<String, [f32; 3]>,
    mass: f64,
    #[serde(default = "default_friction")]
    friction: f64,
    /// x, y, yaw on the table.
    pose: [f64; 3],
    place: Option<Placement>,
    shape: ObjectKind,
}

impl Scene {
    /// A scene compiled into the binary.
    pub fn builtin(name: &str) -> Result<Scene, SceneError> {
        let (_, text) = BUILTIN_SCENES
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| SceneError::UnknownScene {
                name: name.to_string(),
                known: builtin_names(),
            })?;
        Scene::from_toml_str(text, &format!("sim/scenes/{name}.toml"))
    }

    /// Reads a scene file.
    pub fn load(path: &Path) -> Result<Scene, SceneError> {
        let text = pointact_core::input::read_text(path, pointact_core::input::MAX_CONFIG_BYTES)
            .map_err(|source| SceneError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        Scene::from_toml_str(&text, &path.display().to_string())
    }

    /// Parses and checks a scene; `file` names the source in errors.
    pub fn from_toml_str(text: &str, file: &str) -> Result<Scene, SceneError> {
        let raw: SceneFile = toml::from_str(text).map_err(|e| SceneError::Toml {
            file: file.to_string(),
            detail: e.to_string(),
        })?;
        let bad = |field: String, detail: String| SceneError::Field {
            file: file.to_string(),
            field,
            detail,
        };
        let t = &raw.table;
        let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
        let sizes_ok = t.size.iter().all(|s| s.is_finite() && *s > 0.0)
            && t.thickness.is_finite()
            && t.thickness > 0.0;
        if !(finite(&t.center) && t.height.is_finite() && sizes_ok) {
            return Err(bad(
                "table".into(),
                "height and center must be finite, size and thickness positive".into(),
            ));
        }
        check_color(&t.color).map_err(|d| bad("table.color".into(), d))?;
        check_friction(t.friction).map_err(|d| bad("table.friction".into(), d))?;
        let table = Table {
            height: t.height,
            center: t.center,
            size: t.size,
            thickness: t.thickness,
            color: t.color,
            friction: t.friction,
        };

        let camera = CameraSpec::try_from(raw.camera).map_err(|d| bad("camera".into(), d))?;

        let mut objects: Vec<SceneObject> = Vec::with_capacity(raw.objects.len());
        for (i, o) in raw.objects.iter().enumerate() {
            let field = |f: &str| format!("objects[{i}] (`{}`).{f}", o.name);
            if o.name.trim().is_empty() {
                return Err(bad(
                    format!("objects[{i}].name"),
                    "must not be empty".into(),
                ));
            }
            if objects.iter().any(|p| p.name == o.name) {
                return Err(bad(field("name"), "is used twice".into()));
            }
            // A phrase names an object by its name or an alias (lower case, `_` read as a
            // space); one term naming two objects would leave the pick to chance.
            for term in referring_terms(&o.name, &o.aliases) {
                if let Some(p) = objects
                    .iter()
                    .find(|p| referring_terms(&p.name, &p.aliases).contains(&term))
                {
                    return Err(bad(
                        field("aliases"),
                        format!(
                            "`{term}` already names `{}`: a phrase with it would be ambiguous",
                            p.name
                        ),
                    ));
                }
            }
            let obj = build_object(o, &table).map_err(|(f, d)| bad(field(&f), d))?;
            objects.push(obj);
        }
        if objects.len() > usize::from(u16::MAX - super::FIRST_OBJECT_INSTANCE - 1) {
            return Err(bad("objects".into(), "too many objects".into()));
        }
        let primitives: usize = objects.iter().map(|o| o.primitives.len()).sum();
        if primitives > MAX_SCENE_PRIMITIVES {
            return Err(bad(
                "objects".into(),
                format!(
                    "{primitives} primitives in all, over the {MAX_SCENE_PRIMITIVES} a scene may hold (collision checks pair them up): simplify the compounds"
                ),
            ));
        }
        let scene = Scene {
            name: raw.name,
            robot: raw.robot,
            table,
            camera,
            objects,
        };
        scene
            .check_layout(0.0, 0.0)
            .map_err(|e| bad("objects.pose".into(), e.to_string()))?;
        Ok(scene)
    }

    /// The object called `name`, if the scene has one.
    pub fn object(&self, name: &str) -> Option<&SceneObject> {
        self.objects.iter().find(|o| o.name == name)
    }
}

/// Where a scene's objects stand is unusable: each names the object(s) and what to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum LayoutError {
    #[error(
        "`{a}` and `{b}` overlap on the table (their footprints{grown} intersect): both rest on \
         the table top, so one would be inside the other; move them apart"
    )]
    Overlap { a: String, b: String, grown: String },
    #[error(
        "`{object}` is not (wholly) on the table: its footprint reaches ({x:.3}, {y:.3}) m, the \
         table top spans x [{x0:.3}, {x1:.3}], y [{y0:.3}, {y1:.3}]; move it onto the table"
    )]
    OffTable {
        object: String,
        x: f64,
        y: f64,
        x0: f64,
        x1: f64,
        y0: f64,
        y1: f64,
    },
    #[error(
        "`{object}` is outside the camera's view: its centre {seen} ({width}x{height} image{margin}); \
         move it toward the camera's target or point the camera at it"
    )]
    OutOfView {
        object: String,
        seen: String,
        width: usize,
        height: usize,
        margin: String,
    },
}

impl Scene {
    /// Checks where the objects stand: footprints (each grown by `grow_m`) apart, wholly on the
    /// table, and each object's centre projecting into the image at least `margin_px` from its
    /// border. A file scene is checked with no margins when it is read; the task layouts sampled
    /// from it use margins so that episodes stay graspable and seen.
    pub(crate) fn check_layout(&self, grow_m: f64, margin_px: f64) -> Result<(), LayoutError> {
        let rects: Vec<Rect> = self
            .objects
            .iter()
            .map(|o| Rect::of_object(o, &o.world_from_object, grow_m))
            .collect();
        for i in 0..rects.len() {
            for j in i + 1..rects.len() {
                if rects[i].overlaps(&rects[j]) {
                    return Err(LayoutError::Overlap {
                        a: self.objects[i].name.clone(),
                        b: self.objects[j].name.clone(),
                        grown: if grow_m > 0.0 {
                            format!(" grown by {:.0} mm", grow_m * 1000.0)
                        } else {
                            String::new()
                        },
                    });
                }
            }
        }
        let t = &self.table;
        let (x0, x1) = (t.center[0] - t.size[0] / 2.0, t.center[0] + t.size[0] / 2.0);
        let (y0, y1) = (t.center[1] - t.size[1] / 2.0, t.center[1] + t.size[1] / 2.0);
        let cam = &self.camera;
        let (w, h) = (cam.intrinsics().width, cam.intrinsics().height);
        for (o, r) in self.objects.iter().zip(&rects) {
            if let Some(p) = r
                .corners()
                .into_iter()
                .find(|p| !(x0..=x1).contains(&p.x) || !(y0..=y1).contains(&p.y))
            {
                return Err(LayoutError::OffTable {
                    object: o.name.clone(),
                    x: p.x,
                    y: p.y,
                    x0,
                    x1,
                    y0,
                    y1,
                });
            }
            let seen = cam.project(&centroid(o));
            let inside = seen.is_some_and(|[u, v]| {
                u >= margin_px
                    && v >= margin_px
                    && u <= w as f64 - margin_px
                    && v <= h as f64 - margin_px
            });
            if !inside {
                return Err(LayoutError::OutOfView {
                    object: o.name.clone(),
                    seen: match seen {
                        Some([u, v]) => format!("projects to pixel ({u:.0}, {v:.0})"),
                        None => "is behind the camera".to_owned(),
                    },
                    width: w,
                    height: h,
                    margin: if margin_px > 0.0 {
                        format!(", {margin_px:.0} px from its border")
                    } else {
                        String::new()
                    },
                });
            }
        }
        Ok(())
    }
}

/// Centre of an object's bounding box, world frame.
pub(crate) fn centroid(o: &SceneObject) -> Point3<f64> {
    let (lo, hi) = o.footprint();
    let c = (lo + hi) / 2.0;
    o.world_from_object * Point3::new(c.x, c.y, o.height() / 2.0)
}

/// A footprint on the table as an oriented rectangle (world x, y): centre, unit axes, half sizes.
/// Layout checks and the "beside" tasks' free-area test share it.
pub(crate) struct Rect {
    pub(crate) c: Vector2<f64>,
    pub(crate) axes: [Vector2<f64>; 2],
    pub(crate) half: [f64; 2],
}

impl Rect {
    /// An object's footprint at `pose`, grown by `grow` on every side.
    pub(crate) fn of_object(o: &SceneObject, pose: &Isometry3<f64>, grow: f64) -> Rect {
        let (lo, hi) = o.footprint();
        let mid = (lo + hi) / 2.0;
        let c = pose * Point3::new(mid.x, mid.y, 0.0);
        let ax = pose.rotation * Vector3::x();
        let ay = pose.rotation * Vector3::y();
        Rect {
            c: Vector2::new(c.x, c.y),
            axes: [Vector2::new(ax.x, ax.y), Vector2::new(ay.x, ay.y)],
            half: [(hi.x - lo.x) / 2.0 + grow, (hi.y - lo.y) / 2.0 + grow],
        }
    }

    /// The footprint of a box region (world frame).
    pub(crate) fn of_region(r: &Region) -> Rect {
        let h = r.shape.local_half_extents();
        let p = r.frame_from_region;
        let ax = p.rotation * Vector3::x();
        let ay = p.rotation * Vector3::y();
        Rect {
            c: Vector2::new(p.translation.x, p.translation.y),
            axes: [Vector2::new(ax.x, ax.y), Vector2::new(ay.x, ay.y)],
            half: [h.x, h.y],
        }
    }

    /// The same rectangle grown by `by` on every side (negative: shrunk, never below 0.5 mm).
    pub(crate) fn grown(&self, by: f64) -> Rect {
        Rect {
            c: self.c,
            axes: self.axes,
            half: self.half.map(|h| (h + by).max(0.0005)),
        }
    }

    /// Distance in the plane from the point `p` to the rectangle (0 inside).
    pub(crate) fn distance_to_point(&self, p: Vector2<f64>) -> f64 {
        let d = p - self.c;
        let out = |i: usize| (d.dot(&self.axes[i]).abs() - self.half[i]).max(0.0);
        out(0).hypot(out(1))
    }

    /// Gap between two rectangles (0 when they overlap): for disjoint convex polygons it is
    /// reached at a corner of one of them.
    pub(crate) fn distance(&self, b: &Rect) -> f64 {
        if self.overlaps(b) {
            return 0.0;
        }
        let from_a = self.corners().map(|p| b.distance_to_point(p));
        let from_b = b.corners().map(|p| self.distance_to_point(p));
        from_a
            .into_iter()
            .chain(from_b)
            .fold(f64::INFINITY, f64::min)
    }

    /// Separating-axis test of two oriented rectangles.
    pub(crate) fn overlaps(&self, b: &Rect) -> bool {
        let a = self;
        let d = b.c - a.c;
        a.axes.iter().chain(b.axes.iter()).all(|axis| {
            let ra = a.half[0] * a.axes[0].dot(axis).abs() + a.half[1] * a.axes[1].dot(axis).abs();
            let rb = b.half[0] * b.axes[0].dot(axis).abs() + b.half[1] * b.axes[1].dot(axis).abs();
            d.dot(axis).abs() <= ra + rb
        })
    }

    fn corners(&self) -> [Vector2<f64>; 4] {
        let at = |sx: f64, sy: f64| {
            self.c + self.axes[0] * (sx * self.half[0]) + self.axes[1] * (sy * self.half[1])
        };
        [at(-1.0, -1.0), at(-1.0, 1.0), at(1.0, -1.0), at(1.0, 1.0)]
    }
}

/// Names of the built-in scenes, comma-separated (for messages).
pub(crate) fn builtin_names() -> String {
    BUILTIN_SCENES
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A resting pose on the table: base at table height, rotated by `yaw` about z.
pub(crate) fn table_pose(table: &Table, x: f64, y: f64, yaw: f64) -> Isometry3<f64> {
    Isometry3::from_parts(
        Translation3::new(x, y, table.height),
        UnitQuaternion::from_euler_angles(0.0, 0.0, yaw),
    )
}

fn check_color(c: &[f32; 3]) -> Result<(), String> {
    if c.iter().all(|v| v.is_finite() && (0.0..=1.0).contains(v)) {
        Ok(())
    } else {
        Err(format!("{c:?} must be linear RGB in [0, 1]"))
    }
}

fn check_friction(f: f64) -> Result<(), String> {
    if f.is_finite() && (0.0..=5.0).contains(&f) {
        Ok(())
    } else {
        Err(format!("{f} must be in [0, 5]"))
    }
}

fn build_object(o: &ObjectFile, table: &Table) -> Result<SceneObject, (String, String)> {
    check_color(&o.color).map_err(|d| ("color".into(), d))?;
    for (part, c) in &o.part_colors {
        check_color(c).map_err(|d| (format!("part_colors.{part}"), d))?;
    }
    if !(o.mass.is_finite() && o.mass > 0.0 && o.mass < 100.0) {
        return Err(("mass".into(), format!("{} must be in (0, 100) kg", o.mass)));
    }
    check_friction(o.friction).map_err(|d| ("friction".into(), d))?;
    if !o.pose.iter().all(|v| v.is_finite()) {
        return Err(("pose".into(), "x, y, yaw must be finite".into()));
    }
    if let Some(p) = &o.place {
        if !(p.x.iter().chain(&p.y).chain(&p.yaw).all(|v| v.is_finite()))
            || p.x[0] > p.x[1]
            || p.y[0] > p.y[1]
            || p.yaw[0] > p.yaw[1]
        {
            return Err((
                "place".into(),
                "ranges must be finite [low, high] pairs".into(),
            ));
        }
    }
    let built = o.shape.build().map_err(|d| ("shape".into(), d))?;

    let mut parts: Vec<String> = Vec::new();
    let mut primitives = Vec::with_capacity(built.primitives.len());
    for p in &built.primitives {
        let idx = match parts.iter().position(|q| *q == p.part) {
            Some(i) => i,
            None => {
                parts.push(p.part.clone());
                parts.len() - 1
            }
        };
        let part = u8::try_from(idx + 1).map_err(|_| ("shape".into(), "too many parts".into()))?;
        let color = match (o.part_colors.get(&p.part), p.tint) {
            (Some(c), _) => *c,
            (None, Tint::Fixed(c)) => c,
            (None, Tint::Main) => o.color,
        };
        primitives.push(ObjectPrimitive {
            shape: p.shape,
            object_from_shape: p.object_from_shape,
            color,
            part,
        });
    }
    for part in o.part_colors.keys() {
        if !parts.contains(part) {
            return Err((
                format!("part_colors.{part}"),
                format!("no such part; this object has {parts:?}"),
            ));
        }
    }
    let mut obj = SceneObject {
        name: o.name.clone(),
        aliases: o.aliases.clone(),
        kind: o.shape.name().to_string(),
        color: o.color,
        mass: o.mass,
        friction: o.friction,
        world_from_object: table_pose(table, o.pose[0], o.pose[1], o.pose[2]),
        primitives,
        parts,
        inner: built.inner.map(|(pose, shape)| Region {
            frame_from_region: pose,
            shape,
        }),
        placement: o.place,
        rolls: built.rolls,
    };
    // Compounds may be written with their origin anywhere: shift so the base is at z = 0.
    let (z0, _) = obj.local_extent(&Vector3::z());
    if z0.abs() > 1e-9 {
        let shift = Isometry3::translation(0.0, 0.0, -z0);
        for p in &mut obj.primitives {
            p.object_from_shape = shift * p.object_from_shape;
        }
        if let Some(r) = &mut obj.inner {
            r.frame_from_region = shift * r.frame_from_region;
        }
    }
    Ok(obj)
}

/// A box region of the table (world frame), `half` its half sizes, bottom on the table.
pub(crate) fn table_area(center: Point3<f64>, yaw: f64, half: Vector3<f64>) -> Region {
    Region {
        frame_from_region: Isometry3::new(
            center.coords + Vector3::new(0.0, 0.0, half.z),
            Vector3::z() * yaw,
        ),
        shape: Shape::Cuboid { half_extents: half },
    }
}

/// The terms a phrase can name an object by: its name (`_` read as a space) and its aliases, in
/// lower case, as the oracle pointer matches them.
fn referring_terms(name: &str, aliases: &[String]) -> Vec<String> {
    let mut terms: Vec<String> = aliases.iter().map(|a| a.trim().to_lowercase()).collect();
    terms.push(name.to_lowercase().replace('_', " "));
    terms
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scene file's lines before its objects: a table and a camera.
    const SCENE_HEADER: &str = r#"
name = "x"
robot = "xarm6"
[table]
center = [0.4, 0.0]
size = [1.0, 1.0]
color = [0.5, 0.5, 0.5]
[camera]
eye = [1.0, 0.0, 0.6]
target = [0.4, 0.0, 0.0]
width = 640
height = 480
fx = 605.0
fy = 605.0
cx = 320.0
cy = 240.0"#;

    /// A scene of [`SCENE_HEADER`] and one red object of `shape` (the fields inside its braces).
    fn one_object(shape: &str) -> String {
        format!(
            r#"{SCENE_HEADER}
[[objects]]
name = "b"
color = [1.0, 0.0, 0.0]
mass = 0.1
pose = [0.4, 0.0, 0.0]
shape = {{ {shape} }}
"#
        )
    }

    #[test]
    fn rectangles_overlap_like_rectangles() {
        let r = |x: f64, y: f64, yaw: f64| Rect {
            c: Vector2::new(x, y),
            axes: [
                Vector2::new(yaw.cos(), yaw.sin()),
                Vector2::new(-yaw.sin(), yaw.cos()),
            ],
            half: [0.1, 0.02],
        };
        assert!(r(0.0, 0.0, 0.0).overlaps(&r(0.15, 0.0, 0.0)));
        assert!(!r(0.0, 0.0, 0.0).overlaps(&r(0.0, 0.05, 0.0)));
        // Crossed sticks overlap; a stick turned away beside another does not.
        assert!(r(0.0, 0.0, 0.0).overlaps(&r(0.0, 0.0, 1.57)));
        assert!(!r(0.0, 0.0, 0.0).overlaps(&r(0.13, 0.12, 1.57)));
    }

    #[test]
    fn look_at_is_opencv() {
        // Looking down from above with up = +x: image right is -y, image down is -x.
        let look_at = |e: &Point3<f64>, t: &Point3<f64>, u: &Vector3<f64>| {
            pointact_core::geometry::synthetic::camera_look_at(*e, *t, *u).ok()
        };
        let pose = look_at(
            &Point3::new(0.0, 0.0, 1.0),
            &Point3::origin(),
            &Vector3::x(),
        )
        .unwrap();
        let r = pose.rotation;
        assert!((r * Vector3::z() - Vector3::new(0.0, 0.0, -1.0)).norm() < 1e-12);
        assert!((r * Vector3::y() - Vector3::new(-1.0, 0.0, 0.0)).norm() < 1e-12);
        assert!((r * Vector3::x() - Vector3::new(0.0, -1.0, 0.0)).norm() < 1e-12);
        assert!(look_at(
            &Point3::origin(),
            &Point3::new(0.0, 0.0, -1.0),
            &Vector3::z()
        )
        .is_none());
    }

    #[test]
    fn task_cameras_look_where_documented() {
        for (name, _) in BUILTIN_SCENES {
            let s = Scene::builtin(name).unwrap();
            let c = &s.camera;
            // The target is at the principal point.
            let [u, v] = c.project(&c.target).unwrap();
            let i = c.intrinsics();
            assert!((u - i.cx).abs() < 1e-6 && (v - i.cy).abs() < 1e-6, "{name}");
            if name.starts_with("tabletop") {
                // Facing the robot: image right is the robot's +y (its left), down 35-45 degrees.
                assert!(
                    (c.image_right_on_table() - Vector3::y()).norm() < 1e-9,
                    "{name}"
                );
                let d = c.target - c.eye;
                let pitch = (-d.z / d.xy().norm()).atan().to_degrees();
                assert!((35.0..=45.0).contains(&pitch), "{name}: {pitch}");
                assert!((0.9..=1.2).contains(&d.norm()), "{name}");
            }
        }
    }

    #[test]
    fn every_builtin_scene_loads() {
        for (name, _) in BUILTIN_SCENES {
            let s = Scene::builtin(name).unwrap_or_else(|e| panic!("{e}"));
            assert!(!s.objects.is_empty(), "{name}");
            for o in &s.objects {
                let (z0, z1) = o.local_extent(&Vector3::z());
                assert!(z0.abs() < 1e-9 && z1 > 0.0, "{name}/{}", o.name);
            }
        }
    }

    #[test]
    fn two_objects_named_by_one_term_are_refused() {
        let scene = |second: &str| {
            format!(
                r#"{SCENE_HEADER}
[[objects]]
name = "red_block"
aliases = ["block", "cube"]
color = [1.0, 0.0, 0.0]
mass = 0.1
pose = [0.4, 0.0, 0.0]
shape = {{ kind = "block", size = [0.04, 0.04, 0.04] }}
[[objects]]
name = "yellow_block"
aliases = [{second}]
color = [1.0, 1.0, 0.0]
mass = 0.1
pose = [0.5, 0.1, 0.0]
shape = {{ kind = "block", size = [0.04, 0.04, 0.04] }}
"#
            )
        };
        Scene::from_toml_str(&scene("\"yellow cube\""), "ok.toml").expect("distinct terms");
        for (second, term) in [("\" Cube\"", "cube"), ("\"Red Block\"", "red block")] {
            let e = Scene::from_toml_str(&scene(second), "bad.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("`{term}` already names `red_block`"))
                    && e.contains("yellow_block"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_scene_past_the_primitive_limit_is_refused_naming_it() {
        let scene = |n: usize| {
            let boxes: Vec<String> = (0..n)
                .map(|i| {
                    format!(
                        r#"{{ shape = "box", size = [0.01, 0.01, 0.01], xyz = [0.0, 0.0, {}] }}"#,
                        0.005 + 1e-6 * i as f64
                    )
                })
                .collect();
            one_object(&format!(
                r#"kind = "compound", primitives = [{}]"#,
                boxes.join(", ")
            ))
        };
        let ok = Scene::from_toml_str(&scene(MAX_SCENE_PRIMITIVES), "ok.toml").expect("the limit");
        assert_eq!(ok.objects[0].primitives.len(), MAX_SCENE_PRIMITIVES);
        let e = Scene::from_toml_str(&scene(MAX_SCENE_PRIMITIVES + 1), "bad.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("4097 primitives in all, over the 4096 a scene may hold"),
            "{e}"
        );
    }

    #[test]
    fn typos_are_reported_with_the_field() {
        let text = Scene::builtin("tabletop_fruit_in_bowl").unwrap();
        assert!(!text.objects.is_empty());
        let bad = one_object(r#"kind = "bowl", radius = 0.08, height = 0.05, wal = 0.01"#);
        let e = Scene::from_toml_str(&bad, "bad.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("wal"), "{e}");
    }
}
