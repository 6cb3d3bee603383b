//! The quantized-weights cache (`vlm::qcache`) on the tiny fixture model, copied into a scratch
//! folder: the first Q8_0 load writes the cache, the next reads it, and every load — cached,
//! fresh, or with a damaged, stale or unwritable cache — gives the same logits bit for bit as a
//! load without any cache. (Q8_0 because the tiny widths, 64 and 128, do not fit Q4K's 256.)

mod common;
mod vlm_fixture;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::TempDir;
use pointact::pointing::qwen::{QwenOptions, QwenPointer};
use pointact::vlm::qcache::CacheOptions;
use pointact::vlm::qcache::CacheOutcome;
use pointact::vlm::qcache::CacheReport;
use pointact::vlm::{ImageInput, LogitsAt, Quant};
use vlm_fixture::*;

/// The files a model folder needs (the golden tensors stay behind).
const MODEL_FILES: [&str; 7] = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "preprocessor_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
];

/// A scratch copy of the fixture model in `TMP/model`, and `TMP/home` for the fallback cache.
fn scratch(tag: &str) -> (TempDir, PathBuf, PathBuf) {
    let tmp = TempDir::new(&format!("qcache-{tag}"));
    let model = tmp.join("model");
    std::fs::create_dir_all(&model).unwrap();
    for f in MODEL_FILES {
        std::fs::copy(fixture(f), model.join(f)).unwrap();
    }
    let home = tmp.join("home");
    (tmp, model, home)
}

fn cache_in(home: &Path) -> CacheOptions {
    CacheOptions {
        enabled: true,
        fallback: Some(home.to_path_buf()),
    }
}

/// The cache file a Q8_0 (both towers) load of `model` writes beside it.
fn local_cache(model: &Path) -> PathBuf {
    model.join(".pointact/q8_0-vision-q8_0.qcache")
}

/// Loads `model` with both towers at `quant` and returns the bits of the golden prompt's logits
/// (image and text, every position) and what the load did with the cache.
fn run(model: &Path, quant: Quant, cache: CacheOptions) -> (Vec<u32>, CacheReport) {
    let pointer = QwenPointer::load(
        model.to_str().unwrap(),
        QwenOptions {
            quant,
            vision_quant: quant,
            quant_cache: cache,
            progress: false,
            ..QwenOptions::default()
        },
    )
    .expect("the model loads");
    let report = pointer.quant_cache().clone();
    let mut m = pointer.into_parts().model;
    let g = golden();
    let ids: Vec<u32> = i64s(&g, "input_ids").iter().map(|&x| x as u32).collect();
    let image = ImageInput {
        pixel_values: golden_pixel_values(&g),
        grid_thw: grid(&g),
    };
    let prompt = m.prepare(&ids, &[image]).unwrap();
    let logits = m.prefill(&prompt, 1, LogitsAt::All, false).unwrap().logits;
    let values: Vec<f32> = logits.flatten_all().unwrap().to_vec1().unwrap();
    (values.iter().map(|v| v.to_bits()).collect(), report)
}

fn q8(model: &Path, cache: CacheOptions) -> (Vec<u32>, CacheReport) {
    run(model, Quant::Q8_0, cache)
}

/// Files in `dir` whose name ends with `.partial`.
fn partials(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(".partial"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_first_quantized_load_writes_the_cache_and_the_next_reads_it_bit_for_bit() {
    let (_tmp, model, home) = scratch("roundtrip");
    let (fresh, off) = q8(&model, CacheOptions::off());
    assert_eq!(off.outcome, CacheOutcome::Unused);
    assert!(!model.join(".pointact").exists(), "the cache was off");

    let (first, wrote) = q8(&model, cache_in(&home));
    assert_eq!(wrote.outcome, CacheOutcome::Written(local_cache(&model)));
    // Text: 2 layers x (q, k, v, o, gate, up, down) + the tied head; vision: 4 blocks x (qkv,
    // proj, gate, up; down's 48 wide fits no block) + the merger's two.
    assert_eq!((wrote.quantized, wrote.from_cache), (15 + 18, 0));
    assert!(wrote.rejected.is_empty());
    assert!(partials(&model.join(".pointact")).is_empty());
    assert!(!home.exists(), "nothing goes to the fallback");
    assert!(
        first == fresh,
        "the writing load differs from a load without cache"
    );

    let (second, read) = q8(&model, cache_in(&home));
    assert_eq!(read.outcome, CacheOutcome::Read(local_cache(&model)));
    assert_eq!((read.from_cache, read.quantized), (33, 0));
    assert!(
        second == fresh,
        "the cached load differs from a load without cache"
    );
}

#[test]
fn dense_loads_and_a_disabled_cache_write_nothing() {
    let (_tmp, model, home) = scratch("dense");
    let (_, f32_load) = run(&model, Quant::F32, cache_in(&home));
    assert_eq!(f32_load.outcome, CacheOutcome::Unused);
    let (_, off) = q8(&model, CacheOptions::off());
    assert_eq!((off.outcome, off.quantized), (CacheOutcome::Unused, 0));
    assert!(!model.join(".pointact").exists() && !home.exists());
}

/// Truncations and flipped bytes anywhere in the file (magic, tensor data, index, footer): the
/// load still gives the exact logits, and the cache is good again by the second load after it.
/// A damage the framing or a checksum catches is reported and rewritten by that same load.
#[test]
fn a_damaged_cache_is_rejected_requantized_and_rewritten() {
    let (_tmp, model, home) = scratch("damaged");
    let (fresh, _) = q8(&model, CacheOptions::off());
    q8(&model, cache_in(&home));
    let path = local_cache(&model);
    let good = std::fs::read(&path).unwrap();
    let n = good.len();
    let mut damages: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), Vec::new()),
        ("half".into(), good[..n / 2].to_vec()),
        ("one byte short".into(), good[..n - 1].to_vec()),
    ];
    for at in [
        0,
        64,
        65,
        n / 4,
        n / 2,
        3 * n / 4,
        n - 200,
        n - 40,
        n - 12,
        n - 1,
    ] {
        let mut bytes = good.clone();
        bytes[at] ^= 0x10;
        damages.push((format!("byte {at} of {n} flipped"), bytes));
    }
    for (what, bytes) in damages {
        std::fs::write(&path, &bytes).unwrap();
        let (logits, report) = q8(&model, cache_in(&home));
        assert!(logits == fresh, "{what}: other logits");
        let caught = !report.rejected.is_empty();
        if caught {
            assert_eq!(report.rejected[0].0, path, "{what}");
            assert_eq!(
                report.outcome,
                CacheOutcome::Written(path.clone()),
                "{what}"
            );
            println!("{what}: rejected ({})", report.rejected[0].1);
        } else {
            // Only a damaged index can pass the checks (a name no weight asks for): then the
            // weights it lacks are quantized and the file is removed for the next load.
            assert!(report.quantized > 0, "{what}: {report:?}");
            println!("{what}: read, {} weights quantized", report.quantized);
        }
        let mut next = q8(&model, cache_in(&home));
        if !matches!(next.1.outcome, CacheOutcome::Read(_)) {
            next = q8(&model, cache_in(&home));
        }
        assert!(next.0 == fresh, "{what}: other logits after the rewrite");
        assert_eq!(
            (next.1.outcome, next.1.quantized),
            (CacheOutcome::Read(path.clone()), 0),
            "{what}: not rewritten"
        );
    }
    assert!(partials(&model.join(".pointact")).is_empty());
}

/// A weights file with a new modification time is not read from the old cache; changed weights
/// give the logits of a load without cache, not the old ones.
#[test]
fn changed_weights_are_not_read_from_an_old_cache() {
    let (_tmp, model, home) = scratch("stale");
    let weights = model.join("model.safetensors");
    let (old, _) = q8(&model, cache_in(&home));

    let later = std::fs::metadata(&weights).unwrap().modified().unwrap() + Duration::from_secs(5);
    let touch = |t| {
        std::fs::File::options()
            .write(true)
            .open(&weights)
            .unwrap()
            .set_modified(t)
            .unwrap()
    };
    touch(later);
    let (same, report) = q8(&model, cache_in(&home));
    assert!(same == old);
    assert_eq!(report.outcome, CacheOutcome::Written(local_cache(&model)));
    assert!(report.rejected[0].1.contains("other weights"), "{report:?}");

    // Negate the first row of the first layer's up_proj (a quantized weight), same size.
    let mut bytes = std::fs::read(&weights).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let info = &header["model.layers.0.mlp.up_proj.weight"];
    assert_eq!(info["dtype"], "BF16");
    let start = 8 + header_len + info["data_offsets"][0].as_u64().unwrap() as usize;
    let row = info["shape"][1].as_u64().unwrap() as usize;
    for i in 0..row {
        bytes[start + 2 * i + 1] ^= 0x80; // bf16 sign bit, little-endian high byte
    }
    std::fs::write(&weights, &bytes).unwrap();
    touch(later + Duration::from_secs(5));
    let (fresh, _) = q8(&model, CacheOptions::off());
    assert!(fresh != old, "the change must show in the logits");
    let (cached, report) = q8(&model, cache_in(&home));
    assert_eq!(report.outcome, CacheOutcome::Written(local_cache(&model)));
    assert!(cached == fresh, "a stale cache gave the old weights");
    let (again, report) = q8(&model, cache_in(&home));
    assert_eq!(report.outcome, CacheOutcome::Read(local_cache(&model)));
    assert!(again == fresh);
}

/// When the model's folder cannot take `.pointact/` (here a file of that name is in the way,
/// which stops root too), the cache goes to the fallback folder; when that cannot be written
/// either, the model loads without a cache.
#[test]
fn an_unwritable_model_folder_falls_back_then_goes_without() {
    let (_tmp, model, home) = scratch("readonly");
    let (fresh, _) = q8(&model, CacheOptions::off());
    std::fs::write(model.join(".pointact"), "in the way").unwrap();

    let (first, report) = q8(&model, cache_in(&home));
    let CacheOutcome::Written(path) = &report.outcome else {
        panic!("not written: {report:?}");
    };
    assert!(path.starts_with(&home), "{}", path.display());
    assert!(first == fresh);
    let (second, report) = q8(&model, cache_in(&home));
    assert_eq!(report.outcome, CacheOutcome::Read(path.clone()));
    assert!(second == fresh);

    let blocked = home.join("blocked");
    std::fs::write(&blocked, "in the way").unwrap();
    let (third, report) = q8(&model, cache_in(&blocked));
    assert!(
        matches!(&report.outcome, CacheOutcome::NotWritten(why) if why.contains("no folder")),
        "{report:?}"
    );
    assert!(third == fresh);
    assert!(partials(&home).is_empty());
}

/// The same with the folder's write permission taken away (skipped as root, whom permissions do
/// not stop).
#[test]
fn a_read_only_model_folder_falls_back() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        println!("skipped: running as root");
        return;
    }
    let (_tmp, model, home) = scratch("chmod");
    let (fresh, _) = q8(&model, CacheOptions::off());
    std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o555)).unwrap();
    let (logits, report) = q8(&model, cache_in(&home));
    std::fs::set_permissions(&model, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(logits == fresh);
    assert!(
        matches!(&report.outcome, CacheOutcome::Written(p) if p.starts_with(&home)),
        "{report:?}"
    );
}
