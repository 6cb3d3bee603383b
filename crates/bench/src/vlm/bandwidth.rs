//! The memory-bandwidth limit of decode: each new token reads every weight of the text decoder
//! once (a matrix–vector product per linear, then `lm_head`), so no implementation can decode
//! faster than `bandwidth / bytes of weights per token` once the weights are far larger than the
//! caches. The goal printed by `bench vlm` is a share of that ceiling.
//!
//! Bandwidth is measured here, with plain `std` threads at the run's thread count: a read-only
//! pass (wrapping sum of `u32` words, several accumulators so it vectorises) and STREAM's triad
//! `a = b + 3c` (counted as 3 arrays moved, STREAM's convention). Best of a few repetitions of
//! each; the ceiling uses the larger of the two, so that "% of the limit" is never flattered.
//! Arrays of 256 MiB are far beyond any last-level cache on the machines this runs on.

use std::time::Instant;

use serde::Serialize;

use candle_core::quantized::GgmlDType;

use super::gguf::plan;
use pointact_vlm::{Quant, TextConfig};

/// Elements per array (256 MiB of 4-byte words).
const WORDS: usize = 64 << 20;
/// Timed repetitions; the best counts (the first pass also pays page faults: it is not timed).
pub(crate) const REPEATS: usize = 5;

/// What was measured, GB/s (10⁹ bytes per second).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Bandwidth {
    pub threads: usize,
    pub read_gb_s: f64,
    pub triad_gb_s: f64,
}

impl Bandwidth {
    /// The bandwidth the ceiling is computed with (the larger figure).
    pub(crate) fn limit_gb_s(&self) -> f64 {
        self.read_gb_s.max(self.triad_gb_s)
    }

    /// Decode tokens/s if every token only had to read `bytes_per_token` at [`Self::limit_gb_s`].
    pub(crate) fn ceiling_tok_s(&self, bytes_per_token: u64) -> f64 {
        self.limit_gb_s() * 1e9 / bytes_per_token as f64
    }
}

/// Wrapping sum of the bit patterns with 16 independent lanes: an integer sum vectorises (the
/// compiler keeps the lanes in vector registers), a float sum would be latency-bound.
fn sum_bits(xs: &[f32]) -> u32 {
    let mut acc = [0u32; 16];
    let chunks = xs.chunks_exact(16);
    let rest = chunks
        .remainder()
        .iter()
        .fold(0u32, |a, x| a.wrapping_add(x.to_bits()));
    for c in chunks {
        for (a, x) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(x.to_bits());
        }
    }
    acc.iter().fold(rest, |a, &w| a.wrapping_add(w))
}

/// Best-of-[`REPEATS`] seconds of `pass`, after one untimed pass.
fn best(mut pass: impl FnMut()) -> f64 {
    pass();
    (0..REPEATS)
        .map(|_| {
            let t0 = Instant::now();
            pass();
            t0.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Measures read and triad bandwidth with `threads` threads, each on its own contiguous part
/// of the arrays (about a second; 768 MiB held meanwhile).
pub(crate) fn measure(threads: usize) -> Bandwidth {
    let threads = threads.max(1);
    let per = WORDS.div_ceil(threads);
    let b: Vec<f32> = (0..WORDS).map(|i| (i % 1024) as f32).collect();
    let c: Vec<f32> = vec![0.5; WORDS];
    let mut a: Vec<f32> = vec![0.0; WORDS];

    let read_s = best(|| {
        let sums: Vec<u32> = std::thread::scope(|s| {
            let parts: Vec<_> = b
                .chunks(per)
                .map(|p| s.spawn(move || sum_bits(p)))
                .collect();
            parts.into_iter().map(|h| h.join().unwrap_or(0)).collect()
        });
        std::hint::black_box(sums);
    });
    let triad_s = best(|| {
        std::thread::scope(|s| {
            for ((x, y), z) in a.chunks_mut(per).zip(b.chunks(per)).zip(c.chunks(per)) {
                s.spawn(move || {
                    for ((x, &y), &z) in x.iter_mut().zip(y).zip(z) {
                        *x = y + 3.0 * z;
                    }
                });
            }
        });
        std::hint::black_box(&a);
    });
    let bytes = (WORDS * 4) as f64;
    Bandwidth {
        threads,
        read_gb_s: bytes / read_s / 1e9,
        triad_gb_s: 3.0 * bytes / triad_s / 1e9,
    }
}

/// Bytes of weights one decode step reads in `quant`: every tensor of the decoder in the type
/// our loader (and the GGUF) gives it, except the embedding table, of which one row is read —
/// unless the table is also the (dense, tied) `lm_head`, which reads all of it. `dense_bf16`:
/// the dense 2-D weights are held bf16, as our loader keeps a bf16 checkpoint's where our
/// kernels take them (`vlm::linear::keeps_bf16`); the GGUF's dense tensors are f32.
pub fn bytes_per_token(cfg: &TextConfig, quant: Quant, dense_bf16: bool) -> u64 {
    let tensors = plan(cfg, quant);
    let has_output = tensors.iter().any(|t| t.name == "output.weight");
    tensors
        .iter()
        .map(|t| {
            let bytes = match (t.dtype, t.shape.as_slice()) {
                (GgmlDType::F32, &[rows, cols]) if dense_bf16 => (rows * cols * 2) as u64,
                _ => t.bytes(),
            };
            match t.name.as_str() {
                "token_embd.weight" if has_output => bytes / cfg.vocab_size as u64,
                _ => bytes,
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_sum_like_a_plain_fold() {
        let xs: Vec<f32> = (0..1001).map(|i| i as f32 * 1.37 - 400.0).collect();
        let plain = xs.iter().fold(0u32, |a, x| a.wrapping_add(x.to_bits()));
        assert_eq!(sum_bits(&xs), plain);
    }

    #[test]
    fn the_3b_q4k_decoder_reads_about_1_8_gb_per_token() {
        let json = super::super::checkpoint::config_json(None).to_string();
        let cfg = pointact_vlm::Qwen25VlConfig::from_json_str(&json).unwrap();
        let q4k = bytes_per_token(&cfg.text, Quant::Q4K, false) as f64 / 1e9;
        // 36 layers of Q4K (4.5 bits/weight) + a Q4K lm_head of 151 936 × 2048.
        assert!((1.7..1.85).contains(&q4k), "{q4k} GB");
        let f32 = bytes_per_token(&cfg.text, Quant::F32, false) as f64;
        // 3.09 B text parameters (tied head counted once) at 4 bytes.
        assert!((f32 / 4.0 / 1e9 - 3.086).abs() < 0.01, "{}", f32 / 4e9);
        // The same weights held bf16: half the bytes but the norms' (f32 either way).
        let bf16 = bytes_per_token(&cfg.text, Quant::F32, true) as f64;
        let norms = (2 * cfg.text.num_hidden_layers + 1) * cfg.text.hidden_size;
        let biases = cfg.text.num_hidden_layers
            * (cfg.text.num_attention_heads + 2 * cfg.text.num_key_value_heads)
            * cfg.text.head_dim;
        assert_eq!(
            bf16,
            (f32 - 4.0 * (norms + biases) as f64) / 2.0 + 4.0 * (norms + biases) as f64
        );
    }
}
