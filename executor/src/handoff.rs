//! Handing launched tasks from the executor's endpoint (on the event loop) to the task
//! runners: the lock over what they share, a condition variable runners sleep on, and a
//! count of the sleepers, so that a hand-over wakes runners only when some sleep, and
//! no more of them than there are tasks.
//!
//! The rule that makes it safe: a runner looks at the queue and counts itself sleeping
//! under the lock, and stays under it until the condition variable's wait releases it. A
//! producer queues under the lock, and reads the count after it unlocks. Either the
//! runner's look comes first, and then the producer, whose lock follows the runner's
//! wait, sees it counted and sends a wake-up the wait receives; or the producer's queueing
//! comes first, and the runner sees the task. No task is left queued with every runner
//! asleep. The count is an atomic so that a hand-over when nobody sleeps (a busy
//! executor) makes no system call and takes no second look under the lock.
//!
//! Besides the count, the length of the queue as last left under the lock is published
//! ([`Handoff::queued`]) for runners that look for work without taking the lock
//! (`executor.busyPoll`); what they find is only a hint to look again under it.

use crate::sync::{AtomicUsize, Condvar, Mutex, MutexGuard, Ordering};

/// What the executor and its runners share under one lock (`S`), with the runners'
/// condition variable and the counts they are woken by.
pub(crate) struct Handoff<S> {
    state: Mutex<S>,
    /// Runners asleep on `work`, or about to be (changed under the `state` lock).
    sleeping: AtomicUsize,
    /// The length of the task queue as last left under the `state` lock.
    queued: AtomicUsize,
    /// Signalled when work is queued or the pool shuts down.
    work: Condvar,
}

impl<S> Handoff<S> {
    /// Shares `state`; nobody sleeps and nothing is queued yet.
    pub(crate) fn new(state: S) -> Self {
        Handoff {
            state: Mutex::new(state),
            sleeping: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            work: Condvar::new(),
        }
    }

    /// Locks the shared state. A thread that panicked holding it left it consistent (no
    /// code under it panics midway), so a poisoned lock is taken as it is.
    pub(crate) fn lock(&self) -> MutexGuard<'_, S> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends a hand-over of tasks queued under `state`, which leaves `queued` tasks in the
    /// queue: publishes that length, unlocks, and wakes as many sleeping runners as there
    /// are queued tasks (no system call when none sleeps).
    pub(crate) fn hand_over(&self, state: MutexGuard<'_, S>, queued: usize) {
        self.queued.store(queued, Ordering::Release);
        drop(state);
        // A runner counts itself sleeping under the lock before it waits: one that found
        // the queue empty is counted here, and a notification sent between its unlock
        // and its wait still reaches it.
        let sleeping = self.sleeping.load(Ordering::Acquire);
        for _ in 0..sleeping.min(queued) {
            self.work.notify_one();
        }
    }

    /// Publishes the queue's length after a runner took from it, under the lock.
    pub(crate) fn set_queued(&self, queued: usize) {
        self.queued.store(queued, Ordering::Release);
    }

    /// The queue's length as last left under the lock: a look without the lock, for a
    /// runner waiting for work before it sleeps.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Sleeps until woken, counted among the sleepers: a runner that found nothing it can
    /// take under `state` (the same lock, not released in between).
    pub(crate) fn sleep<'a>(&'a self, state: MutexGuard<'a, S>) -> MutexGuard<'a, S> {
        self.sleeping.fetch_add(1, Ordering::AcqRel);
        let state = self.work.wait(state).unwrap_or_else(|e| e.into_inner());
        self.sleeping.fetch_sub(1, Ordering::AcqRel);
        state
    }

    /// Runners asleep (or about to be).
    pub(crate) fn sleeping(&self) -> usize {
        self.sleeping.load(Ordering::Acquire)
    }

    /// Wakes one sleeping runner, if any sleeps.
    pub(crate) fn wake_one(&self) {
        self.work.notify_one();
    }

    /// Wakes one runner if the count says some sleep: after a change made under the lock
    /// (and unlocked) that one of them must see.
    pub(crate) fn wake_one_if_sleeping(&self) {
        if self.sleeping() > 0 {
            self.work.notify_one();
        }
    }

    /// Wakes every runner if the count says some sleep, as
    /// [`Handoff::wake_one_if_sleeping`] does one.
    pub(crate) fn wake_all_if_sleeping(&self) {
        if self.sleeping() > 0 {
            self.work.notify_all();
        }
    }

    /// Wakes every sleeping runner.
    pub(crate) fn wake_all(&self) {
        self.work.notify_all();
    }
}
