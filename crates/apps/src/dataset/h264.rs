//! An H.264 encoder for a camera that does not move: a macroblock whose pixels did not change
//! since the frame before is skipped, every other one is coded Intra 16×16.
//!
//! Why not a general encoder: a recording of a tabletop run changes in a few percent of its
//! pixels from one frame to the next (the arm, the object it carries). A general encoder still
//! analyses the whole picture every frame (motion search, adaptive quantisation statistics,
//! deblocking): at 640×480 that cost 1.6–2.7 ms a frame on one core, and a run's simulation
//! produces frames faster than that. Here an unchanged macroblock costs one comparison and a
//! `P_Skip`, which a decoder copies from the previous picture exactly (ITU-T H.264 (08/2021)
//! §8.4.1.1: the predicted motion vector of a skipped macroblock is zero when every neighbour
//! has zero motion or is intra, and no macroblock of these streams has any motion).
//!
//! The stream is Constrained Baseline (§A.2.1), CAVLC, one slice per picture, one reference
//! picture, picture order from the frame number (`pic_order_cnt_type` 2, §8.2.1.3: output order
//! is decoding order, as the MP4 writer's single time-to-sample entry assumes), deblocking off
//! (`disable_deblocking_filter_idc` 1, §7.4.3), so the encoder's reconstruction — which the next
//! frame's intra prediction reads — is the decoder's, bit for bit. An IDR picture every `gop`
//! frames codes every macroblock.
//!
//! The transforms, quantisers, intra predictors, CAVLC residual coder and bit writer are
//! `rusty_h264-common`'s; the syntax around them (parameter sets, slice headers, macroblock
//! layers, the neighbour contexts) is written here from the standard's clauses cited inline.

use rusty_h264_common::cavlc::{encode_residual_block, scan_4x4_ac, scan_4x4_dcac};
use rusty_h264_common::nal::{emulation_prevent_into, nal_header_byte, NalUnitType};
use rusty_h264_common::predict::{
    chroma8x8_pred, chroma_qp, clip_u8, luma16x16_pred, nc_from_neighbors, I16Mode,
};
use rusty_h264_common::transform::{
    dequantize, forward_core, forward_quant_chroma_dc, forward_quant_luma_dc, inverse_core,
    inverse_quant_chroma_dc, inverse_quant_luma_dc, quantize,
};
use rusty_h264_common::BitWriter;

/// `log2_max_frame_num_minus4`: frame numbers of 16 bits, so a key-frame interval up to 65 535.
const LOG2_MAX_FRAME_NUM_MINUS4: u32 = 12;

/// One plane's samples, padded to whole macroblocks: owned for the reconstruction, borrowed for
/// the frame being coded.
struct Plane<D = Vec<u8>> {
    data: D,
    stride: usize,
}

impl Plane {
    fn new(width: usize, height: usize) -> Self {
        Plane {
            data: vec![0; width * height],
            stride: width,
        }
    }
}

/// Counts of non-zero coefficients per 4×4 block, the CAVLC `nC` context (§9.2.1).
struct Nnz {
    /// Blocks per row.
    cols: usize,
    counts: Vec<u8>,
}

impl Nnz {
    fn new(cols: usize, rows: usize) -> Self {
        Nnz {
            cols,
            counts: vec![0; cols * rows],
        }
    }

    /// `nC` of block (`x`, `y`): blocks left and above, when inside the picture (one slice, so
    /// every earlier macroblock is available).
    fn nc(&self, x: usize, y: usize) -> i32 {
        let left = (x > 0).then(|| self.counts[y * self.cols + x - 1]);
        let top = (y > 0).then(|| self.counts[(y - 1) * self.cols + x]);
        nc_from_neighbors(left, top)
    }

    fn set(&mut self, x: usize, y: usize, n: usize) {
        self.counts[y * self.cols + x] = n as u8;
    }
}

/// Raster position (x, y) in a macroblock's 4×4 grid of luma block `k` in decoding order
/// (§6.4.3: 8×8 quadrants in raster order, 4×4 blocks in raster order within each).
fn luma_block_xy(k: usize) -> (usize, usize) {
    let (q, b) = (k / 4, k % 4);
    ((q % 2) * 2 + b % 2, (q / 2) * 2 + b / 2)
}

/// A macroblock's quantised Intra 16×16 residual, ready to write.
#[derive(Clone)]
struct IntraMb {
    luma_mode: I16Mode,
    chroma_mode: u8,
    /// Luma DC levels, raster over the 4×4 blocks.
    luma_dc: [i32; 16],
    /// Luma AC levels per block, raster over the 4×4 blocks (index 0 unused).
    luma_ac: [[i32; 16]; 16],
    /// Chroma DC levels, [Cb, Cr], raster over the 2×2 blocks.
    chroma_dc: [[i32; 4]; 2],
    /// Chroma AC levels, [Cb, Cr] × raster 2×2 blocks (index 0 unused).
    chroma_ac: [[[i32; 16]; 4]; 2],
    cbp_luma: u32,
    cbp_chroma: u32,
}

/// The encoder; see the module documentation.
pub struct StillCameraEncoder {
    width: usize,
    height: usize,
    mbs_x: usize,
    mbs_y: usize,
    qp: u8,
    gop: u32,
    /// Frames coded so far.
    frames: u64,
    /// IDR pictures coded so far (consecutive IDRs need different `idr_pic_id`s, §7.4.3).
    idrs: u32,
    /// Frame number of the next picture since the last IDR.
    frame_num: u32,
    /// What a decoder holds after the last picture: intra prediction reads it.
    recon: [Plane; 3],
    nnz_luma: Nnz,
    nnz_chroma: [Nnz; 2],
    /// Per macroblock, its last coding and the reconstructed edges it was predicted from.
    /// Coding is a pure function of the macroblock's source samples and those edges, and every
    /// macroblock whose source changed is coded again the frame it changes; so on a key frame a
    /// macroblock whose source did not change and whose edges are the same gets the same levels
    /// (and already holds the same reconstruction) without predicting, transforming and
    /// quantising it again. A key frame of a still camera codes every macroblock, most of them
    /// the table behind the arm; this is where its time went.
    last_coded: Vec<Option<(Edges, IntraMb)>>,
    /// Whether `last_coded` is used (off only to check that it changes nothing).
    reuse: bool,
    /// Key-frame macroblocks taken from `last_coded`.
    reused: u64,
    sps: Vec<u8>,
    pps: Vec<u8>,
}

/// The reconstructed samples a macroblock's intra prediction reads: luma row above, column to
/// the left and corner, then the same for Cb and Cr.
#[derive(Clone, PartialEq, Eq)]
struct Edges {
    luma: ([u8; 16], [u8; 16], u8),
    chroma: [([u8; 8], [u8; 8], u8); 2],
}

impl StillCameraEncoder {
    /// An encoder for `width`×`height` pictures (even sides), quantiser `qp` (0–51), a key
    /// frame every `gop` frames.
    pub fn new(width: usize, height: usize, qp: u8, gop: u32) -> Self {
        let (mbs_x, mbs_y) = (width.div_ceil(16), height.div_ceil(16));
        let qp = qp.min(51);
        let mut e = StillCameraEncoder {
            width,
            height,
            mbs_x,
            mbs_y,
            qp,
            gop: gop.max(1),
            frames: 0,
            idrs: 0,
            frame_num: 0,
            recon: [
                Plane::new(mbs_x * 16, mbs_y * 16),
                Plane::new(mbs_x * 8, mbs_y * 8),
                Plane::new(mbs_x * 8, mbs_y * 8),
            ],
            nnz_luma: Nnz::new(mbs_x * 4, mbs_y * 4),
            nnz_chroma: [
                Nnz::new(mbs_x * 2, mbs_y * 2),
                Nnz::new(mbs_x * 2, mbs_y * 2),
            ],
            last_coded: vec![None; mbs_x * mbs_y],
            reuse: true,
            reused: 0,
            sps: Vec::new(),
            pps: Vec::new(),
        };
        e.sps = nal(3, NalUnitType::Sps, &e.sps_rbsp());
        e.pps = nal(3, NalUnitType::Pps, &e.pps_rbsp());
        e
    }

    /// Sequence parameter set (§7.3.2.1.1), Constrained Baseline.
    fn sps_rbsp(&self) -> Vec<u8> {
        let mut w = BitWriter::new();
        w.write_bits(66, 8); // profile_idc: Baseline
        w.write_bits(0b1100_0000, 8); // constraint_set0 and set1: Constrained Baseline
        w.write_bits(level_idc(self.mbs_x * self.mbs_y), 8);
        w.write_ue(0); // seq_parameter_set_id
        w.write_ue(LOG2_MAX_FRAME_NUM_MINUS4);
        w.write_ue(2); // pic_order_cnt_type
        w.write_ue(1); // max_num_ref_frames
        w.write_bit(false); // gaps_in_frame_num_value_allowed_flag
        w.write_ue(self.mbs_x as u32 - 1);
        w.write_ue(self.mbs_y as u32 - 1);
        w.write_bit(true); // frame_mbs_only_flag
        w.write_bit(true); // direct_8x8_inference_flag
        let (crop_x, crop_y) = (self.mbs_x * 16 - self.width, self.mbs_y * 16 - self.height);
        w.write_bit(crop_x + crop_y > 0); // frame_cropping_flag
        if crop_x + crop_y > 0 {
            // Offsets in units of 2 samples for 4:2:0 frames (§7.4.2.1.1, CropUnitX/Y).
            w.write_ue(0);
            w.write_ue(crop_x as u32 / 2);
            w.write_ue(0);
            w.write_ue(crop_y as u32 / 2);
        }
        w.write_bit(false); // vui_parameters_present_flag
        w.rbsp_trailing_bits();
        w.into_bytes()
    }

    /// Picture parameter set (§7.3.2.2).
    fn pps_rbsp(&self) -> Vec<u8> {
        let mut w = BitWriter::new();
        w.write_ue(0); // pic_parameter_set_id
        w.write_ue(0); // seq_parameter_set_id
        w.write_bit(false); // entropy_coding_mode_flag: CAVLC
        w.write_bit(false); // bottom_field_pic_order_in_frame_present_flag
        w.write_ue(0); // num_slice_groups_minus1
        w.write_ue(0); // num_ref_idx_l0_default_active_minus1
        w.write_ue(0); // num_ref_idx_l1_default_active_minus1
        w.write_bit(false); // weighted_pred_flag
        w.write_bits(0, 2); // weighted_bipred_idc
        w.write_se(i32::from(self.qp) - 26); // pic_init_qp_minus26
        w.write_se(0); // pic_init_qs_minus26
        w.write_se(0); // chroma_qp_index_offset
        w.write_bit(true); // deblocking_filter_control_present_flag
        w.write_bit(false); // constrained_intra_pred_flag
        w.write_bit(false); // redundant_pic_cnt_present_flag
        w.rbsp_trailing_bits();
        w.into_bytes()
    }

    /// Macroblocks across and down: the planes `encode` takes are `16·mbs.0` × `16·mbs.1`
    /// (luma) and half that each way (chroma), the picture's right and bottom edges repeated
    /// into the padding.
    pub fn macroblocks(&self) -> (usize, usize) {
        (self.mbs_x, self.mbs_y)
    }

    /// Codes one frame and returns its access unit in Annex B form, parameter sets first on a
    /// key frame. `planes` are Y, Cb, Cr padded to whole macroblocks (see [`Self::macroblocks`]);
    /// `changed[mb]`, row by row, says whether macroblock `mb` differs from the previous frame
    /// given (ignored on key frames). A macroblock wrongly said unchanged shows its old pixels
    /// until the next key frame.
    pub fn encode(&mut self, planes: [&[u8]; 3], changed: &[bool]) -> Vec<u8> {
        let strides = [self.mbs_x * 16, self.mbs_x * 8, self.mbs_x * 8];
        let source = [0, 1, 2].map(|c| Plane {
            data: planes[c],
            stride: strides[c],
        });
        let idr = self.frames.is_multiple_of(u64::from(self.gop));
        if idr {
            self.frame_num = 0;
        }
        let mut bits = BitWriter::with_capacity(if idr { 64 << 10 } else { 8 << 10 });
        self.slice_header(&mut bits, idr);
        let mut skip_run = 0u32;
        for mb_y in 0..self.mbs_y {
            for mb_x in 0..self.mbs_x {
                if !idr && !changed[mb_y * self.mbs_x + mb_x] {
                    self.clear_nnz(mb_x, mb_y);
                    skip_run += 1;
                    continue;
                }
                if !idr {
                    bits.write_ue(skip_run); // mb_skip_run (§7.3.4)
                    skip_run = 0;
                }
                let at = mb_y * self.mbs_x + mb_x;
                let edges = self.edges(mb_x, mb_y);
                let cached = self.last_coded[at]
                    .take()
                    .filter(|(e, _)| self.reuse && !changed[at] && *e == edges);
                let mb = match cached {
                    Some((_, mb)) => {
                        self.reused += 1;
                        mb
                    }
                    None => self.code_intra(&source, mb_x, mb_y, &edges),
                };
                self.write_intra(&mut bits, &mb, mb_x, mb_y, idr);
                self.last_coded[at] = Some((edges, mb));
            }
        }
        if skip_run > 0 {
            bits.write_ue(skip_run);
        }
        bits.rbsp_trailing_bits();
        let slice = bits.into_bytes();

        let mut unit = Vec::with_capacity(slice.len() + 64);
        if idr {
            unit.extend_from_slice(&self.sps);
            unit.extend_from_slice(&self.pps);
            let t = NalUnitType::IdrSlice;
            unit.extend_from_slice(&nal(3, t, &slice));
            self.idrs = self.idrs.wrapping_add(1);
        } else {
            unit.extend_from_slice(&nal(2, NalUnitType::NonIdrSlice, &slice));
        }
        self.frames += 1;
        self.frame_num = (self.frame_num + 1) % (1 << (LOG2_MAX_FRAME_NUM_MINUS4 + 4));
        unit
    }

    /// Slice header (§7.3.3) of a whole-picture I or P slice.
    fn slice_header(&self, w: &mut BitWriter, idr: bool) {
        w.write_ue(0); // first_mb_in_slice
        w.write_ue(if idr { 7 } else { 5 }); // slice_type: I or P, all slices alike
        w.write_ue(0); // pic_parameter_set_id
        w.write_bits(self.frame_num, LOG2_MAX_FRAME_NUM_MINUS4 + 4);
        if idr {
            w.write_ue(self.idrs % 2); // idr_pic_id
        } else {
            w.write_bit(false); // num_ref_idx_active_override_flag
            w.write_bit(false); // ref_pic_list_modification_flag_l0
        }
        // dec_ref_pic_marking (§7.3.3.3), every picture being a reference.
        if idr {
            w.write_bit(false); // no_output_of_prior_pics_flag
            w.write_bit(false); // long_term_reference_flag
        } else {
            w.write_bit(false); // adaptive_ref_pic_marking_mode_flag: sliding window
        }
        w.write_se(0); // slice_qp_delta
        w.write_ue(1); // disable_deblocking_filter_idc: off
    }

    /// What macroblock (`mb_x`, `mb_y`)'s prediction reads from the reconstruction now.
    fn edges(&self, mb_x: usize, mb_y: usize) -> Edges {
        Edges {
            luma: edges::<16>(&self.recon[0], mb_x * 16, mb_y * 16),
            chroma: [1, 2].map(|c| edges::<8>(&self.recon[c], mb_x * 8, mb_y * 8)),
        }
    }

    fn clear_nnz(&mut self, mb_x: usize, mb_y: usize) {
        for k in 0..16 {
            self.nnz_luma.set(mb_x * 4 + k % 4, mb_y * 4 + k / 4, 0);
        }
        for nnz in &mut self.nnz_chroma {
            for k in 0..4 {
                nnz.set(mb_x * 2 + k % 2, mb_y * 2 + k / 2, 0);
            }
        }
    }

    /// Picks the prediction modes, quantises the residual and writes the reconstruction.
    fn code_intra(
        &mut self,
        source: &[Plane<&[u8]>; 3],
        mb_x: usize,
        mb_y: usize,
        edges: &Edges,
    ) -> IntraMb {
        let qp = self.qp;
        let (top_ok, left_ok) = (mb_y > 0, mb_x > 0);

        // Luma: the cheapest available 16×16 predictor by sum of absolute differences.
        let (top, left, corner) = edges.luma;
        let src = block::<16, _>(&source[0], mb_x * 16, mb_y * 16);
        let modes = [
            I16Mode::Vertical,
            I16Mode::Horizontal,
            I16Mode::Dc,
            I16Mode::Plane,
        ];
        let (luma_mode, pred) = modes
            .into_iter()
            .filter(|m| m.available(top_ok, left_ok))
            .map(|m| (m, luma16x16_pred(m, top_ok, left_ok, &top, &left, corner)))
            .min_by_key(|(_, p)| sad(&src, p))
            .expect("DC prediction is always available");
        let mut dc = [0i32; 16];
        let mut coeffs = [[0i32; 16]; 16];
        for (b, c) in coeffs.iter_mut().enumerate() {
            let (bx, by) = (b % 4, b / 4);
            let mut res = [0i32; 16];
            for (i, r) in res.iter_mut().enumerate() {
                let at = (by * 4 + i / 4) * 16 + bx * 4 + i % 4;
                *r = i32::from(src[at]) - i32::from(pred[at]);
            }
            *c = forward_core(&res);
            dc[b] = c[0];
        }
        let luma_dc = forward_quant_luma_dc(&dc, qp, true);
        let mut luma_ac = [[0i32; 16]; 16];
        for (ac, c) in luma_ac.iter_mut().zip(&coeffs) {
            *ac = quantize(c, qp, 3);
            ac[0] = 0;
        }
        let cbp_luma = if luma_ac.iter().flatten().any(|&l| l != 0) {
            15
        } else {
            0
        };
        let dc_rec = inverse_quant_luma_dc(&luma_dc, qp);
        let mut out = [0u8; 256];
        for b in 0..16 {
            let res = residual(&luma_ac[b], dc_rec[b], qp);
            let (bx, by) = (b % 4, b / 4);
            for (i, r) in res.iter().enumerate() {
                let at = (by * 4 + i / 4) * 16 + bx * 4 + i % 4;
                out[at] = clip_u8(i32::from(pred[at]) + r);
            }
        }
        put_block::<16>(&mut self.recon[0], mb_x * 16, mb_y * 16, &out);

        // Chroma: one predictor for both components (§7.4.5.1), the cheapest over both.
        let qpc = chroma_qp(qp);
        let src_c = [1, 2].map(|c| block::<8, _>(&source[c], mb_x * 8, mb_y * 8));
        let edges_c = edges.chroma;
        let available = |m: u8| match m {
            0 => true,
            1 => left_ok,
            2 => top_ok,
            _ => top_ok && left_ok,
        };
        let predict = |m: u8| {
            edges_c
                .map(|(top, left, corner)| chroma8x8_pred(m, top_ok, left_ok, &top, &left, corner))
        };
        let (chroma_mode, pred_c) = (0u8..4)
            .filter(|&m| available(m))
            .map(|m| (m, predict(m)))
            .min_by_key(|(_, p)| sad(&src_c[0], &p[0]) + sad(&src_c[1], &p[1]))
            .expect("DC prediction is always available");
        let mut chroma_dc = [[0i32; 4]; 2];
        let mut chroma_ac = [[[0i32; 16]; 4]; 2];
        for c in 0..2 {
            let mut dc = [0i32; 4];
            for b in 0..4 {
                let (bx, by) = (b % 2, b / 2);
                let mut res = [0i32; 16];
                for (i, r) in res.iter_mut().enumerate() {
                    let at = (by * 4 + i / 4) * 8 + bx * 4 + i % 4;
                    *r = i32::from(src_c[c][at]) - i32::from(pred_c[c][at]);
                }
                let coeffs = forward_core(&res);
                dc[b] = coeffs[0];
                chroma_ac[c][b] = quantize(&coeffs, qpc, 3);
                chroma_ac[c][b][0] = 0;
            }
            chroma_dc[c] = forward_quant_chroma_dc(&dc, qpc, true);
        }
        let any_ac = chroma_ac.iter().flatten().flatten().any(|&l| l != 0);
        let any_dc = chroma_dc.iter().flatten().any(|&l| l != 0);
        let cbp_chroma = if any_ac {
            2
        } else if any_dc {
            1
        } else {
            0
        };
        for c in 0..2 {
            let dc_rec = inverse_quant_chroma_dc(&chroma_dc[c], qpc);
            let mut out = [0u8; 64];
            for b in 0..4 {
                let res = residual(&chroma_ac[c][b], dc_rec[b], qpc);
                let (bx, by) = (b % 2, b / 2);
                for (i, r) in res.iter().enumerate() {
                    let at = (by * 4 + i / 4) * 8 + bx * 4 + i % 4;
                    out[at] = clip_u8(i32::from(pred_c[c][at]) + r);
                }
            }
            put_block::<8>(&mut self.recon[c + 1], mb_x * 8, mb_y * 8, &out);
        }
        IntraMb {
            luma_mode,
            chroma_mode,
            luma_dc,
            luma_ac,
            chroma_dc,
            chroma_ac,
            cbp_luma,
            cbp_chroma,
        }
    }

    /// `macroblock_layer()` of an Intra 16×16 macroblock (§7.3.5), with its residual (§7.3.5.3).
    fn write_intra(&mut self, w: &mut BitWriter, mb: &IntraMb, mb_x: usize, mb_y: usize, i: bool) {
        // mb_type (Table 7-11): 1 + mode + 4·chroma cbp + 12 when the luma AC is coded; in a
        // P slice the intra types follow the 5 inter ones (Table 7-13).
        let ty =
            1 + mb.luma_mode as u32 + 4 * mb.cbp_chroma + if mb.cbp_luma == 15 { 12 } else { 0 };
        w.write_ue(if i { ty } else { ty + 5 });
        w.write_ue(u32::from(mb.chroma_mode)); // intra_chroma_pred_mode
        w.write_se(0); // mb_qp_delta
        let (bx0, by0) = (mb_x * 4, mb_y * 4);
        // Intra16x16DCLevel: nC of block 0 (§9.2.1).
        let nc = self.nnz_luma.nc(bx0, by0);
        encode_residual_block(w, &scan_4x4_dcac(&mb.luma_dc), 16, nc);
        for k in 0..16 {
            let (x, y) = luma_block_xy(k);
            let n = if mb.cbp_luma == 15 {
                let nc = self.nnz_luma.nc(bx0 + x, by0 + y);
                encode_residual_block(w, &scan_4x4_ac(&mb.luma_ac[y * 4 + x]), 15, nc)
            } else {
                0
            };
            self.nnz_luma.set(bx0 + x, by0 + y, n);
        }
        if mb.cbp_chroma > 0 {
            for dc in &mb.chroma_dc {
                encode_residual_block(w, dc, 4, -1);
            }
        }
        let (cx0, cy0) = (mb_x * 2, mb_y * 2);
        for (c, nnz) in self.nnz_chroma.iter_mut().enumerate() {
            for b in 0..4 {
                let (x, y) = (cx0 + b % 2, cy0 + b / 2);
                let n = if mb.cbp_chroma == 2 {
                    let nc = nnz.nc(x, y);
                    encode_residual_block(w, &scan_4x4_ac(&mb.chroma_ac[c][b]), 15, nc)
                } else {
                    0
                };
                nnz.set(x, y, n);
            }
        }
    }
}

/// The residual a decoder rebuilds from a block's AC levels and its reconstructed DC
/// (§8.5.12: the DC comes already scaled from the DC transform).
fn residual(ac: &[i32; 16], dc: i32, qp: u8) -> [i32; 16] {
    if ac.iter().all(|&l| l == 0) {
        // Only the DC: the inverse transform of it alone is flat (§8.5.12.2).
        return [(dc + 32) >> 6; 16];
    }
    let mut d = dequantize(ac, qp);
    d[0] = dc;
    inverse_core(&d)
}

/// The `N`×`N` block at (`x`, `y`), row by row.
fn block<const N: usize, D: AsRef<[u8]>>(p: &Plane<D>, x: usize, y: usize) -> Vec<u8> {
    let data = p.data.as_ref();
    let mut out = Vec::with_capacity(N * N);
    for r in 0..N {
        out.extend_from_slice(&data[(y + r) * p.stride + x..][..N]);
    }
    out
}

fn put_block<const N: usize>(p: &mut Plane, x: usize, y: usize, src: &[u8]) {
    for r in 0..N {
        p.data[(y + r) * p.stride + x..][..N].copy_from_slice(&src[r * N..][..N]);
    }
}

/// The reconstructed row above, column to the left and corner sample of an `N`×`N` block
/// (zeros where outside the picture: the predictors are told what is available).
fn edges<const N: usize>(p: &Plane, x: usize, y: usize) -> ([u8; N], [u8; N], u8) {
    let (mut top, mut left, mut corner) = ([0u8; N], [0u8; N], 0u8);
    if y > 0 {
        top.copy_from_slice(&p.data[(y - 1) * p.stride + x..][..N]);
    }
    if x > 0 {
        for (r, l) in left.iter_mut().enumerate() {
            *l = p.data[(y + r) * p.stride + x - 1];
        }
    }
    if x > 0 && y > 0 {
        corner = p.data[(y - 1) * p.stride + x - 1];
    }
    (top, left, corner)
}

fn sad(a: &[u8], b: &[u8]) -> u32 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| u32::from(x.abs_diff(y)))
        .sum()
}

/// A NAL unit with its start code (Annex B) and emulation prevention (§7.4.1).
fn nal(ref_idc: u8, kind: NalUnitType, rbsp: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rbsp.len() + rbsp.len() / 64 + 8);
    out.extend_from_slice(&[0, 0, 0, 1, nal_header_byte(ref_idc, kind)]);
    emulation_prevent_into(rbsp, &mut out);
    out
}

/// The smallest level whose maximum frame size holds `mbs` macroblocks (Table A-1), at most
/// 5.2 (a larger picture is still decoded by FFmpeg, which does not enforce levels).
fn level_idc(mbs: usize) -> u32 {
    [
        (396, 21),
        (1620, 30),
        (3600, 31),
        (5120, 32),
        (8192, 40),
        (8704, 42),
        (22080, 50),
    ]
    .into_iter()
    .find(|&(max, _)| mbs <= max)
    .map_or(52, |(_, level)| level)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luma_blocks_go_in_the_standards_order() {
        // ITU-T H.264 Figure 6-10: blocks 0–3 fill the top-left 8×8 quadrant in raster order,
        // 4–7 the top-right, 8–11 the bottom-left, 12–15 the bottom-right.
        let order: Vec<(usize, usize)> = (0..16).map(luma_block_xy).collect();
        assert_eq!(
            &order[..6],
            &[(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (3, 0)]
        );
        assert_eq!(order[10], (0, 3));
        assert_eq!(order[15], (3, 3));
    }

    #[test]
    fn levels_hold_the_picture_size() {
        // Table A-1 MaxFS: 640×480 is 1200 macroblocks (level 3.0 takes 1620).
        assert_eq!(level_idc(1200), 30);
        assert_eq!(level_idc(1621), 31);
        assert_eq!(level_idc(65536), 52);
    }

    /// Reusing a key frame's unchanged macroblocks changes no byte of the stream: a textured
    /// still background, a square sliding across it (its old and new places change, and with
    /// them the edges of the macroblocks right of and below them), frames with no change, and
    /// one frame where every sample changes, key frames every 10 frames.
    #[test]
    fn key_frames_reusing_unchanged_macroblocks_are_byte_identical() {
        let (w, h) = (96usize, 64usize);
        let hash = |x: usize, y: usize, salt: usize| {
            let mut v =
                (x as u64 * 73_856_093) ^ (y as u64 * 19_349_663) ^ (salt as u64 * 83_492_791);
            v ^= v >> 13;
            v = v.wrapping_mul(0x5bd1_e995);
            (v >> 24) as u8
        };
        let frame = |n: usize| -> [Vec<u8>; 3] {
            // Frames 13 and 26 repeat the frame before; from frame 31 every sample changes.
            let t = match n {
                13 => 12,
                26 => 25,
                _ => n,
            };
            let salt = usize::from(t >= 31);
            let (sx, sy) = ((t * 5) % (w - 20), (t * 3) % (h - 20));
            let plane = |pw: usize, ph: usize, scale: usize, c: usize| {
                let mut p = vec![0u8; pw * ph];
                for y in 0..ph {
                    for x in 0..pw {
                        let inside = (sx..sx + 20).contains(&(x * scale))
                            && (sy..sy + 20).contains(&(y * scale));
                        p[y * pw + x] = if inside {
                            200 - 40 * c as u8
                        } else {
                            hash(x, y, salt + 2 * c) / 2 + 40
                        };
                    }
                }
                p
            };
            [
                plane(w, h, 1, 0),
                plane(w / 2, h / 2, 2, 1),
                plane(w / 2, h / 2, 2, 2),
            ]
        };
        let (mbs_x, mbs_y) = (w / 16, h / 16);
        let changed = |a: &[Vec<u8>; 3], b: &[Vec<u8>; 3]| -> Vec<bool> {
            (0..mbs_x * mbs_y)
                .map(|m| {
                    let (mx, my) = (m % mbs_x, m / mbs_x);
                    let luma = (0..16).any(|r| {
                        let at = (my * 16 + r) * w + mx * 16;
                        a[0][at..at + 16] != b[0][at..at + 16]
                    });
                    let chroma = (1..3).any(|c| {
                        (0..8).any(|r| {
                            let at = (my * 8 + r) * (w / 2) + mx * 8;
                            a[c][at..at + 8] != b[c][at..at + 8]
                        })
                    });
                    luma || chroma
                })
                .collect()
        };
        let mut reusing = StillCameraEncoder::new(w, h, 28, 10);
        let mut plain = StillCameraEncoder::new(w, h, 28, 10);
        plain.reuse = false;
        let mut before: Option<[Vec<u8>; 3]> = None;
        for n in 0..48 {
            let now = frame(n);
            let flags = match &before {
                Some(b) => changed(&now, b),
                None => vec![true; mbs_x * mbs_y],
            };
            let planes = [&now[0][..], &now[1][..], &now[2][..]];
            let (a, b) = (reusing.encode(planes, &flags), plain.encode(planes, &flags));
            assert!(a == b, "frame {n}: the access units differ");
            before = Some(now);
        }
        // Key frames 10, 20, 30 and 40 reuse many of their 24 macroblocks, but not all: the
        // square's old and new places and the macroblocks predicted from them are coded.
        assert_eq!(plain.reused, 0);
        assert!(
            (20..4 * 24).contains(&reusing.reused),
            "{} macroblocks reused",
            reusing.reused
        );
    }
}
