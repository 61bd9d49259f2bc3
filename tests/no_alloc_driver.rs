//! The driver's steady state allocates nothing per task: a counting global allocator
//! over a 100,000-task noop job after a warm-up job, with the driver in this process and
//! its executors as `flint executor` processes (their allocations are not counted here;
//! flint-executor's own no_alloc test counts theirs). A variant has every task add 1 to a
//! long accumulator: its updates travel with each result and are merged, for nothing
//! more per task; another gives the task set local properties, which every task's
//! description carries.

use std::time::Duration;

use flint::job::local_cluster;
use flint::rpc::Conf;
use flint::scheduler::{AccumulatorKind, AccumulatorValue, Driver, TaskSet};
use flint::wire::{Property, TaskPayload};
use flint_testkit::alloc::{allocations, CountingAllocator};
use flint_testkit::samples::local_properties;

/// Serializes the tests of this binary, whose allocation count is process-wide.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const TASKS: u32 = 100_000;

fn run(driver: &Driver, stage: u32, payload: &bytes::Bytes, properties: &[Property]) {
    let mut task_set = TaskSet::new(stage, stage, TASKS, payload.clone());
    task_set.properties = properties.to_vec();
    let handle = driver.submit(task_set).unwrap();
    let outcome = handle.wait(Duration::from_secs(300)).unwrap();
    assert_eq!(outcome.results.len(), TASKS as usize);
}

/// Allocations of the measured job; with `accumulate`, each task adds 1 to a long
/// accumulator (checked to count both jobs' tasks); the task sets have `properties`.
fn allocations_of_a_job(prefetch: u32, accumulate: bool, properties: &[Property]) -> u64 {
    // The count is the whole process's: one measured run at a time.
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
    let counter = driver.register_accumulator("tasks", AccumulatorKind::Long);
    let payload = if accumulate {
        TaskPayload::encode("accumulate", counter.id.to_string().as_bytes()).unwrap()
    } else {
        TaskPayload::encode("noop", b"").unwrap()
    };
    run(&driver, 0, &payload, properties);
    let before = allocations();
    run(&driver, 1, &payload, properties);
    let allocations = allocations() - before;
    let expected = if accumulate { 2 * i64::from(TASKS) } else { 0 };
    assert_eq!(
        driver.accumulator_value(counter.id),
        Some(AccumulatorValue::Long(expected))
    );
    driver.stop().unwrap();
    allocations
}

#[test]
fn the_driver_allocates_nothing_per_task() {
    for prefetch in [0, 16] {
        let allocations = allocations_of_a_job(prefetch, false, &[]);
        eprintln!("prefetch {prefetch}: {allocations} allocations for {TASKS} tasks");
        // The task set's own structures (its tasks, their pending lists, the results)
        // and buffers that grow a few times; nothing per task.
        assert!(
            allocations < 500,
            "prefetch {prefetch}: {allocations} allocations for {TASKS} tasks"
        );
    }
}

#[test]
fn accumulator_updates_allocate_nothing_per_task() {
    let allocations = allocations_of_a_job(16, true, &[]);
    eprintln!("accumulating: {allocations} allocations for {TASKS} tasks");
    assert!(
        allocations < 500,
        "{allocations} allocations for {TASKS} tasks that each add to an accumulator"
    );
}

#[test]
fn local_properties_travel_with_every_task_for_nothing_more_per_task() {
    let properties = local_properties();
    let allocations = allocations_of_a_job(16, false, &properties);
    eprintln!("with properties: {allocations} allocations for {TASKS} tasks");
    assert!(
        allocations < 500,
        "{allocations} allocations for {TASKS} tasks of a task set with local properties"
    );
}
