//! Projection / deprojection against librealsense itself.
//!
//! `tests/fixtures/realsense_golden.json` holds outputs of `pyrealsense2` 2.59.1's
//! `rs2_project_point_to_pixel` and `rs2_deproject_pixel_to_point` for D435/L515-like intrinsics
//! and every distortion model we support (regenerate with
//! `python3 tests/fixtures/gen_realsense_golden.py`). The bar is 1e-4 px and 1e-6 m; because we
//! mirror the SDK's f32 arithmetic the results are also checked to be bit-identical as f32 (the
//! f64 differences printed, ~1e-13, are JSON decimal parsing, not arithmetic).

use crate::geometry::{Distortion, GeometryError, Intrinsics};
use k::nalgebra::Vector3;
use serde_json::Value;

const PIXEL_TOL: f64 = 1e-4;
const METRE_TOL: f64 = 1e-6;

fn golden() -> Value {
    let path = concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
        "/tests/fixtures/realsense_golden.json"
    );
    let text = std::fs::read_to_string(path).expect("golden file is committed");
    serde_json::from_str(&text).expect("golden file is valid JSON")
}

fn intrinsics(case: &Value) -> Intrinsics {
    let k = &case["intrinsics"];
    let num = |key: &str| k[key].as_f64().expect(key);
    let coeffs: Vec<f64> = k["coeffs"]
        .as_array()
        .expect("coeffs")
        .iter()
        .map(|c| c.as_f64().expect("coeff"))
        .collect();
    Intrinsics {
        width: k["width"].as_u64().expect("width") as usize,
        height: k["height"].as_u64().expect("height") as usize,
        fx: num("fx"),
        fy: num("fy"),
        cx: num("ppx"),
        cy: num("ppy"),
        model: Distortion::from_name(k["model"].as_str().expect("model")).expect("known model"),
        coeffs: coeffs.try_into().expect("5 coefficients"),
    }
}

fn rows(case: &Value, key: &str) -> Vec<Vec<f64>> {
    case[key]
        .as_array()
        .expect(key)
        .iter()
        .map(|r| {
            r.as_array()
                .expect("row")
                .iter()
                .map(|x| x.as_f64().expect("number"))
                .collect()
        })
        .collect()
}

#[test]
fn golden_file_covers_every_model_with_enough_samples() {
    let g = golden();
    let cases = g["cases"].as_array().expect("cases");
    let models: std::collections::BTreeSet<String> = cases
        .iter()
        .map(|c| c["intrinsics"]["model"].as_str().unwrap_or("").to_string())
        .collect();
    for m in [
        "none",
        "brown_conrady",
        "inverse_brown_conrady",
        "modified_brown_conrady",
    ] {
        assert!(models.contains(m), "no golden case for {m}");
    }
    let n_proj: usize = cases.iter().map(|c| rows(c, "project").len()).sum();
    let n_deproj: usize = cases.iter().map(|c| rows(c, "deproject").len()).sum();
    assert!(n_proj >= 300 && n_deproj >= 300, "{n_proj} / {n_deproj}");
    // Non-zero coefficients must be present, or the distortion code is untested.
    assert!(cases.iter().any(|c| {
        c["intrinsics"]["model"] == "brown_conrady"
            && c["intrinsics"]["coeffs"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x.as_f64() != Some(0.0)))
    }));
}

#[test]
fn projection_matches_librealsense() {
    let g = golden();
    let mut worst = 0.0f64;
    let mut count = 0;
    for case in g["cases"].as_array().expect("cases") {
        let k = intrinsics(case);
        k.validate().expect("golden intrinsics are valid");
        for r in rows(case, "project") {
            let px = k
                .project(&Vector3::new(r[0], r[1], r[2]))
                .unwrap_or_else(|e| panic!("{}: {e}", case["name"]));
            let err = (px[0] - r[3]).abs().max((px[1] - r[4]).abs());
            assert!(
                err <= PIXEL_TOL,
                "{}: project({:?}) = {px:?}, librealsense {:?}",
                case["name"],
                &r[..3],
                &r[3..]
            );
            assert_eq!(
                [px[0] as f32, px[1] as f32],
                [r[3] as f32, r[4] as f32],
                "{}: not bit-identical in f32",
                case["name"]
            );
            worst = worst.max(err);
            count += 1;
        }
    }
    println!("projection: {count} points, max |diff| = {worst:e} px");
}

#[test]
fn deprojection_matches_librealsense() {
    let g = golden();
    let mut worst = 0.0f64;
    let mut count = 0;
    for case in g["cases"].as_array().expect("cases") {
        let k = intrinsics(case);
        for r in rows(case, "deproject") {
            let p = k
                .deproject([r[0], r[1]], r[2])
                .unwrap_or_else(|e| panic!("{}: {e}", case["name"]));
            let err = (p.x - r[3])
                .abs()
                .max((p.y - r[4]).abs())
                .max((p.z - r[5]).abs());
            assert!(
                err <= METRE_TOL,
                "{}: deproject({:?}) = {p:?}, librealsense {:?}",
                case["name"],
                &r[..3],
                &r[3..]
            );
            assert_eq!(
                [p.x as f32, p.y as f32, p.z as f32],
                [r[3] as f32, r[4] as f32, r[5] as f32],
                "{}: not bit-identical in f32",
                case["name"]
            );
            worst = worst.max(err);
            count += 1;
        }
    }
    println!("deprojection: {count} pixels, max |diff| = {worst:e} m");
}

#[test]
fn forward_only_model_refuses_deprojection_where_librealsense_asserts() {
    let g = golden();
    let mut seen = false;
    for case in g["cases"].as_array().expect("cases") {
        if case["deproject_supported"].as_bool() == Some(false) {
            seen = true;
            let k = intrinsics(case);
            assert_eq!(k.model, Distortion::ModifiedBrownConrady);
            assert!(matches!(
                k.deproject([100.0, 100.0], 1.0),
                Err(GeometryError::NotDeprojectable { .. })
            ));
            assert!(rows(case, "deproject").is_empty());
        }
    }
    assert!(seen, "the golden file has no forward-only case");
}
