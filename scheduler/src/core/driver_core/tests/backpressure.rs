//! Executors that do not take what they are sent (back-pressure, a backlog that takes
//! no byte, the `executor.maxCores` cap), and the lines peers cause kept within the log
//! budget.

use super::*;

/// The glue found the outbox of `executor`'s connection full as it went to send `task`.
fn refuse_as_full(
    core: &mut DriverCore,
    now: Instant,
    executor: &str,
    task: &flint_wire::TaskDescription,
) {
    let refused = LaunchRefused::Backlogged {
        queued: OUTBOX_LIMIT,
        limit: OUTBOX_LIMIT,
    };
    core.launch_failed(now, executor, task.task_id, task.index, refused);
}

#[test]
fn a_backlogged_executor_gets_no_offers_and_no_new_attempts_until_its_connection_drains() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let slow = core
        .register_executor(t0, remote_with("slow", 1, 4))
        .unwrap();
    core.submit(t0, TaskSet::new(0, 0, 6, noop())).unwrap();
    // The first launch meets the full outbox; the three queued behind it are not tried.
    let mut tried = 0;
    while let Some(output) = core.poll_output(t0) {
        if let Output::Launch { task, .. } = output {
            tried += 1;
            refuse_as_full(&mut core, t0, "slow", &task);
        }
    }
    assert_eq!(tried, 1, "one launch tried, not one per round of offers");
    assert_eq!(core.free_slots("slow"), Some(4), "every core given back");
    assert_eq!(core.scheduler.running_tasks(), 0);
    assert_eq!(counted_failures(&core, 0), 0, "back-pressure is no failure");
    assert_eq!(
        core.backlogged_executors(),
        [(SharedStr::from("slow"), slow)]
    );
    // No offers, by any path, while it is backlogged; nor once still over the mark.
    let t1 = t0 + Duration::from_secs(1);
    core.make_offers(t1);
    core.outbox_backlog(t1, "slow", OUTBOX_LIMIT / 2, 0);
    core.flush_offers(t1);
    core.make_offers(t1);
    assert_eq!(launches(&drain(&mut core, t1)), []);
    // Another executor takes the pending tasks meanwhile.
    let fast = core
        .register_executor(t1, remote_with("fast", 2, 2))
        .unwrap();
    core.offer_after_registration(t1);
    let outputs = drain(&mut core, t1);
    assert_eq!(
        launches(&outputs).iter().map(|l| l.0).collect::<Vec<_>>(),
        [fast, fast]
    );
    // Drained below half of rpc.outbox.maxBytes: offered again, and watched until its
    // connection is seen empty.
    let t2 = t1 + Duration::from_secs(1);
    core.outbox_backlog(t2, "slow", OUTBOX_LIMIT / 2 - 1, 1);
    assert_eq!(
        core.backlogged_executors(),
        [(SharedStr::from("slow"), slow)]
    );
    core.flush_offers(t2);
    let outputs = drain(&mut core, t2);
    assert_eq!(
        launches(&outputs).iter().map(|l| l.0).collect::<Vec<_>>(),
        [slow, slow, slow, slow]
    );
    assert_eq!(counted_failures(&core, 0), 0);
    core.outbox_backlog(t2, "slow", 0, 2);
    assert_eq!(
        core.backlogged_executors(),
        [],
        "seen empty: the backlog is over"
    );
    // Long after, nothing holds against it.
    core.outbox_backlog(t2 + Duration::from_secs(600), "slow", OUTBOX_LIMIT, 2);
    assert_eq!(core.executor_ids(), ["fast", "slow"]);
}

#[test]
fn withdrawn_launches_end_uncounted_and_are_logged_once_per_backlog_within_the_budget() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let slow = core
        .register_executor(t0, remote_with("slow", 1, 8))
        .unwrap();
    core.submit(t0, TaskSet::new(0, 0, 8, noop())).unwrap();
    let capture = flint_testkit::logs::LogCapture::default();
    let mut withdrawn = Vec::new();
    capture.run(|| {
        // A peer that drains just enough, and fills up again, 100 times.
        for round in 0..100 {
            let now = t0 + Duration::from_millis(round);
            core.outbox_backlog(now, "slow", 0, round);
            core.make_offers(now);
            while let Some(output) = core.poll_output(now) {
                match output {
                    Output::Launch { task, .. } => {
                        refuse_as_full(&mut core, now, "slow", &task);
                    }
                    Output::Event(SchedulerEvent::TaskEnd {
                        reason:
                            TaskEndReason::Failed {
                                counted, message, ..
                            },
                        ..
                    }) => withdrawn.push((counted, message)),
                    _ => {}
                }
            }
        }
    });
    assert_eq!(withdrawn.len(), 800, "each launch's attempt ends");
    assert!(withdrawn.iter().all(|(counted, _)| !counted));
    assert_eq!(
        withdrawn[0].1,
        format!("not sent: the connection of executor slow has {OUTBOX_LIMIT} bytes queued (rpc.outbox.maxBytes {OUTBOX_LIMIT})")
    );
    let warned = capture.lines(tracing::Level::WARN);
    let backlog = "Executor slow is not taking what it is sent";
    assert_eq!(
        warned.iter().filter(|l| l.contains(backlog)).count(),
        flint_rpc::log_budget::PEER_LINES_PER_WINDOW as usize,
        "{warned:#?}"
    );
    assert!(warned
        .iter()
        .any(|l| l.contains("8 launches to it are pending again")));
    assert!(
        !warned.iter().any(|l| l.contains("Lost task")),
        "a withdrawn attempt is no lost task"
    );
    assert_eq!(counted_failures(&core, 0), 0);
    let _ = slow;
}

#[test]
fn launches_that_fail_otherwise_are_logged_within_the_budget() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.register_executor(t0, registration("1")).unwrap();
    core.submit(t0, TaskSet::new(0, 0, 1, noop())).unwrap();
    let capture = flint_testkit::logs::LogCapture::default();
    capture.run(|| {
        for _ in 0..50 {
            while let Some(output) = core.poll_output(t0) {
                if let Output::Launch { task, .. } = output {
                    let refused = LaunchRefused::Other("the connection is gone".to_owned());
                    core.launch_failed(t0, "1", task.task_id, task.index, refused);
                }
            }
            core.make_offers(t0);
        }
    });
    assert_eq!(
        capture.count(tracing::Level::WARN, "Cannot launch task"),
        flint_rpc::log_budget::PEER_LINES_PER_WINDOW as usize
    );
    assert!(capture.count(tracing::Level::DEBUG, "Cannot launch task") > 100);
}

#[test]
fn an_executor_backlogged_past_the_network_timeout_is_lost_and_its_tasks_run_elsewhere() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let stuck = core
        .register_executor(t0, remote_with("stuck", 1, 2))
        .unwrap();
    core.submit(t0, TaskSet::new(0, 0, 3, noop())).unwrap();
    // The first launch is queued (and will never be read); the second meets the full
    // outbox.
    let mut sent = None;
    while let Some(output) = core.poll_output(t0) {
        if let Output::Launch { task, .. } = output {
            if sent.is_none() {
                sent = Some(task.task_id);
            } else {
                refuse_as_full(&mut core, t0, "stuck", &task);
            }
        }
    }
    let sent = sent.unwrap();
    assert_eq!(
        core.scheduler.executor_of(sent).map(|e| &**e),
        Some("stuck")
    );
    let other = core
        .register_executor(t0, remote_with("other", 2, 1))
        .unwrap();
    core.offer_after_registration(t0);
    let first = launches(&drain(&mut core, t0));
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].0, other);
    // Drained under the low-water mark, so offered again, but never seen empty (what
    // was queued to it stays there) and taking nothing more: kept for network.timeout,
    // no longer.
    let timeout = limits().network_timeout;
    core.outbox_backlog(t0 + Duration::from_secs(1), "stuck", 1000, 7);
    core.outbox_backlog(t0 + timeout, "stuck", 1000, 7);
    assert_eq!(core.executor_ids(), ["other", "stuck"]);
    // Past it: removed as lost, its process killed and replaced.
    let late = t0 + timeout + Duration::from_millis(1);
    core.outbox_backlog(late, "stuck", 1000, 7);
    assert_eq!(core.executor_ids(), ["other"]);
    let outputs = drain(&mut core, late);
    assert!(outputs
        .iter()
        .any(|o| matches!(o, Output::KillExecutors(ids) if ids == &["stuck"])));
    assert!(outputs
        .iter()
        .any(|o| matches!(o, Output::ForgetPeer(p) if *p == stuck)));
    let expected = format!(
        "Executor's connection has taken nothing for 120001 ms (1000 bytes queued on it since it reached rpc.outbox.maxBytes {OUTBOX_LIMIT}), exceeding network.timeout (120000 ms)"
    );
    let removed = events(&outputs).find_map(|e| match e {
        SchedulerEvent::ExecutorRemoved {
            executor_id,
            reason,
        } if &**executor_id == "stuck" => Some(reason.clone()),
        _ => None,
    });
    assert!(
        removed.is_some_and(|r| r.contains(&expected)),
        "{outputs:#?}"
    );
    // The task queued to it runs elsewhere once "other" frees its core.
    assert_eq!(core.scheduler.executor_of(sent), None);
    let (_, running) = first[0];
    core.status_update(
        late,
        Some(address(2)),
        "other",
        running,
        TaskState::Finished,
        ok(b"1"),
    );
    core.flush_offers(late);
    let next = launches(&drain(&mut core, late));
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].0, other);
}

#[test]
fn an_executor_with_more_cores_than_executor_max_cores_is_refused() {
    let t0 = Instant::now();
    let config = SchedulerConfig {
        max_executor_cores: 64,
        ..SchedulerConfig::default()
    };
    let mut core = core_with(config, t0);
    assert_eq!(
        core.register_executor(t0, remote_with("greedy", 1, u32::MAX)),
        Err(
            "Executor greedy registered with 4294967295 cores, more than executor.maxCores (64)"
                .to_owned()
        )
    );
    assert_eq!(
        core.register_executor(t0, remote_with("greedy", 1, 65)),
        Err(
            "Executor greedy registered with 65 cores, more than executor.maxCores (64)".to_owned()
        )
    );
    assert_eq!(core.num_executors(), 0);
    assert_eq!(core.total_cores(), 0);
    core.register_executor(t0, remote_with("greedy", 1, 64))
        .unwrap();
    assert_eq!(core.total_cores(), 64);
}

/// An executor on a slow link takes what it is sent, slowly: however long its
/// connection stays backlogged, it is not removed while it takes bytes, and it is once
/// it stops taking them for longer than `network.timeout`.
#[test]
fn a_backlogged_executor_that_keeps_taking_bytes_is_kept_and_one_that_stops_is_not() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.register_executor(t0, remote_with("slow", 1, 1))
        .unwrap();
    core.submit(t0, TaskSet::new(0, 0, 4, noop())).unwrap();
    core.make_offers(t0);
    while let Some(output) = core.poll_output(t0) {
        if let Output::Launch { task, .. } = output {
            refuse_as_full(&mut core, t0, "slow", &task);
        }
    }
    let timeout = limits().network_timeout;
    let second = Duration::from_secs(1);
    // Ten network timeouts of a connection never empty, taking a byte a second.
    let mut now = t0;
    for written in 1..=10 * timeout.as_secs() {
        now += second;
        core.outbox_backlog(now, "slow", OUTBOX_LIMIT, written);
    }
    assert_eq!(core.executor_ids(), ["slow"], "it takes bytes: kept");
    // Then it takes nothing more.
    let stopped = now;
    let written = 10 * timeout.as_secs();
    core.outbox_backlog(stopped + timeout, "slow", OUTBOX_LIMIT, written);
    assert_eq!(core.executor_ids(), ["slow"]);
    core.outbox_backlog(stopped + timeout + second, "slow", OUTBOX_LIMIT, written);
    assert_eq!(core.executor_ids(), Vec::<String>::new(), "removed as lost");
}

/// Launches to an executor that is removed before the glue carried them out are not
/// carried out: their attempts end with its loss and run elsewhere, where sending them
/// still, on a connection left open, would run each task twice.
#[test]
fn launches_queued_to_an_executor_removed_before_they_are_sent_are_dropped() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.register_executor(t0, remote_with("gone", 1, 2))
        .unwrap();
    core.submit(t0, TaskSet::new(0, 0, 2, noop())).unwrap();
    core.make_offers(t0);
    // The launches are queued, not yet polled, when the executor is removed.
    core.remove_executor(t0, "gone", ExecutorLossReason::ExecutorKilled);
    let outputs = drain(&mut core, t0);
    assert_eq!(launches(&outputs), []);
    let lost = events(&outputs)
        .filter(|e| {
            matches!(
                e,
                SchedulerEvent::TaskEnd {
                    reason: TaskEndReason::Failed { .. },
                    ..
                }
            )
        })
        .count();
    assert_eq!(lost, 2, "both attempts end with the loss");
    let other = core
        .register_executor(t0, remote_with("other", 2, 2))
        .unwrap();
    core.offer_after_registration(t0);
    let again = launches(&drain(&mut core, t0));
    assert_eq!(
        again.iter().map(|l| l.0).collect::<Vec<_>>(),
        [other, other]
    );
}

/// An executor lost with a thousand tasks running (one that registered with many cores
/// and never ran them, say) logs "Lost task" within the log budget, not once per task:
/// the rest go to DEBUG, counted in the next warning. Every task is lost all the same.
#[test]
fn an_executor_lost_with_a_thousand_tasks_logs_them_within_the_budget() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    core.register_executor(t0, remote_with("greedy", 1, 1000))
        .unwrap();
    core.submit(t0, TaskSet::new(0, 0, 1000, noop())).unwrap();
    core.make_offers(t0);
    let mut launched = 0;
    while let Some(output) = core.poll_output(t0) {
        launched += usize::from(matches!(output, Output::Launch { .. }));
    }
    assert_eq!(launched, 1000);
    let capture = flint_testkit::logs::LogCapture::default();
    let mut lost = 0;
    capture.run(|| {
        core.remove_executor(t0, "greedy", ExecutorLossReason::ExecutorKilled);
        while let Some(output) = core.poll_output(t0) {
            lost += usize::from(matches!(
                output,
                Output::Event(SchedulerEvent::TaskEnd {
                    reason: TaskEndReason::Failed { .. },
                    ..
                })
            ));
        }
    });
    assert_eq!(lost, 1000, "each running task is lost");
    let budget = flint_rpc::log_budget::PEER_LINES_PER_WINDOW as usize;
    assert_eq!(capture.count(tracing::Level::WARN, "Lost task"), budget);
    assert_eq!(
        capture.count(tracing::Level::DEBUG, "Lost task"),
        1000 - budget
    );
}

/// A peer that registers executor after executor, each lost in turn, makes the driver
/// log "Lost executor" within the log budget: the rest at DEBUG.
#[test]
fn executors_lost_one_after_another_are_logged_within_the_budget() {
    let t0 = Instant::now();
    let mut core = core(0.0, Duration::from_secs(30), t0);
    let capture = flint_testkit::logs::LogCapture::default();
    capture.run(|| {
        for i in 0..100u16 {
            let id = format!("e{i}");
            core.register_executor(t0, remote_with(&id, 1000 + i, 1))
                .unwrap();
            core.remove_executor(
                t0,
                &id,
                ExecutorLossReason::SlaveLost {
                    message: "gone".to_owned(),
                    worker_lost: false,
                },
            );
        }
    });
    assert_eq!(core.executor_ids(), Vec::<String>::new());
    let budget = flint_rpc::log_budget::PEER_LINES_PER_WINDOW as usize;
    assert_eq!(
        capture.count(tracing::Level::ERROR, "Lost executor"),
        budget
    );
    assert_eq!(
        capture.count(tracing::Level::DEBUG, "Lost executor"),
        100 - budget
    );
}
