//! The GRPO trainer: G sampled responses per question, their rewards, group-relative advantages,
//! the clipped surrogate with a KL to a frozen reference, AdamW, checkpoints and resume.
//!
//! * [`objective`]: the loss of one step (advantages, clipped surrogate, KL, aggregation) on
//!   differentiable candle ops.
//! * [`rollout`]: a group of sampled responses decoded as one batch on the KV cache.
//! * [`policy`]: the policy's differentiable log-probabilities of those responses.
//! * [`trainer`]: one step end to end, and greedy evaluation on held-out questions.
//! * [`optim`]: AdamW, global gradient-norm clipping and the learning-rate schedule.
//! * [`checkpoint`]: model folders `pointact point --model DIR` loads, plus what resuming needs.
//! * [`data`]: prompt records in the EasyR1 layout, and a generator of records from our simulator.
//! * [`run`]: a training run (`pointact train grpo`): order, steps, evaluation, metrics, resume.
//! * [`spatial`]: Embodied-R's reasoning training on text-only records: their ground truth and
//!   reward.
//! * [`spatial_records`]: those records made from generated spatial questions.

pub mod checkpoint;
pub mod data;
pub mod objective;
pub mod optim;
pub(crate) mod policy;
pub mod rollout;
pub mod run;
pub mod spatial;
pub mod spatial_records;
pub mod trainer;
