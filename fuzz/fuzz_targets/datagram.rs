//! The replication datagram parser must never panic, whatever arrives on the UDP port:
//! `cargo +nightly fuzz run datagram` (from this directory's parent).
#![no_main]

use libfuzzer_sys::fuzz_target;
use shuck::session::sync::wire::{self, Header, Record, Sealer};

fuzz_target!(|data: &[u8]| {
    let Ok(sealer) = Sealer::new(&[7; 32]) else {
        return;
    };
    // As received: the header checks and the seal.
    let mut copy = data.to_vec();
    let _ = sealer.open(&mut copy, &[1; 8]);
    // As if the seal had passed: the records parser on arbitrary plaintext.
    let mut sealed = Vec::new();
    let plain = &data[..data.len().min(wire::MAX_PLAINTEXT)];
    let header = Header { sender: [2; 8], timestamp: 0, sequence: 0 };
    if sealer.seal(&header, plain, &mut sealed).is_ok() {
        if let Ok((_, records)) = sealer.open(&mut sealed, &[1; 8]) {
            for r in wire::records(records) {
                if let Ok(Record::Keys(body)) = r {
                    let _ = wire::keys(body).count();
                }
            }
        }
    }
});
