//! Per-client limits and access rules (issue 48): who a client is (`addr`), the rates it is
//! held to (`rate`), the table every worker thread counts it in (`table`), the bans the admin
//! API sets (`bans`), and what a frontend asks of its clients (`Policy`). A connection is
//! judged right after accept (after its PROXY header), before any TLS work; a request as
//! the gateway takes it in, over every HTTP version alike.

pub mod addr;
pub mod bans;
pub mod farm;
pub mod filter;
pub mod rate;
pub mod table;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

pub use addr::{Cidr, CidrList, Folding, Key};
pub use rate::Rate;
pub use table::{Limits, Over, Row, Table};

/// Why a client was refused: the label of `shuck_client_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `--client-max-conns`.
    ConnLimit,
    /// `--client-conn-rate`.
    ConnRate,
    /// `--client-request-rate` (answered 429).
    RequestRate,
    /// A deny rule, or not on an allow list (a frontend's: closed; a route's: 403).
    Deny,
    /// A ban from the admin API.
    Ban,
}

impl Reason {
    /// Every reason, in the order of the counters.
    pub const ALL: [Reason; 5] = [
        Reason::ConnLimit,
        Reason::ConnRate,
        Reason::RequestRate,
        Reason::Deny,
        Reason::Ban,
    ];

    /// As a metric label and in logs.
    pub fn name(self) -> &'static str {
        match self {
            Reason::ConnLimit => "conn_limit",
            Reason::ConnRate => "conn_rate",
            Reason::RequestRate => "request_rate",
            Reason::Deny => "deny",
            Reason::Ban => "ban",
        }
    }
}

/// A refusal: why, when the client may try again (rates), and whether it is the first of
/// this client's episode (logged once; the rest are counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// Why.
    pub reason: Reason,
    /// Milliseconds until the rate allows one more (`Retry-After`, rounded up to seconds).
    pub retry_ms: Option<u32>,
    /// Log it.
    pub first: bool,
}

impl Refused {
    /// `Retry-After`'s seconds (at least 1) for a rate refusal.
    pub fn retry_secs(&self) -> u32 {
        self.retry_ms.map_or(1, |ms| ms.div_ceil(1000).max(1))
    }
}

/// What a frontend (or every frontend without its own) asks of its clients.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Whose counts its limits read: 0 for the global limits, a frontend's slot plus one
    /// for its own.
    pub scope: u16,
    /// The limits.
    pub limits: Limits,
    /// `--client-allow`: when not empty, only these blocks are served.
    pub allow: CidrList,
    /// `--client-deny`: never served (over `allow`).
    pub deny: CidrList,
}

impl Policy {
    /// The policy that asks nothing (bans still hold).
    pub const NONE: Policy = Policy {
        scope: 0,
        limits: Limits {
            max_conns: 0,
            conn_rate: None,
            request_rate: None,
        },
        allow: CidrList(Vec::new()),
        deny: CidrList(Vec::new()),
    };

    /// Whether it asks anything at all (else accepting a connection looks at nothing).
    pub fn any(&self) -> bool {
        self.limits.any() || !self.allow.0.is_empty() || !self.deny.0.is_empty()
    }

    /// Whether its rules refuse `ip`.
    pub fn denies(&self, ip: IpAddr) -> bool {
        self.deny.contains(ip) || (!self.allow.0.is_empty() && !self.allow.contains(ip))
    }
}

/// A route's access rules (`client-allow`, `client-deny` in a route): a request they
/// refuse is answered 403.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// When not empty, only these blocks reach the route.
    pub allow: CidrList,
    /// Never reach it (over `allow`).
    pub deny: CidrList,
}

impl Rules {
    /// Whether they refuse `ip`.
    pub fn denies(&self, ip: IpAddr) -> bool {
        self.deny.contains(ip) || (!self.allow.0.is_empty() && !self.allow.contains(ip))
    }
}

/// The process's clients: the table (made when a limit is configured, at the size fixed
/// at start), the bans, and the refusal counters.
#[derive(Debug)]
pub struct Clients {
    /// How addresses fold into clients.
    pub folding: Folding,
    size: usize,
    table: OnceLock<Table>,
    /// The admin API's bans.
    pub bans: bans::Bans,
    refused: [AtomicU64; Reason::ALL.len()],
    /// Each scope's limits, for what the farm's other hosts report.
    scopes: std::sync::Mutex<std::collections::HashMap<u16, Limits>>,
    /// `--client-refuse drop`: refused clients go to the kernel's filter for a while.
    drop: bool,
    /// Clients over their limits whose SYNs the kernel drops, until when (Unix ms).
    shunned: std::sync::Mutex<Vec<(Cidr, u64)>>,
    /// Bumped when what the filters hold changes (bans, rules, the shunned).
    changed: tokio::sync::watch::Sender<u64>,
}

impl Clients {
    /// Clients folded by `folding`, in a table of `size` entries once one is needed;
    /// with `drop`, refused in the kernel (`--client-refuse drop`).
    pub fn new(folding: Folding, size: usize, drop: bool) -> Self {
        Clients {
            folding,
            size,
            table: OnceLock::new(),
            bans: bans::Bans::default(),
            refused: Default::default(),
            scopes: Default::default(),
            drop,
            shunned: Default::default(),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Whether refused clients are dropped in the kernel (`--client-refuse drop`).
    pub fn drops(&self) -> bool {
        self.drop
    }

    /// Told when the kernel's filters must be made again.
    pub fn watch(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn filters_changed(&self) {
        if self.drop {
            self.changed.send_modify(|g| *g += 1);
        }
    }

    /// This host's bans (the master's whole list).
    pub fn set_bans(&self, bans: &[bans::Ban]) {
        self.bans.set(bans);
        self.filters_changed();
    }

    /// The farm's other hosts' bans.
    pub fn set_farm_bans(&self, bans: &[bans::Ban]) {
        if self.bans.set_farm(bans) {
            self.filters_changed();
        }
    }

    /// A client over its limits, its SYNs dropped in the kernel until `until_ms`.
    fn shun(&self, key: Key, until_ms: u64) {
        let block = Cidr::of_key(key, self.folding);
        let now = crate::clock::unix_ms();
        let mut s = self.shunned.lock().unwrap_or_else(|p| p.into_inner());
        s.retain(|(_, until)| *until > now);
        if s.iter().any(|(b, _)| *b == block) {
            return;
        }
        s.push((block, until_ms));
        drop(s);
        self.filters_changed();
    }

    /// The kernel filter of a frontend holding its clients to `policy`: the program (none
    /// when it would be too long for the kernel) and when it must be made again (a
    /// shunned client's time over).
    pub fn drop_filter(&self, policy: Option<&Policy>) -> (Option<Vec<filter::Insn>>, Option<u64>) {
        let now = crate::clock::unix_ms();
        let mut deny: Vec<Cidr> = self.bans.list().iter().map(|b| b.block).collect();
        let mut allow: &[Cidr] = &[];
        if let Some(p) = policy {
            deny.extend(p.deny.0.iter().copied());
            allow = &p.allow.0;
        }
        let s = self.shunned.lock().unwrap_or_else(|p| p.into_inner());
        let live: Vec<&(Cidr, u64)> = s.iter().filter(|(_, until)| *until > now).collect();
        drop_filter_fit(deny, allow, &live)
    }

    /// A frontend holds its clients to `policy` (start, reload): the farm's reports are
    /// charged under its limits.
    /// The table is made then, when the limits need one.
    pub fn note_scope(&self, policy: &Policy) {
        if policy.limits.any() {
            self.table();
        }
        if let Some(t) = self.table_if_made() {
            t.set_scope(policy.scope, policy.limits);
        }
        let mut s = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        s.insert(policy.scope, policy.limits);
        drop(s);
        // A reload may have changed the rules the filters hold.
        self.filters_changed();
    }

    /// The limits of `scope`, if a frontend has it.
    pub fn scope_limits(&self, scope: u16) -> Option<Limits> {
        let s = self.scopes.lock().unwrap_or_else(|p| p.into_inner());
        s.get(&scope).copied()
    }

    /// The table, made on first use.
    pub fn table(&self) -> &Table {
        self.table.get_or_init(|| Table::new(self.size))
    }

    /// The table if it was made.
    pub fn table_if_made(&self) -> Option<&Table> {
        self.table.get()
    }

    /// Refusals so far, by reason (in [`Reason::ALL`]'s order).
    pub fn refused(&self) -> [u64; Reason::ALL.len()] {
        std::array::from_fn(|i| self.refused[i].load(Relaxed))
    }

    /// A request a route's rules refuse: counted (`deny`).
    pub fn route_denied(&self) -> Refused {
        self.count(Refused {
            reason: Reason::Deny,
            retry_ms: None,
            first: false,
        })
    }

    fn count(&self, r: Refused) -> Refused {
        self.refused[r.reason as usize].fetch_add(1, Relaxed);
        r
    }

    /// Judges `ip` by the bans and `policy`'s rules alone: what an address says of itself
    /// whether or not it was proven, so a QUIC Initial is judged by it at once.
    pub fn judge(&self, policy: &Policy, ip: IpAddr) -> Result<(), Refused> {
        if let Some(first) = self.bans.holds(ip) {
            return Err(self.count(Refused {
                reason: Reason::Ban,
                retry_ms: None,
                first,
            }));
        }
        if policy.denies(ip) {
            return Err(self.count(Refused {
                reason: Reason::Deny,
                retry_ms: None,
                first: false,
            }));
        }
        Ok(())
    }

    /// Whether a new connection from `ip` would be refused by `policy`'s connection limits,
    /// or leave it at them, without charging anything: a QUIC source not yet proven is
    /// sent a Retry then, so that its limits are judged before any TLS work.
    pub fn near_limits(&self, policy: &Policy, ip: IpAddr) -> bool {
        let l = &policy.limits;
        (l.max_conns > 0 || l.conn_rate.is_some())
            && self.table().near(self.folding.key(ip), policy.scope, l)
    }

    /// Judges a new connection from `ip` under `policy`: bans, rules, then the limits.
    /// `Ok(None)`: nothing to count; `Ok(Some)`: counted until it drops. `source`: how
    /// its address is known; only a TCP peer's (a completed three-way handshake) may be
    /// shunned in the kernel.
    pub fn admit(
        self: &Arc<Self>,
        policy: &Policy,
        ip: IpAddr,
        source: Source,
    ) -> Result<Option<Admitted>, Refused> {
        self.judge(policy, ip)?;
        self.charge_limits(policy, ip, source)
    }

    /// [`Self::admit`]'s limits alone, for a QUIC connection whose address its handshake
    /// has just proven (its bans and rules were judged as its Initial came).
    pub fn charge_limits(
        self: &Arc<Self>,
        policy: &Policy,
        ip: IpAddr,
        source: Source,
    ) -> Result<Option<Admitted>, Refused> {
        if !policy.limits.any() {
            return Ok(None);
        }
        let key = self.folding.key(ip);
        let slot = if policy.limits.max_conns > 0 || policy.limits.conn_rate.is_some() {
            match self.table().open(key, policy.scope, &policy.limits) {
                Ok(s) => Some(s),
                Err(r) => {
                    let r = self.count(refused(r));
                    if self.drop && source == Source::Tcp {
                        // At least a second: a SYN dropped is sent again after one.
                        let wait = u64::from(r.retry_ms.unwrap_or(0)).max(1000);
                        self.shun(key, crate::clock::unix_ms() + wait);
                    }
                    return Err(r);
                }
            }
        } else {
            None
        };
        Ok(Some(Admitted {
            clients: self.clone(),
            slot,
            requests: policy.limits.request_rate.map(|rate| RequestLimit {
                key,
                scope: policy.scope,
                rate,
            }),
        }))
    }

    /// What a request from `ip` is held to under `policy`'s request rate, if it gives one
    /// (`--trusted-proxies`: a client a trusted proxy names, whose connection is not its
    /// own).
    pub fn request_limit(&self, policy: &Policy, ip: IpAddr) -> Option<RequestLimit> {
        policy.limits.request_rate.map(|rate| RequestLimit {
            key: self.folding.key(ip),
            scope: policy.scope,
            rate,
        })
    }

    /// One request under `limit`: `Err` when over the request rate (answer 429).
    pub fn request(&self, limit: &RequestLimit) -> Result<(), Refused> {
        self.table()
            .request(limit.key, limit.scope, &limit.rate)
            .map_err(|r| self.count(refused(r)))
    }
}

/// The program of `deny` and `allow` (bans and rules) and as many of the `shunned` as the
/// kernel takes besides, the ones shunned first kept: bans and rules never leave the
/// filter for a flood of refused clients (those left out are still refused after accept).
/// When it must be made again: the soonest end of a shunned client's time it holds.
fn drop_filter_fit(
    mut deny: Vec<Cidr>,
    allow: &[Cidr],
    shunned: &[&(Cidr, u64)],
) -> (Option<Vec<filter::Insn>>, Option<u64>) {
    let base = deny.len();
    let with = |deny: &mut Vec<Cidr>, k: usize| {
        deny.truncate(base);
        deny.extend(shunned[..k].iter().map(|(b, _)| *b));
        filter::program(deny, allow)
    };
    let mut k = shunned.len();
    let mut p = with(&mut deny, k);
    if p.is_none() && k > 0 {
        // The most that fit, by halves: a program's length grows with its blocks.
        let (mut lo, mut hi) = (0, k);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if with(&mut deny, mid).is_some() {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        k = lo;
        p = with(&mut deny, k);
        tracing::debug!(
            name: "client_filter_too_long",
            kept = k,
            left_out = shunned.len() - k,
            "--client-refuse drop: the kernel's filter holds the bans, the rules and {k} of the refused clients; the others are refused after accept",
        );
    }
    let next = shunned[..k].iter().map(|(_, until)| *until).min();
    // Those left out come in as others' times end.
    let next = match (next, shunned.get(k)) {
        (n, None) => n,
        (Some(n), Some(_)) => Some(n),
        (None, Some((_, until))) => Some(*until),
    };
    (p, next)
}

/// How a connection's address is known, for what a refusal may do to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A TCP peer (or the PROXY header of one): its SYNs may be dropped in the kernel.
    Tcp,
    /// A QUIC peer whose address was proven (a Retry's token, a completed handshake): its
    /// limits are charged, but UDP is never filtered in the kernel for it.
    Quic,
}

/// What a connection's requests are held to: copied into each version's request side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLimit {
    /// The client.
    pub key: Key,
    scope: u16,
    rate: Rate,
}

fn refused(r: table::Refusal) -> Refused {
    let (reason, retry_ms) = match r.over {
        Over::Conns => (Reason::ConnLimit, None),
        Over::ConnRate(ms) => (Reason::ConnRate, Some(ms)),
        Over::RequestRate(ms) => (Reason::RequestRate, Some(ms)),
    };
    Refused {
        reason,
        retry_ms,
        first: r.first,
    }
}

/// A connection the limits counted: its open count is given back when it drops, and its
/// requests are held to the request rate.
#[derive(Debug)]
pub struct Admitted {
    clients: Arc<Clients>,
    slot: Option<table::Slot>,
    requests: Option<RequestLimit>,
}

impl Admitted {
    /// What this connection's requests are held to, if anything.
    pub fn requests(&self) -> Option<RequestLimit> {
        self.requests
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            self.clients.table().close(slot);
        }
    }
}

/// Logs a refusal that starts a client's episode (the rest are only counted, and a debug
/// line each).
pub fn log_refused(r: &Refused, client: std::net::SocketAddr, frontend: &str) {
    if !r.first {
        tracing::debug!(
            name: "client_refused_again",
            client = %client,
            frontend,
            reason = r.reason.name(),
            "client refused",
        );
    } else {
        tracing::warn!(
            name: "client_refused",
            client = %client,
            frontend,
            reason = r.reason.name(),
            "client {} refused ({}); further refusals of it in the next {} s are only counted",
            client.ip(),
            r.reason.name(),
            table::EPISODE_MS / 1000,
        );
    }
}
