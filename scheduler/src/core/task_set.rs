//! What the scheduler is given: task sets of tasks, and offers of free cores.

use std::fmt;

use bytes::Bytes;
use flint_wire::{Property, SharedStr};

use crate::core::locality::TaskLocation;

/// Identifies a task set: a stage and an attempt of it. Printed as the seeds do, `1.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskSetId {
    /// The stage.
    pub stage_id: u32,
    /// The attempt of the stage (0 for the first).
    pub stage_attempt_id: u32,
}

impl fmt::Display for TaskSetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.stage_id, self.stage_attempt_id)
    }
}

/// One task of a task set, as compact as the scheduler can keep it while it is pending.
///
/// The scheduler builds the [`flint_wire::TaskDescription`] only when it launches the
/// task; until then a task is this, a few bytes of bookkeeping and an index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskSpec {
    /// The partition the task computes.
    pub partition_id: u32,
    /// Where the task would like to run; empty for no preference.
    pub preferred_locations: Box<[TaskLocation]>,
    /// The task's own serialized form; `None` to use the task set's shared payload
    /// (the common case: the task function reads its partition id).
    pub payload: Option<Bytes>,
}

impl TaskSpec {
    /// A task of `partition_id` with no preference that runs the task set's payload.
    pub fn new(partition_id: u32) -> Self {
        TaskSpec {
            partition_id,
            ..TaskSpec::default()
        }
    }

    /// The same task, preferring `locations`.
    pub fn with_locations(mut self, locations: impl Into<Box<[TaskLocation]>>) -> Self {
        self.preferred_locations = locations.into();
        self
    }

    /// The same task, with its own serialized form.
    pub fn with_payload(mut self, payload: Bytes) -> Self {
        self.payload = Some(payload);
        self
    }
}

/// The tasks of one attempt of one stage, submitted together (the seeds' `TaskSet`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSet {
    /// Stage and attempt.
    pub id: TaskSetId,
    /// The job the stage belongs to; FIFO scheduling runs lower job ids first.
    pub job_id: u32,
    /// Whether this is the job's last stage: the job ends when it completes.
    pub final_stage: bool,
    /// The FAIR pool to run in (Spark's `spark.scheduler.pool` property); `None` is the
    /// pool named `default`. Ignored in FIFO mode.
    pub pool: Option<SharedStr>,
    /// The serialized task shared by every task that has no payload of its own: it names
    /// the task function and carries its input. Launches share it, never copy it.
    pub payload: Bytes,
    /// Local properties, which every launched task's description carries (one copy
    /// shared by the task set's tasks).
    pub properties: Vec<Property>,
    /// The tasks; a task's index in the set is its position here.
    pub tasks: Vec<TaskSpec>,
}

impl TaskSet {
    /// A task set for `stage_id` attempt 0 of `job_id`, the job's final stage, in the
    /// default pool, with one task per partition `0..num_tasks` running `payload`.
    pub fn new(job_id: u32, stage_id: u32, num_tasks: u32, payload: Bytes) -> Self {
        TaskSet {
            id: TaskSetId {
                stage_id,
                stage_attempt_id: 0,
            },
            job_id,
            final_stage: true,
            pool: None,
            payload,
            properties: Vec::new(),
            tasks: (0..num_tasks).map(TaskSpec::new).collect(),
        }
    }

    /// The same task set as attempt `attempt` of its stage.
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.id.stage_attempt_id = attempt;
        self
    }

    /// The same task set in the FAIR pool `pool`.
    pub fn in_pool(mut self, pool: impl Into<SharedStr>) -> Self {
        self.pool = Some(pool.into());
        self
    }
}

/// Free cores on an executor, offered to the scheduler (the seeds' `WorkerOffer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerOffer {
    /// The executor.
    pub executor_id: SharedStr,
    /// Its host.
    pub host: SharedStr,
    /// Its free cores.
    pub cores: u32,
}

impl WorkerOffer {
    /// An offer of `cores` free cores on `executor_id` at `host`.
    pub fn new(executor_id: impl Into<SharedStr>, host: impl Into<SharedStr>, cores: u32) -> Self {
        WorkerOffer {
            executor_id: executor_id.into(),
            host: host.into(),
            cores,
        }
    }
}
