//! The pointer of a simulated episode, chosen by [`PointerKind`]: the oracle needs the episode's
//! ground truth, which exists only once the episode's world is built, so the choice is made first
//! (a model is loaded once, before any world) and the pointer is finished per episode.

use std::sync::Arc;

use k::nalgebra::Point3;

use crate::bridge::remote::{Labels, ObjectRole, Observation};
use crate::bridge::session::SessionPointers;
use crate::camera::Frame;
use crate::executor::GraspParams;
use crate::pointing::{
    open, ModelOptions, ModelPointer, Pointer, PointerError, PointerKind, PointerQueue,
    QueuedPointer, TextStream,
};
use crate::sim::devices::Segmentation;
use crate::sim::oracle::{LabelSource, OracleObject, OracleOptions, OraclePointer, OracleTruth};

/// A chosen pointer, waiting for the episode's ground truth.
pub enum EpisodePointer {
    /// The oracle, built per episode from its ground truth with these settings.
    Oracle(OracleOptions),
    /// A model backend, used as is for every episode.
    Model(ModelPointer),
}

impl EpisodePointer {
    /// Chooses the backend: the oracle with `oracle` settings, or a model opened by
    /// [`crate::pointing::open`] (`on_text` receives a local model's reply as it is generated).
    pub fn open(
        kind: PointerKind,
        model: &ModelOptions,
        oracle: OracleOptions,
        on_text: Option<TextStream>,
    ) -> Result<Self, PointerError> {
        Ok(match kind {
            PointerKind::Oracle => EpisodePointer::Oracle(oracle),
            _ => EpisodePointer::Model(open(kind, model, on_text)?),
        })
    }

    /// The pointer of the episode whose ground truth is `truth` (unused by model backends).
    pub fn for_episode(self, truth: OracleTruth) -> Box<dyn Pointer + Send> {
        match self {
            EpisodePointer::Oracle(o) => Box::new(OraclePointer::new(truth, o)),
            EpisodePointer::Model(m) => Box::new(m),
        }
    }
}

/// The pointer of bridge sessions, chosen once when the server starts: the oracle, finished per
/// session from the labels the evaluator sends, or one model shared by every session through a
/// FIFO queue (its worker thread lives as long as any clone of this value).
#[derive(Clone)]
pub enum SessionPointer {
    /// The oracle, built per session from the labels the evaluator sends, with these settings.
    Oracle(OracleOptions),
    /// One model shared by all sessions through a FIFO queue.
    Shared(QueuedPointer),
}

impl SessionPointer {
    /// Chooses the backend like [`EpisodePointer::open`]; a model goes onto its own thread.
    pub fn open(
        kind: PointerKind,
        model: &ModelOptions,
        oracle: OracleOptions,
    ) -> Result<Self, PointerError> {
        Ok(match kind {
            PointerKind::Oracle => SessionPointer::Oracle(oracle),
            _ => SessionPointer::Shared(
                PointerQueue::spawn(Box::new(open(kind, model, None)?))?.handle(),
            ),
        })
    }
}

impl SessionPointers for SessionPointer {
    fn name(&self) -> &str {
        match self {
            SessionPointer::Oracle(_) => "oracle",
            SessionPointer::Shared(p) => p.name(),
        }
    }

    /// The pointer for a session whose first observation is `first`: a model's place in the queue,
    /// or the oracle over the evaluator's segmentation (refused when it sent none, or named no
    /// object the task moves). The oracle's noise is seeded per episode (`task`, `episode_id`), so
    /// that its pixel errors differ between episodes instead of repeating the same draws in each.
    fn for_session(
        &self,
        first: &Observation,
        task: &str,
        episode_id: u64,
    ) -> Result<Box<dyn Pointer + Send>, PointerError> {
        match self {
            SessionPointer::Shared(p) => Ok(Box::new(p.clone())),
            SessionPointer::Oracle(options) => {
                let labels = first.labels.as_ref().ok_or_else(|| {
                    PointerError::Backend(
                        "the oracle pointer needs the evaluator's ground truth: send \"segmentation\" \
                         and \"objects\" with the observation, or serve with a model pointer"
                            .into(),
                    )
                })?;
                let options = OracleOptions {
                    seed: episode_seed(options.seed, task, episode_id),
                    ..options.clone()
                };
                Ok(Box::new(OraclePointer::new(
                    truth_from_labels(labels, &first.frame)?,
                    options,
                )))
            }
        }
    }
}

/// A seed per (server seed, task, episode): FNV-1a over the three, stable across builds and
/// platforms, so a run is repeatable from its `--seed`.
fn episode_seed(seed: u64, task: &str, episode_id: u64) -> u64 {
    let mut bytes = seed.to_le_bytes().to_vec();
    bytes.extend_from_slice(task.as_bytes());
    bytes.extend_from_slice(&episode_id.to_le_bytes());
    fnv1a(&bytes)
}

/// 64-bit FNV-1a (Fowler, Noll and Vo; the offset basis and prime of the IETF draft
/// draft-eastlake-fnv, section 2).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// What the oracle may know from an evaluator's labels: the objects by their phrases, the moved
/// one, and the place point, from the target's segment in the depth image (its centre, at the
/// height of its surface there: a plate's top, a basket's floor).
fn truth_from_labels(labels: &Labels, frame: &Frame) -> Result<OracleTruth, PointerError> {
    let bad = |m: String| PointerError::Backend(format!("oracle labels: {m}"));
    if (labels.width, labels.height) != (frame.depth.width, frame.depth.height)
        || labels.ids.len() != labels.width * labels.height
    {
        return Err(bad(format!(
            "segmentation is {}x{} ({} ids) but the frame is {}x{}",
            labels.width,
            labels.height,
            labels.ids.len(),
            frame.depth.width,
            frame.depth.height
        )));
    }
    if labels.objects.len() >= u16::MAX as usize {
        return Err(bad(format!("{} objects is too many", labels.objects.len())));
    }
    // Compact instance numbers (1, 2, …) for the objects named; other ids are background.
    let instance_of = |id: u32| {
        labels
            .objects
            .iter()
            .position(|o| o.id == id)
            .map_or(0, |i| i as u16 + 1)
    };
    let seg = Segmentation {
        instance: labels.ids.iter().map(|&id| instance_of(id)).collect(),
        part: vec![0; labels.ids.len()],
        width: labels.width,
        height: labels.height,
        true_base_from_camera: None,
    };
    let objects = labels
        .objects
        .iter()
        .enumerate()
        .map(|(i, o)| OracleObject {
            name: o.name.clone(),
            aliases: vec![o.name.to_lowercase()],
            instance: i as u16 + 1,
            parts: Vec::new(),
        })
        .collect();
    let with_role = |role| labels.objects.iter().find(|o| o.role == role);
    let source = with_role(ObjectRole::Source).ok_or_else(|| {
        bad("no object has the role \"source\" (the object the task moves)".into())
    })?;
    let place_target = match with_role(ObjectRole::Target) {
        None => None,
        Some(t) => Some(
            surface_centre(&seg, instance_of(t.id), frame).ok_or_else(|| {
                bad(format!(
                    "the target `{}` has no pixel with valid depth in view",
                    t.name
                ))
            })?,
        ),
    };
    let grasp = GraspParams::default();
    Ok(OracleTruth {
        labels: LabelSource::Given(Arc::new(seg)),
        objects,
        manipulated: source.name.clone(),
        place_target,
        trace_lift: grasp.trace_lift,
        pick_up_lift: grasp.pick_up_lift,
    })
}

/// The base-frame centre of an instance's visible surface: the middle of its points' extent in x
/// and y, at the median height of its points within 2 cm of that centre (a block's top, a
/// container's floor rather than its rim).
fn surface_centre(seg: &Segmentation, instance: u16, frame: &Frame) -> Option<Point3<f64>> {
    let w = seg.width;
    let points: Vec<Point3<f64>> = seg
        .instance
        .iter()
        .enumerate()
        .filter(|(_, i)| **i == instance && instance != 0)
        .filter_map(|(p, _)| {
            let d = frame.depth.data[p] as f64;
            let c = frame
                .intrinsics
                .deproject([(p % w) as f64, (p / w) as f64], d)
                .ok()
                .filter(|_| d > 0.0)?;
            Some(frame.base_from_camera * Point3::from(c))
        })
        .collect();
    if points.is_empty() {
        return None;
    }
    // The middle of the points' extent (2nd to 98th percentile, against stray edge pixels): the
    // camera sees a block's near sides and a basket's far wall more than their other halves, so a
    // centroid is pulled toward what is visible (a stacked cube then lands half off); the extent
    // of a convex object's visible points spans its whole footprint.
    let mid = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        (at(0.02) + at(0.98)) / 2.0
    };
    let cx = mid(points.iter().map(|p| p.x).collect());
    let cy = mid(points.iter().map(|p| p.y).collect());
    let mut near: Vec<f64> = points
        .iter()
        .filter(|p| (p.x - cx).hypot(p.y - cy) <= 0.02)
        .map(|p| p.z)
        .collect();
    if near.is_empty() {
        near = points.iter().map(|p| p.z).collect();
    }
    near.sort_by(f64::total_cmp);
    Some(Point3::new(cx, cy, near[near.len() / 2]))
}

#[cfg(test)]
mod tests {
    use super::{episode_seed, fnv1a};

    #[test]
    fn each_episode_draws_its_own_noise_and_a_run_repeats() {
        // FNV-1a 64's published test vectors (draft-eastlake-fnv, appendix C).
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        let a = episode_seed(7, "widowx_carrot_on_plate", 3);
        assert_eq!(a, episode_seed(7, "widowx_carrot_on_plate", 3));
        let others = [
            episode_seed(7, "widowx_carrot_on_plate", 4),
            episode_seed(7, "widowx_spoon_on_towel", 3),
            episode_seed(8, "widowx_carrot_on_plate", 3),
        ];
        for o in others {
            assert_ne!(a, o);
        }
    }
}
