//! Eye-to-hand calibration: solve AX = XB for a fixed camera watching a target held by the gripper.
//!
//! # The problem
//! Each sample `i` pairs the robot's pose `T_i = base_from_gripper` (forward kinematics) with the
//! target's pose `C_i = camera_from_target` (PnP on a tag). Two transforms are unknown and
//! constant: `X = base_from_camera` (what we want, the convention of
//! [`crate::geometry::Extrinsics`]) and `Y = gripper_from_target` (where the tag sits in the
//! gripper). Both chains reach the target: `T_i Y = X C_i`. Eliminating `Y` between samples `i`
//! and `j` gives
//!
//! ```text
//! A_ij X = X B_ij,   A_ij = T_j T_i⁻¹ (gripper motion, base frame),   B_ij = C_j C_i⁻¹ (target motion, camera frame)
//! ```
//!
//! the classic hand-eye equation. (OpenCV's `calibrateHandEye` solves the eye-in-hand form; fed
//! `gripper_from_base` poses it forms the same `A_ij` and returns the same `X`.) Both methods are
//! separable: rotation first from `R_A R_X = R_X R_B`, then translation from
//! `(R_A − I) t_X = R_X t_B − t_A`, each over **all** pairs `i < j` (more equations than
//! consecutive pairs, and the same pairs OpenCV uses, so the two can be compared) — except that
//! Tsai-Lenz by default leaves out the pairs OpenCV 4.10 and later leave out (below).
//!
//! * [`Method::TsaiLenz`] — R. Tsai, R. Lenz, "A new technique for fully autonomous and efficient
//!   3D robotics hand/eye calibration", IEEE T-RA 5(3), 1989. Rotations as modified Rodrigues
//!   vectors `P = 2 sin(θ/2) n`; since `P_A = R_X P_B`, the Cayley form of `R_X` gives the linear
//!   system `skew(P_A + P_B) c = P_B − P_A` with `c = tan(φ/2) u` for `R_X = Rot(u, φ)`.
//! * [`Method::ParkMartin`] — F. Park, B. Martin, "Robot sensor calibration: solving AX = XB on
//!   the Euclidean group", IEEE T-RA 10(5), 1994. With `α = log R_A`, `β = log R_B`
//!   (axis·angle), `α = R_X β`; the least-squares rotation is `R_X = (MᵀM)^{-1/2} Mᵀ`,
//!   `M = Σ β αᵀ`.
//!
//! Tsai's `c = tan(φ/2) u` grows without bound as the camera's rotation in the base frame nears
//! 180°, which is where real cameras can sit (a camera beside the robot looking at it level is
//! exactly 180°; `calibration/example.toml` is 148°). So when the direct solution turns more than
//! [`TSAI_REPARAMETRISE_ABOVE_DEG`] or its system is badly conditioned, we solve the same
//! equations for `X' = X R₀ᵀ` (i.e. with `B' = R₀ B R₀ᵀ`) for `R₀` a 90° turn about x, y or z,
//! keep the well-conditioned one with the smallest `X'` and return `X = X' R₀`. For any `X` one
//! of the three leaves `X'` at most ~132° (see `tsai_rotation`). Park-Martin has no such
//! singularity.
//!
//! # OpenCV 4.10's pair filter (Tsai-Lenz only)
//! From 4.10.0 on, OpenCV's `calibrateHandEyeTsai` (modules/calib3d/src/calibration_handeye.cpp,
//! opencv/opencv PR #24897) skips every pair `i < j` for which the gripper motion's or the target
//! motion's `‖P‖ = 2 sin(θ/2)` lies outside `[0.3, 1.7]`, i.e. either turns less than ~17.25° or
//! more than ~116.42°: the pair is left out of both the rotation and the translation system. If
//! fewer than two pairs remain it logs "Not enough informative motions" and returns the identity
//! rotation and a zero translation. Up to 4.9 every pair was used. [`TsaiOptions`] selects the rule;
//! the default follows current OpenCV, and where too few pairs remain we return
//! [`HandEyeError::TooFewInformativeMotions`] instead of an identity. Park-Martin is unchanged in
//! OpenCV and here.
//!
//! With the filter off the result is OpenCV 4.9's, except when some motion turns 120° or more:
//! there OpenCV's `rot2quatMinimal` stops taking the quaternion with `w > 0` and can give the
//! gripper and the target motion of one pair opposite signs, which wrecks its rotation solve
//! (`front_wide_motions` in the golden fixture: 0.78 m and 121° off); `modified_rodrigues` takes
//! `w ≥ 0` for both, so ours stays within the noise. The 4.10 filter drops every such pair.

use crate::nalgebra::{
    DMatrix, DVector, Isometry3, Matrix3, Rotation3, Translation3, UnitQuaternion, Vector3,
};

/// Fewest samples: two motions with non-parallel axes need three poses (OpenCV says the same;
/// use 10–20 in practice).
pub(crate) const MIN_SAMPLES: usize = 3;

/// The most samples a solve takes: every pair of them is a motion, so memory and time grow with
/// the square (1000 samples are half a million motions, ~100 MB; 20 000 would be 200 million).
pub const MAX_SAMPLES: usize = 1000;

/// The largest gripper rotation between any two samples must reach this. Below it every motion
/// axis is mostly noise. This is the floor that rejects unusable data, not a quality target:
/// good data tilts the target 20–40° between poses.
pub(crate) const MIN_ROTATION_DEG: f64 = 10.0;

/// Motions (sample pairs) turning less than this are left out of the axis-spread check: their
/// axis is too noisy to count.
pub(crate) const AXIS_MOTION_MIN_DEG: f64 = 5.0;

/// The rotation axes of two motions must differ by at least this much. With every axis
/// parallel, the camera's rotation about that axis and its position along it are not
/// observable, and residuals do not show it (the tag offset absorbs the error), so this is
/// rejected up front rather than reported as a fit.
pub(crate) const MIN_AXIS_SPREAD_DEG: f64 = 10.0;

/// Tsai-Lenz: rotations of `X` above this are re-solved in a pre-rotated frame (module docs).
///
/// High enough that ordinary cameras (up to ~150°) get the plain method, identical to OpenCV's
/// (the pre-rotated solve weights the equations differently and moves a noisy estimate by up to
/// ~0.1°, measured on the golden fixture); low enough that `tan(φ/2)` stays below ~4.
pub(crate) const TSAI_REPARAMETRISE_ABOVE_DEG: f64 = 150.0;

/// Tsai-Lenz: below this ratio of smallest to largest singular value the direct system counts as
/// badly conditioned and is re-solved in a pre-rotated frame too.
const TSAI_MIN_CONDITION_RATIO: f64 = 0.05;

/// Largest accepted `| |q| − 1 |` of an input rotation quaternion.
const UNIT_TOLERANCE: f64 = 1e-6;

/// OpenCV ≥ 4.10 Tsai pair filter: a motion whose `2 sin(θ/2)` is below this (θ < ~17.25°) is
/// skipped.
pub(crate) const OPENCV_PAIR_FILTER_MIN: f64 = 0.3;

/// OpenCV ≥ 4.10 Tsai pair filter: a motion whose `2 sin(θ/2)` is above this (θ > ~116.42°) is
/// skipped.
pub(crate) const OPENCV_PAIR_FILTER_MAX: f64 = 1.7;

/// OpenCV ≥ 4.10 Tsai pair filter: fewer motions than this left after filtering is a failure
/// (OpenCV: `if (idx < 2)`).
pub(crate) const OPENCV_PAIR_FILTER_MIN_MOTIONS: usize = 2;

/// One robot pose and the target pose the camera saw there.
#[derive(Clone, Debug, PartialEq)]
pub struct HandEyeSample {
    /// Gripper (tool) frame → robot base frame, from forward kinematics.
    pub base_from_gripper: Isometry3<f64>,
    /// Target frame → camera optical frame (OpenCV axes), from PnP on the tag.
    pub camera_from_target: Isometry3<f64>,
}

/// The AX = XB solver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Tsai & Lenz 1989 (OpenCV `CALIB_HAND_EYE_TSAI`).
    TsaiLenz,
    /// Park & Martin 1994 (OpenCV `CALIB_HAND_EYE_PARK`).
    ParkMartin,
}

impl Method {
    /// Name written to `[meta]` and printed: `tsai-lenz` or `park-martin`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Method::TsaiLenz => "tsai-lenz",
            Method::ParkMartin => "park-martin",
        }
    }
}

impl std::fmt::Display for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "tsai" | "tsai-lenz" => Ok(Method::TsaiLenz),
            "park" | "park-martin" => Ok(Method::ParkMartin),
            other => Err(format!(
                "unknown hand-eye method `{other}` (expected tsai or park)"
            )),
        }
    }
}

/// Options of the Tsai-Lenz solve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsaiOptions {
    /// OpenCV ≥ 4.10's rule (module docs): leave out of both solves every pair of samples whose
    /// gripper motion or target motion has `2 sin(θ/2)` outside
    /// [[`OPENCV_PAIR_FILTER_MIN`], [`OPENCV_PAIR_FILTER_MAX`]] (θ outside ~17.25°..116.42°), and
    /// fail with [`HandEyeError::TooFewInformativeMotions`] when fewer than
    /// [`OPENCV_PAIR_FILTER_MIN_MOTIONS`] remain. Default `true` (parity with OpenCV 4.10 and
    /// later); `false` uses every pair, as OpenCV up to 4.9 does.
    pub opencv_4_10_pair_filter: bool,
}

impl Default for TsaiOptions {
    fn default() -> Self {
        TsaiOptions {
            opencv_4_10_pair_filter: true,
        }
    }
}

/// What [`solve_eye_to_hand`] runs: the method and its options. A bare [`Method`] converts to
/// this with default options, so `solve_eye_to_hand(samples, Method::TsaiLenz)` follows current
/// OpenCV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandEyeOptions {
    /// The solver.
    pub method: Method,
    /// Used when `method` is [`Method::TsaiLenz`], ignored otherwise.
    pub tsai: TsaiOptions,
}

impl From<Method> for HandEyeOptions {
    fn from(method: Method) -> Self {
        HandEyeOptions {
            method,
            tsai: TsaiOptions::default(),
        }
    }
}

/// How far one sample is from the solution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SampleResidual {
    /// Angle between the two predicted target orientations, degrees.
    pub rotation_deg: f64,
    /// Distance between the two predicted target positions, millimetres.
    pub translation_mm: f64,
}

/// Chain-closure residuals: for each sample the target pose in the base frame predicted through
/// the robot (`T_i Y`) against the one predicted through the camera (`X C_i`).
///
/// Why this measure: it is in the units that matter downstream (where the camera puts a point in
/// the robot's frame, at the working distance of the tag), it is per sample (a bad detection or a
/// mismatched pose/image pair stands out), and it does not depend on the method. `Y` is fitted
/// to the same samples (their mean), so the numbers are the spread of the base-frame target
/// predictions, not an independent accuracy: a few mm and a few tenths of a degree is normal;
/// centimetres mean a convention mix-up (an inverted pose, a gripper pose from another sample).
#[derive(Clone, Debug, PartialEq)]
pub struct Residuals {
    /// One per input sample, in input order.
    pub per_sample: Vec<SampleResidual>,
    /// Root mean square of the rotation residuals, degrees.
    pub rotation_rms_deg: f64,
    /// Largest rotation residual, degrees.
    pub rotation_max_deg: f64,
    /// Root mean square of the translation residuals, millimetres.
    pub translation_rms_mm: f64,
    /// Largest translation residual, millimetres.
    pub translation_max_mm: f64,
}

/// The calibration.
#[derive(Clone, Debug, PartialEq)]
pub struct HandEyeSolution {
    /// Camera optical frame → robot base frame ([`crate::geometry::Extrinsics`]'s convention).
    pub base_from_camera: Isometry3<f64>,
    /// Target frame → gripper frame (where the tag sits on the gripper).
    pub gripper_from_target: Isometry3<f64>,
    /// How well the samples agree with the solution.
    pub residuals: Residuals,
    /// The solver that produced it.
    pub method: Method,
    /// The Tsai-Lenz options used (`None` for Park-Martin).
    pub tsai: Option<TsaiOptions>,
    /// Pairs of samples (motions) in the solve: all `n (n − 1) / 2`, unless the Tsai pair filter
    /// left some out.
    pub motions_used: usize,
}

/// Why a set of samples cannot be solved. Each message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum HandEyeError {
    /// Fewer samples than two independent motions need.
    #[error(
        "hand-eye calibration needs at least {needed} robot poses, got {got}: record more poses \
         (10-20 is typical), tilting the target differently at each"
    )]
    TooFewSamples {
        /// Samples given.
        got: usize,
        /// The fewest the solve accepts.
        needed: usize,
    },

    /// More samples than the all-pairs solve takes.
    #[error(
        "hand-eye calibration takes at most {max} robot poses, got {got}: the solve uses every          pair of poses ({got} poses are {pairs} pairs), and 10-40 well-spread poses are plenty:          keep a subset"
    )]
    TooManySamples {
        /// Samples given.
        got: usize,
        /// The most the solve accepts ([`MAX_SAMPLES`]).
        max: usize,
        /// The pairs they would make.
        pairs: u64,
    },

    /// NaN or infinity in an input pose.
    #[error("sample {sample}: `{field}` holds a non-finite number (NaN or infinity)")]
    NonFinite {
        /// Index of the sample.
        sample: usize,
        /// Which pose: `base_from_gripper` or `camera_from_target`.
        field: &'static str,
    },

    /// A rotation that is not a unit quaternion.
    #[error("sample {sample}: `{field}` rotation is not a unit quaternion (norm {norm})")]
    NotARotation {
        /// Index of the sample.
        sample: usize,
        /// Which pose: `base_from_gripper` or `camera_from_target`.
        field: &'static str,
        /// The quaternion's norm (1 for a rotation).
        norm: f64,
    },

    /// The gripper hardly turned between any two samples.
    #[error(
        "degenerate motion: the gripper turns at most {max_deg:.2}° between any two poses, need \
         at least {needed_deg}°; tilt the target by 20-40° between poses (pure translations do \
         not constrain the rotation)"
    )]
    TooLittleRotation {
        /// Largest gripper rotation between any two samples, degrees.
        max_deg: f64,
        /// The least that is accepted, degrees.
        needed_deg: f64,
    },

    /// Every motion turns about (nearly) the same axis.
    #[error(
        "degenerate motion: all rotations between poses are about one axis (the axes differ by \
         at most {spread_deg:.2}°, need {needed_deg}°); the camera's rotation about that axis is \
         then unobservable. Tilt the target about a second axis (e.g. roll as well as pitch the \
         gripper) and record again"
    )]
    SingleAxis {
        /// Largest angle between the motions' rotation axes, degrees.
        spread_deg: f64,
        /// The least spread that is accepted, degrees.
        needed_deg: f64,
    },

    /// OpenCV 4.10's Tsai pair filter ([`TsaiOptions::opencv_4_10_pair_filter`]) left fewer than
    /// [`OPENCV_PAIR_FILTER_MIN_MOTIONS`] motions (OpenCV then returns the identity).
    #[error(
        "hand-eye tsai-lenz: only {kept} of {total} motions between poses turn by 17.3-116.4° \
         for both the gripper and the target (OpenCV 4.10's Tsai pair filter: 2 sin(θ/2) within \
         [0.3, 1.7]), need at least {needed}; tilt the target by 20-40° between poses, or use \
         the park method"
    )]
    TooFewInformativeMotions {
        /// Motions that passed the filter.
        kept: usize,
        /// Motions considered: one between every two samples.
        total: usize,
        /// The fewest motions the solve needs ([`OPENCV_PAIR_FILTER_MIN_MOTIONS`]).
        needed: usize,
    },

    /// A linear system without a unique solution despite the checks above (e.g. inconsistent
    /// camera poses).
    #[error("hand-eye {method}: {what}; check that each camera pose belongs to its robot pose")]
    Singular {
        /// The solver that failed.
        method: Method,
        /// What failed in the solve (which system, or a reflection).
        what: &'static str,
    },
}

/// Solves eye-to-hand calibration: `base_from_camera` and `gripper_from_target` from pose pairs.
///
/// Checks the input first (count, finite numbers, unit rotations, enough rotation about more
/// than one axis) so that degenerate data gives a typed error instead of a confident wrong
/// answer. `options` is a [`Method`] (default options: Tsai-Lenz with OpenCV 4.10's pair filter)
/// or a [`HandEyeOptions`].
pub fn solve_eye_to_hand(
    samples: &[HandEyeSample],
    options: impl Into<HandEyeOptions>,
) -> Result<HandEyeSolution, HandEyeError> {
    let HandEyeOptions { method, tsai } = options.into();
    check_samples(samples)?;
    check_motion(samples)?;
    let mut motions = motions(samples);
    if method == Method::TsaiLenz && tsai.opencv_4_10_pair_filter {
        let total = motions.len();
        motions.retain(opencv_informative);
        if motions.len() < OPENCV_PAIR_FILTER_MIN_MOTIONS {
            return Err(HandEyeError::TooFewInformativeMotions {
                kept: motions.len(),
                total,
                needed: OPENCV_PAIR_FILTER_MIN_MOTIONS,
            });
        }
    }
    let r_x = match method {
        Method::TsaiLenz => tsai_rotation(&motions)?,
        Method::ParkMartin => park_rotation(&motions)?,
    };
    let t_x = translation(&motions, &r_x, method)?;
    let base_from_camera = Isometry3::from_parts(
        Translation3::from(t_x),
        UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix_unchecked(r_x)),
    );
    let gripper_from_target = mean_target(samples, &base_from_camera);
    let residuals = residuals(samples, &base_from_camera, &gripper_from_target);
    Ok(HandEyeSolution {
        base_from_camera,
        gripper_from_target,
        residuals,
        method,
        tsai: (method == Method::TsaiLenz).then_some(tsai),
        motions_used: motions.len(),
    })
}

// ---- input checks ------------------------------------------------------------------------------

fn check_samples(samples: &[HandEyeSample]) -> Result<(), HandEyeError> {
    if samples.len() < MIN_SAMPLES {
        return Err(HandEyeError::TooFewSamples {
            got: samples.len(),
            needed: MIN_SAMPLES,
        });
    }
    if samples.len() > MAX_SAMPLES {
        let n = samples.len() as u64;
        return Err(HandEyeError::TooManySamples {
            got: samples.len(),
            max: MAX_SAMPLES,
            pairs: n * (n - 1) / 2,
        });
    }
    for (i, s) in samples.iter().enumerate() {
        for (field, iso) in [
            ("base_from_gripper", &s.base_from_gripper),
            ("camera_from_target", &s.camera_from_target),
        ] {
            let q = iso.rotation.quaternion();
            let finite = iso.translation.vector.iter().all(|x| x.is_finite())
                && q.coords.iter().all(|x| x.is_finite());
            if !finite {
                return Err(HandEyeError::NonFinite { sample: i, field });
            }
            let norm = q.norm();
            if (norm - 1.0).abs() > UNIT_TOLERANCE {
                return Err(HandEyeError::NotARotation {
                    sample: i,
                    field,
                    norm,
                });
            }
        }
    }
    Ok(())
}

/// Rejects motion that cannot determine the rotation: too little of it, or all about one axis.
/// Uses the robot side only (it is exact up to encoder resolution, and it is what the operator
/// controls).
fn check_motion(samples: &[HandEyeSample]) -> Result<(), HandEyeError> {
    let mut max_deg: f64 = 0.0;
    let mut axes: Vec<Vector3<f64>> = Vec::new();
    for (i, a) in samples.iter().enumerate() {
        for b in &samples[i + 1..] {
            let rel = b.base_from_gripper.rotation * a.base_from_gripper.rotation.inverse();
            let deg = rel.angle().to_degrees();
            max_deg = max_deg.max(deg);
            if deg >= AXIS_MOTION_MIN_DEG {
                if let Some(axis) = rel.axis() {
                    axes.push(axis.into_inner());
                }
            }
        }
    }
    if max_deg < MIN_ROTATION_DEG {
        return Err(HandEyeError::TooLittleRotation {
            max_deg,
            needed_deg: MIN_ROTATION_DEG,
        });
    }
    // Angle between axis *lines* (n and −n are the same axis), 0..90°. Stops at the first pair
    // that passes, so good data costs little however many poses it has.
    let mut spread_deg: f64 = 0.0;
    'pairs: for (i, a) in axes.iter().enumerate() {
        for b in &axes[i + 1..] {
            let c = a.dot(b).abs().min(1.0);
            spread_deg = spread_deg.max(c.acos().to_degrees());
            if spread_deg >= MIN_AXIS_SPREAD_DEG {
                break 'pairs;
            }
        }
    }
    if spread_deg < MIN_AXIS_SPREAD_DEG {
        return Err(HandEyeError::SingleAxis {
            spread_deg,
            needed_deg: MIN_AXIS_SPREAD_DEG,
        });
    }
    Ok(())
}

// ---- the solvers -------------------------------------------------------------------------------

/// One motion between samples `i < j`: `A = T_j T_i⁻¹`, `B = C_j C_i⁻¹`.
struct Motion {
    a: Isometry3<f64>,
    b: Isometry3<f64>,
}

fn motions(samples: &[HandEyeSample]) -> Vec<Motion> {
    let mut out = Vec::with_capacity(samples.len() * (samples.len() - 1) / 2);
    for (i, si) in samples.iter().enumerate() {
        for sj in &samples[i + 1..] {
            out.push(Motion {
                a: sj.base_from_gripper * si.base_from_gripper.inverse(),
                b: sj.camera_from_target * si.camera_from_target.inverse(),
            });
        }
    }
    out
}

/// OpenCV ≥ 4.10's test for a motion Tsai-Lenz keeps: `2 sin(θ/2)` of both the gripper and the
/// target rotation within [`OPENCV_PAIR_FILTER_MIN`, `OPENCV_PAIR_FILTER_MAX`] (bounds included:
/// OpenCV skips `< 0.3` or `> 1.7`).
fn opencv_informative(m: &Motion) -> bool {
    let range = OPENCV_PAIR_FILTER_MIN..=OPENCV_PAIR_FILTER_MAX;
    range.contains(&modified_rodrigues(&m.a.rotation).norm())
        && range.contains(&modified_rodrigues(&m.b.rotation).norm())
}

/// Whether a system whose extreme singular values (or eigenvalues) are `min` and `max` has a
/// unique solution in floating point: `max` positive and finite, `min` not lost in rounding
/// against it. NaN fails every comparison, so it counts as rank deficient.
fn full_rank(min: f64, max: f64) -> bool {
    max.is_finite() && max > 0.0 && min > max * 1e-12
}

fn skew(v: &Vector3<f64>) -> Matrix3<f64> {
    Matrix3::new(0.0, -v.z, v.y, v.z, 0.0, -v.x, -v.y, v.x, 0.0)
}

/// Tsai's modified Rodrigues vector `2 sin(θ/2) n`: twice the quaternion's vector part, with the
/// sign fixed so that `θ ∈ [0, π]`.
fn modified_rodrigues(q: &UnitQuaternion<f64>) -> Vector3<f64> {
    let v = q.imag();
    if q.w < 0.0 {
        -2.0 * v
    } else {
        2.0 * v
    }
}

/// Tsai-Lenz rotation, with the pre-rotation fallback of the module docs.
///
/// Why three 90° candidates suffice: for `X = Rot(u, π)` and `R₀ = Rot(e_k, π/2)`,
/// `tr(X R₀ᵀ) = 2 u_k² − 1`, so `X R₀ᵀ` turns by `acos(u_k² − 1)`; the largest `u_k²` is at
/// least 1/3, which bounds the angle by `acos(−2/3) ≈ 132°`. Rotations of `X` below 180° only do
/// better.
fn tsai_rotation(motions: &[Motion]) -> Result<Matrix3<f64>, HandEyeError> {
    let angle_deg = |r: &Matrix3<f64>| {
        UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix_unchecked(*r))
            .angle()
            .to_degrees()
    };
    // (X, conditioning ratio, rotation angle of the solved X').
    let mut candidates: Vec<(Matrix3<f64>, f64, f64)> = Vec::new();
    if let Some((r, ratio)) = tsai_rotation_in(motions, &UnitQuaternion::identity()) {
        let angle = angle_deg(&r);
        if angle <= TSAI_REPARAMETRISE_ABOVE_DEG && ratio >= TSAI_MIN_CONDITION_RATIO {
            return Ok(r);
        }
        candidates.push((r, ratio, angle));
    }
    for axis in [Vector3::x_axis(), Vector3::y_axis(), Vector3::z_axis()] {
        let r0 = UnitQuaternion::from_axis_angle(&axis, std::f64::consts::FRAC_PI_2);
        if let Some((r_prime, ratio)) = tsai_rotation_in(motions, &r0) {
            let r = r_prime * r0.to_rotation_matrix().into_inner();
            candidates.push((r, ratio, angle_deg(&r_prime)));
        }
    }
    // Smallest solved angle among well-conditioned systems (the Cayley parameter is then
    // smallest, so the least-squares fit is most linear); else the best-conditioned one.
    let well = candidates
        .iter()
        .filter(|c| c.1 >= TSAI_MIN_CONDITION_RATIO)
        .min_by(|a, b| a.2.total_cmp(&b.2));
    let best = well.or_else(|| candidates.iter().max_by(|a, b| a.1.total_cmp(&b.1)));
    best.map(|c| c.0).ok_or(HandEyeError::Singular {
        method: Method::TsaiLenz,
        what: "the rotation system has no unique solution",
    })
}

/// Solves Tsai's rotation system for `X' = X R₀ᵀ` (motions `A`, `R₀ B R₀ᵀ`). Returns `X'` and
/// the system's smallest-to-largest singular value ratio, or `None` when it is rank deficient.
fn tsai_rotation_in(motions: &[Motion], r0: &UnitQuaternion<f64>) -> Option<(Matrix3<f64>, f64)> {
    let n = motions.len();
    let mut lhs = DMatrix::<f64>::zeros(3 * n, 3);
    let mut rhs = DVector::<f64>::zeros(3 * n);
    for (k, m) in motions.iter().enumerate() {
        let pa = modified_rodrigues(&m.a.rotation);
        let pb = modified_rodrigues(&(r0 * m.b.rotation * r0.inverse()));
        lhs.fixed_slice_mut::<3, 3>(3 * k, 0)
            .copy_from(&skew(&(pa + pb)));
        rhs.fixed_rows_mut::<3>(3 * k).copy_from(&(pb - pa));
    }
    let svd = lhs.svd(true, true);
    let s_max = svd.singular_values.max();
    let s_min = svd.singular_values.min();
    if !full_rank(s_min, s_max) {
        return None;
    }
    let c = svd.solve(&rhs, 0.0).ok()?;
    let c = Vector3::new(c[0], c[1], c[2]);
    // c = tan(φ/2) u  →  Rot(u, φ).
    let norm = c.norm();
    let r = if norm == 0.0 {
        Matrix3::identity()
    } else {
        Rotation3::from_scaled_axis(c / norm * (2.0 * norm.atan())).into_inner()
    };
    Some((r, s_min / s_max))
}

/// Park-Martin rotation: `R_X = (MᵀM)^{-1/2} Mᵀ`, `M = Σ β αᵀ`.
fn park_rotation(motions: &[Motion]) -> Result<Matrix3<f64>, HandEyeError> {
    let mut m = Matrix3::zeros();
    for mo in motions {
        let alpha = mo.a.rotation.scaled_axis();
        let beta = mo.b.rotation.scaled_axis();
        m += beta * alpha.transpose();
    }
    let singular = HandEyeError::Singular {
        method: Method::ParkMartin,
        what: "MᵀM is singular (rotation axes not independent)",
    };
    let eig = (m.transpose() * m).symmetric_eigen();
    let max = eig.eigenvalues.max();
    if !full_rank(eig.eigenvalues.min(), max) {
        return Err(singular);
    }
    let inv_sqrt = eig.eigenvalues.map(|l| 1.0 / l.sqrt());
    let m_inv_sqrt =
        eig.eigenvectors * Matrix3::from_diagonal(&inv_sqrt) * eig.eigenvectors.transpose();
    let r = m_inv_sqrt * m.transpose();
    if r.determinant() <= 0.0 {
        // The polar factor is a reflection only when the camera and robot motions disagree.
        return Err(HandEyeError::Singular {
            method: Method::ParkMartin,
            what: "the rotation fit is a reflection (camera and robot rotations disagree)",
        });
    }
    Ok(r)
}

/// Translation of `X`, shared by both methods (both papers use this linear least squares):
/// `(R_A − I) t_X = R_X t_B − t_A` stacked over all motions.
fn translation(
    motions: &[Motion],
    r_x: &Matrix3<f64>,
    method: Method,
) -> Result<Vector3<f64>, HandEyeError> {
    let n = motions.len();
    let mut lhs = DMatrix::<f64>::zeros(3 * n, 3);
    let mut rhs = DVector::<f64>::zeros(3 * n);
    for (k, m) in motions.iter().enumerate() {
        let r_a = m.a.rotation.to_rotation_matrix().into_inner();
        lhs.fixed_slice_mut::<3, 3>(3 * k, 0)
            .copy_from(&(r_a - Matrix3::identity()));
        rhs.fixed_rows_mut::<3>(3 * k)
            .copy_from(&(r_x * m.b.translation.vector - m.a.translation.vector));
    }
    let singular = HandEyeError::Singular {
        method,
        what: "the translation system has no unique solution",
    };
    let svd = lhs.svd(true, true);
    let s_max = svd.singular_values.max();
    if !full_rank(svd.singular_values.min(), s_max) {
        return Err(singular);
    }
    let t = svd.solve(&rhs, 0.0).map_err(|_| singular)?;
    Ok(Vector3::new(t[0], t[1], t[2]))
}

/// `Y = gripper_from_target` as the mean of `T_i⁻¹ X C_i` over samples: translations averaged,
/// rotations by the chordal mean (the rotation nearest to the sum of the matrices).
fn mean_target(samples: &[HandEyeSample], x: &Isometry3<f64>) -> Isometry3<f64> {
    let mut r_sum = Matrix3::zeros();
    let mut t_sum = Vector3::zeros();
    for s in samples {
        let y = s.base_from_gripper.inverse() * x * s.camera_from_target;
        r_sum += y.rotation.to_rotation_matrix().into_inner();
        t_sum += y.translation.vector;
    }
    let n = samples.len() as f64;
    Isometry3::from_parts(
        Translation3::from(t_sum / n),
        nearest_rotation(&r_sum, &samples[0].base_from_gripper),
    )
}

/// Nearest rotation to `m` (SVD, determinant forced to +1). `m` is a sum of rotations that agree
/// to a fraction of a degree, so it is far from singular; should SVD fail anyway, the first
/// sample's estimate stands in.
fn nearest_rotation(m: &Matrix3<f64>, fallback: &Isometry3<f64>) -> UnitQuaternion<f64> {
    let svd = m.svd(true, true);
    match (svd.u, svd.v_t) {
        (Some(u), Some(v_t)) => {
            let d = (u * v_t).determinant().signum();
            let r = u * Matrix3::from_diagonal(&Vector3::new(1.0, 1.0, d)) * v_t;
            UnitQuaternion::from_rotation_matrix(&Rotation3::from_matrix_unchecked(r))
        }
        _ => fallback.rotation,
    }
}

fn residuals(samples: &[HandEyeSample], x: &Isometry3<f64>, y: &Isometry3<f64>) -> Residuals {
    let per_sample: Vec<SampleResidual> = samples
        .iter()
        .map(|s| {
            let via_robot = s.base_from_gripper * y;
            let via_camera = x * s.camera_from_target;
            SampleResidual {
                rotation_deg: via_robot
                    .rotation
                    .angle_to(&via_camera.rotation)
                    .to_degrees(),
                translation_mm: (via_robot.translation.vector - via_camera.translation.vector)
                    .norm()
                    * 1e3,
            }
        })
        .collect();
    let n = per_sample.len().max(1) as f64;
    let rms = |f: fn(&SampleResidual) -> f64| {
        (per_sample.iter().map(|r| f(r).powi(2)).sum::<f64>() / n).sqrt()
    };
    let max = |f: fn(&SampleResidual) -> f64| per_sample.iter().map(f).fold(0.0, f64::max);
    Residuals {
        rotation_rms_deg: rms(|r| r.rotation_deg),
        rotation_max_deg: max(|r| r.rotation_deg),
        translation_rms_mm: rms(|r| r.translation_mm),
        translation_max_mm: max(|r| r.translation_mm),
        per_sample,
    }
}
