//! Handing work from any thread to the event loop: a queue plus a wake-up that is sent
//! only when the loop may be asleep.
//!
//! Producers push and, if no wake-up is outstanding, send one. The loop clears the
//! "outstanding" flag *before* it takes the queue, so an item pushed at any moment is
//! either taken by the current drain or followed by a fresh wake-up: none is stranded.
//! Model-checked with loom (`RUSTFLAGS="--cfg loom"`).

use crate::sync::{AtomicBool, Mutex, Ordering};

/// Something that wakes the loop (a mio `Waker` in production).
pub trait Notify: Send + Sync {
    /// Wakes the loop. Called at most once per drain.
    fn notify(&self);
}

/// A multi-producer queue drained by the loop (by whichever thread is turning it).
pub struct Handoff<T, N> {
    queue: Mutex<Vec<T>>,
    notified: AtomicBool,
    notifier: N,
}

impl<T, N: Notify> Handoff<T, N> {
    /// An empty queue that wakes the loop with `notifier`.
    pub fn new(notifier: N) -> Self {
        Handoff {
            queue: Mutex::new(Vec::new()),
            notified: AtomicBool::new(false),
            notifier,
        }
    }

    /// Queues `item` and wakes the loop unless a wake-up is already on its way.
    pub fn push(&self, item: T) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(item);
        self.wake();
    }

    /// Queues `item` without a wake-up: only from a turn of the loop itself, which drains the
    /// queue before it next sleeps.
    pub fn push_quiet(&self, item: T) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(item);
    }

    /// Wakes the loop unless a wake-up is already on its way, without queueing anything
    /// (for producers that left their work elsewhere, such as in an outbox).
    pub fn wake(&self) {
        if !self.notified.swap(true, Ordering::AcqRel) {
            self.notifier.notify();
        }
    }

    /// Moves every queued item into `into` (a turn of the loop calls this when woken).
    pub fn drain(&self, into: &mut Vec<T>) {
        // Reset before taking the queue: a producer whose push this drain misses locks
        // the queue after us, so its swap reads this reset and it sends a wake-up.
        self.notified.store(false, Ordering::Release);
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::swap(&mut *queue, into);
        if !into.is_empty() && queue.capacity() == 0 {
            // Keep the spare buffer with the queue so that steady state does not allocate.
            queue.reserve(into.capacity().min(1024));
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::Arc;

    /// The loop's wake-up, as a flag behind a mutex (an eventfd, for the model).
    struct FlagNotify(Arc<Mutex<bool>>);

    impl Notify for FlagNotify {
        fn notify(&self) {
            *self.0.lock().unwrap() = true;
        }
    }

    fn take_wakeup(flag: &Mutex<bool>) -> bool {
        std::mem::replace(&mut *flag.lock().unwrap(), false)
    }

    /// Two producers push while the loop, which only drains when it has been woken,
    /// runs once; after the producers are done the loop keeps draining while woken.
    /// Every item must be seen exactly once: none is left in the queue without a
    /// wake-up to fetch it.
    #[test]
    fn loom_no_item_is_stranded() {
        loom::model(|| {
            let woken = Arc::new(Mutex::new(false));
            let handoff = Arc::new(Handoff::new(FlagNotify(woken.clone())));
            let producers: Vec<_> = (0..2)
                .map(|p| {
                    let handoff = handoff.clone();
                    loom::thread::spawn(move || handoff.push(p))
                })
                .collect();
            let mut seen = Vec::new();
            let mut buf = Vec::new();
            if take_wakeup(&woken) {
                handoff.drain(&mut buf);
                seen.append(&mut buf);
            }
            for p in producers {
                p.join().unwrap();
            }
            while take_wakeup(&woken) {
                handoff.drain(&mut buf);
                seen.append(&mut buf);
            }
            seen.sort_unstable();
            assert_eq!(seen, vec![0, 1], "an item was stranded without a wake-up");
        });
    }
}
