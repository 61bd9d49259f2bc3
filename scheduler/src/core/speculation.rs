//! When a running task is slow enough for a speculative copy (Spark's
//! `checkSpeculatableTasks` arithmetic).

use std::time::Duration;

use crate::core::config::SpeculationConfig;

/// The successes a task set of `num_tasks` needs before any of its tasks is speculated:
/// `quantile` of them, at least one.
pub fn min_finished_for_speculation(num_tasks: usize, quantile: f64) -> usize {
    ((quantile * num_tasks as f64).floor() as usize).max(1)
}

/// How long a task must have run to be speculated: `multiplier` × the median of the
/// successful run times (in nanoseconds), and at least the minimum run time. `scratch`
/// is reused to find the median without sorting the caller's list.
pub fn speculation_threshold(
    successful_durations_ns: &[u64],
    config: &SpeculationConfig,
    scratch: &mut Vec<u64>,
) -> Duration {
    scratch.clear();
    scratch.extend_from_slice(successful_durations_ns);
    if scratch.is_empty() {
        return config.min_runtime;
    }
    let middle = scratch.len() / 2;
    let median = *scratch.select_nth_unstable(middle).1;
    // A huge speculation.multiplier (any finite one is accepted) saturates instead of
    // overflowing: no task is then slow enough to copy.
    Duration::try_from_secs_f64(Duration::from_nanos(median).as_secs_f64() * config.multiplier)
        .unwrap_or(Duration::MAX)
        .max(config.min_runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_multiplier_saturates() {
        let config = SpeculationConfig {
            multiplier: 1e30,
            ..SpeculationConfig::default()
        };
        let threshold = speculation_threshold(&[1_000_000_000], &config, &mut Vec::new());
        assert_eq!(threshold, Duration::MAX);
    }

    #[test]
    fn threshold_is_multiplier_times_median_but_at_least_the_minimum() {
        let config = SpeculationConfig::default();
        let ms = |n: u64| n * 1_000_000;
        let mut scratch = Vec::new();
        let durations = [ms(1000), ms(200), ms(400)];
        assert_eq!(
            speculation_threshold(&durations, &config, &mut scratch),
            Duration::from_millis(600)
        );
        assert_eq!(
            speculation_threshold(&[ms(10)], &config, &mut scratch),
            Duration::from_millis(100)
        );
        assert_eq!(min_finished_for_speculation(10, 0.75), 7);
        assert_eq!(min_finished_for_speculation(1, 0.75), 1);
    }
}
