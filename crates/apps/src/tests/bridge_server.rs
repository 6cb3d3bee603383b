//! `serve bridge` end to end: the server in process on a free loopback port, driven by openpi's
//! stock client, by SimplerEnv's runner over the stand-in, by our own evaluator, and by broken
//! clients.
//!
//! | test | checks |
//! | --- | --- |
//! | `openpi_client_exchanges_observation_and_action` | openpi-client 0.1.2's unchanged `WebsocketClientPolicy` (`tests/bridge_openpi.py`) reads our metadata (server, protocol 1, both control modes), gets `ready` for a reset, and for 4 observations that `sim/simplerenv/run.py` converted from the stand-in's SimplerEnv-shaped obs dict (segmentation and objects included) an `action` whose array is float32 (7,), finite, with the step echoed and status `moving`; `{"type": "bogus"}` before the reset and mid-episode raises `RuntimeError` naming the type, and the connection goes on |
//! | `standin_episodes_through_run_py` | `run.py --env standin` (the official runner) runs all 4 tasks for episode 0 in the official budget (60, 60, 60, 120 steps) and exits 0; its printout states the final-step success rule and the budget; at least 3 of 4 episodes succeed; the joint-position control mode succeeds on the spoon task |
//! | `eval_bridge_matches_eval_sim` | our simulator's bridge suite (4 tasks × seeds 0, 1) through the server and `run_remote_suite` succeeds on exactly the episodes `run_suite` (`eval sim`) succeeds on, and runs the same plans to their end |
//! | `bridge_oracle_places_stacked_cubes_on_top` | the three stack_cube seeds whose place point (from the evaluator's segmentation) used to land half off the yellow block succeed through the bridge |
//! | `bad_input_stays_on_its_connection` | while another connection's real episode is paused mid-way, each on its own connection: bytes that are not msgpack, unknown or untyped messages, wrong arrays (rgb float32, depth of another size, 5 qpos values, a non-unit quaternion, NaN in the extrinsic), out-of-order messages (infer before reset, a second reset, steps that repeat or go back) are each answered with a text naming the problem and the connection still works; a client that leaves after its first action takes nothing down; the paused episode then finishes as it would have; new connections are served after every case |
//! | `protocol_round_trips` | `encode_client` → `decode_client` (reset, an infer with labels and a base pose that is not the world's, episode_end; the server's check-only decode of later observations: poses kept, images and labels empty, a wrong image still refused) and `encode_server` → `decode_server` (ready, action, ended), metadata, all without a socket |
//!
//! The Python tests run with `POINTACT_PYTHON` (see `super::common::python`; CI installs
//! `openpi-client==0.1.2` there) and are skipped with a message where it is missing, unless CI or
//! `POINTACT_REQUIRE_SDK` is set.

use std::ffi::OsString;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use super::common::python;
use pointact::bridge::protocol::{
    decode_client, decode_client_with, decode_metadata, decode_server, encode_client,
    encode_metadata, encode_server, ClientMessage, Images, Metadata, ServerMessage,
    PROTOCOL_VERSION,
};
use pointact::bridge::remote::{
    Action, ControlMode, EpisodeStart, LabelledObject, Labels, ObjectRole, Observation,
    PolicyStatus, RemoteError, RemotePolicy, DELTA_EE_MODE, JOINT_POS_MODE,
};
use pointact::bridge::wire::{self, NdArray, Value};
use pointact::bridge::{BridgeClient, BridgeServer, SessionConfig};
use pointact::camera::{Frame, RgbImage};
use pointact::geometry::{DepthImage, Intrinsics};
use pointact::kinematics::RobotModel;
use pointact::nalgebra::{Isometry3, Translation3, UnitQuaternion, Vector3};
use pointact::runner::eval::run_suite;
use pointact::runner::eval::EvalReport;
use pointact::runner::pointer::SessionPointer;
use pointact::runner::remote::{run_remote_episode, run_remote_suite, RemoteOptions};
use pointact::runner::EpisodeOptions;
use pointact::sim::tasks::{Episode, Suite};
use serde_json::Value as Json;
use tokio::sync::oneshot;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// Longest a Python script may run (each takes seconds).
const SCRIPT_LIMIT: Duration = Duration::from_secs(240);

/// A bridge server with the oracle pointer for SimplerEnv's WidowX on a free loopback port,
/// serving on the test's runtime until dropped.
struct Server {
    addr: String,
    _stop: oneshot::Sender<()>,
}

async fn start_server() -> Server {
    let model = Arc::new(RobotModel::builtin("widowx250").expect("the built-in widowx250"));
    let config = SessionConfig::new(SessionPointer::Oracle(Default::default()), model);
    let server = BridgeServer::bind("127.0.0.1:0", config)
        .await
        .expect("bind a loopback port");
    let addr = server.local_addr().expect("bound address").to_string();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(server.serve(async {
        let _ = rx.await;
    }));
    Server { addr, _stop: tx }
}

fn openpi_python(what: &str) -> Option<OsString> {
    python::interpreter(
        "openpi_client.websocket_client_policy",
        "openpi-client==0.1.2",
        what,
    )
}

/// Runs a script off the runtime's threads (the server answers it on them).
async fn run_script(python: &OsString, script: &str, args: &[&str]) -> python::ScriptRun {
    let (python, script) = (python.clone(), script.to_string());
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        python::run_script(&python, &script, &args, SCRIPT_LIMIT)
    })
    .await
    .expect("the script's thread")
}

fn str_at<'a>(j: &'a Json, path: &str) -> &'a str {
    j.pointer(path)
        .and_then(Json::as_str)
        .unwrap_or_else(|| panic!("{path} is not a string in {j}"))
}

// ------------------------------------------------------------------------------------------------
// 1. openpi's own client
// ------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn openpi_client_exchanges_observation_and_action() {
    let Some(py) = openpi_python("the openpi-client bridge exchange test") else {
        return;
    };
    let server = start_server().await;
    let port = server.addr.rsplit(':').next().expect("a port");
    let run = run_script(&py, &format!("{ROOT}/tests/bridge_openpi.py"), &[port]).await;
    assert!(
        matches!(run.status, Some(s) if s.success()),
        "bridge_openpi.py failed\n{}",
        run.transcript()
    );
    let line = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT line\n{}", run.transcript()));
    let r: Json = serde_json::from_str(line).expect("the RESULT line is JSON");
    let ctx = run.transcript();

    // What openpi's client read on connect.
    let meta = &r["metadata"];
    assert_eq!(meta["server"], "pointact", "{ctx}");
    assert_eq!(meta["protocol"], PROTOCOL_VERSION, "{ctx}");
    assert_eq!(meta["pointer"], "oracle", "{ctx}");
    let modes: Vec<&str> = meta["control_modes"]
        .as_array()
        .expect("control_modes is a list")
        .iter()
        .filter_map(Json::as_str)
        .collect();
    assert_eq!(modes, [DELTA_EE_MODE, JOINT_POS_MODE], "{ctx}");

    // A message of an unknown type is openpi's RuntimeError naming it, before and during the
    // episode; the connection went on both times (the reset and the next step were answered).
    for when in ["bogus_before_reset", "bogus_mid_episode"] {
        let e = &r[when];
        assert_eq!(e["raised"], "RuntimeError", "{when}: {e}");
        let text = str_at(e, "/text");
        assert!(
            text.contains("pointact bridge: unknown message type \"bogus\""),
            "{when}: {text}"
        );
    }

    assert_eq!(r["ready"]["type"], "ready", "{ctx}");
    assert_eq!(r["ready"]["episode_id"], 0, "{ctx}");
    assert_eq!(r["ready"]["control_mode"], DELTA_EE_MODE, "{ctx}");

    // The observation was SimplerEnv's, as run.py converts it.
    let sent = &r["first_infer"];
    assert_eq!(sent["rgb"], serde_json::json!(["uint8", [480, 640, 3]]));
    assert_eq!(sent["depth"], serde_json::json!(["float32", [480, 640]]));
    assert_eq!(
        sent["segmentation"],
        serde_json::json!(["uint32", [480, 640]])
    );
    assert_eq!(sent["objects"].as_array().map(Vec::len), Some(2), "{sent}");

    let actions = r["actions"].as_array().expect("actions");
    assert_eq!(actions.len(), 4, "{ctx}");
    let mut moved = false;
    for (i, a) in actions.iter().enumerate() {
        assert_eq!(a["type"], "action", "step {i}: {a}");
        assert_eq!(a["step"], i, "step {i}: the step is echoed: {a}");
        assert_eq!(a["is_ndarray"], true, "step {i}: {a}");
        assert_eq!(a["dtype"], "float32", "step {i}: {a}");
        assert_eq!(a["shape"], serde_json::json!([7]), "step {i}: {a}");
        assert_eq!(a["finite"], true, "step {i}: {a}");
        assert_eq!(a["terminate"], false, "step {i}: {a}");
        // The oracle planned on the labels sent: the plan is under way, not refused.
        assert_eq!(a["status"], "moving", "step {i}: {a}");
        let v: Vec<f64> = serde_json::from_value(a["values"].clone()).expect("values");
        moved |= v[..3].iter().any(|d| d.abs() > 1e-4);
    }
    assert!(moved, "the arm was never told to move: {actions:?}");
    assert_eq!(r["ended"]["type"], "ended", "{ctx}");
}

// ------------------------------------------------------------------------------------------------
// 2. SimplerEnv's runner over the stand-in
// ------------------------------------------------------------------------------------------------

/// The runner's tasks in its order, with their official step budgets.
const RUN_PY_TASKS: [(&str, u64); 4] = [
    ("widowx_spoon_on_towel", 60),
    ("widowx_carrot_on_plate", 60),
    ("widowx_stack_cube", 60),
    ("widowx_put_eggplant_in_basket", 120),
];

/// `run.py ARGS --json FILE` against `addr`: its exit status must be 0; the JSON it wrote and
/// its stdout.
async fn run_py(py: &OsString, addr: &str, tag: &str, args: &[&str]) -> (Json, String) {
    let dir = super::common::TempDir::new(tag);
    let json = dir.join("run.json");
    let json = json.to_str().expect("a UTF-8 temp path");
    let mut all = vec!["--server", addr, "--env", "standin", "--json", json];
    all.extend_from_slice(args);
    let run = run_script(py, &format!("{ROOT}/sim/simplerenv/run.py"), &all).await;
    assert_eq!(
        run.status.and_then(|s| s.code()),
        Some(0),
        "run.py {args:?} did not run every episode\n{}",
        run.transcript()
    );
    let text = std::fs::read_to_string(json).expect("run.py wrote its JSON");
    (
        serde_json::from_str(&text).expect("run.py's JSON"),
        run.stdout,
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn standin_episodes_through_run_py() {
    let Some(py) = openpi_python("the run.py stand-in episodes test") else {
        return;
    };
    let server = start_server().await;

    let (report, stdout) = run_py(&py, &server.addr, "run-py-delta", &["--episodes", "0"]).await;
    assert!(
        stdout.contains("success rule: final-step info[\"success\"]"),
        "{stdout}"
    );
    assert!(
        stdout.contains("step budget: official (60 steps; 120 for eggplant→basket)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("| pointact (oracle) [stand-in, not SimplerEnv] |"),
        "{stdout}"
    );
    assert_eq!(report["budget"], "official");
    assert_eq!(report["control_mode"], DELTA_EE_MODE);
    let episodes = report["episodes"].as_array().expect("episodes");
    let ran: Vec<(&str, u64)> = episodes
        .iter()
        .map(|e| (str_at(e, "/task"), e["steps"].as_u64().expect("steps")))
        .collect();
    // Every episode ran to the official budget: success is judged at the final step.
    assert_eq!(ran, RUN_PY_TASKS, "{stdout}");
    let succeeded: Vec<&str> = episodes
        .iter()
        .filter(|e| e["success"] == true)
        .map(|e| str_at(e, "/task"))
        .collect();
    // Measured on this branch (base ed8a978): spoon, stack and eggplant succeed, the carrot is
    // grasped but its plan does not fit in 60 steps; with main's 12 cm WidowX carry (6405bf6)
    // all 4 succeed. The carrot is left out of the assertion: it is at the edge of its budget.
    assert!(
        succeeded.len() >= 3,
        "only {succeeded:?} succeeded\n{stdout}"
    );
    for t in [
        "widowx_spoon_on_towel",
        "widowx_stack_cube",
        "widowx_put_eggplant_in_basket",
    ] {
        assert!(succeeded.contains(&t), "{t} failed\n{stdout}");
    }

    let (report, stdout) = run_py(
        &py,
        &server.addr,
        "run-py-joint",
        &[
            "--episodes",
            "0",
            "--tasks",
            "widowx_spoon_on_towel",
            "--control-mode",
            "joint",
        ],
    )
    .await;
    assert_eq!(report["control_mode"], JOINT_POS_MODE);
    let episodes = report["episodes"].as_array().expect("episodes");
    assert_eq!(episodes.len(), 1, "{stdout}");
    assert_eq!(
        episodes[0]["success"], true,
        "joint mode, spoon on towel\n{stdout}"
    );
}

// ------------------------------------------------------------------------------------------------
// 3. our evaluator through the server vs eval sim
// ------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn eval_bridge_matches_eval_sim() {
    let server = start_server().await;
    let seeds = [0, 1];
    // `eval sim` on its own task, in parallel with the bridge evaluation (half the wall time).
    let sim = tokio::spawn(async move {
        run_suite(
            Suite::Bridge,
            &seeds,
            &EpisodeOptions::default(),
            &mut |_, _, _| {},
        )
        .await
    });
    let never = AtomicBool::new(false);
    let addr = server.addr.clone();
    let remote = run_remote_suite(
        Suite::Bridge,
        &seeds,
        &RemoteOptions::default(),
        || BridgeClient::connect(&addr),
        &never,
        None,
        &mut |_, _, _| {},
    )
    .await;
    let sim = sim.await.expect("eval sim's task");
    let outcome = |r: &EvalReport| -> Vec<(String, u64, bool, bool)> {
        r.episodes
            .iter()
            .map(|e| (e.task.clone(), e.seed, e.success, e.executed))
            .collect()
    };
    let details = |r: &EvalReport| -> String {
        r.episodes
            .iter()
            .map(|e| {
                format!(
                    "  {} seed {}: success {} executed {}: {}\n",
                    e.task, e.seed, e.success, e.executed, e.detail
                )
            })
            .collect()
    };
    // `--nocapture` shows both. Measured: all 8 episodes succeed both ways, every plan executed
    // to its end (the eggplant's height in the basket differs by 1 mm between the two).
    eprintln!("bridge:\n{}sim:\n{}", details(&remote), details(&sim));
    assert_eq!(remote.episodes.len(), 8, "{}", details(&remote));
    assert_eq!(
        outcome(&remote),
        outcome(&sim),
        "eval bridge vs eval sim (task, seed, success, plan executed)\nbridge:\n{}sim:\n{}",
        details(&remote),
        details(&sim)
    );
}

/// The oracle's place point from an evaluator's segmentation is the middle of the target's
/// extent: a centroid of the visible points leaned toward the block's near sides and dropped these
/// three stacked cubes half off the yellow block (measured: 21/24 through the bridge against 24/24
/// in `eval sim`, before the fix).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_oracle_places_stacked_cubes_on_top() {
    let server = start_server().await;
    let spec = pointact::sim::tasks::task("bridge/stack_cube").expect("task");
    for seed in [3, 5, 6] {
        let ep = spec.instantiate(seed).expect("episode");
        let mut client = BridgeClient::connect(&server.addr).await.expect("connect");
        let r = run_remote_episode(&ep, &RemoteOptions::default(), &mut client)
            .await
            .expect("episode ran");
        assert!(
            r.success,
            "stack_cube seed {seed}: {} (policy {:?}: {})",
            r.detail, r.policy_status, r.policy_detail
        );
    }
}

// ------------------------------------------------------------------------------------------------
// 4. bad input
// ------------------------------------------------------------------------------------------------

/// A policy that keeps the first observation and ends the episode at once (a cheap, valid,
/// labelled observation of our simulator).
#[derive(Default)]
pub(super) struct FirstObservation(pub(super) Option<Observation>);

impl RemotePolicy for FirstObservation {
    async fn reset(&mut self, _: &EpisodeStart) -> Result<(), RemoteError> {
        Ok(())
    }

    async fn act(&mut self, o: &Observation) -> Result<Action, RemoteError> {
        self.0.get_or_insert_with(|| o.clone());
        Ok(Action {
            step: o.step,
            values: vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0],
            terminate: true,
            status: PolicyStatus::Done,
            detail: String::new(),
        })
    }

    async fn end(&mut self, _: bool, _: u64) -> Result<(), RemoteError> {
        Ok(())
    }
}

/// The bridge client, paused before it sends observation `at` until told to go on.
struct Paused {
    client: BridgeClient,
    at: u64,
    paused: Option<oneshot::Sender<()>>,
    resume: Option<oneshot::Receiver<()>>,
}

impl RemotePolicy for Paused {
    async fn reset(&mut self, start: &EpisodeStart) -> Result<(), RemoteError> {
        self.client.reset(start).await
    }

    async fn act(&mut self, o: &Observation) -> Result<Action, RemoteError> {
        if o.step == self.at {
            if let (Some(p), Some(r)) = (self.paused.take(), self.resume.take()) {
                let _ = p.send(());
                let _ = r.await;
            }
        }
        self.client.act(o).await
    }

    async fn end(&mut self, success: bool, steps: u64) -> Result<(), RemoteError> {
        self.client.end(success, steps).await
    }
}

pub(super) fn bridge_episode(task: &str, seed: u64) -> Episode {
    let spec = Suite::Bridge
        .tasks()
        .into_iter()
        .find(|t| t.full_id() == task)
        .unwrap_or_else(|| panic!("no task {task}"));
    spec.instantiate(seed).expect("instantiate")
}

fn start_of(episode_id: u64) -> ClientMessage {
    ClientMessage::Reset(EpisodeStart {
        task: "bad-input".into(),
        instruction: "put the spoon on the towel".into(),
        episode_id,
        control_mode: ControlMode::DeltaEe,
        control_freq: 5.0,
        max_steps: 60,
    })
}

fn infer_frame(obs: &Observation, step: u64) -> Vec<u8> {
    let mut o = obs.clone();
    o.step = step;
    encode_client(&ClientMessage::Infer(Box::new(o))).expect("encode an observation")
}

/// `frame` (a map) with `key` set to `value`.
pub(super) fn with_field(frame: &[u8], key: &str, value: Value) -> Vec<u8> {
    let Value::Map(mut entries) = wire::decode(frame).expect("our frame decodes") else {
        panic!("a message is a map");
    };
    let slot = entries
        .iter_mut()
        .find(|(k, _)| k.as_str() == Some(key))
        .unwrap_or_else(|| panic!("no {key:?}"));
    slot.1 = value;
    wire::encode(&Value::Map(entries)).expect("encode")
}

/// The server's text answer to `frame`.
async fn error_for(client: &mut BridgeClient, frame: Vec<u8>) -> String {
    client.send_raw(frame).await.expect("send");
    let text = client.next_text().await.expect("a text answer");
    assert!(text.starts_with("pointact bridge: "), "{text}");
    text
}

async fn connect(addr: &str) -> BridgeClient {
    BridgeClient::connect(addr).await.expect("connect")
}

async fn expect_ready(client: &mut BridgeClient, episode_id: u64) {
    match client.request(&start_of(episode_id)).await {
        Ok(ServerMessage::Ready {
            episode_id: id,
            control_mode: ControlMode::DeltaEe,
        }) => assert_eq!(id, episode_id),
        other => panic!("reset: {other:?}"),
    }
}

async fn expect_action(client: &mut BridgeClient, obs: &Observation, step: u64) -> Action {
    let mut o = obs.clone();
    o.step = step;
    match client.request(&ClientMessage::Infer(Box::new(o))).await {
        Ok(ServerMessage::Action(a)) => {
            assert_eq!(a.step, step);
            assert_eq!(a.values.len(), 7);
            a
        }
        other => panic!("infer step {step}: {other:?}"),
    }
}

/// A new connection is served: metadata, then `ready` for a reset.
async fn fresh_connection_works(addr: &str, case: &str) {
    let mut c = connect(addr).await;
    assert_eq!(c.metadata.pointer, "oracle", "after {case}");
    expect_ready(&mut c, 99).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_stays_on_its_connection() {
    let server = start_server().await;
    let addr = server.addr.clone();
    let task = "bridge/spoon_on_towel";
    let episode = bridge_episode(task, 0);

    // A valid, labelled observation of the same scene for the broken clients.
    let mut first = FirstObservation::default();
    let mut cheap = RemoteOptions::default();
    cheap.episode.settle_s = 0.0;
    run_remote_episode(&episode, &cheap, &mut first)
        .await
        .expect("record an observation");
    let obs = first.0.expect("an observation");
    let good = infer_frame(&obs, 0);

    // The other connection's real episode, paused before its 6th observation (5 actions in).
    let (paused_tx, paused_rx) = oneshot::channel();
    let (resume_tx, resume_rx) = oneshot::channel();
    let background = {
        let addr = addr.clone();
        let episode = episode.clone();
        tokio::spawn(async move {
            let mut policy = Paused {
                client: connect(&addr).await,
                at: 5,
                paused: Some(paused_tx),
                resume: Some(resume_rx),
            };
            run_remote_episode(&episode, &RemoteOptions::default(), &mut policy).await
        })
    };
    paused_rx
        .await
        .expect("the background episode reached step 5");

    // (a) Bytes that are not msgpack: a text error, and the connection still answers a reset.
    {
        let mut c = connect(&addr).await;
        let text = error_for(&mut c, vec![0xc1, 0x00, 0xff]).await;
        assert!(text.contains("unreadable frame"), "{text}");
        let text = error_for(&mut c, b"{\"type\": \"reset\"}".to_vec()).await;
        assert!(text.contains("unreadable frame"), "{text}");
        expect_ready(&mut c, 1).await;
    }
    fresh_connection_works(&addr, "bytes that are not msgpack").await;

    // (b) Messages of no known type.
    {
        let mut c = connect(&addr).await;
        let bogus = wire::encode(&Value::map([("type", Value::from("bogus"))])).expect("encode");
        let text = error_for(&mut c, bogus).await;
        assert!(text.contains("unknown message type \"bogus\""), "{text}");
        let untyped = wire::encode(&Value::map([("step", Value::UInt(0))])).expect("encode");
        let text = error_for(&mut c, untyped).await;
        assert!(text.contains("no \"type\""), "{text}");
        let list = wire::encode(&Value::Array(vec![Value::from("reset")])).expect("encode");
        let text = error_for(&mut c, list).await;
        assert!(text.contains("a message is a map"), "{text}");
        expect_ready(&mut c, 2).await;
    }
    fresh_connection_works(&addr, "unknown message types").await;

    // (c) Arrays of the wrong shape or dtype, and poses that are not poses: each answer names the
    // field; after them a good observation is answered with an action.
    {
        let mut c = connect(&addr).await;
        expect_ready(&mut c, 3).await;
        let (w, h) = (obs.frame.depth.width, obs.frame.depth.height);
        let mut ext = obs.camera_from_world.to_homogeneous();
        ext[(0, 3)] = f64::NAN;
        let ext: Vec<f64> = (0..4)
            .flat_map(|r| (0..4).map(move |c| ext[(r, c)]))
            .collect();
        let nd = |shape: &[usize], v: &[f64]| {
            Value::NdArray(NdArray::from_slice(shape, v).expect("array"))
        };
        let cases = [
            (
                "rgb",
                Value::NdArray(
                    NdArray::from_slice(&[h, w, 3], &vec![0.5f32; h * w * 3]).expect("array"),
                ),
                "must be uint8",
            ),
            (
                "depth",
                Value::NdArray(
                    NdArray::from_slice(&[h / 2, w / 2], &vec![1.0f32; (h / 2) * (w / 2)])
                        .expect("array"),
                ),
                "like rgb",
            ),
            ("qpos", nd(&[5], &[0.0; 5]), "has 5 values"),
            (
                "tcp_pose",
                nd(&[7], &[0.1, 0.0, 0.2, 2.0, 0.0, 0.0, 0.0]),
                "not 1",
            ),
            ("extrinsic_cv", nd(&[4, 4], &ext), "NaN"),
        ];
        for (field, value, why) in cases {
            let text = error_for(&mut c, with_field(&good, field, value)).await;
            assert!(
                text.contains(&format!("\"{field}\"")) && text.contains(why),
                "{field}: {text}"
            );
        }
        let a = expect_action(&mut c, &obs, 0).await;
        assert_eq!(a.status, PolicyStatus::Moving, "{a:?}");
    }
    fresh_connection_works(&addr, "wrong arrays").await;

    // (d) Messages out of order.
    {
        let mut c = connect(&addr).await;
        let text = error_for(&mut c, good.clone()).await;
        assert!(text.contains("\"infer\" before \"reset\""), "{text}");
        let end = encode_client(&ClientMessage::EpisodeEnd {
            success: false,
            steps: 0,
        })
        .expect("encode");
        let text = error_for(&mut c, end).await;
        assert!(text.contains("\"episode_end\" before \"reset\""), "{text}");
        expect_ready(&mut c, 4).await;
        let again = encode_client(&start_of(4)).expect("encode");
        let text = error_for(&mut c, again).await;
        assert!(text.contains("already reset"), "{text}");
        expect_action(&mut c, &obs, 3).await;
        for step in [3, 2] {
            let text = error_for(&mut c, infer_frame(&obs, step)).await;
            assert!(
                text.contains(&format!("step {step} after step 3: steps must increase")),
                "{text}"
            );
        }
        expect_action(&mut c, &obs, 4).await;
    }
    fresh_connection_works(&addr, "messages out of order").await;

    // (e) A client that leaves after its first action, without a close frame.
    {
        let mut c = connect(&addr).await;
        expect_ready(&mut c, 5).await;
        expect_action(&mut c, &obs, 0).await;
        drop(c);
    }
    fresh_connection_works(&addr, "a client that left mid-episode").await;

    // The paused episode carries on and ends as an undisturbed one does.
    resume_tx.send(()).expect("the background episode waits");
    let result = background
        .await
        .expect("the background task")
        .expect("the background episode ran to its end");
    assert_eq!(
        result.policy_status,
        PolicyStatus::Done,
        "{}",
        result.policy_detail
    );
    assert!(result.success, "{}", result.detail);
    fresh_connection_works(&addr, "the background episode").await;
}

// ------------------------------------------------------------------------------------------------
// 5. the protocol without a socket
// ------------------------------------------------------------------------------------------------

/// A 4×3 observation with every field set, labels included, and the base away from the world's
/// origin.
pub(super) fn small_observation() -> Observation {
    let (w, h) = (4, 3);
    let rgb = RgbImage::from_raw(
        w as u32,
        h as u32,
        (0..w * h * 3).map(|i| i as u8).collect(),
    )
    .expect("rgb");
    let depth = DepthImage {
        width: w,
        height: h,
        data: (0..w * h).map(|i| 0.5 + i as f32 * 0.01).collect(),
    };
    let pose = |x: f64, axis: Vector3<f64>, angle: f64| {
        Isometry3::from_parts(
            Translation3::new(x, -0.2, 0.87),
            UnitQuaternion::from_scaled_axis(axis.normalize() * angle),
        )
    };
    let camera_from_world = pose(0.3, Vector3::new(1.0, 0.2, 0.0), 2.2);
    let world_from_base = pose(0.147, Vector3::z(), 0.3);
    let frame = Frame {
        rgb,
        depth,
        intrinsics: Intrinsics::pinhole(w, h, 5.0, 5.5, 1.9, 1.4),
        base_from_camera: (camera_from_world * world_from_base).inverse(),
        stamp_s: 7.0,
    };
    Observation {
        step: 7,
        frame,
        camera_from_world,
        world_from_base,
        world_from_tcp: pose(0.4, Vector3::new(0.0, 1.0, 0.1), 3.0),
        qpos: vec![0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.03, 0.031],
        base_from_target: pose(0.25, Vector3::x(), 0.1),
        labels: Some(Labels {
            width: w,
            height: h,
            ids: vec![0, 0, 7, 7, 0, 12, 12, 7, 0, 0, 0, 12],
            objects: vec![
                LabelledObject {
                    id: 7,
                    name: "spoon".into(),
                    role: ObjectRole::Source,
                },
                LabelledObject {
                    id: 12,
                    name: "towel".into(),
                    role: ObjectRole::Target,
                },
            ],
        }),
    }
}

fn assert_pose_eq(a: &Isometry3<f64>, b: &Isometry3<f64>, what: &str) {
    let (dp, dr) = (
        (a.translation.vector - b.translation.vector).norm(),
        a.rotation.angle_to(&b.rotation),
    );
    assert!(dp < 1e-12 && dr < 1e-9, "{what}: {a} vs {b}");
}

#[test]
fn protocol_round_trips() {
    let ClientMessage::Reset(start) = start_of(42) else {
        unreachable!()
    };
    match decode_client(&encode_client(&start_of(42)).expect("encode")).expect("decode") {
        ClientMessage::Reset(s) => assert_eq!(s, start),
        other => panic!("{other:?}"),
    }
    let end = ClientMessage::EpisodeEnd {
        success: true,
        steps: 60,
    };
    match decode_client(&encode_client(&end).expect("encode")).expect("decode") {
        ClientMessage::EpisodeEnd { success, steps } => assert_eq!((success, steps), (true, 60)),
        other => panic!("{other:?}"),
    }

    let o = small_observation();
    let ClientMessage::Infer(d) =
        decode_client(&infer_frame(&o, o.step)).expect("decode the observation")
    else {
        panic!("not an infer")
    };
    assert_eq!(d.step, o.step);
    assert_eq!(d.frame.rgb, o.frame.rgb);
    assert_eq!(d.frame.depth.data, o.frame.depth.data);
    assert_eq!(
        (d.frame.depth.width, d.frame.depth.height),
        (o.frame.depth.width, o.frame.depth.height)
    );
    assert_eq!(d.frame.intrinsics, o.frame.intrinsics);
    assert_eq!(d.qpos, o.qpos);
    assert_eq!(d.labels, o.labels);
    assert_pose_eq(&d.camera_from_world, &o.camera_from_world, "extrinsic");
    assert_pose_eq(&d.world_from_base, &o.world_from_base, "base_pose");
    assert_pose_eq(&d.world_from_tcp, &o.world_from_tcp, "tcp_pose");
    assert_pose_eq(&d.base_from_target, &o.base_from_target, "target_pose");
    // The camera in the base frame is derived from the extrinsic and the base pose.
    assert_pose_eq(
        &d.frame.base_from_camera,
        &o.frame.base_from_camera,
        "base_from_camera",
    );

    // After an episode's first observation the server only checks the images (it plans from the
    // first): the poses and joints come through, the images and labels stay empty, and a wrong
    // image is still refused.
    let ClientMessage::Infer(light) =
        decode_client_with(&infer_frame(&o, o.step).into(), Images::CheckOnly).expect("check-only")
    else {
        panic!("not an infer")
    };
    assert_eq!(light.qpos, o.qpos);
    assert_pose_eq(
        &light.world_from_tcp,
        &o.world_from_tcp,
        "tcp_pose (check-only)",
    );
    assert!(light.frame.depth.data.is_empty() && light.frame.rgb.is_empty());
    assert!(o.labels.is_some() && light.labels.is_none());
    let bad_rgb = with_field(
        &infer_frame(&o, o.step),
        "rgb",
        Value::NdArray(NdArray::from_slice(&[2, 2, 3], &[0.5f32; 12]).expect("array")),
    );
    let refused = decode_client_with(&bad_rgb.into(), Images::CheckOnly)
        .expect_err("a float32 rgb is refused in check-only mode too");
    assert!(refused.to_string().contains("rgb"), "{refused}");

    let server_messages = [
        ServerMessage::Ready {
            episode_id: 3,
            control_mode: ControlMode::JointPos,
        },
        ServerMessage::Action(Action {
            step: 9,
            // float32 on the wire: values that float32 holds exactly come back equal.
            values: vec![0.5, -0.25, 0.0, 1.0, -1.0, 0.125, 0.75],
            terminate: false,
            status: PolicyStatus::Moving,
            detail: String::new(),
        }),
        ServerMessage::Action(Action {
            step: 60,
            values: vec![0.0; 8],
            terminate: true,
            status: PolicyStatus::Failed,
            detail: "the plan was refused".into(),
        }),
        ServerMessage::Ended {
            status: PolicyStatus::Done,
            detail: "plan of 9 steps executed".into(),
        },
    ];
    for m in server_messages {
        assert_eq!(decode_server(&encode_server(&m)).expect("decode"), m);
    }
    let meta = Metadata {
        version: "1.2.3".into(),
        pointer: "oracle".into(),
    };
    assert_eq!(
        decode_metadata(&encode_metadata(&meta)).expect("decode"),
        meta
    );
}
