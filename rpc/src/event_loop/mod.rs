//! The event loop: sockets, dispatch to endpoints, timers, ask expiry, in turns that
//! whichever thread holds it takes (see `turns`).
//!
//! Where what is decided:
//!
//! - [`turn`]: one turn of the loop (what it handles, in which order, and when it must
//!   turn next), the expiry of deadlines, commands, and the shutdown;
//! - [`deadlines`]: a connection's deadlines: when it must be connected, authenticated,
//!   have sent more of a frame (and fast enough), or have sent anything at all, and how
//!   a wait for the receive budget bends them; pure, and tested on made-up instants;
//! - [`connection`]: a connection's socket, decoder and outbox around that state;
//! - [`accept`]: connections from peers, and what [`Admission`] decides for each: held,
//!   held in the place of one not established yet, or refused (`rpc.io.maxConnections`,
//!   `rpc.io.maxConnectionsPerHost`);
//! - [`connect`]: connections this environment opens, and the announcement of a
//!   connection to the endpoints once it may carry their messages;
//! - [`read_write`]: reading and writing sockets, within a read budget per wake-up;
//! - [`frames`]: what arrives: handshake steps, refusals, frames under way and the
//!   receive budget they hold;
//! - [`dispatch`]: handing a frame to its endpoint, or to the ask it answers;
//! - [`close`]: why a connection closes, and what the peer, the asks and the endpoints
//!   are told.

use std::sync::Arc;
use std::time::Instant;

use flint_wire::{Encoder, FrameDecoder};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use rustc_hash::FxHashMap;

use crate::admission::Admission;
use crate::ask::PendingAsk;
use crate::log_budget::LogBudget;
use crate::outbox::ConnKey;
use crate::receive_budget::ReceiveBudget;
use crate::refs::RpcEnvHandle;
use crate::shared::{AskCompletion, Command, Shared};
use crate::timer::TimerQueue;

mod accept;
mod close;
mod connect;
mod connection;
mod deadlines;
mod dispatch;
mod frames;
mod read_write;
mod turn;

use accept::WARNING_EVERY;
use connection::Connection;
use dispatch::Endpoints;

/// Token of the waker that other threads use.
pub(crate) const WAKER: Token = Token(0);

const LISTENER: Token = Token(1);

/// Lowers `floor` to `deadline`, a connection's new deadline (if any).
fn lower_floor(floor: &mut Option<Instant>, deadline: Option<Instant>) {
    if let Some(deadline) = deadline {
        *floor = Some(floor.map_or(deadline, |f| f.min(deadline)));
    }
}

/// Events one poll returns at most.
const POLL_EVENTS: usize = 1024;

#[cfg(not(test))]
fn poll_events() -> usize {
    POLL_EVENTS
}

#[cfg(test)]
thread_local! {
    /// The poll's event capacity for loops made on this thread in a unit test: fewer, to
    /// reach what happens when more sockets are ready than one poll returns.
    static TEST_POLL_EVENTS: std::cell::Cell<usize> = const { std::cell::Cell::new(POLL_EVENTS) };
}

#[cfg(test)]
fn poll_events() -> usize {
    TEST_POLL_EVENTS.with(std::cell::Cell::get)
}

/// The loop: owns the poller, the listener, the connections and the endpoints.
pub(crate) struct EventLoop {
    poll: Poll,
    /// `None` for an environment that does not listen ([`crate::RpcEnv::client`]).
    listener: Option<TcpListener>,
    shared: Arc<Shared>,
    connections: FxHashMap<ConnKey, Connection>,
    /// Connections from peers open now, by host, and those not established yet: which
    /// are held, and which give up their place (rpc.io.maxConnections,
    /// rpc.io.maxConnectionsPerHost).
    admission: Admission,
    /// Warnings of refused connections: one a minute, however many peers knock, with
    /// the number refused since the last.
    refusal_warnings: LogBudget,
    /// Lines about connections closed for what their peer did (or failed to do).
    close_warnings: LogBudget,
    /// When to try `accept` again after it failed (out of descriptors, say): the
    /// listener is edge-triggered, so connections left in its backlog raise no event.
    accept_retry_at: Option<Instant>,
    /// Warnings of failed accepts: one a minute, with the number failed since the last.
    accept_failure_warnings: LogBudget,
    endpoints: Endpoints,
    local_decoder: FrameDecoder,
    /// Encodes handshake frames, which bypass the outbox.
    control: Encoder,
    commands: Vec<Command>,
    ended_asks: Vec<PendingAsk<AskCompletion, ConnKey>>,
    /// Connections that used up their [`READ_BUDGET`](read_write::READ_BUDGET) with
    /// bytes still to read: read again at the next wake-up, which comes at once.
    unfinished_reads: Vec<ConnKey>,
    /// Bytes held by large frames under way, across connections (rpc.io.maxReceiveBytes).
    receive_budget: ReceiveBudget,
    /// Room for the connections the receive budget admits, kept between calls.
    admitted: Vec<(ConnKey, usize)>,
    /// Room for [`EventLoop::flush_queued`]'s list, kept between calls.
    queued_keys: Vec<ConnKey>,
    /// The previous wake-up's `unfinished_reads`, being read (kept to reuse its memory).
    resumed_reads: Vec<ConnKey>,
    /// Counts the loop's wake-ups, for the read budget.
    round: u64,
    stopping: bool,
    /// The time of the current wake-up, read once when `poll` returns: every message of a
    /// batch is handled as of it, so that the hot path reads no clock per message.
    now: Instant,
    /// The poller's events, kept for every turn, whichever thread turns.
    events: Events,
    /// When the loop must next turn even without an event, as of its last turn that
    /// worked.
    next_deadline: Option<Instant>,
    /// No connection's deadline is earlier than this (`None`: none has one). Every
    /// deadline set lowers it; a turn that reaches it looks at every connection and
    /// sets it to their earliest deadline. So a turn costs the same with one connection
    /// or ten thousand, as long as none is due.
    conn_deadline_floor: Option<Instant>,
}

/// What a turn of the loop did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Nothing was ready and nothing was due.
    Idle,
    /// It handled events, timers or commands.
    Worked,
    /// The environment is stopping: the loop thread shuts it down.
    Stopping,
}

impl EventLoop {
    pub(crate) fn new(
        poll: Poll,
        mut listener: Option<TcpListener>,
        shared: Arc<Shared>,
    ) -> std::io::Result<Self> {
        if let Some(listener) = &mut listener {
            poll.registry()
                .register(listener, LISTENER, Interest::READABLE)?;
        }
        let max_payload = shared.settings.max_payload;
        let max_receive_bytes = shared.settings.max_receive_bytes;
        let network_timeout = shared.settings.stalled_frame_timeout;
        let admission = Admission::new(
            shared.settings.max_connections,
            shared.settings.max_connections_per_host,
        );
        Ok(EventLoop {
            poll,
            listener,
            endpoints: Endpoints {
                env: RpcEnvHandle {
                    shared: shared.clone(),
                },
                slots: Vec::new(),
                names: Vec::new(),
                by_name: FxHashMap::default(),
                timers: TimerQueue::new(),
                in_batch: Vec::new(),
                batch_flags: Vec::new(),
                unrouted_warnings: LogBudget::default(),
            },
            shared,
            connections: FxHashMap::default(),
            admission,
            refusal_warnings: LogBudget::new(1, WARNING_EVERY),
            close_warnings: LogBudget::default(),
            accept_retry_at: None,
            accept_failure_warnings: LogBudget::new(1, WARNING_EVERY),
            local_decoder: FrameDecoder::new(max_payload),
            control: Encoder::new(max_payload),
            commands: Vec::new(),
            ended_asks: Vec::new(),
            unfinished_reads: Vec::new(),
            receive_budget: ReceiveBudget::new(max_receive_bytes, network_timeout),
            admitted: Vec::new(),
            queued_keys: Vec::new(),
            resumed_reads: Vec::new(),
            round: 0,
            stopping: false,
            now: Instant::now(),
            events: Events::with_capacity(poll_events()),
            next_deadline: None,
            conn_deadline_floor: None,
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    /// Records the tags of custom messages; tag 99 holds the loop for 1.5 s (and says so
    /// in `holding` as it starts).
    #[derive(Clone, Default)]
    struct Stalling(
        std::sync::Arc<std::sync::Mutex<Vec<u32>>>,
        std::sync::Arc<std::sync::atomic::AtomicBool>,
    );

    impl crate::Endpoint for Stalling {
        fn receive(&mut self, _ctx: &mut crate::EndpointContext<'_>, message: crate::Incoming<'_>) {
            if let flint_wire::ArchivedMessage::Custom { tag, .. } = message.message() {
                if *tag == 99 {
                    self.1.store(true, Ordering::Release);
                    std::thread::sleep(Duration::from_millis(1500));
                }
                self.0.lock().unwrap().push(tag.to_native());
            }
        }
    }

    fn one_way_frame(tag: u32) -> Vec<u8> {
        let route = flint_wire::Route::OneWay {
            endpoint: "stalling".into(),
        };
        let message = flint_wire::Message::Custom {
            tag,
            body: bytes::Bytes::from(vec![7u8; 64]),
        };
        flint_testkit::frames::frame_bytes(&route, &message).to_vec()
    }

    /// Two peers finish their frames while the loop is held past the stalled-frame
    /// timeout, and each poll returns one ready socket: the one whose event has not
    /// come yet when the deadlines are checked has its bytes in the kernel, and is read,
    /// not cut off as stalled.
    #[test]
    fn a_peer_whose_bytes_wait_unread_past_its_deadline_is_read_not_cut_off() {
        use std::io::Write;
        TEST_POLL_EVENTS.with(|n| n.set(1));
        let conf = crate::Conf::from_pairs([
            "network.timeout=1s",
            "executor.heartbeatInterval=100ms",
            "rpc.io.idleTimeout=0",
        ])
        .unwrap();
        let server = crate::RpcEnv::new(&conf).unwrap();
        TEST_POLL_EVENTS.with(|n| n.set(POLL_EVENTS));
        let seen = Stalling::default();
        server.handle().register("stalling", seen.clone()).unwrap();
        let frames = [one_way_frame(1), one_way_frame(2)];
        let mut peers: Vec<std::net::TcpStream> = frames
            .iter()
            .map(|frame| {
                let mut peer = std::net::TcpStream::connect(server.address()).unwrap();
                peer.write_all(&frame[..flint_wire::HEADER_LEN + 8])
                    .unwrap();
                peer
            })
            .collect();
        // Both halves read (each connection's stalled-frame deadline set), then the loop
        // held for 1.5 s by a third peer's message.
        std::thread::sleep(Duration::from_millis(200));
        let mut holder = std::net::TcpStream::connect(server.address()).unwrap();
        holder.write_all(&one_way_frame(99)).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        for (peer, frame) in peers.iter_mut().zip(&frames) {
            peer.write_all(&frame[flint_wire::HEADER_LEN + 8..])
                .unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut tags = seen.0.lock().unwrap().clone();
            tags.sort_unstable();
            if tags == [1, 2, 99] {
                break;
            }
            assert!(Instant::now() < deadline, "seen only {tags:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(server);
    }

    /// A peer refuses the connection (a `Refused` frame saying why) and resets it while
    /// this side's loop is held; the loop then writes to it before it reads it (commands
    /// come after events in a turn, and the reset's event comes with the next poll). The
    /// write fails on the reset, and the ask on the connection still ends with the
    /// peer's reason, read from the socket before the connection is closed, not with
    /// "broken pipe".
    #[test]
    fn a_peer_s_reason_is_read_even_when_a_write_fails_on_its_reset_first() {
        use std::io::{Read, Write};
        let client = crate::RpcEnv::new(&crate::Conf::new()).unwrap();
        let stalling = Stalling::default();
        client
            .handle()
            .register("stalling", stalling.clone())
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let to_peer = client
            .handle()
            .endpoint_ref(listener.local_addr().unwrap(), "anything");
        let asking = {
            let to_peer = to_peer.clone();
            let message = flint_wire::Message::Custom {
                tag: 1,
                body: bytes::Bytes::new(),
            };
            std::thread::spawn(move || to_peer.ask_timeout(&message, Duration::from_secs(20)))
        };
        let (mut peer, _) = listener.accept().unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut sink = [0u8; 4096];
        assert!(peer.read(&mut sink).unwrap() > 0, "the ask arrives");
        // Hold the client's loop.
        let mut holder = std::net::TcpStream::connect(client.address()).unwrap();
        holder.write_all(&one_way_frame(99)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !stalling.1.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "the loop is never held");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The peer says why and resets; the client has a frame to write after the hold.
        let refused = flint_wire::Message::Refused {
            reason: "authentication failed: not today".into(),
        };
        peer.write_all(&flint_testkit::frames::frame_bytes(
            &flint_wire::Route::Reply { request_id: 0 },
            &refused,
        ))
        .unwrap();
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer);
        to_peer
            .send(&flint_wire::Message::Custom {
                tag: 2,
                body: bytes::Bytes::new(),
            })
            .unwrap();
        let error = asking.join().unwrap().unwrap_err().to_string();
        assert!(
            error.contains("saying: authentication failed: not today"),
            "{error}"
        );
        drop(client);
    }

    /// A turn looks at connections' deadlines only when one may be due: with a hundred
    /// silent peers connected, a stream of messages from another costs no look at them.
    #[test]
    fn turns_do_not_look_at_every_connection_while_no_deadline_is_due() {
        use std::io::Write;
        let server = crate::RpcEnv::new(&crate::Conf::new()).unwrap();
        let seen = Stalling::default();
        server.handle().register("stalling", seen.clone()).unwrap();
        let silent: Vec<std::net::TcpStream> = (0..100)
            .map(|_| std::net::TcpStream::connect(server.address()).unwrap())
            .collect();
        let mut talker = std::net::TcpStream::connect(server.address()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Tags from 100: 99 would hold the loop.
        for (count, tag) in (100..300).enumerate() {
            talker.write_all(&one_way_frame(tag)).unwrap();
            // One message per turn, more or less: many turns.
            while seen.0.lock().unwrap().len() <= count {
                assert!(Instant::now() < deadline, "message {tag} not seen");
                std::thread::yield_now();
            }
        }
        let checks = server
            .handle()
            .shared
            .deadline_checks
            .load(Ordering::Relaxed);
        assert!(checks < 101, "{checks} looks at connections' deadlines");
        assert_eq!(server.handle().stats().accepted, 101);
        drop(silent);
    }
}
