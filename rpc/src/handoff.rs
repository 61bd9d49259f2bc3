//! Handing work from any thread to the event loop: a queue plus a wake-up that is sent
//! only when the loop may be asleep.
//!
//! Producers push and, if no wake-up is outstanding, send one. The loop clears the
//! "outstanding" flag *before* it takes the queue, so an item pushed at any moment is
//! either taken by the current drain or followed by a fresh wake-up: none is stranded.
//!
//! A loop that shuts down closes the queue: it takes what is left, and every later push
//! hands its item back to the producer, which can then fail it (a registration waiting
//! for its answer) instead of leaving it where nobody will look.
//! Model-checked with loom (`RUSTFLAGS="--cfg loom"`).

use crate::sync::{AtomicBool, Mutex, Ordering};

/// Something that wakes the loop (a mio `Waker` in production).
pub trait Notify: Send + Sync {
    /// Wakes the loop. Called at most once per drain.
    fn notify(&self);
}

/// A multi-producer queue drained by the loop (by whichever thread is turning it).
pub struct Handoff<T, N> {
    queue: Mutex<Queue<T>>,
    notified: AtomicBool,
    notifier: N,
}

struct Queue<T> {
    items: Vec<T>,
    /// Set for good by [`Handoff::close`].
    closed: bool,
}

impl<T, N: Notify> Handoff<T, N> {
    /// An empty queue that wakes the loop with `notifier`.
    pub fn new(notifier: N) -> Self {
        Handoff {
            queue: Mutex::new(Queue {
                items: Vec::new(),
                closed: false,
            }),
            notified: AtomicBool::new(false),
            notifier,
        }
    }

    /// Queues `item` and wakes the loop unless a wake-up is already on its way. Once the
    /// queue is closed, hands `item` back.
    pub fn push(&self, item: T) -> Result<(), T> {
        self.push_quiet(item)?;
        self.wake();
        Ok(())
    }

    /// Queues `item` without a wake-up: only from a turn of the loop itself, which drains the
    /// queue before it next sleeps. Once the queue is closed, hands `item` back.
    pub fn push_quiet(&self, item: T) -> Result<(), T> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.closed {
            return Err(item);
        }
        queue.items.push(item);
        Ok(())
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
        std::mem::swap(&mut queue.items, into);
        if !into.is_empty() && queue.items.capacity() == 0 {
            // Keep the spare buffer with the queue so that steady state does not allocate.
            queue.items.reserve(into.capacity().min(1024));
        }
    }

    /// Closes the queue for good (the loop is shutting down): moves every queued item
    /// into `into`, and from then on [`Handoff::push`] hands items back.
    pub fn close(&self, into: &mut Vec<T>) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.closed = true;
        into.append(&mut queue.items);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[derive(Default)]
    struct CountNotify(AtomicUsize);

    impl Notify for &CountNotify {
        fn notify(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_closed_queue_hands_items_back_and_keeps_none() {
        let wakes = CountNotify::default();
        let handoff = Handoff::new(&wakes);
        assert_eq!(handoff.push(1), Ok(()));
        assert_eq!(handoff.push_quiet(2), Ok(()));
        let mut left = Vec::new();
        handoff.close(&mut left);
        assert_eq!(left, vec![1, 2], "close takes what is queued");
        assert_eq!(handoff.push(3), Err(3));
        assert_eq!(handoff.push_quiet(4), Err(4));
        let mut drained = Vec::new();
        handoff.drain(&mut drained);
        assert!(drained.is_empty(), "{drained:?}");
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            1,
            "a refused push wakes nobody"
        );
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
                assert_eq!(p.join().unwrap(), Ok(()), "an open queue takes every item");
            }
            while take_wakeup(&woken) {
                handoff.drain(&mut buf);
                seen.append(&mut buf);
            }
            seen.sort_unstable();
            assert_eq!(seen, vec![0, 1], "an item was stranded without a wake-up");
        });
    }

    /// A producer pushes while the loop shuts down (drains once, then closes): the item
    /// is either taken by the loop or handed back to the producer, exactly once.
    #[test]
    fn loom_an_item_pushed_while_closing_is_taken_or_handed_back() {
        loom::model(|| {
            let woken = Arc::new(Mutex::new(false));
            let handoff = Arc::new(Handoff::new(FlagNotify(woken.clone())));
            let producer = {
                let handoff = handoff.clone();
                loom::thread::spawn(move || handoff.push(7).err())
            };
            let mut taken = Vec::new();
            handoff.drain(&mut taken);
            handoff.close(&mut taken);
            let handed_back = producer.join().unwrap();
            let seen = taken.len() + usize::from(handed_back.is_some());
            assert_eq!(seen, 1, "taken {taken:?}, handed back {handed_back:?}");
            let mut later = Vec::new();
            handoff.drain(&mut later);
            assert!(later.is_empty(), "an item stayed in a closed queue");
        });
    }
}
