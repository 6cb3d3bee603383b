//! The RealSense device through realsense-rust (feature `realsense`): colour + depth streams, depth
//! aligned to colour by librealsense's `align` block, intrinsics and depth scale from the device.
//!
//! Why align depth to colour (not colour to depth): the pointing model answers in colour pixels,
//! so each answered pixel must index the depth image directly, and the lifting must use the
//! colour stream's intrinsics and distortion (librealsense `examples/align/readme.md`:
//! `rs2::align(RS2_STREAM_COLOR)` moves every depth pixel onto its colour pixel).

use std::collections::HashSet;
use std::ffi::{CStr, CString};

use realsense_rust::{
    base::Rs2Intrinsics,
    config::Config,
    context::Context,
    device::Device,
    frame::{ColorFrame, DepthFrame, FrameEx, PixelKind},
    kind::{Rs2CameraInfo, Rs2Format, Rs2StreamKind},
    pipeline::{ActivePipeline, FrameWaitError, InactivePipeline},
    processing_blocks::align::Align,
};
use realsense_sys as sys;

use super::{
    depth_from_units, intrinsics_from_rs2, temporal_median, RealSenseError, RealSenseOptions,
    Rs2IntrinsicsFields,
};
use crate::camera::error::CameraError;
use crate::camera::frame::{Camera, Frame, RgbImage};
use crate::geometry::Intrinsics;

/// The librealsense version the running library reports (`rs2_get_api_version`), as
/// (major, minor, patch). Calling it proves the library is loaded, not just linked.
pub fn library_version() -> Result<(u32, u32, u32), RealSenseError> {
    let mut err: *mut sys::rs2_error = std::ptr::null_mut();
    // SAFETY: rs2_get_api_version only writes the error out-pointer, which is valid and null.
    let v = unsafe { sys::rs2_get_api_version(&mut err) };
    check(err, "asking for the API version")?;
    let v = u32::try_from(v).map_err(|_| RealSenseError::Library {
        doing: "asking for the API version".into(),
        message: format!("negative version {v}"),
    })?;
    Ok((v / 10000, (v % 10000) / 100, v % 100))
}

/// The librealsense version realsense-sys's bindings were generated from; the running library must
/// have the same major and at least this minor (librealsense's own compatibility rule).
pub fn bindings_version() -> (u32, u32, u32) {
    (
        sys::RS2_API_MAJOR_VERSION,
        sys::RS2_API_MINOR_VERSION,
        sys::RS2_API_PATCH_VERSION,
    )
}

/// Turns a librealsense error out-parameter into our error (and frees it).
fn check(err: *mut sys::rs2_error, doing: &str) -> Result<(), RealSenseError> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: a non-null rs2_error comes from librealsense; its message lives until it is freed,
    // and it is freed exactly once, here.
    let message = unsafe {
        let m = CStr::from_ptr(sys::rs2_get_error_message(err))
            .to_string_lossy()
            .into_owned();
        sys::rs2_free_error(err);
        m
    };
    Err(RealSenseError::Library {
        doing: doing.into(),
        message,
    })
}

fn lib_err(doing: &str, e: impl std::fmt::Display) -> RealSenseError {
    RealSenseError::Library {
        doing: doing.into(),
        message: e.to_string(),
    }
}

fn info(device: &Device, what: Rs2CameraInfo) -> Option<String> {
    device.info(what).map(|s| s.to_string_lossy().into_owned())
}

/// Who the opened device is, for logs and for the frames' provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    /// e.g. "Intel RealSense D435" or "Intel RealSense L515".
    pub name: String,
    /// The device's serial number.
    pub serial: String,
    /// The firmware version it reports.
    pub firmware: String,
    /// Depth scale, metres per raw unit, as the device reports it.
    pub depth_scale_m: f32,
}

/// A RealSense camera streaming aligned colour + depth. Dropping it stops the streams.
pub struct RealSenseCamera {
    // Field order is drop order: the pipeline and the align block go before the context.
    pipeline: ActivePipeline,
    align: Align,
    _context: Context,
    options: RealSenseOptions,
    intrinsics: Intrinsics,
    info: DeviceInfo,
}

// SAFETY: the camera is moved to, and used from, one thread at a time (`Send`, not `Sync`).
// librealsense objects have no affinity to the thread that made them: its frame-management guide
// (librealsense `doc/frame_lifetime.md`, "passing frames between threads") hands frames and frame
// queues across threads, and the pipeline's `wait_for_frames` reads a thread-safe frame queue. The
// Rust bindings only lack the marker because they hold raw pointers.
unsafe impl Send for RealSenseCamera {}

/// The serials of the connected devices (empty when none is connected).
pub fn connected_serials() -> Result<Vec<String>, RealSenseError> {
    let context = Context::new().map_err(|e| lib_err("creating a context", e))?;
    Ok(context
        .query_devices(HashSet::new())
        .iter()
        .filter_map(|d| info(d, Rs2CameraInfo::SerialNumber))
        .collect())
}

impl RealSenseCamera {
    /// Opens the device (`options.serial`, or the first one found), starts colour (RGB8) and depth
    /// (Z16) at `width`×`height`@`fps`, and drops `warmup_frames` frames.
    pub fn open(options: RealSenseOptions) -> Result<Self, RealSenseError> {
        options.validate()?;
        let context = Context::new().map_err(|e| lib_err("creating a context", e))?;
        let devices = context.query_devices(HashSet::new());
        if devices.is_empty() {
            return Err(RealSenseError::NoDevice);
        }
        let serials: Vec<String> = devices
            .iter()
            .map(|d| info(d, Rs2CameraInfo::SerialNumber).unwrap_or_default())
            .collect();
        let index = match &options.serial {
            None => 0,
            Some(want) => serials.iter().position(|s| s == want).ok_or_else(|| {
                RealSenseError::WrongSerial {
                    wanted: want.clone(),
                    found: serials.clone(),
                }
            })?,
        };
        let device = &devices[index];
        let serial = serials[index].clone();
        let name = info(device, Rs2CameraInfo::Name).unwrap_or_else(|| "RealSense".into());
        let label = format!("{name} (serial {serial})");
        let firmware = info(device, Rs2CameraInfo::FirmwareVersion).unwrap_or_default();
        check_modes(device, &options, &label)?;

        let mut config = Config::new();
        let c_serial = CString::new(serial.clone())
            .map_err(|e| lib_err("selecting the device by serial", e))?;
        config
            .enable_device_from_serial(&c_serial)
            .map_err(|e| lib_err("selecting the device by serial", e))?;
        let (w, h, fps) = (options.width, options.height, options.fps);
        config
            .enable_stream(Rs2StreamKind::Depth, None, w, h, Rs2Format::Z16, fps)
            .map_err(|e| lib_err("enabling the depth stream", e))?;
        config
            .enable_stream(Rs2StreamKind::Color, None, w, h, Rs2Format::Rgb8, fps)
            .map_err(|e| lib_err("enabling the colour stream", e))?;
        let pipeline =
            InactivePipeline::try_from(&context).map_err(|e| lib_err("creating a pipeline", e))?;
        if !pipeline.can_resolve(&config) {
            return Err(RealSenseError::StreamNotSupported {
                device: label,
                stream: format!("colour RGB8 + depth Z16 at {w}x{h}@{fps} together"),
                reason: "librealsense cannot resolve this configuration".into(),
            });
        }
        let pipeline = pipeline
            .start(Some(config))
            .map_err(|e| lib_err("starting the streams", e))?;

        let colour_profile = pipeline
            .profile()
            .streams()
            .iter()
            .find(|s| s.kind() == Rs2StreamKind::Color)
            .ok_or_else(|| lib_err("reading the colour stream", "the pipeline has none"))?;
        let raw = colour_profile
            .intrinsics()
            .map_err(|e| lib_err("reading the colour intrinsics", e))?;
        let intrinsics = intrinsics_from_rs2(&Rs2IntrinsicsFields::from(&raw), "colour")?;
        let align =
            Align::new(Rs2StreamKind::Color, 1).map_err(|e| lib_err("creating align", e))?;

        let mut cam = RealSenseCamera {
            pipeline,
            align,
            _context: context,
            intrinsics,
            info: DeviceInfo {
                name,
                serial,
                firmware,
                depth_scale_m: 0.0,
            },
            options,
        };
        for _ in 0..cam.options.warmup_frames {
            cam.next_aligned()?;
        }
        // The scale comes from the depth sensor (rs2_get_depth_units on the frame's sensor).
        let (_, depth, _) = cam.next_aligned()?;
        cam.info.depth_scale_m = depth
            .depth_units()
            .map_err(|e| lib_err("reading the depth scale", e))?;
        Ok(cam)
    }

    /// Who the opened device is, depth scale included.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn label(&self) -> String {
        format!("{} (serial {})", self.info.name, self.info.serial)
    }

    /// One aligned pair: (colour, depth, timestamp ms).
    fn next_aligned(&mut self) -> Result<(RgbImage, DepthFrame, f64), RealSenseError> {
        let timeout = self.options.timeout;
        let frames = self.pipeline.wait(Some(timeout)).map_err(|e| match e {
            FrameWaitError::DidTimeoutBeforeFrameArrival => RealSenseError::Timeout {
                device: self.label(),
                timeout,
            },
            other => lib_err("waiting for frames", other),
        })?;
        self.align
            .queue(frames)
            .map_err(|e| lib_err("aligning depth to colour", e))?;
        let aligned = self
            .align
            .wait(timeout)
            .map_err(|_| RealSenseError::Timeout {
                device: self.label(),
                timeout,
            })?;
        let colour = aligned
            .frames_of_type::<ColorFrame>()
            .into_iter()
            .next()
            .ok_or_else(|| lib_err("aligning depth to colour", "no colour frame in the set"))?;
        let depth = aligned
            .frames_of_type::<DepthFrame>()
            .into_iter()
            .next()
            .ok_or_else(|| lib_err("aligning depth to colour", "no depth frame in the set"))?;
        let (w, h) = (colour.width(), colour.height());
        let mut rgb = Vec::with_capacity(w * h * 3);
        for px in colour.iter() {
            match px {
                PixelKind::Rgb8 { r, g, b } | PixelKind::Bgr8 { r, g, b } => {
                    rgb.extend_from_slice(&[*r, *g, *b])
                }
                _ => {
                    return Err(lib_err(
                        "reading the colour frame",
                        format!(
                            "unexpected pixel format {:?}",
                            colour.stream_profile().format()
                        ),
                    ))
                }
            }
        }
        let rgb = RgbImage::from_raw(w as u32, h as u32, rgb)
            .ok_or_else(|| lib_err("reading the colour frame", "short buffer"))?;
        let stamp_ms = colour.timestamp();
        Ok((rgb, depth, stamp_ms))
    }
}

fn depth_units(depth: &DepthFrame) -> Result<Vec<u16>, RealSenseError> {
    depth
        .iter()
        .map(|px| match px {
            PixelKind::Z16 { depth } => Ok(*depth),
            _ => Err(lib_err(
                "reading the depth frame",
                format!(
                    "unexpected pixel format {:?}",
                    depth.stream_profile().format()
                ),
            )),
        })
        .collect()
}

impl From<&sys::rs2_intrinsics> for Rs2IntrinsicsFields {
    fn from(k: &sys::rs2_intrinsics) -> Self {
        Rs2IntrinsicsFields {
            width: k.width,
            height: k.height,
            ppx: k.ppx,
            ppy: k.ppy,
            fx: k.fx,
            fy: k.fy,
            model: k.model as i32,
            coeffs: k.coeffs,
        }
    }
}

impl From<&Rs2Intrinsics> for Rs2IntrinsicsFields {
    fn from(k: &Rs2Intrinsics) -> Self {
        Rs2IntrinsicsFields::from(&k.0)
    }
}

/// Checks that the device has each stream in the wanted mode, so the error can name the stream
/// that is missing and the sizes it does offer (the pipeline would only say "cannot resolve").
fn check_modes(device: &Device, o: &RealSenseOptions, label: &str) -> Result<(), RealSenseError> {
    let wanted = [
        (Rs2StreamKind::Color, Rs2Format::Rgb8, "colour RGB8"),
        (Rs2StreamKind::Depth, Rs2Format::Z16, "depth Z16"),
    ];
    let profiles: Vec<_> = device
        .sensors()
        .iter()
        .flat_map(|s| s.stream_profiles())
        .collect();
    for (kind, format, what) in wanted {
        let mut sizes: Vec<String> = Vec::new();
        let mut found = false;
        for p in profiles
            .iter()
            .filter(|p| p.kind() == kind && p.format() == format)
        {
            let Ok(k) = p.intrinsics() else { continue };
            let fps = usize::try_from(p.framerate()).unwrap_or(0);
            if (k.width(), k.height(), fps) == (o.width, o.height, o.fps) {
                found = true;
                break;
            }
            let s = format!("{}x{}@{}", k.width(), k.height(), fps);
            if !sizes.contains(&s) {
                sizes.push(s);
            }
        }
        if !found {
            return Err(RealSenseError::StreamNotSupported {
                device: label.to_string(),
                stream: format!("{what} at {}x{}@{}", o.width, o.height, o.fps),
                reason: if sizes.is_empty() {
                    "the device has no such stream".into()
                } else {
                    format!("it offers {}", sizes.join(", "))
                },
            });
        }
    }
    Ok(())
}

impl Camera for RealSenseCamera {
    /// `median_frames` aligned pairs; depth = their per-pixel temporal median (zeros ignored),
    /// colour and time stamp = the last pair's.
    fn capture(&mut self) -> Result<Frame, CameraError> {
        let n = self.options.median_frames;
        let mut raws: Vec<Vec<u16>> = Vec::with_capacity(n);
        let mut last = None;
        for _ in 0..n {
            let (rgb, depth, stamp_ms) = self.next_aligned()?;
            raws.push(depth_units(&depth)?);
            last = Some((rgb, depth.width(), depth.height(), stamp_ms));
        }
        let Some((rgb, w, h, stamp_ms)) = last else {
            return Err(RealSenseError::Median("no frames".into()).into());
        };
        let slices: Vec<&[u16]> = raws.iter().map(Vec::as_slice).collect();
        let units = temporal_median(&slices)?;
        let depth = depth_from_units(w, h, &units, self.info.depth_scale_m)?;
        let frame = Frame {
            rgb,
            depth,
            intrinsics: self.intrinsics.clone(),
            base_from_camera: self.options.base_from_camera,
            stamp_s: stamp_ms / 1000.0,
        };
        frame.validate()?;
        Ok(frame)
    }
}
