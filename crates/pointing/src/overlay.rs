//! Drawing an answer on the camera image: what `pointact point` writes next to its JSON, so a
//! user can see at a glance where the model pointed.
//!
//! Points are drawn as ringed dots in the ability's colour; a VTG trace as the ordered polyline
//! through its points, start ringed in green and end in red, so direction is visible. Drawing is
//! plain integer rasterisation on the `RgbImage` — an overlay needs no anti-aliasing, and a
//! drawing dependency would be more code to build than this.

use image::{Rgb, RgbImage};

use super::Ability;

/// Colour per ability (REG blue, RRG magenta, OFG orange, VTG yellow).
pub(crate) fn ability_colour(ability: Ability) -> Rgb<u8> {
    match ability {
        Ability::Reg => Rgb([40, 120, 255]),
        Ability::Rrg => Rgb([230, 40, 230]),
        Ability::Ofg => Rgb([255, 140, 0]),
        Ability::Vtg => Rgb([255, 230, 0]),
    }
}

const START: Rgb<u8> = Rgb([0, 220, 0]);
const END: Rgb<u8> = Rgb([230, 0, 0]);
const OUTLINE: Rgb<u8> = Rgb([0, 0, 0]);

/// Returns a copy of `image` with `points` (pixels of `image`) drawn for `ability`.
pub fn draw_points(image: &RgbImage, ability: Ability, points: &[[f64; 2]]) -> RgbImage {
    let mut out = image.clone();
    let colour = ability_colour(ability);
    // Radii scale with the image so the marks stay visible on large frames.
    let r = ((image.width().max(image.height()) as f64) / 120.0).clamp(3.0, 12.0);
    if ability == Ability::Vtg {
        for w in points.windows(2) {
            line(&mut out, w[0], w[1], 2, colour);
        }
    }
    for (i, &p) in points.iter().enumerate() {
        disc(&mut out, p, r + 1.5, OUTLINE);
        disc(&mut out, p, r, colour);
        if ability == Ability::Vtg && points.len() > 1 {
            let ring = if i == 0 {
                Some(START)
            } else if i + 1 == points.len() {
                Some(END)
            } else {
                None
            };
            if let Some(c) = ring {
                circle(&mut out, p, r + 3.0, 2.0, c);
            }
        }
    }
    out
}

fn put(img: &mut RgbImage, x: i64, y: i64, c: Rgb<u8>) {
    if x >= 0 && y >= 0 && (x as u32) < img.width() && (y as u32) < img.height() {
        img.put_pixel(x as u32, y as u32, c);
    }
}

/// Every pixel whose centre is within `r` of `p`.
fn disc(img: &mut RgbImage, [cx, cy]: [f64; 2], r: f64, c: Rgb<u8>) {
    ring_band(img, [cx, cy], -1.0, r, c);
}

/// Pixels at distance `[r - w/2, r + w/2]` from `p`.
fn circle(img: &mut RgbImage, p: [f64; 2], r: f64, w: f64, c: Rgb<u8>) {
    ring_band(img, p, r - w / 2.0, r + w / 2.0, c);
}

fn ring_band(img: &mut RgbImage, [cx, cy]: [f64; 2], inner: f64, outer: f64, c: Rgb<u8>) {
    let (x0, x1) = ((cx - outer).floor() as i64, (cx + outer).ceil() as i64);
    let (y0, y1) = ((cy - outer).floor() as i64, (cy + outer).ceil() as i64);
    for y in y0..=y1 {
        for x in x0..=x1 {
            // Pixel (x, y) covers [x, x+1) × [y, y+1); its centre is at +0.5.
            let d = ((x as f64 + 0.5 - cx).powi(2) + (y as f64 + 0.5 - cy).powi(2)).sqrt();
            if d > inner && d <= outer {
                put(img, x, y, c);
            }
        }
    }
}

/// A segment `width` pixels thick (stamped squares along a DDA walk).
fn line(img: &mut RgbImage, a: [f64; 2], b: [f64; 2], width: i64, c: Rgb<u8>) {
    let steps = ((b[0] - a[0]).abs().max((b[1] - a[1]).abs()).ceil() as i64).max(1);
    let half = width / 2;
    for i in 0..=steps {
        let t = i as f64 / steps as f64;
        let x = (a[0] + t * (b[0] - a[0])).floor() as i64;
        let y = (a[1] + t * (b[1] - a[1])).floor() as i64;
        for dy in -half..=half {
            for dx in -half..=half {
                put(img, x + dx, y + dy, c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_drawn_where_they_are_and_nowhere_else() {
        let img = RgbImage::from_pixel(100, 80, Rgb([10, 10, 10]));
        let out = draw_points(&img, Ability::Reg, &[[20.0, 30.0]]);
        // The dot's centre pixel has the REG colour; a far corner is untouched.
        assert_eq!(*out.get_pixel(20, 30), ability_colour(Ability::Reg));
        assert_eq!(*out.get_pixel(90, 70), Rgb([10, 10, 10]));
        // Points off the image are clipped, not a panic.
        let out = draw_points(&img, Ability::Rrg, &[[-50.0, 500.0], [99.9, 79.9]]);
        assert_eq!(*out.get_pixel(99, 79), ability_colour(Ability::Rrg));
    }

    #[test]
    fn a_trace_is_an_ordered_polyline_with_start_and_end_rings() {
        let img = RgbImage::from_pixel(200, 100, Rgb([0, 0, 0]));
        let pts = [[20.0, 50.0], [100.0, 50.0], [180.0, 50.0]];
        let out = draw_points(&img, Ability::Vtg, &pts);
        let yellow = ability_colour(Ability::Vtg);
        // On the segment between the dots.
        assert_eq!(*out.get_pixel(60, 50), yellow);
        assert_eq!(*out.get_pixel(140, 50), yellow);
        // The start ring is green, the end ring red (r = 3 + 3 on a 200 px image).
        let count = |c: Rgb<u8>, x0: u32, x1: u32| {
            (x0..x1)
                .flat_map(|x| (40..60).map(move |y| (x, y)))
                .filter(|&(x, y)| *out.get_pixel(x, y) == c)
                .count()
        };
        assert!(count(START, 10, 30) > 10);
        assert_eq!(count(START, 170, 190), 0);
        assert!(count(END, 170, 190) > 10);
        // Nothing drawn far from the trace.
        assert_eq!(*out.get_pixel(100, 5), Rgb([0, 0, 0]));
    }
}
