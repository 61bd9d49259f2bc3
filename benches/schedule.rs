//! The scheduler's hot path and footprint:
//!
//! - `resource_offers/warm`: one `resource_offers` call placing a task set of 100,000
//!   pending tasks on offers from 1,000 executors of 100 free cores each, reported per
//!   task launched (criterion's "elements"), on a scheduler that already ran such a
//!   round (its maps have their capacity: the steady state of a long-lived driver).
//!   Submitting the task set and reporting the tasks finished are outside the timed
//!   part; building each TaskDescription (and the TaskStart event) is inside.
//! - `resource_offers/cold`: the same on a fresh scheduler, whose maps grow (and whose
//!   fresh memory page-faults) during the round.
//! - memory per pending task: bytes held (by a counting global allocator) after
//!   submitting the 100,000-task set, including the task set as submitted, divided by
//!   100,000. Printed before the timings.
//!
//! Targets: at most 250 ns per task launched, at most 256 bytes per pending task.
//!
//! `cargo bench --bench schedule`

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use flint_scheduler::{SchedulerConfig, TaskScheduler, TaskSet, WorkerOffer};
use flint_wire::{TaskOutcome, TaskState};

/// Counts the bytes currently allocated, to measure what the scheduler holds.
struct CountingAllocator;

static HELD: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        HELD.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const TASKS: u32 = 100_000;
const EXECUTORS: u32 = 1_000;
const CORES: u32 = 100;

fn payload() -> Bytes {
    // A serialized task naming its function, with a little input: shared by every task.
    Bytes::from(vec![7u8; 100])
}

fn offers() -> Vec<WorkerOffer> {
    (0..EXECUTORS)
        .map(|e| WorkerOffer::new(e.to_string(), format!("host-{}", e / 4), CORES))
        .collect()
}

fn config() -> SchedulerConfig {
    SchedulerConfig {
        seed: 42,
        ..SchedulerConfig::default()
    }
}

/// A scheduler that knows the executors, with the 100k-task set submitted.
fn loaded_scheduler(start: Instant, offers: &[WorkerOffer]) -> TaskScheduler {
    let mut scheduler = TaskScheduler::new(config());
    for offer in offers {
        scheduler.executor_added(offer.executor_id.clone(), offer.host.clone(), offer.cores);
    }
    scheduler
        .submit_tasks(start, TaskSet::new(0, 0, TASKS, payload()))
        .unwrap();
    scheduler.drain_actions().for_each(drop);
    scheduler
}

fn report_memory_per_pending_task() {
    let start = Instant::now();
    let offers = offers();
    let mut scheduler = TaskScheduler::new(config());
    for offer in &offers {
        scheduler.executor_added(offer.executor_id.clone(), offer.host.clone(), offer.cores);
    }
    scheduler.drain_actions().for_each(drop);
    let payload = payload();
    let before = HELD.load(Ordering::Relaxed);
    let task_set = TaskSet::new(0, 0, TASKS, payload);
    scheduler.submit_tasks(start, task_set).unwrap();
    scheduler.drain_actions().for_each(drop);
    let held = HELD.load(Ordering::Relaxed) - before;
    println!(
        "memory per pending task: {:.1} bytes ({} bytes held for {} pending tasks; target <= 256)",
        held as f64 / f64::from(TASKS),
        held,
        TASKS
    );
    black_box(&scheduler);
}

/// Reports every launched task finished, so the scheduler is ready for the next round.
fn finish_all(scheduler: &mut TaskScheduler, now: Instant, launched: &[u64]) {
    for &task_id in launched {
        let outcome = TaskOutcome::Direct {
            value: Bytes::new(),
            metrics: Default::default(),
            accumulators: Vec::new(),
        };
        scheduler.status_update(now, task_id, TaskState::Finished, outcome);
    }
    scheduler.drain_actions().for_each(drop);
}

fn bench_resource_offers(c: &mut Criterion) {
    report_memory_per_pending_task();

    let start = Instant::now();
    let offers = offers();
    let mut group = c.benchmark_group("resource_offers");
    group.throughput(Throughput::Elements(u64::from(TASKS)));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));

    let mut scheduler = loaded_scheduler(start, &offers);
    let mut ids: Vec<u64> = Vec::with_capacity(TASKS as usize);
    scheduler.resource_offers_with(start, &offers, |_, task| ids.push(task.task_id));
    finish_all(&mut scheduler, start, &ids);
    let mut stage = 1;
    group.bench_function("warm", |b| {
        b.iter_custom(|iterations| {
            let mut timed = Duration::ZERO;
            for _ in 0..iterations {
                scheduler
                    .submit_tasks(start, TaskSet::new(stage, stage, TASKS, payload()))
                    .unwrap();
                stage += 1;
                scheduler.drain_actions().for_each(drop);
                ids.clear();
                let begin = Instant::now();
                let launched =
                    scheduler.resource_offers_with(start, black_box(&offers), |_, task| {
                        ids.push(task.task_id);
                        black_box(task);
                    });
                timed += begin.elapsed();
                assert_eq!(launched, TASKS as usize);
                finish_all(&mut scheduler, start, &ids);
            }
            timed
        })
    });

    group.bench_function("cold", |b| {
        b.iter_batched(
            || loaded_scheduler(start, &offers),
            |mut scheduler| {
                let launched =
                    scheduler.resource_offers_with(start, black_box(&offers), |_, task| {
                        black_box(task);
                    });
                assert_eq!(launched, TASKS as usize);
                // Dropping the scheduler is not the scheduler's time.
                scheduler
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_resource_offers);
criterion_main!(benches);
