//! Buffers a worker lends to its connections. The connections of one worker never run at
//! the same time, so one buffer of each kind per worker thread serves them all: a busy
//! worker neither allocates nor zeroes a buffer per read, and an idle connection holds
//! none.
//!
//! - The **scratch** buffer: where the relay reads, for the length of one poll.
//! - The **TLS spares**: a receive and a send buffer that a TLS connection takes when bytes
//!   arrive or leave and gives back once it has none left; only a connection that keeps
//!   bytes across polls (a partial record, a send the socket did not take) makes the
//!   worker allocate another.

use std::cell::{Cell, RefCell};
use std::thread::LocalKey;

/// Size of the scratch buffer: one TLS record of plaintext.
pub const SCRATCH_SIZE: usize = 16 * 1024;

/// Largest buffer kept as a spare: a TLS receive buffer at its largest (a 64 KB handshake
/// message and one more record).
pub const MAX_SPARE: usize = 0x10000 + 18 * 1024;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static SPARE_IN: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    static SPARE_OUT: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Runs `f` on this worker's scratch buffer ([`SCRATCH_SIZE`] bytes).
pub fn with_scratch<R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut b) => {
            if b.is_empty() {
                b.resize(SCRATCH_SIZE, 0);
            }
            f(&mut b)
        }
        // Only a re-entrant call could find it taken; stay correct rather than panic.
        Err(_) => f(&mut vec![0u8; SCRATCH_SIZE]),
    })
}

/// One kind of spare buffer of this worker.
#[derive(Clone, Copy)]
pub struct Spare(&'static LocalKey<Cell<Vec<u8>>>);

/// The TLS receive buffer.
pub const TLS_IN: Spare = Spare(&SPARE_IN);
/// The TLS send buffer.
pub const TLS_OUT: Spare = Spare(&SPARE_OUT);

impl Spare {
    /// The spare (empty, unallocated, if another connection holds it).
    pub fn take(self) -> Vec<u8> {
        self.0.take()
    }

    /// Gives a buffer back: the worker keeps the larger of the one it holds and this one
    /// (up to [`MAX_SPARE`]); the other is freed.
    pub fn give_back(self, buf: Vec<u8>) {
        if buf.len() <= MAX_SPARE {
            self.0.with(|s| {
                let held = s.take();
                s.set(if held.capacity() >= buf.capacity() {
                    held
                } else {
                    buf
                });
            });
        }
    }
}
