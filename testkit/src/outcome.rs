//! Task outcomes as executors report them, for tests that play the executors.

use bytes::Bytes;
use flint_wire::{FetchFailure, TaskFailureKind, TaskOutcome};

/// A successful outcome with `value`.
pub fn ok(value: &'static [u8]) -> TaskOutcome {
    TaskOutcome::Direct {
        value: Bytes::from_static(value),
        metrics: Default::default(),
        accumulators: Vec::new(),
    }
}

/// A failed outcome that counts towards task.maxFailures.
pub fn failed(message: &str) -> TaskOutcome {
    TaskOutcome::Failure {
        kind: TaskFailureKind::Exception,
        message: message.to_owned(),
        counts_towards_failures: true,
        metrics: Default::default(),
    }
}

/// The outcome of a task that could not fetch its input: `failure` says what.
pub fn fetch_failed(failure: FetchFailure) -> TaskOutcome {
    TaskOutcome::FetchFailed {
        failure: Box::new(failure),
        metrics: Default::default(),
    }
}
