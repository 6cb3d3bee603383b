//! Geometry.
