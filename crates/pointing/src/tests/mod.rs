//! Tests that name the crate's internals (protocol tables, encoders, private helpers): they
//! live inside the crate so that what they reach need not be public.

#[allow(dead_code)]
#[path = "../../../../tests/common/fuzz.rs"]
mod fuzz;
#[allow(dead_code)]
#[path = "../../../../tests/common/openai_mock.rs"]
mod openai_mock;
mod pointing_fuzz;
mod pointing_mapping;
mod pointing_openai;
mod pointing_parse;
mod pointing_prompts;
