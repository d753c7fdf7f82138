//! How one value of a line is written: numbers, addresses and times without the formatting
//! machinery (a busy worker formats a date once a second), and the two escapings of what a
//! client sent: nginx's (`"`, `\` and bytes outside 0x20..=0x7e as `\xHH`) and JSON's
//! (valid for any bytes: one that is not UTF-8 becomes the text `\xHH`).

use std::cell::RefCell;
use std::net::SocketAddr;

/// Where a line is written: a buffer's bytes, already there, written by index. A line's
/// forty-odd pieces then cost a bounds check and a copy each, not a `Vec`'s check for
/// room and store of its length (with `put_var`, about 200 of a JSON line's 1 700
/// instructions: bench/callgrind-line.sh).
/// Its owner gives it room for the line's bound ([`super::format::Format::bound`]); a
/// piece that would not fit is not written, and [`Out::fits`] says so.
pub(super) struct Out<'a> {
    room: &'a mut [u8],
    at: usize,
}

impl<'a> Out<'a> {
    /// Writing at the start of `room`.
    pub(super) fn new(room: &'a mut [u8]) -> Self {
        Out { room, at: 0 }
    }

    #[inline(always)]
    pub(super) fn put(&mut self, s: &[u8]) {
        let end = self.at + s.len();
        if let Some(d) = self.room.get_mut(self.at..end) {
            d.copy_from_slice(s);
        }
        self.at = end;
    }

    /// [`put`](Out::put) for a value of any length, short ones most often (a number's
    /// digits, a method, a host): up to 32 bytes by two loads and stores, overlapping, as
    /// `memcpy` does inside, without the call.
    #[inline(always)]
    pub(super) fn put_var(&mut self, s: &[u8]) {
        let n = s.len();
        let end = self.at + n;
        if let Some(d) = self.room.get_mut(self.at..end) {
            let mut at = |i: usize, w: usize| d[i..i + w].copy_from_slice(&s[i..i + w]);
            match n {
                0 => {}
                1..=3 => {
                    at(0, 1);
                    at(n / 2, 1);
                    at(n - 1, 1);
                }
                4..=7 => {
                    at(0, 4);
                    at(n - 4, 4);
                }
                8..=16 => {
                    at(0, 8);
                    at(n - 8, 8);
                }
                17..=32 => {
                    at(0, 16);
                    at(n - 16, 16);
                }
                _ => d.copy_from_slice(s),
            }
        }
        self.at = end;
    }

    #[inline(always)]
    pub(super) fn byte(&mut self, b: u8) {
        if let Some(d) = self.room.get_mut(self.at) {
            *d = b;
        }
        self.at += 1;
    }

    /// Bytes written: the line's length, when it [`fits`](Out::fits).
    pub(super) fn written(&self) -> usize {
        self.at
    }

    /// Whether every piece was written: false only when a bound was wrong.
    pub(super) fn fits(&self) -> bool {
        self.at <= self.room.len()
    }
}

impl std::io::Write for Out<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.put(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Which escaping a value gets.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Escape {
    /// `combined` and templates.
    Nginx,
    /// JSON.
    Json,
}

pub(super) fn ip(a: SocketAddr, out: &mut Out<'_>, esc: Escape) {
    if esc == Escape::Json {
        out.byte(b'"');
    }
    match a.ip().to_canonical() {
        // The common case without the formatting machinery: four numbers and dots.
        std::net::IpAddr::V4(v4) => {
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.byte(b'.');
                }
                number(u64::from(o), out);
            }
        }
        v6 => {
            use std::io::Write;
            let _ = write!(out, "{v6}");
        }
    }
    if esc == Escape::Json {
        out.byte(b'"');
    }
}

/// A number's digits. Called, not inlined: inlined at each of a JSON line's ten numbers it
/// made the line's code 16 KB, and a request with the log on missed the instruction cache
/// about 100 times more (callgrind's cache model) where out of line it misses 30 more, for
/// the same instructions.
#[inline(never)]
pub(super) fn number(n: u64, out: &mut Out<'_>) {
    // itoa writes two digits a step from a table: half the divisions of a digit loop.
    out.put_var(itoa::Buffer::new().format(n).as_bytes());
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// How many bytes `s` starts with that neither escaping touches: printable ASCII but `"`
/// and `\\` (the same set for nginx's and JSON's). Eight bytes a step: a word's bytes are
/// tested at once (below 0x20, 0x7f and up, or equal to `"` or `\\`), and only a word
/// that has one is looked at byte by byte.
pub(super) fn plain_run(s: &[u8]) -> usize {
    let mut done = 0;
    while let Some(chunk) = s.get(done..done + 8) {
        if !plain_word(chunk) {
            return done + slow_run(&s[done..]);
        }
        done += 8;
    }
    if done == s.len() {
        return done;
    }
    // The tail, fewer than eight bytes, in one test too: as the last eight bytes (some
    // already passed) or, in a shorter value, padded with plain ones.
    let tail_plain = match s.len().checked_sub(8) {
        Some(from) => plain_word(&s[from..]),
        None => {
            let mut b = [b'a'; 8];
            b[..s.len()].copy_from_slice(s);
            plain_word(&b)
        }
    };
    if tail_plain {
        s.len()
    } else {
        done + slow_run(&s[done..])
    }
}

/// Whether eight bytes are all plain: each of them tested at once (below 0x20, 0x7f and
/// up, or equal to `"` or `\\`).
#[inline(always)]
fn plain_word(chunk: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // High bits marking a zero byte of `w`: exact as a yes or no (the borrow of a lower
    // zero byte can mark a higher one too, which a yes or no does not mind).
    let zero_marks = |w: u64| w.wrapping_sub(ONES) & !w;
    let mut b = [0; 8];
    b.copy_from_slice(&chunk[..8]);
    let w = u64::from_ne_bytes(b);
    // Below 0x20: as `zero_marks` with 0x20 in place of 1 (exact for any bound up to
    // 0x80). 0x7f and up: the high bit, of the byte or of it plus one (a carry from a
    // lower byte only comes from 0xff, itself marked).
    let low = w.wrapping_sub(ONES * 0x20) & !w;
    let high = w | w.wrapping_add(ONES);
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    // One test of every mark's high bits, not a branch each.
    (low | high | zero_marks(quote) | zero_marks(backslash)) & HIGH == 0
}

/// [`plain_run`] a byte at a time, once a word has something to escape.
fn slow_run(s: &[u8]) -> usize {
    s.iter()
        .position(|&b| !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\')
        .unwrap_or(s.len())
}

/// nginx's default escaping: `"`, `\\` and bytes outside 0x20..=0x7e as `\xHH`. Runs of
/// plain bytes are copied whole.
pub(super) fn nginx(mut s: &[u8], out: &mut Out<'_>) {
    loop {
        let run = plain_run(s);
        out.put(&s[..run]);
        let Some((&b, rest)) = s[run..].split_first() else {
            return;
        };
        out.put(&[
            b'\\',
            b'x',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 15)],
        ]);
        s = rest;
    }
}

/// A JSON string's inside: UTF-8 passes, controls as `\u00HH`, `"` and `\` escaped, and each
/// byte of an invalid sequence as the text `\xHH` (its backslash escaped), so that any
/// bytes make valid JSON and nothing is lost.
pub(super) fn json_str(mut s: &[u8], out: &mut Out<'_>) {
    // Most values are printable ASCII without a quote or backslash: one pass copies them.
    let plain = plain_run(s);
    out.put(&s[..plain]);
    s = &s[plain..];
    while !s.is_empty() {
        match std::str::from_utf8(s) {
            Ok(valid) => return json_valid(valid, out),
            Err(e) => {
                let (good, bad) = s.split_at(e.valid_up_to());
                json_valid(std::str::from_utf8(good).unwrap_or(""), out);
                let n = e.error_len().unwrap_or(bad.len());
                for &b in &bad[..n] {
                    out.put(&[
                        b'\\',
                        b'\\',
                        b'x',
                        HEX[usize::from(b >> 4)],
                        HEX[usize::from(b & 15)],
                    ]);
                }
                s = &bad[n..];
            }
        }
    }
}

fn json_valid(s: &str, out: &mut Out<'_>) {
    let mut s = s.as_bytes();
    loop {
        // Runs of bytes that need nothing are copied whole (UTF-8 past ASCII included).
        let run = s
            .iter()
            .position(|&b| b < 0x20 || b == b'"' || b == b'\\' || b == 0x7f)
            .unwrap_or(s.len());
        out.put(&s[..run]);
        let Some((&b, rest)) = s[run..].split_first() else {
            return;
        };
        match b {
            b'"' => out.put(b"\\\""),
            b'\\' => out.put(b"\\\\"),
            b'\n' => out.put(b"\\n"),
            b'\r' => out.put(b"\\r"),
            b'\t' => out.put(b"\\t"),
            _ => out.put(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]),
        }
        s = rest;
    }
}

/// The second last formatted on this thread, both ways, so that a busy worker formats a
/// date once a second.
struct Stamp {
    second: u64,
    iso: [u8; 19],
    local: [u8; 26],
}

thread_local! {
    static STAMP: RefCell<Stamp> = const { RefCell::new(Stamp { second: u64::MAX, iso: [0; 19], local: [0; 26] }) };
}

/// "00" to "99", two bytes each.
const PAIRS: [u8; 200] = {
    let mut t = [0; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// `2026-11-28T07:45:01.123456Z`, or `local`: `28/Nov/2026:07:45:01 +0000`.
pub(super) fn stamp(t_us: u64, out: &mut Out<'_>, local: bool) {
    let second = t_us / 1_000_000;
    STAMP.with(|s| {
        let mut s = s.borrow_mut();
        if s.second != second {
            let dt = time::OffsetDateTime::from_unix_timestamp(second as i64)
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            let (y, mo, d) = (dt.year(), u8::from(dt.month()), dt.day());
            let (h, mi, se) = (dt.hour(), dt.minute(), dt.second());
            let iso = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{se:02}");
            const MONTHS: [&str; 12] = [
                "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
            ];
            let name = MONTHS[usize::from(mo.saturating_sub(1)).min(11)];
            let loc = format!("{d:02}/{name}/{y:04}:{h:02}:{mi:02}:{se:02} +0000");
            if iso.len() == 19 && loc.len() == 26 {
                s.iso.copy_from_slice(iso.as_bytes());
                s.local.copy_from_slice(loc.as_bytes());
                s.second = second;
            }
        }
        if local {
            out.put(&s.local);
        } else {
            out.put(&s.iso);
            // `.uuuuuuZ`: three pairs of digits, each from a table.
            let micros = (t_us % 1_000_000) as usize;
            let pair = |p: usize| {
                let at = 2 * (p % 100);
                [PAIRS[at], PAIRS[at + 1]]
            };
            let [a, b] = pair(micros / 10_000);
            let [c, d] = pair(micros / 100);
            let [e, f] = pair(micros);
            out.put(&[b'.', a, b, c, d, e, f, b'Z']);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::{plain_run, Out};

    #[test]
    fn stamps_write_every_microsecond_digit() {
        for (us, want) in [
            (0, "1970-01-01T00:00:00.000000Z"),
            (1_795_851_901_123_456, "2026-11-28T07:45:01.123456Z"),
            (1_795_851_901_999_999, "2026-11-28T07:45:01.999999Z"),
            (1_795_851_902_010_203, "2026-11-28T07:45:02.010203Z"),
        ] {
            let mut room = [0u8; 64];
            let mut out = Out::new(&mut room);
            super::stamp(us, &mut out, false);
            let n = out.written();
            assert_eq!(std::str::from_utf8(&room[..n]).unwrap(), want);
        }
    }

    #[test]
    fn put_var_copies_every_length_whole() {
        let src: Vec<u8> = (1..=80).collect();
        for n in 0..=80 {
            let mut room = [0u8; 100];
            let mut out = Out::new(&mut room);
            out.byte(b'<');
            out.put_var(&src[..n]);
            out.byte(b'>');
            assert!(out.fits());
            let len = out.written();
            assert_eq!(
                room[..len],
                [&[b'<'][..], &src[..n], b">"].concat()[..],
                "{n}"
            );
        }
        // Past the room: nothing written beyond it, and said so.
        let mut room = [0u8; 4];
        let mut out = Out::new(&mut room);
        out.put_var(&src[..5]);
        assert!(!out.fits());
    }

    #[test]
    fn plain_run_stops_where_a_byte_by_byte_scan_does() {
        let slow = |s: &[u8]| {
            s.iter()
                .position(|&b| !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\')
                .unwrap_or(s.len())
        };
        // Every byte value at every place of runs of plain text 1 to 19 bytes long (a
        // word and its tail, a tail alone).
        for len in 1..=19 {
            for bad in 0..=255u8 {
                for at in 0..len {
                    let mut s = b"abcdefghijklmnopqrs"[..len].to_vec();
                    s[at] = bad;
                    assert_eq!(plain_run(&s), slow(&s), "byte {bad:#x} at {at} of {len}");
                    s[at..].fill(bad);
                    assert_eq!(plain_run(&s), slow(&s), "bytes {bad:#x} from {at} of {len}");
                }
            }
        }
        assert_eq!(plain_run(b""), 0);
    }
}
