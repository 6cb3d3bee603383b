//! Instruction → abilities to ask → a plan. Two branches: the affordance branch (-P: grasp point
//! from OFG or REG, place point from RRG) and the visual-trace branch (-V: an 8-point VTG trace
//! lifted to 3D and followed as an SE(3) path). The executor plans and emits events; it moves
//! nothing: the runner passes its plan through the safety gate to a robot.

pub mod correct;
pub(crate) mod event;
pub(crate) mod instruction;
pub mod perceive;
pub(crate) mod plan;
pub(crate) mod task;
pub(crate) mod verify;

pub use event::Event;
pub use instruction::{parse_instruction, InstructionError, Intent, Relation};
pub use plan::{Branch, GraspParams, Plan, PlanError, Step};
pub(crate) use task::plan_task;
pub(crate) use task::recovery_plan;
pub use task::{TaskError, TaskPlan};
pub use verify::{verify, ArmThen, Expectation, Goal, Looks, Verdict};
