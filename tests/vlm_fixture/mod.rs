//! Shared access to the tiny Qwen2.5-VL fixture (`tests/fixtures/qwen25vl_tiny/`) for the vlm
//! tests: paths, golden tensors, the model as the golden run had it, and the tolerance check.
//!
//! Tolerance: max |ours − golden| ≤ 1e-4 · max |golden| per tensor (f32 on both sides; the
//! weights are the bf16 values of the checkpoint, widened to f32).
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use pointact_vlm::{Qwen25VisionModel, Qwen25VlConfig};

pub const REL_TOL: f32 = 1e-4;

/// A file of the fixture. The workspace's root package and its crates include this module, so the
/// folder is found above whichever package compiles it.
pub fn fixture(name: &str) -> PathBuf {
    fixture_in("qwen25vl_tiny", name)
}

/// A file of the fixture folder `tests/fixtures/<folder>` (e.g. the tiny text model's).
pub fn fixture_in(folder: &str, name: &str) -> PathBuf {
    let rel = Path::new("tests/fixtures").join(folder);
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join(&rel))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| panic!("{} above the package", rel.display()))
        .join(name)
}

pub fn golden() -> HashMap<String, Tensor> {
    golden_in("qwen25vl_tiny")
}

/// The golden tensors of the fixture folder `tests/fixtures/<folder>`.
pub fn golden_in(folder: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixture_in(folder, "golden.safetensors"), &Device::Cpu)
        .expect("golden.safetensors")
}

pub fn config() -> Qwen25VlConfig {
    Qwen25VlConfig::from_file(fixture("config.json")).expect("fixture config.json")
}

/// The tower as the golden run had it: the generator cast the model to bf16 (to save it) and back
/// to f32, which rounded the rotary `inv_freq` buffer to bf16 (see
/// [`Qwen25VisionModel::with_bf16_rotary_freqs`]).
pub fn model(cfg: &Qwen25VlConfig) -> Qwen25VisionModel {
    f32_model(cfg).with_bf16_rotary_freqs().unwrap()
}

/// The tower with exact f32 rotary frequencies (the default).
pub fn f32_model(cfg: &Qwen25VlConfig) -> Qwen25VisionModel {
    Qwen25VisionModel::new(
        cfg.vision.as_ref().expect("a vision config"),
        weights().pp("visual"),
    )
    .expect("vision tower")
}

pub fn i64s(g: &HashMap<String, Tensor>, name: &str) -> Vec<i64> {
    g[name].flatten_all().unwrap().to_vec1::<i64>().unwrap()
}

pub fn grid(g: &HashMap<String, Tensor>) -> [usize; 3] {
    let v = i64s(g, "image_grid_thw");
    [v[0] as usize, v[1] as usize, v[2] as usize]
}

/// HF's `pixel_values` `[N, 1176]` from the fixture's level encoding:
/// `pv[i, c·392 + t·196 + k] = lut[c, levels[i, c·196 + k]]` for both frames t.
pub fn golden_pixel_values(g: &HashMap<String, Tensor>) -> Tensor {
    let lut = g["pixel_values_lut"].to_vec2::<f32>().unwrap();
    let levels = g["pixel_values_levels"].to_vec2::<u8>().unwrap();
    let mut pv = Vec::with_capacity(levels.len() * 1176);
    for row in &levels {
        assert_eq!(row.len(), 588);
        for (c, lut_c) in lut.iter().enumerate() {
            for _t in 0..2 {
                pv.extend(
                    row[c * 196..(c + 1) * 196]
                        .iter()
                        .map(|&l| lut_c[usize::from(l)]),
                );
            }
        }
    }
    Tensor::from_vec(pv, (levels.len(), 1176), &Device::Cpu).unwrap()
}

/// `(max |ours − want|, max |want|)` over all elements (shapes must agree).
pub fn max_errors(name: &str, ours: &Tensor, want: &Tensor) -> (f32, f32) {
    assert_eq!(ours.dims(), want.dims(), "{name} shape");
    let ours = ours.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let want = want.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    let err = ours
        .iter()
        .zip(&want)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    (err, scale)
}

/// The largest |value| of a tensor.
pub fn max_abs(t: &Tensor) -> f32 {
    t.abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar()
        .unwrap()
}

/// Asserts the relative bound [`REL_TOL`] and returns the relative error.
pub fn assert_close(name: &str, ours: &Tensor, want: &Tensor) -> f32 {
    let (err, scale) = max_errors(name, ours, want);
    let rel = err / scale;
    println!("{name}: max|diff| {err:.3e}, max|golden| {scale:.3e}, relative {rel:.3e}");
    assert!(
        rel <= REL_TOL,
        "{name}: relative error {rel:e} > {REL_TOL:e}"
    );
    rel
}

/// The fixture's weights as F32 (memory-mapped).
pub fn weights() -> VarBuilder<'static> {
    // SAFETY: the fixture file is not modified while the tests run.
    unsafe {
        VarBuilder::from_mmaped_safetensors(
            &[fixture("model.safetensors")],
            DType::F32,
            &Device::Cpu,
        )
    }
    .expect("model.safetensors")
}
