//! Carrying out what the driver core decides: [`DriverState`] is the core with what the
//! glue keeps beside it (the endpoint references of its peers, the task set handles,
//! the listeners, the way to the executor supply thread), shared behind one mutex by
//! the driver's endpoints, the [`crate::Driver`] API and the executor supply thread.
//! Whoever calls into the core calls [`DriverState::carry_out`] before letting go of
//! the lock, but for the driver endpoint's messages: what they decide is carried out at
//! the end of their batch (`on_batch_end`, which follows every batch), once for all of
//! them, unless a reply must follow it.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use flint_rpc::log_budget::LogBudget;
use flint_rpc::{EndpointRef, Reply, RpcError};
use flint_wire::{ArchivedMessage, Message, TaskDescription, WireError};
use tracing::debug;

use crate::core::broadcast::BroadcastManager;
use crate::core::driver_core::{
    ChunkFailure, ChunkReply, DriverCore, LaunchRefused, Output, PeerId,
};
use crate::core::events::{SchedulerEvent, SchedulerListener, TaskEndReason, TaskResult};
use crate::core::fx_hash::FxHashMap;
use crate::core::task_set::TaskSetId;
use crate::driver::job::{JobShared, TaskSetShared};
use crate::driver::launch_batch::LaunchBatch;
use crate::driver::supply::{Answer, SupplyQueue};

/// An open task set's handle, and where its task ids start: an attempt of an earlier
/// task set of the same id (killed when that one ended, its report not in yet) has a
/// smaller one, and its end is not this task set's.
struct OpenTaskSet {
    first_task_id: u64,
    shared: Arc<TaskSetShared>,
}

/// The driver core and what carries its outputs out. See the module docs.
pub(crate) struct DriverState {
    pub core: DriverCore,
    /// The endpoint reference of each peer, by [`PeerId::index`].
    peers: Vec<Option<EndpointRef>>,
    /// What awaits each open task set.
    handles: FxHashMap<TaskSetId, OpenTaskSet>,
    /// What awaits each open job of stages.
    jobs: FxHashMap<u32, Arc<JobShared>>,
    listeners: Vec<Box<dyn SchedulerListener + Send>>,
    supply: SupplyQueue,
    /// The cluster manager's answer to the driver program's last request, until the
    /// caller takes it.
    answer: Option<Answer>,
    /// `rpc.askTimeout`, for block fetches.
    ask_timeout: Duration,
    /// For the replies of block fetches, which come in later turns of the loop.
    self_ref: Weak<Mutex<DriverState>>,
    /// Lines about messages that could not be sent to peers (a peer that stops reading
    /// decides how many).
    send_warnings: LogBudget,
    /// The broadcast variables, and which executors hold their pieces.
    pub broadcasts: BroadcastManager,
    /// The size of new broadcasts' pieces (`broadcast.blockSize`, at most what a message
    /// carries).
    pub broadcast_piece_size: u32,
    /// The launches of the outputs being carried out, sent per executor.
    launches: LaunchBatch,
    /// The tasks of the launch frame being sent (kept for its capacity).
    launch_frame: Vec<TaskDescription>,
}

impl std::fmt::Debug for DriverState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverState")
            .field("core", &self.core)
            .field("handles", &self.handles.len())
            .finish()
    }
}

/// Locks the driver's state, whoever panicked with it locked.
pub(crate) fn lock(state: &Mutex<DriverState>) -> MutexGuard<'_, DriverState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl DriverState {
    pub fn new(
        core: DriverCore,
        supply: SupplyQueue,
        ask_timeout: Duration,
    ) -> Arc<Mutex<DriverState>> {
        Arc::new_cyclic(|self_ref| {
            Mutex::new(DriverState {
                core,
                peers: Vec::new(),
                handles: FxHashMap::default(),
                jobs: FxHashMap::default(),
                listeners: Vec::new(),
                supply,
                answer: None,
                ask_timeout,
                self_ref: self_ref.clone(),
                send_warnings: LogBudget::default(),
                broadcasts: BroadcastManager::new(),
                broadcast_piece_size: u32::MAX,
                launches: LaunchBatch::default(),
                launch_frame: Vec::new(),
            })
        })
    }

    /// Keeps `endpoint` as the way to `peer` (a registration the core accepted).
    pub fn connect(&mut self, peer: PeerId, endpoint: EndpointRef) {
        let index = peer.index();
        if self.peers.len() <= index {
            self.peers.resize(index + 1, None);
        }
        self.peers[index] = Some(endpoint);
    }

    /// Adds a listener; TaskStart events are built from then on (nothing else reads
    /// them).
    pub fn add_listener(&mut self, listener: Box<dyn SchedulerListener + Send>) {
        self.listeners.push(listener);
        self.core.scheduler.set_task_start_events(true);
        self.core.scheduler.set_accumulator_events(true);
    }

    /// Adds a listener without turning TaskStart events on: one that reads only what
    /// the other events carry costs the launch path nothing.
    pub fn add_quiet_listener(&mut self, listener: Box<dyn SchedulerListener + Send>) {
        self.listeners.push(listener);
    }

    /// Follows a task set the core just took, whose tasks have ids from
    /// `first_task_id` on.
    pub fn track(&mut self, id: TaskSetId, first_task_id: u64, handle: Arc<TaskSetShared>) {
        self.handles.insert(
            id,
            OpenTaskSet {
                first_task_id,
                shared: handle,
            },
        );
    }

    /// Tells every executor that a shuffle's map outputs can go.
    pub fn remove_shuffle_everywhere(&self, shuffle_id: u32) {
        for endpoint in self.peers.iter().flatten() {
            let _ = endpoint.send(&Message::RemoveShuffle { shuffle_id });
        }
    }

    /// Sends `message` to every executor (one-way; one whose connection fails is gone
    /// with it).
    pub fn send_to_executors(&self, message: &Message) {
        for endpoint in self.peers.iter().flatten() {
            let _ = endpoint.send(message);
        }
    }

    /// Whether job `job_id` was taken and has not ended yet.
    pub fn job_is_open(&self, job_id: u32) -> bool {
        self.jobs.contains_key(&job_id)
    }

    /// Follows a job the core just took.
    pub fn track_job(&mut self, job_id: u32, handle: Arc<JobShared>) {
        self.jobs.insert(job_id, handle);
    }

    /// Ends every task set and job still open, failed: the driver is stopping.
    pub fn end_open_task_sets(&mut self, now: Instant, why: &str) {
        for (id, OpenTaskSet { shared: handle, .. }) in self.handles.drain() {
            handle.finish(Some(format!("Task set {id} cancelled: {why}")), now);
        }
        for (id, handle) in self.jobs.drain() {
            let message = format!("Job {id} cancelled: {why}");
            handle.finish(Err(message), Default::default(), now);
        }
    }

    /// The cluster manager's answer to the request the driver program just made, to
    /// wait for once the lock is let go; `None` if nothing was asked of it.
    pub fn take_answer(&mut self) -> Option<Answer> {
        self.answer.take()
    }

    /// Something to wait for, once the lock is let go, until the executor supply thread
    /// did everything asked of it so far.
    pub fn supply_barrier(&self) -> Option<Answer> {
        self.supply.barrier()
    }

    /// Carries out every output of the core, in order; the launches to each executor
    /// go together, in one frame ([`LaunchBatch`]), before anything else is sent.
    ///
    /// An offer round queues all its launches at once: they are sent once the last of
    /// them is taken, before the core is polled again. A launch refused then goes back
    /// to the core within the same run of outputs, as it would sent alone, and the
    /// core's bound on offer rounds per run still holds (an executor whose connection
    /// refuses everything is not offered tasks again and again within one turn).
    pub fn carry_out(&mut self, now: Instant) {
        while let Some(output) = self.core.poll_output(now) {
            match &output {
                // An event sends nothing: the launches need not go first.
                Output::Launch { .. } | Output::Event(_) => {}
                _ => self.send_launches(now),
            }
            match output {
                // Alone (a status answered with the next task, without pipelining): sent
                // as it is, the gathering would only cost.
                Output::Launch { peer, task }
                    if self.launches.is_empty() && !self.core.has_queued_outputs() =>
                {
                    self.launch(now, peer, task)
                }
                Output::Launch { peer, task } => self.launches.push(peer, task),
                Output::KillTask {
                    peer,
                    task_id,
                    executor_id,
                    interrupt_thread,
                    reason,
                } => {
                    let message = Message::KillTask {
                        task_id,
                        executor_id,
                        interrupt_thread,
                        reason,
                    };
                    if let Err(e) = self.send(peer, &message) {
                        let Message::KillTask { executor_id, .. } = &message else {
                            unreachable!()
                        };
                        // A peer that stops reading fails every one of them.
                        flint_rpc::peer_warn!(
                            self.send_warnings,
                            now,
                            "Cannot ask executor {executor_id} to kill task {task_id}: {e}"
                        );
                    }
                }
                Output::StopExecutor { peer, executor_id } => {
                    if let Err(e) = self.send(peer, &Message::StopExecutor) {
                        debug!("Cannot ask executor {executor_id} to stop: {e}");
                    }
                }
                Output::RemoveBlock { peer, block_id } => {
                    // Gone with its connection, if that failed.
                    let _ = self.send(peer, &Message::RemoveBlock { block_id });
                }
                Output::FetchChunk {
                    peer,
                    task_id,
                    block_id,
                    offset,
                    max_len,
                } => {
                    let message = Message::FetchBlockChunk {
                        block_id,
                        offset,
                        max_len,
                    };
                    self.fetch_chunk(now, peer, task_id, &message);
                }
                Output::ForgetPeer(peer) => {
                    if let Some(endpoint) = self.peers.get_mut(peer.index()) {
                        *endpoint = None;
                    }
                }
                Output::RequestTotalExecutors { total, if_refused } => {
                    if let Some(answer) = self.supply.request_total(total, if_refused) {
                        self.answer = Some(answer);
                    }
                }
                Output::KillExecutors(executor_ids) => self.supply.kill(executor_ids),
                Output::LookForExits => self.supply.look_for_exits(),
                Output::SupplyStopping { registered } => self.supply.stopping(registered),
                Output::Event(event) => self.on_event(now, event),
                Output::JobEnded {
                    job_id,
                    result,
                    stats,
                } => {
                    // Before the job's waiter wakes: what it launches next comes after.
                    for broadcast_id in self.broadcasts.job_ended(job_id) {
                        let generation = self.broadcasts.generation(broadcast_id).unwrap_or(0);
                        self.send_to_executors(&Message::UnpersistBroadcast {
                            broadcast_id,
                            generation,
                        });
                    }
                    if let Some(handle) = self.jobs.remove(&job_id) {
                        handle.finish(result, stats, now);
                    }
                }
            }
            if !self.launches.is_empty() && !self.core.has_queued_outputs() {
                self.send_launches(now);
            }
        }
    }

    /// Tells the core how many bytes are queued on the connection of each executor it
    /// holds backlogged, and how many it has taken: drained ones get offers again, ones
    /// that took nothing for longer than `network.timeout` are removed. A connection
    /// gone counts as drained: its loss is the disconnection's to report.
    pub fn check_backlogs(&mut self, now: Instant) {
        for (executor_id, peer) in self.core.backlogged_executors() {
            let (queued, written) = self
                .endpoint(peer)
                .map_or((0, 0), |e| (e.queued_bytes(), e.bytes_written()));
            self.core.outbox_backlog(now, &executor_id, queued, written);
        }
        self.core.flush_offers(now);
    }

    fn endpoint(&self, peer: PeerId) -> Result<&EndpointRef, RpcError> {
        // The core forgets a peer only after its last output: a missing one is a bug,
        // reported as the connection's loss rather than a panic of the event loop.
        self.peers
            .get(peer.index())
            .and_then(Option::as_ref)
            .ok_or(RpcError::Stopped)
    }

    fn send(&self, peer: PeerId, message: &Message) -> Result<(), RpcError> {
        self.endpoint(peer)?.send(message)
    }

    /// Sends the launches kept so far, one frame per executor (per
    /// [`launch_batch::MAX_TASKS_PER_FRAME`](super::launch_batch::MAX_TASKS_PER_FRAME)
    /// tasks): each task is encoded once, straight into the executor's connection (no
    /// copy of it is made on the way), and the core is told of the tasks that could not
    /// be sent.
    fn send_launches(&mut self, now: Instant) {
        let mut frame = std::mem::take(&mut self.launch_frame);
        while let Some(peer) = self.launches.take_run(&mut frame) {
            let Some(message) = Message::take_launches(&mut frame) else {
                continue;
            };
            let sent = self.send(peer, &message);
            message.put_back_launches(&mut frame);
            match sent {
                Ok(()) => frame.clear(),
                // The estimate of the frame's size missed (the limit is far above it):
                // the tasks go one by one, and only one over the limit itself is refused.
                Err(RpcError::Wire(WireError::MessageTooLarge { .. })) if frame.len() > 1 => {
                    for task in frame.drain(..) {
                        self.launch(now, peer, task);
                    }
                }
                Err(e) => {
                    let refused = launch_refused(e);
                    for task in frame.drain(..) {
                        self.core.launch_failed(
                            now,
                            &task.executor_id,
                            task.task_id,
                            task.index,
                            refused.clone(),
                        );
                    }
                }
            }
        }
        self.launch_frame = frame;
    }

    /// Encodes the task once, straight into the executor's connection (no copy of it is
    /// made on the way), and tells the core if it could not.
    fn launch(&mut self, now: Instant, peer: PeerId, task: TaskDescription) {
        let message = Message::LaunchTask(task);
        let Err(e) = self.send(peer, &message) else {
            return;
        };
        let Message::LaunchTask(task) = &message else {
            unreachable!()
        };
        self.core.launch_failed(
            now,
            &task.executor_id,
            task.task_id,
            task.index,
            launch_refused(e),
        );
    }

    /// Asks for a chunk; the reply comes back to the core in a later turn of the loop.
    fn fetch_chunk(&mut self, now: Instant, peer: PeerId, task_id: u64, message: &Message) {
        let state = self.self_ref.clone();
        let asked = self.endpoint(peer).and_then(|endpoint| {
            endpoint.ask_then(message, self.ask_timeout, move |reply| {
                if let Some(state) = state.upgrade() {
                    let mut state = lock(&state);
                    let now = Instant::now();
                    state.core.chunk_received(now, task_id, chunk_reply(&reply));
                    state.carry_out(now);
                }
            })
        });
        if let Err(e) = asked {
            self.core
                .chunk_received(now, task_id, Err(chunk_failure(&e)));
        }
    }

    /// Records what the task set's handle awaits, and tells the listeners.
    fn on_event(&mut self, now: Instant, event: SchedulerEvent) {
        match &event {
            SchedulerEvent::TaskEnd {
                task_id,
                task_set,
                index,
                duration,
                reason,
                ..
            } => {
                let open = self.handles.get(task_set);
                if let Some(handle) = open
                    .filter(|open| *task_id >= open.first_task_id)
                    .map(|open| &open.shared)
                {
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
                if let Some(open) = self.handles.remove(task_set) {
                    open.shared.finish(failure.clone(), now);
                }
            }
            // Its block server is gone: other executors are no longer sent there for
            // broadcast pieces (one that registers again under the id starts empty).
            SchedulerEvent::ExecutorRemoved { executor_id, .. } => {
                self.broadcasts.executor_removed(executor_id);
            }
            _ => {}
        }
        for listener in &mut self.listeners {
            event.deliver_to(listener.as_mut());
        }
    }
}

/// A block fetch's reply as the core reads it.
/// A failed chunk ask, as the core reads it: whether the executor's connection is gone.
fn chunk_failure(error: &RpcError) -> ChunkFailure {
    match error {
        RpcError::Disconnected { .. } | RpcError::AuthenticationFailed { .. } => {
            ChunkFailure::ConnectionClosed(error.to_string())
        }
        other => ChunkFailure::Other(other.to_string()),
    }
}

/// What the core is told of a launch the connection refused.
fn launch_refused(e: RpcError) -> LaunchRefused {
    match e {
        RpcError::Wire(WireError::MessageTooLarge { size, limit }) => {
            LaunchRefused::TooLarge { size, limit }
        }
        RpcError::OutboxFull { queued, limit, .. } => LaunchRefused::Backlogged { queued, limit },
        e => LaunchRefused::Other(e.to_string()),
    }
}

fn chunk_reply(reply: &Result<Reply, RpcError>) -> Result<ChunkReply<'_>, ChunkFailure> {
    match reply {
        Ok(reply) => Ok(match reply.message() {
            ArchivedMessage::BlockChunk {
                block_id: _,
                offset,
                total_size,
                data,
            } => ChunkReply::Chunk {
                offset: offset.to_native(),
                total_size: total_size.to_native(),
                data: data.as_slice(),
            },
            other => ChunkReply::Other(other.kind()),
        }),
        Err(e) => Err(chunk_failure(e)),
    }
}
