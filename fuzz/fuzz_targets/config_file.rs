//! `shuck::fuzzing::config_file` must never panic: `cargo +nightly fuzz run config_file` (from this
//! directory's parent). Its corpus, `corpus/config_file`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::config_file(data));
