//! Replays the committed fuzz corpus (fuzz/corpus) through the fuzz targets' code on
//! stable Rust, and checks that it holds a valid frame of every message kind.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use flint_wire::fuzzing::{decode_stream, validate};
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

#[test]
fn decode_stream_corpus_replays() {
    let files = corpus("decode_stream");
    assert!(files.len() > MessageKind::ALL.len());
    for (path, bytes) in files {
        eprintln!("replaying {}", path.display());
        decode_stream(&bytes);
    }
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
