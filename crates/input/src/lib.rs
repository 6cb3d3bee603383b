//! Reading a user's input file whole, bounded in size: `read_to_string` on `/dev/zero` grows
//! until the allocator gives up, and on a FIFO nobody writes to it waits for ever. Every reader
//! of a whole file (scenes, robot descriptions, calibrations, samples, results to resume,
//! records, a model folder's configuration and tokenizer) goes through here, each with a limit
//! far above what a real file of its kind holds. A crate of its own so that the model crate,
//! which imports nothing else of ours, reads its files the same way.

#![warn(missing_docs)]

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// Limit of a configuration or description file (TOML, JSON, URDF): 16 MiB, a thousand times a
/// real one.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Limit of a data file (results to resume, training records, JSONL; a model's tokenizer): 1 GiB.
pub const MAX_DATA_BYTES: u64 = 1 << 30;

/// The whole of `path` as UTF-8 text, refused (an `io::Error` saying why) when it is not a
/// regular file or holds more than `max_bytes`.
pub fn read_text(path: &Path, max_bytes: u64) -> io::Result<String> {
    String::from_utf8(read_bytes(path, max_bytes)?).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not UTF-8 text: {}", e.utf8_error()),
        )
    })
}

/// The whole of `path`, refused when it is not a regular file or holds more than `max_bytes`.
///
/// The type is checked before opening (opening a FIFO waits for a writer); the size is checked
/// from the metadata and again while reading (a file that grows meanwhile).
pub fn read_bytes(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    let meta = regular_file(path)?;
    let too_large = |size: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{size} bytes, over the {} this file may hold",
                human(max_bytes)
            ),
        )
    };
    if meta.len() > max_bytes {
        return Err(too_large(meta.len().to_string()));
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    File::open(path)?
        .take(max_bytes + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > max_bytes {
        return Err(too_large(format!("more than {max_bytes}")));
    }
    Ok(out)
}

/// The metadata of `path`, refused unless it is a regular file: a FIFO would block the opening
/// until something writes to it, and a device such as `/dev/zero` never ends. For readers that
/// stream a file rather than read it whole.
pub fn regular_file(path: &Path) -> io::Result<std::fs::Metadata> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "not a regular file ({}): pointact reads files only",
                kind(&meta)
            ),
        ));
    }
    Ok(meta)
}

fn kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a plain file"
    }
}

/// `16 MiB`, `1 GiB`: a limit as a person reads it.
fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_large_files_are_refused_and_small_ones_read() {
        let e = read_text(Path::new("/dev/zero"), MAX_CONFIG_BYTES).unwrap_err();
        assert!(e.to_string().contains("a device"), "{e}");
        let dir = std::env::temp_dir().join(format!("pointact-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if made {
            // Opening it would wait for a writer; it is refused before.
            let e = read_text(&fifo, MAX_CONFIG_BYTES).unwrap_err();
            assert!(e.to_string().contains("a FIFO"), "{e}");
        }
        let e = read_text(&dir, MAX_CONFIG_BYTES).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let big = dir.join("big.toml");
        std::fs::write(&big, vec![b'#'; 2049]).unwrap();
        let e = read_text(&big, 2048).unwrap_err();
        assert!(
            e.to_string().contains("2049 bytes, over the 2048 bytes"),
            "{e}"
        );
        assert_eq!(read_text(&big, 2049).unwrap().len(), 2049);
        let e = read_text(&big, 1 << 20)
            .map(|_| ())
            .and(read_text(&dir.join("none"), 10));
        assert_eq!(e.unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(human(MAX_CONFIG_BYTES), "16 MiB");
        assert_eq!(human(MAX_DATA_BYTES), "1 GiB");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
