//! The edge's HTTP policy as configured (issue 61): header rules on requests and answers
//! (`--request-header`, `--response-header`, `--hsts`) and the body limit
//! (`--max-body-bytes`), each given globally, per frontend, per named backend and per
//! route. The gateway core applies them (`gateway/policy/`); here they are only read and
//! checked, so that a rule that could not be written is an error at load, never on a wire.

use std::sync::Arc;

/// What a header rule does to its field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderOp {
    /// `NAME: VALUE`: the field is this value, whatever was there (nginx's
    /// `proxy_set_header`, HAProxy's `set-header`).
    Set,
    /// `+NAME: VALUE`: one more field of the name (HAProxy's `add-header`).
    Add,
    /// `?NAME: VALUE`: the value, only when the message has none (Caddy's `?`).
    SetIfAbsent,
    /// `-NAME`: no field of the name (HAProxy's `del-header`).
    Delete,
}

/// One header rule, checked: its name a token that frames nothing and no forwarding field
/// shuck owns, its value one HTTP field value (no CR, LF, NUL or other control byte).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderRule {
    /// What it does.
    pub op: HeaderOp,
    /// The name as the operator wrote it (HTTP/1.1 writes it so).
    pub name: Box<str>,
    /// The name lowercase (HTTP/2 and HTTP/3 write it so, and it is compared so).
    pub lower: http::HeaderName,
    /// The value (empty for [`HeaderOp::Delete`]).
    pub value: http::HeaderValue,
}

/// Most rules at one level of one direction (a field seen is a bit of a word).
pub const MAX_RULES: usize = 64;

/// The rules of one direction at one level, in the order given.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeaderRules(pub Vec<HeaderRule>);

/// Which way a rule goes: the names each may not touch differ a little.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// To the backend (`request-header`).
    Request,
    /// To the client (`response-header`).
    Response,
}

/// Fields a rule may not touch: they frame the message or the connection, or shuck
/// writes them itself.
const FRAMING: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "content-length",
    "host",
    "http2-settings",
];

/// The forwarding fields shuck owns on the way to a backend (`--trusted-proxies` says
/// whose it takes).
const FORWARDING: &[&str] = &["x-forwarded-for", "x-forwarded-proto", "forwarded"];

impl HeaderRule {
    /// `NAME: VALUE`, `+NAME: VALUE`, `?NAME: VALUE` or `-NAME`, checked for `dir`.
    pub fn parse(spec: &str, dir: Direction) -> Result<HeaderRule, String> {
        let spec = spec.trim();
        let (op, rest) = match spec.as_bytes().first() {
            Some(b'+') => (HeaderOp::Add, &spec[1..]),
            Some(b'?') => (HeaderOp::SetIfAbsent, &spec[1..]),
            Some(b'-') => (HeaderOp::Delete, &spec[1..]),
            _ => (HeaderOp::Set, spec),
        };
        let (name, value) = match (op, rest.split_once(':')) {
            (HeaderOp::Delete, None) => (rest.trim(), ""),
            (HeaderOp::Delete, Some(_)) => {
                return Err(format!(
                    "{spec:?}: -NAME deletes a field and takes no value"
                ))
            }
            (_, Some((n, v))) => (n.trim(), v.trim_matches([' ', '\t'])),
            (_, None) => {
                return Err(format!(
                    "{spec:?}: expected NAME: VALUE, +NAME: VALUE, ?NAME: VALUE or -NAME"
                ))
            }
        };
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(token) {
            return Err(format!(
                "{spec:?}: {name:?} is not a field name (letters, digits and !#$%&'*+-.^_`|~; no :pseudo field)"
            ));
        }
        let lower = name.to_ascii_lowercase();
        if FRAMING.contains(&lower.as_str()) {
            return Err(format!(
                "{spec:?}: {name} frames the message or its connection; shuck writes it itself"
            ));
        }
        if dir == Direction::Request && FORWARDING.contains(&lower.as_str()) {
            return Err(format!(
                "{spec:?}: shuck writes {name} itself (--trusted-proxies says whose it keeps)"
            ));
        }
        if let Some(b) = value
            .bytes()
            .find(|&b| (b < b' ' && b != b'\t') || b == 0x7f)
        {
            return Err(format!(
                "{spec:?}: the value holds byte {b:#04x} (CR, LF, NUL and other control bytes are never written)"
            ));
        }
        let value = http::HeaderValue::from_str(value)
            .map_err(|_| format!("{spec:?}: the value is not a field value"))?;
        let lower = http::HeaderName::from_bytes(lower.as_bytes())
            .map_err(|_| format!("{spec:?}: {name:?} is not a field name"))?;
        Ok(HeaderRule {
            op,
            name: name.into(),
            lower,
            value,
        })
    }
}

impl HeaderRules {
    /// Adds `spec` (one rule) for `dir`.
    pub fn push(&mut self, spec: &str, dir: Direction) -> Result<(), String> {
        if self.0.len() == MAX_RULES {
            return Err(format!("at most {MAX_RULES} rules at one level"));
        }
        self.0.push(HeaderRule::parse(spec, dir)?);
        Ok(())
    }
}

/// `--hsts`'s value, checked as RFC 6797 §6.1 writes it: `max-age=N`, then
/// `includeSubDomains` and `preload` in any order, `;`-separated.
pub fn check_hsts(v: &str) -> Result<http::HeaderValue, String> {
    let mut age = None;
    let (mut subs, mut preload) = (false, false);
    for part in v.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let lower = part.to_ascii_lowercase();
        if let Some(n) = lower.strip_prefix("max-age=") {
            let n = n.trim_matches('"');
            if age.is_some() || n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "{v:?}: max-age takes seconds once (e.g. max-age=63072000)"
                ));
            }
            age = Some(
                n.parse::<u64>()
                    .map_err(|_| format!("{v:?}: max-age too large"))?,
            );
        } else if lower == "includesubdomains" && !subs {
            subs = true;
        } else if lower == "preload" && !preload {
            preload = true;
        } else {
            return Err(format!(
                "{v:?}: {part:?} is not max-age=N, includeSubDomains or preload (each once)"
            ));
        }
    }
    let Some(age) = age else {
        return Err(format!(
            "{v:?}: max-age=N is needed (e.g. max-age=63072000)"
        ));
    };
    let mut out = format!("max-age={age}");
    if subs {
        out.push_str("; includeSubDomains");
    }
    if preload {
        out.push_str("; preload");
    }
    http::HeaderValue::from_str(&out).map_err(|_| format!("{v:?}: not a field value"))
}

impl HeaderRule {
    /// The rule as an operator writes it (`NAME: VALUE`, `+NAME: VALUE`, `?NAME: VALUE`,
    /// `-NAME`), for `--test`.
    pub fn written(&self) -> String {
        let value = String::from_utf8_lossy(self.value.as_bytes());
        match self.op {
            HeaderOp::Set => format!("{}: {value}", self.name),
            HeaderOp::Add => format!("+{}: {value}", self.name),
            HeaderOp::SetIfAbsent => format!("?{}: {value}", self.name),
            HeaderOp::Delete => format!("-{}", self.name),
        }
    }
}

/// A body limit: bytes, with an optional `k`, `m` or `g` (powers of 1024), as nginx's
/// `client_max_body_size`; `0` is no limit, as there.
pub fn parse_body_limit(v: &str) -> Result<Option<u64>, String> {
    let t = v.trim();
    let (digits, unit) = match t.as_bytes().last() {
        Some(b'k' | b'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some(b'm' | b'M') => (&t[..t.len() - 1], 1 << 20),
        Some(b'g' | b'G') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| {
            format!("{v:?}: expected bytes, as 1048576, 512k, 10m or 1g (0: no limit)")
        })?;
    Ok((n > 0).then_some(n))
}

/// `--max-body-bytes`: a limit, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BodyLimit(pub Option<u64>);

/// The policy one level gives (global, a frontend, a named backend, a route). A part left
/// `None` is inherited from the level above, as nginx's directives are: a level that gives
/// any rule of a direction gives all of that direction's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    /// Rules on the request sent to the backend.
    pub request: Option<Arc<HeaderRules>>,
    /// Rules on the answer sent to the client, shuck's own included.
    pub response: Option<Arc<HeaderRules>>,
    /// The most bytes a request body may have (`Some(None)`: no limit here, overriding an
    /// inherited one).
    pub max_body: Option<Option<u64>>,
    /// Pages in place of shuck's own error answers' bodies (`error-page`).
    pub error_pages: Option<Arc<super::error_page::ErrorPages>>,
    /// The page of a backend in maintenance (`maintenance-page`; else its 503 page).
    pub maintenance_page: Option<Arc<super::error_page::ErrorPage>>,
}

impl Policy {
    /// Whether this level gives nothing of its own.
    pub fn is_empty(&self) -> bool {
        self.request.is_none()
            && self.response.is_none()
            && self.max_body.is_none()
            && self.error_pages.is_none()
            && self.maintenance_page.is_none()
    }

    /// `--hsts`'s field set first among this level's answer rules, when it gives some
    /// (`always`: as its only one when it gives none).
    pub fn lead_with_hsts(&mut self, value: &http::HeaderValue, always: bool) {
        if self.response.is_none() && !always {
            return;
        }
        let rule = HeaderRule {
            op: HeaderOp::Set,
            name: "Strict-Transport-Security".into(),
            lower: http::header::STRICT_TRANSPORT_SECURITY,
            value: value.clone(),
        };
        let rules = self.response.get_or_insert_with(Default::default);
        Arc::make_mut(rules).0.insert(0, rule);
    }

    /// Reads a block's or a spec's key into this level: `Ok(false)` when `key` is not
    /// one of the policy's.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        let rules = |slot: &mut Option<Arc<HeaderRules>>, dir| -> Result<bool, String> {
            let r = Arc::make_mut(slot.get_or_insert_with(Default::default));
            r.push(value, dir).map_err(|e| format!("{key}: {e}"))?;
            Ok(true)
        };
        match key {
            "request-header" => rules(&mut self.request, Direction::Request),
            "response-header" => rules(&mut self.response, Direction::Response),
            "max-body-bytes" => {
                self.max_body = Some(parse_body_limit(value).map_err(|e| format!("{key}: {e}"))?);
                Ok(true)
            }
            "maintenance-page" => {
                let page = super::error_page::ErrorPage::maintenance(value);
                self.maintenance_page = Some(Arc::new(page.map_err(|e| format!("{key}: {e}"))?));
                Ok(true)
            }
            "error-page" => {
                let pages = self.error_pages.get_or_insert_with(Default::default);
                (Arc::make_mut(pages).push(value)).map_err(|e| format!("{key}: {e}"))?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// The keys of [`Policy::set`], for messages.
pub const POLICY_KEYS: &str =
    "request-header, response-header, max-body-bytes, error-page, maintenance-page";

/// Splits a `key=value;key=value` spec on the `;` that are not escaped (`\;` is a `;` of a
/// value, `\\` a backslash): header values hold `;` (HSTS, `Cache-Control`, CSP).
pub fn split_spec(spec: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = spec.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(n @ (';' | '\\')) => parts.last_mut().map_or((), |p| p.push(n)),
                Some(n) => {
                    if let Some(p) = parts.last_mut() {
                        p.push('\\');
                        p.push(n);
                    }
                }
                None => parts.last_mut().map_or((), |p| p.push('\\')),
            },
            ';' => parts.push(String::new()),
            c => parts.last_mut().map_or((), |p| p.push(c)),
        }
    }
    parts
}

/// `value` escaped for a spec [`split_spec`] reads.
pub fn escape_spec(value: &str) -> String {
    value.replace('\\', "\\\\").replace(';', "\\;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_read_and_refused() {
        let r = HeaderRule::parse("X-Frame-Options: DENY", Direction::Response).unwrap();
        assert_eq!(
            (r.op, &*r.name, r.lower.as_str()),
            (HeaderOp::Set, "X-Frame-Options", "x-frame-options")
        );
        assert_eq!(r.value, "DENY");
        assert_eq!(
            HeaderRule::parse("+Via: shuck", Direction::Request)
                .unwrap()
                .op,
            HeaderOp::Add
        );
        assert_eq!(
            HeaderRule::parse("?A: b", Direction::Request).unwrap().op,
            HeaderOp::SetIfAbsent
        );
        assert_eq!(
            HeaderRule::parse("-Server", Direction::Response)
                .unwrap()
                .op,
            HeaderOp::Delete
        );
        for bad in [
            "Content-Length: 5",
            "transfer-encoding: chunked",
            ":path: /x",
            "X-A: a\r\nX-B: b",
            "X-A: a\0",
            "X-A",
            "-X-A: v",
            "Host: a",
            "Bad Name: v",
        ] {
            assert!(
                HeaderRule::parse(bad, Direction::Response).is_err(),
                "{bad}"
            );
        }
        assert!(HeaderRule::parse("X-Forwarded-For: 1.2.3.4", Direction::Request).is_err());
        assert!(HeaderRule::parse("X-Forwarded-For: 1.2.3.4", Direction::Response).is_ok());
    }

    #[test]
    fn hsts_is_checked() {
        assert_eq!(
            check_hsts("max-age=63072000; includeSubDomains; preload").unwrap(),
            "max-age=63072000; includeSubDomains; preload"
        );
        assert_eq!(
            check_hsts("preload;max-age=5").unwrap(),
            "max-age=5; preload"
        );
        for bad in [
            "",
            "includeSubDomains",
            "max-age=x",
            "max-age=1; max-age=2",
            "max-age=1; foo",
        ] {
            assert!(check_hsts(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_and_specs() {
        assert_eq!(parse_body_limit("10m"), Ok(Some(10 << 20)));
        assert_eq!(parse_body_limit("0"), Ok(None));
        assert_eq!(parse_body_limit("512"), Ok(Some(512)));
        assert!(parse_body_limit("ten").is_err());
        assert_eq!(
            split_spec(r"a=1;b=x\; y;c=\\"),
            vec!["a=1", "b=x; y", r"c=\"]
        );
        assert_eq!(split_spec(&escape_spec(r"p; q\r")), vec![r"p; q\r"]);
    }
}
