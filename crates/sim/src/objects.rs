//! Object kinds (mug, knife, bowl, …) as parametric compounds of the four primitive shapes.
//!
//! Every object lives in its own frame: origin at the centre of its base on the floor it stands on,
//! z up, so an object resting upright on the table has world z = table height. Long objects (knife,
//! spoon, vegetables) lie along their x axis; handles stick out along +x. Containers are a base plus
//! wall segments, so other objects can physically drop inside; their `inner` region is the open
//! volume between the floor and the rim.

use std::f64::consts::PI;

use k::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};
use serde::Deserialize;

use pointact_core::geometry::Shape;

/// The shape of one object, as written in a scene file (`shape = { kind = "bowl", … }`). Sizes are
/// metres; optional fields have defaults that look like the everyday object.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ObjectKind {
    /// A box standing on the table (blocks, cartons): full edge lengths.
    Block { size: [f64; 3] },
    /// An upright closed cylinder (cans, bottles).
    Cylinder { radius: f64, height: f64 },
    /// A plain sphere (rolls freely).
    Sphere { radius: f64 },
    /// A round fruit: a sphere on a small flat pad, so it does not roll away when set down.
    Fruit { radius: f64 },
    /// An elongated vegetable (carrot, pepper, eggplant): a capsule lying along x with a stem at +x.
    Vegetable {
        radius: f64,
        length: f64,
        #[serde(default = "default_stem_length")]
        stem_length: f64,
    },
    /// A mug or cup: a solid cylinder with a C-shaped handle on +x.
    Mug {
        radius: f64,
        height: f64,
        #[serde(default = "default_handle_reach")]
        handle_reach: f64,
    },
    /// A knife lying flat: handle on −x, blade on +x.
    Knife {
        length: f64,
        #[serde(default = "default_knife_handle_length")]
        handle_length: f64,
        #[serde(default = "default_knife_handle_width")]
        handle_width: f64,
        #[serde(default = "default_knife_handle_height")]
        handle_height: f64,
        #[serde(default = "default_blade_width")]
        blade_width: f64,
        #[serde(default = "default_blade_thickness")]
        blade_thickness: f64,
    },
    /// A spoon lying flat: handle on −x, bowl (a shallow disc) on +x.
    Spoon {
        length: f64,
        #[serde(default = "default_spoon_width")]
        handle_width: f64,
        #[serde(default = "default_spoon_thickness")]
        thickness: f64,
        #[serde(default = "default_spoon_bowl_radius")]
        bowl_radius: f64,
    },
    /// A plate: a flat disc with a low rim.
    Plate {
        radius: f64,
        #[serde(default = "default_plate_height")]
        height: f64,
    },
    /// A round open container: base disc plus a ring of wall segments.
    Bowl {
        radius: f64,
        height: f64,
        #[serde(default = "default_wall")]
        wall: f64,
    },
    /// A frying pan: a shallow bowl with a long handle on +x.
    Pan {
        radius: f64,
        height: f64,
        #[serde(default = "default_wall")]
        wall: f64,
        #[serde(default = "default_pan_handle_length")]
        handle_length: f64,
    },
    /// A rectangular open container: base plus four walls; `size` is the outer box.
    Basket {
        size: [f64; 3],
        #[serde(default = "default_wall")]
        wall: f64,
    },
    /// A folded towel or cloth: a thin slab.
    Towel { size: [f64; 3] },
    /// Anything else: primitives listed one by one.
    Compound { primitives: Vec<PrimitiveSpec> },
}

/// One primitive of a `compound` object. `shape` is `box` (uses `size`), `cylinder` (`radius`,
/// `height`, along the primitive's z), `sphere` (`radius`) or `capsule` (`radius`, `length` = total
/// length along z). `xyz`/`rpy` place it in the object frame.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PrimitiveSpec {
    pub shape: String,
    pub size: Option<[f64; 3]>,
    pub radius: Option<f64>,
    pub height: Option<f64>,
    pub length: Option<f64>,
    #[serde(default)]
    pub xyz: [f64; 3],
    #[serde(default)]
    pub rpy: [f64; 3],
    /// Functional part name (`handle`, `body`, …); primitives without one are part `body`.
    pub part: Option<String>,
    pub color: Option<[f32; 3]>,
}

fn default_stem_length() -> f64 {
    0.025
}
fn default_handle_reach() -> f64 {
    0.03
}
fn default_knife_handle_length() -> f64 {
    0.10
}
fn default_knife_handle_width() -> f64 {
    0.022
}
fn default_knife_handle_height() -> f64 {
    0.02
}
fn default_blade_width() -> f64 {
    0.026
}
fn default_blade_thickness() -> f64 {
    0.004
}
fn default_spoon_width() -> f64 {
    0.018
}
fn default_spoon_thickness() -> f64 {
    0.012
}
fn default_spoon_bowl_radius() -> f64 {
    0.024
}
fn default_plate_height() -> f64 {
    0.018
}
fn default_wall() -> f64 {
    0.006
}
fn default_pan_handle_length() -> f64 {
    0.13
}

/// How a primitive is coloured when the scene file gives no per-part colour: the object's colour, or
/// a fixed accent (a vegetable's green stem, a knife's steel blade).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Tint {
    Main,
    Fixed([f32; 3]),
}

const STEM_GREEN: [f32; 3] = [0.08, 0.30, 0.04];
const STEEL: [f32; 3] = [0.62, 0.63, 0.66];

/// A primitive as built, before the scene assigns part ids and colours.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BuiltPrimitive {
    pub shape: Shape,
    pub object_from_shape: Isometry3<f64>,
    pub part: String,
    pub tint: Tint,
}

/// The geometry of one object kind in its own frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Built {
    pub primitives: Vec<BuiltPrimitive>,
    /// Open volume of a container (object frame), `None` for solids.
    pub inner: Option<(Isometry3<f64>, Shape)>,
    /// Objects that roll on their own (spheres, lying capsules) get extra angular damping.
    pub rolls: bool,
}

/// Number of wall segments in a round container: enough that a fruit cannot slip between them.
const RING_SEGMENTS: usize = 16;

fn at(x: f64, y: f64, z: f64) -> Isometry3<f64> {
    Isometry3::from_parts(Translation3::new(x, y, z), UnitQuaternion::identity())
}

fn cuboid(x: f64, y: f64, z: f64) -> Shape {
    Shape::Cuboid {
        half_extents: Vector3::new(x / 2.0, y / 2.0, z / 2.0),
    }
}

fn prim(shape: Shape, pose: Isometry3<f64>, part: &str, tint: Tint) -> BuiltPrimitive {
    BuiltPrimitive {
        shape,
        object_from_shape: pose,
        part: part.to_string(),
        tint,
    }
}

/// Rotation taking a primitive's z axis onto the object's x axis (for things lying down).
fn z_to_x() -> UnitQuaternion<f64> {
    UnitQuaternion::from_euler_angles(0.0, PI / 2.0, 0.0)
}

/// Smallest accepted object dimension, metres. The thinnest default part is 4 mm (a knife blade);
/// below this, derived parts (a rim segment's chord, half a size) round to zero.
const MIN_SIZE_M: f64 = 0.001;

/// Largest accepted object dimension or offset, metres. Tabletop objects are well under a metre;
/// the bound keeps every derived size and position finite (1e308 m is finite, twice it is not).
const MAX_SIZE_M: f64 = 10.0;

/// A size parameter: in [[`MIN_SIZE_M`], [`MAX_SIZE_M`]] metres.
fn positive(name: &str, v: f64) -> Result<(), String> {
    if (MIN_SIZE_M..=MAX_SIZE_M).contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "`{name}` must be a size from {MIN_SIZE_M} to {MAX_SIZE_M} metres, got {v}"
        ))
    }
}

/// A ring of wall boxes standing on z = `z0`, from radius `radius - wall` to `radius`.
fn ring(radius: f64, wall: f64, z0: f64, z1: f64, part: &str) -> Vec<BuiltPrimitive> {
    let n = RING_SEGMENTS as f64;
    // Outer chord length, slightly overlapping neighbours so the ring has no gaps.
    let chord = 2.0 * radius * (PI / n).tan();
    (0..RING_SEGMENTS)
        .map(|k| {
            let a = 2.0 * PI * k as f64 / n;
            let r = radius - wall / 2.0;
            let pose = Isometry3::from_parts(
                Translation3::new(r * a.cos(), r * a.sin(), (z0 + z1) / 2.0),
                UnitQuaternion::from_euler_angles(0.0, 0.0, a),
            );
            prim(cuboid(wall, chord, z1 - z0), pose, part, Tint::Main)
        })
        .collect()
}

/// The checks every round container (bowl, pan) shares: positive sizes, a wall thinner than half
/// the radius, and room above the `base` floor.
fn round_container_args(
    what: &str,
    radius: f64,
    height: f64,
    wall: f64,
    base: f64,
) -> Result<(), String> {
    positive("radius", radius)?;
    positive("height", height)?;
    positive("wall", wall)?;
    if wall >= radius / 2.0 || height <= base + 0.01 {
        return Err(format!(
            "{what} needs wall < radius/2 and height > {:.3} m",
            base + 0.01
        ));
    }
    Ok(())
}

/// An open round container: base disc of thickness `base` and a wall ring up to `height`.
fn round_container(radius: f64, height: f64, wall: f64, base: f64) -> Built {
    let mut primitives = vec![prim(
        Shape::Cylinder {
            radius,
            half_height: base / 2.0,
        },
        at(0.0, 0.0, base / 2.0),
        "body",
        Tint::Main,
    )];
    primitives.extend(ring(radius, wall, base, height, "rim"));
    let inner_h = height - base;
    Built {
        primitives,
        inner: Some((
            at(0.0, 0.0, base + inner_h / 2.0),
            Shape::Cylinder {
                radius: radius - wall,
                half_height: inner_h / 2.0,
            },
        )),
        rolls: false,
    }
}

impl ObjectKind {
    /// Short name of the kind, for messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ObjectKind::Block { .. } => "block",
            ObjectKind::Cylinder { .. } => "cylinder",
            ObjectKind::Sphere { .. } => "sphere",
            ObjectKind::Fruit { .. } => "fruit",
            ObjectKind::Vegetable { .. } => "vegetable",
            ObjectKind::Mug { .. } => "mug",
            ObjectKind::Knife { .. } => "knife",
            ObjectKind::Spoon { .. } => "spoon",
            ObjectKind::Plate { .. } => "plate",
            ObjectKind::Bowl { .. } => "bowl",
            ObjectKind::Pan { .. } => "pan",
            ObjectKind::Basket { .. } => "basket",
            ObjectKind::Towel { .. } => "towel",
            ObjectKind::Compound { .. } => "compound",
        }
    }

    /// Builds the primitives; the error says which parameter is wrong.
    pub(crate) fn build(&self) -> Result<Built, String> {
        let solid = |primitives| Built {
            primitives,
            inner: None,
            rolls: false,
        };
        match *self {
            ObjectKind::Block { size } | ObjectKind::Towel { size } => {
                for (i, v) in size.iter().enumerate() {
                    positive(&format!("size[{i}]"), *v)?;
                }
                Ok(solid(vec![prim(
                    cuboid(size[0], size[1], size[2]),
                    at(0.0, 0.0, size[2] / 2.0),
                    "body",
                    Tint::Main,
                )]))
            }
            ObjectKind::Cylinder { radius, height } => {
                positive("radius", radius)?;
                positive("height", height)?;
                Ok(solid(vec![prim(
                    Shape::Cylinder {
                        radius,
                        half_height: height / 2.0,
                    },
                    at(0.0, 0.0, height / 2.0),
                    "body",
                    Tint::Main,
                )]))
            }
            ObjectKind::Sphere { radius } => {
                positive("radius", radius)?;
                Ok(Built {
                    primitives: vec![prim(
                        Shape::Sphere { radius },
                        at(0.0, 0.0, radius),
                        "body",
                        Tint::Main,
                    )],
                    inner: None,
                    rolls: true,
                })
            }
            ObjectKind::Fruit { radius } => {
                positive("radius", radius)?;
                // The sphere floats `lift` above the floor on a small square pad whose top is
                // hidden inside the sphere: a flat bottom like a real apple's, so it stays put. (A
                // round pad rocked in rapier; a box does not.)
                let lift = 0.003;
                let c = radius + lift;
                let pad = 0.35 * radius;
                // Height of the sphere's surface above the pad's corners, plus 1 mm of overlap.
                let corner = pad * std::f64::consts::SQRT_2;
                let top = c - (radius * radius - corner * corner).sqrt() + 0.001;
                Ok(solid(vec![
                    prim(
                        Shape::Sphere { radius },
                        at(0.0, 0.0, c),
                        "body",
                        Tint::Main,
                    ),
                    prim(
                        cuboid(2.0 * pad, 2.0 * pad, top),
                        at(0.0, 0.0, top / 2.0),
                        "body",
                        Tint::Main,
                    ),
                ]))
            }
            ObjectKind::Vegetable {
                radius,
                length,
                stem_length,
            } => {
                positive("radius", radius)?;
                positive("stem_length", stem_length)?;
                positive("length", length)?;
                if length <= 2.0 * radius {
                    return Err(format!(
                        "`length` ({length}) must exceed the diameter ({})",
                        2.0 * radius
                    ));
                }
                let body = Isometry3::from_parts(Translation3::new(0.0, 0.0, radius), z_to_x());
                let stem_r = 0.3 * radius;
                let stem = Isometry3::from_parts(
                    Translation3::new(length / 2.0 + stem_length / 2.0 - 0.3 * radius, 0.0, radius),
                    z_to_x(),
                );
                Ok(Built {
                    primitives: vec![
                        prim(
                            Shape::Capsule {
                                radius,
                                half_height: length / 2.0 - radius,
                            },
                            body,
                            "body",
                            Tint::Main,
                        ),
                        prim(
                            Shape::Cylinder {
                                radius: stem_r,
                                half_height: stem_length / 2.0,
                            },
                            stem,
                            "stem",
                            Tint::Fixed(STEM_GREEN),
                        ),
                    ],
                    inner: None,
                    rolls: true,
                })
            }
            ObjectKind::Mug {
                radius,
                height,
                handle_reach,
            } => {
                positive("radius", radius)?;
                positive("height", height)?;
                positive("handle_reach", handle_reach)?;
                let t = 0.008; // handle bar thickness
                let w = 0.012; // handle bar width (y)
                let z_lo = 0.25 * height;
                let z_hi = 0.8 * height;
                let x_out = radius + handle_reach - t / 2.0;
                let arm_len = handle_reach + 0.004; // reaches slightly into the body
                let arm_x = radius + handle_reach / 2.0 - 0.002;
                Ok(solid(vec![
                    prim(
                        Shape::Cylinder {
                            radius,
                            half_height: height / 2.0,
                        },
                        at(0.0, 0.0, height / 2.0),
                        "body",
                        Tint::Main,
                    ),
                    prim(
                        cuboid(arm_len, w, t),
                        at(arm_x, 0.0, z_hi),
                        "handle",
                        Tint::Main,
                    ),
                    prim(
                        cuboid(arm_len, w, t),
                        at(arm_x, 0.0, z_lo),
                        "handle",
                        Tint::Main,
                    ),
                    prim(
                        cuboid(t, w, z_hi - z_lo + t),
                        at(x_out, 0.0, (z_lo + z_hi) / 2.0),
                        "handle",
                        Tint::Main,
                    ),
                ]))
            }
            ObjectKind::Knife {
                length,
                handle_length,
                handle_width,
                handle_height,
                blade_width,
                blade_thickness,
            } => {
                for (n, v) in [
                    ("length", length),
                    ("handle_length", handle_length),
                    ("handle_width", handle_width),
                    ("handle_height", handle_height),
                    ("blade_width", blade_width),
                    ("blade_thickness", blade_thickness),
                ] {
                    positive(n, v)?;
                }
                if handle_length >= length {
                    return Err("`handle_length` must be shorter than `length`".into());
                }
                let blade_len = length - handle_length;
                Ok(solid(vec![
                    prim(
                        cuboid(handle_length, handle_width, handle_height),
                        at(
                            -length / 2.0 + handle_length / 2.0,
                            0.0,
                            handle_height / 2.0,
                        ),
                        "handle",
                        Tint::Main,
                    ),
                    prim(
                        cuboid(blade_len, blade_width, blade_thickness),
                        at(length / 2.0 - blade_len / 2.0, 0.0, blade_thickness / 2.0),
                        "blade",
                        Tint::Fixed(STEEL),
                    ),
                ]))
            }
            ObjectKind::Spoon {
                length,
                handle_width,
                thickness,
                bowl_radius,
            } => {
                for (n, v) in [
                    ("length", length),
                    ("handle_width", handle_width),
                    ("thickness", thickness),
                    ("bowl_radius", bowl_radius),
                ] {
                    positive(n, v)?;
                }
                let handle_len = length - 2.0 * bowl_radius + 0.005;
                if handle_len <= 0.0 {
                    return Err("`length` must exceed the bowl diameter".into());
                }
                Ok(solid(vec![
                    prim(
                        cuboid(handle_len, handle_width, thickness),
                        at(-length / 2.0 + handle_len / 2.0, 0.0, thickness / 2.0),
                        "handle",
                        Tint::Main,
                    ),
                    prim(
                        Shape::Cylinder {
                            radius: bowl_radius,
                            half_height: thickness / 2.0,
                        },
                        at(length / 2.0 - bowl_radius, 0.0, thickness / 2.0),
                        "bowl",
                        Tint::Main,
                    ),
                ]))
            }
            ObjectKind::Plate { radius, height } => {
                positive("radius", radius)?;
                positive("height", height)?;
                let base = height / 3.0;
                let mut primitives = vec![prim(
                    Shape::Cylinder {
                        radius,
                        half_height: base / 2.0,
                    },
                    at(0.0, 0.0, base / 2.0),
                    "body",
                    Tint::Main,
                )];
                primitives.extend(ring(radius, 0.008, base, height, "rim"));
                Ok(solid(primitives))
            }
            ObjectKind::Bowl {
                radius,
                height,
                wall,
            } => {
                let base = 0.008;
                round_container_args("bowl", radius, height, wall, base)?;
                Ok(round_container(radius, height, wall, base))
            }
            ObjectKind::Pan {
                radius,
                height,
                wall,
                handle_length,
            } => {
                let base = 0.006;
                round_container_args("pan", radius, height, wall, base)?;
                positive("handle_length", handle_length)?;
                let mut built = round_container(radius, height, wall, base);
                for p in &mut built.primitives {
                    p.part = "body".into();
                }
                let (w, t) = (0.024, 0.012);
                built.primitives.push(prim(
                    cuboid(handle_length + 0.004, w, t),
                    at(radius + handle_length / 2.0 - 0.002, 0.0, height - t / 2.0),
                    "handle",
                    Tint::Fixed([0.05, 0.05, 0.05]),
                ));
                Ok(built)
            }
            ObjectKind::Basket { size, wall } => {
                for (i, v) in size.iter().enumerate() {
                    positive(&format!("size[{i}]"), *v)?;
                }
                positive("wall", wall)?;
                let base = 0.008;
                let [sx, sy, sz] = size;
                if 2.0 * wall >= sx.min(sy) || sz <= base + 0.01 {
                    return Err("basket needs 2·wall < size x/y and height > 0.018 m".into());
                }
                let wall_h = sz - base;
                let zc = base + wall_h / 2.0;
                let primitives = vec![
                    prim(
                        cuboid(sx, sy, base),
                        at(0.0, 0.0, base / 2.0),
                        "body",
                        Tint::Main,
                    ),
                    prim(
                        cuboid(wall, sy, wall_h),
                        at(sx / 2.0 - wall / 2.0, 0.0, zc),
                        "rim",
                        Tint::Main,
                    ),
                    prim(
                        cuboid(wall, sy, wall_h),
                        at(-sx / 2.0 + wall / 2.0, 0.0, zc),
                        "rim",
                        Tint::Main,
                    ),
                    prim(
                        cuboid(sx - 2.0 * wall, wall, wall_h),
                        at(0.0, sy / 2.0 - wall / 2.0, zc),
                        "rim",
                        Tint::Main,
                    ),
                    prim(
                        cuboid(sx - 2.0 * wall, wall, wall_h),
                        at(0.0, -sy / 2.0 + wall / 2.0, zc),
                        "rim",
                        Tint::Main,
                    ),
                ];
                Ok(Built {
                    primitives,
                    inner: Some((
                        at(0.0, 0.0, zc),
                        cuboid(sx - 2.0 * wall, sy - 2.0 * wall, wall_h),
                    )),
                    rolls: false,
                })
            }
            ObjectKind::Compound { ref primitives } => {
                if primitives.is_empty() {
                    return Err("a compound needs at least one primitive".into());
                }
                let built = primitives
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        compound_primitive(p).map_err(|e| format!("primitives[{i}]: {e}"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(solid(built))
            }
        }
    }
}

fn compound_primitive(p: &PrimitiveSpec) -> Result<BuiltPrimitive, String> {
    let need = |name: &str, v: Option<f64>| -> Result<f64, String> {
        let v = v.ok_or_else(|| format!("shape `{}` needs `{name}`", p.shape))?;
        positive(name, v)?;
        Ok(v)
    };
    let shape = match p.shape.as_str() {
        "box" => {
            let s = p.size.ok_or("shape `box` needs `size`")?;
            for (i, v) in s.iter().enumerate() {
                positive(&format!("size[{i}]"), *v)?;
            }
            cuboid(s[0], s[1], s[2])
        }
        "cylinder" => Shape::Cylinder {
            radius: need("radius", p.radius)?,
            half_height: need("height", p.height)? / 2.0,
        },
        "sphere" => Shape::Sphere {
            radius: need("radius", p.radius)?,
        },
        "capsule" => {
            let r = need("radius", p.radius)?;
            let l = need("length", p.length)?;
            if l <= 2.0 * r {
                return Err("capsule `length` must exceed its diameter".into());
            }
            Shape::Capsule {
                radius: r,
                half_height: l / 2.0 - r,
            }
        }
        other => {
            return Err(format!(
                "unknown shape `{other}`: use box, cylinder, sphere or capsule"
            ))
        }
    };
    if !(p.xyz.iter().all(|v| v.abs() <= MAX_SIZE_M) && p.rpy.iter().all(|v| v.is_finite())) {
        return Err(format!(
            "`xyz` must be within ±{MAX_SIZE_M} m and `rpy` finite"
        ));
    }
    let [x, y, z] = p.xyz;
    let [r, pi, yw] = p.rpy;
    Ok(BuiltPrimitive {
        shape,
        object_from_shape: Isometry3::from_parts(
            Translation3::new(x, y, z),
            UnitQuaternion::from_euler_angles(r, pi, yw),
        ),
        part: p.part.clone().unwrap_or_else(|| "body".into()),
        tint: match p.color {
            Some(c) => Tint::Fixed(c),
            None => Tint::Main,
        },
    })
}

/// Half-extent of `shape`, placed with rotation `rot`, along the unit direction `dir` (its support
/// distance): how far the solid reaches from its centre that way.
pub(crate) fn support_extent(shape: &Shape, rot: &UnitQuaternion<f64>, dir: &Vector3<f64>) -> f64 {
    // Direction in the shape's own frame.
    let d = rot.inverse_transform_vector(dir);
    match *shape {
        Shape::Cuboid { half_extents: h } => h.x * d.x.abs() + h.y * d.y.abs() + h.z * d.z.abs(),
        Shape::Cylinder {
            radius,
            half_height,
        } => half_height * d.z.abs() + radius * (d.x * d.x + d.y * d.y).sqrt(),
        Shape::Sphere { radius } => radius,
        Shape::Capsule {
            radius,
            half_height,
        } => half_height * d.z.abs() + radius,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_out_of_range_are_refused() {
        // Found by `fuzz_readers`: 1e308 m is finite but twice it is not (a mug 1e308 tall had an
        // infinite handle position), and 5e-324 m halves to a zero-sized box.
        let block = |s: f64| {
            ObjectKind::Block {
                size: [0.05, 0.05, s],
            }
            .build()
        };
        assert!(block(0.05).is_ok());
        for s in [1e308, 11.0, 5e-324, 0.0005, f64::NAN] {
            let e = block(s)
                .err()
                .unwrap_or_else(|| panic!("size {s} accepted"));
            assert!(e.contains("size[2]"), "{e}");
        }
        let vegetable = ObjectKind::Vegetable {
            radius: 0.02,
            length: f64::INFINITY,
            stem_length: 0.02,
        };
        assert!(vegetable.build().is_err());
        let far = ObjectKind::Compound {
            primitives: vec![PrimitiveSpec {
                shape: "sphere".into(),
                size: None,
                radius: Some(0.02),
                height: None,
                length: None,
                xyz: [0.0, 0.0, 1e308],
                rpy: [0.0; 3],
                part: None,
                color: None,
            }],
        };
        assert!(far.build().is_err());
    }
}
