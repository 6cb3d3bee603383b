//! `dataset::writer` and `runner::record` against lerobot's reading of a LeRobotDataset v3.0:
//! `tests/dataset_lerobot.py` reads what we wrote with pyarrow, pandas and PyAV as lerobot's
//! loader does (in CI), and with `POINTACT_LEROBOT=1` loads it with the `lerobot` package itself
//! and recomputes the statistics with lerobot's own code (see docs/testing.md for its install).

use std::path::Path;
use std::time::Duration;

use super::common::{python, read_tree, TempDir};
use pointact::dataset::writer::{read_episode_rows, read_info, FrameSource};
use pointact::dataset::{
    Cell, Column, DatasetError, DatasetSpec, DatasetWriter, EpisodeInput, Feature, VideoOptions,
};

const SCRIPT: &str = concat!(
    concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
    "/tests/dataset_lerobot.py"
);

const W: usize = 64;
const H: usize = 48;
const FPS: u32 = 10;
const KEY: &str = "observation.images.front";

fn spec(robot: &str) -> DatasetSpec {
    DatasetSpec {
        fps: FPS,
        robot_type: robot.into(),
        features: vec![
            (
                "observation.state".into(),
                Feature::vector(&["a", "b", "c"]),
            ),
            ("action".into(), Feature::vector(&["a", "b", "c"])),
            ("pointact.plan_step".into(), Feature::int_scalar()),
            (KEY.into(), Feature::video(W as u32, H as u32)),
        ],
        video: VideoOptions::default(),
    }
}

/// Frame `i` of episode `e`: a gradient and a block moving across it.
fn frame(e: usize, i: usize) -> Vec<u8> {
    let mut rgb = Vec::with_capacity(W * H * 3);
    for y in 0..H {
        for x in 0..W {
            let inside = (x + 3 * i + 7 * e) % W < 16 && (12..30).contains(&y);
            let px = if inside {
                [210, 50, 40]
            } else {
                [
                    (x * 255 / W) as u8,
                    (y * 255 / H) as u8,
                    (100 + 20 * e) as u8,
                ]
            };
            rgb.extend(px);
        }
    }
    rgb
}

/// An episode's values: state `s[i] = (e + i/10, -i, 0.5 e)`, action the next state.
fn values(e: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let s = |i: usize| [e as f32 + i as f32 / 10.0, -(i as f32), 0.5 * e as f32];
    let state = (0..n).flat_map(s).collect();
    let action = (0..n).flat_map(|i| s((i + 1).min(n - 1))).collect();
    (state, action)
}

/// Appends synthetic episode `e` of `n` frames; records what was written for the checker.
fn append(
    w: &mut DatasetWriter,
    e: usize,
    n: usize,
    task: &str,
    expect: &mut Vec<serde_json::Value>,
    raw: &mut Vec<u8>,
) {
    let (state, action) = values(e, n);
    let mut source = |i: usize| Ok(frame(e, i));
    w.append(EpisodeInput {
        task,
        frames: n,
        columns: vec![
            ("observation.state", Column::F32(state.clone())),
            ("action", Column::F32(action.clone())),
            ("pointact.plan_step", Column::I64((0..n as i64).collect())),
        ],
        videos: vec![(KEY, &mut source)],
        extras: vec![("pointact/success".into(), Cell::Bool(e.is_multiple_of(2)))],
    })
    .unwrap();
    for i in 0..n {
        raw.extend(frame(e, i));
    }
    let rows = |v: &[f32]| v.chunks(3).map(|c| c.to_vec()).collect::<Vec<_>>();
    expect.push(serde_json::json!({
        "task": task, "length": n, "state": rows(&state), "action": rows(&action)
    }));
}

/// Runs the checker on `root`; `--lerobot` too when `POINTACT_LEROBOT=1`.
fn check_with_python(root: &Path, expect: serde_json::Value) -> Option<serde_json::Value> {
    let py = python::interpreter(
        "pyarrow",
        "pyarrow==22.0.0 pandas==2.3.3 av==18.1.0",
        "the LeRobot format check",
    )?;
    let lerobot = std::env::var_os("POINTACT_LEROBOT").is_some_and(|v| v == "1");
    // lerobot needs torch (GBs): it lives in its own environment (docs/testing.md).
    let py = match (lerobot, std::env::var_os("POINTACT_LEROBOT_PYTHON")) {
        (true, Some(p)) => p,
        _ => py,
    };
    let expect_path = root.with_extension("expect.json");
    std::fs::write(&expect_path, expect.to_string()).unwrap();
    let mut args = vec![root.to_str().unwrap(), expect_path.to_str().unwrap()];
    if lerobot {
        args.push("--lerobot");
    }
    let run = python::run_script(&py, SCRIPT, &args, Duration::from_secs(600));
    assert!(
        run.status.is_some_and(|s| s.success()),
        "dataset_lerobot.py failed\n{}",
        run.transcript()
    );
    let out: serde_json::Value =
        serde_json::from_str(run.stdout.trim().lines().last().unwrap()).unwrap();
    eprintln!("{out}");
    assert_eq!(out["ok"], true);
    if lerobot {
        assert!(out["lerobot"].is_object(), "{out}");
    }
    Some(out)
}

#[test]
fn a_dataset_written_in_two_sessions_reads_back_as_lerobot_reads_it() {
    let tmp = TempDir::new("dataset-writer");
    let root = tmp.path().join("ds");
    let (mut expect, mut raw) = (Vec::new(), Vec::new());
    {
        let mut w = DatasetWriter::open(&root, &spec("xarm6")).unwrap();
        append(&mut w, 0, 5, "pick the cup", &mut expect, &mut raw);
        append(&mut w, 1, 13, "place the cup", &mut expect, &mut raw);
    }
    // A second process appends: lerobot's resume, new files after the last episode's.
    {
        let mut w = DatasetWriter::open(&root, &spec("xarm6")).unwrap();
        assert_eq!(w.info().total_episodes, 2);
        append(&mut w, 2, 7, "pick the cup", &mut expect, &mut raw);
    }
    let info = read_info(&root).unwrap();
    assert_eq!(
        (info.total_episodes, info.total_frames, info.total_tasks),
        (3, 25, 2)
    );
    assert_eq!(info.splits["train"], "0:3");
    let feature = info.features.get(KEY).unwrap();
    assert_eq!(feature.info.as_ref().unwrap()["video.codec"], "h264");
    let rows = read_episode_rows(&root).unwrap();
    let col = |r: usize, c: &str| rows[r].get(c).unwrap();
    // Session one filled data file 0; session two started file 1. One video file per episode.
    assert_eq!(
        (0..3)
            .map(|r| col(r, "data/file_index"))
            .collect::<Vec<_>>(),
        [0, 0, 1]
    );
    assert_eq!(
        (0..3)
            .map(|r| col(r, &format!("videos/{KEY}/file_index")))
            .collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(
        (0..3)
            .map(|r| (col(r, "dataset_from_index"), col(r, "dataset_to_index")))
            .collect::<Vec<_>>(),
        [(0, 5), (5, 18), (18, 25)]
    );
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("meta/stats.json")).unwrap())
            .unwrap();
    assert_eq!(stats["index"]["max"][0], 24.0);
    assert_eq!(stats["action"]["count"][0], 25);

    let raw_path = tmp.path().join("frames.rgb");
    std::fs::write(&raw_path, &raw).unwrap();
    let expect = serde_json::json!({
        "fps": FPS,
        "episodes": expect,
        "video": {"key": KEY, "width": W, "height": H, "raw": raw_path},
    });
    if let Some(out) = check_with_python(&root, expect) {
        assert_eq!(out["frames"], 25);
        assert!(out["worst_psnr_db"].as_f64().unwrap() > 30.0, "{out}");
    }
    check_with_rerun(&root, &[5, 13, 7]);
}

/// With `POINTACT_RERUN` naming a `rerun` CLI (`pip install rerun-sdk`, docs/testing.md): rerun's
/// own LeRobot loader turns the folder into a recording (`rerun DIR --save F.rrd`), and
/// `rerun rrd print` finds one store per episode, each episode's states as many rows as it has
/// frames, and one video sample per frame.
fn check_with_rerun(root: &Path, lengths: &[usize]) {
    let Some(rerun) = std::env::var_os("POINTACT_RERUN") else {
        eprintln!("rerun check skipped: POINTACT_RERUN is not set");
        return;
    };
    let rrd = root.with_extension("rrd");
    let run = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(&rerun)
            .args(args)
            .output()
            .expect("POINTACT_RERUN runs");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "rerun {args:?} failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
    run(&[root.as_os_str(), "--save".as_ref(), rrd.as_os_str()]);
    let printed = run(&["rrd".as_ref(), "print".as_ref(), rrd.as_os_str()]);
    // `"episode_N",` names a store (all stores come first); then one line per chunk,
    // `Chunk(…) with R rows (…) - /PATH - data columns: [C]`. An episode's states come as one chunk;
    // its video samples in chunks of a few.
    let stores = printed
        .lines()
        .filter(|l| l.trim().starts_with("\"episode_"))
        .count();
    let rows_of = |what: &str| -> Vec<usize> {
        printed
            .lines()
            .filter(|l| l.contains(what))
            .filter_map(|l| {
                l.split_once(" with ")?
                    .1
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    };
    let mut states = rows_of("- /observation.state - data columns: [Scalars:scalars]");
    let samples: usize = rows_of(&format!("- /{KEY} - data columns: [VideoStream:sample]"))
        .iter()
        .sum();
    states.sort_unstable();
    let mut want = lengths.to_vec();
    want.sort_unstable();
    assert_eq!(
        stores,
        lengths.len(),
        "one recording per episode\n{printed}"
    );
    assert_eq!(states, want, "state rows per episode\n{printed}");
    assert_eq!(
        samples,
        lengths.iter().sum::<usize>(),
        "video samples\n{printed}"
    );
}

#[test]
fn a_folder_of_another_robot_fps_or_features_is_refused_untouched() {
    let tmp = TempDir::new("dataset-refuse");
    let root = tmp.path().join("ds");
    let (mut expect, mut raw) = (Vec::new(), Vec::new());
    let mut w = DatasetWriter::open(&root, &spec("xarm6")).unwrap();
    append(&mut w, 0, 3, "pick", &mut expect, &mut raw);
    drop(w);
    let before = read_tree(&root);
    let refused = |s: DatasetSpec, what: &str| match DatasetWriter::open(&root, &s) {
        Err(DatasetError::Incompatible(m)) => assert!(m.contains(what), "{m}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a dataset with other {what} was opened for appending"),
    };
    refused(spec("widowx250"), "robot type");
    let mut fast = spec("xarm6");
    fast.fps = 30;
    refused(fast, "fps");
    let mut other = spec("xarm6");
    other.features[0].1 = Feature::vector(&["a", "b", "c", "d"]);
    refused(other, "other features");
    assert!(
        read_tree(&root) == before,
        "a refused open changed the folder"
    );

    let stranger = tmp.path().join("photos");
    std::fs::create_dir_all(&stranger).unwrap();
    std::fs::write(stranger.join("cat.jpg"), b"not a dataset").unwrap();
    match DatasetWriter::open(&stranger, &spec("xarm6")) {
        Err(DatasetError::Incompatible(m)) => assert!(m.contains("no meta/info.json"), "{m}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
}

#[test]
fn an_episode_that_fails_midway_leaves_the_dataset_as_it_was() {
    let tmp = TempDir::new("dataset-rollback");
    let root = tmp.path().join("ds");
    let (mut expect, mut raw) = (Vec::new(), Vec::new());
    let mut w = DatasetWriter::open(&root, &spec("xarm6")).unwrap();
    append(&mut w, 0, 4, "pick", &mut expect, &mut raw);
    let before = read_tree(&root);
    let (state, action) = values(1, 6);
    let mut broken = |i: usize| {
        if i == 3 {
            Err("the camera went away".to_string())
        } else {
            Ok(frame(1, i))
        }
    };
    let source: FrameSource<'_> = &mut broken;
    let err = w
        .append(EpisodeInput {
            task: "a new task",
            frames: 6,
            columns: vec![
                ("observation.state", Column::F32(state)),
                ("action", Column::F32(action)),
                ("pointact.plan_step", Column::I64(vec![0; 6])),
            ],
            videos: vec![(KEY, source)],
            extras: vec![("pointact/success".into(), Cell::Bool(true))],
        })
        .unwrap_err();
    assert!(err.to_string().contains("the camera went away"), "{err}");
    assert!(
        read_tree(&root) == before,
        "a failed episode changed the folder"
    );
    // A short column is refused before anything is written, too.
    let err = w
        .append(EpisodeInput {
            task: "pick",
            frames: 2,
            columns: vec![
                ("observation.state", Column::F32(vec![0.0; 5])),
                ("action", Column::F32(vec![0.0; 6])),
                ("pointact.plan_step", Column::I64(vec![0; 2])),
            ],
            videos: vec![(KEY, &mut |i| Ok(frame(0, i)))],
            extras: vec![("pointact/success".into(), Cell::Bool(true))],
        })
        .unwrap_err();
    assert!(err.to_string().contains("observation.state"), "{err}");
    assert!(read_tree(&root) == before);
    // The writer goes on: the next episode gets index 1 and its task the next task index.
    append(&mut w, 1, 6, "place", &mut expect, &mut raw);
    let info = read_info(&root).unwrap();
    assert_eq!(
        (info.total_episodes, info.total_frames, info.total_tasks),
        (2, 10, 2)
    );
    let raw_path = tmp.path().join("frames.rgb");
    std::fs::write(&raw_path, &raw).unwrap();
    check_with_python(
        &root,
        serde_json::json!({"fps": FPS, "episodes": expect,
            "video": {"key": KEY, "width": W, "height": H, "raw": raw_path}}),
    );
}

#[test]
fn a_simulated_episode_is_recorded_with_its_states_actions_and_points() {
    use pointact::runner::record::{DatasetRecorder, Kept, CAMERA_KEY, DEPTH_KEY};
    use pointact::runner::EpisodeOptions;
    use pointact::sim::tasks;

    let tmp = TempDir::new("dataset-sim");
    let root = tmp.path().join("ds");
    let episode = tasks::task(tasks::DEFAULT_TASK)
        .and_then(|t| t.instantiate(0))
        .unwrap();
    let options = EpisodeOptions::default();
    // With the camera's depth (`--dataset-depth`).
    let mut rec =
        DatasetRecorder::open_for(&root, &episode, &options, FPS, None, false, true).unwrap();
    let (result, kept) =
        super::common::block_on(rec.run_episode(&episode, 0, &options, &mut |_| {})).unwrap();
    assert!(result.success, "{}", result.detail);
    let Ok(Kept::Frames(n)) = kept else {
        panic!("{kept:?}")
    };
    rec.settle().unwrap();
    // Motion only, at 10 fps of simulated time: the arm moved for (n-1)/10 s.
    assert!((20..400).contains(&n), "{n} frames");

    let info = read_info(&root).unwrap();
    assert_eq!(info.robot_type.as_deref(), Some(episode.robot.as_str()));
    assert_eq!(info.features.get(CAMERA_KEY).unwrap().shape, [480, 640, 3]);
    let batches =
        pointact::dataset::tables::read_parquet(&root.join("data/chunk-000/file-000.parquet"))
            .unwrap();
    let b = &batches[0];
    let state = pointact::dataset::tables::f32_rows(b, "observation.state").unwrap();
    let action = pointact::dataset::tables::f32_rows(b, "action").unwrap();
    let steps = pointact::dataset::tables::i64_values(b, "pointact.plan_step").unwrap();
    let model = episode.robot_model().unwrap();
    let dof = model.joint_limits().len();
    let width = dof + 1;
    assert_eq!(state.len(), n * width);
    // Frame 0 is the arm at home; each action is the next frame's joints (the last one holds).
    let home: Vec<f32> = model.home().iter().map(|&q| q as f32).collect();
    assert_eq!(&state[..dof], &home[..]);
    for i in 0..n {
        let next = (i + 1).min(n - 1);
        assert_eq!(
            &action[i * width..i * width + dof],
            &state[next * width..next * width + dof],
            "frame {i}"
        );
    }
    // The arm moved, and the gripper closed on something and opened again.
    assert!((0..n).any(|i| state[i * width..i * width + dof] != home[..]));
    let widths: Vec<f32> = (0..n).map(|i| state[i * width + dof]).collect();
    let (lo, hi) = widths
        .iter()
        .fold((f32::MAX, f32::MIN), |(a, b), &w| (a.min(w), b.max(w)));
    assert!(hi - lo > 0.01, "the finger gap never changed: {lo}..{hi}");
    // Plan steps start at -1 or 0 and never go back.
    assert!(
        steps[0] <= 0 && steps.windows(2).all(|w| w[0] <= w[1]),
        "{steps:?}"
    );
    assert!(*steps.last().unwrap() > 2);

    let meta = pointact::dataset::tables::read_parquet(
        &root.join("meta/episodes/chunk-000/file-000.parquet"),
    )
    .unwrap();
    let success = pointact::dataset::tables::bool_values(&meta[0], "pointact/success").unwrap();
    assert_eq!(success, [Some(true)]);
    let points = pointact::dataset::tables::str_values(&meta[0], "pointact/points").unwrap();
    let points: serde_json::Value = serde_json::from_str(points[0].as_deref().unwrap()).unwrap();
    let asked = points.as_array().unwrap();
    assert!(asked.iter().any(|q| q["ability"] == "Reg"), "{points}");
    assert!(asked
        .iter()
        .all(|q| !q["points_px"].as_array().unwrap().is_empty()));
    // The depth video: a depth map of a tabletop seen from about a metre (its median), every
    // frame decoded at its time.
    let f = info.features.get(DEPTH_KEY).unwrap();
    assert!(f.is_depth_map());
    assert_eq!(f.shape, [480, 640, 1]);
    let stats: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("meta/stats.json")).unwrap()).unwrap();
    let median = stats[DEPTH_KEY]["q50"][0][0][0].as_f64().unwrap();
    assert!((0.3..2.0).contains(&median), "median depth {median} m");
    let Some(out) = check_with_python(
        &root,
        serde_json::json!({"fps": FPS, "episodes": null, "video": null,
            "depth": {"key": DEPTH_KEY, "width": 640, "height": 480, "raw": null}}),
    ) else {
        return;
    };
    assert_eq!(out["depth"]["frames"], n);
}

/// Depth of frame `i` of episode `e`, metres: a floor sloping from 0.4 to 2.4 m, a box moving
/// over it at 0.3 m, a corner with no return (0) and one past the quantiser's range (12 m).
fn depth(e: usize, i: usize) -> Vec<f32> {
    let mut d = Vec::with_capacity(W * H);
    for y in 0..H {
        for x in 0..W {
            let inside = (x + 5 * i + 3 * e) % W < 20 && (10..26).contains(&y);
            d.push(if inside {
                0.3 + 0.001 * x as f32
            } else {
                0.4 + 2.0 * (y * W + x) as f32 / (W * H) as f32
            });
        }
    }
    d[0] = 0.0;
    d[1] = 12.0;
    d
}

/// A depth feature, as lerobot 0.6.1 stores a depth map: written beside the colour video frame
/// by frame (one source feeding both, as the recorder does), read back by the checker as lerobot
/// reads it (HEVC decoded to `gray12le`, dequantised with the quantiser in `info`): every code is
/// lerobot's own quantisation of the depth given, and back in metres within half a quantum. The
/// statistics are lerobot's for a float32 depth image (checked against lerobot's code by the
/// golden test), shape `[1, 1, 1]`.
#[test]
fn a_depth_video_reads_back_as_lerobot_dequantises_it() {
    use pointact::dataset::depth::DepthQuantizer;
    const DEPTH_KEY: &str = "observation.images.front_depth";
    let tmp = TempDir::new("dataset-depth");
    let root = tmp.path().join("ds");
    let mut with_depth = spec("xarm6");
    with_depth.features.push((
        DEPTH_KEY.into(),
        Feature::depth_video(W as u32, H as u32, FPS, 10, &DepthQuantizer::default()),
    ));
    let mut w = DatasetWriter::open(&root, &with_depth).unwrap();
    let (mut expect, mut raw, mut raw_depth) = (Vec::new(), Vec::new(), Vec::new());
    for (e, n) in [(0usize, 12usize), (1, 7)] {
        let (state, action) = values(e, n);
        let pending = std::cell::RefCell::new(None);
        let mut colour = |i: usize| {
            *pending.borrow_mut() = Some(depth(e, i));
            Ok(frame(e, i))
        };
        let mut depth_source = |i: usize| {
            let d: Vec<f32> = pending.borrow_mut().take().ok_or("colour first")?;
            assert_eq!(d, depth(e, i));
            Ok(d.iter().flat_map(|v| v.to_le_bytes()).collect())
        };
        w.append(EpisodeInput {
            task: "look down",
            frames: n,
            columns: vec![
                ("observation.state", Column::F32(state.clone())),
                ("action", Column::F32(action.clone())),
                ("pointact.plan_step", Column::I64((0..n as i64).collect())),
            ],
            videos: vec![(KEY, &mut colour), (DEPTH_KEY, &mut depth_source)],
            extras: vec![],
        })
        .unwrap();
        for i in 0..n {
            raw.extend(frame(e, i));
            raw_depth.extend(depth(e, i).iter().flat_map(|v| v.to_le_bytes()));
        }
        let rows = |v: &[f32]| v.chunks(3).map(|c| c.to_vec()).collect::<Vec<_>>();
        expect.push(serde_json::json!({
            "task": "look down", "length": n, "state": rows(&state), "action": rows(&action)
        }));
    }
    let info = read_info(&root).unwrap();
    let f = info.features.get(DEPTH_KEY).unwrap();
    assert!(f.is_depth_map());
    assert_eq!(f.shape, [H, W, 1]);
    let stats: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("meta/stats.json")).unwrap()).unwrap();
    let s = &stats[DEPTH_KEY];
    assert_eq!(s["min"], serde_json::json!([[[0.0]]]), "{s}");
    assert_eq!(s["max"], serde_json::json!([[[12.0]]]), "{s}");
    // Every frame of both episodes is sampled (fewer than 100 each).
    assert_eq!(s["count"], serde_json::json!([19]), "{s}");

    // A dataset with depth refuses a session without it.
    let refused = DatasetWriter::open(&root, &spec("xarm6")).err().unwrap();
    assert!(refused.to_string().contains("features"), "{refused}");
    // So does one whose depth was coded by another coder (the PCM-block coder of an earlier
    // version), and the folder is left as it was.
    let info_path = root.join("meta/info.json");
    let ours = std::fs::read_to_string(&info_path).unwrap();
    let encoder = |i: &str| {
        let v: serde_json::Value = serde_json::from_str(i).unwrap();
        v["features"][DEPTH_KEY]["info"]["video.encoder"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let pcm = ours.replace(
        &encoder(&ours),
        "pointact still-camera hevc (pcm 32x32 + skip, lossless)",
    );
    assert_ne!(pcm, ours);
    std::fs::write(&info_path, &pcm).unwrap();
    let refused = DatasetWriter::open(&root, &with_depth).err().unwrap();
    assert!(
        refused.to_string().contains("video.encoder") && refused.to_string().contains("pcm"),
        "{refused}"
    );
    assert_eq!(std::fs::read_to_string(&info_path).unwrap(), pcm);
    std::fs::write(&info_path, &ours).unwrap();
    DatasetWriter::open(&root, &with_depth).expect("our own coder's dataset is appended to");

    let raw_path = tmp.path().join("raw.rgb");
    std::fs::write(&raw_path, &raw).unwrap();
    let depth_path = tmp.path().join("raw.depth");
    std::fs::write(&depth_path, &raw_depth).unwrap();
    let Some(out) = check_with_python(
        &root,
        serde_json::json!({
            "fps": FPS, "episodes": expect,
            "video": {"key": KEY, "width": W, "height": H, "raw": raw_path},
            "depth": {"key": DEPTH_KEY, "width": W, "height": H, "raw": depth_path},
        }),
    ) else {
        return;
    };
    assert_eq!(out["depth"]["frames"], 19);
    assert_eq!(out["depth"]["mismatched_codes"], 0);
}
