//! The executor: a pool of task runner threads, the registry of running tasks, and what a
//! runner does with a task from its launch to its status update.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::{EndpointRef, RpcError};
use flint_wire::{
    BlockId, Message, SharedStr, StatusUpdate, TaskAccumUpdates, TaskDescription, TaskFailureKind,
    TaskMetrics, TaskOutcome, TaskPayload, TaskState,
};
use tracing::{debug, error, info, warn};

use crate::block_store::BlockStore;
use crate::registry::TaskRegistry;
use crate::task::{TaskContext, TaskError, TaskHandle};

/// Room left in a message for everything but a direct result's value: a result travels
/// in its status update when `value.len() + RESULT_OVERHEAD <= rpc.message.maxSize`.
pub const RESULT_OVERHEAD: usize = 64 * 1024;

/// How long [`Executor::stop`] waits for the task runners to finish.
pub const STOP_GRACE: Duration = Duration::from_secs(3);

/// The reason given to running tasks when the executor stops.
pub const STOP_REASON: &str = "Executor is stopping";

/// How long a runner keeps retrying a status update the connection's outbox has no room
/// for, before it gives the update up.
const STATUS_RETRY_LIMIT: Duration = Duration::from_secs(30);

/// Where task runners send their tasks' status updates: the driver's endpoint, or a
/// test's collector.
pub trait StatusSender: Send + Sync + 'static {
    /// Sends one [`Message::StatusUpdate`], one-way. [`RpcError::OutboxFull`] makes the
    /// runner retry a little later; any other error gives the update up.
    fn send_status(&self, message: &Message) -> Result<(), RpcError>;
}

impl StatusSender for EndpointRef {
    fn send_status(&self, message: &Message) -> Result<(), RpcError> {
        self.send(message)
    }
}

/// What an [`Executor`] is and the limits it runs tasks with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// The executor's id, as registered with the driver.
    pub executor_id: String,
    /// The host it runs on.
    pub hostname: String,
    /// Task runner threads: tasks it runs at once.
    pub cores: u32,
    /// `rpc.message.maxSize` in bytes: larger results go to the block store.
    pub max_message_size: usize,
}

impl ExecutorConfig {
    /// A configuration with the default `rpc.message.maxSize` (128 MiB).
    pub fn new(executor_id: impl Into<String>, hostname: impl Into<String>, cores: u32) -> Self {
        ExecutorConfig {
            executor_id: executor_id.into(),
            hostname: hostname.into(),
            cores,
            max_message_size: flint_wire::DEFAULT_MAX_MESSAGE_SIZE,
        }
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

/// A task waiting for a runner.
struct Job {
    task: TaskDescription,
    handle: Arc<TaskHandle>,
}

#[derive(Default)]
struct Pool {
    queue: VecDeque<Job>,
    /// Runners waiting for work.
    idle: usize,
    /// Runners that have not exited.
    live: usize,
    shutdown: bool,
}

/// State shared by the executor and its runner threads.
struct Inner {
    executor_id: SharedStr,
    hostname: String,
    cores: u32,
    /// The largest result sent in its status update.
    direct_limit: usize,
    epoch: Instant,
    registry: TaskRegistry,
    blocks: Arc<BlockStore>,
    status: Box<dyn StatusSender>,
    running: Mutex<HashMap<u64, Arc<TaskHandle>>>,
    pool: Mutex<Pool>,
    /// Signalled when work is queued or the pool shuts down.
    work: Condvar,
    /// Signalled when a runner exits.
    exited: Condvar,
    stopped: AtomicBool,
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
            epoch: Instant::now(),
            registry,
            blocks: Arc::new(BlockStore::new()),
            status: Box::new(status),
            running: Mutex::new(HashMap::new()),
            pool: Mutex::new(Pool::default()),
            work: Condvar::new(),
            exited: Condvar::new(),
            stopped: AtomicBool::new(false),
        });
        let executor = Executor {
            inner,
            runners: Mutex::new(Vec::with_capacity(config.cores as usize)),
        };
        for n in 0..config.cores {
            let inner = executor.inner.clone();
            lock(&inner.pool).live += 1;
            let spawned = std::thread::Builder::new()
                .name(format!("Executor task launch worker-{n}"))
                .spawn(move || runner(inner));
            match spawned {
                Ok(thread) => lock(&executor.runners).push(thread),
                Err(e) => {
                    lock(&executor.inner.pool).live -= 1;
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

    /// The block store holding results too large for a message.
    pub fn block_store(&self) -> &Arc<BlockStore> {
        &self.inner.blocks
    }

    /// Registers the task as running and queues it for a runner thread.
    pub fn launch_task(&self, task: TaskDescription) -> Result<(), ExecutorError> {
        let inner = &*self.inner;
        if inner.stopped.load(Ordering::Acquire) {
            return Err(ExecutorError::Stopped);
        }
        let task_id = task.task_id;
        let handle = Arc::new(TaskHandle::default());
        if let Some(previous) = lock(&inner.running).insert(task_id, handle.clone()) {
            // The driver never reuses a TID; should it, the older attempt is forgotten.
            warn!("task (TID {task_id}) launched again while it runs; the first launch is killed");
            previous.kill("launched again");
        }
        let wake = {
            let mut pool = lock(&inner.pool);
            if pool.shutdown {
                drop(pool);
                inner.forget(task_id, &handle);
                return Err(ExecutorError::Stopped);
            }
            pool.queue.push_back(Job { task, handle });
            pool.idle > 0
        };
        if wake {
            inner.work.notify_one();
        }
        Ok(())
    }

    /// Asks the task to stop (its kill flag): a running task ends KILLED when it notices,
    /// a queued one without running. Kills are cooperative; `interrupt_thread` is
    /// accepted for the protocol's sake (a Rust thread cannot be interrupted). Returns
    /// whether the task was running here.
    pub fn kill_task(&self, task_id: u64, interrupt_thread: bool, reason: &str) -> bool {
        let handle = lock(&self.inner.running).get(&task_id).cloned();
        match handle {
            Some(handle) => {
                info!(
                    interrupt_thread,
                    "Executor is trying to kill task (TID {task_id}), reason: {reason}"
                );
                handle.kill(reason);
                true
            }
            None => {
                debug!("kill of task (TID {task_id}), which is not running here");
                false
            }
        }
    }

    /// Ids of the tasks launched and not yet ended, sorted.
    pub fn running_tasks(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = lock(&self.inner.running).keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The metrics so far of every task whose function has started: a heartbeat's
    /// accumulator updates.
    pub fn heartbeat_updates(&self) -> Vec<TaskAccumUpdates> {
        let now = self.inner.since_epoch(Instant::now());
        let running = lock(&self.inner.running);
        let mut updates: Vec<TaskAccumUpdates> = running
            .iter()
            .filter_map(|(&task_id, handle)| {
                let started = handle.started_at()?;
                Some(TaskAccumUpdates {
                    task_id,
                    metrics: handle.metrics(now.saturating_sub(started)),
                    accumulators: Vec::new(),
                })
            })
            .collect();
        drop(running);
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
            return lock(&inner.pool).live == 0;
        }
        let dropped: Vec<Job> = {
            let mut pool = lock(&inner.pool);
            pool.shutdown = true;
            pool.queue.drain(..).collect()
        };
        inner.work.notify_all();
        for job in dropped {
            inner.forget(job.task.task_id, &job.handle);
        }
        for handle in lock(&inner.running).values() {
            handle.kill(STOP_REASON);
        }
        let deadline = Instant::now() + grace;
        let mut pool = lock(&inner.pool);
        while pool.live > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            pool = inner
                .exited
                .wait_timeout(pool, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let stuck = pool.live;
        drop(pool);
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
        lock(&self.0.pool).live -= 1;
        self.0.exited.notify_all();
    }
}

/// A runner thread: takes queued tasks until the pool shuts down.
fn runner(inner: Arc<Inner>) {
    let _exiting = Exiting(&inner);
    loop {
        let job = {
            let mut pool = lock(&inner.pool);
            loop {
                if let Some(job) = pool.queue.pop_front() {
                    break job;
                }
                if pool.shutdown {
                    return;
                }
                pool.idle += 1;
                pool = inner.work.wait(pool).unwrap_or_else(|e| e.into_inner());
                pool.idle -= 1;
            }
        };
        inner.run(job);
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

    /// Removes the task from the running registry, unless a later launch replaced it.
    fn forget(&self, task_id: u64, handle: &Arc<TaskHandle>) {
        let mut running = lock(&self.running);
        if running
            .get(&task_id)
            .is_some_and(|current| Arc::ptr_eq(current, handle))
        {
            running.remove(&task_id);
        }
    }

    /// Runs one task and reports how it ended.
    fn run(&self, job: Job) {
        let Job { task, handle } = job;
        let task_id = task.task_id;
        let ended = self.execute(task, &handle);
        self.forget(task_id, &handle);
        drop(handle);
        if self.stopped.load(Ordering::Acquire) {
            debug!("task (TID {task_id}) ended while the executor stops; no status update");
            return;
        }
        let message = Message::StatusUpdate(StatusUpdate {
            executor_id: self.executor_id.clone(),
            task_id,
            state: ended.state,
            outcome: ended.outcome,
        });
        self.send_status(task_id, &message);
    }

    fn send_status(&self, task_id: u64, message: &Message) {
        let mut started: Option<Instant> = None;
        let mut pause = Duration::from_micros(100);
        loop {
            match self.status.send_status(message) {
                Ok(()) => return,
                Err(RpcError::OutboxFull { .. })
                    if !self.stopped.load(Ordering::Acquire)
                        && started.get_or_insert_with(Instant::now).elapsed()
                            < STATUS_RETRY_LIMIT =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Err(e) => {
                    error!("Failed to send the status update of task (TID {task_id}): {e}");
                    return;
                }
            }
        }
    }

    fn execute(&self, task: TaskDescription, handle: &Arc<TaskHandle>) -> Ended {
        let start = Instant::now();
        let task_id = task.task_id;
        if let Some(reason) = handle.kill_reason() {
            info!(
                "Executor killed {} before it started, reason: {reason}",
                task.name
            );
            return Ended::killed(reason, TaskMetrics::default());
        }
        debug!("Running {}", task.name);
        let payload = match TaskPayload::parse(&task.serialized_task) {
            Ok(payload) => payload,
            Err(e) => {
                let message = format!("Could not deserialize {}: {e}", task.name);
                error!("{message}");
                return Ended::failed(
                    TaskFailureKind::Undeserializable,
                    message,
                    TaskMetrics::default(),
                );
            }
        };
        let Some(function) = self.registry.get(payload.function) else {
            let message = format!(
                "No task function named {:?} is registered on executor {} (it has: {})",
                payload.function,
                self.executor_id,
                self.registry.names().join(", ")
            );
            error!("Could not deserialize {}: {message}", task.name);
            return Ended::failed(
                TaskFailureKind::Undeserializable,
                message,
                TaskMetrics::default(),
            );
        };
        let input: Bytes = task.serialized_task.slice(1 + payload.function.len()..);
        let function_name = payload.function;
        let run_start = Instant::now();
        let deserialize_ns = run_start.duration_since(start).as_nanos() as u64;
        handle.mark_started(self.since_epoch(run_start), deserialize_ns);
        let ctx = TaskContext {
            task_id,
            attempt_number: task.attempt_number,
            partition_id: task.partition_id,
            index: task.index,
            executor_id: task.executor_id.clone(),
            handle: handle.clone(),
        };
        let result = catch_unwind(AssertUnwindSafe(|| function(&ctx, &input)));
        let run_ns = run_start.elapsed().as_nanos() as u64;
        let mut metrics = handle.metrics(run_ns);
        // As the seeds' runner: a task asked to stop ends KILLED, whatever it returned.
        if let Some(reason) = handle.kill_reason() {
            info!("Executor killed {}, reason: {reason}", task.name);
            return Ended::killed(reason, metrics);
        }
        match result {
            Ok(Ok(value)) => self.finished(&task, value, metrics),
            Ok(Err(TaskError::Killed { reason })) => {
                info!("Executor killed {}, reason: {reason}", task.name);
                Ended::killed(&reason, metrics)
            }
            Ok(Err(TaskError::Failed(message))) => {
                error!("Exception in {}: {message}", task.name);
                Ended::failed(TaskFailureKind::Exception, message, metrics)
            }
            Err(panic) => {
                let text = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("(a panic payload that is not text)");
                let message = format!("task function {function_name:?} panicked: {text}");
                error!("Exception in {}: {message}", task.name);
                metrics.result_size = 0;
                Ended::failed(TaskFailureKind::Exception, message, metrics)
            }
        }
    }

    fn finished(&self, task: &TaskDescription, value: Bytes, mut metrics: TaskMetrics) -> Ended {
        let size = value.len();
        metrics.result_size = size as u64;
        let outcome = if size <= self.direct_limit {
            debug!("Finished {}. {size} bytes result sent to driver", task.name);
            TaskOutcome::Direct {
                value,
                metrics,
                accumulators: Vec::new(),
            }
        } else {
            let block_id = BlockId::TaskResult {
                task_id: task.task_id,
            };
            self.blocks.put(block_id, value);
            info!(
                "Finished {}. {size} bytes result sent via BlockManager)",
                task.name
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
        assert_eq!(lock(&executor.inner.pool).live, 3);
        assert!(executor.stop());
        assert_eq!(lock(&executor.inner.pool).live, 0);
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
        assert!(rx.try_recv().is_err(), "no status update after stop");
    }
}
