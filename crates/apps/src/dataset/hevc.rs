//! An HEVC encoder for 12-bit depth maps from a camera that does not move: every coding unit is
//! 32×32, coded either losslessly as intra DC prediction plus its residual, with the transform
//! and quantisation bypassed (`cu_transquant_bypass_flag`), or skipped (copied from the picture
//! before, exactly), so the decoded 12-bit codes are the codes given, bit for bit.
//!
//! Why HEVC and this profile: lerobot 0.6.1 stores a depth feature as a video of 12-bit
//! log-quantised codes (`lerobot/configs/video.py` at tag v0.6.1: `DepthEncoderConfig`, HEVC,
//! `gray12le`, x265 `lossless=1`) and, before it reads such a video, checks that PyAV can encode
//! its codec and pixel format (`check_video_encoder_parameters_pyav`): H.264 stops at 10 bits in
//! the encoders PyAV ships, HEVC (libx265) takes `gray12le`. A monochrome 12-bit stream is what
//! its decoder hands back as `gray12le` with no conversion.
//!
//! Why bypass and skip rather than transforms: a recorded depth map changes only where the arm and
//! what it carries move; an unchanged block costs a few context-coded bins, a changed one its
//! residual against the mean of its neighbours, coded exactly (no transform or quantiser to
//! round, no rate control). Why not PCM blocks, the simpler lossless mode: FFmpeg's HEVC decoder
//! before libavcodec 62.28 (PyAV 15 to 17, and lerobot 0.6.1 pins PyAV 15) reads two chroma
//! planes' worth of PCM samples in a monochrome picture, which H.265 §7.3.8.7 does not send, and
//! so decodes such streams wrongly without an error; the residual path is read alike by all.
//!
//! Syntax, clause numbers of ITU-T H.265 (v8, 08/2021): parameter sets §7.3.2.1–7.3.2.3 with the
//! profile of §A.3.5 (format range extensions, monochrome 12: `general_profile_idc` 4,
//! `max_12bit`, `max_422chroma`, `max_420chroma`, `max_monochrome` constraint flags), slice
//! headers §7.3.6.1, coding units §7.3.8.5, transform trees and units §7.3.8.8–7.3.8.10,
//! residual coding §7.3.8.11 (diagonal scans §6.5.3), DC intra prediction §8.4.4.2.5 with the
//! neighbour substitution of §8.4.4.2.2 and no filtering for DC (§8.4.4.2.3), CABAC §9.3
//! (context initialisation §9.3.2.2 with the initValues of its Tables 9-5 to 9-37 for initType 0
//! and 1, context selection §9.3.4.2, arithmetic encoder §9.3.5). Deblocking and SAO are off (`pps_deblocking_filter_disabled_flag`,
//! `sample_adaptive_offset_enabled_flag` 0): a filter across a skipped block's edge would change
//! its samples. One reference picture (the previous one), one merge candidate (always zero
//! motion: no block of these streams moves), picture order = decoding order.

use rusty_h264_common::cabac_tables::{RANGE_LPS, STATE_TRANS};
use rusty_h264_common::nal::emulation_prevent_into;
use rusty_h264_common::BitWriter;

/// Side of every coding unit, coding tree block and transform block (the largest transform
/// block H.265 allows, `MaxTbLog2SizeY` ≤ 5).
const CU: usize = 32;
/// Bits per sample.
pub const BIT_DEPTH: u32 = 12;
/// `SliceQpY`: 26 + `init_qp_minus26` (0) + `slice_qp_delta` (0); only context initialisation
/// reads it, as every residual bypasses the quantiser.
const SLICE_QP: i32 = 26;
/// `log2_max_pic_order_cnt_lsb_minus4`: 16-bit picture order counts, so a key-frame interval
/// up to 65 535.
const LOG2_MAX_POC_LSB_MINUS4: u32 = 12;

/// NAL unit types (§7.4.2.2, Table 7-1).
const NAL_TRAIL_R: u8 = 1;
const NAL_IDR_N_LP: u8 = 20;
const NAL_VPS: u8 = 32;
const NAL_SPS: u8 = 33;
const NAL_PPS: u8 = 34;

/// The parameter sets an `hvcC` box carries (NAL units with their 2-byte headers, emulation
/// prevention applied, no start codes or lengths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HevcConfig {
    /// Video parameter set.
    pub vps: Vec<u8>,
    /// Sequence parameter set.
    pub sps: Vec<u8>,
    /// Picture parameter set.
    pub pps: Vec<u8>,
    /// `profile_tier_level`'s first 12 bytes (profile space/tier/idc, 32 compatibility flags,
    /// 48 constraint flags, level), which `hvcC` repeats.
    pub profile_tier_level: [u8; 12],
}

/// The 12 general bytes of `profile_tier_level( 1, 0 )` (§7.3.3).
fn profile_tier_level() -> [u8; 12] {
    let mut w = BitWriter::new();
    w.write_bits(0, 2); // general_profile_space
    w.write_bits(0, 1); // general_tier_flag: Main tier
    w.write_bits(4, 5); // general_profile_idc: format range extensions
    w.write_bits(1 << (31 - 4), 32); // general_profile_compatibility_flag[4]
    w.write_bits(1, 1); // general_progressive_source_flag
    w.write_bits(0, 1); // general_interlaced_source_flag
    w.write_bits(0, 1); // general_non_packed_constraint_flag
    w.write_bits(1, 1); // general_frame_only_constraint_flag

    // Monochrome 12 (Table A.2): max_12bit 1, max_10bit 0, max_8bit 0, max_422chroma 1,
    // max_420chroma 1, max_monochrome 1, intra 0, one_picture_only 0, lower_bit_rate 1.
    w.write_bits(0b1001_1100, 8);
    w.write_bits(1, 1);
    w.write_bits(0, 32); // general_reserved_zero_34bits
    w.write_bits(0, 2);
    w.write_bits(0, 1); // general_inbld_flag
    w.write_bits(186, 8); // general_level_idc: 6.2 (no frame size or bit rate of these streams exceeds it)
    let bytes = w.into_bytes();
    let mut out = [0u8; 12];
    out.copy_from_slice(&bytes);
    out
}

/// A NAL unit: the 2-byte header (§7.3.1.2: layer 0, temporal id 0) and the RBSP with
/// emulation prevention.
fn nal(kind: u8, rbsp: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rbsp.len() + rbsp.len() / 64 + 2);
    out.push(kind << 1);
    out.push(1); // nuh_temporal_id_plus1
    emulation_prevent_into(rbsp, &mut out);
    out
}

/// One context variable (§9.3.2.2): probability state and most probable symbol.
#[derive(Debug, Clone, Copy)]
struct Context {
    state: u8,
    mps: bool,
}

impl Context {
    /// §9.3.2.2, equations 9-6: the state an `initValue` gives at [`SLICE_QP`].
    fn new(init_value: i32) -> Self {
        let m = (init_value >> 4) * 5 - 45;
        let n = ((init_value & 15) << 3) - 16;
        let pre = (((m * SLICE_QP.clamp(0, 51)) >> 4) + n).clamp(1, 126);
        if pre <= 63 {
            Context {
                state: (63 - pre) as u8,
                mps: false,
            }
        } else {
            Context {
                state: (pre - 64) as u8,
                mps: true,
            }
        }
    }
}

/// The arithmetic encoder of §9.3.5 (the same engine as H.264's §9.3.4.2).
struct Cabac {
    low: u32,
    range: u32,
    outstanding: u32,
    first_bit: bool,
}

impl Cabac {
    /// `InitEncoder` (§9.3.5.1? initialisation of the arithmetic encoding engine).
    fn new() -> Self {
        Cabac {
            low: 0,
            range: 510,
            outstanding: 0,
            first_bit: true,
        }
    }

    fn put_bit(&mut self, w: &mut BitWriter, bit: u32) {
        if self.first_bit {
            self.first_bit = false;
        } else {
            w.write_bits(bit, 1);
        }
        while self.outstanding > 0 {
            w.write_bits(1 - bit, 1);
            self.outstanding -= 1;
        }
    }

    fn renormalise(&mut self, w: &mut BitWriter) {
        while self.range < 256 {
            if self.low < 256 {
                self.put_bit(w, 0);
            } else if self.low >= 512 {
                self.low -= 512;
                self.put_bit(w, 1);
            } else {
                self.low -= 256;
                self.outstanding += 1;
            }
            self.range <<= 1;
            self.low <<= 1;
        }
    }

    /// `EncodeDecision`: one context-coded bin.
    fn decision(&mut self, w: &mut BitWriter, ctx: &mut Context, bin: bool) {
        let lps = u32::from(RANGE_LPS[ctx.state as usize][((self.range >> 6) & 3) as usize]);
        self.range -= lps;
        if bin != ctx.mps {
            self.low += self.range;
            self.range = lps;
            if ctx.state == 0 {
                ctx.mps = !ctx.mps;
            }
            ctx.state = STATE_TRANS[ctx.state as usize][0];
        } else {
            ctx.state = STATE_TRANS[ctx.state as usize][1];
        }
        self.renormalise(w);
    }

    /// `EncodeBypass`: the equiprobable bins (signs, suffixes, `mpm_idx`).
    fn bypass(&mut self, w: &mut BitWriter, bin: bool) {
        self.low <<= 1;
        if bin {
            self.low += self.range;
        }
        if self.low >= 1024 {
            self.put_bit(w, 1);
            self.low -= 1024;
        } else if self.low < 512 {
            self.put_bit(w, 0);
        } else {
            self.low -= 512;
            self.outstanding += 1;
        }
    }

    /// `EncodeTerminate`: `end_of_slice_segment_flag`. A 1 flushes the engine;
    /// its last bit written is a 1 (the `rbsp_stop_one_bit` at a slice's end).
    fn terminate(&mut self, w: &mut BitWriter, bin: bool) {
        self.range -= 2;
        if bin {
            self.low += self.range;
            // EncodeFlush.
            self.range = 2;
            self.renormalise(w);
            self.put_bit(w, (self.low >> 9) & 1);
            w.write_bits(((self.low >> 7) & 3) | 1, 2);
        } else {
            self.renormalise(w);
        }
    }
}

/// Encodes 12-bit frames of one size; see the module documentation.
pub struct DepthEncoder {
    width: usize,
    height: usize,
    /// Width and height rounded up to whole coding units (the conformance window crops back).
    padded: (usize, usize),
    /// The last picture coded (= decoded), padded.
    previous: Vec<u16>,
    /// The picture being coded, padded.
    current: Vec<u16>,
    gop: u32,
    /// Frames coded since the last key frame (0: the next one is a key frame).
    since_key: u32,
    /// `cu_skip_flag` of each coding unit of the picture being coded (its neighbours' flags
    /// select the flag's context, §9.3.4.2.2).
    skipped: Vec<bool>,
    config: HevcConfig,
}

impl DepthEncoder {
    /// An encoder for `width`×`height` frames (1 to 65 535 samples a side) with a key frame
    /// every `gop` frames (at least 1).
    pub fn new(width: usize, height: usize, gop: u32) -> Result<Self, String> {
        if width == 0 || height == 0 || width > 65_535 || height > 65_535 {
            return Err(format!(
                "depth frames must be 1 to 65535 px a side (got {width}×{height})"
            ));
        }
        let padded = (width.div_ceil(CU) * CU, height.div_ceil(CU) * CU);
        let cus = (padded.0 / CU) * (padded.1 / CU);
        let ptl = profile_tier_level();
        let config = HevcConfig {
            vps: nal(NAL_VPS, &vps(&ptl)),
            sps: nal(NAL_SPS, &sps(&ptl, width, height, padded)),
            pps: nal(NAL_PPS, &pps()),
            profile_tier_level: ptl,
        };
        Ok(DepthEncoder {
            width,
            height,
            padded,
            previous: vec![0; padded.0 * padded.1],
            current: vec![0; padded.0 * padded.1],
            gop: gop.max(1),
            since_key: 0,
            skipped: vec![false; cus],
            config,
        })
    }

    /// The parameter sets of every frame this encoder codes.
    pub fn config(&self) -> &HevcConfig {
        &self.config
    }

    /// Codes one frame of `width × height` codes (row-major, each below 2^12) and returns it as
    /// an MP4 sample (one NAL unit after its 4-byte length) and whether it is a key frame.
    pub fn encode(&mut self, codes: &[u16]) -> Result<(Vec<u8>, bool), String> {
        let (w, h) = (self.width, self.height);
        if codes.len() != w * h {
            return Err(format!(
                "a depth frame of {} codes, not {w}×{h}",
                codes.len()
            ));
        }
        if let Some(c) = codes.iter().find(|&&c| c >= 1 << BIT_DEPTH) {
            return Err(format!("depth code {c} does not fit {BIT_DEPTH} bits"));
        }
        // Pad by repeating the last column and row: the padding is cropped away, and repeating
        // keeps it unchanged wherever the edge is.
        let pw = self.padded.0;
        for y in 0..self.padded.1 {
            let src = &codes[y.min(h - 1) * w..][..w];
            let dst = &mut self.current[y * pw..][..pw];
            dst[..w].copy_from_slice(src);
            let last = src[w - 1];
            dst[w..].fill(last);
        }
        let key = self.since_key == 0;
        let poc = self.since_key;
        self.since_key = (self.since_key + 1) % self.gop;

        let mut bits = BitWriter::with_capacity(if key { w * h * 2 } else { 4096 });
        slice_header(&mut bits, key, poc);
        let (skip_init, mode_init, part_init) = if key { (0, 0, 184) } else { (197, 149, 154) };
        // cu_skip_flag (Table 9-11, initType 1), pred_mode_flag (Table 9-13), part_mode bin 0
        // (Table 9-14, initType 0 for I slices, 1 for P).
        let mut skip_ctx = [
            Context::new(skip_init),
            Context::new(if key { 0 } else { 185 }),
            Context::new(if key { 0 } else { 201 }),
        ];
        let mut mode_ctx = Context::new(mode_init);
        let mut part_ctx = Context::new(part_init);
        let mut res = ResidualContexts::new(key);
        let mut cabac = Cabac::new();
        let cols = pw / CU;
        let rows = self.padded.1 / CU;
        for cy in 0..rows {
            for cx in 0..cols {
                let i = cy * cols + cx;
                let skip = !key && self.same_block(cx, cy);
                self.skipped[i] = skip;
                cabac.decision(&mut bits, &mut res.bypass, true); // cu_transquant_bypass_flag
                if !key {
                    let left = cx > 0 && self.skipped[i - 1];
                    let above = cy > 0 && self.skipped[i - cols];
                    let ctx = &mut skip_ctx[usize::from(left) + usize::from(above)];
                    cabac.decision(&mut bits, ctx, skip);
                }
                if !skip {
                    if !key {
                        cabac.decision(&mut bits, &mut mode_ctx, true); // MODE_INTRA
                    }
                    cabac.decision(&mut bits, &mut part_ctx, true); // PART_2Nx2N
                    cabac.decision(&mut bits, &mut res.prev_intra, true); // from the MPM list
                    cabac.bypass(&mut bits, true); // mpm_idx 1 (DC): bins 1, 0
                    cabac.bypass(&mut bits, false);
                    let residual = self.dc_residual(cx, cy);
                    let any = residual.iter().any(|&r| r != 0);
                    cabac.decision(&mut bits, &mut res.cbf_luma, any);
                    if any {
                        res.code(&mut cabac, &mut bits, &residual);
                    }
                }
                cabac.terminate(&mut bits, i + 1 == cols * rows); // end_of_slice_segment_flag
            }
        }
        bits.align_zero(); // rbsp_slice_segment_trailing_bits after the stop bit
        let rbsp = bits.into_bytes();
        let unit = nal(if key { NAL_IDR_N_LP } else { NAL_TRAIL_R }, &rbsp);
        let mut sample = Vec::with_capacity(unit.len() + 4);
        sample.extend_from_slice(&(unit.len() as u32).to_be_bytes());
        sample.extend_from_slice(&unit);
        std::mem::swap(&mut self.previous, &mut self.current);
        Ok((sample, key))
    }

    /// The residual of coding unit (`cx`, `cy`) against its DC intra prediction (§8.4.4.2.5,
    /// from the neighbouring samples as §8.4.4.2.2 substitutes them; no filtering for DC),
    /// row-major 32×32. Neighbours are this picture's samples: every block is lossless.
    fn dc_residual(&self, cx: usize, cy: usize) -> Vec<i32> {
        let pw = self.padded.0;
        let (x0, y0) = (cx * CU, cy * CU);
        let at = |x: usize, y: usize| i32::from(self.current[y * pw + x]);
        let left: Option<i32> = (x0 > 0).then(|| (0..CU).map(|y| at(x0 - 1, y0 + y)).sum());
        let above: Option<i32> = (y0 > 0).then(|| (0..CU).map(|x| at(x0 + x, y0 - 1)).sum());
        let n = CU as i32;
        let sum = match (left, above) {
            (Some(l), Some(a)) => l + a,
            // The left column copies the first above sample; the above row copies the first
            // left sample (through the corner).
            (None, Some(a)) => a + n * at(x0, y0 - 1),
            (Some(l), None) => l + n * at(x0 - 1, y0),
            (None, None) => 2 * n * (1 << (BIT_DEPTH - 1)),
        };
        let dc = (sum + n) >> 6;
        let mut out = Vec::with_capacity(CU * CU);
        for y in 0..CU {
            for x in 0..CU {
                out.push(at(x0 + x, y0 + y) - dc);
            }
        }
        out
    }

    /// Whether coding unit (`cx`, `cy`) holds the same samples as in the picture before.
    fn same_block(&self, cx: usize, cy: usize) -> bool {
        let pw = self.padded.0;
        (0..CU).all(|y| {
            let at = (cy * CU + y) * pw + cx * CU;
            self.current[at..at + CU] == self.previous[at..at + CU]
        })
    }
}

/// `video_parameter_set_rbsp` (§7.3.2.1).
fn vps(ptl: &[u8; 12]) -> Vec<u8> {
    let mut w = BitWriter::new();
    w.write_bits(0, 4); // vps_video_parameter_set_id
    w.write_bits(1, 1); // vps_base_layer_internal_flag
    w.write_bits(1, 1); // vps_base_layer_available_flag
    w.write_bits(0, 6); // vps_max_layers_minus1
    w.write_bits(0, 3); // vps_max_sub_layers_minus1
    w.write_bits(1, 1); // vps_temporal_id_nesting_flag
    w.write_bits(0xffff, 16); // vps_reserved_0xffff_16bits
    for &b in ptl {
        w.write_bits(u32::from(b), 8);
    }
    w.write_bits(1, 1); // vps_sub_layer_ordering_info_present_flag
    w.write_ue(1); // vps_max_dec_pic_buffering_minus1: the picture and its reference
    w.write_ue(0); // vps_max_num_reorder_pics
    w.write_ue(0); // vps_max_latency_increase_plus1
    w.write_bits(0, 6); // vps_max_layer_id
    w.write_ue(0); // vps_num_layer_sets_minus1
    w.write_bits(0, 1); // vps_timing_info_present_flag
    w.write_bits(0, 1); // vps_extension_flag
    w.rbsp_trailing_bits();
    w.into_bytes()
}

/// `seq_parameter_set_rbsp` (§7.3.2.2).
fn sps(ptl: &[u8; 12], width: usize, height: usize, padded: (usize, usize)) -> Vec<u8> {
    let mut w = BitWriter::new();
    w.write_bits(0, 4); // sps_video_parameter_set_id
    w.write_bits(0, 3); // sps_max_sub_layers_minus1
    w.write_bits(1, 1); // sps_temporal_id_nesting_flag
    for &b in ptl {
        w.write_bits(u32::from(b), 8);
    }
    w.write_ue(0); // sps_seq_parameter_set_id
    w.write_ue(0); // chroma_format_idc: monochrome
    w.write_ue(padded.0 as u32); // pic_width_in_luma_samples
    w.write_ue(padded.1 as u32); // pic_height_in_luma_samples
    let crop = (padded.0 - width, padded.1 - height);
    w.write_bit(crop != (0, 0)); // conformance_window_flag
    if crop != (0, 0) {
        // Offsets in luma samples (SubWidthC = SubHeightC = 1 for monochrome).
        w.write_ue(0);
        w.write_ue(crop.0 as u32);
        w.write_ue(0);
        w.write_ue(crop.1 as u32);
    }
    w.write_ue(BIT_DEPTH - 8); // bit_depth_luma_minus8
    w.write_ue(BIT_DEPTH - 8); // bit_depth_chroma_minus8
    w.write_ue(LOG2_MAX_POC_LSB_MINUS4);
    w.write_bits(1, 1); // sps_sub_layer_ordering_info_present_flag
    w.write_ue(1); // sps_max_dec_pic_buffering_minus1
    w.write_ue(0); // sps_max_num_reorder_pics
    w.write_ue(0); // sps_max_latency_increase_plus1
    w.write_ue(2); // log2_min_luma_coding_block_size_minus3: 32
    w.write_ue(0); // log2_diff_max_min_luma_coding_block_size: coding tree blocks of 32
    w.write_ue(0); // log2_min_luma_transform_block_size_minus2
    w.write_ue(3); // log2_diff_max_min_luma_transform_block_size
    w.write_ue(0); // max_transform_hierarchy_depth_inter
    w.write_ue(0); // max_transform_hierarchy_depth_intra
    w.write_bits(0, 1); // scaling_list_enabled_flag
    w.write_bits(0, 1); // amp_enabled_flag
    w.write_bits(0, 1); // sample_adaptive_offset_enabled_flag
    w.write_bits(0, 1); // pcm_enabled_flag

    // One short-term reference picture set: the picture before (st_ref_pic_set(0), §7.3.7).
    w.write_ue(1); // num_short_term_ref_pic_sets
    w.write_ue(1); // num_negative_pics
    w.write_ue(0); // num_positive_pics
    w.write_ue(0); // delta_poc_s0_minus1
    w.write_bits(1, 1); // used_by_curr_pic_s0_flag
    w.write_bits(0, 1); // long_term_ref_pics_present_flag
    w.write_bits(0, 1); // sps_temporal_mvp_enabled_flag
    w.write_bits(0, 1); // strong_intra_smoothing_enabled_flag
    w.write_bits(0, 1); // vui_parameters_present_flag
    w.write_bits(0, 1); // sps_extension_present_flag
    w.rbsp_trailing_bits();
    w.into_bytes()
}

/// `pic_parameter_set_rbsp` (§7.3.2.3).
fn pps() -> Vec<u8> {
    let mut w = BitWriter::new();
    w.write_ue(0); // pps_pic_parameter_set_id
    w.write_ue(0); // pps_seq_parameter_set_id
    w.write_bits(0, 1); // dependent_slice_segments_enabled_flag
    w.write_bits(0, 1); // output_flag_present_flag
    w.write_bits(0, 3); // num_extra_slice_header_bits
    w.write_bits(0, 1); // sign_data_hiding_enabled_flag
    w.write_bits(0, 1); // cabac_init_present_flag
    w.write_ue(0); // num_ref_idx_l0_default_active_minus1
    w.write_ue(0); // num_ref_idx_l1_default_active_minus1
    w.write_se(0); // init_qp_minus26
    w.write_bits(0, 1); // constrained_intra_pred_flag
    w.write_bits(0, 1); // transform_skip_enabled_flag
    w.write_bits(0, 1); // cu_qp_delta_enabled_flag
    w.write_se(0); // pps_cb_qp_offset
    w.write_se(0); // pps_cr_qp_offset
    w.write_bits(0, 1); // pps_slice_chroma_qp_offsets_present_flag
    w.write_bits(0, 1); // weighted_pred_flag
    w.write_bits(0, 1); // weighted_bipred_flag
    w.write_bits(1, 1); // transquant_bypass_enabled_flag
    w.write_bits(0, 1); // tiles_enabled_flag
    w.write_bits(0, 1); // entropy_coding_sync_enabled_flag
    w.write_bits(0, 1); // pps_loop_filter_across_slices_enabled_flag
    w.write_bits(1, 1); // deblocking_filter_control_present_flag
    w.write_bits(0, 1); // deblocking_filter_override_enabled_flag
    w.write_bits(1, 1); // pps_deblocking_filter_disabled_flag
    w.write_bits(0, 1); // pps_scaling_list_data_present_flag
    w.write_bits(0, 1); // lists_modification_present_flag
    w.write_ue(0); // log2_parallel_merge_level_minus2
    w.write_bits(0, 1); // slice_segment_header_extension_present_flag
    w.write_bits(0, 1); // pps_extension_present_flag
    w.rbsp_trailing_bits();
    w.into_bytes()
}

/// `slice_segment_header` (§7.3.6.1) of a picture's only slice, and `byte_alignment()`.
fn slice_header(w: &mut BitWriter, key: bool, poc: u32) {
    w.write_bits(1, 1); // first_slice_segment_in_pic_flag
    if key {
        w.write_bits(0, 1); // no_output_of_prior_pics_flag
    }
    w.write_ue(0); // slice_pic_parameter_set_id
    w.write_ue(if key { 2 } else { 1 }); // slice_type: I or P
    if !key {
        w.write_bits(poc, LOG2_MAX_POC_LSB_MINUS4 + 4); // slice_pic_order_cnt_lsb
        w.write_bits(1, 1); // short_term_ref_pic_set_sps_flag (the SPS's only set)
        w.write_bits(0, 1); // num_ref_idx_active_override_flag
        w.write_ue(4); // five_minus_max_num_merge_cand: one candidate, no merge_idx
    }
    w.write_se(0); // slice_qp_delta
    w.write_bits(1, 1); // byte_alignment(): alignment_bit_equal_to_one
    w.align_zero();
}

/// The up-right diagonal scan of a `n`×`n` block (§6.5.3): (x, y) in coding order.
fn diagonal_scan(n: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::with_capacity(n * n);
    let mut d = 0;
    while out.len() < n * n {
        for x in 0..=d {
            let y = d - x;
            if x < n && y < n {
                out.push((x, y));
            }
        }
        d += 1;
    }
    out
}

/// The `last_sig_coeff_{x,y}_prefix` of each position of a 32-wide block, and the first position
/// of each prefix (the binarization of §9.3.3.1 with equations 7-78 and 7-79 read backwards).
const GROUP_IDX: [u32; 32] = [
    0, 1, 2, 3, 4, 4, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9,
];
const MIN_IN_GROUP: [u32; 10] = [0, 1, 2, 3, 4, 6, 8, 12, 16, 24];

/// The contexts a lossless intra block of 32×32 uses, with their initValues for I (initType 0)
/// or P (initType 1) slices.
struct ResidualContexts {
    bypass: Context,
    prev_intra: Context,
    cbf_luma: Context,
    last_x: [Context; 18],
    last_y: [Context; 18],
    csbf: [Context; 2],
    sig: [Context; 27],
    greater1: [Context; 16],
    greater2: [Context; 4],
    sub_scan: Vec<(usize, usize)>,
    scan: Vec<(usize, usize)>,
}

impl ResidualContexts {
    fn new(key: bool) -> Self {
        let t = usize::from(!key);
        const LAST: [[i32; 18]; 2] = [
            [
                110, 110, 124, 125, 140, 153, 125, 127, 140, 109, 111, 143, 127, 111, 79, 108, 123,
                63,
            ],
            [
                125, 110, 94, 110, 95, 79, 125, 111, 110, 78, 110, 111, 111, 95, 94, 108, 123, 108,
            ],
        ];
        const CSBF: [[i32; 2]; 2] = [[91, 171], [121, 140]];
        const SIG: [[i32; 27]; 2] = [
            [
                111, 111, 125, 110, 110, 94, 124, 108, 124, 107, 125, 141, 179, 153, 125, 107, 125,
                141, 179, 153, 125, 107, 125, 141, 179, 153, 125,
            ],
            [
                155, 154, 139, 153, 139, 123, 123, 63, 153, 166, 183, 140, 136, 153, 154, 166, 183,
                140, 136, 153, 154, 166, 183, 140, 136, 153, 154,
            ],
        ];
        const G1: [[i32; 16]; 2] = [
            [
                140, 92, 137, 138, 140, 152, 138, 139, 153, 74, 149, 92, 139, 107, 122, 152,
            ],
            [
                154, 196, 196, 167, 154, 152, 167, 182, 182, 134, 149, 136, 153, 121, 136, 137,
            ],
        ];
        const G2: [[i32; 4]; 2] = [[138, 153, 136, 167], [107, 167, 91, 122]];
        ResidualContexts {
            bypass: Context::new(154),
            prev_intra: Context::new(if key { 184 } else { 154 }),
            cbf_luma: Context::new(if key { 141 } else { 111 }),
            last_x: LAST[t].map(Context::new),
            last_y: LAST[t].map(Context::new),
            csbf: CSBF[t].map(Context::new),
            sig: SIG[t].map(Context::new),
            greater1: G1[t].map(Context::new),
            greater2: G2[t].map(Context::new),
            sub_scan: diagonal_scan(4),
            scan: diagonal_scan(CU / 4),
        }
    }

    /// `residual_coding( x0, y0, 5, 0 )` (§7.3.8.11) of a transquant-bypass 32×32 luma block:
    /// the levels are the residual itself. `r` is row-major and not all zero.
    fn code(&mut self, cabac: &mut Cabac, w: &mut BitWriter, r: &[i32]) {
        const SB: usize = CU / 4;
        let at = |x: usize, y: usize| r[y * CU + x];
        // Last significant position in scan order.
        let (mut last_i, mut last_n) = (0, 0);
        for (i, &(xs, ys)) in self.scan.iter().enumerate() {
            for (n, &(xp, yp)) in self.sub_scan.iter().enumerate() {
                if at(xs * 4 + xp, ys * 4 + yp) != 0 {
                    (last_i, last_n) = (i, n);
                }
            }
        }
        let (xs, ys) = self.scan[last_i];
        let (xp, yp) = self.sub_scan[last_n];
        let (last_x, last_y) = ((xs * 4 + xp) as u32, (ys * 4 + yp) as u32);
        // Prefixes: truncated unary, cMax 9, ctxOffset 10 and ctxShift 1 for a 32×32 luma block.
        let prefix = |cabac: &mut Cabac, w: &mut BitWriter, ctxs: &mut [Context; 18], v: u32| {
            let g = GROUP_IDX[v as usize];
            for b in 0..g {
                cabac.decision(w, &mut ctxs[10 + (b as usize >> 1)], true);
            }
            if g < 9 {
                cabac.decision(w, &mut ctxs[10 + (g as usize >> 1)], false);
            }
        };
        prefix(cabac, w, &mut self.last_x, last_x);
        prefix(cabac, w, &mut self.last_y, last_y);
        for v in [last_x, last_y] {
            let g = GROUP_IDX[v as usize];
            if g > 3 {
                let bits = (g >> 1) - 1;
                let suffix = v - MIN_IN_GROUP[g as usize];
                for b in (0..bits).rev() {
                    cabac.bypass(w, (suffix >> b) & 1 == 1);
                }
            }
        }
        let mut csbf = [[false; SB]; SB];
        let mut greater1_state = 1u8;
        for i in (0..=last_i).rev() {
            let (xs, ys) = self.scan[i];
            let coded = (0..16).any(|n| {
                let (xp, yp) = self.sub_scan[n];
                at(xs * 4 + xp, ys * 4 + yp) != 0
            });
            let mut infer_dc = false;
            if i < last_i && i > 0 {
                let right = xs + 1 < SB && csbf[xs + 1][ys];
                let below = ys + 1 < SB && csbf[xs][ys + 1];
                let ctx = usize::from(right || below);
                cabac.decision(w, &mut self.csbf[ctx], coded);
                csbf[xs][ys] = coded;
                infer_dc = true;
            } else {
                csbf[xs][ys] = true;
            }
            if !csbf[xs][ys] {
                continue;
            }
            let prev = usize::from(xs + 1 < SB && csbf[xs + 1][ys])
                | usize::from(ys + 1 < SB && csbf[xs][ys + 1]) << 1;
            let start = if i == last_i { last_n } else { 16 };
            let mut sig = [false; 16];
            let mut level = [0i32; 16];
            for n in (0..16).rev() {
                let (xp, yp) = self.sub_scan[n];
                let v = at(xs * 4 + xp, ys * 4 + yp);
                level[n] = v;
                if n > start {
                    continue;
                }
                if i == last_i && n == last_n {
                    sig[n] = true;
                    continue;
                }
                if n == 0 && infer_dc {
                    // Inferred significant: no other coefficient of this block was.
                    sig[n] = true;
                    continue;
                }
                let (xc, yc) = (xs * 4 + xp, ys * 4 + yp);
                let ctx = if xc + yc == 0 {
                    0
                } else {
                    let base = match prev {
                        0 => match xp + yp {
                            0 => 2,
                            1 | 2 => 1,
                            _ => 0,
                        },
                        1 => match yp {
                            0 => 2,
                            1 => 1,
                            _ => 0,
                        },
                        2 => match xp {
                            0 => 2,
                            1 => 1,
                            _ => 0,
                        },
                        _ => 2,
                    };
                    base + if (xs, ys) != (0, 0) { 3 } else { 0 } + 21
                };
                sig[n] = v != 0;
                cabac.decision(w, &mut self.sig[ctx], sig[n]);
                if sig[n] {
                    infer_dc = false;
                }
            }
            debug_assert!(
                (0..16).all(|n| sig[n] == (level[n] != 0)),
                "inferred wrongly"
            );
            // Greater-than-1 flags for the first eight, one greater-than-2 flag.
            let mut ctx_set = if i == 0 { 0 } else { 2 };
            if i != last_i && greater1_state == 0 {
                ctx_set += 1;
            }
            let mut g1ctx = 1u8;
            let (mut flagged, mut first_g1) = (0, None);
            let mut g1 = [false; 16];
            for n in (0..16).rev().filter(|&n| sig[n]) {
                if flagged == 8 {
                    break;
                }
                flagged += 1;
                g1[n] = level[n].abs() > 1;
                let inc = ctx_set * 4 + usize::from(g1ctx);
                cabac.decision(w, &mut self.greater1[inc], g1[n]);
                if g1[n] {
                    g1ctx = 0;
                    first_g1.get_or_insert(n);
                } else if g1ctx > 0 && g1ctx < 3 {
                    g1ctx += 1;
                }
            }
            greater1_state = g1ctx;
            let mut g2 = [false; 16];
            if let Some(n) = first_g1 {
                g2[n] = level[n].abs() > 2;
                cabac.decision(w, &mut self.greater2[ctx_set], g2[n]);
            }
            for n in (0..16).rev().filter(|&n| sig[n]) {
                cabac.bypass(w, level[n] < 0);
            }
            let (mut count, mut rice) = (0, 0u32);
            for n in (0..16).rev().filter(|&n| sig[n]) {
                let base = 1 + i32::from(g1[n]) + i32::from(g2[n]);
                let threshold = if count < 8 {
                    if Some(n) == first_g1 {
                        3
                    } else {
                        2
                    }
                } else {
                    1
                };
                if base == threshold {
                    let rem = (level[n].abs() - base) as u32;
                    remaining(cabac, w, rem, rice);
                    if (base as u32 + rem) > 3 * (1 << rice) {
                        rice = (rice + 1).min(4);
                    }
                }
                count += 1;
            }
        }
    }
}

/// `coeff_abs_level_remaining` (§9.3.3.11 without extended precision): a truncated Rice prefix
/// with cMax 4 << rice, then an Exp-Golomb suffix of order rice + 1 beyond it; all bypass.
fn remaining(cabac: &mut Cabac, w: &mut BitWriter, value: u32, rice: u32) {
    let c_max = 4 << rice;
    if value < c_max {
        for _ in 0..(value >> rice) {
            cabac.bypass(w, true);
        }
        cabac.bypass(w, false);
        for b in (0..rice).rev() {
            cabac.bypass(w, (value >> b) & 1 == 1);
        }
        return;
    }
    for _ in 0..4 {
        cabac.bypass(w, true);
    }
    let (mut v, mut k) = (value - c_max, rice + 1);
    while v >= 1 << k {
        cabac.bypass(w, true);
        v -= 1 << k;
        k += 1;
    }
    cabac.bypass(w, false);
    for b in (0..k).rev() {
        cabac.bypass(w, (v >> b) & 1 == 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_initialisation_follows_equation_9_6() {
        // initValue 154 at QP 26: slopeIdx 9, offsetIdx 10 → m 0, n 64 → preCtxState 64:
        // state 0, MPS 1. initValue 197: m 15, n 24 → (15·26 >> 4) + 24 = 48 → state 15, MPS 0.
        let c = Context::new(154);
        assert_eq!((c.state, c.mps), (0, true));
        let c = Context::new(197);
        assert_eq!((c.state, c.mps), (15, false));
    }

    #[test]
    fn profile_tier_level_names_monochrome_12() {
        let p = profile_tier_level();
        assert_eq!(p[0], 4, "profile space 0, Main tier, profile 4");
        assert_eq!(p[1], 0x08, "compatibility flag 4 only");
        // progressive 1, interlaced 0, non-packed 0, frame-only 1, max_12bit 1, max_10bit 0,
        // max_8bit 0, max_422chroma 1 | max_420chroma 1, max_monochrome 1, intra 0,
        // one_picture 0, lower_bit_rate 1, then zeros.
        assert_eq!(&p[5..7], &[0b1001_1001, 0b1100_1000]);
        assert_eq!(p[11], 186);
    }

    #[test]
    fn refuses_codes_wider_than_12_bits_and_wrong_sizes() {
        let mut e = DepthEncoder::new(40, 30, 10).unwrap();
        assert!(e.encode(&[0; 40 * 29]).unwrap_err().contains("40×30"));
        let mut frame = vec![0u16; 40 * 30];
        frame[7] = 4096;
        assert!(e.encode(&frame).unwrap_err().contains("4096"));
        assert!(DepthEncoder::new(0, 30, 10).is_err());
    }

    #[test]
    fn unchanged_blocks_are_skipped_and_key_frames_code_everything() {
        let (w, h) = (64, 64);
        let mut e = DepthEncoder::new(w, h, 3).unwrap();
        let frame: Vec<u16> = (0..w * h).map(|i| (i * 7 % 4096) as u16).collect();
        let (first, key) = e.encode(&frame).unwrap();
        assert!(key);
        // Four blocks of 1024 residuals of a ramp: far from free.
        assert!(first.len() > 4 * 1024, "{}", first.len());
        let (same, key) = e.encode(&frame).unwrap();
        assert!(!key);
        assert!(
            same.len() < 16,
            "an unchanged frame is four skip bins: {}",
            same.len()
        );
        // One block changed: three skip bins and one block's residual.
        let mut moved = frame.clone();
        moved[w * 40 + 40] ^= 1;
        let (one, key) = e.encode(&moved).unwrap();
        assert!(!key);
        assert!(
            one.len() > 1024 / 4 && one.len() < first.len() / 2,
            "{} of {}",
            one.len(),
            first.len()
        );
        let (_, key) = e.encode(&moved).unwrap();
        assert!(key, "gop 3: the fourth frame is a key frame");
    }
}
