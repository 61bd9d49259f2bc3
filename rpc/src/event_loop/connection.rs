//! A connection: its socket, its decoder and its outbox, around the state that decides
//! its deadlines ([`ConnState`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use flint_wire::{FrameDecoder, MAX_SIZE_KEY};
use mio::net::TcpStream;

use super::close::CloseReason;
use super::deadlines::ConnState;
use crate::auth::{Handshake, HANDSHAKE_LIMIT_NAME, HANDSHAKE_MAX_PAYLOAD};
use crate::crypto::{Opener, Sealer};
use crate::outbox::Outbox;
use crate::settings::Settings;

/// A connection: the socket and what reads and writes it, with its [`ConnState`].
pub(super) struct Connection {
    pub(super) stream: TcpStream,
    pub(super) outbox: Arc<Outbox>,
    pub(super) decoder: FrameDecoder,
    /// Bytes taken from the outbox (or handshake frames), in order, the first one
    /// possibly part-written.
    pub(super) writing: VecDeque<BytesMut>,
    pub(super) peer: SocketAddr,
    /// Its phase, handshake, frame under way and deadlines.
    pub(super) state: ConnState,
    /// Whether endpoints were told of this connection (and so must hear of its end).
    pub(super) announced: bool,
    /// Whether its peer authenticated, or delivered a message to an endpoint (or a reply
    /// to an ask): a connection from a peer that has keeps its place when
    /// `rpc.io.maxConnections` run out (see [`Admission`](crate::admission::Admission)).
    pub(super) established: bool,
    /// The loop's wake-up in which this connection was last read, and the bytes read in
    /// it: at most [`READ_BUDGET`](super::read_write::READ_BUDGET) per wake-up.
    pub(super) read_round: u64,
    pub(super) read_in_round: usize,
    /// The poller reported the peer's end of stream (or an error). No further event may
    /// come, so reads go on until the socket says so instead of stopping at a short read.
    pub(super) peer_closed: bool,
}

impl Connection {
    /// A connection that has sent and received nothing yet, and is not authenticating.
    pub(super) fn new(
        stream: TcpStream,
        outbox: Arc<Outbox>,
        peer: SocketAddr,
        state: ConnState,
        max_payload: usize,
    ) -> Self {
        Connection {
            stream,
            outbox,
            decoder: FrameDecoder::new(max_payload),
            writing: VecDeque::new(),
            peer,
            state,
            announced: false,
            established: false,
            read_round: 0,
            read_in_round: 0,
            peer_closed: false,
        }
    }

    /// Starts authenticating the peer at `now`, to be done by the deadline this returns
    /// (authenticate.timeout): until then only frames of handshake size are taken from
    /// it.
    pub(super) fn start_handshake(
        &mut self,
        handshake: Handshake,
        now: Instant,
        settings: &Settings,
    ) -> Instant {
        self.decoder
            .set_max_payload(HANDSHAKE_MAX_PAYLOAD, HANDSHAKE_LIMIT_NAME);
        self.state.start_handshake(handshake, now, settings)
    }

    /// The peer proved it knows the secret: frames of up to `max_payload` bytes
    /// (`rpc.message.maxSize`) from now on, and, with a `session`
    /// (`network.crypto.enabled`), every frame sealed both ways, beginning with those
    /// already queued.
    pub(super) fn end_handshake(&mut self, max_payload: usize, session: Option<(Sealer, Opener)>) {
        self.state.end_handshake();
        self.decoder.set_max_payload(max_payload, MAX_SIZE_KEY);
        if let Some((sealer, opener)) = session {
            self.decoder.set_opener(Box::new(opener));
            self.outbox.start_sealing(sealer);
        }
    }

    /// Whether all of the pending frame's bytes are in, buffered or unread in the kernel:
    /// a peer whose stream ended (its end comes after all it sent) may still have sent a
    /// whole frame, which must arrive.
    pub(super) fn pending_frame_is_all_here(&self) -> bool {
        let Some(frame_len) = self.decoder.pending_frame_len() else {
            return true;
        };
        // Should the kernel not say, the frame's deadline decides instead.
        let Ok(unread) = rustix::io::ioctl_fionread(&self.stream) else {
            return true;
        };
        self.decoder.buffered().saturating_add(unread as usize) >= frame_len
    }

    /// Bytes from the peer waiting in the kernel, unread (0 if the kernel does not say).
    pub(super) fn unread(&self) -> usize {
        rustix::io::ioctl_fionread(&self.stream).unwrap_or(0) as usize
    }

    /// When the connection must be looked at next (see [`ConnState::deadline`]).
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.state.deadline()
    }

    /// Why the connection must be closed at `now`, if one of its deadlines has passed
    /// (see [`ConnState::overdue`]).
    pub(super) fn overdue(&self, now: Instant, settings: &Settings) -> Option<CloseReason> {
        self.state.overdue(
            now,
            settings,
            self.decoder.buffered(),
            self.decoder.pending_frame_len(),
        )
    }
}
