//! Memory: a driver holding 1,000,000 pending tasks stays under 256 MiB resident, and an
//! idle executor process under 16 MiB. One test in its own binary, so that nothing else
//! shares the process whose memory it reads.

use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;

use common::spawn_executor;
use flint::rpc::Conf;
use flint::scheduler::{Driver, TaskSet};
use flint::wire::TaskPayload;
use flint_testkit::process::{resident_bytes, Processes};

const MIB: u64 = 1024 * 1024;

#[test]
fn a_driver_with_a_million_pending_tasks_and_an_idle_executor_stay_small() {
    let driver = Driver::standalone(&Conf::new()).unwrap();
    let before = resident_bytes("self");
    let payload = TaskPayload::encode("noop", b"").unwrap();
    let handle = driver
        .submit(TaskSet::new(0, 0, 1_000_000, payload))
        .unwrap();
    assert_eq!(
        handle.progress(),
        (0, 1_000_000),
        "no executor: all pending"
    );
    let driver_rss = resident_bytes("self");
    eprintln!(
        "driver with 1,000,000 pending tasks: {:.1} MiB resident ({:.1} MiB before submitting)",
        driver_rss as f64 / MIB as f64,
        before as f64 / MIB as f64
    );
    assert!(driver_rss < 256 * MIB, "{driver_rss} bytes resident");
    // No work for the executor: it stays idle once registered.
    driver.cancel_stage(0, true);

    let executor = spawn_executor(driver.address(), "idle", &[], Stdio::inherit());
    let pid = executor.id().to_string();
    // Killed before the driver stops (or is dropped), however the test ends.
    let executor = Processes(vec![executor]);
    driver
        .wait_for_executors(1, Duration::from_secs(30))
        .unwrap();
    let settled = Instant::now() + Duration::from_millis(500);
    while Instant::now() < settled {
        std::thread::sleep(Duration::from_millis(50));
    }
    let executor_rss = resident_bytes(&pid);
    eprintln!(
        "idle executor: {:.1} MiB resident",
        executor_rss as f64 / MIB as f64
    );
    assert!(executor_rss < 16 * MIB, "{executor_rss} bytes resident");
    drop(executor);
    driver.stop().unwrap();
}
