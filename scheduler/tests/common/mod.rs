//! Helpers shared by the scheduler's tests: a log capture, outcomes, and action sorting.

#![allow(dead_code)]

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_scheduler::{Action, SchedulerEvent, TaskScheduler};
use flint_wire::{TaskFailureKind, TaskOutcome};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Every log line emitted while it is the thread's subscriber.
#[derive(Clone, Default)]
pub struct LogCapture {
    lines: Arc<Mutex<Vec<(Level, String)>>>,
}

struct MessageVisitor(String);

impl Visit for MessageVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for LogCapture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut visitor = MessageVisitor(String::new());
        event.record(&mut visitor);
        self.lines
            .lock()
            .unwrap()
            .push((*event.metadata().level(), visitor.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl LogCapture {
    /// Runs `f` with this capture as the thread's subscriber.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        tracing::subscriber::with_default(self.clone(), f)
    }

    /// The lines at `level` containing `text`.
    pub fn count(&self, level: Level, text: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|(l, line)| *l == level && line.contains(text))
            .count()
    }

    /// Whether a line at `level` contains `text`.
    pub fn contains(&self, level: Level, text: &str) -> bool {
        self.count(level, text) > 0
    }

    /// Every line, for failure messages.
    pub fn dump(&self) -> String {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|(l, line)| format!("{l} {line}\n"))
            .collect()
    }
}

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
