//! Instruction → plan → checked motions. Two branches: the affordance branch (-P: grasp point from
//! OFG or REG, place point from RRG) and the visual-trace branch (-V: an 8-point VTG trace lifted to
//! 3D and followed as an SE(3) path).

pub mod instruction;
pub mod motion;
pub mod perceive;
pub mod plan;
pub mod run;

pub use instruction::{parse_instruction, InstructionError, Intent, Relation};
