//! What a render is asked for (shading, sensor imperfections) and what it gives back.

use k::nalgebra::Vector3;

/// Relative depth step between 4-neighbours on different primitives above which the pair counts
/// as a silhouette for [`RenderOptions::edge_holes`]. Objects in contact (a cup on the table, two
/// primitives of one object) have steps far below 3 %; an object against what lies behind it has
/// centimetres to decimetres.
pub const EDGE_JUMP_RELATIVE: f64 = 0.03;

/// How to shade and how much sensor imperfection to add.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderOptions {
    /// Axial depth noise: σ = `depth_noise` · z² (metres, z in metres). Stereo depth error grows
    /// with the square of distance (Intel's RMS formula: z² · subpixel / (focal px · baseline)).
    /// 0 = exact depth.
    pub depth_noise: f32,
    /// Probability that a pixel on a silhouette (a 4-neighbour is background, or another
    /// primitive more than [`EDGE_JUMP_RELATIVE`] nearer or farther) loses its depth (reads 0),
    /// as stereo cameras do around silhouettes. RGB, instance and part stay: they are ground truth.
    /// 0 = no holes.
    pub edge_holes: f32,
    /// Direction from the surfaces towards the (distant) light, world frame; need not be unit.
    /// A zero vector leaves only the ambient term.
    pub light_dir_world: Vector3<f64>,
    /// Fraction of the albedo seen regardless of orientation, in [0, 1].
    pub ambient: f32,
    /// Linear RGB of pixels that hit nothing.
    pub background: [f32; 3],
    /// Seed of the noise and the holes; the same seed gives the same frame.
    pub seed: u64,
}

impl Default for RenderOptions {
    /// Clean sensor: exact depth, no holes; light from above, a little from the front-left.
    fn default() -> Self {
        RenderOptions {
            depth_noise: 0.0,
            edge_holes: 0.0,
            light_dir_world: Vector3::new(0.3, 0.2, 1.0),
            ambient: 0.3,
            background: [0.05, 0.05, 0.05],
            seed: 0,
        }
    }
}

impl RenderOptions {
    /// Roughly a RealSense D4xx at 640×480: σ ≈ 2.5 mm at 1 m (Intel's formula with subpixel
    /// 0.08, ~380 px focal length at 640 px and a 50 mm baseline gives ~4 mm; the D415's longer
    /// focal length ~2.4 mm), and half of the silhouette pixels without depth.
    pub fn realsense_like() -> Self {
        RenderOptions {
            depth_noise: 0.0025,
            edge_holes: 0.5,
            ..Self::default()
        }
    }

    /// The sensor model by name: `ideal` (exact depth) or `realsense` ([`Self::realsense_like`]).
    pub fn sensor(name: &str) -> Option<Self> {
        match name {
            "ideal" => Some(Self::default()),
            "realsense" => Some(Self::realsense_like()),
            _ => None,
        }
    }

    /// The name [`Self::sensor`] knows these options by (`custom` for any other noise).
    pub fn sensor_name(&self) -> &'static str {
        let ideal = Self::default();
        let rs = Self::realsense_like();
        let same = |o: &Self| o.depth_noise == self.depth_noise && o.edge_holes == self.edge_holes;
        if same(&ideal) {
            "ideal"
        } else if same(&rs) {
            "realsense"
        } else {
            "custom"
        }
    }
}

/// One rendered frame; every buffer is row-major, `width · height` long, index `v · width + u`.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderOutput {
    /// Image width, px.
    pub width: u32,
    /// Image height, px.
    pub height: u32,
    /// RGB8, sRGB-encoded, interleaved.
    pub rgb: Vec<u8>,
    /// z-depth along the optical axis in metres (like RealSense, not the ray length); 0 = no data.
    pub depth_m: Vec<f32>,
    /// Instance id of the nearest hit (`BACKGROUND_INSTANCE` where nothing was hit).
    pub instance: Vec<u16>,
    /// Part id of the nearest hit (`NO_PART` where nothing was hit).
    pub part: Vec<u8>,
}

impl RenderOutput {
    /// Buffer index of pixel `(u, v)`, or `None` outside the image.
    pub fn index(&self, u: u32, v: u32) -> Option<usize> {
        (u < self.width && v < self.height).then(|| v as usize * self.width as usize + u as usize)
    }
}

/// The primitive index of a ray that hit nothing.
pub(super) const NO_PRIM: u32 = u32::MAX;
