//! The GRPO trainer (issue #17), built in stages. Built: [`objective`], the loss of one step
//! (advantages, clipped surrogate, KL, aggregation) on differentiable candle ops. Not built yet:
//! rollouts, the optimiser loop, checkpoints (`pointact train grpo` says so).

pub mod objective;
