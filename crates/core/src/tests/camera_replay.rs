//! Recorded frames: `read_frame` inverts `write_frame`, `ReplayCamera` plays folders in order, and
//! every bad input fails with a typed error that names the file.

use std::path::{Path, PathBuf};

use crate::camera::record::{write_frame, RECORD_DEPTH_SCALE_M};
use crate::camera::replay::{from_spec, read_frame, ReplayCamera, ReplayError};
use crate::camera::{Camera, CameraError, Frame, RgbImage};
use crate::geometry::calibration::CameraCalibration;
use crate::geometry::calibration::Extrinsics;
use crate::geometry::synthetic::camera_look_at;
use crate::geometry::synthetic::TabletopScene;
use crate::geometry::{Distortion, Intrinsics, RayTable};
use k::nalgebra::{Point3, Vector3};

/// A temp folder unique to this process and test, removed on drop.
use super::temp::TempDir;

/// The analytic tabletop seen from above, with NaN and 0 holes, a colour gradient and a
/// distortion model, so every field of the frame is exercised.
fn synthetic_frame(stamp_s: f64) -> Frame {
    let (w, h) = (64, 48);
    let pinhole = Intrinsics::pinhole(w, h, 60.0, 61.5, 31.7, 23.2);
    let base_from_camera = camera_look_at(
        Point3::new(0.1, 0.05, 0.9),
        Point3::new(0.45, 0.0, 0.0),
        Vector3::z(),
    )
    .unwrap();
    let rays = RayTable::new(&pinhole).unwrap();
    let mut depth = TabletopScene::example().render(&rays, &base_from_camera);
    depth.data[0] = f32::NAN;
    depth.data[7] = 0.0;
    depth.data[w * h - 1] = f32::NAN;
    let rgb = RgbImage::from_fn(w as u32, h as u32, |u, v| {
        image::Rgb([(u * 4) as u8, (v * 5) as u8, ((u * 7 + v * 3) % 256) as u8])
    });
    let intrinsics = Intrinsics {
        model: Distortion::BrownConrady,
        coeffs: [0.11, -0.023, 0.0007, -0.0004, 0.0012],
        ..pinhole
    };
    Frame {
        rgb,
        depth,
        intrinsics,
        base_from_camera,
        stamp_s,
    }
}

fn valid(d: f32) -> bool {
    d.is_finite() && d > 0.0
}

/// A recorded frame folder `root/name`, written by `write_frame`.
fn recorded(root: &Path, name: &str, stamp_s: f64) -> PathBuf {
    let dir = root.join(name);
    write_frame(&synthetic_frame(stamp_s), &dir).unwrap();
    dir
}

fn replay_err(e: CameraError) -> ReplayError {
    match e {
        CameraError::Replay(r) => r,
        other => panic!("expected a replay error, got {other:?}"),
    }
}

#[test]
fn round_trip_reproduces_the_frame() {
    let tmp = TempDir::new("round-trip");
    let original = synthetic_frame(12.345678901);
    write_frame(&original, &tmp.0).unwrap();
    let back = read_frame(&tmp.0).unwrap();

    assert_eq!(
        back.rgb.as_raw(),
        original.rgb.as_raw(),
        "rgb bit-identical"
    );
    assert_eq!((back.depth.width, back.depth.height), (64, 48));
    // Half a quantisation step, plus f32 rounding of metres near 1 m.
    let tol = 0.5 * RECORD_DEPTH_SCALE_M as f32 + 1e-6;
    let mut n_valid = 0;
    for (i, (&a, &b)) in original.depth.data.iter().zip(&back.depth.data).enumerate() {
        assert_eq!(valid(a), valid(b), "validity of pixel {i}: {a} vs {b}");
        if valid(a) {
            n_valid += 1;
            assert!((a - b).abs() <= tol, "pixel {i}: {a} vs {b}");
        }
    }
    assert!(n_valid > 64 * 48 / 2, "the scene fills the image");

    let (k0, k1) = (&original.intrinsics, &back.intrinsics);
    assert_eq!(k1, k0, "intrinsics incl. distortion round-trip exactly");
    let t = back.base_from_camera.translation.vector - original.base_from_camera.translation.vector;
    assert!(t.norm() <= 1e-12, "translation off by {}", t.norm());
    let angle = back
        .base_from_camera
        .rotation
        .angle_to(&original.base_from_camera.rotation);
    assert!(angle <= 1e-12, "rotation off by {angle} rad");
    assert_eq!(back.stamp_s, original.stamp_s);
}

#[test]
fn frame_toml_without_scale_uses_the_record_scale() {
    let tmp = TempDir::new("no-scale");
    let dir = recorded(&tmp.0, "f", 3.5);
    let with_scale = read_frame(&dir).unwrap();
    std::fs::write(dir.join("frame.toml"), "stamp_s = 3.5\n").unwrap();
    let without = read_frame(&dir).unwrap();
    assert_eq!(without.depth, with_scale.depth);
    assert_eq!(without.stamp_s, 3.5);
}

#[test]
fn replay_folder_plays_frames_in_name_order_then_is_exhausted() {
    let tmp = TempDir::new("folder");
    // Written out of order: playback follows names, not creation time.
    for (name, stamp) in [("0002", 2.0), ("0000", 0.0), ("0001", 1.0)] {
        recorded(&tmp.0, name, stamp);
    }
    std::fs::write(tmp.0.join("notes.txt"), "not a frame").unwrap();
    let mut cam = ReplayCamera::open(&tmp.0).unwrap();
    assert_eq!(cam.frame_dirs().len(), 3);
    for want in [0.0, 1.0, 2.0] {
        assert_eq!(cam.capture().unwrap().stamp_s, want);
    }
    let e = replay_err(cam.capture().unwrap_err());
    assert!(
        matches!(e, ReplayError::Exhausted { frames: 3, ref dir } if dir == &tmp.0),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("replay exhausted after 3 frames"),
        "{e}"
    );

    let mut looping = ReplayCamera::open(&tmp.0).unwrap().looping(true);
    let stamps: Vec<f64> = (0..7).map(|_| looping.capture().unwrap().stamp_s).collect();
    assert_eq!(stamps, [0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 0.0]);
}

#[test]
fn replay_of_one_frame_folder() {
    let tmp = TempDir::new("single");
    let dir = recorded(&tmp.0, "only", 7.0);
    let mut cam = ReplayCamera::open(&dir).unwrap();
    assert_eq!(cam.capture().unwrap().stamp_s, 7.0);
    assert!(matches!(
        replay_err(cam.capture().unwrap_err()),
        ReplayError::Exhausted { frames: 1, .. }
    ));
}

#[test]
fn missing_folder_and_files_name_the_path() {
    let tmp = TempDir::new("missing");
    let nowhere = tmp.0.join("nowhere");
    for e in [
        read_frame(&nowhere).unwrap_err(),
        ReplayCamera::open(&nowhere).unwrap_err(),
    ] {
        assert!(
            matches!(replay_err(e), ReplayError::Io { ref file, .. } if file == &nowhere),
            "missing folder"
        );
    }
    let empty = tmp.0.join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(matches!(
        replay_err(ReplayCamera::open(&empty).unwrap_err()),
        ReplayError::NoFrames { ref dir } if dir == &empty
    ));
    for name in ["rgb.png", "depth.png", "camera.toml", "frame.toml"] {
        let dir = recorded(&tmp.0, name, 0.0);
        std::fs::remove_file(dir.join(name)).unwrap();
        let e = replay_err(read_frame(&dir).unwrap_err());
        assert!(
            matches!(e, ReplayError::Io { ref file, .. } if file == &dir.join(name)),
            "{name}: {e:?}"
        );
        assert!(e.to_string().contains(name), "{e}");
    }
}

#[test]
fn truncated_png_is_a_decode_error_naming_it() {
    let tmp = TempDir::new("corrupt");
    for name in ["rgb.png", "depth.png"] {
        let dir = recorded(&tmp.0, name, 0.0);
        let path = dir.join(name);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let e = replay_err(read_frame(&dir).unwrap_err());
        assert!(
            matches!(e, ReplayError::Decode { ref file, .. } if file == &path),
            "{name}: {e:?}"
        );
    }
}

#[test]
fn wrong_pixel_types_are_rejected() {
    let tmp = TempDir::new("pixels");
    let dir = recorded(&tmp.0, "grey-rgb", 0.0);
    image::GrayImage::new(64, 48)
        .save(dir.join("rgb.png"))
        .unwrap();
    let e = replay_err(read_frame(&dir).unwrap_err());
    assert!(
        matches!(e, ReplayError::PixelFormat { ref file, expected: "8-bit RGB", .. } if file == &dir.join("rgb.png")),
        "{e:?}"
    );

    let dir = recorded(&tmp.0, "8bit-depth", 0.0);
    image::GrayImage::new(64, 48)
        .save(dir.join("depth.png"))
        .unwrap();
    let e = replay_err(read_frame(&dir).unwrap_err());
    assert!(
        matches!(e, ReplayError::PixelFormat { ref file, expected: "16-bit gray", .. } if file == &dir.join("depth.png")),
        "{e:?}"
    );
}

#[test]
fn depth_and_colour_of_different_sizes() {
    let tmp = TempDir::new("sizes");
    let dir = recorded(&tmp.0, "f", 0.0);
    image::ImageBuffer::<image::Luma<u16>, Vec<u16>>::new(32, 48)
        .save(dir.join("depth.png"))
        .unwrap();
    let e = replay_err(read_frame(&dir).unwrap_err());
    assert!(
        matches!(
            &e,
            ReplayError::DepthSize {
                file,
                rgb_w: 64,
                rgb_h: 48,
                depth_w: 32,
                depth_h: 48
            } if *file == dir.join("depth.png")
        ),
        "{e:?}"
    );
}

#[test]
fn intrinsics_for_another_size_name_camera_toml() {
    let tmp = TempDir::new("intrinsics");
    let frame = synthetic_frame(0.0);
    let dir = recorded(&tmp.0, "f", 0.0);
    CameraCalibration {
        intrinsics: Intrinsics::pinhole(640, 480, 600.0, 600.0, 320.0, 240.0),
        extrinsics: Extrinsics {
            camera: "recorded".into(),
            base_from_camera: frame.base_from_camera,
        },
    }
    .save(&dir.join("camera.toml"))
    .unwrap();
    let e = replay_err(read_frame(&dir).unwrap_err());
    assert!(
        matches!(
            e,
            ReplayError::IntrinsicsSize { ref file, intrinsics_w: 640, intrinsics_h: 480, image_w: 64, image_h: 48 }
                if file == &dir.join("camera.toml")
        ),
        "{e:?}"
    );
}

#[test]
fn bad_frame_toml_names_file_and_field() {
    let tmp = TempDir::new("frame-toml");
    let dir = recorded(&tmp.0, "f", 0.0);
    // Negative; and (found by `fuzz_readers`) scales that become 0 or infinity as f32 metres,
    // which failed without naming the file, or that make 65535 units infinite.
    for scale in ["-1.0", "1e-50", "1e39", "1e35"] {
        std::fs::write(
            dir.join("frame.toml"),
            format!("depth_scale_m = {scale}\nstamp_s = 0.0\n"),
        )
        .unwrap();
        let e = replay_err(read_frame(&dir).unwrap_err());
        assert!(
            matches!(e, ReplayError::Field { ref file, field: "depth_scale_m", .. } if file == &dir.join("frame.toml")),
            "{scale}: {e:?}"
        );
    }
}

#[test]
fn camera_spec() {
    let tmp = TempDir::new("spec");
    recorded(&tmp.0, "0000", 4.0);
    let mut cam = from_spec(&format!("replay:{}", tmp.0.display())).unwrap();
    assert_eq!(cam.capture().unwrap().stamp_s, 4.0);

    for spec in ["foo:bar", "sim", "realsense", "replay:", "replay"] {
        let e = replay_err(from_spec(spec).unwrap_err());
        assert!(matches!(e, ReplayError::Spec { .. }), "{spec}: {e:?}");
        let msg = e.to_string();
        for known in ["replay:DIR", "sim", "realsense"] {
            assert!(msg.contains(known), "{spec}: {msg}");
        }
    }
}
