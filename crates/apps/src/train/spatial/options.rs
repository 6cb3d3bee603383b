//! What `train spatial-data` makes: the suite, tasks and seeds, the videos' length, rate and size.
//! Its own file because both the generator and the camera walk read it.

use std::path::PathBuf;

use crate::sim::tasks::Suite;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SpatialOptions {
    /// The suite whose tasks lay out the scenes; default tabletop.
    pub suite: Suite,
    /// Task ids of the suite (`cup_on_plate` or `tabletop/cup_on_plate`); empty: all.
    pub tasks: Vec<String>,
    /// Seeds `seed .. seed + seeds` of every task.
    pub seeds: u64,
    /// First seed; default 0.
    pub seed: u64,
    /// Frames per sequence; default 24.
    pub frames: usize,
    /// Nominal frames per second (what `time_s` and the questions' `fps` say); default 2.
    pub fps: f64,
    /// Frame width, px; default 320.
    pub width: u32,
    /// Frame height, px; default 240.
    pub height: u32,
    /// Also make the recorded changes (the task's object moved halfway); default true.
    pub moved: bool,
    /// Output folder.
    pub out: PathBuf,
}

impl Default for SpatialOptions {
    fn default() -> Self {
        SpatialOptions {
            suite: Suite::Tabletop,
            tasks: Vec::new(),
            seeds: 4,
            seed: 0,
            frames: 24,
            fps: 2.0,
            width: 320,
            height: 240,
            moved: true,
            out: PathBuf::from("spatial-data"),
        }
    }
}
