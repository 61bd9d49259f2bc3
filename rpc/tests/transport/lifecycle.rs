//! An environment's life: timers, stopping (what is flushed, within what bound),
//! endpoints that panic or are registered twice, extreme durations, and client mode.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use flint_rpc::{Endpoint, EndpointContext, Incoming, RpcEnv, RpcError, Settings, TimerId};
use flint_wire::{ArchivedMessage, Message};

use crate::common::*;

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
