//! The executor: the running-task registry, the launches it stages and hands to its pool
//! of task runner threads, kills, heartbeat metrics and stopping.
//!
//! # The launch path
//!
//! Launching a task allocates nothing once the executor has warmed up, and costs the
//! runners and the event loop as few wake-ups as the work allows:
//!
//! - the executor's endpoint reads the archived `LaunchTask` in place and keeps only what
//!   a runner needs ([`Launch`], see [`crate::launch`]);
//! - each task gets a [`TaskHandle`] (kill flag, metrics, the buffer a small launch is
//!   copied to) from a free list and gives it back when it is forgotten; the running
//!   tasks are an `FxHashMap` that keeps its capacity;
//! - the endpoint stages the launches of one batch of the event loop
//!   ([`Executor::stage`]) and hands them over under one lock at the batch's end
//!   ([`Executor::commit`]), waking sleeping runners then, and only them
//!   ([`crate::handoff`]);
//! - the runners take them up and run them ([`crate::runner`]), and send their status
//!   updates, which a run of quick tasks sends together ([`crate::status`]).

use flint_rpc::timer::deadline_after;
use flint_rpc::LentFlushHook;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flint_wire::{
    ArchivedTaskDescription, Frame, SharedStr, TaskAccumUpdates, TaskDescription, TaskExtras,
    MAX_FAILURE_TEXT,
};
use rustc_hash::FxHashMap;
use tracing::{debug, info, warn};

use crate::block_store::BlockStore;
use crate::broadcast::BroadcastService;
use crate::config::ExecutorConfig;
use crate::handoff::Handoff;
use crate::launch::{Launch, COPY_LIMIT};
use crate::registry::TaskRegistry;
use crate::runner::runner;
use crate::shuffle::ShuffleService;
use crate::status::{HeldSlot, StatusSender, RESULT_OVERHEAD};
use crate::sync::Condvar;
use crate::task::TaskHandle;
use crate::task_clock::TaskClock;

/// How long [`Executor::stop`] waits for the task runners to finish.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// The reason given to running tasks when the executor stops.
pub const STOP_REASON: &str = "Executor is stopping";

/// Task handles kept for reuse, at most.
const SPARE_HANDLES: usize = 1024;

/// Room reserved up front in the task queues, the running-task map and the spare
/// handles.
pub(crate) const INITIAL_CAPACITY: usize = 256;

/// What can go wrong creating or using an [`Executor`].
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// An executor runs at least one task at a time.
    #[error("an executor needs at least 1 core, not 0")]
    NoCores,
    /// The runner threads could not be started.
    #[error("cannot start a task runner thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The executor has stopped and takes no more tasks.
    #[error("the executor has stopped")]
    Stopped,
}

/// A task waiting for a runner, or running.
pub(crate) struct Job {
    pub(crate) launch: Launch,
    pub(crate) handle: Arc<TaskHandle>,
    /// [`Inner::kills_of_all`] when the launch was staged.
    staged_after_kills: u64,
}

/// Launches read from one batch of the event loop, not yet handed to the runners, and
/// task handles ready for the next ones: what the executor's endpoint keeps between
/// [`Executor::stage`] and [`Executor::commit`].
pub(crate) struct Staged {
    pub(crate) jobs: Vec<Job>,
    spare: Vec<Arc<TaskHandle>>,
    /// The files, jars and properties of the last launch that had some, which the next
    /// launches of its task set share rather than decode again.
    last_extras: Option<Arc<TaskExtras>>,
}

impl Staged {
    /// Room for `capacity` launches and as many spare handles.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Staged {
            jobs: Vec::with_capacity(capacity),
            spare: Vec::with_capacity(capacity),
            last_extras: None,
        }
    }

    /// Whether launches wait for [`Executor::commit`].
    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// What the executor and its runners share under one lock.
pub(crate) struct State {
    pub(crate) queue: VecDeque<Job>,
    /// Tasks launched and not yet forgotten, ended ones included until their runner
    /// forgets them (see [`TaskHandle::is_ended`]).
    pub(crate) running: FxHashMap<u64, Arc<TaskHandle>>,
    /// Handles of forgotten tasks, reset, for the next launches.
    pub(crate) spare: Vec<Arc<TaskHandle>>,
    /// Runners that have not exited.
    pub(crate) live: usize,
    /// Cores not held by a task a runner took (runners of a multi-core executor): a
    /// queued task starts only when its `cpus` are free. The driver may queue tasks beyond
    /// free cores (executor.taskPrefetch), and with task.cpus above 1 there are runners
    /// enough to start them.
    pub(crate) free_cores: u32,
    /// Runners asleep while a queued task waited for cores: only they need a runner that
    /// frees cores to wake them (others are woken by the next launch).
    pub(crate) blocked: usize,
    pub(crate) shutdown: bool,
    /// The reason given to the latest [`Executor::kill_all_tasks`].
    kill_all_reason: String,
}

impl State {
    /// Removes the task from the running registry, unless a later launch replaced it,
    /// and keeps its handle for reuse when nobody else holds it.
    pub(crate) fn forget(&mut self, task_id: u64, mut handle: Arc<TaskHandle>) {
        if self
            .running
            .get(&task_id)
            .is_some_and(|current| Arc::ptr_eq(current, &handle))
        {
            self.running.remove(&task_id);
        }
        if self.spare.len() < SPARE_HANDLES {
            if let Some(unique) = Arc::get_mut(&mut handle) {
                unique.reset();
                self.spare.push(handle);
            }
        }
    }
}

/// State shared by the executor and its runner threads.
pub(crate) struct Inner {
    pub(crate) executor_id: SharedStr,
    hostname: String,
    pub(crate) cores: u32,
    /// The largest result sent in its status update.
    pub(crate) direct_limit: usize,
    /// `rpc.message.maxSize`, which also bounds what a launch's files, jars and
    /// properties take decoded.
    max_decoded: usize,
    /// The longest failure or kill text sent in a status update: a longer one is cut, so
    /// that the update always fits in a message.
    pub(crate) text_limit: usize,
    /// `driver.maxResultSize`.
    pub(crate) max_result_size: Option<u64>,
    /// What a runner times its tasks with (the TSC where it is usable), and heartbeats
    /// the run time so far of running tasks.
    pub(crate) clock: TaskClock,
    pub(crate) registry: TaskRegistry,
    pub(crate) blocks: Arc<BlockStore>,
    pub(crate) status: Box<dyn StatusSender>,
    /// The shared [`State`], and the runners' sleeps and wake-ups.
    pub(crate) handoff: Handoff<State>,
    /// How long a runner out of work looks for more before it sleeps.
    pub(crate) busy_poll: Duration,
    /// Signalled when a runner exits.
    pub(crate) exited: Condvar,
    pub(crate) stopped: AtomicBool,
    /// How many times [`Executor::kill_all_tasks`] ran (changed under the `state` lock). A
    /// launch staged before the latest one, and handed over after it, is killed as it is
    /// handed over: it came before the reason to kill everything (for a re-registering
    /// executor, from the driver that has since given up on it), in the same batch.
    kills_of_all: AtomicU64,
    /// What stage tasks use of shuffles; set once, before the first task.
    pub(crate) shuffle: OnceLock<Arc<ShuffleService>>,
    /// What tasks read broadcasts with; set once, before the first task.
    pub(crate) broadcasts: OnceLock<Arc<BroadcastService>>,
    /// The status updates each runner holds, for the event loop's thread to send while
    /// the runner is busy ([`crate::status::HeldUpdates`]).
    pub(crate) held_by_runner: Mutex<Vec<HeldSlot>>,
}

impl Inner {
    /// The state of an executor of `config.cores` (at least 1) whose runners have not
    /// started yet.
    fn new(config: ExecutorConfig, registry: TaskRegistry, status: Box<dyn StatusSender>) -> Inner {
        Inner {
            executor_id: SharedStr::from(config.executor_id),
            hostname: config.hostname,
            cores: config.cores,
            direct_limit: config.max_message_size.saturating_sub(RESULT_OVERHEAD),
            max_decoded: config.max_message_size,
            text_limit: (config.max_message_size / 2).min(MAX_FAILURE_TEXT),
            max_result_size: config.max_result_size,
            clock: TaskClock::start(),
            registry,
            blocks: Arc::new(BlockStore::new()),
            status,
            handoff: Handoff::new(State {
                queue: VecDeque::with_capacity(INITIAL_CAPACITY),
                running: FxHashMap::with_capacity_and_hasher(INITIAL_CAPACITY, Default::default()),
                spare: Vec::with_capacity(INITIAL_CAPACITY),
                live: 0,
                free_cores: config.cores,
                blocked: 0,
                shutdown: false,
                kill_all_reason: String::new(),
            }),
            busy_poll: config.busy_poll,
            exited: Condvar::new(),
            stopped: AtomicBool::new(false),
            kills_of_all: AtomicU64::new(0),
            shuffle: OnceLock::new(),
            broadcasts: OnceLock::new(),
            held_by_runner: Mutex::new(Vec::with_capacity(config.cores as usize)),
        }
    }

    /// Nanoseconds from the executor's epoch to `now`.
    pub(crate) fn since_epoch(&self, now: quanta::Instant) -> u64 {
        self.clock.since_epoch(now)
    }
}

/// Locks a std mutex, taking a poisoned one as it is.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs tasks: the seeds' `Executor`. It keeps the running tasks by id (each with its
/// kill flag and metrics), queues launched tasks to a pool of exactly `cores` runner
/// threads named "Executor task launch worker-{n}", and each runner sends its task's
/// status update (FINISHED, FAILED or KILLED) when the task ends. Results too large for a
/// message go to the [`BlockStore`].
///
/// ```
/// use std::sync::mpsc;
/// use std::sync::Mutex;
/// use flint_executor::{Executor, ExecutorConfig, StatusSender, TaskDescription, TaskRegistry};
/// use flint_wire::{Message, TaskPayload, TaskState};
///
/// struct Collect(Mutex<mpsc::Sender<Message>>);
/// impl StatusSender for Collect {
///     fn send_status(&self, message: &Message) -> Result<(), flint_rpc::RpcError> {
///         let _ = self.0.lock().unwrap().send(message.clone());
///         Ok(())
///     }
/// }
///
/// let (tx, rx) = mpsc::channel();
/// let config = ExecutorConfig::new("exec-1", "localhost", 2);
/// let executor = Executor::new(config, TaskRegistry::with_builtins(), Collect(Mutex::new(tx)))?;
/// executor.launch_task(TaskDescription {
///     task_id: 1,
///     attempt_number: 0,
///     executor_id: "exec-1".into(),
///     name: "task 0.0 in stage 0.0 (TID 1)".into(),
///     index: 0,
///     partition_id: 0,
///     extras: None,
///     cpus: 1,
///     serialized_task: TaskPayload::encode("echo", b"hello")?,
/// })?;
/// let Message::StatusUpdate(update) = rx.recv_timeout(std::time::Duration::from_secs(10))? else {
///     unreachable!()
/// };
/// assert_eq!((update.task_id, update.state), (1, TaskState::Finished));
/// executor.stop();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Executor {
    pub(crate) inner: Arc<Inner>,
    runners: Mutex<Vec<JoinHandle<()>>>,
    /// The transport's hook that sends what busy runners hold; removed first when the
    /// executor is dropped, so that the transport's thread never holds the last
    /// reference to `inner` (whose drop may end that very thread's environment).
    lent_flush: Mutex<Option<LentFlushHook>>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("executor_id", &self.inner.executor_id)
            .field("hostname", &self.inner.hostname)
            .field("cores", &self.inner.cores)
            .finish()
    }
}

impl Executor {
    /// Starts an executor with `cores` runner threads; its status updates go to
    /// `status`. Logs "Starting executor ID {id} on host {host}".
    pub fn new(
        config: ExecutorConfig,
        registry: TaskRegistry,
        status: impl StatusSender,
    ) -> Result<Executor, ExecutorError> {
        if config.cores == 0 {
            return Err(ExecutorError::NoCores);
        }
        info!(
            "Starting executor ID {} on host {}",
            config.executor_id, config.hostname
        );
        let cores = config.cores;
        let executor = Executor::without_runners(config, registry, Box::new(status));
        for n in 0..cores {
            let inner = executor.inner.clone();
            inner.handoff.lock().live += 1;
            let spawned = std::thread::Builder::new()
                .name(format!("Executor task launch worker-{n}"))
                .spawn(move || runner(inner));
            match spawned {
                Ok(thread) => lock(&executor.runners).push(thread),
                Err(e) => {
                    executor.inner.handoff.lock().live -= 1;
                    executor.stop();
                    return Err(ExecutorError::Spawn(e));
                }
            }
        }
        Ok(executor)
    }

    /// An executor whose runner threads are still to start (`config.cores` at least 1).
    pub(crate) fn without_runners(
        config: ExecutorConfig,
        registry: TaskRegistry,
        status: Box<dyn StatusSender>,
    ) -> Executor {
        let cores = config.cores as usize;
        let inner = Arc::new(Inner::new(config, registry, status));
        let weak = Arc::downgrade(&inner);
        let lent_flush = inner.status.on_lent_flush(Box::new(move || {
            if let Some(inner) = weak.upgrade() {
                inner.send_held_of_busy_runners();
            }
        }));
        Executor {
            inner,
            runners: Mutex::new(Vec::with_capacity(cores)),
            lent_flush: Mutex::new(lent_flush),
        }
    }

    /// Gives the executor its shuffle service, which tasks of jobs' stages need: the
    /// executor of [`crate::run_executor`] has one, an executor made alone does not
    /// until given one (a stage task then fails). Only the first call counts.
    pub fn set_shuffle_service(&self, service: Arc<ShuffleService>) {
        let _ = self.inner.shuffle.set(service);
    }

    /// Gives the executor its broadcast service, which `TaskContext::broadcast` reads
    /// through: the executor of [`crate::run_executor`] has one. Only the first call
    /// counts.
    pub fn set_broadcast_service(&self, service: Arc<BroadcastService>) {
        let _ = self.inner.broadcasts.set(service);
    }

    /// The broadcast service, if it has one.
    pub fn broadcast_service(&self) -> Option<&Arc<BroadcastService>> {
        self.inner.broadcasts.get()
    }

    /// The shuffle service, if it has one.
    pub fn shuffle_service(&self) -> Option<&Arc<ShuffleService>> {
        self.inner.shuffle.get()
    }

    /// The executor's id.
    pub fn executor_id(&self) -> &str {
        &self.inner.executor_id
    }

    /// The executor's id, shared (cloning it allocates nothing).
    pub fn shared_id(&self) -> &SharedStr {
        &self.inner.executor_id
    }

    /// The host it runs on.
    pub fn hostname(&self) -> &str {
        &self.inner.hostname
    }

    /// Its runner threads.
    pub fn cores(&self) -> u32 {
        self.inner.cores
    }

    /// The largest result sent in a status update; larger ones go to the block store.
    pub fn direct_result_limit(&self) -> usize {
        self.inner.direct_limit
    }

    /// The most memory a launch's files, jars and properties may take decoded
    /// (`rpc.message.maxSize`); a launch whose would take more fails.
    pub(crate) fn max_decoded(&self) -> usize {
        self.inner.max_decoded
    }

    /// The block store holding results too large for a message.
    pub fn block_store(&self) -> &Arc<BlockStore> {
        &self.inner.blocks
    }

    /// Registers the task as running and queues it for a runner thread, waking one if
    /// they all sleep.
    pub fn launch_task(&self, task: TaskDescription) -> Result<(), ExecutorError> {
        let mut staged = Staged::with_capacity(1);
        staged.spare.extend(self.inner.handoff.lock().spare.pop());
        self.stage(&mut staged, Launch::from_description(task));
        self.hand_over(&mut staged, false)
    }

    /// Prepares a launch given as a description (not read off the wire) for
    /// [`Executor::commit`]: gives it a task handle, a spare one when there is one.
    pub(crate) fn stage(&self, staged: &mut Staged, launch: Launch) {
        let handle = Self::spare_handle(staged);
        self.stage_with(staged, launch, handle);
    }

    /// Prepares a launch read off the wire for [`Executor::commit`], as
    /// [`Executor::stage`] does, and copies a small one straight from its frame into the
    /// handle's buffer ([`Launch::from_archived_into`]). Allocates nothing once warmed
    /// up.
    pub(crate) fn stage_archived(
        &self,
        staged: &mut Staged,
        frame: &Frame,
        task: &ArchivedTaskDescription,
    ) {
        let mut handle = Self::spare_handle(staged);
        let max_decoded = self.max_decoded();
        let launch = match Arc::get_mut(&mut handle) {
            Some(unique) => Launch::from_archived_into(
                frame,
                task,
                max_decoded,
                &mut unique.scratch,
                &mut staged.last_extras,
            ),
            None => Launch::from_archived(frame, task, max_decoded, &mut staged.last_extras),
        };
        self.stage_with(staged, launch, handle);
    }

    fn spare_handle(staged: &mut Staged) -> Arc<TaskHandle> {
        staged
            .spare
            .pop()
            .unwrap_or_else(|| Arc::new(TaskHandle::with_scratch(COPY_LIMIT)))
    }

    fn stage_with(&self, staged: &mut Staged, launch: Launch, handle: Arc<TaskHandle>) {
        let staged_after_kills = self.inner.kills_of_all.load(Ordering::Acquire);
        staged.jobs.push(Job {
            launch,
            handle,
            staged_after_kills,
        });
    }

    /// Registers the staged launches as running and queues them, under one lock, takes
    /// back spare handles for the next launches, and wakes as many sleeping runners as
    /// there are queued tasks (no system call when none sleeps). Fails, dropping the
    /// launches, once the executor has stopped.
    pub(crate) fn commit(&self, staged: &mut Staged) -> Result<(), ExecutorError> {
        self.hand_over(staged, true)
    }

    /// [`Executor::commit`], taking back spare handles only when `refill`.
    fn hand_over(&self, staged: &mut Staged, refill: bool) -> Result<(), ExecutorError> {
        if staged.jobs.is_empty() {
            return Ok(());
        }
        let inner = &*self.inner;
        let mut state = inner.handoff.lock();
        if state.shutdown || inner.stopped.load(Ordering::Acquire) {
            drop(state);
            for job in staged.jobs.drain(..) {
                let task_id = job.launch.task_id;
                warn!(
                    "Received LaunchTask command for task {task_id} but the executor has \
                     stopped; dropped"
                );
            }
            return Err(ExecutorError::Stopped);
        }
        let shared = &mut *state;
        let kills_of_all = inner.kills_of_all.load(Ordering::Acquire);
        for job in staged.jobs.drain(..) {
            let task_id = job.launch.task_id;
            if job.staged_after_kills != kills_of_all {
                job.handle.kill(&shared.kill_all_reason);
            }
            let previous = shared.running.insert(task_id, job.handle.clone());
            if let Some(previous) = previous.filter(|previous| !previous.is_ended()) {
                // The driver never reuses a TID; should it, the older attempt is forgotten.
                warn!(
                    "task (TID {task_id}) launched again while it runs; the first launch is \
                     killed"
                );
                previous.kill("launched again");
            }
            shared.queue.push_back(job);
        }
        if refill {
            let room = staged.spare.capacity() - staged.spare.len();
            let keep = shared.spare.len().saturating_sub(room);
            staged.spare.extend(shared.spare.drain(keep..));
        }
        let queued = shared.queue.len();
        inner.handoff.hand_over(state, queued);
        Ok(())
    }

    /// Asks the task to stop (its kill flag): a running task ends KILLED when it notices,
    /// a queued one without running. Kills are cooperative; `interrupt_thread` is
    /// accepted for the protocol's sake (a Rust thread cannot be interrupted). Returns
    /// whether the task was running here.
    pub fn kill_task(&self, task_id: u64, interrupt_thread: bool, reason: &str) -> bool {
        // Killed under the lock, which a runner holds from looking at the queue until it
        // waits: it sees the kill, or is counted asleep and woken below.
        let state = self.inner.handoff.lock();
        let handle = state
            .running
            .get(&task_id)
            .filter(|handle| !handle.is_ended());
        if let Some(handle) = handle {
            handle.kill(reason);
        }
        let killed = handle.is_some();
        let queued = handle.is_some_and(|handle| handle.started_at().is_none());
        drop(state);
        if killed {
            info!(
                interrupt_thread,
                "Executor is trying to kill task (TID {task_id}), reason: {reason}"
            );
            // A queued task waiting for cores ends now that it is killed: a sleeping
            // runner takes it.
            if queued {
                self.inner.handoff.wake_one_if_sleeping();
            }
        } else {
            debug!("kill of task (TID {task_id}), which is not running here");
        }
        killed
    }

    /// Asks every task launched and not yet ended to stop, as [`Executor::kill_task`]
    /// does for one. Returns how many were asked; launches read but not yet handed to
    /// the runners (staged in the same batch of the event loop) are not counted, and are
    /// killed as they are handed over.
    pub fn kill_all_tasks(&self, reason: &str) -> usize {
        // Killed under the lock, as in kill_task.
        let mut state = self.inner.handoff.lock();
        state.kill_all_reason = reason.to_owned();
        self.inner.kills_of_all.fetch_add(1, Ordering::AcqRel);
        let mut killed = 0;
        for handle in state.running.values().filter(|handle| !handle.is_ended()) {
            handle.kill(reason);
            killed += 1;
        }
        drop(state);
        if killed > 0 {
            self.inner.handoff.wake_all_if_sleeping();
        }
        killed
    }

    /// Ids of the tasks launched and not yet ended, sorted.
    pub fn running_tasks(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .inner
            .handoff
            .lock()
            .running
            .iter()
            .filter(|(_, handle)| !handle.is_ended())
            .map(|(&task_id, _)| task_id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The metrics and accumulator values so far of every task whose function has
    /// started and not ended: a heartbeat's accumulator updates.
    pub fn heartbeat_updates(&self) -> Vec<TaskAccumUpdates> {
        let now = self.inner.since_epoch(self.inner.clock.now());
        let state = self.inner.handoff.lock();
        let mut updates: Vec<TaskAccumUpdates> = state
            .running
            .iter()
            .filter(|(_, handle)| !handle.is_ended())
            .filter_map(|(&task_id, handle)| {
                let started = handle.started_at()?;
                Some(TaskAccumUpdates {
                    task_id,
                    metrics: handle.metrics(now.saturating_sub(started)),
                    // Partial: the driver shows them, and merges only the final ones.
                    accumulators: handle.accumulators().snapshot(),
                })
            })
            .collect();
        drop(state);
        updates.sort_unstable_by_key(|u| u.task_id);
        updates
    }

    /// Whether [`Executor::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::Acquire)
    }

    /// Stops the executor: no more tasks are taken, queued ones are dropped, running
    /// ones are asked to stop, and the runner threads are joined, waiting at most
    /// [`STOP_GRACE`]. Tasks ending from now on send no status update. Idempotent: a
    /// later call returns at once. Returns whether every runner thread has ended.
    pub fn stop(&self) -> bool {
        self.stop_within(STOP_GRACE)
    }

    /// [`Executor::stop`], waiting at most `grace` for the runner threads; a runner still
    /// in a task that ignores its kill flag is left behind (it exits after the task).
    pub fn stop_within(&self, grace: Duration) -> bool {
        let inner = &*self.inner;
        if inner.stopped.swap(true, Ordering::AcqRel) {
            return inner.handoff.lock().live == 0;
        }
        let dropped: Vec<Job> = {
            let mut state = inner.handoff.lock();
            state.shutdown = true;
            let dropped: Vec<Job> = state.queue.drain(..).collect();
            for job in &dropped {
                let task_id = job.launch.task_id;
                if state
                    .running
                    .get(&task_id)
                    .is_some_and(|current| Arc::ptr_eq(current, &job.handle))
                {
                    state.running.remove(&task_id);
                }
            }
            for handle in state.running.values() {
                handle.kill(STOP_REASON);
            }
            dropped
        };
        inner.handoff.wake_all();
        drop(dropped);
        let deadline = deadline_after(Instant::now(), grace);
        let mut state = inner.handoff.lock();
        while state.live > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = inner
                .exited
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let stuck = state.live;
        drop(state);
        let mut runners = lock(&self.runners);
        for runner in runners.drain(..) {
            if runner.is_finished() {
                let _ = runner.join();
            }
        }
        if stuck > 0 {
            warn!(
                "{stuck} task runner threads did not stop within {grace:?}; leaving them to \
                 end with their tasks"
            );
        }
        stuck == 0
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // Waits for a run of the hook under way, which holds `inner` for its length.
        drop(lock(&self.lent_flush).take());
        self.stop();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::testing::{archived, executor, launch_frame, task, wait_until, Collect, WAIT};
    use bytes::Bytes;
    use flint_wire::{StatusUpdate, TaskFailureKind, TaskOutcome, TaskState};
    use std::sync::mpsc;

    use crate::task::TaskContext;

    #[test]
    fn zero_cores_is_an_error() {
        let (tx, _rx) = mpsc::channel();
        let error = Executor::new(
            ExecutorConfig::new("1", "h", 0),
            TaskRegistry::new(),
            Collect(Mutex::new(tx)),
        )
        .unwrap_err();
        assert!(matches!(error, ExecutorError::NoCores), "{error}");
    }

    #[test]
    fn a_queued_task_killed_before_it_starts_never_runs() {
        let ran = Arc::new(AtomicBool::new(false));
        let mut registry = TaskRegistry::with_builtins();
        let flag = ran.clone();
        registry
            .register("mark", move |_: &TaskContext, _: &Bytes| {
                flag.store(true, Ordering::SeqCst);
                Ok(Bytes::new())
            })
            .unwrap();
        let (executor, rx) = executor(1, 1 << 20, registry);
        executor.launch_task(task(1, "sleep", b"10000")).unwrap();
        executor.launch_task(task(2, "mark", b"")).unwrap();
        assert_eq!(executor.running_tasks(), [1, 2]);
        assert!(executor.kill_task(2, false, "not needed"));
        assert!(executor.kill_task(1, true, "stage cancelled"));
        assert!(!executor.kill_task(99, false, "unknown"));
        let mut updates: Vec<StatusUpdate> =
            (0..2).map(|_| rx.recv_timeout(WAIT).unwrap()).collect();
        updates.sort_by_key(|u| u.task_id);
        for (update, reason) in updates.iter().zip(["stage cancelled", "not needed"]) {
            assert_eq!(update.state, TaskState::Killed);
            let TaskOutcome::Failure {
                kind,
                message,
                counts_towards_failures,
                ..
            } = &update.outcome
            else {
                panic!("{update:?}")
            };
            assert_eq!(*kind, TaskFailureKind::TaskKilled);
            assert_eq!(message, reason);
            assert!(!counts_towards_failures);
        }
        assert!(!ran.load(Ordering::SeqCst), "the killed queued task ran");
        wait_until("the registry to empty", || {
            executor.running_tasks().is_empty()
        });
    }

    #[test]
    fn heartbeat_updates_cover_started_tasks() {
        let (executor, rx) = executor(1, 1 << 20, TaskRegistry::with_builtins());
        executor.launch_task(task(1, "sleep", b"10000")).unwrap();
        executor.launch_task(task(2, "noop", b"")).unwrap();
        wait_until("task 1 to start", || {
            !executor.heartbeat_updates().is_empty()
        });
        std::thread::sleep(Duration::from_millis(20));
        let updates = executor.heartbeat_updates();
        assert_eq!(
            updates.len(),
            1,
            "the queued task has not started: {updates:?}"
        );
        assert_eq!(updates[0].task_id, 1);
        assert!(updates[0].metrics.run_time_ns >= 20_000_000);
        executor.kill_task(1, false, "done");
        let ids: Vec<u64> = (0..2)
            .map(|_| rx.recv_timeout(WAIT).unwrap().task_id)
            .collect();
        assert_eq!(ids, [1, 2]);
    }

    #[test]
    fn stop_is_bounded_idempotent_and_sends_nothing_more() {
        let release = Arc::new(AtomicBool::new(false));
        let mut registry = TaskRegistry::with_builtins();
        let gate = release.clone();
        registry
            .register("stubborn", move |_: &TaskContext, _: &Bytes| {
                // Ignores its kill flag until the test lets it go (bounded).
                let deadline = Instant::now() + WAIT;
                while !gate.load(Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(Bytes::new())
            })
            .unwrap();
        let (executor, rx) = executor(2, 1 << 20, registry);
        executor.launch_task(task(1, "stubborn", b"")).unwrap();
        executor.launch_task(task(2, "sleep", b"10000")).unwrap();
        executor.launch_task(task(3, "noop", b"")).unwrap();
        executor.launch_task(task(4, "noop", b"")).unwrap();
        wait_until("both runners busy", || {
            executor.heartbeat_updates().len() == 2
        });
        let started = Instant::now();
        assert!(
            !executor.stop_within(Duration::from_millis(200)),
            "one runner is stuck"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!executor.stop(), "idempotent: returns at once, still stuck");
        assert!(matches!(
            executor.launch_task(task(5, "noop", b"")),
            Err(ExecutorError::Stopped)
        ));
        release.store(true, Ordering::SeqCst);
        wait_until("the stuck runner to exit", || executor.stop());
        assert!(
            executor.stop_within(Duration::MAX),
            "an unbounded grace is a wait, not an overflow"
        );
        assert!(rx.try_recv().is_err(), "no status update after stop");
    }

    #[test]
    fn an_ended_task_is_no_longer_running_and_its_handle_is_reused() {
        let (executor, rx) = executor(1, 1 << 20, TaskRegistry::with_builtins());
        let mut staged = Staged::with_capacity(8);
        executor.stage(&mut staged, Launch::from_description(task(1, "noop", b"")));
        let first = Arc::as_ptr(&staged.jobs[0].handle);
        executor.commit(&mut staged).unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap().task_id, 1);
        assert!(executor.running_tasks().is_empty());
        assert!(!executor.kill_task(1, false, "too late"));
        assert!(executor.heartbeat_updates().is_empty());
        wait_until("the handle to be spare", || {
            !executor.inner.handoff.lock().spare.is_empty()
        });
        // A commit takes spare handles back for the next launches.
        executor.stage(&mut staged, Launch::from_description(task(2, "noop", b"")));
        executor.commit(&mut staged).unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap().task_id, 2);
        executor.stage(&mut staged, Launch::from_description(task(3, "noop", b"")));
        assert_eq!(Arc::as_ptr(&staged.jobs[0].handle), first);
        executor.commit(&mut staged).unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap().task_id, 3);
    }

    #[test]
    fn a_launch_staged_before_every_task_is_killed_is_killed_too() {
        let (executor, rx) = executor(1, 1 << 20, TaskRegistry::with_builtins());
        let mut staged = Staged::with_capacity(4);
        let frame = launch_frame(task(1, "echo", b"stale"));
        executor.stage_archived(&mut staged, &frame, archived(&frame));
        assert_eq!(executor.kill_all_tasks("the driver gave up on it"), 0);
        // Read after the kill: runs.
        let frame = launch_frame(task(2, "echo", b"fresh"));
        executor.stage_archived(&mut staged, &frame, archived(&frame));
        executor.commit(&mut staged).unwrap();
        let mut updates = [
            rx.recv_timeout(WAIT).unwrap(),
            rx.recv_timeout(WAIT).unwrap(),
        ];
        updates.sort_by_key(|u| u.task_id);
        assert_eq!(updates[0].state, TaskState::Killed, "{:?}", updates[0]);
        assert!(
            matches!(&updates[0].outcome, TaskOutcome::Failure { message, .. } if message == "the driver gave up on it"),
            "{:?}",
            updates[0]
        );
        assert_eq!(updates[1].state, TaskState::Finished, "{:?}", updates[1]);
    }
}
