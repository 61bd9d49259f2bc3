//! The executor: a pool of task runner threads, the registry of running tasks, and what a
//! runner does with a task from its launch to its status update.
//!
//! # The launch path
//!
//! Launching a task allocates nothing once the executor has warmed up, and costs the
//! runners and the event loop as few wake-ups as the work allows:
//!
//! - the executor's endpoint reads the archived `LaunchTask` in place and keeps only what
//!   a runner needs ([`Launch`]): the task's numbers, its name and its serialized task
//!   (files, jars and properties only when it has some). A small launch is copied out of
//!   the frame into its task handle's reused buffer ([`COPY_LIMIT`]); a large one stays a
//!   view of the frame;
//! - each task gets a [`TaskHandle`] (kill flag, metrics, that buffer) from a free list
//!   and gives it back when it is forgotten; the running tasks are an `FxHashMap` that
//!   keeps its capacity;
//! - the endpoint stages the launches of one batch of the event loop
//!   ([`Executor::stage`]) and hands them over under one lock at the batch's end
//!   ([`Executor::commit`]), waking sleeping runners then, and only them;
//! - the runner of a one-core executor takes every queued task at once; a runner among
//!   several takes one at a time, so that tasks queued behind a long one are left to
//!   the other runners. A task that ends is marked ended at once (a kill or a heartbeat
//!   no longer sees it) and forgotten when its runner next takes work;
//! - status updates go out with `send_deferred`: a runner hands them to the event loop
//!   ([`StatusSender::flush`]) when its batch is done (before it takes more work or
//!   sleeps), every [`FLUSH_EVERY`] updates, and whenever the next task might be long (a
//!   different function, or a task that ran [`DEFER_BELOW`] or more), so that an update
//!   rarely waits behind a long task. When it does (a quick task followed by a long one
//!   of the same function, in one batch), the event loop's thread writes it within a few
//!   milliseconds, which it does for a thread lent to it; so a runner defers only while
//!   lent to the loop. The executor's endpoint also flushes at the end of its
//!   batches and after each heartbeat, so that its own frames on the same connection
//!   never wait for a runner.
//!
//! A runner that runs out of work looks for more for `executor.busyPoll` (50us by
//! default), yielding the CPU between looks, and then sleeps on a condition variable.
//! From the first look until it sleeps it is lent to the RPC environment's event loop
//! ([`StatusSender::lend_transport`]): each look turns the loop, so that the next
//! launch is read off the socket, handed over and taken up by the runner itself, with
//! no hand-off from the loop thread, which leaves the sockets to the runner while it
//! keeps looking (and takes them back within about a millisecond once the runner is
//! busy with a task). The executor's own endpoint handlers then run on the runner; none
//! of them blocks.
//! Measured against handing over from the loop thread (`flint bench`, four alternating
//! runs): a one-task job 19.3-21.2 against 23.5-29.4 us, tasks without pipelining
//! +17 %.
//! Waking a sleeping thread costs tens of microseconds on a virtual machine; without
//! launch pipelining every task pays it, and with it every batch. Measured on two cores
//! shared by a driver and two one-core executors, together with the event loops' own
//! `rpc.io.busyPoll`: a one-task job 3.4x faster, tasks without pipelining 1.9x, with
//! pipelining 1.1-1.2x (see PERFORMANCE.md). Pure spinning without yielding measured
//! worse: it keeps the event loops off the core they need.

use flint_rpc::timer::deadline_after;
use std::collections::VecDeque;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use flint_rpc::{EndpointRef, LoopLease, RpcError};
use flint_wire::{
    bytes_to_string, check_decoded_size, cut_text, ArchivedDependency, ArchivedTaskDescription,
    BlockId, DecodedSize, Dependency, Frame, Message, Property, SharedStr, StatusUpdate,
    TaskAccumUpdates, TaskDescription, TaskFailureKind, TaskMetrics, TaskName, TaskOutcome,
    TaskPayload, TaskState, WireError, MAX_FAILURE_TEXT,
};
use rustc_hash::FxHashMap;
use tracing::{debug, error, info, warn};

use crate::block_store::BlockStore;
use crate::config::ExecutorConfig;
use crate::registry::{TaskFn, TaskRegistry};
use crate::task::{TaskContext, TaskError, TaskExtras, TaskHandle};

/// Room left in a message for everything but a direct result's value: a result travels
/// in its status update when `value.len() + RESULT_OVERHEAD <= rpc.message.maxSize`.
pub const RESULT_OVERHEAD: usize = 64 * 1024;

/// How long [`Executor::stop`] waits for the task runners to finish.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// The reason given to running tasks when the executor stops.
pub const STOP_REASON: &str = "Executor is stopping";

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

/// Task handles kept for reuse, at most.
const SPARE_HANDLES: usize = 1024;

/// A launch whose name and serialized task together are at most this long is copied out
/// of the frame it came in (into its handle's reused buffer) rather than kept as views of
/// it: views of a frame keep the event loop's whole receive buffer alive, and while
/// queued tasks hold it the loop must allocate a new one for every few frames it reads.
/// Larger launches stay views (no copy), and cost the buffers they pin.
const COPY_LIMIT: usize = 512;

/// Room reserved up front in the task queues, the running-task map and the spare
/// handles.
const INITIAL_CAPACITY: usize = 256;

/// Where task runners send their tasks' status updates: the driver's endpoint, or a
/// test's collector.
pub trait StatusSender: Send + Sync + 'static {
    /// Sends one [`Message::StatusUpdate`], one-way. [`RpcError::OutboxFull`] makes the
    /// runner retry a little later; any other error gives the update up.
    fn send_status(&self, message: &Message) -> Result<(), RpcError>;

    /// Queues one status update that may wait for the next [`StatusSender::flush`]; a
    /// runner flushes before it waits for work, so nothing queued is left behind. By
    /// default the same as [`StatusSender::send_status`].
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
}

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

/// A task's display name as a runner keeps it, made into text only when it is printed.
enum LaunchName {
    /// A view of the launch frame (the archived string, already checked to be UTF-8).
    Wire(Bytes),
    /// The name a [`TaskDescription`] gave.
    Given(TaskName),
}

impl fmt::Display for LaunchName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchName::Wire(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => f.write_str(text),
                Err(_) => f.write_str(&String::from_utf8_lossy(bytes)),
            },
            LaunchName::Given(name) => name.fmt(f),
        }
    }
}

/// What a runner needs of one launched task: its numbers, its name and its serialized
/// task (views of the launch frame when it came from the driver: nothing is copied), and
/// its files, jars and properties only when it has some.
pub(crate) struct Launch {
    task_id: u64,
    attempt_number: u32,
    index: u32,
    partition_id: u32,
    cpus: u32,
    name: LaunchName,
    serialized_task: Bytes,
    /// Refused if they would take more than `max_decoded` bytes decoded: the task fails.
    extras: Result<Option<Arc<TaskExtras>>, Box<WireError>>,
}

impl Launch {
    /// Reads an archived task description in place; allocates only for a task with files,
    /// jars or properties, and for those at most `max_decoded` bytes.
    pub(crate) fn from_archived(
        frame: &Frame,
        task: &ArchivedTaskDescription,
        max_decoded: usize,
    ) -> Launch {
        let extras = if task.added_files.is_empty()
            && task.added_jars.is_empty()
            && task.properties.is_empty()
        {
            Ok(None)
        } else if let Err(refused) = check_decoded_size(
            "its files, jars and properties",
            task.added_files
                .decoded_size()
                .saturating_add(task.added_jars.decoded_size())
                .saturating_add(task.properties.decoded_size()),
            max_decoded,
        ) {
            Err(Box::new(refused))
        } else {
            let dependency = |d: &ArchivedDependency| Dependency {
                name: d.name.to_string(),
                timestamp: d.timestamp.to_native(),
            };
            Ok(TaskExtras::of(
                task.added_files.iter().map(dependency).collect(),
                task.added_jars.iter().map(dependency).collect(),
                task.properties
                    .iter()
                    .map(|p| Property {
                        key: p.key.to_string(),
                        value: p.value.to_string(),
                    })
                    .collect(),
            ))
        };
        Launch {
            task_id: task.task_id.to_native(),
            attempt_number: task.attempt_number.to_native(),
            index: task.index.to_native(),
            partition_id: task.partition_id.to_native(),
            cpus: task.cpus.to_native(),
            name: LaunchName::Wire(frame.bytes_of(task.name.as_bytes())),
            serialized_task: frame.bytes_of(task.serialized_task.as_slice()),
            extras,
        }
    }

    fn from_description(task: TaskDescription) -> Launch {
        Launch {
            task_id: task.task_id,
            attempt_number: task.attempt_number,
            index: task.index,
            partition_id: task.partition_id,
            cpus: task.cpus,
            name: LaunchName::Given(task.name),
            serialized_task: task.serialized_task,
            extras: Ok(TaskExtras::of(
                task.added_files,
                task.added_jars,
                task.properties,
            )),
        }
    }

    /// Copies a small launch's name and serialized task out of the frame they are views
    /// of, into `scratch` (which keeps its memory from task to task), so that the frame's
    /// receive buffer is free again once the event loop is done with it.
    fn copy_out_of_frame(&mut self, scratch: &mut BytesMut) {
        let LaunchName::Wire(name) = &self.name else {
            return;
        };
        let task_len = self.serialized_task.len();
        let len = task_len + name.len();
        if len > COPY_LIMIT {
            return;
        }
        // Takes back the memory of the handle's previous task when nothing holds it.
        scratch.reserve(len);
        scratch.extend_from_slice(&self.serialized_task);
        scratch.extend_from_slice(name);
        let copy = scratch.split().freeze();
        self.serialized_task = copy.slice(..task_len);
        self.name = LaunchName::Wire(copy.slice(task_len..));
    }

    /// The serialized task's length byte and function name, if it has them.
    fn function_prefix(&self) -> Option<&[u8]> {
        let len = usize::from(*self.serialized_task.first()?);
        self.serialized_task.get(..=len)
    }

    /// Whether both run the same task function.
    fn same_function(&self, other: &Launch) -> bool {
        self.function_prefix()
            .is_some_and(|prefix| other.function_prefix() == Some(prefix))
    }
}

/// A task waiting for a runner, or running.
struct Job {
    launch: Launch,
    handle: Arc<TaskHandle>,
    /// [`Inner::kills_of_all`] when the launch was staged.
    staged_after_kills: u64,
}

/// Launches read from one batch of the event loop, not yet handed to the runners, and
/// task handles ready for the next ones: what the executor's endpoint keeps between
/// [`Executor::stage`] and [`Executor::commit`].
pub(crate) struct Staged {
    jobs: Vec<Job>,
    spare: Vec<Arc<TaskHandle>>,
}

impl Staged {
    /// Room for `capacity` launches and as many spare handles.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Staged {
            jobs: Vec::with_capacity(capacity),
            spare: Vec::with_capacity(capacity),
        }
    }

    /// Whether launches wait for [`Executor::commit`].
    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// What the executor and its runners share under one lock.
struct State {
    queue: VecDeque<Job>,
    /// Tasks launched and not yet forgotten, ended ones included until their runner
    /// forgets them (see [`TaskHandle::is_ended`]).
    running: FxHashMap<u64, Arc<TaskHandle>>,
    /// Handles of forgotten tasks, reset, for the next launches.
    spare: Vec<Arc<TaskHandle>>,
    /// Runners that have not exited.
    live: usize,
    /// Cores not held by a task a runner took (runners of a multi-core executor): a
    /// queued task starts only when its `cpus` are free. The driver may queue tasks beyond
    /// free cores (executor.taskPrefetch), and with task.cpus above 1 there are runners
    /// enough to start them.
    free_cores: u32,
    /// Runners asleep while a queued task waited for cores: only they need a runner that
    /// frees cores to wake them (others are woken by the next launch).
    blocked: usize,
    shutdown: bool,
    /// The reason given to the latest [`Executor::kill_all_tasks`].
    kill_all_reason: String,
}

impl State {
    /// Removes the task from the running registry, unless a later launch replaced it,
    /// and keeps its handle for reuse when nobody else holds it.
    fn forget(&mut self, task_id: u64, mut handle: Arc<TaskHandle>) {
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
struct Inner {
    executor_id: SharedStr,
    hostname: String,
    cores: u32,
    /// The largest result sent in its status update.
    direct_limit: usize,
    /// `rpc.message.maxSize`, which also bounds what a launch's files, jars and
    /// properties take decoded.
    max_decoded: usize,
    /// The longest failure or kill text sent in a status update: a longer one is cut, so
    /// that the update always fits in a message.
    text_limit: usize,
    /// `driver.maxResultSize`.
    max_result_size: Option<u64>,
    epoch: Instant,
    registry: TaskRegistry,
    blocks: Arc<BlockStore>,
    status: Box<dyn StatusSender>,
    state: Mutex<State>,
    /// Runners asleep on `work` (changed under the `state` lock).
    sleeping: AtomicUsize,
    /// How long a runner out of work looks for more before it sleeps.
    busy_poll: Duration,
    /// The length of the task queue as last left under the `state` lock: what a
    /// busy-polling runner looks at without taking the lock.
    queued: AtomicUsize,
    /// Signalled when work is queued or the pool shuts down.
    work: Condvar,
    /// Signalled when a runner exits.
    exited: Condvar,
    stopped: AtomicBool,
    /// How many times [`Executor::kill_all_tasks`] ran (changed under the `state` lock). A
    /// launch staged before the latest one, and handed over after it, is killed as it is
    /// handed over: it came before the reason to kill everything (for a re-registering
    /// executor, from the driver that has since given up on it), in the same batch.
    kills_of_all: AtomicU64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
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
///     added_files: vec![],
///     added_jars: vec![],
///     properties: vec![],
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
    inner: Arc<Inner>,
    runners: Mutex<Vec<JoinHandle<()>>>,
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
        let inner = Arc::new(Inner {
            executor_id: SharedStr::from(config.executor_id),
            hostname: config.hostname,
            cores: config.cores,
            direct_limit: config.max_message_size.saturating_sub(RESULT_OVERHEAD),
            max_decoded: config.max_message_size,
            text_limit: (config.max_message_size / 2).min(MAX_FAILURE_TEXT),
            max_result_size: config.max_result_size,
            epoch: Instant::now(),
            registry,
            blocks: Arc::new(BlockStore::new()),
            status: Box::new(status),
            state: Mutex::new(State {
                queue: VecDeque::with_capacity(INITIAL_CAPACITY),
                running: FxHashMap::with_capacity_and_hasher(INITIAL_CAPACITY, Default::default()),
                spare: Vec::with_capacity(INITIAL_CAPACITY),
                live: 0,
                free_cores: config.cores,
                blocked: 0,
                shutdown: false,
                kill_all_reason: String::new(),
            }),
            sleeping: AtomicUsize::new(0),
            busy_poll: config.busy_poll,
            queued: AtomicUsize::new(0),
            work: Condvar::new(),
            exited: Condvar::new(),
            stopped: AtomicBool::new(false),
            kills_of_all: AtomicU64::new(0),
        });
        let executor = Executor {
            inner,
            runners: Mutex::new(Vec::with_capacity(config.cores as usize)),
        };
        for n in 0..config.cores {
            let inner = executor.inner.clone();
            lock(&inner.state).live += 1;
            let spawned = std::thread::Builder::new()
                .name(format!("Executor task launch worker-{n}"))
                .spawn(move || runner(inner));
            match spawned {
                Ok(thread) => lock(&executor.runners).push(thread),
                Err(e) => {
                    lock(&executor.inner.state).live -= 1;
                    executor.stop();
                    return Err(ExecutorError::Spawn(e));
                }
            }
        }
        Ok(executor)
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
        staged.spare.extend(lock(&self.inner.state).spare.pop());
        self.stage(&mut staged, Launch::from_description(task));
        self.hand_over(&mut staged, false)
    }

    /// Prepares a launch for [`Executor::commit`]: gives it a task handle (a spare one
    /// when there is one) and copies a small launch out of its frame into the handle's
    /// buffer. Allocates nothing once warmed up.
    pub(crate) fn stage(&self, staged: &mut Staged, mut launch: Launch) {
        let mut handle = staged
            .spare
            .pop()
            .unwrap_or_else(|| Arc::new(TaskHandle::with_scratch(COPY_LIMIT)));
        if let Some(unique) = Arc::get_mut(&mut handle) {
            launch.copy_out_of_frame(&mut unique.scratch);
        }
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
        let mut state = lock(&inner.state);
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
        inner.queued.store(queued, Ordering::Release);
        drop(state);
        // A runner counts itself sleeping under the lock before it waits: one that found
        // the queue empty is counted here, and a notification sent between its unlock
        // and its wait still reaches it.
        let sleeping = inner.sleeping.load(Ordering::Acquire);
        for _ in 0..sleeping.min(queued) {
            inner.work.notify_one();
        }
        Ok(())
    }

    /// Asks the task to stop (its kill flag): a running task ends KILLED when it notices,
    /// a queued one without running. Kills are cooperative; `interrupt_thread` is
    /// accepted for the protocol's sake (a Rust thread cannot be interrupted). Returns
    /// whether the task was running here.
    pub fn kill_task(&self, task_id: u64, interrupt_thread: bool, reason: &str) -> bool {
        // Killed under the lock, which a runner holds from looking at the queue until it
        // waits: it sees the kill, or is counted asleep and woken below.
        let state = lock(&self.inner.state);
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
                self.wake_one_sleeper();
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
        let mut state = lock(&self.inner.state);
        state.kill_all_reason = reason.to_owned();
        self.inner.kills_of_all.fetch_add(1, Ordering::AcqRel);
        let mut killed = 0;
        for handle in state.running.values().filter(|handle| !handle.is_ended()) {
            handle.kill(reason);
            killed += 1;
        }
        drop(state);
        if killed > 0 && self.inner.sleeping.load(Ordering::Acquire) > 0 {
            self.inner.work.notify_all();
        }
        killed
    }

    fn wake_one_sleeper(&self) {
        if self.inner.sleeping.load(Ordering::Acquire) > 0 {
            self.inner.work.notify_one();
        }
    }

    /// Ids of the tasks launched and not yet ended, sorted.
    pub fn running_tasks(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = lock(&self.inner.state)
            .running
            .iter()
            .filter(|(_, handle)| !handle.is_ended())
            .map(|(&task_id, _)| task_id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// The metrics so far of every task whose function has started and not ended: a
    /// heartbeat's accumulator updates.
    pub fn heartbeat_updates(&self) -> Vec<TaskAccumUpdates> {
        let now = self.inner.since_epoch(Instant::now());
        let state = lock(&self.inner.state);
        let mut updates: Vec<TaskAccumUpdates> = state
            .running
            .iter()
            .filter(|(_, handle)| !handle.is_ended())
            .filter_map(|(&task_id, handle)| {
                let started = handle.started_at()?;
                Some(TaskAccumUpdates {
                    task_id,
                    metrics: handle.metrics(now.saturating_sub(started)),
                    accumulators: Vec::new(),
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
            return lock(&inner.state).live == 0;
        }
        let dropped: Vec<Job> = {
            let mut state = lock(&inner.state);
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
        inner.work.notify_all();
        drop(dropped);
        let deadline = deadline_after(Instant::now(), grace);
        let mut state = lock(&inner.state);
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
        self.stop();
    }
}

/// Decrements the pool's live count when a runner exits, however it exits.
struct Exiting<'a>(&'a Inner);

impl Drop for Exiting<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).live -= 1;
        self.0.exited.notify_all();
    }
}

/// The task function a runner looked up last, so that a run of tasks of one function
/// looks it up once.
struct FunctionCache<'r> {
    name: &'r str,
    function: Option<&'r TaskFn>,
}

impl<'r> FunctionCache<'r> {
    fn get(&mut self, registry: &'r TaskRegistry, name: &str) -> Option<&'r TaskFn> {
        match self.function {
            Some(function) if self.name == name => Some(function),
            _ => {
                let (name, function) = registry.entry(name)?;
                self.name = name;
                self.function = Some(function);
                Some(function)
            }
        }
    }
}

/// A runner thread: takes queued tasks until the pool shuts down. The only runner of a
/// one-core executor takes every queued task at once; a runner among several takes one
/// at a time, so that tasks queued behind a long one are left to the other runners.
fn runner(inner: Arc<Inner>) {
    let _exiting = Exiting(&inner);
    let take_all = inner.cores == 1;
    let mut functions = FunctionCache {
        name: "",
        function: None,
    };
    let mut batch: VecDeque<Job> = VecDeque::with_capacity(INITIAL_CAPACITY);
    // Tasks of the batch that ended, forgotten when the runner takes its next batch.
    let mut ended: Vec<(u64, Arc<TaskHandle>)> = Vec::with_capacity(INITIAL_CAPACITY);
    // Status updates sent deferred and not flushed yet; zero whenever the runner waits.
    let mut unflushed = 0usize;
    // Held from when the runner first looks for work until it sleeps.
    let mut lease: Option<LoopLease> = None;
    // The cores the task this runner took holds (not with take_all).
    let mut held_cores = 0u32;
    while inner.next_batch(
        &mut ended,
        &mut batch,
        take_all,
        &mut lease,
        &mut held_cores,
    ) {
        // A runner woken from its sleep holds no lease; with more than one task at hand
        // it takes one now (it would when it next looks for work), so that its updates
        // may wait for each other (see `defer` below).
        if lease.is_none() && batch.len() > 1 && !inner.busy_poll.is_zero() {
            lease = inner.status.lend_transport();
        }
        // When a task of the batch ends, the next one starts: one clock read serves both.
        let mut clock = Instant::now();
        while let Some(Job { launch, handle, .. }) = batch.pop_front() {
            let task_id = launch.task_id;
            if inner.stopped.load(Ordering::Acquire) {
                debug!("task (TID {task_id}) dropped: the executor stops");
                handle.mark_ended();
                ended.push((task_id, handle));
                continue;
            }
            let (outcome, quick, handle) =
                inner.execute(&launch, handle, &mut functions, &mut clock);
            handle.mark_ended();
            let same_function = batch
                .front()
                .is_some_and(|next| launch.same_function(&next.launch));
            // Its views of the handle's scratch buffer go before the handle is reused.
            drop(launch);
            ended.push((task_id, handle));
            if inner.stopped.load(Ordering::Acquire) {
                debug!("task (TID {task_id}) ended while the executor stops; no status update");
            } else {
                let mut outcome = outcome;
                if let TaskOutcome::Failure { message, .. } = &mut outcome.outcome {
                    if message.len() > inner.text_limit {
                        *message = cut_text(message, inner.text_limit);
                    }
                }
                let message = Message::StatusUpdate(StatusUpdate {
                    executor_id: inner.executor_id.clone(),
                    task_id,
                    state: outcome.state,
                    outcome: outcome.outcome,
                });
                inner.send_status(task_id, &message);
                unflushed += 1;
            }
            // Only a quick task followed by one of the same function leaves its update
            // queued: the next one is likely quick too. The last task of a batch always
            // flushes. Should the next one be long after all, the event loop's thread
            // writes the update meanwhile, but only while this runner is lent to the loop
            // (see flint_rpc's turns): a runner that is not (executor.busyPoll=0) flushes
            // at once.
            let defer = quick && same_function && unflushed < FLUSH_EVERY && lease.is_some();
            if !defer && unflushed > 0 {
                // With tasks still at hand the event loop writes the updates while they
                // run; when none is left they are written at once, from here.
                if batch.is_empty() && inner.queued.load(Ordering::Acquire) == 0 {
                    inner.status.flush();
                } else {
                    inner.status.flush_in_background();
                }
                unflushed = 0;
            }
        }
        // A stop that came in the middle of the batch skipped its flushes: what the tasks
        // that ended before it sent must not stay behind.
        if unflushed > 0 {
            inner.status.flush();
            unflushed = 0;
        }
    }
}

/// How a task ended.
struct Ended {
    state: TaskState,
    outcome: TaskOutcome,
}

impl Ended {
    fn failed(kind: TaskFailureKind, message: String, metrics: TaskMetrics) -> Self {
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

    fn killed(reason: &str, metrics: TaskMetrics) -> Self {
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
}

impl Inner {
    fn since_epoch(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Forgets the ended tasks and fills `batch` (empty) with the next queued tasks:
    /// all of them when `take_all`, else one; sleeps until there are some. False once the
    /// pool shuts down.
    fn next_batch(
        &self,
        ended: &mut Vec<(u64, Arc<TaskHandle>)>,
        batch: &mut VecDeque<Job>,
        take_all: bool,
        lease: &mut Option<LoopLease>,
        held_cores: &mut u32,
    ) -> bool {
        debug_assert!(batch.is_empty());
        let mut state = lock(&self.state);
        for (task_id, handle) in ended.drain(..) {
            state.forget(task_id, handle);
        }
        state.free_cores += std::mem::take(held_cores);
        let mut polled = false;
        loop {
            if take_all && !state.queue.is_empty() {
                // The runner's empty queue, with its capacity, becomes the shared one.
                std::mem::swap(&mut state.queue, batch);
                self.queued.store(0, Ordering::Release);
                return true;
            }
            // The next task in order if its cores are free, else a killed one from anywhere
            // in the queue (it needs none).
            let free = state.free_cores;
            let taken = match state.queue.front().map(|job| self.cores_needed(job)) {
                Some(need) if need <= free => Some((0, need)),
                Some(_) => state
                    .queue
                    .iter()
                    .position(|job| job.handle.is_killed())
                    .map(|position| (position, 0)),
                None => None,
            };
            if let Some((position, need)) = taken {
                let job = state.queue.remove(position).expect("a queued job");
                state.free_cores -= need;
                *held_cores = need;
                batch.push_back(job);
                self.queued.store(state.queue.len(), Ordering::Release);
                // A runner that takes a task wakes one that sleeps for want of cores if what
                // is left can start now: each such runner wakes the next. (With one cpu a
                // task none ever does, and this costs nothing.)
                let more = state.blocked > 0
                    && state
                        .queue
                        .front()
                        .is_some_and(|next| self.cores_needed(next) <= state.free_cores);
                drop(state);
                if more {
                    self.work.notify_one();
                }
                return true;
            }
            if state.shutdown {
                return false;
            }
            // A queued task waiting for cores comes only with a runner's end: no need to
            // look for it by turning the transport.
            if !polled && !self.busy_poll.is_zero() && state.queue.is_empty() {
                // executor.busyPoll: a task that comes within it starts without this
                // runner going to sleep and being woken.
                polled = true;
                drop(state);
                if lease.is_none() {
                    *lease = self.status.lend_transport();
                }
                let until = Instant::now() + self.busy_poll;
                while self.queued.load(Ordering::Acquire) == 0
                    && !self.stopped.load(Ordering::Acquire)
                    && Instant::now() < until
                {
                    // Turning the transport's loop may bring the next task right here.
                    if !lease.as_ref().is_some_and(LoopLease::turn) {
                        std::thread::yield_now();
                    }
                }
                state = lock(&self.state);
                continue;
            }
            // A sleeping runner leaves the sockets to the event loop's thread.
            *lease = None;
            let blocked = !state.queue.is_empty();
            state.blocked += usize::from(blocked);
            self.sleeping.fetch_add(1, Ordering::AcqRel);
            state = self.work.wait(state).unwrap_or_else(|e| e.into_inner());
            self.sleeping.fetch_sub(1, Ordering::AcqRel);
            state.blocked -= usize::from(blocked);
        }
    }

    /// The cores a queued task holds while it runs: its cpus, within the executor's; none
    /// for a task already killed, which ends at once and must not wait for cores.
    fn cores_needed(&self, job: &Job) -> u32 {
        if job.handle.is_killed() {
            0
        } else {
            job.launch.cpus.clamp(1, self.cores)
        }
    }

    /// Sends a status update deferred (the runner flushes), retrying while the
    /// connection's outbox is full, until the executor stops.
    fn send_status(&self, task_id: u64, message: &Message) {
        let mut started: Option<Instant> = None;
        let mut warned = false;
        let mut pause = Duration::from_micros(100);
        loop {
            match self.status.send_status_deferred(message) {
                Ok(()) => return,
                Err(RpcError::OutboxFull { .. }) if !self.stopped.load(Ordering::Acquire) => {
                    let waited = started.get_or_insert_with(Instant::now).elapsed();
                    if !warned && waited >= STATUS_RETRY_WARNING {
                        warned = true;
                        warn!(
                            "The status update of task (TID {task_id}) has waited {}s for \
                             room in the connection to the driver; still trying",
                            waited.as_secs()
                        );
                    }
                    // What this runner queued must leave for the outbox to drain.
                    self.status.flush();
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Err(e) => {
                    error!("Failed to send the status update of task (TID {task_id}): {e}");
                    // Nobody will fetch a result it stored.
                    self.blocks.remove(BlockId::TaskResult { task_id });
                    return;
                }
            }
        }
    }

    /// Runs one task; returns how it ended, whether it finished quickly (under
    /// [`DEFER_BELOW`]), and its handle (lent to the task's context, not shared).
    ///
    /// `clock` is when the runner took the task up, and is moved on to when it ended:
    /// the runner's tasks run back to back, so one clock read ends one task and starts
    /// the next.
    fn execute<'r>(
        &'r self,
        launch: &Launch,
        handle: Arc<TaskHandle>,
        functions: &mut FunctionCache<'r>,
        clock: &mut Instant,
    ) -> (Ended, bool, Arc<TaskHandle>) {
        let start = *clock;
        if let Some(reason) = handle.kill_reason() {
            *clock = Instant::now();
            info!(
                "Executor killed {} before it started, reason: {reason}",
                launch.name
            );
            let ended = Ended::killed(reason, TaskMetrics::default());
            return (ended, false, handle);
        }
        debug!("Running {}", launch.name);
        let parsed = match &launch.extras {
            Ok(_) => TaskPayload::parse(&launch.serialized_task).map_err(|e| e.to_string()),
            Err(refused) => Err(refused.to_string()),
        };
        let payload = match parsed {
            Ok(payload) => payload,
            Err(e) => {
                *clock = Instant::now();
                let message = format!("Could not deserialize {}: {e}", launch.name);
                error!("{message}");
                let ended = Ended::failed(
                    TaskFailureKind::Undeserializable,
                    message,
                    TaskMetrics::default(),
                );
                return (ended, false, handle);
            }
        };
        let Some(function) = functions.get(&self.registry, payload.function) else {
            *clock = Instant::now();
            let message = format!(
                "No task function named {:?} is registered on executor {} (it has: {})",
                payload.function,
                self.executor_id,
                self.registry.names().join(", ")
            );
            error!("Could not deserialize {}: {message}", launch.name);
            let ended = Ended::failed(
                TaskFailureKind::Undeserializable,
                message,
                TaskMetrics::default(),
            );
            return (ended, false, handle);
        };
        let input: Bytes = launch.serialized_task.slice(1 + payload.function.len()..);
        let function_name = payload.function;
        let run_start = Instant::now();
        let deserialize_ns = run_start.duration_since(start).as_nanos() as u64;
        handle.mark_started(self.since_epoch(run_start), deserialize_ns);
        let ctx = TaskContext {
            task_id: launch.task_id,
            attempt_number: launch.attempt_number,
            partition_id: launch.partition_id,
            index: launch.index,
            cpus: launch.cpus,
            executor_id: self.executor_id.clone(),
            extras: launch.extras.as_ref().ok().cloned().flatten(),
            handle,
        };
        let result = catch_unwind(AssertUnwindSafe(|| function(&ctx, &input)));
        *clock = Instant::now();
        let run_time = clock.saturating_duration_since(run_start);
        let handle = ctx.handle;
        let quick = run_time < DEFER_BELOW;
        let mut metrics = handle.metrics(run_time.as_nanos() as u64);
        // As the seeds' runner: a task asked to stop ends KILLED, whatever it returned.
        if let Some(reason) = handle.kill_reason() {
            info!("Executor killed {}, reason: {reason}", launch.name);
            let ended = Ended::killed(reason, metrics);
            return (ended, false, handle);
        }
        match result {
            Ok(Ok(value)) => (self.finished(launch, value, metrics), quick, handle),
            Ok(Err(TaskError::Killed { reason })) => {
                info!("Executor killed {}, reason: {reason}", launch.name);
                (Ended::killed(&reason, metrics), false, handle)
            }
            Ok(Err(TaskError::Failed(message))) => {
                error!("Exception in {}: {message}", launch.name);
                let ended = Ended::failed(TaskFailureKind::Exception, message, metrics);
                (ended, false, handle)
            }
            Err(panic) => {
                let text = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("(a panic payload that is not text)");
                let message = format!("task function {function_name:?} panicked: {text}");
                error!("Exception in {}: {message}", launch.name);
                metrics.result_size = 0;
                let ended = Ended::failed(TaskFailureKind::Exception, message, metrics);
                (ended, false, handle)
            }
        }
    }

    fn finished(&self, launch: &Launch, value: Bytes, mut metrics: TaskMetrics) -> Ended {
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
            }
        } else if size <= self.direct_limit {
            debug!(
                "Finished {}. {size} bytes result sent to driver",
                launch.name
            );
            TaskOutcome::Direct {
                value,
                metrics,
                accumulators: Vec::new(),
            }
        } else {
            let block_id = BlockId::TaskResult {
                task_id: launch.task_id,
            };
            self.blocks.put(block_id, value);
            info!(
                "Finished {}. {size} bytes result sent via BlockManager)",
                launch.name
            );
            TaskOutcome::Indirect {
                block_id,
                size: size as u64,
                metrics,
            }
        };
        Ended {
            state: TaskState::Finished,
            outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    struct Collect(Mutex<mpsc::Sender<StatusUpdate>>);

    impl StatusSender for Collect {
        fn send_status(&self, message: &Message) -> Result<(), RpcError> {
            let Message::StatusUpdate(update) = message else {
                panic!("not a status update: {message:?}");
            };
            let _ = lock(&self.0).send(update.clone());
            Ok(())
        }
    }

    const WAIT: Duration = Duration::from_secs(10);

    fn executor(
        cores: u32,
        max_message_size: usize,
        registry: TaskRegistry,
    ) -> (Executor, mpsc::Receiver<StatusUpdate>) {
        let (tx, rx) = mpsc::channel();
        let config = ExecutorConfig {
            max_message_size,
            ..ExecutorConfig::new("7", "localhost", cores)
        };
        let executor = Executor::new(config, registry, Collect(Mutex::new(tx))).unwrap();
        (executor, rx)
    }

    fn task(task_id: u64, function: &str, input: &[u8]) -> TaskDescription {
        TaskDescription {
            task_id,
            attempt_number: 0,
            executor_id: "7".into(),
            name: format!("task {task_id}.0 in stage 0.0 (TID {task_id})").into(),
            index: task_id as u32,
            partition_id: task_id as u32,
            added_files: vec![],
            added_jars: vec![],
            properties: vec![],
            cpus: 1,
            serialized_task: TaskPayload::encode(function, input).unwrap(),
        }
    }

    fn wait_until(what: &str, check: impl Fn() -> bool) {
        let deadline = Instant::now() + WAIT;
        while !check() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

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

    /// With launch pipelining the driver may queue tasks beyond free cores; a task of two
    /// cpus still starts only when two cores are free.
    #[test]
    fn queued_tasks_start_only_when_their_cpus_are_free() {
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicBool::new(false));
        let mut registry = TaskRegistry::with_builtins();
        {
            // "count:N:MS" waits, at most MS milliseconds, until N count tasks have run at
            // once.
            let (running, most) = (running.clone(), most.clone());
            registry
                .register("count", move |_: &TaskContext, input: &Bytes| {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let input = std::str::from_utf8(input).unwrap();
                    let (meet, millis) = input.split_once(':').unwrap();
                    let meet: usize = meet.parse().unwrap();
                    let deadline = Instant::now() + Duration::from_millis(millis.parse().unwrap());
                    while most.load(Ordering::SeqCst) < meet && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(Bytes::new())
                })
                .unwrap();
            // "gate" runs until the test opens it (at most 10 s).
            let open = open.clone();
            registry
                .register("gate", move |_: &TaskContext, _: &Bytes| {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while !open.load(Ordering::SeqCst) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok(Bytes::new())
                })
                .unwrap();
        }
        let (executor, rx) = executor(4, 1 << 20, registry);
        for task_id in 1..=4 {
            let two_cpus = TaskDescription {
                cpus: 2,
                // All four would meet if they could run at once; two can.
                ..task(task_id, "count", b"4:300")
            };
            executor.launch_task(two_cpus).unwrap();
        }
        for _ in 1..=4 {
            rx.recv_timeout(WAIT).unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 2, "tasks running at once");
        wait_until("every core is free again", || {
            lock(&executor.inner.state).free_cores == 4
        });

        // A queued task that is killed ends at once, without waiting for cores.
        executor
            .launch_task(TaskDescription {
                cpus: 4,
                ..task(5, "sleep", b"2000")
            })
            .unwrap();
        wait_until("the sleep to start", || {
            lock(&executor.inner.state).free_cores == 0
        });
        executor
            .launch_task(TaskDescription {
                cpus: 4,
                ..task(6, "count", b"1:0")
            })
            .unwrap();
        // Every other runner asleep (the one the launch woke back asleep too, given a
        // moment): the kill must wake one.
        wait_until("the other runners sleep", || {
            executor.inner.sleeping.load(Ordering::Acquire) == 3
        });
        std::thread::sleep(Duration::from_millis(200));
        let killed_at = Instant::now();
        assert!(executor.kill_task(6, false, "not needed"));
        let update = rx.recv_timeout(WAIT).unwrap();
        assert_eq!((update.task_id, update.state), (6, TaskState::Killed));
        assert!(killed_at.elapsed() < Duration::from_millis(1500));
        assert!(executor.kill_task(5, false, "done"));
        assert_eq!(rx.recv_timeout(WAIT).unwrap().task_id, 5);

        // Four 1-cpu tasks queued behind a 4-cpu one all start when it ends: each runner
        // that takes one wakes the next.
        wait_until("every core is free again", || {
            lock(&executor.inner.state).free_cores == 4
        });
        most.store(0, Ordering::SeqCst);
        let wide = TaskDescription {
            cpus: 4,
            ..task(7, "gate", b"")
        };
        executor.launch_task(wide).unwrap();
        for task_id in 8..=11 {
            executor
                .launch_task(task(task_id, "count", b"4:5000"))
                .unwrap();
        }
        open.store(true, Ordering::SeqCst);
        for _ in 7..=11 {
            rx.recv_timeout(WAIT).unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 4, "1-cpu tasks at once");
    }

    #[test]
    fn runner_threads_are_named_and_counted() {
        let mut registry = TaskRegistry::new();
        registry
            .register("thread-name", |_: &TaskContext, _: &Bytes| {
                Ok(Bytes::from(
                    std::thread::current().name().unwrap_or("").to_owned(),
                ))
            })
            .unwrap();
        let (executor, rx) = executor(3, 1 << 20, registry);
        executor.launch_task(task(1, "thread-name", b"")).unwrap();
        let update = rx.recv_timeout(WAIT).unwrap();
        let TaskOutcome::Direct { value, .. } = update.outcome else {
            panic!("{update:?}")
        };
        let name = std::str::from_utf8(&value).unwrap();
        assert!(name.starts_with("Executor task launch worker-"), "{name}");
        assert_eq!(lock(&executor.inner.state).live, 3);
        assert!(executor.stop());
        assert_eq!(lock(&executor.inner.state).live, 0);
    }

    #[test]
    fn results_above_the_limit_go_to_the_block_store() {
        let limit = 1 << 20;
        let (executor, rx) = executor(1, limit, TaskRegistry::with_builtins());
        assert_eq!(executor.direct_result_limit(), limit - RESULT_OVERHEAD);
        let fits = (limit - RESULT_OVERHEAD).to_string();
        let too_large = (limit - RESULT_OVERHEAD + 1).to_string();
        executor
            .launch_task(task(1, "large-result", fits.as_bytes()))
            .unwrap();
        executor
            .launch_task(task(2, "large-result", too_large.as_bytes()))
            .unwrap();
        let first = rx.recv_timeout(WAIT).unwrap();
        assert_eq!(first.state, TaskState::Finished);
        let TaskOutcome::Direct { value, metrics, .. } = first.outcome else {
            panic!("{first:?}")
        };
        assert_eq!(value.len(), limit - RESULT_OVERHEAD);
        assert_eq!(metrics.result_size, value.len() as u64);
        let second = rx.recv_timeout(WAIT).unwrap();
        let block_id = BlockId::TaskResult { task_id: 2 };
        assert_eq!(second.state, TaskState::Finished);
        let TaskOutcome::Indirect {
            block_id: id,
            size,
            metrics,
        } = second.outcome
        else {
            panic!("{second:?}")
        };
        assert_eq!((id, size), (block_id, (limit - RESULT_OVERHEAD + 1) as u64));
        assert_eq!(metrics.result_size, size);
        let stored = executor.block_store().get(block_id).unwrap();
        assert_eq!(stored.len() as u64, size);
        assert!(stored
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8));
    }

    #[test]
    fn failures_panics_and_unknown_functions() {
        let mut registry = TaskRegistry::with_builtins();
        registry
            .register(
                "panics",
                |_: &TaskContext, _: &Bytes| -> Result<Bytes, TaskError> {
                    panic!("the input is cursed")
                },
            )
            .unwrap();
        let (executor, rx) = executor(1, 1 << 20, registry);
        executor
            .launch_task(task(1, "fail-n-attempts", b"1"))
            .unwrap();
        executor.launch_task(task(2, "panics", b"")).unwrap();
        executor
            .launch_task(task(3, "no-such-function", b""))
            .unwrap();
        let mut bad = task(4, "noop", b"");
        bad.serialized_task = Bytes::from_static(b"\x09abc");
        executor.launch_task(bad).unwrap();
        let mut seen = Vec::new();
        for _ in 0..4 {
            let update = rx.recv_timeout(WAIT).unwrap();
            let TaskOutcome::Failure {
                kind,
                message,
                counts_towards_failures,
                ..
            } = update.outcome
            else {
                panic!("{update:?}")
            };
            assert_eq!(update.state, TaskState::Failed);
            assert!(counts_towards_failures);
            seen.push((update.task_id, kind, message));
        }
        seen.sort_by_key(|s| s.0);
        assert_eq!(seen[0].1, TaskFailureKind::Exception);
        assert!(seen[0].2.contains("attempt 0"), "{}", seen[0].2);
        assert_eq!(seen[1].1, TaskFailureKind::Exception);
        assert!(seen[1].2.contains("the input is cursed"), "{}", seen[1].2);
        assert_eq!(seen[2].1, TaskFailureKind::Undeserializable);
        assert!(seen[2].2.contains("\"no-such-function\""), "{}", seen[2].2);
        assert_eq!(seen[3].1, TaskFailureKind::Undeserializable);
        assert!(seen[3].2.contains("announces 9 bytes"), "{}", seen[3].2);
        assert!(executor.running_tasks().is_empty());
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

    /// Hands deferred updates over only when flushed, as a connection does; lends the
    /// runner to an environment of its own (a runner defers only while lent).
    struct Deferring {
        pending: Mutex<Vec<StatusUpdate>>,
        sent: Mutex<mpsc::Sender<StatusUpdate>>,
        flushes: Arc<AtomicUsize>,
        lender: flint_rpc::RpcEnv,
    }

    impl StatusSender for Deferring {
        fn send_status(&self, message: &Message) -> Result<(), RpcError> {
            self.send_status_deferred(message)?;
            self.flush();
            Ok(())
        }

        fn send_status_deferred(&self, message: &Message) -> Result<(), RpcError> {
            let Message::StatusUpdate(update) = message else {
                panic!("not a status update: {message:?}");
            };
            lock(&self.pending).push(update.clone());
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
    }

    fn deferring_executor(
        cores: u32,
    ) -> (Executor, mpsc::Receiver<StatusUpdate>, Arc<AtomicUsize>) {
        let (tx, rx) = mpsc::channel();
        let flushes = Arc::new(AtomicUsize::new(0));
        let sender = Deferring {
            pending: Mutex::new(Vec::new()),
            sent: Mutex::new(tx),
            flushes: flushes.clone(),
            lender: flint_rpc::RpcEnv::new(&flint_rpc::Conf::default()).unwrap(),
        };
        let mut config = ExecutorConfig::new("7", "localhost", cores);
        config.busy_poll = Duration::from_secs(1);
        let executor = Executor::new(config, TaskRegistry::with_builtins(), sender).unwrap();
        // After a first task the runner polls for the next, lent, for a second: the
        // tests' tasks come within it.
        let mut staged = Staged::with_capacity(1);
        executor.stage(&mut staged, Launch::from_description(task(0, "noop", b"")));
        executor.commit(&mut staged).unwrap();
        assert_eq!(rx.recv_timeout(WAIT).unwrap().task_id, 0);
        flushes.store(0, Ordering::SeqCst);
        (executor, rx, flushes)
    }

    #[test]
    fn a_batch_of_quick_tasks_is_reported_in_few_flushes_and_none_is_left_behind() {
        let (executor, rx, flushes) = deferring_executor(1);
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
        let flushes = flushes.load(Ordering::SeqCst);
        assert!(
            (1..=200 / FLUSH_EVERY + 2).contains(&flushes),
            "{flushes} flushes for 200 quick tasks"
        );
        wait_until("the tasks to be forgotten", || {
            lock(&executor.inner.state).running.is_empty()
        });
    }

    #[test]
    fn an_update_does_not_wait_behind_a_long_task() {
        let (executor, rx, _) = deferring_executor(1);
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
            !lock(&executor.inner.state).spare.is_empty()
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

    /// An archived launch of `task`, in a frame of its own.
    fn launch_frame(task: TaskDescription) -> Frame {
        let mut out = bytes::BytesMut::new();
        let route = flint_wire::Route::OneWay {
            endpoint: "Executor".into(),
        };
        flint_wire::Encoder::new(1 << 20)
            .encode(&route, &Message::LaunchTask(task), &mut out)
            .unwrap();
        let mut decoder = flint_wire::FrameDecoder::new(1 << 20);
        decoder.feed(&out).unwrap();
        decoder.next_frame().unwrap().unwrap()
    }

    fn archived(frame: &Frame) -> &ArchivedTaskDescription {
        match &frame.envelope().unwrap().message {
            flint_wire::ArchivedMessage::LaunchTask(task) => task,
            other => panic!("not a launch: {other:?}"),
        }
    }

    fn inside(part: &[u8], frame: &Frame) -> bool {
        let payload = frame.payload().as_ptr_range();
        payload.contains(&part.as_ptr())
    }

    #[test]
    fn a_small_launch_is_copied_out_of_its_frame_and_a_large_one_is_not() {
        let (executor, _rx) = executor(1, 1 << 20, TaskRegistry::with_builtins());
        let mut staged = Staged::with_capacity(8);
        let small = launch_frame(task(1, "echo", b"hi"));
        executor.stage(
            &mut staged,
            Launch::from_archived(&small, archived(&small), 1 << 20),
        );
        let launch = &staged.jobs[0].launch;
        assert!(!inside(&launch.serialized_task, &small));
        assert_eq!(
            launch.serialized_task,
            TaskPayload::encode("echo", b"hi").unwrap()
        );
        assert_eq!(launch.name.to_string(), "task 1.0 in stage 0.0 (TID 1)");
        assert!(matches!(launch.extras, Ok(None)));

        let input = vec![b'x'; COPY_LIMIT];
        let large = launch_frame(task(2, "echo", &input));
        executor.stage(
            &mut staged,
            Launch::from_archived(&large, archived(&large), 1 << 20),
        );
        let launch = &staged.jobs[1].launch;
        assert!(
            inside(&launch.serialized_task, &large),
            "a view, not a copy"
        );
        assert_eq!(launch.serialized_task.len(), 1 + 4 + COPY_LIMIT);
        assert_eq!(launch.name.to_string(), "task 2.0 in stage 0.0 (TID 2)");
        staged.jobs.clear();
    }

    #[test]
    fn a_launch_staged_before_every_task_is_killed_is_killed_too() {
        let (executor, rx) = executor(1, 1 << 20, TaskRegistry::with_builtins());
        let mut staged = Staged::with_capacity(4);
        let frame = launch_frame(task(1, "echo", b"stale"));
        executor.stage(
            &mut staged,
            Launch::from_archived(&frame, archived(&frame), 1 << 20),
        );
        assert_eq!(executor.kill_all_tasks("the driver gave up on it"), 0);
        // Read after the kill: runs.
        let frame = launch_frame(task(2, "echo", b"fresh"));
        executor.stage(
            &mut staged,
            Launch::from_archived(&frame, archived(&frame), 1 << 20),
        );
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

    #[test]
    fn a_launch_whose_properties_would_decode_past_the_limit_fails_without_decoding_them() {
        let limit = 64 << 10;
        let (executor, rx) = executor(1, limit, TaskRegistry::with_builtins());
        // Empty properties: 16 bytes each archived, 48 decoded.
        let mut flood = task(1, "echo", b"hi");
        flood.properties = vec![
            Property {
                key: String::new(),
                value: String::new(),
            };
            limit / 32
        ];
        let frame = launch_frame(flood.clone());
        assert!(frame.payload().len() < limit, "the frame itself is allowed");
        let mut staged = Staged::with_capacity(2);
        executor.stage(
            &mut staged,
            Launch::from_archived(&frame, archived(&frame), limit),
        );
        assert!(staged.jobs[0].launch.extras.is_err());
        // A few properties within the limit are decoded and the task runs.
        flood.task_id = 2;
        flood.properties.truncate(8);
        let frame = launch_frame(flood);
        executor.stage(
            &mut staged,
            Launch::from_archived(&frame, archived(&frame), limit),
        );
        executor.commit(&mut staged).unwrap();
        let mut updates = [
            rx.recv_timeout(WAIT).unwrap(),
            rx.recv_timeout(WAIT).unwrap(),
        ];
        updates.sort_by_key(|u| u.task_id);
        let TaskOutcome::Failure { kind, message, .. } = &updates[0].outcome else {
            panic!("{:?}", updates[0])
        };
        assert_eq!(*kind, TaskFailureKind::Undeserializable);
        assert!(
            message.starts_with("Could not deserialize task 1.0 in stage 0.0 (TID 1): its files, jars and properties would take ")
                && message.ends_with(&format!("more than rpc.message.maxSize ({limit} bytes)")),
            "{message}"
        );
        assert_eq!(updates[1].state, TaskState::Finished, "{:?}", updates[1]);
    }

    #[test]
    fn a_task_sees_its_cpus_files_jars_and_properties() {
        let mut registry = TaskRegistry::new();
        registry
            .register("describe", |ctx: &TaskContext, _: &Bytes| {
                Ok(Bytes::from(format!(
                    "{} {:?} {:?} {:?} {:?}",
                    ctx.cpus(),
                    ctx.added_files()
                        .iter()
                        .map(|d| &d.name)
                        .collect::<Vec<_>>(),
                    ctx.added_jars()
                        .iter()
                        .map(|d| d.timestamp)
                        .collect::<Vec<_>>(),
                    ctx.local_property("spark.job.description"),
                    ctx.local_property("absent"),
                )))
            })
            .unwrap();
        let (executor, rx) = executor(1, 1 << 20, registry);
        let mut described = task(1, "describe", b"");
        described.cpus = 2;
        described.added_files = vec![Dependency {
            name: "data.csv".into(),
            timestamp: 5,
        }];
        described.added_jars = vec![Dependency {
            name: "lib.jar".into(),
            timestamp: 7,
        }];
        described.properties = vec![Property {
            key: "spark.job.description".into(),
            value: "nightly".into(),
        }];
        let frame = launch_frame(described.clone());
        let mut staged = Staged::with_capacity(2);
        executor.stage(
            &mut staged,
            Launch::from_archived(&frame, archived(&frame), 1 << 20),
        );
        executor.commit(&mut staged).unwrap();
        executor
            .launch_task(TaskDescription {
                task_id: 2,
                ..described
            })
            .unwrap();
        let plain = task(3, "describe", b"");
        let frame = launch_frame(plain);
        executor.stage(
            &mut staged,
            Launch::from_archived(&frame, archived(&frame), 1 << 20),
        );
        executor.commit(&mut staged).unwrap();
        let mut seen = Vec::new();
        for _ in 0..3 {
            let update = rx.recv_timeout(WAIT).unwrap();
            let TaskOutcome::Direct { value, .. } = update.outcome else {
                panic!("{update:?}")
            };
            seen.push((update.task_id, String::from_utf8(value.to_vec()).unwrap()));
        }
        seen.sort();
        let full = r#"2 ["data.csv"] [7] Some("nightly") None"#;
        assert_eq!(seen[0], (1, full.to_owned()));
        assert_eq!(seen[1], (2, full.to_owned()));
        assert_eq!(seen[2], (3, "1 [] [] None None".to_owned()));
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
            let Message::StatusUpdate(update) = message else {
                panic!("not a status update: {message:?}");
            };
            let _ = lock(&self.sent).send(update.clone());
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
}
