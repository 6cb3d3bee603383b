//! Downloads from a Hugging Face hub into its standard cache, with timeouts and progress bars.
//!
//! Why our own client: the `hf-hub` crate builds its HTTP agent itself with no connect or read
//! timeout, so a server that stops answering mid-download hung the run with no output. Here every
//! connection has a connect timeout and every read an idle timeout ([`HubOptions::connect_timeout`],
//! [`HubOptions::read_timeout`]); a stall ends in a [`HubError`] naming the file, the URL and the
//! limit.
//!
//! The protocol is the hub's public one: `GET {endpoint}/api/models/{repo}/revision/{revision}`
//! answers the commit (`sha`) and the file list (`siblings[].rfilename`); each file comes from
//! `{endpoint}/{repo}/resolve/{commit}/{file}`, which answers small files directly (`ETag` = the git
//! blob id) and redirects large (LFS) ones to a CDN (`X-Linked-Etag` = the sha256, on the hub's own
//! redirect). Redirects are followed here, not by the HTTP library, so the hub's headers are seen
//! and the token (`Authorization: Bearer`) goes only to the endpoint's own origin, never to the CDN.
//!
//! The cache is the layout `huggingface_hub` (Python) writes and reads, so both share downloads:
//! `<cache>/models--ORG--NAME/refs/<revision>` holds the commit, `blobs/<etag>` the content, and
//! `snapshots/<commit>/<file>` is a relative symlink to `../../blobs/<etag>` (a copy where symlinks
//! fail). A file is written to a temporary `blobs/<etag>.<n>.incomplete` and renamed only once its
//! length matches what the server announced, and the snapshot link is made after that: a failed
//! download leaves no file at a snapshot path, so the next lookup sees the snapshot as incomplete
//! and downloads again instead of loading a truncated file.

use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use url::Url;

/// Time to establish a connection (TCP and TLS). A hub or CDN that does not accept within 10 s is
/// down or unreachable; waiting longer only delays the message.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence between two reads once connected. Generous (30 s) because a CDN may pause
/// before the first byte of a multi-gigabyte file; a transfer that keeps moving, however slowly, is
/// never cut (the progress bar shows its rate).
pub(crate) const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// What [`HubError`]s name as the file while the revision's file list is being fetched.
pub(crate) const FILE_LIST: &str = "the file list";
/// The variable `huggingface_hub` reads for its download timeout (seconds); here it sets both
/// timeouts, as it does there.
pub(crate) const TIMEOUT_ENV: &str = "HF_HUB_DOWNLOAD_TIMEOUT";
/// Redirects followed for one file (the hub uses one to the CDN, and relative ones for renamed
/// repos); more is a loop.
const MAX_REDIRECTS: usize = 10;
/// Largest file-list answer read: a repo's JSON is kilobytes; this only stops a runaway server.
const MAX_FILE_LIST_BYTES: u64 = 32 << 20;

/// Why a download from the hub failed. Every variant names what was being fetched (a file of the
/// repo, or [`FILE_LIST`]) and the URL asked.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The endpoint is not a base URL (`https://host[/path]`).
    #[error("invalid hub endpoint {endpoint:?}: {reason}")]
    BadEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why it is not usable as a base URL.
        reason: String,
    },
    /// A file name that would leave the snapshot folder (absolute, `..`).
    #[error("{file:?} is not a relative file name inside the repo")]
    BadFileName {
        /// The offending file name.
        file: String,
    },
    /// No connection within the connect timeout.
    #[error(
        "fetching {file} from {url}: no connection within {timeout:?} (connect timeout) — check \
         the network, or set {TIMEOUT_ENV}=SECONDS to wait longer"
    )]
    ConnectTimeout {
        /// The repo file being fetched, or [`FILE_LIST`].
        file: String,
        /// The URL asked.
        url: String,
        /// The connect timeout that ran out.
        timeout: Duration,
    },
    /// Connected, but the server sent nothing for the read timeout (before the headers, or in the
    /// middle of the body).
    #[error(
        "fetching {file} from {url}: the server sent nothing for {timeout:?} (read timeout; \
         {received} bytes of the body had arrived) — retry later, or set {TIMEOUT_ENV}=SECONDS if \
         the link is just slow"
    )]
    ReadTimeout {
        /// The repo file being fetched, or [`FILE_LIST`].
        file: String,
        /// The URL asked.
        url: String,
        /// The read timeout that ran out.
        timeout: Duration,
        /// Body bytes received before the silence.
        received: u64,
    },
    /// No usable connection: refused, DNS failure, TLS failure, reset.
    #[error("fetching {file} from {url}: {reason}")]
    Unreachable {
        /// The repo file being fetched, or [`FILE_LIST`].
        file: String,
        /// The URL asked.
        url: String,
        /// What failed (the connection or I/O error), as text.
        reason: String,
    },
    /// The server answered with an error status.
    #[error("fetching {file} from {url}: HTTP {status}{}", status_hint(*status))]
    Status {
        /// The repo file being fetched, or [`FILE_LIST`].
        file: String,
        /// The URL asked.
        url: String,
        /// The HTTP status code.
        status: u16,
    },
    /// The body ended before the announced length.
    #[error(
        "fetching {file} from {url}: the connection ended after {received} of {expected} bytes"
    )]
    Truncated {
        /// The repo file being fetched, or [`FILE_LIST`].
        file: String,
        /// The URL asked.
        url: String,
        /// Body bytes received.
        received: u64,
        /// Body length the server announced.
        expected: u64,
    },
    /// An answer the cache cannot use (no ETag, a malformed file list, a redirect loop, …).
    #[error("fetching {file} from {url}: {reason}")]
    BadResponse {
        /// The repo file being fetched, or [`FILE_LIST`].
        file: String,
        /// The URL asked.
        url: String,
        /// What is wrong with the answer.
        reason: String,
    },
    /// The cache folder cannot be written.
    #[error("fetching {file}: cannot write {path}: {source}")]
    Cache {
        /// The repo file being fetched, or [`FILE_LIST`].
        file: String,
        /// The cache path that could not be written (a blob, a temporary file, a ref or a snapshot
        /// link).
        path: PathBuf,
        /// The underlying I/O error.
        source: io::Error,
    },
}

/// What to do about the statuses the hub actually answers.
fn status_hint(status: u16) -> &'static str {
    match status {
        401 | 403 => {
            " — the repo is gated or private: accept its terms on the hub and set HF_TOKEN"
        }
        404 => {
            " — no such repo, revision or file (a private repo also answers 404 without HF_TOKEN)"
        }
        429 => " — rate limited: retry later (with HF_TOKEN the limit is higher)",
        500..=599 => " — hub server error: retry later",
        _ => "",
    }
}

/// One revision of a repo, as the hub lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RepoRevision {
    /// The commit the revision resolved to (40 hex digits).
    pub commit: String,
    /// Every file of the commit (`rfilename`s), folders separated by `/`.
    pub files: Vec<String>,
}

/// A blocking hub client for one cache: [`revision`](Self::revision) then
/// [`fetch`](Self::fetch) per file.
pub(crate) struct HubClient {
    agent: ureq::Agent,
    endpoint: Url,
    token: Option<String>,
    cache_dir: PathBuf,
    progress: bool,
    connect_timeout: Duration,
    read_timeout: Duration,
}

impl std::fmt::Debug for HubClient {
    /// Leaves the token out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubClient")
            .field("endpoint", &self.endpoint.as_str())
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("cache_dir", &self.cache_dir)
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .finish()
    }
}

/// The cache folder of a model repo: `models--ORG--NAME`.
pub(crate) fn repo_folder(cache_dir: &Path, repo_id: &str) -> PathBuf {
    cache_dir.join(format!("models--{}", repo_id.replace('/', "--")))
}

/// The snapshot folder a revision resolves to in the cache, if it exists: `refs/<revision>` names
/// the commit; a revision that is itself a commit needs no ref (as in `huggingface_hub`). Whether
/// the folder holds every file is for the caller to check.
pub(crate) fn cached_snapshot(cache_dir: &Path, repo_id: &str, revision: &str) -> Option<PathBuf> {
    let repo_dir = repo_folder(cache_dir, repo_id);
    let commit = match std::fs::read_to_string(repo_dir.join("refs").join(revision)) {
        Ok(c) => c.trim().to_owned(),
        Err(_) => revision.to_owned(),
    };
    // A ref that is not a commit id would name a folder outside `snapshots/`.
    let dir = repo_dir.join("snapshots").join(&commit);
    (is_commit(&commit) && dir.is_dir()).then_some(dir)
}

/// 40 lowercase hex digits: a git commit id (and a safe folder name).
fn is_commit(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[derive(Deserialize)]
struct RevisionInfo {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
}

/// A response that is not a redirect, with the hub's metadata gathered on the way.
struct Opened {
    response: ureq::Response,
    /// The URL that answered, shown in errors.
    url: String,
    /// `X-Linked-Etag`, else `ETag`, from the last response of the endpoint's own origin.
    etag: Option<String>,
    /// `X-Linked-Size` from the same response (the length of an LFS file behind a redirect).
    linked_size: Option<u64>,
}

/// Distinguishes the temporary files of downloads running at once in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl HubClient {
    /// A client for `opts`' endpoint, token, cache, timeouts and progress setting. No request is
    /// made.
    pub(crate) fn new(opts: &HubOptions) -> Result<Self, HubError> {
        let bad = |reason: String| HubError::BadEndpoint {
            endpoint: opts.endpoint.clone(),
            reason,
        };
        let endpoint = Url::parse(&opts.endpoint).map_err(|e| bad(e.to_string()))?;
        if endpoint.cannot_be_a_base() || !matches!(endpoint.scheme(), "http" | "https") {
            return Err(bad("expected an http:// or https:// base URL".into()));
        }
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(opts.connect_timeout)
            .timeout_read(opts.read_timeout)
            .timeout_write(opts.read_timeout)
            // Followed by hand in `open`, to read the hub's headers and keep the token on the hub.
            .redirects(0)
            // What hf-hub did: HTTPS_PROXY / HTTP_PROXY / ALL_PROXY are honoured.
            .try_proxy_from_env(true)
            .user_agent(concat!("pointact/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(HubClient {
            agent,
            endpoint,
            token: opts.token.clone(),
            cache_dir: opts.cache_dir.clone(),
            progress: opts.progress,
            connect_timeout: opts.connect_timeout,
            read_timeout: opts.read_timeout,
        })
    }

    /// The snapshot folder of `commit` in the cache (it may not exist yet).
    pub(crate) fn snapshot_dir(&self, repo_id: &str, commit: &str) -> PathBuf {
        repo_folder(&self.cache_dir, repo_id)
            .join("snapshots")
            .join(commit)
    }

    /// Asks the hub which commit `revision` is and which files it has, and records the commit in
    /// `refs/<revision>` (unless the revision is the commit itself).
    pub(crate) fn revision(&self, repo_id: &str, revision: &str) -> Result<RepoRevision, HubError> {
        let mut segments = vec!["api", "models"];
        segments.extend(repo_id.split('/'));
        segments.extend(["revision", revision]);
        let url = self.url(&segments);
        let opened = self.open(url, FILE_LIST)?;
        let shown = opened.url.clone();
        let bad = |reason: String| HubError::BadResponse {
            file: FILE_LIST.into(),
            url: shown.clone(),
            reason,
        };
        let mut body = Vec::new();
        opened
            .response
            .into_reader()
            .take(MAX_FILE_LIST_BYTES + 1)
            .read_to_end(&mut body)
            .map_err(|e| self.read_error(e, FILE_LIST, &shown, body.len() as u64, None))?;
        if body.len() as u64 > MAX_FILE_LIST_BYTES {
            return Err(bad(format!(
                "answered more than {MAX_FILE_LIST_BYTES} bytes"
            )));
        }
        let info: RevisionInfo = serde_json::from_slice(&body)
            .map_err(|e| bad(format!("answered something that is not a file list: {e}")))?;
        if !is_commit(&info.sha) {
            return Err(bad(format!("answered {:?}, not a commit id", info.sha)));
        }
        if revision != info.sha {
            let path = repo_folder(&self.cache_dir, repo_id)
                .join("refs")
                .join(revision);
            write_small(&path, info.sha.as_bytes()).map_err(|source| HubError::Cache {
                file: FILE_LIST.into(),
                path,
                source,
            })?;
        }
        Ok(RepoRevision {
            commit: info.sha,
            files: info.siblings.into_iter().map(|s| s.rfilename).collect(),
        })
    }

    /// The snapshot path of `file` at `commit`, downloaded unless it is already there. Draws a
    /// progress bar on stderr while the body arrives (when enabled in the options).
    pub(crate) fn fetch(
        &self,
        repo_id: &str,
        commit: &str,
        file: &str,
    ) -> Result<PathBuf, HubError> {
        let plain = !file.is_empty()
            && Path::new(file)
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        if !plain || !is_commit(commit) {
            return Err(HubError::BadFileName {
                file: format!("{commit}/{file}"),
            });
        }
        let pointer = self.snapshot_dir(repo_id, commit).join(file);
        if pointer.is_file() {
            return Ok(pointer);
        }
        let mut segments: Vec<&str> = repo_id.split('/').collect();
        segments.extend(["resolve", commit]);
        segments.extend(file.split('/'));
        let opened = self.open(self.url(&segments), file)?;
        let etag = opened
            .etag
            .as_deref()
            .map(normalize_etag)
            .ok_or("no ETag or X-Linked-Etag header, which names the file in the cache")
            .and_then(|e| {
                is_plain_etag(&e)
                    .then_some(e)
                    .ok_or("an ETag that is not a plain file name")
            })
            .map_err(|reason| HubError::BadResponse {
                file: file.into(),
                url: opened.url.clone(),
                reason: reason.into(),
            })?;
        let blobs = repo_folder(&self.cache_dir, repo_id).join("blobs");
        let cache_error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| HubError::Cache {
                file: file.into(),
                path,
                source,
            }
        };
        std::fs::create_dir_all(&blobs).map_err(cache_error(&blobs))?;
        let blob = blobs.join(&etag);
        // The same content under another commit is already here: no need to read the body.
        if !blob.is_file() {
            self.write_blob(opened, file, &blob)?;
        }
        link_snapshot(&blob, &pointer, file).map_err(cache_error(&pointer))?;
        Ok(pointer)
    }

    /// `{endpoint}/seg/seg/…`, each segment percent-encoded (a revision's `/` becomes `%2F`).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.endpoint.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            // `new` checked that the endpoint can be a base, so this branch always runs.
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// GETs `url`, following redirects; the token only to the endpoint's origin. Error statuses
    /// and transport failures become [`HubError`]s naming `file`.
    fn open(&self, mut url: Url, file: &str) -> Result<Opened, HubError> {
        let mut etag = None;
        let mut linked_size = None;
        for _ in 0..=MAX_REDIRECTS {
            let shown = shown_url(&url);
            let own = url.origin() == self.endpoint.origin();
            // Identity: the ETag and length are the stored file's, not a compressed copy's.
            let mut request = self
                .agent
                .get(url.as_str())
                .set("Accept-Encoding", "identity");
            if let (true, Some(token)) = (own, &self.token) {
                request = request.set("Authorization", &format!("Bearer {token}"));
            }
            let response = match request.call() {
                Ok(r) => r,
                Err(ureq::Error::Status(status, _)) => {
                    return Err(HubError::Status {
                        file: file.into(),
                        url: shown,
                        status,
                    })
                }
                Err(ureq::Error::Transport(t)) => return Err(self.transport_error(&t, file, shown)),
            };
            if own {
                if let Some(e) = response
                    .header("x-linked-etag")
                    .or_else(|| response.header("etag"))
                {
                    etag = Some(e.to_owned());
                }
                if let Some(n) = response
                    .header("x-linked-size")
                    .and_then(|n| n.trim().parse().ok())
                {
                    linked_size = Some(n);
                }
            }
            if !(300..400).contains(&response.status()) {
                return Ok(Opened {
                    response,
                    url: shown,
                    etag,
                    linked_size,
                });
            }
            let bad = |reason: String| HubError::BadResponse {
                file: file.into(),
                url: shown.clone(),
                reason,
            };
            let location = response
                .header("location")
                .ok_or_else(|| bad("a redirect without a Location header".into()))?;
            url = url
                .join(location)
                .map_err(|e| bad(format!("a redirect to {location:?}: {e}")))?;
        }
        Err(HubError::BadResponse {
            file: file.into(),
            url: shown_url(&url),
            reason: format!("more than {MAX_REDIRECTS} redirects"),
        })
    }

    /// Streams the body into a temporary file beside `blob` and renames it into place once its
    /// length matches the announced one; removes the temporary file on any failure.
    fn write_blob(&self, opened: Opened, file: &str, blob: &Path) -> Result<(), HubError> {
        let expected = opened
            .response
            .header("content-length")
            .and_then(|n| n.trim().parse::<u64>().ok())
            .or(opened.linked_size);
        let etag = blob.file_name().and_then(|n| n.to_str()).unwrap_or("blob");
        let tmp = blob.with_file_name(format!(
            "{etag}.{}-{}.incomplete",
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let url = opened.url.clone();
        let bar = self.bar(file, expected);
        let result = self
            .copy_body(opened.response, &tmp, file, &url, expected, &bar)
            .and_then(|()| {
                std::fs::rename(&tmp, blob).map_err(|source| HubError::Cache {
                    file: file.into(),
                    path: blob.to_path_buf(),
                    source,
                })
            });
        match &result {
            Ok(()) => bar.finish(),
            Err(_) => {
                bar.abandon_with_message(format!("{file} failed"));
                let _ = std::fs::remove_file(&tmp);
            }
        }
        result
    }

    fn copy_body(
        &self,
        response: ureq::Response,
        tmp: &Path,
        file: &str,
        url: &str,
        expected: Option<u64>,
        bar: &ProgressBar,
    ) -> Result<(), HubError> {
        let cache_error = |source| HubError::Cache {
            file: file.into(),
            path: tmp.to_path_buf(),
            source,
        };
        let mut out = std::fs::File::create(tmp).map_err(cache_error)?;
        let mut reader = response.into_reader();
        let mut buf = vec![0u8; 256 << 10];
        let mut received = 0u64;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.read_error(e, file, url, received, expected)),
            };
            out.write_all(&buf[..n]).map_err(cache_error)?;
            received += n as u64;
            bar.inc(n as u64);
        }
        match expected {
            Some(expected) if received < expected => {
                return Err(HubError::Truncated {
                    file: file.into(),
                    url: url.into(),
                    received,
                    expected,
                })
            }
            Some(expected) if received > expected => {
                return Err(HubError::BadResponse {
                    file: file.into(),
                    url: url.into(),
                    reason: format!("sent {received} bytes where {expected} were announced"),
                })
            }
            _ => {}
        }
        // On disk before the rename, so a crash cannot leave a short blob under the final name.
        out.sync_all().map_err(cache_error)
    }

    /// A per-file bar on stderr (hidden when progress is off; indicatif also hides it when stderr
    /// is not a terminal).
    fn bar(&self, file: &str, len: Option<u64>) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let (bar, template) = match len {
            Some(n) => (
                ProgressBar::new(n),
                "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} ({eta})",
            ),
            None => (
                ProgressBar::no_length(),
                "{spinner} {msg} {binary_bytes} {binary_bytes_per_sec}",
            ),
        };
        bar.set_style(
            ProgressStyle::with_template(template)
                .expect("static template")
                .progress_chars("=> "),
        );
        bar.set_message(format!("downloading {file}"));
        bar
    }

    /// A failed read of a body: a timeout, a connection closed early, or another I/O failure.
    fn read_error(
        &self,
        e: io::Error,
        file: &str,
        url: &str,
        received: u64,
        expected: Option<u64>,
    ) -> HubError {
        let (file, url) = (file.to_owned(), url.to_owned());
        match expected {
            _ if is_timeout(&e) => HubError::ReadTimeout {
                file,
                url,
                timeout: self.read_timeout,
                received,
            },
            Some(expected) if e.kind() == io::ErrorKind::UnexpectedEof => HubError::Truncated {
                file,
                url,
                received,
                expected,
            },
            _ => HubError::Unreachable {
                file,
                url,
                reason: format!("the connection failed after {received} bytes: {e}"),
            },
        }
    }

    /// A failed request: a connect timeout, a read timeout before the headers, or no connection.
    fn transport_error(&self, t: &ureq::Transport, file: &str, url: String) -> HubError {
        let file = file.to_owned();
        match transport_io(t) {
            Some(io) if is_timeout(io) && t.kind() == ureq::ErrorKind::ConnectionFailed => {
                HubError::ConnectTimeout {
                    file,
                    url,
                    timeout: self.connect_timeout,
                }
            }
            Some(io) if is_timeout(io) => HubError::ReadTimeout {
                file,
                url,
                timeout: self.read_timeout,
                received: 0,
            },
            _ => HubError::Unreachable {
                file,
                url,
                reason: transport_reason(t),
            },
        }
    }
}

/// The URL without its query: a CDN's is a signature, long and of no use in a message.
fn shown_url(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.to_string()
}

/// `W/"abc"` → `abc` (a weak marker and quotes are not part of the id).
fn normalize_etag(etag: &str) -> String {
    etag.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_owned()
}

/// The ETag becomes a file name under `blobs/`: letters, digits, `-`, `_`, `.`, not starting with
/// a dot, so a server cannot name a path elsewhere.
fn is_plain_etag(etag: &str) -> bool {
    !etag.is_empty()
        && !etag.starts_with('.')
        && etag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Writes a few bytes through a temporary file and a rename, so a reader never sees half a ref.
fn write_small(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension(format!(
        "{}-{}.incomplete",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Makes `pointer` (the snapshot path of `file`) a relative symlink to `blob`, as
/// `huggingface_hub` does, or a copy where the file system has no symlinks.
fn link_snapshot(blob: &Path, pointer: &Path, file: &str) -> io::Result<()> {
    if let Some(parent) = pointer.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // A dangling link (its blob deleted by a cache cleanup) is replaced.
    if pointer.symlink_metadata().is_ok() {
        std::fs::remove_file(pointer)?;
    }
    // From snapshots/<commit>/<file>'s folder up to the repo folder: one `..` per folder in
    // `file`, plus `snapshots/<commit>`.
    let mut target = PathBuf::new();
    for _ in 0..=Path::new(file).components().count() {
        target.push("..");
    }
    target.push("blobs");
    target.push(blob.file_name().unwrap_or_default());
    if symlink(&target, pointer).is_ok() {
        return Ok(());
    }
    let name = pointer.file_name().unwrap_or_default().to_string_lossy();
    let tmp = pointer.with_file_name(format!("{name}.incomplete"));
    std::fs::copy(blob, &tmp)?;
    std::fs::rename(&tmp, pointer)
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(windows)]
fn symlink(target: &Path, link: &Path) -> io::Result<()> {
    std::os::windows::fs::symlink_file(target, link)
}

#[cfg(not(any(unix, windows)))]
fn symlink(_target: &Path, _link: &Path) -> io::Result<()> {
    Err(io::ErrorKind::Unsupported.into())
}

/// Whether an I/O error is a timeout: ureq reports socket timeouts as `TimedOut`, or as
/// `WouldBlock` where a write hit its timeout. Shared with the OpenAI-compatible client
/// (`pointing::openai`), which sits above this module.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

/// The innermost `io::Error` behind a ureq transport error, if any (ureq wraps its own errors in
/// `io::Error`s, so the outer ones repeat its messages).
pub fn transport_io(t: &ureq::Transport) -> Option<&io::Error> {
    use std::error::Error as _;
    let mut source = t.source();
    let mut innermost = None;
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<io::Error>() {
            innermost = Some(io);
        }
        source = s.source();
    }
    innermost
}

/// "connection refused" rather than ureq's full `Display`, which repeats the URL the caller
/// already names.
pub fn transport_reason(t: &ureq::Transport) -> String {
    let kind = t.kind().to_string();
    match (t.message(), transport_io(t)) {
        (_, Some(io)) => format!("{kind}: {io}"),
        (Some(m), None) => format!("{kind}: {m}"),
        (None, None) => kind,
    }
}

/// The public hub, used unless `HF_ENDPOINT` says otherwise.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// How the hub is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubOptions {
    /// The hub cache root (the folder holding `models--owner--name/`).
    pub cache_dir: PathBuf,
    /// Never touch the network (`HF_HUB_OFFLINE`).
    pub offline: bool,
    /// Hub URL (`HF_ENDPOINT`, else [`DEFAULT_ENDPOINT`]).
    pub endpoint: String,
    /// Branch, tag or commit.
    pub revision: String,
    /// Access token (`HF_TOKEN`, else the token file `huggingface-cli login` writes).
    pub token: Option<String>,
    /// Show download progress bars.
    pub progress: bool,
    /// Limit for establishing each connection ([`DEFAULT_CONNECT_TIMEOUT`]).
    pub connect_timeout: Duration,
    /// Longest silence while reading an answer ([`DEFAULT_READ_TIMEOUT`]): a server that stops
    /// sending ends the download with an error instead of hanging it.
    pub read_timeout: Duration,
}

impl HubOptions {
    /// Options from the environment, as `huggingface_hub` reads it: the cache root is
    /// `HF_HUB_CACHE` (or the older `HUGGINGFACE_HUB_CACHE`), else `HF_HOME/hub`, else
    /// `$XDG_CACHE_HOME/huggingface/hub`, else `~/.cache/huggingface/hub`; `HF_HUB_OFFLINE`,
    /// `HF_ENDPOINT`; the token is `HF_TOKEN`, else the file `HF_TOKEN_PATH`, else `HF_HOME/token`
    /// (where `huggingface-cli login` writes it); `HF_HUB_DOWNLOAD_TIMEOUT` (seconds, a finite
    /// number > 0) sets both timeouts, as it sets `huggingface_hub`'s one timeout (an unusable value
    /// is ignored with a warning).
    pub(crate) fn from_env() -> Self {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// [`from_env`](Self::from_env) with the variables looked up through `lookup` (for tests and
    /// callers that keep their own environment). Empty values count as unset.
    pub(crate) fn from_vars(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let var = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let hf_home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| {
                    var("HOME")
                        .or_else(|| var("USERPROFILE"))
                        .map(|h| PathBuf::from(h).join(".cache"))
                })
                .unwrap_or_else(|| PathBuf::from(".cache"))
                .join("huggingface")
        });
        let cache_dir = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token_path = var("HF_TOKEN_PATH")
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("token"));
        let token = var("HF_TOKEN").or_else(|| {
            std::fs::read_to_string(token_path)
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
        });
        let timeout = var(TIMEOUT_ENV).and_then(|v| {
            let secs = v.trim().parse::<f64>().ok().filter(|s| *s > 0.0);
            let timeout = secs.and_then(|s| Duration::try_from_secs_f64(s).ok());
            if timeout.is_none() {
                tracing::warn!(
                    "{}={v:?} is not a positive number of seconds; using the default timeouts",
                    TIMEOUT_ENV
                );
            }
            timeout
        });
        HubOptions {
            offline: var("HF_HUB_OFFLINE").is_some_and(|v| env_true(&v)),
            endpoint: var("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned()),
            revision: "main".to_owned(),
            token,
            progress: true,
            cache_dir,
            connect_timeout: timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT),
            read_timeout: timeout.unwrap_or(DEFAULT_READ_TIMEOUT),
        }
    }

    /// Cache-only options for a given cache root: no network, no token, revision `main`.
    pub fn offline(cache_dir: impl Into<PathBuf>) -> Self {
        HubOptions {
            cache_dir: cache_dir.into(),
            offline: true,
            endpoint: DEFAULT_ENDPOINT.to_owned(),
            revision: "main".to_owned(),
            token: None,
            progress: false,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            read_timeout: DEFAULT_READ_TIMEOUT,
        }
    }
}

/// `huggingface_hub`'s truthy values for boolean environment variables.
fn env_true(v: &str) -> bool {
    ["1", "on", "yes", "true"].contains(&v.trim().to_ascii_lowercase().as_str())
}
