//! Every file of every fuzz corpus (`fuzz/corpus/<target>/`) through the same entry point
//! the fuzz target uses, on stable Rust: CI catches a regression without nightly. A crash
//! found by fuzzing lands in its corpus and is replayed here from then on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

#[test]
fn every_corpus_file_goes_through_its_parser_without_a_panic() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for (target, entry) in shuck::fuzzing::TARGETS {
        let dir = root.join(target);
        let files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}: every target has a corpus", dir.display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        assert!(
            !files.is_empty(),
            "{}: an empty corpus checks nothing",
            dir.display()
        );
        for f in files {
            let data = std::fs::read(&f).unwrap();
            let run = std::panic::catch_unwind(|| entry(&data));
            assert!(run.is_ok(), "{target}: {} panics", f.display());
        }
    }
}
