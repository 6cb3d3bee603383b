//! The `realsense` feature against the real librealsense (from the pyrealsense2 wheel in CI:
//! `scripts/realsense-from-wheel.sh`). No camera is connected here or in CI, so these tests prove
//! that the library is linked, loads and answers — not just that the code compiles — and that
//! "no device" is the clear, typed error. On a machine with a camera plugged in, the device tests
//! check the wrong-serial error instead.
use crate::camera::realsense::device::{
    bindings_version, connected_serials, library_version, RealSenseCamera,
};
use crate::camera::realsense::{
    intrinsics_from_rs2, rs2_distortion, RealSenseError, RealSenseOptions, Rs2IntrinsicsFields,
    NO_DEVICE_MESSAGE,
};
use crate::camera::CameraError;
use realsense_sys as sys;

#[test]
fn the_loaded_library_is_the_bindings_version() {
    // rs2_get_api_version runs inside the loaded library: 2.56.5 is what the wheel ships
    // (pyrealsense2 2.56.5.9235) and what realsense-sys 2.56.5's bindings were generated from.
    let running = library_version().unwrap();
    assert_eq!(running, (2, 56, 5));
    assert_eq!(running, bindings_version());
}

#[test]
fn no_device_is_a_clear_error() {
    let serials = connected_serials().expect("librealsense context");
    if serials.is_empty() {
        let err = match RealSenseCamera::open(RealSenseOptions::default()) {
            Ok(_) => panic!("opened a camera although none is connected"),
            Err(e) => e,
        };
        assert!(matches!(err, RealSenseError::NoDevice), "{err:?}");
        assert_eq!(
            err.to_string(),
            "no RealSense device found: check the USB3 cable, `rs-enumerate-devices`"
        );
        assert_eq!(err.to_string(), NO_DEVICE_MESSAGE);
        // Through the Camera error type the message is unchanged.
        assert_eq!(CameraError::from(err).to_string(), NO_DEVICE_MESSAGE);
        // Asking for a serial with nothing connected is still "no device", the actionable one.
        let with_serial = RealSenseOptions {
            serial: Some("123456789012".into()),
            ..Default::default()
        };
        assert!(matches!(
            RealSenseCamera::open(with_serial),
            Err(RealSenseError::NoDevice)
        ));
    } else {
        let wrong = RealSenseOptions {
            serial: Some("not-a-serial".into()),
            ..Default::default()
        };
        match RealSenseCamera::open(wrong) {
            Err(RealSenseError::WrongSerial { wanted, found }) => {
                assert_eq!(wanted, "not-a-serial");
                assert_eq!(found, serials);
            }
            Err(e) => panic!("expected WrongSerial, got {e}"),
            Ok(_) => panic!("opened a device with a serial that does not exist"),
        }
    }
}

#[test]
fn bad_options_fail_before_touching_the_device() {
    let o = RealSenseOptions {
        median_frames: 0,
        ..Default::default()
    };
    assert!(matches!(
        RealSenseCamera::open(o),
        Err(RealSenseError::InvalidOption {
            field: "median_frames",
            ..
        })
    ));
}

#[test]
fn distortion_ordinals_match_the_bindings() {
    assert_eq!(
        rs2_distortion::NONE,
        sys::rs2_distortion_RS2_DISTORTION_NONE as i32
    );
    assert_eq!(
        rs2_distortion::MODIFIED_BROWN_CONRADY,
        sys::rs2_distortion_RS2_DISTORTION_MODIFIED_BROWN_CONRADY as i32
    );
    assert_eq!(
        rs2_distortion::INVERSE_BROWN_CONRADY,
        sys::rs2_distortion_RS2_DISTORTION_INVERSE_BROWN_CONRADY as i32
    );
    assert_eq!(
        rs2_distortion::FTHETA,
        sys::rs2_distortion_RS2_DISTORTION_FTHETA as i32
    );
    assert_eq!(
        rs2_distortion::BROWN_CONRADY,
        sys::rs2_distortion_RS2_DISTORTION_BROWN_CONRADY as i32
    );
    assert_eq!(
        rs2_distortion::KANNALA_BRANDT4,
        sys::rs2_distortion_RS2_DISTORTION_KANNALA_BRANDT4 as i32
    );
}

/// An `rs2_intrinsics` as the device hands it over, converted by the same code the camera uses,
/// deprojects like librealsense's own `rs2_deproject_pixel_to_point` — called in the loaded
/// library, so this is the library itself as the reference, not a copy of its numbers.
#[test]
fn converted_device_intrinsics_deproject_like_the_library() {
    let cases = [
        // L515 colour-like Brown-Conrady with real coefficients.
        (
            rs2_distortion::BROWN_CONRADY,
            [0.1715f32, -0.5263, -0.00121, 0.00043, 0.4874],
        ),
        // D4xx colour: inverse Brown-Conrady (coefficients zero on real units; non-zero here).
        (
            rs2_distortion::INVERSE_BROWN_CONRADY,
            [-0.052, 0.061, 0.0013, -0.0021, -0.019],
        ),
        (rs2_distortion::NONE, [0.0; 5]),
    ];
    for (model, coeffs) in cases {
        let raw = sys::rs2_intrinsics {
            width: 640,
            height: 480,
            ppx: 321.5,
            ppy: 247.6,
            fx: 606.8,
            fy: 606.3,
            model: model as sys::rs2_distortion,
            coeffs,
        };
        let k = intrinsics_from_rs2(&Rs2IntrinsicsFields::from(&raw), "colour").unwrap();
        for (u, v, depth) in [
            (0.0f32, 0.0f32, 0.5f32),
            (321.5, 247.6, 1.0),
            (639.0, 479.0, 2.25),
            (100.25, 400.75, 0.8),
        ] {
            let mut point = [0f32; 3];
            // SAFETY: all three pointers are valid for the duration of the call; the function
            // only reads `raw` and the pixel and writes three floats.
            unsafe {
                sys::rs2_deproject_pixel_to_point(point.as_mut_ptr(), &raw, [u, v].as_ptr(), depth)
            };
            let ours = k.deproject([u.into(), v.into()], depth.into()).unwrap();
            for (a, b) in [ours.x, ours.y, ours.z].iter().zip(point) {
                assert!(
                    (a - f64::from(b)).abs() < 2e-6,
                    "model {model} pixel ({u}, {v}) depth {depth}: ours {ours:?} vs librealsense {point:?}"
                );
            }
        }
    }
}
