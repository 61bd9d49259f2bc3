//! Typed user messages against the catalogue, in one run (not measured on the shared
//! development machine; run it on a quiet one):
//!
//! - `typed_ask/catalogue`: an ask carrying a 128-byte `Message::Custom` body, answered
//!   with the same body, the catalogue's path;
//! - `typed_ask/typed`: an ask of a user type carrying 128 bytes, answered with the same
//!   type, read in place on both sides (the target: within 1.1 times the
//!   catalogue's);
//! - `one_way/typed_128`: one-way sends of a 128-byte user message to a counting
//!   service, in batches closed by an ask (the target: 3 million a second).
//!
//! `cargo bench -p flint-rpc --bench typed`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flint_rpc::{
    rkyv, Bytes, Conf, Endpoint, EndpointContext, Incoming, Message, Request, RpcEnv, RpcError,
    Service, UserMessage,
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

/// Answers a catalogue ask with its own body.
struct CatalogueEcho;

impl Endpoint for CatalogueEcho {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        if let flint_rpc::ArchivedMessage::Custom { tag, body } = message.message() {
            let body = message.frame().bytes_of(body.as_slice());
            let _ = message.reply(&Message::Custom {
                tag: tag.to_native(),
                body,
            });
        }
    }
}

fn bench(c: &mut Criterion) {
    let conf = Conf::from_pairs(["rpc.askTimeout=30s"]).expect("conf");
    let server = RpcEnv::new(&conf).expect("server");
    server
        .handle()
        .register("catalogue", CatalogueEcho)
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
        .on_message::<Payload>(|count, _, _, _| *count += 1)
        .and_then(|service| service.on_ask::<Count>(|count, _| Ok(Counted(*count))))
        .expect("counting service");
    server
        .handle()
        .register("counting", counting)
        .expect("register");

    let client = RpcEnv::new(&conf).expect("client");
    let handle = client.handle();
    let catalogue = handle.endpoint_ref(server.address(), "catalogue");
    let typed = handle.endpoint_ref(server.address(), "typed");
    let counting = handle.endpoint_ref(server.address(), "counting");
    let body = Bytes::from(vec![0x5A; 128]);
    let payload = Payload {
        bytes: vec![0x5A; 128],
    };

    let mut group = c.benchmark_group("typed_ask");
    group.bench_function("catalogue", |b| {
        let message = Message::Custom {
            tag: 1,
            body: body.clone(),
        };
        b.iter(|| black_box(catalogue.ask(&message).expect("ask")));
    });
    group.bench_function("typed", |b| {
        b.iter(|| {
            let reply = typed.ask_typed(&payload).expect("ask");
            black_box(reply.archived().bytes.len());
        });
    });
    group.finish();

    let mut group = c.benchmark_group("one_way");
    const BATCH: u64 = 1000;
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("typed_128", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                // A full outbox is waited out: the loop is behind, not gone.
                loop {
                    match counting.send_typed(&payload) {
                        Ok(()) => break,
                        Err(RpcError::OutboxFull { .. }) => std::thread::yield_now(),
                        Err(error) => panic!("send: {error}"),
                    }
                }
            }
            black_box(counting.ask_typed(&Count).expect("count"));
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
