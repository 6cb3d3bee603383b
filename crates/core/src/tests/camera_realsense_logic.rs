//! The RealSense arithmetic that needs no device or library (always built): per-pixel temporal
//! median, depth-unit scaling, and librealsense intrinsics → ours. Expected values are worked out
//! by hand in the comments; the deprojection check uses librealsense's own golden values
//! (`tests/fixtures/realsense_golden.json`, from pyrealsense2).

use crate::camera::realsense::{
    depth_from_units, intrinsics_from_rs2, rs2_distortion, temporal_median, RealSenseError,
    RealSenseOptions, Rs2IntrinsicsFields,
};
use crate::geometry::Distortion;

#[test]
fn temporal_median_ignores_zeros_per_pixel() {
    // Five pixels over four frames:
    //   p0: 100, 104, 102, 500 -> sorted 100 102 104 500 -> (102 + 104) / 2 = 103
    //   p1: 0, 0, 0, 0         -> no data -> 0
    //   p2: 0, 7, 0, 0         -> one valid sample -> 7
    //   p3: 10, 0, 30, 20      -> 10 20 30 -> 20 (the zero is not a sample)
    //   p4: 65535 x4           -> 65535 (no overflow in the mean of the middle two)
    let f0: &[u16] = &[100, 0, 0, 10, 65535];
    let f1: &[u16] = &[104, 0, 7, 0, 65535];
    let f2: &[u16] = &[102, 0, 0, 30, 65535];
    let f3: &[u16] = &[500, 0, 0, 20, 65535];
    let m = temporal_median(&[f0, f1, f2, f3]).unwrap();
    assert_eq!(m, vec![103.0, 0.0, 7.0, 20.0, 65535.0]);
    // Even count with an odd sum: (1 + 2) / 2 = 1.5 units, not rounded.
    assert_eq!(
        temporal_median(&[&[1u16][..], &[2u16][..]]).unwrap(),
        vec![1.5]
    );
    // One frame is the frame itself.
    assert_eq!(
        temporal_median(&[&[3u16, 0, 9][..]]).unwrap(),
        vec![3.0, 0.0, 9.0]
    );
}

#[test]
fn temporal_median_rejects_bad_input() {
    assert!(matches!(
        temporal_median(&[]),
        Err(RealSenseError::Median(m)) if m.contains("no frames")
    ));
    let e = temporal_median(&[&[1u16, 2][..], &[1u16][..]]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "temporal median: frame 1 has 1 pixels, frame 0 has 2"
    );
}

#[test]
fn depth_units_scale_to_metres() {
    // D4xx default 1 mm/unit: 1000 units = 1 m; L515 0.25 mm/unit: 1000 units = 0.25 m, and the
    // L515's largest value 65535 x 0.25 mm = 16.38375 m. 0 stays 0 (no data); half units from an
    // even median scale too (1.5 x 1 mm = 1.5 mm).
    // The device reports the scale as f32, so compare to the decimal values within f32 precision.
    let close = |got: &[f32], want: [f64; 4]| {
        for (g, w) in got.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() <= 1e-7 * w, "{got:?} vs {want:?}");
        }
    };
    let units = [1000.0, 0.0, 1.5, 65535.0];
    let d = depth_from_units(2, 2, &units, 0.001).unwrap();
    assert_eq!((d.width, d.height), (2, 2));
    close(&d.data, [1.0, 0.0, 0.0015, 65.535]);
    assert_eq!(d.data[1], 0.0);
    let l = depth_from_units(2, 2, &units, 0.00025).unwrap();
    close(&l.data, [0.25, 0.0, 0.000375, 16.38375]);
    assert_eq!(d.valid_count(), 3);
    for bad in [0.0, -0.001, f32::NAN, f32::INFINITY] {
        assert!(matches!(
            depth_from_units(2, 2, &units, bad),
            Err(RealSenseError::InvalidOption {
                field: "depth_scale_m",
                ..
            })
        ));
    }
    // A buffer that does not fit the size is the geometry error, not a panic.
    assert!(matches!(
        depth_from_units(3, 2, &units, 0.001),
        Err(RealSenseError::Geometry(_))
    ));
}

fn fields(model: i32, coeffs: [f32; 5]) -> Rs2IntrinsicsFields {
    Rs2IntrinsicsFields {
        width: 640,
        height: 480,
        ppx: 314.25,
        ppy: 237.78,
        fx: 612.41,
        fy: 610.65,
        model,
        coeffs,
    }
}

#[test]
fn intrinsics_map_fields_and_models() {
    let coeffs = [0.1715, -0.5263, -0.00121, 0.00043, 0.4874];
    let k = intrinsics_from_rs2(&fields(rs2_distortion::BROWN_CONRADY, coeffs), "colour").unwrap();
    assert_eq!((k.width, k.height), (640, 480));
    // f32 -> f64 exactly: 612.41f32 is 612.40997314453125, not 612.41.
    assert_eq!(k.fx, 612.409_973_144_531_3);
    assert_eq!(k.fx, f64::from(612.41f32));
    assert_eq!(k.fy, f64::from(610.65f32));
    // ppx/ppy become cx/cy.
    assert_eq!((k.cx, k.cy), (f64::from(314.25f32), f64::from(237.78f32)));
    assert_eq!(k.model, Distortion::BrownConrady);
    assert_eq!(k.coeffs, coeffs.map(f64::from));

    for (ordinal, model) in [
        (rs2_distortion::NONE, Distortion::None),
        (
            rs2_distortion::MODIFIED_BROWN_CONRADY,
            Distortion::ModifiedBrownConrady,
        ),
        (
            rs2_distortion::INVERSE_BROWN_CONRADY,
            Distortion::InverseBrownConrady,
        ),
        (rs2_distortion::BROWN_CONRADY, Distortion::BrownConrady),
    ] {
        let k = intrinsics_from_rs2(&fields(ordinal, [0.0; 5]), "colour").unwrap();
        assert_eq!(k.model, model, "rs2_distortion {ordinal}");
    }
}

#[test]
fn intrinsics_refuse_fisheye_models_and_nonsense() {
    for (ordinal, name) in [
        (rs2_distortion::FTHETA, "f-theta"),
        (rs2_distortion::KANNALA_BRANDT4, "Kannala-Brandt"),
        (42, "unknown (rs2_distortion 42)"),
    ] {
        let e = intrinsics_from_rs2(&fields(ordinal, [0.0; 5]), "fisheye").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "the fisheye stream uses the {name} distortion model, which pointact cannot deproject"
            )
        );
    }
    let mut f = fields(rs2_distortion::NONE, [0.0; 5]);
    f.width = -1;
    assert!(matches!(
        intrinsics_from_rs2(&f, "colour"),
        Err(RealSenseError::InvalidOption {
            field: "intrinsics.width",
            ..
        })
    ));
    let mut f = fields(rs2_distortion::NONE, [0.0; 5]);
    f.fx = 0.0;
    assert!(matches!(
        intrinsics_from_rs2(&f, "colour"),
        Err(RealSenseError::Geometry(_))
    ));
}

/// The converted intrinsics deproject exactly as librealsense does (pyrealsense2's golden values),
/// for every model the golden file covers: the ordinal mapping and the coefficient order are right.
#[test]
fn converted_intrinsics_match_librealsense_deprojection() {
    let text = std::fs::read_to_string(concat!(
        concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
        "/tests/fixtures/realsense_golden.json"
    ))
    .unwrap();
    let golden: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for case in golden["cases"].as_array().unwrap() {
        if !case["deproject_supported"].as_bool().unwrap() {
            continue;
        }
        let i = &case["intrinsics"];
        let ordinal = match i["model"].as_str().unwrap() {
            "none" => rs2_distortion::NONE,
            "brown_conrady" => rs2_distortion::BROWN_CONRADY,
            "inverse_brown_conrady" => rs2_distortion::INVERSE_BROWN_CONRADY,
            other => panic!("unexpected model {other}"),
        };
        let f32_of = |v: &serde_json::Value| v.as_f64().unwrap() as f32;
        let raw = Rs2IntrinsicsFields {
            width: i["width"].as_i64().unwrap() as i32,
            height: i["height"].as_i64().unwrap() as i32,
            ppx: f32_of(&i["ppx"]),
            ppy: f32_of(&i["ppy"]),
            fx: f32_of(&i["fx"]),
            fy: f32_of(&i["fy"]),
            model: ordinal,
            coeffs: std::array::from_fn(|j| f32_of(&i["coeffs"][j])),
        };
        let k = intrinsics_from_rs2(&raw, "colour").unwrap();
        for row in case["deproject"].as_array().unwrap() {
            let r: Vec<f64> = row
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            let p = k.deproject([r[0], r[1]], r[2]).unwrap();
            for (ours, theirs) in [p.x, p.y, p.z].iter().zip(&r[3..6]) {
                assert!(
                    (ours - theirs).abs() < 1e-6,
                    "{}: pixel ({}, {}) depth {}: {ours} vs librealsense {theirs}",
                    case["name"],
                    r[0],
                    r[1],
                    r[2]
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 300, "only {checked} golden points checked");
}

#[test]
fn options_are_checked() {
    let ok = RealSenseOptions::default();
    assert!(ok.validate().is_ok());
    assert_eq!((ok.width, ok.height, ok.median_frames), (640, 480, 1));
    let zero_median = RealSenseOptions {
        median_frames: 0,
        ..Default::default()
    };
    assert!(matches!(
        zero_median.validate(),
        Err(RealSenseError::InvalidOption {
            field: "median_frames",
            ..
        })
    ));
}
