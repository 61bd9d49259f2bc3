//! The driver's endpoints over real sockets on 127.0.0.1, with fake executors: RPC
//! environments in this process that register and report as an executor would. Each
//! handler of the seeds' DriverEndpoint, its log lines and error texts.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::{Conf, Endpoint, EndpointContext, EndpointRef, Incoming, RpcEnv, RpcError};
use flint_scheduler::cluster_manager::ClusterManagerError;
use flint_scheduler::{
    ClusterManager, Driver, DriverError, ExitedExecutor, SchedulerEvent, SchedulerListener,
    TaskSet, TaskSetError, TaskSetHandle, DISASSOCIATED, DRIVER_STOPPED, MAX_EXECUTOR_ID_LEN,
    STALE_EXECUTOR,
};
use flint_testkit::logs::LogCapture;
use flint_testkit::peers::RawPeer;
use flint_testkit::wait::holds_within;
use flint_wire::{
    AccumulatorUpdate, ArchivedMessage, Message, RegisterExecutor, StatusUpdate, TaskAccumUpdates,
    TaskMetrics, TaskOutcome, TaskPayload, TaskState, DRIVER_ENDPOINT, EXECUTOR_ENDPOINT,
    HEARTBEAT_ENDPOINT,
};
use tracing::Level;

const WAIT: Duration = Duration::from_secs(10);

/// Every log line of this test binary: the driver logs in turns of its event loop, not
/// on the test's thread.
fn logs() -> &'static LogCapture {
    LogCapture::everywhere()
}

/// Waits until `check` holds, failing the test with every log line after [`WAIT`].
fn wait_until(what: &str, check: impl FnMut() -> bool) {
    assert!(
        holds_within(WAIT, check),
        "timed out waiting until {what}\n{}",
        logs().dump()
    );
}

/// A cluster manager that records what it is asked, and reports the exits a test gives
/// it.
#[derive(Clone, Default)]
struct Recording {
    totals: Arc<Mutex<Vec<u32>>>,
    kills: Arc<Mutex<Vec<String>>>,
    exits: Arc<Mutex<Vec<ExitedExecutor>>>,
}

impl ClusterManager for Recording {
    fn start(&mut self, _driver: SocketAddr) {}
    fn request_total_executors(&mut self, total: u32) -> Result<bool, ClusterManagerError> {
        self.totals.lock().unwrap().push(total);
        Ok(true)
    }
    fn kill_executors(&mut self, ids: &[String]) -> Result<bool, ClusterManagerError> {
        self.kills.lock().unwrap().extend(ids.iter().cloned());
        Ok(true)
    }
    fn exited_executors(&mut self) -> Vec<ExitedExecutor> {
        std::mem::take(&mut *self.exits.lock().unwrap())
    }
    fn stop(&mut self, _grace: Duration) {}
}

#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<SchedulerEvent>>>);

impl SchedulerListener for Events {
    fn on_event(&mut self, event: &SchedulerEvent) {
        self.0.lock().unwrap().push(event.clone());
    }
}

impl Events {
    fn any(&self, check: impl Fn(&SchedulerEvent) -> bool) -> bool {
        self.0.lock().unwrap().iter().any(check)
    }
}

/// What a fake executor was sent.
#[derive(Clone, Default)]
struct Inbox(Arc<Mutex<Vec<Message>>>);

impl Inbox {
    fn launched(&self) -> Vec<u64> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .flat_map(Message::launched_tasks)
            .map(|task| task.task_id)
            .collect()
    }

    fn count(&self, check: impl Fn(&Message) -> bool) -> usize {
        self.0.lock().unwrap().iter().filter(|m| check(m)).count()
    }
}

/// The executor endpoint of a fake executor: keeps what it gets, answers nothing.
struct FakeExecutorEndpoint(Inbox);

impl Endpoint for FakeExecutorEndpoint {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        self.0 .0.lock().unwrap().push(message.to_message());
    }
}

/// An RPC environment that registers with the driver as an executor would.
struct FakeExecutor {
    id: String,
    env: RpcEnv,
    driver: EndpointRef,
    inbox: Inbox,
}

impl FakeExecutor {
    fn start(driver: SocketAddr, id: &str) -> FakeExecutor {
        let env = RpcEnv::new(&Conf::new()).unwrap();
        let inbox = Inbox::default();
        env.handle()
            .register(EXECUTOR_ENDPOINT, FakeExecutorEndpoint(inbox.clone()))
            .unwrap();
        let driver = env.handle().endpoint_ref(driver, DRIVER_ENDPOINT);
        FakeExecutor {
            id: id.to_owned(),
            env,
            driver,
            inbox,
        }
    }

    fn register(&self, host: &str, cores: u32) -> Message {
        self.register_within(host, cores, WAIT).unwrap()
    }

    fn register_within(
        &self,
        host: &str,
        cores: u32,
        timeout: Duration,
    ) -> Result<Message, RpcError> {
        let registration = Message::RegisterExecutor(RegisterExecutor {
            executor_id: self.id.as_str().into(),
            executor_address: self.env.address().to_string(),
            endpoint_name: EXECUTOR_ENDPOINT.into(),
            hostname: host.into(),
            cores,
            log_urls: vec![],
        });
        Ok(self
            .driver
            .ask_timeout(&registration, timeout)?
            .to_message())
    }

    fn report(&self, task_id: u64, state: TaskState, value: &'static [u8]) {
        let outcome = TaskOutcome::Direct {
            value: Bytes::from_static(value),
            metrics: Default::default(),
            accumulators: vec![],
        };
        self.driver
            .send(&Message::StatusUpdate(StatusUpdate {
                executor_id: self.id.as_str().into(),
                task_id,
                state,
                outcome,
            }))
            .unwrap();
    }

    /// Reports every task of `task_ids` finished, in one `StatusUpdates` frame.
    fn report_all(&self, task_ids: &[u64]) {
        let updates = task_ids
            .iter()
            .map(|&task_id| StatusUpdate {
                executor_id: self.id.as_str().into(),
                task_id,
                state: TaskState::Finished,
                outcome: TaskOutcome::Direct {
                    value: Bytes::new(),
                    metrics: Default::default(),
                    accumulators: vec![],
                },
            })
            .collect();
        self.driver
            .send(&Message::StatusUpdates { updates })
            .unwrap();
    }

    fn heartbeat(&self, driver: SocketAddr) -> bool {
        self.heartbeat_with(driver, vec![])
    }

    fn heartbeat_with(&self, driver: SocketAddr, accum_updates: Vec<TaskAccumUpdates>) -> bool {
        let receiver = self.env.handle().endpoint_ref(driver, HEARTBEAT_ENDPOINT);
        let reply = receiver
            .ask(&Message::Heartbeat(flint_wire::Heartbeat {
                executor_id: self.id.as_str().into(),
                accum_updates,
                block_manager_id: flint_wire::BlockManagerId {
                    executor_id: self.id.as_str().into(),
                    host: "h".into(),
                    port: self.env.address().port(),
                },
            }))
            .unwrap();
        match reply.message() {
            ArchivedMessage::HeartbeatResponse {
                reregister_block_manager,
            } => *reregister_block_manager,
            other => panic!("not a heartbeat response: {other:?}"),
        }
    }
}

fn driver(pairs: &[&str]) -> (Driver, Recording, Events) {
    logs();
    let mut all = vec!["scheduler.revive.interval=1h"];
    all.extend_from_slice(pairs);
    let conf = Conf::from_pairs(all).unwrap();
    let cluster = Recording::default();
    let driver = Driver::start(&conf, Box::new(cluster.clone())).unwrap();
    let events = Events::default();
    driver.add_listener(events.clone());
    (driver, cluster, events)
}

fn noop() -> Bytes {
    TaskPayload::encode("noop", b"").unwrap()
}

#[test]
fn registration_is_refused_for_a_duplicate_id_and_an_excluded_host() {
    let (driver, _, events) = driver(&[]);
    let first = FakeExecutor::start(driver.address(), "reg-1");
    assert_eq!(first.register("host-a", 2), Message::RegisteredExecutor);
    assert!(logs().contains(Level::INFO, "with ID reg-1"));
    assert!(events.any(|e| matches!(e, SchedulerEvent::ExecutorAdded { executor_id, cores: 2, .. } if &**executor_id == "reg-1")));
    assert_eq!(driver.total_cores(), 2);

    let again = FakeExecutor::start(driver.address(), "reg-1");
    assert_eq!(
        again.register("host-b", 1),
        Message::RegisterExecutorFailed {
            message: "Duplicate executor ID: reg-1".into()
        }
    );
    driver.exclude_host("bad-host");
    let excluded = FakeExecutor::start(driver.address(), "reg-2");
    assert_eq!(
        excluded.register("bad-host", 1),
        Message::RegisterExecutorFailed {
            message: "Executor is blacklisted: reg-2".into()
        }
    );
    assert!(logs().contains(Level::INFO, "Rejecting reg-2 as it has been blacklisted."));
    assert_eq!(driver.executor_ids(), ["reg-1"]);
    assert_eq!(driver.default_parallelism(), 2);
    driver.stop().unwrap();
}

#[test]
fn registration_is_refused_for_an_id_or_host_name_over_256_bytes() {
    let (driver, _, _) = driver(&[]);
    let long = "i".repeat(MAX_EXECUTOR_ID_LEN + 1);
    let refused = FakeExecutor::start(driver.address(), &long);
    assert_eq!(
        refused.register("h", 1),
        Message::RegisterExecutorFailed {
            message: "Executor ID (257 bytes) or host name (1 bytes) is longer than 256 bytes"
                .into()
        }
    );
    let refused = FakeExecutor::start(driver.address(), "short");
    assert!(matches!(
        refused.register(&long, 1),
        Message::RegisterExecutorFailed { message } if message.ends_with("host name (257 bytes) is longer than 256 bytes")
    ));
    let longest = FakeExecutor::start(driver.address(), &long[1..]);
    assert_eq!(longest.register(&long[1..], 1), Message::RegisteredExecutor);
    let (handle, task_id) = one_task_launched_on(&driver, &longest);
    longest.report(task_id, TaskState::Finished, b"");
    assert!(handle.wait(WAIT).is_ok());
    driver.stop().unwrap();
}

#[test]
fn a_failure_text_longer_than_an_executor_sends_is_cut() {
    let (driver, _, events) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "cut-1");
    executor.register("h", 1);
    let (handle, task_id) = one_task_launched_on(&driver, &executor);
    executor
        .driver
        .send(&Message::StatusUpdate(StatusUpdate {
            executor_id: "cut-1".into(),
            task_id,
            state: TaskState::Failed,
            outcome: TaskOutcome::Failure {
                kind: flint_wire::TaskFailureKind::Exception,
                message: "e".repeat(1 << 20),
                counts_towards_failures: true,
                metrics: TaskMetrics::default(),
            },
        }))
        .unwrap();
    wait_until("the failure", || {
        events.any(|e| matches!(e, SchedulerEvent::TaskEnd { task_id: t, .. } if *t == task_id))
    });
    assert!(events.any(|e| matches!(
        e,
        SchedulerEvent::TaskEnd {
            reason: flint_scheduler::TaskEndReason::Failed { message, .. },
            ..
        } if message.len() <= flint_wire::MAX_FAILURE_TEXT && message.ends_with(" bytes cut)")
    )));
    drop(handle);
    driver.stop().unwrap();
}

#[test]
fn a_status_update_frees_the_core_and_the_next_task_launches_at_once() {
    // The revive timer is an hour: only the StatusUpdate handler's offer can launch.
    let (driver, _, _) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "su-1");
    executor.register("h", 1);
    let handle = driver.submit(TaskSet::new(0, 0, 3, noop())).unwrap();
    for n in 1..=3 {
        wait_until("a launch", || executor.inbox.launched().len() == n);
        assert_eq!(driver.free_slots("su-1"), Some(0), "one core, one task");
        let task_id = executor.inbox.launched()[n - 1];
        executor.report(task_id, TaskState::Finished, b"done");
    }
    let outcome = handle.wait(WAIT).unwrap();
    assert_eq!(outcome.results, [&b"done"[..], b"done", b"done"]);
    wait_until("the core is free", || driver.free_slots("su-1") == Some(1));
    driver.stop().unwrap();
}

#[test]
fn a_registration_is_answered_before_the_new_executor_gets_tasks_larger_than_its_outbox() {
    // Launches that fill the connection's outbox before the answer would have it
    // refused, and the executor would wait for it until its ask timed out.
    let (driver, _, _) = driver(&["rpc.outbox.maxBytes=64k"]);
    let input = vec![7u8; 256 << 10];
    let payload = TaskPayload::encode("noop", &input).unwrap();
    let _handle = driver.submit(TaskSet::new(0, 0, 1, payload)).unwrap();
    let executor = FakeExecutor::start(driver.address(), "rg-1");
    let answer = executor.register_within("h", 1, Duration::from_secs(5));
    assert!(
        matches!(answer, Ok(Message::RegisteredExecutor)),
        "{answer:?}"
    );
    wait_until("the launch", || executor.inbox.launched().len() == 1);
    driver.stop().unwrap();
}

#[test]
fn with_prefetch_an_executor_with_fewer_cores_than_a_task_needs_still_gets_none() {
    let (driver, _, _) = driver(&["executor.taskPrefetch=1", "task.cpus=2"]);
    let small = FakeExecutor::start(driver.address(), "pf-small");
    small.register("h", 1);
    let handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
    let large = FakeExecutor::start(driver.address(), "pf-large");
    large.register("h", 2);
    wait_until("a launch", || large.inbox.launched().len() == 1);
    assert!(small.inbox.launched().is_empty(), "1 core, 2 cpus a task");
    large.report(large.inbox.launched()[0], TaskState::Finished, b"");
    assert!(handle.wait(WAIT).is_ok());
    driver.stop().unwrap();
}

#[test]
fn a_task_set_submitted_again_under_the_same_id_starts_its_result_tally_afresh() {
    static RESULT: [u8; 20 << 10] = [1; 20 << 10];
    let (driver, _, _) = driver(&["driver.maxResultSize=25k"]);
    let executor = FakeExecutor::start(driver.address(), "rs-1");
    executor.register("h", 1);
    for round in 1..=2 {
        let handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
        wait_until("a launch", || executor.inbox.launched().len() == round);
        executor.report(
            executor.inbox.launched()[round - 1],
            TaskState::Finished,
            &RESULT,
        );
        let outcome = handle.wait(WAIT);
        assert!(outcome.is_ok(), "round {round}: {outcome:?}");
    }
    driver.stop().unwrap();
}

/// A task set's id is free again once its task set ended, though an attempt of it still
/// runs (killed, its report not in yet): the new task set is taken, and the old
/// attempt's late report, a success after all, is neither a result of the new one, nor
/// its end, nor counted in its `driver.maxResultSize` tally.
#[test]
fn a_task_set_id_is_free_again_once_its_task_set_ended_though_a_killed_attempt_still_runs() {
    static STALE: [u8; 20 << 10] = [7; 20 << 10];
    static NEW: [u8; 10 << 10] = [1; 10 << 10];
    let (driver, _, _) = driver(&["task.maxFailures=1", "driver.maxResultSize=25k"]);
    let executor = FakeExecutor::start(driver.address(), "again-1");
    executor.register("h", 2);
    let first = driver.submit(TaskSet::new(0, 0, 2, noop())).unwrap();
    wait_until("two launches", || executor.inbox.launched().len() == 2);
    let old = executor.inbox.launched();
    // Task 0 fails once: its task set is aborted, and task 1, still running, killed.
    executor.report(old[0], TaskState::Failed, b"");
    assert!(first.wait(WAIT).is_err());
    wait_until("the kill of the running attempt", || {
        executor
            .inbox
            .count(|m| matches!(m, Message::KillTask { task_id, .. } if *task_id == old[1]))
            == 1
    });
    let second = driver
        .submit(TaskSet::new(0, 0, 2, noop()))
        .expect("the id is free once its task set ended");
    wait_until("a launch of the new task set", || {
        executor.inbox.launched().len() == 3
    });
    // The killed attempt finished before its kill came: its success is the old task
    // set's, and frees its core for the new task set's second task.
    executor.report(old[1], TaskState::Finished, &STALE);
    wait_until("both launches of the new task set", || {
        executor.inbox.launched().len() == 4
    });
    assert!(!second.is_done());
    for &task_id in &executor.inbox.launched()[2..] {
        executor.report(task_id, TaskState::Finished, &NEW);
    }
    let outcome = second.wait(WAIT).expect("the new task set succeeds");
    // (size, first byte) of each result: the values are too long to print.
    let results: Vec<(usize, u8)> = outcome.results.iter().map(|r| (r.len(), r[0])).collect();
    assert_eq!(results, [(NEW.len(), NEW[0]); 2]);
    driver.stop().unwrap();
}

/// The tasks one offer round gives an executor travel in one `LaunchTasks` frame, in
/// the order they were launched; the updates of several tasks in one `StatusUpdates`
/// frame free their slots as separate frames would, and the next round's launches leave
/// together again.
#[test]
fn the_tasks_of_one_offer_round_to_an_executor_travel_in_one_frame() {
    let (driver, _, _) = driver(&["executor.taskPrefetch=4"]);
    let executor = FakeExecutor::start(driver.address(), "batch-1");
    executor.register("h", 2);
    let handle = driver.submit(TaskSet::new(0, 0, 20, noop())).unwrap();
    let frames = |inbox: &Inbox| -> Vec<Vec<u64>> {
        inbox
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|m| !m.launched_tasks().is_empty())
            .map(|m| {
                assert!(
                    matches!(m, Message::LaunchTasks { .. }),
                    "several tasks at once travel together: {m:?}"
                );
                m.launched_tasks().iter().map(|t| t.task_id).collect()
            })
            .collect()
    };
    wait_until("2 cores and 4 prefetch slots filled", || {
        executor.inbox.launched().len() == 6
    });
    let first = frames(&executor.inbox);
    assert_eq!(first.len(), 1, "one frame for the round: {first:?}");
    assert!(first[0].windows(2).all(|w| w[0] < w[1]), "{first:?}");

    executor.report_all(&first[0]);
    wait_until("the six freed slots filled again", || {
        executor.inbox.launched().len() == 12
    });
    let second = frames(&executor.inbox);
    assert_eq!(
        second.len(),
        2,
        "the next round in one frame too: {second:?}"
    );
    assert_eq!(second[1].len(), 6);
    let mut reported = 12;
    executor.report_all(&second[1]);
    let started = Instant::now();
    while !handle.is_done() {
        assert!(started.elapsed() < WAIT, "the task set did not end");
        let launched = executor.inbox.launched();
        if launched.len() > reported {
            executor.report_all(&launched[reported..]);
            reported = launched.len();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(handle.wait(WAIT).unwrap().results.len(), 20);
    driver.stop().unwrap();
}

#[test]
fn with_prefetch_tasks_queue_beyond_the_free_cores_and_count_as_running() {
    let (driver, _, events) = driver(&["executor.taskPrefetch=2"]);
    let executor = FakeExecutor::start(driver.address(), "pf-1");
    executor.register("h", 1);
    let handle = driver.submit(TaskSet::new(0, 0, 10, noop())).unwrap();
    wait_until("three launches", || executor.inbox.launched().len() == 3);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        executor.inbox.launched().len(),
        3,
        "1 core + 2 prefetched, no more"
    );
    assert_eq!(driver.running_tasks(), 3, "queued tasks count as running");

    // A queued task can be killed like a running one.
    let queued = executor.inbox.launched()[2];
    assert!(driver.kill_task_attempt(queued, true, "not needed"));
    wait_until("the kill reached the executor", || {
        executor
            .inbox
            .count(|m| matches!(m, Message::KillTask { task_id, .. } if *task_id == queued))
            == 1
    });
    // Losing the executor requeues queued tasks too.
    drop(executor);
    wait_until("the executor was removed", || {
        events.any(|e| matches!(e, SchedulerEvent::ExecutorRemoved { executor_id, .. } if &**executor_id == "pf-1"))
    });
    assert_eq!(driver.running_tasks(), 0);
    let lost = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| {
            matches!(
                e,
                SchedulerEvent::TaskEnd {
                    state: TaskState::Lost,
                    ..
                }
            )
        })
        .count();
    assert_eq!(lost, 3, "the running task and both queued ones ended LOST");
    // The job finishes on a new executor.
    let replacement = FakeExecutor::start(driver.address(), "pf-2");
    replacement.register("h", 1);
    let mut reported = 0;
    while !handle.is_done() {
        let launched = replacement.inbox.launched();
        for &task_id in &launched[reported..] {
            replacement.report(task_id, TaskState::Finished, b"");
        }
        reported = launched.len();
        std::thread::sleep(Duration::from_millis(2));
        assert!(reported <= 10);
    }
    assert_eq!(handle.wait(WAIT).unwrap().results.len(), 10);
    driver.stop().unwrap();
}

#[test]
fn unknown_executors_and_tasks_are_logged_with_the_seeds_texts() {
    let (driver, _, _) = driver(&[]);
    let stranger = FakeExecutor::start(driver.address(), "nobody-1");
    stranger.report(987_654, TaskState::Finished, b"");
    wait_until("the warning", || {
        logs().contains(
            Level::WARN,
            "Ignored task status update (987654 state FINISHED) from unknown executor with ID nobody-1",
        )
    });
    assert!(logs().contains(
        Level::ERROR,
        "Ignoring update with state FINISHED for TID 987654 because its task set is gone"
    ));
    driver.kill_task(55_555, "nobody-2", false, "test");
    wait_until("the kill warning", || {
        logs().contains(
            Level::WARN,
            "Attempted to kill task 55555 for unknown executor nobody-2.",
        )
    });
    driver
        .remove_executor("nobody-3", flint_wire::ExecutorLossReason::ExecutorKilled)
        .unwrap();
    assert!(logs().contains(
        Level::INFO,
        "Asked to remove non-existent executor nobody-3"
    ));
    driver.stop().unwrap();
}

#[test]
fn a_peer_cannot_report_another_executor_s_tasks() {
    let (driver, _, _) = driver(&[]);
    let honest = FakeExecutor::start(driver.address(), "hon-1");
    honest.register("h", 1);
    let liar = FakeExecutor::start(driver.address(), "liar-1");
    liar.register("h", 1);
    let handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
    wait_until("a launch", || {
        honest.inbox.launched().len() + liar.inbox.launched().len() == 1
    });
    let (owner, other) = if honest.inbox.launched().is_empty() {
        (&liar, &honest)
    } else {
        (&honest, &liar)
    };
    let task_id = owner.inbox.launched()[0];
    other.report(task_id, TaskState::Finished, b"forged");
    wait_until("the forgery is refused", || {
        logs().contains(
            Level::WARN,
            &format!(
                "Ignored task status update ({task_id} state FINISHED) from executor {}",
                other.id
            ),
        )
    });
    assert!(!handle.is_done());
    owner.report(task_id, TaskState::Finished, b"real");
    assert_eq!(handle.wait(WAIT).unwrap().results, [&b"real"[..]]);
    driver.stop().unwrap();
}

#[test]
fn a_disconnected_executor_is_removed_with_the_seeds_reason_and_its_task_runs_again() {
    let (driver, _, events) = driver(&[]);
    let first = FakeExecutor::start(driver.address(), "dc-1");
    first.register("h", 1);
    let handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
    wait_until("a launch", || first.inbox.launched().len() == 1);
    first.env.stop();
    wait_until("the removal", || {
        events.any(|e| matches!(e, SchedulerEvent::ExecutorRemoved { executor_id, reason } if &**executor_id == "dc-1" && reason == DISASSOCIATED))
    });
    assert!(driver.executor_ids().is_empty());
    let second = FakeExecutor::start(driver.address(), "dc-2");
    second.register("h", 1);
    wait_until("the relaunch", || second.inbox.launched().len() == 1);
    second.report(second.inbox.launched()[0], TaskState::Finished, b"");
    assert!(handle.wait(WAIT).is_ok());
    driver.stop().unwrap();
}

#[test]
fn executor_requests_reach_the_cluster_manager_and_negative_counts_are_refused() {
    let (driver, cluster, _) = driver(&[]);
    assert_eq!(
        driver.request_executors(-1).unwrap_err().to_string(),
        "Attempted to request a negative number of additional executor(s) -1 from the cluster manager. Please specify a positive number!"
    );
    assert_eq!(
        driver.request_total_executors(-3).unwrap_err().to_string(),
        "Attempted to request a negative number of executor(s) -3 from the cluster manager. Please specify a positive number!"
    );
    assert!(driver.request_executors(2).unwrap());
    assert!(logs().contains(
        Level::INFO,
        "Requesting 2 additional executor(s) from the cluster manager"
    ));
    assert_eq!(driver.num_pending_executors(), 2);
    let executor = FakeExecutor::start(driver.address(), "req-1");
    executor.register("host-r", 1);
    assert_eq!(driver.num_pending_executors(), 1);
    assert!(logs().contains(
        Level::DEBUG,
        "Decremented number of pending executors (1 left)"
    ));
    assert!(driver.request_total_executors(3).unwrap());
    assert_eq!(driver.num_pending_executors(), 2);
    assert_eq!(*cluster.totals.lock().unwrap(), [2, 3]);

    // Killing without replacement asks for fewer; by host, replacements are asked for.
    assert_eq!(
        driver.kill_executors(&["req-1".into(), "ghost".into()], false),
        ["req-1"]
    );
    assert!(logs().contains(Level::WARN, "Executor to kill ghost does not exist!"));
    assert_eq!(*cluster.kills.lock().unwrap(), ["req-1"]);
    assert_eq!(cluster.totals.lock().unwrap().last(), Some(&2));
    // Told to stop as well, in case the cluster manager did not start it.
    wait_until("StopExecutor reached the killed executor", || {
        executor.inbox.count(|m| *m == Message::StopExecutor) == 1
    });
    drop(executor);
    let other = FakeExecutor::start(driver.address(), "req-2");
    other.register("host-k", 1);
    driver.kill_executors_on_host("host-k");
    wait_until("the host's executors are killed", || {
        cluster.kills.lock().unwrap().len() == 2
    });
    assert_eq!(cluster.kills.lock().unwrap()[1], "req-2");
    // Told to stop too: one that registered on its own would otherwise live on.
    wait_until("StopExecutor reached the host's executor", || {
        other.inbox.count(|m| *m == Message::StopExecutor) == 1
    });
    driver.stop().unwrap();
}

#[test]
fn executor_requests_past_what_a_count_holds_ask_for_the_most_it_holds() {
    let (driver, cluster, _) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "req-max");
    executor.register("h", 1);
    assert!(driver.request_executors(i64::MAX).unwrap());
    assert_eq!(cluster.totals.lock().unwrap().last(), Some(&u32::MAX));
    assert!(driver.request_total_executors(i64::MAX).unwrap());
    assert_eq!(cluster.totals.lock().unwrap().last(), Some(&u32::MAX));
    driver.stop().unwrap();
}

#[test]
fn heartbeats_ask_unknown_executors_to_register_and_silent_ones_expire() {
    let (driver, cluster, events) =
        driver(&["network.timeout=2s", "executor.heartbeatInterval=50ms"]);
    let alive = FakeExecutor::start(driver.address(), "hb-1");
    alive.register("h", 1);
    let silent = FakeExecutor::start(driver.address(), "hb-2");
    silent.register("h", 1);
    let stranger = FakeExecutor::start(driver.address(), "hb-3");
    assert!(
        !alive.heartbeat(driver.address()),
        "a known executor is not asked to register"
    );
    assert!(stranger.heartbeat(driver.address()), "an unknown one is");

    // Well past the timeout for the silent one; the live one keeps beating (a stall of
    // most of the timeout would be needed to expire it).
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        assert!(!alive.heartbeat(driver.address()));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        driver.executor_ids(),
        ["hb-1"],
        "only the silent one expired"
    );
    assert!(events.any(
        |e| matches!(e, SchedulerEvent::ExecutorRemoved { executor_id, reason }
        if &**executor_id == "hb-2" && reason.starts_with("Executor heartbeat timed out after "))
    ));
    assert!(logs().contains(
        Level::WARN,
        "Removing executor hb-2 with no recent heartbeats: "
    ));
    // By the cluster manager's own thread, soon after.
    wait_until("its process is killed", || {
        *cluster.kills.lock().unwrap() == ["hb-2"]
    });
    // An expired executor that comes back is told to register again.
    assert!(silent.heartbeat(driver.address()));
    driver.stop().unwrap();
}

#[test]
fn stop_asks_every_executor_to_stop_and_reset_removes_them_as_stale() {
    let (driver, cluster, events) = driver(&[]);
    assert!(driver.request_total_executors(2).unwrap());
    let executors: Vec<FakeExecutor> = (1..=2)
        .map(|i| {
            let e = FakeExecutor::start(driver.address(), &format!("st-{i}"));
            e.register("h", 1);
            e
        })
        .collect();
    driver.reset();
    // As the seeds' reset: nothing pending, and the stale executors are not replaced
    // (whoever resets asks again).
    assert_eq!(driver.num_pending_executors(), 0);
    assert_eq!(*cluster.totals.lock().unwrap(), [2]);
    for e in &executors {
        assert!(events.any(
            |ev| matches!(ev, SchedulerEvent::ExecutorRemoved { executor_id, reason }
            if **executor_id == *e.id && reason == STALE_EXECUTOR)
        ));
        e.register("h", 1);
    }
    driver.stop().unwrap();
    for e in &executors {
        wait_until("StopExecutor arrived", || {
            e.inbox.count(|m| *m == Message::StopExecutor) == 1
        });
    }
    assert!(logs().contains(Level::INFO, "Asking each executor to shut down"));
    assert!(logs().contains(Level::INFO, "Shutting down all executors"));
}

#[test]
fn a_stop_ends_open_task_sets_and_later_submissions_are_refused() {
    let (driver, _, _) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "st-open");
    executor.register("h", 1);
    let (handle, _) = one_task_launched_on(&driver, &executor);
    driver.stop().unwrap();
    // Ended by the stop, not by the wait's timeout.
    let outcome = handle.wait(WAIT);
    let Err(TaskSetError::Failed { message, .. }) = &outcome else {
        panic!("{outcome:?}");
    };
    assert!(message.contains(DRIVER_STOPPED), "{message}");
    let refused = driver.submit(TaskSet::new(1, 0, 1, noop()));
    assert!(
        matches!(refused, Err(DriverError::Stopping(_))),
        "{:?}",
        refused.map(|h| h.id())
    );
}

#[test]
fn the_driver_is_ready_once_enough_executors_registered() {
    let (driver, _, _) = driver(&[
        "scheduler.minRegisteredResourcesRatio=1",
        "scheduler.maxRegisteredResourcesWaitingTime=1h",
    ]);
    driver.request_total_executors(1).unwrap();
    assert!(!driver.is_ready());
    let executor = FakeExecutor::start(driver.address(), "ready-1");
    executor.register("h", 1);
    assert!(driver.is_ready());
    assert!(logs().contains(
        Level::INFO,
        "SchedulerBackend is ready for scheduling beginning after reached minRegisteredResourcesRatio: 1"
    ));
    driver.stop().unwrap();
}

#[test]
fn with_prefetch_a_queued_task_keeps_its_locality() {
    // Four tasks that prefer executor loc-a; both executors have one core. With two
    // prefetch slots loc-a takes three at once, PROCESS_LOCAL; loc-b waits (locality.wait).
    let (driver, _, events) = driver(&["executor.taskPrefetch=2", "locality.wait=1h"]);
    let a = FakeExecutor::start(driver.address(), "loc-a");
    a.register("host-a", 1);
    let b = FakeExecutor::start(driver.address(), "loc-b");
    b.register("host-b", 1);
    let preferred = flint_scheduler::TaskLocation::Executor {
        host: "host-a".into(),
        executor_id: "loc-a".into(),
    };
    let mut task_set = TaskSet::new(0, 0, 4, noop());
    for task in &mut task_set.tasks {
        *task = task.clone().with_locations(vec![preferred.clone()]);
    }
    let handle = driver.submit(task_set).unwrap();
    wait_until("three launches on loc-a", || a.inbox.launched().len() == 3);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        b.inbox.launched().is_empty(),
        "no task went to the other executor"
    );
    let starts: Vec<(String, flint_scheduler::TaskLocality)> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            SchedulerEvent::TaskStart {
                executor_id,
                locality,
                ..
            } => Some((executor_id.to_string(), *locality)),
            _ => None,
        })
        .collect();
    assert_eq!(starts.len(), 3);
    assert!(starts
        .iter()
        .all(|(e, l)| e == "loc-a" && *l == flint_scheduler::TaskLocality::ProcessLocal));
    // Finishing the queue lets the fourth in, still on loc-a.
    let mut reported = 0;
    while !handle.is_done() {
        let launched = a.inbox.launched();
        for &task_id in &launched[reported..] {
            a.report(task_id, TaskState::Finished, b"");
        }
        reported = launched.len();
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(reported, 4);
    assert!(b.inbox.launched().is_empty());
    driver.stop().unwrap();
}

#[test]
fn with_prefetch_a_queued_straggler_is_speculated_and_the_first_success_wins() {
    // One executor with a core and a prefetch slot, and another: the task that sits
    // queued behind a stuck one on spec-a counts as running, is speculated on spec-b,
    // and once the copy wins the original is killed.
    let (driver, _, events) = driver(&[
        "executor.taskPrefetch=1",
        "speculation=true",
        "speculation.interval=10ms",
        "speculation.quantile=0.5",
    ]);
    let a = FakeExecutor::start(driver.address(), "spec-a");
    a.register("h1", 1);
    let handle = driver.submit(TaskSet::new(0, 0, 4, noop())).unwrap();
    wait_until("two launches on spec-a", || a.inbox.launched().len() == 2);
    let (stuck, queued) = (a.inbox.launched()[0], a.inbox.launched()[1]);
    // spec-b joins, finishes what it is given fast: tasks 2 and 3.
    let b = FakeExecutor::start(driver.address(), "spec-b");
    b.register("h2", 1);
    let mut reported = 0;
    let deadline = Instant::now() + WAIT;
    while !handle.is_done() {
        assert!(Instant::now() < deadline, "{}", logs().dump());
        let launched = b.inbox.launched();
        for &task_id in &launched[reported..] {
            std::thread::sleep(Duration::from_millis(1));
            b.report(task_id, TaskState::Finished, b"b");
        }
        reported = launched.len();
        std::thread::sleep(Duration::from_millis(5));
    }
    let outcome = handle.wait(WAIT).unwrap();
    assert_eq!(
        outcome.results,
        [&b"b"[..], b"b", b"b", b"b"],
        "every result from spec-b's copies"
    );
    let speculative = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, SchedulerEvent::TaskStart { speculative: true, executor_id, .. } if &**executor_id == "spec-b"))
        .count();
    assert_eq!(
        speculative, 2,
        "copies of the stuck task and of the one queued behind it"
    );
    for original in [stuck, queued] {
        wait_until("the original attempt was killed", || {
            a.inbox
                .count(|m| matches!(m, Message::KillTask { task_id, .. } if *task_id == original))
                == 1
        });
    }
    driver.stop().unwrap();
}

#[test]
fn cores_are_credited_once_per_attempt_running_on_the_executor() {
    let (driver, _, _) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "cr-1");
    executor.register("h", 1);
    let (handle, task_id) = one_task_launched_on(&driver, &executor);
    assert_eq!(driver.free_slots("cr-1"), Some(0));
    executor.report(task_id, TaskState::Finished, b"done");
    assert!(handle.wait(WAIT).is_ok());
    // A duplicate FINISHED, and updates for a task the scheduler does not know, free
    // nothing: the executor has one core.
    executor.report(task_id, TaskState::Finished, b"again");
    executor.report(task_id, TaskState::Failed, b"");
    executor.report(424_242, TaskState::Finished, b"");
    executor.report(424_243, TaskState::Killed, b"");
    wait_until("the last update was handled", || {
        logs().contains(
            Level::ERROR,
            "Ignoring update with state KILLED for TID 424243 because its task set is gone",
        )
    });
    assert_eq!(driver.free_slots("cr-1"), Some(1));
    // And the executor still takes one task at a time.
    let next = driver.submit(TaskSet::new(1, 1, 2, noop())).unwrap();
    wait_until("a launch", || executor.inbox.launched().len() == 2);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(executor.inbox.launched().len(), 2, "one core, one task");
    for n in 2..=3 {
        wait_until("a launch", || executor.inbox.launched().len() == n);
        executor.report(executor.inbox.launched()[n - 1], TaskState::Finished, b"");
    }
    assert!(next.wait(WAIT).is_ok());
    driver.stop().unwrap();
}

#[test]
fn heartbeats_carry_task_metrics_to_listeners() {
    let (driver, _, events) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "hm-1");
    executor.register("h", 2);
    let handle = driver.submit(TaskSet::new(0, 5, 1, noop())).unwrap();
    wait_until("a launch", || executor.inbox.launched().len() == 1);
    let task_id = executor.inbox.launched()[0];
    let metrics = TaskMetrics {
        run_time_ns: 1_500_000,
        input_bytes: 42,
        ..Default::default()
    };
    let accumulators = vec![AccumulatorUpdate {
        id: 7,
        name: Some("records".into()),
        value: flint_wire::AccumulatorValue::Long(99),
    }];
    let updates = vec![
        TaskAccumUpdates {
            task_id,
            metrics,
            accumulators: accumulators.clone(),
        },
        // Not a task of this executor: dropped.
        TaskAccumUpdates {
            task_id: 777_777,
            metrics,
            accumulators: vec![],
        },
    ];
    assert!(!executor.heartbeat_with(driver.address(), updates));
    let reported: Vec<_> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            SchedulerEvent::ExecutorMetricsUpdate {
                executor_id,
                updates,
            } => Some((executor_id.to_string(), updates.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(reported.len(), 1, "{reported:?}");
    let (executor_id, updates) = &reported[0];
    assert_eq!(executor_id, "hm-1");
    assert_eq!(updates.len(), 1);
    assert_eq!(updates[0].task_id, task_id);
    assert_eq!(updates[0].task_set, handle.id());
    assert_eq!(updates[0].metrics, metrics);
    assert_eq!(updates[0].accumulators, accumulators);
    // A heartbeat with nothing running posts nothing.
    executor.report(task_id, TaskState::Finished, b"");
    assert!(handle.wait(WAIT).is_ok());
    assert!(!executor.heartbeat(driver.address()));
    let count = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, SchedulerEvent::ExecutorMetricsUpdate { .. }))
        .count();
    assert_eq!(count, 1);
    driver.stop().unwrap();
}

#[test]
fn a_lost_task_removes_its_executor_from_the_driver_which_may_then_register_again() {
    let (driver, _, events) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "lost-1");
    executor.register("h", 1);
    let (handle, task_id) = one_task_launched_on(&driver, &executor);
    executor.report(task_id, TaskState::Lost, b"");
    let reason = format!("Task {task_id} was lost, so marking the executor as lost as well.");
    wait_until("the removal", || {
        events.any(|e| matches!(e, SchedulerEvent::ExecutorRemoved { executor_id, reason: r } if &**executor_id == "lost-1" && *r == reason))
    });
    assert!(driver.executor_ids().is_empty(), "the driver forgot it too");
    assert_eq!(driver.total_cores(), 0);
    // Its next heartbeat asks it to register again, and it may.
    assert!(executor.heartbeat(driver.address()));
    assert_eq!(executor.register("h", 1), Message::RegisteredExecutor);
    wait_until("the relaunch", || executor.inbox.launched().len() == 2);
    executor.report(executor.inbox.launched()[1], TaskState::Finished, b"ok");
    assert_eq!(handle.wait(WAIT).unwrap().results, [&b"ok"[..]]);
    driver.stop().unwrap();
}

#[test]
fn remove_worker_reaches_the_scheduler_with_the_seeds_texts() {
    let (driver, _, _) = driver(&[]);
    driver
        .remove_worker("worker-9", "host-9", "the worker's machine went away")
        .unwrap();
    assert!(logs().contains(
        Level::DEBUG,
        "Asked to remove worker worker-9 with reason the worker's machine went away"
    ));
    assert!(logs().contains(
        Level::INFO,
        "Handle removed worker worker-9: the worker's machine went away"
    ));
    driver.stop().unwrap();
}

/// A round trip through the driver endpoint, behind the messages the driver sent it
/// before (the ReviveOffers of a submission): an ask of a removal that finds nothing.
fn barrier(driver: &Driver) {
    driver
        .remove_executor("barrier", flint_wire::ExecutorLossReason::ExecutorKilled)
        .unwrap();
}

/// Submits a one-task task set and waits for its launch on `executor` (the only one
/// registered): the set's handle and the launched task's id.
fn one_task_launched_on(driver: &Driver, executor: &FakeExecutor) -> (TaskSetHandle, u64) {
    let handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
    wait_until("a launch", || executor.inbox.launched().len() == 1);
    (handle, executor.inbox.launched()[0])
}

#[test]
fn the_periodic_revive_launches_what_no_event_offered() {
    // An excluded host gets no offers; lifting the exclusion sends no message, so only
    // the periodic revive (every 50 ms here) can launch the pending task on it.
    let (driver, _, _) = driver(&["scheduler.revive.interval=50ms"]);
    let executor = FakeExecutor::start(driver.address(), "rv-1");
    executor.register("host-rv", 1);
    driver.exclude_host("host-rv");
    let handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
    barrier(&driver);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        executor.inbox.launched().is_empty(),
        "offers of an excluded host are ignored"
    );
    driver.include_host("host-rv");
    wait_until("the periodic revive launched it", || {
        executor.inbox.launched().len() == 1
    });
    executor.report(executor.inbox.launched()[0], TaskState::Finished, b"");
    assert!(handle.wait(WAIT).is_ok());
    driver.stop().unwrap();
}

#[test]
fn a_task_too_large_for_a_periodic_revive_fails_its_task_set_at_once() {
    // Only the periodic revive can launch here (as above); its launch of a task over
    // rpc.message.maxSize aborts the task set, and the abort reaches the handle in the
    // timer's own turn, with no other message to carry it out.
    let (driver, _, _) = driver(&["scheduler.revive.interval=50ms", "rpc.message.maxSize=1"]);
    let executor = FakeExecutor::start(driver.address(), "rv-big");
    executor.register("host-rv-big", 1);
    driver.exclude_host("host-rv-big");
    let payload = TaskPayload::encode("noop", &vec![1u8; 2 << 20]).unwrap();
    let handle = driver.submit(TaskSet::new(0, 0, 1, payload)).unwrap();
    barrier(&driver);
    driver.include_host("host-rv-big");
    let outcome = handle.wait(Duration::from_secs(3));
    let message = format!("{:?}", outcome.unwrap_err());
    assert!(
        message.contains("which exceeds max allowed: rpc.message.maxSize"),
        "{message}"
    );
    driver.stop().unwrap();
}

#[test]
fn without_the_periodic_revive_nothing_launches_after_an_exclusion_is_lifted() {
    // The counterpart of the test above, with the revive interval of every other test.
    let (driver, _, _) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "nrv-1");
    executor.register("host-nrv", 1);
    driver.exclude_host("host-nrv");
    let _handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
    barrier(&driver);
    driver.include_host("host-nrv");
    std::thread::sleep(Duration::from_millis(200));
    assert!(executor.inbox.launched().is_empty());
    driver.revive_offers();
    wait_until("the revive launched it", || {
        executor.inbox.launched().len() == 1
    });
    driver.stop().unwrap();
}

/// A pools file in the temporary directory, removed when dropped.
struct PoolsFile(std::path::PathBuf);

impl PoolsFile {
    fn new(name: &str, text: &str) -> PoolsFile {
        let path = std::env::temp_dir().join(format!("flint-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        PoolsFile(path)
    }

    fn conf(&self) -> String {
        format!("scheduler.allocation.file={}", self.0.display())
    }
}

impl Drop for PoolsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_driver_loads_the_pools_of_scheduler_allocation_file() {
    // Pool "b" has a minimum share: in FAIR mode it is served before pool "a", which
    // would come first by name were the file not read.
    let file = PoolsFile::new("pools", "# test pools\npool a\npool b minShare=1\n");
    let (driver, _, events) = driver(&["scheduler.mode=FAIR", &file.conf()]);
    let a = driver
        .submit(TaskSet::new(0, 0, 1, noop()).in_pool("a"))
        .unwrap();
    let b = driver
        .submit(TaskSet::new(1, 1, 1, noop()).in_pool("b"))
        .unwrap();
    let executor = FakeExecutor::start(driver.address(), "pool-1");
    executor.register("h", 1);
    wait_until("a launch", || executor.inbox.launched().len() == 1);
    let first = events
        .0
        .lock()
        .unwrap()
        .iter()
        .find_map(|e| match e {
            SchedulerEvent::TaskStart { task_set, .. } => Some(*task_set),
            _ => None,
        })
        .unwrap();
    assert_eq!(first, b.id(), "the pool with a minimum share went first");
    for n in 1..=2 {
        wait_until("a launch", || executor.inbox.launched().len() == n);
        executor.report(executor.inbox.launched()[n - 1], TaskState::Finished, b"");
    }
    assert!(a.wait(WAIT).is_ok() && b.wait(WAIT).is_ok());
    driver.stop().unwrap();

    // A file that cannot be read, or is malformed, stops the driver from starting.
    let conf = Conf::from_pairs(["scheduler.allocation.file=/nonexistent/pools"]).unwrap();
    let err = Driver::start(&conf, Box::new(Recording::default())).unwrap_err();
    assert!(matches!(err, DriverError::PoolsFile { .. }), "{err}");
    assert!(
        err.to_string().starts_with(
            "cannot read the pools file /nonexistent/pools (scheduler.allocation.file): "
        ),
        "{err}"
    );
    let bad = PoolsFile::new("bad-pools", "pool a\nswimming pool\n");
    let conf = Conf::from_pairs(["scheduler.mode=FAIR", &bad.conf()]).unwrap();
    let err = Driver::start(&conf, Box::new(Recording::default())).unwrap_err();
    assert!(err.to_string().contains("line 2"), "{err}");
}

#[test]
fn submissions_wait_until_the_driver_is_ready() {
    // One executor asked for, the whole of it required, and none coming: the first
    // submission waits for maxRegisteredResourcesWaitingTime from the driver's start.
    // The clock is read before the driver starts: its waiting time runs from its start.
    let started = Instant::now();
    let (driver, _, _) = driver(&[
        "scheduler.minRegisteredResourcesRatio=1",
        "scheduler.maxRegisteredResourcesWaitingTime=300ms",
    ]);
    driver.request_total_executors(1).unwrap();
    assert!(!driver.is_ready());
    let handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "submitted after {:?}",
        started.elapsed()
    );
    assert!(logs().contains(
        Level::INFO,
        "SchedulerBackend is ready for scheduling beginning after waiting maxRegisteredResourcesWaitingTime: 300(ms)"
    ));
    // Later submissions do not wait again.
    let again = Instant::now();
    let _second = driver.submit(TaskSet::new(1, 1, 1, noop())).unwrap();
    assert!(again.elapsed() < Duration::from_millis(300));
    assert!(!handle.is_done());
    driver.stop().unwrap();
}

#[test]
fn a_submission_waits_for_the_ratio_of_executors() {
    let (driver, _, _) = driver(&[
        "scheduler.minRegisteredResourcesRatio=0.5",
        "scheduler.maxRegisteredResourcesWaitingTime=1h",
    ]);
    driver.request_total_executors(2).unwrap();
    let registering = Arc::new(Mutex::new(false));
    let waiter = {
        let registering = registering.clone();
        let address = driver.address();
        std::thread::spawn(move || {
            // Registers once the submission has started waiting.
            std::thread::sleep(Duration::from_millis(100));
            *registering.lock().unwrap() = true;
            let executor = FakeExecutor::start(address, "wr-1");
            executor.register("h", 1);
            executor
        })
    };
    let handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
    assert!(
        *registering.lock().unwrap(),
        "the submission waited for the registration"
    );
    let executor = waiter.join().unwrap();
    assert!(logs().contains(
        Level::INFO,
        "SchedulerBackend is ready for scheduling beginning after reached minRegisteredResourcesRatio: 0.5"
    ));
    wait_until("a launch", || executor.inbox.launched().len() == 1);
    executor.report(executor.inbox.launched()[0], TaskState::Finished, b"");
    assert!(handle.wait(WAIT).is_ok());
    driver.stop().unwrap();
}

#[test]
fn an_executor_that_exited_is_removed_with_its_exit_and_replaced() {
    let (driver, cluster, events) = driver(&["executor.maxNumFailures=2"]);
    driver.request_total_executors(1).unwrap();
    let executor = FakeExecutor::start(driver.address(), "ex-1");
    executor.register("h", 1);
    let handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
    wait_until("a launch", || executor.inbox.launched().len() == 1);
    // The cluster manager reports the process's exit before its connection closes.
    cluster.exits.lock().unwrap().push(ExitedExecutor {
        executor_id: "ex-1".into(),
        exit_code: 52,
        message: "executor ex-1 exited with code 52".into(),
    });
    wait_until("the removal", || {
        events.any(|e| matches!(e, SchedulerEvent::ExecutorRemoved { executor_id, reason } if &**executor_id == "ex-1" && reason == "executor ex-1 exited with code 52"))
    });
    assert!(
        events.any(|e| matches!(
            e,
            SchedulerEvent::TaskEnd {
                state: TaskState::Lost,
                reason: flint_scheduler::TaskEndReason::Failed { counted: true, .. },
                ..
            }
        )),
        "an exit the application caused counts towards task.maxFailures"
    );
    assert_eq!(driver.executor_failures(), 1);
    // By the cluster manager's own thread, soon after.
    wait_until("a replacement was asked for", || {
        *cluster.totals.lock().unwrap() == [1, 1]
    });
    // A second failure is the last one allowed: the task set fails with the reason.
    cluster.exits.lock().unwrap().push(ExitedExecutor {
        executor_id: "ex-2".into(),
        exit_code: 1,
        message: "executor ex-2 exited with code 1".into(),
    });
    let err = handle.wait(WAIT).unwrap_err();
    assert_eq!(
        err.to_string(),
        "task set 0.0 failed: Max number of executor failures (2) reached (the last: executor ex-2 exited with code 1)"
    );
    assert!(matches!(
        driver.submit(TaskSet::new(1, 1, 1, noop())),
        Err(DriverError::ExecutorsFailed(_))
    ));
    assert!(matches!(
        driver.wait_for_executors(1, WAIT),
        Err(DriverError::ExecutorsFailed(_))
    ));
    driver.stop().unwrap();
}

/// A peer that did not register cannot speak for an executor that did: not report its
/// tasks finished or lost, not keep it alive with heartbeats.
#[test]
fn a_stranger_cannot_speak_for_a_registered_executor() {
    let (driver, _, _) = driver(&[]);
    let honest = FakeExecutor::start(driver.address(), "imp-1");
    honest.register("h", 1);
    let (handle, task_id) = one_task_launched_on(&driver, &honest);
    // Another connection, with the honest executor's id.
    let impostor = FakeExecutor::start(driver.address(), "imp-1");
    impostor.report(task_id, TaskState::Finished, b"forged");
    wait_until("the forgery is refused", || {
        logs().contains(
            Level::WARN,
            &format!("Ignored task status update ({task_id} state FINISHED) from 127.0.0.1:"),
        ) && logs().contains(
            Level::WARN,
            "executor imp-1 registered on another connection",
        )
    });
    impostor.report(task_id, TaskState::Lost, b"");
    assert!(
        !impostor.heartbeat(driver.address()),
        "the executor it names is registered: it is not asked to register"
    );
    assert!(logs().contains(Level::WARN, "Ignored heartbeat from 127.0.0.1:"));
    barrier(&driver);
    assert_eq!(driver.executor_ids(), ["imp-1"], "not marked lost");
    assert!(!handle.is_done());
    honest.report(task_id, TaskState::Finished, b"real");
    assert_eq!(handle.wait(WAIT).unwrap().results, [&b"real"[..]]);
    driver.stop().unwrap();
}

/// A peer that sends forged updates by the thousand gets a few warning lines a minute,
/// not one per update: the rest go to DEBUG, and their number comes with the next line.
#[test]
fn a_flood_of_refused_updates_is_logged_within_a_budget() {
    let (driver, _, _) = driver(&[]);
    let honest = FakeExecutor::start(driver.address(), "flood-1");
    honest.register("h", 1);
    let impostor = FakeExecutor::start(driver.address(), "flood-1");
    let forged = |task_id: u64| format!("Ignored task status update ({task_id} state FINISHED)");
    let first = 7_700_000;
    for task_id in first..first + 200 {
        impostor.report(task_id, TaskState::Finished, b"forged");
    }
    wait_until("every forgery is refused", || {
        logs().contains(Level::DEBUG, &forged(first + 199))
            || logs().contains(Level::WARN, &forged(first + 199))
    });
    let warned = (first..first + 200)
        .filter(|&task_id| logs().contains(Level::WARN, &forged(task_id)))
        .count();
    assert_eq!(warned, 20, "the budget of a minute");
    assert!(logs().contains(Level::DEBUG, &forged(first + 20)));
    driver.stop().unwrap();
}

/// What only the driver's own process sends its endpoint (stop it, stop the executors,
/// remove one, kill a task) is refused from a remote peer, registered or not.
#[test]
fn control_messages_from_a_remote_peer_are_refused() {
    let (driver, _, _) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "ctl-1");
    executor.register("h", 1);
    let (handle, task_id) = one_task_launched_on(&driver, &executor);
    let refused = |message: Message| {
        let kind = message.kind();
        let reply = executor.driver.ask(&message);
        assert!(reply.is_err(), "{kind} was taken: {reply:?}");
    };
    refused(Message::RemoveExecutor {
        executor_id: "ctl-1".into(),
        reason: flint_wire::ExecutorLossReason::ExecutorKilled,
    });
    refused(Message::KillTask {
        task_id,
        executor_id: "ctl-1".into(),
        interrupt_thread: false,
        reason: "a stranger asked".into(),
    });
    refused(Message::StopExecutors);
    refused(Message::StopDriver);
    assert!(logs().contains(
        Level::WARN,
        "the driver endpoint refused StopDriver from a remote peer"
    ));
    barrier(&driver);
    assert_eq!(driver.executor_ids(), ["ctl-1"]);
    assert_eq!(
        executor
            .inbox
            .count(|m| matches!(m, Message::KillTask { .. } | Message::StopExecutor)),
        0
    );
    // The driver still runs its job.
    executor.report(task_id, TaskState::Finished, b"ok");
    assert_eq!(handle.wait(WAIT).unwrap().results, [&b"ok"[..]]);
    driver.stop().unwrap();
}

/// One connection registers one executor: a second id on it is refused.
#[test]
fn a_connection_registers_one_executor() {
    let (driver, _, _) = driver(&[]);
    let first = FakeExecutor::start(driver.address(), "one-1");
    assert_eq!(first.register("h", 1), Message::RegisteredExecutor);
    // The first one's reference to the driver, so its connection, under another id.
    let same_connection = FakeExecutor {
        id: "one-2".to_owned(),
        env: RpcEnv::new(&Conf::new()).unwrap(),
        driver: first.driver.clone(),
        inbox: Inbox::default(),
    };
    assert_eq!(
        same_connection.register("h", 1024),
        Message::RegisterExecutorFailed {
            message:
                "Executor one-2 cannot register on the connection executor one-1 registered on"
                    .into()
        }
    );
    assert_eq!(driver.executor_ids(), ["one-1"]);
    assert_eq!(driver.total_cores(), 1);
    driver.stop().unwrap();
}

/// A large result is fetched only for a task running on the executor that reports it:
/// for any other task id no fetch starts and nothing is reserved for it, and the
/// executor is told to drop the block it keeps for it.
#[test]
fn a_large_result_is_fetched_only_for_a_task_running_there() {
    let (driver, _, _) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "big-1");
    executor.register("h", 1);
    executor
        .driver
        .send(&Message::StatusUpdate(StatusUpdate {
            executor_id: "big-1".into(),
            task_id: 424_242,
            state: TaskState::Finished,
            outcome: TaskOutcome::Indirect {
                block_id: flint_wire::BlockId::TaskResult { task_id: 424_242 },
                size: 1 << 40,
                metrics: TaskMetrics::default(),
                accumulators: Vec::new(),
            },
        }))
        .unwrap();
    wait_until("the update is ignored", || {
        logs().contains(
            Level::ERROR,
            "Ignoring update with state FINISHED for TID 424242 because its task set is gone",
        )
    });
    barrier(&driver);
    assert_eq!(
        executor
            .inbox
            .count(|m| matches!(m, Message::FetchBlockChunk { .. })),
        0,
        "a fetch started"
    );
    wait_until("the block is removed", || {
        executor.inbox.count(|m| {
            matches!(
                m,
                Message::RemoveBlock {
                    block_id: flint_wire::BlockId::TaskResult { task_id: 424_242 }
                }
            )
        }) == 1
    });
    driver.stop().unwrap();
}

/// 20,000 accumulators with short names: about 640 KB archived, under the test's 1 MiB
/// `rpc.message.maxSize`, but about 1.4 MB decoded (each name its own heap block).
fn many_accumulators() -> Vec<AccumulatorUpdate> {
    (0..20_000)
        .map(|id| AccumulatorUpdate {
            id,
            name: Some("n".into()),
            value: flint_wire::AccumulatorValue::Long(1),
        })
        .collect()
}

#[test]
fn accumulators_that_would_decode_past_the_limit_are_refused_before_they_are_decoded() {
    let (driver, _, events) = driver(&["rpc.message.maxSize=1"]);
    let executor = FakeExecutor::start(driver.address(), "acc-1");
    executor.register("h", 1);
    let handle = driver.submit(TaskSet::new(0, 1, 1, noop())).unwrap();
    wait_until("a launch", || executor.inbox.launched().len() == 1);
    let task_id = executor.inbox.launched()[0];

    // A heartbeat's: the heartbeat still counts, its updates are dropped.
    let updates = vec![TaskAccumUpdates {
        task_id,
        metrics: TaskMetrics::default(),
        accumulators: many_accumulators(),
    }];
    assert!(!executor.heartbeat_with(driver.address(), updates));
    assert!(logs().contains(
        Level::WARN,
        "Ignored the task updates in a heartbeat from executor acc-1: its task updates would \
         take "
    ));
    assert!(logs().contains(Level::WARN, "more than rpc.message.maxSize (1048576 bytes)"));
    assert!(!events.any(|e| matches!(e, SchedulerEvent::ExecutorMetricsUpdate { .. })));

    // A result's: the attempt fails and its task runs again.
    executor
        .driver
        .send(&Message::StatusUpdate(StatusUpdate {
            executor_id: "acc-1".into(),
            task_id,
            state: TaskState::Finished,
            outcome: TaskOutcome::Direct {
                value: Bytes::from_static(b"x"),
                metrics: TaskMetrics::default(),
                accumulators: many_accumulators(),
            },
        }))
        .unwrap();
    wait_until("the task runs again", || {
        executor.inbox.launched().len() == 2
    });
    assert!(events.any(|e| matches!(
        e,
        SchedulerEvent::TaskEnd {
            reason: flint_scheduler::TaskEndReason::Failed {
                kind: flint_wire::TaskFailureKind::ResultLost,
                message,
                counted: true,
            },
            ..
        } if message.starts_with(
            "TaskResultLost (result lost from block manager): the result was refused: its \
             accumulator updates would take "
        )
    )));
    let retry = executor.inbox.launched()[1];
    executor.report(retry, TaskState::Finished, b"");
    assert!(handle.wait(WAIT).is_ok());
    driver.stop().unwrap();
}

/// An executor the driver removed, still running, may report a large result before it
/// registers again: nobody fetches it, and the driver, which no longer knows the
/// executor, asks over the update's own connection that it be removed.
#[test]
fn an_unfetched_result_of_an_executor_the_driver_does_not_know_is_removed() {
    let (driver, _, _) = driver(&[]);
    let executor = FakeExecutor::start(driver.address(), "removed-1");
    let block_id = flint_wire::BlockId::TaskResult { task_id: 515_151 };
    executor
        .driver
        .send(&Message::StatusUpdate(StatusUpdate {
            executor_id: "removed-1".into(),
            task_id: 515_151,
            state: TaskState::Finished,
            outcome: TaskOutcome::Indirect {
                block_id,
                size: 1 << 20,
                metrics: TaskMetrics::default(),
                accumulators: Vec::new(),
            },
        }))
        .unwrap();
    wait_until("the block is removed", || {
        executor
            .inbox
            .count(|m| matches!(m, Message::RemoveBlock { block_id: b } if *b == block_id))
            == 1
    });
    driver.stop().unwrap();
}

/// The map output tracker answers an executor's ask with a shuffle's statuses; an
/// unknown shuffle, or statuses too large for one message, get an error reply at once
/// (the asking reduce task fails with the reason instead of waiting out its ask).
#[test]
fn the_map_output_tracker_answers_or_says_why_it_cannot() {
    use flint_scheduler::dag::{JobSpec, StageSpec};
    use flint_wire::{BlockManagerId, MapStatus, MAP_OUTPUT_TRACKER_ENDPOINT};

    const REDUCES: usize = 80_000;
    // Two map outputs of 640 KB of sizes each: each fits a 1 MiB message, both do not.
    let (driver, _, _) = driver(&["rpc.message.maxSize=1"]);
    let executor = FakeExecutor::start(driver.address(), "1");
    executor.register("h", 2);
    let shuffle = driver.new_shuffle_id();
    let payload = |function: &str| TaskPayload::encode(function, b"").unwrap();
    let job = JobSpec::new(
        "large statuses",
        StageSpec::new("reduce", REDUCES as u32, payload("r")).reading([shuffle]),
    )
    .with_shuffle(
        shuffle,
        REDUCES as u32,
        StageSpec::new("map", 2, payload("m")),
    );
    let handle = driver.submit_job(job).unwrap();
    let tracker = executor
        .env
        .handle()
        .endpoint_ref(driver.address(), MAP_OUTPUT_TRACKER_ENDPOINT);
    let ask = |shuffle_id: u32| {
        let started = Instant::now();
        let reply = tracker
            .ask_timeout(&Message::GetMapOutputStatuses { shuffle_id }, WAIT)
            .map(|reply| reply.to_message());
        assert!(started.elapsed() < WAIT / 2, "answered, not timed out");
        reply
    };
    let unknown = ask(shuffle + 1).unwrap_err().to_string();
    assert!(unknown.contains("is not registered"), "{unknown}");

    wait_until("both map tasks launch", || {
        executor.inbox.launched().len() == 2
    });
    let status = MapStatus {
        location: BlockManagerId {
            executor_id: "1".into(),
            host: "h".into(),
            port: 7,
        },
        sizes: vec![1; REDUCES],
    };
    let value = status.encode();
    assert!(value.len() < 1 << 20);
    for task_id in executor.inbox.launched() {
        let outcome = TaskOutcome::Direct {
            value: value.clone(),
            metrics: Default::default(),
            accumulators: vec![],
        };
        executor
            .driver
            .send(&Message::StatusUpdate(StatusUpdate {
                executor_id: "1".into(),
                task_id,
                state: TaskState::Finished,
                outcome,
            }))
            .unwrap();
    }
    wait_until("a reduce task launches", || {
        executor.inbox.launched().len() > 2
    });
    let too_large = ask(shuffle).unwrap_err().to_string();
    assert!(
        too_large.contains("Cannot send the map output locations"),
        "{too_large}"
    );
    driver.cancel_job(handle.job_id(), None);
    driver.stop().unwrap();
}

/// A heartbeat of `executor_id`, as its executor would send it.
fn heartbeat_of(executor_id: &str) -> Message {
    Message::Heartbeat(flint_wire::Heartbeat {
        executor_id: executor_id.into(),
        accum_updates: vec![],
        block_manager_id: flint_wire::BlockManagerId {
            executor_id: executor_id.into(),
            host: "h".into(),
            port: 1,
        },
    })
}

/// The registration of executor `id` with `cores` cores, as a raw peer sends it.
fn registration_of(id: &str, cores: u32) -> Message {
    Message::RegisterExecutor(RegisterExecutor {
        executor_id: id.into(),
        executor_address: "127.0.0.1:1".to_owned(),
        endpoint_name: EXECUTOR_ENDPOINT.into(),
        hostname: "rogue-host".into(),
        cores,
        log_urls: vec![],
    })
}

/// The message a raw peer got back.
fn message_of(frame: &flint_wire::Frame) -> Message {
    let envelope = frame.envelope().unwrap();
    rkyv::deserialize::<Message, rkyv::rancor::Error>(&envelope.message).unwrap()
}

/// A peer that registers and then never reads again (a receive window of 4 KiB, and
/// heartbeats all along, so that it is never expired for silence) is back-pressure, not
/// a retry storm: once its connection is backlogged it gets no launch and no new attempt
/// while an honest executor runs the job, the lines it causes stay within the log
/// budget, and once it has stayed backlogged for longer than network.timeout it is
/// removed as lost, so that the tasks queued to it run on the honest executor and the job
/// ends, every result once. Its first registration, with billions of cores, is refused.
#[test]
fn a_peer_that_stops_reading_is_back_pressure_and_is_removed_after_the_network_timeout() {
    const TASKS: u32 = 400;
    let (driver, _, events) = driver(&[
        "network.timeout=2s",
        "executor.heartbeatInterval=200ms",
        "rpc.outbox.maxBytes=32k",
        "rpc.io.sendBufferSize=4k",
        "executor.maxCores=64",
    ]);
    let mut rogue = RawPeer::connect(driver.address(), 4096).unwrap();
    let refused = rogue
        .ask_and_wait(DRIVER_ENDPOINT, &registration_of("rogue", u32::MAX), WAIT)
        .unwrap();
    assert_eq!(
        message_of(&refused),
        Message::RegisterExecutorFailed {
            message:
                "Executor rogue registered with 4294967295 cores, more than executor.maxCores (64)"
                    .into()
        }
    );
    let registered = rogue
        .ask_and_wait(DRIVER_ENDPOINT, &registration_of("rogue", 64), WAIT)
        .unwrap();
    assert_eq!(message_of(&registered), Message::RegisteredExecutor);
    // From here on the rogue only writes. Tasks of 4 KiB: its 64 cores take more than
    // its outbox and the kernel's buffers hold.
    let honest = FakeExecutor::start(driver.address(), "honest");
    honest.register("h", 2);
    let payload = TaskPayload::encode("noop", &[7u8; 4096]).unwrap();
    let handle = driver
        .submit(TaskSet::new(900, 900, TASKS, payload))
        .unwrap();

    // The honest executor runs whatever it gets, reporting its task's index; both beat.
    let started = Instant::now();
    let mut taken = 0;
    let mut last_beat = Instant::now();
    let mut most_task_id = 0;
    while !handle.is_done() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the job did not end: {:?}\n{}",
            handle.progress(),
            logs().dump()
        );
        let launched: Vec<(u64, u32)> = {
            let inbox = honest.inbox.0.lock().unwrap();
            let new = inbox[taken..]
                .iter()
                .flat_map(Message::launched_tasks)
                .map(|task| (task.task_id, task.index))
                .collect();
            taken = inbox.len();
            new
        };
        for (task_id, index) in launched {
            most_task_id = most_task_id.max(task_id);
            honest
                .driver
                .send(&Message::StatusUpdate(StatusUpdate {
                    executor_id: "honest".into(),
                    task_id,
                    state: TaskState::Finished,
                    outcome: TaskOutcome::Direct {
                        value: Bytes::copy_from_slice(&index.to_le_bytes()),
                        metrics: Default::default(),
                        accumulators: vec![],
                    },
                }))
                .unwrap();
        }
        if last_beat.elapsed() >= Duration::from_millis(200) {
            last_beat = Instant::now();
            assert!(!honest.heartbeat(driver.address()), "the honest one stays");
            // The driver may have closed it at the end; the job's end says the rest.
            let _ = rogue.ask(HEARTBEAT_ENDPOINT, &heartbeat_of("rogue"));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let outcome = handle.wait(WAIT).unwrap();
    let expected: Vec<Bytes> = (0..TASKS)
        .map(|i| Bytes::copy_from_slice(&i.to_le_bytes()))
        .collect();
    assert_eq!(
        outcome.results, expected,
        "every result, the one its task made"
    );
    assert_eq!(outcome.duplicate_results, 0);
    // No retry storm: a task id per launch, a few hundred of them beyond the tasks at
    // most (the rogue's cores, each time it drained, and the tasks lost with it).
    assert!(
        most_task_id < u64::from(TASKS) + 400,
        "task ids went up to {most_task_id}"
    );
    // The rogue was removed for its backlog, with its loss's reason, and its process
    // killed (it had none the cluster manager started).
    assert!(events.any(
        |e| matches!(e, SchedulerEvent::ExecutorRemoved { executor_id, reason }
        if &**executor_id == "rogue" && reason.contains("Executor's connection has taken nothing for "))
    ), "{}", logs().dump());
    assert!(logs().contains(
        Level::WARN,
        "Removing executor rogue whose connection has not taken a byte for "
    ));
    assert_eq!(driver.executor_ids(), ["honest"]);
    // Every line the rogue caused is within the budget: the backlog's at most a budget's
    // worth, no line per launch, and the tasks lost with it one each.
    assert!(logs().count(Level::WARN, "Executor rogue is not taking what it is sent") >= 1);
    assert!(
        logs().count(Level::WARN, "Executor rogue is not taking what it is sent")
            <= flint_rpc::log_budget::PEER_LINES_PER_WINDOW as usize
    );
    assert_eq!(logs().count(Level::WARN, "Cannot launch task"), 0);
    let lost = logs().count(Level::WARN, "executor rogue): ExecutorLostFailure");
    assert!(lost <= 64, "{lost} tasks lost with it");
    driver.stop().unwrap();
}

/// Over real sockets: an executor whose connection closes while the driver fetches its
/// large result (a chunk asked, no answer yet) is removed with the seeds' reason, its
/// task lost once and run again elsewhere; the fetch, which fails with the connection,
/// neither fails the task a second time nor reports a lost result.
#[test]
fn an_executor_that_vanishes_mid_fetch_loses_its_task_once_and_it_runs_again() {
    let (driver, _, events) = driver(&["rpc.message.maxSize=1"]);
    let first = FakeExecutor::start(driver.address(), "vf-1");
    first.register("h", 1);
    let handle = driver.submit(TaskSet::new(0, 0, 1, noop())).unwrap();
    wait_until("a launch", || first.inbox.launched().len() == 1);
    let task_id = first.inbox.launched()[0];
    first
        .driver
        .send(&Message::StatusUpdate(StatusUpdate {
            executor_id: "vf-1".into(),
            task_id,
            state: TaskState::Finished,
            outcome: TaskOutcome::Indirect {
                block_id: flint_wire::BlockId::TaskResult { task_id },
                size: 3 << 20,
                metrics: TaskMetrics::default(),
                accumulators: Vec::new(),
            },
        }))
        .unwrap();
    wait_until("a chunk is asked for", || {
        first
            .inbox
            .count(|m| matches!(m, Message::FetchBlockChunk { offset: 0, .. }))
            == 1
    });
    first.env.stop();
    wait_until("the removal", || {
        events.any(|e| matches!(e, SchedulerEvent::ExecutorRemoved { executor_id, reason } if &**executor_id == "vf-1" && reason == DISASSOCIATED))
    });
    let second = FakeExecutor::start(driver.address(), "vf-2");
    second.register("h", 1);
    wait_until("the relaunch", || second.inbox.launched().len() == 1);
    second.report(second.inbox.launched()[0], TaskState::Finished, b"again");
    let outcome = handle.wait(WAIT).unwrap();
    assert_eq!(outcome.results, [&b"again"[..]]);
    let failures: Vec<String> = events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            SchedulerEvent::TaskEnd {
                reason: flint_scheduler::TaskEndReason::Failed { message, .. },
                ..
            } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcome.failed_attempts, 1,
        "lost once, with its executor: {failures:?}"
    );
    barrier(&driver);
    assert!(!logs().contains(
        Level::WARN,
        &format!("cannot fetch the result of task {task_id} from executor vf-1")
    ));
    driver.stop().unwrap();
}
