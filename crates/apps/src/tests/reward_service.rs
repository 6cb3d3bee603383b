//! `pointact serve rewards`: the batch HTTP service answers every item in order with
//! what `train::rewards::score` gives in process (the golden cases and malformed ones), answers bad
//! items in place and keeps serving; and `python/pointact_rewards.py`, the module verl and EasyR1
//! call, returns the same dicts through every signature it offers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use pointact::train::rewards::score;
use pointact::train::service::{RewardService, ServiceConfig};
use serde_json::{json, Value};

/// A running service on a free port, stopped when dropped.
struct Running {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    fn start(config: ServiceConfig) -> Running {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let s = RewardService::bind("127.0.0.1:0", config)
                    .await
                    .expect("bind");
                tx.send(s.local_addr().expect("addr")).expect("send addr");
                s.serve(async {
                    let _ = stopped.await;
                })
                .await
                .expect("serve");
            });
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("service up");
        Running {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The status and the answer; non-finite numbers, which the service writes as Python does
    /// (`NaN`, `Infinity`), read as `null` (what serde_json makes of a non-finite `f64`).
    fn post(&self, body: &[u8]) -> (u16, Value) {
        let (code, text) = self.post_raw(body);
        let text = text
            .replace(":NaN", ":null")
            .replace(":-Infinity", ":null")
            .replace(":Infinity", ":null");
        (code, serde_json::from_str(&text).expect("a JSON answer"))
    }

    fn post_raw(&self, body: &[u8]) -> (u16, String) {
        let r = ureq::post(&format!("{}/score", self.url()))
            .set("Content-Type", "application/json")
            .send_bytes(body);
        let (code, resp) = match r {
            Ok(resp) => (resp.status(), resp),
            Err(ureq::Error::Status(code, resp)) => (code, resp),
            Err(e) => panic!("request failed: {e}"),
        };
        (code, resp.into_string().expect("a text answer"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The golden cases' (response, ground truth) pairs.
fn golden_items(n: usize) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(
        std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/rewards_golden.jsonl"),
    )
    .expect("the golden fixture");
    text.lines()
        .take(n)
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            (
                v["response"].as_str().expect("response").to_string(),
                v["ground_truth"]
                    .as_str()
                    .expect("ground truth")
                    .to_string(),
            )
        })
        .collect()
}

/// What the service must answer for one item: the in-process score as JSON, or an error.
fn expected(response: &str, ground_truth: &str) -> Value {
    match score(response, ground_truth) {
        Ok(s) => serde_json::to_value(&s).expect("a score serializes"),
        Err(_) => json!({"error": true}),
    }
}

fn assert_same(got: &Value, want: &Value, what: &str) {
    if want.get("error").is_some() {
        assert!(
            got["error"].is_string(),
            "{what}: expected an error, got {got}"
        );
    } else {
        assert_close(got, want, what);
    }
}

/// Equal key sets and numbers within 1e-12 (serde_json's default float parser may miss the
/// last bit of a printed double, so a round trip through text is not exact).
fn assert_close(got: &Value, want: &Value, what: &str) {
    let (Some(g), Some(w)) = (got.as_object(), want.as_object()) else {
        panic!("{what}: {got} vs {want}");
    };
    assert_eq!(
        g.keys().collect::<Vec<_>>(),
        w.keys().collect::<Vec<_>>(),
        "{what}: {got} vs {want}"
    );
    for (k, wv) in w {
        let ok = match (g[k].as_f64(), wv.as_f64()) {
            (Some(a), Some(b)) => (a - b).abs() <= 1e-12,
            _ => g[k] == *wv,
        };
        assert!(ok, "{what}: {k}: {got} vs {want}");
    }
}

/// Items that are malformed in every way the issue names, plus good ones between them.
fn bad_items() -> Vec<(String, String)> {
    let big = format!(
        "<think>{}</think><answer><point>[[10, 10]]</point></answer>",
        "x".repeat(1 << 20)
    );
    let poly =
        r#"<type>point_rec</type>{"segmentation": [[0, 0], [100, 0], [100, 100], [0, 100]]}"#;
    vec![
        ("<think>a</think><answer>A</answer>".into(), "A".into()),
        (
            "<think>a</think><answer>A</answer>".into(),
            "<type>no_such_task</type>A".into(),
        ),
        (
            "<think>a</think><answer><point>[[1, 2]]</point></answer>".into(),
            "<type>point_ref</type>[[1, 2".into(),
        ),
        (big, poly.into()),
        (
            "<think>a</think><answer><point>[[NaN, 5]]</point></answer>".into(),
            poly.into(),
        ),
        (
            "<think>a</think><answer><point>[[1e308, 1e308], [-1e400, 5]]</point></answer>".into(),
            poly.into(),
        ),
        (
            "<think>a</think><answer><point>[[50, 50]]</point></answer>".into(),
            poly.into(),
        ),
    ]
}

#[test]
fn the_service_answers_like_the_library_in_order_and_survives_bad_items() {
    let service = Running::start(ServiceConfig::default());
    let mut items = golden_items(300);
    items.extend(bad_items());
    let body = json!({"items": items.iter().map(|(r, g)| json!({"response": r, "ground_truth": g})).collect::<Vec<_>>()});
    let (code, answer) = service.post(body.to_string().as_bytes());
    assert_eq!(code, 200, "{answer}");
    let results = answer["results"].as_array().expect("results");
    assert_eq!(results.len(), items.len());
    for (i, ((r, g), got)) in items.iter().zip(results).enumerate() {
        assert_same(got, &expected(r, g), &format!("item {i}"));
    }
    let n = items.len();
    // A NaN component (golden case 269: a NaN coordinate) goes out as Python's `NaN`, not `null`.
    let (_, raw) = service.post_raw(
        json!({"items": [{"response": &items[269].0, "ground_truth": &items[269].1}]})
            .to_string()
            .as_bytes(),
    );
    assert!(raw.contains("\"overall\":NaN"), "{raw}");
    // The bad ones, in place: missing and unknown types and an unparsable ground truth are errors;
    // a 1 MB response, NaN and huge coordinates are scored (the released zero where it applies).
    for k in [n - 7, n - 6, n - 5] {
        assert!(results[k]["error"].is_string(), "item {k}: {}", results[k]);
    }
    for k in [n - 4, n - 3, n - 2] {
        assert!(
            results[k]["overall"].is_number(),
            "item {k}: {}",
            results[k]
        );
    }
    assert!((results[n - 1]["overall"].as_f64().unwrap() - 1.0).abs() < 1e-9);

    // Not UTF-8: that item alone is refused; the service still answers afterwards.
    let mut raw = br#"{"items": [{"response": "<think>a</think><answer>A</answer>", "ground_truth": "<type>general_qa</type>A"}, {"response": "x"#.to_vec();
    raw.extend_from_slice(&[0xc3, 0x28, 0xff]);
    raw.extend_from_slice(br#"", "ground_truth": "<type>general_qa</type>A"}]}"#);
    let (code, answer) = service.post(&raw);
    assert_eq!(code, 200, "{answer}");
    assert!(answer["results"][0]["overall"].is_number(), "{answer}");
    assert!(
        answer["results"][1]["error"]
            .as_str()
            .unwrap()
            .contains("UTF-8"),
        "{answer}"
    );
    // A body that is not a batch is refused whole, with a reason; unknown routes say which exist.
    let (code, answer) = service.post(b"{\"item\": []}");
    assert_eq!(code, 400);
    assert!(
        answer["error"].as_str().unwrap().contains("items"),
        "{answer}"
    );
    let health: Value = ureq::get(&format!("{}/health", service.url()))
        .call()
        .expect("health")
        .into_json()
        .expect("json");
    assert_eq!(health["status"], "ok");
    match ureq::get(&format!("{}/nowhere", service.url())).call() {
        Err(ureq::Error::Status(404, _)) => {}
        other => panic!("expected 404, got {:?}", other.map(|r| r.status())),
    }
}

#[test]
fn an_oversized_body_is_refused_and_the_connection_can_be_dropped_mid_request() {
    let service = Running::start(ServiceConfig {
        max_body_bytes: 4096,
        ..ServiceConfig::default()
    });
    let big = json!({"items": [{"response": "x".repeat(10_000), "ground_truth": "<type>general_qa</type>A"}]});
    let (code, answer) = service.post(big.to_string().as_bytes());
    assert_eq!(code, 413, "{answer}");
    // A client that announces a body and hangs up: the service keeps serving others.
    let mut s = TcpStream::connect(service.addr).expect("connect");
    s.write_all(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"items\"")
        .expect("write");
    drop(s);
    let mut s = TcpStream::connect(service.addr).expect("connect");
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut reply = String::new();
    s.read_to_string(&mut reply).expect("read");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

#[test]
fn the_python_module_for_verl_and_easyr1_returns_the_same_scores() {
    let Some(python) = super::common::python::interpreter(
        "json",
        "(nothing: the module needs the standard library only)",
        "the reward service's Python client",
    ) else {
        return;
    };
    let mut items = golden_items(60);
    items.push((
        "<think>a</think><answer>A</answer>".into(),
        "no type".into(),
    ));
    let dir = super::common::TempDir::new("reward-client");
    let path = dir.join("items.json");
    let text = serde_json::to_string(&items).unwrap();
    std::fs::write(&path, &text).unwrap();
    let script = concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
        "/tests/fixtures/rewards_client.py"
    );
    let client = |service: &Running| {
        let run = super::common::python::run_script(
            &python,
            script,
            &[&service.url(), path.to_str().unwrap()],
            Duration::from_secs(120),
        );
        assert!(
            run.status.is_some_and(|s| s.success()),
            "{}",
            run.transcript()
        );
        serde_json::from_str::<Value>(run.stdout.trim())
            .unwrap_or_else(|e| panic!("{e}: {}", run.transcript()))
    };
    let out = client(&Running::start(ServiceConfig::default()));
    // A service that takes a third of the batch per request: the module sends it in parts
    // (each 413 halves the part) and returns the same answers in the same order.
    let parts = client(&Running::start(ServiceConfig {
        max_body_bytes: text.len() / 3,
        ..ServiceConfig::default()
    }));
    assert_eq!(parts, out, "the batch sent in parts");
    let mut bad = 0;
    for (i, (r, g)) in items.iter().enumerate() {
        let want = expected(r, g);
        assert_same(&out["raw"][i], &want, &format!("raw item {i}"));
        let is_bad = want.get("error").is_some();
        bad += usize::from(is_bad);
        // A bad item, with POINTACT_REWARDS_ON_ERROR=zero, is the zero; the others the dict.
        let want = if is_bad {
            json!({"overall": 0.0})
        } else {
            want
        };
        for key in ["easyr1", "easyr1_batch"] {
            assert_close(&out[key][i], &want, &format!("{key} item {i}"));
        }
        for key in ["verl", "verl_batch"] {
            let mut got = out[key][i].clone();
            assert_eq!(
                got["score"], got["overall"],
                "{key} item {i}: score is overall"
            );
            got.as_object_mut().unwrap().remove("score");
            assert_close(&got, &want, &format!("{key} item {i}"));
        }
    }
    assert!(bad >= 1, "the last item is bad");
    // Each bad item was counted once per zeroing signature (4), and "raise" raises.
    let counted: u64 = out["errors"]
        .as_object()
        .expect("errors")
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(counted as usize, 4 * bad, "{}", out["errors"]);
    assert!(out["raised"].is_string(), "{}", out["raised"]);
}

/// Reads from `s` until the server closes it or `within` passes; what was read, and whether it
/// closed.
fn read_until_closed(s: &mut TcpStream, within: Duration) -> (String, bool) {
    s.set_read_timeout(Some(within)).expect("timeout");
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = loop {
        match s.read(&mut buf) {
            Ok(0) => break true,
            Ok(n) => all.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&all).into_owned(), closed)
}

#[test]
fn requests_are_bounded_in_size_time_and_work() {
    let service = Running::start(ServiceConfig {
        max_body_bytes: 1 << 20,
        max_bodies_bytes: 1536 << 10,
        header_timeout: Duration::from_millis(400),
        body_timeout: Duration::from_millis(600),
        ..ServiceConfig::default()
    });
    // A declared body past the limit is answered 413 before any of it is sent.
    let mut s = TcpStream::connect(service.addr).expect("connect");
    s.write_all(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n")
        .expect("write");
    let (reply, _) = read_until_closed(&mut s, Duration::from_secs(3));
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    // Headers that never end, and a kept-alive connection left idle, are closed after the
    // header timeout.
    let mut s = TcpStream::connect(service.addr).expect("connect");
    s.write_all(b"POST /score HTTP/1.1\r\nHost: x\r\n")
        .expect("write");
    let t = std::time::Instant::now();
    let (_, closed) = read_until_closed(&mut s, Duration::from_secs(5));
    assert!(closed, "unfinished headers were kept open");
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    // A chunked body that never ends is answered 408 after the body timeout.
    let mut s = TcpStream::connect(service.addr).expect("connect");
    s.write_all(
        b"POST /score HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"ite\r\n",
    )
    .expect("write");
    let (reply, _) = read_until_closed(&mut s, Duration::from_secs(5));
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("--body-timeout-s"), "{reply}");
    // Bodies held at once are bounded across connections: one declared 1 MiB body, unsent,
    // holds its share; a second one does not fit the 1.5 MiB and is answered 503 at once.
    let mut first = TcpStream::connect(service.addr).expect("connect");
    first
        .write_all(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{")
        .expect("write");
    std::thread::sleep(Duration::from_millis(100));
    let mut second = TcpStream::connect(service.addr).expect("connect");
    second
        .write_all(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{")
        .expect("write");
    let (reply, _) = read_until_closed(&mut second, Duration::from_secs(3));
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    assert!(reply.contains("--max-bodies-mib"), "{reply}");
    // Once the first times out, its share is free again and a whole request is scored.
    let (reply, _) = read_until_closed(&mut first, Duration::from_secs(3));
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    let ok = json!({"items": [{"response": "<think>x</think><answer>A</answer>", "ground_truth": "<type>general_qa</type>A"}]});
    let (code, answer) = service.post(ok.to_string().as_bytes());
    assert_eq!(code, 200, "{answer}");

    // 30 k points against a 30 k-vertex ring (under 1 MB): 9·10^8 edge tests as released, tens
    // of seconds; answered at once with an item error beside a scored item.
    let n = 30_000;
    let points: Vec<[i64; 2]> = (0..n).map(|i| [i % 640, i % 480]).collect();
    let ring: Vec<[f64; 2]> = (0..n)
        .map(|i| {
            let a = i as f64 * std::f64::consts::TAU / n as f64;
            [320.0 + 200.0 * a.cos(), 240.0 + 200.0 * a.sin()]
        })
        .collect();
    let big = json!({"items": [
        {
            "response": format!("<think>x</think><answer><point>{}</point></answer>", json!(points)),
            "ground_truth": format!("<type>point_rec</type>{}", json!({ "segmentation": ring })),
        },
        ok["items"][0],
    ]});
    let service = Running::start(ServiceConfig::default());
    let t = std::time::Instant::now();
    let (code, answer) = service.post(big.to_string().as_bytes());
    assert_eq!(code, 200, "{answer}");
    let why = answer["results"][0]["error"]
        .as_str()
        .expect("an item error");
    assert!(why.contains("--max-polygon-tests"), "{why}");
    assert_eq!(answer["results"][1]["overall"].as_f64(), Some(1.0));
    // Not a timing assertion on speed: the released cost would be tens of seconds.
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[test]
fn connections_past_the_limit_are_closed() {
    let service = Running::start(ServiceConfig {
        max_connections: 2,
        ..ServiceConfig::default()
    });
    let held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(service.addr).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut third = TcpStream::connect(service.addr).expect("connect");
    let (_, closed) = read_until_closed(&mut third, Duration::from_secs(3));
    assert!(closed, "a connection past --max-connections was kept");
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let health: Value = ureq::get(&format!("{}/health", service.url()))
        .call()
        .expect("a freed slot serves")
        .into_json()
        .expect("json");
    assert_eq!(health["status"], "ok");
}
