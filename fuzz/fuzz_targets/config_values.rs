//! `shuck::fuzzing::config_values` must never panic: `cargo +nightly fuzz run config_values` (from this
//! directory's parent). Its corpus, `corpus/config_values`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::config_values(data));
