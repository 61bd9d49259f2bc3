//! The task runner threads: each takes queued tasks, runs them back to back, and sends
//! their status updates.
//!
//! The only runner of a one-core executor takes every queued task at once; a runner among
//! several takes one at a time, so that tasks queued behind a long one are left to the
//! other runners, and starts a task only when its `cpus` are free. A task that ends is
//! marked ended at once (a kill or a heartbeat no longer sees it) and forgotten when its
//! runner next takes work.
//!
//! A runner that runs out of work looks for more for `executor.busyPoll` (50us by
//! default), yielding the CPU between looks, and then sleeps on the hand-over's condition
//! variable ([`crate::handoff`]). From the first look until it sleeps it is lent to the
//! RPC environment's event loop ([`crate::StatusSender::lend_transport`]): each look
//! turns the loop, so that the next launch is read off the socket, handed over and taken
//! up by the runner itself, with no hand-off from the loop thread, which leaves the
//! sockets to the runner while it keeps looking (and takes them back within about a
//! millisecond once the runner is busy with a task). The executor's own endpoint handlers
//! then run on the runner; none of them blocks. Halfway through a batch of quick tasks a
//! lent runner sends its updates and turns the loop once more itself ([`Flush::Refill`]):
//! the first half's updates leave then, not after the batch, and the launches they free
//! are waiting in the socket when the batch ends, so that a pipelined runner's queue does
//! not run dry for a round trip after each batch.
//!
//! Waking a sleeping thread is costly on a virtual machine; without launch pipelining
//! every task would pay it, and with it every batch. docs/perf-log.md has what polling
//! and lending the runner gained, against sleeping at once and against handing over from
//! the loop thread. Pure spinning without yielding measured worse: it keeps the event
//! loops off the core they need.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::LoopLease;
use flint_wire::{StageInfo, TaskFailureKind, TaskMetrics, TaskPayload};
use tracing::{debug, error, info, warn};

use crate::executor::{lock, Inner, Job, INITIAL_CAPACITY};
use crate::launch::Launch;
use crate::registry::{TaskFn, TaskRegistry};
use crate::status::{AfterUpdate, Ended, Flush, HeldSlot, RefillPoint};
use crate::task::{StageContext, TaskContext, TaskError, TaskHandle};

/// Decrements the pool's live count when a runner exits, however it exits.
struct Exiting<'a>(&'a Inner);

impl Drop for Exiting<'_> {
    fn drop(&mut self) {
        self.0.handoff.lock().live -= 1;
        self.0.exited.notify_all();
    }
}

/// The task function a runner looked up last, so that a run of tasks of one function
/// looks it up once.
struct FunctionCache<'r> {
    name: &'r str,
    function: Option<&'r TaskFn>,
}

impl<'r> FunctionCache<'r> {
    fn get(&mut self, registry: &'r TaskRegistry, name: &str) -> Option<&'r TaskFn> {
        match self.function {
            Some(function) if self.name == name => Some(function),
            _ => {
                let (name, function) = registry.entry(name)?;
                self.name = name;
                self.function = Some(function);
                Some(function)
            }
        }
    }
}

/// A runner thread: takes queued tasks until the pool shuts down. The only runner of a
/// one-core executor takes every queued task at once; a runner among several takes one
/// at a time, so that tasks queued behind a long one are left to the other runners.
pub(crate) fn runner(inner: Arc<Inner>) {
    let _exiting = Exiting(&inner);
    let take_all = inner.cores == 1;
    let mut functions = FunctionCache {
        name: "",
        function: None,
    };
    let mut batch: VecDeque<Job> = VecDeque::with_capacity(INITIAL_CAPACITY);
    // Tasks of the batch that ended, forgotten when the runner takes its next batch.
    let mut ended: Vec<(u64, Arc<TaskHandle>)> = Vec::with_capacity(INITIAL_CAPACITY);
    // Status updates held, to be sent in one frame; none whenever the runner waits.
    let held: HeldSlot = Arc::default();
    lock(&inner.held_by_runner).push(held.clone());
    // Held from when the runner first looks for work until it sleeps.
    let mut lease: Option<LoopLease> = None;
    // The cores the task this runner took holds (not with take_all).
    let mut held_cores = 0u32;
    while inner.next_batch(
        &mut ended,
        &mut batch,
        take_all,
        &mut lease,
        &mut held_cores,
    ) {
        // A runner woken from its sleep holds no lease; with more than one task at hand
        // it takes one now (it would when it next looks for work), so that its updates
        // may wait for each other (see `Flush::after_update`).
        if lease.is_none() && batch.len() > 1 && !inner.busy_poll.is_zero() {
            lease = inner.status.lend_transport();
        }
        // When a task of the batch ends, the next one starts: one clock read serves both.
        let mut clock = inner.clock.now();
        let mut refill = RefillPoint::of_batch(batch.len());
        while let Some(Job { launch, handle, .. }) = batch.pop_front() {
            let task_id = launch.task_id;
            if inner.stopped.load(Ordering::Acquire) {
                debug!("task (TID {task_id}) dropped: the executor stops");
                handle.mark_ended();
                ended.push((task_id, handle));
                continue;
            }
            let (outcome, finished_in, handle) =
                inner.execute(&launch, handle, &mut functions, &mut clock);
            handle.mark_ended();
            let next_same_function = batch
                .front()
                .is_some_and(|next| launch.same_function(&next.launch));
            // Its views of the handle's scratch buffer go before the handle is reused.
            drop(launch);
            ended.push((task_id, handle));
            let update = if inner.stopped.load(Ordering::Acquire) {
                debug!("task (TID {task_id}) ended while the executor stops; no status update");
                None
            } else {
                Some(outcome.into_update(&inner.executor_id, task_id, inner.text_limit))
            };
            let flush = {
                let mut held = lock(&held);
                let flush = Flush::after_update(AfterUpdate {
                    finished_in,
                    next_same_function,
                    unflushed: held.len() + usize::from(update.is_some()),
                    lent: lease.is_some(),
                    more_at_hand: !batch.is_empty() || inner.handoff.queued() != 0,
                    halfway: refill.reached(finished_in, batch.len()),
                });
                match (update, ended.last()) {
                    (Some(update), Some((_, handle))) if flush == Flush::Hold => {
                        held.hold(&inner, update, handle.clone())
                    }
                    (Some(update), Some((_, handle))) => held.send_with(&inner, update, handle),
                    _ if flush != Flush::Hold => held.send(&inner),
                    _ => {}
                }
                flush
            };
            flush.apply(&*inner.status, lease.as_ref());
        }
        // A stop that came in the middle of the batch skipped its flushes: what the tasks
        // that ended before it sent must not stay behind.
        let flush = {
            let mut held = lock(&held);
            let flush = Flush::at_batch_end(held.len());
            held.send(&inner);
            flush
        };
        flush.apply(&*inner.status, lease.as_ref());
    }
}

impl Inner {
    /// Forgets the ended tasks and fills `batch` (empty) with the next queued tasks:
    /// all of them when `take_all`, else one; sleeps until there are some. False once the
    /// pool shuts down.
    pub(crate) fn next_batch(
        &self,
        ended: &mut Vec<(u64, Arc<TaskHandle>)>,
        batch: &mut VecDeque<Job>,
        take_all: bool,
        lease: &mut Option<LoopLease>,
        held_cores: &mut u32,
    ) -> bool {
        debug_assert!(batch.is_empty());
        let mut state = self.handoff.lock();
        for (task_id, handle) in ended.drain(..) {
            state.forget(task_id, handle);
        }
        state.free_cores += std::mem::take(held_cores);
        let mut polled = false;
        loop {
            if take_all && !state.queue.is_empty() {
                // The runner's empty queue, with its capacity, becomes the shared one.
                std::mem::swap(&mut state.queue, batch);
                self.handoff.set_queued(0);
                return true;
            }
            // The next task in order if its cores are free, else a killed one from anywhere
            // in the queue (it needs none).
            let free = state.free_cores;
            let taken = match state.queue.front().map(|job| self.cores_needed(job)) {
                Some(need) if need <= free => Some((0, need)),
                Some(_) => state
                    .queue
                    .iter()
                    .position(|job| job.handle.is_killed())
                    .map(|position| (position, 0)),
                None => None,
            };
            if let Some((position, need)) = taken {
                let job = state.queue.remove(position).expect("a queued job");
                state.free_cores -= need;
                *held_cores = need;
                batch.push_back(job);
                self.handoff.set_queued(state.queue.len());
                // A runner that takes a task wakes one that sleeps for want of cores if what
                // is left can start now: each such runner wakes the next. (With one cpu a
                // task none ever does, and this costs nothing.)
                let more = state.blocked > 0
                    && state
                        .queue
                        .front()
                        .is_some_and(|next| self.cores_needed(next) <= state.free_cores);
                drop(state);
                if more {
                    self.handoff.wake_one();
                }
                return true;
            }
            if state.shutdown {
                return false;
            }
            // A queued task waiting for cores comes only with a runner's end: no need to
            // look for it by turning the transport.
            if !polled && !self.busy_poll.is_zero() && state.queue.is_empty() {
                // executor.busyPoll: a task that comes within it starts without this
                // runner going to sleep and being woken.
                polled = true;
                drop(state);
                if lease.is_none() {
                    *lease = self.status.lend_transport();
                }
                let until = Instant::now() + self.busy_poll;
                while self.handoff.queued() == 0
                    && !self.stopped.load(Ordering::Acquire)
                    && Instant::now() < until
                {
                    // Turning the transport's loop may bring the next task right here.
                    if !lease.as_ref().is_some_and(LoopLease::turn) {
                        std::thread::yield_now();
                    }
                }
                state = self.handoff.lock();
                continue;
            }
            // A sleeping runner leaves the sockets to the event loop's thread.
            *lease = None;
            let blocked = !state.queue.is_empty();
            state.blocked += usize::from(blocked);
            state = self.handoff.sleep(state);
            state.blocked -= usize::from(blocked);
        }
    }

    /// The cores a queued task holds while it runs: its cpus, within the executor's; none
    /// for a task already killed, which ends at once and must not wait for cores.
    fn cores_needed(&self, job: &Job) -> u32 {
        if job.handle.is_killed() {
            0
        } else {
            job.launch.cpus.clamp(1, self.cores)
        }
    }

    /// What a task of a job's stage has of shuffles: a writer of its map output, the
    /// shuffles it reads, and the executor's shuffle service, told of the task's epoch.
    fn stage_context(
        &self,
        launch: &Launch,
        stage: &StageInfo<'_>,
    ) -> Result<StageContext, String> {
        let Some(service) = self.shuffle.get() else {
            return Err(format!(
                "executor {} has no shuffle service, which a task of a job's stage needs",
                self.executor_id
            ));
        };
        service.start_task(stage.epoch, stage.statuses);
        let writer = stage
            .writes
            .map(|writes| service.writer(writes.shuffle_id, launch.partition_id, writes.partitions))
            .transpose()
            .map_err(|e| e.to_string())?
            .map(Mutex::new);
        Ok(StageContext {
            writer,
            reads: stage.reads().collect(),
            service: service.clone(),
        })
    }

    /// Runs one task; returns how it ended, how long its function ran if it finished
    /// with a result (what the flush policy looks at), and its handle (lent to the
    /// task's context, not shared).
    ///
    /// `clock` is when the runner took the task up, and is moved on to when it ended:
    /// the runner's tasks run back to back, so one clock read ends one task and starts
    /// the next.
    fn execute<'r>(
        &'r self,
        launch: &Launch,
        handle: Arc<TaskHandle>,
        functions: &mut FunctionCache<'r>,
        clock: &mut quanta::Instant,
    ) -> (Ended, Option<Duration>, Arc<TaskHandle>) {
        let start = *clock;
        if let Some(reason) = handle.kill_reason() {
            *clock = self.clock.now();
            info!(
                "Executor killed {} before it started, reason: {reason}",
                launch.name
            );
            let ended = Ended::killed(reason, TaskMetrics::default());
            return (ended, None, handle);
        }
        debug!("Running {}", launch.name);
        let parsed = match &launch.extras {
            Ok(_) => TaskPayload::parse(&launch.serialized_task).map_err(|e| e.to_string()),
            Err(refused) => Err(refused.to_string()),
        };
        let payload = match parsed {
            Ok(payload) => payload,
            Err(e) => {
                *clock = self.clock.now();
                let message = format!("Could not deserialize {}: {e}", launch.name);
                error!("{message}");
                let ended = Ended::failed(
                    TaskFailureKind::Undeserializable,
                    message,
                    TaskMetrics::default(),
                );
                return (ended, None, handle);
            }
        };
        let Some(function) = functions.get(&self.registry, payload.function) else {
            *clock = self.clock.now();
            let message = format!(
                "No task function named {:?} is registered on executor {} (it has: {})",
                payload.function,
                self.executor_id,
                self.registry.names().join(", ")
            );
            error!("Could not deserialize {}: {message}", launch.name);
            let ended = Ended::failed(
                TaskFailureKind::Undeserializable,
                message,
                TaskMetrics::default(),
            );
            return (ended, None, handle);
        };
        let stage = match payload.stage {
            None => None,
            Some(stage) => match self.stage_context(launch, &stage) {
                Ok(stage) => Some(stage),
                Err(message) => {
                    *clock = self.clock.now();
                    error!("Could not deserialize {}: {message}", launch.name);
                    let ended = Ended::failed(
                        TaskFailureKind::Undeserializable,
                        message,
                        TaskMetrics::default(),
                    );
                    return (ended, None, handle);
                }
            },
        };
        let input: Bytes = launch.serialized_task.slice_ref(payload.input);
        let function_name = payload.function;
        let run_start = self.clock.now();
        let deserialize_ns = run_start.duration_since(start).as_nanos() as u64;
        handle.mark_started(self.since_epoch(run_start), deserialize_ns);
        let mut ctx = TaskContext {
            task_id: launch.task_id,
            attempt_number: launch.attempt_number,
            partition_id: launch.partition_id,
            index: launch.index,
            cpus: launch.cpus,
            executor_id: self.executor_id.clone(),
            extras: launch.extras.as_ref().ok().cloned().flatten(),
            handle,
            stage,
            broadcasts: self.broadcasts.get().cloned(),
        };
        let result = catch_unwind(AssertUnwindSafe(|| function(&ctx, &input)));
        // A shuffle map task's result is its map status, once its output is committed;
        // a failed or killed one's output is dropped.
        let result = match (result, ctx.stage.take()) {
            (
                Ok(Ok(_)),
                Some(StageContext {
                    writer: Some(writer),
                    service,
                    ..
                }),
            ) if !ctx.is_interrupted() => {
                let writer = writer.into_inner().unwrap_or_else(|e| e.into_inner());
                ctx.add_output_bytes(writer.bytes_written());
                let sizes = writer.commit();
                Ok(Ok(service.map_status(sizes).encode()))
            }
            (result, _) => result,
        };
        *clock = self.clock.now();
        let run_time = clock.saturating_duration_since(run_start);
        let handle = ctx.handle;
        let mut metrics = handle.metrics(run_time.as_nanos() as u64);
        // As the seeds' runner: a task asked to stop ends KILLED, whatever it returned.
        if let Some(reason) = handle.kill_reason() {
            info!("Executor killed {}, reason: {reason}", launch.name);
            let ended = Ended::killed(reason, metrics);
            return (ended, None, handle);
        }
        match result {
            Ok(Ok(value)) => {
                let accumulators = handle.accumulators().take();
                (
                    self.finished(launch, value, metrics, accumulators),
                    Some(run_time),
                    handle,
                )
            }
            Ok(Err(TaskError::Killed { reason })) => {
                info!("Executor killed {}, reason: {reason}", launch.name);
                (Ended::killed(&reason, metrics), None, handle)
            }
            Ok(Err(TaskError::Failed(message))) => {
                error!("Exception in {}: {message}", launch.name);
                let ended = Ended::failed(TaskFailureKind::Exception, message, metrics);
                (ended, None, handle)
            }
            Ok(Err(TaskError::FetchFailed(failure))) => {
                warn!("{} failed to fetch a shuffle block: {failure}", launch.name);
                (Ended::fetch_failed(failure, metrics), None, handle)
            }
            Err(panic) => {
                let text = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("(a panic payload that is not text)");
                let message = format!("task function {function_name:?} panicked: {text}");
                error!("Exception in {}: {message}", launch.name);
                metrics.result_size = 0;
                let ended = Ended::failed(TaskFailureKind::Exception, message, metrics);
                (ended, None, handle)
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::registry::TaskRegistry;
    use crate::status::RESULT_OVERHEAD;
    use crate::task::{TaskContext, TaskError};
    use crate::testing::{executor, task, wait_until, WAIT};
    use bytes::Bytes;
    use flint_wire::{
        BlockId, StatusUpdate, TaskDescription, TaskFailureKind, TaskOutcome, TaskState,
    };
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// With launch pipelining the driver may queue tasks beyond free cores; a task of two
    /// cpus still starts only when two cores are free.
    #[test]
    fn queued_tasks_start_only_when_their_cpus_are_free() {
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicBool::new(false));
        let mut registry = TaskRegistry::with_builtins();
        {
            // "count:N:MS" waits, at most MS milliseconds, until N count tasks have run at
            // once.
            let (running, most) = (running.clone(), most.clone());
            registry
                .register("count", move |_: &TaskContext, input: &Bytes| {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let input = std::str::from_utf8(input).unwrap();
                    let (meet, millis) = input.split_once(':').unwrap();
                    let meet: usize = meet.parse().unwrap();
                    let deadline = Instant::now() + Duration::from_millis(millis.parse().unwrap());
                    while most.load(Ordering::SeqCst) < meet && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(Bytes::new())
                })
                .unwrap();
            // "gate" runs until the test opens it (at most 10 s).
            let open = open.clone();
            registry
                .register("gate", move |_: &TaskContext, _: &Bytes| {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while !open.load(Ordering::SeqCst) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Ok(Bytes::new())
                })
                .unwrap();
        }
        let (executor, rx) = executor(4, 1 << 20, registry);
        for task_id in 1..=4 {
            let two_cpus = TaskDescription {
                cpus: 2,
                // All four would meet if they could run at once; two can.
                ..task(task_id, "count", b"4:300")
            };
            executor.launch_task(two_cpus).unwrap();
        }
        for _ in 1..=4 {
            rx.recv_timeout(WAIT).unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 2, "tasks running at once");
        wait_until("every core is free again", || {
            executor.inner.handoff.lock().free_cores == 4
        });

        // A queued task that is killed ends at once, without waiting for cores.
        executor
            .launch_task(TaskDescription {
                cpus: 4,
                ..task(5, "sleep", b"2000")
            })
            .unwrap();
        wait_until("the sleep to start", || {
            executor.inner.handoff.lock().free_cores == 0
        });
        executor
            .launch_task(TaskDescription {
                cpus: 4,
                ..task(6, "count", b"1:0")
            })
            .unwrap();
        // Every other runner asleep (the one the launch woke back asleep too, given a
        // moment): the kill must wake one.
        wait_until("the other runners sleep", || {
            executor.inner.handoff.sleeping() == 3
        });
        std::thread::sleep(Duration::from_millis(200));
        let killed_at = Instant::now();
        assert!(executor.kill_task(6, false, "not needed"));
        let update = rx.recv_timeout(WAIT).unwrap();
        assert_eq!((update.task_id, update.state), (6, TaskState::Killed));
        assert!(killed_at.elapsed() < Duration::from_millis(1500));
        assert!(executor.kill_task(5, false, "done"));
        assert_eq!(rx.recv_timeout(WAIT).unwrap().task_id, 5);

        // Four 1-cpu tasks queued behind a 4-cpu one all start when it ends: each runner
        // that takes one wakes the next.
        wait_until("every core is free again", || {
            executor.inner.handoff.lock().free_cores == 4
        });
        most.store(0, Ordering::SeqCst);
        let wide = TaskDescription {
            cpus: 4,
            ..task(7, "gate", b"")
        };
        executor.launch_task(wide).unwrap();
        for task_id in 8..=11 {
            executor
                .launch_task(task(task_id, "count", b"4:5000"))
                .unwrap();
        }
        open.store(true, Ordering::SeqCst);
        for _ in 7..=11 {
            rx.recv_timeout(WAIT).unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 4, "1-cpu tasks at once");
    }

    #[test]
    fn runner_threads_are_named_and_counted() {
        let mut registry = TaskRegistry::new();
        registry
            .register("thread-name", |_: &TaskContext, _: &Bytes| {
                Ok(Bytes::from(
                    std::thread::current().name().unwrap_or("").to_owned(),
                ))
            })
            .unwrap();
        let (executor, rx) = executor(3, 1 << 20, registry);
        executor.launch_task(task(1, "thread-name", b"")).unwrap();
        let update = rx.recv_timeout(WAIT).unwrap();
        let TaskOutcome::Direct { value, .. } = update.outcome else {
            panic!("{update:?}")
        };
        let name = std::str::from_utf8(&value).unwrap();
        assert!(name.starts_with("Executor task launch worker-"), "{name}");
        assert_eq!(executor.inner.handoff.lock().live, 3);
        assert!(executor.stop());
        assert_eq!(executor.inner.handoff.lock().live, 0);
    }

    #[test]
    fn a_task_reports_the_time_its_function_ran_and_a_noop_next_to_it_almost_none() {
        let (executor, rx) = executor(1, 1 << 20, TaskRegistry::with_builtins());
        executor.launch_task(task(1, "sleep", b"30")).unwrap();
        executor.launch_task(task(2, "noop", b"")).unwrap();
        let run_time = |update: StatusUpdate| {
            let TaskOutcome::Direct { metrics, .. } = update.outcome else {
                panic!("{update:?}")
            };
            Duration::from_nanos(metrics.run_time_ns)
        };
        let slept = run_time(rx.recv_timeout(WAIT).unwrap());
        let noop = run_time(rx.recv_timeout(WAIT).unwrap());
        // The runner's clock (the TSC) measures what the sleep's own clock waited for,
        // and the task after it is not charged for it.
        assert!(slept >= Duration::from_millis(30), "{slept:?}");
        assert!(slept < WAIT, "{slept:?}");
        assert!(noop < Duration::from_millis(30), "{noop:?}");
    }

    #[test]
    fn results_above_the_limit_go_to_the_block_store() {
        let limit = 1 << 20;
        let (executor, rx) = executor(1, limit, TaskRegistry::with_builtins());
        assert_eq!(executor.direct_result_limit(), limit - RESULT_OVERHEAD);
        let fits = (limit - RESULT_OVERHEAD).to_string();
        let too_large = (limit - RESULT_OVERHEAD + 1).to_string();
        executor
            .launch_task(task(1, "large-result", fits.as_bytes()))
            .unwrap();
        executor
            .launch_task(task(2, "large-result", too_large.as_bytes()))
            .unwrap();
        let first = rx.recv_timeout(WAIT).unwrap();
        assert_eq!(first.state, TaskState::Finished);
        let TaskOutcome::Direct { value, metrics, .. } = first.outcome else {
            panic!("{first:?}")
        };
        assert_eq!(value.len(), limit - RESULT_OVERHEAD);
        assert_eq!(metrics.result_size, value.len() as u64);
        let second = rx.recv_timeout(WAIT).unwrap();
        let block_id = BlockId::TaskResult { task_id: 2 };
        assert_eq!(second.state, TaskState::Finished);
        let TaskOutcome::Indirect {
            block_id: id,
            size,
            metrics,
            ..
        } = second.outcome
        else {
            panic!("{second:?}")
        };
        assert_eq!((id, size), (block_id, (limit - RESULT_OVERHEAD + 1) as u64));
        assert_eq!(metrics.result_size, size);
        let stored = executor.block_store().get(block_id).unwrap();
        assert_eq!(stored.len() as u64, size);
        assert!(stored
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8));
    }

    #[test]
    fn a_map_task_of_more_partitions_than_can_be_honoured_fails_saying_why() {
        use crate::shuffle::{ShuffleFetcher, ShuffleService, ShuffleStore};
        use flint_wire::{BlockManagerId, ShuffleWrite, TaskPayload};

        let max_message = 1 << 20;
        let (executor, rx) = executor(1, max_message, TaskRegistry::with_builtins());
        let env = flint_rpc::RpcEnv::new(&flint_rpc::Conf::new()).unwrap();
        let dir = std::env::temp_dir().join(format!("flint-runner-test-{}", std::process::id()));
        let store = Arc::new(ShuffleStore::new(&dir, "7", 64 << 10));
        let fetcher = ShuffleFetcher::new(
            env.handle(),
            store.clone(),
            "7",
            48 << 20,
            1 << 20,
            Duration::from_secs(5),
            Duration::ZERO,
        );
        let tracker = env
            .handle()
            .endpoint_ref(env.address(), flint_wire::MAP_OUTPUT_TRACKER_ENDPOINT);
        let location = BlockManagerId {
            executor_id: "7".into(),
            host: "127.0.0.1".into(),
            port: env.address().port(),
        };
        executor.set_shuffle_service(Arc::new(ShuffleService::new(
            store.clone(),
            fetcher,
            tracker,
            location,
            Duration::from_secs(5),
            max_message,
        )));
        let map_task = |task_id, partitions| {
            let writes = ShuffleWrite {
                shuffle_id: 1,
                partitions,
            };
            TaskDescription {
                serialized_task: TaskPayload::encode_stage(
                    "shuffle-write",
                    b"10:8:1",
                    0,
                    Some(writes),
                    &[],
                    &[],
                )
                .unwrap(),
                ..task(task_id, "shuffle-write", b"")
            }
        };
        // Too many for the map status to fit a message; for the memory to keep track of;
        // and a count that is honoured.
        let cases: [(u32, Option<&str>); 3] = [
            (u32::MAX, Some("rpc.message.maxSize")),
            (10_000, Some("shuffle.maxMemory")),
            (4, None),
        ];
        for (task_id, (partitions, refused_by)) in (1..).zip(cases) {
            executor.launch_task(map_task(task_id, partitions)).unwrap();
            let update = rx.recv_timeout(WAIT).unwrap();
            match refused_by {
                Some(key) => {
                    let TaskOutcome::Failure { message, .. } = &update.outcome else {
                        panic!("{update:?}")
                    };
                    assert_eq!(update.state, TaskState::Failed);
                    assert!(
                        message.contains(&format!("{partitions} reduce partitions"))
                            && message.contains(key),
                        "{message}"
                    );
                }
                None => assert_eq!(update.state, TaskState::Finished, "{update:?}"),
            }
        }
        assert_eq!(store.outputs(), 1, "only the honoured task's output");
        assert!(executor.stop());
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn failures_panics_and_unknown_functions() {
        let mut registry = TaskRegistry::with_builtins();
        registry
            .register(
                "panics",
                |_: &TaskContext, _: &Bytes| -> Result<Bytes, TaskError> {
                    panic!("the input is cursed")
                },
            )
            .unwrap();
        let (executor, rx) = executor(1, 1 << 20, registry);
        executor
            .launch_task(task(1, "fail-n-attempts", b"1"))
            .unwrap();
        executor.launch_task(task(2, "panics", b"")).unwrap();
        executor
            .launch_task(task(3, "no-such-function", b""))
            .unwrap();
        let mut bad = task(4, "noop", b"");
        bad.serialized_task = Bytes::from_static(b"\x09abc");
        executor.launch_task(bad).unwrap();
        let mut seen = Vec::new();
        for _ in 0..4 {
            let update = rx.recv_timeout(WAIT).unwrap();
            let TaskOutcome::Failure {
                kind,
                message,
                counts_towards_failures,
                ..
            } = update.outcome
            else {
                panic!("{update:?}")
            };
            assert_eq!(update.state, TaskState::Failed);
            assert!(counts_towards_failures);
            seen.push((update.task_id, kind, message));
        }
        seen.sort_by_key(|s| s.0);
        assert_eq!(seen[0].1, TaskFailureKind::Exception);
        assert!(seen[0].2.contains("attempt 0"), "{}", seen[0].2);
        assert_eq!(seen[1].1, TaskFailureKind::Exception);
        assert!(seen[1].2.contains("the input is cursed"), "{}", seen[1].2);
        assert_eq!(seen[2].1, TaskFailureKind::Undeserializable);
        assert!(seen[2].2.contains("\"no-such-function\""), "{}", seen[2].2);
        assert_eq!(seen[3].1, TaskFailureKind::Undeserializable);
        assert!(seen[3].2.contains("announces 9 bytes"), "{}", seen[3].2);
        assert!(executor.running_tasks().is_empty());
    }
}
