//! The benchmark's error, in a file of its own so that the stages it runs (checkpoint, inputs,
//! the workers, the peers) need not import the module that runs them.

use std::path::PathBuf;

use pointact_vlm::{ConfigError, DeviceError, ModelError, ProcessorError, WeightsError};

/// Errors that stop the benchmark (a failing configuration is not one: it is reported).
#[derive(Debug, thiserror::Error)]
pub enum VlmBenchError {
    #[error("bench vlm: {0}")]
    Args(String),
    #[error("bench vlm: cannot write or read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bench vlm: {0}")]
    Json(#[from] serde_json::Error),
    #[error("bench vlm: {0}")]
    Config(#[from] ConfigError),
    #[error("bench vlm: {0}")]
    Weights(#[from] WeightsError),
    #[error("bench vlm: {0}")]
    Files(#[from] pointact_vlm::FilesError),
    #[error("bench vlm: {0}")]
    Model(#[from] ModelError),
    #[error("bench vlm: {0}")]
    Processor(#[from] ProcessorError),
    #[error("bench vlm: {0}")]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("bench vlm: image {}: {reason}", path.display())]
    Image { path: PathBuf, reason: String },
    #[error("bench vlm: rendering the simulator frame: {0}")]
    Sim(String),
    /// The two sides were given different inputs (a bug).
    #[error("bench vlm: {0}")]
    Mismatch(String),
}
