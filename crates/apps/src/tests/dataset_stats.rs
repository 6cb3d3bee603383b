//! Golden tests against lerobot v0.6.1's own `compute_stats.py`.
//!
//! The golden file is written by `tests/fixtures/gen_dataset_stats_golden.py` (see its docstring
//! for the exact command); it holds the seeded inputs, or the parameters of
//! the synthetic video frames, and lerobot's outputs with their numpy dtypes.
//! Every comparison is bit-exact: values by `f64::to_bits`, dtypes by name,
//! and `to_json` against the JSON lerobot wrote.

use crate::dataset::depth::{DepthQuantizer, DEPTH_QMAX};
use crate::dataset::stats::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

fn golden() -> &'static Value {
    static GOLDEN: OnceLock<Value> = OnceLock::new();
    GOLDEN.get_or_init(|| {
        let path = std::env::var_os("DATASET_STATS_GOLDEN")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../../tests/fixtures/dataset_stats_golden.json"
                ))
            });
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; regenerate it with tests/fixtures/gen_dataset_stats_golden.py",
                path.display()
            )
        });
        serde_json::from_str(&text).expect("golden is JSON")
    })
}

fn b64_decode(s: &str) -> Vec<u8> {
    let sextet = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 byte {c}"),
        }
    };
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for quad in s.as_bytes().chunks(4) {
        let data: Vec<u8> = quad.iter().copied().filter(|&c| c != b'=').collect();
        let bits = data
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &c)| acc | sextet(c) << (18 - 6 * i));
        out.extend(&bits.to_be_bytes()[1..data.len()]);
    }
    out
}

fn num(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("`{key}` in {v}")) as usize
}

/// The golden generator's synthetic frame (its docstring has the formula).
fn synthetic_frame(p: &Value, f: usize) -> Vec<u8> {
    let (w, h) = (num(p, "w"), num(p, "h"));
    let k = |key: &str| num(p, key) as u64;
    let (seed, amp, lo) = (k("seed") as u32, k("amp"), k("lo") as i64);
    let (ax, ay, af, ac) = (k("ax"), k("ay"), k("af"), k("ac"));
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            for c in 0..3usize {
                let mut hh = seed
                    ^ (x as u32).wrapping_mul(0x9E37_79B1)
                    ^ (y as u32).wrapping_mul(0x85EB_CA77)
                    ^ (f as u32).wrapping_mul(0xC2B2_AE3D)
                    ^ (c as u32).wrapping_mul(0x27D4_EB2F);
                hh ^= hh >> 15;
                hh = hh.wrapping_mul(0x2C1B_3C6D);
                hh ^= hh >> 12;
                hh = hh.wrapping_mul(0x297A_2D39);
                hh ^= hh >> 15;
                let raw = (ax * x as u64
                    + ay * y as u64
                    + af * f as u64
                    + ac * c as u64
                    + u64::from(hh) % amp)
                    % 256;
                out.push((raw as i64 - lo).max(0) as u8);
            }
        }
    }
    out
}

/// The golden generator's synthetic depth frame, float32 metres (its docstring has the formula:
/// the RGB hash with c = 0, then one float32 operation at a time).
fn synthetic_depth(p: &Value, f: usize) -> Vec<f32> {
    let (w, h) = (num(p, "w"), num(p, "h"));
    let seed = num(p, "seed") as u32;
    let holes = num(p, "holes") as u32;
    let k = |key: &str| p[key].as_f64().unwrap_or_else(|| panic!("`{key}` in {p}")) as f32;
    let (a, bx, by, bf, amp) = (k("a"), k("bx"), k("by"), k("bf"), k("amp"));
    let mut out = Vec::with_capacity(w * h);
    for y in 0..h {
        for x in 0..w {
            let mut hh = seed
                ^ (x as u32).wrapping_mul(0x9E37_79B1)
                ^ (y as u32).wrapping_mul(0x85EB_CA77)
                ^ (f as u32).wrapping_mul(0xC2B2_AE3D);
            hh ^= hh >> 15;
            hh = hh.wrapping_mul(0x2C1B_3C6D);
            hh ^= hh >> 12;
            hh = hh.wrapping_mul(0x297A_2D39);
            hh ^= hh >> 15;
            let u = (hh >> 8) as f32 * (1.0 / 16_777_216.0);
            let d = ((a + bx * x as f32) + by * y as f32) + bf * f as f32;
            let d = d + amp * u;
            out.push(if hh % 256 < holes { 0.0 } else { d });
        }
    }
    out
}

/// Regenerates one feature's episode data and computes its stats.
fn compute(input: &Value) -> FeatureStats {
    match input["kind"].as_str().unwrap() {
        "f32" => {
            let shape: Vec<usize> = input["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as usize)
                .collect();
            let bytes = b64_decode(input["b64"].as_str().unwrap());
            let x: Vec<f32> = bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            assert_eq!(x.len(), shape.iter().product::<usize>());
            vector_stats_f32(&x, shape.get(1).copied().unwrap_or(1)).unwrap()
        }
        "timestamp" => {
            let fps = num(input, "fps") as f64;
            let x: Vec<f64> = (0..num(input, "m")).map(|i| i as f64 / fps).collect();
            vector_stats_f64(&x, 1).unwrap()
        }
        "i64" => {
            let x: Vec<i64> = input["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap())
                .collect();
            int_stats(&x, 1).unwrap()
        }
        "frames" => {
            let (n, w, h) = (num(input, "n"), num(input, "w"), num(input, "h"));
            if w * h <= 64 * 48 {
                let all: Vec<Vec<u8>> = (0..n).map(|f| synthetic_frame(input, f)).collect();
                image_stats(&all, w, h).unwrap()
            } else {
                let mut seen = Vec::new();
                let st = image_stats_with(n, w, h, |f| {
                    seen.push(f);
                    Ok(synthetic_frame(input, f))
                })
                .unwrap();
                assert_eq!(seen, sample_indices(n));
                st
            }
        }
        "depth" => {
            let (n, w, h) = (num(input, "n"), num(input, "w"), num(input, "h"));
            let mut seen = Vec::new();
            let st = depth_stats_with(n, w, h, |f| {
                seen.push(f);
                Ok(synthetic_depth(input, f))
            })
            .unwrap();
            assert_eq!(seen, sample_indices(n));
            st
        }
        other => panic!("unknown input kind {other}"),
    }
}

fn compute_episode(inputs: &Value) -> BTreeMap<String, FeatureStats> {
    inputs
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), compute(v)))
        .collect()
}

fn flatten(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Array(items) => items.iter().for_each(|i| flatten(i, out)),
        n => out.push(n.as_f64().unwrap()),
    }
}

/// Bit-exact comparison with one golden feature `{stat: [dtype, value]}`.
fn assert_feature(ctx: &str, ours: &FeatureStats, golden: &Value) {
    let golden = golden.as_object().unwrap();
    let json = ours.to_json();
    let json = json.as_object().unwrap();
    assert_eq!(
        json.keys().collect::<Vec<_>>(),
        golden.keys().collect::<Vec<_>>(),
        "{ctx}: keys"
    );
    for (key, g) in golden {
        let (dtype, value) = (g[0].as_str().unwrap(), &g[1]);
        assert_eq!(&json[key], value, "{ctx}/{key}: to_json");
        if key == "count" {
            assert_eq!(dtype, "int64", "{ctx}/count");
            continue;
        }
        let stat = match key.as_str() {
            "min" => &ours.min,
            "max" => &ours.max,
            "mean" => &ours.mean,
            "std" => &ours.std,
            q => &ours.quantiles.iter().find(|(k, _)| k == q).unwrap().1,
        };
        assert_eq!(stat.dtype.numpy_name(), dtype, "{ctx}/{key}: dtype");
        let mut want = Vec::new();
        flatten(value, &mut want);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&stat.values),
            bits(&want),
            "{ctx}/{key}: {:?} vs {:?}",
            stat.values,
            want
        );
    }
}

fn assert_stats(ctx: &str, ours: &BTreeMap<String, FeatureStats>, golden: &Value) {
    let golden = golden.as_object().unwrap();
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        golden.keys().collect::<Vec<_>>()
    );
    for (k, st) in ours {
        assert_feature(&format!("{ctx}/{k}"), st, &golden[k]);
    }
}

#[test]
fn single_episodes_match_lerobot() {
    let episodes = golden()["episodes"].as_array().unwrap();
    assert!(episodes.len() >= 18);
    let depth = episodes
        .iter()
        .filter(|ep| ep["name"].as_str().unwrap().starts_with("depth_"))
        .count();
    assert!(depth >= 9, "{depth} depth episodes");
    for ep in episodes {
        let name = ep["name"].as_str().unwrap();
        assert_stats(name, &compute_episode(&ep["inputs"]), &ep["stats"]);
    }
}

#[test]
fn aggregation_chains_match_lerobot() {
    let roundtrip = |st: &FeatureStats| {
        let text = serde_json::to_string(&st.to_json()).unwrap();
        FeatureStats::from_json(&serde_json::from_str(&text).unwrap(), st.image).unwrap()
    };
    let chains = golden()["chains"].as_array().unwrap();
    assert!(chains.iter().any(|c| c["name"] == "depth_chain_b"));
    for chain in chains {
        let name = chain["name"].as_str().unwrap();
        let episodes: Vec<_> = chain["episodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(compute_episode)
            .collect();
        let (mut in_mem, mut rt) = (episodes[0].clone(), episodes[0].clone());
        for (e, ep) in episodes.iter().enumerate() {
            let ctx = format!("{name}/episode{e}");
            assert_stats(&ctx, ep, &chain["episode_stats"][e]);
            if e > 0 {
                for (k, st) in ep {
                    let agg = aggregate(&in_mem[k], st).unwrap();
                    in_mem.insert(k.clone(), agg);
                    let agg = aggregate(&roundtrip(&rt[k]), st).unwrap();
                    rt.insert(k.clone(), agg);
                }
            }
            assert_stats(&format!("{ctx}/in_memory"), &in_mem, &chain["in_memory"][e]);
            assert_stats(&format!("{ctx}/json"), &rt, &chain["json_roundtrip"][e]);
        }
    }
}

#[test]
fn serde_json_parses_floats_exactly() {
    // Python's json writes shortest round-trip reprs; reading them back
    // bit-exactly (as `load_stats` does) needs serde_json's
    // `float_roundtrip` feature, without which this is off by one ulp.
    let v: Value = serde_json::from_str("[-1.7835880517959597, 0.9821179509162904]").unwrap();
    assert_eq!(
        [v[0].as_f64().unwrap(), v[1].as_f64().unwrap()],
        [-1.7835880517959597, 0.9821179509162904],
        "enable serde_json's `float_roundtrip` feature"
    );
}

#[test]
fn sample_indices_match_lerobot() {
    for (n, want) in golden()["sample_indices"].as_object().unwrap() {
        let want: Vec<usize> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(sample_indices(n.parse().unwrap()), want, "n = {n}");
    }
}

#[test]
fn json_round_trip_keeps_values_and_int_dtype() {
    let st = int_stats(&[7], 1).unwrap();
    assert_eq!(st.min.dtype, Dtype::I64);
    let back = FeatureStats::from_json(&st.to_json(), false).unwrap();
    assert_eq!(back, st);

    let frame = [9u8; 4 * 2 * 3];
    let img = image_stats(&[&frame[..], &frame[..]], 4, 2).unwrap();
    let json = img.to_json();
    assert_eq!(json["count"], serde_json::json!([2]));
    assert_eq!(
        json["min"][2][0][0],
        serde_json::json!(f64::from(9.0f32 / 255.0))
    );
    let back = FeatureStats::from_json(&json, true).unwrap();
    assert_eq!(back.mean.values, img.mean.values);
    assert_eq!(back.mean.dtype, Dtype::F64);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    assert!(vector_stats_f32(&[], 3).is_err());
    assert!(vector_stats_f32(&[1.0, 2.0], 0).is_err());
    assert!(vector_stats_f64(&[1.0, 2.0, 3.0], 2).is_err());
    assert!(int_stats(&[], 1).is_err());
    assert!(image_stats::<Vec<u8>>(&[], 4, 2).is_err());
    assert!(image_stats(&[vec![0u8; 3]], 1, 1).is_err());
    assert!(image_stats(&[vec![0u8; 5]], 4, 2).is_err());
    let depth = |n: usize, w: usize, h: usize, frame: Vec<f32>| {
        depth_stats_with(n, w, h, |_| Ok::<_, String>(frame.clone()))
    };
    assert!(depth(1, 1, 1, vec![1.0]).is_err());
    assert!(depth(2, 2, 1, vec![1.0]).is_err());
    assert!(depth(2, 2, 1, vec![1.0, f32::NAN]).is_err());
    assert!(depth(2, 2, 1, vec![1.0, f32::INFINITY]).is_err());
    assert!(depth(0, 4, 2, vec![]).is_err());
    let d = depth(2, 2, 1, vec![1.0, 2.0]).unwrap();
    assert!(aggregate(&d, &image_stats(&[[9u8; 6], [9u8; 6]], 2, 1).unwrap()).is_err());
    let a = vector_stats_f32(&[1.0, 2.0], 1).unwrap();
    let b = vector_stats_f32(&[1.0, 2.0], 2).unwrap();
    assert!(aggregate(&a, &b).is_err());
    assert!(FeatureStats::from_json(&serde_json::json!({"min": [1]}), false).is_err());
}

fn f32s(b64: &Value) -> Vec<f32> {
    b64_decode(b64.as_str().unwrap())
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap())
        .collect()
}

fn quantizer(case: &Value) -> DepthQuantizer {
    DepthQuantizer {
        depth_min: case["depth_min"].as_f64().unwrap(),
        depth_max: case["depth_max"].as_f64().unwrap(),
        shift: case["shift"].as_f64().unwrap(),
        use_log: case["use_log"].as_bool().unwrap(),
    }
}

fn quantizer_cases() -> &'static [Value] {
    let cases = golden()["depth_quantizer"]["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    assert_eq!(quantizer(&cases[0]), DepthQuantizer::default());
    cases
}

/// Every float32 depth of each golden range (94 million for the defaults, in 0.005..=12 m), and
/// the edge inputs, against lerobot's codes: all equal.
#[test]
fn depth_codes_match_lerobot() {
    for case in quantizer_cases() {
        let q = quantizer(case);
        q.validate().unwrap();
        let range = ints(&case["range_bits"]);
        let (lo, hi) = (range[0] as u32, range[1] as u32);
        // Runs of equal codes: (first input's bits, code), from the stored differences.
        let (mut start, mut code) = (i64::from(lo), 0i64);
        let runs: Vec<(u32, u16)> = ints(&case["run_start_deltas"])
            .into_iter()
            .zip(ints(&case["run_code_deltas"]))
            .map(|(ds, dc)| {
                start += ds;
                code += dc;
                (start as u32, code as u16)
            })
            .collect();
        assert_eq!(runs[0].0, lo);

        let chunk = 1 << 20;
        let (mut depth, mut codes) = (Vec::with_capacity(chunk), vec![0u16; chunk]);
        let (mut run, mut mismatches, mut worst) = (0, 0u64, 0i32);
        let mut bits = lo;
        while bits <= hi {
            let end = hi.min(bits.saturating_add(chunk as u32 - 1));
            depth.clear();
            depth.extend((bits..=end).map(f32::from_bits));
            q.quantize(&depth, &mut codes[..depth.len()]);
            for (i, &c) in codes[..depth.len()].iter().enumerate() {
                let b = bits + i as u32;
                while run + 1 < runs.len() && runs[run + 1].0 <= b {
                    run += 1;
                }
                if c != runs[run].1 {
                    mismatches += 1;
                    worst = worst.max((i32::from(c) - i32::from(runs[run].1)).abs());
                }
            }
            bits = end + 1;
            if end == u32::MAX {
                break;
            }
        }
        assert_eq!(
            (mismatches, worst),
            (0, 0),
            "{q:?}: codes differing from lerobot's over {} inputs",
            hi - lo + 1
        );

        let edges = f32s(&case["edges_b64"]);
        let mut codes = vec![0u16; edges.len()];
        q.quantize(&edges, &mut codes);
        let want: Vec<u16> = ints(&case["edge_codes"])
            .iter()
            .map(|&c| c as u16)
            .collect();
        assert_eq!(codes, want, "{q:?}: edges {edges:?}");
    }
}

/// All 4096 codes decode to lerobot's float32 metres, bit for bit.
#[test]
fn depth_dequantize_matches_lerobot() {
    for case in quantizer_cases() {
        let q = quantizer(case);
        let want = f32s(&case["dequantized_b64"]);
        assert_eq!(want.len(), 4096);
        for (code, &w) in want.iter().enumerate() {
            let got = q.dequantize(code as u16);
            assert_eq!(
                got.to_bits(),
                w.to_bits(),
                "{q:?}: code {code}: {got} vs {w}"
            );
        }
    }
}

#[test]
fn depth_quantizer_checks_its_parameters() {
    let ok = DepthQuantizer::default();
    assert_eq!(DEPTH_QMAX, 4095);
    assert!(ok.validate().is_ok());
    let bad = [
        DepthQuantizer { shift: -0.01, ..ok },
        DepthQuantizer {
            depth_max: 0.01,
            ..ok
        },
        DepthQuantizer {
            depth_min: f64::NAN,
            ..ok
        },
    ];
    for q in bad {
        assert!(q.validate().is_err(), "{q:?}");
    }
    assert!(DepthQuantizer {
        shift: -0.01,
        use_log: false,
        ..ok
    }
    .validate()
    .is_ok());
}
