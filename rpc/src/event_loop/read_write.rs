//! Reading and writing sockets: reads until the socket would block or the connection's
//! read budget for this wake-up is spent, vectored writes of what outboxes hold.

use std::io::{self, IoSlice, Write};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Buf, BytesMut};
use flint_wire::{Encoder, Message, Route, FLAG_WILL_SEAL};
use tracing::debug;

use super::close::CloseReason;
use super::connection::Connection;
use super::EventLoop;
use crate::outbox::ConnKey;

/// Most buffers handed to one `writev`.
const MAX_IOVECS: usize = 64;

/// Bytes one connection may have read and handled per wake-up of the loop (give or take
/// the last read). A peer whose socket never runs dry (it writes faster than the loop
/// takes its frames in) would otherwise keep the loop reading it forever, and every other
/// peer, timer and ask with it. What is left is read at the next wake-up, which comes at
/// once.
pub(super) const READ_BUDGET: usize = 256 << 10;

impl EventLoop {
    /// Reads on from the connections that used up their budget at the last wake-up.
    pub(super) fn resume_reads(&mut self) {
        if self.unfinished_reads.is_empty() {
            return;
        }
        std::mem::swap(&mut self.unfinished_reads, &mut self.resumed_reads);
        let mut resumed = std::mem::take(&mut self.resumed_reads);
        for key in resumed.drain(..) {
            if self.connections.contains_key(&key) {
                self.read(key);
                self.flush(key);
            }
        }
        self.resumed_reads = resumed;
    }

    /// Reads and handles what the connection's socket holds, until it would block or this
    /// wake-up's [`READ_BUDGET`] for it is spent.
    pub(super) fn read(&mut self, key: ConnKey) {
        loop {
            let Some(conn) = self.connections.get_mut(&key) else {
                return;
            };
            if conn.state.awaiting_budget() {
                if conn.peer_closed && !conn.pending_frame_is_all_here() {
                    // Its frame will never be whole: it gives up its place in the queue
                    // now, not when its turn comes.
                    let reason = match conn.stream.take_error() {
                        Ok(Some(error)) => CloseReason::Io(error),
                        _ => CloseReason::EndOfStream,
                    };
                    self.close(key, reason);
                }
                return;
            }
            if conn.read_round != self.round {
                conn.read_round = self.round;
                conn.read_in_round = 0;
            }
            if conn.read_in_round >= READ_BUDGET {
                if !self.unfinished_reads.contains(&key) {
                    self.unfinished_reads.push(key);
                }
                return;
            }
            // recv(2) straight into the receive buffer's spare room, which is not zeroed
            // first (see flint_wire::ReadUninit).
            let mut socket = socket2::SockRef::from(&conn.stream);
            let mut drained = false;
            let reason = match conn.decoder.read_uninit_from(&mut socket) {
                Ok(0) => Some(CloseReason::EndOfStream),
                Ok(read) => {
                    conn.read_in_round += read;
                    self.shared
                        .bytes_received
                        .fetch_add(read as u64, Ordering::Relaxed);
                    conn.state.moved_at(self.now, &self.shared.settings);
                    drained = conn.decoder.last_read_was_short() && !conn.peer_closed;
                    None
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Some(CloseReason::Io(e)),
            };
            // Whole frames first: what arrived before an end of stream still counts.
            if let Err(reason) = self.handle_frames(key) {
                self.close(key, reason);
                return;
            }
            if let Some(reason) = reason {
                if let (CloseReason::EndOfStream, Some(conn)) =
                    (&reason, self.connections.get_mut(&key))
                {
                    if let Err(e) = conn.decoder.finish() {
                        debug!(peer = %conn.peer, "{e}");
                    }
                }
                self.close(key, reason);
                return;
            }
            // A short read emptied the socket: what comes next raises a new edge-triggered
            // event (an end of stream that came before this wake-up's event was reported
            // with it, see `peer_closed`), so reading again now would only hear that it
            // would block.
            if drained {
                return;
            }
        }
    }

    /// Writes what the connection has queued, with vectored writes, until done or the
    /// socket is full.
    pub(super) fn flush(&mut self, key: ConnKey) {
        let Some(conn) = self.connections.get_mut(&key) else {
            return;
        };
        if !conn.state.is_open() {
            return;
        }
        // Until the peer is authenticated only handshake frames leave.
        if !conn.state.is_authenticating() && conn.announced {
            if let Some(bytes) = conn.outbox.take() {
                conn.writing.push_back(bytes);
            }
        }
        match write_queued(conn, &self.shared.bytes_sent) {
            // A peer that takes what it is sent, however slowly, is not idle.
            Ok(true) => conn.state.moved_at(self.now, &self.shared.settings),
            Ok(false) => {}
            Err(e) => {
                // A peer that refused the connection sends why, then closes; if this side
                // wrote after that, the write fails on the reset while the peer's reason
                // still waits to be read. What the socket holds is read first, so that
                // the reason (an authentication refused, say) is what the asks see.
                self.read(key);
                if self.connections.contains_key(&key) {
                    self.close(key, CloseReason::Io(e));
                }
            }
        }
    }
}

/// Queues a handshake frame ahead of any application data; `will_seal` says on it that
/// this side seals its frames after the handshake (network.crypto.enabled).
pub(super) fn send_control(
    encoder: &mut Encoder,
    conn: &mut Connection,
    message: &Message,
    will_seal: bool,
) -> Result<(), flint_wire::WireError> {
    let mut out = BytesMut::new();
    let flags = if will_seal { FLAG_WILL_SEAL } else { 0 };
    let len =
        encoder.encode_with_flags(&Route::Reply { request_id: 0 }, message, flags, &mut out)?;
    conn.outbox.add_queued(len);
    conn.writing.push_back(out);
    Ok(())
}

/// Writes the connection's queued buffers until they are gone or the socket would block.
/// Writes what the connection has queued until done or the socket is full; whether any
/// bytes left.
fn write_queued(conn: &mut Connection, bytes_sent: &AtomicU64) -> io::Result<bool> {
    let mut progressed = false;
    while !conn.writing.is_empty() {
        // One buffer goes with `send`: a connection that carries a frame per turn (a
        // launch, a reply) writes one buffer each time, and `writev` of one costs more in
        // the kernel (the vector is copied in and checked): 1.57 us against 1.23 us for
        // a 208-byte frame on loopback with the reader on the same CPU (docs/perf-log.md).
        let result = if conn.writing.len() == 1 {
            conn.stream.write(&conn.writing[0])
        } else {
            let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
            let count = conn.writing.len().min(MAX_IOVECS);
            for (slice, bytes) in slices.iter_mut().zip(conn.writing.iter()) {
                *slice = IoSlice::new(bytes);
            }
            conn.stream.write_vectored(&slices[..count])
        };
        match result {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "socket accepted no bytes",
                ))
            }
            Ok(mut written) => {
                progressed = true;
                conn.outbox.written(written);
                bytes_sent.fetch_add(written as u64, Ordering::Relaxed);
                while written > 0 {
                    let front = conn.writing.front_mut().expect("written bytes were queued");
                    if written >= front.len() {
                        written -= front.len();
                        if let Some(done) = conn.writing.pop_front() {
                            conn.outbox.recycle(done);
                        }
                    } else {
                        front.advance(written);
                        written = 0;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(progressed),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(progressed)
}
