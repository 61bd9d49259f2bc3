//! Property and behaviour tests of the codec.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use rkyv::rancor;

use crate::fuzzing::{sample_frames, sample_message, sample_route, sample_task};
use crate::{
    ArchivedMessage, Encoder, Envelope, ExecutorLossReason, Frame, FrameDecoder, Message,
    MessageKind, Route, TaskDescription, WireError, FRAME_ALIGN, HEADER_LEN,
};

const LIMIT: usize = 1 << 20;

fn encode_all(envelopes: &[Envelope]) -> BytesMut {
    let mut encoder = Encoder::new(LIMIT);
    let mut out = BytesMut::new();
    for envelope in envelopes {
        encoder
            .encode(&envelope.route, &envelope.message, &mut out)
            .unwrap();
    }
    out
}

fn to_owned(frame: &Frame) -> Envelope {
    rkyv::deserialize::<Envelope, rancor::Error>(frame.envelope().unwrap()).unwrap()
}

/// Feeds `stream` cut at `cuts` (positions, any order) and collects every frame.
fn decode_chunked(stream: &[u8], cuts: &[usize]) -> Result<Vec<Frame>, WireError> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c % (stream.len() + 1)).collect();
    cuts.push(0);
    cuts.push(stream.len());
    cuts.sort_unstable();
    cuts.dedup();
    let mut decoder = FrameDecoder::new(LIMIT);
    let mut frames = Vec::new();
    for window in cuts.windows(2) {
        decoder.feed(&stream[window[0]..window[1]])?;
        while let Some(frame) = decoder.next_frame()? {
            frames.push(frame);
        }
    }
    decoder.finish()?;
    assert_eq!(
        decoder.stats().realigned,
        0,
        "a payload had to be copied to align it"
    );
    Ok(frames)
}

fn assert_aligned(frame: &Frame) {
    assert_eq!(
        frame.payload().as_ptr() as usize % FRAME_ALIGN,
        0,
        "payload of a {} frame is not {FRAME_ALIGN}-aligned",
        frame.kind()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_message_round_trips(envelope: Envelope) {
        let stream = encode_all(std::slice::from_ref(&envelope));
        let frames = decode_chunked(&stream, &[]).unwrap();
        prop_assert_eq!(frames.len(), 1);
        prop_assert_eq!(frames[0].kind(), envelope.message.kind());
        prop_assert_eq!(to_owned(&frames[0]), envelope);
    }

    #[test]
    fn streams_survive_any_chunking(
        envelopes in proptest::collection::vec(any::<Envelope>(), 1..12),
        cuts in proptest::collection::vec(any::<usize>(), 0..40),
    ) {
        let stream = encode_all(&envelopes);
        let frames = decode_chunked(&stream, &cuts).unwrap();
        prop_assert_eq!(frames.len(), envelopes.len());
        for (frame, envelope) in frames.iter().zip(&envelopes) {
            assert_aligned(frame);
            prop_assert_eq!(&to_owned(frame), envelope);
        }
    }

    #[test]
    fn random_bytes_never_panic(
        data in proptest::collection::vec(any::<u8>(), 0..2048),
        cuts in proptest::collection::vec(any::<usize>(), 0..16),
    ) {
        let _ = decode_chunked(&data, &cuts);
        let mut input = vec![MessageKind::LaunchTask as u8];
        input.extend_from_slice(&data);
        crate::fuzzing::validate(&input);
    }

    #[test]
    fn random_bytes_after_a_valid_header_never_panic(
        kind in proptest::sample::select(MessageKind::ALL),
        garbage in proptest::collection::vec(any::<u8>(), 0..512),
    ) {
        // A frame whose CRC is right but whose payload is garbage reaches validation.
        let header = crate::FrameHeader {
            kind, flags: 0, payload_len: garbage.len() as u32, crc: 0,
        };
        let mut bytes = [0u8; HEADER_LEN];
        header.write(&mut bytes);
        let mut stream = bytes.to_vec();
        stream.extend_from_slice(&garbage);
        let crc = crate::header::frame_crc(&stream[8..]);
        stream[4..8].copy_from_slice(&crc.to_le_bytes());
        stream.resize(header.frame_len(), 0);
        let frames = decode_chunked(&stream, &[]).unwrap();
        prop_assert_eq!(frames.len(), 1);
        let _ = frames[0].envelope();
    }

}

proptest! {
    // Each case flips every byte of a frame in turn, so fewer cases cover a lot.
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn a_corrupted_frame_is_never_delivered(
        which in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let frames = sample_frames();
        let (_, frame) = &frames[which.index(frames.len())];
        for position in 0..frame.len() {
            let mut corrupted = frame.to_vec();
            corrupted[position] ^= flip;
            match decode_chunked(&corrupted, &[]) {
                // A changed length can leave the decoder waiting: the stream is truncated.
                Err(_) => {}
                Ok(delivered) => prop_assert!(
                    delivered.is_empty(),
                    "flipping byte {} delivered a frame", position
                ),
            }
        }
    }
}

#[test]
fn every_kind_has_a_sample_that_round_trips() {
    for (kind, frame) in sample_frames() {
        let decoded = decode_chunked(&frame, &[]).unwrap();
        assert_eq!(decoded.len(), 1);
        assert_eq!(decoded[0].kind(), kind);
        let owned = to_owned(&decoded[0]);
        assert_eq!(owned.message, sample_message(kind));
        assert_eq!(owned.route, sample_route(kind));
    }
}

#[test]
fn launch_task_payload_is_a_view_of_the_frame() {
    let route = Route::OneWay {
        endpoint: "Executor".into(),
    };
    let mut out = BytesMut::new();
    Encoder::new(LIMIT)
        .encode(&route, &Message::LaunchTask(sample_task(100)), &mut out)
        .unwrap();
    let mut decoder = FrameDecoder::new(LIMIT);
    decoder.feed(&out).unwrap();
    let frame = decoder.next_frame().unwrap().unwrap();
    let envelope = frame.envelope().unwrap();
    let ArchivedMessage::LaunchTask(task) = &envelope.message else {
        panic!("not a LaunchTask: {:?}", envelope.message);
    };
    let payload = frame.payload().as_ptr_range();
    let serialized = task.serialized_task.as_slice().as_ptr_range();
    assert!(payload.start <= serialized.start && serialized.end <= payload.end);
    let view = frame.bytes_of(task.serialized_task.as_slice());
    assert_eq!(view.as_ptr_range(), serialized, "bytes_of copied the task");
    assert_eq!(&view[..], &[0x5A; 100][..]);
}

#[test]
fn payloads_are_aligned_at_every_position_and_chunking() {
    // Frames of every padding remainder, so that later frames start at every offset a
    // misaligned layout could produce; then every single cut point and byte-at-a-time.
    let mut envelopes = Vec::new();
    for extra in 0..FRAME_ALIGN {
        envelopes.push(Envelope {
            route: Route::OneWay {
                endpoint: "e".into(),
            },
            message: Message::Custom {
                tag: extra as u32,
                body: Bytes::from(vec![1u8; extra]),
            },
        });
        envelopes.push(Envelope {
            route: Route::Reply {
                request_id: extra as u64,
            },
            message: Message::LaunchTask(sample_task(extra * 7)),
        });
    }
    let stream = encode_all(&envelopes);
    let check = |frames: Vec<Frame>| {
        assert_eq!(frames.len(), envelopes.len());
        for frame in &frames {
            assert_aligned(frame);
            // An application's archive in a Custom body is read in place as well.
            if let ArchivedMessage::Custom { body, .. } = &frame.envelope().unwrap().message {
                assert_eq!(body.as_ptr() as usize % crate::BODY_ALIGN, 0);
            }
        }
    };
    for cut in 0..=stream.len() {
        check(decode_chunked(&stream, &[cut]).unwrap());
    }
    let every_byte: Vec<usize> = (0..stream.len()).collect();
    check(decode_chunked(&stream, &every_byte).unwrap());
}

#[test]
fn an_invalid_payload_s_reason_tells_offsets_not_addresses() {
    // Too short for an envelope's root: the check names the range it overran.
    let mut payload = rkyv::util::AlignedVec::<FRAME_ALIGN>::new();
    payload.extend_from_slice(&[0u8; 4]);
    let error = crate::validate_envelope(MessageKind::ReviveOffers, &payload).unwrap_err();
    let text = error.to_string();
    assert!(text.contains("+0..+4"), "{text}");
    assert!(!text.contains("0x0000"), "{text}");
}

#[test]
fn oversized_frame_is_refused_from_its_header_alone() {
    let mut out = BytesMut::new();
    Encoder::new(LIMIT)
        .encode(
            &Route::Reply { request_id: 1 },
            &Message::Custom {
                tag: 0,
                body: Bytes::from(vec![0u8; 4096]),
            },
            &mut out,
        )
        .unwrap();
    let mut decoder = FrameDecoder::new(1024);
    decoder.feed(&out[..HEADER_LEN]).unwrap();
    let error = decoder.next_frame().unwrap_err();
    let WireError::FrameTooLarge {
        announced, limit, ..
    } = error
    else {
        panic!("expected FrameTooLarge, got {error:?}");
    };
    assert_eq!(limit, 1024);
    assert!(announced > 4096);
    let text = error.to_string();
    assert!(text.contains("rpc.message.maxSize"), "{text}");
    assert!(
        text.contains(&announced.to_string()) && text.contains("1024"),
        "{text}"
    );
    // Nothing more is accepted, and nothing was kept.
    assert_eq!(decoder.buffered(), 0);
    assert!(matches!(decoder.feed(&out), Err(WireError::Closed(_))));
    assert!(matches!(decoder.next_frame(), Err(WireError::Closed(_))));
}

#[test]
fn encoder_refuses_a_message_above_the_limit_and_leaves_the_buffer() {
    let mut out = BytesMut::new();
    let mut encoder = Encoder::new(256);
    encoder
        .encode(&Route::Reply { request_id: 1 }, &Message::Empty, &mut out)
        .unwrap();
    let before = out.clone();
    let error = encoder
        .encode(
            &Route::Reply { request_id: 2 },
            &Message::LaunchTask(sample_task(1000)),
            &mut out,
        )
        .unwrap_err();
    assert!(matches!(
        error,
        WireError::MessageTooLarge { limit: 256, .. }
    ));
    assert!(error.to_string().contains("rpc.message.maxSize"));
    assert_eq!(out, before);
}

/// `message` encoded one-way to endpoint "e" by an encoder of `limit`, appended to `out`.
fn encode_one_way(limit: usize, message: &Message, out: &mut BytesMut) -> Result<usize, WireError> {
    let route = Route::OneWay {
        endpoint: "e".into(),
    };
    Encoder::new(limit).encode(&route, message, out)
}

#[test]
fn a_message_over_the_limit_costs_no_memory_beyond_it_and_says_its_size() {
    // 64 MiB under a 1 MiB limit: refused with its size, and `out` never holds more than
    // the limit.
    let body = bytes::Bytes::from(vec![0u8; 64 << 20]);
    let message = Message::Custom { tag: 1, body };
    let exact = {
        let mut out = BytesMut::new();
        encode_one_way(usize::MAX, &message, &mut out).unwrap();
        out.len() - HEADER_LEN
    };
    let mut out = BytesMut::new();
    let error = encode_one_way(1 << 20, &message, &mut out).unwrap_err();
    let WireError::MessageTooLarge { size, limit } = error else {
        panic!("{error:?}");
    };
    assert_eq!(limit, 1 << 20);
    // The frame's padding is not part of the payload.
    assert!(
        size <= exact && size > exact - FRAME_ALIGN,
        "{size} of {exact}"
    );
    assert!(out.is_empty());
    assert!(out.capacity() < 2 << 20, "{}", out.capacity());
}

#[test]
fn a_payload_beyond_what_rkyv_can_address_is_refused_not_a_panic() {
    // 2 GiB and one byte, zeroed pages the encoder never reads: rkyv's 32-bit offsets
    // cannot reach past it, whatever the limit.
    let body = bytes::Bytes::from(vec![0u8; (2 << 30) + 1]);
    let message = Message::Custom { tag: 1, body };
    for limit in [128 << 20, usize::MAX] {
        let mut out = BytesMut::new();
        let error = encode_one_way(limit, &message, &mut out).unwrap_err();
        let WireError::MessageTooLarge { size, limit: said } = error else {
            panic!("{error:?}");
        };
        assert!(size > 2 << 30, "{size}");
        assert_eq!(said, limit.min(i32::MAX as usize));
        assert!(out.is_empty());
    }
}

#[test]
fn a_fuzz_input_with_its_crcs_made_right_reaches_validation() {
    use crate::fuzzing::{decode_stream, StreamInput};
    let (_, frame) = sample_frames().remove(0);
    let mut mutated = frame.to_vec();
    // The whole payload overwritten (no enum has a variant 0xFF), the CRC now wrong.
    let payload_len = u32::from_le_bytes(mutated[12..16].try_into().unwrap()) as usize;
    mutated[HEADER_LEN..HEADER_LEN + payload_len].fill(0xFF);
    let input = |fix_crcs| {
        StreamInput {
            read_from: false,
            uninit: false,
            fix_crcs,
            small: false,
            preallocate: false,
            chunks: Vec::new(),
            stream: &mutated,
        }
        .to_bytes()
    };
    let refused = decode_stream(&input(false));
    assert!(
        matches!(refused.error, Some(WireError::ChecksumMismatch { .. })),
        "{:?}",
        refused.error
    );
    let fixed = decode_stream(&input(true));
    assert_eq!(fixed.error, None);
    assert_eq!(fixed.frames.len(), 1);
    assert!(
        fixed.frames[0].envelope().is_err(),
        "the archive was mutated"
    );
}

#[test]
fn a_large_frame_grows_the_receive_buffer_no_further_than_its_bound() {
    let message = Message::Custom {
        tag: 1,
        body: Bytes::from(vec![7u8; 2 << 20]),
    };
    let mut frame = BytesMut::new();
    encode_one_way(usize::MAX, &message, &mut frame).unwrap();
    let payload_len = u32::from_le_bytes(frame[12..16].try_into().unwrap()) as usize;
    for uninit in [true, false] {
        // The limit is the frame's own size: a buffer that doubled to fit it (4 MiB) would
        // be well past the bound (the frame and one read).
        let mut decoder = FrameDecoder::new(payload_len);
        let mut rest: &[u8] = &frame;
        let mut frames = 0;
        for _ in 0..1000 {
            let read = if uninit {
                decoder.read_uninit_from(&mut rest).unwrap()
            } else {
                decoder.read_from(&mut rest).unwrap()
            };
            assert!(
                decoder.buffer_capacity() <= decoder.buffer_bound(),
                "capacity {} past the bound {}",
                decoder.buffer_capacity(),
                decoder.buffer_bound()
            );
            while let Some(frame) = decoder.next_frame().unwrap() {
                assert_eq!(frame.payload().len(), payload_len);
                frames += 1;
            }
            if read == 0 {
                break;
            }
        }
        assert_eq!(frames, 1);
    }
}

/// A frame whose room was made at once is read into that allocation to its end: the
/// buffer neither grows nor moves however the bytes come, and the frame is intact.
#[test]
fn a_preallocated_large_frame_is_read_without_growing_the_buffer() {
    let message = Message::Custom {
        tag: 1,
        body: Bytes::from(vec![7u8; 3 << 20]),
    };
    let mut stream = BytesMut::new();
    encode_one_way(usize::MAX, &message, &mut stream).unwrap();
    let frame_len = stream.len();
    // The next frame's start comes with the large one's end.
    encode_one_way(usize::MAX, &Message::Ack { ok: true }, &mut stream).unwrap();
    for uninit in [true, false] {
        let mut decoder = FrameDecoder::new(4 << 20);
        let mut rest: &[u8] = &stream;
        decoder.read_from(&mut &rest[..64]).unwrap();
        rest = &rest[64..];
        assert!(decoder.next_frame().unwrap().is_none());
        assert_eq!(decoder.pending_frame_len(), Some(frame_len));
        decoder.preallocate_pending_frame();
        let capacity = decoder.buffer_capacity();
        assert!(capacity >= frame_len, "{capacity}");
        let mut frames = Vec::new();
        for _ in 0..1000 {
            let read = if uninit {
                decoder.read_uninit_from(&mut rest).unwrap()
            } else {
                decoder.read_from(&mut rest).unwrap()
            };
            if frames.is_empty() {
                assert_eq!(decoder.buffer_capacity(), capacity, "the buffer grew");
            }
            while let Some(frame) = decoder.next_frame().unwrap() {
                frames.push(frame);
            }
            if read == 0 {
                break;
            }
        }
        assert_eq!(frames.len(), 2);
        assert_eq!(to_owned(&frames[0]).message, message);
        assert_eq!(to_owned(&frames[1]).message, Message::Ack { ok: true });
    }
}

#[test]
fn a_frame_after_a_large_one_does_not_share_its_allocation() {
    let large = Message::Custom {
        tag: 1,
        body: Bytes::from(vec![7u8; 1 << 20]),
    };
    let small = Message::Custom {
        tag: 2,
        body: Bytes::from_static(b"small"),
    };
    let mut stream = BytesMut::new();
    let large_len = encode_one_way(usize::MAX, &large, &mut stream).unwrap();
    encode_one_way(usize::MAX, &small, &mut stream).unwrap();
    for uninit in [true, false] {
        let mut decoder = FrameDecoder::new(2 << 20);
        let mut rest: &[u8] = &stream;
        let mut frames = Vec::new();
        for _ in 0..1000 {
            let read = if uninit {
                decoder.read_uninit_from(&mut rest).unwrap()
            } else {
                decoder.read_from(&mut rest).unwrap()
            };
            while let Some(frame) = decoder.next_frame().unwrap() {
                frames.push(frame);
            }
            if read == 0 {
                break;
            }
        }
        assert_eq!(frames.len(), 2);
        // In the large frame's allocation, the small frame's payload would start right
        // after the large frame's end.
        let after_large = frames[0].payload().as_ptr().wrapping_add(large_len);
        assert_ne!(frames[1].payload().as_ptr(), after_large, "uninit {uninit}");
        assert_eq!(
            &frames[1].payload()[..],
            &stream[large_len + HEADER_LEN..][..frames[1].payload().len()]
        );
    }
}

#[test]
fn a_header_announcing_4_gib_is_refused_whatever_the_limit() {
    let mut header = [0u8; HEADER_LEN];
    crate::FrameHeader {
        kind: MessageKind::Custom,
        flags: 0,
        payload_len: u32::MAX - 7,
        crc: 0,
    }
    .write(&mut header);
    let mut decoder = FrameDecoder::new(usize::MAX);
    assert_eq!(decoder.max_payload(), crate::MAX_FRAME_PAYLOAD);
    decoder.feed(&header).unwrap();
    assert!(matches!(
        decoder.next_frame(),
        Err(WireError::FrameTooLarge { .. })
    ));
}

#[test]
fn nothing_after_a_bad_frame_is_processed() {
    let frames = sample_frames();
    let mut stream = BytesMut::new();
    stream.extend_from_slice(&frames[0].1);
    let mut bad = frames[1].1.to_vec();
    bad[HEADER_LEN] ^= 0xFF; // a payload byte: the CRC no longer matches
    stream.extend_from_slice(&bad);
    stream.extend_from_slice(&frames[2].1);
    let mut decoder = FrameDecoder::new(LIMIT);
    decoder.feed(&stream).unwrap();
    assert!(
        decoder.next_frame().unwrap().is_some(),
        "the good first frame"
    );
    let error = decoder.next_frame().unwrap_err();
    assert!(
        matches!(error, WireError::ChecksumMismatch { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("checksum"));
    assert!(matches!(decoder.next_frame(), Err(WireError::Closed(_))));
    assert_eq!(decoder.stats().frames, 1);
}

#[test]
fn errors_say_what_was_expected_and_what_came() {
    let (_, frame) = &sample_frames()[0];
    let mut stream = frame.to_vec();
    stream[0..4].copy_from_slice(b"HTTP");
    let text = decode_chunked(&stream, &[]).unwrap_err().to_string();
    assert!(
        text.contains("FLNT") && text.contains("48, 54, 54, 50"),
        "{text}"
    );

    let mut stream = frame.to_vec();
    stream[8] = 1;
    let text = decode_chunked(&stream, &[]).unwrap_err().to_string();
    assert!(
        text.contains("version 1") && text.contains("version 2"),
        "a peer of the previous version is refused naming both: {text}"
    );

    let mut stream = frame.to_vec();
    stream[HEADER_LEN + 1] ^= 1;
    let text = decode_chunked(&stream, &[]).unwrap_err().to_string();
    assert!(
        text.contains("header carries") && text.contains("bytes give"),
        "{text}"
    );
}

#[test]
fn non_zero_padding_is_refused() {
    let (_, frame) = sample_frames()
        .into_iter()
        .find(|(_, f)| {
            let header = crate::FrameHeader::parse(f[..16].try_into().unwrap(), LIMIT).unwrap();
            header.frame_len() > HEADER_LEN + header.payload_len as usize
        })
        .expect("a sample with padding");
    let mut stream = frame.to_vec();
    *stream.last_mut().unwrap() = 1;
    assert!(matches!(
        decode_chunked(&stream, &[]),
        Err(WireError::BadPadding(_))
    ));
}

#[test]
fn truncated_stream_is_reported_at_the_end() {
    let (_, frame) = &sample_frames()[3];
    for cut in 1..frame.len() {
        let mut decoder = FrameDecoder::new(LIMIT);
        decoder.feed(&frame[..cut]).unwrap();
        assert!(decoder.next_frame().unwrap().is_none());
        assert_eq!(
            decoder.finish().unwrap_err(),
            WireError::Truncated { buffered: cut }
        );
    }
}

#[test]
fn kind_mismatch_between_header_and_payload_is_refused() {
    let (_, frame) = &sample_frames()[0];
    let mut stream = frame.to_vec();
    stream[9] = MessageKind::Shutdown as u8;
    // Fix the CRC so that only the kind disagrees.
    let payload_len = u32::from_le_bytes(stream[12..16].try_into().unwrap()) as usize;
    let crc = crate::header::frame_crc(&stream[8..16 + payload_len]);
    stream[4..8].copy_from_slice(&crc.to_le_bytes());
    let frames = decode_chunked(&stream, &[]).unwrap();
    let error = frames[0].envelope().unwrap_err();
    assert_eq!(
        error,
        WireError::KindMismatch {
            header: "Shutdown",
            payload: "RegisterExecutor"
        }
    );
}

#[test]
fn read_from_fills_the_buffer_from_a_reader() {
    let frames = sample_frames();
    let stream: Vec<u8> = frames.iter().flat_map(|(_, f)| f.to_vec()).collect();
    // A reader that hands out at most 5 bytes a call.
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(5).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let mut reader = Trickle(&stream);
    let mut decoder = FrameDecoder::new(LIMIT);
    let mut kinds = Vec::new();
    while decoder.read_from(&mut reader).unwrap() > 0 {
        while let Some(frame) = decoder.next_frame().unwrap() {
            assert_aligned(&frame);
            kinds.push(frame.kind());
        }
    }
    decoder.finish().unwrap();
    assert_eq!(kinds, MessageKind::ALL);
}

#[test]
fn a_trickling_peer_costs_what_it_sent_not_what_it_announced() {
    let mut header = [0u8; HEADER_LEN];
    crate::FrameHeader {
        kind: MessageKind::Custom,
        flags: 0,
        payload_len: 64 << 20,
        crc: 0,
    }
    .write(&mut header);
    let mut decoder = FrameDecoder::new(128 << 20);
    decoder.feed(&header).unwrap();
    assert!(
        decoder.next_frame().unwrap().is_none(),
        "a 64 MiB frame within the limit waits"
    );
    decoder.feed(&[0u8; 100]).unwrap();
    assert!(decoder.next_frame().unwrap().is_none());
    assert!(
        decoder.buffer_capacity() <= 512 * 1024,
        "the decoder reserved {} bytes on the word of a header",
        decoder.buffer_capacity()
    );
}

/// A reader over a stream whose successive reads return at most the scripted sizes, used
/// in turn and then again from the first.
struct ScriptedReader<'a> {
    rest: &'a [u8],
    sizes: Vec<usize>,
    next: usize,
    calls: usize,
}

impl<'a> ScriptedReader<'a> {
    fn new(stream: &'a [u8], sizes: Vec<usize>) -> Self {
        assert!(sizes.iter().all(|&size| size > 0));
        ScriptedReader {
            rest: stream,
            sizes,
            next: 0,
            calls: 0,
        }
    }
}

impl std::io::Read for ScriptedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.calls += 1;
        let size = self.sizes[self.next % self.sizes.len()];
        self.next += 1;
        let n = size.min(buf.len()).min(self.rest.len());
        buf[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        Ok(n)
    }
}

#[test]
fn read_from_again_with_a_whole_frame_and_more_buffered() {
    // The peer's bytes arrive as the header, then the rest of the frame and part of the
    // next, then more; the caller reads twice before taking frames.
    let frames = sample_frames();
    let stream: Vec<u8> = frames[..3].iter().flat_map(|(_, f)| f.to_vec()).collect();
    let first_len = frames[0].1.len();
    let mut reader = ScriptedReader::new(&stream, vec![HEADER_LEN, first_len, usize::MAX]);
    let mut decoder = FrameDecoder::new(LIMIT);
    assert_eq!(decoder.read_from(&mut reader).unwrap(), HEADER_LEN);
    assert!(
        decoder.next_frame().unwrap().is_none(),
        "the header is pending"
    );
    assert_eq!(decoder.read_from(&mut reader).unwrap(), first_len);
    assert!(
        decoder.buffered() > first_len,
        "more than the pending frame is in"
    );
    // The pending frame is whole: this read used to compute its missing bytes as
    // `frame_len - buffered` and underflow.
    assert!(decoder.read_from(&mut reader).unwrap() > 0);
    assert!(
        decoder.read_from(&mut reader).unwrap() == 0,
        "end of stream"
    );
    let mut kinds = Vec::new();
    while let Some(frame) = decoder.next_frame().unwrap() {
        assert_aligned(&frame);
        kinds.push(frame.kind());
    }
    decoder.finish().unwrap();
    let expected: Vec<MessageKind> = frames[..3].iter().map(|(kind, _)| *kind).collect();
    assert_eq!(kinds, expected);
}

#[test]
fn reads_without_taking_frames_stop_at_the_buffer_bound() {
    let frames = sample_frames();
    let ack = &frames
        .iter()
        .find(|(kind, _)| *kind == MessageKind::Ack)
        .unwrap()
        .1;
    let limit = 1024;
    let mut decoder = FrameDecoder::new(limit);
    let bound = decoder.buffer_bound();
    assert_eq!(bound, crate::padded_frame_len(limit) + 256 * 1024);
    let count = 2 * bound / ack.len();
    let stream: Vec<u8> = std::iter::repeat_n(&ack[..], count)
        .flatten()
        .copied()
        .collect();
    let mut reader = ScriptedReader::new(&stream, vec![usize::MAX]);
    let error = loop {
        match decoder.read_from(&mut reader) {
            Ok(n) => assert!(n > 0 && decoder.buffered() <= bound),
            Err(error) => break error,
        }
    };
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
    assert!(error.to_string().contains("next_frame"), "{error}");
    assert_eq!(
        decoder.buffered(),
        bound,
        "reads fill the buffer up to its bound"
    );
    assert!(
        decoder.failure().is_none(),
        "a full buffer does not close the decoder"
    );
    let calls = reader.calls;
    assert!(decoder.read_from(&mut reader).is_err());
    assert_eq!(
        reader.calls, calls,
        "a refused read does not touch the reader"
    );
    // Taking the frames makes room; the whole stream then comes through intact.
    let mut taken = 0;
    loop {
        while let Some(frame) = decoder.next_frame().unwrap() {
            assert_eq!(
                frame.payload(),
                &ack[HEADER_LEN..HEADER_LEN + frame.payload().len()]
            );
            taken += 1;
        }
        if decoder.read_from(&mut reader).unwrap() == 0 {
            break;
        }
    }
    decoder.finish().unwrap();
    assert_eq!(taken, count);
}

#[test]
fn read_from_checks_a_buffered_header_before_reading() {
    let mut header = [0u8; HEADER_LEN];
    crate::FrameHeader {
        kind: MessageKind::Custom,
        flags: 0,
        payload_len: 4096,
        crc: 0,
    }
    .write(&mut header);
    let mut decoder = FrameDecoder::new(1024);
    decoder.feed(&header).unwrap();
    let payload = [0u8; 4096];
    let mut reader = ScriptedReader::new(&payload, vec![usize::MAX]);
    let error = decoder.read_from(&mut reader).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    assert_eq!(reader.calls, 0, "no byte of the refused payload was read");
    let wire = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<WireError>())
        .expect("the wire error inside");
    assert_eq!(
        wire,
        &WireError::FrameTooLarge {
            announced: 4096,
            limit: 1024,
            limit_name: crate::MAX_SIZE_KEY,
        }
    );
    assert_eq!(decoder.failure(), Some(wire));
    assert_eq!(decoder.buffered(), 0);
    assert!(matches!(decoder.next_frame(), Err(WireError::Closed(_))));
}

/// A call on a decoder, in the interleaving property test.
#[derive(Debug, Clone, Copy)]
enum Call {
    /// `read_from` the scripted reader.
    Read,
    /// `feed` the next this-many bytes of the stream.
    Feed(usize),
    /// `next_frame`.
    Next,
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        4 => Just(Call::Read),
        1 => (1usize..3000).prop_map(Call::Feed),
        4 => Just(Call::Next),
    ]
}

proptest! {
    // Generating the envelopes dominates; fewer cases than above keep the suite quick.
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn any_interleaving_of_reads_feeds_and_takes_yields_the_stream(
        envelopes in proptest::collection::vec(any::<Envelope>(), 1..8),
        // Reads from a byte up to far more than a frame.
        sizes in proptest::collection::vec(
            prop_oneof![1usize..32, 32usize..1024, 1024usize..300_000], 1..12),
        calls in proptest::collection::vec(call(), 0..120),
    ) {
        let stream = encode_all(&envelopes);
        let mut reader = ScriptedReader::new(&stream, sizes);
        let mut decoder = FrameDecoder::new(LIMIT);
        let mut frames = Vec::new();
        let take = |decoder: &mut FrameDecoder, frames: &mut Vec<Frame>| {
            if let Some(frame) = decoder.next_frame().unwrap() {
                assert_aligned(&frame);
                frames.push(frame);
                true
            } else {
                false
            }
        };
        for call in calls {
            match call {
                Call::Read => {
                    let before = reader.rest.len();
                    let n = decoder.read_from(&mut reader).unwrap();
                    prop_assert_eq!(before - reader.rest.len(), n);
                    prop_assert!(decoder.buffered() <= decoder.buffer_bound());
                }
                Call::Feed(n) => {
                    let (bytes, rest) = reader.rest.split_at(n.min(reader.rest.len()));
                    reader.rest = rest;
                    decoder.feed(bytes).unwrap();
                }
                Call::Next => {
                    take(&mut decoder, &mut frames);
                }
            }
        }
        // Then as an event loop would: read, take every frame, until the end.
        loop {
            while take(&mut decoder, &mut frames) {}
            if decoder.read_from(&mut reader).unwrap() == 0 {
                break;
            }
        }
        decoder.finish().unwrap();
        prop_assert_eq!(decoder.stats().bytes, stream.len() as u64);
        prop_assert_eq!(decoder.stats().realigned, 0);
        prop_assert_eq!(frames.len(), envelopes.len());
        for (frame, envelope) in frames.iter().zip(&envelopes) {
            prop_assert_eq!(&to_owned(frame), envelope);
        }
    }
}

#[test]
fn a_lowered_limit_spares_the_pending_frame_and_holds_the_next() {
    let route = Route::Reply { request_id: 1 };
    let big = Message::Custom {
        tag: 1,
        body: Bytes::from(vec![1u8; 1 << 20]),
    };
    let mut stream = BytesMut::new();
    Encoder::new(2 << 20)
        .encode(&route, &big, &mut stream)
        .unwrap();
    let first = stream.len();
    Encoder::new(2 << 20)
        .encode(&route, &big, &mut stream)
        .unwrap();

    let mut decoder = FrameDecoder::new(2 << 20);
    let mut reader = ScriptedReader::new(&stream, vec![HEADER_LEN, usize::MAX]);
    decoder.read_from(&mut reader).unwrap();
    assert!(
        decoder.next_frame().unwrap().is_none(),
        "the header is pending"
    );
    decoder.set_max_payload(256, "the lowered limit");
    // The pending 1 MiB frame keeps the limit it passed: read whole, although the lowered
    // limit alone would bound the buffer to a quarter of it.
    let frame = loop {
        if let Some(frame) = decoder.next_frame().unwrap() {
            break frame;
        }
        decoder.read_from(&mut reader).unwrap();
    };
    assert_eq!(frame.header().frame_len(), first);
    // The next header meets the lowered one.
    let error = loop {
        match decoder.next_frame() {
            Ok(None) => {
                decoder.read_from(&mut reader).unwrap();
            }
            Ok(Some(_)) => panic!("a frame above the lowered limit was yielded"),
            Err(error) => break error,
        }
    };
    assert!(
        error
            .to_string()
            .contains("exceeds the lowered limit (256 bytes)"),
        "{error}"
    );
}

/// A stand-in cipher for the decoder's side of sealing: XOR with a byte, a CRC of header
/// and ciphertext for a tag, and the sequence number checked as flint-rpc's does.
#[derive(Debug, Default)]
struct ToyOpener {
    next: u64,
}

fn toy_tag(header: &[u8], body: &[u8]) -> [u8; crate::TAG_LEN] {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(header);
    hasher.update(body);
    let crc = hasher.finalize().to_le_bytes();
    let mut tag = [0u8; crate::TAG_LEN];
    for chunk in tag.chunks_mut(4) {
        chunk.copy_from_slice(&crc);
    }
    tag
}

/// Seals the frame `encode_with_flags(.., FLAG_SEALED, ..)` just appended to `out`.
fn toy_seal(out: &mut BytesMut, len: usize, sequence: u64) {
    let start = out.len() - len;
    let frame = &mut out[start..];
    frame[4..8].copy_from_slice(&(sequence as u32).to_le_bytes());
    let (header, rest) = frame.split_at_mut(HEADER_LEN);
    let (body, tag) = rest.split_at_mut(rest.len() - crate::TAG_LEN);
    body.iter_mut().for_each(|byte| *byte ^= 0xA5);
    tag.copy_from_slice(&toy_tag(header, body));
}

impl crate::FrameOpener for ToyOpener {
    fn open(&mut self, header: &crate::FrameHeader, frame: &mut [u8]) -> Result<(), WireError> {
        let kind = header.kind.name();
        if header.crc != self.next as u32 {
            return Err(WireError::OutOfSequence {
                kind,
                expected: self.next as u32,
                carried: header.crc,
            });
        }
        let (head, rest) = frame.split_at_mut(HEADER_LEN);
        let (body, tag) = rest.split_at_mut(rest.len() - crate::TAG_LEN);
        if toy_tag(head, body) != *tag {
            return Err(WireError::Forged {
                kind,
                sequence: self.next,
            });
        }
        body.iter_mut().for_each(|byte| *byte ^= 0xA5);
        self.next += 1;
        Ok(())
    }
}

fn sealed_stream(envelopes: &[Envelope]) -> BytesMut {
    let mut encoder = Encoder::new(LIMIT);
    let mut out = BytesMut::new();
    for (sequence, envelope) in envelopes.iter().enumerate() {
        let len = encoder
            .encode_with_flags(
                &envelope.route,
                &envelope.message,
                crate::FLAG_SEALED,
                &mut out,
            )
            .unwrap();
        toy_seal(&mut out, len, sequence as u64);
    }
    out
}

/// Sealed frames are opened where they lie: at every chunking their payloads come out as
/// encoded, aligned, without a copy.
#[test]
fn sealed_frames_are_opened_in_place_at_any_chunking() {
    let envelopes: Vec<Envelope> = MessageKind::ALL
        .iter()
        .map(|&kind| Envelope {
            route: sample_route(kind),
            message: sample_message(kind),
        })
        .collect();
    let stream = sealed_stream(&envelopes);
    assert!(
        !stream.windows(6).any(|window| window == b"exec-7"),
        "the toy cipher hides the payloads"
    );
    for step in [1, 7, 16, 100, stream.len()] {
        let mut decoder = FrameDecoder::new(LIMIT);
        decoder.set_opener(Box::new(ToyOpener::default()));
        let mut frames = Vec::new();
        for chunk in stream.chunks(step) {
            decoder.feed(chunk).unwrap();
            while let Some(frame) = decoder.next_frame().unwrap() {
                assert!(frame.header().is_sealed());
                assert_aligned(&frame);
                frames.push(to_owned(&frame));
            }
        }
        decoder.finish().unwrap();
        assert_eq!(frames, envelopes, "chunks of {step}");
        assert_eq!(decoder.stats().realigned, 0);
    }
}

/// A connection seals all of its frames or none: a frame of the other sort is refused
/// from its header, before any of its payload is waited for.
#[test]
fn a_frame_sealed_or_not_against_the_connection_is_refused_from_its_header() {
    let route = Route::Reply { request_id: 1 };
    let message = Message::Custom {
        tag: 1,
        body: Bytes::from(vec![1u8; 4096]),
    };
    let mut plain = BytesMut::new();
    Encoder::new(LIMIT)
        .encode(&route, &message, &mut plain)
        .unwrap();
    let mut sealed = BytesMut::new();
    let len = Encoder::new(LIMIT)
        .encode_with_flags(&route, &message, crate::FLAG_SEALED, &mut sealed)
        .unwrap();
    assert_eq!(len, plain.len() + crate::TAG_LEN);
    toy_seal(&mut sealed, len, 0);

    let mut opening = FrameDecoder::new(LIMIT);
    opening.set_opener(Box::new(ToyOpener::default()));
    opening.feed(&plain[..HEADER_LEN]).unwrap();
    let error = opening.next_frame().unwrap_err();
    assert_eq!(
        error.to_string(),
        "a Custom frame arrived unsealed where every frame must be sealed \
         (network.crypto.enabled=true): the peer does not encrypt, or the frame did not \
         come from it"
    );
    assert!(opening.feed(&plain[HEADER_LEN..]).is_err(), "closed");

    let mut clear = FrameDecoder::new(LIMIT);
    clear.feed(&sealed[..HEADER_LEN]).unwrap();
    let error = clear.next_frame().unwrap_err();
    assert_eq!(
        error.to_string(),
        "a sealed Custom frame arrived, but this side does not encrypt: both sides must set \
         network.crypto.enabled the same"
    );
}

/// What the opener refuses closes the decoder, and the frame is not yielded.
#[test]
fn a_frame_the_opener_refuses_closes_the_decoder() {
    let envelopes: Vec<Envelope> = (0..3)
        .map(|tag| Envelope {
            route: Route::Reply { request_id: tag },
            message: Message::Custom {
                tag: tag as u32,
                body: Bytes::from(vec![tag as u8; 100]),
            },
        })
        .collect();
    let stream = sealed_stream(&envelopes);
    let frame_len = stream.len() / 3;
    let decode = |stream: &[u8]| {
        let mut decoder = FrameDecoder::new(LIMIT);
        decoder.set_opener(Box::new(ToyOpener::default()));
        decoder.feed(stream).unwrap();
        let mut yielded = 0;
        let error = loop {
            match decoder.next_frame() {
                Ok(Some(_)) => yielded += 1,
                Ok(None) => break None,
                Err(error) => break Some(error),
            }
        };
        (yielded, error)
    };
    assert_eq!(decode(&stream), (3, None));

    // A byte of the second frame's payload altered.
    let mut altered = stream.to_vec();
    altered[frame_len + HEADER_LEN + 5] ^= 1;
    let (yielded, error) = decode(&altered);
    assert_eq!(yielded, 1);
    assert!(matches!(error, Some(WireError::Forged { sequence: 1, .. })));

    // The first frame again where the second was due.
    let replayed = [&stream[..frame_len], &stream[..frame_len]].concat();
    let (yielded, error) = decode(&replayed);
    assert_eq!(yielded, 1);
    let error = error.unwrap();
    assert!(
        matches!(
            error,
            WireError::OutOfSequence {
                expected: 1,
                carried: 0,
                ..
            }
        ),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("replayed, reordered or dropped on the way"),
        "{error}"
    );
}

/// A payload that fails validation says which message kind it was and which check failed
/// where, in every build: rkyv's own error keeps nothing without debug assertions.
#[test]
fn an_invalid_payload_names_its_kind_the_failed_check_and_the_field() {
    let marker = "a-host-name-long-enough-to-stand-out-of-line";
    let message = Message::RegisterExecutor(crate::RegisterExecutor {
        executor_id: "7".into(),
        executor_address: String::new(),
        endpoint_name: "Executor".into(),
        hostname: marker.into(),
        cores: 1,
        log_urls: Vec::new(),
    });
    let mut out = BytesMut::new();
    encode_one_way(LIMIT, &message, &mut out).unwrap();
    let mut stream = out.to_vec();
    let at = stream
        .windows(marker.len())
        .position(|w| w == marker.as_bytes())
        .expect("the host name is in the payload");
    stream[at + 3] = 0xFF; // no UTF-8 sequence starts with 0xFF
    let payload_len = u32::from_le_bytes(stream[12..16].try_into().unwrap()) as usize;
    let crc = crate::header::frame_crc(&stream[8..16 + payload_len]);
    stream[4..8].copy_from_slice(&crc.to_le_bytes());
    let frames = decode_chunked(&stream, &[]).unwrap();
    let error = frames[0].envelope().unwrap_err();
    let WireError::InvalidPayload { kind, reason } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*kind, "RegisterExecutor");
    assert!(
        reason.starts_with("invalid UTF-8 while checking field 'hostname' of struct "),
        "{reason}"
    );
    assert!(
        reason.contains("of variant 'RegisterExecutor' of enum 'ArchivedMessage'")
            && reason.ends_with("while checking field 'message' of struct 'ArchivedEnvelope'"),
        "{reason}"
    );
    assert!(!error.to_string().contains("debug assertions"), "{error}");
    assert!(
        error
            .to_string()
            .starts_with("invalid RegisterExecutor payload: invalid UTF-8 while checking"),
        "{error}"
    );
}

/// A map status a task returns is checked as a frame is, and says as much.
#[test]
fn an_invalid_map_status_names_the_failed_check() {
    let error = crate::MapStatus::decode(&[0xFF; 3]).unwrap_err();
    let WireError::InvalidPayload { kind, reason } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*kind, "MapStatus");
    assert!(
        !reason.is_empty() && !reason.contains("debug assertions"),
        "{reason}"
    );
}

/// A loss by exit always shows its code: the cluster manager's text when it names it,
/// the code after the text when it does not, and the code alone with no text.
#[test]
fn an_executor_exit_shows_its_code_once() {
    let exited = |exit_code: i32, reason: &str| {
        ExecutorLossReason::ExecutorExited {
            exit_code,
            exit_caused_by_app: true,
            reason: reason.into(),
        }
        .to_string()
    };
    assert_eq!(
        exited(3, "executor 2 exited with code 3"),
        "executor 2 exited with code 3"
    );
    assert_eq!(
        exited(137, "executor 2 was killed by signal 9"),
        "executor 2 was killed by signal 9 (exit code 137)"
    );
    assert_eq!(exited(52, "OOM"), "OOM (exit code 52)");
    assert_eq!(exited(52, ""), "Executor exited with code 52");
    // Another code, or one the code only begins, is not this one.
    assert_eq!(
        exited(1, "executor 2 exited with code 13"),
        "executor 2 exited with code 13 (exit code 1)"
    );
    assert_eq!(
        exited(-1, "executor 2 exited with code -1; ended"),
        "executor 2 exited with code -1; ended"
    );
}

/// One task or update goes as the seeds' message, several as one batch, none as no
/// message; put back, they come out in their order, and a batch's list keeps its memory.
#[test]
fn launches_and_updates_are_taken_into_one_message_and_put_back() {
    let mut tasks = Vec::new();
    assert!(Message::take_launches(&mut tasks).is_none());
    tasks.push(sample_task(4));
    let one = Message::take_launches(&mut tasks).unwrap();
    assert!(matches!(one, Message::LaunchTask(_)) && tasks.is_empty());
    one.put_back_launches(&mut tasks);
    assert_eq!(tasks, vec![sample_task(4)]);

    tasks.extend((1..3).map(|task_id| TaskDescription {
        task_id,
        ..sample_task(4)
    }));
    let capacity = tasks.capacity();
    let several = Message::take_launches(&mut tasks).unwrap();
    assert_eq!(several.launched_tasks().len(), 3);
    assert!(matches!(several, Message::LaunchTasks { .. }) && tasks.is_empty());
    several.put_back_launches(&mut tasks);
    let ids: Vec<u64> = tasks.iter().map(|t| t.task_id).collect();
    assert_eq!(ids, [17, 1, 2]);
    assert_eq!(tasks.capacity(), capacity);

    let Message::StatusUpdates { updates: sample } = sample_message(MessageKind::StatusUpdates)
    else {
        unreachable!()
    };
    let mut updates = Vec::new();
    assert!(Message::take_status_updates(&mut updates).is_none());
    updates.push(sample[0].clone());
    let one = Message::take_status_updates(&mut updates).unwrap();
    assert!(matches!(one, Message::StatusUpdate(_)) && updates.is_empty());
    one.put_back_status_updates(&mut updates);
    updates.extend_from_slice(&sample[1..]);
    let several = Message::take_status_updates(&mut updates).unwrap();
    assert_eq!(several.status_updates(), &sample[..]);
    several.put_back_status_updates(&mut updates);
    assert_eq!(updates, sample);
}

/// Read in place, a frame's tasks and updates are the same whether they came one to a
/// frame or several, and a frame of another kind has none.
#[test]
fn archived_launches_and_updates_read_as_lists_whatever_their_frame() {
    for kind in [
        MessageKind::LaunchTask,
        MessageKind::LaunchTasks,
        MessageKind::StatusUpdate,
        MessageKind::StatusUpdates,
        MessageKind::Heartbeat,
    ] {
        let owned = sample_message(kind);
        let envelope = Envelope {
            route: sample_route(kind),
            message: owned.clone(),
        };
        let frames = decode_chunked(&encode_all(&[envelope]), &[]).unwrap();
        let archived = &frames[0].envelope().unwrap().message;
        let task_ids: Vec<u64> = archived
            .launched_tasks()
            .iter()
            .map(|t| t.task_id.to_native())
            .collect();
        let owned_ids: Vec<u64> = owned.launched_tasks().iter().map(|t| t.task_id).collect();
        assert_eq!(task_ids, owned_ids, "{kind:?}");
        let update_ids: Vec<u64> = archived
            .status_updates()
            .iter()
            .map(|u| u.task_id.to_native())
            .collect();
        let owned_updates: Vec<u64> = owned.status_updates().iter().map(|u| u.task_id).collect();
        assert_eq!(update_ids, owned_updates, "{kind:?}");
        let read = task_ids.len() + update_ids.len();
        let expected = match kind {
            MessageKind::LaunchTask | MessageKind::StatusUpdate => 1,
            MessageKind::Heartbeat => 0,
            _ => owned.launched_tasks().len() + owned.status_updates().len(),
        };
        assert_eq!(read, expected, "{kind:?}");
        if matches!(kind, MessageKind::LaunchTasks | MessageKind::StatusUpdates) {
            assert!(read > 1, "the {kind:?} sample carries several");
        }
    }
}

proptest! {
    /// A receiver reuses the extras it decoded for the next task only when they are the
    /// same list for list; any difference in a name, a time, a key or a value, or one
    /// element more or less, is seen.
    #[test]
    fn archived_extras_match_exactly_the_extras_they_were_made_from(
        extras in any::<crate::TaskExtras>(),
        other in any::<crate::TaskExtras>(),
    ) {
        let bytes = rkyv::to_bytes::<rancor::Error>(&extras).unwrap();
        let archived =
            rkyv::access::<crate::ArchivedTaskExtras, rancor::Error>(&bytes).unwrap();
        prop_assert!(archived.matches(&extras));
        prop_assert_eq!(archived.matches(&other), other == extras);
        let mut longer = extras.clone();
        longer.properties.push(crate::Property { key: String::new(), value: String::new() });
        prop_assert!(!archived.matches(&longer));
        if let Some(file) = extras.added_files.first() {
            let mut changed = extras.clone();
            changed.added_files[0].timestamp = file.timestamp.wrapping_add(1);
            prop_assert!(!archived.matches(&changed));
        }
    }
}
