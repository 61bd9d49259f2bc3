//! The task scheduler's behaviours, one scenario each, with a fixed seed and a virtual
//! clock (a base `Instant` plus durations).

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{at, drain};
use flint_rpc::Conf;
use flint_scheduler::{
    Action, ExclusionPolicy, JobResult, PoolConfig, SchedulerConfig, SchedulerError,
    SchedulerEvent, SchedulerListener, SchedulingMode, SpeculationConfig, TaskEndReason,
    TaskLocality, TaskLocation, TaskResult, TaskScheduler, TaskSet, TaskSetId, TaskSpec,
    WorkerOffer, STARVATION_WARNING,
};
use flint_testkit::logs::LogCapture;
use flint_testkit::outcome::{failed, fetch_failed, ok};
use flint_wire::{BlockId, ExecutorLossReason, TaskOutcome, TaskState};
use tracing::Level;

fn payload() -> Bytes {
    Bytes::from_static(b"task-function")
}

fn config() -> SchedulerConfig {
    SchedulerConfig {
        seed: 7,
        ..SchedulerConfig::default()
    }
}

fn id(stage_id: u32, stage_attempt_id: u32) -> TaskSetId {
    TaskSetId {
        stage_id,
        stage_attempt_id,
    }
}

fn launched_ids(launched: &[Vec<flint_wire::TaskDescription>]) -> Vec<u64> {
    let mut ids: Vec<u64> = launched.iter().flatten().map(|t| t.task_id).collect();
    ids.sort_unstable();
    ids
}

fn slave_lost() -> ExecutorLossReason {
    ExecutorLossReason::SlaveLost {
        message: "Remote RPC client disassociated.".into(),
        worker_lost: false,
    }
}

#[test]
fn submit_registers_and_refuses_a_second_active_task_set_for_a_stage() {
    let logs = LogCapture::default();
    logs.run(|| {
        let base = Instant::now();
        let mut s = TaskScheduler::new(config());
        s.submit_tasks(base, TaskSet::new(0, 1, 3, payload()))
            .unwrap();
        assert!(logs.contains(Level::INFO, "Adding task set 1.0 with 3 tasks"));
        assert_eq!(s.task_set(id(1, 0)).unwrap().num_tasks(), 3);

        let err = s
            .submit_tasks(base, TaskSet::new(0, 1, 2, payload()).with_attempt(1))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "more than one active taskSet for stage 1: 1.0,1.1"
        );
        assert!(matches!(
            err,
            SchedulerError::MoreThanOneActiveTaskSet { stage_id: 1, .. }
        ));
        assert!(s.task_set(id(1, 1)).is_none());
        assert!(matches!(
            s.submit_tasks(base, TaskSet::new(0, 1, 2, payload())),
            Err(SchedulerError::DuplicateTaskSet { .. })
        ));

        // Once attempt 0 is a zombie (here: cancelled), attempt 1 is welcome.
        s.cancel_tasks(1, false);
        s.submit_tasks(base, TaskSet::new(0, 1, 2, payload()).with_attempt(1))
            .unwrap();
        assert!(s.task_set(id(1, 1)).is_some());
    });
}

#[test]
fn offers_honour_task_cpus_and_the_registries_follow_launches() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(SchedulerConfig {
        task_cpus: 2,
        ..config()
    });
    s.submit_tasks(base, TaskSet::new(0, 0, 10, payload()))
        .unwrap();
    let offers = [
        WorkerOffer::new("1", "host-a", 5),
        WorkerOffer::new("2", "host-a", 1),
        WorkerOffer::new("3", "host-b", 4),
    ];
    let launched = s.resource_offers(base, &offers);
    assert_eq!(launched[0].len(), 2, "5 cores, 2 per task");
    assert_eq!(launched[1].len(), 0, "1 core is too few");
    assert_eq!(launched[2].len(), 2);
    for (offer, tasks) in offers.iter().zip(&launched) {
        for task in tasks {
            assert_eq!(task.cpus, 2);
            assert_eq!(task.executor_id, offer.executor_id);
            assert_eq!(task.serialized_task, payload());
            assert_eq!(s.executor_of(task.task_id), Some(&offer.executor_id));
            assert_eq!(s.task_set_of(task.task_id), Some(id(0, 0)));
        }
        let mut running: Vec<u64> = s.running_tasks_on(&offer.executor_id).collect();
        running.sort_unstable();
        let mut expected: Vec<u64> = tasks.iter().map(|t| t.task_id).collect();
        expected.sort_unstable();
        assert_eq!(running, expected);
    }
    assert_eq!(s.running_tasks(), 4);
    let mut on_a: Vec<&str> = s.executors_on_host("host-a").map(|e| &**e).collect();
    on_a.sort_unstable();
    assert_eq!(on_a, ["1", "2"]);
    assert_eq!(s.host_of("3").map(|h| &**h), Some("host-b"));
    assert!(s.has_executors_alive_on_host("host-b"));
    assert_eq!(launched_ids(&launched), [0, 1, 2, 3]);
    let names: Vec<String> = launched
        .iter()
        .flatten()
        .map(|t| t.name.to_string())
        .collect();
    assert!(
        names.iter().any(|n| n == "task 0.0 in stage 0.0 (TID 0)")
            || names
                .iter()
                .any(|n| n.starts_with("task 0.0 in stage 0.0 (TID "))
    );
    assert_eq!(s.default_parallelism(), 10);
}

/// Where `s` places 8 tasks on 8 executors of one core, each on its own host: the task
/// index each offer gets.
fn placement(mut s: TaskScheduler) -> Vec<u32> {
    let base = Instant::now();
    s.submit_tasks(base, TaskSet::new(0, 0, 8, payload()))
        .unwrap();
    let offers: Vec<WorkerOffer> = (0..8)
        .map(|e| WorkerOffer::new(e.to_string(), format!("h{e}"), 1))
        .collect();
    s.resource_offers(base, &offers)
        .iter()
        .map(|tasks| tasks[0].index)
        .collect()
}

#[test]
fn the_offer_shuffle_is_decided_by_the_seed() {
    let assignment =
        |seed: u64| placement(TaskScheduler::new(SchedulerConfig { seed, ..config() }));
    assert_eq!(assignment(1), assignment(1));
    assert!((2..20).any(|seed| assignment(seed) != assignment(1)));
}

#[test]
fn delay_scheduling_waits_for_locality_then_relaxes() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.executor_added("a1", "host-a", 1);
    s.executor_added("b1", "host-b", 1);
    let mut set = TaskSet::new(0, 0, 2, payload());
    set.tasks[0] = TaskSpec::new(0).with_locations(vec![TaskLocation::Executor {
        host: "host-a".into(),
        executor_id: "a1".into(),
    }]);
    set.tasks[1] = TaskSpec::new(1).with_locations(vec![TaskLocation::Host("host-a".into())]);
    s.submit_tasks(base, set).unwrap();
    assert_eq!(
        s.task_set(id(0, 0)).unwrap().locality_levels(),
        [
            TaskLocality::ProcessLocal,
            TaskLocality::NodeLocal,
            TaskLocality::Any
        ]
    );
    drain(&mut s);

    // host-b is not where the data is: nothing launches there yet.
    let launched = s.resource_offers(base, &[WorkerOffer::new("b1", "host-b", 1)]);
    assert!(launched[0].is_empty());
    // The scheduler asks to be woken when the wait ends (locality.wait, 3s).
    assert_eq!(s.poll_timeout(), Some(at(base, 3000)));

    // a1 gets task 0 process-local.
    let launched = s.resource_offers(at(base, 100), &[WorkerOffer::new("a1", "host-a", 1)]);
    assert_eq!(launched[0][0].index, 0);
    let (events, _) = drain(&mut s);
    assert!(events.iter().any(|e| matches!(
        e,
        SchedulerEvent::TaskStart {
            locality: TaskLocality::ProcessLocal,
            index: 0,
            ..
        }
    )));

    // Nothing is left to run process-local, so the task set moves to NODE_LOCAL at
    // once and waits there from now (2s) for host-a: host-b gets task 1 (ANY) at 5s.
    assert!(
        s.resource_offers(at(base, 2000), &[WorkerOffer::new("b1", "host-b", 1)])[0].is_empty()
    );
    assert_eq!(s.poll_timeout(), Some(at(base, 5000)));
    s.handle_timeout(at(base, 4999));
    assert!(!drain(&mut s).1.contains(&Action::ReviveOffers));
    s.handle_timeout(at(base, 5000));
    let (_, actions) = drain(&mut s);
    assert!(actions.contains(&Action::ReviveOffers));
    let launched = s.resource_offers(at(base, 5000), &[WorkerOffer::new("b1", "host-b", 1)]);
    assert_eq!(launched[0][0].index, 1);
    let (events, _) = drain(&mut s);
    assert!(events.iter().any(|e| matches!(
        e,
        SchedulerEvent::TaskStart {
            locality: TaskLocality::Any,
            index: 1,
            ..
        }
    )));
}

#[test]
fn a_host_said_to_be_in_a_task_s_rack_after_its_submission_gives_it_a_rack_level() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.set_rack("host-a", "rack-1");
    s.executor_added("c1", "host-c", 1);
    let mut set = TaskSet::new(0, 0, 1, payload());
    set.tasks[0] = TaskSpec::new(0).with_locations(vec![TaskLocation::Host("host-a".into())]);
    s.submit_tasks(base, set).unwrap();
    // host-a has no executor and rack-1 no live host yet.
    let levels = s.task_set(id(0, 0)).unwrap().locality_levels().to_vec();
    assert_eq!(levels, [TaskLocality::Any]);
    s.set_rack("host-c", "rack-1");
    let levels = s.task_set(id(0, 0)).unwrap().locality_levels().to_vec();
    assert_eq!(levels, [TaskLocality::RackLocal, TaskLocality::Any]);
}

#[test]
fn rack_local_comes_before_any() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.set_rack("host-a", "rack-1");
    s.set_rack("host-c", "rack-1");
    s.executor_added("a1", "host-a", 1);
    s.executor_added("c1", "host-c", 1);
    let mut set = TaskSet::new(0, 0, 1, payload());
    set.tasks[0] = TaskSpec::new(0).with_locations(vec![TaskLocation::Host("host-a".into())]);
    s.submit_tasks(base, set).unwrap();
    assert!(s.has_host_alive_on_rack("rack-1"));
    assert_eq!(
        s.task_set(id(0, 0)).unwrap().locality_levels(),
        [
            TaskLocality::NodeLocal,
            TaskLocality::RackLocal,
            TaskLocality::Any
        ]
    );
    drain(&mut s);
    assert!(s.resource_offers(base, &[WorkerOffer::new("c1", "host-c", 1)])[0].is_empty());
    let launched = s.resource_offers(at(base, 3000), &[WorkerOffer::new("c1", "host-c", 1)]);
    assert_eq!(launched[0].len(), 1);
    let (events, _) = drain(&mut s);
    assert!(events.iter().any(|e| matches!(
        e,
        SchedulerEvent::TaskStart {
            locality: TaskLocality::RackLocal,
            ..
        }
    )));
}

#[test]
fn status_updates_record_results_retry_failures_and_ignore_unknown_tasks() {
    let logs = LogCapture::default();
    logs.run(|| {
        let base = Instant::now();
        let mut s = TaskScheduler::new(config());
        s.submit_tasks(base, TaskSet::new(3, 0, 2, payload())).unwrap();
        let launched = s.resource_offers(base, &[WorkerOffer::new("1", "h", 2)]);
        let (t0, t1) = (launched[0][0].task_id, launched[0][1].task_id);
        drain(&mut s);

        s.status_update(at(base, 10), t0, TaskState::Running, TaskOutcome::None);
        assert_eq!(s.running_tasks(), 2);
        s.status_update(at(base, 20), t0, TaskState::Finished, ok(b"zero"));
        let (events, _) = drain(&mut s);
        assert!(events.iter().any(|e| matches!(e,
            SchedulerEvent::TaskEnd { task_id, reason: TaskEndReason::Success(TaskResult::Direct { value, .. }), duration, .. }
                if *task_id == t0 && value == &Bytes::from_static(b"zero") && *duration == Duration::from_millis(20))));

        // A duplicate report finds no task set entry for the task.
        s.status_update(at(base, 30), t0, TaskState::Finished, ok(b"zero"));
        assert!(logs.contains(
            Level::ERROR,
            &format!("Ignoring update with state FINISHED for TID {t0} because its task set is gone (this is likely the result of receiving duplicate task finished status updates)")
        ));

        // A failure makes the task pending again and asks for offers.
        s.status_update(at(base, 40), t1, TaskState::Failed, failed("boom"));
        let (events, actions) = drain(&mut s);
        assert!(actions.contains(&Action::ReviveOffers));
        assert!(events.iter().any(|e| matches!(e, SchedulerEvent::TaskEnd { reason: TaskEndReason::Failed { counted: true, .. }, .. })));
        assert_eq!(s.task_set(id(0, 0)).unwrap().task_failures(1), 1);
        let retry = s.resource_offers(at(base, 50), &[WorkerOffer::new("2", "h2", 1)]);
        assert_eq!((retry[0][0].index, retry[0][0].attempt_number), (1, 1));
        s.status_update(at(base, 60), retry[0][0].task_id, TaskState::Finished, ok(b"one"));
        let (events, _) = drain(&mut s);
        assert!(events.iter().any(|e| matches!(e, SchedulerEvent::StageCompleted { failure: None, .. })));
        assert!(events.contains(&SchedulerEvent::JobEnd { job_id: 3, result: JobResult::Succeeded }));
        assert!(logs.contains(
            Level::INFO,
            "Removed TaskSet 0.0, whose tasks have all completed, from pool "
        ));
        assert!(s.task_set(id(0, 0)).is_none());
    });
}

#[test]
fn a_lost_task_marks_its_executor_lost() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.submit_tasks(base, TaskSet::new(0, 0, 2, payload()))
        .unwrap();
    let launched = s.resource_offers(base, &[WorkerOffer::new("1", "h", 2)]);
    drain(&mut s);
    s.status_update(
        at(base, 5),
        launched[0][0].task_id,
        TaskState::Lost,
        TaskOutcome::None,
    );
    assert!(!s.is_executor_alive("1"));
    assert_eq!(s.running_tasks(), 0);
    let (events, actions) = drain(&mut s);
    assert!(actions.contains(&Action::ReviveOffers));
    assert!(events.iter().any(|e| matches!(e, SchedulerEvent::ExecutorRemoved { executor_id, reason }
        if &**executor_id == "1" && reason.contains("was lost, so marking the executor as lost as well."))));
    // Both count as failures of the tasks, as in Spark (a lost executor may be the
    // task's doing).
    let set = s.task_set(id(0, 0)).unwrap();
    assert_eq!((set.task_failures(0), set.task_failures(1)), (1, 1));
}

#[test]
fn executor_loss_requeues_its_tasks_and_counts_unless_the_driver_or_the_cluster_says_otherwise() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(SchedulerConfig {
        max_task_failures: 2,
        ..config()
    });
    s.submit_tasks(base, TaskSet::new(0, 0, 1, payload()))
        .unwrap();
    // Lost ten times to causes known to be outside the app: never aborted.
    let not_the_app = [
        ExecutorLossReason::ExecutorKilled,
        ExecutorLossReason::ExecutorExited {
            exit_code: 143,
            exit_caused_by_app: false,
            reason: "preempted".into(),
        },
        ExecutorLossReason::ExecutorDecommission {
            message: "scale down".into(),
        },
    ];
    for round in 0..10u64 {
        let executor = format!("e{round}");
        let launched = s.resource_offers(
            at(base, round),
            &[WorkerOffer::new(executor.as_str(), "h", 1)],
        );
        assert_eq!(launched[0].len(), 1, "round {round}");
        let reason = not_the_app[round as usize % not_the_app.len()].clone();
        s.executor_lost(at(base, round), &executor, reason);
        assert!(!s.executor_heartbeat_received("x", Vec::new()));
        assert!(!s.executor_heartbeat_received(&executor, Vec::new()));
    }
    assert!(!s.task_set(id(0, 0)).unwrap().is_zombie());
    assert_eq!(s.task_set(id(0, 0)).unwrap().task_failures(0), 0);
    drain(&mut s);

    // Lost to a disconnection (which may be the task's doing, as a crash), then to an
    // exit the app caused: aborted at task.maxFailures = 2.
    let app_exit = ExecutorLossReason::ExecutorExited {
        exit_code: 52,
        exit_caused_by_app: true,
        reason: "OOM".into(),
    };
    for (round, reason) in [(10u64, slave_lost()), (11, app_exit)] {
        let executor = format!("e{round}");
        let launched = s.resource_offers(
            at(base, round),
            &[WorkerOffer::new(executor.as_str(), format!("h{round}"), 1)],
        );
        assert_eq!(launched[0].len(), 1);
        s.executor_lost(at(base, round), &executor, reason);
    }
    let (events, _) = drain(&mut s);
    let failure = events
        .iter()
        .find_map(|e| match e {
            SchedulerEvent::StageCompleted {
                failure: Some(f), ..
            } => Some(f.clone()),
            _ => None,
        })
        .expect("aborted");
    assert!(failure.starts_with("Task 0 in stage 0.0 failed 2 times, most recent failure: Lost task 0.11 in stage 0.0 (TID 11, h11, executor e11): ExecutorLostFailure (executor e11 exited caused by one of the running tasks) Reason: OOM"), "{failure}");

    // Losing an unknown executor again is only logged.
    s.executor_lost(base, "e11", slave_lost());
}

#[test]
fn running_tasks_per_executor_follow_launches_ends_and_losses() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.submit_tasks(base, TaskSet::new(0, 0, 10, payload()))
        .unwrap();
    let launched = s.resource_offers(
        base,
        &[
            WorkerOffer::new("1", "host-a", 3),
            WorkerOffer::new("2", "host-b", 2),
        ],
    );
    let on = |s: &TaskScheduler, e: &str| s.running_tasks_on(e).collect::<Vec<u64>>();
    let ids = |tasks: &[flint_wire::TaskDescription]| {
        let mut ids: Vec<u64> = tasks.iter().map(|t| t.task_id).collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(on(&s, "1"), ids(&launched[0]), "in id order");
    assert_eq!(on(&s, "2"), ids(&launched[1]));
    assert_eq!(s.running_task_count_on("1"), 3);
    assert_eq!(s.running_task_count_on("2"), 2);
    assert_eq!(s.running_task_count_on("nobody"), 0);
    assert!(on(&s, "nobody").is_empty());

    // A task of executor 1 ends: the other two stay, in order.
    let ended = ids(&launched[0])[1];
    s.status_update(base, ended, TaskState::Finished, ok(b"x"));
    let mut left = ids(&launched[0]);
    left.remove(1);
    assert_eq!(on(&s, "1"), left);
    assert_eq!(s.running_task_count_on("1"), 2);

    // Executor 1 is lost: it runs nothing, and its tasks are pending again.
    s.executor_lost(base, "1", slave_lost());
    assert!(on(&s, "1").is_empty());
    assert_eq!(s.running_task_count_on("1"), 0);
    assert_eq!(s.running_tasks(), 2);
    // A new executor (taking executor 1's place in the registry) starts with none of
    // executor 1's tasks; executor 2's are untouched.
    s.executor_added("3", "host-c", 4);
    assert!(on(&s, "3").is_empty());
    let launched3 = s.resource_offers(base, &[WorkerOffer::new("3", "host-c", 4)]);
    assert_eq!(launched3[0].len(), 4);
    assert_eq!(on(&s, "3"), ids(&launched3[0]));
    assert_eq!(on(&s, "2"), ids(&launched[1]));
    // The same name registering again is a new executor, with no tasks.
    s.executor_added("1", "host-a", 1);
    assert!(on(&s, "1").is_empty());
    assert_eq!(s.running_tasks(), 6);
}

#[test]
fn a_task_failing_max_failures_times_aborts_its_task_set_with_spark_s_message() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(SchedulerConfig {
        exclusion: ExclusionPolicy::disabled(),
        ..config()
    });
    s.submit_tasks(base, TaskSet::new(4, 1, 4, payload()))
        .unwrap();
    let offer = [WorkerOffer::new("2", "host", 4)];
    let launched = s.resource_offers(base, &offer);
    let task3 = launched[0].iter().find(|t| t.index == 3).unwrap().task_id;
    s.status_update(
        base,
        task3,
        TaskState::Failed,
        failed("java.lang.Error: bad input"),
    );
    let mut last = 0;
    for attempt in 1..4 {
        let retry = s.resource_offers(at(base, attempt), &offer);
        assert_eq!(retry[0].len(), 1);
        assert_eq!(
            (retry[0][0].index, retry[0][0].attempt_number),
            (3, attempt as u32)
        );
        last = retry[0][0].task_id;
        s.status_update(
            at(base, attempt),
            last,
            TaskState::Failed,
            failed("java.lang.Error: bad input"),
        );
    }
    let set = s.task_set(id(1, 0)).unwrap();
    assert!(set.is_zombie());
    let expected = format!("Task 3 in stage 1.0 failed 4 times, most recent failure: Lost task 3.3 in stage 1.0 (TID {last}, host, executor 2): java.lang.Error: bad input");
    assert_eq!(set.failure(), Some(expected.as_str()));
    let (events, actions) = drain(&mut s);
    assert!(events.contains(&SchedulerEvent::JobEnd {
        job_id: 4,
        result: JobResult::Failed(expected.clone())
    }));
    // The other three attempts are killed.
    let kills = actions
        .iter()
        .filter(|a| matches!(a, Action::KillTask { reason, .. } if reason == "Stage cancelled"))
        .count();
    assert_eq!(kills, 3);
    // Nothing more launches.
    assert!(s.resource_offers(at(base, 9), &offer)[0].is_empty());
}

/// A speculating scheduler with `tasks` tasks launched on executor "1" of host-a at
/// `base`, of which indexes 0 to 2 finished at one second; returns the task id of each
/// index.
fn with_a_straggler(tasks: u32) -> (Instant, TaskScheduler, Vec<u64>) {
    let base = Instant::now();
    let mut s = TaskScheduler::new(SchedulerConfig {
        speculation: Some(SpeculationConfig::default()),
        ..config()
    });
    s.submit_tasks(base, TaskSet::new(0, 0, tasks, payload()))
        .unwrap();
    let launched = s.resource_offers(base, &[WorkerOffer::new("1", "host-a", tasks)]);
    let mut ids: Vec<(u32, u64)> = launched[0].iter().map(|t| (t.index, t.task_id)).collect();
    ids.sort_unstable();
    let ids: Vec<u64> = ids.into_iter().map(|(_, id)| id).collect();
    for &task_id in &ids[..3] {
        s.status_update(at(base, 1000), task_id, TaskState::Finished, ok(b"fast"));
    }
    (base, s, ids)
}

#[test]
fn a_speculative_copy_avoids_the_host_of_the_attempt_that_runs_now() {
    let (base, mut s, ids) = with_a_straggler(4);
    drain(&mut s);
    s.handle_timeout(at(base, 1600));
    assert!(drain(&mut s).1.contains(&Action::ReviveOffers));
    // The marked attempt (on host-a) fails before it gets a copy; the task runs again, on
    // host-b.
    s.status_update(at(base, 1650), ids[3], TaskState::Failed, failed("boom"));
    let again = s.resource_offers(at(base, 1700), &[WorkerOffer::new("2", "host-b", 1)]);
    assert_eq!((again[0][0].index, again[0][0].attempt_number), (3, 1));
    // Its old mark named host-a: it must not put a copy beside the new attempt.
    let copy = s.resource_offers(at(base, 1700), &[WorkerOffer::new("3", "host-b", 1)]);
    assert!(copy[0].is_empty(), "{copy:?}");
    // Once the new attempt runs slow, its copy avoids host-b, where it runs, and host-a,
    // where the task failed (Spark's hasAttemptOnHost).
    s.handle_timeout(at(base, 3300));
    assert!(drain(&mut s).1.contains(&Action::ReviveOffers));
    let copy = s.resource_offers(at(base, 3300), &[WorkerOffer::new("4", "host-a", 1)]);
    assert!(copy[0].is_empty(), "{copy:?}");
    let copy = s.resource_offers(at(base, 3300), &[WorkerOffer::new("5", "host-c", 1)]);
    assert_eq!((copy[0][0].index, copy[0][0].attempt_number), (3, 2));
}

#[test]
fn speculation_copies_a_straggler_and_the_first_success_wins() {
    let (base, mut s, ids) = with_a_straggler(4);
    let by_index = |i: u32| ids[i as usize];
    drain(&mut s);
    // Median 1s, multiplier 1.5: at 1.4s task 3 is not yet slow, at 1.6s it is.
    assert_eq!(s.poll_timeout(), Some(at(base, 100)));
    s.handle_timeout(at(base, 1400));
    assert!(!drain(&mut s).1.contains(&Action::ReviveOffers));
    s.handle_timeout(at(base, 1600));
    assert!(drain(&mut s).1.contains(&Action::ReviveOffers));

    // Not on the straggler's own host; on another host, a speculative copy.
    assert!(s.resource_offers(at(base, 1600), &[WorkerOffer::new("2", "host-a", 1)])[0].is_empty());
    let copy = s.resource_offers(at(base, 1600), &[WorkerOffer::new("3", "host-b", 1)]);
    let copy = &copy[0][0];
    assert_eq!((copy.index, copy.attempt_number), (3, 1));
    let (events, _) = drain(&mut s);
    assert!(events.iter().any(|e| matches!(
        e,
        SchedulerEvent::TaskStart {
            speculative: true,
            index: 3,
            // A task without preferences: its copy launches PROCESS_LOCAL, as in Spark.
            locality: TaskLocality::ProcessLocal,
            ..
        }
    )));

    // The copy finishes first: the original is killed, and its late success ignored.
    s.status_update(
        at(base, 1700),
        copy.task_id,
        TaskState::Finished,
        ok(b"copy"),
    );
    let (events, actions) = drain(&mut s);
    assert!(actions.contains(&Action::KillTask {
        task_id: by_index(3),
        executor_id: "1".into(),
        interrupt_thread: true,
        reason: "another attempt succeeded".into(),
    }));
    assert!(events.contains(&SchedulerEvent::JobEnd {
        job_id: 0,
        result: JobResult::Succeeded
    }));
    s.status_update(
        at(base, 1800),
        by_index(3),
        TaskState::Finished,
        ok(b"late"),
    );
    let (events, _) = drain(&mut s);
    let results: Vec<_> = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                SchedulerEvent::TaskEnd {
                    reason: TaskEndReason::Success(_),
                    ..
                }
            )
        })
        .collect();
    assert!(
        results.is_empty(),
        "the late success records nothing: {events:?}"
    );
    assert!(events.iter().any(|e| matches!(
        e,
        SchedulerEvent::TaskEnd {
            reason: TaskEndReason::AlreadySucceeded,
            ..
        }
    )));
    assert_eq!(s.task_sets().count(), 0);
}

/// Once a task set ended, its stage attempt is free for a new task set, though a killed
/// copy of it still runs (as in the seeds, whose registry entry is overwritten); an
/// active one is still refused. The old copy's late report ends the old task set and
/// leaves the new one registered.
#[test]
fn a_task_set_that_ended_gives_its_stage_attempt_to_a_new_one_though_a_copy_still_runs() {
    let (base, mut s, ids) = with_a_straggler(4);
    s.handle_timeout(at(base, 1600));
    drain(&mut s);
    let copy = s.resource_offers(at(base, 1600), &[WorkerOffer::new("2", "host-b", 1)]);
    let copy = copy[0][0].clone();
    // The copy wins: the task set ends, its original (task 3 on host-a) killed.
    s.status_update(
        at(base, 1700),
        copy.task_id,
        TaskState::Finished,
        ok(b"copy"),
    );
    drain(&mut s);
    assert_eq!(
        s.task_sets().count(),
        1,
        "the old one waits for its original"
    );
    s.submit_tasks(at(base, 1700), TaskSet::new(0, 0, 2, payload()))
        .expect("the ended task set's stage attempt is free");
    assert!(matches!(
        s.submit_tasks(at(base, 1700), TaskSet::new(0, 0, 2, payload())),
        Err(SchedulerError::DuplicateTaskSet { .. })
    ));
    assert_eq!(s.task_set(id(0, 0)).unwrap().num_tasks(), 2);
    // The killed original reports: the old task set is gone, the new one stays.
    s.status_update(at(base, 1800), ids[3], TaskState::Killed, ok(b""));
    assert_eq!(s.task_sets().count(), 1);
    assert_eq!(s.task_set(id(0, 0)).unwrap().num_tasks(), 2);
    let launched = s.resource_offers(at(base, 1800), &[WorkerOffer::new("2", "host-b", 2)]);
    assert_eq!(launched[0].len(), 2, "the new task set launches");
    for task in &launched[0] {
        assert!(task.task_id > copy.task_id);
        s.status_update(
            at(base, 1900),
            task.task_id,
            TaskState::Finished,
            ok(b"new"),
        );
    }
    let (events, _) = drain(&mut s);
    assert!(events.iter().any(|e| matches!(
        e,
        SchedulerEvent::StageCompleted { task_set, failure: None, .. } if *task_set == id(0, 0)
    )));
    assert_eq!(s.task_sets().count(), 0);
}

/// Cancelling a stage reaches also a task set whose stage attempt a newer one took: the
/// attempts of a task set ended by a fetch failure are not killed, and still run.
#[test]
fn cancelling_a_stage_kills_the_attempts_of_a_task_set_replaced_under_its_id() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.submit_tasks(base, TaskSet::new(0, 0, 2, payload()))
        .unwrap();
    let launched = s.resource_offers(base, &[WorkerOffer::new("1", "host-a", 2)]);
    let (first, second) = (launched[0][0].task_id, launched[0][1].task_id);
    let fetch_failed = fetch_failed(flint_wire::FetchFailure {
        address: None,
        shuffle_id: 0,
        map_index: None,
        reduce_id: 0,
        message: "gone".into(),
    });
    s.status_update(at(base, 10), first, TaskState::Failed, fetch_failed);
    let (_, actions) = drain(&mut s);
    assert!(
        !actions.iter().any(|a| matches!(a, Action::KillTask { .. })),
        "a fetch failure kills nothing: {actions:?}"
    );
    s.submit_tasks(at(base, 20), TaskSet::new(0, 0, 1, payload()))
        .expect("the ended task set's stage attempt is free");
    let newer = s.resource_offers(at(base, 20), &[WorkerOffer::new("2", "host-b", 1)]);
    let newer = newer[0][0].task_id;
    drain(&mut s);
    s.cancel_tasks(0, true);
    let (_, actions) = drain(&mut s);
    let mut killed: Vec<u64> = actions
        .iter()
        .filter_map(|a| match a {
            Action::KillTask { task_id, .. } => Some(*task_id),
            _ => None,
        })
        .collect();
    killed.sort_unstable();
    assert_eq!(killed, [second, newer]);
}

#[test]
fn a_killed_copy_of_a_task_that_already_succeeded_revives_no_offers() {
    let (base, mut s, ids) = with_a_straggler(5);
    let by_index = |i: u32| ids[i as usize];
    s.handle_timeout(at(base, 1600));
    drain(&mut s);
    let copy = s.resource_offers(at(base, 1600), &[WorkerOffer::new("2", "host-b", 1)]);
    let copy = copy[0][0].clone();
    assert_eq!((copy.index, copy.attempt_number), (3, 1));
    s.status_update(
        at(base, 1700),
        copy.task_id,
        TaskState::Finished,
        ok(b"copy"),
    );
    let (_, actions) = drain(&mut s);
    assert!(actions
        .iter()
        .any(|a| matches!(a, Action::KillTask { task_id, .. } if *task_id == by_index(3))));

    // The original is killed: nothing is pending again, so no offers are asked for,
    // while task 4 still runs (the task set is no zombie).
    s.status_update(
        at(base, 1710),
        by_index(3),
        TaskState::Killed,
        TaskOutcome::None,
    );
    let (_, actions) = drain(&mut s);
    assert!(!actions.contains(&Action::ReviveOffers), "{actions:?}");
    assert!(!s.task_set(id(0, 0)).unwrap().is_zombie());
    // A failure of a task still needed asks for offers.
    s.status_update(
        at(base, 1720),
        by_index(4),
        TaskState::Failed,
        failed("bad"),
    );
    assert!(drain(&mut s).1.contains(&Action::ReviveOffers));
}

#[test]
fn executor_losses_are_logged_by_their_reason() {
    let logs = LogCapture::default();
    logs.run(|| {
        let base = Instant::now();
        let mut s = TaskScheduler::new(config());
        for e in ["1", "2", "3"] {
            s.executor_added(e, "host-a", 1);
        }
        s.executor_lost(base, "1", ExecutorLossReason::ExecutorKilled);
        s.executor_lost(base, "2", ExecutorLossReason::LossReasonPending);
        s.executor_lost(base, "3", slave_lost());
        assert!(logs.contains(Level::INFO, "Executor 1 on host-a killed by driver."));
        assert!(logs.contains(
            Level::DEBUG,
            "Executor 2 on host-a lost, but reason not yet known."
        ));
        assert!(logs.contains(
            Level::ERROR,
            "Lost executor 3 on host-a: Remote RPC client disassociated."
        ));
        assert_eq!(
            logs.count(Level::ERROR, "Lost executor"),
            1,
            "{}",
            logs.dump()
        );
    });
}

#[test]
fn starvation_is_warned_every_timeout_until_a_task_launches() {
    let logs = LogCapture::default();
    logs.run(|| {
        let base = Instant::now();
        let mut s = TaskScheduler::new(config());
        assert_eq!(s.poll_timeout(), None);
        s.submit_tasks(base, TaskSet::new(0, 0, 1, payload())).unwrap();
        assert_eq!(s.poll_timeout(), Some(at(base, 15_000)));
        s.handle_timeout(at(base, 14_999));
        assert_eq!(logs.count(Level::WARN, STARVATION_WARNING), 0);
        s.handle_timeout(at(base, 15_000));
        assert_eq!(logs.count(Level::WARN, STARVATION_WARNING), 1);
        assert_eq!(s.poll_timeout(), Some(at(base, 30_000)));
        s.handle_timeout(at(base, 30_000));
        assert_eq!(logs.count(Level::WARN, STARVATION_WARNING), 2);
        assert!(STARVATION_WARNING.starts_with("Initial job has not accepted any resources; check your cluster UI to ensure that workers are registered and have sufficient resources"));

        s.resource_offers(at(base, 31_000), &[WorkerOffer::new("1", "h", 1)]);
        assert!(s.has_launched_task());
        assert_eq!(s.poll_timeout(), None);
        s.handle_timeout(at(base, 45_000));
        assert_eq!(logs.count(Level::WARN, STARVATION_WARNING), 2);
    });
}

#[test]
fn failures_exclude_executors_and_a_task_set_nowhere_runnable_is_aborted() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(SchedulerConfig {
        exclusion: ExclusionPolicy::default(),
        ..config()
    });
    s.submit_tasks(base, TaskSet::new(0, 0, 3, payload()))
        .unwrap();
    let e1 = WorkerOffer::new("1", "host-a", 1);
    let e2 = WorkerOffer::new("2", "host-b", 1);
    // Task 0 fails on executor 1: it is not retried there, but other tasks are.
    let t = s.resource_offers(base, std::slice::from_ref(&e1))[0][0].clone();
    assert_eq!(t.index, 0);
    s.status_update(base, t.task_id, TaskState::Failed, failed("bad"));
    let set = s.task_set(id(0, 0)).unwrap();
    assert!(set.is_task_excluded(0, "1", "host-a"));
    assert!(!set.is_excluded("1", "host-a"));
    let t = s.resource_offers(base, std::slice::from_ref(&e1))[0][0].clone();
    assert_eq!(t.index, 1, "task 0 may not run on executor 1 again");
    // A second task fails there: executor 1 gets none of the task set's tasks.
    s.status_update(base, t.task_id, TaskState::Failed, failed("bad"));
    assert!(s.task_set(id(0, 0)).unwrap().is_excluded("1", "host-a"));
    drain(&mut s);
    // Executor 2 lives and may run them: no abort while it does.
    s.executor_added(e2.executor_id.clone(), e2.host.clone(), 1);
    assert!(s.resource_offers(base, std::slice::from_ref(&e1))[0].is_empty());
    assert!(!s.task_set(id(0, 0)).unwrap().is_zombie());
    // Without executor 2 no live executor may run task 0: aborted.
    s.executor_lost(base, "2", slave_lost());
    assert!(s.resource_offers(base, std::slice::from_ref(&e1))[0].is_empty());
    let set = s.task_set(id(0, 0));
    let failure = set.and_then(|t| t.failure()).map(str::to_owned);
    let (events, _) = drain(&mut s);
    let failure = failure.or_else(|| {
        events.iter().find_map(|e| match e {
            SchedulerEvent::StageCompleted { failure, .. } => failure.clone(),
            _ => None,
        })
    });
    let failure = failure.expect("aborted");
    assert!(
        failure.starts_with("Aborting TaskSet 0.0 because task "),
        "{failure}"
    );
    assert!(
        failure.contains("cannot run anywhere due to node and executor exclusion"),
        "{failure}"
    );
}

/// As in Spark, NO_PREF is no level to wait at: a no-pref task that may not run on an
/// executor does not hold back, for locality.wait, a task that needs ANY.
#[test]
fn a_pending_no_pref_task_does_not_hold_back_a_task_that_needs_any() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(SchedulerConfig {
        exclusion: ExclusionPolicy::default(),
        ..config()
    });
    s.executor_added("1", "host-a", 1);
    let mut set = TaskSet::new(0, 0, 2, payload());
    set.tasks[1] = TaskSpec::new(1).with_locations(vec![TaskLocation::Host("host-x".into())]);
    s.submit_tasks(base, set).unwrap();
    assert_eq!(
        s.task_set(id(0, 0)).unwrap().locality_levels(),
        [TaskLocality::NoPref, TaskLocality::Any]
    );
    let e1 = WorkerOffer::new("1", "host-a", 1);
    let t = s.resource_offers(base, std::slice::from_ref(&e1))[0][0].clone();
    assert_eq!(t.index, 0, "no-pref tasks come first");
    s.status_update(base, t.task_id, TaskState::Failed, failed("bad"));
    assert!(s
        .task_set(id(0, 0))
        .unwrap()
        .is_task_excluded(0, "1", "host-a"));
    // Task 0 is pending again but may not run here; task 1 runs at once.
    let launched = s.resource_offers(base, std::slice::from_ref(&e1));
    assert_eq!(launched[0].len(), 1);
    assert_eq!(launched[0][0].index, 1);
}

#[test]
fn fifo_runs_jobs_then_stages_in_order() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.submit_tasks(base, TaskSet::new(1, 5, 2, payload()))
        .unwrap();
    s.submit_tasks(base, TaskSet::new(0, 7, 2, payload()))
        .unwrap();
    s.submit_tasks(base, TaskSet::new(0, 6, 2, payload()))
        .unwrap();
    let launched = s.resource_offers(base, &[WorkerOffer::new("1", "h", 3)]);
    let stages: Vec<String> = launched[0].iter().map(|t| t.name.to_string()).collect();
    assert!(
        stages[0].contains("in stage 6.0") && stages[1].contains("in stage 6.0"),
        "{stages:?}"
    );
    assert!(stages[2].contains("in stage 7.0"), "{stages:?}");
}

#[test]
fn fair_pools_share_by_min_share_then_weight() {
    let logs = LogCapture::default();
    logs.run(|| {
        let base = Instant::now();
        let mut s = TaskScheduler::new(SchedulerConfig {
            mode: SchedulingMode::Fair,
            ..config()
        });
        s.add_pools_file("pool big weight=3\npool small minShare=2\n").unwrap();
        s.submit_tasks(base, TaskSet::new(0, 0, 20, payload()).in_pool("big")).unwrap();
        s.submit_tasks(base, TaskSet::new(1, 1, 20, payload()).in_pool("small")).unwrap();
        // One core at a time: small first until it has its minShare of 2, then by
        // running/weight (big gets 3 for each of small's 1), ties to the name: at 6 and
        // 2 both are at 2.0 and "big" < "small".
        let mut pools = Vec::new();
        for step in 0..10 {
            let launched = s.resource_offers(at(base, step), &[WorkerOffer::new(step.to_string(), "h", 1)]);
            let stage = launched[0][0].name.to_string().contains("in stage 1.0");
            pools.push(if stage { "small" } else { "big" });
        }
        assert_eq!(
            pools,
            ["small", "small", "big", "big", "big", "big", "big", "big", "big", "small"]
        );

        // An unknown pool is created with the defaults, and says so.
        s.submit_tasks(base, TaskSet::new(2, 2, 1, payload()).in_pool("adhoc")).unwrap();
        assert!(logs.contains(Level::WARN, "A job was submitted with scheduler pool adhoc, which has not been configured."));
        let mut names: Vec<&str> = s.pools().map(|p| &*p.name).collect();
        names.sort_unstable();
        assert_eq!(names, ["adhoc", "big", "default", "small"]);
        s.add_pool(PoolConfig { weight: 5, ..PoolConfig::new("adhoc") });
        assert_eq!(s.pools().find(|p| &*p.name == "adhoc").unwrap().weight, 5);
        assert!(matches!(s.add_pools_file("pool x\npool"), Err(SchedulerError::PoolsFile(e)) if e.line == 2));
    });
}

#[test]
fn conf_keys_configure_the_scheduler_and_an_unknown_mode_is_refused() {
    let conf = Conf::from_pairs(["spark.scheduler.mode=LIFO"]).unwrap();
    let err = TaskScheduler::from_conf(&conf).unwrap_err();
    assert_eq!(err.to_string(), "Unrecognized scheduler.mode: LIFO");

    let conf = Conf::from_pairs([
        "scheduler.mode=fair",
        "task.cpus=2",
        "task.maxFailures=8",
        "locality.wait=0",
        "speculation=true",
        "speculation.multiplier=3",
        "default.parallelism=12",
    ])
    .unwrap();
    let s = TaskScheduler::from_conf(&conf).unwrap();
    let c = s.config();
    assert_eq!(s.scheduling_mode(), SchedulingMode::Fair);
    assert_eq!((c.task_cpus, c.max_task_failures), (2, 8));
    assert_eq!(c.locality_wait, Duration::ZERO);
    assert_eq!(c.speculation.unwrap().multiplier, 3.0);
    assert_eq!(s.default_parallelism(), 12);
    let defaults = TaskScheduler::from_conf(&Conf::new()).unwrap();
    assert_eq!(
        defaults.config(),
        &SchedulerConfig {
            seed: defaults.config().seed,
            ..SchedulerConfig::default()
        }
    );
    assert_eq!(defaults.default_parallelism(), 2);
}

#[test]
fn drivers_shuffle_offers_with_their_own_seed_unless_one_is_configured() {
    // Without scheduler.offerShuffleSeed every scheduler built from a conf draws its own
    // seed (two equal draws of 64 random bits would take longer than this test suite
    // will ever run).
    let seeds: Vec<u64> = (0..4)
        .map(|_| {
            TaskScheduler::from_conf(&Conf::new())
                .unwrap()
                .config()
                .seed
        })
        .collect();
    for (i, a) in seeds.iter().enumerate() {
        for b in &seeds[i + 1..] {
            assert_ne!(a, b, "{seeds:?}");
        }
    }

    // A configured seed replays the placement of a scheduler given that seed directly.
    let conf = Conf::from_pairs(["spark.scheduler.offerShuffleSeed=12345"]).unwrap();
    let configured = TaskScheduler::from_conf(&conf).unwrap();
    assert_eq!(configured.config().seed, 12345);
    assert_eq!(
        placement(configured),
        placement(TaskScheduler::new(SchedulerConfig {
            seed: 12345,
            ..config()
        }))
    );
    let conf = Conf::from_pairs(["scheduler.offerShuffleSeed=-3"]).unwrap();
    let err = TaskScheduler::from_conf(&conf).unwrap_err().to_string();
    assert!(
        err.contains("scheduler.offerShuffleSeed") && err.contains("-3"),
        "{err}"
    );
}

#[test]
fn cancel_kill_worker_removed_and_heartbeats() {
    let logs = LogCapture::default();
    logs.run(|| {
        let base = Instant::now();
        let mut s = TaskScheduler::new(config());
        s.submit_tasks(base, TaskSet::new(0, 1, 3, payload())).unwrap();
        let launched = s.resource_offers(base, &[WorkerOffer::new("1", "h", 2)]);
        assert!(s.executor_heartbeat_received("1", Vec::new()));
        assert!(!s.executor_heartbeat_received("9", Vec::new()));
        drain(&mut s);

        let t0 = launched[0][0].task_id;
        assert!(s.kill_task_attempt(t0, true, "user asked"));
        assert!(!s.kill_task_attempt(999, true, "user asked"));
        let (_, actions) = drain(&mut s);
        assert_eq!(actions, [Action::KillTask { task_id: t0, executor_id: "1".into(), interrupt_thread: true, reason: "user asked".into() }]);

        s.cancel_tasks(1, false);
        let (events, actions) = drain(&mut s);
        assert_eq!(actions.iter().filter(|a| matches!(a, Action::KillTask { reason, interrupt_thread: false, .. } if reason == "Stage cancelled")).count(), 2);
        assert!(events.contains(&SchedulerEvent::JobEnd { job_id: 0, result: JobResult::Failed("Stage 1 cancelled".into()) }));
        // The task set stays until its killed tasks report.
        assert!(s.task_set(id(1, 0)).is_some());
        for task in &launched[0] {
            s.status_update(base, task.task_id, TaskState::Killed, TaskOutcome::None);
        }
        assert!(s.task_set(id(1, 0)).is_none());
        assert!(logs.contains(Level::INFO, "Removed TaskSet 1.0, whose tasks have all completed, from pool "));

        s.worker_removed("worker-3", "h", "Worker shut down");
        assert!(logs.contains(Level::INFO, "Handle removed worker worker-3: Worker shut down"));
    });
}

#[test]
fn indirect_results_reach_the_listener_with_their_executor() {
    #[derive(Default)]
    struct Recorder {
        results: Vec<(u64, u32, TaskResult)>,
        jobs: Vec<(u32, JobResult)>,
        executors: Vec<String>,
        events: usize,
    }
    impl SchedulerListener for Recorder {
        fn on_event(&mut self, _: &SchedulerEvent) {
            self.events += 1;
        }
        fn on_task_result(&mut self, task_id: u64, index: u32, result: &TaskResult) {
            self.results.push((task_id, index, result.clone()));
        }
        fn on_job_end(&mut self, job_id: u32, result: &JobResult) {
            self.jobs.push((job_id, result.clone()));
        }
        fn on_executor_added(&mut self, executor_id: &str, _host: &str) {
            self.executors.push(executor_id.to_owned());
        }
    }

    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.submit_tasks(base, TaskSet::new(9, 0, 1, payload()))
        .unwrap();
    let task = s.resource_offers(base, &[WorkerOffer::new("7", "h", 1)])[0][0].clone();
    let outcome = TaskOutcome::Indirect {
        block_id: BlockId::TaskResult {
            task_id: task.task_id,
        },
        size: 300 << 20,
        metrics: Default::default(),
        accumulators: Vec::new(),
    };
    s.status_update(base, task.task_id, TaskState::Finished, outcome);
    let mut listener = Recorder::default();
    while let Some(action) = s.poll_action() {
        if let Action::Event(event) = action {
            event.deliver_to(&mut listener);
        }
    }
    assert_eq!(listener.executors, ["7"]);
    assert_eq!(listener.jobs, [(9, JobResult::Succeeded)]);
    assert_eq!(listener.results.len(), 1);
    assert!(
        matches!(&listener.results[0].2, TaskResult::Indirect { executor_id, block_id: BlockId::TaskResult { task_id }, size, .. }
        if &**executor_id == "7" && *task_id == task.task_id && *size == 300 << 20)
    );
    // JobStart, StageSubmitted, ExecutorAdded, TaskStart, TaskEnd, StageCompleted, JobEnd.
    assert_eq!(listener.events, 7);
}

#[test]
fn an_aborted_task_set_ends_its_job_with_the_message_and_kills_what_runs() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.submit_tasks(base, TaskSet::new(4, 0, 3, payload()))
        .unwrap();
    let launched = s.resource_offers(base, &[WorkerOffer::new("1", "h", 2)]);
    drain(&mut s);
    assert!(s.abort_task_set(id(0, 0), "too big".to_owned()));
    let (events, actions) = drain(&mut s);
    let killed: Vec<u64> = actions
        .iter()
        .filter_map(|a| match a {
            Action::KillTask { task_id, .. } => Some(*task_id),
            _ => None,
        })
        .collect();
    assert_eq!(killed, launched_ids(&launched));
    assert!(events.contains(&SchedulerEvent::JobEnd {
        job_id: 4,
        result: JobResult::Failed("too big".to_owned())
    }));
    assert!(
        !s.abort_task_set(id(0, 0), "again".to_owned()),
        "already ended"
    );
    assert!(
        !s.abort_task_set(id(9, 0), "none".to_owned()),
        "no such set"
    );
    // Nothing more of it launches.
    assert!(s.resource_offers(base, &[WorkerOffer::new("2", "h", 4)])[0].is_empty());
}

#[test]
fn a_launch_that_could_not_be_sent_is_retried_or_aborts_its_task_set() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.submit_tasks(base, TaskSet::new(0, 0, 2, payload()))
        .unwrap();
    let launched = s.resource_offers(base, &[WorkerOffer::new("1", "h", 1)]);
    let first = launched[0][0].clone();
    drain(&mut s);
    // Not sent (say the connection was gone): pending again, not counted, offers asked.
    s.launch_failed(base, first.task_id, "connection closed", None);
    assert_eq!(s.running_tasks(), 0);
    assert_eq!(s.running_tasks_on("1").count(), 0);
    let (_, actions) = drain(&mut s);
    assert!(actions.contains(&Action::ReviveOffers));
    assert_eq!(s.task_set(id(0, 0)).unwrap().task_failures(first.index), 0);
    let retry = s.resource_offers(base, &[WorkerOffer::new("1", "h", 1)]);
    assert_eq!(
        (retry[0][0].index, retry[0][0].attempt_number),
        (first.index, 1)
    );
    drain(&mut s);
    // Too large to send: the task set is aborted with the given message.
    s.launch_failed(
        base,
        retry[0][0].task_id,
        "too large",
        Some("Serialized task 1:0 was 9 bytes".to_owned()),
    );
    let (events, _) = drain(&mut s);
    assert!(events.iter().any(
        |e| matches!(e, SchedulerEvent::JobEnd { result: JobResult::Failed(m), .. }
        if m == "Serialized task 1:0 was 9 bytes")
    ));
    assert_eq!(s.running_tasks(), 0);
}

#[test]
fn an_excluded_host_gets_no_tasks() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.exclude_host("bad-host");
    assert!(s.is_host_excluded("bad-host") && !s.is_host_excluded("good-host"));
    assert_eq!(
        s.excluded_hosts().map(|h| &**h).collect::<Vec<_>>(),
        ["bad-host"]
    );
    s.submit_tasks(base, TaskSet::new(0, 0, 4, payload()))
        .unwrap();
    let launched = s.resource_offers(
        base,
        &[
            WorkerOffer::new("1", "bad-host", 4),
            WorkerOffer::new("2", "good-host", 1),
        ],
    );
    assert!(launched[0].is_empty());
    assert_eq!(launched[1].len(), 1);
    assert!(
        !s.is_executor_alive("1"),
        "an excluded host's offer registers nothing"
    );
    s.include_host("bad-host");
    let launched = s.resource_offers(base, &[WorkerOffer::new("1", "bad-host", 4)]);
    assert_eq!(launched[0].len(), 3);
}

#[test]
fn exclusion_on_failure_is_off_unless_configured() {
    let off = TaskScheduler::from_conf(&Conf::new()).unwrap();
    assert_eq!(off.config().exclusion, ExclusionPolicy::disabled());
    let conf = Conf::from_pairs(["spark.excludeOnFailure.enabled=true"]).unwrap();
    let on = TaskScheduler::from_conf(&conf).unwrap();
    assert_eq!(on.config().exclusion, ExclusionPolicy::default());
    let conf = Conf::from_pairs(["excludeOnFailure.enabled=maybe"]).unwrap();
    let err = TaskScheduler::from_conf(&conf).unwrap_err().to_string();
    assert!(
        err.contains("excludeOnFailure.enabled") && err.contains("maybe"),
        "{err}"
    );
}

#[test]
fn exclusion_thresholds_come_from_the_conf() {
    let conf = Conf::from_pairs([
        "excludeOnFailure.enabled=true",
        "excludeOnFailure.task.maxTaskAttemptsPerExecutor=2",
        "excludeOnFailure.task.maxTaskAttemptsPerNode=3",
        "excludeOnFailure.stage.maxFailedTasksPerExecutor=4",
        "spark.excludeOnFailure.stage.maxFailedExecutorsPerNode=5",
    ])
    .unwrap();
    let mut s = TaskScheduler::from_conf(&conf).unwrap();
    assert_eq!(
        s.config().exclusion,
        ExclusionPolicy {
            enabled: true,
            max_task_attempts_per_executor: 2,
            max_task_attempts_per_host: 3,
            max_failed_tasks_per_executor: 4,
            max_failed_executors_per_host: 5,
        }
    );

    // A task may fail twice on an executor before it is not retried there.
    let base = Instant::now();
    s.submit_tasks(base, TaskSet::new(0, 0, 2, payload()))
        .unwrap();
    let e1 = WorkerOffer::new("1", "host-a", 1);
    for _ in 0..2 {
        let t = s.resource_offers(base, std::slice::from_ref(&e1))[0][0].clone();
        assert_eq!(t.index, 0, "task 0 is retried on executor 1");
        s.status_update(base, t.task_id, TaskState::Failed, failed("bad"));
    }
    let set = s.task_set(id(0, 0)).unwrap();
    assert!(set.is_task_excluded(0, "1", "host-a"));
    assert!(
        !set.is_excluded("1", "host-a"),
        "one task failed there, not 4"
    );
    let t = s.resource_offers(base, std::slice::from_ref(&e1))[0][0].clone();
    assert_eq!(t.index, 1);
}

#[test]
fn exclusion_thresholds_are_validated_as_spark_does() {
    let from = |pairs: &[&str]| TaskScheduler::from_conf(&Conf::from_pairs(pairs).unwrap());
    for key in [
        "excludeOnFailure.task.maxTaskAttemptsPerExecutor",
        "excludeOnFailure.task.maxTaskAttemptsPerNode",
        "excludeOnFailure.stage.maxFailedTasksPerExecutor",
        "excludeOnFailure.stage.maxFailedExecutorsPerNode",
    ] {
        assert!(
            flint_scheduler::KEYS.iter().any(|k| k.key == key),
            "{key} is a known key"
        );
        let zero = format!("{key}=0");
        let err = from(&["excludeOnFailure.enabled=true", &zero]).unwrap_err();
        assert_eq!(err.to_string(), format!("{key} was 0, but must be > 0."));
        assert!(matches!(
            err,
            SchedulerError::ExclusionThresholdNotPositive { value: 0, .. }
        ));
        // Not checked while exclusion is off, as in Spark.
        assert!(from(&[&zero]).is_ok());
    }

    for (max_failures, per_node) in [(2, 2), (2, 3), (4, 4)] {
        let max_failures_pair = format!("task.maxFailures={max_failures}");
        let per_node_pair = format!("excludeOnFailure.task.maxTaskAttemptsPerNode={per_node}");
        let err = from(&[
            "excludeOnFailure.enabled=true",
            &max_failures_pair,
            &per_node_pair,
        ])
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "excludeOnFailure.task.maxTaskAttemptsPerNode ( = {per_node}) was >= \
                 task.maxFailures ( = {max_failures} ). Though excludeOnFailure is enabled, \
                 with this configuration, flint will not be robust to one bad node. Decrease \
                 excludeOnFailure.task.maxTaskAttemptsPerNode, increase task.maxFailures, or \
                 disable excludeOnFailure with excludeOnFailure.enabled"
            )
        );
        assert!(from(&[&max_failures_pair, &per_node_pair]).is_ok());
    }
    assert!(from(&[
        "excludeOnFailure.enabled=true",
        "task.maxFailures=3",
        "excludeOnFailure.task.maxTaskAttemptsPerNode=2",
    ])
    .is_ok());
}

/// The seeds' removeExecutor: "Unless reason is LossReasonPending, the executor is
/// removed from executorIdToHost registry and TaskSetManagers get notified." A pending
/// loss takes the executor out of the offers and holds its tasks (no copy is started,
/// nothing is counted, nothing posted) until a later loss says why; that reason then
/// decides whether the tasks' failures count.
#[test]
fn a_loss_whose_reason_is_pending_holds_its_tasks_until_the_reason_comes() {
    let base = Instant::now();
    for (reason, counted) in [
        (
            ExecutorLossReason::ExecutorExited {
                exit_code: 3,
                exit_caused_by_app: true,
                reason: "executor 1 exited with code 3".into(),
            },
            true,
        ),
        (ExecutorLossReason::ExecutorKilled, false),
    ] {
        let mut s = TaskScheduler::new(config());
        s.executor_added("1", "host-a", 1);
        s.executor_added("2", "host-b", 1);
        s.submit_tasks(base, TaskSet::new(0, 0, 2, payload()))
            .unwrap();
        let lost = s.resource_offers(base, &[WorkerOffer::new("1", "host-a", 1)])[0][0].clone();
        drain(&mut s);

        s.executor_lost(at(base, 10), "1", ExecutorLossReason::LossReasonPending);
        assert!(!s.is_executor_alive("1"), "no offers for it");
        assert!(s.is_loss_reason_pending("1"));
        let (events, actions) = drain(&mut s);
        assert!(
            !events.iter().any(|e| matches!(
                e,
                SchedulerEvent::ExecutorRemoved { .. } | SchedulerEvent::TaskEnd { .. }
            )),
            "{events:?}"
        );
        assert!(!actions.contains(&Action::ReviveOffers), "{actions:?}");
        assert_eq!(
            s.task_set(id(0, 0)).unwrap().running_tasks(),
            1,
            "its task set still counts the task running"
        );
        // Another executor gets the other task, not a second copy of the held one.
        let other = s.resource_offers(at(base, 20), &[WorkerOffer::new("2", "host-b", 1)]);
        assert_eq!(other[0].len(), 1);
        assert_ne!(other[0][0].index, lost.index);
        // Saying again that the reason is pending changes nothing.
        s.executor_lost(at(base, 25), "1", ExecutorLossReason::LossReasonPending);
        assert!(s.is_loss_reason_pending("1"));
        drain(&mut s);

        s.executor_lost(at(base, 30), "1", reason.clone());
        assert!(!s.is_loss_reason_pending("1"));
        let (events, actions) = drain(&mut s);
        let expected = format!(
            "ExecutorLostFailure (executor 1 {}) Reason: {reason}",
            if counted {
                "exited caused by one of the running tasks"
            } else {
                "exited unrelated to the running tasks"
            }
        );
        assert!(
            events.iter().any(|e| matches!(
                e,
                SchedulerEvent::TaskEnd {
                    task_id,
                    state: TaskState::Lost,
                    reason: TaskEndReason::Failed { message, counted: c, .. },
                    ..
                } if *task_id == lost.task_id && *message == expected && *c == counted
            )),
            "{events:?}"
        );
        assert!(events.iter().any(|e| matches!(
            e,
            SchedulerEvent::ExecutorRemoved { executor_id, reason: r }
                if &**executor_id == "1" && *r == reason.to_string()
        )));
        assert!(actions.contains(&Action::ReviveOffers));
        // The task runs again, elsewhere.
        let rerun = s.resource_offers(at(base, 40), &[WorkerOffer::new("3", "host-c", 1)]);
        assert_eq!(rerun[0].len(), 1);
        assert_eq!(rerun[0][0].index, lost.index);
        // A later report of the same loss is only logged.
        s.executor_lost(at(base, 50), "1", slave_lost());
        assert!(!drain(&mut s)
            .0
            .iter()
            .any(|e| matches!(e, SchedulerEvent::ExecutorRemoved { .. })));
    }
}

/// Spark's abortIfCompletelyBlacklisted counts a host the application excludes
/// (`isNodeBlacklisted`) as one where nothing may run: with task 0 excluded from the
/// only executor of the other host, the task set is aborted, not left waiting for ever
/// on executors that get no offers. Lift the exclusion and the same state goes on.
#[test]
fn a_host_the_application_excludes_counts_towards_cannot_run_anywhere() {
    let base = Instant::now();
    let setup = |exclude: bool| {
        let mut s = TaskScheduler::new(SchedulerConfig {
            exclusion: ExclusionPolicy::default(),
            ..config()
        });
        s.executor_added("1", "host-a", 1);
        s.executor_added("2", "host-b", 1);
        if exclude {
            s.exclude_host("host-b");
        }
        s.submit_tasks(base, TaskSet::new(0, 0, 1, payload()))
            .unwrap();
        let t = s.resource_offers(base, &[WorkerOffer::new("1", "host-a", 1)])[0][0].clone();
        s.status_update(base, t.task_id, TaskState::Failed, failed("bad"));
        drain(&mut s);
        // Task 0 may not run on executor 1 again; executor 2 is on host-b.
        let offers = [
            WorkerOffer::new("1", "host-a", 1),
            WorkerOffer::new("2", "host-b", 1),
        ];
        let launched = s.resource_offers(at(base, 10), &offers);
        (s, launched)
    };

    let (mut s, launched) = setup(true);
    assert!(launched.iter().all(Vec::is_empty));
    let (events, _) = drain(&mut s);
    let failure = events
        .iter()
        .find_map(|e| match e {
            SchedulerEvent::StageCompleted {
                failure: Some(f), ..
            } => Some(f.clone()),
            _ => None,
        })
        .expect("aborted");
    assert!(
        failure.starts_with(
            "Aborting TaskSet 0.0 because task 0 (partition 0) cannot run anywhere due to node and executor exclusion. Most recent failure:\n"
        ),
        "{failure}"
    );

    let (_, launched) = setup(false);
    assert_eq!(launched[1].len(), 1, "host-b runs it when not excluded");

    // Without excludeOnFailure.enabled nothing is aborted, as in Spark.
    let mut s = TaskScheduler::new(config());
    s.executor_added("2", "host-b", 1);
    s.exclude_host("host-b");
    s.submit_tasks(base, TaskSet::new(0, 0, 1, payload()))
        .unwrap();
    s.resource_offers(base, &[WorkerOffer::new("2", "host-b", 1)]);
    assert!(!drain(&mut s).0.iter().any(|e| matches!(
        e,
        SchedulerEvent::StageCompleted {
            failure: Some(_),
            ..
        }
    )));
}
