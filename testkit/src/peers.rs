//! Raw peers, for tests that play an attacker: a TCP connection written frame by frame,
//! with no RPC environment behind it, that reads only when the test says so. A peer that
//! registers and then never reads again is the one that fills a driver's outbox.
//!
//! ```no_run
//! use std::time::Duration;
//! use flint_testkit::peers::RawPeer;
//! use flint_wire::Message;
//!
//! # let driver: std::net::SocketAddr = "127.0.0.1:7077".parse().unwrap();
//! // A receive window of 4 KiB: the kernel holds little of what the driver sends.
//! let mut peer = RawPeer::connect(driver, 4096).unwrap();
//! let reply = peer.ask_and_wait("Driver", &Message::ReviveOffers, Duration::from_secs(5));
//! // From here on it only writes: what it is sent piles up.
//! peer.send("Driver", &Message::ReviveOffers).unwrap();
//! ```

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use flint_wire::{ArchivedRoute, Frame, FrameDecoder, Message, Route};

use crate::frames::frame_bytes;

/// A connection to an RPC environment that writes raw frames and reads only in
/// [`RawPeer::ask_and_wait`]. Unauthenticated: for environments without
/// `authenticate`.
#[derive(Debug)]
pub struct RawPeer {
    socket: TcpStream,
    decoder: FrameDecoder,
    next_request: u64,
}

impl RawPeer {
    /// Connects to `address` with a socket receive buffer (SO_RCVBUF) of
    /// `receive_buffer` bytes, set before connecting so that the window the peer
    /// advertises stays that small (the kernel then holds little of what it is sent and
    /// does not grow it); 0 leaves the OS's buffer, which grows as it pleases.
    pub fn connect(address: SocketAddr, receive_buffer: usize) -> io::Result<RawPeer> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(address),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        if receive_buffer > 0 {
            socket.set_recv_buffer_size(receive_buffer)?;
        }
        socket.connect_timeout(&address.into(), Duration::from_secs(10))?;
        Ok(RawPeer {
            socket: socket.into(),
            decoder: FrameDecoder::new(usize::MAX),
            next_request: 1,
        })
    }

    /// The connection's local address: the peer's address as the other side sees it.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Writes `message` to `endpoint` as a one-way frame.
    pub fn send(&mut self, endpoint: &str, message: &Message) -> io::Result<()> {
        let route = Route::OneWay {
            endpoint: endpoint.into(),
        };
        self.socket.write_all(&frame_bytes(&route, message))
    }

    /// Writes `message` to `endpoint` as an ask, and returns its request id. The reply
    /// is not read.
    pub fn ask(&mut self, endpoint: &str, message: &Message) -> io::Result<u64> {
        let request_id = self.next_request;
        self.next_request += 1;
        let route = Route::Ask {
            request_id,
            endpoint: endpoint.into(),
        };
        self.socket.write_all(&frame_bytes(&route, message))?;
        Ok(request_id)
    }

    /// Asks, then reads until the reply (or error reply) to it comes, skipping any other
    /// frame, at most `timeout`: the reply's frame. What was read past it stays unread.
    pub fn ask_and_wait(
        &mut self,
        endpoint: &str,
        message: &Message,
        timeout: Duration,
    ) -> io::Result<Frame> {
        let request_id = self.ask(endpoint, message)?;
        let deadline = Instant::now() + timeout;
        loop {
            while let Some(frame) = self.decoder.next_frame().map_err(io::Error::other)? {
                let envelope = frame.envelope().map_err(io::Error::other)?;
                let answers = match &envelope.route {
                    ArchivedRoute::Reply { request_id: id }
                    | ArchivedRoute::ErrorReply { request_id: id, .. } => {
                        id.to_native() == request_id
                    }
                    _ => false,
                };
                if answers {
                    return Ok(frame);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.socket.set_read_timeout(Some(left))?;
            if self.decoder.read_from(&mut self.socket)? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }
}
