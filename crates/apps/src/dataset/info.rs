//! `meta/info.json`: the dataset's version, fps, robot, totals, path templates and features.
//!
//! Keys and defaults as lerobot v0.6.1 writes them (`src/lerobot/datasets/dataset_metadata.py`,
//! `DatasetInfo`; `utils.py` for the constants and templates). lerobot 0.4.4 indexes every key
//! directly, so all are written. Feature order matters (it is the data table's column order), and
//! a JSON object read into a map would lose it, so features are kept as an ordered list and
//! (de)serialised by hand.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The format version this module writes; lerobot refuses a major version below 3.
pub const CODEBASE_VERSION: &str = "v3.0";
/// Files per chunk folder (lerobot `DEFAULT_CHUNK_SIZE`).
pub const CHUNKS_SIZE: u64 = 1000;
/// A data or episodes table starts a new file past this size (lerobot `DEFAULT_DATA_FILE_SIZE_IN_MB`).
pub const DATA_FILE_MB: u64 = 100;
/// lerobot `DEFAULT_VIDEO_FILE_SIZE_IN_MB` (recorded; our videos hold one episode per file).
pub const VIDEO_FILE_MB: u64 = 200;
/// lerobot `DEFAULT_DATA_PATH`, formatted with Python's `str.format` by the loader.
pub const DATA_PATH: &str = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet";
/// lerobot `DEFAULT_VIDEO_PATH`.
pub const VIDEO_PATH: &str = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4";

/// One feature: a column of the data table, or a video stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Feature {
    /// A numpy dtype string (`float32`, `int64`, `bool`, …), `string`, `image` or `video`.
    pub dtype: String,
    /// Per-frame shape: `[n]` for vectors (`[1]` for scalars), `[H, W, 3]` for images.
    pub shape: Vec<usize>,
    /// Names of a vector's entries, or of an image's axes; `null` for the defaults.
    pub names: Option<Vec<String>>,
    /// A video's codec facts (`video.codec`, `video.pix_fmt`, `is_depth_map`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<serde_json::Value>,
}

impl Feature {
    /// A float32 vector with named entries (lerobot's recorder writes states and actions so).
    pub fn vector(names: &[&str]) -> Self {
        Feature {
            dtype: "float32".into(),
            shape: vec![names.len()],
            names: Some(names.iter().map(|s| s.to_string()).collect()),
            info: None,
        }
    }

    /// An int64 scalar per frame.
    pub fn int_scalar() -> Self {
        Feature {
            dtype: "int64".into(),
            shape: vec![1],
            names: None,
            info: None,
        }
    }

    /// An RGB video of `width`×`height`.
    pub fn video(width: u32, height: u32) -> Self {
        Feature {
            dtype: "video".into(),
            shape: vec![height as usize, width as usize, 3],
            names: Some(vec!["height".into(), "width".into(), "channels".into()]),
            info: None,
        }
    }

    /// A depth video of `width`×`height` (lerobot's depth map: one channel, 12-bit codes of
    /// log-quantised depth in an HEVC stream), quantised with `quantizer`. Its `info` is set
    /// from the start: whether a video is a depth map decides how it is written.
    pub fn depth_video(
        width: u32,
        height: u32,
        fps: u32,
        gop: u32,
        quantizer: &super::depth::DepthQuantizer,
    ) -> Self {
        let options = super::VideoOptions {
            fps,
            gop,
            ..Default::default()
        };
        Feature {
            dtype: "video".into(),
            shape: vec![height as usize, width as usize, 1],
            names: Some(vec!["height".into(), "width".into(), "channels".into()]),
            info: Some(super::writer::depth_video_info(
                width as usize,
                height as usize,
                options,
                quantizer,
            )),
        }
    }

    /// Whether the feature is a depth video (`info.is_depth_map`, or the older
    /// `video.is_depth_map`, as lerobot's `depth_keys` reads it).
    pub fn is_depth_map(&self) -> bool {
        let flag = |k: &str| {
            self.info
                .as_ref()
                .and_then(|i| i.get(k))
                .and_then(|v| v.as_bool())
                .unwrap_or(false)
        };
        self.is_video() && (flag("is_depth_map") || flag("video.is_depth_map"))
    }

    /// Whether the feature is a video stream (not a column of the data table).
    pub fn is_video(&self) -> bool {
        self.dtype == "video"
    }

    /// Elements per frame.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the feature holds no element per frame.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The five features lerobot appends to every dataset (`utils/constants.py` `DEFAULT_FEATURES`),
/// in its order: `timestamp` is float32, the indices int64.
pub fn default_features() -> Vec<(String, Feature)> {
    let scalar = |dtype: &str| Feature {
        dtype: dtype.into(),
        shape: vec![1],
        names: None,
        info: None,
    };
    vec![
        ("timestamp".into(), scalar("float32")),
        ("frame_index".into(), scalar("int64")),
        ("episode_index".into(), scalar("int64")),
        ("index".into(), scalar("int64")),
        ("task_index".into(), scalar("int64")),
    ]
}

/// Features in their order (a JSON object on disk).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Features(pub Vec<(String, Feature)>);

impl Features {
    /// The feature called `name`.
    pub fn get(&self, name: &str) -> Option<&Feature> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, f)| f)
    }

    /// Video features, in order.
    pub fn videos(&self) -> impl Iterator<Item = (&str, &Feature)> {
        self.0
            .iter()
            .filter(|(_, f)| f.is_video())
            .map(|(n, f)| (n.as_str(), f))
    }
}

impl Serialize for Features {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, feature) in &self.0 {
            map.serialize_entry(name, feature)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Features {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Ordered;
        impl<'de> Visitor<'de> for Ordered {
            type Value = Features;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of features")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Features, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Feature>()? {
                    out.push((k, v));
                }
                Ok(Features(out))
            }
        }
        d.deserialize_map(Ordered)
    }
}

/// `meta/info.json`, keys in lerobot v0.6.1's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Info {
    /// Format version (`v3.0`).
    pub codebase_version: String,
    /// Frames per second of every episode.
    pub fps: u32,
    /// Every feature, the five defaults last.
    pub features: Features,
    /// Episodes held (= rows of the episodes tables).
    pub total_episodes: u64,
    /// Frames held (= rows of the data tables).
    pub total_frames: u64,
    /// Distinct task strings (= rows of `meta/tasks.parquet`).
    pub total_tasks: u64,
    /// Files per chunk folder.
    pub chunks_size: u64,
    /// Size at which a data table file is closed, MB.
    pub data_files_size_in_mb: u64,
    /// Size at which a video file is closed, MB.
    pub video_files_size_in_mb: u64,
    /// Template of the data tables' paths.
    pub data_path: String,
    /// Template of the videos' paths (`null` without video features).
    pub video_path: Option<String>,
    /// The robot the episodes were recorded on.
    pub robot_type: Option<String>,
    /// `{"train": "0:N"}` once episodes exist.
    #[serde(default)]
    pub splits: std::collections::BTreeMap<String, String>,
}

impl Info {
    /// An empty dataset's info: `features` are the user's, the defaults are appended.
    pub fn new(fps: u32, robot_type: &str, features: Vec<(String, Feature)>) -> Self {
        let has_video = features.iter().any(|(_, f)| f.is_video());
        let mut all = features;
        all.extend(default_features());
        Info {
            codebase_version: CODEBASE_VERSION.into(),
            fps,
            features: Features(all),
            total_episodes: 0,
            total_frames: 0,
            total_tasks: 0,
            chunks_size: CHUNKS_SIZE,
            data_files_size_in_mb: DATA_FILE_MB,
            video_files_size_in_mb: VIDEO_FILE_MB,
            data_path: DATA_PATH.into(),
            video_path: has_video.then(|| VIDEO_PATH.into()),
            robot_type: Some(robot_type.into()),
            splits: Default::default(),
        }
    }

    /// The JSON text lerobot writes (`json.dump(indent=4, ensure_ascii=False)`).
    pub fn to_json(&self) -> String {
        to_json_indent4(self)
    }
}

/// `value` as JSON indented by four spaces, as Python's `json.dump(indent=4)` lays it out.
pub(crate) fn to_json_indent4<T: Serialize>(value: &T) -> String {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    value
        .serialize(&mut ser)
        .expect("serialising to memory cannot fail");
    let mut s = String::from_utf8(out).expect("serde_json writes UTF-8");
    s.push('\n');
    s
}

/// `chunk-XXX/file-XXX`, the relative part of every table and video path.
pub fn chunk_file(chunk: u64, file: u64) -> String {
    format!("chunk-{chunk:03}/file-{file:03}")
}

/// The next (chunk, file) after `(chunk, file)`, as lerobot's `update_chunk_file_indices`
/// advances them: the file index wraps to a new chunk at `chunks_size - 1`.
pub fn next_chunk_file(chunk: u64, file: u64, chunks_size: u64) -> (u64, u64) {
    if file + 1 >= chunks_size {
        (chunk + 1, 0)
    } else {
        (chunk, file + 1)
    }
}
