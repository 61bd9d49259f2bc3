//! Arbitrary bytes, fed in arbitrary chunk sizes, to the streaming frame decoder.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    flint_wire::fuzzing::decode_stream(data);
});
