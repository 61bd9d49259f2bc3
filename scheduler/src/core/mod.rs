//! The pure half of the driver: state machines that take events and `now`, and return
//! what to do. Nothing here opens a socket, starts a thread, reads a clock or names a
//! connection; of flint-rpc only the configuration reader (`flint_rpc::conf`) and the
//! log budget (`flint_rpc::log_budget`, `peer_warn!`) are used, and nothing of the glue
//! in `crate::driver` (the test `tests/core_is_pure.rs` fails otherwise).
//!
//! - [`task_scheduler`]: which task runs where (the seeds' `TaskSchedulerImpl`).
//! - [`task_set_manager`], [`pending`], [`locality`], [`speculation`], [`exclusion`]:
//!   one task set's tasks, their locality levels, copies and failures.
//! - [`pool`]: FIFO and FAIR order of task sets.
//! - [`registry`], [`id_window`]: executors, hosts and running tasks, kept so that the
//!   steady state allocates nothing.
//! - [`heartbeat`]: which executors have been silent too long.
//! - [`dag`]: jobs as stages and shuffles, and the map output tracker.
//! - [`driver_core`]: the driver's state behind its endpoints, and the one place that
//!   decides what the driver sends ([`driver_core::Output`]); with the executor
//!   registry, large result fetches, and the accounting of executors asked for, killed
//!   and failed.
//! - [`accumulators`]: the driver's accumulators, merged once per successful partition.
//! - [`config`], [`error`], [`events`]: what the state machines read, refuse and report.

pub mod accumulators;
pub mod broadcast;
pub mod config;
pub mod dag;
pub(crate) mod driver_core;
pub mod error;
pub mod events;
pub(crate) mod exclusion;
pub(crate) mod fx_hash;
pub mod heartbeat;
pub(crate) mod id_window;
pub mod locality;
pub(crate) mod pending;
pub mod pool;
pub(crate) mod registry;
pub mod rng;
pub mod speculation;
pub mod task_scheduler;
pub mod task_set;
pub mod task_set_manager;
