//! Replays the committed fuzz corpus (fuzz/corpus) through the fuzz targets' code on
//! stable Rust, and checks that its seeds hold a valid frame of every message kind and
//! decode to exactly the frames they were written with.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use flint_wire::fuzzing::{decode_stream, validate, StreamInput};
use flint_wire::{validate_envelope, MessageKind, FRAME_ALIGN};

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
