//! The robot's collision model for planning: spheres per link fitted to the URDF's collision
//! primitives, and the link pairs that are never checked against each other.
//!
//! Spheres, as CuRobo does: a sphere test is a distance and a compare, the same against the table,
//! a box, a distance field or another sphere, so one model serves every check. The fit is
//! deterministic and stored in `robot-configs/<robot>/spheres.toml` (by `pointact fit spheres`):
//! a reviewer sees the model the planner used, and a test refits and compares, so the file cannot
//! drift from the URDF unnoticed.
//!
//! Allowed self-collision pairs follow MoveIt's setup assistant, judged on a fine cover of the
//! real primitives (the planner's looser spheres would see wrist links touch that never do): links
//! on the same rigid body or
//! on adjacent bodies (and the fingers of one hand), links already touching at the home pose, and links that never touch in
//! [`SELF_SAMPLES`] random configurations are not checked against each other.

use std::fmt::Write as _;
use std::path::Path;

use k::nalgebra::{Isometry3, Point3};
use rand::{Rng, SeedableRng};
use serde::Deserialize;

use super::fk::{LinkTree, Motion};
use super::Sphere;
use crate::geometry::Shape;
use crate::kinematics::RobotModel;

/// Random configurations sampled to find the link pairs that never touch.
pub(crate) const SELF_SAMPLES: usize = 20_000;
/// Most spheres one primitive gets.
const MAX_PER_SHAPE: usize = 64;

/// Spheres fitted to the built-in robots, as committed.
const BUILTIN: &[(&str, &str)] = &[
    (
        "xarm6",
        include_str!("../../../../robot-configs/xarm6/spheres.toml"),
    ),
    (
        "widowx250",
        include_str!("../../../../robot-configs/widowx250/spheres.toml"),
    ),
];

/// Errors of reading a sphere model (`spheres.toml`).
#[derive(Debug, thiserror::Error)]
pub enum SpheresError {
    /// Not valid TOML, a bad field, or a file fitted for another robot.
    #[error("{file}: {detail}")]
    Parse {
        /// The sphere file.
        file: String,
        /// What is wrong.
        detail: String,
    },
    /// The file names a link the robot does not have.
    #[error("{file}: link `{link}` is not in the robot `{robot}`")]
    UnknownLink {
        /// The sphere file.
        file: String,
        /// The unknown link's name.
        link: String,
        /// The robot's name.
        robot: String,
    },
    /// The robot's link tree could not be built.
    #[error(transparent)]
    Kinematics(#[from] crate::kinematics::KinematicsError),
}

/// Why a link pair is not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// Same rigid body, bodies joined by one joint, or two fingers of one hand.
    Adjacent,
    /// Touching at the home pose (a conservative cover of neighbours overlaps by design).
    Home,
    /// Never touching in [`SELF_SAMPLES`] random configurations.
    Never,
}

impl Allowed {
    fn name(self) -> &'static str {
        match self {
            Allowed::Adjacent => "adjacent",
            Allowed::Home => "home",
            Allowed::Never => "never",
        }
    }
    fn parse(s: &str) -> Option<Allowed> {
        [Allowed::Adjacent, Allowed::Home, Allowed::Never]
            .into_iter()
            .find(|a| a.name() == s)
    }
}

/// The spheres of one link, in the link frame.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSpheres {
    pub link: String,
    /// Index in the robot's [`LinkTree`].
    pub node: usize,
    pub spheres: Vec<Sphere>,
}

/// Spheres per link and the pairs that are not checked.
#[derive(Debug, Clone, PartialEq)]
pub struct SphereModel {
    /// Name of the robot the spheres were fitted for; must match the model's.
    pub robot: String,
    /// Spheres of each link that has any.
    pub links: Vec<LinkSpheres>,
    /// Unordered link pairs (by name, the smaller name first) not checked for self-collision.
    pub allowed: Vec<(String, String, Allowed)>,
}

/// A sphere cover of one primitive, in the primitive's frame: every point of the solid lies in
/// some sphere. Rows of spheres along cylinders and capsules (each covering a slab of the cross
/// section), a grid over boxes (cells no longer than the box's smallest side, at most 4 per axis).
pub(crate) fn fit_shape(shape: &Shape) -> Vec<Sphere> {
    cover(shape, false)
}

/// A cover for a held object's box: cells half the box's smallest side (so the cover reaches at
/// most ~40 % of that half-side beyond the box), at most 128 spheres.
pub(crate) fn fit_held(shape: &Shape) -> Vec<Sphere> {
    cover_with(shape, 0.5, 0.5, 8.0, 128)
}

/// [`fit_shape`], or (`fine`) a cover within about 1 % of the shape (slabs of an eighth of a
/// radius, box cells a quarter of the smallest side): for deciding which link pairs can touch at
/// all, where the planner's looser cover would see contacts the real links never make.
fn cover(shape: &Shape, fine: bool) -> Vec<Sphere> {
    if fine {
        cover_with(shape, 0.125, 0.25, 8.0, 512)
    } else {
        cover_with(shape, 0.5, 1.0, 4.0, MAX_PER_SHAPE)
    }
}

/// Rows of spheres along round shapes (slabs of `slab` × radius); a grid over boxes with cells of
/// `min_fraction` × the smallest half side, but no more than `cells_per_side` along the longest,
/// and at most `max_spheres` (cells grow until they fit).
fn cover_with(
    shape: &Shape,
    slab: f64,
    min_fraction: f64,
    cells_per_side: f64,
    max_spheres: usize,
) -> Vec<Sphere> {
    let at = |x: f64, y: f64, z: f64, radius: f64| Sphere {
        center: Point3::new(x, y, z),
        radius,
    };
    match *shape {
        Shape::Sphere { radius } => vec![at(0.0, 0.0, 0.0, radius)],
        Shape::Cylinder {
            radius,
            half_height,
        }
        | Shape::Capsule {
            radius,
            half_height,
        } => {
            // A sphere of radius sqrt(R² + s²) on the axis covers the disc slab of half-thickness s.
            let n = ((half_height / (slab * radius).max(1e-6)).ceil() as usize).clamp(1, 32 * 8);
            let s = half_height / n as f64;
            let r = (radius * radius + s * s).sqrt();
            let mut out: Vec<Sphere> = (0..n)
                .map(|i| at(0.0, 0.0, -half_height + s * (2 * i + 1) as f64, r))
                .collect();
            if matches!(shape, Shape::Capsule { .. }) {
                // Points beyond the axis segment are within R of an end point.
                out.push(at(0.0, 0.0, -half_height, radius));
                out.push(at(0.0, 0.0, half_height, radius));
            }
            out
        }
        Shape::Cuboid { half_extents: h } => {
            let longest = h.x.max(h.y).max(h.z);
            let smallest = h.x.min(h.y).min(h.z);
            let mut cell = (smallest * min_fraction)
                .max(longest / cells_per_side)
                .max(1e-6);
            let counts = |cell: f64| h.map(|e| ((e / cell).ceil() as usize).max(1));
            let mut n = counts(cell);
            while n.x * n.y * n.z > max_spheres {
                cell *= 1.25;
                n = counts(cell);
            }
            let e = h.component_div(&n.map(|v| v as f64));
            let r = e.norm();
            let mut out = Vec::with_capacity(n.x * n.y * n.z);
            for i in 0..n.x {
                for j in 0..n.y {
                    for k in 0..n.z {
                        out.push(at(
                            -h.x + e.x * (2 * i + 1) as f64,
                            -h.y + e.y * (2 * j + 1) as f64,
                            -h.z + e.z * (2 * k + 1) as f64,
                            r,
                        ));
                    }
                }
            }
            out
        }
    }
}

/// Each link's cover within about 1 % of its collision primitives, in the link frame. The
/// planner's spheres overreach the primitives by up to half a cell (centimetres on a WidowX's
/// base and upper arm), enough to see those two touch over a cube on the table that the real arm
/// reaches; the checker confirms a self-contact of the planner's spheres on these before it
/// reports one, as the allowed pairs are decided on them.
pub(crate) fn fine_covers(model: &RobotModel, tree: &LinkTree) -> Vec<LinkSpheres> {
    link_covers(model, tree, |shape| cover(shape, true))
}

/// Rounds a fitted sphere to what the file stores (micrometres), growing the radius by the
/// rounding so that the stored sphere still covers the fitted one.
fn rounded(s: Sphere) -> Sphere {
    let um = |v: f64| (v * 1e6).round() / 1e6;
    let c = s.center.map(um);
    let moved = (c - s.center).norm();
    Sphere {
        center: c,
        radius: ((s.radius + moved) * 1e6).ceil() / 1e6,
    }
}

/// Whether any sphere of `a` (at pose `pa`) overlaps any sphere of `b` (at `pb`).
pub(crate) fn spheres_touch(
    a: &[Sphere],
    pa: &Isometry3<f64>,
    b: &[Sphere],
    pb: &Isometry3<f64>,
) -> bool {
    a.iter().any(|sa| {
        let ca = pa * sa.center;
        b.iter().any(|sb| {
            let d = (pb * sb.center - ca).norm_squared();
            let r = sa.radius + sb.radius;
            d < r * r
        })
    })
}

impl SphereModel {
    /// Fits spheres to every link's collision primitives and finds the allowed pairs.
    pub fn fit(model: &RobotModel) -> Result<SphereModel, SpheresError> {
        let tree = LinkTree::new(model)?;
        let mut links = link_covers(model, &tree, fit_shape);
        // Rounded in the link frame, as stored.
        for l in &mut links {
            l.spheres = l.spheres.iter().map(|s| rounded(*s)).collect();
        }
        let fine = fine_covers(model, &tree);
        let allowed = allowed_pairs(model, &tree, &fine);
        Ok(SphereModel {
            robot: model.name().to_string(),
            links,
            allowed,
        })
    }

    /// The committed model of a built-in robot, or `spheres.toml` beside the URDF of a robot loaded
    /// from a folder; a robot without one is fitted now (the same model, a second or so later).
    pub(crate) fn for_model(model: &RobotModel) -> Result<SphereModel, SpheresError> {
        if let Some(rest) = model.source.strip_prefix("built-in ") {
            if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == rest) {
                return SphereModel::parse(
                    model,
                    text,
                    &format!("robot-configs/{rest}/spheres.toml"),
                );
            }
        }
        let beside = Path::new(&model.source).with_file_name("spheres.toml");
        match crate::input::read_text(&beside, crate::input::MAX_CONFIG_BYTES) {
            Ok(text) => SphereModel::parse(model, &text, &beside.display().to_string()),
            Err(_) => {
                tracing::warn!(
                    "no {} : fitting collision spheres for {} now (store them with `pointact fit spheres`)",
                    beside.display(),
                    model.name()
                );
                SphereModel::fit(model)
            }
        }
    }

    /// Reads the stored form (see [`SphereModel::to_toml`]).
    pub(crate) fn parse(
        model: &RobotModel,
        text: &str,
        file: &str,
    ) -> Result<SphereModel, SpheresError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FileLink {
            name: String,
            spheres: Vec<[f64; 4]>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct SelfCollision {
            allowed: Vec<[String; 3]>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            robot: String,
            link: Vec<FileLink>,
            self_collision: SelfCollision,
        }
        let err = |detail: String| SpheresError::Parse {
            file: file.to_string(),
            detail,
        };
        let f: File = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        if f.robot != model.name() {
            return Err(err(format!(
                "fitted for `{}`, not `{}`",
                f.robot,
                model.name()
            )));
        }
        let tree = LinkTree::new(model)?;
        let unknown = |link: &str| SpheresError::UnknownLink {
            file: file.to_string(),
            link: link.to_string(),
            robot: model.name().to_string(),
        };
        let mut links = Vec::new();
        for l in f.link {
            let node = tree.index_of(&l.name).ok_or_else(|| unknown(&l.name))?;
            let mut spheres = Vec::new();
            for [x, y, z, r] in l.spheres {
                if !([x, y, z, r].iter().all(|v| v.is_finite()) && r > 0.0) {
                    return Err(err(format!(
                        "link `{}`: sphere [{x}, {y}, {z}, {r}] needs finite values and a positive radius",
                        l.name
                    )));
                }
                spheres.push(Sphere {
                    center: Point3::new(x, y, z),
                    radius: r,
                });
            }
            links.push(LinkSpheres {
                link: l.name,
                node,
                spheres,
            });
        }
        links.sort_by_key(|l| l.node);
        let mut allowed = Vec::new();
        for [a, b, why] in f.self_collision.allowed {
            for l in [&a, &b] {
                tree.index_of(l).ok_or_else(|| unknown(l))?;
            }
            let why = Allowed::parse(&why).ok_or_else(|| {
                err(format!(
                    "allowed pair ({a}, {b}): reason `{why}` is not adjacent, home or never"
                ))
            })?;
            allowed.push((a, b, why));
        }
        Ok(SphereModel {
            robot: f.robot,
            links,
            allowed,
        })
    }

    /// The stored form: the fitting command, then one `[[link]]` table per link.
    pub fn to_toml(&self, urdf_name: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# Collision spheres of `{urdf_name}`, fitted to its <collision> primitives by\n\
             #   pointact fit spheres --robot {} > spheres.toml\n\
             # Do not edit by hand: refit after changing the URDF (a test refits and compares).\n\
             # Each sphere is [x, y, z, radius] in metres, in the link's frame.\n",
            self.robot
        );
        let _ = writeln!(s, "robot = \"{}\"\n", self.robot);
        for l in &self.links {
            let _ = writeln!(s, "[[link]]\nname = \"{}\"\nspheres = [", l.link);
            for sp in &l.spheres {
                let c = sp.center;
                let _ = writeln!(
                    s,
                    "    [{:.6}, {:.6}, {:.6}, {:.6}],",
                    c.x, c.y, c.z, sp.radius
                );
            }
            let _ = writeln!(s, "]\n");
        }
        let _ = writeln!(
            s,
            "[self_collision]\n# Link pairs never checked against each other: adjacent (same rigid body, one joint apart, or two fingers),\n\
             # home (touching at the home pose), never (no contact in {SELF_SAMPLES} random configurations).\nallowed = ["
        );
        for (a, b, why) in &self.allowed {
            let _ = writeln!(s, "    [\"{a}\", \"{b}\", \"{}\"],", why.name());
        }
        let _ = writeln!(s, "]");
        s
    }

    /// Whether the pair of links (by node index) is checked for self-collision.
    pub(crate) fn checks_pair(&self, a: &str, b: &str) -> bool {
        let (a, b) = if a <= b { (a, b) } else { (b, a) };
        !self.allowed.iter().any(|(x, y, _)| x == a && y == b)
    }
}

/// Every link's primitives covered by `cover` (in the primitive's frame), placed in the link
/// frame and gathered per link, in tree order.
fn link_covers(
    model: &RobotModel,
    tree: &LinkTree,
    cover: impl Fn(&Shape) -> Vec<Sphere>,
) -> Vec<LinkSpheres> {
    let mut links: Vec<LinkSpheres> = Vec::new();
    for shape in model.collision_shapes() {
        let Some(node) = tree.index_of(&shape.link) else {
            continue;
        };
        let spheres = cover(&shape.shape).into_iter().map(|s| Sphere {
            center: shape.link_from_shape * s.center,
            radius: s.radius,
        });
        match links.iter_mut().find(|l| l.node == node) {
            Some(l) => l.spheres.extend(spheres),
            None => links.push(LinkSpheres {
                link: shape.link.clone(),
                node,
                spheres: spheres.collect(),
            }),
        }
    }
    links.sort_by_key(|l| l.node);
    links
}

/// A sphere around all of a link's spheres (centre in the link frame, radius).
fn bound(l: &LinkSpheres) -> (Point3<f64>, f64) {
    let n = l.spheres.len().max(1) as f64;
    let c = Point3::from(
        l.spheres
            .iter()
            .map(|s| s.center.coords)
            .sum::<k::nalgebra::Vector3<f64>>()
            / n,
    );
    let r = l
        .spheres
        .iter()
        .map(|s| (s.center - c).norm() + s.radius)
        .fold(0.0, f64::max);
    (c, r)
}

/// Nodes joined to their parent by a fixed joint belong to the parent's rigid body.
fn bodies(tree: &LinkTree) -> Vec<usize> {
    let mut body = Vec::with_capacity(tree.nodes().len());
    for (i, n) in tree.nodes().iter().enumerate() {
        let b = match (n.parent, n.motion) {
            (Some(p), Motion::Fixed) => body[p],
            _ => i,
        };
        body.push(b);
    }
    body
}

fn allowed_pairs(
    model: &RobotModel,
    tree: &LinkTree,
    links: &[LinkSpheres],
) -> Vec<(String, String, Allowed)> {
    let body = bodies(tree);
    let parent_body = |b: usize| tree.nodes()[b].parent.map(|p| body[p]);
    let mut out = Vec::new();
    let mut undecided = Vec::new();
    for (i, a) in links.iter().enumerate() {
        for b in &links[i + 1..] {
            let (ba, bb) = (body[a.node], body[b.node]);
            let (x, y) = if a.link <= b.link {
                (a.link.clone(), b.link.clone())
            } else {
                (b.link.clone(), a.link.clone())
            };
            // Fingers on the same hand slide against each other by design.
            let fingers = parent_body(ba) == parent_body(bb)
                && matches!(tree.nodes()[ba].motion, Motion::Gripper { .. })
                && matches!(tree.nodes()[bb].motion, Motion::Gripper { .. });
            if ba == bb || parent_body(ba) == Some(bb) || parent_body(bb) == Some(ba) || fingers {
                out.push((x, y, Allowed::Adjacent));
            } else {
                undecided.push((a, b, x, y));
            }
        }
    }
    let home = tree.poses(model.home(), 1.0);
    let mut touched = vec![false; undecided.len()];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x5e1f);
    let limits = model.joint_limits();
    let mut poses = Vec::new();
    for (k, (a, b, x, y)) in undecided.iter().enumerate() {
        if spheres_touch(&a.spheres, &home[a.node], &b.spheres, &home[b.node]) {
            out.push((x.clone(), y.clone(), Allowed::Home));
            touched[k] = true;
        }
    }
    for _ in 0..SELF_SAMPLES {
        let q: Vec<f64> = limits
            .iter()
            .map(|l| rng.gen_range(l.lower..=l.upper))
            .collect();
        let opening = rng.gen_range(0.0..=1.0);
        tree.poses_into(&q, opening, &mut poses);
        for (k, (a, b, _, _)) in undecided.iter().enumerate() {
            if touched[k] {
                continue;
            }
            // Bounding spheres first: most pairs are far apart in most samples.
            let (ba, bb) = (bound(a), bound(b));
            let gap = (poses[a.node] * ba.0 - poses[b.node] * bb.0).norm();
            if gap < ba.1 + bb.1
                && spheres_touch(&a.spheres, &poses[a.node], &b.spheres, &poses[b.node])
            {
                touched[k] = true;
            }
        }
    }
    for (k, (_, _, x, y)) in undecided.into_iter().enumerate() {
        if !touched[k] {
            out.push((x, y, Allowed::Never));
        }
    }
    out.sort_by(|p, q| (&p.0, &p.1).cmp(&(&q.0, &q.1)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k::nalgebra::Vector3;

    /// Points on the surface and inside of a primitive, on a regular lattice.
    fn lattice(shape: &Shape) -> Vec<Point3<f64>> {
        let h = shape.local_half_extents();
        let n = 12;
        let mut out = Vec::new();
        for i in 0..=n {
            for j in 0..=n {
                for k in 0..=n {
                    let f = |t: usize, e: f64| -e + 2.0 * e * t as f64 / n as f64;
                    let p = Point3::new(f(i, h.x), f(j, h.y), f(k, h.z));
                    if shape.contains_local(&p) {
                        out.push(p);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn fitted_spheres_cover_each_primitive_without_much_bloat() {
        let shapes = [
            Shape::Cylinder {
                radius: 0.05,
                half_height: 0.145,
            },
            Shape::Capsule {
                radius: 0.03,
                half_height: 0.1,
            },
            Shape::Cuboid {
                half_extents: Vector3::new(0.03, 0.065, 0.06),
            },
            Shape::Cuboid {
                half_extents: Vector3::new(0.01, 0.006, 0.027),
            },
            Shape::Cuboid {
                half_extents: Vector3::new(0.001, 0.2, 0.3),
            },
            Shape::Sphere { radius: 0.04 },
        ];
        for shape in shapes {
            let fine = cover(&shape, true);
            for p in lattice(&shape) {
                assert!(
                    fine.iter()
                        .any(|s| (p - s.center).norm() <= s.radius + 1e-12),
                    "fine {shape:?}: {p} uncovered"
                );
            }
            let cover = fit_shape(&shape);
            assert!(!cover.is_empty() && cover.len() <= MAX_PER_SHAPE + 2);
            for p in lattice(&shape) {
                assert!(
                    cover
                        .iter()
                        .any(|s| (p - s.center).norm() <= s.radius + 1e-12),
                    "{shape:?}: {p} uncovered"
                );
            }
            // Bloat: no sphere reaches further out than a bound of the shape's size.
            let bound = shape.bounding_radius();
            for s in &cover {
                assert!(
                    s.center.coords.norm() + s.radius <= 1.6 * bound,
                    "{shape:?}"
                );
            }
        }
        // A cylinder's cover reaches at most ~12 % beyond its radius (slabs of half a radius).
        let c = fit_shape(&Shape::Cylinder {
            radius: 0.05,
            half_height: 0.145,
        });
        assert!(c.iter().all(|s| s.radius <= 0.05 * 1.12));
    }

    #[test]
    fn stored_models_are_the_fit_of_the_urdf() {
        for (name, text) in BUILTIN {
            let model = RobotModel::builtin(name).expect("model");
            let fitted = SphereModel::fit(&model).expect("fit");
            let urdf = Path::new(&model.config.urdf)
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or("robot.urdf")
                .to_string();
            assert_eq!(
                fitted.to_toml(&urdf),
                *text,
                "robot-configs/{name}/spheres.toml is stale: refit with `pointact fit spheres --robot {name}`"
            );
            let parsed = SphereModel::parse(&model, text, name).expect("parse");
            assert_eq!(parsed, fitted);
            // The arm's far links are checked against the base, the wrist against the upper arm.
            assert!(fitted.allowed.iter().any(|a| a.2 == Allowed::Adjacent));
            assert!(
                fitted.links.len() >= 6,
                "{name}: {} links with spheres",
                fitted.links.len()
            );
        }
    }

    #[test]
    fn allowed_pairs_never_touch_in_fresh_samples_and_checked_pairs_can() {
        let model = RobotModel::builtin("xarm6").expect("model");
        let m = SphereModel::fit(&model).expect("fit");
        let tree = LinkTree::new(&model).expect("tree");
        let never: Vec<_> = m.allowed.iter().filter(|a| a.2 == Allowed::Never).collect();
        assert!(!never.is_empty());
        let fine = link_covers(&model, &tree, |shape| cover(shape, true));
        let by_name = |n: &str| fine.iter().find(|l| l.link == n).expect("link");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(99);
        let mut checked_touch = 0;
        for _ in 0..2000 {
            let q: Vec<f64> = model
                .joint_limits()
                .iter()
                .map(|l| rng.gen_range(l.lower..=l.upper))
                .collect();
            let poses = tree.poses(&q, 1.0);
            for (a, b, _) in &never {
                let (la, lb) = (by_name(a), by_name(b));
                assert!(
                    !spheres_touch(&la.spheres, &poses[la.node], &lb.spheres, &poses[lb.node]),
                    "{a}-{b} marked never, touching at {q:?}"
                );
            }
            for (i, la) in fine.iter().enumerate() {
                for lb in &fine[i + 1..] {
                    if m.checks_pair(&la.link, &lb.link)
                        && spheres_touch(&la.spheres, &poses[la.node], &lb.spheres, &poses[lb.node])
                    {
                        checked_touch += 1;
                    }
                }
            }
        }
        assert!(checked_touch > 0, "some checked pair touches somewhere");
    }

    #[test]
    fn bad_files_name_the_problem() {
        let model = RobotModel::builtin("xarm6").expect("model");
        let bad_link = "robot = \"xarm6\"\n[[link]]\nname = \"nope\"\nspheres = []\n[self_collision]\nallowed = []\n";
        let e = SphereModel::parse(&model, bad_link, "f.toml").expect_err("unknown link");
        assert!(e.to_string().contains("nope"), "{e}");
        let bad_radius = "robot = \"xarm6\"\n[[link]]\nname = \"link1\"\nspheres = [[0.0, 0.0, 0.0, -1.0]]\n[self_collision]\nallowed = []\n";
        let e = SphereModel::parse(&model, bad_radius, "f.toml").expect_err("radius");
        assert!(e.to_string().contains("positive radius"), "{e}");
        let wrong_robot = "robot = \"widowx250\"\nlink = []\n[self_collision]\nallowed = []\n";
        let e = SphereModel::parse(&model, wrong_robot, "f.toml").expect_err("robot");
        assert!(e.to_string().contains("widowx250"), "{e}");
    }
}
