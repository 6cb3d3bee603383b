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
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use pointact_core::listener::{Accepted, BoundedListener};
use rayon::prelude::*;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::rewards::{polygon_tests, score, RewardError, Score};

/// What one request, one item and all connections together may cost. Every limit is a flag of
/// `serve rewards`.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// Largest request body (bytes); a larger declared `Content-Length` is answered 413 before
    /// any of the body is read, a chunked body as soon as it grows past it.
    pub max_body_bytes: usize,
    /// Most items in one batch.
    pub max_items: usize,
    /// Most point-in-polygon edge tests one item may need ([`polygon_tests`]); an item over it
    /// is answered with an error in place, unscored.
    pub max_polygon_tests: u64,
    /// Most point-in-polygon edge tests all items of one request may need together; a request
    /// over it is refused whole (413) before any item is scored, so one request cannot hold the
    /// scoring threads for minutes.
    pub max_batch_polygon_tests: u64,
    /// Bytes of request bodies held at once across all connections, read or being read; a
    /// request that would go past it is answered 503 (the client retries later).
    pub max_bodies_bytes: usize,
    /// Connections served at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// A request's headers must arrive within this, counted from the end of the previous
    /// request on a kept-alive connection, so an idle connection is closed after it too.
    pub header_timeout: Duration,
    /// A request's whole body must arrive within this, counted from its headers (408 if not).
    pub body_timeout: Duration,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            // A rollout batch of 4096 responses of 2048 tokens is ~40 MB of text.
            max_body_bytes: 256 << 20,
            max_items: 65_536,
            // A few hundred points against a mask outline of thousands of vertices, with room;
            // about 0.2 s of one core.
            max_polygon_tests: 4_000_000,
            // 64 items at the item limit, about 15 s of one core; a rollout batch of 4096
            // `point_rec` answers of 10 points against 1000-vertex masks needs 41 million.
            max_batch_polygon_tests: 256_000_000,
            max_bodies_bytes: 1 << 30,
            max_connections: 64,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
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
        let config = self.config;
        let bodies = Arc::new(Semaphore::new(config.max_bodies_bytes.max(1)));
        let mut listener =
            BoundedListener::new(self.listener, config.max_connections, "serve rewards");
        loop {
            let Accepted { stream, slot, .. } = tokio::select! {
                _ = &mut shutdown => return Ok(()),
                accepted = listener.accept() => accepted,
            };
            let config = config.clone();
            let bodies = bodies.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let header_timeout = config.header_timeout;
                let service = hyper::service::service_fn(move |req| {
                    let config = config.clone();
                    let bodies = bodies.clone();
                    async move { Ok::<_, Infallible>(answer(req, &config, &bodies).await) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(header_timeout)
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
async fn answer(
    req: Request<Incoming>,
    config: &ServiceConfig,
    bodies: &Arc<Semaphore>,
) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/health") => reply(
            StatusCode::OK,
            &json!({"status": "ok", "service": "pointact rewards", "version": env!("CARGO_PKG_VERSION")}),
        ),
        (&Method::POST, "/score") => {
            let (body, held) = match read_body(req, config, bodies).await {
                Ok(b) => b,
                Err((status, why)) => return reply(status, &json!({ "error": why })),
            };
            let limits = ItemLimits {
                max_items: config.max_items,
                max_polygon_tests: config.max_polygon_tests,
                max_batch_polygon_tests: config.max_batch_polygon_tests,
            };
            // hyper drops this future when the client hangs up; the scoring thread cannot be
            // dropped with it, so it is told, and stops at its next item.
            let abandoned = Abandoned::default();
            let flag = abandoned.0.clone();
            // Scoring is CPU work: off the runtime's threads, items in parallel.
            let scored =
                tokio::task::spawn_blocking(move || score_body(&body, limits, &flag)).await;
            drop(held);
            match scored {
                Ok(Ok(results)) => {
                    // Each result is already JSON text, its keys in the released order.
                    let body = format!("{{\"results\":[{}]}}", results.join(","));
                    respond(StatusCode::OK, body)
                }
                Ok(Err(Refused(status, why))) => reply(status, &json!({ "error": why })),
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

/// Reads and drops what a refused body still sends, for up to 2 s and 64 MiB, while its answer
/// goes out: a client still sending when the connection closed would be reset before it read
/// the answer (unread data makes the close a TCP reset). Nothing is kept.
fn discard(mut body: Incoming) {
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        let mut left: usize = 64 << 20;
        while let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline, body.frame()).await {
            let n = frame.data_ref().map_or(0, |d| d.len());
            match left.checked_sub(n) {
                Some(l) => left = l,
                None => break,
            }
        }
    });
}

/// A request's body, with its share of the bodies' budget (held until the answer is made), or
/// the status and reason to refuse it with: 413 for a body over `max_body_bytes` (declared or
/// sent), 503 when the bodies in flight leave no room, 408 when it does not arrive in time, 400
/// when the connection fails mid-body.
async fn read_body(
    req: Request<Incoming>,
    config: &ServiceConfig,
    bodies: &Arc<Semaphore>,
) -> Result<(Vec<u8>, OwnedSemaphorePermit), (StatusCode, String)> {
    let max = config.max_body_bytes;
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over {max} bytes (--max-body-mib)"),
        )
    };
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        discard(req.into_body());
        return Err(too_large());
    }
    let busy = || {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the service holds {} bytes of request bodies already (--max-bodies-mib); retry later",
                config.max_bodies_bytes
            ),
        )
    };
    let reserve = |n: usize| -> Result<OwnedSemaphorePermit, (StatusCode, String)> {
        let n = u32::try_from(n).map_err(|_| too_large())?;
        bodies.clone().try_acquire_many_owned(n).map_err(|_| busy())
    };
    // A declared length is reserved whole at once: a client cannot hold a share it never sends.
    let mut held = reserve(declared.unwrap_or(0) as usize)?;
    let mut reserved = declared.unwrap_or(0) as usize;
    let mut data = Vec::with_capacity(reserved.min(1 << 20));
    let deadline = tokio::time::Instant::now() + config.body_timeout;
    let mut body = req.into_body();
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                return Err((
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "the body did not arrive within {} s (--body-timeout-s)",
                        config.body_timeout.as_secs_f64()
                    ),
                ))
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err((StatusCode::BAD_REQUEST, format!("reading the body: {e}")))
            }
            Ok(Some(Ok(f))) => f,
        };
        let Ok(chunk) = frame.into_data() else {
            continue; // trailers
        };
        if data.len() + chunk.len() > max {
            discard(body);
            return Err(too_large());
        }
        if data.len() + chunk.len() > reserved {
            let more = data.len() + chunk.len() - reserved;
            held.merge(reserve(more)?);
            reserved += more;
        }
        data.extend_from_slice(&chunk);
    }
    Ok((data, held))
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

/// Set when a request's answer is no longer wanted: its future was dropped because the client
/// closed the connection (or the service stopped).
#[derive(Default)]
struct Abandoned(Arc<AtomicBool>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A whole request refused: the status and why.
#[derive(Debug)]
pub(crate) struct Refused(pub StatusCode, pub String);

/// What a batch may hold and its items may cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ItemLimits {
    pub max_items: usize,
    pub max_polygon_tests: u64,
    pub max_batch_polygon_tests: u64,
}

/// Scores a `/score` body: one result per item, in order, each as JSON text (a score dict keeps
/// the released key order, which a `serde_json::Value` map would sort). Refused whole (400) when
/// the body is not an object with an `items` array of at most `max_items`, and (413) when the
/// items it would score need more polygon work together than `max_batch_polygon_tests`. Stops
/// early, with a refusal nobody reads, once `abandoned` is set.
///
/// The body is read in place: `items` and each item's two strings are taken out of the text and
/// every other value is skipped unkept, so a request costs at most about twice its size in memory
/// (its text and its items' strings; a `serde_json::Value` of a long array of small numbers takes
/// some 17 times its text).
pub(crate) fn score_body(
    body: &[u8],
    limits: ItemLimits,
    abandoned: &AtomicBool,
) -> Result<Vec<String>, Refused> {
    let max_items = limits.max_items;
    let (text, lossy) = match std::str::from_utf8(body) {
        Ok(t) => (std::borrow::Cow::Borrowed(t), false),
        Err(_) => (String::from_utf8_lossy(body), true),
    };
    let bad = |why: String| Refused(StatusCode::BAD_REQUEST, why);
    const NEEDS_ITEMS: &str = "the body must be an object with an `items` array";
    let refuse = |e: serde_json::Error| match e.classify() {
        serde_json::error::Category::Data => bad(format!(
            "{NEEDS_ITEMS} of at most {max_items} items (--max-items): {e}"
        )),
        _ => bad(format!("the body is not JSON: {e}")),
    };
    let mut de = serde_json::Deserializer::from_str(&text);
    let [items] = Fields::new(["items"])
        .deserialize(&mut de)
        .map_err(refuse)?;
    de.end().map_err(refuse)?;
    let items = items.ok_or_else(|| bad(NEEDS_ITEMS.into()))?;
    let items = ItemsSeed(max_items)
        .deserialize(&mut serde_json::Deserializer::from_str(items.get()))
        .map_err(refuse)?;

    let items: Vec<Result<Item, String>> = items.par_iter().map(|raw| item(raw, lossy)).collect();
    // Items over the per-item limit are answered with an error, not scored: they cost nothing.
    let work: u64 = items
        .iter()
        .flatten()
        .map(|i| i.polygon_tests)
        .filter(|&t| t <= limits.max_polygon_tests)
        .fold(0, u64::saturating_add);
    if work > limits.max_batch_polygon_tests {
        return Err(Refused(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the items need {work} point-in-polygon tests together, over this service's limit of {} per request (--max-batch-polygon-tests): send them in smaller batches",
                limits.max_batch_polygon_tests
            ),
        ));
    }
    items
        .into_par_iter()
        .map(|item| {
            if abandoned.load(Ordering::Relaxed) {
                return Err(Refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the client closed the connection".into(),
                ));
            }
            Ok(score_item(item, limits.max_polygon_tests))
        })
        .collect()
}

/// An item's two strings and the polygon work scoring them needs.
struct Item {
    response: String,
    ground_truth: String,
    polygon_tests: u64,
}

/// An item read from its JSON text, or why it cannot be scored.
fn item(raw: &RawValue, lossy: bool) -> Result<Item, String> {
    let [response, ground_truth] = Fields::new(["response", "ground_truth"])
        .deserialize(&mut serde_json::Deserializer::from_str(raw.get()))
        .unwrap_or_default();
    let field = |name: &str, value: Option<&RawValue>| -> Result<String, String> {
        let s = value
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .ok_or_else(|| format!("the item has no string `{name}`"))?;
        if lossy && s.contains('\u{FFFD}') {
            return Err(format!("the item's `{name}` is not valid UTF-8"));
        }
        Ok(s)
    };
    let response = field("response", response)?;
    let ground_truth = field("ground_truth", ground_truth)?;
    Ok(Item {
        polygon_tests: polygon_tests(&response, &ground_truth),
        response,
        ground_truth,
    })
}

/// One item's result: the released score dict, or `{"error": "..."}`, as JSON text.
fn score_item(item: Result<Item, String>, max_polygon_tests: u64) -> String {
    let scored = item.and_then(|i| {
        if i.polygon_tests > max_polygon_tests {
            return Err(format!(
                "the item needs {} point-in-polygon tests (predicted points times polygon vertices), over this service's limit of {max_polygon_tests} (--max-polygon-tests)",
                i.polygon_tests
            ));
        }
        score(&i.response, &i.ground_truth).map_err(|e| error_line(&e))
    });
    match scored {
        Ok(s) => score_json(&s),
        Err(why) => json!({ "error": why }).to_string(),
    }
}

/// The unparsed values of the named keys of a JSON object, the last of a repeated key winning as
/// in Python's `json.loads`; every other value is skipped without being kept.
struct Fields<'de, const N: usize> {
    names: [&'static str; N],
    values: [Option<&'de RawValue>; N],
}

impl<const N: usize> Fields<'_, N> {
    fn new(names: [&'static str; N]) -> Self {
        Fields {
            names,
            values: [None; N],
        }
    }
}

impl<'de, const N: usize> DeserializeSeed<'de> for Fields<'de, N> {
    type Value = [Option<&'de RawValue>; N];

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, const N: usize> Visitor<'de> for Fields<'de, N> {
    type Value = [Option<&'de RawValue>; N];

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object with {:?}", self.names)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        while let Some(key) = map.next_key_seed(KeyIndex(&self.names))? {
            match key {
                Some(i) => self.values[i] = Some(map.next_value()?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(self.values)
    }
}

/// Which of the names a key is, compared in place (a key is not copied).
struct KeyIndex<'n>(&'n [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyIndex<'_> {
    type Value = Option<usize>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeyIndex<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.0.iter().position(|n| *n == key))
    }
}

/// The `items` array's elements, unparsed; refused as soon as it holds more than the limit, so a
/// long array of tiny values is not collected first.
struct ItemsSeed(usize);

impl<'de> DeserializeSeed<'de> for ItemsSeed {
    type Value = Vec<&'de RawValue>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed {
    type Value = Vec<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an array of at most {} items", self.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            if items.len() == self.0 {
                return Err(de::Error::custom("too many items"));
            }
            items.push(item);
        }
        Ok(items)
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

    fn items(max_items: usize) -> ItemLimits {
        let c = ServiceConfig::default();
        ItemLimits {
            max_items,
            max_polygon_tests: c.max_polygon_tests,
            max_batch_polygon_tests: c.max_batch_polygon_tests,
        }
    }

    /// A body scored by a client that stays.
    fn scored(body: &[u8], limits: ItemLimits) -> Result<Vec<String>, Refused> {
        score_body(body, limits, &AtomicBool::new(false))
    }

    fn parsed(results: Vec<String>) -> Vec<Value> {
        results
            .iter()
            .map(|r| serde_json::from_str(r).unwrap())
            .collect()
    }

    #[test]
    fn a_score_keeps_the_released_key_order() {
        let out = scored(
            br#"{"items": [{"response": "<think>x</think><answer>A</answer>", "ground_truth": "<type>general_qa</type>A"}]}"#, items(1))
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
        let out = parsed(scored(body.to_string().as_bytes(), items(100)).unwrap());
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
        let out = parsed(scored(&body, items(100)).unwrap());
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
        assert!(scored(b"[1, 2]", items(10)).is_err());
        assert!(scored(b"{\"items\": 3}", items(10)).is_err());
        assert!(scored(b"not json", items(10)).is_err());
        let many = json!({"items": vec![json!({}); 11]}).to_string();
        assert!(scored(many.as_bytes(), items(10))
            .unwrap_err()
            .1
            .contains("at most 10"));
    }

    #[test]
    fn an_item_over_the_polygon_work_limit_is_answered_in_place() {
        let response = "<think>x</think><answer><point>[[320, 240], [10, 10]]</point></answer>";
        let truth = r#"<type>point_rec</type>{"segmentation": [[300, 220], [340, 220], [340, 260], [300, 260]]}"#;
        // Two points against the closed ring of 4 vertices.
        assert_eq!(polygon_tests(response, truth), 2 * 5);
        assert_eq!(
            polygon_tests("<point>[[1, 2]]</point>", "<type>point_ref</type>[[1, 2]]"),
            0,
            "other task types test no polygon"
        );
        let body = json!({"items": [{"response": response, "ground_truth": truth}]}).to_string();
        let limited = |max_polygon_tests| ItemLimits {
            max_items: 1,
            max_polygon_tests,
            max_batch_polygon_tests: max_polygon_tests,
        };
        let out = parsed(scored(body.as_bytes(), limited(9)).unwrap());
        let why = out[0]["error"].as_str().expect("an item error");
        assert!(why.contains("10 point-in-polygon tests"), "{why}");
        let out = parsed(scored(body.as_bytes(), limited(10)).unwrap());
        let want = score(response, truth).unwrap().overall();
        assert_eq!(out[0]["overall"].as_f64(), Some(want), "{}", out[0]);
    }

    #[test]
    fn a_batch_over_the_work_limit_is_refused_whole_before_scoring() {
        let response = "<think>x</think><answer><point>[[320, 240], [10, 10]]</point></answer>";
        let truth = r#"<type>point_rec</type>{"segmentation": [[300, 220], [340, 220], [340, 260], [300, 260]]}"#;
        let item = json!({"response": response, "ground_truth": truth});
        // Three items of 10 tests each, and one of another type that tests no polygon.
        let other = json!({"response": "<think>x</think><answer>A</answer>", "ground_truth": "<type>general_qa</type>A"});
        let body = json!({"items": [item, other, item, item]}).to_string();
        let limited = |max_batch_polygon_tests| ItemLimits {
            max_batch_polygon_tests,
            ..items(4)
        };
        let Refused(status, why) = scored(body.as_bytes(), limited(29)).unwrap_err();
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(why.contains("30 point-in-polygon tests"), "{why}");
        assert!(why.contains("--max-batch-polygon-tests"), "{why}");
        let out = parsed(scored(body.as_bytes(), limited(30)).unwrap());
        assert_eq!(out.len(), 4);
        let want = score(response, truth).unwrap().overall();
        assert_eq!(out[3]["overall"].as_f64(), Some(want), "{}", out[3]);
    }

    #[test]
    fn an_abandoned_request_is_not_scored() {
        let body = br#"{"items": [{"response": "<think>x</think><answer>A</answer>", "ground_truth": "<type>general_qa</type>A"}]}"#;
        let Refused(_, why) = score_body(body, items(1), &AtomicBool::new(true)).unwrap_err();
        assert!(why.contains("closed the connection"), "{why}");
        assert!(scored(body, items(1)).is_ok());
    }

    #[test]
    fn keys_are_read_as_python_reads_them_and_other_values_are_skipped() {
        // A repeated key: the last one counts, as in Python's json.loads. Values under other
        // keys (here deep and long ones) are skipped, at the top and in an item.
        let body = br#"{"pad": [[[0, 0], {"a": [1, 2]}]], "items": [], "items": [
            {"response": "<think>x</think><answer>B</answer>", "x": [0, 0, 0],
             "ground_truth": "<type>general_qa</type>A", "response": "<think>x</think><answer>A</answer>"},
            3,
            {"response": 3, "ground_truth": "<type>general_qa</type>A"},
            {"resp\u006fnse": "<think>x</think><answer>A</answer>", "ground_truth": "<type>general_qa</type>A"}
        ], "more": {"items": 7}}"#;
        let out = parsed(scored(body, items(4)).unwrap());
        assert_eq!(out.len(), 4);
        assert_eq!(out[0]["overall"].as_f64(), Some(1.0), "{}", out[0]);
        for bad in &out[1..3] {
            let why = bad["error"].as_str().expect("an item error");
            assert!(why.contains("no string `response`"), "{why}");
        }
        // An escaped key is the key it spells.
        assert_eq!(out[3]["overall"].as_f64(), Some(1.0), "{}", out[3]);
        // Trailing text after the object is not JSON.
        let mut trailing = body.to_vec();
        trailing.extend_from_slice(b" x");
        let Refused(status, why) = scored(&trailing, items(4)).unwrap_err();
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(why.contains("not JSON"), "{why}");
    }
}
