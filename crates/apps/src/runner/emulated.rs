//! The physical path, here: the built-in simulator's arm behind the xArm controller emulator, driven
//! by the real xArm driver over loopback TCP.
//!
//! Why: on hardware, a run goes runner → `XarmRobot` → xArm protocol → controller → arm. With the
//! arm replaced by `sim::devices::SimArm` everything but the metal is the code a physical run uses
//! (the client, its servo loop and watchdog, the gripper tunnel, the controller's timing), and the
//! simulator still judges the outcome. `pointact emulate xarm --sim` serves such an emulator to
//! another process; tests run a whole task through it in one ([`run_episode_xarm`]).

use std::sync::Arc;

use super::episode::{prepare_episode, run_prepared, EpisodeError, EpisodeOptions, EpisodeResult};
use crate::camera::Camera;
use crate::executor::{Event, Plan};
use crate::kinematics::RobotModel;
use crate::pointing::Pointer;
use crate::robot::settings;
use crate::robot::settings::XarmSettings;
use crate::robot::xarm::emulator::{EmulatorOptions, EmulatorThread};
use crate::robot::xarm::XarmRobot;
use crate::sim::devices::{SharedWorld, SimArm, SimCamera};
use crate::sim::oracle::OracleTruth;
use crate::sim::tasks::Episode;

/// An xArm controller emulator on its own thread whose arm is the simulator's, with the driver
/// settings that reach it.
pub struct SimXarm {
    /// The running emulator (its ports and controller); it shuts down when dropped.
    pub emulator: EmulatorThread,
    /// The shipped `xarm6` driver settings pointed at the emulator's ports on 127.0.0.1.
    pub settings: XarmSettings,
}

impl SimXarm {
    /// Puts `model`'s arm at `q` in `world` and starts an emulator moving it (`options`' ports;
    /// 0 picks free ones).
    pub fn start(
        world: &SharedWorld,
        model: Arc<RobotModel>,
        q: Vec<f64>,
        options: EmulatorOptions,
    ) -> Result<SimXarm, EpisodeError> {
        let setup = |e: &dyn std::fmt::Display| EpisodeError::Setup(e.to_string());
        if model.name() != "xarm6" {
            return Err(EpisodeError::Setup(format!(
                "the xArm emulator drives an xArm 6; this world's robot is `{}`",
                model.name()
            )));
        }
        let mut settings = settings::builtin("xarm6")
            .map_err(|e| setup(&e))?
            .as_xarm()
            .ok_or_else(|| EpisodeError::Setup("shipped xarm6 settings are not xArm ones".into()))?
            .clone();
        let arm = SimArm::new(world.clone(), model, q).map_err(|e| setup(&e))?;
        let emulator = EmulatorThread::start(options, Box::new(arm)).map_err(|e| setup(&e))?;
        settings.network.address = "127.0.0.1".into();
        settings.network.command_port = emulator.ports[0];
        settings.network.state_report_port = emulator.ports[1];
        settings.network.realtime_report_port = emulator.ports[2];
        Ok(SimXarm { emulator, settings })
    }
}

/// Runs `episode` (an xArm 6 task) with the xArm driver connected to an emulator whose arm is the
/// episode's simulated one, the simulator's camera and the pointer `make_pointer` builds; judges
/// the world at the end like `run_episode`.
pub async fn run_episode_xarm<C: Camera, P: Pointer>(
    episode: &Episode,
    options: &EpisodeOptions,
    wrap_camera: impl FnOnce(SimCamera) -> C,
    make_pointer: impl FnOnce(OracleTruth) -> P,
    approve: &mut (dyn FnMut(&Plan) -> bool + Send),
    on_event: &mut (dyn FnMut(Event<'_>) + Send),
) -> Result<EpisodeResult, EpisodeError> {
    let prepared = prepare_episode(episode)?;
    let home = prepared.model.home().to_vec();
    let sim = SimXarm::start(
        &prepared.world,
        prepared.model.clone(),
        home,
        EmulatorOptions {
            command_port: 0,
            report_port: 0,
            rt_port: 0,
            ..EmulatorOptions::default()
        },
    )?;
    let mut robot = XarmRobot::connect(prepared.model.clone(), &sim.settings)
        .await
        .map_err(|e| EpisodeError::Setup(format!("xArm emulator: {e}")))?;
    let mut camera = wrap_camera(super::episode::sim_camera(&prepared.world, options));
    let mut pointer = make_pointer(prepared.truth);
    let result = run_prepared(
        episode,
        options,
        &prepared.world,
        &mut robot,
        &mut camera,
        &mut pointer,
        approve,
        on_event,
    )
    .await;
    drop(robot);
    drop(sim);
    result
}
