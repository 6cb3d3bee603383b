//! Hand-eye calibration through a robot driver, as on hardware: the real xArm driver moves the arm
//! (the xArm controller emulator driving the simulator's arm, which carries the tag) through the
//! standard views via the safety gate, the simulator's camera captures, and the solve must find the
//! camera's true pose within the `--sim` bar (2 mm, 0.2°).

use pointact::calibrate::sim::{SimCalibrationOptions, SimRig, VIEW_CENTRE};
use pointact::calibrate::target::views::{capture_views, standard_view_poses};
use pointact::calibrate::{calibrate_views, Method};
use pointact::nalgebra::Point3;
use pointact::robot::xarm::emulator::EmulatorOptions;
use pointact::robot::xarm::XarmRobot;
use pointact::runner::SimXarm;
use pointact::safety::SafetyConfig;

#[test]
fn calibration_through_the_xarm_driver_recovers_the_simulated_camera() {
    let opts = SimCalibrationOptions::default();
    let rig = SimRig::new(&opts.target).unwrap();
    let world = rig.camera.world().clone();
    let truth = rig.camera.pinhole().world_from_camera;
    let sim = SimXarm::start(
        &world,
        rig.model.clone(),
        rig.model.home().to_vec(),
        EmulatorOptions {
            command_port: 0,
            report_port: 0,
            rt_port: 0,
            ..EmulatorOptions::default()
        },
    )
    .unwrap();
    let poses = standard_view_poses(
        &rig.eye,
        &Point3::from(VIEW_CENTRE),
        &rig.tcp_from_target,
        opts.views,
        opts.seed,
    );
    let mut camera = rig.camera;
    let run = super::common::block_on(async {
        let mut robot = XarmRobot::connect(rig.model.clone(), &sim.settings)
            .await
            .unwrap();
        capture_views(
            &mut robot,
            &mut camera,
            &poses,
            SafetyConfig::default(),
            &[],
        )
        .await
        .unwrap()
    });
    assert!(run.skipped.is_empty(), "{:?}", run.skipped);
    assert_eq!(run.views.len(), opts.views);
    let dir = super::common::TempDir::new("calibrate-live");
    let c = calibrate_views(
        &run.views,
        &opts.target,
        Method::ParkMartin,
        dir.path(),
        "live",
    )
    .unwrap();
    assert!(c.skipped.is_empty(), "{:?}", c.skipped);
    let d = truth.inverse() * c.solution.base_from_camera;
    let (mm, deg) = (
        d.translation.vector.norm() * 1e3,
        d.rotation.angle().to_degrees(),
    );
    eprintln!("through the xArm driver: {mm:.3} mm, {deg:.4} deg off the true camera pose");
    assert!(mm < 2.0 && deg < 0.2, "{mm} mm, {deg} deg");
    assert!(c.path.exists());
}
