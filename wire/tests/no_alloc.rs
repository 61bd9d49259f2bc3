//! Encoding and decoding the hot-path messages allocates nothing once warmed up.
//!
//! A counting global allocator counts allocations made on this test's thread while a
//! flag is set; the loop encodes a LaunchTask and a StatusUpdate into a reused buffer,
//! decodes and validates both, and reads their blobs as views of the frames.

use bytes::BytesMut;
use flint_testkit::alloc::{counted, CountingAllocator};
use flint_wire::fuzzing::{sample_message, sample_route};
use flint_wire::{ArchivedMessage, Encoder, FrameDecoder, MessageKind};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations_during(f: impl FnOnce()) -> u64 {
    counted(f).1.calls
}

#[test]
fn steady_state_encode_and_decode_allocate_nothing() {
    let limit = flint_wire::DEFAULT_MAX_MESSAGE_SIZE;
    let launch = sample_message(MessageKind::LaunchTask);
    let launch_route = sample_route(MessageKind::LaunchTask);
    let status = sample_message(MessageKind::StatusUpdate);
    let status_route = sample_route(MessageKind::StatusUpdate);
    let mut encoder = Encoder::new(limit);
    let mut decoder = FrameDecoder::new(limit);
    let mut out = BytesMut::with_capacity(4096);
    let mut blob_bytes = 0usize;

    let mut round = |encoder: &mut Encoder, decoder: &mut FrameDecoder, out: &mut BytesMut| {
        out.clear();
        encoder.encode(&launch_route, &launch, out).unwrap();
        encoder.encode(&status_route, &status, out).unwrap();
        decoder.feed(out).unwrap();
        let mut frames = 0;
        while let Some(frame) = decoder.next_frame().unwrap() {
            let envelope = frame.envelope().unwrap();
            match &envelope.message {
                ArchivedMessage::LaunchTask(task) => {
                    blob_bytes += frame.bytes_of(task.serialized_task.as_slice()).len();
                }
                ArchivedMessage::StatusUpdate(update) => {
                    assert_eq!(update.task_id, 17);
                }
                other => panic!("unexpected {other:?}"),
            }
            frames += 1;
        }
        assert_eq!(frames, 2);
    };

    for _ in 0..100 {
        round(&mut encoder, &mut decoder, &mut out);
    }
    let allocations = allocations_during(|| {
        for _ in 0..10_000 {
            round(&mut encoder, &mut decoder, &mut out);
        }
    });
    assert_eq!(
        allocations, 0,
        "encode + decode of LaunchTask and StatusUpdate allocated {allocations} times in 10,000 rounds"
    );
    assert_eq!(blob_bytes, 10_100 * 100);
}

#[test]
fn the_counter_sees_allocations() {
    // Guards the test above against a counter that cannot count.
    let allocations = allocations_during(|| {
        let v: Vec<u8> = Vec::with_capacity(64);
        std::hint::black_box(v);
    });
    assert_eq!(allocations, 1);
}
