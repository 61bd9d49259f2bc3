//! Replays the committed fuzz corpus (fuzz/corpus) through the fuzz targets' code on
//! stable Rust, and checks that its seeds hold a valid frame of every message kind and
//! decode to exactly the frames they were written with.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use flint_wire::fuzzing::{decode_stream, validate, StreamInput};
use flint_wire::records::KeyedRecords;
use flint_wire::{
    validate_envelope, ArchivedMessage, ArchivedTaskOutcome, KnownStatuses, MapStatus, MessageKind,
    TaskPayload, FRAME_ALIGN,
};

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = std::fs::read(&path).expect("corpus file");
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

/// The frames a seed must decode to, by its file name; `None` for other files (findings
/// added later), which need only replay without panicking.
fn expected_kinds(path: &Path) -> Option<Vec<MessageKind>> {
    let name = path.file_name()?.to_str()?;
    if name.starts_with("seed-all-kinds") {
        return Some(MessageKind::ALL.to_vec());
    }
    let kind_name = name.strip_prefix("seed-")?;
    let kind = MessageKind::ALL
        .iter()
        .find(|kind| kind.name() == kind_name)
        .unwrap_or_else(|| panic!("{name} names no message kind"));
    Some(vec![*kind])
}

#[test]
fn decode_stream_corpus_replays_and_its_seeds_decode_to_their_frames() {
    let mut seeded = BTreeSet::new();
    let (mut through_read_from, mut through_uninit, mut through_feed) = (false, false, false);
    let mut chunk_beyond_frame = false;
    for (path, bytes) in corpus("decode_stream") {
        eprintln!("replaying {}", path.display());
        // Also checks that the chunked decoding gives what the stream fed at once gives.
        let outcome = decode_stream(&bytes);
        let Some(expected) = expected_kinds(&path) else {
            continue;
        };
        assert_eq!(
            outcome.error,
            None,
            "{} does not decode cleanly",
            path.display()
        );
        let kinds: Vec<MessageKind> = outcome.frames.iter().map(|frame| frame.kind()).collect();
        assert_eq!(kinds, expected, "{}", path.display());
        for frame in &outcome.frames {
            let envelope = frame
                .envelope()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(envelope.message.kind(), frame.kind());
        }
        seeded.extend(expected.iter().map(|&kind| kind as u8));
        let input = StreamInput::parse(&bytes).expect("a seed is not empty");
        through_read_from |= input.read_from && !input.uninit;
        through_uninit |= input.uninit;
        through_feed |= !input.read_from;
        let longest_frame = outcome.frames.iter().map(|f| f.header().frame_len()).max();
        chunk_beyond_frame |= input
            .chunks
            .iter()
            .any(|chunk| Some(chunk.len) > longest_frame);
    }
    let all: BTreeSet<u8> = MessageKind::ALL.iter().map(|&k| k as u8).collect();
    assert_eq!(seeded, all, "the corpus lacks a frame of some kind");
    assert!(
        through_read_from && through_uninit && through_feed,
        "seeds miss a mode"
    );
    assert!(
        chunk_beyond_frame,
        "no seed has a chunk larger than a frame"
    );
}

#[test]
fn validate_corpus_replays_and_covers_every_kind() {
    let mut valid_kinds = BTreeSet::new();
    for (path, bytes) in corpus("validate") {
        eprintln!("replaying {}", path.display());
        validate(&bytes);
        let Some((&code, payload)) = bytes.split_first() else {
            continue;
        };
        let Some(kind) = MessageKind::from_code(code) else {
            continue;
        };
        let mut aligned = rkyv::util::AlignedVec::<FRAME_ALIGN>::new();
        aligned.extend_from_slice(payload);
        if validate_envelope(kind, &aligned).is_ok() {
            valid_kinds.insert(kind as u8);
        }
    }
    let all: BTreeSet<u8> = MessageKind::ALL.iter().map(|&k| k as u8).collect();
    assert_eq!(
        valid_kinds, all,
        "the corpus lacks a valid payload of some kind"
    );
}

/// The `validate` seed `name`, aligned as the decoder places a payload.
fn validate_seed(name: &str) -> (MessageKind, rkyv::util::AlignedVec<FRAME_ALIGN>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus/validate")
        .join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (&code, payload) = bytes.split_first().expect("a seed is not empty");
    let mut aligned = rkyv::util::AlignedVec::<FRAME_ALIGN>::new();
    aligned.extend_from_slice(payload);
    (MessageKind::from_code(code).expect("a kind"), aligned)
}

/// The archived tag of an enum variant is its position: the `outcome-<Variant>` seeds,
/// written with each outcome, must still read as that outcome (a variant moved or
/// inserted before it would read as another, or not validate).
#[test]
fn outcome_seeds_read_as_the_outcome_they_name() {
    let mut seen = 0;
    for (path, _) in corpus("validate") {
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let Some(variant) = name.strip_prefix("outcome-") else {
            continue;
        };
        let variant = variant.split('-').next().unwrap();
        let (kind, aligned) = validate_seed(&name);
        let envelope = validate_envelope(kind, &aligned)
            .unwrap_or_else(|e| panic!("{name} no longer validates: {e}"));
        let ArchivedMessage::StatusUpdate(update) = &envelope.message else {
            panic!("{name} is not a status update");
        };
        let read_as = match &update.outcome {
            ArchivedTaskOutcome::None => "None",
            ArchivedTaskOutcome::Direct { .. } => "Direct",
            ArchivedTaskOutcome::Indirect { .. } => "Indirect",
            ArchivedTaskOutcome::Failure { .. } => "Failure",
            ArchivedTaskOutcome::FetchFailed { .. } => "FetchFailed",
        };
        assert_eq!(read_as, variant, "{name}");
        seen += 1;
    }
    assert!(seen >= 3, "only {seen} outcome seeds");
}

/// The seeds whose opaque bytes hold the shuffle's encodings reach those decoders.
#[test]
fn shuffle_seeds_hold_what_their_decoders_read() {
    let (kind, aligned) = validate_seed("stage-LaunchTask");
    let envelope = validate_envelope(kind, &aligned).unwrap();
    let ArchivedMessage::LaunchTask(task) = &envelope.message else {
        panic!("not a launch");
    };
    let stage = TaskPayload::parse(task.serialized_task.as_slice())
        .unwrap()
        .stage
        .expect("a stage task");
    assert_eq!(stage.reads().count(), 1);
    let known = KnownStatuses::decode(stage.statuses, 1 << 20).unwrap();
    assert_eq!(known.shuffles.len(), 1);

    let (kind, aligned) = validate_seed("mapstatus-StatusUpdate");
    let envelope = validate_envelope(kind, &aligned).unwrap();
    let ArchivedMessage::StatusUpdate(update) = &envelope.message else {
        panic!("not a status update");
    };
    let ArchivedTaskOutcome::Direct { value, .. } = &update.outcome else {
        panic!("not a direct result");
    };
    assert_eq!(MapStatus::decode(value.as_slice()).unwrap().sizes.len(), 3);

    let (kind, aligned) = validate_seed("keyed-ShuffleBlock");
    let envelope = validate_envelope(kind, &aligned).unwrap();
    let ArchivedMessage::ShuffleBlock { data, .. } = &envelope.message else {
        panic!("not a block");
    };
    let records: Vec<_> = KeyedRecords::new(data.as_slice())
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(records.len(), 2);
}

/// The `user_message` seeds validate (so the fuzzer starts from valid archives of every
/// variant), the too-deep tree is refused for its depth, and every file replays without
/// panicking.
#[test]
fn the_user_message_corpus_replays_and_its_seeds_validate() {
    let files = corpus("user_message");
    assert!(files.len() >= 6, "the user_message corpus is missing");
    for (path, bytes) in &files {
        let name = path.file_name().unwrap().to_str().unwrap();
        let valid = flint_wire::fuzzing::user_message(bytes);
        if name.starts_with("seed-") {
            assert!(valid, "{name} no longer validates");
        }
        if name.starts_with("too-deep") {
            assert!(!valid, "{name} validated");
            let mut aligned = rkyv::util::AlignedVec::<{ flint_wire::BODY_ALIGN }>::new();
            aligned.extend_from_slice(bytes);
            let Err(error) =
                flint_wire::access_body::<flint_wire::fuzzing::ArchivedUserTree>(&aligned)
            else {
                panic!("{name} validated");
            };
            let error = error.to_string();
            assert!(error.contains("depth"), "{name}: {error}");
        }
    }
}

/// The seeds are what this encoder writes, byte for byte, for every kind's sample: a
/// change of layout (a field moved, a wrapper that archives differently) fails here
/// rather than passing unnoticed. If the wire is meant to change, bump
/// `PROTOCOL_VERSION` and regenerate the corpus:
/// `cargo run -p flint-wire --example make_fuzz_corpus -- fuzz/corpus`.
#[test]
fn the_seeds_are_what_the_encoder_writes_today() {
    for (kind, frame) in flint_wire::fuzzing::sample_frames() {
        let (seed_kind, seed_payload) = validate_seed(&format!("seed-{}", kind.name()));
        assert_eq!(seed_kind, kind);
        let payload_len = u32::from_le_bytes(frame[12..16].try_into().expect("4 bytes")) as usize;
        let payload = &frame[flint_wire::HEADER_LEN..flint_wire::HEADER_LEN + payload_len];
        assert!(
            payload == seed_payload.as_slice(),
            "{} encodes to other bytes than its seed: the wire layout changed",
            kind.name()
        );
    }
}
