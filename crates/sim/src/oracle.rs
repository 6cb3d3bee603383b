//! The oracle pointer: answers REG/RRG/OFG/VTG from the simulator's ground truth (segmentation,
//! object parts, the episode's goal) and writes the answer as model text, so the same parser and
//! validation run as for a real model. Options add Gaussian pixel noise and drop points, to measure
//! how the executors degrade with a worse pointer.

use std::sync::Arc;

use k::nalgebra::{Isometry3, Point3};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::devices::{Segmentation, SharedWorld};
use pointact_core::camera::lift::lift;
use pointact_core::camera::Frame;
use pointact_core::geometry::RobustDepthOptions;
use pointact_pointing::{Ability, ImageSize, ModelImageMap, Pointer, PointerError, Pointing};

/// One object as the oracle knows it.
#[derive(Debug, Clone, PartialEq)]
pub struct OracleObject {
    /// Scene name of the object.
    pub name: String,
    /// Phrases that refer to it, lower case ("pepper", "red pepper", "nearest object").
    pub aliases: Vec<String>,
    /// Its instance id in the label images.
    pub instance: u16,
    /// (part name, part id) pairs.
    pub parts: Vec<(String, u8)>,
}

/// What the oracle knows about the episode.
#[derive(Debug, Clone)]
pub struct OracleTruth {
    /// Where each frame's instance and part labels come from (frames themselves carry no ground
    /// truth).
    pub labels: LabelSource,
    /// Every object an instruction may name.
    pub objects: Vec<OracleObject>,
    /// The object the task moves.
    pub manipulated: String,
    /// Base-frame point where the moved object should end up (on the support or container floor).
    pub place_target: Option<Point3<f64>>,
    /// Peak height of the VTG arc above the straight line from start to end (m).
    pub trace_lift: f64,
    /// Rise of a pick-up trace (no place target), m.
    pub pick_up_lift: f64,
}

/// The labels of the frames the oracle is asked about.
#[derive(Debug, Clone)]
pub enum LabelSource {
    /// Our simulated world, whose camera took the frames: the labels of its latest renders.
    World(SharedWorld),
    /// Labels that came with the frame from elsewhere (an external simulator's segmentation,
    /// sent over the bridge): valid for any frame of the same size.
    Given(Arc<Segmentation>),
}

impl LabelSource {
    fn labels_of(&self, frame: &Frame) -> Option<Arc<Segmentation>> {
        match self {
            LabelSource::World(w) => w.labels_of(frame),
            LabelSource::Given(seg) => (seg.width == frame.depth.width
                && seg.height == frame.depth.height)
                .then(|| seg.clone()),
        }
    }
}

/// How much worse than perfect the oracle answers, and how many points it gives.
#[derive(Debug, Clone, PartialEq)]
pub struct OracleOptions {
    /// Gaussian pixel noise, standard deviation per coordinate (px).
    pub noise_px: f64,
    /// Probability of dropping each point from an answer.
    pub drop_prob: f64,
    /// Probability that a whole answer is confused: its points land on another object or on the
    /// table, as a model that misread the scene would answer (a trace keeps its shape and starts
    /// there).
    pub outlier_prob: f64,
    /// Points per REG/OFG/RRG answer.
    pub points: usize,
    /// Seed of the generator behind noise, drops and outliers, so answers repeat run to run.
    pub seed: u64,
}

impl Default for OracleOptions {
    fn default() -> Self {
        OracleOptions {
            noise_px: 0.0,
            drop_prob: 0.0,
            outlier_prob: 0.0,
            points: 3,
            seed: 0,
        }
    }
}

/// A [`Pointer`] that answers from ground truth, degraded as its [`OracleOptions`] say.
pub struct OraclePointer {
    truth: OracleTruth,
    options: OracleOptions,
    rng: ChaCha8Rng,
}

impl OraclePointer {
    /// An oracle for one episode, its random generator seeded from `options.seed`.
    pub fn new(truth: OracleTruth, options: OracleOptions) -> Self {
        let rng = ChaCha8Rng::seed_from_u64(options.seed);
        OraclePointer {
            truth,
            options,
            rng,
        }
    }

    /// The object a phrase refers to: the one with the longest alias contained in the phrase.
    fn resolve(&self, phrase: &str) -> Option<&OracleObject> {
        let p = phrase.to_lowercase();
        self.truth
            .objects
            .iter()
            .filter_map(|o| {
                o.aliases
                    .iter()
                    .filter(|a| contains_words(&p, a))
                    .map(|a| a.len())
                    .max()
                    .map(|l| (l, o))
            })
            .max_by_key(|(l, _)| *l)
            .map(|(_, o)| o)
    }

    fn manipulated(&self) -> Result<&OracleObject, PointerError> {
        self.truth
            .objects
            .iter()
            .find(|o| o.name == self.truth.manipulated)
            .ok_or_else(|| {
                PointerError::Backend(format!("oracle: no object `{}`", self.truth.manipulated))
            })
    }

    fn answer(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<(String, Vec<[f64; 2]>), PointerError> {
        let seg = self.truth.labels.labels_of(frame).ok_or_else(|| {
            PointerError::Backend(
                "oracle pointer: no ground-truth labels for this frame (not rendered by the episode's camera, or labels of another size)"
                    .into(),
            )
        })?;
        let seg = seg.as_ref();
        // Ground truth projects with the camera's true pose (the frame's may carry a simulated
        // calibration error, which the oracle, like a model looking at the image, does not see).
        let true_pose = seg.true_base_from_camera.unwrap_or(frame.base_from_camera);
        let project = |p: &Point3<f64>| project(frame, &true_pose, p);
        let (w, h) = (frame.depth.width, frame.depth.height);
        let no_object = || PointerError::NoSuchObject {
            phrase: instruction.to_string(),
        };
        match ability {
            Ability::Reg | Ability::Ofg => {
                let obj = self.resolve(instruction).ok_or_else(no_object)?;
                let part = (ability == Ability::Ofg)
                    .then(|| named_part(obj, instruction))
                    .flatten();
                let mask = object_mask(seg, obj, part);
                let pts = interior_points(&mask, w, h, self.options.points);
                if pts.is_empty() {
                    return Err(no_object());
                }
                let what = match part {
                    Some(_) => format!("the part of the {} to hold", obj.name),
                    None => format!("the {}", obj.name),
                };
                Ok((format!("I look for {what} in the image."), pts))
            }
            Ability::Rrg => {
                let target = self.truth.place_target.ok_or_else(no_object)?;
                let c = project(&target)?;
                let mut pts = vec![c];
                let offsets = [[4.0, 0.0], [-4.0, 0.0], [0.0, 4.0], [0.0, -4.0]];
                for o in offsets.iter().take(self.options.points.saturating_sub(1)) {
                    pts.push([c[0] + o[0], c[1] + o[1]]);
                }
                Ok(("The free space where the object should go.".into(), pts))
            }
            Ability::Vtg => {
                let obj = self.manipulated()?.clone();
                // Object-centric, starting on the part the instruction names ("by its handle").
                let mask = object_mask(seg, &obj, named_part(&obj, instruction));
                let start_px = *interior_points(&mask, w, h, 1)
                    .first()
                    .ok_or_else(no_object)?;
                let start = lift(frame, start_px, &RobustDepthOptions::surface())
                    .map_err(|e| PointerError::Backend(format!("oracle: {e}")))?;
                let start = true_pose * (frame.base_from_camera.inverse() * start);
                // To the place point on an arc; with no place (pick up), straight up.
                let (end, lift) = match self.truth.place_target {
                    Some(t) => (t, self.truth.trace_lift),
                    None => (
                        start + k::nalgebra::Vector3::new(0.0, 0.0, self.truth.pick_up_lift),
                        0.0,
                    ),
                };
                let mut pts = Vec::with_capacity(8);
                for i in 0..8 {
                    let s = i as f64 / 7.0;
                    let mut p = start + (end - start) * s;
                    p.z += 4.0 * lift * s * (1.0 - s);
                    pts.push(project(&p)?);
                }
                Ok((
                    format!("Move the {} along an arc to its goal.", obj.name),
                    pts,
                ))
            }
        }
    }
}

impl OraclePointer {
    /// Moves an answer onto something it does not mean: another object (its body, as a model
    /// points) or a random spot of the table. A trace is shifted whole so it starts there.
    fn confuse(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
        pts: &mut [[f64; 2]],
    ) {
        let Some(seg) = self.truth.labels.labels_of(frame) else {
            return;
        };
        let Some(&first) = pts.first() else {
            return;
        };
        let (w, h) = (seg.width, seg.height);
        let meant = match ability {
            Ability::Reg | Ability::Ofg => self.resolve(instruction).map(|o| o.instance),
            Ability::Vtg => self.manipulated().ok().map(|o| o.instance),
            // The place: whatever lies under the true answer (a container, a support).
            Ability::Rrg => {
                let (u, v) = (first[0].round() as usize, first[1].round() as usize);
                (u < w && v < h).then(|| seg.instance[v * w + u])
            }
        };
        let manipulated = self.manipulated().ok().map(|o| o.instance);
        let mut choices: Vec<Option<u16>> = self
            .truth
            .objects
            .iter()
            .map(|o| o.instance)
            .filter(|i| Some(*i) != meant && !(ability == Ability::Rrg && Some(*i) == manipulated))
            .filter(|i| seg.instance.contains(i))
            .map(Some)
            .collect();
        choices.push(None); // the table
        let pick = choices[self.rng.gen_range(0..choices.len())];
        let spot = match pick {
            Some(instance) => {
                let mask: Vec<bool> = seg.instance.iter().map(|i| *i == instance).collect();
                interior_points(&mask, w, h, 1).first().copied()
            }
            None => {
                let table: Vec<usize> = (0..seg.instance.len())
                    .filter(|&i| seg.instance[i] == crate::TABLE_INSTANCE)
                    .collect();
                (!table.is_empty()).then(|| {
                    let i = table[self.rng.gen_range(0..table.len())];
                    [(i % w) as f64, (i / w) as f64]
                })
            }
        };
        if let Some(spot) = spot {
            let (du, dv) = (spot[0] - first[0], spot[1] - first[1]);
            for p in pts.iter_mut() {
                p[0] += du;
                p[1] += dv;
            }
        }
    }
}

impl Pointer for OraclePointer {
    fn name(&self) -> &str {
        "oracle"
    }

    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        instruction: &str,
    ) -> Result<Pointing, PointerError> {
        let (reasoning, mut pts) = self.answer(frame, ability, instruction)?;
        let (w, h) = (frame.depth.width as f64, frame.depth.height as f64);
        if self.options.outlier_prob > 0.0
            && self.rng.gen_bool(self.options.outlier_prob.clamp(0.0, 1.0))
        {
            self.confuse(frame, ability, instruction, &mut pts);
        }
        if self.options.noise_px > 0.0 {
            for p in pts.iter_mut() {
                p[0] += self.options.noise_px * gaussian(&mut self.rng);
                p[1] += self.options.noise_px * gaussian(&mut self.rng);
            }
        }
        if self.options.drop_prob > 0.0 {
            let keep = 1.0 - self.options.drop_prob.clamp(0.0, 1.0);
            pts.retain(|_| self.rng.gen_bool(keep));
        }
        // Models answer in integer pixels inside the image.
        let list: Vec<String> = pts
            .iter()
            .map(|p| {
                format!(
                    "[{}, {}]",
                    p[0].round().clamp(0.0, w - 1.0),
                    p[1].round().clamp(0.0, h - 1.0)
                )
            })
            .collect();
        let raw = format!(
            "<think>{reasoning}</think><answer><point>[{}]</point></answer>",
            list.join(", ")
        );
        let size = ImageSize::new(frame.depth.width as u32, frame.depth.height as u32);
        let map =
            ModelImageMap::new(size, size).map_err(|e| PointerError::Backend(e.to_string()))?;
        Pointing::parse(&raw, ability, map)
    }
}

/// The id of the object's part that `instruction` names, if any ("by its handle").
fn named_part(obj: &OracleObject, instruction: &str) -> Option<u8> {
    let lower = instruction.to_lowercase();
    obj.parts
        .iter()
        .find(|(n, _)| contains_words(&lower, n))
        .map(|(_, id)| *id)
}

/// Pixels of the object's instance, restricted to one part when given.
fn object_mask(seg: &Segmentation, obj: &OracleObject, part: Option<u8>) -> Vec<bool> {
    seg.instance
        .iter()
        .zip(&seg.part)
        .map(|(i, p)| *i == obj.instance && part.is_none_or(|want| *p == want))
        .collect()
}

fn contains_words(haystack: &str, needle: &str) -> bool {
    let hay: Vec<&str> = haystack
        .split(|c: char| !c.is_alphanumeric())
        .filter(|s| !s.is_empty())
        .collect();
    let nee: Vec<&str> = needle.split_whitespace().collect();
    !nee.is_empty() && hay.windows(nee.len()).any(|w| w == nee.as_slice())
}

fn project(
    frame: &Frame,
    base_from_camera: &Isometry3<f64>,
    p: &Point3<f64>,
) -> Result<[f64; 2], PointerError> {
    let pc = base_from_camera.inverse() * p;
    frame
        .intrinsics
        .project(&pc.coords)
        .map_err(|e| PointerError::Backend(format!("oracle: target not in view: {e}")))
}

/// Up to `n` pixels deep inside the mask: the deepest by chamfer distance, then others at least
/// half as deep, spread apart. A model points at an object's body, not at its outline.
fn interior_points(mask: &[bool], w: usize, h: usize, n: usize) -> Vec<[f64; 2]> {
    let big = u32::MAX / 4;
    let mut d: Vec<u32> = mask.iter().map(|m| if *m { big } else { 0 }).collect();
    for v in 0..h {
        for u in 0..w {
            let i = v * w + u;
            if d[i] == 0 {
                continue;
            }
            let up = if v > 0 { d[i - w] } else { 0 };
            let left = if u > 0 { d[i - 1] } else { 0 };
            d[i] = d[i].min(up + 1).min(left + 1);
        }
    }
    for v in (0..h).rev() {
        for u in (0..w).rev() {
            let i = v * w + u;
            if d[i] == 0 {
                continue;
            }
            let down = if v + 1 < h { d[i + w] } else { 0 };
            let right = if u + 1 < w { d[i + 1] } else { 0 };
            d[i] = d[i].min(down + 1).min(right + 1);
        }
    }
    let Some((best, &dmax)) = d
        .iter()
        .enumerate()
        .max_by_key(|(i, v)| (**v, usize::MAX - i))
    else {
        return Vec::new();
    };
    if dmax == 0 {
        return Vec::new();
    }
    let mut out = vec![best];
    let min_sep = (dmax as f64).max(3.0);
    let candidates: Vec<usize> = (0..d.len()).filter(|i| d[*i] * 2 >= dmax).collect();
    while out.len() < n {
        // Farthest candidate from the chosen ones, if far enough.
        let far = candidates
            .iter()
            .map(|&c| {
                let dist = out
                    .iter()
                    .map(|&o| {
                        let (du, dv) = (
                            (c % w) as f64 - (o % w) as f64,
                            (c / w) as f64 - (o / w) as f64,
                        );
                        (du * du + dv * dv).sqrt()
                    })
                    .fold(f64::INFINITY, f64::min);
                (c, dist)
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        match far {
            Some((c, dist)) if dist >= min_sep => out.push(c),
            _ => break,
        }
        // Keep the extra points near the centre: at most 1.5 depths from the deepest pixel.
        if let Some(&last) = out.last() {
            let (du, dv) = (
                (last % w) as f64 - (best % w) as f64,
                (last / w) as f64 - (best / w) as f64,
            );
            if (du * du + dv * dv).sqrt() > 1.5 * dmax as f64 {
                out.pop();
                break;
            }
        }
    }
    out.into_iter()
        .map(|i| [(i % w) as f64, (i / w) as f64])
        .collect()
}

/// Standard normal sample (Box–Muller), from the oracle's own seeded generator.
fn gaussian(rng: &mut ChaCha8Rng) -> f64 {
    let u1: f64 = rng.gen_range(f64::EPSILON..1.0);
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interior_point_of_a_rectangle_is_its_centre() {
        let (w, h) = (40, 30);
        let mask: Vec<bool> = (0..w * h)
            .map(|i| {
                let (u, v) = (i % w, i / w);
                (10..=20).contains(&u) && (5..=15).contains(&v)
            })
            .collect();
        let p = interior_points(&mask, w, h, 3);
        assert_eq!(p[0], [15.0, 10.0]);
        assert!(p.iter().all(|q| mask[q[1] as usize * w + q[0] as usize]));
        assert!(interior_points(&vec![false; w * h], w, h, 3).is_empty());
    }

    #[test]
    fn phrases_match_whole_words() {
        assert!(contains_words(
            "put the red block on the blue block",
            "red block"
        ));
        assert!(!contains_words("put the redblock down", "red block"));
        assert!(!contains_words("the cup", "cupboard"));
    }
}
