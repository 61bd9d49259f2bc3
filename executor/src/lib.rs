//! flint-executor: the executor side of flint.
//!
//! It will hold the executor backend, the executor and its task runner pool, the
//! heartbeater, the task function registry and the block store for large results.
//! Nothing is here yet beyond the message types it runs tasks with, re-exported from
//! flint-wire.
//!
//! ```
//! use flint_executor::TaskState;
//! assert_eq!(TaskState::Killed.to_string(), "KILLED");
//! ```

pub use flint_wire::{TaskDescription, TaskState};
