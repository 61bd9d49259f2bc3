//! Helpers shared by the scheduler's integration tests: outcomes, and action sorting (the
//! log capture is flint-testkit's).

#![allow(dead_code)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_scheduler::{Action, SchedulerEvent, TaskScheduler};
use flint_wire::{TaskFailureKind, TaskOutcome};

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

/// The base instant of a test, and `ms` milliseconds after it.
pub fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

/// Takes every queued action, split into events and the rest.
pub fn drain(scheduler: &mut TaskScheduler) -> (Vec<SchedulerEvent>, Vec<Action>) {
    let mut events = Vec::new();
    let mut others = Vec::new();
    for action in scheduler.drain_actions() {
        match action {
            Action::Event(event) => events.push(event),
            other => others.push(other),
        }
    }
    (events, others)
}
