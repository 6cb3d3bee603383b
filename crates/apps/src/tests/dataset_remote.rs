//! `eval bridge --dataset`: a remote episode kept as a dataset episode. A scripted joint-position
//! policy commands known targets, so every recorded state is known in advance: at 10 fps and 5 Hz
//! control, frame 2k is where step k's command put the arm and frame 2k+1 halfway there.

use std::path::Path;

use crate::bridge::remote::{
    Action, ControlMode, EpisodeStart, Observation, PolicyStatus, RemoteError, RemotePolicy,
};
use crate::dataset::read;
use crate::kinematics::RobotModel;
use crate::runner::record::{frames_per_control_step, DatasetRecorder, Kept};
use crate::runner::remote::RemoteOptions;

use super::bridge_server::bridge_episode;

/// Moves joint 1 by `STEP_RAD` each control step from wherever the arm starts, closes the
/// fingers from the third step on, and stops after `STEPS` steps.
struct Scripted {
    home: Vec<f64>,
    fingers: (f64, f64),
    /// The joint targets sent, in order.
    sent: Vec<Vec<f64>>,
}

const STEPS: u64 = 5;
const STEP_RAD: f64 = 0.04;

impl RemotePolicy for Scripted {
    async fn reset(&mut self, _: &EpisodeStart) -> Result<(), RemoteError> {
        Ok(())
    }

    async fn act(&mut self, o: &Observation) -> Result<Action, RemoteError> {
        let mut q = self.home.clone();
        q[0] += STEP_RAD * (o.step + 1) as f64;
        let finger = if o.step >= 2 {
            self.fingers.0
        } else {
            self.fingers.1
        };
        self.sent.push(q.clone());
        let mut values = q;
        values.extend([finger, finger]);
        Ok(Action {
            step: o.step,
            values,
            terminate: o.step + 1 == STEPS,
            status: PolicyStatus::Moving,
            detail: String::new(),
        })
    }

    async fn end(&mut self, _: bool, _: u64) -> Result<(), RemoteError> {
        Ok(())
    }
}

fn run(dir: &Path) -> (Scripted, crate::runner::remote::RemoteEpisode, usize) {
    let episode = bridge_episode("bridge/carrot_on_plate", 0);
    let model = RobotModel::resolve(&episode.robot).unwrap();
    let finger = |w: f64| model.config.gripper.units_for_width(w);
    let g = model.config.gripper;
    let mut policy = Scripted {
        home: model.home().to_vec(),
        fingers: (finger(g.closed_width), finger(g.open_width)),
        sent: Vec::new(),
    };
    let options = RemoteOptions {
        control_mode: ControlMode::JointPos,
        send_labels: false,
        max_steps: 20,
        ..RemoteOptions::default()
    };
    let mut recorder = DatasetRecorder::open(dir, &model, 10, (64, 48), false, false).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (result, kept) = rt
        .block_on(recorder.run_remote_episode(&episode, 0, &options, "remote", &mut policy))
        .unwrap();
    let frames = match kept.unwrap() {
        Kept::Frames(n) => n,
        other => panic!("not kept: {other:?}"),
    };
    recorder.settle().unwrap();
    (policy, result, frames)
}

#[test]
fn a_remote_episode_is_kept_frame_by_frame_at_a_multiple_of_the_control_rate() {
    let tmp = std::env::temp_dir().join(format!("pointact-dataset-remote-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let (policy, result, frames) = run(&tmp);
    assert_eq!(result.steps, STEPS);
    assert_eq!(
        frames as u64,
        1 + 2 * STEPS,
        "the first frame, then two per step"
    );

    let summary = read::summary(&tmp).unwrap();
    assert_eq!(summary.info.fps, 10);
    assert_eq!(summary.episodes.len(), 1);
    assert_eq!(summary.episodes[0].length as usize, frames);
    assert_eq!(summary.episodes[0].success, Some(result.success));
    let ep = read::episode(&tmp, 0).unwrap();
    let width = ep.state_names.len();
    assert_eq!(
        ep.state_names.last().map(String::as_str),
        Some("gripper_width")
    );
    let joints = width - 1;
    let row = |i: usize| &ep.state[i * width..i * width + joints];
    // Frame 0: home; frame 2k+2: step k's target; frame 2k+1: halfway from the frame before.
    for (j, v) in row(0).iter().enumerate() {
        assert!(
            (*v as f64 - policy.home[j]).abs() < 1e-6,
            "frame 0 joint {j}"
        );
    }
    for (k, target) in policy.sent.iter().enumerate() {
        let before = row(2 * k);
        for j in 0..joints {
            let end = row(2 * k + 2)[j] as f64;
            let mid = row(2 * k + 1)[j] as f64;
            assert!(
                (end - target[j]).abs() < 1e-6,
                "step {k} joint {j}: {end} vs {}",
                target[j]
            );
            let want_mid = (before[j] as f64 + target[j]) / 2.0;
            assert!((mid - want_mid).abs() < 1e-6, "step {k} joint {j} halfway");
        }
    }
    // The fingers were told to close from step 2: the gap shrinks after that, not before.
    let gap = |i: usize| ep.state[i * width + joints];
    assert!(
        (gap(0) - gap(4)).abs() < 1e-4,
        "open until the close command"
    );
    assert!(gap(2 * STEPS as usize) < gap(4) - 1e-3, "closed after it");
    assert_eq!(ep.plan_step.as_deref(), Some(&vec![-1i64; frames][..]));
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn a_dataset_rate_between_control_steps_is_refused() {
    assert_eq!(frames_per_control_step(5, 5.0), Ok(1));
    assert_eq!(frames_per_control_step(10, 5.0), Ok(2));
    assert_eq!(frames_per_control_step(30, 5.0), Ok(6));
    for bad in [3, 7, 12] {
        let e = frames_per_control_step(bad, 5.0).unwrap_err();
        assert!(e.contains("whole multiple of 5"), "{e}");
    }
}
