//! Accumulators across real processes: a driver in this process, `flint executor`
//! processes on 127.0.0.1. Every task adds 1 to one long accumulator *before* it fails,
//! sleeps or crashes (the built-in `accumulate`), so that a driver that merged a failed,
//! killed or lost attempt, or a partition twice, would count more than the partitions.

mod common;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{most_outputs, AtMapStageEnd, OutputsByExecutor, FLINT};
use flint::rpc::Conf;
use flint::scheduler::dag::{JobSpec, StageSpec};
use flint::scheduler::{
    AccumulatorKind, AccumulatorValue, Driver, SchedulerEvent, SchedulerListener, TaskLocation,
    TaskSet, TaskSpec,
};
use flint::wire::{TaskPayload, TaskState};
use flint_testkit::process::Processes;

const PARTITIONS: u32 = 40;
/// Fails its first two attempts, on executor "b" (an attempt on "c" could be lost with
/// it instead).
const FAILS_TWICE: u32 = 3;
/// Sleeps 4 s in its first attempt, on executor "a": a speculative copy on another host
/// finishes first (a copy never runs on the host of its original).
const SLOW: u32 = 5;
/// Ends its executor's process ("c") in its first attempt.
const CRASHES: u32 = 7;
/// Holds its first attempt, on executor "b", for a second and until a speculative copy
/// arrives, ignoring kills; then both end successfully at once (the built-in's
/// `race`): the driver gets two successes of the partition and must merge one.
const RACES: u32 = 9;
/// Holds every attempt until the test has seen both of `RACES`'s attempts end, so that
/// the job is still open when the racing partition's second success arrives: were
/// `RACES` the last partition, its first success would end the job and the second would
/// find its task set gone and be dropped unseen.
const HOLDS: u32 = 11;
/// Executors, each on a host of its own name.
const EXECUTORS: [&str; 3] = ["a", "b", "c"];
const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// `flint executor` processes of 3 cores, each on a host of its own name, with `pairs`:
/// with one executor lost, the other two still run the racing, holding and slow
/// partitions and their copies at once.
fn spawn_executors(driver: &Driver, ids: &[&str], pairs: &[&str]) -> Processes {
    let mut processes = Processes(Vec::new());
    for id in ids {
        let mut command = Command::new(FLINT);
        command
            .args(["executor", "--driver", &driver.address().to_string()])
            .args(["--cores", "3", "--executor-id", id, "--hostname"])
            .arg(format!("host-{id}"));
        for pair in pairs {
            command.args(["--conf", pair]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        processes.0.push(child);
    }
    processes
}

#[derive(Default)]
struct Seen {
    speculative_launches: usize,
    failed: usize,
    killed: usize,
    counted: Vec<u32>,
    not_counted: usize,
    executors_removed: usize,
    partial_heartbeat_values: usize,
    /// Attempts of `RACES` ended.
    race_ends: usize,
    /// Created once both of `RACES`'s attempts ended: releases `HOLDS`.
    release: Option<std::path::PathBuf>,
}

#[derive(Clone, Default)]
struct Watch(Arc<Mutex<Seen>>);

impl SchedulerListener for Watch {
    fn on_event(&mut self, event: &SchedulerEvent) {
        let mut seen = self.0.lock().unwrap();
        match event {
            SchedulerEvent::TaskStart { speculative, .. } => {
                seen.speculative_launches += usize::from(*speculative);
            }
            SchedulerEvent::TaskEnd { state, index, .. } => {
                match state {
                    TaskState::Failed => seen.failed += 1,
                    TaskState::Killed => seen.killed += 1,
                    _ => {}
                }
                if *index == RACES {
                    seen.race_ends += 1;
                    if seen.race_ends == 2 {
                        if let Some(release) = &seen.release {
                            std::fs::write(release, b"").unwrap();
                        }
                    }
                }
            }
            SchedulerEvent::ExecutorRemoved { .. } => seen.executors_removed += 1,
            SchedulerEvent::ExecutorMetricsUpdate { updates, .. } => {
                seen.partial_heartbeat_values += updates
                    .iter()
                    .filter(|u| !u.accumulators.is_empty())
                    .count();
            }
            _ => {}
        }
    }

    fn on_task_accumulators(
        &mut self,
        _task_id: u64,
        partition: u32,
        _updates: &[flint::wire::AccumulatorUpdate],
        counted: bool,
    ) {
        let mut seen = self.0.lock().unwrap();
        if counted {
            seen.counted.push(partition);
        } else {
            seen.not_counted += 1;
        }
    }
}

/// How many times the faulty job runs at most before the test gives up on provoking its
/// races (a copy that succeeds as its original does, a crash before a copy runs).
const PROVOCATIONS: usize = 3;

#[test]
fn every_partition_adds_once_through_failures_speculation_and_a_lost_executor() {
    // Every run must count exactly; the faults it provokes are races a loaded host can
    // lose (the second of two successes KILLED by the driver's kill of it, say), so
    // the job runs again, with fresh executors, until one run has provoked them all.
    let mut missed = Vec::new();
    for run in 1..=PROVOCATIONS {
        let seen = run_the_faulty_job();
        match unprovoked(&seen) {
            None => return,
            Some(what) => {
                eprintln!("run {run}: {what}; running the job again");
                missed.push(what);
            }
        }
    }
    panic!("{PROVOCATIONS} runs did not provoke every fault: {missed:?}");
}

/// Which fault a run of the faulty job did not provoke, if any.
fn unprovoked(seen: &Seen) -> Option<&'static str> {
    // The faults did happen: two failures of one task, a lost executor, a speculative
    // copy of the slow task (its original killed, or finishing later uncounted).
    if seen.failed < 2 {
        return Some("fewer than two failed attempts");
    }
    if seen.executors_removed < 1 {
        return Some("no executor was lost");
    }
    if seen.speculative_launches < 1 {
        return Some("no speculative copy was launched");
    }
    // Two successes of a partition reached the driver, and one was shown and not
    // counted: the racing partition's, or the holding one's when its original and a
    // copy were released together (both can be; either may lose to the driver's kill of
    // the other attempt on a loaded host, and end KILLED instead).
    if seen.not_counted < 1 {
        return Some("no success was shown and not counted: the duplicate was not exercised");
    }
    // The racing first attempt held for heartbeats: they carried its partial value.
    if seen.partial_heartbeat_values < 1 {
        return Some("no heartbeat carried a partial value");
    }
    None
}

/// Runs the job of faulty partitions on a driver of its own and three fresh executor
/// processes; asserts that the accumulator counted each partition once; returns what the
/// listener saw.
fn run_the_faulty_job() -> Seen {
    let pairs = [
        "executor.heartbeatInterval=200ms",
        "network.timeout=20s",
        "speculation=true",
        "speculation.interval=50ms",
        "speculation.quantile=0.5",
        // Only a task held on purpose gets a copy, not one whose executor process was not
        // scheduled for a moment on a loaded host: `CRASHES`'s copy elsewhere could then
        // succeed before its original ran, and no executor would be lost. Less than
        // `RACES`'s hold of a second, so that `HOLDS` has its copy when it is released.
        "speculation.minTaskRuntime=500ms",
    ];
    let conf = Conf::from_pairs(pairs).unwrap();
    let driver = Driver::standalone(&conf).unwrap();
    // Names the directory the racing attempts meet in and the file that releases the
    // holding ones: its own per run.
    let nonce = u64::from(std::process::id()) << 24
        | u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_micros(),
        );
    let release = flint_executor::accumulate_release_file(nonce);
    let watch = Watch::default();
    watch.0.lock().unwrap().release = Some(release.clone());
    driver.add_listener(watch.clone());
    let counter = driver.register_accumulator("tasks", AccumulatorKind::Long);
    let other = driver.register_accumulator("untouched", AccumulatorKind::Double);
    let processes = spawn_executors(&driver, &EXECUTORS, &pairs);
    driver
        .wait_for_executors(EXECUTORS.len(), Duration::from_secs(30))
        .unwrap();
    let on = |id: &str| {
        [TaskLocation::Executor {
            host: format!("host-{id}").into(),
            executor_id: id.into(),
        }]
    };

    let id = counter.id;
    let payload =
        |extra: &str| TaskPayload::encode("accumulate", format!("{id}{extra}").as_bytes()).unwrap();
    let mut task_set = TaskSet::new(0, 0, PARTITIONS, payload(""));
    task_set.tasks[FAILS_TWICE as usize] = TaskSpec::new(FAILS_TWICE)
        .with_payload(payload(",fail-below=2"))
        .with_locations(on("b"));
    task_set.tasks[SLOW as usize] = TaskSpec::new(SLOW)
        .with_payload(payload(",sleep-first=4000"))
        .with_locations(on("a"));
    task_set.tasks[CRASHES as usize] = TaskSpec::new(CRASHES)
        .with_payload(payload(",exit-first=3"))
        .with_locations(on("c"));
    let race_dir = flint_executor::accumulate_race_dir(nonce);
    task_set.tasks[RACES as usize] = TaskSpec::new(RACES)
        .with_payload(payload(&format!(",race={nonce}")))
        .with_locations(on("b"));
    task_set.tasks[HOLDS as usize] = TaskSpec::new(HOLDS)
        .with_payload(payload(&format!(",hold={nonce}")))
        .with_locations(on("a"));
    let handle = driver.submit(task_set).unwrap();
    let outcome = handle.wait(JOB_TIMEOUT);
    let _ = std::fs::remove_dir_all(&race_dir);
    let _ = std::fs::remove_file(&release);
    let outcome = outcome.expect("the job succeeds");
    assert_eq!(outcome.results.len(), PARTITIONS as usize);

    // Exactly the number of partitions, whatever ran twice or failed on the way.
    assert_eq!(
        driver.accumulator_value(id),
        Some(AccumulatorValue::Long(i64::from(PARTITIONS)))
    );
    assert_eq!(
        driver.accumulator_value(other.id),
        Some(AccumulatorValue::double(0.0))
    );
    assert_eq!(driver.accumulator_value(999), None);

    // Taken out: a failed assertion below then leaves no poisoned lock to the listener.
    let seen = std::mem::take(&mut *watch.0.lock().unwrap());
    eprintln!(
        "{} failed, {} killed, {} speculative launches, {} executors removed, {} counted, \
         {} shown and not counted, {} partial values in heartbeats",
        seen.failed,
        seen.killed,
        seen.speculative_launches,
        seen.executors_removed,
        seen.counted.len(),
        seen.not_counted,
        seen.partial_heartbeat_values
    );
    // Listeners saw each partition counted once.
    let mut counted = seen.counted.clone();
    counted.sort_unstable();
    assert_eq!(counted, (0..PARTITIONS).collect::<Vec<_>>());
    driver.stop().unwrap();
    drop(processes);
    seen
}

/// A job of two stages whose map tasks each add 1, and an executor killed once the map
/// stage is done: the map stage is resubmitted for the outputs it held, and those map
/// partitions run (and add) again; the value is still the number of map partitions.
#[test]
fn a_map_stage_resubmitted_after_a_lost_executor_adds_nothing_more() {
    const MAPS: u32 = 12;
    const REDUCES: u32 = 3;
    let pairs = ["executor.heartbeatInterval=200ms", "network.timeout=20s"];
    let driver = Driver::standalone(&Conf::from_pairs(pairs).unwrap()).unwrap();
    let ids = ["a", "b"];
    let processes = Arc::new(Mutex::new(spawn_executors(&driver, &ids, &pairs)));
    driver
        .wait_for_executors(ids.len(), Duration::from_secs(30))
        .unwrap();
    let maps = driver.register_accumulator("map tasks", AccumulatorKind::Long);
    let killed: Arc<Mutex<Option<String>>> = Arc::default();
    // Once the map stage is done (before any task of the next is launched), the executor
    // that computed the most of its outputs is killed: the next stage's readers fail to
    // fetch them and the map stage is resubmitted for them.
    driver.add_listener(AtMapStageEnd::new({
        let (processes, killed) = (processes.clone(), killed.clone());
        move |outputs: &OutputsByExecutor| {
            let (victim, _) = most_outputs(outputs);
            let index = ids.iter().position(|id| *id == victim).unwrap();
            // SIGKILL: the process serves none of its map outputs any more.
            let _ = processes.lock().unwrap().0[index].kill();
            *killed.lock().unwrap() = Some(victim);
        }
    }));
    let watch = Watch::default();
    driver.add_listener(watch.clone());

    let shuffle = driver.new_shuffle_id();
    let map = StageSpec::new(
        "accumulate at tests/accumulators.rs",
        MAPS,
        TaskPayload::encode("accumulate", maps.id.to_string().as_bytes()).unwrap(),
    );
    let reduce = StageSpec::new(
        "shuffle-count at tests/accumulators.rs",
        REDUCES,
        TaskPayload::encode("shuffle-count", b"").unwrap(),
    )
    .reading([shuffle]);
    let job = JobSpec::new("accumulate", reduce).with_shuffle(shuffle, REDUCES, map);
    let outcome = driver
        .submit_job(job)
        .unwrap()
        .wait(JOB_TIMEOUT)
        .expect("the job succeeds");

    // Every reduce partition read one record of every map partition.
    for result in &outcome.results {
        let records = u64::from_le_bytes(result[..8].try_into().unwrap());
        assert_eq!(records, u64::from(MAPS));
    }
    assert!(killed.lock().unwrap().is_some(), "the map stage completed");
    assert!(
        outcome.stats.fetch_failures >= 1 && outcome.stats.stage_attempts >= 4,
        "the map stage was resubmitted: {:?}",
        outcome.stats
    );
    // Taken out: a failed assertion below then leaves no poisoned lock to the listener.
    let seen = std::mem::take(&mut *watch.0.lock().unwrap());
    eprintln!(
        "{:?}; {} counted, {} shown and not counted",
        outcome.stats,
        seen.counted.len(),
        seen.not_counted
    );
    // Map partitions ran again, and added again...
    assert!(seen.counted.len() + seen.not_counted > MAPS as usize);
    // ... and were merged once.
    assert_eq!(
        driver.accumulator_value(maps.id),
        Some(AccumulatorValue::Long(i64::from(MAPS)))
    );
    driver.stop().unwrap();
}
