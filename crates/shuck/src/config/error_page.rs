//! `error-page = "502,503,504 /etc/shuck/50x.html"`: a page of the operator's in place of
//! the body of shuck's own error answers with those statuses (nginx's `error_page`,
//! HAProxy's `errorfile`, Caddy's `handle_errors`). The file is read when the
//! configuration is (at start and at each reload), so a page that cannot be read is an
//! error then, never a surprise under load.

use bytes::Bytes;

/// The most bytes a page may have: it is held in memory and sent whole.
pub const MAX_PAGE: u64 = 1 << 20;

/// One `error-page` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPage {
    /// The statuses it answers.
    pub codes: Vec<u16>,
    /// The file, as given (for `--test` and messages).
    pub path: String,
    /// Its bytes.
    pub body: Bytes,
    /// Its `Content-Type`, by its extension.
    pub content_type: http::HeaderValue,
    /// `intercept`: the backend's own answers with these statuses get it too (nginx's
    /// `proxy_intercept_errors`).
    pub intercept: bool,
}

/// A level's pages, in the order given; the first that names a status answers it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorPages(pub Vec<ErrorPage>);

impl ErrorPages {
    /// The page for `status`, if one is given.
    pub fn for_status(&self, status: u16) -> Option<&ErrorPage> {
        self.0.iter().find(|p| p.codes.contains(&status))
    }

    /// Reads one `CODES PATH` value into this level.
    pub fn push(&mut self, value: &str) -> Result<(), String> {
        let mut words = value.split_whitespace();
        let (Some(codes), Some(path), last, None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return Err(format!(
                "{value:?}: expected CODES PATH [intercept], as \"502,503,504 /etc/shuck/50x.html\""
            ));
        };
        let intercept = match last {
            None => false,
            Some("intercept") => true,
            Some(other) => {
                return Err(format!(
                    "{value:?}: {other:?} after the path; only intercept may follow it"
                ))
            }
        };
        let codes = codes
            .split(',')
            .map(|c| {
                c.trim()
                    .parse::<u16>()
                    .ok()
                    .filter(|c| (400..=599).contains(c))
                    .ok_or_else(|| format!("{c:?} is not an error status (400 to 599)"))
            })
            .collect::<Result<Vec<u16>, String>>()?;
        let body = read(path)?;
        self.0.push(ErrorPage {
            codes,
            path: path.to_owned(),
            body,
            content_type: content_type(path),
            intercept,
        });
        Ok(())
    }
}

impl ErrorPage {
    /// `maintenance-page`'s file: the page of a backend in maintenance (its 503).
    pub fn maintenance(path: &str) -> Result<ErrorPage, String> {
        Ok(ErrorPage {
            codes: vec![503],
            path: path.to_owned(),
            body: read(path.trim())?,
            content_type: content_type(path.trim()),
            intercept: false,
        })
    }
}

/// The page at `path`, whole.
fn read(path: &str) -> Result<Bytes, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{path}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{path}: not a regular file"));
    }
    if meta.len() > MAX_PAGE {
        return Err(format!(
            "{path}: {} bytes; a page may have {MAX_PAGE} at most",
            meta.len()
        ));
    }
    std::fs::read(path)
        .map(Bytes::from)
        .map_err(|e| format!("{path}: {e}"))
}

/// A page's type by its extension, as nginx's `mime.types` gives the common ones.
fn content_type(path: &str) -> http::HeaderValue {
    let ext = std::path::Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    http::HeaderValue::from_static(match ext.as_deref() {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("json") => "application/json",
        Some("xml") => "application/xml",
        Some("txt") => "text/plain; charset=utf-8",
        Some("css") => "text/css",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_read_with_their_type_and_refused_with_a_reason() {
        let dir = std::env::temp_dir().join(format!("shuck-error-page-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let page = dir.join("50x.html");
        std::fs::write(&page, "<h1>down</h1>").unwrap();
        let mut pages = ErrorPages::default();
        pages.push(&format!("502,503 {}", page.display())).unwrap();
        let p = pages.for_status(503).unwrap();
        assert_eq!(&p.body[..], b"<h1>down</h1>");
        assert_eq!(p.content_type, "text/html; charset=utf-8");
        assert!(pages.for_status(504).is_none());
        assert!(!p.intercept);
        pages
            .push(&format!("504 {} intercept", page.display()))
            .unwrap();
        assert!(pages.for_status(504).unwrap().intercept);
        for (v, says) in [
            (format!("302 {}", page.display()), "not an error status"),
            (format!("5xx {}", page.display()), "not an error status"),
            ("502".to_owned(), "expected CODES PATH"),
            (
                format!("502 {} extra", page.display()),
                "only intercept may follow",
            ),
            (
                format!("502 {} intercept more", page.display()),
                "expected CODES PATH",
            ),
            ("502 /nonexistent/x.html".to_owned(), "No such file"),
            (format!("502 {}", dir.display()), "not a regular file"),
        ] {
            let e = ErrorPages::default().push(&v).unwrap_err();
            assert!(e.contains(says), "{v}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
