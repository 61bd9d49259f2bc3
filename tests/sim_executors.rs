//! The simulated executors of the scale bench (`flint::bench::sim`) against a real
//! driver over 127.0.0.1: they register, take every launch of a job and answer it, and
//! heartbeat; the driver counts each result once. Bounded in time; everything stops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flint::bench::sim::{SimConfig, SimExecutors};
use flint::rpc::Conf;
use flint::scheduler::{Driver, TaskSet};
use flint::wire::TaskPayload;

#[test]
fn many_simulated_executors_on_one_thread_register_and_answer_a_job_once_per_task() {
    let executors = 50;
    let conf = Conf::from_pairs(["rpc.io.maxConnectionsPerHost=200"]).unwrap();
    let driver = Driver::standalone(&conf).unwrap();
    let config = SimConfig {
        driver: driver.address(),
        executors,
        cores: 2,
        heartbeat_interval: Duration::from_millis(50),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let sim = SimExecutors::connect(&config).unwrap();
    let running = {
        let stop = stop.clone();
        std::thread::spawn(move || sim.run(&stop))
    };
    driver
        .wait_for_executors(executors, Duration::from_secs(30))
        .unwrap();
    let tasks = 5_000;
    let payload = TaskPayload::encode("noop", b"").unwrap();
    let outcome = driver
        .submit(TaskSet::new(0, 0, tasks, payload))
        .unwrap()
        .wait(Duration::from_secs(60))
        .unwrap();
    assert_eq!(outcome.results.len(), tasks as usize);
    assert_eq!(outcome.duplicate_results, 0);
    // A few heartbeat intervals, then stop: none of them was lost meanwhile.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(driver.executor_ids().len(), executors);
    stop.store(true, Ordering::Relaxed);
    let report = running.join().unwrap().unwrap();
    assert_eq!(report.registered, executors);
    assert_eq!(report.launches, u64::from(tasks));
    assert!(report.heartbeats >= executors as u64, "{report:?}");
    // Every launch beyond the first that filled each core followed a status.
    assert_eq!(
        report.turnaround_ns.len(),
        u64::from(tasks) - executors as u64 * 2
    );
    driver.stop().unwrap();
}
