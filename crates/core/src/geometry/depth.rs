//! Depth images in metres and a robust depth read-out at a pixel.
//!
//! A single depth pixel under a VLM's point is the worst possible estimate: RealSense depth has
//! holes (0), "flying pixels" at object edges that sit between foreground and background, and
//! speckle on dark or shiny surfaces. [`robust_depth`] therefore takes a percentile of the valid
//! pixels in a small window and refuses to answer when too few are valid, so that the caller can
//! widen the window or fall back to the table plane instead of grasping at a wrong depth.

use super::error::GeometryError;

/// A depth image in metres, row-major, `data[v * width + u]`.
///
/// A pixel is *valid* when it is finite and `> 0`; zero is the sensors' "no data" value and NaN is
/// what the simulator and filters produce for "no return". The fields are public so camera
/// drivers can build frames without copies; every consumer re-checks `data.len()` (see
/// [`DepthImage::check`]).
#[derive(Clone, Debug, PartialEq)]
pub struct DepthImage {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Depth along the optical axis (camera z), metres.
    pub data: Vec<f32>,
}

impl DepthImage {
    /// Wraps a buffer, checking its length.
    pub fn new(width: usize, height: usize, data: Vec<f32>) -> Result<Self, GeometryError> {
        let image = DepthImage {
            width,
            height,
            data,
        };
        image.check()?;
        Ok(image)
    }

    /// Converts raw sensor units (RealSense `Z16`) to metres: `metres = raw * depth_scale_m`.
    ///
    /// Take the scale from the device (`depth_sensor.get_depth_scale()`): it is 0.001 by default
    /// on D400 but configurable, and fixed at 0.00025 on the L515, so hard-coding it silently
    /// scales every point by 4. Raw 0 stays 0 (invalid).
    pub fn from_u16(
        width: usize,
        height: usize,
        raw: &[u16],
        depth_scale_m: f32,
    ) -> Result<Self, GeometryError> {
        if !(depth_scale_m.is_finite() && depth_scale_m > 0.0) {
            return Err(GeometryError::InvalidOption {
                field: "depth_scale_m",
                reason: format!("must be finite and > 0, got {depth_scale_m}"),
            });
        }
        let expected = width.saturating_mul(height);
        if raw.len() != expected {
            return Err(GeometryError::BufferLength {
                width,
                height,
                expected,
                got: raw.len(),
            });
        }
        let data = raw.iter().map(|&r| r as f32 * depth_scale_m).collect();
        Ok(DepthImage {
            width,
            height,
            data,
        })
    }

    /// Checks that the buffer holds exactly `width * height` values.
    pub(crate) fn check(&self) -> Result<(), GeometryError> {
        let expected = self.width.saturating_mul(self.height);
        if self.data.len() != expected {
            return Err(GeometryError::BufferLength {
                width: self.width,
                height: self.height,
                expected,
                got: self.data.len(),
            });
        }
        Ok(())
    }

    /// Whether a depth value counts as a measurement.
    #[inline]
    pub fn is_valid(depth_m: f32) -> bool {
        depth_m.is_finite() && depth_m > 0.0
    }

    /// The depth at integer pixel `(u, v)`, `None` when outside the image or invalid.
    pub fn get(&self, u: usize, v: usize) -> Option<f32> {
        if u >= self.width || v >= self.height {
            return None;
        }
        self.data
            .get(v * self.width + u)
            .copied()
            .filter(|&d| Self::is_valid(d))
    }

    /// Number of valid pixels.
    pub fn valid_count(&self) -> usize {
        self.data.iter().filter(|&&d| Self::is_valid(d)).count()
    }

    /// The integer pixel containing sub-pixel coordinate `(u, v)` (pixel centres are integers),
    /// or an error naming the image size.
    pub(crate) fn pixel_index(&self, u: f64, v: f64) -> Result<(usize, usize), GeometryError> {
        let outside = || GeometryError::PixelOutsideImage {
            u,
            v,
            width: self.width,
            height: self.height,
        };
        if !(u.is_finite() && v.is_finite()) {
            return Err(outside());
        }
        let (ui, vi) = ((u + 0.5).floor(), (v + 0.5).floor());
        if ui < 0.0 || vi < 0.0 || ui >= self.width as f64 || vi >= self.height as f64 {
            return Err(outside());
        }
        Ok((ui as usize, vi as usize))
    }
}

/// How [`robust_depth`] reads depth around a pixel.
#[derive(Clone, Debug, PartialEq)]
pub struct RobustDepthOptions {
    /// Side of the square window in pixels; odd, >= 1. 5-9 suits 640x480.
    pub window: usize,
    /// Percentile (0-100) of the valid depths to return. Low (20-30) for grasp points, so edge
    /// pixels that bleed into the background do not push the point behind the object; 50 (the
    /// median) for points on surfaces.
    pub percentile: f32,
    /// Minimum fraction (0-1) of the window's in-image pixels that must be valid.
    pub min_valid_fraction: f32,
}

impl Default for RobustDepthOptions {
    /// 7x7 median, at least 30 % valid: the surface setting.
    fn default() -> Self {
        Self::surface()
    }
}

impl RobustDepthOptions {
    /// For grasp / affordance points: 7x7 window, 25th percentile, 30 % valid.
    pub fn grasp() -> Self {
        RobustDepthOptions {
            window: 7,
            percentile: 25.0,
            min_valid_fraction: 0.3,
        }
    }

    /// For place points on surfaces: 7x7 window, median, 30 % valid.
    pub fn surface() -> Self {
        RobustDepthOptions {
            window: 7,
            percentile: 50.0,
            min_valid_fraction: 0.3,
        }
    }

    /// Checks the ranges documented on the fields.
    pub(crate) fn validate(&self) -> Result<(), GeometryError> {
        if self.window == 0 || self.window.is_multiple_of(2) {
            return Err(GeometryError::InvalidOption {
                field: "window",
                reason: format!("must be odd and >= 1, got {}", self.window),
            });
        }
        if !(0.0..=100.0).contains(&self.percentile) {
            return Err(GeometryError::InvalidOption {
                field: "percentile",
                reason: format!("must be in [0, 100], got {}", self.percentile),
            });
        }
        if !(0.0..=1.0).contains(&self.min_valid_fraction) {
            return Err(GeometryError::InvalidOption {
                field: "min_valid_fraction",
                reason: format!("must be in [0, 1], got {}", self.min_valid_fraction),
            });
        }
        Ok(())
    }
}

/// A robust depth (metres) at sub-pixel `(u, v)`: the `percentile` of the valid depths in a
/// `window` x `window` square centred on the pixel containing `(u, v)`.
///
/// Near the border the window is clipped to the image, and the valid fraction is counted over
/// the in-image pixels only (a point near the edge is not penalised for pixels that do not
/// exist). The percentile interpolates linearly between order statistics (numpy's default), so the
/// median of an even count is the mean of the middle two.
///
/// Errors: the pixel is outside the image; fewer than `min_valid_fraction` of the window (or no
/// pixel at all) is valid, with the counts; bad options; a buffer of the wrong length.
pub fn robust_depth(
    depth: &DepthImage,
    u: f64,
    v: f64,
    opts: &RobustDepthOptions,
) -> Result<f32, GeometryError> {
    opts.validate()?;
    depth.check()?;
    let (ui, vi) = depth.pixel_index(u, v)?;
    let half = opts.window / 2;
    let (u0, u1) = (ui.saturating_sub(half), (ui + half).min(depth.width - 1));
    let (v0, v1) = (vi.saturating_sub(half), (vi + half).min(depth.height - 1));
    let total = (u1 - u0 + 1) * (v1 - v0 + 1);
    let mut valid: Vec<f32> = Vec::with_capacity(total);
    for row in v0..=v1 {
        let line = &depth.data[row * depth.width + u0..=row * depth.width + u1];
        valid.extend(line.iter().copied().filter(|&d| DepthImage::is_valid(d)));
    }
    let too_few = || GeometryError::TooFewValidDepth {
        u,
        v,
        valid: valid.len(),
        total,
        min_fraction: opts.min_valid_fraction,
    };
    if valid.is_empty() || (valid.len() as f32) < opts.min_valid_fraction * total as f32 {
        return Err(too_few());
    }
    valid.sort_unstable_by(f32::total_cmp);
    Ok(percentile_sorted(&valid, opts.percentile))
}

/// Linear-interpolated percentile of a sorted, non-empty slice.
fn percentile_sorted(sorted: &[f32], percentile: f32) -> f32 {
    let rank = percentile as f64 / 100.0 * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    let frac = rank - lo as f64;
    (sorted[lo] as f64 + (sorted[hi] as f64 - sorted[lo] as f64) * frac) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_matches_numpy_linear() {
        let s = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_sorted(&s, 50.0), 2.5);
        assert_eq!(percentile_sorted(&s, 0.0), 1.0);
        assert_eq!(percentile_sorted(&s, 100.0), 4.0);
        assert!((percentile_sorted(&s, 25.0) - 1.75).abs() < 1e-6);
        assert_eq!(percentile_sorted(&[7.0], 30.0), 7.0);
    }

    #[test]
    fn pixel_index_rounds_to_the_containing_pixel() {
        let d = DepthImage::new(4, 3, vec![1.0; 12]).unwrap();
        assert_eq!(d.pixel_index(0.49, 1.5).unwrap(), (0, 2));
        assert_eq!(d.pixel_index(-0.5, 0.0).unwrap(), (0, 0));
        assert!(d.pixel_index(3.5, 0.0).is_err());
        assert!(d.pixel_index(-0.51, 0.0).is_err());
        assert!(d.pixel_index(f64::NAN, 0.0).is_err());
    }
}
