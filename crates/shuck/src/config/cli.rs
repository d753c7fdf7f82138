//! The command line: every option is defined once, here, with its help text. The flag names,
//! short letters and value syntax follow hitch's `--help`, so a hitch command line keeps
//! working; the README's option table is checked against this definition by a test.

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
    /// Read settings from FILE (hitch.conf syntax: key = value, frontend = { ... } blocks);
    /// flags given on the command line win over the file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Check the configuration, certificates and keys, print the result and exit: 0 when
    /// good, 2 when not (as hitch -t and nginx -t).
    #[arg(short = 't', long)]
    pub test: bool,

    /// PEM files, each holding a certificate chain and its private key (RSA, ECDSA or
    /// Ed25519; PKCS#1, PKCS#8 or SEC1). As in hitch, the last one listed is the default
    /// certificate. With none, shuck generates a self-signed certificate for localhost.
    #[arg(value_name = "PEM")]
    pub pem_files: Vec<PathBuf>,

    /// A certificate with options, repeatable, listed before the positional PEM files (a
    /// configuration file's pem-file keys and blocks become these): CERT[,private-key=KEY]
    /// [,ocsp-resp-file=DER][,ocsp-verify-staple=on|off][,client-verify=MODE]
    /// [,client-verify-ca=FILE].
    #[arg(long, value_name = "CERT[,KEY=VALUE...]")]
    pub pem_file: Vec<String>,

    /// Load every regular file of DIR (in name order) after the positional PEM files; files
    /// that hold no certificate are skipped with a warning.
    #[arg(long, value_name = "DIR")]
    pub pem_dir: Option<PathBuf>,

    /// With --pem-dir, load only the files whose names match GLOB (e.g. "*.pem").
    #[arg(long, value_name = "GLOB")]
    pub pem_dir_glob: Option<String>,

    /// Frontend listen endpoint, repeatable: [HOST]:PORT, [*]:PORT, [::1]:PORT or HOST:PORT;
    /// [HOST]:PORT+cert.pem[+more.pem] gives the frontend its own certificates.
    #[arg(
        short = 'f',
        long = "frontend",
        value_name = "[HOST]:PORT",
        default_value = "[*]:8443"
    )]
    pub frontends: Vec<String>,

    /// Backend server, repeatable: [HOST]:PORT or /PATH (a UNIX socket, as hitch 1.7),
    /// then [,maxconn=N][,weight=W]. Connections are spread by weighted round robin over
    /// servers that are up. With none, shuck starts a small built-in HTTP origin on a
    /// loopback port and forwards to it.
    #[arg(
        short = 'b',
        long = "backend",
        value_name = "[HOST]:PORT|/PATH[,maxconn=N][,weight=W]"
    )]
    pub backends: Vec<String>,

    /// A named backend, repeatable: name=NAME;server=ADDRESS[,maxconn=N][,weight=W] (server
    /// repeatable, as -b takes it), then [;write-proxy-v1|write-proxy-v2|write-ip|proxy-proxy=on]
    /// [;connect-timeout=T] [;tls=on[;verify=required|none][;ca-file=F][;sni=NAME][;cert=F]
    /// [;alpn=P,...]] (TLS to the backend). In the configuration file: a backend = { ... }
    /// block. Chosen by a frontend's backend=NAME or by routes (--route), and -b stays the
    /// default backend ("default").
    #[arg(long = "named-backend", value_name = "name=NAME;server=ADDRESS;...")]
    pub named_backends: Vec<String>,

    /// A route, repeatable: sni=NAME;backend=B (by the handshake's server name; *.NAME for
    /// subdomains) or, with --http, host=NAME[;path-prefix=/P];backend=B (per request, by
    /// Host or :authority). Exact names first, then the longest wildcard, then the longest
    /// path prefix; else the frontend's backend, else the default. In the configuration
    /// file: a route = { ... } block.
    #[arg(long = "route", value_name = "sni=NAME;backend=B")]
    pub routes: Vec<String>,

    /// Resolve backend names again every SECS (0: only at start); new connections go to
    /// the new addresses, live ones stay.
    #[arg(short = 'R', long, value_name = "SECS", default_value_t = 0)]
    pub backend_refresh: u64,

    /// Most connections waiting for a server at its maxconn (per server); beyond, new ones
    /// are closed at once.
    #[arg(long, value_name = "NUM", default_value_t = 1024)]
    pub queue_size: usize,

    /// Longest wait for a server at its maxconn; then the connection is closed (in --http
    /// mode, after a 503).
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = parse_duration)]
    pub queue_timeout: Duration,

    /// How long a server that refused or timed out stays marked down.
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = parse_duration)]
    pub backend_retry_after: Duration,

    /// Other servers a connection (or an HTTP request not yet sent) tries after a connect
    /// to one fails or is refused, before it is answered 503 or closed.
    #[arg(long, value_name = "NUM", default_value_t = 3)]
    pub retries: usize,

    /// Write a PROXY protocol v1 line (text) before the client's bytes.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub write_proxy_v1: bool,

    /// Write a PROXY protocol v2 header (binary, with ALPN, authority and SSL TLVs).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub write_proxy_v2: bool,

    /// As in hitch: the same as --write-proxy-v2 (stud users wanting v1: --write-proxy-v1).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub write_proxy: bool,

    /// With --write-proxy-v2, send the server name the client asked for (SNI) in the
    /// authority TLV (as hitch, on by default).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "on", default_missing_value = "on", value_parser = parse_on_off)]
    pub proxy_authority: bool,

    /// Write the client's IP address before its bytes as stud and hitch do: one octet of
    /// address family (2 for IPv4, 10 for IPv6), then 4 or 16 bytes in network order.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub write_ip: bool,

    /// Expect a PROXY v1 or v2 header from an L4 balancer in front, before TLS; the client
    /// it names is the one passed on (the header itself is passed on when no --write-*
    /// flag is given).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub proxy_proxy: bool,

    /// HTTP mode: on every request, remove the client's X-Forwarded-For, X-Forwarded-Proto
    /// and Forwarded headers and add X-Forwarded-For and X-Forwarded-Proto: https.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub http: bool,

    /// Largest request head accepted in --http mode; larger ones get 400.
    #[arg(long, value_name = "BYTES", default_value_t = 16 * 1024)]
    pub max_header_bytes: usize,

    /// In --http mode, time a whole request head gets from its first byte; a slower one
    /// is answered 408 and closed (HAProxy's timeout http-request).
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_duration)]
    pub http_request_timeout: Duration,

    /// In --http mode, longest wait for the next request once a response is done; then the
    /// connection closes (HAProxy's timeout http-keep-alive).
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_duration)]
    pub http_keepalive_timeout: Duration,

    /// In --http mode, longest time an exchange under way may make no progress while shuck
    /// waits on the client: a request body that stops arriving, an answer the client does
    /// not take (HTTP/2: its window shut). HTTP/2 resets that stream and closes its backend
    /// connection; HTTP/1.1 closes the connection (408 if no answer had begun). A backend
    /// slow to answer is left to --idle-timeout.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_duration)]
    pub http_stall_timeout: Duration,

    /// In --http mode over HTTP/2: most backend connections one client connection may have
    /// open at once; its other streams wait for one of them, in order.
    #[arg(long, value_name = "NUM", default_value_t = 16)]
    pub http_max_backend_conns: u32,

    /// In --http mode over HTTP/2: most streams a client may have open at once on one
    /// connection (SETTINGS_MAX_CONCURRENT_STREAMS; HAProxy's
    /// tune.h2.max-concurrent-streams).
    #[arg(long, value_name = "NUM", default_value_t = 100)]
    pub h2_max_concurrent_streams: u32,

    /// In --http mode over HTTP/2: most streams one connection may reset in a second; past
    /// it the connection is closed with GOAWAY ENHANCE_YOUR_CALM (rapid reset,
    /// CVE-2023-44487).
    #[arg(long, value_name = "NUM", default_value_t = 100)]
    pub h2_max_resets: u32,

    /// In --http mode over HTTP/2: the flow-control window each stream starts with
    /// (SETTINGS_INITIAL_WINDOW_SIZE); a connection's window is 16 times it. It bounds
    /// what a client may send ahead of a slow backend.
    #[arg(long, value_name = "BYTES", default_value_t = 65535)]
    pub h2_initial_window_size: u32,

    /// In --http mode, also serve HTTP/3 over QUIC on every frontend, on UDP at the same
    /// address and port (HAProxy's quic4@, nginx's listen ... quic); a frontend's own
    /// `quic` setting overrides it. Its HTTP/1.1 and HTTP/2 answers then announce it
    /// (Alt-Svc). Needs TLS 1.3 on the frontend; open the UDP port in the firewall.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub quic: bool,

    /// With --quic: how long clients may remember that HTTP/3 is served (Alt-Svc's ma,
    /// seconds); 0 leaves Alt-Svc out. A backend's own Alt-Svc is passed as it is.
    #[arg(long, value_name = "SECS", default_value_t = 86_400)]
    pub alt_svc_max_age: u64,

    /// With --quic: when a new client must first prove its address with a Retry (a round
    /// trip more, no state kept before it): always, never, or a number: when more new
    /// connections than that arrive in a second at one worker. Retry tokens are sealed
    /// under the farm key (--shared-cache-key) when there is one, so any host takes them.
    #[arg(long, value_name = "always|never|N", default_value = "1000",
          value_parser = crate::config::values::parse_quic_retry)]
    pub quic_retry: crate::config::QuicRetry,

    /// With --quic: accept 0-RTT (early data) from clients resuming a session: their first
    /// requests arrive a round trip sooner. Only safe methods without a body are passed on
    /// early, with `Early-Data: 1` (RFC 8470); others wait for the handshake, and a backend's
    /// `425 Too Early` is retried once it completes. A ticket's early data is taken once
    /// (farm-wide with --shared-store). Needs the session cache; not on frontends that
    /// verify client certificates.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub quic_early_data: bool,

    /// With --quic: probe each connection's path for packets larger than 1200 bytes (up
    /// to 1452, DPLPMTUD, RFC 8899) once it has sent 16 KiB. Bulk transfers then take fewer
    /// packets; the search costs a probe packet, 1452 bytes first, and a binary search below
    /// only if it is lost; shorter connections send no probe (off: every packet stays at
    /// 1200 bytes).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "on", default_missing_value = "on", value_parser = parse_on_off)]
    pub quic_mtu_discovery: bool,

    /// With --quic: follow a client whose address changes (a NAT rebinding, a phone moving
    /// from Wi-Fi to mobile data) once the new address answers a PATH_CHALLENGE; until
    /// then shuck sends it at most three times what it received from it (RFC 9000 §8.2,
    /// §9.3). Off: a connection's packets from any other address are dropped.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "on", default_missing_value = "on", value_parser = parse_on_off)]
    pub quic_migration: bool,

    /// With --quic: most request streams a client may have open at once on one QUIC
    /// connection (its initial_max_streams_bidi).
    #[arg(long, value_name = "NUM", default_value_t = 100)]
    pub h3_max_concurrent_streams: u32,

    /// Number of workers, each a thread with its own listening socket (default: one per core).
    #[arg(short = 'n', long, value_name = "NUM")]
    pub workers: Option<usize>,

    /// Listen backlog size.
    #[arg(short = 'B', long, value_name = "NUM", default_value_t = 1024)]
    pub backlog: u32,

    /// Accept TCP Fast Open on the listening sockets (data in the SYN saves a round trip
    /// for clients that had a cookie); the kernel's net.ipv4.tcp_fastopen must allow it
    /// for servers (bit 2).
    #[arg(long, visible_alias = "enable-tcp-fastopen", value_name = "on|off", num_args = 0..=1,
          require_equals = true, default_value = "off", default_missing_value = "on",
          value_parser = parse_on_off)]
    pub tcp_fastopen: bool,

    /// Accept a connection only once its first bytes (the ClientHello) have arrived
    /// (TCP_DEFER_ACCEPT; HAProxy's defer-accept): a client that connects and sends nothing
    /// costs no accept, no wake-up and no handshake deadline, and the kernel gives it up
    /// after about --ssl-handshake-timeout.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub defer_accept: bool,

    /// TLS protocols to accept, separated by spaces or commas: TLSv1.2, TLSv1.3 (SSLv3,
    /// TLSv1.0 and TLSv1.1 beside them are dropped with a warning).
    #[arg(long, value_name = "LIST", default_value = "TLSv1.2 TLSv1.3")]
    pub tls_protos: String,

    /// hitch's deprecated switch for TLSv1.0 to TLSv1.3: shuck serves TLSv1.2 and TLSv1.3
    /// of them. Cannot override tls-protos from a configuration file.
    #[arg(long, conflicts_with = "ssl")]
    pub tls: bool,

    /// hitch's deprecated switch for SSLv3 to TLSv1.3: shuck serves TLSv1.2 and TLSv1.3 of
    /// them. Cannot override tls-protos from a configuration file.
    #[arg(long)]
    pub ssl: bool,

    /// TLS 1.2 cipher list in OpenSSL syntax (names such as ECDHE-RSA-AES128-GCM-SHA256, or
    /// expressions such as EECDH+AESGCM, separated by ':').
    #[arg(short = 'c', long, value_name = "SUITE")]
    pub ciphers: Option<String>,

    /// TLS 1.3 cipher suites, separated by ':' (e.g. TLS_AES_128_GCM_SHA256).
    #[arg(long, value_name = "SUITES")]
    pub ciphersuites: Option<String>,

    /// Key exchange groups in order of preference, separated by ':' or ','
    /// (X25519, P-256, P-384, X25519MLKEM768).
    #[arg(long, visible_alias = "groups", value_name = "LIST")]
    pub ecdh_curve: Option<String>,

    /// ALPN protocols to offer, separated by commas (e.g. h2,http/1.1).
    #[arg(long, value_name = "LIST")]
    pub alpn_protos: Option<String>,

    /// Choose the cipher suite by the server's order, not the client's.
    #[arg(short = 'O', long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub prefer_server_ciphers: bool,

    /// Abort the handshake with an unrecognized_name alert when the client asks for a
    /// server name that no certificate serves.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub sni_nomatch_abort: bool,

    /// Ask clients for a certificate: none, optional (a bad one is refused, none is
    /// fine) or required.
    #[arg(long, value_name = "none|optional|required", default_value = "none",
          value_parser = crate::tls::client_auth::Mode::parse)]
    pub client_verify: crate::tls::client_auth::Mode,

    /// PEM file of the CAs that client certificates must chain to.
    #[arg(long, value_name = "FILE")]
    pub client_verify_ca: Option<PathBuf>,

    /// Send the verified client certificate's subject to the backend in the PROXY v2 SSL
    /// TLV (its common name, with the client-certificate flags), as hitch.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub proxy_client_cert: bool,

    /// In --http mode, send the verified client certificate's subject in this header (the
    /// client's own copies are removed), e.g. X-SSL-Client-Subject.
    #[arg(long, value_name = "NAME")]
    pub client_cert_header: Option<String>,

    /// Staple this OCSP response (DER) with certificate PEM, repeatable: PEM=DER. The
    /// response is checked first (signature by the issuer in PEM's chain, certificate,
    /// status, dates); one that fails is not stapled, and the log says why.
    #[arg(long, value_name = "PEM=DER")]
    pub ocsp_resp_file: Vec<String>,

    /// Fetch OCSP responses from each certificate's responder (its AIA URL), cache them
    /// in DIR, staple them, and refresh them before they expire.
    #[arg(long, value_name = "DIR")]
    pub ocsp_dir: Option<PathBuf>,

    /// Longest time between two fetches of a certificate's OCSP response.
    #[arg(long, value_name = "SECS", default_value = "1800", value_parser = parse_duration)]
    pub ocsp_refresh_interval: Duration,

    /// Time to connect to an OCSP responder.
    #[arg(long, value_name = "SECS", default_value = "4", value_parser = parse_duration)]
    pub ocsp_connect_tmo: Duration,

    /// Time for an OCSP responder's whole answer.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_duration)]
    pub ocsp_resp_tmo: Duration,

    /// An OCSP response given by file that does not verify is an error (as hitch), and a
    /// responder the issuer delegated to must chain to a trusted root (--ocsp-verify-ca, else
    /// the system's store: SSL_CERT_FILE, SSL_CERT_DIR, the distribution's bundle). Off,
    /// shuck still checks every response and staples none that fails, with a warning.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub ocsp_verify_staple: bool,

    /// With --ocsp-verify-staple: the CA certificates (PEM) an OCSP responder's certificate
    /// must chain to, instead of the system's trust store.
    #[arg(long, value_name = "FILE")]
    pub ocsp_verify_ca: Option<PathBuf>,

    /// Session cache size in sessions, shared by all workers (TLS 1.2 session IDs and TLS 1.3
    /// stateful tickets); 0 disables it.
    #[arg(
        short = 'C',
        long,
        visible_alias = "shared-cache",
        value_name = "NUM",
        default_value_t = 20_000
    )]
    pub session_cache: usize,

    /// Lifetime of a session, in the cache and in tickets.
    #[arg(long, value_name = "SECS", default_value = "300", value_parser = parse_duration)]
    pub session_timeout: Duration,

    /// Issue stateless session tickets (TLS 1.2 RFC 5077 and TLS 1.3).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "on", default_missing_value = "on", value_parser = parse_on_off,
          overrides_with = "no_tickets")]
    pub tickets: bool,

    /// Do not issue stateless tickets (TLS 1.3 then uses stateful tickets in the cache).
    #[arg(long, overrides_with = "tickets")]
    pub no_tickets: bool,

    /// How often a new ticket key starts encrypting; each key decrypts for two periods.
    #[arg(long, value_name = "SECS", default_value = "3600", value_parser = parse_duration)]
    pub ticket_rotate: Duration,

    /// Ticket keys from FILE (HAProxy's tls-ticket-keys format: one base64 key of 48 or 80
    /// bytes per line; the second-to-last encrypts, all decrypt), re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub ticket_keys: Option<PathBuf>,

    /// Receive session replication datagrams on UDP [HOST]:PORT (and send from it). Use
    /// [*]:PORT (or the group address) to receive multicast.
    #[arg(short = 'U', long, value_name = "[HOST]:PORT")]
    pub shared_cache_listen: Option<String>,

    /// Send new sessions and ticket keys to this peer, repeatable: a host's [HOST]:PORT, or
    /// a multicast group's (IPv4 or IPv6). Needs --shared-cache-listen and -key.
    #[arg(short = 'P', long, value_name = "[HOST]:PORT")]
    pub shared_cache_peer: Vec<String>,

    /// Interface for multicast replication, with the multicast TTL (default 1).
    #[arg(short = 'M', long, value_name = "IFACE[,TTL]")]
    pub shared_cache_if: Option<String>,

    /// Pre-shared key sealing replication datagrams: a file holding base64 of 32 random
    /// bytes (head -c 32 /dev/urandom | base64). Required: replication never runs unsealed.
    #[arg(long, value_name = "FILE")]
    pub shared_cache_key: Option<PathBuf>,

    /// Replication datagrams older than this, or this far in the future, are dropped
    /// (bounds replay; hosts' clocks must agree within it).
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = parse_duration)]
    pub shared_cache_window: Duration,

    /// Keep sessions and the ticket key ring in Redis (or Valkey), shared by every host
    /// pointing at it: redis://[USER@]HOST:PORT[/DB], or rediss:// for TLS. Values are
    /// sealed under --shared-cache-key. Works with or without -U/-P.
    #[arg(long, value_name = "URL")]
    pub shared_store: Option<String>,

    /// CA certificates (PEM) that the rediss:// server's certificate must chain to (default:
    /// the system's roots).
    #[arg(long, value_name = "FILE")]
    pub shared_store_ca: Option<PathBuf>,

    /// The shared store's password, read from FILE (its first line), never from the
    /// command line.
    #[arg(long, value_name = "FILE")]
    pub shared_store_auth_file: Option<PathBuf>,

    /// Prefix of every key shuck writes in the shared store, so that farms can share one.
    #[arg(long, value_name = "PREFIX", default_value = "shuck:")]
    pub shared_store_prefix: String,

    /// The most a handshake waits for the shared store; past it (or on any error) the
    /// handshake goes on as a full one.
    #[arg(long, value_name = "SECS", default_value = "5ms", value_parser = parse_duration)]
    pub shared_store_timeout: Duration,

    /// Get and renew certificates from this ACME (RFC 8555) directory, e.g.
    /// https://acme-v02.api.letsencrypt.org/directory. Needs --acme-domain and
    /// --acme-agree-tos.
    #[arg(long, value_name = "URL")]
    pub acme_directory: Option<String>,

    /// One certificate for these names (comma-separated; the first names it). Repeat for
    /// more certificates. Chosen by SNI like any other certificate.
    #[arg(long, value_name = "NAMES")]
    pub acme_domain: Vec<String>,

    /// A contact for the ACME account (mailto:... or an address). Repeatable.
    #[arg(long, value_name = "URI")]
    pub acme_contact: Vec<String>,

    /// Agree to the ACME CA's terms of service (required to create an account).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub acme_agree_tos: bool,

    /// Where the ACME account key, certificates and keys are kept (directories 0700,
    /// keys 0600).
    #[arg(long, value_name = "DIR", default_value = "/var/lib/shuck/acme")]
    pub acme_state: PathBuf,

    /// How the CA checks the names: tls-alpn-01 (answered on the frontends, no port 80
    /// needed) or http-01 (answered on --acme-http-listen).
    #[arg(long, value_name = "TYPE", default_value = "tls-alpn-01")]
    pub acme_challenge: String,

    /// Listen for http-01 challenges on [HOST]:PORT (usually :80); every other request
    /// there is redirected to https with 301.
    #[arg(long, value_name = "[HOST]:PORT")]
    pub acme_http_listen: Option<String>,

    /// CA certificates (PEM) that the ACME server's own HTTPS certificate must chain to
    /// (default: the system's roots). For private and test CAs.
    #[arg(long, value_name = "FILE")]
    pub acme_ca_file: Option<PathBuf>,

    /// The key type of the certificates ordered: ecdsa-p256, ecdsa-p384, rsa-2048 or
    /// rsa-3072.
    #[arg(long, value_name = "TYPE", default_value = "ecdsa-p256")]
    pub acme_key_type: String,

    /// External account binding: the key identifier the CA gave.
    #[arg(long, value_name = "KID")]
    pub acme_eab_kid: Option<String>,

    /// External account binding: a file holding the HMAC key the CA gave (base64url).
    #[arg(long, value_name = "FILE")]
    pub acme_eab_hmac_key: Option<PathBuf>,

    /// Serve Prometheus metrics at http://ADDR:PORT/metrics. A bare PORT listens on
    /// 127.0.0.1 only.
    #[arg(long, value_name = "[ADDR]:PORT")]
    pub stats: Option<String>,

    /// Serve the admin API (HTTP/1.1 with JSON: status, reload, backends, certificates,
    /// tickets, sessions) on the UNIX socket PATH, mode 0600, answered by the master
    /// process; `shuck ctl` speaks to it.
    #[arg(long, value_name = "PATH")]
    pub admin_socket: Option<PathBuf>,

    /// Serve the admin API on TCP too, at [ADDR]:PORT (a bare PORT listens on 127.0.0.1
    /// only), to clients that send the bearer token of --admin-token-file.
    #[arg(long, value_name = "[ADDR]:PORT")]
    pub admin_listen: Option<String>,

    /// The bearer token the TCP admin API asks for: the first line of FILE, which only its
    /// owner may read (0600).
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,

    /// Keep the operator's server states (drain, maint, weight, set through the admin API)
    /// in FILE (0600), read at start: a restart or a binary upgrade keeps them, as
    /// HAProxy's server-state-file.
    #[arg(long, value_name = "FILE")]
    pub admin_state: Option<PathBuf>,

    /// Keep the certificates added through the admin API in DIR (NAME.pem each, 0600),
    /// served at every start and reload after the configuration's own.
    #[arg(long, value_name = "DIR")]
    pub admin_certs: Option<PathBuf>,

    /// Most client connections open at once over all workers (0: no limit). Beyond it new
    /// connections wait in the kernel's backlog instead of being accepted.
    #[arg(long, value_name = "NUM", default_value_t = 0)]
    pub max_conns: usize,

    /// Time a client has to complete the TLS handshake.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_duration)]
    pub ssl_handshake_timeout: Duration,

    /// Time to connect to the backend.
    #[arg(long, value_name = "SECS", default_value = "3", value_parser = parse_duration)]
    pub backend_connect_timeout: Duration,

    /// Close a connection after this long without a byte in either direction.
    #[arg(long, value_name = "SECS", default_value = "3600", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// TCP keepalive idle time on client sockets, in seconds (0: off).
    #[arg(short = 'k', long, value_name = "SECS", default_value_t = 3600)]
    pub keepalive: u64,

    /// On SIGTERM or SIGINT, how long live connections may take to finish.
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_duration)]
    pub drain_timeout: Duration,

    /// After binding the ports and reading the keys, run as this user (shuck must start as
    /// root). Reloads then read files as this user.
    #[arg(short = 'u', long, value_name = "USER")]
    pub user: Option<String>,

    /// Run as this group (default: the primary group of the user).
    #[arg(short = 'g', long, value_name = "GROUP")]
    pub group: Option<String>,

    /// Chroot into DIR after binding and reading keys (reloads then see paths inside DIR).
    #[arg(short = 'r', long, value_name = "DIR", value_parser = any_path)]
    pub chroot: Option<PathBuf>,

    /// Detach from the terminal once the ports are bound (log with --syslog or
    /// --log-filename).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub daemon: bool,

    /// Write the process id to FILE (removed at exit).
    #[arg(short = 'p', long, value_name = "FILE", value_parser = any_path)]
    pub pidfile: Option<PathBuf>,

    /// Log to syslog (/dev/log) instead of stderr.
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub syslog: bool,

    /// syslog facility (daemon, local0 … local7, user, ...).
    #[arg(long, value_name = "FACILITY", default_value = "daemon")]
    pub syslog_facility: String,

    /// Append log lines to FILE instead of stderr.
    #[arg(long, value_name = "FILE", value_parser = any_path)]
    pub log_filename: Option<PathBuf>,

    /// Log level: 0 (silence), 1 (errors), 2 (info) as in hitch, or a name: off, error,
    /// warn, info, debug, trace.
    #[arg(short = 'L', long, value_name = "LEVEL", default_value = "info", value_parser = parse_log_level)]
    pub log_level: tracing::level_filters::LevelFilter,

    /// How log lines are written: text (one line per event, as hitch) or json (one object per
    /// line: time, level, event and the event's fields, the lines of --log-connections too; for
    /// Loki or Elasticsearch pipelines).
    #[arg(long, value_name = "FORMAT", value_enum, default_value = "text")]
    pub log_format: crate::system::log::LogFormat,

    /// Log only errors (as -L error).
    #[arg(short = 'q', long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub quiet: bool,

    /// Log one line per connection when it closes (client, backend, bytes, duration).
    #[arg(long, value_name = "on|off", num_args = 0..=1, require_equals = true,
          default_value = "off", default_missing_value = "on", value_parser = parse_on_off)]
    pub log_connections: bool,

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
