//! The private socket between a master and its worker, and between an old master and the
//! new one at a binary upgrade: framed messages (tag, length, payload), with listening
//! sockets passed alongside by `SCM_RIGHTS`.
//!
//! Both ends are our own processes, but a message is still checked as it is read: a bad
//! frame is an error naming what is wrong, never a panic.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

mod message;

use message::{decode, encode};
pub use message::{ChannelError, Entry, Kind, Msg, MAX_FDS};

/// Largest frame accepted: a recording of every certificate, key and CA file.
const MAX_FRAME: usize = 256 << 20;
/// Sessions per [`Msg::Sessions`] frame.
pub const SESSIONS_PER_FRAME: usize = 1024;

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
            Msg::AccessLog(_, fd) => vec![fd.as_fd()],
            _ => Vec::new(),
        };
        if fds.len() > MAX_FDS {
            return Err(ChannelError::TooManyDescriptors);
        }
        let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(ChannelError::DescriptorsDoNotFit);
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
            return Err(ChannelError::FrameTooLong(len));
        }
        let mut payload = vec![0u8; len];
        (&self.sock).read_exact(&mut payload).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                ChannelError::Closed
            } else {
                ChannelError::Io(e)
            }
        })?;
        decode(head[0], &payload, fds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::files::Recording;
    use std::os::fd::OwnedFd;

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
