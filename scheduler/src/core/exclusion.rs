//! Failure exclusion for one task set (Spark's `TaskSetBlacklist`).
//!
//! By default (Spark's thresholds), a task that failed on an executor is not retried
//! there, nor on a host where it failed twice; an executor on which two different tasks
//! of the task set failed gets no more of its tasks, and neither does a host with two
//! such executors. The thresholds are [`ExclusionPolicy`]'s, read from the
//! `excludeOnFailure.*` keys. Only failures that count towards `task.maxFailures` are
//! recorded: a killed task or a lost executor says nothing about where a task can run.
//!
//! flint has no application-level exclusion on failure (Spark's
//! `excludeOnFailure.application.*` and `excludeOnFailure.timeout`): what a task set
//! learns is forgotten with it. Hosts can be excluded for the whole application by hand
//! ([`crate::TaskScheduler::exclude_host`]).

use flint_wire::SharedStr;
use tracing::info;

use crate::core::config;
use crate::core::error::SchedulerError;
use crate::core::fx_hash::{FxHashMap, FxHashSet};

/// When executors and hosts stop getting a task set's tasks (Spark's
/// `excludeOnFailure.*` keys, read by [`crate::SchedulerConfig::from_conf`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExclusionPolicy {
    /// Whether exclusion is on at all (`excludeOnFailure.enabled`).
    pub enabled: bool,
    /// Failures of one task on one executor before the task is not retried there
    /// (`excludeOnFailure.task.maxTaskAttemptsPerExecutor`).
    pub max_task_attempts_per_executor: u32,
    /// Failures of one task on one host before the task is not retried there
    /// (`excludeOnFailure.task.maxTaskAttemptsPerNode`).
    pub max_task_attempts_per_host: u32,
    /// Distinct failed tasks on one executor before it gets none of the task set's tasks
    /// (`excludeOnFailure.stage.maxFailedTasksPerExecutor`).
    pub max_failed_tasks_per_executor: u32,
    /// Excluded executors on one host before the host gets none of the task set's tasks
    /// (`excludeOnFailure.stage.maxFailedExecutorsPerNode`).
    pub max_failed_executors_per_host: u32,
}

impl Default for ExclusionPolicy {
    /// On, with the keys' default thresholds (Spark's: 1, 2, 2, 2).
    fn default() -> Self {
        ExclusionPolicy {
            enabled: true,
            ..ExclusionPolicy::from_conf(&flint_rpc::conf::Conf::new())
                .expect("the key table's defaults are valid")
        }
    }
}

impl ExclusionPolicy {
    /// No exclusion: a task may be retried anywhere, any number of times (up to
    /// `task.maxFailures`).
    pub fn disabled() -> Self {
        ExclusionPolicy {
            enabled: false,
            ..ExclusionPolicy::default()
        }
    }

    /// Spark's checks of an enabled policy (`validateExcludeOnFailureConfs`), with its
    /// texts: every threshold is above zero, and a task may fail on one host fewer times
    /// than `task.maxFailures`, or one bad host would fail the job. A disabled policy is
    /// not checked, as in Spark.
    pub fn validate(&self, max_task_failures: u32) -> Result<(), SchedulerError> {
        if !self.enabled {
            return Ok(());
        }
        for (key, value) in [
            (
                config::TASK_ATTEMPTS_PER_EXECUTOR.name(),
                self.max_task_attempts_per_executor,
            ),
            (
                config::TASK_ATTEMPTS_PER_NODE.name(),
                self.max_task_attempts_per_host,
            ),
            (
                config::FAILED_TASKS_PER_EXECUTOR.name(),
                self.max_failed_tasks_per_executor,
            ),
            (
                config::FAILED_EXECUTORS_PER_NODE.name(),
                self.max_failed_executors_per_host,
            ),
        ] {
            if value == 0 {
                return Err(SchedulerError::ExclusionThresholdNotPositive { key, value });
            }
        }
        if self.max_task_attempts_per_host >= max_task_failures {
            return Err(SchedulerError::ExclusionNotRobustToOneBadNode {
                max_task_attempts_per_node: self.max_task_attempts_per_host,
                max_task_failures,
            });
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct ExecutorFailures {
    /// Failures per task index on this executor.
    by_task: FxHashMap<u32, u32>,
}

/// Where one task set's tasks have failed, and what that excludes.
#[derive(Debug)]
pub(crate) struct TaskSetExclusion {
    policy: ExclusionPolicy,
    by_executor: FxHashMap<SharedStr, ExecutorFailures>,
    /// Failures per (host, task index).
    by_host_task: FxHashMap<(SharedStr, u32), u32>,
    excluded_executors: FxHashSet<SharedStr>,
    /// Excluded executors per host.
    excluded_per_host: FxHashMap<SharedStr, u32>,
    excluded_hosts: FxHashSet<SharedStr>,
    latest_failure: Option<String>,
}

impl TaskSetExclusion {
    pub fn new(policy: ExclusionPolicy) -> Self {
        TaskSetExclusion {
            policy,
            by_executor: FxHashMap::default(),
            by_host_task: FxHashMap::default(),
            excluded_executors: FxHashSet::default(),
            excluded_per_host: FxHashMap::default(),
            excluded_hosts: FxHashSet::default(),
            latest_failure: None,
        }
    }

    /// Whether anything was recorded; the common case of no failure skips every check.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.by_executor.is_empty()
    }

    /// Whether the policy is on (`excludeOnFailure.enabled`).
    pub fn is_enabled(&self) -> bool {
        self.policy.enabled
    }

    pub fn latest_failure(&self) -> Option<&str> {
        self.latest_failure.as_deref()
    }

    /// Whether the executor or its host gets none of the task set's tasks.
    #[inline]
    pub fn is_excluded(&self, executor_id: &str, host: &str) -> bool {
        !self.is_empty()
            && (self.excluded_executors.contains(executor_id) || self.excluded_hosts.contains(host))
    }

    pub fn is_host_excluded(&self, host: &str) -> bool {
        self.excluded_hosts.contains(host)
    }

    pub fn is_executor_excluded(&self, executor_id: &str) -> bool {
        self.excluded_executors.contains(executor_id)
    }

    /// Whether task `index` may not run on the executor or its host.
    #[inline]
    pub fn is_task_excluded(&self, index: u32, executor_id: &str, host: &str) -> bool {
        if self.is_empty() {
            return false;
        }
        let on_executor = self
            .by_executor
            .get(executor_id)
            .and_then(|f| f.by_task.get(&index))
            .copied()
            .unwrap_or(0);
        if on_executor >= self.policy.max_task_attempts_per_executor {
            return true;
        }
        // Looking up a (host, index) pair needs an owned key; hosts with a failure are few.
        self.by_host_task.iter().any(|((h, i), &n)| {
            *i == index && &**h == host && n >= self.policy.max_task_attempts_per_host
        })
    }

    /// Records a counted failure of task `index` on the executor, and excludes what it
    /// now must.
    pub fn record_failure(
        &mut self,
        task_set: &str,
        index: u32,
        executor_id: &SharedStr,
        host: &SharedStr,
        message: &str,
    ) {
        if !self.policy.enabled {
            return;
        }
        self.latest_failure = Some(message.to_owned());
        let failures = self.by_executor.entry(executor_id.clone()).or_default();
        *failures.by_task.entry(index).or_default() += 1;
        let distinct_failed_tasks = failures.by_task.len();
        *self.by_host_task.entry((host.clone(), index)).or_default() += 1;

        if distinct_failed_tasks >= self.policy.max_failed_tasks_per_executor as usize
            && self.excluded_executors.insert(executor_id.clone())
        {
            info!(
                "Excluding executor {executor_id} for task set {task_set}: {distinct_failed_tasks} of its tasks failed there"
            );
            let on_host = self.excluded_per_host.entry(host.clone()).or_default();
            *on_host += 1;
            if *on_host >= self.policy.max_failed_executors_per_host
                && self.excluded_hosts.insert(host.clone())
            {
                info!("Excluding host {host} for task set {task_set}: {on_host} of its executors are excluded");
            }
        }
    }
}
