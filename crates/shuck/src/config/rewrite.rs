//! What a route does to a request beside choosing its backend: a redirect it answers
//! itself (`redirect`, `redirect-code`: nginx's `return 301 URL`, Caddy's `redir`) or the
//! path it sends rewritten (`strip-prefix`, `replace-prefix`: Caddy's `handle_path`,
//! nginx's `proxy_pass http://b/new/` in a `location /old/`).

/// A route's action.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteAction {
    /// `redirect`: answered by shuck, nothing sent to a backend.
    pub redirect: Option<Redirect>,
    /// `strip-prefix`, `replace-prefix`.
    pub rewrite: Option<PathRewrite>,
}

impl RouteAction {
    /// Whether it does anything.
    pub fn any(&self) -> bool {
        self.redirect.is_some() || self.rewrite.is_some()
    }
}

/// A redirect's `Location`, as a template, and its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pieces: Vec<Piece>,
    /// `redirect-code` (308 unless given).
    pub code: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Host,
    Path,
    Query,
}

/// The placeholders a template may hold.
pub const PLACEHOLDERS: &str = "{host}, {path}, {query}";

impl Redirect {
    /// `redirect`'s value: an absolute URL (`https://...`) or an absolute path, with
    /// `{host}`, `{path}` and `{query}` in it.
    pub fn parse(v: &str) -> Result<Redirect, String> {
        if v.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(format!(
                "redirect {v:?}: a URL without spaces or control bytes"
            ));
        }
        let lower = v.to_ascii_lowercase();
        if !(lower.starts_with("https://") || lower.starts_with("http://") || v.starts_with('/'))
            || v.starts_with("//")
        {
            return Err(format!(
                "redirect {v:?}: expected an absolute URL (https://...) or a path starting with /"
            ));
        }
        let mut pieces = Vec::new();
        let mut rest = v;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_owned()));
            }
            let close = rest[open..].find('}').ok_or_else(|| {
                format!("redirect {v:?}: a {{ without its }} (placeholders: {PLACEHOLDERS})")
            })?;
            pieces.push(match &rest[open..open + close + 1] {
                "{host}" => Piece::Host,
                "{path}" => Piece::Path,
                "{query}" => Piece::Query,
                other => {
                    return Err(format!(
                        "redirect {v:?}: unknown placeholder {other} (placeholders: {PLACEHOLDERS})"
                    ))
                }
            });
            rest = &rest[open + close + 1..];
        }
        if rest.contains('}') {
            return Err(format!("redirect {v:?}: a }} without its {{"));
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        Ok(Redirect { pieces, code: 308 })
    }

    /// The template as written, for `--test`.
    pub fn template(&self) -> String {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.as_str(),
                Piece::Host => "{host}",
                Piece::Path => "{path}",
                Piece::Query => "{query}",
            })
            .collect()
    }

    /// The `Location` for a request to `host` (lowercase, without its port) for `target`
    /// (its path and query, as the client wrote them). `{query}` is `?` and the query, or
    /// nothing; `{path}` starts with one `/` (a client's `//evil.example/` would make a
    /// `redirect = "{path}"` lead off the site); a byte a field may not carry as it is is
    /// percent-encoded.
    pub fn location(&self, host: &str, target: &str) -> String {
        let (path, query) = target
            .split_once('?')
            .map_or((target, None), |(p, q)| (p, Some(q)));
        let path = format!("/{}", path.trim_start_matches('/'));
        let mut out = String::with_capacity(64);
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Host => push_escaped(&mut out, host),
                Piece::Path => push_escaped(&mut out, &path),
                Piece::Query => {
                    if let Some(q) = query {
                        out.push('?');
                        push_escaped(&mut out, q);
                    }
                }
            }
        }
        out
    }
}

/// `s` with every byte outside visible ASCII percent-encoded (a request's path may carry
/// raw UTF-8; a `Location` is written as visible ASCII).
fn push_escaped(out: &mut String, s: &str) {
    for b in s.bytes() {
        if (0x21..0x7f).contains(&b) {
            out.push(char::from(b));
        } else {
            use std::fmt::Write as _;
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// A path's prefix replaced: `strip-prefix = on` (by `/`) or `replace-prefix = "/new/"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRewrite {
    /// The route's `path-prefix`.
    pub prefix: String,
    /// What takes its place.
    pub to: String,
}

impl PathRewrite {
    /// The path sent for a request whose normalized path (`gateway/path.rs`, the one
    /// routes match) is `matched`, with `query` (without its `?`): the prefix replaced,
    /// always starting with `/` and never with `//`. `None` when the prefix is not there
    /// (the route did not choose by it).
    pub fn apply(&self, matched: &str, query: Option<&str>) -> Option<String> {
        let rest = matched.strip_prefix(self.prefix.as_str())?;
        let mut out = String::with_capacity(self.to.len() + rest.len() + 1);
        out.push_str(&self.to);
        match (out.ends_with('/'), rest.strip_prefix('/')) {
            (true, Some(r)) => out.push_str(r),
            (false, None) if !rest.is_empty() => {
                out.push('/');
                out.push_str(rest);
            }
            _ => out.push_str(rest),
        }
        if !out.starts_with('/') {
            out.insert(0, '/');
        }
        while out.starts_with("//") {
            out.remove(0);
        }
        if let Some(q) = query {
            out.push('?');
            out.push_str(q);
        }
        Some(out)
    }
}

/// `replace-prefix`'s value.
pub fn parse_replacement(v: &str) -> Result<String, String> {
    if !v.starts_with('/') || v.starts_with("//") || v.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "replace-prefix {v:?}: a path starting with one /, without spaces or control bytes"
        ));
    }
    if v.contains(['?', '#']) {
        return Err(format!("replace-prefix {v:?}: a path, without ? or #"));
    }
    Ok(v.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_is_its_template_with_the_request_in_it() {
        let r = Redirect::parse("https://example.com{path}{query}").unwrap();
        assert_eq!(
            r.location("www.example.com", "/a/b?x=1"),
            "https://example.com/a/b?x=1"
        );
        assert_eq!(r.location("www.example.com", "/a"), "https://example.com/a");
        assert_eq!(r.location("h", "/a?"), "https://example.com/a?");
        // A path that would leave the site is one slash; raw bytes are encoded.
        let rel = Redirect::parse("{path}").unwrap_err();
        assert!(rel.contains("absolute URL"), "{rel}");
        let r = Redirect::parse("/new{path}").unwrap();
        assert_eq!(r.location("h", "//evil.example/x"), "/new/evil.example/x");
        let r = Redirect::parse("https://{host}/m{path}").unwrap();
        assert_eq!(r.location("shop", "/é"), "https://shop/m/%C3%A9");
    }

    #[test]
    fn a_template_that_could_not_be_written_is_refused() {
        for (v, says) in [
            ("https://a/{nope}", "unknown placeholder {nope}"),
            ("https://a/{path", "without its }"),
            ("https://a/}", "without its {"),
            ("https://a b", "without spaces"),
            ("ftp://a/", "absolute URL"),
            ("//a/", "absolute URL"),
            ("a/b", "absolute URL"),
        ] {
            let e = Redirect::parse(v).unwrap_err();
            assert!(e.contains(says), "{v}: {e}");
        }
    }

    #[test]
    fn a_prefix_is_replaced_and_the_path_stays_absolute() {
        let strip = |p: &str| PathRewrite {
            prefix: p.into(),
            to: "/".into(),
        };
        assert_eq!(strip("/api/").apply("/api/x/y", None).unwrap(), "/x/y");
        assert_eq!(
            strip("/api").apply("/api/x", Some("q=1")).unwrap(),
            "/x?q=1"
        );
        assert_eq!(strip("/api").apply("/api", None).unwrap(), "/");
        assert_eq!(strip("/api").apply("/apix", None).unwrap(), "/x");
        assert_eq!(strip("/api/").apply("/api//x", None).unwrap(), "/x");
        assert_eq!(strip("/api/").apply("/other", None), None);
        let to = |p: &str, t: &str| PathRewrite {
            prefix: p.into(),
            to: t.into(),
        };
        assert_eq!(to("/api/", "/v2/").apply("/api/x", None).unwrap(), "/v2/x");
        assert_eq!(to("/api", "/v2").apply("/api/x", None).unwrap(), "/v2/x");
        assert_eq!(to("/api/", "/v2").apply("/api/x", None).unwrap(), "/v2/x");
        assert_eq!(to("/api", "/v2/").apply("/api", None).unwrap(), "/v2/");
        assert!(parse_replacement("v2").is_err());
        assert!(parse_replacement("//v2").is_err());
        assert!(parse_replacement("/v2?a").is_err());
        assert_eq!(parse_replacement("/v2/").unwrap(), "/v2/");
    }
}
