//! The admin API's sockets as the master's one thread serves them: non-blocking listeners
//! and connections, polled with the master's other descriptors, each connection one
//! request and one answer (`Connection: close`): its head within [`HEAD_DEADLINE`], the
//! whole exchange within [`DEADLINE`]. Each listener has its own budget of connections, so
//! that TCP peers, who are not yet known to hold the token, never take the UNIX socket's.
//!
//! Who may ask: on the UNIX socket (mode 0600), a peer running as root or as the master's
//! user (`SO_PEERCRED`), so that a socket made readable by mistake still refuses others; on
//! TCP, a request carrying the token (`Authorization: Bearer …`).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::request::{self, Request};
use crate::config::admin::AdminSettings;

/// Time a client has to send its request and take the answer.
pub const DEADLINE: Duration = Duration::from_secs(10);
/// Time a client has to send its request's head (a request is a few hundred bytes).
pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// Most connections open at once on each listener; more are closed as they come.
const MAX_CONNS: usize = 64;

/// A request to answer: from whom, what.
#[derive(Debug)]
pub struct Incoming {
    /// The connection to answer on.
    pub conn: u64,
    /// Who asked, for the log (`uid 0 pid 42`, `127.0.0.1:5123`).
    pub peer: String,
    /// The request.
    pub req: Request,
}

#[derive(Debug)]
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Unix(s) => s.as_fd(),
            Stream::Tcp(s) => s.as_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(b),
            Stream::Tcp(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(b),
            Stream::Tcp(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    Reading,
    /// Handed to the master; waiting for its answer.
    Busy,
    Writing,
}

#[derive(Debug)]
struct Conn {
    id: u64,
    stream: Stream,
    peer: String,
    /// A TCP peer: its request must carry the token.
    needs_token: bool,
    /// A UNIX peer that is neither root nor the master's user.
    forbidden: bool,
    buf: Vec<u8>,
    out: Vec<u8>,
    written: usize,
    state: State,
    deadline: Instant,
    /// When it was accepted: the whole exchange's deadline runs from there.
    accepted: Instant,
    /// Its head was read and let through: the body may take the rest of [`DEADLINE`].
    head_seen: bool,
}

/// The admin API's listeners and open connections.
#[derive(Debug)]
pub struct AdminServer {
    unix: Option<(UnixListener, PathBuf, u64)>,
    tcp: Option<(TcpListener, String)>,
    conns: Vec<Conn>,
    next: u64,
    /// This process removes the path when done (not a forked child).
    owns_path: bool,
}

/// Why the admin API cannot listen.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Another process answers on the socket.
    #[error("--admin-socket {}: another process is listening on it", .0.display())]
    InUse(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("--admin-socket {}: exists and is not a socket", .0.display())]
    NotSocket(PathBuf),
    /// The system refused.
    #[error("{what} {where_}: {source}")]
    Io {
        /// The flag.
        what: &'static str,
        /// The path or address.
        where_: String,
        /// The system's reason.
        source: io::Error,
    },
}

impl AdminServer {
    /// Binds what `settings` names. `takeover`: a binary upgrade, whose previous master
    /// still answers on the path; the path is taken from it.
    pub fn bind(settings: &AdminSettings, takeover: bool) -> Result<AdminServer, BindError> {
        let unix = match &settings.socket {
            Some(p) => Some(bind_unix(p, takeover)?),
            None => None,
        };
        let tcp = match &settings.listen {
            Some((addr, token)) => {
                let l = TcpListener::bind(addr).map_err(|source| BindError::Io {
                    what: "--admin-listen",
                    where_: addr.to_string(),
                    source,
                })?;
                l.set_nonblocking(true).map_err(|source| BindError::Io {
                    what: "--admin-listen",
                    where_: addr.to_string(),
                    source,
                })?;
                Some((l, token.clone()))
            }
            None => None,
        };
        Ok(AdminServer {
            unix,
            tcp,
            conns: Vec::new(),
            next: 1,
            owns_path: true,
        })
    }

    /// Closes the sockets in a forked child, leaving the path to the master.
    pub fn close_in_child(mut self) {
        self.owns_path = false;
    }

    /// The TCP address it listens on, when it does.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// Every descriptor to poll: listeners for reading, connections for what they wait.
    pub fn fds(&self) -> Vec<(BorrowedFd<'_>, bool)> {
        let mut out = Vec::new();
        if let Some((l, _, _)) = &self.unix {
            out.push((l.as_fd(), false));
        }
        if let Some((l, _)) = &self.tcp {
            out.push((l.as_fd(), false));
        }
        for c in &self.conns {
            match c.state {
                State::Reading => out.push((c.stream.fd(), false)),
                State::Writing => out.push((c.stream.fd(), true)),
                State::Busy => {}
            }
        }
        out
    }

    /// Accepts, reads and writes what can be without blocking; closes what is done or
    /// late. Returns the requests read whole, to answer with [`AdminServer::answer`].
    pub fn service(&mut self) -> Vec<Incoming> {
        self.accept();
        let now = Instant::now();
        let mut ready = Vec::new();
        let mut refusals = Vec::new();
        for c in &mut self.conns {
            match c.state {
                State::Reading => match read_request(c, self.tcp.as_ref()) {
                    Ok(Some(req)) => {
                        c.state = State::Busy;
                        ready.push(Incoming {
                            conn: c.id,
                            peer: c.peer.clone(),
                            req,
                        });
                    }
                    Err(Some(Refusal::Peer(head, status, reason))) => {
                        refusals.push((c.id, head, status, reason));
                    }
                    Ok(None) => {}
                    Err(Some(Refusal::Request(status, reason))) => {
                        log(&c.peer, "-", "-", status, &reason);
                        c.respond(status, &error_body(&reason));
                    }
                    Err(None) => c.deadline = now, // gone: closed below
                },
                State::Writing => {
                    let _ = c.flush();
                }
                State::Busy => {}
            }
        }
        for (id, head, status, reason) in refusals {
            log(
                self.peer_of(id),
                &head.method,
                &head.target,
                status,
                &reason,
            );
            self.answer(id, status, &error_body(&reason));
        }
        self.conns.retain(|c| {
            let done = c.state == State::Writing && c.written == c.out.len();
            // Busy ones wait for the master, which answers within its own deadline.
            let late = c.state != State::Busy && now >= c.deadline;
            !(done || late)
        });
        ready
    }

    fn peer_of(&self, id: u64) -> &str {
        self.conns
            .iter()
            .find(|c| c.id == id)
            .map_or("-", |c| c.peer.as_str())
    }

    /// Answers the request of `conn` (gone already: nothing to do).
    pub fn answer(&mut self, conn: u64, status: u16, body: &serde_json::Value) {
        if let Some(c) = self.conns.iter_mut().find(|c| c.id == conn) {
            c.respond(status, body);
            if c.flush().is_err() || c.written == c.out.len() {
                self.conns.retain(|c| c.id != conn);
            }
        }
    }

    fn accept(&mut self) {
        let own_uid = nix::unistd::getuid().as_raw();
        let mut fresh = Vec::new();
        if let Some((l, _, _)) = &self.unix {
            while let Ok((s, _)) = l.accept() {
                let (peer, forbidden) = match rustix::net::sockopt::socket_peercred(&s) {
                    Ok(c) => {
                        let uid = c.uid.as_raw();
                        (
                            format!("uid {uid} pid {}", c.pid.as_raw_nonzero()),
                            uid != 0 && uid != own_uid,
                        )
                    }
                    Err(_) => ("uid ?".to_owned(), true),
                };
                fresh.push((Stream::Unix(s), peer, false, forbidden));
            }
        }
        if let Some((l, _)) = &self.tcp {
            while let Ok((s, addr)) = l.accept() {
                let _ = s.set_nodelay(true);
                fresh.push((Stream::Tcp(s), addr.to_string(), true, false));
            }
        }
        for (stream, peer, needs_token, forbidden) in fresh {
            self.add(stream, peer, needs_token, forbidden);
        }
    }

    fn add(&mut self, stream: Stream, peer: String, needs_token: bool, forbidden: bool) {
        let nonblocking = match &stream {
            Stream::Unix(s) => s.set_nonblocking(true),
            Stream::Tcp(s) => s.set_nonblocking(true),
        };
        // The listener's own budget: a flood of TCP peers leaves the UNIX socket's whole.
        let same_listener = self
            .conns
            .iter()
            .filter(|c| c.needs_token == needs_token)
            .count();
        if same_listener >= MAX_CONNS || nonblocking.is_err() {
            return; // dropped: closed
        }
        let id = self.next;
        self.next += 1;
        self.conns.push(Conn {
            id,
            stream,
            peer,
            needs_token,
            forbidden,
            buf: Vec::new(),
            out: Vec::new(),
            written: 0,
            state: State::Reading,
            deadline: Instant::now() + HEAD_DEADLINE,
            accepted: Instant::now(),
            head_seen: false,
        });
    }
}

impl Drop for AdminServer {
    /// Removes the socket's path, unless another process (a new master) bound it since.
    fn drop(&mut self) {
        if let Some((_, path, ino)) = self.unix.as_ref().filter(|_| self.owns_path) {
            if std::fs::metadata(path).is_ok_and(|m| m.ino() == *ino) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

impl Conn {
    /// Why a request whose head carries `bearer` is refused before its body is read (401,
    /// 403), if it is.
    fn refusal(
        &self,
        bearer: Option<&str>,
        tcp: Option<&(TcpListener, String)>,
    ) -> Option<(u16, String)> {
        if self.forbidden {
            return Some((
                403,
                "only root and the master's user may use the admin API".into(),
            ));
        }
        if self.needs_token {
            let token = tcp.map(|(_, t)| t.as_str()).unwrap_or("");
            let given = bearer.unwrap_or("");
            if token.is_empty() || !same(given.as_bytes(), token.as_bytes()) {
                return Some((401, "a valid bearer token is required".into()));
            }
        }
        None
    }

    fn respond(&mut self, status: u16, body: &serde_json::Value) {
        let mut text = serde_json::to_vec_pretty(body).unwrap_or_default();
        text.push(b'\n');
        let mut out = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
            reason(status),
            text.len()
        )
        .into_bytes();
        if status == 401 {
            out.extend_from_slice(b"WWW-Authenticate: Bearer realm=\"shuck\"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&text);
        self.out = out;
        self.written = 0;
        self.state = State::Writing;
        self.deadline = Instant::now() + DEADLINE;
    }

    fn flush(&mut self) -> io::Result<()> {
        while self.written < self.out.len() {
            match self.stream.write(&self.out[self.written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => {
                    self.written = self.out.len();
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

/// Why a connection is answered before its request is read whole.
enum Refusal {
    /// The request cannot be read (4xx, why).
    Request(u16, String),
    /// The peer may not ask (401, 403): known as soon as its head is read.
    Peer(request::Head, u16, String),
}

/// Reads what came; a whole request, nothing yet, a refusal or `None` for a peer gone.
/// The peer is judged as soon as the head is read: a request without the token is
/// answered 401 without waiting for (or reading) its body.
fn read_request(
    c: &mut Conn,
    tcp: Option<&(TcpListener, String)>,
) -> Result<Option<Request>, Option<Refusal>> {
    let mut chunk = [0u8; 8192];
    loop {
        match c.stream.read(&mut chunk) {
            Ok(0) => return Err(None),
            Ok(n) => {
                c.buf.extend_from_slice(&chunk[..n]);
                if c.buf.len() > request::MAX_HEAD + request::MAX_BODY {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return Err(None),
        }
    }
    let bad = |e: request::RequestError| Some(Refusal::Request(e.status(), e.to_string()));
    if !c.head_seen {
        let Some(head) = request::head(&c.buf).map_err(bad)? else {
            return Ok(None);
        };
        if let Some((status, reason)) = c.refusal(head.bearer.as_deref(), tcp) {
            return Err(Some(Refusal::Peer(head, status, reason)));
        }
        c.head_seen = true;
        c.deadline = c.accepted + DEADLINE;
    }
    request::parse(&c.buf).map_err(bad)
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `{"error": reason}`.
pub fn error_body(reason: &str) -> serde_json::Value {
    serde_json::json!({ "error": reason })
}

/// One line per request: the JSON event `admin_request`.
pub fn log_request(peer: &str, req: &Request, status: u16, detail: &str) {
    log(peer, &req.method, &req.path, status, detail);
}

fn log(peer: &str, method: &str, path: &str, status: u16, detail: &str) {
    // One level for all: an operator's refused request is an answer, not a fault of shuck.
    tracing::info!(
        name: "admin_request",
        peer = %peer,
        method = %method,
        path = %path,
        status = status,
        detail = %detail,
        "admin API: {method} {path} from {peer}: {status}{}{detail}",
        if detail.is_empty() { "" } else { " " },
    );
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

/// Binds the UNIX socket at `path`, mode 0600: a stale socket left by a process that
/// ended is replaced, a live one refused (unless `takeover`).
fn bind_unix(path: &Path, takeover: bool) -> Result<(UnixListener, PathBuf, u64), BindError> {
    let io = |source| BindError::Io {
        what: "--admin-socket",
        where_: path.display().to_string(),
        source,
    };
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(BindError::NotSocket(path.to_owned()));
        }
        if !takeover && UnixStream::connect(path).is_ok() {
            return Err(BindError::InUse(path.to_owned()));
        }
        std::fs::remove_file(path).map_err(io)?;
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .create(dir)
                .map_err(io)?;
        }
    }
    // No moment where others could connect: umask first, then chmod to be sure.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let l = bound.map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    l.set_nonblocking(true).map_err(io)?;
    let ino = std::fs::metadata(path).map_err(io)?.ino();
    Ok((l, path.to_owned(), ino))
}
