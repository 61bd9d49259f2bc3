//! The DAG scheduler's state machine (the seeds' `DAGScheduler`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::time::Instant;

use bytes::Bytes;
use flint_wire::{FetchFailure, MapStatus, Property, SharedStr, ShuffleRead, ShuffleWrite};
use tracing::{debug, info, warn};

use super::action::{DagAction, DagConfig, StageKind, StageTaskSet, TaskCompletion};
use super::map_output_tracker::MapOutputTracker;
use super::spec::{DagError, JobSpec, ShuffleSpec, StageSpec};
use crate::core::events::{JobResult, SchedulerEvent};
use crate::core::task_set::TaskSetId;

/// Where a stage is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageState {
    /// Submitted, waiting for parent stages' outputs.
    Waiting,
    /// An attempt runs.
    Running,
    /// Failed on a fetch failure; resubmitted after the resubmit delay.
    Failed,
    /// None of those: not yet needed, or done.
    Idle,
}

/// One submitted attempt of a stage.
#[derive(Debug)]
struct Attempt {
    partitions: Vec<u32>,
    epoch: u64,
    submitted_at: Instant,
}

#[derive(Debug)]
struct Stage {
    id: u32,
    name: String,
    kind: StageKind,
    num_partitions: u32,
    /// The map stages writing the shuffles it reads, in id order.
    parents: Vec<u32>,
    writes: Option<ShuffleWrite>,
    reads: Vec<ShuffleRead>,
    payload: Bytes,
    /// The job that made it: FIFO order among stages of several jobs.
    first_job_id: u32,
    /// Active jobs that need it.
    job_ids: BTreeSet<u32>,
    next_attempt: u32,
    attempts: BTreeMap<u32, Attempt>,
    /// Map stages: partitions of the latest attempt no attempt has reported yet.
    pending_partitions: BTreeSet<u32>,
    /// Attempts that failed on a fetch failure since the stage last succeeded.
    failed_attempt_ids: BTreeSet<u32>,
    /// Result stages: the job whose results they are, while it is active.
    result_job: Option<u32>,
}

impl Stage {
    fn latest_attempt(&self) -> Option<u32> {
        self.next_attempt.checked_sub(1)
    }

    fn shuffle_id(&self) -> Option<u32> {
        match self.kind {
            StageKind::ShuffleMap { shuffle_id } => Some(shuffle_id),
            StageKind::Result => None,
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        stage_label(self.kind, self.id).fmt(f)
    }
}

struct StageLabel(StageKind, u32);

impl fmt::Display for StageLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            StageKind::ShuffleMap { .. } => write!(f, "ShuffleMapStage {}", self.1),
            StageKind::Result => write!(f, "ResultStage {}", self.1),
        }
    }
}

fn stage_label(kind: StageKind, id: u32) -> StageLabel {
    StageLabel(kind, id)
}

/// A task as Spark prints it in the DAG scheduler's logs: `ShuffleMapTask(1, 3)`.
struct TaskLabel(StageKind, u32, u32);

impl fmt::Display for TaskLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            StageKind::ShuffleMap { .. } => write!(f, "ShuffleMapTask({}, {})", self.1, self.2),
            StageKind::Result => write!(f, "ResultTask({}, {})", self.1, self.2),
        }
    }
}

#[derive(Debug)]
struct ActiveJob {
    name: String,
    final_stage: u32,
    results: Vec<Option<Bytes>>,
    num_finished: usize,
    pool: Option<SharedStr>,
    properties: Vec<Property>,
    submitted_at: Instant,
}

/// The DAG scheduler: jobs of stages in, task sets out. A deterministic state machine
/// beside [`crate::TaskScheduler`]; see [the module](super) for how it is driven.
#[derive(Debug)]
pub struct DagScheduler {
    config: DagConfig,
    tracker: MapOutputTracker,
    next_job_id: u32,
    next_stage_id: u32,
    stages: BTreeMap<u32, Stage>,
    shuffle_to_map_stage: BTreeMap<u32, u32>,
    job_to_stages: BTreeMap<u32, BTreeSet<u32>>,
    jobs: BTreeMap<u32, ActiveJob>,
    waiting: BTreeSet<u32>,
    running: BTreeSet<u32>,
    failed: BTreeSet<u32>,
    /// The epoch at which an executor was last known lost: map outputs it reports from
    /// tasks of that epoch or older may describe files that are gone.
    executor_failure_epoch: BTreeMap<SharedStr, u64>,
    /// The epoch at which an executor's outputs were last unregistered, so that a
    /// flurry of fetch failures from one loss unregisters them once.
    shuffle_file_lost_epoch: BTreeMap<SharedStr, u64>,
    /// When failed stages are to be resubmitted.
    resubmit_at: BTreeSet<Instant>,
    actions: VecDeque<DagAction>,
}

impl DagScheduler {
    /// A DAG scheduler with `config`, no job and an empty map output tracker.
    pub fn new(config: DagConfig) -> Self {
        DagScheduler {
            config,
            tracker: MapOutputTracker::new(),
            next_job_id: config.first_id,
            next_stage_id: config.first_id,
            stages: BTreeMap::new(),
            shuffle_to_map_stage: BTreeMap::new(),
            job_to_stages: BTreeMap::new(),
            jobs: BTreeMap::new(),
            waiting: BTreeSet::new(),
            running: BTreeSet::new(),
            failed: BTreeSet::new(),
            executor_failure_epoch: BTreeMap::new(),
            shuffle_file_lost_epoch: BTreeMap::new(),
            resubmit_at: BTreeSet::new(),
            actions: VecDeque::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &DagConfig {
        &self.config
    }

    /// The map output tracker: where every map output waits, and the epoch. The glue
    /// serves executors' requests for a shuffle's statuses from it.
    pub fn map_output_tracker(&self) -> &MapOutputTracker {
        &self.tracker
    }

    /// The map-output epoch.
    pub fn epoch(&self) -> u64 {
        self.tracker.epoch()
    }

    // ---- queries -------------------------------------------------------------------

    /// The jobs that have not ended, in id order.
    pub fn active_jobs(&self) -> impl Iterator<Item = u32> + '_ {
        self.jobs.keys().copied()
    }

    /// The stages some active job needs.
    pub fn num_stages(&self) -> usize {
        self.stages.len()
    }

    /// What a live stage's tasks produce; `None` once no active job needs it.
    pub fn stage_kind(&self, stage_id: u32) -> Option<StageKind> {
        self.stages.get(&stage_id).map(|s| s.kind)
    }

    /// The shuffle a live stage writes, and into how many partitions.
    pub fn stage_writes(&self, stage_id: u32) -> Option<ShuffleWrite> {
        self.stages.get(&stage_id)?.writes
    }

    /// Where a live stage is in its life.
    pub fn stage_state(&self, stage_id: u32) -> Option<StageState> {
        self.stages.get(&stage_id)?;
        Some(if self.running.contains(&stage_id) {
            StageState::Running
        } else if self.waiting.contains(&stage_id) {
            StageState::Waiting
        } else if self.failed.contains(&stage_id) {
            StageState::Failed
        } else {
            StageState::Idle
        })
    }

    /// The live map stage writing a shuffle.
    pub fn map_stage_of(&self, shuffle_id: u32) -> Option<u32> {
        self.shuffle_to_map_stage.get(&shuffle_id).copied()
    }

    // ---- actions and timers --------------------------------------------------------

    /// The next thing to do, oldest first.
    pub fn poll_action(&mut self) -> Option<DagAction> {
        self.actions.pop_front()
    }

    /// Everything to do, oldest first.
    pub fn drain_actions(&mut self) -> impl Iterator<Item = DagAction> + '_ {
        self.actions.drain(..)
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next be called, if ever:
    /// the resubmission of stages that failed on fetch failures.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.resubmit_at.first().copied()
    }

    /// Does what is due at `now`: resubmits the failed stages (Spark's
    /// `ResubmitFailedStages`).
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due = false;
        while let Some(&at) = self.resubmit_at.first() {
            if at > now {
                break;
            }
            self.resubmit_at.pop_first();
            due = true;
        }
        if due {
            self.resubmit_failed_stages(now);
        }
    }

    fn resubmit_failed_stages(&mut self, now: Instant) {
        if self.failed.is_empty() {
            // Job cancellations may have emptied it since the resubmission was planned.
            return;
        }
        info!("Resubmitting failed stages");
        let mut stages: Vec<u32> = std::mem::take(&mut self.failed).into_iter().collect();
        stages.sort_by_key(|id| (self.stages[id].first_job_id, *id));
        for stage_id in stages {
            self.submit_stage(now, stage_id);
        }
    }

    // ---- jobs ----------------------------------------------------------------------

    /// Submits a job (the seeds' `handleJobSubmitted`): finds or makes its stages,
    /// registers new shuffles with the map output tracker, and submits what can run.
    /// The job's id, or why it was refused (then nothing of it was registered).
    pub fn submit_job(&mut self, now: Instant, spec: JobSpec) -> Result<u32, DagError> {
        let order = self.plan(&spec)?;
        let job_id = self.next_job_id;
        self.next_job_id += 1;
        let num_partitions = spec.result_stage.num_partitions as usize;
        if num_partitions == 0 {
            // Nothing to compute: the job ends at once, as Spark's does.
            self.push_event(SchedulerEvent::JobStart { job_id });
            self.end_job(now, job_id, &spec.name, now, Ok(Vec::new()));
            return Ok(job_id);
        }

        let by_id: BTreeMap<u32, &ShuffleSpec> =
            spec.shuffles.iter().map(|s| (s.shuffle_id, s)).collect();
        for shuffle_id in order {
            if !self.shuffle_to_map_stage.contains_key(&shuffle_id) {
                self.new_shuffle_map_stage(by_id[&shuffle_id], job_id);
            }
        }
        let final_stage = self.new_stage(&spec.result_stage, None, job_id);
        self.stages
            .get_mut(&final_stage)
            .expect("just made")
            .result_job = Some(job_id);
        self.update_job_id_stage_id_maps(job_id, final_stage);

        let stage = &self.stages[&final_stage];
        info!(
            "Got job {job_id} ({}) with {num_partitions} output partitions",
            spec.name
        );
        info!("Final stage: {stage} ({})", stage.name);
        info!(
            "Parents of final stage: {}",
            self.stage_list(stage.parents.iter().copied())
        );
        let missing = self.missing_parent_stages(final_stage);
        info!("Missing parents: {}", self.stage_list(missing));

        self.jobs.insert(
            job_id,
            ActiveJob {
                name: spec.name,
                final_stage,
                results: vec![None; num_partitions],
                num_finished: 0,
                pool: spec.pool,
                properties: spec.properties,
                submitted_at: now,
            },
        );
        self.push_event(SchedulerEvent::JobStart { job_id });
        self.submit_stage(now, final_stage);
        Ok(job_id)
    }

    /// Checks a job's shuffles before anything is registered, and orders the ones it
    /// reads so that every shuffle comes after the shuffles its map stage reads.
    fn plan(&self, spec: &JobSpec) -> Result<Vec<u32>, DagError> {
        let mut by_id: BTreeMap<u32, &ShuffleSpec> = BTreeMap::new();
        for shuffle in &spec.shuffles {
            if by_id.insert(shuffle.shuffle_id, shuffle).is_some() {
                return Err(DagError::DuplicateShuffle {
                    shuffle_id: shuffle.shuffle_id,
                });
            }
        }
        // Depth-first over the reads, with an explicit stack: a chain of shuffles as
        // long as a driver program likes does not overflow the thread's stack.
        let mut order = Vec::new();
        let mut done: BTreeSet<u32> = BTreeSet::new();
        let mut on_path: BTreeSet<u32> = BTreeSet::new();
        let mut stack: Vec<(&StageSpec, usize, Option<u32>)> = vec![(&spec.result_stage, 0, None)];
        while let Some((stage, next, writes)) = stack.last_mut() {
            let Some(&shuffle_id) = stage.reads.get(*next) else {
                if let Some(shuffle_id) = *writes {
                    on_path.remove(&shuffle_id);
                    done.insert(shuffle_id);
                    order.push(shuffle_id);
                }
                stack.pop();
                continue;
            };
            *next += 1;
            let Some(shuffle) = by_id.get(&shuffle_id) else {
                return Err(DagError::UnknownShuffle {
                    stage: stage.name.clone(),
                    shuffle_id,
                });
            };
            if stage.num_partitions != shuffle.reduce_partitions {
                return Err(DagError::ReadPartitionsMismatch {
                    stage: stage.name.clone(),
                    partitions: stage.num_partitions,
                    shuffle_id,
                    reduce_partitions: shuffle.reduce_partitions,
                });
            }
            if done.contains(&shuffle_id) {
                continue;
            }
            if on_path.contains(&shuffle_id) {
                return Err(DagError::Cycle { shuffle_id });
            }
            let live = self
                .shuffle_to_map_stage
                .get(&shuffle_id)
                .map(|stage_id| &self.stages[stage_id]);
            let given = shuffle.map_stage.num_partitions;
            let known = match live {
                Some(live) => Some(live.num_partitions),
                None => self.tracker.num_maps(shuffle_id),
            };
            if let Some(known) = known.filter(|&known| known != given) {
                return Err(DagError::MapPartitionsMismatch {
                    shuffle_id,
                    known,
                    given,
                });
            }
            let given = shuffle.reduce_partitions;
            let known = match live {
                Some(live) => live.writes.map(|w| w.partitions),
                None => self.tracker.num_reduces(shuffle_id),
            };
            if let Some(known) = known.filter(|&known| known != given) {
                return Err(DagError::ReducePartitionsMismatch {
                    shuffle_id,
                    known,
                    given,
                });
            }
            on_path.insert(shuffle_id);
            stack.push((&shuffle.map_stage, 0, Some(shuffle_id)));
        }
        Ok(order)
    }

    fn new_stage(&mut self, spec: &StageSpec, writes: Option<ShuffleWrite>, job_id: u32) -> u32 {
        let id = self.next_stage_id;
        self.next_stage_id += 1;
        let kind = writes.map_or(StageKind::Result, |w| StageKind::ShuffleMap {
            shuffle_id: w.shuffle_id,
        });
        // Read order is kept (it is the glue's, e.g. a join's sides); a shuffle read
        // twice is read once.
        let mut reads: Vec<ShuffleRead> = Vec::with_capacity(spec.reads.len());
        for &shuffle_id in &spec.reads {
            if !reads.iter().any(|r| r.shuffle_id == shuffle_id) {
                let parent = &self.stages[&self.shuffle_to_map_stage[&shuffle_id]];
                reads.push(ShuffleRead {
                    shuffle_id,
                    maps: parent.num_partitions,
                });
            }
        }
        let mut parents: Vec<u32> = reads
            .iter()
            .map(|read| self.shuffle_to_map_stage[&read.shuffle_id])
            .collect();
        parents.sort_unstable();
        parents.dedup();
        self.stages.insert(
            id,
            Stage {
                id,
                name: spec.name.clone(),
                kind,
                num_partitions: spec.num_partitions,
                parents,
                writes,
                reads,
                payload: spec.payload.clone(),
                first_job_id: job_id,
                job_ids: BTreeSet::new(),
                next_attempt: 0,
                attempts: BTreeMap::new(),
                pending_partitions: BTreeSet::new(),
                failed_attempt_ids: BTreeSet::new(),
                result_job: None,
            },
        );
        id
    }

    /// A map stage for a shuffle with no live stage. A shuffle the tracker still
    /// holds (an ended job computed it) keeps its outputs: the stage computes only
    /// what is missing.
    fn new_shuffle_map_stage(&mut self, shuffle: &ShuffleSpec, job_id: u32) {
        let writes = ShuffleWrite {
            shuffle_id: shuffle.shuffle_id,
            partitions: shuffle.reduce_partitions,
        };
        let id = self.new_stage(&shuffle.map_stage, Some(writes), job_id);
        let kind = self.stages[&id].kind;
        self.shuffle_to_map_stage.insert(shuffle.shuffle_id, id);
        if self.tracker.register_shuffle(
            shuffle.shuffle_id,
            shuffle.map_stage.num_partitions,
            shuffle.reduce_partitions,
        ) {
            info!(
                "Registering {} ({}) as input to shuffle {}",
                stage_label(kind, id),
                shuffle.map_stage.name,
                shuffle.shuffle_id
            );
        }
    }

    /// Adds the job to the stage and every ancestor of it.
    fn update_job_id_stage_id_maps(&mut self, job_id: u32, stage_id: u32) {
        let mut todo = vec![stage_id];
        while let Some(id) = todo.pop() {
            let stage = self.stages.get_mut(&id).expect("a stage's parents live");
            if stage.job_ids.insert(job_id) {
                self.job_to_stages.entry(job_id).or_default().insert(id);
                todo.extend(stage.parents.iter().copied());
            }
        }
    }

    /// Spark's list of stages: `List(ShuffleMapStage 0, ShuffleMapStage 1)`.
    fn stage_list(&self, ids: impl IntoIterator<Item = u32>) -> String {
        let names: Vec<String> = ids
            .into_iter()
            .map(|id| self.stages[&id].to_string())
            .collect();
        format!("List({})", names.join(", "))
    }

    /// Cancels a job that is running (the seeds' `cancelJob`): it fails with "Job N
    /// cancelled" and the reason, and its stages that no other job needs are cancelled.
    /// False if no such job is active.
    pub fn cancel_job(&mut self, now: Instant, job_id: u32, reason: Option<&str>) -> bool {
        info!("Asked to cancel job {job_id}");
        if !self.jobs.contains_key(&job_id) {
            debug!("Trying to cancel unregistered job {job_id}");
            return false;
        }
        let error = match reason {
            Some(reason) => format!("Job {job_id} cancelled {reason}"),
            None => format!("Job {job_id} cancelled"),
        };
        self.fail_job_and_independent_stages(now, job_id, &error);
        true
    }

    /// Forgets a shuffle's outputs once no job will read it again (Spark's context
    /// cleaner); false while a live stage writes it, or if it is not registered.
    pub fn unregister_shuffle(&mut self, shuffle_id: u32) -> bool {
        !self.shuffle_to_map_stage.contains_key(&shuffle_id)
            && self.tracker.unregister_shuffle(shuffle_id)
    }

    // ---- submitting stages ---------------------------------------------------------

    /// The earliest active job that needs the stage.
    fn active_job_for_stage(&self, stage_id: u32) -> Option<u32> {
        self.stages
            .get(&stage_id)?
            .job_ids
            .iter()
            .copied()
            .find(|job| self.jobs.contains_key(job))
    }

    /// The parents whose outputs are not all registered (the seeds'
    /// `getMissingParentStages`), in id order.
    fn missing_parent_stages(&self, stage_id: u32) -> Vec<u32> {
        self.stages[&stage_id]
            .parents
            .iter()
            .copied()
            .filter(|parent| {
                let shuffle_id = self.stages[parent].shuffle_id().expect("parents map");
                !self.tracker.is_available(shuffle_id)
            })
            .collect()
    }

    /// Submits a stage, after its missing parents (the seeds' `submitStage`).
    fn submit_stage(&mut self, now: Instant, stage_id: u32) {
        let Some(job_id) = self.active_job_for_stage(stage_id) else {
            self.abort_stage(
                now,
                stage_id,
                &format!("No active job for stage {stage_id}"),
            );
            return;
        };
        let stage = &self.stages[&stage_id];
        debug!(
            "submitStage({stage} (name={};jobs={:?}))",
            stage.name, stage.job_ids
        );
        if self.waiting.contains(&stage_id)
            || self.running.contains(&stage_id)
            || self.failed.contains(&stage_id)
        {
            return;
        }
        // A stage with nothing left to compute needs nothing of its parents: a map stage
        // marked failed whose outputs all came in since (a copy of the task that could
        // not fetch succeeded) is done, even while a parent runs again for an output
        // lost meanwhile. Waiting for that parent, it would hang its jobs should the
        // parent's attempt be aborted (they would not depend on the parent, reading an
        // available shuffle, and would not fail either).
        let missing = if self.find_missing_partitions(stage_id).is_empty() {
            Vec::new()
        } else {
            self.missing_parent_stages(stage_id)
        };
        debug!("missing: {}", self.stage_list(missing.iter().copied()));
        if missing.is_empty() {
            info!(
                "Submitting {stage} ({}), which has no missing parents",
                stage.name
            );
            self.submit_missing_tasks(now, stage_id, job_id);
        } else {
            for parent in missing {
                self.submit_stage(now, parent);
            }
            self.waiting.insert(stage_id);
        }
    }

    /// The partitions a stage has yet to compute (Spark's `findMissingPartitions`).
    fn find_missing_partitions(&self, stage_id: u32) -> Vec<u32> {
        let stage = &self.stages[&stage_id];
        match stage.kind {
            StageKind::ShuffleMap { shuffle_id } => self.tracker.missing_partitions(shuffle_id),
            StageKind::Result => match stage.result_job.and_then(|job| self.jobs.get(&job)) {
                Some(job) => (0..stage.num_partitions)
                    .filter(|&p| job.results[p as usize].is_none())
                    .collect(),
                None => (0..stage.num_partitions).collect(),
            },
        }
    }

    /// Submits a new attempt of a stage whose parents are available, for its missing
    /// partitions only (the seeds' `submitMissingTasks`).
    fn submit_missing_tasks(&mut self, now: Instant, stage_id: u32, job_id: u32) {
        debug!("submitMissingTasks({})", self.stages[&stage_id]);
        let partitions = self.find_missing_partitions(stage_id);
        self.running.insert(stage_id);
        let epoch = self.tracker.epoch();
        let stage = self
            .stages
            .get_mut(&stage_id)
            .expect("submitted stages live");
        let attempt = stage.next_attempt;
        stage.next_attempt += 1;
        stage.attempts.insert(
            attempt,
            Attempt {
                partitions: partitions.clone(),
                epoch,
                submitted_at: now,
            },
        );
        if stage.shuffle_id().is_some() {
            stage.pending_partitions = partitions.iter().copied().collect();
        }
        let id = TaskSetId {
            stage_id,
            stage_attempt_id: attempt,
        };
        let (kind, name) = (stage.kind, stage.name.clone());
        self.push_event(SchedulerEvent::StageSubmitted {
            task_set: id,
            job_id,
            num_tasks: partitions.len() as u32,
        });
        if partitions.is_empty() {
            // The stage's outputs came in since it was planned (another attempt or job
            // computed them): it is done without running anything.
            debug!("Stage {} is actually done", stage_label(kind, stage_id));
            match kind {
                StageKind::ShuffleMap { .. } => {
                    self.process_shuffle_map_stage_completion(now, stage_id)
                }
                StageKind::Result => {
                    self.mark_stage_as_finished(now, stage_id, None);
                    self.submit_waiting_child_stages(now, stage_id);
                }
            }
            return;
        }
        let first: Vec<String> = partitions.iter().take(15).map(u32::to_string).collect();
        info!(
            "Submitting {} missing tasks from {} ({name}) (first 15 tasks are for partitions Vector({}))",
            partitions.len(),
            stage_label(kind, stage_id),
            first.join(", ")
        );
        let stage = &self.stages[&stage_id];
        let job = &self.jobs[&job_id];
        let task_set = StageTaskSet {
            id,
            job_id,
            name,
            kind,
            partitions,
            writes: stage.writes,
            reads: stage.reads.clone(),
            epoch,
            payload: stage.payload.clone(),
            pool: job.pool.clone(),
            properties: job.properties.clone(),
        };
        self.actions.push_back(DagAction::SubmitTaskSet(task_set));
    }

    /// Submits the waiting stages that read the parent's shuffle.
    fn submit_waiting_child_stages(&mut self, now: Instant, parent: u32) {
        let mut children: Vec<u32> = self
            .waiting
            .iter()
            .copied()
            .filter(|child| self.stages[child].parents.contains(&parent))
            .collect();
        for child in &children {
            self.waiting.remove(child);
        }
        children.sort_by_key(|id| (self.stages[id].first_job_id, *id));
        for child in children {
            self.submit_stage(now, child);
        }
    }

    /// A stage attempt ended: successfully, or with `error`. It runs no more.
    fn mark_stage_as_finished(&mut self, now: Instant, stage_id: u32, error: Option<&str>) {
        let job_id = self.active_job_for_stage(stage_id);
        let stage = self
            .stages
            .get_mut(&stage_id)
            .expect("finished stages live");
        let attempt = stage.latest_attempt().unwrap_or(0);
        let took = stage.attempts.get(&attempt).map_or(0, |a| {
            now.saturating_duration_since(a.submitted_at).as_millis()
        });
        match error {
            None => {
                info!("{stage} ({}) finished in {took} ms", stage.name);
                // Only consecutive failures count: a stage that many jobs reuse must
                // not fail for unrelated losses spread over its life.
                stage.failed_attempt_ids.clear();
            }
            Some(error) => info!(
                "{stage} ({}) failed in {took} ms due to {error}",
                stage.name
            ),
        }
        let event = SchedulerEvent::StageCompleted {
            task_set: TaskSetId {
                stage_id,
                stage_attempt_id: attempt,
            },
            job_id: job_id.unwrap_or(stage.first_job_id),
            failure: error.map(str::to_owned),
        };
        self.push_event(event);
        self.running.remove(&stage_id);
    }

    fn process_shuffle_map_stage_completion(&mut self, now: Instant, stage_id: u32) {
        self.mark_stage_as_finished(now, stage_id, None);
        info!("looking for newly runnable stages");
        info!("running: {}", self.stage_set(&self.running));
        info!("waiting: {}", self.stage_set(&self.waiting));
        info!("failed: {}", self.stage_set(&self.failed));
        // Executors may have cached this shuffle's statuses while outputs were missing
        // (a reader of an earlier attempt asked): the new epoch makes the readers to
        // come fetch them again.
        self.tracker.increment_epoch();
        let stage = &self.stages[&stage_id];
        let shuffle_id = stage.shuffle_id().expect("a map stage");
        if self.tracker.is_available(shuffle_id) {
            self.submit_waiting_child_stages(now, stage_id);
        } else {
            let missing: Vec<String> = self
                .tracker
                .missing_partitions(shuffle_id)
                .iter()
                .map(u32::to_string)
                .collect();
            info!(
                "Resubmitting {stage} ({}) because some of its tasks had failed: {}",
                stage.name,
                missing.join(", ")
            );
            self.submit_stage(now, stage_id);
        }
    }

    fn stage_set(&self, ids: &BTreeSet<u32>) -> String {
        let names: Vec<String> = ids.iter().map(|id| self.stages[id].to_string()).collect();
        format!("Set({})", names.join(", "))
    }

    // ---- task ends -----------------------------------------------------------------

    /// A task of a stage attempt ended (the seeds' `handleTaskCompletion`). `index` is
    /// the task's index in the attempt's task set (the task scheduler's
    /// [`SchedulerEvent::TaskEnd`] index). Ends of stages no active job needs any more
    /// are ignored.
    pub fn task_ended(
        &mut self,
        now: Instant,
        task_set: TaskSetId,
        index: u32,
        completion: TaskCompletion,
    ) {
        let TaskSetId {
            stage_id,
            stage_attempt_id: attempt,
        } = task_set;
        let Some(stage) = self.stages.get(&stage_id) else {
            debug!("Ignoring the end of a task of stage {stage_id}, which no active job needs");
            return;
        };
        let Some(&partition) = stage
            .attempts
            .get(&attempt)
            .and_then(|a| a.partitions.get(index as usize))
        else {
            warn!("Ignoring the end of task {index} of stage {task_set}, which has no such task");
            return;
        };
        let succeeded = matches!(
            completion,
            TaskCompletion::MapOutput(_) | TaskCompletion::Result(_)
        );
        if succeeded
            && stage
                .latest_attempt()
                .is_some_and(|latest| attempt < latest)
        {
            // A newer attempt may still be about to run this partition.
            self.actions.push_back(DagAction::PartitionCompleted {
                stage_id,
                partition_id: partition,
            });
        }
        match completion {
            TaskCompletion::Result(value) => self.handle_result(now, stage_id, partition, value),
            TaskCompletion::MapOutput(status) => {
                self.handle_map_output(now, task_set, partition, status)
            }
            TaskCompletion::Failed => {}
            TaskCompletion::FetchFailed(failure) => {
                self.handle_fetch_failed(now, task_set, partition, failure)
            }
        }
    }

    fn handle_result(&mut self, now: Instant, stage_id: u32, partition: u32, value: Bytes) {
        let stage = &self.stages[&stage_id];
        let task = TaskLabel(stage.kind, stage_id, partition);
        if stage.kind != StageKind::Result {
            warn!("Ignoring a result for {task}: the stage writes map outputs");
            return;
        }
        let Some(job_id) = stage.result_job else {
            info!("Ignoring result from {task} because its job has finished");
            return;
        };
        let job = self
            .jobs
            .get_mut(&job_id)
            .expect("a result stage's job is active");
        let slot = &mut job.results[partition as usize];
        if slot.is_some() {
            // Another attempt's result for the partition came first: one per partition.
            return;
        }
        *slot = Some(value);
        job.num_finished += 1;
        if job.num_finished < job.results.len() {
            return;
        }
        self.mark_stage_as_finished(now, stage_id, None);
        self.cancel_running_independent_stages(now, job_id, &format!("Job {job_id} is finished."));
        let job = self.cleanup_state_for_job_and_independent_stages(job_id);
        info!("Job {job_id} is finished. Cancelling potential speculative or zombie tasks for this job");
        self.actions.push_back(DagAction::CancelStage {
            stage_id,
            reason: "Stage finished".to_owned(),
        });
        let results = job
            .results
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect();
        self.end_job(now, job_id, &job.name, job.submitted_at, Ok(results));
    }

    fn handle_map_output(
        &mut self,
        now: Instant,
        task_set: TaskSetId,
        partition: u32,
        status: MapStatus,
    ) {
        let stage_id = task_set.stage_id;
        let stage = self
            .stages
            .get_mut(&stage_id)
            .expect("checked by the caller");
        let task = TaskLabel(stage.kind, stage_id, partition);
        let Some(shuffle_id) = stage.shuffle_id() else {
            warn!("Ignoring a map output for {task}: the stage computes results");
            return;
        };
        stage.pending_partitions.remove(&partition);
        let task_epoch = stage.attempts[&task_set.stage_attempt_id].epoch;
        let executor_id = &status.location.executor_id;
        debug!("ShuffleMapTask finished on {executor_id}");
        if self
            .executor_failure_epoch
            .get(executor_id)
            .is_some_and(|&lost_at| task_epoch <= lost_at)
        {
            // The task started before its executor was known lost: its files may be
            // gone with it.
            info!("Ignoring possibly bogus {task} completion from executor {executor_id}");
        } else {
            self.tracker
                .register_map_output(shuffle_id, partition, status);
        }
        let stage = &self.stages[&stage_id];
        if self.running.contains(&stage_id) && stage.pending_partitions.is_empty() {
            self.process_shuffle_map_stage_completion(now, stage_id);
        }
    }

    fn handle_fetch_failed(
        &mut self,
        now: Instant,
        task_set: TaskSetId,
        partition: u32,
        failure: FetchFailure,
    ) {
        let TaskSetId {
            stage_id: failed_id,
            stage_attempt_id: attempt,
        } = task_set;
        let max_attempts = self.config.max_consecutive_stage_attempts;
        let stage = self
            .stages
            .get_mut(&failed_id)
            .expect("checked by the caller");
        let task = TaskLabel(stage.kind, failed_id, partition);
        // Only a shuffle the stage reads can be at fault; for any other the stage is
        // retried without blaming a map stage.
        let map_id = self
            .shuffle_to_map_stage
            .get(&failure.shuffle_id)
            .copied()
            .filter(|map| stage.parents.contains(map));
        let latest = stage.latest_attempt().unwrap_or(0);
        if attempt != latest {
            info!(
                "Ignoring fetch failure from {task} as it's from {stage} attempt {attempt} and there is a more recent attempt for that stage (attempt {latest}) running"
            );
            return;
        }
        let task_epoch = stage.attempts[&attempt].epoch;
        stage.failed_attempt_ids.insert(attempt);
        let should_abort = stage.failed_attempt_ids.len() >= max_attempts as usize;
        let failed_label = format!("{stage} ({})", stage.name);
        let map_label = match map_id {
            Some(map) => format!("{} ({})", self.stages[&map], self.stages[&map].name),
            None => format!("shuffle {}", failure.shuffle_id),
        };

        if self.running.contains(&failed_id) {
            info!("Marking {failed_label} as failed due to a fetch failure from {map_label}");
            self.mark_stage_as_finished(now, failed_id, Some(&failure.message));
        } else {
            debug!("Received fetch failure from {task}, but it's from {failed_label} which is no longer running");
        }
        if let (Some(_), Some(map_index), Some(address)) =
            (map_id, failure.map_index, &failure.address)
        {
            self.tracker
                .unregister_map_output(failure.shuffle_id, map_index, address);
        }

        if should_abort {
            let reason = format!(
                "{failed_label} has failed the maximum allowable number of times: {max_attempts}. Most recent failure reason:\n{}",
                failure.message
            );
            self.abort_stage(now, failed_id, &reason);
        } else {
            let no_resubmit_enqueued = !self.failed.contains(&failed_id);
            self.failed.insert(failed_id);
            if let Some(map) = map_id {
                self.failed.insert(map);
            }
            if no_resubmit_enqueued {
                info!("Resubmitting {map_label} and {failed_label} due to fetch failure");
                self.resubmit_at.insert(now + self.config.resubmit_timeout);
            }
        }

        // The executor the block was asked of is presumed to have lost all its shuffle
        // files (it serves its own blocks; there is no external shuffle service).
        if let Some(address) = &failure.address {
            self.remove_executor_and_unregister_outputs(
                &address.executor_id,
                None,
                Some(task_epoch),
            );
        }
    }

    /// The task scheduler gave up on a task set (a task failed `task.maxFailures`
    /// times, could run nowhere, was too large...; the seeds' `taskSetFailed`): the
    /// jobs that need its stage fail with "Job aborted due to stage failure: " and the
    /// reason. The end of an attempt that is no longer the stage's running one (a
    /// fetch-failed attempt, a cancelled stage) is ignored.
    pub fn task_set_failed(&mut self, now: Instant, task_set: TaskSetId, reason: &str) {
        let stage_id = task_set.stage_id;
        let current = self.stages.get(&stage_id).is_some_and(|stage| {
            stage.latest_attempt() == Some(task_set.stage_attempt_id)
                && self.running.contains(&stage_id)
        });
        if !current {
            debug!(
                "Ignoring the end of task set {task_set}, which no longer runs its stage: {reason}"
            );
            return;
        }
        self.abort_stage(now, stage_id, reason);
    }

    // ---- failures ------------------------------------------------------------------

    /// Fails every active job that needs the stage (the seeds' `abortStage`).
    fn abort_stage(&mut self, now: Instant, stage_id: u32, reason: &str) {
        if !self.stages.contains_key(&stage_id) {
            return;
        }
        let dependent: Vec<u32> = self
            .jobs
            .iter()
            .filter(|(_, job)| self.stage_depends_on(job.final_stage, stage_id))
            .map(|(&id, _)| id)
            .collect();
        if dependent.is_empty() {
            info!(
                "Ignoring failure of {} because all jobs depending on it are done",
                self.stages[&stage_id]
            );
        }
        let error = format!("Job aborted due to stage failure: {reason}");
        for job_id in dependent {
            self.fail_job_and_independent_stages(now, job_id, &error);
        }
        // A job that needs nothing of the stage now (what it reads of it is all there)
        // goes on, and keeps the stage; but the stage's attempt is over. Left running,
        // the stage would never be submitted again: a job that needs it later (its
        // outputs lost with an executor) would wait for it for ever.
        if self.running.contains(&stage_id) && self.stages.contains_key(&stage_id) {
            self.mark_stage_as_finished(now, stage_id, Some(reason));
        }
        // For the same reason, the stages kept by such jobs that wait for this one
        // (directly, or through other missing outputs) wait for nothing now: no active
        // job needs them (one that did failed above). Left waiting, a later job that
        // needs one would find it "waiting" and submit nothing; idle, it is submitted
        // afresh, its parents first.
        let stranded: Vec<u32> = self
            .waiting
            .iter()
            .copied()
            .filter(|&waiting| self.stage_depends_on(waiting, stage_id))
            .collect();
        for waiting in stranded {
            self.waiting.remove(&waiting);
        }
    }

    /// Whether `stage` needs `target`: it is `target`, or reaches it through map stages
    /// whose outputs are not all there (an available one needs nothing above it).
    fn stage_depends_on(&self, stage: u32, target: u32) -> bool {
        let mut seen = BTreeSet::new();
        let mut todo = vec![stage];
        while let Some(id) = todo.pop() {
            if id == target {
                return true;
            }
            if !seen.insert(id) {
                continue;
            }
            for &parent in &self.stages[&id].parents {
                let shuffle_id = self.stages[&parent].shuffle_id().expect("parents map");
                if !self.tracker.is_available(shuffle_id) {
                    todo.push(parent);
                }
            }
        }
        false
    }

    /// Cancels the running stages only this job needs.
    fn cancel_running_independent_stages(&mut self, now: Instant, job_id: u32, reason: &str) {
        let stages: Vec<u32> = self
            .job_to_stages
            .get(&job_id)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        for stage_id in stages {
            let only_this_job = self.stages[&stage_id].job_ids.len() == 1;
            if only_this_job && self.running.contains(&stage_id) {
                self.actions.push_back(DagAction::CancelStage {
                    stage_id,
                    reason: reason.to_owned(),
                });
                self.mark_stage_as_finished(now, stage_id, Some(reason));
            }
        }
    }

    fn fail_job_and_independent_stages(&mut self, now: Instant, job_id: u32, error: &str) {
        self.cancel_running_independent_stages(now, job_id, error);
        let job = self.cleanup_state_for_job_and_independent_stages(job_id);
        self.end_job(
            now,
            job_id,
            &job.name,
            job.submitted_at,
            Err(error.to_owned()),
        );
    }

    /// Forgets the job, and the stages no other job needs.
    fn cleanup_state_for_job_and_independent_stages(&mut self, job_id: u32) -> ActiveJob {
        for stage_id in self.job_to_stages.remove(&job_id).unwrap_or_default() {
            let Some(stage) = self.stages.get_mut(&stage_id) else {
                continue;
            };
            stage.job_ids.remove(&job_id);
            if stage.result_job == Some(job_id) {
                stage.result_job = None;
            }
            if stage.job_ids.is_empty() {
                let stage = self.stages.remove(&stage_id).expect("just seen");
                self.running.remove(&stage_id);
                self.waiting.remove(&stage_id);
                self.failed.remove(&stage_id);
                if let Some(shuffle_id) = stage.shuffle_id() {
                    if self.shuffle_to_map_stage.get(&shuffle_id) == Some(&stage_id) {
                        self.shuffle_to_map_stage.remove(&shuffle_id);
                    }
                }
            }
        }
        self.jobs.remove(&job_id).expect("only active jobs end")
    }

    fn end_job(
        &mut self,
        now: Instant,
        job_id: u32,
        name: &str,
        submitted_at: Instant,
        result: Result<Vec<Bytes>, String>,
    ) {
        let took = now.saturating_duration_since(submitted_at).as_secs_f64() * 1e3;
        let listener_result = match &result {
            Ok(_) => {
                info!("Job {job_id} finished: {name}, took {took:.6} ms");
                JobResult::Succeeded
            }
            Err(error) => {
                info!("Job {job_id} failed: {name}, took {took:.6} ms");
                JobResult::Failed(error.clone())
            }
        };
        self.push_event(SchedulerEvent::JobEnd {
            job_id,
            result: listener_result,
        });
        self.actions
            .push_back(DagAction::JobEnded { job_id, result });
    }

    // ---- executors -----------------------------------------------------------------

    /// An executor is gone (the seeds' `handleExecutorLost`): its map outputs went with
    /// it (flint has no external shuffle service), and with `host`, every output on
    /// that host (the whole worker is gone). Stages that need them recompute them when
    /// they next run; the epoch moves on.
    pub fn executor_lost(&mut self, executor_id: &str, host: Option<&str>) {
        self.remove_executor_and_unregister_outputs(executor_id, host, None);
    }

    /// Whether the executor holds map outputs, or was lost: what a fetch failure may
    /// blame.
    pub fn knows_executor(&self, executor_id: &str) -> bool {
        self.executor_failure_epoch.contains_key(executor_id)
            || self.tracker.has_outputs_on(executor_id)
    }

    /// An executor (re)joined: outputs it reports from now on are trusted again.
    pub fn executor_added(&mut self, executor_id: &str, host: &str) {
        if self.executor_failure_epoch.remove(executor_id).is_some() {
            info!("Host added was in lost list earlier: {host}");
        }
        self.shuffle_file_lost_epoch.remove(executor_id);
    }

    /// Marks the executor lost as of `epoch` (the task's, for a fetch failure; the
    /// current one otherwise) and unregisters its outputs, unless that was done for
    /// this epoch or a later one already.
    fn remove_executor_and_unregister_outputs(
        &mut self,
        executor_id: &str,
        host: Option<&str>,
        epoch: Option<u64>,
    ) {
        let current = epoch.unwrap_or_else(|| self.tracker.epoch());
        debug!("Considering removal of executor {executor_id}; fileLost: true, currentEpoch: {current}");
        if self
            .executor_failure_epoch
            .get(executor_id)
            .is_none_or(|&e| e < current)
        {
            self.executor_failure_epoch
                .insert(SharedStr::from(executor_id), current);
            info!("Executor lost: {executor_id} (epoch {current})");
        }
        if self
            .shuffle_file_lost_epoch
            .get(executor_id)
            .is_none_or(|&e| e < current)
        {
            self.shuffle_file_lost_epoch
                .insert(SharedStr::from(executor_id), current);
            match host {
                Some(host) => {
                    info!("Shuffle files lost for host: {host} (epoch {current})");
                    self.tracker.remove_outputs_on_host(host);
                }
                None => {
                    info!("Shuffle files lost for executor: {executor_id} (epoch {current})");
                    self.tracker.remove_outputs_on_executor(executor_id);
                }
            }
        }
    }

    fn push_event(&mut self, event: SchedulerEvent) {
        self.actions.push_back(DagAction::Event(event));
    }
}
