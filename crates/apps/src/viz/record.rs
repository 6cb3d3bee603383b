//! The rerun side of [`Viz`]: turns frames, answers, plans and robot states into rerun archetypes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use k::nalgebra::{Isometry3, Vector3};
use rerun::{
    Arrows2D, Arrows3D, Boxes3D, Capsules3D, ChannelDatatype, Clear, Color, Cylinders3D,
    DepthImage, Ellipsoids3D, FillMode, Image, LineStrips2D, LineStrips3D, Pinhole, Points2D,
    Points3D, Quaternion, RecordingStream, Scalars, TextDocument, TextLog, TextLogLevel,
    Transform3D, ViewCoordinates,
};

use super::{paths, timelines, Sink, VizError};
use crate::camera::{Frame, RgbImage};
use crate::executor::Event;
use crate::executor::{Plan, Step};
use crate::geometry::{depth_to_cloud, CloudOptions, Shape};
use crate::kinematics::RobotModel;
use crate::pointing::{Ability, Pointing};
use crate::robot::JointState;

/// Every `CLOUD_STRIDE`-th pixel in both directions becomes a cloud point (640×480 → ~34 k points).
const CLOUD_STRIDE: usize = 3;
/// Link poses are logged at most this often (s of the robot's clock); joint scalars at every state.
const POSE_PERIOD_S: f64 = 1.0 / 30.0;
/// Planned joint positions are sampled this often (s).
const PLAN_SAMPLE_S: f64 = 0.05;
/// Gap between two episodes on the shared clock of an evaluation (s).
const EPISODE_GAP_S: f64 = 1.0;
/// How long [`Viz::finish`] waits for a viewer to take the recording. rerun's own flush waits
/// forever while a gRPC connection keeps being retried (a viewer that is not running).
const VIEWER_FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A rerun recording of runs. Logging errors never stop a run: the first one is kept and returned
/// by [`Viz::finish`].
pub struct Viz {
    rec: RecordingStream,
    /// Added to every device stamp, so that the episodes of an evaluation follow each other.
    offset_s: f64,
    /// The latest device stamp of this episode (s).
    now_s: f64,
    /// The highest `sim_time` logged so far (s).
    latest_s: f64,
    episode: Option<i64>,
    robot: Option<Arc<RobotModel>>,
    /// Robots whose link geometry is logged (static, once per recording).
    drawn: HashSet<String>,
    /// Stamp of the last logged link poses.
    last_pose_s: Option<f64>,
    /// Which abilities the grasp and the place came from, for the 3D labels.
    grasp_from: Option<Ability>,
    place_from: Option<Ability>,
    /// Wall clock at the previous event, for the stage timings.
    last_event: Instant,
    error: Option<String>,
    /// The viewer's address when streaming (`spawn`, `connect`); `None` for a file.
    viewer: Option<String>,
}

impl Viz {
    /// Opens a recording named `app_id` on `sink`.
    pub fn open(app_id: &'static str, sink: &Sink) -> Result<Viz, VizError> {
        let builder = rerun::RecordingStreamBuilder::new(app_id);
        let rec = match sink {
            Sink::Save(path) => builder.save(path).map_err(|e| VizError::Open {
                sink: format!("save:{}", path.display()),
                detail: e.to_string(),
            })?,
            Sink::Spawn => builder
                .spawn_opts(&rerun::SpawnOptions {
                    // The viewer's own default is every interface (0.0.0.0).
                    extra_args: vec!["--bind".into(), "127.0.0.1".into()],
                    ..Default::default()
                })
                .map_err(|e| VizError::Spawn(e.to_string()))?,
            Sink::Connect(url) => {
                super::probe_viewer(url, std::time::Duration::from_secs(2)).map_err(|detail| {
                    VizError::Open {
                        sink: format!("connect:{url}"),
                        detail: format!(
                            "{detail}; start a viewer (`rerun`, version 0.36.3) or use --rerun spawn or save:FILE.rrd"
                        ),
                    }
                })?;
                builder
                    .connect_grpc_opts(url.clone())
                    .map_err(|e| VizError::Open {
                        sink: format!("connect:{url}"),
                        detail: e.to_string(),
                    })?
            }
        };
        let mut viz = Viz {
            rec,
            offset_s: 0.0,
            now_s: 0.0,
            latest_s: 0.0,
            episode: None,
            robot: None,
            drawn: HashSet::new(),
            last_pose_s: None,
            grasp_from: None,
            place_from: None,
            last_event: Instant::now(),
            error: None,
            viewer: match sink {
                Sink::Save(_) => None,
                Sink::Spawn => Some(super::DEFAULT_CONNECT_URL.to_string()),
                Sink::Connect(url) => Some(url.clone()),
            },
        };
        viz.log_static(paths::WORLD, &ViewCoordinates::RIGHT_HAND_Z_UP());
        Ok(viz)
    }

    /// Logs one executor event (the CLI and the evaluator pass every event here).
    pub fn on_event(&mut self, event: &Event<'_>) {
        let stage_s = self.last_event.elapsed().as_secs_f64();
        self.last_event = Instant::now();
        match event {
            Event::Instruction(text) => {
                self.grasp_from = None;
                self.place_from = None;
                self.set_clock(None);
                self.log_line(TextLogLevel::INFO, &format!("instruct  {text}"));
            }
            Event::Captured(frame) => {
                self.set_clock(Some(frame.stamp_s));
                self.log_frame(frame);
                self.log_timing("capture", stage_s);
            }
            Event::Robot { model, state } => {
                self.set_clock(state.stamp_s);
                self.log_robot(model);
                self.log_states(std::slice::from_ref(*state));
            }
            Event::Asked {
                ability,
                query,
                pointing,
            } => {
                self.set_clock(None);
                self.log_answer(*ability, query, pointing);
                self.log_timing(&format!("pointer/{}", ability.as_str()), stage_s);
            }
            Event::TableHeight(z) => {
                self.set_clock(None);
                self.log_table(*z);
                self.log_line(TextLogLevel::DEBUG, &format!("table     z = {z:.4} m"));
            }
            Event::Obstacles { count } => {
                self.set_clock(None);
                self.log_timing("obstacles", stage_s);
                self.log_line(
                    TextLogLevel::DEBUG,
                    &format!("obstacles {count} occupied voxels on the table"),
                );
            }
            Event::Corrected(c) => {
                self.set_clock(None);
                self.log(
                    paths::correction(c.what),
                    &Arrows2D::from_vectors([[
                        (c.to_px[0] - c.from_px[0]) as f32,
                        (c.to_px[1] - c.from_px[1]) as f32,
                    ]])
                    .with_origins([[c.from_px[0] as f32, c.from_px[1] as f32]])
                    .with_labels([format!(
                        "{} {:.1} cm",
                        c.what,
                        100.0 * c.moved_m
                    )]),
                );
                self.log_line(
                    TextLogLevel::INFO,
                    &crate::executor::correct::correction_line(c),
                );
            }
            Event::Planned(plan) => {
                self.set_clock(None);
                self.log_timing("plan", stage_s);
                self.log_plan(plan);
            }
            Event::Checked { steps } => {
                self.set_clock(None);
                self.log_timing("safety_gate", stage_s);
                self.log_line(
                    TextLogLevel::INFO,
                    &format!("safety    all {steps} steps passed the gate"),
                );
            }
            Event::DryRun => {
                self.set_clock(None);
                self.log_line(TextLogLevel::INFO, "dry run   nothing will move");
            }
            Event::Step { index, label } => {
                self.set_clock(None);
                self.log_line(TextLogLevel::INFO, &format!("execute {index:>2} {label}"));
            }
            Event::Moved { states, .. } => {
                self.log_states(states);
                self.log_timing("execute", stage_s);
            }
            Event::Retry { why, attempt } => {
                self.set_clock(None);
                self.log_line(
                    TextLogLevel::WARN,
                    &format!("retry     attempt {attempt}: {why}"),
                );
            }
            Event::Verified(v) => {
                self.set_clock(None);
                let level = if v.verified {
                    TextLogLevel::INFO
                } else {
                    TextLogLevel::WARN
                };
                self.log_line(level, &format!("verify    {}", v.line()));
            }
            Event::GraspHeld { width } => {
                self.set_clock(None);
                self.log_line(
                    TextLogLevel::INFO,
                    &format!("grasp     held, fingers at {:.1} mm", width * 1e3),
                );
            }
        }
    }

    /// Starts the next episode of an evaluation: a fresh `episode` number, the clock moved past
    /// everything logged so far, and the previous episode's answers, targets and plan cleared.
    pub fn begin_episode(&mut self, label: &str) {
        self.episode = Some(self.episode.map_or(0, |e| e + 1));
        self.offset_s = if self.latest_s > 0.0 {
            self.latest_s + EPISODE_GAP_S
        } else {
            0.0
        };
        self.now_s = 0.0;
        self.last_pose_s = None;
        self.set_clock(None);
        for path in [
            "world/camera/image/points",
            "world/camera/image/trace",
            "world/targets",
            "world/plan",
        ] {
            self.log(path, &Clear::recursive());
        }
        self.log_line(TextLogLevel::INFO, &format!("episode   {label}"));
    }

    /// The end of a run or an episode: the judge's words, and 1/0 on `eval/success`.
    pub fn log_outcome(&mut self, success: bool, detail: &str) {
        self.set_clock(None);
        let (level, word) = if success {
            (TextLogLevel::INFO, "SUCCESS")
        } else {
            (TextLogLevel::WARN, "FAILURE")
        };
        self.log_line(level, &format!("outcome   {word}: {detail}"));
        self.log(
            paths::EVAL_SUCCESS,
            &Scalars::single(if success { 1.0 } else { 0.0 }),
        );
    }

    /// A recorded dataset episode (`pointact dataset view`) on the `sim_time` timeline at its
    /// frame times: each video as the MP4 itself with a frame reference per frame (the viewer
    /// decodes it), the points the pointer answered before the arm moved drawn over it, the state
    /// and plan step as scalars, the task and the judge's words as log lines.
    pub fn log_dataset_episode(&mut self, ep: &crate::dataset::read::EpisodeFrames) {
        self.set_clock(Some(0.0));
        self.log_line(
            TextLogLevel::INFO,
            &format!("episode   {}: {}", ep.index, ep.task),
        );
        if let (Some(ok), Some(detail)) = (ep.success, &ep.detail) {
            let word = if ok { "SUCCESS" } else { "FAILURE" };
            self.log_line(TextLogLevel::INFO, &format!("outcome   {word}: {detail}"));
        }
        let fps = f64::from(ep.fps.max(1));
        for (key, path, from) in &ep.videos {
            match rerun::AssetVideo::from_file_path(path) {
                Ok(asset) => self.log_static(paths::dataset_video(key), &asset),
                Err(e) => self.note_error(format!("{}: {e}", path.display())),
            }
            let asked = ep.points.as_ref().and_then(|p| p.as_array());
            for q in asked.into_iter().flatten() {
                let ability = q["ability"].as_str().unwrap_or("points").to_lowercase();
                let points: Vec<(f32, f32)> = q["points_px"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| Some((p[0].as_f64()? as f32, p[1].as_f64()? as f32)))
                    .collect();
                let label = q["query"].as_str().unwrap_or_default().to_string();
                self.log_static(
                    paths::dataset_points(key, &ability),
                    &Points2D::new(points).with_labels([label]).with_radii([4.0]),
                );
            }
            for i in 0..ep.length {
                let t = i as f64 / fps;
                self.set_clock(Some(t));
                self.log(
                    paths::dataset_video(key),
                    &rerun::VideoFrameReference::new(rerun::components::VideoTimestamp::from_secs(
                        from + t,
                    )),
                );
            }
        }
        let width = ep.state_names.len();
        for i in 0..ep.length {
            self.set_clock(Some(i as f64 / fps));
            for (j, name) in ep.state_names.iter().enumerate() {
                if let Some(&v) = ep.state.get(i * width + j) {
                    self.log(paths::dataset_state(name), &Scalars::single(f64::from(v)));
                }
            }
            if let Some(step) = ep.plan_step.as_ref().and_then(|s| s.get(i)) {
                self.log(paths::DATASET_PLAN_STEP, &Scalars::single(*step as f64));
            }
        }
    }

    /// A colour image without depth or camera model (`pointact point`).
    pub fn log_image(&mut self, rgb: &RgbImage) {
        self.log(
            paths::RGB,
            &Image::from_rgb24(rgb.as_raw().clone(), [rgb.width(), rgb.height()]),
        );
    }

    /// A key frame of `pointact ask` at its time in the video (`stamp_s`), with what the vision
    /// model said about it: the image, and the description as a text log line at the same time.
    pub fn log_keyframe(&mut self, index: usize, stamp_s: f64, rgb: &RgbImage, description: &str) {
        self.set_clock(Some(stamp_s));
        self.log_image(rgb);
        self.log_line(
            TextLogLevel::INFO,
            &format!("keyframe  {index}: {description}"),
        );
    }

    /// The reasoning model's reply to `pointact ask`: the question, the think and the answer.
    pub fn log_reasoning(&mut self, question: &str, think: &str, answer: &str) {
        self.log_line(TextLogLevel::INFO, &format!("question  {question}"));
        self.log_line(TextLogLevel::INFO, &format!("think     {think}"));
        self.log_line(TextLogLevel::INFO, &format!("answer    {answer}"));
    }

    /// One answer: its points on the image, labelled, the VTG trace as a line, and the query with
    /// the model's reasoning as text.
    pub fn log_answer(&mut self, ability: Ability, query: &str, pointing: &Pointing) {
        let name = ability.as_str();
        let upper = name.to_uppercase();
        let pts: Vec<[f32; 2]> = pointing
            .points_px()
            .iter()
            .map(|p| [p[0] as f32, p[1] as f32])
            .collect();
        let labels: Vec<String> = (1..=pts.len()).map(|i| format!("{upper} {i}")).collect();
        self.log(
            paths::points_2d(name),
            &Points2D::new(pts.clone())
                .with_radii([4.0])
                .with_colors([ability_color(ability)])
                .with_labels(labels),
        );
        if ability == Ability::Vtg {
            self.log(
                paths::trace_2d(name),
                &LineStrips2D::new([pts]).with_colors([ability_color(ability)]),
            );
        }
        let mut doc = format!("**{upper}** `{query}`\n\n");
        match &pointing.answer.reasoning {
            Some(r) => doc.push_str(&format!("**Reasoning.** {r}\n\n")),
            None => doc.push_str("*(no reasoning in the reply)*\n\n"),
        }
        doc.push_str(&format!(
            "**Reply.**\n\n```\n{}\n```\n",
            pointing.answer.raw
        ));
        self.log(paths::pointing(name), &TextDocument::from_markdown(doc));
        let pts: Vec<String> = pointing
            .points_px()
            .iter()
            .map(|p| format!("({:.0}, {:.0})", p[0], p[1]))
            .collect();
        self.log_line(
            TextLogLevel::INFO,
            &format!("{upper:<9} `{query}` -> {}", pts.join(" ")),
        );
        if let Some(r) = &pointing.answer.reasoning {
            self.log_line(TextLogLevel::DEBUG, &format!("          think: {r}"));
        }
        match ability {
            Ability::Reg | Ability::Ofg => self.grasp_from = Some(ability),
            Ability::Rrg => self.place_from = Some(ability),
            Ability::Vtg => {}
        }
    }

    /// Seconds spent in a stage, as a scalar series `timings/<stage>`.
    pub fn log_timing(&mut self, stage: &str, seconds: f64) {
        self.log(paths::timing(stage), &Scalars::single(seconds));
    }

    /// Training metrics at update `step` (on the `train_step` timeline), each under
    /// `train/<name>`; non-finite values are left out (a plot cannot show them).
    pub fn log_training(&mut self, step: u64, metrics: &[(String, f64)]) {
        self.rec
            .set_time_sequence(timelines::TRAIN_STEP, step as i64);
        for (name, v) in metrics.iter().filter(|m| m.1.is_finite()) {
            self.log(paths::training(name), &Scalars::single(*v));
        }
    }

    /// Flushes everything to the sink; returns the first logging error of the run, if any.
    pub fn finish(mut self) -> Result<(), VizError> {
        let flushed = self.close();
        if let Some(e) = self.error.take() {
            return Err(VizError::Log(e));
        }
        flushed
    }

    /// Flushes and releases the stream. A viewer gets `VIEWER_FLUSH_TIMEOUT`; if it has not taken
    /// everything by then, the stream is leaked rather than dropped, because its destructor
    /// flushes again without a time limit and would hang the process on a viewer that is gone.
    fn close(&mut self) -> Result<(), VizError> {
        let rec = std::mem::replace(&mut self.rec, RecordingStream::disabled());
        if !rec.is_enabled() {
            return Ok(()); // already closed
        }
        match &self.viewer {
            None => rec
                .flush_blocking()
                .map_err(|e| VizError::Log(e.to_string())),
            Some(url) => match rec.flush_with_timeout(VIEWER_FLUSH_TIMEOUT) {
                Ok(()) => Ok(()),
                Err(e) => {
                    std::mem::forget(rec);
                    Err(VizError::Log(format!(
                        "the viewer at {url} did not take the recording within {} s ({e}); is \
                         `rerun` running there? Start one with `rerun`, or use --rerun save:FILE.rrd",
                        VIEWER_FLUSH_TIMEOUT.as_secs()
                    )))
                }
            },
        }
    }

    // ---- the pieces ----

    /// The camera: extrinsics, pinhole, colour, depth, and the cloud in the base frame.
    fn log_frame(&mut self, frame: &Frame) {
        let k = &frame.intrinsics;
        let (w, h) = (frame.rgb.width(), frame.rgb.height());
        self.log(paths::CAMERA, &transform(&frame.base_from_camera));
        self.log(
            paths::PINHOLE,
            &Pinhole::from_focal_length_and_resolution(
                [k.fx as f32, k.fy as f32],
                [w as f32, h as f32],
            )
            .with_principal_point([k.cx as f32, k.cy as f32])
            .with_camera_xyz(rerun::components::ViewCoordinates::RDF)
            .with_image_plane_distance(0.15),
        );
        self.log(
            paths::RGB,
            &Image::from_rgb24(frame.rgb.as_raw().clone(), [w, h]),
        );
        // Millimetres in u16 (what a RealSense D4xx delivers), 0 = no data.
        let depth: Vec<u8> = frame
            .depth
            .data
            .iter()
            .flat_map(|&d| {
                let mm = if crate::geometry::DepthImage::is_valid(d) {
                    (f64::from(d) * 1000.0).round().clamp(0.0, 65535.0) as u16
                } else {
                    0
                };
                mm.to_le_bytes()
            })
            .collect();
        self.log(
            paths::DEPTH,
            &DepthImage::from_data_type_and_bytes(depth, [w, h], ChannelDatatype::U16)
                .with_meter(1000.0),
        );
        let opts = CloudOptions {
            stride: CLOUD_STRIDE,
            ..CloudOptions::default()
        };
        match depth_to_cloud(
            &frame.depth,
            &frame.intrinsics,
            &frame.base_from_camera,
            &opts,
        ) {
            Ok(cloud) => {
                let rgb = frame.rgb.as_raw();
                let colors: Vec<Color> = cloud
                    .pixels
                    .iter()
                    .map(|&i| {
                        let i = 3 * i as usize;
                        match rgb.get(i..i + 3) {
                            Some(c) => Color::from_rgb(c[0], c[1], c[2]),
                            None => Color::from_rgb(255, 0, 255),
                        }
                    })
                    .collect();
                self.log(
                    paths::CLOUD,
                    &Points3D::new(cloud.points)
                        .with_colors(colors)
                        .with_radii([0.002]),
                );
            }
            Err(e) => self.note_error(format!("point cloud: {e}")),
        }
    }

    /// The table plane as a thin box under the workspace.
    fn log_table(&mut self, z: f64) {
        let Some(model) = &self.robot else { return };
        let ws = &model.config.workspace;
        let cx = 0.5 * (ws.min[0] + ws.max[0]);
        let cy = 0.5 * (ws.min[1] + ws.max[1]);
        let hx = 0.5 * (ws.max[0] - ws.min[0]) + 0.1;
        let hy = 0.5 * (ws.max[1] - ws.min[1]) + 0.1;
        self.log(
            paths::TABLE,
            &Boxes3D::from_centers_and_half_sizes(
                [[cx as f32, cy as f32, (z - 0.001) as f32]],
                [[hx as f32, hy as f32, 0.001]],
            )
            .with_colors([Color::from_unmultiplied_rgba(150, 120, 90, 80)])
            .with_labels(["table"]),
        );
    }

    /// The robot's URDF primitives, once per robot (static; each link's pose moves them).
    fn log_robot(&mut self, model: &Arc<RobotModel>) {
        self.robot = Some(model.clone());
        let robot = model.name().to_string();
        if !self.drawn.insert(robot.clone()) {
            return;
        }
        let grey = Color::from_rgb(190, 190, 200);
        let shapes = model.visual_shapes();
        let mut links: Vec<&str> = shapes.iter().map(|s| s.link.as_str()).collect();
        links.dedup();
        for link in links {
            let base = paths::link(&robot, link);
            let (mut boxes, mut cylinders, mut spheres, mut capsules) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for s in shapes.iter().filter(|s| s.link == link) {
                let c = s.link_from_shape.translation.vector;
                let center = [c.x as f32, c.y as f32, c.z as f32];
                let q = quaternion(&s.link_from_shape);
                match s.shape {
                    Shape::Cuboid { half_extents: e } => {
                        boxes.push((center, [e.x as f32, e.y as f32, e.z as f32], q))
                    }
                    Shape::Cylinder {
                        radius,
                        half_height,
                    } => cylinders.push((center, radius as f32, 2.0 * half_height as f32, q)),
                    Shape::Sphere { radius } => spheres.push((center, radius as f32)),
                    Shape::Capsule {
                        radius,
                        half_height,
                    } => {
                        // rerun's capsule starts at its origin and runs along +z.
                        let start =
                            s.link_from_shape * k::nalgebra::Point3::new(0.0, 0.0, -half_height);
                        let start = [start.x as f32, start.y as f32, start.z as f32];
                        capsules.push((start, radius as f32, 2.0 * half_height as f32, q))
                    }
                }
            }
            if !boxes.is_empty() {
                self.log_static(
                    format!("{base}/boxes"),
                    &Boxes3D::from_centers_and_half_sizes(
                        boxes.iter().map(|b| b.0),
                        boxes.iter().map(|b| b.1),
                    )
                    .with_quaternions(boxes.iter().map(|b| b.2))
                    .with_fill_mode(FillMode::Solid)
                    .with_colors([grey]),
                );
            }
            if !cylinders.is_empty() {
                self.log_static(
                    format!("{base}/cylinders"),
                    &Cylinders3D::from_lengths_and_radii(
                        cylinders.iter().map(|c| c.2),
                        cylinders.iter().map(|c| c.1),
                    )
                    .with_centers(cylinders.iter().map(|c| c.0))
                    .with_quaternions(cylinders.iter().map(|c| c.3))
                    .with_fill_mode(FillMode::Solid)
                    .with_colors([grey]),
                );
            }
            if !spheres.is_empty() {
                self.log_static(
                    format!("{base}/spheres"),
                    &Ellipsoids3D::from_centers_and_radii(
                        spheres.iter().map(|s| s.0),
                        spheres.iter().map(|s| s.1),
                    )
                    .with_fill_mode(FillMode::Solid)
                    .with_colors([grey]),
                );
            }
            if !capsules.is_empty() {
                self.log_static(
                    format!("{base}/capsules"),
                    &Capsules3D::from_lengths_and_radii(
                        capsules.iter().map(|c| c.2),
                        capsules.iter().map(|c| c.1),
                    )
                    .with_translations(capsules.iter().map(|c| c.0))
                    .with_quaternions(capsules.iter().map(|c| c.3))
                    .with_colors([grey]),
                );
            }
        }
    }

    /// Executed states: every state's joints as scalars; link poses by FK at most every
    /// `POSE_PERIOD_S` (and always the last state).
    fn log_states(&mut self, states: &[JointState]) {
        let Some(model) = self.robot.clone() else {
            return;
        };
        let g = &model.config.gripper;
        let span = g.open_width - g.closed_width;
        for (i, s) in states.iter().enumerate() {
            self.set_clock(s.stamp_s);
            for (name, q) in model.config.arm_joints.iter().zip(&s.q) {
                self.log(paths::joint(name), &Scalars::single(*q));
            }
            self.log(paths::GRIPPER_WIDTH, &Scalars::single(s.gripper_width));
            let last = i + 1 == states.len();
            let due = match (self.last_pose_s, s.stamp_s) {
                (Some(prev), Some(t)) => t - prev >= POSE_PERIOD_S - 1e-9,
                _ => true,
            };
            if !(due || last) {
                continue;
            }
            self.last_pose_s = Some(self.now_s);
            let opening = if span > 0.0 {
                (s.gripper_width - g.closed_width) / span
            } else {
                1.0
            };
            match model.link_poses(&s.q, opening) {
                Ok(poses) => {
                    for (link, pose) in poses {
                        self.log(paths::link(model.name(), &link), &transform(&pose));
                    }
                }
                Err(e) => self.note_error(format!("robot state: {e}")),
            }
        }
    }

    /// The plan: the answers lifted to 3D, the tool path of every motion, the planned joint
    /// positions over `plan_time`, and the step list.
    fn log_plan(&mut self, plan: &Plan) {
        let t = &plan.targets;
        if let Some(g) = t.grasp {
            let from = self.grasp_from.map_or("grasp".into(), |a| {
                format!("grasp ({})", a.as_str().to_uppercase())
            });
            self.log_target(paths::GRASP, &g, &from);
        }
        if let Some(p) = t.place {
            let from = self.place_from.map_or("place".into(), |a| {
                format!("place ({})", a.as_str().to_uppercase())
            });
            self.log_target(paths::PLACE, &p, &from);
        }
        if !t.trace.is_empty() {
            let pts: Vec<[f32; 3]> = t
                .trace
                .iter()
                .map(|p| [p.x as f32, p.y as f32, p.z as f32])
                .collect();
            let color = ability_color(Ability::Vtg);
            self.log(
                paths::TRACE_3D,
                &LineStrips3D::new([pts.clone()])
                    .with_colors([color])
                    .with_radii([0.003]),
            );
            let labels: Vec<String> = (1..=pts.len()).map(|i| format!("VTG {i}")).collect();
            self.log(
                format!("{}/points", paths::TRACE_3D),
                &Points3D::new(pts)
                    .with_colors([color])
                    .with_radii([0.008])
                    .with_labels(labels),
            );
        }
        let Some(model) = self.robot.clone() else {
            return;
        };
        // The tool path of every motion, one strip each.
        let mut strips = Vec::new();
        let mut labels = Vec::new();
        for step in &plan.steps {
            if let Step::Move {
                label, trajectory, ..
            } = step
            {
                let strip: Vec<[f32; 3]> = trajectory
                    .path()
                    .waypoints
                    .iter()
                    .filter_map(|q| model.fk(q).ok())
                    .map(|p| {
                        let v = p.translation.vector;
                        [v.x as f32, v.y as f32, v.z as f32]
                    })
                    .collect();
                strips.push(strip);
                labels.push(label.clone());
            }
        }
        let colors: Vec<Color> = (0..strips.len()).map(step_color).collect();
        self.log(
            paths::PLAN_TCP,
            &LineStrips3D::new(strips)
                .with_labels(labels)
                .with_colors(colors)
                .with_radii([0.002]),
        );
        // The steps as a table.
        let mut doc = String::from("| # | step | what |\n| --- | --- | --- |\n");
        for (i, s) in plan.steps.iter().enumerate() {
            let what = match s {
                Step::Move { trajectory, .. } => format!(
                    "move, {:.2} s, {} waypoints",
                    trajectory.duration(),
                    trajectory.path().waypoints.len()
                ),
                Step::Gripper { width, .. } => format!("gripper to {:.1} mm", width * 1e3),
            };
            doc.push_str(&format!("| {i} | {} | {what} |\n", s.label()));
        }
        self.log(paths::PLAN_STEPS, &TextDocument::from_markdown(doc));
        self.log_planned_joints(&model, plan);
        self.log_line(
            TextLogLevel::INFO,
            &format!("planned   {} steps", plan.steps.len()),
        );
    }

    /// Planned joint positions on their own timeline (`plan_time`, starting at the moment of
    /// planning on the shared clock); gripper actions take no time in a plan.
    fn log_planned_joints(&mut self, model: &RobotModel, plan: &Plan) {
        let start = self.offset_s + self.now_s;
        let mut elapsed = 0.0;
        self.rec.reset_time();
        for step in &plan.steps {
            let Step::Move { trajectory, .. } = step else {
                continue;
            };
            for (t, q) in trajectory.samples(PLAN_SAMPLE_S) {
                self.rec
                    .set_duration_secs(timelines::PLAN_TIME, start + elapsed + t);
                if let Some(e) = self.episode {
                    self.rec.set_time_sequence(timelines::EPISODE, e);
                }
                for (name, v) in model.config.arm_joints.iter().zip(&q) {
                    self.log(paths::planned_joint(name), &Scalars::single(*v));
                }
            }
            elapsed += trajectory.duration();
        }
        self.rec.reset_time();
        self.set_clock(None);
    }

    /// A lifted target: a labelled point and the gripper's axes there (x red, y green, z blue).
    fn log_target(&mut self, path: &str, pose: &Isometry3<f64>, label: &str) {
        let o = pose.translation.vector;
        let origin = [o.x as f32, o.y as f32, o.z as f32];
        self.log(
            path,
            &Points3D::new([origin])
                .with_radii([0.01])
                .with_labels([label.to_string()]),
        );
        let axes: Vec<[f32; 3]> = (0..3)
            .map(|i| {
                let v = pose.rotation * Vector3::ith(i, 0.05);
                [v.x as f32, v.y as f32, v.z as f32]
            })
            .collect();
        self.log(
            format!("{path}/axes"),
            &Arrows3D::from_vectors(axes)
                .with_origins([origin; 3])
                .with_colors([
                    Color::from_rgb(230, 60, 60),
                    Color::from_rgb(60, 200, 60),
                    Color::from_rgb(60, 90, 230),
                ]),
        );
    }

    /// Sets the timelines for what follows: `sim_time` = offset + the latest device stamp.
    fn set_clock(&mut self, stamp_s: Option<f64>) {
        if let Some(s) = stamp_s.filter(|s| s.is_finite() && *s >= 0.0) {
            self.now_s = s;
        }
        let t = self.offset_s + self.now_s;
        self.latest_s = self.latest_s.max(t);
        self.rec.set_duration_secs(timelines::SIM_TIME, t);
        if let Some(e) = self.episode {
            self.rec.set_time_sequence(timelines::EPISODE, e);
        }
    }

    fn log_line(&mut self, level: &str, text: &str) {
        self.log(paths::LOG, &TextLog::new(text).with_level(level));
    }

    fn log(&mut self, path: impl Into<rerun::EntityPath>, what: &impl rerun::AsComponents) {
        if let Err(e) = self.rec.log(path, what) {
            self.note_error(e.to_string());
        }
    }

    fn log_static(&mut self, path: impl Into<rerun::EntityPath>, what: &impl rerun::AsComponents) {
        if let Err(e) = self.rec.log_static(path, what) {
            self.note_error(e.to_string());
        }
    }

    fn note_error(&mut self, e: String) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }
}

/// A run that ends early (an error after `--rerun` was opened) still flushes, within the limit.
impl Drop for Viz {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::warn!("{e}");
        }
    }
}

fn quaternion(pose: &Isometry3<f64>) -> Quaternion {
    let q = pose.rotation.quaternion();
    Quaternion::from_xyzw([q.i as f32, q.j as f32, q.k as f32, q.w as f32])
}

/// A pose as a rerun transform of a child entity in its parent's frame.
fn transform(pose: &Isometry3<f64>) -> Transform3D {
    let t = pose.translation.vector;
    Transform3D::from_translation_rotation([t.x as f32, t.y as f32, t.z as f32], quaternion(pose))
}

fn ability_color(a: Ability) -> Color {
    match a {
        Ability::Reg => Color::from_rgb(40, 120, 255),
        Ability::Rrg => Color::from_rgb(40, 200, 90),
        Ability::Ofg => Color::from_rgb(255, 150, 30),
        Ability::Vtg => Color::from_rgb(230, 50, 200),
    }
}

/// Alternating colours so neighbouring motions of a plan are told apart.
fn step_color(i: usize) -> Color {
    const C: [(u8, u8, u8); 4] = [(255, 200, 0), (0, 200, 255), (255, 90, 90), (150, 255, 120)];
    let (r, g, b) = C[i % C.len()];
    Color::from_rgb(r, g, b)
}
