//! RRT-Connect in joint space (Kuffner & LaValle 2000) and random shortcutting.
//!
//! Two trees grow toward random samples and greedily toward each other; every edge is checked at
//! poses no sphere moves more than twice the checker's padding between (ends included), with the
//! spheres grown by that padding, so the whole swept motion of a returned path is clear. Shortcutting then replaces stretches of the path with
//! straight segments that are clear too. Deterministic for a given seed: the same problem gives
//! the same path (tests and benchmarks rely on it).

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::checker::{Checker, Hit};
use super::World;
use crate::kinematics::JointLimit;

/// Search settings of [`rrt_connect`].
#[derive(Debug, Clone, PartialEq)]
pub struct RrtOptions {
    /// Longest extension toward a sample (rad, Euclidean in joint space).
    pub range: f64,
    /// Give up after this long.
    pub max_time: Duration,
    /// Shortcut attempts on the found path.
    pub shortcut_rounds: usize,
    /// Seed of the sampler: the same seed and problem give the same path (default 1).
    pub seed: u64,
}

impl Default for RrtOptions {
    fn default() -> Self {
        RrtOptions {
            range: 1.0,
            max_time: Duration::from_secs(2),
            shortcut_rounds: 80,
            seed: 1,
        }
    }
}

/// Why the planner returned no path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RrtError {
    /// The start configuration touches the world or itself; nothing can leave it.
    #[error("the start is in collision: {0}")]
    StartInCollision(Hit),
    /// The goal configuration touches the world or itself.
    #[error("the goal is in collision: {0}")]
    GoalInCollision(Hit),
    /// The time limit ran out before the trees met.
    #[error("no collision-free path found within {ms:.0} ms ({samples} samples, trees of {nodes} nodes)")]
    NoPath {
        /// Time spent searching, ms.
        ms: f64,
        /// Random samples drawn.
        samples: usize,
        /// Nodes in both trees together.
        nodes: usize,
    },
    /// A start or goal of the wrong length or outside the joint limits, or a non-positive range.
    #[error("{0}")]
    BadInput(String),
}

/// A found path and what finding it took.
#[derive(Debug, Clone, PartialEq)]
pub struct RrtPath {
    /// Waypoints from start to goal, shortcut.
    pub waypoints: Vec<Vec<f64>>,
    /// Waypoints before shortcutting (2 = the straight segment was clear).
    pub raw_waypoints: usize,
    /// Joint-space length before shortcutting (rad).
    pub raw_length: f64,
    /// Random samples drawn (0 when the straight segment was clear).
    pub samples: usize,
}

/// Euclidean joint-space length of a path.
pub fn path_length(path: &[Vec<f64>]) -> f64 {
    path.windows(2).map(|w| dist(&w[0], &w[1])).sum()
}

fn dist(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt()
}

/// One tree: configurations stored flat (`dof` values each) and parent indices.
struct Tree {
    dof: usize,
    q: Vec<f64>,
    parent: Vec<usize>,
}

impl Tree {
    fn new(root: &[f64]) -> Tree {
        Tree {
            dof: root.len(),
            q: root.to_vec(),
            parent: vec![usize::MAX],
        }
    }
    fn len(&self) -> usize {
        self.parent.len()
    }
    fn at(&self, i: usize) -> &[f64] {
        &self.q[i * self.dof..(i + 1) * self.dof]
    }
    fn push(&mut self, q: &[f64], parent: usize) -> usize {
        self.q.extend_from_slice(q);
        self.parent.push(parent);
        self.len() - 1
    }
    fn nearest(&self, q: &[f64]) -> usize {
        let mut best = (0, f64::INFINITY);
        for (i, c) in self.q.chunks_exact(self.dof).enumerate() {
            let d: f64 = c.iter().zip(q).map(|(a, b)| (a - b) * (a - b)).sum();
            if d < best.1 {
                best = (i, d);
            }
        }
        best.0
    }
    /// Root → node `i`.
    fn branch(&self, mut i: usize) -> Vec<Vec<f64>> {
        let mut out = Vec::new();
        while i != usize::MAX {
            out.push(self.at(i).to_vec());
            i = self.parent[i];
        }
        out.reverse();
        out
    }
}

enum Extend {
    Trapped,
    Advanced(usize),
    Reached(usize),
}

/// What the search checks with.
struct Space<'a> {
    checker: &'a mut Checker,
    world: &'a World,
    opening: f64,
}

impl Space<'_> {
    /// Clear from `a` (known clear) to `b`, `b` included.
    fn edge_free(&mut self, a: &[f64], b: &[f64]) -> bool {
        let n = self.checker.edge_steps(a, b);
        let mut q = a.to_vec();
        // Far end first, then the interior coarse to fine (midpoint, quarters, ...): a blocked
        // edge is usually found after a few checks instead of after half of them.
        for i in std::iter::once(n).chain(bisection_order(n)) {
            let f = i as f64 / n as f64;
            for (k, v) in q.iter_mut().enumerate() {
                *v = a[k] + f * (b[k] - a[k]);
            }
            if !self.checker.is_free(&q, self.opening, self.world) {
                return false;
            }
        }
        true
    }

    fn extend(&mut self, tree: &mut Tree, target: &[f64], range: f64) -> Extend {
        let near = tree.nearest(target);
        let from = tree.at(near).to_vec();
        let d = dist(&from, target);
        let (to, reached) = if d <= range {
            (target.to_vec(), true)
        } else {
            let f = range / d;
            (
                from.iter()
                    .zip(target)
                    .map(|(a, b)| a + f * (b - a))
                    .collect(),
                false,
            )
        };
        if !self.edge_free(&from, &to) {
            return Extend::Trapped;
        }
        let i = tree.push(&to, near);
        if reached {
            Extend::Reached(i)
        } else {
            Extend::Advanced(i)
        }
    }
}

/// 1..n−1 coarse to fine: the midpoint, then the quarter points, and so on, each index once.
fn bisection_order(n: usize) -> impl Iterator<Item = usize> {
    let mut out = Vec::with_capacity(n.saturating_sub(1));
    let mut seen = vec![false; n + 1];
    seen[0] = true;
    seen[n] = true;
    let mut parts = 2;
    while out.len() + 1 < n {
        for k in (1..parts).step_by(2) {
            let i = k * n / parts;
            if !seen[i] {
                seen[i] = true;
                out.push(i);
            }
        }
        if parts > 2 * n {
            // Any index the halving skipped (n not a power of two).
            out.extend((1..n).filter(|i| !seen[*i]));
            break;
        }
        parts *= 2;
    }
    out.into_iter()
}

/// A clear joint-space path from `start` to `goal` for the arm with the fingers at `opening`.
pub fn rrt_connect(
    checker: &mut Checker,
    world: &World,
    opening: f64,
    limits: &[JointLimit],
    start: &[f64],
    goal: &[f64],
    o: &RrtOptions,
) -> Result<RrtPath, RrtError> {
    for (what, q) in [("start", start), ("goal", goal)] {
        if q.len() != limits.len() {
            return Err(RrtError::BadInput(format!(
                "{what} has {} joint values, the arm has {}",
                q.len(),
                limits.len()
            )));
        }
        if let Some((v, l)) = q.iter().zip(limits).find(|(v, l)| !l.contains(**v)) {
            return Err(RrtError::BadInput(format!(
                "{what}: joint `{}` = {v} is outside [{}, {}]",
                l.name, l.lower, l.upper
            )));
        }
    }
    if o.range.is_nan() || o.range <= 0.0 {
        return Err(RrtError::BadInput("range must be positive".into()));
    }
    if let Some(h) = checker.first_contact(start, opening, world) {
        return Err(RrtError::StartInCollision(h));
    }
    if let Some(h) = checker.first_contact(goal, opening, world) {
        return Err(RrtError::GoalInCollision(h));
    }
    let mut space = Space {
        checker,
        world,
        opening,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(o.seed);
    if space.edge_free(start, goal) {
        return Ok(RrtPath {
            waypoints: vec![start.to_vec(), goal.to_vec()],
            raw_waypoints: 2,
            raw_length: dist(start, goal),
            samples: 0,
        });
    }
    let began = Instant::now();
    let (mut a, mut b) = (Tree::new(start), Tree::new(goal));
    let mut a_is_start = true;
    let mut samples = 0;
    let mut sample = vec![0.0; limits.len()];
    let raw = loop {
        if began.elapsed() > o.max_time {
            return Err(RrtError::NoPath {
                ms: began.elapsed().as_secs_f64() * 1e3,
                samples,
                nodes: a.len() + b.len(),
            });
        }
        samples += 1;
        for (s, l) in sample.iter_mut().zip(limits) {
            *s = rng.gen_range(l.lower..=l.upper);
        }
        let new = match space.extend(&mut a, &sample, o.range) {
            Extend::Trapped => None,
            Extend::Advanced(i) | Extend::Reached(i) => Some(i),
        };
        if let Some(i) = new {
            let target = a.at(i).to_vec();
            // Connect: extend the other tree toward the new node until it gets there or is stuck.
            let joined = loop {
                match space.extend(&mut b, &target, o.range) {
                    Extend::Advanced(_) => continue,
                    Extend::Reached(j) => break Some(j),
                    Extend::Trapped => break None,
                }
            };
            if let Some(j) = joined {
                let mut from_a = a.branch(i);
                let mut from_b = b.branch(j);
                from_b.pop(); // the same configuration as a's node
                from_b.reverse();
                from_a.extend(from_b);
                if !a_is_start {
                    from_a.reverse();
                }
                break from_a;
            }
        }
        std::mem::swap(&mut a, &mut b);
        a_is_start = !a_is_start;
    };
    let raw_waypoints = raw.len();
    let raw_length = path_length(&raw);
    let waypoints = shortcut(&mut space, raw, o.shortcut_rounds, &mut rng);
    Ok(RrtPath {
        waypoints,
        raw_waypoints,
        raw_length,
        samples,
    })
}

/// Random shortcutting: join two random points of the path (anywhere along it, not only at
/// waypoints) by a straight segment when that segment is clear; then drop waypoints whose
/// neighbours see each other.
fn shortcut(
    space: &mut Space<'_>,
    mut path: Vec<Vec<f64>>,
    rounds: usize,
    rng: &mut ChaCha8Rng,
) -> Vec<Vec<f64>> {
    let point_at = |path: &[Vec<f64>], s: f64| -> (usize, Vec<f64>) {
        // Segment index and the point at arc length s.
        let mut left = s;
        for (i, w) in path.windows(2).enumerate() {
            let d = dist(&w[0], &w[1]);
            if left <= d || i + 2 == path.len() {
                let f = if d > 0.0 {
                    (left / d).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                return (
                    i,
                    w[0].iter()
                        .zip(&w[1])
                        .map(|(a, b)| a + f * (b - a))
                        .collect(),
                );
            }
            left -= d;
        }
        (0, path[0].clone())
    };
    for _ in 0..rounds {
        if path.len() < 3 {
            break;
        }
        let total = path_length(&path);
        let (mut s1, mut s2) = (rng.gen_range(0.0..total), rng.gen_range(0.0..total));
        if s1 > s2 {
            std::mem::swap(&mut s1, &mut s2);
        }
        let (i, p1) = point_at(&path, s1);
        let (j, p2) = point_at(&path, s2);
        if j <= i {
            continue; // both on one segment: already straight
        }
        if !space.edge_free(&p1, &p2) {
            continue;
        }
        // path[..=i], p1, p2, path[j+1..]
        let mut next = path[..=i].to_vec();
        next.push(p1);
        next.push(p2);
        next.extend_from_slice(&path[j + 1..]);
        next.dedup_by(|a, b| dist(a, b) < 1e-9);
        path = next;
    }
    // Waypoints whose neighbours see each other directly are not needed.
    let mut k = 1;
    while k + 1 < path.len() {
        if space.edge_free(&path[k - 1], &path[k + 1]) {
            path.remove(k);
        } else {
            k += 1;
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::Shape;
    use crate::kinematics::RobotModel;
    use crate::planning::Obstacle;
    use k::nalgebra::{Isometry3, Vector3};

    /// A wall between two configurations on either side of it.
    fn wall_problem() -> (RobotModel, Checker, World, Vec<f64>, Vec<f64>) {
        let model = RobotModel::builtin("xarm6").expect("model");
        let c = Checker::for_model(&model).expect("checker");
        // A thin wall across the tool's sweep about joint 1, from the table to 5 cm above the
        // tool: the arm must lift over it (or swing around it).
        let tcp = model.fk(model.home()).expect("fk").translation.vector;
        let top = tcp.z + 0.05;
        let mut world = World::table(0.0);
        world.boxes.push(Obstacle {
            name: "wall".into(),
            shape: Shape::Cuboid {
                half_extents: Vector3::new(0.1, 0.01, top / 2.0),
            },
            world_from_shape: Isometry3::translation(tcp.x, 0.0, top / 2.0),
        });
        let mut start = model.home().to_vec();
        start[0] = -0.7;
        let mut goal = start.clone();
        goal[0] = 0.7;
        (model, c, world, start, goal)
    }

    /// The first contact at 400 evenly spaced poses per edge, spheres (almost) unpadded.
    fn fine_contact(c: &mut Checker, path: &[Vec<f64>], world: &World) -> Option<Hit> {
        let kept = c.padding();
        c.set_padding(0.0);
        let mut hit = None;
        'edges: for w in path.windows(2) {
            for i in 0..=400 {
                let f = i as f64 / 400.0;
                let q: Vec<f64> = w[0]
                    .iter()
                    .zip(&w[1])
                    .map(|(a, b)| a + f * (b - a))
                    .collect();
                if let Some(h) = c.first_contact(&q, 1.0, world) {
                    hit = Some(h);
                    break 'edges;
                }
            }
        }
        c.set_padding(kept);
        hit
    }

    #[test]
    fn bisection_order_visits_every_interior_index_once() {
        for n in 1..70 {
            let mut v: Vec<usize> = bisection_order(n).collect();
            if n > 2 {
                assert_eq!(v[0], n / 2, "midpoint first for {n}");
            }
            v.sort_unstable();
            assert_eq!(v, (1..n).collect::<Vec<_>>(), "n = {n}");
        }
    }

    #[test]
    fn finds_a_clear_path_around_a_wall_and_every_edge_checks_clear() {
        let (model, mut c, world, start, goal) = wall_problem();
        // The straight move sweeps through the wall.
        assert!(c.segment_contact(&start, &goal, 1.0, &world).is_some());
        for seed in 1..=5 {
            let o = RrtOptions {
                seed,
                ..RrtOptions::default()
            };
            let p = rrt_connect(&mut c, &world, 1.0, model.joint_limits(), &start, &goal, &o)
                .expect("path");
            assert_eq!(p.waypoints.first(), Some(&start));
            assert_eq!(p.waypoints.last(), Some(&goal));
            assert!(p.waypoints.len() >= 3, "a wall needs a detour");
            // Re-check 400 poses per edge with the spheres unpadded: the swept motion is clear.
            assert_eq!(fine_contact(&mut c, &p.waypoints, &world), None);
            for q in &p.waypoints {
                assert!(q
                    .iter()
                    .zip(model.joint_limits())
                    .all(|(v, l)| l.contains(*v)));
            }
            // Shortcutting never lengthens the path.
            assert!(path_length(&p.waypoints) <= p.raw_length + 1e-9);
        }
        // Same seed, same path.
        let o = RrtOptions::default();
        let a = rrt_connect(&mut c, &world, 1.0, model.joint_limits(), &start, &goal, &o);
        let b = rrt_connect(&mut c, &world, 1.0, model.joint_limits(), &start, &goal, &o);
        assert_eq!(a, b);
    }

    #[test]
    fn clear_straight_moves_need_no_search_and_bad_ends_are_named() {
        let (model, mut c, mut world, start, mut goal) = wall_problem();
        let o = RrtOptions::default();
        let mut near = start.clone();
        near[0] += 0.2;
        let p = rrt_connect(&mut c, &world, 1.0, model.joint_limits(), &start, &near, &o)
            .expect("straight");
        assert_eq!((p.waypoints.len(), p.samples), (2, 0));
        // A goal inside the wall: the error names the link and the wall.
        let tcp_goal = model.fk(&goal).expect("fk").translation.vector;
        world.boxes.push(Obstacle {
            name: "post".into(),
            shape: Shape::Cuboid {
                half_extents: Vector3::new(0.02, 0.02, 0.02),
            },
            world_from_shape: Isometry3::translation(tcp_goal.x, tcp_goal.y, tcp_goal.z),
        });
        match rrt_connect(&mut c, &world, 0.0, model.joint_limits(), &start, &goal, &o) {
            Err(RrtError::GoalInCollision(Hit::Solid { obstacle, .. })) => {
                assert_eq!(obstacle, "post")
            }
            other => panic!("{other:?}"),
        }
        goal[1] = 99.0;
        assert!(matches!(
            rrt_connect(&mut c, &world, 1.0, model.joint_limits(), &start, &goal, &o),
            Err(RrtError::BadInput(m)) if m.contains("joint2")
        ));
        // No time at all: the wall problem needs a search, and the error says none finished.
        let (_, _, wall, start, goal) = wall_problem();
        let none = RrtOptions {
            max_time: Duration::ZERO,
            ..o
        };
        let r = rrt_connect(
            &mut c,
            &wall,
            1.0,
            model.joint_limits(),
            &start,
            &goal,
            &none,
        );
        assert!(matches!(r, Err(RrtError::NoPath { .. })), "{r:?}");
    }
}
