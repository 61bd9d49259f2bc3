//! What the driver takes from its environment as it starts: the scheduler's
//! configuration with a random offer-shuffle seed when none is set, and a cap on
//! executors' cores from this host's CPUs. The pure core
//! ([`crate::core`]) reads no clock and no process state; this is the one place its
//! configuration does.

use flint_rpc::conf::Conf;
use tracing::info;

use crate::core::config::{
    default_max_executor_cores, SchedulerConfig, EXECUTOR_MAX_CORES, SCHEDULER_OFFER_SHUFFLE_SEED,
};
use crate::core::error::SchedulerError;
use crate::core::task_scheduler::TaskScheduler;

/// A seed that differs from call to call and from process to process: std's
/// OS-seeded hasher keys mixed with the time and the process id. For a production
/// driver's offer shuffle, which should not place tasks as every other driver does;
/// tests and simulations pass fixed seeds instead.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(since_epoch);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

impl SchedulerConfig {
    /// Reads the scheduler's keys from `conf` as the driver starts with them
    /// ([`SchedulerConfig::read`]). The offer shuffle's seed is
    /// `scheduler.offerShuffleSeed` if set; otherwise a random one, logged at INFO so
    /// that a run's placement can be replayed. `executor.maxCores`, when not set, is
    /// the larger of 1024 and 16 times this host's CPUs.
    pub fn from_conf(conf: &Conf) -> Result<Self, SchedulerError> {
        let mut config = SchedulerConfig::read(conf)?;
        if conf.optional_count(EXECUTOR_MAX_CORES, 1)?.is_none() {
            let cpus = std::thread::available_parallelism().map_or(1, usize::from);
            config.max_executor_cores = default_max_executor_cores(cpus);
        }
        if conf.optional_u64(SCHEDULER_OFFER_SHUFFLE_SEED)?.is_none() {
            let seed = random_seed();
            info!("Shuffling resource offers with seed {seed} (set scheduler.offerShuffleSeed={seed} to replay this placement)");
            config.seed = seed;
        }
        Ok(config)
    }
}

impl TaskScheduler {
    /// A scheduler configured from `conf` (see [`SchedulerConfig::from_conf`]).
    pub fn from_conf(conf: &Conf) -> Result<Self, SchedulerError> {
        Ok(TaskScheduler::new(SchedulerConfig::from_conf(conf)?))
    }
}
