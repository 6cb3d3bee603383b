//! Episodes kept as training data: LeRobotDataset v3.0 folders, the format lerobot's recorder
//! writes and its loader (`LeRobotDataset(repo_id, root=DIR)`) reads, so simulated and real
//! pointact runs train ACT, Diffusion Policy, SmolVLA or π0 as any lerobot recording does.
//!
//! `info` (`meta/info.json`), `tables` (the Parquet tables), `stats` (`meta/stats.json`, computed
//! as lerobot computes it), `video` + `mp4` (H.264 in MP4), `writer` (appending episodes), `read` (a folder's summary). The
//! format knows nothing of robots or the simulator: `runner::record` turns episodes into rows.

pub mod depth;
pub mod h264;
pub mod hevc;
pub mod info;
pub mod mp4;
pub mod read;
pub mod stats;
pub mod tables;
pub mod video;
pub mod writer;

use std::path::{Path, PathBuf};

pub use info::{Feature, Info};
pub use tables::{Cell, Column};
pub use video::VideoOptions;
pub use writer::{DatasetSpec, DatasetWriter, EpisodeInput};

/// Why a dataset cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The folder holds a dataset this run may not append to (robot, fps, features), or
    /// something that is not a dataset.
    #[error("{0}")]
    Incompatible(String),
    /// A table is unreadable or disagrees with the metadata.
    #[error("{0}")]
    Table(String),
    /// An episode's values do not fit the features.
    #[error("{0}")]
    Episode(String),
    /// A video could not be encoded.
    #[error("video {0}")]
    Video(String),
}

impl DatasetError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        DatasetError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Metadata files (`info.json`, `stats.json`) larger than this are refused rather than read
/// whole: a real one holds a few kilobytes per feature.
const METADATA_LIMIT: u64 = 64 << 20;

/// A metadata file's text, refused past [`METADATA_LIMIT`] or when it is not a regular file
/// (a FIFO would block, `/dev/zero` would never end).
pub(crate) fn read_small_file(path: &Path) -> Result<String, DatasetError> {
    pointact_core::input::read_text(path, METADATA_LIMIT).map_err(|e| DatasetError::io(path, e))
}
