//! The command line: every option is defined once, here, with its help text. The flag names,
//! short letters and value syntax follow hitch's `--help`, so a hitch command line keeps
//! working. The manual's option reference (`docs/manual/src/options.md`), the man pages and the
//! packaged `shuck.conf` are generated from this definition (`cargo run -p xtask -- book`,
//! `dist`); each flag's first sentence is its `-h` line, the whole text its `--help`.

// The doc comments below are clap's help text, where `[HOST]:PORT` is syntax, not a link.
#![allow(rustdoc::broken_intra_doc_links)]

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::duration::parse_duration;

/// What `shuck --version` prints after the name: what a bug report needs to carry
/// (`-V` prints the version alone).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit ",
    env!("SHUCK_GIT_COMMIT"),
    ", built ",
    env!("SHUCK_BUILD_DATE"),
    "\nrustls ",
    env!("SHUCK_RUSTLS_VERSION"),
    ", aws-lc-rs ",
    env!("SHUCK_AWS_LC_RS_VERSION"),
    " (aws-lc-sys ",
    env!("SHUCK_AWS_LC_SYS_VERSION"),
    "), tokio ",
    env!("SHUCK_TOKIO_VERSION"),
);

/// shuck: a TLS termination proxy (stud and hitch's job, in Rust).
#[derive(Debug, Parser)]
#[command(
    name = "shuck",
    version,
    long_version = LONG_VERSION,
    about,
    max_term_width = 100,
    args_override_self = true
)]
pub struct Cli {
    /// Read settings from a hitch.conf-style file (shuck.conf(5); the manual's Configuration
    /// file).
    ///
    /// Flags given on the command line win over the file's keys. As in hitch, frontends and
    /// certificates add up: the file's first, then the command line's (whose last
    /// certificate is then the default); for `-b` and `-P` the command line's list replaces
    /// the file's.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Check the configuration, certificates and keys, print `configuration OK: ...` and
    /// exit 0, or the error and exit 1 (as `hitch -t`, `nginx -t`).
    ///
    /// Nothing is bound, but what start would fail on is found: two frontends on one
    /// address (`[*]:443` twice, `[*]` beside `[0.0.0.0]` or `[::]`, `[127.0.0.1]` beside
    /// `[::ffff:127.0.0.1]`: hitch's "redundant frontend"), and with `ocsp-verify-staple`
    /// an OCSP response that does not verify.
    #[arg(short = 't', long)]
    pub test: bool,

    /// PEM files, each with a certificate chain and its private key (RSA, ECDSA
    /// P-256/P-384, Ed25519; PKCS#1, PKCS#8 or SEC1; other sections such as DH parameters
    /// are ignored).
    ///
    /// As in hitch, the **last** one given is the default certificate (served to clients
    /// that send no name, or a name no certificate has); a frontend's own last certificate
    /// is its default.
    ///
    /// Default: self-signed, only with no backend and no configuration file (else refused,
    /// as in hitch).
    #[arg(value_name = "PEM")]
    pub pem_files: Vec<PathBuf>,

    /// A certificate with what a hitch `pem-file = { }` block says of it, repeatable,
    /// listed before the positional PEM files (a configuration file's `pem-file` keys and
    /// blocks become these): `private-key=FILE` (the key in its own file; a key in CERT is
    /// then not used), `ocsp-resp-file=DER`, `ocsp-verify-staple=on|off`,
    /// `client-verify=none|optional|required` and `client-verify-ca=FILE` (this
    /// certificate's own client verification, chosen by SNI: its own CA, else its
    /// frontend's, else the global one).
    #[arg(long, value_name = "CERT[,KEY=VALUE...]")]
    pub pem_file: Vec<String>,

    /// Also load every regular file of DIR (symbolic links are not followed, as hitch), in
    /// name order, after the PEM files given; a file that holds no certificate and key is
    /// skipped with a warning.
    ///
    /// With no PEM file given, the directory's first certificate is the default.
    #[arg(long, value_name = "DIR")]
    pub pem_dir: Option<PathBuf>,

    /// With `--pem-dir`, only the files whose names match GLOB (`*.pem`; hitch's `fnmatch`
    /// patterns).
    #[arg(long, value_name = "GLOB")]
    pub pem_dir_glob: Option<String>,

    /// Listen endpoint, repeatable.
    ///
    /// `[*]:443`, `[127.0.0.1]:443`, `[::1]:443`, or bare `127.0.0.1:443`, `*:443`. `*` is
    /// dual-stack when the host has IPv6. `+cert.pem` (repeatable, as hitch; each may carry
    /// `--pem-file`'s `,key=value` options) gives this frontend its own certificates
    /// instead of the global ones; `;key=value` gives it its own TLS settings: `ciphers`,
    /// `ciphersuites`, `tls-protos`, `prefer-server-ciphers`, `sni-nomatch-abort`,
    /// `client-verify`, `client-verify-ca`, `quic` (HTTP/3 on this frontend, over
    /// `--quic`), `access-log` (its own `--access-log` target, or `off`), `client-max-conns`,
    /// `client-conn-rate`, `client-request-rate`, `client-allow` and `client-deny` (its own
    /// `--client-*`, counted apart from other frontends'; CIDRs separated by commas), and
    /// `match-global-certs=on` (serve the global certificates too), e.g. `-f
    /// '[*]:8443+legacy.pem;tls-protos=TLSv1.2;ciphers=ECDHE-RSA-AES256-GCM-SHA384'`. The
    /// session cache, ticket keys and OCSP are shared. Two frontends on the same address
    /// are an error.
    #[arg(
        short = 'f',
        long = "frontend",
        value_name = "[HOST]:PORT",
        default_value = "[*]:8443"
    )]
    pub frontends: Vec<String>,

    /// A backend server, repeatable.
    ///
    /// Connections are spread by smooth weighted round robin (per worker, lock-free) over
    /// the servers that are up. Names are resolved once at start. An absolute path is a
    /// UNIX-domain socket (hitch 1.7; Varnish's `-a /run/varnish.sock,PROXY`), logged as
    /// `unix:/PATH`; every preamble, `--http` and the queue work over it, `--write-ip` is
    /// refused with it; with `--chroot` the path is looked up inside the chroot. `maxconn`:
    /// most connections at once to that server; more wait in its FIFO queue. `weight`: 1 to
    /// 1000 (default 1). `name=NAME`: the server's name in logs and metrics (else its
    /// address). Its active health check, as HAProxy names it (the manual's Health
    /// checks): `check`, `check-tls`, `check-http=/PATH`, `check-grpc[=SERVICE]`
    /// (gRPC's health service over HTTP/2), `check-status=LIST`, `check-interval=T`,
    /// `rise=N`, `fall=N`, `check-send-proxy`.
    ///
    /// Default: `[127.0.0.1]:8000` (hitch's); the built-in origin only when nothing at all
    /// is given.
    #[arg(
        short = 'b',
        long = "backend",
        value_name = "[HOST]:PORT|/PATH[,maxconn=N][,weight=W]"
    )]
    pub backends: Vec<String>,

    /// A named backend, repeatable (in the file: a `backend = { }` block): its servers
    /// (`server=` repeated, as `-b` takes them), its preamble (`write-proxy-v1`,
    /// `write-proxy-v2`, `write-ip`, `proxy-proxy`; else the global one),
    /// `connect-timeout`, and TLS to it (`tls=on`, `verify`, `ca-file`, `sni`, `cert`,
    /// `alpn`). With `--http`, `proto=http/1.1` (the default), `h2` (HTTP/2: in clear with
    /// prior knowledge, or by ALPN over TLS; a worker's connections shared by its clients,
    /// gRPC end to end) or `auto` (TLS: HTTP/2 where the server agrees by ALPN), and
    /// `max-streams=N` (most streams on one HTTP/2 connection, 100 by default) and
    /// `retry-on=unavailable,cancelled,...` (gRPC statuses a call is sent again on). How its
    /// servers share the work: `balance=roundrobin|leastconn|least-requests|hash`,
    /// `hash-key=source|path|header:NAME|cookie:NAME`, `hash-balance-factor=PERCENT`, and
    /// `cookie=NAME` for sticky sessions (`--http`).
    ///
    /// See the manual's Several services and HTTP/2 backends and gRPC.
    #[arg(long = "named-backend", value_name = "name=NAME;server=ADDRESS;...")]
    pub named_backends: Vec<String>,

    /// A route to a backend, repeatable (in the file: a `route = { }` block): by the
    /// handshake's server name (`*.NAME` for subdomains), or with `--http` per request by
    /// `Host`/`:authority` and path prefix.
    ///
    /// A `host` route may act on its requests (`--http`): `redirect=URL` answers them a
    /// redirect itself (`{host}`, `{path}`, `{query}` filled in; `redirect-code=301|302|303|
    /// 307|308`, 308 by default), `strip-prefix=on` sends the path without its
    /// `path-prefix`, `replace-prefix=/NEW/` puts another in its place. Its own policy:
    /// `request-header`, `response-header`, `max-body-bytes`, `client-allow`, `client-deny`.
    /// A frontend's own backend is `-f '[*]:443;backend=B'`. See the manual's Edge policy.
    #[arg(long = "route", value_name = "sni=NAME;backend=B")]
    pub routes: Vec<String>,

    /// Resolve backend names again every SECS (hitch's `backend-refresh`), off the data
    /// path: new connections go to the new addresses, live ones stay; a lookup that fails
    /// keeps the addresses in use, with a warning.
    #[arg(short = 'R', long, value_name = "SECS", default_value_t = 0)]
    pub backend_refresh: u64,

    /// Most connections waiting per server at its maxconn; beyond, new ones are closed at
    /// once.
    #[arg(long, value_name = "NUM", default_value_t = 1024)]
    pub queue_size: usize,

    /// Longest wait for a slot; then the connection is closed (in `--http` mode after `503
    /// Service Unavailable`).
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = parse_duration)]
    pub queue_timeout: Duration,

    /// A server that refuses or times out is marked down this long; the connection is tried
    /// on the next server, so one dead server loses no client.
    ///
    /// A connection that fails for shuck's own shortage (`EMFILE`, `ENFILE`, `ENOBUFS`,
    /// `ENOMEM`, `EADDRNOTAVAIL`) marks nothing down (`shuck_local_resource_errors_total`).
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = parse_duration)]
    pub backend_retry_after: Duration,

    /// Other servers a connection (or an HTTP request not yet sent) tries after a connect
    /// to one is refused, times out or fails its TLS handshake (each failure marks that
    /// server down for `--backend-retry-after`); then the client gets `503` (`--http`) or a
    /// close.
    ///
    /// HAProxy's `retries` with `option redispatch`. 0 tries one server only.
    #[arg(long, value_name = "NUM", default_value_t = 3)]
    pub retries: usize,

    /// Send a PROXY protocol v1 line before the client's bytes.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub write_proxy_v1: bool,

    /// Send a PROXY protocol v2 header, with the ALPN, authority (SNI) and SSL (version,
    /// cipher) TLVs, as hitch sends them.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub write_proxy_v2: bool,

    /// hitch's name for `--write-proxy-v2` (in stud it meant v1: stud users write
    /// `--write-proxy-v1`).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub write_proxy: bool,

    /// With `--write-proxy-v2`, send the server name the client asked for (SNI) in the
    /// authority TLV, as hitch; off leaves it out.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "on", default_missing_value = "on", value_parser = parse_on_off)]
    pub proxy_authority: bool,

    /// stud's and hitch's write-ip: one octet of address family (`AF_INET` 2, `AF_INET6`
    /// 10), then the client's IP address as 4 or 16 bytes, network order: 5 or 17 bytes
    /// before the client's own.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub write_ip: bool,

    /// Expect a PROXY v1 or v2 header from an L4 balancer in front, before TLS.
    ///
    /// The client it names is the one passed on by `--write-*`; with no `--write-*` flag
    /// the same header is passed on, encoded anew from what shuck parsed (same version,
    /// addresses and TLVs; `UNKNOWN` lines as a bare `PROXY UNKNOWN`), so the backend never
    /// sees bytes the balancer sent unchecked. Connections without a header, or with one
    /// that does not parse (a v2 TLV area that does not parse, control bytes in a v1 line),
    /// are refused.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub proxy_proxy: bool,

    /// HTTP mode (stud-http): on every request of a keep-alive connection, remove the
    /// client's `X-Forwarded-For`, `X-Forwarded-Proto` and `Forwarded` headers (also
    /// spelled with `_` for `-`, in any case, as CGI, WSGI and PHP backends read them),
    /// also from chunked trailers, and any `Connection` nomination of them, add
    /// `X-Forwarded-For: <client ip>` and `X-Forwarded-Proto: https`.
    ///
    /// Bodies (Content-Length, chunked) and pipelined requests pass intact and in order;
    /// after `101 Switching Protocols` the connection is a plain relay. Bytes the backend
    /// writes past every answer owed (a body after a `HEAD`'s head, a second answer) never
    /// reach the client, who would take them for its next answer: the connection is closed
    /// instead (`shuck_http_backend_dropped_total{reason="stray_bytes"}`). `Upgrade: h2c`
    /// is never passed on (as nginx: the rest of the connection would be HTTP/2 that nobody
    /// rewrites): its token and `HTTP2-Settings` are dropped beside another protocol, and a
    /// request asking for h2c alone gets `400`. Malformed, oversized or smuggling-prone
    /// heads (Content-Length with Transfer-Encoding, differing Content-Lengths, obsolete
    /// line folding, a Transfer-Encoding that does not end in chunked, a line ending in a
    /// bare LF or a bare CR, an HTTP/1.1 request without exactly one `Host`, two `Host`
    /// headers in any request, a `Host` that is not `uri-host[:port]` (spaces, commas, `/`,
    /// `@`, non-ASCII, a port over 65535, an unclosed `[`; the same for HTTP/2's
    /// `:authority`), an absolute-form target whose authority differs from `Host`, a
    /// chunked trailer section with a line that is not a field, a control byte, or
    /// `Content-Length`/`Transfer-Encoding`) get `400 Bad Request` and a close, and nothing
    /// of them reaches the backend (a bad trailer section: nothing of it): a backend
    /// connection is opened only once the first request head is accepted (also with
    /// `--proxy-proxy`), so a refused or never-sent request costs none.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub http: bool,

    /// Largest request head in `--http` mode (over HTTP/2:
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`), and largest backend answer head.
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024)]
    pub max_header_bytes: usize,

    /// In `--http` mode with routes, refuse (`400`) a request whose path holds an encoded
    /// slash or backslash (`%2F`, `%5C`) or a backslash: routes match paths with those
    /// left as they are (`/admin%2Fx` is not under `path-prefix = "/admin/"`), where a
    /// backend that decodes them would read another path. Off by default, as HAProxy's;
    /// nginx decodes them instead. Config key `http-refuse-encoded-slashes`.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub http_refuse_encoded_slashes: bool,

    /// In `--http` mode, time a whole request head gets from its first byte (the first
    /// request and every later one); a slower one (slowloris) is answered `408 Request
    /// Timeout` and closed.
    ///
    /// HAProxy's `timeout http-request`.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_duration)]
    pub http_request_timeout: Duration,

    /// In `--http` mode, longest wait for the next request once nothing is outstanding
    /// (also before the first); then the connection is closed without a word (over HTTP/2,
    /// with `GOAWAY NO_ERROR`).
    ///
    /// HAProxy's `timeout http-keep-alive`.
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_duration)]
    pub http_keepalive_timeout: Duration,

    /// In `--http` mode, longest time an exchange under way may make no progress while
    /// shuck waits on the client: a request body that stops arriving, an answer the client
    /// does not take (over HTTP/2, its window shut).
    ///
    /// HTTP/2 resets that stream (`CANCEL`) and closes its backend connection; HTTP/1.1
    /// answers `408` when no answer had begun, and closes. A backend slow to answer is
    /// `--idle-timeout`'s (`504`). HAProxy's `timeout client` for an exchange.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_duration)]
    pub http_stall_timeout: Duration,

    /// In `--http` mode over HTTP/2 and HTTP/3: most backend connections one client
    /// connection may have open at once (1 to 65535); its other streams wait for one of
    /// them, in order.
    ///
    /// More streams stalled in a row (`--http-stall-timeout`) than this ends the client's
    /// connection as hostile.
    #[arg(long, value_name = "NUM", default_value_t = 16)]
    pub http_max_backend_conns: u32,

    /// In `--http` mode over HTTP/2: most streams a client may have open at once on one
    /// connection (`SETTINGS_MAX_CONCURRENT_STREAMS`; HAProxy's
    /// `tune.h2.max-concurrent-streams`).
    ///
    /// 1 to 65535.
    #[arg(long, value_name = "NUM", default_value_t = 100)]
    pub h2_max_concurrent_streams: u32,

    /// In `--http` mode over HTTP/2: most streams one connection may reset (or send
    /// malformed) in a second; past it the connection is closed with `GOAWAY
    /// ENHANCE_YOUR_CALM` and a warning naming the client (rapid reset, CVE-2023-44487).
    #[arg(long, value_name = "NUM", default_value_t = 100)]
    pub h2_max_resets: u32,

    /// In `--http` mode over HTTP/2: the flow-control window each stream starts with
    /// (`SETTINGS_INITIAL_WINDOW_SIZE`); a connection's is 16 times it.
    ///
    /// It bounds what a client may send ahead of a slow backend, so memory per connection.
    /// 1024 to 2^27-1.
    #[arg(long, value_name = "BYTES", default_value_t = 65535)]
    pub h2_initial_window_size: u32,

    /// In `--http` mode, also serve HTTP/3 over QUIC on every frontend, on UDP at the same
    /// address and port (a frontend's `quic` setting overrides it); see
    /// the manual's HTTP/3.
    ///
    /// Refused without `--http`, and on a frontend whose `tls-protos` or `ciphersuites`
    /// leave no TLS 1.3.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub quic: bool,

    /// With `--quic`: HTTP/1.1 and HTTP/2 answers carry `Alt-Svc: h3=":PORT"; ma=SECS`
    /// unless the backend set one (HTTP/3's do not, as Caddy's: the client is there); 0
    /// leaves it out.
    #[arg(long, value_name = "SECS", default_value_t = 86_400)]
    pub alt_svc_max_age: u64,

    /// With `--quic`: when a new client must first prove its address with a Retry (one
    /// round trip more, nothing kept for it before): always, never, or once a worker takes
    /// more than N new connections in a second (HAProxy's `quic-retry-threshold`).
    ///
    /// Tokens are sealed under a key derived from the farm key (`--shared-cache-key`) when
    /// there is one, so a token from one host is taken by another; else under a key of the
    /// process's own.
    #[arg(long, value_name = "always|never|N", default_value = "1000",
          value_parser = crate::config::values::parse_quic_retry)]
    pub quic_retry: crate::config::QuicRetry,

    /// With `--quic`: accept 0-RTT from clients resuming a session, so that their first
    /// requests arrive a round trip sooner; see the manual's 0-RTT.
    ///
    /// Needs the session cache (`--session-cache` above 0); not used on a frontend that
    /// verifies client certificates.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub quic_early_data: bool,

    /// With `--quic`: probe each connection's path for packets larger than 1 200 bytes, up
    /// to 1 452 (DPLPMTUD, RFC 8899, as nginx and Caddy do): bulk transfers take fewer
    /// packets.
    ///
    /// quinn's search: once the handshake is confirmed, a binary search between 1 200 and
    /// 1 452, a probe packet and its acknowledgement a step, never on an address not yet
    /// validated. Off: every packet stays at 1 200 bytes (HAProxy's way).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "on", default_missing_value = "on", value_parser = parse_on_off)]
    pub quic_mtu_discovery: bool,

    /// With `--quic`: follow a client whose address changes (NAT rebinding, Wi-Fi to mobile
    /// data) once the new address answers a PATH_CHALLENGE; until then shuck sends it at
    /// most three times what came from it (RFC 9000 §8.2, §9.3).
    ///
    /// Off: packets of a connection from any other address are dropped (the client must
    /// reconnect).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "on", default_missing_value = "on", value_parser = parse_on_off)]
    pub quic_migration: bool,

    /// With `--quic`: most request streams a client may have open at once on one QUIC
    /// connection (`initial_max_streams_bidi`).
    ///
    /// 1 to 10000.
    #[arg(long, value_name = "NUM", default_value_t = 100)]
    pub h3_max_concurrent_streams: u32,

    /// Worker threads; each has its own runtime and its own `SO_REUSEPORT` socket per
    /// frontend.
    ///
    /// Default: cores.
    #[arg(short = 'n', long, value_name = "NUM")]
    pub workers: Option<usize>,

    /// Listen backlog per socket.
    #[arg(short = 'B', long, value_name = "NUM", default_value_t = 1024)]
    pub backlog: u32,

    /// TCP Fast Open on the listening sockets (hitch's `tcp-fastopen`): a returning
    /// client's ClientHello rides in its SYN, saving a round trip.
    ///
    /// The kernel must allow it for servers (`sysctl net.ipv4.tcp_fastopen=3`).
    #[arg(long, visible_alias = "enable-tcp-fastopen", value_name = "on|off", num_args = 0..=1,
          require_equals = true, default_value = "off", default_missing_value = "on",
          value_parser = parse_on_off)]
    pub tcp_fastopen: bool,

    /// Accept a connection only once its ClientHello has arrived (`TCP_DEFER_ACCEPT`,
    /// HAProxy's `defer-accept`): a client that connects and sends nothing stays in the
    /// kernel and costs no accept, no wake-up and no handshake timer; the kernel gives it
    /// up after about `--ssl-handshake-timeout`.
    ///
    /// Config key `defer-accept`.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub defer_accept: bool,

    /// Protocols, separated by spaces or commas.
    ///
    /// SSLv3, TLSv1.0 and TLSv1.1 beside TLSv1.2 or TLSv1.3 are dropped with one warning
    /// (they are insecure); a list of them only is an error that names them.
    #[arg(long, value_name = "LIST", default_value = "TLSv1.2 TLSv1.3")]
    pub tls_protos: String,

    /// hitch's deprecated switches: TLSv1.0–TLSv1.3 and SSLv3–TLSv1.3, of which shuck
    /// serves TLSv1.2 and TLSv1.3 (with `--tls-protos`' warning).
    ///
    /// As in hitch they are exclusive, and cannot override `tls-protos` (or `tls`, `ssl`)
    /// from a configuration file; in a file, `tls = on`/`ssl = on` (top level or a frontend
    /// block) are one of `tls`, `ssl`, `tls-protos`, given once per scope, and `= off` does
    /// nothing but warn.
    #[arg(long, conflicts_with = "ssl")]
    pub tls: bool,

    /// hitch's deprecated switch for SSLv3 to TLSv1.3: shuck serves TLSv1.2 and TLSv1.3 of
    /// them. Cannot override tls-protos from a configuration file.
    #[arg(long)]
    pub ssl: bool,

    /// TLS 1.2 suites in OpenSSL syntax: exact names (`ECDHE-RSA-AES128-GCM-SHA256`) or
    /// expressions (`EECDH+AESGCM`, `HIGH:!aECDSA`, `!`/`-`/`+` operators).
    ///
    /// As in OpenSSL, names that select nothing shuck serves (CBC, RC4, DHE, static RSA,
    /// unknown names) are dropped, with one warning that lists them; a list that selects
    /// nothing is an error. Served names: `ECDHE-ECDSA-AES128-GCM-SHA256`,
    /// `ECDHE-ECDSA-AES256-GCM-SHA384`, `ECDHE-ECDSA-CHACHA20-POLY1305`,
    /// `ECDHE-RSA-AES128-GCM-SHA256`, `ECDHE-RSA-AES256-GCM-SHA384`,
    /// `ECDHE-RSA-CHACHA20-POLY1305`.
    ///
    /// Default: rustls defaults.
    #[arg(short = 'c', long, value_name = "SUITE")]
    pub ciphers: Option<String>,

    /// TLS 1.3 suites, `:`-separated: `TLS_AES_128_GCM_SHA256`, `TLS_AES_256_GCM_SHA384`,
    /// `TLS_CHACHA20_POLY1305_SHA256`; others (the CCM suites) are dropped with a warning,
    /// as `--ciphers`.
    ///
    /// Default: all three.
    #[arg(long, value_name = "SUITES")]
    pub ciphersuites: Option<String>,

    /// Key exchange groups in preference order, `:` or `,` separated
    /// (`prime256v1`/`secp256r1` and `secp384r1` accepted).
    ///
    /// Default: X25519, P-256, P-384, X25519MLKEM768.
    #[arg(long, visible_alias = "groups", value_name = "LIST")]
    pub ecdh_curve: Option<String>,

    /// ALPN protocols, comma-separated, e.g. `h2,http/1.1`.
    ///
    /// A client offering none of them is refused. With `--http`, `h2` means shuck
    /// terminates HTTP/2 (the manual's HTTP gateway); without `--http` the bytes are
    /// relayed whatever was negotiated, so an h2 backend speaks h2 itself.
    ///
    /// Default: none; `h2,http/1.1` with `--http`.
    #[arg(long, value_name = "LIST")]
    pub alpn_protos: Option<String>,

    /// Choose the suite by shuck's order, not the client's.
    #[arg(short = 'O', long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub prefer_server_ciphers: bool,

    /// Refuse a server name no certificate serves with the `unrecognized_name` alert.
    ///
    /// Clients that send no SNI get the default certificate.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub sni_nomatch_abort: bool,

    /// Ask clients for a certificate.
    ///
    /// `optional` serves clients without one but refuses a certificate that does not chain
    /// to `--client-verify-ca`; `required` refuses clients without one (TLS alert
    /// `certificate_required`).
    #[arg(long, value_name = "none|optional|required", default_value = "none",
          value_parser = crate::tls::client_auth::Mode::parse)]
    pub client_verify: crate::tls::client_auth::Mode,

    /// PEM file of the CAs client certificates must chain to (required with
    /// `--client-verify`).
    ///
    /// As in hitch, a frontend (`;client-verify=...;client-verify-ca=...`, or the keys in
    /// its block) and a certificate (`--pem-file`'s options, or its `pem-file` block) may
    /// have their own; the certificate's wins, then the frontend's.
    #[arg(long, value_name = "FILE")]
    pub client_verify_ca: Option<PathBuf>,

    /// With `--write-proxy-v2`: the verified client certificate itself in TLV `0xE0` (PEM,
    /// as hitch sends it) and its common name in the SSL TLV (`PP2_SUBTYPE_SSL_CN`).
    ///
    /// The SSL TLV's client flags say `CERT_CONN` and `CERT_SESS` and its verify field is 0
    /// when a client certificate was presented and verified, 1 when none was (as hitch).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub proxy_client_cert: bool,

    /// With `--http`: every request carries `NAME: <subject>` (e.g. `X-SSL-Client-Subject:
    /// CN=alice, O=Example`) when the client presented a verified certificate; the client's
    /// own `NAME` headers are always removed.
    #[arg(long, value_name = "NAME")]
    pub client_cert_header: Option<String>,

    /// Staple this OCSP response (DER) with certificate PEM (as given on the command line),
    /// repeatable.
    ///
    /// It is checked first: signed by the issuer (the next certificate in PEM's chain) or a
    /// responder it delegated to, about this certificate, status good, dates current. One
    /// that fails is not stapled, and the log says why. In a configuration file: `pem-file
    /// = { cert = "x.pem" ocsp-resp-file = "x.der" }`.
    #[arg(long, value_name = "PEM=DER")]
    pub ocsp_resp_file: Vec<String>,

    /// Fetch OCSP responses from each certificate's responder (the URL in its Authority
    /// Information Access; the issuer must follow the certificate in its PEM file), check
    /// them as `--ocsp-resp-file`'s, cache them in DIR (a restart staples the cached one at
    /// once), staple them, and fetch again before they expire.
    ///
    /// New responses apply to new handshakes without a reload. Each certificate's fetch
    /// runs on its own (up to 8 at once), so a responder that hangs delays no other
    /// certificate's staple. With `--user`, DIR must be writable by that user (fetches run
    /// after privileges are dropped).
    #[arg(long, value_name = "DIR")]
    pub ocsp_dir: Option<PathBuf>,

    /// Longest time between two fetches for a certificate (sooner if the response's
    /// nextUpdate comes first).
    ///
    /// A failed fetch is retried after 30 s; the last good response stays stapled until it
    /// expires.
    #[arg(long, value_name = "SECS", default_value = "1800", value_parser = parse_duration)]
    pub ocsp_refresh_interval: Duration,

    /// Time to connect to a responder.
    #[arg(long, value_name = "SECS", default_value = "4", value_parser = parse_duration)]
    pub ocsp_connect_tmo: Duration,

    /// Time for a responder's whole answer.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_duration)]
    pub ocsp_resp_tmo: Duration,

    /// As in hitch: on, an OCSP response given by file (`--ocsp-resp-file`, a `pem-file`
    /// block's `ocsp-resp-file`) that does not verify is an error at start and at `--test`,
    /// and a response signed by a responder the issuer delegated to verifies only when that
    /// responder's certificate chains to a trusted root (`--ocsp-verify-ca`, else the
    /// system's store as OpenSSL finds it: `SSL_CERT_FILE`, `SSL_CERT_DIR`, else the
    /// distribution's bundle such as `/etc/ssl/certs/ca-certificates.crt`); one signed by
    /// the issuer in the PEM file needs no store, as in hitch.
    ///
    /// Responses `--ocsp-dir` fetches are held to the same trust (one that fails is not
    /// stapled, and logged). Off, shuck still checks every response and staples none that
    /// fails, with a warning. A `pem-file` block's own `ocsp-verify-staple` wins.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub ocsp_verify_staple: bool,

    /// With `ocsp-verify-staple`: the CA certificates (PEM) a delegated OCSP responder must
    /// chain to, instead of the system's trust store.
    ///
    /// A file without a certificate is an error naming it.
    #[arg(long, value_name = "FILE")]
    pub ocsp_verify_ca: Option<PathBuf>,

    /// One session cache for the whole process, shared by every worker: TLS 1.2 session IDs
    /// and TLS 1.3 stateful tickets.
    ///
    /// LRU past NUM entries, sharded so workers rarely share a lock. 0 disables it.
    #[arg(
        short = 'C',
        long,
        visible_alias = "shared-cache",
        value_name = "NUM",
        default_value_t = 20_000
    )]
    pub session_cache: usize,

    /// Lifetime of a session, in the cache and in tickets alike.
    #[arg(long, value_name = "SECS", default_value = "300", value_parser = parse_duration)]
    pub session_timeout: Duration,

    /// Stateless session tickets (TLS 1.2 RFC 5077, TLS 1.3).
    ///
    /// With them off, TLS 1.3 clients get stateful tickets kept in the cache. The last of
    /// the two flags given wins.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "on", default_missing_value = "on", value_parser = parse_on_off,
          overrides_with = "no_tickets")]
    pub tickets: bool,

    /// Do not issue stateless tickets (TLS 1.3 then uses stateful tickets in the cache).
    #[arg(long, overrides_with = "tickets")]
    pub no_tickets: bool,

    /// A new random ticket key starts encrypting every SECS; each key still decrypts for
    /// one more period (lifetime 2 × SECS), then is erased.
    #[arg(long, value_name = "SECS", default_value = "3600", value_parser = parse_duration)]
    pub ticket_rotate: Duration,

    /// Ticket keys from FILE instead, to share across hosts: HAProxy's `tls-ticket-keys`
    /// format, one base64 key of 48 or 80 bytes per line (`openssl rand 80 | openssl base64
    /// -A`), `#` comments allowed.
    ///
    /// **The second-to-last line encrypts** (the last is the next key, distributed ahead of
    /// time; with one line, it encrypts) and every line decrypts. Re-read on SIGHUP; a
    /// malformed file is refused with its line number and the keys in use stay. Keys are
    /// turned into AES-256-GCM keys with HKDF, so tickets are not interchangeable with
    /// HAProxy's, only the file is.
    #[arg(long, value_name = "FILE")]
    pub ticket_keys: Option<PathBuf>,

    /// Turn on replication between hosts (the manual's Farms): receive on this UDP address
    /// and send from it.
    ///
    /// To receive multicast, listen on `[*]:PORT` (or the group's address).
    #[arg(short = 'U', long, value_name = "[HOST]:PORT")]
    pub shared_cache_listen: Option<String>,

    /// A peer to send new sessions and ticket keys to, repeatable: a host, or a multicast
    /// group (IPv4 `224.0.0.0/4` or IPv6 `ff00::/8`), which is then also joined.
    #[arg(short = 'P', long, value_name = "[HOST]:PORT")]
    pub shared_cache_peer: Vec<String>,

    /// Interface that multicast replication joins and leaves by, and the multicast TTL /
    /// hop limit.
    ///
    /// Default: routing, TTL 1.
    #[arg(short = 'M', long, value_name = "IFACE[,TTL]")]
    pub shared_cache_if: Option<String>,

    /// Required with `-U`: the farm's pre-shared key, base64 of 32 random bytes (`head -c
    /// 32 /dev/urandom | base64 > key; chmod 600 key`).
    ///
    /// Every datagram is sealed with AES-256-GCM under a key derived from it.
    #[arg(long, value_name = "FILE")]
    pub shared_cache_key: Option<PathBuf>,

    /// Datagrams stamped older than this, or this far in the future, are dropped; hosts'
    /// clocks must agree within it.
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = parse_duration)]
    pub shared_cache_window: Duration,

    /// Keep sessions and the ticket key ring in Redis or Valkey (the manual's Farms):
    /// `redis://[USER@]HOST:PORT[/DB]`, or `rediss://` for TLS.
    ///
    /// Needs `--shared-cache-key` (every value is sealed under it). Works with or without
    /// `-U`. A password in the URL is refused.
    #[arg(long, value_name = "URL")]
    pub shared_store: Option<String>,

    /// PEM CA certificates the `rediss://` server's certificate must chain to.
    ///
    /// Default: system roots.
    #[arg(long, value_name = "FILE")]
    pub shared_store_ca: Option<PathBuf>,

    /// The store's password (its first line), never on the command line.
    #[arg(long, value_name = "FILE")]
    pub shared_store_auth_file: Option<PathBuf>,

    /// Prefix of every key shuck writes, so that several farms can share one Redis.
    #[arg(long, value_name = "PREFIX", default_value = "shuck:")]
    pub shared_store_prefix: String,

    /// The most a handshake waits for a lookup; past it, or on any error, the handshake is
    /// full.
    ///
    /// At most 1s.
    #[arg(long, value_name = "SECS", default_value = "5ms", value_parser = parse_duration)]
    pub shared_store_timeout: Duration,

    /// Get and renew certificates from this ACME (RFC 8555) CA (the manual's Farms), e.g.
    /// `https://acme-v02.api.letsencrypt.org/directory`.
    ///
    /// Needs `--acme-domain` and `--acme-agree-tos`.
    #[arg(long, value_name = "URL")]
    pub acme_directory: Option<String>,

    /// One certificate for these names (comma-separated; the first names it), repeatable.
    ///
    /// Chosen by SNI like any other certificate; never the default certificate.
    #[arg(long, value_name = "NAMES")]
    pub acme_domain: Vec<String>,

    /// A contact for the account (`mailto:ops@example.com`, or a bare address), repeatable.
    #[arg(long, value_name = "URI")]
    pub acme_contact: Vec<String>,

    /// Agree to the CA's terms of service (required to create an account).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub acme_agree_tos: bool,

    /// The account key, certificates and keys (directories 0700, files 0600).
    ///
    /// Created when missing; one that cannot be written is a start failure (exit 1) that
    /// names it.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/shuck/acme")]
    pub acme_state: PathBuf,

    /// How the CA checks the names: tls-alpn-01 (RFC 8737) is answered on shuck's own
    /// frontends, no port 80 needed; http-01 on `--acme-http-listen`.
    #[arg(long, value_name = "TYPE", default_value = "tls-alpn-01")]
    pub acme_challenge: String,

    /// Answer http-01 at `/.well-known/acme-challenge/` on this port (usually `:80`, bound
    /// by the master as root); every other request is redirected to https as on
    /// `--redirect-listen` (which answers http-01 itself: give one or the other).
    #[arg(long, value_name = "[HOST]:PORT")]
    pub acme_http_listen: Option<String>,

    /// PEM CA certificates the ACME server's own HTTPS certificate must chain to (private
    /// and test CAs).
    ///
    /// Default: system roots.
    #[arg(long, value_name = "FILE")]
    pub acme_ca_file: Option<PathBuf>,

    /// Key of the certificates ordered: `ecdsa-p256`, `ecdsa-p384`, `rsa-2048`, `rsa-3072`.
    #[arg(long, value_name = "TYPE", default_value = "ecdsa-p256")]
    pub acme_key_type: String,

    /// External account binding (CAs that require one, e.g. ZeroSSL, Google): the key
    /// identifier.
    #[arg(long, value_name = "KID")]
    pub acme_eab_kid: Option<String>,

    /// External account binding: a file holding the HMAC key (base64url, as the CA gives
    /// it).
    #[arg(long, value_name = "FILE")]
    pub acme_eab_hmac_key: Option<PathBuf>,

    /// Serve Prometheus metrics at `http://ADDR:PORT/metrics` (OpenMetrics text).
    ///
    /// A bare `PORT` listens on 127.0.0.1 only. A port already taken is a start-up error.
    #[arg(long, value_name = "[ADDR]:PORT")]
    pub stats: Option<String>,

    /// Serve the admin API (HTTP/1.1 with JSON; see Operating it) on this UNIX socket, mode
    /// 0600, answered by the master: `curl --unix-socket PATH http://shuck/status`, or
    /// `shuck ctl`.
    ///
    /// Only root and the master's user may use it (checked by `SO_PEERCRED` too). A live
    /// socket at PATH is a start-up error; a stale one is replaced. The Debian package
    /// turns it on at `/run/shuck/admin.sock`.
    #[arg(long, value_name = "PATH")]
    pub admin_socket: Option<PathBuf>,

    /// Serve the admin API on TCP too (a bare `PORT` listens on 127.0.0.1 only), to
    /// requests with `Authorization: Bearer TOKEN`; others get `401`.
    ///
    /// Needs `--admin-token-file`.
    #[arg(long, value_name = "[ADDR]:PORT")]
    pub admin_listen: Option<String>,

    /// The TCP admin API's token: FILE's first line, 16 printable characters at least; FILE
    /// readable by its owner only (0600), else a start-up error.
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,

    /// Keep the operator's server states (`drain`, `maint`, weights set through the admin
    /// API) in FILE (JSON, 0600, written whole after each change) and read them at start,
    /// so that a restart or a binary upgrade keeps them, as HAProxy's `server-state-file`.
    ///
    /// A file that does not parse is named in a warning and every server starts ready.
    /// Needs `--admin-socket` or `--admin-listen`.
    #[arg(long, value_name = "FILE")]
    pub admin_state: Option<PathBuf>,

    /// Where `PUT /certificates/NAME` keeps what it adds (`NAME.pem`, 0600; DIR made 0700):
    /// served at once without a reload, and at every start and reload after the
    /// configuration's own certificates (never the default one).
    #[arg(long, value_name = "DIR")]
    pub admin_certs: Option<PathBuf>,

    /// Most client connections open at once over all workers.
    ///
    /// Beyond it shuck stops calling `accept()`, so new clients wait in the kernel backlog
    /// instead of being accepted and dropped.
    #[arg(long, value_name = "NUM", default_value_t = 0)]
    pub max_conns: usize,

    /// Most connections one client may have open at once (0: no limit), over all workers.
    ///
    /// A client is its address (IPv4 /32, IPv6 `--client-prefix-v6`), the PROXY header's
    /// source with `--proxy-proxy`. A connection over it is closed right after accept
    /// (after its PROXY header), before any TLS work, as HAProxy's `tcp-request connection
    /// reject` and nginx's `limit_conn`. A frontend may have its own (`client-max-conns` in
    /// its block, `;client-max-conns=` in `-f`), counted apart. Config key
    /// `client-max-conns`.
    #[arg(long, value_name = "NUM", default_value_t = 0)]
    pub client_max_conns: u32,

    /// New connections a client may open, as `RATE/s` or `RATE/m` with an optional burst
    /// (`20/s,burst=40`; the burst defaults to the rate).
    ///
    /// Over it, a connection is closed right after accept, before any TLS work. Per
    /// frontend: `client-conn-rate` (`off` for none). Config key `client-conn-rate`.
    #[arg(long, value_name = "RATE", value_parser = super::clients::parse_rate)]
    pub client_conn_rate: Option<crate::clients::Rate>,

    /// `--http`: requests a client may make, over HTTP/1.1, HTTP/2 and HTTP/3 alike, as
    /// `--client-conn-rate` writes a rate (`100/s,burst=200`).
    ///
    /// Over it, a request is answered `429 Too Many Requests` with `Retry-After` (an
    /// HTTP/1.1 connection is then closed; HTTP/2 and HTTP/3 streams end alone), as nginx's
    /// `limit_req`. Per frontend: `client-request-rate`. Config key `client-request-rate`.
    #[arg(long, value_name = "RATE", value_parser = super::clients::parse_rate)]
    pub client_request_rate: Option<crate::clients::Rate>,

    /// Serve only clients in these address blocks, repeatable: CIDRs separated by commas
    /// (`10.0.0.0/8,2001:db8::/32`, one address is its own block), or `file:PATH` (blocks
    /// one or more a line, `#` comments), read at start and at every reload.
    ///
    /// Others are closed at accept, before any TLS work. Per frontend: `client-allow`.
    /// Config key `client-allow`.
    #[arg(long, value_name = "CIDRS")]
    pub client_allow: Vec<String>,

    /// Never serve clients in these blocks (as `--client-allow` writes them; over it).
    /// Per frontend: `client-deny`. Config key `client-deny`.
    #[arg(long, value_name = "CIDRS")]
    pub client_deny: Vec<String>,

    /// Bits of an IPv6 address that name one client for the limits (64: a /64, what one
    /// host or home is given).
    #[arg(long, value_name = "BITS", default_value_t = 64)]
    pub client_prefix_v6: u8,

    /// Clients tracked at once for the limits: 64 bytes each (the default, 65536, takes
    /// 4 MiB), made when a limit first needs it.
    ///
    /// A full table gives the way of its least active client to a new one, so a flood from
    /// many addresses never grows memory and the busiest clients stay tracked and limited.
    /// A restart changes it.
    #[arg(long, value_name = "NUM", default_value_t = 65536)]
    pub client_table_size: usize,

    /// With `--shared-store`: how often the farm's hosts exchange their busiest clients'
    /// counts and their bans through the store (never on a request's path), so that a
    /// client spread over the farm meets the limits within about this long.
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_duration)]
    pub client_share_interval: Duration,

    /// How a connection refused at accept is refused: `reset` (accepted and reset at
    /// once, before any TLS work, as HAProxy's `tcp-request connection reject`) or `drop`
    /// (the kernel drops its SYN: nothing is accepted nor answered, the client sees a
    /// timeout, as HAProxy's `silent-drop`).
    ///
    /// With `drop`, bans, deny and allow rules and each client over `--client-max-conns` or
    /// `--client-conn-rate` (for as long as its rate says, a second at least) are a BPF
    /// filter on the frontend's listening sockets, so a flood from them costs the kernel a
    /// dropped packet instead of a connection; those drops are not counted by shuck. Not
    /// with `--proxy-proxy` (the packets come from the proxy).
    #[arg(long, value_name = "HOW", value_enum, default_value = "reset")]
    pub client_refuse: super::clients::Refuse,

    /// Time a client has to finish the handshake (a client that sends nothing is cut then).
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_duration)]
    pub ssl_handshake_timeout: Duration,

    /// Time to connect to the backend.
    ///
    /// On failure the client gets close_notify at once and the log names the backend and
    /// the reason.
    #[arg(long, value_name = "SECS", default_value = "3", value_parser = parse_duration)]
    pub backend_connect_timeout: Duration,

    /// Close a connection after this long with no byte either way.
    #[arg(long, value_name = "SECS", default_value = "3600", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// TCP keepalive idle time on client sockets; 0 turns it off.
    #[arg(short = 'k', long, value_name = "SECS", default_value_t = 3600)]
    pub keepalive: u64,

    /// On SIGTERM/SIGINT shuck stops accepting at once and lets live connections finish for
    /// this long, then exits 0. A second signal exits at once (status 1).
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// The worker process runs as USER (shuck must start as root); the master process stays
    /// root, so reloads still read root-only keys.
    ///
    /// All the worker's threads change; shuck checks root cannot be had back. Started as
    /// root without `--user`, shuck serves (hitch would refuse) and warns that it runs as
    /// root.
    #[arg(short = 'u', long, value_name = "USER")]
    pub user: Option<String>,

    /// Run as GROUP; supplementary groups are dropped.
    ///
    /// Default: USER's group.
    #[arg(short = 'g', long, value_name = "GROUP")]
    pub group: Option<String>,

    /// The worker process chroots into DIR; the master reads every file (also at reloads)
    /// outside it, with paths as given.
    #[arg(short = 'r', long, value_name = "DIR", value_parser = any_path)]
    pub chroot: Option<PathBuf>,

    /// Detach once every port is bound (errors before that still reach the terminal): fork,
    /// new session, stdio to /dev/null.
    ///
    /// Use with `--syslog` or `--log-filename`.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub daemon: bool,

    /// Write the master process's id (after detaching) to FILE; removed at exit.
    ///
    /// After a binary upgrade (SIGUSR2) it holds the new master's id. FILE (like
    /// `--log-filename`'s) is never opened through a symbolic link: one in its place is an
    /// error.
    #[arg(short = 'p', long, value_name = "FILE", value_parser = any_path)]
    pub pidfile: Option<PathBuf>,

    /// Log to the local syslog (`/dev/log`, RFC 3164, `shuck[pid]`) instead of stderr.
    ///
    /// As in hitch, a missing `/dev/log` does not stop shuck: it warns once and logs to
    /// stderr until `/dev/log` appears (looked for at most once a second), and finds a
    /// restarted syslog daemon again.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub syslog: bool,

    /// `daemon`, `user`, `local0` … `local7`, ...
    #[arg(long, value_name = "FACILITY", default_value = "daemon")]
    pub syslog_facility: String,

    /// Append log lines to FILE instead of stderr.
    ///
    /// With `--syslog` too, every line goes to both (as hitch takes them together).
    #[arg(long, value_name = "FILE", value_parser = any_path)]
    pub log_filename: Option<PathBuf>,

    /// hitch's numbers (0 silence, 1 errors, 2 info) or `off`, `error`, `warn`, `info`,
    /// `debug`, `trace`.
    ///
    /// Logs go to stderr, one line per event. A release build shows at `trace` what it
    /// shows at `debug`: the libraries' trace events (h2's and tokio's inner steps) are
    /// compiled out for speed; a debug build (`cargo build`) keeps them.
    #[arg(short = 'L', long, value_name = "LEVEL", default_value = "info", value_parser = parse_log_level)]
    pub log_level: tracing::level_filters::LevelFilter,

    /// `json`: one JSON object per line, for Loki or Elasticsearch pipelines: `time` (RFC
    /// 3339, UTC), `level`, `event` (a fixed name, listed in the manual's Logs),
    /// `message` (the text format's line), then the event's own fields by name (`client`,
    /// `sni`, `backend`, `bytes_in`, `bytes_out`, `ms`, `error`, …; numbers as numbers),
    /// `--log-connections`' line and start-up errors included.
    ///
    /// Config key `log-format`.
    #[arg(long, value_name = "FORMAT", value_enum, default_value = "text")]
    pub log_format: crate::system::log::LogFormat,

    /// Errors only.
    #[arg(short = 'q', long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub quiet: bool,

    /// One line per connection when it closes: worker, client, SNI, version, bytes each
    /// way, duration.
    ///
    /// Without it, successful connections are not logged. In TCP mode with
    /// `--access-log`, the access log's line is the connection's, in its format: this one
    /// is not written too.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub log_connections: bool,

    /// An access log line per HTTP request (HTTP/1.1, HTTP/2 and HTTP/3 alike) and per
    /// connection in TCP mode: `stderr`, `syslog` (RFC 5424 to /dev/log), `unix:PATH`
    /// (the same to another syslog socket), `udp://HOST:PORT` (RFC 5424 to a syslog
    /// server), `fifo:PATH` (a named pipe), or a file (in a directory only root may write).
    ///
    /// Off by default. A frontend may have its own (`access-log` in its block, `;access-log=`
    /// in `-f`: a target, or `off`); the format and the filters are the same for all. A
    /// file is opened by the master before privileges are dropped, and
    /// opened again on SIGUSR1 (for logrotate) and at every reload. Lines are written by a
    /// thread of their own in batches: a sink that cannot keep up costs dropped lines,
    /// counted in `shuck_access_log_dropped_total` and warned of once an episode, never a
    /// slower request. Syslog's facility is `--syslog-facility`'s. Config key
    /// `access-log`; the fields are listed in the manual's Logs chapter.
    #[arg(long, value_name = "TARGET", value_parser = parse_access_target)]
    pub access_log: Option<crate::access::Target>,

    /// `combined` (NCSA combined, as nginx writes it: goaccess, awstats and fail2ban read
    /// it), `json` (one object a line, fixed keys), or a template such as
    /// `"{remote_addr} {request_method} {request_uri} {status} {request_us}"`.
    ///
    /// A template names fields in braces (`{{` and `}}` for a brace); what a client sent is
    /// escaped as nginx escapes it, so a line stays one line. Config key
    /// `access-log-format`.
    #[arg(long, value_name = "FORMAT", default_value = "combined", value_parser = parse_access_format)]
    pub access_log_format: crate::access::Format,

    /// Log only errors: a status of 400 or more, or a request or connection that did not
    /// end normally (its `cause`).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub access_log_errors_only: bool,

    /// Log one request in N (per worker thread); errors are always logged.
    #[arg(long, value_name = "N", default_value = "1", value_parser = clap::value_parser!(u32).range(1..))]
    pub access_log_sample: u32,

    /// `--http`: each request gets an ID in this header (e.g. `X-Request-ID`), sent to the
    /// backend and written in the access log's `request_id`.
    ///
    /// A well-formed value (visible ASCII, 1 to 64 bytes; the first such header) from a
    /// peer of `--trusted-proxies` passes; any other, and every client's otherwise, is
    /// replaced, and a request without one gets a new one (128 bits as 32 hex digits, a
    /// counter under a random AES key of each worker thread: unique and unpredictable). A header that
    /// frames or routes a request (Host, Content-Length, Connection, ...) or one shuck sets
    /// is refused. Config key `request-id-header`; off by default.
    #[arg(long, value_name = "NAME", value_parser = parse_header_name)]
    pub request_id_header: Option<String>,

    /// `--http`: peers whose forwarding information shuck believes (a CDN, a cloud load
    /// balancer), repeatable: CIDRs as `--client-allow` writes them (`file:PATH` too).
    ///
    /// A request from one names its client: the rightmost address of `X-Forwarded-For`
    /// (else of `Forwarded`'s `for=`) that is not itself trusted, as nginx's
    /// `set_real_ip_from` with `real_ip_recursive on` reads it. That client is what the
    /// backend's `X-Forwarded-For`, the access log, the bans, `--client-allow`/`-deny`,
    /// `--client-request-rate` and the routes' client rules see; the peer's own
    /// connections are held to the bans and rules, not to the per-client connection
    /// limits. Their `--request-id-header` value passes too. Anyone else's fields are
    /// replaced, as always. Config key `trusted-proxies`.
    #[arg(long, value_name = "CIDRS")]
    pub trusted_proxies: Vec<String>,

    /// Listen for plain HTTP on this address, repeatable (usually `:80`, bound by the master
    /// as root): every request is answered with a redirect to the same URL in https
    /// (`https://` + its Host, without the port + its path and query).
    ///
    /// ACME http-01 tokens are answered there when ACME is on (no `--acme-http-listen`
    /// needed). A request without one usable Host gets 400. The client's bans, rules and
    /// limits (`--client-*`, the global ones) apply. Works in TCP and `--http` mode alike.
    /// Config key `redirect-listen`.
    #[arg(long, value_name = "[HOST]:PORT")]
    pub redirect_listen: Vec<String>,

    /// The plain-HTTP listener's redirect status: 308 (the default, which keeps the
    /// method), 301, 302, 303 or 307. Config key `redirect-code`.
    #[arg(long, value_name = "CODE", value_parser = super::redirect::parse_code)]
    pub redirect_code: Option<u16>,

    /// The port the plain-HTTP listener's redirects name (`https://HOST:PORT/...`), for
    /// frontends that are not on 443. Config key `redirect-port`.
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub redirect_port: Option<u16>,

    /// `--http`: a rule on the request's fields on their way to the backend, repeatable:
    /// `NAME: VALUE` sets the field (the client's of that name dropped), `+NAME: VALUE`
    /// adds one, `?NAME: VALUE` sets it only when the client sent none, `-NAME` deletes it.
    ///
    /// A frontend, a named backend and a route may give their own (`request-header` in
    /// their block); the most specific level that gives any rule wins, as nginx's
    /// `proxy_set_header` inherits. Fields that frame the message (`Content-Length`,
    /// `Transfer-Encoding`, `Connection`, `Host`, ...), `:pseudo` fields and the forwarding
    /// fields shuck writes (`X-Forwarded-For`, `X-Forwarded-Proto`, `Forwarded`) are refused;
    /// a value with CR, LF, NUL or another control byte is an error at load. Config key
    /// `request-header`.
    #[arg(long, value_name = "RULE", value_parser = parse_request_rule, allow_hyphen_values = true)]
    pub request_header: Vec<String>,

    /// `--http`: a rule on the answer's fields on their way to the client, repeatable, as
    /// `--request-header` writes them (`NAME: VALUE`, `+NAME: VALUE`, `?NAME: VALUE`,
    /// `-NAME`).
    ///
    /// They apply to shuck's own answers too (400, 403, 421, 429, 502, 503, 504), as
    /// nginx's `add_header ... always`. Levels as `--request-header`'s. Config key
    /// `response-header`.
    #[arg(long, value_name = "RULE", value_parser = parse_response_rule, allow_hyphen_values = true)]
    pub response_header: Vec<String>,

    /// `--http`: `Strict-Transport-Security` on every answer (RFC 6797), e.g.
    /// `max-age=63072000; includeSubDomains; preload`.
    ///
    /// Checked: `max-age=N`, then `includeSubDomains` and `preload`, each once. Set before
    /// the answer rules, so a route's `-Strict-Transport-Security` removes it. Config key
    /// `hsts`.
    #[arg(long, value_name = "VALUE", value_parser = parse_hsts)]
    pub hsts: Option<http::HeaderValue>,

    /// `--http`: the most bytes a request body may have (`512k`, `10m`, `1g`; 0: no
    /// limit), as nginx's `client_max_body_size`.
    ///
    /// A declared length over it is answered 413 before anything reaches the backend; a
    /// body without one (chunked, HTTP/2, HTTP/3) that grows past it is answered 413 if no
    /// answer began, else reset, and its backend connection closed. A route or a named
    /// backend may give its own (`max-body-bytes`). Config key `max-body-bytes`.
    #[arg(long, value_name = "BYTES", default_value = "0", value_parser = parse_body_bytes)]
    pub max_body_bytes: super::policy::BodyLimit,

    /// `--http`: a page of one's own for shuck's own error answers, repeatable: `CODES
    /// PATH`, as `502,503,504 /etc/shuck/50x.html` (nginx's `error_page`, HAProxy's
    /// `errorfile`).
    ///
    /// The file (1 MiB at most, its `Content-Type` by its extension: `.html`, `.json`,
    /// `.txt`, ...) is read at start and at each reload; one that cannot be read is an
    /// error then, naming it. It replaces the body of shuck's answers with those statuses
    /// (400 to 599: a backend that refuses connections, a timeout, a limit, a
    /// misdirected request, ...) over every HTTP version, the status and the answer rules
    /// kept; with `intercept` after the path (`502,503 /etc/shuck/5xx.html intercept`), the
    /// backend's own answers with those statuses too (nginx's `proxy_intercept_errors`).
    /// A frontend, a named backend and a route may give their own (`error-page` in their
    /// block); the most specific level that gives any wins. Config key `error-page`.
    #[arg(long, value_name = "CODES PATH [intercept]")]
    pub error_page: Vec<String>,

    /// `--http`: the page a backend in maintenance answers with (`shuck ctl maint
    /// BACKEND`: every server of it), in place of its 503 `--error-page`.
    ///
    /// Read as `--error-page`'s files are; a named backend, a route and a frontend may give
    /// their own (`maintenance-page` in their block). Config key `maintenance-page`.
    #[arg(long, value_name = "PATH")]
    pub maintenance_page: Option<String>,

    /// Answers carry their request's ID back in `--request-id-header`'s header.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub request_id_response: bool,

    /// Warnings met while reading the configuration file, logged once logging is set up.
    #[arg(skip)]
    pub notes: Vec<String>,

    /// Where the configuration file's keys stand, for errors found once it is all built.
    #[arg(skip)]
    pub file_places: Option<super::places::KeyPlaces>,
}

impl Cli {
    /// hitch reads an empty value as "not set" for these options (`user = ""` in a file,
    /// `--ciphers=` on the command line): so does shuck.
    pub fn unset_empty(mut self) -> Self {
        for s in [
            &mut self.ciphers,
            &mut self.alpn_protos,
            &mut self.shared_cache_listen,
            &mut self.user,
            &mut self.group,
        ] {
            if s.as_deref().is_some_and(str::is_empty) {
                *s = None;
            }
        }
        for p in [&mut self.chroot, &mut self.pidfile, &mut self.log_filename] {
            if p.as_ref().is_some_and(|p| p.as_os_str().is_empty()) {
                *p = None;
            }
        }
        self
    }
}

/// A path, empty allowed (hitch's "not set"; see [`Cli::unset_empty`]).
fn any_path(s: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(s))
}

/// A header's name: letters, digits and `-`, at most 64; kept lower case.
fn parse_header_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 64 || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(format!(
            "{s:?}: a header name is 1 to 64 letters, digits and -"
        ));
    }
    Ok(s.to_ascii_lowercase())
}

/// `--request-header`'s rule, checked where it stands (a file's error names its line).
fn parse_request_rule(s: &str) -> Result<String, String> {
    use super::policy::{Direction, HeaderRule};
    HeaderRule::parse(s, Direction::Request).map(|_| s.to_owned())
}

/// `--response-header`'s rule, checked where it stands.
fn parse_response_rule(s: &str) -> Result<String, String> {
    use super::policy::{Direction, HeaderRule};
    HeaderRule::parse(s, Direction::Response).map(|_| s.to_owned())
}

/// `--hsts`.
fn parse_hsts(s: &str) -> Result<http::HeaderValue, String> {
    super::policy::check_hsts(s)
}

/// `--max-body-bytes`.
fn parse_body_bytes(s: &str) -> Result<super::policy::BodyLimit, String> {
    super::policy::parse_body_limit(s).map(super::policy::BodyLimit)
}

/// `--access-log`'s target.
fn parse_access_target(s: &str) -> Result<crate::access::Target, String> {
    s.parse()
}

/// `--access-log-format`, its error naming the field or brace at fault.
fn parse_access_format(s: &str) -> Result<crate::access::Format, String> {
    s.parse()
        .map_err(|e: crate::access::template::FormatError| e.to_string())
}

/// A boolean as hitch spells it, in any case: on/off, yes/no, y/n, true/false, t/f, 1/0.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "on" | "yes" | "y" | "true" | "t" | "1" => Ok(true),
        "off" | "no" | "n" | "false" | "f" | "0" => Ok(false),
        _ => Err(format!(
            "{s:?} is not on or off (also yes/no, y/n, true/false, t/f, 1/0)"
        )),
    }
}

fn parse_log_level(s: &str) -> Result<tracing::level_filters::LevelFilter, String> {
    use tracing::level_filters::LevelFilter as L;
    Ok(match s.to_ascii_lowercase().as_str() {
        "0" | "off" => L::OFF,
        "1" | "error" | "err" => L::ERROR,
        "warn" | "warning" => L::WARN,
        "2" | "info" => L::INFO,
        "3" | "debug" => L::DEBUG,
        "4" | "trace" => L::TRACE,
        _ => {
            return Err(format!(
                "{s:?} is not a log level (0, 1, 2, off, error, warn, info, debug, trace)"
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn hitch_command_line_parses() {
        let cli = Cli::try_parse_from([
            "shuck",
            "-f",
            "[*]:443",
            "-f",
            "[::1]:443",
            "-b",
            "[127.0.0.1]:8000",
            "-n",
            "2",
            "-B",
            "200",
            "-c",
            "EECDH+AESGCM",
            "-O",
            "--sni-nomatch-abort=on",
            "-k",
            "60",
            "-L",
            "1",
            "--alpn-protos",
            "h2,http/1.1",
            "a.pem",
            "b.pem",
        ])
        .unwrap();
        assert_eq!(cli.frontends, ["[*]:443", "[::1]:443"]);
        assert!(cli.prefer_server_ciphers && cli.sni_nomatch_abort && !cli.quiet);
        assert_eq!(cli.pem_files.len(), 2);
        assert_eq!(cli.log_level, tracing::level_filters::LevelFilter::ERROR);
    }

    #[test]
    fn on_off() {
        let cli = Cli::try_parse_from(["shuck", "--prefer-server-ciphers=off"]).unwrap();
        assert!(!cli.prefer_server_ciphers);
        assert!(Cli::try_parse_from(["shuck", "--quiet=maybe"]).is_err());
    }
}
