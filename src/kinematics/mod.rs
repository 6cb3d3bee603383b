//! Kinematics.
