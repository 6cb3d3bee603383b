//! The OpenAI-compatible backend against a local mock server: what it sends, how it retries, and
//! how each kind of failure reaches the caller.
//!
//! The mock is a bare HTTP/1.1 responder on 127.0.0.1:0: each connection gets the next canned reply
//! in order (or is held open without one), and every request is recorded for inspection.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use super::openai_mock::{completion, Mock, Reply};

use crate::openai::OpenAiConfig;
use crate::openai::OpenAiError;
use crate::openai::OpenAiPointer;
use crate::{Ability, Pointer, PointerError, PointingError};
use base64::Engine as _;
use pointact_core::camera::{Frame, RgbImage};
use pointact_core::geometry::{DepthImage, Intrinsics};
use pointact_core::nalgebra::Isometry3;

/// A 640x480 frame whose every pixel differs from its neighbours, so a decode check is meaningful.
fn frame() -> Frame {
    let (w, h) = (640u32, 480u32);
    let rgb = RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([
            (x % 256) as u8,
            (y % 256) as u8,
            ((x * 7 + y * 13) % 251) as u8,
        ])
    });
    let (wu, hu) = (w as usize, h as usize);
    Frame {
        rgb,
        depth: DepthImage::new(wu, hu, vec![1.0; wu * hu]).unwrap(),
        intrinsics: Intrinsics::pinhole(wu, hu, 600.0, 600.0, 320.0, 240.0),
        base_from_camera: Isometry3::identity(),
        stamp_s: 0.0,
    }
}

/// Test settings: tiny backoff, short but safe timeouts, no key unless a test sets one (so an
/// `OPENAI_API_KEY` in the environment cannot change what the tests see).
fn config(mock_base: &str) -> OpenAiConfig {
    OpenAiConfig {
        api_key: None,
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(2),
        backoff_base: Duration::from_millis(1),
        ..OpenAiConfig::new(mock_base, "embodied-r1")
    }
}

fn pointer(config: OpenAiConfig) -> OpenAiPointer {
    OpenAiPointer::new(config).expect("valid endpoint")
}

const REPLY: &str =
    "<think>The mug is in the middle of the table.</think><answer><point>[[322, 238]]</point></answer>";

#[test]
fn happy_path_sends_the_embodied_r1_request_and_maps_points_to_the_frame() {
    let mock = Mock::start(vec![Reply::Http(200, completion(REPLY))]);
    let mut p = pointer(OpenAiConfig {
        api_key: Some("sk-test".into()),
        ..config(&mock.base)
    });
    let frame = frame();

    let pointing = p.point(&frame, Ability::Reg, "the red mug").unwrap();

    // 640x480 reaches the model as 644x476; (322, 238) there is (320, 240) in the frame.
    assert_eq!(pointing.map.model().width, 644);
    assert_eq!(pointing.map.model().height, 476);
    assert_eq!(pointing.points_px(), vec![[320.0, 240.0]]);
    assert_eq!(pointing.answer.raw, REPLY);
    assert_eq!(
        pointing.answer.reasoning.as_deref(),
        Some("The mug is in the middle of the table.")
    );

    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert_eq!(req.request_line, "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(
        req.headers.get("authorization").map(String::as_str),
        Some("Bearer sk-test")
    );
    assert!(req.headers["content-type"].starts_with("application/json"));

    let body = req.json();
    assert_eq!(body["model"], "embodied-r1");
    assert_eq!(body["max_tokens"], 1024);
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["repetition_penalty"], 1.05);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    let content = messages[0]["content"].as_array().unwrap();
    assert_eq!(content.len(), 2);
    // Image first, then the prompt: Embodied-R1's order.
    assert_eq!(content[0]["type"], "image_url");
    assert_eq!(content[1]["type"], "text");
    assert_eq!(
        content[1]["text"].as_str().unwrap(),
        Ability::Reg.prompt("the red mug")
    );

    let url = content[0]["image_url"]["url"].as_str().unwrap();
    let b64 = url
        .strip_prefix("data:image/png;base64,")
        .expect("a PNG data URL");
    let png = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let decoded = image::load_from_memory_with_format(&png, image::ImageFormat::Png)
        .unwrap()
        .to_rgb8();
    assert_eq!(decoded.dimensions(), (640, 480));
    assert!(decoded.as_raw() == frame.rgb.as_raw(), "PNG pixels differ");
}

#[test]
fn transient_statuses_are_retried_until_success() {
    let mock = Mock::start(vec![
        Reply::Http(503, r#"{"error":"model loading"}"#.into()),
        Reply::Http(429, r#"{"error":"queue full"}"#.into()),
        Reply::Http(200, completion(REPLY)),
    ]);
    let mut p = pointer(config(&mock.base));

    let pointing = p.point(&frame(), Ability::Reg, "the red mug").unwrap();

    assert_eq!(pointing.points_px(), vec![[320.0, 240.0]]);
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    // Every attempt carries the same request; no key was configured, so no header.
    assert!(requests.iter().all(|r| r.body == requests[0].body));
    assert!(requests
        .iter()
        .all(|r| !r.headers.contains_key("authorization")));
}

#[test]
fn a_client_error_is_not_retried_and_reports_status_and_body() {
    let body = r#"{"object":"error","message":"The model `embodied-r1` does not exist.","type":"NotFoundError","code":400}"#;
    let mock = Mock::start(vec![
        Reply::Http(400, body.into()),
        Reply::Http(200, completion(REPLY)),
    ]);
    let mut p = pointer(config(&mock.base));

    let err = p.point(&frame(), Ability::Reg, "the red mug").unwrap_err();

    assert_eq!(mock.requests().len(), 1, "a 400 must not be retried");
    let text = err.to_string();
    assert!(text.contains("400"), "{text}");
    assert!(text.contains("does not exist"), "{text}");
    match err {
        PointerError::Remote(OpenAiError::Status {
            status,
            body: got,
            attempts,
            ..
        }) => {
            assert_eq!(status, 400);
            assert_eq!(got, body);
            assert_eq!(attempts, 1);
        }
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[test]
fn a_silent_server_times_out_after_the_retries() {
    let mock = Mock::start(vec![Reply::Hang, Reply::Hang]);
    let mut p = pointer(OpenAiConfig {
        timeout: Duration::from_millis(300),
        retries: 1,
        ..config(&mock.base)
    });
    let started = Instant::now();

    let err = p.point(&frame(), Ability::Reg, "the red mug").unwrap_err();

    // Generous bound: only there to catch a hang, not to time the client.
    assert!(started.elapsed() < Duration::from_secs(20));
    match &err {
        PointerError::Remote(OpenAiError::Timeout { attempts, url, .. }) => {
            assert_eq!(*attempts, 2);
            assert!(url.ends_with("/v1/chat/completions"));
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(mock.requests().len(), 2);
}

#[test]
fn a_refused_connection_names_the_url() {
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", dead.local_addr().unwrap());
    drop(dead);
    let mut p = pointer(OpenAiConfig {
        retries: 2,
        ..config(&base)
    });

    let err = p.point(&frame(), Ability::Reg, "the red mug").unwrap_err();

    let text = err.to_string();
    assert!(text.contains(&format!("{base}/chat/completions")), "{text}");
    match err {
        PointerError::Remote(OpenAiError::Unreachable { attempts, .. }) => assert_eq!(attempts, 3),
        other => panic!("expected unreachable, got {other:?}"),
    }
}

#[test]
fn a_reply_without_points_is_the_parsers_error_with_the_raw_text() {
    let raw = "<think>I cannot see a mug.</think><answer>There is no mug.</answer>";
    let mock = Mock::start(vec![Reply::Http(200, completion(raw))]);
    let mut p = pointer(config(&mock.base));

    let err = p.point(&frame(), Ability::Reg, "the red mug").unwrap_err();

    match err {
        PointerError::Answer(PointingError::MissingPointBlock { raw: got }) => assert_eq!(got, raw),
        other => panic!("expected the parser's MissingPointBlock, got {other:?}"),
    }
    assert_eq!(mock.requests().len(), 1);
}

#[test]
fn a_non_json_body_is_reported_with_the_raw_body() {
    let body = "<html><body>502 Bad Gateway from a proxy that said 200</body></html>";
    let mock = Mock::start(vec![Reply::Http(200, body.into())]);
    let mut p = pointer(config(&mock.base));

    let err = p.point(&frame(), Ability::Reg, "the red mug").unwrap_err();

    assert!(err.to_string().contains("Bad Gateway"), "{err}");
    match err {
        PointerError::Remote(OpenAiError::BadResponse { body: got, .. }) => assert_eq!(got, body),
        other => panic!("expected a bad-response error, got {other:?}"),
    }
}

#[test]
fn a_completion_without_content_is_reported_with_the_raw_body() {
    let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null}}]}"#;
    let mock = Mock::start(vec![Reply::Http(200, body.into())]);
    let mut p = pointer(config(&mock.base));

    let err = p.point(&frame(), Ability::Reg, "the red mug").unwrap_err();

    match err {
        PointerError::Remote(OpenAiError::BadResponse {
            body: got, reason, ..
        }) => {
            assert_eq!(got, body);
            assert!(reason.contains("content"), "{reason}");
        }
        other => panic!("expected a bad-response error, got {other:?}"),
    }
}

#[test]
fn reasoning_split_off_by_the_server_is_put_back() {
    // vLLM with `--reasoning-parser` returns the think block separately.
    let body = serde_json::json!({
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "reasoning_content": "The mug is in the middle.",
                "content": "<answer><point>[[322, 238]]</point></answer>",
            },
            "finish_reason": "stop",
        }],
    })
    .to_string();
    let mock = Mock::start(vec![Reply::Http(200, body)]);
    let mut p = pointer(config(&mock.base));

    let pointing = p.point(&frame(), Ability::Reg, "the red mug").unwrap();

    assert_eq!(
        pointing.answer.reasoning.as_deref(),
        Some("The mug is in the middle.")
    );
    assert_eq!(pointing.points_px(), vec![[320.0, 240.0]]);
}

#[test]
fn configuration_defaults_and_endpoint_checks() {
    let c = OpenAiConfig::new("http://gpu:8000/v1/", "m");
    assert_eq!(c.chat_url(), "http://gpu:8000/v1/chat/completions");
    assert_eq!(c.timeout, Duration::from_secs(120));
    assert_eq!(c.connect_timeout, Duration::from_secs(5));
    assert_eq!(c.deadline, Duration::from_secs(180));
    assert_eq!(c.retries, 3);
    assert_eq!(c.max_tokens, 1024);
    assert_eq!(c.temperature, 0.0);
    assert_eq!(c.repetition_penalty, 1.05);
    assert_eq!(c.backoff(1), Duration::from_millis(500));
    assert_eq!(c.backoff(3), Duration::from_secs(2));
    assert!(matches!(
        OpenAiPointer::new(OpenAiConfig::new("gpu:8000/v1", "m")),
        Err(OpenAiError::InvalidEndpoint { .. })
    ));
}

#[test]
fn an_oversized_reply_is_named_as_such_and_not_retried() {
    // 20 MB of a never-ending "answer": no pointing reply is anywhere near that long.
    let huge = completion(&"[[1, 2]] ".repeat(20 << 20 >> 3));
    assert!(huge.len() > 20 << 20);
    let mock = Mock::start(vec![
        Reply::Http(200, huge),
        Reply::Http(200, completion(REPLY)),
    ]);
    let mut p = pointer(config(&mock.base));

    let err = p.point(&frame(), Ability::Reg, "the red mug").unwrap_err();

    assert_eq!(
        mock.requests().len(),
        1,
        "an oversized reply must not be retried"
    );
    let text = err.to_string();
    assert!(!text.contains("is the server running"), "{text}");
    match err {
        PointerError::Remote(OpenAiError::TooLarge { limit, .. }) => {
            assert_eq!(limit, crate::openai::MAX_REPLY_BYTES)
        }
        other => panic!("expected a too-large error, got {other:?}"),
    }
}

/// A reply that never ends, a byte at a time, is cut off by the question's deadline (ureq's
/// per-request timeout covers the whole exchange, not only silences), and the error says which
/// limit to raise. The attempt timeout (10 s) is far above the deadline, so only the deadline can
/// have ended it.
#[test]
fn a_trickling_reply_is_cut_off_by_the_deadline() {
    let mock = Mock::start(vec![Reply::Trickle; 4]);
    let mut p = pointer(OpenAiConfig {
        deadline: Duration::from_secs(1),
        retries: 3,
        ..config(&mock.base)
    });

    let err = p.point(&frame(), Ability::Reg, "the red mug").unwrap_err();

    let text = err.to_string();
    match &err {
        PointerError::Remote(OpenAiError::Deadline {
            deadline,
            attempts,
            url,
            last,
        }) => {
            assert_eq!(*deadline, Duration::from_secs(1));
            assert_eq!(*attempts, 1);
            assert!(url.ends_with("/v1/chat/completions"), "{url}");
            assert!(last.contains("timed out"), "{last}");
        }
        other => panic!("expected the deadline error, got {other:?}"),
    }
    for part in ["deadline of 1s", "after 1 attempt(s)", "--deadline-s"] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }
    assert_eq!(mock.requests().len(), 1, "no retry after the deadline");
}

/// Attempts that each time out stop when the deadline is spent, long before the retries are: the
/// server sees fewer connections than `retries + 1`, and the error counts them.
#[test]
fn retries_stop_once_the_deadline_is_spent() {
    let retries = 10;
    let mock = Mock::start(vec![Reply::Hang; retries as usize + 1]);
    let mut p = pointer(OpenAiConfig {
        timeout: Duration::from_millis(300),
        deadline: Duration::from_secs(2),
        retries,
        ..config(&mock.base)
    });

    let err = p.point(&frame(), Ability::Reg, "the red mug").unwrap_err();

    let seen = mock.requests().len() as u32;
    assert!(
        (2..retries + 1).contains(&seen),
        "{seen} connections for {retries} retries"
    );
    match err {
        PointerError::Remote(OpenAiError::Deadline { attempts, .. }) => assert_eq!(attempts, seen),
        other => panic!("expected the deadline error, got {other:?}"),
    }
}

/// No retry is started when the backoff wait alone would use up the deadline: the second, good
/// reply is never asked for, and the error reports the last failure.
#[test]
fn no_retry_starts_without_time_left_for_it() {
    let mock = Mock::start(vec![
        Reply::Http(503, r#"{"error":"model loading"}"#.into()),
        Reply::Http(200, completion(REPLY)),
    ]);
    let mut p = pointer(OpenAiConfig {
        deadline: Duration::from_secs(1),
        backoff_base: Duration::from_secs(5),
        ..config(&mock.base)
    });

    let err = p.point(&frame(), Ability::Reg, "the red mug").unwrap_err();

    assert_eq!(mock.requests().len(), 1);
    match err {
        PointerError::Remote(OpenAiError::Deadline { attempts, last, .. }) => {
            assert_eq!(attempts, 1);
            assert!(last.contains("HTTP 503"), "{last}");
        }
        other => panic!("expected the deadline error, got {other:?}"),
    }
}
