//! Tests that name the crate's internals (protocol tables, encoders, private helpers): they
//! live inside the crate so that what they reach need not be public.

mod keyframe_sequences;
mod render_reuse;
mod sim_clutter;
mod sim_physics_grasp;
mod sim_physics_judge;
mod sim_physics_tasks;
mod sim_physics_util;
mod sim_physics_world;
