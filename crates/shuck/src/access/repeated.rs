//! What a connection's JSON lines repeat, written once: the connection's own fields, and
//! the request fields its requests mostly share (method, host, backend, server,
//! User-Agent, Referer), kept with the values they were written from. A line whose request
//! has the same values copies them all as one slice, instead of a key and a value each.

/// A connection's repeated JSON (its [`Conn::rendered`](super::record::Conn::rendered)).
#[derive(Debug, Clone, Default)]
pub struct Repeated {
    /// The connection's fields, then the request fields of the last line written.
    json: Vec<u8>,
    /// Where the request fields start in `json`; 0 until the connection's are written.
    conn_len: usize,
    /// The values the request fields were written from, one after another.
    key: Vec<u8>,
    /// Where each value of `key` ends.
    ends: [usize; SHARED],
    /// Which of them were `None` (a bit each).
    none: u8,
    /// Whether `key` holds values (after the first line).
    known: bool,
}

/// How many request fields are kept.
pub(super) const SHARED: usize = 6;

impl Repeated {
    /// The connection's fields and a request's shared ones (`fields`, their values), as
    /// JSON writes them: `conn` writes the former (once a connection), `request` the
    /// latter (when they differ from the last line's), each into the `Vec` it is given.
    pub(super) fn get(
        &mut self,
        fields: [Option<&[u8]>; SHARED],
        conn: impl FnOnce(&mut Vec<u8>),
        request: impl FnOnce(&mut Vec<u8>),
    ) -> &[u8] {
        if self.conn_len == 0 {
            conn(&mut self.json);
            self.conn_len = self.json.len();
        }
        if !(self.known && self.same(&fields)) {
            self.json.truncate(self.conn_len);
            request(&mut self.json);
            self.key.clear();
            self.none = 0;
            for (i, f) in fields.into_iter().enumerate() {
                match f {
                    Some(f) => self.key.extend_from_slice(f),
                    None => self.none |= 1 << i,
                }
                self.ends[i] = self.key.len();
            }
            self.known = true;
        }
        &self.json
    }

    /// Whether `fields` are the values last written.
    fn same(&self, fields: &[Option<&[u8]>; SHARED]) -> bool {
        let mut start = 0;
        for (i, f) in fields.iter().enumerate() {
            let end = self.ends[i];
            let same = match (f, self.none & (1 << i)) {
                (Some(f), 0) => self.key.get(start..end).is_some_and(|was| was == *f),
                (None, bit) => bit != 0,
                (Some(_), _) => false,
            };
            if !same {
                return false;
            }
            start = end;
        }
        true
    }
}
