//! `dataset::video` against FFmpeg: an H.264 MP4 written from synthetic frames is decoded by PyAV
//! (`tests/dataset_video.py`, `av==18.1.0` in `POINTACT_PYTHON`; CI installs it), LeRobot's own
//! decoding path. Asserted: every frame comes back, frame `i` at exactly `i / fps`, a key frame
//! every `gop` frames, each frame within the codec's error (PSNR ≥ 35 dB against the source), and a
//! seek to the middle lands on the right frame.

use std::time::Duration;

use super::common::{python, TempDir};
use pointact::dataset::video::{H264Writer, VideoOptions};

const SCRIPT: &str = concat!(
    concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
    "/tests/dataset_video.py"
);

/// A frame like a rendered scene: smooth shading, a block moving across it, mild noise.
fn frame(i: usize, w: usize, h: usize) -> Vec<u8> {
    let mut rgb = Vec::with_capacity(w * h * 3);
    let mut seed = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(1);
    for y in 0..h {
        for x in 0..w {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            let noise = (seed % 5) as i32 - 2;
            let inside = (x + 4 * i) % w < 60 && (40..120).contains(&y);
            let (r, g, b) = if inside {
                (200, 60, 40)
            } else {
                (
                    (x * 255 / w) as i32,
                    (y * 255 / h) as i32,
                    (128 + (x + y) as i32 / 8) % 256,
                )
            };
            rgb.extend([r, g, b].map(|c| (c + noise).clamp(0, 255) as u8));
        }
    }
    rgb
}

#[test]
fn pyav_decodes_every_frame_at_its_time_within_the_codec_error() {
    let Some(py) = python::interpreter("av", "av==18.1.0", "the H.264 video test") else {
        return;
    };
    let dir = TempDir::new("dataset-video");
    let (w, h, n) = (320usize, 240usize, 24usize);
    let options = VideoOptions {
        fps: 10,
        gop: 2,
        qp: 23,
    };
    let path = dir.path().join("ep.mp4");
    let mut writer = H264Writer::create(&path, w as u32, h as u32, options).unwrap();
    let mut raw = Vec::new();
    for i in 0..n {
        let f = frame(i, w, h);
        writer.push_rgb(&f).unwrap();
        raw.extend_from_slice(&f);
    }
    assert_eq!(writer.frames(), n);
    writer.finish().unwrap();
    let raw_path = dir.path().join("ep.rgb");
    std::fs::write(&raw_path, &raw).unwrap();

    let run = python::run_script(
        &py,
        SCRIPT,
        &[
            path.to_str().unwrap(),
            raw_path.to_str().unwrap(),
            &w.to_string(),
            &h.to_string(),
        ],
        Duration::from_secs(120),
    );
    assert!(
        run.status.is_some_and(|s| s.success()),
        "dataset_video.py failed\n{}",
        run.transcript()
    );
    let out: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!(out["codec"], "h264");
    assert_eq!(out["frames"], n);
    for (i, t) in out["pts_seconds"].as_array().unwrap().iter().enumerate() {
        let t = t.as_f64().unwrap();
        assert!((t - i as f64 / 10.0).abs() < 1e-9, "frame {i} at {t} s");
    }
    let keys: Vec<u64> = out["keyframes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_u64().unwrap())
        .collect();
    assert_eq!(keys, (0..n as u64).step_by(2).collect::<Vec<_>>());
    let psnr: Vec<f64> = out["psnr_db"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_f64().unwrap_or(f64::INFINITY))
        .collect();
    eprintln!("PSNR per frame: {psnr:.1?}");
    assert!(psnr.iter().all(|&p| p >= 35.0), "{psnr:?}");
    assert_eq!(out["seek_ok"], true);
}
