//! The message catalogue: every message the driver, executors and RPC layer exchange.
//!
//! Names and fields follow the seeds' `CoarseGrainedClusterMessages`, the heartbeat pair,
//! task results and block fetches, plus the RPC envelope ([`Envelope`], [`Route`]).
//! Opaque blobs (a serialized task, a task's result value, a block chunk) are
//! [`bytes::Bytes`]: on the receiving side they are read in place from the archive, and
//! [`crate::Frame::bytes_of`] turns them into `Bytes` views of the frame without a copy.

use bytes::Bytes;
use std::sync::Arc;

use rkyv::rancor::Fallible;
use rkyv::with::{ArchiveWith, DeserializeWith, SerializeWith};
use rkyv::{Archive, Deserialize, Place, Serialize};

use crate::shared_str::{AsArchivedString, LeanVec, SharedStr};
use crate::task_name::TaskName;

#[cfg(test)]
use proptest::prelude::*;

#[cfg(test)]
pub(crate) fn arb_shared_str() -> impl Strategy<Value = SharedStr> {
    "[a-zA-Z0-9 ._:-]{0,40}".prop_map(SharedStr::from)
}

#[cfg(test)]
pub(crate) fn arb_task_name() -> impl Strategy<Value = TaskName> {
    prop_oneof![
        arb_shared_str().prop_map(TaskName::Text),
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>()
        )
            .prop_map(|(index, attempt, stage_id, stage_attempt_id, task_id)| {
                TaskName::Numbered {
                    index,
                    attempt,
                    stage_id,
                    stage_attempt_id,
                    task_id,
                }
            }),
    ]
}

#[cfg(test)]
pub(crate) fn arb_extras() -> impl Strategy<Value = Option<Arc<TaskExtras>>> {
    any::<TaskExtras>().prop_map(TaskExtras::shared)
}

#[cfg(test)]
pub(crate) fn arb_bytes() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..300).prop_map(Bytes::from)
}

/// Where a message goes and how it is answered: the RPC envelope's routing part.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug), attr(allow(missing_docs)))]
pub enum Route {
    /// A one-way message to the named endpoint; no reply is expected.
    OneWay {
        /// Name of the receiving endpoint.
        #[rkyv(with = AsArchivedString)]
        #[cfg_attr(test, proptest(strategy = "arb_shared_str()"))]
        endpoint: SharedStr,
    },
    /// A request to the named endpoint; the answer carries the same request id.
    Ask {
        /// Chosen by the asker, unique among its outstanding asks on this connection.
        request_id: u64,
        /// Name of the receiving endpoint.
        #[rkyv(with = AsArchivedString)]
        #[cfg_attr(test, proptest(strategy = "arb_shared_str()"))]
        endpoint: SharedStr,
    },
    /// The answer to an ask; the message is the reply value.
    Reply {
        /// The id of the ask being answered.
        request_id: u64,
    },
    /// A failed ask; the message is [`Message::Empty`].
    ErrorReply {
        /// The id of the ask being answered.
        request_id: u64,
        /// The error's text, shown to the asker.
        error: String,
    },
}

/// One frame's payload: a route and a message.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct Envelope {
    /// Where the message goes.
    pub route: Route,
    /// What it says.
    pub message: Message,
}

/// The state of a task, as executors report it and the scheduler tracks it.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug, Clone, Copy, PartialEq, Eq), attr(allow(missing_docs)))]
pub enum TaskState {
    /// Chosen for an executor, not yet reported running.
    Launching,
    /// Running on an executor.
    Running,
    /// Ended with a result.
    Finished,
    /// Ended with an error.
    Failed,
    /// Ended because it was asked to stop.
    Killed,
    /// Gone with its executor.
    Lost,
}

impl TaskState {
    /// Whether the task has ended (FINISHED, FAILED, KILLED or LOST).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            TaskState::Finished | TaskState::Failed | TaskState::Killed | TaskState::Lost
        )
    }

    /// The state's name as the seeds print it.
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Launching => "LAUNCHING",
            TaskState::Running => "RUNNING",
            TaskState::Finished => "FINISHED",
            TaskState::Failed => "FAILED",
            TaskState::Killed => "KILLED",
            TaskState::Lost => "LOST",
        }
    }
}

impl std::fmt::Display for TaskState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl From<&ArchivedTaskState> for TaskState {
    fn from(state: &ArchivedTaskState) -> Self {
        match state {
            ArchivedTaskState::Launching => TaskState::Launching,
            ArchivedTaskState::Running => TaskState::Running,
            ArchivedTaskState::Finished => TaskState::Finished,
            ArchivedTaskState::Failed => TaskState::Failed,
            ArchivedTaskState::Killed => TaskState::Killed,
            ArchivedTaskState::Lost => TaskState::Lost,
        }
    }
}

/// Why an executor was lost (Spark's `ExecutorLossReason` family).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug), attr(allow(missing_docs)))]
pub enum ExecutorLossReason {
    /// The executor process exited.
    ExecutorExited {
        /// Its exit code.
        exit_code: i32,
        /// Whether the application caused the exit (it then counts towards task failures).
        exit_caused_by_app: bool,
        /// What the cluster manager said.
        reason: String,
    },
    /// The driver killed the executor.
    ExecutorKilled,
    /// The executor is gone and the reason is not known yet.
    LossReasonPending,
    /// The executor's process or host went away (the seeds' `SlaveLost`).
    SlaveLost {
        /// What happened, e.g. the seeds' "Remote RPC client disassociated. ..." text.
        message: String,
        /// Whether the whole worker (host) was lost.
        worker_lost: bool,
    },
    /// The executor is being decommissioned.
    ExecutorDecommission {
        /// Why.
        message: String,
    },
}

impl ExecutorLossReason {
    /// Whether tasks lost with the executor count towards `task.maxFailures`, as in
    /// Spark's `TaskSetManager.executorLost`: every loss does but one the driver asked
    /// for (killed, decommissioned), an exit the cluster manager says the application
    /// did not cause, and a loss whose reason is still pending. A task that keeps
    /// crashing its executor (or its host's network) so fails its job after
    /// `task.maxFailures` attempts instead of being retried for ever.
    pub fn counts_towards_task_failures(&self) -> bool {
        match self {
            ExecutorLossReason::ExecutorExited {
                exit_caused_by_app, ..
            } => *exit_caused_by_app,
            ExecutorLossReason::SlaveLost { .. } => true,
            ExecutorLossReason::ExecutorKilled
            | ExecutorLossReason::LossReasonPending
            | ExecutorLossReason::ExecutorDecommission { .. } => false,
        }
    }
}

impl std::fmt::Display for ExecutorLossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // As Spark's, the cluster manager's text ("executor 2 exited with code 3"),
            // and the code after it when the text does not name it ("executor 2 was
            // killed by signal 9 (exit code 137)"): a log of the loss always shows it.
            ExecutorLossReason::ExecutorExited {
                exit_code, reason, ..
            } if reason.is_empty() => {
                write!(f, "Executor exited with code {exit_code}")
            }
            ExecutorLossReason::ExecutorExited {
                exit_code, reason, ..
            } if names_exit_code(reason, *exit_code) => f.write_str(reason),
            ExecutorLossReason::ExecutorExited {
                exit_code, reason, ..
            } => write!(f, "{reason} (exit code {exit_code})"),
            ExecutorLossReason::ExecutorKilled => f.write_str("Executor killed by driver."),
            ExecutorLossReason::LossReasonPending => f.write_str("Pending loss reason."),
            ExecutorLossReason::SlaveLost { message, .. } => f.write_str(message),
            ExecutorLossReason::ExecutorDecommission { message } => {
                write!(f, "Executor decommission: {message}")
            }
        }
    }
}

/// Whether `reason` says "exited with code `code`" (that code, not one it begins: 13 is
/// not 1), so that the loss's text need not repeat it.
fn names_exit_code(reason: &str, code: i32) -> bool {
    const SAYS: &str = "exited with code ";
    let code = code.to_string();
    reason.match_indices(SAYS).any(|(at, _)| {
        let rest = &reason[at + SAYS.len()..];
        rest.strip_prefix(code.as_str())
            .is_some_and(|after| !after.starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// A file or jar a task needs, with the time it was added (Spark's `addedFiles` entries).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct Dependency {
    /// The file's or jar's URI or name.
    pub name: String,
    /// When it was added, in milliseconds since the epoch.
    pub timestamp: i64,
}

/// A task property (Spark's local properties).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct Property {
    /// Key.
    pub key: String,
    /// Value.
    pub value: String,
}

/// The files, jars and local properties of a task: the same for every task of a task
/// set, so a [`TaskDescription`] holds them shared, and not at all when all three are
/// empty (as they are for most tasks).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct TaskExtras {
    /// Files the task needs, with timestamps.
    #[rkyv(with = LeanVec)]
    pub added_files: Vec<Dependency>,
    /// Jars the task needs, with timestamps.
    #[rkyv(with = LeanVec)]
    pub added_jars: Vec<Dependency>,
    /// Local properties.
    #[rkyv(with = LeanVec)]
    pub properties: Vec<Property>,
}

impl TaskExtras {
    /// No files, jars or properties.
    pub const NONE: TaskExtras = TaskExtras {
        added_files: Vec::new(),
        added_jars: Vec::new(),
        properties: Vec::new(),
    };

    /// Whether it has no files, jars or properties.
    pub fn is_empty(&self) -> bool {
        self.added_files.is_empty() && self.added_jars.is_empty() && self.properties.is_empty()
    }

    /// What a task description holds of these: `None` when they are empty, else shared.
    pub fn shared(self) -> Option<Arc<TaskExtras>> {
        (!self.is_empty()).then(|| Arc::new(self))
    }
}

impl ArchivedTaskExtras {
    /// Whether these are `extras`, list for list: a receiver that decoded the extras of
    /// one task reuses them for the next tasks of its task set rather than decode (and
    /// allocate) them again.
    pub fn matches(&self, extras: &TaskExtras) -> bool {
        let same_dependencies = |archived: &[ArchivedDependency], owned: &[Dependency]| {
            archived.len() == owned.len()
                && archived
                    .iter()
                    .zip(owned)
                    .all(|(a, o)| a.timestamp == o.timestamp && a.name == o.name)
        };
        same_dependencies(&self.added_files, &extras.added_files)
            && same_dependencies(&self.added_jars, &extras.added_jars)
            && self.properties.len() == extras.properties.len()
            && self
                .properties
                .iter()
                .zip(&extras.properties)
                .all(|(a, o)| a.key == o.key && a.value == o.value)
    }
}

/// What a description without files, jars or properties reads as.
static NO_EXTRAS: TaskExtras = TaskExtras::NONE;

impl TaskDescription {
    /// Its files, jars and local properties (all empty if it has none).
    pub fn extras(&self) -> &TaskExtras {
        self.extras.as_deref().unwrap_or(&NO_EXTRAS)
    }
}

/// rkyv wrapper that archives a description's `Option<Arc<TaskExtras>>` as the three
/// lists inline, empty for `None`: the same bytes the lists made as fields of their own.
#[derive(Debug)]
pub struct InlineExtras;

impl ArchiveWith<Option<Arc<TaskExtras>>> for InlineExtras {
    type Archived = ArchivedTaskExtras;
    type Resolver = TaskExtrasResolver;

    fn resolve_with(
        field: &Option<Arc<TaskExtras>>,
        resolver: TaskExtrasResolver,
        out: Place<ArchivedTaskExtras>,
    ) {
        field
            .as_deref()
            .unwrap_or(&NO_EXTRAS)
            .resolve(resolver, out);
    }
}

impl<S> SerializeWith<Option<Arc<TaskExtras>>, S> for InlineExtras
where
    S: Fallible + rkyv::ser::Allocator + rkyv::ser::Writer + ?Sized,
    S::Error: rkyv::rancor::Source,
{
    fn serialize_with(
        field: &Option<Arc<TaskExtras>>,
        serializer: &mut S,
    ) -> Result<TaskExtrasResolver, S::Error> {
        field.as_deref().unwrap_or(&NO_EXTRAS).serialize(serializer)
    }
}

impl<D> DeserializeWith<ArchivedTaskExtras, Option<Arc<TaskExtras>>, D> for InlineExtras
where
    D: Fallible + ?Sized,
    D::Error: rkyv::rancor::Source,
{
    fn deserialize_with(
        field: &ArchivedTaskExtras,
        deserializer: &mut D,
    ) -> Result<Option<Arc<TaskExtras>>, D::Error> {
        let extras: TaskExtras = field.deserialize(deserializer)?;
        Ok(extras.shared())
    }
}

/// Everything an executor needs to run one task attempt.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct TaskDescription {
    /// Unique id of this task attempt within the application (TID).
    pub task_id: u64,
    /// Attempt number of the task (0 for the first).
    pub attempt_number: u32,
    /// The executor the task was assigned to.
    #[rkyv(with = AsArchivedString)]
    #[cfg_attr(test, proptest(strategy = "arb_shared_str()"))]
    pub executor_id: SharedStr,
    /// Display name, e.g. "task 3.0 in stage 1.0 (TID 17)".
    #[cfg_attr(test, proptest(strategy = "arb_task_name()"))]
    pub name: TaskName,
    /// Index of the task within its task set.
    pub index: u32,
    /// Partition the task computes.
    pub partition_id: u32,
    /// Files, jars and local properties, shared by the tasks of a task set; `None` when
    /// there are none (`Some` of three empty lists travels as they do and is read back
    /// as `None`). On the wire, three lists.
    #[rkyv(with = InlineExtras)]
    #[cfg_attr(test, proptest(strategy = "arb_extras()"))]
    pub extras: Option<Arc<TaskExtras>>,
    /// Cores the task uses (task.cpus).
    pub cpus: u32,
    /// The serialized task: names its function and carries its input. Opaque here.
    #[cfg_attr(test, proptest(strategy = "arb_bytes()"))]
    pub serialized_task: Bytes,
}

/// Metrics of one task, reported in heartbeats and with its result.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct TaskMetrics {
    /// Time spent decoding the task before running it, in nanoseconds.
    pub deserialize_time_ns: u64,
    /// Wall time of the task function, in nanoseconds.
    pub run_time_ns: u64,
    /// CPU time of the task function, in nanoseconds.
    pub cpu_time_ns: u64,
    /// Size of the serialized result, in bytes.
    pub result_size: u64,
    /// Bytes the task read.
    pub input_bytes: u64,
    /// Bytes the task wrote.
    pub output_bytes: u64,
}

/// What a task added to one accumulator: a long sum, a double sum, or the bytes of a
/// user-defined merge.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug), attr(allow(missing_docs)))]
pub enum AccumulatorValue {
    /// A sum of `i64`s (wrapping).
    Long(i64),
    /// A sum of `f64`s, as the sum's bits ([`f64::to_bits`]): the message types stay
    /// `Eq`, and a NaN travels as it was made.
    Double(u64),
    /// The bytes of a user-defined merge (the driver merges them with the function the
    /// accumulator was registered with).
    Bytes(#[rkyv(with = LeanVec)] Vec<u8>),
}

impl AccumulatorValue {
    /// A double sum's value.
    pub fn double(value: f64) -> Self {
        AccumulatorValue::Double(value.to_bits())
    }

    /// The kind's name, for messages: "long", "double" or "bytes".
    pub fn kind_name(&self) -> &'static str {
        match self {
            AccumulatorValue::Long(_) => "long",
            AccumulatorValue::Double(_) => "double",
            AccumulatorValue::Bytes(_) => "bytes",
        }
    }
}

/// The most accumulators one task attempt may add to: its updates must fit beside its
/// result in a message. Executors refuse more adds; the driver ignores updates past it.
pub const MAX_TASK_ACCUMULATORS: usize = 1024;

/// The most bytes the values of a task's bytes accumulators may take in all, for the
/// same reason. Executors refuse more; the driver ignores bytes updates past it.
pub const MAX_TASK_ACCUMULATOR_BYTES: usize = 32 * 1024;

/// The current value of one accumulator of a task: what the task added so far (partial,
/// in a heartbeat) or in all (with its result).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct AccumulatorUpdate {
    /// Accumulator id, as the driver registered it.
    pub id: u64,
    /// Optional display name (executors send none: the driver knows it).
    pub name: Option<String>,
    /// Value.
    pub value: AccumulatorValue,
}

/// Metrics and accumulator values of one running task, in a heartbeat.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct TaskAccumUpdates {
    /// The task.
    pub task_id: u64,
    /// Its metrics so far.
    pub metrics: TaskMetrics,
    /// Its accumulators' values so far.
    pub accumulators: Vec<AccumulatorUpdate>,
}

/// Where an executor's block store can be reached.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct BlockManagerId {
    /// The executor.
    #[rkyv(with = AsArchivedString)]
    #[cfg_attr(test, proptest(strategy = "arb_shared_str()"))]
    pub executor_id: SharedStr,
    /// Its host.
    pub host: String,
    /// Its RPC port; 0 when it does not listen (flint's executors do not: their blocks
    /// are fetched over the connection they opened to the driver).
    pub port: u16,
}

/// What a shuffle map task produced (the seeds' `MapStatus`): where its output waits, and
/// how many bytes it holds for each reduce partition.
///
/// A map task's result value is a `MapStatus` archived with [`MapStatus::encode`]. Sizes
/// are exact, not Spark's one-byte log-scale estimates: a reducer then knows exactly how
/// many bytes are coming, which `reducer.maxSizeInFlight` accounting needs, for 8 bytes a
/// reduce partition.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct MapStatus {
    /// The block manager holding the map output.
    pub location: BlockManagerId,
    /// Bytes of the output for each reduce partition, by reduce partition id.
    #[cfg_attr(
        test,
        proptest(strategy = "proptest::collection::vec(any::<u64>(), 0..40)")
    )]
    pub sizes: Vec<u64>,
}

/// Why a task could not read a shuffle block (the seeds' `FetchFailed` reason): the
/// block's address, shuffle, map and reduce partition, and what went wrong.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct FetchFailure {
    /// The block manager the block was asked of; `None` when the driver knew no location
    /// for a map output (Spark's `MetadataFetchFailedException`, "Missing an output
    /// location for shuffle ...").
    pub address: Option<BlockManagerId>,
    /// The shuffle read.
    pub shuffle_id: u32,
    /// The map partition whose output could not be read; `None` when no single map
    /// output is to blame.
    pub map_index: Option<u32>,
    /// The reduce partition the task reads.
    pub reduce_id: u32,
    /// What went wrong (connection refused, block missing, peer gone...).
    pub message: String,
}

impl std::fmt::Display for FetchFailure {
    /// Spark's `FetchFailed.toErrorString`, with -1 for a map index that is not known.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.address {
            Some(a) => write!(
                f,
                "FetchFailed(BlockManagerId({}, {}, {}), ",
                a.executor_id, a.host, a.port
            )?,
            None => f.write_str("FetchFailed(null, ")?,
        }
        let map_index = self.map_index.map_or(-1, i64::from);
        write!(
            f,
            "shuffleId={}, mapIndex={map_index}, reduceId={}, message=\n{}\n)",
            self.shuffle_id, self.reduce_id, self.message
        )
    }
}

/// Identifies a block in an executor's block store.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug), attr(allow(missing_docs)))]
pub enum BlockId {
    /// The result of a task too large to travel in its status update.
    TaskResult {
        /// The task.
        task_id: u64,
    },
}

impl std::fmt::Display for BlockId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockId::TaskResult { task_id } => write!(f, "taskresult_{task_id}"),
        }
    }
}

/// Why a task attempt failed.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug, Clone, Copy, PartialEq, Eq), attr(allow(missing_docs)))]
pub enum TaskFailureKind {
    /// The task function returned an error or panicked.
    Exception,
    /// The task's result could not be fetched.
    ResultLost,
    /// The task's executor was lost.
    ExecutorLost,
    /// The task was killed.
    TaskKilled,
    /// The task could not be decoded or its function is not registered.
    Undeserializable,
    // Variants are added at the end: an archived enum's tag is its variant's position.
    /// The task could not fetch a shuffle block it reads (the seeds' `FetchFailed`): the
    /// map output is lost, not the task at fault. It does not count towards
    /// task.maxFailures; the DAG scheduler recomputes the output instead.
    FetchFailed,
}

/// What a task attempt produced: carried by [`StatusUpdate`].
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug), attr(allow(missing_docs)))]
pub enum TaskOutcome {
    /// No result (RUNNING, LAUNCHING).
    None,
    /// A result that fits in the message.
    Direct {
        /// The result value, opaque here.
        #[cfg_attr(test, proptest(strategy = "arb_bytes()"))]
        value: Bytes,
        /// The task's metrics.
        metrics: TaskMetrics,
        /// Its final accumulator values.
        #[rkyv(with = LeanVec)]
        accumulators: Vec<AccumulatorUpdate>,
    },
    /// A result kept in the executor's block store, to be fetched.
    Indirect {
        /// The block holding the result.
        block_id: BlockId,
        /// Its size in bytes.
        size: u64,
        /// The task's metrics.
        metrics: TaskMetrics,
        /// Its final accumulator values (they travel here, not in the block: the driver
        /// merges them once the block is fetched).
        #[rkyv(with = LeanVec)]
        accumulators: Vec<AccumulatorUpdate>,
    },
    /// A failure (FAILED, KILLED, LOST).
    Failure {
        /// What kind of failure.
        kind: TaskFailureKind,
        /// Its description, shown to the user.
        message: String,
        /// Whether it counts towards task.maxFailures.
        counts_towards_failures: bool,
        /// The task's metrics up to the failure.
        metrics: TaskMetrics,
    },
    // Variants are added at the end: an archived enum's tag is its variant's position.
    /// A task that could not fetch a shuffle block it reads (state FAILED): which map
    /// output, so that the driver can mark it lost and recompute it. Never counts
    /// towards task.maxFailures.
    FetchFailed {
        /// What could not be fetched, and why (boxed: a status update of the common
        /// kinds stays small).
        failure: Box<FetchFailure>,
        /// The task's metrics up to the failure.
        metrics: TaskMetrics,
    },
}

/// An executor's report of a task's state (the seeds' `StatusUpdate`).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct StatusUpdate {
    /// The reporting executor.
    #[rkyv(with = AsArchivedString)]
    #[cfg_attr(test, proptest(strategy = "arb_shared_str()"))]
    pub executor_id: SharedStr,
    /// The task attempt.
    pub task_id: u64,
    /// Its state.
    pub state: TaskState,
    /// Its result or failure, for finished states.
    pub outcome: TaskOutcome,
}

/// An executor's registration (the seeds' `RegisterExecutor`).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct RegisterExecutor {
    /// The executor's id.
    #[rkyv(with = AsArchivedString)]
    #[cfg_attr(test, proptest(strategy = "arb_shared_str()"))]
    pub executor_id: SharedStr,
    /// Address ("host:port") where the executor's RPC env listens; empty when it does
    /// not (flint's executors do not, as the seeds' executors run their RpcEnv in client
    /// mode: the driver reaches them over the connection they opened).
    pub executor_address: String,
    /// Name of the executor's endpoint there.
    pub endpoint_name: String,
    /// The executor's host name.
    pub hostname: String,
    /// Cores the executor offers.
    pub cores: u32,
    /// Links to the executor's logs, by name.
    pub log_urls: Vec<Property>,
}

/// An executor's periodic report (the seeds' `Heartbeat`).
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct Heartbeat {
    /// The executor.
    #[rkyv(with = AsArchivedString)]
    #[cfg_attr(test, proptest(strategy = "arb_shared_str()"))]
    pub executor_id: SharedStr,
    /// Metrics and accumulators of each running task.
    pub accum_updates: Vec<TaskAccumUpdates>,
    /// Where its block store is.
    pub block_manager_id: BlockManagerId,
}

/// How the message of a [`Message::RegisterExecutorFailed`] begins when the driver
/// refuses an executor because it is stopping. The executor exits quietly (code 0), as
/// it would have on StopExecutor had it registered a moment earlier: an executor the
/// driver started is being killed at that moment, and its last line should not read as
/// a failure.
pub const DRIVER_STOPPING_REFUSAL: &str = "The driver is stopping";

/// Every message flint sends. The variant decides the frame header's kind byte.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug), attr(allow(missing_docs)))]
pub enum Message {
    /// Executor to driver: register me.
    RegisterExecutor(RegisterExecutor),
    /// Driver to executor: you are registered.
    RegisteredExecutor,
    /// Driver to executor: registration refused, with the reason.
    RegisterExecutorFailed {
        /// e.g. "Duplicate executor ID: 3".
        message: String,
    },
    /// Driver to executor: run this task.
    LaunchTask(TaskDescription),
    /// Executor to driver: a task's state changed.
    StatusUpdate(StatusUpdate),
    /// Kill a task attempt.
    KillTask {
        /// The task attempt.
        task_id: u64,
        /// The executor running it.
        #[rkyv(with = AsArchivedString)]
        #[cfg_attr(test, proptest(strategy = "arb_shared_str()"))]
        executor_id: SharedStr,
        /// Whether to interrupt the running thread.
        interrupt_thread: bool,
        /// Why, shown in the task's KILLED outcome.
        reason: String,
    },
    /// Kill every executor on a host.
    KillExecutorsOnHost {
        /// The host.
        host: String,
    },
    /// Make resource offers now.
    ReviveOffers,
    /// Stop the driver endpoint.
    StopDriver,
    /// Ask every executor to shut down.
    StopExecutors,
    /// Driver to executor: shut down.
    StopExecutor,
    /// Remove an executor, with the reason.
    RemoveExecutor {
        /// The executor.
        #[rkyv(with = AsArchivedString)]
        #[cfg_attr(test, proptest(strategy = "arb_shared_str()"))]
        executor_id: SharedStr,
        /// Why.
        reason: ExecutorLossReason,
    },
    /// Remove a worker (host), with the reason.
    RemoveWorker {
        /// The worker.
        worker_id: String,
        /// Its host.
        host: String,
        /// Why.
        message: String,
    },
    /// Executor backend to itself: shut down now.
    Shutdown,
    /// Executor to driver: I am alive, here are my running tasks' metrics.
    Heartbeat(Heartbeat),
    /// Driver to executor: answer to a heartbeat.
    HeartbeatResponse {
        /// The driver does not know this executor: register again.
        reregister_block_manager: bool,
    },
    /// Driver to executor: send a chunk of a block.
    FetchBlockChunk {
        /// The block.
        block_id: BlockId,
        /// Where the chunk starts.
        offset: u64,
        /// The most bytes to send.
        max_len: u32,
    },
    /// Executor to driver: a chunk of a block.
    BlockChunk {
        /// The block.
        block_id: BlockId,
        /// Where this chunk starts.
        offset: u64,
        /// The block's whole size.
        total_size: u64,
        /// The chunk's bytes.
        #[cfg_attr(test, proptest(strategy = "arb_bytes()"))]
        data: Bytes,
    },
    /// Driver to executor: the block is no longer needed.
    RemoveBlock {
        /// The block.
        block_id: BlockId,
    },
    /// A yes/no reply to an ask.
    Ack {
        /// The answer.
        ok: bool,
    },
    /// A message with nothing in it (the body of error replies).
    Empty,
    /// Connection authentication, step 1 (connecting side): a fresh random nonce.
    AuthChallenge {
        /// 32 random bytes chosen by the connecting side.
        nonce: [u8; 32],
    },
    /// Connection authentication, step 2 (accepting side): its own nonce, and proof that
    /// it knows the shared secret (an HMAC-SHA256 over both nonces).
    AuthResponse {
        /// 32 random bytes chosen by the accepting side.
        nonce: [u8; 32],
        /// HMAC-SHA256 proof of the accepting side.
        proof: [u8; 32],
    },
    /// Connection authentication, step 3 (connecting side): its proof of the secret.
    AuthProof {
        /// HMAC-SHA256 proof of the connecting side.
        proof: [u8; 32],
    },
    /// An application's own message, for embedders of the transport.
    Custom {
        /// The application's message type.
        tag: u32,
        /// Its bytes, opaque here. They start at a multiple of
        /// [`BODY_ALIGN`](crate::BODY_ALIGN) in the payload, so that an rkyv archive in
        /// them is read in place.
        #[rkyv(with = crate::aligned_bytes::AlignedBytes)]
        #[cfg_attr(test, proptest(strategy = "arb_bytes()"))]
        body: Bytes,
    },
    // Variants are added at the end: an archived enum's tag is its variant's position.
    /// Sent by a side that closes a connection for something its peer did (a failed
    /// handshake, a frame it cannot take, a timeout, too many connections), just before it
    /// closes, so that the peer can say why instead of seeing only the end of the stream.
    Refused {
        /// Why, as the refusing side logs it, cut to
        /// [`MAX_REFUSAL_TEXT`](crate::MAX_REFUSAL_TEXT) bytes.
        reason: String,
    },
    /// Executor to the driver's map output tracker
    /// ([`MAP_OUTPUT_TRACKER_ENDPOINT`](crate::MAP_OUTPUT_TRACKER_ENDPOINT)), an ask: where
    /// the map outputs of a shuffle are.
    GetMapOutputStatuses {
        /// The shuffle.
        shuffle_id: u32,
    },
    /// The driver's answer: each map partition's status, `None` where its output is
    /// missing, as of the tracker's epoch.
    MapOutputStatuses {
        /// The shuffle.
        shuffle_id: u32,
        /// The tracker's map-output epoch when it answered.
        epoch: u64,
        /// By map partition.
        #[cfg_attr(
            test,
            proptest(strategy = "proptest::collection::vec(any::<Option<MapStatus>>(), 0..4)")
        )]
        statuses: Vec<Option<MapStatus>>,
    },
    /// Executor to another executor's block server
    /// ([`BLOCK_MANAGER_ENDPOINT`](crate::BLOCK_MANAGER_ENDPOINT)), an ask: up to `max_len`
    /// bytes of a shuffle block from `offset`.
    FetchShuffleBlock {
        /// The shuffle.
        shuffle_id: u32,
        /// The map output.
        map_index: u32,
        /// The reduce partition.
        reduce_id: u32,
        /// Where the chunk starts.
        offset: u64,
        /// The most bytes to send.
        max_len: u32,
    },
    /// The block server's answer: a chunk of the block, and the block's whole size.
    ShuffleBlock {
        /// Where this chunk starts.
        offset: u64,
        /// The block's whole size.
        total_size: u64,
        /// The chunk's bytes: records, possibly cut at either end.
        #[cfg_attr(test, proptest(strategy = "arb_bytes()"))]
        data: Bytes,
    },
    /// Driver to executor: the shuffle is no longer needed; its map outputs can go.
    RemoveShuffle {
        /// The shuffle.
        shuffle_id: u32,
    },
    /// Executor to the driver's broadcast manager
    /// ([`BROADCAST_ENDPOINT`](crate::BROADCAST_ENDPOINT)), an ask: how a broadcast is cut
    /// into pieces, their checksums, and which executors hold which pieces.
    GetBroadcastInfo {
        /// The broadcast.
        broadcast_id: u64,
    },
    /// The driver's answer to [`Message::GetBroadcastInfo`].
    BroadcastInfo(BroadcastInfo),
    /// An ask, of the driver's broadcast manager or of an executor's block server
    /// ([`BLOCK_MANAGER_ENDPOINT`](crate::BLOCK_MANAGER_ENDPOINT)): one piece of a
    /// broadcast (the seeds' `broadcast_<id>_piece<n>` block).
    FetchBroadcastPiece {
        /// The broadcast.
        broadcast_id: u64,
        /// The piece, from 0.
        piece: u32,
    },
    /// The answer to [`Message::FetchBroadcastPiece`]: the piece's bytes, to be checked
    /// against the checksum the driver gave.
    BroadcastPiece {
        /// The broadcast.
        broadcast_id: u64,
        /// The piece.
        piece: u32,
        /// Its bytes.
        #[cfg_attr(test, proptest(strategy = "arb_bytes()"))]
        data: Bytes,
    },
    /// Executor to the driver's broadcast manager, one-way: it now holds (and its block
    /// server serves) this piece, checked (the seeds' `updateBlockInfo` of a piece).
    BroadcastPieceStored {
        /// The broadcast.
        broadcast_id: u64,
        /// [`BroadcastInfo::generation`] of the description the piece was fetched by: a
        /// report of a generation unpersisted since is dropped.
        generation: u64,
        /// The piece.
        piece: u32,
        /// The executor's block server.
        location: BlockManagerId,
    },
    /// Driver to executor, one-way: forget the broadcast's value and pieces (unpersisted,
    /// or its job ended); a later task that reads it fetches it again.
    UnpersistBroadcast {
        /// The broadcast.
        broadcast_id: u64,
        /// Its [`BroadcastInfo::generation`] from this unpersist on: a value (or the
        /// pieces of one) fetched by a description of this generation or later was
        /// fetched after the unpersist, and the driver counts on its reports; it stays.
        generation: u64,
    },
    /// An ask of an executor's block server: what it has served of broadcasts so far.
    GetBlockServerStats,
    /// The answer to [`Message::GetBlockServerStats`].
    BlockServerStats {
        /// Broadcast piece bytes served to other executors.
        broadcast_bytes_served: u64,
        /// Broadcast pieces served.
        broadcast_pieces_served: u64,
    },
    /// Driver to executor: run these tasks, in this order; what a run of
    /// [`Message::LaunchTask`]s to one executor says, in one frame. The driver sends it
    /// when one offer round gives an executor several tasks (launch pipelining,
    /// `executor.taskPrefetch`, or an executor of several cores): the frame's header,
    /// checksum and routing are paid once for all of them.
    LaunchTasks {
        /// The tasks, each as [`Message::LaunchTask`] carries it.
        #[cfg_attr(
            test,
            proptest(strategy = "proptest::collection::vec(any::<TaskDescription>(), 0..3)")
        )]
        tasks: Vec<TaskDescription>,
    },
    /// Executor to driver: several tasks' state changes, in the order they happened;
    /// what a run of [`Message::StatusUpdate`]s says, in one frame. A runner sends it
    /// for the quick tasks whose updates it held while it ran the next ones.
    StatusUpdates {
        /// The updates, each as [`Message::StatusUpdate`] carries it.
        #[cfg_attr(
            test,
            proptest(strategy = "proptest::collection::vec(any::<StatusUpdate>(), 0..3)")
        )]
        updates: Vec<StatusUpdate>,
    },
}

impl ArchivedMessage {
    /// The status updates this archived message carries, read in place: its one for a
    /// `StatusUpdate`, all of a `StatusUpdates`, none for any other message.
    pub fn status_updates(&self) -> &[ArchivedStatusUpdate] {
        match self {
            ArchivedMessage::StatusUpdate(update) => std::slice::from_ref(update),
            ArchivedMessage::StatusUpdates { updates } => updates,
            _ => &[],
        }
    }

    /// The tasks this archived message launches, read in place: its one for a
    /// `LaunchTask`, all of a `LaunchTasks`, none for any other message.
    pub fn launched_tasks(&self) -> &[ArchivedTaskDescription] {
        match self {
            ArchivedMessage::LaunchTask(task) => std::slice::from_ref(task),
            ArchivedMessage::LaunchTasks { tasks } => tasks,
            _ => &[],
        }
    }
}

impl Message {
    /// The status updates this message carries: its one for a
    /// [`Message::StatusUpdate`], all of a [`Message::StatusUpdates`], none for any
    /// other message.
    pub fn status_updates(&self) -> &[StatusUpdate] {
        match self {
            Message::StatusUpdate(update) => std::slice::from_ref(update),
            Message::StatusUpdates { updates } => updates,
            _ => &[],
        }
    }

    /// The tasks this message launches: its one for a [`Message::LaunchTask`], all of a
    /// [`Message::LaunchTasks`], none for any other message.
    pub fn launched_tasks(&self) -> &[TaskDescription] {
        match self {
            Message::LaunchTask(task) => std::slice::from_ref(task),
            Message::LaunchTasks { tasks } => tasks,
            _ => &[],
        }
    }

    /// The launches of `tasks` as one message: the seeds' [`Message::LaunchTask`] for
    /// one task, a [`Message::LaunchTasks`] for several, `None` for none. The tasks move
    /// into it and `tasks` is left empty; [`Message::put_back_launches`] returns them,
    /// with the list's memory, once the message is sent.
    pub fn take_launches(tasks: &mut Vec<TaskDescription>) -> Option<Message> {
        match tasks.len() {
            0 => None,
            1 => tasks.pop().map(Message::LaunchTask),
            _ => Some(Message::LaunchTasks {
                tasks: std::mem::take(tasks),
            }),
        }
    }

    /// Puts the tasks of a message made by [`Message::take_launches`] back into `tasks`
    /// (empty), in their order; nothing for any other message.
    pub fn put_back_launches(self, tasks: &mut Vec<TaskDescription>) {
        debug_assert!(tasks.is_empty());
        match self {
            Message::LaunchTask(task) => tasks.push(task),
            Message::LaunchTasks { tasks: taken } => *tasks = taken,
            _ => {}
        }
    }

    /// The status updates of `updates` as one message: the seeds'
    /// [`Message::StatusUpdate`] for one, a [`Message::StatusUpdates`] for several,
    /// `None` for none; as [`Message::take_launches`] does for tasks.
    pub fn take_status_updates(updates: &mut Vec<StatusUpdate>) -> Option<Message> {
        match updates.len() {
            0 => None,
            1 => updates.pop().map(Message::StatusUpdate),
            _ => Some(Message::StatusUpdates {
                updates: std::mem::take(updates),
            }),
        }
    }

    /// Puts the updates of a message made by [`Message::take_status_updates`] back into
    /// `updates` (empty), in their order; nothing for any other message.
    pub fn put_back_status_updates(self, updates: &mut Vec<StatusUpdate>) {
        debug_assert!(updates.is_empty());
        match self {
            Message::StatusUpdate(update) => updates.push(update),
            Message::StatusUpdates { updates: taken } => *updates = taken,
            _ => {}
        }
    }
}

/// The most pieces a broadcast is cut into: the driver makes its pieces larger than
/// `broadcast.blockSize` rather than more, and an executor refuses a description of
/// more, so that a piece's bookkeeping stays small beside the value.
pub const MAX_BROADCAST_PIECES: u32 = 1 << 16;

/// Where the pieces of a broadcast are: the driver's answer to
/// [`Message::GetBroadcastInfo`].
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct BroadcastInfo {
    /// The broadcast.
    pub broadcast_id: u64,
    /// How many times it was unpersisted so far: its executors' reports of pieces carry
    /// it, so that one sent before an unpersist and received after it is dropped.
    pub generation: u64,
    /// Its whole size in bytes.
    pub total_size: u64,
    /// The size of every piece but the last (`broadcast.blockSize`, at most what a
    /// message carries).
    pub piece_size: u32,
    /// The CRC32 of each piece, by piece.
    #[cfg_attr(
        test,
        proptest(strategy = "proptest::collection::vec(any::<u32>(), 0..20)")
    )]
    pub checksums: Vec<u32>,
    /// Executors that hold pieces, with which: a sample, not necessarily all.
    #[cfg_attr(
        test,
        proptest(strategy = "proptest::collection::vec(any::<PieceHolder>(), 0..4)")
    )]
    pub holders: Vec<PieceHolder>,
}

/// An executor that holds pieces of a broadcast, in [`BroadcastInfo`].
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(proptest_derive::Arbitrary))]
#[rkyv(derive(Debug))]
pub struct PieceHolder {
    /// Its block server.
    pub location: BlockManagerId,
    /// The pieces it holds.
    #[cfg_attr(
        test,
        proptest(strategy = "proptest::collection::vec(any::<u32>(), 0..20)")
    )]
    pub pieces: Vec<u32>,
}
