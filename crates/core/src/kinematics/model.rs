//! `RobotModel`: a robot.toml + URDF pair, validated against each other, with FK and Jacobian by `k`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

use k::nalgebra::{DMatrix, Isometry3, Translation3, UnitQuaternion, Vector3};

use super::config::RobotConfig;
use super::error::KinematicsError;
use crate::geometry::Shape;

/// Robots compiled into the binary, so `pointact` runs from any folder: (name, robot.toml, URDF).
pub const BUILTIN_ROBOTS: &[(&str, &str, &str)] = &[
    (
        "xarm6",
        include_str!("../../../../robot-configs/xarm6/robot.toml"),
        include_str!("../../../../robot-configs/xarm6/xarm6.urdf"),
    ),
    (
        "widowx250",
        include_str!("../../../../robot-configs/widowx250/robot.toml"),
        include_str!("../../../../robot-configs/widowx250/wx250s.urdf"),
    ),
];

/// Position and velocity limits of one arm joint, from the URDF.
#[derive(Debug, Clone, PartialEq)]
pub struct JointLimit {
    /// The joint's URDF name.
    pub name: String,
    /// Lower position limit, rad (or m for prismatic joints).
    pub lower: f64,
    /// Upper position limit, same unit.
    pub upper: f64,
    /// URDF velocity limit, rad/s (or m/s for prismatic joints).
    pub velocity: f64,
}

impl JointLimit {
    /// Whether `q` lies within the limits, bounds included.
    pub fn contains(&self, q: f64) -> bool {
        q >= self.lower && q <= self.upper
    }
    /// Middle of the range.
    pub fn mid(&self) -> f64 {
        0.5 * (self.lower + self.upper)
    }
}

/// One primitive of a link's geometry, placed in the link frame.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkShape {
    /// The URDF link it belongs to.
    pub link: String,
    /// The primitive, in its own frame.
    pub shape: Shape,
    /// Pose of the primitive's frame in the link frame.
    pub link_from_shape: Isometry3<f64>,
}

/// A robot description ready for kinematics. Poses are `base_from_tip` in the robot base frame.
#[derive(Debug)]
pub struct RobotModel {
    /// The robot's `robot.toml`, validated against the URDF.
    pub config: RobotConfig,
    /// Where the description came from ("built-in xarm6" or a folder), for messages.
    pub source: String,
    /// The parsed URDF, kept for link geometry (visualisation, collision models).
    pub urdf: urdf_rs::Robot,
    limits: Vec<JointLimit>,
    /// `k` nodes are shared, interior-mutable cells: FK sets joint positions then reads transforms,
    /// so the chain sits behind a mutex to keep `&RobotModel` usable from several threads.
    arm: Mutex<k::SerialChain<f64>>,
    /// The whole tree (fingers included), for link poses.
    tree: Mutex<k::Chain<f64>>,
    tip_from_flange: Isometry3<f64>,
}

impl RobotModel {
    /// A robot compiled into the binary (`xarm6`, `widowx250`).
    pub fn builtin(name: &str) -> Result<Self, KinematicsError> {
        let (_, toml_text, urdf_text) = BUILTIN_ROBOTS
            .iter()
            .find(|(n, _, _)| *n == name)
            .ok_or_else(|| KinematicsError::UnknownRobot {
                name: name.to_string(),
                known: builtin_names(),
                or_folder: false,
            })?;
        Self::from_strs(
            toml_text,
            &format!("robot-configs/{name}/robot.toml"),
            urdf_text,
            &format!("built-in {name}"),
        )
    }

    /// Loads `dir/robot.toml` and the URDF it names.
    pub fn load_dir(dir: &Path) -> Result<Self, KinematicsError> {
        let toml_path = dir.join("robot.toml");
        let toml_text = read(&toml_path)?;
        let cfg = RobotConfig::from_toml_str(&toml_text, &toml_path.display().to_string())?;
        let urdf_path = dir.join(&cfg.urdf);
        // Named as robot.toml's field: the path comes from there (and may lead anywhere).
        let urdf_text = read(&urdf_path)
            .map_err(|e| field_err(&toml_path.display().to_string(), "urdf", e.to_string()))?;
        Self::from_strs(
            &toml_text,
            &toml_path.display().to_string(),
            &urdf_text,
            &urdf_path.display().to_string(),
        )
    }

    /// A built-in name, else a folder path.
    pub fn resolve(name_or_dir: &str) -> Result<Self, KinematicsError> {
        if BUILTIN_ROBOTS.iter().any(|(n, _, _)| *n == name_or_dir) {
            return Self::builtin(name_or_dir);
        }
        let p = Path::new(name_or_dir);
        if p.is_dir() {
            Self::load_dir(p)
        } else {
            Err(KinematicsError::UnknownRobot {
                name: name_or_dir.to_string(),
                known: builtin_names(),
                or_folder: true,
            })
        }
    }

    /// Builds a model from the texts of robot.toml and the URDF; `toml_file` / `urdf_file` name them
    /// in error messages.
    pub fn from_strs(
        toml_text: &str,
        toml_file: &str,
        urdf_text: &str,
        urdf_file: &str,
    ) -> Result<Self, KinematicsError> {
        let config = RobotConfig::from_toml_str(toml_text, toml_file)?;
        let depth = xml_depth(urdf_text, MAX_URDF_DEPTH + 1);
        if depth > MAX_URDF_DEPTH {
            return Err(KinematicsError::Urdf {
                file: urdf_file.to_string(),
                detail: format!(
                    "elements nested more than {MAX_URDF_DEPTH} deep (a URDF needs about 5)"
                ),
            });
        }
        let urdf = urdf_rs::read_from_string(urdf_text).map_err(|e| KinematicsError::Urdf {
            file: urdf_file.to_string(),
            detail: e.to_string(),
        })?;
        let limits = check_urdf(&urdf, &config, toml_file, urdf_file)?;

        let chain = k::Chain::<f64>::from(&urdf);
        let tip_node = chain
            .find_link(&config.tip_link)
            .ok_or_else(|| field_err(toml_file, "tip_link", "not found in the k chain".into()))?;
        let serial = k::SerialChain::from_end(tip_node);
        // A joint of the arm that mimics one off the arm (a finger, another branch) cannot be
        // copied out of the tree: k 0.32's `SerialChain::clone` unwraps the mimic parent's index
        // in the chain (src/chain.rs, `impl Clone for SerialChain`).
        let nodes: Vec<&k::Node<f64>> = serial.iter().collect();
        for n in &nodes {
            if let Some(m) = n.mimic_parent() {
                if !nodes.iter().any(|x| **x == m) {
                    return Err(KinematicsError::Urdf {
                        file: urdf_file.to_string(),
                        detail: format!(
                            "arm joint `{}` mimics `{}`, which is not on the arm's chain to `{}`",
                            n.joint().name,
                            m.joint().name,
                            config.tip_link
                        ),
                    });
                }
            }
        }
        // A deep copy: the serial arm must not share joint cells with the tree.
        let arm = serial.clone();
        let movable: Vec<String> = arm.iter_joints().map(|j| j.name.clone()).collect();
        if movable != config.arm_joints {
            return Err(field_err(
                toml_file,
                "arm_joints",
                format!("k chain has movable joints {movable:?}"),
            ));
        }

        let model = RobotModel {
            tip_from_flange: Isometry3::identity(),
            config,
            source: urdf_file.to_string(),
            urdf,
            limits,
            arm: Mutex::new(arm),
            tree: Mutex::new(chain),
        };
        let tip_from_flange = model.check_tcp(toml_file)?;
        Ok(RobotModel {
            tip_from_flange,
            ..model
        })
    }

    /// The robot's name from `robot.toml`.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Number of arm joints.
    pub(crate) fn dof(&self) -> usize {
        self.limits.len()
    }

    /// Limits of the arm joints, base to tip.
    pub fn joint_limits(&self) -> &[JointLimit] {
        &self.limits
    }

    /// The ready pose from `robot.toml`, rad.
    pub fn home(&self) -> &[f64] {
        &self.config.home
    }

    /// Middle of every joint range: the nominal seed of published IK benchmarks.
    pub fn mid_range(&self) -> Vec<f64> {
        self.limits.iter().map(JointLimit::mid).collect()
    }

    /// Errors unless `q` has one finite value per arm joint.
    pub(crate) fn check_finite(&self, q: &[f64]) -> Result<(), KinematicsError> {
        if q.len() != self.dof() {
            return Err(KinematicsError::JointCount {
                expected: self.dof(),
                got: q.len(),
            });
        }
        match q.iter().zip(&self.limits).find(|(v, _)| !v.is_finite()) {
            Some((v, l)) => Err(KinematicsError::NonFinite {
                joint: l.name.clone(),
                value: *v,
            }),
            None => Ok(()),
        }
    }

    /// Errors unless `q` is finite and inside every joint's limits.
    pub fn check_limits(&self, q: &[f64]) -> Result<(), KinematicsError> {
        self.check_finite(q)?;
        match q.iter().zip(&self.limits).find(|(v, l)| !l.contains(**v)) {
            Some((v, l)) => Err(KinematicsError::OutOfLimits {
                joint: l.name.clone(),
                value: *v,
                lower: l.lower,
                upper: l.upper,
            }),
            None => Ok(()),
        }
    }

    /// Pose of the tip (TCP) in the base frame. Limits are not enforced here (see `check_limits`):
    /// FK is geometry, the safety gate decides what may move.
    pub fn fk(&self, q: &[f64]) -> Result<Isometry3<f64>, KinematicsError> {
        self.check_finite(q)?;
        let arm = self.lock();
        arm.set_joint_positions_unchecked(q);
        Ok(arm.end_transform())
    }

    /// Pose of the flange (where the tool is mounted) in the base frame.
    pub fn fk_flange(&self, q: &[f64]) -> Result<Isometry3<f64>, KinematicsError> {
        Ok(self.fk(q)? * self.tip_from_flange.inverse())
    }

    /// Geometric Jacobian of the tip, 6×dof: rows are linear velocity (x, y, z) of the tip point then
    /// angular velocity, both in base-frame axes (Pinocchio's LOCAL_WORLD_ALIGNED).
    pub fn jacobian(&self, q: &[f64]) -> Result<DMatrix<f64>, KinematicsError> {
        self.check_finite(q)?;
        let arm = self.lock();
        arm.set_joint_positions_unchecked(q);
        Ok(k::jacobian(&arm))
    }

    /// The tip relative to the flange (the TCP offset), as found in the URDF.
    pub fn tip_from_flange(&self) -> Isometry3<f64> {
        self.tip_from_flange
    }

    /// World (base-frame) pose of every link for arm joints `q` and a gripper opening in [0, 1]
    /// (0 closed, 1 open; non-arm joints such as fingers move linearly between their limits).
    pub fn link_poses(
        &self,
        q: &[f64],
        gripper_opening: f64,
    ) -> Result<Vec<(String, Isometry3<f64>)>, KinematicsError> {
        self.check_finite(q)?;
        let g = if gripper_opening.is_finite() {
            gripper_opening.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let tree = self.tree.lock().unwrap_or_else(|p| p.into_inner());
        for node in tree.iter() {
            let name = node.joint().name.clone();
            let limits = node.joint().limits;
            if let Some(i) = self.config.arm_joints.iter().position(|n| *n == name) {
                node.set_joint_position_unchecked(q[i]);
            } else if let Some(l) = limits {
                node.set_joint_position_unchecked(l.min + g * (l.max - l.min));
            }
        }
        tree.update_transforms();
        Ok(tree
            .iter()
            .filter_map(|n| {
                let link = n.link().as_ref().map(|l| l.name.clone())?;
                Some((link, n.world_transform()?))
            })
            .collect())
    }

    /// How far the tool's collision geometry (links rigidly attached to the tip: fingers, gripper
    /// body) reaches beyond the tip along the approach axis. A top-down TCP must stay this much
    /// higher above a surface than the clearance the fingertips need.
    pub fn tool_reach_beyond_tip(&self) -> f64 {
        let a = Vector3::from(self.config.approach_axis);
        let q1 = self.config.home.clone();
        let q2: Vec<f64> = q1.iter().map(|v| v + 0.1).collect();
        let (Ok(p1), Ok(p2), Ok(t1), Ok(t2)) = (
            self.link_poses(&q1, 1.0),
            self.link_poses(&q2, 1.0),
            self.fk(&q1),
            self.fk(&q2),
        ) else {
            return 0.0;
        };
        let mut reach = 0.0f64;
        for s in self.collision_shapes() {
            let find = |v: &[(String, Isometry3<f64>)]| {
                v.iter().find(|(n, _)| *n == s.link).map(|(_, p)| *p)
            };
            let (Some(l1), Some(l2)) = (find(&p1), find(&p2)) else {
                continue;
            };
            let (r1, r2) = (t1.inverse() * l1, t2.inverse() * l2);
            let (dp, dr) = pose_error(&r1, &r2);
            if dp > 1e-9 || dr > 1e-9 {
                continue; // moves relative to the tip: not part of the tool
            }
            let tip_from_shape = r1 * s.link_from_shape;
            let local_a = tip_from_shape.rotation.inverse() * a;
            reach =
                reach.max(tip_from_shape.translation.vector.dot(&a) + s.shape.support(&local_a));
        }
        reach
    }

    /// Collision primitives of every link (URDF `<collision>`; meshes are skipped).
    pub fn collision_shapes(&self) -> Vec<LinkShape> {
        self.urdf
            .links
            .iter()
            .flat_map(|l| {
                l.collision
                    .iter()
                    .filter_map(move |c| link_shape(&l.name, &c.origin, &c.geometry))
            })
            .collect()
    }

    /// Visual primitives of every link (URDF `<visual>`; meshes are skipped).
    pub fn visual_shapes(&self) -> Vec<LinkShape> {
        self.urdf
            .links
            .iter()
            .flat_map(|l| {
                l.visual
                    .iter()
                    .filter_map(move |v| link_shape(&l.name, &v.origin, &v.geometry))
            })
            .collect()
    }

    /// An independent copy of the `k` chain, for solvers that mutate joint state in a loop.
    pub fn arm_chain(&self) -> k::SerialChain<f64> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, k::SerialChain<f64>> {
        // A panic while holding the lock cannot leave the chain inconsistent (every use sets all
        // joint positions first), so a poisoned lock is safe to reuse.
        self.arm.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The URDF's flange→tip transform must equal robot.toml's TCP offset: the controller is told the
    /// TCP from robot.toml, IK uses the URDF, and a mismatch would put the fingers in the wrong place.
    fn check_tcp(&self, toml_file: &str) -> Result<Isometry3<f64>, KinematicsError> {
        let arm = self.lock();
        let zero = vec![0.0; self.dof()];
        arm.set_joint_positions_unchecked(&zero);
        arm.update_transforms();
        let flange = arm
            .iter()
            .find(|n| {
                n.link()
                    .as_ref()
                    .is_some_and(|l| l.name == self.config.flange_link)
            })
            .and_then(|n| n.world_transform())
            .ok_or_else(|| {
                field_err(
                    toml_file,
                    "flange_link",
                    format!(
                        "`{}` is not on the chain from base to tip",
                        self.config.flange_link
                    ),
                )
            })?;
        let tip = arm.end_transform();
        drop(arm);
        let tip_from_flange = flange.inverse() * tip;
        let [x, y, z] = self.config.tcp_offset_xyz;
        let [r, p, yw] = self.config.tcp_offset_rpy;
        let want = Isometry3::from_parts(
            Translation3::new(x, y, z),
            UnitQuaternion::from_euler_angles(r, p, yw),
        );
        let (dp, dr) = pose_error(&want, &tip_from_flange);
        // Written so that NaN fails too.
        if !(dp <= 1e-9 && dr <= 1e-9) {
            let t = tip_from_flange.translation.vector;
            return Err(field_err(
                toml_file,
                "tcp_offset_xyz",
                format!(
                    "URDF puts the tip at ({:.6}, {:.6}, {:.6}) m from the flange (rotation off by {dr:.2e} rad); robot.toml says {:?}",
                    t.x, t.y, t.z, self.config.tcp_offset_xyz
                ),
            ));
        }
        Ok(tip_from_flange)
    }
}

/// Position error (m) and rotation error (rad, angle of the relative rotation) between two poses.
pub fn pose_error(a: &Isometry3<f64>, b: &Isometry3<f64>) -> (f64, f64) {
    let dp: Vector3<f64> = a.translation.vector - b.translation.vector;
    (dp.norm(), a.rotation.angle_to(&b.rotation))
}

fn link_shape(link: &str, origin: &urdf_rs::Pose, g: &urdf_rs::Geometry) -> Option<LinkShape> {
    let shape = match *g {
        urdf_rs::Geometry::Box { ref size } => Shape::Cuboid {
            half_extents: Vector3::new(size[0], size[1], size[2]) * 0.5,
        },
        urdf_rs::Geometry::Cylinder { radius, length } => Shape::Cylinder {
            radius,
            half_height: 0.5 * length,
        },
        urdf_rs::Geometry::Capsule { radius, length } => Shape::Capsule {
            radius,
            half_height: 0.5 * length,
        },
        urdf_rs::Geometry::Sphere { radius } => Shape::Sphere { radius },
        urdf_rs::Geometry::Mesh { .. } => return None,
    };
    Some(LinkShape {
        link: link.to_string(),
        shape,
        link_from_shape: k::urdf::isometry_from(origin),
    })
}

/// Deepest element nesting accepted in a URDF. `urdf_rs` recurses once per level while parsing and
/// a few thousand levels overflow the stack (an abort, not an error), so deeper files are refused
/// before they reach it; real ones are about 5 deep (robot, link, visual, geometry, box).
const MAX_URDF_DEPTH: usize = 64;

/// How deep the elements of `xml` nest, counting up to `stop` (enough to refuse a file). A scan of
/// tags only: comments, CDATA, processing instructions and declarations are skipped, quoted
/// attribute values may hold `>`, `<x/>` opens nothing. Malformed text gets some count; the parser
/// rejects it afterwards.
fn xml_depth(xml: &str, stop: usize) -> usize {
    let b = xml.as_bytes();
    let (mut i, mut depth, mut max) = (0, 0usize, 0usize);
    let skip_to = |from: usize, end: &str| {
        xml[from..]
            .find(end)
            .map_or(b.len(), |k| from + k + end.len())
    };
    while i < b.len() && max < stop {
        if b[i] != b'<' {
            i += 1;
            continue;
        }
        let rest = &b[i..];
        if rest.starts_with(b"<!--") {
            i = skip_to(i + 4, "-->");
        } else if rest.starts_with(b"<![CDATA[") {
            i = skip_to(i + 9, "]]>");
        } else if rest.starts_with(b"<?") {
            i = skip_to(i + 2, "?>");
        } else if rest.starts_with(b"<!") {
            i = skip_to(i + 2, ">");
        } else if rest.starts_with(b"</") {
            depth = depth.saturating_sub(1);
            i = skip_to(i + 2, ">");
        } else {
            // An opening tag: to its `>`, stepping over quoted attribute values.
            let mut j = i + 1;
            let mut quote = None;
            while j < b.len() {
                match (quote, b[j]) {
                    (None, q @ (b'"' | b'\'')) => quote = Some(q),
                    (Some(q), c) if c == q => quote = None,
                    (None, b'>') => break,
                    _ => {}
                }
                j += 1;
            }
            if !(j < b.len() && b[j - 1] == b'/') {
                depth += 1;
                max = max.max(depth);
            }
            i = j + 1;
        }
    }
    max
}

/// Largest joint or geometry offset (metres) and joint limit (metres or radians) accepted in a
/// URDF. Arms are a metre or two; the bound keeps every pose along a chain finite (offsets of
/// 1e308 m are finite, their sums are not).
const MAX_OFFSET_M: f64 = 1000.0;

/// The numbers of any joint (arm or not), which `k` takes on trust: it panics on a limit range
/// with `lower` above `upper` (or NaN); an infinite limit puts NaN into the finger poses (set
/// between the limits), and a non-finite origin, axis or mimic factor into every pose below the
/// joint.
fn check_joint_numbers(j: &urdf_rs::Joint) -> Result<(), String> {
    let (lower, upper) = (j.limit.lower, j.limit.upper);
    let bounded = |v: f64| v.abs() <= MAX_OFFSET_M;
    if !(bounded(lower) && bounded(upper)) || lower > upper {
        return Err(format!(
            "limit lower {lower} and upper {upper} must be within ±{MAX_OFFSET_M}, lower not above \
             upper"
        ));
    }
    check_origin(&j.origin)?;
    let movable = matches!(
        j.joint_type,
        urdf_rs::JointType::Revolute
            | urdf_rs::JointType::Continuous
            | urdf_rs::JointType::Prismatic
    );
    let axis = *j.axis.xyz;
    let axis_norm = (axis[0].powi(2) + axis[1].powi(2) + axis[2].powi(2)).sqrt();
    if movable && !(axis_norm.is_finite() && axis_norm > 1e-9) {
        return Err(format!("axis {axis:?} is not a direction"));
    }
    if let Some(m) = &j.mimic {
        for (name, v) in [("multiplier", m.multiplier), ("offset", m.offset)] {
            if v.is_some_and(|v| !v.is_finite()) {
                return Err(format!("mimic {name} {v:?} must be finite"));
            }
        }
    }
    Ok(())
}

/// An `<origin>`: finite, offsets within [`MAX_OFFSET_M`].
fn check_origin(o: &urdf_rs::Pose) -> Result<(), String> {
    let (xyz, rpy) = (*o.xyz, *o.rpy);
    if !(xyz.iter().all(|v| v.abs() <= MAX_OFFSET_M) && rpy.iter().all(|v| v.is_finite())) {
        return Err(format!(
            "origin xyz {xyz:?} rpy {rpy:?} must be finite, offsets within ±{MAX_OFFSET_M} m"
        ));
    }
    Ok(())
}

/// Link geometry, which the collision model and the viewer use: placed by a valid origin, sizes
/// finite and in [0, [`MAX_OFFSET_M`]] (a NaN radius would make every distance check pass).
fn check_geometry(origin: &urdf_rs::Pose, g: &urdf_rs::Geometry) -> Result<(), String> {
    check_origin(origin)?;
    let sizes: Vec<f64> = match g {
        urdf_rs::Geometry::Box { size } => size.to_vec(),
        urdf_rs::Geometry::Cylinder { radius, length }
        | urdf_rs::Geometry::Capsule { radius, length } => vec![*radius, *length],
        urdf_rs::Geometry::Sphere { radius } => vec![*radius],
        urdf_rs::Geometry::Mesh { .. } => Vec::new(),
    };
    if !sizes.iter().all(|v| (0.0..=MAX_OFFSET_M).contains(v)) {
        return Err(format!(
            "geometry sizes {sizes:?} must be in [0, {MAX_OFFSET_M}] m"
        ));
    }
    Ok(())
}

fn builtin_names() -> String {
    BUILTIN_ROBOTS
        .iter()
        .map(|(n, _, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

fn read(path: &Path) -> Result<String, KinematicsError> {
    crate::input::read_text(path, crate::input::MAX_CONFIG_BYTES).map_err(|source| {
        KinematicsError::Io {
            path: path.to_path_buf(),
            source,
        }
    })
}

fn field_err(file: &str, field: &str, detail: String) -> KinematicsError {
    KinematicsError::Field {
        file: file.to_string(),
        field: field.to_string(),
        detail,
    }
}

/// Structural checks that `k` does not do (it panics or silently drops parts on a broken tree),
/// then the arm joints' limits in chain order.
fn check_urdf(
    urdf: &urdf_rs::Robot,
    cfg: &RobotConfig,
    toml_file: &str,
    urdf_file: &str,
) -> Result<Vec<JointLimit>, KinematicsError> {
    let uerr = |detail: String| KinematicsError::Urdf {
        file: urdf_file.to_string(),
        detail,
    };
    let mut links = HashSet::new();
    for l in &urdf.links {
        if !links.insert(l.name.as_str()) {
            return Err(uerr(format!("link `{}` is defined twice", l.name)));
        }
    }
    let mut joints: HashMap<&str, &urdf_rs::Joint> = HashMap::new();
    let mut parent_joint_of: HashMap<&str, &urdf_rs::Joint> = HashMap::new();
    for j in &urdf.joints {
        if joints.insert(j.name.as_str(), j).is_some() {
            return Err(uerr(format!("joint `{}` is defined twice", j.name)));
        }
        for (role, link) in [("parent", &j.parent.link), ("child", &j.child.link)] {
            if !links.contains(link.as_str()) {
                return Err(uerr(format!(
                    "joint `{}`: {role} link `{link}` is not defined",
                    j.name
                )));
            }
        }
        if parent_joint_of.insert(j.child.link.as_str(), j).is_some() {
            return Err(uerr(format!(
                "link `{}` is the child of two joints",
                j.child.link
            )));
        }
    }
    for j in &urdf.joints {
        if let Some(m) = &j.mimic {
            if !joints.contains_key(m.joint.as_str()) {
                return Err(uerr(format!(
                    "joint `{}`: mimic joint `{}` is not defined",
                    j.name, m.joint
                )));
            }
        }
    }
    for j in &urdf.joints {
        check_joint_numbers(j).map_err(|detail| uerr(format!("joint `{}`: {detail}", j.name)))?;
    }
    for l in &urdf.links {
        for (role, origin, geometry) in l
            .visual
            .iter()
            .map(|v| ("visual", &v.origin, &v.geometry))
            .chain(
                l.collision
                    .iter()
                    .map(|c| ("collision", &c.origin, &c.geometry)),
            )
        {
            check_geometry(origin, geometry)
                .map_err(|detail| uerr(format!("link `{}` {role}: {detail}", l.name)))?;
        }
    }
    let roots: Vec<&str> = urdf
        .links
        .iter()
        .map(|l| l.name.as_str())
        .filter(|l| !parent_joint_of.contains_key(l))
        .collect();
    if roots.len() != 1 {
        return Err(uerr(format!(
            "expected one root link, found {roots:?} (a missing joint leaves a link unattached)"
        )));
    }
    // One root and one parent per link still allows a loop of joints that never reaches the root
    // (a joint whose parent is its own child, or a descendant of it): walking up from a link in
    // it never ends. Every link must reach the root in fewer steps than there are joints.
    for l in &urdf.links {
        let mut link = l.name.as_str();
        let mut steps = 0;
        while let Some(j) = parent_joint_of.get(link) {
            steps += 1;
            if steps > urdf.joints.len() {
                return Err(uerr(format!(
                    "link `{}` is not connected to the root link `{}`: the joints above it form \
                     a loop through joint `{}`",
                    l.name, roots[0], j.name
                )));
            }
            link = j.parent.link.as_str();
        }
    }
    if roots[0] != cfg.base_link {
        return Err(field_err(
            toml_file,
            "base_link",
            format!(
                "`{}` must be the URDF's root link `{}`",
                cfg.base_link, roots[0]
            ),
        ));
    }
    for (field, link) in [
        ("tip_link", &cfg.tip_link),
        ("flange_link", &cfg.flange_link),
    ] {
        if !links.contains(link.as_str()) {
            return Err(field_err(
                toml_file,
                field,
                format!("link `{link}` is not in {urdf_file}"),
            ));
        }
    }
    for name in &cfg.arm_joints {
        if !joints.contains_key(name.as_str()) {
            return Err(field_err(
                toml_file,
                "arm_joints",
                format!("joint `{name}` is not in {urdf_file}"),
            ));
        }
    }
    // Walk tip → base collecting movable joints (no loops: checked above).
    let mut chain = Vec::new();
    let mut link = cfg.tip_link.as_str();
    while let Some(j) = parent_joint_of.get(link) {
        if !matches!(j.joint_type, urdf_rs::JointType::Fixed) {
            chain.push(*j);
        }
        link = j.parent.link.as_str();
    }
    chain.reverse();
    let names: Vec<&str> = chain.iter().map(|j| j.name.as_str()).collect();
    if names
        != cfg
            .arm_joints
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
    {
        return Err(field_err(
            toml_file,
            "arm_joints",
            format!(
                "{:?} differs from the movable joints from `{}` to `{}` in {urdf_file}: {names:?}",
                cfg.arm_joints, cfg.base_link, cfg.tip_link
            ),
        ));
    }
    let mut limits = Vec::with_capacity(chain.len());
    for (i, j) in chain.iter().enumerate() {
        let jerr = |detail: String| uerr(format!("joint `{}`: {detail}", j.name));
        if j.mimic.is_some() {
            return Err(jerr("an arm joint may not mimic another".into()));
        }
        let (lower, upper) = match j.joint_type {
            urdf_rs::JointType::Revolute | urdf_rs::JointType::Prismatic => {
                (j.limit.lower, j.limit.upper)
            }
            // Unlimited joints get one turn each way: enough for IK and sampling, and finite.
            urdf_rs::JointType::Continuous => (-std::f64::consts::PI, std::f64::consts::PI),
            _ => return Err(jerr("unsupported joint type for an arm joint".into())),
        };
        if !(lower.is_finite() && upper.is_finite() && lower < upper) {
            return Err(jerr(format!(
                "limit lower {lower} must be below upper {upper}"
            )));
        }
        let velocity = j.limit.velocity;
        if !(velocity.is_finite() && velocity > 0.0) {
            return Err(jerr(format!("velocity limit {velocity} must be positive")));
        }
        if cfg.limits.joint_velocity[i] > velocity {
            return Err(field_err(
                toml_file,
                "limits.joint_velocity",
                format!(
                    "{} rad/s for `{}` exceeds the URDF limit {velocity}",
                    cfg.limits.joint_velocity[i], j.name
                ),
            ));
        }
        let h = cfg.home[i];
        if !(h >= lower && h <= upper) {
            return Err(field_err(
                toml_file,
                "home",
                format!("{h} for `{}` is outside [{lower}, {upper}]", j.name),
            ));
        }
        limits.push(JointLimit {
            name: j.name.clone(),
            lower,
            upper,
            velocity,
        });
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    const URDF: &str = include_str!("../../../../robot-configs/widowx250/wx250s.urdf");
    const TOML: &str = include_str!("../../../../robot-configs/widowx250/robot.toml");

    /// A fixed joint on the arm's chain that carries a `<mimic>` of a finger (the URDF spec
    /// ignores mimic on fixed joints; `k` records it): copying such a chain out of the tree would
    /// panic inside `k`, so it is refused with the joints named.
    #[test]
    fn a_chain_through_a_mimic_whose_parent_is_off_it_is_refused() {
        assert!(RobotModel::from_strs(TOML, "robot.toml", URDF, "robot.urdf").is_ok());
        let joint = r#"<joint name="ee_arm" type="fixed">"#;
        assert!(URDF.contains(joint));
        let bad = URDF.replace(
            joint,
            &format!(r#"{joint}<mimic joint="left_finger" multiplier="1" offset="0"/>"#),
        );
        let err = RobotModel::from_strs(TOML, "robot.toml", &bad, "robot.urdf")
            .expect_err("refused")
            .to_string();
        assert!(err.contains("`ee_arm` mimics `left_finger`"), "{err}");
    }
}
