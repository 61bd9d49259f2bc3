//! What the DAG scheduler is told (task ends) and what it asks for (task sets, kills,
//! job ends, listener events), and its settings.

use std::time::Duration;

use bytes::Bytes;
use flint_wire::{FetchFailure, MapStatus, Property, SharedStr, ShuffleRead, ShuffleWrite};

use crate::core::events::SchedulerEvent;
use crate::core::task_set::{TaskSet, TaskSetId, TaskSpec};

/// How long after a fetch failure the failed stages are resubmitted (Spark's
/// `RESUBMIT_TIMEOUT`): one lost executor fails many tasks in quick succession, and one
/// resubmission serves them all.
pub const RESUBMIT_TIMEOUT: Duration = Duration::from_millis(200);

/// The DAG scheduler's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DagConfig {
    /// Consecutive attempts of a stage that may fail on fetch failures before its jobs
    /// fail (`stage.maxConsecutiveAttempts`, default 4). A successful attempt starts the
    /// count again.
    pub max_consecutive_stage_attempts: u32,
    /// The delay before failed stages are resubmitted ([`RESUBMIT_TIMEOUT`]).
    pub resubmit_timeout: Duration,
    /// The first job id and the first stage id given out: a driver that also runs task
    /// sets of its callers' numbering keeps the two apart.
    pub first_id: u32,
}

impl Default for DagConfig {
    fn default() -> Self {
        DagConfig {
            max_consecutive_stage_attempts: 4,
            resubmit_timeout: RESUBMIT_TIMEOUT,
            first_id: 0,
        }
    }
}

/// What a stage's tasks produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageKind {
    /// Map outputs of a shuffle, one per partition, each reported as a
    /// [`TaskCompletion::MapOutput`].
    ShuffleMap {
        /// The shuffle the stage writes.
        shuffle_id: u32,
    },
    /// The job's results, one per partition, each reported as a
    /// [`TaskCompletion::Result`].
    Result,
}

/// One attempt of a stage to run as a task set: which partitions, of what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageTaskSet {
    /// The stage and its attempt.
    pub id: TaskSetId,
    /// The earliest active job that needs the stage: FIFO scheduling runs it first.
    pub job_id: u32,
    /// The stage's name (its call site).
    pub name: String,
    /// Map stage or result stage.
    pub kind: StageKind,
    /// The partitions to compute, in order; a task's index in the task set is its
    /// position here.
    pub partitions: Vec<u32>,
    /// The shuffle the tasks write, with its reduce partitions (map stages only).
    pub writes: Option<ShuffleWrite>,
    /// The shuffles the tasks read, each with its map partitions, in the stage's order.
    pub reads: Vec<ShuffleRead>,
    /// The map-output epoch at submission: executors holding statuses cached at an
    /// older epoch fetch them again before the tasks read.
    pub epoch: u64,
    /// The stage's own payload, from its [`super::StageSpec`].
    pub payload: Bytes,
    /// The FAIR pool of the job.
    pub pool: Option<SharedStr>,
    /// The job's local properties.
    pub properties: Vec<Property>,
}

impl StageTaskSet {
    /// The task set [`crate::TaskScheduler::submit_tasks`] takes: one task per
    /// partition, in order, sharing the serialized task `encode` makes of this attempt
    /// (the glue's encoding of the payload with the shuffles and the epoch, e.g. by
    /// [`flint_wire::TaskPayload::encode_stage`]; a task learns its partition from its
    /// description).
    pub fn to_task_set(&self, encode: impl FnOnce(&StageTaskSet) -> Bytes) -> TaskSet {
        TaskSet {
            id: self.id,
            job_id: self.job_id,
            final_stage: self.kind == StageKind::Result,
            pool: self.pool.clone(),
            payload: encode(self),
            properties: self.properties.clone(),
            tasks: self.partitions.iter().map(|&p| TaskSpec::new(p)).collect(),
        }
    }
}

/// How a task of a stage attempt ended, as the DAG scheduler needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskCompletion {
    /// A map task's first success, with its output's status (decoded from the result
    /// value with [`MapStatus::decode`]).
    MapOutput(MapStatus),
    /// A result task's first success, with its result value.
    Result(Bytes),
    /// A failure the task scheduler retries or counts: nothing for the DAG scheduler to
    /// do (a task set that fails for good is reported by
    /// [`super::DagScheduler::task_set_failed`]).
    Failed,
    /// The task could not read a map output it needs.
    FetchFailed(FetchFailure),
}

/// Something the DAG scheduler needs done outside itself.
#[derive(Debug, Clone, PartialEq)]
pub enum DagAction {
    /// Submit this stage attempt's task set to the task scheduler (build it with
    /// [`StageTaskSet::to_task_set`]).
    SubmitTaskSet(StageTaskSet),
    /// An earlier attempt of the stage computed this partition: the stage's active
    /// task set need not ([`crate::TaskScheduler::notify_partition_completion`]).
    PartitionCompleted {
        /// The stage.
        stage_id: u32,
        /// The partition.
        partition_id: u32,
    },
    /// Kill the running tasks of every attempt of the stage and launch no more
    /// ([`crate::TaskScheduler::cancel_tasks`]).
    CancelStage {
        /// The stage.
        stage_id: u32,
        /// Why, for logs.
        reason: String,
    },
    /// A job ended: its results in partition order, or the failure's text (e.g. "Job
    /// aborted due to stage failure: ..."). Exactly once per job.
    JobEnded {
        /// The job.
        job_id: u32,
        /// Its results, or why it failed.
        result: Result<Vec<Bytes>, String>,
    },
    /// Tell listeners: job start and end, stage attempts submitted and completed. These
    /// replace the task scheduler's events of the same kinds, which know of task sets
    /// only.
    Event(SchedulerEvent),
}
