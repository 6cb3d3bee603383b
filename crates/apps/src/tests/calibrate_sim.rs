//! Hand-eye calibration end to end in the simulator, where the camera's true pose is known: the
//! tag rendered on the simulated xArm 6's tool, views visited through the safety gate, detection,
//! PnP, both solvers, the calibration file written — and the recovered camera pose compared with
//! the truth (issue bar: 2 mm and 0.2°). The same views replayed from a session folder give the
//! same answer, and a session whose tag is never seen writes nothing.

use super::common::TempDir;
use pointact::calibrate::file::CalibrateError;
use pointact::calibrate::sim::{capture_sim_session, SimCalibrationOptions, SimSession};
use pointact::calibrate::target::session::{read_session, write_session};
use pointact::calibrate::target::TagTarget;
use pointact::calibrate::{calibrate_views, HandEyeError, Method};
use pointact::geometry::calibration::Extrinsics;
use pointact::nalgebra::Isometry3;

fn session() -> SimSession {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(capture_sim_session(&SimCalibrationOptions::default()))
        .unwrap()
}

/// (mm, degrees) between two poses.
fn error(a: &Isometry3<f64>, b: &Isometry3<f64>) -> (f64, f64) {
    let d = a.inverse() * b;
    (
        d.translation.vector.norm() * 1e3,
        d.rotation.angle().to_degrees(),
    )
}

#[test]
fn the_simulated_camera_is_recovered_within_2_mm_and_0_2_degrees() {
    let s = session();
    assert!(s.skipped.is_empty(), "{:?}", s.skipped);
    assert!(s.views.len() >= 10, "{} views", s.views.len());
    // Removed when the test ends (the folder name carries the PID, so no later run would).
    let _solve = TempDir::new("solve");
    let dir = _solve.path().to_path_buf();
    for method in [Method::ParkMartin, Method::TsaiLenz] {
        let c = calibrate_views(&s.views, &s.info.target, method, &dir, "sim").unwrap();
        assert!(c.skipped.is_empty(), "{:?}", c.skipped);
        assert_eq!(c.used.len(), s.views.len());
        let (mm, deg) = error(&s.base_from_camera, &c.solution.base_from_camera);
        eprintln!("{method:?}: {mm:.3} mm, {deg:.4} deg off the true camera pose");
        assert!(mm < 2.0 && deg < 0.2, "{method:?}: {mm} mm, {deg} deg");
        // The file holds what was solved.
        let ex = Extrinsics::load(&c.path).unwrap();
        let (mm, deg) = error(&ex.base_from_camera, &c.solution.base_from_camera);
        assert!(mm < 1e-3 && deg < 1e-4, "file differs: {mm} mm {deg} deg");
        // Residuals are those of a consistent set: a few mm, not centimetres.
        assert!(c.solution.residuals.translation_max_mm < 10.0);
    }

    // The same views through a session folder (what `--frames DIR` reads) give the same pose.
    // Removed when the test ends (the folder name carries the PID, so no later run would).
    let _session = TempDir::new("session");
    let rec = _session.path().to_path_buf();
    write_session(&rec, &s.info, &s.views).unwrap();
    let back = read_session(&rec).unwrap();
    let direct = calibrate_views(&s.views, &s.info.target, Method::ParkMartin, &dir, "a").unwrap();
    let replayed = calibrate_views(
        &back.views,
        &back.info.target,
        Method::ParkMartin,
        &dir,
        "b",
    )
    .unwrap();
    let (mm, deg) = error(
        &direct.solution.base_from_camera,
        &replayed.solution.base_from_camera,
    );
    // Depth is stored at 0.05 mm resolution; the colour image is bit-exact.
    assert!(mm < 0.05 && deg < 0.001, "{mm} mm {deg} deg");
}

#[test]
fn a_tag_never_seen_writes_nothing() {
    let s = session();
    // Removed when the test ends (the folder name carries the PID, so no later run would).
    let _unseen = TempDir::new("unseen");
    let dir = _unseen.path().to_path_buf();
    let file = dir.join("sim.toml");
    std::fs::write(&file, "# an earlier calibration\n").unwrap();
    // Looking for another tag id: every view is skipped, the solve has no samples.
    let other = TagTarget::tag36h11(s.info.target.id + 1, s.info.target.size_m);
    let err = calibrate_views(&s.views, &other, Method::ParkMartin, &dir, "sim").unwrap_err();
    assert!(
        matches!(
            err,
            CalibrateError::Solve(HandEyeError::TooFewSamples { .. })
        ),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "# an earlier calibration\n"
    );
}
