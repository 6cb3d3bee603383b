//! The workspace's tests of the applications. They live inside the crate (which names itself
//! `pointact` for them, as the library re-exports it) so that what they reach need not be public.

/// The workspace's shared test helpers, less the one that starts the binary (a crate's own tests
/// have none).
#[allow(dead_code)]
#[path = "../../../../tests/common"]
mod common {
    #[path = "fuzz.rs"]
    pub mod fuzz;
    #[path = "handeye.rs"]
    pub mod handeye;
    #[path = "openai_mock.rs"]
    pub mod openai_mock;
    #[path = "python.rs"]
    pub mod python;
    #[path = "run.rs"]
    mod run;
    #[path = "temp.rs"]
    mod temp;

    pub use run::*;
    pub use temp::*;
}
#[path = "../../../../tests/vlm_fixture/mod.rs"]
mod vlm_fixture;

mod ask_eval_spatial;
mod ask_pipeline;
mod bridge_hostile;
mod bridge_pointer;
mod bridge_server;
mod bridge_wire;
mod calibrate_live;
mod calibrate_sim;
mod calibrate_target;
mod camera_check;
mod closed_loop;
mod consistency_openai;
mod dataset_remote;
mod dataset_stats;
mod dataset_video;
mod dataset_writer;
mod embodied_r_golden;
mod env_reward;
mod grpo_data;
mod grpo_learn;
mod grpo_loss_golden;
mod grpo_run;
mod grpo_spatial_learn;
mod grpo_spatial_records;
mod grpo_train;
mod pointing_qwen_text;
mod reward_service;
mod rewards_golden;
mod robot_r1;
mod runner_approve;
mod runner_async;
mod sim_e2e;
mod spatial_data;
mod viz_rrd;
mod xarm_sim_task;
