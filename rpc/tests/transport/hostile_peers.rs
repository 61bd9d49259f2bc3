//! Peers that misbehave: killed or reset mid-frame, oversized or garbage frames, peers
//! that stall, trickle, stay silent, stop reading or flood, too many connections (from
//! one host, or idle ones taking every place); and the peers beside them, which are
//! served throughout.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use flint_wire::{Message, Route, HEADER_LEN};

use flint_rpc::RpcEnv;
use flint_testkit::attack::{connect_from, loopback_host, IdleConnections};
use flint_testkit::wait::wait_until;

use crate::common::*;

/// A one-way frame to the probe, as raw bytes.
fn one_way(tag: u32) -> BytesMut {
    frame_bytes(
        &Route::OneWay {
            endpoint: "probe".into(),
        },
        &custom(tag),
    )
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
    let bytes = frame_bytes(
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

    // A peer that connects, says one thing (so that its place is not given to the next
    // connection, see the tests of rpc.io.maxConnections below) and then nothing takes
    // the only place: an environment's ask is refused meanwhile.
    let connected = Instant::now();
    let mut silent = TcpStream::connect(address).unwrap();
    let silent_address = silent.local_addr().unwrap();
    silent.write_all(&one_way(100)).unwrap();
    probe.wait_for("the silent connection's one message", |seen| {
        seen.contains(&Seen::Connected(silent_address)) && seen.contains(&Seen::Message(100))
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
        frame_bytes(
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
    // Both connections held have delivered a message: neither makes room for another.
    let mut second = TcpStream::connect(address).unwrap();
    let second_address = second.local_addr().unwrap();
    second.write_all(&one_way(4)).unwrap();
    probe.wait_for("the second connection's first frame", |seen| {
        seen.contains(&Seen::Connected(second_address)) && seen.contains(&Seen::Message(4))
    });

    // The kernel completes the third connect; the environment closes it as it accepts it.
    let mut third = TcpStream::connect(address).unwrap();
    let _ = third.write_all(&one_way(5));
    assert_refused_by_server(
        &mut third,
        "as many as rpc.io.maxConnections allows, and every one has authenticated or \
         delivered a message",
    );
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

/// 127.0.0.`last`: on Linux loopback, a host of its own.
fn host(last: u8) -> Ipv4Addr {
    loopback_host(last)
}

/// A connection from `source` that has delivered one message (`tag`) to the probe: one
/// that keeps its place at `rpc.io.maxConnections`.
fn established_from(server: &RpcEnv, probe: &Probe, source: Ipv4Addr, tag: u32) -> TcpStream {
    let mut socket = connect_from(source, server.address()).unwrap();
    socket.write_all(&one_way(tag)).unwrap();
    probe.wait_for("the peer's message", |seen| {
        seen.contains(&Seen::Message(tag))
    });
    socket
}

/// Waits (bounded) until `server` has accepted `count` connections in all.
fn wait_for_accepted(server: &RpcEnv, count: u64) {
    wait_until(
        "the connections are accepted",
        Duration::from_secs(10),
        || server.handle().stats().accepted >= count,
    );
}

/// The attack of issue 22: with `rpc.io.maxConnections=50`, 50 connections from one
/// stranger host that say nothing no longer keep another host's executor out; the
/// oldest of them makes room, told why.
#[test]
fn fifty_idle_connections_from_one_host_do_not_keep_another_host_out() {
    let (server, probe) = server_with_probe(&["rpc.io.maxConnections=50", "rpc.io.idleTimeout=0"]);
    let mut idle = IdleConnections::open(host(2), server.address(), 50).unwrap();
    wait_for_accepted(&server, 50);
    // Another host's environment (from 127.0.0.1) gets in and is served.
    let client = env(&[]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
    wait_until(
        "the oldest idle connection is closed",
        Duration::from_secs(10),
        || !idle.closed().is_empty(),
    );
    assert_eq!(idle.closed(), [0], "the oldest made room, and only it");
    assert_refused_by_server(
        &mut idle.take(0),
        "this one, the oldest yet to authenticate or deliver a message, makes room for a new one",
    );
    let stats = server.handle().stats();
    assert_eq!((stats.accepted, stats.evicted, stats.refused), (51, 1, 0));
    // A raw peer from a third host too, which establishes itself by its message.
    let _third = established_from(&server, &probe, host(3), 2);
    assert_eq!(idle.closed().len(), 1, "the next oldest made room");
    assert_eq!(server.handle().stats().evicted, 2);
    assert_eq!(tag_of(&remote.ask(&custom(3)).unwrap()), 3);
}

/// A host at `rpc.io.maxConnectionsPerHost` is refused once its connections have all
/// delivered a message; while some have not, the oldest of its own makes room, never
/// another host's.
#[test]
fn a_host_at_rpc_io_max_connections_per_host_is_refused_and_others_are_not() {
    let (server, probe) =
        server_with_probe(&["rpc.io.maxConnectionsPerHost=3", "rpc.io.idleTimeout=0"]);
    let _talkers: Vec<TcpStream> = (1..=3)
        .map(|tag| established_from(&server, &probe, host(2), tag))
        .collect();
    let mut fourth = connect_from(host(2), server.address()).unwrap();
    let _ = fourth.write_all(&one_way(5));
    assert_refused_by_server(
        &mut fourth,
        "3 connections from host 127.0.0.2 are open, as many as \
         rpc.io.maxConnectionsPerHost allows, and every one has authenticated or delivered \
         a message: try again later",
    );
    assert!(!probe.seen().contains(&Seen::Message(5)));
    // Another host is held, and served.
    let _other = established_from(&server, &probe, host(3), 6);
    // A host whose connections say nothing: its own oldest makes room for its next.
    let idle = IdleConnections::open(host(4), server.address(), 3).unwrap();
    wait_for_accepted(&server, 7);
    let _next = established_from(&server, &probe, host(4), 7);
    wait_until(
        "host 4's oldest makes room",
        Duration::from_secs(10),
        || idle.closed() == [0],
    );
    let stats = server.handle().stats();
    assert_eq!((stats.accepted, stats.refused, stats.evicted), (8, 1, 1));
}

/// At `rpc.io.maxConnections`, connections that have not delivered a message make room
/// for new ones, oldest first; connections that have keep their places; once every
/// place is held by one that has, the next connection is refused.
#[test]
fn at_rpc_io_max_connections_the_oldest_connection_not_established_makes_room() {
    let (server, probe) = server_with_probe(&["rpc.io.maxConnections=4", "rpc.io.idleTimeout=0"]);
    // An environment that asked, a raw peer that sent a message, and two strangers that
    // said nothing, in that order.
    let client = env(&[]);
    let remote = client.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
    let _talker = established_from(&server, &probe, host(3), 2);
    let strangers = IdleConnections::open(host(2), server.address(), 1).unwrap();
    wait_for_accepted(&server, 3);
    let later_stranger = IdleConnections::open(host(2), server.address(), 1).unwrap();
    wait_for_accepted(&server, 4);
    // Newcomers from a fourth host take the strangers' places, the oldest first, then
    // each other's.
    let mut first = connect_from(host(4), server.address()).unwrap();
    wait_until(
        "the older stranger makes room",
        Duration::from_secs(10),
        || strangers.closed() == [0],
    );
    assert!(later_stranger.closed().is_empty());
    let mut second = connect_from(host(4), server.address()).unwrap();
    wait_until(
        "the later stranger makes room",
        Duration::from_secs(10),
        || later_stranger.closed() == [0],
    );
    let mut third = connect_from(host(4), server.address()).unwrap();
    // The first newcomer, which said nothing either, makes room in its turn.
    assert_refused_by_server(&mut first, "makes room for a new one");
    // The two left establish themselves: every place is held by a connection that has.
    for (socket, tag) in [(&mut second, 3), (&mut third, 4)] {
        socket.write_all(&one_way(tag)).unwrap();
        probe.wait_for("the newcomer's message", |seen| {
            seen.contains(&Seen::Message(tag))
        });
    }
    let mut refused = connect_from(host(5), server.address()).unwrap();
    assert_refused_by_server(
        &mut refused,
        "4 connections from peers are open, as many as rpc.io.maxConnections allows, and \
         every one has authenticated or delivered a message",
    );
    let stats = server.handle().stats();
    assert_eq!((stats.accepted, stats.evicted, stats.refused), (7, 3, 1));
    // Those established were served throughout.
    assert_eq!(tag_of(&remote.ask(&custom(5)).unwrap()), 5);
    second.write_all(&one_way(6)).unwrap();
    probe.wait_for("an established newcomer's next message", |seen| {
        seen.contains(&Seen::Message(6))
    });
}

#[test]
fn a_peer_that_floods_the_loop_does_not_starve_the_others() {
    let (server, probe) = server_with_probe(&["rpc.askTimeout=4s"]);
    // A raw peer writes one-way frames as fast as loopback takes them, for 6 s: far more
    // than the loop can take in, so its socket never runs dry.
    let mut batch = BytesMut::new();
    for _ in 0..4096 {
        batch.extend_from_slice(&frame_bytes(
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
    let bytes = frame_bytes(
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
