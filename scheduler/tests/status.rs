//! Driver::publish_status on a real driver (its RPC environment on 127.0.0.1): snapshots
//! come at most every 100 ms, from the event loop's timer, however often they are read.

use std::time::{Duration, Instant};

use flint_rpc::Conf;
use flint_scheduler::{Driver, MIN_PUBLISH_INTERVAL};

#[test]
fn snapshots_are_published_at_most_every_100_ms_and_read_without_the_driver() {
    let driver = Driver::standalone(&Conf::new()).unwrap();
    // Asked for every 10 ms: held to 100 ms.
    let board = driver.publish_status(Duration::from_millis(10)).unwrap();
    let first = board.latest();
    let started = Instant::now();
    let mut reads = 0u64;
    let mut sequences = std::collections::BTreeSet::new();
    while started.elapsed() < Duration::from_millis(1000) {
        // Read far more often than published: reading builds nothing.
        let snapshot = board.latest();
        sequences.insert(snapshot.sequence);
        reads += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    let elapsed = started.elapsed();
    let published = sequences.iter().filter(|&&s| s > first.sequence).count() as u128;
    let most = elapsed.as_millis() / MIN_PUBLISH_INTERVAL.as_millis() + 1;
    assert!(published >= 3, "only {published} snapshots in {elapsed:?}");
    assert!(published <= most, "{published} snapshots in {elapsed:?}");
    assert!(reads > 10 * published as u64);
    // The same board for a second caller.
    let again = driver.publish_status(Duration::from_secs(1)).unwrap();
    assert!(again.latest().sequence >= board.latest().sequence - 1);
    let last = board.latest();
    assert_eq!(last.executors.len(), 0);
    // The last snapshot is up to an interval old (a busy host's timer may lag more).
    assert!(
        last.uptime >= elapsed.saturating_sub(3 * MIN_PUBLISH_INTERVAL),
        "uptime {:?} after {elapsed:?}",
        last.uptime
    );
    driver.stop().unwrap();
}
