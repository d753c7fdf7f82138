//! `shuck::fuzzing::gateway_request` must never panic: `cargo +nightly fuzz run
//! gateway_request` (from this directory's parent). Its corpus, `corpus/gateway_request`, is
//! replayed on stable by `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::gateway_request(data));
