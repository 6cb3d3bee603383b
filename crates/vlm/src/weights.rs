//! Reading safetensors checkpoints (one file or shards) tensor by tensor, with progress.
//!
//! Why not candle's memory-mapped `VarBuilder`: a mapped bf16 checkpoint stays resident next to
//! the f32 (or quantized) copies the model keeps, so peak RSS would be the checkpoint *plus* the
//! model. Here each tensor is read with `pread` and converted to the requested dtype; the page
//! cache holds the file, the process holds only the model. The reader plugs into candle as a
//! `SimpleBackend`, so the model code stays ordinary `VarBuilder` code, and every lookup failure
//! names the tensor (and the expected and stored shapes).
//!
//! Speed: a bf16 or f32 tensor of 4 MiB or more asked for as f32 (every large weight of an f32
//! load) is widened in pieces of `PIECE` elements on rayon's threads straight from a read-only
//! map of the file into the one f32 result (the map lives for that one tensor); smaller ones
//! (norms, biases) are read with `pread`, because a fault in a map reads megabytes around it
//! (`MAPPED_BYTES`). The first path (a fresh buffer, a copy into a candle tensor, then candle's
//! single-threaded `to_dtype` into a third) touched each weight's memory three times on one
//! thread; fresh memory costs a page fault per 4 KiB, which dominated.
//! For the same reason a *stacked* name, `P.a:ra+b:rb.weight` (what `FusedProj` asks for: q|k|v,
//! gate|up), reads `P.a.weight` `[ra, c]` and `P.b.weight` `[rb, c]` straight into their rows of
//! one `[ra + rb, c]` tensor, instead of two tensors and a concatenated copy.
//!
//! Checkpoints of Qwen2.5-VL name their tensors in one of three layouts ([`NameScheme`]):
//! transformers < 4.52 (`model.layers.*`, `model.embed_tokens.*`, `model.norm.*`, `visual.*`,
//! `lm_head.*`), transformers ≥ 4.52 (`model.language_model.*`, `model.visual.*`, `lm_head.*`)
//! and mlx-vlm conversions (`language_model.model.*`, `language_model.lm_head.*`,
//! `vision_tower.*`, the patch-embedding Conv3d stored channels-last). [`SafetensorsReader::open`]
//! detects the layout from the names present and serves every tensor under the first layout's
//! names (the canonical ones the model code asks for); a file with none of these prefixes, or
//! with names of two layouts, is refused with an error that lists the expected prefixes.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use indicatif::ProgressBar;
use rayon::prelude::*;
use serde::Deserialize;

/// Errors from opening a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// A weights file could not be opened or read.
    #[error("cannot read weights file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    #[error("{path} is not a safetensors file: {reason}")]
    /// A file is not valid safetensors: short, a bad header length, a header that is not JSON,
    /// an unsupported dtype or data offsets outside the file.
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Two files of a sharded checkpoint both hold a tensor of the same name.
    #[error("tensor `{name}` is stored in both {first} and {second}")]
    Duplicate {
        /// The tensor's name.
        name: String,
        /// The first file that holds it.
        first: PathBuf,
        /// The second file that holds it.
        second: PathBuf,
    },
    /// No weights file was given to open.
    #[error("no weights files given")]
    Empty,
    /// No tensor name has a prefix of any known layout.
    #[error(
        "no Qwen2.5-VL weight names in {files} (found e.g. {found}); expected the prefixes of one \
         of these layouts: {}",
        NameScheme::expected()
    )]
    UnknownNames {
        /// The checkpoint file or files, as one string for the message.
        files: String,
        /// Up to three of the names found, or `no tensors at all`.
        found: String,
    },
    /// Names of two layouts in one checkpoint.
    #[error(
        "weight names of two layouts in {files}: `{first}` ({first_scheme}) and `{second}` \
         ({second_scheme}); a checkpoint must use one of: {}",
        NameScheme::expected()
    )]
    MixedNames {
        /// The checkpoint file or files, as one string for the message.
        files: String,
        /// A name of the first layout seen.
        first: String,
        /// The layout of `first`.
        first_scheme: NameScheme,
        /// A name of another layout.
        second: String,
        /// The layout of `second`.
        second_scheme: NameScheme,
    },
    /// An mlx-vlm checkpoint quantized by MLX (packed `weight`, `scales`, `biases`).
    #[error(
        "MLX-quantized weights in {files} (`{name}`), which this loader cannot read; use an \
         unquantized (bf16/f16/f32) checkpoint and `--quant` to quantize at load"
    )]
    MlxQuantized {
        /// The checkpoint file or files, as one string for the message.
        files: String,
        /// The first `*.scales` tensor found.
        name: String,
    },
}

/// How a checkpoint names its tensors. The model code asks for the
/// [`Transformers`](Self::Transformers) names; the reader maps the others to them at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameScheme {
    /// transformers < 4.52 (e.g. 4.51.3, the fixture's and the 3B checkpoint's):
    /// `model.{layers,embed_tokens,norm}.*`, `visual.*`, `lm_head.*`. The canonical names.
    Transformers,
    /// transformers ≥ 4.52: `model.language_model.*`, `model.visual.*`, `lm_head.*`.
    TransformersNested,
    /// mlx-vlm conversions: `language_model.model.*`, `language_model.lm_head.*`,
    /// `vision_tower.*`; `patch_embed.proj.weight` is `[out, t, h, w, in]` (MLX's channels-last
    /// convolution) instead of `[out, in, t, h, w]`.
    Mlx,
}

impl std::fmt::Display for NameScheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameScheme::Transformers => "transformers < 4.52 layout",
            NameScheme::TransformersNested => "transformers >= 4.52 layout",
            NameScheme::Mlx => "mlx-vlm layout",
        })
    }
}

impl NameScheme {
    /// Every layout, in the order the error messages list them.
    pub const ALL: [NameScheme; 3] = [
        NameScheme::Transformers,
        NameScheme::TransformersNested,
        NameScheme::Mlx,
    ];

    /// `(stored prefix, canonical prefix)` pairs of this layout.
    pub(crate) fn prefixes(self) -> &'static [(&'static str, &'static str)] {
        match self {
            NameScheme::Transformers => &[
                ("model.", "model."),
                ("visual.", "visual."),
                ("lm_head.", "lm_head."),
            ],
            NameScheme::TransformersNested => &[
                ("model.language_model.", "model."),
                ("model.visual.", "visual."),
                ("lm_head.", "lm_head."),
            ],
            NameScheme::Mlx => &[
                ("language_model.model.", "model."),
                ("language_model.lm_head.", "lm_head."),
                ("vision_tower.", "visual."),
            ],
        }
    }

    /// The layout a stored name belongs to; `lm_head.*` is shared by both transformers layouts
    /// and gives `None`, as does a name of no layout.
    fn of(name: &str) -> Option<NameScheme> {
        if name.starts_with("model.language_model.") || name.starts_with("model.visual.") {
            Some(NameScheme::TransformersNested)
        } else if name.starts_with("language_model.") || name.starts_with("vision_tower.") {
            Some(NameScheme::Mlx)
        } else if name.starts_with("model.") || name.starts_with("visual.") {
            Some(NameScheme::Transformers)
        } else {
            None
        }
    }

    /// The canonical name of a name stored in this layout (`None`: not one of its prefixes).
    pub fn to_canonical(self, stored: &str) -> Option<String> {
        self.prefixes()
            .iter()
            .find_map(|(from, to)| stored.strip_prefix(from).map(|rest| format!("{to}{rest}")))
    }

    /// The name this layout stores a canonical name under.
    pub fn to_stored(self, canonical: &str) -> Option<String> {
        self.prefixes().iter().find_map(|(from, to)| {
            canonical
                .strip_prefix(to)
                .map(|rest| format!("{from}{rest}"))
        })
    }

    /// All layouts and their prefixes, for error messages.
    pub(crate) fn expected() -> String {
        NameScheme::ALL
            .iter()
            .map(|s| {
                let p: Vec<String> = s
                    .prefixes()
                    .iter()
                    .map(|(p, _)| format!("`{p}*`"))
                    .collect();
                format!("{} ({})", s, p.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The layout of a whole checkpoint from its stored names.
    fn detect<'a>(
        names: impl IntoIterator<Item = &'a str>,
        files: impl Fn() -> String,
    ) -> Result<NameScheme, WeightsError> {
        let mut names: Vec<&str> = names.into_iter().collect();
        names.sort_unstable();
        let mut seen: Vec<(NameScheme, &str)> = Vec::new();
        let mut bare_head = None;
        for &name in &names {
            match NameScheme::of(name) {
                Some(s) if !seen.iter().any(|(t, _)| *t == s) => seen.push((s, name)),
                Some(_) => {}
                None if name.starts_with("lm_head.") => bare_head = bare_head.or(Some(name)),
                None => {}
            }
        }
        // A bare `lm_head.*` belongs to either transformers layout, not to MLX's.
        if let (Some(head), [(NameScheme::Mlx, _)]) = (bare_head, seen.as_slice()) {
            seen.push((NameScheme::Transformers, head));
        }
        match seen.as_slice() {
            [(s, _)] => Ok(*s),
            [] if bare_head.is_some() => Ok(NameScheme::Transformers),
            [] => Err(WeightsError::UnknownNames {
                files: files(),
                found: if names.is_empty() {
                    "no tensors at all".to_owned()
                } else {
                    names
                        .iter()
                        .take(3)
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            }),
            [(a, an), (b, bn), ..] => Err(WeightsError::MixedNames {
                files: files(),
                first: (*an).to_owned(),
                first_scheme: *a,
                second: (*bn).to_owned(),
                second_scheme: *b,
            }),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct RawInfo {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

/// Where one tensor lives.
#[derive(Debug, Clone)]
struct Entry {
    /// Its name in the file.
    stored: String,
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    /// Absolute byte offset in the file and length.
    offset: u64,
    len: usize,
}

/// The tensors of one or more safetensors files, read on demand, under their canonical names
/// (see [`NameScheme`]).
#[derive(Debug)]
pub struct SafetensorsReader {
    files: Vec<(PathBuf, File)>,
    /// By canonical name.
    entries: HashMap<String, Entry>,
    scheme: NameScheme,
    progress: Option<ProgressBar>,
}

fn parse_dtype(s: &str) -> Option<DType> {
    Some(match s {
        "BF16" => DType::BF16,
        "F16" => DType::F16,
        "F32" => DType::F32,
        "F64" => DType::F64,
        "I64" => DType::I64,
        "I32" => DType::I32,
        "U32" => DType::U32,
        "U8" => DType::U8,
        _ => return None,
    })
}

impl SafetensorsReader {
    /// Indexes the headers of `paths` (no tensor data is read yet), detects the naming layout and
    /// maps every name to its canonical form.
    pub fn open(paths: &[PathBuf]) -> Result<Self, WeightsError> {
        if paths.is_empty() {
            return Err(WeightsError::Empty);
        }
        let mut files = Vec::with_capacity(paths.len());
        let mut entries: HashMap<String, Entry> = HashMap::new();
        for (i, path) in paths.iter().enumerate() {
            let io = |source| WeightsError::Io {
                path: path.clone(),
                source,
            };
            let fmt = |reason: String| WeightsError::Format {
                path: path.clone(),
                reason,
            };
            let mut file = File::open(path).map_err(io)?;
            let size = file.metadata().map_err(io)?.len();
            let mut n = [0u8; 8];
            file.read_exact(&mut n)
                .map_err(|_| fmt("shorter than its 8-byte header length".into()))?;
            let header_len = u64::from_le_bytes(n);
            if header_len > 100_000_000 || 8 + header_len > size {
                return Err(fmt(format!(
                    "header length {header_len} does not fit the file"
                )));
            }
            let mut header = vec![0u8; header_len as usize];
            file.read_exact(&mut header).map_err(io)?;
            let map: HashMap<String, serde_json::Value> = serde_json::from_slice(&header)
                .map_err(|e| fmt(format!("header is not JSON: {e}")))?;
            let data_start = 8 + header_len;
            for (name, value) in map {
                if name == "__metadata__" {
                    continue;
                }
                let info: RawInfo = serde_json::from_value(value)
                    .map_err(|e| fmt(format!("tensor `{name}`: {e}")))?;
                let dtype = parse_dtype(&info.dtype).ok_or_else(|| {
                    fmt(format!(
                        "tensor `{name}` has unsupported dtype {}",
                        info.dtype
                    ))
                })?;
                let [a, b] = info.data_offsets;
                // Checked arithmetic: a shape whose byte count wraps (2^63 + 16 elements of BF16
                // "is" 32 bytes) or an offset near u64::MAX must be refused, not wrapped into range.
                let want = info
                    .shape
                    .iter()
                    .try_fold(dtype.size_in_bytes(), |n, &d| n.checked_mul(d));
                let fits = want.is_some_and(|w| {
                    b >= a
                        && u64::try_from(w) == Ok(b - a)
                        && data_start.checked_add(b).is_some_and(|end| end <= size)
                });
                let Some(want) = want.filter(|_| fits) else {
                    return Err(fmt(format!(
                        "tensor `{name}` ({:?} {}) has data offsets [{a}, {b}] that do not match its size or the file",
                        info.shape, info.dtype
                    )));
                };
                let entry = Entry {
                    stored: name.clone(),
                    file: i,
                    dtype,
                    shape: info.shape,
                    offset: data_start + a,
                    len: want,
                };
                if let Some(prev) = entries.insert(name.clone(), entry) {
                    return Err(WeightsError::Duplicate {
                        name,
                        first: paths[prev.file].clone(),
                        second: path.clone(),
                    });
                }
            }
            files.push((path.clone(), file));
        }
        let describe = || describe_paths(paths);
        let scheme = NameScheme::detect(entries.keys().map(String::as_str), describe)?;
        if scheme == NameScheme::Mlx {
            if let Some(name) = entries.keys().filter(|n| n.ends_with(".scales")).min() {
                return Err(WeightsError::MlxQuantized {
                    files: describe(),
                    name: name.clone(),
                });
            }
        }
        let entries = if scheme == NameScheme::Transformers {
            entries
        } else {
            let mut canonical = HashMap::with_capacity(entries.len());
            for (name, entry) in entries {
                // Names of no layout (none of its prefixes) are kept as they are; they cannot
                // collide with a canonical name, whose prefixes would have made them mixed.
                let to = scheme.to_canonical(&name).unwrap_or(name);
                if let Some(prev) = canonical.insert(to.clone(), entry) {
                    let entry = &canonical[&to];
                    return Err(WeightsError::Duplicate {
                        name: format!("{to} (as `{}` and `{}`)", prev.stored, entry.stored),
                        first: paths[prev.file].clone(),
                        second: paths[entry.file].clone(),
                    });
                }
            }
            canonical
        };
        Ok(Self {
            files,
            entries,
            scheme,
            progress: None,
        })
    }

    /// The naming layout the files use.
    pub fn scheme(&self) -> NameScheme {
        self.scheme
    }

    /// The name a canonical tensor name is stored under in the files.
    pub fn stored_name(&self, name: &str) -> Option<&str> {
        self.entries.get(name).map(|e| e.stored.as_str())
    }

    /// Advances `bar` by the bytes of every tensor read (set its length to [`Self::total_bytes`]).
    pub fn with_progress(mut self, bar: ProgressBar) -> Self {
        self.progress = Some(bar);
        self
    }

    /// Bytes of tensor data in all files.
    pub fn total_bytes(&self) -> u64 {
        self.entries.values().map(|e| e.len as u64).sum()
    }

    /// Canonical tensor names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// Stored shape of the canonical `name`.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// Reads the canonical `name` and converts it to `dtype` on `dev`.
    pub fn read(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.read_entry(self.entry(name)?, dtype, dev)
    }

    /// Rows `rows` of the canonical `name`, which must be `[_, cols]` (a wrong shape is the
    /// `VarBuilder`'s error), as f32 on the CPU: what the quantized cache quantizes in bands, so
    /// that no whole f32 copy of a large weight sits next to the model's.
    pub(crate) fn read_rows(
        &self,
        name: &str,
        shape: (usize, usize),
        rows: std::ops::Range<usize>,
    ) -> candle_core::Result<Tensor> {
        let e = self.entry(name)?;
        let (n, cols) = shape;
        if e.shape != [n, cols] {
            return self.get(
                Shape::from(shape),
                name,
                Default::default(),
                DType::F32,
                &Device::Cpu,
            );
        }
        if rows.start > rows.end || rows.end > n {
            candle_core::bail!("rows {rows:?} of `{name}` [{n}, {cols}]");
        }
        let row_bytes = cols * e.dtype.size_in_bytes();
        let band = Entry {
            shape: vec![rows.len(), cols],
            offset: e.offset + (rows.start * row_bytes) as u64,
            len: rows.len() * row_bytes,
            ..e.clone()
        };
        self.read_entry(&band, DType::F32, &Device::Cpu)
    }

    /// The stacked `parts` (names and rows) as one `shape` `[Σ rows, cols]` tensor: each part
    /// must be `[rows, cols]` (else the error of a plain `get` of it). bf16 or f32 parts read as
    /// f32, and bf16 parts read as bf16, go straight into one buffer; others are read apart
    /// and concatenated.
    fn read_stacked(
        &self,
        parts: &[(String, usize)],
        shape: &Shape,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let &[total, cols] = shape.dims() else {
            candle_core::bail!("stacked weights are 2-D, not {shape:?}");
        };
        let mut entries = Vec::with_capacity(parts.len());
        for (name, rows) in parts {
            let e = self.entry(name)?;
            if e.shape != [*rows, cols] {
                return self.get(
                    Shape::from((*rows, cols)),
                    name,
                    Default::default(),
                    dtype,
                    dev,
                );
            }
            entries.push(e);
        }
        if parts.iter().map(|(_, rows)| rows).sum::<usize>() != total {
            candle_core::bail!("stacked weights {parts:?} do not add up to {total} rows");
        }
        if dtype == DType::BF16 && entries.iter().all(|e| e.dtype == DType::BF16) {
            // Each part's stored values straight into its rows of the one bf16 tensor, copied
            // in parallel from a map as a lone bf16 tensor is (`read_bf16_into`).
            let mut out = super::heap::zeroed::<half::bf16>(total * cols);
            self.read_parts_into(&entries, &mut out, read_bf16_into)?;
            return Tensor::from_vec(out, (total, cols), dev);
        }
        let direct = dtype == DType::F32
            && entries
                .iter()
                .all(|e| matches!(e.dtype, DType::BF16 | DType::F32));
        if !direct {
            let ts = entries
                .iter()
                .map(|e| self.read_entry(e, dtype, dev))
                .collect::<candle_core::Result<Vec<_>>>()?;
            return Tensor::cat(&ts, 0);
        }
        let mut out = super::heap::zeroed::<f32>(total * cols);
        self.read_parts_into(&entries, &mut out, read_f32_into)?;
        Tensor::from_vec(out, (total, cols), dev)
    }

    /// Each of `entries` into its rows of `out`, in order, by `read` (one of the mapped
    /// readers), the progress bar advanced by each.
    fn read_parts_into<T>(
        &self,
        entries: &[&Entry],
        out: &mut [T],
        read: impl Fn(&File, &Entry, &mut [T]) -> std::io::Result<()>,
    ) -> candle_core::Result<()> {
        let mut rest = out;
        for e in entries {
            let (dst, tail) = rest.split_at_mut(e.len / e.dtype.size_in_bytes());
            let (path, file) = &self.files[e.file];
            read(file, e, dst).map_err(|err| {
                candle_core::Error::Msg(format!(
                    "reading weight `{}` from {}: {err}",
                    e.stored,
                    path.display()
                ))
            })?;
            if let Some(bar) = &self.progress {
                bar.inc(e.len as u64);
            }
            rest = tail;
        }
        Ok(())
    }

    /// Whether `name` is stored bf16: a plain name's tensor, or every part of a stacked one.
    fn stored_bf16(&self, name: &str) -> candle_core::Result<bool> {
        if let Some(parts) = stacked_parts(name).filter(|_| !self.entries.contains_key(name)) {
            for (part, _) in &parts {
                if self.entry(part)?.dtype != DType::BF16 {
                    return Ok(false);
                }
            }
            return Ok(true);
        }
        Ok(self.entry(name)?.dtype == DType::BF16)
    }

    fn entry(&self, name: &str) -> candle_core::Result<&Entry> {
        self.entries.get(name).ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "weight {} is missing from {}",
                self.describe_name(name),
                self.describe_files()
            ))
        })
    }

    fn read_entry(&self, e: &Entry, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let (path, file) = &self.files[e.file];
        let failed = |err: std::io::Error| {
            candle_core::Error::Msg(format!(
                "reading weight `{}` from {}: {err}",
                e.stored,
                path.display()
            ))
        };
        let widens = dtype == DType::F32 && matches!(e.dtype, DType::BF16 | DType::F32);
        let t = if widens && e.len >= MAPPED_BYTES {
            // Zeroed pages come from the kernel untouched: each is faulted in by the thread that
            // fills it.
            let mut out = super::heap::zeroed::<f32>(e.len / e.dtype.size_in_bytes());
            read_f32_into(file, e, &mut out).map_err(failed)?;
            Tensor::from_vec(out, e.shape.as_slice(), dev)?
        } else if dtype == DType::BF16 && e.dtype == DType::BF16 && e.len >= MAPPED_BYTES {
            let mut out = super::heap::zeroed::<half::bf16>(e.len / 2);
            read_bf16_into(file, e, &mut out).map_err(failed)?;
            Tensor::from_vec(out, e.shape.as_slice(), dev)?
        } else if dtype == DType::BF16 && e.dtype == DType::BF16 && cfg!(target_endian = "little") {
            // Straight into the tensor's own values: no byte buffer beside them.
            let mut out = super::heap::zeroed::<half::bf16>(e.len / 2);
            // SAFETY: bf16 is a plain 2-byte value (`repr(transparent)` over u16) and any bytes
            // are one; the file stores it little-endian, as this CPU does.
            let bytes = unsafe {
                std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), out.len() * 2)
            };
            file.read_exact_at(bytes, e.offset).map_err(failed)?;
            Tensor::from_vec(out, e.shape.as_slice(), dev)?
        } else {
            let mut buf = vec![0u8; e.len];
            file.read_exact_at(&mut buf, e.offset).map_err(failed)?;
            if widens {
                let mut out = super::heap::zeroed::<f32>(e.len / e.dtype.size_in_bytes());
                widen(e.dtype, &buf, &mut out);
                Tensor::from_vec(out, e.shape.as_slice(), dev)?
            } else {
                Tensor::from_raw_buffer(&buf, e.dtype, &e.shape, dev)?.to_dtype(dtype)?
            }
        };
        if let Some(bar) = &self.progress {
            bar.inc(e.len as u64);
        }
        Ok(t)
    }

    /// Advances the progress bar by the stored bytes of `name`, read here or served from
    /// elsewhere (the quantized cache).
    pub(crate) fn count_as_read(&self, name: &str) {
        if let (Some(bar), Some(e)) = (&self.progress, self.entries.get(name)) {
            bar.inc(e.len as u64);
        }
    }

    /// The progress bar given to [`Self::with_progress`].
    pub(crate) fn progress(&self) -> Option<&ProgressBar> {
        self.progress.as_ref()
    }

    /// The weights files, in the order given to [`Self::open`].
    pub(crate) fn paths(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|(p, _)| p.as_path())
    }

    /// `` `name` ``, followed by the name it has in the files when the layout is not the
    /// canonical one.
    fn describe_name(&self, name: &str) -> String {
        match (self.scheme, self.scheme.to_stored(name)) {
            (NameScheme::Transformers, _) | (_, None) => format!("`{name}`"),
            (scheme, Some(stored)) => format!("`{name}` (stored as `{stored}`, {scheme})"),
        }
    }

    fn describe_files(&self) -> String {
        let paths: Vec<PathBuf> = self.files.iter().map(|(p, _)| p.clone()).collect();
        describe_paths(&paths)
    }

    /// A `VarBuilder` over this reader that produces `dtype` tensors on `device`.
    pub fn into_var_builder(self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_backend(Box::new(self), dtype, device.clone())
    }
}

/// Suffix of a name asking for a tensor in the dtype the checkpoint stores it in where that is
/// bf16 (else in the dtype asked for): `model.embed_tokens.weight.as_stored`. Why: a quantized
/// decoder only gathers rows of its embedding table (its `lm_head` is blocks of its own), so
/// widening the whole table to f32 spent 0.62 GB of the 3B's memory on nothing; a gathered bf16
/// row widens exactly. The same for a dense weight where our kernels take bf16
/// (`linear::keeps_bf16`), a stacked name included (bf16 where every part is): they widen in
/// registers. Backends without this name (candle's) answer `contains_tensor` with false, and
/// the caller asks for the plain name.
pub(crate) const AS_STORED: &str = ".as_stored";

/// Elements per piece of a tensor that one rayon task widens (4 MiB of f32: enough to spread a
/// layer over the threads).
const PIECE: usize = 1 << 20;

/// Tensors from this size up are widened from a map of the file ([`read_f32_into`]); smaller
/// ones (norms, biases) are read with `pread`. Why: a page fault in a map reads the file
/// around it ("read-around", `read_ahead_kb`: 8 MiB on this project's VMs), so each 4 KiB norm
/// read through a map pulled megabytes from disk: a q4k load from a cold page cache read
/// ~0.3 GB from each text shard whose linears it never touched (`fincore`).
const MAPPED_BYTES: usize = 4 << 20;

/// The bf16 or f32 tensor `e` as f32 into `out` (its size), widened piece by piece on rayon's
/// threads straight from a read-only map of the file's bytes. bf16 widens exactly (its bits are
/// the top half of an f32), as `to_dtype`.
///
/// Why a map, not `pread` into a buffer: the read copied every stored byte from the page cache
/// once more before widening it; `perf` of an f32 load of the 3B (`bench vlm --quant f32`, 2
/// AVX-512 cores) had that copy (`_copy_to_iter`) at 21 % of the load's samples, next to 50 %
/// for the kernel zeroing the fresh f32 pages, which no reader avoids. Same runs, warm page
/// cache: load 13.7 / 9.5 s → 8.5 / 7.8 s, system time 29 / 21 s → 19 / 17 s.
fn read_f32_into(file: &File, e: &Entry, out: &mut [f32]) -> std::io::Result<()> {
    read_mapped(file, e, out, |src, dst| widen(e.dtype, src, dst))
}

/// The bf16 tensor `e` as stored into `out` (its size), copied piece by piece on rayon's
/// threads from a read-only map of the file, as [`read_f32_into`] widens: a `pread` of a
/// 2048 × 11008 bf16 weight was one thread copying from the page cache, and the f32 model's
/// bf16 load took 17.6 s where widening the same bytes in parallel took 6.8 s.
fn read_bf16_into(file: &File, e: &Entry, out: &mut [half::bf16]) -> std::io::Result<()> {
    read_mapped(file, e, out, |src, dst| {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = half::bf16::from_bits(u16::from_le_bytes([s[0], s[1]]));
        }
    })
}

/// The stored values of `e` into `out` (its size), `fill` turning each piece's bytes into its
/// values on rayon's threads, from a read-only map of the file (see [`read_f32_into`]).
fn read_mapped<T: Send>(
    file: &File,
    e: &Entry,
    out: &mut [T],
    fill: impl Fn(&[u8], &mut [T]) + Sync,
) -> std::io::Result<()> {
    let size = e.dtype.size_in_bytes();
    // The whole file, not just the tensor: a map's offset must be a multiple of the page size,
    // which is 4 KiB on x86 but 16 or 64 KiB on some ARM kernels.
    // SAFETY: the map is read-only and lives only for this call. What a map cannot rule out is
    // another process truncating the checkpoint during the load (SIGBUS), a risk every
    // memory-mapped safetensors reader, candle's included, takes.
    let map = unsafe { memmap2::Mmap::map(file)? };
    // Checked when the header was read; checked again, the file may have changed since.
    let bytes = usize::try_from(e.offset)
        .ok()
        .and_then(|at| map.get(at..at.checked_add(out.len() * size)?))
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file is shorter than its header says",
            )
        })?;
    // Hints only, for this tensor's bytes alone: ask for all of them now (from a cold page
    // cache the disk then works on the whole tensor while the threads widen its first
    // pieces), and read ahead past a fault. Failure changes nothing but speed.
    let at = e.offset as usize;
    let _ = map.advise_range(memmap2::Advice::WillNeed, at, bytes.len());
    let _ = map.advise_range(memmap2::Advice::Sequential, at, bytes.len());
    out.par_chunks_mut(PIECE).enumerate().for_each(|(i, dst)| {
        fill(&bytes[i * PIECE * size..][..dst.len() * size], dst);
    });
    Ok(())
}

/// Stored little-endian bf16 or f32 values `src` as f32 into `dst`.
fn widen(dtype: DType, src: &[u8], dst: &mut [f32]) {
    if dtype == DType::BF16 {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(2)) {
            *d = f32::from_bits(u32::from(u16::from_le_bytes([s[0], s[1]])) << 16);
        }
    } else {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        }
    }
}

/// The parts of a stacked name `P.a:ra+b:rb.LEAF`: `[("P.a.LEAF", ra), ("P.b.LEAF", rb)]`.
fn stacked_parts(name: &str) -> Option<Vec<(String, usize)>> {
    let (head, leaf) = name.rsplit_once('.')?;
    let (prefix, spec) = head.rsplit_once('.')?;
    if !spec.contains('+') {
        return None;
    }
    spec.split('+')
        .map(|part| {
            let (part, rows) = part.split_once(':')?;
            Some((format!("{prefix}.{part}.{leaf}"), rows.parse().ok()?))
        })
        .collect()
}

/// One file's path, or "the N shards in DIR".
fn describe_paths(paths: &[PathBuf]) -> String {
    match paths {
        [p] => p.display().to_string(),
        files => format!(
            "the {} shards in {}",
            files.len(),
            files[0]
                .parent()
                .map_or_else(|| ".".into(), |d| d.display().to_string())
        ),
    }
}

/// `[out, in, t, h, w]` → MLX's channels-last `[out, t, h, w, in]`.
fn channels_last(dims: &[usize]) -> Option<Vec<usize>> {
    match dims {
        &[o, i, t, h, w] => Some(vec![o, t, h, w, i]),
        _ => None,
    }
}

impl SimpleBackend for SafetensorsReader {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let (name, dtype) = match name.strip_suffix(AS_STORED) {
            Some(base) if self.stored_bf16(base)? => (base, DType::BF16),
            Some(base) => (base, dtype),
            None => (name, dtype),
        };
        if let Some(parts) = stacked_parts(name).filter(|_| !self.entries.contains_key(name)) {
            return self.read_stacked(&parts, &s, dtype, dev);
        }
        if let Some(stored) = self.shape(name) {
            if stored != s.dims() {
                // mlx-vlm stores the patch embedding's Conv3d channels-last.
                if self.scheme == NameScheme::Mlx
                    && name.ends_with("patch_embed.proj.weight")
                    && channels_last(s.dims()).as_deref() == Some(stored)
                {
                    return self
                        .read(name, dtype, dev)?
                        .permute((0, 4, 1, 2, 3))?
                        .contiguous();
                }
                return Err(candle_core::Error::Msg(format!(
                    "weight {} has shape {stored:?} in {}, but the config needs {:?}",
                    self.describe_name(name),
                    self.describe_files(),
                    s.dims()
                )));
            }
        }
        self.read(name, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.read(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        let name = name.strip_suffix(AS_STORED).unwrap_or(name);
        self.entries.contains_key(name)
            || stacked_parts(name)
                .is_some_and(|parts| parts.iter().all(|(p, _)| self.entries.contains_key(p)))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// The bits of a bf16 tensor's values.
    fn u16s(t: &Tensor) -> Vec<u16> {
        let v: Vec<half::bf16> = t.flatten_all().unwrap().to_vec1().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    }

    /// Tensors of several pieces (and a partial last one), bf16 and f32, read as f32 equal
    /// candle's own load and `to_dtype` bit for bit; so do small ones, read without the map;
    /// bf16 ones read as bf16 are the stored bits.
    #[test]
    fn piecewise_f32_reads_equal_candle() {
        let cols = 2 * PIECE / 3 + 5; // three rows: two whole pieces and a partial one
        let n = 3 * cols;
        let values: Vec<f32> = (0..n)
            .map(|i| ((i as f32) * 0.618).sin() * (1.0 + (i % 97) as f32))
            .collect();
        let t = Tensor::from_vec(values, (3, cols), &Device::Cpu).unwrap();
        let small = t.narrow(1, 0, 7).unwrap().contiguous().unwrap();
        let tensors: HashMap<String, Tensor> = [
            ("model.a".to_owned(), t.to_dtype(DType::BF16).unwrap()),
            ("model.b".to_owned(), t.clone()),
            ("model.c".to_owned(), small.to_dtype(DType::BF16).unwrap()),
            ("model.d".to_owned(), small),
        ]
        .into();
        assert!(2 * n >= MAPPED_BYTES, "model.a is read through the map");
        let path = std::env::temp_dir().join(format!("pointact-pieces-{}.st", std::process::id()));
        candle_core::safetensors::save(&tensors, &path).unwrap();
        let reader = SafetensorsReader::open(std::slice::from_ref(&path)).unwrap();
        let bits = |t: &Tensor| -> Vec<u32> {
            let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
            v.iter().map(|x| x.to_bits()).collect()
        };
        for name in ["model.a", "model.b", "model.c", "model.d"] {
            let ours = reader.read(name, DType::F32, &Device::Cpu).unwrap();
            let want = tensors[name].to_dtype(DType::F32).unwrap();
            assert_eq!(ours.dims(), want.dims());
            assert!(bits(&ours) == bits(&want), "{name}");
        }
        // bf16 read as stored: copied in pieces from the map (model.a) or read (model.c).
        for name in ["model.a", "model.c"] {
            let ours = reader.read(name, DType::BF16, &Device::Cpu).unwrap();
            assert_eq!(ours.dims(), tensors[name].dims());
            assert!(u16s(&ours) == u16s(&tensors[name]), "{name} as bf16");
        }
        std::fs::remove_file(&path).unwrap();
    }
    /// A stacked name asked for as stored (`P.a:2+b:3.weight.as_stored`) is one bf16 tensor
    /// holding each part's rows where every part is bf16, and f32 where any part is f32; a
    /// plain name as stored is its stored dtype for bf16, the asked one otherwise.
    #[test]
    fn stacked_names_as_stored_keep_bf16_parts() {
        let part = |rows: usize, seed: f32| {
            let v: Vec<f32> = (0..rows * 5).map(|i| (i as f32 * seed).sin()).collect();
            Tensor::from_vec(v, (rows, 5), &Device::Cpu).unwrap()
        };
        let (a, b, c) = (part(2, 0.3), part(3, 0.7), part(3, 1.1));
        let tensors: HashMap<String, Tensor> = [
            (
                "model.p.a.weight".to_owned(),
                a.to_dtype(DType::BF16).unwrap(),
            ),
            (
                "model.p.b.weight".to_owned(),
                b.to_dtype(DType::BF16).unwrap(),
            ),
            ("model.p.c.weight".to_owned(), c.clone()),
        ]
        .into();
        let path = std::env::temp_dir().join(format!("pointact-stacked-{}.st", std::process::id()));
        candle_core::safetensors::save(&tensors, &path).unwrap();
        let vb = SafetensorsReader::open(std::slice::from_ref(&path))
            .unwrap()
            .into_var_builder(DType::F32, &Device::Cpu);
        let p = vb.pp("model.p");
        let name = format!("a:2+b:3.weight{AS_STORED}");
        assert!(p.contains_tensor(&name));
        let got = p.get((5, 5), &name).unwrap();
        assert_eq!(got.dtype(), DType::BF16);
        let want = Tensor::cat(
            &[&tensors["model.p.a.weight"], &tensors["model.p.b.weight"]],
            0,
        )
        .unwrap();
        assert_eq!(u16s(&got), u16s(&want));
        let mixed = p
            .get((5, 5), &format!("a:2+c:3.weight{AS_STORED}"))
            .unwrap();
        assert_eq!(mixed.dtype(), DType::F32);
        let want = Tensor::cat(
            &[
                a.to_dtype(DType::BF16)
                    .unwrap()
                    .to_dtype(DType::F32)
                    .unwrap(),
                c,
            ],
            0,
        )
        .unwrap();
        let f32s = |t: &Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
        assert_eq!(f32s(&mixed), f32s(&want));
        let plain = p
            .pp("b")
            .get((3, 5), &format!("weight{AS_STORED}"))
            .unwrap();
        assert_eq!(plain.dtype(), DType::BF16);
        let plain = p
            .pp("c")
            .get((3, 5), &format!("weight{AS_STORED}"))
            .unwrap();
        assert_eq!(plain.dtype(), DType::F32);
        std::fs::remove_file(&path).unwrap();
    }
}
