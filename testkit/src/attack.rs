//! An attacker's tools, for the tests that throw at a driver (or any flint endpoint)
//! what a hostile or broken peer can: raw connections from another loopback host,
//! connections held open that say nothing ([`IdleConnections`]), bytes that are no
//! frame, headers announcing more than any limit, frames whose CRC is wrong, and
//! connections that trickle a frame and reconnect as soon as they are cut off.
//!
//! Every 127.0.0.0/8 address is this machine's on Linux, so a test makes "another host"
//! by binding its connections to 127.0.0.2 and up ([`loopback_host`]): the peer's
//! per-host rules then see them apart from the honest executors on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use flint_wire::{FrameHeader, Message, MessageKind, Route, HEADER_LEN};

/// The loopback address 127.0.0.`n` (`n` of 2 and up: another host than 127.0.0.1).
pub fn loopback_host(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n)
}

/// A TCP connection to `to` whose source address is `host` (see [`loopback_host`]).
pub fn connect_from(host: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.bind(&SocketAddrV4::new(host, 0).into())?;
    socket.connect_timeout(&to.into(), Duration::from_secs(5))?;
    Ok(socket.into())
}

/// Bytes that are no frame: no magic where a header's must be.
pub const GARBAGE: [u8; 64] = [0x5A; 64];

/// A frame header (and nothing after it) announcing a payload of `payload_len` bytes.
pub fn header_announcing(payload_len: u32) -> [u8; HEADER_LEN] {
    let mut header = [0u8; HEADER_LEN];
    FrameHeader {
        kind: MessageKind::Custom,
        flags: 0,
        payload_len,
        crc: 0,
    }
    .write(&mut header);
    header
}

/// `message` to `route` as a frame whose CRC does not match its bytes.
pub fn bad_crc_frame(route: &Route, message: &Message) -> BytesMut {
    let mut frame = crate::frames::frame_bytes(route, message);
    // The CRC is header bytes 4..8.
    frame[4] ^= 0xFF;
    frame
}

/// Whether the peer closes `stream` (end of stream or reset) within `timeout`, reading
/// and dropping whatever it sends before.
pub fn closed_by_peer(stream: &mut TcpStream, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut sink = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return false;
        }
        match stream.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// How the peer ended `stream` within `timeout`, reading what it sent before: `None` if
/// it did not close it; `Some(reason)` if it did, with the reason of the `Refused`
/// frame it sent (`None` if it closed without saying why).
pub fn refusal(stream: &mut TcpStream, timeout: Duration) -> Option<Option<String>> {
    let deadline = Instant::now() + timeout;
    let mut decoder = flint_wire::FrameDecoder::new(1 << 20);
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return None;
        }
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let _ = decoder.feed(&buf[..n]);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                break
            }
            Err(_) => return None,
        }
    }
    // The reason is in the last `Refused` (an accepting side may have answered a step of
    // a handshake before it refused the next).
    let mut reason = None;
    while let Ok(Some(frame)) = decoder.next_frame() {
        if let Ok(envelope) = frame.envelope() {
            if let flint_wire::ArchivedMessage::Refused { reason: why } = &envelope.message {
                reason = Some(why.as_str().to_owned());
            }
        }
    }
    Some(reason)
}

/// Connections from one host held open, saying nothing: what takes a listener's places
/// (`rpc.io.maxConnections`) without using them.
#[derive(Debug)]
pub struct IdleConnections {
    /// Non-blocking, so that [`IdleConnections::closed`] can look at them.
    streams: Vec<TcpStream>,
}

impl IdleConnections {
    /// Opens `count` connections to `to` from `host`, one after the other.
    pub fn open(host: Ipv4Addr, to: SocketAddr, count: usize) -> std::io::Result<Self> {
        let mut streams = Vec::with_capacity(count);
        for _ in 0..count {
            let stream = connect_from(host, to)?;
            stream.set_nonblocking(true)?;
            streams.push(stream);
        }
        Ok(IdleConnections { streams })
    }

    /// How many are held (closed ones included, until taken).
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// The indices (in the order they were opened) of those the peer closed, or is
    /// closing: each reads an end of stream, a reset or bytes, where a connection the
    /// peer holds would block. (The peer sends a connection that says nothing no bytes
    /// unless it closes it: a `Refused` frame, then the end.)
    pub fn closed(&self) -> Vec<usize> {
        (0..self.streams.len())
            .filter(|&at| {
                !matches!(
                    self.streams[at].peek(&mut [0u8; 1]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
                )
            })
            .collect()
    }

    /// Connection `at`, blocking again, to read what the peer said (see [`refusal`]).
    pub fn take(&mut self, at: usize) -> TcpStream {
        let stream = self.streams.remove(at);
        stream
            .set_nonblocking(false)
            .expect("a socket made blocking again");
        stream
    }
}

/// Connections from one host that each announce a frame of `payload_len` bytes and then
/// send one byte of it every `interval`, never finishing it; a connection cut off is
/// replaced at once by a new one, so the host always tries to hold `connections`. Made
/// with [`Reconnector::closing_after`], it also closes each connection itself once it has
/// been open for a given time (just before the peer would cut it off, say) and opens
/// another in its place. Stops (and closes everything) when dropped.
pub struct Reconnector {
    stop: Arc<AtomicBool>,
    reconnections: Arc<AtomicU64>,
    self_closes: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Reconnector {
    /// Starts trickling from `host` to `to`.
    pub fn start(
        host: Ipv4Addr,
        to: SocketAddr,
        connections: usize,
        payload_len: u32,
        interval: Duration,
    ) -> Reconnector {
        Reconnector::run(host, to, connections, payload_len, interval, None)
    }

    /// Starts trickling from `host` to `to` as [`Reconnector::start`] does, each
    /// connection closed by the trickler itself `close_after` after it connected (give or
    /// take 10 ms), unless the peer cut it off first.
    pub fn closing_after(
        host: Ipv4Addr,
        to: SocketAddr,
        connections: usize,
        payload_len: u32,
        interval: Duration,
        close_after: Duration,
    ) -> Reconnector {
        Reconnector::run(
            host,
            to,
            connections,
            payload_len,
            interval,
            Some(close_after),
        )
    }

    fn run(
        host: Ipv4Addr,
        to: SocketAddr,
        connections: usize,
        payload_len: u32,
        interval: Duration,
        close_after: Option<Duration>,
    ) -> Reconnector {
        let stop = Arc::new(AtomicBool::new(false));
        let reconnections = Arc::new(AtomicU64::new(0));
        let self_closes = Arc::new(AtomicU64::new(0));
        let thread = {
            let stop = stop.clone();
            let reconnections = reconnections.clone();
            let self_closes = self_closes.clone();
            std::thread::spawn(move || {
                let header = header_announcing(payload_len);
                // Each connection, with when it connected.
                let mut open: Vec<(TcpStream, Instant)> = Vec::new();
                let mut first = true;
                let mut next_byte = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    if let Some(close_after) = close_after {
                        open.retain(|(_, since)| {
                            let keep = since.elapsed() < close_after;
                            if !keep {
                                self_closes.fetch_add(1, Ordering::Relaxed);
                            }
                            keep
                        });
                    }
                    if Instant::now() >= next_byte {
                        open.retain_mut(|(c, _)| c.write_all(&[0]).is_ok());
                        next_byte = Instant::now() + interval;
                    }
                    while open.len() < connections && !stop.load(Ordering::Relaxed) {
                        let Ok(mut c) = connect_from(host, to) else {
                            break;
                        };
                        let _ = c.set_write_timeout(Some(Duration::from_millis(100)));
                        if c.write_all(&header).is_err() {
                            break;
                        }
                        if !first {
                            reconnections.fetch_add(1, Ordering::Relaxed);
                        }
                        open.push((c, Instant::now()));
                    }
                    first = false;
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        Reconnector {
            stop,
            reconnections,
            self_closes,
            thread: Some(thread),
        }
    }

    /// Connections opened after the first round, to replace ones that were cut off or
    /// that the trickler closed itself.
    pub fn reconnections(&self) -> u64 {
        self.reconnections.load(Ordering::Relaxed)
    }

    /// Connections the trickler closed itself (see [`Reconnector::closing_after`]).
    pub fn self_closes(&self) -> u64 {
        self.self_closes.load(Ordering::Relaxed)
    }
}

impl Drop for Reconnector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_connection_from_another_loopback_host_comes_from_it() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = connect_from(loopback_host(7), listener.local_addr().unwrap()).unwrap();
        let (_, from) = listener.accept().unwrap();
        assert_eq!(from.ip(), loopback_host(7));
    }

    #[test]
    fn a_bad_crc_frame_is_refused_by_the_decoder_and_a_huge_header_by_its_limit() {
        let route = Route::OneWay {
            endpoint: "sink".into(),
        };
        let message = Message::Custom {
            tag: 1,
            body: bytes::Bytes::from_static(b"body"),
        };
        let refused = |bytes: &[u8]| {
            let mut decoder = flint_wire::FrameDecoder::new(1 << 20);
            decoder.feed(bytes).is_err() || decoder.next_frame().is_err()
        };
        assert!(refused(&bad_crc_frame(&route, &message)));
        assert!(refused(&header_announcing(u32::MAX - 7)));
        assert!(!refused(&crate::frames::frame_bytes(&route, &message)));
    }

    #[test]
    fn idle_connections_come_from_their_host_and_see_their_close() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let mut idle = IdleConnections::open(loopback_host(9), to, 3).unwrap();
        let mut accepted: Vec<_> = (0..3).map(|_| listener.accept().unwrap()).collect();
        assert!(accepted
            .iter()
            .all(|(_, from)| from.ip() == loopback_host(9)));
        assert_eq!((idle.len(), idle.closed()), (3, vec![]));
        drop(accepted.remove(1));
        let deadline = Instant::now() + Duration::from_secs(10);
        while idle.closed().is_empty() {
            assert!(Instant::now() < deadline, "the close was not seen");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(idle.closed(), [1]);
        assert_eq!(
            refusal(&mut idle.take(1), Duration::from_secs(10)),
            Some(None)
        );
        assert_eq!(idle.len(), 2);
    }

    #[test]
    fn a_reconnector_replaces_the_connections_that_are_cut_off() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let trickler =
            Reconnector::start(loopback_host(8), to, 2, 1 << 20, Duration::from_millis(20));
        // Cut off the first three connections as they come.
        for _ in 0..3 {
            let (mut c, _) = listener.accept().unwrap();
            let mut header = [0u8; HEADER_LEN];
            c.read_exact(&mut header).unwrap();
            assert_eq!(header, header_announcing(1 << 20));
            drop(c);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while trickler.reconnections() == 0 {
            assert!(Instant::now() < deadline, "no reconnection");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_reconnector_closing_after_a_time_closes_its_connections_itself_and_reconnects() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let to = listener.local_addr().unwrap();
        let trickler = Reconnector::closing_after(
            loopback_host(8),
            to,
            1,
            1 << 20,
            Duration::from_millis(20),
            Duration::from_millis(200),
        );
        // The listener keeps each connection: the trickler ends them, within about
        // 200 ms of connecting, and opens the next.
        for _ in 0..2 {
            let (mut c, _) = listener.accept().unwrap();
            let accepted = Instant::now();
            assert!(closed_by_peer(&mut c, Duration::from_secs(10)));
            let lasted = accepted.elapsed();
            assert!(lasted < Duration::from_secs(2), "open for {lasted:?}");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while trickler.self_closes() < 2 || trickler.reconnections() == 0 {
            assert!(Instant::now() < deadline, "no close or reconnection");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
