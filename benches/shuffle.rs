//! Jobs of stages as issue 21 measures them, each beside its baseline in the same run, on
//! one driver with 2 `flint executor` processes of 1 core started once for all of them
//! (`shuffle.maxMemory=1g`, so that the hash shuffle stays in memory):
//!
//! - `jobs_latency/one_task_job`: a task set of one noop task, from submission to its
//!   result at the driver;
//! - `jobs_latency/two_stage_tiny_job`: 2 `shuffle-write` map tasks of 4 records each,
//!   2 `shuffle-count` reduce partitions, from submission to result;
//! - then, from alternating blocks of ten back-to-back jobs of each kind, their p50s
//!   and the ratio (target: at most 5 x), and the tiny job's p50 right after a one-task
//!   job;
//! - a hash shuffle of 4 x 1,000,000 records of 100 B into 4 reduce partitions (counts
//!   checked), median of runs, in records/s and shuffle bytes/s, beside raw TCP's
//!   pipelined 4 KiB throughput between two processes (this bench binary re-executed as
//!   the reading end, `flint::bench::stream`) in alternating rounds (targets: 8 M
//!   records/s, a quarter of raw TCP's bytes/s);
//! - a word count of 8 x 2,000,000 words of a vocabulary of 10,000 into 4 reduce
//!   partitions (total checked), median of runs, in words/s (target: 30 M words/s).
//!
//! Criterion measures the latencies; the large jobs are timed as they are, median of
//! `FLINT_BENCH_RUNS` runs (5) after one that warms up. Sizes:
//! `FLINT_BENCH_SHUFFLE_RECORDS` (per map task), `FLINT_BENCH_WORDS` (per map task),
//! `FLINT_BENCH_LATENCY_SAMPLES` (1,000). Run by `cargo test --benches` (without
//! `--bench`) everything is tiny, to check that it works.
//!
//! `cargo bench --bench shuffle`; a quick check:
//! `FLINT_BENCH_SHUFFLE_RECORDS=50000 FLINT_BENCH_WORDS=100000 FLINT_BENCH_RUNS=1
//! FLINT_BENCH_LATENCY_SAMPLES=50 cargo bench --bench shuffle -- --quick`.

use std::path::Path;

use criterion::{criterion_group, Criterion};
use flint::bench::jobs::{
    jobs_conf, measure_latencies, measure_shuffle, measure_word_count, JobSizes, JobsReport,
};
use flint::bench::stream::{serve_sink_if_asked, RawStream, StreamPeer, STREAM_CHUNK};
use flint::bench::BenchCluster;

const FLINT: &str = env!("CARGO_BIN_EXE_flint");
const EXECUTORS: usize = 2;

fn sizes() -> JobSizes {
    // `cargo bench` passes --bench; `cargo test --benches` does not.
    let base = if std::env::args().any(|arg| arg == "--bench") {
        JobSizes::default()
    } else {
        JobSizes::smoke()
    };
    base.with_env().unwrap_or_else(|e| panic!("{e}"))
}

fn shuffle(c: &mut Criterion) {
    let sizes = sizes();
    let mut cluster =
        BenchCluster::start(Path::new(FLINT), &jobs_conf(), EXECUTORS, 1).expect("a cluster");
    let mut group = c.benchmark_group("jobs_latency");
    group.bench_function("one_task_job", |b| {
        b.iter_custom(|n| (0..n).map(|_| cluster.run_noop(1).expect("a job")).sum())
    });
    group.bench_function("two_stage_tiny_job", |b| {
        b.iter_custom(|n| (0..n).map(|_| cluster.run_tiny_job().expect("a job")).sum())
    });
    group.finish();

    let latency = measure_latencies(&mut cluster, sizes.latency_samples).expect("latencies");
    let program = std::env::current_exe().expect("this bench's path");
    let peer = StreamPeer::Process(program);
    let mut raw = RawStream::start(&peer, STREAM_CHUNK).expect("a raw TCP stream");
    let shuffle = measure_shuffle(&mut cluster, &sizes, &mut raw).expect("the hash shuffle");
    drop(raw);
    let word_count = measure_word_count(&mut cluster, &sizes).expect("the word count");
    cluster.stop().expect("the cluster stops");
    let report = JobsReport {
        sizes,
        executors: (EXECUTORS, 1),
        raw_peer: peer.describe(),
        latency,
        shuffle,
        word_count,
    };
    println!();
    print!("{}", report.to_table());
}

criterion_group!(benches, shuffle);

fn main() {
    // Re-executed as raw TCP's reading end: that, and nothing else.
    serve_sink_if_asked();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
