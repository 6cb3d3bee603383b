//! The oracle describer: what a perfect vision-language model would say about one frame, from the
//! frame's ground truth and the frame before it.
//!
//! Embodied-R (Zhao et al. 2025, arXiv 2504.12680, its method) has a large VLM describe each key frame
//! and a small LM reason over the descriptions; in tests and in training data this stands in for
//! the VLM. Its text carries what the questions need and nothing it could not see: each object in
//! view (left to right), where it is in the picture (left / centre / right third, and the bearing
//! from the image centre), how far it is from the camera (to the centimetre, from the centre of
//! its bounds) and its longest dimension; then what changed since the previous frame: objects
//! that came into or went out of view, objects that moved (a centre shift over
//! `MOVED_MIN_M`, said in the current view), and the camera's own turn and step. Distances between
//! objects are not said: they follow from two distances and the bearings between them, which is
//! the reasoning the questions ask for. Deterministic: the same truth gives the same words.

use super::questions::level;
use super::truth::{dist, FrameTruth, SequenceTruth, VisibleObject};

/// An object whose centre shifted more than this between two frames is said to have moved, m.
pub(crate) const MOVED_MIN_M: f64 = 0.03;
/// A camera turn under this is not mentioned, degrees.
const TURN_MIN_DEG: f64 = 1.0;

fn where_in_picture(f: &FrameTruth, v: &VisibleObject) -> (&'static str, f64) {
    let u = f64::from(v.bbox[0] + v.bbox[2]) / 2.0;
    let i = &f.intrinsics;
    let third = i.width as f64 / 3.0;
    let place = if u < third {
        "on the left"
    } else if u < 2.0 * third {
        "in the centre"
    } else {
        "on the right"
    };
    (place, ((u - i.cx) / i.fx).atan().to_degrees())
}

fn side(deg: f64) -> String {
    let d = deg.round();
    if d == 0.0 {
        "straight ahead".to_string()
    } else if d > 0.0 {
        format!("{d:.0}° right of centre")
    } else {
        format!("{:.0}° left of centre", -d)
    }
}

/// Signed turn from levelled direction `a` to `b`, degrees, positive to the left (z up).
fn turn_deg(a: [f64; 2], b: [f64; 2]) -> f64 {
    (a[0] * b[1] - a[1] * b[0])
        .atan2(a[0] * b[0] + a[1] * b[1])
        .to_degrees()
}

fn join(items: &[String]) -> String {
    match items.len() {
        0 => String::new(),
        1 => items[0].clone(),
        n => format!("{} and {}", items[..n - 1].join(", "), items[n - 1]),
    }
}

/// A shift `d` (world) in words along the levelled axes of frame `f`.
fn shift_words(f: &FrameTruth, d: [f64; 3]) -> String {
    let (Some(r), Some(fw)) = (level(f.axis(0)), level(f.axis(2))) else {
        return format!("{:.2} m", (d[0] * d[0] + d[1] * d[1]).sqrt());
    };
    let a = d[0] * r[0] + d[1] * r[1];
    let b = d[0] * fw[0] + d[1] * fw[1];
    let mut parts = Vec::new();
    if a.abs() >= 0.005 {
        parts.push(format!(
            "{:.2} m to the {}",
            a.abs(),
            if a > 0.0 { "right" } else { "left" }
        ));
    }
    if b.abs() >= 0.005 {
        parts.push(format!(
            "{:.2} m {}",
            b.abs(),
            if b > 0.0 { "forward" } else { "back" }
        ));
    }
    if parts.is_empty() {
        "less than a centimetre".to_string()
    } else {
        parts.join(" and ")
    }
}

/// The description of frame `index` of `seq` (see the module docs).
pub(crate) fn describe(seq: &SequenceTruth, index: usize) -> String {
    let Some(f) = seq.frames.get(index) else {
        return String::new();
    };
    let prev = index.checked_sub(1).and_then(|i| seq.frames.get(i));
    let eye = f.eye();
    let mut out = if f.visible.is_empty() {
        "I see no objects on the table.".to_string()
    } else {
        let seen: Vec<String> = f
            .visible
            .iter()
            .map(|v| {
                let (place, deg) = where_in_picture(f, v);
                let size = seq
                    .object(&v.name)
                    .map(|o| o.size_m.iter().copied().fold(0.0, f64::max) * 100.0)
                    .unwrap_or(0.0);
                format!(
                    "the {} {place} ({}), about {:.2} m away and {size:.0} cm at its longest",
                    v.phrase,
                    side(deg),
                    dist(eye, v.centre)
                )
            })
            .collect();
        format!("I see {}.", join(&seen))
    };
    let Some(p) = prev else {
        return out;
    };
    let came: Vec<String> = f
        .visible
        .iter()
        .filter(|v| !p.sees(&v.name))
        .map(|v| format!("the {}", v.phrase))
        .collect();
    if !came.is_empty() {
        out.push_str(&format!(" New in view: {}.", join(&came)));
    }
    let gone: Vec<String> = p
        .visible
        .iter()
        .filter(|v| !f.sees(&v.name))
        .map(|v| format!("the {}", v.phrase))
        .collect();
    if !gone.is_empty() {
        out.push_str(&format!(" Out of view now: {}.", join(&gone)));
    }
    for v in &f.visible {
        if let Some(before) = p.visible.iter().find(|w| w.name == v.name) {
            let d = [0, 1, 2].map(|k| v.centre[k] - before.centre[k]);
            if dist(v.centre, before.centre) > MOVED_MIN_M {
                out.push_str(&format!(
                    " The {} has moved {}.",
                    v.phrase,
                    shift_words(f, d)
                ));
            }
        }
    }
    if let (Some(a), Some(b)) = (level(p.axis(2)), level(f.axis(2))) {
        let turn = turn_deg(a, b);
        let step = [0, 1, 2].map(|k| eye[k] - p.eye()[k]);
        let mut cam = Vec::new();
        if turn.abs() >= TURN_MIN_DEG {
            cam.push(format!(
                "turned {} by {:.0}°",
                if turn > 0.0 { "left" } else { "right" },
                turn.abs()
            ));
        }
        if (step[0] * step[0] + step[1] * step[1]).sqrt() >= 0.005 {
            cam.push(format!("stepped {}", shift_words(p, step)));
        }
        if !cam.is_empty() {
            out.push_str(&format!(" The camera {}.", join(&cam)));
        }
    }
    out
}
