//! Task suites: what to do in which scene, and seeded episodes with randomised object poses.
//!
//! * `tabletop`: 8 xArm 6 tasks modelled on the Embodied-R1 real-robot tasks (spatial placement,
//!   part-aware grasping, containers, stacking).
//! * `bridge`: the 4 SimplerEnv WidowX tasks, with SimplerEnv's instruction strings.
//! * `clutter`: 3 xArm 6 and 3 WidowX 250 pick-and-place tasks with tall obstacles in the way (a
//!   wall or a stack across the straight path from the object to its target, a tall bottle or can
//!   right beside the object or the target), for collision-aware motion planning. Each obstacle
//!   has an [`ObstacleRule`] that every sampled layout obeys, and the judge fails an episode in
//!   which the robot touched an obstacle or left one moved or tipped (see `sim::judge`).
//!
//! `TaskSpec::instantiate(seed)` samples object poses (uniform in each object's `place` ranges,
//! rejection-sampled so footprints keep apart, every object stays on the table and in the camera
//! image, and the goal does not already hold), with a ChaCha8 generator seeded from the task id and
//! the seed, so an episode is the same on every machine.

use std::sync::Arc;

use k::nalgebra::{Point3, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub use super::beside::Side;
use super::beside::{beside_margin, BesideGeometry};
use super::physics::{PhysicsError, SimWorld};
use super::scene::{centroid, table_pose, Rect, Region, Scene, SceneError};
use pointact_core::kinematics::{KinematicsError, RobotModel};

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
/// Obstacles of clutter tasks keep at least this far from the robot at its home pose (a sphere
/// cover of its collision geometry, fingers open), so the arm starts well clear of them, m.
pub(crate) const HOME_CLEARANCE_M: f64 = 0.04;

/// Why a task could not be found, checked or laid out as an episode.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// A task name matched no task (by `suite/id` or bare id).
    #[error("unknown task `{name}`; tasks are {known}")]
    UnknownTask {
        /// The name as given.
        name: String,
        /// Every task's `suite/id`, comma-separated, for the message.
        known: String,
    },
    /// A suite name is not `tabletop`, `bridge` or `clutter`.
    #[error("unknown suite `{name}`; suites are tabletop, bridge, clutter")]
    UnknownSuite {
        /// The name as given.
        name: String,
    },
    /// The task's built-in scene could not be loaded.
    #[error(transparent)]
    Scene(#[from] SceneError),
    /// Building the episode's physics world failed.
    #[error(transparent)]
    Physics(#[from] PhysicsError),
    /// The episode's built-in robot model could not be loaded or posed (its home pose keeps
    /// obstacles clear).
    #[error(transparent)]
    Kinematics(#[from] KinematicsError),
    /// The task's built-in scene lacks an object (or grasp part) the task names.
    #[error("task `{task}`: scene has no object `{object}`")]
    MissingObject {
        /// The task's `suite/id`.
        task: String,
        /// The missing object, or `object (part `part`)` for a missing part.
        object: String,
    },
    /// A scene given for a task (`run --scene`) does not hold what the task moves or aims at.
    #[error("task `{task}`: scene `{scene}` {what}; its objects are {known}. The scene file's object names (and parts) must be the task's")]
    SceneMismatch {
        /// The task's `suite/id`.
        task: String,
        /// The given scene's name.
        scene: String,
        /// What is missing, as a phrase completing "scene `x` ...".
        what: String,
        /// The scene's object names, for the message.
        known: String,
    },
    /// A scene given for a task holds the right objects but cannot pose it as it stands.
    #[error("task `{task}`: in scene `{scene}` {why}")]
    SceneLayout {
        /// The task's `suite/id`.
        task: String,
        /// The given scene's name.
        scene: String,
        /// What is wrong with the layout.
        why: String,
    },
    /// Rejection sampling found no valid layout for this seed within the try budget.
    #[error("task `{task}`, seed {seed}: no valid layout in {tries} tries; widen the `place` ranges in the scene file")]
    Placement {
        /// The task's `suite/id`.
        task: String,
        /// The episode seed.
        seed: u64,
        /// Layouts sampled before giving up.
        tries: usize,
    },
}

/// A group of tasks sharing a purpose and robots (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Suite {
    /// xArm 6 tasks modelled on the Embodied-R1 real-robot tasks.
    Tabletop,
    /// The SimplerEnv WidowX tasks.
    Bridge,
    /// Both arms, obstacles in the way (collision-aware planning).
    Clutter,
}

impl Suite {
    /// The suite's name, as used in `suite/id` task names.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Tabletop => "tabletop",
            Suite::Bridge => "bridge",
            Suite::Clutter => "clutter",
        }
    }

    /// The suite named `name` (as [`Suite::name`] spells it).
    pub fn parse(name: &str) -> Result<Suite, TaskError> {
        match name {
            "tabletop" => Ok(Suite::Tabletop),
            "bridge" => Ok(Suite::Bridge),
            "clutter" => Ok(Suite::Clutter),
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

    /// The tasks `ids` names (`id` or `suite/id`, in the given order), or all of the suite's when
    /// `ids` is empty; an id the suite lacks is an error listing the suite's ids.
    pub fn select(self, ids: &[String]) -> Result<Vec<TaskSpec>, TaskError> {
        let all = self.tasks();
        if ids.is_empty() {
            return Ok(all);
        }
        ids.iter()
            .map(|want| {
                all.iter()
                    .find(|t| t.id == want || t.full_id() == *want)
                    .cloned()
                    .ok_or_else(|| TaskError::UnknownTask {
                        name: want.clone(),
                        known: all
                            .iter()
                            .map(TaskSpec::full_id)
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
            })
            .collect()
    }
}

/// What must hold at the end of an episode. Judged by `sim::judge` from the settled object poses.
#[derive(Debug, Clone, PartialEq)]
pub enum Goal {
    /// `object` rests inside `container`'s open volume, released.
    Inside {
        /// The manipulated object.
        object: String,
        /// The object it must end up in.
        container: String,
    },
    /// `object` rests on `support` (touching it, not the table), released, and stays still for
    /// `still_s` seconds.
    OnTop {
        /// The manipulated object.
        object: String,
        /// The object it must rest on.
        support: String,
        /// How long it must stay still there, s.
        still_s: f64,
    },
    /// `object` rests on the table entirely on `side` of `reference` in the camera image.
    Beside {
        /// The manipulated object.
        object: String,
        /// The object it is placed relative to.
        reference: String,
        /// Which side of `reference`, as seen in the camera image.
        side: Side,
    },
    /// `object` is held at least `min_lift_m` above where it started, the fingers touching only
    /// `part` (when given).
    Lifted {
        /// The manipulated object.
        object: String,
        /// The only part the fingers may touch, if any.
        part: Option<String>,
        /// Minimum height gained over the start pose, m.
        min_lift_m: f64,
    },
}

impl Goal {
    /// The object the robot must manipulate.
    pub(crate) fn object(&self) -> &str {
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
    Object {
        /// The target object.
        name: String,
        /// Where on or in it, in the object's frame.
        region: Region,
    },
    /// An area of the table, world frame.
    Area {
        /// The area, world frame.
        region: Region,
    },
    /// Nowhere: the object is only to be picked up.
    None,
}

/// How a task names its object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ObjectChoice {
    /// Always this scene object.
    Named(&'static str),
    /// Of these, the one nearest the camera (ties broken by sampling: the layout is rejected unless
    /// the nearest is at least 4 cm nearer than the next).
    NearestToCamera(&'static [&'static str]),
}

/// The relation a task asks for, before the object is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Relation {
    /// Put the object in `container` (becomes [`Goal::Inside`]).
    Inside {
        /// Scene object the object goes into.
        container: &'static str,
    },
    /// Put the object on `support` and leave it still (becomes [`Goal::OnTop`]).
    OnTop {
        /// Scene object the object goes onto.
        support: &'static str,
        /// How long it must stay still there, s.
        still_s: f64,
    },
    /// Put the object on the table beside `reference` (becomes [`Goal::Beside`]).
    Beside {
        /// Scene object the placement is relative to.
        reference: &'static str,
        /// Which side, as seen in the camera image.
        side: Side,
    },
    /// Pick the object up (becomes [`Goal::Lifted`]).
    Lifted {
        /// Minimum height gained over the start pose, m.
        min_lift_m: f64,
    },
}

/// Where an obstacle of a `clutter` task must stand; every sampled layout obeys it. Gaps are
/// between footprints on the table (oriented rectangles), in metres.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObstacleRule {
    /// The scene object that is an obstacle (the judge fails an episode that touches or moves it).
    pub name: &'static str,
    /// `Some(g)`: the straight table-plane path from the object's centre to the target's centre
    /// crosses the obstacle's footprint grown by `g` (negative: shrunk, so the path crosses it
    /// well inside its ends). `None`: no condition on the path.
    pub on_path_grow_m: Option<f64>,
    /// Allowed gap to the manipulated object's footprint, [min, max].
    pub gap_to_object_m: [f64; 2],
    /// Allowed gap to the target's footprint (the container, support or area), [min, max].
    pub gap_to_target_m: [f64; 2],
}

/// An obstacle across the path from the object to the target (the path crosses its footprint at
/// least `inset` m inside its ends), at least `gap_object` m from the object (room for the open
/// gripper beside it) and `gap_target` m from the target.
const fn across(name: &'static str, inset: f64, gap_object: f64, gap_target: f64) -> ObstacleRule {
    ObstacleRule {
        name,
        on_path_grow_m: Some(-inset),
        gap_to_object_m: [gap_object, f64::INFINITY],
        gap_to_target_m: [gap_target, f64::INFINITY],
    }
}

/// A tall obstacle right beside the object (`gap` m from it), on its path to the target.
const fn beside_object(name: &'static str, gap: [f64; 2]) -> ObstacleRule {
    ObstacleRule {
        name,
        on_path_grow_m: Some(0.0),
        gap_to_object_m: gap,
        gap_to_target_m: [0.03, f64::INFINITY],
    }
}

/// A tall obstacle right beside the target (`gap` m from it), anywhere around it.
const fn beside_target(name: &'static str, gap: [f64; 2]) -> ObstacleRule {
    ObstacleRule {
        name,
        on_path_grow_m: None,
        gap_to_object_m: [0.03, f64::INFINITY],
        gap_to_target_m: gap,
    }
}

/// One task: a scene, an instruction, and what counts as done.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// Short id, unique in its suite ("fruit_in_bowl").
    pub id: &'static str,
    /// The suite the task belongs to.
    pub suite: Suite,
    /// Built-in scene name (`sim/scenes/<scene>.toml`).
    pub scene: &'static str,
    /// The natural-language instruction given to the executor.
    pub instruction: &'static str,
    /// Which scene object is manipulated.
    pub object: ObjectChoice,
    /// Part to grasp (OFG tasks), e.g. a knife's handle.
    pub grasp_part: Option<&'static str>,
    /// Where the object must end up.
    pub relation: Relation,
    /// Simulated time an executor gets, s.
    pub time_limit_s: f64,
    /// Objects the robot must not touch, move or tip, and where they stand (clutter tasks).
    pub obstacles: &'static [ObstacleRule],
}

/// Every task of every suite.
pub(crate) fn all_tasks() -> Vec<TaskSpec> {
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
        obstacles: &[],
    };
    let tb = Suite::Tabletop;
    let br = Suite::Bridge;
    let cl = Suite::Clutter;
    const XARM_WALL: &[ObstacleRule] = &[across("wall", 0.03, 0.07, 0.05)];
    const XARM_BOTTLE: &[ObstacleRule] = &[beside_object("bottle", [0.05, 0.075])];
    const WIDOWX_WALL: &[ObstacleRule] = &[across("wall", 0.02, 0.055, 0.04)];
    const WIDOWX_BOTTLE: &[ObstacleRule] = &[beside_object("bottle", [0.05, 0.07])];
    const XARM_STACK: &[ObstacleRule] = &[
        across("stack", 0.02, 0.065, 0.04),
        beside_target("tall_can", [0.02, 0.05]),
    ];
    const WIDOWX_STACK: &[ObstacleRule] = &[
        across("stack", 0.015, 0.055, 0.04),
        beside_target("can", [0.02, 0.05]),
    ];
    let with = |obstacles: &'static [ObstacleRule], spec: TaskSpec| TaskSpec { obstacles, ..spec };
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
        // Clutter, xArm 6: obstacles up to 26 cm tall where today's executor carries at 20 cm.
        with(
            XARM_WALL,
            t(
                "xarm_block_over_wall",
                cl,
                "clutter_xarm_block_over_wall",
                "put the red block in the bowl",
                Named("red_block"),
                None,
                Inside { container: "bowl" },
                30.0,
            ),
        ),
        with(
            XARM_BOTTLE,
            t(
                "xarm_fruit_past_bottle",
                cl,
                "clutter_xarm_fruit_past_bottle",
                "put the fruit in the bowl",
                Named("orange"),
                None,
                Inside { container: "bowl" },
                30.0,
            ),
        ),
        with(
            XARM_STACK,
            t(
                "xarm_block_past_stack",
                cl,
                "clutter_xarm_block_past_stack",
                "put the blue block on the plate",
                Named("blue_block"),
                None,
                OnTop {
                    support: "plate",
                    still_s: 1.0,
                },
                30.0,
            ),
        ),
        // Clutter, WidowX 250: obstacles 16-16.5 cm tall where today's executor carries at 12-15 cm.
        with(
            WIDOWX_WALL,
            t(
                "widowx_block_over_wall",
                cl,
                "clutter_widowx_block_over_wall",
                "put the green block in the basket",
                Named("green_block"),
                None,
                Inside {
                    container: "basket",
                },
                24.0,
            ),
        ),
        with(
            WIDOWX_BOTTLE,
            t(
                "widowx_carrot_past_bottle",
                cl,
                "clutter_widowx_carrot_past_bottle",
                "put the carrot on the plate",
                Named("carrot"),
                None,
                OnTop {
                    support: "plate",
                    still_s: 1.0,
                },
                24.0,
            ),
        ),
        with(
            WIDOWX_STACK,
            t(
                "widowx_block_past_stack",
                cl,
                "clutter_widowx_block_past_stack",
                "put the yellow block on the plate",
                Named("yellow_block"),
                None,
                OnTop {
                    support: "plate",
                    still_s: 1.0,
                },
                24.0,
            ),
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
    /// The task's suite.
    pub suite: Suite,
    /// The seed the object poses were sampled with.
    pub seed: u64,
    /// Robot name (`xarm6`, `widowx250`).
    pub robot: String,
    /// The scene with this episode's object poses.
    pub scene: Scene,
    /// The natural-language instruction given to the executor.
    pub instruction: String,
    /// What the judge checks at the end.
    pub goal: Goal,
    /// The object to manipulate.
    pub object: String,
    /// Part to grasp it by, if the task says.
    pub grasp_part: Option<String>,
    /// Where the object should go (ground truth for oracle pointers and planners).
    pub target: Target,
    /// Simulated time an executor gets, s.
    pub time_limit_s: f64,
    /// Objects the robot must not touch, move or tip (the task's obstacles; empty outside the
    /// clutter suite). The judge fails an episode that does.
    pub obstacles: Vec<String>,
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
        if let Some(name) = self
            .obstacles
            .iter()
            .find(|n| self.scene.object(n).is_none())
        {
            return Err(mismatch(format!("has no obstacle `{name}`")));
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
        names.extend(self.obstacles.iter().map(|r| r.name));
        if let Some(n) = names.iter().find(|n| base.object(n).is_none()) {
            return Err(missing(n));
        }
        if let (Some(part), ObjectChoice::Named(n)) = (self.grasp_part, self.object) {
            if base.object(n).and_then(|o| o.part_id(part)).is_none() {
                return Err(missing(&format!("{n} (part `{part}`)")));
            }
        }

        // Where the arm starts (obstacles keep clear of it).
        let home = if self.obstacles.is_empty() {
            None
        } else {
            Some(home_cover(&base.robot)?)
        };
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
                let misplaced = home
                    .as_ref()
                    .and_then(|h| self.obstacle_problem_with(&ep, h));
                if misplaced.is_none() {
                    return Ok(ep);
                }
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
            obstacles: self.obstacles.iter().map(|r| r.name.to_string()).collect(),
            object,
            scene,
        })
    }

    /// Why `ep`'s layout breaks one of the task's [`ObstacleRule`]s, or lets an obstacle stand
    /// within [`HOME_CLEARANCE_M`] of the robot at its home pose, or hides the object's top or the
    /// place point behind an obstacle from the camera; `None` when it does none of these. Poses are
    /// the scene's (as laid out, before physics). Every sampled episode passes.
    #[cfg(test)]
    pub(crate) fn obstacle_problem(&self, ep: &Episode) -> Result<Option<String>, TaskError> {
        Ok(self.obstacle_problem_with(ep, &home_cover(&ep.robot)?))
    }

    fn obstacle_problem_with(&self, ep: &Episode, home: &[(Point3<f64>, f64)]) -> Option<String> {
        if self.obstacles.is_empty() {
            return None;
        }
        let scene = &ep.scene;
        let obj = scene.object(&ep.object)?;
        let obj_rect = Rect::of_object(obj, &obj.world_from_object, 0.0);
        let table_z = scene.table.height;
        let (target_rect, place) = match &ep.target {
            Target::Object { name, region } => {
                let t = scene.object(name)?;
                let r = region.transformed(&t.world_from_object);
                (
                    Rect::of_object(t, &t.world_from_object, 0.0),
                    bottom_centre(&r),
                )
            }
            Target::Area { region } => (Rect::of_region(region), bottom_centre(region)),
            Target::None => return Some("the task has no target to carry the object to".into()),
        };
        let from = Point3::new(obj_rect.c.x, obj_rect.c.y, 0.0);
        let to = Point3::new(place.x, place.y, 0.0);
        let top = Point3::new(obj_rect.c.x, obj_rect.c.y, table_z + obj.height());
        let eye = scene.camera.eye;
        for rule in self.obstacles {
            let Some(o) = scene.object(rule.name) else {
                return Some(format!("no obstacle `{}` in the scene", rule.name));
            };
            let name = rule.name;
            let r = Rect::of_object(o, &o.world_from_object, 0.0);
            let (z0, z1) = (table_z, table_z + o.height());
            for (what, p) in [("the object's top", &top), ("the place point", &place)] {
                if segment_meets_box(&r, z0, z1, &eye, p) {
                    return Some(format!("`{name}` hides {what} from the camera"));
                }
            }
            if home
                .iter()
                .any(|(c, radius)| box_distance(&r, z0, z1, c) < radius + HOME_CLEARANCE_M)
            {
                return Some(format!(
                    "`{name}` is within {HOME_CLEARANCE_M} m of the robot at its home pose"
                ));
            }
            let gaps = [
                ("the object", &obj_rect, rule.gap_to_object_m),
                ("the target", &target_rect, rule.gap_to_target_m),
            ];
            for (what, other, [lo, hi]) in gaps {
                let gap = r.distance(other);
                if gap < lo {
                    return Some(format!("`{name}` is closer than {lo} m to {what}"));
                }
                if gap > hi {
                    return Some(format!("`{name}` is farther than {hi} m from {what}"));
                }
            }
            if let Some(g) = rule.on_path_grow_m {
                let flat = r.grown(g);
                if !segment_meets_box(&flat, f64::NEG_INFINITY, f64::INFINITY, &from, &to) {
                    return Some(format!(
                        "`{name}` is not on the path from the object to the target"
                    ));
                }
            }
        }
        None
    }
}

/// Spheres (centre, radius; world frame) covering every collision primitive of `robot` at its
/// home pose with the fingers open: rows of spheres along each primitive's longest axis, each
/// wide enough to cover the cross-section.
pub(crate) fn home_cover(robot: &str) -> Result<Vec<(Point3<f64>, f64)>, TaskError> {
    let model = RobotModel::builtin(robot)?;
    let poses = model.link_poses(model.home(), 1.0)?;
    let mut out = Vec::new();
    for s in model.collision_shapes() {
        let Some((_, link)) = poses.iter().find(|(n, _)| *n == s.link) else {
            continue;
        };
        let h = s.shape.local_half_extents();
        let axis = h.imax();
        let cross = (h.norm_squared() - h[axis] * h[axis]).max(0.0).sqrt();
        let n = ((h[axis] / cross.max(1e-6)).ceil() as usize).clamp(1, 16);
        let step = h[axis] / n as f64;
        let radius = (cross * cross + step * step).sqrt();
        for i in 0..n {
            let mut c = Point3::origin();
            c[axis] = -h[axis] + step * (2 * i + 1) as f64;
            out.push((link * s.link_from_shape * c, radius));
        }
    }
    Ok(out)
}

/// Distance from `p` to the box standing on footprint `r` between heights `z0` and `z1` (0 inside).
fn box_distance(r: &Rect, z0: f64, z1: f64, p: &Point3<f64>) -> f64 {
    let d = k::nalgebra::Vector2::new(p.x, p.y) - r.c;
    let out = |v: f64, lo: f64, hi: f64| (lo - v).max(v - hi).max(0.0);
    let a = d.dot(&r.axes[0]);
    let b = d.dot(&r.axes[1]);
    Vector3::new(
        out(a, -r.half[0], r.half[0]),
        out(b, -r.half[1], r.half[1]),
        out(p.z, z0, z1),
    )
    .norm()
}

/// The centre of a region's bottom face (where a place point is).
fn bottom_centre(r: &Region) -> Point3<f64> {
    let half = r.shape.local_half_extents();
    r.frame_from_region * Point3::new(0.0, 0.0, -half.z)
}

/// Whether the segment `a`–`b` meets the box standing on footprint `r` between heights `z0` and
/// `z1` (slab clipping in the footprint's frame).
fn segment_meets_box(r: &Rect, z0: f64, z1: f64, a: &Point3<f64>, b: &Point3<f64>) -> bool {
    let local = |p: &Point3<f64>| {
        let d = k::nalgebra::Vector2::new(p.x, p.y) - r.c;
        [d.dot(&r.axes[0]), d.dot(&r.axes[1]), p.z]
    };
    let (pa, pb) = (local(a), local(b));
    let lo = [-r.half[0], -r.half[1], z0];
    let hi = [r.half[0], r.half[1], z1];
    let (mut t0, mut t1) = (0.0_f64, 1.0_f64);
    for k in 0..3 {
        let d = pb[k] - pa[k];
        if d.abs() < 1e-12 {
            if pa[k] < lo[k] || pa[k] > hi[k] {
                return false;
            }
            continue;
        }
        let (u, v) = ((lo[k] - pa[k]) / d, (hi[k] - pa[k]) / d);
        t0 = t0.max(u.min(v));
        t1 = t1.min(u.max(v));
        if t0 > t1 {
            return false;
        }
    }
    true
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
pub fn fnv1a(s: &str) -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each shipped scene file, as written, is a valid episode of its task (what
    /// `run --task T --scene sim/scenes/T.toml` runs).
    #[test]
    fn every_scene_file_as_written_is_an_episode_of_its_task() {
        for suite in [Suite::Tabletop, Suite::Bridge, Suite::Clutter] {
            for spec in suite.tasks() {
                let seeded = spec.instantiate(0).unwrap();
                let file = Scene::builtin(spec.scene).unwrap();
                let ep = match spec.episode_in(seeded, file) {
                    Ok(ep) => ep,
                    Err(e) => panic!("{}: {e}", spec.full_id()),
                };
                // A clutter file also keeps its obstacles where the task's rules put them.
                if let Some(why) = spec.obstacle_problem(&ep).unwrap() {
                    panic!("{}: {why}", spec.full_id());
                }
                assert_eq!(ep.obstacles.len(), spec.obstacles.len());
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
        // Clutter: 3 tasks per arm, every one with obstacles; no other suite has any.
        let clutter = Suite::Clutter.tasks();
        assert_eq!(clutter.len(), 6);
        for robot in ["xarm6", "widowx250"] {
            let n = clutter
                .iter()
                .filter(|t| Scene::builtin(t.scene).unwrap().robot == robot)
                .count();
            assert_eq!(n, 3, "{robot}");
        }
        assert!(clutter.iter().all(|t| !t.obstacles.is_empty()));
        assert!(all_tasks()
            .iter()
            .filter(|t| t.suite != Suite::Clutter)
            .all(|t| t.obstacles.is_empty()));
        assert_eq!(Suite::parse("clutter").unwrap(), Suite::Clutter);
        assert_eq!(
            task("clutter/widowx_block_over_wall").unwrap().scene,
            "clutter_widowx_block_over_wall"
        );
        let ep = task("xarm_fruit_past_bottle")
            .unwrap()
            .instantiate(0)
            .unwrap();
        assert_eq!(ep.obstacles, vec!["bottle".to_string()]);
        assert!(task("tabletop/fruit_in_bowl")
            .unwrap()
            .instantiate(0)
            .unwrap()
            .obstacles
            .is_empty());
        assert_eq!(
            task("bridge/stack_cube").unwrap().scene,
            "bridge_stack_cube"
        );
        assert!(task("nope").is_err());
    }

    /// The carry height of today's executor for a robot (robot.toml, else the executor's 20 cm).
    fn carry_height(robot: &str) -> f64 {
        RobotModel::builtin(robot)
            .unwrap()
            .config
            .carry_height
            .unwrap_or(0.20)
    }

    /// Distance in the table plane from (x, y) to an object's footprint at its scene pose
    /// (0 inside), measured in the object's own frame.
    fn footprint_distance(o: &crate::scene::SceneObject, x: f64, y: f64) -> f64 {
        let p = o.world_from_object.inverse_transform_point(&Point3::new(
            x,
            y,
            o.world_from_object.translation.z,
        ));
        let (lo, hi) = o.footprint();
        let dx = (lo.x - p.x).max(p.x - hi.x).max(0.0);
        let dy = (lo.y - p.y).max(p.y - hi.y).max(0.0);
        dx.hypot(dy)
    }

    /// Every clutter episode (24 seeds per task) really has an obstacle in the way of today's
    /// executor, checked here with plain geometry (not the sampler's rectangles): the straight
    /// table-plane line from the object to the target passes within 1 cm of an obstacle's
    /// footprint, at least 4 cm from both ends, and that obstacle stands taller than the robot's
    /// carry height plus 3 cm; a tall obstacle placed "beside" the object or the target stands
    /// within 9 cm of it; and no obstacle overlaps the object or the target.
    #[test]
    fn clutter_obstacles_stand_in_the_way() {
        for spec in Suite::Clutter.tasks() {
            for seed in 0..EPISODES_PER_TASK {
                let ep = spec.instantiate(seed).unwrap();
                let id = format!("{} seed {seed}", ep.task);
                let carry = carry_height(&ep.robot);
                let scene = &ep.scene;
                let obj = scene.object(&ep.object).unwrap();
                let a = centroid(obj);
                let (target, b) = match &ep.target {
                    Target::Object { name, region } => {
                        let t = scene.object(name).unwrap();
                        let r = region.transformed(&t.world_from_object);
                        (t, r.frame_from_region.translation.vector)
                    }
                    other => panic!("{id}: clutter targets are objects, got {other:?}"),
                };
                let mut blocking = Vec::new();
                for rule in spec.obstacles {
                    let o = scene.object(rule.name).unwrap();
                    let len = (b.xy() - a.coords.xy()).norm();
                    // Samples of the straight line, 4 cm from each end and every 5 mm between.
                    let n = ((len - 0.08) / 0.005).ceil().max(1.0) as usize;
                    let near = (0..=n).any(|i| {
                        let s = (0.04 + (len - 0.08) * i as f64 / n as f64) / len;
                        let p = a.coords.xy() + (b.xy() - a.coords.xy()) * s;
                        footprint_distance(o, p.x, p.y) < 0.01
                    });
                    if near && o.height() > carry + 0.03 {
                        blocking.push(rule.name);
                    }
                    // Never on top of the object or the target.
                    assert!(
                        footprint_distance(o, a.x, a.y) > 0.02
                            && footprint_distance(o, b.x, b.y) > 0.02,
                        "{id}: `{}` overlaps the object or the target",
                        rule.name
                    );
                    if rule.gap_to_object_m[1].is_finite() {
                        let c = centroid(o);
                        let d = footprint_distance(obj, c.x, c.y) - o.footprint().1.x.abs();
                        assert!(
                            d < 0.09,
                            "{id}: `{}` is {d:.3} m from the object",
                            rule.name
                        );
                    }
                    if rule.gap_to_target_m[1].is_finite() {
                        let c = centroid(o);
                        let d = footprint_distance(target, c.x, c.y) - o.footprint().1.x.abs();
                        assert!(
                            d < 0.09,
                            "{id}: `{}` is {d:.3} m from the target",
                            rule.name
                        );
                    }
                }
                assert!(
                    !blocking.is_empty(),
                    "{id}: no obstacle taller than {:.2} m on the straight path",
                    carry + 0.03
                );
            }
        }
    }

    /// The sampler's own rules hold on every seed, and they can fail: moving the wall off the path
    /// or next to the robot's home pose is reported.
    #[test]
    fn obstacle_rules_hold_and_catch_a_misplaced_obstacle() {
        for spec in Suite::Clutter.tasks() {
            for seed in [0, 5, 23] {
                let ep = spec.instantiate(seed).unwrap();
                assert_eq!(spec.obstacle_problem(&ep).unwrap(), None, "{}", ep.task);
            }
        }
        let moved = |id: &str, x: f64, y: f64| {
            let spec = task(id).unwrap();
            let mut e = spec.instantiate(3).unwrap();
            let wall = e
                .scene
                .objects
                .iter_mut()
                .find(|o| o.name == "wall")
                .unwrap();
            wall.world_from_object.translation.vector.x = x;
            wall.world_from_object.translation.vector.y = y;
            spec.obstacle_problem(&e).unwrap()
        };
        // Far off to the side: not on the path any more.
        let off = moved("clutter/xarm_block_over_wall", 0.5, -0.45).expect("off the path");
        assert!(off.contains("path"), "{off}");
        // Right under the WidowX's gripper at home (its fingertips hang 12 cm above the table).
        let home = moved("clutter/widowx_block_over_wall", 0.29, -0.01).expect("under home");
        assert!(home.contains("home pose"), "{home}");
    }

    /// An obstacle between the camera and the object is refused: the pointer must see the object.
    #[test]
    fn a_hidden_object_is_refused() {
        let spec = task("clutter/xarm_fruit_past_bottle").unwrap();
        let mut ep = spec.instantiate(2).unwrap();
        let orange = centroid(ep.scene.object("orange").unwrap());
        let eye = ep.scene.camera.eye;
        assert_eq!(spec.obstacle_problem(&ep).unwrap(), None);
        // On the line of sight, 12 cm in front of the orange (the 28 cm bottle covers its top).
        let dir = (eye - orange).xy().normalize();
        let bottle = ep
            .scene
            .objects
            .iter_mut()
            .find(|o| o.name == "bottle")
            .unwrap();
        bottle.world_from_object.translation.vector.x = orange.x + 0.12 * dir.x;
        bottle.world_from_object.translation.vector.y = orange.y + 0.12 * dir.y;
        let why = spec.obstacle_problem(&ep).unwrap().unwrap_or_default();
        assert!(why.contains("hides the object's top"), "{why}");
    }
}
