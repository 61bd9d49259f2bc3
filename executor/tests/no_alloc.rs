//! Launching tasks allocates nothing once the executor has warmed up.
//!
//! This test binary counts every allocation call of its process (a counting global
//! allocator) while an executor (`run_executor`, 1 core) runs noop tasks launched by a
//! fake driver over real sockets on 127.0.0.1. The fake driver keeps [`IN_FLIGHT`] tasks
//! queued at the executor, as launch pipelining does, and is written to allocate nothing
//! per task itself: it builds each `TaskDescription` from a numbered name, a shared
//! executor id and a shared payload, sends the tasks it launches at once in one
//! `LaunchTasks` frame, and reads status updates (one or a `StatusUpdates` batch) in
//! place. After
//! [`WARM_UP`] tasks, the next [`MEASURED`] tasks may make at most [`ALLOWED`]
//! allocation calls in all, in every thread: buffers growing to their working size, not
//! one per task.
//!
//! A variant runs tasks that each add 1 to a long accumulator (the built-in `accumulate`),
//! whose value travels with every status update: that too allocates nothing per task.
//! Another launches tasks with local properties, as the tasks of a task set with some
//! are: the executor decodes them once and shares them among the tasks that follow.
//!
//! Heartbeats are an hour apart so that none falls in the measured window. Every wait is
//! bounded: the test fails, rather than hangs, after [`DEADLINE`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_executor::{
    run_executor, ExecutorConfig, ExecutorExit, TaskContext, TaskError, TaskRegistry,
};
use flint_rpc::{Conf, Endpoint, EndpointContext, EndpointRef, Incoming, RpcEnv};
use flint_testkit::alloc::{allocations, CountingAllocator};
use flint_testkit::samples::{local_properties, JOB_DESCRIPTION};
use flint_testkit::wait::holds_within;
use flint_wire::{
    ArchivedAccumulatorValue, ArchivedMessage, ArchivedStatusUpdate, ArchivedTaskOutcome,
    ArchivedTaskState, Message, SharedStr, TaskDescription, TaskExtras, TaskName, TaskPayload,
    DRIVER_ENDPOINT, EXECUTOR_ENDPOINT, HEARTBEAT_ENDPOINT,
};

/// A task function that succeeds only if the task's `spark.job.description` property is
/// its input.
const SEES_DESCRIPTION: &str = "sees-description";

/// Tasks run before the count starts.
const WARM_UP: u64 = 20_000;
/// Tasks run while allocations are counted.
const MEASURED: u64 = 100_000;
/// Tasks the fake driver launches in all: the measured window ends in steady state.
const TOTAL: u64 = WARM_UP + MEASURED + 20_000;
/// Tasks the fake driver keeps launched and not yet reported.
const IN_FLIGHT: u64 = 32;
/// Allocation calls allowed in the measured window, in the whole process.
const ALLOWED: u64 = 200;
/// The longest the test may take.
const DEADLINE: Duration = Duration::from_secs(300);

/// Serializes the tests of this binary, whose allocation count is process-wide.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// What the test thread watches.
#[derive(Default)]
struct Progress {
    finished: AtomicU64,
    /// Status updates other than FINISHED.
    other: AtomicU64,
    heartbeats: AtomicU64,
    /// Finished updates that carried one long accumulator of value 1.
    accumulated: AtomicU64,
    /// The executor's endpoint, once it registered.
    executor: Mutex<Option<EndpointRef>>,
}

/// Answers the registration, then launches a task for every status update it gets, up
/// to [`TOTAL`], keeping [`IN_FLIGHT`] launched.
struct FakeDriver {
    progress: Arc<Progress>,
    executor: Option<EndpointRef>,
    executor_id: SharedStr,
    payload: Bytes,
    /// Every task's files, jars and properties, shared as the driver shares a task set's.
    extras: Option<Arc<TaskExtras>>,
    launched: u64,
    reported: u64,
    /// Launches were sent deferred since the last flush.
    unflushed: bool,
    /// The tasks of the next launch frame (kept for its capacity): a driver sends the
    /// tasks it launches at once in one `LaunchTasks` frame, as the real one does.
    frame: Vec<TaskDescription>,
}

impl FakeDriver {
    /// Counts one task's status update.
    fn count(&mut self, update: &ArchivedStatusUpdate) {
        self.reported += 1;
        if update.state == ArchivedTaskState::Finished {
            if let ArchivedTaskOutcome::Direct { accumulators, .. } = &update.outcome {
                if let [one] = accumulators.as_slice() {
                    if matches!(one.value, ArchivedAccumulatorValue::Long(n) if n == 1) {
                        self.progress.accumulated.fetch_add(1, Ordering::Release);
                    }
                }
            }
            self.progress.finished.fetch_add(1, Ordering::Release);
        } else {
            self.progress.other.fetch_add(1, Ordering::Release);
        }
    }

    fn launch_more(&mut self) {
        let Some(executor) = &self.executor else {
            return;
        };
        let mut frame = std::mem::take(&mut self.frame);
        while self.launched < TOTAL && self.launched - self.reported < IN_FLIGHT {
            let task_id = self.launched;
            let task = TaskDescription {
                task_id,
                attempt_number: 0,
                executor_id: self.executor_id.clone(),
                name: TaskName::Numbered {
                    index: task_id as u32,
                    attempt: 0,
                    stage_id: 0,
                    stage_attempt_id: 0,
                    task_id,
                },
                index: task_id as u32,
                partition_id: task_id as u32,
                extras: self.extras.clone(),
                cpus: 1,
                serialized_task: self.payload.clone(),
            };
            frame.push(task);
            self.launched += 1;
        }
        if let Some(message) = Message::take_launches(&mut frame) {
            executor
                .send_deferred(&message)
                .expect("the executor's connection takes the launches");
            self.unflushed = true;
            message.put_back_launches(&mut frame);
            frame.clear();
        }
        self.frame = frame;
    }
}

impl Endpoint for FakeDriver {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        match message.message() {
            ArchivedMessage::RegisterExecutor(registration) => {
                self.executor_id = SharedStr::from(registration.executor_id.as_str());
                let executor = message.sender_ref(EXECUTOR_ENDPOINT);
                *self.progress.executor.lock().unwrap() = Some(executor.clone());
                self.executor = Some(executor);
                message.reply(&Message::RegisteredExecutor).unwrap();
                self.launch_more();
            }
            updates
            @ (ArchivedMessage::StatusUpdate(_) | ArchivedMessage::StatusUpdates { .. }) => {
                for update in updates.status_updates() {
                    self.count(update);
                }
                self.launch_more();
            }
            other => panic!("the fake driver got {}", other.kind().name()),
        }
    }

    fn on_batch_end(&mut self, _ctx: &mut EndpointContext<'_>) {
        if std::mem::take(&mut self.unflushed) {
            if let Some(executor) = &self.executor {
                executor.flush();
            }
        }
    }
}

/// Answers heartbeats (none is expected while counting).
struct FakeHeartbeatReceiver(Arc<Progress>);

impl Endpoint for FakeHeartbeatReceiver {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        self.0.heartbeats.fetch_add(1, Ordering::Release);
        let _ = message.reply(&Message::HeartbeatResponse {
            reregister_block_manager: false,
        });
    }
}

/// Waits until `check` holds, failing the test at `deadline`.
fn wait_until(what: &str, deadline: Instant, progress: &Progress, check: impl Fn() -> bool) {
    assert!(
        holds_within(deadline.saturating_duration_since(Instant::now()), check),
        "timed out waiting for {what}: {} tasks finished, {} other updates",
        progress.finished.load(Ordering::Acquire),
        progress.other.load(Ordering::Acquire)
    );
}

#[test]
fn steady_state_task_launches_allocate_nothing() {
    let (allocations, tasks, accumulated) = allocations_of_tasks("noop", b"", None);
    assert_eq!(accumulated, 0);
    assert!(
        allocations < ALLOWED,
        "{allocations} allocation calls over {tasks} tasks: launching tasks allocates"
    );
}

#[test]
fn tasks_that_add_to_an_accumulator_allocate_nothing_either() {
    let (allocations, tasks, accumulated) = allocations_of_tasks("accumulate", b"1", None);
    assert!(
        accumulated >= WARM_UP + MEASURED,
        "every update carries the task's add"
    );
    assert!(
        allocations < ALLOWED,
        "{allocations} allocation calls over {tasks} tasks: accumulator updates allocate"
    );
}

#[test]
fn tasks_with_local_properties_allocate_nothing_either() {
    let extras = TaskExtras {
        properties: local_properties(),
        ..TaskExtras::NONE
    };
    // The function fails a task that does not see the property: the test asserts that
    // every task finished.
    let (allocations, tasks, _) = allocations_of_tasks(
        SEES_DESCRIPTION,
        JOB_DESCRIPTION.as_bytes(),
        extras.shared(),
    );
    assert!(
        allocations < ALLOWED,
        "{allocations} allocation calls over {tasks} tasks with local properties"
    );
}

/// Runs [`TOTAL`] tasks of `function` on `input`, each with `extras`; returns the
/// allocation calls over the measured ones, how many were measured, and how many updates
/// carried an add of 1 to one long accumulator (all of them or none).
fn allocations_of_tasks(
    function: &str,
    input: &[u8],
    extras: Option<Arc<TaskExtras>>,
) -> (u64, u64, u64) {
    // The count is the whole process's: one measured run at a time.
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let deadline = Instant::now() + DEADLINE;
    let conf =
        Conf::from_pairs(["executor.heartbeatInterval=3600s", "network.timeout=7200s"]).unwrap();
    let progress = Arc::new(Progress::default());
    let driver = RpcEnv::new(&conf).unwrap();
    let handle = driver.handle();
    handle
        .register(
            DRIVER_ENDPOINT,
            FakeDriver {
                progress: progress.clone(),
                executor: None,
                executor_id: SharedStr::from(""),
                payload: TaskPayload::encode(function, input).unwrap(),
                extras,
                launched: 0,
                reported: 0,
                unflushed: false,
                frame: Vec::new(),
            },
        )
        .unwrap();
    handle
        .register(HEARTBEAT_ENDPOINT, FakeHeartbeatReceiver(progress.clone()))
        .unwrap();

    let config = ExecutorConfig::from_conf(&conf, "1", "localhost", 1).unwrap();
    let driver_address = driver.address();
    let (exited, exit) = mpsc::channel();
    let executor_conf = conf.clone();
    let mut registry = TaskRegistry::with_builtins();
    registry
        .register(SEES_DESCRIPTION, |ctx: &TaskContext, input: &Bytes| {
            if ctx
                .local_property("spark.job.description")
                .map(str::as_bytes)
                == Some(input)
            {
                Ok(Bytes::new())
            } else {
                Err(TaskError::failed(
                    "the task does not see its job description",
                ))
            }
        })
        .unwrap();
    std::thread::spawn(move || {
        let _ = exited.send(run_executor(
            &executor_conf,
            driver_address,
            config,
            registry,
        ));
    });

    let finished = || progress.finished.load(Ordering::Acquire);
    wait_until("the warm-up", deadline, &progress, || finished() >= WARM_UP);
    let (allocations_before, tasks_before) = (allocations(), finished());
    wait_until("the measured tasks", deadline, &progress, || {
        finished() >= tasks_before + MEASURED
    });
    let (allocations_after, tasks_after) = (allocations(), finished());
    let allocations = allocations_after - allocations_before;
    let tasks = tasks_after - tasks_before;
    eprintln!(
        "{allocations} allocation calls over {tasks} tasks ({} heartbeats)",
        progress.heartbeats.load(Ordering::Acquire)
    );

    // End the executor before judging, so that a failure does not leave it running.
    let executor = progress.executor.lock().unwrap().clone().unwrap();
    executor.send(&Message::StopExecutor).unwrap();
    let left = deadline.saturating_duration_since(Instant::now());
    let exit = exit
        .recv_timeout(left.max(Duration::from_secs(10)))
        .expect("the executor ends when stopped");
    driver.stop();

    assert_eq!(exit, ExecutorExit::Stopped);
    assert_eq!(
        progress.other.load(Ordering::Acquire),
        0,
        "every task finished"
    );
    let accumulated = progress.accumulated.load(Ordering::Acquire);
    // Every update that arrived carried the add, or none did.
    assert!(
        accumulated == 0 || accumulated == finished(),
        "{accumulated} of {} updates carried an add",
        finished()
    );
    (allocations, tasks, accumulated)
}
