//! The scheduler's errors.

use flint_rpc::conf::ConfError;

use crate::core::pool::PoolsFileError;

/// What the scheduler refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    /// A stage may have one active (non-zombie) task set at a time; the text is the
    /// seeds'. `task_set_ids` lists the stage's active task sets and the refused one.
    #[error("more than one active taskSet for stage {stage_id}: {task_set_ids}")]
    MoreThanOneActiveTaskSet {
        /// The stage.
        stage_id: u32,
        /// The ids, comma separated, e.g. `1.0,1.1`.
        task_set_ids: String,
    },
    /// The same stage attempt was submitted twice.
    #[error("task set {task_set} was already submitted")]
    DuplicateTaskSet {
        /// The stage attempt, e.g. `1.0`.
        task_set: String,
    },
    /// An `excludeOnFailure.*` threshold is zero while exclusion is enabled; the text is
    /// Spark's.
    #[error("{key} was {value}, but must be > 0.")]
    ExclusionThresholdNotPositive {
        /// The key.
        key: &'static str,
        /// Its value.
        value: u32,
    },
    /// With exclusion enabled, `excludeOnFailure.task.maxTaskAttemptsPerNode` is not below
    /// `task.maxFailures`: a task failing on one bad host would fail its job before it is
    /// tried elsewhere. The text is Spark's.
    #[error(
        "excludeOnFailure.task.maxTaskAttemptsPerNode ( = {max_task_attempts_per_node}) was >= \
         task.maxFailures ( = {max_task_failures} ). Though excludeOnFailure is enabled, with \
         this configuration, flint will not be robust to one bad node. Decrease \
         excludeOnFailure.task.maxTaskAttemptsPerNode, increase task.maxFailures, or disable \
         excludeOnFailure with excludeOnFailure.enabled"
    )]
    ExclusionNotRobustToOneBadNode {
        /// `excludeOnFailure.task.maxTaskAttemptsPerNode`.
        max_task_attempts_per_node: u32,
        /// `task.maxFailures`.
        max_task_failures: u32,
    },
    /// A task set the driver program submits used a stage or job id of the range jobs of
    /// stages take ([`crate::FIRST_JOB_ID`] and above), whose events go to the DAG
    /// scheduler.
    #[error(
        "task set {task_set} (job {job_id}) uses an id of 2^30 or more, which jobs of stages take"
    )]
    ReservedId {
        /// The stage attempt, e.g. `1073741824.0`.
        task_set: String,
        /// Its job id.
        job_id: u32,
    },
    /// A bad configuration value.
    #[error(transparent)]
    Conf(#[from] ConfError),
    /// A bad pools file.
    #[error(transparent)]
    PoolsFile(#[from] PoolsFileError),
}
