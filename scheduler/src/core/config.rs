//! The scheduler's configuration: the keys the driver side reads (one table, [`KEYS`],
//! with their defaults), and [`SchedulerConfig`], what they say, read once.
//!
//! `executor.taskPrefetch` and `executor.maxNumFailures` are here, though named for
//! executors: the driver reads them (how many tasks it queues at an executor, how many
//! executor failures it takes), executors do not.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use flint_rpc::conf::{Conf, ConfError, Key, KeyInfo, OptionalKey, TimeUnit, Unit};

use crate::core::error::SchedulerError;
use crate::core::exclusion::ExclusionPolicy;
use crate::core::pool::PoolConfig;

const MILLIS: Unit = Unit::Duration(TimeUnit::Millis);

/// Every key the scheduler reads, in alphabetical order, with its default, unit and
/// meaning.
pub const KEYS: &[KeyInfo] = &[
    KeyInfo::new(
        "broadcast.blockSize",
        Some("4m"),
        Unit::Bytes,
        "Size of the pieces a broadcast travels in, each checked on arrival; at most \
         rpc.message.maxSize less 64 KiB (larger is cut to that).",
    ),
    KeyInfo::new(
        "default.parallelism",
        None,
        Unit::Count,
        "Default number of partitions; max(total cores, 2) when not set.",
    ),
    KeyInfo::new(
        "driver.maxResultSize",
        Some("1g"),
        Unit::Bytes,
        "Limit on the total size of one job's task results sent to the driver; 0 is unlimited.",
    ),
    KeyInfo::new(
        "excludeOnFailure.enabled",
        Some("false"),
        Unit::Bool,
        "Whether executors and hosts where a task set's tasks keep failing stop getting them.",
    ),
    KeyInfo::new(
        "excludeOnFailure.stage.maxFailedExecutorsPerNode",
        Some("2"),
        Unit::Count,
        "Excluded executors on one host before the host gets none of a task set's tasks.",
    ),
    KeyInfo::new(
        "excludeOnFailure.stage.maxFailedTasksPerExecutor",
        Some("2"),
        Unit::Count,
        "Failed tasks of a task set on one executor before it gets none of its tasks.",
    ),
    KeyInfo::new(
        "excludeOnFailure.task.maxTaskAttemptsPerExecutor",
        Some("1"),
        Unit::Count,
        "Failures of one task on one executor before it is not retried there.",
    ),
    KeyInfo::new(
        "excludeOnFailure.task.maxTaskAttemptsPerNode",
        Some("2"),
        Unit::Count,
        "Failures of one task on one host before it is not retried there; below task.maxFailures.",
    ),
    KeyInfo::new(
        "executor.maxCores",
        None,
        Unit::Count,
        "flint's own: most cores an executor may register with; more is refused. The larger \
         of 1024 and 16 times this host's CPUs when not set.",
    ),
    KeyInfo::new(
        "executor.maxNumFailures",
        None,
        Unit::Count,
        "Executor failures after which the driver fails its jobs; twice the executors \
         asked for, at least 3, when not set.",
    ),
    KeyInfo::new(
        "executor.taskPrefetch",
        Some("0"),
        Unit::Count,
        "flint's own: tasks the driver may queue at an executor beyond its free cores; 0 is \
         the seeds' semantics.",
    ),
    KeyInfo::new(
        "locality.wait",
        Some("3s"),
        MILLIS,
        "How long to wait at a locality level before a less local one; 0 turns it off.",
    ),
    KeyInfo::new(
        "scheduler.allocation.file",
        None,
        Unit::Text,
        "Path of a FAIR pools file (`pool NAME [weight=N] [minShare=N] [mode=FIFO|FAIR]` a line).",
    ),
    KeyInfo::new(
        "scheduler.maxRegisteredResourcesWaitingTime",
        Some("30s"),
        MILLIS,
        "Longest wait for minRegisteredResourcesRatio of the resources before scheduling.",
    ),
    KeyInfo::new(
        "scheduler.minRegisteredResourcesRatio",
        Some("0.0"),
        Unit::Fraction,
        "Fraction of the expected resources that must register before scheduling starts.",
    ),
    KeyInfo::new(
        "scheduler.mode",
        Some("FIFO"),
        Unit::Choice(&["FIFO", "FAIR"]),
        "Scheduling policy between jobs, in any case.",
    ),
    KeyInfo::new(
        "scheduler.offerShuffleSeed",
        None,
        Unit::Count,
        "flint's own: seed of the resource-offer shuffle, for a reproducible placement; \
         random (and logged) when not set.",
    ),
    KeyInfo::new(
        "scheduler.revive.interval",
        Some("1s"),
        MILLIS,
        "Interval of the driver's periodic offers of free resources.",
    ),
    KeyInfo::new(
        "speculation",
        Some("false"),
        Unit::Bool,
        "Whether slow tasks are re-launched speculatively.",
    ),
    KeyInfo::new(
        "speculation.interval",
        Some("100ms"),
        MILLIS,
        "How often to look for tasks to speculate.",
    ),
    KeyInfo::new(
        "speculation.minTaskRuntime",
        Some("100ms"),
        MILLIS,
        "The least time a task must have run before it is speculated (Spark's fixed 100 ms, \
         a key of its own since Spark 3.2).",
    ),
    KeyInfo::new(
        "speculation.multiplier",
        Some("1.5"),
        Unit::Number,
        "How many times slower than the median a task must be to be speculated.",
    ),
    KeyInfo::new(
        "speculation.quantile",
        Some("0.75"),
        Unit::Fraction,
        "Fraction of a task set's tasks that must finish before speculation is considered.",
    ),
    KeyInfo::new(
        "stage.maxConsecutiveAttempts",
        Some("4"),
        Unit::Count,
        "Consecutive attempts of a stage that may fail on fetch failures before its jobs fail.",
    ),
    KeyInfo::new(
        "starvation.timeout",
        Some("15s"),
        MILLIS,
        "How long with no task launched before the scheduler warns it has no resources.",
    ),
    KeyInfo::new(
        "task.cpus",
        Some("1"),
        Unit::Count,
        "Cores each task takes.",
    ),
    KeyInfo::new(
        "task.maxFailures",
        Some("4"),
        Unit::Count,
        "Failures of one task before its job is given up.",
    ),
];

const fn key(name: &str) -> Key {
    Key::of(KEYS, name)
}

const fn optional(name: &str) -> OptionalKey {
    OptionalKey::of(KEYS, name)
}

const BROADCAST_BLOCK_SIZE: Key = key("broadcast.blockSize");
const DEFAULT_PARALLELISM: OptionalKey = optional("default.parallelism");
const DRIVER_MAX_RESULT_SIZE: Key = key("driver.maxResultSize");
const EXCLUDE_ON_FAILURE: Key = key("excludeOnFailure.enabled");
/// The key of the threshold Spark checks third.
pub(crate) const FAILED_EXECUTORS_PER_NODE: Key =
    key("excludeOnFailure.stage.maxFailedExecutorsPerNode");
/// The key of the threshold Spark checks fourth.
pub(crate) const FAILED_TASKS_PER_EXECUTOR: Key =
    key("excludeOnFailure.stage.maxFailedTasksPerExecutor");
/// The key of the threshold Spark checks first.
pub(crate) const TASK_ATTEMPTS_PER_EXECUTOR: Key =
    key("excludeOnFailure.task.maxTaskAttemptsPerExecutor");
/// The key of the threshold Spark checks second.
pub(crate) const TASK_ATTEMPTS_PER_NODE: Key = key("excludeOnFailure.task.maxTaskAttemptsPerNode");
pub(crate) const EXECUTOR_MAX_CORES: OptionalKey = optional("executor.maxCores");
/// The key of [`SchedulerConfig::max_executor_cores`], named in refused registrations.
pub const MAX_CORES_KEY: &str = EXECUTOR_MAX_CORES.name();
const EXECUTOR_MAX_NUM_FAILURES: OptionalKey = optional("executor.maxNumFailures");
const EXECUTOR_TASK_PREFETCH: Key = key("executor.taskPrefetch");
const LOCALITY_WAIT: Key = key("locality.wait");
const SCHEDULER_ALLOCATION_FILE: OptionalKey = optional("scheduler.allocation.file");
const SCHEDULER_MAX_REGISTERED_WAIT: Key = key("scheduler.maxRegisteredResourcesWaitingTime");
const SCHEDULER_MIN_REGISTERED_RATIO: Key = key("scheduler.minRegisteredResourcesRatio");
const SCHEDULER_MODE: Key = key("scheduler.mode");
pub(crate) const SCHEDULER_OFFER_SHUFFLE_SEED: OptionalKey = optional("scheduler.offerShuffleSeed");
const SCHEDULER_REVIVE_INTERVAL: Key = key("scheduler.revive.interval");
const SPECULATION: Key = key("speculation");
const SPECULATION_INTERVAL: Key = key("speculation.interval");
const SPECULATION_MIN_TASK_RUNTIME: Key = key("speculation.minTaskRuntime");
const SPECULATION_MULTIPLIER: Key = key("speculation.multiplier");
const SPECULATION_QUANTILE: Key = key("speculation.quantile");
const STAGE_MAX_CONSECUTIVE_ATTEMPTS: Key = key("stage.maxConsecutiveAttempts");
const STARVATION_TIMEOUT: Key = key("starvation.timeout");
const TASK_CPUS: Key = key("task.cpus");
const TASK_MAX_FAILURES: Key = key("task.maxFailures");

/// The scheduling policy between jobs, `scheduler.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SchedulingMode {
    /// First in, first out: jobs run in the order they were submitted. The default.
    #[default]
    Fifo,
    /// Fair sharing between pools of jobs.
    Fair,
}

impl SchedulingMode {
    /// The mode as it is written in a conf: `FIFO` or `FAIR`.
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulingMode::Fifo => "FIFO",
            SchedulingMode::Fair => "FAIR",
        }
    }
}

impl fmt::Display for SchedulingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SchedulingMode {
    type Err = ConfError;

    /// Parses `FIFO` or `FAIR` in any case; anything else is the seeds' "Unrecognized
    /// scheduler.mode: X" ([`ConfError::Unrecognized`]).
    fn from_str(s: &str) -> Result<Self, ConfError> {
        let mode = s.trim();
        if mode.eq_ignore_ascii_case("fifo") {
            Ok(SchedulingMode::Fifo)
        } else if mode.eq_ignore_ascii_case("fair") {
            Ok(SchedulingMode::Fair)
        } else {
            Err(ConfError::Unrecognized {
                key: SCHEDULER_MODE.name(),
                value: s.to_owned(),
            })
        }
    }
}

/// When to launch speculative copies of slow tasks (`speculation.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpeculationConfig {
    /// How often to look for slow tasks (`speculation.interval`).
    pub interval: Duration,
    /// How many times slower than the median of finished tasks a running task must be
    /// (`speculation.multiplier`).
    pub multiplier: f64,
    /// The fraction of a task set's tasks that must have finished first
    /// (`speculation.quantile`).
    pub quantile: f64,
    /// The least time a task must have run to be speculated
    /// (`speculation.minTaskRuntime`, Spark's fixed 100 ms by default).
    pub min_runtime: Duration,
}

impl SpeculationConfig {
    /// Reads the `speculation.*` thresholds (whether `speculation` is on or not).
    fn from_conf(conf: &Conf) -> Result<Self, ConfError> {
        Ok(SpeculationConfig {
            interval: conf.positive_duration(SPECULATION_INTERVAL)?,
            multiplier: conf.positive_number(SPECULATION_MULTIPLIER)?,
            quantile: conf.fraction(SPECULATION_QUANTILE)?,
            min_runtime: conf.duration(SPECULATION_MIN_TASK_RUNTIME)?,
        })
    }
}

impl Default for SpeculationConfig {
    /// The keys' defaults.
    fn default() -> Self {
        SpeculationConfig::from_conf(&Conf::new()).expect("the key table's defaults are valid")
    }
}

impl ExclusionPolicy {
    /// Reads the `excludeOnFailure.*` keys. Any whole number parses; [`Self::validate`]
    /// says whether the thresholds make sense when exclusion is enabled.
    pub(crate) fn from_conf(conf: &Conf) -> Result<Self, ConfError> {
        Ok(ExclusionPolicy {
            enabled: conf.boolean(EXCLUDE_ON_FAILURE)?,
            max_task_attempts_per_executor: saturate(conf.count(TASK_ATTEMPTS_PER_EXECUTOR, 0)?),
            max_task_attempts_per_host: saturate(conf.count(TASK_ATTEMPTS_PER_NODE, 0)?),
            max_failed_tasks_per_executor: saturate(conf.count(FAILED_TASKS_PER_EXECUTOR, 0)?),
            max_failed_executors_per_host: saturate(conf.count(FAILED_EXECUTORS_PER_NODE, 0)?),
        })
    }
}

/// Everything the driver side is configured with: the task scheduler's settings and the
/// driver's own (registration, results, executor failures, offers).
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    /// Cores each task takes (`task.cpus`).
    pub task_cpus: u32,
    /// Failures of one task before its task set is aborted (`task.maxFailures`).
    pub max_task_failures: u32,
    /// Delay scheduling: how long to wait at a locality level (`locality.wait`); zero
    /// turns it off.
    pub locality_wait: Duration,
    /// Speculation settings; `None` when `speculation` is false.
    pub speculation: Option<SpeculationConfig>,
    /// The starvation warning's period (`starvation.timeout`).
    pub starvation_timeout: Duration,
    /// FIFO or FAIR (`scheduler.mode`).
    pub mode: SchedulingMode,
    /// `default.parallelism` if set.
    pub default_parallelism: Option<usize>,
    /// FAIR pools configured up front (more can be added with
    /// [`crate::TaskScheduler::add_pool`]).
    pub pools: Vec<PoolConfig>,
    /// When executors and hosts stop getting a task set's tasks
    /// (`excludeOnFailure.enabled`, off by default as in Spark, and the
    /// `excludeOnFailure.task.*` and `excludeOnFailure.stage.*` thresholds).
    pub exclusion: ExclusionPolicy,
    /// Seed of the offer shuffle. The default, 0, suits tests, which want one fixed
    /// placement; [`SchedulerConfig::from_conf`] takes `scheduler.offerShuffleSeed` or,
    /// when it is not set, a random seed, so that drivers do not all place alike.
    pub seed: u64,
    /// Tasks the driver may queue at an executor beyond its free cores
    /// (`executor.taskPrefetch`, launch pipelining); 0 launches only on free cores.
    pub prefetch: u32,
    /// The limit on the total size of one task set's results sent to the driver
    /// (`driver.maxResultSize`); `None` when 0, unlimited.
    pub max_result_size: Option<u64>,
    /// The fraction of the expected cores that must register before scheduling starts
    /// (`scheduler.minRegisteredResourcesRatio`).
    pub min_registered_ratio: f64,
    /// The longest wait for that fraction (`scheduler.maxRegisteredResourcesWaitingTime`).
    pub max_registered_wait: Duration,
    /// Executor failures after which the driver fails its jobs
    /// (`executor.maxNumFailures`); `None`: twice the executors asked for, at least 3.
    pub max_executor_failures: Option<u32>,
    /// The most cores an executor may register with (`executor.maxCores`): each is a
    /// task it may be handed in one round of offers, so a peer claiming billions would
    /// be handed every pending task at once. By default the larger of 1024 and 16 times
    /// this host's CPUs ([`default_max_executor_cores`]; 1024 from
    /// [`SchedulerConfig::read`], which reads no host).
    pub max_executor_cores: u32,
    /// The interval of the driver's periodic offers (`scheduler.revive.interval`).
    pub revive_interval: Duration,
    /// The FAIR pools file the driver reads at start (`scheduler.allocation.file`).
    pub allocation_file: Option<String>,
    /// Consecutive attempts of a stage that may fail on fetch failures before its jobs
    /// fail (`stage.maxConsecutiveAttempts`).
    pub max_consecutive_stage_attempts: u32,
}

impl Default for SchedulerConfig {
    /// The keys' defaults, with seed 0.
    fn default() -> Self {
        SchedulerConfig::read(&Conf::new()).expect("the key table's defaults are valid")
    }
}

impl SchedulerConfig {
    /// Reads the scheduler's keys from `conf`; a bad value is an error naming the key and
    /// the value (an unknown `scheduler.mode` gives "Unrecognized scheduler.mode: X").
    /// With `excludeOnFailure.enabled`, the thresholds are checked as Spark checks them
    /// ([`ExclusionPolicy::validate`]). The offer shuffle's seed is
    /// `scheduler.offerShuffleSeed`, or 0 when it is not set: the driver's
    /// [`SchedulerConfig::from_conf`] takes a random one then, so that drivers do not all
    /// place alike; this is for checking a configuration, and for tests.
    pub fn read(conf: &Conf) -> Result<Self, SchedulerError> {
        let speculation = SpeculationConfig::from_conf(conf)?;
        let max_task_failures = saturate(conf.count(TASK_MAX_FAILURES, 1)?);
        let exclusion = ExclusionPolicy::from_conf(conf)?;
        exclusion.validate(max_task_failures)?;
        Ok(SchedulerConfig {
            task_cpus: saturate(conf.count(TASK_CPUS, 1)?),
            max_task_failures,
            locality_wait: conf.duration(LOCALITY_WAIT)?,
            speculation: conf.boolean(SPECULATION)?.then_some(speculation),
            starvation_timeout: conf.positive_duration(STARVATION_TIMEOUT)?,
            mode: conf.value(SCHEDULER_MODE).parse()?,
            default_parallelism: conf.optional_count(DEFAULT_PARALLELISM, 1)?,
            pools: Vec::new(),
            exclusion,
            seed: conf
                .optional_u64(SCHEDULER_OFFER_SHUFFLE_SEED)?
                .unwrap_or(0),
            prefetch: saturate(conf.count(EXECUTOR_TASK_PREFETCH, 0)?),
            max_result_size: Some(conf.size(DRIVER_MAX_RESULT_SIZE)?).filter(|&n| n > 0),
            min_registered_ratio: conf.fraction(SCHEDULER_MIN_REGISTERED_RATIO)?,
            max_registered_wait: conf.duration(SCHEDULER_MAX_REGISTERED_WAIT)?,
            max_executor_failures: conf
                .optional_count(EXECUTOR_MAX_NUM_FAILURES, 1)?
                .map(saturate),
            max_executor_cores: conf
                .optional_count(EXECUTOR_MAX_CORES, 1)?
                .map_or_else(|| default_max_executor_cores(1), saturate),
            revive_interval: conf.positive_duration(SCHEDULER_REVIVE_INTERVAL)?,
            allocation_file: conf.text(SCHEDULER_ALLOCATION_FILE).map(str::to_owned),
            max_consecutive_stage_attempts: saturate(
                conf.count(STAGE_MAX_CONSECUTIVE_ATTEMPTS, 1)?,
            ),
        })
    }
}

/// `broadcast.blockSize`, in bytes (at least 1): the size of a broadcast's pieces.
/// Read by the driver beside [`SchedulerConfig`], which tests and benches build whole.
pub(crate) fn broadcast_block_size(conf: &Conf) -> Result<u64, ConfError> {
    Ok(conf.size(BROADCAST_BLOCK_SIZE)?.max(1))
}

/// `executor.maxCores` when it is not set, on a host with `cpus` CPUs: the larger of
/// 1024 and 16 times them (executors usually run on hosts like the driver's; 16 times
/// leaves room for larger ones and for executors that count hyper-threads or
/// oversubscribe). [`SchedulerConfig::read`] reads no host and takes 1024; the driver's
/// [`SchedulerConfig::from_conf`] passes its host's CPUs.
pub fn default_max_executor_cores(cpus: usize) -> u32 {
    saturate(cpus.saturating_mul(16)).max(1024)
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests;
