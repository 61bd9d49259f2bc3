//! A profiling harness for `resource_offers`: the `schedule` bench's round (100,000
//! pending tasks on offers from 1,000 executors of 100 cores), run a given number of
//! times in a plain process, printing the best round's time per task launched.
//!
//! For perf or callgrind, which profile a plain process better than criterion's:
//!
//! ```text
//! cargo bench --no-run --bench offers_profile   # prints the binary's path
//! valgrind --tool=callgrind --cache-sim=yes --toggle-collect='*resource_offers*' \
//!     target/release/deps/offers_profile-HASH 3
//! ```

use std::time::Instant;

use bytes::Bytes;
use flint_scheduler::{SchedulerConfig, TaskScheduler, TaskSet, WorkerOffer};
use flint_wire::{TaskOutcome, TaskState};

fn main() {
    // `cargo bench` passes --bench (and criterion's flags) to every bench: not ours.
    let rounds: u32 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map_or(3, |a| a.parse().expect("ROUNDS is a number"));
    let start = Instant::now();
    let offers: Vec<WorkerOffer> = (0..1000u32)
        .map(|e| WorkerOffer::new(e.to_string(), format!("host-{}", e / 4), 100))
        .collect();
    let mut scheduler = TaskScheduler::new(SchedulerConfig {
        seed: 42,
        ..SchedulerConfig::default()
    });
    for offer in &offers {
        scheduler.executor_added(offer.executor_id.clone(), offer.host.clone(), offer.cores);
    }
    let mut best = f64::MAX;
    let mut ids = Vec::with_capacity(100_000);
    for stage in 0..rounds {
        let task_set = TaskSet::new(stage, stage, 100_000, Bytes::from(vec![7u8; 100]));
        scheduler
            .submit_tasks(start, task_set)
            .expect("a new stage");
        scheduler.drain_actions().for_each(drop);
        ids.clear();
        let began = Instant::now();
        let launched =
            scheduler.resource_offers_with(start, &offers, |_, task| ids.push(task.task_id));
        best = best.min(began.elapsed().as_nanos() as f64 / launched as f64);
        assert_eq!(launched, 100_000);
        for &task_id in &ids {
            let outcome = TaskOutcome::Direct {
                value: Bytes::new(),
                metrics: Default::default(),
                accumulators: vec![],
            };
            scheduler.status_update(start, task_id, TaskState::Finished, outcome);
        }
        scheduler.drain_actions().for_each(drop);
    }
    println!("best round: {best:.0} ns per task launched");
}
