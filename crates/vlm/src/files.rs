//! Where a model's files are: a `--model` spec (a local folder or a Hugging Face repo id) resolved
//! to the paths of `config.json`, the weights, the tokenizer and the optional side files.
//!
//! * A local folder is used as is; nothing is downloaded. Weights are either one
//!   `model.safetensors` or shards listed by `model.safetensors.index.json` (`weight_map`: tensor
//!   name → shard file). Shards are returned sorted by name, the order transformers loads them in
//!   (`sorted(set(weight_map.values()))`), and each must exist.
//! * A repo id (`owner/name`, and no such local path) is looked up in the Hugging Face hub cache
//!   first (`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`; the layout
//!   `models--owner--name/snapshots/<commit>/` that `huggingface-cli` and Python write). A
//!   complete cached snapshot is used without touching the network. Otherwise the files are
//!   downloaded into that cache by [`super::hub`] (connect and read timeouts, progress bars on
//!   stderr), unless `HF_HUB_OFFLINE` is set. When that fails the error says how to download the
//!   model elsewhere and pass the folder instead.
//!
//! The cache root and offline switch are explicit in [`HubOptions`] ([`HubOptions::from_env`]
//! reads the environment), so tests and callers need not rely on process-wide variables.

use std::path::{Path, PathBuf};

use super::hub::HubOptions;
use super::hub::{self, HubClient, HubError};

/// `config.json`: the model configuration (required).
pub(crate) const CONFIG_FILE: &str = "config.json";
/// Single-file weights.
pub(crate) const WEIGHTS_FILE: &str = "model.safetensors";
/// Index of sharded weights.
pub const WEIGHTS_INDEX_FILE: &str = "model.safetensors.index.json";
/// The tokenizer (required).
pub(crate) const TOKENIZER_FILE: &str = "tokenizer.json";
/// Optional side files, fetched from the hub when the repo has them.
pub(crate) const OPTIONAL_FILES: [&str; 5] = [
    "preprocessor_config.json",
    "chat_template.json",
    "chat_template.jinja",
    "tokenizer_config.json",
    "generation_config.json",
];

/// Why a model spec cannot be resolved to files.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// Neither an existing folder nor something shaped like `owner/name`.
    #[error(
        "model {spec:?} is neither an existing folder nor a Hugging Face repo id (owner/name)"
    )]
    NotFound {
        /// The `--model` text as given.
        spec: String,
    },
    /// The spec names a file, not the model folder.
    #[error("model path {path} is a file; pass the folder that holds config.json")]
    NotADirectory {
        /// The file the spec names.
        path: PathBuf,
    },
    /// A required file is not in the folder.
    #[error("model folder {dir} has no {file}")]
    Missing {
        /// The model folder.
        dir: PathBuf,
        /// Name of the missing file (`config.json` or `tokenizer.json`).
        file: &'static str,
    },
    /// Neither `model.safetensors` nor `model.safetensors.index.json` is in the folder.
    #[error("model folder {dir} has no weights: neither {WEIGHTS_FILE} nor {WEIGHTS_INDEX_FILE}")]
    MissingWeights {
        /// The model folder.
        dir: PathBuf,
    },
    /// A shard named by the index is not in the folder.
    #[error("model folder {dir} lacks weight shard {shard} (listed in {WEIGHTS_INDEX_FILE})")]
    MissingShard {
        /// The model folder.
        dir: PathBuf,
        /// The shard's file name as the index gives it.
        shard: String,
    },
    /// The index names a shard that is not a plain file name (it would point outside the folder).
    #[error("{path} names shard {shard:?}, which is not a plain file name")]
    BadShardName {
        /// Path of the index file.
        path: PathBuf,
        /// The offending shard name.
        shard: String,
    },
    /// The index is not valid JSON with a `weight_map` object of strings.
    #[error("{path} is not a valid safetensors index: {reason}")]
    BadIndex {
        /// Path of the index file.
        path: PathBuf,
        /// What is wrong with it (the JSON error, or the missing or mistyped `weight_map`).
        reason: String,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// Offline (`HF_HUB_OFFLINE`) and the cache has no complete snapshot of the repo.
    #[error(
        "could not fetch {repo} from {endpoint} ({reason}). Download it on a machine with \
         internet (`huggingface-cli download {repo} --local-dir DIR`) and pass `--model DIR`"
    )]
    Fetch {
        /// The repo id, `owner/name`.
        repo: String,
        /// The hub endpoint URL that would have been used.
        endpoint: String,
        /// Why nothing was fetched (offline mode, and what the cache lacked).
        reason: String,
    },
    /// Online, the snapshot was not complete in the cache, and downloading it failed (a timeout,
    /// an HTTP error, …: `error` says which file and URL).
    #[error(
        "could not fetch {repo} from {endpoint} ({cache_problem}; download failed: {error}). \
         Download it on a machine with internet (`huggingface-cli download {repo} --local-dir \
         DIR`) and pass `--model DIR`"
    )]
    Download {
        /// The repo id, `owner/name`.
        repo: String,
        /// The hub endpoint URL downloaded from.
        endpoint: String,
        /// Why the cache alone was not enough.
        cache_problem: String,
        /// Boxed: it carries URLs and names, and every `FilesError` would carry its size.
        error: Box<HubError>,
    },
}

/// What a `--model` argument names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// An existing local path (checked to be a folder when resolving).
    Local(PathBuf),
    /// A Hugging Face model repo id, `owner/name`.
    Repo(String),
}

impl ModelSpec {
    /// An existing path wins over a repo id of the same spelling (as in transformers'
    /// `from_pretrained`).
    pub(crate) fn parse(spec: &str) -> Result<Self, FilesError> {
        let path = Path::new(spec);
        if path.exists() {
            Ok(ModelSpec::Local(path.to_path_buf()))
        } else if is_repo_id(spec) {
            Ok(ModelSpec::Repo(spec.to_owned()))
        } else {
            Err(FilesError::NotFound {
                spec: spec.to_owned(),
            })
        }
    }
}

/// Whether `s` is shaped like a hub model id `owner/name`: two non-empty parts of ASCII letters,
/// digits, `-`, `_`, `.`, not starting or ending with `-`/`.`, without `--` or `..` (the rules
/// of `huggingface_hub`'s `validate_repo_id`, with the owner required).
pub fn is_repo_id(s: &str) -> bool {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && !p.starts_with(['-', '.'])
            && !p.ends_with(['-', '.'])
    };
    s.len() <= 96
        && !s.contains("--")
        && !s.contains("..")
        && matches!(s.split_once('/'), Some((owner, name)) if part_ok(owner) && part_ok(name))
}

/// Where resolved files came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelOrigin {
    /// A local folder given by path.
    Local,
    /// A complete snapshot already in the hub cache (no network used).
    HubCache {
        /// The repo id, `owner/name`.
        repo: String,
    },
    /// Fetched (at least in part) from the hub into its cache.
    Downloaded {
        /// The repo id, `owner/name`.
        repo: String,
    },
}

/// The resolved files of one model, all in [`dir`](Self::dir).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    /// The model folder (for a hub model, its cache snapshot folder).
    pub dir: PathBuf,
    /// `config.json`.
    pub config: PathBuf,
    /// `model.safetensors`, or the shards of the index sorted by name.
    pub weights: Vec<PathBuf>,
    /// `model.safetensors.index.json` when the weights are sharded.
    pub weights_index: Option<PathBuf>,
    /// `tokenizer.json`.
    pub tokenizer: PathBuf,
    /// `tokenizer_config.json`, if present.
    pub tokenizer_config: Option<PathBuf>,
    /// `chat_template.jinja` if present, else `chat_template.json` (the order
    /// [`crate::Qwen25Tokenizer::from_dir`] reads them in).
    pub chat_template: Option<PathBuf>,
    /// `preprocessor_config.json`, if present (image-size limits and normalisation).
    pub preprocessor_config: Option<PathBuf>,
    /// `generation_config.json`, if present.
    pub generation_config: Option<PathBuf>,
    /// Whether the files came from a local folder, the hub cache or a download.
    pub origin: ModelOrigin,
}

impl ModelFiles {
    /// Resolves a `--model` spec with options from the environment ([`HubOptions::from_env`]).
    pub fn resolve(spec: &str) -> Result<Self, FilesError> {
        Self::resolve_with(spec, &HubOptions::from_env())
    }

    /// Resolves a `--model` spec: a local folder, else a hub repo id through `opts`.
    pub(crate) fn resolve_with(spec: &str, opts: &HubOptions) -> Result<Self, FilesError> {
        match ModelSpec::parse(spec)? {
            ModelSpec::Local(dir) => Self::from_dir(dir),
            ModelSpec::Repo(repo) => Self::from_hub(&repo, opts),
        }
    }

    /// The files of a local model folder.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, FilesError> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(if dir.exists() {
                FilesError::NotADirectory {
                    path: dir.to_path_buf(),
                }
            } else {
                FilesError::Missing {
                    dir: dir.to_path_buf(),
                    file: CONFIG_FILE,
                }
            });
        }
        let required = |file: &'static str| {
            let p = dir.join(file);
            if p.is_file() {
                Ok(p)
            } else {
                Err(FilesError::Missing {
                    dir: dir.to_path_buf(),
                    file,
                })
            }
        };
        let optional = |file: &str| Some(dir.join(file)).filter(|p| p.is_file());
        let config = required(CONFIG_FILE)?;
        let (weights, weights_index) = weight_files(dir)?;
        Ok(ModelFiles {
            dir: dir.to_path_buf(),
            config,
            weights,
            weights_index,
            tokenizer: required(TOKENIZER_FILE)?,
            tokenizer_config: optional("tokenizer_config.json"),
            chat_template: optional("chat_template.jinja")
                .or_else(|| optional("chat_template.json")),
            preprocessor_config: optional("preprocessor_config.json"),
            generation_config: optional("generation_config.json"),
            origin: ModelOrigin::Local,
        })
    }

    /// The files of a hub model: from the cache when a complete snapshot is there, else
    /// downloaded (unless `opts.offline`).
    pub(crate) fn from_hub(repo_id: &str, opts: &HubOptions) -> Result<Self, FilesError> {
        // A cached snapshot: every file of one revision sits in snapshots/<commit>/.
        let cached = hub::cached_snapshot(&opts.cache_dir, repo_id, &opts.revision)
            .map(|dir| Self::from_dir(&dir));
        let cache_problem = match cached {
            Some(Ok(mut files)) => {
                files.origin = ModelOrigin::HubCache {
                    repo: repo_id.to_owned(),
                };
                return Ok(files);
            }
            Some(Err(e)) => format!("the cached snapshot is incomplete: {e}"),
            None => format!("it is not in the cache {}", opts.cache_dir.display()),
        };
        if opts.offline {
            return Err(FilesError::Fetch {
                repo: repo_id.to_owned(),
                endpoint: opts.endpoint.clone(),
                reason: format!("offline mode (HF_HUB_OFFLINE) and {cache_problem}"),
            });
        }
        let snapshot = download(repo_id, opts).map_err(|error| FilesError::Download {
            repo: repo_id.to_owned(),
            endpoint: opts.endpoint.clone(),
            cache_problem,
            error: Box::new(error),
        })?;
        let mut files = Self::from_dir(snapshot)?;
        files.origin = ModelOrigin::Downloaded {
            repo: repo_id.to_owned(),
        };
        Ok(files)
    }
}

/// Downloads what [`ModelFiles::from_dir`] needs into the cache (files already in the snapshot
/// are not fetched again) and returns the snapshot folder.
fn download(repo_id: &str, opts: &HubOptions) -> Result<PathBuf, HubError> {
    let client = HubClient::new(opts)?;
    // A first download of a 3B model is gigabytes: say so, and how to avoid it, before it starts.
    if opts.progress {
        eprintln!(
            "download  {repo_id} is not in the cache {}: downloading it from {} \
             (Embodied-R1-3B is about 7 GB); --model DIR uses a local copy, HF_HUB_OFFLINE=1 never downloads",
            opts.cache_dir.display(),
            opts.endpoint
        );
    }
    let revision = client.revision(repo_id, &opts.revision)?;
    let listed = |f: &str| revision.files.iter().any(|s| s == f);
    let get = |f: &str| client.fetch(repo_id, &revision.commit, f);
    get(CONFIG_FILE)?;
    get(TOKENIZER_FILE)?;
    if listed(WEIGHTS_FILE) || !listed(WEIGHTS_INDEX_FILE) {
        get(WEIGHTS_FILE)?;
    } else {
        let index = get(WEIGHTS_INDEX_FILE)?;
        if let (true, Some(bytes)) = (opts.progress, indexed_total_size(&index)) {
            eprintln!("download  weights: {:.1} GB", bytes as f64 / 1e9);
        }
        // A malformed index fetches no shard; `from_dir` then reports it with its path.
        for shard in shard_names(&index).unwrap_or_default() {
            get(&shard)?;
        }
    }
    for f in OPTIONAL_FILES.into_iter().filter(|f| listed(f)) {
        get(f)?;
    }
    Ok(client.snapshot_dir(repo_id, &revision.commit))
}

/// The weights' total size an index declares (`metadata.total_size`), when it does.
fn indexed_total_size(index: &Path) -> Option<u64> {
    let text = pointact_input::read_text(index, pointact_input::MAX_CONFIG_BYTES).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json.get("metadata")?.get("total_size")?.as_u64()
}

/// The safetensors files of a model folder: `model.safetensors`, else the shards named by
/// `model.safetensors.index.json` (each once, sorted; each checked to exist) and the index.
/// Which file holds which tensor is left to [`crate::SafetensorsReader::open`], which reads
/// every shard's own header rather than trusting the index.
pub fn weight_files(dir: &Path) -> Result<(Vec<PathBuf>, Option<PathBuf>), FilesError> {
    let optional = |file: &str| Some(dir.join(file)).filter(|p| p.is_file());
    if let Some(single) = optional(WEIGHTS_FILE) {
        return Ok((vec![single], None));
    }
    let Some(index) = optional(WEIGHTS_INDEX_FILE) else {
        return Err(FilesError::MissingWeights {
            dir: dir.to_path_buf(),
        });
    };
    let mut paths = Vec::new();
    for shard in shard_names(&index)? {
        let p = dir.join(&shard);
        if !p.is_file() {
            return Err(FilesError::MissingShard {
                dir: dir.to_path_buf(),
                shard,
            });
        }
        paths.push(p);
    }
    Ok((paths, Some(index)))
}

/// The distinct shard files of a safetensors index, sorted (transformers' loading order).
pub fn shard_names(index: &Path) -> Result<Vec<String>, FilesError> {
    let text =
        pointact_input::read_text(index, pointact_input::MAX_CONFIG_BYTES).map_err(|source| {
            FilesError::Io {
                path: index.to_path_buf(),
                source,
            }
        })?;
    let bad = |reason: String| FilesError::BadIndex {
        path: index.to_path_buf(),
        reason,
    };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no `weight_map` object".to_owned()))?;
    let mut shards = std::collections::BTreeSet::new();
    for (tensor, shard) in map {
        let shard = shard
            .as_str()
            .ok_or_else(|| bad(format!("weight_map[{tensor:?}] is not a file name")))?;
        let plain = Path::new(shard).file_name().and_then(|n| n.to_str()) == Some(shard);
        if !plain {
            return Err(FilesError::BadShardName {
                path: index.to_path_buf(),
                shard: shard.to_owned(),
            });
        }
        shards.insert(shard.to_owned());
    }
    if shards.is_empty() {
        return Err(bad("`weight_map` is empty".to_owned()));
    }
    Ok(shards.into_iter().collect())
}
