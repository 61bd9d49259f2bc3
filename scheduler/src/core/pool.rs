//! Pools: the order in which task sets get offers.
//!
//! In FIFO mode every task set sits in one root pool (named `""`, as in Spark) and runs
//! by job, then stage. In FAIR mode the root pool holds named pools, ordered as Spark's
//! `FairSchedulingAlgorithm` orders them: pools below their `minShare` of running tasks
//! first (the lowest running/minShare ratio first), then the lowest running/weight
//! ratio, ties broken by name. Inside a pool task sets run FIFO, or FAIR with weight 1
//! and minShare 0 each.
//!
//! # Pools file
//!
//! One pool a line: `pool NAME [weight=N] [minShare=N] [mode=FIFO|FAIR]`; `weight`
//! defaults to 1 (at least 1), `minShare` to 0, `mode` (inside the pool) to FIFO. Blank
//! lines and lines starting with `#` are ignored. An error names the line.
//!
//! ```
//! let pools = flint_scheduler::PoolConfig::parse_file(
//!     "# nightly jobs get half the weight\n\
//!      pool production weight=2 minShare=4\n\
//!      pool nightly mode=FAIR\n",
//! )
//! .unwrap();
//! assert_eq!(pools[0].weight, 2);
//! assert_eq!(&*pools[1].name, "nightly");
//! ```

use std::cmp::Ordering;

use crate::core::config::SchedulingMode;
use flint_wire::SharedStr;
use tracing::warn;

/// The pool of task sets submitted without one, in FAIR mode.
pub const DEFAULT_POOL: &str = "default";

/// A FAIR pool's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// The pool's name, which task sets name in [`crate::TaskSet::pool`].
    pub name: SharedStr,
    /// How the pool orders its own task sets.
    pub mode: SchedulingMode,
    /// Its share relative to other pools once all have their minimum share.
    pub weight: u32,
    /// Running tasks the pool is given before weights count.
    pub min_share: u32,
}

impl PoolConfig {
    /// A pool with the defaults: FIFO inside, weight 1, minShare 0.
    pub fn new(name: impl Into<SharedStr>) -> Self {
        PoolConfig {
            name: name.into(),
            mode: SchedulingMode::Fifo,
            weight: 1,
            min_share: 0,
        }
    }

    /// Parses a pools file (format in the [module docs](self)).
    pub fn parse_file(text: &str) -> Result<Vec<PoolConfig>, PoolsFileError> {
        let mut pools: Vec<PoolConfig> = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line_number = number + 1;
            let error = |message: String| PoolsFileError {
                line: line_number,
                text: line.to_owned(),
                message,
            };
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let mut words = trimmed.split_whitespace();
            if words.next() != Some("pool") {
                return Err(error(
                    "expected a line `pool NAME [weight=N] [minShare=N] [mode=FIFO|FAIR]`".into(),
                ));
            }
            let name = words
                .next()
                .ok_or_else(|| error("the pool has no name".into()))?;
            if name.contains('=') {
                return Err(error("the pool has no name".into()));
            }
            if pools.iter().any(|p| &*p.name == name) {
                return Err(error(format!("pool {name} is defined twice")));
            }
            let mut pool = PoolConfig::new(name);
            for setting in words {
                let (key, value) = setting
                    .split_once('=')
                    .ok_or_else(|| error(format!("expected key=value, got {setting:?}")))?;
                match key {
                    "weight" => {
                        pool.weight = value.parse().ok().filter(|&w| w >= 1).ok_or_else(|| {
                            error(format!(
                                "invalid weight {value:?}: expected a whole number of at least 1"
                            ))
                        })?
                    }
                    "minShare" => {
                        pool.min_share = value.parse().map_err(|_| {
                            error(format!(
                                "invalid minShare {value:?}: expected a whole number"
                            ))
                        })?
                    }
                    "mode" => {
                        pool.mode = value
                            .parse()
                            .map_err(|e: flint_rpc::conf::ConfError| error(e.to_string()))?
                    }
                    other => {
                        return Err(error(format!(
                            "unknown setting {other:?}: expected weight, minShare or mode"
                        )))
                    }
                }
            }
            pools.push(pool);
        }
        Ok(pools)
    }
}

/// A pools file that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pools file, line {line}: {message} (the line: {text:?})")]
pub struct PoolsFileError {
    /// The line, counting from 1.
    pub line: usize,
    /// The line's text.
    pub text: String,
    /// What is wrong with it.
    pub message: String,
}

/// What the pool orderings look at of a pool or task set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SchedulableStats<'a> {
    /// Its name (ties are broken by name).
    pub name: &'a str,
    /// Its running tasks.
    pub running_tasks: usize,
    /// Its minimum share.
    pub min_share: u32,
    /// Its weight.
    pub weight: u32,
}

/// Spark's `FairSchedulingAlgorithm`: whether `a` goes before `b`, as an ordering.
pub fn fair_order(a: &SchedulableStats<'_>, b: &SchedulableStats<'_>) -> Ordering {
    let a_needy = a.running_tasks < a.min_share as usize;
    let b_needy = b.running_tasks < b.min_share as usize;
    let by_ratio = match (a_needy, b_needy) {
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        (true, true) => {
            let ratio =
                |s: &SchedulableStats<'_>| s.running_tasks as f64 / f64::from(s.min_share.max(1));
            ratio(a).total_cmp(&ratio(b))
        }
        (false, false) => {
            let ratio =
                |s: &SchedulableStats<'_>| s.running_tasks as f64 / f64::from(s.weight.max(1));
            ratio(a).total_cmp(&ratio(b))
        }
    };
    by_ratio.then_with(|| a.name.cmp(b.name))
}

/// What pools need of a task set to order it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct TaskSetStats<'a> {
    pub key: u32,
    pub job_id: u32,
    pub stage_id: u32,
    pub name: &'a str,
    pub running_tasks: usize,
}

fn fifo_order(a: &TaskSetStats<'_>, b: &TaskSetStats<'_>) -> Ordering {
    (a.job_id, a.stage_id, a.key).cmp(&(b.job_id, b.stage_id, b.key))
}

fn fair_task_set_order(a: &TaskSetStats<'_>, b: &TaskSetStats<'_>) -> Ordering {
    fn stats<'a>(s: &TaskSetStats<'a>) -> SchedulableStats<'a> {
        SchedulableStats {
            name: s.name,
            running_tasks: s.running_tasks,
            min_share: 0,
            weight: 1,
        }
    }
    fair_order(&stats(a), &stats(b)).then_with(|| a.key.cmp(&b.key))
}

#[derive(Debug)]
struct Pool {
    config: PoolConfig,
    task_sets: Vec<u32>,
}

/// The pools and which task sets are in each.
#[derive(Debug)]
pub(crate) struct Pools {
    mode: SchedulingMode,
    pools: Vec<Pool>,
    /// Scratch of [`Pools::sorted_task_sets`], kept so that a round of offers
    /// allocates nothing: running tasks per pool, and the pools in order.
    running_scratch: Vec<usize>,
    order_scratch: Vec<usize>,
}

impl Pools {
    pub fn new(mode: SchedulingMode, configs: &[PoolConfig]) -> Self {
        let mut pools = Pools {
            mode,
            pools: Vec::new(),
            running_scratch: Vec::new(),
            order_scratch: Vec::new(),
        };
        match mode {
            SchedulingMode::Fifo => pools.pools.push(Pool {
                config: PoolConfig::new(""),
                task_sets: Vec::new(),
            }),
            SchedulingMode::Fair => {
                for config in configs {
                    pools.add_pool(config.clone());
                }
                if pools.find(DEFAULT_POOL).is_none() {
                    pools.add_pool(PoolConfig::new(DEFAULT_POOL));
                }
            }
        }
        pools
    }

    pub fn mode(&self) -> SchedulingMode {
        self.mode
    }

    /// Adds or replaces a pool's settings (FAIR mode; FIFO has only its root pool).
    pub fn add_pool(&mut self, config: PoolConfig) {
        if self.mode == SchedulingMode::Fifo {
            return;
        }
        match self.find(&config.name) {
            Some(i) => self.pools[i].config = config,
            None => self.pools.push(Pool {
                config,
                task_sets: Vec::new(),
            }),
        }
    }

    pub fn pool_configs(&self) -> impl Iterator<Item = &PoolConfig> {
        self.pools.iter().map(|p| &p.config)
    }

    fn find(&self, name: &str) -> Option<usize> {
        self.pools.iter().position(|p| &*p.config.name == name)
    }

    /// Puts a task set in its pool and returns the pool's name.
    pub fn add_task_set(&mut self, key: u32, pool: Option<&SharedStr>) -> SharedStr {
        let index = match self.mode {
            SchedulingMode::Fifo => 0,
            SchedulingMode::Fair => {
                let name: &str = pool.map_or(DEFAULT_POOL, |p| p);
                match self.find(name) {
                    Some(i) => i,
                    None => {
                        let config = PoolConfig::new(name);
                        warn!(
                            "A job was submitted with scheduler pool {name}, which has not been configured. \
                             This can happen when the file that pools are read from isn't set, or when that \
                             file doesn't contain {name}. Created {name} with default configuration \
                             (schedulingMode: {}, minShare: {}, weight: {})",
                            config.mode, config.min_share, config.weight
                        );
                        self.pools.push(Pool {
                            config,
                            task_sets: Vec::new(),
                        });
                        self.pools.len() - 1
                    }
                }
            }
        };
        self.pools[index].task_sets.push(key);
        self.pools[index].config.name.clone()
    }

    pub fn remove_task_set(&mut self, key: u32) {
        for pool in &mut self.pools {
            if let Some(i) = pool.task_sets.iter().position(|&k| k == key) {
                pool.task_sets.remove(i);
                return;
            }
        }
    }

    /// Every task set, in the order they get offers.
    pub fn sorted_task_sets<'a>(
        &mut self,
        stats_of: impl Fn(u32) -> TaskSetStats<'a>,
        out: &mut Vec<u32>,
    ) {
        out.clear();
        if let [pool] = self.pools.as_slice() {
            if let [only] = pool.task_sets.as_slice() {
                out.push(*only);
                return;
            }
        }
        let Pools {
            pools,
            running_scratch: running,
            order_scratch: order,
            ..
        } = self;
        running.clear();
        running.extend(pools.iter().map(|pool| {
            pool.task_sets
                .iter()
                .map(|&k| stats_of(k).running_tasks)
                .sum::<usize>()
        }));
        let pool_stats = |i: usize| SchedulableStats {
            name: &pools[i].config.name,
            running_tasks: running[i],
            min_share: pools[i].config.min_share,
            weight: pools[i].config.weight,
        };
        order.clear();
        order.extend(0..pools.len());
        order.sort_by(|&a, &b| fair_order(&pool_stats(a), &pool_stats(b)));
        for &i in order.iter() {
            let start = out.len();
            out.extend_from_slice(&pools[i].task_sets);
            let task_sets = &mut out[start..];
            match pools[i].config.mode {
                SchedulingMode::Fifo => {
                    task_sets.sort_by(|&a, &b| fifo_order(&stats_of(a), &stats_of(b)))
                }
                SchedulingMode::Fair => {
                    task_sets.sort_by(|&a, &b| fair_task_set_order(&stats_of(a), &stats_of(b)))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(
        name: &str,
        running_tasks: usize,
        min_share: u32,
        weight: u32,
    ) -> SchedulableStats<'_> {
        SchedulableStats {
            name,
            running_tasks,
            min_share,
            weight,
        }
    }

    #[test]
    fn needy_pools_go_first_by_min_share_ratio() {
        // b is below its minShare, a is not: b first, whatever the weights.
        let a = stats("a", 5, 2, 100);
        let b = stats("b", 1, 2, 1);
        assert_eq!(fair_order(&b, &a), Ordering::Less);
        // Both needy: 1/4 < 1/2.
        let c = stats("c", 1, 4, 1);
        assert_eq!(fair_order(&c, &b), Ordering::Less);
    }

    #[test]
    fn satisfied_pools_go_by_running_over_weight_then_name() {
        let heavy = stats("heavy", 4, 0, 4);
        let light = stats("light", 2, 0, 1);
        assert_eq!(fair_order(&heavy, &light), Ordering::Less); // 1.0 < 2.0
        let x = stats("x", 2, 0, 1);
        let y = stats("y", 2, 0, 1);
        assert_eq!(fair_order(&x, &y), Ordering::Less);
        assert_eq!(fair_order(&y, &x), Ordering::Greater);
    }

    #[test]
    fn pools_file_parses_and_errors_name_the_line() {
        let pools = PoolConfig::parse_file("\n# c\npool a weight=3 minShare=2 mode=fair\npool b\n")
            .unwrap();
        assert_eq!(pools.len(), 2);
        assert_eq!(
            (pools[0].weight, pools[0].min_share, pools[0].mode),
            (3, 2, SchedulingMode::Fair)
        );
        assert_eq!(
            (pools[1].weight, pools[1].min_share, pools[1].mode),
            (1, 0, SchedulingMode::Fifo)
        );

        let err = PoolConfig::parse_file("pool a\npool b weight=zero\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(
            err.to_string()
                .starts_with("pools file, line 2: invalid weight \"zero\""),
            "{err}"
        );

        let err = PoolConfig::parse_file("pool a mode=LIFO").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(
            err.to_string()
                .contains("Unrecognized scheduler.mode: LIFO"),
            "{err}"
        );

        for bad in [
            "queue a",
            "pool",
            "pool a colour=red",
            "pool a weight",
            "pool a\npool a",
        ] {
            assert!(PoolConfig::parse_file(bad).is_err(), "{bad}");
        }
    }
}
