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
use crate::geometry::calibration::Extrinsics;
use crate::geometry::calibration::{
    calibration_file_text, rotation_from_matrix, QuaternionDefect, RawQuaternion, RotationDefect,
    QUATERNION_NORM_TOLERANCE, ROTATION_TOLERANCE,
};
use crate::geometry::{GeometryError, Intrinsics};
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
        /// The file concerned.
        file: PathBuf,
        /// What was being done to it ("cannot read", "cannot create the folder", …).
        action: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// A samples file that is not the documented JSON.
    #[error(
        "{}: {message} (format: calibration/README.md, section \"Recorded pose pairs\")",
        file.display()
    )]
    Samples {
        /// The samples file.
        file: PathBuf,
        /// What is wrong with it.
        message: String,
    },

    /// A camera name that cannot be a file name.
    #[error(
        "camera name {name:?} cannot name a calibration file: use letters, digits, `-`, `_` or `.`"
    )]
    CameraName {
        /// The name as given.
        name: String,
    },

    /// The existing calibration file cannot be read, so keeping its `[intrinsics]` is impossible;
    /// it is left alone rather than overwritten.
    #[error(
        "{} exists but cannot be read ({source}); fix it or move it aside, then run again \
         (nothing was written)",
        file.display()
    )]
    Existing {
        /// The existing calibration file.
        file: PathBuf,
        /// Why it could not be read.
        #[source]
        source: GeometryError,
    },

    /// Building the TOML text failed.
    #[error(transparent)]
    Geometry(#[from] GeometryError),

    /// Reading views, detecting the tag or moving the robot to a view failed.
    #[error(transparent)]
    Target(#[from] super::target::TargetError),

    /// The solve succeeded but failed the sanity check ([`SanityLimits`]); nothing was written
    /// and an existing file is byte for byte as it was.
    #[error(
        "{} not written: the hand-eye solve is implausible: {report}. {}",
        file.display(),
        kept_sentence(file, *existed, report.finite)
    )]
    Implausible {
        /// The calibration file that was not written.
        file: PathBuf,
        /// Whether that file existed (and was kept).
        existed: bool,
        /// The numbers, the limits and the likely mistake.
        report: Implausibility,
    },
}

fn kept_sentence(file: &Path, existed: bool, finite: bool) -> String {
    let kept = if existed {
        format!("The previous {} was kept", file.display())
    } else {
        "Nothing was written".to_string()
    };
    if finite {
        format!("{kept}; pass --force to write it anyway")
    } else {
        format!("{kept} (a non-finite result is never written, not even with --force)")
    }
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
    let text = pointact_core::input::read_text(path, pointact_core::input::MAX_CONFIG_BYTES)
        .map_err(|source| CalibrateError::Io {
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
pub(crate) fn solution_meta(solution: &HandEyeSolution, date_utc: &str) -> toml::Table {
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

/// Solves and, only if that succeeds and the result passes the sanity check, writes: what
/// every CLI path runs. `options` is a [`super::Method`] (default options), a
/// [`HandEyeOptions`] (both with the default [`SanityLimits`] and no `force`) or a
/// [`CalibrateOptions`].
pub fn solve_and_write(
    samples: &[HandEyeSample],
    options: impl Into<CalibrateOptions>,
    dir: &Path,
    camera: &str,
) -> Result<(HandEyeSolution, PathBuf), CalibrateError> {
    let w = solve_check_and_write(samples, options, dir, camera)?;
    Ok((w.solution, w.path))
}

/// What [`solve_check_and_write`] wrote.
#[derive(Clone, Debug)]
pub struct Written {
    /// The solve that was written.
    pub solution: HandEyeSolution,
    /// The calibration file written.
    pub path: PathBuf,
    /// `Some` when the solve failed the sanity check and was written only because of
    /// [`CalibrateOptions::force`]: the caller should warn.
    pub forced: Option<Implausibility>,
}

/// [`solve_and_write`], also saying whether an implausible result was forced through.
///
/// Order: camera name, solve, sanity check ([`check_plausible`]), write. A solve that fails the
/// check is a [`CalibrateError::Implausible`] and nothing is touched, unless
/// [`CalibrateOptions::force`] is set and every number is finite (a NaN or infinite result is
/// never written).
pub fn solve_check_and_write(
    samples: &[HandEyeSample],
    options: impl Into<CalibrateOptions>,
    dir: &Path,
    camera: &str,
) -> Result<Written, CalibrateError> {
    let options = options.into();
    // Check the name before the solve so a typo fails fast; the file itself is not touched yet.
    let path = calibration_path(dir, camera)?;
    let solution = solve_eye_to_hand(samples, options.solve)?;
    let forced = match check_plausible(samples, &solution, &options.limits) {
        Ok(()) => None,
        Err(report) if options.force && report.finite => Some(report),
        Err(report) => {
            return Err(CalibrateError::Implausible {
                existed: path.exists(),
                file: path,
                report,
            })
        }
    };
    let path = write_calibration(dir, camera, &solution)?;
    Ok(Written {
        solution,
        path,
        forced,
    })
}

// ---- sanity check ------------------------------------------------------------------------------

/// What [`solve_and_write`] runs: the solver options, the sanity limits, and whether to write a
/// result that fails them. A [`super::Method`] or a [`HandEyeOptions`] converts to this with
/// default limits and `force: false`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CalibrateOptions {
    /// Solver settings (method and its options).
    pub solve: HandEyeOptions,
    /// What the result must meet to be written; default [`SanityLimits::default`].
    pub limits: SanityLimits,
    /// Write even a result that fails the limits (`calibrate hand-eye --force`); a non-finite
    /// result is still refused.
    pub force: bool,
}

impl From<HandEyeOptions> for CalibrateOptions {
    fn from(solve: HandEyeOptions) -> Self {
        CalibrateOptions {
            solve,
            limits: SanityLimits::default(),
            force: false,
        }
    }
}

impl From<super::Method> for CalibrateOptions {
    fn from(method: super::Method) -> Self {
        HandEyeOptions::from(method).into()
    }
}

/// Limits a hand-eye result must meet before it replaces a calibration file.
///
/// The residuals are the chain-closure residuals of [`super::Residuals`] (the target's pose
/// through the robot against through the camera). The defaults sit well above what good data
/// gives and well below what the known mistakes give:
///
/// | data | rotation RMS | translation RMS |
/// | --- | --- | --- |
/// | the simulator (`calibrate hand-eye --sim`, rendered tag, PnP) | ~0.3° | ~1 mm |
/// | real hand-eye with a printed tag | < 1° | < 10 mm |
/// | pose pairs out of order | ~20° | ~180 mm |
/// | `--frames` with the tag size 10x wrong | < 0.1° | ~680 mm |
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SanityLimits {
    /// Largest accepted rotation RMS, degrees. Default 2°: twice what real data reaches, ten
    /// times below pairs out of order.
    pub max_rotation_rms_deg: f64,
    /// Largest accepted translation RMS, millimetres. Default 20 mm: twice what real data
    /// reaches; a camera 2 cm off already misses a grasp.
    pub max_translation_rms_mm: f64,
    /// Largest accepted distance of the camera from the robot base, metres. Default 5 m: a
    /// camera that sees a tag on the gripper is within a few metres of the robot; a pose in
    /// millimetres puts it tens of metres away.
    pub max_camera_distance_m: f64,
}

impl Default for SanityLimits {
    fn default() -> Self {
        SanityLimits {
            max_rotation_rms_deg: 2.0,
            max_translation_rms_mm: 20.0,
            max_camera_distance_m: 5.0,
        }
    }
}

/// An input translation longer than this (metres) is taken for millimetres: no robot reaches
/// 10 m and no tag is seen from 10 m, while a pose in millimetres is hundreds of "metres".
pub(crate) const MILLIMETRES_ABOVE_M: f64 = 10.0;

/// An input translation longer than this (metres) is no unit mix-up but a broken number.
pub(crate) const ABSURD_ABOVE_M: f64 = 1e6;

/// Rotation RMS (degrees) below which the rotations count as consistent when naming the mistake:
/// rotations do not depend on the tag size or the units, translations do.
pub(crate) const ROTATION_FINE_DEG: f64 = 1.0;

/// A sample whose residual is over its limit and over this many times the median residual is an
/// outlier when naming the mistake: few outliers mean a local fault (a bad detection, one
/// mismatched pair), not a global one.
pub(crate) const OUTLIER_TIMES_MEDIAN: f64 = 3.0;

/// One limit a result broke.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Violation {
    /// A residual or the camera pose is NaN or infinite.
    NonFinite,
    /// The rotation residual RMS is over [`SanityLimits::max_rotation_rms_deg`].
    RotationRms {
        /// The RMS, degrees.
        deg: f64,
        /// The limit it broke, degrees.
        limit_deg: f64,
    },
    /// The translation residual RMS is over [`SanityLimits::max_translation_rms_mm`].
    TranslationRms {
        /// The RMS, millimetres.
        mm: f64,
        /// The limit it broke, millimetres.
        limit_mm: f64,
    },
    /// The camera is farther from the robot base than [`SanityLimits::max_camera_distance_m`].
    CameraDistance {
        /// The camera's distance from the base, metres.
        m: f64,
        /// The limit it broke, metres.
        limit_m: f64,
    },
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Violation::NonFinite => {
                f.write_str("the residuals or the camera pose are not finite (NaN or infinity)")
            }
            Violation::RotationRms { deg, limit_deg } => {
                write!(f, "rotation RMS {deg:.2}° > {limit_deg}° limit")
            }
            Violation::TranslationRms { mm, limit_mm } => {
                write!(f, "translation RMS {mm:.1} mm > {limit_mm} mm limit")
            }
            Violation::CameraDistance { m, limit_m } => {
                write!(f, "camera {m:.2} m from the robot base > {limit_m} m limit")
            }
        }
    }
}

/// The mistake a failed check most likely comes from, read off the inputs and the residual
/// pattern by [`likely_mistake`].
#[derive(Clone, Debug, PartialEq)]
pub enum LikelyMistake {
    /// An input translation over [`MILLIMETRES_ABOVE_M`].
    Millimetres {
        /// Index of the sample.
        sample: usize,
        /// Which pose: `base_from_gripper` or `camera_from_target`.
        field: &'static str,
        /// Length of its translation, read as metres.
        norm_m: f64,
    },
    /// An input translation over [`ABSURD_ABOVE_M`] or not finite.
    AbsurdTranslation {
        /// Index of the sample.
        sample: usize,
        /// Which pose: `base_from_gripper` or `camera_from_target`.
        field: &'static str,
    },
    /// Rotation residuals over the limit in most samples.
    OutOfOrder {
        /// Samples over the rotation limit.
        over: usize,
        /// All samples.
        of: usize,
    },
    /// Rotations consistent, translation residuals over the limit in most samples.
    TagSize {
        /// Samples over the translation limit.
        over: usize,
        /// All samples.
        of: usize,
    },
    /// Residuals over the limit in a few samples only.
    FewSamples {
        /// Indices of the outlying samples.
        samples: Vec<usize>,
    },
    /// None of the above.
    Unknown,
}

impl std::fmt::Display for LikelyMistake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LikelyMistake::Millimetres {
                sample,
                field,
                norm_m,
            } => write!(
                f,
                "samples[{sample}].{field} has a translation of {norm_m:.1} m: poses look like \
                 millimetres, pointact expects metres"
            ),
            LikelyMistake::AbsurdTranslation { sample, field } => write!(
                f,
                "samples[{sample}].{field} has an absurd translation (over {ABSURD_ABOVE_M:e} m \
                 or not finite): check how the poses were recorded"
            ),
            LikelyMistake::OutOfOrder { over, of } => write!(
                f,
                "pose pairs look out of order (robot pose i matched with camera pose j): \
                 {over} of {of} samples are off in rotation; check that each camera pose \
                 belongs to its robot pose"
            ),
            LikelyMistake::TagSize { over, of } => write!(
                f,
                "the tag size looks wrong (translation off by a constant factor): rotations \
                 agree within {ROTATION_FINE_DEG}° but {over} of {of} samples are off in \
                 translation; check the tag size (the black square's edge, metres) or the units \
                 of camera_from_target"
            ),
            LikelyMistake::FewSamples { samples } => write!(
                f,
                "samples {samples:?} disagree with the rest: a bad tag detection or a camera \
                 pose from another robot pose; drop them or record again"
            ),
            LikelyMistake::Unknown => f.write_str(
                "no known pattern; check the conventions: base_from_gripper is the gripper in \
                 the base frame (not inverted), camera_from_target is the tag in the camera \
                 (solvePnP's rvec/tvec)",
            ),
        }
    }
}

/// Why a solve failed the sanity check.
#[derive(Clone, Debug, PartialEq)]
pub struct Implausibility {
    /// The limits broken (at least one).
    pub violations: Vec<Violation>,
    /// The likely mistake.
    pub mistake: LikelyMistake,
    /// Whether every residual and the camera pose are finite ([`CalibrateOptions::force`] can
    /// write only then).
    pub finite: bool,
}

impl std::fmt::Display for Implausibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, v) in self.violations.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{v}")?;
        }
        write!(f, ". Likely mistake: {}", self.mistake)
    }
}

/// The sanity check [`solve_and_write`] runs before writing: every residual and the camera pose
/// finite, rotation and translation RMS and the camera's distance from the base within
/// `limits`. On failure, the broken limits and [`likely_mistake`].
pub fn check_plausible(
    samples: &[HandEyeSample],
    solution: &HandEyeSolution,
    limits: &SanityLimits,
) -> Result<(), Implausibility> {
    let r = &solution.residuals;
    let x = &solution.base_from_camera;
    let finite = [
        r.rotation_rms_deg,
        r.translation_rms_mm,
        r.rotation_max_deg,
        r.translation_max_mm,
    ]
    .iter()
    .chain(
        r.per_sample
            .iter()
            .flat_map(|s| [&s.rotation_deg, &s.translation_mm]),
    )
    .chain(x.translation.vector.iter())
    .chain(x.rotation.coords.iter())
    .all(|v| v.is_finite());
    let mut violations = Vec::new();
    if !finite {
        violations.push(Violation::NonFinite);
    }
    // Non-finite values are the one NonFinite violation above; these compare finite numbers.
    if r.rotation_rms_deg.is_finite() && r.rotation_rms_deg > limits.max_rotation_rms_deg {
        violations.push(Violation::RotationRms {
            deg: r.rotation_rms_deg,
            limit_deg: limits.max_rotation_rms_deg,
        });
    }
    if r.translation_rms_mm.is_finite() && r.translation_rms_mm > limits.max_translation_rms_mm {
        violations.push(Violation::TranslationRms {
            mm: r.translation_rms_mm,
            limit_mm: limits.max_translation_rms_mm,
        });
    }
    let distance = norm(&x.translation.vector);
    if distance.is_finite() && distance > limits.max_camera_distance_m {
        violations.push(Violation::CameraDistance {
            m: distance,
            limit_m: limits.max_camera_distance_m,
        });
    }
    if violations.is_empty() {
        return Ok(());
    }
    Err(Implausibility {
        violations,
        mistake: likely_mistake(samples, solution, limits),
        finite,
    })
}

/// Names the likely mistake behind a result that failed [`check_plausible`], first match wins:
///
/// 1. an input translation over [`ABSURD_ABOVE_M`] or not finite → [`LikelyMistake::AbsurdTranslation`];
/// 2. one over [`MILLIMETRES_ABOVE_M`] → [`LikelyMistake::Millimetres`] (the inputs themselves
///    show it, whatever the residuals);
/// 3. the samples whose residual (rotation if over its limit, else translation) is over both
///    the limit and [`OUTLIER_TIMES_MEDIAN`] times the median are at least one and at most a
///    quarter of all → [`LikelyMistake::FewSamples`]: a local fault, not a global one;
/// 4. rotation RMS under [`ROTATION_FINE_DEG`] but translation over its limit →
///    [`LikelyMistake::TagSize`]: the rotations (which PnP gets independent of the tag size)
///    agree, the translations (which scale with it, so the error grows with the tag's distance)
///    do not;
/// 5. rotation RMS over its limit → [`LikelyMistake::OutOfOrder`]: a camera pose paired with
///    another robot pose is off in rotation by the whole tilt between the two, in most samples;
/// 6. otherwise [`LikelyMistake::Unknown`].
pub(crate) fn likely_mistake(
    samples: &[HandEyeSample],
    solution: &HandEyeSolution,
    limits: &SanityLimits,
) -> LikelyMistake {
    let mut largest: Option<(usize, &'static str, f64)> = None;
    for (i, s) in samples.iter().enumerate() {
        for (field, iso) in [
            ("base_from_gripper", &s.base_from_gripper),
            ("camera_from_target", &s.camera_from_target),
        ] {
            let n = norm(&iso.translation.vector);
            let n = if n.is_nan() { f64::INFINITY } else { n };
            if largest.is_none_or(|(_, _, m)| n > m) {
                largest = Some((i, field, n));
            }
        }
    }
    if let Some((sample, field, norm_m)) = largest {
        if norm_m > ABSURD_ABOVE_M {
            return LikelyMistake::AbsurdTranslation { sample, field };
        }
        if norm_m > MILLIMETRES_ABOVE_M {
            return LikelyMistake::Millimetres {
                sample,
                field,
                norm_m,
            };
        }
    }
    let r = &solution.residuals;
    let of = r.per_sample.len();
    let rotation_bad = exceeds(r.rotation_rms_deg, limits.max_rotation_rms_deg);
    let translation_bad = exceeds(r.translation_rms_mm, limits.max_translation_rms_mm);
    // The residual that broke its limit (rotation first: a translation fit cannot be better
    // than the rotation it is built on), per sample.
    let (values, limit): (Vec<f64>, f64) = if rotation_bad {
        let v = r.per_sample.iter().map(|s| s.rotation_deg).collect();
        (v, limits.max_rotation_rms_deg)
    } else if translation_bad {
        let v = r.per_sample.iter().map(|s| s.translation_mm).collect();
        (v, limits.max_translation_rms_mm)
    } else {
        (Vec::new(), 0.0)
    };
    let over = values.iter().filter(|&&v| exceeds(v, limit)).count();
    // A local fault: the least-squares fit spreads one bad sample's error over all of them, so
    // "over the limit" is not enough; its residual stands out from the median instead.
    let cut = limit.max(OUTLIER_TIMES_MEDIAN * median(&values));
    let outliers: Vec<usize> = (0..values.len())
        .filter(|&i| exceeds(values[i], cut))
        .collect();
    if !outliers.is_empty() && outliers.len() <= of / 4 {
        return LikelyMistake::FewSamples { samples: outliers };
    }
    if r.rotation_rms_deg < ROTATION_FINE_DEG && translation_bad {
        return LikelyMistake::TagSize { over, of };
    }
    if rotation_bad {
        return LikelyMistake::OutOfOrder { over, of };
    }
    LikelyMistake::Unknown
}

/// Median (0 for none; NaN sorts last).
fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n.is_multiple_of(2) => 0.5 * (v[n / 2 - 1] + v[n / 2]),
        n => v[n / 2],
    }
}

/// Over the limit, NaN included.
fn exceeds(value: f64, limit: f64) -> bool {
    value.is_nan() || value > limit
}

/// Euclidean norm without overflow (a 1e300 component gives 1.7e300, not infinity).
fn norm(v: &Vector3<f64>) -> f64 {
    let m = v.amax();
    if m == 0.0 || !m.is_finite() {
        return m;
    }
    (v / m).norm() * m
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
pub(crate) fn utc_now() -> String {
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
