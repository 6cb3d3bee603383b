//! Files of the hand-eye procedure: the recorded pose pairs (JSON) it reads, and the camera's
//! calibration TOML it writes.
//!
//! The TOML is the one format of [`crate::geometry::calibration`] (`[extrinsics]` plus `[meta]`
//! with the provenance); this module only decides *how* it lands on disk: after a successful
//! solve, through a temporary file in the same folder renamed over the old one, so that a failed
//! or interrupted run leaves any existing calibration exactly as it was. A rename within one
//! folder is atomic on POSIX file systems: a reader sees the old file or the new one, never half.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::handeye::{
    solve_eye_to_hand, HandEyeError, HandEyeOptions, HandEyeSample, HandEyeSolution,
};
use crate::geometry::calibration::{
    calibration_file_text, rotation_from_matrix, QuaternionDefect, RawQuaternion, RotationDefect,
    QUATERNION_NORM_TOLERANCE, ROTATION_TOLERANCE,
};
use crate::geometry::{Extrinsics, GeometryError, Intrinsics};
use crate::nalgebra::{Isometry3, Matrix3, Translation3, Vector3};

/// Errors of reading samples and writing the calibration.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// The solve failed; nothing was written.
    #[error(transparent)]
    Solve(#[from] HandEyeError),

    /// A file that could not be read or written.
    #[error("{}: {action}: {source}", file.display())]
    Io {
        file: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A samples file that is not the documented JSON.
    #[error(
        "{}: {message} (format: calibration/README.md, section \"Recorded pose pairs\")",
        file.display()
    )]
    Samples { file: PathBuf, message: String },

    /// A camera name that cannot be a file name.
    #[error(
        "camera name {name:?} cannot name a calibration file: use letters, digits, `-`, `_` or `.`"
    )]
    CameraName { name: String },

    /// The existing calibration file cannot be read, so keeping its `[intrinsics]` is impossible;
    /// it is left alone rather than overwritten.
    #[error(
        "{} exists but cannot be read ({source}); fix it or move it aside, then run again \
         (nothing was written)",
        file.display()
    )]
    Existing {
        file: PathBuf,
        #[source]
        source: GeometryError,
    },

    /// Building the TOML text failed.
    #[error(transparent)]
    Geometry(#[from] GeometryError),

    /// Reading views, detecting the tag or moving the robot to a view failed.
    #[error(transparent)]
    Target(#[from] super::target::TargetError),
}

// ---- samples JSON ------------------------------------------------------------------------------

/// The recorded pose pairs, as `calibrate hand-eye --samples FILE.json` reads them.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawSamples {
    samples: Vec<RawSample>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawSample {
    base_from_gripper: RawPose,
    camera_from_target: RawPose,
}

/// A pose as in the calibration TOML: `translation` in metres and exactly one of `rotation`
/// (rows) or `quaternion` ({w, x, y, z}).
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawPose {
    translation: Vec<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rotation: Option<Vec<Vec<f64>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    quaternion: Option<RawQuaternion>,
}

/// Reads a samples JSON file (format: `calibration/README.md`).
pub fn load_samples(path: &Path) -> Result<Vec<HandEyeSample>, CalibrateError> {
    let text = std::fs::read_to_string(path).map_err(|source| CalibrateError::Io {
        file: path.to_path_buf(),
        action: "cannot read",
        source,
    })?;
    samples_from_json_str(&text, path)
}

/// Parses samples JSON text; `file` names it in messages. Rotations are checked like the
/// calibration TOML's (orthonormal within [`ROTATION_TOLERANCE`], unit quaternion within
/// [`QUATERNION_NORM_TOLERANCE`]) and then snapped to exact rotations.
pub fn samples_from_json_str(
    text: &str,
    file: &Path,
) -> Result<Vec<HandEyeSample>, CalibrateError> {
    let err = |message: String| CalibrateError::Samples {
        file: file.to_path_buf(),
        message,
    };
    let raw: RawSamples = serde_json::from_str(text).map_err(|e| err(e.to_string()))?;
    raw.samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Ok(HandEyeSample {
                base_from_gripper: s
                    .base_from_gripper
                    .to_isometry()
                    .map_err(|m| err(format!("samples[{i}].base_from_gripper{m}")))?,
                camera_from_target: s
                    .camera_from_target
                    .to_isometry()
                    .map_err(|m| err(format!("samples[{i}].camera_from_target{m}")))?,
            })
        })
        .collect()
}

/// Samples as JSON text in the format [`load_samples`] reads (rotations as matrix rows).
pub fn samples_to_json_string(samples: &[HandEyeSample]) -> String {
    let pose = |iso: &Isometry3<f64>| {
        let m = iso.rotation.to_rotation_matrix().into_inner();
        RawPose {
            translation: iso.translation.vector.iter().copied().collect(),
            rotation: Some(
                (0..3)
                    .map(|r| vec![m[(r, 0)], m[(r, 1)], m[(r, 2)]])
                    .collect(),
            ),
            quaternion: None,
        }
    };
    let raw = RawSamples {
        samples: samples
            .iter()
            .map(|s| RawSample {
                base_from_gripper: pose(&s.base_from_gripper),
                camera_from_target: pose(&s.camera_from_target),
            })
            .collect(),
    };
    // Plain numbers and strings only: serialising cannot fail.
    serde_json::to_string_pretty(&raw).unwrap_or_default()
}

impl RawPose {
    /// The pose, or the message suffix (`.translation: …`) naming the bad field.
    fn to_isometry(&self) -> Result<Isometry3<f64>, String> {
        let finite = |field: &str, x: f64| {
            if x.is_finite() {
                Ok(x)
            } else {
                Err(format!("{field}: must be a finite number, got {x}"))
            }
        };
        if self.translation.len() != 3 {
            return Err(format!(
                ".translation: expected 3 numbers [x, y, z] in metres, got {}",
                self.translation.len()
            ));
        }
        let mut t = Vector3::zeros();
        for (i, &x) in self.translation.iter().enumerate() {
            t[i] = finite(&format!(".translation[{i}]"), x)?;
        }
        let rotation = match (&self.rotation, &self.quaternion) {
            (Some(rows), None) => {
                if rows.len() != 3 || rows.iter().any(|r| r.len() != 3) {
                    return Err(".rotation: expected 3 rows of 3 numbers".into());
                }
                let mut m = Matrix3::zeros();
                for (r, row) in rows.iter().enumerate() {
                    for (c, &x) in row.iter().enumerate() {
                        m[(r, c)] = finite(&format!(".rotation[{r}][{c}]"), x)?;
                    }
                }
                rotation_from_matrix(&m).map_err(|defect| match defect {
                    RotationDefect::Tolerance { ortho, det } => format!(
                        ".rotation: not a rotation matrix (max |RᵀR − I| = {ortho:.3e}, \
                         det = {det:.6}; need both within {ROTATION_TOLERANCE:e} of a rotation)"
                    ),
                    RotationDefect::Svd => ".rotation: SVD failed".into(),
                })?
            }
            (None, Some(q)) => q.to_rotation().map_err(|defect| match defect {
                QuaternionDefect::NotFinite { component, value } => {
                    format!(".quaternion.{component}: must be a finite number, got {value}")
                }
                QuaternionDefect::Norm(norm) => format!(
                    ".quaternion: norm is {norm:.6}, must be 1 within \
                     {QUATERNION_NORM_TOLERANCE:e}"
                ),
            })?,
            _ => {
                return Err(
                    ": give exactly one of `rotation` (3x3, rows) or `quaternion` \
                            ({w, x, y, z})"
                        .into(),
                )
            }
        };
        Ok(Isometry3::from_parts(Translation3::from(t), rotation))
    }
}

// ---- writing the calibration -------------------------------------------------------------------

/// `dir/<camera>.toml`, after checking that `camera` is a plain file name.
pub fn calibration_path(dir: &Path, camera: &str) -> Result<PathBuf, CalibrateError> {
    let ok = !camera.is_empty()
        && !camera.starts_with('.')
        && camera
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(CalibrateError::CameraName {
            name: camera.to_string(),
        });
    }
    Ok(dir.join(format!("{camera}.toml")))
}

/// The `[meta]` table of a hand-eye result: method, sample count, residuals (summary and per
/// sample), the solved `gripper_from_target` (to check against the mount drawing) and the date.
pub fn solution_meta(solution: &HandEyeSolution, date_utc: &str) -> toml::Table {
    let r = &solution.residuals;
    let mut res = toml::Table::new();
    res.insert("rotation_rms_deg".into(), r.rotation_rms_deg.into());
    res.insert("rotation_max_deg".into(), r.rotation_max_deg.into());
    res.insert("translation_rms_mm".into(), r.translation_rms_mm.into());
    res.insert("translation_max_mm".into(), r.translation_max_mm.into());
    let list = |f: fn(&super::handeye::SampleResidual) -> f64| {
        toml::Value::Array(r.per_sample.iter().map(|s| f(s).into()).collect())
    };
    res.insert("per_sample_rotation_deg".into(), list(|s| s.rotation_deg));
    res.insert(
        "per_sample_translation_mm".into(),
        list(|s| s.translation_mm),
    );
    res.insert(
        "definition".into(),
        "per sample: target pose via robot (base_from_gripper * gripper_from_target) vs via \
         camera (base_from_camera * camera_from_target)"
            .into(),
    );

    let y = &solution.gripper_from_target;
    let q = y.rotation;
    let mut target = toml::Table::new();
    target.insert(
        "translation".into(),
        toml::Value::Array(y.translation.vector.iter().map(|&x| x.into()).collect()),
    );
    let mut quaternion = toml::Table::new();
    for (k, v) in [("w", q.w), ("x", q.i), ("y", q.j), ("z", q.k)] {
        quaternion.insert(k.into(), v.into());
    }
    target.insert("quaternion".into(), toml::Value::Table(quaternion));

    let mut meta = toml::Table::new();
    meta.insert(
        "source".into(),
        "pointact calibrate hand-eye (eye-to-hand)".into(),
    );
    meta.insert("method".into(), solution.method.name().into());
    if let Some(tsai) = solution.tsai {
        let filter = if tsai.opencv_4_10_pair_filter {
            "opencv-4.10"
        } else {
            "none"
        };
        meta.insert("pair_filter".into(), filter.into());
    }
    meta.insert("samples".into(), (r.per_sample.len() as i64).into());
    meta.insert("motions_used".into(), (solution.motions_used as i64).into());
    meta.insert("date".into(), date_utc.into());
    meta.insert("residuals".into(), toml::Value::Table(res));
    meta.insert("gripper_from_target".into(), toml::Value::Table(target));
    meta
}

/// Writes `dir/<camera>.toml` from a solved calibration: `[meta]` and `[extrinsics]`, plus the
/// `[intrinsics]` of an existing file for this camera (a hand-eye run must not drop the lens
/// model). Atomic: the text goes to a temporary file in `dir`, is synced, then renamed over the
/// target. Returns the path written.
///
/// Taking a [`HandEyeSolution`] means it can only run after a successful solve; if anything
/// fails here the existing file is untouched and the temporary file is removed.
pub fn write_calibration(
    dir: &Path,
    camera: &str,
    solution: &HandEyeSolution,
) -> Result<PathBuf, CalibrateError> {
    let path = calibration_path(dir, camera)?;
    let intrinsics = existing_intrinsics(&path)?;
    let extrinsics = Extrinsics {
        camera: camera.to_string(),
        base_from_camera: solution.base_from_camera,
    };
    let meta = solution_meta(solution, &utc_now());
    let text = calibration_file_text(intrinsics.as_ref(), Some(&extrinsics), Some(&meta))?;
    std::fs::create_dir_all(dir).map_err(|source| CalibrateError::Io {
        file: dir.to_path_buf(),
        action: "cannot create the folder",
        source,
    })?;
    write_atomic(&path, &text)?;
    Ok(path)
}

/// Solves and, only if that succeeds, writes: what the CLI runs. `options` is a
/// [`super::Method`] (default options) or a [`HandEyeOptions`], as for [`solve_eye_to_hand`].
pub fn solve_and_write(
    samples: &[HandEyeSample],
    options: impl Into<HandEyeOptions>,
    dir: &Path,
    camera: &str,
) -> Result<(HandEyeSolution, PathBuf), CalibrateError> {
    // Check the name before the solve so a typo fails fast; the file itself is not touched yet.
    calibration_path(dir, camera)?;
    let solution = solve_eye_to_hand(samples, options)?;
    let path = write_calibration(dir, camera, &solution)?;
    Ok((solution, path))
}

/// The `[intrinsics]` of an existing calibration file, if it has that table. A file that exists
/// but cannot be read or parsed is an error: overwriting it could destroy a lens calibration.
fn existing_intrinsics(path: &Path) -> Result<Option<Intrinsics>, CalibrateError> {
    Intrinsics::load_if_present(path).map_err(|source| CalibrateError::Existing {
        file: path.to_path_buf(),
        source,
    })
}

/// Temp file in the same folder (a rename across file systems is not atomic), fsync, rename.
fn write_atomic(path: &Path, text: &str) -> Result<(), CalibrateError> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map_or_else(
        || "calibration".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let io = |file: &Path, action, source| CalibrateError::Io {
        file: file.to_path_buf(),
        action,
        source,
    };
    let result = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, "cannot create", e))?;
        f.write_all(text.as_bytes())
            .map_err(|e| io(&tmp, "cannot write", e))?;
        f.sync_all().map_err(|e| io(&tmp, "cannot sync", e))?;
        std::fs::rename(&tmp, path).map_err(|e| io(path, "cannot replace", e))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SSZ` (std only: no date crate for one stamp).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Seconds since the Unix epoch → `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian calendar).
pub fn format_utc(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day), by walking whole years then months: a few dozen
/// steps, plain enough to check by eye.
fn civil_from_days(mut days: u64) -> (u64, u32, u32) {
    let leap = |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
    let mut year = 1970;
    loop {
        let len = if leap(year) { 366 } else { 365 };
        if days < len {
            break;
        }
        days -= len;
        year += 1;
    }
    let feb = if leap(year) { 29 } else { 28 };
    let mut month = 1;
    for len in [31, feb, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] {
        if days < len {
            break;
        }
        days -= len;
        month += 1;
    }
    (year, month, days as u32 + 1)
}
