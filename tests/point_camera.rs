//! `point --camera` and `capture`: lifting answered pixels on a recorded frame (what
//! `--camera replay:DIR` reports), the recording folder rules, and the CLI's answers when the
//! RealSense is not built in or not connected.

use std::process::Command;

use pointact::camera::lift::lift_points;
use pointact::camera::record::{frame_dir, prepare_out_dir, write_frame};
use pointact::camera::replay::from_spec;
use pointact::camera::{Camera, Frame, RgbImage};
use pointact::geometry::synthetic::camera_look_at;
use pointact::geometry::synthetic::TabletopScene;
use pointact::geometry::{Intrinsics, RayTable, RobustDepthOptions};
use pointact::nalgebra::{Point3, Vector3};

mod common;
use common::TempDir;

/// The analytic tabletop (table at z = 0, boxes of known size) seen by a 640x480 camera.
fn analytic_frame() -> Frame {
    let k = Intrinsics::pinhole(640, 480, 600.0, 600.0, 319.5, 239.5);
    let base_from_camera = camera_look_at(
        Point3::new(0.1, 0.05, 0.9),
        Point3::new(0.45, 0.0, 0.0),
        Vector3::z(),
    )
    .unwrap();
    let depth = TabletopScene::example().render(&RayTable::new(&k).unwrap(), &base_from_camera);
    Frame {
        rgb: RgbImage::from_pixel(640, 480, image::Rgb([120, 110, 100])),
        depth,
        intrinsics: k,
        base_from_camera,
        stamp_s: 1.25,
    }
}

/// Lifting on a frame played back by `--camera replay:DIR` recovers the scene's known points: a
/// table point (z = 0) and the centre of the top of the 12 cm box, in both frames.
#[test]
fn replayed_frame_lifts_to_the_known_scene_points() {
    let original = analytic_frame();
    let tmp = TempDir::unmade("lift");
    write_frame(&original, &frame_dir(&tmp.0, 0)).unwrap();
    let spec = format!("replay:{}", tmp.0.display());
    let frame = from_spec(&spec).unwrap().capture().unwrap();

    let table = Point3::new(0.5, -0.2, 0.0);
    let box_top = Point3::new(0.35, -0.10, 0.12);
    let camera_from_base = frame.base_from_camera.inverse();
    let px = |p: &Point3<f64>| {
        frame
            .intrinsics
            .project(&(camera_from_base * p).coords)
            .unwrap()
    };
    let pixels = [px(&table), px(&box_top)];
    for (opts, name) in [
        (RobustDepthOptions::surface(), "surface"),
        (RobustDepthOptions::grasp(), "grasp"),
    ] {
        let lifted = lift_points(&frame, &pixels, &opts);
        assert_eq!(lifted.len(), 2);
        for ((l, truth), uv) in lifted.iter().zip([table, box_top]).zip(pixels) {
            assert_eq!(l.pixel, uv);
            let base = l.base.unwrap_or_else(|| panic!("{name}: {:?}", l.error));
            let cam = l.camera.unwrap();
            let cam_truth = camera_from_base * truth;
            for i in 0..3 {
                // 7x7 window on a tilted plane, depth stored in 0.1 mm steps: a few mm at most.
                assert!(
                    (base[i] - truth[i]).abs() < 4e-3,
                    "{name}: base {base:?} vs {truth:?}"
                );
                assert!(
                    (cam[i] - cam_truth[i]).abs() < 4e-3,
                    "{name}: camera {cam:?} vs {cam_truth:?}"
                );
            }
            // The two frames describe the same point.
            let back = frame.base_from_camera * Point3::new(cam[0], cam[1], cam[2]);
            assert!((back - Point3::from(base)).norm() < 1e-9);
        }
    }
}

/// A pixel without depth is reported per point, not as a failure of the whole answer.
#[test]
fn a_pixel_without_depth_is_reported_not_fatal() {
    let mut frame = analytic_frame();
    let table = Point3::new(0.5, -0.2, 0.0);
    let uv = frame
        .intrinsics
        .project(&(frame.base_from_camera.inverse() * table).coords)
        .unwrap();
    // Blank a 21x21 hole around the pixel.
    let (u0, v0) = (uv[0].round() as usize, uv[1].round() as usize);
    for v in v0 - 10..=v0 + 10 {
        for u in u0 - 10..=u0 + 10 {
            frame.depth.data[v * 640 + u] = 0.0;
        }
    }
    let lifted = lift_points(
        &frame,
        &[uv, [320.0, 240.0]],
        &RobustDepthOptions::surface(),
    );
    assert!(lifted[0].base.is_none() && lifted[0].camera.is_none());
    assert!(
        lifted[0]
            .error
            .as_deref()
            .unwrap()
            .contains("no usable depth"),
        "{:?}",
        lifted[0].error
    );
    assert!(lifted[1].base.is_some() && lifted[1].error.is_none());
    // The JSON leaves `error` out when there is none.
    let json = serde_json::to_value(&lifted).unwrap();
    assert!(json[1].get("error").is_none());
    assert!(json[0]["base"].is_null());
}

/// A recorded simulator frame lifts like the frame it was recorded from (depth is stored in
/// 0.1 mm units, so within a millimetre).
#[test]
fn recorded_sim_frame_lifts_like_the_live_one() {
    use pointact::sim::{devices::SimCamera, tasks};
    let ep = tasks::task(tasks::DEFAULT_TASK)
        .unwrap()
        .instantiate(0)
        .unwrap();
    let world = ep.world(ep.robot_model().unwrap()).unwrap();
    let world = pointact::sim::devices::SharedWorld::new(world);
    let live = SimCamera::new(world, Default::default()).capture().unwrap();
    let tmp = TempDir::unmade("sim");
    write_frame(&live, &frame_dir(&tmp.0, 0)).unwrap();
    let replayed = from_spec(&format!("replay:{}", tmp.0.display()))
        .unwrap()
        .capture()
        .unwrap();
    let (w, h) = (live.rgb.width() as f64, live.rgb.height() as f64);
    let pixels = [[w / 2.0, h / 2.0], [w * 0.3, h * 0.7], [w * 0.7, h * 0.6]];
    let a = lift_points(&live, &pixels, &RobustDepthOptions::grasp());
    let b = lift_points(&replayed, &pixels, &RobustDepthOptions::grasp());
    let mut compared = 0;
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.base.is_some(), y.base.is_some());
        if let (Some(p), Some(q)) = (x.base, y.base) {
            for i in 0..3 {
                assert!((p[i] - q[i]).abs() < 1e-3, "{p:?} vs {q:?}");
            }
            compared += 1;
        }
    }
    assert!(compared >= 2, "only {compared} pixels had depth");
}

#[test]
fn out_dir_is_never_mixed_or_overwritten_without_force() {
    let tmp = TempDir::unmade("outdir");
    // Missing: created.
    prepare_out_dir(&tmp.0, false).unwrap();
    assert!(tmp.0.is_dir());
    // Empty: fine.
    prepare_out_dir(&tmp.0, false).unwrap();
    std::fs::create_dir_all(frame_dir(&tmp.0, 0)).unwrap();
    std::fs::write(frame_dir(&tmp.0, 0).join("rgb.png"), b"old").unwrap();
    std::fs::create_dir_all(frame_dir(&tmp.0, 12)).unwrap();
    std::fs::write(tmp.0.join("notes.txt"), b"keep").unwrap();
    // Non-empty without force: an error that says what to do, nothing removed.
    let e = prepare_out_dir(&tmp.0, false).unwrap_err().to_string();
    assert!(e.contains("is not empty") && e.contains("--force"), "{e}");
    assert!(frame_dir(&tmp.0, 0).join("rgb.png").is_file());
    // With force: the numbered frame folders go, other files stay.
    prepare_out_dir(&tmp.0, true).unwrap();
    assert!(!frame_dir(&tmp.0, 0).exists());
    assert!(!frame_dir(&tmp.0, 12).exists());
    assert_eq!(std::fs::read(tmp.0.join("notes.txt")).unwrap(), b"keep");
    assert_eq!(frame_dir(&tmp.0, 7), tmp.0.join("0007"));
    // A file where the folder should be.
    let file = tmp.0.join("notes.txt");
    assert!(prepare_out_dir(&file, true)
        .unwrap_err()
        .to_string()
        .contains("not a folder"));
}

fn pointact(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pointact"))
        .args(args)
        .output()
        .unwrap()
}

#[cfg(not(feature = "realsense"))]
#[test]
fn without_the_feature_capture_and_camera_realsense_exit_2() {
    let tmp = TempDir::unmade("nofeature");
    let out = tmp.0.to_str().unwrap();
    let want = "pointact was built without the `realsense` feature; rebuild with `--features realsense` (see docs/install.md, RealSense)";
    let o = pointact(&["capture", "--out", out]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains(want));
    assert!(!tmp.0.exists(), "capture created its folder anyway");
    let o = pointact(&[
        "point",
        "--camera",
        "realsense",
        "--ability",
        "reg",
        "--instruction",
        "the mug",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains(want));
}

#[cfg(feature = "realsense")]
#[test]
fn with_the_feature_and_no_device_capture_fails_clearly_and_writes_nothing() {
    use pointact::camera::realsense::{device::connected_serials, NO_DEVICE_MESSAGE};
    if !connected_serials().unwrap().is_empty() {
        eprintln!("a RealSense is connected: the no-device case cannot be checked here");
        return;
    }
    let tmp = TempDir::unmade("nodevice");
    let o = pointact(&["capture", "--out", tmp.0.to_str().unwrap(), "--frames", "2"]);
    assert_eq!(o.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains(NO_DEVICE_MESSAGE), "{stderr}");
    assert!(!tmp.0.exists(), "a failed capture created its folder");
}

#[test]
fn point_needs_an_image_or_a_camera() {
    let o = pointact(&["point", "--ability", "reg", "--instruction", "the mug"]);
    assert_eq!(o.status.code(), Some(2)); // clap's usage error
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("--image") || stderr.contains("--camera"),
        "{stderr}"
    );
    let o = pointact(&[
        "point",
        "--camera",
        "replay:/nonexistent/pointact-frames",
        "--ability",
        "reg",
        "--instruction",
        "the mug",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("/nonexistent/pointact-frames"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// One-request OpenAI-compatible server on loopback that answers `content`.
fn mock_server(content: &'static str) -> (String, std::thread::JoinHandle<()>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 {
                return;
            }
            let line = line.trim_end().to_ascii_lowercase();
            if line.is_empty() {
                break;
            }
            if let Some(v) = line.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let reply = serde_json::json!({
            "id": "mock", "object": "chat.completion", "model": "embodied-r1",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": "stop"}],
        })
        .to_string();
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
            reply.len()
        )
        .unwrap();
    });
    (url, handle)
}

/// The whole CLI path: `point --camera replay:DIR` sends the recorded RGB to the pointer and the
/// JSON carries the answered points lifted with the recorded depth: a point on the analytic table
/// lands at z = 0 in the base frame, and its camera-frame coordinates map to the same point.
#[test]
fn point_with_a_replay_camera_reports_lifted_points() {
    let frame = analytic_frame();
    let tmp = TempDir::unmade("cli");
    write_frame(&frame, &frame_dir(&tmp.0, 0)).unwrap();
    // The table point (0.5, -0.2, 0) is at about image pixel (434.6, 195.9); 640x480 is seen by the
    // model as 644x476, and any pixel near it is still on the table.
    let uv = frame
        .intrinsics
        .project(&(frame.base_from_camera.inverse() * Point3::new(0.5, -0.2, 0.0)).coords)
        .unwrap();
    assert!(
        (uv[0] - 434.6).abs() < 1.0 && (uv[1] - 195.9).abs() < 1.0,
        "{uv:?}"
    );
    let (url, server) = mock_server("<answer><point>[[437, 194]]</point></answer>");
    let overlay = tmp.0.join("overlay.png");
    let o = pointact(&[
        "point",
        "--camera",
        &format!("replay:{}", tmp.0.display()),
        "--pointer",
        "openai",
        "--endpoint",
        &url,
        "--ability",
        "reg",
        "--instruction",
        "the table",
        "--overlay",
        overlay.to_str().unwrap(),
    ]);
    server.join().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let points = json["points"].as_array().unwrap();
    let lifted = json["lifted"].as_array().unwrap();
    assert_eq!((points.len(), lifted.len()), (1, 1));
    assert_eq!(lifted[0]["pixel"], points[0]);
    let v = |x: &serde_json::Value| -> Vec<f64> {
        x.as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_f64().unwrap())
            .collect()
    };
    let base = v(&lifted[0]["base"]);
    let cam = v(&lifted[0]["camera"]);
    assert!(base[2].abs() < 3e-3, "table point lifted to {base:?}");
    assert!(
        (base[0] - 0.5).abs() < 0.01 && (base[1] + 0.2).abs() < 0.01,
        "{base:?}"
    );
    let back = frame.base_from_camera * Point3::new(cam[0], cam[1], cam[2]);
    assert!((back - Point3::new(base[0], base[1], base[2])).norm() < 1e-6);
    assert!(overlay.is_file());
}
