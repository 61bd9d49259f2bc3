//! What a task function sees while it runs ([`TaskContext`]) and how it fails
//! ([`TaskError`]), and the per-task state the executor shares with it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::BytesMut;
use flint_wire::records::MalformedRecords;
use flint_wire::{Dependency, FetchFailure, SharedStr, ShuffleRead, TaskExtras, TaskMetrics};

use crate::accumulators::{AccumulatorError, TaskAccumulators};
use crate::broadcast::{BroadcastError, BroadcastService};
use crate::shuffle::{ShuffleError, ShuffleInput, ShuffleReadError, ShuffleService, ShuffleWriter};

/// Why a task function did not produce a result.
///
/// ```
/// use flint_executor::TaskError;
///
/// let error = TaskError::failed("partition 7 has no rows");
/// assert_eq!(error.to_string(), "partition 7 has no rows");
/// assert!(TaskError::killed("stage cancelled").is_killed());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// The task failed; the text is shown to the user and the attempt counts towards
    /// `task.maxFailures`.
    #[error("{0}")]
    Failed(String),
    /// The task stopped because it was asked to (it saw its kill flag); it ends KILLED.
    #[error("task killed: {reason}")]
    Killed {
        /// Why it was killed (the reason of the kill request).
        reason: String,
    },
    /// A shuffle block the task reads could not be fetched: the map output is lost, not
    /// the task at fault. The attempt ends FetchFailed, which does not count towards
    /// `task.maxFailures`; the driver recomputes the output and runs the task again.
    #[error("{0}")]
    FetchFailed(Box<FetchFailure>),
}

impl From<ShuffleError> for TaskError {
    fn from(error: ShuffleError) -> Self {
        TaskError::Failed(error.to_string())
    }
}

impl From<MalformedRecords> for TaskError {
    fn from(error: MalformedRecords) -> Self {
        TaskError::Failed(error.to_string())
    }
}

impl TaskError {
    /// A task failure with this text.
    pub fn failed(message: impl Into<String>) -> Self {
        TaskError::Failed(message.into())
    }

    /// The error of a task that stopped because it was killed.
    pub fn killed(reason: impl Into<String>) -> Self {
        TaskError::Killed {
            reason: reason.into(),
        }
    }

    /// Whether this is [`TaskError::Killed`].
    pub fn is_killed(&self) -> bool {
        matches!(self, TaskError::Killed { .. })
    }
}

/// The text of a kill request that gave no reason.
pub(crate) const NO_REASON: &str = "killed";

/// The state of one task attempt shared by the executor (kills, heartbeats) and the task
/// runner: the cooperative kill flag and the metrics gathered so far.
#[derive(Debug, Default)]
pub(crate) struct TaskHandle {
    killed: AtomicBool,
    kill_reason: OnceLock<String>,
    /// The task has ended (its status update is on its way): it no longer counts as
    /// running, though the executor may not have forgotten it yet.
    ended: AtomicBool,
    /// Nanoseconds since the executor's epoch at which the function started, plus one;
    /// 0 while it has not started.
    started: AtomicU64,
    deserialize_time_ns: AtomicU64,
    input_bytes: AtomicU64,
    output_bytes: AtomicU64,
    /// What the task added to accumulators: read by heartbeats, lent to the status
    /// update (see [`crate::accumulators`]).
    pub(crate) accumulators: Mutex<TaskAccumulators>,
    /// Where a small launch's name and serialized task are copied, so that the task does
    /// not hold on to the receive buffer; reused from task to task. Only touched with
    /// exclusive access (a handle nobody else holds yet).
    pub(crate) scratch: BytesMut,
}

impl TaskHandle {
    /// A handle whose scratch buffer has room for `scratch` bytes.
    pub(crate) fn with_scratch(scratch: usize) -> Self {
        TaskHandle {
            scratch: BytesMut::with_capacity(scratch),
            ..TaskHandle::default()
        }
    }

    /// Makes a handle whose task ended ready for another task: not killed, not started,
    /// counters at zero (its scratch buffer is kept). Exclusive access proves that nobody
    /// still looks at it.
    pub(crate) fn reset(&mut self) {
        *self.killed.get_mut() = false;
        let _ = self.kill_reason.take();
        *self.ended.get_mut() = false;
        *self.started.get_mut() = 0;
        *self.deserialize_time_ns.get_mut() = 0;
        *self.input_bytes.get_mut() = 0;
        *self.output_bytes.get_mut() = 0;
        self.accumulators
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The task's accumulator values.
    pub(crate) fn accumulators(&self) -> MutexGuard<'_, TaskAccumulators> {
        self.accumulators.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks the task to stop; the first reason given is kept.
    pub(crate) fn kill(&self, reason: &str) {
        let _ = self.kill_reason.set(reason.to_owned());
        self.killed.store(true, Ordering::Release);
    }

    /// Notes that the task has ended.
    pub(crate) fn mark_ended(&self) {
        self.ended.store(true, Ordering::Release);
    }

    /// Whether the task has ended.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// The reason of the kill request, if the task was asked to stop.
    pub(crate) fn kill_reason(&self) -> Option<&str> {
        if self.is_killed() {
            Some(self.kill_reason.get().map_or(NO_REASON, String::as_str))
        } else {
            None
        }
    }

    pub(crate) fn mark_started(&self, since_epoch_ns: u64, deserialize_time_ns: u64) {
        self.deserialize_time_ns
            .store(deserialize_time_ns, Ordering::Relaxed);
        self.started
            .store(since_epoch_ns.saturating_add(1), Ordering::Release);
    }

    /// When the function started (nanoseconds since the executor's epoch), if it did.
    pub(crate) fn started_at(&self) -> Option<u64> {
        match self.started.load(Ordering::Acquire) {
            0 => None,
            n => Some(n - 1),
        }
    }

    /// The metrics so far, with this run time.
    pub(crate) fn metrics(&self, run_time_ns: u64) -> TaskMetrics {
        TaskMetrics {
            deserialize_time_ns: self.deserialize_time_ns.load(Ordering::Relaxed),
            run_time_ns,
            cpu_time_ns: 0,
            result_size: 0,
            input_bytes: self.input_bytes.load(Ordering::Relaxed),
            output_bytes: self.output_bytes.load(Ordering::Relaxed),
        }
    }
}

/// What a task of a job's stage has of shuffles: the writer of the one it writes (a
/// shuffle map task), and the ones it reads.
#[derive(Debug)]
pub(crate) struct StageContext {
    pub(crate) writer: Option<Mutex<ShuffleWriter>>,
    pub(crate) reads: Vec<ShuffleRead>,
    pub(crate) service: Arc<ShuffleService>,
}

/// What a task function knows about the attempt it runs: its ids, its kill flag, and
/// counters of the bytes it reads and writes; for a task of a job's stage, the shuffle
/// it writes ([`TaskContext::shuffle_writer`]) and those it reads
/// ([`TaskContext::read_shuffle`]).
///
/// Accumulators: a task adds to the driver's accumulators by id
/// ([`TaskContext::add_long`], [`TaskContext::add_double`], [`TaskContext::merge_bytes`]);
/// see [`crate::accumulators`].
///
/// Kills are cooperative: a long task checks [`TaskContext::is_interrupted`] (or calls
/// [`TaskContext::check_interrupted`]) now and then and returns when it is set.
///
/// ```
/// use bytes::Bytes;
/// use flint_executor::{TaskContext, TaskError};
///
/// fn count_lines(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
///     let mut lines = 0u64;
///     for chunk in input.chunks(64 * 1024) {
///         ctx.check_interrupted()?;
///         lines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
///     }
///     ctx.add_input_bytes(input.len() as u64);
///     Ok(Bytes::from(lines.to_string()))
/// }
///
/// let ctx = TaskContext::new(7, 0);
/// assert_eq!(count_lines(&ctx, &Bytes::from_static(b"a\nb\n")).unwrap(), "2");
/// ctx.request_kill("stage cancelled");
/// assert_eq!(
///     count_lines(&ctx, &Bytes::from_static(b"a\n")),
///     Err(TaskError::killed("stage cancelled"))
/// );
/// ```
#[derive(Debug)]
pub struct TaskContext {
    pub(crate) task_id: u64,
    pub(crate) attempt_number: u32,
    pub(crate) partition_id: u32,
    pub(crate) index: u32,
    pub(crate) cpus: u32,
    pub(crate) executor_id: SharedStr,
    pub(crate) extras: Option<Arc<TaskExtras>>,
    pub(crate) handle: Arc<TaskHandle>,
    pub(crate) stage: Option<StageContext>,
    /// The executor's broadcasts; `None` outside an executor that has them.
    pub(crate) broadcasts: Option<Arc<BroadcastService>>,
}

impl TaskContext {
    /// A context outside any executor (executor id "driver", partition and index 0, one
    /// cpu, no files, jars or properties), to run or test a task function directly.
    pub fn new(task_id: u64, attempt_number: u32) -> Self {
        TaskContext {
            task_id,
            attempt_number,
            partition_id: 0,
            index: 0,
            cpus: 1,
            executor_id: SharedStr::from("driver"),
            extras: None,
            handle: Arc::default(),
            stage: None,
            broadcasts: None,
        }
    }

    /// The task attempt's id (TID), unique within the application.
    pub fn task_id(&self) -> u64 {
        self.task_id
    }

    /// Which attempt of the task this is, 0 for the first.
    pub fn attempt_number(&self) -> u32 {
        self.attempt_number
    }

    /// The partition the task computes.
    pub fn partition_id(&self) -> u32 {
        self.partition_id
    }

    /// The task's index within its task set.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The cores the task was given (`task.cpus`).
    pub fn cpus(&self) -> u32 {
        self.cpus
    }

    /// The value of the local property `key` the task was launched with, if it has it.
    pub fn local_property(&self, key: &str) -> Option<&str> {
        let extras = self.extras.as_deref()?;
        extras
            .properties
            .iter()
            .find(|p| p.key == key)
            .map(|p| p.value.as_str())
    }

    /// The files the task needs, with the times they were added.
    pub fn added_files(&self) -> &[Dependency] {
        self.extras.as_deref().map_or(&[], |e| &e.added_files)
    }

    /// The jars the task needs, with the times they were added.
    pub fn added_jars(&self) -> &[Dependency] {
        self.extras.as_deref().map_or(&[], |e| &e.added_jars)
    }

    /// The id of the executor running the task.
    pub fn executor_id(&self) -> &str {
        &self.executor_id
    }

    /// Whether the task was asked to stop (its kill flag). A task that sees it should
    /// return soon; whatever it returns then, the attempt ends KILLED.
    pub fn is_interrupted(&self) -> bool {
        self.handle.is_killed()
    }

    /// `Err(TaskError::Killed)`, with the kill's reason, once the task was asked to stop;
    /// `Ok(())` before. Made for `?` in a task's loop.
    pub fn check_interrupted(&self) -> Result<(), TaskError> {
        match self.handle.kill_reason() {
            Some(reason) => Err(TaskError::killed(reason)),
            None => Ok(()),
        }
    }

    /// Sets the kill flag, as the executor does when the driver kills the task. For
    /// running task functions outside an executor, e.g. in their tests.
    pub fn request_kill(&self, reason: &str) {
        self.handle.kill(reason);
    }

    /// Counts `n` bytes read by the task (reported in its metrics and heartbeats).
    pub fn add_input_bytes(&self, n: u64) {
        self.handle.input_bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts `n` bytes written by the task (reported in its metrics and heartbeats).
    pub fn add_output_bytes(&self, n: u64) {
        self.handle.output_bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// Adds `n` to the long accumulator `id` (a sum of `i64`s, wrapping) that the driver
    /// registered. The task's values go to the driver with its result, and are merged
    /// there once per partition, from the first attempt that succeeds; heartbeats show
    /// them as progress while the task runs.
    ///
    /// Refused when the task already added a value of another kind to `id`, or adds to
    /// more than [`crate::MAX_TASK_ACCUMULATORS`] accumulators; with `?` that fails the
    /// task.
    pub fn add_long(&self, id: u64, n: i64) -> Result<(), AccumulatorError> {
        self.handle.accumulators().add_long(id, n)
    }

    /// Adds `x` to the double accumulator `id` (a sum of `f64`s), as
    /// [`TaskContext::add_long`] does.
    pub fn add_double(&self, id: u64, x: f64) -> Result<(), AccumulatorError> {
        self.handle.accumulators().add_double(id, x)
    }

    /// Merges `value` into the bytes accumulator `id` with `merge`, the user-defined merge
    /// the driver registered the accumulator with (the task's first value is taken as it
    /// is; the driver merges each partition's value into its own with the same
    /// function). The task's bytes values may take at most
    /// [`crate::MAX_TASK_ACCUMULATOR_BYTES`] in all.
    pub fn merge_bytes(
        &self,
        id: u64,
        value: &[u8],
        merge: impl FnOnce(&mut Vec<u8>, &[u8]),
    ) -> Result<(), AccumulatorError> {
        self.handle.accumulators().merge_bytes(id, value, merge)
    }

    /// What the task added to accumulators so far, as its status update would carry
    /// them. For tests of task functions.
    pub fn accumulator_updates(&self) -> Vec<flint_wire::AccumulatorUpdate> {
        self.handle.accumulators().snapshot()
    }

    /// The metrics gathered so far (run time not included).
    pub fn metrics(&self) -> TaskMetrics {
        self.handle.metrics(0)
    }

    /// The writer of the shuffle this task writes, for a shuffle map task: what it
    /// writes there is its output, and the map status the driver receives when it
    /// returns `Ok` (its return value is not sent). Lock it once and write many records.
    pub fn shuffle_writer(&self) -> Result<MutexGuard<'_, ShuffleWriter>, TaskError> {
        let writer = self
            .stage
            .as_ref()
            .and_then(|stage| stage.writer.as_ref())
            .ok_or_else(|| {
                TaskError::failed(format!(
                    "task {} writes no shuffle: it is not a shuffle map task",
                    self.task_id
                ))
            })?;
        Ok(writer.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The shuffles this task reads (several for a join), with their map partitions.
    pub fn shuffle_reads(&self) -> &[ShuffleRead] {
        self.stage.as_ref().map_or(&[], |stage| &stage.reads)
    }

    /// This task's partition of shuffle `shuffle_id`, gathered from every map output:
    /// read in place where it is local, fetched from other executors' block servers
    /// where not. A block that cannot be read ends the task FetchFailed (return the
    /// error with `?`); a kill while it waits ends it KILLED.
    pub fn read_shuffle(&self, shuffle_id: u32) -> Result<ShuffleInput, TaskError> {
        let stage = self
            .stage
            .as_ref()
            .filter(|stage| stage.reads.iter().any(|r| r.shuffle_id == shuffle_id))
            .ok_or_else(|| {
                TaskError::failed(format!(
                    "task {} does not read shuffle {shuffle_id}",
                    self.task_id
                ))
            })?;
        let pieces = stage
            .service
            .read(shuffle_id, self.partition_id, &|| self.is_interrupted())
            .map_err(|e| match e {
                ShuffleReadError::FetchFailed(failure) => TaskError::FetchFailed(failure),
                ShuffleReadError::Interrupted => {
                    TaskError::killed(self.handle.kill_reason().unwrap_or(NO_REASON))
                }
                ShuffleReadError::Failed(message) => TaskError::Failed(message),
            })?;
        let input = ShuffleInput::new(pieces);
        self.add_input_bytes(input.len_bytes());
        Ok(input)
    }

    /// The value of broadcast `broadcast_id` (made on the driver with
    /// `Driver::broadcast`): a view of the executor's one copy, never a copy of it. The
    /// first task of the executor to ask fetches it (other tasks asking meanwhile wait
    /// for that fetch); later ones find it cached until the driver unpersists it. A
    /// value that cannot be fetched fails the task, saying why; a kill while it waits
    /// ends it KILLED.
    ///
    /// ```
    /// use bytes::Bytes;
    /// use flint_executor::{TaskContext, TaskError};
    ///
    /// /// Looks its input up in a table every task shares: the broadcast whose id the
    /// /// input starts with.
    /// fn lookup(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
    ///     let id = u64::from_le_bytes(input[..8].try_into().unwrap());
    ///     let table = ctx.broadcast(id)?;
    ///     let hit = table.windows(input.len() - 8).any(|w| w == &input[8..]);
    ///     Ok(Bytes::from(if hit { "yes" } else { "no" }))
    /// }
    ///
    /// // Outside an executor there are no broadcasts: the task fails, saying so.
    /// let error = lookup(&TaskContext::new(1, 0), &Bytes::from_static(b"\x07\0\0\0\0\0\0\0k"));
    /// assert!(error.unwrap_err().to_string().contains("no broadcasts"));
    /// ```
    pub fn broadcast(&self, broadcast_id: u64) -> Result<bytes::Bytes, TaskError> {
        let service = self.broadcasts.as_ref().ok_or_else(|| {
            TaskError::failed(format!(
                "task {} cannot read broadcast {broadcast_id}: executor {} has no broadcasts",
                self.task_id, self.executor_id
            ))
        })?;
        match service.get(broadcast_id, &|| self.is_interrupted()) {
            Ok(value) => Ok(value),
            Err(BroadcastError::Interrupted) => Err(TaskError::killed(
                self.handle.kill_reason().unwrap_or(NO_REASON),
            )),
            Err(e) => Err(TaskError::Failed(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_kill_reason_is_kept() {
        let ctx = TaskContext::new(1, 0);
        assert!(!ctx.is_interrupted());
        assert_eq!(ctx.check_interrupted(), Ok(()));
        ctx.request_kill("first");
        ctx.request_kill("second");
        assert!(ctx.is_interrupted());
        assert_eq!(ctx.check_interrupted(), Err(TaskError::killed("first")));
    }

    #[test]
    fn byte_counters_add_up() {
        let ctx = TaskContext::new(1, 0);
        ctx.add_input_bytes(10);
        ctx.add_input_bytes(5);
        ctx.add_output_bytes(3);
        let metrics = ctx.metrics();
        assert_eq!((metrics.input_bytes, metrics.output_bytes), (15, 3));
    }

    #[test]
    fn a_reset_handle_is_as_new() {
        let mut handle = TaskHandle::default();
        handle.kill("stop");
        handle.mark_started(5, 6);
        handle.mark_ended();
        handle.input_bytes.store(7, Ordering::Relaxed);
        handle.output_bytes.store(8, Ordering::Relaxed);
        handle.reset();
        assert!(!handle.is_ended());
        assert_eq!(handle.kill_reason(), None);
        assert_eq!(handle.started_at(), None);
        assert_eq!(handle.metrics(0), TaskMetrics::default());
        handle.kill("again");
        assert_eq!(handle.kill_reason(), Some("again"));
    }

    #[test]
    fn start_time_zero_is_still_started() {
        let handle = TaskHandle::default();
        assert_eq!(handle.started_at(), None);
        handle.mark_started(0, 42);
        assert_eq!(handle.started_at(), Some(0));
        assert_eq!(handle.metrics(9).deserialize_time_ns, 42);
        assert_eq!(handle.metrics(9).run_time_ns, 9);
    }
}
