//! Tests that name the crate's internals (protocol tables, encoders, private helpers): they
//! live inside the crate so that what they reach need not be public.

#[allow(dead_code)]
#[path = "../../../../tests/common/temp.rs"]
mod temp;
mod vlm_config;
mod vlm_files;
#[path = "../../../../tests/vlm_fixture/mod.rs"]
mod vlm_fixture;
mod vlm_hub;
mod vlm_lora;
mod vlm_processor;
mod vlm_text;
mod vlm_text_lm;
mod vlm_vision;
mod vlm_weights;
