//! Where log lines go: stderr (the default), a file (`--log-filename`, appended), or
//! syslog (`--syslog`, RFC 3164 datagrams to /dev/log with `--syslog-facility`). As in hitch,
//! a missing /dev/log does not stop shuck: lines go to stderr until it appears (looked for
//! at most once a second), and a syslog daemon that restarts is found again.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;

use super::SystemError;

/// syslog facilities by name, with their codes.
const FACILITIES: &[(&str, u8)] = &[
    ("kern", 0),
    ("user", 1),
    ("mail", 2),
    ("daemon", 3),
    ("auth", 4),
    ("syslog", 5),
    ("lpr", 6),
    ("news", 7),
    ("uucp", 8),
    ("cron", 9),
    ("authpriv", 10),
    ("ftp", 11),
    ("local0", 16),
    ("local1", 17),
    ("local2", 18),
    ("local3", 19),
    ("local4", 20),
    ("local5", 21),
    ("local6", 22),
    ("local7", 23),
];

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text per event, as hitch writes them.
    #[default]
    Text,
    /// One JSON object per line (see [`super::json_log`]).
    Json,
}

/// A facility's code, or the valid names.
pub fn facility(name: &str) -> Result<u8, String> {
    FACILITIES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, c)| *c)
        .ok_or_else(|| {
            format!(
                "{name:?} is not a syslog facility ({})",
                FACILITIES
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// A log destination for tracing-subscriber.
#[derive(Clone)]
pub enum Sink {
    /// Standard error.
    Stderr,
    /// An appended file.
    File(Arc<Mutex<File>>),
    /// The local syslog daemon.
    Syslog(Arc<Syslog>),
    /// Both a file and syslog (`--syslog` with `--log-filename`, as hitch takes them).
    Both(Arc<Mutex<File>>, Arc<Syslog>),
}

/// The syslog socket (/dev/log), when it could be reached. Lines are sent without a lock
/// (`--log-connections` writes one per connection from every worker); only looking for a
/// missing socket is serialized, by `last_try`.
pub struct Syslog {
    sock: ArcSwapOption<UnixDatagram>,
    facility: u8,
    /// When /dev/log was last looked for (ms since the epoch).
    last_try: AtomicU64,
    /// Why it could not be reached at start, if it could not.
    at_start: Option<String>,
}

/// The local syslog socket.
const DEV_LOG: &str = "/dev/log";

fn connect() -> io::Result<UnixDatagram> {
    let s = UnixDatagram::unbound()?;
    s.connect(DEV_LOG)?;
    Ok(s)
}

impl Syslog {
    /// Why /dev/log could not be reached at start (then lines go to stderr until it can).
    pub fn unreachable_at_start(&self) -> Option<&str> {
        self.at_start.as_deref()
    }

    /// Sends one datagram; false when /dev/log cannot be reached now.
    fn send(&self, msg: &[u8]) -> bool {
        if let Some(sock) = self.sock.load().as_ref() {
            if sock.send(msg).is_ok() {
                return true;
            }
            // The daemon went away (or restarted): look for it again.
            self.sock.store(None);
        }
        // At most one look a second, by whichever thread wins the stamp.
        let now = crate::clock::unix_ms();
        let last = self.last_try.load(Ordering::Relaxed);
        if now.saturating_sub(last) < 1000
            || self
                .last_try
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        match connect() {
            Ok(sock) if sock.send(msg).is_ok() => {
                self.sock.store(Some(Arc::new(sock)));
                true
            }
            _ => false,
        }
    }
}

impl Sink {
    /// Opens `path` for appending.
    pub fn file(path: &Path) -> Result<Self, SystemError> {
        Ok(Sink::File(open_file(path)?))
    }

    /// The file and syslog both; see [`Sink::syslog`] for a syslog not there yet.
    pub fn both(path: &Path, facility: u8) -> Result<Self, SystemError> {
        Ok(Sink::Both(open_file(path)?, Syslog::open(facility)))
    }

    /// The syslog part, if any: to ask whether /dev/log was there at start.
    pub fn syslog_part(&self) -> Option<&Syslog> {
        match self {
            Sink::Syslog(s) | Sink::Both(_, s) => Some(s),
            _ => None,
        }
    }

    /// Syslog through /dev/log; when it is not there yet, lines go to stderr until it is
    /// (see [`Syslog::unreachable_at_start`]).
    pub fn syslog(facility: u8) -> Self {
        Sink::Syslog(Syslog::open(facility))
    }
}

impl Syslog {
    /// /dev/log if it is there now; if not, it is looked for again later.
    fn open(facility: u8) -> Arc<Syslog> {
        let (sock, at_start) = match connect() {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        };
        Arc::new(Syslog {
            sock: ArcSwapOption::from(sock.map(Arc::new)),
            facility,
            last_try: AtomicU64::new(crate::clock::unix_ms()),
            at_start,
        })
    }
}

/// `--log-filename`, appended to.
fn open_file(path: &Path) -> Result<Arc<Mutex<File>>, SystemError> {
    let f = super::files::create_nofollow(path, true)
        .map_err(|e| SystemError::call(format!("--log-filename {}", path.display()), e))?;
    Ok(Arc::new(Mutex::new(f)))
}

/// One log line on its way out.
pub enum LineWriter {
    /// To stderr.
    Stderr(io::Stderr),
    /// To the file, written whole at flush.
    File(Arc<Mutex<File>>, Vec<u8>),
    /// To syslog, sent whole at drop.
    Syslog(Arc<Syslog>, u8, Vec<u8>),
    /// To the file and to syslog, at drop.
    Both(Arc<Mutex<File>>, Arc<Syslog>, u8, Vec<u8>),
}

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            LineWriter::Stderr(s) => s.write(buf),
            LineWriter::File(_, line)
            | LineWriter::Syslog(_, _, line)
            | LineWriter::Both(_, _, _, line) => {
                line.extend_from_slice(buf);
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            LineWriter::Stderr(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        match self {
            LineWriter::Stderr(_) => {}
            LineWriter::File(f, line) => to_file(f, line),
            LineWriter::Syslog(s, severity, line) => to_syslog(s, *severity, line),
            LineWriter::Both(f, s, severity, line) => {
                to_file(f, line);
                to_syslog(s, *severity, line);
            }
        }
    }
}

fn to_file(f: &Mutex<File>, line: &[u8]) {
    if let Ok(mut f) = f.lock() {
        let _ = f.write_all(line);
    }
}

fn to_syslog(s: &Syslog, severity: u8, line: &[u8]) {
    let text = String::from_utf8_lossy(line);
    let msg = format!(
        "<{}>shuck[{}]: {}",
        u16::from(s.facility) * 8 + u16::from(severity),
        std::process::id(),
        text.trim_end()
    );
    if !s.send(msg.as_bytes()) {
        let _ = writeln!(io::stderr(), "{}", text.trim_end());
    }
}

fn severity(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        self.writer(&Level::INFO)
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> LineWriter {
        self.writer(meta.level())
    }
}

impl Sink {
    fn writer(&self, level: &Level) -> LineWriter {
        match self {
            Sink::Stderr => LineWriter::Stderr(io::stderr()),
            Sink::File(f) => LineWriter::File(f.clone(), Vec::with_capacity(256)),
            Sink::Syslog(s) => {
                LineWriter::Syslog(s.clone(), severity(level), Vec::with_capacity(256))
            }
            Sink::Both(f, s) => LineWriter::Both(
                f.clone(),
                s.clone(),
                severity(level),
                Vec::with_capacity(256),
            ),
        }
    }
}
