//! Authentication (`authenticate=true`): the handshake, its timeout, and the small
//! frames a peer may send before it.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::RpcError;
use flint_wire::{ArchivedMessage, Message, Route, HEADER_LEN};

use crate::common::*;

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
    let mut header = frame_bytes(
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
    assert!(
        matches!(error, RpcError::AuthenticationFailed { .. }),
        "{error:?}"
    );
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
    assert!(
        matches!(error, RpcError::AuthenticationFailed { .. }),
        "{error:?}"
    );
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
    let error = remote.ask(&custom(4)).unwrap_err();
    assert!(
        matches!(error, RpcError::AuthenticationFailed { .. }),
        "{error:?}"
    );
    let text = error.to_string();
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

/// With every place of `rpc.io.maxConnections` taken by connections that have not
/// authenticated, a peer with the secret still gets in: the oldest of them makes room,
/// and the peer, once authenticated, keeps its place when the next stranger comes.
#[test]
fn connections_that_have_not_authenticated_make_room_for_a_peer_with_the_secret() {
    use flint_testkit::attack::{connect_from, loopback_host, IdleConnections};
    let secret = [
        "authenticate=true",
        "authenticate.secret=correct horse",
        "rpc.io.maxConnections=3",
    ];
    let (server, _probe) = server_with_probe(&secret);
    let stranger = loopback_host(2);
    let idle = IdleConnections::open(stranger, server.address(), 3).unwrap();
    flint_testkit::wait::wait_until("three strangers held", Duration::from_secs(10), || {
        server.handle().stats().accepted == 3
    });
    let friend = env(&secret);
    let remote = friend.handle().endpoint_ref(server.address(), "probe");
    assert_eq!(tag_of(&remote.ask(&custom(1)).unwrap()), 1);
    assert_eq!(idle.closed(), [0]);
    // Strangers coming on take each other's places, never the friend's. Each is held
    // open: one closed at once could free its place before the next came, which would
    // then take it without making room.
    let mut strangers = Vec::new();
    for _ in 0..4 {
        strangers.push(connect_from(stranger, server.address()).unwrap());
    }
    flint_testkit::wait::wait_until("the strangers accepted", Duration::from_secs(10), || {
        server.handle().stats().accepted == 8
    });
    assert_eq!(tag_of(&remote.ask(&custom(2)).unwrap()), 2);
    assert_eq!(friend.handle().stats().connected, 1, "no reconnect");
    let stats = server.handle().stats();
    assert_eq!((stats.evicted, stats.refused), (5, 0));
}
