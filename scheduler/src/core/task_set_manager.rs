//! One task set's progress (the seeds' `TaskSetManager`): which tasks are pending, which
//! attempts run where, retries, delay scheduling, speculation and exclusion.
//!
//! A task set manager is driven by the [`crate::TaskScheduler`], which owns the cluster
//! registry it consults; it is not used on its own.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_wire::{
    FetchFailure, SharedStr, TaskDescription, TaskExtras, TaskFailureKind, TaskName, TaskState,
};
use tracing::{debug, error, info, warn};

use crate::core::accumulators::JobRun;
use crate::core::config::SpeculationConfig;
use crate::core::events::{Action, SchedulerEvent, TaskEndReason, TaskResult};
use crate::core::exclusion::{ExclusionPolicy, TaskSetExclusion};
use crate::core::fx_hash::{FxHashMap, FxHashSet};
use crate::core::id_window::Attempts;
use crate::core::locality::{TaskLocality, TaskLocation};
use crate::core::pending::{any_pending, dequeue, PendingTasks};
use crate::core::registry::ExecutorRegistry;
use crate::core::speculation::{min_finished_for_speculation, speculation_threshold};
use crate::core::task_set::{TaskSet, TaskSetId, TaskSpec};

/// The reason a killed speculative or duplicate attempt is given.
pub const ANOTHER_ATTEMPT_SUCCEEDED: &str = "another attempt succeeded";
/// The reason running attempts of an aborted or cancelled task set are killed with.
pub const STAGE_CANCELLED: &str = "Stage cancelled";

/// What the scheduler knows of one task between launches: a few bytes, however many
/// tasks are pending.
#[derive(Debug, Clone, Copy, Default)]
struct TaskRecord {
    copies_running: u8,
    successful: bool,
    /// Marked for a speculative copy and not yet given one.
    speculatable: bool,
    /// Counted failures.
    failures: u16,
    /// Attempts launched so far: the next attempt's number.
    attempts: u32,
}

impl TaskRecord {
    #[inline]
    fn needs_launch(&self) -> bool {
        self.copies_running == 0 && !self.successful
    }
}

/// A running attempt.
#[derive(Debug, Clone)]
pub(crate) struct RunningAttempt {
    pub index: u32,
    pub attempt: u32,
    pub executor_id: SharedStr,
    pub host: SharedStr,
    pub launched_at: Instant,
}

/// A task attempt's failure, as the scheduler hands it to its task set.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub kind: TaskFailureKind,
    pub message: String,
    pub counts: bool,
}

/// Settings a task set manager is created with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ManagerSettings {
    pub max_task_failures: u32,
    pub task_cpus: u32,
    pub locality_wait: Duration,
    pub exclusion: ExclusionPolicy,
}

/// Delay scheduling: the locality level a task set is at, and since when.
#[derive(Debug)]
struct DelayScheduling {
    levels: Vec<TaskLocality>,
    current: usize,
    last_launch: Instant,
    wait: Duration,
}

/// One task set's scheduling state.
#[derive(Debug)]
pub struct TaskSetManager {
    id: TaskSetId,
    name: String,
    job_id: u32,
    /// The run of its job it was submitted in, which its partitions' accumulator
    /// updates are merged under.
    job_run: JobRun,
    final_stage: bool,
    pool: SharedStr,
    payload: Bytes,
    /// The task set's local properties as each task's description holds them: shared,
    /// so that launching a task copies a pointer, not the properties.
    extras: Option<Arc<TaskExtras>>,
    specs: Vec<TaskSpec>,
    tasks: Vec<TaskRecord>,
    pending: PendingTasks,
    /// Tasks marked for a speculative copy, with the host of the copy already running.
    speculatable: Vec<(u32, SharedStr)>,
    /// Hosts where attempts of a task failed, for tasks not yet successful that have
    /// failed (Spark's `hasAttemptOnHost`: a speculative copy avoids them too).
    failed_on_hosts: FxHashMap<u32, Vec<SharedStr>>,
    running: Attempts<RunningAttempt>,
    successful: u32,
    /// Run times of successful tasks, in nanoseconds, for the speculation median.
    successful_durations: Vec<u64>,
    zombie: bool,
    failure: Option<String>,
    /// Whether `failure` is a fetch failure's: the stage runs again, under the same job.
    fetch_failed: bool,
    completion_reported: bool,
    delay: DelayScheduling,
    exclusion: TaskSetExclusion,
    settings: ManagerSettings,
    /// "Lost task" warnings: an executor lost with many tasks (one that registered
    /// with many cores and never ran them, say) would otherwise log one line each.
    lost_task_warnings: flint_rpc::log_budget::LogBudget,
}

impl TaskSetManager {
    pub(crate) fn new(
        task_set: TaskSet,
        pool: SharedStr,
        settings: ManagerSettings,
        registry: &ExecutorRegistry,
        now: Instant,
    ) -> Self {
        let TaskSet {
            id,
            job_id,
            final_stage,
            pool: _,
            payload,
            properties,
            tasks: specs,
        } = task_set;
        let without_prefs = specs
            .iter()
            .filter(|spec| spec.preferred_locations.is_empty())
            .count();
        let mut pending = PendingTasks::with_capacity(specs.len(), without_prefs);
        // Highest index first, so that the stacks launch the lowest index first.
        for (index, spec) in specs.iter().enumerate().rev() {
            pending.add(index as u32, &spec.preferred_locations, registry);
        }
        let mut manager = TaskSetManager {
            id,
            name: format!("TaskSet_{id}"),
            job_id,
            job_run: JobRun::NONE,
            final_stage,
            pool,
            payload,
            extras: TaskExtras {
                properties,
                ..TaskExtras::NONE
            }
            .shared(),
            tasks: vec![TaskRecord::default(); specs.len()],
            specs,
            pending,
            speculatable: Vec::new(),
            failed_on_hosts: FxHashMap::default(),
            running: Attempts::default(),
            successful: 0,
            successful_durations: Vec::new(),
            zombie: false,
            failure: None,
            fetch_failed: false,
            completion_reported: false,
            lost_task_warnings: Default::default(),
            delay: DelayScheduling {
                levels: Vec::new(),
                current: 0,
                last_launch: now,
                wait: settings.locality_wait,
            },
            exclusion: TaskSetExclusion::new(settings.exclusion),
            settings,
        };
        manager.delay.levels = manager.compute_valid_locality_levels(registry);
        if manager.specs.is_empty() {
            manager.zombie = true;
        }
        manager
    }

    /// The stage attempt.
    pub fn id(&self) -> TaskSetId {
        self.id
    }

    /// The name pools order it by, `TaskSet_1.0`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job the stage belongs to.
    pub fn job_id(&self) -> u32 {
        self.job_id
    }

    /// The run of its job it was submitted in ([`JobRun::NONE`] until said).
    pub(crate) fn job_run(&self) -> JobRun {
        self.job_run
    }

    /// Says which run of its job it was submitted in.
    pub(crate) fn set_job_run(&mut self, run: JobRun) {
        self.job_run = run;
    }

    /// Whether the job ends when this task set completes.
    pub fn is_final_stage(&self) -> bool {
        self.final_stage
    }

    /// The pool it runs in.
    pub fn pool(&self) -> &SharedStr {
        &self.pool
    }

    /// The number of tasks.
    pub fn num_tasks(&self) -> usize {
        self.specs.len()
    }

    /// Tasks that have succeeded.
    pub fn successful_tasks(&self) -> usize {
        self.successful as usize
    }

    /// Attempts running now.
    pub fn running_tasks(&self) -> usize {
        self.running.len()
    }

    /// Whether it launches no more tasks: all tasks succeeded, or it was aborted.
    pub fn is_zombie(&self) -> bool {
        self.zombie
    }

    /// The abort message, if it was aborted.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Whether it ended because a task could not fetch its input (its stage is
    /// submitted again under the same job), rather than aborted.
    pub fn ended_by_fetch_failure(&self) -> bool {
        self.fetch_failed
    }

    /// Counted failures of task `index`.
    pub fn task_failures(&self, index: u32) -> u32 {
        self.tasks
            .get(index as usize)
            .map_or(0, |t| u32::from(t.failures))
    }

    /// The locality levels it offers at, most local first.
    pub fn locality_levels(&self) -> &[TaskLocality] {
        &self.delay.levels
    }

    /// Whether the executor (or its host) gets none of this task set's tasks.
    pub fn is_excluded(&self, executor_id: &str, host: &str) -> bool {
        self.exclusion.is_excluded(executor_id, host)
    }

    /// Whether task `index` may not run on the executor or its host.
    pub fn is_task_excluded(&self, index: u32, executor_id: &str, host: &str) -> bool {
        self.exclusion.is_task_excluded(index, executor_id, host)
    }

    /// Tasks neither running nor successful (an upper bound on what it can launch, but
    /// for speculative copies).
    pub(crate) fn pending_tasks(&self) -> usize {
        if self.zombie {
            return 0;
        }
        (self.specs.len() - self.successful as usize).saturating_sub(self.running.len())
    }

    /// Makes room for `launches` more running attempts, so that a big offer round does
    /// not rehash the running map as it goes.
    pub(crate) fn reserve_launches(&mut self, launches: usize) {
        self.running.reserve(launches.min(self.pending_tasks()));
    }

    /// The partition task `index` computes.
    pub(crate) fn partition_id(&self, index: u32) -> u32 {
        self.specs
            .get(index as usize)
            .map_or(index, |spec| spec.partition_id)
    }

    pub(crate) fn running_attempt(&self, task_id: u64) -> Option<&RunningAttempt> {
        self.running.get(task_id)
    }

    /// Whether it is done with and can be dropped: no more launches, nothing running.
    pub(crate) fn is_finished(&self) -> bool {
        self.zombie && self.running.is_empty()
    }

    /// Marks the completion (StageCompleted) reported; true the first time once zombie.
    pub(crate) fn take_completion(&mut self) -> bool {
        if self.zombie && !self.completion_reported {
            self.completion_reported = true;
            true
        } else {
            false
        }
    }

    // ---- locality ------------------------------------------------------------------

    /// Spark's `computeValidLocalityLevels`: the levels at which some pending task could
    /// run on a live executor. A level whose wait is zero is skipped.
    fn compute_valid_locality_levels(&mut self, registry: &ExecutorRegistry) -> Vec<TaskLocality> {
        let mut levels = Vec::with_capacity(5);
        let waits = !self.delay.wait.is_zero();
        let p = &self.pending;
        if waits && p.for_executor.keys().any(|e| registry.is_executor_alive(e)) {
            levels.push(TaskLocality::ProcessLocal);
        }
        if waits
            && p.for_host
                .keys()
                .any(|h| registry.has_executors_alive_on_host(h))
        {
            levels.push(TaskLocality::NodeLocal);
        }
        if !p.no_prefs.is_empty() {
            levels.push(TaskLocality::NoPref);
        }
        if waits
            && p.for_rack
                .keys()
                .any(|r| registry.has_host_alive_on_rack(r))
        {
            levels.push(TaskLocality::RackLocal);
        }
        levels.push(TaskLocality::Any);
        levels
    }

    /// Recomputes the levels after executors came or went, staying at the same level.
    pub(crate) fn recompute_locality(&mut self, registry: &ExecutorRegistry) {
        let previous = self.delay.levels[self.delay.current];
        self.delay.levels = self.compute_valid_locality_levels(registry);
        self.delay.current = self.locality_index(previous);
    }

    fn locality_index(&self, locality: TaskLocality) -> usize {
        self.delay
            .levels
            .iter()
            .position(|&l| l >= locality)
            .unwrap_or(self.delay.levels.len() - 1)
    }

    /// Spark's `getAllowedLocalityLevel`: the loosest level allowed now. A level with
    /// nothing left to launch is skipped at once; otherwise the task set waits there
    /// `locality.wait` after its last launch before moving to the next.
    fn allowed_locality(&mut self, now: Instant) -> TaskLocality {
        let tasks = &self.tasks;
        let needs_launch = |i: u32| tasks[i as usize].needs_launch();
        while self.delay.current + 1 < self.delay.levels.len() {
            let more = match self.delay.levels[self.delay.current] {
                TaskLocality::ProcessLocal => {
                    any_pending(&mut self.pending.for_executor, needs_launch)
                }
                TaskLocality::NodeLocal => any_pending(&mut self.pending.for_host, needs_launch),
                TaskLocality::NoPref => !self.pending.no_prefs.is_empty(),
                TaskLocality::RackLocal => any_pending(&mut self.pending.for_rack, needs_launch),
                TaskLocality::Any => false,
            };
            // As Spark's getLocalityWait: NO_PREF is no level to wait at (its tasks launch
            // wherever it is allowed, and waiting there would only hold back tasks that
            // need a looser level).
            let wait = match self.delay.levels[self.delay.current] {
                TaskLocality::NoPref => Duration::ZERO,
                _ => self.delay.wait,
            };
            if !more {
                self.delay.last_launch = now;
                self.delay.current += 1;
            } else if now.saturating_duration_since(self.delay.last_launch) >= wait {
                // Move on, and start the next level's wait from when this one ran out.
                self.delay.last_launch += wait;
                self.delay.current += 1;
            } else {
                return self.delay.levels[self.delay.current];
            }
        }
        self.delay.levels[self.delay.current]
    }

    /// When delay scheduling will next allow a less local level, if the task set is
    /// waiting at one.
    pub(crate) fn locality_deadline(&self) -> Option<Instant> {
        (!self.zombie && self.delay.current + 1 < self.delay.levels.len()).then(|| {
            match self.delay.levels[self.delay.current] {
                // Passed at the next offer: nothing to wait for.
                TaskLocality::NoPref => self.delay.last_launch,
                _ => self.delay.last_launch + self.delay.wait,
            }
        })
    }

    // ---- launching -----------------------------------------------------------------

    /// Spark's `dequeueTask`: a task for this executor at `max_locality` or closer, then
    /// a speculative copy.
    fn dequeue_task(
        &mut self,
        executor_id: &str,
        host: &str,
        max_locality: TaskLocality,
        registry: &ExecutorRegistry,
    ) -> Option<(u32, TaskLocality, bool)> {
        let tasks = &self.tasks;
        let exclusion = &self.exclusion;
        let needs_launch = |i: u32| tasks[i as usize].needs_launch();
        let excluded = |i: u32| exclusion.is_task_excluded(i, executor_id, host);
        let pending = &mut self.pending;

        if let Some(list) = pending.for_executor.get_mut(executor_id) {
            if let Some(i) = dequeue(list, needs_launch, excluded) {
                return Some((i, TaskLocality::ProcessLocal, false));
            }
        }
        if TaskLocality::NodeLocal.is_allowed_by(max_locality) {
            if let Some(list) = pending.for_host.get_mut(host) {
                if let Some(i) = dequeue(list, needs_launch, excluded) {
                    return Some((i, TaskLocality::NodeLocal, false));
                }
            }
        }
        if TaskLocality::NoPref.is_allowed_by(max_locality) {
            // As in Spark: a task with no preference launches as PROCESS_LOCAL.
            if let Some(i) = dequeue(&mut pending.no_prefs, needs_launch, excluded) {
                return Some((i, TaskLocality::ProcessLocal, false));
            }
        }
        if TaskLocality::RackLocal.is_allowed_by(max_locality) {
            if let Some(list) = registry
                .rack_of(host)
                .and_then(|rack| pending.for_rack.get_mut(rack))
            {
                if let Some(i) = dequeue(list, needs_launch, excluded) {
                    return Some((i, TaskLocality::RackLocal, false));
                }
            }
        }
        if TaskLocality::Any.is_allowed_by(max_locality) {
            if let Some(i) = dequeue(&mut pending.all, needs_launch, excluded) {
                return Some((i, TaskLocality::Any, false));
            }
        }
        if self.speculatable.is_empty() {
            return None;
        }
        self.dequeue_speculative(executor_id, host, max_locality, registry)
            .map(|(i, locality)| (i, locality, true))
    }

    /// A task marked speculatable that may run here: not already on this host, not
    /// excluded here, and close enough.
    fn dequeue_speculative(
        &mut self,
        executor_id: &str,
        host: &str,
        max_locality: TaskLocality,
        registry: &ExecutorRegistry,
    ) -> Option<(u32, TaskLocality)> {
        let tasks = &mut self.tasks;
        // Drop marks of tasks that have since succeeded or stopped running.
        self.speculatable.retain(|(i, _)| {
            let task = &mut tasks[*i as usize];
            let keep = !task.successful && task.copies_running > 0;
            task.speculatable &= keep;
            keep
        });
        let rack = registry.rack_of(host);
        for position in 0..self.speculatable.len() {
            let (index, ref running_on) = self.speculatable[position];
            let failed_here = || {
                self.failed_on_hosts
                    .get(&index)
                    .is_some_and(|hosts| hosts.iter().any(|h| &**h == host))
            };
            if &**running_on == host
                || self.exclusion.is_task_excluded(index, executor_id, host)
                || failed_here()
            {
                continue;
            }
            let locations = &self.specs[index as usize].preferred_locations;
            // As Spark does, a copy of a task without preferences launches where NO_PREF
            // is allowed, and as PROCESS_LOCAL: it must not move the task set's delay
            // scheduling past its local levels.
            if locations.is_empty() && !TaskLocality::NoPref.is_allowed_by(max_locality) {
                continue;
            }
            let locality = if locations.is_empty()
                || locations.iter().any(|l| matches!(l, TaskLocation::Executor { executor_id: e, .. } if &**e == executor_id))
            {
                TaskLocality::ProcessLocal
            } else if locations.iter().any(|l| &**l.host() == host) {
                TaskLocality::NodeLocal
            } else if rack.is_some() && locations.iter().any(|l| registry.rack_of(l.host()) == rack) {
                TaskLocality::RackLocal
            } else {
                TaskLocality::Any
            };
            if locality.is_allowed_by(max_locality) {
                self.speculatable.remove(position);
                self.tasks[index as usize].speculatable = false;
                return Some((index, locality));
            }
        }
        None
    }

    /// Spark's `resourceOffer`: a task to launch on one core slot of the executor, at
    /// `max_locality` or closer, or `None`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn resource_offer(
        &mut self,
        now: Instant,
        executor_id: &SharedStr,
        host: &SharedStr,
        max_locality: TaskLocality,
        registry: &ExecutorRegistry,
        next_task_id: &mut u64,
        actions: &mut VecDeque<Action>,
        task_events: bool,
    ) -> Option<TaskDescription> {
        if self.zombie || self.exclusion.is_excluded(executor_id, host) {
            return None;
        }
        let allowed = if max_locality == TaskLocality::NoPref {
            max_locality
        } else {
            self.allowed_locality(now).min(max_locality)
        };
        let (index, locality, speculative) =
            self.dequeue_task(executor_id, host, allowed, registry)?;

        let task_id = *next_task_id;
        *next_task_id += 1;
        let record = &mut self.tasks[index as usize];
        let attempt = record.attempts;
        record.attempts += 1;
        record.copies_running += 1;
        self.running.insert(
            task_id,
            RunningAttempt {
                index,
                attempt,
                executor_id: executor_id.clone(),
                host: host.clone(),
                launched_at: now,
            },
        );
        // NO_PREF launches say nothing about how long to wait for locality.
        if max_locality != TaskLocality::NoPref {
            self.delay.current = self.locality_index(locality);
            self.delay.last_launch = now;
        }

        let spec = &self.specs[index as usize];
        let serialized_task = spec.payload.as_ref().unwrap_or(&self.payload).clone();
        debug!(
            "Starting task {index}.{attempt} in stage {} (TID {task_id}, {host}, executor {executor_id}, partition {}, {locality}, {} bytes)",
            self.id,
            spec.partition_id,
            serialized_task.len()
        );
        if task_events {
            actions.push_back(Action::Event(SchedulerEvent::TaskStart {
                task_id,
                task_set: self.id,
                index,
                attempt,
                executor_id: executor_id.clone(),
                host: host.clone(),
                locality,
                speculative,
            }));
        }
        Some(TaskDescription {
            task_id,
            attempt_number: attempt,
            executor_id: executor_id.clone(),
            name: TaskName::Numbered {
                index,
                attempt,
                stage_id: self.id.stage_id,
                stage_attempt_id: self.id.stage_attempt_id,
                task_id,
            },
            index,
            partition_id: spec.partition_id,
            extras: self.extras.clone(),
            cpus: self.settings.task_cpus,
            serialized_task,
        })
    }

    // ---- results -------------------------------------------------------------------

    /// Records a successful attempt: the task's result the first time, nothing after.
    /// Other running copies of the task are killed.
    pub(crate) fn handle_successful_task(
        &mut self,
        now: Instant,
        task_id: u64,
        result: TaskResult,
        actions: &mut VecDeque<Action>,
    ) {
        let Some(attempt) = self.running.remove(task_id) else {
            return;
        };
        let index = attempt.index;
        let duration = now.saturating_duration_since(attempt.launched_at);
        let record = &mut self.tasks[index as usize];
        record.copies_running = record.copies_running.saturating_sub(1);
        let reason = if record.successful {
            info!(
                "Ignoring task-finished event for {index}.{} in stage {} (TID {task_id}) because task {index} has already completed successfully",
                attempt.attempt, self.id
            );
            TaskEndReason::AlreadySucceeded
        } else {
            record.successful = true;
            self.successful += 1;
            if !self.failed_on_hosts.is_empty() {
                self.failed_on_hosts.remove(&index);
            }
            self.successful_durations
                .push(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
            // Per task: DEBUG, as "Starting task" is (INFO has a line per task set).
            debug!(
                "Finished task {index}.{} in stage {} (TID {task_id}) in {} ms on {} (executor {}) ({}/{})",
                attempt.attempt,
                self.id,
                duration.as_millis(),
                attempt.host,
                attempt.executor_id,
                self.successful,
                self.specs.len()
            );
            // First success wins: kill the other copies.
            if self.tasks[index as usize].copies_running > 0 {
                for (other, other_attempt) in self.running.iter() {
                    if other_attempt.index == index {
                        info!(
                            "Killing attempt {} for task {index}.{} in stage {} (TID {other}) on {} as the attempt {} succeeded on {}",
                            other_attempt.attempt, other_attempt.attempt, self.id, other_attempt.host, attempt.attempt, attempt.host
                        );
                        actions.push_back(Action::KillTask {
                            task_id: other,
                            executor_id: other_attempt.executor_id.clone(),
                            interrupt_thread: true,
                            reason: ANOTHER_ATTEMPT_SUCCEEDED.to_owned(),
                        });
                    }
                }
            }
            if self.successful as usize == self.specs.len() {
                self.zombie = true;
            }
            TaskEndReason::Success(result)
        };
        actions.push_back(Action::Event(SchedulerEvent::TaskEnd {
            task_id,
            task_set: self.id,
            index,
            attempt: attempt.attempt,
            executor_id: attempt.executor_id,
            state: TaskState::Finished,
            duration,
            reason,
        }));
    }

    /// Records a failed, killed or lost attempt: the task is pending again, and after
    /// `task.maxFailures` counted failures the task set is aborted. Returns whether the
    /// task is pending again (not when another attempt already succeeded, or the task
    /// set is a zombie), that is whether offers could launch it now.
    pub(crate) fn handle_failed_task(
        &mut self,
        now: Instant,
        task_id: u64,
        state: TaskState,
        failure: Failure,
        registry: &ExecutorRegistry,
        actions: &mut VecDeque<Action>,
    ) -> bool {
        self.end_failed_attempt(now, task_id, state, failure, false, registry, actions)
    }

    /// [`TaskSetManager::handle_failed_task`] for an attempt that never reached its
    /// executor because its connection was backlogged: uncounted, logged at DEBUG (a
    /// peer decides how often it happens, and it is no failure of the task), and the
    /// executor's host is not held against the task's speculative copies.
    pub(crate) fn withdraw_unsent(
        &mut self,
        now: Instant,
        task_id: u64,
        message: String,
        registry: &ExecutorRegistry,
        actions: &mut VecDeque<Action>,
    ) -> bool {
        let failure = Failure {
            kind: TaskFailureKind::Undeserializable,
            message,
            counts: false,
        };
        self.end_failed_attempt(
            now,
            task_id,
            TaskState::Failed,
            failure,
            true,
            registry,
            actions,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn end_failed_attempt(
        &mut self,
        now: Instant,
        task_id: u64,
        state: TaskState,
        failure: Failure,
        withdrawn: bool,
        registry: &ExecutorRegistry,
        actions: &mut VecDeque<Action>,
    ) -> bool {
        let Some(attempt) = self.running.remove(task_id) else {
            return false;
        };
        let index = attempt.index;
        let duration = now.saturating_duration_since(attempt.launched_at);
        let record = &mut self.tasks[index as usize];
        record.copies_running = record.copies_running.saturating_sub(1);
        if record.copies_running == 0 && record.speculatable {
            // Its mark names the host of the attempt that just ended: a later attempt,
            // elsewhere, is marked afresh if it runs slow, so that its copy avoids the
            // right host.
            record.speculatable = false;
            self.speculatable.retain(|&(marked, _)| marked != index);
        }
        let already_successful = record.successful;
        let lost_task = format!(
            "Lost task {index}.{} in stage {} (TID {task_id}, {}, executor {}): {}",
            attempt.attempt, self.id, attempt.host, attempt.executor_id, failure.message
        );
        if withdrawn {
            debug!("{lost_task}");
        } else if already_successful || failure.kind == TaskFailureKind::TaskKilled {
            info!("{lost_task}");
        } else {
            flint_rpc::peer_warn!(self.lost_task_warnings, now, "{lost_task}");
        }
        let counts =
            failure.counts && !already_successful && failure.kind != TaskFailureKind::TaskKilled;
        actions.push_back(Action::Event(SchedulerEvent::TaskEnd {
            task_id,
            task_set: self.id,
            index,
            attempt: attempt.attempt,
            executor_id: attempt.executor_id.clone(),
            state,
            duration,
            reason: TaskEndReason::Failed {
                kind: failure.kind,
                message: failure.message,
                counted: counts,
            },
        }));
        if already_successful || self.zombie {
            return false;
        }
        if !withdrawn {
            let failed_on = self.failed_on_hosts.entry(index).or_default();
            if !failed_on.contains(&attempt.host) {
                failed_on.push(attempt.host.clone());
            }
        }
        let spec = &self.specs[index as usize];
        self.pending.add(index, &spec.preferred_locations, registry);
        if counts {
            let record = &mut self.tasks[index as usize];
            record.failures = record.failures.saturating_add(1);
            let failures = u32::from(record.failures);
            self.exclusion.record_failure(
                &self.name,
                index,
                &attempt.executor_id,
                &attempt.host,
                &lost_task,
            );
            if failures >= self.settings.max_task_failures {
                let message = format!(
                    "Task {index} in stage {} failed {failures} times, most recent failure: {lost_task}",
                    self.id
                );
                error!(
                    "Task {index} in stage {} failed {failures} times; aborting job",
                    self.id
                );
                self.abort(message, actions);
            }
        }
        !self.zombie
    }

    /// Records an attempt that could not read a shuffle block, as Spark's TaskSetManager
    /// does: the map output is at fault, so the failure does not count towards
    /// `task.maxFailures` and the task is not pending again; the task set launches
    /// nothing more (the DAG scheduler submits a new attempt of the stage once the lost
    /// output is recomputed). Its other running attempts go on: their results still
    /// count. The task set ends with the failure unless it had already ended, so that
    /// without a DAG scheduler to resubmit it its job still ends.
    pub(crate) fn handle_fetch_failed_task(
        &mut self,
        now: Instant,
        task_id: u64,
        fetch: FetchFailure,
        actions: &mut VecDeque<Action>,
    ) {
        let Some(attempt) = self.running.remove(task_id) else {
            return;
        };
        let index = attempt.index;
        let record = &mut self.tasks[index as usize];
        record.copies_running = record.copies_running.saturating_sub(1);
        if record.copies_running == 0 && record.speculatable {
            record.speculatable = false;
            self.speculatable.retain(|&(marked, _)| marked != index);
        }
        let lost_task = format!(
            "Lost task {index}.{} in stage {} (TID {task_id}, {}, executor {}): {fetch}",
            attempt.attempt, self.id, attempt.host, attempt.executor_id
        );
        warn!("{lost_task}");
        if !self.zombie {
            self.zombie = true;
            self.failure = Some(lost_task);
            self.fetch_failed = true;
        }
        actions.push_back(Action::Event(SchedulerEvent::TaskEnd {
            task_id,
            task_set: self.id,
            index,
            attempt: attempt.attempt,
            executor_id: attempt.executor_id,
            state: TaskState::Failed,
            duration: now.saturating_duration_since(attempt.launched_at),
            reason: TaskEndReason::FetchFailed(fetch),
        }));
    }

    /// Counts a partition done that another attempt of the stage computed (Spark's
    /// `markPartitionCompleted`): its task is launched no more, and the task set
    /// completes when every partition is done, so that the stage can have a new attempt
    /// (the scheduler refuses two active ones). Running copies go on; their results are
    /// dropped as duplicates.
    pub(crate) fn mark_partition_completed(&mut self, partition_id: u32) {
        if self.zombie {
            return;
        }
        let Some(index) = self
            .specs
            .iter()
            .position(|spec| spec.partition_id == partition_id)
        else {
            return;
        };
        let record = &mut self.tasks[index];
        if record.successful {
            return;
        }
        record.successful = true;
        self.successful += 1;
        self.failed_on_hosts.remove(&(index as u32));
        if self.successful as usize == self.specs.len() {
            self.zombie = true;
        }
    }

    /// Stops launching, kills what runs, and records why.
    pub(crate) fn abort(&mut self, message: String, actions: &mut VecDeque<Action>) {
        if self.zombie {
            return;
        }
        self.zombie = true;
        self.failure = Some(message);
        self.kill_running(false, STAGE_CANCELLED, actions);
    }

    /// Stops launching and records why, killing nothing (the caller already did).
    pub(crate) fn abort_quietly(&mut self, message: String) {
        if !self.zombie {
            self.zombie = true;
            self.failure = Some(message);
        }
    }

    /// Asks for every running attempt to be killed.
    pub(crate) fn kill_running(
        &self,
        interrupt_thread: bool,
        reason: &str,
        actions: &mut VecDeque<Action>,
    ) {
        for (task_id, attempt) in self.running.iter() {
            actions.push_back(Action::KillTask {
                task_id,
                executor_id: attempt.executor_id.clone(),
                interrupt_thread,
                reason: reason.to_owned(),
            });
        }
    }

    /// Spark's `abortIfCompletelyBlacklisted`: aborts if a pending task may run on none
    /// of the live executors, for this task set's exclusions or because its host is one
    /// the application excludes (`app_excluded`, Spark's `isNodeBlacklisted`; such a
    /// host's executors stay registered but get no offers). As in Spark, only with
    /// `excludeOnFailure.enabled`. Cheap unless some failure or host was recorded.
    pub(crate) fn abort_if_completely_excluded(
        &mut self,
        registry: &ExecutorRegistry,
        app_excluded: &FxHashSet<SharedStr>,
        actions: &mut VecDeque<Action>,
    ) {
        if self.zombie
            || !self.exclusion.is_enabled()
            || (self.exclusion.is_empty() && app_excluded.is_empty())
            || registry.len() == 0
        {
            return;
        }
        let tasks = &self.tasks;
        let Some(&index) = self
            .pending
            .all
            .iter()
            .rev()
            .find(|&&i| tasks[i as usize].needs_launch())
        else {
            return;
        };
        let exclusion = &self.exclusion;
        let excluded_everywhere = registry
            .executors_by_host()
            .iter()
            .all(|(host, executors)| {
                app_excluded.contains(host)
                    || exclusion.is_host_excluded(host)
                    || executors.iter().all(|e| {
                        exclusion.is_executor_excluded(e)
                            || exclusion.is_task_excluded(index, e, host)
                    })
            });
        if excluded_everywhere {
            let message = format!(
                "Aborting TaskSet {} because task {index} (partition {}) cannot run anywhere due to node and executor exclusion. Most recent failure:\n{}",
                self.id,
                self.specs[index as usize].partition_id,
                exclusion.latest_failure().unwrap_or("")
            );
            error!("{message}");
            self.abort(message, actions);
        }
    }

    // ---- speculation ---------------------------------------------------------------

    /// Spark's `checkSpeculatableTasks`: once `quantile` of the tasks succeeded, marks
    /// running tasks older than `multiplier` × the median success time (and at least
    /// the minimum run time) for a speculative copy. True if it marked any.
    pub(crate) fn check_speculatable(
        &mut self,
        now: Instant,
        config: &SpeculationConfig,
        scratch: &mut Vec<u64>,
    ) -> bool {
        let num_tasks = self.specs.len();
        if self.zombie || num_tasks == 1 {
            return false;
        }
        if (self.successful as usize) < min_finished_for_speculation(num_tasks, config.quantile) {
            return false;
        }
        let threshold = speculation_threshold(&self.successful_durations, config, scratch);
        let mut found = false;
        let mut candidates: Vec<(u64, u32, SharedStr)> = self
            .running
            .iter()
            .filter(|(_, a)| now.saturating_duration_since(a.launched_at) > threshold)
            .map(|(tid, a)| (tid, a.index, a.host.clone()))
            .collect();
        candidates.sort_unstable_by_key(|c| c.0);
        for (_, index, host) in candidates {
            let task = &mut self.tasks[index as usize];
            if task.successful || task.copies_running != 1 || task.speculatable {
                continue;
            }
            task.speculatable = true;
            info!(
                "Marking task {index} in stage {} (on {host}) as speculatable because it ran more than {} ms",
                self.id,
                threshold.as_millis()
            );
            self.speculatable.push((index, host));
            found = true;
        }
        found
    }
}
