//! flint-scheduler: the driver side of flint — which task runs where, and when.
//!
//! The decision-making is written as deterministic state machines, like quinn-proto
//! beside quinn: no sockets, no threads, no clock reads. The caller passes `now`, feeds
//! events in (task sets, offers of free cores, status updates, executor losses, timers)
//! and carries out the [`Action`]s that come out (kill a task, revive offers, tell
//! listeners). The same code runs in the driver and in simulations that replay
//! thousands of seeded scenarios.
//!
//! - [`TaskScheduler`] (the seeds' `TaskSchedulerImpl`): registries of task sets,
//!   running tasks, executors, hosts and racks; resource offers with delay scheduling;
//!   status updates; executor loss; speculation; the starvation warning.
//! - [`TaskSetManager`]: one task set's pending tasks per locality level, retries up to
//!   `task.maxFailures`, results recorded exactly once, failure exclusion.
//! - [`pool`]: FIFO and FAIR ordering of task sets, and the pools file.
//! - [`events`]: [`Action`], [`SchedulerEvent`] and the [`SchedulerListener`] a driver
//!   program implements.
//! - [`heartbeat`]: which executors have been silent for longer than `network.timeout`.
//! - [`dag`]: jobs of stages joined by shuffles (the seeds' `DAGScheduler`) and the
//!   map output tracker.
//! - the driver core (the seeds' `CoarseGrainedSchedulerBackend` and its
//!   `DriverEndpoint` handlers, in `src/core/driver_core/`): the executor registry,
//!   launches, status updates, large result fetches, executor requests, kills and
//!   failures, and jobs of stages (the DAG scheduler fed by the task scheduler's events,
//!   `jobs.rs`). It decides every message the driver sends, as outputs the glue carries
//!   out.
//!
//! - [`status`]: [`status::StatusSnapshot`], what a status page shows of the driver,
//!   and [`status::StatusBook`], the state machine that keeps it from the events.
//!
//! These live in `src/core/` (and `src/status/`). Around them, in `src/driver/`, the glue that runs them for
//! real on flint-rpc:
//!
//! - [`Driver`]: the driver's RPC environment with its endpoints
//!   (`CoarseGrainedScheduler`, every handler of the seeds' `DriverEndpoint`,
//!   `HeartbeatReceiver` and `MapOutputTracker`), executor requests and kills,
//!   `isReady`, stop; [`Driver::submit`] gives a [`TaskSetHandle`] to await one task
//!   set's results on, [`Driver::submit_job`] a [`JobHandle`] for a job of stages
//!   written with [`Driver::job`] ([`JobBuilder`]: map stages that shuffle, the stages
//!   that read them, the result stage).
//! - [`Broadcast`]: broadcast variables ([`Driver::broadcast`]; the `BroadcastManager`
//!   endpoint serves their pieces, [`broadcast::BroadcastManager`] decides). A task set
//!   whose serialized tasks exceed `rpc.message.maxSize` aborts with "... Consider
//!   increasing rpc.message.maxSize or using broadcast variables for large values.";
//!   [`Driver::broadcast`]'s example runs that same job with a broadcast instead.
//! - [`Driver::publish_status`]: a [`StatusBoard`] with the driver's last
//!   [`status::StatusSnapshot`], built on a timer of its event loop at most every 100 ms.
//! - [`cluster_manager`]: where executors come from; [`LocalClusterManager`] starts
//!   `flint executor` processes on this host, on a thread of the driver's own (the
//!   executor supply thread), never on the event loop's.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use bytes::Bytes;
//! use flint_scheduler::{Action, SchedulerConfig, TaskScheduler, TaskSet, WorkerOffer};
//! use flint_wire::{TaskOutcome, TaskState};
//!
//! let start = Instant::now(); // the caller's clock; the scheduler never reads one
//! let mut scheduler = TaskScheduler::new(SchedulerConfig::default());
//! scheduler.submit_tasks(start, TaskSet::new(0, 0, 3, Bytes::from_static(b"noop")))?;
//!
//! // Two executors offer 2 and 1 free cores: all three tasks launch.
//! let offers = [WorkerOffer::new("1", "host-a", 2), WorkerOffer::new("2", "host-b", 1)];
//! let launched = scheduler.resource_offers(start, &offers);
//! assert_eq!(launched[0].len() + launched[1].len(), 3);
//!
//! // Each task reports its result; the job then ends.
//! let done = start + Duration::from_millis(5);
//! for task in launched.iter().flatten() {
//!     let outcome = TaskOutcome::Direct {
//!         value: Bytes::from_static(b"42"),
//!         metrics: Default::default(),
//!         accumulators: Vec::new(),
//!     };
//!     scheduler.status_update(done, task.task_id, TaskState::Finished, outcome);
//! }
//! let job_ended = scheduler.drain_actions().any(|action| {
//!     matches!(action, Action::Event(flint_scheduler::SchedulerEvent::JobEnd { .. }))
//! });
//! assert!(job_ended);
//! # Ok::<(), flint_scheduler::SchedulerError>(())
//! ```

//!
//! # Accumulators: how a driver reads the value
//!
//! A driver program registers an accumulator before the job
//! ([`Driver::register_accumulator`], or [`Accumulators::register`] on a bare
//! [`TaskScheduler`]), hands its id to the tasks in their input, and reads the merged
//! value after the job ([`Driver::accumulator_value`]). Each partition's values are
//! merged once, from its first successful attempt: failed, killed and lost attempts,
//! speculative copies and resubmitted stages add nothing more ([`accumulators`]).
//! Listeners see every success's updates ([`SchedulerEvent::TaskAccumulators`],
//! `counted` when merged) and running tasks' partial values
//! ([`SchedulerEvent::ExecutorMetricsUpdate`]), which are never merged.
//!
//! ```
//! use std::time::Instant;
//! use bytes::Bytes;
//! use flint_scheduler::{AccumulatorKind, AccumulatorValue, TaskScheduler, TaskSet, WorkerOffer};
//! use flint_wire::{AccumulatorUpdate, TaskOutcome, TaskState};
//!
//! let now = Instant::now();
//! let mut scheduler = TaskScheduler::new(Default::default());
//! let records = scheduler.accumulators_mut().register("records", AccumulatorKind::Long);
//! scheduler.submit_tasks(now, TaskSet::new(0, 0, 2, Bytes::from_static(b"count")))?;
//! let launched = scheduler.resource_offers(now, &[WorkerOffer::new("1", "host", 2)]);
//! let success = || TaskOutcome::Direct {
//!     value: Bytes::new(),
//!     metrics: Default::default(),
//!     accumulators: vec![AccumulatorUpdate {
//!         id: records.id,
//!         name: None,
//!         value: AccumulatorValue::Long(10),
//!     }],
//! };
//! for task in &launched[0] {
//!     scheduler.status_update(now, task.task_id, TaskState::Finished, success());
//!     // A duplicate report of the same success is not merged again.
//!     scheduler.status_update(now, task.task_id, TaskState::Finished, success());
//! }
//! let value = scheduler.accumulators().value(records.id);
//! assert_eq!(value, Some(&AccumulatorValue::Long(20)));
//! # Ok::<(), flint_scheduler::SchedulerError>(())
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod core;
mod driver;
pub mod status;

// The public modules, where they were before the crate was split into `core` and
// `driver`: users name them by these paths.
pub use crate::core::{
    accumulators, broadcast, config, dag, error, events, heartbeat, locality, pool, rng,
    speculation, task_scheduler, task_set, task_set_manager,
};
pub use crate::driver::broadcast::Broadcast;
pub use crate::driver::status::{StatusBoard, MIN_PUBLISH_INTERVAL, STATUS_ENDPOINT};
pub use crate::driver::{cluster_manager, job};

pub use crate::core::accumulators::{AccumulatorId, AccumulatorKind, Accumulators};
pub use crate::core::config::SchedulingMode;
pub use crate::core::config::{SchedulerConfig, SpeculationConfig, KEYS};
pub use crate::core::driver_core::{
    JobStats, DISASSOCIATED, DRIVER_STOPPED, FIRST_JOB_ID, MAX_EXECUTOR_ID_LEN, STALE_EXECUTOR,
};
pub use crate::core::error::SchedulerError;
pub use crate::core::events::{
    Action, JobResult, SchedulerEvent, SchedulerListener, TaskEndReason, TaskMetricsUpdate,
    TaskResult,
};
pub use crate::core::exclusion::ExclusionPolicy;
pub use crate::core::locality::{TaskLocality, TaskLocation};
pub use crate::core::pool::{PoolConfig, PoolsFileError};
pub use crate::core::rng::SplitMix64;
pub use crate::core::task_scheduler::{TaskScheduler, STARVATION_WARNING};
pub use crate::core::task_set::{TaskSet, TaskSetId, TaskSpec, WorkerOffer};
pub use crate::core::task_set_manager::TaskSetManager;
pub use crate::driver::cluster_manager::{
    ClusterManager, ExitedExecutor, LocalClusterManager, StandaloneExecutors,
};
pub use crate::driver::job::{
    JobError, JobHandle, JobOutcome, LatencySummary, TaskSetError, TaskSetHandle, TaskSetOutcome,
};
pub use crate::driver::job_builder::{JobBuilder, Shuffle, StageBuilder};
pub use crate::driver::{Driver, DriverError};
pub use flint_wire::bytes_to_string;
pub use flint_wire::{AccumulatorValue, ExecutorLossReason, TaskDescription, TaskState};
