//! Helpers shared by the integration tests (each test file that needs them says `mod common;`).
#![allow(dead_code)] // Every test binary compiles this module and uses only part of it.

pub mod emulator;
pub mod fuzz;
pub mod handeye;
pub mod openai_mock;
pub mod python;
mod run;
mod temp;

#[allow(unused_imports)] // each test binary uses part of them
pub use run::*;
#[allow(unused_imports)]
pub use temp::{read_tree, temp_dir, TempDir};
