//! A calibration session on disk, so `pointact calibrate hand-eye --frames DIR` can run from
//! recorded data (or the same data can be solved again with another method):
//!
//! ```text
//! DIR/poses.json        robot, gripper frame, target, and base_from_gripper per view
//! DIR/0000/ 0001/ …     one recorded frame per view (camera::record format: rgb.png,
//!                       16-bit depth.png, camera.toml, frame.toml)
//! ```
//!
//! `poses.json` names each view's frame folder, so a view whose folder is missing is an error
//! that names it. Rotations are written as 3 × 3 row-major matrices (no quaternion sign or order
//! conventions to get wrong) and checked on reading to be rotations within
//! [`ROTATION_TOLERANCE`](crate::geometry::calibration::ROTATION_TOLERANCE).

use std::path::{Path, PathBuf};

use k::nalgebra::{Isometry3, Matrix3, Rotation3, Translation3, UnitQuaternion, Vector3};
use serde::{Deserialize, Serialize};

use super::views::CalibrationView;
use super::{TagTarget, TargetError};
use crate::camera::record::write_frame;
use crate::camera::replay::read_frame;
use crate::geometry::calibration::ROTATION_TOLERANCE;

/// The session's index file.
pub(crate) const POSES_FILE: &str = "poses.json";
/// `format` field of [`POSES_FILE`].
pub(crate) const FORMAT: &str = "pointact.hand_eye_session";
/// `version` field of [`POSES_FILE`].
pub(crate) const VERSION: u32 = 1;

/// What the views were taken with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionInfo {
    /// Robot name (`xarm6`, `widowx250`).
    pub robot: String,
    /// The link whose pose `base_from_gripper` is (the tool point, `tip_link`).
    pub gripper_frame: String,
    /// The tag the camera looked for.
    pub target: TagTarget,
}

/// A session read back.
#[derive(Debug, Clone)]
pub struct Session {
    /// What the views were taken with.
    pub info: SessionInfo,
    /// The views, in the order captured.
    pub views: Vec<CalibrationView>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PosesFile {
    format: String,
    version: u32,
    robot: String,
    gripper_frame: String,
    target: TagTarget,
    views: Vec<ViewEntry>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewEntry {
    /// Frame folder, relative to the session folder.
    frame: String,
    /// base_from_gripper translation, metres.
    translation_m: [f64; 3],
    /// base_from_gripper rotation, row-major.
    rotation: [[f64; 3]; 3],
}

fn session_err(file: &Path, reason: impl Into<String>) -> TargetError {
    TargetError::Session {
        file: file.display().to_string(),
        reason: reason.into(),
    }
}

/// Writes `views` as a session into `dir` (created if needed). Frame folders are numbered
/// `0000`, `0001`, … in view order; an existing `poses.json` is replaced only after every frame
/// was written.
pub fn write_session(
    dir: &Path,
    info: &SessionInfo,
    views: &[CalibrationView],
) -> Result<(), TargetError> {
    std::fs::create_dir_all(dir).map_err(|e| session_err(dir, e.to_string()))?;
    let mut entries = Vec::with_capacity(views.len());
    for (i, v) in views.iter().enumerate() {
        let name = format!("{i:04}");
        write_frame(&v.frame, &dir.join(&name))?;
        let r = v.base_from_gripper.rotation.to_rotation_matrix();
        let m = r.matrix();
        entries.push(ViewEntry {
            frame: name,
            translation_m: v.base_from_gripper.translation.vector.into(),
            rotation: [0, 1, 2].map(|i| [m[(i, 0)], m[(i, 1)], m[(i, 2)]]),
        });
    }
    let file = PosesFile {
        format: FORMAT.into(),
        version: VERSION,
        robot: info.robot.clone(),
        gripper_frame: info.gripper_frame.clone(),
        target: info.target.clone(),
        views: entries,
    };
    let path = dir.join(POSES_FILE);
    let text =
        serde_json::to_string_pretty(&file).map_err(|e| session_err(&path, e.to_string()))?;
    let tmp = dir.join(format!(".{POSES_FILE}.tmp"));
    std::fs::write(&tmp, text + "\n").map_err(|e| session_err(&tmp, e.to_string()))?;
    std::fs::rename(&tmp, &path).map_err(|e| session_err(&path, e.to_string()))?;
    Ok(())
}

/// Reads a session written by [`write_session`] (or by hand in the same format).
pub fn read_session(dir: &Path) -> Result<Session, TargetError> {
    let path = dir.join(POSES_FILE);
    let text = pointact_core::input::read_text(&path, pointact_core::input::MAX_CONFIG_BYTES)
        .map_err(|e| {
            session_err(
                &path,
                format!("{e} (a session folder holds {POSES_FILE} and one frame folder per view)"),
            )
        })?;
    let file: PosesFile =
        serde_json::from_str(&text).map_err(|e| session_err(&path, e.to_string()))?;
    if file.format != FORMAT || file.version != VERSION {
        return Err(session_err(
            &path,
            format!(
                "format `{}` version {} is not `{FORMAT}` version {VERSION}",
                file.format, file.version
            ),
        ));
    }
    file.target
        .validate()
        .map_err(|e| session_err(&path, format!("target: {e}")))?;
    let mut views = Vec::with_capacity(file.views.len());
    for (i, v) in file.views.iter().enumerate() {
        let field = |what: &str| format!("views[{i}].{what}");
        let frame_dir: PathBuf = dir.join(&v.frame);
        if v.frame.is_empty() || Path::new(&v.frame).is_absolute() {
            return Err(session_err(
                &path,
                format!(
                    "{}: must be a folder name inside the session",
                    field("frame")
                ),
            ));
        }
        let base_from_gripper = pose_from(&v.translation_m, &v.rotation)
            .map_err(|reason| session_err(&path, format!("{}: {reason}", field("rotation"))))?;
        let frame = read_frame(&frame_dir)?;
        views.push(CalibrationView {
            base_from_gripper,
            frame,
        });
    }
    Ok(Session {
        info: SessionInfo {
            robot: file.robot,
            gripper_frame: file.gripper_frame,
            target: file.target,
        },
        views,
    })
}

/// A pose from a translation and a row-major rotation matrix that must be a rotation within
/// [`ROTATION_TOLERANCE`]; the nearest rotation is used.
fn pose_from(t: &[f64; 3], rows: &[[f64; 3]; 3]) -> Result<Isometry3<f64>, String> {
    if !t.iter().chain(rows.iter().flatten()).all(|v| v.is_finite()) {
        return Err("translation and rotation must be finite".into());
    }
    let m = Matrix3::from_fn(|i, j| rows[i][j]);
    let ortho = (m.transpose() * m - Matrix3::identity()).abs().max();
    let det = m.determinant();
    if ortho > ROTATION_TOLERANCE || (det - 1.0).abs() > ROTATION_TOLERANCE {
        return Err(format!(
            "not a rotation matrix (max |RᵀR − I| = {ortho:.2e}, det = {det:.6})"
        ));
    }
    let r = Rotation3::from_matrix_eps(&m, 1e-12, 100, Rotation3::identity());
    Ok(Isometry3::from_parts(
        Translation3::from(Vector3::from(*t)),
        UnitQuaternion::from_rotation_matrix(&r),
    ))
}
