//! `shuck::fuzzing::client_hello` must never panic: `cargo +nightly fuzz run client_hello` (from this
//! directory's parent). Its corpus, `corpus/client_hello`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::client_hello(data));
