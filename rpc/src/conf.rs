//! flint's typed configuration.
//!
//! A [`Conf`] is a set of `key = value` strings, as given with `--conf key=value`. The keys
//! are the seeds' keys without their `spark.` prefix; the prefixed form is accepted and
//! stored without it, so `spark.task.cpus` and `task.cpus` are one key. Values are parsed
//! when read, by one typed getter per key, with the seeds' units:
//!
//! - durations: a whole number with a suffix `us`, `ms`, `s`, `m` or `min`, `h` or `d`
//!   (`120s`, `100ms`, `2min`); a bare number is in the key's own unit, seconds or
//!   milliseconds as listed in [`Conf::known_keys`]; at most [`MAX_DURATION`], 36500d
//!   (100 years);
//! - sizes: a whole number with a suffix `b`, `k`, `m`, `g`, `t` or `p` (binary: `1k` is
//!   1024 bytes), `kb`, `mb`, `gb`, `tb` and `pb` meaning the same, in any case (`128m`,
//!   `1g`, `512K`); a bare number is in the key's own unit, bytes except for
//!   `rpc.message.maxSize`, which is in MiB;
//! - booleans: `true` or `false`, in any case.
//!
//! Surrounding whitespace is ignored when a value is parsed. A value that does not parse,
//! or is out of its key's range, is a [`ConfError`] that names the key, the value and what
//! was expected. A key that is not set reads as its default; defaults are listed once, in
//! the table behind [`Conf::known_keys`].
//!
//! ```
//! use std::time::Duration;
//! use flint_rpc::conf::Conf;
//!
//! let mut conf = Conf::new();
//! conf.set("spark.locality.wait", "0").set("task.cpus", "2");
//! assert_eq!(conf.locality_wait()?, Duration::ZERO);
//! assert_eq!(conf.task_cpus()?, 2);
//! assert_eq!(conf.revive_interval()?, Duration::from_secs(1)); // the default
//!
//! conf.set("network.timeout", "12x");
//! assert_eq!(
//!     conf.network_timeout().unwrap_err().to_string(),
//!     r#"invalid value "12x" for network.timeout: expected a duration such as 120s, 100ms or 2min"#,
//! );
//! # Ok::<(), flint_rpc::conf::ConfError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use flint_wire::MAX_SIZE_KEY;

/// The largest `rpc.message.maxSize`, in MiB.
pub const MAX_MESSAGE_SIZE_MB: u64 = 2047;

/// The longest busy poll (`rpc.io.busyPoll`, `executor.busyPoll`): polling longer than
/// this only burns the CPU a sleeping thread would give back.
const MAX_BUSY_POLL: Duration = Duration::from_secs(1);

/// The longest duration any key accepts: 36500 days (100 years). A deadline is a clock
/// reading plus a duration, and a duration near `u64::MAX` seconds cannot be added to one;
/// nothing flint waits for is meant to take longer than this, so "forever" is written as
/// this bound (or less) and anything longer is refused as a mistake.
pub const MAX_DURATION: Duration = Duration::from_secs(36_500 * 24 * 60 * 60);

/// What is shown instead of the value of a key that holds a secret, as the seeds redact.
pub const REDACTED: &str = "*********(redacted)";

/// A key flint knows, with its default and what it means.
///
/// The table of these, [`Conf::known_keys`], is the one list of flint's keys and their
/// defaults: the getters read their defaults from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyInfo {
    /// The key, without the `spark.` prefix.
    pub key: &'static str,
    /// The value the key has when it is not set, as it would be written in a `Conf`;
    /// `None` when there is no fixed default, `doc` says what happens then.
    pub default: Option<&'static str>,
    /// What the key does, its unit when the value is a bare number, and its range.
    pub doc: &'static str,
}

const fn info(key: &'static str, default: Option<&'static str>, doc: &'static str) -> KeyInfo {
    KeyInfo { key, default, doc }
}

/// Every key flint reads, in alphabetical order.
const KNOWN_KEYS: &[KeyInfo] = &[
    info(
        "authenticate",
        Some("false"),
        "Whether peers must authenticate with the shared secret authenticate.secret.",
    ),
    info(
        "authenticate.secret",
        None,
        "The shared secret peers authenticate with; required (and non-empty) when \
         authenticate is true. Redacted when a conf is printed.",
    ),
    info(
        "authenticate.timeout",
        Some("10s"),
        "flint's own: how long a connection may take to complete the authentication \
         handshake when authenticate is true; a peer that has not proved it knows the \
         secret by then is disconnected; seconds when bare; above zero.",
    ),
    info(
        "default.parallelism",
        None,
        "Default number of partitions; at least 1. When not set, the scheduler uses \
         max(total cores, 2).",
    ),
    info(
        "driver.maxResultSize",
        Some("1g"),
        "Limit on the total size of the results of one job's tasks sent to the driver; \
         bytes when bare; 0 is unlimited.",
    ),
    info(
        "excludeOnFailure.enabled",
        Some("false"),
        "Whether executors and hosts on which a task set's tasks keep failing stop \
         getting that task set's tasks (Spark's excludeOnFailure, off by default as there).",
    ),
    info(
        "excludeOnFailure.stage.maxFailedExecutorsPerNode",
        Some("2"),
        "Excluded executors on one host before the host gets none of a task set's tasks; \
         at least 1 when excludeOnFailure.enabled.",
    ),
    info(
        "excludeOnFailure.stage.maxFailedTasksPerExecutor",
        Some("2"),
        "Different tasks of a task set that may fail on one executor before the executor \
         gets none of the task set's tasks; at least 1 when excludeOnFailure.enabled.",
    ),
    info(
        "excludeOnFailure.task.maxTaskAttemptsPerExecutor",
        Some("1"),
        "Failures of one task on one executor before the task is not retried there; at \
         least 1 when excludeOnFailure.enabled.",
    ),
    info(
        "excludeOnFailure.task.maxTaskAttemptsPerNode",
        Some("2"),
        "Failures of one task on one host before the task is not retried there; at least \
         1 and below task.maxFailures when excludeOnFailure.enabled.",
    ),
    info(
        "executor.busyPoll",
        Some("50us"),
        "flint's own: how long an executor's task runner keeps looking for its next task \
         (yielding the CPU between looks) before it sleeps; microseconds when bare; 0 \
         sleeps at once; at most 1s.",
    ),
    info(
        "executor.heartbeat.maxFailures",
        Some("60"),
        "Heartbeats an executor may fail to deliver in a row before it exits with code 56; \
         at least 1.",
    ),
    info(
        "executor.heartbeatInterval",
        Some("10s"),
        "Interval between an executor's heartbeats to the driver, after a random initial \
         delay; milliseconds when bare; above zero and below network.timeout.",
    ),
    info(
        "executor.maxNumFailures",
        None,
        "Executor failures (executor processes that exited abnormally without the driver \
         asking, or could not be started) after which the driver fails its jobs; at least \
         1. When not set, twice the executors asked for, at least 3 (Spark's default).",
    ),
    info(
        "executor.taskPrefetch",
        Some("0"),
        "flint's own: tasks the driver may queue at an executor beyond its free cores \
         (launch pipelining); 0 is the seeds' semantics.",
    ),
    info(
        "locality.wait",
        Some("3s"),
        "How long to wait to launch a task at a locality level before trying the next, \
         less local, one (delay scheduling); milliseconds when bare; 0 disables it.",
    ),
    info(
        "network.timeout",
        Some("120s"),
        "Default timeout of network interactions; the driver expires executors that sent \
         no heartbeat for this long, and a connection that sends nothing for this long in \
         the middle of a frame is closed, as is one whose frame, from this long after its \
         first bytes, comes slower than 1 MiB/s on average (and, unless \
         rpc.io.idleTimeout is set, one from a peer that sends nothing at all for twice \
         as long); seconds when bare; above zero.",
    ),
    info(
        "rpc.askTimeout",
        None,
        "How long an ask waits for its reply; seconds when bare; above zero. When not \
         set, network.timeout (120s by default).",
    ),
    info(
        "rpc.bindAddress",
        Some("127.0.0.1"),
        "IP address the RPC listener binds to (an address, not a host name; 0.0.0.0 for \
         every interface). Executors do not listen: they check it but do not use it.",
    ),
    info(
        "rpc.connect.timeout",
        Some("10s"),
        "How long an outgoing connection may take to establish; seconds when bare; above \
         zero.",
    ),
    info(
        "rpc.io.busyPoll",
        Some("50us"),
        "flint's own: how long an event loop keeps polling its sockets (yielding the CPU \
         between polls) after it has worked, before it sleeps in the poller, and how long \
         its thread keeps looking before it parks while threads lent to the loop poll \
         them; microseconds when bare; 0 sleeps at once; at most 1s.",
    ),
    info(
        "rpc.io.idleTimeout",
        None,
        "flint's own: how long a connection from a peer may send nothing before it is \
         closed, so that silent peers cannot hold connections (rpc.io.maxConnections) for \
         good (one that takes what it is sent, however slowly, is not silent); seconds when \
         bare; 0 keeps silent connections open; when not set, twice network.timeout or \
         rpc.askTimeout, whichever is longer (240s by default), so that a silent \
         executor is expired for its missed heartbeats first; must be above \
         executor.heartbeatInterval and the ask timeout.",
    ),
    info(
        "rpc.io.maxConnections",
        Some("10000"),
        "flint's own: most connections from peers an environment holds open at once; one \
         accepted beyond them is closed at once; at least 1.",
    ),
    info(
        "rpc.io.maxReceiveBytes",
        Some("512m"),
        "flint's own: most bytes that frames larger than 256 KiB may hold, partly \
         received, across all of an environment's connections; a connection whose next \
         frame does not fit waits, unread (TCP holds its peer back), until others' frames \
         are in; at least one frame of rpc.message.maxSize whatever is set; bytes when \
         bare; above zero.",
    ),
    info(
        "rpc.io.receiveBufferSize",
        Some("0"),
        "Socket receive buffer size (SO_RCVBUF); bytes when bare; 0 leaves the OS default.",
    ),
    info(
        "rpc.io.sendBufferSize",
        Some("0"),
        "Socket send buffer size (SO_SNDBUF); bytes when bare; 0 leaves the OS default.",
    ),
    info(
        MAX_SIZE_KEY,
        Some("128"),
        "Largest message sent or accepted; MiB when bare; above zero and at most 2047 MiB.",
    ),
    info(
        "rpc.outbox.maxBytes",
        Some("64m"),
        "Bound on the outgoing bytes queued on one connection (encoded, not yet written): \
         a send whose frame does not fit is refused; a reply, or a frame larger than the \
         whole bound, is accepted while less than the bound is queued; bytes when bare; \
         above zero.",
    ),
    info(
        "rpc.port",
        Some("0"),
        "Port the RPC listener binds to; 0 lets the OS choose a free one. Executors do \
         not listen: they check it but do not use it.",
    ),
    info(
        "rpc.shutdown.flushTimeout",
        Some("2s"),
        "How long stopping an RPC environment waits for what was sent before and from \
         on_stop to be written; then sockets close, whatever is left; seconds when bare; 0 \
         writes what the sockets take at once and waits for nothing.",
    ),
    info(
        "scheduler.allocation.file",
        None,
        "Path of a FAIR pools file (one `pool NAME [weight=N] [minShare=N] \
         [mode=FIFO|FAIR]` a line), read when the driver starts.",
    ),
    info(
        "scheduler.maxRegisteredResourcesWaitingTime",
        Some("30s"),
        "Longest the scheduler waits for minRegisteredResourcesRatio of the resources to \
         register before it starts scheduling; milliseconds when bare.",
    ),
    info(
        "scheduler.minRegisteredResourcesRatio",
        Some("0.0"),
        "Fraction of the expected resources that must register before scheduling starts; \
         between 0.0 and 1.0.",
    ),
    info(
        "scheduler.mode",
        Some("FIFO"),
        "Scheduling policy between jobs: FIFO or FAIR, in any case.",
    ),
    info(
        "scheduler.offerShuffleSeed",
        None,
        "flint's own: seed of the shuffle of resource offers, a whole number, for \
         reproducible task placement. When not set, each driver draws a random seed \
         (and logs it).",
    ),
    info(
        "scheduler.revive.interval",
        Some("1s"),
        "Interval of the driver's periodic offers of free resources to the scheduler; \
         milliseconds when bare; above zero.",
    ),
    info(
        "speculation",
        Some("false"),
        "Whether slow tasks are re-launched speculatively.",
    ),
    info(
        "speculation.interval",
        Some("100ms"),
        "How often to check for tasks to speculate; milliseconds when bare; above zero.",
    ),
    info(
        "speculation.multiplier",
        Some("1.5"),
        "How many times slower than the median a task must be to be speculated; above 0.",
    ),
    info(
        "speculation.quantile",
        Some("0.75"),
        "Fraction of a stage's tasks that must finish before speculation is considered; \
         between 0.0 and 1.0.",
    ),
    info(
        "starvation.timeout",
        Some("15s"),
        "How long after the first task set is submitted, with no task launched, the \
         scheduler warns that the job has not accepted any resources; milliseconds when \
         bare; above zero.",
    ),
    info("task.cpus", Some("1"), "Cores each task takes; at least 1."),
    info(
        "task.maxFailures",
        Some("4"),
        "Failures of one task before its job is given up; at least 1.",
    ),
];

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The table entry of `key`; a key missing from the table fails the build.
const fn find(key: &str) -> &'static KeyInfo {
    let mut i = 0;
    while i < KNOWN_KEYS.len() {
        if str_eq(KNOWN_KEYS[i].key, key) {
            return &KNOWN_KEYS[i];
        }
        i += 1;
    }
    panic!("a getter reads a key that is missing from KNOWN_KEYS")
}

/// A known key with a fixed default, as a getter reads it.
#[derive(Clone, Copy)]
struct Key {
    name: &'static str,
    default: &'static str,
}

/// A key with a fixed default; a key missing from the table, or without a default there,
/// fails the build.
const fn defaulted(key: &str) -> Key {
    let info = find(key);
    match info.default {
        Some(default) => Key {
            name: info.key,
            default,
        },
        None => panic!("a getter reads a default that KNOWN_KEYS does not give"),
    }
}

/// A key without a fixed default; a key missing from the table fails the build.
const fn optional(key: &str) -> &'static str {
    find(key).key
}

/// The key of [`Conf::ask_timeout`], named in ask timeout errors.
pub const ASK_TIMEOUT_KEY: &str = optional("rpc.askTimeout");
/// The key of [`Conf::network_timeout`], named in ask timeout errors when
/// `rpc.askTimeout` is not set.
pub const NETWORK_TIMEOUT_KEY: &str = optional("network.timeout");
/// The key of [`Conf::connect_timeout`], named in connect timeout errors.
pub const CONNECT_TIMEOUT_KEY: &str = optional("rpc.connect.timeout");
/// The key of [`Conf::outbox_max_bytes`], named in full-outbox errors.
pub const OUTBOX_MAX_BYTES_KEY: &str = optional("rpc.outbox.maxBytes");

const AUTHENTICATE: Key = defaulted("authenticate");
const AUTHENTICATE_SECRET: &str = optional("authenticate.secret");
const AUTHENTICATE_TIMEOUT: Key = defaulted("authenticate.timeout");
const DEFAULT_PARALLELISM: &str = optional("default.parallelism");
const DRIVER_MAX_RESULT_SIZE: Key = defaulted("driver.maxResultSize");
const EXCLUDE_ON_FAILURE: Key = defaulted("excludeOnFailure.enabled");
const EXCLUDE_STAGE_MAX_FAILED_EXECUTORS_PER_NODE: Key =
    defaulted("excludeOnFailure.stage.maxFailedExecutorsPerNode");
const EXCLUDE_STAGE_MAX_FAILED_TASKS_PER_EXECUTOR: Key =
    defaulted("excludeOnFailure.stage.maxFailedTasksPerExecutor");
const EXCLUDE_TASK_MAX_ATTEMPTS_PER_EXECUTOR: Key =
    defaulted("excludeOnFailure.task.maxTaskAttemptsPerExecutor");
const EXCLUDE_TASK_MAX_ATTEMPTS_PER_NODE: Key =
    defaulted("excludeOnFailure.task.maxTaskAttemptsPerNode");
const EXECUTOR_HEARTBEAT_MAX_FAILURES: Key = defaulted("executor.heartbeat.maxFailures");
const EXECUTOR_BUSY_POLL: Key = defaulted("executor.busyPoll");
const EXECUTOR_HEARTBEAT_INTERVAL: Key = defaulted("executor.heartbeatInterval");
const EXECUTOR_MAX_NUM_FAILURES: &str = optional("executor.maxNumFailures");
const EXECUTOR_TASK_PREFETCH: Key = defaulted("executor.taskPrefetch");
const LOCALITY_WAIT: Key = defaulted("locality.wait");
const NETWORK_TIMEOUT: Key = defaulted("network.timeout");
const RPC_ASK_TIMEOUT: &str = optional("rpc.askTimeout");
const RPC_BIND_ADDRESS: Key = defaulted("rpc.bindAddress");
const RPC_CONNECT_TIMEOUT: Key = defaulted("rpc.connect.timeout");
const RPC_IO_BUSY_POLL: Key = defaulted("rpc.io.busyPoll");
const RPC_IO_IDLE_TIMEOUT: &str = optional("rpc.io.idleTimeout");
const RPC_IO_MAX_CONNECTIONS: Key = defaulted("rpc.io.maxConnections");
const RPC_IO_MAX_RECEIVE_BYTES: Key = defaulted("rpc.io.maxReceiveBytes");
const RPC_IO_RECEIVE_BUFFER_SIZE: Key = defaulted("rpc.io.receiveBufferSize");
const RPC_IO_SEND_BUFFER_SIZE: Key = defaulted("rpc.io.sendBufferSize");
const RPC_MESSAGE_MAX_SIZE: Key = defaulted(MAX_SIZE_KEY);
const RPC_OUTBOX_MAX_BYTES: Key = defaulted("rpc.outbox.maxBytes");
const RPC_PORT: Key = defaulted("rpc.port");
const RPC_SHUTDOWN_FLUSH_TIMEOUT: Key = defaulted("rpc.shutdown.flushTimeout");
const SCHEDULER_ALLOCATION_FILE: &str = optional("scheduler.allocation.file");
const SCHEDULER_MAX_REGISTERED_WAIT: Key = defaulted("scheduler.maxRegisteredResourcesWaitingTime");
const SCHEDULER_MIN_REGISTERED_RATIO: Key = defaulted("scheduler.minRegisteredResourcesRatio");
const SCHEDULER_MODE: Key = defaulted("scheduler.mode");
const SCHEDULER_OFFER_SHUFFLE_SEED: &str = optional("scheduler.offerShuffleSeed");
const SCHEDULER_REVIVE_INTERVAL: Key = defaulted("scheduler.revive.interval");
const SPECULATION: Key = defaulted("speculation");
const SPECULATION_INTERVAL: Key = defaulted("speculation.interval");
const SPECULATION_MULTIPLIER: Key = defaulted("speculation.multiplier");
const SPECULATION_QUANTILE: Key = defaulted("speculation.quantile");
const STARVATION_TIMEOUT: Key = defaulted("starvation.timeout");
const TASK_CPUS: Key = defaulted("task.cpus");
const TASK_MAX_FAILURES: Key = defaulted("task.maxFailures");

const EXPECT_DURATION: &str = "a duration such as 120s, 100ms or 2min";
const EXPECT_DURATION_AT_MOST: &str = "a duration of at most 36500d (100 years)";
const EXPECT_POSITIVE_DURATION: &str = "a duration above zero such as 120s, 100ms or 2min";
const EXPECT_SIZE: &str = "a size such as 128m, 512k or 1g";
const EXPECT_POSITIVE_SIZE: &str = "a size above zero such as 64m, 512k or 1g";
const EXPECT_MESSAGE_SIZE: &str =
    "a size above zero in MiB such as 128, or with a unit such as 128m or 1g";
const EXPECT_COUNT: &str = "a whole number such as 0 or 2";
const EXPECT_POSITIVE_COUNT: &str = "a whole number of at least 1";
const EXPECT_BOOL: &str = "true or false";
const EXPECT_FRACTION: &str = "a number between 0.0 and 1.0";
const EXPECT_POSITIVE_NUMBER: &str = "a number above 0 such as 1.5";
const EXPECT_IP: &str = "an IP address such as 127.0.0.1 or 0.0.0.0";
const EXPECT_PORT: &str = "a port number between 0 and 65535";

/// What can be wrong with a configuration.
///
/// Every variant about a value names the key and the value as they were set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfError {
    /// A `--conf` argument has no `=`.
    #[error("invalid --conf {pair:?}: expected key=value, but there is no '='")]
    MissingEquals {
        /// The argument as given.
        pair: String,
    },
    /// A `--conf` argument has nothing before its `=`.
    #[error("invalid --conf {pair:?}: expected key=value, but the key is empty")]
    EmptyKey {
        /// The argument as given.
        pair: String,
    },
    /// A value does not parse as its key's type, or is outside the key's range.
    #[error("invalid value {value:?} for {key}: expected {expected}")]
    InvalidValue {
        /// The key, without the `spark.` prefix.
        key: &'static str,
        /// The value as it was set.
        value: String,
        /// What the key accepts.
        expected: &'static str,
    },
    /// `rpc.message.maxSize` is above 2047 MiB; the text is the seeds'.
    #[error("{key} should not be greater than {max} MB", key = MAX_SIZE_KEY, max = MAX_MESSAGE_SIZE_MB)]
    MessageMaxSizeTooLarge {
        /// The value as it was set.
        value: String,
    },
    /// `scheduler.mode` is neither FIFO nor FAIR; the text is the seeds'.
    #[error("Unrecognized scheduler.mode: {value}")]
    UnrecognizedSchedulingMode {
        /// The value as it was set.
        value: String,
    },
    /// Executors would be expired between two of their heartbeats
    /// (reported by [`Conf::validate`]).
    #[error(
        "The value of network.timeout={network_timeout:?} must be greater than the value of \
         executor.heartbeatInterval={heartbeat_interval:?}"
    )]
    HeartbeatNotBelowTimeout {
        /// `network.timeout`.
        network_timeout: Duration,
        /// `executor.heartbeatInterval`.
        heartbeat_interval: Duration,
    },
    /// Executors' connections would be closed as idle between two of their heartbeats
    /// (reported by [`Conf::validate`]).
    #[error(
        "The value of rpc.io.idleTimeout={idle_timeout:?} must be greater than the value of \
         executor.heartbeatInterval={heartbeat_interval:?}"
    )]
    HeartbeatNotBelowIdleTimeout {
        /// `rpc.io.idleTimeout`.
        idle_timeout: Duration,
        /// `executor.heartbeatInterval`.
        heartbeat_interval: Duration,
    },
    /// A peer waiting for the reply to an ask would be disconnected as idle first
    /// (reported by [`Conf::validate`]).
    #[error(
        "The value of rpc.io.idleTimeout={idle_timeout:?} must be greater than the value of \
         {ask_key}={ask_timeout:?}"
    )]
    AskNotBelowIdleTimeout {
        /// `rpc.io.idleTimeout`.
        idle_timeout: Duration,
        /// `rpc.askTimeout`, or `network.timeout` when that is not set.
        ask_key: &'static str,
        /// The ask timeout.
        ask_timeout: Duration,
    },
    /// `authenticate` is true but there is no secret to authenticate with
    /// (reported by [`Conf::validate`]).
    #[error("A secret key must be specified via the authenticate.secret config when authenticate is true")]
    MissingSecret,
}

impl ConfError {
    fn invalid(key: &'static str, value: &str, expected: &'static str) -> Self {
        ConfError::InvalidValue {
            key,
            value: value.to_owned(),
            expected,
        }
    }
}

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

    /// Parses `FIFO` or `FAIR` in any case; anything else is
    /// [`ConfError::UnrecognizedSchedulingMode`].
    fn from_str(s: &str) -> Result<Self, ConfError> {
        let mode = s.trim();
        if mode.eq_ignore_ascii_case("fifo") {
            Ok(SchedulingMode::Fifo)
        } else if mode.eq_ignore_ascii_case("fair") {
            Ok(SchedulingMode::Fair)
        } else {
            Err(ConfError::UnrecognizedSchedulingMode {
                value: s.to_owned(),
            })
        }
    }
}

/// The unit of a bare number in a duration.
#[derive(Clone, Copy)]
enum TimeUnit {
    Micros,
    Millis,
    Secs,
}

/// Why a size did not parse.
enum SizeError {
    Malformed,
    Overflow,
}

/// Why a duration did not parse.
enum DurationError {
    Malformed,
    /// Longer than [`MAX_DURATION`].
    TooLong,
}

impl DurationError {
    fn into_conf(self, key: &'static str, value: &str) -> ConfError {
        let expected = match self {
            DurationError::Malformed => EXPECT_DURATION,
            DurationError::TooLong => EXPECT_DURATION_AT_MOST,
        };
        ConfError::invalid(key, value, expected)
    }
}

/// Whether `value` is a whole number, with or without a unit, whose digits do not fit a
/// `u64`: too large rather than malformed.
fn digits_overflow(value: &str) -> bool {
    let digits = value
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_alphabetic());
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Splits a trimmed value into its digits and its (lowercased) suffix.
fn split_number(value: &str) -> Option<(u64, String)> {
    let value = value.trim();
    let digits_end = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (digits, suffix) = value.split_at(digits_end);
    if digits.is_empty() || !suffix.chars().all(|c| c.is_ascii_alphabetic()) {
        return None;
    }
    // Digits only, so the parse fails only on overflow; both are "not a duration/size".
    let number = digits.parse::<u64>().ok()?;
    Some((number, suffix.to_ascii_lowercase()))
}

/// Parses a duration as the seeds do; a bare number is in `bare`. Longer than
/// [`MAX_DURATION`] is an error.
fn parse_duration(value: &str, bare: TimeUnit) -> Result<Duration, DurationError> {
    let Some((n, suffix)) = split_number(value) else {
        return Err(if digits_overflow(value) {
            DurationError::TooLong
        } else {
            DurationError::Malformed
        });
    };
    let suffix = match suffix.as_str() {
        "" => match bare {
            TimeUnit::Micros => "us",
            TimeUnit::Millis => "ms",
            TimeUnit::Secs => "s",
        },
        other => other,
    };
    let duration = match suffix {
        "us" => Some(Duration::from_micros(n)),
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" | "min" => n.checked_mul(60).map(Duration::from_secs),
        "h" => n.checked_mul(60 * 60).map(Duration::from_secs),
        "d" => n.checked_mul(24 * 60 * 60).map(Duration::from_secs),
        _ => return Err(DurationError::Malformed),
    };
    match duration {
        Some(duration) if duration <= MAX_DURATION => Ok(duration),
        _ => Err(DurationError::TooLong),
    }
}

/// Parses a size in bytes as the seeds do; a bare number is in units of `bare` bytes.
fn parse_size(value: &str, bare: u64) -> Result<u64, SizeError> {
    let Some((n, suffix)) = split_number(value) else {
        // Distinguish "too many digits" from "not a size".
        return if digits_overflow(value) {
            Err(SizeError::Overflow)
        } else {
            Err(SizeError::Malformed)
        };
    };
    let unit: u64 = match suffix.as_str() {
        "" => bare,
        "b" => 1,
        "k" | "kb" => 1 << 10,
        "m" | "mb" => 1 << 20,
        "g" | "gb" => 1 << 30,
        "t" | "tb" => 1 << 40,
        "p" | "pb" => 1 << 50,
        _ => return Err(SizeError::Malformed),
    };
    n.checked_mul(unit).ok_or(SizeError::Overflow)
}

/// The normal form of a key: trimmed, without a leading `spark.`.
fn normalize(key: &str) -> &str {
    let key = key.trim();
    match key.strip_prefix("spark.") {
        Some(rest) if !rest.is_empty() => rest,
        _ => key,
    }
}

/// Whether a key's value is redacted when a conf is printed.
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["secret", "password", "token"]
        .iter()
        .any(|word| key.contains(word))
}

/// flint's configuration: `key = value` strings, read through typed getters.
///
/// Keys are stored without a leading `spark.`. Any key may be set; keys flint does not
/// know are kept (and listed by [`Conf::unknown_keys`], so a command line can warn about
/// them). Values are not checked when set but when read: each getter parses its key's
/// value, or the key's default when it is not set, and returns a [`ConfError`] naming the
/// key and the value if it is bad. [`Conf::validate`] reads every key at once.
///
/// `Debug` redacts secrets; so does [`Conf::iter_redacted`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Conf {
    entries: BTreeMap<String, String>,
}

impl Conf {
    /// An empty configuration: every key has its default.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`, replacing what it was. A leading `spark.` is dropped from the
    /// key (and surrounding whitespace), so `spark.task.cpus` and `task.cpus` are the same
    /// key. The value is stored as given and checked when read.
    ///
    /// ```
    /// let mut conf = flint_rpc::conf::Conf::new();
    /// conf.set("spark.task.cpus", "2").set("task.maxFailures", "8");
    /// assert_eq!(conf.get("task.cpus"), Some("2"));
    /// ```
    pub fn set(&mut self, key: impl AsRef<str>, value: impl Into<String>) -> &mut Self {
        self.entries
            .insert(normalize(key.as_ref()).to_owned(), value.into());
        self
    }

    /// Removes `key` (with or without its `spark.` prefix), returning its value if it was
    /// set; the key reads as its default again.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.entries.remove(normalize(key))
    }

    /// The value `key` (with or without its `spark.` prefix) was set to; `None` when it was
    /// not set, whatever its default.
    ///
    /// ```
    /// let conf = flint_rpc::conf::Conf::from_pairs(["spark.locality.wait=0"])?;
    /// assert_eq!(conf.get("spark.locality.wait"), Some("0"));
    /// assert_eq!(conf.get("task.cpus"), None);
    /// # Ok::<(), flint_rpc::conf::ConfError>(())
    /// ```
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(normalize(key)).map(String::as_str)
    }

    /// Splits a `--conf` argument `key=value` at its first `=`, returning the normalised
    /// key (without `spark.`) and the value, which may itself contain `=` or be empty.
    ///
    /// ```
    /// use flint_rpc::conf::Conf;
    /// assert_eq!(
    ///     Conf::parse_pair("spark.authenticate.secret=a=b")?,
    ///     ("authenticate.secret".to_owned(), "a=b".to_owned()),
    /// );
    /// assert!(Conf::parse_pair("task.cpus").is_err());
    /// # Ok::<(), flint_rpc::conf::ConfError>(())
    /// ```
    pub fn parse_pair(pair: &str) -> Result<(String, String), ConfError> {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(ConfError::MissingEquals {
                pair: pair.to_owned(),
            });
        };
        let key = normalize(key);
        if key.is_empty() {
            return Err(ConfError::EmptyKey {
                pair: pair.to_owned(),
            });
        }
        Ok((key.to_owned(), value.to_owned()))
    }

    /// A configuration from `--conf` arguments, each `key=value` (see
    /// [`Conf::parse_pair`]); a later setting of a key wins.
    pub fn from_pairs<I>(pairs: I) -> Result<Self, ConfError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let mut conf = Conf::new();
        for pair in pairs {
            let (key, value) = Conf::parse_pair(pair.as_ref())?;
            conf.entries.insert(key, value);
        }
        Ok(conf)
    }

    /// The keys and values that were set, sorted by key, values as set (secrets included:
    /// this is what to forward to another process; print [`Conf::iter_redacted`]).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The keys and values that were set, sorted by key, with the value of every key whose
    /// name contains `secret`, `password` or `token` replaced by [`REDACTED`]: for logs.
    pub fn iter_redacted(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.iter()
            .map(|(k, v)| (k, if is_secret_key(k) { REDACTED } else { v }))
    }

    /// How many keys are set.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is set (every key has its default).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every key flint reads, sorted, with its default and documentation.
    pub fn known_keys() -> &'static [KeyInfo] {
        KNOWN_KEYS
    }

    /// The entry of `key` (with or without its `spark.` prefix) in [`Conf::known_keys`].
    pub fn key_info(key: &str) -> Option<&'static KeyInfo> {
        let key = normalize(key);
        KNOWN_KEYS.iter().find(|info| info.key == key)
    }

    /// The keys that were set but that flint does not read, sorted; a command line warns
    /// about these, as they are likely misspelt.
    ///
    /// ```
    /// let conf = flint_rpc::conf::Conf::from_pairs(["task.cpu=2", "task.cpus=2"])?;
    /// assert_eq!(conf.unknown_keys().collect::<Vec<_>>(), ["task.cpu"]);
    /// # Ok::<(), flint_rpc::conf::ConfError>(())
    /// ```
    pub fn unknown_keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.entries
            .keys()
            .map(String::as_str)
            .filter(|key| Conf::key_info(key).is_none())
    }

    /// Reads every known key, returning the first error, then checks the keys that
    /// constrain each other: `executor.heartbeatInterval` must be below `network.timeout`,
    /// and `authenticate` needs a non-empty `authenticate.secret`.
    pub fn validate(&self) -> Result<(), ConfError> {
        self.authenticate()?;
        self.authenticate_timeout()?;
        self.default_parallelism()?;
        self.driver_max_result_size()?;
        self.exclude_on_failure()?;
        self.exclude_on_failure_max_task_attempts_per_executor()?;
        self.exclude_on_failure_max_task_attempts_per_node()?;
        self.exclude_on_failure_max_failed_tasks_per_executor()?;
        self.exclude_on_failure_max_failed_executors_per_node()?;
        self.executor_heartbeat_max_failures()?;
        self.executor_heartbeat_interval()?;
        self.executor_max_num_failures()?;
        self.executor_task_prefetch()?;
        self.locality_wait()?;
        self.network_timeout()?;
        self.ask_timeout()?;
        self.bind_address()?;
        self.connect_timeout()?;
        self.max_connections()?;
        self.max_receive_bytes()?;
        self.idle_timeout()?;
        self.receive_buffer_size()?;
        self.send_buffer_size()?;
        self.message_max_size()?;
        self.outbox_max_bytes()?;
        self.port()?;
        self.shutdown_flush_timeout()?;
        self.rpc_busy_poll()?;
        self.executor_busy_poll()?;
        self.max_registered_resources_waiting_time()?;
        self.min_registered_resources_ratio()?;
        self.scheduler_mode()?;
        self.offer_shuffle_seed()?;
        self.revive_interval()?;
        self.speculation()?;
        self.speculation_interval()?;
        self.speculation_multiplier()?;
        self.speculation_quantile()?;
        self.starvation_timeout()?;
        self.task_cpus()?;
        self.task_max_failures()?;

        let network_timeout = self.network_timeout()?;
        let heartbeat_interval = self.executor_heartbeat_interval()?;
        if network_timeout <= heartbeat_interval {
            return Err(ConfError::HeartbeatNotBelowTimeout {
                network_timeout,
                heartbeat_interval,
            });
        }
        if let Some(idle_timeout) = self.idle_timeout()? {
            if idle_timeout <= heartbeat_interval {
                return Err(ConfError::HeartbeatNotBelowIdleTimeout {
                    idle_timeout,
                    heartbeat_interval,
                });
            }
            let ask_timeout = self.ask_timeout()?;
            if idle_timeout <= ask_timeout {
                return Err(ConfError::AskNotBelowIdleTimeout {
                    idle_timeout,
                    ask_key: self.ask_timeout_key(),
                    ask_timeout,
                });
            }
        }
        if self.authenticate()? && self.authenticate_secret().is_none_or(str::is_empty) {
            return Err(ConfError::MissingSecret);
        }
        Ok(())
    }

    // ---- typed getters -------------------------------------------------------------

    /// `rpc.message.maxSize`, in bytes: the largest message sent or accepted. Default 128
    /// MiB ([`flint_wire::DEFAULT_MAX_MESSAGE_SIZE`]); a bare number is MiB. Above 2047
    /// MiB is [`ConfError::MessageMaxSizeTooLarge`] ("rpc.message.maxSize should not be
    /// greater than 2047 MB"); zero is [`ConfError::InvalidValue`].
    pub fn message_max_size(&self) -> Result<usize, ConfError> {
        let key = RPC_MESSAGE_MAX_SIZE;
        let value = self.value(key);
        let too_large = || ConfError::MessageMaxSizeTooLarge {
            value: value.to_owned(),
        };
        let bytes = match parse_size(value, 1 << 20) {
            Ok(bytes) => bytes,
            Err(SizeError::Overflow) => return Err(too_large()),
            Err(SizeError::Malformed) => {
                return Err(ConfError::invalid(key.name, value, EXPECT_MESSAGE_SIZE))
            }
        };
        if bytes == 0 {
            return Err(ConfError::invalid(key.name, value, EXPECT_MESSAGE_SIZE));
        }
        if bytes > MAX_MESSAGE_SIZE_MB << 20 {
            return Err(too_large());
        }
        // At most 2047 MiB, which fits a 32-bit usize.
        usize::try_from(bytes).map_err(|_| too_large())
    }

    /// `rpc.askTimeout`: how long an ask waits for its reply. When not set,
    /// [`Conf::network_timeout`] (120s by default). A bare number is seconds; zero is an
    /// error.
    pub fn ask_timeout(&self) -> Result<Duration, ConfError> {
        match self.entries.get(RPC_ASK_TIMEOUT) {
            Some(value) => positive_duration(RPC_ASK_TIMEOUT, value, TimeUnit::Secs),
            None => self.network_timeout(),
        }
    }

    /// The key whose value [`Conf::ask_timeout`] returns: `rpc.askTimeout` when it is set,
    /// else `network.timeout`.
    pub fn ask_timeout_key(&self) -> &'static str {
        if self.entries.contains_key(RPC_ASK_TIMEOUT) {
            RPC_ASK_TIMEOUT
        } else {
            NETWORK_TIMEOUT.name
        }
    }

    /// `network.timeout`: the default network timeout; the driver expires an executor that
    /// sent no heartbeat for this long, and an environment closes a connection that sent
    /// nothing for this long in the middle of a frame, or whose frame, from this long after
    /// its first bytes, comes slower than 1 MiB/s on average (and, unless
    /// `rpc.io.idleTimeout` is set, one from a peer that sent nothing at all for twice as
    /// long). Default 120s; a bare number is seconds; zero is an error.
    pub fn network_timeout(&self) -> Result<Duration, ConfError> {
        self.positive_duration(NETWORK_TIMEOUT, TimeUnit::Secs)
    }

    /// `rpc.connect.timeout` (flint's own): how long an outgoing connection may take to
    /// establish. Default 10s; a bare number is seconds; zero is an error.
    pub fn connect_timeout(&self) -> Result<Duration, ConfError> {
        self.positive_duration(RPC_CONNECT_TIMEOUT, TimeUnit::Secs)
    }

    /// `rpc.bindAddress` (flint's own): the IP address the RPC listener binds to. Default
    /// 127.0.0.1; host names are not resolved here, so the value must be an IPv4 or IPv6
    /// address.
    pub fn bind_address(&self) -> Result<IpAddr, ConfError> {
        let value = self.value(RPC_BIND_ADDRESS);
        value
            .trim()
            .parse()
            .map_err(|_| ConfError::invalid(RPC_BIND_ADDRESS.name, value, EXPECT_IP))
    }

    /// `rpc.port` (flint's own): the port the RPC listener binds to. Default 0, which lets
    /// the OS choose a free port.
    pub fn port(&self) -> Result<u16, ConfError> {
        let value = self.value(RPC_PORT);
        value
            .trim()
            .parse()
            .map_err(|_| ConfError::invalid(RPC_PORT.name, value, EXPECT_PORT))
    }

    /// `rpc.shutdown.flushTimeout` (flint's own): how long stopping an RPC environment
    /// waits for queued frames (sent before the stop and from `on_stop`) to be written
    /// before it closes the sockets. Default 2s; a bare number is seconds; zero waits for
    /// nothing.
    pub fn shutdown_flush_timeout(&self) -> Result<Duration, ConfError> {
        self.duration(RPC_SHUTDOWN_FLUSH_TIMEOUT, TimeUnit::Secs)
    }

    /// `rpc.io.sendBufferSize` (flint's own): the socket send buffer (SO_SNDBUF) in bytes,
    /// or `None`, the default (value 0), to leave the OS's. A bare number is bytes.
    pub fn send_buffer_size(&self) -> Result<Option<usize>, ConfError> {
        self.size_usize(RPC_IO_SEND_BUFFER_SIZE, EXPECT_SIZE)
            .map(|n| Some(n).filter(|&n| n > 0))
    }

    /// `rpc.io.receiveBufferSize` (flint's own): the socket receive buffer (SO_RCVBUF) in
    /// bytes, or `None`, the default (value 0), to leave the OS's. A bare number is bytes.
    pub fn receive_buffer_size(&self) -> Result<Option<usize>, ConfError> {
        self.size_usize(RPC_IO_RECEIVE_BUFFER_SIZE, EXPECT_SIZE)
            .map(|n| Some(n).filter(|&n| n > 0))
    }

    /// `rpc.outbox.maxBytes` (flint's own): the bound, in bytes, on the outgoing bytes
    /// queued on one connection: a send whose frame does not fit is refused, except that a
    /// reply (which an asker waits for), or a frame larger than the whole bound (which
    /// would never fit), is accepted while less than the bound is queued. Default 64 MiB;
    /// a bare number is bytes; zero is an error.
    pub fn outbox_max_bytes(&self) -> Result<usize, ConfError> {
        let key = RPC_OUTBOX_MAX_BYTES;
        let bytes = self.size_usize(key, EXPECT_POSITIVE_SIZE)?;
        if bytes == 0 {
            return Err(ConfError::invalid(
                key.name,
                self.value(key),
                EXPECT_POSITIVE_SIZE,
            ));
        }
        Ok(bytes)
    }

    /// `scheduler.revive.interval`: the interval of the driver's periodic resource offers.
    /// Default 1s; a bare number is milliseconds; zero is an error.
    pub fn revive_interval(&self) -> Result<Duration, ConfError> {
        self.positive_duration(SCHEDULER_REVIVE_INTERVAL, TimeUnit::Millis)
    }

    /// `scheduler.mode`: FIFO (the default) or FAIR, in any case; anything else is
    /// [`ConfError::UnrecognizedSchedulingMode`] ("Unrecognized scheduler.mode: X").
    pub fn scheduler_mode(&self) -> Result<SchedulingMode, ConfError> {
        self.value(SCHEDULER_MODE).parse()
    }

    /// `scheduler.minRegisteredResourcesRatio`: the fraction of expected resources that
    /// must register before scheduling starts. Default 0.0; between 0.0 and 1.0.
    pub fn min_registered_resources_ratio(&self) -> Result<f64, ConfError> {
        self.fraction(SCHEDULER_MIN_REGISTERED_RATIO)
    }

    /// `scheduler.maxRegisteredResourcesWaitingTime`: the longest the scheduler waits for
    /// the ratio of resources to register. Default 30s; a bare number is milliseconds.
    pub fn max_registered_resources_waiting_time(&self) -> Result<Duration, ConfError> {
        self.duration(SCHEDULER_MAX_REGISTERED_WAIT, TimeUnit::Millis)
    }

    /// `default.parallelism`: the default number of partitions, at least 1; `None` when not
    /// set, and the scheduler then uses max(total cores, 2).
    pub fn default_parallelism(&self) -> Result<Option<usize>, ConfError> {
        match self.entries.get(DEFAULT_PARALLELISM) {
            Some(value) => count(DEFAULT_PARALLELISM, value, 1).map(Some),
            None => Ok(None),
        }
    }

    /// `task.cpus`: the cores each task takes. Default 1; at least 1.
    pub fn task_cpus(&self) -> Result<usize, ConfError> {
        self.count(TASK_CPUS, 1)
    }

    /// `task.maxFailures`: failures of one task before its job is given up. Default 4; at
    /// least 1.
    pub fn task_max_failures(&self) -> Result<usize, ConfError> {
        self.count(TASK_MAX_FAILURES, 1)
    }

    /// `locality.wait`: how long to wait at a locality level before launching a task at a
    /// less local one (delay scheduling). Default 3s; a bare number is milliseconds; zero
    /// turns delay scheduling off.
    pub fn locality_wait(&self) -> Result<Duration, ConfError> {
        self.duration(LOCALITY_WAIT, TimeUnit::Millis)
    }

    /// `speculation`: whether slow tasks are re-launched speculatively. Default false.
    pub fn speculation(&self) -> Result<bool, ConfError> {
        self.boolean(SPECULATION)
    }

    /// `speculation.interval`: how often to look for tasks to speculate. Default 100ms; a
    /// bare number is milliseconds; zero is an error.
    pub fn speculation_interval(&self) -> Result<Duration, ConfError> {
        self.positive_duration(SPECULATION_INTERVAL, TimeUnit::Millis)
    }

    /// `speculation.multiplier`: how many times slower than the median a task must be to
    /// be speculated. Default 1.5; a finite number above 0.
    pub fn speculation_multiplier(&self) -> Result<f64, ConfError> {
        let key = SPECULATION_MULTIPLIER;
        let value = self.value(key);
        match value.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(ConfError::invalid(key.name, value, EXPECT_POSITIVE_NUMBER)),
        }
    }

    /// `speculation.quantile`: the fraction of a stage's tasks that must finish before
    /// speculation is considered. Default 0.75; between 0.0 and 1.0.
    pub fn speculation_quantile(&self) -> Result<f64, ConfError> {
        self.fraction(SPECULATION_QUANTILE)
    }

    /// `starvation.timeout`: how long after the first task set is submitted, with no task
    /// launched, the scheduler warns that the job has not accepted any resources. Default
    /// 15s; a bare number is milliseconds; zero is an error.
    pub fn starvation_timeout(&self) -> Result<Duration, ConfError> {
        self.positive_duration(STARVATION_TIMEOUT, TimeUnit::Millis)
    }

    /// `executor.heartbeatInterval`: the interval between an executor's heartbeats (after a
    /// random initial delay). Default 10s; a bare number is milliseconds; zero is an error.
    /// [`Conf::validate`] also requires it below [`Conf::network_timeout`].
    pub fn executor_heartbeat_interval(&self) -> Result<Duration, ConfError> {
        self.positive_duration(EXECUTOR_HEARTBEAT_INTERVAL, TimeUnit::Millis)
    }

    /// `executor.heartbeat.maxFailures`: heartbeats an executor may fail to deliver in a
    /// row before it exits with code 56. Default 60; at least 1.
    pub fn executor_heartbeat_max_failures(&self) -> Result<usize, ConfError> {
        self.count(EXECUTOR_HEARTBEAT_MAX_FAILURES, 1)
    }

    /// `executor.maxNumFailures`: executor failures after which the driver fails its
    /// jobs; `None` when not set (the driver then allows twice the executors it asked
    /// for, at least 3). At least 1.
    pub fn executor_max_num_failures(&self) -> Result<Option<usize>, ConfError> {
        match self.entries.get(EXECUTOR_MAX_NUM_FAILURES) {
            Some(value) => count(EXECUTOR_MAX_NUM_FAILURES, value, 1).map(Some),
            None => Ok(None),
        }
    }

    /// `driver.maxResultSize`, in bytes: the limit on the total size of a job's task
    /// results sent to the driver; `None` when the value is 0, which means unlimited.
    /// Default 1 GiB; a bare number is bytes.
    pub fn driver_max_result_size(&self) -> Result<Option<u64>, ConfError> {
        self.size(DRIVER_MAX_RESULT_SIZE, EXPECT_SIZE)
            .map(|n| Some(n).filter(|&n| n > 0))
    }

    /// `authenticate`: whether peers must authenticate with [`Conf::authenticate_secret`].
    /// Default false.
    pub fn authenticate(&self) -> Result<bool, ConfError> {
        self.boolean(AUTHENTICATE)
    }

    /// `authenticate.secret`: the shared secret, as set; `None` when not set (the default).
    pub fn authenticate_secret(&self) -> Option<&str> {
        self.entries.get(AUTHENTICATE_SECRET).map(String::as_str)
    }

    /// `authenticate.timeout` (flint's own): how long a connection may take to complete
    /// the authentication handshake (with `authenticate=true`); a peer that has not proved
    /// it knows the secret by then is disconnected, so that unauthenticated connections
    /// are not held forever. Default 10s; a bare number is seconds; zero is an error.
    pub fn authenticate_timeout(&self) -> Result<Duration, ConfError> {
        self.positive_duration(AUTHENTICATE_TIMEOUT, TimeUnit::Secs)
    }

    /// `excludeOnFailure.enabled`: whether a task set stops giving tasks to executors and
    /// hosts where its tasks keep failing. Default false, as in Spark.
    pub fn exclude_on_failure(&self) -> Result<bool, ConfError> {
        self.boolean(EXCLUDE_ON_FAILURE)
    }

    /// `excludeOnFailure.task.maxTaskAttemptsPerExecutor`: failures of one task on one
    /// executor before the task is not retried there. Default 1. Any whole number parses;
    /// the scheduler requires at least 1 when exclusion is enabled, as Spark does.
    pub fn exclude_on_failure_max_task_attempts_per_executor(&self) -> Result<usize, ConfError> {
        self.count(EXCLUDE_TASK_MAX_ATTEMPTS_PER_EXECUTOR, 0)
    }

    /// `excludeOnFailure.task.maxTaskAttemptsPerNode`: failures of one task on one host
    /// before the task is not retried there. Default 2. Any whole number parses; the
    /// scheduler requires at least 1, and below `task.maxFailures`, when exclusion is
    /// enabled, as Spark does.
    pub fn exclude_on_failure_max_task_attempts_per_node(&self) -> Result<usize, ConfError> {
        self.count(EXCLUDE_TASK_MAX_ATTEMPTS_PER_NODE, 0)
    }

    /// `excludeOnFailure.stage.maxFailedTasksPerExecutor`: different tasks of a task set
    /// that may fail on one executor before it gets none of the task set's tasks. Default
    /// 2. Any whole number parses; the scheduler requires at least 1 when exclusion is
    /// enabled.
    pub fn exclude_on_failure_max_failed_tasks_per_executor(&self) -> Result<usize, ConfError> {
        self.count(EXCLUDE_STAGE_MAX_FAILED_TASKS_PER_EXECUTOR, 0)
    }

    /// `excludeOnFailure.stage.maxFailedExecutorsPerNode`: excluded executors on one host
    /// before the host gets none of a task set's tasks. Default 2. Any whole number
    /// parses; the scheduler requires at least 1 when exclusion is enabled.
    pub fn exclude_on_failure_max_failed_executors_per_node(&self) -> Result<usize, ConfError> {
        self.count(EXCLUDE_STAGE_MAX_FAILED_EXECUTORS_PER_NODE, 0)
    }

    /// `scheduler.offerShuffleSeed` (flint's own): the seed of the resource-offer
    /// shuffle, for reproducible placement; `None` when not set, and the scheduler then
    /// draws a random one.
    pub fn offer_shuffle_seed(&self) -> Result<Option<u64>, ConfError> {
        match self.entries.get(SCHEDULER_OFFER_SHUFFLE_SEED) {
            Some(value) => {
                value.trim().parse().map(Some).map_err(|_| {
                    ConfError::invalid(SCHEDULER_OFFER_SHUFFLE_SEED, value, EXPECT_COUNT)
                })
            }
            None => Ok(None),
        }
    }

    /// `scheduler.allocation.file`: the FAIR pools file to read, if one is set.
    pub fn scheduler_allocation_file(&self) -> Option<&str> {
        self.entries
            .get(SCHEDULER_ALLOCATION_FILE)
            .map(String::as_str)
    }

    /// `executor.busyPoll` (flint's own): how long a task runner that ran out of work
    /// keeps looking for more, yielding the CPU between looks, before it sleeps. A task
    /// that arrives meanwhile starts without a wake-up, which on a virtual machine costs
    /// tens of microseconds. Default 50us; a bare number is microseconds; at most 1s.
    pub fn executor_busy_poll(&self) -> Result<Duration, ConfError> {
        self.busy_poll(EXECUTOR_BUSY_POLL)
    }

    /// `rpc.io.maxConnections` (flint's own): the most connections from peers an
    /// environment holds open at once. Default 10000; at least 1. With every connection's
    /// receive buffer bounded by `rpc.message.maxSize`, this bounds what peers can make the
    /// environment hold in all.
    pub fn max_connections(&self) -> Result<usize, ConfError> {
        self.count(RPC_IO_MAX_CONNECTIONS, 1)
    }

    /// `rpc.io.maxReceiveBytes` (flint's own): the most bytes that frames larger than 256
    /// KiB may hold, partly received, across all of an environment's connections (see
    /// [`crate::receive_budget`]). Without it, peers that each send most of a frame of
    /// `rpc.message.maxSize` could make a process hold `rpc.io.maxConnections` such frames
    /// at once. Default 512 MiB; a bare number is bytes; zero is an error. The environment
    /// raises it to one frame of [`Conf::message_max_size`] and one read when it is below
    /// that.
    pub fn max_receive_bytes(&self) -> Result<usize, ConfError> {
        let key = RPC_IO_MAX_RECEIVE_BYTES;
        let bytes = self.size_usize(key, EXPECT_POSITIVE_SIZE)?;
        if bytes == 0 {
            return Err(ConfError::invalid(
                key.name,
                self.value(key),
                EXPECT_POSITIVE_SIZE,
            ));
        }
        Ok(bytes)
    }

    /// `rpc.io.idleTimeout` (flint's own): how long a connection from a peer may send
    /// nothing before the environment closes it; `None` keeps silent connections open.
    /// When not set, twice [`Conf::network_timeout`] (or the ask timeout, if longer): the
    /// driver expires an executor that stopped sending heartbeats at the network timeout,
    /// with the seeds' reason, before its connection is closed, and a peer waiting for a
    /// reply is not taken for idle. A bare number is seconds; `0` is `None`.
    /// Without it, peers that connect and say nothing could hold all of
    /// `rpc.io.maxConnections` and lock everyone else out.
    pub fn idle_timeout(&self) -> Result<Option<Duration>, ConfError> {
        match self.entries.get(RPC_IO_IDLE_TIMEOUT) {
            Some(value) => match parse_duration(value, TimeUnit::Secs) {
                Ok(timeout) => Ok((!timeout.is_zero()).then_some(timeout)),
                Err(e) => Err(e.into_conf(RPC_IO_IDLE_TIMEOUT, value)),
            },
            None => Ok(Some(
                self.network_timeout()?
                    .max(self.ask_timeout()?)
                    .saturating_mul(2),
            )),
        }
    }

    /// `rpc.io.busyPoll` (flint's own): how long an event loop that has just worked keeps
    /// polling its sockets without blocking, yielding the CPU between polls, before it
    /// sleeps in the poller; and how long the loop thread keeps looking, while threads
    /// lent to the loop poll the sockets, before it parks. Default 50us; a bare number
    /// is microseconds; at most 1s.
    pub fn rpc_busy_poll(&self) -> Result<Duration, ConfError> {
        self.busy_poll(RPC_IO_BUSY_POLL)
    }

    fn busy_poll(&self, key: Key) -> Result<Duration, ConfError> {
        let poll = self.duration(key, TimeUnit::Micros)?;
        if poll > MAX_BUSY_POLL {
            return Err(ConfError::invalid(
                key.name,
                self.value(key),
                "a duration of at most 1s, e.g. \"50us\"",
            ));
        }
        Ok(poll)
    }

    /// `executor.taskPrefetch` (flint's own): tasks the driver may queue at an executor
    /// beyond its free cores, to pipeline launches. Default 0, the seeds' semantics.
    pub fn executor_task_prefetch(&self) -> Result<usize, ConfError> {
        self.count(EXECUTOR_TASK_PREFETCH, 0)
    }

    // ---- helpers -------------------------------------------------------------------

    /// The value of `key` as set, or its default.
    fn value(&self, key: Key) -> &str {
        self.entries
            .get(key.name)
            .map_or(key.default, String::as_str)
    }

    fn duration(&self, key: Key, bare: TimeUnit) -> Result<Duration, ConfError> {
        let value = self.value(key);
        parse_duration(value, bare).map_err(|e| e.into_conf(key.name, value))
    }

    fn positive_duration(&self, key: Key, bare: TimeUnit) -> Result<Duration, ConfError> {
        positive_duration(key.name, self.value(key), bare)
    }

    fn size(&self, key: Key, expected: &'static str) -> Result<u64, ConfError> {
        let value = self.value(key);
        parse_size(value, 1).map_err(|_| ConfError::invalid(key.name, value, expected))
    }

    fn size_usize(&self, key: Key, expected: &'static str) -> Result<usize, ConfError> {
        let bytes = self.size(key, expected)?;
        usize::try_from(bytes).map_err(|_| ConfError::invalid(key.name, self.value(key), expected))
    }

    fn count(&self, key: Key, min: usize) -> Result<usize, ConfError> {
        count(key.name, self.value(key), min)
    }

    fn fraction(&self, key: Key) -> Result<f64, ConfError> {
        let value = self.value(key);
        match value.trim().parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
            _ => Err(ConfError::invalid(key.name, value, EXPECT_FRACTION)),
        }
    }

    fn boolean(&self, key: Key) -> Result<bool, ConfError> {
        let value = self.value(key);
        let trimmed = value.trim();
        if trimmed.eq_ignore_ascii_case("true") {
            Ok(true)
        } else if trimmed.eq_ignore_ascii_case("false") {
            Ok(false)
        } else {
            Err(ConfError::invalid(key.name, value, EXPECT_BOOL))
        }
    }
}

fn positive_duration(
    key: &'static str,
    value: &str,
    bare: TimeUnit,
) -> Result<Duration, ConfError> {
    match parse_duration(value, bare) {
        Ok(d) if d.is_zero() => Err(ConfError::invalid(key, value, EXPECT_POSITIVE_DURATION)),
        Ok(d) => Ok(d),
        Err(e) => Err(e.into_conf(key, value)),
    }
}

fn count(key: &'static str, value: &str, min: usize) -> Result<usize, ConfError> {
    let expected = if min == 0 {
        EXPECT_COUNT
    } else {
        EXPECT_POSITIVE_COUNT
    };
    match value.trim().parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(ConfError::invalid(key, value, expected)),
    }
}

impl fmt::Debug for Conf {
    /// The entries, with secrets redacted as in [`Conf::iter_redacted`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter_redacted()).finish()
    }
}

impl<K: AsRef<str>, V: Into<String>> Extend<(K, V)> for Conf {
    /// Sets each key to its value, as [`Conf::set`].
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (key, value) in iter {
            self.set(key, value);
        }
    }
}

impl<K: AsRef<str>, V: Into<String>> FromIterator<(K, V)> for Conf {
    /// A configuration with each key set to its value, as [`Conf::set`].
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut conf = Conf::new();
        conf.extend(iter);
        conf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    fn conf(pairs: &[(&str, &str)]) -> Conf {
        pairs.iter().copied().collect()
    }

    /// Asserts that `err` is an invalid-value error whose text names `key` and `value`.
    fn assert_names(err: ConfError, key: &str, value: &str) {
        let text = err.to_string();
        assert!(
            matches!(&err, ConfError::InvalidValue { key: k, value: v, .. } if *k == key && v == value),
            "{err:?}"
        );
        assert!(text.contains(key), "{text}");
        assert!(text.contains(&format!("{value:?}")), "{text}");
        assert!(text.contains("expected "), "{text}");
    }

    #[test]
    fn every_getter_has_its_default() {
        let c = Conf::new();
        assert_eq!(c.message_max_size(), Ok(128 * MIB));
        assert_eq!(
            c.message_max_size(),
            Ok(flint_wire::DEFAULT_MAX_MESSAGE_SIZE)
        );
        assert_eq!(c.ask_timeout(), Ok(Duration::from_secs(120)));
        assert_eq!(c.network_timeout(), Ok(Duration::from_secs(120)));
        assert_eq!(c.connect_timeout(), Ok(Duration::from_secs(10)));
        assert_eq!(c.bind_address(), Ok(IpAddr::from([127, 0, 0, 1])));
        assert_eq!(c.port(), Ok(0));
        assert_eq!(c.shutdown_flush_timeout(), Ok(Duration::from_secs(2)));
        assert_eq!(c.rpc_busy_poll(), Ok(Duration::from_micros(50)));
        assert_eq!(c.executor_busy_poll(), Ok(Duration::from_micros(50)));
        assert_eq!(c.send_buffer_size(), Ok(None));
        assert_eq!(c.receive_buffer_size(), Ok(None));
        assert_eq!(c.outbox_max_bytes(), Ok(64 * MIB));
        assert_eq!(c.revive_interval(), Ok(Duration::from_secs(1)));
        assert_eq!(c.scheduler_mode(), Ok(SchedulingMode::Fifo));
        assert_eq!(c.min_registered_resources_ratio(), Ok(0.0));
        assert_eq!(
            c.max_registered_resources_waiting_time(),
            Ok(Duration::from_secs(30))
        );
        assert_eq!(c.default_parallelism(), Ok(None));
        assert_eq!(c.executor_max_num_failures(), Ok(None));
        assert_eq!(c.task_cpus(), Ok(1));
        assert_eq!(c.task_max_failures(), Ok(4));
        assert_eq!(c.locality_wait(), Ok(Duration::from_secs(3)));
        assert_eq!(c.speculation(), Ok(false));
        assert_eq!(c.speculation_interval(), Ok(Duration::from_millis(100)));
        assert_eq!(c.speculation_multiplier(), Ok(1.5));
        assert_eq!(c.speculation_quantile(), Ok(0.75));
        assert_eq!(c.starvation_timeout(), Ok(Duration::from_secs(15)));
        assert_eq!(c.executor_heartbeat_interval(), Ok(Duration::from_secs(10)));
        assert_eq!(c.executor_heartbeat_max_failures(), Ok(60));
        assert_eq!(c.driver_max_result_size(), Ok(Some(1 << 30)));
        assert_eq!(c.authenticate(), Ok(false));
        assert_eq!(c.authenticate_secret(), None);
        assert_eq!(c.authenticate_timeout(), Ok(Duration::from_secs(10)));
        assert_eq!(c.executor_task_prefetch(), Ok(0));
        assert_eq!(c.exclude_on_failure_max_task_attempts_per_executor(), Ok(1));
        assert_eq!(c.exclude_on_failure_max_task_attempts_per_node(), Ok(2));
        assert_eq!(c.exclude_on_failure_max_failed_tasks_per_executor(), Ok(2));
        assert_eq!(c.exclude_on_failure_max_failed_executors_per_node(), Ok(2));
        assert_eq!(c.offer_shuffle_seed(), Ok(None));
        assert_eq!(c.max_connections(), Ok(10_000));
        assert_eq!(c.max_receive_bytes(), Ok(512 << 20));
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn table_is_sorted_unique_and_documented() {
        let keys: Vec<_> = Conf::known_keys().iter().map(|k| k.key).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(keys, sorted);
        assert_eq!(keys.len(), 43);
        for info in Conf::known_keys() {
            assert!(!info.doc.is_empty(), "{}", info.key);
            assert!(!info.key.starts_with("spark."), "{}", info.key);
        }
        assert_eq!(
            Conf::key_info("spark.task.cpus").map(|k| k.default),
            Some(Some("1"))
        );
        assert_eq!(Conf::key_info("task.cpu"), None);
    }

    #[test]
    fn every_table_default_is_what_its_getter_returns_when_set_explicitly() {
        // Setting each key to its table default changes nothing.
        let explicit: Conf = Conf::known_keys()
            .iter()
            .filter_map(|k| k.default.map(|d| (k.key, d)))
            .collect();
        let c = Conf::new();
        assert_eq!(explicit.message_max_size(), c.message_max_size());
        assert_eq!(explicit.ask_timeout(), c.ask_timeout());
        assert_eq!(explicit.locality_wait(), c.locality_wait());
        assert_eq!(
            explicit.driver_max_result_size(),
            c.driver_max_result_size()
        );
        assert_eq!(explicit.unknown_keys().count(), 0);
        assert_eq!(explicit.validate(), Ok(()));
    }

    #[test]
    fn spark_prefix_is_the_same_key() {
        let mut c = Conf::new();
        c.set("spark.task.cpus", "2");
        assert_eq!(c.get("task.cpus"), Some("2"));
        assert_eq!(c.get("spark.task.cpus"), Some("2"));
        assert_eq!(c.task_cpus(), Ok(2));
        c.set("task.cpus", "3");
        assert_eq!(c.len(), 1);
        assert_eq!(c.task_cpus(), Ok(3));
        assert_eq!(c.remove("spark.task.cpus").as_deref(), Some("3"));
        assert!(c.is_empty());
        assert_eq!(c.task_cpus(), Ok(1));

        let c = Conf::from_pairs([
            "spark.rpc.message.maxSize=256",
            "spark.scheduler.mode=FAIR",
            " spark.network.timeout =30s",
        ])
        .unwrap();
        assert_eq!(c.message_max_size(), Ok(256 * MIB));
        assert_eq!(c.scheduler_mode(), Ok(SchedulingMode::Fair));
        assert_eq!(c.network_timeout(), Ok(Duration::from_secs(30)));
        assert_eq!(c.unknown_keys().count(), 0);
        // Only one leading prefix is dropped, and a bare "spark." is a key of its own.
        assert_eq!(normalize("spark.spark.x"), "spark.x");
        assert_eq!(normalize("spark."), "spark.");
    }

    #[test]
    fn parse_pair_and_from_pairs() {
        assert_eq!(
            Conf::parse_pair("spark.authenticate.secret=a=b"),
            Ok(("authenticate.secret".into(), "a=b".into()))
        );
        assert_eq!(
            Conf::parse_pair("task.cpus="),
            Ok(("task.cpus".into(), String::new()))
        );
        let err = Conf::parse_pair("task.cpus").unwrap_err();
        assert_eq!(
            err,
            ConfError::MissingEquals {
                pair: "task.cpus".into()
            }
        );
        assert_eq!(
            err.to_string(),
            r#"invalid --conf "task.cpus": expected key=value, but there is no '='"#
        );
        let err = Conf::parse_pair(" =2").unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid --conf " =2": expected key=value, but the key is empty"#
        );
        assert!(Conf::from_pairs(["task.cpus=2", "oops"]).is_err());

        // A later setting wins.
        let c = Conf::from_pairs(["task.cpus=2", "spark.task.cpus=5"]).unwrap();
        assert_eq!(c.task_cpus(), Ok(5));
    }

    #[test]
    fn iteration_is_sorted_and_printing_redacts_secrets() {
        let c = conf(&[
            ("task.cpus", "2"),
            ("spark.authenticate.secret", "hunter2"),
            ("authenticate", "true"),
            ("my.token", "t"),
        ]);
        assert_eq!(
            c.iter().collect::<Vec<_>>(),
            [
                ("authenticate", "true"),
                ("authenticate.secret", "hunter2"),
                ("my.token", "t"),
                ("task.cpus", "2"),
            ]
        );
        assert_eq!(
            c.iter_redacted().collect::<Vec<_>>(),
            [
                ("authenticate", "true"),
                ("authenticate.secret", REDACTED),
                ("my.token", REDACTED),
                ("task.cpus", "2"),
            ]
        );
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("task.cpus"), "{debug}");
        assert_eq!(c.authenticate_secret(), Some("hunter2"));
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn unknown_keys_are_kept_and_listed() {
        let c = conf(&[
            ("task.cpu", "2"),
            ("spark.foo.bar", "x"),
            ("task.cpus", "2"),
        ]);
        assert_eq!(c.get("foo.bar"), Some("x"));
        assert_eq!(
            c.unknown_keys().collect::<Vec<_>>(),
            ["foo.bar", "task.cpu"]
        );
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn duration_units() {
        let cases = [
            ("500us", Duration::from_micros(500)),
            ("100ms", Duration::from_millis(100)),
            ("120s", Duration::from_secs(120)),
            ("2m", Duration::from_secs(120)),
            ("2min", Duration::from_secs(120)),
            ("1h", Duration::from_secs(3600)),
            ("1d", Duration::from_secs(86_400)),
            ("10S", Duration::from_secs(10)),
            ("2MIN", Duration::from_secs(120)),
            (" 7s ", Duration::from_secs(7)),
        ];
        for (value, expected) in cases {
            let c = conf(&[("network.timeout", value), ("locality.wait", value)]);
            assert_eq!(c.network_timeout(), Ok(expected), "{value}");
            assert_eq!(c.locality_wait(), Ok(expected), "{value}");
        }
    }

    #[test]
    fn durations_are_at_most_100_years() {
        let c = conf(&[
            ("network.timeout", "36500d"),
            ("rpc.connect.timeout", "36500d"),
        ]);
        assert_eq!(c.network_timeout(), Ok(MAX_DURATION));
        assert_eq!(c.connect_timeout(), Ok(MAX_DURATION));
        // One past the bound, and values whose deadlines would overflow a clock reading
        // (`Instant + Duration` panics): refused, naming key and value.
        for value in [
            "36501d",
            "3153600001",
            "3153600001s",
            "18446744073709551615s",
            "18446744073709551615",
            "18446744073709551615d",
            "99999999999999999999s",
        ] {
            let c = conf(&[("rpc.connect.timeout", value), ("rpc.askTimeout", value)]);
            let err = c.connect_timeout().unwrap_err();
            assert_names(err.clone(), "rpc.connect.timeout", value);
            assert!(err.to_string().contains("at most 36500d"), "{err}");
            assert_names(c.ask_timeout().unwrap_err(), "rpc.askTimeout", value);
            assert_names(c.validate().unwrap_err(), "rpc.askTimeout", value);
            let c = conf(&[("rpc.connect.timeout", value)]);
            assert_names(c.validate().unwrap_err(), "rpc.connect.timeout", value);
        }
        // Millisecond keys are capped alike.
        let c = conf(&[("locality.wait", "3153600000001")]);
        assert_names(
            c.locality_wait().unwrap_err(),
            "locality.wait",
            "3153600000001",
        );
        let c = conf(&[("locality.wait", "3153600000000")]);
        assert_eq!(c.locality_wait(), Ok(MAX_DURATION));
    }

    #[test]
    fn bare_durations_take_the_key_unit() {
        let c = conf(&[
            ("network.timeout", "60"),
            ("rpc.askTimeout", "30"),
            ("rpc.connect.timeout", "5"),
            ("rpc.shutdown.flushTimeout", "3"),
            ("authenticate.timeout", "4"),
            ("scheduler.revive.interval", "250"),
            ("scheduler.maxRegisteredResourcesWaitingTime", "1500"),
            ("locality.wait", "0"),
            ("speculation.interval", "50"),
            ("starvation.timeout", "2000"),
            ("executor.heartbeatInterval", "500"),
        ]);
        assert_eq!(c.network_timeout(), Ok(Duration::from_secs(60)));
        assert_eq!(c.ask_timeout(), Ok(Duration::from_secs(30)));
        assert_eq!(c.connect_timeout(), Ok(Duration::from_secs(5)));
        assert_eq!(c.shutdown_flush_timeout(), Ok(Duration::from_secs(3)));
        assert_eq!(c.authenticate_timeout(), Ok(Duration::from_secs(4)));
        assert_eq!(c.revive_interval(), Ok(Duration::from_millis(250)));
        assert_eq!(
            c.max_registered_resources_waiting_time(),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(c.locality_wait(), Ok(Duration::ZERO));
        assert_eq!(c.speculation_interval(), Ok(Duration::from_millis(50)));
        assert_eq!(c.starvation_timeout(), Ok(Duration::from_secs(2)));
        assert_eq!(
            c.executor_heartbeat_interval(),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn bad_durations_name_key_and_value() {
        for value in [
            "12x",
            "",
            "s",
            "1.5s",
            "-1s",
            "1 s",
            "ten",
            "99999999999999999999d",
            "18446744073709551615d",
        ] {
            let c = conf(&[
                ("network.timeout", value),
                ("locality.wait", value),
                ("rpc.shutdown.flushTimeout", value),
            ]);
            assert_names(c.network_timeout().unwrap_err(), "network.timeout", value);
            assert_names(c.locality_wait().unwrap_err(), "locality.wait", value);
            assert_names(
                c.shutdown_flush_timeout().unwrap_err(),
                "rpc.shutdown.flushTimeout",
                value,
            );
        }
        let c = conf(&[("network.timeout", "12x")]);
        assert_eq!(
            c.network_timeout().unwrap_err().to_string(),
            r#"invalid value "12x" for network.timeout: expected a duration such as 120s, 100ms or 2min"#
        );
        // The ask timeout's fallback reports the key the bad value was set under.
        assert_names(c.ask_timeout().unwrap_err(), "network.timeout", "12x");
    }

    #[test]
    fn busy_polls_take_microseconds_when_bare_zero_and_at_most_a_second() {
        for key in ["rpc.io.busyPoll", "executor.busyPoll"] {
            let get = |c: &Conf| {
                if key.starts_with("rpc") {
                    c.rpc_busy_poll()
                } else {
                    c.executor_busy_poll()
                }
            };
            for (value, expected) in [
                ("20", Duration::from_micros(20)),
                ("0", Duration::ZERO),
                ("2ms", Duration::from_millis(2)),
                ("1s", Duration::from_secs(1)),
            ] {
                let c = Conf::from_pairs([format!("{key}={value}")]).unwrap();
                assert_eq!(get(&c), Ok(expected), "{key}={value}");
            }
            for value in ["2s", "fast", "-5"] {
                let c = Conf::from_pairs([format!("{key}={value}")]).unwrap();
                let err = get(&c).unwrap_err().to_string();
                assert!(err.contains(key) && err.contains(value), "{err}");
                assert!(c.validate().is_err(), "{key}={value} passed validate");
            }
        }
    }

    #[test]
    fn zero_is_rejected_where_it_would_spin_or_expire_at_once() {
        let zero_keys = [
            "authenticate.timeout",
            "network.timeout",
            "rpc.askTimeout",
            "rpc.connect.timeout",
            "scheduler.revive.interval",
            "speculation.interval",
            "starvation.timeout",
            "executor.heartbeatInterval",
        ];
        let c: Conf = zero_keys.iter().map(|&k| (k, "0s")).collect();
        for (key, result) in [
            ("authenticate.timeout", c.authenticate_timeout()),
            ("network.timeout", c.network_timeout()),
            ("rpc.askTimeout", c.ask_timeout()),
            ("rpc.connect.timeout", c.connect_timeout()),
            ("scheduler.revive.interval", c.revive_interval()),
            ("speculation.interval", c.speculation_interval()),
            ("starvation.timeout", c.starvation_timeout()),
            (
                "executor.heartbeatInterval",
                c.executor_heartbeat_interval(),
            ),
        ] {
            let err = result.unwrap_err();
            assert_names(err.clone(), key, "0s");
            assert!(err.to_string().contains("above zero"), "{err}");
        }
        // Zero is meaningful for these.
        let c = conf(&[
            ("locality.wait", "0"),
            ("scheduler.maxRegisteredResourcesWaitingTime", "0s"),
            ("rpc.shutdown.flushTimeout", "0"),
        ]);
        assert_eq!(c.shutdown_flush_timeout(), Ok(Duration::ZERO));
        assert_eq!(c.locality_wait(), Ok(Duration::ZERO));
        assert_eq!(
            c.max_registered_resources_waiting_time(),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn ask_timeout_falls_back_to_network_timeout() {
        let c = conf(&[("network.timeout", "45s")]);
        assert_eq!(c.ask_timeout(), Ok(Duration::from_secs(45)));
        assert_eq!(c.ask_timeout_key(), "network.timeout");
        assert_eq!(Conf::new().ask_timeout_key(), "network.timeout");
        let c = conf(&[("network.timeout", "45s"), ("spark.rpc.askTimeout", "5s")]);
        assert_eq!(c.ask_timeout(), Ok(Duration::from_secs(5)));
        assert_eq!(c.ask_timeout_key(), "rpc.askTimeout");
        let c = conf(&[("rpc.askTimeout", "5")]);
        assert_eq!(c.ask_timeout(), Ok(Duration::from_secs(5)));
        assert_eq!(c.network_timeout(), Ok(Duration::from_secs(120)));
        let c = conf(&[("rpc.askTimeout", "soon"), ("network.timeout", "45s")]);
        assert_names(c.ask_timeout().unwrap_err(), "rpc.askTimeout", "soon");
    }

    #[test]
    fn exclusion_thresholds_and_the_offer_shuffle_seed_parse() {
        let c = conf(&[
            (
                "spark.excludeOnFailure.task.maxTaskAttemptsPerExecutor",
                "3",
            ),
            ("excludeOnFailure.task.maxTaskAttemptsPerNode", " 4 "),
            ("excludeOnFailure.stage.maxFailedTasksPerExecutor", "0"),
            ("excludeOnFailure.stage.maxFailedExecutorsPerNode", "5"),
            ("scheduler.offerShuffleSeed", "18446744073709551615"),
        ]);
        assert_eq!(c.exclude_on_failure_max_task_attempts_per_executor(), Ok(3));
        assert_eq!(c.exclude_on_failure_max_task_attempts_per_node(), Ok(4));
        // Zero parses: whether it is allowed depends on excludeOnFailure.enabled.
        assert_eq!(c.exclude_on_failure_max_failed_tasks_per_executor(), Ok(0));
        assert_eq!(c.exclude_on_failure_max_failed_executors_per_node(), Ok(5));
        assert_eq!(c.offer_shuffle_seed(), Ok(Some(u64::MAX)));
        assert_eq!(c.unknown_keys().count(), 0);
        assert_eq!(c.validate(), Ok(()));

        let c = conf(&[
            ("excludeOnFailure.task.maxTaskAttemptsPerNode", "-1"),
            ("scheduler.offerShuffleSeed", "random"),
        ]);
        assert_names(
            c.exclude_on_failure_max_task_attempts_per_node()
                .unwrap_err(),
            "excludeOnFailure.task.maxTaskAttemptsPerNode",
            "-1",
        );
        assert_names(
            c.offer_shuffle_seed().unwrap_err(),
            "scheduler.offerShuffleSeed",
            "random",
        );
        assert!(c.validate().is_err());
    }

    #[test]
    fn size_units() {
        let cases = [
            ("10b", 10),
            ("512k", 512 << 10),
            ("512kb", 512 << 10),
            ("128m", 128 << 20),
            ("128MB", 128 << 20),
            ("1g", 1 << 30),
            ("1GB", 1 << 30),
            ("2G", 2 << 30),
            ("1t", 1 << 40),
            ("1tb", 1 << 40),
            ("1p", 1 << 50),
            ("4096", 4096),
            (" 1k ", 1024),
        ];
        for (value, expected) in cases {
            let c = conf(&[("driver.maxResultSize", value)]);
            assert_eq!(c.driver_max_result_size(), Ok(Some(expected)), "{value}");
        }
        let c = conf(&[("driver.maxResultSize", "0")]);
        assert_eq!(c.driver_max_result_size(), Ok(None));
        let c = conf(&[
            ("rpc.io.sendBufferSize", "256k"),
            ("rpc.io.receiveBufferSize", "1048576"),
            ("rpc.outbox.maxBytes", "8m"),
            ("rpc.io.maxReceiveBytes", "2g"),
        ]);
        assert_eq!(c.max_receive_bytes(), Ok(2048 * MIB));
        assert_eq!(c.send_buffer_size(), Ok(Some(256 << 10)));
        assert_eq!(c.receive_buffer_size(), Ok(Some(MIB)));
        assert_eq!(c.outbox_max_bytes(), Ok(8 * MIB));
    }

    #[test]
    fn bad_sizes_name_key_and_value() {
        for value in [
            "12x",
            "",
            "m",
            "1.5g",
            "-1m",
            "1 m",
            "20000000p",
            "99999999999999999999",
        ] {
            let c = conf(&[
                ("driver.maxResultSize", value),
                ("rpc.io.sendBufferSize", value),
                ("rpc.io.receiveBufferSize", value),
                ("rpc.outbox.maxBytes", value),
                ("rpc.io.maxReceiveBytes", value),
            ]);
            assert_names(
                c.max_receive_bytes().unwrap_err(),
                "rpc.io.maxReceiveBytes",
                value,
            );
            assert_names(
                c.driver_max_result_size().unwrap_err(),
                "driver.maxResultSize",
                value,
            );
            assert_names(
                c.send_buffer_size().unwrap_err(),
                "rpc.io.sendBufferSize",
                value,
            );
            assert_names(
                c.receive_buffer_size().unwrap_err(),
                "rpc.io.receiveBufferSize",
                value,
            );
            assert_names(
                c.outbox_max_bytes().unwrap_err(),
                "rpc.outbox.maxBytes",
                value,
            );
        }
        let c = conf(&[("driver.maxResultSize", "1x")]);
        assert_eq!(
            c.driver_max_result_size().unwrap_err().to_string(),
            r#"invalid value "1x" for driver.maxResultSize: expected a size such as 128m, 512k or 1g"#
        );
        let c = conf(&[("rpc.outbox.maxBytes", "0")]);
        assert_names(
            c.outbox_max_bytes().unwrap_err(),
            "rpc.outbox.maxBytes",
            "0",
        );
        let c = conf(&[("rpc.io.maxReceiveBytes", "0")]);
        assert_names(
            c.max_receive_bytes().unwrap_err(),
            "rpc.io.maxReceiveBytes",
            "0",
        );
    }

    #[test]
    fn message_max_size_is_mib_when_bare_and_at_most_2047() {
        let c = conf(&[("rpc.message.maxSize", "2047")]);
        assert_eq!(c.message_max_size(), Ok(2047 * MIB));
        let c = conf(&[("rpc.message.maxSize", "1")]);
        assert_eq!(c.message_max_size(), Ok(MIB));
        let c = conf(&[("rpc.message.maxSize", "512k")]);
        assert_eq!(c.message_max_size(), Ok(512 << 10));
        let c = conf(&[("rpc.message.maxSize", "1g")]);
        assert_eq!(c.message_max_size(), Ok(1024 * MIB));
        let c = conf(&[("rpc.message.maxSize", "2047m")]);
        assert_eq!(c.message_max_size(), Ok(2047 * MIB));

        for value in [
            "2048",
            "2048m",
            "2g",
            "2146435073b",
            "4096",
            "99999999999999999999",
            "99999999999p",
        ] {
            let c = conf(&[("spark.rpc.message.maxSize", value)]);
            let err = c.message_max_size().unwrap_err();
            assert_eq!(
                err,
                ConfError::MessageMaxSizeTooLarge {
                    value: value.into()
                }
            );
            assert_eq!(
                err.to_string(),
                "rpc.message.maxSize should not be greater than 2047 MB"
            );
        }
        for value in ["0", "0m", "big", "1.5", "-1"] {
            let c = conf(&[("rpc.message.maxSize", value)]);
            assert_names(
                c.message_max_size().unwrap_err(),
                "rpc.message.maxSize",
                value,
            );
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
            assert_eq!(
                conf(&[("scheduler.mode", value)]).scheduler_mode(),
                Ok(mode)
            );
        }
        let err = conf(&[("spark.scheduler.mode", "LIFO")])
            .scheduler_mode()
            .unwrap_err();
        assert_eq!(err.to_string(), "Unrecognized scheduler.mode: LIFO");
        assert_eq!(
            err,
            ConfError::UnrecognizedSchedulingMode {
                value: "LIFO".into()
            }
        );
        assert_eq!(SchedulingMode::Fair.to_string(), "FAIR");
        assert_eq!("fifo".parse(), Ok(SchedulingMode::Fifo));
        assert_eq!(SchedulingMode::default(), SchedulingMode::Fifo);
    }

    #[test]
    fn fractions_are_bounded() {
        for (value, expected) in [("0", 0.0), ("0.5", 0.5), ("1", 1.0), ("1.0", 1.0)] {
            let c = conf(&[
                ("scheduler.minRegisteredResourcesRatio", value),
                ("speculation.quantile", value),
            ]);
            assert_eq!(c.min_registered_resources_ratio(), Ok(expected));
            assert_eq!(c.speculation_quantile(), Ok(expected));
        }
        for value in ["1.01", "-0.1", "NaN", "inf", "half", ""] {
            let c = conf(&[
                ("scheduler.minRegisteredResourcesRatio", value),
                ("speculation.quantile", value),
            ]);
            let err = c.min_registered_resources_ratio().unwrap_err();
            assert_names(err.clone(), "scheduler.minRegisteredResourcesRatio", value);
            assert!(err
                .to_string()
                .ends_with("expected a number between 0.0 and 1.0"));
            assert_names(
                c.speculation_quantile().unwrap_err(),
                "speculation.quantile",
                value,
            );
        }
    }

    #[test]
    fn speculation_multiplier_is_positive_and_finite() {
        let c = conf(&[("speculation.multiplier", "3")]);
        assert_eq!(c.speculation_multiplier(), Ok(3.0));
        for value in ["0", "-1.5", "NaN", "inf", "x"] {
            let c = conf(&[("speculation.multiplier", value)]);
            assert_names(
                c.speculation_multiplier().unwrap_err(),
                "speculation.multiplier",
                value,
            );
        }
    }

    #[test]
    fn counts() {
        let c = conf(&[
            ("task.cpus", "4"),
            ("task.maxFailures", "1"),
            ("default.parallelism", "8"),
            ("executor.heartbeat.maxFailures", "3"),
            ("executor.taskPrefetch", "2"),
            ("executor.maxNumFailures", "5"),
            ("rpc.io.maxConnections", "1"),
        ]);
        assert_eq!(c.executor_max_num_failures(), Ok(Some(5)));
        assert_eq!(c.max_connections(), Ok(1));
        assert_eq!(c.task_cpus(), Ok(4));
        assert_eq!(c.task_max_failures(), Ok(1));
        assert_eq!(c.default_parallelism(), Ok(Some(8)));
        assert_eq!(c.executor_heartbeat_max_failures(), Ok(3));
        assert_eq!(c.executor_task_prefetch(), Ok(2));

        for value in ["0", "-1", "1.5", "two", ""] {
            let c = conf(&[
                ("task.cpus", value),
                ("task.maxFailures", value),
                ("default.parallelism", value),
                ("executor.heartbeat.maxFailures", value),
                ("executor.maxNumFailures", value),
                ("rpc.io.maxConnections", value),
            ]);
            assert_names(c.task_cpus().unwrap_err(), "task.cpus", value);
            assert_names(
                c.max_connections().unwrap_err(),
                "rpc.io.maxConnections",
                value,
            );
            assert_names(
                c.executor_max_num_failures().unwrap_err(),
                "executor.maxNumFailures",
                value,
            );
            assert_names(
                c.task_max_failures().unwrap_err(),
                "task.maxFailures",
                value,
            );
            assert_names(
                c.default_parallelism().unwrap_err(),
                "default.parallelism",
                value,
            );
            assert_names(
                c.executor_heartbeat_max_failures().unwrap_err(),
                "executor.heartbeat.maxFailures",
                value,
            );
        }
        let c = conf(&[("task.cpus", "0")]);
        assert_eq!(
            c.task_cpus().unwrap_err().to_string(),
            r#"invalid value "0" for task.cpus: expected a whole number of at least 1"#
        );
        for value in ["-1", "x"] {
            let c = conf(&[("executor.taskPrefetch", value)]);
            assert_names(
                c.executor_task_prefetch().unwrap_err(),
                "executor.taskPrefetch",
                value,
            );
        }
    }

    #[test]
    fn booleans() {
        for (value, expected) in [
            ("true", true),
            ("TRUE", true),
            ("False", false),
            (" true", true),
        ] {
            let c = conf(&[
                ("speculation", value),
                ("authenticate", value),
                ("authenticate.secret", "s"),
            ]);
            assert_eq!(c.speculation(), Ok(expected));
            assert_eq!(c.authenticate(), Ok(expected));
        }
        for value in ["yes", "1", ""] {
            let c = conf(&[("speculation", value), ("authenticate", value)]);
            assert_names(c.speculation().unwrap_err(), "speculation", value);
            assert_names(c.authenticate().unwrap_err(), "authenticate", value);
        }
        assert_eq!(
            conf(&[("speculation", "yes")])
                .speculation()
                .unwrap_err()
                .to_string(),
            r#"invalid value "yes" for speculation: expected true or false"#
        );
    }

    #[test]
    fn transport_addresses() {
        let c = conf(&[("rpc.bindAddress", "0.0.0.0"), ("rpc.port", "7077")]);
        assert_eq!(c.bind_address(), Ok(IpAddr::from([0, 0, 0, 0])));
        assert_eq!(c.port(), Ok(7077));
        let c = conf(&[("rpc.bindAddress", "::1")]);
        assert_eq!(c.bind_address(), Ok("::1".parse().unwrap()));
        for value in ["localhost", "300.1.1.1", ""] {
            let c = conf(&[("rpc.bindAddress", value)]);
            assert_names(c.bind_address().unwrap_err(), "rpc.bindAddress", value);
        }
        for value in ["65536", "-1", "http"] {
            let c = conf(&[("rpc.port", value)]);
            assert_names(c.port().unwrap_err(), "rpc.port", value);
        }
    }

    #[test]
    fn idle_timeout_is_twice_the_network_timeout_unless_set() {
        assert_eq!(conf(&[]).idle_timeout(), Ok(Some(Duration::from_secs(240))));
        let c = conf(&[("network.timeout", "30s")]);
        assert_eq!(c.idle_timeout(), Ok(Some(Duration::from_secs(60))));
        let c = conf(&[("network.timeout", "30s"), ("rpc.askTimeout", "50s")]);
        assert_eq!(c.idle_timeout(), Ok(Some(Duration::from_secs(100))));
        let c = conf(&[("network.timeout", "30s"), ("rpc.io.idleTimeout", "45")]);
        assert_eq!(c.idle_timeout(), Ok(Some(Duration::from_secs(45))));
        let c = conf(&[("rpc.io.idleTimeout", "0s")]);
        assert_eq!(c.idle_timeout(), Ok(None));
        for value in ["-1", "soon", ""] {
            let c = conf(&[("rpc.io.idleTimeout", value)]);
            assert_names(c.idle_timeout().unwrap_err(), "rpc.io.idleTimeout", value);
        }
    }

    #[test]
    fn validate_checks_every_key_and_the_cross_key_rules() {
        let c = conf(&[("task.cpus", "0")]);
        assert_names(c.validate().unwrap_err(), "task.cpus", "0");

        let c = conf(&[("network.timeout", "10s")]);
        let err = c.validate().unwrap_err();
        assert_eq!(
            err,
            ConfError::HeartbeatNotBelowTimeout {
                network_timeout: Duration::from_secs(10),
                heartbeat_interval: Duration::from_secs(10),
            }
        );
        assert_eq!(
            err.to_string(),
            "The value of network.timeout=10s must be greater than the value of \
             executor.heartbeatInterval=10s"
        );
        let c = conf(&[
            ("network.timeout", "10s"),
            ("executor.heartbeatInterval", "9999"),
        ]);
        assert_eq!(c.validate(), Ok(()));

        let c = conf(&[("rpc.io.idleTimeout", "10s")]);
        let err = c.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "The value of rpc.io.idleTimeout=10s must be greater than the value of \
             executor.heartbeatInterval=10s"
        );
        let c = conf(&[
            ("rpc.io.idleTimeout", "2s"),
            ("executor.heartbeatInterval", "1999ms"),
            ("rpc.askTimeout", "1999ms"),
        ]);
        assert_eq!(c.validate(), Ok(()));
        let c = conf(&[("rpc.io.idleTimeout", "120s")]);
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "The value of rpc.io.idleTimeout=120s must be greater than the value of \
             network.timeout=120s"
        );
        let c = conf(&[("rpc.io.idleTimeout", "200s"), ("rpc.askTimeout", "300s")]);
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "The value of rpc.io.idleTimeout=200s must be greater than the value of \
             rpc.askTimeout=300s"
        );
        // Silent connections kept open: nothing to compare.
        let c = conf(&[("rpc.io.idleTimeout", "0")]);
        assert_eq!(c.validate(), Ok(()));

        let c = conf(&[("authenticate", "true")]);
        assert_eq!(c.validate(), Err(ConfError::MissingSecret));
        let c = conf(&[("authenticate", "true"), ("authenticate.secret", "")]);
        assert_eq!(c.validate(), Err(ConfError::MissingSecret));
        let c = conf(&[("authenticate", "true"), ("authenticate.secret", "s3cr3t")]);
        assert_eq!(c.validate(), Ok(()));
    }
}
