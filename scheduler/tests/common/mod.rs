//! Helpers shared by the scheduler's integration tests that need the scheduler's own
//! types or its virtual clock (the rest is in flint-testkit).

use std::time::{Duration, Instant};

use flint_scheduler::{Action, SchedulerEvent, TaskScheduler};

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
