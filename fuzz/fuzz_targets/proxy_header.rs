//! `shuck::fuzzing::proxy_header` must never panic: `cargo +nightly fuzz run proxy_header` (from this
//! directory's parent). Its corpus, `corpus/proxy_header`, is replayed on stable by
//! `cargo test -p shuck --test fuzz_corpus`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shuck::fuzzing::proxy_header(data));
