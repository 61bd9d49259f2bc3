//! Task launch as users measure it, beside its floors, in one run. Executors are real
//! `flint executor` processes started by the driver's local cluster manager, over
//! loopback.
//!
//! - `latency/raw_tcp_round_trip`: a blocking std::net ping-pong of a LaunchTask-sized
//!   frame out and a StatusUpdate-sized frame back (TCP_NODELAY), its two threads placed
//!   by the kernel. The floor in the ratios below is the faster of this and the same
//!   ping-pong with both threads pinned to one CPU (`flint::bench::BlockingFloor`: on a
//!   virtual machine a wake-up across CPUs can cost several times the round trip).
//! - `latency/raw_tcp_round_trip_busy_poll`: the same with both ends busy-polling
//!   (non-blocking reads, yielding between them): no thread sleeps, so no wake-up is in
//!   it. flint's threads busy-poll briefly before they sleep (`rpc.io.busyPoll`,
//!   `executor.busyPoll`), so its figures are set against this one too.
//! - `latency/one_task_job`: a task set of one noop task on one executor of one core,
//!   from submission to its result recorded at the driver.
//! - `throughput/strict`: a 100,000-task noop job on 2 executors of 1 core each, a task
//!   launched only on a free core (`executor.taskPrefetch=0`, the seeds' semantics).
//! - `throughput/pipelined`: the same with `executor.taskPrefetch=256`.
//! - `throughput/raw_strict`: the strict schedule over raw TCP, with no scheduler in it
//!   (`flint::bench::raw_strict`): a driver thread keeps one LaunchTask-sized frame out
//!   at each of 2 executor threads and sends the next as soon as the StatusUpdate-sized
//!   answer is in, all busy-polling. What loopback TCP allows that schedule on this
//!   machine, beside the free-core floor's arithmetic.
//! - beneath both, measured once (`flint::bench::loopback_cost`): the kernel's CPU time
//!   for one task's two loopback transfers in one thread, with no wait; the machine's
//!   CPUs doing only that bound any schedule that launches a task only on a free core.
//!
//! After criterion's figures it prints, from medians measured in the same run: the
//! one-task job latency over the floor round trip, the free-core floor (executor cores
//! divided by the floor round trip: the most a scheduler can launch when a task goes
//! only to a free core), and each throughput against it; the throughput without
//! pipelining also against the raw strict schedule and the loopback bound (only a
//! schedule without pipelining is bounded by a round trip per task).
//!
//! `cargo bench --bench task_launch` (about three minutes). `flint bench` prints the
//! same figures as a table.

use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flint::bench::{
    floor_round_trip, loopback_cost, raw_strict, round_trip, BenchCluster, FrameSizes, RawPingPong,
    Waiting,
};
use flint::rpc::Conf;

const FLINT: &str = env!("CARGO_BIN_EXE_flint");
const TASKS: u32 = 100_000;
const PREFETCH: u32 = 256;

fn conf(prefetch: u32) -> Conf {
    Conf::from_pairs([format!("executor.taskPrefetch={prefetch}")]).expect("a valid conf")
}

/// The median of `samples` one-task jobs, in nanoseconds.
fn median_job_latency(cluster: &mut BenchCluster, samples: usize) -> f64 {
    let mut times: Vec<Duration> = (0..samples)
        .map(|_| cluster.run_noop(1).expect("a one-task job"))
        .collect();
    times.sort_unstable();
    times[samples / 2].as_nanos() as f64
}

fn task_launch(c: &mut Criterion) {
    let frames = FrameSizes::of_noop_task();
    let mut group = c.benchmark_group("latency");
    let mut raw = RawPingPong::start(frames.launch, frames.status).expect("a loopback socket");
    group.bench_function("raw_tcp_round_trip", |b| {
        b.iter(|| raw.round_trip().expect("the raw server answers"))
    });
    drop(raw);
    let mut busy = RawPingPong::start_waiting(frames.launch, frames.status, Waiting::BusyPolling)
        .expect("a loopback socket");
    group.bench_function("raw_tcp_round_trip_busy_poll", |b| {
        b.iter(|| busy.round_trip().expect("the raw server answers"))
    });
    drop(busy);
    let mut one = BenchCluster::start(Path::new(FLINT), &conf(0), 1, 1).expect("a cluster");
    group.bench_function("one_task_job", |b| {
        b.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| one.run_noop(1).expect("a one-task job"))
                .sum()
        })
    });
    // The ratio, from medians taken now, one after the other.
    let blocking = floor_round_trip(frames, 5_000).expect("a loopback socket");
    let floor_ns = blocking.best().0 as f64;
    let (busy_ns, _) = round_trip(frames, 5_000, Waiting::BusyPolling).expect("a loopback socket");
    let busy_ns = busy_ns as f64;
    let job_ns = median_job_latency(&mut one, 2_000);
    one.stop().expect("the cluster stops");
    group.finish();

    let mut group = c.benchmark_group("throughput");
    group.throughput(Throughput::Elements(u64::from(TASKS)));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    let mut rates = Vec::new();
    for (name, prefetch) in [("strict", 0), ("pipelined", PREFETCH)] {
        let mut cluster =
            BenchCluster::start(Path::new(FLINT), &conf(prefetch), 2, 1).expect("a cluster");
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                (0..iterations)
                    .map(|_| cluster.run_noop(TASKS).expect("a job"))
                    .sum()
            })
        });
        let elapsed = cluster.run_noop(TASKS).expect("a job");
        rates.push((name, f64::from(TASKS) / elapsed.as_secs_f64()));
        cluster.stop().expect("the cluster stops");
    }
    let raw_rate = |tasks: u64| raw_strict(frames, 2, tasks).expect("loopback sockets");
    group.bench_function("raw_strict", |b| {
        b.iter_custom(|iterations| {
            (0..iterations)
                .map(|_| Duration::from_secs_f64(f64::from(TASKS) / raw_rate(u64::from(TASKS))))
                .sum()
        })
    });
    let raw_strict_tps = raw_rate(u64::from(TASKS));
    group.finish();
    let loopback_ns = loopback_cost(frames, 5_000).expect("loopback sockets") as f64;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu_bound_tps = cpus as f64 / (loopback_ns / 1e9);

    let floor_tps = 2.0 / (floor_ns / 1e9);
    let busy_tps = 2.0 / (busy_ns / 1e9);
    println!();
    println!(
        "floor round trip (raw TCP, median):   {:>10.1} us  (threads free {:.1} us, on one CPU {})",
        floor_ns / 1e3,
        blocking.free.0 as f64 / 1e3,
        blocking.one_cpu.map_or("-".to_owned(), |(p50, _)| format!(
            "{:.1} us",
            p50 as f64 / 1e3
        ))
    );
    println!(
        "busy-polling raw TCP round trip:      {:>10.1} us",
        busy_ns / 1e3
    );
    println!(
        "one-task job latency (median):        {:>10.1} us  = {:.2} x the floor, {:.2} x busy-polling",
        job_ns / 1e3,
        job_ns / floor_ns,
        job_ns / busy_ns
    );
    println!("free-core floor (2 cores / round trip): {floor_tps:>8.0} tasks/s (busy-polling {busy_tps:.0})");
    println!(
        "the strict schedule over raw TCP:     {raw_strict_tps:>10.0} tasks/s = {:.0}% of the free-core floor",
        100.0 * raw_strict_tps / floor_tps
    );
    println!(
        "loopback TCP work per task:           {:>10.1} us  ({cpus} CPUs doing only that: {cpu_bound_tps:.0} tasks/s)",
        loopback_ns / 1e3
    );
    for (name, rate) in rates {
        // Only a schedule without pipelining is bounded by a round trip per task, so
        // only the strict rate is compared with the strict bounds.
        let strict_bounds = if name == "strict" {
            format!(
                ", {:.0}% of the raw strict schedule, {:.0}% of the loopback bound",
                100.0 * rate / raw_strict_tps,
                100.0 * rate / cpu_bound_tps
            )
        } else {
            String::new()
        };
        println!(
            "{name:<10} 100,000 noop tasks:      {rate:>10.0} tasks/s = {:.0}% of the free-core floor, {:.0}% of busy-polling{strict_bounds}",
            100.0 * rate / floor_tps,
            100.0 * rate / busy_tps,
        );
    }
}

criterion_group!(benches, task_launch);
criterion_main!(benches);
