//! Templates (`--access-log-format '{remote_addr} {status}'`): read into text and
//! [`Field`]s, with an error naming what is wrong and where.

use super::format::{Format, Piece, FIELDS};

/// Why a format could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    /// `{name}` names no field.
    #[error("unknown field {{{name}}} at byte {at} (fields: {})", FIELDS.iter().map(|f| f.0).collect::<Vec<_>>().join(", "))]
    Unknown {
        /// The name.
        name: String,
        /// Where it starts.
        at: usize,
    },
    /// A `{` without its `}`, or a `}` alone.
    #[error("unbalanced {what} at byte {at} (write {{{{ or }}}} for a brace)")]
    Unbalanced {
        /// `{` or `}`.
        what: char,
        /// Where.
        at: usize,
    },
    /// A template with no field.
    #[error("a template needs at least one {{field}}")]
    NoField,
}

impl std::str::FromStr for Format {
    type Err = FormatError;

    /// `combined`, `json`, or a template such as `{remote_addr} {request_method} {status}`.
    fn from_str(s: &str) -> Result<Self, FormatError> {
        match s {
            "combined" => return Ok(Format::Combined),
            "json" => return Ok(Format::Json),
            _ => {}
        }
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut rest = s.char_indices().peekable();
        while let Some((at, c)) = rest.next() {
            match c {
                '{' if rest.peek().map(|p| p.1) == Some('{') => {
                    rest.next();
                    text.push('{');
                }
                '}' if rest.peek().map(|p| p.1) == Some('}') => {
                    rest.next();
                    text.push('}');
                }
                '}' => return Err(FormatError::Unbalanced { what: '}', at }),
                '{' => {
                    let end = s[at..]
                        .find('}')
                        .ok_or(FormatError::Unbalanced { what: '{', at })?;
                    let name = &s[at + 1..at + end];
                    let field = FIELDS
                        .iter()
                        .find(|f| f.0 == name)
                        .ok_or_else(|| FormatError::Unknown {
                            name: name.to_owned(),
                            at,
                        })?
                        .1;
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(Piece::Field(field));
                    while rest.peek().is_some_and(|p| p.0 <= at + end) {
                        rest.next();
                    }
                }
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        if !pieces.iter().any(|p| matches!(p, Piece::Field(_))) {
            return Err(FormatError::NoField);
        }
        Ok(Format::Template(pieces))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::format::tests::{conn, rec};

    #[test]
    fn templates_name_their_fields_and_refuse_unknown_ones() {
        let f: Format =
            "{remote_addr}:{remote_port} {{{status}}} {cause} {request_us}us {connect_us}"
                .parse()
                .unwrap();
        let c = conn();
        let mut out = Vec::new();
        f.write(&rec(&c, b"/", b""), &mut out);
        assert_eq!(out, b"192.0.2.7:40000 {200} normal 1500us -\n");
        assert!(matches!(
            "{client} {status}".parse::<Format>(),
            Err(FormatError::Unknown { name, at: 0 }) if name == "client"
        ));
        assert!(matches!(
            "{status".parse::<Format>(),
            Err(FormatError::Unbalanced { what: '{', at: 0 })
        ));
        assert!(matches!(
            "a } b".parse::<Format>(),
            Err(FormatError::Unbalanced { what: '}', at: 2 })
        ));
        assert_eq!("plain".parse::<Format>(), Err(FormatError::NoField));
    }
}
