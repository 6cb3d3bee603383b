//! RGB frames to an H.264 MP4, in-process, one frame at a time.
//!
//! Why H.264: LeRobot decodes its videos with FFmpeg (torchcodec or PyAV), which reads H.264 as
//! readily as its default AV1, and so do rerun's viewer and every player. The pure-Rust AV1
//! encoder (rav1e, assembly off, as a machine without nasm builds it) ran at 8–12 frames/s on
//! 640×480 on one core, under the real-time bar; OpenH264 compiles C++ (a compiler a machine
//! with only the Rust toolchain may not have).
//!
//! Why our own encoder (`h264`): the frames come from a still camera over a scene where only the
//! arm and what it carries move, and a simulated run makes them far faster than real time. A
//! general encoder analyses the whole picture each frame; `h264` converts and codes only the
//! macroblocks whose pixels changed and skips the rest. On 432 frames of recorded tabletop runs
//! at 640×480, one core of a 2-core Intel Xeon, colour conversion included: `rusty_h264` (pure
//! Rust, `Fast` preset, CAVLC) took 3.4 ms a frame with a key frame every 2 frames and 2.3 ms
//! every 10; `h264` 1.9 and 1.1 ms, for files 1.3 and 2.2 times larger.
//!
//! Why a key frame every 10 frames and not every 2, as LeRobot writes: a key frame codes every
//! macroblock, a skipped one costs nothing to code or to decode. Decoding one random frame of
//! those 432 with PyAV (seek, decode forward, RGB) took 1.9 ms at a key frame every 10 and
//! 1.3 ms every 2; writing them took 1.1 and 1.9 ms a frame.
//!
//! Colour: BT.601 limited range, 4:2:0, the conversion FFmpeg assumes for an untagged `yuv420p`
//! stream (ITU-R BT.601-7 §2.5.3, integer form). Frame `i` is at `i / fps` exactly.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use super::h264::StillCameraEncoder;
use super::hevc::DepthEncoder;
use super::mp4::{annexb_nals, AvcConfig, Codec, Mp4Writer};

/// How the stream is coded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VideoOptions {
    /// Frames per second (the dataset's fps).
    pub fps: u32,
    /// A key frame every `gop` frames (10: one a second at the default fps; LeRobot's encoder
    /// uses 2, see the module documentation).
    pub gop: u32,
    /// Constant quantiser, 0 (best) to 51.
    pub qp: u8,
}

impl Default for VideoOptions {
    fn default() -> Self {
        Self {
            fps: 10,
            gop: 10,
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
    encoder: StillCameraEncoder,
    mp4: Mp4Writer<BufWriter<File>>,
    width: u32,
    height: u32,
    avc: Option<AvcConfig>,
    planes: Planes,
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
        let encoder =
            StillCameraEncoder::new(width as usize, height as usize, options.qp, options.gop);
        let mp4 = mp4_file(path, width, height, options)?;
        let (w, h) = (width as usize, height as usize);
        let mbs = encoder.macroblocks();
        Ok(Self {
            encoder,
            mp4,
            width,
            height,
            avc: None,
            planes: Planes::new(w, h, mbs),
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
        self.planes.update(rgb);
        let p = &self.planes;
        let unit = self.encoder.encode([&p.y, &p.u, &p.v], &p.changed);
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
        let avc = self
            .avc
            .take()
            .ok_or_else(|| VideoError::Encode("no frame was written".into()))?;
        self.mp4.finish(Codec::Avc(&avc))?;
        Ok(())
    }
}

/// A new MP4 file at `path` for frames of that size (checked by the caller) and fps.
fn mp4_file(
    path: &Path,
    width: u32,
    height: u32,
    options: VideoOptions,
) -> Result<Mp4Writer<BufWriter<File>>, VideoError> {
    let file = BufWriter::new(File::create(path)?);
    Ok(Mp4Writer::new(
        file,
        width as u16,
        height as u16,
        options.fps,
    )?)
}

/// Writes 12-bit depth codes to an MP4 file as HEVC (see `hevc`): the video lerobot reads as a
/// depth map.
pub struct DepthWriter {
    encoder: DepthEncoder,
    mp4: Mp4Writer<BufWriter<File>>,
}

impl DepthWriter {
    /// Creates `path` for `width`×`height` frames.
    pub fn create(
        path: &Path,
        width: u32,
        height: u32,
        options: VideoOptions,
    ) -> Result<Self, VideoError> {
        if width == 0 || height == 0 || width > 65535 || height > 65535 {
            return Err(VideoError::Size(width, height));
        }
        let encoder = DepthEncoder::new(width as usize, height as usize, options.gop)
            .map_err(VideoError::Encode)?;
        let mp4 = mp4_file(path, width, height, options)?;
        Ok(Self { encoder, mp4 })
    }

    /// Encodes one frame of codes (`width · height`, rows top to bottom, each below 4096).
    pub fn push_codes(&mut self, codes: &[u16]) -> Result<(), VideoError> {
        let (sample, key) = self.encoder.encode(codes).map_err(VideoError::Encode)?;
        self.mp4.write_sample(&sample, key)?;
        Ok(())
    }

    /// Finishes the file.
    pub fn finish(self) -> Result<(), VideoError> {
        if self.mp4.frames() == 0 {
            return Err(VideoError::Encode("no frame was written".into()));
        }
        self.mp4.finish(Codec::Hevc(self.encoder.config()))?;
        Ok(())
    }
}

/// Padded I420 planes of the frames given so far, converted only where the RGB changed.
struct Planes {
    /// Picture size and macroblocks across and down.
    width: usize,
    height: usize,
    mbs: (usize, usize),
    y: Vec<u8>,
    u: Vec<u8>,
    v: Vec<u8>,
    /// The last RGB frame, to find what changed.
    last: Option<Vec<u8>>,
    /// Per macroblock, row by row: changed by the last `update`.
    changed: Vec<bool>,
}

impl Planes {
    fn new(width: usize, height: usize, mbs: (usize, usize)) -> Self {
        let n = mbs.0 * mbs.1;
        Planes {
            width,
            height,
            mbs,
            y: vec![0; n * 256],
            u: vec![0; n * 64],
            v: vec![0; n * 64],
            last: None,
            changed: vec![true; n],
        }
    }

    /// Marks the macroblocks whose pixels differ from the last frame (all on the first) and
    /// converts those. Rows are compared whole first: in a recording from a still camera most
    /// rows are unchanged, and a row comparison is one vectorised `memcmp`.
    fn update(&mut self, rgb: &[u8]) {
        let (w, (mbs_x, mbs_y)) = (self.width, self.mbs);
        match &mut self.last {
            None => {
                self.changed.fill(true);
                self.last = Some(rgb.to_vec());
            }
            Some(last) => {
                self.changed.fill(false);
                for (r, (now, before)) in rgb
                    .chunks_exact(3 * w)
                    .zip(last.chunks_exact(3 * w))
                    .enumerate()
                {
                    if now == before {
                        continue;
                    }
                    let row = &mut self.changed[(r / 16) * mbs_x..][..mbs_x];
                    for (mx, flag) in row.iter_mut().enumerate().filter(|(_, f)| !**f) {
                        let span = 48 * mx..(48 * mx + 48).min(3 * w);
                        *flag = now[span.clone()] != before[span];
                    }
                }
                last.copy_from_slice(rgb);
            }
        }
        for mb_y in 0..mbs_y {
            for mb_x in 0..mbs_x {
                if self.changed[mb_y * mbs_x + mb_x] {
                    self.convert_macroblock(rgb, mb_x, mb_y);
                }
            }
        }
    }

    /// BT.601 limited range, chroma from each 2×2 block's mean, for one macroblock; samples
    /// right of or below the picture repeat its last column and row.
    fn convert_macroblock(&mut self, rgb: &[u8], mb_x: usize, mb_y: usize) {
        let (w, h) = (self.width, self.height);
        let (ys, cs) = (self.mbs.0 * 16, self.mbs.0 * 8);
        let px = |x: usize, y: usize| {
            let at = 3 * (y.min(h - 1) * w + x.min(w - 1));
            [0, 1, 2].map(|k| i32::from(rgb[at + k]))
        };
        for y in mb_y * 16..mb_y * 16 + 16 {
            for x in mb_x * 16..mb_x * 16 + 16 {
                let [r, g, b] = px(x, y);
                self.y[y * ys + x] = (((66 * r + 129 * g + 25 * b + 128) >> 8) + 16) as u8;
            }
        }
        for cy in mb_y * 8..mb_y * 8 + 8 {
            for cx in mb_x * 8..mb_x * 8 + 8 {
                // The 2×2 block of the chroma sample's own column and row, clamped as a whole
                // so padding repeats the last chroma column and row.
                let (x, y) = (2 * cx.min(w / 2 - 1), 2 * cy.min(h / 2 - 1));
                let q = [px(x, y), px(x + 1, y), px(x, y + 1), px(x + 1, y + 1)];
                let [r, g, b] = [0, 1, 2].map(|k| q.iter().map(|p| p[k]).sum::<i32>());
                // Sums of four: the /4 joins the >> 8.
                self.u[cy * cs + cx] = (((-38 * r - 74 * g + 112 * b + 512) >> 10) + 128) as u8;
                self.v[cy * cs + cx] = (((112 * r - 94 * g - 18 * b + 512) >> 10) + 128) as u8;
            }
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
            let mut planes = Planes::new(2, 2, (1, 1));
            planes.update(&frame);
            let (y, u, v) = (&planes.y, &planes.u, &planes.v);
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
