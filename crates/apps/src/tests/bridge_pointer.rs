//! `serve bridge` with a model pointer: the OpenAI-compatible backend behind the one shared queue
//! (`runner::pointer::SessionPointer::Shared`, `pointing::queue`), as `serve bridge --pointer
//! openai` builds it.
//!
//! | test | checks |
//! | --- | --- |
//! | `openai_pointer_serves_bridge_episodes` | two bridge episodes of our simulator (bridge/carrot_on_plate, seed 0), each on its own connection, asked through one queued OpenAI backend whose server (a local mock) answers what the oracle would, in the model's pixels: both episodes succeed, the server was asked REG then RRG per episode with the frame as a PNG, and the metadata names the `openai` pointer |
//! | `model_pointer_failure_is_the_episodes_failure` | a server that answers nonsense: the episode ends `failed` with the parser's reason, the arm never moved (every action holds), the server keeps serving |

use std::sync::Arc;

use super::common::openai_mock::{completion, Mock, Reply};
use clap::Parser;
use pointact::bridge::remote::PolicyStatus;
use pointact::bridge::{BridgeClient, BridgeServer, SessionConfig, SessionPointers};
use pointact::camera::Camera;
use pointact::kinematics::RobotModel;
use pointact::pointing::{Ability, ImageSize, ModelImageMap, ModelOptions, Pointer, PointerKind};
use pointact::runner::pointer::SessionPointer;
use pointact::runner::prepare_episode;
use pointact::runner::remote::{run_remote_episode, RemoteOptions};
use pointact::sim::devices::SimCamera;
use pointact::sim::oracle::{OracleOptions, OraclePointer};
use pointact::sim::tasks;
use pointact::vlm::{DEFAULT_MIN_PIXELS, PRETRAINED_MAX_PIXELS};

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    model: ModelOptions,
}

fn openai_options(endpoint: &str) -> ModelOptions {
    Flags::parse_from(["test", "--endpoint", endpoint, "--retries", "0"]).model
}

/// An in-process server with `pointer`; its address and the task serving it.
async fn serve(pointer: SessionPointer) -> (String, tokio::sync::oneshot::Sender<()>) {
    let model = Arc::new(RobotModel::builtin("widowx250").expect("widowx250"));
    let server = BridgeServer::bind("127.0.0.1:0", SessionConfig::new(pointer, model))
        .await
        .expect("bind");
    let addr = server.local_addr().expect("addr").to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.serve(async {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// What the oracle answers about the episode's first frame, written as the model would write it
/// for the image the OpenAI backend sends (Qwen2.5-VL's resize of 640×480).
fn model_reply(ability: Ability, query: &str) -> String {
    let ep = tasks::task("bridge/carrot_on_plate")
        .and_then(|t| t.instantiate(0))
        .expect("episode");
    let prepared = prepare_episode(&ep).expect("prepare");
    let frame = SimCamera::new(prepared.world.clone(), Default::default())
        .capture()
        .expect("frame");
    let mut oracle = OraclePointer::new(prepared.truth, OracleOptions::default());
    let pointing = oracle.point(&frame, ability, query).expect("oracle answer");
    let map = ModelImageMap::for_qwen25vl(
        ImageSize::new(640, 480),
        DEFAULT_MIN_PIXELS,
        PRETRAINED_MAX_PIXELS,
    )
    .expect("map");
    let points: Vec<String> = pointing
        .points_px()
        .into_iter()
        .map(|p| {
            let m = map.to_model(p);
            format!("[{}, {}]", m[0].round(), m[1].round())
        })
        .collect();
    format!(
        "<think>As the oracle sees it.</think><answer><point>[{}]</point></answer>",
        points.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_pointer_serves_bridge_episodes() {
    let reg = model_reply(Ability::Reg, "the carrot");
    let rrg = model_reply(Ability::Rrg, "put carrot on plate");
    // "on the plate": the executor also asks where the plate is, to keep the place on it.
    let plate = model_reply(Ability::Reg, "the plate");
    let mock = Mock::start(
        [&reg, &rrg, &plate, &reg, &rrg, &plate]
            .iter()
            .map(|r| Reply::Http(200, completion(r)))
            .collect(),
    );
    let pointer = SessionPointer::open(
        PointerKind::Openai,
        &openai_options(&mock.base),
        OracleOptions::default(),
    )
    .expect("openai pointer");
    assert_eq!(pointer.name(), "openai");
    let (addr, _stop) = serve(pointer).await;
    let ep = tasks::task("bridge/carrot_on_plate")
        .and_then(|t| t.instantiate(0))
        .expect("episode");
    let options = RemoteOptions {
        send_labels: false,
        ..RemoteOptions::default()
    };
    for round in 0..2 {
        let mut client = BridgeClient::connect(&addr).await.expect("connect");
        assert_eq!(client.metadata.pointer, "openai");
        let r = run_remote_episode(&ep, &options, &mut client)
            .await
            .expect("episode ran");
        assert!(
            r.success && r.policy_status == PolicyStatus::Done,
            "round {round}: {} ({:?}: {})",
            r.detail,
            r.policy_status,
            r.policy_detail
        );
    }
    let asked = mock.requests();
    assert_eq!(asked.len(), 6, "REG, RRG and REG of the target per episode");
    for (i, req) in asked.iter().enumerate() {
        let body = req.json();
        let text = body.to_string();
        assert!(
            text.contains("data:image/png;base64,"),
            "request {i} carries the frame"
        );
        let want = ["the carrot", "put carrot on plate", "the plate"][i % 3];
        assert!(text.contains(want), "request {i} asks about {want:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_pointer_failure_is_the_episodes_failure() {
    let mock = Mock::start(vec![Reply::Http(
        200,
        completion("I cannot see a carrot here."),
    )]);
    let pointer = SessionPointer::open(
        PointerKind::Openai,
        &openai_options(&mock.base),
        OracleOptions::default(),
    )
    .expect("openai pointer");
    let (addr, _stop) = serve(pointer).await;
    let ep = tasks::task("bridge/carrot_on_plate")
        .and_then(|t| t.instantiate(0))
        .expect("episode");
    let options = RemoteOptions {
        max_steps: 5,
        ..RemoteOptions::default()
    };
    let mut client = BridgeClient::connect(&addr).await.expect("connect");
    let r = run_remote_episode(&ep, &options, &mut client)
        .await
        .expect("episode ran");
    assert!(!r.success);
    assert_eq!(r.policy_status, PolicyStatus::Failed);
    assert!(
        r.policy_detail.contains("unusable"),
        "the parser's reason reaches the evaluator: {}",
        r.policy_detail
    );
    // The first answer already says the plan failed: one step, held.
    assert_eq!(r.steps, 1, "terminate on the first answer");
    // The server still serves.
    let again = BridgeClient::connect(&addr).await.expect("reconnect");
    assert_eq!(again.metadata.pointer, "openai");
}
