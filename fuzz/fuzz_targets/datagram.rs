//! `shuck::fuzzing::datagram` must never panic: `cargo +nightly fuzz run datagram` (from this
//! directory's parent). Its corpus, `corpus/datagram`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::datagram(data));
