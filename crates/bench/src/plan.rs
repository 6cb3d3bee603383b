//! `pointact bench plan`: our RRT-Connect against OMPL's RRTConnect (Python bindings,
//! `benches/plan_peer/`) on the same fixed set of tabletop problems for the xArm 6, with the same
//! collision model behind OMPL's state-validity callback (`benches/plan_peer/model.py`
//! implements [`crate::planning::Checker`]'s rules from the exported spheres, pairs, boxes and
//! distance field).
//!
//! Problems: free-space moves between collision-free pre-grasp poses (tool down, 8–30 cm above
//! the table or an object) in four scene families: random boxes, a shelf to place onto, a wall
//! between two areas, and clutter seen only as a simulated depth cloud (rendered, lifted and turned
//! into a distance field as a live frame is). Same guarantee for both planners: spheres padded by
//! the checker's padding for world checks, and edge checks dense enough that no sphere moves more
//! than twice the padding between two (ours adapts the step to how far the spheres move; OMPL
//! gets the fixed joint-space step that gives the same bound in the worst case).

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k::nalgebra::{Isometry3, Point3, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use crate::geometry::synthetic::camera_look_at;
use crate::geometry::synthetic::{SceneBox, TabletopScene};
use crate::geometry::{CloudOptions, CropBox, Intrinsics, RayTable, Shape};
use crate::kinematics::{IkOptions, IkSolver, RobotModel};
use crate::planning::fk::Motion;
use crate::planning::{
    cloud_field, path_length, rrt_connect, top_down, Checker, CloudWorldOptions, Obstacle,
    RrtOptions, World,
};

pub struct PlanBenchArgs {
    /// Problems per scene family (four families).
    pub per_family: usize,
    pub seed: u64,
    /// Time budget per problem, both planners (s).
    pub time_limit_s: f64,
    /// Run OMPL (installs it into a venv on first use).
    pub peer: bool,
    /// Where the exported problems and the peer's answers go.
    pub out_dir: PathBuf,
}

/// One planner's figures over the problem set.
#[derive(Debug, Clone)]
pub struct PlannerStats {
    pub name: String,
    pub n: usize,
    pub solved: usize,
    pub median_ms: f64,
    pub p95_ms: f64,
    pub mean_ms: f64,
    pub median_length: f64,
    /// Collision checks per second over the whole run.
    pub checks_per_s: f64,
}

fn stats(name: &str, runs: &[(bool, f64, f64)], checks: f64, total_s: f64) -> PlannerStats {
    let mut times: Vec<f64> = runs.iter().map(|r| r.1).collect();
    times.sort_by(f64::total_cmp);
    let mut lengths: Vec<f64> = runs.iter().filter(|r| r.0).map(|r| r.2).collect();
    lengths.sort_by(f64::total_cmp);
    let pick = |v: &[f64], q: f64| {
        if v.is_empty() {
            f64::NAN
        } else {
            v[((v.len() as f64 - 1.0) * q).round() as usize]
        }
    };
    PlannerStats {
        name: name.to_string(),
        n: runs.len(),
        solved: runs.iter().filter(|r| r.0).count(),
        median_ms: pick(&times, 0.5),
        p95_ms: pick(&times, 0.95),
        mean_ms: times.iter().sum::<f64>() / times.len().max(1) as f64,
        median_length: pick(&lengths, 0.5),
        checks_per_s: checks / total_s.max(1e-9),
    }
}

pub struct PlanBenchReport {
    pub cpu: String,
    pub problems: usize,
    pub blocked: usize,
    pub families: Vec<(String, usize)>,
    pub ours: PlannerStats,
    pub ours_by_family: Vec<PlannerStats>,
    pub peer: Result<(PlannerStats, PlannerStats), String>,
    pub peer_name: String,
    pub out_dir: PathBuf,
}

/// A scene: its world and a name.
pub(crate) struct BenchScene {
    pub name: String,
    pub world: World,
}

pub(crate) struct BenchProblem {
    pub name: String,
    pub family: &'static str,
    pub scene: usize,
    pub start: Vec<f64>,
    pub goal: Vec<f64>,
}

/// Opening of the fingers during the moves (open: the widest the hand gets).
const OPENING: f64 = 1.0;

fn cuboid(name: String, min: [f64; 3], max: [f64; 3]) -> Obstacle {
    let c = Vector3::new(
        0.5 * (min[0] + max[0]),
        0.5 * (min[1] + max[1]),
        0.5 * (min[2] + max[2]),
    );
    Obstacle {
        name,
        shape: Shape::Cuboid {
            half_extents: Vector3::new(
                0.5 * (max[0] - min[0]),
                0.5 * (max[1] - min[1]),
                0.5 * (max[2] - min[2]),
            ),
        },
        world_from_shape: Isometry3::translation(c.x, c.y, c.z),
    }
}

/// Collision-free joints for a tool-down pose at (x, y, z) with some yaw, or None.
#[allow(clippy::too_many_arguments)]
fn free_pose(
    model: &RobotModel,
    ik: &mut IkSolver,
    checker: &mut Checker,
    world: &World,
    rng: &mut ChaCha8Rng,
    x: f64,
    y: f64,
    z: f64,
) -> Option<Vec<f64>> {
    let yaw = rng.gen_range(-1.5..1.5);
    let pose = top_down(model, x, y, z, yaw);
    let q = ik.solve(&pose, model.home()).ok()?.q;
    checker.is_free(&q, OPENING, world).then_some(q)
}

/// The fixed problem set: `per_family` problems in each of four families.
pub(crate) fn problems(
    model: &RobotModel,
    checker: &mut Checker,
    per_family: usize,
    seed: u64,
) -> Result<(Vec<BenchScene>, Vec<BenchProblem>), String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut ik = IkSolver::new(model, IkOptions::default());
    let mut scenes = Vec::new();
    let mut out = Vec::new();
    // Three problems per scene (five in the rendered clutter, whose fields are larger).
    for family in ["boxes", "shelf", "wall", "clutter"] {
        let per_scene = if family == "clutter" { 5 } else { 3 };
        let mut made = 0;
        let mut attempts = 0;
        while made < per_family {
            attempts += 1;
            if attempts > per_family * 40 {
                return Err(format!(
                    "{family}: only {made} of {per_family} problems found with free start and goal"
                ));
            }
            let (world, areas) = scene(family, &mut rng)?;
            let si = scenes.len();
            let mut added = 0;
            for _ in 0..per_scene * 6 {
                if added == per_scene || made == per_family {
                    break;
                }
                let pick = |rng: &mut ChaCha8Rng, a: &Area| {
                    (
                        rng.gen_range(a.x.0..a.x.1),
                        rng.gen_range(a.y.0..a.y.1),
                        a.z + rng.gen_range(0.08..0.3),
                    )
                };
                let (a, b) = (&areas[0], &areas[areas.len() - 1]);
                let (sx, sy, sz) = pick(&mut rng, a);
                let (gx, gy, gz) = pick(&mut rng, b);
                let Some(start) = free_pose(model, &mut ik, checker, &world, &mut rng, sx, sy, sz)
                else {
                    continue;
                };
                let Some(goal) = free_pose(model, &mut ik, checker, &world, &mut rng, gx, gy, gz)
                else {
                    continue;
                };
                out.push(BenchProblem {
                    name: format!("{family}/{made}"),
                    family,
                    scene: si,
                    start,
                    goal,
                });
                made += 1;
                added += 1;
            }
            if added > 0 {
                scenes.push(BenchScene {
                    name: format!("{family}_{si}"),
                    world,
                });
            }
        }
    }
    Ok((scenes, out))
}

/// Where starts and goals go: an xy box at a height.
struct Area {
    x: (f64, f64),
    y: (f64, f64),
    z: f64,
}

fn scene(family: &str, rng: &mut ChaCha8Rng) -> Result<(World, Vec<Area>), String> {
    let mut world = World::table(0.0);
    let left = Area {
        x: (0.25, 0.5),
        y: (0.25, 0.45),
        z: 0.0,
    };
    let right = Area {
        x: (0.25, 0.5),
        y: (-0.45, -0.25),
        z: 0.0,
    };
    match family {
        "boxes" => {
            for i in 0..rng.gen_range(3..6) {
                let (cx, cy) = (rng.gen_range(0.25..0.6), rng.gen_range(-0.3..0.3));
                let (hx, hy) = (rng.gen_range(0.02..0.07), rng.gen_range(0.02..0.07));
                let h = rng.gen_range(0.05..0.35);
                world.boxes.push(cuboid(
                    format!("box {i}"),
                    [cx - hx, cy - hy, 0.0],
                    [cx + hx, cy + hy, h],
                ));
            }
            Ok((world, vec![left, right]))
        }
        "shelf" => {
            // An open shelf in front: sides, a back, a middle board and a top; place on the top.
            let (x0, y0) = (rng.gen_range(0.45..0.55), rng.gen_range(-0.1..0.1));
            let (top, mid) = (rng.gen_range(0.3..0.4), rng.gen_range(0.12..0.18));
            let t = 0.01;
            let parts = [
                (
                    "shelf side",
                    [x0 - 0.12, y0 - 0.2 - t, 0.0],
                    [x0 + 0.12, y0 - 0.2, top],
                ),
                (
                    "shelf side",
                    [x0 - 0.12, y0 + 0.2, 0.0],
                    [x0 + 0.12, y0 + 0.2 + t, top],
                ),
                (
                    "shelf back",
                    [x0 + 0.12, y0 - 0.2, 0.0],
                    [x0 + 0.12 + t, y0 + 0.2, top],
                ),
                (
                    "shelf board",
                    [x0 - 0.12, y0 - 0.2, mid - t],
                    [x0 + 0.12, y0 + 0.2, mid],
                ),
                (
                    "shelf top",
                    [x0 - 0.12, y0 - 0.2, top],
                    [x0 + 0.12, y0 + 0.2, top + t],
                ),
            ];
            for (name, min, max) in parts {
                world.boxes.push(cuboid(name.to_string(), min, max));
            }
            let on_top = Area {
                x: (x0 - 0.08, x0 + 0.08),
                y: (y0 - 0.15, y0 + 0.15),
                z: top + t,
            };
            let beside = if rng.gen_bool(0.5) { left } else { right };
            Ok((world, vec![beside, on_top]))
        }
        "wall" => {
            // A tall wall between the left and the right areas.
            let h = rng.gen_range(0.2..0.4);
            let x = rng.gen_range(0.3..0.45);
            world.boxes.push(cuboid(
                "wall".into(),
                [x - 0.15, -0.01, 0.0],
                [x + 0.15, 0.01, h],
            ));
            Ok((world, vec![left, right]))
        }
        _ => {
            // Clutter seen by a camera only: boxes rendered to depth, lifted to a cloud.
            let mut boxes = Vec::new();
            for _ in 0..rng.gen_range(6..11) {
                let (cx, cy) = (rng.gen_range(0.25..0.6), rng.gen_range(-0.2..0.2));
                let (hx, hy) = (rng.gen_range(0.015..0.05), rng.gen_range(0.015..0.05));
                let h = rng.gen_range(0.04..0.3);
                boxes.push(SceneBox {
                    min: [cx - hx, cy - hy, 0.0],
                    max: [cx + hx, cy + hy, h],
                });
            }
            let scene = TabletopScene {
                table_height_m: 0.0,
                boxes,
            };
            let intrinsics = Intrinsics::pinhole(640, 480, 600.0, 600.0, 320.0, 240.0);
            let rays = RayTable::new(&intrinsics).map_err(|e| e.to_string())?;
            let camera = camera_look_at(
                Point3::new(1.05, 0.0, 0.7),
                Point3::new(0.4, 0.0, 0.0),
                Vector3::z(),
            )
            .map_err(|e| e.to_string())?;
            let depth = scene.render(&rays, &camera);
            let crop = CropBox {
                min: [0.1, -0.55, -0.05],
                max: [0.8, 0.55, 0.6],
            };
            let cloud = rays
                .cloud(
                    &depth,
                    &camera,
                    &CloudOptions {
                        stride: 2,
                        crop: Some(crop),
                        ..CloudOptions::default()
                    },
                )
                .map_err(|e| e.to_string())?;
            let field = cloud_field(
                &cloud.points,
                0.0,
                &[],
                &[],
                &CloudWorldOptions {
                    crop,
                    ..CloudWorldOptions::default()
                },
            )
            .map_err(|e| e.to_string())?;
            world.field = Some(std::sync::Arc::new(field));
            Ok((world, vec![left, right]))
        }
    }
}

fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>10} [{bar:30}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_string());
    bar
}

pub fn run(args: &PlanBenchArgs) -> Result<PlanBenchReport, String> {
    let model = RobotModel::builtin("xarm6").map_err(|e| e.to_string())?;
    let mut checker = Checker::for_model(&model).map_err(|e| e.to_string())?;
    eprintln!("problems  generating {} per family ...", args.per_family);
    let (scenes, probs) = problems(&model, &mut checker, args.per_family, args.seed)?;
    let blocked = probs
        .iter()
        .filter(|p| {
            checker
                .segment_contact(&p.start, &p.goal, OPENING, &scenes[p.scene].world)
                .is_some()
        })
        .count();
    let families: Vec<(String, usize)> = ["boxes", "shelf", "wall", "clutter"]
        .iter()
        .map(|f| {
            (
                f.to_string(),
                probs.iter().filter(|p| p.family == *f).count(),
            )
        })
        .collect();
    // Ours, every problem, timed around the whole plan (straight check, search, shortcutting).
    let bar = progress(probs.len() as u64, "ours");
    let mut runs = Vec::new();
    checker.checks = 0;
    let began = Instant::now();
    for (i, p) in probs.iter().enumerate() {
        let o = RrtOptions {
            max_time: Duration::from_secs_f64(args.time_limit_s),
            seed: i as u64 + 1,
            ..RrtOptions::default()
        };
        let t = Instant::now();
        let r = rrt_connect(
            &mut checker,
            &scenes[p.scene].world,
            OPENING,
            model.joint_limits(),
            &p.start,
            &p.goal,
            &o,
        );
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let len = r
            .as_ref()
            .map(|r| path_length(&r.waypoints))
            .unwrap_or(f64::NAN);
        runs.push((r.is_ok(), ms, len));
        bar.inc(1);
    }
    let total = began.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let ours = stats("pointact RRT-Connect", &runs, checker.checks as f64, total);
    let ours_by_family = families
        .iter()
        .map(|(f, _)| {
            let sub: Vec<(bool, f64, f64)> = probs
                .iter()
                .zip(&runs)
                .filter(|(p, _)| p.family == f)
                .map(|(_, r)| *r)
                .collect();
            stats(f, &sub, 0.0, 1.0)
        })
        .collect();
    std::fs::create_dir_all(&args.out_dir)
        .map_err(|e| format!("{}: {e}", args.out_dir.display()))?;
    let file = export(&model, &checker, &scenes, &probs, &args.out_dir)?;
    let (peer, peer_name) = if args.peer {
        match run_ompl(&file, &args.out_dir, args.time_limit_s) {
            Ok((name, solve, with_simplify)) => (Ok((solve, with_simplify)), name),
            Err(e) => (Err(e), "OMPL".to_string()),
        }
    } else {
        (Err("skipped (--no-peer)".into()), "OMPL".into())
    };
    Ok(PlanBenchReport {
        cpu: crate::cpu_model(),
        problems: probs.len(),
        blocked,
        families,
        ours,
        ours_by_family,
        peer,
        peer_name,
        out_dir: args.out_dir.clone(),
    })
}

fn row_major(m: &k::nalgebra::Matrix4<f64>) -> Vec<f64> {
    (0..4)
        .flat_map(|r| (0..4).map(move |c| m[(r, c)]))
        .collect()
}

/// Writes `problems.json` (and one `.f32` distance field per cloud scene) in the format
/// `benches/plan_peer/model.py` reads.
pub(crate) fn export(
    model: &RobotModel,
    checker: &Checker,
    scenes: &[BenchScene],
    probs: &[BenchProblem],
    dir: &Path,
) -> Result<PathBuf, String> {
    let tree = checker.tree();
    let nodes: Vec<Value> = tree
        .nodes()
        .iter()
        .map(|n| {
            let joint = match n.motion {
                Motion::Fixed => json!({"type": "fixed"}),
                Motion::ArmRevolute { axis, index } => {
                    json!({"type": "revolute", "axis": [axis.x, axis.y, axis.z], "q_index": index})
                }
                Motion::ArmPrismatic { axis, index } => {
                    json!({"type": "prismatic", "axis": [axis.x, axis.y, axis.z], "q_index": index})
                }
                Motion::Gripper {
                    axis,
                    prismatic,
                    lower,
                    upper,
                } => json!({
                    "type": if prismatic { "prismatic" } else { "revolute" },
                    "axis": [axis.x, axis.y, axis.z],
                    "value": lower + OPENING * (upper - lower),
                }),
            };
            json!({
                "link": n.link,
                "parent": n.parent.map_or(-1, |p| p as i64),
                "origin": row_major(&n.origin.to_homogeneous()),
                "joint": joint,
            })
        })
        .collect();
    let spheres = checker.link_spheres();
    let grounded: Vec<usize> = {
        let mut g: Vec<usize> = spheres.iter().filter(|s| s.2).map(|s| s.0).collect();
        g.dedup();
        g
    };
    let reach2: f64 = checker.reach().iter().map(|r| r * r).sum();
    // L2 joint step after which no sphere has moved more than 2 × padding (Cauchy–Schwarz).
    let resolution = 2.0 * checker.padding() / reach2.sqrt();
    let robot = json!({
        "name": model.name(),
        "joints": model.joint_limits().iter().map(|l| json!({"name": l.name, "lower": l.lower, "upper": l.upper})).collect::<Vec<_>>(),
        "nodes": nodes,
        "spheres": spheres.iter().map(|(n, s, _)| json!({"node": n, "center": [s.center.x, s.center.y, s.center.z], "radius": s.radius})).collect::<Vec<_>>(),
        "self_pairs": checker.self_pairs(),
        "padding": checker.padding(),
    });
    let mut scene_json = Vec::new();
    for s in scenes {
        let w = &s.world;
        let boxes: Vec<Value> = w
            .boxes
            .iter()
            .filter_map(|o| match o.shape {
                Shape::Cuboid { half_extents: h } => {
                    let r = o.world_from_shape.rotation.to_rotation_matrix();
                    let m = r.matrix();
                    let t = o.world_from_shape.translation.vector;
                    Some(json!({
                        "name": o.name,
                        "center": [t.x, t.y, t.z],
                        "rotation": (0..3).flat_map(|i| (0..3).map(move |j| m[(i, j)])).collect::<Vec<_>>(),
                        "half_extents": [h.x, h.y, h.z],
                    }))
                }
                _ => None,
            })
            .collect();
        let grid = match &w.field {
            Some(f) => {
                let name = format!("{}.f32", s.name);
                let bytes: Vec<u8> = f.distances().iter().flat_map(|d| d.to_le_bytes()).collect();
                std::fs::write(dir.join(&name), bytes).map_err(|e| e.to_string())?;
                json!({"origin": [f.origin.x, f.origin.y, f.origin.z], "voxel": f.voxel, "dims": f.dims, "file": name})
            }
            None => Value::Null,
        };
        scene_json.push(json!({
            "name": s.name,
            "table_z": w.table_z,
            "table_margin": w.table_margin,
            "table_exempt": grounded,
            "boxes": boxes,
            "grid": grid,
        }));
    }
    let doc = json!({
        "robot": robot,
        "resolution": resolution,
        "scenes": scene_json,
        "problems": probs.iter().map(|p| json!({"name": p.name, "scene": p.scene, "start": p.start, "goal": p.goal})).collect::<Vec<_>>(),
    });
    let path = dir.join("problems.json");
    std::fs::write(&path, serde_json::to_vec(&doc).map_err(|e| e.to_string())?)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Installs the peer (first run only) and runs it; (peer name, solve only, solve + simplify).
fn run_ompl(
    problems: &Path,
    dir: &Path,
    time_limit_s: f64,
) -> Result<(String, PlannerStats, PlannerStats), String> {
    let root = crate::workspace_root().join("benches/plan_peer");
    eprintln!("peer      setting up OMPL (benches/plan_peer/setup.sh) ...");
    let setup = Command::new("bash")
        .arg(root.join("setup.sh"))
        .output()
        .map_err(|e| format!("cannot run setup.sh: {e}"))?;
    if !setup.status.success() {
        return Err(format!(
            "setup.sh failed: {}",
            String::from_utf8_lossy(&setup.stderr).trim()
        ));
    }
    let python = String::from_utf8_lossy(&setup.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .to_string();
    let out = dir.join("ompl.json");
    eprintln!("peer      running OMPL RRTConnect on every problem (Python callback) ...");
    let status = Command::new(&python)
        .arg(root.join("ompl_peer.py"))
        .arg(problems)
        .arg(&out)
        .args(["--simplify", "--seed", "1", "--time-limit"])
        .arg(format!("{time_limit_s}"))
        .status()
        .map_err(|e| format!("cannot start {python}: {e}"))?;
    if !status.success() {
        return Err(format!("ompl_peer.py exited with {status}"));
    }
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let name = doc["peer"].as_str().unwrap_or("OMPL").to_string();
    let results = doc["results"].as_array().ok_or("no results in ompl.json")?;
    let num = |r: &Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    let mut solve = Vec::new();
    let mut with_simplify = Vec::new();
    let (mut checks, mut total_ms) = (0.0, 0.0);
    for r in results {
        let ok = r["exact"].as_bool().unwrap_or(false) && r["path_valid"].as_bool().unwrap_or(true);
        let (s, simp) = (num(r, "solve_ms"), num(r, "simplify_ms"));
        let len = num(r, "path_length");
        solve.push((ok, s, len));
        with_simplify.push((ok, s + if simp.is_finite() { simp } else { 0.0 }, len));
        checks += num(r, "valid_checks").max(0.0);
        total_ms += s + if simp.is_finite() { simp } else { 0.0 };
    }
    Ok((
        name.clone(),
        stats("OMPL solve", &solve, checks, total_ms / 1e3),
        stats(
            "OMPL solve+simplify",
            &with_simplify,
            checks,
            total_ms / 1e3,
        ),
    ))
}

impl fmt::Display for PlanBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "bench plan  xArm 6, {} problems ({} need a detour: the straight joint move collides)",
            self.problems, self.blocked
        )?;
        writeln!(f, "cpu         {}", self.cpu)?;
        let fam: Vec<String> = self
            .families
            .iter()
            .map(|(n, c)| format!("{n} {c}"))
            .collect();
        writeln!(f, "families    {}", fam.join(", "))?;
        writeln!(f, "files       {}", self.out_dir.display())?;
        writeln!(
            f,
            "{:<24} {:>9} {:>11} {:>9} {:>9} {:>12} {:>12}",
            "planner", "success", "median ms", "p95 ms", "mean ms", "path (rad)", "checks/s"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, s: &PlannerStats| {
            writeln!(
                f,
                "{:<24} {:>8.1}% {:>11.2} {:>9.2} {:>9.2} {:>12.2} {:>12.0}",
                s.name,
                100.0 * s.solved as f64 / s.n.max(1) as f64,
                s.median_ms,
                s.p95_ms,
                s.mean_ms,
                s.median_length,
                s.checks_per_s
            )
        };
        row(f, &self.ours)?;
        match &self.peer {
            Ok((solve, simp)) => {
                row(f, solve)?;
                row(f, simp)?;
                writeln!(f, "peer        {}", self.peer_name)?;
                writeln!(
                    f,
                    "ratio       median: OMPL solve / ours {:.1}x, OMPL solve+simplify / ours {:.1}x; p95: {:.1}x, {:.1}x",
                    solve.median_ms / self.ours.median_ms,
                    simp.median_ms / self.ours.median_ms,
                    solve.p95_ms / self.ours.p95_ms,
                    simp.p95_ms / self.ours.p95_ms
                )?;
            }
            Err(e) => writeln!(f, "peer        OMPL not run: {e}")?,
        }
        writeln!(f, "VAMP        not run: vamp-planner 0.6.4 is a source package whose build fetches CPM and its dependencies from GitHub (unreachable here), and its robots are Panda, UR5, Fetch and Baxter: no xArm 6")?;
        writeln!(f, "ours by family:")?;
        for s in &self.ours_by_family {
            row(f, s)?;
        }
        let goal = |ok: bool| if ok { "PASS" } else { "MISS" };
        let rate = self.ours.solved as f64 / self.ours.n.max(1) as f64;
        writeln!(
            f,
            "{}  success >= 99 %: {:.1} %",
            goal(rate >= 0.99),
            100.0 * rate
        )?;
        writeln!(
            f,
            "{}  median <= 10 ms: {:.2} ms",
            goal(self.ours.median_ms <= 10.0),
            self.ours.median_ms
        )?;
        if let Ok((solve, _)) = &self.peer {
            let x = solve.median_ms / self.ours.median_ms;
            writeln!(
                f,
                "{}  >= 5x faster than OMPL (median, solve only): {x:.1}x",
                goal(x >= 5.0)
            )?;
        }
        Ok(())
    }
}
