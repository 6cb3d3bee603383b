//! Object-aware points: a pointer's answer checked against the depth before anything is planned
//! from it. Real models point a few pixels to a few centimetres off; a grasp point that lands on
//! the table beside its object, or a place point on the rim of a bowl, would otherwise become a
//! grasp of nothing or a drop on the floor.
//!
//! * A grasp point is moved onto the object segment nearest to it (the table plane and the robot
//!   removed, within [`SNAP_RADIUS_PX`]); the answer's points vote for a segment, so one stray
//!   point does not choose the object.
//! * A place "in / on X" is kept inside X's segment, far enough from its edge for the held object
//!   ([`place_inside`]); a place beside something is moved to the nearest free spot of the table
//!   with room for the held object ([`place_free`]).
//!
//! Each move is a [`Correction`] (what moved, from and to which pixel, how far in metres) that
//! the CLI prints and rerun logs.

use k::nalgebra::{Point2, Point3};

use super::perceive::{grip_width, object_blob, ray_to_height, ObjectBlob, PerceiveError, Table};
use pointact_core::camera::lift::lift;
use pointact_core::camera::Frame;
use pointact_core::geometry::RobustDepthOptions;
use pointact_core::planning::Sphere;

/// How far a grasp point may be moved onto an object (px in the image: three standard
/// deviations of a 16 px pointing error).
pub(crate) const SNAP_RADIUS_PX: f64 = 48.0;
/// An object segment has at least this many pixels (fewer: depth noise on the table).
const MIN_SEGMENT: usize = 30;
/// Pixels within this distance of the robot's spheres are the robot (m).
const ROBOT_MARGIN: f64 = 0.02;
/// Cell of the top-view grids (m).
const CELL: f64 = 0.005;
/// What stands this high above the table takes room from a place beside things (m): lower than
/// any object to avoid, higher than the depth noise of a RealSense at a metre, whose specks at
/// the lower object threshold (a few mm) fill the table's far side.
const PLACE_OBSTACLE_HEIGHT: f64 = 0.012;
/// How far a free place may be from the answered one (m).
const FREE_RADIUS: f64 = 0.20;

/// One answered point moved by a depth check.
#[derive(Debug, Clone, PartialEq)]
pub struct Correction {
    /// What moved: "grasp point", "place point".
    pub what: &'static str,
    /// The point as answered, pixel (u, v).
    pub from_px: [f64; 2],
    /// Where it was moved to, pixel (u, v).
    pub to_px: [f64; 2],
    /// Horizontal distance it moved in the base frame (m).
    pub moved_m: f64,
    /// Why, in words.
    pub why: String,
}

/// A correction in one line, as `run` prints it and rerun logs it.
pub fn correction_line(c: &Correction) -> String {
    format!(
        "corrected {} ({:.0}, {:.0}) -> ({:.0}, {:.0}), {:.1} cm: {}",
        c.what,
        c.from_px[0],
        c.from_px[1],
        c.to_px[0],
        c.to_px[1],
        100.0 * c.moved_m,
        c.why
    )
}

/// The frame's pixels lifted once: the base-frame point of each pixel and whether it stands on
/// the table (above it, not the robot).
pub(crate) struct DepthView<'a> {
    pub frame: &'a Frame,
    pub table_z: f64,
    /// Points this much above the table are objects (m, see [`Table::min_object_height`]).
    pub min_height: f64,
    w: usize,
    h: usize,
    points: Vec<Option<Point3<f64>>>,
    above: Vec<bool>,
    robot: Vec<bool>,
}

impl<'a> DepthView<'a> {
    /// `robot`: the arm's spheres where it stands now (its pixels are not objects).
    pub(crate) fn new(frame: &'a Frame, table: Table, robot: &[Sphere]) -> Self {
        let (table_z, min_height) = (table.z, table.min_object_height);
        let (w, h) = (frame.depth.width, frame.depth.height);
        let mut points = Vec::with_capacity(w * h);
        for v in 0..h {
            for u in 0..w {
                points.push(frame.depth.get(u, v).and_then(|d| {
                    let c = frame
                        .intrinsics
                        .deproject([u as f64, v as f64], d as f64)
                        .ok()?;
                    Some(frame.base_from_camera * Point3::from(c))
                }));
            }
        }
        let high = |p: &Option<Point3<f64>>| p.is_some_and(|p| p.z > table_z + min_height);
        let robot: Vec<bool> = points
            .iter()
            .map(|p| {
                high(p)
                    && p.is_some_and(|p| {
                        robot
                            .iter()
                            .any(|s| (p - s.center).norm() < s.radius + ROBOT_MARGIN)
                    })
            })
            .collect();
        let above = points
            .iter()
            .zip(&robot)
            .map(|(p, r)| !r && high(p))
            .collect();
        DepthView {
            frame,
            table_z,
            min_height,
            w,
            h,
            points,
            above,
            robot,
        }
    }

    /// The base-frame point of pixel `i` and its height above the table, unless the pixel has no
    /// depth or shows the robot.
    pub(crate) fn seen(&self, i: usize) -> Option<(Point3<f64>, f64)> {
        let p = self.points.get(i).copied().flatten()?;
        (!self.robot[i]).then(|| (p, p.z - self.table_z))
    }

    /// Pixels in the image (`width · height`).
    pub(crate) fn pixel_count(&self) -> usize {
        self.points.len()
    }

    pub(super) fn px_of(&self, i: usize) -> [f64; 2] {
        [(i % self.w) as f64, (i / self.w) as f64]
    }

    fn index(&self, px: [f64; 2]) -> Option<usize> {
        let (u, v) = (px[0].round(), px[1].round());
        (u >= 0.0 && v >= 0.0 && (u as usize) < self.w && (v as usize) < self.h)
            .then(|| v as usize * self.w + u as usize)
    }

    /// Where an answered pixel points in the base frame: its own depth (median of a window), or
    /// where its ray meets the table when it has none.
    pub(crate) fn locate(&self, px: [f64; 2]) -> Result<Point3<f64>, PerceiveError> {
        match lift(self.frame, px, &RobustDepthOptions::surface()) {
            Ok(p) => Ok(p),
            Err(_) => ray_to_height(self.frame, px, self.table_z),
        }
    }

    /// Whether the pixel shows the robot.
    fn on_robot(&self, px: [f64; 2]) -> bool {
        self.index(px).is_some_and(|i| self.robot[i])
    }

    /// The object segment nearest to `px` in the image, within `radius_px`: the pixel of it
    /// nearest to `px`, its distance (px), and the segment. Pointing error is a pixel error (a
    /// model reads the image), so the nearest object in the image is the likeliest one meant.
    /// Specks of depth noise above the table (segments under [`MIN_SEGMENT`] pixels) are passed
    /// over.
    ///
    /// With `max_width` (a grasp), a segment wider than that where fingers close is passed over
    /// too while a narrower one is within reach; the nearest segment when none is.
    fn nearest_segment(
        &self,
        px: [f64; 2],
        radius_px: f64,
        max_width: Option<f64>,
    ) -> Option<(usize, f64, ObjectBlob)> {
        let r = radius_px.ceil() as i64;
        let (cu, cv) = (px[0].round() as i64, px[1].round() as i64);
        let mut near: Vec<(f64, usize)> = Vec::new();
        for v in (cv - r).max(0)..=(cv + r).min(self.h as i64 - 1) {
            for u in (cu - r).max(0)..=(cu + r).min(self.w as i64 - 1) {
                let i = v as usize * self.w + u as usize;
                let d = dist2([u as f64, v as f64], px).sqrt();
                if self.above[i] && d <= radius_px {
                    near.push((d, i));
                }
            }
        }
        near.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Pixels of segments already tried (a mask: a segment holds thousands of pixels).
        let mut seen = vec![false; self.w * self.h];
        let mut too_wide = None;
        for (d, i) in near {
            if seen[i] {
                continue;
            }
            let blob = object_blob(
                self.frame,
                self.px_of(i),
                self.table_z,
                self.min_height,
                0.15,
            );
            match blob {
                Ok(b) if b.pixels.len() >= MIN_SEGMENT => {
                    let fits = max_width.is_none_or(|w| grip_width(&b, self.table_z, 0.03) <= w);
                    if fits {
                        return Some((i, d, b));
                    }
                    b.pixels.iter().for_each(|&p| seen[p] = true);
                    too_wide.get_or_insert((i, d, b));
                }
                Ok(b) => b.pixels.iter().for_each(|&p| seen[p] = true),
                Err(_) => seen[i] = true,
            }
        }
        too_wide
    }

    fn project(&self, p: &Point3<f64>) -> Option<[f64; 2]> {
        let c = self.frame.base_from_camera.inverse() * p;
        self.frame.intrinsics.project(&c.coords).ok()
    }
}

/// The answered object: the segment most of the answer's points are on or nearest to (each
/// within [`SNAP_RADIUS_PX`]), and the pixel to use for it: the medoid of the points that chose it
/// when that is on the segment, else the segment pixel nearest to it.
///
/// `max_width`: the gripper's opening, for a grasp: segments too wide to hold are passed over (a
/// box beside the cup) while a narrower one is near.
pub(crate) fn snap_to_object(
    view: &DepthView<'_>,
    answer: &[[f64; 2]],
    what: &'static str,
    max_width: Option<f64>,
) -> Result<([f64; 2], ObjectBlob, Option<Correction>), PerceiveError> {
    let medoid =
        super::perceive::medoid(answer).ok_or(PerceiveError::NoObject { u: -1.0, v: -1.0 })?;
    let no_object = || {
        if view.on_robot(medoid) {
            PerceiveError::OnRobot {
                u: medoid[0],
                v: medoid[1],
            }
        } else {
            PerceiveError::NoObject {
                u: medoid[0],
                v: medoid[1],
            }
        }
    };
    // Points that all fall where the camera measured nothing (a black or shiny object) are not
    // moved to whatever has depth nearby: that would grasp a neighbour.
    if let Some(Err(e)) = answer
        .iter()
        .map(|p| lift(view.frame, *p, &RobustDepthOptions::surface()))
        .reduce(|a, b| a.or(b))
    {
        return Err(e.into());
    }
    // Each point's nearest object pixel, and the nearest to the points' mean: Gaussian pointing
    // error averages out in the mean (σ/√n), a stray point is outvoted by the others.
    let mean = [
        answer.iter().map(|p| p[0]).sum::<f64>() / answer.len() as f64,
        answer.iter().map(|p| p[1]).sum::<f64>() / answer.len() as f64,
    ];
    let mut blobs: Vec<ObjectBlob> = Vec::new();
    let mut found = |p: [f64; 2]| -> Option<(usize, f64)> {
        let (i, d, b) = view.nearest_segment(p, SNAP_RADIUS_PX, max_width)?;
        if !blobs.iter().any(|o| o.pixels.contains(&i)) {
            blobs.push(b);
        }
        Some((i, d))
    };
    let seeds: Vec<(usize, f64, [f64; 2])> = answer
        .iter()
        .filter_map(|p| found(*p).map(|(i, d)| (i, d, *p)))
        .collect();
    let mean_seed = if answer.len() > 1 { found(mean) } else { None };
    // Most votes (the mean's counts one and a half: it breaks a tie, two points outvote it),
    // then the nearest.
    let chosen = blobs
        .into_iter()
        .map(|b| {
            let voters: Vec<&(usize, f64, [f64; 2])> = seeds
                .iter()
                .filter(|(i, _, _)| b.pixels.contains(i))
                .collect();
            let mean_vote = mean_seed.is_some_and(|(i, _)| b.pixels.contains(&i));
            let votes = 2 * voters.len() + 3 * usize::from(mean_vote);
            let nearest = voters.iter().map(|v| v.1).fold(f64::INFINITY, f64::min);
            (votes, nearest, b)
        })
        .filter(|(n, _, _)| *n > 0)
        .max_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)));
    let Some((_, _, blob)) = chosen else {
        return Err(no_object());
    };
    let voters: Vec<[f64; 2]> = seeds
        .iter()
        .filter(|(i, _, _)| blob.pixels.contains(i))
        .map(|s| s.2)
        .collect();
    let rep = match voters.len() {
        0 => mean,
        _ => super::perceive::medoid(&voters).unwrap_or(medoid),
    };
    if view.index(rep).is_some_and(|i| blob.pixels.contains(&i)) {
        let moved = rep != medoid;
        let correction = moved.then(|| Correction {
            what,
            from_px: medoid,
            to_px: rep,
            moved_m: distance(view, medoid, rep),
            why: "the answer's points voted for another object than their medoid's".into(),
        });
        return Ok((rep, blob, correction));
    }
    // The segment pixel nearest (in the image) to the representative point.
    let to = blob
        .pixels
        .iter()
        .map(|&i| view.px_of(i))
        .min_by(|a, b| dist2(*a, rep).total_cmp(&dist2(*b, rep)))
        .unwrap_or(rep);
    Ok((
        to,
        blob,
        Some(Correction {
            what,
            from_px: medoid,
            to_px: to,
            moved_m: distance(view, medoid, to),
            why: "the point missed the object; moved onto the nearest object segment".into(),
        }),
    ))
}

fn dist2(a: [f64; 2], b: [f64; 2]) -> f64 {
    (a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2)
}

/// Horizontal distance between where two pixels point (m).
fn distance(view: &DepthView<'_>, a: [f64; 2], b: [f64; 2]) -> f64 {
    match (view.locate(a), view.locate(b)) {
        (Ok(p), Ok(q)) => (p - q).xy().norm(),
        _ => f64::NAN,
    }
}

/// Where to place: the pixel whose depth gives the surface height, and the horizontal spot when
/// it differs from that pixel's own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PlaceSpot {
    pub px: [f64; 2],
    pub xy: Option<Point2<f64>>,
}

/// A top-view occupancy grid (cells of [`CELL`]) over a box of the table.
struct TopGrid {
    origin: Point2<f64>,
    nx: usize,
    ny: usize,
    cells: Vec<bool>,
}

impl TopGrid {
    fn around(lo: Point2<f64>, hi: Point2<f64>, pad: usize) -> TopGrid {
        let origin = Point2::new(lo.x - pad as f64 * CELL, lo.y - pad as f64 * CELL);
        let nx = ((hi.x - lo.x) / CELL).ceil() as usize + 2 * pad + 1;
        let ny = ((hi.y - lo.y) / CELL).ceil() as usize + 2 * pad + 1;
        TopGrid {
            origin,
            nx,
            ny,
            cells: vec![false; nx * ny],
        }
    }
    fn cell(&self, p: Point2<f64>) -> Option<usize> {
        let (x, y) = ((p.x - self.origin.x) / CELL, (p.y - self.origin.y) / CELL);
        (x >= 0.0 && y >= 0.0 && (x as usize) < self.nx && (y as usize) < self.ny)
            .then(|| y as usize * self.nx + x as usize)
    }
    fn center(&self, c: usize) -> Point2<f64> {
        Point2::new(
            self.origin.x + ((c % self.nx) as f64 + 0.5) * CELL,
            self.origin.y + ((c / self.nx) as f64 + 0.5) * CELL,
        )
    }
    /// Distance (m) from each cell to the nearest cell whose flag is `of` (two-pass chamfer, 1
    /// and √2 steps; far beyond the grid when there is none).
    fn distance_to(&self, of: bool) -> Vec<f64> {
        let big = 1e9;
        let mut d: Vec<f64> = self
            .cells
            .iter()
            .map(|&c| if c == of { 0.0 } else { big })
            .collect();
        let (nx, ny) = (self.nx, self.ny);
        let s2 = std::f64::consts::SQRT_2;
        for y in 0..ny {
            for x in 0..nx {
                let i = y * nx + x;
                let mut m = d[i];
                if x > 0 {
                    m = m.min(d[i - 1] + 1.0);
                }
                if y > 0 {
                    m = m.min(d[i - nx] + 1.0);
                    if x > 0 {
                        m = m.min(d[i - nx - 1] + s2);
                    }
                    if x + 1 < nx {
                        m = m.min(d[i - nx + 1] + s2);
                    }
                }
                d[i] = m;
            }
        }
        for y in (0..ny).rev() {
            for x in (0..nx).rev() {
                let i = y * nx + x;
                let mut m = d[i];
                if x + 1 < nx {
                    m = m.min(d[i + 1] + 1.0);
                }
                if y + 1 < ny {
                    m = m.min(d[i + nx] + 1.0);
                    if x + 1 < nx {
                        m = m.min(d[i + nx + 1] + s2);
                    }
                    if x > 0 {
                        m = m.min(d[i + nx - 1] + s2);
                    }
                }
                d[i] = m;
            }
        }
        d.into_iter().map(|v| v * CELL).collect()
    }
}

/// Counter-clockwise convex hull (Andrew's monotone chain).
pub(super) fn convex_hull(mut pts: Vec<Point2<f64>>) -> Vec<Point2<f64>> {
    pts.sort_by(|a, b| a.x.total_cmp(&b.x).then(a.y.total_cmp(&b.y)));
    pts.dedup();
    if pts.len() < 3 {
        return pts;
    }
    let cross = |o: &Point2<f64>, a: &Point2<f64>, b: &Point2<f64>| {
        (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x)
    };
    let mut hull: Vec<Point2<f64>> = Vec::with_capacity(2 * pts.len());
    for pass in 0..2 {
        let start = hull.len();
        let iter: Box<dyn Iterator<Item = &Point2<f64>>> = if pass == 0 {
            Box::new(pts.iter())
        } else {
            Box::new(pts.iter().rev())
        };
        for p in iter {
            while hull.len() >= start + 2
                && cross(&hull[hull.len() - 2], &hull[hull.len() - 1], p) <= 0.0
            {
                hull.pop();
            }
            hull.push(*p);
        }
        hull.pop();
    }
    hull
}

/// Whether `p` lies inside (or on) the counter-clockwise convex polygon `hull`.
pub(super) fn inside_convex(hull: &[Point2<f64>], p: Point2<f64>) -> bool {
    hull.len() >= 3
        && (0..hull.len()).all(|i| {
            let (a, b) = (hull[i], hull[(i + 1) % hull.len()]);
            (b.x - a.x) * (p.y - a.y) - (b.y - a.y) * (p.x - a.x) >= 0.0
        })
}

/// A place inside `target` (in / on it): kept where answered when its spot lies at least `margin`
/// inside the target's footprint, else moved to the nearest spot that does (the deepest one when
/// none does: a block on a block of its size).
pub(crate) fn place_inside(
    view: &DepthView<'_>,
    target: &ObjectBlob,
    place_px: [f64; 2],
    margin: f64,
    target_name: &str,
) -> Result<(PlaceSpot, Option<Correction>), PerceiveError> {
    let at = view.locate(place_px)?;
    let (mut lo, mut hi) = (target.points[0].xy(), target.points[0].xy());
    for p in &target.points {
        lo = lo.inf(&p.xy());
        hi = hi.sup(&p.xy());
    }
    // The footprint is the convex hull of what is seen of the target: a camera sees the rim and
    // the far wall of a pan or a bowl, and a floor lower than the depth noise not at all.
    let mut grid = TopGrid::around(lo, hi, 4);
    let hull = convex_hull(target.points.iter().map(|p| p.xy()).collect());
    for c in 0..grid.cells.len() {
        grid.cells[c] = inside_convex(&hull, grid.center(c));
    }
    let depth = grid.distance_to(false);
    let here = grid.cell(at.xy());
    if here.is_some_and(|c| depth[c] >= margin) {
        return Ok((
            PlaceSpot {
                px: place_px,
                xy: None,
            },
            None,
        ));
    }
    let deepest = (0..depth.len())
        .max_by(|a, b| depth[*a].total_cmp(&depth[*b]))
        .filter(|c| depth[*c] > 0.0)
        .ok_or(PerceiveError::NoPlace {
            why: format!("the {target_name} has no footprint to place on"),
        })?;
    let want = margin.min(depth[deepest]);
    let best = (0..depth.len())
        .filter(|c| depth[*c] >= want)
        .min_by(|a, b| {
            (grid.center(*a) - at.xy())
                .norm()
                .total_cmp(&(grid.center(*b) - at.xy()).norm())
        })
        .unwrap_or(deepest);
    let xy = grid.center(best);
    // The surface height there: the target's visible point nearest that spot.
    let (px, _) = target
        .points
        .iter()
        .zip(&target.pixels)
        .map(|(p, i)| (view.px_of(*i), (p.xy() - xy).norm()))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((place_px, 0.0));
    Ok((
        PlaceSpot { px, xy: Some(xy) },
        Some(Correction {
            what: "place point",
            from_px: place_px,
            to_px: view.project(&Point3::new(xy.x, xy.y, at.z)).unwrap_or(px),
            moved_m: (xy - at.xy()).norm(),
            why: format!(
                "kept {:.1} cm inside the {target_name}'s footprint",
                100.0 * want
            ),
        }),
    ))
}

/// A place beside things: on the table, with nothing standing within `clearance` (m) of it
/// (`ignore`: pixels of the held object, which leaves its spot). Kept when it is so, else moved to
/// the nearest such spot within 20 cm.
pub(crate) fn place_free(
    view: &DepthView<'_>,
    place_px: [f64; 2],
    clearance: f64,
    ignore: &[usize],
) -> Result<(PlaceSpot, Option<Correction>), PerceiveError> {
    let at = view.locate(place_px)?;
    let r = FREE_RADIUS + clearance;
    let lo = Point2::new(at.x - r, at.y - r);
    let hi = Point2::new(at.x + r, at.y + r);
    let mut occupied = TopGrid::around(lo, hi, 0);
    let mut table = TopGrid::around(lo, hi, 0);
    // Object points per cell.
    let mut count = vec![0u16; occupied.cells.len()];
    let mut ignored = vec![false; view.points.len()];
    for &i in ignore {
        if let Some(f) = ignored.get_mut(i) {
            *f = true;
        }
    }
    for (i, p) in view.points.iter().enumerate() {
        let Some(p) = p else { continue };
        let Some(c) = occupied.cell(p.xy()) else {
            continue;
        };
        if view.above[i] && !ignored[i] && p.z > view.table_z + PLACE_OBSTACLE_HEIGHT {
            count[c] = count[c].saturating_add(1);
        } else if (p.z - view.table_z).abs() <= view.min_height.max(0.01) {
            table.cells[c] = true;
        }
    }
    // Occupied: 3 object points in the cell and its neighbours (a 1.5 cm square), so a speck of
    // noise is not a thing while a surface seen at a grazing angle still is.
    let (nx, ny) = (occupied.nx, occupied.ny);
    for y in 0..ny {
        for x in 0..nx {
            let mut n = 0u32;
            for yy in y.saturating_sub(1)..(y + 2).min(ny) {
                for xx in x.saturating_sub(1)..(x + 2).min(nx) {
                    n += u32::from(count[yy * nx + xx]);
                }
            }
            occupied.cells[y * nx + x] = n >= 3;
        }
    }
    let room = occupied.distance_to(true);
    // A cell is support when table was seen in it or next to it (depth has holes).
    let seen = table.distance_to(true);
    let ok = |c: usize| room[c] >= clearance && seen[c] <= 2.0 * CELL;
    let here = occupied.cell(at.xy());
    let on_table = (at.z - view.table_z).abs() <= 0.01;
    if on_table && here.is_some_and(ok) {
        return Ok((
            PlaceSpot {
                px: place_px,
                xy: None,
            },
            None,
        ));
    }
    let best = (0..room.len())
        .filter(|&c| ok(c) && (occupied.center(c) - at.xy()).norm() <= FREE_RADIUS)
        .min_by(|a, b| {
            (occupied.center(*a) - at.xy())
                .norm()
                .total_cmp(&(occupied.center(*b) - at.xy()).norm())
        })
        .ok_or(PerceiveError::NoPlace {
            why: format!(
                "no free table within {:.0} cm of the place point with {:.1} cm of room",
                100.0 * FREE_RADIUS,
                100.0 * clearance
            ),
        })?;
    let xy = occupied.center(best);
    let spot = Point3::new(xy.x, xy.y, view.table_z);
    let px = view.project(&spot).unwrap_or(place_px);
    Ok((
        PlaceSpot { px, xy: Some(xy) },
        Some(Correction {
            what: "place point",
            from_px: place_px,
            to_px: px,
            moved_m: (xy - at.xy()).norm(),
            why: if on_table {
                format!("moved to free table ({:.1} cm of room)", 100.0 * clearance)
            } else {
                "it was on an object, not on the table; moved to free table".to_string()
            },
        }),
    ))
}

/// How many pixels (indices into one frame) two segments share.
pub(super) fn shared_pixels(a: &[usize], b: &[usize]) -> usize {
    let set: std::collections::HashSet<usize> = b.iter().copied().collect();
    a.iter().filter(|i| set.contains(i)).count()
}

/// Whether most of the smaller of two segments lies in the other: the same object.
pub(super) fn shares_most(a: &[usize], b: &[usize]) -> bool {
    2 * shared_pixels(a, b) >= a.len().min(b.len()).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pointact_core::geometry::synthetic::{SceneBox, TabletopScene};

    const FLAT: Table = Table {
        z: 0.0,
        min_object_height: 0.004,
    };

    /// A level table at z = 0 with `boxes`, seen from the front and above like the sim's camera.
    fn frame_of(boxes: Vec<SceneBox>) -> Frame {
        let scene = TabletopScene {
            table_height_m: 0.0,
            boxes,
        };
        crate::executor::perceive::synthetic_frame(
            &scene,
            Point3::new(1.15, 0.0, 0.7),
            Point3::new(0.42, 0.0, 0.0),
        )
    }

    fn px(frame: &Frame, p: Point3<f64>) -> [f64; 2] {
        let c = frame.base_from_camera.inverse() * p;
        frame.intrinsics.project(&c.coords).expect("in view")
    }

    fn cube(x: f64, y: f64, half: f64, height: f64) -> SceneBox {
        SceneBox {
            min: [x - half, y - half, 0.0],
            max: [x + half, y + half, height],
        }
    }

    #[test]
    fn a_grasp_point_beside_its_object_moves_onto_it_and_votes_outweigh_a_stray_point() {
        let frame = frame_of(vec![cube(0.4, 0.0, 0.03, 0.06), cube(0.4, 0.2, 0.03, 0.06)]);
        let view = DepthView::new(&frame, FLAT, &[]);
        // On the object: no correction.
        let on = px(&frame, Point3::new(0.4, 0.0, 0.06));
        let (_, blob, c) = snap_to_object(&view, &[on], "grasp point", None).expect("snap");
        assert!(c.is_none(), "{c:?}");
        assert!((blob.centroid.y - 0.0).abs() < 0.02);
        // 5 cm to its side on the table: moved onto it, by about the gap to its edge.
        let beside = px(&frame, Point3::new(0.4, 0.08, 0.0));
        let (to, blob, c) = snap_to_object(&view, &[beside], "grasp point", None).expect("snap");
        let c = c.expect("a correction");
        assert!((blob.centroid.y - 0.0).abs() < 0.02, "{}", blob.centroid);
        assert!(c.moved_m > 0.03 && c.moved_m < 0.06, "{}", c.moved_m);
        assert_eq!(c.to_px, to);
        // Two points near the first cube and one on the second: the first wins.
        let stray = px(&frame, Point3::new(0.4, 0.2, 0.06));
        let near = px(&frame, Point3::new(0.4, -0.05, 0.0));
        let (_, blob, _) =
            snap_to_object(&view, &[beside, stray, near], "grasp point", None).expect("snap");
        assert!((blob.centroid.y - 0.0).abs() < 0.02, "{}", blob.centroid);
        // A segment too wide for the gripper is passed over while a narrower one is near.
        let wide = frame_of(vec![
            cube(0.4, 0.0, 0.05, 0.06),
            cube(0.4, 0.13, 0.02, 0.06),
        ]);
        let wide_view = DepthView::new(&wide, FLAT, &[]);
        let between = px(&wide, Point3::new(0.4, 0.075, 0.0));
        let (_, blob, _) =
            snap_to_object(&wide_view, &[between], "grasp point", Some(0.05)).expect("small");
        assert!((blob.centroid.y - 0.13).abs() < 0.02, "{}", blob.centroid);
        let (_, blob, _) =
            snap_to_object(&wide_view, &[between], "grasp point", None).expect("nearest");
        assert!(blob.centroid.y.abs() < 0.04, "{}", blob.centroid);
        // Nothing within reach: the typed error.
        let far = px(&frame, Point3::new(0.6, -0.3, 0.0));
        assert!(matches!(
            snap_to_object(&view, &[far], "grasp point", None),
            Err(PerceiveError::NoObject { .. })
        ));
    }

    #[test]
    fn a_place_beside_things_goes_to_free_table_and_a_place_in_a_target_stays_inside_it() {
        let frame = frame_of(vec![cube(0.4, 0.0, 0.03, 0.06), cube(0.4, 0.2, 0.08, 0.02)]);
        let view = DepthView::new(&frame, FLAT, &[]);
        // Free table: kept.
        let free = px(&frame, Point3::new(0.4, -0.15, 0.0));
        let (spot, c) = place_free(&view, free, 0.04, &[]).expect("free");
        assert!(c.is_none() && spot.xy.is_none(), "{c:?}");
        // On the cube: moved off it, to a spot 4 cm clear of every object.
        let on = px(&frame, Point3::new(0.4, 0.0, 0.06));
        let (spot, c) = place_free(&view, on, 0.04, &[]).expect("moved");
        let xy = spot.xy.expect("a new spot");
        assert!(c.is_some());
        let clear_of = |cx: f64, cy: f64, half: f64| {
            let dx = ((xy.x - cx).abs() - half).max(0.0);
            let dy = ((xy.y - cy).abs() - half).max(0.0);
            (dx * dx + dy * dy).sqrt()
        };
        assert!(clear_of(0.4, 0.0, 0.03) >= 0.035, "{xy}");
        assert!(clear_of(0.4, 0.2, 0.08) >= 0.035, "{xy}");
        // The held object's own pixels do not count: the cube itself may be placed where it is.
        let blob = object_blob(&frame, on, 0.0, 0.004, 0.15).expect("cube");
        let next_to = px(&frame, Point3::new(0.4, -0.05, 0.0));
        let (_, c) = place_free(&view, next_to, 0.03, &blob.pixels).expect("own spot");
        assert!(c.is_none(), "{c:?}");
        let (_, c) = place_free(&view, next_to, 0.03, &[]).expect("beside the cube");
        assert!(c.is_some(), "2 cm from the cube is not 3 cm of room");
        // In the flat wide box (a plate): a point on its rim moves inside by the margin.
        let plate = object_blob(
            &frame,
            px(&frame, Point3::new(0.4, 0.2, 0.02)),
            0.0,
            0.004,
            0.15,
        )
        .expect("plate");
        let rim = px(&frame, Point3::new(0.4, 0.275, 0.02));
        let (spot, c) = place_inside(&view, &plate, rim, 0.03, "plate").expect("inside");
        let xy = spot.xy.expect("moved");
        assert!(c.is_some());
        assert!((xy.y - 0.2).abs() <= 0.08 - 0.03 + 0.006, "{xy}");
        assert!((xy.x - 0.4).abs() <= 0.08 - 0.03 + 0.006, "{xy}");
        // Its centre: kept.
        let centre = px(&frame, Point3::new(0.4, 0.2, 0.02));
        let (spot, c) = place_inside(&view, &plate, centre, 0.03, "plate").expect("inside");
        assert!(c.is_none() && spot.xy.is_none());
    }
}
