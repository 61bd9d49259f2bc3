//! Asks: replies read in place, error replies, timeouts and what set them, replies from
//! other threads, and asks that end with their connection, their callback or a stuck loop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::{Endpoint, EndpointContext, Incoming, RpcError, TimeoutSource};
use flint_wire::{ArchivedMessage, Message, Route, HEADER_LEN};

use crate::common::*;

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
    let ask = frame_bytes(
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
fn an_ask_to_a_closed_port_fails_with_the_connect_error() {
    // Nothing listens on that port, and no connection of ours takes it as its own.
    let address: std::net::SocketAddr = (
        std::net::Ipv4Addr::LOCALHOST,
        flint_testkit::ports::unused_port(),
    )
        .into();
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
