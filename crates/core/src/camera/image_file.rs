//! Image files (`point --image`, `ask --frames`, training records) read with their size checked
//! before they are decoded.
//!
//! Why: the `image` crate's default budget refuses any picture whose decoding takes more than
//! 512 MiB (a 12 000 × 12 000 PNG) with a bare "Memory limit exceeded", though the pointer itself
//! downscales a large image to what it can take. Here the header is read first; a picture that
//! fits [`MAX_DECODED_BYTES`] is decoded whatever its size, and a larger one is an error that says
//! how large it is and what the limit is.

use std::path::{Path, PathBuf};

use image::{ImageReader, Limits};

use super::RgbImage;

/// The most memory (bytes) one decoded picture may take in its RGBA form: 2 GiB, a
/// 23 000 × 23 000 picture (a 14 000 × 14 000 PNG takes 784 MB).
pub const MAX_DECODED_BYTES: u64 = 2 << 30;

/// Why an image file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ImageFileError {
    /// Missing, unreadable, or not an image `image` decodes.
    #[error("cannot read image {path}: {detail}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        detail: String,
    },
    /// Larger than [`MAX_DECODED_BYTES`] once decoded.
    #[error(
        "image {path} is {width}×{height} px: {} MB once decoded, over the {} MB this reads; \
         downscale it first (the pointer downscales anything above what it takes anyway)",
        decoded_bytes(*width, *height) / 1_000_000,
        MAX_DECODED_BYTES / 1_000_000
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its width (px).
        width: u32,
        /// Its height (px).
        height: u32,
    },
}

fn decoded_bytes(width: u32, height: u32) -> u64 {
    u64::from(width) * u64::from(height) * 4
}

/// Reads `path` as 8-bit RGB (any format `image` decodes; the format from the content).
pub fn read_rgb(path: &Path) -> Result<RgbImage, ImageFileError> {
    let read = |detail: String| ImageFileError::Read {
        path: path.to_path_buf(),
        detail,
    };
    let open = || {
        ImageReader::open(path)
            .and_then(|r| r.with_guessed_format())
            .map_err(|e| read(e.to_string()))
    };
    let (width, height) = open()?.into_dimensions().map_err(|e| read(e.to_string()))?;
    if decoded_bytes(width, height) > MAX_DECODED_BYTES {
        return Err(ImageFileError::TooLarge {
            path: path.to_path_buf(),
            width,
            height,
        });
    }
    let mut reader = open()?;
    let mut limits = Limits::default();
    // The RGBA form, and the RGB copy made from it.
    limits.max_alloc = Some(MAX_DECODED_BYTES * 2);
    reader.limits(limits);
    let image = reader.decode().map_err(|e| read(e.to_string()))?;
    Ok(image.to_rgb8())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG whose `IHDR` claims `width`×`height` RGB, with an empty `IDAT` and `IEND`: its
    /// header reads, its pixels are missing.
    fn png_header(width: u32, height: u32) -> Vec<u8> {
        let mut ihdr = b"IHDR".to_vec();
        ihdr.extend(width.to_be_bytes());
        ihdr.extend(height.to_be_bytes());
        ihdr.extend([8, 2, 0, 0, 0]); // 8-bit, truecolour, deflate, adaptive filter, no interlace
        let mut out = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
        for chunk in [ihdr, b"IDAT".to_vec(), b"IEND".to_vec()] {
            out.extend((chunk.len() as u32 - 4).to_be_bytes());
            out.extend(&chunk);
            out.extend(crc32fast::hash(&chunk).to_be_bytes());
        }
        out
    }

    #[test]
    fn size_is_judged_from_the_header_and_the_limit_is_named() {
        let dir = std::env::temp_dir().join(format!("pointact-image-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // 14 000² fits: what stops it is the missing pixel data, not a memory limit.
        let fits = dir.join("fits.png");
        std::fs::write(&fits, png_header(14_000, 14_000)).unwrap();
        let e = read_rgb(&fits).unwrap_err().to_string();
        assert!(!e.to_lowercase().contains("limit"), "{e}");
        assert!(e.contains("fits.png"), "{e}");
        // 30 000² does not: refused before decoding, with its size and the limit.
        let big = dir.join("big.png");
        std::fs::write(&big, png_header(30_000, 30_000)).unwrap();
        match read_rgb(&big) {
            Err(e @ ImageFileError::TooLarge { .. }) => {
                let m = e.to_string();
                assert!(
                    m.contains("30000×30000") && m.contains("3600 MB") && m.contains("2147 MB"),
                    "{m}"
                );
            }
            other => panic!("{other:?}"),
        }
        // An ordinary image reads as RGB.
        let small = dir.join("small.png");
        RgbImage::from_pixel(3, 2, image::Rgb([1, 2, 3]))
            .save(&small)
            .unwrap();
        let img = read_rgb(&small).unwrap();
        assert_eq!(
            (img.width(), img.height(), img.get_pixel(2, 1).0),
            (3, 2, [1, 2, 3])
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
