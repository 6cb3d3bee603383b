//! Calibration TOML files: the committed example, round trips, and errors that name the file and
//! the field.

use super::temp::temp_dir;
use std::path::{Path, PathBuf};

use crate::geometry::calibration::CameraCalibration;
use crate::geometry::calibration::Extrinsics;
use crate::geometry::{Distortion, GeometryError, Intrinsics};
use k::nalgebra::{Isometry3, Matrix3, Translation3, UnitQuaternion, Vector3};

fn example_path() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("calibration/example.toml")
}

const GOOD: &str = r#"
[intrinsics]
width = 640
height = 480
fx = 600
fy = 600.5
cx = 320.25
cy = 240.75
model = "brown_conrady"
coeffs = [0.1, -0.2, 0.001, 0.002, 0.05]

[extrinsics]
camera = "front"
translation = [0.9, 0.0, 0.5]
rotation = [
  [0.0, 0.0, -1.0],
  [1.0, 0.0, 0.0],
  [0.0, -1.0, 0.0],
]
"#;

#[test]
fn example_file_loads_and_describes_a_camera_looking_down_at_the_workspace() {
    let path = example_path();
    let cal = CameraCalibration::load(&path).expect("example.toml loads");
    assert_eq!(cal.intrinsics.width, 640);
    assert_eq!(cal.intrinsics.model, Distortion::BrownConrady);
    assert_eq!(cal.extrinsics.camera, "front");
    let iso = cal.extrinsics.base_from_camera;
    // The optical axis points back (-x) and down (-z) in the base frame.
    let z_axis = iso.rotation * Vector3::z();
    assert!(z_axis.x < -0.5 && z_axis.z < -0.5, "{z_axis:?}");
    // The workspace centre is in front of the camera and projects inside the image.
    let centre = cal.extrinsics.camera_from_base() * k::nalgebra::Point3::new(0.38, 0.0, 0.0);
    let px = cal.intrinsics.project(&centre.coords).expect("in front");
    assert!(
        px[0] > 0.0 && px[0] < 640.0 && px[1] > 0.0 && px[1] < 480.0,
        "{px:?}"
    );
    // The separate loaders read the same tables.
    assert_eq!(Intrinsics::load(&path).expect("intrinsics"), cal.intrinsics);
    assert_eq!(Extrinsics::load(&path).expect("extrinsics"), cal.extrinsics);
}

#[test]
fn example_quaternion_alternative_is_the_same_rotation() {
    let text = std::fs::read_to_string(example_path()).expect("example");
    let start = text.find("rotation = [").expect("matrix");
    let end = start + text[start..].find("\n]").expect("end of matrix") + 2;
    let quat_line = text
        .lines()
        .find(|l| l.starts_with("# quaternion"))
        .expect("quaternion comment")
        .trim_start_matches("# ");
    let swapped = format!("{}{}{}", &text[..start], quat_line, &text[end..]);
    let by_quat = Extrinsics::from_toml_str(&swapped, Path::new("example-quat.toml"))
        .expect("quaternion form loads");
    let by_matrix = Extrinsics::load(&example_path()).expect("matrix form");
    let angle = by_quat
        .base_from_camera
        .rotation
        .angle_to(&by_matrix.base_from_camera.rotation);
    assert!(angle < 1e-7, "{angle}");
}

#[test]
fn calibration_round_trips_through_a_file() {
    let cal = CameraCalibration {
        intrinsics: Intrinsics {
            model: Distortion::InverseBrownConrady,
            coeffs: [-0.052, 0.061, 0.0013, -0.0021, -0.019],
            ..Intrinsics::pinhole(848, 480, 421.123456789, 420.987654321, 423.5, 239.25)
        },
        extrinsics: Extrinsics {
            camera: "wrist".into(),
            base_from_camera: Isometry3::from_parts(
                Translation3::new(0.123456789, -0.5, 0.75),
                UnitQuaternion::from_euler_angles(0.3, -1.1, 2.7),
            ),
        },
    };
    let dir = temp_dir("roundtrip");
    let path = dir.join("wrist.toml");
    cal.save(&path).expect("save");
    let back = CameraCalibration::load(&path).expect("load");
    assert_eq!(
        back.intrinsics, cal.intrinsics,
        "intrinsics must be bit-exact"
    );
    assert_eq!(back.extrinsics.camera, "wrist");
    let (a, b) = (
        &back.extrinsics.base_from_camera,
        &cal.extrinsics.base_from_camera,
    );
    assert_eq!(a.translation, b.translation);
    assert!(a.rotation.angle_to(&b.rotation) < 1e-12);
    // And the text is what the README documents.
    let text = std::fs::read_to_string(&path).expect("text");
    assert!(text.contains("[intrinsics]") && text.contains("rotation = ["));
    assert!(text.contains("model = \"inverse_brown_conrady\""));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn integer_numbers_and_near_orthonormal_matrices_are_accepted() {
    let file = Path::new("good.toml");
    let cal = CameraCalibration::from_toml_str(GOOD, file).expect("good file");
    assert_eq!(cal.intrinsics.fx, 600.0);
    // Six-decimal rounding of a rotation is accepted and re-orthonormalised.
    let noisy = GOOD.replace("[0.0, 0.0, -1.0]", "[0.0000004, 0.0, -0.9999996]");
    let ex = Extrinsics::from_toml_str(&noisy, file).expect("within tolerance");
    let m: Matrix3<f64> = ex
        .base_from_camera
        .rotation
        .to_rotation_matrix()
        .into_inner();
    assert!((m.transpose() * m - Matrix3::identity()).abs().max() < 1e-12);
    assert!((m.determinant() - 1.0).abs() < 1e-12);
}

/// Applies `edit` to the good file and checks that loading it fails naming the file and `field`
/// (and `also`, a word of the reason).
fn assert_field_error(edit: impl Fn(&str) -> String, field: &str, also: &str) {
    let file = Path::new("calibration/front.toml");
    let text = edit(GOOD);
    assert_ne!(text, GOOD, "the edit for {field} did not change the file");
    let err =
        CameraCalibration::from_toml_str(&text, file).expect_err(&format!("an error for {field}"));
    let msg = err.to_string();
    assert!(msg.contains("calibration/front.toml"), "no file in: {msg}");
    assert!(msg.contains(field), "no `{field}` in: {msg}");
    assert!(msg.contains(also), "no `{also}` in: {msg}");
}

#[test]
fn intrinsics_errors_name_file_and_field() {
    assert_field_error(
        |t| t.replace("fx = 600\n", "fx = 0.0\n"),
        "intrinsics.fx",
        "> 0",
    );
    assert_field_error(
        |t| t.replace("fy = 600.5", "fy = -1.0"),
        "intrinsics.fy",
        "> 0",
    );
    assert_field_error(
        |t| t.replace("width = 640", "width = 0"),
        "intrinsics.width",
        "> 0",
    );
    assert_field_error(
        |t| t.replace("cx = 320.25", "cx = nan"),
        "intrinsics.cx",
        "finite",
    );
    assert_field_error(
        |t| {
            t.replace(
                "[0.1, -0.2, 0.001, 0.002, 0.05]",
                "[0.1, -0.2, 0.001, 0.002]",
            )
        },
        "intrinsics.coeffs",
        "5 numbers",
    );
    assert_field_error(
        |t| t.replace("\"brown_conrady\"", "\"kannala_brandt4\""),
        "intrinsics.model",
        "unknown model",
    );
    // Unknown and missing keys are reported by the parser with the key name.
    assert_field_error(
        |t| t.replace("fy = 600.5", "fy = 600.5\nfz = 1.0"),
        "fz",
        "unknown",
    );
    assert_field_error(|t| t.replace("fy = 600.5\n", ""), "fy", "missing");
}

#[test]
fn extrinsics_errors_name_file_and_field() {
    assert_field_error(
        |t| t.replace("[1.0, 0.0, 0.0],", "[1.01, 0.0, 0.0],"),
        "extrinsics.rotation",
        "not orthonormal",
    );
    assert_field_error(
        |t| t.replace("[1.0, 0.0, 0.0],", "[-1.0, 0.0, 0.0],"),
        "extrinsics.rotation",
        "reflection",
    );
    assert_field_error(
        |t| t.replace("[1.0, 0.0, 0.0],", "[1.0, 0.0, nan],"),
        "extrinsics.rotation[1][2]",
        "finite",
    );
    assert_field_error(
        |t| t.replace("  [0.0, -1.0, 0.0],\n", ""),
        "extrinsics.rotation",
        "3 rows",
    );
    assert_field_error(
        |t| t.replace("[1.0, 0.0, 0.0],", "[1.0, 0.0],"),
        "extrinsics.rotation[1]",
        "3 numbers",
    );
    assert_field_error(
        |t| t.replace("[0.9, 0.0, 0.5]", "[0.9, 0.0]"),
        "extrinsics.translation",
        "3 numbers",
    );
    assert_field_error(
        |t| t.replace("[0.9, 0.0, 0.5]", "[inf, 0.0, 0.5]"),
        "extrinsics.translation[0]",
        "finite",
    );
    assert_field_error(
        |t| t.replace("camera = \"front\"", "camera = \" \""),
        "extrinsics.camera",
        "empty",
    );
    assert_field_error(
        |t| {
            t.replace(
                "translation =",
                "quaternion = { w = 1.0, x = 0.0, y = 0.0, z = 0.0 }\ntranslation =",
            )
        },
        "extrinsics.rotation",
        "exactly one",
    );
    let with_quat = |q: &str| {
        let q = q.to_string();
        move |t: &str| {
            let start = t.find("rotation = [").expect("rotation");
            format!("{}quaternion = {q}\n", &t[..start])
        }
    };
    assert_field_error(
        with_quat("{ w = 2.0, x = 0.0, y = 0.0, z = 0.0 }"),
        "extrinsics.quaternion",
        "norm",
    );
    assert_field_error(
        with_quat("{ w = 1.0, x = nan, y = 0.0, z = 0.0 }"),
        "extrinsics.quaternion.x",
        "finite",
    );
    // A valid quaternion form loads.
    let text = with_quat("{ w = 0.70710678, x = 0.0, y = 0.0, z = 0.70710678 }")(GOOD);
    let ex = Extrinsics::from_toml_str(&text, Path::new("q.toml")).expect("quaternion");
    let x_axis = ex.base_from_camera.rotation * Vector3::x();
    assert!((x_axis - Vector3::y()).norm() < 1e-7);
}

#[test]
fn missing_files_and_tables_are_reported_with_the_path() {
    let missing = Path::new("/nonexistent/pointact/front.toml");
    match Extrinsics::load(missing) {
        Err(GeometryError::Io { file, .. }) => assert_eq!(file, missing),
        other => panic!("expected Io, got {other:?}"),
    }
    let only_intrinsics = GOOD[..GOOD.find("[extrinsics]").expect("table")].to_string();
    let err = CameraCalibration::from_toml_str(&only_intrinsics, Path::new("half.toml"))
        .expect_err("no extrinsics");
    let msg = err.to_string();
    assert!(
        msg.contains("half.toml") && msg.contains("[extrinsics]"),
        "{msg}"
    );
    assert!(Intrinsics::from_toml_str(&only_intrinsics, Path::new("half.toml")).is_ok());
    let dir = temp_dir("broken");
    let path = dir.join("broken.toml");
    std::fs::write(&path, "[intrinsics\nwidth = 1").expect("write");
    let msg = Intrinsics::load(&path).expect_err("not TOML").to_string();
    assert!(msg.contains("broken.toml"), "{msg}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn rotation_and_quaternion_messages_are_exact() {
    let file = Path::new("calibration/front.toml");
    let msg = |text: String| {
        assert_ne!(text, GOOD);
        Extrinsics::from_toml_str(&text, file)
            .expect_err("an error")
            .to_string()
    };
    let quat = |q: &str| {
        let start = GOOD.find("rotation = [").expect("rotation");
        format!("{}quaternion = {q}\n", &GOOD[..start])
    };
    let prefix = "calibration/front.toml: field ";
    let cases = [
        (
            msg(GOOD.replace("[1.0, 0.0, 0.0],", "[-1.0, 0.0, 0.0],")),
            "`extrinsics.rotation`: determinant is -1.000000: a reflection (one axis flipped), \
             not a rotation; check the handedness of the frames",
        ),
        (
            msg(GOOD.replace("[1.0, 0.0, 0.0],", "[1.01, 0.0, 0.0],")),
            "`extrinsics.rotation`: not orthonormal: max |R^T R - I| = 2.010e-2 > 1e-4; rows \
             must be unit vectors at right angles (is it scaled, mistyped or rounded to too few \
             decimals?)",
        ),
        (
            // Scaled by 1 + 4e-5: RᵀR is within 1e-4 of I, the determinant is not within 1e-4 of 1.
            msg(GOOD
                .replace("[0.0, 0.0, -1.0]", "[0.0, 0.0, -1.00004]")
                .replace("[1.0, 0.0, 0.0]", "[1.00004, 0.0, 0.0]")
                .replace("[0.0, -1.0, 0.0]", "[0.0, -1.00004, 0.0]")),
            "`extrinsics.rotation`: determinant is 1.000120, must be 1 within 1e-4",
        ),
        (
            msg(quat("{ w = 2.0, x = 0.0, y = 0.0, z = 0.0 }")),
            "`extrinsics.quaternion`: norm is 2.000000, must be 1 within 1e-3 (a unit \
             quaternion { w, x, y, z })",
        ),
        (
            msg(quat("{ w = 1.0, x = 0.0, y = -inf, z = nan }")),
            "`extrinsics.quaternion.y`: must be a finite number, got -inf",
        ),
    ];
    for (got, expected) in &cases {
        assert_eq!(got, &format!("{prefix}{expected}"));
    }
}

#[test]
fn intrinsics_if_present_reads_only_a_file_that_has_them() {
    let dir = temp_dir("if-present");
    let path = dir.join("front.toml");
    let _ = std::fs::remove_file(&path);
    assert_eq!(Intrinsics::load_if_present(&path).expect("no file"), None);
    // TOML without [intrinsics], even with a table the loader does not know: nothing to keep.
    std::fs::write(&path, "[meta]\nwho = \"me\"\n[notes]\nx = 1\n").expect("write");
    assert_eq!(Intrinsics::load_if_present(&path).expect("no table"), None);
    std::fs::write(&path, GOOD).expect("write");
    let k = Intrinsics::load_if_present(&path)
        .expect("good")
        .expect("has intrinsics");
    assert_eq!(k, Intrinsics::load(&path).expect("load"));
    // Not TOML, or a bad [intrinsics]: an error naming the file (and the field).
    std::fs::write(&path, "[intrinsics\nwidth = ").expect("write");
    let msg = Intrinsics::load_if_present(&path)
        .expect_err("not TOML")
        .to_string();
    assert!(msg.contains("front.toml"), "{msg}");
    std::fs::write(&path, GOOD.replace("fx = 600\n", "fx = 0.0\n")).expect("write");
    let msg = Intrinsics::load_if_present(&path)
        .expect_err("fx = 0")
        .to_string();
    assert!(
        msg.contains("front.toml") && msg.contains("intrinsics.fx"),
        "{msg}"
    );
    // A folder in place of the file cannot be read: an Io error, not "absent".
    match Intrinsics::load_if_present(&dir) {
        Err(GeometryError::Io { file, .. }) => assert_eq!(file, dir),
        other => panic!("expected Io, got {other:?}"),
    }
    let _ = std::fs::remove_dir_all(dir);
}
