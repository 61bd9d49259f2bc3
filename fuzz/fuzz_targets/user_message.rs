//! Arbitrary bytes as the body of an application's (typed user) message, to its
//! depth-bounded validation, aligned as the decoder places it and one byte off.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    flint_wire::fuzzing::user_message(data);
});
