//! A connection: its socket, decoder and outbox, and where its deadlines are decided.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use flint_wire::{FrameDecoder, MAX_SIZE_KEY};
use mio::net::TcpStream;

use super::close::CloseReason;
use crate::auth::{Handshake, HANDSHAKE_LIMIT_NAME, HANDSHAKE_MAX_PAYLOAD};
use crate::outbox::Outbox;
use crate::settings::Settings;
use crate::timer::deadline_after;

/// The slowest a frame may arrive, on average, once `network.timeout` has passed since
/// its first bytes: by any moment, each second past `network.timeout` must have brought
/// a MiB of it. Without it, a peer that sends a byte now and then, never stalling for
/// `network.timeout`, would hold its connection (one of `rpc.io.maxConnections`) for
/// good, and a large frame's reservation in the receive budget with it; with it, holding
/// a frame open longer than `network.timeout` costs a peer the bandwidth of sending it.
/// 1 MiB/s is 8 Mbit/s, slower than any link a cluster's control plane runs on. The loop
/// reads a connection [`READ_BUDGET`](super::read_write::READ_BUDGET) at a time, and
/// turns again at once while one has more, so only a loop that managed fewer than four
/// turns a second would fall below it itself, and a peer whose bytes wait unread is read before it is held to it. A loop
/// that stalls for longer than `network.timeout` (an endpoint that blocks it) can still
/// cut off peers with frames under way, as their asks and heartbeats would time out.
pub(super) const MIN_FRAME_RATE: u64 = 1 << 20;

/// The time a byte of a frame buys at [`MIN_FRAME_RATE`], in nanoseconds (10^9 / 2^20,
/// rounded up).
const NANOS_PER_BYTE: u64 = 1_000_000_000_u64.div_ceil(MIN_FRAME_RATE);

/// When the frame under way on a connection started to arrive, and when it is too slow
/// unless more of it has come by then.
#[derive(Debug, Clone, Copy)]
pub(super) struct FrameClock {
    pub(super) started: Instant,
    pub(super) due: Instant,
}

impl FrameClock {
    /// The clock of a frame whose first bytes came at `started` and of which `received`
    /// bytes are in: `network.timeout` after its start, plus the time those bytes buy.
    pub(super) fn new(started: Instant, settings: &Settings, received: usize) -> Self {
        let earned = Duration::from_nanos((received as u64).saturating_mul(NANOS_PER_BYTE));
        FrameClock {
            started,
            due: deadline_after(
                started,
                settings.stalled_frame_timeout.saturating_add(earned),
            ),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ConnState {
    Connecting { deadline: Instant },
    Open,
}

pub(super) struct Connection {
    pub(super) stream: TcpStream,
    pub(super) outbox: Arc<Outbox>,
    pub(super) decoder: FrameDecoder,
    /// Bytes taken from the outbox (or handshake frames), in order, the first one
    /// possibly part-written.
    pub(super) writing: VecDeque<BytesMut>,
    pub(super) peer: SocketAddr,
    pub(super) state: ConnState,
    /// Present while the peer has not yet proved it knows the secret.
    pub(super) handshake: Option<Handshake>,
    /// When the handshake must be done by (authenticate.timeout), while it is under way.
    pub(super) handshake_deadline: Option<Instant>,
    /// When the peer must have sent more by (network.timeout), while part of a frame is
    /// buffered: a peer that stops in the middle of a frame would otherwise hold what it
    /// sent, up to `rpc.message.maxSize`, for as long as it keeps the connection open.
    pub(super) frame_deadline: Option<Instant>,
    /// When a connection from a peer must have sent something, or taken something it was
    /// sent, by (rpc.io.idleTimeout), moved on by every read and every write that made
    /// progress; `None` for connections this environment opened, and when silent peers
    /// are kept. Without it, peers that connect and say nothing would hold
    /// all of `rpc.io.maxConnections`.
    pub(super) idle_deadline: Option<Instant>,
    /// Bytes of the receive budget held for the large frame under way (0: none).
    pub(super) reserved: usize,
    /// When the frame under way must be in by, however steadily it comes (see
    /// [`MIN_FRAME_RATE`]); `None` between frames.
    pub(super) frame_clock: Option<FrameClock>,
    /// The next frame is large and the receive budget has no room for it: the
    /// connection is not read until the budget admits it. Its peer is held only to the
    /// stalled-frame deadline meanwhile, and only if it has sent nothing more (see
    /// `EventLoop::waiting_peer_sent_more`): the wait is not its doing.
    pub(super) awaiting_budget: bool,
    /// Whether endpoints were told of this connection (and so must hear of its end).
    pub(super) announced: bool,
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
            handshake: None,
            handshake_deadline: None,
            frame_deadline: None,
            idle_deadline: None,
            reserved: 0,
            frame_clock: None,
            awaiting_budget: false,
            announced: false,
            read_round: 0,
            read_in_round: 0,
            peer_closed: false,
        }
    }

    /// Starts authenticating the peer, to be done by `deadline`: until then only frames of
    /// handshake size are taken from it.
    pub(super) fn start_handshake(&mut self, handshake: Handshake, deadline: Instant) {
        self.decoder
            .set_max_payload(HANDSHAKE_MAX_PAYLOAD, HANDSHAKE_LIMIT_NAME);
        self.handshake = Some(handshake);
        self.handshake_deadline = Some(deadline);
    }

    /// The peer proved it knows the secret: frames of up to `max_payload` bytes
    /// (`rpc.message.maxSize`) from now on.
    pub(super) fn end_handshake(&mut self, max_payload: usize) {
        self.handshake = None;
        self.handshake_deadline = None;
        self.decoder.set_max_payload(max_payload, MAX_SIZE_KEY);
    }

    /// Bytes came from the peer, or it took some it was sent, at `now`: a connection from
    /// a peer is not idle before `now` + `idle_timeout` (rpc.io.idleTimeout).
    pub(super) fn moved_at(&mut self, now: Instant, idle_timeout: Option<Duration>) {
        if let (Some(deadline), Some(timeout)) = (self.idle_deadline.as_mut(), idle_timeout) {
            *deadline = deadline_after(now, timeout);
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

    /// When the connection must have got further by: connected, authenticated, sent more
    /// of the frame under way (fast enough, see [`MIN_FRAME_RATE`]), or sent anything at
    /// all. A connection waiting for the receive budget is not read: its only reading
    /// deadline is the frame's, at which the loop looks whether its peer sent more
    /// meanwhile.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self.state {
            ConnState::Connecting { deadline } => Some(deadline),
            ConnState::Open if self.awaiting_budget => {
                [self.handshake_deadline, self.frame_deadline]
                    .into_iter()
                    .flatten()
                    .min()
            }
            ConnState::Open => [
                self.handshake_deadline,
                self.frame_deadline,
                self.frame_clock.map(|clock| clock.due),
                self.idle_deadline,
            ]
            .into_iter()
            .flatten()
            .min(),
        }
    }

    /// Why the connection must be closed at `now`, if one of its deadlines has passed.
    pub(super) fn overdue(&self, now: Instant, settings: &Settings) -> Option<CloseReason> {
        let passed = |deadline: Option<Instant>| deadline.is_some_and(|d| d <= now);
        match self.state {
            ConnState::Connecting { deadline } => {
                (deadline <= now).then_some(CloseReason::ConnectTimeout(settings.connect_timeout))
            }
            ConnState::Open if passed(self.handshake_deadline) => {
                Some(CloseReason::AuthTimeout(settings.auth_timeout))
            }
            ConnState::Open if self.awaiting_budget && !passed(self.frame_deadline) => None,
            ConnState::Open if passed(self.frame_deadline) => Some(CloseReason::StalledFrame {
                timeout: settings.stalled_frame_timeout,
                buffered: self.decoder.buffered(),
            }),
            ConnState::Open if passed(self.frame_clock.map(|clock| clock.due)) => {
                Some(CloseReason::SlowFrame {
                    frame_len: self.decoder.pending_frame_len(),
                    buffered: self.decoder.buffered(),
                })
            }
            ConnState::Open if passed(self.idle_deadline) => {
                settings.idle_timeout.map(CloseReason::Idle)
            }
            ConnState::Open => None,
        }
    }
}
