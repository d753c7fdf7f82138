//! The private socket between a master and its worker, and between an old master and the
//! new one at a binary upgrade: framed messages (tag, length, payload), with listening
//! sockets passed alongside by `SCM_RIGHTS`.
//!
//! Both ends are our own processes, but a message is still checked as it is read: a bad
//! frame is an error naming what is wrong, never a panic.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::acme::{Answered, Event, Status};
use crate::session::tickets::RingState;
use crate::session::Snapshot;
use crate::system::files::Recording;

/// Most descriptors in one message (the kernel's limit is 253).
pub const MAX_FDS: usize = 200;
/// Largest frame accepted: a recording of every certificate, key and CA file.
const MAX_FRAME: usize = 256 << 20;
/// Sessions per [`Msg::Sessions`] frame.
pub const SESSIONS_PER_FRAME: usize = 1024;

/// What a socket passed along is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A frontend's listening socket.
    Frontend = 0,
    /// The `--stats` listener.
    Stats = 1,
    /// The replication socket.
    Replication = 2,
    /// The `--acme-http-listen` socket (http-01 answers).
    AcmeHttp = 3,
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
    /// A frame that is not one of ours.
    #[error("channel: bad message: {0}")]
    Bad(String),
}

/// One end of the channel (blocking).
#[derive(Debug)]
pub struct Channel {
    sock: UnixStream,
}

impl Channel {
    /// A connected pair.
    pub fn pair() -> io::Result<(Channel, Channel)> {
        let (a, b) = UnixStream::pair()?;
        Ok((Channel { sock: a }, Channel { sock: b }))
    }

    /// Wraps a connected socket (the new master's standard input at an upgrade).
    pub fn from_socket(sock: UnixStream) -> Self {
        Channel { sock }
    }

    /// The socket itself (to become a child's standard input).
    pub fn into_socket(self) -> UnixStream {
        self.sock
    }

    /// Another handle on the same socket (one thread reads while another writes).
    pub fn try_clone(&self) -> io::Result<Channel> {
        Ok(Channel {
            sock: self.sock.try_clone()?,
        })
    }

    /// The socket, for poll().
    pub fn socket(&self) -> &UnixStream {
        &self.sock
    }

    /// Bounds every blocking read and write (`None`: no bound).
    pub fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.sock.set_read_timeout(t)?;
        self.sock.set_write_timeout(t)
    }

    /// Sends `msg` whole.
    pub fn send(&self, msg: &Msg) -> Result<(), ChannelError> {
        let (tag, payload) = encode(msg);
        let mut frame = Vec::with_capacity(5 + payload.len());
        frame.push(tag);
        frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        frame.extend_from_slice(&payload);
        let fds: Vec<_> = match msg {
            Msg::Sockets(_, fds) => fds.iter().map(|f| f.as_fd()).collect(),
            _ => Vec::new(),
        };
        if fds.len() > MAX_FDS {
            return Err(ChannelError::Bad(format!(
                "more than {MAX_FDS} descriptors"
            )));
        }
        let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(ChannelError::Bad("descriptors do not fit".into()));
        }
        // The descriptors go with the first bytes; the rest follows as plain writes.
        let sent = sendmsg(
            &self.sock,
            &[IoSlice::new(&frame)],
            &mut control,
            SendFlags::NOSIGNAL,
        )
        .map_err(io::Error::from)?;
        (&self.sock).write_all(&frame[sent..])?;
        Ok(())
    }

    /// Reads the next message, waiting for it.
    pub fn recv(&self) -> Result<Msg, ChannelError> {
        let mut head = [0u8; 5];
        let mut got = 0;
        let mut fds = Vec::new();
        while got < head.len() {
            let mut space =
                vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let r = recvmsg(
                &self.sock,
                &mut [IoSliceMut::new(&mut head[got..])],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
            .map_err(io::Error::from)?;
            for m in control.drain() {
                if let RecvAncillaryMessage::ScmRights(passed) = m {
                    fds.extend(passed);
                }
            }
            if r.bytes == 0 {
                return Err(ChannelError::Closed);
            }
            got += r.bytes;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > MAX_FRAME {
            return Err(ChannelError::Bad(format!("a frame of {len} bytes")));
        }
        let mut payload = vec![0u8; len];
        (&self.sock).read_exact(&mut payload).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                ChannelError::Closed
            } else {
                ChannelError::Io(e)
            }
        })?;
        decode(head[0], &payload, fds).map_err(ChannelError::Bad)
    }
}

fn encode(msg: &Msg) -> (u8, Vec<u8>) {
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
                put_bytes(&mut w, e.addr.to_string().as_bytes());
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
                put_bytes(&mut w, &s.key);
                put_bytes(&mut w, &s.value);
                w.extend_from_slice(&(s.age.as_millis() as u64).to_be_bytes());
            }
            8
        }
        Msg::SessionsEnd => 9,
        Msg::Acme(Event::Answer {
            name,
            token,
            key_auth,
        }) => {
            put_bytes(&mut w, name.as_bytes());
            put_bytes(&mut w, token.as_bytes());
            put_bytes(&mut w, key_auth.as_bytes());
            10
        }
        Msg::AcmeAnswered(Answered { token, error }) => {
            put_bytes(&mut w, token.as_bytes());
            put_result(&mut w, error.as_ref().map_or(Ok(&[][..]), Err));
            11
        }
        Msg::Acme(Event::Withdraw { name, token }) => {
            put_bytes(&mut w, name.as_bytes());
            put_bytes(&mut w, token.as_bytes());
            12
        }
        Msg::Acme(Event::Issued) => 13,
        Msg::Acme(Event::Status(st)) => {
            w.extend_from_slice(&st.orders_ok.to_be_bytes());
            w.extend_from_slice(&st.orders_failed.to_be_bytes());
            put_u32(&mut w, st.next.len() as u32);
            for (name, at) in &st.next {
                put_bytes(&mut w, name.as_bytes());
                w.extend_from_slice(&at.to_be_bytes());
            }
            14
        }
        Msg::Certificates(rec) => {
            put_recording(&mut w, rec);
            15
        }
        Msg::Farm(body) => {
            put_bytes(&mut w, body);
            16
        }
        Msg::Acme(Event::Farm(body)) => {
            put_bytes(&mut w, body);
            17
        }
    };
    (tag, w)
}

fn put_recording(w: &mut Vec<u8>, rec: &Recording) {
    put_u32(w, rec.files.len() as u32);
    for (path, got) in &rec.files {
        put_bytes(w, path.as_os_str().as_bytes());
        put_result(w, got.as_deref());
    }
    put_u32(w, rec.dirs.len() as u32);
    for (dir, got) in &rec.dirs {
        put_bytes(w, dir.as_os_str().as_bytes());
        match got {
            Ok(list) => {
                w.push(0);
                put_u32(w, list.len() as u32);
                for (name, path) in list {
                    put_bytes(w, name.as_bytes());
                    put_bytes(w, path.as_os_str().as_bytes());
                }
            }
            Err(e) => {
                w.push(1);
                put_bytes(w, e.as_bytes());
            }
        }
    }
}

fn put_u32(w: &mut Vec<u8>, n: u32) {
    w.extend_from_slice(&n.to_be_bytes());
}

fn put_bytes(w: &mut Vec<u8>, b: &[u8]) {
    put_u32(w, b.len() as u32);
    w.extend_from_slice(b);
}

fn put_result(w: &mut Vec<u8>, r: Result<&[u8], &String>) {
    match r {
        Ok(b) => {
            w.push(0);
            put_bytes(w, b);
        }
        Err(e) => {
            w.push(1);
            put_bytes(w, e.as_bytes());
        }
    }
}

/// Reads fields off a payload, each read checked against what is left.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, String> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn path(&mut self) -> Result<PathBuf, String> {
        Ok(PathBuf::from(OsString::from_vec(self.bytes()?.to_vec())))
    }
    fn text(&mut self) -> Result<String, String> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }
    /// A count, bounded by what is left (each item is at least `min` bytes).
    fn count(&mut self, min: usize) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.0.len() {
            return Err(format!("{n} items in {} bytes", self.0.len()));
        }
        Ok(n)
    }
}

fn get_recording(r: &mut Reader<'_>) -> Result<Recording, String> {
    let mut rec = Recording::default();
    for _ in 0..r.count(9)? {
        let path = r.path()?;
        let got = match r.u8()? {
            0 => Ok(r.bytes()?.to_vec()),
            _ => Err(r.text()?),
        };
        rec.files.insert(path, got);
    }
    let mut dirs = HashMap::new();
    for _ in 0..r.count(9)? {
        let dir = r.path()?;
        let got = match r.u8()? {
            0 => {
                let n = r.count(8)?;
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = OsString::from_vec(r.bytes()?.to_vec());
                    list.push((name, r.path()?));
                }
                Ok(list)
            }
            _ => Err(r.text()?),
        };
        dirs.insert(dir, got);
    }
    rec.dirs = dirs;
    Ok(rec)
}

fn decode(tag: u8, payload: &[u8], fds: Vec<OwnedFd>) -> Result<Msg, String> {
    let mut r = Reader(payload);
    let msg = match tag {
        1 => Msg::Ready,
        2 => Msg::Reload,
        3 => Msg::Upgrade,
        4 => Msg::Handover,
        5 => {
            let n = r.count(5)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let kind = match r.u8()? {
                    0 => Kind::Frontend,
                    1 => Kind::Stats,
                    2 => Kind::Replication,
                    3 => Kind::AcmeHttp,
                    k => return Err(format!("socket kind {k}")),
                };
                let text = r.text()?;
                let addr = text.parse().map_err(|_| format!("address {text:?}"))?;
                entries.push(Entry { kind, addr });
            }
            if entries.len() != fds.len() {
                return Err(format!(
                    "{} sockets named, {} passed",
                    entries.len(),
                    fds.len()
                ));
            }
            return Ok(Msg::Sockets(entries, fds));
        }
        6 => Msg::Apply(get_recording(&mut r)?),
        7 => {
            let (state, rest) =
                RingState::decode(r.0).ok_or("a ticket ring that does not parse")?;
            r.0 = rest;
            Msg::Tickets(state)
        }
        8 => {
            let n = r.count(16)?;
            let mut list = Vec::with_capacity(n);
            for _ in 0..n {
                list.push(Snapshot {
                    key: r.bytes()?.to_vec(),
                    value: r.bytes()?.to_vec(),
                    age: Duration::from_millis(r.u64()?),
                });
            }
            Msg::Sessions(list)
        }
        9 => Msg::SessionsEnd,
        10 => Msg::Acme(Event::Answer {
            name: r.text()?,
            token: r.text()?,
            key_auth: r.text()?,
        }),
        11 => Msg::AcmeAnswered(Answered {
            token: r.text()?,
            error: match r.u8()? {
                0 => {
                    r.bytes()?;
                    None
                }
                _ => Some(r.text()?),
            },
        }),
        12 => Msg::Acme(Event::Withdraw {
            name: r.text()?,
            token: r.text()?,
        }),
        13 => Msg::Acme(Event::Issued),
        14 => {
            let orders_ok = r.u64()?;
            let orders_failed = r.u64()?;
            let n = r.count(12)?;
            let mut next = Vec::with_capacity(n);
            for _ in 0..n {
                next.push((r.text()?, r.u64()?));
            }
            Msg::Acme(Event::Status(Status {
                orders_ok,
                orders_failed,
                next,
            }))
        }
        15 => Msg::Certificates(get_recording(&mut r)?),
        16 => Msg::Farm(r.bytes()?.to_vec()),
        17 => Msg::Acme(Event::Farm(r.bytes()?.to_vec())),
        t => return Err(format!("unknown message {t}")),
    };
    if !fds.is_empty() {
        return Err("descriptors with a message that takes none".into());
    }
    if !r.0.is_empty() {
        return Err(format!("{} bytes after the message", r.0.len()));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_sockets_cross_whole() {
        let (a, b) = Channel::pair().unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let fd: OwnedFd = l.into();
        a.send(&Msg::Sockets(
            vec![Entry {
                kind: Kind::Frontend,
                addr,
            }],
            vec![fd],
        ))
        .unwrap();
        let mut rec = Recording::default();
        rec.files.insert("/k.pem".into(), Ok(vec![7; 100_000]));
        rec.files.insert("/gone".into(), Err("No such file".into()));
        rec.dirs
            .insert("/d".into(), Ok(vec![("a.pem".into(), "/d/a.pem".into())]));
        let sent = rec.clone();
        let writer = std::thread::spawn(move || a.send(&Msg::Apply(rec)).map(|()| a));
        match b.recv().unwrap() {
            Msg::Sockets(entries, fds) => {
                assert_eq!(
                    entries,
                    vec![Entry {
                        kind: Kind::Frontend,
                        addr
                    }]
                );
                let l = std::net::TcpListener::from(fds.into_iter().next().unwrap());
                assert_eq!(l.local_addr().unwrap(), addr);
            }
            m => panic!("{m:?}"),
        }
        match b.recv().unwrap() {
            Msg::Apply(rec) => assert_eq!(rec, sent),
            m => panic!("{m:?}"),
        }
        let a = writer.join().unwrap().unwrap();
        drop(a);
        assert!(matches!(b.recv(), Err(ChannelError::Closed)));
    }

    #[test]
    fn bad_frames_are_errors() {
        for (tag, payload) in [
            (0u8, vec![]),
            (5, vec![0, 0, 0, 9]),
            (8, vec![255, 255, 255, 255]),
            (1, vec![0]),
            (7, vec![0, 0, 0, 0, 0, 0, 0, 0]),
        ] {
            assert!(decode(tag, &payload, Vec::new()).is_err(), "tag {tag}");
        }
    }
}
