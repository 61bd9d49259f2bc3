//! Connections from peers: accepting them, and doing what [`Admission`] decides for
//! each: holding it, holding it in the place of the oldest connection not established
//! yet (which is closed, told why), or refusing it (`rpc.io.maxConnections`,
//! `rpc.io.maxConnectionsPerHost`) before it costs more than its accept.
//!
//! [`Admission`]: crate::admission::Admission

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Token};
use tracing::{debug, error, warn};

use super::close::{tell_refused, CloseReason};
use super::connection::Connection;
use super::deadlines::ConnState;
use super::{lower_floor, EventLoop};
use crate::admission::{Cap, Decision};
use crate::auth::{random_nonce, Handshake};
use crate::log_budget::Spend;
use crate::outbox::{Outbox, OutboxKind};

/// The most often a refused connection (`rpc.io.maxConnections`,
/// `rpc.io.maxConnectionsPerHost`), or a failed accept, is a warning.
pub(super) const WARNING_EVERY: Duration = Duration::from_secs(60);

/// How long after a failed `accept` (out of descriptors, say) the loop tries again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Whether `accept` failed for the pending connection's own sake (the errors accept(2)
/// says to treat like EAGAIN and retry at once), not for want of descriptors or memory,
/// or because the listener itself is broken, which retrying at once would not cure.
fn failed_for_the_connection(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(
            libc::ECONNABORTED
                | libc::EPROTO
                | libc::EPERM
                | libc::ENETDOWN
                | libc::ENOPROTOOPT
                | libc::EHOSTDOWN
                | libc::ENONET
                | libc::EHOSTUNREACH
                | libc::EOPNOTSUPP
                | libc::ENETUNREACH
        )
    )
}

impl EventLoop {
    pub(super) fn accept(&mut self) {
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            match listener.accept() {
                Ok((mut stream, peer)) => {
                    let decision = self.admission.decide(peer.ip());
                    if let Decision::Refuse(cap) = decision {
                        self.refuse(stream, peer, cap);
                        continue;
                    }
                    if let Err(e) = self
                        .shared
                        .settings
                        .socket
                        .apply(socket2::SockRef::from(&stream))
                    {
                        warn!(%peer, "cannot set up an accepted socket: {e}");
                        continue;
                    }
                    let key = self.shared.new_key();
                    if let Err(e) = self.poll.registry().register(
                        &mut stream,
                        Token(key as usize),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        warn!(%peer, "cannot register an accepted socket: {e}");
                        continue;
                    }
                    let handshake = match &self.shared.settings.secret {
                        Some(secret) => match random_nonce() {
                            Ok(nonce) => Some(Handshake::accepting(
                                secret.clone(),
                                nonce,
                                self.shared.settings.crypto,
                            )),
                            Err(e) => {
                                error!(%peer, "{e}");
                                continue;
                            }
                        },
                        None => None,
                    };
                    let outbox = Arc::new(Outbox::new(
                        key,
                        OutboxKind::Incoming,
                        peer,
                        self.shared.settings.max_payload,
                        self.shared.settings.outbox_limit,
                    ));
                    debug!(%peer, "accepted a connection");
                    self.shared.accepted.fetch_add(1, Ordering::Relaxed);
                    let authenticated = handshake.is_none();
                    let max_payload = self.shared.settings.max_payload;
                    let mut conn =
                        Connection::new(stream, outbox, peer, ConnState::open(), max_payload);
                    let now = Instant::now();
                    if let Some(handshake) = handshake {
                        // An unauthenticated connection is not held past authenticate.timeout.
                        conn.start_handshake(handshake, now, &self.shared.settings);
                    }
                    conn.state.watch_idleness(now, &self.shared.settings);
                    lower_floor(&mut self.conn_deadline_floor, conn.deadline());
                    if let Decision::HoldInPlaceOf { oldest, cap } = decision {
                        // Only now that the new one is set up: a place is not given up
                        // for a connection that failed to be.
                        self.shared.evicted.fetch_add(1, Ordering::Relaxed);
                        let held = held_text(cap, peer);
                        self.close(oldest, CloseReason::Evicted { held });
                    }
                    self.connections.insert(key, conn);
                    self.admission.held(key, peer.ip());
                    if authenticated {
                        self.announce(key);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The connection's own failure (reset before it was taken, and the like):
                // the next one may be fine, as accept(2) advises.
                Err(e) if failed_for_the_connection(&e) => {
                    debug!("accept failed for one connection: {e}");
                    continue;
                }
                Err(e) => {
                    // Out of descriptors, memory, or a broken listener: try again a
                    // little later (not at once: it would spin), and say
                    // so at most once a minute (a peer could otherwise fill the log).
                    let now = Instant::now();
                    self.accept_retry_at = Some(now + ACCEPT_RETRY);
                    if let Spend::Log { held_back } = self.accept_failure_warnings.spend(now) {
                        warn!(
                            "accept failed ({} time(s) since the last such warning): {e}; \
                             trying again every {} ms",
                            held_back + 1,
                            ACCEPT_RETRY.as_millis()
                        );
                    }
                    return;
                }
            }
        }
    }

    /// Closes a connection accepted beyond `rpc.io.maxConnections` or
    /// `rpc.io.maxConnectionsPerHost` (every connection they count established) before it
    /// costs anything more than its accept.
    fn refuse(&mut self, stream: TcpStream, peer: SocketAddr, cap: Cap) {
        // Counted before the peer can see the close.
        self.shared.refused.fetch_add(1, Ordering::Relaxed);
        let why = format!(
            "{}, and every one has authenticated or delivered a message",
            held_text(cap, peer)
        );
        tell_refused(
            &mut self.control,
            &stream,
            &format!("{why}: try again later"),
            None,
        );
        drop(stream);
        match self.refusal_warnings.spend(Instant::now()) {
            Spend::Log { held_back } => warn!(
                %peer,
                "refused {} connection(s) since the last such warning: {why}",
                held_back + 1
            ),
            Spend::HoldBack => debug!(%peer, "refused a connection: {why}"),
        }
    }
}

/// What `cap` holds, in words, for a connection from `peer`: "50 connections from peers
/// are open, as many as rpc.io.maxConnections allows".
fn held_text(cap: Cap, peer: SocketAddr) -> String {
    match cap {
        Cap::All { open } => format!(
            "{open} connections from peers are open, as many as rpc.io.maxConnections allows"
        ),
        Cap::Host { open } => {
            let host = match crate::host::host_of(peer.ip()) {
                std::net::IpAddr::V4(v4) => format!("host {v4}"),
                std::net::IpAddr::V6(v6) => format!("network {v6}/64"),
            };
            format!(
                "{open} connections from {host} are open, as many as \
                 rpc.io.maxConnectionsPerHost allows"
            )
        }
    }
}
