//! Header rules applied, one implementation for every version: a request's fields as the
//! head is written (HTTP/1.1's rewriter and the core's `request::build` both pass each
//! client field through [`RequestRules`]), an answer's as an `http::HeaderMap` (HTTP/2,
//! HTTP/3, HTTP/1.1 through the core) or as HTTP/1.1 bytes (the relay's answers, shuck's
//! own HTTP/1.1 answers): [`apply_map`] and [`rewrite_h1_head`] run the same rules in the
//! same order.

use crate::config::policy::{HeaderOp, HeaderRule, HeaderRules};

/// A request's rules while its head is written: which client fields go, which of the
/// rules' names the client sent (for `?NAME`), and the rules' own fields at the end.
#[derive(Debug, Clone, Copy)]
pub struct RequestRules<'a> {
    rules: &'a [HeaderRule],
    /// Bit `i`: the client sent a field named as rule `i` (at most 64 rules a level).
    seen: u64,
}

impl<'a> RequestRules<'a> {
    /// The rules of `rules` (none: nothing changes).
    pub fn new(rules: Option<&'a HeaderRules>) -> Self {
        RequestRules {
            rules: rules.map_or(&[], |r| &r.0),
            seen: 0,
        }
    }

    /// Whether there is any rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the client's field `name` (any case) passes on: a `NAME: VALUE` or `-NAME`
    /// rule drops it.
    pub fn keeps(&mut self, name: &[u8]) -> bool {
        let mut keep = true;
        for (i, r) in self.rules.iter().enumerate() {
            if r.lower.as_str().len() == name.len()
                && r.lower.as_str().as_bytes().eq_ignore_ascii_case(name)
            {
                self.seen |= 1 << i;
                keep &= matches!(r.op, HeaderOp::Add | HeaderOp::SetIfAbsent);
            }
        }
        keep
    }

    /// The rules whose fields are written last: `NAME: VALUE` and `+NAME: VALUE` always,
    /// `?NAME: VALUE` when the client sent none of the name.
    pub fn finish(&self, mut field: impl FnMut(&HeaderRule)) {
        for (i, r) in self.rules.iter().enumerate() {
            let write = match r.op {
                HeaderOp::Set | HeaderOp::Add => true,
                HeaderOp::SetIfAbsent => self.seen & (1 << i) == 0,
                HeaderOp::Delete => false,
            };
            if write {
                field(r);
            }
        }
    }
}

/// `rules` on an answer's fields.
pub fn apply_map(rules: &HeaderRules, map: &mut http::HeaderMap) {
    // Room for what the rules add, made once rather than as each one comes.
    map.reserve(rules.0.len());
    for r in &rules.0 {
        match r.op {
            HeaderOp::Set => {
                map.insert(r.lower.clone(), r.value.clone());
            }
            HeaderOp::Add => {
                map.append(r.lower.clone(), r.value.clone());
            }
            HeaderOp::SetIfAbsent => {
                if !map.contains_key(&r.lower) {
                    map.insert(r.lower.clone(), r.value.clone());
                }
            }
            HeaderOp::Delete => {
                map.remove(&r.lower);
            }
        }
    }
}

/// An HTTP/1.1 answer's head (`head`: its status line and fields, through the blank line)
/// and `extra` (lines shuck adds: `Alt-Svc`, the request's ID, a sticky cookie) with
/// `rules` applied, into `out`. A field line is kept byte for byte unless a
/// rule removes it.
pub fn rewrite_h1_head(head: &[u8], rules: Option<&HeaderRules>, extra: &[u8], out: &mut Vec<u8>) {
    let rules = rules.map_or(&[][..], |r| &r.0);
    let body_at = head.len().saturating_sub(2);
    let mut lines = head[..body_at].split_inclusive(|&b| b == b'\n');
    // The status line.
    if let Some(l) = lines.next() {
        out.extend_from_slice(l);
    }
    // The answer's own fields, then shuck's lines: the rules see both, as they see an
    // HTTP/2 answer's fields with Alt-Svc already among them.
    let fields = lines.chain(extra.split_inclusive(|&b| b == b'\n'));
    let named = |line: &[u8], name: &str| {
        let n = name.len();
        line.len() > n && line[n] == b':' && line[..n].eq_ignore_ascii_case(name.as_bytes())
    };
    let replaces = |r: &HeaderRule| matches!(r.op, HeaderOp::Set | HeaderOp::Delete);
    // The answer's own lines, less those a Set or Delete of their name replaces; the
    // rules' fields follow them, as apply_map leaves a HeaderMap.
    for line in fields.clone() {
        let replaced = rules
            .iter()
            .any(|r| replaces(r) && named(line, r.lower.as_str()));
        if !replaced {
            out.extend_from_slice(line);
        }
    }
    let mut written: Vec<(&[u8], &[u8])> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let same = |f: &(&[u8], &[u8])| f.0.eq_ignore_ascii_case(r.lower.as_str().as_bytes());
        let field = (r.name.as_bytes(), r.value.as_bytes());
        match r.op {
            HeaderOp::Set => {
                written.retain(|f| !same(f));
                written.push(field);
            }
            HeaderOp::Add => written.push(field),
            HeaderOp::SetIfAbsent => {
                // Absent from the answer's own fields as the rules before it left them,
                // and from those the rules wrote so far.
                let own = fields.clone().any(|l| named(l, r.lower.as_str()))
                    && !rules[..i].iter().any(|o| o.lower == r.lower && replaces(o));
                if !own && !written.iter().any(same) {
                    written.push(field);
                }
            }
            HeaderOp::Delete => written.retain(|f| !same(f)),
        }
    }
    for (n, v) in written {
        out.extend_from_slice(n);
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(&head[body_at..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::policy::Direction;

    fn rules(specs: &[&str]) -> HeaderRules {
        let mut r = HeaderRules::default();
        for s in specs {
            r.push(s, Direction::Response).unwrap();
        }
        r
    }

    /// The HTTP/1.1 bytes and the HeaderMap end alike for the same rules.
    #[test]
    fn both_forms_agree() {
        let r = rules(&[
            "Strict-Transport-Security: max-age=5",
            "X-Frame-Options: DENY",
            "-Server",
            "+Via: shuck",
            "?Cache-Control: no-store",
            "?X-Kept: mine",
        ]);
        let head = b"HTTP/1.1 200 OK\r\nServer: origin\r\nX-Frame-Options: SAMEORIGIN\r\nX-Kept: theirs\r\nStrict-Transport-Security: max-age=1\r\nContent-Length: 0\r\n\r\n";
        let mut out = Vec::new();
        rewrite_h1_head(head, Some(&r), b"Alt-Svc: h3\r\n", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nX-Kept: theirs\r\nContent-Length: 0\r\nAlt-Svc: h3\r\nStrict-Transport-Security: max-age=5\r\nX-Frame-Options: DENY\r\nVia: shuck\r\nCache-Control: no-store\r\n\r\n"
        );
        // shuck's own lines are the answer's as far as the rules go, as over HTTP/2.
        let mut out = Vec::new();
        let no_alt = rules(&["-Alt-Svc"]);
        rewrite_h1_head(head, Some(&no_alt), b"Alt-Svc: h3\r\n", &mut out);
        assert!(!String::from_utf8(out).unwrap().contains("Alt-Svc"));
        let mut map = http::HeaderMap::new();
        for (n, v) in [
            ("server", "origin"),
            ("x-frame-options", "SAMEORIGIN"),
            ("x-kept", "theirs"),
            ("strict-transport-security", "max-age=1"),
        ] {
            map.append(n, http::HeaderValue::from_static(v));
        }
        apply_map(&r, &mut map);
        let got = |n: &str| {
            map.get_all(n)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        assert!(got("server").is_empty());
        assert_eq!(got("x-frame-options"), ["DENY"]);
        assert_eq!(got("via"), ["shuck"]);
        assert_eq!(got("cache-control"), ["no-store"]);
        assert_eq!(got("x-kept"), ["theirs"]);
        assert_eq!(got("strict-transport-security"), ["max-age=5"]);
    }

    #[test]
    fn request_fields_pass_or_go() {
        let mut r = HeaderRules::default();
        for s in ["X-Env: prod", "-Cookie2", "?X-Trace: new", "+Via: shuck"] {
            r.push(s, Direction::Request).unwrap();
        }
        let mut rr = RequestRules::new(Some(&r));
        assert!(!rr.keeps(b"x-env"));
        assert!(!rr.keeps(b"COOKIE2"));
        assert!(rr.keeps(b"X-Trace"));
        assert!(rr.keeps(b"via"));
        assert!(rr.keeps(b"accept"));
        let mut out = Vec::new();
        rr.finish(|r| out.push(format!("{}={}", r.name, r.value.to_str().unwrap())));
        assert_eq!(out, ["X-Env=prod", "Via=shuck"]);
        let mut fresh = RequestRules::new(Some(&r));
        let mut out = Vec::new();
        fresh.keeps(b"accept");
        fresh.finish(|r| out.push(r.name.to_string()));
        assert_eq!(out, ["X-Env", "X-Trace", "Via"]);
    }
}
