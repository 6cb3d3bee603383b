//! The hub downloader (`vlm::hub`) against an in-process mock of the Hugging Face hub serving the
//! tiny model fixture: the cache layout it writes, the token kept off the CDN, and how stalls, cut
//! connections and missing files end (typed errors, nothing partial left where a lookup would
//! take it for complete). No test touches the network.
//!
//! The mock is a bare HTTP/1.1 responder on 127.0.0.1:0 (one thread per connection, `Connection:
//! close`) that records every request. A second one stands in for the CDN that the hub redirects
//! LFS files to; being another port, it is another origin.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::temp::TempDir;
use crate::hub::HubError;
use crate::hub::HubOptions;
use crate::hub::FILE_LIST;
use crate::{FilesError, ModelFiles, ModelOrigin};

const REPO: &str = "pointact-test/qwen25vl-tiny";
const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";
/// What the mock lists for the commit: what a model needs, and files it must not fetch.
const LISTED: [&str; 8] = [
    "README.md",
    "config.json",
    "generation_config.json",
    "golden.safetensors",
    "model.safetensors",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
];
/// What `ModelFiles::from_hub` needs of `LISTED`, in the order it fetches them.
const NEEDED: [&str; 6] = [
    "config.json",
    "tokenizer.json",
    "model.safetensors",
    "preprocessor_config.json",
    "tokenizer_config.json",
    "generation_config.json",
];
/// Bytes of a body the faulty mocks send before stalling or hanging up.
const SENT_BEFORE_FAULT: usize = 1000;
/// The read timeout of these tests: short, so a stall ends the test quickly.
const READ_TIMEOUT: Duration = Duration::from_millis(300);

fn fixture(name: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/fixtures/qwen25vl_tiny")
        .join(name)
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name)).unwrap()
}

/// A stand-in content hash (FNV-1a), so each file gets its own stable ETag.
fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The ETag the hub gives a small (git) file: 40 hex digits.
fn git_etag(file: &str) -> String {
    let h = digest(&fixture_bytes(file));
    format!("{h:016x}{:016x}{:08x}", h.rotate_left(21), h as u32)
}

/// The `X-Linked-Etag` of an LFS file: 64 hex digits (a sha256 on the real hub).
fn lfs_etag(file: &str) -> String {
    let h = digest(&fixture_bytes(file));
    format!(
        "{h:016x}{:016x}{:016x}{:016x}",
        h.rotate_left(7),
        h.rotate_left(29),
        h.rotate_left(43)
    )
}

/// What a mock does with one request.
enum Answer {
    /// A complete answer (`Content-Length` set).
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// Headers announcing all of `body`, the first [`SENT_BEFORE_FAULT`] bytes, then silence
    /// with the connection open.
    Stall { body: Vec<u8> },
    /// The same start, then the connection is closed.
    Cut { body: Vec<u8> },
    /// Reads the request and never answers.
    Silent,
}

#[derive(Debug, Clone)]
struct Seen {
    path: String,
    authorization: Option<String>,
    accept_encoding: Option<String>,
}

struct Server {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Server {
    fn start(answer: impl Fn(&str) -> Answer + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&seen);
        let answer = Arc::new(answer);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (recorded, answer) = (Arc::clone(&recorded), Arc::clone(&answer));
                thread::spawn(move || serve(stream, &*answer, &recorded));
            }
        });
        Server { base, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// The paths of the file requests (not the file list).
    fn fetched(&self) -> Vec<String> {
        self.seen()
            .into_iter()
            .map(|s| s.path)
            .filter(|p| !p.starts_with("/api/"))
            .collect()
    }
}

fn serve(stream: TcpStream, answer: &(dyn Fn(&str) -> Answer + Sync), seen: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let mut request = Seen {
        path: request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("")
            .to_owned(),
        authorization: None,
        accept_encoding: None,
    };
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            match name.trim().to_ascii_lowercase().as_str() {
                "authorization" => request.authorization = Some(value.trim().to_owned()),
                "accept-encoding" => request.accept_encoding = Some(value.trim().to_owned()),
                _ => {}
            }
        }
    }
    let path = request.path.clone();
    seen.lock().unwrap().push(request);
    let mut stream = stream;
    let head = |status: u16, headers: &[(&str, String)], length: usize| {
        let mut head = format!("HTTP/1.1 {status} Mock\r\n");
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head + &format!("Content-Length: {length}\r\nConnection: close\r\n\r\n")
    };
    match answer(&path) {
        Answer::Full {
            status,
            headers,
            body,
        } => {
            let _ = stream.write_all(head(status, &headers, body.len()).as_bytes());
            let _ = stream.write_all(&body);
        }
        Answer::Stall { body } => {
            let _ =
                stream.write_all(head(200, &[("ETag", "\"stall\"".into())], body.len()).as_bytes());
            let _ = stream.write_all(&body[..SENT_BEFORE_FAULT]);
            let _ = stream.flush();
            // Long past the test's read timeout; the thread is detached.
            thread::sleep(Duration::from_secs(30));
        }
        Answer::Cut { body } => {
            let _ =
                stream.write_all(head(200, &[("ETag", "\"cut\"".into())], body.len()).as_bytes());
            let _ = stream.write_all(&body[..SENT_BEFORE_FAULT]);
            // Dropping the stream closes the connection.
        }
        Answer::Silent => thread::sleep(Duration::from_secs(30)),
    }
}

/// What goes wrong on the mock hub.
#[derive(Clone, Copy)]
enum Fault {
    None,
    /// This file's body stalls part way.
    Stall(&'static str),
    /// This file's connection closes part way.
    Cut(&'static str),
    /// This file answers 404 although listed.
    Missing(&'static str),
}

/// The hub: the file list of `main`, small files answered directly (`ETag`), `model.safetensors`
/// redirected to `cdn` when given (`X-Linked-Etag`, `X-Linked-Size`), else answered directly too.
fn hub(cdn: Option<String>, fault: Fault) -> impl Fn(&str) -> Answer + Send + Sync + 'static {
    move |path: &str| {
        let (owner, name) = REPO.split_once('/').unwrap();
        if path == format!("/api/models/{owner}/{name}/revision/main") {
            let siblings: Vec<_> = LISTED
                .iter()
                .map(|f| serde_json::json!({ "rfilename": f }))
                .collect();
            let body = serde_json::json!({ "id": REPO, "sha": COMMIT, "siblings": siblings });
            return Answer::Full {
                status: 200,
                headers: vec![("Content-Type", "application/json".into())],
                body: body.to_string().into_bytes(),
            };
        }
        let prefix = format!("/{REPO}/resolve/{COMMIT}/");
        let Some(file) = path.strip_prefix(&prefix).filter(|f| LISTED.contains(f)) else {
            return not_found();
        };
        match fault {
            Fault::Stall(f) if f == file => {
                return Answer::Stall {
                    body: fixture_bytes(file),
                }
            }
            Fault::Cut(f) if f == file => {
                return Answer::Cut {
                    body: fixture_bytes(file),
                }
            }
            Fault::Missing(f) if f == file => return not_found(),
            _ => {}
        }
        let commit = ("X-Repo-Commit", COMMIT.to_owned());
        match &cdn {
            Some(cdn) if file == "model.safetensors" => Answer::Full {
                status: 302,
                headers: vec![
                    ("Location", format!("{cdn}/lfs/{file}?signature=secret")),
                    ("X-Linked-Etag", format!("\"{}\"", lfs_etag(file))),
                    ("X-Linked-Size", fixture_bytes(file).len().to_string()),
                    // The pointer file's own ETag: not the content's.
                    ("ETag", "\"pointer-file-etag\"".into()),
                    commit,
                ],
                body: Vec::new(),
            },
            _ => Answer::Full {
                status: 200,
                headers: vec![("ETag", format!("\"{}\"", git_etag(file))), commit],
                body: fixture_bytes(file),
            },
        }
    }
}

fn cdn(path: &str) -> Answer {
    match path.strip_prefix("/lfs/").and_then(|p| p.split_once('?')) {
        Some((file, _)) if LISTED.contains(&file) => Answer::Full {
            status: 200,
            // The CDN's own ETag names its storage, not the file: it must not become the blob name.
            headers: vec![("ETag", "\"cdn-etag\"".into())],
            body: fixture_bytes(file),
        },
        _ => not_found(),
    }
}

fn not_found() -> Answer {
    Answer::Full {
        status: 404,
        headers: vec![("X-Error-Code", "EntryNotFound".into())],
        body: b"Entry not found".to_vec(),
    }
}

fn online(endpoint: &str, cache: &Path) -> HubOptions {
    HubOptions {
        offline: false,
        endpoint: endpoint.to_owned(),
        token: Some("hf_test".into()),
        read_timeout: READ_TIMEOUT,
        connect_timeout: Duration::from_secs(2),
        ..HubOptions::offline(cache)
    }
}

fn repo_dir(cache: &Path) -> PathBuf {
    cache.join("models--pointact-test--qwen25vl-tiny")
}

fn snapshot(cache: &Path) -> PathBuf {
    repo_dir(cache).join("snapshots").join(COMMIT)
}

/// The names in `blobs/`, sorted.
fn blobs(cache: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo_dir(cache).join("blobs"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_download_fills_the_hub_cache_layout_and_then_resolves_offline() {
    let cdn = Server::start(cdn);
    let hub = Server::start(hub(Some(cdn.base.clone()), Fault::None));
    let cache = TempDir::new("hub-download");

    let files = ModelFiles::from_hub(REPO, &online(&hub.base, cache.path())).unwrap();

    assert_eq!(files.origin, ModelOrigin::Downloaded { repo: REPO.into() });
    let snap = snapshot(cache.path());
    assert_eq!(files.dir, snap);
    assert_eq!(files.weights, vec![snap.join("model.safetensors")]);
    assert_eq!(
        std::fs::read_to_string(repo_dir(cache.path()).join("refs/main")).unwrap(),
        COMMIT
    );
    // Each needed file is a relative link into blobs/, named by the hub's ETag (the linked one
    // for the LFS file), with the fixture's bytes.
    let mut expected_blobs = Vec::new();
    for file in NEEDED {
        let etag = if file == "model.safetensors" {
            lfs_etag(file)
        } else {
            git_etag(file)
        };
        let link = snap.join(file);
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("../../blobs").join(&etag),
            "{file}"
        );
        assert_eq!(std::fs::read(&link).unwrap(), fixture_bytes(file), "{file}");
        expected_blobs.push(etag);
    }
    expected_blobs.sort();
    // Nothing else: no temporary file left, no unneeded file fetched.
    assert_eq!(blobs(cache.path()), expected_blobs);
    assert!(!snap.join("README.md").exists());
    assert!(!snap.join("golden.safetensors").exists());

    // The token goes to the hub, never to the CDN; nothing asks for a compressed copy.
    let hub_seen = hub.seen();
    assert_eq!(hub_seen.len(), 1 + NEEDED.len());
    for s in hub_seen.iter().chain(cdn.seen().iter()) {
        assert_eq!(s.accept_encoding.as_deref(), Some("identity"), "{s:?}");
    }
    assert!(
        hub_seen
            .iter()
            .all(|s| s.authorization.as_deref() == Some("Bearer hf_test")),
        "{hub_seen:?}"
    );
    let cdn_seen = cdn.seen();
    assert_eq!(cdn_seen.len(), 1, "{cdn_seen:?}");
    assert_eq!(cdn_seen[0].path, "/lfs/model.safetensors?signature=secret");
    assert_eq!(cdn_seen[0].authorization, None);

    // The same cache resolves offline, to the same files.
    let cached = ModelFiles::from_hub(REPO, &HubOptions::offline(cache.path())).unwrap();
    assert_eq!(cached.origin, ModelOrigin::HubCache { repo: REPO.into() });
    assert_eq!(
        ModelFiles {
            origin: files.origin.clone(),
            ..cached
        },
        files
    );
}

/// Fetches through the mock hub with `fault`, expecting a download error; returns it and the
/// cache.
fn failed_download(fault: Fault, tag: &str) -> (HubError, String, TempDir) {
    let hub = Server::start(hub(None, fault));
    let cache = TempDir::new(tag);
    let err = ModelFiles::from_hub(REPO, &online(&hub.base, cache.path())).unwrap_err();
    let message = err.to_string();
    for part in ["could not fetch", "--model DIR"] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    (download_error(err), message, cache)
}

/// The hub's error inside a [`FilesError::Download`].
fn download_error(err: FilesError) -> HubError {
    match err {
        FilesError::Download { error, .. } => *error,
        other => panic!("expected a download error, got {other:?}"),
    }
}

fn file_url(file: &str) -> String {
    format!("/{REPO}/resolve/{COMMIT}/{file}")
}

/// Nothing at the model's snapshot path, no blob of it, no temporary file: an offline lookup
/// reports the snapshot as incomplete instead of loading a truncated model.
fn assert_no_partial_model(cache: &Path) {
    let snap = snapshot(cache);
    assert!(snap.join("model.safetensors").symlink_metadata().is_err());
    let left = blobs(cache);
    assert!(
        left.iter().all(|b| !b.contains("incomplete")),
        "temporary files left: {left:?}"
    );
    let model_len = fixture_bytes("model.safetensors").len() as u64;
    for b in &left {
        let len = std::fs::metadata(repo_dir(cache).join("blobs").join(b))
            .unwrap()
            .len();
        assert!(
            len < model_len / 2,
            "blob {b} looks like (part of) the model"
        );
    }
    let err = ModelFiles::from_hub(REPO, &HubOptions::offline(cache)).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, FilesError::Fetch { .. }), "{err:?}");
    for part in ["incomplete", "model.safetensors", "HF_HUB_OFFLINE"] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
}

#[test]
fn a_server_that_stalls_mid_file_ends_in_a_read_timeout_and_leaves_no_partial_file() {
    let (error, message, cache) = failed_download(Fault::Stall("model.safetensors"), "hub-stall");

    match &error {
        HubError::ReadTimeout {
            file,
            url,
            timeout,
            received,
        } => {
            assert_eq!(file, "model.safetensors");
            assert!(url.ends_with(&file_url("model.safetensors")), "{url}");
            assert_eq!(*timeout, READ_TIMEOUT);
            assert_eq!(*received, SENT_BEFORE_FAULT as u64);
        }
        other => panic!("expected a read timeout, got {other:?}"),
    }
    for part in [
        "model.safetensors",
        &file_url("model.safetensors"),
        "300ms",
        "read timeout",
        "HF_HUB_DOWNLOAD_TIMEOUT",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    // The files before the model are cached; the model is not, in any form.
    assert!(snapshot(cache.path()).join("config.json").is_file());
    assert_no_partial_model(cache.path());

    // A working hub later completes the snapshot, fetching only what is missing.
    let good = Server::start(hub(None, Fault::None));
    let files = ModelFiles::from_hub(REPO, &online(&good.base, cache.path())).unwrap();
    assert_eq!(files.origin, ModelOrigin::Downloaded { repo: REPO.into() });
    assert_eq!(
        std::fs::read(&files.weights[0]).unwrap(),
        fixture_bytes("model.safetensors")
    );
    let fetched = good.fetched();
    assert!(
        !fetched.contains(&file_url("config.json"))
            && !fetched.contains(&file_url("tokenizer.json")),
        "cached files fetched again: {fetched:?}"
    );
    assert!(fetched.contains(&file_url("model.safetensors")));
}

#[test]
fn a_connection_closed_mid_file_is_truncated_and_leaves_no_partial_file() {
    let (error, message, cache) = failed_download(Fault::Cut("model.safetensors"), "hub-cut");

    let full = fixture_bytes("model.safetensors").len() as u64;
    match &error {
        HubError::Truncated {
            file,
            received,
            expected,
            ..
        } => {
            assert_eq!(file, "model.safetensors");
            assert_eq!(*received, SENT_BEFORE_FAULT as u64);
            assert_eq!(*expected, full);
        }
        other => panic!("expected a truncated download, got {other:?}"),
    }
    assert!(
        message.contains(&format!("{SENT_BEFORE_FAULT} of {full} bytes")),
        "{message}"
    );
    assert_no_partial_model(cache.path());
}

#[test]
fn a_server_that_never_answers_ends_in_a_read_timeout_on_the_file_list() {
    let silent = Server::start(|_: &str| Answer::Silent);
    let cache = TempDir::new("hub-silent");

    let err = ModelFiles::from_hub(REPO, &online(&silent.base, cache.path())).unwrap_err();

    let message = err.to_string();
    match download_error(err) {
        HubError::ReadTimeout {
            file,
            url,
            timeout,
            received,
        } => {
            assert_eq!(file, FILE_LIST);
            assert_eq!(
                url,
                format!("{}/api/models/{REPO}/revision/main", silent.base)
            );
            assert_eq!(timeout, READ_TIMEOUT);
            assert_eq!(received, 0);
        }
        other => panic!("expected a read timeout, got {other:?}"),
    }
    assert!(
        message.contains("read timeout") && message.contains(FILE_LIST),
        "{message}"
    );
    assert_eq!(silent.seen().len(), 1);
    // Nothing was cached, so nothing resolves offline.
    assert!(ModelFiles::from_hub(REPO, &HubOptions::offline(cache.path())).is_err());
}

#[test]
fn a_listed_file_the_hub_cannot_find_is_named_with_its_status() {
    let (error, message, cache) = failed_download(Fault::Missing("tokenizer.json"), "hub-404");

    match &error {
        HubError::Status { file, url, status } => {
            assert_eq!(file, "tokenizer.json");
            assert_eq!(*status, 404);
            assert!(url.ends_with(&file_url("tokenizer.json")), "{url}");
        }
        other => panic!("expected an HTTP status error, got {other:?}"),
    }
    for part in [
        "tokenizer.json",
        "HTTP 404",
        "no such repo, revision or file",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    // The snapshot stays incomplete: nothing at the tokenizer's path, and offline says so.
    assert!(snapshot(cache.path()).join("config.json").is_file());
    assert!(snapshot(cache.path())
        .join("tokenizer.json")
        .symlink_metadata()
        .is_err());
    let err = ModelFiles::from_hub(REPO, &HubOptions::offline(cache.path())).unwrap_err();
    assert!(err.to_string().contains("incomplete"), "{err}");
}

#[test]
fn an_unknown_repo_is_a_404_on_the_file_list() {
    let hub = Server::start(hub(None, Fault::None));
    let cache = TempDir::new("hub-unknown");
    let err = ModelFiles::from_hub("someone/else", &online(&hub.base, cache.path())).unwrap_err();
    match download_error(err) {
        HubError::Status { file, status, .. } => {
            assert_eq!(file, FILE_LIST);
            assert_eq!(status, 404);
        }
        other => panic!("expected a 404 on the file list, got {other:?}"),
    }
    // No ref for a revision the hub did not resolve.
    assert!(!cache.join("models--someone--else/refs/main").exists());
}
