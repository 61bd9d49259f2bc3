//! Bodies of the fuzz targets, and sample messages of every kind.
//!
//! They live in the library so that the cargo-fuzz targets (in `fuzz/`) and the stable
//! test that replays the committed corpus run the very same code. Not part of the API.

use bytes::{Bytes, BytesMut};
use rkyv::rancor;

use crate::{
    validate_envelope, AccumulatorUpdate, BlockId, BlockManagerId, Dependency, Encoder, Envelope,
    ExecutorLossReason, FrameDecoder, Heartbeat, Message, MessageKind, Property, RegisterExecutor,
    Route, StatusUpdate, TaskAccumUpdates, TaskDescription, TaskMetrics, TaskOutcome, TaskState,
    WireError, FRAME_ALIGN,
};

/// Payload limit the fuzz targets decode with: small, so that the limit check is reached.
pub const FUZZ_MAX_PAYLOAD: usize = 64 * 1024;

/// Target `decode_stream`: the first byte picks a chunking, the rest is a byte stream fed
/// to a decoder in chunks. Checks that nothing panics, that every yielded frame is
/// aligned and validated or refused cleanly, and that a decoder stays closed after an
/// error.
pub fn decode_stream(data: &[u8]) {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let mut decoder = FrameDecoder::new(FUZZ_MAX_PAYLOAD);
    let mut rest = stream;
    let mut step = 0usize;
    let mut failed = false;
    while !rest.is_empty() {
        // Chunk sizes from 1 byte up, varying with the mode byte and the position.
        let size = 1 + ((mode as usize).wrapping_mul(31).wrapping_add(step * 7) % 97);
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        rest = tail;
        step += 1;
        if decoder.feed(chunk).is_err() {
            assert!(failed, "feed refused bytes before any error");
            return;
        }
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    assert_eq!(frame.payload().as_ptr() as usize % FRAME_ALIGN, 0);
                    if let Ok(envelope) = frame.envelope() {
                        assert_eq!(envelope.message.kind(), frame.kind());
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    assert!(matches!(decoder.next_frame(), Err(WireError::Closed(_))));
                    break;
                }
            }
        }
    }
    let _ = decoder.finish();
}

/// Target `validate`: the first byte is a message kind code, the rest a payload. Checks
/// that validation never panics, that whatever validates deserializes, re-encodes and
/// validates again to the same message, and that a task's serialized form (what an
/// executor parses next) is read without panicking.
pub fn validate(data: &[u8]) {
    let Some((&code, payload)) = data.split_first() else {
        return;
    };
    let Some(kind) = MessageKind::from_code(code) else {
        return;
    };
    // Place the payload at an aligned address, as the decoder does.
    let mut aligned = rkyv::util::AlignedVec::<FRAME_ALIGN>::with_capacity(payload.len());
    aligned.extend_from_slice(payload);
    let Ok(archived) = validate_envelope(kind, &aligned) else {
        return;
    };
    if let crate::ArchivedMessage::LaunchTask(task) = &archived.message {
        if let Ok(parsed) = crate::TaskPayload::parse(task.serialized_task.as_slice()) {
            assert!(parsed.function.len() <= crate::MAX_FUNCTION_NAME);
        }
    }
    let owned: Envelope = rkyv::deserialize::<Envelope, rancor::Error>(archived)
        .expect("a validated archive deserializes");
    let mut out = BytesMut::new();
    let mut encoder = Encoder::new(usize::MAX);
    encoder
        .encode(&owned.route, &owned.message, &mut out)
        .expect("a deserialized message encodes");
    let mut decoder = FrameDecoder::new(usize::MAX);
    decoder.feed(&out).expect("fresh decoder");
    let frame = decoder
        .next_frame()
        .expect("re-encoded frame decodes")
        .expect("whole frame");
    let again: Envelope = rkyv::deserialize::<Envelope, rancor::Error>(
        frame.envelope().expect("re-encoded frame validates"),
    )
    .expect("deserializes");
    assert_eq!(owned, again);
}

/// A plausible message of `kind`, for seed corpora, benches and tests.
pub fn sample_message(kind: MessageKind) -> Message {
    let executor_id: crate::SharedStr = "exec-7".into();
    let metrics = TaskMetrics {
        deserialize_time_ns: 1_200,
        run_time_ns: 250_000,
        cpu_time_ns: 240_000,
        result_size: 16,
        input_bytes: 4096,
        output_bytes: 0,
    };
    match kind {
        MessageKind::RegisterExecutor => Message::RegisterExecutor(RegisterExecutor {
            executor_id,
            executor_address: "127.0.0.1:40123".into(),
            endpoint_name: "Executor".into(),
            hostname: "127.0.0.1".into(),
            cores: 4,
            log_urls: vec![Property {
                key: "stdout".into(),
                value: "file:///tmp/flint/exec-7/stdout".into(),
            }],
        }),
        MessageKind::RegisteredExecutor => Message::RegisteredExecutor,
        MessageKind::RegisterExecutorFailed => Message::RegisterExecutorFailed {
            message: "Duplicate executor ID: exec-7".into(),
        },
        MessageKind::LaunchTask => Message::LaunchTask(sample_task_with_dependencies(100)),
        MessageKind::StatusUpdate => Message::StatusUpdate(StatusUpdate {
            executor_id,
            task_id: 17,
            state: TaskState::Finished,
            outcome: TaskOutcome::Direct {
                value: Bytes::from_static(b"0123456789abcdef"),
                metrics,
                accumulators: vec![],
            },
        }),
        MessageKind::KillTask => Message::KillTask {
            task_id: 17,
            executor_id,
            interrupt_thread: true,
            reason: "stage cancelled".into(),
        },
        MessageKind::KillExecutorsOnHost => Message::KillExecutorsOnHost {
            host: "10.0.0.3".into(),
        },
        MessageKind::ReviveOffers => Message::ReviveOffers,
        MessageKind::StopDriver => Message::StopDriver,
        MessageKind::StopExecutors => Message::StopExecutors,
        MessageKind::StopExecutor => Message::StopExecutor,
        MessageKind::RemoveExecutor => Message::RemoveExecutor {
            executor_id,
            reason: ExecutorLossReason::SlaveLost {
                message: "Remote RPC client disassociated. Likely due to containers exceeding \
                          thresholds, or network issues. Check driver logs for WARN messages."
                    .into(),
                worker_lost: false,
            },
        },
        MessageKind::RemoveWorker => Message::RemoveWorker {
            worker_id: "worker-1".into(),
            host: "10.0.0.3".into(),
            message: "worker lost".into(),
        },
        MessageKind::Shutdown => Message::Shutdown,
        MessageKind::Heartbeat => Message::Heartbeat(Heartbeat {
            executor_id: executor_id.clone(),
            accum_updates: vec![TaskAccumUpdates {
                task_id: 17,
                metrics,
                accumulators: vec![AccumulatorUpdate {
                    id: 3,
                    name: Some("records".into()),
                    value: 1000,
                }],
            }],
            block_manager_id: BlockManagerId {
                executor_id,
                host: "127.0.0.1".into(),
                port: 40123,
            },
        }),
        MessageKind::HeartbeatResponse => Message::HeartbeatResponse {
            reregister_block_manager: false,
        },
        MessageKind::FetchBlockChunk => Message::FetchBlockChunk {
            block_id: BlockId::TaskResult { task_id: 17 },
            offset: 0,
            max_len: 512 * 1024,
        },
        MessageKind::BlockChunk => Message::BlockChunk {
            block_id: BlockId::TaskResult { task_id: 17 },
            offset: 0,
            total_size: 64,
            data: Bytes::from(vec![0xAB; 64]),
        },
        MessageKind::RemoveBlock => Message::RemoveBlock {
            block_id: BlockId::TaskResult { task_id: 17 },
        },
        MessageKind::Ack => Message::Ack { ok: true },
        MessageKind::Empty => Message::Empty,
        MessageKind::AuthChallenge => Message::AuthChallenge { nonce: [0x11; 32] },
        MessageKind::AuthResponse => Message::AuthResponse {
            nonce: [0x22; 32],
            proof: [0x33; 32],
        },
        MessageKind::AuthProof => Message::AuthProof { proof: [0x44; 32] },
        MessageKind::Custom => Message::Custom {
            tag: 9,
            body: Bytes::from_static(b"application bytes"),
        },
    }
}

/// A task description as flint's scheduler sends it: no added files, jars or
/// properties, and a serialized task of `payload_len` bytes.
pub fn sample_task(payload_len: usize) -> TaskDescription {
    TaskDescription {
        task_id: 17,
        attempt_number: 0,
        executor_id: "exec-7".into(),
        name: "task 3.0 in stage 1.0 (TID 17)".into(),
        index: 3,
        partition_id: 3,
        added_files: vec![],
        added_jars: vec![],
        properties: vec![],
        cpus: 1,
        serialized_task: Bytes::from(vec![0x5A; payload_len]),
    }
}

/// [`sample_task`] with one added file, one added jar and one property.
pub fn sample_task_with_dependencies(payload_len: usize) -> TaskDescription {
    TaskDescription {
        added_files: vec![Dependency {
            name: "file:///data/lookup.csv".into(),
            timestamp: 1_700_000_000_000,
        }],
        added_jars: vec![Dependency {
            name: "file:///jobs/udfs.jar".into(),
            timestamp: 1_700_000_000_001,
        }],
        properties: vec![Property {
            key: "flint.job.description".into(),
            value: "count".into(),
        }],
        ..sample_task(payload_len)
    }
}

/// The route a sample of `kind` travels on.
pub fn sample_route(kind: MessageKind) -> Route {
    match kind {
        MessageKind::Ack => Route::Reply { request_id: 41 },
        MessageKind::Empty => Route::ErrorReply {
            request_id: 42,
            error: "Executor is blacklisted: exec-7".into(),
        },
        MessageKind::RegisterExecutor | MessageKind::FetchBlockChunk => Route::Ask {
            request_id: 40,
            endpoint: "CoarseGrainedScheduler".into(),
        },
        _ => Route::OneWay {
            endpoint: "CoarseGrainedScheduler".into(),
        },
    }
}

/// One encoded frame of every message kind, in code order.
pub fn sample_frames() -> Vec<(MessageKind, Bytes)> {
    let mut encoder = Encoder::new(usize::MAX);
    MessageKind::ALL
        .iter()
        .map(|&kind| {
            let mut out = BytesMut::new();
            encoder
                .encode(&sample_route(kind), &sample_message(kind), &mut out)
                .expect("samples encode");
            (kind, out.freeze())
        })
        .collect()
}
