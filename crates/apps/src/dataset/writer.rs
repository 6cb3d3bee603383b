//! Appends episodes to a LeRobotDataset v3.0 folder, creating it on first use.
//!
//! Layout and bookkeeping follow lerobot v0.6.1 (`datasets/dataset_writer.py`,
//! `dataset_metadata.py`): frames of many episodes per data file, a row per
//! episode in `meta/episodes/`, tasks in first-seen order, `stats.json` the left fold of
//! per-episode statistics, and, like lerobot resuming a dataset, every session starting new
//! files after the last episode's. Two choices of ours: each episode's video is its own MP4
//! (lerobot concatenates episodes into one file, which its loader does not require; a file per
//! episode is never rewritten), and each table file is rewritten whole, atomically, after every
//! episode, with `info.json` written last (so a table file takes at most [`EPISODES_PER_FILE`]
//! episodes). A run stopped between episodes therefore leaves a
//! dataset the loader reads, holding every finished episode.

use std::fs;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;

use super::depth::DepthQuantizer;
use super::info::{chunk_file, next_chunk_file, Feature, Features, Info, CODEBASE_VERSION};
use super::stats::{self, FeatureStats};
use super::tables::{self, Cell, Column};
use super::video::{DepthWriter, H264Writer, VideoOptions};
use super::DatasetError;

/// What a dataset holds per frame and how fast: fixed when the folder is created, checked when
/// it is appended to.
#[derive(Debug, Clone)]
pub struct DatasetSpec {
    /// Frames per second.
    pub fps: u32,
    /// The robot (`info.json` `robot_type`).
    pub robot_type: String,
    /// The features, videos included; the five defaults are added.
    pub features: Vec<(String, Feature)>,
    /// How videos are coded (its fps is the dataset's).
    pub video: VideoOptions,
}

/// One RGB frame source of an episode: frame `i` as packed RGB8 rows, asked for in order.
pub type FrameSource<'a> = &'a mut dyn FnMut(usize) -> Result<Vec<u8>, String>;

/// One episode to append.
pub struct EpisodeInput<'a> {
    /// The instruction.
    pub task: &'a str,
    /// Frames in the episode (≥ 1).
    pub frames: usize,
    /// Values of every non-video feature but the five defaults, row-major.
    pub columns: Vec<(&'a str, Column)>,
    /// Frames of every video feature.
    pub videos: Vec<(&'a str, FrameSource<'a>)>,
    /// Further columns of the episode's metadata row (success, the judge's words, …); the same
    /// names and types for every episode of a session.
    pub extras: Vec<(String, Cell)>,
}

/// The open dataset: what is on disk, and the table files this session is filling.
pub struct DatasetWriter {
    root: PathBuf,
    info: Info,
    video: VideoOptions,
    tasks: Vec<String>,
    /// The statistics over every episode (`None` before the first).
    stats: Option<Vec<(String, FeatureStats)>>,
    data: TableFile,
    episodes: TableFile,
    /// Per video key, the (chunk, file) its next episode goes to.
    next_video: Vec<(String, (u64, u64))>,
}

/// Episodes a table file takes before the next is started. Every episode rewrites its files
/// whole (a Parquet footer comes last, and a file must stay readable after any episode should
/// the run be interrupted), so without a cap a session's writing time would grow with the square
/// of its episodes; lerobot reads any number of files.
const EPISODES_PER_FILE: usize = 50;

/// A table file this session fills: where, and its episodes' batches so far.
#[derive(Clone)]
struct TableFile {
    at: (u64, u64),
    batches: Vec<RecordBatch>,
    bytes: u64,
    rows: u64,
}

impl TableFile {
    fn new(at: (u64, u64)) -> Self {
        TableFile {
            at,
            batches: Vec::new(),
            bytes: 0,
            rows: 0,
        }
    }

    /// Moves to the next file when `rows` more would take this one past `limit_mb`, as
    /// lerobot's writer decides (its size so far plus the new rows at its bytes per row), or
    /// when it already holds [`EPISODES_PER_FILE`] episodes.
    fn make_room(&mut self, rows: u64, limit_mb: u64, chunks_size: u64) {
        if self.rows == 0 {
            return;
        }
        let per_row = self.bytes as f64 / self.rows as f64;
        if self.bytes as f64 + per_row * rows as f64 >= (limit_mb * 1024 * 1024) as f64
            || self.batches.len() >= EPISODES_PER_FILE
        {
            *self = TableFile::new(next_chunk_file(self.at.0, self.at.1, chunks_size));
        }
    }

    fn write(&mut self, path: &Path, batch: RecordBatch) -> Result<(), DatasetError> {
        self.rows += batch.num_rows() as u64;
        self.batches.push(batch);
        tables::write_parquet(path, &self.batches)?;
        self.bytes = fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        Ok(())
    }
}

/// The statistics before `count` and the quantiles, in lerobot's order (`compute_stats.py`).
const STAT_KEYS: [&str; 4] = ["min", "max", "mean", "std"];

impl DatasetWriter {
    /// Opens the dataset at `root` for appending, or creates it (`root` absent or an empty
    /// folder). A folder holding something else, or a dataset of another robot, fps or feature
    /// set, is refused: call this before anything moves.
    pub fn open(root: &Path, spec: &DatasetSpec) -> Result<Self, DatasetError> {
        if spec.fps == 0 {
            return Err(DatasetError::Incompatible("fps must be at least 1".into()));
        }
        let wanted = Info::new(spec.fps, &spec.robot_type, spec.features.clone());
        let info_path = root.join("meta/info.json");
        let video = VideoOptions {
            fps: spec.fps,
            ..spec.video
        };
        if info_path.exists() {
            return Self::resume(root, wanted, video);
        }
        if let Ok(mut entries) = fs::read_dir(root) {
            if entries.next().is_some() {
                return Err(DatasetError::Incompatible(format!(
                    "{} is not empty and holds no dataset (no meta/info.json); give a new or \
                     empty folder",
                    root.display()
                )));
            }
        }
        fs::create_dir_all(root).map_err(|e| DatasetError::io(root, e))?;
        let next_video = wanted
            .features
            .videos()
            .map(|(k, _)| (k.to_string(), (0, 0)))
            .collect();
        Ok(DatasetWriter {
            root: root.to_path_buf(),
            info: wanted,
            video,
            tasks: Vec::new(),
            stats: None,
            data: TableFile::new((0, 0)),
            episodes: TableFile::new((0, 0)),
            next_video,
        })
    }

    fn resume(root: &Path, wanted: Info, video: VideoOptions) -> Result<Self, DatasetError> {
        let info = read_info(root)?;
        let incompatible = |what: String| {
            DatasetError::Incompatible(format!(
                "{} holds a dataset with {what}; write to another folder",
                root.display()
            ))
        };
        if info.codebase_version != CODEBASE_VERSION {
            return Err(incompatible(format!(
                "format {} (this writer appends to {CODEBASE_VERSION} only)",
                info.codebase_version
            )));
        }
        if info.robot_type != wanted.robot_type {
            return Err(incompatible(format!(
                "robot type {:?}, not {:?}",
                info.robot_type.as_deref().unwrap_or("none"),
                wanted.robot_type.as_deref().unwrap_or("none")
            )));
        }
        if info.fps != wanted.fps {
            return Err(incompatible(format!(
                "{} fps, not {}",
                info.fps, wanted.fps
            )));
        }
        let strip = |i: &Info| -> Vec<(String, Feature)> {
            i.features
                .0
                .iter()
                .map(|(n, f)| {
                    let mut f = f.clone();
                    f.info = None;
                    (n.clone(), f)
                })
                .collect()
        };
        let (have, want) = (strip(&info), strip(&wanted));
        if have != want {
            let describe = |fs: &[(String, Feature)]| {
                fs.iter()
                    .map(|(n, f)| format!("{n} {} {:?}", f.dtype, f.shape))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(incompatible(format!(
                "other features: it has [{}], this run writes [{}]",
                describe(&have),
                describe(&want)
            )));
        }
        // A video's `info` set from the start (a depth map's) names the coder that writes it.
        // Another coder's episodes beside this one's may need another decoder: depth videos
        // coded with PCM blocks, as an earlier version of this writer coded them, are misread
        // by FFmpeg before libavcodec 62.28, which this writer's streams are not.
        for (name, stored) in &info.features.0 {
            let (Some(have), Some(want)) = (
                stored.info.as_ref(),
                wanted.features.get(name).and_then(|f| f.info.as_ref()),
            ) else {
                continue;
            };
            for key in ["video.codec", "video.pix_fmt", "video.encoder"] {
                if have.get(key) != want.get(key) {
                    return Err(incompatible(format!(
                        "`{name}` coded otherwise ({key} {} there, {} here)",
                        have.get(key).unwrap_or(&serde_json::Value::Null),
                        want.get(key).unwrap_or(&serde_json::Value::Null)
                    )));
                }
            }
        }
        let tasks = read_tasks(root)?;
        if tasks.len() as u64 != info.total_tasks {
            return Err(DatasetError::Table(format!(
                "meta/tasks.parquet holds {} tasks but info.json says {}",
                tasks.len(),
                info.total_tasks
            )));
        }
        let stats = if info.total_episodes == 0 {
            None
        } else {
            Some(read_stats(root, &info)?)
        };
        let rows = read_episode_rows(root)?;
        if rows.len() as u64 != info.total_episodes {
            return Err(DatasetError::Table(format!(
                "meta/episodes holds {} episodes but info.json says {} (an interrupted write?)",
                rows.len(),
                info.total_episodes
            )));
        }
        let last = rows.last();
        let after = |c: &str, f: &str| -> (u64, u64) {
            last.and_then(|r| Some((r.get(c)?, r.get(f)?)))
                .map(|(c, f)| next_chunk_file(c as u64, f as u64, info.chunks_size))
                .unwrap_or((0, 0))
        };
        let data = TableFile::new(after("data/chunk_index", "data/file_index"));
        let episodes = TableFile::new(after(
            "meta/episodes/chunk_index",
            "meta/episodes/file_index",
        ));
        let next_video = info
            .features
            .videos()
            .map(|(k, _)| {
                let at = after(
                    &format!("videos/{k}/chunk_index"),
                    &format!("videos/{k}/file_index"),
                );
                (k.to_string(), at)
            })
            .collect();
        Ok(DatasetWriter {
            root: root.to_path_buf(),
            info,
            video,
            tasks,
            stats,
            data,
            episodes,
            next_video,
        })
    }

    /// The dataset's info as it stands.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Appends one episode: its videos, its frames, its metadata row, then tasks, statistics and
    /// info (the last write makes the episode part of the dataset). When any of it fails, what
    /// was written of the episode is undone, so the folder holds the dataset as it was.
    pub fn append(&mut self, episode: EpisodeInput<'_>) -> Result<(), DatasetError> {
        let saved = (
            self.info.clone(),
            self.tasks.len(),
            self.data.clone(),
            self.episodes.clone(),
            self.next_video.clone(),
        );
        let result = self.append_unchecked(episode);
        if result.is_err() {
            let (info, tasks, data, episodes, next_video) = saved;
            // Videos of this episode: the files each key's next index points at now.
            for ((key, at), (_, before)) in self.next_video.iter().zip(&next_video) {
                if at != before {
                    let _ = fs::remove_file(self.video_path(key, *before));
                }
            }
            self.restore_table("data", &data, true);
            self.restore_table("meta/episodes", &episodes, false);
            self.data = data;
            self.episodes = episodes;
            self.info = info;
            self.tasks.truncate(tasks);
            self.next_video = next_video;
            // The small metadata files as they were (best effort: the error above is the one
            // to report).
            if self.info.total_episodes > 0 {
                let _ = self.write_meta();
            }
        }
        result
    }

    /// Puts a table file back as `before` had it (removing a file this episode started).
    fn restore_table(&self, dir: &str, before: &TableFile, is_data: bool) {
        let now = if is_data { &self.data } else { &self.episodes };
        let path = |at: (u64, u64)| {
            self.root
                .join(format!("{dir}/{}.parquet", chunk_file(at.0, at.1)))
        };
        if now.at != before.at {
            let _ = fs::remove_file(path(now.at));
        }
        if now.batches.len() != before.batches.len() || now.at != before.at {
            let _ = if before.batches.is_empty() {
                fs::remove_file(path(before.at)).map_err(|e| DatasetError::io(&path(before.at), e))
            } else {
                tables::write_parquet(&path(before.at), &before.batches)
            };
        }
    }

    fn video_path(&self, key: &str, at: (u64, u64)) -> PathBuf {
        self.root
            .join(format!("videos/{key}/{}.mp4", chunk_file(at.0, at.1)))
    }

    /// `meta/tasks.parquet`, `meta/stats.json` and, last, `meta/info.json` as they stand.
    fn write_meta(&self) -> Result<(), DatasetError> {
        tables::write_parquet(
            &self.root.join("meta/tasks.parquet"),
            &[tables::tasks_batch(&self.tasks)?],
        )?;
        if let Some(stats) = &self.stats {
            let json: serde_json::Map<String, serde_json::Value> = stats
                .iter()
                .map(|(n, s)| (n.clone(), s.to_json()))
                .collect();
            tables::write_atomic(
                &self.root.join("meta/stats.json"),
                super::info::to_json_indent4(&json).as_bytes(),
            )?;
        }
        tables::write_atomic(
            &self.root.join("meta/info.json"),
            self.info.to_json().as_bytes(),
        )
    }

    fn append_unchecked(&mut self, episode: EpisodeInput<'_>) -> Result<(), DatasetError> {
        let n = episode.frames;
        if n == 0 {
            return Err(DatasetError::Episode(
                "an episode needs at least one frame".into(),
            ));
        }
        if episode.task.is_empty() {
            return Err(DatasetError::Episode("an episode needs a task".into()));
        }
        let ep_index = self.info.total_episodes as i64;
        let from = self.info.total_frames as i64;
        let fps = self.info.fps;
        let task_index = match self.tasks.iter().position(|t| t == episode.task) {
            Some(i) => i,
            None => {
                self.tasks.push(episode.task.to_string());
                self.tasks.len() - 1
            }
        } as i64;

        // Every user column present with n rows of its feature's width.
        let features = self.info.features.clone();
        let mut columns: Vec<(&str, Column)> = Vec::new();
        for (name, f) in features.0.iter().filter(|(_, f)| !f.is_video()) {
            if is_default(name) {
                continue;
            }
            let col = episode
                .columns
                .iter()
                .find(|(c, _)| c == name)
                .map(|(_, c)| c.clone())
                .ok_or_else(|| DatasetError::Episode(format!("no values for `{name}`")))?;
            if col.len() != n * f.len() {
                return Err(DatasetError::Episode(format!(
                    "`{name}` has {} values for {n} frames of {}",
                    col.len(),
                    f.len()
                )));
            }
            columns.push((name.as_str(), col));
        }
        let timestamp: Vec<f32> = (0..n).map(|i| (i as f64 / fps as f64) as f32).collect();
        let frame_index: Vec<i64> = (0..n as i64).collect();
        let index: Vec<i64> = (from..from + n as i64).collect();
        columns.push(("timestamp", Column::F32(timestamp)));
        columns.push(("frame_index", Column::I64(frame_index.clone())));
        columns.push(("episode_index", Column::I64(vec![ep_index; n])));
        columns.push(("index", Column::I64(index.clone())));
        columns.push(("task_index", Column::I64(vec![task_index; n])));

        // Videos first: a frame source's error leaves the tables untouched.
        let mut video_cells = Vec::new();
        let mut sources = episode.videos;
        let mut video_stats = self.write_videos(&features, &mut sources, n)?;
        // Every video holds the episode's n frames.
        let duration = n as f64 / fps as f64;
        for (key, at, _) in &video_stats {
            video_cells.push((format!("videos/{key}/chunk_index"), Cell::I64(at.0 as i64)));
            video_cells.push((format!("videos/{key}/file_index"), Cell::I64(at.1 as i64)));
            video_cells.push((format!("videos/{key}/from_timestamp"), Cell::F64(0.0)));
            video_cells.push((format!("videos/{key}/to_timestamp"), Cell::F64(duration)));
        }

        // Frames.
        let named: Vec<(&str, &Column)> = columns.iter().map(|(n, c)| (*n, c)).collect();
        let batch = tables::frames_batch(&features, &named)?;
        self.data.make_room(
            n as u64,
            self.info.data_files_size_in_mb,
            self.info.chunks_size,
        );
        let data_at = self.data.at;
        let data_path = self
            .root
            .join(format!("data/{}.parquet", chunk_file(data_at.0, data_at.1)));
        self.data.write(&data_path, batch)?;

        // Statistics of this episode, in features order (lerobot `compute_episode_stats`).
        let mut ep_stats: Vec<(String, FeatureStats)> = Vec::new();
        for (name, f) in &features.0 {
            let s = if f.is_video() {
                match video_stats.iter().position(|(k, ..)| k == name) {
                    Some(i) => video_stats.swap_remove(i).2,
                    None => continue,
                }
            } else {
                match columns.iter().find(|(c, _)| c == name).map(|(_, c)| c) {
                    // lerobot computes timestamp statistics from the float64 `i / fps`, not the
                    // stored float32 (`DatasetWriter.save_episode`).
                    Some(_) if name == "timestamp" => {
                        let t: Vec<f64> = (0..n).map(|i| i as f64 / fps as f64).collect();
                        stats::vector_stats_f64(&t, 1)
                    }
                    Some(Column::F32(v)) => stats::vector_stats_f32(v, f.len()),
                    Some(Column::F64(v)) => stats::vector_stats_f64(v, f.len()),
                    Some(Column::I64(v)) => stats::int_stats(v, f.len()),
                    Some(Column::Bool(v)) => {
                        let as_f32: Vec<f32> = v.iter().map(|&b| b as u8 as f32).collect();
                        stats::vector_stats_f32(&as_f32, f.len())
                    }
                    None => continue,
                }
                .map_err(|e| DatasetError::Episode(format!("statistics of `{name}`: {e}")))?
            };
            ep_stats.push((name.clone(), s));
        }

        // The episode's metadata row, columns in lerobot's order, then ours.
        self.episodes
            .make_room(1, self.info.data_files_size_in_mb, self.info.chunks_size);
        let meta_at = self.episodes.at;
        let mut row: Vec<(String, Cell)> = vec![
            ("episode_index".into(), Cell::I64(ep_index)),
            (
                "tasks".into(),
                Cell::StrList(vec![episode.task.to_string()]),
            ),
            ("length".into(), Cell::I64(n as i64)),
            ("data/chunk_index".into(), Cell::I64(data_at.0 as i64)),
            ("data/file_index".into(), Cell::I64(data_at.1 as i64)),
            ("dataset_from_index".into(), Cell::I64(from)),
            ("dataset_to_index".into(), Cell::I64(from + n as i64)),
        ];
        row.extend(video_cells);
        for (name, s) in &ep_stats {
            row.extend(stat_cells(name, s));
        }
        row.push((
            "meta/episodes/chunk_index".into(),
            Cell::I64(meta_at.0 as i64),
        ));
        row.push((
            "meta/episodes/file_index".into(),
            Cell::I64(meta_at.1 as i64),
        ));
        row.extend(episode.extras);
        let meta_path = self.root.join(format!(
            "meta/episodes/{}.parquet",
            chunk_file(meta_at.0, meta_at.1)
        ));
        self.episodes.write(&meta_path, tables::row_batch(&row)?)?;

        // Tasks, statistics, info.
        let stats = match &self.stats {
            None => ep_stats,
            Some(prev) => prev
                .iter()
                .map(|(name, p)| {
                    let merged = match ep_stats.iter().find(|(n, _)| n == name) {
                        Some((_, e)) => stats::aggregate(p, e).map_err(|e| {
                            DatasetError::Table(format!("statistics of `{name}`: {e}"))
                        })?,
                        None => p.clone(),
                    };
                    Ok((name.clone(), merged))
                })
                .collect::<Result<_, DatasetError>>()?,
        };
        let before = self.stats.replace(stats);
        self.info.total_episodes += 1;
        self.info.total_frames += n as u64;
        self.info.total_tasks = self.tasks.len() as u64;
        self.info
            .splits
            .insert("train".into(), format!("0:{}", self.info.total_episodes));
        let written = self.write_meta();
        if written.is_err() {
            self.stats = before;
        }
        written
    }

    fn video_at(&self, key: &str) -> (u64, u64) {
        self.next_video
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, at)| *at)
            .unwrap_or((0, 0))
    }

    /// Encodes the `n` frames of every video of `features` into its next file, frame by frame
    /// across the videos (one source may feed several: a renderer's colour and depth), and
    /// returns per video its key, file and statistics (from the frames themselves, as lerobot
    /// computes them from the lossless images).
    fn write_videos(
        &mut self,
        features: &Features,
        sources: &mut [(&str, FrameSource<'_>)],
        n: usize,
    ) -> Result<Vec<WrittenVideo>, DatasetError> {
        let mut open: Vec<OpenVideo> = Vec::new();
        let result = (|| {
            for (key, f) in features.videos() {
                if !sources.iter().any(|(k, _)| *k == key) {
                    return Err(DatasetError::Episode(format!(
                        "no frames for video `{key}`"
                    )));
                }
                let at = self.video_at(key);
                let path = self.video_path(key, at);
                let dir = path.parent().expect("a video path has a folder");
                fs::create_dir_all(dir).map_err(|e| DatasetError::io(dir, e))?;
                open.push(OpenVideo::create(key, f, at, path, n, self.video)?);
            }
            for i in 0..n {
                for v in &mut open {
                    let (_, source) = sources
                        .iter_mut()
                        .find(|(k, _)| *k == v.key)
                        .expect("checked above");
                    let frame = source(i).map_err(|e| {
                        DatasetError::Episode(format!("frame {i} of `{}`: {e}", v.key))
                    })?;
                    v.push(i, &frame)?;
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            for v in &open {
                let _ = fs::remove_file(&v.tmp);
            }
            return Err(e);
        }
        let mut written = Vec::with_capacity(open.len());
        let mut open = open.into_iter();
        while let Some(v) = open.next() {
            let (key, at, path, tmp) = (v.key.to_string(), v.at, v.path.clone(), v.tmp.clone());
            let finished = v.finish().and_then(|(stats, info)| {
                fs::rename(&tmp, &path).map_err(|e| DatasetError::io(&path, e))?;
                Ok((stats, info))
            });
            let (stats, info) = match finished {
                Ok(s) => s,
                Err(e) => {
                    let _ = fs::remove_file(&tmp);
                    for rest in open {
                        let _ = fs::remove_file(&rest.tmp);
                    }
                    return Err(e);
                }
            };
            if let Some((_, next)) = self.next_video.iter_mut().find(|(k, _)| *k == key) {
                *next = next_chunk_file(at.0, at.1, self.info.chunks_size);
            }
            if let Some((_, f)) = self.info.features.0.iter_mut().find(|(k, _)| *k == key) {
                f.info.get_or_insert(info);
            }
            written.push((key, at, stats));
        }
        Ok(written)
    }
}

/// A video written for an episode: key, file (chunk, index), statistics.
type WrittenVideo = (String, (u64, u64), FeatureStats);

/// One video of an episode being encoded into a temporary file.
struct OpenVideo<'k> {
    key: &'k str,
    at: (u64, u64),
    path: PathBuf,
    tmp: PathBuf,
    /// Frame size and the strided size lerobot computes statistics at.
    size: (usize, usize),
    strided: (usize, usize),
    stride: usize,
    /// The frames lerobot samples for statistics (`sample_indices`).
    keep: Vec<usize>,
    frames: usize,
    options: VideoOptions,
    sink: Sink,
}

/// The encoder of an [`OpenVideo`] and the sampled frames, strided as lerobot strides them
/// (`auto_downsample_height_width`): the strided frames have the same pixels in the same order,
/// and are small enough never to be strided again.
enum Sink {
    /// RGB8 frames to H.264.
    Rgb(Box<H264Writer>, Vec<(usize, Vec<u8>)>),
    /// Float32 depths in metres to 12-bit codes in HEVC.
    Depth {
        writer: Box<DepthWriter>,
        quantizer: DepthQuantizer,
        /// The last frame's depths and codes: a depth that did not change keeps its code
        /// (quantising one costs numpy's float32 log, replayed exactly).
        metres: Vec<f32>,
        codes: Vec<u16>,
        sampled: Vec<(usize, Vec<f32>)>,
    },
}

impl<'k> OpenVideo<'k> {
    fn create(
        key: &'k str,
        feature: &Feature,
        at: (u64, u64),
        path: PathBuf,
        n: usize,
        options: VideoOptions,
    ) -> Result<Self, DatasetError> {
        let (h, w) = (feature.shape[0], feature.shape[1]);
        let tmp = tables::tmp_path(&path);
        let video_err = |e: super::video::VideoError| DatasetError::Video(format!("{key}: {e}"));
        let sink = if feature.is_depth_map() {
            let quantizer =
                quantizer_of(feature).map_err(|e| DatasetError::Video(format!("{key}: {e}")))?;
            Sink::Depth {
                writer: Box::new(
                    DepthWriter::create(&tmp, w as u32, h as u32, options).map_err(video_err)?,
                ),
                quantizer,
                metres: Vec::new(),
                codes: vec![0; w * h],
                sampled: Vec::new(),
            }
        } else {
            Sink::Rgb(
                Box::new(H264Writer::create(&tmp, w as u32, h as u32, options).map_err(video_err)?),
                Vec::new(),
            )
        };
        let stride = stats::downsample_factor(w, h);
        Ok(OpenVideo {
            key,
            at,
            path,
            tmp,
            size: (w, h),
            strided: (w.div_ceil(stride), h.div_ceil(stride)),
            stride,
            keep: stats::sample_indices(n),
            frames: 0,
            options,
            sink,
        })
    }

    /// Frame `i`: RGB8 rows, or a depth map as little-endian float32 metres.
    fn push(&mut self, i: usize, frame: &[u8]) -> Result<(), DatasetError> {
        let (w, h) = self.size;
        let key = self.key;
        let video_err = |e: super::video::VideoError| DatasetError::Video(format!("{key}: {e}"));
        let kept = self.keep.binary_search(&i).is_ok();
        let stride = self.stride;
        match &mut self.sink {
            Sink::Rgb(writer, sampled) => {
                if frame.len() != w * h * 3 {
                    return Err(DatasetError::Episode(format!(
                        "frame {i} of `{key}` has {} bytes, not {w}×{h}×3",
                        frame.len()
                    )));
                }
                if kept {
                    let mut small = Vec::with_capacity(self.strided.0 * self.strided.1 * 3);
                    for row in frame.chunks_exact(w * 3).step_by(stride) {
                        for px in row.chunks_exact(3).step_by(stride) {
                            small.extend_from_slice(px);
                        }
                    }
                    sampled.push((i, small));
                }
                writer.push_rgb(frame).map_err(video_err)?;
            }
            Sink::Depth {
                writer,
                quantizer,
                metres: last,
                codes,
                sampled,
            } => {
                if frame.len() != w * h * 4 {
                    return Err(DatasetError::Episode(format!(
                        "depth frame {i} of `{key}` has {} bytes, not {w}×{h}×4 (float32)",
                        frame.len()
                    )));
                }
                let metres: Vec<f32> = frame
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect();
                if kept {
                    let small = metres
                        .chunks_exact(w)
                        .step_by(stride)
                        .flat_map(|row| row.iter().step_by(stride).copied())
                        .collect();
                    sampled.push((i, small));
                }
                if last.len() == metres.len() {
                    quantizer.requantize(&metres, last, codes);
                } else {
                    quantizer.quantize(&metres, codes);
                }
                *last = metres;
                writer.push_codes(codes).map_err(video_err)?;
            }
        }
        self.frames += 1;
        Ok(())
    }

    /// Finishes the file; returns the statistics and the video `info` block.
    fn finish(self) -> Result<(FeatureStats, serde_json::Value), DatasetError> {
        let key = self.key;
        let video_err = |e: super::video::VideoError| DatasetError::Video(format!("{key}: {e}"));
        let (ws, hs) = self.strided;
        let stat_err = |e: String| DatasetError::Episode(format!("statistics of `{key}`: {e}"));
        let (w, h) = self.size;
        match self.sink {
            Sink::Rgb(writer, sampled) => {
                writer.finish().map_err(video_err)?;
                let stats = stats::image_stats_with(self.frames, ws, hs, |i| {
                    sampled
                        .iter()
                        .find(|(j, _)| *j == i)
                        .map(|(_, px)| px.as_slice())
                        .ok_or_else(|| format!("frame {i} was not kept"))
                })
                .map_err(stat_err)?;
                Ok((stats, video_info(w, h, self.options)))
            }
            Sink::Depth {
                writer,
                quantizer,
                sampled,
                ..
            } => {
                writer.finish().map_err(video_err)?;
                let stats = stats::depth_stats_with(self.frames, ws, hs, |i| {
                    sampled
                        .iter()
                        .find(|(j, _)| *j == i)
                        .map(|(_, d)| d.as_slice())
                        .ok_or_else(|| format!("frame {i} was not kept"))
                })
                .map_err(stat_err)?;
                Ok((stats, depth_video_info(w, h, self.options, &quantizer)))
            }
        }
    }
}

/// The video `info` block lerobot probes from the first file (`video_utils.get_video_info`) and
/// completes with its encoder's settings.
fn video_info(w: usize, h: usize, o: VideoOptions) -> serde_json::Value {
    serde_json::json!({
        "video.height": h,
        "video.width": w,
        "video.codec": "h264",
        "video.pix_fmt": "yuv420p",
        "video.fps": o.fps,
        "video.channels": 3,
        "has_audio": false,
        "video.g": o.gop,
        "video.qp": o.qp,
        "video.encoder": "pointact still-camera h264 (intra 16x16 + skip)",
        "is_depth_map": false
    })
}

/// The quantiser a depth feature's `info` names (lerobot's defaults for what it leaves out, as
/// `DepthEncoderConfig.from_video_info` does).
fn quantizer_of(feature: &Feature) -> Result<DepthQuantizer, String> {
    let d = DepthQuantizer::default();
    let info = feature.info.as_ref();
    let number = |k: &str, default: f64| {
        info.and_then(|i| i.get(k))
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| format!("`{k}` is not a number: {v}"))
            })
            .unwrap_or(Ok(default))
    };
    let q = DepthQuantizer {
        depth_min: number("video.depth_min", d.depth_min)?,
        depth_max: number("video.depth_max", d.depth_max)?,
        shift: number("video.shift", d.shift)?,
        use_log: match info.and_then(|i| i.get("video.use_log")) {
            None => d.use_log,
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format!("`video.use_log` is not a boolean: {v}"))?,
        },
    };
    q.validate()?;
    Ok(q)
}

/// A depth video's `info` block: what `get_video_info` probes from the file (HEVC, `gray12le`,
/// one channel), the quantiser's parameters lerobot dequantises with (`video.depth_min`,
/// `video.depth_max`, `video.shift`, `video.use_log`), `is_depth_map` and the unit of the depths
/// given (`depth_unit`, metres: `dataset_writer.py` records it from the first frame's dtype).
/// Appending compares `video.encoder` with a dataset's own (`DatasetWriter::open`): change the
/// string when, and only when, decoders would see another kind of stream.
pub fn depth_video_info(
    w: usize,
    h: usize,
    o: VideoOptions,
    q: &DepthQuantizer,
) -> serde_json::Value {
    serde_json::json!({
        "video.height": h,
        "video.width": w,
        "video.codec": "hevc",
        "video.pix_fmt": "gray12le",
        "video.fps": o.fps,
        "video.channels": 1,
        "has_audio": false,
        "video.g": o.gop,
        "video.encoder": "pointact still-camera hevc (intra dc + transquant bypass or skip, 32x32, lossless)",
        "video.depth_min": q.depth_min,
        "video.depth_max": q.depth_max,
        "video.shift": q.shift,
        "video.use_log": q.use_log,
        "is_depth_map": true,
        "depth_unit": "m"
    })
}

fn is_default(name: &str) -> bool {
    super::info::default_features()
        .iter()
        .any(|(n, _)| n == name)
}

/// The `stats/<feature>/<stat>` cells of an episode row, in lerobot's order.
fn stat_cells(name: &str, s: &FeatureStats) -> Vec<(String, Cell)> {
    let cell = |v: &[f64]| {
        if s.image {
            Cell::F64Cube(v.to_vec())
        } else {
            Cell::F64List(v.to_vec())
        }
    };
    let mut out: Vec<(String, Cell)> = [&s.min, &s.max, &s.mean, &s.std]
        .iter()
        .zip(STAT_KEYS)
        .map(|(stat, key)| (format!("stats/{name}/{key}"), cell(&stat.values)))
        .collect();
    out.push((
        format!("stats/{name}/count"),
        Cell::I64List(vec![s.count as i64]),
    ));
    for (key, q) in &s.quantiles {
        out.push((format!("stats/{name}/{key}"), cell(&q.values)));
    }
    out
}

/// `meta/info.json` of the dataset at `root`.
pub fn read_info(root: &Path) -> Result<Info, DatasetError> {
    let path = root.join("meta/info.json");
    let text = super::read_small_file(&path)?;
    serde_json::from_str(&text).map_err(|e| {
        DatasetError::Table(format!(
            "{} is not a LeRobot info.json: {e}",
            path.display()
        ))
    })
}

/// The task strings of `meta/tasks.parquet`, by task index.
pub fn read_tasks(root: &Path) -> Result<Vec<String>, DatasetError> {
    let path = root.join("meta/tasks.parquet");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let mut out: Vec<(i64, String)> = Vec::new();
    for b in tables::read_parquet(&path)? {
        let idx = tables::i64_values(&b, "task_index")?;
        let name = if b.column_by_name(tables::TASK_COLUMN).is_some() {
            tables::TASK_COLUMN
        } else {
            "task"
        };
        let names = tables::str_values(&b, name)?;
        out.extend(
            idx.into_iter()
                .zip(names.into_iter().map(Option::unwrap_or_default)),
        );
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, t)| t).collect())
}

/// `meta/stats.json` as lerobot reads it back (float64 arrays).
fn read_stats(root: &Path, info: &Info) -> Result<Vec<(String, FeatureStats)>, DatasetError> {
    let path = root.join("meta/stats.json");
    let text = super::read_small_file(&path)?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| DatasetError::Table(format!("{}: {e}", path.display())))?;
    let mut out = Vec::new();
    for (name, f) in &info.features.0 {
        if f.dtype == "string" {
            continue;
        }
        let v = json.get(name).ok_or_else(|| {
            DatasetError::Table(format!("{} has no statistics of `{name}`", path.display()))
        })?;
        let s = FeatureStats::from_json(v, f.is_video() || f.dtype == "image")
            .map_err(|e| DatasetError::Table(format!("{}: `{name}`: {e}", path.display())))?;
        out.push((name.clone(), s));
    }
    Ok(out)
}

/// The integer columns of every episode row, in episode order (enough to continue the files).
pub fn read_episode_rows(root: &Path) -> Result<Vec<EpisodeRow>, DatasetError> {
    let mut out = Vec::new();
    for path in tables::table_files(&root.join("meta/episodes"))? {
        for b in tables::read_parquet(&path)? {
            let schema = b.schema();
            let ints: Vec<(String, Vec<i64>)> = schema
                .fields()
                .iter()
                .filter(|f| *f.data_type() == arrow_schema::DataType::Int64)
                .map(|f| Ok((f.name().clone(), tables::i64_values(&b, f.name())?)))
                .collect::<Result<_, DatasetError>>()?;
            for r in 0..b.num_rows() {
                out.push(EpisodeRow(
                    ints.iter().map(|(n, v)| (n.clone(), v[r])).collect(),
                ));
            }
        }
    }
    Ok(out)
}

/// One episode row's integer columns by name.
#[derive(Debug, Clone)]
pub struct EpisodeRow(pub Vec<(String, i64)>);

impl EpisodeRow {
    /// The column `name`'s value.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}
