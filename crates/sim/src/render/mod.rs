//! Ray-cast RGB-D + segmentation camera for the built-in simulator.
//!
//! One ray per pixel through the pixel centre (see [`PinholeCamera`] for the convention), exact
//! analytic intersection with every primitive that can cover the pixel, nearest hit wins. The
//! outputs mirror what the real RealSense pipeline hands the rest of the system: sRGB-encoded RGB8,
//! z-depth in metres with 0 meaning "no data", plus ground-truth instance and part ids that only a
//! simulator can give (the oracle pointer and the task checks use them).
//!
//! Speed comes from culling, not from approximations: each primitive's shape-frame bounding box
//! (and bounding sphere) is projected to a conservative screen rectangle and only the pixels inside
//! it are tested, against a per-pixel nearest-depth buffer. [`render_brute_force`] tests every
//! primitive at every pixel; it exists as the benchmark's peer and as the test oracle, and the two
//! agree bit for bit.
//!
//! Sensor imperfections are opt-in ([`RenderOptions::realsense_like`]): axial depth noise growing
//! with z², and dropped depth at silhouette edges. Both are driven by a counter-based hash of
//! (seed, pixel), so a frame is a pure function of scene, camera and options.

mod camera;
pub(crate) mod intersect;
mod noise;
mod options;
pub(crate) mod packet;
mod texture;

use k::nalgebra::{Isometry3, Vector3};

pub use camera::PinholeCamera;
use intersect::{intersect, local_normal, Surface};
pub use noise::{linear_to_srgb, srgb_to_linear};
use options::NO_PRIM;
pub use options::{RenderOptions, RenderOutput};
pub use texture::FaceTexture;

use super::{RenderScene, BACKGROUND_INSTANCE, NO_PART};
use pointact_core::geometry::{Intrinsics, Shape};

/// Hits closer to the optical centre than this are ignored (the camera's near plane). Small
/// enough never to matter for a tabletop camera, large enough to keep a ray that starts on a
/// surface from hitting it again.
pub(crate) const MIN_DEPTH_M: f64 = 1e-4;

/// Why a camera cannot be built or rendered with.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The intrinsics are unusable: empty or oversized image, bad focal length or field of view,
    /// or a distortion model (the renderer is an ideal pinhole).
    #[error("invalid camera intrinsics: {0}")]
    InvalidIntrinsics(String),
    /// A look-at pose is undefined: eye or target not finite, eye equal to target, or the view
    /// parallel to the up hint.
    #[error("cannot build a look-at camera pose: {0}")]
    DegenerateLookAt(String),
}

/// Renders the scene with screen-space culling (the one to use). A camera that fails
/// [`PinholeCamera::validate`] (zero focal length, NaN principal point) sees nothing: every pixel
/// is background.
pub fn render(
    scene: &RenderScene,
    camera: &PinholeCamera,
    options: &RenderOptions,
) -> RenderOutput {
    render_impl(scene, camera, options, true)
}

/// Same output as [`render`], bit for bit, but every primitive is intersected at every pixel:
/// the benchmark's peer and the tests' oracle.
pub fn render_brute_force(
    scene: &RenderScene,
    camera: &PinholeCamera,
    options: &RenderOptions,
) -> RenderOutput {
    render_impl(scene, camera, options, false)
}

/// Per-primitive constants of one frame: the shape-frame ray for pixel ray `(x, y, 1)` is
/// `origin + t · (dir_x·x + (dir_y·y + dir_z))`, so each pixel costs six multiply-adds before the
/// intersection itself.
struct Prepared {
    shape: Shape,
    origin: [f64; 3],
    dir_x: [f64; 3],
    dir_y: [f64; 3],
    dir_z: [f64; 3],
    /// Light direction in the shape frame (unit or zero).
    light: [f64; 3],
    /// Finite pose and finite, non-negative sizes; invalid primitives are skipped by both paths
    /// (they have no well-defined surface to draw).
    valid: bool,
    /// Inclusive pixel rectangle that may contain hits, or `None` when nothing can be seen.
    rect: Option<[usize; 4]>,
    /// The shape-frame bounding box's eight corners projected (x/z, y/z), when all are in front
    /// of the camera: every hit's ray lies inside their convex hull, which a tilted link fills
    /// far less of than its rectangle, so each row is traced only across the hull's slice.
    hull: Option<[[f64; 2]; 8]>,
}

impl Prepared {
    /// The columns of `[u0, u1]` in the row whose rays have y = `y` that may hold hits: the
    /// hull's slice over the band `y ± dy` (a pixel's height, so that rounding at the hull's
    /// vertices cannot drop a pixel), widened by a pixel each side as [`pixel_range`] widens;
    /// all of `[u0, u1]` without a hull, `None` when the band misses it.
    #[inline]
    fn row_columns(
        &self,
        y: f64,
        dy: f64,
        i: &Intrinsics,
        (u0, u1): (usize, usize),
    ) -> Option<(usize, usize)> {
        let usable = dy.is_finite() && dy > 0.0 && i.fx.is_finite() && i.fx > 0.0;
        let Some(hull) = self.hull.as_ref().filter(|_| usable) else {
            return Some((u0, u1));
        };
        let (y0, y1) = (y - dy, y + dy);
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for (a, &[xa, ya]) in hull.iter().enumerate() {
            if (y0..=y1).contains(&ya) {
                lo = lo.min(xa);
                hi = hi.max(xa);
            }
            // Where the segment to each later corner crosses the band's edges.
            for &[xb, yb] in &hull[a + 1..] {
                for edge in [y0, y1] {
                    if (ya - edge) * (yb - edge) < 0.0 {
                        let x = xa + (edge - ya) * (xb - xa) / (yb - ya);
                        lo = lo.min(x);
                        hi = hi.max(x);
                    }
                }
            }
        }
        if lo > hi {
            return None;
        }
        let (a, b) = pixel_range([lo, hi], i.fx, i.cx, i.width)?;
        let (a, b) = (a.max(u0), b.min(u1));
        (a <= b).then_some((a, b))
    }
}

/// The ray buffers after the visibility pass.
struct Visibility {
    t: Vec<f64>,
    prim: Vec<u32>,
    surface: Vec<Surface>,
}

impl Visibility {
    /// Meets pixel `i`'s ray, `(x, y, 1)` in the camera frame (`row`: its `y` part from
    /// [`row_dir`]), with primitive `k`, keeping the hit when it is the nearest so far.
    #[inline]
    /// Whether primitive `k` is now pixel `i`'s nearest hit.
    fn trace(&mut self, pp: &Prepared, k: u32, x: f64, row: &[f64; 3], i: usize) -> bool {
        let d = [
            pp.dir_x[0] * x + row[0],
            pp.dir_x[1] * x + row[1],
            pp.dir_x[2] * x + row[2],
        ];
        match intersect(&pp.shape, pp.origin, d, MIN_DEPTH_M) {
            Some((t, s)) => self.take(t, s, k, i),
            None => false,
        }
    }

    /// Keeps primitive `k`'s hit at depth `t` for pixel `i` when it is the nearest so far.
    #[inline(always)]
    fn take(&mut self, t: f64, s: Surface, k: u32, i: usize) -> bool {
        if closer(t, k, self.t[i], self.prim[i]) {
            self.t[i] = t;
            self.prim[i] = k;
            self.surface[i] = s;
            return true;
        }
        false
    }

    /// [`Self::trace`] of each pixel gathered in `p` (one row, one primitive), then empties it;
    /// `won(j)` for each pixel the primitive is now nearest at (`j`: the caller's index). A
    /// cylinder takes four rays at a time in vector lanes (`packet`, bit for bit the scalar
    /// answer), and so does a box: the arm's links are mostly cylinders and boxes.
    fn trace_packet(
        &mut self,
        pp: &Prepared,
        k: u32,
        row: &[f64; 3],
        p: &mut Packet,
        mut won: impl FnMut(usize),
    ) {
        let n = std::mem::take(&mut p.n);
        let lanes = |p: &Packet| -> [[f64; 4]; 3] {
            // Lanes past the gathered pixels repeat the last one; their answers are dropped.
            let x: [f64; 4] = std::array::from_fn(|lane| p.x[lane.min(n - 1)]);
            std::array::from_fn(|c| x.map(|x| pp.dir_x[c] * x + row[c]))
        };
        let hits =
            match pp.shape {
                Shape::Cylinder { .. } | Shape::Cuboid { .. } if n >= 2 => Some(
                    packet::intersect4(&pp.shape, pp.origin, lanes(p), MIN_DEPTH_M),
                ),
                _ => None,
            };
        if let Some(hits) = hits {
            for (&(i, j), hit) in p.at.iter().zip(hits).take(n) {
                if let Some((t, s)) = hit {
                    if self.take(t, s, k, i) {
                        won(j);
                    }
                }
            }
            return;
        }
        for lane in 0..n {
            let (i, j) = p.at[lane];
            if self.trace(pp, k, p.x[lane], row, i) {
                won(j);
            }
        }
    }

    /// Nothing hit yet. The start depth is `f64::MAX`, not infinity, so that an infinite "hit"
    /// (only possible from a degenerate camera) can never win a pixel.
    fn empty(n: usize) -> Self {
        Visibility {
            t: vec![f64::MAX; n],
            prim: vec![NO_PRIM; n],
            surface: vec![Surface::None; n],
        }
    }
}

/// Up to four pixels of one row waiting to be traced against one primitive together.
#[derive(Default)]
struct Packet {
    /// The rays' x (their y is the row's).
    x: [f64; 4],
    /// Each pixel's index in the visibility buffers and the caller's own index for it.
    at: [(usize, usize); 4],
    n: usize,
}

impl Packet {
    /// Adds a pixel; true when the packet is full.
    #[inline(always)]
    fn push(&mut self, x: f64, i: usize, j: usize) -> bool {
        self.x[self.n] = x;
        self.at[self.n] = (i, j);
        self.n += 1;
        self.n == 4
    }
}

/// What every pixel of one frame shares: the rays' coordinates, the primitives in the camera's
/// frame, and the shading constants.
struct FrameSetup {
    xs: Vec<f64>,
    ys: Vec<f64>,
    prepared: Vec<Prepared>,
    lut: &'static noise::SrgbEncoder,
    ambient: f64,
    background: [u8; 3],
}

impl FrameSetup {
    fn new(scene: &RenderScene, camera: &PinholeCamera, options: &RenderOptions) -> Self {
        let (w, h) = (camera.intrinsics.width, camera.intrinsics.height);
        // The same per-column / per-row ray coordinates feed every path, so they see identical
        // rays.
        let i = &camera.intrinsics;
        let xs: Vec<f64> = (0..w).map(|u| (u as f64 - i.cx) / i.fx).collect();
        let ys: Vec<f64> = (0..h).map(|v| (v as f64 - i.cy) / i.fy).collect();
        let light = light_direction(options);
        let camera_from_world = camera.camera_from_world();
        let prepared: Vec<Prepared> = scene
            .primitives
            .iter()
            .map(|p| {
                prepare(
                    &p.shape,
                    &p.world_from_shape,
                    &camera_from_world,
                    camera,
                    &light,
                )
            })
            .collect();
        let lut = noise::SrgbEncoder::shared();
        let background = options.background.map(|c| lut.encode(c as f64));
        FrameSetup {
            xs,
            ys,
            prepared,
            lut,
            ambient: options.ambient.clamp(0.0, 1.0) as f64,
            background,
        }
    }

    /// The colour of pixel `(u, v)` (index `i`) given its nearest hit.
    #[inline(always)]
    fn shade(
        &self,
        scene: &RenderScene,
        camera: &PinholeCamera,
        vis: &Visibility,
        (u, v, i): (usize, usize, usize),
    ) -> [u8; 3] {
        let k = vis.prim[i];
        if k == NO_PRIM {
            return self.background;
        }
        let (x, y) = (self.xs[u], self.ys[v]);
        let (pp, prim) = (&self.prepared[k as usize], &scene.primitives[k as usize]);
        let t = vis.t[i];
        let d = ray_dir(pp, x, y);
        let p = [
            pp.origin[0] + t * d[0],
            pp.origin[1] + t * d[1],
            pp.origin[2] + t * d[2],
        ];
        let nrm = local_normal(&pp.shape, vis.surface[i], p);
        let lambert = (nrm[0] * pp.light[0] + nrm[1] * pp.light[1] + nrm[2] * pp.light[2]).max(0.0);
        let shade = self.ambient + (1.0 - self.ambient) * lambert;
        let albedo = match (&prim.texture, vis.surface[i]) {
            (Some(tex), Surface::PosZ) => printed_albedo(pp, tex, camera, x, y),
            _ => None,
        }
        .unwrap_or(prim.color);
        let [r, g, b] = albedo;
        // Three calls rather than `map`: the closure `map` takes was not inlined, and this runs
        // once per traced pixel.
        [
            self.lut.encode(r as f64 * shade),
            self.lut.encode(g as f64 * shade),
            self.lut.encode(b as f64 * shade),
        ]
    }
}

/// The light direction in the world, unit; zero (no directional light) when it is unusable.
fn light_direction(options: &RenderOptions) -> Vector3<f64> {
    let light = options.light_dir_world.normalize();
    if light.iter().all(|c| c.is_finite()) {
        light
    } else {
        Vector3::zeros()
    }
}

fn render_impl(
    scene: &RenderScene,
    camera: &PinholeCamera,
    options: &RenderOptions,
    culled: bool,
) -> RenderOutput {
    let (w, h) = (camera.intrinsics.width, camera.intrinsics.height);
    let no_primitives = RenderScene::default();
    let scene = if camera.validate().is_ok() {
        scene
    } else {
        &no_primitives
    };
    let frame = FrameSetup::new(scene, camera, options);
    let vis = if culled {
        visibility_culled(
            &frame.prepared,
            &frame.xs,
            &frame.ys,
            &Region::whole(w, h),
            &camera.intrinsics,
        )
    } else {
        visibility_brute(&frame.prepared, &frame.xs, &frame.ys)
    };

    let n = w * h;
    let mut out = RenderOutput {
        width: camera.width(),
        height: camera.height(),
        rgb: shade_all(&frame, scene, camera, &vis),
        depth_m: vec![0.0; n],
        instance: vec![BACKGROUND_INSTANCE; n],
        part: vec![NO_PART; n],
    };
    for (i, &k) in vis.prim.iter().enumerate() {
        if k != NO_PRIM {
            let prim = &scene.primitives[k as usize];
            out.depth_m[i] = vis.t[i] as f32;
            out.instance[i] = prim.instance;
            out.part[i] = prim.part;
        }
    }
    // The sensor model changes depth only: the colours above are final.
    noise::apply_sensor_model(&mut out, &vis.t, &vis.prim, options);
    out
}

/// Every pixel's colour, `width · height · 3` bytes, from a visibility pass over the whole image.
fn shade_all(
    frame: &FrameSetup,
    scene: &RenderScene,
    camera: &PinholeCamera,
    vis: &Visibility,
) -> Vec<u8> {
    let (w, h) = (camera.intrinsics.width, camera.intrinsics.height);
    let mut rgb = vec![0; 3 * w * h];
    for v in 0..h {
        for u in 0..w {
            let i = v * w + u;
            rgb[3 * i..3 * i + 3].copy_from_slice(&frame.shade(scene, camera, vis, (u, v, i)));
        }
    }
    rgb
}

/// Renders the colour images of a sequence of scenes from one camera, each byte for byte what
/// [`render`] gives, re-tracing only what can differ from the frame before.
///
/// Why it is exact: the renderer draws no shadows or reflections, so a pixel's colour depends
/// only on the nearest primitive its ray meets, and a ray can meet a primitive only inside that
/// primitive's screen rectangle. Between two frames only the primitives that changed can change
/// a pixel: one that showed a changed primitive is traced again against everything; one inside
/// a changed primitive's new rectangle keeps its nearest unchanged hit (the same primitive in the
/// same pose gives the same hit, and the nearest is taken under a total order, depth then index)
/// and is traced against the changed primitives only; every other pixel keeps its colour. A
/// recording of an arm moving over a still table traces the arm's links over the arm's part of
/// the image.
pub struct IncrementalRenderer {
    camera: PinholeCamera,
    options: RenderOptions,
    /// The last scene drawn, its colours and, per pixel, its nearest hit.
    last: Option<(RenderScene, Vec<u8>, Visibility)>,
}

impl IncrementalRenderer {
    /// A renderer for `camera` with `options`, nothing drawn yet.
    pub fn new(camera: PinholeCamera, options: RenderOptions) -> Self {
        IncrementalRenderer {
            camera,
            options,
            last: None,
        }
    }

    /// `scene`'s colour image (`width · height · 3` bytes), as [`render`] draws it.
    pub fn render(&mut self, scene: &RenderScene) -> &[u8] {
        let camera = &self.camera;
        let (w, h) = (camera.intrinsics.width, camera.intrinsics.height);
        let reusable = |(s, _, _): &(RenderScene, Vec<u8>, Visibility)| {
            s.primitives.len() == scene.primitives.len() && camera.validate().is_ok()
        };
        let frame = FrameSetup::new(scene, camera, &self.options);
        let Some((before, _, _)) = self.last.as_ref().filter(|l| reusable(l)) else {
            // A first frame: one visibility pass gives both the colours (as `render` shades
            // them; its sensor model touches depth only) and the hits kept for the next frame.
            let vis = visibility_culled(
                &frame.prepared,
                &frame.xs,
                &frame.ys,
                &Region::whole(w, h),
                &camera.intrinsics,
            );
            let rgb = if camera.validate().is_ok() {
                shade_all(&frame, scene, camera, &vis)
            } else {
                render(scene, camera, &self.options).rgb
            };
            let (_, rgb, _) = self.last.insert((scene.clone(), rgb, vis));
            return rgb;
        };
        let changed: Vec<bool> = before
            .primitives
            .iter()
            .zip(&scene.primitives)
            .map(|(a, b)| a != b)
            .collect();
        let camera_from_world = camera.camera_from_world();
        let light = light_direction(&self.options);
        let (mut old_rects, mut new_rects) = (Vec::new(), Vec::new());
        for (k, a) in before
            .primitives
            .iter()
            .enumerate()
            .filter(|(k, _)| changed[*k])
        {
            let old = prepare(
                &a.shape,
                &a.world_from_shape,
                &camera_from_world,
                camera,
                &light,
            );
            old_rects.extend(old.rect);
            new_rects.extend(frame.prepared[k].rect);
        }
        let all: Vec<[usize; 4]> = old_rects.iter().chain(&new_rects).copied().collect();
        let Some(mut region) = Region::covering(&new_rects) else {
            if all.is_empty() {
                let (before, rgb, _) = self.last.as_mut().expect("a previous frame");
                *before = scene.clone();
                return rgb;
            }
            // Only old rectangles: the primitives moved out of sight.
            let mut region = Region::covering(&all).expect("rectangles");
            region.mask = None;
            return self.retrace(scene, &frame, &changed, region, &old_rects);
        };
        if !old_rects.is_empty() {
            region = Region::covering(&all).expect("rectangles");
            region.mask = Some(region.mask_of(&new_rects));
        }
        self.retrace(scene, &frame, &changed, region, &old_rects)
    }

    /// The depth image of the scene [`Self::render`] drew last, as [`render`] gives it (z in
    /// metres, 0 = no data, the sensor model of the renderer's options applied); empty before
    /// the first frame. Why from here: the visibility pass the colours came from holds every
    /// pixel's nearest hit, so a recording gets its depth without tracing again.
    pub fn depth(&self) -> Vec<f32> {
        let Some((_, _, vis)) = &self.last else {
            return Vec::new();
        };
        let mut out = RenderOutput {
            width: self.camera.width(),
            height: self.camera.height(),
            rgb: Vec::new(),
            depth_m: vis
                .prim
                .iter()
                .zip(&vis.t)
                .map(|(&k, &t)| if k == NO_PRIM { 0.0 } else { t as f32 })
                .collect(),
            instance: Vec::new(),
            part: Vec::new(),
        };
        noise::apply_sensor_model(&mut out, &vis.t, &vis.prim, &self.options);
        out.depth_m
    }

    /// Traces the pixels of `region`'s mask and, inside `old_rects`, those that showed a changed
    /// primitive; shades them and keeps the result for the next frame.
    fn retrace(
        &mut self,
        scene: &RenderScene,
        frame: &FrameSetup,
        changed: &[bool],
        mut region: Region,
        old_rects: &[[usize; 4]],
    ) -> &[u8] {
        let w = self.camera.intrinsics.width;
        let (before, rgb, vis) = self.last.as_mut().expect("a previous frame");
        let mut mask = region
            .mask
            .take()
            .unwrap_or_else(|| vec![false; region.w * region.h]);
        // Pixels that showed a changed primitive: traced again against every primitive.
        let mut full = vec![false; region.w * region.h];
        for &[u0, u1, v0, v1] in old_rects {
            for v in v0..=v1 {
                for u in u0..=u1 {
                    let (i, j) = (v * w + u, (v - region.v0) * region.w + u - region.u0);
                    let k = vis.prim[i];
                    if k != NO_PRIM && changed[k as usize] {
                        full[j] = true;
                        mask[j] = true;
                    }
                }
            }
        }
        let (ru1, rv1) = (region.u0 + region.w - 1, region.v0 + region.h - 1);
        for v in region.v0..=rv1 {
            for u in region.u0..=ru1 {
                let (i, j) = (v * w + u, (v - region.v0) * region.w + u - region.u0);
                if full[j] {
                    vis.t[i] = f64::MAX;
                    vis.prim[i] = NO_PRIM;
                    vis.surface[i] = Surface::None;
                }
            }
        }
        // A pixel keeps its colour unless it was traced afresh (`full`) or a changed primitive
        // won it (`won`): the same unchanged primitive hit at the same depth shades to the same
        // colour, so most of a moving link's rectangle (the table and objects around the link)
        // is not shaded again.
        let mut won = vec![false; region.w * region.h];
        let dy = 1.0 / self.camera.intrinsics.fy;
        for (k, pp) in frame.prepared.iter().enumerate() {
            let Some([u0, u1, v0, v1]) = pp.rect.and_then(|r| region.clip(r)) else {
                continue;
            };
            let moved = changed[k];
            let k = k as u32;
            for v in v0..=v1 {
                let y = frame.ys[v];
                let Some((u0, u1)) = pp.row_columns(y, dy, &self.camera.intrinsics, (u0, u1))
                else {
                    continue;
                };
                let row = row_dir(pp, y);
                let mut packet = Packet::default();
                let mut take = |j: usize| {
                    if moved {
                        won[j] = true;
                    }
                };
                for u in u0..=u1 {
                    let j = (v - region.v0) * region.w + u - region.u0;
                    if !mask[j] || !(moved || full[j]) {
                        continue;
                    }
                    if packet.push(frame.xs[u], v * w + u, j) {
                        vis.trace_packet(pp, k, &row, &mut packet, &mut take);
                    }
                }
                vis.trace_packet(pp, k, &row, &mut packet, &mut take);
            }
        }
        for v in region.v0..=rv1 {
            for u in region.u0..=ru1 {
                let (i, j) = (v * w + u, (v - region.v0) * region.w + u - region.u0);
                if mask[j] && (full[j] || won[j]) {
                    let c = frame.shade(scene, &self.camera, vis, (u, v, i));
                    rgb[3 * i..3 * i + 3].copy_from_slice(&c);
                }
            }
        }
        *before = scene.clone();
        rgb
    }
}

/// The pixels a visibility pass traces: a rectangle of the image and, within it, a mask. The
/// pass's buffers cover the rectangle only (indexed row by row from its corner), so re-tracing a
/// small moving part of a frame neither clears nor scans buffers of the whole image.
struct Region {
    u0: usize,
    v0: usize,
    w: usize,
    h: usize,
    /// `w · h` flags, row by row: which pixels of the rectangle are traced (all when `None`).
    mask: Option<Vec<bool>>,
}

impl Region {
    /// The part of the inclusive rectangle `[u0, u1, v0, v1]` inside this region, if any.
    fn clip(&self, [u0, u1, v0, v1]: [usize; 4]) -> Option<[usize; 4]> {
        let (u0, u1) = (u0.max(self.u0), u1.min(self.u0 + self.w - 1));
        let (v0, v1) = (v0.max(self.v0), v1.min(self.v0 + self.h - 1));
        (u0 <= u1 && v0 <= v1).then_some([u0, u1, v0, v1])
    }

    /// Every pixel of a `w`×`h` image.
    fn whole(w: usize, h: usize) -> Self {
        Region {
            u0: 0,
            v0: 0,
            w,
            h,
            mask: None,
        }
    }

    /// The pixels of the inclusive rectangles `[u0, u1, v0, v1]`, in their bounding box; `None`
    /// when there are none.
    fn covering(rects: &[[usize; 4]]) -> Option<Self> {
        let u0 = rects.iter().map(|r| r[0]).min()?;
        let u1 = rects.iter().map(|r| r[1]).max()?;
        let v0 = rects.iter().map(|r| r[2]).min()?;
        let v1 = rects.iter().map(|r| r[3]).max()?;
        let mut region = Region {
            u0,
            v0,
            w: u1 + 1 - u0,
            h: v1 + 1 - v0,
            mask: None,
        };
        region.mask = Some(region.mask_of(rects));
        Some(region)
    }

    /// A mask over this region, true inside `rects` (which must lie inside it).
    fn mask_of(&self, rects: &[[usize; 4]]) -> Vec<bool> {
        let mut mask = vec![false; self.w * self.h];
        for [a0, a1, b0, b1] in rects {
            for v in *b0..=*b1 {
                let row = (v - self.v0) * self.w;
                mask[row + a0 - self.u0..=row + a1 - self.u0].fill(true);
            }
        }
        mask
    }
}

fn prepare(
    shape: &Shape,
    world_from_shape: &Isometry3<f64>,
    camera_from_world: &Isometry3<f64>,
    camera: &PinholeCamera,
    light_world: &Vector3<f64>,
) -> Prepared {
    let camera_from_shape = camera_from_world * world_from_shape;
    let shape_from_camera = camera_from_shape.inverse();
    let r = shape_from_camera.rotation.to_rotation_matrix();
    let m = r.matrix();
    let col = |j: usize| [m[(0, j)], m[(1, j)], m[(2, j)]];
    let o = shape_from_camera.translation.vector;
    let l = world_from_shape
        .rotation
        .inverse_transform_vector(light_world);
    let valid = intersect::shape_is_valid(shape) && o.iter().chain(m.iter()).all(|x| x.is_finite());
    Prepared {
        shape: *shape,
        origin: [o.x, o.y, o.z],
        dir_x: col(0),
        dir_y: col(1),
        dir_z: col(2),
        light: [l.x, l.y, l.z],
        valid,
        rect: if valid {
            screen_rect(shape, &camera_from_shape, camera)
        } else {
            None
        },
        hull: if valid {
            projected_corners(shape, &camera_from_shape)
        } else {
            None
        },
    }
}

/// Mean albedo of a printed +z face over `supersample²` sub-rays of the pixel whose centre ray is
/// `(x, y, 1)`; `None` when the shape is not a cuboid, the texture is unusable or no sub-ray hits
/// the face (the caller falls back to the plain colour).
fn printed_albedo(
    pp: &Prepared,
    tex: &FaceTexture,
    camera: &PinholeCamera,
    x: f64,
    y: f64,
) -> Option<[f32; 3]> {
    let Shape::Cuboid { half_extents: h } = pp.shape else {
        return None;
    };
    if !tex.is_valid() {
        return None;
    }
    let n = tex.supersample.max(1) as usize;
    let mut sum = [0.0f64; 3];
    let mut hits = 0usize;
    for j in 0..n {
        // Sub-ray offsets on a regular grid inside the pixel, in pixels from its centre.
        let dv = (j as f64 + 0.5) / n as f64 - 0.5;
        for i in 0..n {
            let du = (i as f64 + 0.5) / n as f64 - 0.5;
            let d = ray_dir(
                pp,
                x + du / camera.intrinsics.fx,
                y + dv / camera.intrinsics.fy,
            );
            if d[2] == 0.0 {
                continue;
            }
            let t = (h.z - pp.origin[2]) / d[2];
            if t <= MIN_DEPTH_M {
                continue;
            }
            let px = pp.origin[0] + t * d[0];
            let py = pp.origin[1] + t * d[1];
            if let Some(c) = tex.albedo_at(px, py, h.x, h.y) {
                for k in 0..3 {
                    sum[k] += c[k] as f64;
                }
                hits += 1;
            }
        }
    }
    (hits > 0).then(|| sum.map(|s| (s / hits as f64) as f32))
}

#[inline(always)]
fn ray_dir(pp: &Prepared, x: f64, y: f64) -> [f64; 3] {
    let row = row_dir(pp, y);
    [
        pp.dir_x[0] * x + row[0],
        pp.dir_x[1] * x + row[1],
        pp.dir_x[2] * x + row[2],
    ]
}

#[inline(always)]
fn row_dir(pp: &Prepared, y: f64) -> [f64; 3] {
    [
        pp.dir_y[0] * y + pp.dir_z[0],
        pp.dir_y[1] * y + pp.dir_z[1],
        pp.dir_y[2] * y + pp.dir_z[2],
    ]
}

/// Nearest wins; equal depths go to the lower primitive index, so the answer does not depend on
/// the order primitives are visited in.
#[inline(always)]
fn closer(t: f64, k: u32, best_t: f64, best_k: u32) -> bool {
    t < best_t || (t == best_t && k < best_k)
}

/// Nearest hits at every pixel, or only where `mask` is true (the others stay empty).
fn visibility_culled(
    prepared: &[Prepared],
    xs: &[f64],
    ys: &[f64],
    region: &Region,
    intrinsics: &Intrinsics,
) -> Visibility {
    let mut vis = Visibility::empty(region.w * region.h);
    let dy = 1.0 / intrinsics.fy;
    for (k, pp) in prepared.iter().enumerate() {
        let Some([u0, u1, v0, v1]) = pp.rect.and_then(|r| region.clip(r)) else {
            continue;
        };
        let k = k as u32;
        for (v, &y) in ys.iter().enumerate().take(v1 + 1).skip(v0) {
            let Some((u0, u1)) = pp.row_columns(y, dy, intrinsics, (u0, u1)) else {
                continue;
            };
            let row = row_dir(pp, y);
            let base = (v - region.v0) * region.w;
            let mut packet = Packet::default();
            for (u, &x) in xs.iter().enumerate().take(u1 + 1).skip(u0) {
                let i = base + u - region.u0;
                if region.mask.as_ref().is_some_and(|m| !m[i]) {
                    continue;
                }
                if packet.push(x, i, i) {
                    vis.trace_packet(pp, k, &row, &mut packet, |_| {});
                }
            }
            vis.trace_packet(pp, k, &row, &mut packet, |_| {});
        }
    }
    vis
}

fn visibility_brute(prepared: &[Prepared], xs: &[f64], ys: &[f64]) -> Visibility {
    let w = xs.len();
    let mut vis = Visibility::empty(w * ys.len());
    for (v, &y) in ys.iter().enumerate() {
        for (u, &x) in xs.iter().enumerate() {
            let i = v * w + u;
            for (k, pp) in prepared.iter().enumerate() {
                if !pp.valid {
                    continue;
                }
                let d = ray_dir(pp, x, y);
                if let Some((t, s)) = intersect(&pp.shape, pp.origin, d, MIN_DEPTH_M) {
                    let k = k as u32;
                    if closer(t, k, vis.t[i], vis.prim[i]) {
                        vis.t[i] = t;
                        vis.prim[i] = k;
                        vis.surface[i] = s;
                    }
                }
            }
        }
    }
    vis
}

/// The shape-frame bounding box's corners in normalised image coordinates, when all eight are in
/// front of the camera and finite (see [`Prepared::hull`]).
fn projected_corners(shape: &Shape, camera_from_shape: &Isometry3<f64>) -> Option<[[f64; 2]; 8]> {
    let he = shape.local_half_extents();
    let mut out = [[0.0; 2]; 8];
    for (n, corner) in out.iter_mut().enumerate() {
        let s = |bit: usize| if n >> bit & 1 == 1 { 1.0 } else { -1.0 };
        let p = camera_from_shape * k::nalgebra::Point3::new(s(0) * he.x, s(1) * he.y, s(2) * he.z);
        // NaN depth fails `p.z > 0` too.
        let ahead = p.z > 0.0;
        *corner = [p.x / p.z, p.y / p.z];
        if !(ahead && corner[0].is_finite() && corner[1].is_finite()) {
            return None;
        }
    }
    Some(out)
}

/// Conservative inclusive pixel rectangle `[u0, u1, v0, v1]` outside which the shape cannot be
/// hit, or `None` when it is entirely behind the near plane or off-screen.
///
/// Two bounds, intersected: the projected corners of the shape-frame bounding box (valid when all
/// eight are in front of the camera: the projection of a convex set in front of the camera lies in
/// the hull of its projected corners), and the exact tangent bounds of the bounding sphere (valid
/// when the sphere is in front). When neither holds the whole image is used. One pixel of margin
/// absorbs rounding.
fn screen_rect(
    shape: &Shape,
    camera_from_shape: &Isometry3<f64>,
    cam: &PinholeCamera,
) -> Option<[usize; 4]> {
    let c = camera_from_shape.translation.vector;
    let r = shape.bounding_radius();
    if c.z + r < MIN_DEPTH_M * 0.5 {
        return None;
    }
    // Bounds on x/z and y/z (normalised image coordinates).
    let mut bx = [f64::NEG_INFINITY, f64::INFINITY];
    let mut by = [f64::NEG_INFINITY, f64::INFINITY];
    let he = shape.local_half_extents();
    let mut corners_ok = true;
    let (mut cx0, mut cx1, mut cy0, mut cy1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for sx in [-1.0, 1.0] {
        for sy in [-1.0, 1.0] {
            for sz in [-1.0, 1.0] {
                let p =
                    camera_from_shape * k::nalgebra::Point3::new(sx * he.x, sy * he.y, sz * he.z);
                if p.z <= 0.0 {
                    corners_ok = false;
                    continue;
                }
                let (x, y) = (p.x / p.z, p.y / p.z);
                cx0 = cx0.min(x);
                cx1 = cx1.max(x);
                cy0 = cy0.min(y);
                cy1 = cy1.max(y);
            }
        }
    }
    if corners_ok {
        bx = [cx0, cx1];
        by = [cy0, cy1];
    }
    if c.z > r {
        let tangent = |a: f64| {
            let dist = (a * a + c.z * c.z).sqrt();
            let centre = a.atan2(c.z);
            let half = (r / dist).asin();
            [(centre - half).tan(), (centre + half).tan()]
        };
        let (sx, sy) = (tangent(c.x), tangent(c.y));
        bx = [bx[0].max(sx[0]), bx[1].min(sx[1])];
        by = [by[0].max(sy[0]), by[1].min(sy[1])];
    }
    let i = &cam.intrinsics;
    let u = pixel_range(bx, i.fx, i.cx, i.width)?;
    let v = pixel_range(by, i.fy, i.cy, i.height)?;
    Some([u.0, u.1, v.0, v.1])
}

/// Pixel indices whose centres `(i − c)/f` may fall within `[lo, hi]`, with one pixel of margin.
fn pixel_range(b: [f64; 2], f: f64, c: f64, n: usize) -> Option<(usize, usize)> {
    let lo = (f * b[0] + c).floor() - 1.0;
    let hi = (f * b[1] + c).ceil() + 1.0;
    let max = n as f64 - 1.0;
    // NaN bounds (degenerate shapes) fall through to the whole image rather than to nothing.
    let lo = if lo.is_nan() { 0.0 } else { lo.max(0.0) };
    let hi = if hi.is_nan() { max } else { hi.min(max) };
    (lo <= hi).then_some((lo as usize, hi as usize))
}
