//! Command-line flag values, checked where they are parsed (by the binary and the benchmarks), the
//! allowed range in the message (clap prints it with the flag's name and exits 2): a NaN or a
//! negative count never reaches the library.

fn number(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .map_err(|e| format!("`{s}` is not a number ({e})"))
}

/// A finite number ≥ 0 (pixel noise, sizes that may be zero).
pub fn non_negative(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!(
            "{v} is outside [0, inf): give a finite number >= 0"
        ))
    }
}

/// A speed scale in (0, 1]: the fraction of the planned speed a robot moves at.
pub fn speed_scale(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(format!(
            "{v} is outside (0, 1]: give a fraction of the planned speed"
        ))
    }
}

/// A table height in the robot base frame (m), within `MAX_TABLE_Z_M` of the base.
pub fn table_z(s: &str) -> Result<f64, String> {
    pointact_core::safety::check_table_z(number(s)?)
}

/// A point `X,Y,Z` (metres), every coordinate finite.
pub fn point3(s: &str) -> Result<[f64; 3], String> {
    let parts: Vec<&str> = s.split(',').collect();
    if parts.len() != 3 {
        return Err(format!("`{s}` is not X,Y,Z (three numbers, metres)"));
    }
    let mut p = [0.0; 3];
    for (v, t) in p.iter_mut().zip(parts) {
        *v = number(t)?;
        if !v.is_finite() {
            return Err(format!("`{s}`: {v} is not a finite coordinate"));
        }
    }
    Ok(p)
}

/// A probability in [0, 1].
pub fn probability(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is outside [0, 1]: give a probability"))
    }
}

/// Answers per question for consensus pointing, 1 to 32.
pub fn samples(s: &str) -> Result<usize, String> {
    count(s, 1, 32).map(|v| v as usize)
}

/// A server's time limit in seconds (`--handshake-timeout-s`, `--idle-timeout-s`): finite, from
/// 0.05 s (less would cut off a healthy loopback client) to a day.
pub fn timeout_seconds(s: &str) -> Result<f64, String> {
    let v = s
        .trim()
        .parse::<f64>()
        .map_err(|e| format!("`{s}` is not a number ({e})"))?;
    if (0.05..=86_400.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} s is outside [0.05, 86400]"))
    }
}

/// A count in `lo..=hi`.
pub fn count(s: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let v = s
        .trim()
        .parse::<u64>()
        .map_err(|e| format!("`{s}` is not a whole number ({e})"))?;
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is outside [{lo}, {hi}]"))
    }
}

/// Episodes per task of `eval sim`: at least one, and few enough that every record fits in
/// memory (each is kept for the table and the JSON).
pub fn episodes(s: &str) -> Result<u64, String> {
    count(s, 1, MAX_EPISODES)
}

/// Frames per second of a recorded dataset (`--dataset-fps`): 1 to 60 (a simulated step is 2 ms
/// or more, and 60 fps is past what any policy is trained at).
pub fn dataset_fps(s: &str) -> Result<u64, String> {
    count(s, 1, 60)
}

/// A recorded dataset's frame size (`--dataset-size WxH`): even sides (4:2:0 video) from 16 to
/// 4096 pixels.
pub fn dataset_size(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("{s:?} is not WIDTHxHEIGHT (e.g. 320x240)"))?;
    let side = |v: &str| -> Result<u32, String> {
        let n: u32 = v
            .trim()
            .parse()
            .map_err(|_| format!("{v:?} in {s:?} is not a whole number of pixels"))?;
        if !(16..=4096).contains(&n) || !n.is_multiple_of(2) {
            return Err(format!(
                "{n} px in {s:?}: each side must be even and 16 to 4096 px (4:2:0 video)"
            ));
        }
        Ok(n)
    };
    Ok((side(w)?, side(h)?))
}

/// The most episodes per task `episodes` accepts.
pub(crate) const MAX_EPISODES: u64 = 100_000;

/// Control steps of an `eval bridge` episode: at least one; 100 000 is 5.5 hours at 5 Hz.
pub fn control_steps(s: &str) -> Result<u64, String> {
    count(s, 1, 100_000)
}

/// Views of `calibrate hand-eye --sim`: a solve needs at least 3; beyond 1000 the capture only
/// costs time and memory (each view keeps a frame).
pub fn views(s: &str) -> Result<usize, String> {
    count(s, 3, 1000).map(|v| v as usize)
}

/// A tag edge in metres: a printed tag between 1 cm and 1 m.
pub fn tag_size(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if (0.01..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{v} m is outside [0.01, 1] m: give the tag's black square edge in metres"
        ))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dataset_sizes_are_even_sides_within_bounds() {
        assert_eq!(super::dataset_size("320x240"), Ok((320, 240)));
        assert_eq!(super::dataset_size("640X480"), Ok((640, 480)));
        for bad in [
            "320", "321x240", "320x0", "8x8", "8192x240", "axb", "320x-2", "",
        ] {
            let e = super::dataset_size(bad).unwrap_err();
            assert!(e.contains(bad) || bad.is_empty(), "{bad}: {e}");
        }
    }
}
