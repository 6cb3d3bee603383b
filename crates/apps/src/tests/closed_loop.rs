//! The runner's closed loop: a grasp that closes on nothing is noticed (finger width), the arm
//! opens, rises and goes home, the camera looks again, the pointer is asked again, and the task
//! succeeds on the second attempt. The miss is real: the object is moved after the first frame was
//! taken (someone bumped it), so the first plan grasps where it no longer is.

use k::nalgebra::{Isometry3, Vector3};
use pointact::camera::{Camera, CameraError, Frame};
use pointact::executor::{Branch, Event};
use pointact::runner::{run_task, RunError};
use pointact::sim::devices::{SharedWorld, SimCamera};
use pointact::sim::judge;
use pointact::sim::oracle::{OracleOptions, OraclePointer};

/// A camera whose first frame is taken just before the object `name` is pushed by `by`.
struct Bumped {
    inner: SimCamera,
    world: SharedWorld,
    name: String,
    by: Vector3<f64>,
    frames: usize,
}

impl Camera for Bumped {
    fn capture(&mut self) -> Result<Frame, CameraError> {
        let frame = self.inner.capture()?;
        self.frames += 1;
        if self.frames == 1 {
            let mut w = self.world.lock();
            let pose = w.object_pose(&self.name).expect("the object");
            let moved =
                Isometry3::from_parts((pose.translation.vector + self.by).into(), pose.rotation);
            w.set_object_pose(&self.name, &moved).expect("moved");
            w.settle(1.0);
        }
        Ok(frame)
    }
}

#[test]
fn a_grasp_on_nothing_goes_home_looks_again_and_succeeds() {
    let mut t = super::common::sim_task("tabletop/pepper_in_pan", 3);
    let mut camera = Bumped {
        inner: SimCamera::new(t.world.clone(), Default::default()),
        world: t.world.clone(),
        name: t.episode.object.clone(),
        // Toward the robot, off its old spot by more than the fingers' reach.
        by: Vector3::new(-0.09, 0.0, 0.0),
        frames: 0,
    };
    let mut pointer = OraclePointer::new(t.truth.clone(), OracleOptions::default());
    let mut retries = Vec::new();
    let mut grasps = 0;
    let result = t.run(
        &mut camera,
        &mut pointer,
        Branch::Affordance,
        &mut |e| match e {
            Event::Retry { why, attempt } => retries.push((attempt, why.to_string())),
            Event::GraspHeld { .. } => grasps += 1,
            _ => {}
        },
    );
    let outcome = result.unwrap_or_else(|e| panic!("the retry should succeed: {e}"));
    assert_eq!(outcome.attempts, 2);
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(retries[0].1.contains("nothing"), "{}", retries[0].1);
    assert_eq!(grasps, 1, "only the second grasp held");
    // Two looks to plan, and two to check the result (is it still?).
    assert_eq!(camera.frames, 4, "the camera looked again");
    let camera_verdict = outcome.verdict.expect("the plan ran");
    assert!(camera_verdict.verified, "{}", camera_verdict.line());
    let verdict = judge(&mut t.world.lock(), &t.episode);
    assert!(verdict.success, "{}", verdict.detail);
}

#[test]
fn a_second_miss_is_an_error_with_the_arm_at_rest() {
    // The object is pushed after every frame: both grasps close on nothing.
    let mut t = super::common::sim_task("tabletop/pepper_in_pan", 3);
    struct Always(Bumped);
    impl Camera for Always {
        fn capture(&mut self) -> Result<Frame, CameraError> {
            self.0.frames = 0;
            self.0.by = -self.0.by;
            self.0.capture()
        }
    }
    let mut camera = Always(Bumped {
        inner: SimCamera::new(t.world.clone(), Default::default()),
        world: t.world.clone(),
        name: t.episode.object.clone(),
        by: Vector3::new(0.09, 0.0, 0.0),
        frames: 0,
    });
    let mut pointer = OraclePointer::new(t.truth.clone(), OracleOptions::default());
    let result = t.run(&mut camera, &mut pointer, Branch::Affordance, &mut |_| {});
    match result {
        Err(RunError::GraspMissed { width }) => assert!(width < 0.01, "{width}"),
        Err(e) => panic!("expected a missed grasp, got {e}"),
        Ok(_) => panic!("expected a missed grasp, the task succeeded"),
    }
}

/// A `SimRobot` whose object is taken out of the fingers (and put down elsewhere on the table)
/// right after the first move that follows a closing of the fingers: a slip during the lift.
struct Slippery {
    inner: pointact::sim::devices::SimRobot,
    world: SharedWorld,
    name: String,
    by: Vector3<f64>,
    closed: bool,
    slipped: bool,
}

impl pointact::robot::Robot for Slippery {
    fn model(&self) -> &std::sync::Arc<pointact::kinematics::RobotModel> {
        self.inner.model()
    }
    async fn joint_positions(&mut self) -> Result<Vec<f64>, pointact::robot::RobotError> {
        self.inner.joint_positions().await
    }
    async fn gripper_width(&mut self) -> Result<f64, pointact::robot::RobotError> {
        self.inner.gripper_width().await
    }
    async fn execute(
        &mut self,
        t: &pointact::safety::CheckedTrajectory,
    ) -> Result<(), pointact::robot::RobotError> {
        self.inner.execute(t).await?;
        if self.closed && !self.slipped {
            self.slipped = true;
            let mut w = self.world.lock();
            assert_eq!(w.slip().as_deref(), Some(self.name.as_str()), "it was held");
            let start = w.object_pose(&self.name).expect("the object");
            // Back on the table, beside where it was grasped.
            let table = w.scene().table.height;
            let mut pose = start;
            pose.translation.vector += self.by;
            pose.translation.z = table + (start.translation.z - table).min(0.05);
            w.set_object_pose(&self.name, &pose).expect("moved");
            // Long enough for the fingers, which closed on the object, to close on air.
            w.step_for(1.0);
        }
        Ok(())
    }
    async fn set_gripper(
        &mut self,
        c: pointact::safety::CheckedGripper,
    ) -> Result<(), pointact::robot::RobotError> {
        self.inner.set_gripper(c).await?;
        let open = self.inner.model().config.gripper.open_width;
        self.closed = self.inner.gripper_width().await? < open - 0.005;
        Ok(())
    }
    async fn stop(&mut self) -> Result<(), pointact::robot::RobotError> {
        self.inner.stop().await
    }
    fn take_states(&mut self) -> Vec<pointact::robot::JointState> {
        self.inner.take_states()
    }
}

#[test]
fn an_object_lost_during_the_lift_is_noticed_and_picked_up_again() {
    let super::common::SimTask {
        episode: ep,
        world,
        truth,
        robot,
        safety,
    } = super::common::sim_task("tabletop/pepper_in_pan", 3);
    let mut robot = Slippery {
        inner: robot,
        world: world.clone(),
        name: ep.object.clone(),
        by: Vector3::new(-0.06, 0.0, 0.0),
        closed: false,
        slipped: false,
    };
    let mut camera = SimCamera::new(world.clone(), Default::default());
    let mut pointer = OraclePointer::new(truth, OracleOptions::default());
    let mut retries = Vec::new();
    let result = super::common::block_on(run_task(
        &mut robot,
        &mut camera,
        &mut pointer,
        &ep.instruction,
        Branch::Affordance,
        safety,
        &mut |_| true,
        &mut |e| {
            if let Event::Retry { why, attempt } = e {
                retries.push((attempt, why.to_string()))
            }
        },
    ));
    let outcome = result.unwrap_or_else(|e| panic!("the retry should succeed: {e}"));
    assert!(robot.slipped, "the object was taken out of the fingers");
    assert_eq!(outcome.attempts, 2);
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert!(
        retries[0].1.contains("left the fingers during `lift`"),
        "{}",
        retries[0].1
    );
    let verdict = judge(&mut world.lock(), &ep);
    assert!(verdict.success, "{}", verdict.detail);
}
