//! `dataset::video` against FFmpeg: an H.264 MP4 written from synthetic frames is decoded by PyAV
//! (`tests/dataset_video.py`, `av==18.1.0` in `POINTACT_PYTHON`; CI installs it), LeRobot's own
//! decoding path. Asserted: every frame comes back, frame `i` at exactly `i / fps`, a key frame
//! every `gop` frames, each frame within the codec's error (PSNR ≥ 35 dB against the source), a
//! seek to the middle lands on the right frame, and a block that did not change decodes to the
//! same samples as in the frame before (the encoder skips it).

use super::common::{python, TempDir};
use pointact::dataset::video::{DepthWriter, H264Writer, VideoOptions};

const SCRIPT: &str = concat!(
    concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
    "/tests/dataset_video.py"
);
const DEPTH_SCRIPT: &str = concat!(
    concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
    "/tests/dataset_depth_video.py"
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

/// Writes `frames` as an MP4 with `options`, decodes it with PyAV and returns the script's report
/// (`None` when no Python with PyAV is available).
fn written_and_decoded(
    tag: &str,
    frames: &[Vec<u8>],
    (w, h): (usize, usize),
    options: VideoOptions,
) -> Option<serde_json::Value> {
    let py = python::interpreter("av", "av==18.1.0", "the H.264 video test")?;
    let dir = TempDir::new(tag);
    let path = dir.path().join("ep.mp4");
    let mut writer = H264Writer::create(&path, w as u32, h as u32, options).unwrap();
    for f in frames {
        writer.push_rgb(f).unwrap();
    }
    assert_eq!(writer.frames(), frames.len());
    writer.finish().unwrap();
    let raw_path = dir.path().join("ep.rgb");
    std::fs::write(&raw_path, frames.concat()).unwrap();
    Some(python::video_report(
        &py,
        SCRIPT,
        &path,
        &raw_path,
        (w as u32, h as u32),
    ))
}

fn keyframes(out: &serde_json::Value) -> Vec<u64> {
    out["keyframes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_u64().unwrap())
        .collect()
}

fn psnr(out: &serde_json::Value) -> Vec<f64> {
    out["psnr_db"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_f64().unwrap_or(f64::INFINITY))
        .collect()
}

#[test]
fn pyav_decodes_every_frame_at_its_time_within_the_codec_error() {
    let (w, h, n) = (320usize, 240usize, 24usize);
    let options = VideoOptions {
        fps: 10,
        gop: 2,
        qp: 23,
    };
    let frames: Vec<Vec<u8>> = (0..n).map(|i| frame(i, w, h)).collect();
    let Some(out) = written_and_decoded("video-moving", &frames, (w, h), options) else {
        return;
    };
    assert_eq!(out["codec"], "h264");
    assert_eq!(out["frames"], n);
    for (i, t) in out["pts_seconds"].as_array().unwrap().iter().enumerate() {
        let t = t.as_f64().unwrap();
        assert!((t - i as f64 / 10.0).abs() < 1e-9, "frame {i} at {t} s");
    }
    assert_eq!(
        keyframes(&out),
        (0..n as u64).step_by(2).collect::<Vec<_>>()
    );
    let psnr = psnr(&out);
    eprintln!("PSNR per frame: {psnr:.1?}");
    assert!(psnr.iter().all(|&p| p >= 35.0), "{psnr:?}");
    assert_eq!(out["seek_ok"], true);
}

/// A still, textured background with a block moving over it: the recording of a still camera.
/// The picture is not a whole number of macroblocks either way (cropping and edge padding). The
/// block's edges stay on even columns: an edge through a 2×2 chroma block costs any 4:2:0 codec
/// its sharpness in RGB, whatever the coding.
#[test]
fn a_still_background_is_held_exactly_between_key_frames() {
    let (w, h, n) = (200usize, 120usize, 17usize);
    // Frame 0 of the moving scene above, held still: shading and fixed noise.
    let still = frame(0, w, h);
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let mut f = still.clone();
            for y in 30..70 {
                for x in (10 + 8 * i)..(40 + 8 * i).min(w) {
                    f[3 * (y * w + x)..][..3].copy_from_slice(&[220, 40, 30]);
                }
            }
            f
        })
        .collect();
    let options = VideoOptions {
        fps: 10,
        gop: 5,
        qp: 23,
    };
    let Some(out) = written_and_decoded("video-still", &frames, (w, h), options) else {
        return;
    };
    assert_eq!(out["frames"], n);
    assert_eq!(keyframes(&out), vec![0, 5, 10, 15]);
    let psnr = psnr(&out);
    eprintln!("PSNR per frame: {psnr:.1?}");
    assert!(psnr.iter().all(|&p| p >= 35.0), "{psnr:?}");
    // Most of each frame is the still background; every such block decodes exactly as before.
    let unchanged = out["unchanged_mbs"].as_u64().unwrap();
    assert!(unchanged > 8 * 10, "{unchanged} unchanged blocks");
    assert_eq!(out["unchanged_mbs_altered"], 0);
    assert_eq!(out["seek_ok"], true);
}

/// 12-bit depth codes: a sloping floor with sensor-like noise (fixed per pixel, so the background
/// is still), a box moving over it, and the extremes 0 and 4095 in a corner.
fn depth_frame(i: usize, w: usize, h: usize) -> Vec<u16> {
    let mut codes = Vec::with_capacity(w * h);
    for y in 0..h {
        for x in 0..w {
            let mut seed = ((y * w + x) as u32).wrapping_mul(2_654_435_761) ^ 0x9e37_79b9;
            seed ^= seed >> 15;
            seed = seed.wrapping_mul(0x2c1b_3c6d);
            seed ^= seed >> 12;
            let inside = (x + 9 * i) % w < 30 && (10..45).contains(&y);
            // Frame 3 is noise over the whole 12-bit range: residuals of every size.
            let code = if i == 3 {
                seed % 4096
            } else if inside {
                900 + (x % 7) as u32
            } else {
                2000 + (y * 1500 / h) as u32 + seed % 3
            };
            codes.push(code as u16);
        }
    }
    codes[0] = 0;
    codes[1] = 4095;
    codes
}

/// A depth video as lerobot reads a depth feature: HEVC, `gray12le`, every code back exactly
/// (the picture is not a whole number of 32-sample blocks: cropping), key frames every `gop`,
/// each frame at `i / fps`, a seek to the middle. Decoded twice where CI provides it: by the
/// interpreter's PyAV and by the PyAV lerobot 0.6.1 pins (`av<16`, in the folder named by
/// `POINTACT_PYAV_LEROBOT`), whose older FFmpeg reads some HEVC syntax differently (it misread
/// monochrome PCM blocks, which newer FFmpeg reads right).
#[test]
fn pyav_decodes_a_depth_video_to_the_exact_codes() {
    let Some(py) = python::interpreter("av", "av==18.1.0", "the depth video test") else {
        return;
    };
    let (w, h, n) = (100usize, 70usize, 13usize);
    let options = VideoOptions {
        fps: 10,
        gop: 5,
        qp: 0,
    };
    let frames: Vec<Vec<u16>> = (0..n).map(|i| depth_frame(i, w, h)).collect();
    let dir = TempDir::new("video-depth");
    let path = dir.path().join("depth.mp4");
    let mut writer = DepthWriter::create(&path, w as u32, h as u32, options).unwrap();
    for f in &frames {
        writer.push_codes(f).unwrap();
    }
    writer.finish().unwrap();
    let raw: Vec<u8> = frames
        .iter()
        .flatten()
        .flat_map(|c| c.to_le_bytes())
        .collect();
    let raw_path = dir.path().join("depth.u16");
    std::fs::write(&raw_path, raw).unwrap();
    let check = |out: &serde_json::Value| {
        eprintln!("{out}");
        assert_eq!(out["codec"], "hevc");
        assert_eq!(out["pix_fmt"], "gray12le");
        assert_eq!(out["encoder_takes_pix_fmt"], true);
        assert_eq!(out["frames"], n);
        assert_eq!(out["mismatched"], 0, "{out}");
        assert_eq!(keyframes(out), vec![0, 5, 10]);
        for (i, t) in out["pts_seconds"].as_array().unwrap().iter().enumerate() {
            let t = t.as_f64().unwrap();
            assert!((t - i as f64 / 10.0).abs() < 1e-9, "frame {i} at {t} s");
        }
        assert_eq!(out["seek_ok"], true);
    };
    check(&python::video_report(
        &py,
        DEPTH_SCRIPT,
        &path,
        &raw_path,
        (w as u32, h as u32),
    ));
    let Some(old) = std::env::var_os("POINTACT_PYAV_LEROBOT") else {
        let required =
            std::env::var_os("CI").is_some() || std::env::var_os("POINTACT_REQUIRE_SDK").is_some();
        assert!(
            !required,
            "POINTACT_PYAV_LEROBOT is not set (.ci/run sets it)"
        );
        eprintln!(
            "POINTACT_PYAV_LEROBOT is not set: the depth video is not decoded with lerobot \
             0.6.1's PyAV (`pip install --target DIR av==15.1.0`, then set it to DIR)"
        );
        return;
    };
    let out = python::video_report_with(
        &py,
        DEPTH_SCRIPT,
        &path,
        &raw_path,
        (w as u32, h as u32),
        &[old.to_str().expect("a UTF-8 path")],
    );
    let version = out["av_version"].as_str().unwrap_or_default();
    assert!(version.starts_with("15."), "PyAV {version} from {old:?}");
    check(&out);
}
