//! Hostile peers, for tests that attack a listener over loopback with raw sockets:
//!
//! - [`connect_from`]: a connection from a chosen address of 127.0.0.0/8, each of which
//!   is a host of its own to the listener (Linux answers on all of them);
//! - [`IdleConnections`]: connections held open that say nothing;
//! - [`Trickler`]: connections that each announce a large frame and send it a byte at a
//!   time, never finishing it, and that reconnect (from the same address) whenever the
//!   listener cuts them off: the attack on a receive budget, counted.
//!
//! They speak no protocol: the frames they send are the caller's bytes (see
//! [`frames`](crate::frames)). Every loop here is bounded by a stop flag checked at each
//! step, so a test that ends stops its attackers.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;

/// A connection to `to` from `source` (port chosen by the system). On Linux every
/// address of 127.0.0.0/8 is this machine's, so `127.0.0.2`, `127.0.0.3` and so on
/// make distinct hosts on loopback.
pub fn connect_from(source: IpAddr, to: SocketAddr) -> io::Result<TcpStream> {
    let domain = match source {
        IpAddr::V4(_) => socket2::Domain::IPV4,
        IpAddr::V6(_) => socket2::Domain::IPV6,
    };
    let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
    socket.bind(&SocketAddr::new(source, 0).into())?;
    socket.connect(&to.into())?;
    Ok(socket.into())
}

/// Whether the listener closed (or is closing) non-blocking `socket`: it reads an end of
/// stream, a reset, or bytes, where a connection the listener holds would block. Only
/// for connections the listener sends nothing on unless it closes them (a `Refused`
/// frame, then the end): a peer that has not authenticated, or one without
/// authentication that asked nothing.
pub fn closed_by_peer(socket: &TcpStream) -> bool {
    !matches!(socket.peek(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// Connections from one address held open, saying nothing.
#[derive(Debug)]
pub struct IdleConnections {
    /// Non-blocking, so that [`closed_by_peer`] can look at them.
    sockets: Vec<TcpStream>,
}

impl IdleConnections {
    /// Opens `count` connections to `to` from `source`, one after the other.
    pub fn open(source: IpAddr, to: SocketAddr, count: usize) -> io::Result<Self> {
        let mut sockets = Vec::with_capacity(count);
        for _ in 0..count {
            let socket = connect_from(source, to)?;
            socket.set_nonblocking(true)?;
            sockets.push(socket);
        }
        Ok(IdleConnections { sockets })
    }

    /// How many are held.
    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }

    /// The indices (in the order they were opened) of those the listener closed.
    pub fn closed(&self) -> Vec<usize> {
        (0..self.sockets.len())
            .filter(|&at| closed_by_peer(&self.sockets[at]))
            .collect()
    }

    /// Connection `at`, blocking again, to read what the listener said.
    pub fn take(&mut self, at: usize) -> TcpStream {
        let socket = self.sockets.remove(at);
        socket
            .set_nonblocking(false)
            .expect("a socket made blocking again");
        socket
    }
}

/// What a [`Trickler`] does.
#[derive(Debug, Clone)]
pub struct TricklePlan {
    /// The address its connections come from.
    pub source: IpAddr,
    /// The listener attacked.
    pub to: SocketAddr,
    /// How many connections it keeps open.
    pub connections: usize,
    /// The frame each connection announces and sends in part; its last byte is never
    /// sent.
    pub frame: Bytes,
    /// How many of its bytes go at once, as a connection opens (at least its header).
    pub head: usize,
    /// How often each connection sends one more byte.
    pub every: Duration,
}

/// Counters of a [`Trickler`]'s attack.
#[derive(Debug, Default)]
struct Counters {
    opened: AtomicU64,
    cut_off: AtomicU64,
    trickled: AtomicU64,
}

/// What a [`Trickler`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrickleStats {
    /// Connections opened, reconnections included.
    pub opened: u64,
    /// Connections the listener closed (each then opened again).
    pub cut_off: u64,
    /// Bytes sent a byte at a time, after the connections' heads.
    pub trickled: u64,
}

/// Connections from one host that each announce a large frame and trickle it, a byte
/// every [`TricklePlan::every`], never finishing it, and reconnect at once when the
/// listener cuts them off: the attack that holds room in a receive budget for nothing
/// but a trickle, however often it is cut off. One thread drives all of them with
/// non-blocking sockets; it stops when [`Trickler::stop`] is called or the trickler is
/// dropped.
#[derive(Debug)]
pub struct Trickler {
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<()>>,
}

/// One of a trickler's connections and how much of its frame it sent.
struct Trickle {
    socket: TcpStream,
    sent: usize,
}

impl Trickle {
    fn open(plan: &TricklePlan, counters: &Counters) -> io::Result<Self> {
        let mut socket = connect_from(plan.source, plan.to)?;
        let head = plan.head.min(plan.frame.len().saturating_sub(1));
        socket.write_all(&plan.frame[..head])?;
        socket.set_nonblocking(true)?;
        counters.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Trickle { socket, sent: head })
    }

    /// Reads (and drops) what the listener sent: whether it closed the connection.
    fn cut_off(&mut self) -> bool {
        let mut sink = [0u8; 4096];
        loop {
            match self.socket.read(&mut sink) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
    }

    /// Sends one more byte, if the frame has more than its last; whether the connection
    /// still stands.
    fn trickle(&mut self, plan: &TricklePlan, counters: &Counters) -> bool {
        if self.sent + 1 >= plan.frame.len() {
            return true;
        }
        match self.socket.write(&plan.frame[self.sent..self.sent + 1]) {
            Ok(n) => {
                self.sent += n;
                counters.trickled.fetch_add(n as u64, Ordering::Relaxed);
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
            Err(_) => false,
        }
    }
}

impl Trickler {
    /// Opens the plan's connections and starts trickling; fails if the first
    /// connections cannot be opened.
    pub fn start(plan: TricklePlan) -> io::Result<Self> {
        let counters = Arc::new(Counters::default());
        let mut trickles = Vec::with_capacity(plan.connections);
        for _ in 0..plan.connections {
            trickles.push(Some(Trickle::open(&plan, &counters)?));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, counters) = (stop.clone(), counters.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for slot in &mut trickles {
                        let standing = match slot {
                            Some(trickle) => {
                                !trickle.cut_off() && trickle.trickle(&plan, &counters)
                            }
                            None => false,
                        };
                        if !standing {
                            if slot.is_some() {
                                counters.cut_off.fetch_add(1, Ordering::Relaxed);
                            }
                            // A connection that cannot be opened now is tried again at
                            // the next step.
                            *slot = Trickle::open(&plan, &counters).ok();
                        }
                    }
                    std::thread::sleep(plan.every);
                }
            })
        };
        Ok(Trickler {
            stop,
            counters,
            thread: Some(thread),
        })
    }

    /// What it did so far.
    pub fn stats(&self) -> TrickleStats {
        TrickleStats {
            opened: self.counters.opened.load(Ordering::Relaxed),
            cut_off: self.counters.cut_off.load(Ordering::Relaxed),
            trickled: self.counters.trickled.load(Ordering::Relaxed),
        }
    }

    /// Stops the attack, closing its connections, and says what it did.
    pub fn stop(mut self) -> TrickleStats {
        self.halt();
        self.stats()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Trickler {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};
    use std::time::Instant;

    const SECOND_HOST: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

    #[test]
    fn connections_come_from_the_address_asked_for_and_idle_ones_see_their_close() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut idle =
            IdleConnections::open(SECOND_HOST, listener.local_addr().unwrap(), 3).unwrap();
        let mut accepted: Vec<_> = (0..3).map(|_| listener.accept().unwrap()).collect();
        assert!(accepted.iter().all(|(_, peer)| peer.ip() == SECOND_HOST));
        assert_eq!(idle.len(), 3);
        assert_eq!(idle.closed(), Vec::<usize>::new());
        drop(accepted.remove(1));
        let deadline = Instant::now() + Duration::from_secs(10);
        while idle.closed().is_empty() {
            assert!(Instant::now() < deadline, "the close was not seen");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(idle.closed(), [1]);
        let mut closed = idle.take(1);
        assert_eq!(closed.read(&mut [0u8; 8]).unwrap(), 0);
    }

    #[test]
    fn a_trickler_sends_a_byte_at_a_time_and_reconnects_when_cut_off() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let frame = Bytes::from(vec![7u8; 100]);
        let trickler = Trickler::start(TricklePlan {
            source: SECOND_HOST,
            to: listener.local_addr().unwrap(),
            connections: 2,
            frame,
            head: 10,
            every: Duration::from_millis(10),
        })
        .unwrap();
        let (mut first, _) = listener.accept().unwrap();
        let (_second, _) = listener.accept().unwrap();
        first
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = [0u8; 12];
        first.read_exact(&mut got).unwrap();
        assert_eq!(got, [7u8; 12], "the head, then a byte at a time");
        drop(first);
        let (mut third, peer) = listener.accept().unwrap();
        assert_eq!(peer.ip(), SECOND_HOST);
        third
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        third.read_exact(&mut [0u8; 10]).unwrap();
        let stats = trickler.stop();
        assert_eq!((stats.opened, stats.cut_off), (3, 1));
        assert!(stats.trickled >= 2, "{stats:?}");
    }
}
