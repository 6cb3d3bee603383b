//! Task suites: what to do in which scene, and seeded episodes with randomised object poses.
//!
//! * `tabletop`: 8 xArm 6 tasks modelled on the Embodied-R1 real-robot tasks (spatial placement,
//!   part-aware grasping, containers, stacking).
//! * `bridge`: the 4 SimplerEnv WidowX tasks, with SimplerEnv's instruction strings.
//!
//! `TaskSpec::instantiate(seed)` samples object poses (uniform in each object's `place` ranges,
//! rejection-sampled so footprints keep apart, every object stays on the table and in the camera
//! image, and the goal does not already hold), with a ChaCha8 generator seeded from the task id and
//! the seed, so an episode is the same on every machine.

use std::sync::Arc;

use k::nalgebra::{Isometry3, Point3, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::judge::{beside_margin, BesideGeometry};
use super::physics::{PhysicsError, SimWorld};
use super::scene::{centroid, table_pose, Rect, Region, Scene, SceneError};
use crate::geometry::Shape;
use crate::kinematics::{KinematicsError, RobotModel};

/// Episodes per task in an evaluation (as in SimplerEnv).
pub const EPISODES_PER_TASK: u64 = 24;

/// The task `pointact run` uses without `--task` (Embodied-R1's own RRG example, in the
/// simulator); the VLM benchmark renders its first frame too.
pub const DEFAULT_TASK: &str = "tabletop/pepper_in_pan";

/// Gap kept between object footprints when sampling poses, m.
const CLEARANCE_M: f64 = 0.02;
/// Objects' centres must project at least this far inside the image, px.
const IMAGE_MARGIN_PX: f64 = 40.0;
/// Tries per episode before giving up on a layout.
const MAX_TRIES: usize = 5000;

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("unknown task `{name}`; tasks are {known}")]
    UnknownTask { name: String, known: String },
    #[error("unknown suite `{name}`; suites are tabletop, bridge")]
    UnknownSuite { name: String },
    #[error(transparent)]
    Scene(#[from] SceneError),
    #[error(transparent)]
    Physics(#[from] PhysicsError),
    #[error(transparent)]
    Kinematics(#[from] KinematicsError),
    #[error("task `{task}`: scene has no object `{object}`")]
    MissingObject { task: String, object: String },
    /// A scene given for a task (`run --scene`) does not hold what the task moves or aims at.
    #[error("task `{task}`: scene `{scene}` {what}; its objects are {known}. The scene file's object names (and parts) must be the task's")]
    SceneMismatch {
        task: String,
        scene: String,
        what: String,
        known: String,
    },
    /// A scene given for a task holds the right objects but cannot pose it as it stands.
    #[error("task `{task}`: in scene `{scene}` {why}")]
    SceneLayout {
        task: String,
        scene: String,
        why: String,
    },
    #[error("task `{task}`, seed {seed}: no valid layout in {tries} tries; widen the `place` ranges in the scene file")]
    Placement {
        task: String,
        seed: u64,
        tries: usize,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suite {
    Tabletop,
    Bridge,
}

impl Suite {
    pub fn name(self) -> &'static str {
        match self {
            Suite::Tabletop => "tabletop",
            Suite::Bridge => "bridge",
        }
    }

    pub fn parse(name: &str) -> Result<Suite, TaskError> {
        match name {
            "tabletop" => Ok(Suite::Tabletop),
            "bridge" => Ok(Suite::Bridge),
            _ => Err(TaskError::UnknownSuite {
                name: name.to_string(),
            }),
        }
    }

    /// The suite's tasks, in a fixed order.
    pub fn tasks(self) -> Vec<TaskSpec> {
        all_tasks()
            .into_iter()
            .filter(|t| t.suite == self)
            .collect()
    }
}

/// Which side of a reference object, as seen in the task camera's image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Left,
    Right,
}

/// What must hold at the end of an episode. Judged by `sim::judge` from the settled object poses.
#[derive(Debug, Clone, PartialEq)]
pub enum Goal {
    /// `object` rests inside `container`'s open volume, released.
    Inside { object: String, container: String },
    /// `object` rests on `support` (touching it, not the table), released, and stays still for
    /// `still_s` seconds.
    OnTop {
        object: String,
        support: String,
        still_s: f64,
    },
    /// `object` rests on the table entirely on `side` of `reference` in the camera image.
    Beside {
        object: String,
        reference: String,
        side: Side,
    },
    /// `object` is held at least `min_lift_m` above where it started, the fingers touching only
    /// `part` (when given).
    Lifted {
        object: String,
        part: Option<String>,
        min_lift_m: f64,
    },
}

impl Goal {
    /// The object the robot must manipulate.
    pub fn object(&self) -> &str {
        match self {
            Goal::Inside { object, .. }
            | Goal::OnTop { object, .. }
            | Goal::Beside { object, .. }
            | Goal::Lifted { object, .. } => object,
        }
    }
}

/// Where the manipulated object should go, for pointers and planners (RRG ground truth).
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// In or on this object; `region` is in that object's frame (see `SceneObject::place_region`).
    Object { name: String, region: Region },
    /// An area of the table, world frame.
    Area { region: Region },
    /// Nowhere: the object is only to be picked up.
    None,
}

/// How a task names its object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ObjectChoice {
    Named(&'static str),
    /// Of these, the one nearest the camera (ties broken by sampling: the layout is rejected unless
    /// the nearest is at least 4 cm nearer than the next).
    NearestToCamera(&'static [&'static str]),
}

/// The relation a task asks for, before the object is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Relation {
    Inside { container: &'static str },
    OnTop { support: &'static str, still_s: f64 },
    Beside { reference: &'static str, side: Side },
    Lifted { min_lift_m: f64 },
}

/// One task: a scene, an instruction, and what counts as done.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// Short id, unique in its suite ("fruit_in_bowl").
    pub id: &'static str,
    pub suite: Suite,
    /// Built-in scene name (`sim/scenes/<scene>.toml`).
    pub scene: &'static str,
    pub instruction: &'static str,
    pub object: ObjectChoice,
    /// Part to grasp (OFG tasks), e.g. a knife's handle.
    pub grasp_part: Option<&'static str>,
    pub relation: Relation,
    /// Simulated time an executor gets, s.
    pub time_limit_s: f64,
}

/// Every task of every suite.
pub fn all_tasks() -> Vec<TaskSpec> {
    use ObjectChoice::*;
    use Relation::*;
    let t = |id, suite, scene, instruction, object, grasp_part, relation, time_limit_s| TaskSpec {
        id,
        suite,
        scene,
        instruction,
        object,
        grasp_part,
        relation,
        time_limit_s,
    };
    let tb = Suite::Tabletop;
    let br = Suite::Bridge;
    vec![
        t(
            "nearest_right_of_box",
            tb,
            "tabletop_nearest_right_of_box",
            "move the nearest object to the right of the box",
            NearestToCamera(&["can", "green_block", "orange"]),
            None,
            Beside {
                reference: "box",
                side: Side::Right,
            },
            20.0,
        ),
        t(
            "knife_by_handle",
            tb,
            "tabletop_knife_by_handle",
            "pick up the knife by its handle",
            Named("knife"),
            Some("handle"),
            Lifted { min_lift_m: 0.05 },
            20.0,
        ),
        t(
            "pepper_in_pan",
            tb,
            "tabletop_pepper_in_pan",
            "put the pepper in the pan",
            Named("pepper"),
            None,
            Inside { container: "pan" },
            20.0,
        ),
        t(
            "stack_blocks",
            tb,
            "tabletop_stack_blocks",
            "put the red block on top of the yellow block",
            Named("red_block"),
            None,
            OnTop {
                support: "yellow_block",
                still_s: 1.0,
            },
            20.0,
        ),
        t(
            "cup_on_plate",
            tb,
            "tabletop_cup_on_plate",
            "put the cup on the plate",
            Named("cup"),
            None,
            OnTop {
                support: "plate",
                still_s: 1.0,
            },
            20.0,
        ),
        t(
            "fruit_in_bowl",
            tb,
            "tabletop_fruit_in_bowl",
            "put the fruit in the bowl",
            Named("orange"),
            None,
            Inside { container: "bowl" },
            20.0,
        ),
        t(
            "can_in_basket",
            tb,
            "tabletop_can_in_basket",
            "put the can in the basket",
            Named("can"),
            None,
            Inside {
                container: "basket",
            },
            20.0,
        ),
        t(
            "carrot_left_of_plate",
            tb,
            "tabletop_carrot_left_of_plate",
            "move the carrot to the left of the plate",
            Named("carrot"),
            None,
            Beside {
                reference: "plate",
                side: Side::Left,
            },
            20.0,
        ),
        t(
            "spoon_on_towel",
            br,
            "bridge_spoon_on_towel",
            "put the spoon on the towel",
            Named("spoon"),
            None,
            OnTop {
                support: "towel",
                still_s: 1.0,
            },
            12.0,
        ),
        t(
            "carrot_on_plate",
            br,
            "bridge_carrot_on_plate",
            "put carrot on plate",
            Named("carrot"),
            None,
            OnTop {
                support: "plate",
                still_s: 1.0,
            },
            12.0,
        ),
        t(
            "stack_cube",
            br,
            "bridge_stack_cube",
            "stack the green block on the yellow block",
            Named("green_block"),
            None,
            OnTop {
                support: "yellow_block",
                still_s: 1.0,
            },
            12.0,
        ),
        t(
            "put_eggplant_in_basket",
            br,
            "bridge_eggplant_in_basket",
            "put eggplant into yellow basket",
            Named("eggplant"),
            None,
            Inside {
                container: "basket",
            },
            24.0,
        ),
    ]
}

/// Looks a task up by `suite/id` or by a unique `id`.
pub fn task(name: &str) -> Result<TaskSpec, TaskError> {
    let all = all_tasks();
    let found = match name.split_once('/') {
        Some((suite, id)) => all
            .iter()
            .find(|t| t.suite.name() == suite && t.id == id)
            .cloned(),
        None => all.iter().find(|t| t.id == name).cloned(),
    };
    found.ok_or_else(|| TaskError::UnknownTask {
        name: name.to_string(),
        known: all
            .iter()
            .map(TaskSpec::full_id)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// One concrete run of a task: a laid-out scene, the instruction and the goal.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// `suite/id`.
    pub task: String,
    pub suite: Suite,
    pub seed: u64,
    /// Robot name (`xarm6`, `widowx250`).
    pub robot: String,
    /// The scene with this episode's object poses.
    pub scene: Scene,
    pub instruction: String,
    pub goal: Goal,
    /// The object to manipulate.
    pub object: String,
    /// Part to grasp it by, if the task says.
    pub grasp_part: Option<String>,
    pub target: Target,
    pub time_limit_s: f64,
}

impl Episode {
    /// Checks that the scene holds the object the task moves, the part it is grasped by and the
    /// object it goes in or on: a replaced scene (`run --scene`) that does not is refused before
    /// anything is built or moved.
    pub fn check_scene(&self) -> Result<(), TaskError> {
        let mismatch = |what: String| TaskError::SceneMismatch {
            task: self.task.clone(),
            scene: self.scene.name.clone(),
            what,
            known: self
                .scene
                .objects
                .iter()
                .map(|o| format!("`{}`", o.name))
                .collect::<Vec<_>>()
                .join(", "),
        };
        let object = self
            .scene
            .object(&self.object)
            .ok_or_else(|| mismatch(format!("has no object `{}` to move", self.object)))?;
        if let Some(part) = &self.grasp_part {
            if object.part_id(part).is_none() {
                return Err(mismatch(format!(
                    "object `{}` has no part `{part}` to grasp it by",
                    self.object
                )));
            }
        }
        if let Target::Object { name, .. } = &self.target {
            if self.scene.object(name).is_none() {
                return Err(mismatch(format!(
                    "has no object `{name}` to put it in or on"
                )));
            }
        }
        Ok(())
    }

    /// The physics world for this episode, objects settled on the table.
    pub fn world(&self, robot: Arc<RobotModel>) -> Result<SimWorld, TaskError> {
        let mut world = SimWorld::new(&self.scene, robot)?;
        world.settle(1.0);
        Ok(world)
    }

    /// The robot model this episode is for (built-in).
    pub fn robot_model(&self) -> Result<Arc<RobotModel>, TaskError> {
        Ok(Arc::new(RobotModel::builtin(&self.robot)?))
    }

    /// The target region in world coordinates, given the world's current object poses.
    pub fn target_region_world(&self, world: &SimWorld) -> Option<Region> {
        match &self.target {
            Target::Object { name, region } => Some(region.transformed(&world.object_pose(name)?)),
            Target::Area { region } => Some(*region),
            Target::None => None,
        }
    }
}

impl TaskSpec {
    /// `suite/id`.
    pub fn full_id(&self) -> String {
        format!("{}/{}", self.suite.name(), self.id)
    }

    /// Lays out episode `seed`: object poses sampled in their `place` ranges until the layout is
    /// valid (see the module doc).
    pub fn instantiate(&self, seed: u64) -> Result<Episode, TaskError> {
        let base = Scene::builtin(self.scene)?;
        let missing = |object: &str| TaskError::MissingObject {
            task: self.full_id(),
            object: object.to_string(),
        };
        let mut names: Vec<&str> = match self.object {
            ObjectChoice::Named(n) => vec![n],
            ObjectChoice::NearestToCamera(c) => c.to_vec(),
        };
        match self.relation {
            Relation::Inside { container: o }
            | Relation::OnTop { support: o, .. }
            | Relation::Beside { reference: o, .. } => names.push(o),
            Relation::Lifted { .. } => {}
        }
        if let Some(n) = names.iter().find(|n| base.object(n).is_none()) {
            return Err(missing(n));
        }
        if let (Some(part), ObjectChoice::Named(n)) = (self.grasp_part, self.object) {
            if base.object(n).and_then(|o| o.part_id(part)).is_none() {
                return Err(missing(&format!("{n} (part `{part}`)")));
            }
        }

        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ fnv1a(&self.full_id()));
        for _ in 0..MAX_TRIES {
            let mut scene = base.clone();
            for obj in &mut scene.objects {
                if let Some(p) = obj.placement {
                    let x = sample(&mut rng, p.x);
                    let y = sample(&mut rng, p.y);
                    let yaw = sample(&mut rng, p.yaw);
                    obj.world_from_object = table_pose(&base.table, x, y, yaw);
                }
            }
            if !layout_ok(&scene) {
                continue;
            }
            let Some(object) = self.choose_object(&scene) else {
                continue;
            };
            if let Some(ep) = self.episode(scene, object, seed) {
                return Ok(ep);
            }
        }
        Err(TaskError::Placement {
            task: self.full_id(),
            seed,
            tries: MAX_TRIES,
        })
    }

    /// `seeded` (this task's episode) replayed in `scene` with its objects where the scene file
    /// puts them (`run --scene`): the object to move, the goal and the target (e.g. the free area
    /// beside a reference object) are worked out again from this scene, not kept from the seeded
    /// layout. Names are checked first ([`Episode::check_scene`]).
    pub fn episode_in(&self, seeded: Episode, scene: Scene) -> Result<Episode, TaskError> {
        let seed = seeded.seed;
        let provisional = Episode { scene, ..seeded };
        provisional.check_scene()?;
        let scene = provisional.scene;
        let layout = |why: &str| TaskError::SceneLayout {
            task: self.full_id(),
            scene: scene.name.clone(),
            why: why.to_owned(),
        };
        let object = self.choose_object(&scene).ok_or_else(|| {
            layout(
                "no candidate object is clearly nearest to the camera (two within 4 cm): move \
                 one so the instruction names one object",
            )
        })?;
        let name = scene.name.clone();
        self.episode(scene, object, seed)
            .ok_or_else(|| TaskError::SceneLayout {
                task: self.full_id(),
                scene: name,
                why: "the goal already holds, or the area the object should go to is taken by \
                      another object: move the objects apart"
                    .to_owned(),
            })
    }

    fn choose_object(&self, scene: &Scene) -> Option<String> {
        match self.object {
            ObjectChoice::Named(n) => Some(n.to_string()),
            ObjectChoice::NearestToCamera(cands) => {
                let eye = scene.camera.eye;
                let mut d: Vec<(f64, &str)> = cands
                    .iter()
                    .filter_map(|n| {
                        let o = scene.object(n)?;
                        Some(((centroid(o) - eye).norm(), *n))
                    })
                    .collect();
                d.sort_by(|a, b| a.0.total_cmp(&b.0));
                match d.as_slice() {
                    [first, second, ..] if second.0 - first.0 >= 0.04 => Some(first.1.to_string()),
                    [only] => Some(only.1.to_string()),
                    _ => None,
                }
            }
        }
    }

    /// The episode for a valid layout, or `None` when the goal already holds.
    fn episode(&self, scene: Scene, object: String, seed: u64) -> Option<Episode> {
        let (goal, target) = match self.relation {
            Relation::Inside { container } => (
                Goal::Inside {
                    object: object.clone(),
                    container: container.into(),
                },
                Target::Object {
                    name: container.into(),
                    region: scene.object(container)?.place_region(),
                },
            ),
            Relation::OnTop { support, still_s } => (
                Goal::OnTop {
                    object: object.clone(),
                    support: support.into(),
                    still_s,
                },
                Target::Object {
                    name: support.into(),
                    region: scene.object(support)?.place_region(),
                },
            ),
            Relation::Beside { reference, side } => {
                let geo = BesideGeometry::new(&scene.camera, side);
                let obj = scene.object(&object)?;
                let refo = scene.object(reference)?;
                // The goal must not hold already, with a margin.
                if beside_margin(
                    &geo,
                    obj,
                    &obj.world_from_object,
                    refo,
                    &refo.world_from_object,
                ) > -0.03
                {
                    return None;
                }
                let area = geo.target_area(refo, &refo.world_from_object, scene.table.height);
                // The target patch must be free: nothing but the object itself may stand there.
                let area_rect = Rect::of_region(&area);
                let blocked = scene.objects.iter().any(|o| {
                    o.name != object
                        && area_rect.overlaps(&Rect::of_object(o, &o.world_from_object, 0.01))
                });
                if blocked {
                    return None;
                }
                (
                    Goal::Beside {
                        object: object.clone(),
                        reference: reference.into(),
                        side,
                    },
                    Target::Area { region: area },
                )
            }
            Relation::Lifted { min_lift_m } => (
                Goal::Lifted {
                    object: object.clone(),
                    part: self.grasp_part.map(str::to_string),
                    min_lift_m,
                },
                Target::None,
            ),
        };
        Some(Episode {
            task: self.full_id(),
            suite: self.suite,
            seed,
            robot: scene.robot.clone(),
            instruction: self.instruction.to_string(),
            goal,
            grasp_part: self.grasp_part.map(str::to_string),
            target,
            time_limit_s: self.time_limit_s,
            object,
            scene,
        })
    }
}

fn sample(rng: &mut ChaCha8Rng, r: [f64; 2]) -> f64 {
    if r[1] > r[0] {
        rng.gen_range(r[0]..r[1])
    } else {
        r[0]
    }
}

/// FNV-1a: a stable hash (same value on every platform and Rust release, unlike `std`'s
/// hasher), so each task gets its own random stream; the benchmarks seed from it too.
pub(crate) fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Footprints apart (each grown by half the clearance), all on the table, all centres well
/// inside the image.
fn layout_ok(scene: &Scene) -> bool {
    scene
        .check_layout(CLEARANCE_M / 2.0, IMAGE_MARGIN_PX)
        .is_ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each shipped scene file, as written, is a valid episode of its task (what
    /// `run --task T --scene sim/scenes/T.toml` runs).
    #[test]
    fn every_scene_file_as_written_is_an_episode_of_its_task() {
        for suite in [Suite::Tabletop, Suite::Bridge] {
            for spec in suite.tasks() {
                let seeded = spec.instantiate(0).unwrap();
                let file = Scene::builtin(spec.scene).unwrap();
                if let Err(e) = spec.episode_in(seeded, file) {
                    panic!("{}: {e}", spec.full_id());
                }
            }
        }
    }

    /// `run --scene` once kept the seeded layout's "left of the plate" area while the scene file
    /// put the plate elsewhere: the target must follow the file's plate.
    #[test]
    fn a_given_scene_gets_its_own_beside_area() {
        let spec = task("tabletop/carrot_left_of_plate").unwrap();
        // The "file": another seed's valid layout (the shipped file's own poses are not a valid
        // episode of this task: `episode_in` refuses them).
        let file = spec.instantiate(1000).unwrap().scene;
        let plate_at = |s: &Scene| centroid(s.object("plate").unwrap());
        let area_at = |ep: &Episode| match &ep.target {
            Target::Area { region } => region.frame_from_region.translation.vector,
            other => panic!("{other:?}"),
        };
        // A seed whose plate stands well away from where the file puts it.
        let seeded = (0..50)
            .map(|seed| spec.instantiate(seed).unwrap())
            .find(|ep| (plate_at(&ep.scene) - plate_at(&file)).norm() > 0.08)
            .expect("a seed that moves the plate");
        let seeded_area = area_at(&seeded);
        let ep = spec.episode_in(seeded, file.clone()).unwrap();
        assert_eq!(ep.scene, file);
        let area = area_at(&ep);
        let to_plate = |a: &Vector3<f64>, s: &Scene| {
            let p = plate_at(s);
            (Vector3::new(a.x, a.y, 0.0) - Vector3::new(p.x, p.y, 0.0)).norm()
        };
        // Beside the file's plate, and not where the seeded layout's area was.
        assert!(to_plate(&area, &file) < 0.25, "{area:?}");
        assert!(
            (area - seeded_area).norm() > 0.05,
            "{area:?} vs {seeded_area:?}"
        );
        // A scene where the carrot already stands left of the plate is refused, not run.
        let mut done = file.clone();
        let carrot = done
            .objects
            .iter_mut()
            .find(|o| o.name == "carrot")
            .unwrap();
        carrot.world_from_object.translation.vector.x = area.x;
        carrot.world_from_object.translation.vector.y = area.y;
        let err = spec.episode_in(ep, done).unwrap_err();
        assert!(
            matches!(err, TaskError::SceneLayout { .. })
                && err.to_string().contains("already holds"),
            "{err}"
        );
    }

    #[test]
    fn suites_have_the_promised_tasks() {
        assert_eq!(Suite::Tabletop.tasks().len(), 8);
        assert_eq!(Suite::Bridge.tasks().len(), 4);
        assert_eq!(
            task("bridge/stack_cube").unwrap().scene,
            "bridge_stack_cube"
        );
        assert!(task("nope").is_err());
    }
}
