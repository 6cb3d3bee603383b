//! `bridge::wire` against openpi's own encoding, and on bad input.
//!
//! | test | checks |
//! | --- | --- |
//! | `openpi_observation_decodes_exactly` | openpi-client 0.1.2's `packb` of a SimplerEnv-like observation (640×480 RGB and depth, intrinsics, extrinsic, poses, qpos, every dtype, numpy scalars, nested maps) decodes to the same content (compared through the JSON description `tests/bridge_wire.py` prints: dtype, shape, CRC-32, first and last element of each array), re-encodes to the same bytes, and reads the same with str-keyed tags |
//! | `openpi_reads_our_action_byte_for_byte` | our encoding of an action is what openpi's `unpackb` reads as the action, byte-identical to openpi's `packb` of it |
//! | `openpi_golden_bytes` | the same without Python: frames openpi wrote, as hex |
//! | `shared_decode_copies_nothing` | `decode_shared` of a frame held in `Bytes` gives the same value as `decode`, with every array's and bin's data inside the frame's own buffer (views, not copies), still valid after the frame handle is dropped |
//! | the rest | round trips (every dtype, every value kind, bin and str keys) and every malformed input a typed error |
//! | `fuzz_*` | random bytes, byte-mutated and structure-mutated valid frames: never a panic; what is accepted re-encodes stably |
//!
//! The Python tests run `tests/bridge_wire.py` with `POINTACT_PYTHON` (see `super::common::python`; CI
//! installs `openpi-client==0.1.2` there). Fuzz cases: `POINTACT_FUZZ_CASES` (default
//! [`DEFAULT_CASES`]), e.g. `POINTACT_FUZZ_CASES=100000 cargo test --release --features realsense
//! --test bridge_wire fuzz`.

use std::time::Duration;

use super::common::fuzz::{self, arbitrary_bytes, case_seeds, crc32, excerpt, mutate_bytes, Rng};
use super::common::{python, TempDir};
use pointact::bridge::wire::{
    decode, decode_shared, decode_with, encode, Dtype, Limits, NdArray, NpScalar, Scalar, Value,
    WireError, MAX_DEPTH,
};
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value as Json};

const DEFAULT_CASES: u32 = 20_000;
const SCRIPT: &str = concat!(
    concat!(env!("CARGO_MANIFEST_DIR"), "/../.."),
    "/tests/bridge_wire.py"
);
/// Longest the script may run (it takes about a second).
const SCRIPT_LIMIT: Duration = Duration::from_secs(120);

fn openpi_python() -> Option<std::ffi::OsString> {
    python::interpreter(
        "openpi_client.msgpack_numpy",
        "openpi-client==0.1.2",
        "the openpi wire-format test",
    )
}

/// Runs the script and insists it succeeded.
fn script(python: &std::ffi::OsString, args: &[&str]) -> String {
    let run = python::run_script(python, SCRIPT, args, SCRIPT_LIMIT);
    match run.status {
        Some(s) if s.success() => run.stdout,
        Some(s) => panic!("bridge_wire.py {args:?} failed ({s})\n{}", run.transcript()),
        None => panic!(
            "bridge_wire.py {args:?} ran past {SCRIPT_LIMIT:?}\n{}",
            run.transcript()
        ),
    }
}

/// A float as `bridge_wire.py` describes it: the hex of its float64 bits (serde_json does not
/// round every decimal float correctly, so printed decimals would not compare exactly).
fn float_json(x: f64) -> Json {
    json!({ "f64": format!("{:016x}", x.to_bits()) })
}

/// An array element as JSON, as Python's `.item()` gives it.
fn element(a: &NdArray, i: usize) -> Json {
    let ints = |v: Vec<i64>| json!(v[i]);
    let uints = |v: Vec<u64>| json!(v[i]);
    let all = || a.cast_f64();
    match a.dtype() {
        Dtype::Bool => json!(a.as_bool().expect("bool")[i]),
        Dtype::U64 => uints(a.as_u64().expect("u64")),
        Dtype::I64 => ints(a.as_i64().expect("i64")),
        Dtype::U8 | Dtype::U16 | Dtype::U32 => json!(all()[i] as u64),
        Dtype::I8 | Dtype::I16 | Dtype::I32 => json!(all()[i] as i64),
        Dtype::F32 | Dtype::F64 => float_json(all()[i]),
    }
}

fn scalar_json(s: Scalar) -> Json {
    match s {
        Scalar::Bool(b) => json!(b),
        Scalar::Int(v) => json!(v),
        Scalar::UInt(v) => json!(v),
        Scalar::Float(v) => float_json(v),
    }
}

/// The description `bridge_wire.py` prints for the same content.
fn describe(v: &Value) -> Json {
    match v {
        Value::Nil => json!({ "nil": null }),
        Value::Bool(b) => json!({ "bool": b }),
        Value::Int(i) => json!({ "int": i }),
        Value::UInt(u) => json!({ "int": u }),
        Value::Float(f) => json!({ "float": format!("{:016x}", f.to_bits()) }),
        Value::Str(s) => json!({ "str": s }),
        Value::Bin(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            json!({ "bin": hex })
        }
        Value::Array(items) => json!({ "array": items.iter().map(describe).collect::<Vec<_>>() }),
        Value::Map(entries) => json!({
            "map": entries.iter().map(|(k, v)| json!([describe(k), describe(v)])).collect::<Vec<_>>()
        }),
        Value::NdArray(a) => {
            let mut d = json!({
                "ndarray": a.dtype().as_str(),
                "shape": a.shape(),
                "crc32": crc32(a.data()),
            });
            if !a.is_empty() {
                d["first"] = element(a, 0);
                d["last"] = element(a, a.len() - 1);
            }
            d
        }
        Value::NpScalar(s) => {
            json!({ "npgeneric": s.dtype().as_str(), "value": scalar_json(s.value()) })
        }
    }
}

fn at<'a>(v: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(v, |v, k| {
        v.get(k)
            .unwrap_or_else(|| panic!("no {k:?} on the way to {path:?}"))
    })
}

#[test]
fn openpi_observation_decodes_exactly() {
    let Some(python) = openpi_python() else {
        return;
    };
    let dir = TempDir::new("bridge-wire-obs");
    let dir_s = dir.path().to_str().expect("a UTF-8 temp path");
    let printed = script(&python, &["observation", dir_s]);
    let expected: Json = serde_json::from_str(printed.trim()).expect("the script's JSON");

    let bytes = std::fs::read(dir.join("obs.msgpack")).expect("obs.msgpack");
    let obs = decode(&bytes).expect("openpi's frame decodes");
    assert_eq!(describe(&obs), expected, "decoded content differs");

    // Typed reads of what a server uses.
    let cam = ["image", "3rd_view_camera"];
    let rgb = at(&obs, &[cam[0], cam[1], "rgb"])
        .as_ndarray()
        .expect("rgb");
    assert_eq!(rgb.shape(), &[480, 640, 3]);
    assert_eq!(rgb.as_u8().expect("u8 rgb").len(), 480 * 640 * 3);
    let depth = at(&obs, &[cam[0], cam[1], "depth"])
        .as_ndarray()
        .expect("depth");
    let d = depth.as_f32().expect("f32 depth");
    assert!(d.iter().all(|&z| (0.2..3.0).contains(&z)));
    let k = at(&obs, &[cam[0], cam[1], "intrinsic_cv"])
        .as_ndarray()
        .expect("intrinsics")
        .as_f64()
        .expect("f64 intrinsics");
    assert_eq!(k, [623.5, 0.0, 319.5, 0.0, 623.5, 239.5, 0.0, 0.0, 1.0]);
    let qpos = at(&obs, &["agent", "qpos"]).as_ndarray().expect("qpos");
    assert_eq!(qpos.cast_f64()[6], f64::from(0.037f32));
    assert_eq!(
        at(&obs, &["instruction"]).as_str(),
        Some("put carrot on plate")
    );
    assert_eq!(at(&obs, &["episode_id"]).as_i64(), Some(7));
    assert_eq!(at(&obs, &["beyond_i64"]), &Value::UInt((1 << 63) + 5));
    assert_eq!(at(&obs, &["scalars", "i64"]).as_i64(), Some(-7));
    assert_eq!(
        at(&obs, &["scalars", "f32"]).as_f64(),
        Some(f64::from(0.1f32))
    );
    assert_eq!(at(&obs, &["scalars", "bool"]).as_bool(), Some(true));
    assert_eq!(at(&obs, &["scalars", "f64"]), &Value::Float(1.5));
    let fortran = at(&obs, &["fortran"]).as_ndarray().expect("fortran");
    assert_eq!(fortran.as_i16().expect("i16"), [0, 1, 2, 3, 4, 5]);

    // Decoding keeps key types and order, so the frame re-encodes to openpi's very bytes.
    let again = encode(&obs).expect("encode");
    assert!(again == bytes, "re-encoding changed the frame");

    // The harness spelling (str-keyed tags) reads the same.
    let str_keys = std::fs::read(dir.join("obs_strkeys.msgpack")).expect("obs_strkeys.msgpack");
    assert_ne!(str_keys, bytes);
    let obs2 = decode(&str_keys).expect("the str-keyed frame decodes");
    assert_eq!(describe(&obs2), expected, "str-keyed content differs");
}

/// `bridge_wire.py action`'s action, built on our side.
fn action() -> Value {
    let f32s = [0.125f32, -0.25, 0.0625, 0.0, 0.5, -0.75, 1.0];
    let f64s = [0.0, -0.5, 0.25, 1.5, -1.25, 0.75, 0.037109375, -3.0];
    let frame: Vec<u8> = (0..12).collect();
    Value::map([
        ("actions", NdArray::from_f32(&[7], &f32s).expect("7").into()),
        (
            "joint_targets",
            NdArray::from_f64(&[8], &f64s).expect("8").into(),
        ),
        (
            "server_timing",
            Value::map([
                ("infer_ms", Value::Float(12.5)),
                ("prev_total_ms", Value::Float(30.25)),
            ]),
        ),
        (
            "control_mode",
            "arm_pd_ee_target_delta_pose_align2_gripper_pd_joint_pos".into(),
        ),
        ("terminate", false.into()),
        ("step", 3i64.into()),
        ("note", Value::Nil),
        (
            "gripper",
            NpScalar::new(Dtype::F32, Scalar::Float(1.0))
                .expect("f32")
                .into(),
        ),
        (
            "episode",
            NpScalar::new(Dtype::I64, Scalar::Int(7))
                .expect("i64")
                .into(),
        ),
        (
            "frame",
            NdArray::from_u8(&[2, 2, 3], &frame).expect("2x2x3").into(),
        ),
    ])
}

#[test]
fn openpi_reads_our_action_byte_for_byte() {
    let Some(python) = openpi_python() else {
        return;
    };
    let dir = TempDir::new("bridge-wire-action");
    let file = dir.join("action.msgpack");
    std::fs::write(&file, encode(&action()).expect("encode")).expect("write the action");
    let out = script(&python, &["action", file.to_str().expect("UTF-8 path")]);
    print!("{out}");
    assert!(out.contains("PASS: openpi's unpackb reads the Rust encoding as the action"));
    assert!(out.contains("PASS: the Rust encoding is byte-identical to openpi's packb"));
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Frames written by openpi-client 0.1.2 (msgpack 1.2.4, numpy 1.26.4): the format without
/// Python at hand.
#[test]
fn openpi_golden_bytes() {
    let cases: [(&str, Value); 5] = [
        // {"a": np.zeros((2,), np.float32)}
        (
            "81a16184c40b5f5f6e6461727261795f5fc3c40464617461c4080000000000000000c4056474797065a33c6634c40573686170659102",
            Value::map([("a", NdArray::from_f32(&[2], &[0.0, 0.0]).expect("2").into())]),
        ),
        // np.float32(1.5)
        (
            "83c40d5f5f6e7067656e657269635f5fc3c40464617461cb3ff8000000000000c4056474797065a33c6634",
            NpScalar::new(Dtype::F32, Scalar::Float(1.5)).expect("f32").into(),
        ),
        // np.int64(200)
        (
            "83c40d5f5f6e7067656e657269635f5fc3c40464617461ccc8c4056474797065a33c6938",
            NpScalar::new(Dtype::I64, Scalar::Int(200)).expect("i64").into(),
        ),
        // np.int8(-100)
        (
            "83c40d5f5f6e7067656e657269635f5fc3c40464617461d09cc4056474797065a37c6931",
            NpScalar::new(Dtype::I8, Scalar::Int(-100)).expect("i8").into(),
        ),
        // np.zeros((), np.float32): a 0-d array, shape ()
        (
            "84c40b5f5f6e6461727261795f5fc3c40464617461c40400000000c4056474797065a33c6634c405736861706590",
            NdArray::from_f32(&[], &[0.0]).expect("0-d").into(),
        ),
    ];
    for (hex, value) in cases {
        let bytes = unhex(hex);
        assert_eq!(
            encode(&value).expect("encode"),
            bytes,
            "encoding of {value:?}"
        );
        assert_eq!(decode(&bytes).expect("decode"), value, "decoding of {hex}");
    }
    // np.float64 is a Python float: openpi writes it untagged.
    assert_eq!(
        encode(&Value::Float(1.5)).expect("encode"),
        unhex("cb3ff8000000000000")
    );
}

#[test]
fn every_dtype_round_trips() {
    fn check<T: pointact::bridge::wire::Element + PartialEq + std::fmt::Debug>(
        values: &[T],
        view: impl Fn(&NdArray) -> Result<Vec<T>, WireError>,
    ) {
        let a = NdArray::from_slice(&[values.len()], values).expect("array");
        let back = decode(&encode(&a.clone().into()).expect("encode")).expect("decode");
        let b = back.as_ndarray().expect("an array comes back");
        assert_eq!(b, &a);
        assert_eq!(view(b).expect("typed view"), values);
        assert_eq!(b.cast_f64().len(), values.len());
        // A view of another dtype is refused, not converted.
        let other = if T::DTYPE == Dtype::F64 {
            b.as_f32().map(|_| ())
        } else {
            b.as_f64().map(|_| ())
        };
        assert_eq!(
            other,
            Err(WireError::DtypeMismatch {
                have: T::DTYPE,
                want: if T::DTYPE == Dtype::F64 {
                    Dtype::F32
                } else {
                    Dtype::F64
                }
            })
        );
    }
    check(&[true, false, true], NdArray::as_bool);
    check(&[0u8, 1, 255], NdArray::as_u8);
    check(&[i8::MIN, 0, i8::MAX], NdArray::as_i8);
    check(&[0u16, 1, u16::MAX], NdArray::as_u16);
    check(&[i16::MIN, -1, i16::MAX], NdArray::as_i16);
    check(&[0u32, 7, u32::MAX], NdArray::as_u32);
    check(&[i32::MIN, -7, i32::MAX], NdArray::as_i32);
    check(&[0u64, 7, u64::MAX], NdArray::as_u64);
    check(&[i64::MIN, -7, i64::MAX], NdArray::as_i64);
    check(&[f32::MIN, -0.0, 1.5, f32::MAX], NdArray::as_f32);
    check(&[f64::MIN, -0.0, 1e-300, f64::MAX], NdArray::as_f64);
    // Little-endian on the wire, whatever the host.
    let a = NdArray::from_u16(&[1], &[0x0102]).expect("u16");
    assert_eq!(a.data(), &[0x02, 0x01]);
    for d in Dtype::ALL {
        assert_eq!(Dtype::parse(d.as_str()), Ok(d));
    }
}

#[test]
fn shared_decode_copies_nothing() {
    let rgb: Vec<u8> = (0..64 * 48 * 3).map(|i| (i % 251) as u8).collect();
    let depth: Vec<f32> = (0..64 * 48).map(|i| i as f32 * 1e-3).collect();
    let frame = encode(&Value::map([
        (
            "rgb",
            Value::NdArray(NdArray::from_u8(&[48, 64, 3], &rgb).expect("rgb")),
        ),
        (
            "depth",
            Value::NdArray(NdArray::from_f32(&[48, 64], &depth).expect("depth")),
        ),
        ("blob", Value::Bin(vec![7u8; 300].into())),
    ]))
    .expect("encode");
    let copied = decode(&frame).expect("decode");
    let frame = bytes::Bytes::from(frame);
    let span = frame.as_ptr_range();
    let shared = decode_shared(&frame, &Limits::DEFAULT).expect("decode_shared");
    assert_eq!(shared, copied);
    let inside = |data: &[u8]| {
        let r = data.as_ptr_range();
        span.start <= r.start && r.end <= span.end
    };
    for key in ["rgb", "depth"] {
        let a = shared.get(key).and_then(Value::as_ndarray).expect(key);
        assert!(inside(a.data()), "{key}: decode_shared copied the data");
        let c = copied.get(key).and_then(Value::as_ndarray).expect(key);
        assert!(!inside(c.data()), "{key}: decode must own its data");
    }
    match shared.get("blob") {
        Some(Value::Bin(b)) => assert!(inside(b), "blob: decode_shared copied the bin"),
        other => panic!("blob decoded as {other:?}"),
    }
    // The views keep the buffer alive on their own.
    drop(frame);
    let rgb_back = shared.get("rgb").and_then(Value::as_ndarray).expect("rgb");
    assert_eq!(rgb_back.as_u8().expect("u8"), rgb);
}

#[test]
fn every_value_kind_round_trips() {
    let v = Value::Map(vec![
        (Value::Str("nil".into()), Value::Nil),
        (Value::Bin(b"bin key".to_vec().into()), Value::Bool(true)),
        (Value::Int(-1), Value::Int(i64::MIN)),
        (Value::Str("u".into()), Value::UInt(u64::MAX)),
        (Value::Str("f".into()), Value::Float(-2.5e-8)),
        (Value::Str("s".into()), Value::Str("é".repeat(200))),
        (Value::Str("b".into()), Value::Bin(vec![0; 70_000].into())),
        (
            Value::Str("a".into()),
            Value::Array((0..40).map(Value::Int).collect()),
        ),
        (
            Value::Str("big".into()),
            Value::Array(vec![Value::Nil; 70_000]),
        ),
        (
            Value::Str("nested".into()),
            Value::map((0..20).map(|i| (format!("k{i}"), Value::map([("x", Value::Int(i))])))),
        ),
        (
            Value::Str("arr".into()),
            NdArray::from_f32(&[2, 0], &[]).expect("empty").into(),
        ),
        (
            Value::Str("scalar".into()),
            NpScalar::new(Dtype::U64, Scalar::UInt(u64::MAX))
                .expect("u64")
                .into(),
        ),
    ]);
    let bytes = encode(&v).expect("encode");
    assert_eq!(decode(&bytes).expect("decode"), v);
    // Keys are found whether they came as str or bin.
    assert_eq!(v.get("bin key"), Some(&Value::Bool(true)));
    assert_eq!(v.get("nil"), Some(&Value::Nil));
    assert_eq!(v.get("absent"), None);
    assert_eq!(Value::Int(3).get("x"), None);
}

/// A tagged array map written by hand, keys as str or bin.
fn tagged(bin_keys: bool, fields: Vec<(&str, Value)>) -> Vec<u8> {
    let key = |k: &str| {
        if bin_keys {
            Value::Bin(k.as_bytes().to_vec().into())
        } else {
            Value::Str(k.into())
        }
    };
    encode(&Value::Map(
        fields.into_iter().map(|(k, v)| (key(k), v)).collect(),
    ))
    .expect("encode")
}

fn f32_fields(dtype: &str, shape: Vec<Value>, data: Vec<u8>) -> Vec<(&'static str, Value)> {
    vec![
        ("__ndarray__", Value::Bool(true)),
        ("data", Value::Bin(data.into())),
        ("dtype", Value::Str(dtype.into())),
        ("shape", Value::Array(shape)),
    ]
}

#[test]
fn str_and_bin_keyed_tags_both_decode() {
    let expected = NdArray::from_f32(&[2], &[1.0, -2.0]).expect("2");
    let data = expected.data().to_vec();
    for bin in [false, true] {
        let mut fields = f32_fields("<f4", vec![Value::Int(2)], data.clone());
        // Field order does not matter, nor do extra fields (openpi ignores them).
        fields.reverse();
        fields.push(("extra", Value::Nil));
        let v = decode(&tagged(bin, fields)).expect("decode");
        assert_eq!(v, Value::NdArray(expected.clone()), "bin keys: {bin}");
    }
    for bin in [false, true] {
        let frame = tagged(
            bin,
            vec![
                ("__npgeneric__", Value::Bool(true)),
                ("data", Value::Int(-3)),
                ("dtype", Value::Str("<i4".into())),
            ],
        );
        let v = decode(&frame).expect("decode");
        assert_eq!(
            v,
            Value::NpScalar(NpScalar::new(Dtype::I32, Scalar::Int(-3)).expect("i32"))
        );
    }
}

fn nested_arrays(depth: usize) -> Vec<u8> {
    let mut bytes = vec![0x91; depth]; // fixarray of one element, `depth` times
    bytes.push(0xc0);
    bytes
}

#[test]
fn malformed_frames_are_typed_errors() {
    let good = encode(&action()).expect("encode");
    // Every cut of a valid frame fails, and never panics.
    for n in 0..good.len() {
        assert!(decode(&good[..n]).is_err(), "a cut at {n} decoded");
    }
    assert!(matches!(
        decode(&good[..good.len() - 1]),
        Err(WireError::Truncated { .. })
    ));
    let mut extra = good.clone();
    extra.push(0xc0);
    assert_eq!(decode(&extra), Err(WireError::TrailingBytes { extra: 1 }));

    let data4 = vec![0u8; 4];
    let case = |fields: Vec<(&str, Value)>| decode(&tagged(true, fields));
    // Shape and data disagree.
    assert_eq!(
        case(f32_fields("<f4", vec![Value::Int(2)], data4.clone())),
        Err(WireError::DataLength {
            shape: vec![2],
            dtype: Dtype::F32,
            expected: 8,
            found: 4
        })
    );
    // A shape whose product overflows.
    let huge = vec![Value::Int(1 << 40); 3];
    assert!(matches!(
        case(f32_fields("<f4", huge, data4.clone())),
        Err(WireError::ShapeOverflow { .. })
    ));
    let huge = vec![Value::UInt(u64::MAX), Value::Int(2)];
    assert!(matches!(
        case(f32_fields("<f4", huge, data4.clone())),
        Err(WireError::ShapeOverflow { .. })
    ));
    // Unknown and big-endian dtypes, named.
    assert_eq!(
        case(f32_fields("<f2", vec![Value::Int(2)], data4.clone())),
        Err(WireError::UnsupportedDtype("<f2".into()))
    );
    assert_eq!(
        case(f32_fields("<U1", vec![Value::Int(1)], data4.clone())),
        Err(WireError::UnsupportedDtype("<U1".into()))
    );
    let e = case(f32_fields(">f4", vec![Value::Int(1)], data4.clone())).unwrap_err();
    assert_eq!(e, WireError::BigEndianDtype(">f4".into()));
    assert!(e.to_string().contains(">f4"), "{e}");
    // The tag must be `true`.
    for tag in [Value::Int(1), Value::Bool(false), Value::Nil] {
        let mut fields = f32_fields("<f4", vec![Value::Int(1)], data4.clone());
        fields[0].1 = tag.clone();
        assert!(
            matches!(
                case(fields),
                Err(WireError::FieldType {
                    field: "__ndarray__",
                    ..
                })
            ),
            "tag {tag:?}"
        );
    }
    // Missing and mistyped fields.
    let mut fields = f32_fields("<f4", vec![Value::Int(1)], data4.clone());
    fields.remove(1);
    assert_eq!(
        case(fields),
        Err(WireError::MissingField {
            tag: "__ndarray__",
            field: "data"
        })
    );
    let mut fields = f32_fields("<f4", vec![Value::Int(-1)], data4.clone());
    assert!(matches!(
        case(fields.clone()),
        Err(WireError::FieldType {
            field: "shape",
            found: "a negative int",
            ..
        })
    ));
    fields[3].1 = Value::Int(1);
    assert!(matches!(
        case(fields.clone()),
        Err(WireError::FieldType { field: "shape", .. })
    ));
    fields[3].1 = Value::Array(vec![Value::Int(1)]);
    fields[1].1 = Value::Str("abcd".into());
    assert!(matches!(
        case(fields),
        Err(WireError::FieldType {
            field: "data",
            found: "str",
            ..
        })
    ));
    // Too many dimensions.
    assert_eq!(
        case(f32_fields("<f4", vec![Value::Int(1); 9], data4.clone())),
        Err(WireError::TooManyDims { ndim: 9, max: 8 })
    );
    // A numpy scalar out of its dtype's range, or of the wrong kind.
    let scalar = |data: Value, dtype: &str| {
        decode(&tagged(
            true,
            vec![
                ("__npgeneric__", Value::Bool(true)),
                ("data", data),
                ("dtype", Value::Str(dtype.into())),
            ],
        ))
    };
    assert!(matches!(
        scalar(Value::Int(300), "|u1"),
        Err(WireError::ScalarValue {
            dtype: Dtype::U8,
            ..
        })
    ));
    assert!(matches!(
        scalar(Value::Float(0.5), "<i8"),
        Err(WireError::ScalarValue { .. })
    ));
    assert!(matches!(
        scalar(Value::Int(1), "|b1"),
        Err(WireError::ScalarValue { .. })
    ));
    assert!(matches!(
        scalar(Value::Str("x".into()), "<f4"),
        Err(WireError::FieldType { .. })
    ));
    assert!(
        scalar(Value::Int(3), "<f4").is_ok(),
        "numpy takes an int for a float scalar"
    );

    // Nesting: 64 deep is fine, 65 and 200 are not.
    assert!(decode(&nested_arrays(MAX_DEPTH)).is_ok());
    assert_eq!(
        decode(&nested_arrays(MAX_DEPTH + 1)),
        Err(WireError::TooDeep { max: MAX_DEPTH })
    );
    assert_eq!(
        decode(&nested_arrays(200)),
        Err(WireError::TooDeep { max: MAX_DEPTH })
    );
    // A declared length far beyond the frame: refused before allocating.
    for header in [
        &[0xdd, 0xff, 0xff, 0xff, 0xff][..],
        &[0xdf, 0xff, 0xff, 0xff, 0xff],
        &[0xc6, 0xff, 0xff, 0xff, 0xff],
        &[0xdb, 0xff, 0xff, 0xff, 0xff],
    ] {
        assert!(
            matches!(decode(header), Err(WireError::Truncated { .. })),
            "{header:x?}"
        );
    }
    // Markers the format has no use for.
    assert_eq!(decode(&[0xc1]), Err(WireError::ReservedMarker { at: 0 }));
    assert_eq!(
        decode(&[0xd4, 0x05, 0x00]),
        Err(WireError::Extension { ext_type: 5, at: 0 })
    );
    assert_eq!(
        decode(&[0xc7, 0x01, 0xff, 0x00]),
        Err(WireError::Extension {
            ext_type: -1,
            at: 0
        })
    );
    assert_eq!(
        decode(&[0xa2, 0xff, 0xfe]),
        Err(WireError::InvalidUtf8 { at: 1 })
    );
    assert!(matches!(decode(&[]), Err(WireError::Truncated { .. })));

    // The limits.
    let small = Limits {
        max_payload_bytes: 6,
        ..Limits::DEFAULT
    };
    let two = Value::Array(vec![
        NdArray::from_f32(&[1], &[1.0]).expect("1").into(),
        NdArray::from_f32(&[1], &[2.0]).expect("1").into(),
    ]);
    assert_eq!(
        decode_with(&encode(&two).expect("encode"), &small),
        Err(WireError::PayloadTooLarge { bytes: 8, max: 6 })
    );
    let small = Limits {
        max_frame_bytes: 10,
        ..Limits::DEFAULT
    };
    assert_eq!(
        decode_with(&[0xc0; 11], &small),
        Err(WireError::FrameTooLarge { len: 11, max: 10 })
    );
    let small = Limits {
        max_values: 100,
        ..Limits::DEFAULT
    };
    let many = encode(&Value::Array(vec![Value::Nil; 100])).expect("encode");
    assert_eq!(
        decode_with(&many, &small),
        Err(WireError::TooManyValues { max: 100 })
    );

    // Constructors check too.
    assert!(matches!(
        NdArray::from_f32(&[2, 2], &[1.0; 3]),
        Err(WireError::ValueCount { .. })
    ));
    assert!(matches!(
        NdArray::new(Dtype::F64, vec![2], vec![0; 15]),
        Err(WireError::DataLength { .. })
    ));
    assert!(matches!(
        NdArray::new(Dtype::U8, vec![1; 9], vec![0]),
        Err(WireError::TooManyDims { .. })
    ));
}

// ---- fuzz ----------------------------------------------------------------------------------------

/// `run` of the shared fuzz runner with this file's case count.
fn run(name: &str, check: impl Fn(u64) -> Result<bool, TestCaseError>) -> usize {
    fuzz::run(name, fuzz::cases(DEFAULT_CASES), case_seeds(), check)
}

/// Small valid frames of the kinds the bridge sees.
fn seed_frames() -> Vec<Vec<u8>> {
    let obs = Value::map([
        (
            "rgb",
            NdArray::from_u8(&[2, 3, 3], &[7; 18]).expect("rgb").into(),
        ),
        (
            "depth",
            NdArray::from_f32(&[2, 3, 1], &[0.5; 6])
                .expect("depth")
                .into(),
        ),
        (
            "intrinsic_cv",
            NdArray::from_f64(&[3, 3], &[1.0; 9]).expect("K").into(),
        ),
        (
            "qpos",
            NdArray::from_f32(&[8], &[0.1; 8]).expect("q").into(),
        ),
        ("instruction", "put carrot on plate".into()),
        ("episode_id", 3i64.into()),
        (
            "s",
            NpScalar::new(Dtype::Bool, Scalar::Bool(true))
                .expect("b")
                .into(),
        ),
    ]);
    let str_keyed = tagged(
        false,
        f32_fields("<f4", vec![Value::Int(1)], vec![0, 0, 128, 63]),
    );
    vec![
        encode(&action()).expect("encode"),
        encode(&obs).expect("encode"),
        str_keyed,
    ]
}

/// Hostile replacements for a node of a frame seen as plain msgpack (tags as maps).
fn hostile(rng: &mut Rng) -> Value {
    match rng.below(12) {
        0 => Value::Str(
            rng.pick(&["<f2", ">f4", "!i8", "|u1", "<f4", "<U3", "|O", "", "<i8"])
                .to_string(),
        ),
        1 => Value::Array(
            (0..rng.below(10))
                .map(|_| {
                    Value::Int(*rng.pick(&[0, 1, 2, -1, 1 << 31, 1 << 40, i64::MAX, i64::MIN]))
                })
                .collect(),
        ),
        2 => Value::UInt(u64::MAX - rng.below(3) as u64),
        3 => Value::Bool(rng.chance(1, 2)),
        4 => Value::Nil,
        5 => {
            let len = rng.below(40);
            Value::Bin(rng.bytes(len).into())
        }
        6 => Value::Float(*rng.pick(fuzz::HOSTILE_FLOATS)),
        7 => Value::Int(*rng.pick(fuzz::HOSTILE_INTS)),
        8 => Value::Bin(b"__ndarray__".to_vec().into()),
        9 => Value::Str("__npgeneric__".into()),
        10 => {
            let mut v = Value::Nil;
            for _ in 0..rng.below(80) {
                v = Value::Array(vec![v]);
            }
            v
        }
        _ => Value::Map(vec![(
            Value::Str("data".into()),
            Value::Bin(vec![0; 4].into()),
        )]),
    }
}

/// A decoded frame with its tagged values spelled out as the maps they travel as, so that a
/// mutation can break a tag's fields one by one.
fn plain(v: Value) -> Value {
    let bin = |k: &str| Value::Bin(k.as_bytes().to_vec().into());
    match v {
        Value::Array(items) => Value::Array(items.into_iter().map(plain).collect()),
        Value::Map(e) => Value::Map(e.into_iter().map(|(k, v)| (k, plain(v))).collect()),
        Value::NdArray(a) => Value::Map(vec![
            (bin("__ndarray__"), Value::Bool(true)),
            (bin("dtype"), Value::Str(a.dtype().as_str().into())),
            (
                bin("shape"),
                Value::Array(a.shape().iter().map(|&d| Value::Int(d as i64)).collect()),
            ),
            (bin("data"), Value::Bin(a.into_data())),
        ]),
        Value::NpScalar(s) => Value::Map(vec![
            (bin("__npgeneric__"), Value::Bool(true)),
            (bin("dtype"), Value::Str(s.dtype().as_str().into())),
            (bin("data"), Value::Float(s.to_f64())),
        ]),
        other => other,
    }
}

/// One node replaced, dropped, trimmed or duplicated, somewhere in the tree.
fn mutate(rng: &mut Rng, v: &mut Value) {
    let children = match v {
        Value::Array(items) => items.len(),
        Value::Map(e) => e.len() * 2,
        _ => 0,
    };
    if children == 0 || rng.chance(1, 4) {
        match (rng.below(4), &mut *v) {
            (0, Value::Bin(b)) if !b.is_empty() => {
                let keep = rng.below(b.len());
                b.truncate(keep);
            }
            (1, Value::Bin(b)) => {
                let len = rng.few(8);
                let mut longer = b.to_vec();
                longer.extend(rng.bytes(len));
                *b = longer.into();
            }
            (2, Value::Map(e)) if !e.is_empty() => {
                e.remove(rng.below(e.len()));
            }
            (3, Value::Map(e)) if !e.is_empty() => {
                let dup = e[rng.below(e.len())].clone();
                e.push(dup);
            }
            _ => *v = hostile(rng),
        }
        return;
    }
    let i = rng.below(children);
    match v {
        Value::Array(items) => mutate(rng, &mut items[i]),
        Value::Map(e) if i.is_multiple_of(2) => mutate(rng, &mut e[i / 2].0),
        Value::Map(e) => mutate(rng, &mut e[i / 2].1),
        _ => {}
    }
}

/// What every accepted frame must satisfy: it re-encodes, and that encoding is stable.
fn stable(value: &Value) -> Result<(), String> {
    let once = encode(value).map_err(|e| format!("accepted but cannot re-encode: {e}"))?;
    let back = decode(&once).map_err(|e| format!("our own encoding is refused: {e}"))?;
    let twice = encode(&back).map_err(|e| format!("second encoding fails: {e}"))?;
    if once != twice {
        return Err("re-encoding is not stable".into());
    }
    Ok(())
}

fn fail(seed: u64, input: &[u8], problem: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(format!(
        "seed {seed:#018x}: {problem}\ninput: {}",
        excerpt(input)
    ))
}

fn check_frame(seed: u64, input: &[u8]) -> Result<bool, TestCaseError> {
    match decode(input) {
        Ok(v) => stable(&v).map(|()| true).map_err(|m| fail(seed, input, m)),
        Err(e) if e.to_string().trim().is_empty() => Err(fail(seed, input, "empty error message")),
        Err(_) => Ok(false),
    }
}

#[test]
fn fuzz_arbitrary_bytes() {
    run("bridge_wire arbitrary_bytes", |seed| {
        let mut rng = Rng::new(seed);
        let mut input = arbitrary_bytes(&mut rng);
        // Start with a container marker half the time, so the decoder gets past the first byte.
        if rng.chance(1, 2) {
            input.insert(0, *rng.pick(&[0x80, 0x81, 0x84, 0x91, 0x9f, 0xdc, 0xde]));
        }
        check_frame(seed, &input)
    });
}

#[test]
fn fuzz_mutated_frames() {
    let seeds = seed_frames();
    let donors: Vec<&[u8]> = seeds.iter().map(Vec::as_slice).collect();
    let n = fuzz::cases(DEFAULT_CASES);
    let accepted = run("bridge_wire mutated_frames", |seed| {
        let mut rng = Rng::new(seed);
        let base = rng.pick(&seeds).clone();
        let mut input = if rng.chance(2, 3) {
            // Structure first: the fields of tagged maps broken one at a time, then re-encoded
            // (which cannot fail: the tree is small).
            let mut tree = plain(decode(&base).expect("a seed decodes"));
            for _ in 0..rng.few(3) {
                mutate(&mut rng, &mut tree);
            }
            encode(&tree).map_err(|e| fail(seed, &base, e))?
        } else {
            base
        };
        if rng.chance(1, 2) {
            mutate_bytes(&mut rng, &mut input, &donors);
        }
        check_frame(seed, &input)
    });
    assert!(
        accepted >= n as usize / 50,
        "only {accepted} of {n} mutated frames decoded: the Ok path is barely reached"
    );
}
