//! The camera check after a task (`executor::verify`): the runner looks again when the
//! plan has run, and says "verified by camera" only when the depth and fresh answers agree with
//! the plan's goal. The judge (ground truth) is the reference: placements it accepts are verified,
//! and failures it sees are not: a wrong object moved, an object put into the wrong container.

use pointact::camera::Frame;
use pointact::executor::{Branch, Event, Verdict};
use pointact::pointing::{Ability, Pointer, PointerError, Pointing};
use pointact::sim::devices::SimCamera;
use pointact::sim::judge;
use pointact::sim::oracle::{OracleOptions, OraclePointer};

/// The oracle, except that the `nth` question (0-based) asked with `query` is answered as if it
/// had been `instead`: a model that misread one phrase once.
struct Misread {
    inner: OraclePointer,
    nth: usize,
    query: &'static str,
    instead: &'static str,
    asked: usize,
}

impl Pointer for Misread {
    fn name(&self) -> &str {
        "misread oracle"
    }

    fn point(
        &mut self,
        frame: &Frame,
        ability: Ability,
        query: &str,
    ) -> Result<Pointing, PointerError> {
        let n = self.asked;
        self.asked += 1;
        if n == self.nth && query == self.query {
            self.inner.point(frame, ability, self.instead)
        } else {
            self.inner.point(frame, ability, query)
        }
    }
}

/// Runs `task` at `seed` with `branch` and `pointer` (made from the oracle's truth); the camera's
/// verdict, the judge's, and the questions asked after the plan ran.
fn run(
    task: &str,
    seed: u64,
    branch: Branch,
    pointer: impl FnOnce(OraclePointer) -> Box<dyn Pointer>,
) -> (Verdict, pointact::sim::Judgement, Vec<String>) {
    let mut t = super::common::sim_task(task, seed);
    let mut camera = SimCamera::new(t.world.clone(), Default::default());
    let mut pointer = pointer(OraclePointer::new(
        t.truth.clone(),
        OracleOptions::default(),
    ));
    let mut after_plan = false;
    let mut asked_after = Vec::new();
    let mut verdicts = 0;
    let outcome = t
        .run(&mut camera, pointer.as_mut(), branch, &mut |e| match e {
            Event::Step { label, .. } if label == "return home" || label == "lift" => {
                after_plan = true
            }
            Event::Asked { query, .. } if after_plan => asked_after.push(query.to_string()),
            Event::Verified(_) => verdicts += 1,
            _ => {}
        })
        .unwrap_or_else(|e| panic!("{task} seed {seed}: {e}"));
    assert_eq!(verdicts, 1, "one verdict event");
    let verdict = outcome.verdict.expect("the plan ran, so the camera looked");
    let judgement = judge(&mut t.world.lock(), &t.episode);
    (verdict, judgement, asked_after)
}

#[test]
fn placements_the_judge_accepts_are_verified_by_camera() {
    // One of each goal: in, on (stacked), beside, held; both branches.
    for (task, branch) in [
        ("tabletop/fruit_in_bowl", Branch::Affordance),
        ("tabletop/stack_blocks", Branch::Affordance),
        ("tabletop/carrot_left_of_plate", Branch::Affordance),
        ("tabletop/knife_by_handle", Branch::Affordance),
        ("tabletop/can_in_basket", Branch::Trace),
        ("bridge/stack_cube", Branch::Trace),
    ] {
        let (verdict, judged, asked) = run(task, 1, branch, |o| Box::new(o));
        assert!(judged.success, "{task}: the judge: {}", judged.detail);
        assert!(
            verdict.verified,
            "{task} ({branch:?}): {} (judge: {})",
            verdict.line(),
            judged.detail
        );
        assert!(
            !asked.is_empty(),
            "{task}: the check asked the pointer again"
        );
    }
}

#[test]
fn a_wrong_object_moved_is_not_verified() {
    // "put the can in the basket": the first answer for the can lands on the blue block, which
    // is then put into the basket. The judge fails it (the can is where it was).
    let (verdict, judged, _) = run("tabletop/can_in_basket", 0, Branch::Affordance, |o| {
        Box::new(Misread {
            inner: o,
            nth: 0,
            query: "the can",
            instead: "the blue block",
            asked: 0,
        })
    });
    assert!(!judged.success, "the judge: {}", judged.detail);
    assert!(!verdict.verified, "{}", verdict.line());
    assert!(verdict.detail.contains("grasped"), "{}", verdict.detail);
}

#[test]
fn an_object_put_into_the_wrong_target_is_not_verified() {
    // "put the fruit in the bowl": the planning answer for the bowl (the third question, after
    // REG for the fruit and RRG) lands on the can; the fruit is put on the can, not in the bowl.
    let (verdict, judged, _) = run("tabletop/fruit_in_bowl", 0, Branch::Affordance, |o| {
        Box::new(Misread {
            inner: o,
            nth: 2,
            query: "the bowl",
            instead: "the can",
            asked: 0,
        })
    });
    assert!(!judged.success, "the judge: {}", judged.detail);
    assert!(!verdict.verified, "{}", verdict.line());
    // Caught by asking for the bowl again on the planning frame: the answer finds the bowl, not
    // the can the fruit was put on.
    assert!(
        verdict
            .detail
            .contains("elsewhere than where the object was put"),
        "{}",
        verdict.detail
    );
}

#[test]
fn a_target_answer_on_the_object_itself_is_refused_before_any_motion() {
    // "put the can in the basket": the answer for the basket lands on the can. There is no place
    // to put the can on itself; the plan is refused and the arm stays where it was.
    let mut t = super::common::sim_task("tabletop/can_in_basket", 0);
    let mut camera = SimCamera::new(t.world.clone(), Default::default());
    let mut pointer = Misread {
        inner: OraclePointer::new(t.truth.clone(), OracleOptions::default()),
        nth: 2,
        query: "the basket",
        instead: "the can",
        asked: 0,
    };
    let mut steps = 0;
    let result = t.run(&mut camera, &mut pointer, Branch::Affordance, &mut |e| {
        if let Event::Step { .. } = e {
            steps += 1
        }
    });
    let err = result.err().expect("the plan is refused");
    assert!(
        err.to_string()
            .contains("the answer for the basket points at the object to be moved itself"),
        "{err}"
    );
    assert_eq!(steps, 0, "nothing moved");
}

/// The simulated camera, except that right after its `nth` capture (0-based) it moves `object`
/// by `shift` (m, in the world): an object still rolling between two looks.
struct Nudging {
    inner: SimCamera,
    world: pointact::sim::devices::SharedWorld,
    nth: usize,
    object: String,
    shift: [f64; 3],
    captured: usize,
}

impl pointact::camera::Camera for Nudging {
    fn capture(&mut self) -> Result<Frame, pointact::camera::CameraError> {
        let frame = self.inner.capture()?;
        if self.captured == self.nth {
            let mut w = self.world.lock();
            let mut pose = w.object_pose(&self.object).expect("the object");
            pose.translation.vector += k::nalgebra::Vector3::from(self.shift);
            w.set_object_pose(&self.object, &pose).expect("moved");
        }
        self.captured += 1;
        Ok(frame)
    }
}

#[test]
fn an_object_that_moves_between_the_two_looks_is_not_verified() {
    // "stack the blocks" (verified when left alone: the first test). Between the two looks after
    // the plan (captures 1 and 2; 0 planned) the stacked block shifts by 2 cm.
    let mut t = super::common::sim_task("tabletop/stack_blocks", 1);
    let mut camera = Nudging {
        inner: SimCamera::new(t.world.clone(), Default::default()),
        world: t.world.clone(),
        nth: 1,
        object: t.episode.object.clone(),
        shift: [0.02, 0.0, 0.0],
        captured: 0,
    };
    let mut pointer = OraclePointer::new(t.truth.clone(), OracleOptions::default());
    let outcome = t
        .run(&mut camera, &mut pointer, Branch::Affordance, &mut |_| {})
        .expect("the plan ran");
    let verdict = outcome.verdict.expect("the camera looked");
    assert_eq!(camera.captured, 3, "one planning frame and two looks");
    assert!(!verdict.verified, "{}", verdict.line());
    assert!(verdict.detail.contains("still moves"), "{}", verdict.detail);
}
