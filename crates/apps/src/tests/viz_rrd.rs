//! `--rerun save:` end to end: two simulated episodes of the default task (affordance branch, then
//! visual-trace branch) logged through `Viz` exactly as `pointact eval sim --rerun` does, written to
//! an .rrd file and read back with rerun's own decoder (`re_log_encoding::DecoderApp`, the reader
//! behind `rerun rrd`). The counts asserted come from the executor's events of the same run, so the
//! file must hold what happened, not a fixed number.

#[cfg(feature = "viz")]
#[cfg(feature = "viz")]
mod with_rerun {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;

    use pointact::executor::{Branch, Event, Step};
    use pointact::pointing::Ability;
    use pointact::runner::{run_episode, EpisodeOptions};
    use pointact::sim::tasks;
    use pointact::viz::{Sink, Viz};
    use rerun::external::arrow::array::Array as _;

    /// The entity tree and timelines as `viz`'s module docs publish them (what a user finds in the
    /// viewer); the library keeps its own constants private, so a renamed entity fails here.
    mod paths {
        pub const CAMERA: &str = "world/camera";
        pub const PINHOLE: &str = "world/camera/image";
        pub const RGB: &str = "world/camera/image/rgb";
        pub const DEPTH: &str = "world/camera/image/depth";
        pub const CLOUD: &str = "world/cloud";
        pub const GRASP: &str = "world/targets/grasp";
        pub const PLACE: &str = "world/targets/place";
        pub const TRACE_3D: &str = "world/targets/trace";
        pub const PLAN_TCP: &str = "world/plan/tcp";
        pub const PLAN_STEPS: &str = "plan/steps";
        pub const LOG: &str = "log";
        pub const GRIPPER_WIDTH: &str = "robot/gripper_width";
        pub const EVAL_SUCCESS: &str = "eval/success";
        pub fn points_2d(ability: &str) -> String {
            format!("world/camera/image/points/{ability}")
        }
        pub fn trace_2d(ability: &str) -> String {
            format!("world/camera/image/trace/{ability}")
        }
        pub fn pointing(ability: &str) -> String {
            format!("pointing/{ability}")
        }
        pub fn link(robot: &str, link: &str) -> String {
            format!("world/robot/{robot}/{link}")
        }
        pub fn joint(joint: &str) -> String {
            format!("robot/joints/{joint}")
        }
        pub fn planned_joint(joint: &str) -> String {
            format!("plan/joints/{joint}")
        }
        pub fn timing(stage: &str) -> String {
            format!("timings/{stage}")
        }
    }

    mod timelines {
        pub const SIM_TIME: &str = "sim_time";
        pub const PLAN_TIME: &str = "plan_time";
        pub const EPISODE: &str = "episode";
    }

    /// What the file holds for one entity path.
    #[derive(Default, Debug)]
    struct Entity {
        rows: usize,
        static_rows: usize,
        /// Component (e.g. `Points2D:positions`) → instances over all rows.
        instances: BTreeMap<String, usize>,
        timelines: BTreeSet<String>,
        /// Raw `sim_time` values (ns).
        sim_time: Vec<i64>,
        episodes: Vec<i64>,
    }

    impl Entity {
        fn count(&self, component: &str) -> usize {
            self.instances.get(component).copied().unwrap_or(0)
        }
    }

    fn read_rrd(path: &Path) -> BTreeMap<String, Entity> {
        let file = std::fs::File::open(path).expect("the .rrd was written");
        let mut out: BTreeMap<String, Entity> = BTreeMap::new();
        let mut chunks = 0;
        for msg in re_log_encoding::DecoderApp::decode_lazy(std::io::BufReader::new(file)) {
            let msg = msg.expect("a valid rrd message");
            let rerun::log::LogMsg::ArrowMsg(_, arrow) = msg else {
                continue;
            };
            chunks += 1;
            let chunk = rerun::log::Chunk::from_arrow_msg(&arrow).expect("a valid chunk");
            let path = chunk.entity_path().to_string();
            let e = out
                .entry(path.trim_start_matches('/').to_string())
                .or_default();
            e.rows += chunk.num_rows();
            if chunk.is_static() {
                e.static_rows += chunk.num_rows();
            }
            for d in chunk.component_descriptors() {
                let n = chunk
                    .raw_component_array(d.component)
                    .map_or(0, |a| a.len());
                *e.instances.entry(d.component.to_string()).or_default() += n;
            }
            for (name, col) in chunk.timelines() {
                e.timelines.insert(name.to_string());
                if name.as_str() == timelines::SIM_TIME {
                    e.sim_time.extend_from_slice(col.times_raw());
                }
                if name.as_str() == timelines::EPISODE {
                    e.episodes.extend_from_slice(col.times_raw());
                }
            }
        }
        assert!(chunks > 0, "no data chunks in {}", path.display());
        out
    }

    /// What the executor reported, to compare the file against.
    #[derive(Default)]
    struct Seen {
        points: BTreeMap<Ability, usize>,
        /// Questions per ability (REG is asked again for an "in / on" target).
        asks: BTreeMap<Ability, usize>,
        reasoning: BTreeSet<Ability>,
        states: usize,
        moves: usize,
        move_seconds: f64,
        trace_points: usize,
        grasps: usize,
        places: usize,
        frames: usize,
    }

    #[test]
    fn a_saved_run_reads_back_with_every_stage() {
        let dir = std::env::temp_dir().join(format!("pointact-viz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("run.rrd");
        let mut viz = Viz::open("pointact-test", &Sink::Save(file.clone())).unwrap();
        let spec = tasks::task(tasks::DEFAULT_TASK).unwrap();
        let mut seen = Seen::default();
        let mut successes = Vec::new();
        for branch in [Branch::Affordance, Branch::Trace] {
            viz.begin_episode(&format!("{} {branch:?}", spec.full_id()));
            let ep = spec.instantiate(0).unwrap();
            let opts = EpisodeOptions {
                branch,
                ..Default::default()
            };
            let result = crate::tests::common::block_on(run_episode(&ep, &opts, &mut |e| {
                match &e {
                    Event::Captured(_) => seen.frames += 1,
                    Event::Asked {
                        ability, pointing, ..
                    } => {
                        *seen.points.entry(*ability).or_default() += pointing.points_px().len();
                        *seen.asks.entry(*ability).or_default() += 1;
                        if pointing.answer.reasoning.is_some() {
                            seen.reasoning.insert(*ability);
                        }
                    }
                    Event::Robot { .. } => seen.states += 1,
                    Event::Moved { states, .. } => seen.states += states.len(),
                    Event::Planned(plan) => {
                        for s in &plan.steps {
                            if let Step::Move { trajectory, .. } = s {
                                seen.moves += 1;
                                seen.move_seconds += trajectory.duration();
                            }
                        }
                        seen.trace_points += plan.targets.trace.len();
                        seen.grasps += plan.targets.grasp.is_some() as usize;
                        seen.places += plan.targets.place.is_some() as usize;
                    }
                    _ => {}
                }
                viz.on_event(&e);
            }))
            .unwrap();
            viz.log_outcome(result.success, &result.detail);
            successes.push(result.success);
        }
        viz.finish().unwrap();
        assert_eq!(successes, [true, true], "both episodes should succeed");
        // Each episode: one frame to plan from, one to check the result with.
        assert_eq!(seen.frames, 4);

        let rrd = read_rrd(&file);
        let get = |p: &str| {
            rrd.get(p)
                .unwrap_or_else(|| panic!("no entity {p} in the file; it has {:?}", rrd.keys()))
        };

        // Camera: one RGB image, depth (with its meter), pinhole and extrinsics per frame.
        let rgb = get(paths::RGB);
        assert_eq!(rgb.count("Image:buffer"), seen.frames);
        let depth = get(paths::DEPTH);
        assert_eq!(depth.count("DepthImage:buffer"), seen.frames);
        assert_eq!(depth.count("DepthImage:meter"), seen.frames);
        assert_eq!(
            get(paths::PINHOLE).count("Pinhole:image_from_camera"),
            seen.frames
        );
        assert_eq!(get(paths::PINHOLE).count("Pinhole:camera_xyz"), seen.frames);
        assert_eq!(
            get(paths::CAMERA).count("Transform3D:translation"),
            seen.frames
        );
        assert!(rgb.timelines.contains(timelines::SIM_TIME));

        // Every answer's points, labelled, per ability; the VTG trace as a line.
        for (ability, n) in &seen.points {
            let e = get(&paths::points_2d(ability.as_str()));
            assert_eq!(e.count("Points2D:positions"), *n, "{ability:?}");
            assert_eq!(e.count("Points2D:labels"), *n, "{ability:?}");
        }
        assert!(seen.points.contains_key(&Ability::Reg) && seen.points.contains_key(&Ability::Rrg));
        assert_eq!(seen.points[&Ability::Vtg], 8);
        assert_eq!(get(&paths::trace_2d("vtg")).count("LineStrips2D:strips"), 1);
        for ability in &seen.reasoning {
            assert_eq!(
                get(&paths::pointing(ability.as_str())).count("TextDocument:text"),
                seen.asks[ability],
                "{ability:?}: one document per question"
            );
        }
        assert!(!seen.reasoning.is_empty(), "the oracle writes reasoning");

        // Lifted 3D targets.
        assert_eq!(get(paths::GRASP).count("Points3D:positions"), seen.grasps);
        assert_eq!(get(paths::PLACE).count("Points3D:positions"), seen.places);
        assert_eq!(seen.trace_points, 8);
        assert_eq!(
            get(&format!("{}/points", paths::TRACE_3D)).count("Points3D:positions"),
            8
        );

        // The cloud: coloured points in the base frame.
        let cloud = get(paths::CLOUD);
        assert!(cloud.count("Points3D:positions") > 2 * 10_000);
        assert_eq!(
            cloud.count("Points3D:positions"),
            cloud.count("Points3D:colors")
        );

        // The robot: every URDF visual primitive once (static), link poses over time.
        let model = pointact::kinematics::RobotModel::builtin("xarm6").unwrap();
        let prefix = "world/robot/xarm6/";
        let shapes: usize = rrd
            .iter()
            .filter(|(p, _)| p.starts_with(prefix))
            .map(|(_, e)| {
                assert!(e.static_rows == e.rows || e.static_rows == 0);
                e.count("Boxes3D:half_sizes") + e.count("Cylinders3D:lengths")
            })
            .sum();
        assert_eq!(shapes, model.visual_shapes().len());
        let link6 = get(&paths::link("xarm6", "link6"));
        assert_eq!(link6.static_rows, 0);
        let poses = link6.count("Transform3D:translation");
        // At most one pose per 1/30 s of motion plus each step's last state, never every state.
        assert!(
            poses as f64 >= 30.0 * seen.move_seconds * 0.9 && poses < seen.states,
            "{poses} link poses for {:.1} s of motion and {} states",
            seen.move_seconds,
            seen.states
        );

        // Executed joint states: every state the robot reported, on the sim clock.
        for joint in &model.config.arm_joints {
            let e = get(&paths::joint(joint));
            assert_eq!(e.count("Scalars:scalars"), seen.states, "{joint}");
        }
        let j1 = get(&paths::joint("joint1"));
        let span_s =
            (j1.sim_time.iter().max().unwrap() - j1.sim_time.iter().min().unwrap()) as f64 * 1e-9;
        assert!(
            span_s >= seen.move_seconds,
            "states span {span_s:.2} s, motions last {:.2} s",
            seen.move_seconds
        );
        assert_eq!(
            get(paths::GRIPPER_WIDTH).count("Scalars:scalars"),
            seen.states
        );

        // The plan: one tool-path strip per motion, planned joints on their own timeline.
        assert_eq!(
            get(paths::PLAN_TCP).count("LineStrips3D:strips"),
            seen.moves
        );
        assert_eq!(get(paths::PLAN_STEPS).rows, 2);
        let planned = get(&paths::planned_joint("joint1"));
        assert!(planned.timelines.contains(timelines::PLAN_TIME));
        assert!(!planned.timelines.contains(timelines::SIM_TIME));
        assert!(planned.count("Scalars:scalars") as f64 >= seen.move_seconds / 0.05);

        // Timings, text, and the two episodes' outcomes.
        assert_eq!(get(&paths::timing("plan")).count("Scalars:scalars"), 2);
        assert_eq!(
            get(&paths::timing("pointer/vtg")).count("Scalars:scalars"),
            1
        );
        assert!(get(paths::LOG).count("TextLog:text") > 20);
        let outcome = get(paths::EVAL_SUCCESS);
        assert_eq!(outcome.count("Scalars:scalars"), 2);
        let mut episodes = outcome.episodes.clone();
        episodes.sort();
        assert_eq!(episodes, [0, 1]);

        std::fs::remove_dir_all(&dir).ok();
    }

    /// `train grpo --rerun`: each update's metrics on the `train_step` timeline, one row per
    /// update under `train/<name>`; a non-finite value is left out, not logged as NaN.
    #[test]
    fn training_metrics_are_scalars_on_the_train_step_timeline() {
        let dir = std::env::temp_dir().join(format!("pointact-viz-train-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("train.rrd");
        let mut viz = Viz::open("pointact-test", &Sink::Save(file.clone())).unwrap();
        for step in 1..=3u64 {
            viz.log_training(
                step,
                &[
                    ("reward".to_string(), 0.1 * step as f64),
                    ("point_rec/overall".to_string(), 0.2),
                    ("loss".to_string(), if step == 2 { f64::NAN } else { 1.0 }),
                ],
            );
        }
        viz.finish().unwrap();
        let e = read_rrd(&file);
        let reward = &e["train/reward"];
        assert_eq!(reward.rows, 3);
        assert!(reward.timelines.contains("train_step"), "{reward:?}");
        assert_eq!(e["train/point_rec/overall"].rows, 3);
        assert_eq!(e["train/loss"].rows, 2, "the NaN step is left out");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn a_dataset_episode_reads_back_as_video_frames_points_and_states() {
        use pointact::dataset::{
            Cell, Column, DatasetSpec, DatasetWriter, EpisodeInput, Feature, VideoOptions,
        };
        let dir = std::env::temp_dir().join(format!("pointact-viz-ds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = dir.join("ds");
        let key = "observation.images.front";
        let spec = DatasetSpec {
            fps: 10,
            robot_type: "xarm6".into(),
            features: vec![
                (
                    "observation.state".into(),
                    Feature::vector(&["j1", "gripper_width"]),
                ),
                ("pointact.plan_step".into(), Feature::int_scalar()),
                (key.into(), Feature::video(32, 24)),
            ],
            video: VideoOptions::default(),
        };
        let mut w = DatasetWriter::open(&root, &spec).unwrap();
        let points = serde_json::json!([
            {"ability": "Reg", "query": "the pepper", "points_px": [[10.0, 12.0]]},
            {"ability": "Vtg", "query": "the pepper", "points_px": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]}
        ]);
        for (e, n) in [(0usize, 4usize), (1, 7)] {
            let mut frames = |i: usize| Ok(vec![(40 * i + 9 * e) as u8; 32 * 24 * 3]);
            w.append(EpisodeInput {
                task: "put the pepper in the pan",
                frames: n,
                columns: vec![
                    (
                        "observation.state",
                        Column::F32((0..2 * n).map(|v| v as f32).collect()),
                    ),
                    ("pointact.plan_step", Column::I64((0..n as i64).collect())),
                ],
                videos: vec![(key, &mut frames)],
                extras: vec![
                    ("pointact/success".into(), Cell::Bool(true)),
                    ("pointact/detail".into(), Cell::Str("pepper in pan".into())),
                    ("pointact/points".into(), Cell::Str(points.to_string())),
                ],
            })
            .unwrap();
        }
        let ep = pointact::dataset::read::episode(&root, 1).unwrap();
        assert_eq!(ep.length, 7);
        assert_eq!(ep.state.len(), 14);
        assert_eq!(ep.plan_step.as_deref(), Some(&[0, 1, 2, 3, 4, 5, 6][..]));
        assert!(pointact::dataset::read::episode(&root, 2)
            .unwrap_err()
            .to_string()
            .contains("no episode 2"));

        let file = dir.join("view.rrd");
        let mut viz = Viz::open("pointact-test", &Sink::Save(file.clone())).unwrap();
        viz.log_dataset_episode(&ep);
        viz.finish().unwrap();
        let e = read_rrd(&file);
        let video = &e[&format!("dataset/{key}")];
        assert!(video.static_rows >= 1, "{video:?}");
        assert_eq!(
            video.rows - video.static_rows,
            7,
            "one frame reference per frame"
        );
        assert_eq!(
            e[&format!("dataset/{key}/points/reg")].count("Points2D:positions"),
            1
        );
        assert_eq!(
            e[&format!("dataset/{key}/points/vtg")].count("Points2D:positions"),
            3
        );
        assert_eq!(e["dataset/state/gripper_width"].rows, 7);
        assert_eq!(e["dataset/plan_step"].rows, 7);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn an_unwritable_file_is_a_clear_error() {
        let e = Viz::open(
            "pointact-test",
            &Sink::Save("/nonexistent-dir/for/sure/run.rrd".into()),
        )
        .err()
        .expect("cannot write there");
        assert!(e.to_string().contains("save:/nonexistent-dir"), "{e}");
    }
}

#[cfg(not(feature = "viz"))]
#[test]
fn without_the_feature_the_flag_says_so() {
    let e = pointact::viz::Viz::open("pointact-test", &pointact::viz::Sink::Spawn)
        .err()
        .expect("no rerun in this build");
    assert!(
        e.to_string().contains("built without the viz feature"),
        "{e}"
    );
}
