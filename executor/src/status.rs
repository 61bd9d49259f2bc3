//! A task's status update: how a task ended ([`Ended`]), the message that says so, how a
//! runner sends it ([`StatusSender`], retried while the connection's outbox is full), and
//! when a runner sends on the updates it holds ([`Flush`], [`HeldUpdates`]).
//!
//! # The flush policy
//!
//! A runner holds the updates of a run of quick tasks and sends them in one frame (a
//! `StatusUpdates`), queued with `send_deferred` and handed to the event loop
//! ([`StatusSender::flush`]), when its batch is done (before it takes more work or
//! sleeps), halfway through a batch of quick tasks (and then turns the loop itself, see
//! [`Flush::Refill`]), every [`FLUSH_EVERY`] updates, and whenever the next task might be
//! long (a different function, or a task that ran [`DEFER_BELOW`] or more), so that an
//! update rarely waits behind a long task. When it does (a quick task followed by a long
//! one of the same function, in one batch), the event loop's thread sends and writes it
//! within a few milliseconds, which it does for a thread lent to it ([`HeldUpdates`]); so
//! a runner holds updates only while lent to the loop. The executor's endpoint also
//! flushes at the end of its batches and after each heartbeat, so that its own frames on
//! the same connection never wait for a runner.
//!
//! The policy is a pure function of what the runner knows after a task
//! ([`Flush::after_update`]), so that it is tested on its own.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::{EndpointRef, LentFlushHook, LoopLease, RpcError};
use flint_wire::{
    bytes_to_string, cut_text, AccumulatorUpdate, AccumulatorValue, BlockId, FetchFailure, Message,
    SharedStr, StatusUpdate, TaskFailureKind, TaskMetrics, TaskOutcome, TaskState, WireError,
};
use tracing::{debug, error, warn};

use crate::executor::{lock, Inner};
use crate::launch::Launch;
use crate::task::TaskHandle;

/// Room left in a message for everything but a direct result's value: a result travels
/// in its status update when `value.len() + RESULT_OVERHEAD <= rpc.message.maxSize`.
pub const RESULT_OVERHEAD: usize = 64 * 1024;

/// How long a runner retries a status update the connection's outbox has no room for
/// before it says so in the log. It goes on retrying until the executor stops: an update
/// given up would leave its task running at the driver for good, its cores taken, while
/// heartbeats still went through.
const STATUS_RETRY_WARNING: Duration = Duration::from_secs(30);

/// The most status updates a runner leaves queued before it sends them on.
const FLUSH_EVERY: usize = 32;

/// A task that ran less than this may leave its status update queued while the runner
/// runs the next task, if that one runs the same function.
const DEFER_BELOW: Duration = Duration::from_micros(20);

/// Where task runners send their tasks' status updates: the driver's endpoint, or a
/// test's collector.
pub trait StatusSender: Send + Sync + 'static {
    /// Sends a [`Message::StatusUpdate`], or several updates in a
    /// [`Message::StatusUpdates`], one-way. [`RpcError::OutboxFull`] makes the runner
    /// retry a little later; any other error gives the update up.
    fn send_status(&self, message: &Message) -> Result<(), RpcError>;

    /// Queues a status update message (one update or several) that may wait for the next
    /// [`StatusSender::flush`]; a runner flushes before it waits for work, so nothing
    /// queued is left behind. By default the same as [`StatusSender::send_status`].
    fn send_status_deferred(&self, message: &Message) -> Result<(), RpcError> {
        self.send_status(message)
    }

    /// Sends what [`StatusSender::send_status_deferred`] queued. By default nothing to
    /// do.
    fn flush(&self) {}

    /// Like [`StatusSender::flush`], for a runner with more tasks at hand: the sending may
    /// be left to another thread. By default [`StatusSender::flush`].
    fn flush_in_background(&self) {
        self.flush()
    }

    /// Lends the calling runner's thread to the transport that brings its tasks, while it
    /// runs and looks for tasks: it then takes its launches off the socket itself
    /// ([`LoopLease::turn`]) instead of being handed them by the event loop's thread. By
    /// default there is no transport to lend to.
    fn lend_transport(&self) -> Option<LoopLease> {
        None
    }

    /// Runs `hook` whenever the transport's own thread writes what a runner lent to it
    /// ([`StatusSender::lend_transport`]) sent deferred and did not flush, because the
    /// runner is busy with a task: `hook` sends what the runners hold. It runs until the
    /// returned [`LentFlushHook`] is dropped. By default there is no such transport, and
    /// nothing to do.
    fn on_lent_flush(&self, hook: Box<dyn Fn() + Send + Sync>) -> Option<LentFlushHook> {
        let _ = hook;
        None
    }
}

impl StatusSender for EndpointRef {
    fn send_status(&self, message: &Message) -> Result<(), RpcError> {
        self.send(message)
    }

    fn send_status_deferred(&self, message: &Message) -> Result<(), RpcError> {
        self.send_deferred(message)
    }

    fn flush(&self) {
        EndpointRef::flush(self)
    }

    fn flush_in_background(&self) {
        EndpointRef::flush_in_background(self)
    }

    fn lend_transport(&self) -> Option<LoopLease> {
        Some(self.env().lend())
    }

    fn on_lent_flush(&self, hook: Box<dyn Fn() + Send + Sync>) -> Option<LentFlushHook> {
        Some(self.env().on_lent_flush(hook))
    }
}

/// How a task ended.
pub(crate) struct Ended {
    pub(crate) state: TaskState,
    pub(crate) outcome: TaskOutcome,
}

impl Ended {
    pub(crate) fn failed(kind: TaskFailureKind, message: String, metrics: TaskMetrics) -> Self {
        Ended {
            state: TaskState::Failed,
            outcome: TaskOutcome::Failure {
                kind,
                message,
                counts_towards_failures: true,
                metrics,
            },
        }
    }

    pub(crate) fn killed(reason: &str, metrics: TaskMetrics) -> Self {
        Ended {
            state: TaskState::Killed,
            outcome: TaskOutcome::Failure {
                kind: TaskFailureKind::TaskKilled,
                message: reason.to_owned(),
                counts_towards_failures: false,
                metrics,
            },
        }
    }

    /// A task that could not fetch a shuffle block: not counted towards
    /// `task.maxFailures`, and the driver learns which map output is lost.
    pub(crate) fn fetch_failed(failure: Box<FetchFailure>, metrics: TaskMetrics) -> Self {
        Ended {
            state: TaskState::Failed,
            outcome: TaskOutcome::FetchFailed { failure, metrics },
        }
    }

    /// The status update saying so, its failure text cut to `text_limit` bytes so that
    /// the update always fits in a message.
    pub(crate) fn into_update(
        self,
        executor_id: &SharedStr,
        task_id: u64,
        text_limit: usize,
    ) -> StatusUpdate {
        let mut outcome = self.outcome;
        let message = match &mut outcome {
            TaskOutcome::Failure { message, .. } => Some(message),
            TaskOutcome::FetchFailed { failure, .. } => Some(&mut failure.message),
            _ => None,
        };
        if let Some(message) = message {
            if message.len() > text_limit {
                *message = cut_text(message, text_limit);
            }
        }
        StatusUpdate {
            executor_id: executor_id.clone(),
            task_id,
            state: self.state,
            outcome,
        }
    }
}

/// The accumulator list a sent status update carried, to be given back to its task's
/// handle (see [`crate::accumulators`]); `None` when it carried none.
pub(crate) fn lent_accumulators(update: &mut StatusUpdate) -> Option<Vec<AccumulatorUpdate>> {
    match &mut update.outcome {
        TaskOutcome::Direct { accumulators, .. } | TaskOutcome::Indirect { accumulators, .. }
            if accumulators.capacity() > 0 =>
        {
            Some(std::mem::take(accumulators))
        }
        _ => None,
    }
}

/// About what an update takes encoded: its fixed part and what its result, accumulator
/// values and failure text add.
fn encoded_size_estimate(update: &StatusUpdate) -> usize {
    let (variable, accumulators) = match &update.outcome {
        TaskOutcome::Direct {
            value,
            accumulators,
            ..
        } => (value.len(), accumulators.as_slice()),
        TaskOutcome::Indirect { accumulators, .. } => (0, accumulators.as_slice()),
        TaskOutcome::Failure { message, .. } => (message.len(), &[][..]),
        TaskOutcome::FetchFailed { failure, .. } => (failure.message.len(), &[][..]),
        _ => (0, &[][..]),
    };
    let accumulators: usize = accumulators
        .iter()
        .map(|update| {
            let bytes = match &update.value {
                AccumulatorValue::Bytes(bytes) => bytes.len(),
                _ => 0,
            };
            48 + update.name.as_ref().map_or(0, String::len) + bytes
        })
        .sum();
    256 + update.executor_id.len() + variable + accumulators
}

/// The most bytes (as [`encoded_size_estimate`] counts them) of held updates sent in
/// one frame: far below any `rpc.message.maxSize`, so that a batch never meets the limit
/// a lone update fits in. A larger update goes on its own.
const HELD_BYTES: usize = 64 * 1024;

/// The status updates a runner holds ([`Flush::Hold`]) until its policy lets them go,
/// then sent in one frame: a [`Message::StatusUpdates`] for several, the seeds'
/// [`Message::StatusUpdate`] for one. Its buffers are kept from batch to batch, so that
/// holding allocates nothing once they have grown.
///
/// A runner holds them only while it is lent to the event loop. If the task it runs next
/// is a long one after all, the loop thread takes the sockets back and, before it writes
/// what lent threads left queued, sends what the runner holds
/// ([`Inner::send_held_of_busy_runners`], run through
/// [`StatusSender::on_lent_flush`]): a held update waits a few milliseconds at most,
/// never for the end of the next task. Each runner's are behind a lock of their own,
/// which the loop thread only tries.
#[derive(Default)]
pub(crate) struct HeldUpdates {
    updates: Vec<StatusUpdate>,
    /// Each update's task, whose handle gets back the accumulator list the update lent.
    handles: Vec<Arc<TaskHandle>>,
    /// [`encoded_size_estimate`] of them all.
    bytes: usize,
}

impl HeldUpdates {
    /// How many are held.
    pub(crate) fn len(&self) -> usize {
        self.updates.len()
    }

    /// Holds `update`, of the task of `handle`; what was held goes first if the update
    /// would take the frame over [`HELD_BYTES`].
    pub(crate) fn hold(&mut self, inner: &Inner, update: StatusUpdate, handle: Arc<TaskHandle>) {
        let size = encoded_size_estimate(&update);
        if !self.updates.is_empty() && self.bytes + size > HELD_BYTES {
            self.send(inner);
        }
        self.bytes += size;
        self.updates.push(update);
        self.handles.push(handle);
    }

    /// Sends what is held and `update`, of the task of `handle`, in one frame (see
    /// [`HeldUpdates::send`]). With nothing held, the update goes as it is: the path of
    /// every task when updates are not held (no launch pipelining), which costs nothing
    /// more than sending it.
    pub(crate) fn send_with(
        &mut self,
        inner: &Inner,
        update: StatusUpdate,
        handle: &Arc<TaskHandle>,
    ) {
        if !self.updates.is_empty() {
            self.hold(inner, update, handle.clone());
            self.send(inner);
            return;
        }
        let message = Message::StatusUpdate(update);
        inner.send_status(&message);
        let Message::StatusUpdate(mut update) = message else {
            unreachable!("built above")
        };
        if let Some(list) = lent_accumulators(&mut update) {
            handle.accumulators().give_back(list);
        }
    }

    /// Queues what is held in the connection's outbox (deferred: the runner flushes), in
    /// one frame, retrying while the outbox is full (see [`Inner::send_status`]).
    pub(crate) fn send(&mut self, inner: &Inner) {
        let Some(message) = self.message() else {
            return;
        };
        if !inner.send_status(&message) {
            // The estimate missed: the updates go one by one, each within the limit.
            for update in message.status_updates() {
                inner.send_status(&Message::StatusUpdate(update.clone()));
            }
        }
        self.sent(message);
    }

    /// [`HeldUpdates::send`] for the loop thread: it does not wait for room in the
    /// outbox, and leaves the updates held if there is none (their runner sends them).
    fn send_from_loop(&mut self, inner: &Inner) {
        let Some(message) = self.message() else {
            return;
        };
        match inner.status.send_status_deferred(&message) {
            Err(
                RpcError::OutboxFull { .. } | RpcError::Wire(WireError::MessageTooLarge { .. }),
            ) => {
                self.held_back(message);
            }
            Err(e) => {
                inner.status_not_sent(&message, &e);
                self.sent(message);
            }
            Ok(()) => self.sent(message),
        }
    }

    /// The frame's message; the updates are in it until [`HeldUpdates::sent`] or
    /// [`HeldUpdates::held_back`] takes them back.
    fn message(&mut self) -> Option<Message> {
        Message::take_status_updates(&mut self.updates)
    }

    fn held_back(&mut self, message: Message) {
        message.put_back_status_updates(&mut self.updates);
    }

    /// Gives each task's handle back the accumulator list its update lent, and empties
    /// the buffers for the next updates.
    fn sent(&mut self, message: Message) {
        self.held_back(message);
        for (mut update, handle) in self.updates.drain(..).zip(self.handles.drain(..)) {
            if let Some(list) = lent_accumulators(&mut update) {
                handle.accumulators().give_back(list);
            }
        }
        self.bytes = 0;
    }
}

/// A runner's held updates, shared with the loop thread (see [`HeldUpdates`]).
pub(crate) type HeldSlot = Arc<Mutex<HeldUpdates>>;

/// What a runner does with the status updates it has queued and not flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flush {
    /// Holds them: the next task is likely as quick as the last, and its update
    /// can leave with them. Also the answer when nothing is queued.
    Hold,
    /// Writes them from the runner's thread ([`StatusSender::flush`]): no task is at hand
    /// to run while the event loop would write them.
    Now,
    /// Hands them to the event loop ([`StatusSender::flush_in_background`]) while the
    /// runner goes on with the tasks at hand. A runner lent to the loop keeps the loop's
    /// own thread parked: that thread writes them once it sees the runner stop turning
    /// (within about two lease checks, a millisecond), or the runner's next turn does.
    InBackground,
    /// Hands them to the event loop and turns it once on the runner's thread, halfway
    /// through a batch of quick tasks ([`RefillPoint`]): the first half's updates leave
    /// now, not after the batch, and the launches they free are on their way while the
    /// second half runs, waiting in the socket when it ends, instead of a round trip
    /// after it with the runner's queue empty. The same turn reads what earlier updates
    /// freed.
    Refill,
}

/// Where in its batch a lent runner refills its queue ([`Flush::Refill`]): once half of
/// a batch of at least [`FLUSH_EVERY`] tasks is done, if every task of it so far was
/// quick. A smaller batch's updates leave in a frame or two anyway, and a turn would only
/// split them; after a task that was not quick the loop's own thread has taken the
/// sockets back, or soon will, and a turn from the runner would only hold it back (it
/// leaves the sockets to a lent thread for a lease check after each lent turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RefillPoint {
    /// Tasks left in the batch at the point; `None` once it is passed or cancelled.
    left: Option<usize>,
}

impl RefillPoint {
    /// The point of a batch of `len` tasks.
    pub(crate) fn of_batch(len: usize) -> Self {
        RefillPoint {
            left: (len >= FLUSH_EVERY).then_some(len / 2),
        }
    }

    /// After a task whose function ran `finished_in` (`None`: it failed, was killed or
    /// never ran), with `left` tasks of the batch still to run: whether the runner
    /// refills now. True at most once per batch.
    pub(crate) fn reached(&mut self, finished_in: Option<Duration>, left: usize) -> bool {
        let Some(at) = self.left else {
            return false;
        };
        if finished_in.is_none_or(|ran| ran >= DEFER_BELOW) {
            self.left = None;
            return false;
        }
        if left <= at {
            self.left = None;
            return true;
        }
        false
    }
}

/// What a runner knows when it has queued a task's status update, which is all the flush
/// policy looks at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AfterUpdate {
    /// How long the task's function ran, if it finished with a result; `None` for a task
    /// that failed, was killed or never ran, whose update never waits.
    pub(crate) finished_in: Option<Duration>,
    /// The next task of the runner's batch runs the same function.
    pub(crate) next_same_function: bool,
    /// Updates held and not sent, this one included.
    pub(crate) unflushed: usize,
    /// The runner is lent to the event loop, whose thread then writes what waits in the
    /// outbox within a few milliseconds (see flint_rpc's turns); a runner that is not
    /// (`executor.busyPoll=0`) must flush at once.
    pub(crate) lent: bool,
    /// Tasks are left in the runner's batch or queued at the executor.
    pub(crate) more_at_hand: bool,
    /// The runner's batch reached its [`RefillPoint`] with this task.
    pub(crate) halfway: bool,
}

impl Flush {
    /// After a task's update is queued: only a quick task followed by one of the same
    /// function leaves its update queued (the next one is likely quick too), at most
    /// [`FLUSH_EVERY`] of them, and only while the runner is lent to the event loop.
    /// Otherwise the updates leave now: handed to the event loop while the runner goes
    /// on with more tasks, or written from the runner's thread when none is left. At its
    /// batch's [`RefillPoint`], a lent runner sends them and turns the loop itself
    /// ([`Flush::Refill`]).
    pub(crate) fn after_update(after: AfterUpdate) -> Flush {
        if after.halfway && after.lent {
            return Flush::Refill;
        }
        let quick = after.finished_in.is_some_and(|ran| ran < DEFER_BELOW);
        let hold = quick && after.next_same_function && after.unflushed < FLUSH_EVERY && after.lent;
        if hold || after.unflushed == 0 {
            Flush::Hold
        } else if after.more_at_hand {
            Flush::InBackground
        } else {
            Flush::Now
        }
    }

    /// At the end of a batch, before the runner looks for more work or sleeps: whatever
    /// is queued leaves now (a stop in the middle of the batch skips the flushes after
    /// each task), so that no update waits for the runner's next task.
    pub(crate) fn at_batch_end(unflushed: usize) -> Flush {
        if unflushed > 0 {
            Flush::Now
        } else {
            Flush::Hold
        }
    }

    /// Does it with `status`, and for [`Flush::Refill`] turns the loop on `lease`, the
    /// runner's.
    pub(crate) fn apply(self, status: &dyn StatusSender, lease: Option<&LoopLease>) {
        match self {
            Flush::Hold => {}
            Flush::Now => status.flush(),
            Flush::InBackground => status.flush_in_background(),
            Flush::Refill => {
                // Queued first, so that the turn writes them. If the loop's own thread is
                // turning at this moment, `turn` does nothing and that thread writes them.
                status.flush_in_background();
                if let Some(lease) = lease {
                    lease.turn();
                }
            }
        }
    }
}

impl Inner {
    /// Sends a status update, or several in one frame, deferred (the runner flushes),
    /// retrying while the connection's outbox is full, until the executor stops. False
    /// only if the frame is over `rpc.message.maxSize`: the caller may split it.
    pub(crate) fn send_status(&self, message: &Message) -> bool {
        let mut started: Option<Instant> = None;
        let mut warned = false;
        let mut pause = Duration::from_micros(100);
        loop {
            match self.status.send_status_deferred(message) {
                Ok(()) => return true,
                Err(RpcError::OutboxFull { .. }) if !self.stopped.load(Ordering::Acquire) => {
                    let waited = started.get_or_insert_with(Instant::now).elapsed();
                    if !warned && waited >= STATUS_RETRY_WARNING {
                        warned = true;
                        warn!(
                            "The status update of {} has waited {}s for room in the \
                             connection to the driver; still trying",
                            Tids(message),
                            waited.as_secs()
                        );
                    }
                    // What this runner queued must leave for the outbox to drain.
                    self.status.flush();
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Err(RpcError::Wire(WireError::MessageTooLarge { .. }))
                    if matches!(message, Message::StatusUpdates { .. }) =>
                {
                    return false;
                }
                Err(e) => {
                    self.status_not_sent(message, &e);
                    return true;
                }
            }
        }
    }

    /// Says that a status update message could not be sent, and drops the results its
    /// tasks stored, which nobody will fetch.
    fn status_not_sent(&self, message: &Message, e: &RpcError) {
        error!("Failed to send the status update of {}: {e}", Tids(message));
        for task_id in task_ids(message) {
            self.blocks.remove(BlockId::TaskResult { task_id });
        }
    }

    /// Sends the updates that runners hold while they run something else: run by the
    /// event loop's thread before it writes what lent threads left queued (see
    /// [`HeldUpdates`]). A runner that holds its lock is sending them itself.
    pub(crate) fn send_held_of_busy_runners(&self) {
        for slot in lock(&self.held_by_runner).iter() {
            let mut held = match slot.try_lock() {
                Ok(held) => held,
                // A runner that panicked holding it left its updates as they were.
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                Err(TryLockError::WouldBlock) => continue,
            };
            held.send_from_loop(self);
        }
    }

    /// How a task that returned `value` ended: its result in the update, in the block
    /// store, or dropped for being larger than `driver.maxResultSize`; its accumulator
    /// values travel with it in every case.
    pub(crate) fn finished(
        &self,
        launch: &Launch,
        value: Bytes,
        mut metrics: TaskMetrics,
        accumulators: Vec<AccumulatorUpdate>,
    ) -> Ended {
        let size = value.len();
        metrics.result_size = size as u64;
        let outcome = if self
            .max_result_size
            .is_some_and(|limit| size as u64 > limit)
        {
            let limit = self.max_result_size.unwrap_or_default();
            warn!(
                "Finished {}. Result is larger than maxResultSize ({} > {}), dropping it.",
                launch.name,
                bytes_to_string(size as u64),
                bytes_to_string(limit)
            );
            TaskOutcome::Indirect {
                block_id: BlockId::TaskResult {
                    task_id: launch.task_id,
                },
                size: size as u64,
                metrics,
                accumulators,
            }
        } else if size <= self.direct_limit {
            debug!(
                "Finished {}. {size} bytes result sent to driver",
                launch.name
            );
            TaskOutcome::Direct {
                value,
                metrics,
                accumulators,
            }
        } else {
            let block_id = BlockId::TaskResult {
                task_id: launch.task_id,
            };
            self.blocks.put(block_id, value);
            debug!(
                "Finished {}. {size} bytes result sent via BlockManager)",
                launch.name
            );
            TaskOutcome::Indirect {
                block_id,
                size: size as u64,
                metrics,
                accumulators,
            }
        };
        Ended {
            state: TaskState::Finished,
            outcome,
        }
    }
}

/// The tasks a status update message (one or several) reports on.
fn task_ids(message: &Message) -> impl Iterator<Item = u64> + '_ {
    message.status_updates().iter().map(|update| update.task_id)
}

/// "task (TID 7)", or "tasks (TID 7, 8, 9)", for the log.
struct Tids<'a>(&'a Message);

impl std::fmt::Display for Tids<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids = task_ids(self.0).peekable();
        let first = ids.next().unwrap_or_default();
        if ids.peek().is_none() {
            return write!(f, "task (TID {first})");
        }
        write!(f, "tasks (TID {first}")?;
        for id in ids {
            write!(f, ", {id}")?;
        }
        f.write_str(")")
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::config::ExecutorConfig;
    use crate::executor::{lock, Executor, Staged};
    use crate::registry::TaskRegistry;
    use crate::testing::{task, wait_until, WAIT};
    use std::sync::atomic::AtomicUsize;
    use std::sync::{mpsc, Arc, Mutex};

    /// After a quick task, lent, with the next task of the same function, the third
    /// update queued and more tasks at hand: the one case where an update is held.
    fn quick_run() -> AfterUpdate {
        AfterUpdate {
            finished_in: Some(Duration::from_micros(3)),
            next_same_function: true,
            unflushed: 3,
            lent: true,
            more_at_hand: true,
            halfway: false,
        }
    }

    #[test]
    fn an_update_of_a_quick_task_followed_by_one_of_its_function_is_held() {
        assert_eq!(Flush::after_update(quick_run()), Flush::Hold);
        let started = Instant::now();
        let ended = started + DEFER_BELOW - Duration::from_nanos(1);
        let just_quick = AfterUpdate {
            finished_in: Some(ended - started),
            ..quick_run()
        };
        assert_eq!(Flush::after_update(just_quick), Flush::Hold);
    }

    #[test]
    fn an_update_leaves_when_the_next_task_might_be_long() {
        let cases = [
            (
                "a task of DEFER_BELOW",
                AfterUpdate {
                    finished_in: Some(DEFER_BELOW),
                    ..quick_run()
                },
            ),
            (
                "a failed, killed or never run task",
                AfterUpdate {
                    finished_in: None,
                    ..quick_run()
                },
            ),
            (
                "another function next",
                AfterUpdate {
                    next_same_function: false,
                    ..quick_run()
                },
            ),
        ];
        for (what, after) in cases {
            assert_eq!(Flush::after_update(after), Flush::InBackground, "{what}");
        }
    }

    #[test]
    fn at_most_flush_every_updates_are_held() {
        let below = AfterUpdate {
            unflushed: FLUSH_EVERY - 1,
            ..quick_run()
        };
        assert_eq!(Flush::after_update(below), Flush::Hold);
        let full = AfterUpdate {
            unflushed: FLUSH_EVERY,
            ..quick_run()
        };
        assert_eq!(Flush::after_update(full), Flush::InBackground);
    }

    #[test]
    fn halfway_through_its_batch_a_lent_runner_sends_and_turns_the_loop_whatever_it_would_hold() {
        let halfway = AfterUpdate {
            halfway: true,
            ..quick_run()
        };
        assert_eq!(Flush::after_update(halfway), Flush::Refill);
        // Not lent: the loop's own thread has the sockets, and the runner has no turn.
        let not_lent = AfterUpdate {
            lent: false,
            ..halfway
        };
        assert_eq!(Flush::after_update(not_lent), Flush::InBackground);
    }

    #[test]
    fn a_runner_not_lent_to_the_loop_holds_nothing() {
        let not_lent = AfterUpdate {
            lent: false,
            ..quick_run()
        };
        assert_eq!(Flush::after_update(not_lent), Flush::InBackground);
    }

    #[test]
    fn updates_are_written_from_the_runner_only_when_no_task_is_at_hand() {
        let last = AfterUpdate {
            next_same_function: false,
            more_at_hand: false,
            ..quick_run()
        };
        assert_eq!(Flush::after_update(last), Flush::Now);
        let long_then_more = AfterUpdate {
            finished_in: Some(Duration::from_secs(1)),
            ..quick_run()
        };
        assert_eq!(Flush::after_update(long_then_more), Flush::InBackground);
    }

    #[test]
    fn nothing_queued_is_nothing_to_flush() {
        for more_at_hand in [false, true] {
            let none = AfterUpdate {
                finished_in: None,
                next_same_function: false,
                unflushed: 0,
                lent: false,
                more_at_hand,
                halfway: false,
            };
            assert_eq!(Flush::after_update(none), Flush::Hold);
        }
        assert_eq!(Flush::at_batch_end(0), Flush::Hold);
        assert_eq!(Flush::at_batch_end(1), Flush::Now);
        assert_eq!(Flush::at_batch_end(FLUSH_EVERY), Flush::Now);
    }

    #[test]
    fn a_long_failure_text_is_cut_to_fit_a_message() {
        let id = SharedStr::from("7");
        let long = "x".repeat(100);
        let failed = Ended::failed(TaskFailureKind::Exception, long, TaskMetrics::default());
        let update = failed.into_update(&id, 5, 40);
        assert_eq!((update.task_id, update.state), (5, TaskState::Failed));
        let TaskOutcome::Failure { message, .. } = update.outcome else {
            panic!("{:?}", update.outcome)
        };
        assert!(message.len() <= 40, "{message}");
        let killed = Ended::killed("short", TaskMetrics::default());
        let update = killed.into_update(&id, 6, 40);
        assert!(
            matches!(&update.outcome, TaskOutcome::Failure { message, .. } if message == "short"),
            "{update:?}"
        );
    }

    /// Hands deferred updates over only when flushed, as a connection does; lends the
    /// runner to an environment of its own (a runner defers only while lent).
    struct Deferring {
        pending: Mutex<Vec<StatusUpdate>>,
        sent: Mutex<mpsc::Sender<StatusUpdate>>,
        flushes: Arc<AtomicUsize>,
        /// Messages sent (each one frame on a connection).
        frames: Arc<AtomicUsize>,
        lender: flint_rpc::RpcEnv,
    }

    impl StatusSender for Deferring {
        fn send_status(&self, message: &Message) -> Result<(), RpcError> {
            self.send_status_deferred(message)?;
            self.flush();
            Ok(())
        }

        fn send_status_deferred(&self, message: &Message) -> Result<(), RpcError> {
            let updates = message.status_updates();
            assert!(!updates.is_empty(), "not a status update: {message:?}");
            self.frames.fetch_add(1, Ordering::SeqCst);
            lock(&self.pending).extend_from_slice(updates);
            Ok(())
        }

        fn flush(&self) {
            let pending: Vec<StatusUpdate> = lock(&self.pending).drain(..).collect();
            if !pending.is_empty() {
                self.flushes.fetch_add(1, Ordering::SeqCst);
            }
            let sent = lock(&self.sent);
            for update in pending {
                let _ = sent.send(update);
            }
        }

        fn lend_transport(&self) -> Option<LoopLease> {
            Some(self.lender.handle().lend())
        }

        fn on_lent_flush(&self, hook: Box<dyn Fn() + Send + Sync>) -> Option<LentFlushHook> {
            Some(self.lender.handle().on_lent_flush(hook))
        }
    }

    /// The executor, its updates, and counters of flushes and of frames sent.
    type DeferringExecutor = (
        Executor,
        mpsc::Receiver<StatusUpdate>,
        Arc<AtomicUsize>,
        Arc<AtomicUsize>,
    );

    fn deferring_executor(cores: u32) -> DeferringExecutor {
        let lender = flint_rpc::RpcEnv::new(&flint_rpc::Conf::default()).unwrap();
        deferring_executor_with(cores, TaskRegistry::with_builtins(), lender)
    }

    /// [`deferring_executor`] with these task functions, lent to `lender`.
    fn deferring_executor_with(
        cores: u32,
        registry: TaskRegistry,
        lender: flint_rpc::RpcEnv,
    ) -> DeferringExecutor {
        let (tx, rx) = mpsc::channel();
        let flushes = Arc::new(AtomicUsize::new(0));
        let frames = Arc::new(AtomicUsize::new(0));
        let sender = Deferring {
            pending: Mutex::new(Vec::new()),
            sent: Mutex::new(tx),
            flushes: flushes.clone(),
            frames: frames.clone(),
            lender,
        };
        let mut config = ExecutorConfig::new("7", "localhost", cores);
        config.busy_poll = Duration::from_secs(1);
        let executor = Executor::new(config, registry, sender).unwrap();
        // After a first task the runner polls for the next, lent, for a second: the
        // tests' tasks come within it.
        let mut staged = Staged::with_capacity(1);
        executor.stage(&mut staged, Launch::from_description(task(0, "noop", b"")));
        executor.commit(&mut staged).unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap().task_id, 0);
        flushes.store(0, Ordering::SeqCst);
        frames.store(0, Ordering::SeqCst);
        (executor, rx, flushes, frames)
    }

    /// Names the thread each message it receives was handled on, and how many flushes
    /// of status updates there had been by then.
    #[derive(Clone, Default)]
    struct HandledOn {
        seen: Arc<Mutex<Vec<(String, usize)>>>,
        flushes: Arc<AtomicUsize>,
    }

    impl flint_rpc::Endpoint for HandledOn {
        fn receive(
            &mut self,
            _ctx: &mut flint_rpc::EndpointContext<'_>,
            _message: flint_rpc::Incoming<'_>,
        ) {
            let name = std::thread::current().name().unwrap_or("").to_owned();
            let flushes = self.flushes.load(Ordering::SeqCst);
            lock(&self.seen).push((name, flushes));
        }
    }

    /// Halfway through a batch of quick tasks the runner sends its held updates and then
    /// turns the loop itself: a frame that came in during the first half does not wait
    /// past it. The loop's own thread is usually parked then, leaving the sockets to the
    /// lent runner: the runner handles the frame, after the first half's updates were
    /// flushed. Without the turn it would wait until the loop's thread noticed that the
    /// runner stopped turning (about a millisecond), and be handled there, after the first
    /// half's flush, while the slow second half of the batch runs.
    ///
    /// The test's thread writes the frame once the batch has started (a task that wrote
    /// it would not be quick). An attempt tells nothing when the frame was not in yet at
    /// the first half's last task, when a task of the first half was not quick (the batch
    /// then does not refill), or when an awake loop thread took the frame before the
    /// first half's flush; up to five attempts are made.
    #[test]
    fn halfway_through_a_batch_the_runner_sends_its_updates_then_takes_what_came_in_itself() {
        use std::io::Write;
        use std::sync::atomic::AtomicBool;
        let lender = flint_rpc::RpcEnv::new(&flint_rpc::Conf::default()).unwrap();
        let lender_handle = lender.handle();
        let mut peer = std::net::TcpStream::connect(lender.address()).unwrap();
        peer.set_nodelay(true).unwrap();
        let frame = flint_testkit::frames::frame_bytes(
            &flint_wire::Route::OneWay {
                endpoint: "where".into(),
            },
            &Message::Custom {
                tag: 1,
                body: Bytes::new(),
            },
        );
        // One function for the whole first half, so that its updates are held. Each task
        // spins 8 us and keeps the longest any ran; the first says the batch started, the
        // last whether the frame had been written by then.
        let started = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicBool::new(false));
        let in_before_the_point = Arc::new(AtomicBool::new(false));
        let slowest = Arc::new(AtomicUsize::new(0));
        let mut registry = TaskRegistry::with_builtins();
        let quick = {
            let (started, written) = (started.clone(), written.clone());
            let (in_before_the_point, slowest) = (in_before_the_point.clone(), slowest.clone());
            move |_: &crate::task::TaskContext, input: &Bytes| {
                let begun = Instant::now();
                match &input[..] {
                    b"first" => started.store(true, Ordering::SeqCst),
                    b"last" => {
                        in_before_the_point.store(written.load(Ordering::SeqCst), Ordering::SeqCst)
                    }
                    _ => {}
                }
                while begun.elapsed() < Duration::from_micros(8) {
                    std::hint::spin_loop();
                }
                let ran = begun.elapsed().as_nanos() as usize;
                slowest.fetch_max(ran, Ordering::SeqCst);
                Ok(Bytes::new())
            }
        };
        registry.register("quick", quick).unwrap();
        let (executor, rx, flushes, _) = deferring_executor_with(1, registry, lender);
        let handled = HandledOn {
            seen: Arc::default(),
            flushes: flushes.clone(),
        };
        lender_handle.register("where", handled.clone()).unwrap();
        let half = FLUSH_EVERY;
        let mut task_id = 0;
        let (mut late, mut conclusive) = (0, 0);
        for attempt in 1..=5 {
            lock(&handled.seen).clear();
            for flag in [&started, &written, &in_before_the_point] {
                flag.store(false, Ordering::SeqCst);
            }
            flushes.store(0, Ordering::SeqCst);
            slowest.store(0, Ordering::SeqCst);
            // A batch of quick tasks, then as many of 2 ms.
            let mut staged = Staged::with_capacity(2 * half);
            for n in 0..2 * half {
                task_id += 1;
                let (function, input) = match n {
                    0 => ("quick", &b"first"[..]),
                    n if n + 1 < half => ("quick", &b""[..]),
                    n if n + 1 == half => ("quick", &b"last"[..]),
                    _ => ("sleep", &b"2"[..]),
                };
                executor.stage(
                    &mut staged,
                    Launch::from_description(task(task_id, function, input)),
                );
            }
            executor.commit(&mut staged).unwrap();
            let deadline = Instant::now() + WAIT;
            while !started.load(Ordering::SeqCst) {
                assert!(Instant::now() < deadline, "the batch never starts");
                std::hint::spin_loop();
            }
            peer.write_all(&frame).unwrap();
            written.store(true, Ordering::SeqCst);
            for _ in 0..2 * half {
                rx.recv_timeout(WAIT).expect("every task reports");
            }
            let seen = lock(&handled.seen).clone();
            assert_eq!(seen.len(), 1, "{seen:?}");
            let (thread, flushes_then) = &seen[0];
            if thread.starts_with("Executor task launch worker-") {
                assert_eq!(
                    *flushes_then, 1,
                    "the first half's updates leave before the turn, in one flush"
                );
                return;
            }
            let slowest = Duration::from_nanos(slowest.load(Ordering::SeqCst) as u64);
            let in_time = in_before_the_point.load(Ordering::SeqCst);
            eprintln!(
                "attempt {attempt}: the frame was handled on {thread:?} after {flushes_then} \
                 flush(es); in before the first half's last task: {in_time}; the slowest \
                 quick task ran {slowest:?}"
            );
            // With a margin: the runner's clock brackets a task a little wider.
            if in_time && slowest < DEFER_BELOW / 2 && *flushes_then > 0 {
                conclusive += 1;
                late += 1;
            } else if in_time && slowest < DEFER_BELOW / 2 {
                conclusive += 1;
            }
        }
        assert!(
            conclusive == 0 || late < conclusive,
            "the frame waited past the first half of the batch in every attempt that could tell"
        );
    }

    #[test]
    fn a_batch_refills_halfway_only_if_it_is_long_enough_and_quick_so_far() {
        let quick = Some(Duration::from_micros(1));
        // The tasks left after each task of a batch of `len`, all quick: where it refills.
        let points = |len: usize| {
            let mut point = RefillPoint::of_batch(len);
            (1..=len)
                .filter(|done| point.reached(quick, len - done))
                .collect::<Vec<_>>()
        };
        assert_eq!(points(1), Vec::<usize>::new());
        assert_eq!(points(FLUSH_EVERY - 1), Vec::<usize>::new());
        assert_eq!(points(FLUSH_EVERY), vec![FLUSH_EVERY / 2]);
        assert_eq!(points(FLUSH_EVERY + 1), vec![FLUSH_EVERY / 2 + 1]);
        assert_eq!(points(256), vec![128]);
        // A task that is not quick, or failed, before the point: no refill in that batch.
        for slow in [Some(DEFER_BELOW), None] {
            let mut point = RefillPoint::of_batch(256);
            assert!(!point.reached(quick, 255));
            assert!(!point.reached(slow, 254));
            assert!((0..254).rev().all(|left| !point.reached(quick, left)));
        }
    }

    #[test]
    fn a_batch_of_quick_tasks_is_reported_in_few_frames_and_flushes_and_none_is_left_behind() {
        let (executor, rx, flushes, frames) = deferring_executor(1);
        let mut staged = Staged::with_capacity(8);
        for task_id in 1..=200 {
            executor.stage(
                &mut staged,
                Launch::from_description(task(task_id, "noop", b"")),
            );
        }
        executor.commit(&mut staged).unwrap();
        let mut ids: Vec<u64> = (0..200)
            .map(|_| {
                rx.recv_timeout(WAIT)
                    .expect("every update is flushed")
                    .task_id
            })
            .collect();
        // One runner reports its tasks in the order they were launched.
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        ids.dedup();
        assert_eq!(ids.len(), 200);
        // One every FLUSH_EVERY updates, one at the batch's refill point, one at its end,
        // and one more if the batch came in two.
        let flushes = flushes.load(Ordering::SeqCst);
        assert!(
            (1..=200 / FLUSH_EVERY + 3).contains(&flushes),
            "{flushes} flushes for 200 quick tasks"
        );
        // The updates held between flushes leave together, in one StatusUpdates frame
        // (the lender's loop thread may send what is held at any moment too, if it sees
        // the runner stop turning: a loaded machine splits a few more frames).
        let frames = frames.load(Ordering::SeqCst);
        assert!(
            (1..200 / 4).contains(&frames),
            "{frames} frames for 200 quick tasks"
        );
        wait_until("the tasks to be forgotten", || {
            executor.inner.handoff.lock().running.is_empty()
        });
    }

    #[test]
    fn an_update_does_not_wait_behind_a_long_task() {
        let (executor, rx, _, _) = deferring_executor(1);
        let mut staged = Staged::with_capacity(8);
        executor.stage(&mut staged, Launch::from_description(task(1, "noop", b"")));
        executor.stage(&mut staged, Launch::from_description(task(2, "noop", b"")));
        executor.stage(
            &mut staged,
            Launch::from_description(task(3, "sleep", b"10000")),
        );
        executor.commit(&mut staged).unwrap();
        for task_id in [1, 2] {
            let update = rx
                .recv_timeout(Duration::from_secs(5))
                .expect("the quick tasks' updates leave before the long task ends");
            assert_eq!(update.task_id, task_id);
        }
        assert_eq!(executor.running_tasks(), [3]);
        assert!(executor.kill_task(3, false, "done"));
        assert_eq!(rx.recv_timeout(WAIT).unwrap().state, TaskState::Killed);
    }

    /// Refuses the first `refusals` sends as a full outbox would, then collects.
    struct FullFor {
        refusals: AtomicUsize,
        calls: AtomicUsize,
        sent: Mutex<mpsc::Sender<StatusUpdate>>,
    }

    impl StatusSender for FullFor {
        fn send_status(&self, message: &Message) -> Result<(), RpcError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let refuse = self
                .refusals
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if refuse {
                return Err(RpcError::OutboxFull {
                    peer: "127.0.0.1:1".parse().unwrap(),
                    queued: 64 << 20,
                    limit: 64 << 20,
                });
            }
            for update in message.status_updates() {
                let _ = lock(&self.sent).send(update.clone());
            }
            Ok(())
        }
    }

    fn full_for(refusals: usize) -> (Executor, Arc<FullFor>, mpsc::Receiver<StatusUpdate>) {
        let (tx, rx) = mpsc::channel();
        let sender = Arc::new(FullFor {
            refusals: AtomicUsize::new(refusals),
            calls: AtomicUsize::new(0),
            sent: Mutex::new(tx),
        });
        let config = ExecutorConfig::new("7", "localhost", 1);
        let executor =
            Executor::new(config, TaskRegistry::with_builtins(), sender.clone()).unwrap();
        (executor, sender, rx)
    }

    impl StatusSender for Arc<FullFor> {
        fn send_status(&self, message: &Message) -> Result<(), RpcError> {
            (**self).send_status(message)
        }
    }

    /// A status update is never given up while the executor runs: dropped, its task would
    /// stay running at the driver for good. One refused for a long stretch still arrives.
    #[test]
    fn a_status_update_refused_by_a_full_outbox_is_retried_until_it_goes() {
        let (executor, sender, rx) = full_for(60);
        executor.launch_task(task(1, "noop", b"")).unwrap();
        let update = rx.recv_timeout(WAIT).expect("the update arrives");
        assert_eq!(update.task_id, 1);
        assert_eq!(sender.calls.load(Ordering::SeqCst), 61);
        assert!(executor.stop());
    }

    /// ... and the retrying ends when the executor stops.
    #[test]
    fn a_stop_ends_the_retrying_of_a_status_update() {
        let (executor, sender, rx) = full_for(usize::MAX);
        executor.launch_task(task(1, "noop", b"")).unwrap();
        wait_until("a few refusals", || {
            sender.calls.load(Ordering::SeqCst) >= 3
        });
        assert!(
            executor.stop_within(WAIT),
            "the runner is not stuck retrying"
        );
        assert!(rx.try_recv().is_err());
    }

    /// Records the frames it is given, or refuses them as a full outbox while `full`.
    #[derive(Default)]
    struct Frames {
        full: std::sync::atomic::AtomicBool,
        sent: Mutex<Vec<Vec<u64>>>,
    }

    impl StatusSender for Arc<Frames> {
        fn send_status(&self, message: &Message) -> Result<(), RpcError> {
            if self.full.load(Ordering::SeqCst) {
                return Err(RpcError::OutboxFull {
                    peer: "127.0.0.1:1".parse().unwrap(),
                    queued: 1 << 20,
                    limit: 1 << 20,
                });
            }
            let ids = message.status_updates().iter().map(|u| u.task_id).collect();
            lock(&self.sent).push(ids);
            Ok(())
        }
    }

    /// What the transport's thread does for runners busy in a task: sends what each
    /// holds in one frame, unless the runner holds its lock (it is sending them) or the
    /// outbox is full (they stay, for the runner); a poisoned lock is no reason to leave
    /// them behind.
    #[test]
    fn the_loop_thread_sends_what_busy_runners_hold_in_one_frame() {
        let frames = Arc::new(Frames::default());
        let config = ExecutorConfig::new("7", "localhost", 1);
        let executor = Executor::without_runners(
            config,
            TaskRegistry::with_builtins(),
            Box::new(frames.clone()),
        );
        let inner = &executor.inner;
        let slot: HeldSlot = Arc::default();
        lock(&inner.held_by_runner).push(slot.clone());
        let hold = |task_ids: &[u64]| {
            let mut held = lock(&slot);
            for &task_id in task_ids {
                let update = Ended::killed("stop", TaskMetrics::default()).into_update(
                    &inner.executor_id,
                    task_id,
                    64,
                );
                held.hold(inner, update, Arc::new(TaskHandle::with_scratch(0)));
            }
        };
        let sent = || lock(&frames.sent).clone();

        hold(&[1, 2]);
        {
            let _runner_sending = lock(&slot);
            inner.send_held_of_busy_runners();
        }
        assert!(sent().is_empty(), "the runner holds its lock: left to it");

        frames.full.store(true, Ordering::SeqCst);
        inner.send_held_of_busy_runners();
        assert!(sent().is_empty());
        assert_eq!(lock(&slot).len(), 2, "a full outbox leaves them held");

        frames.full.store(false, Ordering::SeqCst);
        inner.send_held_of_busy_runners();
        assert_eq!(sent(), vec![vec![1, 2]], "one frame for both");
        assert_eq!(lock(&slot).len(), 0);

        hold(&[3]);
        let poisoner = slot.clone();
        let _ = std::thread::spawn(move || {
            let _held = poisoner.lock().unwrap();
            panic!("a runner panics holding its updates");
        })
        .join();
        assert!(slot.is_poisoned());
        inner.send_held_of_busy_runners();
        assert_eq!(sent(), vec![vec![1, 2], vec![3]]);
    }
}
