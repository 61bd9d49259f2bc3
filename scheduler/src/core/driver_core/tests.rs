//! The driver core alone: events in, outputs out, made-up instants, no transport.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_testkit::outcome::ok;
use flint_wire::{BlockId, ExecutorLossReason, SharedStr, TaskOutcome, TaskState};

use super::*;
use crate::core::events::{SchedulerEvent, TaskEndReason, TaskResult};
use crate::core::task_set::TaskSetId;

// Executors that do not take what they are sent, and the lines peers cause.
mod backpressure;
// Large results fetched from their executor in chunks.
mod result_fetch;

fn config(ratio: f64, wait: Duration) -> SchedulerConfig {
    SchedulerConfig {
        min_registered_ratio: ratio,
        max_registered_wait: wait,
        ..SchedulerConfig::default()
    }
}

fn limits() -> TransportLimits {
    TransportLimits {
        max_message_size: 1 << 20,
        network_timeout: Duration::from_secs(120),
        outbox_limit: OUTBOX_LIMIT,
    }
}

/// `rpc.outbox.maxBytes` as the core is told it.
const OUTBOX_LIMIT: usize = 64 << 10;

fn core_with(config: SchedulerConfig, now: Instant) -> DriverCore {
    let scheduler = TaskScheduler::new(config.clone());
    DriverCore::new(config, limits(), scheduler, now)
}

fn core(ratio: f64, wait: Duration, now: Instant) -> DriverCore {
    core_with(config(ratio, wait), now)
}

/// The INFO lines logged while `f` runs on this thread.
fn info_lines(f: impl FnOnce()) -> Vec<String> {
    let capture = flint_testkit::logs::LogCapture::default();
    capture.run(f);
    capture.lines(tracing::Level::INFO)
}

/// A registration from this process (no address), of one core.
fn registration(id: &str) -> Registration {
    Registration {
        executor_id: SharedStr::from(id),
        host: SharedStr::from("h"),
        cores: 1,
        address: None,
        endpoint: "EndpointRef(local endpoint Executor)".to_owned(),
    }
}

/// A registration over a connection from `127.0.0.1:port`.
fn remote(id: &str, port: u16) -> Registration {
    Registration {
        address: Some(address(port)),
        ..registration(id)
    }
}

fn address(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Every output, as the glue takes them.
fn drain(core: &mut DriverCore, now: Instant) -> Vec<Output> {
    std::iter::from_fn(|| core.poll_output(now)).collect()
}

/// The requests to the cluster manager among `outputs`.
fn requests(outputs: &[Output]) -> Vec<(u32, IfRefused)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::RequestTotalExecutors { total, if_refused } => Some((*total, *if_refused)),
            _ => None,
        })
        .collect()
}

/// The launches among `outputs`: peer and task id.
fn launches(outputs: &[Output]) -> Vec<(PeerId, u64)> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Launch { peer, task } => Some((*peer, task.task_id)),
            _ => None,
        })
        .collect()
}

fn events(outputs: &[Output]) -> impl Iterator<Item = &SchedulerEvent> {
    outputs.iter().filter_map(|o| match o {
        Output::Event(event) => Some(event),
        _ => None,
    })
}

/// How the task set `stage`.0 ended, if it did.
fn stage_end(outputs: &[Output], stage: u32) -> Option<Option<String>> {
    events(outputs).find_map(|e| match e {
        SchedulerEvent::StageCompleted {
            task_set, failure, ..
        } if task_set.stage_id == stage => Some(failure.clone()),
        _ => None,
    })
}

fn noop() -> Bytes {
    Bytes::from_static(b"\x04noop")
}

fn submit(core: &mut DriverCore, now: Instant, stage: u32, tasks: u32) -> Vec<Output> {
    core.submit(now, TaskSet::new(stage, stage, tasks, noop()))
        .unwrap();
    drain(core, now)
}

fn exit(id: &str, code: i32) -> SupplyEvent {
    SupplyEvent::Exited(ExitedExecutor {
        executor_id: id.to_owned(),
        exit_code: code,
        message: format!("executor {id} exited with code {code}"),
    })
}

const RATIO_LINE: &str =
    "SchedulerBackend is ready for scheduling beginning after reached minRegisteredResourcesRatio: ";
const WAITED_LINE: &str =
    "SchedulerBackend is ready for scheduling beginning after waiting maxRegisteredResourcesWaitingTime: ";

#[test]
fn no_executor_registers_once_executors_are_told_to_stop() {
    let t0 = Instant::now();
    let mut core = core(1.0, Duration::from_secs(30), t0);
    core.register_executor(t0, registration("1")).unwrap();
    core.stop_executors();
    assert_eq!(
        core.register_executor(t0, registration("2")),
        Err("The driver is stopping: executor 2 is not needed".to_owned())
    );
}

#[test]
fn no_executor_registers_once_the_driver_begins_to_stop() {
    let t0 = Instant::now();
    let mut core = core(1.0, Duration::from_secs(30), t0);
    core.begin_stopping();
    assert_eq!(
        core.register_executor(t0, registration("3")),
        Err("The driver is stopping: executor 3 is not needed".to_owned())
    );
}

#[test]
fn ready_once_the_ratio_is_reached_or_the_waiting_time_passed() {
    let t0 = Instant::now();
    let mut core = core(0.5, Duration::from_secs(30), t0);
    assert!(core.is_ready(t0), "nothing asked for: nothing to wait for");
    core.request_total_executors(4).unwrap();
    assert!(!core.is_ready(t0 + Duration::from_secs(29)));
    assert!(core.is_ready(t0 + Duration::from_secs(30)));
    let mut eager = self::core(0.0, Duration::from_secs(30), t0);
    eager.request_total_executors(4).unwrap();
    assert!(eager.is_ready(t0), "a ratio of 0 needs no executor");
}

#[test]
fn readiness_by_ratio_logs_the_seeds_line_once_and_then_holds_for_submissions() {
    let t0 = Instant::now();
    let mut core = core(0.5, Duration::from_secs(30), t0);
    core.request_total_executors(4).unwrap();
    let lines = info_lines(|| {
        let t = t0 + Duration::from_secs(1);
        assert!(!core.is_ready(t));
        assert!(!core.backend_ready(t), "submissions wait");
        core.register_executor(t, registration("1")).unwrap();
        assert!(!core.is_ready(t), "1 of 4 is under half");
        core.register_executor(t, registration("2")).unwrap();
        assert!(core.is_ready(t), "2 of 4 is half");
        assert!(core.is_ready(t));
        core.remove_executor(t, "2", ExecutorLossReason::ExecutorKilled);
        assert!(!core.is_ready(t), "isReady looks again every time");
        assert!(
            core.backend_ready(t),
            "but submissions wait once, as Spark's waitBackendReady"
        );
    });
    let ready: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("SchedulerBackend is ready"))
        .collect();
    assert_eq!(ready, [&format!("{RATIO_LINE}0.5")], "{lines:?}");
}

#[test]
fn readiness_by_waiting_logs_the_seeds_line_once() {
    let t0 = Instant::now();
    let mut core = core(1.0, Duration::from_millis(1500), t0);
    core.request_total_executors(2).unwrap();
    let lines = info_lines(|| {
        assert!(!core.backend_ready(t0 + Duration::from_millis(1499)));
        assert!(core.backend_ready(t0 + Duration::from_millis(1500)));
        assert!(core.is_ready(t0 + Duration::from_secs(60)));
    });
    let ready: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("SchedulerBackend is ready"))
        .collect();
    assert_eq!(ready, [&format!("{WAITED_LINE}1500(ms)")], "{lines:?}");
}

#[test]
fn exited_executors_are_replaced_and_too_many_failures_fail_the_jobs() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.request_total_executors(1).unwrap();
    assert_eq!(requests(&drain(&mut core, t0)), [(1, IfRefused::Answer)]);
    assert_eq!(core.max_executor_failures(), 3, "2 x 1, at least 3");
    submit(&mut core, t0, 0, 2);
    core.executor_supply_report(t0, []);
    assert_eq!(
        requests(&drain(&mut core, t0)),
        [],
        "nothing exited, nothing asked"
    );

    // An exit with code 0 is replaced but is no failure; others are failures.
    core.executor_supply_report(t0, [exit("1", 0)]);
    assert_eq!(
        requests(&drain(&mut core, t0)),
        [(1, IfRefused::CountFailure)]
    );
    assert_eq!(core.executor_failures(), 0);
    core.executor_supply_report(t0, [exit("2", 3), exit("3", 137)]);
    assert_eq!(core.executor_failures(), 2);
    let outputs = drain(&mut core, t0);
    assert_eq!(requests(&outputs), [(1, IfRefused::CountFailure)]);
    assert!(core.failure().is_none());
    assert_eq!(stage_end(&outputs, 0), None, "the task set goes on");

    core.executor_supply_report(t0, [exit("4", 2)]);
    let expected =
        "Max number of executor failures (3) reached (the last: executor 4 exited with code 2)";
    assert_eq!(core.failure(), Some(expected));
    let outputs = drain(&mut core, t0);
    assert_eq!(stage_end(&outputs, 0), Some(Some(expected.to_owned())));
    // Given up: no more executors are asked for.
    assert_eq!(requests(&outputs), []);
    core.executor_supply_report(t0, [exit("5", 1)]);
    assert_eq!(requests(&drain(&mut core, t0)), []);
}

#[test]
fn executors_that_cannot_be_started_are_failures_and_are_asked_for_again() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.config.max_executor_failures = Some(4);
    core.request_total_executors(2).unwrap();
    drain(&mut core, t0);
    let refused = || SupplyEvent::RequestFailed("cannot start executor 2".to_owned());
    core.executor_supply_report(t0, [exit("1", 1)]);
    assert_eq!(
        requests(&drain(&mut core, t0)),
        [(2, IfRefused::CountFailure)]
    );
    core.executor_supply_report(t0, [refused()]);
    assert_eq!(core.executor_failures(), 2, "the exit and the failed start");
    assert_eq!(
        requests(&drain(&mut core, t0)),
        [],
        "asked again at the next report"
    );
    core.executor_supply_report(t0, []);
    assert_eq!(
        requests(&drain(&mut core, t0)),
        [(2, IfRefused::CountFailure)]
    );
    core.executor_supply_report(t0, [refused()]);
    assert_eq!(core.executor_failures(), 3, "the start is retried");
    core.executor_supply_report(t0, []);
    assert_eq!(
        requests(&drain(&mut core, t0)),
        [(2, IfRefused::CountFailure)],
        "started at last"
    );
    core.executor_supply_report(t0, []);
    assert_eq!(
        requests(&drain(&mut core, t0)),
        [],
        "and not asked for again"
    );
    assert_eq!(core.executor_failures(), 3);
    assert!(core.failure().is_none());
}

#[test]
fn requests_and_kills_are_outputs_and_negative_counts_are_refused() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    assert!(core.request_executors(-1).is_err());
    assert!(core.request_total_executors(-3).is_err());
    assert_eq!(drain(&mut core, t0).len(), 0);
    core.request_executors(2).unwrap();
    assert_eq!(requests(&drain(&mut core, t0)), [(2, IfRefused::Answer)]);
    let one = core.register_executor(t0, registration("1")).unwrap();
    core.register_executor(t0, registration("2")).unwrap();
    drain(&mut core, t0);

    // Without replacement: killed, told to stop, and fewer asked for.
    assert_eq!(
        core.kill_executors(&["1".into(), "ghost".into()], false, false),
        ["1"]
    );
    let outputs = drain(&mut core, t0);
    assert!(matches!(&outputs[0], Output::KillExecutors(ids) if ids == &["1"]));
    assert!(
        matches!(&outputs[1], Output::StopExecutor { peer, executor_id } if *peer == one && &**executor_id == "1")
    );
    assert_eq!(requests(&outputs), [(1, IfRefused::Log)]);
    // Once stopping, nothing is asked of the cluster manager but to stop.
    core.begin_stopping();
    core.request_total_executors(5).unwrap();
    let outputs = drain(&mut core, t0);
    assert!(
        matches!(&outputs[..], [Output::SupplyStopping { registered }] if registered.len() == 2),
        "{outputs:?}"
    );
}

#[test]
fn launches_go_to_the_peer_of_their_executor_and_take_its_cores() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let one = core.register_executor(t0, remote("1", 1001)).unwrap();
    let two = core.register_executor(t0, remote("2", 1002)).unwrap();
    assert_ne!(one, two);
    core.offer_after_registration(t0);
    drain(&mut core, t0);
    let launched = launches(&submit(&mut core, t0, 0, 3));
    assert_eq!(launched.len(), 2, "one per free core");
    assert_eq!(
        (core.free_slots("1"), core.free_slots("2")),
        (Some(0), Some(0))
    );
    let (peer, task_id) = launched[0];
    let (executor, from) = if peer == one {
        ("1", 1001)
    } else {
        ("2", 1002)
    };

    // Its result frees the core; the offer comes at the end of the batch.
    let t1 = t0 + Duration::from_millis(5);
    let unfetched = core.status_update(
        t1,
        Some(address(from)),
        executor,
        task_id,
        TaskState::Finished,
        ok(b"r"),
    );
    assert_eq!(unfetched, None);
    let outputs = drain(&mut core, t1);
    assert!(events(&outputs).any(|e| matches!(e,
        SchedulerEvent::TaskEnd { task_id: t, reason: TaskEndReason::Success(TaskResult::Direct { value, .. }), .. }
        if *t == task_id && &value[..] == b"r")));
    assert_eq!(launches(&outputs), []);
    core.flush_offers(t1);
    let next = launches(&drain(&mut core, t1));
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].0, peer, "the freed core's executor");
}

#[test]
fn a_task_too_large_to_send_aborts_its_task_set_with_the_seeds_message() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.register_executor(t0, registration("1")).unwrap();
    let launched = launches(&submit(&mut core, t0, 0, 1));
    let [(_, task_id)] = launched[..] else {
        panic!("{launched:?}")
    };
    assert_eq!(core.free_slots("1"), Some(0));
    core.launch_failed(
        t0,
        "1",
        task_id,
        0,
        LaunchRefused::TooLarge {
            size: 2_000_000,
            limit: 1 << 20,
        },
    );
    assert_eq!(core.free_slots("1"), Some(1), "its core is given back");
    let outputs = drain(&mut core, t0);
    let expected = format!("Serialized task {task_id}:0 was 2000000 bytes, which exceeds max allowed: rpc.message.maxSize (1048576 bytes). Consider increasing rpc.message.maxSize or using broadcast variables for large values.");
    assert_eq!(stage_end(&outputs, 0), Some(Some(expected)));
    assert_eq!(launches(&outputs), []);
}

#[test]
fn a_launch_that_cannot_be_sent_is_offered_again_a_bounded_number_of_times() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.register_executor(t0, registration("1")).unwrap();
    core.submit(t0, TaskSet::new(0, 0, 1, noop())).unwrap();
    // A glue whose every send fails, and says so as it takes the outputs.
    let mut sent = 0;
    while let Some(output) = core.poll_output(t0) {
        if let Output::Launch { task, .. } = output {
            sent += 1;
            let refused = LaunchRefused::Other("the outbox is full".to_owned());
            core.launch_failed(t0, "1", task.task_id, task.index, refused);
        }
    }
    // The submission's offers were the first round.
    assert_eq!(sent, MAX_OFFER_ROUNDS, "then left to the periodic revive");
    assert_eq!(core.free_slots("1"), Some(1));
    core.make_offers(t0);
    assert_eq!(
        launches(&drain(&mut core, t0)).len(),
        1,
        "which launches it"
    );
}

/// The glue gathers an offer round's launches and sends them together once the core
/// has no more queued ([`DriverCore::has_queued_outputs`]): refused together, they still
/// come back within the same run of outputs, and the bound on offer rounds holds.
#[test]
fn launches_sent_together_and_refused_are_offered_again_a_bounded_number_of_times() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let mut registration = registration("1");
    registration.cores = 4;
    core.register_executor(t0, registration).unwrap();
    core.submit(t0, TaskSet::new(0, 0, 8, noop())).unwrap();
    let mut gathered = Vec::new();
    let mut frames = Vec::new();
    while let Some(output) = core.poll_output(t0) {
        if let Output::Launch { task, .. } = output {
            gathered.push((task.task_id, task.index));
        }
        if !gathered.is_empty() && !core.has_queued_outputs() {
            frames.push(gathered.len());
            for (task_id, index) in gathered.drain(..) {
                let refused = LaunchRefused::Other("the connection is gone".to_owned());
                core.launch_failed(t0, "1", task_id, index, refused);
            }
        }
    }
    assert_eq!(
        frames,
        vec![4; MAX_OFFER_ROUNDS],
        "a frame of the 4 cores' launches per round, then left to the periodic revive"
    );
    assert_eq!(core.free_slots("1"), Some(4));
}

#[test]
fn a_large_result_is_fetched_in_chunks_from_the_peer_that_holds_it_even_once_removed() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let peer = core.register_executor(t0, registration("1")).unwrap();
    let launched = launches(&submit(&mut core, t0, 0, 1));
    let [(_, task_id)] = launched[..] else {
        panic!("{launched:?}")
    };
    let block_id = BlockId::TaskResult { task_id };
    let size = 2_000_000u64;
    let outcome = TaskOutcome::Indirect {
        block_id,
        size,
        metrics: Default::default(),
        accumulators: Vec::new(),
    };
    core.status_update(t0, None, "1", task_id, TaskState::Finished, outcome);
    // The executor goes; the fetch keeps its peer.
    core.remove_executor(t0, "1", ExecutorLossReason::ExecutorKilled);
    let mut outputs = drain(&mut core, t0);
    assert!(!outputs.iter().any(|o| matches!(o, Output::ForgetPeer(_))));
    let value: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut chunks = 0;
    let asked = |outputs: &[Output]| {
        outputs.iter().find_map(|o| match o {
            Output::FetchChunk {
                peer: p,
                task_id: t,
                block_id: b,
                offset,
                max_len,
            } if (*p, *t, *b) == (peer, task_id, block_id) => Some((*offset, *max_len)),
            _ => None,
        })
    };
    while let Some((offset, max_len)) = asked(&outputs) {
        chunks += 1;
        let end = (offset + u64::from(max_len)).min(size);
        let data = &value[offset as usize..end as usize];
        let reply = ChunkReply::Chunk {
            offset,
            total_size: size,
            data,
        };
        core.chunk_received(t0, task_id, Ok(reply));
        outputs = drain(&mut core, t0);
    }
    assert_eq!(chunks, 3, "chunks of 1 MiB less the room around them");
    let removed = outputs
        .iter()
        .position(|o| matches!(o, Output::RemoveBlock { peer: p, block_id: b } if (*p, *b) == (peer, block_id)))
        .expect("the block is removed");
    let forgotten = outputs
        .iter()
        .position(|o| matches!(o, Output::ForgetPeer(p) if *p == peer))
        .expect("then the peer forgotten");
    assert!(removed < forgotten);
    // The executor was removed and its task lost before the result came: it runs again.
    assert!(!events(&outputs).any(|e| matches!(
        e,
        SchedulerEvent::TaskEnd {
            reason: TaskEndReason::Success(_),
            ..
        }
    )));
}

#[test]
fn a_fetch_that_gets_something_else_fails_and_the_task_runs_again() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let peer = core.register_executor(t0, registration("1")).unwrap();
    let launched = launches(&submit(&mut core, t0, 0, 1));
    let [(_, task_id)] = launched[..] else {
        panic!("{launched:?}")
    };
    let block_id = BlockId::TaskResult { task_id };
    let outcome = TaskOutcome::Indirect {
        block_id,
        size: 10,
        metrics: Default::default(),
        accumulators: Vec::new(),
    };
    core.status_update(t0, None, "1", task_id, TaskState::Finished, outcome);
    assert!(drain(&mut core, t0)
        .iter()
        .any(|o| matches!(o, Output::FetchChunk { offset: 0, .. })));
    core.chunk_received(
        t0,
        task_id,
        Ok(ChunkReply::Other(flint_wire::MessageKind::Ack)),
    );
    let outputs = drain(&mut core, t0);
    assert!(outputs
        .iter()
        .any(|o| matches!(o, Output::RemoveBlock { peer: p, .. } if *p == peer)));
    assert!(events(&outputs).any(|e| matches!(e,
        SchedulerEvent::TaskEnd { reason: TaskEndReason::Failed { message, .. }, .. }
        if message.ends_with("from executor 1: the executor answered Ack"))));
    assert_eq!(launches(&outputs).len(), 1, "it runs again");
    // A late reply to a fetch that ended changes nothing.
    core.chunk_received(
        t0,
        task_id,
        Err(ChunkFailure::Other("timed out".to_owned())),
    );
    assert_eq!(drain(&mut core, t0).len(), 0);
}

#[test]
fn kills_and_stops_go_to_the_executor_s_peer_and_unknown_executors_are_logged() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let one = core.register_executor(t0, registration("1")).unwrap();
    let two = core.register_executor(t0, registration("2")).unwrap();
    drain(&mut core, t0);
    core.kill_task(7, "1", true, "because".to_owned());
    core.kill_task(8, "nobody", true, "because".to_owned());
    let outputs = drain(&mut core, t0);
    assert!(
        matches!(&outputs[..], [Output::KillTask { peer, task_id: 7, interrupt_thread: true, reason, .. }] if *peer == one && reason == "because")
    );
    core.stop_executors();
    let mut stopped: Vec<PeerId> = drain(&mut core, t0)
        .into_iter()
        .map(|o| match o {
            Output::StopExecutor { peer, .. } => peer,
            other => panic!("{other:?}"),
        })
        .collect();
    stopped.sort_by_key(|p| p.index());
    assert_eq!(stopped, [one, two]);
}

#[test]
fn a_closed_connection_removes_its_executor_with_the_seeds_reason_and_replaces_it() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.request_total_executors(1).unwrap();
    let peer = core.register_executor(t0, remote("1", 1001)).unwrap();
    drain(&mut core, t0);
    core.disconnected(t0, address(9999));
    assert_eq!(
        drain(&mut core, t0).len(),
        0,
        "no executor registered there"
    );
    core.disconnected(t0, address(1001));
    let outputs = drain(&mut core, t0);
    assert!(outputs
        .iter()
        .any(|o| matches!(o, Output::ForgetPeer(p) if *p == peer)));
    assert_eq!(requests(&outputs), [(1, IfRefused::CountFailure)]);
    assert!(events(&outputs).any(|e| matches!(e,
        SchedulerEvent::ExecutorRemoved { executor_id, reason }
        if &**executor_id == "1" && reason == DISASSOCIATED)));
    assert_eq!(core.num_executors(), 0);
    // Its connection's number may serve the next executor.
    assert_eq!(core.register_executor(t0, remote("2", 1002)), Ok(peer));
}

/// A job's figures count every task attempt that could not fetch, also one that ends
/// after its stage attempt has already failed on another task's fetch failure (the
/// task scheduler ends a task set at its first fetch failure; its other running tasks
/// end later).
#[test]
fn a_job_counts_every_fetch_failure_also_after_its_stage_attempt_failed() {
    use crate::core::dag::{JobSpec, StageSpec};
    use flint_wire::{BlockManagerId, FetchFailure, MapStatus, TaskPayload};

    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let one = core.register_executor(t0, registration("1")).unwrap();
    core.register_executor(t0, registration("2")).unwrap();
    core.offer_after_registration(t0);
    drain(&mut core, t0);
    let id_of = |peer: PeerId| if peer == one { "1" } else { "2" };
    let payload = |function: &str| TaskPayload::encode(function, b"").unwrap();
    let job = JobSpec::new(
        "job",
        StageSpec::new("reduce", 2, payload("r")).reading([0]),
    )
    .with_shuffle(0, 2, StageSpec::new("map", 2, payload("m")));
    let job_id = core.submit_job(t0, job).unwrap();

    let maps = launches(&drain(&mut core, t0));
    assert_eq!(maps.len(), 2, "one map task on each executor");
    for (peer, task_id) in maps {
        let status = MapStatus {
            location: BlockManagerId {
                executor_id: id_of(peer).into(),
                host: "h".into(),
                port: 7,
            },
            sizes: vec![10, 10],
        };
        let value = status.encode();
        let outcome = TaskOutcome::Direct {
            value,
            metrics: Default::default(),
            accumulators: Vec::new(),
        };
        core.status_update(t0, None, id_of(peer), task_id, TaskState::Finished, outcome);
    }
    let mut outputs = drain(&mut core, t0);
    core.flush_offers(t0);
    outputs.extend(drain(&mut core, t0));
    let reduces = launches(&outputs);
    assert_eq!(reduces.len(), 2, "one reduce task on each executor");
    for (reduce_id, (peer, task_id)) in reduces.into_iter().enumerate() {
        // The second names an executor nobody knows: it is blamed on no executor.
        let blamed = if reduce_id == 0 { "1" } else { "made-up" };
        let failure = FetchFailure {
            address: Some(BlockManagerId {
                executor_id: blamed.into(),
                host: "h".into(),
                port: 7,
            }),
            shuffle_id: 0,
            map_index: Some(0),
            reduce_id: reduce_id as u32,
            message: "gone".to_owned(),
        };
        let outcome = TaskOutcome::FetchFailed {
            failure: Box::new(failure),
            metrics: Default::default(),
        };
        core.status_update(t0, None, id_of(peer), task_id, TaskState::Failed, outcome);
        drain(&mut core, t0);
    }
    assert!(core.jobs.dag.knows_executor("1"));
    assert!(!core.jobs.dag.knows_executor("made-up"));
    assert!(core.cancel_job(t0, job_id, None));
    let stats = drain(&mut core, t0)
        .into_iter()
        .find_map(|output| match output {
            Output::JobEnded { stats, .. } => Some(stats),
            _ => None,
        })
        .expect("the job ended");
    assert_eq!(stats.fetch_failures, 2, "{stats:?}");
    assert_eq!(stats.stage_attempts, 2, "{stats:?}");
    assert_eq!(stats.shuffle_bytes_written, 40, "{stats:?}");
}

/// A map task whose value is no usable map output (garbage, another executor's
/// location, the wrong number of sizes, a huge host) fails, counted, and runs again; a
/// good status then completes the stage. None leaves its partition counted done with
/// no output, which would hang the job.
#[test]
fn a_map_task_without_a_usable_map_status_fails_and_runs_again() {
    use crate::core::dag::{JobSpec, StageSpec};
    use flint_wire::{BlockManagerId, MapStatus, TaskPayload};

    let t0 = Instant::now();
    let mut config = config(0.0, Duration::from_secs(30));
    config.max_task_failures = 8;
    let mut core = core_with(config, t0);
    core.register_executor(t0, registration("1")).unwrap();
    core.offer_after_registration(t0);
    drain(&mut core, t0);
    let payload = |function: &str| TaskPayload::encode(function, b"").unwrap();
    let job = JobSpec::new(
        "job",
        StageSpec::new("reduce", 2, payload("r")).reading([0]),
    )
    .with_shuffle(0, 2, StageSpec::new("map", 1, payload("m")));
    core.submit_job(t0, job).unwrap();
    let status = |executor: &str, host: String, sizes: Vec<u64>| {
        MapStatus {
            location: BlockManagerId {
                executor_id: executor.into(),
                host,
                port: 7,
            },
            sizes,
        }
        .encode()
    };
    let bad = [
        Bytes::from_static(b"not a map status"),
        Bytes::new(),
        status("2", "h".into(), vec![1, 1]),
        status("1", "h".into(), vec![1, 1, 1]),
        status("1", "h".repeat(300), vec![1, 1]),
    ];
    // Launches happen in whichever turn frees the core: keep every output.
    let mut outputs = Vec::new();
    let next_launch = |core: &mut DriverCore, outputs: &mut Vec<Output>| {
        outputs.extend(drain(core, t0));
        core.flush_offers(t0);
        outputs.extend(drain(core, t0));
        let found = launches(outputs);
        outputs.clear();
        found
    };
    let mut failures = Vec::new();
    for value in bad {
        let [(_, task_id)] = next_launch(&mut core, &mut outputs)[..] else {
            panic!("one map task runs");
        };
        let outcome = TaskOutcome::Direct {
            value,
            metrics: Default::default(),
            accumulators: Vec::new(),
        };
        core.status_update(t0, None, "1", task_id, TaskState::Finished, outcome);
        let ended = drain(&mut core, t0);
        failures.extend(events(&ended).filter_map(|event| match event {
            SchedulerEvent::TaskEnd {
                reason: TaskEndReason::Failed { message, .. },
                ..
            } => Some(message.clone()),
            _ => None,
        }));
        outputs.extend(ended);
    }
    assert_eq!(failures.len(), 5, "{failures:#?}");
    for (failure, why) in failures.iter().zip([
        "no map status",
        "no map status",
        "on executor 2",
        "3 sizes for the 2 reduce partitions",
        "a host of 300 bytes",
    ]) {
        assert!(failure.contains(why), "{failure}");
    }
    // A good status: the map stage completes and the reduce stage's tasks launch.
    let [(_, task_id)] = next_launch(&mut core, &mut outputs)[..] else {
        panic!("the map task runs once more");
    };
    let outcome = TaskOutcome::Direct {
        value: status("1", "h".into(), vec![1, 1]),
        metrics: Default::default(),
        accumulators: Vec::new(),
    };
    core.status_update(t0, None, "1", task_id, TaskState::Finished, outcome);
    let launched = next_launch(&mut core, &mut outputs);
    assert_eq!(launched.len(), 1, "a reduce task on the one core");
}

/// Task sets the driver program submits may not take the ids of jobs of stages, whose
/// events the DAG scheduler takes.
#[test]
fn a_task_set_in_the_id_range_of_jobs_of_stages_is_refused() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    for (stage, job) in [(crate::FIRST_JOB_ID, 1), (1, crate::FIRST_JOB_ID)] {
        let error = core
            .submit(t0, TaskSet::new(stage, job, 1, noop()))
            .unwrap_err();
        assert!(
            error.to_string().contains("which jobs of stages take"),
            "{error}"
        );
    }
    assert!(core.submit(t0, TaskSet::new(7, 7, 1, noop())).is_ok());
}

// ---- helpers of the submodules ---------------------------------------------------

/// A registration over a connection from `127.0.0.1:port`, of `cores` cores.
fn remote_with(id: &str, port: u16, cores: u32) -> Registration {
    Registration {
        cores,
        ..remote(id, port)
    }
}

/// The failures the task set `stage`.0 counted, over all its tasks.
fn counted_failures(core: &DriverCore, stage: u32) -> u32 {
    let task_set = core
        .scheduler
        .task_set(TaskSetId {
            stage_id: stage,
            stage_attempt_id: 0,
        })
        .expect("the task set is registered");
    (0..task_set.num_tasks() as u32)
        .map(|i| task_set.task_failures(i))
        .sum()
}

/// With a cluster manager that reports exits, a closed connection disables its executor
/// and holds its tasks until the report: the exit, with its code, is the reason of the
/// loss ("executor 1 exited with code 3"), not the seeds' guess for a closed connection.
/// Without a report within the wait, the closed connection is the reason after all.
#[test]
fn a_closed_connection_waits_for_the_exit_report_for_the_reason_of_the_loss() {
    let t0 = Instant::now();
    let wait = Duration::from_secs(3);
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.wait_for_loss_reasons(wait);
    core.request_total_executors(2).unwrap();
    core.register_executor(t0, remote("1", 1001)).unwrap();
    core.register_executor(t0, remote("2", 1002)).unwrap();
    drain(&mut core, t0);
    let launched = launches(&submit(&mut core, t0, 0, 2));
    assert_eq!(launched.len(), 2);

    core.disconnected(at(10), address(1001));
    assert!(core.is_loss_reason_pending("1"));
    let outputs = drain(&mut core, at(10));
    assert!(
        !events(&outputs).any(|e| matches!(
            e,
            SchedulerEvent::ExecutorRemoved { .. } | SchedulerEvent::TaskEnd { .. }
        )),
        "{outputs:?}"
    );
    assert_eq!(launches(&outputs), [], "its task is held, not re-run yet");
    assert!(
        outputs.iter().any(|o| matches!(o, Output::LookForExits)),
        "the cluster manager is asked to look for the exit now: {outputs:?}"
    );
    assert_eq!(core.num_executors(), 1, "it gets no offers");
    assert_eq!(
        core.register_executor(at(20), remote("1", 1003)),
        Err("Duplicate executor ID: 1".to_owned()),
        "it is still known"
    );
    // Before the wait is over, nothing expires.
    core.expire_dead_executors(at(2_000));
    assert!(core.is_loss_reason_pending("1"));

    core.executor_supply_report(at(2_500), [exit("1", 3)]);
    assert!(!core.is_loss_reason_pending("1"));
    assert_eq!(core.executor_failures(), 1);
    let outputs = drain(&mut core, at(2_500));
    assert!(events(&outputs).any(|e| matches!(e,
        SchedulerEvent::ExecutorRemoved { executor_id, reason }
        if &**executor_id == "1" && reason == "executor 1 exited with code 3")));
    assert!(events(&outputs).any(|e| matches!(e,
        SchedulerEvent::TaskEnd { state: TaskState::Lost, reason: TaskEndReason::Failed { message, counted: true, .. }, .. }
        if message == "ExecutorLostFailure (executor 1 exited caused by one of the running tasks) Reason: executor 1 exited with code 3")));
    assert_eq!(
        requests(&outputs),
        [(2, IfRefused::CountFailure)],
        "replaced"
    );

    // No report for executor 2: after the wait, its closed connection is the reason.
    core.disconnected(at(3_000), address(1002));
    assert!(core.is_loss_reason_pending("2"));
    drain(&mut core, at(3_000));
    core.expire_dead_executors(at(5_999));
    assert!(core.is_loss_reason_pending("2"));
    core.expire_dead_executors(at(6_000));
    assert!(!core.is_loss_reason_pending("2"));
    let outputs = drain(&mut core, at(6_000));
    assert!(events(&outputs).any(|e| matches!(e,
        SchedulerEvent::ExecutorRemoved { executor_id, reason }
        if &**executor_id == "2" && reason == DISASSOCIATED)));
    assert!(events(&outputs).any(|e| matches!(
        e,
        SchedulerEvent::TaskEnd {
            state: TaskState::Lost,
            ..
        }
    )));
    // A report after the wait counts the failure but removes nothing more.
    core.executor_supply_report(at(7_000), [exit("2", 1)]);
    assert_eq!(core.executor_failures(), 2);
    assert!(!events(&drain(&mut core, at(7_000)))
        .any(|e| matches!(e, SchedulerEvent::ExecutorRemoved { .. })));
}

/// A map stage shared by two jobs of stages runs under the first job's id: when that
/// job is cancelled while the stage still runs for the other, its successes are still
/// merged (once), and once the last job that needs it ends the stage is forgotten.
#[test]
fn a_shared_map_stage_s_successes_are_merged_after_the_job_that_submitted_it_ends() {
    use crate::core::dag::{JobSpec, StageSpec};
    use flint_wire::{AccumulatorUpdate, AccumulatorValue, BlockManagerId, MapStatus, TaskPayload};

    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let id = core
        .scheduler
        .accumulators_mut()
        .register("n", crate::AccumulatorKind::Long)
        .id;
    let one = core.register_executor(t0, registration("1")).unwrap();
    core.register_executor(t0, registration("2")).unwrap();
    core.offer_after_registration(t0);
    drain(&mut core, t0);
    let id_of = |peer: PeerId| if peer == one { "1" } else { "2" };
    let payload = |function: &str| TaskPayload::encode(function, b"").unwrap();
    let job = || {
        JobSpec::new(
            "job",
            StageSpec::new("reduce", 2, payload("r")).reading([0]),
        )
        .with_shuffle(0, 2, StageSpec::new("map", 2, payload("m")))
    };
    let adds_one = |value: Bytes| TaskOutcome::Direct {
        value,
        metrics: Default::default(),
        accumulators: vec![AccumulatorUpdate {
            id,
            name: None,
            value: AccumulatorValue::Long(1),
        }],
    };
    let first = core.submit_job(t0, job()).unwrap();
    let maps = launches(&drain(&mut core, t0));
    assert_eq!(maps.len(), 2, "one map task on each executor");
    let second = core.submit_job(t0, job()).unwrap();
    drain(&mut core, t0);
    assert!(core.cancel_job(t0, first, None));
    drain(&mut core, t0);
    for (peer, task_id) in maps {
        let status = MapStatus {
            location: BlockManagerId {
                executor_id: id_of(peer).into(),
                host: "h".into(),
                port: 7,
            },
            sizes: vec![10, 10],
        };
        let outcome = adds_one(status.encode());
        core.status_update(t0, None, id_of(peer), task_id, TaskState::Finished, outcome);
    }
    let value = |core: &DriverCore| core.scheduler.accumulators().value(id).cloned();
    assert_eq!(
        value(&core),
        Some(AccumulatorValue::Long(2)),
        "both map tasks"
    );
    let mut outputs = drain(&mut core, t0);
    core.flush_offers(t0);
    outputs.extend(drain(&mut core, t0));
    let reduces = launches(&outputs);
    assert_eq!(reduces.len(), 2, "the second job's reduce tasks");
    for (peer, task_id) in reduces {
        let outcome = adds_one(Bytes::from_static(b"r"));
        core.status_update(t0, None, id_of(peer), task_id, TaskState::Finished, outcome);
    }
    let ended = drain(&mut core, t0)
        .into_iter()
        .any(|output| matches!(output, Output::JobEnded { job_id, .. } if job_id == second));
    assert!(ended, "the second job ended");
    assert_eq!(value(&core), Some(AccumulatorValue::Long(4)));
    assert_eq!(
        core.scheduler.accumulators().tracked_stages(),
        0,
        "the stages are forgotten with the last job that needed them"
    );
}

#[test]
fn a_frames_updates_are_handled_only_for_executors_its_sender_may_speak_for() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.register_executor(t0, remote("1", 1001)).unwrap();
    core.register_executor(t0, remote("2", 1002)).unwrap();
    let frame = [("1", 10), ("1", 11), ("2", 12), ("1", 13), ("9", 14)];
    let handled = |core: &mut DriverCore, sender: Option<SocketAddr>| {
        let mut handled = Vec::new();
        core.for_each_update_its_sender_may_send(
            t0,
            sender,
            &frame,
            |&(executor, _)| executor,
            |&(_, task_id)| (task_id, TaskState::Finished),
            |_, &(_, task_id)| handled.push(task_id),
        );
        handled
    };
    // Executor 1's connection speaks for 1 only, whatever the order; executor 2's for 2.
    assert_eq!(handled(&mut core, Some(address(1001))), [10, 11, 13]);
    assert_eq!(handled(&mut core, Some(address(1002))), [12]);
    // A connection no executor registered on may speak for an id no executor holds.
    assert_eq!(handled(&mut core, Some(address(1003))), [14]);
    // The driver's own process speaks for every executor.
    assert_eq!(handled(&mut core, None), [10, 11, 12, 13, 14]);
}

#[test]
fn a_frame_whose_update_loses_its_executor_is_handled_as_its_updates_one_by_one() {
    let t0 = Instant::now();
    // Executor 1's connection sends: its task lost (which removes executor 1), the same
    // task finished, then an update naming executor 2. Checked once per run of updates,
    // or once per update: the same outputs and the same executors.
    let run = |per_frame: bool| {
        let mut core = core(0.0, Duration::from_secs(30), t0);
        let one = core.register_executor(t0, remote("1", 1001)).unwrap();
        core.register_executor(t0, remote("2", 1002)).unwrap();
        core.offer_after_registration(t0);
        drain(&mut core, t0);
        let launched = launches(&submit(&mut core, t0, 0, 2));
        let on = |peer: bool| {
            launched
                .iter()
                .find(|(p, _)| (*p == one) == peer)
                .map(|&(_, task_id)| task_id)
                .unwrap()
        };
        let (on_one, on_two) = (on(true), on(false));
        let frame = [
            ("1", on_one, TaskState::Lost),
            ("1", on_one, TaskState::Finished),
            ("2", on_two, TaskState::Finished),
        ];
        let sender = Some(address(1001));
        if per_frame {
            core.for_each_update_its_sender_may_send(
                t0,
                sender,
                &frame,
                |&(executor, ..)| executor,
                |&(_, task_id, state)| (task_id, state),
                |core, &(executor, task_id, state)| {
                    core.status_update_from_checked_sender(t0, executor, task_id, state, ok(b"r"));
                },
            );
        } else {
            for (executor, task_id, state) in frame {
                core.status_update(t0, sender, executor, task_id, state, ok(b"r"));
            }
        }
        let outputs = format!("{:?}", drain(&mut core, t0));
        (outputs, core.free_slots("1"), core.free_slots("2"))
    };
    let (per_frame, one_by_one) = (run(true), run(false));
    assert_eq!(per_frame, one_by_one);
    assert!(per_frame.0.contains("ExecutorRemoved"), "{}", per_frame.0);
    assert_eq!(per_frame.1, None, "executor 1 is removed");
    assert_eq!(
        per_frame.2,
        Some(0),
        "executor 2's task still runs: refused from 1001"
    );
}
