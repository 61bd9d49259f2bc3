//! What the status page reads of the driver core: plain values copied out under the
//! driver's lock, at most every `ui` publishing interval (never per task).

use std::time::{Duration, Instant};

use super::DriverCore;
use crate::core::task_set::TaskSetId;

/// A registered executor as it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExecutorView {
    pub id: String,
    pub host: String,
    pub cores: u32,
    /// Free cores and prefetch slots.
    pub free_slots: u32,
    pub running_tasks: u32,
    /// How long ago it was last heard from (registration or heartbeat).
    pub since_heartbeat: Option<Duration>,
    /// Whether offers to it are paused: its connection is backlogged.
    pub backlogged: bool,
}

/// An open task set as it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskSetView {
    pub id: TaskSetId,
    pub job_id: u32,
    pub name: String,
    pub pool: String,
    pub num_tasks: u32,
    pub successful: u32,
    pub running: u32,
}

/// The core's live figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CoreView {
    pub executors: Vec<ExecutorView>,
    pub task_sets: Vec<TaskSetView>,
    pub total_cores: u32,
    pub running_tasks: u32,
    pub pending_executors: u32,
    pub executor_failures: u32,
    /// Why the driver gave up on executors, if it has.
    pub failure: Option<String>,
}

impl DriverCore {
    /// Copies out what the status page shows, executors and task sets sorted by id.
    pub(crate) fn view(&self, now: Instant) -> CoreView {
        let mut executors: Vec<ExecutorView> = self
            .executors
            .values()
            .map(|e| ExecutorView {
                id: e.id.to_string(),
                host: e.host.to_string(),
                cores: e.total_cores,
                free_slots: e.free_slots,
                running_tasks: self.scheduler.running_task_count_on(&e.id) as u32,
                since_heartbeat: self
                    .heartbeats
                    .last_seen(&e.id)
                    .map(|seen| now.saturating_duration_since(seen)),
                backlogged: e.is_paused(),
            })
            .collect();
        executors.sort_by(|a, b| id_order(&a.id, &b.id));
        let mut task_sets: Vec<TaskSetView> = self
            .scheduler
            .task_sets()
            // Not one whose stage attempt a newer task set took (its killed attempts
            // finishing): the page would show its figures under the newer one's id.
            .filter(|&t| {
                self.scheduler
                    .task_set(t.id())
                    .is_some_and(|registered| std::ptr::eq(registered, t))
            })
            .map(|t| TaskSetView {
                id: t.id(),
                job_id: t.job_id(),
                name: t.name().to_owned(),
                pool: t.pool().to_string(),
                num_tasks: t.num_tasks() as u32,
                successful: t.successful_tasks() as u32,
                running: t.running_tasks() as u32,
            })
            .collect();
        task_sets.sort_by_key(|t| (t.id.stage_id, t.id.stage_attempt_id));
        CoreView {
            executors,
            task_sets,
            total_cores: self.total_core_count,
            running_tasks: self.scheduler.running_tasks() as u32,
            pending_executors: self.num_pending_executors(),
            executor_failures: self.executor_failures(),
            failure: self.failure().map(str::to_owned),
        }
    }
}

/// Numeric ids in numeric order ("2" before "10"), others after them by text.
pub(crate) fn id_order(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.cmp(b),
    }
}
