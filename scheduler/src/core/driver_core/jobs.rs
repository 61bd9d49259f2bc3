//! Jobs of stages in the driver core: the [`DagScheduler`] beside the task scheduler,
//! each one's output fed to the other (the seeds' `DAGScheduler` on top of
//! `TaskSchedulerImpl`).
//!
//! The DAG scheduler decides which stage attempts run and when a job ends; the task
//! scheduler runs each attempt as a task set. The core routes the task scheduler's
//! events about the DAG's task sets to the DAG scheduler (a map task's result is its
//! `MapStatus`), and the DAG scheduler's actions to the task scheduler; job and stage
//! events for listeners come from the DAG scheduler, per-task events from the task
//! scheduler. The DAG's job and stage ids start at [`FIRST_JOB_ID`], apart from the ids
//! of task sets the driver program submits itself.

use bytes::Bytes;
use flint_wire::{
    FetchFailure, KnownStatuses, MapStatus, ShuffleStatuses, TaskFailureKind, TaskMetrics,
    TaskOutcome, TaskPayload, TaskState,
};
use std::time::Instant;
use tracing::{error, info, warn};

use super::output::{JobStats, Output};
use super::DriverCore;
use crate::core::dag::{
    DagAction, DagConfig, DagError, DagScheduler, JobSpec, StageKind, StageTaskSet, TaskCompletion,
    RESUBMIT_TIMEOUT,
};
use crate::core::events::{SchedulerEvent, TaskEndReason, TaskResult};
use crate::core::fx_hash::FxHashMap;
use crate::core::task_set::TaskSetId;

/// The first job id and stage id of jobs of stages.
pub const FIRST_JOB_ID: u32 = 1 << 30;

/// The most map output sizes (map outputs times reduce partitions, over the shuffles a
/// stage reads) sent along with each of its tasks; with more, its executors ask the map
/// output tracker, once per epoch. Every launch carries them: a few KiB at most.
const SENT_SIZES: usize = 1024;

/// The longest block manager host a map status may name: a DNS name has at most 253
/// bytes. Every reduce task of the shuffle may carry it.
const MAX_STATUS_HOST: usize = 255;

/// The DAG scheduler and what the core keeps of its jobs.
#[derive(Debug)]
pub(crate) struct Jobs {
    pub dag: DagScheduler,
    /// Figures of each open job.
    stats: FxHashMap<u32, JobStats>,
    /// The job each submitted stage attempt runs for, until the job ends: tasks of an
    /// attempt that has ended (failed on a fetch failure, say) may still end, and count.
    task_set_jobs: FxHashMap<TaskSetId, u32>,
}

impl Jobs {
    pub fn new(max_consecutive_stage_attempts: u32) -> Self {
        Jobs {
            dag: DagScheduler::new(DagConfig {
                max_consecutive_stage_attempts,
                resubmit_timeout: RESUBMIT_TIMEOUT,
                first_id: FIRST_JOB_ID,
            }),
            stats: FxHashMap::default(),
            task_set_jobs: FxHashMap::default(),
        }
    }

    /// Whether the DAG scheduler needs to hear of `event`: its own task sets' events,
    /// and executors coming and going. Checked for every event: a comparison or two.
    #[inline]
    fn routes(event: &SchedulerEvent) -> bool {
        match event {
            SchedulerEvent::TaskEnd { task_set, .. }
            | SchedulerEvent::StageSubmitted { task_set, .. }
            | SchedulerEvent::StageCompleted { task_set, .. } => task_set.stage_id >= FIRST_JOB_ID,
            SchedulerEvent::JobStart { job_id } | SchedulerEvent::JobEnd { job_id, .. } => {
                *job_id >= FIRST_JOB_ID
            }
            SchedulerEvent::ExecutorAdded { .. } | SchedulerEvent::ExecutorRemoved { .. } => true,
            _ => false,
        }
    }
}

/// The statuses of the shuffles `set` reads, to send along with its tasks when they are
/// all known and few ([`SENT_SIZES`]); empty otherwise.
fn known_statuses(dag: &DagScheduler, set: &StageTaskSet) -> Bytes {
    let tracker = dag.map_output_tracker();
    let mut shuffles = Vec::with_capacity(set.reads.len());
    let mut sizes = 0;
    for read in &set.reads {
        let Some(statuses) = tracker.statuses(read.shuffle_id) else {
            return Bytes::new();
        };
        for status in statuses {
            let Some(status) = status else {
                // A reader needs them all: let it ask, and fail as it should.
                return Bytes::new();
            };
            sizes += status.sizes.len();
        }
        if sizes > SENT_SIZES {
            return Bytes::new();
        }
        shuffles.push(ShuffleStatuses {
            shuffle_id: read.shuffle_id,
            statuses: statuses.to_vec(),
        });
    }
    if shuffles.is_empty() {
        return Bytes::new();
    }
    KnownStatuses { shuffles }.encode()
}

/// The serialized task of a stage attempt: its stage's payload (a plain serialized
/// task, [`TaskPayload::encode`]) with the shuffles it writes and reads, the epoch, and
/// the statuses of what it reads when they are few.
fn encode_stage(set: &StageTaskSet, statuses: &[u8]) -> Bytes {
    let encoded = TaskPayload::parse(&set.payload).and_then(|task| {
        TaskPayload::encode_stage(
            task.function,
            task.input,
            set.epoch,
            set.writes,
            &set.reads,
            statuses,
        )
    });
    encoded.unwrap_or_else(|e| {
        // submit_job checked every stage's payload: this is a bug, and the task fails
        // at the executor with the payload as it was.
        error!("Cannot encode the tasks of {}: {e}", set.name);
        set.payload.clone()
    })
}

impl DriverCore {
    /// Why the value a finished task sent cannot be its map output, if the task belongs
    /// to a job's map stage: it must be a [`MapStatus`] of the executor that ran it,
    /// with a size for every reduce partition. Checked before the task scheduler counts
    /// the attempt a success: a bad status then fails the attempt, which runs again,
    /// instead of leaving its partition done with no output.
    pub(super) fn map_output_problem(
        &self,
        task_id: u64,
        executor_id: &str,
        value: &[u8],
    ) -> Option<String> {
        // With no job of stages the check costs one comparison a task.
        if self.jobs.dag.num_stages() == 0 {
            return None;
        }
        let set = self.scheduler.task_set_of(task_id)?;
        if set.stage_id < FIRST_JOB_ID {
            return None;
        }
        let writes = self.jobs.dag.stage_writes(set.stage_id)?;
        let status = match MapStatus::decode(value) {
            Ok(status) => status,
            Err(e) => return Some(format!("its result is no map status: {e}")),
        };
        let location = &status.location;
        if *location.executor_id != *executor_id {
            return Some(format!(
                "its map status places the output on executor {:.64}",
                &*location.executor_id
            ));
        }
        if location.host.len() > MAX_STATUS_HOST {
            return Some(format!(
                "its map status names a host of {} bytes",
                location.host.len()
            ));
        }
        if status.sizes.len() != writes.partitions as usize {
            return Some(format!(
                "its map status has {} sizes for the {} reduce partitions of shuffle {}",
                status.sizes.len(),
                writes.partitions,
                writes.shuffle_id
            ));
        }
        None
    }

    /// A fetch failure may blame only an executor this driver knows (registered, lost,
    /// or holding map outputs): for any other name the failure blames no executor, and
    /// the reader's stage is retried as for a failure to find the statuses. Otherwise a
    /// peer could have the DAG scheduler keep a record for every name it makes up.
    pub(super) fn vet_fetch_failure(
        &mut self,
        now: Instant,
        reporter: &str,
        failure: &mut FetchFailure,
    ) {
        let Some(address) = &failure.address else {
            return;
        };
        let blamed = &*address.executor_id;
        if self.executors.contains_key(blamed) || self.jobs.dag.knows_executor(blamed) {
            return;
        }
        flint_rpc::peer_warn!(
            self.peer_warnings,
            now,
            "Executor {reporter} reported a fetch failure from executor {blamed:.64}, which this driver does not know: no executor is blamed"
        );
        failure.address = None;
    }

    /// A map task's attempt whose value is no usable map output fails, counted: it runs
    /// again, and a stage that keeps getting them aborts after `task.maxFailures`.
    pub(super) fn invalid_map_output(
        &mut self,
        now: Instant,
        task_id: u64,
        executor_id: &str,
        problem: String,
    ) {
        let message = format!(
            "Task {task_id} on executor {executor_id} ended without a map output: {problem}"
        );
        flint_rpc::peer_warn!(self.peer_warnings, now, "{message}");
        let outcome = TaskOutcome::Failure {
            kind: TaskFailureKind::Exception,
            message,
            counts_towards_failures: true,
            metrics: TaskMetrics::default(),
        };
        self.scheduler
            .status_update(now, task_id, TaskState::Failed, outcome);
    }

    /// Submits a job of stages (the seeds' `handleJobSubmitted`): its stages' task sets
    /// follow as outputs. Every stage's payload must be a serialized task
    /// ([`TaskPayload::encode`]).
    pub fn submit_job(&mut self, now: Instant, spec: JobSpec) -> Result<u32, DagError> {
        let stages =
            std::iter::once(&spec.result_stage).chain(spec.shuffles.iter().map(|s| &s.map_stage));
        for stage in stages {
            if let Err(e) = TaskPayload::parse(&stage.payload) {
                return Err(DagError::BadPayload {
                    stage: stage.name.clone(),
                    reason: e.to_string(),
                });
            }
        }
        let job_id = self.jobs.dag.submit_job(now, spec)?;
        self.jobs.stats.entry(job_id).or_default();
        self.pump_jobs(now);
        Ok(job_id)
    }

    /// Cancels a job; false if it had ended.
    pub fn cancel_job(&mut self, now: Instant, job_id: u32, reason: Option<&str>) -> bool {
        let cancelled = self.jobs.dag.cancel_job(now, job_id, reason);
        self.pump_jobs(now);
        cancelled
    }

    /// When the core next needs [`DriverCore::handle_timeout`]: the task scheduler's
    /// timers (starvation, speculation, locality) and the DAG scheduler's (failed stages
    /// to resubmit), whichever comes first.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.scheduler.poll_timeout(), self.jobs.dag.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whatever timer of the two schedulers is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.scheduler.poll_timeout().is_some_and(|at| at <= now) {
            self.scheduler.handle_timeout(now);
        }
        if self.jobs.dag.poll_timeout().is_some_and(|at| at <= now) {
            self.jobs.dag.handle_timeout(now);
            self.pump_jobs(now);
        }
    }

    /// The map statuses of a shuffle, as executors ask the map output tracker for them,
    /// and the tracker's epoch; `None` for a shuffle it does not know.
    pub fn map_output_statuses(&self, shuffle_id: u32) -> Option<(u64, Vec<Option<MapStatus>>)> {
        let tracker = self.jobs.dag.map_output_tracker();
        let statuses = tracker.statuses(shuffle_id)?;
        Some((tracker.epoch(), statuses.to_vec()))
    }

    /// Forgets a shuffle's map outputs (no job will read them again); false if unknown.
    pub fn unregister_shuffle(&mut self, shuffle_id: u32) -> bool {
        self.jobs.dag.unregister_shuffle(shuffle_id)
    }

    /// An event of the task scheduler on its way out: what the DAG scheduler needs is
    /// taken (`None` for what only it reports to listeners), the rest goes on.
    #[inline]
    pub(super) fn route_event(&mut self, now: Instant, event: SchedulerEvent) -> Option<Output> {
        if !Jobs::routes(&event) {
            return Some(Output::Event(event));
        }
        let passed = self.job_event(now, event);
        self.pump_jobs(now);
        passed.map(Output::Event)
    }

    fn job_event(&mut self, now: Instant, event: SchedulerEvent) -> Option<SchedulerEvent> {
        let dag = &mut self.jobs.dag;
        match &event {
            SchedulerEvent::TaskEnd {
                task_set,
                index,
                reason,
                ..
            } => {
                let stats = self
                    .jobs
                    .task_set_jobs
                    .get(task_set)
                    .and_then(|job| self.jobs.stats.get_mut(job));
                let completion = match reason {
                    TaskEndReason::Success(TaskResult::Direct { value, metrics }) => {
                        match dag.stage_kind(task_set.stage_id) {
                            Some(StageKind::ShuffleMap { .. }) => {
                                match MapStatus::decode(value) {
                                    Ok(status) => {
                                        if let Some(stats) = stats {
                                            let written = status
                                                .sizes
                                                .iter()
                                                .fold(0u64, |sum, &size| sum.saturating_add(size));
                                            stats.shuffle_bytes_written =
                                                stats.shuffle_bytes_written.saturating_add(written);
                                        }
                                        Some(TaskCompletion::MapOutput(status))
                                    }
                                    Err(e) => {
                                        warn!("Task {index} of stage {task_set} sent no map status: {e}");
                                        Some(TaskCompletion::Failed)
                                    }
                                }
                            }
                            _ => {
                                if let Some(stats) = stats {
                                    stats.shuffle_bytes_read = stats
                                        .shuffle_bytes_read
                                        .saturating_add(metrics.input_bytes);
                                }
                                Some(TaskCompletion::Result(value.clone()))
                            }
                        }
                    }
                    // The core hands the task scheduler a large result once fetched.
                    TaskEndReason::Success(TaskResult::Indirect { .. })
                    | TaskEndReason::AlreadySucceeded => None,
                    TaskEndReason::Failed { .. } => Some(TaskCompletion::Failed),
                    TaskEndReason::FetchFailed(failure) => {
                        if let Some(stats) = stats {
                            stats.fetch_failures += 1;
                        }
                        Some(TaskCompletion::FetchFailed(failure.clone()))
                    }
                };
                if let Some(completion) = completion {
                    dag.task_ended(now, *task_set, *index, completion);
                }
                Some(event)
            }
            SchedulerEvent::StageCompleted {
                task_set,
                failure: Some(reason),
                ..
            } => {
                dag.task_set_failed(now, *task_set, reason);
                None
            }
            SchedulerEvent::StageCompleted { .. } => None,
            // The DAG scheduler's own events replace these.
            SchedulerEvent::StageSubmitted { .. }
            | SchedulerEvent::JobStart { .. }
            | SchedulerEvent::JobEnd { .. } => None,
            SchedulerEvent::ExecutorAdded {
                executor_id, host, ..
            } => {
                dag.executor_added(executor_id, host);
                Some(event)
            }
            SchedulerEvent::ExecutorRemoved { executor_id, .. } => {
                dag.executor_lost(executor_id, None);
                Some(event)
            }
            _ => Some(event),
        }
    }

    /// Carries out what the DAG scheduler decided: task sets to the task scheduler, job
    /// ends and events to the outputs.
    pub(super) fn pump_jobs(&mut self, now: Instant) {
        while let Some(action) = self.jobs.dag.poll_action() {
            match action {
                DagAction::SubmitTaskSet(set) => {
                    let statuses = known_statuses(&self.jobs.dag, &set);
                    let task_set = set.to_task_set(|set| encode_stage(set, &statuses));
                    self.jobs.task_set_jobs.insert(set.id, set.job_id);
                    if let Err(e) = self.submit_task_set(now, task_set) {
                        error!(
                            "Cannot submit the tasks of stage {} ({}): {e}",
                            set.id, set.name
                        );
                        self.jobs.dag.task_set_failed(now, set.id, &e.to_string());
                    }
                }
                DagAction::PartitionCompleted {
                    stage_id,
                    partition_id,
                } => self
                    .scheduler
                    .notify_partition_completion(stage_id, partition_id),
                DagAction::CancelStage { stage_id, reason } => {
                    info!("Cancelling stage {stage_id}: {reason}");
                    self.scheduler.cancel_tasks(stage_id, false);
                }
                DagAction::JobEnded { job_id, result } => {
                    // A stage's merged partitions are kept while any job needs it: a
                    // stage shared with a running job goes on (or runs again) for it.
                    let dag = &self.jobs.dag;
                    let accumulators = self.scheduler.accumulators_mut();
                    let dropped: Vec<u32> = accumulators
                        .dag_stages()
                        .filter(|&stage| dag.stage_kind(stage).is_none())
                        .collect();
                    for stage in dropped {
                        accumulators.stage_dropped(stage);
                    }
                    let stats = self.jobs.stats.remove(&job_id).unwrap_or_default();
                    self.jobs.task_set_jobs.retain(|_, job| *job != job_id);
                    self.outputs.push_back(Output::JobEnded {
                        job_id,
                        result,
                        stats,
                    });
                }
                DagAction::Event(event) => {
                    if let SchedulerEvent::StageSubmitted {
                        task_set, job_id, ..
                    } = &event
                    {
                        if let Some(stats) = self.jobs.stats.get_mut(job_id) {
                            stats.stage_attempts += 1;
                            if !stats.stages.contains(&task_set.stage_id) {
                                stats.stages.push(task_set.stage_id);
                            }
                        }
                    }
                    self.outputs.push_back(Output::Event(event));
                }
            }
        }
    }
}
