//! pointact's pointing protocol: what we ask Embodied-R1 and how we read its answer.
//!
//! * [`ability`]: the four abilities (REG, RRG, OFG, VTG) and their prompt templates, which are
//!   interface strings the model was trained on and must match character for character.
//! * [`parse`]: the tolerant parser for `<think>…</think><answer><point>[[x, y], …]</point></answer>`
//!   replies, with typed errors and validation (finite, in bounds, VTG has 8 points).
//! * `smart_resize` exactly as Qwen2.5-VL's image processor does it, and the map from the model's
//!   pixels back to the camera image's pixels ([`ModelImageMap`]): owned by `vlm::image_map`
//!   (the processor needs them), re-exported here because every answer is mapped through them.
//! * [`qwen`]: the local backend, Embodied-R1 (Qwen2.5-VL) in process on candle (`vlm`).
//! * [`openai`]: the remote backend, Embodied-R1 behind an OpenAI-compatible server (vLLM, SGLang).
//! * [`consensus`]: a backend asked K times, the medoid answer kept (`--samples K`).
//! * [`queue`]: one backend shared by many clients (the bridge's connections) through a FIFO queue.
//!
//! Parsed points are in model pixels (the model sees a resized image); they become original-image
//! pixels only through [`ModelImageMap`]. Backends implement the [`Pointer`] trait.
//!
//! ```
//! use pointact_pointing::{parse_answer, Ability, ImageSize, ModelImageMap};
//! use pointact_vlm::{DEFAULT_MIN_PIXELS, PRETRAINED_MAX_PIXELS};
//!
//! let prompt = Ability::Rrg.prompt("put pepper in pan");
//! assert!(prompt.contains("The task instruction is: put pepper in pan."));
//!
//! // A 640x480 camera frame reaches the model as 644x476.
//! let map = ModelImageMap::for_qwen25vl(ImageSize::new(640, 480), DEFAULT_MIN_PIXELS, PRETRAINED_MAX_PIXELS)?;
//! let reply = "<think>The pan is right of the pepper.</think><answer><point>[[322, 238]]</point></answer>";
//! let answer = parse_answer(reply, Ability::Rrg, map.model())?;
//! assert_eq!(answer.points, vec![[322.0, 238.0]]); // model pixels
//! assert_eq!(answer.to_original(&map), vec![[320.0, 240.0]]); // camera pixels
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub(crate) mod ability;
pub(crate) mod backend;
pub mod consensus;
pub mod openai;
pub mod overlay;
pub(crate) mod parse;
pub(crate) mod pointer;
pub(crate) mod queue;
pub mod qwen;
pub(crate) mod report;

pub use ability::{Ability, ParseAbilityError, VTG_POINT_COUNT};
pub use backend::{open, ModelOptions, ModelPointer, PointerKind, TextStream};
pub use parse::{parse_answer, ListProblem, PointAnswer, PointingError};
pub use pointact_vlm::{ImageSize, MappingError, ModelImageMap};
pub use pointer::{Pointer, PointerError, Pointing};
pub use queue::{PointerQueue, QueuedPointer};
pub use report::PointReport;

#[cfg(test)]
mod tests;
