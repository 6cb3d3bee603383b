//! A cache of quantized weights beside the checkpoint, so that a quantized model loads without
//! quantizing again.
//!
//! Why: quantizing every linear of the 3B decoder at load (`--quant q4k`) takes far longer than
//! reading it. The first load in a quantized format writes the ggml blocks it made to
//! `DIR/.pointact/<quant>-vision-<quant>.qcache`; later loads read them back and take only the
//! dense tensors (embeddings, norms, biases, the f32 vision tower) from the safetensors.
//!
//! How it plugs in: [`attach`] wraps the [`SafetensorsReader`] in a `VarBuilder` backend that
//! also answers `X.weight.<quant>` (e.g. `model.layers.0.mlp.up_proj.weight.q4k`) with that
//! weight's blocks (the protocol of `QBlocks::from_backend` in [`super::linear`]): from the cache
//! when it holds them, else by quantizing the f32 weight with the same function a plain load
//! runs, appending the blocks to the new cache file. Rows quantize independently, so q, k and v
//! quantized apart and stacked are the fused blocks bit for bit.
//!
//! Format (ours, not GGUF): `MAGIC`, the tensors' bytes (each 64-byte aligned), the index (JSON:
//! the key, then per tensor its name, rows, bytes per row, offset and CRC-32), the index length
//! (u64 LE), `MAGIC`. Why not GGUF: its header lists every tensor's offset before the data, so
//! writing one needs every tensor at hand at once (a second copy of the blocks next to the
//! model's); this one is written as a stream while the model loads.
//!
//! Trust: a cache is used only when its key equals this load's (format version, quantizer, both
//! towers' formats, and each weights file's canonical path, size and modification time) and
//! every tensor's CRC-32 matches; it is read whole and checked before the model is built. A
//! truncated, corrupt or stale file is reported with a warning and the weights are quantized
//! again and the file rewritten: never a crash, never other weights. A tensor the model asks for
//! that a valid cache lacks is quantized too, and that cache is removed to be rewritten next
//! time. New files are written as `NAME.<pid>.partial` and renamed into place, so no reader ever
//! sees half a file (a partial left by a killed process is removed by the next writer). They are
//! not fsynced: a file cut short by a crash fails the checks above and is simply rewritten.
//!
//! Where: `DIR/.pointact/`, beside the first weights file; when that cannot be written,
//! [`CacheOptions::fallback`]`/<folder name>-<hash of its path>/` (default
//! `~/.cache/pointact/qcache`); when neither can, the load goes on without a cache, with one
//! warning.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::UNIX_EPOCH;

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::linear::{quantize_bytes, Quant};
use super::weights::SafetensorsReader;

/// Layout version. Bump it when the layout or the quantizer changes (a candle upgrade may change
/// `from_float`): caches of other versions are then quantized again rather than trusted.
const FORMAT: u32 = 1;
/// Whose quantizer made the blocks.
const QUANTIZER: &str = "candle-core 0.11";
const MAGIC: &[u8; 8] = b"PACTQC01";
/// Tensor data alignment in the file.
const ALIGN: u64 = 64;
/// Weights quantized at once when writing (64 MiB of f32).
const BAND_ELEMS: usize = 1 << 24;

/// Whether and where quantized weights are cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheOptions {
    /// Whether quantized weights are read from and written to a cache file at all (off: quantized
    /// at every load).
    pub enabled: bool,
    /// Where caches go when the checkpoint's own folder cannot be written; `None`: nowhere.
    pub fallback: Option<PathBuf>,
}

impl Default for CacheOptions {
    /// On, falling back to `~/.cache/pointact/qcache`.
    fn default() -> Self {
        Self {
            enabled: true,
            fallback: std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/pointact/qcache")),
        }
    }
}

impl CacheOptions {
    /// No cache: every quantized load quantizes.
    pub fn off() -> Self {
        Self {
            enabled: false,
            fallback: None,
        }
    }
}

/// What a load did with the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// No cache: every weight is dense, the cache is off, or nothing fit a block format.
    Unused,
    /// The quantized weights were read from this file.
    Read(PathBuf),
    /// They were quantized and written to this file.
    Written(PathBuf),
    /// They were quantized and could not be cached, for this reason.
    NotWritten(String),
}

/// The cache's part in one load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheReport {
    /// What the load did: read a cache, wrote one, could not write one, or used none.
    pub outcome: CacheOutcome,
    /// Cache files found and not used, and why (other weights, truncated, checksum).
    pub rejected: Vec<(PathBuf, String)>,
    /// Weights served from the cache.
    pub from_cache: usize,
    /// Weights quantized during this load.
    pub quantized: usize,
}

impl std::fmt::Display for CacheReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.outcome {
            CacheOutcome::Unused => write!(f, "no quantized cache"),
            CacheOutcome::Read(p) => write!(
                f,
                "{} quantized weights loaded from cache {}",
                self.from_cache,
                p.display()
            ),
            CacheOutcome::Written(p) => write!(
                f,
                "{} weights quantized, cache written to {}",
                self.quantized,
                p.display()
            ),
            CacheOutcome::NotWritten(why) => {
                write!(f, "{} weights quantized, not cached: {why}", self.quantized)
            }
        }
    }
}

/// What a cache must have been made from to be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Key {
    format: u32,
    quantizer: String,
    quant: String,
    vision_quant: String,
    /// `(canonical path, bytes, modification time in ns since the epoch)` per weights file.
    files: Vec<(String, u64, u64)>,
}

impl Key {
    fn of(reader: &SafetensorsReader, quant: Quant, vision_quant: Quant) -> io::Result<Self> {
        let files = reader
            .paths()
            .map(|p| {
                let meta = fs::metadata(p)?;
                let modified = meta.modified()?.duration_since(UNIX_EPOCH);
                let ns = modified.map_or(0, |d| d.as_nanos() as u64);
                Ok((fs::canonicalize(p)?.display().to_string(), meta.len(), ns))
            })
            .collect::<io::Result<_>>()?;
        Ok(Self {
            format: FORMAT,
            quantizer: QUANTIZER.into(),
            quant: quant.to_string(),
            vision_quant: vision_quant.to_string(),
            files,
        })
    }
}

/// One tensor in the file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    /// As the model asks for it: `X.weight.<quant>`.
    name: String,
    rows: usize,
    row_bytes: usize,
    offset: u64,
    crc32: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct Index {
    key: Key,
    tensors: Vec<Stored>,
}

/// `X.<quant>` → `(X, quant)` for the block formats.
fn split_name(name: &str) -> Option<(&str, Quant)> {
    let (base, suffix) = name.rsplit_once('.')?;
    [Quant::Q8_0, Quant::Q4K]
        .into_iter()
        .find(|q| q.to_string() == suffix)
        .map(|q| (base, q))
}

/// Reads and checks the cache at `path` against `key`: the blocks by name, or why not.
fn read_cache(path: &Path, key: &Key) -> Result<HashMap<String, Tensor>, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let at = |buf: &mut [u8], offset: u64| file.read_exact_at(buf, offset);
    let mut head = [0u8; 8];
    let mut tail = [0u8; 16];
    let framed = size >= 24
        && at(&mut head, 0).is_ok()
        && at(&mut tail, size - 16).is_ok()
        && head == *MAGIC
        && tail[8..] == *MAGIC;
    if !framed {
        return Err("truncated or not a cache file".into());
    }
    let index_len = u64::from_le_bytes(tail[..8].try_into().expect("8 bytes"));
    let index_start = (size - 16)
        .checked_sub(index_len)
        .filter(|&s| s >= 8)
        .ok_or("index length does not fit the file")?;
    let mut text = vec![0u8; index_len as usize];
    at(&mut text, index_start).map_err(|e| e.to_string())?;
    let index: Index =
        serde_json::from_slice(&text).map_err(|e| format!("unreadable index: {e}"))?;
    if index.key != *key {
        return Err("made from other weights files or settings".into());
    }
    index
        .tensors
        .par_iter()
        .map(|t| {
            let len = t.rows.checked_mul(t.row_bytes).filter(|&n| {
                t.offset >= 8
                    && t.offset
                        .checked_add(n as u64)
                        .is_some_and(|e| e <= index_start)
            });
            let len = len.ok_or_else(|| format!("`{}` lies outside the data", t.name))?;
            let mut bytes = super::heap::zeroed::<u8>(len);
            at(&mut bytes, t.offset).map_err(|e| format!("`{}`: {e}", t.name))?;
            if crc32fast::hash(&bytes) != t.crc32 {
                return Err(format!("`{}` fails its checksum", t.name));
            }
            let blocks = Tensor::from_vec(bytes, (t.rows, t.row_bytes), &Device::Cpu)
                .map_err(|e| e.to_string())?;
            Ok((t.name.clone(), blocks))
        })
        .collect()
}

/// A cache file being written.
struct Writer {
    file: File,
    partial: PathBuf,
    path: PathBuf,
    /// Bytes written so far.
    at: u64,
    tensors: Vec<Stored>,
    done: bool,
}

impl Writer {
    fn create(dir: &Path, name: &str) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        remove_dead_partials(dir, name);
        let partial = dir.join(format!("{name}.{}.partial", std::process::id()));
        let mut w = Self {
            file: File::create(&partial)?,
            partial,
            path: dir.join(name),
            at: 0,
            tensors: Vec::new(),
            done: false,
        };
        w.file.write_all(MAGIC)?; // on failure `w` is dropped and the partial removed
        w.at = MAGIC.len() as u64;
        Ok(w)
    }

    fn append(
        &mut self,
        name: &str,
        bytes: &[u8],
        rows: usize,
        row_bytes: usize,
    ) -> io::Result<()> {
        let pad = self.at.next_multiple_of(ALIGN) - self.at;
        self.file
            .write_all(&[0u8; ALIGN as usize][..pad as usize])?;
        self.file.write_all(bytes)?;
        self.tensors.push(Stored {
            name: name.to_owned(),
            rows,
            row_bytes,
            offset: self.at + pad,
            crc32: crc32fast::hash(bytes),
        });
        self.at += pad + bytes.len() as u64;
        Ok(())
    }

    /// Writes the index and footer and renames the file into place.
    fn finish(mut self, key: &Key) -> io::Result<PathBuf> {
        let index = serde_json::to_vec(&Index {
            key: key.clone(),
            tensors: std::mem::take(&mut self.tensors),
        })?;
        self.file.write_all(&index)?;
        self.file.write_all(&(index.len() as u64).to_le_bytes())?;
        self.file.write_all(MAGIC)?;
        fs::rename(&self.partial, &self.path)?;
        self.done = true;
        Ok(self.path.clone())
    }
}

impl Drop for Writer {
    /// A load that failed or was dropped leaves no partial file behind.
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.partial);
        }
    }
}

/// Removes `NAME.<pid>.partial` files in `dir` whose process is gone (killed while writing).
fn remove_dead_partials(dir: &Path, name: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let pid = file_name
            .to_str()
            .and_then(|n| {
                n.strip_prefix(name)?
                    .strip_prefix('.')?
                    .strip_suffix(".partial")
            })
            .and_then(|pid| pid.parse::<u32>().ok());
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Where this load gets its quantized weights.
enum Mode {
    /// From a checked cache; each entry is dropped once served.
    Read {
        path: PathBuf,
        blocks: HashMap<String, Tensor>,
        /// Weights it lacked.
        missing: usize,
    },
    /// Quantized here, and written to the first folder of `dirs` that takes a file.
    Write {
        writer: Option<Writer>,
        dirs: Vec<PathBuf>,
        /// Why nothing is written (every folder refused, or a write failed).
        failed: Option<String>,
    },
}

struct State {
    mode: Mode,
    /// Weights served from the cache, and quantized here.
    from_cache: usize,
    quantized: usize,
}

/// What the backend and the [`QuantCache`] share.
struct Shared {
    reader: SafetensorsReader,
    key: Key,
    file_name: String,
    state: Mutex<State>,
}

impl Shared {
    /// The state; a lock poisoned by a panic elsewhere still holds consistent counts.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The blocks of `base` (`X.weight`) in `quant` as a `U8` tensor `[rows, row bytes]`.
    fn blocks(
        &self,
        name: &str,
        base: &str,
        quant: Quant,
        shape: &[usize],
    ) -> candle_core::Result<Tensor> {
        let mut state = self.state();
        let State {
            mode,
            from_cache,
            quantized,
        } = &mut *state;
        if let Mode::Read {
            blocks, missing, ..
        } = mode
        {
            match blocks.remove(name) {
                Some(t) if t.dims() == shape => {
                    *from_cache += 1;
                    self.reader.count_as_read(base);
                    return Ok(t);
                }
                _ => *missing += 1,
            }
        }
        let &[rows, row_bytes] = shape else {
            candle_core::bail!("{name}: blocks are [rows, bytes per row], not {shape:?}");
        };
        let ggml = quant.ggml().expect("a block format");
        let in_dim = row_bytes / ggml.type_size() * ggml.block_size();
        // In bands of rows (each quantizes on its own), so that the f32 copy of a large weight
        // (3B's tied embedding table as `lm_head`: 1.2 GB) never sits whole beside the model.
        let band = (BAND_ELEMS / in_dim.max(1)).max(1);
        let mut bytes = Vec::with_capacity(rows * row_bytes);
        for start in (0..rows).step_by(band) {
            let end = (start + band).min(rows);
            let w = self.reader.read_rows(base, (rows, in_dim), start..end)?;
            bytes.extend(quantize_bytes(&w, quant)?);
        }
        *quantized += 1;
        if bytes.len() != rows * row_bytes {
            candle_core::bail!(
                "{name}: {} block bytes, {rows} x {row_bytes} asked",
                bytes.len()
            );
        }
        if let Mode::Write {
            writer,
            dirs,
            failed,
        } = mode
        {
            if writer.is_none() && failed.is_none() {
                *writer = self.create_writer(dirs, failed);
            }
            if let Some(w) = writer.as_mut() {
                if let Err(e) = w.append(name, &bytes, rows, row_bytes) {
                    let why = format!("writing {}: {e}", w.partial.display());
                    tracing::warn!("quantized cache not written: {why}");
                    *failed = Some(why);
                    *writer = None;
                }
            }
        }
        Tensor::from_vec(bytes, (rows, row_bytes), &Device::Cpu)
    }

    /// A writer in the first folder of `dirs` that takes one (the fallback silently), or `None`
    /// with one warning and the reason in `failed`.
    fn create_writer(&self, dirs: &[PathBuf], failed: &mut Option<String>) -> Option<Writer> {
        let mut refused = Vec::new();
        for dir in dirs {
            match Writer::create(dir, &self.file_name) {
                Ok(w) => {
                    tracing::info!("writing quantized cache {}", w.path.display());
                    if let Some(bar) = self.reader.progress() {
                        bar.set_message(format!("{} (quantizing, writing cache)", bar.message()));
                    }
                    return Some(w);
                }
                Err(e) => refused.push(format!("{}: {e}", dir.display())),
            }
        }
        let why = format!("no folder to write it to ({})", refused.join("; "));
        tracing::warn!("quantized weights are not cached: {why}");
        *failed = Some(why);
        None
    }
}

/// The `VarBuilder` backend: `X.weight.<quant>` through [`Shared::blocks`], every other name
/// (dense tensors, stacked reads) straight to the reader.
struct Backend(Arc<Shared>);

impl SimpleBackend for Backend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        match split_name(name) {
            Some((base, quant)) => self.0.blocks(name, base, quant, s.dims())?.to_device(dev),
            None => self.0.reader.get(s, name, h, dtype, dev),
        }
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        match split_name(name) {
            Some((base, quant)) => {
                let shape = self.0.reader.shape(base).unwrap_or(&[]);
                let dims = match shape {
                    &[rows, in_dim] => quant.row_bytes(in_dim).map(|r| vec![rows, r]),
                    _ => None,
                };
                let Some(dims) = dims else {
                    candle_core::bail!("{name}: no 2-D weight `{base}` whose rows fit {quant}");
                };
                self.0.blocks(name, base, quant, &dims)?.to_device(dev)
            }
            None => self.0.reader.get_unchecked(name, dtype, dev),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        let base = split_name(name).map_or(name, |(base, _)| base);
        self.0.reader.contains_tensor(base)
    }
}

/// The cache side of one load: [`attach`] it, build the model from the `VarBuilder`, then
/// [`finish`](Self::finish) (which writes the file).
pub struct QuantCache {
    shared: Option<Arc<Shared>>,
    rejected: Vec<(PathBuf, String)>,
}

/// The folders a cache for these weights may live in, in order of preference.
fn cache_dirs(reader: &SafetensorsReader, options: &CacheOptions) -> Vec<PathBuf> {
    let Some(dir) = reader.paths().next().and_then(Path::parent) else {
        return Vec::new();
    };
    let mut dirs = vec![dir.join(".pointact")];
    if let Some(fallback) = &options.fallback {
        let canonical = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let name = canonical
            .file_name()
            .map_or_else(|| "model".into(), |n| n.to_string_lossy().into_owned());
        let hash = crc32fast::hash(canonical.as_os_str().as_encoded_bytes());
        dirs.push(fallback.join(format!("{name}-{hash:08x}")));
    }
    dirs
}

/// A `VarBuilder` (f32) over `reader` that serves quantized weights from the cache or
/// quantizes and caches them (see the module doc), for a model built with `quant` in the decoder
/// and `vision_quant` in the vision tower. With both dense, or the cache off, it is the plain
/// reader's, on `device`. Quantized weights are CPU-only: on another device the cache is not
/// used and the model's quantized linears refuse to build (callers refuse that combination
/// first: [`super::DeviceSpec::check_quant`]).
pub fn attach(
    reader: SafetensorsReader,
    quant: Quant,
    vision_quant: Quant,
    options: &CacheOptions,
    device: &Device,
) -> (VarBuilder<'static>, QuantCache) {
    let unused = |reader: SafetensorsReader| {
        let cache = QuantCache {
            shared: None,
            rejected: Vec::new(),
        };
        (reader.into_var_builder(DType::F32, device), cache)
    };
    if !options.enabled || (quant == Quant::F32 && vision_quant == Quant::F32) || !device.is_cpu() {
        return unused(reader);
    }
    let key = match Key::of(&reader, quant, vision_quant) {
        Ok(key) => key,
        Err(e) => {
            tracing::warn!("quantized weights are not cached: cannot stat the weights files: {e}");
            return unused(reader);
        }
    };
    let file_name = format!("{quant}-vision-{vision_quant}.qcache");
    let dirs = cache_dirs(&reader, options);
    let mut rejected = Vec::new();
    let mut mode = None;
    for path in dirs.iter().map(|d| d.join(&file_name)) {
        if !path.exists() {
            continue;
        }
        match read_cache(&path, &key) {
            Ok(blocks) => {
                tracing::info!("loading quantized weights from cache {}", path.display());
                if let Some(bar) = reader.progress() {
                    bar.set_message(format!("{} (quantized weights from cache)", bar.message()));
                }
                mode = Some(Mode::Read {
                    path,
                    blocks,
                    missing: 0,
                });
                break;
            }
            Err(why) => rejected.push((path, why)),
        }
    }
    let mode = mode.unwrap_or_else(|| {
        for (path, why) in &rejected {
            tracing::warn!(
                "quantized cache {} not used ({why}): quantizing the weights again",
                path.display()
            );
        }
        Mode::Write {
            writer: None,
            dirs,
            failed: None,
        }
    });
    let shared = Arc::new(Shared {
        reader,
        key,
        file_name,
        state: Mutex::new(State {
            mode,
            from_cache: 0,
            quantized: 0,
        }),
    });
    let vb = VarBuilder::from_backend(Box::new(Backend(shared.clone())), DType::F32, Device::Cpu);
    let cache = QuantCache {
        shared: Some(shared),
        rejected,
    };
    (vb, cache)
}

impl QuantCache {
    /// Completes the cache file (when this load wrote one) and says what the load did. Call it
    /// once the model is built; dropping the `QuantCache` instead discards a partial file.
    pub fn finish(self) -> CacheReport {
        let mut report = CacheReport {
            outcome: CacheOutcome::Unused,
            rejected: self.rejected,
            from_cache: 0,
            quantized: 0,
        };
        let Some(shared) = self.shared else {
            return report;
        };
        let mut state = shared.state();
        report.from_cache = state.from_cache;
        report.quantized = state.quantized;
        report.outcome = match &mut state.mode {
            Mode::Read { path, missing, .. } => {
                if *missing > 0 {
                    tracing::warn!(
                        "quantized cache {} lacked {missing} of this model's weights (quantized \
                         now); it is removed and will be rewritten at the next load",
                        path.display()
                    );
                    let _ = fs::remove_file(&*path);
                }
                CacheOutcome::Read(path.clone())
            }
            Mode::Write { writer, failed, .. } => match (writer.take(), failed.take()) {
                (Some(w), _) => match w.finish(&shared.key) {
                    Ok(path) => {
                        tracing::info!("wrote quantized cache {}", path.display());
                        CacheOutcome::Written(path)
                    }
                    Err(e) => {
                        tracing::warn!("quantized cache not written: {e}");
                        CacheOutcome::NotWritten(e.to_string())
                    }
                },
                (None, Some(why)) => CacheOutcome::NotWritten(why),
                (None, None) => CacheOutcome::Unused,
            },
        };
        report
    }
}
