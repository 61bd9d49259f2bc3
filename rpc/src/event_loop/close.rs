//! Why a connection closes, and what follows: the peer told why (when it was its
//! doing), the asks that travelled on it failed, the endpoints told of its end.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use flint_wire::{Encoder, Message, Route, FLAG_SEALED, MAX_REFUSAL_TEXT};
use mio::net::TcpStream;
use tracing::{debug, warn};

use super::EventLoop;
use crate::auth::AuthError;
use crate::crypto::Sealer;
use crate::error::RpcError;
use crate::outbox::{ConnKey, Outbox, OutboxKind};
use crate::receive_budget::Unfinished;

/// Why a connection is being closed: decides the log level and what pending asks see.
pub(super) enum CloseReason {
    EndOfStream,
    Io(io::Error),
    Wire(flint_wire::WireError),
    Auth(AuthError),
    ConnectFailed(io::Error),
    ConnectTimeout(Duration),
    AuthTimeout(Duration),
    /// Nothing arrived for the timeout while `buffered` bytes of a frame were in.
    StalledFrame {
        timeout: Duration,
        buffered: usize,
    },
    /// A frame came slower than [`MIN_FRAME_RATE`](super::deadlines::MIN_FRAME_RATE)
    /// after its first `network.timeout`;
    /// its length, if its header was in.
    SlowFrame {
        frame_len: Option<usize>,
        buffered: usize,
    },
    /// A peer's connection sent nothing at all for the timeout (rpc.io.idleTimeout).
    Idle(Duration),
    /// As many connections as `rpc.io.maxConnections` (or, from its host,
    /// `rpc.io.maxConnectionsPerHost`) allows were held, `held` says which, and this one,
    /// the oldest not established yet, made room for a new one.
    Evicted {
        held: String,
    },
    /// The peer closed the connection, saying why in a [`Message::Refused`].
    Refused(String),
    Stopping,
}

impl CloseReason {
    /// Whether the connection closes for something the peer did (or did not do), which
    /// it is told of with a [`Message::Refused`]: not when the peer itself closed or
    /// refused, nor when this environment stops.
    fn tells_peer(&self) -> bool {
        matches!(
            self,
            CloseReason::Wire(_)
                | CloseReason::Auth(_)
                | CloseReason::AuthTimeout(_)
                | CloseReason::StalledFrame { .. }
                | CloseReason::SlowFrame { .. }
                | CloseReason::Idle(_)
                | CloseReason::Evicted { .. }
        )
    }

    /// How a connection whose frame held room in the receive budget, or waited for it,
    /// ended before the frame was whole, for the budget to decide whether its host goes
    /// on probation: cut off for the frame's pace; ended by what its peer did (the frame
    /// having been under way for `under_way`); or ended by this side for reasons of its
    /// own, which a peer cannot be blamed for (an eviction can be a third party's doing).
    fn unfinished(&self, under_way: Duration) -> Unfinished {
        match self {
            CloseReason::StalledFrame { .. } | CloseReason::SlowFrame { .. } => Unfinished::CutOff,
            // A connection not yet connected holds no room; listed for completeness.
            CloseReason::Stopping
            | CloseReason::Evicted { .. }
            | CloseReason::ConnectFailed(_)
            | CloseReason::ConnectTimeout(_) => Unfinished::NotThePeers,
            CloseReason::EndOfStream
            | CloseReason::Io(_)
            | CloseReason::Wire(_)
            | CloseReason::Auth(_)
            | CloseReason::AuthTimeout(_)
            | CloseReason::Idle(_)
            | CloseReason::Refused(_) => Unfinished::PeerEnded { under_way },
        }
    }

    fn ask_error(&self, peer: SocketAddr) -> RpcError {
        match self {
            CloseReason::ConnectFailed(e) => RpcError::Connect {
                peer,
                source: io::Error::new(e.kind(), e.to_string()),
            },
            CloseReason::ConnectTimeout(timeout) => RpcError::ConnectTimeout {
                peer,
                timeout: *timeout,
            },
            CloseReason::Stopping => RpcError::Stopped,
            CloseReason::Auth(_) | CloseReason::AuthTimeout(_) => RpcError::AuthenticationFailed {
                peer,
                reason: self.to_string(),
            },
            CloseReason::Refused(text) if crate::auth::is_auth_refusal(text) => {
                RpcError::AuthenticationFailed {
                    peer,
                    reason: self.to_string(),
                }
            }
            _ => RpcError::Disconnected {
                peer,
                reason: self.to_string(),
            },
        }
    }
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CloseReason::EndOfStream => f.write_str("end of stream"),
            CloseReason::Io(e) => write!(f, "{e}"),
            CloseReason::Wire(e) => write!(f, "{e}"),
            CloseReason::Auth(e) => write!(f, "{e}"),
            CloseReason::ConnectFailed(e) => write!(f, "connect failed: {e}"),
            CloseReason::ConnectTimeout(t) => write!(f, "connect timed out after {t:?}"),
            CloseReason::AuthTimeout(t) => write!(
                f,
                "authentication did not finish within {t:?}; the timeout is set by \
                 authenticate.timeout"
            ),
            CloseReason::StalledFrame { timeout, buffered } => write!(
                f,
                "the peer sent nothing for {timeout:?} in the middle of a frame ({buffered} \
                 bytes of it in); the timeout is set by network.timeout"
            ),
            CloseReason::SlowFrame {
                frame_len,
                buffered,
            } => {
                match frame_len {
                    Some(len) => write!(f, "a frame of {len} bytes arrived too slowly")?,
                    None => f.write_str("a frame arrived too slowly")?,
                }
                write!(
                    f,
                    " ({buffered} bytes of it in): from network.timeout after its first bytes \
                     (or after rpc.io.maxReceiveBytes let it in), a frame must come at 1 MiB/s \
                     at least"
                )
            }
            CloseReason::Refused(reason) => {
                write!(f, "the peer closed the connection, saying: {reason}")
            }
            CloseReason::Idle(timeout) => write!(
                f,
                "the peer sent nothing for {timeout:?}; the timeout is set by \
                 rpc.io.idleTimeout (when not set, twice network.timeout or the ask \
                 timeout, whichever is longer)"
            ),
            CloseReason::Evicted { held } => write!(
                f,
                "{held}: this one, the oldest yet to authenticate or deliver a message, makes \
                 room for a new one"
            ),
            CloseReason::Stopping => f.write_str("the RPC environment is stopping"),
        }
    }
}

impl EventLoop {
    /// The counter of [`crate::RpcStats`] a close for `reason` adds to: closes for what
    /// the peer did, by kind; none for ends, stops, refusals and evictions (counted
    /// where they happen).
    fn close_counter(&self, reason: &CloseReason) -> Option<&AtomicU64> {
        let shared = &self.shared;
        match reason {
            CloseReason::Wire(_) => Some(&shared.closed_protocol),
            CloseReason::Auth(_) | CloseReason::AuthTimeout(_) => Some(&shared.closed_auth),
            CloseReason::StalledFrame { .. }
            | CloseReason::SlowFrame { .. }
            | CloseReason::Idle(_) => Some(&shared.closed_timeout),
            _ => None,
        }
    }

    pub(super) fn close(&mut self, key: ConnKey, reason: CloseReason) {
        let Some(mut conn) = self.connections.remove(&key) else {
            return;
        };
        let _ = self.poll.registry().deregister(&mut conn.stream);
        if matches!(conn.outbox.kind(), OutboxKind::Incoming) {
            self.admission.closed(key, conn.peer.ip());
        }
        if conn.state.awaiting_budget() || conn.state.reserved() > 0 {
            // Not `self.now`: a close outside a turn (a failed write in `flush_queued`)
            // gets here with the time of the last turn that worked.
            let now = Instant::now();
            let how = reason.unfinished(conn.state.frame_under_way(now));
            // Before its room is given back, so that it goes to the others first, and
            // while its place shows whether others wait.
            if self
                .receive_budget
                .ended_unfinished(conn.peer.ip(), how, now)
            {
                debug!(
                        peer = %conn.peer,
                        "its host is on probation for the receive budget (rpc.io.maxReceiveBytes): \
                         its large frames wait behind other hosts'"
                );
            }
            self.release_budget(key, now);
        }
        if let Some(counter) = self.close_counter(&reason) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        if reason.tells_peer() {
            let text = reason.to_string();
            if conn.outbox.close_between_frames(&text) {
                // Sealed if the connection seals: the peer takes no frame in clear now.
                let mut sealer = conn.outbox.take_sealer();
                tell_refused(&mut self.control, &conn.stream, &text, sealer.as_mut());
            }
        }
        match &reason {
            CloseReason::EndOfStream | CloseReason::Stopping => {
                debug!(peer = %conn.peer, "connection closed: {reason}")
            }
            // What a peer that connected here did (or failed to do) is logged within a
            // budget; a connection this environment opened says why it failed each time.
            _ if matches!(conn.outbox.kind(), OutboxKind::Incoming) => {
                crate::peer_warn!(self.close_warnings, self.now, peer = %conn.peer, "closing connection: {reason}")
            }
            _ => warn!(peer = %conn.peer, "closing connection: {reason}"),
        }
        self.fail_outbox(&conn.outbox, &reason);
        if conn.announced {
            let peer = conn.peer;
            self.endpoints.each(Instant::now(), |endpoint, ctx| {
                endpoint.on_disconnected(ctx, peer)
            });
        }
    }

    /// Closes an outbox and fails the asks that travelled on it.
    pub(super) fn fail_outbox(&mut self, outbox: &Arc<Outbox>, reason: &CloseReason) {
        outbox.close_for_good(&reason.to_string());
        self.shared.forget_outgoing(outbox);
        self.shared
            .asks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take_connection(outbox.key(), &mut self.ended_asks);
        for ask in self.ended_asks.drain(..) {
            ask.completion
                .complete(Err(reason.ask_error(outbox.peer())));
        }
    }
}

/// Tells the peer, as well as it can without waiting, why its connection is about to
/// close: a [`Message::Refused`] frame, then the end of this side's stream. What the peer
/// sent meanwhile is read and dropped (a few KiB at most): closing a socket with unread
/// bytes resets the connection, and a reset can overtake the frame before the peer
/// reads it.
pub(super) fn tell_refused(
    encoder: &mut Encoder,
    stream: &TcpStream,
    reason: &str,
    sealer: Option<&mut Sealer>,
) {
    let message = Message::Refused {
        reason: flint_wire::cut_text(reason, MAX_REFUSAL_TEXT),
    };
    let mut out = BytesMut::new();
    let flags = if sealer.is_some() { FLAG_SEALED } else { 0 };
    if encoder
        .encode_with_flags(&Route::Reply { request_id: 0 }, &message, flags, &mut out)
        .is_err()
    {
        return;
    }
    if let Some(sealer) = sealer {
        sealer.seal(&mut out);
    }
    // A write the socket takes only in part leaves the peer a cut frame, which it reports
    // as the stream ending in the middle of a frame: no worse than saying nothing.
    let _ = (&*stream).write(&out);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match (&*stream).read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
}

/// A peer's text made fit for a log line: cut to [`MAX_REFUSAL_TEXT`] bytes (on a
/// character boundary, "..." after it), and control characters, line and paragraph
/// separators and the invisible formatting characters (bidirectional overrides, say),
/// which could forge a line or reorder one, become spaces.
pub(super) fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_REFUSAL_TEXT + 3));
    for c in text.chars() {
        if out.len() + c.len_utf8() > MAX_REFUSAL_TEXT {
            out.push_str("...");
            break;
        }
        let invisible = matches!(
            c,
            '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}'
        );
        out.push(if c.is_control() || invisible { ' ' } else { c });
    }
    out
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::auth::HANDSHAKE_MAX_PAYLOAD;

    /// Refusals often come during the handshake, when a peer takes only small frames.
    #[test]
    fn the_longest_refusal_fits_what_a_peer_takes_before_authenticating() {
        let reason = flint_wire::cut_text(&"é".repeat(10_000), MAX_REFUSAL_TEXT);
        let mut out = BytesMut::new();
        Encoder::new(1 << 20)
            .encode(
                &Route::Reply { request_id: 0 },
                &Message::Refused { reason },
                &mut out,
            )
            .unwrap();
        let payload = u32::from_le_bytes(out[12..16].try_into().unwrap()) as usize;
        assert!(payload <= HANDSHAKE_MAX_PAYLOAD, "{payload} bytes");
    }

    /// A refusal's text, which any peer can write, cannot forge log lines or run long.
    #[test]
    fn a_peer_s_refusal_is_logged_on_one_line_and_cut_short() {
        assert_eq!(
            printable("bad proof\n2026-11-25 INFO all is well\r\u{1b}[2J\u{2028}\u{202E}x"),
            "bad proof 2026-11-25 INFO all is well  [2J  x"
        );
        let long = "é".repeat(MAX_REFUSAL_TEXT);
        assert!(printable(&long).len() <= MAX_REFUSAL_TEXT + 3);
    }
}
