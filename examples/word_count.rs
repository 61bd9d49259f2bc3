//! Embedding flint: a word count of two stages with a shuffle between them, written as
//! a driver program with its own map and reduce functions, and the executor main that
//! runs them, in one binary.
//!
//! Run it with `cargo run --release --example word_count [FILE]`. With no `executor`
//! argument it is the driver program: it starts a driver and two copies of itself as
//! executors (with `executor --driver ADDR ...`, the arguments the local cluster manager
//! passes), and runs the job on the text of FILE, or on a text it makes:
//!
//! - map stage (`wc-split-count`, 4 tasks): each task counts the words of its split of
//!   the text, merging the counts of a word before they leave the task (a map-side
//!   combiner), and writes `(word, count)` records shuffled by word into 3 partitions;
//! - result stage (`wc-sum`, 3 tasks): each task sums the counts of its words, from
//!   every map output, and returns `word<TAB>count` lines.
//!
//! It checks the counts against a count made in the driver, and prints the most
//! frequent words. Started with `executor`, it is an executor main: flint's built-in
//! task functions plus `wc-split-count` and `wc-sum`.
//!
//! `cargo test` runs it too (it is a test target without a harness): a wrong count, a
//! failed job or an executor that does not register in time exits non-zero. Run that
//! way, its arguments are the test harness's (filters, flags) and it counts the text it
//! makes; run by `cargo run`, a FILE that cannot be read is an error.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use flint::executor::jobs::split_of;
use flint::executor::shuffle::Combiner;
use flint::executor::{run_executor, ExecutorConfig, TaskContext, TaskError, TaskRegistry};
use flint::rpc::Conf;
use flint::scheduler::{Driver, LocalClusterManager};

const MAPS: u32 = 4;
const REDUCES: u32 = 3;

/// The map function: counts the words of this task's split of the text and writes one
/// `(word, count)` record per word, shuffled by word. Its input is the number of map
/// tasks on the first line, then the whole text (small here; a real job would read a
/// split of a file, as the built-in `wordcount-map` does).
fn split_count(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    let newline = input
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(input.len());
    let maps: u32 = std::str::from_utf8(&input[..newline])
        .ok()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| TaskError::failed("the input starts with the number of map tasks"))?;
    let text = input.get(newline + 1..).unwrap_or_default();
    let mut counts = Combiner::new();
    for word in split_of(text, ctx.partition_id(), maps)
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty())
    {
        counts.add(word, 1u64, |total, one| *total += one);
    }
    counts.write_to(&mut *ctx.shuffle_writer()?, |count| count.to_le_bytes())?;
    // A map task's result is the status of its output; what it returns is not sent.
    Ok(Bytes::new())
}

/// The reduce function: sums the counts of this task's words from every map output.
fn sum(ctx: &TaskContext, _input: &Bytes) -> Result<Bytes, TaskError> {
    let shuffle = ctx.shuffle_reads()[0].shuffle_id;
    let records = ctx.read_shuffle(shuffle)?;
    let mut totals: BTreeMap<&[u8], u64> = BTreeMap::new();
    for record in records.keyed_records() {
        let (word, count) = record?;
        let count: [u8; 8] = count
            .try_into()
            .map_err(|_| TaskError::failed("a count is 8 bytes"))?;
        *totals.entry(word).or_default() += u64::from_le_bytes(count);
    }
    let mut lines = String::new();
    for (word, count) in totals {
        lines.push_str(&String::from_utf8_lossy(word));
        lines.push('\t');
        lines.push_str(&count.to_string());
        lines.push('\n');
    }
    Ok(Bytes::from(lines))
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // Shown as a sentence, where returning it from main would show its Debug form.
            eprintln!("word_count: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("executor") => executor_main(&args[1..]),
        Some(path) if !run_as_a_test() => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
            driver_main(text)
        }
        _ => driver_main(made_up_text()),
    }
}

/// Whether `cargo test` started this program, passing a test target's arguments (test
/// name filters, harness flags) that are no file to count. Cargo runs a test target from
/// its hashed file name, `word_count-HASH`, where `cargo run` runs `word_count`.
fn run_as_a_test() -> bool {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.file_stem()?.to_str()?.to_owned()))
        .and_then(|stem| {
            let hash = stem.strip_prefix("word_count-")?.to_owned();
            Some(hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .unwrap_or(false)
}

/// A text of a few thousand words with a skewed vocabulary.
fn made_up_text() -> String {
    let words = [
        "the",
        "driver",
        "schedules",
        "tasks",
        "onto",
        "long",
        "lived",
        "executor",
        "processes",
        "shuffle",
        "map",
        "reduce",
        "stage",
        "block",
        "flint",
    ];
    let mut text = String::new();
    for i in 0..5_000usize {
        // Word i % (1 + i % 15): early words come far more often.
        text.push_str(words[i % (1 + i % words.len())]);
        text.push(if i % 12 == 11 { '\n' } else { ' ' });
    }
    text
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
    registry.register("wc-split-count", split_count)?;
    registry.register("wc-sum", sum)?;
    let exit = run_executor(&conf, driver, config, registry);
    if exit.code() != 0 {
        eprintln!("word_count executor: {exit}");
    }
    std::process::exit(exit.code());
}

/// The driver program.
fn driver_main(text: String) -> Result<(), Box<dyn std::error::Error>> {
    // The job waits until both executors have registered (isReady), at most 30 s.
    let conf = Conf::from_pairs([
        "scheduler.minRegisteredResourcesRatio=1.0",
        "scheduler.maxRegisteredResourcesWaitingTime=30s",
    ])?;
    let this_program = std::env::current_exe()?;
    let driver = Driver::start(&conf, Box::new(LocalClusterManager::new(this_program, 2)))?;
    driver.request_total_executors(2)?;

    let mut job = driver.job("word count at examples/word_count.rs");
    let counts = job
        .stage("wc-split-count", MAPS, format!("{MAPS}\n{text}"))?
        .shuffle(REDUCES);
    let spec = job.reduce("wc-sum", &[counts], b"")?.result();
    let outcome = driver.submit_job(spec)?.wait(Duration::from_secs(60))?;

    let mut counted: HashMap<String, u64> = HashMap::new();
    for lines in &outcome.results {
        for line in std::str::from_utf8(lines)?.lines() {
            let (word, count) = line.split_once('\t').ok_or("a line is word<TAB>count")?;
            if counted.insert(word.to_owned(), count.parse()?).is_some() {
                return Err(format!("{word} was counted by two reduce tasks").into());
            }
        }
    }
    let mut expected: HashMap<String, u64> = HashMap::new();
    for word in text.split_whitespace() {
        *expected.entry(word.to_owned()).or_default() += 1;
    }
    if counted != expected {
        return Err("the job's counts differ from the driver's own".into());
    }
    let mut top: Vec<(&String, &u64)> = counted.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    println!(
        "{} words, {} distinct, in {:.1} ms ({} stages, {} shuffle bytes); most frequent:",
        counted.values().sum::<u64>(),
        counted.len(),
        outcome.elapsed.as_secs_f64() * 1e3,
        outcome.stats.stages.len(),
        outcome.stats.shuffle_bytes_written,
    );
    for (word, count) in top.iter().take(5) {
        println!("{count:>7}  {word}");
    }
    driver.stop()?;
    Ok(())
}
