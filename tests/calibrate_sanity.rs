//! The sanity check before a calibration file is written: a solve that succeeds on garbage (pairs
//! out of order, a pose in millimetres, a 1e300 translation, a wrong tag size) is a typed
//! `CalibrateError::Implausible` naming the likely mistake, and the previous file stays byte for
//! byte as it was; good data is written; `--force` writes the implausible one.
//!
//! Samples are exact (`C_i = X⁻¹ T_i Y` from a known camera `X` and tag mount `Y`, as in
//! `tests/calibrate_handeye.rs`), then broken in one known way.

mod common;

use common::handeye::{gripper_from_target, look_at, random_axis, tilted_samples};
use common::temp_dir;
use std::path::Path;

use pointact::calibrate::file::{
    check_plausible, samples_to_json_string, solve_and_write, solve_check_and_write,
    CalibrateError, CalibrateOptions, Implausibility, LikelyMistake, SanityLimits, Violation,
};
use pointact::calibrate::sim::{capture_sim_session, SimCalibrationOptions};
use pointact::calibrate::target::TagTarget;
use pointact::calibrate::{calibrate_views, solve_eye_to_hand, HandEyeSample, Method};
use pointact::geometry::calibration::Extrinsics;
use pointact::nalgebra::{Isometry3, UnitQuaternion, Vector3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const METHODS: [Method; 2] = [Method::TsaiLenz, Method::ParkMartin];

/// A calibration file that must survive a refused write byte for byte (odd spacing and a
/// comment included, so a rewrite of the same values would still show).
const EXISTING: &str = "# hand-written, keep me\n[extrinsics]\ncamera = \"front\"\n\
translation = [0.95,  0.05, 0.55]\nquaternion = { w = 1.0, x = 0.0, y = 0.0, z = 0.0 }\n";

fn camera() -> Isometry3<f64> {
    look_at([0.95, 0.05, 0.55], [0.38, 0.0, 0.1])
}

/// Exact samples: robot poses tilted 10-35° about random axes around a nominal one, camera poses
/// from the chain, so good data has residuals ~0.
fn good_samples(n: usize, seed: u64) -> Vec<HandEyeSample> {
    tilted_samples(
        &camera(),
        &gripper_from_target(),
        n,
        seed,
        10.0..35.0,
        |axis, angle| UnitQuaternion::from_axis_angle(&axis, angle),
    )
}

/// Pairs out of order: every robot pose matched with the next sample's camera pose.
fn shuffled(n: usize, seed: u64) -> Vec<HandEyeSample> {
    let good = good_samples(n, seed);
    (0..n)
        .map(|i| HandEyeSample {
            base_from_gripper: good[i].base_from_gripper,
            camera_from_target: good[(i + 1) % n].camera_from_target,
        })
        .collect()
}

/// Sample 4's robot pose in millimetres.
fn one_in_millimetres() -> Vec<HandEyeSample> {
    let mut s = good_samples(12, 3);
    s[4].base_from_gripper.translation.vector *= 1e3;
    s
}

/// Every camera pose's translation 10x too long: the tag size given 10x too large.
fn tag_size_10x() -> Vec<HandEyeSample> {
    let mut s = good_samples(12, 3);
    for x in &mut s {
        x.camera_from_target.translation.vector *= 10.0;
    }
    s
}

/// Writes [`EXISTING`] as `dir/front.toml` and returns its path.
fn existing(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("front.toml");
    std::fs::write(&path, EXISTING).expect("write");
    path
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The refusal of `samples` for every method: Implausible, the message's parts, the file kept
/// byte for byte and no temporary file left. Returns the report of the last method.
fn refused(tag: &str, samples: &[HandEyeSample]) -> Implausibility {
    let dir = temp_dir(tag);
    let path = existing(&dir);
    let mut last = None;
    for method in METHODS {
        let e = solve_and_write(samples, method, &dir, "front").expect_err("implausible");
        eprintln!("{tag} {method}: {e}");
        let CalibrateError::Implausible {
            file,
            existed,
            report,
        } = &e
        else {
            panic!("{tag} {method}: not Implausible: {e:?}");
        };
        assert_eq!(file, &path);
        assert!(*existed);
        let msg = e.to_string();
        assert!(msg.contains("Likely mistake: "), "{msg}");
        assert!(msg.contains("was kept"), "{msg}");
        assert!(msg.contains("limit"), "{msg}");
        if report.finite {
            assert!(msg.contains("--force"), "{msg}");
        }
        assert_eq!(
            std::fs::read(&path).expect("still there"),
            EXISTING.as_bytes(),
            "{tag} {method}: the previous file changed"
        );
        assert_eq!(entries(&dir), vec!["front.toml".to_string()], "temp file");
        last = Some(report.clone());
    }
    let _ = std::fs::remove_dir_all(&dir);
    last.expect("two methods")
}

// ---- the limits --------------------------------------------------------------------------------

#[test]
fn default_limits_are_2_degrees_20_mm_and_5_m() {
    assert_eq!(
        SanityLimits::default(),
        SanityLimits {
            max_rotation_rms_deg: 2.0,
            max_translation_rms_mm: 20.0,
            max_camera_distance_m: 5.0,
        }
    );
}

#[test]
fn good_data_passes_and_is_written_over_the_previous_file() {
    let dir = temp_dir("sanity-good");
    let path = existing(&dir);
    let samples = good_samples(12, 3);
    for method in METHODS {
        let w = solve_check_and_write(&samples, method, &dir, "front").expect("written");
        assert_eq!(w.path, path);
        assert!(w.forced.is_none());
        let ex = Extrinsics::load(&path).expect("loads");
        let d = ex.base_from_camera.inverse() * camera();
        assert!(d.translation.vector.norm() < 1e-6, "{d:?}");
        assert_ne!(std::fs::read(&path).expect("read"), EXISTING.as_bytes());
    }
    // Noise of real data (0.5° and 5 mm per camera pose) is well within the limits.
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let mut noisy = good_samples(15, 4);
    for s in &mut noisy {
        let c = &mut s.camera_from_target;
        c.translation.vector += Vector3::from_fn(|_, _| rng.gen_range(-0.005..0.005));
        let turn = UnitQuaternion::from_axis_angle(&random_axis(&mut rng), 0.5f64.to_radians());
        c.rotation = turn * c.rotation;
    }
    for method in METHODS {
        let s = solve_eye_to_hand(&noisy, method).expect("solves");
        let r = &s.residuals;
        eprintln!(
            "noisy {method}: {:.3}° {:.2} mm",
            r.rotation_rms_deg, r.translation_rms_mm
        );
        assert_eq!(
            check_plausible(&noisy, &s, &SanityLimits::default()),
            Ok(())
        );
        solve_and_write(&noisy, method, &dir, "front").expect("written");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- each mistake, named -----------------------------------------------------------------------

#[test]
fn shuffled_pairs_are_refused_as_out_of_order() {
    let report = refused("sanity-shuffled", &shuffled(12, 3));
    assert!(
        matches!(report.mistake, LikelyMistake::OutOfOrder { over, of: 12 } if over > 6),
        "{report:?}"
    );
    assert!(report
        .violations
        .iter()
        .any(|v| matches!(v, Violation::RotationRms { deg, limit_deg } if *deg > 5.0 && *limit_deg == 2.0)));
    assert!(report.to_string().contains("out of order"), "{report}");
}

#[test]
fn one_pose_in_millimetres_is_refused_as_millimetres() {
    let report = refused("sanity-mm", &one_in_millimetres());
    assert!(
        matches!(
            report.mistake,
            LikelyMistake::Millimetres { sample: 4, field: "base_from_gripper", norm_m } if norm_m > 100.0
        ),
        "{report:?}"
    );
    let msg = report.to_string();
    assert!(
        msg.contains("samples[4].base_from_gripper")
            && msg.contains("poses look like millimetres, pointact expects metres"),
        "{msg}"
    );
}

#[test]
fn a_wrong_tag_size_is_refused_as_the_tag_size() {
    let samples = tag_size_10x();
    let report = refused("sanity-tag", &samples);
    assert!(
        matches!(report.mistake, LikelyMistake::TagSize { of: 12, .. }),
        "{report:?}"
    );
    assert!(
        report.to_string().contains("the tag size looks wrong"),
        "{report}"
    );
    // The pattern it relies on: rotations untouched by the scale, translations far off.
    let s = solve_eye_to_hand(&samples, Method::ParkMartin).expect("solves");
    assert!(s.residuals.rotation_rms_deg < 1e-6, "{:?}", s.residuals);
    assert!(s.residuals.translation_rms_mm > 100.0, "{:?}", s.residuals);
}

#[test]
fn a_few_bad_samples_are_named_and_others_get_a_generic_hint() {
    // Sample 7's camera pose 30 cm off (a bad detection, not a global mistake): the fit spreads
    // it, 10 of 12 samples end up over 20 mm, but sample 7 stands out from the median (~28 mm).
    let mut samples = good_samples(12, 3);
    samples[7].camera_from_target.translation.vector.x += 0.3;
    let report = refused("sanity-few", &samples);
    assert_eq!(
        report.mistake,
        LikelyMistake::FewSamples { samples: vec![7] },
        "{report}"
    );
    assert!(
        report.to_string().contains("samples [7] disagree"),
        "{report}"
    );
    // Good residuals but a camera 6 m away (a tighter limit): no pattern to name.
    let good = good_samples(12, 3);
    let s = solve_eye_to_hand(&good, Method::ParkMartin).expect("solves");
    let limits = SanityLimits {
        max_camera_distance_m: 0.5,
        ..SanityLimits::default()
    };
    let report = check_plausible(&good, &s, &limits).expect_err("camera ~1.1 m > 0.5 m");
    assert_eq!(report.mistake, LikelyMistake::Unknown);
    assert!(matches!(
        report.violations[..],
        [Violation::CameraDistance { limit_m, .. }] if limit_m == 0.5
    ));
    assert!(
        report.to_string().contains("check the conventions"),
        "{report}"
    );
}

#[test]
fn a_1e300_translation_is_an_error_and_nothing_is_written() {
    let mut samples = good_samples(12, 3);
    samples[2].camera_from_target.translation.vector.x = 1e300;
    let dir = temp_dir("sanity-1e300");
    for force in [false, true] {
        for method in METHODS {
            let options = CalibrateOptions {
                force,
                ..CalibrateOptions::from(method)
            };
            let e = solve_and_write(&samples, options, &dir, "front").expect_err("refused");
            eprintln!("1e300 {method} force={force}: {e}");
            match &e {
                CalibrateError::Implausible {
                    existed, report, ..
                } => {
                    assert!(!existed);
                    assert!(
                        matches!(
                            report.mistake,
                            LikelyMistake::AbsurdTranslation {
                                sample: 2,
                                field: "camera_from_target"
                            }
                        ),
                        "{report:?}"
                    );
                    assert!(e.to_string().contains("Nothing was written"), "{e}");
                }
                CalibrateError::Solve(_) => {}
                other => panic!("{other:?}"),
            }
            assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn images_with_the_tag_size_10x_wrong_are_refused_as_the_tag_size() {
    // The image path (`--frames`, `--sim`) writes through the same check: the simulator's views
    // with the tag declared 1 m instead of 0.1 m (PnP translations 10x too long).
    let s = common::block_on(capture_sim_session(&SimCalibrationOptions::default()))
        .expect("sim session");
    let dir = temp_dir("sanity-views");
    let path = dir.join("sim.toml");
    std::fs::write(&path, EXISTING).expect("write");
    let wrong = TagTarget::tag36h11(s.info.target.id, s.info.target.size_m * 10.0);
    let e =
        calibrate_views(&s.views, &wrong, Method::ParkMartin, &dir, "sim").expect_err("refused");
    eprintln!("{e}");
    let CalibrateError::Implausible { report, .. } = &e else {
        panic!("{e:?}");
    };
    assert!(
        matches!(report.mistake, LikelyMistake::TagSize { .. }),
        "{report}"
    );
    assert_eq!(std::fs::read(&path).expect("read"), EXISTING.as_bytes());
    // The right size passes and is written.
    let c = calibrate_views(&s.views, &s.info.target, Method::ParkMartin, &dir, "sim")
        .expect("written");
    assert!(c.forced.is_none());
    assert_ne!(std::fs::read(&path).expect("read"), EXISTING.as_bytes());
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- --force -----------------------------------------------------------------------------------

#[test]
fn force_writes_the_implausible_solve_and_says_so() {
    let dir = temp_dir("sanity-force");
    let path = existing(&dir);
    let samples = shuffled(12, 3);
    let options = CalibrateOptions {
        force: true,
        ..CalibrateOptions::from(Method::ParkMartin)
    };
    let w = solve_check_and_write(&samples, options, &dir, "front").expect("forced");
    assert_eq!(w.path, path);
    let report = w.forced.expect("reported as forced");
    assert!(matches!(report.mistake, LikelyMistake::OutOfOrder { .. }));
    assert_ne!(std::fs::read(&path).expect("read"), EXISTING.as_bytes());
    let ex = Extrinsics::load(&path).expect("loads");
    let d = ex.base_from_camera.inverse() * w.solution.base_from_camera;
    assert!(d.translation.vector.norm() < 1e-9 && d.rotation.angle() < 1e-9);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- the command line --------------------------------------------------------------------------

#[test]
fn cli_refuses_shuffled_pairs_keeps_the_file_and_force_writes() {
    let dir = temp_dir("sanity-cli");
    let path = existing(&dir);
    let samples_path = dir.join("poses.json");
    std::fs::write(&samples_path, samples_to_json_string(&shuffled(12, 3))).expect("write");
    let exe = env!("CARGO_BIN_EXE_pointact");
    let run = |force: bool| {
        let mut cmd = std::process::Command::new(exe);
        cmd.args(["calibrate", "hand-eye", "--samples"])
            .arg(&samples_path)
            .args(["--camera", "front", "--out"])
            .arg(&dir);
        if force {
            cmd.arg("--force");
        }
        cmd.output().expect("runs")
    };
    let out = run(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("pose pairs look out of order")
            && stderr.contains("rotation RMS")
            && stderr.contains("2° limit")
            && stderr.contains("was kept")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&path).expect("read"), EXISTING.as_bytes());
    assert_eq!(
        entries(&dir),
        vec!["front.toml".to_string(), "poses.json".to_string()]
    );

    let out = run(true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("--force") && stderr.contains("out of order"),
        "{stderr}"
    );
    assert_ne!(std::fs::read(&path).expect("read"), EXISTING.as_bytes());
    Extrinsics::load(&path).expect("the forced file loads");
    let _ = std::fs::remove_dir_all(&dir);
}
