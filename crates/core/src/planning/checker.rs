//! Is the arm, at these joints, clear of the world and of itself? The planner's one question,
//! answered from the sphere model ([`SphereModel`]) against a [`World`].
//!
//! Order of the checks (and of the names a contact reports): table, known solids, depth cloud,
//! self-collision. A held object rides on the tip as extra spheres ([`Attached`]) and is checked
//! against the table, the solids and the cloud like a link.

use k::nalgebra::{Isometry3, Point3};

use super::collision::sphere_hits_shape;
use super::fk::{LinkTree, Motion};
use super::spheres::SphereModel;
use super::{Sphere, World};
use crate::geometry::Shape;
use crate::kinematics::{KinematicsError, RobotModel};

/// Name a held object goes by in contacts.
pub(crate) const HELD: &str = "held object";

/// What is in contact at one configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum Hit {
    /// A sphere of `link` dips below the table margin.
    Table {
        /// The link's name (or the held object's).
        link: String,
    },
    /// A sphere of `link` overlaps the solid `obstacle`.
    Solid {
        /// The link's name (or the held object's).
        link: String,
        /// The solid's name.
        obstacle: String,
    },
    /// A sphere of `link` overlaps the depth cloud near `at`.
    Cloud {
        /// The link's name (or the held object's).
        link: String,
        /// Centre of the touching sphere, base frame, m.
        at: Point3<f64>,
    },
    /// Two links that are checked against each other overlap.
    SelfCollision {
        /// One link's name.
        a: String,
        /// The other link's name.
        b: String,
    },
}

impl std::fmt::Display for Hit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hit::Table { link } => write!(f, "link `{link}` touches the table"),
            Hit::Solid { link, obstacle } => write!(f, "link `{link}` hits `{obstacle}`"),
            Hit::Cloud { link, at } => write!(
                f,
                "link `{link}` hits the depth cloud near ({:.3}, {:.3}, {:.3})",
                at.x, at.y, at.z
            ),
            Hit::SelfCollision { a, b } => write!(f, "link `{a}` hits link `{b}`"),
        }
    }
}

/// Spheres carried in the tip frame (a grasped object).
#[derive(Debug, Clone, PartialEq)]
pub struct Attached {
    /// The object's cover, centres in the tip frame (m).
    pub spheres: Vec<Sphere>,
}

impl Attached {
    /// A grasped object from its segment of the depth cloud (base frame) and the tip pose that
    /// holds it: the points' box, down to `floor_z` (the camera sees the top and the front; the
    /// object stands on the table), expressed in the tip frame and covered with spheres.
    pub fn from_points(
        base_from_tip: &Isometry3<f64>,
        points: &[Point3<f64>],
        floor_z: f64,
    ) -> Option<Attached> {
        let finite: Vec<&Point3<f64>> = points
            .iter()
            .filter(|p| p.coords.iter().all(|c| c.is_finite()))
            .collect();
        if finite.is_empty() {
            return None;
        }
        let (mut lo, mut hi) = (*finite[0], *finite[0]);
        for p in &finite {
            lo = lo.inf(p);
            hi = hi.sup(p);
        }
        lo.z = lo.z.min(floor_z);
        let tip_from_base = base_from_tip.inverse();
        let (mut tlo, mut thi) = (
            Point3::new(f64::INFINITY, f64::INFINITY, f64::INFINITY),
            Point3::new(f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY),
        );
        for i in 0..8 {
            let c = Point3::new(
                if i & 1 == 0 { lo.x } else { hi.x },
                if i & 2 == 0 { lo.y } else { hi.y },
                if i & 4 == 0 { lo.z } else { hi.z },
            );
            let t = tip_from_base * c;
            tlo = tlo.inf(&t);
            thi = thi.sup(&t);
        }
        let center = Point3::from((tlo.coords + thi.coords) * 0.5);
        let half = (thi - tlo) * 0.5;
        // A finer cover than the links': a held object is carried close past its neighbours.
        let spheres = super::spheres::fit_held(&Shape::Cuboid { half_extents: half })
            .into_iter()
            .map(|s| Sphere {
                center: center + s.center.coords,
                radius: s.radius,
            })
            .collect();
        Some(Attached { spheres })
    }
}

#[derive(Debug, Clone)]
struct Body {
    name: String,
    node: usize,
    spheres: Vec<Sphere>,
    /// Fixed to the base (it stands on the table by design): not checked against the table or the
    /// world, only against the moving links.
    grounded: bool,
    /// One sphere (link frame) around all of `spheres`: a body whose bound is clear of an obstacle
    /// is clear sphere by sphere, so most bodies are judged by one test instead of a dozen.
    bound: Sphere,
    /// The link's fine cover ([`super::spheres::fine_covers`], link frame) and its collision
    /// primitives (shape, link from shape), on which a self-contact of `spheres` is confirmed;
    /// both empty for a held object (its spheres decide).
    fine: Vec<Sphere>,
    primitives: Vec<(Shape, Isometry3<f64>)>,
}

impl Body {
    fn new(name: String, node: usize, spheres: Vec<Sphere>, grounded: bool) -> Body {
        let bound = bounding_sphere(&spheres);
        Body {
            name,
            node,
            spheres,
            grounded,
            bound,
            fine: Vec::new(),
            primitives: Vec::new(),
        }
    }
}

/// Whether the planner's touching spheres of `a` (at `pa`) and `b` (at `pb`) stand for a real
/// contact: `a`'s fine cover within `2 pad` of `b`'s primitives, and `b`'s within `2 pad` of `a`'s
/// (each link grown by `pad`, as the world checks grow it). Each test sees a superset of the
/// solids' true contact, so a real contact always passes both, and what is left of the planner's
/// overreach is the smaller of the two covers' (millimetres, not the centimetres of the planner's
/// spheres). A body without a fine model keeps the coarse verdict.
fn confirmed_contact(
    a: &Body,
    pa: &Isometry3<f64>,
    b: &Body,
    pb: &Isometry3<f64>,
    pad: f64,
) -> bool {
    let one_way = |x: &Body, px: &Isometry3<f64>, y: &Body, py: &Isometry3<f64>| {
        let solids: Vec<(&Shape, Isometry3<f64>)> =
            y.primitives.iter().map(|(s, l)| (s, py * l)).collect();
        x.fine.iter().any(|s| {
            let c = px * s.center;
            solids
                .iter()
                .any(|(shape, at)| sphere_hits_shape(&c, s.radius + 2.0 * pad, shape, at))
        })
    };
    if a.fine.is_empty() || b.fine.is_empty() || a.primitives.is_empty() || b.primitives.is_empty()
    {
        return true;
    }
    one_way(a, pa, b, pb) && one_way(b, pb, a, pa)
}

/// A sphere containing every sphere of `spheres` (centred on their centres' box).
fn bounding_sphere(spheres: &[Sphere]) -> Sphere {
    let Some(first) = spheres.first() else {
        return Sphere {
            center: Point3::origin(),
            radius: 0.0,
        };
    };
    let (mut lo, mut hi) = (first.center, first.center);
    for s in spheres {
        lo = lo.inf(&s.center);
        hi = hi.sup(&s.center);
    }
    let center = Point3::from((lo.coords + hi.coords) * 0.5);
    let radius = spheres
        .iter()
        .map(|s| (s.center - center).norm() + s.radius)
        .fold(0.0, f64::max);
    Sphere { center, radius }
}

/// The collision checker of one robot.
#[derive(Debug, Clone)]
pub struct Checker {
    tree: LinkTree,
    /// The links' bodies (`links` of them), then the held object's when one is attached.
    bodies: Vec<Body>,
    links: usize,
    /// Body index pairs checked for self-collision.
    pairs: Vec<(usize, usize)>,
    tip: usize,
    attached: Option<Attached>,
    /// World checks grow every sphere by this much (m): edges are checked at poses no sphere
    /// moves more than twice this between ([`Checker::edge_steps`]), so the swept motion between
    /// two clear checks is clear with the unpadded spheres.
    padding: f64,
    /// Per arm joint: the farthest a link sphere centre can be from that joint (m), an upper bound
    /// through the tree. A joint step of δ moves no sphere more than δ × reach.
    reach: Vec<f64>,
    /// Test the cloud by exact cube distance instead of the field's fast lower bound (the gate).
    exact_cloud: bool,
    /// Reused buffers of one check: link poses; each body's bound centre (world); every sphere's
    /// world centre (`ranges[b]` holds body b's), placed only for the bodies whose bound is in
    /// contact with something (`placed[b]`).
    poses: Vec<Isometry3<f64>>,
    bound_at: Vec<Point3<f64>>,
    centers: Vec<Point3<f64>>,
    ranges: Vec<std::ops::Range<usize>>,
    placed: Vec<bool>,
    /// Indices of the bodies that move with the arm (checked against the world).
    moving: Vec<usize>,
    /// Configurations checked so far (for benchmarks).
    pub checks: u64,
}

impl Checker {
    pub(crate) fn new(
        model: &RobotModel,
        spheres: &SphereModel,
    ) -> Result<Checker, KinematicsError> {
        let tree = LinkTree::new(model)?;
        // A node is grounded when no arm joint lies between it and the root.
        let mut moving = vec![false; tree.nodes().len()];
        for (i, n) in tree.nodes().iter().enumerate() {
            let own = matches!(
                n.motion,
                Motion::ArmRevolute { .. } | Motion::ArmPrismatic { .. }
            );
            moving[i] = own || n.parent.is_some_and(|p| moving[p]);
        }
        let fine = super::spheres::fine_covers(model, &tree);
        let primitives = model.collision_shapes();
        let bodies: Vec<Body> = spheres
            .links
            .iter()
            .map(|l| {
                let mut b = Body::new(l.link.clone(), l.node, l.spheres.clone(), !moving[l.node]);
                b.fine = fine
                    .iter()
                    .find(|f| f.link == l.link)
                    .map(|f| f.spheres.clone())
                    .unwrap_or_default();
                b.primitives = primitives
                    .iter()
                    .filter(|p| p.link == l.link)
                    .map(|p| (p.shape, p.link_from_shape))
                    .collect();
                b
            })
            .collect();
        let mut pairs = Vec::new();
        for i in 0..bodies.len() {
            for j in i + 1..bodies.len() {
                if (bodies[i].grounded && bodies[j].grounded)
                    || !spheres.checks_pair(&bodies[i].name, &bodies[j].name)
                {
                    continue;
                }
                pairs.push((i, j));
            }
        }
        let tip = tree
            .index_of(&model.config.tip_link)
            .ok_or_else(|| KinematicsError::Urdf {
                file: model.source.clone(),
                detail: format!("tip link `{}` not in the tree", model.config.tip_link),
            })?;
        let reach = joint_reach(&tree, &bodies, tip, &[]);
        let mut c = Checker {
            tree,
            links: bodies.len(),
            bodies,
            pairs,
            tip,
            attached: None,
            padding: DEFAULT_PADDING,
            reach,
            exact_cloud: false,
            poses: Vec::new(),
            bound_at: Vec::new(),
            centers: Vec::new(),
            ranges: Vec::new(),
            placed: Vec::new(),
            moving: Vec::new(),
            checks: 0,
        };
        c.layout();
        Ok(c)
    }

    /// Sizes the per-check buffers for the current bodies.
    fn layout(&mut self) {
        self.ranges.clear();
        let mut at = 0;
        for b in &self.bodies {
            self.ranges.push(at..at + b.spheres.len());
            at += b.spheres.len();
        }
        self.centers = vec![Point3::origin(); at];
        self.moving = (0..self.bodies.len())
            .filter(|&b| !self.bodies[b].grounded)
            .collect();
    }

    /// The fitted model of `model` (committed or fitted now), see [`SphereModel::for_model`].
    pub fn for_model(model: &RobotModel) -> Result<Checker, super::SpheresError> {
        let spheres = SphereModel::for_model(model)?;
        Ok(Checker::new(model, &spheres)?)
    }

    /// Carry `attached` on the tip from now on (None: the hand is empty).
    pub(crate) fn set_attached(&mut self, attached: Option<Attached>) {
        let held: Vec<Sphere> = attached.iter().flat_map(|a| a.spheres.clone()).collect();
        self.reach = joint_reach(&self.tree, &self.bodies[..self.links], self.tip, &held);
        self.bodies.truncate(self.links);
        if !held.is_empty() {
            self.bodies
                .push(Body::new(HELD.to_string(), self.tip, held, false));
        }
        self.layout();
        self.attached = attached;
    }

    /// Sets the world padding (m, ≥ 0.0005); see [`Checker::edge_steps`].
    pub(crate) fn set_padding(&mut self, padding: f64) {
        self.padding = if padding.is_finite() {
            padding.max(GATE_PADDING)
        } else {
            DEFAULT_PADDING
        };
    }

    /// Test the depth cloud exactly (see [`DistanceField::sphere_hits_exact`]); the planner uses
    /// the fast bound, the gate the exact test, which accepts every pose the bound accepts.
    pub(crate) fn set_exact_cloud(&mut self, exact: bool) {
        self.exact_cloud = exact;
    }

    /// Margin added to every sphere's radius in the checks, m.
    pub fn padding(&self) -> f64 {
        self.padding
    }

    /// Per arm joint, the farthest any sphere centre can be from it (m).
    pub fn reach(&self) -> &[f64] {
        &self.reach
    }

    /// Checks on the straight joint-space segment `a → b` (ends included: this many steps) so that
    /// no sphere moves more than twice the padding between two checks: with every check clear by
    /// the padding, every pose in between is clear with the unpadded spheres.
    pub(crate) fn edge_steps(&self, a: &[f64], b: &[f64]) -> usize {
        let travel: f64 = a
            .iter()
            .zip(b)
            .zip(&self.reach)
            .map(|((x, y), r)| (y - x).abs() * r)
            .sum();
        // Spheres move at most 2 (padding − GATE_PADDING) between checks: every pose in between
        // keeps GATE_PADDING of clearance, so the gate's own re-check (at that padding) passes.
        let step = 2.0 * (self.padding - GATE_PADDING).max(GATE_PADDING);
        ((travel / step).ceil() as usize).max(1)
    }

    /// The flattened link tree the spheres ride on.
    pub fn tree(&self) -> &LinkTree {
        &self.tree
    }

    /// Link pairs checked for self-collision (for exporting the model to a peer planner).
    pub fn self_pairs(&self) -> Vec<(usize, usize)> {
        self.pairs
            .iter()
            .map(|&(a, b)| (self.bodies[a].node, self.bodies[b].node))
            .collect()
    }

    /// Every link's spheres as (node, link frame sphere), and whether the link is grounded.
    pub fn link_spheres(&self) -> Vec<(usize, Sphere, bool)> {
        self.bodies[..self.links]
            .iter()
            .flat_map(|b| b.spheres.iter().map(move |s| (b.node, *s, b.grounded)))
            .collect()
    }

    /// The first contact at joints `q` with the fingers at `opening` (0..1), or None when clear.
    /// `q` must be finite and of the arm's length (planners only make such configurations).
    pub(crate) fn first_contact(&mut self, q: &[f64], opening: f64, world: &World) -> Option<Hit> {
        self.scan(q, opening, world)
    }

    /// Whether `q` is clear.
    pub fn is_free(&mut self, q: &[f64], opening: f64, world: &World) -> bool {
        self.scan(q, opening, world).is_none()
    }

    /// Places body `b`'s sphere centres in the world (`centers[ranges[b]]`), once per check.
    fn place(&mut self, b: usize) {
        if !self.placed[b] {
            self.placed[b] = true;
            let body = &self.bodies[b];
            let pose = &self.poses[body.node];
            for (c, s) in self.centers[self.ranges[b].clone()]
                .iter_mut()
                .zip(&body.spheres)
            {
                *c = pose * s.center;
            }
        }
    }

    /// The first sphere of body `b` that `hit` (sphere centre, grown radius → what it hits) finds
    /// in contact, with what it hits. The body's bound is tested first: clear bound, clear body.
    fn world_contact<F>(&mut self, b: usize, pad: f64, hit: F) -> Option<(Point3<f64>, usize)>
    where
        F: Fn(&Point3<f64>, f64) -> Option<usize>,
    {
        hit(&self.bound_at[b], self.bodies[b].bound.radius + pad)?;
        self.place(b);
        self.centers[self.ranges[b].clone()]
            .iter()
            .zip(&self.bodies[b].spheres)
            .find_map(|(c, s)| hit(c, s.radius + pad).map(|what| (*c, what)))
    }

    /// Each rule in the documented order over the bodies in order, each pass ending at its first
    /// contact; sphere centres are placed only for bodies whose bound touches something.
    fn scan(&mut self, q: &[f64], opening: f64, world: &World) -> Option<Hit> {
        self.checks += 1;
        self.tree.poses_into(q, opening, &mut self.poses);
        let n = self.bodies.len();
        self.placed.clear();
        self.placed.resize(n, false);
        self.bound_at.clear();
        for b in &self.bodies {
            self.bound_at.push(self.poses[b.node] * b.bound.center);
        }
        let floor = world.table_z + world.table_margin;
        let pad = self.padding;
        for k in 0..self.moving.len() {
            let b = self.moving[k];
            if let Some((_, _)) = self.world_contact(b, pad, |p, r| (p.z - r < floor).then_some(0))
            {
                return Some(Hit::Table {
                    link: self.bodies[b].name.clone(),
                });
            }
        }
        if !world.boxes.is_empty() {
            for k in 0..self.moving.len() {
                let b = self.moving[k];
                let found = self.world_contact(b, pad, |p, r| {
                    world
                        .boxes
                        .iter()
                        .position(|o| sphere_hits_shape(p, r, &o.shape, &o.world_from_shape))
                });
                if let Some((_, o)) = found {
                    return Some(Hit::Solid {
                        link: self.bodies[b].name.clone(),
                        obstacle: world.boxes[o].name.clone(),
                    });
                }
            }
        }
        if let Some(f) = &world.field {
            let exact = self.exact_cloud;
            for k in 0..self.moving.len() {
                let b = self.moving[k];
                let found = self.world_contact(b, pad, |p, r| {
                    let hits = if exact {
                        f.sphere_hits_exact(p, r)
                    } else {
                        f.sphere_hits(p, r)
                    };
                    hits.then_some(0)
                });
                if let Some((at, _)) = found {
                    return Some(Hit::Cloud {
                        link: self.bodies[b].name.clone(),
                        at,
                    });
                }
            }
        }
        for k in 0..self.pairs.len() {
            let (i, j) = self.pairs[k];
            let (bi, bj) = (&self.bodies[i].bound, &self.bodies[j].bound);
            let r = bi.radius + bj.radius;
            if (self.bound_at[i] - self.bound_at[j]).norm_squared() >= r * r {
                continue;
            }
            self.place(i);
            self.place(j);
            let (ci, cj) = (
                &self.centers[self.ranges[i].clone()],
                &self.centers[self.ranges[j].clone()],
            );
            let (si, sj) = (&self.bodies[i].spheres, &self.bodies[j].spheres);
            let touch = ci.iter().zip(si).any(|(a, s1)| {
                cj.iter().zip(sj).any(|(b, s2)| {
                    let r = s1.radius + s2.radius;
                    (a - b).norm_squared() < r * r
                })
            });
            // Confirmed on the primitives with both links grown by the padding, as the world
            // checks grow them (the edge-step bound then holds for self-contacts too: two links
            // approach each other by at most twice what one moves).
            if touch
                && confirmed_contact(
                    &self.bodies[i],
                    &self.poses[self.bodies[i].node],
                    &self.bodies[j],
                    &self.poses[self.bodies[j].node],
                    self.padding,
                )
            {
                return Some(Hit::SelfCollision {
                    a: self.bodies[i].name.clone(),
                    b: self.bodies[j].name.clone(),
                });
            }
        }
        None
    }

    /// The first contact on the straight joint-space segment `a → b`, checked at
    /// [`Checker::edge_steps`] poses, both ends included: `Some((fraction along, hit))`.
    pub fn segment_contact(
        &mut self,
        a: &[f64],
        b: &[f64],
        opening: f64,
        world: &World,
    ) -> Option<(f64, Hit)> {
        let n = self.edge_steps(a, b);
        let mut q = a.to_vec();
        for i in 0..=n {
            let f = i as f64 / n as f64;
            for (k, v) in q.iter_mut().enumerate() {
                *v = a[k] + f * (b[k] - a[k]);
            }
            if let Some(h) = self.first_contact(&q, opening, world) {
                return Some((f, h));
            }
        }
        None
    }
}

/// Default world padding (m): spheres move at most 9 mm between edge checks.
pub(crate) const DEFAULT_PADDING: f64 = 0.005;
/// The padding the safety gate re-checks with (m): it samples at the servo period, where spheres
/// move a fraction of a millimetre, so a half-millimetre margin is enough.
pub(crate) const GATE_PADDING: f64 = 0.0005;

/// Upper bound, per arm joint, of the distance from the joint to any sphere centre it moves:
/// the sphere's offset in its link plus every joint offset (and finger travel) between the link
/// and the joint, whatever the joints in between.
fn joint_reach(tree: &LinkTree, bodies: &[Body], tip: usize, held: &[Sphere]) -> Vec<f64> {
    let nodes = tree.nodes();
    let mut reach = vec![0.0f64; tree.dof()];
    let spheres = bodies
        .iter()
        .flat_map(|b| {
            b.spheres
                .iter()
                .map(move |s| (b.node, s.center.coords.norm()))
        })
        .chain(held.iter().map(|s| (tip, s.center.coords.norm())));
    for (node, offset) in spheres {
        let mut dist = offset;
        let mut n = node;
        loop {
            let node = &nodes[n];
            match node.motion {
                Motion::ArmRevolute { index, .. } => reach[index] = reach[index].max(dist),
                // A prismatic joint moves everything below it by the joint's own travel.
                Motion::ArmPrismatic { index, .. } => reach[index] = reach[index].max(1.0),
                Motion::Gripper {
                    prismatic: true,
                    lower,
                    upper,
                    ..
                } => dist += lower.abs().max(upper.abs()),
                _ => {}
            }
            dist += node.origin.translation.vector.norm();
            match node.parent {
                Some(p) => n = p,
                None => break,
            }
        }
    }
    reach
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planning::spheres::spheres_touch;
    use crate::planning::Obstacle;
    use k::nalgebra::Vector3;

    fn xarm() -> (RobotModel, Checker) {
        let model = RobotModel::builtin("xarm6").expect("model");
        let c = Checker::for_model(&model).expect("checker");
        (model, c)
    }

    /// Lowest point of the empty hand's moving spheres at `q`.
    fn lowest(c: &Checker, q: &[f64]) -> f64 {
        let poses = c.tree().poses(q, 0.0);
        c.link_spheres()
            .iter()
            .filter(|(_, _, grounded)| !grounded)
            .map(|(node, s, _)| (poses[*node] * s.center).z - s.radius)
            .fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn home_is_clear_and_contacts_are_named() {
        let (model, mut c) = xarm();
        let home = model.home().to_vec();
        let mut world = World::table(0.0);
        assert_eq!(c.first_contact(&home, 0.0, &world), None);
        // A box at the closed fingertips names the link it meets.
        let tcp = model.fk(&home).expect("fk").translation.vector;
        world.boxes.push(Obstacle {
            name: "crate".into(),
            shape: Shape::Cuboid {
                half_extents: Vector3::new(0.03, 0.03, 0.03),
            },
            world_from_shape: Isometry3::translation(tcp.x, tcp.y, tcp.z),
        });
        match c.first_contact(&home, 0.0, &world) {
            Some(Hit::Solid { obstacle, link }) => {
                assert_eq!(obstacle, "crate");
                assert!(link.contains("finger") || link == "link_eef", "{link}");
            }
            other => panic!("{other:?}"),
        }
        // The table raised to the lowest sphere: a table hit comes first.
        world.table_z = lowest(&c, &home);
        assert!(matches!(
            c.first_contact(&home, 0.0, &world),
            Some(Hit::Table { .. })
        ));
        world.table_z -= world.table_margin + c.padding() + 1e-6;
        assert!(matches!(
            c.first_contact(&home, 0.0, &world),
            Some(Hit::Solid { .. })
        ));
    }

    #[test]
    fn self_collisions_are_found_and_only_on_checked_pairs() {
        use rand::{Rng, SeedableRng};
        let (model, mut c) = xarm();
        let spheres = SphereModel::for_model(&model).expect("spheres");
        let world = World::table(-10.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut found = 0;
        for _ in 0..3000 {
            let q: Vec<f64> = model
                .joint_limits()
                .iter()
                .map(|l| rng.gen_range(l.lower..=l.upper))
                .collect();
            if let Some(hit) = c.first_contact(&q, 1.0, &world) {
                let Hit::SelfCollision { a, b } = hit else {
                    panic!("only self-collision is possible here: {hit}");
                };
                assert!(spheres.checks_pair(&a, &b), "{a}-{b} is an allowed pair");
                found += 1;
            }
        }
        assert!(
            found > 30,
            "{found} self-collisions in 3000 random configurations"
        );
    }

    /// The first contact by the documented rules, sphere by sphere with no bounds and the exact
    /// cloud test: the reference the checker's bound-first scan must agree with.
    fn contact_sphere_by_sphere(
        c: &Checker,
        spheres: &SphereModel,
        q: &[f64],
        world: &World,
    ) -> Option<Hit> {
        let poses = c.tree().poses(q, 1.0);
        let pad = c.padding();
        type Placed = (String, bool, Vec<(Point3<f64>, f64)>);
        let all: Vec<Placed> = spheres
            .links
            .iter()
            .map(|l| {
                let grounded = c.link_spheres().iter().any(|(n, _, g)| *n == l.node && *g);
                let placed = l
                    .spheres
                    .iter()
                    .map(|s| (poses[l.node] * s.center, s.radius))
                    .collect();
                (l.link.clone(), grounded, placed)
            })
            .collect();
        let moving = || all.iter().filter(|(_, g, _)| !g);
        let floor = world.table_z + world.table_margin;
        for (name, _, ss) in moving() {
            if ss.iter().any(|(p, r)| p.z - (r + pad) < floor) {
                return Some(Hit::Table { link: name.clone() });
            }
        }
        for (name, _, ss) in moving() {
            for (p, r) in ss {
                if let Some(o) = world
                    .boxes
                    .iter()
                    .find(|o| sphere_hits_shape(p, r + pad, &o.shape, &o.world_from_shape))
                {
                    return Some(Hit::Solid {
                        link: name.clone(),
                        obstacle: o.name.clone(),
                    });
                }
            }
        }
        let f = world.field.as_ref().expect("a cloud");
        for (name, _, ss) in moving() {
            if let Some((p, _)) = ss.iter().find(|(p, r)| f.sphere_hits_exact(p, r + pad)) {
                return Some(Hit::Cloud {
                    link: name.clone(),
                    at: *p,
                });
            }
        }
        for (i, (a, ga, sa)) in all.iter().enumerate() {
            for (b, gb, sb) in &all[i + 1..] {
                if (*ga && *gb) || !spheres.checks_pair(a, b) {
                    continue;
                }
                let touch = sa.iter().any(|(p1, r1)| {
                    sb.iter()
                        .any(|(p2, r2)| (p1 - p2).norm_squared() < (r1 + r2) * (r1 + r2))
                });
                let body = |n: &str| {
                    let b = c.bodies.iter().find(|b| b.name == n).expect("a link body");
                    (b, poses[b.node])
                };
                let ((ba, pa), (bb, pb)) = (body(a), body(b));
                if touch && confirmed_contact(ba, &pa, bb, &pb, pad) {
                    return Some(Hit::SelfCollision {
                        a: a.clone(),
                        b: b.clone(),
                    });
                }
            }
        }
        None
    }

    /// Whether two boxes (half extents, world pose) overlap: the separating-axis test over the
    /// 15 candidate axes (Gottschalk, Lin and Manocha, "OBBTree", SIGGRAPH 1996, section 4).
    fn boxes_overlap(
        ha: &Vector3<f64>,
        pa: &Isometry3<f64>,
        hb: &Vector3<f64>,
        pb: &Isometry3<f64>,
    ) -> bool {
        let ax: Vec<Vector3<f64>> = (0..3).map(|i| pa.rotation * Vector3::ith(i, 1.0)).collect();
        let bx: Vec<Vector3<f64>> = (0..3).map(|i| pb.rotation * Vector3::ith(i, 1.0)).collect();
        let d = pb.translation.vector - pa.translation.vector;
        let mut axes: Vec<Vector3<f64>> = ax.iter().chain(&bx).copied().collect();
        for a in &ax {
            for b in &bx {
                let c = a.cross(b);
                if c.norm() > 1e-9 {
                    axes.push(c.normalize());
                }
            }
        }
        axes.iter().all(|n| {
            let ra: f64 = (0..3).map(|i| ha[i] * ax[i].dot(n).abs()).sum();
            let rb: f64 = (0..3).map(|i| hb[i] * bx[i].dot(n).abs()).sum();
            d.dot(n).abs() <= ra + rb
        })
    }

    /// The WidowX's base and upper arm are boxes in its URDF. The planner's spheres overreach
    /// them by centimetres and touch over a wide range of shoulder angles; the checker reports
    /// only what the boxes (grown by the padding) confirm, and never misses a real overlap.
    #[test]
    fn a_self_contact_of_the_planners_spheres_is_confirmed_on_the_primitives() {
        use rand::{Rng, SeedableRng};
        let model = RobotModel::builtin("widowx250").expect("model");
        let mut c = Checker::for_model(&model).expect("checker");
        let spheres = SphereModel::for_model(&model).expect("spheres");
        let world = World::table(-10.0);
        let shape = |link: &str| {
            let s = model
                .collision_shapes()
                .into_iter()
                .find(|s| s.link == link)
                .expect("a primitive");
            let Shape::Cuboid { half_extents } = s.shape else {
                panic!("{link}: a box in the URDF");
            };
            (half_extents, s.link_from_shape)
        };
        let (base, upper) = (shape("base_link"), shape("upper_arm_link"));
        let pair = |hit: &Option<Hit>| matches!(hit, Some(Hit::SelfCollision { a, b }) if a == "base_link" && b == "upper_arm_link");
        let (nb, nu) = (
            c.tree().index_of("base_link").expect("node"),
            c.tree().index_of("upper_arm_link").expect("node"),
        );
        let coarse = |l: &str| {
            spheres
                .links
                .iter()
                .find(|x| x.link == l)
                .expect("link")
                .spheres
                .clone()
        };
        let (cb, cu) = (coarse("base_link"), coarse("upper_arm_link"));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        let (mut loose_only, mut real, mut grown_clear) = (0, 0, 0);
        for _ in 0..20_000 {
            let q: Vec<f64> = model
                .joint_limits()
                .iter()
                .map(|l| rng.gen_range(l.lower..=l.upper))
                .collect();
            let poses = c.tree().poses(&q, 1.0);
            let hit = c.first_contact(&q, 1.0, &world);
            let overlap = boxes_overlap(
                &base.0,
                &(poses[nb] * base.1),
                &upper.0,
                &(poses[nu] * upper.1),
            );
            if overlap {
                real += 1;
                assert!(
                    pair(&hit),
                    "the boxes overlap at {q:?}, the checker says {hit:?}"
                );
            }
            // Boxes apart by more than the padding on both and the cover's reach: no contact.
            let grow = Vector3::repeat(2.0 * c.padding() + 0.015);
            if !boxes_overlap(
                &(base.0 + grow),
                &(poses[nb] * base.1),
                &upper.0,
                &(poses[nu] * upper.1),
            ) {
                grown_clear += 1;
                assert!(
                    !pair(&hit),
                    "the boxes are apart at {q:?}, the checker says {hit:?}"
                );
                if spheres_touch(&cb, &poses[nb], &cu, &poses[nu]) {
                    loose_only += 1;
                }
            }
        }
        assert!(real > 10, "{real} overlaps of the boxes in 20000 samples");
        assert!(grown_clear > 1000, "{grown_clear}");
        assert!(
            loose_only > 10,
            "{loose_only} samples where only the planner's spheres touch"
        );
    }

    #[test]
    fn bound_first_scan_agrees_with_sphere_by_sphere() {
        use crate::planning::field::DistanceField;
        use rand::{Rng, SeedableRng};
        let (model, mut c) = xarm();
        let spheres = SphereModel::for_model(&model).expect("spheres");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        // Boxes and a cloud of random columns in front of the robot.
        let mut world = World::table(0.0);
        for i in 0..4 {
            world.boxes.push(Obstacle {
                name: format!("box{i}"),
                shape: Shape::Cuboid {
                    half_extents: Vector3::new(0.05, 0.08, rng.gen_range(0.05..0.2)),
                },
                world_from_shape: Isometry3::translation(
                    rng.gen_range(0.2..0.6),
                    rng.gen_range(-0.4..0.4),
                    0.1,
                ),
            });
        }
        let dims = [60, 80, 40];
        let mut occ = vec![false; dims[0] * dims[1] * dims[2]];
        for _ in 0..25 {
            let (i, j, h) = (
                rng.gen_range(0..dims[0]),
                rng.gen_range(0..dims[1]),
                rng.gen_range(1..dims[2]),
            );
            for k in 0..h {
                occ[(i * dims[1] + j) * dims[2] + k] = true;
            }
        }
        let field = DistanceField::from_occupancy(Point3::new(0.1, -0.4, 0.0), 0.01, dims, &occ);
        world.field = Some(std::sync::Arc::new(field));
        let mut kinds = std::collections::BTreeMap::new();
        for _ in 0..4000 {
            let q: Vec<f64> = model
                .joint_limits()
                .iter()
                .map(|l| rng.gen_range(l.lower..=l.upper))
                .collect();
            let want = contact_sphere_by_sphere(&c, &spheres, &q, &world);
            let kind = match &want {
                None => "clear",
                Some(Hit::Table { .. }) => "table",
                Some(Hit::Solid { .. }) => "solid",
                Some(Hit::Cloud { .. }) => "cloud",
                Some(Hit::SelfCollision { .. }) => "self",
            };
            *kinds.entry(kind).or_insert(0) += 1;
            c.set_exact_cloud(true);
            assert_eq!(c.first_contact(&q, 1.0, &world), want, "at {q:?}");
            // The planner's fast cloud test is a lower bound on the distance: it may see contact
            // where there is none (so a bound can clear a body one of whose spheres it would
            // flag), never the reverse, and the rules before the cloud are unchanged.
            c.set_exact_cloud(false);
            let fast = c.first_contact(&q, 1.0, &world);
            match (&want, &fast) {
                (Some(Hit::Table { .. } | Hit::Solid { .. }), _) => assert_eq!(fast, want),
                (Some(_), None) => panic!("the fast test cleared a contact at {q:?}: {want:?}"),
                _ => {}
            }
        }
        // Every rule was exercised, and clear poses too.
        for k in ["clear", "table", "solid", "cloud", "self"] {
            assert!(kinds.get(k).copied().unwrap_or(0) > 20, "{kinds:?}");
        }
    }

    #[test]
    fn held_object_is_checked() {
        let (model, mut c) = xarm();
        let home = model.home().to_vec();
        // The table 1 cm below the lowest sphere: clear empty-handed, hit with an object held
        // that reaches down to it.
        let mut world = World::table(0.0);
        world.table_z = lowest(&c, &home) - world.table_margin - c.padding() - 0.01;
        assert_eq!(c.first_contact(&home, 0.0, &world), None);
        // Home holds the tool straight down (+z of the tip): a long object reaching the table.
        let tcp = model.fk(&home).expect("fk");
        assert!((tcp.rotation * Vector3::z()).z < -0.99);
        c.set_attached(Some(Attached {
            spheres: vec![Sphere {
                center: Point3::new(0.0, 0.0, tcp.translation.z - world.table_z),
                radius: 0.02,
            }],
        }));
        assert_eq!(
            c.first_contact(&home, 0.0, &world),
            Some(Hit::Table {
                link: HELD.to_string()
            })
        );
    }
}
