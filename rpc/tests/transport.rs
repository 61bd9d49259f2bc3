//! The transport over real sockets on 127.0.0.1: asks and sends, timeouts, dead and
//! misbehaving peers, authentication, ordering, back-pressure and shutdown.
//!
//! Every wait is bounded in time; every environment is stopped by its Drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use flint_rpc::{
    Conf, Endpoint, EndpointContext, Incoming, RpcEnv, RpcError, Settings, TimeoutSource, TimerId,
};
use flint_wire::{ArchivedMessage, Encoder, Message, Route, HEADER_LEN};

/// What a [`Probe`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Started,
    Message(u32),
    Connected(SocketAddr),
    Disconnected(SocketAddr),
    Timer,
    Stopped,
}

/// An endpoint that records what happens to it and answers asks for `Custom { tag }`
/// with `Custom { tag }` (tag 999: never answers; tag 998: answers with an error; tag
/// [`FLOOD`]: only counted).
#[derive(Clone, Default)]
struct Probe {
    seen: Arc<Mutex<Vec<Seen>>>,
    flooded: Arc<AtomicU64>,
}

/// The tag of one-way messages a [`Probe`] only counts, for floods of millions.
const FLOOD: u32 = u32::MAX;

impl Probe {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn record(&self, event: Seen) {
        self.seen.lock().unwrap().push(event);
    }

    /// Waits (bounded) until `check` holds for what was seen.
    fn wait_for(&self, what: &str, check: impl Fn(&[Seen]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check(&self.seen()) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {:?}",
                self.seen()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Endpoint for Probe {
    fn on_start(&mut self, _ctx: &mut EndpointContext<'_>) {
        self.record(Seen::Started);
    }

    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        if let ArchivedMessage::Custom { tag, body } = message.message() {
            let tag = tag.to_native();
            if tag == FLOOD {
                self.flooded.fetch_add(1, Ordering::Relaxed);
                return;
            }
            self.record(Seen::Message(tag));
            match tag {
                999 => {}
                998 => message.reply_error("no such partition: 7").unwrap(),
                _ => message
                    .reply(&Message::Custom {
                        tag,
                        body: message.frame().bytes_of(body.as_slice()),
                    })
                    .unwrap(),
            }
        }
    }

    fn on_timer(&mut self, _ctx: &mut EndpointContext<'_>, _timer: TimerId) {
        self.record(Seen::Timer);
    }

    fn on_connected(&mut self, _ctx: &mut EndpointContext<'_>, remote: SocketAddr) {
        self.record(Seen::Connected(remote));
    }

    fn on_disconnected(&mut self, _ctx: &mut EndpointContext<'_>, remote: SocketAddr) {
        self.record(Seen::Disconnected(remote));
    }

    fn on_stop(&mut self) {
        self.record(Seen::Stopped);
    }
}

fn custom(tag: u32) -> Message {
    Message::Custom {
        tag,
        body: Bytes::from(vec![tag as u8; 128]),
    }
}

fn conf(pairs: &[&str]) -> Conf {
    Conf::from_pairs(pairs.iter().copied()).unwrap()
}

fn env(pairs: &[&str]) -> RpcEnv {
    RpcEnv::new(&conf(pairs)).unwrap()
}

fn server_with_probe(pairs: &[&str]) -> (RpcEnv, Probe) {
    let server = env(pairs);
    let probe = Probe::default();
    server.handle().register("probe", probe.clone()).unwrap();
    (server, probe)
}

fn tag_of(reply: &flint_rpc::Reply) -> u32 {
    match reply.message() {
        ArchivedMessage::Custom { tag, .. } => tag.to_native(),
        other => panic!("unexpected reply {other:?}"),
    }
}

/// A frame of `message` as raw bytes.
fn frame(route: &Route, message: &Message) -> BytesMut {
    let mut out = BytesMut::new();
    Encoder::new(usize::MAX)
        .encode(route, message, &mut out)
        .unwrap();
    out
}

/// A one-way frame to the probe, as raw bytes.
fn one_way(tag: u32) -> BytesMut {
    frame(
        &Route::OneWay {
            endpoint: "probe".into(),
        },
        &custom(tag),
    )
}

#[test]
fn ask_round_trips_and_the_reply_is_read_in_place() {
    let (server, probe) = server_with_probe(&[]);
    let client = env(&[]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    let reply = remote.ask(&custom(5)).unwrap();
    assert_eq!(tag_of(&reply), 5);
    let ArchivedMessage::Custom { body, .. } = reply.message() else {
        unreachable!()
    };
    let view = reply.frame().bytes_of(body.as_slice());
    assert_eq!(view.len(), 128);
    let payload = reply.frame().payload().as_ptr_range();
    assert!(
        payload.contains(&view.as_ptr()),
        "the reply body is a view of the frame"
    );
    assert!(probe.seen().contains(&Seen::Started));
}

#[test]
fn a_local_endpoint_is_reached_without_a_socket() {
    let (server, probe) = server_with_probe(&[]);
    let local = server.handle().local_ref("probe");
    assert_eq!(local.address(), None);
    assert_eq!(tag_of(&local.ask(&custom(3)).unwrap()), 3);
    // The same environment's own address also resolves to the local path.
    let by_address = server.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&by_address.ask(&custom(4)).unwrap()), 4);
    let stats = server.handle().stats();
    assert_eq!(
        (stats.accepted, stats.connected),
        (0, 0),
        "no socket was opened"
    );
    assert!(!probe.seen().iter().any(|s| matches!(s, Seen::Connected(_))));
}

#[test]
fn an_error_reply_reaches_the_asker_with_its_text() {
    let (server, _probe) = server_with_probe(&[]);
    let client = env(&[]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    let error = remote.ask(&custom(998)).unwrap_err();
    assert!(matches!(error, RpcError::Remote { .. }), "{error:?}");
    assert!(
        error.to_string().contains("no such partition: 7"),
        "{error}"
    );

    let missing = client.handle().endpoint_ref(server.address(), "nobody");
    let error = missing.ask(&custom(1)).unwrap_err();
    assert!(
        error.to_string().contains("no endpoint named nobody"),
        "{error}"
    );
}

#[test]
fn an_ask_without_reply_times_out_naming_the_key() {
    let (server, probe) = server_with_probe(&["rpc.askTimeout=300ms"]);
    let client = env(&["rpc.askTimeout=300ms"]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    let started = Instant::now();
    let error = remote.ask(&custom(999)).unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(error, RpcError::AskTimeout { timeout, set_by: TimeoutSource::AskTimeout, .. } if timeout == Duration::from_millis(300))
    );
    let text = error.to_string();
    assert!(
        text.contains("the timeout is set by rpc.askTimeout") && text.contains("300ms"),
        "{text}"
    );
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert!(probe.seen().contains(&Seen::Message(999)));
    // The environment goes on serving.
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
}

#[test]
fn an_ask_timeout_names_what_actually_set_it() {
    let (server, _probe) = server_with_probe(&[]);
    // rpc.askTimeout not set: network.timeout decides.
    let client = env(&["network.timeout=300ms", "executor.heartbeatInterval=100ms"]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    let error = remote.ask(&custom(999)).unwrap_err();
    assert!(
        matches!(
            error,
            RpcError::AskTimeout {
                set_by: TimeoutSource::NetworkTimeout,
                ..
            }
        ),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("set by network.timeout, as rpc.askTimeout is not set"),
        "{text}"
    );
    // The configured value passed on explicitly is still the key's doing.
    let error = remote
        .ask_timeout(&custom(999), Duration::from_millis(300))
        .unwrap_err();
    assert!(
        error.to_string().contains("set by network.timeout"),
        "{error}"
    );
    // Any other value is the caller's.
    let error = remote
        .ask_timeout(&custom(999), Duration::from_millis(200))
        .unwrap_err();
    assert!(
        matches!(
            error,
            RpcError::AskTimeout {
                set_by: TimeoutSource::Caller,
                ..
            }
        ),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("200ms") && text.contains("the timeout was given by the caller"),
        "{text}"
    );
    assert!(!text.contains("rpc.askTimeout"), "{text}");
}

#[test]
fn a_reply_can_come_later_from_another_thread() {
    struct Deferred;
    impl Endpoint for Deferred {
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
            let handle = message.reply_handle().expect("an ask");
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                handle.reply(&Message::Ack { ok: true }).unwrap();
            });
        }
    }
    let server = env(&[]);
    server.handle().register("deferred", Deferred).unwrap();
    let client = env(&[]);
    let reply = client
        .handle()
        .endpoint_ref(server.address(), "deferred")
        .ask(&Message::ReviveOffers)
        .unwrap();
    assert!(matches!(reply.message(), ArchivedMessage::Ack { ok: true }));
}

#[test]
fn two_hundred_concurrent_connections_are_served() {
    let (server, probe) = server_with_probe(&[]);
    let address = server.address();
    let clients: Vec<_> = (0..200u32)
        .map(|i| {
            std::thread::spawn(move || {
                let client = env(&[]);
                let remote = client.handle().endpoint_ref(address, "probe");
                let reply = remote.ask(&custom(i)).unwrap();
                assert_eq!(tag_of(&reply), i);
                client
            })
        })
        .collect();
    let clients: Vec<RpcEnv> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    assert_eq!(server.handle().stats().accepted, 200);
    let connected = probe
        .seen()
        .iter()
        .filter(|s| matches!(s, Seen::Connected(_)))
        .count();
    assert_eq!(connected, 200);
    drop(clients);
    probe.wait_for("200 disconnects", |seen| {
        seen.iter()
            .filter(|s| matches!(s, Seen::Disconnected(_)))
            .count()
            == 200
    });
}

/// Sends half a frame from a raw socket, then closes it: gracefully (FIN), or, with
/// `reset`, as a killed process's socket with SO_LINGER 0 goes (RST).
fn peer_killed_mid_frame(reset: bool) {
    let (server, probe) = server_with_probe(&[]);
    let mut raw = TcpStream::connect(server.address()).unwrap();
    let local = raw.local_addr().unwrap();
    let bytes = one_way(1);
    raw.write_all(&bytes[..bytes.len() / 2]).unwrap();
    probe.wait_for("the raw peer to connect", |seen| {
        seen.contains(&Seen::Connected(local))
    });
    if reset {
        socket2::SockRef::from(&raw)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    }
    drop(raw);
    probe.wait_for("the raw peer to go", |seen| {
        seen.contains(&Seen::Disconnected(local))
    });
    assert!(
        !probe.seen().contains(&Seen::Message(1)),
        "half a frame was delivered"
    );

    let client = env(&[]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(2)).unwrap()), 2);
}

#[test]
fn a_peer_killed_mid_frame_is_dropped_and_others_are_served() {
    peer_killed_mid_frame(false);
}

#[test]
fn a_peer_reset_mid_frame_is_dropped_and_others_are_served() {
    peer_killed_mid_frame(true);
}

#[test]
fn asks_fail_at_once_when_their_peer_dies() {
    // A raw server that reads an ask and then closes without answering.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut buf = [0u8; HEADER_LEN];
        socket.read_exact(&mut buf).unwrap();
    });
    let client = env(&["rpc.askTimeout=60s"]);
    let remote = client.handle().endpoint_ref(address, "anyone");
    let started = Instant::now();
    let error = remote.ask(&custom(1)).unwrap_err();
    assert!(
        // The raw server closes with the ask's payload unread: a reset, or an end of
        // stream; either way the reason is there.
        matches!(&error, RpcError::Disconnected { peer, reason } if *peer == address && !reason.is_empty()),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed at once, not at the timeout"
    );
    server.join().unwrap();
}

/// Waits (at most 10 s) for the server to close `raw`: an end of stream, or a reset
/// (the server closed with bytes of ours unread), after at most one frame, which must be
/// a `Refused`; returns its reason, or `None` if the server said nothing. Other bytes from
/// the server, a timeout or any other error fail.
fn assert_closed_by_server(raw: &mut TcpStream) -> Option<String> {
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut decoder = flint_wire::FrameDecoder::new(1 << 20);
    let mut buf = [0u8; 4096];
    loop {
        match raw.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => decoder.feed(&buf[..n]).unwrap(),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                break
            }
            Err(e) => panic!("the server did not close the connection: {e}"),
        }
    }
    let frame = decoder.next_frame().expect("a whole frame or none")?;
    assert!(
        decoder.next_frame().unwrap().is_none(),
        "more than one frame"
    );
    let envelope = frame.envelope().unwrap();
    let ArchivedMessage::Refused { reason } = &envelope.message else {
        panic!("the server sent {} instead of closing", frame.kind());
    };
    Some(reason.as_str().to_owned())
}

/// [`assert_closed_by_server`], which must have been told why, in words containing
/// `words`.
fn assert_refused_by_server(raw: &mut TcpStream, words: &str) {
    let reason = assert_closed_by_server(raw).expect("the server said why it closed");
    assert!(reason.contains(words), "{reason}");
}

#[test]
fn oversized_and_garbage_peers_are_cut_off_while_others_are_served() {
    let (server, probe) = server_with_probe(&["rpc.message.maxSize=1"]);
    let client = env(&[]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
    // A header announcing 2 MiB against a 1 MiB limit: refused from the header alone.
    // A valid frame right behind it must not be delivered either.
    let mut bytes = one_way(7);
    bytes[12..16].copy_from_slice(&(2u32 << 20).to_le_bytes());
    bytes.truncate(HEADER_LEN);
    bytes.extend_from_slice(&one_way(8));
    let mut raw = TcpStream::connect(server.address()).unwrap();
    // The server may close before all of it is written: that is what is tested.
    let _ = raw.write_all(&bytes);
    assert_refused_by_server(&mut raw, "exceeds rpc.message.maxSize");

    // Garbage that is not flint at all, then a valid frame.
    let mut bytes = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: flint\r\n\r\n"[..]);
    bytes.extend_from_slice(&one_way(9));
    let mut raw = TcpStream::connect(server.address()).unwrap();
    let _ = raw.write_all(&bytes);
    assert_closed_by_server(&mut raw);

    // The env went on serving its other peer.
    assert_eq!(tag_of(&remote.ask(&custom(2)).unwrap()), 2);
    let seen = probe.seen();
    assert!(
        [7, 8, 9]
            .iter()
            .all(|&tag| !seen.contains(&Seen::Message(tag))),
        "{seen:?}"
    );
}

#[test]
fn a_peer_that_never_authenticates_is_cut_off_at_the_handshake_timeout() {
    let secret = [
        "authenticate=true",
        "authenticate.secret=correct horse",
        "authenticate.timeout=300ms",
    ];
    let (server, probe) = server_with_probe(&secret);
    let friend = env(&secret);
    let remote = friend.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);

    // Connects and says nothing.
    let started = Instant::now();
    let mut silent = TcpStream::connect(server.address()).unwrap();
    assert_refused_by_server(&mut silent, "the timeout is set by authenticate.timeout");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );

    // An authenticated connection is not cut off once the timeout has passed.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(tag_of(&remote.ask(&custom(2)).unwrap()), 2);
    assert_eq!(friend.handle().stats().connected, 1, "no reconnect");
    let connected = probe
        .seen()
        .iter()
        .filter(|s| matches!(s, Seen::Connected(_)))
        .count();
    assert_eq!(connected, 1, "the silent peer never counted as connected");
    assert_eq!(server.handle().stats().accepted, 2);
}

#[test]
fn a_peer_that_stops_in_the_middle_of_a_frame_is_cut_off_at_the_network_timeout() {
    let timeout = Duration::from_secs(2);
    let (server, probe) = server_with_probe(&[
        "network.timeout=2s",
        "executor.heartbeatInterval=100ms",
        // Silent peers kept: the idle timeout is the next test's.
        "rpc.io.idleTimeout=0",
    ]);
    let client = env(&[]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);

    // A peer that connects and sends nothing holds no part of a frame: it stays, for
    // longer than the timeout.
    let mut idle = TcpStream::connect(server.address()).unwrap();
    let idle_address = idle.local_addr().unwrap();
    // Half a header; then, well within the timeout, all but the last byte of the frame:
    // the peer is still sending, so its time starts again. (A frame of 1 MiB, so that
    // the frame's own clock, network.timeout from its first bytes and a second for the
    // MiB in, is not what cuts it off.)
    let bytes = frame(
        &Route::OneWay {
            endpoint: "probe".into(),
        },
        &Message::Custom {
            tag: 7,
            body: Bytes::from(vec![7u8; 1 << 20]),
        },
    );
    let mut stalled = TcpStream::connect(server.address()).unwrap();
    stalled.write_all(&bytes[..HEADER_LEN / 2]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let resumed = Instant::now();
    stalled
        .write_all(&bytes[HEADER_LEN / 2..bytes.len() - 1])
        .unwrap();
    assert_refused_by_server(&mut stalled, "the timeout is set by network.timeout");
    assert!(resumed.elapsed() >= timeout, "{:?}", resumed.elapsed());
    assert!(!probe.seen().contains(&Seen::Message(7)));

    idle.write_all(&one_way(8)).unwrap();
    probe.wait_for("the idle peer's frame", |seen| {
        seen.contains(&Seen::Message(8))
    });
    assert!(!probe.seen().contains(&Seen::Disconnected(idle_address)));
    // The client, whose frames were whole, was served throughout.
    assert_eq!(tag_of(&remote.ask(&custom(2)).unwrap()), 2);
    assert_eq!(client.handle().stats().connected, 1, "no reconnect");
}

#[test]
fn a_peer_that_sends_nothing_is_cut_off_at_the_idle_timeout_and_frees_its_place() {
    let timeout = Duration::from_secs(2);
    let (server, probe) = server_with_probe(&[
        "rpc.io.idleTimeout=2s",
        "executor.heartbeatInterval=100ms",
        "rpc.askTimeout=1s",
        "rpc.io.maxConnections=1",
    ]);
    let address = server.address();

    // A peer that connects and says nothing takes the only place: an environment's
    // ask is refused meanwhile.
    let connected = Instant::now();
    let mut silent = TcpStream::connect(address).unwrap();
    let silent_address = silent.local_addr().unwrap();
    probe.wait_for("the silent connection", |seen| {
        seen.contains(&Seen::Connected(silent_address))
    });
    let client = env(&["rpc.askTimeout=5s"]);
    let remote = client.handle().endpoint_ref(address, "probe");
    let error = remote.ask(&custom(1)).unwrap_err().to_string();
    assert!(
        error.contains(
            "saying: 1 connections from peers are open, as many as rpc.io.maxConnections allows"
        ),
        "{error}"
    );
    assert_eq!(server.handle().stats().refused, 1);

    // Until the timeout passes; then the place is free again.
    assert_refused_by_server(&mut silent, "the timeout is set by rpc.io.idleTimeout");
    assert!(connected.elapsed() >= timeout, "{:?}", connected.elapsed());
    probe.wait_for("the silent peer to go", |seen| {
        seen.contains(&Seen::Disconnected(silent_address))
    });
    assert_eq!(tag_of(&remote.ask(&custom(2)).unwrap()), 2);

    // A peer that keeps talking is kept past the timeout, whatever it waits for between
    // its messages.
    let talking = Instant::now();
    for tag in 3..9 {
        std::thread::sleep(timeout / 4);
        assert_eq!(tag_of(&remote.ask(&custom(tag)).unwrap()), tag);
    }
    assert!(talking.elapsed() >= timeout, "{:?}", talking.elapsed());
    let stats = client.handle().stats();
    assert_eq!(stats.connected, 2, "no reconnect while talking: {stats:?}");

    // Once it has been quiet for the timeout, its connection is closed too, and its next
    // ask opens a new one.
    let quiet = Instant::now();
    probe.wait_for("the quiet connection to be closed", |seen| {
        seen.iter()
            .filter(|s| matches!(s, Seen::Disconnected(_)))
            .count()
            == 2
    });
    assert!(quiet.elapsed() >= timeout / 2, "{:?}", quiet.elapsed());
    // An ask that leaves before the client has read the server's close fails with it;
    // the next goes out on a new connection.
    let reply = (0..50)
        .find_map(|_| {
            let reply = remote.ask(&custom(9)).ok();
            if reply.is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            reply
        })
        .expect("an ask gets through on a new connection");
    assert_eq!(tag_of(&reply), 9);
    assert_eq!(client.handle().stats().connected, 3);
    assert_eq!(server.handle().stats().accepted, 3);
}

#[test]
fn a_peer_that_stops_taking_a_reply_is_cut_off_at_the_idle_timeout_but_a_slow_reader_is_not() {
    // Long enough that a busy machine does not keep the slow reader off the CPU for it.
    let timeout = Duration::from_secs(2);
    let (server, probe) = server_with_probe(&[
        "rpc.io.idleTimeout=2s",
        "executor.heartbeatInterval=100ms",
        "rpc.askTimeout=1s",
    ]);
    // An ask whose echoed reply (32 MiB) is far more than the sockets' buffers hold.
    let ask = |request_id| {
        frame(
            &Route::Ask {
                request_id,
                endpoint: "probe".into(),
            },
            &Message::Custom {
                tag: 5,
                body: Bytes::from(vec![5u8; 32 << 20]),
            },
        )
    };
    let mut stalled = TcpStream::connect(server.address()).unwrap();
    let stalled_address = stalled.local_addr().unwrap();
    stalled.write_all(&ask(1)).unwrap();
    let mut slow = TcpStream::connect(server.address()).unwrap();
    let slow_address = slow.local_addr().unwrap();
    slow.write_all(&ask(2)).unwrap();

    // The slow reader takes 256 KiB every 100 ms, for three timeouts: its reply keeps
    // moving, so it is kept though it sends nothing.
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = vec![0u8; 256 << 10];
    let started = Instant::now();
    let mut taken = 0;
    while started.elapsed() < timeout * 3 {
        std::thread::sleep(Duration::from_millis(100));
        let n = slow.read(&mut buf).unwrap();
        assert!(n > 0, "the slow reader's connection was closed");
        taken += n;
    }
    assert!(taken < 32 << 20, "the reply was still on its way");

    // The one that took nothing was closed before its reply was all sent.
    probe.wait_for("the stalled reader to be cut off", |seen| {
        seen.contains(&Seen::Disconnected(stalled_address))
    });
    assert!(!probe.seen().contains(&Seen::Disconnected(slow_address)));
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut received = 0usize;
    loop {
        match stalled.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => received += n,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(received < 32 << 20, "{received} bytes of the reply arrived");
}

#[test]
fn connections_beyond_rpc_io_max_connections_are_closed_at_once() {
    let (server, probe) = server_with_probe(&["rpc.io.maxConnections=2"]);
    let address = server.address();
    let client = env(&[]);
    let remote = client.handle().endpoint_ref(address, "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
    let mut second = TcpStream::connect(address).unwrap();
    let second_address = second.local_addr().unwrap();
    probe.wait_for("the second connection", |seen| {
        seen.contains(&Seen::Connected(second_address))
    });

    // The kernel completes the third connect; the environment closes it as it accepts it.
    let mut third = TcpStream::connect(address).unwrap();
    let _ = third.write_all(&one_way(5));
    assert_refused_by_server(&mut third, "as many as rpc.io.maxConnections allows");
    let stats = server.handle().stats();
    assert_eq!((stats.accepted, stats.refused), (2, 1));

    // Those held are served.
    second.write_all(&one_way(6)).unwrap();
    probe.wait_for("the second connection's frame", |seen| {
        seen.contains(&Seen::Message(6))
    });
    assert_eq!(tag_of(&remote.ask(&custom(2)).unwrap()), 2);

    // Once one of them is gone, a new connection is held again.
    drop(second);
    probe.wait_for("the second connection to go", |seen| {
        seen.contains(&Seen::Disconnected(second_address))
    });
    let mut fourth = TcpStream::connect(address).unwrap();
    fourth.write_all(&one_way(7)).unwrap();
    probe.wait_for("the fourth connection's frame", |seen| {
        seen.contains(&Seen::Message(7))
    });
    assert!(!probe.seen().contains(&Seen::Message(5)));
    let stats = server.handle().stats();
    assert_eq!((stats.accepted, stats.refused), (3, 1));
}

#[test]
fn before_authenticating_a_peer_may_send_only_handshake_sized_frames() {
    let secret = [
        "authenticate=true",
        "authenticate.secret=correct horse",
        "authenticate.timeout=60s",
        "rpc.askTimeout=10s",
    ];
    let (server, probe) = server_with_probe(&secret);

    // A stranger announces a 64 KiB challenge: far below rpc.message.maxSize, but far above
    // any handshake step. It is cut off from the header alone, not at authenticate.timeout,
    // and nothing of the frame is waited for.
    let mut header = frame(
        &Route::Reply { request_id: 0 },
        &Message::AuthChallenge { nonce: [1; 32] },
    );
    header.truncate(HEADER_LEN);
    header[12..16].copy_from_slice(&(64u32 << 10).to_le_bytes());
    let mut raw = TcpStream::connect(server.address()).unwrap();
    raw.write_all(&header).unwrap();
    assert_refused_by_server(
        &mut raw,
        "exceeds the limit on frames before authentication",
    );

    // Once authenticated, frames may be as large as rpc.message.maxSize allows, both ways.
    let friend = env(&secret);
    let remote = friend.handle().endpoint_ref(server.address(), "probe");
    let large = Message::Custom {
        tag: 5,
        body: Bytes::from(vec![5u8; 1 << 20]),
    };
    let reply = remote.ask(&large).unwrap();
    assert_eq!(tag_of(&reply), 5);
    let ArchivedMessage::Custom { body, .. } = reply.message() else {
        unreachable!()
    };
    assert_eq!(body.len(), 1 << 20);
    assert_eq!(
        probe
            .seen()
            .iter()
            .filter(|s| matches!(s, Seen::Connected(_)))
            .count(),
        1
    );
}

#[test]
fn authentication_passes_with_the_secret_and_fails_without() {
    let secret = [
        "authenticate=true",
        "authenticate.secret=correct horse",
        "rpc.askTimeout=5s",
    ];
    let (server, probe) = server_with_probe(&secret);

    let friend = env(&secret);
    let remote = friend.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);

    let stranger = env(&[
        "authenticate=true",
        "authenticate.secret=battery staple",
        "rpc.askTimeout=5s",
    ]);
    let remote = stranger.handle().endpoint_ref(server.address(), "probe");
    let error = remote.ask(&custom(2)).unwrap_err();
    assert!(matches!(error, RpcError::Disconnected { .. }), "{error:?}");
    // The client checks the server's proof first: it learns why.
    let text = error.to_string();
    assert!(
        text.contains("authentication failed") && text.contains("authenticate.secret"),
        "{text}"
    );

    // A peer that does not authenticate is told why it is turned away.
    let plain = env(&["rpc.askTimeout=5s"]);
    let remote = plain.handle().endpoint_ref(server.address(), "probe");
    let error = remote.ask(&custom(3)).unwrap_err();
    assert!(matches!(error, RpcError::Disconnected { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("the peer closed the connection, saying: authentication failed: expected AuthChallenge, got Custom"),
        "{text}"
    );
    // A handshake message after the handshake ends the connection, and says so.
    let error = friend
        .handle()
        .endpoint_ref(server.address(), "probe")
        .ask(&Message::AuthChallenge { nonce: [9; 32] })
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("saying: the peer sent AuthChallenge after its authentication had ended"),
        "{error}"
    );
    // And one that authenticates with a side that does not.
    let (open_server, _) = server_with_probe(&["rpc.askTimeout=5s"]);
    let remote = friend.handle().endpoint_ref(open_server.address(), "probe");
    let text = remote.ask(&custom(4)).unwrap_err().to_string();
    assert!(
        text.contains("saying: the peer sent AuthChallenge, but authenticate is false here"),
        "{text}"
    );

    let seen = probe.seen();
    assert!(seen.contains(&Seen::Message(1)));
    assert!(
        !seen.contains(&Seen::Message(2)) && !seen.contains(&Seen::Message(3)),
        "{seen:?}"
    );
    let connected = seen
        .iter()
        .filter(|s| matches!(s, Seen::Connected(_)))
        .count();
    assert_eq!(
        connected, 1,
        "only the authenticated peer counts as connected"
    );
}

/// Counts the `Custom` messages of each sender (a tag's top 8 bits) and checks that each
/// sender's sequence numbers (its low 24 bits) come in order, from 0; answers an ask with
/// the count of all of them.
#[derive(Clone, Default)]
struct InOrder {
    next: Arc<Mutex<Vec<u32>>>,
    out_of_order: Arc<AtomicUsize>,
}

impl InOrder {
    /// The tag of message `seq` of `sender`.
    fn tag(sender: u32, seq: u32) -> u32 {
        sender << 24 | seq
    }

    /// An environment with an `InOrder` endpoint named "in-order".
    fn serve() -> (RpcEnv, InOrder) {
        let server = env(&[]);
        let in_order = InOrder::default();
        server
            .handle()
            .register("in-order", in_order.clone())
            .unwrap();
        (server, in_order)
    }

    fn out_of_order(&self) -> usize {
        self.out_of_order.load(Ordering::Relaxed)
    }
}

impl Endpoint for InOrder {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        if let ArchivedMessage::Custom { tag, .. } = message.message() {
            let tag = tag.to_native();
            let (sender, seq) = ((tag >> 24) as usize, tag & 0xff_ffff);
            let mut next = self.next.lock().unwrap();
            if next.len() <= sender {
                next.resize(sender + 1, 0);
            }
            if next[sender] != seq {
                self.out_of_order.fetch_add(1, Ordering::Relaxed);
            }
            next[sender] = seq + 1;
        }
        if message.is_ask() {
            let total: u32 = self.next.lock().unwrap().iter().sum();
            message
                .reply(&Message::Custom {
                    tag: total,
                    body: Bytes::new(),
                })
                .unwrap();
        }
    }
}

/// Calls `send` until the outbox has room for its message, calling `on_full` each time
/// it had none; fails the test with `what` after `deadline`. Returns the times it was
/// full.
fn send_when_room(
    deadline: Instant,
    what: impl Fn() -> String,
    mut send: impl FnMut() -> Result<(), RpcError>,
    mut on_full: impl FnMut(),
) -> u64 {
    let mut full = 0;
    loop {
        match send() {
            Ok(()) => return full,
            Err(RpcError::OutboxFull { .. }) => {
                full += 1;
                on_full();
                assert!(Instant::now() < deadline, "stuck at {}", what());
                std::thread::yield_now();
            }
            Err(e) => panic!("send {} failed: {e}", what()),
        }
    }
}

#[test]
fn a_million_one_way_messages_arrive_all_once_in_order() {
    const COUNT: u32 = 1_000_000;
    let (server, in_order) = InOrder::serve();
    let client = env(&["rpc.outbox.maxBytes=4m"]);
    let remote = client.handle().endpoint_ref(server.address(), "in-order");
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut full = 0u64;
    for i in 0..COUNT {
        let message = Message::Custom {
            tag: InOrder::tag(0, i),
            body: Bytes::new(),
        };
        full += send_when_room(
            deadline,
            || format!("message {i}"),
            || remote.send(&message),
            || {},
        );
    }
    // The ask travels behind every message on the same connection.
    let reply = remote.ask(&Message::ReviveOffers).unwrap();
    assert_eq!(tag_of(&reply), COUNT);
    assert_eq!(in_order.out_of_order(), 0);
    eprintln!("the outbox was full {full} times");
}

#[test]
fn a_peer_that_floods_the_loop_does_not_starve_the_others() {
    let (server, probe) = server_with_probe(&["rpc.askTimeout=4s"]);
    // A raw peer writes one-way frames as fast as loopback takes them, for 6 s: far more
    // than the loop can take in, so its socket never runs dry.
    let mut batch = BytesMut::new();
    for _ in 0..4096 {
        batch.extend_from_slice(&frame(
            &Route::OneWay {
                endpoint: "probe".into(),
            },
            &Message::Custom {
                tag: FLOOD,
                body: Bytes::new(),
            },
        ));
    }
    let mut flood = TcpStream::connect(server.address()).unwrap();
    let flooder = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(6);
        let mut written = 0usize;
        while Instant::now() < until {
            match flood.write_all(&batch) {
                Ok(()) => written += batch.len(),
                Err(e) => panic!("the flooding peer was cut off: {e}"),
            }
        }
        written
    });

    // Meanwhile another peer's asks are answered within their 4 s timeout, which a loop
    // that served the flood first (until it ends, 6 s) would miss; a debug build on a
    // busy machine gets room to be slow.
    let client = env(&["rpc.askTimeout=4s"]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    let mut slowest = Duration::ZERO;
    for tag in 1..=20 {
        let started = Instant::now();
        assert_eq!(tag_of(&remote.ask(&custom(tag)).unwrap()), tag);
        slowest = slowest.max(started.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
    let written = flooder.join().unwrap();
    let flooded = probe.flooded.load(Ordering::Relaxed);
    assert!(flooded > 0, "the flood was served too");
    eprintln!("slowest ask {slowest:?}; {written} bytes flooded, {flooded} frames taken");
}

#[test]
fn frames_sent_from_many_threads_at_once_keep_each_thread_s_order() {
    // Senders on other threads write flushed frames to the socket themselves whenever the
    // loop has nothing of the connection in flight, and leave them to the loop otherwise:
    // each thread's frames must still arrive all, once, in its order.
    const SENDERS: u32 = 4;
    const EACH: u32 = 50_000;
    let (server, in_order) = InOrder::serve();
    let client = env(&["rpc.outbox.maxBytes=256k"]);
    let remote = client.handle().endpoint_ref(server.address(), "in-order");
    let deadline = Instant::now() + Duration::from_secs(120);
    let senders: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let remote = remote.clone();
            std::thread::spawn(move || {
                for seq in 0..EACH {
                    let message = Message::Custom {
                        tag: InOrder::tag(sender, seq),
                        body: Bytes::from_static(&[7; 32]),
                    };
                    // Three frames in four are flushed at once, written from this thread
                    // when the loop has nothing in flight; the fourth the loop writes.
                    // Every 100th waits for a flush 10 frames later.
                    let deferred = seq % 4 != 0 || seq % 100 == 0;
                    send_when_room(
                        deadline,
                        || format!("{sender}/{seq}"),
                        || {
                            if deferred {
                                remote.send_deferred(&message)
                            } else {
                                remote.send(&message)
                            }
                        },
                        || remote.flush(),
                    );
                    if seq % 100 == 10 || (seq % 4 != 0 && seq % 100 != 0) {
                        remote.flush();
                    }
                }
                remote.flush();
            })
        })
        .collect();
    for sender in senders {
        sender.join().unwrap();
    }
    let reply = remote.ask(&Message::ReviveOffers).unwrap();
    assert_eq!(tag_of(&reply), SENDERS * EACH, "every frame arrived");
    assert_eq!(in_order.out_of_order(), 0);
}

#[test]
fn a_full_outbox_is_reported_to_the_sender() {
    // A peer that accepts and never reads: the kernel buffers fill, then the outbox.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let holder = std::thread::spawn(move || listener.accept().map(|(socket, _)| socket));
    let client = env(&["rpc.outbox.maxBytes=64k", "rpc.io.sendBufferSize=16k"]);
    let remote = client.handle().endpoint_ref(address, "sink");
    let big = Message::Custom {
        tag: 1,
        body: Bytes::from(vec![0u8; 16 * 1024]),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let error = loop {
        match remote.send(&big) {
            Ok(()) => assert!(Instant::now() < deadline, "the outbox never filled"),
            Err(error) => break error,
        }
    };
    assert!(
        matches!(error, RpcError::OutboxFull { limit: 65536, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("rpc.outbox.maxBytes"));
    let _socket = holder.join().unwrap().unwrap();
}

/// Hands every ask's reply handle, and a reference back over its connection, to the test.
struct Holder(Mutex<mpsc::Sender<(flint_rpc::ReplyHandle, flint_rpc::EndpointRef)>>);

impl Endpoint for Holder {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        if let Some(reply) = message.reply_handle() {
            let back = message.sender_ref("sink");
            self.0.lock().unwrap().send((reply, back)).unwrap();
        }
    }
}

#[test]
fn a_reply_refused_for_a_full_outbox_can_be_tried_again() {
    let server = env(&["rpc.outbox.maxBytes=64k", "rpc.io.sendBufferSize=16k"]);
    let (handles, taken) = mpsc::channel();
    server
        .handle()
        .register("holder", Holder(Mutex::new(handles)))
        .unwrap();
    // An asker that reads nothing until told to: the kernel buffers fill, then the outbox.
    // Its receive buffer is small, so that the kernel cannot take back much of what the
    // outbox holds before the reply is tried.
    let mut raw = TcpStream::connect(server.address()).unwrap();
    socket2::SockRef::from(&raw)
        .set_recv_buffer_size(4096)
        .unwrap();
    let ask = frame(
        &Route::Ask {
            request_id: 77,
            endpoint: "holder".into(),
        },
        &custom(1),
    );
    raw.write_all(&ask).unwrap();
    let (reply, back) = taken.recv_timeout(Duration::from_secs(10)).unwrap();
    let big = Message::Custom {
        tag: 2,
        body: Bytes::from(vec![0u8; 16 * 1024]),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    // Frames until one does not fit, then one larger than the whole bound (accepted
    // while under it): the outbox is now over its bound, where a reply waits too.
    while back.send(&big).is_ok() {
        assert!(Instant::now() < deadline, "the outbox never filled");
    }
    let oversized = Message::Custom {
        tag: 2,
        body: Bytes::from(vec![0u8; 80 * 1024]),
    };
    back.send(&oversized).unwrap();
    let (reply, error) = reply.try_reply(&custom(3)).unwrap_err();
    assert!(matches!(error, RpcError::OutboxFull { .. }), "{error:?}");

    // The asker reads again; the same handle answers once there is room.
    let reader = std::thread::spawn(move || {
        raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut decoder = flint_wire::FrameDecoder::new(1 << 20);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = raw.read(&mut buf).expect("the reply never came");
            assert!(n > 0, "the server closed the connection");
            decoder.feed(&buf[..n]).unwrap();
            while let Some(frame) = decoder.next_frame().unwrap() {
                if let flint_wire::ArchivedRoute::Reply { request_id } =
                    &frame.envelope().unwrap().route
                {
                    return request_id.to_native();
                }
            }
        }
    });
    let mut reply = reply;
    loop {
        match reply.try_reply(&custom(3)) {
            Ok(()) => break,
            Err((again, RpcError::OutboxFull { .. })) => {
                assert!(Instant::now() < deadline, "the outbox never drained");
                reply = again;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err((_, e)) => panic!("{e}"),
        }
    }
    assert_eq!(
        join_within(reader, Duration::from_secs(30), "the reply"),
        77
    );
}

#[test]
fn the_next_send_reconnects_after_the_connection_is_lost() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let client = env(&[]);
    let remote = client.handle().endpoint_ref(address, "anyone");
    remote.send(&custom(1)).unwrap();
    let (first, _) = listener.accept().unwrap();
    drop(first);
    // Sends fail or are lost while the loss is noticed; then a new connection comes.
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = remote.send(&custom(2));
        if listener.accept().is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "no second connection");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(client.handle().stats().connected, 2);
}

#[test]
fn timers_fire_on_the_loop() {
    struct Ticker(Probe);
    impl Endpoint for Ticker {
        fn on_start(&mut self, ctx: &mut EndpointContext<'_>) {
            ctx.schedule_every(Duration::from_millis(1), Duration::from_millis(5));
        }
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, _message: Incoming<'_>) {}
        fn on_timer(&mut self, ctx: &mut EndpointContext<'_>, timer: TimerId) {
            self.0.record(Seen::Timer);
            if self.0.seen().len() == 3 {
                ctx.cancel_timer(timer);
            }
        }
    }
    let server = env(&[]);
    let probe = Probe::default();
    server
        .handle()
        .register("ticker", Ticker(probe.clone()))
        .unwrap();
    probe.wait_for("three ticks", |seen| seen.len() == 3);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        probe.seen(),
        vec![Seen::Timer; 3],
        "the cancelled timer stopped"
    );
}

#[test]
fn stopping_flushes_what_was_sent_and_stops_every_endpoint() {
    let (server, probe) = server_with_probe(&[]);
    let client = env(&[]);
    let client_probe = Probe::default();
    client
        .handle()
        .register("local-probe", client_probe.clone())
        .unwrap();
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    for tag in 0..1000 {
        remote.send(&custom(tag)).unwrap();
    }
    client.stop();
    assert!(client_probe.seen().contains(&Seen::Stopped));
    assert!(matches!(remote.send(&custom(1)), Err(RpcError::Stopped)));
    probe.wait_for("all 1000 messages", |seen| {
        seen.iter()
            .filter(|s| matches!(s, Seen::Message(_)))
            .count()
            == 1000
    });
    server.stop();
    assert_eq!(probe.seen().last(), Some(&Seen::Stopped));
}

#[test]
fn an_endpoint_that_panics_is_stopped_and_the_loop_goes_on() {
    struct Fragile;
    impl Endpoint for Fragile {
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, _message: Incoming<'_>) {
            panic!("fragile endpoint panicked on purpose");
        }
    }
    let (server, _probe) = server_with_probe(&[]);
    server.handle().register("fragile", Fragile).unwrap();
    let client = env(&[]);
    let error = client
        .handle()
        .endpoint_ref(server.address(), "fragile")
        .ask(&custom(1))
        .unwrap_err();
    assert!(matches!(error, RpcError::Remote { .. }), "{error:?}");
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(2)).unwrap()), 2);
}

#[test]
fn registering_a_name_twice_is_refused() {
    let (server, _probe) = server_with_probe(&[]);
    let error = server
        .handle()
        .register("probe", Probe::default())
        .unwrap_err();
    assert!(matches!(error, RpcError::EndpointExists(ref name) if name == "probe"));
}

#[test]
fn an_ask_to_a_closed_port_fails_with_the_connect_error() {
    // Bind then drop a listener: nothing listens on that port any more.
    let address = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let client = env(&["rpc.askTimeout=60s"]);
    let started = Instant::now();
    let error = client
        .handle()
        .endpoint_ref(address, "anyone")
        .ask(&custom(1))
        .unwrap_err();
    assert!(
        matches!(error, RpcError::Connect { peer, .. } if peer == address),
        "{error:?}"
    );
    assert!(error.to_string().contains("cannot connect to"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Counts messages, and at each batch end records how many it had and tells `echo`.
struct Batcher {
    received: u32,
    batches: Arc<Mutex<Vec<u32>>>,
    echo: Option<flint_rpc::EndpointRef>,
}

impl Endpoint for Batcher {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, _message: Incoming<'_>) {
        self.received += 1;
    }

    fn on_batch_end(&mut self, _ctx: &mut EndpointContext<'_>) {
        self.batches.lock().unwrap().push(self.received);
        if let Some(echo) = &self.echo {
            echo.send(&custom(self.received)).unwrap();
        }
    }
}

#[test]
fn batch_ends_follow_every_delivered_batch_and_what_they_send_leaves() {
    let (client, probe) = server_with_probe(&[]);
    let server = env(&[]);
    let batches = Arc::new(Mutex::new(Vec::new()));
    let echo = server.handle().endpoint_ref(client.address(), "probe");
    server
        .handle()
        .register(
            "batcher",
            Batcher {
                received: 0,
                batches: batches.clone(),
                echo: Some(echo),
            },
        )
        .unwrap();
    let batcher = client.handle().endpoint_ref(server.address(), "batcher");
    const MESSAGES: u32 = 20_000;
    for tag in 0..MESSAGES {
        loop {
            match batcher.send(&custom(tag)) {
                Ok(()) => break,
                Err(RpcError::OutboxFull { .. }) => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
    }
    // The last batch end has seen every message, and its echo came back.
    probe.wait_for("the last batch's echo", |seen| {
        seen.contains(&Seen::Message(MESSAGES))
    });
    let batches = batches.lock().unwrap().clone();
    assert_eq!(batches.last(), Some(&MESSAGES));
    assert!(
        batches.windows(2).all(|w| w[0] < w[1]),
        "a batch end follows new messages only"
    );
    assert!(
        batches.len() < MESSAGES as usize,
        "{} batch ends for {MESSAGES} messages: not once per message",
        batches.len()
    );
}

#[test]
fn deferred_sends_leave_together_at_the_flush_in_order() {
    let (server, probe) = server_with_probe(&[]);
    let client = env(&[]);
    let target = client.handle().endpoint_ref(server.address(), "probe");
    // Connected first, so that only the deferral can hold the frames back; and the turn
    // that delivered the reply over (it ends by writing what the connection has queued).
    target.ask(&custom(0)).unwrap();
    wait_for_the_turn_to_end(&client);
    for tag in 1..=1_000 {
        target.send_deferred(&custom(tag)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let before = probe
        .seen()
        .iter()
        .filter(|s| matches!(s, Seen::Message(_)))
        .count();
    assert_eq!(before, 1, "nothing deferred left before the flush");
    target.clone().flush();
    probe.wait_for("every deferred message", |seen| {
        seen.contains(&Seen::Message(1_000))
    });
    let tags: Vec<u32> = probe
        .seen()
        .iter()
        .filter_map(|s| match s {
            Seen::Message(tag) => Some(*tag),
            _ => None,
        })
        .collect();
    assert_eq!(tags, (0..=1_000).collect::<Vec<_>>());
}

#[test]
fn durations_past_the_end_of_the_clock_do_not_kill_the_loop() {
    // The configuration refuses such durations, but the API takes them: settings, ask
    // timeouts and timer delays. Each becomes a deadline that never comes.
    struct Sleeper;
    impl Endpoint for Sleeper {
        fn on_start(&mut self, ctx: &mut EndpointContext<'_>) {
            ctx.schedule_once(Duration::MAX);
            ctx.schedule_every(Duration::from_millis(1), Duration::MAX);
        }
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
            message.reply(&Message::Ack { ok: true }).unwrap();
        }
    }
    let (server, _probe) = server_with_probe(&[]);
    let mut settings = Settings::from_conf(&conf(&["rpc.askTimeout=10s"])).unwrap();
    settings.connect_timeout = Duration::MAX;
    let client = RpcEnv::with_settings(settings).unwrap();
    client.handle().register("sleeper", Sleeper).unwrap();
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
    assert_eq!(
        tag_of(&remote.ask_timeout(&custom(2), Duration::MAX).unwrap()),
        2
    );
    let (tx, rx) = mpsc::channel();
    remote
        .ask_then(&custom(3), Duration::MAX, move |reply| {
            let _ = tx.send(reply.map(|reply| tag_of(&reply)));
        })
        .unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap(),
        3
    );
    // The endpoint with the far timers was not stopped by a panic.
    let sleeper = client.handle().local_ref("sleeper");
    let reply = sleeper.ask(&Message::ReviveOffers).unwrap();
    assert!(matches!(reply.message(), ArchivedMessage::Ack { ok: true }));
}

#[test]
fn a_panicking_ask_callback_is_isolated_and_later_asks_still_end() {
    let (server, probe) = server_with_probe(&[]);
    let client = env(&["rpc.askTimeout=5s"]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    remote
        .ask_then(&custom(1), Duration::from_secs(5), |_| {
            panic!("an ask callback panicked on purpose")
        })
        .unwrap();
    probe.wait_for("the first ask", |seen| seen.contains(&Seen::Message(1)));
    // The loop survived the callback: replies and timeouts still end asks.
    assert_eq!(tag_of(&remote.ask(&custom(2)).unwrap()), 2);
    let (tx, rx) = mpsc::channel();
    remote
        .ask_then(&custom(999), Duration::from_millis(200), move |reply| {
            let _ = tx.send(reply.map(|reply| tag_of(&reply)));
        })
        .unwrap();
    let ended = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(ended, Err(RpcError::AskTimeout { timeout, .. }) if timeout == Duration::from_millis(200)),
        "{ended:?}"
    );
    let local = client.handle().local_ref("nobody");
    assert!(matches!(
        local.ask(&custom(3)),
        Err(RpcError::Remote { .. })
    ));
}

/// Returns once the loop's current turn has ended: registering an endpoint is done by a
/// command, which a turn runs after it has handled (and flushed) its connections.
fn wait_for_the_turn_to_end(env: &RpcEnv) {
    static BARRIERS: AtomicUsize = AtomicUsize::new(0);
    let name = format!("barrier-{}", BARRIERS.fetch_add(1, Ordering::Relaxed));
    env.handle().register(&name, Probe::default()).unwrap();
}

/// Joins `thread`, failing the test if it does not end within `bound`.
fn join_within<T>(thread: std::thread::JoinHandle<T>, bound: Duration, what: &str) -> T {
    let deadline = Instant::now() + bound;
    while !thread.is_finished() {
        assert!(
            Instant::now() < deadline,
            "{what} did not end within {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    thread.join().unwrap()
}

#[test]
fn an_ask_behind_an_unflushed_deferred_send_still_times_out() {
    let (server, probe) = server_with_probe(&[]);
    let client = env(&["rpc.askTimeout=500ms"]);
    let target = client.handle().endpoint_ref(server.address(), "probe");
    // Connected, and the loop idle with nothing to wake it for. The turn that delivered
    // the reply ends by writing what the connection has queued: it must be over before
    // the deferred frame below is queued, or it would take that frame along.
    target.ask(&custom(0)).unwrap();
    wait_for_the_turn_to_end(&client);
    // Another reference defers a send on the same connection and does not flush: the
    // loop is not told, and the asks below are queued behind that frame.
    let deferring = client.handle().endpoint_ref(server.address(), "probe");
    deferring.send_deferred(&custom(1)).unwrap();

    let (tx, rx) = mpsc::channel();
    target
        .ask_then(&custom(2), Duration::from_millis(300), move |reply| {
            let _ = tx.send(reply.map(|reply| tag_of(&reply)));
        })
        .unwrap();
    let asker = std::thread::spawn(move || {
        let started = Instant::now();
        (target.ask(&custom(3)), started.elapsed())
    });
    let (result, waited) = join_within(asker, Duration::from_secs(10), "the blocking ask");
    assert!(
        matches!(result, Err(RpcError::AskTimeout { timeout, .. }) if timeout == Duration::from_millis(500)),
        "{result:?}"
    );
    assert!(waited >= Duration::from_millis(500), "{waited:?}");
    // Only the loop can end a callback ask: it was woken to arm the timeout.
    let ended = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(ended, Err(RpcError::AskTimeout { .. })),
        "{ended:?}"
    );
    assert!(!probe.seen().contains(&Seen::Message(1)));
    // The deferred frame, and the asks behind it, leave at the flush.
    deferring.flush();
    probe.wait_for("the deferred frame and the asks", |seen| {
        [1, 2, 3]
            .iter()
            .all(|&tag| seen.contains(&Seen::Message(tag)))
    });
}

#[test]
fn a_blocking_ask_returns_at_its_timeout_even_if_the_loop_is_stuck() {
    /// Holds the loop thread until released (at most 10 s).
    struct Stuck(mpsc::Receiver<()>);
    impl Endpoint for Stuck {
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, _message: Incoming<'_>) {
            let _ = self.0.recv_timeout(Duration::from_secs(10));
        }
    }
    let (server, _probe) = server_with_probe(&[]);
    let client = env(&["rpc.askTimeout=300ms"]);
    let (release, held) = mpsc::channel();
    client.handle().register("stuck", Stuck(held)).unwrap();
    // Handed to the loop before the ask below, so the loop is stuck before it sees it.
    client.handle().local_ref("stuck").send(&custom(1)).unwrap();
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    let started = Instant::now();
    let error = remote.ask(&custom(2)).unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(error, RpcError::AskTimeout { timeout, .. } if timeout == Duration::from_millis(300)),
        "{error:?}"
    );
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    release.send(()).unwrap();
    // Free again, the loop serves; the late reply to the first ask finds nobody.
    assert_eq!(tag_of(&remote.ask(&custom(3)).unwrap()), 3);
}

#[test]
fn what_on_stop_sends_leaves_before_the_sockets_close() {
    /// Says goodbye to every peer it knows when it stops, and records how that went.
    struct Farewell {
        peers: Vec<flint_rpc::EndpointRef>,
        sent: Arc<Mutex<Vec<String>>>,
    }
    impl Endpoint for Farewell {
        fn receive(&mut self, _ctx: &mut EndpointContext<'_>, _message: Incoming<'_>) {}
        fn on_stop(&mut self) {
            for peer in &self.peers {
                let outcome = peer.send(&custom(77));
                self.sent.lock().unwrap().push(format!("{outcome:?}"));
            }
        }
    }
    let (known, known_probe) = server_with_probe(&[]);
    let (unknown, unknown_probe) = server_with_probe(&[]);
    let client = env(&[]);
    let to_known = client.handle().endpoint_ref(known.address(), "probe");
    assert_eq!(tag_of(&to_known.ask(&custom(1)).unwrap()), 1);
    // Never used before the stop: on_stop's send has to connect first.
    let to_unknown = client.handle().endpoint_ref(unknown.address(), "probe");
    let sent = Arc::new(Mutex::new(Vec::new()));
    client
        .handle()
        .register(
            "farewell",
            Farewell {
                peers: vec![to_known.clone(), to_unknown],
                sent: sent.clone(),
            },
        )
        .unwrap();
    client.stop();
    assert_eq!(*sent.lock().unwrap(), ["Ok(())", "Ok(())"]);
    known_probe.wait_for("the farewell", |seen| seen.contains(&Seen::Message(77)));
    unknown_probe.wait_for("the farewell over a new connection", |seen| {
        seen.contains(&Seen::Message(77))
    });
    // Once stopped, sends are refused.
    assert!(matches!(to_known.send(&custom(2)), Err(RpcError::Stopped)));
}

#[test]
fn stop_returns_within_the_flush_bound_when_a_peer_never_reads() {
    // A peer that accepts and never reads: the kernel buffers fill, then the outbox.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let holder = std::thread::spawn(move || listener.accept().map(|(socket, _)| socket));
    let client = env(&[
        "rpc.outbox.maxBytes=256k",
        "rpc.io.sendBufferSize=16k",
        "rpc.shutdown.flushTimeout=500ms",
    ]);
    assert_eq!(
        client.handle().settings().shutdown_flush,
        Duration::from_millis(500)
    );
    let remote = client.handle().endpoint_ref(address, "sink");
    let big = Message::Custom {
        tag: 1,
        body: Bytes::from(vec![0u8; 16 * 1024]),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match remote.send(&big) {
            Ok(()) => assert!(Instant::now() < deadline, "the outbox never filled"),
            Err(RpcError::OutboxFull { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    let _socket = holder.join().unwrap().unwrap();
    let started = Instant::now();
    client.stop();
    let waited = started.elapsed();
    // It tried for the whole bound, and gave up then.
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
}

#[test]
fn a_connect_that_gets_no_answer_fails_at_the_connect_timeout() {
    // A listener with a backlog of one that never accepts: once its accept queue is
    // full, the kernel drops further SYNs, so the next connect gets no answer at all.
    let listener = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .unwrap();
    listener
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    listener.listen(0).unwrap();
    let address = listener.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    let full =
        (0..16).any(
            |_| match TcpStream::connect_timeout(&address, Duration::from_millis(200)) {
                Ok(stream) => {
                    fillers.push(stream);
                    false
                }
                Err(e) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
                    true
                }
            },
        );
    assert!(full, "the accept queue never filled");

    let client = env(&["rpc.connect.timeout=300ms", "rpc.askTimeout=30s"]);
    let started = Instant::now();
    let error = client
        .handle()
        .endpoint_ref(address, "anyone")
        .ask(&custom(1))
        .unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(error, RpcError::ConnectTimeout { peer, timeout } if peer == address && timeout == Duration::from_millis(300)),
        "{error:?}"
    );
    assert!(error.to_string().contains("rpc.connect.timeout"), "{error}");
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    drop(fillers);
}

/// Records the thread each message was handled on, and answers asks with their tag.
#[derive(Clone, Default)]
struct ThreadProbe {
    handled: Arc<Mutex<Vec<(u32, std::thread::ThreadId)>>>,
}

impl ThreadProbe {
    fn handled(&self) -> Vec<(u32, std::thread::ThreadId)> {
        self.handled.lock().unwrap().clone()
    }
}

impl Endpoint for ThreadProbe {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        if let ArchivedMessage::Custom { tag, .. } = message.message() {
            let tag = tag.to_native();
            self.handled
                .lock()
                .unwrap()
                .push((tag, std::thread::current().id()));
            if message.is_ask() {
                message.reply(&custom(tag)).unwrap();
            }
        }
    }
}

/// A server whose loop thread leaves the sockets to lent threads at once
/// (`rpc.io.busyPoll=0`), with a [`ThreadProbe`] as "probe".
fn server_with_thread_probe() -> (RpcEnv, ThreadProbe) {
    let server = env(&["rpc.io.busyPoll=0"]);
    let probe = ThreadProbe::default();
    server.handle().register("probe", probe.clone()).unwrap();
    (server, probe)
}

#[test]
fn a_lent_thread_takes_messages_off_the_socket_and_runs_the_endpoint_itself() {
    let (server, probe) = server_with_thread_probe();
    let client = env(&[]);
    let target = client.handle().endpoint_ref(server.address(), "probe");
    const MESSAGES: u32 = 200;
    let (ready_tx, ready_rx) = mpsc::channel();
    let lender = {
        let (handle, probe) = (server.handle(), probe.clone());
        std::thread::spawn(move || {
            let lease = handle.lend();
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut worked = 0u32;
            let _ = lease.turn();
            ready_tx.send(()).unwrap();
            while probe.handled().len() < MESSAGES as usize && Instant::now() < deadline {
                if lease.turn() {
                    worked += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            (std::thread::current().id(), worked)
        })
    };
    ready_rx.recv().unwrap();
    for tag in 0..MESSAGES {
        target.send(&custom(tag)).unwrap();
        std::thread::sleep(Duration::from_micros(50));
    }
    let (lender_id, worked) = join_within(lender, Duration::from_secs(30), "the lent thread");
    let handled = probe.handled();
    let tags: Vec<u32> = handled.iter().map(|&(tag, _)| tag).collect();
    assert_eq!(
        tags,
        (0..MESSAGES).collect::<Vec<_>>(),
        "all, once, in order"
    );
    let on_lender = handled.iter().filter(|&&(_, id)| id == lender_id).count();
    // While the lent thread keeps turning, the loop thread leaves the sockets to it; it
    // takes over only should the lent thread be kept off the CPU for LEASE_CHECK.
    assert!(
        on_lender > 0 && worked > 0,
        "{on_lender} of {MESSAGES} messages handled on the lent thread"
    );
    eprintln!("{on_lender} of {MESSAGES} messages handled on the lent thread");
}

#[test]
fn a_lent_thread_that_stops_turning_does_not_hold_up_the_loop() {
    let (server, probe) = server_with_thread_probe();
    let lease = server.handle().lend();
    let lender_turns_until = Instant::now() + Duration::from_millis(5);
    while Instant::now() < lender_turns_until {
        let _ = lease.turn();
        std::thread::yield_now();
    }
    // The lease is held and never turned again: the loop thread takes the sockets back.
    let client = env(&["rpc.askTimeout=10s"]);
    let target = client.handle().endpoint_ref(server.address(), "probe");
    for tag in 0..20 {
        assert_eq!(tag_of(&target.ask(&custom(tag)).unwrap()), tag);
    }
    // All on the loop thread, none held for the lease.
    let handled = probe.handled();
    assert!(handled.iter().all(|&(_, id)| id == handled[0].1));
    drop(lease);
    assert_eq!(tag_of(&target.ask(&custom(20)).unwrap()), 20);
}

#[test]
fn an_env_stops_while_a_lent_thread_turns_it_and_the_lease_outlives_it() {
    let (server, probe) = server_with_thread_probe();
    let handle = server.handle();
    let stop_turning = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let lender = {
        let (handle, stop_turning) = (handle.clone(), stop_turning.clone());
        std::thread::spawn(move || {
            let lease = handle.lend();
            while !stop_turning.load(Ordering::Acquire) {
                if !lease.turn() {
                    std::thread::yield_now();
                }
            }
            lease
        })
    };
    let client = env(&["rpc.askTimeout=10s"]);
    let target = client.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&target.ask(&custom(5)).unwrap()), 5);
    // The stop command may be taken by the lent thread's turn: the loop thread, parked,
    // must still be the one to shut down.
    let stopper = std::thread::spawn(move || {
        server.stop();
        server
    });
    let server = join_within(stopper, Duration::from_secs(10), "stop");
    stop_turning.store(true, Ordering::Release);
    let lease = join_within(lender, Duration::from_secs(10), "the lent thread");
    assert!(!lease.turn(), "a stopped loop has no turns");
    drop(lease);
    assert!(matches!(
        handle.endpoint_ref(client.address(), "x").send(&custom(1)),
        Err(RpcError::Stopped)
    ));
    assert_eq!(probe.handled().len(), 1);
    drop(server);
}

#[test]
fn a_lease_taken_while_the_loop_thread_sleeps_still_lets_it_stop_the_env() {
    let (server, probe) = server_with_thread_probe();
    // With rpc.io.busyPoll=0 the loop thread is asleep on its poller by now, with no
    // deadline: a lease must wake it, or a stop taken by the lent thread's turn would
    // never reach it.
    std::thread::sleep(Duration::from_millis(50));
    let lease = server.handle().lend();
    let client = env(&["rpc.askTimeout=10s"]);
    let target = client.handle().endpoint_ref(server.address(), "probe");
    let asker = std::thread::spawn(move || tag_of(&target.ask(&custom(9)).unwrap()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while probe.handled().is_empty() {
        assert!(Instant::now() < deadline, "the ask never arrived");
        if !lease.turn() {
            std::thread::yield_now();
        }
    }
    assert_eq!(join_within(asker, Duration::from_secs(10), "the ask"), 9);
    let stopper = std::thread::spawn(move || server.stop());
    // Keep turning until the stop is seen (it may be this thread's turn that takes it).
    while !stopper.is_finished() {
        assert!(Instant::now() < deadline, "stop did not return");
        let _ = lease.turn();
        std::thread::yield_now();
    }
    stopper.join().unwrap();
    assert!(!lease.turn());
}

#[test]
fn a_deadline_left_by_a_lent_turn_is_kept_once_the_lent_thread_stops_turning() {
    /// Sets a 20 ms timer for each one-way message, records it firing, answers asks.
    struct Delayed(Probe);
    impl Endpoint for Delayed {
        fn receive(&mut self, ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
            if message.is_ask() {
                message.reply(&custom(0)).unwrap();
            } else {
                self.0.record(Seen::Message(1));
                ctx.schedule_once(Duration::from_millis(20));
            }
        }
        fn on_timer(&mut self, _ctx: &mut EndpointContext<'_>, _timer: TimerId) {
            self.0.record(Seen::Timer);
        }
    }
    let server = env(&["rpc.io.busyPoll=0"]);
    let probe = Probe::default();
    server
        .handle()
        .register("delayed", Delayed(probe.clone()))
        .unwrap();
    let client = env(&[]);
    let target = client.handle().endpoint_ref(server.address(), "delayed");
    target.ask(&custom(0)).unwrap();
    // Lent, but not turning yet: the loop thread goes back to sleep on its poller, with
    // no deadline of its own.
    let lease = server.handle().lend();
    std::thread::sleep(Duration::from_millis(20));
    target.send(&custom(1)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !probe.seen().contains(&Seen::Message(1)) {
        assert!(Instant::now() < deadline, "the message never arrived");
        if !lease.turn() {
            std::thread::yield_now();
        }
    }
    // The lent thread stops turning and keeps its lease: the timer its turn (most
    // likely) set must still fire, on the loop thread.
    probe.wait_for("the timer", |seen| seen.contains(&Seen::Timer));
    drop(lease);
}

/// A command handed to the loop while its thread sleeps and a lent thread turns the
/// loop: the lent turn may take the command and the wake-up meant for the sleeping
/// thread. A command handed over after the lent thread stopped must still wake the loop
/// thread (before the fix, it waited for the next socket event or timer: here, never).
#[test]
fn a_wake_up_taken_by_a_lent_turn_does_not_silence_the_next_one() {
    /// Registers an endpoint from a thread of its own; Err if it takes over 10 s.
    fn register_within_10s(
        env: &flint_rpc::RpcEnvHandle,
        name: &'static str,
    ) -> Result<(), String> {
        let (done, answered) = std::sync::mpsc::channel();
        let env = env.clone();
        std::thread::spawn(move || {
            let _ = done.send(env.register(name, Probe::default()).map(|_| ()));
        });
        match answered.recv_timeout(Duration::from_secs(10)) {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!("registering {name} waited 10 s for the loop")),
        }
    }
    let server = env(&["rpc.io.busyPoll=0"]);
    let handle = server.handle();
    for round in 0..5 {
        // Lent, but not turning yet: the loop thread sleeps on its poller, with no
        // deadline of its own.
        let lease = handle.lend();
        std::thread::sleep(Duration::from_millis(20));
        let first = {
            let handle = handle.clone();
            std::thread::spawn(move || {
                handle
                    .register(["a0", "a1", "a2", "a3", "a4"][round], Probe::default())
                    .map(|_| ())
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !first.is_finished() {
            assert!(
                Instant::now() < deadline,
                "the first registration never ended"
            );
            if !lease.turn() {
                std::thread::yield_now();
            }
        }
        first.join().unwrap().unwrap();
        drop(lease);
        std::thread::sleep(Duration::from_millis(20));
        if let Err(e) = register_within_10s(&handle, ["b0", "b1", "b2", "b3", "b4"][round]) {
            // Stopping would wait for the same loop: leave it, and fail now.
            std::mem::forget(server);
            panic!("round {round}: {e}");
        }
    }
}

/// CPU time, in clock ticks, of this process's thread named `name` (Linux).
fn thread_cpu_ticks(name: &str) -> u64 {
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let path = task.unwrap().path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap();
        // pid (comm) state ... utime stime: the 12th and 13th fields after the comm.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        return fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    }
    panic!("no thread named {name}");
}

/// While a lease is held by a thread busy elsewhere, the loop thread wakes every 5 ms to
/// write what that thread queued. A wake-up that finds nothing to do goes back to sleep
/// at once: were it followed by a whole `rpc.io.busyPoll` of polling, the loop thread
/// would poll without end under a long one.
#[test]
fn a_lease_held_idle_does_not_keep_the_loop_thread_polling() {
    let server = env(&["rpc.io.busyPoll=1s"]);
    let loop_thread = format!("flint-rpc-{}", server.address().port());
    let lease = server.handle().lend();
    // The busy poll after the loop's last work runs out.
    std::thread::sleep(Duration::from_millis(1300));
    let before = thread_cpu_ticks(&loop_thread);
    std::thread::sleep(Duration::from_secs(1));
    let used = thread_cpu_ticks(&loop_thread) - before;
    // Polling would take most of the second (100 ticks) it is given a CPU for; about
    // 200 short wake-ups take a tick or two.
    assert!(
        used < 30,
        "the loop thread used {used} ticks of CPU in 1 s while the lease was held idle"
    );
    drop(lease);
}

/// A `Refused` that an endpoint sends as a message of its own is delivered like any
/// other: only the transport's own, on the control route, closes a connection.
#[test]
fn an_endpoint_s_refused_message_closes_nothing() {
    let (server, probe) = server_with_probe(&[]);
    let client = env(&[]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
    remote
        .send(&Message::Refused {
            reason: "not the transport's".into(),
        })
        .unwrap();
    assert_eq!(tag_of(&remote.ask(&custom(2)).unwrap()), 2);
    assert_eq!(client.handle().stats().connected, 1, "no reconnect");
    assert!(!probe
        .seen()
        .iter()
        .any(|seen| matches!(seen, Seen::Disconnected(_))));
}

/// A peer that sends a frame a byte at a time, never stalling for `network.timeout`, is
/// cut off once the frame is late: from `network.timeout` after its first bytes, a frame
/// must come at 1 MiB/s on average, so that trickling peers cannot hold connections for
/// good. Another peer is served throughout.
#[test]
fn a_peer_trickling_a_frame_is_cut_off_however_steadily_it_sends() {
    let (server, probe) = server_with_probe(&[
        "network.timeout=2s",
        "executor.heartbeatInterval=100ms",
        "rpc.io.idleTimeout=0",
    ]);
    let client = env(&[]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    let bytes = one_way(7);
    let mut trickler = TcpStream::connect(server.address()).unwrap();
    trickler.set_nonblocking(true).unwrap();
    let started = Instant::now();
    let mut sent = 0;
    let cut_off = loop {
        let elapsed = started.elapsed();
        assert!(elapsed < Duration::from_secs(10), "still connected");
        if sent < bytes.len() - 1 && trickler.write_all(&bytes[sent..sent + 1]).is_ok() {
            sent += 1;
        } else {
            break elapsed;
        }
        std::thread::sleep(Duration::from_millis(100));
        // Closed: the refusal (or the end of the stream) is there to read.
        if !matches!(trickler.peek(&mut [0u8; 1]), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
        {
            break started.elapsed();
        }
        let tag = 1000 + sent as u32;
        assert_eq!(tag_of(&remote.ask(&custom(tag)).unwrap()), tag);
    };
    assert!(
        cut_off >= Duration::from_secs(2),
        "cut off after {cut_off:?}"
    );
    assert!(sent < bytes.len() - 1, "the whole frame went");
    trickler.set_nonblocking(false).unwrap();
    assert_refused_by_server(&mut trickler, "arrived too slowly");
    assert!(!probe.seen().contains(&Seen::Message(7)));
}

/// A peer whose frames keep arriving in pieces, with part of the next one always
/// waiting, for several times `network.timeout`, is not cut off: each frame's clock
/// starts with its own first bytes.
#[test]
fn a_peer_whose_frames_arrive_in_pieces_for_long_is_kept() {
    let (server, probe) = server_with_probe(&[
        "network.timeout=1s",
        "executor.heartbeatInterval=100ms",
        "rpc.io.idleTimeout=0",
    ]);
    let mut peer = TcpStream::connect(server.address()).unwrap();
    let peer_address = peer.local_addr().unwrap();
    // 40 frames, 100 ms each: 4 s, twice a frame's limit (1 s + 1 s for its length).
    // Each write ends one frame and starts the next, so a frame is always under way.
    let halves = |tag: u32| {
        let bytes = one_way(tag);
        let half = bytes.len() / 2;
        (bytes[..half].to_vec(), bytes[half..].to_vec())
    };
    let (first, mut rest) = halves(0);
    peer.write_all(&first).unwrap();
    for tag in 1..40 {
        std::thread::sleep(Duration::from_millis(100));
        let (next_first, next_rest) = halves(tag);
        peer.write_all(&[rest, next_first].concat()).unwrap();
        rest = next_rest;
    }
    std::thread::sleep(Duration::from_millis(100));
    peer.write_all(&rest).unwrap();
    probe.wait_for("the 40 frames", |seen| {
        (0..40).all(|tag| seen.contains(&Seen::Message(tag)))
    });
    assert!(!probe.seen().contains(&Seen::Disconnected(peer_address)));
}

/// A large frame that comes steadily, faster than 1 MiB/s, is kept past
/// `network.timeout`: each MiB in buys it a second more.
#[test]
fn a_large_frame_arriving_steadily_is_kept_past_the_network_timeout() {
    let (server, probe) = server_with_probe(&[
        "network.timeout=1s",
        "executor.heartbeatInterval=100ms",
        "rpc.io.idleTimeout=0",
        "rpc.message.maxSize=8m",
    ]);
    let bytes = frame(
        &Route::OneWay {
            endpoint: "probe".into(),
        },
        &Message::Custom {
            tag: 77,
            body: Bytes::from(vec![7u8; 4 << 20]),
        },
    );
    let mut peer = TcpStream::connect(server.address()).unwrap();
    // 256 KiB every 125 ms: 2 MiB/s, so 4 MiB take 2 s, twice network.timeout.
    let started = Instant::now();
    for chunk in bytes.chunks(256 << 10) {
        peer.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(125));
    }
    assert!(started.elapsed() >= Duration::from_millis(1900));
    probe.wait_for("the 4 MiB frame", |seen| seen.contains(&Seen::Message(77)));
}

/// Answers an ask, after sending the asker's `probe` a message of its own over the same
/// connection, and tells the test where the ask came from.
struct Caller(Mutex<mpsc::Sender<SocketAddr>>);

impl Endpoint for Caller {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        if let ArchivedMessage::Custom { tag, .. } = message.message() {
            let tag = tag.to_native();
            message.sender_ref("probe").send(&custom(tag + 1)).unwrap();
            message.reply(&custom(tag)).unwrap();
            let from = message.sender().expect("a remote ask");
            self.0.lock().unwrap().send(from).unwrap();
        }
    }
}

#[test]
fn a_client_environment_listens_nowhere_and_talks_over_the_connections_it_opens() {
    let server = env(&[]);
    let (froms, from) = mpsc::channel();
    server
        .handle()
        .register("caller", Caller(Mutex::new(froms)))
        .unwrap();
    let client = RpcEnv::client(&conf(&["rpc.port=0", "rpc.bindAddress=0.0.0.0"])).unwrap();
    assert_eq!(client.address(), flint_rpc::CLIENT_ADDRESS);
    let nowhere = client
        .handle()
        .endpoint_ref(flint_rpc::CLIENT_ADDRESS, "probe");
    assert_eq!(
        nowhere.address(),
        Some(flint_rpc::CLIENT_ADDRESS),
        "a client's address is not a way to its own endpoints"
    );
    let probe = Probe::default();
    client.handle().register("probe", probe.clone()).unwrap();
    let caller = client.handle().endpoint_ref(server.address(), "caller");
    assert_eq!(tag_of(&caller.ask(&custom(40)).unwrap()), 40);
    // The server reached the client's endpoint over the client's own connection.
    probe.wait_for("the server's message", |seen| {
        seen.contains(&Seen::Message(41))
    });
    // Where that connection comes from, nothing listens.
    let from = from.recv_timeout(Duration::from_secs(10)).unwrap();
    let refused = TcpStream::connect_timeout(&from, Duration::from_secs(5)).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    // And the loop thread says it is a client's.
    let threads = std::fs::read_dir("/proc/self/task").unwrap();
    let names: Vec<String> = threads
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .collect();
    assert!(
        names.iter().any(|name| name.trim() == "flint-rpc-out"),
        "{names:?}"
    );
    client.stop();
    assert!(probe.seen().contains(&Seen::Stopped));
}
