//! Encoding and decoding the hot-path messages allocates nothing once warmed up.
//!
//! A counting global allocator counts allocations made on this test's thread while a
//! flag is set; the loop encodes a LaunchTask and a StatusUpdate into a reused buffer,
//! decodes and validates both, and reads their blobs as views of the frames.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::BytesMut;
use flint_wire::fuzzing::{sample_message, sample_route};
use flint_wire::{ArchivedMessage, Encoder, FrameDecoder, MessageKind};

struct CountingAllocator;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note_allocation() {
    // `try_with`: the thread-locals may be gone while a thread shuts down.
    let _ = COUNTING.try_with(|counting| {
        if counting.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the bookkeeping
// touches only const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's obligations for `alloc` are passed on as they are.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: `ptr` was allocated by `System` with `layout`, as the caller promises.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`, as the caller promises.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations_during(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCATIONS.with(|n| n.get())
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
