//! `pointact serve rewards`: the released rewards over HTTP, so that trainers in Python (EasyR1,
//! verl, on Ray across nodes) score with exactly the functions the in-process trainer uses, instead
//! of a second copy of them that could drift.
//!
//! One route does the work: `POST /score` with `{"items": [{"response": "...", "ground_truth":
//! "<type>...</type>..."}, ...]}` answers `{"results": [...]}` in the same order, each the released
//! score dict (same key names and order, `overall` among them) or `{"error": "..."}`. A bad item
//! is answered in place and the others are scored; only a body that is not a JSON object with an
//! `items` array is refused as a whole (HTTP 400). `GET /health` says the service is up.
//!
//! Bytes that are not UTF-8 cannot be a JSON string, and Python's trainer could not have produced
//! them from decoded tokens; a body holding some is still read (invalid sequences become U+FFFD)
//! and every item whose strings then hold U+FFFD is answered with an error rather than scored on
//! altered text. (An item that held a genuine U+FFFD in such a body is refused too: it cannot be
//! told apart.)
//!
//! The client side is `python/pointact_rewards.py` (the scoring-function signatures verl and
//! EasyR1 expect, calling this service).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rayon::prelude::*;
use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::rewards::{score, RewardError, Score};

/// Limits of one request.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Largest request body (bytes); larger ones are answered 413 without being read whole.
    pub max_body_bytes: usize,
    /// Most items in one batch.
    pub max_items: usize,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            // A rollout batch of 4096 responses of 2048 tokens is ~40 MB of text.
            max_body_bytes: 256 << 20,
            max_items: 65_536,
        }
    }
}

/// A bound reward service; [`RewardService::serve`] answers until its shutdown future ends.
pub struct RewardService {
    listener: TcpListener,
    config: Arc<ServiceConfig>,
}

impl RewardService {
    /// Listens on `addr` (port 0: any free port, see [`RewardService::local_addr`]).
    pub async fn bind(addr: &str, config: ServiceConfig) -> std::io::Result<Self> {
        Ok(RewardService {
            listener: TcpListener::bind(addr).await?,
            config: Arc::new(config),
        })
    }

    /// The address the listener is bound to (with the port picked when `bind` was given 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves connections (HTTP/1.1, keep-alive) until `shutdown` completes. A connection's
    /// failure (a client that hangs up mid-request) ends that connection only.
    pub async fn serve(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> std::io::Result<()> {
        tokio::pin!(shutdown);
        loop {
            let (stream, _) = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                accepted = self.listener.accept() => match accepted {
                    Ok(a) => a,
                    // Out of file descriptors and the like: keep serving the open connections.
                    Err(e) => {
                        tracing::warn!("reward service: accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let config = self.config.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let config = config.clone();
                    async move { Ok::<_, Infallible>(answer(req, &config).await) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!("reward service: connection ended: {e}");
                }
            });
        }
    }
}

/// One request's answer.
async fn answer(req: Request<Incoming>, config: &ServiceConfig) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/health") => reply(
            StatusCode::OK,
            &json!({"status": "ok", "service": "pointact rewards", "version": env!("CARGO_PKG_VERSION")}),
        ),
        (&Method::POST, "/score") => {
            let body = match Limited::new(req.into_body(), config.max_body_bytes)
                .collect()
                .await
            {
                Ok(b) => b.to_bytes(),
                Err(e) => {
                    let too_large = e.is::<http_body_util::LengthLimitError>();
                    let (status, why) = if too_large {
                        (
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!("the body is over {} bytes", config.max_body_bytes),
                        )
                    } else {
                        (StatusCode::BAD_REQUEST, format!("reading the body: {e}"))
                    };
                    return reply(status, &json!({ "error": why }));
                }
            };
            let max_items = config.max_items;
            // Scoring is CPU work: off the runtime's threads, items in parallel.
            match tokio::task::spawn_blocking(move || score_body(&body, max_items)).await {
                Ok(Ok(results)) => {
                    // Each result is already JSON text, its keys in the released order.
                    let body = format!("{{\"results\":[{}]}}", results.join(","));
                    respond(StatusCode::OK, body)
                }
                Ok(Err(why)) => reply(StatusCode::BAD_REQUEST, &json!({ "error": why })),
                Err(e) => reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &json!({ "error": format!("scoring failed: {e}") }),
                ),
            }
        }
        (_, "/score" | "/health") => reply(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({"error": "POST /score, GET /health"}),
        ),
        (_, path) => reply(
            StatusCode::NOT_FOUND,
            &json!({ "error": format!("no route {path}: POST /score, GET /health") }),
        ),
    }
}

fn reply(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    respond(status, body.to_string())
}

fn respond(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

/// Scores a `/score` body: one result per item, in order, each as JSON text (a score dict keeps
/// the released key order, which a `serde_json::Value` map would sort); `Err` only when the body
/// is not an object with an `items` array (or has too many items).
pub(crate) fn score_body(body: &[u8], max_items: usize) -> Result<Vec<String>, String> {
    let (text, lossy) = match std::str::from_utf8(body) {
        Ok(t) => (std::borrow::Cow::Borrowed(t), false),
        Err(_) => (String::from_utf8_lossy(body), true),
    };
    let doc: Value =
        serde_json::from_str(&text).map_err(|e| format!("the body is not JSON: {e}"))?;
    let items = doc
        .get("items")
        .and_then(Value::as_array)
        .ok_or("the body must be an object with an `items` array")?;
    if items.len() > max_items {
        return Err(format!(
            "{} items, at most {max_items} per request",
            items.len()
        ));
    }
    Ok(items
        .par_iter()
        .map(|item| score_item(item, lossy))
        .collect())
}

/// One item's result: the released score dict, or `{"error": "..."}`, as JSON text.
fn score_item(item: &Value, lossy: bool) -> String {
    let field = |name: &str| -> Result<&str, String> {
        let s = item
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("the item has no string `{name}`"))?;
        if lossy && s.contains('\u{FFFD}') {
            return Err(format!("the item's `{name}` is not valid UTF-8"));
        }
        Ok(s)
    };
    let scored = field("response")
        .and_then(|r| Ok((r, field("ground_truth")?)))
        .and_then(|(r, gt)| score(r, gt).map_err(|e| error_line(&e)));
    match scored {
        Ok(s) => score_json(&s),
        Err(why) => json!({ "error": why }).to_string(),
    }
}

/// A score dict as JSON text, keys in the released order. A component that is not finite is
/// written as Python's `json.dumps` writes it (`NaN`, `Infinity`, `-Infinity`), which Python's
/// `json.loads` reads back: the trainer gets what the released function returned, not `null`.
fn score_json(score: &Score) -> String {
    let parts: Vec<String> = score
        .components()
        .iter()
        .map(|(k, v)| {
            let value = match *v {
                v if v.is_nan() => "NaN".to_string(),
                v if v == f64::INFINITY => "Infinity".to_string(),
                v if v == f64::NEG_INFINITY => "-Infinity".to_string(),
                v => serde_json::to_string(&v).unwrap_or_else(|_| "NaN".into()),
            };
            format!("{}:{value}", Value::from(*k))
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// An error as the trainer sees it: the released code's exception class, then why.
fn error_line(e: &RewardError) -> String {
    format!("{}: {e}", e.python_exception())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(results: Vec<String>) -> Vec<Value> {
        results
            .iter()
            .map(|r| serde_json::from_str(r).unwrap())
            .collect()
    }

    #[test]
    fn a_score_keeps_the_released_key_order() {
        let out = score_body(
            br#"{"items": [{"response": "<think>x</think><answer>A</answer>", "ground_truth": "<type>general_qa</type>A"}]}"#,
            1,
        )
        .unwrap();
        let keys: Vec<&str> = out[0].split('"').skip(1).step_by(2).collect();
        let want = score(
            "<think>x</think><answer>A</answer>",
            "<type>general_qa</type>A",
        )
        .unwrap();
        let names: Vec<&str> = want.components().iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, names, "{}", out[0]);
    }

    #[test]
    fn non_finite_components_are_written_as_python_writes_them() {
        // A NaN coordinate: the released distance ramp turns it into NaN.
        // A NaN coordinate: the released distance ramp turns it into NaN (golden case 269).
        let r = "<think>x</think><answer><point>[[NaN, 100]]</point></answer>";
        let s = score(r, "<type>point_ref</type>[[100, 100], [300, 200]]").unwrap();
        assert!(s.overall().is_nan());
        let text = score_json(&s);
        assert!(text.starts_with("{\"overall\":NaN,"), "{text}");
        assert!(!text.contains("null"), "{text}");
    }

    #[test]
    fn bad_items_are_answered_in_place_and_the_rest_scored() {
        let ok = r#"<think>x</think><answer>A</answer>"#;
        let body = json!({"items": [
            {"response": ok, "ground_truth": "<type>general_qa</type>A"},
            {"response": ok},
            {"response": ok, "ground_truth": "no type here"},
            {"response": 3, "ground_truth": "<type>general_qa</type>A"},
            {"response": ok, "ground_truth": "<type>general_qa</type>B"},
        ]});
        let out = parsed(score_body(body.to_string().as_bytes(), 100).unwrap());
        assert_eq!(out.len(), 5);
        assert!(
            (out[0]["overall"].as_f64().unwrap() - 1.0).abs() < 1e-12,
            "{}",
            out[0]
        );
        assert!(out[1]["error"].as_str().unwrap().contains("ground_truth"));
        assert!(out[2]["error"].is_string(), "{}", out[2]);
        assert!(out[3]["error"].as_str().unwrap().contains("response"));
        assert!((out[4]["overall"].as_f64().unwrap() - 0.1).abs() < 1e-12);
    }

    #[test]
    fn invalid_utf8_fails_only_its_item() {
        let mut body = br#"{"items": [{"response": "<think>x</think><answer>A</answer>", "ground_truth": "<type>general_qa</type>A"}, {"response": "bad "#.to_vec();
        body.extend_from_slice(&[0xff, 0xfe]);
        body.extend_from_slice(br#"", "ground_truth": "<type>general_qa</type>A"}]}"#);
        let out = parsed(score_body(&body, 100).unwrap());
        assert!(
            (out[0]["overall"].as_f64().unwrap() - 1.0).abs() < 1e-12,
            "{}",
            out[0]
        );
        assert!(
            out[1]["error"].as_str().unwrap().contains("UTF-8"),
            "{}",
            out[1]
        );
    }

    #[test]
    fn a_body_without_items_is_refused_whole() {
        assert!(score_body(b"[1, 2]", 10).is_err());
        assert!(score_body(b"{\"items\": 3}", 10).is_err());
        assert!(score_body(b"not json", 10).is_err());
        let many = json!({"items": vec![json!({}); 11]}).to_string();
        assert!(score_body(many.as_bytes(), 10)
            .unwrap_err()
            .contains("at most 10"));
    }
}
