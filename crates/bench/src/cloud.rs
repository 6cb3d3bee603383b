//! `pointact bench cloud`: depth image → base-frame point cloud, against numpy in the same run.
//!
//! Both sides convert the same synthetic 640x480 tabletop depth image (table, three boxes, a
//! sprinkling of holes) with the same intrinsics, transform, crop box and depth range, from
//! per-pixel rays computed once outside the timed loop. The numpy peer is
//! `benches/cloud_numpy.py`, embedded here and written to a temporary folder with the image, so
//! the benchmark runs from any working directory. Throughput is reported in input pixels per
//! second (Mpix/s = million depth samples converted per second), the measure that does not
//! depend on how many points the crop keeps; both sides must keep the same number of points.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::geometry::synthetic::camera_look_at;
use crate::geometry::synthetic::TabletopScene;
use crate::geometry::{
    CloudOptions, CropBox, DepthImage, Distortion, GeometryError, Intrinsics, PointCloud, RayTable,
};
use crate::nalgebra::{Isometry3, Point3, Vector3};

/// The numpy peer, embedded so the binary does not depend on the source tree.
const NUMPY_PEER: &str = include_str!("../../../benches/cloud_numpy.py");

/// Options of `pointact bench cloud`.
pub struct CloudBenchArgs {
    /// Timed repetitions per implementation.
    pub iters: usize,
    /// Python interpreter (with numpy) for the peer.
    pub python: String,
}

/// Errors of the benchmark itself (a missing Python is not one: it is reported in the output).
#[derive(Debug, thiserror::Error)]
pub enum CloudBenchError {
    /// Setting up the scene or converting it failed.
    #[error("bench cloud: {0}")]
    Geometry(#[from] GeometryError),
    /// Writing the peer's inputs failed.
    #[error("bench cloud: cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Bad arguments.
    #[error("bench cloud: {0}")]
    Args(String),
    /// The multi-threaded result differs from the single-threaded one (a bug: please report).
    #[error("bench cloud: {0}")]
    Mismatch(String),
}

/// What the numpy peer measured, or why it could not run.
#[derive(Clone, Debug)]
pub enum PeerResult {
    /// The peer ran.
    Measured {
        numpy_version: String,
        mpix_per_s: f64,
        ms_per_iter: f64,
        points: usize,
        checksum: f64,
    },
    /// Python or numpy is missing, or the peer failed; the message says what to do.
    Unavailable(String),
}

/// One timed Rust configuration.
#[derive(Clone, Debug)]
pub struct RustRun {
    /// Threads used by the conversion.
    pub threads: usize,
    /// Throughput, million input pixels per second.
    pub mpix_per_s: f64,
    /// Time per conversion.
    pub ms_per_iter: f64,
}

/// One benchmarked camera model.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// Short description of the case.
    pub name: String,
    /// Points the Rust conversion kept.
    pub points: usize,
    /// Sum of all coordinates of the Rust cloud (compared with the peer's).
    pub checksum: f64,
    /// One thread, then (on a multi-core machine) all of them.
    pub rust: Vec<RustRun>,
    /// The numpy peer.
    pub peer: PeerResult,
}

/// Result of `pointact bench cloud`; `Display` prints the figures and ratios.
#[derive(Clone, Debug)]
pub struct CloudBenchReport {
    /// The CPU it ran on (model and widest vector unit).
    pub cpu: String,
    /// Image width.
    pub width: usize,
    /// Image height.
    pub height: usize,
    /// Timed repetitions.
    pub iters: usize,
    /// One entry per camera model.
    pub cases: Vec<CaseReport>,
}

impl fmt::Display for CloudBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "bench cloud: {}x{} depth -> base-frame cloud (crop box, depth range, ~3 % holes), \
             {} timed iterations per run; Mpix/s = input pixels converted per second. Rust reuses \
             its output buffers (RayTable::cloud_into); numpy runs its element-wise passes on one \
             thread.",
            self.width, self.height, self.iters,
        )?;
        writeln!(f, "  cpu: {}", self.cpu)?;
        for c in &self.cases {
            writeln!(f, "  {} ({} points kept)", c.name, c.points)?;
            let numpy = match &c.peer {
                PeerResult::Measured {
                    numpy_version,
                    mpix_per_s,
                    ms_per_iter,
                    points,
                    checksum,
                } => {
                    let agree = if *points == c.points {
                        let rel = (checksum - c.checksum).abs() / c.checksum.abs().max(1.0);
                        format!("same point count, checksum rel. diff {rel:.1e}")
                    } else {
                        format!("POINT COUNT DIFFERS: numpy {points} vs rust {}", c.points)
                    };
                    writeln!(
                        f,
                        "    numpy {numpy_version:<9}: {mpix_per_s:8.1} Mpix/s ({ms_per_iter:.3} ms/frame); {agree}"
                    )?;
                    Some(*mpix_per_s)
                }
                PeerResult::Unavailable(why) => {
                    writeln!(f, "    numpy          : not measured: {why}")?;
                    None
                }
            };
            for r in &c.rust {
                let ratio = numpy
                    .map(|n| format!(", {:.1}x numpy", r.mpix_per_s / n))
                    .unwrap_or_default();
                writeln!(
                    f,
                    "    rust {} thread{} : {:8.1} Mpix/s ({:.3} ms/frame){ratio}",
                    r.threads,
                    if r.threads == 1 { " " } else { "s" },
                    r.mpix_per_s,
                    r.ms_per_iter,
                )?;
            }
        }
        Ok(())
    }
}

/// Runs the benchmark: for a pinhole and a Brown-Conrady camera, converts the scene `iters` times
/// in Rust, then runs the numpy peer on the same inputs.
pub fn run(args: &CloudBenchArgs) -> Result<CloudBenchReport, CloudBenchError> {
    if args.iters == 0 {
        return Err(CloudBenchError::Args("--iters must be >= 1".into()));
    }
    // Camera 0.6 m in front of the workspace centre and 0.55 m up, looking down at it.
    let base_from_camera = camera_look_at(
        Point3::new(0.95, 0.0, 0.55),
        Point3::new(0.38, 0.0, 0.0),
        Vector3::z(),
    )?;
    let opts = CloudOptions {
        stride: 1,
        crop: Some(CropBox {
            min: [0.05, -0.45, -0.02],
            max: [0.85, 0.45, 0.40],
        }),
        depth_min_m: 0.1,
        depth_max_m: 3.0,
        threads: 1,
    };
    let cases = [
        (
            "D435 depth 640x480, pinhole",
            Intrinsics::pinhole(640, 480, 384.21, 384.21, 319.48, 236.35),
        ),
        (
            "L515 colour-aligned, Brown-Conrady",
            Intrinsics {
                model: Distortion::BrownConrady,
                coeffs: [0.1715, -0.5263, -0.00121, 0.00043, 0.4874],
                ..Intrinsics::pinhole(640, 480, 600.3, 600.1, 322.7, 241.9)
            },
        ),
    ];
    let scene = TabletopScene::example();
    let mut reports = Vec::new();
    for (name, intrinsics) in cases {
        let rays = RayTable::new(&intrinsics)?;
        let depth = with_holes(scene.render(&rays, &base_from_camera));

        let first = rays.cloud(&depth, &base_from_camera, &opts)?; // the checked result
        let pixels = (depth.width * depth.height) as f64;
        let mut thread_counts = vec![1];
        let all = CloudOptions {
            threads: 0,
            ..opts.clone()
        }
        .resolved_threads();
        if all > 1 {
            thread_counts.push(all);
        }
        let mut rust = Vec::new();
        let mut out = PointCloud::default();
        for threads in thread_counts {
            let run_opts = CloudOptions {
                threads,
                ..opts.clone()
            };
            rays.cloud_into(&depth, &base_from_camera, &run_opts, &mut out)?; // warm-up
            let start = Instant::now();
            for _ in 0..args.iters {
                rays.cloud_into(&depth, &base_from_camera, &run_opts, &mut out)?;
                std::hint::black_box(&out);
            }
            let secs = start.elapsed().as_secs_f64() / args.iters as f64;
            if out != first {
                return Err(CloudBenchError::Mismatch(format!(
                    "the {threads}-thread cloud differs from the 1-thread cloud"
                )));
            }
            rust.push(RustRun {
                threads,
                mpix_per_s: pixels / secs / 1e6,
                ms_per_iter: secs * 1e3,
            });
        }
        let checksum = first
            .points
            .iter()
            .map(|p| p[0] as f64 + p[1] as f64 + p[2] as f64)
            .sum();
        let peer = run_peer(
            &args.python,
            &intrinsics,
            &depth,
            &base_from_camera,
            &opts,
            args.iters,
        )?;
        reports.push(CaseReport {
            name: name.to_string(),
            points: first.len(),
            checksum,
            rust,
            peer,
        });
    }
    Ok(CloudBenchReport {
        cpu: crate::cpu_model(),
        width: 640,
        height: 480,
        iters: args.iters,
        cases: reports,
    })
}

/// Knocks out a deterministic ~3 % of pixels (0 and NaN), as real depth has holes, so both sides
/// pay for the validity test.
fn with_holes(mut depth: DepthImage) -> DepthImage {
    for (i, d) in depth.data.iter_mut().enumerate() {
        let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58; // 0..63
        if h == 0 {
            *d = 0.0;
        } else if h == 1 {
            *d = f32::NAN;
        }
    }
    depth
}

/// Writes the peer's inputs to a fresh temporary folder, runs it, and removes the folder.
fn run_peer(
    python: &str,
    intrinsics: &Intrinsics,
    depth: &DepthImage,
    base_from_camera: &Isometry3<f64>,
    opts: &CloudOptions,
    iters: usize,
) -> Result<PeerResult, CloudBenchError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "pointact-bench-cloud-{}-{nanos}",
        std::process::id()
    ));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CloudBenchError::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let result = write_and_run(
        &dir,
        python,
        intrinsics,
        depth,
        base_from_camera,
        opts,
        iters,
    );
    let _ = std::fs::remove_dir_all(&dir); // best effort: it is a temporary folder
    result
}

fn write_and_run(
    dir: &Path,
    python: &str,
    intrinsics: &Intrinsics,
    depth: &DepthImage,
    base_from_camera: &Isometry3<f64>,
    opts: &CloudOptions,
    iters: usize,
) -> Result<PeerResult, CloudBenchError> {
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|source| CloudBenchError::Io {
            path: path.clone(),
            source,
        })?;
        Ok::<PathBuf, CloudBenchError>(path)
    };
    let script = write("cloud_numpy.py", NUMPY_PEER.as_bytes())?;
    let raw: Vec<u8> = depth.data.iter().flat_map(|d| d.to_le_bytes()).collect();
    let depth_file = write("depth.f32", &raw)?;
    let m = base_from_camera.to_homogeneous();
    let rows: Vec<[f64; 4]> = (0..4)
        .map(|r| [m[(r, 0)], m[(r, 1)], m[(r, 2)], m[(r, 3)]])
        .collect();
    let crop = opts.crop.unwrap_or(CropBox {
        min: [f64::MIN; 3],
        max: [f64::MAX; 3],
    });
    let spec = serde_json::json!({
        "depth_file": depth_file,
        "width": depth.width,
        "height": depth.height,
        "intrinsics": {
            "fx": intrinsics.fx, "fy": intrinsics.fy, "cx": intrinsics.cx, "cy": intrinsics.cy,
            "model": intrinsics.model.name(), "coeffs": intrinsics.coeffs,
        },
        "base_from_camera": rows,
        "crop_min": crop.min,
        "crop_max": crop.max,
        "depth_min_m": opts.depth_min_m,
        "depth_max_m": if opts.depth_max_m.is_finite() { opts.depth_max_m as f64 } else { f64::MAX },
        "iters": iters,
    });
    let spec_file = write("spec.json", spec.to_string().as_bytes())?;

    let output = match Command::new(python).arg(&script).arg(&spec_file).output() {
        Ok(o) => o,
        Err(e) => {
            return Ok(PeerResult::Unavailable(format!(
                "cannot run `{python}` ({e}); install Python 3 with numpy or pass --python PATH"
            )))
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or("");
    let parsed: Option<serde_json::Value> = serde_json::from_str(line).ok();
    if let Some(err) = parsed
        .as_ref()
        .and_then(|v| v.get("error"))
        .and_then(|e| e.as_str())
    {
        return Ok(PeerResult::Unavailable(format!("`{python}`: {err}")));
    }
    let field = |k: &str| {
        parsed
            .as_ref()
            .and_then(|v| v.get(k))
            .and_then(|x| x.as_f64())
    };
    match (
        output.status.success(),
        field("mpix_per_s"),
        field("seconds_per_iter"),
        field("points"),
        field("checksum"),
    ) {
        (true, Some(mpix), Some(secs), Some(points), Some(checksum)) => Ok(PeerResult::Measured {
            numpy_version: parsed
                .as_ref()
                .and_then(|v| v.get("numpy"))
                .and_then(|x| x.as_str())
                .unwrap_or("?")
                .to_string(),
            mpix_per_s: mpix,
            ms_per_iter: secs * 1e3,
            points: points as usize,
            checksum,
        }),
        _ => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: String = stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            Ok(PeerResult::Unavailable(format!(
                "the numpy peer failed ({}): {tail}",
                output.status
            )))
        }
    }
}
