//! Log capture for tests: one process-wide subscriber hands each event to the capture that is
//! current on the emitting thread, and to the process-wide capture once someone asked for it.
//!
//! Why not `tracing::subscriber::with_default` per test: while exactly one scoped dispatcher is
//! registered, tracing-core computes a newly hit callsite's interest from the registering
//! thread's own default alone. A log line first reached by a parallel test thread without a
//! subscriber is then cached as "never", and a test capturing that same line on its own thread
//! misses it, now and then. With one global subscriber that is interested in everything, every
//! callsite is always enabled and the routing is ours.
//!
//! A test binary that uses it must not install a global subscriber of its own: the first
//! capture installs this one, and there is one per process.

use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, Mutex, Once, OnceLock};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Every log line given to it: by the thread running [`LogCapture::run`], or by any thread for
/// [`LogCapture::everywhere`].
#[derive(Clone, Default)]
pub struct LogCapture {
    lines: Arc<Mutex<Vec<(Level, String)>>>,
}

thread_local! {
    /// The captures of the `run` calls active on this thread, innermost last.
    static CURRENT: RefCell<Vec<LogCapture>> = const { RefCell::new(Vec::new()) };
}

static EVERYWHERE: OnceLock<LogCapture> = OnceLock::new();
/// The most verbose level [`LogCapture::everywhere`] records, once set by
/// [`LogCapture::everywhere_at`]; every level until then.
static EVERYWHERE_LEVEL: OnceLock<Level> = OnceLock::new();
static INSTALL: Once = Once::new();

/// The global subscriber: interested in every event, it records each in the captures that
/// want it.
struct Router;

struct MessageVisitor(String);

impl Visit for MessageVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Router {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let current = CURRENT
            .try_with(|stack| stack.borrow().last().cloned())
            .ok()
            .flatten();
        let level = *event.metadata().level();
        let everywhere = EVERYWHERE
            .get()
            .filter(|_| EVERYWHERE_LEVEL.get().is_none_or(|&most| level <= most));
        if current.is_none() && everywhere.is_none() {
            return;
        }
        let mut visitor = MessageVisitor(String::new());
        event.record(&mut visitor);
        let line = (level, visitor.0);
        for capture in current.iter().chain(everywhere) {
            capture.lines.lock().unwrap().push(line.clone());
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn install() {
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(Router)
            .expect("no other global subscriber in a test binary that captures logs");
    });
}

/// Pops this thread's innermost capture, also when the captured closure panics.
struct PopOnDrop;

impl Drop for PopOnDrop {
    fn drop(&mut self) {
        CURRENT.with(|stack| stack.borrow_mut().pop());
    }
}

impl LogCapture {
    /// Runs `f` with this capture recording the log lines of this thread.
    pub fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        install();
        CURRENT.with(|stack| stack.borrow_mut().push(self.clone()));
        let _pop = PopOnDrop;
        f()
    }

    /// The capture of every log line of every thread from its first use on, for tests whose
    /// code logs on threads of its own (event loops).
    pub fn everywhere() -> &'static LogCapture {
        install();
        EVERYWHERE.get_or_init(LogCapture::default)
    }

    /// [`LogCapture::everywhere`], recording only lines at `level` or less verbose (WARN:
    /// warnings and errors), for tests that measure the process while it logs: a capture
    /// of every DEBUG line of every thread costs CPU and memory of its own. The first
    /// call of the process sets the level; later ones get the capture as it is.
    pub fn everywhere_at(level: Level) -> &'static LogCapture {
        let _ = EVERYWHERE_LEVEL.set(level);
        Self::everywhere()
    }

    /// The lines at `level`, in the order they were logged.
    pub fn lines(&self, level: Level) -> Vec<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|(l, _)| *l == level)
            .map(|(_, line)| line.clone())
            .collect()
    }

    /// The number of lines at `level` containing `text`.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_first_logged_on_another_thread_still_reaches_a_capture() {
        fn log_the_line() {
            tracing::error!("the line under test");
        }
        // The callsite is first hit on a thread with no capture, while this thread's capture
        // is active: the case that `with_default` gets wrong.
        let capture = LogCapture::default();
        capture.run(|| {
            std::thread::spawn(log_the_line).join().unwrap();
            log_the_line();
        });
        assert_eq!(capture.count(Level::ERROR, "the line under test"), 1);
        capture.run(log_the_line);
        assert_eq!(capture.lines(Level::ERROR).len(), 2);
    }
}
