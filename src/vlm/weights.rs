//! Reading safetensors checkpoints (one file or shards) tensor by tensor, with progress.
//!
//! Why not candle's memory-mapped `VarBuilder`: a mapped bf16 checkpoint stays resident next to
//! the f32 (or quantized) copies the model keeps, so peak RSS would be the checkpoint *plus* the
//! model. Here each tensor is read with `pread` into a scratch buffer, converted to the requested
//! dtype and handed over; the page cache holds the file, the process holds only the model. The
//! reader plugs into candle as a `SimpleBackend`, so the model code stays ordinary `VarBuilder`
//! code, and every lookup failure names the tensor (and the expected and stored shapes).

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use indicatif::ProgressBar;
use serde::Deserialize;

/// Errors from opening a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    #[error("cannot read weights file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a safetensors file: {reason}")]
    Format { path: PathBuf, reason: String },
    #[error("tensor `{name}` is stored in both {first} and {second}")]
    Duplicate {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("no weights files given")]
    Empty,
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
    file: usize,
    dtype: DType,
    shape: Vec<usize>,
    /// Absolute byte offset in the file and length.
    offset: u64,
    len: usize,
}

/// The tensors of one or more safetensors files, read on demand.
#[derive(Debug)]
pub struct SafetensorsReader {
    files: Vec<(PathBuf, File)>,
    entries: HashMap<String, Entry>,
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
    /// Indexes the headers of `paths` (no tensor data is read yet).
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
                let want = info.shape.iter().product::<usize>() * dtype.size_in_bytes();
                if b < a || (b - a) as usize != want || data_start + b > size {
                    return Err(fmt(format!(
                        "tensor `{name}` ({:?} {}) has data offsets [{a}, {b}] that do not match its size or the file",
                        info.shape, info.dtype
                    )));
                }
                let entry = Entry {
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
        Ok(Self {
            files,
            entries,
            progress: None,
        })
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

    /// Tensor names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.entries.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// Stored shape of `name`.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// Reads `name` and converts it to `dtype` on `dev`.
    pub fn read(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let e = self.entries.get(name).ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "weight `{name}` is missing from {}",
                self.describe_files()
            ))
        })?;
        let (path, file) = &self.files[e.file];
        let mut buf = vec![0u8; e.len];
        file.read_exact_at(&mut buf, e.offset).map_err(|err| {
            candle_core::Error::Msg(format!(
                "reading weight `{name}` from {}: {err}",
                path.display()
            ))
        })?;
        let t = Tensor::from_raw_buffer(&buf, e.dtype, &e.shape, dev)?;
        drop(buf);
        if let Some(bar) = &self.progress {
            bar.inc(e.len as u64);
        }
        if t.dtype() == dtype {
            Ok(t)
        } else {
            t.to_dtype(dtype)
        }
    }

    fn describe_files(&self) -> String {
        match self.files.as_slice() {
            [(p, _)] => p.display().to_string(),
            files => format!(
                "the {} shards in {}",
                files.len(),
                files[0]
                    .0
                    .parent()
                    .map_or_else(|| ".".into(), |d| d.display().to_string())
            ),
        }
    }

    /// A `VarBuilder` over this reader that produces `dtype` tensors on `device`.
    pub fn into_var_builder(self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_backend(Box::new(self), dtype, device.clone())
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
        if let Some(stored) = self.shape(name) {
            if stored != s.dims() {
                return Err(candle_core::Error::Msg(format!(
                    "weight `{name}` has shape {stored:?} in {}, but the config needs {:?}",
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
        self.entries.contains_key(name)
    }
}
