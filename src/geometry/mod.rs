//! Geometry.

mod shape;

pub use shape::Shape;
