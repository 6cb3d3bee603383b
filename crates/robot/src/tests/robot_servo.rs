//! The servo loop (`robot::servo`): every sample of a checked trajectory is sent once, in order, at
//! the gate's period; a stalled feed is held and then stopped by the watchdog; a dropped feed or a
//! failing controller stops the arm before the error is returned. Time is tokio's paused clock, so
//! the periods are exact and no test waits in real time.

use std::time::Duration;

use crate::servo::{follow, servo_loop, ServoSink, ServoTiming, Setpoint};
use crate::RobotError;
use pointact_core::kinematics::RobotModel;
use pointact_core::planning::{limit_tool_speed, JointPath, Trajectory};
use pointact_core::safety::{SafetyConfig, SafetyGate};
use tokio::sync::mpsc;

/// Records what the loop sends, and when (paused clock).
#[derive(Default)]
struct Recorder {
    sent: Vec<(Duration, Vec<f64>)>,
    stops: usize,
    fail_after: Option<usize>,
    t0: Option<tokio::time::Instant>,
}

impl ServoSink for Recorder {
    async fn send(&mut self, q: &[f64]) -> Result<(), RobotError> {
        if self.fail_after == Some(self.sent.len()) {
            return Err(RobotError::Controller {
                code: 24,
                detail: "speed limit".into(),
            });
        }
        let t0 = *self.t0.get_or_insert_with(tokio::time::Instant::now);
        self.sent.push((t0.elapsed(), q.to_vec()));
        Ok(())
    }
    async fn stop(&mut self) -> Result<(), RobotError> {
        self.stops += 1;
        Ok(())
    }
}

fn paused<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn a_checked_trajectory_is_streamed_sample_by_sample_at_the_gate_period() {
    let m = RobotModel::builtin("xarm6").unwrap();
    let home = m.home().to_vec();
    let mut goal = home.clone();
    goal[0] += 0.3;
    let lim = &m.config.limits;
    let t = Trajectory::time_parameterize(
        JointPath {
            waypoints: vec![home.clone(), goal.clone()],
        },
        &lim.joint_velocity,
        &lim.joint_acceleration,
    )
    .unwrap();
    let t = limit_tool_speed(t, &m, lim.cartesian_speed).unwrap();
    let checked = SafetyGate::new(&m, SafetyConfig::default())
        .check(t, &home, 1.0, &[])
        .unwrap();
    let want = checked.trajectory().samples(checked.dt());
    let mut sink = Recorder::default();
    let stats = paused(follow(&mut sink, &checked, 0.2)).unwrap();
    assert_eq!(stats.sent, want.len());
    assert_eq!(stats.held, 0);
    assert_eq!(sink.stops, 0);
    assert_eq!(sink.sent.len(), want.len());
    for (i, ((at, q), (_, w))) in sink.sent.iter().zip(&want).enumerate() {
        assert_eq!(q, w, "sample {i}");
        // One period apart on the paused clock.
        let expect = Duration::from_secs_f64(i as f64 * checked.dt());
        assert!(
            at.abs_diff(expect) < Duration::from_micros(50),
            "{i}: {at:?}"
        );
    }
    assert_eq!(sink.sent.last().unwrap().1, goal);
    assert_eq!(stats.jitter_percentile(1.0 / checked.dt(), 99.0), Some(0.0));
}

#[test]
fn a_stalled_feed_is_held_then_the_watchdog_stops_the_arm() {
    let (tx, mut rx) = mpsc::channel(16);
    for i in 0..3 {
        tx.try_send(Setpoint::Joints(vec![f64::from(i); 6]))
            .unwrap();
    }
    // `tx` stays alive: the producer is stuck, not gone.
    let timing = ServoTiming {
        rate_hz: 100.0,
        stop_after_s: 0.1,
    };
    let mut sink = Recorder::default();
    let err = paused(servo_loop(&mut sink, &timing, &mut rx)).unwrap_err();
    assert!(
        matches!(err, RobotError::Watchdog { silent_s } if (silent_s - 0.1).abs() < 0.011),
        "{err}"
    );
    assert_eq!(sink.stops, 1);
    // Three fresh setpoints, then the last one held until the watchdog (10 ticks of silence, the
    // 10th stops instead of holding).
    assert_eq!(sink.sent.len(), 3 + 9);
    assert!(sink.sent[3..].iter().all(|(_, q)| q == &vec![2.0; 6]));
    drop(tx);
}

#[test]
fn a_feed_dropped_without_its_end_stops_the_arm_at_once() {
    let (tx, mut rx) = mpsc::channel(4);
    tx.try_send(Setpoint::Joints(vec![0.5; 6])).unwrap();
    drop(tx);
    let mut sink = Recorder::default();
    let err = paused(servo_loop(&mut sink, &ServoTiming::at(100.0), &mut rx)).unwrap_err();
    assert!(
        matches!(err, RobotError::Stopped(ref m) if m.contains("without marking the end")),
        "{err}"
    );
    assert_eq!((sink.sent.len(), sink.stops), (1, 1));
}

#[test]
fn a_controller_error_stops_the_arm_before_it_is_returned() {
    let (tx, mut rx) = mpsc::channel(8);
    for _ in 0..5 {
        tx.try_send(Setpoint::Joints(vec![0.0; 6])).unwrap();
    }
    tx.try_send(Setpoint::End).unwrap();
    let mut sink = Recorder {
        fail_after: Some(2),
        ..Default::default()
    };
    let err = paused(servo_loop(&mut sink, &ServoTiming::at(100.0), &mut rx)).unwrap_err();
    assert!(
        matches!(err, RobotError::Controller { code: 24, .. }),
        "{err}"
    );
    assert_eq!((sink.sent.len(), sink.stops), (2, 1));
}

#[test]
fn bad_timing_is_refused_before_anything_is_sent() {
    let (_tx, mut rx) = mpsc::channel::<Setpoint>(1);
    for rate in [0.0, -5.0, f64::NAN, 1e9] {
        let mut sink = Recorder::default();
        let timing = ServoTiming::at(rate);
        assert!(
            paused(servo_loop(&mut sink, &timing, &mut rx)).is_err(),
            "{rate}"
        );
        assert!(sink.sent.is_empty() && sink.stops == 0);
    }
}

#[test]
fn jitter_percentiles_use_nearest_rank() {
    let stats = crate::servo::ServoStats {
        sent: 5,
        held: 0,
        periods_s: vec![0.010, 0.011, 0.009, 0.014],
    };
    let p = |q| stats.jitter_percentile(100.0, q).unwrap();
    assert!((p(50.0) - 0.001).abs() < 1e-12);
    assert!((p(99.0) - 0.004).abs() < 1e-12);
    assert!(crate::servo::ServoStats::default()
        .jitter_percentile(100.0, 99.0)
        .is_none());
}
