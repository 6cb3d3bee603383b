//! The servo loop: joint setpoints to the arm at a fixed rate, with a watchdog on the feed.
//!
//! Why a loop of its own: both controllers execute *streamed* setpoints (xArm servo mode 1 takes the
//! newest target each period at up to 250 Hz; the Dynamixel bus takes a SYNC_WRITE of goal
//! positions), so the driver, not the controller, owns the timing. A setpoint that comes late makes
//! the arm stop short and jerk; a feed that dies (a stalled planner, a crashed producer) must never
//! leave the arm holding a stale target forever. Rules:
//!
//! * one setpoint per tick, in order, at `rate_hz` (ticks missed because the process was descheduled
//!   are skipped, not burst: a burst of old setpoints is a jump);
//! * a tick with no new setpoint *holds*: the last setpoint is sent again (harmless to both
//!   controllers, and it keeps the xArm's servo watchdog fed);
//! * after `stop_after_s` of holding without a new setpoint, the loop stops the arm and returns
//!   [`RobotError::Watchdog`]; a feed that is dropped without [`Setpoint::End`] stops it at once;
//! * any error from the controller stops the arm (best effort) before it is returned.
//!
//! The drivers implement [`ServoSink`] (the real seam: one wire protocol each); everything else —
//! timing, hold, watchdog, statistics — is here once.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::RobotError;
use pointact_core::safety::CheckedTrajectory;

/// Where setpoints go: one controller's servo command.
// Awaited on the caller's task (no spawning), like the `Robot` trait.
#[allow(async_fn_in_trait)]
pub trait ServoSink {
    /// Sends one joint setpoint (rad, `arm_joints` order); the controller moves there within about
    /// one period.
    async fn send(&mut self, q: &[f64]) -> Result<(), RobotError>;
    /// Stops the arm now.
    async fn stop(&mut self) -> Result<(), RobotError>;
}

/// What the feed sends the loop.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Setpoint {
    /// The next joint setpoint.
    Joints(Vec<f64>),
    /// The trajectory is complete: the loop returns after the setpoints before it.
    End,
}

/// Rate and watchdog of a servo loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServoTiming {
    /// Setpoints per second (robot.toml's `servo_rate_hz`).
    pub rate_hz: f64,
    /// How long the loop holds the last setpoint without a new one before it stops the arm.
    pub stop_after_s: f64,
}

impl ServoTiming {
    /// `rate_hz` with a watchdog of 0.2 s: at 100 Hz that is 20 missed setpoints, far beyond
    /// scheduling noise and short enough that a dead feed stops the arm within a blink.
    pub fn at(rate_hz: f64) -> Self {
        Self {
            rate_hz,
            stop_after_s: 0.2,
        }
    }

    fn period(&self) -> Result<Duration, RobotError> {
        let ok = self.rate_hz.is_finite() && self.rate_hz > 0.0 && self.rate_hz <= 1000.0;
        let watchdog_ok = self.stop_after_s.is_finite() && self.stop_after_s > 0.0;
        if !(ok && watchdog_ok) {
            return Err(RobotError::Stopped(format!(
                "servo rate {} Hz must be in (0, 1000] and the watchdog {} s positive",
                self.rate_hz, self.stop_after_s
            )));
        }
        Ok(Duration::from_secs_f64(1.0 / self.rate_hz))
    }
}

/// What a servo loop did: for the log and `bench servo`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServoStats {
    /// Setpoints received from the feed and sent.
    pub sent: usize,
    /// Ticks that re-sent the last setpoint because the feed had none.
    pub held: usize,
    /// Time between consecutive sends (s), for jitter statistics.
    pub periods_s: Vec<f64>,
}

impl ServoStats {
    /// The `p`-th percentile (0..=100, nearest rank) of the absolute deviation of the send
    /// periods from `1 / rate_hz`, seconds; `None` before two sends.
    pub fn jitter_percentile(&self, rate_hz: f64, p: f64) -> Option<f64> {
        let nominal = 1.0 / rate_hz;
        let mut dev: Vec<f64> = self.periods_s.iter().map(|t| (t - nominal).abs()).collect();
        if dev.is_empty() {
            return None;
        }
        dev.sort_by(f64::total_cmp);
        let rank = ((p.clamp(0.0, 100.0) / 100.0) * dev.len() as f64).ceil() as usize;
        Some(dev[rank.clamp(1, dev.len()) - 1])
    }
}

/// Runs the loop until the feed sends [`Setpoint::End`] (then `Ok`), the watchdog fires, the feed
/// is dropped, or the sink fails — in each failure case after commanding a stop.
pub(crate) async fn servo_loop<S: ServoSink>(
    sink: &mut S,
    timing: &ServoTiming,
    feed: &mut mpsc::Receiver<Setpoint>,
) -> Result<ServoStats, RobotError> {
    let period = timing.period()?;
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut stats = ServoStats::default();
    let mut last: Option<Vec<f64>> = None;
    let mut last_sent_at: Option<Instant> = None;
    let mut silent = Duration::ZERO;
    loop {
        ticker.tick().await;
        let next = match feed.try_recv() {
            Ok(Setpoint::Joints(q)) => {
                silent = Duration::ZERO;
                stats.sent += 1;
                last = Some(q);
                last.as_deref()
            }
            Ok(Setpoint::End) => return Ok(stats),
            Err(mpsc::error::TryRecvError::Empty) => {
                silent += period;
                if silent.as_secs_f64() >= timing.stop_after_s {
                    return Err(stop_then(
                        sink,
                        RobotError::Watchdog {
                            silent_s: silent.as_secs_f64(),
                        },
                    )
                    .await);
                }
                stats.held += usize::from(last.is_some());
                last.as_deref()
            }
            Err(mpsc::error::TryRecvError::Disconnected) => {
                let why = "the setpoint feed ended without marking the end of the trajectory";
                return Err(stop_then(sink, RobotError::Stopped(why.to_owned())).await);
            }
        };
        if let Some(q) = next {
            if let Err(e) = sink.send(q).await {
                return Err(stop_then(sink, e).await);
            }
            let now = Instant::now();
            if let Some(prev) = last_sent_at.replace(now) {
                stats.periods_s.push((now - prev).as_secs_f64());
            }
        }
    }
}

/// Follows a checked trajectory: its samples at the period the gate checked it at
/// ([`CheckedTrajectory::dt`]), then [`Setpoint::End`], through [`servo_loop`].
pub async fn follow<S: ServoSink>(
    sink: &mut S,
    trajectory: &CheckedTrajectory,
    stop_after_s: f64,
) -> Result<ServoStats, RobotError> {
    let samples = trajectory.trajectory().samples(trajectory.dt());
    let (tx, mut rx) = mpsc::channel(samples.len() + 1);
    for (_, q) in samples {
        // Capacity covers every sample and the end marker: these sends cannot fail.
        let _ = tx.try_send(Setpoint::Joints(q));
    }
    let _ = tx.try_send(Setpoint::End);
    let timing = ServoTiming {
        rate_hz: 1.0 / trajectory.dt(),
        stop_after_s,
    };
    servo_loop(sink, &timing, &mut rx).await
}

/// Commands a stop and returns `cause` (a failed stop is added to the message: the caller must
/// know the arm may still be moving). Public so drivers stop the same way outside the loop.
pub(crate) async fn stop_then<S: ServoSink>(sink: &mut S, cause: RobotError) -> RobotError {
    match sink.stop().await {
        Ok(()) => cause,
        Err(e) => RobotError::Stopped(format!("{cause}; and the stop command failed: {e}")),
    }
}
