//! `shuck::fuzzing::store_value` must never panic: `cargo +nightly fuzz run store_value` (from this
//! directory's parent). Its corpus, `corpus/store_value`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::store_value(data));
