//! The status book with injected instants: what it counts, its window and its history.

use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::RpcStats;
use flint_wire::{SharedStr, TaskFailureKind, TaskState};

use super::*;
use crate::core::driver_core::{CoreView, ExecutorView, TaskSetView};
use crate::core::events::TaskResult;

fn task_end(stage_id: u32, executor: &str, ms: u64, ok: bool) -> SchedulerEvent {
    SchedulerEvent::TaskEnd {
        task_id: 1,
        task_set: TaskSetId {
            stage_id,
            stage_attempt_id: 0,
        },
        index: 0,
        attempt: 0,
        executor_id: SharedStr::from(executor),
        state: if ok {
            TaskState::Finished
        } else {
            TaskState::Failed
        },
        duration: Duration::from_millis(ms),
        reason: if ok {
            TaskEndReason::Success(TaskResult::Direct {
                value: Bytes::new(),
                metrics: Default::default(),
            })
        } else {
            TaskEndReason::Failed {
                kind: TaskFailureKind::Exception,
                message: "boom".into(),
                counted: true,
            }
        },
    }
}

fn stage(stage_id: u32) -> TaskSetId {
    TaskSetId {
        stage_id,
        stage_attempt_id: 0,
    }
}

/// Job `job_id` starts at `at` with its stage `stage_id` of `num_tasks` tasks.
fn job_with_stage(book: &mut StatusBook, at: Instant, job_id: u32, stage_id: u32, num_tasks: u32) {
    book.on_event(|| at, &SchedulerEvent::JobStart { job_id });
    book.on_event(
        || at,
        &SchedulerEvent::StageSubmitted {
            task_set: stage(stage_id),
            job_id,
            num_tasks,
        },
    );
}

fn added(book: &mut StatusBook, now: Instant, id: &str) {
    book.on_event(
        || now,
        &SchedulerEvent::ExecutorAdded {
            executor_id: SharedStr::from(id),
            host: SharedStr::from("host-a"),
            cores: 2,
        },
    );
}

#[test]
fn a_job_of_two_stages_is_counted_and_its_tasks_land_on_its_executor() {
    let start = Instant::now();
    let mut book = StatusBook::new(start);
    let t = |ms| start + Duration::from_millis(ms);
    added(&mut book, t(1), "1");
    job_with_stage(&mut book, t(10), 7, 3, 3);
    book.on_event(
        || unreachable!("a task end reads no clock"),
        &task_end(3, "1", 5, true),
    );
    book.on_event(|| unreachable!(), &task_end(3, "1", 5, false));
    book.on_event(|| unreachable!(), &task_end(3, "1", 5, true));
    book.on_event(|| unreachable!(), &task_end(3, "1", 5, true));
    book.on_event(
        || t(40),
        &SchedulerEvent::StageCompleted {
            task_set: stage(3),
            job_id: 7,
            failure: None,
        },
    );
    book.on_event(
        || t(50),
        &SchedulerEvent::JobEnd {
            job_id: 7,
            result: JobResult::Succeeded,
        },
    );
    let snapshot = book.snapshot(t(60), CoreView::default(), RpcStats::default());
    let job = &snapshot.jobs[0];
    assert_eq!((job.job_id, job.phase), (7, Phase::Succeeded));
    assert_eq!(
        (job.num_tasks, job.completed_tasks, job.failed_tasks),
        (3, 3, 1)
    );
    assert_eq!(job.completed, Some(Duration::from_millis(50)));
    assert_eq!(snapshot.stages[0].completed_tasks, 3);
    assert_eq!(snapshot.stages[0].phase, Phase::Succeeded);
    let executor = &snapshot.executors[0];
    assert_eq!((executor.completed_tasks, executor.failed_tasks), (3, 1));
    assert_eq!(executor.task_time, Duration::from_millis(20));
    assert_eq!(snapshot.totals.tasks_finished(), 4);
    assert_eq!(snapshot.totals.jobs_succeeded, 1);
    assert_eq!(snapshot.latency.count(), 4);
}

#[test]
fn the_core_view_gives_running_tasks_names_and_heartbeats() {
    let start = Instant::now();
    let mut book = StatusBook::new(start);
    book.on_event(
        || start,
        &SchedulerEvent::StageSubmitted {
            task_set: stage(1),
            job_id: 1,
            num_tasks: 4,
        },
    );
    let view = CoreView {
        executors: vec![ExecutorView {
            id: "9".into(),
            host: "h".into(),
            cores: 4,
            free_slots: 1,
            running_tasks: 3,
            since_heartbeat: Some(Duration::from_secs(2)),
            backlogged: false,
        }],
        task_sets: vec![TaskSetView {
            id: stage(1),
            job_id: 1,
            name: "TaskSet_1.0".into(),
            pool: "default".into(),
            num_tasks: 4,
            successful: 0,
            running: 3,
        }],
        total_cores: 4,
        running_tasks: 3,
        ..CoreView::default()
    };
    let snapshot = book.snapshot(start, view, RpcStats::default());
    assert_eq!(snapshot.stages[0].name, "TaskSet_1.0");
    assert_eq!(snapshot.stages[0].active_tasks, 3);
    assert_eq!(snapshot.jobs[0].active_tasks, 3);
    // Registered before the book was opened: known from the core.
    assert_eq!(snapshot.executors[0].id, "9");
    assert_eq!(snapshot.executors[0].running_tasks, 3);
    assert_eq!(
        snapshot.executors[0].since_heartbeat,
        Some(Duration::from_secs(2))
    );
    // The next snapshot, with the stage gone from the core, shows none running.
    let later = book.snapshot(start, CoreView::default(), RpcStats::default());
    assert_eq!(later.stages[0].active_tasks, 0);
    assert_eq!(later.executors[0].running_tasks, 0);
    assert!(later.sequence > snapshot.sequence);
}

#[test]
fn the_window_keeps_the_last_minute_and_the_history_one_count_a_second() {
    let start = Instant::now();
    let mut book = StatusBook::new(start);
    // 100 tasks of 1 ms in each of the first 90 seconds, ticked every 100 ms.
    for second in 0..90u64 {
        for tenth in 0..10u64 {
            let now = start + Duration::from_millis(second * 1000 + tenth * 100 + 50);
            book.tick(now);
            for _ in 0..10 {
                book.on_event(|| now, &task_end(1, "1", 1, true));
            }
        }
    }
    let now = start + Duration::from_secs(90);
    let snapshot = book.snapshot(now, CoreView::default(), RpcStats::default());
    assert_eq!(snapshot.totals.tasks_finished(), 9000);
    // The window is a minute (give or take the second of its marks), not 90 s.
    assert!(
        snapshot.window.span >= WINDOW && snapshot.window.span <= WINDOW + Duration::from_secs(1),
        "{:?}",
        snapshot.window.span
    );
    assert!(
        (snapshot.window.tasks_per_sec - 100.0).abs() < 2.0,
        "{:?}",
        snapshot.window
    );
    let p50 = snapshot.window.p50.expect("tasks ended");
    assert!(
        p50 >= Duration::from_micros(800) && p50 <= Duration::from_millis(1),
        "{p50:?}"
    );
    assert_eq!(snapshot.throughput.len(), 90);
    assert!(
        snapshot.throughput.iter().all(|&n| n == 100),
        "{:?}",
        snapshot.throughput
    );
    // Nothing more for two minutes: the window empties, the rate falls to zero.
    let idle = start + Duration::from_secs(210);
    let snapshot = book.snapshot(idle, CoreView::default(), RpcStats::default());
    assert_eq!(snapshot.window.tasks, 0);
    assert_eq!(snapshot.window.p50, None);
    assert_eq!(*snapshot.throughput.last().unwrap(), 0);
}

#[test]
fn ended_jobs_past_the_retained_count_are_dropped_but_counted() {
    let start = Instant::now();
    let mut book = StatusBook::new(start);
    for job_id in 0..(RETAINED_JOBS as u32 + 10) {
        book.on_event(|| start, &SchedulerEvent::JobStart { job_id });
        book.on_event(
            || start,
            &SchedulerEvent::JobEnd {
                job_id,
                result: JobResult::Failed("no".into()),
            },
        );
    }
    let snapshot = book.snapshot(start, CoreView::default(), RpcStats::default());
    assert_eq!(snapshot.jobs.len(), RETAINED_JOBS);
    assert_eq!(snapshot.jobs[0].job_id, RETAINED_JOBS as u32 + 9);
    assert_eq!(snapshot.totals.jobs_failed, RETAINED_JOBS as u64 + 10);
}

#[test]
fn latency_quantiles_fall_in_the_right_bucket() {
    let mut histogram = LatencyHistogram::default();
    for _ in 0..99 {
        histogram.record(Duration::from_micros(100));
    }
    histogram.record(Duration::from_secs(2));
    let p50 = histogram.quantile(0.5).unwrap();
    assert!(p50 > Duration::from_micros(80) && p50 <= Duration::from_micros(100));
    let p100 = histogram.quantile(1.0).unwrap();
    assert!(p100 > Duration::from_millis(1500) && p100 <= Duration::from_secs(2));
    // Past the largest bound: its lower end.
    histogram.record(Duration::from_secs(1000));
    assert_eq!(histogram.quantile(1.0), Some(Duration::from_secs(100)));
    assert_eq!(histogram.count_at_most(100_000), 99);
    assert_eq!(LATENCY_BOUNDS_NS[0], 1_000);
    assert_eq!(LATENCY_BOUNDS_NS[80], 100_000_000_000);
    assert!(LATENCY_BOUNDS_NS.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn task_ends_counted_in_runs_reach_their_records_however_they_interleave() {
    let start = Instant::now();
    let mut book = StatusBook::new(start);
    let t = |ms| start + Duration::from_millis(ms);
    added(&mut book, t(1), "1");
    added(&mut book, t(1), "2");
    for (job_id, stage_id) in [(7, 3), (8, 4)] {
        job_with_stage(&mut book, t(2), job_id, stage_id, 10);
    }
    // Runs of one stage on one executor, broken by the other stage, the other executor
    // and a failure; a snapshot in the middle sees what ended before it.
    for (stage_id, executor, ok) in [
        (3, "1", true),
        (3, "1", true),
        (3, "2", true),
        (4, "2", false),
        (4, "2", true),
        (3, "1", true),
    ] {
        book.on_event(|| unreachable!(), &task_end(stage_id, executor, 1, ok));
    }
    let first = book.snapshot(t(10), CoreView::default(), RpcStats::default());
    let counts = |snapshot: &StatusSnapshot, stage_id: u32| {
        let stage = snapshot
            .stages
            .iter()
            .find(|s| s.id.stage_id == stage_id)
            .expect("the stage");
        (stage.completed_tasks, stage.failed_tasks)
    };
    let by_executor = |snapshot: &StatusSnapshot, id: &str| {
        let executor = snapshot
            .executors
            .iter()
            .find(|e| e.id == id)
            .expect("the executor");
        (executor.completed_tasks, executor.failed_tasks)
    };
    assert_eq!((counts(&first, 3), counts(&first, 4)), ((4, 0), (1, 1)));
    assert_eq!(
        (by_executor(&first, "1"), by_executor(&first, "2")),
        ((3, 0), (2, 1))
    );
    // A run still open when its stage and job end is counted in them.
    book.on_event(|| unreachable!(), &task_end(4, "1", 1, true));
    book.on_event(
        || t(20),
        &SchedulerEvent::StageCompleted {
            task_set: stage(4),
            job_id: 8,
            failure: None,
        },
    );
    book.on_event(
        || t(20),
        &SchedulerEvent::JobEnd {
            job_id: 8,
            result: JobResult::Succeeded,
        },
    );
    let second = book.snapshot(t(30), CoreView::default(), RpcStats::default());
    assert_eq!(counts(&second, 4), (2, 1));
    let job = second.jobs.iter().find(|j| j.job_id == 8).expect("job 8");
    assert_eq!((job.completed_tasks, job.failed_tasks), (2, 1));
    assert_eq!(by_executor(&second, "1"), (4, 0));
    assert_eq!(second.totals.tasks_finished(), 7);
}

#[test]
fn more_runs_open_at_once_than_the_book_keeps_are_all_counted() {
    let start = Instant::now();
    let mut book = StatusBook::new(start);
    let t = |ms| start + Duration::from_millis(ms);
    let executors: Vec<String> = (0..OPEN_TALLIES + 3).map(|i| i.to_string()).collect();
    for id in &executors {
        added(&mut book, t(1), id);
    }
    job_with_stage(&mut book, t(2), 7, 3, 100);
    // Round robin over more executors than tallies stay open: every change of executor
    // is a run of its own.
    for round in 0..3 {
        for id in &executors {
            book.on_event(|| unreachable!(), &task_end(3, id, 1, round != 1));
        }
    }
    let snapshot = book.snapshot(t(10), CoreView::default(), RpcStats::default());
    for executor in &snapshot.executors {
        assert_eq!(
            (executor.completed_tasks, executor.failed_tasks),
            (2, 1),
            "{}",
            executor.id
        );
    }
    let stage = &snapshot.stages[0];
    let n = executors.len() as u32;
    assert_eq!((stage.completed_tasks, stage.failed_tasks), (2 * n, n));
    assert_eq!(snapshot.jobs[0].completed_tasks, 2 * n);
}

#[test]
fn an_executor_that_registers_again_starts_its_counts_afresh() {
    let start = Instant::now();
    let mut book = StatusBook::new(start);
    let t = |ms| start + Duration::from_millis(ms);
    added(&mut book, t(1), "1");
    job_with_stage(&mut book, t(2), 7, 3, 10);
    book.on_event(|| unreachable!(), &task_end(3, "1", 1, true));
    // Events the book ignores leave the run open; a late duplicate success counts for
    // the executor, not for the stage.
    book.on_event(
        || unreachable!(),
        &SchedulerEvent::TaskStart {
            task_id: 2,
            task_set: stage(3),
            index: 1,
            attempt: 0,
            executor_id: SharedStr::from("1"),
            host: SharedStr::from("host-a"),
            locality: crate::core::locality::TaskLocality::Any,
            speculative: false,
        },
    );
    let mut duplicate = task_end(3, "1", 1, true);
    if let SchedulerEvent::TaskEnd { reason, .. } = &mut duplicate {
        *reason = TaskEndReason::AlreadySucceeded;
    }
    book.on_event(|| unreachable!(), &duplicate);
    // The run ends on the executor it ran on, before that one is removed and a new one
    // registers under its id.
    book.on_event(
        || t(5),
        &SchedulerEvent::ExecutorRemoved {
            executor_id: SharedStr::from("1"),
            reason: "lost".into(),
        },
    );
    added(&mut book, t(6), "1");
    let snapshot = book.snapshot(t(10), CoreView::default(), RpcStats::default());
    let again = &snapshot.executors[0];
    assert!(again.active);
    assert_eq!((again.completed_tasks, again.failed_tasks), (0, 0));
    assert_eq!(snapshot.stages[0].completed_tasks, 1);
    assert_eq!(snapshot.totals.tasks_succeeded, 2);
}

/// A task set's job and stage attempt ids are used again once their job ended (the
/// task-set API names its own): the second run is a record of its own, ends with its
/// own result, and is not dropped when the first run's record grows old.
#[test]
fn a_job_and_stage_id_used_again_after_their_end_are_a_new_record() {
    let start = Instant::now();
    let mut book = StatusBook::new(start);
    let ended = |book: &mut StatusBook, job_id: u32, stage_id: u32, result: JobResult| {
        let failure = match &result {
            JobResult::Failed(why) => Some(why.clone()),
            JobResult::Succeeded => None,
        };
        book.on_event(
            || start,
            &SchedulerEvent::StageCompleted {
                task_set: stage(stage_id),
                job_id,
                failure,
            },
        );
        book.on_event(|| start, &SchedulerEvent::JobEnd { job_id, result });
    };
    job_with_stage(&mut book, start, 3, 5, 2);
    ended(&mut book, 3, 5, JobResult::Succeeded);
    job_with_stage(&mut book, start, 3, 5, 4);
    let snapshot = book.snapshot(start, CoreView::default(), RpcStats::default());
    assert_eq!(snapshot.jobs.len(), 1);
    assert_eq!(
        (snapshot.jobs[0].phase, snapshot.jobs[0].num_tasks),
        (Phase::Running, 4),
        "the second run, afresh"
    );
    assert_eq!(snapshot.stages[0].phase, Phase::Running);
    // Many other jobs end: the first run's place among the ended records falls out,
    // but the second run, still going, stays.
    for other in 0..RETAINED_STAGES as u32 + 1 {
        let (job_id, stage_id) = (1_000 + other, 10_000 + other);
        job_with_stage(&mut book, start, job_id, stage_id, 1);
        ended(&mut book, job_id, stage_id, JobResult::Succeeded);
    }
    let snapshot = book.snapshot(start, CoreView::default(), RpcStats::default());
    assert!(snapshot.stages.iter().any(|s| s.id == stage(5)));
    assert!(snapshot.jobs.iter().any(|j| j.job_id == 3));
    ended(&mut book, 3, 5, JobResult::Failed("boom".into()));
    let snapshot = book.snapshot(start, CoreView::default(), RpcStats::default());
    let job = snapshot.jobs.iter().find(|j| j.job_id == 3).unwrap();
    assert_eq!(
        (job.phase, job.failure.as_deref()),
        (Phase::Failed, Some("boom")),
        "the second run's end"
    );
}
