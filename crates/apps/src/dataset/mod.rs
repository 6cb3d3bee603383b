//! Episodes kept as training data: LeRobotDataset v3.0 output (not built yet beyond its video
//! stream; see `video`).

pub mod mp4;
pub mod video;
