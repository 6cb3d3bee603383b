//! `robot.toml`: the facts about a robot that a URDF does not carry (TCP, home pose, workspace box,
//! speed limits, gripper range, servo rate). Parsed strictly (`deny_unknown_fields`) so a typo is an
//! error instead of a silently ignored limit.

use serde::{Deserialize, Serialize};

use super::error::KinematicsError;

/// The contents of one `robot.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RobotConfig {
    /// The robot's name, e.g. `xarm6`; what messages and logs call it.
    pub name: String,
    /// URDF file name, relative to the folder of robot.toml.
    pub urdf: String,
    /// The URDF link whose frame is the base frame: poses, the workspace box and the table
    /// height are expressed in it.
    pub base_link: String,
    /// The frame IK solves for (the TCP, between the fingertips).
    pub tip_link: String,
    /// The mechanical flange (where the controller's own TCP offset starts).
    pub flange_link: String,
    /// Movable joints from base to tip, in order; must match the URDF chain exactly.
    pub arm_joints: Vec<String>,
    /// TCP relative to the flange, metres; checked against the URDF at load.
    pub tcp_offset_xyz: [f64; 3],
    /// TCP orientation relative to the flange as URDF roll, pitch, yaw (rad); checked against the
    /// URDF at load.
    pub tcp_offset_rpy: [f64; 3],
    /// Direction in the tip frame along which the tool approaches an object (xArm: z, WidowX: x).
    pub approach_axis: [f64; 3],
    /// Direction in the tip frame along which the fingers close; orthogonal to `approach_axis`.
    pub closing_axis: [f64; 3],
    /// Ready pose (rad), inside the joint limits.
    pub home: Vec<f64>,
    /// Rate at which the driver streams joint setpoints (Hz); the gate checks trajectories at
    /// `1 / servo_rate_hz`.
    pub servo_rate_hz: f64,
    /// Carry objects at least this high above the table (m); unset: the executor's default
    /// (20 cm, an xArm-sized lift). A small arm carries lower: the WidowX's Bridge tasks give a
    /// whole pick and place 12 s (SimplerEnv's 60 steps at 5 Hz).
    #[serde(default)]
    pub carry_height: Option<f64>,
    /// The box the TCP must stay inside.
    pub workspace: WorkspaceBox,
    /// Joint and TCP speed and acceleration limits.
    pub limits: LimitsConfig,
    /// The gripper's width range and driver units.
    pub gripper: GripperConfig,
}

/// Axis-aligned box in the robot base frame (metres) that the TCP must stay inside.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceBox {
    /// Lower corner (x, y, z), m.
    pub min: [f64; 3],
    /// Upper corner (x, y, z), m; above `min` on every axis.
    pub max: [f64; 3],
}

impl WorkspaceBox {
    /// Whether the base-frame point `p` (m) lies inside the box, faces included.
    pub fn contains(&self, p: [f64; 3]) -> bool {
        (0..3).all(|i| p[i] >= self.min[i] && p[i] <= self.max[i])
    }

    /// The box the TCP may use over a table whose top is at `table_z` in the base frame: this box
    /// (the user's outer limit, never widened) with its floor raised to the table when the table
    /// is higher. The box's floor says how far below the base a table may be (an arm on a pedestal
    /// or a plate); the table itself, measured by the camera or stated by the user, is the floor
    /// within it, so a TCP below the table top is refused whatever the box allows.
    pub fn for_table(&self, table_z: f64) -> WorkspaceBox {
        let mut b = *self;
        if table_z.is_finite() {
            b.min[2] = b.min[2].max(table_z.min(b.max[2]));
        }
        b
    }
}

/// Speed and acceleration limits that planning respects and the gate enforces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// rad/s per arm joint; never above the URDF velocity limit.
    pub joint_velocity: Vec<f64>,
    /// rad/s² per arm joint.
    pub joint_acceleration: Vec<f64>,
    /// m/s of the TCP.
    pub cartesian_speed: f64,
    /// m/s² of the TCP.
    pub cartesian_acceleration: f64,
}

/// Gripper opening range: physical width between the fingers and the driver's command units
/// (xArm: 0..850 pulses; WidowX: finger position in metres).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GripperConfig {
    /// Gap between the fingers when fully closed, m.
    pub closed_width: f64,
    /// Gap between the fingers when fully open, m.
    pub open_width: f64,
    /// Driver command for fully closed, in the driver's units.
    pub closed_units: f64,
    /// Driver command for fully open, in the driver's units.
    pub open_units: f64,
}

impl GripperConfig {
    /// The opening (0 closed … 1 open, as planning and the gate place the fingers) of a finger
    /// gap in metres, clamped to the range.
    pub fn opening_for_width(&self, width_m: f64) -> f64 {
        ((width_m - self.closed_width) / (self.open_width - self.closed_width)).clamp(0.0, 1.0)
    }

    /// The finger gap (m) of an opening (0 closed … 1 open): the inverse of `opening_for_width`.
    pub fn width_for_opening(&self, opening: f64) -> f64 {
        self.closed_width + opening * (self.open_width - self.closed_width)
    }

    /// Driver units for a finger gap in metres (clamped to the range), linear between the two ends.
    pub fn units_for_width(&self, width_m: f64) -> f64 {
        let w = width_m.clamp(self.closed_width, self.open_width);
        let t = (w - self.closed_width) / (self.open_width - self.closed_width);
        self.closed_units + t * (self.open_units - self.closed_units)
    }

    /// Finger gap in metres for a reading in driver units (clamped to the range): the inverse of
    /// `units_for_width`, for drivers that read the fingers back.
    pub fn width_for_units(&self, units: f64) -> f64 {
        let (lo, hi) = if self.closed_units <= self.open_units {
            (self.closed_units, self.open_units)
        } else {
            (self.open_units, self.closed_units)
        };
        if hi == lo {
            return self.closed_width;
        }
        let u = units.clamp(lo, hi);
        let t = (u - self.closed_units) / (self.open_units - self.closed_units);
        self.closed_width + t * (self.open_width - self.closed_width)
    }
}

impl RobotConfig {
    /// Parses and checks everything that does not need the URDF. `file` names the source in errors.
    pub fn from_toml_str(text: &str, file: &str) -> Result<Self, KinematicsError> {
        let cfg: RobotConfig = toml::from_str(text).map_err(|e| KinematicsError::Toml {
            file: file.to_string(),
            detail: e.to_string(),
        })?;
        cfg.validate(file)?;
        Ok(cfg)
    }

    fn validate(&self, file: &str) -> Result<(), KinematicsError> {
        let bad = |field: &str, detail: String| KinematicsError::Field {
            file: file.to_string(),
            field: field.to_string(),
            detail,
        };
        let n = self.arm_joints.len();
        if n == 0 {
            return Err(bad("arm_joints", "must list at least one joint".into()));
        }
        for (field, len) in [
            ("home", self.home.len()),
            ("limits.joint_velocity", self.limits.joint_velocity.len()),
            (
                "limits.joint_acceleration",
                self.limits.joint_acceleration.len(),
            ),
        ] {
            if len != n {
                return Err(bad(field, format!("has {len} values, arm_joints has {n}")));
            }
        }
        let finite = |v: &[f64]| v.iter().all(|x| x.is_finite());
        if !finite(&self.home) {
            return Err(bad("home", "must be finite".into()));
        }
        if !finite(&self.tcp_offset_xyz) || !finite(&self.tcp_offset_rpy) {
            return Err(bad("tcp_offset_xyz/rpy", "must be finite".into()));
        }
        for (field, v) in [
            ("limits.joint_velocity", &self.limits.joint_velocity),
            ("limits.joint_acceleration", &self.limits.joint_acceleration),
        ] {
            if let Some(x) = v.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
                return Err(bad(field, format!("{x} is not a positive finite number")));
            }
        }
        for (field, x) in [
            ("limits.cartesian_speed", self.limits.cartesian_speed),
            (
                "limits.cartesian_acceleration",
                self.limits.cartesian_acceleration,
            ),
            ("servo_rate_hz", self.servo_rate_hz),
        ] {
            if !(x.is_finite() && x > 0.0) {
                return Err(bad(field, format!("{x} is not a positive finite number")));
            }
        }
        if let Some(h) = self.carry_height {
            if !(h.is_finite() && h > 0.0) {
                return Err(bad(
                    "carry_height",
                    format!("{h} is not a positive finite number"),
                ));
            }
        }
        let (a, c) = (self.approach_axis, self.closing_axis);
        let norm = |v: [f64; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        if (norm(a) - 1.0).abs() > 1e-6
            || (norm(c) - 1.0).abs() > 1e-6
            || (a[0] * c[0] + a[1] * c[1] + a[2] * c[2]).abs() > 1e-6
        {
            return Err(bad(
                "approach_axis/closing_axis",
                "must be orthogonal unit vectors".into(),
            ));
        }
        let ws = &self.workspace;
        if !(finite(&ws.min) && finite(&ws.max)) || (0..3).any(|i| ws.min[i] >= ws.max[i]) {
            return Err(bad(
                "workspace",
                format!(
                    "min {:?} must be finite and below max {:?} on every axis",
                    ws.min, ws.max
                ),
            ));
        }
        let g = &self.gripper;
        if !(g.closed_width.is_finite() && g.open_width.is_finite() && g.closed_width >= 0.0)
            || g.open_width <= g.closed_width
            || !(g.closed_units.is_finite() && g.open_units.is_finite())
        {
            return Err(bad(
                "gripper",
                "need finite 0 <= closed_width < open_width and finite units".into(),
            ));
        }
        Ok(())
    }
}
