//! Embedding flint: a driver program with its own task function, and the executor main
//! that runs it, in one binary.
//!
//! Run it with `cargo run --release --example word_count`. With no arguments it is the
//! driver program: it starts a driver, starts two copies of itself as executors (with
//! `executor --driver ADDR ...`, the arguments the local cluster manager passes), submits
//! a task set per stage, awaits the results and adds them up. Started with `executor`, it
//! is an executor main: flint's built-in task functions plus `word-count`.

use std::time::Duration;

use bytes::Bytes;
use flint::executor::{run_executor, ExecutorOptions, TaskContext, TaskError, TaskRegistry};
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
    let options = ExecutorOptions::new(
        option("--driver")?.parse()?,
        option("--executor-id")?,
        option("--hostname")?,
        option("--cores")?.parse()?,
    );
    let mut registry = TaskRegistry::with_builtins();
    registry.register("word-count", word_count)?;
    let exit = run_executor(&conf, options, registry);
    if exit.code() != 0 {
        eprintln!("word_count executor: {exit}");
    }
    std::process::exit(exit.code());
}

/// The driver program.
fn driver_main() -> Result<(), Box<dyn std::error::Error>> {
    let conf = Conf::new();
    let this_program = std::env::current_exe()?;
    let executors = LocalClusterManager::new(this_program, 2);
    let driver = Driver::start(&conf, Box::new(executors))?;
    driver.request_total_executors(2)?;
    driver.wait_for_executors(2, Duration::from_secs(30))?;
    println!(
        "driver at {}, executors {:?}",
        driver.address(),
        driver.executor_ids()
    );

    // One task per document, each with its own input.
    let mut task_set = TaskSet::new(0, 0, 0, Bytes::new());
    for (partition, document) in DOCUMENTS.iter().enumerate() {
        let payload = TaskPayload::encode("word-count", document.as_bytes())?;
        task_set
            .tasks
            .push(TaskSpec::new(partition as u32).with_payload(payload));
    }
    let outcome = driver.submit(task_set)?.wait(Duration::from_secs(60))?;
    let mut total = 0;
    for (document, count) in DOCUMENTS.iter().zip(&outcome.results) {
        let count: usize = std::str::from_utf8(count)?.parse()?;
        println!("{count:>3} words: {document}");
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
    driver.stop()?;
    Ok(())
}
