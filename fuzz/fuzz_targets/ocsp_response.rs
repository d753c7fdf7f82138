//! `shuck::fuzzing::ocsp_response` must never panic: `cargo +nightly fuzz run ocsp_response` (from this
//! directory's parent). Its corpus, `corpus/ocsp_response`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::ocsp_response(data));
