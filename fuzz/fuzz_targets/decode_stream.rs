//! Arbitrary bytes, in chunk sizes the input chooses, given to the streaming frame decoder
//! through `feed` or through `read_from` interleaved with `next_frame` (input format:
//! `flint_wire::fuzzing::StreamInput`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    flint_wire::fuzzing::decode_stream(data);
});
