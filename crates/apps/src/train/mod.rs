//! Training-side code: the rewards a GRPO trainer optimises, the reward service for trainers in
//! Python, and the GRPO trainer itself.
//!
//! * [`rewards`]: Embodied-R1's released reward functions ported with exact parity (every task type
//!   the released `embodiedr1_compute_score` dispatches, golden-tested against the Python); pure
//!   functions of a response string and a ground-truth string, importing nothing else of the crate.
//! * [`service`]: `pointact serve rewards`, those functions over HTTP for verl and EasyR1
//!   (`python/pointact_rewards.py`).
//! * [`env_reward`]: ours, not released: a policy's points executed in the simulator, the judge's
//!   verdict the reward.
//! * [`consistency`]: Embodied-R's logic-consistency reward (a reference model answers from the
//!   policy's reasoning alone).
//! * [`robot_r1`]: Robot-R1's multiple-choice questions from demonstrations in our simulator.
//! * [`grpo`]: the GRPO trainer: its objective (advantages, clipped surrogate, KL, aggregation),
//!   rollouts, optimiser, checkpoints and training runs.

pub mod consistency;
pub mod env_reward;
pub mod grpo;
pub mod rewards;
pub mod robot_r1;
pub mod service;
pub mod spatial;
