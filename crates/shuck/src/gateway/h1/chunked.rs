//! Following a chunked body as it streams past, without buffering it: only the framing is
//! tracked, so that the end of the body (and the start of the next message) is known.

/// Why a chunked body is malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkError(pub &'static str);

/// Where in a chunked body we are, and what its data may still bring (`--max-body-bytes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunked(Step, crate::gateway::policy::body::Budget);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Reading a chunk-size line (`len` bytes of it so far, `size` parsed so far).
    Size {
        size: u64,
        digits: usize,
        in_ext: bool,
        len: usize,
        cr: bool,
    },
    /// Inside chunk data.
    Data(u64),
    /// Expecting the CRLF after chunk data (`seen` of its 2 bytes).
    DataEnd(u8),
    /// In the trailer section (`line` bytes into the current line).
    Trailer { line: usize, cr: bool, total: usize },
    /// The body has ended.
    Done,
}

const MAX_LINE: usize = 4096;
const MAX_TRAILER: usize = 16 * 1024;

impl Chunked {
    /// At the start of a chunked body.
    pub fn new() -> Self {
        Chunked(Step::size_line(), Default::default())
    }

    /// At the start of a chunked body whose data is held to `budget`: a chunk that takes
    /// it past is refused at its size line, before a byte of it passes.
    pub fn within(budget: crate::gateway::policy::body::Budget) -> Self {
        Chunked(Step::size_line(), budget)
    }

    /// Consumes body bytes from `input`; returns how many it took: less than
    /// `input.len()` once the body has ended, or where the trailer section begins (call
    /// again with the rest).
    pub fn advance(&mut self, input: &[u8]) -> Result<usize, ChunkError> {
        let mut i = 0;
        let (state, budget) = (&mut self.0, &mut self.1);
        while i < input.len() {
            match state {
                Step::Done => return Ok(i),
                Step::Data(left) => {
                    let take = (*left).min((input.len() - i) as u64) as usize;
                    i += take;
                    *left -= take as u64;
                    if *left == 0 {
                        *state = Step::DataEnd(0);
                    }
                }
                Step::DataEnd(seen) => {
                    let want = if *seen == 0 { b'\r' } else { b'\n' };
                    if input[i] != want {
                        return Err(ChunkError("chunk data not followed by CRLF"));
                    }
                    i += 1;
                    *seen += 1;
                    if *seen == 2 {
                        *state = Step::size_line();
                    }
                }
                Step::Size {
                    size,
                    digits,
                    in_ext,
                    len,
                    cr,
                } => {
                    let b = input[i];
                    i += 1;
                    *len += 1;
                    if *len > MAX_LINE {
                        return Err(ChunkError("chunk-size line too long"));
                    }
                    if *cr {
                        if b != b'\n' {
                            return Err(ChunkError("bare CR in chunk-size line"));
                        }
                        if *digits == 0 {
                            return Err(ChunkError("missing chunk size"));
                        }
                        if *size == 0 {
                            *state = Step::Trailer {
                                line: 0,
                                cr: false,
                                total: 0,
                            };
                            // The caller sees where the trailer section begins.
                            return Ok(i);
                        }
                        budget
                            .take(*size)
                            .map_err(|_| ChunkError(crate::gateway::policy::body::TOO_LARGE))?;
                        *state = Step::Data(*size);
                        continue;
                    }
                    match b {
                        b'\r' => *cr = true,
                        b'\n' => return Err(ChunkError("bare LF in chunk-size line")),
                        _ if *in_ext => {}
                        b';' => *in_ext = true,
                        b' ' | b'\t' if *digits > 0 => *in_ext = true,
                        _ => {
                            let d = (b as char)
                                .to_digit(16)
                                .ok_or(ChunkError("bad chunk size"))?;
                            *digits += 1;
                            if *digits > 15 {
                                return Err(ChunkError("chunk size too large"));
                            }
                            *size = *size * 16 + u64::from(d);
                        }
                    }
                }
                Step::Trailer { line, cr, total } => {
                    let b = input[i];
                    i += 1;
                    *total += 1;
                    if *total > MAX_TRAILER {
                        return Err(ChunkError("trailer section too large"));
                    }
                    if *cr {
                        if b != b'\n' {
                            return Err(ChunkError("bare CR in trailer"));
                        }
                        if *line == 0 {
                            *state = Step::Done;
                        } else {
                            *line = 0;
                            *cr = false;
                        }
                    } else if b == b'\r' {
                        *cr = true;
                    } else if b == b'\n' {
                        return Err(ChunkError("bare LF in trailer"));
                    } else {
                        *line += 1;
                    }
                }
            }
        }
        Ok(i)
    }

    /// True while in the trailer section (after the last chunk).
    pub fn in_trailer(&self) -> bool {
        matches!(self.0, Step::Trailer { .. })
    }

    /// True once the final chunk and trailer have passed.
    pub fn is_done(&self) -> bool {
        self.0 == Step::Done
    }
}

impl Step {
    fn size_line() -> Self {
        Step::Size {
            size: 0,
            digits: 0,
            in_ext: false,
            len: 0,
            cr: false,
        }
    }
}

impl Default for Chunked {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(body: &[u8], step: usize) -> Result<usize, ChunkError> {
        let mut c = Chunked::new();
        let mut used = 0;
        for part in body.chunks(step) {
            let mut at = 0;
            while at < part.len() {
                let n = c.advance(&part[at..])?;
                at += n;
                used += n;
                if c.is_done() {
                    return Ok(used);
                }
            }
        }
        Err(ChunkError("not done"))
    }

    #[test]
    fn finds_the_end_at_any_split() {
        let body = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 100] {
            assert_eq!(run(body, step), Ok(body.len() - 4), "step {step}");
        }
    }

    #[test]
    fn malformed_bodies() {
        for bad in [
            &b"x\r\n"[..],
            b"4\r\nWikiXX",
            b"\r\n",
            b"4\nWiki\r\n",
            b"ffffffffffffffff1\r\n",
            b"4\r\nWiki\r\n0\r\nbad\nline\r\n\r\n",
        ] {
            assert!(run(bad, 1).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
