//! RGB frames to an H.264 MP4, in-process, one frame at a time.
//!
//! Why H.264 and this encoder: LeRobot decodes its videos with FFmpeg (torchcodec or PyAV), which
//! reads H.264 as readily as its default AV1. The pure-Rust AV1 encoder (rav1e, assembly off, as a
//! machine without nasm builds it) ran at 8–12 frames/s on 640×480 on one core, under the
//! real-time bar; OpenH264 compiles C++ (a compiler a machine with only the Rust toolchain may not
//! have). `rusty_h264` is pure Rust, BSD-2, and at its `Fast` preset encoded 640×480 at 111–261
//! frames/s on one core (noisy to clean images; with a key frame every 2 frames, as LeRobot writes
//! them: 58–130), on one core of a 2-core Intel Xeon, 150 synthetic frames per run.
//!
//! Colour: BT.601 limited range, 4:2:0, the conversion FFmpeg assumes for an untagged `yuv420p`
//! stream (ITU-R BT.601-7 §2.5.3, integer form). Frame `i` is at `i / fps` exactly.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use rusty_h264_common::YuvPlanes;
use rusty_h264_encoder::{Encoder, EncoderConfig, Preset};

use super::mp4::{annexb_nals, AvcConfig, Mp4Writer};

/// How the stream is coded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VideoOptions {
    /// Frames per second (the dataset's fps).
    pub fps: u32,
    /// A key frame every `gop` frames: LeRobot's encoder uses 2, so a random frame decodes
    /// after at most one other.
    pub gop: u32,
    /// Constant quantiser, 0 (best) to 51.
    pub qp: u8,
}

impl Default for VideoOptions {
    fn default() -> Self {
        Self {
            fps: 10,
            gop: 2,
            qp: 23,
        }
    }
}

/// Why a video could not be written.
#[derive(Debug, thiserror::Error)]
pub enum VideoError {
    /// The file could not be created or written.
    #[error("video file: {0}")]
    Io(#[from] std::io::Error),
    /// 4:2:0 needs even sides; the encoder refuses anything else.
    #[error("video frames must have even, non-zero sides and fit 65535 px (got {0}×{1})")]
    Size(u32, u32),
    /// A frame's buffer does not match the stream's size.
    #[error("frame {index} has {got} bytes, a {width}×{height} RGB frame has {want}")]
    Frame {
        /// The frame's number in this file.
        index: usize,
        /// Bytes given.
        got: usize,
        /// Bytes expected.
        want: usize,
        /// The stream's width.
        width: u32,
        /// The stream's height.
        height: u32,
    },
    /// The encoder failed.
    #[error("H.264 encoder: {0}")]
    Encode(String),
}

/// Writes RGB frames to an MP4 file as H.264.
pub struct H264Writer {
    encoder: Encoder,
    mp4: Mp4Writer<BufWriter<File>>,
    width: u32,
    height: u32,
    avc: Option<AvcConfig>,
    y: Vec<u8>,
    u: Vec<u8>,
    v: Vec<u8>,
}

impl H264Writer {
    /// Creates `path` for `width`×`height` frames.
    pub fn create(
        path: &Path,
        width: u32,
        height: u32,
        options: VideoOptions,
    ) -> Result<Self, VideoError> {
        let side_ok = |s: u32| s > 0 && s.is_multiple_of(2) && s <= 65535;
        if !side_ok(width) || !side_ok(height) {
            return Err(VideoError::Size(width, height));
        }
        let mut cfg = EncoderConfig::new(width as usize, height as usize);
        cfg.preset = Preset::Fast;
        cfg.gop_size = options.gop.max(1);
        cfg.min_keyint = options.gop.max(1);
        cfg.scenecut = 0;
        cfg.qp = options.qp.min(51);
        cfg.bitrate = 0;
        cfg.framerate = options.fps as f32;
        // No reordering (presentation order = decoding order) and no look-ahead (one access
        // unit out per frame in): what the MP4 writer's single time-to-sample entry assumes.
        cfg.bframes = 0;
        cfg.mbtree = false;
        // CAVLC (Constrained Baseline) rather than CABAC: on rendered 640×480 scenes at a key
        // frame every 2 frames it coded 21 % faster (3.4 against 4.3 ms a frame, one core) for
        // files 26 % larger, and every H.264 decoder reads it.
        cfg.cabac = false;
        let encoder = Encoder::new(cfg).map_err(|e| VideoError::Encode(e.to_string()))?;
        let mp4 = Mp4Writer::new(
            BufWriter::new(File::create(path)?),
            width as u16,
            height as u16,
            options.fps,
        )?;
        let (w, h) = (width as usize, height as usize);
        Ok(Self {
            encoder,
            mp4,
            width,
            height,
            avc: None,
            y: vec![0; w * h],
            u: vec![0; w * h / 4],
            v: vec![0; w * h / 4],
        })
    }

    /// Frames written so far.
    pub fn frames(&self) -> usize {
        self.mp4.frames()
    }

    /// Encodes one RGB frame (`width · height · 3` bytes, rows top to bottom).
    pub fn push_rgb(&mut self, rgb: &[u8]) -> Result<(), VideoError> {
        let (w, h) = (self.width as usize, self.height as usize);
        if rgb.len() != w * h * 3 {
            return Err(VideoError::Frame {
                index: self.frames(),
                got: rgb.len(),
                want: w * h * 3,
                width: self.width,
                height: self.height,
            });
        }
        rgb_to_i420(rgb, w, h, &mut self.y, &mut self.u, &mut self.v);
        let planes = YuvPlanes::new(w, h, &self.y, &self.u, &self.v, w, w / 2)
            .ok_or(VideoError::Size(self.width, self.height))?;
        let unit = self
            .encoder
            .encode_planes(&planes)
            .map_err(|e| VideoError::Encode(e.to_string()))?;
        self.write_unit(&unit)
    }

    /// One Annex-B access unit into the file: parameter sets kept for `avcC`, delimiters
    /// dropped, every other NAL unit length-prefixed.
    fn write_unit(&mut self, unit: &[u8]) -> Result<(), VideoError> {
        let mut sample = Vec::with_capacity(unit.len() + 16);
        let mut key = false;
        for nal in annexb_nals(unit).into_iter().filter(|n| !n.is_empty()) {
            match nal[0] & 0x1f {
                7 => {
                    let avc = self.avc.get_or_insert_with(|| AvcConfig {
                        sps: Vec::new(),
                        pps: Vec::new(),
                    });
                    if avc.sps.is_empty() {
                        avc.sps = nal.to_vec();
                    }
                }
                8 => {
                    if let Some(avc) = self.avc.as_mut().filter(|a| a.pps.is_empty()) {
                        avc.pps = nal.to_vec();
                    }
                }
                9 => {}
                t => {
                    key |= t == 5;
                    sample.extend_from_slice(&(nal.len() as u32).to_be_bytes());
                    sample.extend_from_slice(nal);
                }
            }
        }
        if sample.is_empty() {
            return Err(VideoError::Encode(
                "an access unit without a picture".into(),
            ));
        }
        self.mp4.write_sample(&sample, key)?;
        Ok(())
    }

    /// Flushes the encoder and finishes the file.
    pub fn finish(mut self) -> Result<(), VideoError> {
        let rest = self
            .encoder
            .try_flush()
            .map_err(|e| VideoError::Encode(e.to_string()))?;
        if !rest.is_empty() {
            self.write_unit(&rest)?;
        }
        let avc = self
            .avc
            .take()
            .ok_or_else(|| VideoError::Encode("no frame was written".into()))?;
        self.mp4.finish(&avc)?;
        Ok(())
    }
}

/// RGB to I420, BT.601 limited range, chroma from each 2×2 block's mean.
fn rgb_to_i420(rgb: &[u8], w: usize, h: usize, y: &mut [u8], u: &mut [u8], v: &mut [u8]) {
    for (dst, src) in y.chunks_exact_mut(w).zip(rgb.chunks_exact(w * 3)) {
        for (d, p) in dst.iter_mut().zip(src.chunks_exact(3)) {
            let (r, g, b) = (i32::from(p[0]), i32::from(p[1]), i32::from(p[2]));
            *d = (((66 * r + 129 * g + 25 * b + 128) >> 8) + 16) as u8;
        }
    }
    let cw = w / 2;
    for cy in 0..h / 2 {
        let r0 = &rgb[2 * cy * w * 3..(2 * cy + 1) * w * 3];
        let r1 = &rgb[(2 * cy + 1) * w * 3..(2 * cy + 2) * w * 3];
        for cx in 0..cw {
            let o = cx * 6;
            let sum = |k: usize| {
                i32::from(r0[o + k])
                    + i32::from(r0[o + 3 + k])
                    + i32::from(r1[o + k])
                    + i32::from(r1[o + 3 + k])
            };
            let (r, g, b) = (sum(0), sum(1), sum(2));
            // Sums of four: the /4 joins the >> 8.
            u[cy * cw + cx] = (((-38 * r - 74 * g + 112 * b + 512) >> 10) + 128) as u8;
            v[cy * cw + cx] = (((112 * r - 94 * g - 18 * b + 512) >> 10) + 128) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bt601_limited_range_within_one_level_of_the_standard() {
        // ITU-R BT.601-7 §2.5.3: Y = 16 + 219·E'Y, Cb/Cr = 128 + 224·0.5·E'C/max, in floats.
        let reference = |rgb: [u8; 3]| {
            let [r, g, b] = rgb.map(|c| f64::from(c) / 255.0);
            let ey = 0.299 * r + 0.587 * g + 0.114 * b;
            [
                16.0 + 219.0 * ey,
                128.0 + 224.0 * (b - ey) / 1.772,
                128.0 + 224.0 * (r - ey) / 1.402,
            ]
        };
        for rgb in [
            [0, 0, 0],
            [255, 255, 255],
            [255, 0, 0],
            [0, 255, 0],
            [0, 0, 255],
            [200, 120, 40],
        ] {
            let frame: Vec<u8> = rgb.iter().copied().cycle().take(2 * 2 * 3).collect();
            let (mut y, mut u, mut v) = (vec![0; 4], vec![0; 1], vec![0; 1]);
            rgb_to_i420(&frame, 2, 2, &mut y, &mut u, &mut v);
            let want = reference(rgb);
            for (got, want) in [y[0], u[0], v[0]].into_iter().zip(want) {
                assert!(
                    (f64::from(got) - want).abs() <= 1.0,
                    "{rgb:?}: {got} vs {want:.2}"
                );
            }
            assert!(y.iter().all(|&l| l == y[0]));
        }
    }

    #[test]
    fn odd_sizes_and_short_frames_are_refused() {
        let dir = std::env::temp_dir().join(format!("pointact-video-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.mp4");
        assert!(matches!(
            H264Writer::create(&path, 641, 480, VideoOptions::default()),
            Err(VideoError::Size(641, 480))
        ));
        let mut w = H264Writer::create(&path, 64, 48, VideoOptions::default()).unwrap();
        assert!(matches!(
            w.push_rgb(&[0; 10]),
            Err(VideoError::Frame { got: 10, .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
