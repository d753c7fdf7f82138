//! `shuck::fuzzing::chunked` must never panic: `cargo +nightly fuzz run chunked` (from this
//! directory's parent). Its corpus, `corpus/chunked`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::chunked(data));
