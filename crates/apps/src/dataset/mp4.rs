//! An MP4 (ISO/IEC 14496-12) file with one H.264 or HEVC video track, written as frames arrive: `ftyp`,
//! a streamed `mdat`, and `moov` at the end. One chunk, a constant frame duration and no
//! B-frames, so presentation = decoding time (no `ctts`, no `edts`) and frame `i` sits at exactly
//! `i / fps`: LeRobot's reader finds a frame by its timestamp within 1e-4 s.
//!
//! Boxes as ISO/IEC 14496-12:2015 §8 defines them; `avcC` as ISO/IEC 14496-15:2017 §5.3.3,
//! `hvcC` as its §8.3.3 (parameter sets in the box only: sample entry `hvc1`).

use std::io::{self, Seek, SeekFrom, Write};

use super::hevc::HevcConfig;

/// FFmpeg's time base for a `fps` stream (`fps · 512` ticks per second): every frame lasts 512
/// ticks, so `pts · time_base` is `i / fps` with no rounding.
const TICKS_PER_FRAME: u32 = 512;
/// Identity transform of `mvhd` and `tkhd` (16.16 and 2.30 fixed point).
const MATRIX: [u32; 9] = [0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x4000_0000];

fn boxed(kind: &[u8; 4], payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(payload.len() + 8);
    b.extend_from_slice(&((payload.len() + 8) as u32).to_be_bytes());
    b.extend_from_slice(kind);
    b.extend_from_slice(payload);
    b
}

fn full_box(kind: &[u8; 4], version: u8, flags: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = ((u32::from(version) << 24) | flags).to_be_bytes().to_vec();
    p.extend_from_slice(payload);
    boxed(kind, &p)
}

fn be32s(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_be_bytes()).collect()
}

/// The parameter sets `avcC` carries (NAL payloads without start codes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AvcConfig {
    /// The sequence parameter set (NAL type 7).
    pub sps: Vec<u8>,
    /// The picture parameter set (NAL type 8).
    pub pps: Vec<u8>,
}

/// The codec of a track, with what its sample entry's configuration box carries.
#[derive(Debug, Clone, Copy)]
pub enum Codec<'a> {
    /// H.264 (`avc1`).
    Avc(&'a AvcConfig),
    /// HEVC (`hvc1`).
    Hevc(&'a HevcConfig),
}

/// Writes one video track; [`Mp4Writer::finish`] makes the file playable.
pub struct Mp4Writer<W: Write + Seek> {
    out: W,
    width: u16,
    height: u16,
    fps: u32,
    mdat_start: u64,
    sizes: Vec<u32>,
    /// 1-based numbers of the samples a decoder can start at.
    sync: Vec<u32>,
}

impl<W: Write + Seek> Mp4Writer<W> {
    /// Starts the file: `ftyp` and the header of an `mdat` whose size [`Self::finish`] fills in.
    pub fn new(mut out: W, width: u16, height: u16, fps: u32) -> io::Result<Self> {
        if fps == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "fps 0"));
        }
        // Major brand, minor version, compatible brands.
        let ftyp: Vec<u8> = [
            &b"isom"[..],
            &512u32.to_be_bytes(),
            b"isom",
            b"iso2",
            b"avc1",
            b"mp41",
        ]
        .concat();
        out.write_all(&boxed(b"ftyp", &ftyp))?;
        let mdat_start = out.stream_position()?;
        // A 64-bit size (`size` 1, `largesize` after the type), so a file past 4 GiB stays valid.
        out.write_all(&1u32.to_be_bytes())?;
        out.write_all(b"mdat")?;
        out.write_all(&0u64.to_be_bytes())?;
        Ok(Self {
            out,
            width,
            height,
            fps,
            mdat_start,
            sizes: Vec::new(),
            sync: Vec::new(),
        })
    }

    /// Appends one access unit in MP4 form (NAL units each prefixed by its 4-byte length).
    pub fn write_sample(&mut self, sample: &[u8], key: bool) -> io::Result<()> {
        let size = u32::try_from(sample.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "sample over 4 GiB"))?;
        self.out.write_all(sample)?;
        self.sizes.push(size);
        if key {
            self.sync.push(self.sizes.len() as u32);
        }
        Ok(())
    }

    /// Frames written so far.
    pub fn frames(&self) -> usize {
        self.sizes.len()
    }

    /// Patches the `mdat` size and writes `moov`; returns the writer.
    pub fn finish(mut self, codec: Codec<'_>) -> io::Result<W> {
        let missing = match codec {
            Codec::Avc(avc) => avc.sps.len() < 4 || avc.pps.is_empty(),
            Codec::Hevc(hevc) => hevc.vps.is_empty() || hevc.sps.is_empty() || hevc.pps.is_empty(),
        };
        if missing {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no SPS/PPS: the encoder gave no parameter sets",
            ));
        }
        let end = self.out.stream_position()?;
        self.out.seek(SeekFrom::Start(self.mdat_start + 8))?;
        self.out.write_all(&(end - self.mdat_start).to_be_bytes())?;
        self.out.seek(SeekFrom::Start(end))?;
        let moov = self.moov(codec, end);
        self.out.write_all(&moov)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn moov(&self, codec: Codec<'_>, end: u64) -> Vec<u8> {
        let n = self.sizes.len() as u32;
        let timescale = self.fps * TICKS_PER_FRAME;
        let duration = u64::from(n) * u64::from(TICKS_PER_FRAME);
        let movie_ms = (duration * 1000 / u64::from(timescale)) as u32;

        // Visual sample entry (14496-12 §12.1.3) holding the codec's configuration box.
        let mut entry = vec![0u8; 6];
        entry.extend_from_slice(&1u16.to_be_bytes()); // data_reference_index
        entry.extend_from_slice(&[0u8; 16]);
        entry.extend_from_slice(&self.width.to_be_bytes());
        entry.extend_from_slice(&self.height.to_be_bytes());
        entry.extend_from_slice(&be32s(&[0x0048_0000, 0x0048_0000, 0])); // 72 dpi, reserved
        entry.extend_from_slice(&1u16.to_be_bytes()); // frame_count
        entry.extend_from_slice(&[0u8; 32]); // compressorname
        entry.extend_from_slice(&0x0018u16.to_be_bytes()); // depth
        entry.extend_from_slice(&0xffffu16.to_be_bytes()); // pre_defined = -1
        let kind = match codec {
            Codec::Avc(avc) => {
                entry.extend_from_slice(&boxed(b"avcC", &avcc(avc)));
                b"avc1"
            }
            Codec::Hevc(hevc) => {
                entry.extend_from_slice(&boxed(b"hvcC", &hvcc(hevc)));
                b"hvc1"
            }
        };
        let stsd = [&1u32.to_be_bytes()[..], &boxed(kind, &entry)].concat();

        let mut stbl = full_box(b"stsd", 0, 0, &stsd);
        stbl.extend(full_box(b"stts", 0, 0, &be32s(&[1, n, TICKS_PER_FRAME])));
        if (self.sync.len() as u32) < n {
            let mut stss = be32s(&[self.sync.len() as u32]);
            stss.extend(be32s(&self.sync));
            stbl.extend(full_box(b"stss", 0, 0, &stss));
        }
        stbl.extend(full_box(b"stsc", 0, 0, &be32s(&[1, 1, n, 1])));
        let mut stsz = be32s(&[0, n]);
        stsz.extend(be32s(&self.sizes));
        stbl.extend(full_box(b"stsz", 0, 0, &stsz));
        let first = self.mdat_start + 16;
        if end > u64::from(u32::MAX) {
            let mut co = be32s(&[1]);
            co.extend_from_slice(&first.to_be_bytes());
            stbl.extend(full_box(b"co64", 0, 0, &co));
        } else {
            stbl.extend(full_box(b"stco", 0, 0, &be32s(&[1, first as u32])));
        }

        let vmhd = full_box(b"vmhd", 0, 1, &[0u8; 8]);
        let dref = [&be32s(&[1])[..], &full_box(b"url ", 0, 1, &[])].concat();
        let dinf = boxed(b"dinf", &full_box(b"dref", 0, 0, &dref));
        let minf = boxed(b"minf", &[vmhd, dinf, boxed(b"stbl", &stbl)].concat());
        let mut mdhd = vec![0u8; 8]; // creation and modification time
        mdhd.extend(be32s(&[timescale, duration as u32]));
        mdhd.extend_from_slice(&0x55c4u16.to_be_bytes()); // language "und"
        mdhd.extend_from_slice(&[0, 0]);
        let hdlr = [&[0u8; 4][..], b"vide", &[0u8; 12], b"VideoHandler\0"].concat();
        let mdia = boxed(
            b"mdia",
            &[
                full_box(b"mdhd", 0, 0, &mdhd),
                full_box(b"hdlr", 0, 0, &hdlr),
                minf,
            ]
            .concat(),
        );
        let mut tkhd = vec![0u8; 8];
        tkhd.extend(be32s(&[1, 0, movie_ms])); // track_ID, reserved, duration
        tkhd.extend_from_slice(&[0u8; 16]); // reserved, layer, alternate group, volume, reserved
        tkhd.extend(be32s(&MATRIX));
        tkhd.extend(be32s(&[
            u32::from(self.width) << 16,
            u32::from(self.height) << 16,
        ]));
        // Flags 3: enabled, in movie.
        let trak = boxed(b"trak", &[full_box(b"tkhd", 0, 3, &tkhd), mdia].concat());
        let mut mvhd = vec![0u8; 8];
        mvhd.extend(be32s(&[1000, movie_ms, 0x0001_0000])); // timescale, duration, rate 1.0
        mvhd.extend_from_slice(&0x0100u16.to_be_bytes()); // volume 1.0
        mvhd.extend_from_slice(&[0u8; 10]);
        mvhd.extend(be32s(&MATRIX));
        mvhd.extend_from_slice(&[0u8; 24]); // pre_defined
        mvhd.extend(be32s(&[2])); // next_track_ID
        boxed(b"moov", &[full_box(b"mvhd", 0, 0, &mvhd), trak].concat())
    }
}

/// `AVCDecoderConfigurationRecord`: profile, compatibility, level from the SPS; 4-byte NAL
/// lengths (0xff); one SPS (0xe1), one PPS.
fn avcc(avc: &AvcConfig) -> Vec<u8> {
    let (sps, pps) = (&avc.sps, &avc.pps);
    let mut avcc = vec![1, sps[1], sps[2], sps[3], 0xff, 0xe1];
    avcc.extend_from_slice(&(sps.len() as u16).to_be_bytes());
    avcc.extend_from_slice(sps);
    avcc.push(1);
    avcc.extend_from_slice(&(pps.len() as u16).to_be_bytes());
    avcc.extend_from_slice(pps);
    if matches!(sps[1], 100 | 110 | 122 | 144) {
        // High profiles add chroma format (4:2:0) and 8-bit depths, no SPS extensions.
        avcc.extend_from_slice(&[0xfc | 1, 0xf8, 0xf8, 0]);
    }
    avcc
}

/// `HEVCDecoderConfigurationRecord` (ISO/IEC 14496-15 §8.3.3.1.2) of the monochrome 12-bit
/// streams `hevc` writes: the profile bytes of the SPS, chroma format 0, 12-bit depths, 4-byte
/// NAL lengths, one complete array each of VPS, SPS and PPS.
fn hvcc(hevc: &HevcConfig) -> Vec<u8> {
    let mut b = vec![1];
    b.extend_from_slice(&hevc.profile_tier_level);
    b.extend_from_slice(&[
        0xf0,
        0x00,                                      // reserved, min_spatial_segmentation_idc 0
        0xfc,                                      // reserved, parallelismType 0 (unknown)
        0xfc,                                      // reserved, chromaFormat 0 (monochrome)
        0xf8 | (super::hevc::BIT_DEPTH - 8) as u8, // bitDepthLumaMinus8
        0xf8 | (super::hevc::BIT_DEPTH - 8) as u8, // bitDepthChromaMinus8
        0x00,
        0x00, // avgFrameRate unspecified
        // constantFrameRate 0, numTemporalLayers 1, temporalIdNested 1, lengthSizeMinusOne 3.
        0b0000_1111,
        3, // numOfArrays
    ]);
    for (kind, unit) in [(32u8, &hevc.vps), (33, &hevc.sps), (34, &hevc.pps)] {
        b.push(0x80 | kind); // array_completeness 1, NAL_unit_type
        b.extend_from_slice(&1u16.to_be_bytes());
        b.extend_from_slice(&(unit.len() as u16).to_be_bytes());
        b.extend_from_slice(unit);
    }
    b
}

/// The NAL units of an Annex-B stream (start codes and trailing zero bytes removed).
pub fn annexb_nals(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut i = 0;
    while i + 2 < data.len() {
        if data[i] == 0 && data[i + 1] == 0 && data[i + 2] == 1 {
            if let Some(s) = start {
                let mut e = i;
                while e > s && data[e - 1] == 0 {
                    e -= 1;
                }
                out.push(&data[s..e]);
            }
            i += 3;
            start = Some(i);
        } else {
            i += 1;
        }
    }
    if let Some(s) = start {
        out.push(&data[s..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annexb_splits_on_three_and_four_byte_start_codes() {
        let stream = [
            0, 0, 0, 1, 0x67, 1, 2, 0, 0, 1, 0x68, 3, 0, 0, 0, 1, 0x65, 4, 5,
        ];
        let nals = annexb_nals(&stream);
        assert_eq!(nals, vec![&[0x67, 1, 2][..], &[0x68, 3], &[0x65, 4, 5]]);
    }
}
