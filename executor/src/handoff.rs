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
//!
//! Model-checked with loom (`RUSTFLAGS="--cfg loom"`, `loom_models` below) through the
//! executor's own hand-over and its runners' way to their next task.

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

#[cfg(all(test, loom))]
mod loom_models {
    //! The executor's own hand-over ([`Executor::commit`], [`Executor::stop_within`])
    //! against its runners' own way to their next task ([`Inner::next_batch`]), on loom's
    //! threads instead of the executor's. Runners do not poll before they sleep here
    //! (`executor.busyPoll=0`): a poll only decides when to look again under the lock,
    //! and loom has no clock. A runner that sleeps with a task it could take and no
    //! wake-up on its way never wakes, which loom reports as a deadlock.

    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::time::Duration;

    use flint_rpc::RpcError;
    use flint_wire::{Message, TaskDescription};

    use crate::config::ExecutorConfig;
    use crate::executor::{Executor, Inner, Job, Staged};
    use crate::launch::Launch;
    use crate::registry::TaskRegistry;
    use crate::status::StatusSender;
    use crate::task::TaskHandle;
    use crate::testing::task;

    /// Takes status updates and drops them: no model runs a task.
    struct Nowhere;

    impl StatusSender for Nowhere {
        fn send_status(&self, _: &Message) -> Result<(), RpcError> {
            Ok(())
        }
    }

    /// An executor of `cores` whose runners are the model's threads.
    fn executor(cores: u32) -> Executor {
        let mut config = ExecutorConfig::new("7", "localhost", cores);
        config.busy_poll = Duration::ZERO;
        Executor::without_runners(config, TaskRegistry::new(), Box::new(Nowhere))
    }

    /// Stages a launch of each `(task_id, cpus)` and hands them over in one commit, as the
    /// executor's endpoint does at the end of a batch of the event loop.
    fn hand_over(executor: &Executor, tasks: &[(u64, u32)]) {
        let mut staged = Staged::with_capacity(tasks.len());
        for &(task_id, cpus) in tasks {
            let launch = Launch::from_description(TaskDescription {
                cpus,
                ..task(task_id, "noop", b"")
            });
            executor.stage(&mut staged, launch);
        }
        executor.commit(&mut staged).unwrap();
    }

    /// What a runner thread keeps from one batch to the next.
    struct Runner {
        inner: Arc<Inner>,
        take_all: bool,
        batch: VecDeque<Job>,
        ended: Vec<(u64, Arc<TaskHandle>)>,
        held_cores: u32,
    }

    impl Runner {
        fn new(executor: &Executor) -> Runner {
            Runner {
                inner: executor.inner.clone(),
                take_all: executor.cores() == 1,
                batch: VecDeque::new(),
                ended: Vec::new(),
                held_cores: 0,
            }
        }

        /// Ends the tasks of its last batch at once and takes the next one: their ids,
        /// or `None` once the executor stops.
        fn next(&mut self) -> Option<Vec<u64>> {
            for job in self.batch.drain(..) {
                job.handle.mark_ended();
                self.ended.push((job.launch.task_id, job.handle));
            }
            let mut lease = None;
            let more = self.inner.next_batch(
                &mut self.ended,
                &mut self.batch,
                self.take_all,
                &mut lease,
                &mut self.held_cores,
            );
            more.then(|| self.batch.iter().map(|job| job.launch.task_id).collect())
        }
    }

    /// Once every thread is done, nobody counts as sleeping, and nothing is queued.
    fn assert_settled(executor: &Executor) {
        let handoff = &executor.inner.handoff;
        assert_eq!(handoff.sleeping(), 0, "a runner still counted asleep");
        assert!(handoff.lock().queue.is_empty());
        // A stop empties the queue without publishing its length: runners look at
        // `stopped` as well.
        if !executor.is_stopped() {
            assert_eq!(handoff.queued(), 0);
        }
    }

    /// Two runners of a two-core executor each wait for a task while the loop hands
    /// over one task, then another: each hand-over reaches a runner, whether it is
    /// looking, about to sleep or asleep.
    #[test]
    fn loom_every_task_handed_over_reaches_a_runner() {
        loom::model(|| {
            let executor = executor(2);
            let runners: Vec<_> = (0..2)
                .map(|_| {
                    let mut runner = Runner::new(&executor);
                    loom::thread::spawn(move || runner.next())
                })
                .collect();
            hand_over(&executor, &[(1, 1)]);
            hand_over(&executor, &[(2, 1)]);
            let mut taken: Vec<u64> = runners
                .into_iter()
                .flat_map(|runner| {
                    let batch = runner.join().unwrap().expect("the executor runs");
                    assert_eq!(batch.len(), 1, "a runner among several takes one task");
                    batch
                })
                .collect();
            taken.sort_unstable();
            assert_eq!(taken, [1, 2]);
            assert_settled(&executor);
        });
    }

    /// The only runner of a one-core executor takes whatever is queued at once, across
    /// two hand-overs, going to sleep in between or not.
    #[test]
    fn loom_a_lone_runner_takes_every_task() {
        loom::model(|| {
            let executor = executor(1);
            let mut runner = Runner::new(&executor);
            let runner = loom::thread::spawn(move || {
                let mut taken = Vec::new();
                while taken.len() < 2 {
                    taken.extend(runner.next().expect("the executor runs"));
                }
                taken
            });
            hand_over(&executor, &[(1, 1)]);
            hand_over(&executor, &[(2, 1)]);
            assert_eq!(runner.join().unwrap(), [1, 2]);
            assert_settled(&executor);
        });
    }

    /// A runner holding both cores of its executor (a two-cpu task) frees them and takes
    /// the next task while the other runner waits, asleep or not, for a task that can
    /// start: the queue has two one-cpu tasks, and the runner that takes the first wakes
    /// the one waiting for cores.
    #[test]
    fn loom_a_runner_that_frees_cores_wakes_one_waiting_for_them() {
        loom::model(|| {
            let executor = executor(2);
            let mut wide = Runner::new(&executor);
            hand_over(&executor, &[(1, 2)]);
            assert_eq!(wide.next(), Some(vec![1]));
            let wide = loom::thread::spawn(move || wide.next());
            let mut other = Runner::new(&executor);
            let other = loom::thread::spawn(move || other.next());
            hand_over(&executor, &[(2, 1), (3, 1)]);
            let mut taken: Vec<u64> = [wide, other]
                .into_iter()
                .flat_map(|runner| runner.join().unwrap().expect("the executor runs"))
                .collect();
            taken.sort_unstable();
            assert_eq!(taken, [2, 3]);
            assert_settled(&executor);
        });
    }

    /// A queued task waits for cores that a long task holds, and is killed: a runner,
    /// asleep or not, takes it at once (a killed task needs no cores) to end it.
    #[test]
    fn loom_a_kill_reaches_a_runner_for_a_task_waiting_for_cores() {
        loom::model(|| {
            let executor = executor(2);
            let mut wide = Runner::new(&executor);
            hand_over(&executor, &[(1, 2)]);
            assert_eq!(wide.next(), Some(vec![1]));
            hand_over(&executor, &[(2, 1)]);
            let mut other = Runner::new(&executor);
            let other = loom::thread::spawn(move || other.next());
            assert!(executor.kill_task(2, false, "not needed"));
            assert_eq!(other.join().unwrap(), Some(vec![2]));
            drop(wide);
            assert_settled(&executor);
        });
    }

    /// The loop hands over a task and the executor stops at once, while two runners look
    /// for work: every runner learns of the stop, asleep or not, and the task is taken
    /// by one of them or dropped with the queue.
    #[test]
    fn loom_a_stop_reaches_every_runner() {
        loom::model(|| {
            let executor = executor(2);
            let runners: Vec<_> = (0..2)
                .map(|_| {
                    let mut runner = Runner::new(&executor);
                    loom::thread::spawn(move || {
                        let mut taken = Vec::new();
                        while let Some(batch) = runner.next() {
                            taken.extend(batch);
                        }
                        taken
                    })
                })
                .collect();
            hand_over(&executor, &[(1, 1)]);
            assert!(executor.stop_within(Duration::ZERO));
            let taken: Vec<u64> = runners
                .into_iter()
                .flat_map(|runner| runner.join().unwrap())
                .collect();
            assert!(taken.len() <= 1, "{taken:?}");
            assert_settled(&executor);
        });
    }
}
