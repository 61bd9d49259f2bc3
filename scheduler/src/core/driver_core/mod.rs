//! The driver's state behind its endpoints (the seeds' `CoarseGrainedSchedulerBackend`
//! with its `DriverEndpoint` handlers): the executor registry, launching tasks, status
//! updates, executor removal, fetching large results ([`result_fetch`]), heartbeat
//! expiry, and what the driver asks of the cluster manager ([`executor_supply`]).
//!
//! # What the driver sends, and where that is decided
//!
//! Here. [`DriverCore`] is a state machine like the [`TaskScheduler`] inside it: the
//! glue (`crate::driver`) calls one of its methods for each message, timer and call of
//! the driver program, passing `now`, then takes [`Output`]s with
//! [`DriverCore::poll_output`] until there are none and carries each out. Every message
//! the driver sends on its own account is an output (LaunchTask, KillTask,
//! StopExecutor, FetchBlockChunk, RemoveBlock), as is every request to the cluster
//! manager and every event for listeners and task set handles. Replies to the messages
//! the driver handles are what the handler's method returns (a registration's refusal,
//! a heartbeat's "register again", the block of a result nobody will fetch).
//!
//! What the task scheduler asks for in turn (kills, offers, events) becomes outputs as
//! the glue polls: a method leaves the scheduler's actions to [`DriverCore::poll_output`],
//! unless offers must be made before it goes on.
//!
//! It holds no connection, no endpoint reference and no cluster manager, and reads no
//! clock. An executor is its id, the address it registered from and a [`PeerId`]: the
//! number under which the glue keeps what reaches it.
//!
//! # Lost executors and executor failures
//!
//! The driver keeps asking the cluster manager for the executors it wants in all (the
//! last total requested): whenever an executor is removed, and whenever the cluster
//! manager reports an executor process that exited on its own
//! ([`DriverCore::executor_supply_report`], about once a second), it asks for that
//! total again, so lost executors are replaced. As Spark's YARN application master
//! does, it counts executor failures: processes that exited abnormally (a non-zero code
//! or a signal) without the driver asking, and executors the cluster manager could not
//! start. Once there are `executor.maxNumFailures` of them (by default twice the
//! executors asked for, at least 3, counted over the driver's life) the driver gives
//! up: every active task set is aborted with "Max number of executor failures (N)
//! reached (...)", no more executors are asked for, and later submissions fail with
//! that message. Executors that never start nor exit are not counted; the caller's
//! timeouts bound those.
//!
//! With a cluster manager that reports exits ([`DriverCore::wait_for_loss_reasons`]),
//! a closed connection does not remove its executor at once: as the seeds' YARN backend
//! does (`disableExecutor`, `LossReasonPending`), the executor is disabled (no offers;
//! its tasks held, not yet re-run) until the report of its exit gives the reason
//! ("executor 2 exited with code 3"), or the wait ends and the closed connection is the
//! reason ([`DISASSOCIATED`]).
//!
//! # Executors that do not take what they are sent
//!
//! A launch that finds the executor's connection full ([`LaunchRefused::Backlogged`])
//! is back-pressure: the task is pending again, uncounted, the launches queued behind it
//! are withdrawn unsent, and the executor gets no offers until the glue reports its
//! connection under half of `rpc.outbox.maxBytes` ([`DriverCore::outbox_backlog`]).
//! Retrying instead would hand a peer that stopped reading every pending task, round
//! after round, with a new task id each time. A connection that, found full and not
//! seen empty since, takes no byte for longer than `network.timeout` loses its
//! executor, as silence does: the tasks queued to it would otherwise never come back.
//! One that takes its bytes slowly keeps it.

mod executor_supply;
mod executors;
mod jobs;
mod output;
mod result_fetch;
mod status;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use flint_wire::{
    BlockId, ExecutorLossReason, SharedStr, TaskAccumUpdates, TaskFailureKind, TaskMetrics,
    TaskOutcome, TaskState, DRIVER_STOPPING_REFUSAL,
};
use tracing::{debug, info, warn};

use crate::core::config::{SchedulerConfig, MAX_CORES_KEY};
use crate::core::events::Action;
use crate::core::fx_hash::FxHashMap;
use crate::core::heartbeat::HeartbeatTracker;
use crate::core::task_scheduler::TaskScheduler;
use crate::core::task_set::{TaskSet, WorkerOffer};
use crate::SchedulerError;

use executor_supply::ExecutorSupply;
pub use executor_supply::ExitedExecutor;
pub(crate) use executor_supply::{NegativeRequest, SupplyEvent};
pub(crate) use executors::Registration;
use executors::{Backlog, ExecutorData, Peers};
use jobs::Jobs;
pub use jobs::FIRST_JOB_ID;
pub use output::{ChunkFailure, ChunkReply, IfRefused, JobStats, LaunchRefused, Output, PeerId};
use result_fetch::ResultFetch;
#[cfg(test)]
pub(crate) use status::TaskSetView;
pub(crate) use status::{id_order, CoreView, ExecutorView};

/// The seeds' reason for an executor whose connection closed.
pub const DISASSOCIATED: &str = "Remote RPC client disassociated. Likely due to containers exceeding thresholds, or network issues. Check driver logs for WARN messages.";
/// The seeds' reason for executors removed by a reset.
pub const STALE_EXECUTOR: &str = "Stale executor after cluster manager re-registered.";
/// Why task sets still open when the driver stops end failed.
pub const DRIVER_STOPPED: &str = "the driver was shut down";

/// Offer rounds made one after another, for one call or while the glue takes the
/// outputs, when launches keep failing, before leaving it to the revive timer.
const MAX_OFFER_ROUNDS: usize = 4;

/// The longest executor ID, and host name, an executor may register with.
pub const MAX_EXECUTOR_ID_LEN: usize = 256;

/// What the core needs to know of the transport under it, as plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TransportLimits {
    /// `rpc.message.maxSize`, in bytes: large results are fetched in chunks that fit.
    pub max_message_size: usize,
    /// `network.timeout`: executors silent for longer are expired, as are executors
    /// whose connection stays backlogged for longer.
    pub network_timeout: Duration,
    /// `rpc.outbox.maxBytes`: a backlogged executor gets offers again once less than
    /// half of it is queued on its connection.
    pub outbox_limit: usize,
}

/// The driver's state. See the module docs.
pub(crate) struct DriverCore {
    /// The scheduler's keys, as the task scheduler inside has them too.
    pub config: SchedulerConfig,
    limits: TransportLimits,
    pub scheduler: TaskScheduler,
    /// The seeds' `executorDataMap`.
    executors: FxHashMap<SharedStr, ExecutorData>,
    address_to_executor: FxHashMap<SocketAddr, SharedStr>,
    peers: Peers,
    total_core_count: u32,
    heartbeats: HeartbeatTracker,
    /// Executors asked for, being removed, and failed.
    supply: ExecutorSupply,
    /// Lines about status updates that are ignored.
    peer_warnings: flint_rpc::log_budget::LogBudget,
    /// Lines about launches that could not be sent (a peer decides how many).
    launch_warnings: flint_rpc::log_budget::LogBudget,
    /// Bytes of results received per task set (by its key: each task set its own,
    /// whatever its id), and how many results (for `driver.maxResultSize`).
    result_sizes: FxHashMap<u32, (u64, u32)>,
    fetches: FxHashMap<u64, ResultFetch>,
    created: Instant,
    /// Whether `isReady` has held once (its INFO line is logged then): submissions
    /// wait for it once, as Spark's `waitBackendReady` does at start.
    ready_logged: bool,
    stopping: bool,
    offers: Vec<WorkerOffer>,
    /// Executors that freed cores since the last round of offers.
    pending_offers: Vec<SharedStr>,
    /// Launches that could not be made in the current round: task, reason, abort.
    launch_failures: Vec<(u64, String, Option<String>)>,
    /// Scratch of a round of offers, beside `offers`: each offer's connection, and the
    /// tasks [`DriverCore::launch_on`] launched on it.
    offer_peers: Vec<(PeerId, u32)>,
    /// What the glue is to carry out, oldest first; the scheduler's actions follow.
    outputs: VecDeque<Output>,
    /// Whether the scheduler asked for offers among the actions taken so far.
    revive: bool,
    /// Offer rounds [`DriverCore::poll_output`] made since the glue last took every
    /// output.
    offer_rounds: usize,
    /// Jobs of stages: the DAG scheduler, fed by the task scheduler's events.
    jobs: Jobs,
    /// How long the reason of a lost executor is waited for, when the cluster manager
    /// reports how its executors exit ([`DriverCore::wait_for_loss_reasons`]); `None`:
    /// a closed connection is the reason.
    loss_reason_wait: Option<Duration>,
    /// Executors whose connection closed, waiting for the cluster manager's report of
    /// their exit until the deadline (the seeds' `executorsPendingLossReason`).
    pending_loss: FxHashMap<SharedStr, Instant>,
}

impl std::fmt::Debug for DriverCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverCore")
            .field("executors", &self.executors.len())
            .field("running_tasks", &self.scheduler.running_tasks())
            .finish()
    }
}

impl DriverCore {
    pub fn new(
        config: SchedulerConfig,
        limits: TransportLimits,
        mut scheduler: TaskScheduler,
        now: Instant,
    ) -> DriverCore {
        // Turned on with the first listener: nothing else reads them.
        scheduler.set_task_start_events(false);
        scheduler.set_accumulator_events(false);
        let jobs = Jobs::new(config.max_consecutive_stage_attempts);
        DriverCore {
            heartbeats: HeartbeatTracker::new(limits.network_timeout),
            config,
            limits,
            scheduler,
            executors: FxHashMap::default(),
            address_to_executor: FxHashMap::default(),
            peers: Peers::default(),
            total_core_count: 0,
            supply: ExecutorSupply::default(),
            peer_warnings: Default::default(),
            launch_warnings: Default::default(),
            result_sizes: FxHashMap::default(),
            fetches: FxHashMap::default(),
            created: now,
            ready_logged: false,
            stopping: false,
            offers: Vec::new(),
            pending_offers: Vec::new(),
            launch_failures: Vec::new(),
            offer_peers: Vec::new(),
            outputs: VecDeque::new(),
            revive: false,
            offer_rounds: 0,
            jobs,
            loss_reason_wait: None,
            pending_loss: FxHashMap::default(),
        }
    }

    /// The cluster manager reports how its executors exit
    /// ([`crate::ClusterManager::exited_executors`]): an executor whose connection closes
    /// is disabled (no offers, its tasks held) and its loss waits up to `wait` for that
    /// report, whose exit code is then the reason ("executor 2 exited with code 3")
    /// rather than the seeds' guess for a closed connection ([`DISASSOCIATED`]), which
    /// is the reason once `wait` has passed without a report.
    pub fn wait_for_loss_reasons(&mut self, wait: Duration) {
        self.loss_reason_wait = Some(wait);
    }

    /// Whether an executor's connection closed and the reason of its loss is awaited.
    #[cfg(test)]
    pub fn is_loss_reason_pending(&self, executor_id: &str) -> bool {
        self.pending_loss.contains_key(executor_id)
    }

    pub fn heartbeats(&self) -> &HeartbeatTracker {
        &self.heartbeats
    }

    // ---- outputs -------------------------------------------------------------------

    /// Whether outputs the core decided are queued, not yet taken by
    /// [`DriverCore::poll_output`]: false once the last launch of an offer round was
    /// taken, before the core moves on to its next action.
    #[inline]
    pub fn has_queued_outputs(&self) -> bool {
        !self.outputs.is_empty()
    }

    /// The next thing to do outside the core, oldest first; `None` once everything
    /// decided so far was taken. The glue calls it until `None` after every call into
    /// the core, in the same turn, and carries each output out before taking the next,
    /// but for launches: those of one offer round may be gathered and sent together once
    /// the last is taken ([`DriverCore::has_queued_outputs`] false), before the next
    /// call.
    ///
    /// Once the outputs queued so far are taken, the task scheduler's actions follow: its
    /// events as they are, its kills as [`Output::KillTask`], and its requests for offers
    /// as a round of offers once every action before them is taken (the launches it
    /// makes come next). Launches the glue could not send
    /// ([`DriverCore::launch_failed`]) come back this way, so that their tasks are
    /// offered again; at most [`MAX_OFFER_ROUNDS`] rounds are made before the glue has
    /// taken everything, the rest being left to the periodic revive.
    #[inline]
    pub fn poll_output(&mut self, now: Instant) -> Option<Output> {
        loop {
            if let Some(output) = self.outputs.pop_front() {
                return Some(output);
            }
            match self.scheduler.poll_action() {
                // Straight out, not through the queue: one a task.
                Some(Action::Event(event)) => {
                    if let Some(output) = self.route_event(now, event) {
                        return Some(output);
                    }
                }
                Some(action) => self.take_action(now, action),
                None if self.revive && self.offer_rounds < MAX_OFFER_ROUNDS => {
                    self.revive = false;
                    self.offer_rounds += 1;
                    self.make_offers(now);
                }
                None => {
                    if std::mem::take(&mut self.revive) {
                        debug!("A revive is left to the next round of offers");
                    }
                    self.offer_rounds = 0;
                    return None;
                }
            }
        }
    }

    // ---- queries -------------------------------------------------------------------

    /// Registered executors' ids, sorted.
    pub fn executor_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.executors.keys().map(|id| id.to_string()).collect();
        ids.sort_unstable();
        ids
    }

    pub fn num_executors(&self) -> usize {
        self.executors.len()
    }

    pub fn total_cores(&self) -> u32 {
        self.total_core_count
    }

    /// Free cores (and prefetch slots) of an executor.
    pub fn free_slots(&self, executor_id: &str) -> Option<u32> {
        self.executors.get(executor_id).map(|e| e.free_slots)
    }

    /// The seeds' `defaultParallelism`: `default.parallelism`, else the registered
    /// cores, at least 2.
    pub fn default_parallelism(&self) -> usize {
        self.scheduler
            .config()
            .default_parallelism
            .unwrap_or_else(|| (self.total_core_count as usize).max(2))
    }

    /// The seeds' `isReady`: enough executors registered
    /// (`scheduler.minRegisteredResourcesRatio` of those asked for), or
    /// `scheduler.maxRegisteredResourcesWaitingTime` passed since the driver started.
    pub fn is_ready(&mut self, now: Instant) -> bool {
        let ratio = self.config.min_registered_ratio;
        let wanted = (f64::from(self.supply.target_executors) * ratio).ceil();
        if self.executors.len() as f64 >= wanted {
            if !self.ready_logged {
                self.ready_logged = true;
                info!("SchedulerBackend is ready for scheduling beginning after reached minRegisteredResourcesRatio: {ratio}");
            }
            return true;
        }
        let waited = now.saturating_duration_since(self.created);
        if waited >= self.config.max_registered_wait {
            if !self.ready_logged {
                self.ready_logged = true;
                info!(
                    "SchedulerBackend is ready for scheduling beginning after waiting maxRegisteredResourcesWaitingTime: {}(ms)",
                    self.config.max_registered_wait.as_millis()
                );
            }
            return true;
        }
        false
    }

    /// Whether submissions may go ahead: [`DriverCore::is_ready`] has held once (Spark
    /// waits for the backend once, when the application starts).
    pub fn backend_ready(&mut self, now: Instant) -> bool {
        self.ready_logged || self.is_ready(now)
    }

    /// Whether the driver is stopping ([`DriverCore::begin_stopping`] or StopExecutors):
    /// no more offers are made.
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    // ---- task sets -----------------------------------------------------------------

    /// Registers a task set (the seeds' `submitTasks`); the offers and events that
    /// follow are outputs. The glue takes every output before (what earlier task sets
    /// left to do, an end for one, comes before a new one with the same id takes their
    /// place) and after, once it has a handle for the new task set.
    ///
    /// Its stage and job ids must be below [`FIRST_JOB_ID`]: the DAG scheduler's events
    /// are told apart from the driver program's by them.
    pub fn submit(&mut self, now: Instant, task_set: TaskSet) -> Result<(), SchedulerError> {
        let id = task_set.id;
        if id.stage_id >= FIRST_JOB_ID || task_set.job_id >= FIRST_JOB_ID {
            return Err(SchedulerError::ReservedId {
                task_set: id.to_string(),
                job_id: task_set.job_id,
            });
        }
        self.submit_task_set(now, task_set)
    }

    /// [`DriverCore::submit`] for any ids: the DAG scheduler's task sets come this way.
    pub(super) fn submit_task_set(
        &mut self,
        now: Instant,
        task_set: TaskSet,
    ) -> Result<(), SchedulerError> {
        // A new task set starts its driver.maxResultSize tally afresh, even under the id
        // of one that ended moments ago: tallies are kept by task set key.
        self.scheduler.submit_tasks(now, task_set)
    }

    // ---- registration --------------------------------------------------------------

    /// The RegisterExecutor handler: the executor is recorded, with a new [`PeerId`] for
    /// the connection it came on (the glue keeps its reference under it), or the reason
    /// it is refused is returned (the seeds' texts).
    pub fn register_executor(
        &mut self,
        now: Instant,
        registration: Registration,
    ) -> Result<PeerId, String> {
        let Registration {
            executor_id,
            host,
            cores,
            address,
            endpoint,
        } = registration;
        // Every launch to the executor carries its ID: one near rpc.message.maxSize would
        // push every launch past the limit, and each would abort its task set.
        if executor_id.len() > MAX_EXECUTOR_ID_LEN || host.len() > MAX_EXECUTOR_ID_LEN {
            return Err(format!(
                "Executor ID ({} bytes) or host name ({} bytes) is longer than {MAX_EXECUTOR_ID_LEN} bytes",
                executor_id.len(),
                host.len()
            ));
        }
        // Every core is a launch the executor is offered in one round: a peer that
        // claims billions would be handed every pending task at once.
        let max_cores = self.config.max_executor_cores;
        if cores > max_cores {
            return Err(format!(
                "Executor {executor_id} registered with {cores} cores, more than {MAX_CORES_KEY} ({max_cores})"
            ));
        }
        // One whose loss is pending is still known, as in the seeds' executorDataMap.
        if self.executors.contains_key(&executor_id) || self.pending_loss.contains_key(&executor_id)
        {
            return Err(format!("Duplicate executor ID: {executor_id}"));
        }
        // After StopExecutors it would get no StopExecutor, and be killed at the end of
        // the cluster manager's grace period instead.
        if self.stopping {
            return Err(format!(
                "{DRIVER_STOPPING_REFUSAL}: executor {executor_id} is not needed"
            ));
        }
        // A connection speaks for one executor: a second id on it would let one peer
        // hold many ids, and only the last would be removed when it disconnects.
        if let Some(registered) = address.and_then(|a| self.address_to_executor.get(&a)) {
            return Err(format!(
                "Executor {executor_id} cannot register on the connection executor {registered} registered on"
            ));
        }
        if self.scheduler.is_host_excluded(&host) {
            info!("Rejecting {executor_id} as it has been blacklisted.");
            return Err(format!("Executor is blacklisted: {executor_id}"));
        }
        let shown_address = address.map_or_else(|| "local".to_owned(), |a| a.to_string());
        info!("Registered executor {endpoint} ({shown_address}) with ID {executor_id}");
        if let Some(address) = address {
            self.address_to_executor
                .insert(address, executor_id.clone());
        }
        self.total_core_count = self.total_core_count.saturating_add(cores);
        if self.supply.num_pending_executors > 0 {
            self.supply.num_pending_executors -= 1;
            debug!(
                "Decremented number of pending executors ({} left)",
                self.supply.num_pending_executors
            );
        }
        // Launch pipelining deepens the queue of an executor that can run a task; it
        // does not make one with fewer cores than task.cpus eligible.
        let cpus = self.config.task_cpus;
        let queue_slots = if cores >= cpus {
            self.config.prefetch.saturating_mul(cpus)
        } else {
            0
        };
        let free_slots = cores.saturating_add(queue_slots);
        let peer = self.peers.open();
        self.executors.insert(
            executor_id.clone(),
            ExecutorData {
                id: executor_id.clone(),
                peer,
                address,
                host: host.clone(),
                total_cores: cores,
                free_slots,
                offer_pending: false,
                backlog: None,
            },
        );
        self.heartbeats.executor_added(&executor_id, now);
        // Posts ExecutorAdded.
        self.scheduler
            .executor_added(executor_id.clone(), host, cores);
        Ok(peer)
    }

    /// What follows a registration once it is answered: the seeds' `makeOffers()`, every
    /// executor's free cores, not only the new one's, since a new executor changes the
    /// locality levels a task set may launch at. After the answer, as in the seeds:
    /// launches queued first could fill the connection's outbox and have the answer
    /// refused, and the executor would wait for it until its ask timed out.
    pub fn offer_after_registration(&mut self, now: Instant) {
        self.make_offers(now);
    }

    // ---- status updates ------------------------------------------------------------

    /// Whether a message from `sender` (its connection's remote address; `None` from this
    /// process) may speak for `executor_id`: from this process always; from a remote
    /// peer only on the connection that executor registered on, or, for an id no
    /// executor holds, on a connection no other executor registered on. Otherwise any
    /// peer could report another executor's tasks, mark it lost, or keep it alive with
    /// heartbeats. The error names the sender and says why, for the log ("from
    /// ADDRESS: ..."); only a remote sender is ever refused.
    pub(crate) fn sender_may_speak_for(
        &self,
        sender: Option<SocketAddr>,
        executor_id: &str,
    ) -> Result<(), String> {
        let Some(sender) = sender else {
            return Ok(());
        };
        match self.address_to_executor.get(&sender) {
            Some(registered) if &**registered != executor_id => Err(format!(
                "from {sender}: it says it is executor {executor_id} but registered as {registered}"
            )),
            Some(_) => Ok(()),
            None if self.executors.contains_key(executor_id) => Err(format!(
                "from {sender}: executor {executor_id} registered on another connection"
            )),
            None => Ok(()),
        }
    }

    /// One status update from `sender` (the connection's remote address), its sender
    /// checked as [`DriverCore::for_each_update_its_sender_may_send`] checks a frame's:
    /// what the driver's endpoint does with a frame of one update.
    #[cfg(test)]
    pub(crate) fn status_update(
        &mut self,
        now: Instant,
        sender: Option<SocketAddr>,
        executor_id: &str,
        task_id: u64,
        state: TaskState,
        outcome: TaskOutcome,
    ) -> Option<BlockId> {
        if let Err(why) = self.sender_may_speak_for(sender, executor_id) {
            self.refuse_status_update(now, task_id, state, &why);
            return None;
        }
        self.status_update_from_checked_sender(now, executor_id, task_id, state, outcome)
    }

    /// The updates of one frame from `sender`: `accepted` runs for each whose sender may
    /// speak for the executor it names (`executor_of`), in order; each other one is logged
    /// as ignored (with its task and state, from `task_of`) and never decoded, so that a
    /// peer speaking for another executor costs no decoding of the results and
    /// accumulators it sends. The sender is checked once for a run of updates naming the
    /// same executor, as every update of an executor's frame does.
    pub(crate) fn for_each_update_its_sender_may_send<U>(
        &mut self,
        now: Instant,
        sender: Option<SocketAddr>,
        updates: &[U],
        executor_of: impl Fn(&U) -> &str,
        task_of: impl Fn(&U) -> (u64, TaskState),
        mut accepted: impl FnMut(&mut Self, &U),
    ) {
        let mut checked: Option<(&str, Result<(), String>)> = None;
        for update in updates {
            let executor_id = executor_of(update);
            let verdict = match &checked {
                Some((id, verdict)) if *id == executor_id => verdict,
                _ => {
                    let verdict = self.sender_may_speak_for(sender, executor_id);
                    &checked.insert((executor_id, verdict)).1
                }
            };
            match verdict {
                Ok(()) => accepted(self, update),
                Err(why) => {
                    let (task_id, state) = task_of(update);
                    self.refuse_status_update(now, task_id, state, why);
                }
            }
        }
    }

    /// Logs that the update of `task_id` was ignored because its sender may not speak for
    /// the executor it names (`why`, from [`DriverCore::sender_may_speak_for`]).
    fn refuse_status_update(&mut self, now: Instant, task_id: u64, state: TaskState, why: &str) {
        flint_rpc::peer_warn!(
            self.peer_warnings,
            now,
            "Ignored task status update ({task_id} state {state}) {why}"
        );
    }

    /// The StatusUpdate handler, for an update whose sender may speak for `executor_id`
    /// ([`DriverCore::for_each_update_its_sender_may_send`]): it is taken only for a task
    /// that runs on that executor.
    ///
    /// Returns the block of a large result that will not be fetched, held by an executor
    /// the driver does not know (one it removed that has yet to register again): the
    /// caller asks the sender to remove it, over the connection the update came on, or
    /// it would stay in that executor's memory for good.
    pub(crate) fn status_update_from_checked_sender(
        &mut self,
        now: Instant,
        executor_id: &str,
        task_id: u64,
        state: TaskState,
        outcome: TaskOutcome,
    ) -> Option<BlockId> {
        // Whether the scheduler runs this attempt on this executor: only then does a
        // finished update free its cores, so an attempt is credited once.
        let runs_here = match self.scheduler.executor_of(task_id) {
            Some(runs_on) if &**runs_on != executor_id => {
                flint_rpc::peer_warn!(self.peer_warnings, now, "Ignored task status update ({task_id} state {state}) from executor {executor_id}: the task runs on executor {runs_on}");
                return self.remove_unfetched_block(executor_id, &outcome);
            }
            Some(_) => true,
            None => false,
        };
        if runs_here && self.is_fetching(task_id) {
            // Its result is being fetched: the attempt already ended.
            flint_rpc::peer_warn!(self.peer_warnings, now, "Ignored duplicate task status update ({task_id} state {state}) from executor {executor_id}: its result is being fetched");
            return None;
        }
        let finished = state.is_finished();
        if state == TaskState::Lost && runs_here && self.executors.contains_key(executor_id) {
            // As Spark does, a lost task marks its executor lost: the driver removes it
            // from every registry, not only the scheduler's, so that it may register
            // again when its heartbeat is answered with a re-registration.
            let reason = ExecutorLossReason::SlaveLost {
                message: format!(
                    "Task {task_id} was lost, so marking the executor as lost as well."
                ),
                worker_lost: false,
            };
            self.remove_executor(now, executor_id, reason);
            return None;
        }
        if finished {
            if let Some(executor) = self.executors.get_mut(executor_id) {
                // The task's cores are free at once, whatever happens to its result (a
                // failed fetch may make offers before this returns).
                if runs_here {
                    executor.free_slots += self.config.task_cpus;
                }
                Self::offer_later_to(executor, &mut self.pending_offers);
            } else {
                flint_rpc::peer_warn!(self.peer_warnings, now, "Ignored task status update ({task_id} state {state}) from unknown executor with ID {executor_id}");
            }
        }
        let mut outcome = outcome;
        if let TaskOutcome::FetchFailed { failure, .. } = &mut outcome {
            self.vet_fetch_failure(now, executor_id, failure);
        }
        let mut unfetched = None;
        // Only an attempt running on this executor has a result to count and fetch: for
        // any other task id the scheduler ignores the update, and a fetch would hold
        // memory for a result nobody waits for.
        if state == TaskState::Finished && runs_here {
            let size = match &outcome {
                TaskOutcome::Direct { value, .. } => value.len() as u64,
                TaskOutcome::Indirect { size, .. } => *size,
                _ => 0,
            };
            if !self.can_take_result(task_id, size) {
                unfetched = self.remove_unfetched_block(executor_id, &outcome);
                outcome = TaskOutcome::Failure {
                    kind: TaskFailureKind::TaskKilled,
                    message: "Tasks result size has exceeded maxResultSize".to_owned(),
                    counts_towards_failures: false,
                    metrics: TaskMetrics::default(),
                };
                self.scheduler
                    .status_update(now, task_id, TaskState::Killed, outcome);
            } else if let TaskOutcome::Indirect {
                block_id,
                size,
                metrics,
                accumulators,
            } = outcome
            {
                self.start_fetch(
                    now,
                    executor_id,
                    task_id,
                    block_id,
                    size,
                    metrics,
                    accumulators,
                );
            } else {
                let value = match &outcome {
                    TaskOutcome::Direct { value, .. } => &value[..],
                    _ => &[],
                };
                match self.map_output_problem(task_id, executor_id, value) {
                    Some(problem) => self.invalid_map_output(now, task_id, executor_id, problem),
                    None => self.scheduler.status_update(now, task_id, state, outcome),
                }
            }
        } else {
            if state == TaskState::Finished {
                unfetched = self.remove_unfetched_block(executor_id, &outcome);
            }
            self.scheduler.status_update(now, task_id, state, outcome);
        }
        unfetched
    }

    /// A large result that will not be fetched is removed from its executor's block
    /// store, which would otherwise keep it until the executor exits. The block, if its
    /// executor is not one the driver knows (see
    /// [`DriverCore::status_update_from_checked_sender`]).
    fn remove_unfetched_block(
        &mut self,
        executor_id: &str,
        outcome: &TaskOutcome,
    ) -> Option<BlockId> {
        let TaskOutcome::Indirect { block_id, .. } = outcome else {
            return None;
        };
        let Some(executor) = self.executors.get(executor_id) else {
            return Some(*block_id);
        };
        self.outputs.push_back(Output::RemoveBlock {
            peer: executor.peer,
            block_id: *block_id,
        });
        None
    }

    // ---- offers and launches -------------------------------------------------------

    /// The seeds' `makeOffers()`: every active executor's free cores, offered at once.
    pub fn make_offers(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        let cpus = self.config.task_cpus;
        let mut offers = std::mem::take(&mut self.offers);
        offers.clear();
        self.offer_peers.clear();
        for (id, e) in &self.executors {
            if e.free_slots >= cpus && !e.is_paused() && !self.supply.pending_to_remove.contains(id)
            {
                offers.push(WorkerOffer {
                    executor_id: id.clone(),
                    host: e.host.clone(),
                    cores: e.free_slots,
                });
                self.offer_peers.push((e.peer, 0));
            }
        }
        self.pending_offers.clear();
        for executor in self.executors.values_mut() {
            executor.offer_pending = false;
        }
        self.launch_on(now, &offers);
        self.offers = offers;
    }

    /// Notes that an executor has free cores to offer, at the end of the current batch
    /// of messages ([`DriverCore::flush_offers`]).
    fn offer_later_to(executor: &mut ExecutorData, pending_offers: &mut Vec<SharedStr>) {
        if !executor.offer_pending {
            executor.offer_pending = true;
            pending_offers.push(executor.id.clone());
        }
    }

    /// The seeds' `makeOffers(executorId)` for every executor that freed cores since the
    /// last call, in one round of offers: many status updates that arrived together
    /// launch their successors together.
    pub fn flush_offers(&mut self, now: Instant) {
        if self.pending_offers.is_empty() {
            return;
        }
        let cpus = self.config.task_cpus;
        let mut offers = std::mem::take(&mut self.offers);
        offers.clear();
        self.offer_peers.clear();
        for id in self.pending_offers.drain(..) {
            let Some(executor) = self.executors.get_mut(&id) else {
                continue;
            };
            executor.offer_pending = false;
            if executor.free_slots >= cpus
                && !executor.is_paused()
                && !self.stopping
                && !self.supply.pending_to_remove.contains(&id)
            {
                offers.push(WorkerOffer {
                    host: executor.host.clone(),
                    cores: executor.free_slots,
                    executor_id: id,
                });
                self.offer_peers.push((executor.peer, 0));
            }
        }
        self.launch_on(now, &offers);
        self.offers = offers;
    }

    /// Offers `offers` to the scheduler and launches what it picks: the seeds'
    /// `launchTasks`. Each task becomes an [`Output::Launch`] to its executor, which the
    /// glue encodes once, straight into the executor's connection, and its cores are
    /// taken. A task the glue cannot send comes back through
    /// [`DriverCore::launch_failed`].
    fn launch_on(&mut self, now: Instant, offers: &[WorkerOffer]) {
        if offers.is_empty() {
            return;
        }
        let cpus = self.config.task_cpus;
        // Each offer's connection, which the caller found with the offer (not looked up
        // again for every task launched); the cores the offer's launches take are taken
        // after the round.
        let mut peers = std::mem::take(&mut self.offer_peers);
        debug_assert_eq!(peers.len(), offers.len());
        let DriverCore {
            scheduler,
            launch_failures,
            outputs,
            ..
        } = self;
        scheduler.resource_offers_with(now, offers, |i, task| {
            let Some((peer, launched)) = peers.get_mut(i) else {
                launch_failures.push((task.task_id, "its executor is gone".to_owned(), None));
                return;
            };
            debug!(
                "Launching task {} on executor id: {} hostname: {}.",
                task.task_id, offers[i].executor_id, offers[i].host
            );
            *launched += 1;
            outputs.push_back(Output::Launch { peer: *peer, task });
        });
        for (offer, &(_, launched)) in offers.iter().zip(&peers) {
            if launched > 0 {
                if let Some(executor) = self.executors.get_mut(&offer.executor_id) {
                    executor.free_slots = executor
                        .free_slots
                        .saturating_sub(cpus.saturating_mul(launched));
                }
            }
        }
        self.offer_peers = peers;
        for (task_id, reason, abort) in std::mem::take(&mut self.launch_failures) {
            self.scheduler.launch_failed(now, task_id, &reason, abort);
        }
    }

    /// The glue could not send an [`Output::Launch`] of `task_id` (task `index` of its
    /// task set) to `executor_id`. Its cores are given back and its attempt ends: a task
    /// larger than `rpc.message.maxSize` aborts its task set with the seeds' message; a
    /// backlogged connection is back-pressure ([`LaunchRefused::Backlogged`], see
    /// [`DriverCore::outbox_backlog`]); any other refusal leaves the task pending, to be
    /// offered again from the next [`DriverCore::poll_output`].
    pub fn launch_failed(
        &mut self,
        now: Instant,
        executor_id: &str,
        task_id: u64,
        index: u32,
        refused: LaunchRefused,
    ) {
        if let Some(executor) = self.executors.get_mut(executor_id) {
            executor.free_slots = executor.free_slots.saturating_add(self.config.task_cpus);
        }
        let (reason, abort) = match refused {
            LaunchRefused::TooLarge { size, limit } => {
                let message = format!(
                    "Serialized task {task_id}:{index} was {size} bytes, which exceeds max allowed: rpc.message.maxSize ({limit} bytes). Consider increasing rpc.message.maxSize or using broadcast variables for large values."
                );
                (message.clone(), Some(message))
            }
            LaunchRefused::Backlogged { queued, limit } => {
                self.launch_backlogged(now, executor_id, task_id, queued, limit);
                return;
            }
            LaunchRefused::Other(e) => {
                flint_rpc::peer_warn!(
                    self.launch_warnings,
                    now,
                    "Cannot launch task {task_id} on executor {executor_id}: {e}"
                );
                (format!("cannot send the task: {e}"), None)
            }
        };
        self.scheduler.launch_failed(now, task_id, &reason, abort);
    }

    /// Back-pressure: `executor_id`'s connection had `queued` bytes of at most `limit`
    /// (`rpc.outbox.maxBytes`) when the launch of `task_id` was tried. The executor is
    /// backlogged from `now`: it gets no offers until it drains, and the launches to it
    /// still queued are not tried (they would meet the same full outbox) but withdrawn
    /// with this one. Each withdrawn task is pending again, with no failure counted, and
    /// is offered to the other executors.
    fn launch_backlogged(
        &mut self,
        now: Instant,
        executor_id: &str,
        task_id: u64,
        queued: usize,
        limit: usize,
    ) {
        let reason = format!(
            "not sent: the connection of executor {executor_id} has {queued} bytes queued (rpc.outbox.maxBytes {limit})"
        );
        let cpus = self.config.task_cpus;
        let low_water = self.low_water_mark();
        let timeout = self.limits.network_timeout;
        let mut withdrawn = vec![task_id];
        if let Some(executor) = self.executors.get_mut(executor_id) {
            let peer = executor.peer;
            self.outputs.retain(|output| match output {
                Output::Launch { peer: to, task } if *to == peer => {
                    withdrawn.push(task.task_id);
                    false
                }
                _ => true,
            });
            let others = u32::try_from(withdrawn.len() - 1).unwrap_or(u32::MAX);
            executor.free_slots = executor
                .free_slots
                .saturating_add(others.saturating_mul(cpus));
            let backlog = executor.backlog.get_or_insert(Backlog {
                progress_at: now,
                written: None,
                paused: false,
            });
            if !std::mem::replace(&mut backlog.paused, true) {
                flint_rpc::peer_warn!(
                    self.launch_warnings,
                    now,
                    "Executor {executor_id} is not taking what it is sent: {queued} bytes are queued on its connection (rpc.outbox.maxBytes {limit}). It gets no tasks until fewer than {} bytes are, and is removed as lost unless its connection is seen empty within network.timeout ({} ms); {} launches to it are pending again",
                    low_water,
                    timeout.as_millis(),
                    withdrawn.len()
                );
            }
        }
        for task_id in withdrawn {
            self.scheduler.launch_withdrawn(now, task_id, &reason);
        }
    }

    /// Below this many bytes queued, a backlogged executor's connection is drained: half
    /// of `rpc.outbox.maxBytes`, so that a connection at the edge of full does not go in
    /// and out of back-pressure with every launch.
    fn low_water_mark(&self) -> usize {
        self.limits.outbox_limit / 2
    }

    /// The backlogged executors and their connections: the glue reads how many bytes
    /// each has queued, about every `network.timeout` / 4 (at most a second), and tells
    /// [`DriverCore::outbox_backlog`].
    pub fn backlogged_executors(&self) -> Vec<(SharedStr, PeerId)> {
        self.executors
            .values()
            .filter(|e| e.backlog.is_some())
            .map(|e| (e.id.clone(), e.peer))
            .collect()
    }

    /// `queued` bytes are queued on the connection of the backlogged `executor_id` at
    /// `now`, and `written` bytes have been written to it over its life. Below the
    /// low-water mark (half of `rpc.outbox.maxBytes`) it is offered tasks again (with the
    /// next [`DriverCore::flush_offers`] or round of offers); seen empty, its backlog is
    /// over. With bytes queued and none of them taken for longer than `network.timeout`
    /// (`written` has not grown since it was found full, or since it last grew), it is
    /// removed as lost, as an executor silent for that long is: its tasks (those queued
    /// to it among them) run again elsewhere, and its process is killed and replaced. A
    /// peer that stops reading is removed so even when what it was sent fits under the
    /// mark: the tasks queued to it would otherwise never come back; one that reads
    /// slowly, never. Nothing for an executor that is not backlogged.
    pub fn outbox_backlog(&mut self, now: Instant, executor_id: &str, queued: usize, written: u64) {
        let low_water = self.low_water_mark();
        let timeout = self.limits.network_timeout;
        let Some(executor) = self.executors.get_mut(executor_id) else {
            return;
        };
        let Some(backlog) = &mut executor.backlog else {
            return;
        };
        let resumed = queued < low_water && std::mem::take(&mut backlog.paused);
        if queued == 0 {
            executor.backlog = None;
        }
        if resumed {
            debug!("The connection of executor {executor_id} drained to {queued} bytes queued: it is offered tasks again");
            Self::offer_later_to(executor, &mut self.pending_offers);
        }
        let Some(backlog) = &mut executor.backlog else {
            return;
        };
        if backlog.written.is_some_and(|before| written > before) {
            backlog.progress_at = now;
        }
        backlog.written = Some(written);
        let stalled_for = now.saturating_duration_since(backlog.progress_at);
        if stalled_for <= timeout {
            return;
        }
        let id = executor.id.to_string();
        flint_rpc::peer_warn!(
            self.launch_warnings,
            now,
            "Removing executor {id} whose connection has not taken a byte for {} ms: exceeds timeout {} ms",
            stalled_for.as_millis(),
            timeout.as_millis()
        );
        let message = format!(
            "Executor's connection has taken nothing for {} ms ({queued} bytes queued on it since it reached rpc.outbox.maxBytes {}), exceeding network.timeout ({} ms)",
            stalled_for.as_millis(),
            self.limits.outbox_limit,
            timeout.as_millis()
        );
        self.expire_executor(now, id, message);
    }

    /// Removes `id` as lost for `message` (silent, or not taking what it is sent) and
    /// has its process killed and replaced: the seeds' `SlaveLost`, as the heartbeat
    /// receiver's expiry does.
    fn expire_executor(&mut self, now: Instant, id: String, message: String) {
        self.kill_executors(std::slice::from_ref(&id), true, true);
        self.remove_executor(
            now,
            &id,
            ExecutorLossReason::SlaveLost {
                message,
                worker_lost: false,
            },
        );
    }

    // ---- actions -------------------------------------------------------------------

    /// Turns what the scheduler asked for so far into outputs now, offers included (up
    /// to [`MAX_OFFER_ROUNDS`] rounds): for a method that must see them made before it
    /// goes on. Others leave this to [`DriverCore::poll_output`].
    fn process_actions(&mut self, now: Instant) {
        for round in 0..=MAX_OFFER_ROUNDS {
            while let Some(action) = self.scheduler.poll_action() {
                self.take_action(now, action);
            }
            if !std::mem::take(&mut self.revive) {
                return;
            }
            if round == MAX_OFFER_ROUNDS {
                // The actions of the last round are carried out all the same; the revive
                // they ask for is left to the next event or the periodic revive.
                debug!("A revive is left to the next round of offers");
                return;
            }
            self.make_offers(now);
        }
    }

    /// A kill becomes an output; a request for offers is noted, to be met once every
    /// action before it is taken.
    fn take_action(&mut self, now: Instant, action: Action) {
        match action {
            Action::KillTask {
                task_id,
                executor_id,
                interrupt_thread,
                reason,
            } => self.kill_task(task_id, &executor_id, interrupt_thread, reason),
            Action::ReviveOffers => self.revive = true,
            Action::Event(event) => {
                if let Some(output) = self.route_event(now, event) {
                    self.outputs.push_back(output);
                }
            }
        }
    }

    // ---- kills and removals --------------------------------------------------------

    /// The KillTask handler: passed on to the executor, or the seeds' WARN.
    pub fn kill_task(
        &mut self,
        task_id: u64,
        executor_id: &str,
        interrupt_thread: bool,
        reason: String,
    ) {
        match self.executors.get(executor_id) {
            Some(executor) => self.outputs.push_back(Output::KillTask {
                peer: executor.peer,
                task_id,
                executor_id: executor.id.clone(),
                interrupt_thread,
                reason,
            }),
            // Its connection is gone: the task went with it.
            None if self.pending_loss.contains_key(executor_id) => debug!(
                "Not killing task {task_id}: executor {executor_id} is gone, the reason pending"
            ),
            None => warn!("Attempted to kill task {task_id} for unknown executor {executor_id}."),
        }
    }

    /// The seeds' `removeExecutor`: the executor leaves every registry, the scheduler
    /// is told (its tasks run again elsewhere) and ExecutorRemoved is posted.
    /// The executor is replaced (the total asked for is asked for again).
    pub fn remove_executor(&mut self, now: Instant, executor_id: &str, reason: ExecutorLossReason) {
        if self.lose_executor(now, executor_id, reason) {
            self.replace_lost_executors();
        }
    }

    /// [`DriverCore::remove_executor`] but for the replacement and the actions; false if
    /// the executor was not registered.
    fn lose_executor(
        &mut self,
        now: Instant,
        executor_id: &str,
        reason: ExecutorLossReason,
    ) -> bool {
        debug!("Asked to remove executor {executor_id} with reason {reason}");
        if self.pending_loss.remove(executor_id).is_some() {
            // Disabled when its connection closed: the reason has come.
            self.scheduler.executor_lost(now, executor_id, reason);
            return true;
        }
        let Some(executor) = self.forget_executor(executor_id) else {
            info!("Asked to remove non-existent executor {executor_id}");
            return false;
        };
        self.supply.pending_to_remove.remove(&executor.id);
        self.scheduler.executor_lost(now, executor_id, reason);
        true
    }

    /// Takes an executor out of the driver's own registries (not the scheduler's).
    fn forget_executor(&mut self, executor_id: &str) -> Option<ExecutorData> {
        let executor = self.executors.remove(executor_id)?;
        if let Some(address) = executor.address {
            self.address_to_executor.remove(&address);
        }
        self.total_core_count = self.total_core_count.saturating_sub(executor.total_cores);
        self.heartbeats.executor_removed(executor_id);
        // Launches to it not yet carried out are not: their attempts end with its loss
        // and run elsewhere, and one sent still, on a connection left open, would run
        // twice.
        self.outputs.retain(|output| {
            !matches!(output, Output::Launch { task, .. } if &*task.executor_id == executor_id)
        });
        self.release_peer(executor.peer);
        Some(executor)
    }

    /// One holder of `peer` fewer; the glue forgets it once none is left.
    fn release_peer(&mut self, peer: PeerId) {
        if self.peers.release(peer) {
            self.outputs.push_back(Output::ForgetPeer(peer));
        }
    }

    /// The driver endpoint's `onDisconnected`: an executor whose connection closed is
    /// removed (killed on purpose: ExecutorKilled; else the seeds' disassociation text),
    /// or, when the cluster manager reports exits ([`DriverCore::wait_for_loss_reasons`]),
    /// disabled until its report or the wait's end (the seeds' `disableExecutor` and
    /// LossReasonPending).
    pub fn disconnected(&mut self, now: Instant, remote: SocketAddr) {
        let Some(executor_id) = self.address_to_executor.get(&remote).cloned() else {
            return;
        };
        if self.stopping {
            // It was asked to stop: its leaving is no loss.
            debug!("Executor {executor_id} disconnected after it was asked to stop");
            self.forget_executor(&executor_id);
            return;
        }
        let reason = if self.supply.pending_to_remove.contains(&executor_id) {
            ExecutorLossReason::ExecutorKilled
        } else if let Some(wait) = self.loss_reason_wait {
            self.disable_executor(now, &executor_id, wait);
            return;
        } else {
            ExecutorLossReason::SlaveLost {
                message: DISASSOCIATED.to_owned(),
                worker_lost: false,
            }
        };
        self.remove_executor(now, &executor_id, reason);
    }

    /// The seeds' `disableExecutor`: the executor leaves the driver's registries (it
    /// gets no offers, its connection is gone) and the scheduler loses it with
    /// LossReasonPending, holding its tasks; the reason is awaited until `now + wait`.
    fn disable_executor(&mut self, now: Instant, executor_id: &SharedStr, wait: Duration) {
        if self.forget_executor(executor_id).is_none() {
            return;
        }
        info!("Disabling executor {executor_id}.");
        self.pending_loss.insert(
            executor_id.clone(),
            flint_rpc::timer::deadline_after(now, wait),
        );
        self.outputs.push_back(Output::LookForExits);
        self.scheduler
            .executor_lost(now, executor_id, ExecutorLossReason::LossReasonPending);
    }

    /// Removes, with the seeds' reason for a closed connection, the executors whose
    /// loss reason did not come in time.
    fn expire_pending_losses(&mut self, now: Instant) {
        if self.pending_loss.is_empty() {
            return;
        }
        let expired: Vec<SharedStr> = self
            .pending_loss
            .iter()
            .filter(|(_, &deadline)| deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            // Any peer can register an executor and leave: within the budget.
            flint_rpc::peer_warn!(
                self.peer_warnings,
                now,
                "No exit was reported for executor {id} in time: taking its closed connection as the reason of its loss"
            );
            self.remove_executor(
                now,
                &id,
                ExecutorLossReason::SlaveLost {
                    message: DISASSOCIATED.to_owned(),
                    worker_lost: false,
                },
            );
        }
    }

    /// The RemoveWorker handler.
    pub fn remove_worker(&mut self, worker_id: &str, host: &str, message: &str) {
        debug!("Asked to remove worker {worker_id} with reason {message}");
        self.scheduler.worker_removed(worker_id, host, message);
    }

    // ---- heartbeats ----------------------------------------------------------------

    /// A heartbeat with the running tasks' metrics (posted to listeners as
    /// ExecutorMetricsUpdate): true if the executor is unknown and must register again.
    pub fn heartbeat(
        &mut self,
        now: Instant,
        executor_id: &str,
        updates: Vec<TaskAccumUpdates>,
    ) -> bool {
        let known = self.executors.contains_key(executor_id)
            && self.heartbeats.heartbeat(executor_id, now)
            && self
                .scheduler
                .executor_heartbeat_received(executor_id, updates);
        if !known {
            debug!("Received heartbeat from unknown executor {executor_id}");
        }
        !known
    }

    /// Removes the executors silent for longer than `network.timeout`; their processes
    /// are killed and replaced (Spark's `killAndReplaceExecutor`).
    pub fn expire_dead_executors(&mut self, now: Instant) {
        self.expire_pending_losses(now);
        let timeout = self.heartbeats.timeout();
        for expired in self.heartbeats.expire(now) {
            let id = expired.executor_id.to_string();
            warn!(
                "Removing executor {id} with no recent heartbeats: {} ms exceeds timeout {} ms",
                expired.silent_for.as_millis(),
                timeout.as_millis()
            );
            self.expire_executor(now, id, expired.reason());
            // Its tasks are offered elsewhere before the next is removed.
            self.process_actions(now);
        }
    }

    // ---- stopping ------------------------------------------------------------------

    /// The seeds' `reset`: forget pending requests and remove every executor as stale.
    /// They are not replaced: whoever resets (a cluster manager starting over) asks for
    /// executors again, and numPendingExecutors stays 0.
    pub fn reset(&mut self, now: Instant) {
        self.supply.num_pending_executors = 0;
        self.supply.pending_to_remove.clear();
        let ids: Vec<SharedStr> = self
            .executors
            .keys()
            .chain(self.pending_loss.keys())
            .cloned()
            .collect();
        for id in ids {
            self.lose_executor(
                now,
                &id,
                ExecutorLossReason::SlaveLost {
                    message: STALE_EXECUTOR.to_owned(),
                    worker_lost: false,
                },
            );
        }
    }

    /// The driver is about to stop ([`crate::Driver::stop`], before StopExecutors): no
    /// more offers, registrations or replacements, and the cluster manager kills the
    /// executors that never registered ([`Output::SupplyStopping`]). Refusing
    /// registrations first keeps one already on its way from such an executor from
    /// being taken, and offered tasks, as it dies.
    ///
    /// The glue ends the task sets still open, failed ([`DRIVER_STOPPED`]): nothing will
    /// run them, and whoever waits for one would otherwise wait for all of its timeout.
    /// What is already decided (an abort, say) was carried out before (the glue takes
    /// every output before it calls this), and ends its task sets as it would have.
    pub fn begin_stopping(&mut self) {
        self.stopping = true;
        let registered: Vec<String> = self.executors.keys().map(|id| id.to_string()).collect();
        self.outputs
            .push_back(Output::SupplyStopping { registered });
    }

    /// The StopExecutors handler: StopExecutor to every executor. No more offers are
    /// made and no executor is replaced after this.
    pub fn stop_executors(&mut self) {
        self.stopping = true;
        info!("Asking each executor to shut down");
        for executor in self.executors.values() {
            self.outputs.push_back(Output::StopExecutor {
                peer: executor.peer,
                executor_id: executor.id.clone(),
            });
        }
    }
}
