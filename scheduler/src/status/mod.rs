//! What the driver's status page, JSON API and metrics show: [`StatusSnapshot`], a
//! picture of the driver taken at most every publishing interval, and [`StatusBook`], the
//! pure state machine that keeps what the page shows beyond what the driver core holds
//! (jobs, stages and executors that ended, counters, the latency histogram, the task
//! rate over time).
//!
//! The book is fed the scheduler's events (one counter or two per task end, no
//! allocation) and ticked with `now` by the publisher ([`crate::Driver::publish_status`]),
//! which alone builds snapshots. Readers (the HTTP server's thread) only ever clone an
//! `Arc` of the last snapshot: a page polled ten times a second costs the driver nothing
//! beyond the publisher's tick.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flint_rpc::RpcStats;
use flint_wire::SharedStr;

use crate::core::driver_core::{CoreView, ExecutorView};
use crate::core::events::{JobResult, SchedulerEvent, TaskEndReason};
use crate::core::fx_hash::FxHashMap;
use crate::core::task_set::TaskSetId;

#[cfg(test)]
mod tests;

/// Jobs kept once ended (Spark's `spark.ui.retainedJobs` is 1000): older ones are
/// dropped from the page, not from the counters.
pub const RETAINED_JOBS: usize = 500;
/// Stage attempts kept once ended.
pub const RETAINED_STAGES: usize = 1000;
/// Executors kept once removed.
pub const RETAINED_DEAD_EXECUTORS: usize = 100;
/// The window of the rates and percentiles the page shows.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Seconds of task rate history the throughput chart draws.
pub const HISTORY_SECS: usize = 300;

/// Upper bounds of the latency histogram's buckets, in nanoseconds: ten a decade from
/// 1 µs to 100 s (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8), fine enough for percentiles
/// within a quarter; a last bucket takes the rest.
pub const LATENCY_BOUNDS_NS: [u64; 81] = latency_bounds();

const fn latency_bounds() -> [u64; 81] {
    // In hundredths of the decade's base.
    const STEPS: [u64; 10] = [100, 125, 150, 200, 250, 300, 400, 500, 600, 800];
    let mut bounds = [0u64; 81];
    let mut decade = 0;
    let mut base = 1_000u64; // 1 µs
    while decade < 8 {
        let mut step = 0;
        while step < 10 {
            bounds[decade * 10 + step] = base / 100 * STEPS[step];
            step += 1;
        }
        base *= 10;
        decade += 1;
    }
    bounds[80] = base; // 100 s
    bounds
}

/// Counts of task latencies (launch at the driver to result at the driver) per bucket
/// of [`LATENCY_BOUNDS_NS`], the last one past the largest bound, with their sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Latencies per bucket (not cumulative), `LATENCY_BOUNDS_NS.len() + 1` of them.
    pub counts: Vec<u64>,
    /// The sum of the latencies, in nanoseconds.
    pub sum_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            counts: vec![0; LATENCY_BOUNDS_NS.len() + 1],
            sum_ns: 0,
        }
    }
}

impl LatencyHistogram {
    /// Counts one latency.
    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        let bucket = LATENCY_BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.counts[bucket] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Latencies counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Latencies counted at or under `bound_ns`, which must be one of the bounds.
    pub fn count_at_most(&self, bound_ns: u64) -> u64 {
        let buckets = LATENCY_BOUNDS_NS.partition_point(|&bound| bound <= bound_ns);
        self.counts[..buckets].iter().sum()
    }

    /// What `self` counted since `earlier` (an older copy of the same histogram).
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        LatencyHistogram {
            counts: self
                .counts
                .iter()
                .zip(&earlier.counts)
                .map(|(now, then)| now.saturating_sub(*then))
                .collect(),
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
        }
    }

    /// The latency under which a fraction `q` of those counted fall, interpolated within
    /// its bucket; `None` if none were counted.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
        let mut below = 0u64;
        for (bucket, &count) in self.counts.iter().enumerate() {
            if count > 0 && (below + count) as f64 >= rank {
                let low = if bucket == 0 {
                    0
                } else {
                    LATENCY_BOUNDS_NS[bucket - 1]
                };
                let Some(&high) = LATENCY_BOUNDS_NS.get(bucket) else {
                    // Past the largest bound: all that is known is its lower end.
                    return Some(Duration::from_nanos(low));
                };
                let within = (rank - below as f64) / count as f64;
                let ns = low as f64 + (high - low) as f64 * within;
                return Some(Duration::from_nanos(ns as u64));
            }
            below += count;
        }
        None
    }
}

/// Where a job or stage is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Submitted, not ended.
    Running,
    /// Ended well.
    Succeeded,
    /// Ended failed (aborted, cancelled).
    Failed,
}

impl Phase {
    /// Spark's REST API word for it (`RUNNING`, `SUCCEEDED`, `FAILED`).
    pub fn job_word(self) -> &'static str {
        match self {
            Phase::Running => "RUNNING",
            Phase::Succeeded => "SUCCEEDED",
            Phase::Failed => "FAILED",
        }
    }

    /// Spark's REST API word for a stage in it (`ACTIVE`, `COMPLETE`, `FAILED`).
    pub fn stage_word(self) -> &'static str {
        match self {
            Phase::Running => "ACTIVE",
            Phase::Succeeded => "COMPLETE",
            Phase::Failed => "FAILED",
        }
    }
}

/// A job, as the page shows it. Times are since the driver started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStatus {
    /// Its id.
    pub job_id: u32,
    /// Where it is.
    pub phase: Phase,
    /// Why it failed.
    pub failure: Option<String>,
    /// When it started.
    pub submitted: Duration,
    /// When it ended.
    pub completed: Option<Duration>,
    /// Its stage ids, in the order they were submitted.
    pub stage_ids: Vec<u32>,
    /// Tasks of its stage attempts.
    pub num_tasks: u32,
    /// Task attempts of it that succeeded (first successes).
    pub completed_tasks: u32,
    /// Task attempts of it that failed.
    pub failed_tasks: u32,
    /// Task attempts of it running now.
    pub active_tasks: u32,
    /// Stage attempts that ended well.
    pub completed_stages: u32,
    /// Stage attempts that failed.
    pub failed_stages: u32,
}

/// A stage attempt (a task set), as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageStatus {
    /// The stage attempt.
    pub id: TaskSetId,
    /// Its job.
    pub job_id: u32,
    /// Its task set's name (`TaskSet_3.0`), once seen open.
    pub name: String,
    /// Its pool, once seen open.
    pub pool: String,
    /// Where it is.
    pub phase: Phase,
    /// Why it failed.
    pub failure: Option<String>,
    /// Its tasks.
    pub num_tasks: u32,
    /// Tasks that succeeded.
    pub completed_tasks: u32,
    /// Attempts that failed.
    pub failed_tasks: u32,
    /// Attempts running now.
    pub active_tasks: u32,
    /// When it was submitted.
    pub submitted: Duration,
    /// When it ended.
    pub completed: Option<Duration>,
}

/// An executor, live or removed, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorStatus {
    /// Its id.
    pub id: String,
    /// Its host.
    pub host: String,
    /// Its cores.
    pub cores: u32,
    /// Whether it is registered now.
    pub active: bool,
    /// Why it was removed.
    pub removed_reason: Option<String>,
    /// Free cores and prefetch slots (0 once removed).
    pub free_slots: u32,
    /// Task attempts running on it.
    pub running_tasks: u32,
    /// Task attempts that succeeded on it.
    pub completed_tasks: u64,
    /// Task attempts that failed on it.
    pub failed_tasks: u64,
    /// The time its tasks took, launch to result, in all.
    pub task_time: Duration,
    /// How long ago it was last heard from.
    pub since_heartbeat: Option<Duration>,
    /// Whether its connection is backlogged (no offers until it drains).
    pub backlogged: bool,
    /// When it registered, since the driver started.
    pub added: Duration,
}

/// Counters over the driver's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Task attempts that succeeded (first successes and duplicates).
    pub tasks_succeeded: u64,
    /// Task attempts that failed, were killed or lost.
    pub tasks_failed: u64,
    /// Jobs started.
    pub jobs_started: u64,
    /// Jobs that ended well.
    pub jobs_succeeded: u64,
    /// Jobs that failed.
    pub jobs_failed: u64,
    /// Stage attempts submitted.
    pub stages_submitted: u64,
    /// Stage attempts that ended well.
    pub stages_completed: u64,
    /// Stage attempts that failed.
    pub stages_failed: u64,
    /// Executors registered.
    pub executors_added: u64,
    /// Executors removed.
    pub executors_removed: u64,
}

impl Totals {
    /// Task attempts that ended.
    pub fn tasks_finished(&self) -> u64 {
        self.tasks_succeeded + self.tasks_failed
    }
}

/// Rates and percentiles over the last [`WINDOW`] (or since the driver started, if
/// that is shorter).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowStats {
    /// How long the window actually is.
    pub span: Duration,
    /// Task attempts that ended in it.
    pub tasks: u64,
    /// Task attempts ended per second over it.
    pub tasks_per_sec: f64,
    /// Latency percentiles of the tasks that ended in it.
    pub p50: Option<Duration>,
    /// 90th percentile.
    pub p90: Option<Duration>,
    /// 99th percentile.
    pub p99: Option<Duration>,
}

/// A picture of the driver, published at most every publishing interval.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusSnapshot {
    /// How long the driver had run when it was taken.
    pub uptime: Duration,
    /// Snapshots taken before this one (it changes with every tick: a reader can tell
    /// a new one).
    pub sequence: u64,
    /// Jobs, newest first (the open ones and the last [`RETAINED_JOBS`] ended).
    pub jobs: Vec<JobStatus>,
    /// Stage attempts, newest first.
    pub stages: Vec<StageStatus>,
    /// Executors, live ones first, by id.
    pub executors: Vec<ExecutorStatus>,
    /// Counters over the driver's life.
    pub totals: Totals,
    /// Task latencies over the driver's life.
    pub latency: LatencyHistogram,
    /// The last minute's rates and percentiles.
    pub window: WindowStats,
    /// Task attempts ended in each of the last seconds, oldest first (at most
    /// [`HISTORY_SECS`]).
    pub throughput: Vec<u64>,
    /// Cores of the registered executors.
    pub total_cores: u32,
    /// Task attempts running.
    pub running_tasks: u32,
    /// Executors asked for and not registered yet.
    pub pending_executors: u32,
    /// Executor failures counted (`executor.maxNumFailures`).
    pub executor_failures: u32,
    /// Why the driver gave up on executors, if it has.
    pub failure: Option<String>,
    /// The transport's counters.
    pub transport: RpcStats,
}

/// One second's mark: the counters then, to take differences from.
#[derive(Debug, Clone)]
struct Mark {
    at: Instant,
    finished: u64,
    latency: LatencyHistogram,
}

#[derive(Debug)]
struct ExecutorRecord {
    status: ExecutorStatus,
}

/// Counts `key` among the ended records kept, oldest first in `ended`, and forgets
/// from `records` the oldest ones past `retained`.
fn retire<K: Eq + std::hash::Hash, V>(
    ended: &mut VecDeque<K>,
    records: &mut FxHashMap<K, V>,
    key: K,
    retained: usize,
) {
    ended.push_back(key);
    while ended.len() > retained {
        if let Some(old) = ended.pop_front() {
            records.remove(&old);
        }
    }
}

/// Forgets the record of `key` if it ended (`ended` says), and takes `key` out of the
/// ended ones kept: a task set's job or stage attempt id used again once its record
/// ended is a new record, which [`retire`] must not drop when the old one grows old.
fn reopen<K: Eq + std::hash::Hash, V>(
    ended_keys: &mut VecDeque<K>,
    records: &mut FxHashMap<K, V>,
    key: &K,
    ended: impl Fn(&V) -> bool,
) {
    if records.get(key).is_some_and(ended) {
        records.remove(key);
        ended_keys.retain(|kept| kept != key);
    }
}

/// What the page shows beyond the driver core: see the module docs. A pure state
/// machine: events in, `now` passed in, snapshots out.
#[derive(Debug)]
pub struct StatusBook {
    start: Instant,
    sequence: u64,
    jobs: FxHashMap<u32, JobStatus>,
    /// Ended jobs, oldest first, to drop the oldest past [`RETAINED_JOBS`].
    ended_jobs: VecDeque<u32>,
    stages: FxHashMap<TaskSetId, StageStatus>,
    ended_stages: VecDeque<TaskSetId>,
    executors: FxHashMap<SharedStr, ExecutorRecord>,
    dead_executors: VecDeque<SharedStr>,
    totals: Totals,
    latency: LatencyHistogram,
    /// One mark a second over the last [`WINDOW`], oldest first.
    marks: VecDeque<Mark>,
    /// Task attempts ended in each whole second, oldest first.
    history: VecDeque<u64>,
    /// Task ends counted per task set and executor, not yet added to their stage, job
    /// and executor records: at most [`OPEN_TALLIES`].
    tallies: Vec<TaskTally>,
}

/// The most tallies of task ends kept open; one more settles them all.
const OPEN_TALLIES: usize = 8;

/// Task ends of one task set on one executor, counted together: a driver ends tasks of
/// a few task sets on a few executors over and over, and three map lookups per task were
/// a tenth of a pipelined driver's work per task. Added to the records before anything
/// reads or changes them.
#[derive(Debug)]
struct TaskTally {
    task_set: TaskSetId,
    executor_id: SharedStr,
    succeeded: u32,
    failed: u32,
    first_successes: u32,
    task_time: Duration,
}

impl TaskTally {
    fn of(&self, task_set: TaskSetId, executor_id: &SharedStr) -> bool {
        self.task_set == task_set
            && (Arc::ptr_eq(&self.executor_id, executor_id) || self.executor_id == *executor_id)
    }
}

impl StatusBook {
    /// An empty book for a driver that started at `start`.
    pub fn new(start: Instant) -> Self {
        let mut marks = VecDeque::new();
        marks.push_back(Mark {
            at: start,
            finished: 0,
            latency: LatencyHistogram::default(),
        });
        StatusBook {
            start,
            sequence: 0,
            jobs: FxHashMap::default(),
            ended_jobs: VecDeque::new(),
            stages: FxHashMap::default(),
            ended_stages: VecDeque::new(),
            executors: FxHashMap::default(),
            dead_executors: VecDeque::new(),
            totals: Totals::default(),
            latency: LatencyHistogram::default(),
            marks,
            history: VecDeque::new(),
            tallies: Vec::with_capacity(OPEN_TALLIES),
        }
    }

    fn since_start(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.start)
    }

    /// Takes one of the scheduler's events. `now` is read only for job, stage and
    /// executor events: a task's end needs none (its latency travels with it).
    pub fn on_event(&mut self, now: impl FnOnce() -> Instant, event: &SchedulerEvent) {
        // Before anything that creates, changes or retires a record the tallies count
        // into; the events the book ignores leave them open (a listener that asks for
        // task starts gets one after almost every task end).
        if !matches!(
            event,
            SchedulerEvent::TaskEnd { .. }
                | SchedulerEvent::TaskStart { .. }
                | SchedulerEvent::ExecutorMetricsUpdate { .. }
                | SchedulerEvent::TaskAccumulators { .. }
        ) {
            self.settle_tallies();
        }
        match event {
            SchedulerEvent::TaskEnd {
                task_set,
                executor_id,
                duration,
                reason,
                ..
            } => self.task_ended(*task_set, executor_id, *duration, reason),
            SchedulerEvent::JobStart { job_id } => {
                let at = self.since_start(now());
                self.totals.jobs_started += 1;
                reopen(&mut self.ended_jobs, &mut self.jobs, job_id, |job| {
                    job.completed.is_some()
                });
                self.job_mut(*job_id, at);
            }
            SchedulerEvent::JobEnd { job_id, result } => {
                let at = self.since_start(now());
                let job = self.job_mut(*job_id, at);
                if job.completed.is_some() {
                    return;
                }
                job.completed = Some(at);
                match result {
                    JobResult::Succeeded => {
                        job.phase = Phase::Succeeded;
                        self.totals.jobs_succeeded += 1;
                    }
                    JobResult::Failed(why) => {
                        job.phase = Phase::Failed;
                        job.failure = Some(why.clone());
                        self.totals.jobs_failed += 1;
                    }
                }
                retire(&mut self.ended_jobs, &mut self.jobs, *job_id, RETAINED_JOBS);
            }
            SchedulerEvent::StageSubmitted {
                task_set,
                job_id,
                num_tasks,
            } => {
                let at = self.since_start(now());
                self.totals.stages_submitted += 1;
                let job = self.job_mut(*job_id, at);
                if !job.stage_ids.contains(&task_set.stage_id) {
                    job.stage_ids.push(task_set.stage_id);
                }
                job.num_tasks += num_tasks;
                reopen(
                    &mut self.ended_stages,
                    &mut self.stages,
                    task_set,
                    |stage| stage.completed.is_some(),
                );
                self.stages.insert(
                    *task_set,
                    StageStatus {
                        id: *task_set,
                        job_id: *job_id,
                        name: String::new(),
                        pool: String::new(),
                        phase: Phase::Running,
                        failure: None,
                        num_tasks: *num_tasks,
                        completed_tasks: 0,
                        failed_tasks: 0,
                        active_tasks: 0,
                        submitted: at,
                        completed: None,
                    },
                );
            }
            SchedulerEvent::StageCompleted {
                task_set,
                job_id,
                failure,
            } => {
                let at = self.since_start(now());
                let Some(stage) = self.stages.get_mut(task_set) else {
                    return;
                };
                if stage.completed.is_some() {
                    return;
                }
                stage.completed = Some(at);
                stage.active_tasks = 0;
                stage.phase = if failure.is_some() {
                    Phase::Failed
                } else {
                    Phase::Succeeded
                };
                stage.failure = failure.clone();
                let failed = failure.is_some();
                if failed {
                    self.totals.stages_failed += 1;
                } else {
                    self.totals.stages_completed += 1;
                }
                if let Some(job) = self.jobs.get_mut(job_id) {
                    if failed {
                        job.failed_stages += 1;
                    } else {
                        job.completed_stages += 1;
                    }
                }
                retire(
                    &mut self.ended_stages,
                    &mut self.stages,
                    *task_set,
                    RETAINED_STAGES,
                );
            }
            SchedulerEvent::ExecutorAdded {
                executor_id,
                host,
                cores,
            } => {
                let at = self.since_start(now());
                self.totals.executors_added += 1;
                // An id registered again starts afresh.
                self.dead_executors.retain(|id| id != executor_id);
                self.executors.insert(
                    executor_id.clone(),
                    ExecutorRecord {
                        status: ExecutorStatus {
                            id: executor_id.to_string(),
                            host: host.to_string(),
                            cores: *cores,
                            active: true,
                            removed_reason: None,
                            free_slots: 0,
                            running_tasks: 0,
                            completed_tasks: 0,
                            failed_tasks: 0,
                            task_time: Duration::ZERO,
                            since_heartbeat: None,
                            backlogged: false,
                            added: at,
                        },
                    },
                );
            }
            SchedulerEvent::ExecutorRemoved {
                executor_id,
                reason,
            } => {
                let Some(record) = self.executors.get_mut(executor_id) else {
                    return;
                };
                if !record.status.active {
                    return;
                }
                self.totals.executors_removed += 1;
                let status = &mut record.status;
                status.active = false;
                status.removed_reason = Some(reason.clone());
                status.running_tasks = 0;
                status.free_slots = 0;
                status.since_heartbeat = None;
                status.backlogged = false;
                retire(
                    &mut self.dead_executors,
                    &mut self.executors,
                    executor_id.clone(),
                    RETAINED_DEAD_EXECUTORS,
                );
            }
            SchedulerEvent::TaskStart { .. }
            | SchedulerEvent::ExecutorMetricsUpdate { .. }
            | SchedulerEvent::TaskAccumulators { .. } => {}
        }
    }

    fn job_mut(&mut self, job_id: u32, at: Duration) -> &mut JobStatus {
        self.jobs.entry(job_id).or_insert_with(|| JobStatus {
            job_id,
            phase: Phase::Running,
            failure: None,
            submitted: at,
            completed: None,
            stage_ids: Vec::new(),
            num_tasks: 0,
            completed_tasks: 0,
            failed_tasks: 0,
            active_tasks: 0,
            completed_stages: 0,
            failed_stages: 0,
        })
    }

    fn task_ended(
        &mut self,
        task_set: TaskSetId,
        executor_id: &SharedStr,
        latency: Duration,
        reason: &TaskEndReason,
    ) {
        let succeeded = matches!(
            reason,
            TaskEndReason::Success(_) | TaskEndReason::AlreadySucceeded
        );
        let first_success = matches!(reason, TaskEndReason::Success(_));
        if succeeded {
            self.totals.tasks_succeeded += 1;
        } else {
            self.totals.tasks_failed += 1;
        }
        self.latency.record(latency);
        let open = match self
            .tallies
            .iter()
            .position(|tally| tally.of(task_set, executor_id))
        {
            Some(open) => open,
            None => {
                if self.tallies.len() == OPEN_TALLIES {
                    self.settle_tallies();
                }
                self.tallies.push(TaskTally {
                    task_set,
                    executor_id: executor_id.clone(),
                    succeeded: 0,
                    failed: 0,
                    first_successes: 0,
                    task_time: Duration::ZERO,
                });
                self.tallies.len() - 1
            }
        };
        let tally = &mut self.tallies[open];
        tally.succeeded = tally.succeeded.saturating_add(u32::from(succeeded));
        tally.failed = tally.failed.saturating_add(u32::from(!succeeded));
        tally.first_successes = tally
            .first_successes
            .saturating_add(u32::from(first_success));
        tally.task_time = tally.task_time.saturating_add(latency);
    }

    /// Adds the tallies of task ends to the executors', stages' and jobs' records.
    fn settle_tallies(&mut self) {
        let mut tallies = std::mem::take(&mut self.tallies);
        for tally in tallies.drain(..) {
            self.settle(tally);
        }
        self.tallies = tallies;
    }

    fn settle(&mut self, tally: TaskTally) {
        if let Some(record) = self.executors.get_mut(&tally.executor_id) {
            record.status.completed_tasks += u64::from(tally.succeeded);
            record.status.failed_tasks += u64::from(tally.failed);
            record.status.task_time += tally.task_time;
        }
        let Some(stage) = self.stages.get_mut(&tally.task_set) else {
            return;
        };
        stage.completed_tasks += tally.first_successes;
        stage.failed_tasks += tally.failed;
        let job_id = stage.job_id;
        if let Some(job) = self.jobs.get_mut(&job_id) {
            job.completed_tasks += tally.first_successes;
            job.failed_tasks += tally.failed;
        }
    }

    /// Keeps one mark a second for the window and the throughput history; call it at
    /// each publishing tick.
    pub fn tick(&mut self, now: Instant) {
        let Some(last) = self.marks.back() else {
            return;
        };
        let elapsed = now.saturating_duration_since(last.at);
        if elapsed < Duration::from_secs(1) {
            return;
        }
        let finished = self.totals.tasks_finished();
        let ended = finished.saturating_sub(last.finished);
        // A tick late by several seconds spreads what ended over them.
        let seconds = elapsed.as_secs().clamp(1, HISTORY_SECS as u64);
        for i in 0..seconds {
            let share = ended / seconds + u64::from(i < ended % seconds);
            self.history.push_back(share);
        }
        while self.history.len() > HISTORY_SECS {
            self.history.pop_front();
        }
        let at = last.at + Duration::from_secs(elapsed.as_secs());
        self.marks.push_back(Mark {
            at,
            finished,
            latency: self.latency.clone(),
        });
        // Keep the newest mark at least WINDOW old, as the window's start.
        while self.marks.len() > 2
            && self
                .marks
                .get(1)
                .is_some_and(|next| now.saturating_duration_since(next.at) >= WINDOW)
        {
            self.marks.pop_front();
        }
    }

    /// The last minute's figures at `now`.
    fn window(&self, now: Instant) -> WindowStats {
        let Some(first) = self.marks.front() else {
            return WindowStats::default();
        };
        let span = now.saturating_duration_since(first.at);
        let tasks = self.totals.tasks_finished().saturating_sub(first.finished);
        let latency = self.latency.since(&first.latency);
        let secs = span.as_secs_f64();
        WindowStats {
            span,
            tasks,
            tasks_per_sec: if secs > 0.0 { tasks as f64 / secs } else { 0.0 },
            p50: latency.quantile(0.50),
            p90: latency.quantile(0.90),
            p99: latency.quantile(0.99),
        }
    }

    /// A snapshot at `now`, with the core's live figures and the transport's counters.
    pub(crate) fn snapshot(
        &mut self,
        now: Instant,
        core: CoreView,
        transport: RpcStats,
    ) -> StatusSnapshot {
        self.settle_tallies();
        self.tick(now);
        self.sequence += 1;
        // The open task sets' live figures.
        for stage in self.stages.values_mut() {
            if stage.completed.is_none() {
                stage.active_tasks = 0;
            }
        }
        let mut active_by_job: FxHashMap<u32, u32> = FxHashMap::default();
        for view in &core.task_sets {
            if let Some(stage) = self.stages.get_mut(&view.id) {
                stage.name.clone_from(&view.name);
                stage.pool.clone_from(&view.pool);
                stage.active_tasks = view.running;
            }
            *active_by_job.entry(view.job_id).or_default() += view.running;
        }
        for job in self.jobs.values_mut() {
            job.active_tasks = active_by_job.get(&job.job_id).copied().unwrap_or(0);
        }
        for record in self.executors.values_mut() {
            record.status.running_tasks = 0;
        }
        for view in &core.executors {
            self.update_executor(view);
        }
        let mut jobs: Vec<JobStatus> = self.jobs.values().cloned().collect();
        jobs.sort_by_key(|j| std::cmp::Reverse(j.job_id));
        let mut stages: Vec<StageStatus> = self.stages.values().cloned().collect();
        stages.sort_by(|a, b| {
            (b.id.stage_id, b.id.stage_attempt_id).cmp(&(a.id.stage_id, a.id.stage_attempt_id))
        });
        let mut executors: Vec<ExecutorStatus> = self
            .executors
            .values()
            .map(|record| record.status.clone())
            .collect();
        executors.sort_by(|a, b| {
            b.active
                .cmp(&a.active)
                .then_with(|| crate::core::driver_core::id_order(&a.id, &b.id))
        });
        StatusSnapshot {
            uptime: self.since_start(now),
            sequence: self.sequence,
            jobs,
            stages,
            executors,
            totals: self.totals,
            latency: self.latency.clone(),
            window: self.window(now),
            throughput: self.history.iter().copied().collect(),
            total_cores: core.total_cores,
            running_tasks: core.running_tasks,
            pending_executors: core.pending_executors,
            executor_failures: core.executor_failures,
            failure: core.failure,
            transport,
        }
    }

    fn update_executor(&mut self, view: &ExecutorView) {
        // Registered before the book was opened: known from the core alone.
        let record = self
            .executors
            .entry(SharedStr::from(view.id.as_str()))
            .or_insert_with(|| ExecutorRecord {
                status: ExecutorStatus {
                    id: view.id.clone(),
                    host: view.host.clone(),
                    cores: view.cores,
                    active: true,
                    removed_reason: None,
                    free_slots: 0,
                    running_tasks: 0,
                    completed_tasks: 0,
                    failed_tasks: 0,
                    task_time: Duration::ZERO,
                    since_heartbeat: None,
                    backlogged: false,
                    added: Duration::ZERO,
                },
            });
        let status = &mut record.status;
        status.free_slots = view.free_slots;
        status.running_tasks = view.running_tasks;
        status.since_heartbeat = view.since_heartbeat;
        status.backlogged = view.backlogged;
    }
}
