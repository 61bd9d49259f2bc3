//! Writes the seed corpus of the fuzz targets: a valid frame of every message kind.
//!
//! `cargo run -p flint-wire --example make_fuzz_corpus -- fuzz/corpus`
//!
//! For `decode_stream` (input format: `flint_wire::fuzzing::StreamInput`) each seed
//! `seed-<Kind>` is one frame of that kind under a chunk schedule that varies from kind to
//! kind: through `feed`, `read_from` or `read_uninit_from`, whole or in single bytes, split at the header, in
//! chunks larger than the frame, with reads that would block and with frames left waiting
//! across a read. `seed-all-kinds` holds every frame in one stream read through
//! `read_from`, `seed-all-kinds-uninit` through `read_uninit_from`, `seed-all-kinds-feed`
//! the same stream fed. For `validate` each seed is the
//! kind byte and the payload; `outcome-<Variant>` seeds add status updates whose outcome
//! is not the sample's, so that the fuzzer starts from every outcome's layout.

use std::path::PathBuf;

use flint_wire::fuzzing::{sample_frames, sample_route, Chunk, StreamInput};
use flint_wire::{
    BlockManagerId, Encoder, FetchFailure, Message, MessageKind, StatusUpdate, TaskFailureKind,
    TaskMetrics, TaskOutcome, TaskState, HEADER_LEN,
};

fn chunk(len: usize, keep: bool) -> Chunk {
    Chunk { len, keep }
}

/// A chunk schedule for a stream whose frames are `frame_len` bytes or so, picked by `n`.
fn schedule(n: usize, frame_len: usize) -> Vec<Chunk> {
    match n % 5 {
        // All at once, or at the decoder's pace.
        0 => vec![],
        // One byte at a time.
        1 => vec![chunk(1, false)],
        // The header, then the rest.
        2 => vec![chunk(HEADER_LEN, false), chunk(frame_len, false)],
        // A read that would block, part of the header, then more than the frame, twice
        // without taking frames in between.
        3 => vec![
            chunk(0, false),
            chunk(7, true),
            chunk(frame_len + 100, true),
            chunk(frame_len + 100, false),
        ],
        // Odd sizes, frames left waiting every other chunk.
        _ => vec![chunk(13, true), chunk(frame_len / 2 + 5, false)],
    }
}

fn main() -> std::io::Result<()> {
    let root = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    let stream_dir = root.join("decode_stream");
    let validate_dir = root.join("validate");
    std::fs::create_dir_all(&stream_dir)?;
    std::fs::create_dir_all(&validate_dir)?;
    let mut all = Vec::new();
    for (n, (kind, frame)) in sample_frames().into_iter().enumerate() {
        let name = kind.name();
        let stream_seed = StreamInput {
            read_from: n % 3 != 0,
            uninit: n % 3 == 2,
            fix_crcs: false,
            small: false,
            preallocate: false,
            chunks: schedule(n, frame.len()),
            stream: &frame,
        };
        std::fs::write(
            stream_dir.join(format!("seed-{name}")),
            stream_seed.to_bytes(),
        )?;
        all.extend_from_slice(&frame);

        let payload_len = u32::from_le_bytes(frame[12..16].try_into().expect("4 bytes")) as usize;
        let mut validate_seed = vec![kind as u8];
        validate_seed.extend_from_slice(&frame[HEADER_LEN..HEADER_LEN + payload_len]);
        std::fs::write(validate_dir.join(format!("seed-{name}")), validate_seed)?;
    }
    // Chunks that straddle frames, some larger than several frames, with frames left
    // waiting. The first three are the reads that once underflowed `read_from`: a header
    // made pending, then a read beyond its frame, then another read before taking frames.
    let mixed = vec![
        chunk(HEADER_LEN + 4, false),
        chunk(2000, true),
        chunk(64, false),
        chunk(5, false),
        chunk(0, false),
        chunk(300, true),
        chunk(1, false),
    ];
    // One with each frame's CRC made right before decoding, so that mutations of its
    // payloads reach validation; one with room made for each pending frame before reads,
    // as the event loop does for large frames.
    for (file, read_from, uninit, fix_crcs, preallocate) in [
        ("seed-all-kinds", true, false, false, false),
        ("seed-all-kinds-uninit", true, true, false, false),
        ("seed-all-kinds-feed", false, false, false, false),
        ("seed-all-kinds-fixed-crcs", true, true, true, false),
        ("seed-all-kinds-preallocated", true, true, false, true),
    ] {
        let seed = StreamInput {
            read_from,
            uninit,
            fix_crcs,
            small: false,
            preallocate,
            chunks: mixed.clone(),
            stream: &all,
        };
        std::fs::write(stream_dir.join(file), seed.to_bytes())?;
    }
    // A small decoder (not a seed: its larger frames are refused) given every kind in
    // reads of up to 64 bytes, frames left waiting for 15 reads in 16: reads reach the
    // receive buffer's bound (a 512-byte frame and one read).
    let small = StreamInput {
        read_from: true,
        uninit: true,
        fix_crcs: false,
        small: true,
        preallocate: false,
        chunks: (0..16).map(|n| chunk(64, n % 16 != 15)).collect(),
        stream: &all,
    };
    std::fs::write(stream_dir.join("small-decoder-all-kinds"), small.to_bytes())?;
    for (name, outcome) in other_outcomes() {
        let mut frame = bytes::BytesMut::new();
        let update = Message::StatusUpdate(StatusUpdate {
            executor_id: "exec-7".into(),
            task_id: 17,
            state: TaskState::Failed,
            outcome,
        });
        Encoder::new(usize::MAX)
            .encode(
                &sample_route(MessageKind::StatusUpdate),
                &update,
                &mut frame,
            )
            .expect("samples encode");
        let payload_len = u32::from_le_bytes(frame[12..16].try_into().expect("4 bytes")) as usize;
        let mut validate_seed = vec![MessageKind::StatusUpdate as u8];
        validate_seed.extend_from_slice(&frame[HEADER_LEN..HEADER_LEN + payload_len]);
        std::fs::write(validate_dir.join(format!("outcome-{name}")), validate_seed)?;
    }
    Ok(())
}

/// Status update outcomes other than the sample's `Direct`.
fn other_outcomes() -> Vec<(&'static str, TaskOutcome)> {
    let fetch_failed =
        |address: Option<BlockManagerId>, map_index: Option<u32>| TaskOutcome::FetchFailed {
            failure: Box::new(FetchFailure {
                address,
                shuffle_id: 3,
                map_index,
                reduce_id: 5,
                message: "Failed to connect to 10.0.0.3:7337".into(),
            }),
            metrics: TaskMetrics::default(),
        };
    let holder = BlockManagerId {
        executor_id: "exec-3".into(),
        host: "10.0.0.3".into(),
        port: 7337,
    };
    vec![
        ("FetchFailed", fetch_failed(Some(holder), Some(2))),
        ("FetchFailed-metadata", fetch_failed(None, None)),
        (
            "Failure",
            TaskOutcome::Failure {
                kind: TaskFailureKind::Exception,
                message: "java.lang.ArithmeticException: / by zero".into(),
                counts_towards_failures: true,
                metrics: TaskMetrics::default(),
            },
        ),
    ]
}
