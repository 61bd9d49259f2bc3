//! Codec costs per message: encode, and decode plus validate, of a LaunchTask with a
//! 100-byte task payload as flint's scheduler sends it, of the same with one added file,
//! jar and property, and of a StatusUpdate, each beside a plain copy of the same frame
//! bytes (the floor any decoder pays to get bytes into its buffer).
//!
//! `cargo bench --bench codec`

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use flint_wire::fuzzing::{
    sample_message, sample_route, sample_task, sample_task_with_dependencies,
};
use flint_wire::{ArchivedMessage, Encoder, FrameDecoder, Message, MessageKind, Route};

fn bench_message(c: &mut Criterion, name: &str, route: Route, message: Message) {
    let limit = flint_wire::DEFAULT_MAX_MESSAGE_SIZE;
    let mut encoder = Encoder::new(limit);
    let mut frame = BytesMut::new();
    encoder.encode(&route, &message, &mut frame).unwrap();
    let frame = frame.freeze();

    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(frame.len() as u64));

    let mut out = BytesMut::with_capacity(4096);
    group.bench_function("encode", |b| {
        b.iter(|| {
            out.clear();
            encoder
                .encode(black_box(&route), black_box(&message), &mut out)
                .unwrap();
            black_box(out.len())
        })
    });

    let mut decoder = FrameDecoder::new(limit);
    group.bench_function("decode_validate", |b| {
        b.iter(|| {
            decoder.feed(black_box(&frame)).unwrap();
            let frame = decoder.next_frame().unwrap().unwrap();
            let envelope = frame.envelope().unwrap();
            let blob = match &envelope.message {
                ArchivedMessage::LaunchTask(task) => task.serialized_task.len(),
                ArchivedMessage::StatusUpdate(update) => update.task_id.to_native() as usize,
                _ => 0,
            };
            black_box(blob)
        })
    });

    let mut copy = BytesMut::with_capacity(4096);
    group.bench_function("baseline_copy", |b| {
        b.iter(|| {
            copy.clear();
            copy.extend_from_slice(black_box(&frame));
            black_box(copy.len())
        })
    });
    group.finish();
}

fn codec(c: &mut Criterion) {
    bench_message(
        c,
        "launch_task_100b",
        sample_route(MessageKind::LaunchTask),
        Message::LaunchTask(sample_task(100)),
    );
    bench_message(
        c,
        "launch_task_100b_with_dependencies",
        sample_route(MessageKind::LaunchTask),
        Message::LaunchTask(sample_task_with_dependencies(100)),
    );
    bench_message(
        c,
        "status_update",
        sample_route(MessageKind::StatusUpdate),
        sample_message(MessageKind::StatusUpdate),
    );
}

criterion_group!(benches, codec);
criterion_main!(benches);
