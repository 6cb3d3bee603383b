//! Key frames of a camera sequence, the selection of Embodied-R's released extractor
//! (`train/conver_format/utils.py` of EmbodiedCity/Embodied-R.code at commit 174ae99):
//! a frame becomes a key frame when too little of it is already seen in the last key frame.
//!
//! What [`select_keyframes`] reproduces, function by function of that file:
//! - `extract_keyframes(frames, 0.5)`: frame 0 is a key frame and the first reference. Each later
//!   frame is matched to the reference with ORB features ([`OrbParams`], OpenCV's defaults) and a
//!   cross-checked brute-force Hamming matcher (reference = query, current = train). With more
//!   than 10 matches a RANSAC homography (5 px) maps the current frame into the reference; the
//!   share of the reference image covered by the mapped frame is the overlap, and an overlap
//!   below the threshold makes the frame a key frame and the new reference. With 10 matches or
//!   fewer, or no descriptors on either side, the frame is a key frame and the new reference.
//!   When no homography is found the frame is a key frame but the reference stays as it was: the
//!   released code does not update it on that branch, and its key frames depend on that. The
//!   last frame is appended if it is not already the last key frame.
//! - `extract_keyframes_from_video`: fewer than `min_frames` key frames → every frame index,
//!   thinned by [`constrained_sampling`] to `min_frames`; more than `max_frames` → the key frames
//!   thinned to `max_frames`.
//! - `downsample_video`: [`sample_indices`], one frame per second of video.
//!
//! Everything is computed here, in Rust, with no OpenCV: a machine with only the Rust toolchain
//! builds it. ORB's descriptor pattern is this module's own (see `orb`), so matches differ
//! slightly from OpenCV's; the golden test in `crates/core/src/tests/keyframes_golden.rs` holds
//! the selected frames and overlap ratios to the released pipeline run with OpenCV.

mod homography;
mod matching;
mod orb;
mod overlap;

#[cfg(test)]
pub(crate) use {homography::*, matching::*, orb::*, overlap::*};

pub use orb::OrbParams;

use image::{GrayImage, RgbImage};

/// How frames are selected; the defaults are the released pipeline's.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyframeOptions {
    /// A frame overlapping its reference by less than this becomes a key frame (0.5).
    pub overlap_threshold: f64,
    /// Fewer key frames than this → all frames, evenly thinned to this many (4).
    pub min_frames: usize,
    /// More key frames than this → thinned to this many (32).
    pub max_frames: usize,
    /// Feature detector settings (OpenCV `ORB::create()` defaults).
    pub orb: OrbParams,
}

impl Default for KeyframeOptions {
    fn default() -> Self {
        KeyframeOptions {
            overlap_threshold: 0.5,
            min_frames: 4,
            max_frames: 32,
            orb: OrbParams::default(),
        }
    }
}

/// What a compared frame's overlap with its reference came to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Overlap {
    /// The homography was found; share of the reference image the frame covers, in [0, 1].
    Ratio(f64),
    /// The reference or the current frame has no ORB features.
    NoDescriptors,
    /// 10 matches or fewer: no homography attempted.
    TooFewMatches,
    /// RANSAC found no homography (the reference is kept, see the module doc).
    NoHomography,
}

/// One frame after the first, compared with the reference key frame of its time.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// Index of the frame in the given sequence.
    pub frame: usize,
    /// Index of the reference key frame it was compared with.
    pub reference: usize,
    /// Cross-checked matches between the two.
    pub matches: usize,
    /// RANSAC inliers of the homography (0 when none was fitted).
    pub inliers: usize,
    /// The overlap, or why there is none.
    pub overlap: Overlap,
    /// Whether the frame became a key frame.
    pub keyframe: bool,
}

/// The selection and how it came about.
#[derive(Debug, Clone, PartialEq)]
pub struct Keyframes {
    /// Frames kept, indices into the given sequence, increasing: the key frames after the
    /// `min_frames` / `max_frames` rule.
    pub selected: Vec<usize>,
    /// The key frames before that rule (`extract_keyframes`' result).
    pub keyframes: Vec<usize>,
    /// Every frame after the first, in order.
    pub compared: Vec<Comparison>,
    /// Set when the answer is trivial (a single frame): the caller decides what to make of it.
    pub note: Option<String>,
}

/// Why frames cannot be selected from.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum KeyframeError {
    /// No frames were given.
    #[error("no frames to select key frames from")]
    NoFrames,
    /// A frame has no pixels.
    #[error("frame {0} is empty (0 pixels)")]
    EmptyFrame(usize),
    /// Frames differ in size; the overlap is measured on the first frame's grid.
    #[error("frame {index} is {got:?} but frame 0 is {want:?} (width, height)")]
    SizeMismatch {
        /// The offending frame.
        index: usize,
        /// Its size.
        got: (u32, u32),
        /// Frame 0's size.
        want: (u32, u32),
    },
}

/// Indices of the frames kept when a video of `n` frames at `fps` is brought to one frame per
/// second (`downsample_video`): every `int(fps)`-th frame from 0, plus the last frame if it is not
/// among them. A rate below 1 (or not a number) counts as 1, where Python's `range` would refuse
/// a zero step.
pub fn sample_indices(n: usize, fps: f64) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let step = if fps.is_finite() && fps >= 1.0 {
        fps.trunc().min(usize::MAX as f64) as usize
    } else {
        1
    };
    let mut out: Vec<usize> = (0..n).step_by(step).collect();
    if out.last() != Some(&(n - 1)) {
        out.push(n - 1);
    }
    out
}

/// `constrained_sampling(lst, m)`: a list of at most `m` items is returned as is; a longer one
/// keeps its first and last items and, between them, `lst[round(i · (n − 2)/(m − 2)) + 1]` for
/// `i` in `0..m − 2`, with Python's `round` (ties to even) on the f64 product. `m` below 2 is
/// treated as 2 (the released code would index out of range).
pub fn constrained_sampling<T: Clone>(lst: &[T], m: usize) -> Vec<T> {
    let n = lst.len();
    if n <= m {
        return lst.to_vec();
    }
    let m = m.max(2);
    let num = m - 2;
    let mut out = Vec::with_capacity(m);
    out.push(lst[0].clone());
    if num > 0 {
        let step = (n - 2) as f64 / num as f64;
        for i in 0..num {
            let idx = ((i as f64 * step).round_ties_even() as usize + 1).min(n - 1);
            out.push(lst[idx].clone());
        }
    }
    out.push(lst[n - 1].clone());
    out
}

/// Selects key frames from RGB frames (e.g. images read with `image::open(..)?.to_rgb8()`, or a
/// video already thinned with [`sample_indices`]).
pub fn select_keyframes(
    frames: &[RgbImage],
    options: &KeyframeOptions,
) -> Result<Keyframes, KeyframeError> {
    check_sizes(frames.iter().map(|f| f.dimensions()))?;
    let grays: Vec<GrayImage> = frames.iter().map(orb::to_gray).collect();
    Ok(select_gray(&grays, options))
}

fn check_sizes(mut sizes: impl Iterator<Item = (u32, u32)>) -> Result<(), KeyframeError> {
    let want = sizes.next().ok_or(KeyframeError::NoFrames)?;
    if want.0 == 0 || want.1 == 0 {
        return Err(KeyframeError::EmptyFrame(0));
    }
    for (i, got) in sizes.enumerate() {
        if got != want {
            return Err(KeyframeError::SizeMismatch {
                index: i + 1,
                got,
                want,
            });
        }
    }
    Ok(())
}

/// The selection on grey frames of one size (checked by the caller).
pub(crate) fn select_gray(frames: &[GrayImage], options: &KeyframeOptions) -> Keyframes {
    let pattern = orb::test_pattern();
    let features: Vec<orb::Features> = frames
        .iter()
        .map(|g| orb::detect_and_describe(g, &options.orb, &pattern))
        .collect();
    let (w, h) = frames.first().map_or((0, 0), |f| f.dimensions());
    let (keyframes, compared) = extract(&features, w, h, options.overlap_threshold);
    let n = frames.len();
    let selected = if keyframes.len() < options.min_frames {
        constrained_sampling(&(0..n).collect::<Vec<_>>(), options.min_frames)
    } else if keyframes.len() > options.max_frames {
        constrained_sampling(&keyframes, options.max_frames)
    } else {
        keyframes.clone()
    };
    let note = (n == 1).then(|| "a single frame: it is the only key frame".to_string());
    Keyframes {
        selected,
        keyframes,
        compared,
        note,
    }
}

/// `extract_keyframes` on precomputed features of `w × h` frames.
fn extract(
    features: &[orb::Features],
    w: u32,
    h: u32,
    threshold: f64,
) -> (Vec<usize>, Vec<Comparison>) {
    let mut keyframes = vec![0];
    let mut compared = Vec::new();
    let mut reference = 0;
    let ransac = homography::RansacParams::default();
    for t in 1..features.len() {
        let (prev, curr) = (&features[reference], &features[t]);
        let mut c = Comparison {
            frame: t,
            reference,
            matches: 0,
            inliers: 0,
            overlap: Overlap::NoDescriptors,
            keyframe: true,
        };
        let mut new_reference = true;
        if !prev.descriptors.is_empty() && !curr.descriptors.is_empty() {
            let matches = matching::cross_check_match(&prev.descriptors, &curr.descriptors);
            c.matches = matches.len();
            c.overlap = Overlap::TooFewMatches;
            if matches.len() > 10 {
                // Current-frame points (src) onto reference points (dst), as the released code
                // calls `findHomography(dst_pts, src_pts, …)`.
                let pt = |k: &orb::Keypoint| [k.x as f64, k.y as f64];
                let src: Vec<[f64; 2]> = matches
                    .iter()
                    .map(|m| pt(&curr.keypoints[m.train]))
                    .collect();
                let dst: Vec<[f64; 2]> = matches
                    .iter()
                    .map(|m| pt(&prev.keypoints[m.query]))
                    .collect();
                match homography::find_homography(&src, &dst, &ransac) {
                    Some(fit) => {
                        c.inliers = fit.inliers.iter().filter(|&&m| m).count();
                        let r = overlap::overlap_ratio(&fit.h, w, h);
                        c.overlap = Overlap::Ratio(r);
                        c.keyframe = r < threshold;
                        new_reference = c.keyframe;
                    }
                    None => {
                        c.overlap = Overlap::NoHomography;
                        new_reference = false;
                    }
                }
            }
        }
        if c.keyframe {
            keyframes.push(t);
        }
        if new_reference {
            reference = t;
        }
        compared.push(c);
    }
    if keyframes.last() != Some(&(features.len().saturating_sub(1))) && !features.is_empty() {
        keyframes.push(features.len() - 1);
    }
    (keyframes, compared)
}

#[cfg(test)]
mod tests;
