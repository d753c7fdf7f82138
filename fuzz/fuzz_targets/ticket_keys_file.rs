//! `shuck::fuzzing::ticket_keys_file` must never panic: `cargo +nightly fuzz run ticket_keys_file` (from this
//! directory's parent). Its corpus, `corpus/ticket_keys_file`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::ticket_keys_file(data));
