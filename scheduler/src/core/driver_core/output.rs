//! What the driver core decides the driver does outside it: [`Output`].
//!
//! Every message the driver sends on its own account is decided here, as is every
//! request to the cluster manager and every event for listeners and task set handles.
//! The core queues them as it handles an event; the glue takes them with
//! [`DriverCore::poll_output`](super::DriverCore::poll_output) and carries each out.

use bytes::Bytes;
use flint_wire::{BlockId, MessageKind, SharedStr, TaskDescription};

use crate::core::events::SchedulerEvent;

/// A connection an executor registered on, as the core numbers it. The glue keeps the
/// endpoint reference that reaches the executor under this number; the core holds only
/// the number. A peer stays numbered while its executor is registered or a result is
/// being fetched from it; [`Output::ForgetPeer`] says when neither holds any more, and
/// its number may then be given to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerId(pub(crate) u32);

impl PeerId {
    /// The peer's number, dense from 0: an index into the glue's table of references.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// What to do when the cluster manager cannot provide the executors asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfRefused {
    /// The driver program asked ([`crate::Driver::request_total_executors`]): the error
    /// is its answer.
    Answer,
    /// The driver asked to replace lost executors: an executor failure, reported back
    /// with [`SupplyEvent::RequestFailed`](super::SupplyEvent::RequestFailed) (the
    /// request is made again at the next report).
    CountFailure,
    /// The driver asked after killing executors: the error is logged.
    Log,
}

/// Something the driver core decided the driver does outside it.
///
/// Messages go to a [`PeerId`]; the glue encodes each once, into the peer's connection.
#[derive(Debug)]
pub enum Output {
    /// Send `LaunchTask(task)` (the seeds' `launchTasks`). The task's cores are already
    /// taken; if the message cannot be sent, the glue says so with
    /// [`DriverCore::launch_failed`](super::DriverCore::launch_failed).
    Launch {
        /// The executor's connection.
        peer: PeerId,
        /// The task, to encode straight into the connection's outbox.
        task: TaskDescription,
    },
    /// Send `KillTask` (the seeds' KillTask handler passes it on).
    KillTask {
        /// The executor's connection.
        peer: PeerId,
        /// The task attempt.
        task_id: u64,
        /// The executor running it.
        executor_id: SharedStr,
        /// Whether to interrupt the running thread.
        interrupt_thread: bool,
        /// Why.
        reason: String,
    },
    /// Send `StopExecutor`.
    StopExecutor {
        /// The executor's connection.
        peer: PeerId,
        /// The executor, for the log if the message cannot be sent.
        executor_id: SharedStr,
    },
    /// Send `RemoveBlock`: a large result the driver fetched, or will not fetch, leaves
    /// the executor's block store.
    RemoveBlock {
        /// The executor's connection.
        peer: PeerId,
        /// The block.
        block_id: BlockId,
    },
    /// Ask `FetchBlockChunk`, with `rpc.askTimeout`. The reply, the timeout or the lost
    /// connection goes to
    /// [`DriverCore::chunk_received`](super::DriverCore::chunk_received).
    FetchChunk {
        /// The executor's connection.
        peer: PeerId,
        /// The task whose result this is.
        task_id: u64,
        /// The block.
        block_id: BlockId,
        /// Where the chunk starts.
        offset: u64,
        /// The most bytes the chunk may hold.
        max_len: u32,
    },
    /// Nothing more goes to this peer: the glue drops its reference.
    ForgetPeer(PeerId),
    /// Ask the cluster manager for `total` executors in all (the seeds'
    /// `doRequestTotalExecutors`).
    RequestTotalExecutors {
        /// Executors wanted, those running included.
        total: u32,
        /// What a refusal means.
        if_refused: IfRefused,
    },
    /// Ask the cluster manager to kill these executors (the seeds' `doKillExecutors`).
    KillExecutors(Vec<String>),
    /// An executor's connection closed and its loss waits for the cluster manager's
    /// report of its exit: look for exited executors soon, rather than at the next
    /// periodic poll, so that its tasks are not held longer than its process takes to
    /// end.
    LookForExits,
    /// The driver is stopping: the cluster manager starts no more executors and kills
    /// those it started that never registered (`registered` are those that did).
    SupplyStopping {
        /// The executors registered with the driver.
        registered: Vec<String>,
    },
    /// Tell the listeners, and the handle of the task set it is about (a task's end, the
    /// task set's end).
    Event(SchedulerEvent),
    /// A job of stages ended: its results in partition order, or why it failed.
    JobEnded {
        /// The job.
        job_id: u32,
        /// Its results, or the failure's text.
        result: Result<Vec<Bytes>, String>,
        /// What it took.
        stats: JobStats,
    },
}

/// What a job of stages took, as the driver counts it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobStats {
    /// Its stages that ran, by id.
    pub stages: Vec<u32>,
    /// Stage attempts submitted (a stage runs again after a fetch failure).
    pub stage_attempts: u32,
    /// Task attempts that could not fetch a shuffle block.
    pub fetch_failures: u32,
    /// Bytes its map tasks wrote to shuffles (what their map statuses announce).
    pub shuffle_bytes_written: u64,
    /// Bytes its result tasks read (from shuffles, and from their own input).
    pub shuffle_bytes_read: u64,
}

/// Why the glue could not send a [`Output::Launch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchRefused {
    /// The encoded task is larger than `rpc.message.maxSize`: its task set is aborted
    /// with the seeds' message.
    TooLarge {
        /// The encoded size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The executor's connection has `rpc.outbox.maxBytes` queued: its peer is not
    /// taking what it is sent as fast as it is sent. Back-pressure, not a failure: the
    /// task is pending again, no failure is counted, and the executor gets no offers
    /// until its connection drains (see [`DriverCore::outbox_backlog`]).
    ///
    /// [`DriverCore::outbox_backlog`]: super::DriverCore::outbox_backlog
    Backlogged {
        /// Bytes queued on the connection.
        queued: usize,
        /// `rpc.outbox.maxBytes`.
        limit: usize,
    },
    /// Anything else (the connection is gone): the task is pending again.
    Other(String),
}

/// Why an [`Output::FetchChunk`] got no answer, as the glue saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkFailure {
    /// The executor's connection closed, before the reply came or as the ask was made:
    /// the executor is gone (news of the closed connection follows the asks' failures).
    ConnectionClosed(String),
    /// Anything else: the ask timed out, could not be queued (a full outbox), or the
    /// executor answered with an error.
    Other(String),
}

impl std::fmt::Display for ChunkFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChunkFailure::ConnectionClosed(why) | ChunkFailure::Other(why) => f.write_str(why),
        }
    }
}

/// An answer to an [`Output::FetchChunk`], as the glue read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkReply<'a> {
    /// A `BlockChunk`.
    Chunk {
        /// Where it starts.
        offset: u64,
        /// The size the executor gives the whole block.
        total_size: u64,
        /// Its bytes.
        data: &'a [u8],
    },
    /// Another message, of this kind.
    Other(MessageKind),
}
