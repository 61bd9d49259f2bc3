//! Awaiting a submitted task set (its results by task index, its progress, and the
//! latency of its tasks from launch to result at the driver), and a submitted job of
//! stages.

use flint_rpc::timer::deadline_after;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;

use crate::core::driver_core::JobStats;
use crate::core::task_set::TaskSetId;

/// Percentiles of task latency, from a task's launch at the driver to its result at the
/// driver, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LatencySummary {
    /// Tasks measured.
    pub count: u64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Slowest.
    pub max_us: f64,
    /// Mean.
    pub mean_us: f64,
}

impl LatencySummary {
    fn of(histogram: &Histogram<u64>) -> Self {
        // Recorded in nanoseconds.
        let us = |ns: u64| ns as f64 / 1_000.0;
        LatencySummary {
            count: histogram.len(),
            p50_us: us(histogram.value_at_quantile(0.50)),
            p90_us: us(histogram.value_at_quantile(0.90)),
            p99_us: us(histogram.value_at_quantile(0.99)),
            max_us: us(histogram.max()),
            mean_us: histogram.mean() / 1_000.0,
        }
    }
}

/// What a finished task set produced.
#[derive(Debug, Clone)]
pub struct TaskSetOutcome {
    /// Each task's result, by task index.
    pub results: Vec<Bytes>,
    /// Latency of the successful attempts.
    pub latency: LatencySummary,
    /// Attempts that failed, were killed or lost on the way.
    pub failed_attempts: u64,
    /// Successes reported for a task that had already succeeded (always 0: the
    /// scheduler records a result once; counted so that tests can say so).
    pub duplicate_results: u64,
    /// From submission to the last result.
    pub elapsed: Duration,
}

/// The results of a task set's tasks as they come, by task index.
///
/// A slot of 32 bytes per task written at submission took half the time a million-task
/// set takes to submit; here a task that has not succeeded costs one bit of
/// zero-allocated memory, and an empty result, what most tasks of a large set return,
/// nothing more. The results come together in
/// task order once they are asked for.
#[derive(Debug)]
struct Results {
    tasks: usize,
    /// One bit per task: whether its result came.
    done: Vec<u64>,
    /// The results that are not empty, in the order they came.
    values: Vec<(u32, Bytes)>,
}

/// What [`Results::record`] made of a result.
#[derive(Debug, PartialEq, Eq)]
enum Recorded {
    First,
    Duplicate,
    NoSuchTask,
}

impl Results {
    fn new(tasks: usize) -> Self {
        Results {
            tasks,
            done: vec![0; tasks.div_ceil(64)],
            values: Vec::new(),
        }
    }

    fn record(&mut self, index: u32, value: &Bytes) -> Recorded {
        let i = index as usize;
        if i >= self.tasks {
            return Recorded::NoSuchTask;
        }
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        if self.done[word] & bit != 0 {
            return Recorded::Duplicate;
        }
        self.done[word] |= bit;
        if !value.is_empty() {
            self.values.push((index, value.clone()));
        }
        Recorded::First
    }

    /// Every task's result by index; empty for a task whose result has not come.
    fn to_vec(&self) -> Vec<Bytes> {
        let mut all = vec![Bytes::new(); self.tasks];
        for (index, value) in &self.values {
            all[*index as usize] = value.clone();
        }
        all
    }
}

#[derive(Debug)]
struct Progress {
    results: Results,
    finished: usize,
    failed_attempts: u64,
    duplicate_results: u64,
    latency: Histogram<u64>,
    /// `Some` once the task set ended: `Ok` when every task succeeded.
    end: Option<Result<(), String>>,
    submitted: Instant,
    ended: Option<Instant>,
}

/// The driver's side of a [`TaskSetHandle`]: it records what the scheduler reports.
#[derive(Debug)]
pub(crate) struct TaskSetShared {
    progress: Mutex<Progress>,
    ended: Condvar,
}

impl TaskSetShared {
    pub(crate) fn new(num_tasks: usize, submitted: Instant) -> Arc<Self> {
        // 1 ns to an hour at 3 significant digits: a few tens of KiB, allocated once.
        let latency =
            Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("the bounds are valid");
        Arc::new(TaskSetShared {
            progress: Mutex::new(Progress {
                results: Results::new(num_tasks),
                finished: 0,
                failed_attempts: 0,
                duplicate_results: 0,
                latency,
                end: None,
                submitted,
                ended: None,
            }),
            ended: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A task's first success: its result and how long it took from launch.
    pub(crate) fn record_success(&self, index: u32, value: &Bytes, latency: Duration) {
        let mut progress = self.lock();
        match progress.results.record(index, value) {
            Recorded::First => {}
            Recorded::Duplicate => {
                progress.duplicate_results += 1;
                return;
            }
            Recorded::NoSuchTask => return,
        }
        progress.finished += 1;
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        progress.latency.saturating_record(ns.max(1));
    }

    /// An attempt that failed, was killed or lost.
    pub(crate) fn record_failed_attempt(&self) {
        self.lock().failed_attempts += 1;
    }

    /// The task set ended: every task succeeded (`None`), or it was aborted.
    pub(crate) fn finish(&self, failure: Option<String>, now: Instant) {
        let mut progress = self.lock();
        if progress.end.is_none() {
            progress.end = Some(failure.map_or(Ok(()), Err));
            progress.ended = Some(now);
        }
        drop(progress);
        self.ended.notify_all();
    }
}

/// Why awaiting a task set did not give its results.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskSetError {
    /// The task set was aborted (a task failed `task.maxFailures` times, a task was too
    /// large, results exceeded `driver.maxResultSize`, the stage was cancelled...).
    #[error("task set {task_set} failed: {message}")]
    Failed {
        /// The stage attempt.
        task_set: TaskSetId,
        /// The abort message.
        message: String,
    },
    /// It had not ended when the wait ran out.
    #[error(
        "task set {task_set} did not finish within {timeout:?} ({finished} of {total} tasks done)"
    )]
    Timeout {
        /// The stage attempt.
        task_set: TaskSetId,
        /// How long was waited.
        timeout: Duration,
        /// Tasks done by then.
        finished: usize,
        /// Tasks in all.
        total: usize,
    },
}

/// A submitted task set, to follow and await.
///
/// Returned by [`crate::Driver::submit`]; clones follow the same task set.
#[derive(Debug, Clone)]
pub struct TaskSetHandle {
    pub(crate) id: TaskSetId,
    pub(crate) job_id: u32,
    pub(crate) shared: Arc<TaskSetShared>,
}

impl TaskSetHandle {
    /// The stage attempt.
    pub fn id(&self) -> TaskSetId {
        self.id
    }

    /// The job it belongs to.
    pub fn job_id(&self) -> u32 {
        self.job_id
    }

    /// Tasks that have succeeded, and tasks in all.
    pub fn progress(&self) -> (usize, usize) {
        let progress = self.shared.lock();
        (progress.finished, progress.results.tasks)
    }

    /// Whether it has ended (successfully or not).
    pub fn is_done(&self) -> bool {
        self.shared.lock().end.is_some()
    }

    /// Waits at most `timeout` for it to end; its results if every task succeeded.
    pub fn wait(&self, timeout: Duration) -> Result<TaskSetOutcome, TaskSetError> {
        let deadline = deadline_after(Instant::now(), timeout);
        let mut progress = self.shared.lock();
        while progress.end.is_none() {
            let now = Instant::now();
            if now >= deadline {
                return Err(TaskSetError::Timeout {
                    task_set: self.id,
                    timeout,
                    finished: progress.finished,
                    total: progress.results.tasks,
                });
            }
            progress = self
                .shared
                .ended
                .wait_timeout(progress, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        if let Some(Err(message)) = &progress.end {
            return Err(TaskSetError::Failed {
                task_set: self.id,
                message: message.clone(),
            });
        }
        let elapsed = progress.ended.map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(progress.submitted)
        });
        Ok(TaskSetOutcome {
            results: progress.results.to_vec(),
            latency: LatencySummary::of(&progress.latency),
            failed_attempts: progress.failed_attempts,
            duplicate_results: progress.duplicate_results,
            elapsed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(tasks: usize) -> TaskSetHandle {
        TaskSetHandle {
            id: TaskSetId {
                stage_id: 1,
                stage_attempt_id: 0,
            },
            job_id: 0,
            shared: TaskSetShared::new(tasks, Instant::now()),
        }
    }

    #[test]
    fn results_are_kept_by_index_once_and_latency_is_summarised() {
        let h = handle(3);
        h.shared
            .record_success(2, &Bytes::from_static(b"c"), Duration::from_micros(30));
        h.shared
            .record_success(0, &Bytes::from_static(b"a"), Duration::from_micros(10));
        h.shared
            .record_success(0, &Bytes::from_static(b"x"), Duration::from_micros(99));
        h.shared.record_failed_attempt();
        h.shared
            .record_success(1, &Bytes::from_static(b"b"), Duration::from_micros(20));
        h.shared.record_success(7, &Bytes::new(), Duration::ZERO); // out of range: ignored
        assert_eq!(h.progress(), (3, 3));
        assert!(!h.is_done());
        h.shared.finish(None, Instant::now());
        let outcome = h.wait(Duration::from_secs(1)).unwrap();
        assert_eq!(outcome.results, [&b"a"[..], b"b", b"c"]);
        assert_eq!((outcome.duplicate_results, outcome.failed_attempts), (1, 1));
        assert_eq!(outcome.latency.count, 3);
        assert!(
            (outcome.latency.p50_us - 20.0).abs() < 0.1,
            "{:?}",
            outcome.latency
        );
        assert!(
            (outcome.latency.max_us - 30.0).abs() < 0.1,
            "{:?}",
            outcome.latency
        );
    }

    #[test]
    fn empty_results_count_once_and_values_land_at_their_index_across_bit_words() {
        let mut results = Results::new(130);
        for index in [0, 63, 64, 127, 128, 129] {
            assert_eq!(results.record(index, &Bytes::new()), Recorded::First);
        }
        assert_eq!(results.record(64, &Bytes::new()), Recorded::Duplicate);
        assert_eq!(
            results.record(64, &Bytes::from_static(b"late")),
            Recorded::Duplicate
        );
        assert_eq!(
            results.record(65, &Bytes::from_static(b"v")),
            Recorded::First
        );
        assert_eq!(results.record(130, &Bytes::new()), Recorded::NoSuchTask);
        let all = results.to_vec();
        assert_eq!(all.len(), 130);
        assert_eq!(all[65], Bytes::from_static(b"v"));
        assert!(all.iter().enumerate().all(|(i, r)| i == 65 || r.is_empty()));
        assert_eq!(results.values.len(), 1, "empty results are not stored");
    }

    #[test]
    fn a_failed_task_set_and_a_wait_that_runs_out_say_so() {
        let h = handle(2);
        let err = h.wait(Duration::from_millis(20)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "task set 1.0 did not finish within 20ms (0 of 2 tasks done)"
        );
        let waiter = {
            let h = h.clone();
            std::thread::spawn(move || h.wait(Duration::from_secs(10)))
        };
        h.shared.finish(
            Some("Task 0 in stage 1.0 failed 4 times".into()),
            Instant::now(),
        );
        h.shared.finish(None, Instant::now()); // the first end stands
        let err = waiter.join().unwrap().unwrap_err();
        assert_eq!(
            err.to_string(),
            "task set 1.0 failed: Task 0 in stage 1.0 failed 4 times"
        );
        // A wait with no bound (Duration::MAX) is a wait, not an overflow.
        assert!(matches!(
            h.wait(Duration::MAX),
            Err(TaskSetError::Failed { .. })
        ));
    }
}

/// What a job of stages produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutcome {
    /// Its result stage's results, in partition order.
    pub results: Vec<Bytes>,
    /// From submission to the last result.
    pub elapsed: Duration,
    /// What it took: stages, attempts, fetch failures, shuffle bytes.
    pub stats: JobStats,
}

/// Why awaiting a job did not give its results.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// The job failed (e.g. "Job aborted due to stage failure: ...").
    #[error("job {job_id} failed: {message}")]
    Failed {
        /// The job.
        job_id: u32,
        /// Why.
        message: String,
    },
    /// It had not ended when the wait ran out.
    #[error("job {job_id} did not finish within {timeout:?}")]
    Timeout {
        /// The job.
        job_id: u32,
        /// How long was waited.
        timeout: Duration,
    },
}

#[derive(Debug)]
struct JobEnd {
    result: Result<Vec<Bytes>, String>,
    stats: JobStats,
    at: Instant,
}

/// The driver's side of a [`JobHandle`].
#[derive(Debug)]
pub(crate) struct JobShared {
    end: Mutex<Option<JobEnd>>,
    ended: Condvar,
    submitted: Instant,
}

impl JobShared {
    pub(crate) fn new(submitted: Instant) -> Arc<Self> {
        Arc::new(JobShared {
            end: Mutex::new(None),
            ended: Condvar::new(),
            submitted,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Option<JobEnd>> {
        self.end.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The job ended, once.
    pub(crate) fn finish(&self, result: Result<Vec<Bytes>, String>, stats: JobStats, at: Instant) {
        let mut end = self.lock();
        if end.is_none() {
            *end = Some(JobEnd { result, stats, at });
        }
        drop(end);
        self.ended.notify_all();
    }
}

/// A submitted job of stages, to await. Returned by [`crate::Driver::submit_job`];
/// clones follow the same job.
#[derive(Debug, Clone)]
pub struct JobHandle {
    pub(crate) job_id: u32,
    pub(crate) shared: Arc<JobShared>,
}

impl JobHandle {
    /// The job's id.
    pub fn job_id(&self) -> u32 {
        self.job_id
    }

    /// Whether it has ended (successfully or not).
    pub fn is_done(&self) -> bool {
        self.shared.lock().is_some()
    }

    /// Waits at most `timeout` for it to end; its results in partition order if it
    /// succeeded.
    pub fn wait(&self, timeout: Duration) -> Result<JobOutcome, JobError> {
        let deadline = deadline_after(Instant::now(), timeout);
        let mut end = self.shared.lock();
        while end.is_none() {
            let now = Instant::now();
            if now >= deadline {
                return Err(JobError::Timeout {
                    job_id: self.job_id,
                    timeout,
                });
            }
            end = self
                .shared
                .ended
                .wait_timeout(end, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let end = end.as_ref().expect("ended");
        match &end.result {
            Ok(results) => Ok(JobOutcome {
                results: results.clone(),
                elapsed: end.at.saturating_duration_since(self.shared.submitted),
                stats: end.stats.clone(),
            }),
            Err(message) => Err(JobError::Failed {
                job_id: self.job_id,
                message: message.clone(),
            }),
        }
    }
}
