//! The driver's state behind its endpoints (the seeds' `CoarseGrainedSchedulerBackend`
//! with its `DriverEndpoint` handlers): the executor registry, launching tasks, status
//! updates, executor removal, fetching large results, heartbeat expiry, and the
//! requests to the cluster manager.
//!
//! # Lost executors and executor failures
//!
//! The driver keeps asking the cluster manager for the executors it wants in all (the
//! last total requested): whenever an executor is removed, and whenever the cluster
//! manager reports an executor process that exited on its own
//! ([`ClusterManager::exited_executors`], polled on the heartbeat receiver's timer),
//! it asks for that total again, so lost executors are replaced. As Spark's YARN
//! application master does, it counts executor failures: processes that exited
//! abnormally (a non-zero code or a signal) without the driver asking, and executors
//! the cluster manager could not start. Once there are `executor.maxNumFailures` of
//! them (by default twice the executors asked for, at least 3, counted over the
//! driver's life) the driver gives up: every active task set is aborted with "Max
//! number of executor failures (N) reached (...)", no more executors are asked for,
//! and later submissions fail with that message. Executors that never start nor exit
//! are not counted; the caller's timeouts bound those.
//!
//! Which task goes where is decided by the [`TaskScheduler`] state machine inside; this
//! layer turns messages into its events and its actions into messages. It is shared
//! (behind a mutex) by the driver's endpoints in turns of the event loop and by the
//! [`crate::Driver`] API on the driver program's threads. It reads no clock: callers
//! pass `now`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use bytes::BytesMut;
use flint_rpc::{EndpointRef, Reply, RpcError, Settings};
use flint_wire::{
    bytes_to_string, ArchivedMessage, BlockId, ExecutorLossReason, Message, SharedStr,
    TaskAccumUpdates, TaskFailureKind, TaskMetrics, TaskOutcome, TaskState, WireError,
};
use tracing::{debug, error, info, warn};

use crate::core::config::SchedulerConfig;
use crate::core::events::{Action, SchedulerEvent, SchedulerListener, TaskEndReason, TaskResult};
use crate::core::fx_hash::{FxHashMap, FxHashSet};
use crate::core::heartbeat::HeartbeatTracker;
use crate::core::task_scheduler::TaskScheduler;
use crate::core::task_set::{TaskSet, TaskSetId, WorkerOffer};
use crate::driver::cluster_manager::{ClusterManager, ExitedExecutor};
use crate::driver::job::{TaskSetHandle, TaskSetShared};
use crate::SchedulerError;

/// The seeds' reason for an executor whose connection closed.
pub const DISASSOCIATED: &str = "Remote RPC client disassociated. Likely due to containers exceeding thresholds, or network issues. Check driver logs for WARN messages.";
/// The seeds' reason for executors removed by a reset.
pub const STALE_EXECUTOR: &str = "Stale executor after cluster manager re-registered.";
/// Room left in a message around a result or a chunk of one.
pub const MESSAGE_OVERHEAD: usize = 64 * 1024;
/// The most bytes asked for in one block fetch.
const MAX_CHUNK: usize = 8 * 1024 * 1024;
/// Why task sets still open when the driver stops end failed.
pub const DRIVER_STOPPED: &str = "the driver was shut down";

/// Offer rounds one call may run when launches keep failing, before leaving it to the
/// revive timer.
const MAX_OFFER_ROUNDS: usize = 4;

/// The longest executor ID, and host name, an executor may register with.
pub const MAX_EXECUTOR_ID_LEN: usize = 256;

/// A registered executor (the seeds' `ExecutorData`).
#[derive(Debug)]
pub(crate) struct ExecutorData {
    /// Its id (the key it is registered under).
    pub id: SharedStr,
    /// The executor's endpoint, reached over the connection it registered on.
    pub endpoint: EndpointRef,
    /// The remote address of that connection.
    pub address: Option<SocketAddr>,
    pub host: SharedStr,
    /// Cores it has, as registered.
    pub total_cores: u32,
    /// Cores not taken by launched tasks, plus the prefetch slots not taken
    /// (`executor.taskPrefetch` × `task.cpus`): what an offer on it can give.
    pub free_slots: u32,
    /// Whether it waits in `pending_offers`.
    pub offer_pending: bool,
}

/// A registration, as the RegisterExecutor handler reads it.
#[derive(Debug)]
pub(crate) struct Registration {
    pub executor_id: SharedStr,
    pub host: SharedStr,
    pub cores: u32,
    pub address: Option<SocketAddr>,
    pub endpoint: EndpointRef,
}

/// A large result being fetched from an executor's block store, chunk by chunk.
#[derive(Debug)]
struct ResultFetch {
    executor_id: SharedStr,
    endpoint: EndpointRef,
    block_id: BlockId,
    size: u64,
    metrics: TaskMetrics,
    received: BytesMut,
}

/// The driver's state. See the module docs.
pub(crate) struct DriverCore {
    /// The scheduler's keys, as the task scheduler inside has them too.
    pub config: SchedulerConfig,
    /// The transport's, for message sizes and timeouts.
    pub transport: Settings,
    pub scheduler: TaskScheduler,
    /// The seeds' `executorDataMap`.
    executors: FxHashMap<SharedStr, ExecutorData>,
    address_to_executor: FxHashMap<SocketAddr, SharedStr>,
    pending_to_remove: FxHashSet<SharedStr>,
    num_pending_executors: u32,
    /// The executors the cluster manager was last asked for in all.
    target_executors: u32,
    total_core_count: u32,
    heartbeats: HeartbeatTracker,
    cluster_manager: Box<dyn ClusterManager>,
    listeners: Vec<Box<dyn SchedulerListener + Send>>,
    handles: FxHashMap<TaskSetId, Arc<TaskSetShared>>,
    /// Lines about status updates that are ignored.
    peer_warnings: flint_rpc::log_budget::LogBudget,
    /// Bytes of results received per task set, and how many results (for
    /// `driver.maxResultSize`).
    result_sizes: FxHashMap<TaskSetId, (u64, u32)>,
    fetches: FxHashMap<u64, ResultFetch>,
    created: Instant,
    /// Whether `isReady` has held once (its INFO line is logged then): submissions
    /// wait for it once, as Spark's `waitBackendReady` does at start.
    ready_logged: bool,
    stopping: bool,
    /// Executor failures so far (see the module docs).
    executor_failures: u32,
    /// Why the driver gave up on executors, once it has.
    failure: Option<String>,
    /// Whether asking the cluster manager for replacements failed and is to be retried.
    replace_pending: bool,
    self_ref: Weak<Mutex<DriverCore>>,
    offers: Vec<WorkerOffer>,
    /// Executors that freed cores since the last round of offers.
    pending_offers: Vec<SharedStr>,
    /// Launches that could not be sent in the current round: task, reason, abort.
    launch_failures: Vec<(u64, String, Option<String>)>,
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
        transport: Settings,
        mut scheduler: TaskScheduler,
        cluster_manager: Box<dyn ClusterManager>,
        now: Instant,
    ) -> Arc<Mutex<DriverCore>> {
        scheduler.set_task_start_events(false);
        Arc::new_cyclic(|self_ref| {
            Mutex::new(DriverCore {
                heartbeats: HeartbeatTracker::new(transport.stalled_frame_timeout),
                config,
                transport,
                scheduler,
                executors: FxHashMap::default(),
                address_to_executor: FxHashMap::default(),
                pending_to_remove: FxHashSet::default(),
                num_pending_executors: 0,
                target_executors: 0,
                total_core_count: 0,
                cluster_manager,
                listeners: Vec::new(),
                handles: FxHashMap::default(),
                peer_warnings: Default::default(),
                result_sizes: FxHashMap::default(),
                fetches: FxHashMap::default(),
                created: now,
                ready_logged: false,
                stopping: false,
                executor_failures: 0,
                failure: None,
                replace_pending: false,
                self_ref: self_ref.clone(),
                offers: Vec::new(),
                pending_offers: Vec::new(),
                launch_failures: Vec::new(),
            })
        })
    }

    /// Adds a listener; TaskStart events are built from then on (nothing else reads
    /// them).
    pub fn add_listener(&mut self, listener: Box<dyn SchedulerListener + Send>) {
        self.listeners.push(listener);
        self.scheduler.set_task_start_events(true);
    }

    /// The cluster manager, to be swapped out when the driver stops (its `stop` waits
    /// for executors, which must not happen with the driver locked).
    pub fn cluster_manager_box(&mut self) -> &mut Box<dyn ClusterManager> {
        &mut self.cluster_manager
    }

    pub fn heartbeats(&self) -> &HeartbeatTracker {
        &self.heartbeats
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

    pub fn num_pending_executors(&self) -> u32 {
        self.num_pending_executors
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
        let wanted = (f64::from(self.target_executors) * ratio).ceil();
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

    /// Why the driver gave up on executors (`executor.maxNumFailures` reached), if it
    /// has.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Executor failures counted so far.
    pub fn executor_failures(&self) -> u32 {
        self.executor_failures
    }

    /// `executor.maxNumFailures`, or twice the executors asked for, at least 3.
    pub fn max_executor_failures(&self) -> u32 {
        self.config
            .max_executor_failures
            .unwrap_or_else(|| self.target_executors.saturating_mul(2).max(3))
    }

    // ---- task sets -----------------------------------------------------------------

    /// Submits a task set and offers free cores at once.
    pub fn submit(
        &mut self,
        now: Instant,
        task_set: TaskSet,
    ) -> Result<TaskSetHandle, SchedulerError> {
        let id = task_set.id;
        let job_id = task_set.job_id;
        let shared = TaskSetShared::new(task_set.tasks.len(), now);
        // What earlier task sets left to do (an end, for one) is done before a new one
        // with the same id can take their place.
        self.process_actions(now);
        self.scheduler.submit_tasks(now, task_set)?;
        // A new task set starts its driver.maxResultSize tally afresh, even under the id
        // of one that ended moments ago.
        self.result_sizes.remove(&id);
        self.handles.insert(id, shared.clone());
        self.process_actions(now);
        Ok(TaskSetHandle { id, job_id, shared })
    }

    // ---- registration --------------------------------------------------------------

    /// The RegisterExecutor handler: the executor is recorded, or the reason it is
    /// refused is returned (the seeds' texts).
    pub fn register_executor(
        &mut self,
        now: Instant,
        registration: Registration,
    ) -> Result<(), String> {
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
        if self.executors.contains_key(&executor_id) {
            return Err(format!("Duplicate executor ID: {executor_id}"));
        }
        // After StopExecutors it would get no StopExecutor, and be killed at the end of
        // the cluster manager's grace period instead.
        if self.stopping {
            return Err(format!(
                "The driver is stopping: executor {executor_id} is not needed"
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
        info!("Registered executor {endpoint:?} ({shown_address}) with ID {executor_id}");
        if let Some(address) = address {
            self.address_to_executor
                .insert(address, executor_id.clone());
        }
        self.total_core_count = self.total_core_count.saturating_add(cores);
        if self.num_pending_executors > 0 {
            self.num_pending_executors -= 1;
            debug!(
                "Decremented number of pending executors ({} left)",
                self.num_pending_executors
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
        self.executors.insert(
            executor_id.clone(),
            ExecutorData {
                id: executor_id.clone(),
                endpoint,
                address,
                host: host.clone(),
                total_cores: cores,
                free_slots,
                offer_pending: false,
            },
        );
        self.heartbeats.executor_added(&executor_id, now);
        // Posts ExecutorAdded.
        self.scheduler
            .executor_added(executor_id.clone(), host, cores);
        Ok(())
    }

    /// What follows a registration once it is answered: the seeds' `makeOffers()`, every
    /// executor's free cores, not only the new one's, since a new executor changes the
    /// locality levels a task set may launch at. After the answer, as in the seeds:
    /// launches queued first could fill the connection's outbox and have the answer
    /// refused, and the executor would wait for it until its ask timed out.
    pub fn offer_after_registration(&mut self, now: Instant) {
        self.make_offers(now);
        self.process_actions(now);
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

    /// The StatusUpdate handler. `sender` is the connection's remote address: an update
    /// is taken only from the connection its executor registered on, and only for a task
    /// that runs on that executor.
    ///
    /// Returns the block of a large result that will not be fetched, held by an executor
    /// the driver does not know (one it removed that has yet to register again): the
    /// caller asks the sender to remove it, over the connection the update came on, or
    /// it would stay in that executor's memory for good.
    pub fn status_update(
        &mut self,
        now: Instant,
        sender: Option<SocketAddr>,
        executor_id: &str,
        task_id: u64,
        state: TaskState,
        outcome: TaskOutcome,
    ) -> Option<BlockId> {
        if let Err(why) = self.sender_may_speak_for(sender, executor_id) {
            flint_rpc::peer_warn!(
                self.peer_warnings,
                now,
                "Ignored task status update ({task_id} state {state}) {why}"
            );
            return None;
        }
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
        if runs_here && !self.fetches.is_empty() && self.fetches.contains_key(&task_id) {
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
            } = outcome
            {
                self.start_fetch(now, executor_id, task_id, block_id, size, metrics);
            } else {
                self.scheduler.status_update(now, task_id, state, outcome);
            }
        } else {
            if state == TaskState::Finished {
                unfetched = self.remove_unfetched_block(executor_id, &outcome);
            }
            self.scheduler.status_update(now, task_id, state, outcome);
        }
        self.process_actions(now);
        unfetched
    }

    /// A large result that will not be fetched is removed from its executor's block
    /// store, which would otherwise keep it until the executor exits. The block, if its
    /// executor is not one the driver knows (see [`DriverCore::status_update`]).
    fn remove_unfetched_block(&self, executor_id: &str, outcome: &TaskOutcome) -> Option<BlockId> {
        let TaskOutcome::Indirect { block_id, .. } = outcome else {
            return None;
        };
        let Some(executor) = self.executors.get(executor_id) else {
            return Some(*block_id);
        };
        let _ = executor.endpoint.send(&Message::RemoveBlock {
            block_id: *block_id,
        });
        None
    }

    /// Spark's `canFetchMoreResults`: counts a result against `driver.maxResultSize`,
    /// aborting its task set when the total goes over.
    fn can_take_result(&mut self, task_id: u64, size: u64) -> bool {
        let Some(limit) = self.config.max_result_size else {
            return true;
        };
        let Some(task_set) = self.scheduler.task_set_of(task_id) else {
            return true;
        };
        // A task set that ended keeps its tally, and late results count against it, as in
        // Spark; the heartbeat timer drops tallies of task sets that are gone.
        let entry = self.result_sizes.entry(task_set).or_default();
        entry.0 = entry.0.saturating_add(size);
        entry.1 = entry.1.saturating_add(1);
        if entry.0 <= limit {
            return true;
        }
        let message = format!(
            "Total size of serialized results of {} tasks ({}) is bigger than driver.maxResultSize ({})",
            entry.1,
            bytes_to_string(entry.0),
            bytes_to_string(limit)
        );
        self.scheduler.abort_task_set(task_set, message);
        false
    }

    // ---- large results -------------------------------------------------------------

    fn start_fetch(
        &mut self,
        now: Instant,
        executor_id: &str,
        task_id: u64,
        block_id: BlockId,
        size: u64,
        metrics: TaskMetrics,
    ) {
        let Some(executor) = self.executors.get(executor_id) else {
            self.fetch_failed(now, task_id, format!("executor {executor_id} is gone"));
            return;
        };
        debug!("Fetching {size} bytes of the result of task {task_id} from executor {executor_id}");
        // The size was checked against driver.maxResultSize; without a limit the buffer
        // grows with what arrives.
        let reserve = usize::try_from(size).unwrap_or(usize::MAX).min(64 << 20);
        self.fetches.insert(
            task_id,
            ResultFetch {
                executor_id: SharedStr::from(executor_id),
                endpoint: executor.endpoint.clone(),
                block_id,
                size,
                metrics,
                received: BytesMut::with_capacity(reserve),
            },
        );
        self.request_chunk(now, task_id);
    }

    fn chunk_size(&self) -> u32 {
        let room = self
            .transport
            .max_payload
            .saturating_sub(MESSAGE_OVERHEAD)
            .max(1024);
        u32::try_from(room.min(MAX_CHUNK)).unwrap_or(u32::MAX)
    }

    fn request_chunk(&mut self, now: Instant, task_id: u64) {
        let max_len = self.chunk_size();
        let Some(fetch) = self.fetches.get(&task_id) else {
            return;
        };
        let message = Message::FetchBlockChunk {
            block_id: fetch.block_id,
            offset: fetch.received.len() as u64,
            max_len,
        };
        let core = self.self_ref.clone();
        let sent = fetch
            .endpoint
            .ask_then(&message, self.transport.ask_timeout, move |reply| {
                if let Some(core) = core.upgrade() {
                    let mut core = core.lock().unwrap_or_else(|e| e.into_inner());
                    core.on_chunk(Instant::now(), task_id, reply);
                }
            });
        if let Err(e) = sent {
            self.fetch_failed(now, task_id, e.to_string());
        }
    }

    fn on_chunk(&mut self, now: Instant, task_id: u64, reply: Result<Reply, RpcError>) {
        let max_len = self.chunk_size() as usize;
        let Some(fetch) = self.fetches.get_mut(&task_id) else {
            return;
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => return self.fetch_failed(now, task_id, e.to_string()),
        };
        let ArchivedMessage::BlockChunk {
            block_id: _,
            offset,
            total_size,
            data,
        } = reply.message()
        else {
            let kind = reply.message().kind();
            return self.fetch_failed(now, task_id, format!("the executor answered {kind}"));
        };
        let expected = fetch.received.len() as u64;
        let data = data.as_slice();
        let bad = if offset.to_native() != expected {
            Some(format!(
                "a chunk at offset {offset} where {expected} was asked"
            ))
        } else if total_size.to_native() != fetch.size {
            Some(format!(
                "a block of {total_size} bytes where {} were announced",
                fetch.size
            ))
        } else if data.len() > max_len || expected + data.len() as u64 > fetch.size {
            Some(format!(
                "a chunk of {} bytes past what was asked",
                data.len()
            ))
        } else if data.is_empty() && expected < fetch.size {
            Some("an empty chunk before the end of the block".to_owned())
        } else {
            None
        };
        if let Some(bad) = bad {
            return self.fetch_failed(now, task_id, format!("the executor sent {bad}"));
        }
        fetch.received.extend_from_slice(data);
        if (fetch.received.len() as u64) < fetch.size {
            return self.request_chunk(now, task_id);
        }
        let Some(fetch) = self.fetches.remove(&task_id) else {
            return;
        };
        debug!(
            "Fetched the result of task {task_id} ({} bytes) from executor {}",
            fetch.size, fetch.executor_id
        );
        let _ = fetch.endpoint.send(&Message::RemoveBlock {
            block_id: fetch.block_id,
        });
        let outcome = TaskOutcome::Direct {
            value: fetch.received.freeze(),
            metrics: fetch.metrics,
            accumulators: Vec::new(),
        };
        self.scheduler
            .status_update(now, task_id, TaskState::Finished, outcome);
        self.process_actions(now);
    }

    fn fetch_failed(&mut self, now: Instant, task_id: u64, reason: String) {
        let fetch = self.fetches.remove(&task_id);
        if let Some(fetch) = &fetch {
            // The task runs again; the block the failed fetch left behind would stay in
            // the executor's memory for good. (Gone with its connection, if that failed.)
            let _ = fetch.endpoint.send(&Message::RemoveBlock {
                block_id: fetch.block_id,
            });
        }
        let from = fetch
            .as_ref()
            .map_or_else(String::new, |f| format!(" from executor {}", f.executor_id));
        let message = format!("TaskResultLost (result lost from block manager): cannot fetch the result of task {task_id}{from}: {reason}");
        warn!("{message}");
        let outcome = TaskOutcome::Failure {
            kind: TaskFailureKind::ResultLost,
            message,
            counts_towards_failures: true,
            metrics: fetch.map(|f| f.metrics).unwrap_or_default(),
        };
        self.scheduler
            .status_update(now, task_id, TaskState::Failed, outcome);
        self.process_actions(now);
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
        offers.extend(
            self.executors
                .iter()
                .filter(|(id, e)| e.free_slots >= cpus && !self.pending_to_remove.contains(*id))
                .map(|(id, e)| WorkerOffer {
                    executor_id: id.clone(),
                    host: e.host.clone(),
                    cores: e.free_slots,
                }),
        );
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
        for id in self.pending_offers.drain(..) {
            let Some(executor) = self.executors.get_mut(&id) else {
                continue;
            };
            executor.offer_pending = false;
            if executor.free_slots >= cpus
                && !self.stopping
                && !self.pending_to_remove.contains(&id)
            {
                offers.push(WorkerOffer {
                    host: executor.host.clone(),
                    cores: executor.free_slots,
                    executor_id: id,
                });
            }
        }
        self.launch_on(now, &offers);
        self.offers = offers;
    }

    /// Offers `offers` to the scheduler and launches what it picks: the seeds'
    /// `launchTasks`. Each task is encoded once, straight into its executor's
    /// connection, and its cores taken. A task too large for `rpc.message.maxSize`
    /// aborts its task set with the seeds' message.
    fn launch_on(&mut self, now: Instant, offers: &[WorkerOffer]) {
        if offers.is_empty() {
            return;
        }
        let cpus = self.config.task_cpus;
        let DriverCore {
            scheduler,
            executors,
            launch_failures,
            ..
        } = self;
        scheduler.resource_offers_with(now, offers, |i, task| {
            let offer = &offers[i];
            let task_id = task.task_id;
            let index = task.index;
            let Some(executor) = executors.get_mut(&offer.executor_id) else {
                launch_failures.push((task_id, "its executor is gone".to_owned(), None));
                return;
            };
            debug!(
                "Launching task {task_id} on executor id: {} hostname: {}.",
                offer.executor_id, executor.host
            );
            match executor.endpoint.send(&Message::LaunchTask(task)) {
                Ok(()) => executor.free_slots = executor.free_slots.saturating_sub(cpus),
                Err(RpcError::Wire(WireError::MessageTooLarge { size, limit })) => {
                    let message = format!(
                        "Serialized task {task_id}:{index} was {size} bytes, which exceeds max allowed: rpc.message.maxSize ({limit} bytes). Consider increasing rpc.message.maxSize or using broadcast variables for large values."
                    );
                    launch_failures.push((task_id, message.clone(), Some(message)));
                }
                Err(e) => {
                    warn!("Cannot launch task {task_id} on executor {}: {e}", offer.executor_id);
                    launch_failures.push((task_id, format!("cannot send the task: {e}"), None));
                }
            }
        });
        for (task_id, reason, abort) in std::mem::take(&mut self.launch_failures) {
            self.scheduler.launch_failed(now, task_id, &reason, abort);
        }
    }

    // ---- actions -------------------------------------------------------------------

    /// Carries out what the scheduler asked for: kills, offers, and events for the
    /// listeners and the task set handles.
    pub fn process_actions(&mut self, now: Instant) {
        for round in 0..=MAX_OFFER_ROUNDS {
            let mut revive = false;
            while let Some(action) = self.scheduler.poll_action() {
                match action {
                    Action::KillTask {
                        task_id,
                        executor_id,
                        interrupt_thread,
                        reason,
                    } => self.kill_task(task_id, &executor_id, interrupt_thread, reason),
                    Action::ReviveOffers => revive = true,
                    Action::Event(event) => self.on_event(now, event),
                }
            }
            if !revive {
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

    fn on_event(&mut self, now: Instant, event: SchedulerEvent) {
        match &event {
            SchedulerEvent::TaskEnd {
                task_set,
                index,
                duration,
                reason,
                ..
            } => {
                if let Some(handle) = self.handles.get(task_set) {
                    match reason {
                        TaskEndReason::Success(TaskResult::Direct { value, .. }) => {
                            handle.record_success(*index, value, *duration)
                        }
                        TaskEndReason::Success(TaskResult::Indirect { .. }) => {}
                        TaskEndReason::AlreadySucceeded => {}
                        TaskEndReason::Failed { .. } | TaskEndReason::FetchFailed(_) => {
                            handle.record_failed_attempt()
                        }
                    }
                }
            }
            SchedulerEvent::StageCompleted {
                task_set, failure, ..
            } => {
                if let Some(handle) = self.handles.remove(task_set) {
                    handle.finish(failure.clone(), now);
                }
            }
            _ => {}
        }
        for listener in &mut self.listeners {
            event.deliver_to(listener.as_mut());
        }
    }

    // ---- kills and removals --------------------------------------------------------

    /// The KillTask handler: forwarded to the executor, or the seeds' WARN.
    pub fn kill_task(
        &mut self,
        task_id: u64,
        executor_id: &str,
        interrupt_thread: bool,
        reason: String,
    ) {
        match self.executors.get(executor_id) {
            Some(executor) => {
                let message = Message::KillTask {
                    task_id,
                    executor_id: SharedStr::from(executor_id),
                    interrupt_thread,
                    reason,
                };
                if let Err(e) = executor.endpoint.send(&message) {
                    warn!("Cannot ask executor {executor_id} to kill task {task_id}: {e}");
                }
            }
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
        self.process_actions(now);
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
        let Some(executor) = self.executors.remove(executor_id) else {
            info!("Asked to remove non-existent executor {executor_id}");
            return false;
        };
        if let Some(address) = executor.address {
            self.address_to_executor.remove(&address);
        }
        self.pending_to_remove.remove(executor_id);
        self.total_core_count = self.total_core_count.saturating_sub(executor.total_cores);
        self.heartbeats.executor_removed(executor_id);
        self.scheduler.executor_lost(now, executor_id, reason);
        true
    }

    /// The driver endpoint's `onDisconnected`: an executor whose connection closed is
    /// removed (killed on purpose: ExecutorKilled; else the seeds' disassociation text).
    pub fn disconnected(&mut self, now: Instant, remote: SocketAddr) {
        let Some(executor_id) = self.address_to_executor.get(&remote).cloned() else {
            return;
        };
        if self.stopping {
            // It was asked to stop: its leaving is no loss.
            debug!("Executor {executor_id} disconnected after it was asked to stop");
            if let Some(executor) = self.executors.remove(&executor_id) {
                self.address_to_executor.remove(&remote);
                self.total_core_count = self.total_core_count.saturating_sub(executor.total_cores);
                self.heartbeats.executor_removed(&executor_id);
            }
            return;
        }
        let reason = if self.pending_to_remove.contains(&executor_id) {
            ExecutorLossReason::ExecutorKilled
        } else {
            ExecutorLossReason::SlaveLost {
                message: DISASSOCIATED.to_owned(),
                worker_lost: false,
            }
        };
        self.remove_executor(now, &executor_id, reason);
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
        self.process_actions(now);
        !known
    }

    /// Drops the `driver.maxResultSize` tallies of task sets that are gone (a task set's
    /// tally outlives its StageCompleted, for late results). Called on the heartbeat
    /// receiver's timer.
    pub fn drop_stale_result_tallies(&mut self) {
        let scheduler = &self.scheduler;
        self.result_sizes
            .retain(|&task_set, _| scheduler.task_set(task_set).is_some());
    }

    /// Removes the executors silent for longer than `network.timeout`; their processes
    /// are killed and replaced (Spark's `killAndReplaceExecutor`).
    pub fn expire_dead_executors(&mut self, now: Instant) {
        let timeout = self.heartbeats.timeout();
        for expired in self.heartbeats.expire(now) {
            let id = expired.executor_id.to_string();
            warn!(
                "Removing executor {id} with no recent heartbeats: {} ms exceeds timeout {} ms",
                expired.silent_for.as_millis(),
                timeout.as_millis()
            );
            self.kill_executors(std::slice::from_ref(&id), true, true);
            self.remove_executor(
                now,
                &id,
                ExecutorLossReason::SlaveLost {
                    message: expired.reason(),
                    worker_lost: false,
                },
            );
        }
    }

    // ---- the cluster manager -------------------------------------------------------

    /// Takes the cluster manager's reports of executors that exited on their own: an
    /// abnormal exit is an executor failure, a still registered executor is removed
    /// with Spark's `ExecutorExited` reason, and lost executors are replaced. Called
    /// on the heartbeat receiver's timer.
    pub fn poll_cluster_manager(&mut self, now: Instant) {
        if self.stopping {
            return;
        }
        let exits = self.cluster_manager.exited_executors();
        if exits.is_empty() && !self.replace_pending {
            return;
        }
        for exit in exits {
            self.executor_exited(now, exit);
        }
        self.replace_lost_executors();
        self.process_actions(now);
    }

    fn executor_exited(&mut self, now: Instant, exit: ExitedExecutor) {
        let ExitedExecutor {
            executor_id,
            message,
            ..
        } = &exit;
        if exit.is_failure() {
            self.executor_failed(format!("executor {executor_id}: {message}"));
        } else {
            info!("Executor {executor_id} exited: {message}");
        }
        if self.executors.contains_key(executor_id.as_str()) {
            self.lose_executor(now, executor_id, exit.loss_reason());
        }
    }

    /// Counts an executor failure; at `executor.maxNumFailures` the driver gives up
    /// (see the module docs).
    fn executor_failed(&mut self, what: String) {
        self.executor_failures = self.executor_failures.saturating_add(1);
        let max = self.max_executor_failures();
        warn!(
            "Executor failure {} of at most {max} (executor.maxNumFailures): {what}",
            self.executor_failures
        );
        if self.executor_failures < max || self.failure.is_some() {
            return;
        }
        let message = format!("Max number of executor failures ({max}) reached (the last: {what})");
        error!("{message}");
        let task_sets: Vec<_> = self.scheduler.task_sets().map(|t| t.id()).collect();
        for task_set in task_sets {
            self.scheduler.abort_task_set(task_set, message.clone());
        }
        self.failure = Some(message);
    }

    /// Asks the cluster manager again for the executors wanted in all, so that lost
    /// ones are replaced; nothing once stopping or given up, or if none were asked for.
    /// A request that fails counts as an executor failure and is retried at the next
    /// poll.
    fn replace_lost_executors(&mut self) {
        self.replace_pending = false;
        if self.stopping || self.failure.is_some() || self.target_executors == 0 {
            return;
        }
        let target = self.target_executors;
        self.num_pending_executors = target
            .saturating_add(self.pending_removals())
            .saturating_sub(self.num_existing_executors());
        if let Err(e) = self.cluster_manager.request_total_executors(target) {
            self.replace_pending = true;
            self.executor_failed(e.to_string());
        }
    }

    fn num_existing_executors(&self) -> u32 {
        u32::try_from(self.executors.len()).unwrap_or(u32::MAX)
    }

    fn pending_removals(&self) -> u32 {
        u32::try_from(self.pending_to_remove.len()).unwrap_or(u32::MAX)
    }

    fn request_total(&mut self, total: u32) -> Result<bool, crate::DriverError> {
        self.target_executors = total;
        if self.stopping {
            return Ok(false);
        }
        Ok(self.cluster_manager.request_total_executors(total)?)
    }

    /// The seeds' `requestExecutors`.
    pub fn request_executors(&mut self, additional: i64) -> Result<bool, crate::DriverError> {
        if additional < 0 {
            return Err(crate::DriverError::NegativeExecutors(format!(
                "Attempted to request a negative number of additional executor(s) {additional} from the cluster manager. Please specify a positive number!"
            )));
        }
        info!("Requesting {additional} additional executor(s) from the cluster manager");
        let additional = u32::try_from(additional).unwrap_or(u32::MAX);
        self.num_pending_executors = self.num_pending_executors.saturating_add(additional);
        debug!(
            "Number of pending executors is now {}",
            self.num_pending_executors
        );
        let total = self
            .num_existing_executors()
            .saturating_add(self.num_pending_executors)
            .saturating_sub(self.pending_removals());
        self.request_total(total)
    }

    /// The seeds' `requestTotalExecutors`.
    pub fn request_total_executors(&mut self, total: i64) -> Result<bool, crate::DriverError> {
        if total < 0 {
            return Err(crate::DriverError::NegativeExecutors(format!(
                "Attempted to request a negative number of executor(s) {total} from the cluster manager. Please specify a positive number!"
            )));
        }
        let total = u32::try_from(total).unwrap_or(u32::MAX);
        self.num_pending_executors = total
            .saturating_add(self.pending_removals())
            .saturating_sub(self.num_existing_executors());
        self.request_total(total)
    }

    /// The seeds' `killExecutors`: returns the executors asked to be killed. With
    /// `replace`, the cluster manager is asked for as many executors as before; without,
    /// the total asked for shrinks. Without `force`, executors running tasks are kept.
    pub fn kill_executors(
        &mut self,
        executor_ids: &[String],
        replace: bool,
        force: bool,
    ) -> Vec<String> {
        self.kill_and_maybe_stop(executor_ids, replace, force, !replace)
    }

    /// [`DriverCore::kill_executors`]; `tell_to_stop` also sends each StopExecutor, for
    /// executors the cluster manager may not have started (it registered on its own):
    /// they would otherwise stay pending removal, and get no task, for as long as they
    /// live. An executor killed and replaced for its silence is not told: should its
    /// network heal, it registers again.
    fn kill_and_maybe_stop(
        &mut self,
        executor_ids: &[String],
        replace: bool,
        force: bool,
        tell_to_stop: bool,
    ) -> Vec<String> {
        info!("Requesting to kill executor(s) {}", executor_ids.join(", "));
        let mut to_kill = Vec::new();
        for id in executor_ids {
            if !self.executors.contains_key(id.as_str()) {
                warn!("Executor to kill {id} does not exist!");
            } else if self.pending_to_remove.contains(id.as_str()) {
                debug!("Executor {id} is already being removed");
            } else if !force && self.scheduler.running_tasks_on(id).next().is_some() {
                debug!("Not killing executor {id}: it runs tasks");
            } else {
                to_kill.push(id.clone());
            }
        }
        if to_kill.is_empty() {
            return to_kill;
        }
        let count = u32::try_from(to_kill.len()).unwrap_or(u32::MAX);
        for id in &to_kill {
            self.pending_to_remove.insert(SharedStr::from(id.as_str()));
        }
        if let Err(e) = self.cluster_manager.kill_executors(&to_kill) {
            error!("Cannot kill executor(s) {}: {e}", to_kill.join(", "));
        }
        if tell_to_stop {
            for id in &to_kill {
                if let Some(executor) = self.executors.get(id.as_str()) {
                    let _ = executor.endpoint.send(&Message::StopExecutor);
                }
            }
        }
        let result = if replace && self.failure.is_some() {
            // Given up on executors: none is replaced.
            Ok(false)
        } else if replace {
            self.num_pending_executors = self.num_pending_executors.saturating_add(count);
            self.request_total(self.target_executors)
        } else {
            let total = self
                .num_existing_executors()
                .saturating_add(self.num_pending_executors)
                .saturating_sub(self.pending_removals());
            self.request_total(total)
        };
        if let Err(e) = result {
            error!("Cannot ask the cluster manager for executors: {e}");
        }
        to_kill
    }

    /// The KillExecutorsOnHost handler: every executor on the host, replaced, and told
    /// to stop.
    pub fn kill_executors_on_host(&mut self, host: &str) -> Vec<String> {
        let ids: Vec<String> = self
            .executors
            .iter()
            .filter(|(_, e)| &*e.host == host)
            .map(|(id, _)| id.to_string())
            .collect();
        if ids.is_empty() {
            return ids;
        }
        self.kill_and_maybe_stop(&ids, true, true, true)
    }

    /// The seeds' `reset`: forget pending requests and remove every executor as stale.
    /// They are not replaced: whoever resets (a cluster manager starting over) asks for
    /// executors again, and numPendingExecutors stays 0.
    pub fn reset(&mut self, now: Instant) {
        self.num_pending_executors = 0;
        self.pending_to_remove.clear();
        let ids: Vec<SharedStr> = self.executors.keys().cloned().collect();
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
        self.process_actions(now);
    }

    /// The driver is about to stop ([`crate::Driver::stop`], before StopExecutors): no
    /// more offers, registrations or replacements, and the cluster manager kills the
    /// executors that never registered ([`ClusterManager::stopping`]). Refusing
    /// registrations first keeps one already on its way from such an executor from
    /// being taken, and offered tasks, as it dies.
    ///
    /// Task sets still open end, failed ([`DRIVER_STOPPED`]): nothing will run them, and
    /// whoever waits for one would otherwise wait for all of its timeout.
    pub fn begin_stopping(&mut self, now: Instant) {
        // What is already decided (an abort, say) ends its task sets as it would have.
        self.process_actions(now);
        self.stopping = true;
        for (id, handle) in self.handles.drain() {
            handle.finish(
                Some(format!("Task set {id} cancelled: {DRIVER_STOPPED}")),
                now,
            );
        }
        let registered: Vec<String> = self.executors.keys().map(|id| id.to_string()).collect();
        self.cluster_manager.stopping(&registered);
    }

    /// The StopExecutors handler: StopExecutor to every executor. No more offers are
    /// made and no executor is replaced after this.
    pub fn stop_executors(&mut self) {
        self.stopping = true;
        info!("Asking each executor to shut down");
        for (id, executor) in &self.executors {
            if let Err(e) = executor.endpoint.send(&Message::StopExecutor) {
                debug!("Cannot ask executor {id} to stop: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::cluster_manager::{ClusterManagerError, StandaloneExecutors};
    use crate::driver::job::TaskSetError;
    use crate::SchedulerConfig;
    use flint_rpc::{Conf, RpcEnv};
    use std::collections::VecDeque;
    use std::time::Duration;

    fn config(ratio: f64, wait: Duration) -> SchedulerConfig {
        SchedulerConfig {
            min_registered_ratio: ratio,
            max_registered_wait: wait,
            ..SchedulerConfig::default()
        }
    }

    fn transport() -> Settings {
        let conf = Conf::from_pairs(["rpc.message.maxSize=1m", "rpc.askTimeout=1s"]).unwrap();
        Settings::from_conf(&conf).unwrap()
    }

    fn core(ratio: f64, wait: Duration, now: Instant) -> Arc<Mutex<DriverCore>> {
        let config = config(ratio, wait);
        let scheduler = TaskScheduler::new(config.clone());
        DriverCore::new(
            config,
            transport(),
            scheduler,
            Box::new(StandaloneExecutors),
            now,
        )
    }

    /// The INFO lines logged while `f` runs on this thread.
    fn info_lines(f: impl FnOnce()) -> Vec<String> {
        let capture = crate::log_capture::LogCapture::default();
        capture.run(f);
        capture.lines(tracing::Level::INFO)
    }

    fn registration(env: &RpcEnv, id: &str) -> Registration {
        Registration {
            executor_id: SharedStr::from(id),
            host: SharedStr::from("h"),
            cores: 1,
            address: None,
            endpoint: env.handle().endpoint_ref(env.address(), "Executor"),
        }
    }

    const RATIO_LINE: &str =
        "SchedulerBackend is ready for scheduling beginning after reached minRegisteredResourcesRatio: ";
    const WAITED_LINE: &str =
        "SchedulerBackend is ready for scheduling beginning after waiting maxRegisteredResourcesWaitingTime: ";

    #[test]
    fn no_executor_registers_once_executors_are_told_to_stop() {
        let t0 = Instant::now();
        let env = RpcEnv::new(&Conf::new()).unwrap();
        let core = core(1.0, Duration::from_secs(30), t0);
        let mut core = core.lock().unwrap();
        core.register_executor(t0, registration(&env, "1")).unwrap();
        core.stop_executors();
        assert_eq!(
            core.register_executor(t0, registration(&env, "2")),
            Err("The driver is stopping: executor 2 is not needed".to_owned())
        );
    }

    #[test]
    fn no_executor_registers_once_the_driver_begins_to_stop() {
        let t0 = Instant::now();
        let env = RpcEnv::new(&Conf::new()).unwrap();
        let core = core(1.0, Duration::from_secs(30), t0);
        let mut core = core.lock().unwrap();
        core.begin_stopping(t0);
        assert_eq!(
            core.register_executor(t0, registration(&env, "3")),
            Err("The driver is stopping: executor 3 is not needed".to_owned())
        );
    }

    #[test]
    fn ready_once_the_ratio_is_reached_or_the_waiting_time_passed() {
        let t0 = Instant::now();
        let core = core(0.5, Duration::from_secs(30), t0);
        let mut core = core.lock().unwrap();
        assert!(core.is_ready(t0), "nothing asked for: nothing to wait for");
        core.request_total_executors(4).unwrap();
        assert!(!core.is_ready(t0 + Duration::from_secs(29)));
        assert!(core.is_ready(t0 + Duration::from_secs(30)));
        let eager = self::core(0.0, Duration::from_secs(30), t0);
        let mut eager = eager.lock().unwrap();
        eager.request_total_executors(4).unwrap();
        assert!(eager.is_ready(t0), "a ratio of 0 needs no executor");
    }

    #[test]
    fn readiness_by_ratio_logs_the_seeds_line_once_and_then_holds_for_submissions() {
        let env = RpcEnv::new(&Conf::new()).unwrap();
        let t0 = Instant::now();
        let core = core(0.5, Duration::from_secs(30), t0);
        let mut core = core.lock().unwrap();
        core.request_total_executors(4).unwrap();
        let lines = info_lines(|| {
            let t = t0 + Duration::from_secs(1);
            assert!(!core.is_ready(t));
            assert!(!core.backend_ready(t), "submissions wait");
            core.register_executor(t, registration(&env, "1")).unwrap();
            assert!(!core.is_ready(t), "1 of 4 is under half");
            core.register_executor(t, registration(&env, "2")).unwrap();
            assert!(core.is_ready(t), "2 of 4 is half");
            assert!(core.is_ready(t));
            core.remove_executor(t, "2", ExecutorLossReason::ExecutorKilled);
            assert!(!core.is_ready(t), "isReady looks again every time");
            assert!(
                core.backend_ready(t),
                "but submissions wait once, as Spark's waitBackendReady"
            );
        });
        let ready: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("SchedulerBackend is ready"))
            .collect();
        assert_eq!(ready, [&format!("{RATIO_LINE}0.5")], "{lines:?}");
        drop(core);
        env.stop();
    }

    #[test]
    fn readiness_by_waiting_logs_the_seeds_line_once() {
        let t0 = Instant::now();
        let core = core(1.0, Duration::from_millis(1500), t0);
        let mut core = core.lock().unwrap();
        core.request_total_executors(2).unwrap();
        let lines = info_lines(|| {
            assert!(!core.backend_ready(t0 + Duration::from_millis(1499)));
            assert!(core.backend_ready(t0 + Duration::from_millis(1500)));
            assert!(core.is_ready(t0 + Duration::from_secs(60)));
        });
        let ready: Vec<&String> = lines
            .iter()
            .filter(|l| l.starts_with("SchedulerBackend is ready"))
            .collect();
        assert_eq!(ready, [&format!("{WAITED_LINE}1500(ms)")], "{lines:?}");
    }

    /// A cluster manager whose exits and request failures the test decides.
    #[derive(Clone, Default)]
    struct Scripted(Arc<Mutex<ScriptedState>>);

    #[derive(Default)]
    struct ScriptedState {
        totals: Vec<u32>,
        exits: VecDeque<ExitedExecutor>,
        refuse: bool,
    }

    impl ClusterManager for Scripted {
        fn start(&mut self, _driver: std::net::SocketAddr) {}
        fn request_total_executors(&mut self, total: u32) -> Result<bool, ClusterManagerError> {
            let mut state = self.0.lock().unwrap();
            if state.refuse {
                return Err(ClusterManagerError::NotStarted);
            }
            state.totals.push(total);
            Ok(true)
        }
        fn kill_executors(&mut self, _ids: &[String]) -> Result<bool, ClusterManagerError> {
            Ok(true)
        }
        fn exited_executors(&mut self) -> Vec<ExitedExecutor> {
            self.0.lock().unwrap().exits.drain(..).collect()
        }
        fn stop(&mut self, _grace: Duration) {}
    }

    impl Scripted {
        fn exit(&self, id: &str, code: i32) {
            self.0.lock().unwrap().exits.push_back(ExitedExecutor {
                executor_id: id.to_owned(),
                exit_code: code,
                message: format!("Command exited with code {code}"),
            });
        }
        fn totals(&self) -> Vec<u32> {
            self.0.lock().unwrap().totals.clone()
        }
    }

    fn scripted_core(now: Instant) -> (Arc<Mutex<DriverCore>>, Scripted) {
        let cluster = Scripted::default();
        let config = config(0.0, Duration::from_secs(30));
        let scheduler = TaskScheduler::new(config.clone());
        let core = DriverCore::new(
            config,
            transport(),
            scheduler,
            Box::new(cluster.clone()),
            now,
        );
        (core, cluster)
    }

    #[test]
    fn exited_executors_are_replaced_and_too_many_failures_fail_the_jobs() {
        let t0 = Instant::now();
        let (core, cluster) = scripted_core(t0);
        let mut core = core.lock().unwrap();
        core.request_total_executors(1).unwrap();
        assert_eq!(core.max_executor_failures(), 3, "2 x 1, at least 3");
        let handle = core
            .submit(
                t0,
                TaskSet::new(0, 0, 2, bytes::Bytes::from_static(b"\x04noop")),
            )
            .unwrap();
        core.poll_cluster_manager(t0);
        assert_eq!(cluster.totals(), [1], "nothing exited, nothing asked");

        // An exit with code 0 is replaced but is no failure; others are failures.
        cluster.exit("1", 0);
        core.poll_cluster_manager(t0);
        assert_eq!(cluster.totals(), [1, 1]);
        assert_eq!(core.executor_failures(), 0);
        cluster.exit("2", 3);
        cluster.exit("3", 137);
        core.poll_cluster_manager(t0);
        assert_eq!(core.executor_failures(), 2);
        assert_eq!(cluster.totals(), [1, 1, 1]);
        assert!(core.failure().is_none());
        assert!(!handle.is_done());

        cluster.exit("4", 2);
        core.poll_cluster_manager(t0);
        let expected = "Max number of executor failures (3) reached (the last: executor 4: Command exited with code 2)";
        assert_eq!(core.failure(), Some(expected));
        assert_eq!(
            handle.wait(Duration::ZERO).unwrap_err(),
            TaskSetError::Failed {
                task_set: handle.id(),
                message: expected.to_owned()
            }
        );
        // Given up: no more executors are asked for.
        cluster.exit("5", 1);
        core.poll_cluster_manager(t0);
        assert_eq!(cluster.totals(), [1, 1, 1]);
    }

    #[test]
    fn executors_that_cannot_be_started_are_failures_and_are_asked_for_again() {
        let t0 = Instant::now();
        let (core, cluster) = scripted_core(t0);
        let mut core = core.lock().unwrap();
        core.config.max_executor_failures = Some(4);
        core.request_total_executors(2).unwrap();
        cluster.0.lock().unwrap().refuse = true;
        cluster.exit("1", 1);
        core.poll_cluster_manager(t0);
        assert_eq!(core.executor_failures(), 2, "the exit and the failed start");
        core.poll_cluster_manager(t0);
        assert_eq!(core.executor_failures(), 3, "the start is retried");
        cluster.0.lock().unwrap().refuse = false;
        core.poll_cluster_manager(t0);
        assert_eq!(cluster.totals(), [2, 2], "started at last");
        core.poll_cluster_manager(t0);
        assert_eq!(cluster.totals(), [2, 2], "and not asked for again");
        assert_eq!(core.executor_failures(), 3);
        assert!(core.failure().is_none());
    }
}
