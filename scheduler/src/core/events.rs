//! What the scheduler tells the rest of the driver: actions to carry out and events for
//! listeners.
//!
//! The state machine queues [`Action`]s; the glue takes them with
//! [`crate::TaskScheduler::poll_action`] and turns kills and revives into messages, and
//! hands each [`Action::Event`] to the driver program's [`SchedulerListener`].

use std::time::Duration;

use bytes::Bytes;
use flint_wire::{
    AccumulatorUpdate, BlockId, FetchFailure, SharedStr, TaskFailureKind, TaskMetrics, TaskState,
};

use crate::core::locality::TaskLocality;
use crate::core::task_set::TaskSetId;

/// Something the scheduler needs done outside itself.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Ask `executor_id` to kill a task attempt (a message `KillTask`).
    KillTask {
        /// The task attempt.
        task_id: u64,
        /// The executor running it.
        executor_id: SharedStr,
        /// Whether to interrupt the running thread.
        interrupt_thread: bool,
        /// Why; the executor reports it in the task's KILLED outcome.
        reason: String,
    },
    /// Make resource offers now: there are tasks that may run.
    ReviveOffers,
    /// Tell listeners.
    Event(SchedulerEvent),
}

/// The value a successful task produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskResult {
    /// The result travelled in the status update.
    Direct {
        /// The result value, a view of the received frame.
        value: Bytes,
        /// The task's metrics.
        metrics: TaskMetrics,
    },
    /// The result was too large for a message and waits in the executor's block store;
    /// the driver fetches it from there (`FetchBlockChunk`).
    Indirect {
        /// The executor holding the block.
        executor_id: SharedStr,
        /// The block.
        block_id: BlockId,
        /// Its size in bytes.
        size: u64,
        /// The task's metrics.
        metrics: TaskMetrics,
    },
}

/// Why a task attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskEndReason {
    /// The first successful attempt of its task: the task's result, recorded exactly once.
    Success(TaskResult),
    /// A success of an attempt whose task had already succeeded (a speculative copy, or a
    /// duplicate report): its result is dropped.
    AlreadySucceeded,
    /// The attempt failed, was killed or was lost.
    Failed {
        /// What kind of failure.
        kind: TaskFailureKind,
        /// Its description.
        message: String,
        /// Whether it counted towards `task.maxFailures`.
        counted: bool,
    },
    /// The attempt could not read a shuffle block (state FAILED): the map output is at
    /// fault, not the task. It does not count towards `task.maxFailures` and the task is
    /// not retried: its task set launches nothing more (it becomes a zombie), and the
    /// DAG scheduler recomputes the lost output and resubmits the stage.
    FetchFailed(FetchFailure),
}

/// A running task's metrics and accumulator values so far, from its executor's
/// heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskMetricsUpdate {
    /// The attempt's task id (TID).
    pub task_id: u64,
    /// Its stage attempt.
    pub task_set: TaskSetId,
    /// Its metrics so far.
    pub metrics: TaskMetrics,
    /// Its accumulators' values so far.
    pub accumulators: Vec<AccumulatorUpdate>,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobResult {
    /// Its final stage completed.
    Succeeded,
    /// One of its stages was aborted, for this reason.
    Failed(String),
}

/// What happened, for a driver program's listeners (Spark's listener bus events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchedulerEvent {
    /// The first task set of a job was submitted.
    JobStart {
        /// The job.
        job_id: u32,
    },
    /// A job ended.
    JobEnd {
        /// The job.
        job_id: u32,
        /// How.
        result: JobResult,
    },
    /// A task set was submitted.
    StageSubmitted {
        /// The stage attempt.
        task_set: TaskSetId,
        /// Its job.
        job_id: u32,
        /// Its number of tasks.
        num_tasks: u32,
    },
    /// A task set ended: all its tasks succeeded, or it was aborted with the reason.
    StageCompleted {
        /// The stage attempt.
        task_set: TaskSetId,
        /// Its job.
        job_id: u32,
        /// `None` when every task succeeded; the abort message otherwise.
        failure: Option<String>,
    },
    /// A task attempt was launched.
    TaskStart {
        /// The attempt's task id (TID).
        task_id: u64,
        /// Its stage attempt.
        task_set: TaskSetId,
        /// The task's index in its task set.
        index: u32,
        /// The attempt number of the task.
        attempt: u32,
        /// Where it runs.
        executor_id: SharedStr,
        /// The executor's host.
        host: SharedStr,
        /// How local the launch was.
        locality: TaskLocality,
        /// Whether it is a speculative copy.
        speculative: bool,
    },
    /// A task attempt ended.
    TaskEnd {
        /// The attempt's task id (TID).
        task_id: u64,
        /// Its stage attempt.
        task_set: TaskSetId,
        /// The task's index in its task set.
        index: u32,
        /// The attempt number of the task.
        attempt: u32,
        /// Where it ran.
        executor_id: SharedStr,
        /// Its final state.
        state: TaskState,
        /// How long it ran, by the scheduler's clock.
        duration: Duration,
        /// Why it ended, with the result for a first success.
        reason: TaskEndReason,
    },
    /// An executor joined.
    ExecutorAdded {
        /// The executor.
        executor_id: SharedStr,
        /// Its host.
        host: SharedStr,
        /// Its cores.
        cores: u32,
    },
    /// An executor was removed.
    ExecutorRemoved {
        /// The executor.
        executor_id: SharedStr,
        /// Why.
        reason: String,
    },
    /// A successful task attempt brought accumulator updates (posted after its
    /// `TaskEnd`). Only a partition's first success of a running job is `counted`
    /// (merged into the driver's accumulators); the others are shown, not merged.
    TaskAccumulators {
        /// The attempt's task id (TID).
        task_id: u64,
        /// Its stage attempt.
        task_set: TaskSetId,
        /// The task's index in its task set.
        index: u32,
        /// The partition it computed.
        partition: u32,
        /// Its accumulators' final values in this attempt.
        updates: Vec<AccumulatorUpdate>,
        /// Whether they were merged.
        counted: bool,
    },
    /// An executor's heartbeat reported its running tasks' metrics (Spark's
    /// `SparkListenerExecutorMetricsUpdate`). Only tasks the scheduler runs on that
    /// executor are included; a heartbeat with none posts nothing.
    ExecutorMetricsUpdate {
        /// The executor.
        executor_id: SharedStr,
        /// Each running task's metrics and accumulators so far.
        updates: Vec<TaskMetricsUpdate>,
    },
}

/// A driver program's view of the scheduler: one method per event, each doing nothing
/// unless overridden.
///
/// ```
/// use flint_scheduler::{SchedulerListener, TaskResult};
///
/// #[derive(Default)]
/// struct CountResults(usize);
///
/// impl SchedulerListener for CountResults {
///     fn on_task_result(&mut self, _task_id: u64, _index: u32, _result: &TaskResult) {
///         self.0 += 1;
///     }
/// }
/// ```
#[allow(unused_variables)]
pub trait SchedulerListener {
    /// Every event, before the event's own method.
    fn on_event(&mut self, event: &SchedulerEvent) {}
    /// A job started.
    fn on_job_start(&mut self, job_id: u32) {}
    /// A job ended.
    fn on_job_end(&mut self, job_id: u32, result: &JobResult) {}
    /// A task's first success, with its result: called exactly once per task.
    fn on_task_result(&mut self, task_id: u64, index: u32, result: &TaskResult) {}
    /// An executor joined.
    fn on_executor_added(&mut self, executor_id: &str, host: &str) {}
    /// An executor was removed.
    fn on_executor_removed(&mut self, executor_id: &str, reason: &str) {}
    /// A successful attempt's accumulator updates, and whether they were merged (only a
    /// partition's first success is).
    fn on_task_accumulators(
        &mut self,
        task_id: u64,
        partition: u32,
        updates: &[AccumulatorUpdate],
        counted: bool,
    ) {
    }
    /// An executor's heartbeat reported its running tasks' metrics.
    fn on_executor_metrics_update(&mut self, executor_id: &str, updates: &[TaskMetricsUpdate]) {}
}

impl SchedulerEvent {
    /// Hands the event to `listener`: [`SchedulerListener::on_event`], then the method
    /// of the event's kind.
    pub fn deliver_to(&self, listener: &mut (impl SchedulerListener + ?Sized)) {
        listener.on_event(self);
        match self {
            SchedulerEvent::JobStart { job_id } => listener.on_job_start(*job_id),
            SchedulerEvent::JobEnd { job_id, result } => listener.on_job_end(*job_id, result),
            SchedulerEvent::TaskEnd {
                task_id,
                index,
                reason: TaskEndReason::Success(result),
                ..
            } => listener.on_task_result(*task_id, *index, result),
            SchedulerEvent::ExecutorAdded {
                executor_id, host, ..
            } => listener.on_executor_added(executor_id, host),
            SchedulerEvent::ExecutorRemoved {
                executor_id,
                reason,
            } => listener.on_executor_removed(executor_id, reason),
            SchedulerEvent::ExecutorMetricsUpdate {
                executor_id,
                updates,
            } => listener.on_executor_metrics_update(executor_id, updates),
            SchedulerEvent::TaskAccumulators {
                task_id,
                partition,
                updates,
                counted,
                ..
            } => listener.on_task_accumulators(*task_id, *partition, updates, *counted),
            _ => {}
        }
    }
}
