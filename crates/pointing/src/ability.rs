//! The four Embodied-R1 abilities and their prompt templates.
//!
//! The templates are interface strings: Embodied-R1-3B was trained on exactly these texts (official
//! `inference_example.py`, `CONF_MODE`) and only answers reliably to them, so they live here as
//! `const`s, byte for byte, and nowhere else. Spacing quirks (`[[x1,y1], [x2,y2], ...]` in one place,
//! `[[x1, y1], [x2, y2], ...]` in another, VTG's trailing `.`) are part of the interface; do not tidy them.

use std::fmt;
use std::str::FromStr;

/// The placeholder each template carries exactly once; Python's `str.format(instruction=…)` fills it.
pub const INSTRUCTION_PLACEHOLDER: &str = "{instruction}";

/// REG template (Referring Expression Grounding).
pub const REG_TEMPLATE: &str = "Provide one or more points coordinate of objects region {instruction}. The results are presented in a format <point>[[x1,y1], [x2,y2], ...]</point>. You FIRST think about the reasoning process as an internal monologue and then provide the final answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags. The answer consists only of several coordinate points, with the overall format being: <think> reasoning process here </think><answer><point>[[x1, y1], [x2, y2], ...]</point></answer>";

/// OFG template (Object aFfordance Grounding).
pub const OFG_TEMPLATE: &str = "Please provide the 2D points coordinate of the region this sentence describes: {instruction}. The results are presented in a format <point>[[x1,y1], [x2,y2], ...]</point>. You FIRST think about the reasoning process as an internal monologue and then provide the final answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags. The answer consists only of several coordinate points, with the overall format being: <think> reasoning process here </think><answer><point>[[x1, y1], [x2, y2], ...]</point></answer>";

/// RRG template (Region Referring Grounding).
pub const RRG_TEMPLATE: &str = "You are currently a robot performing robotic manipulation tasks. The task instruction is: {instruction}. Use 2D points to mark the target location where the object you need to manipulate in the task should ultimately be moved. You FIRST think about the reasoning process as an internal monologue and then provide the final answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags. The answer consists only of several coordinate points, with the overall format being: <think> reasoning process here </think><answer><point>[[x1, y1], [x2, y2], ...]</point></answer>";

/// VTG template (Visual Trace Generation). Note the final `.` after `</answer>`: it is in the original.
pub const VTG_TEMPLATE: &str = "You are currently a robot performing robotic manipulation tasks. The task instruction is: {instruction}. Use 2D points to mark the manipulated object-centric waypoints to guide the robot to successfully complete the task. You must provide the points in the order of the trajectory, and the number of points must be 8. You FIRST think about the reasoning process as an internal monologue and then provide the final answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags. The answer consists only of several coordinate points, with the overall format being: <think> reasoning process here </think><answer><point>[[x1, y1], [x2, y2], ..., [x8, y8]]</point></answer>.";

/// How many waypoints a VTG answer must hold; the VTG template demands exactly this many, and the
/// executor's trace lifting assumes it.
pub const VTG_POINT_COUNT: usize = 8;

/// One of the four things Embodied-R1 was trained to point at. The ability decides the prompt and what
/// a valid answer looks like (VTG: an ordered trace of exactly [`VTG_POINT_COUNT`] points).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ability {
    /// Referring Expression Grounding: points on the object an expression refers to.
    Reg,
    /// Region Referring Grounding: points on the place an object should end up.
    Rrg,
    /// Object aFfordance Grounding: points on the part of an object that affords an action.
    Ofg,
    /// Visual Trace Generation: 8 ordered waypoints of the manipulated object.
    Vtg,
}

impl Ability {
    /// All abilities, in a fixed order (for CLIs, sweeps and tests).
    pub const ALL: [Ability; 4] = [Ability::Reg, Ability::Rrg, Ability::Ofg, Ability::Vtg];

    /// The short lowercase code used on the command line and in logs (`reg`, `rrg`, `ofg`, `vtg`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Ability::Reg => "reg",
            Ability::Rrg => "rrg",
            Ability::Ofg => "ofg",
            Ability::Vtg => "vtg",
        }
    }

    /// One line saying what the ability does, as the Embodied-R1 reference describes it.
    pub const fn description(self) -> &'static str {
        match self {
            Ability::Reg => {
                "Referring Expression Grounding - Locating the coordinates of specified object regions within an image."
            }
            Ability::Rrg => {
                "Region Referring Grounding - Locating specific spatial target locations for robotic manipulation tasks."
            }
            Ability::Ofg => {
                "Object Affordance Grounding - Locating the 2D coordinates of specified object regions based on descriptions."
            }
            Ability::Vtg => {
                "Visual Trace Generation - Generating waypoints centered on manipulated objects to guide robots to complete tasks."
            }
        }
    }

    /// The raw template, with [`INSTRUCTION_PLACEHOLDER`] still in it.
    pub const fn template(self) -> &'static str {
        match self {
            Ability::Reg => REG_TEMPLATE,
            Ability::Rrg => RRG_TEMPLATE,
            Ability::Ofg => OFG_TEMPLATE,
            Ability::Vtg => VTG_TEMPLATE,
        }
    }

    /// The exact number of points a valid answer must have, if the ability fixes one (only VTG does).
    pub const fn required_points(self) -> Option<usize> {
        match self {
            Ability::Vtg => Some(VTG_POINT_COUNT),
            Ability::Reg | Ability::Rrg | Ability::Ofg => None,
        }
    }

    /// The user-message text for `instruction`, exactly as the official example builds it with
    /// `template.format(instruction=...)`. The instruction is inserted verbatim (no trimming, no
    /// escaping): the model saw raw instructions in training. Braces inside `instruction` are safe,
    /// since the template is scanned once and the inserted text is never re-scanned.
    pub fn prompt(self, instruction: &str) -> String {
        self.template()
            .replacen(INSTRUCTION_PLACEHOLDER, instruction, 1)
    }
}

impl fmt::Display for Ability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An ability name that is none of `reg`, `rrg`, `ofg`, `vtg` (in any letter case).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown ability {input:?}: expected one of reg, rrg, ofg, vtg")]
pub struct ParseAbilityError {
    /// What was given.
    pub input: String,
}

impl FromStr for Ability {
    type Err = ParseAbilityError;

    /// Case-insensitive, so `VTG` from a config file works; surrounding whitespace is not accepted,
    /// so a typo'd value is reported instead of guessed.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ability::ALL
            .into_iter()
            .find(|a| a.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| ParseAbilityError {
                input: s.to_owned(),
            })
    }
}
