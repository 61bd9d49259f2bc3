//! The executor against a fake driver over real sockets on 127.0.0.1: registration,
//! task launches and their status updates, kills, large results fetched in chunks,
//! heartbeats, and every way an executor ends.
//!
//! The fake driver is an RPC environment of the test with an endpoint registered as
//! `CoarseGrainedScheduler` (and, unless a test wants it absent, one as
//! `HeartbeatReceiver`) that records what it gets. `run_executor` runs on a thread of the
//! test. Every wait is bounded; a harness that is dropped stops its driver, which ends its
//! executor.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_executor::{
    run_executor, ExecutorConfig, ExecutorExit, TaskContext, TaskError, TaskRegistry,
};
use flint_rpc::{Conf, Endpoint, EndpointContext, EndpointRef, Incoming, RpcEnv, RpcError};
use flint_testkit::logs::LogCapture;
use flint_testkit::wait::holds_within;
use flint_wire::{
    ArchivedMessage, BlockId, Heartbeat, Message, RegisterExecutor, StatusUpdate, TaskDescription,
    TaskFailureKind, TaskOutcome, TaskPayload, TaskState, DRIVER_ENDPOINT, EXECUTOR_ENDPOINT,
    HEARTBEAT_ENDPOINT,
};
use tracing::Level;

/// The longest any single wait of these tests lasts.
const WAIT: Duration = Duration::from_secs(10);

// ---- log capture: the seeds' texts are checked where they matter ----------------------

/// Every log line of this test binary: the executor logs on threads of its own.
fn logs() -> &'static LogCapture {
    LogCapture::everywhere()
}

/// Waits until a line at `level` contains `text`.
#[track_caller]
fn wait_for_log(level: Level, text: &str) {
    assert!(
        holds_within(WAIT, || logs().contains(level, text)),
        "no {level} log line with {text:?}"
    );
}

// ---- the fake driver ---------------------------------------------------------------------

#[derive(Default)]
struct DriverState {
    registrations: Vec<RegisterExecutor>,
    /// Where each registration's connection came from.
    registered_from: Vec<SocketAddr>,
    updates: Vec<StatusUpdate>,
    heartbeats: Vec<Heartbeat>,
    /// The executor's endpoint, over the connection it registered on.
    executor: Option<EndpointRef>,
}

type Shared = Arc<Mutex<DriverState>>;

fn lock(state: &Shared) -> std::sync::MutexGuard<'_, DriverState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Answers registrations (or refuses them) and records status updates.
struct FakeDriver {
    state: Shared,
    refuse: Option<String>,
}

impl Endpoint for FakeDriver {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        match message.message() {
            ArchivedMessage::RegisterExecutor(_) => {
                let Message::RegisterExecutor(registration) = message.to_message() else {
                    unreachable!()
                };
                {
                    let mut state = lock(&self.state);
                    state.registrations.push(registration);
                    state.registered_from.extend(message.sender());
                    state.executor = Some(message.sender_ref(EXECUTOR_ENDPOINT));
                }
                let reply = match &self.refuse {
                    Some(reason) => Message::RegisterExecutorFailed {
                        message: reason.clone(),
                    },
                    None => Message::RegisteredExecutor,
                };
                message.reply(&reply).unwrap();
            }
            ArchivedMessage::StatusUpdate(_) | ArchivedMessage::StatusUpdates { .. } => {
                let updates = message.to_message();
                lock(&self.state)
                    .updates
                    .extend_from_slice(updates.status_updates());
            }
            other => panic!("the fake driver got an unexpected {other:?}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heartbeats {
    /// Answered with HeartbeatResponse.
    Answered,
    /// Answered with an error.
    Refused,
    /// Never answered.
    Ignored,
    /// No heartbeat receiver is registered.
    Absent,
}

struct FakeHeartbeatReceiver {
    state: Shared,
    mode: Heartbeats,
    reregister: Arc<AtomicBool>,
}

impl Endpoint for FakeHeartbeatReceiver {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        let Message::Heartbeat(heartbeat) = message.to_message() else {
            panic!("the heartbeat receiver got {:?}", message.to_message());
        };
        lock(&self.state).heartbeats.push(heartbeat);
        match self.mode {
            Heartbeats::Answered => message
                .reply(&Message::HeartbeatResponse {
                    reregister_block_manager: self.reregister.swap(false, Ordering::SeqCst),
                })
                .unwrap(),
            Heartbeats::Refused => message.reply_error("unknown executor").unwrap(),
            Heartbeats::Ignored | Heartbeats::Absent => {}
        }
    }
}

// ---- the harness -------------------------------------------------------------------------

struct Setup {
    executor_conf: Vec<&'static str>,
    driver_conf: Vec<&'static str>,
    cores: u32,
    /// The driver's driver.maxResultSize, as the `flint executor` command passes it on.
    max_result_size: Option<u64>,
    refuse: Option<&'static str>,
    heartbeats: Heartbeats,
    registry: TaskRegistry,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            executor_conf: vec![],
            driver_conf: vec![],
            cores: 1,
            max_result_size: None,
            refuse: None,
            heartbeats: Heartbeats::Answered,
            registry: TaskRegistry::with_builtins(),
        }
    }
}

struct Harness {
    driver: RpcEnv,
    state: Shared,
    reregister: Arc<AtomicBool>,
    exit: mpsc::Receiver<ExecutorExit>,
    thread: Option<JoinHandle<()>>,
}

impl Harness {
    fn start(setup: Setup) -> Harness {
        logs();
        let driver = RpcEnv::new(&Conf::from_pairs(&setup.driver_conf).unwrap()).unwrap();
        let state = Shared::default();
        let reregister = Arc::new(AtomicBool::new(false));
        let handle = driver.handle();
        handle
            .register(
                DRIVER_ENDPOINT,
                FakeDriver {
                    state: state.clone(),
                    refuse: setup.refuse.map(str::to_owned),
                },
            )
            .unwrap();
        if setup.heartbeats != Heartbeats::Absent {
            handle
                .register(
                    HEARTBEAT_ENDPOINT,
                    FakeHeartbeatReceiver {
                        state: state.clone(),
                        mode: setup.heartbeats,
                        reregister: reregister.clone(),
                    },
                )
                .unwrap();
        }
        let conf = Conf::from_pairs(&setup.executor_conf).unwrap();
        let config = ExecutorConfig {
            max_result_size: setup.max_result_size,
            ..ExecutorConfig::from_conf(&conf, "3", "localhost", setup.cores).unwrap()
        };
        let driver_address = driver.address();
        let (tx, exit) = mpsc::channel();
        let registry = setup.registry;
        let thread = std::thread::Builder::new()
            .name("run_executor".into())
            .spawn(move || {
                let _ = tx.send(run_executor(&conf, driver_address, config, registry));
            })
            .unwrap();
        Harness {
            driver,
            state,
            reregister,
            exit,
            thread: Some(thread),
        }
    }

    /// Waits (bounded) until `check` finds something in the driver's state.
    fn wait_for<T>(&self, what: &str, check: impl Fn(&DriverState) -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(found) = check(&lock(&self.state)) {
                return found;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The executor's endpoint, once it registered.
    fn executor(&self) -> EndpointRef {
        self.wait_for("the registration", |s| s.executor.clone())
    }

    fn launch(&self, task: TaskDescription) {
        self.executor().send(&Message::LaunchTask(task)).unwrap();
    }

    fn update(&self, task_id: u64) -> StatusUpdate {
        self.wait_for(&format!("the status update of task {task_id}"), |s| {
            s.updates.iter().find(|u| u.task_id == task_id).cloned()
        })
    }

    /// How the executor ended (bounded wait).
    fn exit(&self) -> ExecutorExit {
        self.exit
            .recv_timeout(WAIT)
            .expect("run_executor returned in time")
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("FLINT_TEST_LOGS").is_some() {
            eprintln!("---- logs so far ----\n{}", logs().dump());
        }
        // Losing its driver ends the executor; its thread ends within its bounded stops.
        self.driver.stop();
        if let Some(thread) = self.thread.take() {
            let deadline = Instant::now() + WAIT;
            while !thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

fn task(task_id: u64, attempt_number: u32, function: &str, input: &[u8]) -> TaskDescription {
    TaskDescription {
        task_id,
        attempt_number,
        executor_id: "3".into(),
        name: format!("task {task_id}.{attempt_number} in stage 0.0 (TID {task_id})").into(),
        index: task_id as u32,
        partition_id: task_id as u32,
        extras: None,
        cpus: 1,
        serialized_task: TaskPayload::encode(function, input).unwrap(),
    }
}

fn failure(update: &StatusUpdate) -> (TaskFailureKind, &str, bool) {
    match &update.outcome {
        TaskOutcome::Failure {
            kind,
            message,
            counts_towards_failures,
            ..
        } => (*kind, message.as_str(), *counts_towards_failures),
        other => panic!("task {} did not fail: {other:?}", update.task_id),
    }
}

fn direct_value(update: &StatusUpdate) -> &Bytes {
    assert_eq!(update.state, TaskState::Finished, "{update:?}");
    match &update.outcome {
        TaskOutcome::Direct {
            value,
            accumulators,
            ..
        } => {
            assert!(accumulators.is_empty());
            value
        }
        other => panic!("task {} has no direct result: {other:?}", update.task_id),
    }
}

// ---- the tests ---------------------------------------------------------------------------

#[test]
fn registers_runs_noop_and_echo_and_stops_on_command() {
    let harness = Harness::start(Setup::default());
    let registration = harness.wait_for("the registration", |s| s.registrations.first().cloned());
    assert_eq!(&*registration.executor_id, "3");
    assert_eq!(registration.endpoint_name, EXECUTOR_ENDPOINT);
    assert_eq!(registration.hostname, "localhost");
    assert_eq!(registration.cores, 1);
    assert!(registration.log_urls.is_empty());
    // The executor's commands come over the connection it opened; what it listens on is
    // its block server, on a port of its own, which serves shuffle blocks and nothing else.
    let served: SocketAddr = registration.executor_address.parse().unwrap();
    assert_eq!(served.ip(), std::net::Ipv4Addr::LOCALHOST);
    assert_ne!(served.port(), 0);
    let stranger = RpcEnv::new(&Conf::from_pairs(["rpc.askTimeout=5s"]).unwrap()).unwrap();
    let missing = stranger
        .handle()
        .endpoint_ref(served, flint_wire::BLOCK_MANAGER_ENDPOINT)
        .ask(&Message::FetchShuffleBlock {
            shuffle_id: 9,
            map_index: 0,
            reduce_id: 0,
            offset: 0,
            max_len: 1024,
        })
        .unwrap_err();
    assert!(missing.to_string().contains("not found"), "{missing}");
    let refused = stranger
        .handle()
        .endpoint_ref(served, EXECUTOR_ENDPOINT)
        .ask(&Message::StopExecutor)
        .unwrap_err();
    assert!(!refused.to_string().is_empty());
    wait_for_log(Level::INFO, "Starting executor ID 3 on host localhost");

    harness.launch(task(1, 0, "noop", b""));
    harness.launch(task(2, 0, "echo", b"hello flint"));
    let noop = harness.update(1);
    assert_eq!(&*noop.executor_id, "3");
    assert!(direct_value(&noop).is_empty());
    let echo = harness.update(2);
    assert_eq!(direct_value(&echo), "hello flint");
    let TaskOutcome::Direct { metrics, .. } = &echo.outcome else {
        unreachable!()
    };
    assert_eq!(metrics.result_size, 11);

    harness.executor().send(&Message::StopExecutor).unwrap();
    let exit = harness.exit();
    assert_eq!(exit, ExecutorExit::Stopped);
    assert_eq!(exit.code(), 0);
    wait_for_log(Level::INFO, "Driver commanded a shutdown");
    let updates = lock(&harness.state).updates.len();
    assert_eq!(updates, 2, "one status update per task, no RUNNING");
}

#[test]
fn a_refused_registration_ends_the_executor_with_the_reason() {
    let harness = Harness::start(Setup {
        refuse: Some("Duplicate executor ID: 3"),
        ..Setup::default()
    });
    let exit = harness.exit();
    assert_eq!(
        exit,
        ExecutorExit::RegistrationFailed("Duplicate executor ID: 3".into())
    );
    assert_eq!(exit.code(), 1);
    assert!(
        exit.to_string().contains("Duplicate executor ID: 3"),
        "{exit}"
    );
}

#[test]
fn an_unreachable_driver_ends_the_executor_naming_its_address() {
    // Outside the ephemeral range: the executor's own connection cannot take it.
    let port = flint_testkit::ports::unused_port();
    let driver: SocketAddr = ([127, 0, 0, 1], port).into();
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _ = tx.send(run_executor(
            &Conf::from_pairs(["rpc.askTimeout=5s"]).unwrap(),
            driver,
            ExecutorConfig {
                // Tried again for this long before it ends.
                connect_timeout: Duration::from_millis(200),
                ..ExecutorConfig::new("1", "localhost", 1)
            },
            TaskRegistry::with_builtins(),
        ));
    });
    let exit = rx
        .recv_timeout(WAIT)
        .expect("run_executor returned in time");
    thread.join().unwrap();
    assert!(matches!(exit, ExecutorExit::Error(_)), "{exit:?}");
    assert_eq!(exit.code(), 1);
    let text = exit.to_string();
    assert!(text.contains("Cannot register with driver"), "{text}");
    assert!(text.contains(&driver.to_string()), "{text}");
}

#[test]
fn a_bad_configuration_is_an_error_naming_the_key() {
    let conf = Conf::from_pairs(["executor.heartbeatInterval=soon"]).unwrap();
    let err = ExecutorConfig::from_conf(&conf, "1", "localhost", 1).unwrap_err();
    assert!(
        err.to_string().contains("executor.heartbeatInterval"),
        "{err}"
    );
    // The transport's keys are read as the executor starts.
    let conf = Conf::from_pairs(["rpc.connect.timeout=soon"]).unwrap();
    let config = ExecutorConfig::new("1", "localhost", 1);
    let exit = run_executor(
        &conf,
        ([127, 0, 0, 1], 9).into(),
        config,
        TaskRegistry::new(),
    );
    assert_eq!(exit.code(), 1);
    assert!(exit.to_string().contains("rpc.connect.timeout"), "{exit}");
}

#[test]
fn failures_are_reported_failed_with_their_kind() {
    let mut registry = TaskRegistry::with_builtins();
    registry
        .register(
            "panics",
            |_: &TaskContext, _: &Bytes| -> Result<Bytes, TaskError> {
                panic!("partition 9 is cursed")
            },
        )
        .unwrap();
    let harness = Harness::start(Setup {
        registry,
        ..Setup::default()
    });
    harness.launch(task(1, 0, "fail-n-attempts", b"1"));
    harness.launch(task(2, 1, "fail-n-attempts", b"1"));
    harness.launch(task(3, 0, "panics", b""));
    harness.launch(task(4, 0, "no-such-function", b""));
    harness.launch(task(5, 0, "sleep", b"soon"));

    let first = harness.update(1);
    assert_eq!(first.state, TaskState::Failed);
    let (kind, message, counts) = failure(&first);
    assert_eq!((kind, counts), (TaskFailureKind::Exception, true));
    assert!(message.contains("attempt 0"), "{message}");

    assert!(
        direct_value(&harness.update(2)).is_empty(),
        "the second attempt succeeds"
    );

    let panicked = harness.update(3);
    assert_eq!(panicked.state, TaskState::Failed);
    let (kind, message, counts) = failure(&panicked);
    assert_eq!((kind, counts), (TaskFailureKind::Exception, true));
    assert!(message.contains("partition 9 is cursed"), "{message}");

    let unknown = harness.update(4);
    assert_eq!(unknown.state, TaskState::Failed);
    let (kind, message, counts) = failure(&unknown);
    assert_eq!((kind, counts), (TaskFailureKind::Undeserializable, true));
    assert!(message.contains("no-such-function"), "{message}");

    let bad_input = harness.update(5);
    let (kind, message, _) = failure(&bad_input);
    assert_eq!(kind, TaskFailureKind::Exception);
    assert!(message.contains("milliseconds"), "{message}");
}

#[test]
fn a_killed_sleep_ends_killed_promptly() {
    let harness = Harness::start(Setup::default());
    harness.launch(task(1, 0, "sleep", b"10000"));
    std::thread::sleep(Duration::from_millis(100));
    let killed_at = Instant::now();
    harness
        .executor()
        .send(&Message::KillTask {
            task_id: 1,
            executor_id: "3".into(),
            interrupt_thread: true,
            reason: "Stage cancelled".into(),
        })
        .unwrap();
    let update = harness.update(1);
    assert!(
        killed_at.elapsed() < Duration::from_secs(2),
        "{:?}",
        killed_at.elapsed()
    );
    assert_eq!(update.state, TaskState::Killed);
    let (kind, message, counts) = failure(&update);
    assert_eq!(kind, TaskFailureKind::TaskKilled);
    assert_eq!(message, "Stage cancelled");
    assert!(!counts);
}

/// Fetches a whole block with FetchBlockChunk asks of `chunk` bytes.
fn fetch(executor: &EndpointRef, block_id: BlockId, chunk: u32) -> Result<Vec<u8>, RpcError> {
    let mut data = Vec::new();
    for _ in 0..10_000 {
        let reply = executor.ask(&Message::FetchBlockChunk {
            block_id,
            offset: data.len() as u64,
            max_len: chunk,
        })?;
        let ArchivedMessage::BlockChunk {
            offset,
            total_size,
            data: piece,
            ..
        } = reply.message()
        else {
            panic!("not a chunk: {:?}", reply.message());
        };
        assert_eq!(offset.to_native(), data.len() as u64);
        assert!(piece.len() <= chunk as usize);
        data.extend_from_slice(piece.as_slice());
        if data.len() as u64 == total_size.to_native() {
            return Ok(data);
        }
        assert!(!piece.is_empty(), "an empty chunk before the end");
    }
    panic!("the block never ended");
}

#[test]
fn a_large_result_is_fetched_in_chunks_then_removed() {
    let harness = Harness::start(Setup {
        executor_conf: vec!["rpc.message.maxSize=1m"],
        driver_conf: vec!["rpc.message.maxSize=1m"],
        ..Setup::default()
    });
    harness.launch(task(1, 0, "large-result", b"3m"));
    harness.launch(task(2, 0, "large-result", b"1000"));
    let update = harness.update(1);
    assert_eq!(update.state, TaskState::Finished);
    let TaskOutcome::Indirect {
        block_id,
        size,
        metrics,
        ..
    } = update.outcome
    else {
        panic!("not indirect: {update:?}")
    };
    assert_eq!(block_id, BlockId::TaskResult { task_id: 1 });
    assert_eq!(size, 3 << 20);
    assert_eq!(metrics.result_size, size);
    assert_eq!(
        direct_value(&harness.update(2)).len(),
        1000,
        "a small one is direct"
    );

    let executor = harness.executor();
    let data = fetch(&executor, block_id, 256 << 10).unwrap();
    assert_eq!(data.len(), 3 << 20);
    assert!(data.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    // A chunk larger than a message can carry is cut to fit.
    assert_eq!(fetch(&executor, block_id, u32::MAX).unwrap(), data);

    let past_end = executor
        .ask(&Message::FetchBlockChunk {
            block_id,
            offset: size + 1,
            max_len: 10,
        })
        .unwrap_err();
    assert!(matches!(past_end, RpcError::Remote { .. }), "{past_end}");
    assert!(past_end.to_string().contains("past the end"), "{past_end}");

    executor.send(&Message::RemoveBlock { block_id }).unwrap();
    // Not under the driver state's lock: the fake driver's loop may need it meanwhile.
    let deadline = Instant::now() + WAIT;
    let gone = loop {
        if let Err(e) = fetch(&executor, block_id, 1 << 20) {
            break e;
        }
        assert!(Instant::now() < deadline, "the block was never removed");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(
        gone.to_string().contains("Block taskresult_1 not found"),
        "{gone}"
    );
}

/// A failure text longer than a message is cut, so that its update still leaves: before,
/// the encoder refused it and the driver never heard of the task again.
#[test]
fn a_failure_text_larger_than_a_message_is_cut_to_fit() {
    let mut registry = TaskRegistry::with_builtins();
    registry
        .register("verbose", |_: &TaskContext, _: &Bytes| {
            Err(TaskError::failed("é".repeat(3 << 20)))
        })
        .unwrap();
    let harness = Harness::start(Setup {
        executor_conf: vec!["rpc.message.maxSize=1m"],
        driver_conf: vec!["rpc.message.maxSize=1m"],
        registry,
        ..Setup::default()
    });
    harness.launch(task(1, 0, "verbose", b""));
    let update = harness.update(1);
    assert_eq!(update.state, TaskState::Failed);
    let (_, message, _) = failure(&update);
    assert!(message.len() <= 64 << 10, "{} bytes", message.len());
    assert!(message.starts_with("éé"));
    assert!(
        message.ends_with(" bytes cut)"),
        "{}",
        &message[message.len() - 40..]
    );
}

/// A result over driver.maxResultSize is dropped on the executor, as the seeds' runner
/// does: only its size is reported, and nothing is left in the block store.
#[test]
fn a_result_over_the_max_result_size_is_dropped_and_only_its_size_reported() {
    let harness = Harness::start(Setup {
        executor_conf: vec!["rpc.message.maxSize=1m"],
        max_result_size: Some(1500 << 10),
        driver_conf: vec!["rpc.message.maxSize=1m"],
        ..Setup::default()
    });
    harness.launch(task(1, 0, "large-result", b"2m"));
    let update = harness.update(1);
    assert_eq!(update.state, TaskState::Finished);
    let TaskOutcome::Indirect { block_id, size, .. } = update.outcome else {
        panic!("not indirect: {update:?}")
    };
    assert_eq!(size, 2 << 20);
    wait_for_log(
        Level::WARN,
        "Result is larger than maxResultSize (2.0 MiB > 1500.0 KiB), dropping it.",
    );
    let missing = fetch(&harness.executor(), block_id, 1 << 20).unwrap_err();
    assert!(missing.to_string().contains("not found"), "{missing}");
}

/// Launches that come after StopExecutor are not started.
#[test]
fn a_launch_after_stop_executor_is_ignored() {
    let harness = Harness::start(Setup::default());
    let executor = harness.executor();
    // One write: both arrive in one read, in order.
    executor.send_deferred(&Message::StopExecutor).unwrap();
    executor
        .send_deferred(&Message::LaunchTask(task(5, 0, "noop", b"")))
        .unwrap();
    executor.flush();
    assert_eq!(harness.exit(), ExecutorExit::Stopped);
    wait_for_log(
        Level::WARN,
        "Ignored LaunchTask of task (TID 5): the executor is stopping",
    );
    assert!(lock(&harness.state).updates.iter().all(|u| u.task_id != 5));
}

#[test]
fn heartbeats_report_running_tasks_and_can_ask_to_reregister() {
    let harness = Harness::start(Setup {
        executor_conf: vec!["executor.heartbeatInterval=100ms"],
        ..Setup::default()
    });
    let registration = harness.wait_for("the registration", |s| s.registrations.first().cloned());
    harness.launch(task(1, 0, "sleep", b"10000"));
    let heartbeat = harness.wait_for("a heartbeat with the running task", |s| {
        s.heartbeats
            .iter()
            .find(|h| h.accum_updates.iter().any(|u| u.task_id == 1))
            .cloned()
    });
    assert_eq!(&*heartbeat.executor_id, "3");
    assert_eq!(&*heartbeat.block_manager_id.executor_id, "3");
    // Where its block server listens, as other executors reach it.
    assert_eq!(heartbeat.block_manager_id.host, "127.0.0.1");
    assert_eq!(
        heartbeat.block_manager_id.port.to_string(),
        registration.executor_address.rsplit(':').next().unwrap()
    );

    harness.reregister.store(true, Ordering::SeqCst);
    let second = harness.wait_for("a second registration", |s| s.registrations.get(1).cloned());
    assert_eq!(second, registration);
    wait_for_log(Level::INFO, "Told to re-register on heartbeat");
    // The driver had removed it and failed its task: the task is killed, not left to
    // hold a core the driver counts as free.
    let update = harness.update(1);
    assert_eq!(update.state, TaskState::Killed);
    let (_, reason, _) = failure(&update);
    assert!(
        reason.contains("the driver removed this executor"),
        "{reason}"
    );

    // Heartbeats go on after it.
    let seen = lock(&harness.state).heartbeats.len();
    harness.wait_for("more heartbeats", |s| {
        (s.heartbeats.len() >= seen + 2).then_some(())
    });
    harness.executor().send(&Message::StopExecutor).unwrap();
    assert_eq!(harness.exit(), ExecutorExit::Stopped);
}

#[test]
fn failed_heartbeats_end_the_executor_with_code_56() {
    for mode in [Heartbeats::Refused, Heartbeats::Absent, Heartbeats::Ignored] {
        let started = Instant::now();
        let harness = Harness::start(Setup {
            executor_conf: vec![
                "executor.heartbeatInterval=50ms",
                "executor.heartbeat.maxFailures=3",
            ],
            heartbeats: mode,
            ..Setup::default()
        });
        let exit = harness.exit();
        assert_eq!(exit, ExecutorExit::HeartbeatFailures(3), "{mode:?}");
        assert_eq!(exit.code(), 56);
        assert!(started.elapsed() < Duration::from_secs(5), "{mode:?}");
        if mode != Heartbeats::Absent {
            harness.wait_for("the third heartbeat", |s| {
                (s.heartbeats.len() >= 3).then_some(())
            });
            assert_eq!(lock(&harness.state).heartbeats.len(), 3, "{mode:?}");
        }
    }
    wait_for_log(
        Level::WARN,
        "Issue communicating with driver in heartbeater",
    );
    wait_for_log(
        Level::ERROR,
        "Exit as unable to send heartbeats to driver more than 3 times",
    );
}

/// A driver that closes the connection before it answers the registration ends the
/// executor with the registration's error, which says why the connection ended (for
/// an authentication refused, the driver's words), not with "Driver ... disassociated",
/// which would hide it.
#[test]
fn a_connection_closed_before_the_registration_is_answered_ends_with_the_ask_s_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let driver = listener.local_addr().unwrap();
    let closer = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        // The registration's frame comes in; the connection closes without an answer.
        let mut header = [0u8; 16];
        std::io::Read::read_exact(&mut stream, &mut header).unwrap();
        let payload = u32::from_le_bytes(header[12..16].try_into().unwrap()) as usize;
        let mut rest = vec![0u8; payload.next_multiple_of(16)];
        std::io::Read::read_exact(&mut stream, &mut rest).unwrap();
    });
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _ = tx.send(run_executor(
            &Conf::from_pairs(["rpc.askTimeout=5s"]).unwrap(),
            driver,
            ExecutorConfig {
                // No first connection to see whether the driver listens: this one
                // accepts only the registration's.
                connect_timeout: Duration::ZERO,
                ..ExecutorConfig::new("1", "localhost", 1)
            },
            TaskRegistry::with_builtins(),
        ));
    });
    let exit = rx
        .recv_timeout(WAIT)
        .expect("run_executor returned in time");
    thread.join().unwrap();
    closer.join().unwrap();
    assert!(matches!(exit, ExecutorExit::Error(_)), "{exit:?}");
    assert_eq!(exit.code(), 1);
    let text = exit.to_string();
    assert!(
        text.starts_with(&format!(
            "Cannot register with driver: {driver}: connection to {driver} closed: "
        )),
        "{text}"
    );
}

#[test]
fn losing_the_driver_ends_the_executor() {
    let harness = Harness::start(Setup::default());
    harness.launch(task(1, 0, "sleep", b"60000"));
    harness.executor();
    let started = Instant::now();
    harness.driver.stop();
    let exit = harness.exit();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let text = format!(
        "Driver {} disassociated! Shutting down.",
        harness.driver.address()
    );
    assert_eq!(exit, ExecutorExit::DriverLost(text));
    assert_eq!(exit.code(), 1);
}

#[test]
fn stop_executor_does_not_wait_for_a_long_task() {
    let harness = Harness::start(Setup::default());
    harness.launch(task(1, 0, "sleep", b"60000"));
    harness.launch(task(2, 0, "spin", b"60000"));
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    harness.executor().send(&Message::StopExecutor).unwrap();
    assert_eq!(harness.exit(), ExecutorExit::Stopped);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_quick_tasks_update_does_not_wait_for_a_long_task_queued_behind_it() {
    // Whether the runner polls for its next tasks, turning the event loop (then it is
    // still polling when they come), or sleeps between batches.
    for busy_poll in ["1s", "0"] {
        quick_update_before_long_task(busy_poll);
    }
}

fn quick_update_before_long_task(busy_poll: &'static str) {
    let conf = if busy_poll == "0" {
        vec!["executor.busyPoll=0", "rpc.io.busyPoll=0"]
    } else {
        vec!["executor.busyPoll=1s"]
    };
    let harness = Harness::start(Setup {
        executor_conf: conf,
        ..Setup::default()
    });
    let executor = harness.executor();
    // A first task, after which the runner polls for the next.
    harness.launch(task(1, 0, "noop", b""));
    harness.update(1);
    // Both launches in one write: the one runner takes them as one batch, and the first,
    // quick and of the same function as the next, has its update held (to go with the
    // next one's), which the loop thread must send while the long task runs.
    executor
        .send_deferred(&Message::LaunchTask(task(2, 0, "sleep", b"0")))
        .unwrap();
    executor
        .send_deferred(&Message::LaunchTask(task(3, 0, "sleep", b"8000")))
        .unwrap();
    let sent = Instant::now();
    executor.flush();
    let update = harness.update(2);
    assert_eq!(update.state, TaskState::Finished);
    // Not at the long task's end, nor at the next heartbeat (10 s by default).
    assert!(
        sent.elapsed() < Duration::from_secs(2),
        "busy poll {busy_poll}: {:?}",
        sent.elapsed()
    );
    assert!(lock(&harness.state).updates.iter().all(|u| u.task_id != 3));
}

/// A registry whose "rendezvous" task succeeds only if another one runs at the same
/// time, waiting for it at most `input` milliseconds.
fn rendezvous_registry() -> TaskRegistry {
    let inside = Arc::new(AtomicUsize::new(0));
    let met = Arc::new(AtomicBool::new(false));
    let mut registry = TaskRegistry::with_builtins();
    registry
        .register("rendezvous", move |_: &TaskContext, input: &Bytes| {
            let millis: u64 = std::str::from_utf8(input).unwrap().parse().unwrap();
            if inside.fetch_add(1, Ordering::SeqCst) + 1 >= 2 {
                met.store(true, Ordering::SeqCst);
            }
            let deadline = Instant::now() + Duration::from_millis(millis);
            while !met.load(Ordering::SeqCst) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            inside.fetch_sub(1, Ordering::SeqCst);
            if met.load(Ordering::SeqCst) {
                Ok(Bytes::from_static(b"together"))
            } else {
                Err(TaskError::failed("alone"))
            }
        })
        .unwrap();
    registry
}

#[test]
fn two_cores_run_two_tasks_at_once() {
    let harness = Harness::start(Setup {
        cores: 2,
        registry: rendezvous_registry(),
        ..Setup::default()
    });
    harness.launch(task(1, 0, "rendezvous", b"5000"));
    harness.launch(task(2, 0, "rendezvous", b"5000"));
    assert_eq!(direct_value(&harness.update(1)), "together");
    assert_eq!(direct_value(&harness.update(2)), "together");

    // With one core the same tasks run one after the other, and meet nobody.
    let harness = Harness::start(Setup {
        cores: 1,
        registry: rendezvous_registry(),
        ..Setup::default()
    });
    harness.launch(task(1, 0, "rendezvous", b"200"));
    harness.launch(task(2, 0, "rendezvous", b"200"));
    for task_id in [1, 2] {
        let update = harness.update(task_id);
        assert_eq!(failure(&update).1, "alone");
    }
}

/// Only the driver commands the executor: it does not listen, so a stranger cannot even
/// connect to it, where its connection to the driver comes from or anywhere else.
#[test]
fn a_peer_that_is_not_the_driver_cannot_reach_the_executor() {
    let harness = Harness::start(Setup::default());
    let from = harness.wait_for("the registration", |s| s.registered_from.first().copied());
    assert_eq!(from.ip().to_string(), "127.0.0.1");
    let stranger = RpcEnv::new(&Conf::from_pairs(["rpc.connect.timeout=2s"]).unwrap()).unwrap();
    let executor = stranger.handle().endpoint_ref(from, EXECUTOR_ENDPOINT);
    for message in [
        Message::LaunchTask(task(7, 0, "noop", b"")),
        Message::StopExecutor,
    ] {
        let kind = message.kind();
        match executor.ask_timeout(&message, Duration::from_secs(5)) {
            Err(RpcError::Connect { .. }) => {}
            other => panic!("{kind} from a stranger: {other:?}, not a refused connection"),
        }
    }
    // Still the driver's: a launch from it runs, and its StopExecutor stops it.
    harness.launch(task(1, 0, "noop", b""));
    assert!(direct_value(&harness.update(1)).is_empty());
    assert!(
        lock(&harness.state).updates.iter().all(|u| u.task_id != 7),
        "the stranger's task ran"
    );
    harness.executor().send(&Message::StopExecutor).unwrap();
    assert_eq!(harness.exit(), ExecutorExit::Stopped);
}
