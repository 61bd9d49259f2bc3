//! Configuration: the `key = value` map every crate reads ([`Conf`]), the typed readers
//! that parse its values with the seeds' units, and the transport's own keys.
//!
//! A [`Conf`] is a set of `key = value` strings, as given with `--conf key=value`. The
//! keys are the seeds' keys without their `spark.` prefix; the prefixed form is accepted
//! and stored without it, so `spark.task.cpus` and `task.cpus` are one key.
//!
//! Each crate owns the keys it reads: it writes them once, with their defaults, units
//! and one line of doc, in a table of [`KeyInfo`] rows (this crate's is [`KEYS`]), and
//! reads them through the typed readers here ([`Conf::duration`], [`Conf::size`],
//! [`Conf::count`], ...), which take a [`Key`] looked up in that table when the crate is
//! built: a reader of a key missing from the table does not compile, and the default a
//! reader returns is the table's. The `flint` facade puts the crates' tables together.
//!
//! Units:
//!
//! - durations: a whole number with a suffix `us`, `ms`, `s`, `m` or `min`, `h` or `d`
//!   (`120s`, `100ms`, `2min`); a bare number is in the key's own unit ([`Unit`]); at
//!   most [`MAX_DURATION`], 36500d (100 years);
//! - sizes: a whole number with a suffix `b`, `k`, `m`, `g`, `t` or `p` (binary: `1k` is
//!   1024 bytes), `kb`, `mb`, `gb`, `tb` and `pb` meaning the same, in any case (`128m`,
//!   `1g`, `512K`); a bare number is bytes, or MiB for `rpc.message.maxSize`;
//! - booleans: `true` or `false`, in any case.
//!
//! Surrounding whitespace is ignored when a value is parsed. A value that does not parse,
//! or is out of its key's range, is a [`ConfError`] that names the key, the value and
//! what was expected. A key that is not set reads as its default.
//!
//! ```
//! use std::time::Duration;
//! use flint_rpc::conf::Conf;
//!
//! let mut conf = Conf::new();
//! conf.set("spark.rpc.askTimeout", "10").set("rpc.connect.timeout", "2s");
//! assert_eq!(conf.ask_timeout()?, Duration::from_secs(10));
//! assert_eq!(conf.network_timeout()?, Duration::from_secs(120)); // the default
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
use std::time::Duration;

mod error;
mod key;
mod parse;
mod transport;

pub use error::ConfError;
pub use key::{find, Key, KeyInfo, OptionalKey, TimeUnit, Unit};
pub use transport::{
    ASK_TIMEOUT_KEY, BIND_ADDRESS_KEY, CONNECT_TIMEOUT_KEY, KEYS, NETWORK_TIMEOUT_KEY,
    OUTBOX_MAX_BYTES_KEY, PORT_KEY,
};

use parse::{parse_duration, parse_size, DurationError};

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

const EXPECT_DURATION: &str = "a duration such as 120s, 100ms or 2min";
const EXPECT_DURATION_AT_MOST: &str = "a duration of at most 36500d (100 years)";
const EXPECT_POSITIVE_DURATION: &str = "a duration above zero such as 120s, 100ms or 2min";
const EXPECT_SIZE: &str = "a size such as 128m, 512k or 1g";
const EXPECT_POSITIVE_SIZE: &str = "a size above zero such as 64m, 512k or 1g";
const EXPECT_COUNT: &str = "a whole number such as 0 or 2";
const EXPECT_POSITIVE_COUNT: &str = "a whole number of at least 1";
const EXPECT_BOOL: &str = "true or false";
const EXPECT_FRACTION: &str = "a number between 0.0 and 1.0";
const EXPECT_POSITIVE_NUMBER: &str = "a number above 0 such as 1.5";
const EXPECT_PORT: &str = "a port number between 0 and 65535";

impl DurationError {
    fn into_conf(self, key: &'static str, value: &str) -> ConfError {
        let expected = match self {
            DurationError::Malformed => EXPECT_DURATION,
            DurationError::TooLong => EXPECT_DURATION_AT_MOST,
        };
        ConfError::invalid(key, value, expected)
    }
}

/// The normal form of a key: trimmed, without a leading `spark.`.
pub fn normalize(key: &str) -> &str {
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

/// flint's configuration: `key = value` strings, read through typed readers.
///
/// Keys are stored without a leading `spark.`. Any key may be set; keys no crate reads
/// are kept (the `flint` command warns about them, naming the closest known key).
/// Values are not checked when set but when read: each reader parses its key's value, or
/// the key's default when it is not set, and returns a [`ConfError`] naming the key and
/// the value if it is bad.
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

    // ---- typed readers ---------------------------------------------------------------

    /// The value of `key` as set, or its table default.
    pub fn value(&self, key: Key) -> &str {
        self.entries
            .get(key.name())
            .map_or(key.default_value(), String::as_str)
    }

    /// The value of `key` as set; `None` when it is not set.
    pub fn text(&self, key: OptionalKey) -> Option<&str> {
        self.entries.get(key.name()).map(String::as_str)
    }

    /// `key` as a duration ([`Unit::Duration`] gives the unit of a bare number).
    pub fn duration(&self, key: Key) -> Result<Duration, ConfError> {
        let value = self.value(key);
        parse_duration(value, key.info().unit.bare_time())
            .map_err(|e| e.into_conf(key.name(), value))
    }

    /// `key` as a duration above zero: zero would make a timer fire at once or a
    /// timeout expire before anything happened.
    pub fn positive_duration(&self, key: Key) -> Result<Duration, ConfError> {
        positive_duration(key.name(), self.value(key), key.info().unit.bare_time())
    }

    /// `key` as a duration above zero; `None` when it is not set.
    pub fn optional_positive_duration(
        &self,
        key: OptionalKey,
    ) -> Result<Option<Duration>, ConfError> {
        self.text(key)
            .map(|value| positive_duration(key.name(), value, key.info().unit.bare_time()))
            .transpose()
    }

    /// `key` as a duration, zero included; `None` when it is not set.
    pub fn optional_duration(&self, key: OptionalKey) -> Result<Option<Duration>, ConfError> {
        self.text(key)
            .map(|value| {
                parse_duration(value, key.info().unit.bare_time())
                    .map_err(|e| e.into_conf(key.name(), value))
            })
            .transpose()
    }

    /// `key` as a busy-poll duration: at most one second, as polling longer only burns
    /// the CPU a sleeping thread would give back.
    pub fn busy_poll(&self, key: Key) -> Result<Duration, ConfError> {
        let poll = self.duration(key)?;
        if poll > MAX_BUSY_POLL {
            return Err(ConfError::invalid(
                key.name(),
                self.value(key),
                "a duration of at most 1s, e.g. \"50us\"",
            ));
        }
        Ok(poll)
    }

    /// `key` as a size in bytes ([`Unit::Mebibytes`] keys take MiB when bare).
    pub fn size(&self, key: Key) -> Result<u64, ConfError> {
        let value = self.value(key);
        parse_size(value, key.info().unit.bare_bytes())
            .map_err(|_| ConfError::invalid(key.name(), value, EXPECT_SIZE))
    }

    /// `key` as a size in bytes that fits this machine's `usize`.
    pub fn size_usize(&self, key: Key) -> Result<usize, ConfError> {
        let bytes = self.size(key)?;
        usize::try_from(bytes)
            .map_err(|_| ConfError::invalid(key.name(), self.value(key), EXPECT_SIZE))
    }

    /// `key` as a size in bytes above zero that fits this machine's `usize`.
    pub fn positive_size_usize(&self, key: Key) -> Result<usize, ConfError> {
        let value = self.value(key);
        let refused = || ConfError::invalid(key.name(), value, EXPECT_POSITIVE_SIZE);
        let bytes = parse_size(value, key.info().unit.bare_bytes()).map_err(|_| refused())?;
        match usize::try_from(bytes) {
            Ok(bytes) if bytes > 0 => Ok(bytes),
            _ => Err(refused()),
        }
    }

    /// `key` as a whole number of at least `min`.
    pub fn count(&self, key: Key, min: usize) -> Result<usize, ConfError> {
        count(key.name(), self.value(key), min)
    }

    /// `key` as a whole number of at least `min`; `None` when it is not set.
    pub fn optional_count(&self, key: OptionalKey, min: usize) -> Result<Option<usize>, ConfError> {
        self.text(key)
            .map(|value| count(key.name(), value, min))
            .transpose()
    }

    /// `key` as a 64-bit whole number; `None` when it is not set.
    pub fn optional_u64(&self, key: OptionalKey) -> Result<Option<u64>, ConfError> {
        self.text(key)
            .map(|value| {
                value
                    .trim()
                    .parse()
                    .map_err(|_| ConfError::invalid(key.name(), value, EXPECT_COUNT))
            })
            .transpose()
    }

    /// `key` as a number between 0.0 and 1.0.
    pub fn fraction(&self, key: Key) -> Result<f64, ConfError> {
        let value = self.value(key);
        match value.trim().parse::<f64>() {
            Ok(x) if (0.0..=1.0).contains(&x) => Ok(x),
            _ => Err(ConfError::invalid(key.name(), value, EXPECT_FRACTION)),
        }
    }

    /// `key` as a finite number above zero.
    pub fn positive_number(&self, key: Key) -> Result<f64, ConfError> {
        let value = self.value(key);
        match value.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(ConfError::invalid(
                key.name(),
                value,
                EXPECT_POSITIVE_NUMBER,
            )),
        }
    }

    /// `key` as a port number, 0 to 65535.
    pub fn port_number(&self, key: Key) -> Result<u16, ConfError> {
        let value = self.value(key);
        value
            .trim()
            .parse()
            .map_err(|_| ConfError::invalid(key.name(), value, EXPECT_PORT))
    }

    /// `key` as `true` or `false`, in any case.
    pub fn boolean(&self, key: Key) -> Result<bool, ConfError> {
        let value = self.value(key);
        let trimmed = value.trim();
        if trimmed.eq_ignore_ascii_case("true") {
            Ok(true)
        } else if trimmed.eq_ignore_ascii_case("false") {
            Ok(false)
        } else {
            Err(ConfError::invalid(key.name(), value, EXPECT_BOOL))
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
mod tests;
