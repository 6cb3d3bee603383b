//! `pointact run --xarm` and `pointact emulate xarm --sim` as a user runs them, two processes:
//! what a robot run refuses before it touches the arm, and the emulator serving the simulator's
//! camera to the run, then judging the scene when it is stopped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

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

/// `emulate xarm --sim` on free ports; the lines it printed before `ready`.
struct Emulator {
    child: Child,
    lines: Vec<String>,
}

impl Emulator {
    fn start(scene: &str) -> Emulator {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pointact"))
            .args([
                "emulate",
                "xarm",
                "--sim",
                scene,
                "--port",
                "0",
                "--report-port",
                "0",
                "--rt-port",
                "0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the emulator");
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        let mut lines = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let mut l = String::new();
            if reader.read_line(&mut l).unwrap() == 0 {
                break;
            }
            lines.push(l.trim_end().to_string());
            if l.starts_with("ready") {
                break;
            }
        }
        // Keep reading stdout (the judge's verdict) on a thread so the child never blocks on it.
        let rest = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut reader, &mut s);
            s
        });
        std::mem::forget(rest);
        Emulator { child, lines }
    }

    fn field(&self, name: &str) -> String {
        let l = self
            .lines
            .iter()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no `{name}` line in {:?}", self.lines));
        l.split_whitespace().nth(1).unwrap().to_string()
    }
}

impl Emulator {
    /// The shipped xarm6 driver.toml with this emulator's report ports, written into `dir`.
    fn driver_file(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let port = |name: &str| self.field(name).rsplit(':').next().unwrap().to_string();
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
                    format!("state_report_port = {}", port("report"))
                } else if l.starts_with("realtime_report_port") {
                    format!("realtime_report_port = {}", port("real-time"))
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

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_simulated_emulator_serves_its_camera_to_a_robot_run_and_judges_on_ctrl_c() {
    let emu = Emulator::start("tabletop/pepper_in_pan");
    let camera = emu.field("camera");
    assert!(camera.starts_with("tcp:127.0.0.1:"), "{camera}");
    let command = emu.field("command");
    let dir = std::env::temp_dir().join(format!("pointact-cli-robot-{}", std::process::id()));
    let driver_path = emu.driver_file(&dir);
    // A pointer server that is not there: the run gets the camera's frame (served by the
    // emulator) and connects to the arm, then ends before any motion with the pointer's error.
    let o = pointact(&[
        "run",
        "--xarm",
        &command,
        "--driver",
        driver_path.to_str().unwrap(),
        "--camera",
        &camera,
        "--instruction",
        "put the pepper in the pan",
        "--pointer",
        "openai",
        "--endpoint",
        "http://127.0.0.1:1",
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{out}\n{err}");
    assert!(out.contains("camera    640x480"), "the served frame: {out}");
    assert!(out.contains("robot     xarm6 at"), "{out}");
    assert!(out.contains("speed scale 0.25"), "hardware default: {out}");
    assert!(err.contains("before any motion"), "{err}");
    assert!(err.contains("http://127.0.0.1:1"), "{err}");
    assert!(!out.lines().any(|l| l.starts_with("execute")), "{out}");

    // Ctrl-C: the emulator stops and the simulator judges the untouched scene: a failure.
    let mut emu = emu;
    let pid = emu.child.id() as i32;
    // SAFETY-free: `kill -INT` through the shell's utility, as a user's Ctrl-C.
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = emu.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the emulator did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
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
        .lines
        .iter()
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
