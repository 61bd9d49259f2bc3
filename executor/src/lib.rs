//! flint-executor: the executor side of flint.
//!
//! An executor is a long-lived process that registers with the driver, runs the tasks the
//! driver launches on it, reports how each ended, and sends heartbeats. This crate holds:
//!
//! - [`run_executor`]: an executor process from start to end (its RPC environment, its
//!   endpoint, registration, heartbeats) returning why it ended ([`ExecutorExit`], with
//!   the process exit code);
//! - [`Executor`]: the running-task registry and a pool of `cores` task runner threads;
//! - [`TaskRegistry`]: task functions by name, with flint's built-ins (`noop`, `echo`,
//!   `sleep`, `spin`, `fail-n-attempts`, `large-result`, `accumulate`, and the stage
//!   functions of [`jobs`]), and the [`TaskContext`] a function runs with (through which
//!   it adds to accumulators, [`accumulators`]);
//! - [`shuffle`]: map tasks' outputs (written through the context, kept in memory up to
//!   `shuffle.maxMemory`, spilled to `local.dir` beyond it), the block server that serves
//!   them to other executors on `blockManager.port`, and the fetch of a reduce task's
//!   partition;
//! - [`Heartbeater`]: the heartbeat schedule and failure count, a state machine with an
//!   injected clock;
//! - [`BlockStore`]: results too large for a message, fetched by the driver in chunks;
//! - [`broadcast`]: broadcast variables, fetched in checked pieces from the driver and
//!   other executors once per executor, and read by tasks without a copy
//!   ([`TaskContext::broadcast`]).
//!
//! # The protocol with the driver
//!
//! 1. The executor asks the driver's [`flint_wire::DRIVER_ENDPOINT`] with
//!    `RegisterExecutor`; `RegisteredExecutor` accepts it, `RegisterExecutorFailed` ends
//!    it ([`ExecutorExit::RegistrationFailed`]).
//! 2. Over the connection the executor opened, the driver sends `LaunchTask`, `KillTask`,
//!    `StopExecutor`, `RemoveBlock`, `RemoveShuffle`, and asks `FetchBlockChunk`.
//!    The executor asks the driver's [`flint_wire::MAP_OUTPUT_TRACKER_ENDPOINT`]
//!    `GetMapOutputStatuses` for a shuffle its reduce tasks read (once per map-output
//!    epoch), and other executors' [`flint_wire::BLOCK_MANAGER_ENDPOINT`]s
//!    `FetchShuffleBlock`; it listens on `blockManager.port` for theirs, and nothing else.
//!    For a broadcast a task reads, it asks the driver's
//!    [`flint_wire::BROADCAST_ENDPOINT`] `GetBroadcastInfo`, then `FetchBroadcastPiece`
//!    of other executors' block servers and of the driver, and tells the driver
//!    `BroadcastPieceStored` for each piece it holds; its block server answers
//!    `FetchBroadcastPiece` and `GetBlockServerStats`, and the driver sends
//!    `UnpersistBroadcast` when the value may go.
//! 3. Each task ends with one `StatusUpdate`: FINISHED with its result in the message
//!    when `result + 64 KiB <= rpc.message.maxSize`, else in the block store
//!    (`TaskOutcome::Indirect`); a shuffle map task's result is its map output's
//!    `MapStatus`; FAILED (function error or panic: `Exception`; unknown function or
//!    malformed task: `Undeserializable`; a shuffle block that could not be read:
//!    `TaskOutcome::FetchFailed`); or KILLED. RUNNING is not sent. A FINISHED update
//!    carries the task's accumulator values.
//! 4. Every `executor.heartbeatInterval` (after a random initial delay) it asks
//!    [`flint_wire::HEARTBEAT_ENDPOINT`] with a `Heartbeat` carrying its running tasks'
//!    metrics and accumulator values so far; `executor.heartbeat.maxFailures` failures in a row end it with code 56.
//! 5. The driver's connection closing ends it ([`ExecutorExit::DriverLost`]);
//!    `StopExecutor` ends it with code 0. A connection closed before the driver
//!    answered the registration ends it with the registration's error; one whose
//!    authentication failed (on either side) with code 77
//!    ([`ExecutorExit::AuthenticationFailed`]), the cause in its last line.
//!
//! # Accumulators: how a task adds
//!
//! The driver registers an accumulator and hands its id to the tasks in their input; a
//! task function adds through its context: [`TaskContext::add_long`],
//! [`TaskContext::add_double`], or [`TaskContext::merge_bytes`] with the user-defined
//! merge the driver registered. While the task runs, heartbeats carry its values as
//! progress; when it returns `Ok`, they travel with its result (in the status update,
//! also for a result left in the block store) and the driver merges them once for the
//! partition. A failed or killed attempt sends none. See [`accumulators`].
//!
//! ```
//! use bytes::Bytes;
//! use flint_executor::{TaskContext, TaskError};
//! use flint_wire::AccumulatorValue;
//!
//! /// Counts the lines of its input into accumulator 1, and the empty ones into 2.
//! fn count_lines(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
//!     for line in input.split(|&b| b == b'\n') {
//!         ctx.add_long(1, 1)?;
//!         if line.is_empty() {
//!             ctx.add_long(2, 1)?;
//!         }
//!     }
//!     Ok(Bytes::new())
//! }
//!
//! let ctx = TaskContext::new(7, 0);
//! count_lines(&ctx, &Bytes::from_static(b"a\n\nb"))?;
//! let updates = ctx.accumulator_updates();
//! assert_eq!(updates[0].value, AccumulatorValue::Long(3));
//! assert_eq!(updates[1].value, AccumulatorValue::Long(1));
//! # Ok::<(), TaskError>(())
//! ```
//!
//! # Choices where the seeds are silent or do not fit
//!
//! - Kills are cooperative: a task function sees its kill flag through
//!   [`TaskContext::is_interrupted`] (`interrupt_thread` cannot interrupt a Rust
//!   thread). As in the seeds' task runner, a task asked to stop ends KILLED whatever
//!   it returns; a queued task killed before it starts ends KILLED without running.
//! - Per-task log lines (task received, running, finished) are at DEBUG level, not the
//!   seeds' INFO, so that a busy executor does not spend its time logging.
//! - Stopping kills the running tasks and waits for the runners at most [`STOP_GRACE`];
//!   tasks that end after the stop began send no status update.
//! - Launching a task allocates nothing once the executor has warmed up (the launch is
//!   read in place, task handles are reused), and status updates of a run of quick
//!   tasks leave together: a runner holds an update back only while it runs the next
//!   task of the same function, after one that took under 20 µs, and never more than 32
//!   updates nor past the end of its batch (see `tests/no_alloc.rs`). Should that next
//!   task be long after all, the event loop's thread writes the update within a few
//!   milliseconds. With `executor.busyPoll=0` a runner never lends itself to the loop,
//!   and so sends each update at once.
//! - A status update that finds the connection's outbox full is retried for a while
//!   (back-pressure on the runner) rather than dropped.
//! - A `FetchBlockChunk` asking for more than a message can carry is served with the
//!   most that fits (`rpc.message.maxSize` less 64 KiB).
//! - When re-registering (asked by a heartbeat reply) fails to reach the driver, the
//!   executor logs it and carries on: its heartbeats decide whether the driver is gone.
//! - Unlike the seeds, an executor that exits on its own does not send `RemoveExecutor`
//!   to the driver (the protocol above does not include it); the driver learns from the
//!   closed connection.
//!
//! # Example: an executor binary with its own task function
//!
//! ```no_run
//! use bytes::Bytes;
//! use flint_executor::{run_executor, ExecutorConfig, TaskContext, TaskError, TaskRegistry};
//!
//! /// Counts the words of its input.
//! fn word_count(ctx: &TaskContext, input: &Bytes) -> Result<Bytes, TaskError> {
//!     let text = std::str::from_utf8(input).map_err(|e| TaskError::failed(e.to_string()))?;
//!     ctx.add_input_bytes(input.len() as u64);
//!     Ok(Bytes::from(text.split_whitespace().count().to_string()))
//! }
//!
//! fn main() {
//!     let mut registry = TaskRegistry::with_builtins();
//!     registry.register("word-count", word_count).expect("a valid name");
//!     let conf = flint_rpc::Conf::from_pairs(["executor.heartbeatInterval=5s"])
//!         .expect("a valid configuration");
//!     let driver = "127.0.0.1:7077".parse().expect("an address");
//!     let config = ExecutorConfig::from_conf(&conf, "1", "localhost", 4)
//!         .expect("a valid configuration");
//!     let exit = run_executor(&conf, driver, config, registry);
//!     if exit.code() != 0 {
//!         eprintln!("{exit}");
//!     }
//!     std::process::exit(exit.code());
//! }
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod accumulators;
mod backend;
mod block_store;
pub mod broadcast;
pub mod config;
mod executor;
mod handoff;
mod heartbeater;
pub mod jobs;
mod launch;
mod registration;
mod registry;
mod reply_retry;
mod runner;
pub mod shuffle;
mod status;
mod sync;
mod task;
mod task_clock;
#[cfg(test)]
mod testing;

pub use accumulators::{AccumulatorError, MAX_TASK_ACCUMULATORS, MAX_TASK_ACCUMULATOR_BYTES};
pub use backend::{run_executor, ExecutorExit, AUTHENTICATION_FAILED_CODE};
pub use block_store::{BlockStore, BlockStoreError};
pub use config::ExecutorConfig;
pub use executor::{Executor, ExecutorError, STOP_GRACE, STOP_REASON};
pub use flint_wire::{TaskDescription, TaskState};
pub use heartbeater::{random_initial_delay, HeartbeatAction, HeartbeatExit, Heartbeater};
pub use registry::{
    accumulate_race_dir, accumulate_release_file, large_result_size, pattern, InvalidFunctionName,
    TaskFn, TaskRegistry, MAX_LARGE_RESULT,
};
pub use status::{StatusSender, RESULT_OVERHEAD};
pub use task::{TaskContext, TaskError};
