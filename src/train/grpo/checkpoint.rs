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
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {reason}")]
    Bad { path: PathBuf, reason: String },
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
pub fn checkpoint_name(step: u64) -> String {
    format!("checkpoint-{step:06}")
}

/// Writes the trainer's checkpoint under `out` and points `out/latest` at it; keeps the newest
/// `keep` checkpoints (at least 1). Returns the checkpoint folder.
pub fn save(
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

    // The model: vision tensors as stored in the folder the model came from, decoder as now.
    let files = &trainer.parts.files;
    let reader = SafetensorsReader::open(&files.weights).map_err(|e| CheckpointError::Bad {
        path: files.dir.clone(),
        reason: e.to_string(),
    })?;
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    for n in reader.names() {
        if n.starts_with("visual.") {
            tensors.insert(n.to_string(), reader.read(n, DType::F32, &Device::Cpu)?);
        }
    }
    for (n, t) in trainer.parts.model.text.named_weights()? {
        tensors.insert(n, t.to_dtype(DType::F32)?.contiguous()?);
    }
    let model_path = partial.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &model_path)?;
    drop(tensors);

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
    let name = fs::read_to_string(&p).map_err(io(&p))?;
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
    let text = fs::read_to_string(&p).map_err(io(&p))?;
    let state: TrainerState = serde_json::from_str(&text).map_err(|e| CheckpointError::Bad {
        path: p.clone(),
        reason: e.to_string(),
    })?;
    let o = dir.join("optimizer.safetensors");
    let optim = candle_core::safetensors::load(&o, &Device::Cpu)?;
    Ok((state, optim))
}
