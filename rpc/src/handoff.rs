//! Handing work from any thread to the event loop: a queue plus a wake-up that is sent
//! only when the loop may be asleep.
//!
//! Producers push and raise a `pending` flag, which every turn of the loop looks at (one
//! atomic load) and takes before it drains the queue. A loop that is awake (turning or
//! busy-polling) needs nothing more, so producers send a wake-up (a system call: an
//! eventfd write) only while the loop thread sleeps, and at most once per sleep. Going
//! to sleep, the loop thread first says so (`asleep`), then looks at `pending` once
//! more; a producer first raises `pending`, then looks at `asleep`. Each look is a
//! read-modify-write, ordered with the other side's write to the same flag, so at least
//! one of them sees the other's flag: either the loop stays up for the item, or the
//! producer wakes it. None is stranded.
//!
//! "Once per sleep" needs two things. The flag that says a wake-up was sent is cleared
//! as each sleep begins: a producer that saw the previous sleep late may set it after
//! that sleep ended. And the wake-up must reach the sleeping thread itself: one that
//! another thread can take on its way (a lent thread polling the loop's poller) would
//! spend the sleep's only wake-up on a thread that is not asleep.
//!
//! A loop that shuts down closes the queue: it takes what is left, and every later push
//! hands its item back to the producer, which can then fail it (a registration waiting
//! for its answer) instead of leaving it where nobody will look.
//! Model-checked with loom (`RUSTFLAGS="--cfg loom"`).

use crate::sync::{AtomicBool, Mutex, Ordering};

/// Something that wakes the loop (a mio `Waker` in production).
pub trait Notify: Send + Sync {
    /// Wakes the loop thread wherever it sleeps. Called at most once per sleep of the
    /// loop thread, so no other thread may take the wake-up instead.
    fn notify(&self);
}

/// A multi-producer queue drained by the loop (by whichever thread is turning it).
pub struct Handoff<T, N> {
    queue: Mutex<Queue<T>>,
    /// Work for the loop's next turn: items queued, or a bare [`Handoff::wake`].
    pending: AtomicBool,
    /// The loop thread sleeps, or is about to: producers must wake it.
    asleep: AtomicBool,
    /// A wake-up was sent during the current sleep.
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
            pending: AtomicBool::new(false),
            asleep: AtomicBool::new(false),
            notified: AtomicBool::new(false),
            notifier,
        }
    }

    /// Queues `item` for the loop's next turn, waking the loop thread if it sleeps. Once
    /// the queue is closed, hands `item` back.
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

    /// Makes the loop's next turn a full one (it drains the queue and plans its wake-ups
    /// again), waking the loop thread if it sleeps, without queueing anything: for
    /// producers that left their work elsewhere, such as in an outbox.
    pub fn wake(&self) {
        self.pending.swap(true, Ordering::AcqRel);
        // A read-modify-write, not a load (see the module's documentation).
        if self.asleep.fetch_or(false, Ordering::AcqRel)
            && !self.notified.swap(true, Ordering::AcqRel)
        {
            self.notifier.notify();
        }
    }

    /// Takes the `pending` flag: whether the turn calling it must drain the queue. One
    /// load when nothing is pending, as in every idle turn of a polling loop.
    pub fn take_pending(&self) -> bool {
        // Acquire: the items pushed before the flag was raised are seen by the drain.
        self.pending.load(Ordering::Acquire) && self.pending.swap(false, Ordering::AcqRel)
    }

    /// The loop thread calls `sleep` unless work is pending; a producer that comes while
    /// it sleeps wakes it (once). `None` if it did not sleep.
    pub fn sleep_unless_pending<R>(&self, sleep: impl FnOnce() -> R) -> Option<R> {
        // Cleared before the sleep is announced, not after the last one ended: a producer
        // that saw the last sleep may set it late, and would otherwise silence every
        // producer of this one. One that sees this sleep sees it cleared (it
        // synchronizes with the swap on `asleep` below). A plain store would do; loom
        // orders one too loosely against the producers' swaps and reports a deadlock
        // that cannot happen.
        self.notified.swap(false, Ordering::AcqRel);
        self.asleep.swap(true, Ordering::AcqRel);
        // A read-modify-write, not a load (see the module's documentation).
        let slept = (!self.pending.fetch_or(false, Ordering::AcqRel)).then(sleep);
        // A read-modify-write too: it synchronizes with every producer that saw this
        // sleep (their looks at `asleep` form a release sequence), so the turns after it
        // see what they queued even when another producer's wake-up ended the sleep.
        self.asleep.swap(false, Ordering::AcqRel);
        slept
    }

    /// Moves every queued item into `into`.
    pub fn drain(&self, into: &mut Vec<T>) {
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
        assert_eq!(wakes.0.load(Ordering::Relaxed), 0, "the loop never slept");
    }

    #[test]
    fn an_awake_loop_is_never_woken_and_a_sleeping_one_once_per_sleep() {
        let wakes = CountNotify::default();
        let handoff = Handoff::new(&wakes);
        let woken = || wakes.0.load(Ordering::Relaxed);
        assert!(!handoff.take_pending(), "nothing yet");
        handoff.push(1).unwrap();
        handoff.wake();
        assert_eq!(woken(), 0, "an awake loop finds the work itself");
        assert!(handoff.take_pending());
        assert!(!handoff.take_pending(), "taken once");

        // Asleep: the first producer wakes it, the next ones need not.
        let slept = handoff.sleep_unless_pending(|| {
            handoff.push(2).unwrap();
            handoff.push(3).unwrap();
            handoff.wake();
            woken()
        });
        assert_eq!(slept, Some(1));
        assert!(handoff.take_pending());
        let mut items = Vec::new();
        handoff.drain(&mut items);
        assert_eq!(items, vec![1, 2, 3]);

        // Each sleep gets its own wake-up; with work pending the loop does not sleep.
        assert_eq!(handoff.sleep_unless_pending(|| handoff.wake()), Some(()));
        assert_eq!(woken(), 2);
        assert_eq!(handoff.sleep_unless_pending(|| ()), None, "work is pending");
        assert!(handoff.take_pending());
        // A push from a turn of the loop itself, which drains before it ends, does not
        // make the next turn a full one.
        handoff.push_quiet(4).unwrap();
        assert!(!handoff.take_pending());
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::sync::{Arc, Condvar};

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

    /// Two producers push while the loop turns once and then goes to sleep. The sleep
    /// lasts until both producers are done (as if nothing else would wake it): if the
    /// loop went to sleep with an item it had not taken, a wake-up must have come. The
    /// loop's next turn then takes every item, exactly once.
    #[test]
    fn loom_no_item_is_stranded() {
        loom::model(|| {
            let woken = Arc::new(Mutex::new(false));
            let handoff = Arc::new(Handoff::new(FlagNotify(woken.clone())));
            let mut producers: Vec<_> = (0..2)
                .map(|p| {
                    let handoff = handoff.clone();
                    loom::thread::spawn(move || handoff.push(p))
                })
                .collect();
            let mut seen = Vec::new();
            let turn = |seen: &mut Vec<i32>| {
                if handoff.take_pending() {
                    let mut items = Vec::new();
                    handoff.drain(&mut items);
                    seen.append(&mut items);
                }
            };
            turn(&mut seen);
            let taken_before_sleep = seen.len();
            let slept = handoff.sleep_unless_pending(|| {
                for p in producers.drain(..) {
                    assert_eq!(p.join().unwrap(), Ok(()), "an open queue takes every item");
                }
                take_wakeup(&woken)
            });
            if slept == Some(false) {
                assert_eq!(
                    taken_before_sleep, 2,
                    "asleep with an item queued, not woken"
                );
            }
            for p in producers {
                assert_eq!(p.join().unwrap(), Ok(()));
            }
            turn(&mut seen);
            seen.sort_unstable();
            assert_eq!(seen, vec![0, 1], "an item was stranded");
        });
    }

    /// A bare wake-up (a new deadline for the loop to plan for) while the loop goes to
    /// sleep: the loop either stays up for it or is woken.
    #[test]
    fn loom_a_bare_wake_up_is_not_lost() {
        loom::model(|| {
            let woken = Arc::new(Mutex::new(false));
            let handoff = Arc::new(Handoff::<(), _>::new(FlagNotify(woken.clone())));
            let mut waker = Some({
                let handoff = handoff.clone();
                loom::thread::spawn(move || handoff.wake())
            });
            let took = handoff.take_pending();
            let slept = handoff.sleep_unless_pending(|| {
                waker.take().unwrap().join().unwrap();
                take_wakeup(&woken)
            });
            if let Some(waker) = waker {
                waker.join().unwrap();
            }
            let after = handoff.take_pending();
            assert!(took || after, "no turn saw the wake-up");
            if slept == Some(false) {
                assert!(took, "asleep past a wake-up it never saw");
            }
        });
    }

    /// The eventfd, for a model whose loop really sleeps: a wake-up is a flag that a
    /// turn's poll takes and a sleep waits for.
    struct EventFd(Arc<(Mutex<bool>, Condvar)>);

    impl Notify for EventFd {
        fn notify(&self) {
            let (written, readable) = &*self.0;
            *written.lock().unwrap() = true;
            readable.notify_one();
        }
    }

    /// Several sleeps in a row: one producer pushes twice, another once, while the loop
    /// turns and sleeps until it has all three items. A sleep waits for a wake-up and
    /// nothing else, so an item left without one is a deadlock, which loom reports.
    /// Catches a wake-up flag left set by a producer that saw the previous sleep late.
    #[test]
    fn loom_every_sleep_can_be_woken() {
        loom::model(|| {
            let eventfd = Arc::new((Mutex::new(false), Condvar::new()));
            let handoff = Arc::new(Handoff::new(EventFd(eventfd.clone())));
            let twice = {
                let handoff = handoff.clone();
                loom::thread::spawn(move || {
                    handoff.push(0).unwrap();
                    handoff.push(1).unwrap();
                })
            };
            let once = {
                let handoff = handoff.clone();
                loom::thread::spawn(move || handoff.push(2).unwrap())
            };
            let (written, readable) = &*eventfd;
            let mut seen = Vec::new();
            loop {
                // A turn: its poll takes a wake-up written before it, then the queue.
                *written.lock().unwrap() = false;
                if handoff.take_pending() {
                    let mut items = Vec::new();
                    handoff.drain(&mut items);
                    seen.append(&mut items);
                }
                if seen.len() == 3 {
                    break;
                }
                handoff.sleep_unless_pending(|| {
                    let mut woken = written.lock().unwrap();
                    while !*woken {
                        woken = readable.wait(woken).unwrap();
                    }
                });
            }
            twice.join().unwrap();
            once.join().unwrap();
            seen.sort_unstable();
            assert_eq!(seen, vec![0, 1, 2]);
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
