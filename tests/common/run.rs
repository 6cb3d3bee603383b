//! Driving the library's futures and simulated tasks from a test.

use std::future::Future;

/// Drives one of the library's futures to completion, as the CLI does (the library never creates
/// a runtime of its own).
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}

/// One simulated task ready for `run_task`: the episode, its settled world, the oracle's truth,
/// the arm at home in that world and the gate's settings for its table.
pub struct SimTask {
    pub episode: pointact::sim::tasks::Episode,
    pub world: pointact::sim::devices::SharedWorld,
    pub truth: pointact::sim::oracle::OracleTruth,
    pub robot: pointact::sim::devices::SimRobot,
    pub safety: pointact::safety::SafetyConfig,
}

/// `name` (e.g. "tabletop/pepper_in_pan") at `seed`, settled, the arm at home.
pub fn sim_task(name: &str, seed: u64) -> SimTask {
    use pointact::sim::devices::{SharedWorld, SimRobot};
    let episode = pointact::sim::tasks::task(name)
        .and_then(|t| t.instantiate(seed))
        .expect("episode");
    let model = episode.robot_model().expect("robot");
    let world = SharedWorld::new(episode.world(model.clone()).expect("world"));
    let truth = pointact::runner::oracle_truth(&episode, &world);
    world.lock().settle(2.0);
    let robot = SimRobot::new(world.clone(), model.clone(), model.home().to_vec()).expect("robot");
    let safety = pointact::safety::SafetyConfig {
        table_z: world.lock().scene().table.height,
        ..pointact::safety::SafetyConfig::default()
    };
    SimTask {
        episode,
        world,
        truth,
        robot,
        safety,
    }
}

impl SimTask {
    /// Runs the episode's instruction with `branch` on this task's arm, `camera` and `pointer`,
    /// approving every plan: what most runner tests do, each with its own camera or pointer.
    pub fn run<C, P>(
        &mut self,
        camera: &mut C,
        pointer: &mut P,
        branch: pointact::executor::Branch,
        on_event: &mut (dyn FnMut(pointact::executor::Event<'_>) + Send),
    ) -> Result<pointact::runner::RunOutcome, pointact::runner::RunError>
    where
        C: pointact::camera::Camera,
        P: pointact::pointing::Pointer + ?Sized,
    {
        block_on(pointact::runner::run_task(
            &mut self.robot,
            camera,
            pointer,
            &self.episode.instruction,
            branch,
            self.safety.clone(),
            &mut |_| true,
            on_event,
        ))
    }
}

/// Waits (at most `limit`) until `ready()`, then sends the child SIGINT (Ctrl-C) and collects it.
pub fn interrupt_when(
    child: std::process::Child,
    limit: std::time::Duration,
    mut ready: impl FnMut() -> bool,
) -> std::process::Output {
    let t0 = std::time::Instant::now();
    while !ready() {
        assert!(t0.elapsed() < limit, "nothing to interrupt after {limit:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    child.wait_with_output().unwrap()
}
