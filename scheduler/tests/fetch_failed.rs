//! The task scheduler's side of shuffle failures: a FetchFailed attempt ends its task
//! set without counting towards task.maxFailures, and a partition computed by an earlier
//! attempt of a stage is done for the stage's active task set.

mod common;

use std::time::Instant;

use bytes::Bytes;
use common::{at, drain};
use flint_scheduler::{
    JobResult, SchedulerConfig, SchedulerEvent, TaskEndReason, TaskScheduler, TaskSet, TaskSetId,
    WorkerOffer,
};
use flint_testkit::logs::LogCapture;
use flint_testkit::outcome::{failed, ok};
use flint_wire::{BlockManagerId, FetchFailure, TaskFailureKind, TaskOutcome, TaskState};
use tracing::Level;

fn config() -> SchedulerConfig {
    SchedulerConfig {
        seed: 7,
        max_task_failures: 1,
        ..SchedulerConfig::default()
    }
}

fn fetch_failure() -> FetchFailure {
    FetchFailure {
        address: Some(BlockManagerId {
            executor_id: "9".into(),
            host: "host-z".into(),
            port: 0,
        }),
        shuffle_id: 4,
        map_index: Some(2),
        reduce_id: 1,
        message: "Connection refused".into(),
    }
}

fn fetch_failed() -> TaskOutcome {
    flint_testkit::outcome::fetch_failed(fetch_failure())
}

/// Launches every task of the registered task sets on one executor with enough cores.
fn launch_all(s: &mut TaskScheduler, now: Instant, cores: u32) -> Vec<u64> {
    let launched = s.resource_offers(now, &[WorkerOffer::new("1", "host-a", cores)]);
    let mut ids: Vec<u64> = launched.into_iter().flatten().map(|t| t.task_id).collect();
    ids.sort_unstable();
    ids
}

#[test]
fn a_fetch_failure_is_not_counted_not_retried_and_ends_the_task_set() {
    let logs = LogCapture::default();
    logs.run(|| {
        let base = Instant::now();
        // task.maxFailures is 1: a counted failure would abort the task set at once.
        let mut s = TaskScheduler::new(config());
        s.submit_tasks(base, TaskSet::new(0, 3, 3, Bytes::from_static(b"reduce")))
            .unwrap();
        let ids = launch_all(&mut s, base, 2);
        assert_eq!(ids.len(), 2);
        drain(&mut s);

        s.status_update(at(base, 10), ids[0], TaskState::Failed, fetch_failed());
        let (events, _) = drain(&mut s);
        let fetch = events
            .iter()
            .find_map(|e| match e {
                SchedulerEvent::TaskEnd {
                    task_id,
                    state: TaskState::Failed,
                    reason: TaskEndReason::FetchFailed(fetch),
                    ..
                } if *task_id == ids[0] => Some(fetch.clone()),
                _ => None,
            })
            .expect("a TaskEnd with the fetch failure's details");
        assert_eq!(fetch, fetch_failure());
        let manager = s.task_set(TaskSetId { stage_id: 3, stage_attempt_id: 0 }).unwrap();
        assert!(manager.is_zombie(), "no more launches");
        assert_eq!(manager.task_failures(0), 0, "not counted");
        let failure = manager.failure().unwrap().to_owned();
        assert!(
            failure.starts_with("Lost task 0.0 in stage 3.0 (TID 0, host-a, executor 1): FetchFailed(BlockManagerId(9, host-z, 0), shuffleId=4, mapIndex=2, reduceId=1, message=\nConnection refused\n)"),
            "{failure}"
        );
        assert!(logs.contains(Level::WARN, "Lost task 0.0 in stage 3.0"));
        // The end is reported (without a DAG scheduler, no one would resubmit it).
        assert!(events.contains(&SchedulerEvent::StageCompleted {
            task_set: TaskSetId { stage_id: 3, stage_attempt_id: 0 },
            job_id: 0,
            failure: Some(failure.clone()),
        }));
        assert!(events.contains(&SchedulerEvent::JobEnd {
            job_id: 0,
            result: JobResult::Failed(failure),
        }));

        // The failed task is not pending again, nor is the never-launched one.
        assert!(launch_all(&mut s, at(base, 20), 4).is_empty());
        // The other running attempt's result still counts.
        s.status_update(at(base, 30), ids[1], TaskState::Finished, ok(b"r1"));
        let (events, _) = drain(&mut s);
        assert!(events.iter().any(|e| matches!(
            e,
            SchedulerEvent::TaskEnd { task_id, reason: TaskEndReason::Success(_), .. } if *task_id == ids[1]
        )));
        assert_eq!(s.task_sets().count(), 0, "dropped once nothing of it runs");
    });
}

#[test]
fn a_later_failure_of_a_fetch_failed_task_set_is_neither_counted_nor_retried() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.submit_tasks(base, TaskSet::new(0, 3, 2, Bytes::from_static(b"reduce")))
        .unwrap();
    let ids = launch_all(&mut s, base, 2);
    s.status_update(at(base, 1), ids[0], TaskState::Failed, fetch_failed());
    s.status_update(at(base, 2), ids[1], TaskState::Failed, failed("boom"));
    let (events, _) = drain(&mut s);
    let ends: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            SchedulerEvent::TaskEnd { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect();
    assert!(matches!(
        ends[1],
        TaskEndReason::Failed {
            counted: true,
            kind: TaskFailureKind::Exception,
            ..
        }
    ));
    // Only one end of the task set and of its job, both for the fetch failure.
    let completions = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                SchedulerEvent::StageCompleted { .. } | SchedulerEvent::JobEnd { .. }
            )
        })
        .count();
    assert_eq!(completions, 2);
    assert!(launch_all(&mut s, at(base, 3), 4).is_empty());
    assert_eq!(s.task_sets().count(), 0);
}

#[test]
fn a_killed_attempt_that_says_fetch_failed_is_a_kill() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    s.submit_tasks(base, TaskSet::new(0, 3, 1, Bytes::from_static(b"reduce")))
        .unwrap();
    let ids = launch_all(&mut s, base, 1);
    s.status_update(at(base, 1), ids[0], TaskState::Killed, fetch_failed());
    let (events, _) = drain(&mut s);
    assert!(events.iter().any(|e| matches!(
        e,
        SchedulerEvent::TaskEnd {
            reason: TaskEndReason::Failed {
                kind: TaskFailureKind::TaskKilled,
                counted: false,
                ..
            },
            ..
        }
    )));
    let manager = s
        .task_set(TaskSetId {
            stage_id: 3,
            stage_attempt_id: 0,
        })
        .unwrap();
    assert!(!manager.is_zombie(), "a kill makes the task pending again");
    assert_eq!(launch_all(&mut s, at(base, 2), 1).len(), 1);
}

#[test]
fn a_partition_an_earlier_attempt_computed_is_done_for_the_active_task_set() {
    let base = Instant::now();
    let mut s = TaskScheduler::new(config());
    let attempt0 = TaskSet::new(0, 5, 3, Bytes::from_static(b"map"));
    s.submit_tasks(base, attempt0).unwrap();
    let first = launch_all(&mut s, base, 3);
    s.status_update(at(base, 1), first[0], TaskState::Failed, fetch_failed());
    // Attempt 1 computes partitions 1 and 2 again, as attempt 0 still runs them.
    let mut attempt1 = TaskSet::new(0, 5, 0, Bytes::from_static(b"map")).with_attempt(1);
    attempt1.tasks = [1, 2]
        .into_iter()
        .map(flint_scheduler::TaskSpec::new)
        .collect();
    s.submit_tasks(at(base, 2), attempt1).unwrap();
    drain(&mut s);

    // Attempt 0's task for partition 1 finishes first: attempt 1 no longer needs it.
    s.status_update(at(base, 3), first[1], TaskState::Finished, ok(b"p1"));
    s.notify_partition_completion(5, 1);
    let id1 = TaskSetId {
        stage_id: 5,
        stage_attempt_id: 1,
    };
    assert_eq!(s.task_set(id1).unwrap().successful_tasks(), 1);
    let launched = s.resource_offers(at(base, 4), &[WorkerOffer::new("2", "host-b", 4)]);
    let partitions: Vec<u32> = launched.iter().flatten().map(|t| t.partition_id).collect();
    assert_eq!(
        partitions,
        [2],
        "only the partition nobody computed launches"
    );
    let last = launched[0][0].task_id;

    // Notifying twice, or a partition the task set lacks, changes nothing.
    s.notify_partition_completion(5, 1);
    s.notify_partition_completion(5, 0);
    assert_eq!(s.task_set(id1).unwrap().successful_tasks(), 1);

    s.status_update(at(base, 5), last, TaskState::Finished, ok(b"p2"));
    let (events, _) = drain(&mut s);
    assert!(events.contains(&SchedulerEvent::StageCompleted {
        task_set: id1,
        job_id: 0,
        failure: None,
    }));
    // Attempt 0 still runs partition 2's first task; its success is a duplicate of
    // nothing in its own (ended) task set, and no attempt stays active.
    s.status_update(at(base, 6), first[2], TaskState::Finished, ok(b"p2 again"));
    assert_eq!(s.task_sets().count(), 0);
    // A new attempt of the stage may be submitted: none is active.
    let attempt2 = TaskSet::new(0, 5, 1, Bytes::from_static(b"map")).with_attempt(2);
    s.submit_tasks(at(base, 7), attempt2).unwrap();
}
