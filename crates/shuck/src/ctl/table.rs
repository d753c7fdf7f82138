//! `shuck ctl`'s answers for people: aligned tables and `key: value` lines.

use serde_json::Value;

use super::{CertCommand, Command};

/// A JSON value as a cell: strings bare, null as `-`.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        // What a client or an operator wrote (a ban's reason) may hold control characters:
        // escaped, so a cell never moves the terminal's cursor or breaks its row.
        Value::String(s) if s.chars().any(char::is_control) => s.escape_default().to_string(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Rows under a header, columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = width[i]))
            .collect::<Vec<_>>()
            .join("  ");
        s.truncate(s.trim_end().len());
        s + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        out += &line(r.clone());
    }
    out
}

/// `key: value` lines of an object, nested objects flattened with dots.
fn lines(v: &Value, prefix: &str, out: &mut String) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                lines(v, &key, out);
            }
        }
        other => out.push_str(&format!("{prefix}: {}\n", cell(other))),
    }
}

/// The answer to `command`, for people.
pub fn render(command: &Command, v: &Value) -> String {
    match command {
        Command::Backends => {
            let mut rows = Vec::new();
            for b in v["backends"].as_array().into_iter().flatten() {
                for s in b["servers"].as_array().into_iter().flatten() {
                    let check = match &s["check"] {
                        Value::Null => "-".to_owned(),
                        c => format!(
                            "{} {}",
                            cell(&c["probe"]),
                            match c["last_ok"].as_bool() {
                                Some(true) => "ok",
                                Some(false) => "failed",
                                None => "not yet",
                            }
                        ),
                    };
                    rows.push(vec![
                        cell(&b["name"]),
                        cell(&b["balance"]),
                        cell(&s["name"]),
                        cell(&s["address"]),
                        cell(&s["state"]),
                        cell(&s["weight"]),
                        cell(&s["active"]),
                        cell(&s["queued"]),
                        check,
                    ]);
                }
            }
            table(
                &[
                    "BACKEND", "BALANCE", "SERVER", "ADDRESS", "STATE", "WEIGHT", "ACTIVE",
                    "QUEUED", "CHECK",
                ],
                &rows,
            )
        }
        Command::Cert(CertCommand::List) => {
            let rows: Vec<Vec<String>> = v["certificates"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    vec![
                        cell(&c["name"]),
                        cell(&c["source"]),
                        cell(&c["names"]),
                        cell(&c["not_after"]),
                        cell(&c["key_type"]),
                        cell(&c["ocsp"]["status"]),
                    ]
                })
                .collect();
            table(
                &["NAME", "SOURCE", "NAMES", "NOT-AFTER", "KEY", "OCSP"],
                &rows,
            )
        }
        Command::Drain { .. }
        | Command::Ready { .. }
        | Command::Maint { .. }
        | Command::Weight { .. } => {
            let line = |v: &Value| {
                format!(
                    "{}: {} (weight {}, {} active, {} queued)\n",
                    cell(&v["name"]),
                    cell(&v["state"]),
                    cell(&v["weight"]),
                    cell(&v["active"]),
                    cell(&v["queued"]),
                )
            };
            // A whole backend's answer: a line for each of its servers.
            match v["servers"].as_array() {
                Some(servers) => servers.iter().map(line).collect(),
                None => line(v),
            }
        }
        Command::Clients { .. } => {
            let rows: Vec<Vec<String>> = v["clients"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    [
                        "client",
                        "conns",
                        "remote_conns",
                        "recent",
                        "conns_total",
                        "requests_total",
                        "refused_total",
                    ]
                    .iter()
                    .map(|k| cell(&c[*k]))
                    .collect()
                })
                .collect();
            let mut out = table(
                &[
                    "CLIENT",
                    "CONNS",
                    "FARM",
                    "RECENT",
                    "CONNS_TOTAL",
                    "REQUESTS",
                    "REFUSED",
                ],
                &rows,
            );
            let bans: Vec<Vec<String>> = v["bans"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| vec![cell(&b["block"]), cell(&b["until"]), cell(&b["reason"])])
                .collect();
            if !bans.is_empty() {
                out.push('\n');
                out.push_str(&table(&["BANNED", "UNTIL", "REASON"], &bans));
            }
            out
        }
        _ => {
            let mut out = String::new();
            lines(v, "", &mut out);
            out
        }
    }
}

/// A refusal: the status, the reason, and each configuration error as `file:line: message`.
pub fn refusal(status: u16, v: &Value) -> String {
    let mut out = format!("shuck ctl: refused ({status}): {}\n", cell(&v["error"]));
    for e in v["errors"].as_array().into_iter().flatten() {
        match (e["file"].as_str(), e["line"].as_u64()) {
            (Some(f), Some(l)) => out += &format!("  {f}:{l}: {}\n", cell(&e["message"])),
            _ => out += &format!("  {}\n", cell(&e["message"])),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::cell;

    #[test]
    fn a_cell_escapes_control_characters() {
        let v = serde_json::json!("scan\u{1b}[2J\nnext");
        assert_eq!(cell(&v), "scan\\u{1b}[2J\\nnext");
        assert_eq!(cell(&serde_json::json!("plain text")), "plain text");
    }
}
