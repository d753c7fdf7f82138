//! The admin API's clients: `GET /clients?top=N` (the busiest clients and the bans, as
//! HAProxy's `show table`), `POST /clients/ban` (a block refused at accept, for a time or
//! until lifted), `DELETE /clients/ban/BLOCK`.

use serde_json::{json, Value};

use crate::clients::bans::Ban;
use crate::clients::{Cidr, Clients};

/// The longest ban given in seconds (ten years; longer is "until lifted": leave it out).
const MAX_SECS: u64 = 10 * 365 * 86_400;

/// The rows `GET /clients` gives when no `top` is asked.
pub const DEFAULT_TOP: usize = 20;

/// A `POST /clients/ban` body (read as JSON, a key given twice refused): `{"block":
/// "192.0.2.0/24", "seconds": 600, "reason": "..."}` (`seconds` left out: until lifted). Its
/// end is reckoned from `now_ms`. The error says what is wrong (a 400).
pub fn ban_of(v: &Value, now_ms: u64) -> Result<Ban, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| "the body must be a JSON object".to_owned())?;
    let mut ban = Ban {
        block: "0.0.0.0/32".parse()?,
        until_ms: None,
        reason: String::new(),
    };
    let mut block = None;
    for (k, v) in obj {
        match k.as_str() {
            "block" | "address" => {
                let s = v
                    .as_str()
                    .ok_or_else(|| "block must be a string (an address or CIDR)".to_owned())?;
                block = Some(s.parse::<Cidr>()?);
            }
            "seconds" => {
                let s = v
                    .as_u64()
                    .filter(|s| (1..=MAX_SECS).contains(s))
                    .ok_or_else(|| {
                        format!("seconds must be from 1 to {MAX_SECS} (leave it out for a ban until lifted)")
                    })?;
                ban.until_ms = Some(now_ms + s * 1000);
            }
            "reason" => {
                let r = v
                    .as_str()
                    .filter(|r| r.len() <= 200)
                    .ok_or_else(|| "reason must be a string of 200 bytes at most".to_owned())?;
                ban.reason = r.to_owned();
            }
            other => return Err(format!("unknown field {other:?} (block, seconds, reason)")),
        }
    }
    ban.block = block.ok_or_else(|| "give \"block\": an address or CIDR".to_owned())?;
    Ok(ban)
}

/// A ban as the API shows it.
pub fn ban_json(b: &Ban) -> Value {
    json!({
        "block": b.block.to_string(),
        "until": b.until_ms.map(|ms| crate::clock::rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))),
        "reason": b.reason,
    })
}

/// `GET /clients`'s answer: the table's figures, its `top` busiest clients (each with the
/// frontend whose own limits counted it, by `frontends`' names; none for the global
/// ones), the bans.
pub fn clients_json(clients: &Clients, top: usize, frontends: &[String]) -> Value {
    let rows = clients
        .table_if_made()
        .map(|t| t.top(top))
        .unwrap_or_default();
    let table = clients.table_if_made().map(
        |t| json!({ "entries": t.len(), "capacity": t.capacity(), "evictions": t.evictions() }),
    );
    let refused: serde_json::Map<String, Value> = crate::clients::Reason::ALL
        .iter()
        .zip(clients.refused())
        .map(|(r, n)| (r.name().to_owned(), json!(n)))
        .collect();
    json!({
        "table": table,
        "refused": refused,
        "clients": rows.iter().map(|r| json!({
            "client": Cidr::of_key(r.key, clients.folding).to_string(),
            "frontend": frontends.get(usize::from(r.scope).wrapping_sub(1)),
            "conns": r.conns,
            "remote_conns": r.remote,
            "recent": r.heat,
            "conns_total": r.total_conns,
            "requests_total": r.total_requests,
            "refused_total": r.refused,
        })).collect::<Vec<_>>(),
        "bans": clients.bans.list().iter().map(ban_json).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: &[u8], now: u64) -> Result<Ban, String> {
        let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        ban_of(&v, now)
    }

    #[test]
    fn ban_bodies_are_read_or_named_wrong() {
        let b = read(
            br#"{"block":"192.0.2.0/24","seconds":60,"reason":"scan"}"#,
            1000,
        )
        .unwrap();
        assert_eq!(b.block.to_string(), "192.0.2.0/24");
        assert_eq!(b.until_ms, Some(61_000));
        assert_eq!(b.reason, "scan");
        let v6 = read(br#"{"address":"2001:db8::1"}"#, 0).unwrap();
        assert_eq!(v6.until_ms, None);
        for (body, says) in [
            (&br#"{}"#[..], "give \"block\""),
            (br#"{"block":"10.0.0.1/8"}"#, "bits set"),
            (br#"{"block":"x"}"#, "not an address"),
            (br#"{"block":"10.0.0.1","seconds":0}"#, "seconds must"),
            (br#"{"block":"10.0.0.1","until":3}"#, "unknown field"),
            (b"[1]", "JSON object"),
        ] {
            let e = read(body, 0).unwrap_err();
            assert!(e.contains(says), "{}: {e}", String::from_utf8_lossy(body));
        }
    }
}
