//! Checkpoints: a Hugging Face model folder that `pointact point --model DIR` loads, plus what
//! resuming needs (the optimiser's moments, the step, the data position).
//!
//! Layout of `OUT/checkpoint-000040/`: `model.safetensors` (every tensor, f32, classic
//! transformers names: the vision tower as loaded, the decoder as trained), the base model's
//! `config.json`, tokenizer and processor files, `optimizer.safetensors` (AdamW's `exp_avg` /
//! `exp_avg_sq` per trained weight) and `trainer_state.json`. `OUT/latest` names the newest.
//!
//! Why the dance with `.partial` folders: a run can die at any moment (Ctrl-C, the machine, a
//! full disk). A checkpoint is written whole into `OUT/.checkpoint-000040.partial/`, then renamed
//! into place, then `latest` is replaced by a rename; so `latest` always names a complete
//! checkpoint and an interrupted save leaves only a `.partial` folder, removed by the next save.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde::{Deserialize, Serialize};

use super::trainer::GrpoTrainer;
use crate::vlm::SafetensorsReader;

/// What a resumed run continues from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainerState {
    /// Updates taken.
    pub step: u64,
    /// The run's seed (rollouts of step `s` use `seed + s`).
    pub seed: u64,
    /// The model the run started from (the KL reference).
    pub base_model: PathBuf,
    /// Training questions consumed (the data order is a seeded shuffle per epoch).
    pub samples_seen: u64,
    /// The command line's settings, for the record.
    pub settings: serde_json::Value,
}

/// Errors of saving or loading a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file or folder could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A checkpoint file that is malformed (JSON, safetensors header, a tensor of the wrong
    /// shape), or a `latest` pointer that names no complete checkpoint.
    #[error("{path}: {reason}")]
    Bad {
        /// The file (or folder) concerned.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A tensor operation or safetensors read/write failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The folder name of step `step`'s checkpoint.
pub(crate) fn checkpoint_name(step: u64) -> String {
    format!("checkpoint-{step:06}")
}

/// Writes the trainer's checkpoint under `out` and points `out/latest` at it; keeps the newest
/// `keep` checkpoints (at least 1). Returns the checkpoint folder.
pub(crate) fn save(
    trainer: &GrpoTrainer,
    out: &Path,
    state: &TrainerState,
    keep: usize,
) -> Result<PathBuf, CheckpointError> {
    fs::create_dir_all(out).map_err(io(out))?;
    let name = checkpoint_name(state.step);
    let partial = out.join(format!(".{name}.partial"));
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(io(&partial))?;
    }
    fs::create_dir_all(&partial).map_err(io(&partial))?;

    // The model: vision tensors as stored in the folder the model came from, decoder as now,
    // written one tensor at a time (see `write_streamed`).
    let files = &trainer.parts.files;
    let reader = SafetensorsReader::open(&files.weights).map_err(|e| CheckpointError::Bad {
        path: files.dir.clone(),
        reason: e.to_string(),
    })?;
    let decoder = trainer.parts.model.text.checkpoint_tensors()?;
    let mut entries: Vec<(String, Vec<usize>)> = Vec::new();
    for n in reader.names() {
        if n.starts_with("visual.") {
            let shape = reader.shape(n).unwrap_or_default().to_vec();
            entries.push((n.to_string(), shape));
        }
    }
    let vision = entries.len();
    entries.extend(decoder.iter().map(|(n, t)| (n.clone(), t.dims().to_vec())));
    let model_path = partial.join("model.safetensors");
    write_streamed(&model_path, &entries, |i| {
        if i < vision {
            reader.read(&entries[i].0, DType::F32, &Device::Cpu)
        } else {
            decoder[i - vision].1.get()
        }
    })?;
    drop(decoder);

    let side = [
        Some(files.config.clone()),
        Some(files.tokenizer.clone()),
        files.tokenizer_config.clone(),
        files.chat_template.clone(),
        files.preprocessor_config.clone(),
        files.generation_config.clone(),
    ];
    for src in side.into_iter().flatten() {
        let dst = partial.join(src.file_name().unwrap_or_default());
        fs::copy(&src, &dst).map_err(io(&src))?;
    }
    let special = files.dir.join("special_tokens_map.json");
    if special.is_file() {
        fs::copy(&special, partial.join("special_tokens_map.json")).map_err(io(&special))?;
    }

    // LoRA: the adapters too, as PEFT writes them (a resumed run continues from them; the
    // merged model above is what `point --model` loads).
    if let Some((rank, alpha, targets)) = trainer.parts.model.text.lora_config() {
        let adapters: HashMap<String, Tensor> = trainer
            .parts
            .model
            .text
            .lora_weights()
            .into_iter()
            .map(|(n, t)| Ok((n, t.contiguous()?)))
            .collect::<candle_core::Result<_>>()?;
        candle_core::safetensors::save(&adapters, partial.join("adapter_model.safetensors"))?;
        let config = serde_json::json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "r": rank,
            "lora_alpha": alpha,
            "lora_dropout": 0.0,
            "bias": "none",
            "target_modules": targets,
            "base_model_name_or_path": state.base_model,
        });
        let p = partial.join("adapter_config.json");
        fs::write(
            &p,
            serde_json::to_string_pretty(&config).unwrap_or_default(),
        )
        .map_err(io(&p))?;
    }

    let optim: HashMap<String, Tensor> = trainer.optimizer().state().into_iter().collect();
    candle_core::safetensors::save(&optim, partial.join("optimizer.safetensors"))?;
    let state_path = partial.join("trainer_state.json");
    let json = serde_json::to_string_pretty(state).map_err(|e| CheckpointError::Bad {
        path: state_path.clone(),
        reason: e.to_string(),
    })?;
    fs::write(&state_path, json).map_err(io(&state_path))?;

    let dir = out.join(&name);
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(io(&dir))?;
    }
    fs::rename(&partial, &dir).map_err(io(&dir))?;
    let latest_tmp = out.join(".latest.partial");
    fs::write(&latest_tmp, format!("{name}\n")).map_err(io(&latest_tmp))?;
    fs::rename(&latest_tmp, out.join("latest")).map_err(io(out))?;
    prune(out, keep.max(1))?;
    Ok(dir)
}

/// Writes f32 tensors as a safetensors file, one at a time: `entries` are the names and
/// shapes (in the order written), `data(i)` makes tensor `i` when its turn comes (written as
/// f32 straight from its storage when it is a contiguous f32 CPU tensor, as the model's are:
/// no copy of the 1.2 GB embedding table).
///
/// Why not candle's `safetensors::save`: it takes every tensor at once, so a LoRA run had to
/// hold every merged weight next to the model (11 GB more for the 3B); and its `View` cannot
/// report a failed read. The format is safetensors' own: the header length (u64 LE), the JSON
/// header (`dtype`, `shape`, `data_offsets` per tensor, padded with spaces to 8 bytes), the data.
fn write_streamed(
    path: &Path,
    entries: &[(String, Vec<usize>)],
    mut data: impl FnMut(usize) -> candle_core::Result<Tensor>,
) -> Result<(), CheckpointError> {
    use std::io::Write;
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({ "format": "pt" }));
    let mut offset = 0usize;
    for (name, shape) in entries {
        let bytes = 4 * shape.iter().product::<usize>();
        header.insert(
            name.clone(),
            serde_json::json!({
                "dtype": "F32",
                "shape": shape,
                "data_offsets": [offset, offset + bytes],
            }),
        );
        offset += bytes;
    }
    let mut json = serde_json::to_string(&header).map_err(|e| CheckpointError::Bad {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    while json.len() % 8 != 0 {
        json.push(' ');
    }
    let file = fs::File::create(path).map_err(io(path))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    w.write_all(&(json.len() as u64).to_le_bytes())
        .and_then(|_| w.write_all(json.as_bytes()))
        .map_err(io(path))?;
    let mut bytes = Vec::new();
    for (i, (name, shape)) in entries.iter().enumerate() {
        let t = data(i)?.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
        if t.dims() != shape.as_slice() {
            return Err(CheckpointError::Bad {
                path: path.to_path_buf(),
                reason: format!("{name}: shape {:?}, {shape:?} expected", t.dims()),
            });
        }
        let t = t.contiguous()?;
        let (storage, layout) = t.storage_and_layout();
        let candle_core::Storage::Cpu(cpu) = &*storage else {
            unreachable!("moved to the CPU above");
        };
        let start = layout.start_offset();
        let values = &cpu.as_slice::<f32>()?[start..start + t.elem_count()];
        for chunk in values.chunks(1 << 16) {
            bytes.clear();
            bytes.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
            w.write_all(&bytes).map_err(io(path))?;
        }
    }
    w.flush().map_err(io(path))?;
    Ok(())
}

/// Removes all but the newest `keep` checkpoints and any leftover `.partial` folder.
fn prune(out: &Path, keep: usize) -> Result<(), CheckpointError> {
    let mut found: Vec<(u64, PathBuf)> = Vec::new();
    for entry in fs::read_dir(out).map_err(io(out))? {
        let entry = entry.map_err(io(out))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".partial") && entry.path().is_dir() {
            fs::remove_dir_all(entry.path()).map_err(io(&entry.path()))?;
        } else if let Some(step) = name
            .strip_prefix("checkpoint-")
            .and_then(|s| s.parse::<u64>().ok())
        {
            found.push((step, entry.path()));
        }
    }
    found.sort();
    let drop = found.len().saturating_sub(keep);
    for (_, p) in found.into_iter().take(drop) {
        fs::remove_dir_all(&p).map_err(io(&p))?;
    }
    Ok(())
}

/// The checkpoint `out/latest` names, if any.
pub fn latest(out: &Path) -> Result<Option<PathBuf>, CheckpointError> {
    let p = out.join("latest");
    if !p.is_file() {
        return Ok(None);
    }
    let name = pointact_core::input::read_text(&p, pointact_core::input::MAX_CONFIG_BYTES)
        .map_err(io(&p))?;
    let dir = out.join(name.trim());
    if !dir.join("trainer_state.json").is_file() {
        return Err(CheckpointError::Bad {
            path: p,
            reason: format!(
                "names {}, which is not a complete checkpoint",
                dir.display()
            ),
        });
    }
    Ok(Some(dir))
}

/// A checkpoint's trainer state and optimiser moments.
pub fn load_state(dir: &Path) -> Result<(TrainerState, HashMap<String, Tensor>), CheckpointError> {
    let p = dir.join("trainer_state.json");
    let text = pointact_core::input::read_text(&p, pointact_core::input::MAX_CONFIG_BYTES)
        .map_err(io(&p))?;
    let state: TrainerState = serde_json::from_str(&text).map_err(|e| CheckpointError::Bad {
        path: p.clone(),
        reason: e.to_string(),
    })?;
    let o = dir.join("optimizer.safetensors");
    let optim = candle_core::safetensors::load(&o, &Device::Cpu)?;
    Ok((state, optim))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file written tensor by tensor reads back equal through candle's safetensors loader (an
    /// independent reader); a tensor that cannot be made, or has the wrong size, is an error.
    #[test]
    fn streamed_safetensors_read_back_equal() {
        let dir = std::env::temp_dir().join(format!("pointact-streamed-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.safetensors");
        let entries = vec![
            ("b.weight".to_string(), vec![2, 3]),
            ("a.bias".to_string(), vec![5]),
            ("empty".to_string(), vec![0, 4]),
            ("big".to_string(), vec![70_001]),
        ];
        let values = |i: usize, n: usize| -> Vec<f32> {
            (0..n).map(|j| (i * 1000 + j) as f32 * 0.5 - 7.25).collect()
        };
        let tensor = |i: usize| {
            let shape = &entries[i].1;
            Tensor::from_vec(
                values(i, shape.iter().product()),
                shape.as_slice(),
                &Device::Cpu,
            )
        };
        // A view with an offset (the fused projections' parts are such narrows) writes its
        // own values.
        let wide: Vec<f32> = [-1.0; 4].into_iter().chain(values(1, 5)).collect();
        let wide = Tensor::from_vec(wide, 9, &Device::Cpu).unwrap();
        write_streamed(&path, &entries, |i| match i {
            1 => wide.narrow(0, 4, 5),
            _ => tensor(i),
        })
        .unwrap();
        let back = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
        assert_eq!(back.len(), entries.len());
        for (i, (name, shape)) in entries.iter().enumerate() {
            let t = &back[name];
            assert_eq!(t.dims(), shape.as_slice(), "{name}");
            assert_eq!(t.dtype(), DType::F32);
            let got: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(got, values(i, shape.iter().product()), "{name}");
        }

        let failing = write_streamed(&path, &entries, |i| {
            if i == 2 {
                candle_core::bail!("no such tensor")
            }
            tensor(i)
        });
        assert!(failing.unwrap_err().to_string().contains("no such tensor"));
        let short = write_streamed(&path, &entries, |_| {
            Tensor::zeros(3, DType::F32, &Device::Cpu)
        });
        assert!(short
            .unwrap_err()
            .to_string()
            .contains("shape [3], [2, 3] expected"));
        fs::remove_dir_all(&dir).ok();
    }
}
