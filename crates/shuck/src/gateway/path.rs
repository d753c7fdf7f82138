//! A request's path as routes match it: the same resource the backend will read, however
//! the client spelled it. `//admin/x`, `/%61dmin/x`, `/./admin/x` and `/api/../admin/x`
//! all name `/admin/x`, so a `path-prefix = "/admin/"` route takes them all (nginx
//! normalises its locations the same way). The request goes on to the backend as the client
//! wrote it: only the match is normalised.

use std::borrow::Cow;

/// `path` (its query left out) with unreserved characters percent-decoded (RFC 3986
/// §2.3), empty segments merged (`//`) and dot segments removed (§5.2.4). Borrowed when
/// there is nothing to do, as for nearly every request.
pub fn for_matching(path: &str) -> Cow<'_, str> {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    // One pass: a `%`, or a `/` followed by `/` or `.`, is all that can need work.
    let b = path.as_bytes();
    let plain = b
        .iter()
        .enumerate()
        .all(|(i, &c)| c != b'%' && (c != b'/' || !matches!(b.get(i + 1), Some(b'/' | b'.'))));
    if plain {
        return Cow::Borrowed(path);
    }
    let decoded = decode_unreserved(path);
    let mut out: Vec<&str> = Vec::new();
    let mut trailing = false;
    for seg in decoded.split('/') {
        trailing = false;
        match seg {
            "" | "." => trailing = true,
            ".." => {
                out.pop();
                trailing = true;
            }
            s => out.push(s),
        }
    }
    let mut s = String::with_capacity(decoded.len());
    for seg in &out {
        s.push('/');
        s.push_str(seg);
    }
    if trailing || s.is_empty() {
        s.push('/');
    }
    Cow::Owned(s)
}

/// Whether `path` (its query left out) holds `%2F`, `%5C` (any case) or `\`: a separator a
/// backend may decode or read as one, which route matching leaves inside its segment.
pub fn has_encoded_separator(path: &str) -> bool {
    let path = path.split_once('?').map_or(path, |(p, _)| p).as_bytes();
    path.contains(&b'\\')
        || path.windows(3).any(|w| {
            w[0] == b'%'
                && (w[1] == b'2' && w[2].eq_ignore_ascii_case(&b'f')
                    || w[1] == b'5' && w[2].eq_ignore_ascii_case(&b'c'))
        })
}

/// Decodes `%XX` where it stands for an unreserved character; leaves every other escape
/// (a `%2F` is not a `/`: it stays inside its segment).
fn decode_unreserved(path: &str) -> Cow<'_, str> {
    if !path.contains('%') {
        return Cow::Borrowed(path);
    }
    let b = path.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(c) = hex.filter(|c| c.is_ascii_alphanumeric() || b"-._~".contains(c)) {
                out.push(char::from(c));
                i += 3;
                continue;
            }
        }
        // Only ASCII reaches here in a checked request; any other byte is kept as it is.
        let ch = path[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8();
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_path_match_alike() {
        for p in [
            "/admin/x",
            "//admin/x",
            "/%61dmin/x",
            "/%61%64min/x",
            "/./admin/x",
            "/api/../admin/x",
            "/admin//x",
            "/admin/./x?q=/api/",
        ] {
            assert_eq!(for_matching(p), "/admin/x", "{p}");
        }
        assert_eq!(for_matching("/admin/"), "/admin/");
        assert_eq!(for_matching("/admin/."), "/admin/");
        assert_eq!(for_matching("/../.."), "/");
        assert_eq!(for_matching("/a%2Fb"), "/a%2Fb", "an encoded slash stays");
        assert_eq!(for_matching("/a%zz%4"), "/a%zz%4");
        assert_eq!(for_matching("/ok?x=1"), "/ok");
        assert!(matches!(for_matching("/plain/path"), Cow::Borrowed(_)));
        assert_eq!(for_matching("*"), "*");
    }
}
