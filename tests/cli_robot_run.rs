//! `pointact run --xarm` and `pointact emulate xarm --sim` as a user runs them, two processes:
//! what a robot run refuses before it touches the arm, and the emulator serving the simulator's
//! camera to the run, then judging the scene when it is stopped.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::emulator::{EmulatorProcess, FREE_PORTS};
use common::openai_mock::{completion, Mock, Reply};

fn pointact(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .expect("run pointact")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Refused with `code`, no panic, no plan step executed, and stderr says each of `want`.
fn refused(args: &[&str], code: i32, want: &[&str]) {
    let o = pointact(args);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(!out.lines().any(|l| l.starts_with("execute")), "{out}");
    for w in want {
        assert!(err.contains(w), "{args:?}: `{w}` not in: {err}");
    }
}

#[test]
fn a_robot_run_refuses_what_it_cannot_do_safely_before_connecting() {
    // Port 1 on loopback: nothing listens, so reaching it would be a connection error instead.
    let xarm = ["run", "--xarm", "127.0.0.1:1"];
    let with = |extra: &[&'static str]| [&xarm[..], extra].concat();
    refused(&with(&[]), 1, &["--instruction"]);
    refused(
        &with(&["--instruction", "put the pepper in the pan"]),
        1,
        &["--calibration", "calibrate hand-eye"],
    );
    refused(
        &with(&[
            "--instruction",
            "put the pepper in the pan",
            "--pointer",
            "oracle",
        ]),
        1,
        &["ground truth", "--pointer qwen"],
    );
    refused(
        &with(&[
            "--instruction",
            "x",
            "--camera",
            "sim",
            "--pointer",
            "openai",
        ]),
        1,
        &["does not see this robot", "tcp:HOST:PORT"],
    );
    refused(
        &with(&["--instruction", "x", "--speed-scale", "1.5"]),
        2,
        &["--speed-scale", "(0, 1]"],
    );
    refused(
        &[
            "run",
            "--xarm",
            "h",
            "--robot",
            "widowx250",
            "--instruction",
            "x",
        ],
        1,
        &["does not match"],
    );
    // Robot-only flags without a robot: clap names what is missing.
    refused(&["run", "--yes"], 2, &["--xarm"]);
    refused(&["run", "--camera", "tcp:127.0.0.1:9"], 2, &["--xarm"]);
}

/// `--dataset` on a robot run: a folder holding another arm's dataset is refused once the camera
/// has given a frame and before the arm is connected (nothing listens at the address, so a
/// connection error would show that it got that far), and is left as it was; so is a dry run.
#[test]
fn a_robot_run_refuses_a_dataset_it_cannot_append_to_before_connecting() {
    use pointact::dataset::{Column, DatasetSpec, DatasetWriter, EpisodeInput, Feature};
    let tmp = common::TempDir::new("robot-dataset-refusal");
    // A frame of the simulator's camera, replayed as the robot's camera.
    let frames = tmp.join("frames");
    let mut sim = pointact::runner::open_camera(&"sim".parse().unwrap()).unwrap();
    pointact::camera::record::write_frame(&sim.capture().unwrap(), &frames.join("0000")).unwrap();
    // A WidowX 250's dataset.
    let ds = tmp.join("widowx");
    let spec = DatasetSpec {
        fps: 10,
        robot_type: "widowx250".into(),
        features: vec![
            ("observation.state".into(), Feature::vector(&["joint"])),
            ("observation.images.front".into(), Feature::video(16, 16)),
        ],
        video: Default::default(),
    };
    let mut writer = DatasetWriter::open(&ds, &spec).unwrap();
    writer
        .append(EpisodeInput {
            task: "pick",
            frames: 2,
            columns: vec![("observation.state", Column::F32(vec![0.0, 1.0]))],
            videos: vec![("observation.images.front", &mut |_| {
                Ok(vec![0; 16 * 16 * 3])
            })],
            extras: Vec::new(),
        })
        .unwrap();
    drop(writer);
    let before = common::read_tree(&ds);
    let camera = format!("replay:{}", frames.display());
    let mut run = pepper_in_pan_args("127.0.0.1:1", &camera, "http://127.0.0.1:1");
    run.extend(["--dataset", ds.to_str().unwrap()]);
    refused(
        &run,
        1,
        &["--dataset", "robot type \"widowx250\", not \"xarm6\""],
    );
    let o = pointact(&run);
    assert!(
        !text(&o.stderr).contains("connecting"),
        "{}",
        text(&o.stderr)
    );
    assert!(
        text(&o.stdout).contains("camera    640x480"),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(common::read_tree(&ds), before, "the dataset was touched");
    refused(
        &[&run[..], &["--dry-run"]].concat(),
        1,
        &["a --dry-run moves nothing"],
    );
    assert_eq!(common::read_tree(&ds), before, "the dataset was touched");
}

/// `run --xarm XARM --camera CAMERA`, "put the pepper in the pan", the openai pointer at `endpoint`.
fn pepper_in_pan_args<'a>(xarm: &'a str, camera: &'a str, endpoint: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--xarm",
        xarm,
        "--camera",
        camera,
        "--instruction",
        "put the pepper in the pan",
        "--pointer",
        "openai",
        "--endpoint",
        endpoint,
    ]
}

/// `emulate xarm --sim SCENE` on free ports.
struct Emulator(EmulatorProcess);

impl Emulator {
    fn start(scene: &str) -> Emulator {
        Emulator(EmulatorProcess::spawn(
            &[&["--sim", scene][..], &FREE_PORTS[..]].concat(),
        ))
    }

    /// The address printed after `name` in the banner (`camera`, `command`, …).
    fn field(&self, name: &str) -> String {
        let l = self
            .0
            .banner
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no `{name}` line in {}", self.0.banner));
        l.split_whitespace().nth(1).unwrap().to_string()
    }

    /// Ctrl-C (SIGINT, through `kill` as a shell would send it), then waits at most 60 s for the
    /// emulator to judge the scene and exit.
    fn interrupt(&mut self) -> std::process::ExitStatus {
        let child = &mut self.0.child;
        let pid = child.id().to_string();
        Command::new("kill").args(["-INT", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "the emulator did not stop on SIGINT"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `pointact run --xarm` on this emulator and its served camera, "put the pepper in the pan",
    /// the openai pointer at `endpoint`, plus `extra` (driver settings written into `dir`).
    fn run_pepper_in_pan(&self, dir: &std::path::Path, endpoint: &str, extra: &[&str]) -> Output {
        let command = self.field("command");
        let camera = self.field("camera");
        let driver = self.driver_file(dir);
        let mut args = pepper_in_pan_args(&command, &camera, endpoint);
        args.extend(["--driver", driver.to_str().unwrap()]);
        args.extend_from_slice(extra);
        pointact(&args)
    }

    /// The shipped xarm6 driver.toml with this emulator's report ports, written into `dir`.
    fn driver_file(&self, dir: &std::path::Path) -> std::path::PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let shipped = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("robot-configs/xarm6/driver.toml"),
        )
        .unwrap();
        let driver: String = shipped
            .lines()
            .map(|l| {
                if l.starts_with("state_report_port") {
                    format!("state_report_port = {}", self.0.report_port)
                } else if l.starts_with("realtime_report_port") {
                    format!("realtime_report_port = {}", self.0.rt_port)
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let path = dir.join("driver.toml");
        std::fs::write(&path, driver).unwrap();
        path
    }
}

#[test]
fn the_simulated_emulator_serves_its_camera_to_a_robot_run_and_judges_on_ctrl_c() {
    let mut emu = Emulator::start("tabletop/pepper_in_pan");
    let camera = emu.field("camera");
    assert!(camera.starts_with("tcp:127.0.0.1:"), "{camera}");
    let dir = std::env::temp_dir().join(format!("pointact-cli-robot-{}", std::process::id()));
    // A pointer server that is not there: the run gets the camera's frame (served by the
    // emulator) and connects to the arm, then ends before any motion with the pointer's error.
    let o = emu.run_pepper_in_pan(&dir, "http://127.0.0.1:1", &[]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(out.contains("camera    640x480"), "the served frame: {out}");
    assert!(out.contains("robot     xarm6 at"), "{out}");
    assert!(out.contains("speed scale 0.25"), "hardware default: {out}");
    assert!(err.contains("before any motion"), "{err}");
    assert!(err.contains("http://127.0.0.1:1"), "{err}");
    assert!(!out.lines().any(|l| l.starts_with("execute")), "{out}");

    // Ctrl-C: the emulator stops and the simulator judges the untouched scene: a failure.
    let status = emu.interrupt();
    assert_eq!(
        status.code(),
        Some(1),
        "judged a failure: the pepper never moved"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `calibrate hand-eye --xarm`: the camera-at hint is required, and a "no" at the prompt moves
/// nothing and writes nothing (the arm stays where the emulator started it).
#[test]
fn live_calibration_asks_before_moving_and_a_no_writes_nothing() {
    let emu = Emulator::start("calibration");
    let camera = emu.field("camera");
    let at = emu
        .0
        .banner
        .lines()
        .find(|l| l.starts_with("camera at"))
        .and_then(|l| l.split_whitespace().nth(2))
        .expect("the emulator prints where its camera is")
        .to_string();
    let command = emu.field("command");
    let dir = std::env::temp_dir().join(format!("pointact-cli-cal-{}", std::process::id()));
    let driver = emu.driver_file(&dir);
    let out = dir.join("cal");
    let base = [
        "calibrate",
        "hand-eye",
        "--xarm",
        &command,
        "--driver",
        driver.to_str().unwrap(),
        "--source",
        &camera,
        "--out",
        out.to_str().unwrap(),
    ];
    refused(&base, 1, &["--camera-at"]);
    let mut args = base.to_vec();
    args.extend(["--camera-at", &at]);
    // stdin is empty (end of input): the answer is no.
    let o = pointact(&args);
    let (stdout, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{stdout}\n{err}");
    assert!(stdout.contains("24 calibration views"), "{stdout}");
    assert!(err.contains("not approved: nothing moved"), "{err}");
    assert!(
        !out.join("front.toml").exists(),
        "a declined calibration wrote a file"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the oracle answered, in order: (reasoning-free) point lists in the frame's pixels.
struct Recorder {
    inner: pointact::sim::oracle::OraclePointer,
    answers: Vec<Vec<[f64; 2]>>,
}

impl pointact::pointing::Pointer for Recorder {
    fn name(&self) -> &str {
        "recorder"
    }

    fn point(
        &mut self,
        frame: &pointact::camera::Frame,
        ability: pointact::pointing::Ability,
        instruction: &str,
    ) -> Result<pointact::pointing::Pointing, pointact::pointing::PointerError> {
        let p = self.inner.point(frame, ability, instruction)?;
        self.answers.push(p.points_px());
        Ok(p)
    }
}

/// The replies an Embodied-R1 server would give for `task` seed 0: the oracle's points for the
/// same seeded scene (planned in this process, nothing moved), in the model's resized pixels.
fn embodied_r1_replies(task: &str) -> Vec<String> {
    use pointact::executor::Branch;
    use pointact::pointing::{ImageSize, ModelImageMap};
    use pointact::runner::{prepare_episode, run_task};
    use pointact::safety::SafetyConfig;
    use pointact::sim::devices::{SimCamera, SimRobot};
    use pointact::vlm::DEFAULT_MIN_PIXELS;
    use pointact::vlm::PRETRAINED_MAX_PIXELS;
    let ep = pointact::sim::tasks::task(task)
        .unwrap()
        .instantiate(0)
        .unwrap();
    let prepared = prepare_episode(&ep).unwrap();
    let home = prepared.model.home().to_vec();
    let mut robot = SimRobot::new(prepared.world.clone(), prepared.model.clone(), home).unwrap();
    let mut camera = SimCamera::new(prepared.world.clone(), Default::default());
    let (w, h) = {
        let i = &camera.pinhole().intrinsics;
        (i.width as u32, i.height as u32)
    };
    let mut pointer = Recorder {
        inner: pointact::sim::oracle::OraclePointer::new(prepared.truth, Default::default()),
        answers: Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run_task(
        &mut robot,
        &mut camera,
        &mut pointer,
        &ep.instruction,
        Branch::Affordance,
        SafetyConfig {
            dry_run: true,
            ..SafetyConfig::default()
        },
        &mut |_| true,
        &mut |_| {},
    ))
    .unwrap();
    let map = ModelImageMap::for_qwen25vl(
        ImageSize::new(w, h),
        DEFAULT_MIN_PIXELS,
        PRETRAINED_MAX_PIXELS,
    )
    .unwrap();
    assert!(!pointer.answers.is_empty());
    pointer
        .answers
        .iter()
        .map(|pts| {
            let list: Vec<String> = pts
                .iter()
                .map(|p| {
                    let m = map.to_model(*p);
                    format!("[{}, {}]", m[0].round(), m[1].round())
                })
                .collect();
            format!(
                "<think>As seen.</think><answer><point>[{}]</point></answer>",
                list.join(", ")
            )
        })
        .collect()
}

/// An Embodied-R1 stand-in on 127.0.0.1 (`common::openai_mock`) that gives `replies` in order,
/// `runs` times over (a declined run asks the same questions again); returns its endpoint.
fn pointer_server(replies: &[String], runs: usize) -> String {
    let canned = (0..runs)
        .flat_map(|_| replies.iter().map(|r| Reply::Http(200, completion(r))))
        .collect();
    Mock::start(canned).base
}

/// The whole physical path as a user runs it, two processes: `emulate xarm --sim` (the simulator's
/// arm behind the controller emulator, its camera served over TCP) and `run --xarm … --camera tcp:…
/// --pointer openai --dataset D` (a pointer server answering as Embodied-R1 would): declined at the
/// prompt (nothing moves, nothing kept), then confirmed with --yes; the run is kept as a dataset
/// episode with the camera's depth (checked in `the_robot_run_is_kept_as_it_happened`); Ctrl-C
/// makes the emulator judge the scene: the pepper is in the pan.
#[test]
fn a_whole_task_across_processes_is_judged_a_success_by_the_simulator() {
    let endpoint = pointer_server(&embodied_r1_replies("tabletop/pepper_in_pan"), 2);
    let mut emu = Emulator::start("tabletop/pepper_in_pan");
    let dir = std::env::temp_dir().join(format!("pointact-cli-whole-{}", std::process::id()));
    let ds = dir.join("dataset");
    let dataset = [
        "--dataset",
        ds.to_str().unwrap(),
        "--dataset-fps",
        "5",
        "--dataset-depth",
    ];
    // First without --yes and nothing on stdin: the plan is shown, the answer is no, nothing moves.
    let o = emu.run_pepper_in_pan(
        &dir,
        &endpoint,
        &[&["--speed-scale", "1"][..], &dataset].concat(),
    );
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}\n{}", text(&o.stderr));
    assert!(out.contains("[y/N]"), "{out}");
    assert!(
        out.contains("outcome   not approved: nothing moved"),
        "{out}"
    );
    assert!(
        out.contains("dataset   episode left out: nothing moved"),
        "{out}"
    );
    assert!(!out.lines().any(|l| l.starts_with("execute")), "{out}");
    // What the camera shows before and after the run, to compare the episode's video with.
    let mut camera = pointact::camera::open(&emu.field("camera").parse().unwrap()).unwrap();
    let before = camera.capture().unwrap();
    let o = emu.run_pepper_in_pan(
        &dir,
        &endpoint,
        &[&["--yes", "--speed-scale", "1"][..], &dataset].concat(),
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(out.contains("outcome   DONE"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("execute")), "{out}");
    let after = camera.capture().unwrap();
    drop(camera);
    the_robot_run_is_kept_as_it_happened(&ds, &out, &before, &after);
    let status = emu.interrupt();
    assert_eq!(
        status.code(),
        Some(0),
        "the simulator judged the task a failure\n{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C during motion: the run stops the arm (the controller is left in state 4, "stopped",
/// which only a stop command or an error puts it in) and exits 130, saying so.
#[test]
fn ctrl_c_during_a_motion_stops_the_arm_and_exits_130() {
    use pointact::robot::xarm::proto::RobotState;
    use pointact::robot::xarm::XarmClient;
    use std::io::{BufRead, BufReader};
    let endpoint = pointer_server(&embodied_r1_replies("tabletop/pepper_in_pan"), 1);
    let emu = Emulator::start("tabletop/pepper_in_pan");
    let dir = std::env::temp_dir().join(format!("pointact-cli-ctrlc-{}", std::process::id()));
    let driver = emu.driver_file(&dir);
    let (command, camera) = (emu.field("command"), emu.field("camera"));
    let mut run = Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args([
            "run",
            "--xarm",
            &command,
            "--driver",
            driver.to_str().unwrap(),
        ])
        .args([
            "--camera",
            &camera,
            "--instruction",
            "put the pepper in the pan",
        ])
        .args(["--pointer", "openai", "--endpoint", &endpoint, "--yes"])
        // Slow, so the signal lands in the middle of the first motion.
        .args(["--speed-scale", "0.1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(run.stdout.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut l = String::new();
        assert!(
            out.read_line(&mut l).unwrap() > 0,
            "the run ended early:\n{seen}"
        );
        seen.push_str(&l);
        if l.starts_with("execute  0") {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(700));
    Command::new("kill")
        .args(["-INT", &run.id().to_string()])
        .status()
        .unwrap();
    let status = run.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut run.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{seen}\n{err}");
    assert!(err.contains("Ctrl-C: the arm was stopped"), "{err}");
    // A fresh connection sees what the run left behind: a controller told to stop.
    let settings = pointact::robot::settings::load(&driver).unwrap();
    let mut s = settings.as_xarm().unwrap().clone();
    s.network.command_port = emu.0.command_port;
    let model = pointact::kinematics::RobotModel::builtin("xarm6").unwrap();
    let state = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut c = XarmClient::connect(&s, &model.config.gripper)
                .await
                .unwrap();
            c.state().await.unwrap()
        });
    assert_eq!(state, RobotState::Stopped);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `pointact emulate widowx` prints the pseudo-terminal of its bus, and the WidowX driver opens it
/// and reads the arm at home.
#[test]
fn pointact_emulate_widowx_prints_a_pty_the_driver_can_open() {
    let (mut child, path) = emulate_widowx(30);
    let mut s = pointact::robot::settings::builtin("widowx250")
        .unwrap()
        .as_dynamixel()
        .unwrap()
        .clone();
    s.bus.serial_port = path;
    s.bus.timeout_s = 0.5;
    let m = std::sync::Arc::new(pointact::kinematics::RobotModel::builtin("widowx250").unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async {
        use pointact::robot::Robot as _;
        let mut w = pointact::robot::dynamixel::widowx::WidowX::connect(&s, m.clone()).await?;
        w.joint_positions().await
    });
    let _ = child.kill();
    let _ = child.wait();
    let q = result.unwrap();
    // One encoder tick of a Dynamixel X servo.
    let tick = std::f64::consts::TAU / 4096.0;
    for (a, b) in q.iter().zip(m.home()) {
        assert!((a - b).abs() <= tick);
    }
}

/// The one episode of the 5 fps dataset at `ds`, kept by a run of `robot_type` whose stdout is
/// `out` (which says how many frames it appended).
fn the_one_episode(
    ds: &std::path::Path,
    out: &str,
    robot_type: &str,
) -> pointact::dataset::read::EpisodeFrames {
    use pointact::dataset::read;
    let summary = read::summary(ds).unwrap();
    assert_eq!(summary.episodes.len(), 1, "{out}");
    assert_eq!(summary.info.robot_type.as_deref(), Some(robot_type));
    assert_eq!(summary.info.fps, 5);
    let ep = read::episode(ds, 0).unwrap();
    let line = format!("dataset   episode appended ({} frames)", ep.length);
    assert!(out.contains(&line), "{out}");
    ep
}

/// How far the joints of `model` went over the dataset rows `rows` (states, the finger gap last),
/// frames `frame_s` apart: the sum of each frame's largest joint step. No joint may move more
/// than half again what its velocity limit allows in a frame: a jump is a recording fault.
fn joint_travel(model: &pointact::kinematics::RobotModel, rows: &[&[f32]], frame_s: f64) -> f64 {
    let vmax = model
        .joint_limits()
        .iter()
        .map(|j| j.velocity)
        .fold(0.0, f64::max);
    let joints = model.joint_limits().len();
    let mut travel = 0.0;
    for w in rows.windows(2) {
        let step = (0..joints)
            .map(|j| (w[1][j] - w[0][j]).abs() as f64)
            .fold(0.0, f64::max);
        assert!(
            step <= vmax * frame_s * 1.5,
            "a joint jumped {step} rad in one frame"
        );
        travel += step;
    }
    travel
}

/// The episode `run --xarm --dataset` kept of the run whose stdout is `out`: one episode of the
/// instruction, its frames those of the motion at the dataset's 5 fps (the arm's joints never jump
/// between frames, the plan's steps in order to the last, the fingers closing on the pepper and
/// opening again), the camera's verdict and the points asked; its videos (colour and depth)
/// start with what the camera showed `before` the run and end with what it showed `after`.
fn the_robot_run_is_kept_as_it_happened(
    ds: &std::path::Path,
    out: &str,
    before: &pointact::camera::Frame,
    after: &pointact::camera::Frame,
) {
    let ep = the_one_episode(ds, out, "xarm6");
    assert_eq!(ep.task, "put the pepper in the pan");
    // The plan's length as the confirmation printed it.
    let steps: usize = out
        .lines()
        .find_map(|l| l.split("execute these ").nth(1))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no plan length in {out}"));
    let plan_step = ep.plan_step.clone().unwrap();
    assert_eq!(plan_step[0], 0, "{plan_step:?}");
    assert_eq!(
        *plan_step.last().unwrap(),
        steps as i64 - 1,
        "{plan_step:?}"
    );
    assert!(plan_step.windows(2).all(|w| w[0] <= w[1]), "{plan_step:?}");
    // At speed scale 1 the plan takes seconds: many frames, each a 0.2 s slice of the motion.
    assert!(ep.length >= 15, "{} frames", ep.length);
    let width = ep.state_names.len();
    assert_eq!(width, 7, "{:?}", ep.state_names);
    let rows: Vec<&[f32]> = ep.state.chunks(width).collect();
    let model = pointact::kinematics::RobotModel::builtin("xarm6").unwrap();
    let travel = joint_travel(&model, &rows, 0.2);
    assert!(travel > 1.0, "the arm hardly moved: {travel} rad");
    let gripper = model.config.gripper;
    let widths: Vec<f64> = rows.iter().map(|r| r[6] as f64).collect();
    assert!(
        (widths[0] - gripper.open_width).abs() < 0.005,
        "open at the start: {widths:?}"
    );
    let narrowest = widths.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(
        narrowest < gripper.open_width - 0.01,
        "never closed: {widths:?}"
    );
    assert!(
        *widths.last().unwrap() > narrowest + 0.005,
        "never let go: {widths:?}"
    );
    let verified = out.contains("verified by camera:");
    assert_eq!(ep.success, Some(verified), "{out}");
    assert!(!ep.detail.clone().unwrap_or_default().is_empty());
    let points = ep.points.clone().unwrap();
    assert!(!points.as_array().unwrap().is_empty(), "{points}");

    // The video: its first frame is the camera before the run, its last the camera after it.
    let Some(py) = common::python::interpreter("av", "av==18.1.0", "the robot run's video") else {
        return;
    };
    the_depth_video_shows_the_run(&py, ds, ep.length, before, after);
    let (before, after) = (&before.rgb, &after.rgb);
    let (_, video, from) = &ep.videos[0];
    assert_eq!(*from, 0.0);
    let (w, h) = before.dimensions();
    let psnr = |reference: &image::RgbImage| -> Vec<f64> {
        let raw = ds.join("reference.rgb");
        std::fs::write(&raw, reference.as_raw().repeat(ep.length)).unwrap();
        let report = common::python::video_report(
            &py,
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dataset_video.py"),
            video,
            &raw,
            (w, h),
        );
        let _ = std::fs::remove_file(&raw);
        assert_eq!(
            report["frames"].as_u64(),
            Some(ep.length as u64),
            "{report}"
        );
        report["psnr_db"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_f64().unwrap_or(f64::INFINITY))
            .collect()
    };
    let (to_before, to_after) = (psnr(before), psnr(after));
    let last = ep.length - 1;
    eprintln!(
        "{} frames; PSNR to before: first {:.1}, last {:.1} dB; to after: first {:.1}, last {:.1} dB",
        ep.length, to_before[0], to_before[last], to_after[0], to_after[last]
    );
    assert!(to_before[0] > 30.0, "first frame vs before: {to_before:?}");
    assert!(to_after[last] > 30.0, "last frame vs after: {to_after:?}");
    assert!(
        to_before[0] > to_after[0] + 3.0,
        "{to_before:?} {to_after:?}"
    );
    assert!(
        to_after[last] > to_before[last] + 3.0,
        "{to_before:?} {to_after:?}"
    );
}

/// The depth video of the one-episode dataset at `ds` (`frames` frames), decoded by PyAV as lerobot
/// decodes a depth map: its first frame holds the codes of the camera's depth `before` the run,
/// its last those of the depth `after` it (lossless video, so equal but for the few pixels where
/// the arm stood at the instant each was taken), and the run in between differs from both.
fn the_depth_video_shows_the_run(
    py: &std::ffi::OsString,
    ds: &std::path::Path,
    frames: usize,
    before: &pointact::camera::Frame,
    after: &pointact::camera::Frame,
) {
    use pointact::dataset::depth::DepthQuantizer;
    let video = ds.join("videos/observation.images.front_depth/chunk-000/file-000.mp4");
    assert!(video.exists(), "no depth video at {}", video.display());
    let (w, h) = before.rgb.dimensions();
    let mismatched = |frame: &pointact::camera::Frame| -> Vec<u64> {
        let mut codes = vec![0u16; frame.depth.data.len()];
        DepthQuantizer::default().quantize(&frame.depth.data, &mut codes);
        let bytes: Vec<u8> = codes.iter().flat_map(|c| c.to_le_bytes()).collect();
        let raw = ds.join("reference.u16");
        std::fs::write(&raw, bytes.repeat(frames)).unwrap();
        let report = common::python::video_report(
            py,
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dataset_depth_video.py"),
            &video,
            &raw,
            (w, h),
        );
        let _ = std::fs::remove_file(&raw);
        assert_eq!(report["frames"].as_u64(), Some(frames as u64), "{report}");
        assert_eq!(report["pix_fmt"], "gray12le", "{report}");
        report["mismatched_per_frame"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_u64().unwrap())
            .collect()
    };
    let (to_before, to_after) = (mismatched(before), mismatched(after));
    let last = frames - 1;
    let pixels = (w * h) as u64;
    eprintln!(
        "depth codes differing from before: first {}, last {}; from after: first {}, last {} (of {pixels})",
        to_before[0], to_before[last], to_after[0], to_after[last]
    );
    assert!(
        to_before[0] * 100 <= pixels,
        "first vs before: {to_before:?}"
    );
    assert!(
        to_after[last] * 100 <= pixels,
        "last vs after: {to_after:?}"
    );
    assert!(to_before[0] < to_after[0], "{to_before:?} {to_after:?}");
    assert!(
        to_after[last] < to_before[last],
        "{to_before:?} {to_after:?}"
    );
    assert!(
        (1..last).any(|i| to_before[i] > to_before[0] && to_after[i] > to_after[last]),
        "no frame of the run differs from both ends: {to_before:?} {to_after:?}"
    );
}

/// `pointact emulate widowx --seconds SECONDS` and the pseudo-terminal it printed.
fn emulate_widowx(seconds: u32) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(["emulate", "widowx", "--seconds", &seconds.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let path = line.trim().to_string();
    if !path.starts_with("/dev/pts/") {
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        panic!(
            "printed {line:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (child, path)
}

/// A frame server on a free loopback port (the `tcp:` camera) that answers every request with
/// `frame`, until the returned sender is dropped.
fn serve_still_frame(frame: pointact::camera::Frame) -> (String, std::sync::mpsc::Sender<()>) {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap().to_string()).unwrap();
            let shutdown = async move {
                let _ = tokio::task::spawn_blocking(move || stopped.recv()).await;
            };
            pointact::camera::net::serve(listener, 4, move || Ok(frame.clone()), shutdown).await;
        });
    });
    (format!("tcp:{}", rx.recv().unwrap()), stop)
}

/// A WidowX 250 run kept as a dataset, end to end: `emulate widowx` (the servo bus), a camera
/// serving the simulator's frame of "put carrot on plate" (bridge suite, seed 0), an
/// Embodied-R1 stand-in answering with that scene's points, and `run --widowx PTY --dataset D
/// --dataset-depth`. The bus emulator holds no carrot, so the fingers close on nothing: the run
/// looks again, tries once more, and ends in an error. The run moved, so it is kept, as a
/// failure in the WidowX's terms: its robot type, its joints and the finger gap, plan steps
/// counted from each plan's start, joints that never jump between frames, fingers that close and
/// open; the camera never changes, so every depth frame decodes to that frame's codes exactly.
#[test]
fn a_widowx_run_is_kept_as_a_dataset() {
    let tmp = common::TempDir::new("widowx-dataset");
    let task = "bridge/carrot_on_plate";
    let mut sim = pointact::runner::open_camera(&format!("sim:{task}").parse().unwrap()).unwrap();
    let shown = sim.capture().unwrap();
    let (camera, _server) = serve_still_frame(shown);
    // The frame as the run's camera receives it (the wire carries depth in 0.1 mm steps).
    let shown = pointact::camera::open(&camera.parse().unwrap())
        .unwrap()
        .capture()
        .unwrap();
    // Both attempts ask the same questions of the same picture.
    let endpoint = pointer_server(&embodied_r1_replies(task), 2);
    let (mut bus, pty) = emulate_widowx(240);
    let ds = tmp.join("dataset");
    let o = pointact(&[
        "run",
        "--widowx",
        &pty,
        "--camera",
        &camera,
        "--instruction",
        "put carrot on plate",
        "--pointer",
        "openai",
        "--endpoint",
        &endpoint,
        "--yes",
        "--speed-scale",
        "1",
        "--dataset",
        ds.to_str().unwrap(),
        "--dataset-fps",
        "5",
        "--dataset-depth",
    ]);
    let _ = bus.kill();
    let _ = bus.wait();
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(out.contains("retry     attempt 2: grasp failed"), "{out}");
    assert!(err.contains("nothing is held"), "{err}");
    let ep = the_one_episode(&ds, &out, "widowx250");
    assert_eq!(ep.task, "put carrot on plate");
    assert!(ep.length >= 10, "{} frames", ep.length);
    let model = pointact::kinematics::RobotModel::builtin("widowx250").unwrap();
    let width = ep.state_names.len();
    assert_eq!(
        width,
        model.joint_limits().len() + 1,
        "{:?}",
        ep.state_names
    );
    assert_eq!(ep.success, Some(false));
    let detail = ep.detail.clone().unwrap_or_default();
    assert!(detail.contains("the run failed"), "{detail}");
    // Each plan counts its steps from 0: the first runs to its grasp (step 3, "close on the
    // object") before the miss is seen, and a new plan starts at 0 again.
    let plan_step = ep.plan_step.clone().unwrap();
    assert_eq!(plan_step[0], 0, "{plan_step:?}");
    assert!(
        plan_step.iter().all(|&s| (0..10).contains(&s)),
        "{plan_step:?}"
    );
    let restarts = plan_step.windows(2).filter(|w| w[1] < w[0]).count();
    assert!(restarts >= 1, "one plan only: {plan_step:?}");
    assert!(plan_step.contains(&3), "{plan_step:?}");
    let rows: Vec<&[f32]> = ep.state.chunks(width).collect();
    let travel = joint_travel(&model, &rows, 0.2);
    assert!(travel > 0.5, "the arm hardly moved: {travel} rad");
    let gripper = model.config.gripper;
    let widths: Vec<f64> = rows.iter().map(|r| r[width - 1] as f64).collect();
    let narrowest = widths.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!((widths[0] - gripper.open_width).abs() < 0.005, "{widths:?}");
    assert!(narrowest < 0.005, "never closed on nothing: {widths:?}");
    // The fingers closed twice, once per attempt, opening in between.
    let open = |w: f64| w > gripper.open_width - 0.005;
    let closings = widths
        .windows(2)
        .filter(|p| open(p[0]) && !open(p[1]))
        .count();
    assert_eq!(closings, 2, "{widths:?}");
    // Every depth frame is the replayed frame's depth, code for code.
    let Some(py) = common::python::interpreter("av", "av==18.1.0", "the WidowX run's depth video")
    else {
        return;
    };
    let video = ds.join("videos/observation.images.front_depth/chunk-000/file-000.mp4");
    let mut codes = vec![0u16; shown.depth.data.len()];
    pointact::dataset::depth::DepthQuantizer::default().quantize(&shown.depth.data, &mut codes);
    let raw = tmp.join("codes.u16");
    let bytes: Vec<u8> = codes.iter().flat_map(|c| c.to_le_bytes()).collect();
    std::fs::write(&raw, bytes.repeat(ep.length)).unwrap();
    let (w, h) = shown.rgb.dimensions();
    let report = common::python::video_report(
        &py,
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/dataset_depth_video.py"),
        &video,
        &raw,
        (w, h),
    );
    assert_eq!(
        report["frames"].as_u64(),
        Some(ep.length as u64),
        "{report}"
    );
    assert_eq!(report["mismatched"].as_u64(), Some(0), "{report}");
}
