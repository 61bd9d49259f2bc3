//! Bodies of the fuzz targets, and sample messages of every kind.
//!
//! They live in the library so that the cargo-fuzz targets (in `fuzz/`) and the stable
//! test that replays the committed corpus run the very same code. Not part of the API.

use bytes::{Bytes, BytesMut};
use rkyv::rancor;

use crate::header::{padded_frame_len, CRC_START, HEADER_LEN};
use crate::{
    validate_envelope, AccumulatorUpdate, AccumulatorValue, BlockId, BlockManagerId, Dependency,
    Encoder, Envelope, ExecutorLossReason, Frame, FrameDecoder, Heartbeat, MapStatus, Message,
    MessageKind, Property, RegisterExecutor, Route, StatusUpdate, TaskAccumUpdates,
    TaskDescription, TaskExtras, TaskMetrics, TaskName, TaskOutcome, TaskState, WireError,
    FRAME_ALIGN,
};

/// Payload limit the fuzz targets decode with: small, so that the limit check is reached.
pub const FUZZ_MAX_PAYLOAD: usize = 64 * 1024;

/// Payload limit of a `decode_stream` input's small decoder (mode bit 3).
pub const SMALL_MAX_PAYLOAD: usize = 512;

/// The decoder a `decode_stream` input asks for.
fn fuzz_decoder(small: bool) -> FrameDecoder {
    if small {
        FrameDecoder::new(SMALL_MAX_PAYLOAD).with_read_sizes(16, 64)
    } else {
        FrameDecoder::new(FUZZ_MAX_PAYLOAD)
    }
}

/// The longest chunk a `decode_stream` input can ask for (15 bits).
pub const MAX_CHUNK: usize = 0x7FFF;

/// Bit of a chunk entry that leaves whole frames in the decoder after that chunk.
const KEEP_BIT: u16 = 0x8000;

/// One chunk of the stream as a [`decode_stream`] input schedules it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Bytes the chunk carries; 0 is a read that would block (or an empty feed).
    pub len: usize,
    /// Leave whole frames in the decoder after this chunk instead of taking them all
    /// with `next_frame`, so that the next read or feed comes with frames waiting.
    pub keep: bool,
}

/// A parsed [`decode_stream`] input.
///
/// ```text
/// byte 0      mode: bit 0 set = the stream comes through reads from an in-memory reader,
///             as in the event loop: FrameDecoder::read_uninit_from if bit 1 is set too
///             (as the event loop reads its sockets), else FrameDecoder::read_from;
///             bit 0 clear = through FrameDecoder::feed; bit 2 set = each frame's CRC
///             is made right before the stream is decoded (see below); bit 3 set = a
///             small decoder: payloads of at most [`SMALL_MAX_PAYLOAD`] bytes and reads
///             of 16 to 64 bytes, so that reads can fill the receive buffer to its bound;
///             bit 4 set = before each read, room for the whole pending frame is made
///             at once (FrameDecoder::preallocate_pending_frame), as the event loop
///             does for a large frame it has reserved memory for
/// byte 1      n, the number of chunk entries that follow
/// 2n bytes    the entries, u16 little-endian: bits 0..15 the chunk length (0: the read
///             would block, or an empty feed), bit 15 set: leave whole frames in the
///             decoder after this chunk
/// the rest    the byte stream
/// ```
///
/// With bit 2, the header of each frame, from the first on, gets the CRC of the bytes its
/// length says it covers, as long as they are all there: mutated payloads then get past
/// the CRC check to the archive's validation (else almost every mutation is refused by
/// the CRC, and the fuzzer keeps none of them to build on).
///
/// The entries are used in turn and then again from the first, zero-length ones only on
/// the first pass. With no entry of non-zero length left, the rest of the stream comes
/// in one feed, or in reads as large as the decoder asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInput<'a> {
    /// Whether the stream goes through reads (else through `feed`).
    pub read_from: bool,
    /// Whether those reads are `read_uninit_from` (else `read_from`).
    pub uninit: bool,
    /// Whether each frame's CRC is made right before decoding.
    pub fix_crcs: bool,
    /// Whether the decoder is a small one (see the format above).
    pub small: bool,
    /// Whether room for a pending frame is made at once before each read (see the
    /// format above).
    pub preallocate: bool,
    /// The chunk schedule.
    pub chunks: Vec<Chunk>,
    /// The bytes the decoder is given.
    pub stream: &'a [u8],
}

impl<'a> StreamInput<'a> {
    /// Splits fuzz input into mode, chunk schedule and stream; `None` if it is empty.
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let (&mode, rest) = data.split_first()?;
        let (count, rest) = match rest.split_first() {
            Some((&count, rest)) => (count as usize, rest),
            None => (0, rest),
        };
        let table_len = (count * 2).min(rest.len() & !1);
        let (table, stream) = rest.split_at(table_len);
        let chunks = table
            .chunks_exact(2)
            .map(|entry| {
                let entry = u16::from_le_bytes([entry[0], entry[1]]);
                Chunk {
                    len: usize::from(entry & !KEEP_BIT),
                    keep: entry & KEEP_BIT != 0,
                }
            })
            .collect();
        Some(StreamInput {
            read_from: mode & 1 != 0,
            uninit: mode & 3 == 3,
            fix_crcs: mode & 4 != 0,
            small: mode & 8 != 0,
            preallocate: mode & 16 != 0,
            chunks,
            stream,
        })
    }

    /// The input bytes that parse back to this (for writing seeds).
    ///
    /// # Panics
    ///
    /// With more than 255 chunks or a chunk longer than [`MAX_CHUNK`].
    pub fn to_bytes(&self) -> Vec<u8> {
        let count = u8::try_from(self.chunks.len()).expect("at most 255 chunks");
        let mode = u8::from(self.read_from)
            | u8::from(self.read_from && self.uninit) << 1
            | u8::from(self.fix_crcs) << 2
            | u8::from(self.small) << 3
            | u8::from(self.preallocate) << 4;
        let mut out = vec![mode, count];
        for chunk in &self.chunks {
            assert!(chunk.len <= MAX_CHUNK, "a chunk of {} bytes", chunk.len);
            let entry = chunk.len as u16 | if chunk.keep { KEEP_BIT } else { 0 };
            out.extend_from_slice(&entry.to_le_bytes());
        }
        out.extend_from_slice(self.stream);
        out
    }
}

/// Hands out the chunk schedule of a [`StreamInput`] in turn.
struct Schedule<'a> {
    chunks: &'a [Chunk],
    next: usize,
    first_pass: bool,
    /// Whether some chunk has a non-zero length.
    any_data: bool,
}

impl Schedule<'_> {
    /// The next chunk; its length is `usize::MAX` when no non-zero length is left.
    fn next(&mut self) -> Chunk {
        loop {
            if self.next == self.chunks.len() {
                self.next = 0;
                self.first_pass = false;
            }
            if !self.first_pass && !self.any_data {
                return Chunk {
                    len: usize::MAX,
                    keep: false,
                };
            }
            let chunk = self.chunks[self.next];
            self.next += 1;
            if chunk.len > 0 || self.first_pass {
                return chunk;
            }
        }
    }
}

/// An in-memory reader that returns at most `allow` bytes a read (0: would block).
struct ChunkReader<'a> {
    rest: &'a [u8],
    allow: usize,
}

// SAFETY: what is written into `buf` is written by the `&[u8]` implementation, which
// initializes every byte it counts; this one only chooses how much it may take.
#[allow(unsafe_code)]
unsafe impl crate::ReadUninit for ChunkReader<'_> {
    fn read_uninit(&mut self, buf: &mut [std::mem::MaybeUninit<u8>]) -> std::io::Result<usize> {
        if self.rest.is_empty() {
            return Ok(0);
        }
        if self.allow == 0 {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        let mut part = &self.rest[..self.allow.min(self.rest.len())];
        let n = part.read_uninit(buf)?;
        self.rest = &self.rest[n..];
        Ok(n)
    }
}

impl std::io::Read for ChunkReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.rest.is_empty() {
            return Ok(0);
        }
        if self.allow == 0 {
            return Err(std::io::ErrorKind::WouldBlock.into());
        }
        let n = self.allow.min(buf.len()).min(self.rest.len());
        buf[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        Ok(n)
    }
}

/// What a decoder made of a stream: the frames it yielded, then the error that closed
/// it, if one did (an end of stream inside a frame included).
#[derive(Debug, Clone)]
pub struct StreamOutcome {
    /// Every frame yielded, in order.
    pub frames: Vec<Frame>,
    /// The first error: from `next_frame`, a header check in `read_from`, or `finish`.
    pub error: Option<WireError>,
}

impl StreamOutcome {
    /// Whether both hold the same frames (headers and payload bytes) and the same error.
    pub fn same_as(&self, other: &StreamOutcome) -> bool {
        self.error == other.error
            && self.frames.len() == other.frames.len()
            && self
                .frames
                .iter()
                .zip(&other.frames)
                .all(|(a, b)| a.header() == b.header() && a.payload() == b.payload())
    }
}

/// Takes every whole frame, checking each; records the error if one comes.
fn drain(decoder: &mut FrameDecoder, outcome: &mut StreamOutcome) {
    loop {
        match decoder.next_frame() {
            Ok(Some(frame)) => {
                assert_eq!(frame.payload().as_ptr() as usize % FRAME_ALIGN, 0);
                if let Ok(envelope) = frame.envelope() {
                    assert_eq!(envelope.message.kind(), frame.kind());
                }
                outcome.frames.push(frame);
            }
            Ok(None) => return,
            Err(error) => {
                assert!(!matches!(error, WireError::Closed(_)), "{error}");
                assert_eq!(decoder.failure(), Some(&error));
                outcome.error = Some(error);
                return;
            }
        }
    }
}

/// `stream` with each whole frame's CRC made right, from the first frame on (the first
/// one whose length runs past the stream's end is left as it is, and what follows it).
fn with_fixed_crcs(stream: &[u8]) -> Vec<u8> {
    let mut fixed = stream.to_vec();
    let mut at = 0;
    while let Some(header) = fixed.get(at..at + HEADER_LEN) {
        let payload_len = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
        let covered_end = at
            .saturating_add(HEADER_LEN)
            .saturating_add(payload_len as usize);
        if covered_end > fixed.len() {
            break;
        }
        let crc = crc32fast::hash(&fixed[at + CRC_START..covered_end]);
        fixed[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        at = at.saturating_add(padded_frame_len(payload_len as usize));
    }
    fixed
}

/// The stream fed at once and every frame taken: what any chunking must give.
fn decode_at_once(stream: &[u8], small: bool) -> StreamOutcome {
    let mut decoder = fuzz_decoder(small);
    let mut outcome = StreamOutcome {
        frames: Vec::new(),
        error: None,
    };
    decoder.feed(stream).expect("a fresh decoder takes bytes");
    drain(&mut decoder, &mut outcome);
    if outcome.error.is_none() {
        outcome.error = decoder.finish().err();
    }
    outcome
}

/// Target `decode_stream`: a byte stream given to a decoder in the chunks, and through
/// the calls (`feed` or `read_from`, `next_frame` after a chunk or not), that the input
/// chooses (see [`StreamInput`]).
///
/// Checks that nothing panics; that the frames and the error are exactly those of the
/// stream fed at once; that every frame is aligned and validated or refused cleanly;
/// that `read_from` reads only what it reports and never takes the buffer beyond its
/// bound; and that a decoder stays closed after an error.
pub fn decode_stream(data: &[u8]) -> StreamOutcome {
    let mut outcome = StreamOutcome {
        frames: Vec::new(),
        error: None,
    };
    let Some(mut input) = StreamInput::parse(data) else {
        return outcome;
    };
    let fixed;
    if input.fix_crcs {
        fixed = with_fixed_crcs(input.stream);
        input.stream = &fixed;
    }
    let mut decoder = fuzz_decoder(input.small);
    let mut schedule = Schedule {
        chunks: &input.chunks,
        next: 0,
        first_pass: true,
        any_data: input.chunks.iter().any(|chunk| chunk.len > 0),
    };
    let mut reader = ChunkReader {
        rest: input.stream,
        allow: 0,
    };
    loop {
        let chunk = schedule.next();
        let mut must_drain = !chunk.keep;
        let mut at_end = false;
        reader.allow = chunk.len;
        let before = reader.rest.len();
        if input.read_from {
            if input.preallocate {
                let buffered = decoder.buffered();
                decoder.preallocate_pending_frame();
                assert_eq!(decoder.buffered(), buffered, "preallocating lost bytes");
                if let Some(frame_len) = decoder.pending_frame_len() {
                    assert!(decoder.buffer_capacity() >= frame_len);
                }
            }
            let read = if input.uninit {
                decoder.read_uninit_from(&mut reader)
            } else {
                decoder.read_from(&mut reader)
            };
            match read {
                Ok(0) => {
                    assert!(reader.rest.is_empty(), "end of stream before its end");
                    at_end = true;
                }
                Ok(n) => assert_eq!(before - reader.rest.len(), n),
                Err(error) => {
                    assert_eq!(
                        reader.rest.len(),
                        before,
                        "a failed read_from consumed bytes"
                    );
                    match error.kind() {
                        std::io::ErrorKind::WouldBlock => assert_eq!(chunk.len, 0),
                        // Whole frames fill the buffer: take them, as any caller must.
                        std::io::ErrorKind::InvalidInput => {
                            assert!(decoder.buffered() >= decoder.buffer_bound());
                            must_drain = true;
                        }
                        std::io::ErrorKind::InvalidData => {
                            let failure = decoder.failure().expect("InvalidData closes").clone();
                            outcome.error = Some(failure);
                            break;
                        }
                        kind => panic!("read_from failed with {kind:?}: {error}"),
                    }
                }
            }
            assert!(decoder.buffered() <= decoder.buffer_bound());
        } else {
            let n = chunk.len.min(reader.rest.len());
            let (bytes, rest) = reader.rest.split_at(n);
            reader.rest = rest;
            decoder
                .feed(bytes)
                .expect("feed refused bytes before any error");
            at_end = reader.rest.is_empty();
        }
        if must_drain || at_end {
            drain(&mut decoder, &mut outcome);
            if outcome.error.is_some() {
                break;
            }
        }
        if at_end {
            outcome.error = decoder.finish().err();
            break;
        }
    }
    let taken = input.stream.len() - reader.rest.len();
    assert_eq!(decoder.stats().bytes, taken as u64);
    if outcome.error.is_some() {
        // Closed: nothing more is taken, read or yielded.
        assert!(matches!(decoder.feed(b"FLNT"), Err(WireError::Closed(_))));
        assert!(matches!(decoder.next_frame(), Err(WireError::Closed(_))));
        reader.allow = usize::MAX;
        let before = reader.rest.len();
        let error = decoder.read_from(&mut reader).expect_err("closed");
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(reader.rest.len(), before);
    }
    let at_once = decode_at_once(input.stream, input.small);
    assert!(
        outcome.same_as(&at_once),
        "chunked: {} frames, {:?}; at once: {} frames, {:?}",
        outcome.frames.len(),
        outcome.error,
        at_once.frames.len(),
        at_once.error
    );
    outcome
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
    // What handlers ask before decoding lists (it must not panic on any valid archive).
    use crate::DecodedSize;
    let decoded_size = match &archived.message {
        launch @ (crate::ArchivedMessage::LaunchTask(_)
        | crate::ArchivedMessage::LaunchTasks { .. }) => {
            launch.launched_tasks().iter().fold(0usize, |size, task| {
                size.saturating_add(check_launched_task(task))
            })
        }
        crate::ArchivedMessage::Heartbeat(heartbeat) => heartbeat.accum_updates.decoded_size(),
        updates @ (crate::ArchivedMessage::StatusUpdate(_)
        | crate::ArchivedMessage::StatusUpdates { .. }) => updates
            .status_updates()
            .iter()
            .fold(0usize, |size, update| {
                size.saturating_add(check_status_update(update))
            }),
        crate::ArchivedMessage::MapOutputStatuses { statuses, .. } => statuses.decoded_size(),
        crate::ArchivedMessage::ShuffleBlock { data, .. } => {
            // A fetched block, as a reduce task reads it (plain or keyed records).
            let data = data.as_slice();
            let plain = crate::records::Records::new(data).take_while(Result::is_ok);
            let keyed = crate::records::KeyedRecords::new(data).take_while(Result::is_ok);
            plain.count().saturating_add(keyed.count())
        }
        _ => 0,
    };
    std::hint::black_box(decoded_size);
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

/// What an executor reads of a launched task before it runs it (the `validate` target's
/// checks of one task of [`crate::ArchivedMessage::LaunchTask`] or
/// [`crate::ArchivedMessage::LaunchTasks`]); returns its lists' decoded size.
fn check_launched_task(task: &crate::ArchivedTaskDescription) -> usize {
    use crate::DecodedSize;
    if let Ok(parsed) = crate::TaskPayload::parse(task.serialized_task.as_slice()) {
        assert!(parsed.function.len() <= crate::MAX_FUNCTION_NAME);
        if let Some(stage) = parsed.stage {
            std::hint::black_box(stage.reads().count());
            // The statuses a stage task carries, as its executor reads them.
            if !stage.statuses.is_empty() {
                if let Ok(known) = crate::KnownStatuses::decode(stage.statuses, 1 << 20) {
                    let again = crate::KnownStatuses::decode(&known.encode(), 1 << 20);
                    assert_eq!(again.as_ref(), Ok(&known));
                }
            }
        }
    }
    task.extras
        .added_files
        .decoded_size()
        .saturating_add(task.extras.added_jars.decoded_size())
        .saturating_add(task.extras.properties.decoded_size())
}

/// What the driver reads of a status update (the `validate` target's checks of one
/// update of [`crate::ArchivedMessage::StatusUpdate`] or
/// [`crate::ArchivedMessage::StatusUpdates`]); returns its lists' decoded size.
fn check_status_update(update: &crate::ArchivedStatusUpdate) -> usize {
    use crate::DecodedSize;
    match &update.outcome {
        crate::ArchivedTaskOutcome::Direct {
            value,
            accumulators,
            ..
        } => {
            // A map task's result value, as the driver reads it.
            if let Ok(status) = crate::MapStatus::decode(value.as_slice()) {
                assert_eq!(crate::MapStatus::decode(&status.encode()), Ok(status));
            }
            accumulators.decoded_size()
        }
        crate::ArchivedTaskOutcome::Indirect { accumulators, .. } => accumulators.decoded_size(),
        _ => 0,
    }
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
                accumulators: vec![
                    AccumulatorUpdate {
                        id: 3,
                        name: Some("records".into()),
                        value: AccumulatorValue::Long(1000),
                    },
                    AccumulatorUpdate {
                        id: 4,
                        name: None,
                        value: AccumulatorValue::double(2.5),
                    },
                    AccumulatorUpdate {
                        id: 5,
                        name: None,
                        value: AccumulatorValue::Bytes(b"longest".to_vec()),
                    },
                ],
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
        MessageKind::Refused => Message::Refused {
            reason: "authentication failed: expected AuthChallenge, got RegisterExecutor".into(),
        },
        MessageKind::Custom => Message::Custom {
            tag: 9,
            body: Bytes::from_static(b"application bytes"),
        },
        MessageKind::GetMapOutputStatuses => Message::GetMapOutputStatuses { shuffle_id: 3 },
        MessageKind::MapOutputStatuses => Message::MapOutputStatuses {
            shuffle_id: 3,
            epoch: 5,
            statuses: vec![
                Some(MapStatus {
                    location: BlockManagerId {
                        executor_id: "exec-7".into(),
                        host: "127.0.0.1".into(),
                        port: 40124,
                    },
                    sizes: vec![120, 0, 4096],
                }),
                None,
            ],
        },
        MessageKind::FetchShuffleBlock => Message::FetchShuffleBlock {
            shuffle_id: 3,
            map_index: 1,
            reduce_id: 2,
            offset: 0,
            max_len: 512 * 1024,
        },
        MessageKind::ShuffleBlock => Message::ShuffleBlock {
            offset: 0,
            total_size: 14,
            data: Bytes::from_static(b"\x05\x00\x00\x00hello\x01\x00\x00\x00!"),
        },
        MessageKind::RemoveShuffle => Message::RemoveShuffle { shuffle_id: 3 },
        MessageKind::GetBroadcastInfo => Message::GetBroadcastInfo { broadcast_id: 4 },
        MessageKind::BroadcastInfo => Message::BroadcastInfo(crate::BroadcastInfo {
            broadcast_id: 4,
            generation: 1,
            total_size: 10,
            piece_size: 4,
            checksums: vec![0x1234_5678, 0x9abc_def0, 7],
            holders: vec![crate::PieceHolder {
                location: BlockManagerId {
                    executor_id: "exec-7".into(),
                    host: "127.0.0.1".into(),
                    port: 40124,
                },
                pieces: vec![0, 2],
            }],
        }),
        MessageKind::FetchBroadcastPiece => Message::FetchBroadcastPiece {
            broadcast_id: 4,
            piece: 1,
        },
        MessageKind::BroadcastPiece => Message::BroadcastPiece {
            broadcast_id: 4,
            piece: 1,
            data: Bytes::from_static(b"abcd"),
        },
        MessageKind::BroadcastPieceStored => Message::BroadcastPieceStored {
            broadcast_id: 4,
            generation: 1,
            piece: 1,
            location: BlockManagerId {
                executor_id: "exec-7".into(),
                host: "127.0.0.1".into(),
                port: 40124,
            },
        },
        MessageKind::UnpersistBroadcast => Message::UnpersistBroadcast {
            broadcast_id: 4,
            generation: 2,
        },
        MessageKind::GetBlockServerStats => Message::GetBlockServerStats,
        MessageKind::BlockServerStats => Message::BlockServerStats {
            broadcast_bytes_served: 4 << 20,
            broadcast_pieces_served: 1,
        },
        MessageKind::LaunchTasks => Message::LaunchTasks {
            tasks: (0..3u32)
                .map(|i| TaskDescription {
                    task_id: 17 + u64::from(i),
                    index: 3 + i,
                    partition_id: 3 + i,
                    // Both layouts of a name: numbered, as the scheduler sends it, and
                    // text.
                    name: match i {
                        2 => TaskName::from("a name of the caller's"),
                        _ => sample_task(0).name,
                    },
                    ..sample_task(100)
                })
                .collect(),
        },
        MessageKind::StatusUpdates => Message::StatusUpdates {
            updates: (0..3u64)
                .map(|i| StatusUpdate {
                    executor_id: executor_id.clone(),
                    task_id: 17 + i,
                    state: TaskState::Finished,
                    outcome: TaskOutcome::Direct {
                        value: Bytes::from_static(b"0123456789abcdef"),
                        metrics,
                        accumulators: vec![],
                    },
                })
                .collect(),
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
        name: TaskName::Numbered {
            index: 3,
            attempt: 0,
            stage_id: 1,
            stage_attempt_id: 0,
            task_id: 17,
        },
        index: 3,
        partition_id: 3,
        extras: None,
        cpus: 1,
        serialized_task: Bytes::from(vec![0x5A; payload_len]),
    }
}

/// [`sample_task`] with one added file, one added jar and one property.
pub fn sample_task_with_dependencies(payload_len: usize) -> TaskDescription {
    let extras = TaskExtras {
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
    };
    TaskDescription {
        extras: extras.shared(),
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
        MessageKind::RegisterExecutor
        | MessageKind::FetchBlockChunk
        | MessageKind::GetMapOutputStatuses
        | MessageKind::FetchShuffleBlock
        | MessageKind::GetBroadcastInfo
        | MessageKind::FetchBroadcastPiece
        | MessageKind::GetBlockServerStats => Route::Ask {
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

/// An application's message type for the `user_message` target: recursive (depth is
/// bounded by [`crate::MAX_BODY_DEPTH`]), with strings, bytes, a `u128` (16-byte
/// alignment), options and an enum, as flint-rpc's typed user messages may be.
#[allow(missing_docs)]
mod sample_user {
    use rkyv::{Archive, Serialize};

    #[derive(Archive, Serialize, Debug, Clone)]
    #[rkyv(serialize_bounds(
        __S: rkyv::ser::Writer + rkyv::ser::Allocator,
        __S::Error: rkyv::rancor::Source,
    ))]
    #[rkyv(bytecheck(bounds(__C: rkyv::validation::ArchiveContext)))]
    pub enum UserTree {
        Leaf(String),
        Blob(Vec<u8>),
        Node {
            wide: u128,
            label: Option<String>,
            #[rkyv(omit_bounds)]
            children: Vec<UserTree>,
        },
        Boxed(#[rkyv(omit_bounds)] Option<Box<UserTree>>),
    }
}

pub use sample_user::{ArchivedUserTree, UserTree};

/// A tree of `depth` levels below its root, a node of every variant on the way.
pub fn sample_user_tree(depth: usize) -> UserTree {
    (0..depth).fold(UserTree::Leaf("leaf".into()), |inner, level| {
        match level % 3 {
            0 => UserTree::Node {
                wide: u128::MAX - level as u128,
                label: (level % 2 == 0).then(|| format!("level {level}, out of line")),
                children: vec![UserTree::Blob(vec![level as u8; level]), inner],
            },
            1 => UserTree::Boxed(Some(Box::new(inner))),
            _ => UserTree::Node {
                wide: level as u128,
                label: None,
                children: vec![inner],
            },
        }
    })
}

/// The `user_message` target: arbitrary bytes as the body of a user message, validated
/// as a [`UserTree`] where the decoder would place it (16-aligned) and one byte off.
/// Returns whether the aligned body validated; a valid tree is walked whole.
pub fn user_message(data: &[u8]) -> bool {
    let mut aligned = rkyv::util::AlignedVec::<{ crate::BODY_ALIGN }>::with_capacity(data.len());
    aligned.extend_from_slice(data);
    let valid = match crate::access_body::<ArchivedUserTree>(&aligned) {
        Ok(tree) => {
            std::hint::black_box(walk(tree));
            true
        }
        Err(error) => {
            std::hint::black_box(error.to_string());
            false
        }
    };
    // Misplaced by one byte: an error (or, for a body without aligned parts, the same
    // answer), never a panic or an unaligned read.
    let mut shifted =
        rkyv::util::AlignedVec::<{ crate::BODY_ALIGN }>::with_capacity(data.len() + 1);
    shifted.push(0);
    shifted.extend_from_slice(data);
    if let Ok(tree) = crate::access_body::<ArchivedUserTree>(&shifted[1..]) {
        std::hint::black_box(walk(tree));
    }
    valid
}

/// Reads every part of a validated tree (depth-bounded by validation, so recursion is).
/// The sum wraps: it exists to touch every byte, not to mean anything.
fn walk(tree: &ArchivedUserTree) -> usize {
    match tree {
        ArchivedUserTree::Leaf(text) => text.len(),
        ArchivedUserTree::Blob(bytes) => bytes
            .iter()
            .fold(0usize, |sum, &b| sum.wrapping_add(b as usize)),
        ArchivedUserTree::Node {
            wide,
            label,
            children,
        } => {
            let own =
                (wide.to_native() as usize).wrapping_add(label.as_ref().map_or(0, |l| l.len()));
            children
                .iter()
                .fold(own, |sum, child| sum.wrapping_add(walk(child)))
        }
        ArchivedUserTree::Boxed(inner) => inner.as_ref().map_or(0, |t| walk(t)),
    }
}
