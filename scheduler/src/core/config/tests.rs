//! The scheduler's keys: defaults from the table, units, ranges and texts.

use std::time::Duration;

use flint_rpc::conf::{Conf, ConfError, MAX_DURATION};

use super::*;

fn conf(pairs: &[(&str, &str)]) -> Conf {
    pairs.iter().copied().collect()
}

fn read(pairs: &[(&str, &str)]) -> Result<SchedulerConfig, SchedulerError> {
    SchedulerConfig::read(&conf(pairs))
}

/// Asserts that reading `key=value` fails with an invalid-value error naming both.
fn assert_refused(key: &str, value: &str) {
    let err = read(&[(key, value)]).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, SchedulerError::Conf(ConfError::InvalidValue { key: k, value: v, .. }) if *k == key && v == value),
        "{key}={value}: {err:?}"
    );
    assert!(text.contains(key), "{text}");
    assert!(text.contains(&format!("{value:?}")), "{text}");
    assert!(text.contains("expected "), "{text}");
}

#[test]
fn defaults_come_from_the_table() {
    let c = SchedulerConfig::default();
    assert_eq!(c.task_cpus, 1);
    assert_eq!(c.max_task_failures, 4);
    assert_eq!(c.locality_wait, Duration::from_secs(3));
    assert_eq!(c.speculation, None);
    assert_eq!(c.starvation_timeout, Duration::from_secs(15));
    assert_eq!(c.mode, SchedulingMode::Fifo);
    assert_eq!(c.default_parallelism, None);
    assert_eq!(c.exclusion, ExclusionPolicy::disabled());
    assert_eq!(c.seed, 0);
    assert_eq!(c.prefetch, 0);
    assert_eq!(c.max_result_size, Some(1 << 30));
    assert_eq!(c.min_registered_ratio, 0.0);
    assert_eq!(c.max_registered_wait, Duration::from_secs(30));
    assert_eq!(c.max_executor_failures, None);
    assert_eq!(c.revive_interval, Duration::from_secs(1));
    assert_eq!(c.allocation_file, None);
    assert_eq!(c.max_consecutive_stage_attempts, 4);
    assert_eq!(
        SpeculationConfig::default(),
        SpeculationConfig {
            interval: Duration::from_millis(100),
            multiplier: 1.5,
            quantile: 0.75,
            min_runtime: Duration::from_millis(100),
        }
    );
    let exclusion = ExclusionPolicy::default();
    assert!(exclusion.enabled);
    assert_eq!(
        (
            exclusion.max_task_attempts_per_executor,
            exclusion.max_task_attempts_per_host,
            exclusion.max_failed_tasks_per_executor,
            exclusion.max_failed_executors_per_host
        ),
        (1, 2, 2, 2)
    );
}

#[test]
fn the_table_is_sorted_unique_and_documented_in_one_line() {
    let keys: Vec<_> = KEYS.iter().map(|k| k.key).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(keys, sorted);
    assert_eq!(keys.len(), 27);
    for info in KEYS {
        assert!(!info.doc.is_empty(), "{}", info.key);
        assert!(!info.doc.contains('\n'), "{}", info.key);
        assert!(!info.key.starts_with("spark."), "{}", info.key);
        assert!(
            flint_rpc::conf::KEYS.iter().all(|rpc| rpc.key != info.key),
            "{} is the transport's",
            info.key
        );
    }
}

#[test]
fn setting_every_key_to_its_table_default_changes_nothing() {
    let explicit: Conf = KEYS
        .iter()
        .filter_map(|k| k.default.map(|d| (k.key, d)))
        .collect();
    assert_eq!(
        SchedulerConfig::read(&explicit),
        Ok(SchedulerConfig::default())
    );
}

#[test]
fn every_key_is_read() {
    let c = read(&[
        ("spark.task.cpus", "2"),
        ("task.maxFailures", "8"),
        ("locality.wait", "250"),
        ("speculation", "TRUE"),
        ("speculation.interval", "50"),
        ("speculation.multiplier", "3"),
        ("speculation.quantile", "0.5"),
        ("speculation.minTaskRuntime", "1s"),
        ("starvation.timeout", "2000"),
        ("scheduler.mode", " fair "),
        ("default.parallelism", "8"),
        ("excludeOnFailure.enabled", "true"),
        ("scheduler.offerShuffleSeed", "18446744073709551615"),
        ("executor.taskPrefetch", "2"),
        ("driver.maxResultSize", "0"),
        ("scheduler.minRegisteredResourcesRatio", "1"),
        ("scheduler.maxRegisteredResourcesWaitingTime", "1500"),
        ("executor.maxNumFailures", "5"),
        ("scheduler.revive.interval", "250"),
        ("scheduler.allocation.file", "pools.txt"),
        ("stage.maxConsecutiveAttempts", "2"),
    ])
    .unwrap();
    assert_eq!(c.task_cpus, 2);
    assert_eq!(c.max_task_failures, 8);
    assert_eq!(c.locality_wait, Duration::from_millis(250));
    assert_eq!(
        c.speculation,
        Some(SpeculationConfig {
            interval: Duration::from_millis(50),
            multiplier: 3.0,
            quantile: 0.5,
            min_runtime: Duration::from_secs(1),
        })
    );
    assert_eq!(c.starvation_timeout, Duration::from_secs(2));
    assert_eq!(c.mode, SchedulingMode::Fair);
    assert_eq!(c.default_parallelism, Some(8));
    assert_eq!(c.exclusion, ExclusionPolicy::default());
    assert_eq!(c.seed, u64::MAX);
    assert_eq!(c.prefetch, 2);
    assert_eq!(c.max_result_size, None);
    assert_eq!(c.min_registered_ratio, 1.0);
    assert_eq!(c.max_registered_wait, Duration::from_millis(1500));
    assert_eq!(c.max_executor_failures, Some(5));
    assert_eq!(c.revive_interval, Duration::from_millis(250));
    assert_eq!(c.allocation_file.as_deref(), Some("pools.txt"));
    assert_eq!(c.max_consecutive_stage_attempts, 2);
    // A set seed is kept, and nothing is drawn.
    let c = SchedulerConfig::from_conf(&conf(&[("scheduler.offerShuffleSeed", "7")])).unwrap();
    assert_eq!(c.seed, 7);
}

#[test]
fn exclusion_thresholds_parse_any_whole_number_and_are_checked_when_enabled() {
    let c = read(&[
        (
            "spark.excludeOnFailure.task.maxTaskAttemptsPerExecutor",
            "3",
        ),
        ("excludeOnFailure.task.maxTaskAttemptsPerNode", " 3 "),
        ("excludeOnFailure.stage.maxFailedTasksPerExecutor", "0"),
        ("excludeOnFailure.stage.maxFailedExecutorsPerNode", "5"),
    ])
    .unwrap();
    let policy = c.exclusion;
    assert!(!policy.enabled);
    assert_eq!(policy.max_task_attempts_per_executor, 3);
    assert_eq!(policy.max_task_attempts_per_host, 3);
    // Zero parses: whether it is allowed depends on excludeOnFailure.enabled.
    assert_eq!(policy.max_failed_tasks_per_executor, 0);
    assert_eq!(policy.max_failed_executors_per_host, 5);
    let err = read(&[
        ("excludeOnFailure.enabled", "true"),
        ("excludeOnFailure.stage.maxFailedTasksPerExecutor", "0"),
    ])
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "excludeOnFailure.stage.maxFailedTasksPerExecutor was 0, but must be > 0."
    );
    assert_refused("excludeOnFailure.task.maxTaskAttemptsPerNode", "-1");
    assert_refused("scheduler.offerShuffleSeed", "random");
}

#[test]
fn zero_is_refused_where_it_would_spin_and_meaningful_elsewhere() {
    for key in [
        "scheduler.revive.interval",
        "speculation.interval",
        "starvation.timeout",
    ] {
        let err = read(&[(key, "0s")]).unwrap_err();
        assert!(err.to_string().contains("above zero"), "{err}");
        assert_refused(key, "0s");
    }
    let c = read(&[
        ("locality.wait", "0"),
        ("scheduler.maxRegisteredResourcesWaitingTime", "0s"),
    ])
    .unwrap();
    assert_eq!(c.locality_wait, Duration::ZERO);
    assert_eq!(c.max_registered_wait, Duration::ZERO);
}

#[test]
fn durations_are_capped_and_malformed_ones_named() {
    assert_refused("locality.wait", "3153600000001");
    let c = read(&[("locality.wait", "3153600000000")]).unwrap();
    assert_eq!(c.locality_wait, MAX_DURATION);
    for value in ["12x", "", "1.5s", "-1s"] {
        assert_refused("locality.wait", value);
        assert_refused("scheduler.maxRegisteredResourcesWaitingTime", value);
    }
}

#[test]
fn scheduler_mode() {
    for (value, mode) in [
        ("FIFO", SchedulingMode::Fifo),
        ("fifo", SchedulingMode::Fifo),
        ("FAIR", SchedulingMode::Fair),
        ("Fair", SchedulingMode::Fair),
        (" fair ", SchedulingMode::Fair),
    ] {
        assert_eq!(read(&[("scheduler.mode", value)]).unwrap().mode, mode);
    }
    let err = read(&[("spark.scheduler.mode", "LIFO")]).unwrap_err();
    assert_eq!(err.to_string(), "Unrecognized scheduler.mode: LIFO");
    assert_eq!(
        err,
        SchedulerError::Conf(ConfError::Unrecognized {
            key: "scheduler.mode",
            value: "LIFO".into()
        })
    );
    assert_eq!(SchedulingMode::Fair.to_string(), "FAIR");
    assert_eq!("fifo".parse(), Ok(SchedulingMode::Fifo));
    assert_eq!(SchedulingMode::default(), SchedulingMode::Fifo);
}

#[test]
fn fractions_numbers_and_booleans_are_bounded() {
    for value in ["1.01", "-0.1", "NaN", "inf", "half", ""] {
        assert_refused("scheduler.minRegisteredResourcesRatio", value);
        assert_refused("speculation.quantile", value);
    }
    let err = read(&[("speculation.quantile", "2")]).unwrap_err();
    assert!(err
        .to_string()
        .ends_with("expected a number between 0.0 and 1.0"));
    for value in ["0", "-1.5", "NaN", "inf", "x"] {
        assert_refused("speculation.multiplier", value);
    }
    for value in ["yes", "1", ""] {
        assert_refused("speculation", value);
        assert_refused("excludeOnFailure.enabled", value);
    }
    assert_eq!(
        read(&[("speculation", "yes")]).unwrap_err().to_string(),
        r#"invalid value "yes" for speculation: expected true or false"#
    );
}

#[test]
fn counts() {
    for value in ["0", "-1", "1.5", "two", ""] {
        for key in [
            "task.cpus",
            "task.maxFailures",
            "default.parallelism",
            "executor.maxNumFailures",
            "stage.maxConsecutiveAttempts",
        ] {
            assert_refused(key, value);
        }
    }
    assert_eq!(
        read(&[("task.cpus", "0")]).unwrap_err().to_string(),
        r#"invalid value "0" for task.cpus: expected a whole number of at least 1"#
    );
    for value in ["-1", "x"] {
        assert_refused("executor.taskPrefetch", value);
    }
}

#[test]
fn result_sizes() {
    for (value, expected) in [("512k", 512 << 10), ("1g", 1 << 30), ("4096", 4096)] {
        let c = read(&[("driver.maxResultSize", value)]).unwrap();
        assert_eq!(c.max_result_size, Some(expected), "{value}");
    }
    assert_refused("driver.maxResultSize", "1x");
    assert_eq!(
        read(&[("driver.maxResultSize", "1x")])
            .unwrap_err()
            .to_string(),
        r#"invalid value "1x" for driver.maxResultSize: expected a size such as 128m, 512k or 1g"#
    );
}

#[test]
fn executor_max_cores_defaults_to_the_larger_of_1024_and_16_times_the_cpus() {
    use crate::core::config::default_max_executor_cores;
    assert_eq!(default_max_executor_cores(2), 1024);
    assert_eq!(default_max_executor_cores(64), 1024);
    assert_eq!(default_max_executor_cores(65), 1040);
    assert_eq!(default_max_executor_cores(usize::MAX), u32::MAX);
    assert_eq!(SchedulerConfig::default().max_executor_cores, 1024);
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let driver = SchedulerConfig::from_conf(&conf(&[])).unwrap();
    assert_eq!(driver.max_executor_cores, default_max_executor_cores(cpus));
    let set = SchedulerConfig::from_conf(&conf(&[("executor.maxCores", "8")])).unwrap();
    assert_eq!(set.max_executor_cores, 8, "a set value is kept");
    let c = read(&[("executor.maxCores", "64")]).unwrap();
    assert_eq!(c.max_executor_cores, 64);
    let c = read(&[("executor.maxCores", "99999999999")]).unwrap();
    assert_eq!(c.max_executor_cores, u32::MAX, "saturated");
    for value in ["0", "-1", "many", ""] {
        assert_refused("executor.maxCores", value);
    }
}

#[test]
fn the_broadcast_block_size_is_read_beside_the_config() {
    use crate::core::config::broadcast_block_size;
    assert_eq!(broadcast_block_size(&Conf::new()), Ok(4 << 20));
    let conf: Conf = [("spark.broadcast.blockSize", "1m")].into_iter().collect();
    assert_eq!(broadcast_block_size(&conf), Ok(1 << 20));
    let conf: Conf = [("broadcast.blockSize", "0")].into_iter().collect();
    assert_eq!(broadcast_block_size(&conf), Ok(1), "at least a byte");
    let conf: Conf = [("broadcast.blockSize", "lots")].into_iter().collect();
    let error = broadcast_block_size(&conf).unwrap_err();
    assert!(error.to_string().contains("broadcast.blockSize"), "{error}");
}
