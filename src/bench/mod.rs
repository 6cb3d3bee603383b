//! Benchmarks behind `pointact bench`. Each one measures a peer in the same run and prints ratios;
//! none of them runs in the test suite (tests never assert wall-clock times).

pub mod bridge;
pub mod cloud;
pub mod grpo;
pub mod ik;
pub mod plan;
pub mod qgemm;
pub mod render;
pub mod rewards;
pub mod servo;
pub mod vlm;
