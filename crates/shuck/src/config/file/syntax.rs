//! hitch.conf's syntax: `key = value` lines, `{ ... }` blocks, `#` comments, quoted
//! strings (with `\"` and `\\`) and bare words, read into entries with their lines.

/// One `key = value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key as written.
    pub key: String,
    /// Its value.
    pub value: Value,
    /// The line of the key.
    pub line: usize,
}

/// A value: words on the key's line, or a `{ ... }` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A quoted string or the bare words up to the end of the line, joined by spaces.
    Scalar(String),
    /// The entries of a block.
    Block(Vec<Entry>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Quoted(String),
    Eq,
    Open,
    Close,
}

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, (usize, String)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            '\n' => {
                line += 1;
                chars.next();
            }
            c if c.is_whitespace() => {
                chars.next();
            }
            '#' => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            '=' | '{' | '}' => {
                chars.next();
                out.push((
                    match c {
                        '=' => Tok::Eq,
                        '{' => Tok::Open,
                        _ => Tok::Close,
                    },
                    line,
                ));
            }
            '"' => {
                chars.next();
                let start = line;
                let mut s = String::new();
                loop {
                    match chars.next() {
                        None => return Err((start, "unterminated string (missing \")".into())),
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(e @ ('"' | '\\')) => s.push(e),
                            Some('n') => s.push('\n'),
                            Some(other) => {
                                return Err((line, format!("unknown escape \\{other} in a string")))
                            }
                            None => return Err((start, "unterminated string (missing \")".into())),
                        },
                        Some('\n') => {
                            return Err((
                                start,
                                "unterminated string (missing \" before the end of the line)"
                                    .into(),
                            ))
                        }
                        Some(c) => s.push(c),
                    }
                }
                out.push((Tok::Quoted(s), start));
            }
            _ => {
                let mut s = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, '=' | '{' | '}' | '"' | '#') {
                        break;
                    }
                    if c.is_control() {
                        return Err((line, format!("unexpected control character {:?}", c)));
                    }
                    s.push(c);
                    chars.next();
                }
                out.push((Tok::Word(s), line));
            }
        }
    }
    Ok(out)
}

/// Parses the text of a file.
pub fn parse(text: &str) -> Result<Vec<Entry>, (usize, String)> {
    let toks = lex(text)?;
    let mut pos = 0;
    let entries = parse_entries(&toks, &mut pos, None)?;
    Ok(entries)
}

fn parse_entries(
    toks: &[(Tok, usize)],
    pos: &mut usize,
    open_line: Option<usize>,
) -> Result<Vec<Entry>, (usize, String)> {
    let mut entries = Vec::new();
    loop {
        let Some((tok, line)) = toks.get(*pos) else {
            return match open_line {
                Some(l) => Err((l, "block not closed (missing })".into())),
                None => Ok(entries),
            };
        };
        let line = *line;
        let key = match tok {
            Tok::Close if open_line.is_some() => {
                *pos += 1;
                return Ok(entries);
            }
            Tok::Word(k) if is_key(k) => k.clone(),
            Tok::Close => return Err((line, "} without a block to close".into())),
            other => return Err((line, format!("expected a key, found {}", describe(other)))),
        };
        *pos += 1;
        match toks.get(*pos) {
            Some((Tok::Eq, _)) => *pos += 1,
            _ => return Err((line, format!("expected = after {key}"))),
        }
        let value = match toks.get(*pos) {
            Some((Tok::Open, l)) => {
                let l = *l;
                *pos += 1;
                Value::Block(parse_entries(toks, pos, Some(l))?)
            }
            Some((Tok::Quoted(s), _)) => {
                *pos += 1;
                Value::Scalar(s.clone())
            }
            Some((Tok::Word(_), l)) if *l == line => {
                let mut words = Vec::new();
                while let Some((Tok::Word(w), l)) = toks.get(*pos) {
                    if *l != line || toks.get(*pos + 1).is_some_and(|(t, _)| *t == Tok::Eq) {
                        break;
                    }
                    words.push(w.clone());
                    *pos += 1;
                }
                Value::Scalar(words.join(" "))
            }
            _ => return Err((line, format!("{key} has no value"))),
        };
        entries.push(Entry { key, value, line });
    }
}

fn is_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Word(w) => format!("{w:?}"),
        Tok::Quoted(s) => format!("the string {s:?}"),
        Tok::Eq => "=".into(),
        Tok::Open => "{".into(),
        Tok::Close => "}".into(),
    }
}
