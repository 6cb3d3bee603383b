//! Which CPU the benchmark ran on and which kernels the model's products took there.
//!
//! Why print it: the same binary runs different kernels on an AVX2-only AMD EPYC and on an
//! AVX-512 Xeon, and a speed ratio means little without knowing which ran. Both choices are made
//! at run time by our dependencies, not by us, so this module repeats their rules (candle's tile rule
//! is `vlm::linear::candle_quant_tier`, which also routes the products):
//! - dense f32 products go through `gemm` 0.19, which uses its AVX-512 microkernels only when
//!   built with its `x86-v4` feature (our `avx512` feature, on by default, turns it on; candle
//!   does not) and the CPU has `avx512f`, else FMA (AVX2), else scalar
//!   (gemm-common 0.19.0 `gemm.rs`);
//! - quantized products of many rows (prefill): Q4_K through our own tiles where our row
//!   kernels run (`vlm::qgemm::chosen`; `POINTACT_QGEMM_CANDLE=1` hands them to candle);
//!   otherwise, and Q8_0 always, through candle-core 0.11.1's x86 repacked
//!   tiles at the best of AVX-512 VNNI, AVX-VNNI, AVX2 (`MISTRALRS_FORCE_AVX2=1` / `MISTRALRS_FORCE_AVXVNNI=1`
//!   force a tier); Q4_K always takes tiles, Q8_0 only with real VNNI (`vpdpbusd`) (candle-core
//!   0.11.1 `quantized/repack_x86.rs`, `select`/`level`); without VNNI candle would take one
//!   ggml dot product per (row, column), so we dequantize Q8_0 into the f32 gemm instead
//!   (`vlm::linear`);
//!   of few rows (decode), through our own kernels where AVX2, FMA and F16C are, AVX-512 ones
//!   for q4k where AVX-512 F/BW/VNNI are too (`vlm::qgemv::row_kernels`, which this report
//!   calls; `POINTACT_QGEMV_AVX2=1` keeps AVX2), else candle's per-block ggml dot products;
//! - dense f32 products of few rows (f32 decode) go through our own rows there too
//!   (`vlm::linear::DENSE_FEW_ROWS`), through `gemm` elsewhere; of more rows (f32 prefill, the
//!   vision tower) through our tiles where our rows run (`vlm::sgemm::chosen`;
//!   `POINTACT_SGEMM_GEMM=1` hands them to `gemm`), through `gemm` elsewhere.
//!
//! If a dependency upgrade changes those rules, this report must follow (Cargo.lock pins both).

use serde::Serialize;

use pointact_vlm::qgemv::RowKernels;

/// The CPU and the kernels its products take.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuKernels {
    /// `model name` of /proc/cpuinfo and the widest vector unit (`crate::cpu_model`).
    pub cpu: String,
    /// `vendor_id` of /proc/cpuinfo (`GenuineIntel`, `AuthenticAMD`): the transformers peer's
    /// MKL chooses its kernels by it (`peer::MKL_INTEL_SHIM`).
    pub vendor: String,
    /// The vector features that decide the kernels, as the kernel names them.
    pub features: Vec<String>,
    /// Dense f32 matrix products (vision tower, f32 decoder, attention).
    pub f32_gemm: String,
    /// Quantized products (`q8_0`, `q4k` decoder linears).
    pub quantized: String,
}

/// The features worth naming, in /proc/cpuinfo's spelling.
const FEATURES: [&str; 11] = [
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx_vnni",
    "amx_int8",
    "amx_bf16",
];

/// The first value of `key` in /proc/cpuinfo (empty where there is none).
fn cpuinfo(key: &str) -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default()
}

fn cpuinfo_flags() -> Vec<String> {
    let text = cpuinfo("flags");
    let flags: Vec<&str> = text.split_whitespace().collect();
    FEATURES
        .iter()
        .filter(|f| flags.contains(f))
        .map(|f| f.to_string())
        .collect()
}

fn describe(features: &[String], x86: bool, env: impl Fn(&str) -> bool) -> (String, String) {
    let has = |f: &str| features.iter().any(|x| x == f);
    let f32_gemm = if !x86 {
        format!("gemm ({})", std::env::consts::ARCH)
    } else if cfg!(feature = "avx512") && has("avx512f") {
        "gemm avx512f (x86-v4)".to_owned()
    } else if has("avx2") && has("fma") {
        if has("avx512f") {
            "gemm fma/AVX2 (built without the avx512 feature)".to_owned()
        } else {
            "gemm fma/AVX2".to_owned()
        }
    } else {
        "gemm scalar".to_owned()
    };
    let q4k = x86
        .then(|| pointact_vlm::qgemm::chosen(has, &env))
        .flatten()
        .map(|t| format!("pointact {} q4k tiles", t.name()));
    let many_rows = match (
        q4k,
        x86.then(|| pointact_vlm::linear::candle_quant_tier(has, &env).map(|t| t.name()))
            .flatten(),
    ) {
        (Some(q4k), Some("avx2") | None) => {
            format!("{q4k}; q8_0 dequantized into the f32 gemm (candle's tiles need VNNI)")
        }
        (Some(q4k), Some(tier)) => format!("{q4k}; ggml {tier} tiles for q8_0"),
        (None, Some(tier @ "avx2")) => {
            format!(
                "ggml {tier} tiles for q4k; q8_0 dequantized into the f32 gemm (tiles need VNNI)"
            )
        }
        (None, Some(tier)) => format!("ggml {tier} tiles for q4k and q8_0"),
        (None, None) => {
            "ggml per-block dot products for q4k; q8_0 dequantized into the f32 gemm".to_owned()
        }
    };
    // Decode's few-row products: ours where `vlm::qgemv::row_kernels` allows them.
    let rows = if x86 {
        pointact_vlm::qgemv::row_kernels(has, &env)
    } else {
        None
    };
    let few_rows = match rows {
        Some(RowKernels::Avx512) => "pointact avx512-vnni q4k rows, avx2 q8_0 rows",
        Some(RowKernels::Avx2) => "pointact avx2 q4k and q8_0 rows",
        None => "ggml per-block dot products",
    };
    let tiles = if x86 {
        pointact_vlm::sgemm::chosen(has, &env)
    } else {
        None
    };
    let held = if pointact_vlm::linear::keeps_bf16_with(rows, tiles, &env) {
        "; dense weights held bf16 as stored"
    } else {
        ""
    };
    let f32_products = match (rows, tiles) {
        (Some(rows), Some(tiles)) => format!(
            "prefill pointact {} f32 tiles, decode pointact {} f32 rows, attention {f32_gemm}{held}",
            tiles.name(),
            rows.name()
        ),
        (Some(rows), None) => format!("{f32_gemm}, decode pointact {} f32 rows", rows.name()),
        (None, _) => f32_gemm,
    };
    (
        f32_products,
        format!("prefill {many_rows}; decode {few_rows}"),
    )
}

/// This machine's CPU and kernels.
pub(crate) fn detect() -> CpuKernels {
    let features = cpuinfo_flags();
    let (f32_gemm, quantized) = describe(
        &features,
        cfg!(target_arch = "x86_64"),
        pointact_vlm::qgemv::switch_on,
    );
    CpuKernels {
        cpu: crate::cpu_model(),
        vendor: cpuinfo("vendor_id"),
        features,
        f32_gemm,
        quantized,
    }
}

impl std::fmt::Display for CpuKernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}); f32: {}; quantized: {}",
            self.cpu,
            if self.features.is_empty() {
                "no AVX2".to_owned()
            } else {
                self.features.join(" ")
            },
            self.f32_gemm,
            self.quantized
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn kernels_follow_the_cpu_features() {
        let never = |_: &str| false;
        let (g, q) = describe(&flags("avx2 fma f16c"), true, never);
        assert_eq!(
            g,
            "prefill pointact avx2 f32 tiles, decode pointact avx2 f32 rows, attention gemm \
             fma/AVX2; dense weights held bf16 as stored"
        );
        let (g, _) = describe(&flags("avx2 fma f16c"), true, |k| k == "POINTACT_DENSE_F32");
        assert_eq!(
            g,
            "prefill pointact avx2 f32 tiles, decode pointact avx2 f32 rows, attention gemm fma/AVX2"
        );
        let (g, _) = describe(&flags("avx2 fma f16c"), true, |k| {
            k == "POINTACT_SGEMM_GEMM"
        });
        assert_eq!(g, "gemm fma/AVX2, decode pointact avx2 f32 rows");
        assert!(
            q.starts_with(
                "prefill pointact avx2 q4k tiles; q8_0 dequantized into the f32 gemm (candle's"
            ),
            "{q}"
        );
        let (_, q) = describe(&flags("avx2 fma f16c"), true, |k| {
            k == "POINTACT_QGEMM_CANDLE"
        });
        assert!(
            q.starts_with("prefill ggml avx2 tiles for q4k; q8_0 dequantized into the f32 gemm"),
            "{q}"
        );
        assert!(q.ends_with("decode pointact avx2 q4k and q8_0 rows"), "{q}");
        let (g, q) = describe(&flags("avx2 fma"), true, never);
        assert!(q.ends_with("decode ggml per-block dot products"), "{q}");
        assert_eq!(g, "gemm fma/AVX2");
        let xeon = flags("avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni avx512_bf16");
        let (g, q) = describe(&xeon, true, never);
        assert!(
            g.starts_with("prefill pointact avx512 f32 tiles, decode pointact avx512 f32 rows, attention gemm"),
            "{g}"
        );
        if cfg!(feature = "avx512") {
            assert!(
                g.ends_with("attention gemm avx512f (x86-v4); dense weights held bf16 as stored"),
                "{g}"
            );
        } else {
            assert!(g.contains("without the avx512 feature"), "{g}");
        }
        let (g, _) = describe(&xeon, true, |k| k == "POINTACT_SGEMM_GEMM");
        if cfg!(feature = "avx512") {
            assert_eq!(g, "gemm avx512f (x86-v4), decode pointact avx512 f32 rows");
        }
        assert!(
            q.starts_with(
                "prefill pointact avx512-vnni q4k tiles; ggml avx512-vnni tiles for q8_0; decode"
            ),
            "{q}"
        );
        assert!(
            q.ends_with("decode pointact avx512-vnni q4k rows, avx2 q8_0 rows"),
            "{q}"
        );
        // Forcing AVX2 drops the VNNI tiles, as candle does; ours follow their own switch.
        let (g, q) = describe(&xeon, true, |k| k == "MISTRALRS_FORCE_AVX2");
        assert!(
            q.starts_with("prefill pointact avx512-vnni q4k tiles; q8_0 dequantized"),
            "{q}"
        );
        assert!(
            q.ends_with("decode pointact avx512-vnni q4k rows, avx2 q8_0 rows"),
            "{q}"
        );
        assert!(g.contains("decode pointact avx512 f32 rows"), "{g}");
        let (g, q) = describe(&xeon, true, |k| k == "POINTACT_QGEMV_AVX2");
        assert!(q.ends_with("decode pointact avx2 q4k and q8_0 rows"), "{q}");
        assert!(
            q.starts_with("prefill pointact avx2 q4k tiles; ggml avx512-vnni"),
            "{q}"
        );
        assert!(g.contains("decode pointact avx2 f32 rows"), "{g}");
        // AVX-512 without VNNI (Skylake-SP): our AVX2 rows.
        let (_, q) = describe(
            &flags("avx2 fma f16c avx512f avx512bw avx512vl"),
            true,
            never,
        );
        assert!(q.ends_with("decode pointact avx2 q4k and q8_0 rows"), "{q}");
        let (_, q) = describe(&flags("avx2 fma avx_vnni"), true, never);
        assert!(
            q.starts_with("prefill ggml avx-vnni tiles for q4k and q8_0;"),
            "{q}"
        );
        let (_, q) = describe(&flags("avx2 fma f16c avx_vnni"), true, never);
        assert!(
            q.starts_with("prefill pointact avx-vnni q4k tiles; ggml avx-vnni tiles for q8_0;"),
            "{q}"
        );
        let (g, q) = describe(&[], true, never);
        assert_eq!(
            (g.as_str(), q.as_str()),
            (
                "gemm scalar",
                "prefill ggml per-block dot products for q4k; q8_0 dequantized into the f32 gemm; \
                 decode ggml per-block dot products"
            )
        );
    }
}
