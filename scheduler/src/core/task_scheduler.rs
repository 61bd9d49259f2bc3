//! The task scheduler (the seeds' `TaskSchedulerImpl`): task sets in, launches, kills and
//! events out.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use flint_rpc::log_budget::{LogBudget, Spend};
use flint_wire::{
    ExecutorLossReason, SharedStr, TaskDescription, TaskFailureKind, TaskOutcome, TaskState,
};
use tracing::{debug, error, info, warn};

use crate::core::accumulators::{Accumulators, AttemptEnd, JobRun, Merge, PartitionKey};
use crate::core::config::{SchedulerConfig, SchedulingMode};
use crate::core::error::SchedulerError;
use crate::core::events::{Action, JobResult, SchedulerEvent, TaskResult};
use crate::core::fx_hash::{FxHashMap, FxHashSet};
use crate::core::locality::TaskLocality;
use crate::core::pool::{PoolConfig, Pools, TaskSetStats};
use crate::core::registry::{ExecutorRegistry, RunningTasks, NIL};
use crate::core::rng::SplitMix64;
use crate::core::task_set::{TaskSet, TaskSetId, WorkerOffer};
use crate::core::task_set_manager::{Failure, ManagerSettings, TaskSetManager, STAGE_CANCELLED};

/// The seeds' starvation warning.
pub const STARVATION_WARNING: &str = "Initial job has not accepted any resources; check your cluster UI to ensure that workers are registered and have sufficient resources";

/// The task scheduler: a deterministic state machine.
///
/// It reads no clock (every method that needs the time takes `now`), opens no socket and
/// starts no thread. The driver's glue calls it on each message and timer, launches what
/// [`resource_offers`](Self::resource_offers) returns, and carries out what
/// [`poll_action`](Self::poll_action) yields until it yields `None`; it calls
/// [`handle_timeout`](Self::handle_timeout) when [`poll_timeout`](Self::poll_timeout)
/// comes.
#[derive(Debug)]
pub struct TaskScheduler {
    /// Lines about updates for tasks that are not running (a peer decides how many).
    ignored_updates: LogBudget,
    /// "Lost executor" lines: a peer that registers executor after executor, and is
    /// removed each time, decides how many.
    lost_executors: LogBudget,
    config: SchedulerConfig,
    rng: SplitMix64,
    registry: ExecutorRegistry,
    task_sets: FxHashMap<u32, TaskSetManager>,
    /// Stage id to stage attempt to task set key (the seeds' `taskSetsByStageIdAndAttempt`).
    task_sets_by_stage: BTreeMap<u32, BTreeMap<u32, u32>>,
    /// The running tasks: task id to the key of its task set (the seeds'
    /// `taskIdToTaskSetManager`), and per executor its tasks and their number
    /// (`executorIdToRunningTaskIds`, `executorIdToTaskCount`). The seeds'
    /// `taskIdToExecutorId` is the task set's running attempt, so that a launch clones no
    /// executor id for it.
    running: RunningTasks,
    pools: Pools,
    /// Jobs with a task set submitted and no end reported, with the run their task sets
    /// are submitted in: one entry per running job, none left behind by the ones that
    /// ended.
    running_jobs: FxHashMap<u32, JobRun>,
    next_task_id: u64,
    next_key: u32,
    actions: VecDeque<Action>,
    has_received_task: bool,
    has_launched_task: bool,
    starvation_deadline: Option<Instant>,
    next_speculation_check: Option<Instant>,
    locality_revive_at: Option<Instant>,
    sorted_scratch: Vec<u32>,
    duration_scratch: Vec<u64>,
    order_scratch: Vec<usize>,
    available_scratch: Vec<u32>,
    /// The executor slot of each offer of a round (`NIL` for an excluded host's).
    slot_scratch: Vec<u32>,
    /// Hosts the application excludes: their offers are ignored and their executors
    /// may not register (the seeds' node blacklist).
    excluded_hosts: FxHashSet<SharedStr>,
    /// Whether launches post TaskStart events.
    task_start_events: bool,
    /// Executors lost with [`ExecutorLossReason::LossReasonPending`], until the reason
    /// comes (the seeds keep them in `executorIdToHost` meanwhile): their host and the
    /// tasks they were running, which their task sets still count as running.
    pending_loss: FxHashMap<SharedStr, PendingLoss>,
    /// The driver's accumulators and the partitions they merged.
    accumulators: Accumulators,
    /// Whether successes with accumulator updates post
    /// [`SchedulerEvent::TaskAccumulators`].
    accumulator_events: bool,
    /// Emptied lists of accumulator updates, for the next results to be decoded into:
    /// a result with updates then allocates none.
    spare_accumulator_lists: Vec<Vec<flint_wire::AccumulatorUpdate>>,
}

/// Spare lists of accumulator updates kept at most.
const SPARE_ACCUMULATOR_LISTS: usize = 64;

/// An executor lost before the reason was known (see [`TaskScheduler::executor_lost`]).
#[derive(Debug)]
struct PendingLoss {
    host: SharedStr,
    /// Its running tasks when it was lost, with their task set's key.
    tasks: Vec<(u64, u32)>,
}

impl TaskScheduler {
    /// A scheduler with `config`; its pools are `config.pools` (FAIR mode).
    pub fn new(config: SchedulerConfig) -> Self {
        let pools = Pools::new(config.mode, &config.pools);
        TaskScheduler {
            ignored_updates: LogBudget::default(),
            lost_executors: LogBudget::default(),
            rng: SplitMix64::new(config.seed),
            config,
            registry: ExecutorRegistry::default(),
            task_sets: FxHashMap::default(),
            task_sets_by_stage: BTreeMap::new(),
            running: RunningTasks::default(),
            pools,
            running_jobs: FxHashMap::default(),
            next_task_id: 0,
            next_key: 0,
            actions: VecDeque::new(),
            has_received_task: false,
            has_launched_task: false,
            starvation_deadline: None,
            next_speculation_check: None,
            locality_revive_at: None,
            sorted_scratch: Vec::new(),
            duration_scratch: Vec::new(),
            order_scratch: Vec::new(),
            available_scratch: Vec::new(),
            slot_scratch: Vec::new(),
            excluded_hosts: FxHashSet::default(),
            task_start_events: true,
            pending_loss: FxHashMap::default(),
            accumulators: Accumulators::default(),
            accumulator_events: true,
            spare_accumulator_lists: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// FIFO or FAIR.
    pub fn scheduling_mode(&self) -> SchedulingMode {
        self.pools.mode()
    }

    /// Adds a FAIR pool, or changes an existing pool's settings. FIFO mode has no pools
    /// but its root, and ignores this.
    pub fn add_pool(&mut self, config: PoolConfig) {
        self.pools.add_pool(config);
    }

    /// Adds every pool of a pools file (format in [`crate::core::pool`]).
    pub fn add_pools_file(&mut self, text: &str) -> Result<(), SchedulerError> {
        for pool in PoolConfig::parse_file(text)? {
            self.add_pool(pool);
        }
        Ok(())
    }

    /// The FAIR pools' settings (FIFO: the root pool, named "").
    pub fn pools(&self) -> impl Iterator<Item = &PoolConfig> {
        self.pools.pool_configs()
    }

    // ---- queries -------------------------------------------------------------------

    /// The task set of a stage attempt, while it is registered.
    pub fn task_set(&self, id: TaskSetId) -> Option<&TaskSetManager> {
        let key = self
            .task_sets_by_stage
            .get(&id.stage_id)?
            .get(&id.stage_attempt_id)?;
        self.task_sets.get(key)
    }

    /// The id the next task launched gets: every task of a task set submitted now has
    /// an id at least this, every task launched before a smaller one.
    pub fn next_task_id(&self) -> u64 {
        self.next_task_id
    }

    /// Every registered task set.
    pub fn task_sets(&self) -> impl Iterator<Item = &TaskSetManager> {
        self.task_sets.values()
    }

    /// The task set a running task belongs to.
    pub fn task_set_of(&self, task_id: u64) -> Option<TaskSetId> {
        let key = self.running.key_of(task_id)?;
        self.task_sets.get(&key).map(|t| t.id())
    }

    /// The key of the task set a running task belongs to: unlike its id, which a newer
    /// task set takes once it ended (see [`TaskScheduler::submit_tasks`]), never another
    /// task set's.
    pub(crate) fn task_set_key_of(&self, task_id: u64) -> Option<u32> {
        self.running.key_of(task_id)
    }

    /// Whether the task set of `key` is still registered (it has attempts running, or
    /// has not ended).
    pub(crate) fn has_task_set_key(&self, key: u32) -> bool {
        self.task_sets.contains_key(&key)
    }

    /// The executor a running task runs on.
    pub fn executor_of(&self, task_id: u64) -> Option<&SharedStr> {
        let key = self.running.key_of(task_id)?;
        self.task_sets
            .get(&key)?
            .running_attempt(task_id)
            .map(|a| &a.executor_id)
    }

    /// The tasks running on a live executor, in id order (the seeds'
    /// `executorIdToRunningTaskIds`); none for an executor that is not registered.
    pub fn running_tasks_on(&self, executor_id: &str) -> impl Iterator<Item = u64> + '_ {
        let slot = self.registry.get(executor_id).map_or(NIL, |r| r.slot);
        self.running.on_executor(slot)
    }

    /// The number of tasks running on a live executor (the seeds'
    /// `executorIdToTaskCount`).
    pub fn running_task_count_on(&self, executor_id: &str) -> usize {
        self.registry
            .get(executor_id)
            .map_or(0, |r| self.running.count_on(r.slot))
    }

    /// The number of tasks running anywhere.
    pub fn running_tasks(&self) -> usize {
        self.running.len()
    }

    /// Whether an executor is registered and not lost.
    pub fn is_executor_alive(&self, executor_id: &str) -> bool {
        self.registry.is_executor_alive(executor_id)
    }

    /// The host of a live executor.
    pub fn host_of(&self, executor_id: &str) -> Option<&SharedStr> {
        self.registry.get(executor_id).map(|r| &r.host)
    }

    /// The live executors on a host.
    pub fn executors_on_host(&self, host: &str) -> impl Iterator<Item = &SharedStr> {
        self.registry
            .executors_by_host()
            .get(host)
            .into_iter()
            .flatten()
    }

    /// Whether a host has a live executor.
    pub fn has_executors_alive_on_host(&self, host: &str) -> bool {
        self.registry.has_executors_alive_on_host(host)
    }

    /// Whether a rack has a host with a live executor.
    pub fn has_host_alive_on_rack(&self, rack: &str) -> bool {
        self.registry.has_host_alive_on_rack(rack)
    }

    /// Whether a task has been launched yet.
    pub fn has_launched_task(&self) -> bool {
        self.has_launched_task
    }

    /// `default.parallelism` if set, else the live executors' cores, at least 2.
    pub fn default_parallelism(&self) -> usize {
        self.config
            .default_parallelism
            .unwrap_or_else(|| self.registry.total_cores().max(2))
    }

    // ---- actions and timers --------------------------------------------------------

    /// The next thing to do, oldest first.
    #[inline]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Everything to do, oldest first.
    pub fn drain_actions(&mut self) -> impl Iterator<Item = Action> + '_ {
        self.actions.drain(..)
    }

    /// When [`handle_timeout`](Self::handle_timeout) should next be called, if ever:
    /// the starvation warning, the speculation check, or the end of a locality wait.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.starvation_deadline,
            self.next_speculation_check,
            self.locality_revive_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Does what is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(deadline) = self.starvation_deadline {
            if deadline <= now {
                if self.has_launched_task {
                    self.starvation_deadline = None;
                } else {
                    warn!("{STARVATION_WARNING}");
                    let next = deadline + self.config.starvation_timeout;
                    self.starvation_deadline = Some(if next > now {
                        next
                    } else {
                        now + self.config.starvation_timeout
                    });
                }
            }
        }
        if let (Some(check), Some(speculation)) =
            (self.next_speculation_check, self.config.speculation)
        {
            if check <= now {
                self.next_speculation_check =
                    (!self.task_sets.is_empty()).then(|| now + speculation.interval);
                if self.check_speculatable_tasks(now) {
                    self.actions.push_back(Action::ReviveOffers);
                }
            }
        }
        if let Some(at) = self.locality_revive_at {
            if at <= now {
                self.locality_revive_at = None;
                self.actions.push_back(Action::ReviveOffers);
            }
        }
    }

    /// Spark's `checkSpeculatableTasks`, over every task set in key order.
    fn check_speculatable_tasks(&mut self, now: Instant) -> bool {
        let Some(speculation) = self.config.speculation else {
            return false;
        };
        let mut keys: Vec<u32> = self.task_sets.keys().copied().collect();
        keys.sort_unstable();
        let mut found = false;
        for key in keys {
            if let Some(manager) = self.task_sets.get_mut(&key) {
                found |= manager.check_speculatable(now, &speculation, &mut self.duration_scratch);
            }
        }
        found
    }

    // ---- task sets -----------------------------------------------------------------

    /// Registers a task set (the seeds' `submitTasks`) and asks for offers.
    ///
    /// A stage has at most one active (non-zombie) task set: a second is refused with
    /// "more than one active taskSet for stage S: ids", and the same stage attempt
    /// while it is active with "task set S.A was already submitted". A task set that
    /// ended (a zombie) gives its stage attempt to the new one, as in the seeds (its
    /// registry entry is overwritten): its attempts still running (killed, their
    /// reports not in yet) stay its own, and end with it.
    pub fn submit_tasks(&mut self, now: Instant, task_set: TaskSet) -> Result<(), SchedulerError> {
        let id = task_set.id;
        let num_tasks = task_set.tasks.len();
        info!("Adding task set {id} with {num_tasks} tasks");
        let same_attempt = self
            .task_sets_by_stage
            .get(&id.stage_id)
            .and_then(|attempts| attempts.get(&id.stage_attempt_id))
            .copied();
        // A zombie reported its end when it became one (every change ends in
        // `after_task_set_change`): nothing of it is reported under the stage attempt
        // any more but the ends of its last attempts.
        if let Some(same) = same_attempt {
            if self.task_sets.get(&same).is_some_and(|m| !m.is_zombie()) {
                return Err(SchedulerError::DuplicateTaskSet {
                    task_set: id.to_string(),
                });
            }
        }
        if let Some(attempts) = self.task_sets_by_stage.get(&id.stage_id) {
            let active: Vec<String> = attempts
                .values()
                .filter_map(|key| self.task_sets.get(key))
                .filter(|m| !m.is_zombie())
                .map(|m| m.id().to_string())
                .collect();
            if !active.is_empty() {
                let mut ids = active;
                ids.push(id.to_string());
                let error = SchedulerError::MoreThanOneActiveTaskSet {
                    stage_id: id.stage_id,
                    task_set_ids: ids.join(","),
                };
                error!("{error}");
                return Err(error);
            }
        }

        let key = self.next_key;
        self.next_key += 1;
        let job_id = task_set.job_id;
        let pool = self.pools.add_task_set(key, task_set.pool.as_ref());
        let settings = ManagerSettings {
            max_task_failures: self.config.max_task_failures,
            task_cpus: self.config.task_cpus,
            locality_wait: self.config.locality_wait,
            exclusion: self.config.exclusion,
        };
        let mut manager = TaskSetManager::new(task_set, pool, settings, &self.registry, now);
        let job_run = match self.running_jobs.entry(job_id) {
            Entry::Occupied(running) => *running.get(),
            Entry::Vacant(starting) => {
                let run = self.accumulators.job_started(job_id);
                starting.insert(run);
                self.actions
                    .push_back(Action::Event(SchedulerEvent::JobStart { job_id }));
                run
            }
        };
        manager.set_job_run(job_run);
        self.task_sets.insert(key, manager);
        self.task_sets_by_stage
            .entry(id.stage_id)
            .or_default()
            .insert(id.stage_attempt_id, key);

        self.actions
            .push_back(Action::Event(SchedulerEvent::StageSubmitted {
                task_set: id,
                job_id,
                num_tasks: u32::try_from(num_tasks).unwrap_or(u32::MAX),
            }));

        if !self.has_received_task {
            self.has_received_task = true;
            if !self.has_launched_task {
                self.starvation_deadline = Some(now + self.config.starvation_timeout);
            }
        }
        if let Some(speculation) = self.config.speculation {
            if self.next_speculation_check.is_none() {
                self.next_speculation_check = Some(now + speculation.interval);
            }
        }
        // An empty task set is complete at once.
        self.after_task_set_change(key);
        self.actions.push_back(Action::ReviveOffers);
        Ok(())
    }

    /// Reports a task set's completion once, and drops it when nothing of it runs.
    fn after_task_set_change(&mut self, key: u32) {
        let Some(manager) = self.task_sets.get_mut(&key) else {
            return;
        };
        if manager.take_completion() {
            let failure = manager.failure().map(str::to_owned);
            let job_id = manager.job_id();
            let fetch_failed = manager.ended_by_fetch_failure();
            let ends_job = failure.is_some() || manager.is_final_stage();
            self.actions
                .push_back(Action::Event(SchedulerEvent::StageCompleted {
                    task_set: manager.id(),
                    job_id,
                    failure: failure.clone(),
                }));
            let run = manager.job_run();
            if ends_job && self.running_jobs.get(&job_id) == Some(&run) {
                self.running_jobs.remove(&job_id);
                // A job of stages ends when its DAG scheduler says so: a stage that
                // could not fetch its input ends its task set's job here, and runs
                // again under the same job.
                // A task set's job that runs again after a fetch failure keeps what it
                // merged, so that its partitions are not merged twice.
                if job_id < crate::core::driver_core::FIRST_JOB_ID {
                    if fetch_failed {
                        self.accumulators.job_interrupted(job_id, run);
                    } else {
                        self.accumulators.job_ended(job_id, run);
                    }
                }
                let result = match failure {
                    Some(message) => JobResult::Failed(message),
                    None => JobResult::Succeeded,
                };
                self.actions
                    .push_back(Action::Event(SchedulerEvent::JobEnd { job_id, result }));
            }
        }
        if manager.is_finished() {
            self.task_set_finished(key);
        }
    }

    /// Drops a finished task set (the seeds' `taskSetFinished`).
    fn task_set_finished(&mut self, key: u32) {
        let Some(manager) = self.task_sets.remove(&key) else {
            return;
        };
        let id = manager.id();
        if let Some(attempts) = self.task_sets_by_stage.get_mut(&id.stage_id) {
            // Not when a new task set took its stage attempt.
            if attempts.get(&id.stage_attempt_id) == Some(&key) {
                attempts.remove(&id.stage_attempt_id);
            }
            if attempts.is_empty() {
                self.task_sets_by_stage.remove(&id.stage_id);
            }
        }
        self.pools.remove_task_set(key);
        info!(
            "Removed TaskSet {id}, whose tasks have all completed, from pool {}",
            manager.pool()
        );
        if self.task_sets.is_empty() {
            self.next_speculation_check = None;
            self.locality_revive_at = None;
        }
    }

    /// Cancels every task set of a stage (the seeds' `cancelTasks`): running attempts are
    /// killed and the task sets aborted with "Stage S cancelled".
    pub fn cancel_tasks(&mut self, stage_id: u32, interrupt_thread: bool) {
        info!("Cancelling stage {stage_id}");
        // Every task set of the stage, also one whose stage attempt a newer one took
        // (see `submit_tasks`): its attempts may still run (those of a task set ended
        // by a fetch failure are not killed).
        let mut keys: Vec<u32> = self
            .task_sets
            .iter()
            .filter(|(_, manager)| manager.id().stage_id == stage_id)
            .map(|(&key, _)| key)
            .collect();
        keys.sort_unstable();
        for key in keys {
            if let Some(manager) = self.task_sets.get_mut(&key) {
                manager.kill_running(interrupt_thread, STAGE_CANCELLED, &mut self.actions);
                manager.abort_quietly(format!("Stage {stage_id} cancelled"));
                info!("Stage {stage_id} was cancelled");
            }
            self.after_task_set_change(key);
        }
    }

    /// A partition of a stage was computed by an earlier attempt of the stage (the
    /// seeds' `notifyPartitionCompletion`): the stage's active task set counts it done
    /// and does not launch it, and completes once every partition is done.
    pub fn notify_partition_completion(&mut self, stage_id: u32, partition_id: u32) {
        let keys: Vec<u32> = self
            .task_sets_by_stage
            .get(&stage_id)
            .map(|attempts| attempts.values().copied().collect())
            .unwrap_or_default();
        for key in keys {
            if let Some(manager) = self.task_sets.get_mut(&key) {
                manager.mark_partition_completed(partition_id);
            }
            self.after_task_set_change(key);
        }
    }

    /// Asks for one task attempt to be killed; false if no such task runs.
    pub fn kill_task_attempt(
        &mut self,
        task_id: u64,
        interrupt_thread: bool,
        reason: &str,
    ) -> bool {
        info!("Killing task {task_id}: {reason}");
        match self.executor_of(task_id).cloned() {
            Some(executor_id) => {
                self.actions.push_back(Action::KillTask {
                    task_id,
                    executor_id,
                    interrupt_thread,
                    reason: reason.to_owned(),
                });
                true
            }
            None => {
                warn!("Could not kill task {task_id} because no task with that ID was found.");
                false
            }
        }
    }

    /// Aborts a task set with `message` (its job fails with it): running attempts are
    /// killed and nothing more of it launches. False if no such task set is registered
    /// or it already ended.
    pub fn abort_task_set(&mut self, id: TaskSetId, message: String) -> bool {
        let Some(&key) = self
            .task_sets_by_stage
            .get(&id.stage_id)
            .and_then(|attempts| attempts.get(&id.stage_attempt_id))
        else {
            return false;
        };
        self.abort_task_set_by_key(key, message)
    }

    /// [`TaskScheduler::abort_task_set`] of the task set of `key`
    /// ([`TaskScheduler::task_set_key_of`]).
    pub(crate) fn abort_task_set_by_key(&mut self, key: u32, message: String) -> bool {
        let Some(manager) = self.task_sets.get_mut(&key) else {
            return false;
        };
        if manager.is_zombie() {
            return false;
        }
        error!("{message}");
        manager.abort(message, &mut self.actions);
        self.after_task_set_change(key);
        true
    }

    /// A task chosen by [`resource_offers`](Self::resource_offers) could not be sent to
    /// its executor. The attempt ends FAILED without counting towards
    /// `task.maxFailures`; with `abort` its task set is aborted with that message (the
    /// seeds' answer to a task larger than `rpc.message.maxSize`), otherwise the task is
    /// pending again.
    pub fn launch_failed(
        &mut self,
        now: Instant,
        task_id: u64,
        reason: &str,
        abort: Option<String>,
    ) {
        let Some(key) = self.running.remove(task_id) else {
            return;
        };
        if let Some(manager) = self.task_sets.get_mut(&key) {
            manager.handle_failed_task(
                now,
                task_id,
                TaskState::Failed,
                Failure {
                    kind: TaskFailureKind::Undeserializable,
                    message: reason.to_owned(),
                    counts: false,
                },
                &self.registry,
                &mut self.actions,
            );
            match abort {
                Some(message) => {
                    error!("{message}");
                    manager.abort(message, &mut self.actions);
                }
                None => self.actions.push_back(Action::ReviveOffers),
            }
        }
        self.after_task_set_change(key);
    }

    /// A task chosen by [`resource_offers`](Self::resource_offers) was not sent: its
    /// executor's connection is backlogged (back-pressure). The attempt ends FAILED
    /// without counting towards `task.maxFailures`, logged at DEBUG only, and the task
    /// is pending again; offers are asked for, so that other executors may take it (the
    /// caller no longer offers the backlogged one).
    pub fn launch_withdrawn(&mut self, now: Instant, task_id: u64, reason: &str) {
        let Some(key) = self.running.remove(task_id) else {
            return;
        };
        if let Some(manager) = self.task_sets.get_mut(&key) {
            if manager.withdraw_unsent(
                now,
                task_id,
                reason.to_owned(),
                &self.registry,
                &mut self.actions,
            ) {
                self.actions.push_back(Action::ReviveOffers);
            }
        }
        self.after_task_set_change(key);
    }

    /// Whether successes that carry accumulator updates post
    /// [`SchedulerEvent::TaskAccumulators`] (the default). A driver with nobody
    /// listening turns them off: the updates' list is then reused.
    pub fn set_accumulator_events(&mut self, on: bool) {
        self.accumulator_events = on;
    }

    /// The driver's accumulators: register them here, read their values after a job.
    pub fn accumulators(&self) -> &Accumulators {
        &self.accumulators
    }

    /// The driver's accumulators, to register one.
    pub fn accumulators_mut(&mut self) -> &mut Accumulators {
        &mut self.accumulators
    }

    /// An empty list to decode a result's accumulator updates into (reused when it
    /// can be).
    pub fn spare_accumulator_list(&mut self) -> Vec<flint_wire::AccumulatorUpdate> {
        self.spare_accumulator_lists.pop().unwrap_or_default()
    }

    /// Takes back a list of accumulator updates once merged, for
    /// [`TaskScheduler::spare_accumulator_list`].
    fn recycle_accumulator_list(&mut self, mut list: Vec<flint_wire::AccumulatorUpdate>) {
        if list.capacity() > 0 && self.spare_accumulator_lists.len() < SPARE_ACCUMULATOR_LISTS {
            list.clear();
            self.spare_accumulator_lists.push(list);
        }
    }

    /// Whether launches post [`SchedulerEvent::TaskStart`] (the default). A driver
    /// with nobody listening turns them off: a launch then builds no event.
    pub fn set_task_start_events(&mut self, on: bool) {
        self.task_start_events = on;
    }

    /// Excludes a host for the whole application: its offers are ignored, and the
    /// driver refuses executors that register from it.
    pub fn exclude_host(&mut self, host: impl Into<SharedStr>) {
        let host = host.into();
        info!("Excluding host {host} for the application");
        self.excluded_hosts.insert(host);
    }

    /// Lifts [`exclude_host`](Self::exclude_host).
    pub fn include_host(&mut self, host: &str) {
        self.excluded_hosts.remove(host);
    }

    /// The hosts the application excludes (the seeds' `nodeBlacklist`), in no order.
    pub fn excluded_hosts(&self) -> impl Iterator<Item = &SharedStr> {
        self.excluded_hosts.iter()
    }

    /// Whether the application excludes `host`.
    pub fn is_host_excluded(&self, host: &str) -> bool {
        !self.excluded_hosts.is_empty() && self.excluded_hosts.contains(host)
    }

    // ---- offers --------------------------------------------------------------------

    /// Picks tasks for the offered cores (the seeds' `resourceOffers`); the result has
    /// one list per offer, in the offers' order. See
    /// [`resource_offers_with`](Self::resource_offers_with), which this collects.
    pub fn resource_offers(
        &mut self,
        now: Instant,
        offers: &[WorkerOffer],
    ) -> Vec<Vec<TaskDescription>> {
        let mut launched: Vec<Vec<TaskDescription>> = offers.iter().map(|_| Vec::new()).collect();
        self.resource_offers_with(now, offers, |offer, task| launched[offer].push(task));
        launched
    }

    /// Picks tasks for the offered cores (the seeds' `resourceOffers`) and hands each to
    /// `launch` with the index of its offer, as soon as it is chosen; returns how many.
    ///
    /// Unknown executors in the offers are registered. Offers are shuffled, task sets
    /// taken in pool order, and each offered its locality levels in turn, most local
    /// first, with delay scheduling; each launch takes `task.cpus` of its offer's cores.
    /// Nothing is allocated per task once the scheduler's scratch space has grown: the
    /// caller sends each description on (the driver encodes it into its executor's
    /// connection) instead of the scheduler collecting them.
    pub fn resource_offers_with(
        &mut self,
        now: Instant,
        offers: &[WorkerOffer],
        mut launch: impl FnMut(usize, TaskDescription),
    ) -> usize {
        let mut new_executor = false;
        let mut offer_slots = std::mem::take(&mut self.slot_scratch);
        offer_slots.clear();
        for offer in offers {
            if self.is_host_excluded(&offer.host) {
                offer_slots.push(NIL);
                continue;
            }
            let (slot, added) = self
                .registry
                .add(&offer.executor_id, &offer.host, offer.cores);
            offer_slots.push(slot);
            if added {
                new_executor = true;
                self.actions
                    .push_back(Action::Event(SchedulerEvent::ExecutorAdded {
                        executor_id: offer.executor_id.clone(),
                        host: offer.host.clone(),
                        cores: offer.cores,
                    }));
            }
        }
        if new_executor {
            for manager in self.task_sets.values_mut() {
                manager.recompute_locality(&self.registry);
            }
        }

        let cpus = self.config.task_cpus.max(1);
        let mut order = std::mem::take(&mut self.order_scratch);
        order.clear();
        order.extend(0..offers.len());
        self.rng.shuffle(&mut order);
        let mut available = std::mem::take(&mut self.available_scratch);
        available.clear();
        available.extend(offers.iter().map(|o| {
            if self.is_host_excluded(&o.host) {
                0
            } else {
                o.cores
            }
        }));
        let mut count = 0;

        let mut sorted = std::mem::take(&mut self.sorted_scratch);
        {
            let task_sets = &self.task_sets;
            self.pools.sorted_task_sets(
                |key| {
                    let m = &task_sets[&key];
                    TaskSetStats {
                        key,
                        job_id: m.job_id(),
                        stage_id: m.id().stage_id,
                        name: m.name(),
                        running_tasks: m.running_tasks(),
                    }
                },
                &mut sorted,
            );
        }

        // Room for this round's launches up front: growing the maps as tasks launch
        // would rehash them several times in one big round.
        let slots: usize = available.iter().map(|&a| (a / cpus) as usize).sum();
        let pending: usize = self.task_sets.values().map(|m| m.pending_tasks()).sum();
        let expected = slots.min(pending);
        self.running.reserve(expected);
        self.actions.reserve(expected);

        let mut launched_any_task = false;
        for &key in &sorted {
            let Some(manager) = self.task_sets.get_mut(&key) else {
                continue;
            };
            debug!(
                "parentName: {}, name: {}, runningTasks: {}",
                manager.pool(),
                manager.name(),
                manager.running_tasks()
            );
            if manager.is_zombie() {
                continue;
            }
            manager.reserve_launches(slots);
            let mut levels = [TaskLocality::Any; 5];
            let num_levels = manager.locality_levels().len();
            levels[..num_levels].copy_from_slice(manager.locality_levels());
            let mut launched_for_set = false;
            for &level in &levels[..num_levels] {
                loop {
                    // Spark's `resourceOfferSingleTaskSet`: one pass over the offers.
                    let mut launched_in_pass = false;
                    for &i in &order {
                        if available[i] < cpus {
                            continue;
                        }
                        let offer = &offers[i];
                        if let Some(task) = manager.resource_offer(
                            now,
                            &offer.executor_id,
                            &offer.host,
                            level,
                            &self.registry,
                            &mut self.next_task_id,
                            &mut self.actions,
                            self.task_start_events,
                        ) {
                            self.running.insert(task.task_id, key, offer_slots[i]);
                            count += 1;
                            launch(i, task);
                            available[i] -= cpus;
                            launched_in_pass = true;
                        }
                    }
                    launched_for_set |= launched_in_pass;
                    if !launched_in_pass {
                        break;
                    }
                }
            }
            if !launched_for_set {
                manager.abort_if_completely_excluded(
                    &self.registry,
                    &self.excluded_hosts,
                    &mut self.actions,
                );
                self.after_task_set_change(key);
            }
            launched_any_task |= launched_for_set;
        }
        self.sorted_scratch = sorted;

        if launched_any_task {
            self.has_launched_task = true;
            self.starvation_deadline = None;
        }
        // Cores are left and a task set waits for locality: offer again when it may
        // take a less local level, rather than at the next revive tick.
        let cores_left = available.iter().any(|&a| a >= cpus);
        self.locality_revive_at = if cores_left {
            self.task_sets
                .values()
                .filter_map(|m| m.locality_deadline())
                .filter(|&at| at > now)
                .min()
        } else {
            None
        };
        self.order_scratch = order;
        self.available_scratch = available;
        self.slot_scratch = offer_slots;
        count
    }

    // ---- executors -----------------------------------------------------------------

    /// Registers an executor (also done for unknown executors in offers).
    pub fn executor_added(
        &mut self,
        executor_id: impl Into<SharedStr>,
        host: impl Into<SharedStr>,
        cores: u32,
    ) {
        let executor_id = executor_id.into();
        let host = host.into();
        if self.registry.add(&executor_id, &host, cores).1 {
            self.actions
                .push_back(Action::Event(SchedulerEvent::ExecutorAdded {
                    executor_id,
                    host,
                    cores,
                }));
            for manager in self.task_sets.values_mut() {
                manager.recompute_locality(&self.registry);
            }
        }
    }

    /// Says which rack a host is in (racks are unknown unless said). Task sets
    /// recompute their locality levels: a rack with a live host is a level to wait at.
    pub fn set_rack(&mut self, host: impl Into<SharedStr>, rack: impl Into<SharedStr>) {
        self.registry.set_rack(&host.into(), &rack.into());
        for manager in self.task_sets.values_mut() {
            manager.recompute_locality(&self.registry);
        }
    }

    /// A success's accumulator updates, merged if it is its partition's first success
    /// in a stage or job still known (see [`crate::core::accumulators`]); then posted to
    /// listeners, or their list kept for reuse.
    fn merge_accumulators(
        &mut self,
        now: Instant,
        task_id: u64,
        task_set: TaskSetId,
        index: u32,
        key: PartitionKey,
        updates: Option<Vec<flint_wire::AccumulatorUpdate>>,
    ) {
        let updates = updates.unwrap_or_default();
        let counted = !self.accumulators.is_empty()
            && self
                .accumulators
                .attempt_ended(now, key, AttemptEnd::Succeeded, &updates)
                == Merge::Merged;
        if self.accumulator_events && !updates.is_empty() {
            self.actions
                .push_back(Action::Event(SchedulerEvent::TaskAccumulators {
                    task_id,
                    task_set,
                    index,
                    partition: key.partition,
                    updates,
                    counted,
                }));
        } else {
            self.recycle_accumulator_list(updates);
        }
    }

    /// An executor's heartbeat with its running tasks' metrics (the seeds'
    /// `executorHeartbeatReceived`); false if the executor is not known (it should
    /// register again). The updates of tasks running on it are posted as
    /// [`SchedulerEvent::ExecutorMetricsUpdate`]; others are dropped.
    pub fn executor_heartbeat_received(
        &mut self,
        executor_id: &str,
        updates: Vec<flint_wire::TaskAccumUpdates>,
    ) -> bool {
        let alive = self.registry.is_executor_alive(executor_id);
        let updates: Vec<crate::core::events::TaskMetricsUpdate> = updates
            .into_iter()
            .filter_map(|u| {
                let manager = self.task_sets.get(&self.running.key_of(u.task_id)?)?;
                let attempt = manager.running_attempt(u.task_id)?;
                (alive && &*attempt.executor_id == executor_id).then(|| {
                    crate::core::events::TaskMetricsUpdate {
                        task_id: u.task_id,
                        task_set: manager.id(),
                        metrics: u.metrics,
                        accumulators: u.accumulators,
                    }
                })
            })
            .collect();
        if !updates.is_empty() {
            self.actions
                .push_back(Action::Event(SchedulerEvent::ExecutorMetricsUpdate {
                    executor_id: SharedStr::from(executor_id),
                    updates,
                }));
        }
        alive
    }

    /// The seeds' ERROR line for a lost executor, within a log budget: past it, at DEBUG,
    /// counted in the next one.
    fn log_lost_executor(&mut self, now: Instant, line: &str) {
        match self.lost_executors.spend(now) {
            Spend::Log { held_back } => {
                if held_back > 0 {
                    warn!("{held_back} more lost executor line(s) were logged at DEBUG");
                }
                error!("{line}");
            }
            Spend::HoldBack => debug!("{line}"),
        }
    }

    /// An executor is gone (the seeds' `executorLost`): its running tasks are pending
    /// again. They count towards `task.maxFailures` unless the driver asked for the loss
    /// or the application did not cause it
    /// ([`ExecutorLossReason::counts_towards_task_failures`]).
    ///
    /// With [`ExecutorLossReason::LossReasonPending`] the executor gets no more offers
    /// and its tasks leave the running list, but, as in the seeds ("unless reason is
    /// LossReasonPending, the executor is removed from executorIdToHost registry and
    /// TaskSetManagers get notified"), it is kept until a later call says why it was
    /// lost: only then do its task sets hear of it, the reason deciding whether its
    /// tasks' failures count, and is ExecutorRemoved posted. Whoever passes the pending
    /// reason must pass the final one in time (the driver waits for its cluster
    /// manager's report of the exit, for a bounded time).
    pub fn executor_lost(&mut self, now: Instant, executor_id: &str, reason: ExecutorLossReason) {
        let pending = reason == ExecutorLossReason::LossReasonPending;
        if !pending {
            if let Some(lost) = self.pending_loss.remove(executor_id) {
                let line = format!("Lost executor {executor_id} on {}: {reason}", lost.host);
                self.log_lost_executor(now, &line);
                self.fail_lost_tasks(now, executor_id, &reason, lost.tasks);
                return;
            }
        }
        let Some(record) = self.registry.remove(executor_id) else {
            if pending && self.pending_loss.contains_key(executor_id) {
                debug!("Executor {executor_id} is already waiting for the reason of its loss");
            } else {
                let line = format!("Lost an executor {executor_id} (already removed): {reason}");
                self.log_lost_executor(now, &line);
            }
            return;
        };
        // Spark's logExecutorLoss: a loss the driver asked for is no error.
        match reason {
            ExecutorLossReason::LossReasonPending => debug!(
                "Executor {executor_id} on {} lost, but reason not yet known.",
                record.host
            ),
            ExecutorLossReason::ExecutorKilled => {
                info!(
                    "Executor {executor_id} on {} killed by driver.",
                    record.host
                )
            }
            _ => {
                let line = format!("Lost executor {executor_id} on {}: {reason}", record.host);
                self.log_lost_executor(now, &line);
            }
        }
        // Its slot is free for the next executor added: its tasks leave the list now.
        let task_ids: Vec<u64> = self.running.on_executor(record.slot).collect();
        let tasks: Vec<(u64, u32)> = task_ids
            .into_iter()
            .filter_map(|task_id| Some((task_id, self.running.remove(task_id)?)))
            .collect();
        if pending {
            for manager in self.task_sets.values_mut() {
                manager.recompute_locality(&self.registry);
            }
            self.pending_loss.insert(
                SharedStr::from(executor_id),
                PendingLoss {
                    host: record.host,
                    tasks,
                },
            );
            return;
        }
        self.fail_lost_tasks(now, executor_id, &reason, tasks);
    }

    /// The task sets hear that `tasks` were lost with their executor, for `reason`;
    /// ExecutorRemoved is posted and offers revived.
    fn fail_lost_tasks(
        &mut self,
        now: Instant,
        executor_id: &str,
        reason: &ExecutorLossReason,
        tasks: Vec<(u64, u32)>,
    ) {
        let counts = reason.counts_towards_task_failures();
        let message = format!(
            "ExecutorLostFailure (executor {executor_id} {}) Reason: {reason}",
            if counts {
                "exited caused by one of the running tasks"
            } else {
                "exited unrelated to the running tasks"
            }
        );
        for (task_id, key) in tasks {
            if let Some(manager) = self.task_sets.get_mut(&key) {
                manager.handle_failed_task(
                    now,
                    task_id,
                    TaskState::Lost,
                    Failure {
                        kind: TaskFailureKind::ExecutorLost,
                        message: message.clone(),
                        counts,
                    },
                    &self.registry,
                    &mut self.actions,
                );
            }
            self.after_task_set_change(key);
        }
        for manager in self.task_sets.values_mut() {
            manager.recompute_locality(&self.registry);
        }
        self.actions
            .push_back(Action::Event(SchedulerEvent::ExecutorRemoved {
                executor_id: SharedStr::from(executor_id),
                reason: reason.to_string(),
            }));
        self.actions.push_back(Action::ReviveOffers);
    }

    /// Whether an executor was lost with [`ExecutorLossReason::LossReasonPending`] and
    /// the reason has not come yet.
    pub fn is_loss_reason_pending(&self, executor_id: &str) -> bool {
        self.pending_loss.contains_key(executor_id)
    }

    /// A worker (host) was removed (the seeds' `workerRemoved`). Its executors are
    /// removed by their own `executor_lost` calls.
    pub fn worker_removed(&mut self, worker_id: &str, host: &str, message: &str) {
        info!("Handle removed worker {worker_id}: {message}");
        debug!("Worker {worker_id} was on host {host}");
    }

    // ---- status updates ------------------------------------------------------------

    /// An executor's report on a task (the seeds' `statusUpdate`). Finished states end
    /// the attempt: FINISHED records the result, FAILED and KILLED make the task pending
    /// again, LOST also marks its executor lost.
    pub fn status_update(
        &mut self,
        now: Instant,
        task_id: u64,
        state: TaskState,
        outcome: TaskOutcome,
    ) {
        if !self.running.contains(task_id) {
            match self.ignored_updates.spend(now) {
                Spend::Log { held_back } => {
                    if held_back > 0 {
                        warn!("{held_back} more update(s) for tasks not running were ignored (logged at DEBUG)");
                    }
                    error!(
                        "Ignoring update with state {state} for TID {task_id} because its task set is gone (this is likely the result of receiving duplicate task finished status updates)"
                    );
                }
                Spend::HoldBack => debug!(
                    "Ignoring update with state {state} for TID {task_id} because its task set is gone (this is likely the result of receiving duplicate task finished status updates)"
                ),
            }
            return;
        }
        if !state.is_finished() {
            return;
        }
        let Some(key) = self.running.remove(task_id) else {
            return;
        };
        let Some((executor_id, index)) = self
            .task_sets
            .get(&key)
            .and_then(|m| m.running_attempt(task_id))
            .map(|a| (a.executor_id.clone(), a.index))
        else {
            return;
        };
        // A fetch failure is no retry of the task but the end of its task set: the DAG
        // scheduler decides what runs next.
        let outcome = match (state, outcome) {
            (TaskState::Failed, TaskOutcome::FetchFailed { failure, .. }) => {
                if let Some(manager) = self.task_sets.get_mut(&key) {
                    manager.handle_fetch_failed_task(now, task_id, *failure, &mut self.actions);
                }
                self.after_task_set_change(key);
                return;
            }
            (_, outcome) => outcome,
        };
        let mut accumulators = None;
        let result = match (state, outcome) {
            (
                TaskState::Finished,
                TaskOutcome::Direct {
                    value,
                    metrics,
                    accumulators: updates,
                },
            ) => {
                accumulators = Some(updates);
                Ok(TaskResult::Direct { value, metrics })
            }
            (
                TaskState::Finished,
                TaskOutcome::Indirect {
                    block_id,
                    size,
                    metrics,
                    accumulators: updates,
                },
            ) => {
                accumulators = Some(updates);
                Ok(TaskResult::Indirect {
                    executor_id: executor_id.clone(),
                    block_id,
                    size,
                    metrics,
                })
            }
            (TaskState::Finished, TaskOutcome::None) => Ok(TaskResult::Direct {
                value: bytes::Bytes::new(),
                metrics: Default::default(),
            }),
            (
                _,
                TaskOutcome::Failure {
                    kind,
                    message,
                    counts_towards_failures,
                    ..
                },
            ) => Err(Failure {
                kind: if state == TaskState::Killed {
                    TaskFailureKind::TaskKilled
                } else {
                    kind
                },
                message,
                counts: counts_towards_failures && state != TaskState::Killed,
            }),
            (TaskState::Killed, _) => Err(Failure {
                kind: TaskFailureKind::TaskKilled,
                message: "TaskKilled".to_owned(),
                counts: false,
            }),
            // Its executor is lost with it (below), which counts, as in Spark.
            (TaskState::Lost, _) => Err(Failure {
                kind: TaskFailureKind::ExecutorLost,
                message: format!("Task {task_id} was lost"),
                counts: true,
            }),
            (_, _) => Err(Failure {
                kind: TaskFailureKind::Exception,
                message: "Task failed".to_owned(),
                counts: true,
            }),
        };
        let mut revive = false;
        if let Some(manager) = self.task_sets.get_mut(&key) {
            match result {
                Ok(result) => {
                    let task_set = manager.id();
                    let key = PartitionKey {
                        job_id: manager.job_id(),
                        job_run: manager.job_run(),
                        stage_id: task_set.stage_id,
                        partition: manager.partition_id(index),
                    };
                    manager.handle_successful_task(now, task_id, result, &mut self.actions);
                    self.merge_accumulators(now, task_id, task_set, index, key, accumulators);
                }
                Err(failure) => {
                    // The task is pending again, perhaps for another executor; not when
                    // this was a copy of a task that already succeeded (Spark's
                    // someAttemptSucceeded check), such as a killed speculative copy.
                    revive = manager.handle_failed_task(
                        now,
                        task_id,
                        state,
                        failure,
                        &self.registry,
                        &mut self.actions,
                    );
                }
            }
        }
        self.after_task_set_change(key);
        if state == TaskState::Lost {
            self.executor_lost(
                now,
                &executor_id,
                ExecutorLossReason::SlaveLost {
                    message: format!(
                        "Task {task_id} was lost, so marking the executor as lost as well."
                    ),
                    worker_lost: false,
                },
            );
        } else if revive {
            self.actions.push_back(Action::ReviveOffers);
        }
    }
}
