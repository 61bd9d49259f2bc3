//! The executor's configuration: the keys an executor reads (one table, [`KEYS`], with
//! their defaults), and [`ExecutorConfig`], what an executor is and what it runs with.

use std::path::PathBuf;
use std::time::Duration;

use flint_rpc::conf::{Conf, ConfError, Key, KeyInfo, OptionalKey, TimeUnit, Unit};

/// Every key an executor reads, in alphabetical order, with its default, unit and
/// meaning. (The transport's keys, `rpc.message.maxSize` among them, are
/// [`flint_rpc::conf::KEYS`].)
pub const KEYS: &[KeyInfo] = &[
    KeyInfo::new(
        "blockManager.port",
        Some("0"),
        Unit::Port,
        "Port of the executor's block server, which serves its shuffle blocks; 0 is any free port.",
    ),
    KeyInfo::new(
        "broadcast.maxSize",
        Some("1g"),
        Unit::Bytes,
        "flint's own: the largest broadcast an executor fetches; a larger one fails the tasks \
         that read it, and nothing is allocated for it.",
    ),
    KeyInfo::new(
        "executor.busyPoll",
        Some("50us"),
        Unit::Duration(TimeUnit::Micros),
        "flint's own: how long a task runner looks for its next task before it sleeps; at \
         most 1s.",
    ),
    KeyInfo::new(
        "executor.connectTimeout",
        Some("30s"),
        Unit::Duration(TimeUnit::Millis),
        "flint's own: how long an executor keeps trying to reach its driver before it exits, \
         so that start order does not matter; 0 tries once.",
    ),
    KeyInfo::new(
        "executor.heartbeat.maxFailures",
        Some("60"),
        Unit::Count,
        "Heartbeats an executor may fail to deliver in a row before it exits with code 56.",
    ),
    KeyInfo::new(
        "executor.heartbeatInterval",
        Some("10s"),
        Unit::Duration(TimeUnit::Millis),
        "Interval between an executor's heartbeats, after a random initial delay; below \
         network.timeout.",
    ),
    KeyInfo::new(
        "local.dir",
        None,
        Unit::Text,
        "Directory of shuffle spill files, removed when the executor stops; the system's \
         temporary directory when not set.",
    ),
    KeyInfo::new(
        "reducer.maxSizeInFlight",
        Some("48m"),
        Unit::Mebibytes,
        "Bytes of shuffle blocks a reduce task has requested and not yet received.",
    ),
    KeyInfo::new(
        "shuffle.maxMemory",
        Some("256m"),
        Unit::Bytes,
        "flint's own: shuffle bytes an executor holds in memory before it spills to local.dir.",
    ),
];

const BLOCK_MANAGER_PORT: Key = Key::of(KEYS, "blockManager.port");
const BROADCAST_MAX_SIZE: Key = Key::of(KEYS, "broadcast.maxSize");
const BUSY_POLL: Key = Key::of(KEYS, "executor.busyPoll");
/// The key of [`ExecutorConfig::connect_timeout`], named where an executor gives up.
pub const CONNECT_TIMEOUT_KEY: &str = CONNECT_TIMEOUT.name();
const CONNECT_TIMEOUT: Key = Key::of(KEYS, "executor.connectTimeout");
const LOCAL_DIR: OptionalKey = OptionalKey::of(KEYS, "local.dir");
const MAX_SIZE_IN_FLIGHT: Key = Key::of(KEYS, "reducer.maxSizeInFlight");
const SHUFFLE_MAX_MEMORY: Key = Key::of(KEYS, "shuffle.maxMemory");
const HEARTBEAT_MAX_FAILURES: Key = Key::of(KEYS, "executor.heartbeat.maxFailures");
/// The key of [`ExecutorConfig::heartbeat_interval`], which the `flint` facade checks
/// against the transport's timeouts.
pub const HEARTBEAT_INTERVAL_KEY: &str = HEARTBEAT_INTERVAL.name();
const HEARTBEAT_INTERVAL: Key = Key::of(KEYS, "executor.heartbeatInterval");

/// What an executor is and the limits it runs tasks with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// The executor's id, as registered with the driver; unique among the application's
    /// executors.
    pub executor_id: String,
    /// The host it runs on, as it reports it.
    pub hostname: String,
    /// Task runner threads: tasks it runs at once.
    pub cores: u32,
    /// `rpc.message.maxSize` in bytes: larger results go to the block store.
    /// [`crate::run_executor`] takes it from the transport it starts.
    pub max_message_size: usize,
    /// `executor.busyPoll`: how long a runner that ran out of tasks keeps looking for
    /// its next one before it sleeps. A task that arrives meanwhile starts without a
    /// wake-up, which on a virtual machine costs tens of microseconds.
    pub busy_poll: Duration,
    /// The driver's `driver.maxResultSize` in bytes, when known (`None`: none): a larger
    /// result is dropped here, and only its size reported, since the driver would refuse
    /// it. Set it only to the driver's own value: a smaller one loses results the driver
    /// would take.
    pub max_result_size: Option<u64>,
    /// `executor.heartbeatInterval`: the interval between heartbeats, after a random
    /// initial delay.
    pub heartbeat_interval: Duration,
    /// `executor.heartbeat.maxFailures`: heartbeats that may fail in a row before the
    /// executor exits with code 56.
    pub heartbeat_max_failures: u32,
    /// `executor.connectTimeout`: how long the executor keeps trying to reach its driver
    /// (a driver on another host may start later); zero tries once.
    pub connect_timeout: Duration,
    /// `blockManager.port`: where the executor's block server listens (0: any free port).
    pub block_manager_port: u16,
    /// `local.dir`: under it, the executor's own directory of shuffle spill files.
    pub local_dir: PathBuf,
    /// `reducer.maxSizeInFlight`: bytes of shuffle blocks one reduce task may have
    /// requested and not yet received. A bare number in the configuration is MiB, as in
    /// Spark.
    pub max_size_in_flight: u64,
    /// `shuffle.maxMemory`: shuffle bytes held in memory (map tasks' buffers and their
    /// outputs) before the executor spills them to `local_dir`.
    pub shuffle_max_memory: u64,
    /// `broadcast.maxSize`: the largest broadcast value this executor fetches (the
    /// driver's word on a size is checked against it before anything is allocated).
    pub broadcast_max_size: u64,
}

impl ExecutorConfig {
    /// Executor `executor_id` on `hostname` with `cores` cores, with every key's default.
    pub fn new(executor_id: impl Into<String>, hostname: impl Into<String>, cores: u32) -> Self {
        ExecutorConfig::from_conf(&Conf::new(), executor_id, hostname, cores)
            .expect("the key tables' defaults are valid")
    }

    /// Executor `executor_id` on `hostname` with `cores` cores, with the executor's keys
    /// (and `rpc.message.maxSize`) read from `conf`; a bad value is an error naming the
    /// key and the value. `max_result_size` is left `None`: it is the driver's key, which
    /// its caller passes on when it knows it.
    pub fn from_conf(
        conf: &Conf,
        executor_id: impl Into<String>,
        hostname: impl Into<String>,
        cores: u32,
    ) -> Result<Self, ConfError> {
        Ok(ExecutorConfig {
            executor_id: executor_id.into(),
            hostname: hostname.into(),
            cores,
            max_message_size: conf.message_max_size()?,
            busy_poll: conf.busy_poll(BUSY_POLL)?,
            max_result_size: None,
            heartbeat_interval: conf.positive_duration(HEARTBEAT_INTERVAL)?,
            heartbeat_max_failures: u32::try_from(conf.count(HEARTBEAT_MAX_FAILURES, 1)?)
                .unwrap_or(u32::MAX),
            connect_timeout: conf.duration(CONNECT_TIMEOUT)?,
            block_manager_port: conf.port_number(BLOCK_MANAGER_PORT)?,
            local_dir: conf
                .text(LOCAL_DIR)
                .map_or_else(std::env::temp_dir, PathBuf::from),
            max_size_in_flight: conf.size(MAX_SIZE_IN_FLIGHT)?,
            shuffle_max_memory: conf.size(SHUFFLE_MAX_MEMORY)?,
            broadcast_max_size: conf.size(BROADCAST_MAX_SIZE)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<ExecutorConfig, ConfError> {
        let conf: Conf = pairs.iter().copied().collect();
        ExecutorConfig::from_conf(&conf, "1", "h", 2)
    }

    fn assert_refused(key: &str, value: &str) {
        let err = read(&[(key, value)]).unwrap_err();
        assert!(
            matches!(&err, ConfError::InvalidValue { key: k, value: v, .. } if *k == key && v == value),
            "{key}={value}: {err:?}"
        );
        assert!(err.to_string().contains(key), "{err}");
    }

    #[test]
    fn defaults_come_from_the_tables() {
        let c = ExecutorConfig::new("1", "h", 2);
        assert_eq!(c.busy_poll, Duration::from_micros(50));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(10));
        assert_eq!(c.heartbeat_max_failures, 60);
        assert_eq!(c.connect_timeout, Duration::from_secs(30));
        assert_eq!(c.max_message_size, flint_wire::DEFAULT_MAX_MESSAGE_SIZE);
        assert_eq!(c.max_result_size, None);
        assert_eq!(c.block_manager_port, 0);
        assert_eq!(c.local_dir, std::env::temp_dir());
        assert_eq!(c.max_size_in_flight, 48 << 20);
        assert_eq!(c.shuffle_max_memory, 256 << 20);
        assert_eq!(c.broadcast_max_size, 1 << 30);
        assert_eq!(
            (c.executor_id.as_str(), c.hostname.as_str(), c.cores),
            ("1", "h", 2)
        );
        let explicit: Conf = KEYS
            .iter()
            .filter_map(|k| k.default.map(|d| (k.key, d)))
            .collect();
        assert_eq!(ExecutorConfig::from_conf(&explicit, "1", "h", 2), Ok(c));
    }

    #[test]
    fn the_table_is_sorted_unique_and_documented_in_one_line() {
        let keys: Vec<_> = KEYS.iter().map(|k| k.key).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(keys, sorted);
        for info in KEYS {
            assert!(
                !info.doc.is_empty() && !info.doc.contains('\n'),
                "{}",
                info.key
            );
        }
    }

    #[test]
    fn every_key_is_read_with_its_unit() {
        let c = read(&[
            ("executor.busyPoll", "20"),
            ("spark.executor.heartbeatInterval", "500"),
            ("executor.heartbeat.maxFailures", "3"),
            ("rpc.message.maxSize", "2"),
            ("spark.blockManager.port", "7337"),
            ("local.dir", "/scratch"),
            ("reducer.maxSizeInFlight", "8m"),
            ("shuffle.maxMemory", "1g"),
            ("executor.connectTimeout", "2500"),
        ])
        .unwrap();
        assert_eq!(c.connect_timeout, Duration::from_millis(2500));
        assert_eq!(
            read(&[("executor.connectTimeout", "0")])
                .unwrap()
                .connect_timeout,
            Duration::ZERO
        );
        assert_eq!(c.block_manager_port, 7337);
        assert_eq!(c.local_dir, PathBuf::from("/scratch"));
        assert_eq!(c.max_size_in_flight, 8 << 20);
        assert_eq!(c.shuffle_max_memory, 1 << 30);
        assert_eq!(c.busy_poll, Duration::from_micros(20));
        assert_eq!(c.heartbeat_interval, Duration::from_millis(500));
        assert_eq!(c.heartbeat_max_failures, 3);
        assert_eq!(c.max_message_size, 2 << 20);
    }

    #[test]
    fn bad_values_are_refused_naming_key_and_value() {
        for value in ["2s", "fast", "-5"] {
            assert_refused("executor.busyPoll", value);
        }
        for value in ["0s", "soon"] {
            assert_refused("executor.heartbeatInterval", value);
        }
        assert!(read(&[("executor.heartbeatInterval", "0s")])
            .unwrap_err()
            .to_string()
            .contains("above zero"));
        for value in ["0", "-1", "1.5", "two", ""] {
            assert_refused("executor.heartbeat.maxFailures", value);
        }
        assert_refused("blockManager.port", "65536");
        assert_refused("executor.connectTimeout", "-1s");
        assert_refused("executor.connectTimeout", "soon");
        assert_refused("shuffle.maxMemory", "lots");
        assert_refused("reducer.maxSizeInFlight", "-1m");
    }

    #[test]
    fn a_bare_max_size_in_flight_is_mebibytes_as_in_spark() {
        for (value, bytes) in [
            ("48", 48 << 20),
            ("1", 1 << 20),
            ("512k", 512 << 10),
            ("2g", 2 << 30),
        ] {
            let c = read(&[("spark.reducer.maxSizeInFlight", value)]).unwrap();
            assert_eq!(c.max_size_in_flight, bytes, "{value}");
        }
        let info = KEYS
            .iter()
            .find(|k| k.key == "reducer.maxSizeInFlight")
            .unwrap();
        assert_eq!(
            info.unit.to_string(),
            "size (MiB)",
            "flint conf's unit column"
        );
    }
}
