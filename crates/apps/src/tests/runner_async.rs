//! The runner is async and runtime-free: episodes run as tasks of a multi-threaded tokio runtime,
//! two at once (as the SimplerEnv bridge will run one per connection), and give exactly what each
//! gives alone.

use pointact::executor::Branch;
use pointact::runner::{run_episode, EpisodeOptions, EpisodeResult};
use pointact::sim::tasks::task;

async fn episode(name: &'static str, seed: u64, branch: Branch) -> EpisodeResult {
    let ep = task(name).unwrap().instantiate(seed).unwrap();
    let opts = EpisodeOptions {
        branch,
        ..EpisodeOptions::default()
    };
    run_episode(&ep, &opts, &mut |_| {}).await.unwrap()
}

#[test]
fn two_episodes_at_once_on_a_multi_threaded_runtime_match_each_alone() {
    let cases = [
        ("tabletop/pepper_in_pan", 1, Branch::Affordance),
        ("bridge/carrot_on_plate", 2, Branch::Trace),
    ];
    let alone: Vec<EpisodeResult> = cases
        .iter()
        .map(|&(n, s, b)| super::common::block_on(episode(n, s, b)))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let together: Vec<EpisodeResult> = rt.block_on(async {
        // Spawned: each future must be `Send + 'static`, as a server's per-connection task is.
        let handles: Vec<_> = cases
            .iter()
            .map(|&(n, s, b)| tokio::spawn(episode(n, s, b)))
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("the episode task panicked"));
        }
        out
    });
    for ((a, t), case) in alone.iter().zip(&together).zip(&cases) {
        assert!(a.success, "{case:?} alone: {}", a.detail);
        assert_eq!(
            (a.success, &a.detail, a.steps_executed, a.sim_time_s),
            (t.success, &t.detail, t.steps_executed, t.sim_time_s),
            "{case:?}: concurrent run differs from the run alone"
        );
    }
}
