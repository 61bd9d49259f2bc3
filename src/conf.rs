//! The whole catalogue of flint's configuration keys, put together from the crates that
//! read them, and the checks that need keys of several crates.
//!
//! Each crate owns its keys ([`flint_rpc::conf::KEYS`], [`flint_scheduler::KEYS`],
//! [`flint_executor::config::KEYS`], [`flint_ui::KEYS`]); this module lists them together ([`CATALOGUE`],
//! printed by `flint conf`), finds keys no crate reads with the closest known key
//! ([`unknown_keys`]), and checks a whole configuration ([`validate`]).
//!
//! ```
//! use flint::conf::{unknown_keys, validate};
//! use flint::rpc::Conf;
//!
//! let conf = Conf::from_pairs(["executor.taskPrefech=4", "spark.sql.shuffle.partitions=8"])?;
//! let unknown = unknown_keys(&conf);
//! assert_eq!(unknown[0].key, "executor.taskPrefech");
//! assert_eq!(unknown[0].suggestion, Some("executor.taskPrefetch"));
//! assert_eq!(unknown[1].suggestion, None); // another tool's key: no guess
//! assert!(validate(&conf).is_ok()); // unknown keys are warned about, not refused
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt::Write as _;

use flint_executor::config::HEARTBEAT_INTERVAL_KEY;
use flint_executor::ExecutorConfig;
use flint_rpc::conf::{normalize, Conf, ConfError, KeyInfo, NETWORK_TIMEOUT_KEY};
use flint_scheduler::{SchedulerConfig, SchedulerError};

/// The keys one crate reads.
#[derive(Debug, Clone, Copy)]
pub struct KeyGroup {
    /// The crate.
    pub crate_name: &'static str,
    /// What it is, for the heading `flint conf` prints.
    pub about: &'static str,
    /// Its key table.
    pub keys: &'static [KeyInfo],
}

/// Every key flint reads, by crate.
pub const CATALOGUE: [KeyGroup; 4] = [
    KeyGroup {
        crate_name: "flint-rpc",
        about: "the transport, in drivers and executors alike",
        keys: flint_rpc::conf::KEYS,
    },
    KeyGroup {
        crate_name: "flint-scheduler",
        about: "the driver",
        keys: flint_scheduler::KEYS,
    },
    KeyGroup {
        crate_name: "flint-executor",
        about: "executors",
        keys: flint_executor::config::KEYS,
    },
    KeyGroup {
        crate_name: "flint-ui",
        about: "the driver's status page",
        keys: flint_ui::KEYS,
    },
];

/// The row of `key` (with or without its `spark.` prefix) in the catalogue.
pub fn key_info(key: &str) -> Option<&'static KeyInfo> {
    let key = normalize(key);
    CATALOGUE
        .iter()
        .flat_map(|group| group.keys)
        .find(|info| info.key == key)
}

/// A key that was set but that no crate reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey {
    /// The key as stored (without `spark.`).
    pub key: String,
    /// The known key it is most likely a misspelling of, if one is close.
    pub suggestion: Option<&'static str>,
}

/// The keys of `conf` that no crate reads, sorted, each with the closest known key when
/// one is close enough to be a likely misspelling (other tools' `spark.` keys are kept
/// without a guess).
pub fn unknown_keys(conf: &Conf) -> Vec<UnknownKey> {
    conf.iter()
        .map(|(key, _)| key)
        .filter(|key| key_info(key).is_none())
        .map(|key| UnknownKey {
            key: key.to_owned(),
            suggestion: closest_key(key),
        })
        .collect()
}

/// The known key closest to `key` by edit distance, ignoring case, when it is at most a
/// third of the key's length away (a typo or two, not another key altogether).
fn closest_key(key: &str) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    CATALOGUE
        .iter()
        .flat_map(|group| group.keys)
        .map(|info| {
            let distance = strsim::levenshtein(&lower, &info.key.to_ascii_lowercase());
            (distance, info.key)
        })
        .filter(|&(distance, known)| distance <= known.len().max(key.len()) / 3)
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, known)| known)
}

/// What is wrong with a configuration as a whole.
#[derive(Debug, thiserror::Error)]
pub enum InvalidConf {
    /// A value, or a rule between keys.
    #[error(transparent)]
    Conf(#[from] ConfError),
    /// The scheduler's checks (exclusion thresholds).
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
}

/// Reads every key of every crate, returning the first error, then checks the rules
/// between keys of different crates: executors' `executor.heartbeatInterval` must be
/// below `network.timeout` (after which the driver expires a silent executor) and below
/// `rpc.io.idleTimeout` (after which a silent connection is closed). Keys no crate reads
/// are not errors ([`unknown_keys`] finds them).
pub fn validate(conf: &Conf) -> Result<(), InvalidConf> {
    conf.validate()?;
    SchedulerConfig::read(conf)?;
    let executor = ExecutorConfig::from_conf(conf, "", "", 1)?;
    flint_ui::UiConfig::from_conf(conf)?;

    let heartbeat_interval = executor.heartbeat_interval;
    let network_timeout = conf.network_timeout()?;
    if network_timeout <= heartbeat_interval {
        return Err(ConfError::MustBeGreater {
            key: NETWORK_TIMEOUT_KEY,
            value: network_timeout,
            than_key: HEARTBEAT_INTERVAL_KEY,
            than: heartbeat_interval,
        }
        .into());
    }
    if let Some(idle_timeout) = conf.idle_timeout()? {
        if idle_timeout <= heartbeat_interval {
            return Err(ConfError::MustBeGreater {
                key: "rpc.io.idleTimeout",
                value: idle_timeout,
                than_key: HEARTBEAT_INTERVAL_KEY,
                than: heartbeat_interval,
            }
            .into());
        }
    }
    Ok(())
}

/// The catalogue as `flint conf` prints it: a section per crate, a line per key with
/// its default and unit, and its one line of doc under it.
pub fn catalogue_text() -> String {
    let mut out = String::new();
    for group in CATALOGUE {
        let _ = writeln!(out, "# {} ({})", group.crate_name, group.about);
        for info in group.keys {
            let _ = writeln!(
                out,
                "{:<50} {:<12} {}",
                info.key,
                info.default.unwrap_or("(none)"),
                info.unit
            );
            let _ = writeln!(out, "    {}", info.doc);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn conf(pairs: &[(&str, &str)]) -> Conf {
        pairs.iter().copied().collect()
    }

    #[test]
    fn every_key_belongs_to_one_crate() {
        let mut keys: Vec<_> = CATALOGUE
            .iter()
            .flat_map(|group| group.keys)
            .map(|info| info.key)
            .collect();
        let count = keys.len();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), count, "a key is in two tables");
        assert_eq!(count, 57);
        assert_eq!(
            key_info("spark.task.cpus").map(|k| k.default),
            Some(Some("1"))
        );
        assert_eq!(key_info("task.cpu"), None);
    }

    #[test]
    fn the_defaults_of_every_key_are_valid() {
        assert!(validate(&Conf::new()).is_ok());
        let explicit: Conf = CATALOGUE
            .iter()
            .flat_map(|group| group.keys)
            .filter_map(|k| k.default.map(|d| (k.key, d)))
            .collect();
        assert!(validate(&explicit).is_ok());
        assert!(unknown_keys(&explicit).is_empty());
    }

    #[test]
    fn unknown_keys_are_listed_with_the_closest_known_key() {
        let c = conf(&[
            ("task.cpu", "2"),
            ("spark.foo.bar", "x"),
            ("task.cpus", "2"),
            ("Executor.TaskPrefetch", "1"),
            ("locality.wiat", "0"),
        ]);
        assert_eq!(
            unknown_keys(&c),
            [
                UnknownKey {
                    key: "Executor.TaskPrefetch".into(),
                    suggestion: Some("executor.taskPrefetch"),
                },
                UnknownKey {
                    key: "foo.bar".into(),
                    suggestion: None,
                },
                UnknownKey {
                    key: "locality.wiat".into(),
                    suggestion: Some("locality.wait"),
                },
                UnknownKey {
                    key: "task.cpu".into(),
                    suggestion: Some("task.cpus"),
                },
            ]
        );
        assert!(validate(&c).is_ok());
    }

    #[test]
    fn validate_reads_every_crate_and_checks_the_rules_between_them() {
        let err = validate(&conf(&[("task.cpus", "0")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid value "0" for task.cpus: expected a whole number of at least 1"#
        );
        assert!(validate(&conf(&[("executor.busyPoll", "2s")])).is_err());
        assert!(validate(&conf(&[("rpc.port", "http")])).is_err());
        let err = validate(&conf(&[("ui.port", "70000")])).unwrap_err();
        assert!(err.to_string().contains("ui.port"), "{err}");
        assert!(validate(&conf(&[("ui.enabled", "maybe")])).is_err());
        assert!(validate(&conf(&[("ui.enabled", "false"), ("ui.port", "0")])).is_ok());

        let err = validate(&conf(&[("network.timeout", "10s")])).unwrap_err();
        assert!(matches!(
            err,
            InvalidConf::Conf(ConfError::MustBeGreater {
                value,
                than,
                ..
            }) if value == Duration::from_secs(10) && than == Duration::from_secs(10)
        ));
        assert_eq!(
            err.to_string(),
            "The value of network.timeout=10s must be greater than the value of \
             executor.heartbeatInterval=10s"
        );
        let c = conf(&[
            ("network.timeout", "10s"),
            ("executor.heartbeatInterval", "9999"),
        ]);
        assert!(validate(&c).is_ok());

        let err = validate(&conf(&[
            ("rpc.io.idleTimeout", "10s"),
            ("rpc.askTimeout", "5s"),
        ]))
        .unwrap_err();
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
        assert!(validate(&c).is_ok());
        // The transport's own rule, checked by the transport.
        let err = validate(&conf(&[("rpc.io.idleTimeout", "120s")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "The value of rpc.io.idleTimeout=120s must be greater than the value of \
             network.timeout=120s"
        );
        let err = validate(&conf(&[("authenticate", "true")])).unwrap_err();
        assert!(matches!(err, InvalidConf::Conf(ConfError::MissingSecret)));
    }

    #[test]
    fn encryption_needs_authentication_and_is_a_known_key() {
        for value in ["true", " TRUE"] {
            let c = conf(&[("spark.network.crypto.enabled", value)]);
            let err = validate(&c).unwrap_err();
            assert!(
                matches!(
                    err,
                    InvalidConf::Conf(ConfError::CryptoWithoutAuthentication)
                ),
                "{err}"
            );
            let text = err.to_string();
            assert!(
                text.starts_with(
                    "network.crypto.enabled=true needs authenticate=true and an \
                     authenticate.secret"
                ),
                "{text}"
            );
            assert!(unknown_keys(&c).is_empty());
        }
        let on = conf(&[
            ("network.crypto.enabled", "true"),
            ("authenticate", "true"),
            ("authenticate.secret", "s3cr3t"),
        ]);
        assert!(validate(&on).is_ok());
        let off = conf(&[("network.crypto.enabled", "false")]);
        assert!(validate(&off).is_ok());
        assert!(unknown_keys(&off).is_empty());
        let err = validate(&conf(&[("network.crypto.enabled", "yes")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid value "yes" for network.crypto.enabled: expected true or false"#
        );
        assert!(catalogue_text().contains("network.crypto.enabled"));
        // Other keys of the seeds flint does not read are still only warned about.
        let other = conf(&[("network.crypto.saslFallback", "true")]);
        assert!(validate(&other).is_ok());
        assert_eq!(unknown_keys(&other).len(), 1);
    }

    #[test]
    fn the_printed_catalogue_has_every_key_with_its_default_and_unit() {
        let text = catalogue_text();
        for group in CATALOGUE {
            assert!(text.contains(&format!("# {}", group.crate_name)), "{text}");
            for info in group.keys {
                assert!(text.contains(info.key), "{}", info.key);
                assert!(text.contains(info.doc), "{}", info.key);
            }
        }
        let line = text
            .lines()
            .find(|l| l.starts_with("locality.wait "))
            .unwrap();
        assert!(
            line.contains("3s") && line.contains("duration (ms)"),
            "{line}"
        );
        // Spark's sizes in MiB when bare say so.
        for key in ["reducer.maxSizeInFlight ", "rpc.message.maxSize "] {
            let line = text.lines().find(|l| l.starts_with(key)).unwrap();
            assert!(line.contains("size (MiB)"), "{line}");
        }
    }
}
