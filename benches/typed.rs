//! Typed user messages against their baselines, in one run:
//!
//! - `typed_ask/typed`: an ask of a user type carrying 128 bytes, answered with the same
//!   type, archived in place on send and read in place on both sides;
//! - `typed_ask/catalogue`: an ask carrying a 128-byte `Message::Custom` body, answered
//!   with the same body, the catalogue's path (the target: typed within 1.1 times it);
//! - `typed_ask/raw_tcp_one_cpu`: a blocking std::net ping-pong of the typed ask's and
//!   reply's frame sizes, both threads pinned to one CPU (the target: typed within 1.3
//!   times it);
//! - `one_way/typed_128`: one-way sends of a 128-byte user message to a counting
//!   service, in batches closed by an ask (the target: 3 million a second), beside
//!   `one_way/catalogue_128`, the same bytes as a `Message::Custom` to an endpoint of
//!   its own.
//!
//! `cargo bench --bench typed`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flint::bench::pinned_round_trips;
use flint_rpc::wire::{Encoder, Route};
use flint_rpc::{
    rkyv, Bytes, Conf, Endpoint, EndpointContext, EndpointRef, Incoming, Message, Request, RpcEnv,
    RpcError, Service, UserMessage,
};

/// A request of 128 payload bytes.
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Payload {
    bytes: Vec<u8>,
}

impl UserMessage for Payload {
    const ID: u32 = 1;
}
impl Request for Payload {
    type Reply = Payload;
}

/// Closes a batch of one-way sends: answered once everything before it was handled.
#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Count;

impl UserMessage for Count {
    const ID: u32 = 2;
}
impl Request for Count {
    type Reply = Counted;
}

#[derive(rkyv::Archive, rkyv::Serialize)]
#[rkyv(crate = flint_rpc::rkyv)]
struct Counted(u64);

impl UserMessage for Counted {
    const ID: u32 = 3;
}

/// Answers a catalogue ask with its own body; counts one-way messages.
#[derive(Default)]
struct CatalogueEcho {
    received: Arc<AtomicU64>,
}

impl Endpoint for CatalogueEcho {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        self.received.fetch_add(1, Ordering::Relaxed);
        if let flint_rpc::ArchivedMessage::Custom { tag, body } = message.message() {
            let body = message.frame().bytes_of(body.as_slice());
            let _ = message.reply(&Message::Custom {
                tag: tag.to_native(),
                body,
            });
        }
    }
}

/// Bytes of the typed ask's frame to `endpoint`, and of its reply's.
fn typed_frame_sizes(endpoint: &str, payload: &Payload) -> (usize, usize) {
    let len = |route: &Route| {
        let mut out = BytesMut::new();
        Encoder::new(usize::MAX)
            .encode_user(route, Payload::ID, payload, 0, &mut out)
            .expect("a 128-byte message encodes")
    };
    (
        len(&Route::Ask {
            request_id: 1,
            endpoint: endpoint.into(),
        }),
        len(&Route::Reply { request_id: 1 }),
    )
}

/// The blocking raw ping-pong of `request` and `reply` bytes with both threads pinned to
/// one CPU (`flint::bench::pinned_round_trips`).
fn raw_ping_pong_one_cpu(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    (request, reply): (usize, usize),
) {
    if pinned_round_trips(request, reply, 1).is_none() {
        eprintln!("raw_tcp_one_cpu: threads cannot be pinned here; skipped");
        return;
    }
    group.bench_function("raw_tcp_one_cpu", |b| {
        b.iter_custom(|iterations| {
            pinned_round_trips(request, reply, iterations).expect("pinned before")
        })
    });
}

/// Sends `send` until it is queued: a full outbox is waited out (the loop is behind,
/// not gone).
fn send_queued(send: impl Fn() -> Result<(), RpcError>) {
    loop {
        match send() {
            Ok(()) => return,
            Err(RpcError::OutboxFull { .. }) => std::thread::yield_now(),
            Err(error) => panic!("send: {error}"),
        }
    }
}

fn one_way(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    batch: u64,
    send: impl Fn() -> Result<(), RpcError>,
    close: impl Fn(),
) {
    group.bench_function(name, |b| {
        b.iter(|| {
            for _ in 0..batch {
                send_queued(&send);
            }
            // The ask travels behind the batch: when it returns, all of it arrived.
            close();
        });
    });
}

fn bench(c: &mut Criterion) {
    let conf = Conf::from_pairs(["rpc.askTimeout=30s"]).expect("conf");
    let server = RpcEnv::new(&conf).expect("server");
    let received = Arc::new(AtomicU64::new(0));
    server
        .handle()
        .register(
            "catalogue",
            CatalogueEcho {
                received: received.clone(),
            },
        )
        .expect("register");
    let typed = Service::new(())
        .on_ask::<Payload>(|_, payload| {
            Ok(Payload {
                bytes: payload.bytes.to_vec(),
            })
        })
        .expect("typed service");
    server.handle().register("typed", typed).expect("register");
    let counting = Service::new(0u64)
        .on_one_way::<Payload>(|count, _| *count += 1)
        .and_then(|service| service.on_ask::<Count>(|count, _| Ok(Counted(*count))))
        .expect("counting service");
    server
        .handle()
        .register("counting", counting)
        .expect("register");

    let client = RpcEnv::new(&conf).expect("client");
    let handle = client.handle();
    let catalogue: EndpointRef = handle.endpoint_ref(server.address(), "catalogue");
    let typed = handle.endpoint_ref(server.address(), "typed");
    let counting = handle.endpoint_ref(server.address(), "counting");
    let body = Bytes::from(vec![0x5A; 128]);
    let payload = Payload {
        bytes: vec![0x5A; 128],
    };
    let catalogue_message = Message::Custom {
        tag: 1,
        body: body.clone(),
    };

    let mut group = c.benchmark_group("typed_ask");
    group.bench_function("typed", |b| {
        b.iter(|| {
            let reply = typed.ask_typed(&payload).expect("ask");
            black_box(reply.archived().bytes.len());
        });
    });
    group.bench_function("catalogue", |b| {
        b.iter(|| black_box(catalogue.ask(&catalogue_message).expect("ask")));
    });
    raw_ping_pong_one_cpu(&mut group, typed_frame_sizes("typed", &payload));
    group.finish();

    let mut group = c.benchmark_group("one_way");
    const BATCH: u64 = 10_000;
    group.throughput(Throughput::Elements(BATCH));
    one_way(
        &mut group,
        "typed_128",
        BATCH,
        || counting.send_typed(&payload),
        || {
            black_box(counting.ask_typed(&Count).expect("count"));
        },
    );
    let ping = Message::Custom {
        tag: 0,
        body: Bytes::new(),
    };
    one_way(
        &mut group,
        "catalogue_128",
        BATCH,
        || catalogue.send(&catalogue_message),
        || {
            black_box(catalogue.ask(&ping).expect("ping"));
        },
    );
    group.finish();
    assert!(received.load(Ordering::Relaxed) > 0);
}

criterion_group!(benches, bench);
criterion_main!(benches);
