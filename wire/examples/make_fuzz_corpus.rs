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
//! is not the sample's (an indirect result with accumulators among them), so that the fuzzer starts from every outcome's layout, and
//! `stage-LaunchTask`, `mapstatus-StatusUpdate` and `keyed-ShuffleBlock` messages whose
//! opaque bytes are a stage task with map statuses, a map status and keyed records. For
//! `user_message` each `seed-tree-<depth>` is the archive of a sample user type
//! (`flint_wire::fuzzing::UserTree`), and `too-deep-tree-200` one deeper than
//! `MAX_BODY_DEPTH`.

use std::path::PathBuf;

use flint_wire::fuzzing::{
    sample_frames, sample_route, sample_task, sample_user_tree, Chunk, StreamInput,
};
use flint_wire::records::put_keyed;
use flint_wire::{
    AccumulatorUpdate, AccumulatorValue, BlockId, BlockManagerId, Encoder, FetchFailure,
    KnownStatuses, MapStatus, Message, ShuffleRead, ShuffleStatuses, ShuffleWrite, StatusUpdate,
    TaskDescription, TaskFailureKind, TaskMetrics, TaskOutcome, TaskPayload, TaskState, HEADER_LEN,
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
        let update = Message::StatusUpdate(StatusUpdate {
            executor_id: "exec-7".into(),
            task_id: 17,
            state: TaskState::Failed,
            outcome,
        });
        std::fs::write(
            validate_dir.join(format!("outcome-{name}")),
            validate_seed(&update),
        )?;
    }
    for (name, message) in shuffle_payloads() {
        std::fs::write(validate_dir.join(name), validate_seed(&message))?;
    }
    // For `user_message`: archives of the sample user type, valid ones of growing depth,
    // and one deeper than MAX_BODY_DEPTH (refused, so not a seed).
    let user_dir = root.join("user_message");
    std::fs::create_dir_all(&user_dir)?;
    for (name, depth) in [
        ("seed-tree-0", 0),
        ("seed-tree-1", 1),
        ("seed-tree-3", 3),
        ("seed-tree-12", 12),
        ("seed-tree-60", 60),
        ("too-deep-tree-200", 200),
    ] {
        let archive = rkyv::to_bytes::<rkyv::rancor::Error>(&sample_user_tree(depth))
            .expect("the sample tree serializes");
        std::fs::write(user_dir.join(name), archive.as_slice())?;
    }
    Ok(())
}

/// A `validate` seed: the message's kind byte and its frame's payload.
fn validate_seed(message: &Message) -> Vec<u8> {
    let kind = message.kind();
    let mut frame = bytes::BytesMut::new();
    Encoder::new(usize::MAX)
        .encode(&sample_route(kind), message, &mut frame)
        .expect("samples encode");
    let payload_len = u32::from_le_bytes(frame[12..16].try_into().expect("4 bytes")) as usize;
    let mut seed = vec![kind as u8];
    seed.extend_from_slice(&frame[HEADER_LEN..HEADER_LEN + payload_len]);
    seed
}

/// Messages whose opaque bytes hold the shuffle's own encodings, so that the fuzzer
/// starts from them too: a stage task carrying map statuses (`stage-LaunchTask`), a map
/// task's result value (`mapstatus-StatusUpdate`), a block of keyed records
/// (`keyed-ShuffleBlock`).
fn shuffle_payloads() -> Vec<(&'static str, Message)> {
    let status = MapStatus {
        location: BlockManagerId {
            executor_id: "exec-3".into(),
            host: "10.0.0.3".into(),
            port: 7337,
        },
        sizes: vec![120, 0, 4096],
    };
    let known = KnownStatuses {
        shuffles: vec![ShuffleStatuses {
            shuffle_id: 3,
            statuses: vec![Some(status.clone()), None],
        }],
    };
    let serialized_task = TaskPayload::encode_stage(
        "shuffle-count",
        b"input",
        5,
        Some(ShuffleWrite {
            shuffle_id: 4,
            partitions: 3,
        }),
        &[ShuffleRead {
            shuffle_id: 3,
            maps: 2,
        }],
        &known.encode(),
    )
    .expect("a valid stage task");
    let launch = Message::LaunchTask(TaskDescription {
        serialized_task,
        ..sample_task(0)
    });
    let map_output = Message::StatusUpdate(StatusUpdate {
        executor_id: "exec-3".into(),
        task_id: 18,
        state: TaskState::Finished,
        outcome: TaskOutcome::Direct {
            value: status.encode(),
            metrics: TaskMetrics::default(),
            accumulators: vec![],
        },
    });
    let mut block = bytes::BytesMut::new();
    put_keyed(&mut block, b"flint", b"\x02\x00\x00\x00\x00\x00\x00\x00");
    put_keyed(&mut block, b"", b"");
    let total_size = block.len() as u64;
    let keyed = Message::ShuffleBlock {
        offset: 0,
        total_size,
        data: block.freeze(),
    };
    vec![
        ("stage-LaunchTask", launch),
        ("mapstatus-StatusUpdate", map_output),
        ("keyed-ShuffleBlock", keyed),
    ]
}

/// Status update outcomes other than the sample's `Direct` (an `Indirect` one with
/// accumulator values of each kind).
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
    let indirect = TaskOutcome::Indirect {
        block_id: BlockId::TaskResult { task_id: 17 },
        size: 300 << 20,
        metrics: TaskMetrics::default(),
        accumulators: vec![
            AccumulatorUpdate {
                id: 1,
                name: None,
                value: AccumulatorValue::Long(-7),
            },
            AccumulatorUpdate {
                id: 2,
                name: Some("seconds".into()),
                value: AccumulatorValue::double(0.25),
            },
            AccumulatorUpdate {
                id: 3,
                name: None,
                value: AccumulatorValue::Bytes(vec![1, 2, 3]),
            },
        ],
    };
    vec![
        ("Indirect", indirect),
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
