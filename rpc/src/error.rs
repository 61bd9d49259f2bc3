//! The errors of the RPC layer.

use std::net::SocketAddr;
use std::time::Duration;

use flint_wire::WireError;

use crate::auth::AuthError;

/// Where a message was going, for error texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An endpoint in this process.
    Local(String),
    /// An endpoint at a remote address.
    Remote(SocketAddr, String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Local(name) => write!(f, "local endpoint {name}"),
            Target::Remote(address, name) => write!(f, "endpoint {name} at {address}"),
        }
    }
}

/// What decided an ask's timeout, named in [`RpcError::AskTimeout`] so that the reader
/// knows what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutSource {
    /// The key `rpc.askTimeout`.
    AskTimeout,
    /// The key `network.timeout`, which an ask falls back to when `rpc.askTimeout` is not
    /// set.
    NetworkTimeout,
    /// The caller passed a timeout of its own.
    Caller,
}

impl std::fmt::Display for TimeoutSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimeoutSource::AskTimeout => {
                write!(f, "the timeout is set by {}", crate::conf::ASK_TIMEOUT_KEY)
            }
            TimeoutSource::NetworkTimeout => write!(
                f,
                "the timeout is set by {}, as {} is not set",
                crate::conf::NETWORK_TIMEOUT_KEY,
                crate::conf::ASK_TIMEOUT_KEY
            ),
            TimeoutSource::Caller => f.write_str("the timeout was given by the caller"),
        }
    }
}

/// Everything a send, an ask or the RPC environment can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// No reply came in time.
    #[error("ask to {target} timed out after {timeout:?}; {set_by}")]
    AskTimeout {
        /// Where the ask went.
        target: String,
        /// How long it waited.
        timeout: Duration,
        /// What decided the timeout: the key to change, or the caller.
        set_by: TimeoutSource,
    },
    /// The remote endpoint answered with an error.
    #[error("{target} replied with an error: {message}")]
    Remote {
        /// Who answered.
        target: String,
        /// The error's text.
        message: String,
    },
    /// The connection closed (before the reply came, for an ask).
    #[error("connection to {peer} closed: {reason}")]
    Disconnected {
        /// The peer.
        peer: SocketAddr,
        /// Why it closed, as logged: end of stream, a reset, a protocol error, a failed
        /// authentication.
        reason: String,
    },
    /// The connection closed because authentication failed on one side or the other:
    /// this side found the peer's proof wrong, or the handshake did not finish in time,
    /// or the peer turned this side away for its authentication (no secret where one is
    /// required, a secret where none is, a wrong proof). Its text is the one
    /// [`RpcError::Disconnected`] would have; the variant lets a caller tell a
    /// misconfigured secret from a lost peer.
    #[error("connection to {peer} closed: {reason}")]
    AuthenticationFailed {
        /// The peer.
        peer: SocketAddr,
        /// Why it closed, as logged.
        reason: String,
    },
    /// The connection's outbox holds as many bytes as it may.
    #[error(
        "outbox to {peer} is full: {queued} bytes queued, the limit ({key}) is {limit} bytes",
        key = crate::conf::OUTBOX_MAX_BYTES_KEY
    )]
    OutboxFull {
        /// The peer.
        peer: SocketAddr,
        /// Bytes waiting to be written.
        queued: usize,
        /// The limit.
        limit: usize,
    },
    /// Connecting failed.
    #[error("cannot connect to {peer}: {source}")]
    Connect {
        /// The peer.
        peer: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Connecting took longer than allowed.
    #[error(
        "connecting to {peer} timed out after {timeout:?}; the timeout is set by {key}",
        key = crate::conf::CONNECT_TIMEOUT_KEY
    )]
    ConnectTimeout {
        /// The peer.
        peer: SocketAddr,
        /// The timeout.
        timeout: Duration,
    },
    /// No endpoint of that name is registered.
    #[error("no endpoint named {0} is registered")]
    EndpointNotFound(String),
    /// An endpoint of that name is already registered.
    #[error("an endpoint named {0} is already registered")]
    EndpointExists(String),
    /// A message could not be encoded or decoded.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The handshake failed.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The listener could not be bound: the port is taken (or reserved), or the address
    /// is not one of this host's.
    #[error(
        "cannot listen on {address}{}: {source}",
        key.map(|key| format!(" ({key})")).unwrap_or_default()
    )]
    Listen {
        /// The address asked for (rpc.bindAddress, rpc.port).
        address: SocketAddr,
        /// The key to change, when the error says which: `rpc.bindAddress` for an
        /// address that is not this host's, `rpc.port` for a port in use or one this
        /// user may not bind.
        key: Option<&'static str>,
        /// Why.
        source: std::io::Error,
    },
    /// A socket operation failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    /// The configuration is invalid.
    #[error(transparent)]
    Conf(#[from] crate::conf::ConfError),
    /// The environment has stopped.
    #[error("the RPC environment has stopped")]
    Stopped,
    /// Two message types with the same id were registered on one service.
    #[error(
        "user message id {id} is registered twice on one service: for {first} and for {second}"
    )]
    DuplicateMessageId {
        /// The id.
        id: u32,
        /// The type registered first.
        first: &'static str,
        /// The type registered second.
        second: &'static str,
    },
    /// A user message could not be serialized (rkyv's error; a type whose serializer can
    /// fail, or one too large for 32-bit relative pointers).
    #[error("cannot serialize user message id {id} ({type_name}): {reason}")]
    Serialize {
        /// The message type's id.
        id: u32,
        /// The message type.
        type_name: &'static str,
        /// rkyv's error.
        reason: String,
    },
    /// A user message's body is not a valid archive of the type its id names.
    #[error("user message id {id} ({type_name}) failed validation: {reason}")]
    InvalidMessage {
        /// The id it came with.
        id: u32,
        /// The type the id names here.
        type_name: &'static str,
        /// The check that failed, and where ([`flint_wire::CheckError`]).
        reason: String,
    },
    /// A message is not the user message expected (a reply of another type, or a
    /// catalogue message).
    #[error("expected user message id {expected} ({type_name}), got {got}")]
    UnexpectedMessage {
        /// The id expected.
        expected: u32,
        /// The type expected.
        type_name: &'static str,
        /// What came: a user message's id or a catalogue message's kind.
        got: String,
    },
}
