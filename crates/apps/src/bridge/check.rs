//! Every observation checked against itself before a policy sees it, every action checked before
//! it leaves.
//!
//! An evaluator that sends the TCP in the wrong frame, joints in degrees, or numbers that are
//! finite but absurd would otherwise have them turned into motion: the delta action is computed
//! from the sent TCP and target, a hold action repeats the sent joints. So an observation must
//! agree with itself (the TCP with the forward kinematics of the joints, the joints and fingers
//! with their limits, the controller's target with the workspace), and an action must be finite and
//! within the evaluator controller's per-step bounds; anything else is answered with an error
//! naming the field and how far off it is.

use std::f64::consts::FRAC_PI_2;

use crate::kinematics::{pose_error, RobotModel};

use super::remote::{ControlMode, Observation};

/// Joints may stand this far (rad) past a limit: a PD-driven arm overshoots a little.
pub const JOINT_SLACK_RAD: f64 = 0.05;
/// Fingers may stand this far (m) outside their range, for the same reason.
pub const FINGER_SLACK_M: f64 = 0.005;
/// The sent TCP may stand this far (m, rad) from the forward kinematics of the sent joints. Both
/// are read at the same instant from the same articulation, so they agree to rounding; this
/// leaves room for a tip frame defined a few millimetres differently.
pub const TCP_TOLERANCE: (f64, f64) = (0.02, 0.1);
/// The controller's target may lie this far (m) outside the workspace box (it leads the TCP by
/// up to a step, and the box is the gate's, drawn tight).
pub const TARGET_MARGIN_M: f64 = 0.1;
/// SimplerEnv's end-effector delta controllers bound each step to ±1 m per axis and a rotation
/// of π/2 (ManiSkill2_real2sim `agents/configs/widowx/defaults.py`, `arm_common_args`).
pub const CONTROLLER_STEP: (f64, f64) = (1.0, FRAC_PI_2);

/// Action values travel as float32: a target exactly at a limit may read back up to this far
/// (rad or m) past it, which is not a violation.
pub const FLOAT32_SLACK: f64 = 1e-6;

/// Why an observation or action was refused.
pub type Refusal = String;

/// Whether `obs` agrees with itself for `model`'s arm; the error names the field and the distance.
pub fn observation(model: &RobotModel, obs: &Observation) -> Result<(), Refusal> {
    let limits = model.joint_limits();
    let n = limits.len();
    if obs.qpos.len() != n + 2 {
        return Err(format!(
            "\"qpos\" has {} values; the {} needs {n} arm joints and 2 fingers",
            obs.qpos.len(),
            model.name()
        ));
    }
    for (i, (q, l)) in obs.qpos.iter().zip(limits).enumerate() {
        let past = (l.lower - q).max(q - l.upper);
        if past > JOINT_SLACK_RAD {
            return Err(format!(
                "\"qpos\"[{i}] ({}) = {q} rad lies {past:.3} rad outside its limits [{:.3}, {:.3}]",
                l.name, l.lower, l.upper
            ));
        }
    }
    let (lo, hi) = finger_range(model);
    for (i, f) in obs.qpos[n..].iter().enumerate() {
        let past = (lo - f).max(f - hi);
        if past > FINGER_SLACK_M {
            return Err(format!(
                "\"qpos\"[{}] (finger) = {f} m lies {past:.4} m outside the finger range [{lo}, {hi}]",
                n + i
            ));
        }
    }
    let fk = model
        .fk(&obs.qpos[..n])
        .map_err(|e| format!("\"qpos\": {e}"))?;
    let tcp = obs.base_from_tcp();
    let (dp, dr) = pose_error(&tcp, &fk);
    if !(dp <= TCP_TOLERANCE.0 && dr <= TCP_TOLERANCE.1) {
        return Err(format!(
            "\"tcp_pose\" lies {:.1} mm and {:.1}° from where \"qpos\" puts the {} tip ({}): \
             is it in the world frame, and \"base_pose\" the base's?",
            dp * 1e3,
            dr.to_degrees(),
            model.name(),
            model.config.tip_link
        ));
    }
    let t = obs.base_from_target.translation.vector;
    let ws = &model.config.workspace;
    let outside = (0..3)
        .map(|i| (ws.min[i] - t[i]).max(t[i] - ws.max[i]))
        .fold(f64::NEG_INFINITY, f64::max);
    if outside.is_nan() || outside > TARGET_MARGIN_M {
        return Err(format!(
            "\"target_pose\" ({:.3}, {:.3}, {:.3}) m lies {outside:.3} m outside the {} workspace \
             box grown by {TARGET_MARGIN_M} m (it is in the robot-base frame)",
            t.x,
            t.y,
            t.z,
            model.name()
        ));
    }
    Ok(())
}

/// Whether `values` is an action the evaluator's controller takes as it is: the right length,
/// finite, within the per-step bounds (delta mode), the joint and finger limits (joint mode).
pub fn action(model: &RobotModel, mode: ControlMode, values: &[f64]) -> Result<(), Refusal> {
    if values.len() != mode.action_len() {
        return Err(format!(
            "{} values for a {} action of {}",
            values.len(),
            mode.name(),
            mode.action_len()
        ));
    }
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(format!("action[{i}] is {}", values[i]));
    }
    match mode {
        ControlMode::DeltaEe => {
            let (t, r) = (&values[..3], &values[3..6]);
            let (step_m, step_rad) = CONTROLLER_STEP;
            if let Some(i) = t.iter().position(|v| v.abs() > step_m) {
                return Err(format!(
                    "action[{i}] moves {} m in one step, past the controller's ±{step_m} m",
                    t[i]
                ));
            }
            let angle = r.iter().map(|v| v * v).sum::<f64>().sqrt();
            if angle > step_rad {
                return Err(format!(
                    "the action turns {angle:.3} rad in one step, past the controller's {step_rad:.3}"
                ));
            }
            if values[6].abs() > 1.0 {
                return Err(format!("gripper action {} is outside [-1, 1]", values[6]));
            }
        }
        ControlMode::JointPos => {
            let limits = model.joint_limits();
            for (i, (q, l)) in values.iter().zip(limits).enumerate() {
                if *q < l.lower - FLOAT32_SLACK || *q > l.upper + FLOAT32_SLACK {
                    return Err(format!(
                        "joint target {i} ({}) = {q} rad lies outside its limits [{:.3}, {:.3}]",
                        l.name, l.lower, l.upper
                    ));
                }
            }
            let (lo, hi) = finger_range(model);
            let (lo, hi) = (lo - FLOAT32_SLACK, hi + FLOAT32_SLACK);
            if let Some(f) = values[limits.len()..]
                .iter()
                .find(|f| !(lo..=hi).contains(*f))
            {
                return Err(format!("finger target {f} m is outside [{lo}, {hi}]"));
            }
        }
    }
    Ok(())
}

/// The finger joints' range (m), closed to open in either order.
pub fn finger_range(model: &RobotModel) -> (f64, f64) {
    let g = &model.config.gripper;
    (
        g.closed_units.min(g.open_units),
        g.closed_units.max(g.open_units),
    )
}
