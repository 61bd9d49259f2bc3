//! Writes the seed corpus of the fuzz targets: a valid frame of every message kind.
//!
//! `cargo run -p flint-wire --example make_fuzz_corpus -- fuzz/corpus`
//!
//! For `decode_stream` each seed is a chunking byte and one frame; one more seed holds all
//! frames in one stream. For `validate` each seed is the kind byte and the payload.

use std::path::PathBuf;

use flint_wire::fuzzing::sample_frames;
use flint_wire::HEADER_LEN;

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
    let mut all = vec![0u8];
    for (kind, frame) in sample_frames() {
        let name = kind.name();
        let mut stream_seed = vec![kind as u8];
        stream_seed.extend_from_slice(&frame);
        std::fs::write(stream_dir.join(format!("seed-{name}")), stream_seed)?;
        all.extend_from_slice(&frame);

        let payload_len = u32::from_le_bytes(frame[12..16].try_into().expect("4 bytes")) as usize;
        let mut validate_seed = vec![kind as u8];
        validate_seed.extend_from_slice(&frame[HEADER_LEN..HEADER_LEN + payload_len]);
        std::fs::write(validate_dir.join(format!("seed-{name}")), validate_seed)?;
    }
    std::fs::write(stream_dir.join("seed-all-kinds"), all)?;
    Ok(())
}
