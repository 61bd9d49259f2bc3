//! A 64 MiB broadcast reaching the tasks of 2 `flint executor` processes (1 core each),
//! beside raw TCP's pipelined throughput between two processes (this bench binary
//! re-executed as the reading end, `flint::bench::stream`) measured in the same run.
//!
//! Each iteration makes a new broadcast (so that nothing is cached), runs 4
//! `broadcast-read` tasks on it (each executor reads it, and fetches it once), and
//! destroys it; its time is from the submission to the last result. The report prints
//! the broadcast's bytes/s (twice its size: once per executor) beside raw TCP's bytes/s
//! for the same number of bytes; the target is at least half.
//!
//! `cargo bench --bench broadcast`. Not measured in this repository's history yet: the
//! shared machine it was written on gives noise, not figures.

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, Criterion};
use flint::bench::stream::{serve_sink_if_asked, RawStream, StreamPeer, STREAM_CHUNK};
use flint::executor::pattern;
use flint::rpc::Conf;
use flint::scheduler::{Driver, LocalClusterManager, TaskSet};
use flint::wire::TaskPayload;

const FLINT: &str = env!("CARGO_BIN_EXE_flint");
const EXECUTORS: usize = 2;
const TASKS: u32 = 4;

/// The broadcast's size: 64 MiB under `cargo bench`, 4 MiB under `cargo test --benches`.
fn size() -> usize {
    if std::env::args().any(|arg| arg == "--bench") {
        64 << 20
    } else {
        4 << 20
    }
}

/// One broadcast made, read by every executor, destroyed: the time its tasks took.
fn broadcast_once(driver: &Driver, stage: &mut u32, value: &Bytes) -> Duration {
    let broadcast = driver.broadcast(value.clone());
    let payload = TaskPayload::encode("broadcast-read", broadcast.id().to_string().as_bytes())
        .expect("a valid name");
    *stage += 1;
    let started = Instant::now();
    let outcome = driver
        .submit(TaskSet::new(*stage, *stage, TASKS, payload))
        .expect("submitted")
        .wait(Duration::from_secs(600))
        .expect("the tasks read the broadcast");
    let elapsed = started.elapsed();
    assert!(outcome
        .results
        .iter()
        .all(|r| r.len() == 20 && r[..8] == (value.len() as u64).to_le_bytes()));
    driver.destroy_broadcast(broadcast.id());
    elapsed
}

fn broadcast(c: &mut Criterion) {
    let conf = Conf::new();
    let driver =
        Driver::start(&conf, Box::new(LocalClusterManager::new(FLINT, 1))).expect("a driver");
    driver
        .request_total_executors(EXECUTORS as i64)
        .expect("executors");
    driver
        .wait_for_executors(EXECUTORS, Duration::from_secs(60))
        .expect("executors registered");
    let value = Bytes::from(pattern(size()));
    let mut stage = 0;
    let mut group = c.benchmark_group("broadcast");
    group.sample_size(10);
    group.bench_function("64MiB_to_2_executors", |b| {
        b.iter_custom(|n| {
            (0..n)
                .map(|_| broadcast_once(&driver, &mut stage, &value))
                .sum()
        })
    });
    group.finish();

    // The same bytes, both ways, in alternating rounds.
    let program = std::env::current_exe().expect("this bench's path");
    let mut raw = RawStream::start(&StreamPeer::Process(program), STREAM_CHUNK).expect("raw TCP");
    let bytes = (EXECUTORS * value.len()) as u64;
    let (mut flint_rates, mut raw_rates) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let elapsed = broadcast_once(&driver, &mut stage, &value);
        flint_rates.push(bytes as f64 / elapsed.as_secs_f64());
        raw_rates.push(raw.throughput(bytes).expect("raw TCP streams"));
    }
    drop(raw);
    driver.stop().expect("the driver stops");
    let median = |rates: &mut Vec<f64>| {
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    let (flint_rate, raw_rate) = (median(&mut flint_rates), median(&mut raw_rates));
    println!();
    println!(
        "broadcast of {} MiB to {EXECUTORS} executors: {:.0} MiB/s; raw TCP pipelined: {:.0} MiB/s; \
         ratio {:.2} (target: at least 0.5)",
        value.len() >> 20,
        flint_rate / f64::from(1 << 20),
        raw_rate / f64::from(1 << 20),
        flint_rate / raw_rate
    );
}

criterion_group!(benches, broadcast);

fn main() {
    // Re-executed as raw TCP's reading end: that, and nothing else.
    serve_sink_if_asked();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
