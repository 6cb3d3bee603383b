//! Camera calibration files: intrinsics and the camera→base extrinsic, in TOML.
//!
//! One file format serves every producer (hand-edited files in `calibration/`, the hand-eye
//! procedure, a recorded-frames folder, the simulator): an optional `[intrinsics]` table and an
//! optional `[extrinsics]` table (plus a free-form `[meta]` table for provenance). Each loader
//! reads the table it needs. `calibration/README.md` documents the format.
//!
//! A wrong extrinsic does not crash anything: it moves every grasp by centimetres. So the loader
//! is strict, and every error names the file and the field (`extrinsics.rotation[2][0]`), because
//! the person who has to fix it is looking at that file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::GeometryError;
use super::intrinsics::{Distortion, Intrinsics};
use crate::nalgebra::{Isometry3, Matrix3, Quaternion, Rotation3, Translation3, UnitQuaternion};

/// Largest accepted `max |R^T R - I|` and `|det R - 1|` of a rotation matrix in a file.
///
/// 1e-4 accepts matrices printed with five or more decimals (six-decimal rounding leaves ~2e-6)
/// and rejects real mistakes (a typo, a scaled matrix, a swapped entry), which are orders of
/// magnitude larger. A transposed matrix (the inverse rotation) is still a rotation and cannot
/// be caught here. The accepted matrix is then replaced by its nearest rotation (polar
/// decomposition), a correction of at most ~1e-4 rad (0.1 mm at 1 m), below hand-eye accuracy.
pub const ROTATION_TOLERANCE: f64 = 1e-4;

/// Largest accepted `| |q| - 1 |` of a quaternion in a file; it is then normalised. Hand-typed
/// four-decimal quaternions are off by up to ~1e-4.
pub const QUATERNION_NORM_TOLERANCE: f64 = 1e-3;

/// Where a camera is: `base_from_camera` maps points in the camera's optical frame (x right, y
/// down, z forward) to the robot base frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Extrinsics {
    /// Camera name (matches the camera configuration, e.g. `"front"`).
    pub camera: String,
    /// Camera optical frame → robot base frame.
    pub base_from_camera: Isometry3<f64>,
}

impl Extrinsics {
    /// Reads the `[extrinsics]` table of a calibration file.
    pub fn load(path: &Path) -> Result<Self, GeometryError> {
        Self::from_toml_str(&read(path)?, path)
    }

    /// Parses the `[extrinsics]` table of calibration-file text; `file` is used in messages.
    pub fn from_toml_str(text: &str, file: &Path) -> Result<Self, GeometryError> {
        let raw = parse(text, file)?;
        let ex = raw
            .extrinsics
            .ok_or_else(|| missing_table(file, "extrinsics"))?;
        ex.into_extrinsics(file)
    }

    /// The inverse transform, base frame → camera optical frame.
    pub fn camera_from_base(&self) -> Isometry3<f64> {
        self.base_from_camera.inverse()
    }
}

impl Intrinsics {
    /// Reads the `[intrinsics]` table of a calibration file and validates it.
    pub fn load(path: &Path) -> Result<Self, GeometryError> {
        Self::from_toml_str(&read(path)?, path)
    }

    /// The `[intrinsics]` of a calibration file that may not be there: `Ok(None)` when the file
    /// does not exist or is TOML without an `[intrinsics]` table; otherwise as [`Intrinsics::load`]
    /// (an unreadable file, invalid TOML or a bad `[intrinsics]` is an error). What a writer that
    /// must keep an existing lens model reads before replacing the other tables.
    pub fn load_if_present(path: &Path) -> Result<Option<Self>, GeometryError> {
        let text = match crate::input::read_text(path, crate::input::MAX_CONFIG_BYTES) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(GeometryError::Io {
                    file: path.to_path_buf(),
                    source,
                })
            }
        };
        // Any TOML without the table counts as "no lens model"; only a file that has one is
        // held to the full format.
        let table: toml::Table = toml::from_str(&text).map_err(|e| GeometryError::Parse {
            file: path.to_path_buf(),
            message: e.to_string(),
        })?;
        if !table.contains_key("intrinsics") {
            return Ok(None);
        }
        Self::from_toml_str(&text, path).map(Some)
    }

    /// Parses and validates the `[intrinsics]` table of calibration-file text; `file` is used in
    /// messages.
    pub fn from_toml_str(text: &str, file: &Path) -> Result<Self, GeometryError> {
        let raw = parse(text, file)?;
        let intr = raw
            .intrinsics
            .ok_or_else(|| missing_table(file, "intrinsics"))?;
        intr.into_intrinsics(file)
    }
}

/// Intrinsics and extrinsics of one camera: what a recorded-frames folder or the simulator writes
/// next to its frames so that points can be lifted to the base frame later.
#[derive(Clone, Debug, PartialEq)]
pub struct CameraCalibration {
    /// Lens model of the stream the depth is aligned to.
    pub intrinsics: Intrinsics,
    /// Camera pose in the base frame.
    pub extrinsics: Extrinsics,
}

impl CameraCalibration {
    /// Reads both tables of a calibration file.
    pub fn load(path: &Path) -> Result<Self, GeometryError> {
        Self::from_toml_str(&read(path)?, path)
    }

    /// Parses both tables of calibration-file text; `file` is used in messages.
    pub fn from_toml_str(text: &str, file: &Path) -> Result<Self, GeometryError> {
        let raw = parse(text, file)?;
        let intr = raw
            .intrinsics
            .ok_or_else(|| missing_table(file, "intrinsics"))?;
        let ex = raw
            .extrinsics
            .ok_or_else(|| missing_table(file, "extrinsics"))?;
        Ok(CameraCalibration {
            intrinsics: intr.into_intrinsics(file)?,
            extrinsics: ex.into_extrinsics(file)?,
        })
    }

    /// The file text: rotation written as a matrix (rows), numbers in shortest round-trip form,
    /// so loading it back gives the same calibration.
    pub(crate) fn to_toml_string(&self) -> Result<String, GeometryError> {
        calibration_file_text(Some(&self.intrinsics), Some(&self.extrinsics), None)
    }

    /// Writes [`CameraCalibration::to_toml_string`] to `path`.
    pub fn save(&self, path: &Path) -> Result<(), GeometryError> {
        let text = self.to_toml_string()?;
        std::fs::write(path, text).map_err(|source| GeometryError::Io {
            file: path.to_path_buf(),
            source,
        })
    }
}

/// Calibration-file text holding any of the three tables: what every writer uses, so there is one
/// format. The hand-eye procedure writes `[extrinsics]` and `[meta]` (and keeps `[intrinsics]`
/// when the camera's file already has them); [`CameraCalibration::to_toml_string`] writes the
/// first two. Rotation written as a matrix (rows), numbers in shortest round-trip form, so
/// loading the text back gives the same values.
pub fn calibration_file_text(
    intrinsics: Option<&Intrinsics>,
    extrinsics: Option<&Extrinsics>,
    meta: Option<&toml::Table>,
) -> Result<String, GeometryError> {
    let out = OutFile {
        meta: meta.cloned(),
        intrinsics: intrinsics.map(|k| OutIntrinsics {
            width: k.width,
            height: k.height,
            fx: k.fx,
            fy: k.fy,
            cx: k.cx,
            cy: k.cy,
            model: k.model.name().to_string(),
            coeffs: k.coeffs,
        }),
        extrinsics: extrinsics.map(|e| {
            let iso = &e.base_from_camera;
            let m = iso.rotation.to_rotation_matrix().into_inner();
            OutExtrinsics {
                camera: e.camera.clone(),
                translation: iso.translation.vector.into(),
                rotation: [0, 1, 2].map(|r| [m[(r, 0)], m[(r, 1)], m[(r, 2)]]),
            }
        }),
    };
    let body = toml::to_string(&out).map_err(|e| GeometryError::Parse {
        file: PathBuf::from("<calibration being written>"),
        message: e.to_string(),
    })?;
    Ok(format!(
        "# pointact camera calibration (format: calibration/README.md)\n\
         # extrinsics.rotation rows of base_from_camera; translation in metres.\n\n{body}"
    ))
}

// ---- file shapes -------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    intrinsics: Option<RawIntrinsics>,
    extrinsics: Option<RawExtrinsics>,
    #[allow(dead_code)] // free-form provenance, read so that it is allowed
    meta: Option<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIntrinsics {
    width: i64,
    height: i64,
    fx: f64,
    fy: f64,
    cx: f64,
    cy: f64,
    model: Option<String>,
    coeffs: Option<Vec<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExtrinsics {
    camera: String,
    translation: Vec<f64>,
    rotation: Option<Vec<Vec<f64>>>,
    quaternion: Option<RawQuaternion>,
}

/// A quaternion as calibration files and the hand-eye samples JSON write it: named components,
/// so no `[w, x, y, z]` vs `[x, y, z, w]` ambiguity.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawQuaternion {
    pub(crate) w: f64,
    pub(crate) x: f64,
    pub(crate) y: f64,
    pub(crate) z: f64,
}

/// Why a [`RawQuaternion`] is not a rotation; the caller words the message and names the field.
pub enum QuaternionDefect {
    /// The first non-finite component, in `w, x, y, z` order.
    NotFinite {
        /// The component's name: `w`, `x`, `y` or `z`.
        component: &'static str,
        /// Its value.
        value: f64,
    },
    /// A norm off 1 by more than [`QUATERNION_NORM_TOLERANCE`].
    Norm(f64),
}

impl RawQuaternion {
    /// The normalised rotation, if every component is finite and the norm is 1 within
    /// [`QUATERNION_NORM_TOLERANCE`].
    pub fn to_rotation(&self) -> Result<UnitQuaternion<f64>, QuaternionDefect> {
        for (component, value) in [("w", self.w), ("x", self.x), ("y", self.y), ("z", self.z)] {
            if !value.is_finite() {
                return Err(QuaternionDefect::NotFinite { component, value });
            }
        }
        let q = Quaternion::new(self.w, self.x, self.y, self.z);
        let norm = q.norm();
        if (norm - 1.0).abs() > QUATERNION_NORM_TOLERANCE {
            return Err(QuaternionDefect::Norm(norm));
        }
        Ok(UnitQuaternion::from_quaternion(q))
    }
}

/// Why a finite 3x3 matrix is not accepted as a rotation; the caller words the message.
pub enum RotationDefect {
    /// `max |RᵀR − I|` or `|det R − 1|` above [`ROTATION_TOLERANCE`].
    Tolerance {
        /// `max |RᵀR − I|`.
        ortho: f64,
        /// `det R`.
        det: f64,
    },
    /// The polar decomposition failed.
    Svd,
}

/// A finite matrix read from a file as a rotation: checked against [`ROTATION_TOLERANCE`], then
/// replaced by the nearest rotation (polar decomposition `R = U Vᵀ`).
pub fn rotation_from_matrix(m: &Matrix3<f64>) -> Result<UnitQuaternion<f64>, RotationDefect> {
    let ortho = (m.transpose() * m - Matrix3::identity()).abs().max();
    let det = m.determinant();
    if ortho > ROTATION_TOLERANCE || (det - 1.0).abs() > ROTATION_TOLERANCE {
        return Err(RotationDefect::Tolerance { ortho, det });
    }
    let svd = m.svd(true, true);
    let (Some(u), Some(v_t)) = (svd.u, svd.v_t) else {
        return Err(RotationDefect::Svd);
    };
    Ok(UnitQuaternion::from_rotation_matrix(
        &Rotation3::from_matrix_unchecked(u * v_t),
    ))
}

/// Tables in file order; absent ones are left out. `meta` first: TOML puts plain keys before
/// tables, and `[meta]` on top reads as a header saying where the numbers came from.
#[derive(Serialize)]
struct OutFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    meta: Option<toml::Table>,
    #[serde(skip_serializing_if = "Option::is_none")]
    intrinsics: Option<OutIntrinsics>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extrinsics: Option<OutExtrinsics>,
}

#[derive(Serialize)]
struct OutIntrinsics {
    width: usize,
    height: usize,
    fx: f64,
    fy: f64,
    cx: f64,
    cy: f64,
    model: String,
    coeffs: [f64; 5],
}

#[derive(Serialize)]
struct OutExtrinsics {
    camera: String,
    translation: [f64; 3],
    rotation: [[f64; 3]; 3],
}

fn read(path: &Path) -> Result<String, GeometryError> {
    crate::input::read_text(path, crate::input::MAX_CONFIG_BYTES).map_err(|source| {
        GeometryError::Io {
            file: path.to_path_buf(),
            source,
        }
    })
}

fn parse(text: &str, file: &Path) -> Result<RawFile, GeometryError> {
    toml::from_str(text).map_err(|e| GeometryError::Parse {
        file: file.to_path_buf(),
        message: e.to_string(),
    })
}

fn missing_table(file: &Path, table: &str) -> GeometryError {
    GeometryError::Parse {
        file: file.to_path_buf(),
        message: format!("no [{table}] table"),
    }
}

fn field_err(file: &Path, field: impl Into<String>, reason: impl Into<String>) -> GeometryError {
    GeometryError::Calibration {
        file: file.to_path_buf(),
        field: field.into(),
        reason: reason.into(),
    }
}

fn not_finite(file: &Path, field: &str, x: f64) -> GeometryError {
    field_err(file, field, format!("must be a finite number, got {x}"))
}

fn finite(file: &Path, field: &str, x: f64) -> Result<f64, GeometryError> {
    if x.is_finite() {
        Ok(x)
    } else {
        Err(not_finite(file, field, x))
    }
}

impl RawIntrinsics {
    fn into_intrinsics(self, file: &Path) -> Result<Intrinsics, GeometryError> {
        let size = |field: &str, x: i64| -> Result<usize, GeometryError> {
            if x > 0 {
                usize::try_from(x).map_err(|_| field_err(file, field, "too large"))
            } else {
                Err(field_err(file, field, format!("must be > 0, got {x}")))
            }
        };
        let model = match self.model.as_deref() {
            None => Distortion::None,
            Some(name) => Distortion::from_name(name).ok_or_else(|| {
                field_err(
                    file,
                    "intrinsics.model",
                    format!(
                        "unknown model {name:?}; use none, brown_conrady, inverse_brown_conrady \
                         or modified_brown_conrady"
                    ),
                )
            })?,
        };
        let coeffs = match self.coeffs {
            None => [0.0; 5],
            Some(c) => <[f64; 5]>::try_from(c.as_slice()).map_err(|_| {
                field_err(
                    file,
                    "intrinsics.coeffs",
                    format!("expected 5 numbers [k1, k2, p1, p2, k3], got {}", c.len()),
                )
            })?,
        };
        let k = Intrinsics {
            width: size("intrinsics.width", self.width)?,
            height: size("intrinsics.height", self.height)?,
            fx: self.fx,
            fy: self.fy,
            cx: self.cx,
            cy: self.cy,
            model,
            coeffs,
        };
        k.validate().map_err(|e| match e {
            GeometryError::InvalidIntrinsics { field, reason } => {
                field_err(file, format!("intrinsics.{field}"), reason)
            }
            other => other,
        })?;
        Ok(k)
    }
}

impl RawExtrinsics {
    fn into_extrinsics(self, file: &Path) -> Result<Extrinsics, GeometryError> {
        if self.camera.trim().is_empty() {
            return Err(field_err(file, "extrinsics.camera", "must not be empty"));
        }
        if self.translation.len() != 3 {
            return Err(field_err(
                file,
                "extrinsics.translation",
                format!(
                    "expected 3 numbers [x, y, z], got {}",
                    self.translation.len()
                ),
            ));
        }
        let mut t = [0.0; 3];
        for (i, &x) in self.translation.iter().enumerate() {
            t[i] = finite(file, &format!("extrinsics.translation[{i}]"), x)?;
        }
        let rotation = match (self.rotation, self.quaternion) {
            (Some(rows), None) => rotation_from_rows(file, &rows)?,
            (None, Some(q)) => rotation_from_quaternion(file, &q)?,
            _ => {
                return Err(field_err(
                    file,
                    "extrinsics.rotation",
                    "give exactly one of `rotation` (3x3 matrix, rows) or \
                     `quaternion` ({ w, x, y, z })",
                ))
            }
        };
        Ok(Extrinsics {
            camera: self.camera,
            base_from_camera: Isometry3::from_parts(Translation3::new(t[0], t[1], t[2]), rotation),
        })
    }
}

fn rotation_from_rows(
    file: &Path,
    rows: &[Vec<f64>],
) -> Result<UnitQuaternion<f64>, GeometryError> {
    if rows.len() != 3 {
        return Err(field_err(
            file,
            "extrinsics.rotation",
            format!("expected 3 rows of 3 numbers, got {} rows", rows.len()),
        ));
    }
    let mut m = Matrix3::zeros();
    for (r, row) in rows.iter().enumerate() {
        if row.len() != 3 {
            return Err(field_err(
                file,
                format!("extrinsics.rotation[{r}]"),
                format!("expected 3 numbers, got {}", row.len()),
            ));
        }
        for (c, &x) in row.iter().enumerate() {
            m[(r, c)] = finite(file, &format!("extrinsics.rotation[{r}][{c}]"), x)?;
        }
    }
    let reason = match rotation_from_matrix(&m) {
        Ok(r) => return Ok(r),
        Err(RotationDefect::Svd) => "SVD failed".to_string(),
        Err(RotationDefect::Tolerance { det, .. }) if det < 0.0 => format!(
            "determinant is {det:.6}: a reflection (one axis flipped), not a rotation; \
             check the handedness of the frames"
        ),
        Err(RotationDefect::Tolerance { ortho, .. }) if ortho > ROTATION_TOLERANCE => format!(
            "not orthonormal: max |R^T R - I| = {ortho:.3e} > {ROTATION_TOLERANCE:e}; rows must \
             be unit vectors at right angles (is it scaled, mistyped or rounded to too few decimals?)"
        ),
        Err(RotationDefect::Tolerance { det, .. }) => {
            format!("determinant is {det:.6}, must be 1 within {ROTATION_TOLERANCE:e}")
        }
    };
    Err(field_err(file, "extrinsics.rotation", reason))
}

fn rotation_from_quaternion(
    file: &Path,
    q: &RawQuaternion,
) -> Result<UnitQuaternion<f64>, GeometryError> {
    match q.to_rotation() {
        Ok(r) => Ok(r),
        Err(QuaternionDefect::NotFinite { component, value }) => Err(not_finite(
            file,
            &format!("extrinsics.quaternion.{component}"),
            value,
        )),
        Err(QuaternionDefect::Norm(norm)) => Err(field_err(
            file,
            "extrinsics.quaternion",
            format!(
                "norm is {norm:.6}, must be 1 within {QUATERNION_NORM_TOLERANCE:e} \
                 (a unit quaternion {{ w, x, y, z }})"
            ),
        )),
    }
}
