//! Connections this environment opens, and the moment a connection may carry the
//! endpoints' messages: connected and, with `authenticate=true`, authenticated.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use mio::{Interest, Token};
use tracing::{debug, warn};

use super::close::CloseReason;
use super::connection::Connection;
use super::deadlines::ConnState;
use super::read_write::send_control;
use super::{lower_floor, EventLoop};
use crate::auth::{random_nonce, Handshake};
#[cfg(not(loom))]
use crate::outbox::OutboxKind;
use crate::outbox::{ConnKey, Outbox};

impl EventLoop {
    pub(super) fn connect(&mut self, address: SocketAddr, outbox: Arc<Outbox>, now: Instant) {
        let key = outbox.key();
        let stream =
            crate::socket::connect(address, &self.shared.settings.socket).and_then(|mut stream| {
                self.poll.registry().register(
                    &mut stream,
                    Token(key as usize),
                    Interest::READABLE | Interest::WRITABLE,
                )?;
                Ok(stream)
            });
        match stream {
            Ok(stream) => {
                debug!(peer = %address, "connecting");
                let state = ConnState::connecting(now, &self.shared.settings);
                let max_payload = self.shared.settings.max_payload;
                let conn = Connection::new(stream, outbox, address, state, max_payload);
                lower_floor(&mut self.conn_deadline_floor, conn.deadline());
                self.connections.insert(key, conn);
            }
            Err(e) => {
                warn!(peer = %address, "cannot connect: {e}");
                self.fail_outbox(&outbox, &CloseReason::ConnectFailed(e));
            }
        }
    }

    /// Completes a pending connect when the socket says so. Returns whether the
    /// connection is open and may be read.
    pub(super) fn connection_ready(&mut self, key: ConnKey, writable: bool) -> bool {
        let Some(conn) = self.connections.get_mut(&key) else {
            return false;
        };
        if conn.state.is_open() {
            return true;
        }
        if !writable {
            return false;
        }
        match conn.stream.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => {
                self.close(key, CloseReason::ConnectFailed(e));
                return false;
            }
        }
        match conn.stream.peer_addr() {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotConnected => return false,
            Err(e) => {
                self.close(key, CloseReason::ConnectFailed(e));
                return false;
            }
        }
        conn.state.connected();
        debug!(peer = %conn.peer, "connected");
        self.shared.connected.fetch_add(1, Ordering::Relaxed);
        match &self.shared.settings.secret {
            Some(secret) => match random_nonce() {
                Ok(nonce) => {
                    let seals = self.shared.settings.crypto;
                    let (handshake, challenge) =
                        Handshake::connecting(secret.clone(), nonce, seals);
                    let deadline =
                        conn.start_handshake(handshake, Instant::now(), &self.shared.settings);
                    lower_floor(&mut self.conn_deadline_floor, Some(deadline));
                    if let Err(e) = send_control(&mut self.control, conn, &challenge, seals) {
                        self.close(key, CloseReason::Wire(e));
                        return false;
                    }
                }
                Err(e) => {
                    self.close(key, CloseReason::Auth(e));
                    return false;
                }
            },
            None => self.announce(key),
        }
        true
    }

    pub(super) fn announce(&mut self, key: ConnKey) {
        let Some(conn) = self.connections.get_mut(&key) else {
            return;
        };
        conn.announced = true;
        // Senders on other threads may write to the socket themselves from now on, on a
        // duplicate descriptor. Only on connections this environment opened: a server
        // accepting thousands of peers would otherwise need twice the descriptors, and
        // its own sends come from its loop. Without one (out of descriptors) the loop
        // writes everything.
        #[cfg(not(loom))]
        if matches!(conn.outbox.kind(), OutboxKind::Outgoing(_)) {
            match socket2::SockRef::from(&conn.stream).try_clone() {
                Ok(socket) => conn.outbox.attach_socket(socket.into()),
                Err(e) => debug!(peer = %conn.peer, "no write-through for this connection: {e}"),
            }
        }
        let peer = conn.peer;
        self.endpoints.each(Instant::now(), |endpoint, ctx| {
            endpoint.on_connected(ctx, peer)
        });
        self.flush(key);
    }
}
