//! Model spec → files: local folders (single-file and sharded weights), the Hugging Face cache
//! layout, and the offline error. No test touches the network.

use super::temp::temp_dir;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::files::is_repo_id;
use crate::files::ModelSpec;
use crate::hub::HubError;
use crate::hub::HubOptions;
use crate::{FilesError, ModelFiles, ModelOrigin};

fn fixture(name: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/fixtures/qwen25vl_tiny")
        .join(name)
}

const SHARD_1: &str = "model-00001-of-00002.safetensors";
const SHARD_2: &str = "model-00002-of-00002.safetensors";

/// A folder with config, tokenizer and two weight shards; the index lists shard 2 first.
fn sharded_folder(tag: &str) -> PathBuf {
    let dir = temp_dir(tag);
    std::fs::copy(fixture("config.json"), dir.join("config.json")).unwrap();
    std::fs::copy(fixture("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let index = serde_json::json!({
        "metadata": { "total_size": 16 },
        "weight_map": {
            "model.embed_tokens.weight": SHARD_2,
            "visual.patch_embed.proj.weight": SHARD_1,
            "model.norm.weight": SHARD_2,
        }
    });
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_string_pretty(&index).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join(SHARD_1), b"shard one").unwrap();
    std::fs::write(dir.join(SHARD_2), b"shard two").unwrap();
    dir
}

#[test]
fn fixture_folder_resolves() {
    let dir = fixture("");
    let files = ModelFiles::from_dir(&dir).unwrap();
    assert_eq!(files.config, dir.join("config.json"));
    assert_eq!(files.weights, vec![dir.join("model.safetensors")]);
    assert_eq!(files.weights_index, None);
    assert_eq!(files.tokenizer, dir.join("tokenizer.json"));
    assert_eq!(
        files.tokenizer_config,
        Some(dir.join("tokenizer_config.json"))
    );
    assert_eq!(files.chat_template, None);
    assert_eq!(
        files.preprocessor_config,
        Some(dir.join("preprocessor_config.json"))
    );
    assert_eq!(
        files.generation_config,
        Some(dir.join("generation_config.json"))
    );
    assert_eq!(files.origin, ModelOrigin::Local);

    // Through a spec string, too (a path wins; the hub is never asked).
    let cache = temp_dir("unused-cache");
    let spec = dir.to_str().unwrap();
    let via_spec = ModelFiles::resolve_with(spec, &HubOptions::offline(&cache)).unwrap();
    assert_eq!(via_spec, files);
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn sharded_folder_lists_distinct_shards_in_order() {
    let dir = sharded_folder("sharded");
    let files = ModelFiles::from_dir(&dir).unwrap();
    assert_eq!(files.weights, vec![dir.join(SHARD_1), dir.join(SHARD_2)]);
    assert_eq!(
        files.weights_index,
        Some(dir.join("model.safetensors.index.json"))
    );
    assert_eq!(files.tokenizer_config, None);
    assert_eq!(files.generation_config, None);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_shard_is_named() {
    let dir = sharded_folder("missing-shard");
    std::fs::remove_file(dir.join(SHARD_2)).unwrap();
    let err = ModelFiles::from_dir(&dir).unwrap_err();
    assert!(
        matches!(&err, FilesError::MissingShard { dir: d, shard } if *d == dir && shard == SHARD_2),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(SHARD_2) && msg.contains(&dir.display().to_string()),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shard_names_must_stay_in_the_folder() {
    let dir = sharded_folder("bad-shard");
    let index = serde_json::json!({ "weight_map": { "a": "../elsewhere.safetensors" } });
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let err = ModelFiles::from_dir(&dir).unwrap_err();
    assert!(matches!(err, FilesError::BadShardName { .. }), "{err:?}");

    std::fs::write(dir.join("model.safetensors.index.json"), "{}").unwrap();
    let err = ModelFiles::from_dir(&dir).unwrap_err();
    assert!(matches!(err, FilesError::BadIndex { .. }), "{err:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_required_files_name_file_and_folder() {
    let dir = sharded_folder("missing");
    let folder = dir.display().to_string();

    std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
    let err = ModelFiles::from_dir(&dir).unwrap_err();
    assert!(
        matches!(&err, FilesError::Missing { file: "tokenizer.json", dir: d } if *d == dir),
        "{err:?}"
    );
    assert!(err.to_string().contains("tokenizer.json") && err.to_string().contains(&folder));

    std::fs::remove_file(dir.join("model.safetensors.index.json")).unwrap();
    let err = ModelFiles::from_dir(&dir).unwrap_err();
    assert!(matches!(&err, FilesError::MissingWeights { .. }), "{err:?}");
    assert!(err.to_string().contains("model.safetensors") && err.to_string().contains(&folder));

    std::fs::remove_file(dir.join("config.json")).unwrap();
    let err = ModelFiles::from_dir(&dir).unwrap_err();
    assert!(
        matches!(
            &err,
            FilesError::Missing {
                file: "config.json",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains(&folder));

    let err = ModelFiles::from_dir(dir.join(SHARD_1)).unwrap_err();
    assert!(matches!(err, FilesError::NotADirectory { .. }), "{err:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn spec_parsing() {
    for id in [
        "IffYuan/Embodied-R1-3B-v1",
        "Qwen/Qwen2.5-VL-3B-Instruct",
        "a/b",
        "user_1/model.v2",
    ] {
        assert!(is_repo_id(id), "{id}");
    }
    for not in [
        "gpt2",
        "a/b/c",
        "/abs/path",
        "./rel/x",
        "owner/",
        "/name",
        "own..er/x",
        "owner/na--me",
        "-owner/x",
        "owner/x.",
        "ow ner/x",
    ] {
        assert!(!is_repo_id(not), "{not}");
    }
    let fixture_dir = fixture("");
    assert_eq!(
        ModelSpec::parse(fixture_dir.to_str().unwrap()).unwrap(),
        ModelSpec::Local(fixture_dir.clone())
    );
    assert_eq!(
        ModelSpec::parse("IffYuan/Embodied-R1-3B-v1").unwrap(),
        ModelSpec::Repo("IffYuan/Embodied-R1-3B-v1".into())
    );
    let err = ModelSpec::parse("no/such/folder").unwrap_err();
    assert!(matches!(err, FilesError::NotFound { .. }), "{err:?}");
}

/// Writes the cache layout `huggingface-cli download` leaves: `refs/main` holds the commit,
/// `snapshots/<commit>/` holds the files.
fn cache_snapshot(cache: &Path, repo: &str, files: &[&str]) -> PathBuf {
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let repo_dir = cache.join(format!("models--{}", repo.replace('/', "--")));
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::write(repo_dir.join("refs/main"), commit).unwrap();
    let snapshot = repo_dir.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    for f in files {
        std::fs::copy(fixture(f), snapshot.join(f)).unwrap();
    }
    snapshot
}

#[test]
fn cached_repo_resolves_offline() {
    let cache = temp_dir("hub-cache");
    let repo = "pointact-test/qwen25vl-tiny";
    let snapshot = cache_snapshot(
        &cache,
        repo,
        &[
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "preprocessor_config.json",
        ],
    );
    let files = ModelFiles::resolve_with(repo, &HubOptions::offline(&cache)).unwrap();
    assert_eq!(files.dir, snapshot);
    assert_eq!(files.weights, vec![snapshot.join("model.safetensors")]);
    assert_eq!(files.origin, ModelOrigin::HubCache { repo: repo.into() });
    assert_eq!(files.generation_config, None);
    std::fs::remove_dir_all(&cache).unwrap();
}

/// A revision that is a commit id needs no ref (as in `huggingface_hub`); a ref that does not
/// hold a commit id is not followed.
#[test]
fn a_commit_revision_resolves_without_a_ref() {
    let cache = temp_dir("hub-commit-rev");
    let repo = "pointact-test/qwen25vl-tiny";
    let snapshot = cache_snapshot(
        &cache,
        repo,
        &["config.json", "model.safetensors", "tokenizer.json"],
    );
    let commit = snapshot.file_name().unwrap().to_str().unwrap().to_owned();
    let repo_dir = snapshot.parent().unwrap().parent().unwrap();
    std::fs::remove_file(repo_dir.join("refs/main")).unwrap();
    let opts = HubOptions {
        revision: commit,
        ..HubOptions::offline(&cache)
    };
    assert_eq!(ModelFiles::resolve_with(repo, &opts).unwrap().dir, snapshot);
    assert!(ModelFiles::resolve_with(repo, &HubOptions::offline(&cache)).is_err());

    std::fs::write(repo_dir.join("refs/main"), "../../elsewhere").unwrap();
    let err = ModelFiles::resolve_with(repo, &HubOptions::offline(&cache)).unwrap_err();
    assert!(err.to_string().contains("not in the cache"), "{err}");
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn incomplete_cached_snapshot_offline_says_what_is_missing() {
    let cache = temp_dir("hub-incomplete");
    let repo = "pointact-test/qwen25vl-tiny";
    cache_snapshot(&cache, repo, &["config.json", "model.safetensors"]);
    let err = ModelFiles::resolve_with(repo, &HubOptions::offline(&cache)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, FilesError::Fetch { .. }), "{err:?}");
    assert!(
        msg.contains("tokenizer.json") && msg.contains("--model"),
        "{msg}"
    );
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn uncached_repo_offline_explains_how_to_pass_a_folder() {
    let cache = temp_dir("hub-empty");
    let repo = "IffYuan/Embodied-R1-3B-v1";
    let err = ModelFiles::resolve_with(repo, &HubOptions::offline(&cache)).unwrap_err();
    assert!(
        matches!(&err, FilesError::Fetch { repo: r, .. } if r == repo),
        "{err:?}"
    );
    let msg = err.to_string();
    for part in [
        "could not fetch IffYuan/Embodied-R1-3B-v1 from https://huggingface.co",
        "HF_HUB_OFFLINE",
        "`huggingface-cli download IffYuan/Embodied-R1-3B-v1 --local-dir DIR`",
        "`--model DIR`",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    std::fs::remove_dir_all(&cache).unwrap();
}

/// The environment is read as `huggingface_hub` reads it (through a lookup, not the process
/// environment, so tests stay independent).
#[test]
fn hub_options_follow_huggingface_hub_variables() {
    let opts = |vars: &[(&str, &str)]| {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HubOptions::from_vars(move |k| {
            vars.iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v.clone())
        })
    };
    let o = opts(&[("HOME", "/h/u")]);
    assert_eq!(o.cache_dir, PathBuf::from("/h/u/.cache/huggingface/hub"));
    assert!(!o.offline);
    assert_eq!(o.endpoint, "https://huggingface.co");
    assert_eq!(o.revision, "main");
    assert_eq!(o.token, None);
    assert_eq!(o.connect_timeout, Duration::from_secs(10));
    assert_eq!(o.read_timeout, Duration::from_secs(30));

    // huggingface_hub's download timeout sets both; an unusable value keeps the defaults.
    let o = opts(&[("HF_HUB_DOWNLOAD_TIMEOUT", "2.5")]);
    assert_eq!(o.connect_timeout, Duration::from_millis(2500));
    assert_eq!(o.read_timeout, Duration::from_millis(2500));
    for bad in ["0", "-1", "NaN", "inf", "soon"] {
        let o = opts(&[("HF_HUB_DOWNLOAD_TIMEOUT", bad)]);
        assert_eq!(o.read_timeout, Duration::from_secs(30), "{bad}");
        assert_eq!(o.connect_timeout, Duration::from_secs(10), "{bad}");
    }

    let o = opts(&[("HOME", "/h/u"), ("XDG_CACHE_HOME", "/xdg")]);
    assert_eq!(o.cache_dir, PathBuf::from("/xdg/huggingface/hub"));
    let o = opts(&[("XDG_CACHE_HOME", "/xdg"), ("HF_HOME", "/hf")]);
    assert_eq!(o.cache_dir, PathBuf::from("/hf/hub"));
    let o = opts(&[("HF_HOME", "/hf"), ("HF_HUB_CACHE", "/hub-cache")]);
    assert_eq!(o.cache_dir, PathBuf::from("/hub-cache"));

    for (value, offline) in [
        ("1", true),
        ("ON", true),
        ("yes", true),
        ("True", true),
        ("0", false),
        ("", false),
        ("no", false),
    ] {
        assert_eq!(
            opts(&[("HF_HUB_OFFLINE", value)]).offline,
            offline,
            "{value:?}"
        );
    }
    let o = opts(&[
        ("HF_ENDPOINT", "https://mirror.example"),
        ("HF_TOKEN", "hf_x"),
    ]);
    assert_eq!(o.endpoint, "https://mirror.example");
    assert_eq!(o.token.as_deref(), Some("hf_x"));

    // The token file `huggingface-cli login` writes, under HF_HOME.
    let home = temp_dir("hf-home");
    std::fs::write(home.join("token"), "hf_from_file\n").unwrap();
    let o = opts(&[("HF_HOME", home.to_str().unwrap())]);
    assert_eq!(o.token.as_deref(), Some("hf_from_file"));
    assert_eq!(o.cache_dir, home.join("hub"));
    std::fs::remove_dir_all(&home).unwrap();
}

/// Online but the hub cannot be reached (a closed local port stands in for "no network"): the
/// error carries the download failure and the same advice.
#[test]
fn unreachable_hub_explains_how_to_pass_a_folder() {
    let cache = temp_dir("hub-unreachable");
    let opts = HubOptions {
        offline: false,
        endpoint: "http://127.0.0.1:1".into(),
        ..HubOptions::offline(&cache)
    };
    let repo = "IffYuan/Embodied-R1-3B-v1";
    let err = ModelFiles::resolve_with(repo, &opts).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(&err, FilesError::Download { error, .. }
            if matches!(**error, HubError::Unreachable { .. })),
        "{err:?}"
    );
    for part in [
        "could not fetch IffYuan/Embodied-R1-3B-v1 from http://127.0.0.1:1",
        "download failed",
        "--local-dir DIR",
        "`--model DIR`",
    ] {
        assert!(msg.contains(part), "{part:?} not in {msg}");
    }
    std::fs::remove_dir_all(&cache).unwrap();
}

/// `weight_files` alone (what a folder without tokenizer, e.g. the benchmark's, is loaded with):
/// no weights, one file, then shards in name order with their index.
#[test]
fn weight_files_without_the_rest_of_a_model_folder() {
    use crate::weight_files;
    let dir = temp_dir("weight-files");
    assert!(matches!(
        weight_files(&dir),
        Err(FilesError::MissingWeights { .. })
    ));
    let index = r#"{"metadata": {"total_size": 8}, "weight_map": {
        "b": "model-00002-of-00002.safetensors",
        "a": "model-00001-of-00002.safetensors",
        "c": "model-00001-of-00002.safetensors"}}"#;
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
    std::fs::write(dir.join("model-00001-of-00002.safetensors"), b"").unwrap();
    std::fs::write(dir.join("model-00002-of-00002.safetensors"), b"").unwrap();
    let (files, idx) = weight_files(&dir).unwrap();
    assert_eq!(
        files,
        vec![
            dir.join("model-00001-of-00002.safetensors"),
            dir.join("model-00002-of-00002.safetensors")
        ]
    );
    assert_eq!(idx, Some(dir.join("model.safetensors.index.json")));
    std::fs::write(dir.join("model.safetensors"), b"").unwrap();
    assert_eq!(
        weight_files(&dir).unwrap(),
        (vec![dir.join("model.safetensors")], None)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
