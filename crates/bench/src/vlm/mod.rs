//! `pointact bench vlm`: our Qwen2.5-VL-3B on candle against PyTorch transformers, on the same
//! full-size random weights, image, prompt ids and thread count, in one run.
//!
//! Steps: write (or reuse) the checkpoint folder ([`checkpoint`]); render the simulator's view
//! of the default task and build Embodied-R1's prompt around it ([`inputs`]); measure each of
//! our configurations (`f32`, `q8_0`, `q4k`) in its own child process so that each has its own
//! peak RSS ([`worker`]); then measure transformers in float32 ([`peer`]); print one table with
//! ratios and the goals ([`report`]). The peer runs after ours, never at the same time: the two
//! f32 models would not fit next to each other on a small machine, and they would share cores.
//!
//! Both sides time the same three phases: the vision tower, prefill up to the first token
//! (vision excluded), and decode throughput over the remaining tokens (greedy, no stop token,
//! exactly `--decode-tokens` tokens), after one identical untimed warm-up.
//!
//! The quantized anchor: llama.cpp ([`llama`], through node-llama-cpp) on GGUF files of the same
//! weights in the same formats ([`gguf`]), fed the same prompt ids, text decoder only; and the
//! memory-bandwidth limit of decode, measured in the same run ([`bandwidth`]).

pub(crate) mod bandwidth;
pub mod checkpoint;
mod error;
pub(crate) mod gguf;
pub(crate) mod inputs;
pub(crate) mod kernels;
pub(crate) mod llama;
pub(crate) mod peer;
pub(crate) mod report;
pub(crate) mod worker;

use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};

pub(crate) use error::VlmBenchError;
use pointact_vlm::{resize_bicubic_pil, DeviceSpec, ImageProcessor, Quant};
pub(crate) use report::{LlamaColumn, OursColumn, Outcome, VlmBenchReport};

/// Options of `pointact bench vlm`.
#[derive(Debug, Clone)]
pub(crate) struct VlmBenchArgs {
    /// Threads for both sides.
    pub threads: usize,
    /// New tokens per run (the first comes from prefill, the rest are decode steps).
    pub decode_tokens: usize,
    /// Our configurations, in column order.
    pub quants: Vec<Quant>,
    /// The vision tower's linears in the quantized configurations (the f32 one stays f32).
    pub vision_quant: Quant,
    /// Where our side runs (a GPU: f32 only); the peers run on the CPU whatever it is.
    pub device: DeviceSpec,
    /// Checkpoint folder; default under `~/.cache/pointact/`.
    pub dir: Option<PathBuf>,
    /// Python interpreter for the peer.
    pub python: String,
    /// Cut both towers to this many layers (quick runs); `None` = full size.
    pub layers: Option<usize>,
    /// Input image size.
    pub image: (u32, u32),
    pub skip_peer: bool,
    /// Run the peer's MKL on its Intel code path on a non-Intel CPU ([`peer`]'s shim).
    pub peer_mkl_intel: bool,
    /// Formats llama.cpp runs in (GGUF with the same types as ours per tensor).
    pub llama: Vec<Quant>,
    pub skip_llama: bool,
    /// Seed of the random weights.
    pub seed: u64,
    /// Also time one affordance-branch task's questions about the frame, cold and reusing it.
    pub task: bool,
    /// Quantize at every load (no quantized-weights cache): the load row then times quantizing.
    pub no_quant_cache: bool,
    /// Alternated f32 load-only rounds after the runs ([`report::LoadRounds`]); 0: one load each.
    pub load_rounds: usize,
}

/// `~/.cache/pointact/bench-vlm-3b`, or `…-3b-L{n}` for a cut model (so quick runs do not
/// overwrite the full checkpoint).
pub(crate) fn default_dir(layers: Option<usize>) -> PathBuf {
    let base = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(".cache")
        .join("pointact");
    base.join(match layers {
        Some(n) => format!("bench-vlm-3b-L{n}"),
        None => "bench-vlm-3b".to_owned(),
    })
}

/// A reason to skip an f32 run whose weights alone (`need` bytes) would not fit in the memory
/// available now: on a shared machine an out-of-memory kill can hit someone else's process.
fn memory_guard(need: u64) -> Option<String> {
    let avail = pointact_vlm::budget::mem_available_bytes()?;
    (avail < need + need / 10).then(|| {
        format!(
            "needs ~{:.1} GB for its f32 weights, {:.1} GB available (free memory, or use --layers)",
            need as f64 / 1e9,
            avail as f64 / 1e9
        )
    })
}

fn bar(template: &str) -> ProgressBar {
    ProgressBar::new(0).with_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    )
}

/// A fresh temporary folder for the image, the request and the peer script.
fn work_dir() -> Result<PathBuf, VlmBenchError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir =
        std::env::temp_dir().join(format!("pointact-bench-vlm-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|source| VlmBenchError::Io {
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}

fn save_png(img: &image::RgbImage, path: &Path) -> Result<(), VlmBenchError> {
    img.save(path).map_err(|e| VlmBenchError::Image {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Runs the benchmark (see the module doc). Must run inside the `pointact` binary: the workers
/// are this executable re-run with [`worker::WORKER_ARGS`].
pub(crate) fn run(args: &VlmBenchArgs) -> Result<VlmBenchReport, VlmBenchError> {
    if args.threads == 0 {
        return Err(VlmBenchError::Args("--threads must be at least 1".into()));
    }
    if args.decode_tokens < 2 {
        return Err(VlmBenchError::Args(
            "--decode-tokens must be at least 2 (the first token comes from prefill)".into(),
        ));
    }
    if args.layers == Some(0) {
        return Err(VlmBenchError::Args("--layers must be at least 1".into()));
    }
    for &quant in &args.quants {
        args.device.check(quant, Quant::F32)?;
    }
    let dir = args.dir.clone().unwrap_or_else(|| default_dir(args.layers));
    let gen_bar = bar("  generating weights {bar:30} {bytes}/{total_bytes} ({eta}) {msg}");
    let ckpt = checkpoint::ensure(&dir, args.seed, args.layers, &gen_bar)?;
    gen_bar.finish_and_clear();
    eprintln!(
        "bench vlm: checkpoint {} ({})",
        ckpt.dir.display(),
        if ckpt.reused {
            "reused".to_owned()
        } else {
            format!("generated in {:.0} s", ckpt.generate_s)
        }
    );

    let work = work_dir()?;
    let result = measure(args, &ckpt, &work);
    let _ = std::fs::remove_dir_all(&work); // best effort: it is a temporary folder
    result
}

fn measure(
    args: &VlmBenchArgs,
    ckpt: &checkpoint::Checkpoint,
    work: &Path,
) -> Result<VlmBenchReport, VlmBenchError> {
    let processor =
        ImageProcessor::from_preprocessor_config(ckpt.dir.join("preprocessor_config.json"))?;
    let tokens = &ckpt.config.tokens;
    let (w, h) = args.image;
    let (img, object, instruction) = inputs::scene(w, h)?;
    let processed = processor.preprocess_rgb(&img)?;
    let small = resize_bicubic_pil(&img, inputs::WARMUP_SIDE, inputs::WARMUP_SIDE);
    let small_tokens = processor.preprocess_rgb(&small)?.num_image_tokens();
    let (image_path, warmup_path) = (work.join("image.png"), work.join("warmup.png"));
    save_png(&img, &image_path)?;
    save_png(&small, &warmup_path)?;

    let query = inputs::Query {
        image: image_path,
        input_ids: inputs::embodied_r1_prompt(processed.num_image_tokens(), &object, tokens),
        image_tokens: processed.num_image_tokens(),
        max_new_tokens: args.decode_tokens,
    };
    let questions = if args.task {
        inputs::affordance_questions(&instruction)?
    } else {
        Vec::new()
    };
    let task = questions
        .iter()
        .map(|(ability, q)| inputs::Query {
            input_ids: inputs::question_prompt(processed.num_image_tokens(), *ability, q, tokens),
            ..query.clone()
        })
        .collect();
    let request = inputs::Request {
        model_dir: ckpt.dir.clone(),
        threads: args.threads,
        warmup: inputs::Query {
            image: warmup_path,
            input_ids: inputs::warmup_prompt(small_tokens, tokens),
            image_tokens: small_tokens,
            max_new_tokens: inputs::WARMUP_NEW_TOKENS,
        },
        query,
        task,
        load_only: false,
    };
    let request_path = write_request(work, "request.json", &request)?;

    let f32_bytes = ckpt.params * 4;
    let text = &ckpt.config.text;
    // Before anything is timed: the peer's install and the GGUF files (minutes the first time).
    let mut llama_cols = prepare_llama(args, ckpt, work, f32_bytes);
    eprintln!("bench vlm: memory bandwidth ({} threads)", args.threads);
    let bw = bandwidth::measure(args.threads);

    let mut ours = Vec::new();
    for &quant in &args.quants {
        let guard = (quant == Quant::F32)
            .then(|| memory_guard(f32_bytes))
            .flatten();
        let outcome = match guard {
            Some(reason) => Outcome::Skipped { reason },
            None => {
                eprintln!(
                    "bench vlm: ours {quant} ({} threads, {})",
                    args.threads, args.device
                );
                let vision = if quant == Quant::F32 {
                    warm_page_cache(&ckpt.files);
                    Quant::F32
                } else {
                    args.vision_quant
                };
                let spawned = worker::spawn(
                    &request_path,
                    (quant, vision),
                    args.device,
                    args.threads,
                    args.no_quant_cache,
                );
                match spawned {
                    Ok(m) => Outcome::Measured(m),
                    Err(reason) => Outcome::Failed { reason },
                }
            }
        };
        ours.push((quant, outcome));
    }

    // llama.cpp after ours, before transformers: never two measurements at once.
    let prompt = llama::clamp_ids(&request.query.input_ids, text.vocab_size);
    for (col, peer_dir) in &mut llama_cols {
        let (Some(dir), Some(g)) = (peer_dir.as_ref(), col.gguf.as_ref()) else {
            continue;
        };
        eprintln!(
            "bench vlm: llama.cpp {} ({} threads)",
            col.quant, args.threads
        );
        col.outcome = match llama::run(dir, &g.path, &prompt, args.decode_tokens, args.threads) {
            Ok(m) => {
                col.decode_of_limit = Some(m.decode_tok_s / bw.ceiling_tok_s(col.bytes_per_token));
                Outcome::Measured(m)
            }
            Err(reason) => Outcome::Failed { reason },
        };
    }
    let llama: Vec<LlamaColumn> = llama_cols.into_iter().map(|(c, _)| c).collect();

    let transformers = if args.skip_peer {
        Outcome::Skipped {
            reason: "--skip-peer".into(),
        }
    } else if let Some(reason) = memory_guard(f32_bytes) {
        Outcome::Skipped { reason }
    } else {
        eprintln!(
            "bench vlm: transformers f32 ({} threads, {})",
            args.threads, args.python
        );
        warm_page_cache(&ckpt.files);
        match peer::run(
            &args.python,
            work,
            &request_path,
            args.threads,
            args.peer_mkl_intel,
        )? {
            Ok(m) => Outcome::Measured(m),
            Err(reason) => Outcome::Failed { reason },
        }
    };

    let mut transformers = transformers;
    let f32_loads = match (
        &mut transformers,
        ours.iter_mut().find(|(q, _)| *q == Quant::F32),
    ) {
        (Outcome::Measured(peer), Some((_, Outcome::Measured(ours_f32))))
            if args.load_rounds > 0 && args.device.is_cpu() =>
        {
            let rounds = alternate_loads(args, work, &request, &ckpt.files, (peer, ours_f32))?;
            rounds.apply(peer, ours_f32);
            Some(rounds)
        }
        _ => None,
    };

    let peer = transformers.measured();
    // The bench checkpoint is bf16: our loader keeps its dense weights so where it can.
    let dense_bf16 =
        args.device.is_cpu() && pointact_vlm::linear::keeps_bf16(&candle_core::Device::Cpu);
    let ours = ours
        .into_iter()
        .map(|(quant, outcome)| {
            let pair = outcome.measured().zip(peer);
            let bytes_per_token = bandwidth::bytes_per_token(text, quant, dense_bf16);
            let decode = outcome.measured().map(|m| m.decode_tok_s);
            let same_llama = llama
                .iter()
                .find(|c| c.quant == quant.to_string())
                .and_then(|c| c.outcome.measured());
            OursColumn {
                quant: quant.to_string(),
                ratios: pair.map(|(o, p)| report::Ratios::of(o, p)),
                tokens_vs_transformers: pair
                    .map(|(o, p)| report::Agreement::of(&o.tokens, &p.tokens)),
                bytes_per_token,
                // The limit is the CPU's memory bandwidth: no bound for a GPU's decode.
                decode_of_limit: decode
                    .filter(|_| args.device.is_cpu())
                    .map(|d| d / bw.ceiling_tok_s(bytes_per_token)),
                decode_vs_llama: decode.zip(same_llama).map(|(d, l)| d / l.decode_tok_s),
                outcome,
            }
        })
        .collect();
    let m = processed.model_size;
    Ok(VlmBenchReport {
        checkpoint: report::CheckpointInfo {
            dir: ckpt.dir.clone(),
            seed: args.seed,
            text_layers: ckpt.config.text.num_hidden_layers,
            vision_depth: ckpt.config.vision.as_ref().map_or(0, |v| v.depth),
            params: ckpt.params,
            bytes: ckpt.bytes,
            shards: ckpt.files.len(),
            reused: ckpt.reused,
            generate_s: ckpt.generate_s,
        },
        image: [w, h],
        model_image: [m.width, m.height],
        image_tokens: request.query.image_tokens,
        prompt_tokens: request.query.input_ids.len(),
        decode_tokens: args.decode_tokens,
        threads: args.threads,
        device: args.device.to_string(),
        vision_quant: args.vision_quant.to_string(),
        transformers,
        ours,
        cpu: kernels::detect(),
        peer_mkl_intel: args.peer_mkl_intel,
        task: questions
            .iter()
            .map(|(a, q)| format!("{} {q}", a.as_str().to_uppercase()))
            .collect(),
        bandwidth: bw,
        llama,
        f32_loads,
    })
}

/// `args.load_rounds` rounds of transformers' f32 load, then ours, each alone (a load-only
/// request) and from the same page cache, after the full runs' first loads (`first`).
fn alternate_loads(
    args: &VlmBenchArgs,
    work: &Path,
    request: &inputs::Request,
    files: &[PathBuf],
    first: (&worker::Measured, &worker::Measured),
) -> Result<report::LoadRounds, VlmBenchError> {
    let load_only = inputs::Request {
        load_only: true,
        ..request.clone()
    };
    let path = write_request(work, "request-load.json", &load_only)?;
    let mut rounds = report::LoadRounds {
        transformers: vec![first.0.load_s],
        ours: vec![first.1.load_s],
        failed: None,
    };
    for i in 1..=args.load_rounds {
        eprintln!(
            "bench vlm: f32 load round {i}/{}: transformers, then ours",
            args.load_rounds
        );
        warm_page_cache(files);
        let peer = peer::run(&args.python, work, &path, args.threads, args.peer_mkl_intel)?;
        let pair = peer.and_then(|p| {
            warm_page_cache(files);
            let quant = (Quant::F32, Quant::F32);
            worker::spawn(&path, quant, args.device, args.threads, args.no_quant_cache)
                .map(|o| (p.load_s, o.load_s))
        });
        match pair {
            Ok((p, o)) => {
                rounds.transformers.push(p);
                rounds.ours.push(o);
            }
            Err(e) => {
                rounds.failed = Some(e);
                break;
            }
        }
    }
    Ok(rounds)
}

/// `request` as JSON in `work/name`, for the workers and the peer to read; its path.
fn write_request(
    work: &Path,
    name: &str,
    request: &inputs::Request,
) -> Result<PathBuf, VlmBenchError> {
    let path = work.join(name);
    std::fs::write(&path, serde_json::to_string(request)?).map_err(|source| VlmBenchError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// The llama.cpp columns before measuring: the peer installed (or why not) and each format's
/// GGUF written or reused. A column that cannot run is already `Skipped`/`Failed`; the others
/// carry the peer's folder and wait for their turn.
fn prepare_llama(
    args: &VlmBenchArgs,
    ckpt: &checkpoint::Checkpoint,
    work: &Path,
    f32_bytes: u64,
) -> Vec<(LlamaColumn, Option<PathBuf>)> {
    let mut quants = args.llama.clone();
    quants.dedup();
    let peer = if args.skip_llama || quants.is_empty() {
        Err(Outcome::Skipped {
            reason: "--skip-llama".into(),
        })
    } else {
        eprintln!("bench vlm: llama.cpp peer (benches/llama_peer/setup.sh)");
        llama::setup(work).map_err(|e| match e {
            llama::SetupError::Missing(reason) => Outcome::Skipped { reason },
            llama::SetupError::Failed(reason) => Outcome::Failed { reason },
        })
    };
    quants
        .into_iter()
        .map(|quant| {
            let mut col = LlamaColumn {
                quant: quant.to_string(),
                gguf: None,
                outcome: Outcome::Skipped {
                    reason: "not run".into(),
                },
                bytes_per_token: bandwidth::bytes_per_token(&ckpt.config.text, quant, false),
                decode_of_limit: None,
            };
            let dir = match &peer {
                Err(outcome) => {
                    col.outcome = outcome.clone();
                    return (col, None);
                }
                Ok(dir) => dir.clone(),
            };
            if let Some(reason) = (quant == Quant::F32)
                .then(|| memory_guard(f32_bytes))
                .flatten()
            {
                col.outcome = Outcome::Skipped { reason };
                return (col, None);
            }
            let bar = bar(&format!(
                "  GGUF {quant}: {{bar:30}} {{pos}}/{{len}} tensors ({{eta}})"
            ));
            let written = gguf::ensure(&ckpt.dir, quant, &bar);
            bar.finish_and_clear();
            match written {
                Ok(g) => {
                    eprintln!(
                        "bench vlm: {} ({})",
                        g.path.display(),
                        if g.reused {
                            "reused".to_owned()
                        } else {
                            format!("written in {:.0} s", g.write_s)
                        }
                    );
                    col.gguf = Some(g);
                    (col, Some(dir))
                }
                Err(e) => {
                    col.outcome = Outcome::Failed {
                        reason: format!("writing the GGUF: {e}"),
                    };
                    (col, None)
                }
            }
        })
        .collect()
}

/// Parses `WxH` (e.g. `640x480`).
pub(crate) fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("`{s}` is not WIDTHxHEIGHT (e.g. 640x480)"))?;
    let num = |v: &str| {
        v.trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("`{s}`: `{v}` is not a positive integer"))
    };
    Ok((num(w)?, num(h)?))
}

/// Reads the checkpoint's shards once, untimed, so that both f32 loads (ours, transformers')
/// start from the same page cache. Why: the two read the same bf16 files one after the other,
/// and whichever came second found them cached by the first (or evicted by the quantized runs
/// between): on the 2-core AVX-512 machine ours, first, read from disk (21.8 s) and
/// transformers, last, from memory (16.2 s). On a machine whose memory cannot hold the shards
/// beside the f32 model the tail of each load still reads from disk, alike for both. A read
/// error is left to the load that follows, which reports it with its path.
fn warm_page_cache(files: &[std::path::PathBuf]) {
    use std::io::Read;
    let mut buf = vec![0u8; 8 << 20];
    for path in files {
        if let Ok(mut f) = std::fs::File::open(path) {
            while matches!(f.read(&mut buf), Ok(n) if n > 0) {}
        }
    }
}
