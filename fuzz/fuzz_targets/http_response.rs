//! `shuck::fuzzing::http_response` must never panic: `cargo +nightly fuzz run http_response` (from this
//! directory's parent). Its corpus, `corpus/http_response`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::http_response(data));
