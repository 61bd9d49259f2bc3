//! What can be wrong with a configuration.

use std::time::Duration;

use flint_wire::MAX_SIZE_KEY;

use super::MAX_MESSAGE_SIZE_MB;

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
    /// A key that takes one of a few words has another; the text is the seeds' (as in
    /// "Unrecognized scheduler.mode: X").
    #[error("Unrecognized {key}: {value}")]
    Unrecognized {
        /// The key, without the `spark.` prefix.
        key: &'static str,
        /// The value as it was set.
        value: String,
    },
    /// `rpc.message.maxSize` is above 2047 MiB; the text is the seeds'.
    #[error("{key} should not be greater than {max} MB", key = MAX_SIZE_KEY, max = MAX_MESSAGE_SIZE_MB)]
    MessageMaxSizeTooLarge {
        /// The value as it was set.
        value: String,
    },
    /// Two durations that constrain each other do not: the first must be longer (for
    /// example executors would be expired between two of their heartbeats). The text is
    /// the seeds'.
    #[error("The value of {key}={value:?} must be greater than the value of {than_key}={than:?}")]
    MustBeGreater {
        /// The key that must be greater.
        key: &'static str,
        /// Its value.
        value: Duration,
        /// The key it must be greater than.
        than_key: &'static str,
        /// That key's value.
        than: Duration,
    },
    /// `authenticate` is true but there is no secret to authenticate with.
    #[error("A secret key must be specified via the authenticate.secret config when authenticate is true")]
    MissingSecret,
    /// `network.crypto.enabled` is true without `authenticate`: the session keys are
    /// derived from the secret and the handshake's nonces, so there is none to seal with.
    #[error(
        "network.crypto.enabled=true needs authenticate=true and an authenticate.secret: \
         the keys that seal the frames are derived from the secret during the \
         authentication handshake"
    )]
    CryptoWithoutAuthentication,
}

impl ConfError {
    /// An [`ConfError::InvalidValue`]: `value` of `key` is not `expected`.
    pub fn invalid(key: &'static str, value: &str, expected: &'static str) -> Self {
        ConfError::InvalidValue {
            key,
            value: value.to_owned(),
            expected,
        }
    }
}
