//! [`RpcEnv::builder`]: an environment set up in code, method by method, for embedders
//! who would rather not write configuration strings. Every method sets the key a `--conf`
//! argument would (so the two cannot disagree), and [`RpcEnvBuilder::build`] reads them
//! as [`RpcEnv::new`] does, with the same errors.

use std::net::IpAddr;
use std::time::Duration;

use crate::conf::{Conf, ConfError, BIND_ADDRESS_KEY, PORT_KEY};
use crate::env::RpcEnv;
use crate::error::RpcError;

/// Builds an [`RpcEnv`]; made by [`RpcEnv::builder`].
///
/// ```
/// use flint_rpc::RpcEnv;
///
/// let server = RpcEnv::builder()
///     .bind_address([127, 0, 0, 1].into())
///     .port(0) // any free port
///     .secret("correct horse battery staple")
///     .conf("rpc.askTimeout", "5s")
///     .build()?;
/// assert!(server.address().port() != 0);
/// # Ok::<(), flint_rpc::RpcError>(())
/// ```
#[derive(Debug, Default)]
#[must_use = "a builder does nothing until build()"]
pub struct RpcEnvBuilder {
    conf: Conf,
    client: bool,
    /// The first `key=value` pair that did not parse, reported by `build`.
    error: Option<ConfError>,
}

impl RpcEnv {
    /// A builder for an environment: the defaults of [`Conf::new`], changed method by
    /// method.
    pub fn builder() -> RpcEnvBuilder {
        RpcEnvBuilder::default()
    }
}

impl RpcEnvBuilder {
    /// The address the listener binds (`rpc.bindAddress`).
    pub fn bind_address(mut self, address: IpAddr) -> Self {
        self.conf.set(BIND_ADDRESS_KEY, address.to_string());
        self
    }

    /// The port the listener binds (`rpc.port`); 0 for any free one.
    pub fn port(mut self, port: u16) -> Self {
        self.conf.set(PORT_KEY, port.to_string());
        self
    }

    /// Requires every peer to prove it knows `secret`, and proves it to them
    /// (`authenticate=true`, `authenticate.secret`).
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        self.conf.set("authenticate", "true");
        self.conf.set("authenticate.secret", secret);
        self
    }

    /// How long a blocking ask waits for its reply (`rpc.askTimeout`).
    pub fn ask_timeout(mut self, timeout: Duration) -> Self {
        self.conf.set(
            crate::conf::ASK_TIMEOUT_KEY,
            format!("{}ms", timeout.as_millis()),
        );
        self
    }

    /// Sets any key, as `--conf key=value` would (`spark.` is optional).
    pub fn conf(mut self, key: &str, value: impl Into<String>) -> Self {
        self.conf.set(key, value);
        self
    }

    /// Sets keys from `key=value` pairs, as [`Conf::from_pairs`] reads them; a pair
    /// without `=` is reported by [`RpcEnvBuilder::build`].
    pub fn conf_pairs<I>(mut self, pairs: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        for pair in pairs {
            match Conf::parse_pair(pair.as_ref()) {
                Ok((key, value)) => {
                    self.conf.set(key, value);
                }
                Err(error) => {
                    self.error.get_or_insert(error);
                }
            }
        }
        self
    }

    /// No listener: the environment only connects out ([`RpcEnv::client`]).
    pub fn client_only(mut self) -> Self {
        self.client = true;
        self
    }

    /// The configuration built so far.
    pub fn to_conf(&self) -> &Conf {
        &self.conf
    }

    /// Binds the listener (unless [`RpcEnvBuilder::client_only`]) and starts the loop
    /// thread. Fails as [`RpcEnv::new`] does for an invalid value, naming its key.
    pub fn build(self) -> Result<RpcEnv, RpcError> {
        if let Some(error) = self.error {
            return Err(error.into());
        }
        if self.client {
            RpcEnv::client(&self.conf)
        } else {
            RpcEnv::new(&self.conf)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn each_method_sets_the_key_a_conf_argument_would() {
        let builder = RpcEnv::builder()
            .bind_address([127, 0, 0, 2].into())
            .port(7077)
            .secret("s3cret")
            .ask_timeout(Duration::from_millis(1500))
            .conf("spark.rpc.io.maxConnections", "9")
            .conf_pairs(["network.timeout=7s", "spark.rpc.outbox.maxBytes=1m"]);
        let conf = builder.to_conf();
        for (key, value) in [
            ("rpc.bindAddress", "127.0.0.2"),
            ("rpc.port", "7077"),
            ("authenticate", "true"),
            ("authenticate.secret", "s3cret"),
            ("rpc.askTimeout", "1500ms"),
            ("rpc.io.maxConnections", "9"),
            ("network.timeout", "7s"),
            ("rpc.outbox.maxBytes", "1m"),
        ] {
            assert_eq!(conf.get(key), Some(value), "{key}");
        }
    }

    #[test]
    fn a_bad_pair_or_value_fails_the_build_naming_it() {
        let error = RpcEnv::builder()
            .conf_pairs(["rpc.port"])
            .build()
            .unwrap_err()
            .to_string();
        assert!(error.contains("rpc.port"), "{error}");
        let error = RpcEnv::builder()
            .conf("rpc.askTimeout", "soon")
            .build()
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("rpc.askTimeout") && error.contains("soon"),
            "{error}"
        );
    }
}
