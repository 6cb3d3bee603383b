//! Runs on a physical arm (or an emulated one) kept as LeRobotDataset episodes (`run --xarm
//! --dataset`, `run --widowx --dataset`).
//!
//! In the simulator every frame is rendered from the world at an exact instant; on a robot the
//! instants come from two clocks that are not the same: the camera's frames arrive on the host
//! while the driver's joint states carry the controller's own stamps and reach the host only when
//! a step ends (`Event::Moved`). So the dataset's clock is the host's: frame `k` of the episode is
//! the instant `t0 + k / fps` after the first step started, and
//!
//! - its image is the camera frame captured nearest that instant, taken by a thread that reads the
//!   camera while a step runs (the camera is shared with the run: the run's own captures — the
//!   frame it plans from, the look after the plan — go through the same lock);
//! - its state is the driver's states, each step's stamps moved onto the host clock by the offset
//!   between the step's last state and the moment the step ended, interpolated linearly at that
//!   instant; its gripper target is the width the plan's running step commands.
//!
//! Only the plan's execution is recorded, from its first step's start to its last step's end:
//! while the pointer thinks (before the plan, between the attempts of the closed loop) and while
//! the camera looks at the result the arm stands still, so the instants that fall there are left
//! out, as the simulator leaves out the time it stands still. Frames wait in a spool file at the dataset's
//! size (a run at 10 fps keeps ~9 MB a second of 640×480 video, ~12 MB more with depth), not in
//! memory. A dataset that keeps depth takes each frame's depth with its colour: the same capture,
//! so the two videos show the same instant.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::{
    asked_json, branch_name, episode_extras, Captured, DatasetRecorder, Kept, Pictures, Sample,
};
use crate::camera::{Camera, CameraError, Frame};
use crate::dataset::DatasetError;
use crate::executor::{Branch, Event, Step};
use crate::kinematics::RobotModel;

/// Raw frames of one size in a temporary file (RGB bytes, or depth as little-endian float32
/// metres), read back in order by the coder; the file is removed when the spool is dropped.
pub struct FrameSpool {
    path: PathBuf,
    file: File,
    frame_bytes: usize,
    frames: usize,
}

impl FrameSpool {
    /// A new empty spool of `width`×`height` frames of `bytes_per_pixel` (3: RGB, 4: float32
    /// depth) in the system's temporary folder.
    pub fn new(width: u32, height: u32, bytes_per_pixel: usize) -> std::io::Result<Self> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("pointact-frames-{}-{n}.rgb", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(FrameSpool {
            path,
            file,
            frame_bytes: width as usize * height as usize * bytes_per_pixel,
            frames: 0,
        })
    }

    /// Frames held.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Appends one frame (`width * height * bytes_per_pixel` bytes).
    pub fn push(&mut self, rgb: &[u8]) -> std::io::Result<()> {
        if rgb.len() != self.frame_bytes {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a frame of {} bytes, not {}", rgb.len(), self.frame_bytes),
            ));
        }
        self.file
            .seek(SeekFrom::Start((self.frames * self.frame_bytes) as u64))?;
        self.file.write_all(rgb)?;
        self.frames += 1;
        Ok(())
    }

    /// Frame `index`.
    pub fn read(&mut self, index: usize) -> std::io::Result<Vec<u8>> {
        if index >= self.frames {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("frame {index} of {}", self.frames),
            ));
        }
        let mut rgb = vec![0; self.frame_bytes];
        self.file
            .seek(SeekFrom::Start((index * self.frame_bytes) as u64))?;
        self.file.read_exact(&mut rgb)?;
        Ok(rgb)
    }
}

impl Drop for FrameSpool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One camera frame at the dataset's size: its colour and, when the dataset keeps it, its depth
/// (little-endian float32 metres).
#[derive(Debug, Clone, PartialEq)]
struct Shot {
    rgb: Vec<u8>,
    depth: Option<Vec<u8>>,
}

/// A recorded run's frames: colour, and depth beside it when the dataset keeps depth (frame `i`
/// of both from the same capture).
pub(super) struct Spools {
    pub(super) rgb: FrameSpool,
    pub(super) depth: Option<FrameSpool>,
}

impl Spools {
    /// Empty spools of `width`×`height` frames, with a depth spool when `depth`.
    fn new((width, height): (u32, u32), depth: bool) -> std::io::Result<Self> {
        Ok(Spools {
            rgb: FrameSpool::new(width, height, 3)?,
            depth: depth
                .then(|| FrameSpool::new(width, height, 4))
                .transpose()?,
        })
    }

    /// Appends `shot` (its depth to the depth spool; a shot without depth when the spools keep
    /// it is refused, and nothing is kept).
    fn push(&mut self, shot: &Shot) -> std::io::Result<()> {
        match (&mut self.depth, &shot.depth) {
            (Some(spool), Some(metres)) => spool.push(metres)?,
            (None, None) => {}
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a frame's depth does not match the spools",
                ))
            }
        }
        self.rgb.push(&shot.rgb)
    }
}

/// A camera shared between the run (its captures) and the recording thread.
type SharedCamera = Arc<Mutex<Box<dyn Camera + Send>>>;

/// The run's side of a shared camera: each capture takes the camera's next frame.
pub struct TapCamera(SharedCamera);

impl Camera for TapCamera {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        lock(&self.0).capture()
    }
}

/// One joint state on the host clock (s since the tap started).
#[derive(Debug, Clone, PartialEq)]
struct HostState {
    t: f64,
    q: Vec<f64>,
    gripper_width: f64,
}

/// What the recording has seen so far (shared by the run's events and the camera thread).
struct Recording {
    /// A plan is executing: the camera thread takes frames.
    on: bool,
    /// The tap is finishing: the camera thread ends.
    stop: bool,
    /// The first step's start, s: instant `k` is `t0 + k / fps`.
    t0: Option<f64>,
    /// The next instant to fill.
    next: u64,
    /// When each step started (host clock) and its index in its plan.
    starts: Vec<(f64, i64)>,
    /// Steps in the plan executing.
    plan_len: usize,
    /// The frame before the newest one since recording resumed (its time and pixels), to choose
    /// the frame nearest each instant.
    previous: Option<(f64, Shot)>,
    /// The instants filled so far (host clock).
    ticks: Vec<f64>,
    /// The frames of `ticks`, one each (taken by `finish`).
    spool: Option<Spools>,
    states: Vec<HostState>,
    /// The finger gap each step of the current plan commands, m.
    targets: Vec<f64>,
    asked: Vec<serde_json::Value>,
    verdict: Option<(bool, String)>,
    /// The first camera or spool failure while recording: the episode is not kept.
    failed: Option<String>,
}

impl Recording {
    fn new(spool: Spools) -> Self {
        Recording {
            on: false,
            stop: false,
            t0: None,
            next: 0,
            starts: Vec::new(),
            plan_len: 0,
            previous: None,
            ticks: Vec::new(),
            spool: Some(spool),
            states: Vec::new(),
            targets: Vec::new(),
            asked: Vec::new(),
            verdict: None,
            failed: None,
        }
    }
}

struct Shared {
    camera: SharedCamera,
    recording: Mutex<Recording>,
    wake: Condvar,
    epoch: Instant,
    fps: f64,
    size: (u32, u32),
    /// Each frame's depth is kept too.
    depth: bool,
    gripper: crate::kinematics::GripperConfig,
}

/// A robot run being recorded: owns the camera (lent to the run as [`TapCamera`]) and the thread
/// that reads it while steps run.
pub struct RobotTap {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    model: Arc<RobotModel>,
}

/// A recorded run, ready for [`DatasetRecorder::keep_robot_run`].
pub struct RobotRun {
    model: Arc<RobotModel>,
    samples: Vec<Sample>,
    spool: Option<Spools>,
    points: serde_json::Value,
    /// The camera's look after the plan ran: verified, and its words.
    verdict: Option<(bool, String)>,
    failed: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl RobotTap {
    /// Starts recording `model`'s run seen by `camera`, at `fps` frames of `size` per second,
    /// each with its depth when `depth`.
    pub fn start(
        camera: Box<dyn Camera + Send>,
        model: Arc<RobotModel>,
        fps: u32,
        size: (u32, u32),
        depth: bool,
    ) -> Result<Self, DatasetError> {
        let spool = Spools::new(size, depth)
            .map_err(|e| DatasetError::Episode(format!("cannot make a frame spool: {e}")))?;
        let shared = Arc::new(Shared {
            camera: Arc::new(Mutex::new(camera)),
            recording: Mutex::new(Recording::new(spool)),
            wake: Condvar::new(),
            epoch: Instant::now(),
            fps: fps as f64,
            size,
            depth,
            gripper: model.config.gripper,
        });
        let inner = shared.clone();
        let thread = std::thread::Builder::new()
            .name("dataset-camera".into())
            .spawn(move || camera_loop(&inner))
            .map_err(|e| DatasetError::Episode(format!("cannot start the camera thread: {e}")))?;
        Ok(RobotTap {
            shared,
            thread: Some(thread),
            model,
        })
    }

    /// The camera for the run itself.
    pub fn camera(&self) -> TapCamera {
        TapCamera(self.shared.camera.clone())
    }

    /// Follows the run: call with every event, in order.
    pub fn observe(&self, event: &Event<'_>) {
        let s = &self.shared;
        let now = s.epoch.elapsed().as_secs_f64();
        let mut r = lock(&s.recording);
        match event {
            Event::Planned(plan) => {
                r.plan_len = plan.steps.len();
                r.targets = plan
                    .steps
                    .iter()
                    .map(|step| match step {
                        Step::Move {
                            gripper_opening, ..
                        } => s.gripper.width_for_opening(*gripper_opening),
                        Step::Gripper { width, .. } => *width,
                    })
                    .collect();
            }
            Event::Robot { state, .. } => r.states.push(HostState {
                t: now,
                q: state.q.clone(),
                gripper_width: state.gripper_width,
            }),
            Event::Step { index, .. } => {
                r.starts.push((now, *index as i64));
                if !r.on {
                    let t0 = *r.t0.get_or_insert(now);
                    // Instants passed while nothing ran are left out.
                    let first = ((now - t0) * s.fps).ceil().max(0.0) as u64;
                    r.next = r.next.max(first);
                    r.previous = None;
                    r.on = true;
                    s.wake.notify_all();
                }
            }
            Event::Moved { index, states } => {
                if index + 1 >= r.plan_len {
                    r.on = false;
                }
                // The step's stamps onto the host clock: its last state is the newest the driver
                // had when the step ended, which is now.
                let offset = states.last().and_then(|l| l.stamp_s).map(|t| now - t);
                for st in states.iter() {
                    let t = match (st.stamp_s, offset) {
                        (Some(t), Some(o)) => t + o,
                        _ => now,
                    };
                    r.states.push(HostState {
                        t,
                        q: st.q.clone(),
                        gripper_width: st.gripper_width,
                    });
                }
            }
            Event::Asked {
                ability,
                query,
                pointing,
            } => r.asked.push(asked_json(*ability, query, pointing)),
            Event::Verified(v) => {
                r.on = false;
                r.verdict = Some((v.verified, v.line()));
            }
            Event::Retry { .. } => r.on = false,
            _ => {}
        }
    }

    /// Stops the camera thread and pairs every recorded instant with the arm's state then.
    pub fn finish(mut self) -> RobotRun {
        {
            let mut r = lock(&self.shared.recording);
            r.stop = true;
            r.on = false;
            self.shared.wake.notify_all();
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                lock(&self.shared.recording)
                    .failed
                    .get_or_insert("the camera thread panicked".into());
            }
        }
        let mut r = lock(&self.shared.recording);
        let mut states = std::mem::take(&mut r.states);
        // Stamps moved per step can overlap a little at the seams: order by time.
        states.sort_by(|a, b| a.t.total_cmp(&b.t));
        let samples = r
            .ticks
            .iter()
            .map(|&t| {
                let (q, gripper_width) = state_at(&states, t);
                // The step that had started last at `t`.
                let plan_step = r
                    .starts
                    .iter()
                    .take_while(|(start, _)| *start <= t)
                    .last()
                    .map_or(-1, |&(_, i)| i);
                let gripper_target = usize::try_from(plan_step)
                    .ok()
                    .and_then(|i| r.targets.get(i).copied())
                    .unwrap_or(gripper_width);
                Sample {
                    q,
                    gripper_width,
                    gripper_target,
                    plan_step,
                }
            })
            .collect::<Vec<_>>();
        let failed = r.failed.take().or_else(|| {
            states
                .is_empty()
                .then(|| "the arm reported no state".to_string())
        });
        let spool = r.spool.take();
        RobotRun {
            model: self.model.clone(),
            samples,
            spool,
            points: serde_json::Value::Array(std::mem::take(&mut r.asked)),
            verdict: r.verdict.take(),
            failed,
        }
    }
}

impl Drop for RobotTap {
    fn drop(&mut self) {
        {
            let mut r = lock(&self.shared.recording);
            r.stop = true;
            self.shared.wake.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The joints and finger gap at host time `t`: linear between the states either side, the
/// first or last state beyond them.
fn state_at(states: &[HostState], t: f64) -> (Vec<f64>, f64) {
    let after = states.partition_point(|s| s.t <= t);
    match (after.checked_sub(1).map(|i| &states[i]), states.get(after)) {
        (Some(a), Some(b)) if b.t > a.t => {
            let w = (t - a.t) / (b.t - a.t);
            let q = a.q.iter().zip(&b.q).map(|(x, y)| x + w * (y - x)).collect();
            (q, a.gripper_width + w * (b.gripper_width - a.gripper_width))
        }
        (Some(s), _) | (None, Some(s)) => (s.q.clone(), s.gripper_width),
        (None, None) => (Vec::new(), 0.0),
    }
}

/// Reads the camera while steps run, filling every instant that passed with the frame nearest it.
fn camera_loop(s: &Shared) {
    let period = 1.0 / s.fps;
    // How long a capture takes, to ask for the next frame just in time for the next instant.
    let mut capture_s = 0.0_f64;
    loop {
        let wait_until = {
            let mut r = lock(&s.recording);
            while !r.on && !r.stop {
                r = s.wake.wait(r).unwrap_or_else(|p| p.into_inner());
            }
            if r.stop {
                return;
            }
            r.t0.map(|t0| t0 + r.next as f64 * period - capture_s)
        };
        // Not faster than the dataset needs: a frame server renders every frame it is asked for.
        if let Some(at) = wait_until {
            let ahead = at - s.epoch.elapsed().as_secs_f64();
            if ahead > 0.0 {
                std::thread::sleep(std::time::Duration::from_secs_f64(ahead.min(period)));
            }
        }
        let asked = s.epoch.elapsed().as_secs_f64();
        let frame = lock(&s.camera).capture();
        let t = s.epoch.elapsed().as_secs_f64();
        capture_s = 0.5 * capture_s + 0.5 * (t - asked);
        let mut r = lock(&s.recording);
        if !r.on {
            continue; // the plan ended while the camera was read
        }
        let shot = match frame {
            Ok(f) => dataset_pixels(&f, s.size).and_then(|rgb| {
                let depth = s.depth.then(|| dataset_depth(&f, s.size)).transpose()?;
                Ok(Shot { rgb, depth })
            }),
            Err(e) => Err(format!("the camera failed during a step: {e}")),
        };
        if let Err(e) = shot.and_then(|shot| fill(&mut r, t, shot, period)) {
            r.failed.get_or_insert(e);
            r.stop = true;
            return;
        }
    }
}

/// Gives every instant up to `t` a frame: the one captured at `t` or the one before, whichever is
/// nearer.
fn fill(r: &mut Recording, t: f64, shot: Shot, period: f64) -> Result<(), String> {
    let Some(t0) = r.t0 else {
        return Ok(());
    };
    let Some(spool) = r.spool.as_mut() else {
        return Ok(());
    };
    loop {
        let at = t0 + r.next as f64 * period;
        if at > t {
            break;
        }
        let pixels = match &r.previous {
            Some((tp, p)) if at - tp < t - at => p,
            _ => &shot,
        };
        spool
            .push(pixels)
            .map_err(|e| format!("cannot keep a frame: {e}"))?;
        r.ticks.push(at);
        r.next += 1;
    }
    r.previous = Some((t, shot));
    Ok(())
}

/// A frame's colour image at the dataset's size, RGB bytes.
fn dataset_pixels(frame: &Frame, (width, height): (u32, u32)) -> Result<Vec<u8>, String> {
    let rgb = &frame.rgb;
    if rgb.width() == 0 || rgb.height() == 0 {
        return Err("the camera sent an empty frame".into());
    }
    if rgb.dimensions() == (width, height) {
        return Ok(rgb.as_raw().clone());
    }
    Ok(
        image::imageops::resize(rgb, width, height, image::imageops::FilterType::Triangle)
            .into_raw(),
    )
}

/// A frame's depth at the dataset's size, little-endian float32 metres. Resized by taking the
/// nearest pixel, never by blending: an average of the two sides of an edge is a depth that no
/// surface has (a "flying pixel"), and 0 (no data) would pull its neighbours towards the camera.
fn dataset_depth(frame: &Frame, (width, height): (u32, u32)) -> Result<Vec<u8>, String> {
    let d = &frame.depth;
    if d.width == 0 || d.height == 0 || d.data.len() != d.width * d.height {
        return Err(format!(
            "the camera sent a depth image of {}×{} with {} values",
            d.width,
            d.height,
            d.data.len()
        ));
    }
    let (w, h) = (width as usize, height as usize);
    let mut out = Vec::with_capacity(w * h * 4);
    for y in 0..h {
        let sy = ((2 * y + 1) * d.height / (2 * h)).min(d.height - 1);
        for x in 0..w {
            let sx = ((2 * x + 1) * d.width / (2 * w)).min(d.width - 1);
            out.extend_from_slice(&d.data[sy * d.width + sx].to_le_bytes());
        }
    }
    Ok(out)
}

impl DatasetRecorder {
    /// The size of the dataset's frames.
    pub fn frame_size(&self) -> (u32, u32) {
        self.size
    }

    /// The frames per second of the dataset.
    pub fn fps(&self) -> u32 {
        self.fps
    }

    /// Whether the dataset keeps the camera's depth beside its colour.
    pub fn keeps_depth(&self) -> bool {
        self.depth
    }

    /// Appends a recorded robot run of `instruction`. `outcome` is how the run ended: `Ok` when
    /// every step executed, else the error's words. The episode's success is the camera's look
    /// after the plan (a robot has no judge), false when the run failed or was not checked.
    pub fn keep_robot_run(
        &mut self,
        run: RobotRun,
        instruction: &str,
        branch: Branch,
        outcome: Result<(), String>,
    ) -> Result<Kept, DatasetError> {
        let RobotRun {
            model,
            samples,
            spool,
            points,
            verdict,
            failed,
        } = run;
        if let Some(why) = failed {
            return Err(DatasetError::Episode(format!(
                "the run was not recorded: {why}"
            )));
        }
        let Some(spool) = spool else {
            return Err(DatasetError::Episode("the run's frames are gone".into()));
        };
        if spool.depth.is_some() != self.depth {
            return Err(DatasetError::Episode(format!(
                "the run was recorded {} depth, the dataset keeps {}",
                if spool.depth.is_some() {
                    "with"
                } else {
                    "without"
                },
                if self.depth { "depth" } else { "colour only" }
            )));
        }
        let (success, detail) = match (outcome, verdict) {
            (Err(e), _) => (false, format!("the run failed: {e}")),
            (Ok(()), Some((verified, line))) => (verified, line),
            (Ok(()), None) => (false, "every step executed; not checked by camera".into()),
        };
        // A robot run has no task of the suite and no seed.
        let extras = episode_extras("robot", -1, branch_name(branch), success, &detail, points);
        let moved = !samples.is_empty();
        let captured = Captured {
            model,
            samples,
            pictures: Pictures::Spooled(spool),
            instruction: instruction.to_string(),
            extras,
        };
        self.keep(success, moved, captured)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(t: f64, q: f64, width: f64) -> HostState {
        HostState {
            t,
            q: vec![q, -q],
            gripper_width: width,
        }
    }

    #[test]
    fn states_are_interpolated_between_and_held_beyond() {
        let states = [state(1.0, 0.0, 0.08), state(3.0, 2.0, 0.02)];
        let (q, w) = state_at(&states, 2.5);
        assert_eq!(q, vec![1.5, -1.5]);
        assert!((w - 0.035).abs() < 1e-12, "{w}");
        assert_eq!(state_at(&states, 0.0), (vec![0.0, -0.0], 0.08));
        assert_eq!(state_at(&states, 9.0), (vec![2.0, -2.0], 0.02));
        // Two states at one instant: the later one from then on.
        let states = [state(1.0, 0.0, 0.08), state(1.0, 1.0, 0.08)];
        assert_eq!(state_at(&states, 1.0).0, vec![1.0, -1.0]);
    }

    /// Instants every 0.1 s from 0: each gets the frame captured nearest it, a slow camera's
    /// frames repeat, and nothing is filled ahead of the newest frame.
    #[test]
    fn every_instant_gets_the_nearest_frame() {
        let mut r = Recording::new(Spools::new((1, 1), false).unwrap());
        r.t0 = Some(0.0);
        let px = |v: u8| Shot {
            rgb: vec![v, v, v],
            depth: None,
        };
        fill(&mut r, 0.03, px(1), 0.1).unwrap();
        assert_eq!(r.ticks, vec![0.0]);
        // 0.1 is nearer 0.03 than 0.26; 0.2 nearer 0.26.
        fill(&mut r, 0.26, px(2), 0.1).unwrap();
        fill(&mut r, 0.29, px(3), 0.1).unwrap();
        // A camera that stalled: 0.3 and 0.4 take the frame of 0.29, 0.5 and 0.6 the late one.
        fill(&mut r, 0.61, px(4), 0.1).unwrap();
        let spool = &mut r.spool.as_mut().unwrap().rgb;
        let got: Vec<u8> = (0..spool.frames())
            .map(|i| spool.read(i).unwrap()[0])
            .collect();
        assert_eq!(got, vec![1, 1, 2, 3, 3, 4, 4]);
        assert_eq!(r.ticks.len(), 7);
        assert!((r.ticks[6] - 0.6).abs() < 1e-12);
    }

    /// Depth at another size takes the nearest pixel: no value that was not in the image (a
    /// blend of 0.5 and 2 m, or of a hole's 0 and a surface), NaN kept as NaN for the quantiser.
    #[test]
    fn depth_is_resized_to_the_nearest_pixel() {
        use crate::geometry::{DepthImage, Intrinsics};
        // 4×2, left half near, right half far, one hole and one NaN.
        let data = vec![0.5, 0.0, 2.0, 2.0, 0.5, 0.5, f32::NAN, 2.0];
        let frame = Frame {
            rgb: image::RgbImage::new(4, 2),
            depth: DepthImage::new(4, 2, data.clone()).unwrap(),
            intrinsics: Intrinsics::pinhole(4, 2, 2.0, 2.0, 2.0, 1.0),
            base_from_camera: Default::default(),
            stamp_s: 0.0,
        };
        let floats = |b: Vec<u8>| -> Vec<f32> {
            b.chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        // Same size: the bytes as they are.
        let same = floats(dataset_depth(&frame, (4, 2)).unwrap());
        assert_eq!(same[..6], data[..6]);
        assert!(same[6].is_nan());
        // Half the width: pixel centres 0.5 and 2.5 of each row → source columns 1 and 3
        // (the centre of output pixel x lies at (2x + 1) / 2 · 4/2).
        assert_eq!(
            floats(dataset_depth(&frame, (2, 2)).unwrap()),
            vec![0.0, 2.0, 0.5, 2.0]
        );
        // Twice the size: every pixel repeated, nothing new.
        let up = floats(dataset_depth(&frame, (8, 4)).unwrap());
        assert_eq!(up.len(), 32);
        assert!(up.iter().all(|v| v.is_nan() || [0.0, 0.5, 2.0].contains(v)));
        assert_eq!(up[..8], [0.5, 0.5, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0]);
        // A depth image whose buffer is not its size is an error, not a guess.
        let mut bad = frame.clone();
        bad.depth.data.pop();
        assert!(dataset_depth(&bad, (4, 2)).is_err());
    }

    #[test]
    fn a_spool_keeps_frames_of_its_size_and_removes_its_file() {
        let mut spool = FrameSpool::new(2, 1, 3).unwrap();
        let path = spool.path.clone();
        spool.push(&[1, 2, 3, 4, 5, 6]).unwrap();
        spool.push(&[7; 6]).unwrap();
        assert!(spool.push(&[0; 5]).is_err(), "a frame of another size");
        assert_eq!(spool.frames(), 2);
        assert_eq!(spool.read(1).unwrap(), vec![7; 6]);
        assert_eq!(spool.read(0).unwrap(), vec![1, 2, 3, 4, 5, 6]);
        assert!(spool.read(2).is_err());
        assert!(path.exists());
        drop(spool);
        assert!(!path.exists(), "the spool file was left behind");
    }
}
