//! Every reader of outside input, fed generated files: no panic, no abort, no hang, every rejection
//! a typed error whose message names the file, and every accepted input valid.
//!
//! One property test per reader, each a proptest `TestRunner` that counts its cases (all must run)
//! and the accepted ones (some must be, so the checks on `Ok` are exercised too):
//!
//! | test | reader | seeds |
//! | --- | --- | --- |
//! | `scene_toml` | `Scene::from_toml_str` | the built-in scenes |
//! | `robot_toml_and_urdf` | `RobotModel::from_strs`, `load_dir` | the built-in robots |
//! | `calibration_toml` | the three `from_toml_str` of calibration files | `calibration/example.toml`, its quaternion form, a written file |
//! | `safetensors_header` | `SafetensorsReader::open` | 8 tensors of the tiny-model fixture, 1 or 2 shards |
//! | `safetensors_index` | `files::shard_names`, `weight_files` | an index of the fixture's names |
//! | `replay_folder` | `replay::read_frame`, `ReplayCamera` | a frame written by `write_frame` |
//! | `openai_reply` | `openai::parse_reply` | chat completions with valid answers |
//! | `handeye_samples` | `samples_from_json_str`, `load_samples` | samples of the hand-eye test rig |
//!
//! Inputs are valid seeds damaged at three levels (see `common::fuzz`): structurally (a value
//! replaced by one of another type or by NaN, ±inf, 1e308, -0, `i64::MAX`…; keys dropped, added,
//! duplicated; arrays resized; values nested deeper), in the text (lines dropped, duplicated,
//! swapped; nesting thousands of levels deep) and in the bytes (flips, inserts, deletes,
//! truncation, splices from other seeds); a share is arbitrary bytes. Each reader adds damage of
//! its own format: URDF attributes and links re-pointed (loops, two parents), PNG headers
//! rewritten with valid CRCs (sizes, bit depths, colour types), safetensors lengths, offsets,
//! shapes and dtypes at the edges of `u64`.
//!
//! The default case counts fit CI (about half a minute for the file on two cores). One
//! environment variable replaces every reader's count; this runs 100 000 cases of each:
//!
//! ```text
//! POINTACT_FUZZ_CASES=100000 cargo test --release --features realsense --test fuzz_readers
//! ```
//!
//! A failure prints the case's seed and the start of the input; `POINTACT_FUZZ_SEED=<seed>
//! POINTACT_FUZZ_CASES=1` with `--exact <test>` replays that case and prints all of its input.

mod common;

use std::collections::HashMap;
use std::fmt::Display;
use std::path::Path;

use candle_core::{DType, Device};
use common::fuzz::{
    arbitrary_bytes, case_seeds, cases, crc32, excerpt, mutate_bytes, mutate_text, parse_tree,
    random_string, raw, render, run, vocabulary, Rng, Syntax, HOSTILE_FLOATS, HOSTILE_STRINGS,
};
use common::TempDir;
use pointact::calibrate::file::load_samples;
use pointact::calibrate::file::CalibrateError;
use pointact::calibrate::file::{samples_from_json_str, samples_to_json_string};
use pointact::calibrate::HandEyeSample;
use pointact::camera::record::write_frame;
use pointact::camera::replay::{read_frame, ReplayCamera};
use pointact::camera::{Camera, Frame, RgbImage};
use pointact::geometry::calibration::CameraCalibration;
use pointact::geometry::calibration::Extrinsics;
use pointact::geometry::synthetic::camera_look_at;
use pointact::geometry::{DepthImage, Distortion, Intrinsics};
use pointact::kinematics::{RobotModel, BUILTIN_ROBOTS};
use pointact::nalgebra::{Isometry3, Point3, UnitQuaternion, Vector3};
use pointact::pointing::openai::parse_reply;
use pointact::pointing::{Ability, ImageSize, ModelImageMap, PointerError};
use pointact::sim::scene::{Scene, BUILTIN_SCENES};
use pointact::vlm::shard_names;
use pointact::vlm::weight_files;
use pointact::vlm::SafetensorsReader;
use pointact::vlm::DEFAULT_MIN_PIXELS;
use pointact::vlm::PRETRAINED_MAX_PIXELS;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};

// CI sizes: about 25 s for the whole file on two cores (the robot, whose URDF parse dominates,
// costs about 2.5 ms a case; the others 0.2-1 ms). `POINTACT_FUZZ_CASES` replaces them all.
const SCENE_CASES: u32 = 10_000;
const ROBOT_CASES: u32 = 4_000;
const CALIBRATION_CASES: u32 = 10_000;
const SAFETENSORS_CASES: u32 = 10_000;
const INDEX_CASES: u32 = 10_000;
const REPLAY_CASES: u32 = 8_000;
const OPENAI_CASES: u32 = 15_000;
const HANDEYE_CASES: u32 = 15_000;

/// A failed case: its seed, what is wrong, and the start of the input.
fn fail(seed: u64, input: &[u8], problem: impl Display) -> TestCaseError {
    TestCaseError::fail(format!(
        "seed {seed:#018x}: {problem}\ninput: {}",
        excerpt(input)
    ))
}

/// A rejection must say something, and say which file (any of `files`) is at fault.
fn named(e: &impl Display, files: &[&str]) -> Result<(), String> {
    let msg = e.to_string();
    if msg.trim().is_empty() {
        return Err("empty error message".into());
    }
    if !files.iter().any(|f| msg.contains(f)) {
        return Err(format!("error does not name {files:?}: {msg}"));
    }
    Ok(())
}

/// Replaces a file's contents by removing and re-creating it. Overwriting in place truncates, and
/// ext4 flushes a truncated file's blocks at close (its guard for the truncate-and-rewrite
/// pattern), which made file I/O, not the readers, the cost of the file-based tests.
fn rewrite(path: &Path, bytes: &[u8]) {
    let _ = std::fs::remove_file(path);
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn finite_iso(iso: &Isometry3<f64>) -> bool {
    iso.translation.vector.iter().all(|v| v.is_finite())
        && iso.rotation.coords.iter().all(|v| v.is_finite())
        && (iso.rotation.coords.norm() - 1.0).abs() < 1e-9
}

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

// ---- scene TOML ---------------------------------------------------------------------------------

/// What a loaded scene promises the simulator: finite, positive geometry everywhere.
fn scene_invariants(s: &Scene) -> Result<(), String> {
    let t = &s.table;
    check(
        t.height.is_finite()
            && t.center.iter().all(|v| v.is_finite())
            && t.size.iter().all(|v| v.is_finite() && *v > 0.0)
            && t.thickness.is_finite()
            && t.thickness > 0.0,
        || format!("table {t:?}"),
    )?;
    let c = &s.camera;
    check(
        c.intrinsics().validate().is_ok() && finite_iso(&c.world_from_camera()),
        || format!("camera {c:?}"),
    )?;
    for o in &s.objects {
        check(
            !o.name.trim().is_empty()
                && o.mass.is_finite()
                && o.mass > 0.0
                && finite_iso(&o.world_from_object)
                && !o.primitives.is_empty(),
            || format!("object {o:?}"),
        )?;
        for p in &o.primitives {
            let h = p.shape.local_half_extents();
            check(
                finite_iso(&p.object_from_shape)
                    && h.iter().all(|v| v.is_finite() && *v > 0.0)
                    && usize::from(p.part) >= 1
                    && usize::from(p.part) <= o.parts.len(),
                || format!("object `{}` primitive {p:?}", o.name),
            )?;
        }
        let (lo, hi) = o.footprint();
        check(
            lo.iter().chain(hi.iter()).all(|v| v.is_finite()) && o.height().is_finite(),
            || format!("object `{}` extent", o.name),
        )?;
    }
    Ok(())
}

#[test]
fn scene_toml() {
    const FILE: &str = "fuzz/scene.toml";
    let seeds: Vec<&str> = BUILTIN_SCENES.iter().map(|(_, t)| *t).collect();
    let mut vocab: Vec<String> = seeds
        .iter()
        .flat_map(|s| vocabulary(&parse_tree(s, Syntax::Toml)))
        .collect();
    for kind in [
        "block",
        "cylinder",
        "sphere",
        "fruit",
        "vegetable",
        "mug",
        "knife",
        "spoon",
        "plate",
        "bowl",
        "pan",
        "basket",
        "towel",
        "compound",
        "box",
        "capsule",
    ] {
        vocab.push(kind.into());
    }
    vocab.sort();
    vocab.dedup();
    let donors: Vec<&[u8]> = seeds.iter().map(|s| s.as_bytes()).collect();
    let n = cases(SCENE_CASES);
    let accepted = run("scene_toml", n, case_seeds(), |seed| {
        let mut rng = Rng::new(seed);
        let base = *rng.pick(&seeds);
        let input = mutate_text(&mut rng, base, Syntax::Toml, &vocab, &donors);
        match Scene::from_toml_str(&lossy(&input), FILE) {
            Ok(scene) => scene_invariants(&scene)
                .map(|()| true)
                .map_err(|m| fail(seed, &input, m)),
            Err(e) => named(&e, &[FILE])
                .map(|()| false)
                .map_err(|m| fail(seed, &input, m)),
        }
    });
    assert!(accepted >= n as usize / 50, "only {accepted} scenes loaded");
}

// ---- robot.toml + URDF --------------------------------------------------------------------------

/// Every `name="value"` in XML text: the attribute's name and the byte range of its value.
fn attributes(xml: &str) -> Vec<(&str, usize, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = xml[from..].find("=\"") {
        let start = from + i + 2;
        let Some(len) = xml[start..].find('"') else {
            break;
        };
        let name_start = xml[..start - 2]
            .rfind(|c: char| c.is_whitespace())
            .map_or(0, |k| k + 1);
        out.push((&xml[name_start..start - 2], start, start + len));
        from = start + len + 1;
    }
    out
}

/// Damages a URDF: joints re-pointed at other links (loops, a link with two parents, none with
/// none), attribute values replaced (hostile numbers, wrong arity, another element's name),
/// attributes dropped or doubled, lines (mostly whole elements) dropped, doubled or swapped,
/// unknown or deeply nested elements inserted; then, for a share, byte damage.
fn mutate_urdf(
    rng: &mut Rng,
    seed: &str,
    links: &[String],
    names: &[String],
    donors: &[&[u8]],
) -> Vec<u8> {
    let roll = rng.below(100);
    if roll < 4 {
        return arbitrary_bytes(rng);
    }
    let mut text = seed.to_owned();
    for _ in 0..rng.few(4) {
        let spans: Vec<(usize, usize)> = attributes(&text).iter().map(|a| (a.1, a.2)).collect();
        let link_refs: Vec<(usize, usize)> = attributes(&text)
            .iter()
            .filter(|a| a.0 == "link")
            .map(|a| (a.1, a.2))
            .collect();
        if spans.is_empty() {
            break;
        }
        let (s, e) = *rng.pick(&spans);
        match rng.below(12) {
            0..=2 if !link_refs.is_empty() => {
                let (s, e) = *rng.pick(&link_refs);
                let v = rng.pick(links).clone();
                text.replace_range(s..e, &v);
            }
            0..=3 => {
                let v = rng.pick(names).clone();
                text.replace_range(s..e, &v);
            }
            4..=6 => {
                let n = rng.pick(&[1usize, 2, 3, 3, 3, 4]);
                let nums: Vec<String> = (0..*n)
                    .map(|_| {
                        if rng.chance(1, 2) {
                            format!("{}", rng.pick(HOSTILE_FLOATS))
                        } else {
                            format!("{}", (rng.unit() - 0.5) * 4.0)
                        }
                    })
                    .collect();
                text.replace_range(s..e, &nums.join(" "));
            }
            7..=9 => {
                let v = random_string(rng, names).replace('"', "&quot;");
                text.replace_range(s..e, &v);
            }
            10 => {
                // Drop the attribute: back to the space before its name.
                let name_start = text[..s - 2].rfind(' ').unwrap_or(s - 2);
                text.replace_range(name_start..=e, "");
            }
            _ => {
                // Double it (a repeated attribute is an XML error).
                let name_start = text[..s - 2].rfind(' ').unwrap_or(s - 2);
                let attr = text[name_start..=e].to_owned();
                text.insert_str(e + 1, &attr);
            }
        }
    }
    if (50..80).contains(&roll) {
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        for _ in 0..rng.few(4) {
            let n = lines.len().max(1);
            let i = rng.below(n).min(lines.len());
            match rng.below(6) {
                0 if !lines.is_empty() => {
                    lines.remove(i);
                }
                1 if !lines.is_empty() => {
                    let l = lines[i].clone();
                    lines.insert(rng.below(n), l);
                }
                2 if !lines.is_empty() => lines.swap(i, rng.below(n)),
                3 => {
                    let depth = 1 << rng.below(16);
                    let closed = rng.chance(3, 4);
                    let tail = if closed { "</a>".repeat(depth) } else { String::new() };
                    lines.insert(i, format!("{}{tail}", "<a>".repeat(depth)));
                }
                4 => lines.insert(
                    i,
                    rng.pick(&[
                        "<unknown x=\"1\"/>",
                        "<joint name=\"j\" type=\"fixed\"><parent link=\"link_base\"/><child link=\"link_base\"/></joint>",
                        "<link name=\"\"/>",
                        "<![CDATA[<robot>]]>",
                        "<!-- -->",
                        "&amp;&#0;&bogus;",
                        "<?xml version=\"1.0\"?>",
                        "</robot>",
                        "<robot name=\"x\">",
                    ])
                    .to_string(),
                ),
                _ => {}
            }
        }
        text = lines.join("\n");
    }
    let mut bytes = text.into_bytes();
    if roll >= 75 {
        mutate_bytes(rng, &mut bytes, donors);
    }
    bytes
}

/// What a loaded robot promises planning and safety: finite limits around the home pose, and
/// finite kinematics there.
fn robot_invariants(m: &RobotModel) -> Result<(), String> {
    for l in m.joint_limits() {
        check(
            l.lower.is_finite() && l.upper.is_finite() && l.lower < l.upper && l.velocity > 0.0,
            || format!("joint limit {l:?}"),
        )?;
    }
    m.check_limits(m.home())
        .map_err(|e| format!("home outside the limits: {e}"))?;
    let tip = m.fk(m.home()).map_err(|e| format!("fk(home): {e}"))?;
    check(finite_iso(&tip), || format!("fk(home) = {tip:?}"))?;
    check(finite_iso(&m.tip_from_flange()), || {
        format!("tip_from_flange = {:?}", m.tip_from_flange())
    })?;
    let j = m.jacobian(m.home()).map_err(|e| format!("jacobian: {e}"))?;
    check(j.iter().all(|v| v.is_finite()), || format!("jacobian {j}"))?;
    let poses = m
        .link_poses(m.home(), 0.5)
        .map_err(|e| format!("link poses: {e}"))?;
    for (link, pose) in poses {
        check(finite_iso(&pose), || format!("link `{link}` at {pose:?}"))?;
    }
    Ok(())
}

#[test]
fn robot_toml_and_urdf() {
    const TOML_FILE: &str = "fuzz/robot.toml";
    const URDF_FILE: &str = "fuzz/robot.urdf";
    let tmp = TempDir::new("fuzz-robot");
    let toml_vocab: Vec<String> = {
        let mut v: Vec<String> = BUILTIN_ROBOTS
            .iter()
            .flat_map(|(_, t, _)| vocabulary(&parse_tree(t, Syntax::Toml)))
            .collect();
        v.extend(["robot.urdf", "../robot.urdf", "/", ""].map(String::from));
        v
    };
    // Attribute values of both URDFs (names and numbers), and the link names among them.
    let urdf_values = |only_links: bool| {
        let mut v: Vec<String> = BUILTIN_ROBOTS
            .iter()
            .flat_map(|(_, _, u)| {
                attributes(u)
                    .into_iter()
                    .filter(|a| !only_links || a.0 == "link")
                    .map(|(_, s, e)| u[s..e].to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
        v.sort();
        v.dedup();
        v
    };
    let (urdf_names, urdf_links) = (urdf_values(false), urdf_values(true));
    let donors: Vec<&[u8]> = BUILTIN_ROBOTS
        .iter()
        .flat_map(|(_, t, u)| [t.as_bytes(), u.as_bytes()])
        .collect();
    // The URDF file names the seeds' robot.toml give, for the folder loader.
    let urdf_file_names: Vec<String> = BUILTIN_ROBOTS
        .iter()
        .map(|(_, t, _)| {
            let table: toml::Table = toml::from_str(t).expect("robot.toml");
            table["urdf"].as_str().expect("a URDF name").to_owned()
        })
        .collect();
    let n = cases(ROBOT_CASES);
    let accepted = run("robot_toml_and_urdf", n, case_seeds(), |seed| {
        let mut rng = Rng::new(seed);
        let (_, toml_seed, urdf_seed) = *rng.pick(BUILTIN_ROBOTS);
        // Now and then the other robot's URDF: valid files that do not belong together.
        let urdf_seed = if rng.chance(1, 20) {
            rng.pick(BUILTIN_ROBOTS).2
        } else {
            urdf_seed
        };
        let (mut toml_bytes, mut urdf_bytes) =
            (toml_seed.as_bytes().to_vec(), urdf_seed.as_bytes().to_vec());
        let which = rng.below(20);
        if which < 10 || which == 19 {
            toml_bytes = mutate_text(&mut rng, toml_seed, Syntax::Toml, &toml_vocab, &donors);
        }
        if which >= 9 {
            urdf_bytes = mutate_urdf(&mut rng, urdf_seed, &urdf_links, &urdf_names, &donors);
        }
        let input = [&toml_bytes[..], b"\n----\n", &urdf_bytes[..]].concat();
        let result = if rng.chance(1, 10) {
            // Through the folder loader: robot.toml names its URDF file.
            let toml_path = tmp.join("robot.toml");
            rewrite(&toml_path, &toml_bytes);
            for name in &urdf_file_names {
                rewrite(&tmp.join(name), &urdf_bytes);
            }
            let dir = tmp.path().display().to_string();
            RobotModel::load_dir(tmp.path()).map_err(|e| named(&e, &[&dir]))
        } else {
            RobotModel::from_strs(
                &lossy(&toml_bytes),
                TOML_FILE,
                &lossy(&urdf_bytes),
                URDF_FILE,
            )
            .map_err(|e| named(&e, &[TOML_FILE, URDF_FILE]))
        };
        match result {
            Ok(model) => robot_invariants(&model)
                .map(|()| true)
                .map_err(|m| fail(seed, &input, m)),
            Err(named) => named.map(|()| false).map_err(|m| fail(seed, &input, m)),
        }
    });
    assert!(accepted >= n as usize / 50, "only {accepted} robots loaded");
}

// ---- calibration TOML ---------------------------------------------------------------------------

fn intrinsics_invariants(k: &Intrinsics) -> Result<(), String> {
    check(k.validate().is_ok() && k.width > 0 && k.height > 0, || {
        format!("intrinsics {k:?}")
    })
}

fn extrinsics_invariants(e: &Extrinsics) -> Result<(), String> {
    check(
        !e.camera.trim().is_empty() && finite_iso(&e.base_from_camera),
        || format!("extrinsics {e:?}"),
    )
}

/// The example file, its quaternion spelling, and what the writer produces.
fn calibration_seeds() -> Vec<String> {
    let example = include_str!("../calibration/example.toml").to_owned();
    let quaternion = example
        .replace("rotation = [", "rotation_rows = [")
        .replace("# quaternion = ", "quaternion = ");
    // The rows are now an unknown key: drop them (five lines) so the quaternion is the rotation.
    let quaternion: String = {
        let mut skip = 0;
        let mut out = String::new();
        for line in quaternion.lines() {
            if line.starts_with("rotation_rows") {
                skip = 4;
                continue;
            }
            if skip > 0 {
                skip -= 1;
                continue;
            }
            out.push_str(line);
            out.push('\n');
        }
        out
    };
    let written = {
        let tmp = TempDir::new("fuzz-calibration-seed");
        let path = tmp.join("camera.toml");
        CameraCalibration {
            intrinsics: Intrinsics {
                model: Distortion::InverseBrownConrady,
                coeffs: [0.1, -0.02, 0.001, 0.0005, 0.003],
                ..Intrinsics::pinhole(1280, 720, 910.5, 909.25, 641.0, 359.5)
            },
            extrinsics: Extrinsics {
                camera: "wrist".into(),
                base_from_camera: Isometry3::new(
                    Vector3::new(0.3, -0.2, 0.8),
                    Vector3::new(2.0, -0.4, 0.7),
                ),
            },
        }
        .save(&path)
        .expect("write a calibration");
        std::fs::read_to_string(&path).expect("read it back")
    };
    for s in [&example, &quaternion, &written] {
        let p = Path::new("seed.toml");
        CameraCalibration::from_toml_str(s, p).expect("every calibration seed is valid");
    }
    vec![example, quaternion, written]
}

#[test]
fn calibration_toml() {
    const FILE: &str = "fuzz/calibration.toml";
    let seeds = calibration_seeds();
    let mut vocab: Vec<String> = seeds
        .iter()
        .flat_map(|s| vocabulary(&parse_tree(s, Syntax::Toml)))
        .collect();
    vocab.extend(
        [
            "none",
            "brown_conrady",
            "inverse_brown_conrady",
            "modified_brown_conrady",
            "w",
            "x",
        ]
        .map(String::from),
    );
    let donors: Vec<&[u8]> = seeds.iter().map(|s| s.as_bytes()).collect();
    let path = Path::new(FILE);
    let n = cases(CALIBRATION_CASES);
    let accepted = run("calibration_toml", n, case_seeds(), |seed| {
        let mut rng = Rng::new(seed);
        let base = rng.below(seeds.len());
        let input = mutate_text(&mut rng, &seeds[base], Syntax::Toml, &vocab, &donors);
        let text = lossy(&input);
        let f = |m: String| fail(seed, &input, m);
        let intrinsics = Intrinsics::from_toml_str(&text, path);
        let extrinsics = Extrinsics::from_toml_str(&text, path);
        let both = CameraCalibration::from_toml_str(&text, path);
        match &intrinsics {
            Ok(k) => intrinsics_invariants(k).map_err(f)?,
            Err(e) => named(e, &[FILE]).map_err(f)?,
        }
        match &extrinsics {
            Ok(x) => extrinsics_invariants(x).map_err(f)?,
            Err(e) => named(e, &[FILE]).map_err(f)?,
        }
        match &both {
            Ok(c) => {
                // The whole file is accepted exactly when both of its tables are.
                check(
                    intrinsics.as_ref().ok() == Some(&c.intrinsics)
                        && extrinsics.as_ref().ok() == Some(&c.extrinsics),
                    || "CameraCalibration accepted what a table loader refused".into(),
                )
                .map_err(f)?;
                Ok(true)
            }
            Err(e) => {
                named(e, &[FILE]).map_err(f)?;
                check(intrinsics.is_err() || extrinsics.is_err(), || {
                    format!("both tables load, the file does not: {e}")
                })
                .map_err(f)?;
                Ok(false)
            }
        }
    });
    assert!(
        accepted >= n as usize / 20,
        "only {accepted} calibrations loaded"
    );
}

// ---- safetensors header -------------------------------------------------------------------------

/// One tensor of a generated checkpoint.
#[derive(Clone)]
struct Tensor {
    name: String,
    dtype: String,
    shape: Vec<u64>,
    data: Vec<u8>,
}

/// Eight tensors of the tiny-model fixture (the six smallest and two 2-D ones), with their bytes:
/// a real header's names, dtypes and shapes in a checkpoint small enough to rewrite per case.
fn fixture_tensors() -> Vec<Tensor> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/qwen25vl_tiny/model.safetensors");
    let bytes = std::fs::read(&path).expect("the fixture checkpoint");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: serde_json::Map<String, Value> =
        serde_json::from_slice(&bytes[8..8 + n]).expect("the fixture header");
    let data = &bytes[8 + n..];
    let mut tensors: Vec<Tensor> = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(k, v)| {
            let [a, b] = [0, 1].map(|i| v["data_offsets"][i].as_u64().expect("offset") as usize);
            Tensor {
                name: k.clone(),
                dtype: v["dtype"].as_str().expect("dtype").to_owned(),
                shape: v["shape"]
                    .as_array()
                    .expect("shape")
                    .iter()
                    .map(|d| d.as_u64().expect("dim"))
                    .collect(),
                data: data[a..b].to_vec(),
            }
        })
        .collect();
    tensors.sort_by_key(|t| (t.data.len(), t.name.clone()));
    let mut picked: Vec<Tensor> = tensors.iter().take(6).cloned().collect();
    // And two 2-D ones, the shapes that matter.
    picked.extend(
        tensors
            .iter()
            .filter(|t| t.shape.len() == 2)
            .take(2)
            .cloned(),
    );
    picked
}

/// A safetensors file: 8-byte length, JSON header, data; offsets relative to the data.
fn pack(tensors: &[Tensor]) -> (Value, Vec<u8>) {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut data = Vec::new();
    for t in tensors {
        let a = data.len();
        data.extend_from_slice(&t.data);
        header.insert(
            t.name.clone(),
            json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [a, data.len()]}),
        );
    }
    (Value::Object(header), data)
}

const DTYPES: &[&str] = &[
    "BF16", "F16", "F32", "F64", "I64", "I32", "U32", "U8", "I8", "I16", "U16", "BOOL", "F8_E4M3",
    "C64", "bf16", "",
];

/// Names of the other layouts and of nothing at all (`NameScheme` detection and mapping).
fn renamed(rng: &mut Rng, name: &str) -> String {
    let tail = name
        .strip_prefix("model.")
        .or_else(|| name.strip_prefix("visual."))
        .unwrap_or(name);
    match rng.below(9) {
        0 => format!("language_model.model.{tail}"),
        1 => format!("vision_tower.{tail}"),
        2 => format!("model.language_model.{tail}"),
        3 => format!("model.visual.{tail}"),
        4 => format!("{name}.scales"),
        5 => "lm_head.weight".into(),
        6 => "language_model.lm_head.weight".into(),
        7 => "__metadata__".into(),
        _ => random_string(rng, &[]),
    }
}

/// Header damage that knows the format: offsets, shapes and dtypes at the edges.
fn mutate_header(rng: &mut Rng, header: &mut Value, data_len: u64) {
    let Value::Object(map) = header else {
        return;
    };
    let names: Vec<String> = map
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    if names.is_empty() {
        return;
    }
    let name = rng.pick(&names).clone();
    let info = &mut map[&name];
    let [a, b] = [0, 1].map(|i| info["data_offsets"][i].as_u64().unwrap_or(0));
    match rng.below(5) {
        0 => {
            let big = u64::MAX;
            let half = 1u64 << 63;
            let offsets = *rng.pick(&[
                [0, big],
                [big - 10, big],
                [big - (b - a), big],
                [half, half + (b - a)],
                [b, a],
                [a, b + 1],
                [a + 1, b + 1],
                [a, data_len + 1],
                [data_len, data_len + (b - a)],
                [0, 0],
            ]);
            info["data_offsets"] = json!(offsets);
            if rng.chance(1, 4) {
                let malformed = ["[-1, 2]", "[0]", "[0, 1, 2]", "[1.5, 2]"];
                info["data_offsets"] = raw(malformed[rng.below(malformed.len())]);
            }
        }
        1 => {
            // Shapes whose byte size overflows, is zero, or does not match.
            let len = b.saturating_sub(a);
            let shapes: Vec<Value> = vec![
                json!([u64::MAX]),
                json!([1u64 << 32, 1u64 << 32]),
                json!([(1u64 << 63) + len / 2]),
                json!([(1u64 << 62) + len / 4]),
                json!([(1u64 << 63), 2]),
                json!([u64::MAX, 0]),
                json!([]),
                json!([0]),
                json!([len + 1]),
                raw("[-1]"),
                raw("[1.5]"),
                raw("[18446744073709551616]"),
            ];
            info["shape"] = rng.pick(&shapes).clone();
        }
        2 => info["dtype"] = json!(rng.pick(DTYPES)),
        3 => {
            let v = map.remove(&name).expect("the tensor");
            map.insert(renamed(rng, &name), v);
        }
        _ => {
            map.insert(
                "__metadata__".into(),
                rng.pick(&[
                    json!(1),
                    json!([1, 2]),
                    json!({"format": {"x": []}}),
                    Value::Null,
                ])
                .clone(),
            );
        }
    }
}

/// One shard's bytes, damaged or not: returns the file and a description for failures.
fn shard_bytes(rng: &mut Rng, tensors: &[Tensor], donors: &[&[u8]]) -> Vec<u8> {
    let (mut header, mut data) = pack(tensors);
    let vocab: Vec<String> = tensors
        .iter()
        .map(|t| t.name.clone())
        .chain(DTYPES.iter().map(|d| d.to_string()))
        .chain(["dtype", "shape", "data_offsets", "__metadata__"].map(String::from))
        .collect();
    let roll = rng.below(100);
    if roll < 3 {
        return arbitrary_bytes(rng);
    }
    if (15..55).contains(&roll) {
        for _ in 0..rng.few(3) {
            mutate_header(rng, &mut header, data.len() as u64);
        }
    } else if (55..70).contains(&roll) {
        common::fuzz::mutate_tree(rng, &mut header, Syntax::Json, &vocab);
    }
    let mut text = render(&header, Syntax::Json)
        .unwrap_or_default()
        .into_bytes();
    if rng.chance(1, 10) {
        // Safetensors pads headers with spaces.
        text.extend(std::iter::repeat_n(b' ', rng.below(9)));
    }
    if (70..85).contains(&roll) {
        mutate_bytes(rng, &mut text, donors);
    }
    let real = text.len() as u64;
    let len = if (85..92).contains(&roll) {
        *rng.pick(&[
            0,
            1,
            real - 1,
            real + 1,
            real + 8,
            1 << 63,
            u64::MAX,
            100_000_000,
            100_000_001,
            u64::MAX - 7,
        ])
    } else {
        real
    };
    if (92..97).contains(&roll) {
        let keep = rng.below(data.len() + 1);
        data.truncate(keep);
    } else if roll >= 97 {
        let extra = rng.few(9);
        data.extend(rng.bytes(extra));
    }
    let mut file = len.to_le_bytes().to_vec();
    file.extend(text);
    file.extend(data);
    if rng.chance(1, 50) {
        let keep = rng.below(9);
        file.truncate(keep);
    }
    file
}

#[test]
fn safetensors_header() {
    let tmp = TempDir::new("fuzz-safetensors");
    let tensors = fixture_tensors();
    let paths = [
        tmp.join("model-00001-of-00002.safetensors"),
        tmp.join("model-00002-of-00002.safetensors"),
    ];
    let dir = tmp.path().display().to_string();
    let seed_file = {
        let (header, data) = pack(&tensors);
        let text = serde_json::to_vec(&header).expect("header");
        [&(text.len() as u64).to_le_bytes()[..], &text, &data].concat()
    };
    let donors: Vec<&[u8]> = vec![&seed_file];
    let n = cases(SAFETENSORS_CASES);
    let accepted = run("safetensors_header", n, case_seeds(), |seed| {
        let mut rng = Rng::new(seed);
        // One file, or two shards (a tensor now and then in both).
        let files: Vec<Vec<Tensor>> = if rng.chance(1, 4) {
            let mut a = Vec::new();
            let mut b = Vec::new();
            for t in &tensors {
                match rng.below(12) {
                    0 => {
                        a.push(t.clone());
                        b.push(t.clone());
                    }
                    1..=5 => a.push(t.clone()),
                    _ => b.push(t.clone()),
                }
            }
            vec![a, b]
        } else {
            vec![tensors.clone()]
        };
        let contents: Vec<Vec<u8>> = files
            .iter()
            .map(|ts| shard_bytes(&mut rng, ts, &donors))
            .collect();
        for (p, c) in paths.iter().zip(&contents) {
            rewrite(p, c);
        }
        let input = contents.concat();
        let f = |m: String| fail(seed, &input, m);
        match SafetensorsReader::open(&paths[..contents.len()]) {
            Ok(reader) => {
                // Every tensor it lists can be read, with the shape it reports.
                for name in reader.names() {
                    let shape = reader.shape(name).map(<[usize]>::to_vec);
                    let t = reader
                        .read(name, DType::F32, &Device::Cpu)
                        .map_err(|e| f(format!("`{name}` listed but unreadable: {e}")))?;
                    check(Some(t.dims().to_vec()) == shape, || {
                        format!("`{name}`: read {:?}, listed {shape:?}", t.dims())
                    })
                    .map_err(f)?;
                }
                Ok(true)
            }
            Err(e) => named(&e, &[&dir]).map(|()| false).map_err(f),
        }
    });
    assert!(
        accepted >= n as usize / 10,
        "only {accepted} checkpoints opened"
    );
}

// ---- safetensors index --------------------------------------------------------------------------

#[test]
fn safetensors_index() {
    let tmp = TempDir::new("fuzz-index");
    let index = tmp.join("model.safetensors.index.json");
    let shards = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    for s in shards {
        std::fs::write(tmp.join(s), b"").expect("a shard file");
    }
    let tensors = fixture_tensors();
    let seed_text = serde_json::to_string_pretty(&json!({
        "metadata": {"total_size": 123456},
        "weight_map": tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), json!(shards[i % 2])))
            .collect::<serde_json::Map<String, Value>>(),
    }))
    .expect("index JSON");
    let mut vocab = vocabulary(&parse_tree(&seed_text, Syntax::Json));
    vocab.extend(
        [
            "../model-00001-of-00002.safetensors",
            "/etc/hostname",
            "sub/model.safetensors",
            "model.safetensors",
            "x".repeat(300).as_str(),
            "missing.safetensors",
        ]
        .map(String::from),
    );
    let donors: Vec<&[u8]> = vec![seed_text.as_bytes()];
    let dir = tmp.path().display().to_string();
    let n = cases(INDEX_CASES);
    let accepted = run("safetensors_index", n, case_seeds(), |seed| {
        let mut rng = Rng::new(seed);
        let input = mutate_text(&mut rng, &seed_text, Syntax::Json, &vocab, &donors);
        rewrite(&index, &input);
        let f = |m: String| fail(seed, &input, m);
        let names = shard_names(&index);
        let files = weight_files(tmp.path());
        match (&names, &files) {
            (Ok(names), Ok((paths, Some(idx)))) => {
                check(idx == &index, || format!("index {idx:?}")).map_err(f)?;
                check(
                    names.windows(2).all(|w| w[0] < w[1]) && !names.is_empty(),
                    || format!("shard names not sorted and distinct: {names:?}"),
                )
                .map_err(f)?;
                for (name, p) in names.iter().zip(paths) {
                    check(
                        !name.contains('/')
                            && !matches!(name.as_str(), "" | "." | "..")
                            && p.parent() == Some(tmp.path())
                            && p.is_file(),
                        || format!("shard {name:?} at {p:?}"),
                    )
                    .map_err(f)?;
                }
                check(names.len() == paths.len(), || "count".into()).map_err(f)?;
                Ok(true)
            }
            (Ok(_), Ok((_, None))) => Err(f("an index folder read as one file".into())),
            (Ok(_), Err(e)) => named(e, &[&dir]).map(|()| false).map_err(f),
            (Err(e), files) => {
                named(e, &[&dir]).map_err(f)?;
                check(files.is_err(), || {
                    "weight_files accepted a bad index".into()
                })
                .map_err(f)?;
                Ok(false)
            }
        }
    });
    assert!(accepted >= n as usize / 10, "only {accepted} indexes read");
}

// ---- replay folder ------------------------------------------------------------------------------

/// A small frame like a recording's: gradient colour, depth with holes, a distortion model.
fn seed_frame() -> Frame {
    let (w, h) = (8usize, 6usize);
    let base_from_camera = camera_look_at(
        Point3::new(0.9, 0.05, 0.6),
        Point3::new(0.4, 0.0, 0.0),
        Vector3::z(),
    )
    .expect("a camera pose");
    let mut data: Vec<f32> = (0..w * h).map(|i| 0.5 + i as f32 * 0.01).collect();
    data[3] = 0.0;
    data[10] = f32::NAN;
    Frame {
        rgb: RgbImage::from_fn(w as u32, h as u32, |u, v| {
            image::Rgb([(u * 30) as u8, (v * 40) as u8, ((u + v) * 9) as u8])
        }),
        depth: DepthImage {
            width: w,
            height: h,
            data,
        },
        intrinsics: Intrinsics {
            model: Distortion::BrownConrady,
            coeffs: [0.1, -0.02, 0.0, 0.0, 0.001],
            ..Intrinsics::pinhole(w, h, 7.0, 7.1, 3.6, 2.4)
        },
        base_from_camera,
        stamp_s: 3.25,
    }
}

/// A PNG of `color` and size, random pixels.
fn encode_png(rng: &mut Rng, color: image::ExtendedColorType, w: u32, h: u32) -> Vec<u8> {
    use image::ImageEncoder;
    let bytes_per_pixel = color.bits_per_pixel() as usize / 8;
    let pixels = rng.bytes(w as usize * h as usize * bytes_per_pixel);
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(&pixels, w, h, color)
        .map(|()| out)
        .unwrap_or_default()
}

/// The PNG's chunks as (start, end) byte ranges (length, type, data, CRC), as far as they parse.
fn png_chunks(png: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = 8;
    while at + 12 <= png.len() {
        let len = u32::from_be_bytes(png[at..at + 4].try_into().expect("4 bytes")) as usize;
        let end = at.saturating_add(12).saturating_add(len);
        if end > png.len() {
            break;
        }
        out.push((at, end));
        at = end;
    }
    out
}

/// A damaged version of `seed` (a valid PNG of `size` and colour `expected`): another colour
/// type or size re-encoded validly, an IHDR rewritten (size, bit depth, colour type, interlace)
/// with its CRC fixed or not, chunks dropped, doubled or cut, or byte damage.
fn mutate_png(
    rng: &mut Rng,
    seed: &[u8],
    expected: image::ExtendedColorType,
    (w, h): (u32, u32),
    donors: &[&[u8]],
) -> Vec<u8> {
    use image::ExtendedColorType as C;
    let roll = rng.below(100);
    if roll < 3 {
        return arbitrary_bytes(rng);
    }
    if roll < 35 {
        let color = if rng.chance(1, 2) {
            expected
        } else {
            *rng.pick(&[
                C::Rgb8,
                C::Rgba8,
                C::L8,
                C::L16,
                C::La8,
                C::La16,
                C::Rgb16,
                C::Rgba16,
            ])
        };
        let (pw, ph) = match rng.below(5) {
            0 | 1 => (w, h),
            2 => (h, w),
            3 => (w + 1, h),
            _ => (1 + rng.below(12) as u32, 1 + rng.below(12) as u32),
        };
        return encode_png(rng, color, pw, ph);
    }
    let mut png = seed.to_vec();
    if roll < 60 && png.len() >= 33 {
        let field = rng.below(6);
        match field {
            0 | 1 => {
                let v = *rng.pick(&[
                    0u32,
                    1,
                    w + 1,
                    h + 1,
                    65_535,
                    1 << 20,
                    i32::MAX as u32,
                    u32::MAX,
                ]);
                let at = 16 + 4 * field;
                png[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
            2 => png[24] = *rng.pick(&[0u8, 1, 2, 4, 8, 16, 3, 255]),
            3 => png[25] = *rng.pick(&[0u8, 2, 3, 4, 6, 1, 5, 7]),
            4 => png[28] = *rng.pick(&[0u8, 1, 2]),
            _ => png[26 + rng.below(2)] = 1,
        }
        if rng.chance(4, 5) {
            let crc = crc32(&png[12..29]);
            png[29..33].copy_from_slice(&crc.to_be_bytes());
        }
        return png;
    }
    if roll < 75 {
        let chunks = png_chunks(&png);
        if !chunks.is_empty() {
            let (s, e) = *rng.pick(&chunks);
            match rng.below(4) {
                0 => {
                    png.drain(s..e);
                }
                1 => {
                    let c = png[s..e].to_vec();
                    png.splice(s..s, c);
                }
                2 => png.truncate(s + rng.below(e - s)),
                _ => png[e - 1] ^= 0x55,
            }
        }
        return png;
    }
    mutate_bytes(rng, &mut png, donors);
    png
}

fn frame_invariants(f: &Frame) -> Result<(), String> {
    let (w, h) = (f.rgb.width() as usize, f.rgb.height() as usize);
    check(
        (f.depth.width, f.depth.height) == (w, h)
            && f.depth.data.len() == w * h
            && (f.intrinsics.width, f.intrinsics.height) == (w, h),
        || {
            format!(
                "sizes differ: rgb {w}x{h}, depth {}x{}",
                f.depth.width, f.depth.height
            )
        },
    )?;
    check(
        f.depth.data.iter().all(|d| d.is_finite() && *d >= 0.0),
        || "depth not finite and non-negative".into(),
    )?;
    intrinsics_invariants(&f.intrinsics)?;
    check(
        f.stamp_s.is_finite() && finite_iso(&f.base_from_camera),
        || format!("stamp {} / pose {:?}", f.stamp_s, f.base_from_camera),
    )
}

#[test]
fn replay_folder() {
    use image::ExtendedColorType as C;
    let tmp = TempDir::new("fuzz-replay");
    let frame_dir = tmp.join("0000");
    let seed = seed_frame();
    write_frame(&seed, &frame_dir).expect("write the seed frame");
    let names = ["rgb.png", "depth.png", "camera.toml", "frame.toml"];
    let seeds: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(frame_dir.join(n)).expect("a seed file"))
        .collect();
    read_frame(&frame_dir).expect("the seed frame reads back");
    let size = (seed.rgb.width(), seed.rgb.height());
    let toml_seeds: Vec<String> = seeds[2..].iter().map(|b| lossy(b)).collect();
    let vocab: Vec<String> = toml_seeds
        .iter()
        .flat_map(|s| vocabulary(&parse_tree(s, Syntax::Toml)))
        .collect();
    let donors: Vec<&[u8]> = seeds.iter().map(Vec::as_slice).collect();
    // What is on disk now, so unchanged files are not rewritten (`None`: deleted).
    let on_disk: std::cell::RefCell<HashMap<&str, Option<Vec<u8>>>> = std::cell::RefCell::new(
        names
            .iter()
            .zip(&seeds)
            .map(|(n, s)| (*n, Some(s.clone())))
            .collect(),
    );
    let root = tmp.path().display().to_string();
    let n = cases(REPLAY_CASES);
    let accepted = run("replay_folder", n, case_seeds(), |case_seed| {
        let mut rng = Rng::new(case_seed);
        let mut contents: Vec<Option<Vec<u8>>> = seeds.iter().cloned().map(Some).collect();
        // Damage one file, sometimes more; leave a share of cases whole.
        if !rng.chance(1, 10) {
            for _ in 0..rng.few(3) {
                let i = rng.below(4);
                contents[i] = if rng.chance(1, 30) {
                    None
                } else {
                    Some(match i {
                        0 => mutate_png(&mut rng, &seeds[0], C::Rgb8, size, &donors),
                        1 => mutate_png(&mut rng, &seeds[1], C::L16, size, &donors),
                        _ => {
                            mutate_text(&mut rng, &toml_seeds[i - 2], Syntax::Toml, &vocab, &donors)
                        }
                    })
                };
            }
        }
        {
            let mut disk = on_disk.borrow_mut();
            for (name, c) in names.iter().zip(&contents) {
                if disk[name] != *c {
                    let p = frame_dir.join(name);
                    match c {
                        Some(bytes) => rewrite(&p, bytes),
                        None => std::fs::remove_file(&p).expect("remove a frame file"),
                    }
                    disk.insert(name, c.clone());
                }
            }
        }
        let mut input = Vec::new();
        for (name, c) in names.iter().zip(&contents) {
            input.extend_from_slice(format!("\n== {name}\n").as_bytes());
            input.extend_from_slice(c.as_deref().unwrap_or(b"(missing)"));
        }
        let f = |m: String| fail(case_seed, &input, m);
        let result = if rng.chance(1, 10) {
            ReplayCamera::open(tmp.path()).and_then(|mut cam| cam.capture())
        } else {
            read_frame(&frame_dir)
        };
        match result {
            Ok(frame) => frame_invariants(&frame).map(|()| true).map_err(f),
            Err(e) => named(&e, &[&root]).map(|()| false).map_err(f),
        }
    });
    assert!(accepted >= n as usize / 20, "only {accepted} frames read");
}

// ---- OpenAI replies -----------------------------------------------------------------------------

/// A chat completion whose content answers `ability` validly for a model image of `model` size.
fn completion(rng: &mut Rng, ability: Ability, model: ImageSize) -> String {
    let count = if ability == Ability::Vtg {
        8
    } else {
        1 + rng.below(4)
    };
    let points: Vec<String> = (0..count)
        .map(|_| {
            let x = (rng.unit() * f64::from(model.width)).floor();
            let y = (rng.unit() * f64::from(model.height)).floor();
            format!("[{x}, {y}]")
        })
        .collect();
    let answer = format!("<point>[{}]</point>", points.join(", "));
    let reasoning = "The object is on the left.";
    let message = match rng.below(3) {
        0 => {
            json!({"role": "assistant", "content": format!("<think>{reasoning}</think><answer>{answer}</answer>")})
        }
        1 => json!({"role": "assistant", "content": answer, "reasoning_content": reasoning}),
        _ => json!({"role": "assistant", "content": answer, "reasoning": null, "tool_calls": []}),
    };
    serde_json::to_string(&json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "IffYuan/Embodied-R1-3B-v1",
        "choices": [{"index": 0, "message": message, "finish_reason": rng.pick(&["stop", "length"])}],
        "usage": {"prompt_tokens": 812, "completion_tokens": 40, "total_tokens": 852},
    }))
    .expect("JSON")
}

#[test]
fn openai_reply() {
    const URL: &str = "http://fuzz.invalid:8000/v1/chat/completions";
    let vocab: Vec<String> = {
        let mut rng = Rng::new(0);
        let mut v = vocabulary(&parse_tree(
            &completion(&mut rng, Ability::Reg, ImageSize::new(100, 100)),
            Syntax::Json,
        ));
        v.extend(
            [
                "<think>",
                "</think>",
                "<point>[[1, 2]]</point>",
                "reasoning_content",
                "text",
                "type",
            ]
            .map(String::from),
        );
        v
    };
    let n = cases(OPENAI_CASES);
    let accepted = run("openai_reply", n, case_seeds(), |seed| {
        let mut rng = Rng::new(seed);
        let ability = *rng.pick(&Ability::ALL);
        let original = ImageSize::new(28 + rng.below(2000) as u32, 28 + rng.below(2000) as u32);
        let map = ModelImageMap::for_qwen25vl(original, DEFAULT_MIN_PIXELS, PRETRAINED_MAX_PIXELS)
            .expect("a frame of at least 28 px");
        let body = completion(&mut rng, ability, map.model());
        let input = match rng.below(40) {
            // A huge content string (the transport caps replies at 4 MiB).
            0 => {
                let mut tree: Value = serde_json::from_str(&body).expect("JSON");
                let unit = rng.pick(&["<point>[[1, 2]]</point>", "x", "[", "☕"]);
                tree["choices"][0]["message"]["content"] =
                    json!(unit.repeat(1 << (10 + rng.below(9))));
                serde_json::to_vec(&tree).expect("JSON")
            }
            // Content of another shape than a string.
            1..=3 => {
                let mut tree: Value = serde_json::from_str(&body).expect("JSON");
                let others = [
                    json!([{"type": "text", "text": "<point>[[1, 2]]</point>"}]),
                    Value::Null,
                    json!(42),
                    json!({"text": "x"}),
                    json!(true),
                ];
                tree["choices"][0]["message"]["content"] = rng.pick(&others).clone();
                serde_json::to_vec(&tree).expect("JSON")
            }
            _ => mutate_text(&mut rng, &body, Syntax::Json, &vocab, &[body.as_bytes()]),
        };
        let f = |m: String| fail(seed, &input, m);
        match parse_reply(URL, lossy(&input), ability, map) {
            Ok(p) => {
                let pts = p.points_px();
                check(!pts.is_empty(), || "no points".into()).map_err(f)?;
                check(ability != Ability::Vtg || pts.len() == 8, || {
                    format!("{} trace points", pts.len())
                })
                .map_err(f)?;
                for [x, y] in pts {
                    check(
                        (0.0..=f64::from(original.width)).contains(&x)
                            && (0.0..=f64::from(original.height)).contains(&y),
                        || format!("point ({x}, {y}) outside {original}"),
                    )
                    .map_err(f)?;
                }
                Ok(true)
            }
            Err(e) => {
                let names: &[&str] = match &e {
                    PointerError::Remote(_) => &[URL],
                    // The parser's message is about the answer text, which has no file.
                    _ => &[""],
                };
                named(&e, names).map(|()| false).map_err(f)
            }
        }
    });
    assert!(
        accepted >= n as usize / 10,
        "only {accepted} replies parsed"
    );
}

// ---- hand-eye samples ---------------------------------------------------------------------------

/// Samples as the recorder writes them (matrix rows), and the same poses as quaternions.
fn handeye_seeds() -> Vec<String> {
    let x = Isometry3::new(Vector3::new(0.9, 0.1, 0.6), Vector3::new(2.0, 0.3, -0.5));
    let y = common::handeye::gripper_from_target();
    let samples = common::handeye::tilted_samples(&x, &y, 4, 11, 5.0..40.0, |axis, angle| {
        UnitQuaternion::from_axis_angle(&axis, angle)
    });
    let rows = samples_to_json_string(&samples);
    let mut tree: Value = serde_json::from_str(&rows).expect("JSON");
    let quat = |q: &UnitQuaternion<f64>| json!({"w": q.w, "x": q.i, "y": q.j, "z": q.k});
    for (raw_sample, s) in tree["samples"]
        .as_array_mut()
        .expect("samples")
        .iter_mut()
        .zip(&samples)
    {
        for (key, iso) in [
            ("base_from_gripper", s.base_from_gripper),
            ("camera_from_target", s.camera_from_target),
        ] {
            let pose = raw_sample[key].as_object_mut().expect("a pose");
            pose.remove("rotation");
            pose.insert("quaternion".into(), quat(&iso.rotation));
        }
    }
    let quaternions = serde_json::to_string_pretty(&tree).expect("JSON");
    for s in [&rows, &quaternions] {
        samples_from_json_str(s, Path::new("seed.json")).expect("every samples seed is valid");
    }
    vec![rows, quaternions]
}

fn samples_invariants(samples: &[HandEyeSample]) -> Result<(), String> {
    for (i, s) in samples.iter().enumerate() {
        check(
            finite_iso(&s.base_from_gripper) && finite_iso(&s.camera_from_target),
            || format!("sample {i}: {s:?}"),
        )?;
    }
    Ok(())
}

#[test]
fn handeye_samples() {
    const FILE: &str = "fuzz/samples.json";
    let tmp = TempDir::new("fuzz-handeye");
    let on_disk = tmp.join("samples.json");
    let seeds = handeye_seeds();
    let mut vocab: Vec<String> = seeds
        .iter()
        .flat_map(|s| vocabulary(&parse_tree(s, Syntax::Json)))
        .collect();
    vocab.extend(HOSTILE_STRINGS.iter().map(|s| s.to_string()));
    let donors: Vec<&[u8]> = seeds.iter().map(|s| s.as_bytes()).collect();
    let disk = on_disk.display().to_string();
    let n = cases(HANDEYE_CASES);
    let accepted = run("handeye_samples", n, case_seeds(), |seed| {
        let mut rng = Rng::new(seed);
        let base = rng.below(seeds.len());
        let input = mutate_text(&mut rng, &seeds[base], Syntax::Json, &vocab, &donors);
        let f = |m: String| fail(seed, &input, m);
        // The file loader for a share (invalid UTF-8 is its error), the text parser for the rest.
        let (result, file): (Result<Vec<HandEyeSample>, CalibrateError>, &str) =
            if rng.chance(1, 10) {
                rewrite(&on_disk, &input);
                (load_samples(&on_disk), &disk)
            } else {
                (samples_from_json_str(&lossy(&input), Path::new(FILE)), FILE)
            };
        match result {
            Ok(samples) => samples_invariants(&samples).map(|()| true).map_err(f),
            Err(e) => named(&e, &[file]).map(|()| false).map_err(f),
        }
    });
    assert!(
        accepted >= n as usize / 20,
        "only {accepted} sample files loaded"
    );
}
