//! The camera's walk through a scene and the rendering of a sequence along it.
//!
//! VSI-Bench's videos are a person walking through a room (Yang et al. 2024, arXiv 2412.14171:
//! ScanNet, ScanNet++ and ARKitScenes scans); ours is a person walking around the table: the
//! eye `STAND_HEIGHT_M` above the table top on an arc of radius `ARC_RADIUS_M` around the objects'
//! centroid, on the side the scene's own camera stands (away from the robot), sweeping
//! `ARC_SPAN_DEG` at constant speed. The gaze pans along the table meanwhile, from
//! `PAN_M` to one side of the centroid to `PAN_M` to the other, so that with a `HFOV_DEG` lens the
//! objects enter the view one after another and leave it again: what appearance-order questions
//! need. The seed picks the direction of the walk, so two seeds of one layout differ.
//!
//! A recorded change (the sequences for "which way was the object moved"): the first half of the
//! frames shows the settled world; then the task itself runs — the simulated arm, driven by the
//! executor with the oracle pointer, as `pointact run` runs it (`runner::episode::run_prepared`,
//! polled in place: the simulator's devices answer at once) — and the second half is rendered from
//! the camera walking on, the object where the run left it and the arm where it ended. The move is
//! what the run did, read back from the world, whether or not the judge would call it a success.

use image::RgbImage;
use k::nalgebra::{Point3, Vector3};

use super::options::SpatialOptions;
use super::truth::{frame_truth, objects_now, FrameTruth, MovedTruth, Pose, SequenceTruth};
use crate::runner::episode::{prepare_episode, run_prepared_now, sim_camera, EpisodeOptions};
use crate::sim::devices::SimRobot;
use crate::sim::oracle::OraclePointer;
use crate::sim::render::{render, PinholeCamera, RenderOptions};
use crate::sim::tasks::TaskSpec;

/// Eye height above the table top, m (a person's eye above a table they stand at).
pub(crate) const STAND_HEIGHT_M: f64 = 0.5;
/// Horizontal distance of the eye from the objects' centroid, m.
pub(crate) const ARC_RADIUS_M: f64 = 0.75;
/// Angle the walk covers around the centroid, degrees.
pub(crate) const ARC_SPAN_DEG: f64 = 100.0;
/// How far beside the centroid the gaze starts and ends, m.
pub(crate) const PAN_M: f64 = 0.55;
/// The lens's horizontal field of view, degrees (a phone camera's main lens is about 65°).
pub(crate) const HFOV_DEG: f64 = 60.0;

/// One rendered sequence: the frames and their truth.
pub(crate) struct Recorded {
    pub images: Vec<RgbImage>,
    pub truth: SequenceTruth,
}

/// The camera of frame `i` of `n` walking around `centre` (table-top height `table_z`), the walk
/// centred on azimuth `heading` (rad, world) and turning the way `sign` says.
pub(crate) fn camera_at(
    i: usize,
    n: usize,
    centre: [f64; 2],
    table_z: f64,
    heading: f64,
    sign: f64,
    size: (usize, usize),
) -> Result<PinholeCamera, String> {
    let t = if n > 1 {
        i as f64 / (n - 1) as f64
    } else {
        0.5
    };
    let phi = heading + sign * ARC_SPAN_DEG.to_radians() * (t - 0.5);
    let eye = Point3::new(
        centre[0] + ARC_RADIUS_M * phi.cos(),
        centre[1] + ARC_RADIUS_M * phi.sin(),
        table_z + STAND_HEIGHT_M,
    );
    // The viewer's right on the table: the view direction (toward the centre) × up.
    let right = Vector3::new(-phi.sin(), phi.cos(), 0.0);
    let pan = sign * PAN_M * (2.0 * t - 1.0);
    let target = Point3::new(centre[0], centre[1], table_z) + right * pan;
    PinholeCamera::look_at_hfov(
        eye,
        target,
        Vector3::z(),
        size.0,
        size.1,
        HFOV_DEG.to_radians(),
    )
    .map_err(|e| e.to_string())
}

/// The least labelled pixels for an object to be in view: 1/2560 of the image (30 px at
/// 320 × 240), at least 8.
pub(crate) fn min_pixels(width: usize, height: usize) -> usize {
    (width * height / 2560).max(8)
}

/// Builds and settles `spec`'s episode `seed` as `train data` does (`runner::prepare_episode`,
/// the arm at home), then renders the walk; with `moved`, the task runs halfway through (see the
/// module docs).
pub(crate) fn record(
    spec: &TaskSpec,
    seed: u64,
    opts: &SpatialOptions,
    moved: bool,
) -> Result<Recorded, String> {
    let episode = spec.instantiate(seed).map_err(|e| e.to_string())?;
    let prepared = prepare_episode(&episode).map_err(|e| e.to_string())?;
    let world = prepared.world.clone();
    let home = prepared.model.home().to_vec();
    let mut robot = SimRobot::new(world.clone(), prepared.model.clone(), home)
        .map_err(|e| format!("placing the arm at home: {e}"))?;
    let mut truth = Some(prepared.truth);
    let id = sequence_id(&spec.full_id(), seed, moved);
    let (objects, table_z, eye, scene_name) = {
        let w = world.lock();
        let scene = w.scene();
        (
            objects_now(&w),
            scene.table.height,
            scene.camera.eye,
            scene.name.clone(),
        )
    };
    if objects.is_empty() {
        return Err("the scene has no objects".into());
    }
    let n = objects.len() as f64;
    let centre = [
        objects.iter().map(|o| o.centre[0]).sum::<f64>() / n,
        objects.iter().map(|o| o.centre[1]).sum::<f64>() / n,
    ];
    // Centred on the scene camera's side of the table (away from the robot).
    let heading = (eye.y - centre[1]).atan2(eye.x - centre[0]);
    // The walk's direction from the seed (stable across platforms: no std hasher).
    let sign = if (seed ^ crate::sim::tasks::fnv1a(&id)) & 1 == 0 {
        1.0
    } else {
        -1.0
    };
    let (width, height) = (opts.width as usize, opts.height as usize);
    let min_px = min_pixels(width, height);
    let half = opts.frames / 2;
    let mut moved_truth = None;
    let mut images = Vec::with_capacity(opts.frames);
    let mut frames: Vec<FrameTruth> = Vec::with_capacity(opts.frames);
    let render_options = RenderOptions::default();
    for i in 0..opts.frames {
        if moved && i == half {
            if episode.target_region_world(&world.lock()).is_none() {
                return Err("the task has no place to put the object (pick up)".into());
            }
            let (start, start_centre) = {
                let w = world.lock();
                let start = w.object_pose(&episode.object).ok_or("no moved object")?;
                (
                    start,
                    super::truth::centre_now(&w, &episode.object).unwrap_or_default(),
                )
            };
            let options = EpisodeOptions::default();
            let mut camera = sim_camera(&world, &options);
            let oracle = truth.take().ok_or("the task runs once")?;
            let mut pointer = OraclePointer::new(oracle, options.oracle.clone());
            run_prepared_now(
                &episode,
                &options,
                &world,
                &mut robot,
                &mut camera,
                &mut pointer,
            )
            .map_err(|e| format!("the task run failed: {e}"))?;
            let w = world.lock();
            let end = w.object_pose(&episode.object).ok_or("no moved object")?;
            moved_truth = Some(MovedTruth {
                object: episode.object.clone(),
                start_pose: Pose::of(&start),
                end_pose: Pose::of(&end),
                start_centre,
                end_centre: super::truth::centre_now(&w, &episode.object).unwrap_or_default(),
                first_frame_after: half,
            });
        }
        let camera = camera_at(
            i,
            opts.frames,
            centre,
            table_z,
            heading,
            sign,
            (width, height),
        )?;
        let w = world.lock();
        let out = render(&w.render_scene(), &camera, &render_options);
        frames.push(frame_truth(i, opts.fps, &camera, &out, &w, min_px));
        images.push(
            RgbImage::from_raw(out.width, out.height, out.rgb)
                .ok_or("the renderer returned a short colour buffer")?,
        );
    }
    Ok(Recorded {
        images,
        truth: SequenceTruth {
            id,
            task: spec.full_id(),
            seed,
            scene: scene_name,
            fps: opts.fps,
            min_pixels: min_px,
            table_height: table_z,
            objects,
            moved: moved_truth,
            frames,
        },
    })
}

/// `<suite>-<task>-s<seed>`, with `-moved` for a recorded change.
pub(crate) fn sequence_id(task: &str, seed: u64, moved: bool) -> String {
    let base = format!("{}-s{seed}", task.replace('/', "-"));
    if moved {
        format!("{base}-moved")
    } else {
        base
    }
}
