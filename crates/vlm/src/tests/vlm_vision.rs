//! The vision tower against transformers 4.51.3 on the tiny random Qwen2.5-VL of
//! `tests/fixtures/qwen25vl_tiny/` (golden tensors from `tests/fixtures/gen_qwen25vl_golden.py`).
//!
//! Tolerance: max |ours − golden| ≤ 1e-4 · max |golden| per tensor (f32 on both sides; the
//! weights are the bf16 values of the checkpoint, widened to f32).

use crate::{
    vision::{patch_positions, window_index},
    ImageProcessor, Qwen25VisionModel, VisionError,
};
use candle_core::{DType, Device, Tensor};

use super::vlm_fixture::*;

#[test]
fn window_index_matches_transformers() {
    let g = golden();
    let cfg = config();
    let w = window_index(cfg.vision.as_ref().expect("a vision config"), &[grid(&g)]).unwrap();
    let want: Vec<usize> = i64s(&g, "window_index")
        .into_iter()
        .map(|v| v as usize)
        .collect();
    assert_eq!(w.index, want);
    let raw: Vec<usize> = i64s(&g, "cu_window_seqlens_raw")
        .into_iter()
        .map(|v| v as usize)
        .collect();
    assert_eq!(w.cu_seqlens_raw, raw);
    let cu: Vec<usize> = i64s(&g, "cu_window_seqlens")
        .into_iter()
        .map(|v| v as usize)
        .collect();
    assert_eq!(w.cu_seqlens, cu);
    assert_eq!(
        w.cu_seqlens,
        [0, 64, 128, 192, 256, 320, 384, 400, 416, 432]
    );
    // The reference's worked example (grid 1×18×24).
    assert_eq!(
        &w.index[..20],
        &[0, 1, 2, 3, 12, 13, 14, 15, 24, 25, 26, 27, 36, 37, 38, 39, 4, 5, 6, 7]
    );
    assert_eq!(
        w.cu_seqlens_raw,
        [0, 64, 128, 192, 192, 256, 320, 384, 384, 400, 416, 432, 432]
    );
}

#[test]
fn window_index_handles_several_images_and_frames() {
    let cfg = config();
    // Two frames of 4×4 patches (2×2 merged: one window, padded) and a 2×2-patch image.
    let w = window_index(
        cfg.vision.as_ref().expect("a vision config"),
        &[[2, 4, 4], [1, 2, 2]],
    )
    .unwrap();
    assert_eq!(w.index, (0..9).collect::<Vec<_>>());
    assert_eq!(w.cu_seqlens, [0, 16, 32, 36]);
    let pos = patch_positions(cfg.vision.as_ref().expect("a vision config"), &[[1, 2, 4]]).unwrap();
    assert_eq!(
        pos,
        [
            (0, 0),
            (0, 1),
            (1, 0),
            (1, 1),
            (0, 2),
            (0, 3),
            (1, 2),
            (1, 3)
        ]
    );
    assert!(matches!(
        window_index(cfg.vision.as_ref().expect("a vision config"), &[[1, 3, 4]]),
        Err(VisionError::Grid { .. })
    ));
    assert!(matches!(
        window_index(cfg.vision.as_ref().expect("a vision config"), &[]),
        Err(VisionError::NoImages)
    ));
}

#[test]
fn vision_tower_matches_transformers_on_golden_pixel_values() {
    let g = golden();
    let cfg = config();
    let m = model(&cfg);
    let grid = grid(&g);
    let pv = golden_pixel_values(&g);
    let tr = m.forward_traced(&pv, &[grid]).unwrap();
    assert_close("patch_embed", &tr.patch_embed, &g["patch_embed"]);
    assert_close("rot_pos_emb", &tr.rot_pos_emb, &g["rot_pos_emb"]);
    assert_eq!(tr.blocks.len(), 4);
    for (i, b) in tr.blocks.iter().enumerate() {
        let name = format!("vision_block_{i}");
        assert_close(&name, b, &g[&name]);
    }
    assert_close("vision_embeds", &tr.embeds, &g["vision_embeds"]);
    assert_eq!(tr.embeds.dims(), [108, 64]);
    // `forward` is the same computation without the trace.
    let plain = m.forward(&pv, &[grid]).unwrap();
    assert_close("vision_embeds (forward)", &plain, &g["vision_embeds"]);
}

/// The whole path: image.png → our ImageProcessor → our vision tower.
#[test]
fn vision_tower_matches_transformers_from_image_png() {
    let g = golden();
    let cfg = config();
    let m = model(&cfg);
    let processor =
        ImageProcessor::from_preprocessor_config(fixture("preprocessor_config.json")).unwrap();
    let img = image::open(fixture("image.png")).expect("image.png");
    let out = processor.preprocess(&img).unwrap();
    let grid = out.grid_thw.map(|v| v as usize);
    assert_eq!(grid, [1, 18, 24]);
    let pv = Tensor::from_vec(
        out.pixel_values.clone(),
        (out.num_patches(), out.patch_dim),
        &Device::Cpu,
    )
    .unwrap();
    let embeds = m.forward(&pv, &[grid]).unwrap();
    assert_eq!(embeds.dims()[0], out.num_image_tokens());
    assert_close("vision_embeds (image.png)", &embeds, &g["vision_embeds"]);
}

#[test]
fn vision_tower_rejects_bad_inputs() {
    let cfg = config();
    let m = model(&cfg);
    let pv = Tensor::zeros((16, 1176), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(
        m.forward(&pv, &[[1, 4, 2]]),
        Err(VisionError::PixelValues { patches: 8, .. })
    ));
    let pv = Tensor::zeros((16, 1000), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(
        m.forward(&pv, &[[1, 4, 4]]),
        Err(VisionError::PixelValues { .. })
    ));
    let pv = Tensor::zeros((16, 1176), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(m.forward(&pv, &[[1, 4, 4]]).unwrap().dims(), [4, 64]);
}

/// The default f32 rotary frequencies differ from the golden run's bf16-rounded ones only
/// there: the same computation then agrees to ~2e-4 relative (measured 1.7e-4), not ~1e-6.
#[test]
fn f32_rotary_frequencies_differ_from_the_golden_run_only_slightly() {
    let g = golden();
    let cfg = config();
    let exact = f32_model(&cfg);
    assert_eq!(exact.rotary_inv_freq()[0], 1.0);
    assert_eq!(exact.rotary_inv_freq()[1], 1.0 / 10_000f32.powf(0.25));
    let rounded = model(&cfg);
    assert_eq!(rounded.rotary_inv_freq()[1], 0.100_097_656); // bf16(0.1) = 0.10009765625
    let pv = golden_pixel_values(&g);
    let grid = grid(&g);
    let ours = exact.forward(&pv, &[grid]).unwrap();
    let want = &g["vision_embeds"];
    let err = (ours - want)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let scale = want
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    println!(
        "vision_embeds with f32 inv_freq: relative {:.3e}",
        err / scale
    );
    assert!(err / scale < 1e-3, "{}", err / scale);
}

/// Q8_0 vision linears: the tiny tower's 32-wide inputs fit Q8_0's 32-blocks (its 48-wide MLP
/// `down_proj` does not and stays dense); the image features move a little, not a lot.
#[test]
fn quantized_vision_tower_stays_close() {
    use crate::Quant;
    let g = golden();
    let cfg = config();
    let q = Qwen25VisionModel::new_quantized(
        cfg.vision.as_ref().expect("a vision config"),
        Quant::Q8_0,
        weights().pp("visual"),
    )
    .unwrap()
    .with_bf16_rotary_freqs()
    .unwrap();
    let ours = q.forward(&golden_pixel_values(&g), &[grid(&g)]).unwrap();
    let (err, scale) = max_errors("q8_0 vision_embeds", &ours, &g["vision_embeds"]);
    println!("q8_0 vision_embeds: relative {:.3e}", err / scale);
    assert!(err / scale > 1e-6, "q8_0 must actually quantize");
    assert!(err / scale < 0.05, "q8_0 vision drifted: {}", err / scale);
}
