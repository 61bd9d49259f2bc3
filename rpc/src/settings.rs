//! The settings an environment runs with: every value of the configuration the transport
//! reads, read and checked once, when the environment is made. The bottom of the
//! transport's own layers: everything above reads its limits and timeouts from here, and
//! none of it reads a [`Conf`] again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::conf::{Conf, ASK_TIMEOUT_KEY};
use crate::error::{RpcError, TimeoutSource};
use crate::receive_budget::UNBUDGETED_FRAME;
use crate::socket::SocketOptions;

/// The settings an environment runs with, read from a [`Conf`] once.
#[derive(Debug, Clone)]
pub struct Settings {
    /// rpc.message.maxSize, in bytes.
    pub max_payload: usize,
    /// rpc.outbox.maxBytes.
    pub outbox_limit: usize,
    /// rpc.askTimeout (falling back to network.timeout).
    pub ask_timeout: Duration,
    /// Which key `ask_timeout` came from, for timeout errors.
    pub ask_timeout_set_by: TimeoutSource,
    /// rpc.connect.timeout.
    pub connect_timeout: Duration,
    /// Socket buffer sizes.
    pub socket: SocketOptions,
    /// The shared secret, when authenticate=true.
    pub secret: Option<Arc<[u8]>>,
    /// How long a connection may take to authenticate (authenticate.timeout).
    pub auth_timeout: Duration,
    /// Whether every frame after the handshake is sealed (network.crypto.enabled; only
    /// with a `secret`).
    pub crypto: bool,
    /// The listener's address (rpc.bindAddress, rpc.port).
    pub bind: SocketAddr,
    /// Whether the environment listens at `bind`. One that does not (see
    /// [`RpcEnv::client`](crate::RpcEnv::client)) is reached only over the connections it
    /// opens itself.
    pub listen: bool,
    /// How long stopping waits for outboxes to drain (rpc.shutdown.flushTimeout).
    pub shutdown_flush: Duration,
    /// How long the loop polls without blocking after it worked (rpc.io.busyPoll).
    pub busy_poll: Duration,
    /// The most connections from peers held open at once (rpc.io.maxConnections).
    pub max_connections: usize,
    /// The most connections from one host held open at once
    /// (rpc.io.maxConnectionsPerHost, at most `max_connections`).
    pub max_connections_per_host: usize,
    /// The most bytes large frames may hold, partly received, across all connections
    /// (rpc.io.maxReceiveBytes, raised to one frame of `max_payload` and one read).
    pub max_receive_bytes: usize,
    /// How long a connection may send nothing in the middle of a frame (network.timeout),
    /// and how long a frame may come slower than 1 MiB/s from its first bytes.
    pub stalled_frame_timeout: Duration,
    /// How long a connection from a peer may send nothing at all (rpc.io.idleTimeout);
    /// `None` keeps it open.
    pub idle_timeout: Option<Duration>,
}

impl Settings {
    /// Reads and checks the settings from `conf`.
    pub fn from_conf(conf: &Conf) -> Result<Self, RpcError> {
        conf.validate()?;
        let secret = if conf.authenticate()? {
            let secret = conf.authenticate_secret().unwrap_or_default();
            Some(Arc::from(secret.as_bytes()))
        } else {
            None
        };
        let crypto = conf.crypto_enabled()?;
        // A sealed frame is longer by its tag: the largest must still fit the budget.
        let tag = if crypto { flint_wire::TAG_LEN } else { 0 };
        Ok(Settings {
            max_payload: conf.message_max_size()?,
            outbox_limit: conf.outbox_max_bytes()?,
            ask_timeout: conf.ask_timeout()?,
            ask_timeout_set_by: if conf.ask_timeout_key() == ASK_TIMEOUT_KEY {
                TimeoutSource::AskTimeout
            } else {
                TimeoutSource::NetworkTimeout
            },
            connect_timeout: conf.connect_timeout()?,
            socket: SocketOptions {
                send_buffer: conf.send_buffer_size()?,
                receive_buffer: conf.receive_buffer_size()?,
            },
            secret,
            auth_timeout: conf.authenticate_timeout()?,
            crypto,
            bind: SocketAddr::new(conf.bind_address()?, conf.port()?),
            listen: true,
            shutdown_flush: conf.shutdown_flush_timeout()?,
            busy_poll: conf.rpc_busy_poll()?,
            max_connections: conf.max_connections()?,
            max_connections_per_host: conf
                .max_connections_per_host()?
                .min(conf.max_connections()?),
            max_receive_bytes: conf.max_receive_bytes()?.max(
                flint_wire::padded_frame_len(conf.message_max_size()?) + tag + UNBUDGETED_FRAME,
            ),
            stalled_frame_timeout: conf.network_timeout()?,
            idle_timeout: conf.idle_timeout()?,
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn an_environment_holds_no_more_connections_from_one_host_than_from_all() {
        let settings = |pairs: &[&str]| {
            Settings::from_conf(&Conf::from_pairs(pairs.iter().copied()).unwrap()).unwrap()
        };
        let both = settings(&[
            "rpc.io.maxConnections=50",
            "rpc.io.maxConnectionsPerHost=20",
        ]);
        assert_eq!(
            (both.max_connections, both.max_connections_per_host),
            (50, 20)
        );
        let total_only = settings(&["rpc.io.maxConnections=50"]);
        assert_eq!(
            (
                total_only.max_connections,
                total_only.max_connections_per_host
            ),
            (50, 50)
        );
        let defaults = settings(&[]);
        assert_eq!(
            (defaults.max_connections, defaults.max_connections_per_host),
            (10_000, 1000)
        );
    }
}
