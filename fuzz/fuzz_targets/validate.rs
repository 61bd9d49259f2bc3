//! A message kind byte and arbitrary payload bytes, to message validation.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    flint_wire::fuzzing::validate(data);
});
