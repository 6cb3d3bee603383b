//! The GRPO trainer (issue #17), built in stages. Built: [`objective`], the loss of one step
//! (advantages, clipped surrogate, KL, aggregation) on differentiable candle ops; [`rollout`], a
//! group of sampled responses decoded as one batch on the KV cache; [`policy`], the policy's
//! differentiable log-probabilities of those responses. Not built yet: the optimiser loop,
//! checkpoints (`pointact train grpo` says so).

pub mod checkpoint;
pub mod data;
pub mod objective;
pub mod optim;
pub mod policy;
pub mod rollout;
pub mod run;
pub mod trainer;
