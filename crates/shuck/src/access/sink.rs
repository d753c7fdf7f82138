//! Where lines go (`--access-log`): stderr, a file (opened by the master, as root, before
//! the worker gives up its privileges; opened again on SIGUSR1 and at every reload, as
//! nginx's `-s reopen`), or syslog (RFC 5424 datagrams to `/dev/log`, another socket, or to
//! `udp://HOST:PORT`, as HAProxy sends them). One writer thread per process writes what the
//! worker threads hand it; it alone ever waits on the sink.

use std::fs::File;
use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Shared;

/// Where `--access-log` writes, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `stderr`.
    Stderr,
    /// A file, appended to.
    File(PathBuf),
    /// `fifo:PATH`: a named pipe a log reader holds open (asked for by name: a FIFO at a
    /// file's path is refused, as opening it could wait for a reader for ever).
    Fifo(PathBuf),
    /// `syslog` (`/dev/log`) or `unix:PATH`: a syslog's datagram socket.
    Unix(PathBuf),
    /// `udp://HOST:PORT`: a syslog server.
    Udp(SocketAddr),
}

impl std::fmt::Display for Target {
    /// As `--access-log` takes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Stderr => f.write_str("stderr"),
            Target::File(p) => write!(f, "{}", p.display()),
            Target::Fifo(p) => write!(f, "fifo:{}", p.display()),
            Target::Unix(p) if p == Path::new(DEV_LOG) => f.write_str("syslog"),
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
            Target::Udp(a) => write!(f, "udp://{a}"),
        }
    }
}

impl std::str::FromStr for Target {
    type Err = String;

    /// `stderr`, `syslog`, `unix:PATH`, `udp://HOST:PORT`, `fifo:PATH`, or a file's path.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" => Err(
                "an empty target: give stderr, syslog, unix:PATH, udp://HOST:PORT or a file"
                    .into(),
            ),
            "stderr" => Ok(Target::Stderr),
            "syslog" => Ok(Target::Unix(PathBuf::from(DEV_LOG))),
            "unix:" => Err("unix: needs the syslog socket's path (unix:/dev/log)".into()),
            _ if s.starts_with("unix:") => Ok(Target::Unix(PathBuf::from(&s[5..]))),
            "fifo:" => Err("fifo: needs the named pipe's path (fifo:/run/shuck/log)".into()),
            _ if s.starts_with("fifo:") => Ok(Target::Fifo(PathBuf::from(&s[5..]))),
            _ => match s.strip_prefix("udp://") {
                Some(hp) => hp
                    .to_socket_addrs()
                    .map_err(|e| format!("{s}: {e} (udp://HOST:PORT)"))?
                    .next()
                    .map(Target::Udp)
                    .ok_or_else(|| format!("{s}: no address")),
                None if s.contains("://") => Err(format!(
                    "{s}: only udp:// is a network target (or give stderr, syslog, unix:PATH, a file)"
                )),
                None => Ok(Target::File(PathBuf::from(s))),
            },
        }
    }
}

/// The system's syslog socket, `syslog`'s target.
const DEV_LOG: &str = "/dev/log";

/// A target made ready to write to.
#[derive(Debug)]
pub enum Opened {
    /// stderr.
    Stderr,
    /// The file, opened to append.
    File(File),
    /// Datagrams to a syslog.
    Syslog(Syslog),
}

/// A syslog reached by datagrams, each line one RFC 5424 message.
#[derive(Debug)]
pub struct Syslog {
    to: SyslogTo,
    /// `<PRI>` for the facility, at severity info.
    pri: u8,
    /// This host's name and this process's ID, the header's HOSTNAME and PROCID.
    host: String,
    pid: u32,
}

#[derive(Debug)]
enum SyslogTo {
    /// A datagram socket (`/dev/log`), connected when it is there (looked for again at
    /// most once a second).
    Unix(PathBuf, Option<UnixDatagram>, Option<Instant>),
    Udp(UdpSocket, SocketAddr),
}

/// Opens `target`: a file to append to (created 0644, never through a link), a socket for
/// syslog (facility `facility`, `--syslog-facility`'s code).
pub fn open(target: &Target, facility: u8) -> io::Result<Opened> {
    let syslog = |to| Syslog {
        to,
        pri: facility * 8 + 6,
        host: nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "-".into()),
        pid: std::process::id(),
    };
    Ok(match target {
        Target::Stderr => Opened::Stderr,
        Target::File(p) => Opened::File(crate::system::files::open_log(p, false)?),
        Target::Fifo(p) => Opened::File(crate::system::files::open_log(p, true)?),
        Target::Unix(p) => Opened::Syslog(syslog(SyslogTo::Unix(p.clone(), None, None))),
        Target::Udp(a) => {
            let any: SocketAddr = if a.is_ipv4() {
                ([0, 0, 0, 0], 0).into()
            } else {
                ([0u16; 8], 0).into()
            };
            Opened::Syslog(syslog(SyslogTo::Udp(UdpSocket::bind(any)?, *a)))
        }
    })
}

/// What the worker threads hand the writer.
#[derive(Debug)]
pub(super) enum Item {
    /// A sink's lines, each ending in a newline: the first `.2` bytes of the buffer (the
    /// rest is room, given back with it), and how many lines.
    Lines(usize, Vec<u8>, usize, u64),
    /// Look for a new target (`Shared::reopen`): sent without waiting, so it may not come
    /// when the queue is full, and the target is looked for before every item anyway.
    Wake,
    /// Answered once everything before it is written.
    Flush(std::sync::mpsc::Sender<()>),
}

/// The writer thread's loop, over the sinks `to`: until every sender is gone.
pub(super) fn run(rx: Receiver<Item>, mut to: Vec<Opened>, shared: Arc<Shared>) {
    while let Ok(item) = rx.recv() {
        if let Ok(mut next) = shared.reopen.lock() {
            for (sink, o) in next.drain(..) {
                if let Some(t) = to.get_mut(sink) {
                    *t = o;
                }
            }
        }
        match item {
            Item::Lines(sink, bytes, used, lines) => {
                let Some(to) = to.get_mut(sink) else {
                    shared.dropped(lines, "no such sink");
                    continue;
                };
                if let Err(e) = write(to, bytes.get(..used).unwrap_or(&bytes)) {
                    shared.dropped(lines, &e.to_string());
                } else {
                    shared.written();
                }
                shared.give_back(bytes);
            }
            Item::Wake => {}
            Item::Flush(done) => {
                for t in &mut to {
                    if let Opened::File(f) = t {
                        let _ = f.flush();
                    }
                }
                let _ = done.send(());
            }
        }
    }
}

fn write(to: &mut Opened, bytes: &[u8]) -> io::Result<()> {
    match to {
        Opened::Stderr => io::stderr().lock().write_all(bytes),
        Opened::File(f) => f.write_all(bytes),
        Opened::Syslog(s) => s.send(bytes),
    }
}

impl Syslog {
    /// Each line as one datagram: `<PRI>1 TIMESTAMP HOST shuck PID access - LINE`.
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        // RFC 5424 §6.2.3: at most six digits of a second (RFC 3339 alone allows nine).
        let now = time::OffsetDateTime::now_utc();
        let stamp = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second(),
            now.microsecond()
        );
        let mut msg = Vec::with_capacity(256);
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            msg.clear();
            let _ = write!(
                msg,
                "<{}>1 {stamp} {} shuck {} access - ",
                self.pri, self.host, self.pid
            );
            msg.extend_from_slice(line);
            match &mut self.to {
                SyslogTo::Udp(sock, to) => {
                    sock.send_to(&msg, *to)?;
                }
                SyslogTo::Unix(path, sock, tried) => {
                    if sock.is_none() && tried.is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
                    {
                        *tried = Some(Instant::now());
                        let s = UnixDatagram::unbound()?;
                        // A syslog that stops reading costs lines, never a writer stuck.
                        if s.connect(&*path).is_ok() && s.set_nonblocking(true).is_ok() {
                            *sock = Some(s);
                        }
                    }
                    let Some(s) = sock else {
                        return Err(io::Error::new(
                            io::ErrorKind::NotFound,
                            format!("{} is not there", path.display()),
                        ));
                    };
                    if let Err(e) = s.send(&msg) {
                        // A syslog daemon that restarted is found again on the next line;
                        // a full one is written to again.
                        if e.kind() != io::ErrorKind::WouldBlock {
                            *sock = None;
                        }
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }
}

impl Shared {
    /// `lines` were lost (`why`): counted, and warned of once an episode.
    pub(super) fn dropped(&self, lines: u64, why: &str) {
        self.dropped.fetch_add(lines, Relaxed);
        if !self.episode.swap(true, Relaxed) {
            tracing::warn!(
                name: "access_log_dropping",
                error = why,
                "access log: lines dropped ({why}); counted in shuck_access_log_dropped_total until the sink takes lines again",
            );
        }
    }

    /// A written batch's buffer, for a worker thread's next batch (a few are kept): its
    /// bytes stay, room to write over, not zeroed again.
    pub(super) fn give_back(&self, bytes: Vec<u8>) {
        if let Ok(mut spare) = self.spare.lock() {
            if spare.len() < super::SPARE {
                spare.push(bytes);
            }
        }
    }

    /// A batch went out: an episode of drops, if one was on, is over.
    pub(super) fn written(&self) {
        if self.episode.load(Relaxed) && self.episode.swap(false, Relaxed) {
            tracing::info!(
                name: "access_log_recovered",
                dropped_total = self.dropped.load(Relaxed),
                "access log: the sink takes lines again",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Target;
    use std::path::PathBuf;

    #[test]
    fn targets_read_and_write_back_as_given() {
        for (given, want) in [
            ("stderr", Target::Stderr),
            ("syslog", Target::Unix(PathBuf::from("/dev/log"))),
            (
                "unix:/run/log.sock",
                Target::Unix(PathBuf::from("/run/log.sock")),
            ),
            (
                "/var/log/a.log",
                Target::File(PathBuf::from("/var/log/a.log")),
            ),
            (
                "udp://127.0.0.1:514",
                Target::Udp("127.0.0.1:514".parse().unwrap()),
            ),
        ] {
            let t: Target = given.parse().unwrap();
            assert_eq!(t, want, "{given}");
            assert_eq!(t.to_string(), given);
        }
        for bad in ["", "unix:", "tcp://127.0.0.1:514", "udp://nowhere"] {
            assert!(bad.parse::<Target>().is_err(), "{bad:?}");
        }
    }
}
