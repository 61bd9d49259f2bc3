//! Jobs of stages across real processes: a driver in this process, `flint executor`
//! processes on 127.0.0.1, shuffles between them over real sockets.
//!
//! Faults are injected at one deterministic point: a listener acts when the job's map
//! stage completes, in the driver's turn that submits the reduce stage, before any
//! reduce task is launched (listeners run before the turn's later outputs, and the
//! launches are among them).

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{conf, most_outputs, spawn_executor, AtMapStageEnd, OutputsByExecutor, FLINT};
use flint::executor::jobs::{count_words, generated_text};
use flint::rpc::{Conf, RpcEnv};
use flint::scheduler::cluster_manager::SECRET_ENV;
use flint::scheduler::dag::{JobSpec, StageSpec};
use flint::scheduler::{Driver, SchedulerEvent, SchedulerListener, TaskEndReason, TaskSetId};
use flint::wire::{Message, TaskPayload, BLOCK_MANAGER_ENDPOINT, MAP_OUTPUT_TRACKER_ENDPOINT};
use flint_testkit::process::{proc_status_bytes, Processes};

const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// A job of two stages built with the driver's lower-level API (the bench and the CLI use
/// the job builder): `maps` tasks of `map_fn` on `input` writing a new shuffle into
/// `reduces` partitions, which `reduces` tasks of `reduce_fn` read.
fn two_stage_job(
    driver: &Driver,
    name: &str,
    (map_fn, input): (&str, &str),
    maps: u32,
    reduce_fn: &str,
    reduces: u32,
) -> JobSpec {
    let shuffle = driver.new_shuffle_id();
    let map = StageSpec::new(
        format!("{map_fn} at tests/shuffle.rs"),
        maps,
        TaskPayload::encode(map_fn, input.as_bytes()).unwrap(),
    );
    let reduce = StageSpec::new(
        format!("{reduce_fn} at tests/shuffle.rs"),
        reduces,
        TaskPayload::encode(reduce_fn, b"").unwrap(),
    )
    .reading([shuffle]);
    JobSpec::new(name, reduce).with_shuffle(shuffle, reduces, map)
}

/// A word count job: `maps` map tasks generating `words` words each from a vocabulary
/// of `vocabulary`, `reduces` reduce partitions.
fn word_count(
    driver: &Driver,
    maps: u32,
    reduces: u32,
    words: u64,
    vocabulary: u64,
    seed: u64,
) -> JobSpec {
    let input = format!("gen:{words}:{vocabulary}:{seed}");
    two_stage_job(
        driver,
        "word count",
        ("wordcount-map", &input),
        maps,
        "wordcount-reduce",
        reduces,
    )
}

/// What the job must find, counted here.
fn expected_counts(maps: u32, words: u64, vocabulary: u64, seed: u64) -> BTreeMap<String, u64> {
    let mut total = BTreeMap::new();
    for partition in 0..maps {
        let text = generated_text(partition, words, vocabulary, seed);
        let mut counts = std::collections::HashMap::new();
        count_words(&text, &mut counts);
        for (word, count) in counts {
            *total
                .entry(String::from_utf8(word.to_vec()).unwrap())
                .or_insert(0) += count;
        }
    }
    total
}

/// The counts of the reduce tasks' `word<TAB>count` lines; a word twice is an error.
fn counts_of(results: &[bytes::Bytes]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for result in results {
        for line in std::str::from_utf8(result).unwrap().lines() {
            let (word, count) = line.split_once('\t').unwrap();
            let previous = counts.insert(word.to_owned(), count.parse().unwrap());
            assert!(previous.is_none(), "{word} counted by two reduce tasks");
        }
    }
    counts
}

const MIB: u64 = 1 << 20;

/// The `shuffle-write` / `shuffle-count` job: `maps` map tasks writing `records`
/// records of `size` bytes each, `reduces` reduce tasks counting theirs.
fn shuffle_job(
    driver: &Driver,
    maps: u32,
    reduces: u32,
    records: u64,
    size: u64,
    seed: u64,
) -> JobSpec {
    let input = format!("{records}:{size}:{seed}");
    two_stage_job(
        driver,
        "shuffle",
        ("shuffle-write", &input),
        maps,
        "shuffle-count",
        reduces,
    )
}

/// The (records, bytes) each `shuffle-count` task counted: 16 bytes, two u64 LE.
fn record_counts(results: &[bytes::Bytes]) -> Vec<(u64, u64)> {
    results
        .iter()
        .map(|result| {
            assert_eq!(result.len(), 16, "a shuffle-count result");
            let number = |at: usize| u64::from_le_bytes(result[at..at + 8].try_into().unwrap());
            (number(0), number(8))
        })
        .collect()
}

/// A directory under the system's temporary directory (executors' `local.dir`s, their
/// logs), removed with all in it when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let path = std::env::temp_dir().join(format!(
            "flint-test-{name}-{}-{nanos:x}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    /// `name` under it, made now.
    fn subdir(&self, name: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::create_dir_all(&path).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The spill files an executor made under its `local.dir` (in its own
/// `flint-shuffle-<executor>-<pid>-<nonce>` directory), with their sizes.
fn spill_files(local_dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut files = Vec::new();
    for dir in std::fs::read_dir(local_dir).unwrap().flatten() {
        if !dir
            .file_name()
            .to_string_lossy()
            .starts_with("flint-shuffle-")
        {
            continue;
        }
        for file in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = file.file_name().to_string_lossy().into_owned();
            if name.starts_with("spill-") && name.ends_with(".data") {
                files.push((file.path(), file.metadata().map_or(0, |m| m.len())));
            }
        }
    }
    files
}

/// `local.dir=<dir>`, for an executor's `--conf`.
fn local_dir_conf(dir: &Path) -> String {
    format!("local.dir={}", dir.display())
}

/// Every event the driver reports, in order.
#[derive(Clone, Default)]
struct EventLog(Arc<Mutex<Vec<SchedulerEvent>>>);

impl SchedulerListener for EventLog {
    fn on_event(&mut self, event: &SchedulerEvent) {
        self.0.lock().unwrap().push(event.clone());
    }
}

impl EventLog {
    /// The number of tasks of each attempt of `stage_id` submitted, by attempt.
    fn attempts_of(&self, stage_id: u32) -> BTreeMap<u32, u32> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|event| match event {
                SchedulerEvent::StageSubmitted {
                    task_set,
                    num_tasks,
                    ..
                } if task_set.stage_id == stage_id => Some((task_set.stage_attempt_id, *num_tasks)),
                _ => None,
            })
            .collect()
    }

    /// The successful tasks, as (stage attempt, executor).
    fn successes(&self) -> Vec<(TaskSetId, String)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|event| match event {
                SchedulerEvent::TaskEnd {
                    task_set,
                    executor_id,
                    reason: TaskEndReason::Success(_),
                    ..
                } => Some((*task_set, executor_id.to_string())),
                _ => None,
            })
            .collect()
    }

    fn removed(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter_map(|event| match event {
                SchedulerEvent::ExecutorRemoved { executor_id, .. } => {
                    Some(executor_id.to_string())
                }
                _ => None,
            })
            .collect()
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// A word count of 1,000,000 generated words (4 map tasks of 250,000) over two executor
/// processes finds what a count made here finds.
#[test]
fn a_word_count_over_two_executors_counts_every_word_once() {
    let conf = conf(&[]);
    let driver = Driver::standalone(&conf).unwrap();
    let _executors = Processes(
        (1..=2)
            .map(|i| spawn_executor(driver.address(), &i.to_string(), &[], Stdio::inherit()))
            .collect(),
    );
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    let (maps, reduces, words, vocabulary, seed) = (4, 3, 250_000, 5_000, 42);
    let outcome = driver
        .submit_job(word_count(&driver, maps, reduces, words, vocabulary, seed))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert_eq!(outcome.results.len(), reduces as usize);
    let counts = counts_of(&outcome.results);
    assert_eq!(counts.values().sum::<u64>(), u64::from(maps) * words);
    assert_eq!(counts, expected_counts(maps, words, vocabulary, seed));
    assert_eq!(outcome.stats.stages.len(), 2);
    assert_eq!(outcome.stats.stage_attempts, 2);
    assert_eq!(outcome.stats.fetch_failures, 0);
    assert!(outcome.stats.shuffle_bytes_written > 0);
    driver.stop().unwrap();
}

/// An executor killed with SIGKILL once the map stage has finished, before any reduce
/// task is launched: its map outputs die with it, the reduce stage cannot fetch them,
/// the map stage recomputes exactly those on the executor left (a standalone driver has
/// no cluster manager to replace the lost one), and every word is still counted once.
#[test]
fn an_executor_killed_after_the_map_stage_has_its_outputs_recomputed_and_counts_stay_exact() {
    let conf = conf(&[]);
    let driver = Driver::standalone(&conf).unwrap();
    let executors = Arc::new(Mutex::new(Processes(
        (1..=2)
            .map(|i| spawn_executor(driver.address(), &i.to_string(), &[], Stdio::inherit()))
            .collect(),
    )));
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    let log = EventLog::default();
    driver.add_listener(log.clone());
    let killed: Arc<Mutex<Option<(String, u32)>>> = Arc::default();
    driver.add_listener(AtMapStageEnd::new({
        let (executors, killed) = (executors.clone(), killed.clone());
        move |outputs: &OutputsByExecutor| {
            let (victim, held) = most_outputs(outputs);
            let index = victim.parse::<usize>().unwrap() - 1;
            // Child::kill is SIGKILL: the process runs nothing more.
            executors.lock().unwrap().0[index].kill().unwrap();
            *killed.lock().unwrap() = Some((victim, held));
        }
    }));

    let (maps, reduces, words, vocabulary, seed) = (4, 3, 250_000, 5_000, 7);
    let outcome = driver
        .submit_job(word_count(&driver, maps, reduces, words, vocabulary, seed))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    let counts = counts_of(&outcome.results);
    assert_eq!(counts.values().sum::<u64>(), u64::from(maps) * words);
    assert_eq!(counts, expected_counts(maps, words, vocabulary, seed));

    let (victim, held) = killed
        .lock()
        .unwrap()
        .clone()
        .expect("the map stage completed");
    let survivor = if victim == "1" { "2" } else { "1" };
    let index = victim.parse::<usize>().unwrap() - 1;
    let status = executors.lock().unwrap().0[index].wait().unwrap();
    assert_eq!(status.signal(), Some(9), "{victim} was killed: {status}");
    assert!(log.removed().contains(&victim), "{:?}", log.removed());
    // Map stage, reduce stage, the map stage again for the lost outputs, the reduce
    // stage again.
    let map_stage = outcome.stats.stages[0];
    assert_eq!(outcome.stats.stages.len(), 2);
    assert!(outcome.stats.stage_attempts >= 4, "{:?}", outcome.stats);
    assert!(outcome.stats.fetch_failures >= 1, "{:?}", outcome.stats);
    let attempts = log.attempts_of(map_stage);
    assert_eq!(attempts[&0], maps);
    assert_eq!(
        attempts[&1], held,
        "the second attempt recomputes the {held} outputs {victim} held"
    );
    // Everything after the kill ran on the survivor: the recomputed maps and every
    // reduce task that succeeded.
    for (task_set, executor) in log.successes() {
        if task_set.stage_id != map_stage || task_set.stage_attempt_id > 0 {
            assert_eq!(executor, survivor, "{task_set} succeeded on {executor}");
        }
    }
    driver.stop().unwrap();
}

/// Map outputs spilled to disk (a tiny `shuffle.maxMemory`), and one executor's spill
/// files deleted once the map stage has finished, before any reduce task is launched:
/// reads of those blocks fail (spill files are opened per read), the readers end
/// FetchFailed, the DAG scheduler unregisters that executor's outputs and resubmits the
/// map stage for them, then the reduce stage; every word is still counted once.
#[test]
fn spill_files_deleted_under_a_running_job_fail_fetches_and_the_lost_outputs_are_recomputed() {
    let dirs = TempDir::new("deleted-spill");
    let locals: Vec<PathBuf> = (1..=2)
        .map(|i| dirs.subdir(&format!("executor-{i}")))
        .collect();
    let driver = Driver::standalone(&conf(&[])).unwrap();
    let _executors = Processes(
        (1..=2)
            .map(|i| {
                let local = local_dir_conf(&locals[i - 1]);
                let conf = ["shuffle.maxMemory=16k", local.as_str()];
                spawn_executor(driver.address(), &i.to_string(), &conf, Stdio::inherit())
            })
            .collect(),
    );
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    let log = EventLog::default();
    driver.add_listener(log.clone());
    let deleted: Arc<Mutex<Option<(String, u32, usize)>>> = Arc::default();
    driver.add_listener(AtMapStageEnd::new({
        let (locals, deleted) = (locals.clone(), deleted.clone());
        move |outputs: &OutputsByExecutor| {
            let (victim, held) = most_outputs(outputs);
            let local = &locals[victim.parse::<usize>().unwrap() - 1];
            let files = spill_files(local);
            for (file, _) in &files {
                std::fs::remove_file(file).unwrap();
            }
            *deleted.lock().unwrap() = Some((victim, held, files.len()));
        }
    }));

    let (maps, reduces, words, vocabulary, seed) = (4, 3, 250_000, 5_000, 11);
    let outcome = driver
        .submit_job(word_count(&driver, maps, reduces, words, vocabulary, seed))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    let counts = counts_of(&outcome.results);
    assert_eq!(counts.values().sum::<u64>(), u64::from(maps) * words);
    assert_eq!(counts, expected_counts(maps, words, vocabulary, seed));

    let (victim, held, files) = deleted
        .lock()
        .unwrap()
        .clone()
        .expect("the map stage completed");
    assert!(files > 0, "{victim}'s map outputs were spilled");
    assert!(outcome.stats.fetch_failures >= 1, "{:?}", outcome.stats);
    assert!(outcome.stats.stage_attempts > 2, "{:?}", outcome.stats);
    let attempts = log.attempts_of(outcome.stats.stages[0]);
    assert_eq!(
        attempts[&1], held,
        "the second map attempt recomputes the {held} outputs of {victim}"
    );
    assert!(log.removed().is_empty(), "no executor was lost");
    driver.stop().unwrap();
}

/// Reduce partitions of about 10 MiB under `rpc.message.maxSize=1m`: each remote block
/// (about 5 MiB) comes in chunks of less than a message, cut inside records of 100,003
/// bytes, with `reducer.maxSizeInFlight=2m` outstanding at most, from memory and from
/// spill files (`shuffle.maxMemory=4m`); every record arrives whole, once.
#[test]
fn a_reduce_partition_larger_than_the_message_limit_is_fetched_in_chunks() {
    let dirs = TempDir::new("chunked");
    let locals: Vec<PathBuf> = (1..=2)
        .map(|i| dirs.subdir(&format!("executor-{i}")))
        .collect();
    let limits = ["rpc.message.maxSize=1m", "reducer.maxSizeInFlight=2m"];
    let driver = Driver::standalone(&conf(&limits)).unwrap();
    let _executors = Processes(
        (1..=2)
            .map(|i| {
                let local = local_dir_conf(&locals[i - 1]);
                let mut conf = limits.to_vec();
                conf.extend(["shuffle.maxMemory=4m", local.as_str()]);
                spawn_executor(driver.address(), &i.to_string(), &conf, Stdio::inherit())
            })
            .collect(),
    );
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    let log = EventLog::default();
    driver.add_listener(log.clone());

    let (maps, reduces, records, size) = (2, 2, 100, 100_003);
    let outcome = driver
        .submit_job(shuffle_job(&driver, maps, reduces, records, size, 5))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    let counted = record_counts(&outcome.results);
    assert_eq!(
        counted.iter().map(|(records, _)| records).sum::<u64>(),
        u64::from(maps) * records
    );
    for &(records, bytes) in &counted {
        assert_eq!(bytes, records * size, "whole records only");
        assert!(
            bytes > 4 * MIB,
            "{bytes} bytes: well over rpc.message.maxSize"
        );
    }
    // One map task on each executor: every reduce task fetched a block from the other.
    let map_stage = outcome.stats.stages[0];
    let mut ran: Vec<String> = log
        .successes()
        .into_iter()
        .filter(|(task_set, _)| task_set.stage_id == map_stage)
        .map(|(_, executor)| executor)
        .collect();
    ran.sort();
    assert_eq!(ran, ["1", "2"]);
    for local in &locals {
        assert!(
            !spill_files(local).is_empty(),
            "part of the blocks came from files"
        );
    }
    assert_eq!(outcome.stats.stage_attempts, 2);
    assert_eq!(outcome.stats.fetch_failures, 0);
    driver.stop().unwrap();
}

/// Keyed records (a word count with a vocabulary large enough that a map output's block
/// is several chunks) fetched in chunks under `rpc.message.maxSize=1m`: a chunk may end
/// anywhere, and no key is parted from its value.
#[test]
fn keyed_blocks_fetched_in_chunks_keep_keys_with_their_values() {
    let limits = ["rpc.message.maxSize=1m"];
    let driver = Driver::standalone(&conf(&limits)).unwrap();
    let _executors = Processes(
        (1..=2)
            .map(|i| spawn_executor(driver.address(), &i.to_string(), &limits, Stdio::inherit()))
            .collect(),
    );
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    let (maps, reduces, words, vocabulary, seed) = (2, 2, 400_000, 300_000, 3);
    let outcome = driver
        .submit_job(word_count(&driver, maps, reduces, words, vocabulary, seed))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    assert!(
        outcome.stats.shuffle_bytes_written > 4 * MIB,
        "{} bytes: blocks of several chunks",
        outcome.stats.shuffle_bytes_written
    );
    assert_eq!(
        counts_of(&outcome.results),
        expected_counts(maps, words, vocabulary, seed)
    );
    assert_eq!(outcome.stats.fetch_failures, 0);
    driver.stop().unwrap();
}

/// `flint executor` with `authenticate=true` and its secret from the cluster manager's
/// environment variable, or from its configuration.
fn spawn_authenticated_executor(
    driver: SocketAddr,
    executor_id: &str,
    secret: &str,
    from_env: bool,
    stderr: Stdio,
) -> Child {
    let mut command = Command::new(FLINT);
    command
        .args(["executor", "--driver", &driver.to_string(), "--cores", "1"])
        .args(["--executor-id", executor_id])
        .args(["--conf", "authenticate=true"]);
    if from_env {
        command.env(SECRET_ENV, secret);
    } else {
        command.args(["--conf", &format!("authenticate.secret={secret}")]);
    }
    command
        .env_remove("FLINT_LOG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

/// With authentication on, executors (one given the secret by the cluster manager's
/// environment variable, one by its configuration) run a word count among themselves;
/// then a peer without the secret (authentication off, or a wrong secret) asks an
/// executor's block server for a block and gets none: its connection is refused, while a
/// peer with the secret gets the block before and after. The executor logs the refusals
/// and nothing worse.
#[test]
fn with_authentication_on_a_peer_without_the_secret_gets_no_block() {
    const SECRET: &str = "correct horse battery staple";
    let secret = format!("authenticate.secret={SECRET}");
    let dirs = TempDir::new("authenticated");
    let logs: Vec<PathBuf> = (1..=2)
        .map(|i| dirs.0.join(format!("executor-{i}.log")))
        .collect();
    let driver = Driver::standalone(&conf(&["authenticate=true", &secret])).unwrap();
    let _executors = Processes(
        (1..=2)
            .map(|i| {
                let log = std::fs::File::create(&logs[i - 1]).unwrap();
                let id = i.to_string();
                spawn_authenticated_executor(driver.address(), &id, SECRET, i == 1, log.into())
            })
            .collect(),
    );
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    let (maps, reduces, words, vocabulary, seed) = (4, 3, 250_000, 5_000, 3);
    let job = word_count(&driver, maps, reduces, words, vocabulary, seed);
    let shuffle_id = job.shuffles[0].shuffle_id;
    let outcome = driver.submit_job(job).unwrap().wait(JOB_TIMEOUT).unwrap();
    assert_eq!(
        counts_of(&outcome.results),
        expected_counts(maps, words, vocabulary, seed)
    );

    // A friend, with the secret, learns from the driver where a block is.
    let ask_timeout = Duration::from_secs(10);
    let friend =
        RpcEnv::client(&Conf::from_pairs(["authenticate=true", &secret]).unwrap()).unwrap();
    let reply = friend
        .handle()
        .endpoint_ref(driver.address(), MAP_OUTPUT_TRACKER_ENDPOINT)
        .ask_timeout(&Message::GetMapOutputStatuses { shuffle_id }, ask_timeout)
        .unwrap()
        .to_message();
    let Message::MapOutputStatuses { statuses, .. } = reply else {
        panic!("the tracker answered {reply:?}");
    };
    let (map_index, status) = statuses
        .iter()
        .enumerate()
        .find_map(|(map, status)| Some((map as u32, status.clone()?)))
        .expect("the job's map outputs are registered");
    let location = &status.location;
    let server: SocketAddr = (location.host.as_str(), location.port)
        .to_socket_addrs()
        .unwrap()
        .min_by_key(SocketAddr::is_ipv6)
        .unwrap();
    let ask = Message::FetchShuffleBlock {
        shuffle_id,
        map_index,
        reduce_id: 0,
        offset: 0,
        max_len: 1 << 20,
    };
    let fetch = |env: &RpcEnv| {
        env.handle()
            .endpoint_ref(server, BLOCK_MANAGER_ENDPOINT)
            .ask_timeout(&ask, ask_timeout)
            .map(|reply| reply.to_message())
    };
    let friend_gets_the_block = || match fetch(&friend).unwrap() {
        Message::ShuffleBlock {
            offset: 0,
            total_size,
            data,
        } => {
            assert_eq!(total_size, status.sizes[0]);
            assert_eq!(data.len() as u64, total_size);
        }
        other => panic!("the block server answered {other:?}"),
    };
    friend_gets_the_block();

    for (stranger, expected) in [
        (
            vec!["authenticate=false"],
            "authentication failed: expected AuthChallenge, got FetchShuffleBlock",
        ),
        (
            vec!["authenticate=true", "authenticate.secret=Tr0ub4dor&3"],
            "authentication failed: the peer's proof does not match the shared secret",
        ),
    ] {
        let env = RpcEnv::client(&Conf::from_pairs(&stranger).unwrap()).unwrap();
        match fetch(&env) {
            Ok(message) => panic!("a stranger ({stranger:?}) got {message:?}"),
            Err(e) => assert!(e.to_string().contains(expected), "{stranger:?}: {e}"),
        }
        env.stop();
    }
    friend_gets_the_block();
    friend.stop();

    // What the asked executor logged: the refusals, nothing worse.
    let executor = location.executor_id.to_string();
    let text = std::fs::read_to_string(&logs[executor.parse::<usize>().unwrap() - 1]).unwrap();
    eprintln!("executor {executor}'s log:\n{text}");
    assert!(text.lines().count() >= 1, "the refusal is logged");
    assert!(
        text.lines()
            .all(|line| line.contains("WARN") && line.contains("authentication failed")),
        "{text}"
    );
    driver.stop().unwrap();
}

/// Shuffling far more than the executors' in-memory bound keeps their resident memory
/// near it: two executors with `shuffle.maxMemory=16m` shuffle about 210 MB (8 map tasks
/// of 6,400 records of 4 KiB, 32 reduce partitions).
///
/// The bound, on an executor's peak resident memory (the kernel's VmHWM) over its idle
/// resident memory (measured once registered, about 10 MiB for a debug build):
/// - until the map stage completes: `shuffle.maxMemory` + 8 MiB, for a growing bucket's
///   copy and the allocator's slack (measured: under 1 MiB);
/// - over the whole job: `shuffle.maxMemory` + 24 MiB, as the outputs kept in memory
///   stay while the reduce stage runs, and a reduce task holds its partition whole
///   (`shuffle-count` reads it at once: about 6.3 MiB), the block server has chunks in
///   flight to the other executor, and the allocator keeps some of what is freed
///   (measured: about 14 MiB).
///
/// Without spilling, each executor would hold about 100 MiB. Everything beyond the bound
/// must be in spill files when the map stage completes.
#[test]
fn shuffling_far_more_than_the_memory_bound_keeps_executor_memory_near_it_and_spills_the_rest() {
    const MAX_MEMORY: u64 = 16 * MIB;
    const MAP_STAGE_OVERHEAD: u64 = 8 * MIB;
    const JOB_OVERHEAD: u64 = 24 * MIB;
    let dirs = TempDir::new("memory");
    let locals: Vec<PathBuf> = (1..=2)
        .map(|i| dirs.subdir(&format!("executor-{i}")))
        .collect();
    let driver = Driver::standalone(&conf(&[])).unwrap();
    let executors = Processes(
        (1..=2)
            .map(|i| {
                let local = local_dir_conf(&locals[i - 1]);
                let conf = ["shuffle.maxMemory=16m", local.as_str()];
                spawn_executor(driver.address(), &i.to_string(), &conf, Stdio::inherit())
            })
            .collect(),
    );
    let pids: Vec<u32> = executors.0.iter().map(Child::id).collect();
    driver.wait_for_executors(2, REGISTER_TIMEOUT).unwrap();
    let idle: Vec<(u64, u64)> = pids
        .iter()
        .map(|&pid| {
            (
                proc_status_bytes(pid, "VmRSS"),
                proc_status_bytes(pid, "VmHWM"),
            )
        })
        .collect();
    // Peak and current resident memory, and bytes in spill files, of each executor when
    // the map stage completes.
    let at_map_end: Arc<Mutex<Vec<(u64, u64, u64)>>> = Arc::default();
    driver.add_listener(AtMapStageEnd::new({
        let (pids, locals, at_map_end) = (pids.clone(), locals.clone(), at_map_end.clone());
        move |_: &OutputsByExecutor| {
            *at_map_end.lock().unwrap() = pids
                .iter()
                .zip(&locals)
                .map(|(&pid, local)| {
                    let spilled = spill_files(local).iter().map(|(_, len)| len).sum();
                    (
                        proc_status_bytes(pid, "VmHWM"),
                        proc_status_bytes(pid, "VmRSS"),
                        spilled,
                    )
                })
                .collect();
        }
    }));

    let started = Instant::now();
    let (maps, reduces, records, size) = (8, 32, 6_400, 4_096);
    let outcome = driver
        .submit_job(shuffle_job(&driver, maps, reduces, records, size, 11))
        .unwrap()
        .wait(JOB_TIMEOUT)
        .unwrap();
    let counted = record_counts(&outcome.results);
    let total_records = u64::from(maps) * records;
    assert_eq!(counted.iter().map(|c| c.0).sum::<u64>(), total_records);
    assert_eq!(
        counted.iter().map(|c| c.1).sum::<u64>(),
        total_records * size
    );
    let peaks: Vec<u64> = pids
        .iter()
        .map(|&pid| proc_status_bytes(pid, "VmHWM"))
        .collect();
    let written = outcome.stats.shuffle_bytes_written;
    let at_map_end = at_map_end.lock().unwrap().clone();
    eprintln!(
        "shuffled {:.1} MiB in {:.1} s with shuffle.maxMemory={} MiB",
        mib(written),
        started.elapsed().as_secs_f64(),
        mib(MAX_MEMORY)
    );
    for i in 0..2 {
        let (idle_rss, idle_hwm) = idle[i];
        let (map_hwm, map_rss, spilled) = at_map_end[i];
        eprintln!(
            "executor {}: idle {:.1} MiB (peak {:.1}), map stage peak {:.1} MiB, after it {:.1} MiB, \
             job peak {:.1} MiB, spilled {:.1} MiB",
            i + 1,
            mib(idle_rss),
            mib(idle_hwm),
            mib(map_hwm),
            mib(map_rss),
            mib(peaks[i]),
            mib(spilled)
        );
        let bound = idle_rss + MAX_MEMORY + MAP_STAGE_OVERHEAD;
        assert!(map_hwm <= bound, "executor {}: {map_hwm} > {bound}", i + 1);
        let bound = idle_rss + MAX_MEMORY + JOB_OVERHEAD;
        assert!(
            peaks[i] <= bound,
            "executor {}: {} > {bound}",
            i + 1,
            peaks[i]
        );
        assert!(spilled > 0, "executor {} spilled", i + 1);
    }
    let spilled: u64 = at_map_end.iter().map(|m| m.2).sum();
    assert!(
        spilled >= written - 2 * MAX_MEMORY,
        "{spilled} of {written} bytes spilled"
    );
    driver.stop().unwrap();
}

/// `--json`'s `executors` and `total_cores` of a job of stages are those registered when
/// the job started: an executor that joins on the way (here, one started once the map
/// stage is done, waited for until it registered) is not counted.
#[test]
fn a_stages_report_counts_the_executors_of_the_job_s_start_not_those_that_join_later() {
    use flint::job::{local_cluster, JobHooks};
    use flint::stages::{run_stages, StagesSpec, Workload};
    use std::io::BufRead;

    let conf = conf(&[]);
    let spec = StagesSpec {
        executors: 1,
        cores: 1,
        maps: Some(2),
        reduces: Some(2),
        workload: Workload::Shuffle {
            records: 1000,
            record_size: 100,
        },
        startup_timeout: REGISTER_TIMEOUT,
        job_timeout: JOB_TIMEOUT,
    };
    let driver_address = std::cell::Cell::new(None);
    let mut listening = |address: SocketAddr| driver_address.set(Some(address));
    let hooks = JobHooks {
        listening: Some(&mut listening),
        ..JobHooks::default()
    };
    let mut late = Processes(Vec::new());
    let mut joined = false;
    let mut on_stage = |line: &str| {
        if joined || !line.contains("done") {
            return;
        }
        let address = driver_address.get().expect("the driver listens");
        let mut child = Command::new(FLINT)
            .args(["executor", "--driver", &address.to_string(), "--cores", "3"])
            .args(["--executor-id", "late"])
            .env("FLINT_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        late.0.push(child);
        // Bounded: the executor exits (its stderr ends) if it cannot register.
        joined = stderr
            .lines()
            .map_while(Result::ok)
            .take(1000)
            .any(|line| line.contains("Successfully registered with driver"));
    };
    let report = run_stages(
        &conf,
        &spec,
        Box::new(local_cluster(FLINT, 1, &conf)),
        hooks,
        &mut on_stage,
    )
    .unwrap();
    assert!(joined, "the late executor registered during the job");
    assert_eq!((report.executors, report.total_cores), (1, 1));
}
