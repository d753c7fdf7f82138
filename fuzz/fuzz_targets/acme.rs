//! `shuck::fuzzing::acme` must never panic: `cargo +nightly fuzz run acme` (from this
//! directory's parent). Its corpus, `corpus/acme`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::acme(data));
