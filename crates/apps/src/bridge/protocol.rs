//! The bridge's messages, as [`wire`](super::wire) values, both ways. Interface strings (keys,
//! message types, control modes) are part of the protocol: `sim/simplerenv/run.py` and any other
//! evaluator spell them exactly so.
//!
//! On connect the server sends [`Metadata`] (openpi's `WebsocketClientPolicy` reads one frame
//! first). Then every client frame is a map with a `"type"`, answered by exactly one frame:
//!
//! | client sends | server answers |
//! | --- | --- |
//! | `reset`: `task`, `instruction`, `episode_id`, `control_mode`, `control_freq`, `max_steps` | `ready`: `episode_id`, `control_mode` |
//! | `infer`: `step`, `rgb` u8 (H,W,3), `depth` f4/f8 (H,W) or (H,W,1) metres z-depth (0 = none), `intrinsic_cv` (3,3), `extrinsic_cv` (4,4) world→camera, `base_pose` (7), `tcp_pose` (7) world, `qpos` (8), `target_pose` (7) base frame; optional `segmentation` integer (H,W) (or SimplerEnv's (H,W,4), actor id in channel 1) and `objects` `[{id, name, role}]` | `action`: `step`, `action` f4 (7) or (8), `terminate`, `status` (`moving`/`done`/`failed`), `detail` |
//! | `episode_end`: `success`, `steps` | `ended`: `status`, `detail` |
//!
//! Poses are `[x, y, z, qw, qx, qy, qz]` (SAPIEN's order). An error is answered with a text frame
//! (`pointact bridge: …`), which openpi's client raises as `RuntimeError`; the connection stays
//! open unless the frame could not be read at all.

use bytes::Bytes;
use k::nalgebra::{Isometry3, Matrix3, Matrix4, Rotation3, Translation3, UnitQuaternion};

use super::remote::{
    Action, ControlMode, EpisodeStart, LabelledObject, Labels, ObjectRole, Observation,
    PolicyStatus,
};
use super::wire::{self, Dtype, NdArray, Value, WireError};
use crate::camera::{Frame, RgbImage};
use crate::geometry::ee_delta::{pose_from_wxyz, pose_to_wxyz};
use crate::geometry::{DepthImage, Intrinsics};

/// Protocol revision in the metadata; bumped when a message changes incompatibly.
pub(crate) const PROTOCOL_VERSION: i64 = 1;

/// Largest image side the server accepts (pixels): far above any camera a policy sees.
pub(crate) const MAX_IMAGE_SIDE: usize = 4096;

/// Most pixels of an observation's image: 1920×1200, a full-HD camera. The frame limit binds
/// first otherwise: an image this large with a float64 depth map and SimplerEnv's 4-channel int32
/// segmentation is 27 bytes a pixel, 62.2 MB, inside the 64 MiB of array data a frame may carry.
pub(crate) const MAX_IMAGE_PIXELS: usize = 1920 * 1200;

const _: () = assert!(MAX_IMAGE_PIXELS * (3 + 8 + 16) <= wire::MAX_PAYLOAD_BYTES);

/// Longest `instruction` of a `reset` (bytes): a task sentence is tens of bytes, and the
/// instruction travels into every log line and error that names the task.
pub(crate) const MAX_INSTRUCTION_BYTES: usize = 4096;

/// Longest `task` name of a `reset` (bytes).
pub(crate) const MAX_TASK_BYTES: usize = 256;

/// Longest `detail` the server sends (bytes); a longer reason is cut at a character boundary
/// and ends in `…`. A reason is a sentence or two; the bound keeps each answer small whatever
/// an error quotes.
pub(crate) const MAX_DETAIL_BYTES: usize = 1024;

/// `text` cut to at most [`MAX_DETAIL_BYTES`] (the last of them a `…`).
pub(crate) fn bounded_detail(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MAX_DETAIL_BYTES {
        return text.into();
    }
    let end = text.floor_char_boundary(MAX_DETAIL_BYTES - '…'.len_utf8());
    format!("{}…", &text[..end]).into()
}

/// Why a frame could not be read as a message.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The frame is not valid wire data (msgpack/numpy encoding, limits).
    #[error("unreadable frame: {0}")]
    Wire(#[from] WireError),
    /// The frame decoded to something other than a map (its kind is given).
    #[error("a message is a map with a \"type\", got {0}")]
    NotAMap(&'static str),
    /// The `"type"` names no message of this direction (the name, truncated; the expected ones).
    #[error("unknown message type {0:?} (expected {1})")]
    UnknownType(String, &'static str),
    /// A required field is absent or nil.
    #[error("message {kind:?} has no {field:?}")]
    Missing {
        /// The message type (`reset`, `infer`, …).
        kind: &'static str,
        /// The absent field's key.
        field: &'static str,
    },
    /// A field is present but has the wrong type, shape or value.
    #[error("message {kind:?}: {field:?} {reason}")]
    Field {
        /// The message type (`reset`, `infer`, …).
        kind: &'static str,
        /// The offending field's key.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// What the server says first.
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata {
    /// The server's crate version.
    pub version: String,
    /// The name of the pointer backend the server's sessions use.
    pub pointer: String,
}

/// A message from the evaluator.
#[derive(Debug, Clone)]
pub enum ClientMessage {
    /// `reset`: a new episode begins.
    Reset(EpisodeStart),
    /// `infer`: one control step's observation, to be answered with an action.
    Infer(Box<Observation>),
    /// `episode_end`: the evaluator's verdict and the number of steps it ran.
    EpisodeEnd {
        /// Whether the evaluator judged the task done.
        success: bool,
        /// Control steps the episode ran.
        steps: u64,
    },
}

impl ClientMessage {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            ClientMessage::Reset(_) => "reset",
            ClientMessage::Infer(_) => "infer",
            ClientMessage::EpisodeEnd { .. } => "episode_end",
        }
    }
}

/// A message from the server (after the metadata).
#[derive(Debug, Clone, PartialEq)]
pub enum ServerMessage {
    /// `ready`: the episode was accepted.
    Ready {
        /// The episode's id, as the `reset` gave it.
        episode_id: u64,
        /// The control mode the actions will be in.
        control_mode: ControlMode,
    },
    /// `action`: the answer to an `infer`.
    Action(Action),
    /// `ended`: the answer to `episode_end`, with how the policy saw the episode finish.
    Ended {
        /// Where the policy stood at the end.
        status: PolicyStatus,
        /// A human-readable note on how it ended.
        detail: String,
    },
}

/// Field access with errors that name the message and the field.
struct Fields<'a> {
    kind: &'static str,
    map: &'a Value,
}

impl<'a> Fields<'a> {
    fn opt(&self, field: &'static str) -> Option<&'a Value> {
        self.map.get(field).filter(|v| !v.is_nil())
    }

    fn get(&self, field: &'static str) -> Result<&'a Value, ProtocolError> {
        self.opt(field).ok_or(ProtocolError::Missing {
            kind: self.kind,
            field,
        })
    }

    fn bad(&self, field: &'static str, reason: impl Into<String>) -> ProtocolError {
        ProtocolError::Field {
            kind: self.kind,
            field,
            reason: reason.into(),
        }
    }

    fn str(&self, field: &'static str) -> Result<&'a str, ProtocolError> {
        let v = self.get(field)?;
        v.as_str()
            .ok_or_else(|| self.bad(field, format!("must be a string, got {}", v.kind())))
    }

    fn uint(&self, field: &'static str) -> Result<u64, ProtocolError> {
        let v = self.get(field)?;
        v.as_u64().ok_or_else(|| {
            self.bad(
                field,
                format!(
                    "must be a non-negative integer below 2^64, got {}",
                    v.kind()
                ),
            )
        })
    }

    fn float(&self, field: &'static str) -> Result<f64, ProtocolError> {
        let v = self.get(field)?;
        v.as_f64()
            .filter(|x| x.is_finite())
            .ok_or_else(|| self.bad(field, format!("must be a finite number, got {}", v.kind())))
    }

    fn bool(&self, field: &'static str) -> Result<bool, ProtocolError> {
        let v = self.get(field)?;
        v.as_bool()
            .ok_or_else(|| self.bad(field, format!("must be a bool, got {}", v.kind())))
    }

    fn array(&self, field: &'static str) -> Result<&'a NdArray, ProtocolError> {
        let v = self.get(field)?;
        v.as_ndarray()
            .ok_or_else(|| self.bad(field, format!("must be a numpy array, got {}", v.kind())))
    }

    /// A float array of exactly `shape`, finite, as f64.
    fn floats(&self, field: &'static str, shape: &[usize]) -> Result<Vec<f64>, ProtocolError> {
        let a = self.array(field)?;
        if !matches!(a.dtype(), Dtype::F32 | Dtype::F64) || a.shape() != shape {
            return Err(self.bad(
                field,
                format!(
                    "must be float32 or float64 of shape {shape:?}, got {} {:?}",
                    a.dtype(),
                    a.shape()
                ),
            ));
        }
        let v = a.cast_f64();
        if v.iter().any(|x| !x.is_finite()) {
            return Err(self.bad(field, "holds NaN or infinity"));
        }
        Ok(v)
    }

    fn pose(&self, field: &'static str) -> Result<Isometry3<f64>, ProtocolError> {
        let v = self.floats(field, &[7])?;
        pose_from_wxyz(&v).map_err(|e| self.bad(field, e.to_string()))
    }
}

fn message_type(v: &Value) -> Result<&str, ProtocolError> {
    if v.as_map().is_none() {
        return Err(ProtocolError::NotAMap(v.kind()));
    }
    match v.get("type") {
        None => Err(ProtocolError::Missing {
            kind: "message",
            field: "type",
        }),
        Some(t) => t.as_str().ok_or(ProtocolError::Field {
            kind: "message",
            field: "type",
            reason: format!("must be a string, got {}", t.kind()),
        }),
    }
}

/// What to do with an observation's images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Images {
    /// Convert them into the frame (and the labels).
    Keep,
    /// Check their dtypes and shapes only; the frame's images and the labels stay empty. The
    /// server plans from the first observation only, so converting 3.4 MB per later step would
    /// be work nobody reads ([`crate::camera::Camera::capture`] refuses such a frame).
    CheckOnly,
}

/// Reads one frame from an evaluator.
#[cfg(test)]
pub(crate) fn decode_client(bytes: &[u8]) -> Result<ClientMessage, ProtocolError> {
    client_message(wire::decode(bytes)?, Images::Keep)
}

/// [`decode_client`] of a frame the server owns: arrays are views of `frame` (no copy), and an
/// observation's images are converted only when `images` says so.
pub(crate) fn decode_client_with(
    frame: &Bytes,
    images: Images,
) -> Result<ClientMessage, ProtocolError> {
    client_message(wire::decode_shared(frame, &wire::Limits::DEFAULT)?, images)
}

fn client_message(v: Value, images: Images) -> Result<ClientMessage, ProtocolError> {
    match message_type(&v)? {
        "reset" => decode_reset(&Fields {
            kind: "reset",
            map: &v,
        })
        .map(ClientMessage::Reset),
        "infer" => decode_observation(
            &Fields {
                kind: "infer",
                map: &v,
            },
            images,
        )
        .map(|o| ClientMessage::Infer(Box::new(o))),
        "episode_end" => {
            let f = Fields {
                kind: "episode_end",
                map: &v,
            };
            Ok(ClientMessage::EpisodeEnd {
                success: f.bool("success")?,
                steps: f.uint("steps")?,
            })
        }
        other => Err(ProtocolError::UnknownType(
            other.chars().take(40).collect(),
            "reset, infer or episode_end",
        )),
    }
}

fn decode_reset(f: &Fields<'_>) -> Result<EpisodeStart, ProtocolError> {
    let mode = f.str("control_mode")?;
    let control_mode = ControlMode::from_name(mode).ok_or_else(|| {
        f.bad(
            "control_mode",
            format!(
                "{mode:?} is not served (use {:?} or {:?})",
                ControlMode::DeltaEe.name(),
                ControlMode::JointPos.name()
            ),
        )
    })?;
    let control_freq = f.float("control_freq")?;
    if !(0.5..=1000.0).contains(&control_freq) {
        return Err(f.bad(
            "control_freq",
            format!("{control_freq} Hz is outside 0.5..1000"),
        ));
    }
    let bounded = |field: &'static str, max: usize| -> Result<String, ProtocolError> {
        let text = f.str(field)?;
        if text.len() > max {
            return Err(f.bad(field, format!("{} bytes, at most {max}", text.len())));
        }
        Ok(text.to_string())
    };
    Ok(EpisodeStart {
        task: bounded("task", MAX_TASK_BYTES)?,
        instruction: bounded("instruction", MAX_INSTRUCTION_BYTES)?,
        episode_id: f.uint("episode_id")?,
        control_mode,
        control_freq,
        max_steps: f.uint("max_steps")?,
    })
}

fn decode_observation(f: &Fields<'_>, images: Images) -> Result<Observation, ProtocolError> {
    let keep = images == Images::Keep;
    let step = f.uint("step")?;
    let rgb = f.array("rgb")?;
    let (h, w) = match rgb.shape() {
        [h, w, 3] if rgb.dtype() == Dtype::U8 => (*h, *w),
        s => {
            return Err(f.bad(
                "rgb",
                format!(
                    "must be uint8 of shape (H, W, 3), got {} {s:?}",
                    rgb.dtype()
                ),
            ))
        }
    };
    if h == 0 || w == 0 || h > MAX_IMAGE_SIDE || w > MAX_IMAGE_SIDE || w * h > MAX_IMAGE_PIXELS {
        return Err(f.bad(
            "rgb",
            format!("{w}x{h} is not an image size served (1..={MAX_IMAGE_SIDE} per side, at most {MAX_IMAGE_PIXELS} pixels: 1920x1200)"),
        ));
    }
    let rgb = if keep {
        RgbImage::from_raw(w as u32, h as u32, rgb.data().to_vec())
            .ok_or_else(|| f.bad("rgb", "data does not fill the image"))?
    } else {
        RgbImage::new(0, 0)
    };
    let depth = f.array("depth")?;
    let depth_ok = matches!(depth.dtype(), Dtype::F32 | Dtype::F64)
        && (depth.shape() == [h, w] || depth.shape() == [h, w, 1]);
    if !depth_ok {
        return Err(f.bad(
            "depth",
            format!(
                "must be float32 or float64 of shape ({h}, {w}) or ({h}, {w}, 1) like rgb, got {} {:?}",
                depth.dtype(),
                depth.shape()
            ),
        ));
    }
    // Metres along the optical axis; NaN and infinity become "no depth", which is what every
    // consumer of a DepthImage already treats as a hole.
    let depth = if keep {
        DepthImage {
            width: w,
            height: h,
            data: depth_m(depth),
        }
    } else {
        DepthImage {
            width: 0,
            height: 0,
            data: Vec::new(),
        }
    };
    let k = f.floats("intrinsic_cv", &[3, 3])?;
    if k[1] != 0.0 || k[3] != 0.0 || k[6] != 0.0 || k[7] != 0.0 || k[8] != 1.0 {
        return Err(f.bad(
            "intrinsic_cv",
            format!("must be [[fx, 0, cx], [0, fy, cy], [0, 0, 1]], got {k:?}"),
        ));
    }
    let intrinsics = Intrinsics::pinhole(w, h, k[0], k[4], k[2], k[5]);
    intrinsics
        .validate()
        .map_err(|e| f.bad("intrinsic_cv", e.to_string()))?;
    let camera_from_world = rigid(f, "extrinsic_cv")?;
    let world_from_base = f.pose("base_pose")?;
    let world_from_tcp = f.pose("tcp_pose")?;
    let base_from_target = f.pose("target_pose")?;
    let q = f.array("qpos")?;
    if q.shape().len() != 1 || !matches!(q.dtype(), Dtype::F32 | Dtype::F64) {
        return Err(f.bad(
            "qpos",
            format!("must be a float vector, got {} {:?}", q.dtype(), q.shape()),
        ));
    }
    let qpos = q.cast_f64();
    if qpos.iter().any(|x| !x.is_finite()) {
        return Err(f.bad("qpos", "holds NaN or infinity"));
    }
    let labels = decode_labels(f, w, h, keep)?;
    let frame = Frame {
        rgb,
        depth,
        intrinsics,
        base_from_camera: (camera_from_world * world_from_base).inverse(),
        stamp_s: step as f64,
    };
    Ok(Observation {
        step,
        frame,
        camera_from_world,
        world_from_base,
        world_from_tcp,
        qpos,
        base_from_target,
        labels,
    })
}

/// Depth in metres along the optical axis from a float32 or float64 array; NaN, infinity and
/// values not above 0 become 0 ("no depth", what every consumer of a DepthImage already treats
/// as a hole). Read straight from the bytes: no float64 copy of a whole image on the way.
fn depth_m(a: &NdArray) -> Vec<f32> {
    let clean = |d: f64| {
        if d.is_finite() && d > 0.0 {
            d as f32
        } else {
            0.0
        }
    };
    match a.dtype() {
        Dtype::F32 => a
            .data()
            .chunks_exact(4)
            .map(|c| {
                let d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                if d.is_finite() && d > 0.0 {
                    d
                } else {
                    0.0
                }
            })
            .collect(),
        Dtype::F64 => a
            .data()
            .chunks_exact(8)
            .map(|c| clean(f64::from_le_bytes(c.try_into().expect("8 bytes"))))
            .collect(),
        _ => a.cast_f64().into_iter().map(clean).collect(),
    }
}

/// A 4×4 rigid transform: a rotation (orthonormal within 1e-4, determinant +1), a translation,
/// and the row `[0, 0, 0, 1]`.
fn rigid(f: &Fields<'_>, field: &'static str) -> Result<Isometry3<f64>, ProtocolError> {
    let v = f.floats(field, &[4, 4])?;
    let m = Matrix4::from_row_slice(&v);
    let r: Matrix3<f64> = m.fixed_slice::<3, 3>(0, 0).into_owned();
    let orthonormal = (r.transpose() * r - Matrix3::identity()).abs().max() < 1e-4;
    if !orthonormal || r.determinant() < 0.0 || m.row(3) != Matrix4::identity().row(3) {
        return Err(f.bad(
            field,
            format!(
                "is not a rigid transform (rotation, translation, last row [0, 0, 0, 1]): {v:?}"
            ),
        ));
    }
    let rot = UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix_unchecked(r));
    Ok(Isometry3::from_parts(
        Translation3::new(m[(0, 3)], m[(1, 3)], m[(2, 3)]),
        rot,
    ))
}

fn decode_labels(
    f: &Fields<'_>,
    w: usize,
    h: usize,
    keep: bool,
) -> Result<Option<Labels>, ProtocolError> {
    let (Some(_), Some(objects)) = (f.opt("segmentation"), f.opt("objects")) else {
        return match (f.opt("segmentation"), f.opt("objects")) {
            (None, None) => Ok(None),
            (Some(_), None) => Err(f.bad("objects", "must come with \"segmentation\"")),
            _ => Err(f.bad("segmentation", "must come with \"objects\"")),
        };
    };
    let seg = f.array("segmentation")?;
    let channels = match seg.shape() {
        [sh, sw] if (*sh, *sw) == (h, w) => 1,
        [sh, sw, c] if (*sh, *sw) == (h, w) && *c >= 2 => *c,
        s => {
            return Err(f.bad(
                "segmentation",
                format!("must be ({h}, {w}) or ({h}, {w}, C≥2) like rgb, got {s:?}"),
            ))
        }
    };
    if matches!(seg.dtype(), Dtype::F32 | Dtype::F64 | Dtype::Bool) {
        return Err(f.bad(
            "segmentation",
            format!("must hold integer ids, got {}", seg.dtype()),
        ));
    }
    let ids = if !keep {
        Vec::new()
    } else if channels == 1 && seg.dtype() == Dtype::U32 {
        // What SimplerEnv's runner sends: every value is an id, no conversion.
        seg.data()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    } else {
        // SimplerEnv's (H, W, 4) holds the actor id in channel 1.
        let all = seg.cast_f64();
        let pick = if channels == 1 { 0 } else { 1 };
        let mut ids = Vec::with_capacity(w * h);
        for px in all.chunks_exact(channels) {
            let v = px[pick];
            if !(0.0..=u32::MAX as f64).contains(&v) {
                return Err(f.bad("segmentation", format!("id {v} is outside 0..2^32")));
            }
            ids.push(v as u32);
        }
        ids
    };
    let list = objects
        .as_array()
        .ok_or_else(|| f.bad("objects", format!("must be a list, got {}", objects.kind())))?;
    let mut out = Vec::with_capacity(list.len());
    for o in list {
        let of = Fields {
            kind: "infer.objects[]",
            map: o,
        };
        if o.as_map().is_none() {
            return Err(f.bad("objects", format!("entries must be maps, got {}", o.kind())));
        }
        let id = of.uint("id")?;
        let id = u32::try_from(id).map_err(|_| of.bad("id", format!("{id} is outside 0..2^32")))?;
        let role = of.str("role")?;
        out.push(LabelledObject {
            id,
            name: of.str("name")?.to_string(),
            role: ObjectRole::from_name(role).ok_or_else(|| {
                of.bad("role", format!("{role:?} is not source, target or other"))
            })?,
        });
    }
    if !keep {
        return Ok(None);
    }
    Ok(Some(Labels {
        width: w,
        height: h,
        ids,
        objects: out,
    }))
}

fn f64s(shape: &[usize], v: &[f64]) -> Value {
    Value::NdArray(NdArray::from_slice(shape, v).expect("shape matches the values"))
}

fn pose_value(p: &Isometry3<f64>) -> Value {
    f64s(&[7], &pose_to_wxyz(p))
}

/// The frame our evaluator (`bridge::client`) sends for `msg`.
pub fn encode_client(msg: &ClientMessage) -> Result<Vec<u8>, WireError> {
    let v = match msg {
        ClientMessage::Reset(s) => Value::map([
            ("type", Value::from("reset")),
            ("task", s.task.as_str().into()),
            ("instruction", s.instruction.as_str().into()),
            ("episode_id", Value::UInt(s.episode_id)),
            ("control_mode", s.control_mode.name().into()),
            ("control_freq", s.control_freq.into()),
            ("max_steps", Value::UInt(s.max_steps)),
        ]),
        ClientMessage::Infer(o) => {
            let fr = &o.frame;
            let (w, h) = (fr.depth.width, fr.depth.height);
            let i = &fr.intrinsics;
            let k = [i.fx, 0.0, i.cx, 0.0, i.fy, i.cy, 0.0, 0.0, 1.0];
            let ext = o.camera_from_world.to_homogeneous();
            let ext: Vec<f64> = (0..4)
                .flat_map(|r| (0..4).map(move |c| ext[(r, c)]))
                .collect();
            let mut entries = vec![
                ("type", Value::from("infer")),
                ("step", Value::UInt(o.step)),
                (
                    "rgb",
                    Value::NdArray(NdArray::from_slice(&[h, w, 3], fr.rgb.as_raw())?),
                ),
                (
                    "depth",
                    Value::NdArray(NdArray::from_slice(&[h, w], &fr.depth.data)?),
                ),
                ("intrinsic_cv", f64s(&[3, 3], &k)),
                ("extrinsic_cv", f64s(&[4, 4], &ext)),
                ("base_pose", pose_value(&o.world_from_base)),
                ("tcp_pose", pose_value(&o.world_from_tcp)),
                ("qpos", f64s(&[o.qpos.len()], &o.qpos)),
                ("target_pose", pose_value(&o.base_from_target)),
            ];
            if let Some(l) = &o.labels {
                entries.push((
                    "segmentation",
                    Value::NdArray(NdArray::from_slice(&[l.height, l.width], &l.ids)?),
                ));
                entries.push((
                    "objects",
                    Value::Array(
                        l.objects
                            .iter()
                            .map(|ob| {
                                Value::map([
                                    ("id", Value::UInt(ob.id.into())),
                                    ("name", ob.name.as_str().into()),
                                    ("role", ob.role.name().into()),
                                ])
                            })
                            .collect(),
                    ),
                ));
            }
            Value::map(entries)
        }
        ClientMessage::EpisodeEnd { success, steps } => Value::map([
            ("type", Value::from("episode_end")),
            ("success", (*success).into()),
            ("steps", Value::UInt(*steps)),
        ]),
    };
    wire::encode(&v)
}

/// The metadata frame.
pub(crate) fn encode_metadata(m: &Metadata) -> Vec<u8> {
    let v = Value::map([
        ("server", Value::from("pointact")),
        ("version", m.version.as_str().into()),
        ("protocol", PROTOCOL_VERSION.into()),
        ("pointer", m.pointer.as_str().into()),
        (
            "control_modes",
            Value::Array(vec![
                ControlMode::DeltaEe.name().into(),
                ControlMode::JointPos.name().into(),
            ]),
        ),
    ]);
    wire::encode(&v).expect("metadata is small")
}

/// Reads the metadata frame (our client checks it is a pointact server of this protocol).
pub(crate) fn decode_metadata(bytes: &[u8]) -> Result<Metadata, ProtocolError> {
    let v = wire::decode(bytes)?;
    let f = Fields {
        kind: "metadata",
        map: &v,
    };
    if f.str("server")? != "pointact" {
        return Err(f.bad("server", "is not \"pointact\""));
    }
    let p = f.get("protocol")?.as_i64();
    if p != Some(PROTOCOL_VERSION) {
        return Err(f.bad(
            "protocol",
            format!("is {p:?}; this client speaks {PROTOCOL_VERSION}"),
        ));
    }
    Ok(Metadata {
        version: f.str("version")?.to_string(),
        pointer: f.str("pointer")?.to_string(),
    })
}

/// One server answer as a frame.
pub(crate) fn encode_server(msg: &ServerMessage) -> Vec<u8> {
    let v = match msg {
        ServerMessage::Ready {
            episode_id,
            control_mode,
        } => Value::map([
            ("type", Value::from("ready")),
            ("episode_id", Value::UInt(*episode_id)),
            ("control_mode", control_mode.name().into()),
        ]),
        ServerMessage::Action(a) => {
            let values: Vec<f32> = a.values.iter().map(|v| *v as f32).collect();
            Value::map([
                ("type", Value::from("action")),
                ("step", Value::UInt(a.step)),
                (
                    "action",
                    Value::NdArray(
                        NdArray::from_slice(&[values.len()], &values).expect("a vector"),
                    ),
                ),
                ("terminate", a.terminate.into()),
                ("status", a.status.name().into()),
                ("detail", bounded_detail(&a.detail).into_owned().into()),
            ])
        }
        ServerMessage::Ended { status, detail } => Value::map([
            ("type", Value::from("ended")),
            ("status", status.name().into()),
            ("detail", bounded_detail(detail).into_owned().into()),
        ]),
    };
    wire::encode(&v).expect("server messages are small")
}

/// Reads a server answer (our client).
pub(crate) fn decode_server(bytes: &[u8]) -> Result<ServerMessage, ProtocolError> {
    let v = wire::decode(bytes)?;
    let status = |f: &Fields<'_>| {
        let s = f.str("status")?;
        PolicyStatus::from_name(s).ok_or_else(|| f.bad("status", format!("{s:?} is unknown")))
    };
    match message_type(&v)? {
        "ready" => {
            let f = Fields {
                kind: "ready",
                map: &v,
            };
            let mode = f.str("control_mode")?;
            Ok(ServerMessage::Ready {
                episode_id: f.uint("episode_id")?,
                control_mode: ControlMode::from_name(mode)
                    .ok_or_else(|| f.bad("control_mode", format!("{mode:?} is unknown")))?,
            })
        }
        "action" => {
            let f = Fields {
                kind: "action",
                map: &v,
            };
            let a = f.array("action")?;
            if a.shape().len() != 1 || !matches!(a.dtype(), Dtype::F32 | Dtype::F64) {
                return Err(f.bad("action", format!("is {} {:?}", a.dtype(), a.shape())));
            }
            Ok(ServerMessage::Action(Action {
                step: f.uint("step")?,
                values: a.cast_f64(),
                terminate: f.bool("terminate")?,
                status: status(&f)?,
                detail: f.str("detail")?.to_string(),
            }))
        }
        "ended" => {
            let f = Fields {
                kind: "ended",
                map: &v,
            };
            Ok(ServerMessage::Ended {
                status: status(&f)?,
                detail: f.str("detail")?.to_string(),
            })
        }
        other => Err(ProtocolError::UnknownType(
            other.chars().take(40).collect(),
            "ready, action or ended",
        )),
    }
}
