//! The scheduler's settings, read from a [`Conf`] or set directly.

use std::time::Duration;

use flint_rpc::conf::{Conf, SchedulingMode};
use tracing::info;

use crate::error::SchedulerError;
use crate::exclusion::ExclusionPolicy;
use crate::pool::PoolConfig;
use crate::rng::random_seed;

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
    /// The least time a task must have run to be speculated (Spark's fixed 100 ms).
    pub min_runtime: Duration,
}

impl Default for SpeculationConfig {
    fn default() -> Self {
        SpeculationConfig {
            interval: Duration::from_millis(100),
            multiplier: 1.5,
            quantile: 0.75,
            min_runtime: Duration::from_millis(100),
        }
    }
}

/// Everything the task scheduler is configured with.
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
}

impl Default for SchedulerConfig {
    /// The documented defaults of every key.
    fn default() -> Self {
        SchedulerConfig {
            task_cpus: 1,
            max_task_failures: 4,
            locality_wait: Duration::from_secs(3),
            speculation: None,
            starvation_timeout: Duration::from_secs(15),
            mode: SchedulingMode::Fifo,
            default_parallelism: None,
            pools: Vec::new(),
            exclusion: ExclusionPolicy::disabled(),
            seed: 0,
        }
    }
}

impl SchedulerConfig {
    /// Reads the scheduler's keys from `conf`; a bad value is an error naming the key
    /// and the value (an unknown `scheduler.mode` gives "Unrecognized scheduler.mode: X").
    /// With `excludeOnFailure.enabled`, the thresholds are checked as Spark checks them
    /// ([`ExclusionPolicy::validate`]).
    ///
    /// The offer shuffle's seed is `scheduler.offerShuffleSeed` if set; otherwise a random
    /// one, logged at INFO so that a run's placement can be replayed. This is the one
    /// place the scheduler takes anything from its environment: the state machine itself
    /// stays deterministic given its configuration.
    pub fn from_conf(conf: &Conf) -> Result<Self, SchedulerError> {
        let speculation = if conf.speculation()? {
            Some(SpeculationConfig {
                interval: conf.speculation_interval()?,
                multiplier: conf.speculation_multiplier()?,
                quantile: conf.speculation_quantile()?,
                ..SpeculationConfig::default()
            })
        } else {
            None
        };
        let max_task_failures = saturate(conf.task_max_failures()?);
        let exclusion = ExclusionPolicy {
            enabled: conf.exclude_on_failure()?,
            max_task_attempts_per_executor: saturate(
                conf.exclude_on_failure_max_task_attempts_per_executor()?,
            ),
            max_task_attempts_per_host: saturate(
                conf.exclude_on_failure_max_task_attempts_per_node()?,
            ),
            max_failed_tasks_per_executor: saturate(
                conf.exclude_on_failure_max_failed_tasks_per_executor()?,
            ),
            max_failed_executors_per_host: saturate(
                conf.exclude_on_failure_max_failed_executors_per_node()?,
            ),
        };
        exclusion.validate(max_task_failures)?;
        let seed = match conf.offer_shuffle_seed()? {
            Some(seed) => seed,
            None => {
                let seed = random_seed();
                info!("Shuffling resource offers with seed {seed} (set scheduler.offerShuffleSeed={seed} to replay this placement)");
                seed
            }
        };
        Ok(SchedulerConfig {
            task_cpus: saturate(conf.task_cpus()?),
            max_task_failures,
            locality_wait: conf.locality_wait()?,
            speculation,
            starvation_timeout: conf.starvation_timeout()?,
            mode: conf.scheduler_mode()?,
            default_parallelism: conf.default_parallelism()?,
            exclusion,
            seed,
            ..SchedulerConfig::default()
        })
    }
}

fn saturate(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}
