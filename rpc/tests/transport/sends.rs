//! One-way sends: local and remote, many connections, ordering from one thread and from
//! many, a full outbox, reconnection, batch ends and deferred sends.

use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::{Endpoint, EndpointContext, Incoming, RpcEnv, RpcError};
use flint_testkit::wait::holds_within;
use flint_wire::{ArchivedMessage, Message};

use crate::common::*;

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
    // What is queued is what a sender reads to learn when the peer has caught up.
    let RpcError::OutboxFull { queued, .. } = error else {
        unreachable!()
    };
    assert!(queued > 48 * 1024, "{queued}");
    // A peer that reads nothing takes nothing more: what was written stops growing once
    // the kernel's buffers are full. (Until then the loop may write more, as the kernel
    // grows its buffers: once, all that was queued.)
    std::thread::sleep(Duration::from_millis(200));
    let stalled = remote.bytes_written();
    assert!(stalled > 0);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        remote.bytes_written(),
        stalled,
        "written while nobody reads"
    );
    // Something stays queued while nobody reads: the outbox is filled again until what
    // the kernel's grown buffers take leaves some of it (they once took it all).
    let (written, left) = loop {
        let again = loop {
            match remote.send(&big) {
                Ok(()) => assert!(Instant::now() < deadline, "the outbox never filled again"),
                Err(error) => break error,
            }
        };
        assert!(matches!(again, RpcError::OutboxFull { .. }), "{again:?}");
        std::thread::sleep(Duration::from_millis(50));
        let (written, left) = (remote.bytes_written(), remote.queued_bytes());
        if left > 0 {
            break (written, left);
        }
        assert!(Instant::now() < deadline, "the kernel took every refill");
    };
    let mut socket = holder.join().unwrap().unwrap();
    // The peer reads again: the queue drains to nothing.
    let reader = std::thread::spawn(move || {
        let mut sink = [0u8; 64 * 1024];
        while matches!(socket.read(&mut sink), Ok(n) if n > 0) {}
    });
    assert!(
        holds_within(Duration::from_secs(20), || remote.queued_bytes() == 0),
        "still {} bytes queued",
        remote.queued_bytes()
    );
    // What was left queued was written once the peer read.
    assert!(remote.bytes_written() >= written + left as u64);
    drop(client);
    reader.join().unwrap();
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
    let mut second = loop {
        let _ = remote.send(&custom(2));
        if let Ok((second, _)) = listener.accept() {
            break second;
        }
        assert!(Instant::now() < deadline, "no second connection");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(holds_within(Duration::from_secs(10), || client
        .handle()
        .stats()
        .connected
        == 2));
    // The reference kept its first connection, now closed: its later sends, and a clone's,
    // go on the open second one rather than opening one each.
    let clone = remote.clone();
    for n in 3..6 {
        remote.send(&custom(n)).unwrap();
        clone.send(&custom(n)).unwrap();
    }
    second.set_nonblocking(false).unwrap();
    second
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut decoder = flint_wire::FrameDecoder::new(1 << 20);
    let mut later = Vec::new();
    let mut buf = [0u8; 4096];
    while later.len() < 6 {
        let n = second
            .read(&mut buf)
            .expect("frames 3 to 5 on the second connection");
        assert!(n > 0, "the second connection closed");
        decoder.feed(&buf[..n]).unwrap();
        while let Some(frame) = decoder.next_frame().unwrap() {
            if let ArchivedMessage::Custom { tag, .. } = &frame.envelope().unwrap().message {
                if tag.to_native() >= 3 {
                    later.push(tag.to_native());
                }
            }
        }
    }
    assert_eq!(later, [3, 3, 4, 4, 5, 5]);
    assert!(listener.accept().is_err(), "a third connection");
    assert_eq!(client.handle().stats().connected, 2);
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
