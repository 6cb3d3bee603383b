//! Printed faces: a grid of colours on the +z face of a box, drawn with supersampling.
//!
//! Why it exists: a calibration target (an AprilTag plate held by the gripper) is a flat pattern of
//! black and white cells, and the hand-eye calibration measures where its corners are to a
//! fraction of a pixel. A plate built from one box per cell would draw each cell edge with one ray
//! per pixel, a ±0.5 px staircase; averaging `supersample²` rays per pixel over the printed face
//! makes edge pixels take the fraction of black and white they cover, as a real camera's pixels
//! do, so sub-pixel edge fitting in the detector has something to fit.
//!
//! Only pixels whose nearest hit is the printed face are supersampled (the face's own plane is
//! intersected again for each sub-ray: no other primitive is tested). Sub-rays that miss the face
//! (at the plate's outline) are left out of the average: the plate's outline is not measured, the
//! pattern inside it is.

/// A `cols` × `rows` grid of linear-RGB cells covering the whole +z face of a cuboid.
///
/// Layout, looking at the face from outside (+z towards the viewer, shape x to the right, shape
/// y up): cell `(row, col)` covers `x ∈ [-hx + col·w, -hx + (col+1)·w]` and
/// `y ∈ [hy − (row+1)·h, hy − row·h]`, i.e. row 0 is the top edge (+y) and column 0 the left
/// edge (−x), the order an image is written in.
#[derive(Debug, Clone, PartialEq)]
pub struct FaceTexture {
    /// Cells across the face, along shape x.
    pub cols: usize,
    /// Cells down the face, along shape −y.
    pub rows: usize,
    /// Linear RGB albedo in [0, 1] per cell, row-major (`row · cols + col`).
    pub cells: Vec<[f32; 3]>,
    /// Sub-rays per pixel side on the printed face (1 = one ray through the pixel centre; 4 = 16
    /// rays on a regular 4 × 4 grid inside the pixel).
    pub supersample: u8,
}

impl FaceTexture {
    /// Whether the grid is usable: non-empty, one colour per cell, colours finite.
    pub(crate) fn is_valid(&self) -> bool {
        self.cols > 0
            && self.rows > 0
            && self.cells.len() == self.cols * self.rows
            && self.cells.iter().flatten().all(|c| c.is_finite())
    }

    /// Albedo of the cell under face point `(x, y)` of a face with half sizes `(hx, hy)`, or
    /// `None` outside the face.
    pub(crate) fn albedo_at(&self, x: f64, y: f64, hx: f64, hy: f64) -> Option<[f32; 3]> {
        if !(x.abs() <= hx && y.abs() <= hy) || hx <= 0.0 || hy <= 0.0 {
            return None;
        }
        let col = (((x + hx) / (2.0 * hx)) * self.cols as f64).floor() as usize;
        let row = (((hy - y) / (2.0 * hy)) * self.rows as f64).floor() as usize;
        let (col, row) = (col.min(self.cols - 1), row.min(self.rows - 1));
        self.cells.get(row * self.cols + col).copied()
    }
}
