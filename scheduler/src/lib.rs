//! flint-scheduler: the driver side of flint.
//!
//! It will hold the task scheduler, task set managers and pools as pure state machines
//! (events in, actions out, an injected clock), and the scheduler backend, driver
//! endpoint and heartbeat receiver that connect them to flint-rpc. Nothing is here yet
//! beyond the message types it schedules with, re-exported from flint-wire.
//!
//! ```
//! use flint_scheduler::TaskState;
//! assert!(TaskState::Finished.is_finished());
//! ```

pub use flint_wire::{ExecutorLossReason, TaskDescription, TaskState};
