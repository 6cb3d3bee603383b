//! The printed tag: its black and white cells, generated at run time from the detector crate's own
//! tag36h11 code table (`kornia_apriltag::family::TagFamily`), so the pattern we draw and the
//! codes the detector accepts cannot disagree.
//!
//! Layout (the AprilTag convention): a `total_width` × `total_width` grid (10 × 10 for tag36h11)
//! whose outer ring is white, inside it a black square `width_at_border` cells wide (8), inside
//! that the 6 × 6 data cells. Data bit `i` (most significant first) sits at cell
//! `(bit_x[i], bit_y[i])` counted from the black square's top-left cell; a 1 is white.

use std::sync::Arc;

use k::nalgebra::{Isometry3, Vector3};

use super::{family, TagTarget, TargetError};
use crate::geometry::Shape;
use crate::sim::render::FaceTexture;
use crate::sim::ToolVisual;

/// Albedo of the printed white and black (matte paper and toner, linear RGB).
pub(crate) const WHITE: [f32; 3] = [0.85, 0.85, 0.85];
pub(crate) const BLACK: [f32; 3] = [0.03, 0.03, 0.03];

/// Sub-rays per pixel side when the simulator draws a tag (16 rays per pixel on the plate).
pub(crate) const SIM_SUPERSAMPLE: u8 = 4;

/// The tag's cells, row-major from the top-left of the printed tag; `true` is white.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TagCells {
    /// Cells per side, white border included.
    pub total_width: usize,
    /// Cells per side of the black square (the tag size is this many cells).
    pub width_at_border: usize,
    pub white: Vec<bool>,
}

/// The cells of tag `id`.
pub(crate) fn tag_cells(id: u16) -> Result<TagCells, TargetError> {
    let f = family()?;
    let code = *f.code_data.get(usize::from(id)).ok_or_else(|| {
        TargetError::Target(format!(
            "id {id} does not exist in {} (ids 0..{})",
            super::FAMILY,
            f.code_data.len()
        ))
    })?;
    let (n, b) = (f.total_width, f.width_at_border);
    if f.reversed_border || b > n || f.bit_x.len() != f.nbits || f.bit_y.len() != f.nbits {
        return Err(TargetError::Detector(format!(
            "unexpected {} layout in the detector crate",
            super::FAMILY
        )));
    }
    let start = (n - b) / 2;
    let mut white = vec![true; n * n];
    for r in start..start + b {
        for c in start..start + b {
            white[r * n + c] = false;
        }
    }
    for i in 0..f.nbits {
        if (code >> (f.nbits - 1 - i)) & 1 == 1 {
            let x = start as isize + isize::from(f.bit_x[i]);
            let y = start as isize + isize::from(f.bit_y[i]);
            if !(0..n as isize).contains(&x) || !(0..n as isize).contains(&y) {
                return Err(TargetError::Detector("bit outside the tag".into()));
            }
            white[y as usize * n + x as usize] = true;
        }
    }
    Ok(TagCells {
        total_width: n,
        width_at_border: b,
        white,
    })
}

impl TagCells {
    /// The cells as a printed face texture (row 0 at the top, as [`FaceTexture`] lays it out).
    pub(crate) fn texture(&self, supersample: u8) -> FaceTexture {
        FaceTexture {
            cols: self.total_width,
            rows: self.total_width,
            cells: self
                .white
                .iter()
                .map(|&w| if w { WHITE } else { BLACK })
                .collect(),
            supersample,
        }
    }

    /// Edge of the whole printed square (white border included) for a tag of `size_m`.
    pub(crate) fn printed_width(&self, size_m: f64) -> f64 {
        size_m * self.total_width as f64 / self.width_at_border as f64
    }
}

/// The tag as a thin plate for the simulator, printed on the face that points along the target's
/// +z: pass it to [`crate::sim::SimWorld::mount_on_tool`]. `tcp_from_target` places the target
/// frame (module docs of [`super`]) in the tool frame; the plate's back (`thickness_m`) lies
/// behind the printed face.
pub(crate) fn sim_tag_plate(
    target: &TagTarget,
    tcp_from_target: &Isometry3<f64>,
    thickness_m: f64,
) -> Result<ToolVisual, TargetError> {
    target.validate()?;
    let cells = tag_cells(target.id)?;
    let half = cells.printed_width(target.size_m) / 2.0;
    Ok(ToolVisual {
        shape: Shape::Cuboid {
            half_extents: Vector3::new(half, half, thickness_m / 2.0),
        },
        tcp_from_shape: tcp_from_target * Isometry3::translation(0.0, 0.0, -thickness_m / 2.0),
        color: WHITE,
        texture: Some(Arc::new(cells.texture(SIM_SUPERSAMPLE))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_have_the_border_and_the_code() {
        let c = tag_cells(0).unwrap();
        assert_eq!((c.total_width, c.width_at_border), (10, 8));
        let n = c.total_width;
        for i in 0..n {
            // White outer ring, black ring inside it.
            assert!(
                c.white[i] && c.white[(n - 1) * n + i] && c.white[i * n] && c.white[i * n + n - 1]
            );
            if (1..n - 1).contains(&i) {
                assert!(!c.white[n + i] && !c.white[(n - 2) * n + i]);
                assert!(!c.white[i * n + 1] && !c.white[i * n + n - 2]);
            }
        }
        // 36 data cells: as many white ones as the code has set bits.
        let f = family().unwrap();
        let ones = f.code_data[0].count_ones() as usize;
        let data_white = (2..n - 2)
            .flat_map(|r| (2..n - 2).map(move |c| (r, c)))
            .filter(|(r, col)| c.white[r * n + col])
            .count();
        assert_eq!(data_white, ones);
        assert_ne!(tag_cells(1).unwrap().white, c.white);
        assert!(tag_cells(u16::MAX).is_err());
    }
}
