//! What arrives on a connection: handshake steps, the peer's refusal, frames to
//! dispatch, and the frame under way, whose bytes the receive budget must hold before
//! they are read.

use std::sync::atomic::Ordering;
use std::time::Instant;

use flint_wire::{ArchivedMessage, ArchivedRoute, MessageKind, FLAG_WILL_SEAL};
use tracing::debug;

use super::close::{printable, CloseReason};
use super::read_write::send_control;
use super::{lower_floor, EventLoop};
use crate::auth::{is_handshake, AuthError, Step};
use crate::outbox::ConnKey;
use crate::receive_budget::UNBUDGETED_FRAME;

impl EventLoop {
    pub(super) fn handle_frames(&mut self, key: ConnKey) -> Result<(), CloseReason> {
        loop {
            let Some(conn) = self.connections.get_mut(&key) else {
                return Ok(());
            };
            let frame = match conn.decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    let frame_deadline = conn.state.partial_frame(
                        self.now,
                        conn.decoder.buffered(),
                        &self.shared.settings,
                    );
                    lower_floor(&mut self.conn_deadline_floor, frame_deadline);
                    if conn.state.reserved() == 0
                        && conn
                            .decoder
                            .pending_frame_len()
                            .is_some_and(|len| len > UNBUDGETED_FRAME)
                    {
                        self.reserve_for_pending_frame(key);
                    }
                    return Ok(());
                }
                Err(e) => return Err(CloseReason::Wire(e)),
            };
            // The frame is in: what it holds is its reader's from here on.
            self.shared.frames_received.fetch_add(1, Ordering::Relaxed);
            let reserved = conn.state.frame_arrived();
            let conn = if reserved > 0 {
                self.release_budget(key, self.now);
                match self.connections.get_mut(&key) {
                    Some(conn) => conn,
                    None => return Ok(()),
                }
            } else {
                conn
            };
            let envelope = frame.envelope().map_err(CloseReason::Wire)?;
            // Only on the route of control frames (no ask has request id 0): an endpoint
            // that sends a Refused of its own closes nothing.
            if frame.kind() == MessageKind::Refused {
                if let (ArchivedMessage::Refused { reason }, ArchivedRoute::Reply { request_id }) =
                    (&envelope.message, &envelope.route)
                {
                    if *request_id == 0 {
                        return Err(CloseReason::Refused(printable(reason.as_str())));
                    }
                }
            }
            if let Some(handshake) = conn.state.handshake_mut() {
                let peer_seals = frame.header().flags & FLAG_WILL_SEAL != 0;
                let step = handshake
                    .on_message(&envelope.message, peer_seals)
                    .map_err(CloseReason::Auth)?;
                let reply = match step {
                    Step::Send(message) | Step::SendAndDone(message) => Some(message),
                    Step::Done => None,
                };
                let done = handshake.is_done();
                let seals = handshake.seals();
                let session = handshake.session();
                if let Some(reply) = reply {
                    send_control(&mut self.control, conn, &reply, seals)
                        .map_err(CloseReason::Wire)?;
                }
                if done {
                    // Before the next frame is looked at: the peer's frames after its
                    // last handshake step are sealed, and ours after this one.
                    conn.end_handshake(self.shared.settings.max_payload, session);
                    debug!(peer = %conn.peer, sealed = seals, "authenticated");
                    self.establish(key);
                    self.announce(key);
                } else {
                    self.flush(key);
                }
                continue;
            }
            if is_handshake(frame.kind()) {
                let kind = frame.kind().name();
                return Err(CloseReason::Auth(
                    if self.shared.settings.secret.is_some() {
                        AuthError::AfterHandshake(kind)
                    } else {
                        AuthError::NotEnabled(kind)
                    },
                ));
            }
            let sender = Some(conn.peer);
            let outbox = conn.outbox.clone();
            let established = conn.established;
            if self.route(&frame, envelope, sender, &outbox, key) && !established {
                self.establish(key);
            }
        }
    }

    /// Connection `key` showed it is one this environment serves (its peer authenticated,
    /// or delivered a message): it keeps its place when `rpc.io.maxConnections` run out.
    #[cold]
    fn establish(&mut self, key: ConnKey) {
        let Some(conn) = self.connections.get_mut(&key) else {
            return;
        };
        if !conn.established {
            conn.established = true;
            self.admission.established(key);
        }
    }

    /// A large frame's bytes are read only with its whole length reserved: reserves it
    /// as soon as its header is in, or leaves the connection unread until the budget
    /// admits it.
    #[cold]
    fn reserve_for_pending_frame(&mut self, key: ConnKey) {
        let Some(conn) = self.connections.get_mut(&key) else {
            return;
        };
        if conn.state.reserved() > 0 || conn.state.awaiting_budget() {
            return;
        }
        let Some(frame_len) = conn
            .decoder
            .pending_frame_len()
            .filter(|&len| len > UNBUDGETED_FRAME)
        else {
            return;
        };
        // The frame and one read beyond it: what its buffer is made to hold.
        let bytes = frame_len.saturating_add(UNBUDGETED_FRAME);
        let reserved =
            self.receive_budget
                .reserve(key, conn.peer.ip(), bytes, self.now, &mut self.admitted);
        if !reserved {
            conn.state.wait_for_budget();
            self.shared.budget_waits.fetch_add(1, Ordering::Relaxed);
            debug!(
                peer = %conn.peer,
                "a frame of {frame_len} bytes waits for room in the receive budget ({} of {} \
                 bytes held; rpc.io.maxReceiveBytes)",
                self.receive_budget.in_use(),
                self.receive_budget.limit()
            );
        } else {
            conn.state.reserve(bytes);
            conn.decoder.preallocate_pending_frame();
            self.shared
                .most_reserved
                .fetch_max(self.receive_budget.in_use() as u64, Ordering::Relaxed);
        }
        // Asking can admit others (a host's probation ended meanwhile).
        if !self.admitted.is_empty() {
            self.admit_waiting();
        }
    }

    /// Whether connection `key` waits for the receive budget with bytes from its peer
    /// unread in the kernel, so that its frame's deadline moves on (see
    /// [`ConnState::waiting_peer_sent_more`](super::deadlines::ConnState::waiting_peer_sent_more)).
    pub(super) fn waiting_peer_sent_more(&mut self, key: ConnKey, now: Instant) -> bool {
        let Some(conn) = self.connections.get_mut(&key) else {
            return false;
        };
        // The kernel is asked only for a connection that waits.
        if !conn.state.awaiting_budget() {
            return false;
        }
        let unread = conn.unread();
        conn.state
            .waiting_peer_sent_more(now, unread, &self.shared.settings)
    }

    /// Gives back at `now` what connection `key` holds in the receive budget (or its
    /// place in the queue), and lets in the connections waiting for it.
    pub(super) fn release_budget(&mut self, key: ConnKey, now: Instant) {
        self.receive_budget.release(key, now, &mut self.admitted);
        self.admit_waiting();
    }

    /// Connections the receive budget just admitted, their frames' bytes reserved: read
    /// at the next wake-up, which comes at once, and held to the reading deadlines from
    /// now, as if they had just read.
    pub(super) fn admit_waiting(&mut self) {
        let mut admitted = std::mem::take(&mut self.admitted);
        let settings = &self.shared.settings;
        // Not `self.now`: a close outside a turn (a failed write in `flush_queued`) gets
        // here with the time of the last turn that worked, which may be long past.
        let now = Instant::now();
        let mut orphaned = Vec::new();
        for (key, bytes) in admitted.drain(..) {
            let Some(conn) = self.connections.get_mut(&key) else {
                debug_assert!(false, "a closed connection was admitted");
                // Its bytes go back below, or the queue behind it would jam for good.
                orphaned.push(key);
                continue;
            };
            conn.state.admitted(bytes);
            if self.stopping {
                // Every connection is about to close (and give its bytes back): none is
                // to be read.
                continue;
            }
            conn.decoder.preallocate_pending_frame();
            // Its time starts now: the wait was not its peer's doing.
            let deadline = conn
                .state
                .read_on_after_wait(now, conn.decoder.buffered(), settings);
            lower_floor(&mut self.conn_deadline_floor, deadline);
            if !self.unfinished_reads.contains(&key) {
                self.unfinished_reads.push(key);
            }
        }
        self.shared
            .most_reserved
            .fetch_max(self.receive_budget.in_use() as u64, Ordering::Relaxed);
        self.admitted = admitted;
        for key in orphaned {
            self.release_budget(key, now);
        }
    }
}
