//! Embedding flint: a driver program with its own task function, and the executor main
//! that runs it, in one binary.
//!
//! Run it with `cargo run --release --example word_count`. With no arguments it is the
//! driver program: it starts a driver, starts two copies of itself as executors (with
//! `executor --driver ADDR ...`, the arguments the local cluster manager passes), submits
//! a task set per stage once both have registered, awaits the results, adds them up and
//! checks them against a count made here. Started with `executor`, it is an executor
//! main: flint's built-in task functions plus `word-count`.
//!
//! `cargo test` runs it too (it is a test target without a harness): a failed check, a
//! failed job or an executor that does not register in time exits non-zero.

use std::time::Duration;

use bytes::Bytes;
use flint::executor::{run_executor, ExecutorConfig, TaskContext, TaskError, TaskRegistry};
use flint::rpc::Conf;
use flint::scheduler::{Driver, LocalClusterManager, TaskSet, TaskSpec};
use flint::wire::TaskPayload;

const DOCUMENTS: &[&str] = &[
    "the quick brown fox jumps over the lazy dog",
    "a driver schedules tasks onto long-lived executor processes",
    "each task here counts the words of one document",
    "flint",
];

/// The task function: counts the words of its input (the document).
fn word_count(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    let text = std::str::from_utf8(input).map_err(|e| TaskError::failed(e.to_string()))?;
    ctx.add_input_bytes(input.len() as u64);
    Ok(Bytes::from(text.split_whitespace().count().to_string()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("executor") => executor_main(&args[1..]),
        // Anything else, e.g. the arguments `cargo test` passes a test target.
        _ => driver_main(),
    }
}

/// The executor main: the options the local cluster manager passes, and this program's
/// own task functions.
fn executor_main(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let option = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .ok_or_else(|| format!("missing {name}"))
    };
    let mut conf_pairs = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        if arg == "--conf" {
            conf_pairs.extend(args.get(i + 1).cloned());
        }
    }
    let conf = Conf::from_pairs(conf_pairs.iter().map(String::as_str))?;
    let driver = option("--driver")?.parse()?;
    let config = ExecutorConfig::from_conf(
        &conf,
        option("--executor-id")?,
        option("--hostname")?,
        option("--cores")?.parse()?,
    )?;
    let mut registry = TaskRegistry::with_builtins();
    registry.register("word-count", word_count)?;
    let exit = run_executor(&conf, driver, config, registry);
    if exit.code() != 0 {
        eprintln!("word_count executor: {exit}");
    }
    std::process::exit(exit.code());
}

/// The driver program.
fn driver_main() -> Result<(), Box<dyn std::error::Error>> {
    // The first submission waits until both executors have registered (isReady), at
    // most 30 s.
    let conf = Conf::from_pairs([
        "scheduler.minRegisteredResourcesRatio=1.0",
        "scheduler.maxRegisteredResourcesWaitingTime=30s",
    ])?;
    let this_program = std::env::current_exe()?;
    let executors = LocalClusterManager::new(this_program, 2);
    let driver = Driver::start(&conf, Box::new(executors))?;
    driver.request_total_executors(2)?;

    // One task per document, each with its own input.
    let mut task_set = TaskSet::new(0, 0, 0, Bytes::new());
    for (partition, document) in DOCUMENTS.iter().enumerate() {
        let payload = TaskPayload::encode("word-count", document.as_bytes())?;
        task_set
            .tasks
            .push(TaskSpec::new(partition as u32).with_payload(payload));
    }
    let outcome = driver.submit(task_set)?.wait(Duration::from_secs(60))?;
    println!(
        "driver at {}, executors {:?}",
        driver.address(),
        driver.executor_ids()
    );
    let mut total = 0;
    for (document, count) in DOCUMENTS.iter().zip(&outcome.results) {
        let count: usize = std::str::from_utf8(count)?.parse()?;
        println!("{count:>3} words: {document}");
        if count != document.split_whitespace().count() {
            return Err(format!("wrong count {count} for {document:?}").into());
        }
        total += count;
    }
    println!("{total} words in {} documents", DOCUMENTS.len());

    // A second job, with a built-in function, on the same executors.
    let echoes = driver
        .submit(TaskSet::new(
            1,
            1,
            100,
            TaskPayload::encode("echo", b"hello")?,
        ))?
        .wait(Duration::from_secs(60))?;
    println!(
        "{} echoes, task latency p50 {:.1} us",
        echoes.results.len(),
        echoes.latency.p50_us
    );
    if echoes.results.len() != 100 || echoes.results.iter().any(|r| &r[..] != b"hello") {
        return Err("the echoes are not all \"hello\"".into());
    }
    driver.stop()?;
    Ok(())
}
