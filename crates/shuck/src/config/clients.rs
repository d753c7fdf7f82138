//! `--client-*`: the limits and access rules each client is held to, for every frontend or
//! a frontend of its own (`client-max-conns` and the rest in its block, `;client-...=` in
//! `-f`), and how the client table is sized.

use super::{Cli, ConfigError};
use crate::clients::{CidrList, Folding, Limits, Policy, Rate};

/// What a frontend says of its clients, key by key over the global flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Own {
    /// `client-max-conns`.
    pub max_conns: Option<u32>,
    /// `client-conn-rate` (`off` for none).
    pub conn_rate: Option<Option<Rate>>,
    /// `client-request-rate` (`off` for none).
    pub request_rate: Option<Option<Rate>>,
    /// `client-allow`.
    pub allow: Option<CidrList>,
    /// `client-deny`.
    pub deny: Option<CidrList>,
}

impl Own {
    /// Whether the frontend said anything of its clients.
    pub fn any(&self) -> bool {
        *self != Own::default()
    }

    /// Takes one `;key=value` of `-f`; `Ok(false)` when `key` is not one of these.
    pub fn set(&mut self, key: &str, value: &str) -> Result<bool, String> {
        match key {
            "client-max-conns" => self.max_conns = Some(parse_count(value)?),
            "client-conn-rate" => self.conn_rate = Some(parse_rate_or_off(value)?),
            "client-request-rate" => self.request_rate = Some(parse_rate_or_off(value)?),
            "client-allow" => self.allow = Some(CidrList::parse_allow(value)?),
            "client-deny" => self.deny = Some(CidrList::parse_value(value)?),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The frontend keys of this module, for the frontend parsers' lists.
pub const KEYS: [&str; 5] = [
    "client-max-conns",
    "client-conn-rate",
    "client-request-rate",
    "client-allow",
    "client-deny",
];

/// Checks a frontend block's value where its line is known.
pub fn check_key(key: &str, value: &str) -> Result<(), String> {
    // A file named by a block is read when the frontend is built, with the rest.
    if matches!(key, "client-allow" | "client-deny") {
        let mut l = CidrList::default();
        for part in value.split(',').filter(|p| !p.trim().starts_with("file:")) {
            l.extend_from(part)?;
        }
        return Ok(());
    }
    Own::default().set(key, value).map(drop)
}

fn parse_count(v: &str) -> Result<u32, String> {
    v.trim()
        .parse()
        .map_err(|_| format!("{v:?} is not a count (0 for no limit)"))
}

fn parse_rate_or_off(v: &str) -> Result<Option<Rate>, String> {
    if v.trim() == "off" {
        return Ok(None);
    }
    v.parse().map(Some)
}

/// `--client-*` as the workers hold them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `--client-prefix-v6`.
    pub folding: Folding,
    /// `--client-table-size`.
    pub table_size: usize,
    /// The global flags' policy (scope 0).
    pub global: Policy,
    /// `--client-share-interval`: how often the farm's hosts exchange their counts.
    pub share_interval: std::time::Duration,
    /// `--client-refuse drop`: refused clients' SYNs dropped in the kernel.
    pub drop: bool,
}

impl Settings {
    /// The policy of the frontend at `index` saying `own`: the global one, or its own
    /// (its own counts too) when it says anything.
    pub fn policy(&self, index: usize, own: &Own) -> Policy {
        if !own.any() {
            return self.global.clone();
        }
        let g = &self.global;
        Policy {
            scope: u16::try_from(index + 1).unwrap_or(u16::MAX - 1),
            limits: Limits {
                max_conns: own.max_conns.unwrap_or(g.limits.max_conns),
                conn_rate: own.conn_rate.unwrap_or(g.limits.conn_rate),
                request_rate: own.request_rate.unwrap_or(g.limits.request_rate),
            },
            allow: own.allow.clone().unwrap_or_else(|| g.allow.clone()),
            deny: own.deny.clone().unwrap_or_else(|| g.deny.clone()),
        }
    }
}

/// Reads the `--client-*` flags; `frontends` are checked for what needs `--http` too.
pub(super) fn settings(cli: &Cli, frontends: &[super::Frontend]) -> Result<Settings, ConfigError> {
    let own_rate = frontends
        .iter()
        .find(|f| matches!(f.clients.request_rate, Some(Some(_))));
    if !cli.http && (cli.client_request_rate.is_some() || own_rate.is_some()) {
        return Err(ConfigError::Invalid {
            option: "--client-request-rate",
            reason: match own_rate {
                Some(f) if cli.client_request_rate.is_none() => format!(
                    "frontend {}: client-request-rate counts HTTP requests: it needs --http (in TCP mode, limit connections: --client-conn-rate)",
                    f.endpoint
                ),
                _ => "it counts HTTP requests: it needs --http (in TCP mode, limit connections: --client-conn-rate)".into(),
            },
        });
    }
    let list = |option: &'static str, values: &[String]| {
        let mut all = CidrList::default();
        for v in values {
            let l = if option == "--client-allow" {
                CidrList::parse_allow(v)
            } else {
                CidrList::parse_value(v)
            };
            let l = l.map_err(|reason| ConfigError::Invalid { option, reason })?;
            all.0.extend(l.0);
        }
        Ok::<_, ConfigError>(all)
    };
    if !(1..=128).contains(&cli.client_prefix_v6) {
        return Err(ConfigError::Invalid {
            option: "--client-prefix-v6",
            reason: format!("{} bits: give 1 to 128", cli.client_prefix_v6),
        });
    }
    if cli.client_share_interval < std::time::Duration::from_millis(100) {
        return Err(ConfigError::Invalid {
            option: "--client-share-interval",
            reason: "give at least 0.1 s: each interval is a round trip to the store".into(),
        });
    }
    let drop = cli.client_refuse == Refuse::Drop;
    if drop && cli.proxy_proxy {
        return Err(ConfigError::Invalid {
            option: "--client-refuse",
            reason: "drop works on the packets' source address, and with --proxy-proxy every connection comes from the proxy: keep reset".into(),
        });
    }
    if cli.client_table_size < 64 {
        return Err(ConfigError::Invalid {
            option: "--client-table-size",
            reason: format!("{} entries: give at least 64", cli.client_table_size),
        });
    }
    Ok(Settings {
        folding: Folding {
            v6: cli.client_prefix_v6,
        },
        table_size: cli.client_table_size,
        share_interval: cli.client_share_interval,
        drop,
        global: Policy {
            scope: 0,
            limits: Limits {
                max_conns: cli.client_max_conns,
                conn_rate: cli.client_conn_rate,
                request_rate: cli.client_request_rate,
            },
            allow: list("--client-allow", &cli.client_allow)?,
            deny: list("--client-deny", &cli.client_deny)?,
        },
    })
}

/// `--client-refuse`: how a connection refused at accept is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Refuse {
    /// Accepted and reset at once, before any TLS work.
    Reset,
    /// Its SYN dropped by the kernel, nothing accepted nor answered.
    Drop,
}

/// `--client-conn-rate`'s and `--client-request-rate`'s value.
pub(super) fn parse_rate(s: &str) -> Result<Rate, String> {
    s.parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frontend_says_key_by_key() {
        let mut own = Own::default();
        assert!(!own.any());
        assert!(own.set("client-max-conns", "5").unwrap());
        assert!(own.set("client-request-rate", "off").unwrap());
        assert!(!own.set("quic", "on").unwrap());
        assert!(own.set("client-conn-rate", "fast").is_err());
        assert!(own.set("client-deny", "10.0.0.0/33").is_err());
        let s = Settings {
            folding: Folding::default(),
            table_size: 64,
            share_interval: std::time::Duration::from_secs(1),
            drop: false,
            global: Policy {
                scope: 0,
                limits: Limits {
                    max_conns: 9,
                    conn_rate: Some("1/s".parse().unwrap()),
                    request_rate: Some("2/s".parse().unwrap()),
                },
                allow: CidrList::default(),
                deny: CidrList::parse_value("192.0.2.0/24").unwrap(),
            },
        };
        let p = s.policy(2, &own);
        assert_eq!(p.scope, 3);
        assert_eq!(p.limits.max_conns, 5);
        assert_eq!(p.limits.conn_rate, s.global.limits.conn_rate);
        assert_eq!(p.limits.request_rate, None);
        assert_eq!(p.deny, s.global.deny);
        assert_eq!(s.policy(0, &Own::default()), s.global);
        assert!(check_key("client-allow", "10.0.0.0/8, file:/nowhere").is_ok());
        assert!(check_key("client-allow", "10.0.0.0/88").is_err());
    }
}
