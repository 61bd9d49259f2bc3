//! Accumulators through the pure task scheduler: random interleavings of launches,
//! successes, failures, kills, lost executors, duplicate reports, speculative copies and
//! stage resubmissions, every task adding 1. At every step the accumulator holds exactly
//! the number of partitions that succeeded so far: each merged once, never from a failed
//! or killed attempt. The same for a task set's job, which ends when its task set does
//! (a resubmission after that is a new job, counted afresh) but not on a fetch failure
//! (its resubmission under the same id merges no partition twice). Time is injected;
//! nothing sleeps.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_scheduler::{
    AccumulatorKind, AccumulatorValue, Action, ExecutorLossReason, SchedulerConfig, SchedulerEvent,
    SpeculationConfig, TaskEndReason, TaskScheduler, TaskSet, WorkerOffer, FIRST_JOB_ID,
};
use flint_wire::{
    AccumulatorUpdate, FetchFailure, TaskFailureKind, TaskMetrics, TaskOutcome, TaskState,
};
use proptest::prelude::*;

const HOSTS: usize = 3;
/// A job of stages (as the DAG scheduler submits them): a stage that could not fetch its
/// input is resubmitted under the same job.
const JOB: u32 = FIRST_JOB_ID;
const STAGE: u32 = FIRST_JOB_ID + 1;

#[derive(Debug, Clone)]
enum Op {
    /// Executor `k` (on host `k`) offers `cores`.
    Offer(usize, u32),
    /// A running attempt succeeds.
    Succeed(usize),
    /// A running attempt fails (counted).
    Fail(usize),
    /// A running attempt is killed.
    Kill(usize),
    /// A running attempt cannot fetch its input: its task set ends, to be resubmitted.
    FetchFail(usize),
    /// An attempt that succeeded reports its success again.
    Duplicate(usize),
    /// Time passes: speculation looks for slow tasks.
    Tick(u64),
    /// Executor `k` is lost with its running attempts.
    Lose(usize),
    /// The stage gets a new attempt of every partition (when no attempt of it is
    /// active), as after a lost map output.
    Resubmit,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..HOSTS, 1u32..4).prop_map(|(k, c)| Op::Offer(k, c)),
        4 => any::<usize>().prop_map(Op::Succeed),
        1 => any::<usize>().prop_map(Op::Fail),
        1 => any::<usize>().prop_map(Op::Kill),
        1 => any::<usize>().prop_map(Op::FetchFail),
        1 => any::<usize>().prop_map(Op::Duplicate),
        2 => (1u64..3000).prop_map(Op::Tick),
        1 => (0..HOSTS).prop_map(Op::Lose),
        1 => Just(Op::Resubmit),
    ]
}

fn adds_one(id: u64) -> TaskOutcome {
    TaskOutcome::Direct {
        value: Bytes::new(),
        metrics: TaskMetrics::default(),
        accumulators: vec![AccumulatorUpdate {
            id,
            name: None,
            value: AccumulatorValue::Long(1),
        }],
    }
}

fn failure() -> TaskOutcome {
    TaskOutcome::Failure {
        kind: TaskFailureKind::Exception,
        message: "boom".into(),
        counts_towards_failures: true,
        metrics: TaskMetrics::default(),
    }
}

fn fetch_failure() -> TaskOutcome {
    flint_testkit::outcome::fetch_failed(FetchFailure {
        address: None,
        shuffle_id: 0,
        map_index: Some(0),
        reduce_id: 0,
        message: "lost".into(),
    })
}

struct Run {
    job: u32,
    scheduler: TaskScheduler,
    now: Instant,
    id: u64,
    running: Vec<u64>,
    succeeded_attempts: Vec<u64>,
    attempt: u32,
    /// Partitions with an accepted success (a `TaskEnd` with `Success`) while their
    /// job was not ended, with the run of the job they succeeded in.
    succeeded: BTreeSet<(u32, u32)>,
    /// Partitions listeners saw counted, in order, with the run.
    counted: Vec<(u32, u32)>,
    /// A task set's job (id below `FIRST_JOB_ID`) ends when its task set completes or
    /// is aborted, not when it ends on a fetch failure (it runs again under its id);
    /// once ended, its resubmission is a new run whose partitions count again. A job of
    /// stages never ends here (its stage is not dropped).
    ended: bool,
    /// Runs of the job: resubmissions after it ended.
    runs: u32,
    /// The run each task was launched in: a straggler of an ended run (an attempt
    /// killed when its run ended, whose success still comes) is that run's, not the
    /// current one's.
    launched_in: std::collections::HashMap<u64, u32>,
    lost: [bool; HOSTS],
}

impl Run {
    fn new(partitions: u32) -> Run {
        Run::of_job(JOB, partitions)
    }

    fn of_job(job: u32, partitions: u32) -> Run {
        let now = Instant::now();
        let mut scheduler = TaskScheduler::new(SchedulerConfig {
            speculation: Some(SpeculationConfig::default()),
            ..SchedulerConfig::default()
        });
        let id = scheduler
            .accumulators_mut()
            .register("tasks", AccumulatorKind::Long)
            .id;
        scheduler
            .submit_tasks(now, TaskSet::new(job, STAGE, partitions, Bytes::new()))
            .unwrap();
        Run {
            job,
            scheduler,
            now,
            id,
            running: Vec::new(),
            succeeded_attempts: Vec::new(),
            attempt: 0,
            succeeded: BTreeSet::new(),
            counted: Vec::new(),
            ended: false,
            runs: 0,
            launched_in: std::collections::HashMap::new(),
            lost: [false; HOSTS],
        }
    }

    fn take(&mut self, i: usize) -> Option<u64> {
        if self.running.is_empty() {
            return None;
        }
        let at = i % self.running.len();
        Some(self.running.swap_remove(at))
    }

    fn apply(&mut self, op: &Op, partitions: u32) {
        let now = self.now;
        match *op {
            Op::Offer(k, cores) => {
                if self.lost[k] {
                    return;
                }
                let offer = [WorkerOffer::new(k.to_string(), format!("host-{k}"), cores)];
                let launched = self.scheduler.resource_offers(now, &offer);
                for task in launched.iter().flatten() {
                    self.running.push(task.task_id);
                    self.launched_in.insert(task.task_id, self.runs);
                }
            }
            Op::Succeed(i) => {
                if let Some(task_id) = self.take(i) {
                    let outcome = adds_one(self.id);
                    self.scheduler
                        .status_update(now, task_id, TaskState::Finished, outcome);
                    self.succeeded_attempts.push(task_id);
                }
            }
            Op::Fail(i) => {
                if let Some(task_id) = self.take(i) {
                    self.scheduler
                        .status_update(now, task_id, TaskState::Failed, failure());
                }
            }
            Op::Kill(i) => {
                if let Some(task_id) = self.take(i) {
                    self.scheduler
                        .status_update(now, task_id, TaskState::Killed, failure());
                }
            }
            Op::FetchFail(i) => {
                if let Some(task_id) = self.take(i) {
                    self.scheduler
                        .status_update(now, task_id, TaskState::Failed, fetch_failure());
                }
            }
            Op::Duplicate(i) => {
                if !self.succeeded_attempts.is_empty() {
                    let task_id = self.succeeded_attempts[i % self.succeeded_attempts.len()];
                    let outcome = adds_one(self.id);
                    self.scheduler
                        .status_update(now, task_id, TaskState::Finished, outcome);
                }
            }
            Op::Tick(ms) => {
                self.now += Duration::from_millis(ms);
                self.scheduler.handle_timeout(self.now);
            }
            Op::Lose(k) => {
                if !std::mem::replace(&mut self.lost[k], true) {
                    let reason = ExecutorLossReason::SlaveLost {
                        message: "gone".into(),
                        worker_lost: false,
                    };
                    let lost: Vec<u64> = self.scheduler.running_tasks_on(&k.to_string()).collect();
                    self.scheduler.executor_lost(now, &k.to_string(), reason);
                    self.running.retain(|t| !lost.contains(t));
                }
            }
            Op::Resubmit => {
                let active = self
                    .scheduler
                    .task_sets()
                    .any(|m| m.id().stage_id == STAGE && !m.is_zombie());
                if !active {
                    self.attempt += 1;
                    let task_set = TaskSet::new(self.job, STAGE, partitions, Bytes::new())
                        .with_attempt(self.attempt);
                    self.scheduler.submit_tasks(now, task_set).unwrap();
                    if std::mem::replace(&mut self.ended, false) {
                        self.runs += 1;
                    }
                }
            }
        }
        for action in self.scheduler.drain_actions() {
            match action {
                Action::Event(SchedulerEvent::TaskEnd {
                    task_id,
                    index,
                    reason: TaskEndReason::Success(_),
                    ..
                }) if !self.ended && self.launched_in.get(&task_id) == Some(&self.runs) => {
                    // TaskSet::new: the task of index i computes partition i.
                    self.succeeded.insert((self.runs, index));
                }
                Action::Event(SchedulerEvent::TaskAccumulators {
                    partition, counted, ..
                }) if counted => self.counted.push((self.runs, partition)),
                Action::Event(SchedulerEvent::JobEnd { job_id, .. })
                    if job_id < FIRST_JOB_ID && !matches!(op, Op::FetchFail(_)) =>
                {
                    self.ended = true;
                }
                _ => {}
            }
        }
    }
}

// proptest's own configuration: 256 cases, or PROPTEST_CASES (as
// scripts/property-hunt sets it).
proptest! {
    #[test]
    fn each_partition_that_succeeded_is_merged_exactly_once(
        partitions in 1u32..12,
        ops in proptest::collection::vec(op(), 1..200),
        task_set_job in any::<bool>(),
    ) {
        let job = if task_set_job { 7 } else { JOB };
        let mut run = Run::of_job(job, partitions);
        for op in &ops {
            run.apply(op, partitions);
            let value = run.scheduler.accumulators().value(run.id).cloned();
            prop_assert_eq!(
                value,
                Some(AccumulatorValue::Long(run.succeeded.len() as i64)),
                "after {:?}", op
            );
        }
        let mut counted = run.counted.clone();
        counted.sort_unstable();
        counted.dedup();
        prop_assert_eq!(counted.len(), run.counted.len(), "a partition counted twice");
        prop_assert_eq!(counted, run.succeeded.iter().copied().collect::<Vec<_>>());
    }
}

/// An interleaving the proptest is after, spelled out: a partition merged from its first
/// attempt is not merged again when the stage is resubmitted and runs it again, nor on a
/// duplicate report of its success.
#[test]
fn a_resubmitted_stage_and_a_duplicate_report_add_nothing_more() {
    // A job of stages, and a task set's job (its task set's fetch failure ends the job
    // for the task scheduler, but it goes on under the same id).
    for job in [JOB, 7] {
        resubmitted_stage_and_duplicate_report_add_nothing_more(job);
    }
}

fn resubmitted_stage_and_duplicate_report_add_nothing_more(job: u32) {
    let mut run = Run::of_job(job, 2);
    run.apply(&Op::Offer(0, 2), 2);
    run.apply(&Op::Succeed(0), 2);
    // The other cannot read its input: the stage is resubmitted with both partitions.
    run.apply(&Op::FetchFail(0), 2);
    assert!(run.running.is_empty());
    assert_eq!(run.succeeded.len(), 1);
    run.apply(&Op::Resubmit, 2);
    run.apply(&Op::Offer(1, 2), 2);
    assert_eq!(run.running.len(), 2);
    run.apply(&Op::Succeed(0), 2);
    run.apply(&Op::Succeed(0), 2);
    assert_eq!(run.succeeded.len(), 2);
    assert_eq!(
        run.scheduler.accumulators().value(run.id),
        Some(&AccumulatorValue::Long(2))
    );
    // A late duplicate report of the first success: nothing more.
    run.apply(&Op::Duplicate(0), 2);
    assert_eq!(
        run.scheduler.accumulators().value(run.id),
        Some(&AccumulatorValue::Long(2))
    );
}

/// A heartbeat's partial values are shown to listeners and never merged; the value
/// comes from the task's result alone.
#[test]
fn partial_values_from_heartbeats_are_progress_only() {
    let mut run = Run::new(1);
    run.apply(&Op::Offer(0, 1), 1);
    let task_id = run.running[0];
    let partial = flint_wire::TaskAccumUpdates {
        task_id,
        metrics: TaskMetrics::default(),
        accumulators: vec![AccumulatorUpdate {
            id: run.id,
            name: None,
            value: AccumulatorValue::Long(7),
        }],
    };
    assert!(run
        .scheduler
        .executor_heartbeat_received("0", vec![partial]));
    let shown = run.scheduler.drain_actions().any(|action| {
        matches!(
            action,
            Action::Event(SchedulerEvent::ExecutorMetricsUpdate { ref updates, .. })
                if updates[0].accumulators[0].value == AccumulatorValue::Long(7)
        )
    });
    assert!(shown, "listeners see the partial value");
    assert_eq!(
        run.scheduler.accumulators().value(run.id),
        Some(&AccumulatorValue::Long(0))
    );
    run.apply(&Op::Succeed(0), 1);
    assert_eq!(
        run.scheduler.accumulators().value(run.id),
        Some(&AccumulatorValue::Long(1))
    );
}

/// The interleaving CI's proptest found, spelled out: a task set's job ends while a
/// speculative copy of its last partition still runs, and is submitted again under its
/// id. The copy's late success belongs to the ended run: it is not merged into the new
/// run's partition of the same index.
#[test]
fn a_straggler_of_an_ended_run_adds_nothing_to_the_job_s_next_run() {
    let mut run = Run::of_job(7, 2);
    run.apply(&Op::Offer(0, 2), 2);
    run.apply(&Op::Succeed(0), 2);
    // Partition 1 is slow: past the speculation interval it gets a copy.
    run.apply(&Op::Tick(2_000), 2);
    run.apply(&Op::Offer(1, 1), 2);
    assert_eq!(
        run.running.len(),
        2,
        "the original and its speculative copy"
    );
    // The original succeeds: the job ends, its copy still running.
    let original = run.running[0];
    run.apply(&Op::Succeed(0), 2);
    assert!(run.ended);
    assert_eq!(run.running.len(), 1);
    assert_ne!(run.running[0], original);
    assert_eq!(
        run.scheduler.accumulators().value(run.id),
        Some(&AccumulatorValue::Long(2))
    );
    // Job 7 again: a new run. Then the old copy reports its success.
    run.apply(&Op::Resubmit, 2);
    run.apply(&Op::Succeed(0), 2);
    assert_eq!(
        run.scheduler.accumulators().value(run.id),
        Some(&AccumulatorValue::Long(2)),
        "the straggler was merged into the new run"
    );
    assert_eq!(run.counted, [(0, 0), (0, 1)]);
    // The new run's own partitions count, each once.
    run.apply(&Op::Offer(2, 2), 2);
    run.apply(&Op::Succeed(0), 2);
    run.apply(&Op::Succeed(0), 2);
    assert_eq!(
        run.scheduler.accumulators().value(run.id),
        Some(&AccumulatorValue::Long(4))
    );
    assert_eq!(run.counted, [(0, 0), (0, 1), (1, 0), (1, 1)]);
}
