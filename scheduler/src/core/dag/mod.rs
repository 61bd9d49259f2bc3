//! Jobs of stages joined by shuffles (the seeds' `DAGScheduler`), and the driver's
//! [`MapOutputTracker`].
//!
//! A job is a result stage whose parents are shuffle map stages; a stage may read
//! several shuffles (a join) and a map stage writes one. [`DagScheduler`] is a pure
//! state machine beside [`crate::TaskScheduler`], in the same style: events in, with
//! `now` passed in; [`DagAction`]s out through [`DagScheduler::poll_action`]; a timer
//! through [`DagScheduler::poll_timeout`] and [`DagScheduler::handle_timeout`]. No
//! socket, no thread, no clock read; the same events give the same actions.
//!
//! # Driving it
//!
//! The glue owns both schedulers and feeds one's output to the other:
//!
//! ```text
//! dag.submit_job(now, spec)                       -> job id (or DagError)
//! loop, after every event and timer, until both queues are empty:
//!   DagAction::SubmitTaskSet(s)      => tasks.submit_tasks(now, s.to_task_set(encode)), where encode
//!                                       is e.g. TaskPayload::encode_stage(f, input, s.epoch, s.writes, &s.reads)
//!   DagAction::PartitionCompleted{..}=> tasks.notify_partition_completion(stage, partition)
//!   DagAction::CancelStage{..}       => tasks.cancel_tasks(stage, false)
//!   DagAction::JobEnded{..}          => hand results (partition order) or the error to the job's submitter
//!   DagAction::Event(e)              => listeners (job and stage events come from here)
//!   tasks' TaskEnd{task_set, index, reason}
//!                                    => dag.task_ended(now, task_set, index, completion)
//!        Success: MapOutput(MapStatus::decode(value)) for a ShuffleMap stage
//!        (dag.stage_kind), Result(value) otherwise; FetchFailed(f); Failed
//!   tasks' StageCompleted{failure: Some(reason)} => dag.task_set_failed(now, task_set, reason)
//!   tasks' ExecutorRemoved{executor_id}          => dag.executor_lost(executor_id, host if the worker is gone)
//!   tasks' JobStart/JobEnd/StageSubmitted/StageCompleted => not to listeners (the DAG's replace them)
//! when dag.poll_timeout() comes: dag.handle_timeout(now)
//! ```
//!
//! The task scheduler still retries failed tasks and aborts a task set after
//! `task.maxFailures`; the DAG scheduler decides which stage attempts run, and when a
//! job ends. A task set that hit a fetch failure also ends with a failure in the task
//! scheduler (so that, without a DAG scheduler, its job still ends): its
//! `StageCompleted` reaches [`DagScheduler::task_set_failed`] like an abort's, which
//! ignores the end of an attempt that is no longer its stage's running one. Executors ask the driver for a shuffle's statuses, served from
//! [`DagScheduler::map_output_tracker`], and keep them by epoch
//! ([`flint_wire::MapStatusCache`]).
//!
//! # What it does (Spark's semantics, in flint's terms)
//!
//! - `submit_job` (`handleJobSubmitted`) makes a map stage per shuffle the job reads,
//!   or reuses the live one: a map stage that two jobs need runs once. A new shuffle is
//!   registered with the tracker; a shuffle the tracker still holds from an ended job
//!   keeps its outputs, and its stage computes only what is missing. Then
//!   `submitStage`: a stage whose parents' outputs are all registered
//!   (`getMissingParentStages` is empty) is submitted by `submitMissingTasks` for its
//!   missing partitions only, as a new attempt; otherwise its missing parents are
//!   submitted and it waits. A shuffle has its reduce partitions, and a stage that
//!   reads it has that many partitions: reduce task `p` reads reduce partition `p`.
//! - A map output is registered as it arrives; when every partition of the attempt has
//!   reported, the stage is complete, the epoch moves on, and the waiting stages that
//!   read it are submitted. If outputs were lost meanwhile, the stage is resubmitted
//!   for them. A result counts once per partition, whichever attempt sent it; the job
//!   ends with its results in partition order when the last one arrives, and its
//!   stages' remaining attempts are cancelled.
//! - A fetch failure (`FetchFailed`) from the stage's latest attempt marks the attempt
//!   failed, unregisters that map output and every output of the executor it was asked
//!   of, and after [`RESUBMIT_TIMEOUT`] resubmits the map stage (for its missing
//!   partitions) and then the failed stage. It does not count towards
//!   `task.maxFailures`. When a stage has failed so
//!   [`DagConfig::max_consecutive_stage_attempts`] times in a row, its jobs fail with
//!   "Job aborted due to stage failure: ResultStage 3 (name) has failed the maximum
//!   allowable number of times: 4. Most recent failure reason:\n..."; a successful
//!   attempt starts the count again. Fetch failures from an older attempt are ignored.
//! - An executor loss unregisters its outputs (there is no external shuffle service;
//!   with its host, every output on the host) and moves the epoch on. Nothing is
//!   resubmitted at once: a stage that needs the outputs recomputes them when it next
//!   runs or when a reader fails to fetch them. Map outputs reported from tasks that
//!   started before the loss was known are ignored.
//! - A task set the task scheduler aborts fails every job that needs its stage
//!   (`abortStage`); cancelling a job fails it and cancels the stages only it needs.
//!
//! Left out, as flint has no use for them yet: barrier stages, indeterminate stages
//! (rollback), push-based shuffle, map-stage-only jobs, jobs over a subset of the
//! result partitions, task locality for reducers, and `stage.maxAttempts`.
//!
//! ```
//! use std::time::Instant;
//! use bytes::Bytes;
//! use flint_scheduler::dag::{DagAction, DagConfig, DagScheduler, JobSpec, StageSpec, TaskCompletion};
//! use flint_wire::{BlockManagerId, MapStatus};
//!
//! let now = Instant::now();
//! let mut dag = DagScheduler::new(DagConfig::default());
//! // count by key: 2 map tasks write shuffle 0 (3 buckets each), 3 reduce tasks read it.
//! let job = JobSpec::new("count at example.rs:9", StageSpec::new("count", 3, Bytes::new()).reading([0]))
//!     .with_shuffle(0, 3, StageSpec::new("map", 2, Bytes::new()));
//! let job_id = dag.submit_job(now, job)?;
//!
//! let submitted = |dag: &mut DagScheduler| {
//!     dag.drain_actions().find_map(|a| match a {
//!         DagAction::SubmitTaskSet(set) => Some(set),
//!         _ => None,
//!     }).expect("a task set")
//! };
//! let maps = submitted(&mut dag);
//! assert_eq!(maps.partitions, [0, 1]);
//! for index in 0..2 {
//!     let status = MapStatus {
//!         location: BlockManagerId { executor_id: "1".into(), host: "h".into(), port: 0 },
//!         sizes: vec![10, 20, 30],
//!     };
//!     dag.task_ended(now, maps.id, index, TaskCompletion::MapOutput(status));
//! }
//! let reduces = submitted(&mut dag); // only once both map outputs are registered
//! assert_eq!((reduces.reads[0].shuffle_id, reduces.reads[0].maps, reduces.partitions.len()), (0, 2, 3));
//! for index in [2, 0, 1] {
//!     let value = Bytes::from(format!("count {index}"));
//!     dag.task_ended(now, reduces.id, index, TaskCompletion::Result(value));
//! }
//! let ended = dag.drain_actions().find_map(|a| match a {
//!     DagAction::JobEnded { job_id, result } => Some((job_id, result)),
//!     _ => None,
//! });
//! let results = vec![Bytes::from("count 0"), Bytes::from("count 1"), Bytes::from("count 2")];
//! assert_eq!(ended, Some((job_id, Ok(results))));
//! # Ok::<(), flint_scheduler::dag::DagError>(())
//! ```

mod action;
mod map_output_tracker;
mod scheduler;
mod spec;
#[cfg(test)]
mod tests;

pub use action::{DagAction, DagConfig, StageKind, StageTaskSet, TaskCompletion, RESUBMIT_TIMEOUT};
pub use map_output_tracker::MapOutputTracker;
pub use scheduler::{DagScheduler, StageState};
pub use spec::{DagError, JobSpec, ShuffleSpec, StageSpec};
