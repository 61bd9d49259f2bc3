//! The driver's steady state allocates nothing per task: a counting global allocator
//! over a 100,000-task noop job after a warm-up job, with the driver in this process and
//! its executors as `flint executor` processes (their allocations are not counted here;
//! flint-executor's own no_alloc test counts theirs).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use flint::job::local_cluster;
use flint::rpc::Conf;
use flint::scheduler::{Driver, TaskSet};
use flint::wire::TaskPayload;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call forwards to the system allocator with the same arguments; the
// counter is a relaxed atomic and allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation here is).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `realloc` is passed on unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const TASKS: u32 = 100_000;

fn run(driver: &Driver, stage: u32, payload: &bytes::Bytes) {
    let handle = driver
        .submit(TaskSet::new(stage, stage, TASKS, payload.clone()))
        .unwrap();
    let outcome = handle.wait(Duration::from_secs(300)).unwrap();
    assert_eq!(outcome.results.len(), TASKS as usize);
}

fn allocations_of_a_job(prefetch: u32) -> u64 {
    let conf = Conf::from_pairs([format!("executor.taskPrefetch={prefetch}")]).unwrap();
    let driver = Driver::start(
        &conf,
        Box::new(local_cluster(env!("CARGO_BIN_EXE_flint"), 1, &conf)),
    )
    .unwrap();
    driver.request_total_executors(2).unwrap();
    driver
        .wait_for_executors(2, Duration::from_secs(30))
        .unwrap();
    let payload = TaskPayload::encode("noop", b"").unwrap();
    run(&driver, 0, &payload);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    run(&driver, 1, &payload);
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    driver.stop().unwrap();
    allocations
}

#[test]
fn the_driver_allocates_nothing_per_task() {
    for prefetch in [0, 16] {
        let allocations = allocations_of_a_job(prefetch);
        eprintln!("prefetch {prefetch}: {allocations} allocations for {TASKS} tasks");
        // The task set's own structures (its tasks, their pending lists, the results)
        // and buffers that grow a few times; nothing per task.
        assert!(
            allocations < 500,
            "prefetch {prefetch}: {allocations} allocations for {TASKS} tasks"
        );
    }
}
