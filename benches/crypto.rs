//! What encryption (`network.crypto.enabled=true`) costs the transport: the same asks
//! over loopback with frames in clear and sealed, in one run. Both sides authenticate in
//! either case (encryption needs it), so the difference is the sealing alone.
//!
//! - `crypto_ask_round_trip/{in_clear,sealed}`: an ask with a 128-byte payload to an
//!   endpoint that answers with the same payload (as `rpc`'s `ask_round_trip/flint`);
//!   the target is a sealed round trip at most 1.15 times the one in clear;
//! - `crypto_large_ask/{in_clear,sealed}`: an ask carrying 16 MiB, answered with an
//!   `Ack` (as `rpc`'s `large_ask/flint`); the target is at least 1 GB/s sealed.
//!
//! `cargo bench --bench crypto`

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flint::bench::transport::{payload_message, Echo};
use flint_rpc::{Conf, Endpoint, EndpointContext, EndpointRef, Incoming, RpcEnv};
use flint_wire::Message;

/// The payload of `crypto_large_ask`: 16 MiB.
const LARGE: usize = 16 << 20;

/// Answers every ask with `Ack`, whatever it carries.
struct Acker;

impl Endpoint for Acker {
    fn receive(&mut self, _ctx: &mut EndpointContext<'_>, message: Incoming<'_>) {
        let _ = message.reply(&Message::Ack { ok: true });
    }
}

/// The two configurations compared: authenticated in clear, and sealed.
fn confs() -> [(&'static str, Conf); 2] {
    let authenticated = [
        "authenticate=true",
        "authenticate.secret=bench secret",
        "rpc.message.maxSize=64m",
    ];
    let conf = |extra: &[&str]| {
        Conf::from_pairs(authenticated.iter().chain(extra).copied())
            .expect("the bench's configuration")
    };
    [
        ("in_clear", conf(&[])),
        ("sealed", conf(&["network.crypto.enabled=true"])),
    ]
}

/// A server with `echo` and `ack` endpoints, and a client's refs to both, connected.
struct Pair {
    server: RpcEnv,
    client: RpcEnv,
    echo: EndpointRef,
    ack: EndpointRef,
}

impl Pair {
    fn new(conf: &Conf) -> Pair {
        let server = RpcEnv::new(conf).unwrap();
        server.handle().register("echo", Echo::default()).unwrap();
        server.handle().register("ack", Acker).unwrap();
        let client = RpcEnv::new(conf).unwrap();
        let echo = client.handle().endpoint_ref(server.address(), "echo");
        let ack = client.handle().endpoint_ref(server.address(), "ack");
        // The handshake is not part of any figure.
        echo.ask(&payload_message()).expect("the pair connects");
        Pair {
            server,
            client,
            echo,
            ack,
        }
    }

    fn stop(self) {
        self.client.stop();
        self.server.stop();
    }
}

fn crypto(c: &mut Criterion) {
    let pairs: Vec<(&str, Pair)> = confs()
        .iter()
        .map(|(name, conf)| (*name, Pair::new(conf)))
        .collect();

    let request = payload_message();
    let mut group = c.benchmark_group("crypto_ask_round_trip");
    for (name, pair) in &pairs {
        group.bench_function(*name, |b| {
            b.iter(|| black_box(pair.echo.ask(&request).unwrap()))
        });
    }
    group.finish();

    let large = Message::Custom {
        tag: 1,
        body: Bytes::from(vec![7u8; LARGE]),
    };
    let mut group = c.benchmark_group("crypto_large_ask");
    group.sample_size(20);
    group.throughput(Throughput::Bytes(LARGE as u64));
    for (name, pair) in &pairs {
        group.bench_function(*name, |b| {
            b.iter(|| black_box(pair.ack.ask(&large).unwrap()))
        });
    }
    group.finish();

    for (_, pair) in pairs {
        pair.stop();
    }
}

criterion_group!(benches, crypto);
criterion_main!(benches);
