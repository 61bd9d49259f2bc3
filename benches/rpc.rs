//! The transport against the floor, in one run:
//!
//! - `ask_round_trip/flint`: an ask over loopback to an endpoint that answers with the
//!   same 128-byte payload;
//! - `ask_round_trip/raw_tcp`: a blocking std::net ping-pong of byte counts equal to the
//!   ask's and the reply's frames, with TCP_NODELAY (the floor the issue names);
//! - `ask_round_trip/raw_tcp_one_cpu`: the same with both threads pinned to one CPU
//!   (a switch between threads instead of waking another CPU, often several times
//!   faster on a virtual machine): the floor is the faster of the two;
//! - `ask_round_trip/raw_tcp_client_spins`: the same, but the client polls for the reply
//!   as flint's asker does (spinning keeps a virtual CPU from halting, which on some
//!   machines costs more than the whole round trip);
//! - `ask_round_trip/raw_tcp_both_spin`: both ends poll, as flint's asker and its event
//!   loops (`rpc.io.busyPoll`) do: the like-for-like floor;
//! - `one_way/flint`: one-way sends of 128-byte messages to a counting endpoint, in
//!   batches closed by an ask (so every message arrived);
//! - `local_ask/flint`: an ask to an endpoint of the same environment (no socket);
//! - `large_ask/flint`: an ask carrying 16 MiB, answered with an `Ack` (a large task
//!   result, say), against `large_ask/raw_tcp`: the same bytes each way over a blocking
//!   std::net connection, read into a buffer made once.
//!
//! `cargo bench --bench rpc`

use std::hint::black_box;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flint::bench::transport::{ask_frame_sizes, payload_message, Echo};
use flint::bench::{pinned_round_trips, read_all, Waiting};
use flint_rpc::{Conf, Endpoint, EndpointContext, Incoming, RpcEnv, RpcError};
use flint_wire::{Encoder, Message, Route};

/// The payload of `large_ask`: 16 MiB.
const LARGE: usize = 16 << 20;

/// Answers every ask with `Ack`, whatever it carries.
struct Acker;

impl Endpoint for Acker {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        let _ = message.reply(&Message::Ack { ok: true });
    }
}

/// The frame sizes of a `large_ask`: the ask with its 16 MiB, and the `Ack` back.
fn large_frame_sizes(message: &Message) -> (usize, usize) {
    let len = |route: &Route, message: &Message| {
        let mut out = BytesMut::new();
        Encoder::new(usize::MAX)
            .encode(route, message, &mut out)
            .expect("the large ask encodes")
    };
    (
        len(
            &Route::Ask {
                request_id: 1,
                endpoint: "ack".into(),
            },
            message,
        ),
        len(&Route::Reply { request_id: 1 }, &Message::Ack { ok: true }),
    )
}

/// 16 MiB asks through flint against the same bytes over raw TCP, in one group.
fn large_ask(c: &mut Criterion) {
    let conf = Conf::from_pairs(["rpc.message.maxSize=64m"]).unwrap();
    let server = RpcEnv::new(&conf).unwrap();
    server.handle().register("ack", Acker).unwrap();
    let client = RpcEnv::new(&conf).unwrap();
    let ack = client.handle().endpoint_ref(server.address(), "ack");
    let message = Message::Custom {
        tag: 1,
        body: Bytes::from(vec![7u8; LARGE]),
    };
    let (request, reply) = large_frame_sizes(&message);

    let mut group = c.benchmark_group("large_ask");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(LARGE as u64));
    group.bench_function("flint", |b| {
        b.iter(|| black_box(ack.ask(&message).unwrap()))
    });
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let raw_server = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        socket.set_nodelay(true).unwrap();
        let mut inbound = vec![0u8; request];
        let outbound = vec![0x24u8; reply];
        while read_all(&mut socket, &mut inbound, Waiting::Blocking).is_ok() {
            if socket.write_all(&outbound).is_err() {
                break;
            }
        }
    });
    let mut socket = TcpStream::connect(address).unwrap();
    socket.set_nodelay(true).unwrap();
    let outbound = vec![0x5Au8; request];
    let mut inbound = vec![0u8; reply];
    group.bench_function("raw_tcp", |b| {
        b.iter(|| {
            socket.write_all(&outbound).unwrap();
            read_all(&mut socket, &mut inbound, Waiting::Blocking).unwrap();
        })
    });
    group.finish();
    drop(socket);
    raw_server.join().unwrap();
    client.stop();
    server.stop();
}

/// How a raw ping-pong end waits for its bytes.
fn waiting(spins: bool) -> Waiting {
    if spins {
        Waiting::BusyPolling
    } else {
        Waiting::Blocking
    }
}

/// A raw ping-pong over std::net with frames of the ask's and the reply's sizes. With
/// `client_spins` the client polls a non-blocking socket, yielding, as flint's asker
/// spins for its reply; with `server_spins` the server does, as flint's event loop
/// busy-polls; each blocks in read otherwise.
fn raw_ping_pong(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    client_spins: bool,
    server_spins: bool,
) {
    let (request, reply) = ask_frame_sizes("echo");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        socket.set_nodelay(true).unwrap();
        socket.set_nonblocking(server_spins).unwrap();
        let mut inbound = vec![0u8; request];
        let outbound = vec![0x24u8; reply];
        while read_all(&mut socket, &mut inbound, waiting(server_spins)).is_ok() {
            if socket.write_all(&outbound).is_err() {
                break;
            }
        }
    });
    let mut socket = TcpStream::connect(address).unwrap();
    socket.set_nodelay(true).unwrap();
    socket.set_nonblocking(client_spins).unwrap();
    let outbound = vec![0x42u8; request];
    let mut inbound = vec![0u8; reply];
    group.bench_function(name, |b| {
        b.iter(|| {
            socket.write_all(&outbound).unwrap();
            read_all(&mut socket, &mut inbound, waiting(client_spins))
                .expect("the raw server answers");
            black_box(inbound[0])
        })
    });
    drop(socket);
    server.join().unwrap();
}

/// The blocking raw ping-pong with both threads pinned to one CPU, where the reader's
/// wake-up is a switch between threads rather than a wake-up of another, idle CPU: on a
/// virtual machine often the faster placement by several times (see
/// `flint::bench::BlockingFloor`). Timed in a pinned thread of its own, so that the
/// bench's own thread stays free to move.
fn raw_ping_pong_one_cpu(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
) {
    let (request, reply) = ask_frame_sizes("echo");
    if pinned_round_trips(request, reply, 1).is_none() {
        eprintln!("{name}: threads cannot be pinned here; skipped");
        return;
    }
    group.bench_function(name, |b| {
        b.iter_custom(|iterations| {
            pinned_round_trips(request, reply, iterations).expect("pinned before")
        })
    });
}

fn rpc(c: &mut Criterion) {
    let conf = Conf::new();
    let server = RpcEnv::new(&conf).unwrap();
    server.handle().register("echo", Echo::default()).unwrap();
    let client = RpcEnv::new(&conf).unwrap();
    let echo = client.handle().endpoint_ref(server.address(), "echo");
    let request = payload_message();

    let mut group = c.benchmark_group("ask_round_trip");
    group.bench_function("flint", |b| {
        b.iter(|| black_box(echo.ask(&request).unwrap()))
    });
    raw_ping_pong(&mut group, "raw_tcp", false, false);
    raw_ping_pong_one_cpu(&mut group, "raw_tcp_one_cpu");
    raw_ping_pong(&mut group, "raw_tcp_client_spins", true, false);
    raw_ping_pong(&mut group, "raw_tcp_both_spin", true, true);
    group.finish();

    let mut group = c.benchmark_group("one_way");
    const BATCH: u64 = 10_000;
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("flint", |b| {
        b.iter_custom(|iterations| {
            let start = Instant::now();
            for _ in 0..iterations {
                for _ in 0..BATCH {
                    loop {
                        match echo.send(&request) {
                            Ok(()) => break,
                            Err(RpcError::OutboxFull { .. }) => std::thread::yield_now(),
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                // The ask travels behind the batch: when it returns, all of it arrived.
                black_box(echo.ask(&Message::Empty).unwrap());
            }
            start.elapsed()
        })
    });
    group.finish();

    let mut group = c.benchmark_group("local_ask");
    let local = server.handle().local_ref("echo");
    group.bench_function("flint", |b| {
        b.iter(|| black_box(local.ask(&request).unwrap()))
    });
    group.finish();
    client.stop();
    server.stop();
}

criterion_group!(benches, rpc, large_ask);
criterion_main!(benches);
