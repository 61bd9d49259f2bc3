//! The transport's keys: `rpc.*`, `network.timeout`, `network.crypto.enabled` and
//! `authenticate.*`, with their readers.

use std::net::IpAddr;
use std::time::Duration;

use flint_wire::{CRYPTO_KEY, MAX_SIZE_KEY};

use super::parse::{parse_size, SizeError};
use super::{Conf, ConfError, Key, KeyInfo, OptionalKey, TimeUnit, Unit, MAX_MESSAGE_SIZE_MB};

const SECS: Unit = Unit::Duration(TimeUnit::Secs);
const MICROS: Unit = Unit::Duration(TimeUnit::Micros);

/// Every key the transport reads, in alphabetical order, with its default, unit and
/// meaning.
pub const KEYS: &[KeyInfo] = &[
    KeyInfo::new(
        "authenticate",
        Some("false"),
        Unit::Bool,
        "Whether peers must prove they know authenticate.secret before any message.",
    ),
    KeyInfo::new(
        "authenticate.secret",
        None,
        Unit::Text,
        "The shared secret; required, non-empty, with authenticate=true. Redacted when printed.",
    ),
    KeyInfo::new(
        "authenticate.timeout",
        Some("10s"),
        SECS,
        "flint's own: how long a peer may take to finish the authentication handshake.",
    ),
    KeyInfo::new(
        CRYPTO_KEY,
        Some("false"),
        Unit::Bool,
        "Whether every frame after the handshake is sealed (AES-256-GCM, per-connection keys); \
         needs authenticate=true.",
    ),
    KeyInfo::new(
        "network.timeout",
        Some("120s"),
        SECS,
        "Default network timeout: executor expiry, stalled and trickled frames, idle peers.",
    ),
    KeyInfo::new(
        "rpc.askTimeout",
        None,
        SECS,
        "How long an ask waits for its reply; network.timeout when not set.",
    ),
    KeyInfo::new(
        "rpc.bindAddress",
        Some("127.0.0.1"),
        Unit::Address,
        "IP address the RPC listener binds to (0.0.0.0 for every interface).",
    ),
    KeyInfo::new(
        "rpc.connect.timeout",
        Some("10s"),
        SECS,
        "How long an outgoing connection may take to establish.",
    ),
    KeyInfo::new(
        "rpc.io.busyPoll",
        Some("50us"),
        MICROS,
        "flint's own: how long an event loop polls without sleeping after it worked; at most 1s.",
    ),
    KeyInfo::new(
        "rpc.io.idleTimeout",
        None,
        SECS,
        "flint's own: a peer's connection that sends nothing this long is closed; 0 keeps it; \
         twice network.timeout (or the ask timeout) when not set.",
    ),
    KeyInfo::new(
        "rpc.io.maxConnections",
        Some("10000"),
        Unit::Count,
        "flint's own: most connections from peers held open at once; at the cap, the oldest \
         connection not yet authenticated (or, without authentication, that delivered no \
         message) makes room for a new one.",
    ),
    KeyInfo::new(
        "rpc.io.maxConnectionsPerHost",
        Some("1000"),
        Unit::Count,
        "flint's own: most connections from one host (an IPv6 /64 is one) held open at once, \
         made room for as at rpc.io.maxConnections but among the host's own; at most \
         rpc.io.maxConnections.",
    ),
    KeyInfo::new(
        "rpc.io.maxReceiveBytes",
        Some("512m"),
        Unit::Bytes,
        "flint's own: most bytes frames over 256 KiB may hold while they arrive, across all \
         connections.",
    ),
    KeyInfo::new(
        "rpc.io.receiveBufferSize",
        Some("0"),
        Unit::Bytes,
        "Socket receive buffer (SO_RCVBUF); 0 leaves the OS default.",
    ),
    KeyInfo::new(
        "rpc.io.sendBufferSize",
        Some("0"),
        Unit::Bytes,
        "Socket send buffer (SO_SNDBUF); 0 leaves the OS default.",
    ),
    KeyInfo::new(
        MAX_SIZE_KEY,
        Some("128"),
        Unit::Mebibytes,
        "Largest message sent or accepted; at most 2047 MiB.",
    ),
    KeyInfo::new(
        "rpc.outbox.maxBytes",
        Some("64m"),
        Unit::Bytes,
        "flint's own: bound on the bytes queued to be written on one connection.",
    ),
    KeyInfo::new(
        "rpc.port",
        Some("0"),
        Unit::Port,
        "Port the RPC listener binds to; 0 lets the OS choose.",
    ),
    KeyInfo::new(
        "rpc.shutdown.flushTimeout",
        Some("2s"),
        SECS,
        "flint's own: how long stopping an environment waits for queued frames to be written.",
    ),
];

const fn key(name: &str) -> Key {
    Key::of(KEYS, name)
}

const fn optional(name: &str) -> OptionalKey {
    OptionalKey::of(KEYS, name)
}

/// The key of [`Conf::ask_timeout`], named in ask timeout errors.
pub const ASK_TIMEOUT_KEY: &str = optional("rpc.askTimeout").name();
/// The key of [`Conf::network_timeout`], named in ask timeout errors when
/// `rpc.askTimeout` is not set.
pub const NETWORK_TIMEOUT_KEY: &str = key("network.timeout").name();
/// The key of [`Conf::connect_timeout`], named in connect timeout errors.
pub const CONNECT_TIMEOUT_KEY: &str = key("rpc.connect.timeout").name();
/// The key of [`Conf::outbox_max_bytes`], named in full-outbox errors.
pub const OUTBOX_MAX_BYTES_KEY: &str = key("rpc.outbox.maxBytes").name();
/// The key of [`Conf::bind_address`], named when the listener cannot have its address.
pub const BIND_ADDRESS_KEY: &str = RPC_BIND_ADDRESS.name();
/// The key of [`Conf::port`], named when the listener cannot have its port.
pub const PORT_KEY: &str = RPC_PORT.name();

const AUTHENTICATE: Key = key("authenticate");
const AUTHENTICATE_SECRET: OptionalKey = optional("authenticate.secret");
const AUTHENTICATE_TIMEOUT: Key = key("authenticate.timeout");
const NETWORK_CRYPTO_ENABLED: Key = key(CRYPTO_KEY);
const NETWORK_TIMEOUT: Key = key("network.timeout");
const RPC_ASK_TIMEOUT: OptionalKey = optional("rpc.askTimeout");
const RPC_BIND_ADDRESS: Key = key("rpc.bindAddress");
const RPC_CONNECT_TIMEOUT: Key = key("rpc.connect.timeout");
const RPC_IO_BUSY_POLL: Key = key("rpc.io.busyPoll");
const RPC_IO_IDLE_TIMEOUT: OptionalKey = optional("rpc.io.idleTimeout");
const RPC_IO_MAX_CONNECTIONS: Key = key("rpc.io.maxConnections");
const RPC_IO_MAX_CONNECTIONS_PER_HOST: Key = key("rpc.io.maxConnectionsPerHost");
const RPC_IO_MAX_RECEIVE_BYTES: Key = key("rpc.io.maxReceiveBytes");
const RPC_IO_RECEIVE_BUFFER_SIZE: Key = key("rpc.io.receiveBufferSize");
const RPC_IO_SEND_BUFFER_SIZE: Key = key("rpc.io.sendBufferSize");
const RPC_MESSAGE_MAX_SIZE: Key = key(MAX_SIZE_KEY);
const RPC_OUTBOX_MAX_BYTES: Key = key("rpc.outbox.maxBytes");
const RPC_PORT: Key = key("rpc.port");
const RPC_SHUTDOWN_FLUSH_TIMEOUT: Key = key("rpc.shutdown.flushTimeout");

const EXPECT_MESSAGE_SIZE: &str =
    "a size above zero in MiB such as 128, or with a unit such as 128m or 1g";
const EXPECT_IP: &str = "an IP address such as 127.0.0.1 or 0.0.0.0";

/// The transport's keys.
impl Conf {
    /// Reads every key of the transport ([`KEYS`]), returning the first error, then checks
    /// the rules between them: an `rpc.io.idleTimeout` that is set must be above the ask
    /// timeout (a peer waiting for a reply is not idle), `authenticate` needs a
    /// non-empty `authenticate.secret`, and `network.crypto.enabled` needs `authenticate`. Other crates' keys are not read here: the `flint`
    /// facade checks the whole catalogue.
    pub fn validate(&self) -> Result<(), ConfError> {
        self.authenticate()?;
        self.crypto_enabled()?;
        self.authenticate_timeout()?;
        self.network_timeout()?;
        self.ask_timeout()?;
        self.bind_address()?;
        self.connect_timeout()?;
        self.max_connections()?;
        self.max_connections_per_host()?;
        self.max_receive_bytes()?;
        self.idle_timeout()?;
        self.receive_buffer_size()?;
        self.send_buffer_size()?;
        self.message_max_size()?;
        self.outbox_max_bytes()?;
        self.port()?;
        self.shutdown_flush_timeout()?;
        self.rpc_busy_poll()?;

        if let Some(idle_timeout) = self.idle_timeout()? {
            let ask_timeout = self.ask_timeout()?;
            if idle_timeout <= ask_timeout {
                return Err(ConfError::MustBeGreater {
                    key: RPC_IO_IDLE_TIMEOUT.name(),
                    value: idle_timeout,
                    than_key: self.ask_timeout_key(),
                    than: ask_timeout,
                });
            }
        }
        if self.authenticate()? && self.authenticate_secret().is_none_or(str::is_empty) {
            return Err(ConfError::MissingSecret);
        }
        if self.crypto_enabled()? && !self.authenticate()? {
            return Err(ConfError::CryptoWithoutAuthentication);
        }
        Ok(())
    }

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
        let bytes = match parse_size(value, key.info().unit.bare_bytes()) {
            Ok(bytes) => bytes,
            Err(SizeError::Overflow) => return Err(too_large()),
            Err(SizeError::Malformed) => {
                return Err(ConfError::invalid(key.name(), value, EXPECT_MESSAGE_SIZE))
            }
        };
        if bytes == 0 {
            return Err(ConfError::invalid(key.name(), value, EXPECT_MESSAGE_SIZE));
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
        match self.optional_positive_duration(RPC_ASK_TIMEOUT)? {
            Some(timeout) => Ok(timeout),
            None => self.network_timeout(),
        }
    }

    /// The key whose value [`Conf::ask_timeout`] returns: `rpc.askTimeout` when it is set,
    /// else `network.timeout`.
    pub fn ask_timeout_key(&self) -> &'static str {
        if self.text(RPC_ASK_TIMEOUT).is_some() {
            RPC_ASK_TIMEOUT.name()
        } else {
            NETWORK_TIMEOUT.name()
        }
    }

    /// `network.timeout`: the default network timeout; the driver expires an executor that
    /// sent no heartbeat for this long, and an environment closes a connection that sent
    /// nothing for this long in the middle of a frame, or whose frame, from this long after
    /// its first bytes, comes slower than 1 MiB/s on average (and, unless
    /// `rpc.io.idleTimeout` is set, one from a peer that sent nothing at all for twice as
    /// long). Default 120s; a bare number is seconds; zero is an error.
    pub fn network_timeout(&self) -> Result<Duration, ConfError> {
        self.positive_duration(NETWORK_TIMEOUT)
    }

    /// `rpc.connect.timeout` (flint's own): how long an outgoing connection may take to
    /// establish. Default 10s; a bare number is seconds; zero is an error.
    pub fn connect_timeout(&self) -> Result<Duration, ConfError> {
        self.positive_duration(RPC_CONNECT_TIMEOUT)
    }

    /// `rpc.bindAddress` (flint's own): the IP address the RPC listener binds to. Default
    /// 127.0.0.1; host names are not resolved here, so the value must be an IPv4 or IPv6
    /// address. An environment that does not listen ([`crate::RpcEnv::client`]) checks
    /// it but does not use it.
    pub fn bind_address(&self) -> Result<IpAddr, ConfError> {
        let value = self.value(RPC_BIND_ADDRESS);
        value
            .trim()
            .parse()
            .map_err(|_| ConfError::invalid(RPC_BIND_ADDRESS.name(), value, EXPECT_IP))
    }

    /// `rpc.port` (flint's own): the port the RPC listener binds to. Default 0, which lets
    /// the OS choose a free port.
    pub fn port(&self) -> Result<u16, ConfError> {
        self.port_number(RPC_PORT)
    }

    /// `rpc.shutdown.flushTimeout` (flint's own): how long stopping an RPC environment
    /// waits for queued frames (sent before the stop and from `on_stop`) to be written
    /// before it closes the sockets. Default 2s; a bare number is seconds; zero writes
    /// what the sockets take at once and waits for nothing.
    pub fn shutdown_flush_timeout(&self) -> Result<Duration, ConfError> {
        self.duration(RPC_SHUTDOWN_FLUSH_TIMEOUT)
    }

    /// `rpc.io.sendBufferSize` (flint's own): the socket send buffer (SO_SNDBUF) in bytes,
    /// or `None`, the default (value 0), to leave the OS's. A bare number is bytes.
    pub fn send_buffer_size(&self) -> Result<Option<usize>, ConfError> {
        self.size_usize(RPC_IO_SEND_BUFFER_SIZE)
            .map(|n| Some(n).filter(|&n| n > 0))
    }

    /// `rpc.io.receiveBufferSize` (flint's own): the socket receive buffer (SO_RCVBUF) in
    /// bytes, or `None`, the default (value 0), to leave the OS's. A bare number is bytes.
    pub fn receive_buffer_size(&self) -> Result<Option<usize>, ConfError> {
        self.size_usize(RPC_IO_RECEIVE_BUFFER_SIZE)
            .map(|n| Some(n).filter(|&n| n > 0))
    }

    /// `rpc.outbox.maxBytes` (flint's own): the bound, in bytes, on the outgoing bytes
    /// queued on one connection: a send whose frame does not fit is refused, except that a
    /// reply (which an asker waits for), or a frame larger than the whole bound (which
    /// would never fit), is accepted while less than the bound is queued. Default 64 MiB;
    /// a bare number is bytes; zero is an error.
    pub fn outbox_max_bytes(&self) -> Result<usize, ConfError> {
        self.positive_size_usize(RPC_OUTBOX_MAX_BYTES)
    }

    /// `authenticate`: whether peers must authenticate with [`Conf::authenticate_secret`].
    /// Default false.
    pub fn authenticate(&self) -> Result<bool, ConfError> {
        self.boolean(AUTHENTICATE)
    }

    /// `network.crypto.enabled`: whether every frame after the authentication handshake
    /// is sealed (AES-256-GCM, with keys derived from the secret and the handshake's
    /// nonces; see [`crate::crypto`]), so that a frame altered, replayed or reordered on
    /// the path closes the connection and none can be read there. It needs
    /// [`Conf::authenticate`] ([`Conf::validate`] checks it), and both sides must agree:
    /// the handshake refuses a peer that does not. Default false.
    pub fn crypto_enabled(&self) -> Result<bool, ConfError> {
        self.boolean(NETWORK_CRYPTO_ENABLED)
    }

    /// `authenticate.secret`: the shared secret, as set; `None` when not set (the default).
    pub fn authenticate_secret(&self) -> Option<&str> {
        self.text(AUTHENTICATE_SECRET)
    }

    /// `authenticate.timeout` (flint's own): how long a connection may take to complete
    /// the authentication handshake (with `authenticate=true`); a peer that has not proved
    /// it knows the secret by then is disconnected, so that unauthenticated connections
    /// are not held forever. Default 10s; a bare number is seconds; zero is an error.
    pub fn authenticate_timeout(&self) -> Result<Duration, ConfError> {
        self.positive_duration(AUTHENTICATE_TIMEOUT)
    }

    /// `rpc.io.maxConnections` (flint's own): the most connections from peers an
    /// environment holds open at once. One accepted beyond them takes the place of the
    /// oldest connection that has not established itself (authenticated, with
    /// `authenticate=true`; else delivered a message to an endpoint), which is closed; if
    /// every one has, the new one is closed at once. Default 10000; at least 1. With
    /// every connection's receive buffer bounded by `rpc.message.maxSize`, this bounds
    /// what peers can make the environment hold in all.
    pub fn max_connections(&self) -> Result<usize, ConfError> {
        self.count(RPC_IO_MAX_CONNECTIONS, 1)
    }

    /// `rpc.io.maxConnectionsPerHost` (flint's own): the most connections from one host
    /// (an IPv4 address, an IPv4-mapped IPv6 address's IPv4 address, or an IPv6 /64) an
    /// environment holds open at once, so that one host cannot take every place of
    /// `rpc.io.maxConnections`. One accepted beyond them takes the place of the host's
    /// oldest connection that has not established itself, or, if every one has, is
    /// closed at once. Default 1000; at least 1; an environment holds at most
    /// `rpc.io.maxConnections` whatever it is. Every executor of a local cluster connects
    /// from 127.0.0.1: one host.
    pub fn max_connections_per_host(&self) -> Result<usize, ConfError> {
        self.count(RPC_IO_MAX_CONNECTIONS_PER_HOST, 1)
    }

    /// `rpc.io.maxReceiveBytes` (flint's own): the most bytes that frames larger than 256
    /// KiB may hold, partly received, across all of an environment's connections; a
    /// connection whose next frame does not fit waits, unread (TCP holds its peer back),
    /// until others' frames are in. Without it, peers that each send most of a frame of
    /// `rpc.message.maxSize` could make a process hold `rpc.io.maxConnections` such frames
    /// at once. Default 512 MiB; a bare number is bytes; zero is an error. The environment
    /// raises it to one frame of [`Conf::message_max_size`] and one read when it is below
    /// that.
    pub fn max_receive_bytes(&self) -> Result<usize, ConfError> {
        self.positive_size_usize(RPC_IO_MAX_RECEIVE_BYTES)
    }

    /// `rpc.io.idleTimeout` (flint's own): how long a connection from a peer may send
    /// nothing before the environment closes it; `None` keeps silent connections open
    /// (one that takes what it is sent, however slowly, is not silent). When not set,
    /// twice [`Conf::network_timeout`] (or the ask timeout, if longer): the driver expires
    /// an executor that stopped sending heartbeats at the network timeout, with the seeds'
    /// reason, before its connection is closed, and a peer waiting for a reply is not
    /// taken for idle. A bare number is seconds; `0` is `None`. Without it, peers that
    /// connect and say nothing could hold all of `rpc.io.maxConnections` and lock everyone
    /// else out. It must be above the ask timeout ([`Conf::validate`]) and executors'
    /// heartbeat interval (checked by the `flint` facade, which knows both).
    pub fn idle_timeout(&self) -> Result<Option<Duration>, ConfError> {
        match self.optional_duration(RPC_IO_IDLE_TIMEOUT)? {
            Some(timeout) => Ok((!timeout.is_zero()).then_some(timeout)),
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
    /// lent to the loop poll the sockets, before it parks. Waking a sleeping thread costs
    /// tens of microseconds on a virtual machine; 0 sleeps at once, where idle CPU matters
    /// more than latency. Default 50us; a bare number is microseconds; at most 1s.
    pub fn rpc_busy_poll(&self) -> Result<Duration, ConfError> {
        self.busy_poll(RPC_IO_BUSY_POLL)
    }
}
