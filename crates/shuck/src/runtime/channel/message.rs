//! What crosses the channel: the messages, the sockets passed beside them, and each
//! message's wire form (a tag and a payload, checked as it is read: a bad one is an error
//! naming what is wrong, never a panic).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::time::Duration;

use crate::acme::{Answered, Event, Status};
use crate::codec::{put_bytes_u32, put_u32, put_u64, CodecError, Reader};
use crate::session::tickets::RingState;
use crate::session::Snapshot;
use crate::system::files::Recording;

/// Most descriptors in one message (the kernel's limit is 253).
pub const MAX_FDS: usize = 200;

/// What a socket passed along is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A frontend's listening socket.
    Frontend = 0,
    /// The `--stats` listener.
    Stats = 1,
    /// The replication socket.
    Replication = 2,
    /// A plain-HTTP listener (`--redirect-listen`, `--acme-http-listen`).
    Plain = 3,
    /// A frontend's UDP socket for QUIC (`--quic`).
    Quic = 4,
}

/// A socket passed along: what it is for and its local address; the descriptor travels
/// beside, in the same order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its use.
    pub kind: Kind,
    /// Its local address.
    pub addr: SocketAddr,
}

/// One message.
#[derive(Debug)]
pub enum Msg {
    /// Worker → master: serving. New master → old master: my worker serves.
    Ready,
    /// Worker → master: SIGHUP reached the worker.
    Reload,
    /// Worker → master: SIGUSR2 reached the worker.
    Upgrade,
    /// Master → worker: stop accepting, send your sessions, drain, exit.
    Handover,
    /// Sockets, with their descriptors (at most [`MAX_FDS`]).
    Sockets(Vec<Entry>, Vec<OwnedFd>),
    /// Master → worker: an access log file, opened again (SIGUSR1, a reload), and the
    /// index of the sink it is.
    AccessLog(usize, OwnedFd),
    /// Worker → master: SIGUSR1 reached the worker (open the log files again).
    Reopen,
    /// Master → worker: apply the configuration read while recording this (the sockets
    /// of new frontends came just before, in [`Msg::Sockets`]).
    Apply(Recording),
    /// The ticket key ring to use.
    Tickets(RingState),
    /// Cached sessions, handed to the next process.
    Sessions(Vec<Snapshot>),
    /// No more sessions.
    SessionsEnd,
    /// ACME client → master → worker.
    Acme(crate::acme::Event),
    /// Worker → master → ACME client: the answer is live (or why not).
    AcmeAnswered(crate::acme::Answered),
    /// Worker → master → ACME client: a farm message from another host (a
    /// `crate::acme::farm::FarmMsg`, encoded).
    Farm(Vec<u8>),
    /// Master → worker: the ACME certificates, read while recording this; the running
    /// configuration is rebuilt with them.
    Certificates(Recording),
    /// Master → worker: the admin API's certificates (`--admin-certs`), read while
    /// recording this; the running configuration is rebuilt with them.
    AdminCertificates(Recording),
    /// Master → worker: an admin API call the worker answers (JSON: what it asks; `id`
    /// 0 wants no answer).
    AdminCall {
        /// The call's number, given back in the answer.
        id: u64,
        /// The call, as JSON.
        call: Vec<u8>,
    },
    /// Worker → master: the answer to [`Msg::AdminCall`] `id`.
    AdminReply {
        /// The call's number.
        id: u64,
        /// The HTTP status.
        status: u16,
        /// The answer's body, JSON.
        body: Vec<u8>,
    },
    /// Master → worker, at a binary upgrade: the previous process has exited, and its
    /// QUIC connections with it; the worker may read the UDP sockets they shared.
    PredecessorGone,
}

/// Why a message could not be read or sent.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// The other end closed the socket.
    #[error("the other process closed the channel")]
    Closed,
    /// The socket failed.
    #[error("channel: {0}")]
    Io(#[from] io::Error),
    /// A message whose fields do not decode.
    #[error("channel: bad message: {0}")]
    Codec(#[from] CodecError),
    /// A message type this side does not know.
    #[error("channel: unknown message {0}")]
    Unknown(u8),
    /// A frame longer than any message.
    #[error("channel: a frame of {0} bytes")]
    FrameTooLong(usize),
    /// More descriptors than one message carries.
    #[error("channel: more than {MAX_FDS} descriptors")]
    TooManyDescriptors,
    /// The descriptors do not fit the control message.
    #[error("channel: descriptors do not fit")]
    DescriptorsDoNotFit,
    /// A socket message naming another number of sockets than were passed.
    #[error("channel: {named} sockets named, {passed} passed")]
    SocketsMismatch {
        /// Sockets the message names.
        named: usize,
        /// Descriptors that came with it.
        passed: usize,
    },
    /// Descriptors with a message that takes none.
    #[error("channel: descriptors with a message that takes none")]
    UnexpectedDescriptors,
    /// A socket address that does not parse (as it was sent).
    #[error("channel: bad socket address {0:?}")]
    Address(String),
}

pub(super) fn encode(msg: &Msg) -> (u8, Vec<u8>) {
    let mut w = Vec::new();
    let tag = match msg {
        Msg::Ready => 1,
        Msg::Reload => 2,
        Msg::Upgrade => 3,
        Msg::Handover => 4,
        Msg::Sockets(entries, _) => {
            put_u32(&mut w, entries.len() as u32);
            for e in entries {
                w.push(e.kind as u8);
                put_bytes_u32(&mut w, e.addr.to_string().as_bytes());
            }
            5
        }
        Msg::Apply(rec) => {
            put_recording(&mut w, rec);
            6
        }
        Msg::Tickets(state) => {
            state.encode(&mut w);
            7
        }
        Msg::Sessions(list) => {
            put_u32(&mut w, list.len() as u32);
            for s in list {
                put_bytes_u32(&mut w, &s.key);
                put_bytes_u32(&mut w, &s.value);
                put_u64(&mut w, s.age.as_millis() as u64);
            }
            8
        }
        Msg::SessionsEnd => 9,
        Msg::Acme(Event::Answer {
            name,
            token,
            key_auth,
        }) => {
            put_bytes_u32(&mut w, name.as_bytes());
            put_bytes_u32(&mut w, token.as_bytes());
            put_bytes_u32(&mut w, key_auth.as_bytes());
            10
        }
        Msg::AcmeAnswered(Answered { token, error }) => {
            put_bytes_u32(&mut w, token.as_bytes());
            put_result(&mut w, error.as_ref().map_or(Ok(&[][..]), Err));
            11
        }
        Msg::Acme(Event::Withdraw { name, token }) => {
            put_bytes_u32(&mut w, name.as_bytes());
            put_bytes_u32(&mut w, token.as_bytes());
            12
        }
        Msg::Acme(Event::Issued) => 13,
        Msg::Acme(Event::Status(st)) => {
            put_u64(&mut w, st.orders_ok);
            put_u64(&mut w, st.orders_failed);
            put_u32(&mut w, st.next.len() as u32);
            for (name, at) in &st.next {
                put_bytes_u32(&mut w, name.as_bytes());
                put_u64(&mut w, *at);
            }
            14
        }
        Msg::Certificates(rec) => {
            put_recording(&mut w, rec);
            15
        }
        Msg::Farm(body) => {
            put_bytes_u32(&mut w, body);
            16
        }
        Msg::Acme(Event::Farm(body)) => {
            put_bytes_u32(&mut w, body);
            17
        }
        Msg::AdminCertificates(rec) => {
            put_recording(&mut w, rec);
            18
        }
        Msg::AdminCall { id, call } => {
            put_u64(&mut w, *id);
            put_bytes_u32(&mut w, call);
            19
        }
        Msg::AdminReply { id, status, body } => {
            put_u64(&mut w, *id);
            put_u32(&mut w, u32::from(*status));
            put_bytes_u32(&mut w, body);
            20
        }
        Msg::PredecessorGone => 21,
        Msg::AccessLog(sink, _) => {
            put_u32(&mut w, u32::try_from(*sink).unwrap_or(u32::MAX));
            22
        }
        Msg::Reopen => 23,
    };
    (tag, w)
}

fn put_recording(w: &mut Vec<u8>, rec: &Recording) {
    put_u32(w, rec.files.len() as u32);
    for (path, got) in &rec.files {
        put_bytes_u32(w, path.as_os_str().as_bytes());
        put_result(w, got.as_deref());
    }
    put_u32(w, rec.dirs.len() as u32);
    for (dir, got) in &rec.dirs {
        put_bytes_u32(w, dir.as_os_str().as_bytes());
        match got {
            Ok(list) => {
                w.push(0);
                put_u32(w, list.len() as u32);
                for (name, path) in list {
                    put_bytes_u32(w, name.as_bytes());
                    put_bytes_u32(w, path.as_os_str().as_bytes());
                }
            }
            Err(e) => {
                w.push(1);
                put_bytes_u32(w, e.as_bytes());
            }
        }
    }
}

fn put_result(w: &mut Vec<u8>, r: Result<&[u8], &String>) {
    match r {
        Ok(b) => {
            w.push(0);
            put_bytes_u32(w, b);
        }
        Err(e) => {
            w.push(1);
            put_bytes_u32(w, e.as_bytes());
        }
    }
}

/// Bytes after their u32 length, as text (lossy: paths and messages, not parsed).
fn text(r: &mut Reader<'_>, what: &'static str) -> Result<String, CodecError> {
    Ok(String::from_utf8_lossy(r.bytes_u32(what)?).into_owned())
}

/// Bytes after their u32 length, as a path.
fn path(r: &mut Reader<'_>, what: &'static str) -> Result<PathBuf, CodecError> {
    Ok(PathBuf::from(OsString::from_vec(
        r.bytes_u32(what)?.to_vec(),
    )))
}

fn get_recording(r: &mut Reader<'_>) -> Result<Recording, CodecError> {
    let mut rec = Recording::default();
    for _ in 0..r.count(9, "recorded files")? {
        let path = path(r, "recorded file")?;
        let got = match r.u8("recorded file result")? {
            0 => Ok(r.bytes_u32("recorded file")?.to_vec()),
            _ => Err(text(r, "recorded file error")?),
        };
        rec.files.insert(path, got);
    }
    let mut dirs = HashMap::new();
    for _ in 0..r.count(9, "recorded directories")? {
        let dir = path(r, "recorded directory")?;
        let got = match r.u8("recorded directory result")? {
            0 => {
                let n = r.count(8, "directory entries")?;
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = OsString::from_vec(r.bytes_u32("directory entry")?.to_vec());
                    list.push((name, path(r, "directory entry path")?));
                }
                Ok(list)
            }
            _ => Err(text(r, "recorded directory error")?),
        };
        dirs.insert(dir, got);
    }
    rec.dirs = dirs;
    Ok(rec)
}

pub(super) fn decode(tag: u8, payload: &[u8], fds: Vec<OwnedFd>) -> Result<Msg, ChannelError> {
    let mut r = Reader::new(payload);
    let r = &mut r;
    let msg = match tag {
        1 => Msg::Ready,
        2 => Msg::Reload,
        3 => Msg::Upgrade,
        4 => Msg::Handover,
        5 => {
            let n = r.count(5, "sockets")?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let kind = match r.u8("socket kind")? {
                    0 => Kind::Frontend,
                    1 => Kind::Stats,
                    2 => Kind::Replication,
                    3 => Kind::Plain,
                    4 => Kind::Quic,
                    k => {
                        return Err(CodecError::Invalid {
                            what: "socket kind",
                            value: u64::from(k),
                        }
                        .into())
                    }
                };
                let addr = text(r, "socket address")?;
                let addr = addr.parse().map_err(|_| ChannelError::Address(addr))?;
                entries.push(Entry { kind, addr });
            }
            r.end()?;
            if entries.len() != fds.len() {
                return Err(ChannelError::SocketsMismatch {
                    named: entries.len(),
                    passed: fds.len(),
                });
            }
            return Ok(Msg::Sockets(entries, fds));
        }
        6 => Msg::Apply(get_recording(r)?),
        7 => Msg::Tickets(RingState::decode(r)?),
        8 => {
            let n = r.count(16, "sessions")?;
            let mut list = Vec::with_capacity(n);
            for _ in 0..n {
                list.push(Snapshot {
                    key: r.bytes_u32("session key")?.to_vec(),
                    value: r.bytes_u32("session")?.to_vec(),
                    age: Duration::from_millis(r.u64("session age")?),
                });
            }
            Msg::Sessions(list)
        }
        9 => Msg::SessionsEnd,
        10 => Msg::Acme(Event::Answer {
            name: text(r, "answer name")?,
            token: text(r, "answer token")?,
            key_auth: text(r, "key authorization")?,
        }),
        11 => Msg::AcmeAnswered(Answered {
            token: text(r, "answered token")?,
            error: match r.u8("answered result")? {
                0 => {
                    r.bytes_u32("answered")?;
                    None
                }
                _ => Some(text(r, "answer error")?),
            },
        }),
        12 => Msg::Acme(Event::Withdraw {
            name: text(r, "withdrawn name")?,
            token: text(r, "withdrawn token")?,
        }),
        13 => Msg::Acme(Event::Issued),
        14 => {
            let orders_ok = r.u64("orders done")?;
            let orders_failed = r.u64("orders failed")?;
            let n = r.count(12, "renewals")?;
            let mut next = Vec::with_capacity(n);
            for _ in 0..n {
                next.push((text(r, "renewal name")?, r.u64("renewal time")?));
            }
            Msg::Acme(Event::Status(Status {
                orders_ok,
                orders_failed,
                next,
            }))
        }
        15 => Msg::Certificates(get_recording(r)?),
        16 => Msg::Farm(r.bytes_u32("farm message")?.to_vec()),
        17 => Msg::Acme(Event::Farm(r.bytes_u32("farm message")?.to_vec())),
        18 => Msg::AdminCertificates(get_recording(r)?),
        19 => Msg::AdminCall {
            id: r.u64("admin call id")?,
            call: r.bytes_u32("admin call")?.to_vec(),
        },
        20 => Msg::AdminReply {
            id: r.u64("admin call id")?,
            status: u16::try_from(r.u32("admin status")?).map_err(|_| CodecError::Invalid {
                what: "admin status",
                value: 0,
            })?,
            body: r.bytes_u32("admin answer")?.to_vec(),
        },
        21 => Msg::PredecessorGone,
        22 => {
            let sink = r.u32("access log sink")? as usize;
            r.end()?;
            let mut fds = fds.into_iter();
            return match (fds.next(), fds.next()) {
                (Some(fd), None) => Ok(Msg::AccessLog(sink, fd)),
                (got, _) => Err(ChannelError::SocketsMismatch {
                    named: 1,
                    passed: usize::from(got.is_some()) * 2,
                }),
            };
        }
        23 => Msg::Reopen,
        t => return Err(ChannelError::Unknown(t)),
    };
    if !fds.is_empty() {
        return Err(ChannelError::UnexpectedDescriptors);
    }
    r.end()?;
    Ok(msg)
}
