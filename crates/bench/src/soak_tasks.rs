//! `pointact bench soak --target xarm-tasks`: the simulator's xArm 6 behind the controller
//! emulator and its camera on a frame server (what `pointact emulate xarm --sim` runs), kept up
//! while `pointact run --xarm` runs one task after another against it, each run a process of its
//! own as a user starts it.
//!
//! The pointer is an OpenAI-compatible endpoint in this process that answers as Embodied-R1 would:
//! each question the run asks (the same questions a dry run of the task asks, in order) is answered
//! by the simulator's oracle on the scene as it is at that moment, in the model's resized pixels.
//! After each run the simulator judges the task and the objects go back where they started, so
//! every run does the same task from wherever the arm ended.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::soak::{Closed, SoakError, Soaked, Window};
use crate::camera::{Camera, Frame};
use crate::executor::Branch;
use crate::kinematics::RobotModel;
use crate::nalgebra::Isometry3;
use crate::pointing::{Ability, ImageSize, ModelImageMap, Pointer, PointerError, Pointing};
use crate::robot::xarm::emulator::{EmulatorOptions, EmulatorThread};
use crate::runner::{prepare_episode, run_task};
use crate::safety::SafetyConfig;
use crate::sim::devices::{SharedWorld, SimArm, SimCamera, SimRobot};
use crate::sim::oracle::{OracleOptions, OraclePointer};
use pointact_vlm::{DEFAULT_MIN_PIXELS, PRETRAINED_MAX_PIXELS};

/// The task every run does.
const TASK: &str = "tabletop/pepper_in_pan";
/// A run that takes longer than this is killed and counted as an error.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs `tasks` tasks in `windows` windows of at most `window` each.
pub(crate) fn tasks(tasks: u64, windows: usize, window: Duration) -> Result<Soaked, SoakError> {
    let setup = |e: &dyn std::fmt::Display| SoakError::Setup(e.to_string());
    let episode = crate::sim::tasks::task(TASK)
        .and_then(|t| t.instantiate(0))
        .map_err(|e| setup(&e))?;
    let prepared = prepare_episode(&episode).map_err(|e| setup(&e))?;
    let world = prepared.world.clone();
    let model = prepared.model.clone();
    let start_poses = object_poses(&world);
    let questions = questions(&world, &model, &prepared.truth, &episode.instruction)?;

    // What `emulate xarm --sim` serves: the controller and the camera.
    let arm =
        SimArm::new(world.clone(), model.clone(), model.home().to_vec()).map_err(|e| setup(&e))?;
    let emulator = EmulatorThread::start(
        EmulatorOptions {
            command_port: 0,
            report_port: 0,
            rt_port: 0,
            ..EmulatorOptions::default()
        },
        Box::new(arm),
    )
    .map_err(|e| setup(&e))?;
    let camera = FrameServer::start(&world)?;
    let oracle = Arc::new(Mutex::new(LiveOracle {
        camera: SimCamera::new(world.clone(), Default::default()),
        oracle: OraclePointer::new(prepared.truth.clone(), OracleOptions::default()),
        questions,
        asked: 0,
    }));
    let pointer = PointerServer::start(oracle.clone())?;
    let dir = std::env::temp_dir().join(format!("pointact-soak-tasks-{}", std::process::id()));
    let driver = driver_file(&dir, &emulator)?;
    let exe = std::env::current_exe().map_err(|e| setup(&e))?;
    let target = format!(
        "xArm emulator with the simulator's arm and camera in process (command 127.0.0.1:{}, \
         camera {}), `pointact run --xarm` processes one after another, \"{}\" ({TASK}, seed 0), \
         {tasks} tasks",
        emulator.ports[0], camera.addr, episode.instruction
    );

    let per_window = tasks.div_ceil(windows as u64);
    let mut done = 0u64;
    let mut out = Closed::with_capacity(windows);
    for _ in 0..windows {
        if done >= tasks {
            break;
        }
        let began = Instant::now();
        let mut w = Window::default();
        let mut in_window = 0u64;
        while in_window < per_window && done < tasks && began.elapsed() < window {
            oracle.lock().unwrap_or_else(|p| p.into_inner()).asked = 0;
            let t0 = Instant::now();
            let result = run_once(
                &exe,
                &emulator,
                &camera.addr,
                &pointer.base,
                &driver,
                &episode.instruction,
            );
            w.latencies_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            done += 1;
            in_window += 1;
            match result {
                Ok(()) => {
                    let mut wl = world.lock();
                    let j = crate::sim::judge(&mut wl, &episode);
                    if j.success {
                        w.ops += 1;
                    } else {
                        w.error(format!("task {done}: judged a failure: {}", j.detail));
                    }
                }
                Err(e) => w.error(format!("task {done}: {e}")),
            }
            if let Err(e) = restore(&world, &start_poses) {
                w.error(format!("resetting the scene: {e}"));
            }
        }
        w.close(began.elapsed().as_secs_f64());
        out.push(w);
    }
    drop(pointer);
    drop(camera);
    drop(emulator);
    let _ = std::fs::remove_dir_all(&dir);
    Ok((
        target,
        "one task: `run --xarm` process start to exit (ms)",
        None,
        out.into_windows(),
    ))
}

/// One `pointact run --xarm` process; Ok when it exits 0 having said `outcome   DONE`.
fn run_once(
    exe: &Path,
    emulator: &EmulatorThread,
    camera: &str,
    endpoint: &str,
    driver: &Path,
    instruction: &str,
) -> Result<(), String> {
    let mut child = Command::new(exe)
        .args(["run", "--xarm"])
        .arg(format!("127.0.0.1:{}", emulator.ports[0]))
        .arg("--driver")
        .arg(driver)
        .args(["--camera", camera, "--instruction", instruction])
        .args(["--pointer", "openai", "--endpoint", endpoint])
        .args(["--yes", "--speed-scale", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting `pointact run`: {e}"))?;
    // Both pipes drained on threads, so a chatty run cannot block on a full pipe.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "no exit within {} s: killed",
                    RUN_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("waiting for `pointact run`: {e}")),
        }
    };
    let (out, err) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    if status.success() && out.contains("outcome   DONE") {
        Ok(())
    } else {
        let last = |s: &str| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .to_string()
        };
        Err(format!(
            "`pointact run` exited {status}: {} | {}",
            last(&out),
            last(&err)
        ))
    }
}

fn object_poses(world: &SharedWorld) -> Vec<(String, Isometry3<f64>)> {
    let w = world.lock();
    w.object_names()
        .into_iter()
        .filter_map(|n| w.object_pose(n).map(|p| (n.to_string(), p)))
        .collect()
}

/// Puts every object back where it started and lets the scene settle.
fn restore(world: &SharedWorld, poses: &[(String, Isometry3<f64>)]) -> Result<(), String> {
    let mut w = world.lock();
    for (name, pose) in poses {
        w.set_object_pose(name, pose).map_err(|e| e.to_string())?;
    }
    w.settle(2.0);
    Ok(())
}

/// The questions a run of `instruction` asks, in order: a dry run in this process, before the
/// emulator owns the arm (nothing moves).
fn questions(
    world: &SharedWorld,
    model: &Arc<RobotModel>,
    truth: &crate::sim::oracle::OracleTruth,
    instruction: &str,
) -> Result<Vec<(Ability, String)>, SoakError> {
    let setup = |e: &dyn std::fmt::Display| SoakError::Setup(e.to_string());
    let mut robot = SimRobot::new(world.clone(), model.clone(), model.home().to_vec())
        .map_err(|e| setup(&e))?;
    let mut camera = SimCamera::new(world.clone(), Default::default());
    let mut pointer = Asked {
        inner: OraclePointer::new(truth.clone(), OracleOptions::default()),
        questions: Vec::new(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| setup(&e))?;
    rt.block_on(run_task(
        &mut robot,
        &mut camera,
        &mut pointer,
        instruction,
        Branch::Affordance,
        SafetyConfig {
            dry_run: true,
            ..SafetyConfig::default()
        },
        &mut |_| true,
        &mut |_| {},
    ))
    .map_err(|e| SoakError::Setup(format!("dry run of \"{instruction}\": {e}")))?;
    if pointer.questions.is_empty() {
        return Err(SoakError::Setup(
            "the dry run asked the pointer nothing".into(),
        ));
    }
    Ok(pointer.questions)
}

/// The oracle, recording what it was asked.
struct Asked {
    inner: OraclePointer,
    questions: Vec<(Ability, String)>,
}

impl Pointer for Asked {
    fn name(&self) -> &str {
        "asked"
    }

    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        self.questions.push((ability, instruction.to_string()));
        self.inner.point(frame, ability, instruction)
    }
}

/// Answers the recorded questions in turn, on the scene as it is now.
struct LiveOracle {
    camera: SimCamera,
    oracle: OraclePointer,
    questions: Vec<(Ability, String)>,
    asked: usize,
}

impl LiveOracle {
    /// The reply text Embodied-R1 would give, or why there is none.
    fn answer(&mut self) -> Result<String, String> {
        let (ability, instruction) = self.questions[self.asked % self.questions.len()].clone();
        self.asked += 1;
        let frame = self.camera.capture().map_err(|e| e.to_string())?;
        let p = self
            .oracle
            .point(&frame, ability, &instruction)
            .map_err(|e| e.to_string())?;
        let i = &self.camera.pinhole().intrinsics;
        let map = ModelImageMap::for_qwen25vl(
            ImageSize::new(i.width as u32, i.height as u32),
            DEFAULT_MIN_PIXELS,
            PRETRAINED_MAX_PIXELS,
        )
        .map_err(|e| e.to_string())?;
        let list: Vec<String> = p
            .points_px()
            .iter()
            .map(|q| {
                let m = map.to_model(*q);
                format!("[{}, {}]", m[0].round(), m[1].round())
            })
            .collect();
        Ok(format!(
            "<think>As seen.</think><answer><point>[{}]</point></answer>",
            list.join(", ")
        ))
    }
}

/// A bare OpenAI-compatible chat-completions responder on 127.0.0.1 (one request per connection).
struct PointerServer {
    base: String,
    stop: Arc<AtomicBool>,
    addr: std::net::SocketAddr,
}

impl PointerServer {
    fn start(oracle: Arc<Mutex<LiveOracle>>) -> Result<PointerServer, SoakError> {
        let setup = |e: &dyn std::fmt::Display| SoakError::Setup(e.to_string());
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| setup(&e))?;
        let addr = listener.local_addr().map_err(|e| setup(&e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(s) = stream {
                    answer_request(s, &oracle);
                }
            }
        });
        Ok(PointerServer {
            base: format!("http://{addr}/v1"),
            stop,
            addr,
        })
    }
}

impl Drop for PointerServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn answer_request(stream: TcpStream, oracle: &Mutex<LiveOracle>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(clone);
    let mut length = 0usize;
    let mut line = String::new();
    let mut first = true;
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let l = line.trim_end();
        if l.is_empty() {
            if first {
                return;
            }
            break;
        }
        first = false;
        if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let answer = oracle.lock().unwrap_or_else(|p| p.into_inner()).answer();
    let (status, body) = match answer {
        Ok(text) => (200, completion(&text)),
        Err(e) => (
            500,
            serde_json::json!({ "error": { "message": e } }).to_string(),
        ),
    };
    let mut stream = stream;
    let head = format!(
        "HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body.as_bytes());
}

/// A chat-completion body whose message content is `content`.
fn completion(content: &str) -> String {
    serde_json::json!({
        "id": "chatcmpl-soak",
        "object": "chat.completion",
        "model": "embodied-r1",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop",
        }],
    })
    .to_string()
}

/// The camera frame server `emulate xarm --sim` runs, on a thread of its own.
struct FrameServer {
    addr: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FrameServer {
    fn start(world: &SharedWorld) -> Result<FrameServer, SoakError> {
        let setup = |e: &dyn std::fmt::Display| SoakError::Setup(e.to_string());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| setup(&e))?;
        let listener = rt
            .block_on(crate::camera::net::bind_local(0))
            .map_err(|e| setup(&e))?;
        let addr = format!("tcp:{}", listener.local_addr().map_err(|e| setup(&e))?);
        let mut camera = SimCamera::new(world.clone(), Default::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            rt.block_on(crate::camera::net::serve(
                listener,
                16,
                move || camera.capture(),
                async {
                    let _ = stopped.await;
                },
            ));
        });
        Ok(FrameServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for FrameServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The shipped xArm 6 driver.toml with the emulator's report ports, written into `dir`.
fn driver_file(dir: &Path, emulator: &EmulatorThread) -> Result<PathBuf, SoakError> {
    let setup = |e: &dyn std::fmt::Display| SoakError::Setup(e.to_string());
    std::fs::create_dir_all(dir).map_err(|e| setup(&e))?;
    let shipped =
        std::fs::read_to_string(crate::workspace_root().join("robot-configs/xarm6/driver.toml"))
            .map_err(|e| setup(&e))?;
    let text: Vec<String> = shipped
        .lines()
        .map(|l| {
            if l.starts_with("state_report_port") {
                format!("state_report_port = {}", emulator.ports[1])
            } else if l.starts_with("realtime_report_port") {
                format!("realtime_report_port = {}", emulator.ports[2])
            } else {
                l.to_string()
            }
        })
        .collect();
    let path = dir.join("driver.toml");
    std::fs::write(&path, text.join("\n")).map_err(|e| setup(&e))?;
    Ok(path)
}
