//! `pointact bench qgemm`: one Q4K prefill product at a time, ours (`vlm::qgemm`, the tiles this
//! CPU takes) against candle 0.11.1's repacked tiles as prefill used them (a fresh copy of the
//! blocks, repacked for the one product) and against the f32 `gemm` on the dequantized weight,
//! at the 3B text decoder's four prefill shapes; and the same f32 product on our f32 tiles
//! (`vlm::sgemm`, what an f32 prefill takes) against that `gemm`.
//!
//! Why beside `bench vlm`: the whole-model run takes minutes and mixes every kernel; this one
//! takes seconds and says on a new machine (an AVX2-only EPYC, an Intel Xeon, an AVX-VNNI
//! client CPU) whether our tiles beat candle's there before anything else is measured. The
//! three results are also compared with each other, so a kernel that is fast and wrong fails
//! the run instead of printing a ratio.

use std::fmt;
use std::time::Instant;

use candle_core::quantized::k_quants::{BlockQ4K, GgmlType};
use candle_core::quantized::{QMatMul, QStorage, QTensor};
use candle_core::{Device, Module, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Debug, thiserror::Error)]
pub enum QgemmBenchError {
    #[error("bench qgemm: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("bench qgemm: our tiles are not chosen on this CPU (no AVX2/FMA/F16C, or POINTACT_QGEMM_CANDLE=1)")]
    NotChosen,
    #[error("bench qgemm: ({m}, {k}, {n}): ours and {peer} differ by {diff:e} (largest output {scale:e})")]
    Disagree {
        m: usize,
        k: usize,
        n: usize,
        peer: &'static str,
        diff: f32,
        scale: f32,
    },
}

pub struct QgemmBenchArgs {
    /// Activation rows (the prompt's tokens).
    pub rows: usize,
    /// `(k, n)` of each product.
    pub shapes: Vec<(usize, usize)>,
    /// Timed repetitions of each side (the best one counts).
    pub reps: usize,
}

/// The 3B text decoder's products in a prefill: q|k|v fused, o, gate|up fused, down.
pub const SHAPES_3B: [(usize, usize); 4] =
    [(2048, 2560), (2048, 2048), (2048, 22016), (11008, 2048)];

/// One product's best times (ms).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub m: usize,
    pub k: usize,
    pub n: usize,
    pub ours_ms: f64,
    pub candle_ms: f64,
    pub f32_ms: f64,
    /// The f32 product on our f32 tiles, where they run here.
    pub f32_ours_ms: Option<f64>,
}

pub struct QgemmBenchReport {
    pub cpu: crate::vlm::kernels::CpuKernels,
    pub tiles: &'static str,
    /// Our f32 tiles here (`vlm::sgemm::chosen`), if any.
    pub f32_tiles: Option<&'static str>,
    pub rows: Vec<Row>,
}

/// Deterministic values in [-0.5, 0.5).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen::<f32>() - 0.5).collect()
}

/// The best of `reps` runs of `f` (ms) and its last result.
fn best<T>(
    reps: usize,
    mut f: impl FnMut() -> Result<T, QgemmBenchError>,
) -> Result<(f64, T), QgemmBenchError> {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let out = f()?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        last = Some(out);
    }
    Ok((best, last.expect("at least one run")))
}

/// Fails unless `got` is within `tol` of the largest `want`, NaN included: 1e-5 against
/// candle's tiles (the same integer sums, only float order differs, as in the unit tests) and
/// 2e-2 against the f32 gemm on the dequantized weight (which skips the activation's 8-bit
/// quantization, so it differs by that too).
fn agree(
    (m, k, n): (usize, usize, usize),
    peer: &'static str,
    got: &[f32],
    want: &[f32],
    tol: f32,
) -> Result<(), QgemmBenchError> {
    let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
    let diff = got.iter().zip(want).fold(0f32, |a, (x, y)| {
        let d = (x - y).abs();
        if a.is_nan() || d.is_nan() {
            f32::NAN
        } else {
            a.max(d)
        }
    });
    if diff.is_nan() || diff > tol * scale {
        return Err(QgemmBenchError::Disagree {
            m,
            k,
            n,
            peer,
            diff,
            scale,
        });
    }
    Ok(())
}

pub fn run(args: &QgemmBenchArgs) -> Result<QgemmBenchReport, QgemmBenchError> {
    let tiles = pointact_vlm::qgemm::chosen_here().ok_or(QgemmBenchError::NotChosen)?;
    let f32_tiles = pointact_vlm::sgemm::chosen_here();
    let m = args.rows;
    let mut rows = Vec::new();
    for (i, &(k, n)) in args.shapes.iter().enumerate() {
        let mut blocks = vec![BlockQ4K::zeros(); n * k / 256];
        BlockQ4K::from_float(&values(2 * i as u64 + 1, n * k), &mut blocks);
        let x = values(2 * i as u64 + 2, m * k);
        let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu)?;
        let (ours_ms, ours) = best(args.reps, || {
            let mut dst = vec![0f32; m * n];
            pointact_vlm::qgemm::q4k((m, k, n), &x, &blocks, &mut dst)?;
            Ok(dst)
        })?;
        let (candle_ms, candle) = best(args.reps, || {
            let q = QTensor::new(QStorage::Cpu(Box::new(blocks.clone())), (n, k))?;
            let y = QMatMul::from_qtensor(q)?.forward(&xt)?;
            Ok(y.flatten_all()?.to_vec1::<f32>()?)
        })?;
        let mut dense = vec![0f32; n * k];
        BlockQ4K::to_float(&blocks, &mut dense);
        let (f32_ours_ms, f32_ours) = match f32_tiles {
            Some(t) => {
                let (ms, out) = best(args.reps, || {
                    let mut dst = vec![0f32; m * n];
                    pointact_vlm::sgemm::matmul_nt(t, (m, k, n), &x, &dense, None, &mut dst)?;
                    Ok(dst)
                })?;
                (Some(ms), Some(out))
            }
            None => (None, None),
        };
        let wt = Tensor::from_vec(dense, (n, k), &Device::Cpu)?;
        let (f32_ms, f32_out) = best(args.reps, || {
            Ok(xt.matmul(&wt.t()?)?.flatten_all()?.to_vec1::<f32>()?)
        })?;
        agree((m, k, n), "candle's tiles", &ours, &candle, 1e-5)?;
        agree((m, k, n), "the f32 gemm", &ours, &f32_out, 2e-2)?;
        if let Some(f) = &f32_ours {
            agree(
                (m, k, n),
                "our f32 tiles vs the f32 gemm",
                f,
                &f32_out,
                1e-5,
            )?;
        }
        rows.push(Row {
            m,
            k,
            n,
            ours_ms,
            candle_ms,
            f32_ms,
            f32_ours_ms,
        });
    }
    Ok(QgemmBenchReport {
        cpu: crate::vlm::kernels::detect(),
        tiles: tiles.name(),
        f32_tiles: f32_tiles.map(|t| t.name()),
        rows,
    })
}

impl fmt::Display for QgemmBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "bench qgemm: Q4K products of a prefill, best of each side, threads as candle's pool"
        )?;
        writeln!(f, "  cpu   {}", self.cpu)?;
        writeln!(
            f,
            "  ours  pointact {} q4k tiles; f32: {}",
            self.tiles,
            self.f32_tiles.map_or_else(
                || "gemm (our f32 tiles do not run here)".to_owned(),
                |t| format!("pointact {t} f32 tiles")
            )
        )?;
        writeln!(
            f,
            "  {:>5} {:>6} {:>6} {:>10} {:>22} {:>22} {:>24}",
            "m", "k", "n", "ours ms", "candle tiles ms", "f32 gemm ms", "ours f32 ms"
        )?;
        for r in &self.rows {
            let f32_ours = r.f32_ours_ms.map_or_else(
                || "-".to_owned(),
                |o| format!("{o:.1} ({:>5.2}x gemm)", r.f32_ms / o),
            );
            writeln!(
                f,
                "  {:>5} {:>6} {:>6} {:>10.1} {:>13.1} ({:>5.2}x) {:>13.1} ({:>5.2}x) {f32_ours:>24}",
                r.m,
                r.k,
                r.n,
                r.ours_ms,
                r.candle_ms,
                r.candle_ms / r.ours_ms,
                r.f32_ms,
                r.f32_ms / r.ours_ms
            )?;
        }
        write!(
            f,
            "  (x) = their time / ours: > 1 means ours is faster; candle's tiles as prefill used them \
             (a fresh copy of the blocks, repacked for the one product); all results agree (checked)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small run: every shape gives a row, and the three products were held to each other
    /// (a disagreement is an error, which this would surface).
    #[test]
    fn a_small_run_reports_every_shape() {
        if pointact_vlm::qgemm::chosen_here().is_none() {
            eprintln!("skipped: our tiles do not run here");
            return;
        }
        let report = run(&QgemmBenchArgs {
            rows: 37,
            shapes: vec![(256, 48), (512, 35)],
            reps: 1,
        })
        .unwrap();
        assert_eq!(
            report
                .rows
                .iter()
                .map(|r| (r.m, r.k, r.n))
                .collect::<Vec<_>>(),
            vec![(37, 256, 48), (37, 512, 35)]
        );
        assert!(report
            .rows
            .iter()
            .all(|r| r.ours_ms > 0.0 && r.candle_ms > 0.0));
        assert!(report
            .rows
            .iter()
            .all(|r| r.f32_ours_ms.is_some() == pointact_vlm::sgemm::chosen_here().is_some()));
        assert!(report.to_string().contains("q4k tiles"));
    }

    /// The check that guards the ratios fails on a wrong result.
    #[test]
    fn a_wrong_product_is_an_error() {
        let want = [1.0f32, -2.0, 4.0];
        assert!(agree((1, 256, 3), "x", &[1.0, -2.0, 4.0], &want, 1e-5).is_ok());
        assert!(agree((1, 256, 3), "x", &[1.0, -2.0, 4.1], &want, 1e-5).is_err());
        assert!(agree((1, 256, 3), "x", &[f32::NAN, -2.0, 4.0], &want, 1e-5).is_err());
    }
}
