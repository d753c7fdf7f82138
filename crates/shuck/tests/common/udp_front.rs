//! A UDP front between one client and QUIC servers, standing in for what sits on a real
//! network path (an ECMP or anycast router, a duplicating or corrupting link): each
//! datagram from the client goes where a route says, as many copies as it says, and the
//! servers' answers go back to the client from the front's one address.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Where the client's datagram number `n` (from 0) goes: a list of (server, bytes).
pub type Route = Box<dyn FnMut(u64, &[u8]) -> Vec<(SocketAddr, Vec<u8>)> + Send>;

/// A running front; stops when dropped (or after a minute).
pub struct UdpFront {
    /// Where the client sends.
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl UdpFront {
    /// A front on `bind_ip` sending the client's datagrams along `route`.
    pub fn start(bind_ip: &str, mut route: Route) -> UdpFront {
        let front = UdpSocket::bind((bind_ip, 0)).unwrap();
        let back = UdpSocket::bind((bind_ip, 0)).unwrap();
        let addr = front.local_addr().unwrap();
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = thread::spawn(move || {
            let mut client = None;
            let mut sent = 0u64;
            let mut buf = [0u8; 65_536];
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stopping.load(Ordering::Relaxed) && Instant::now() < deadline {
                if let Ok((n, from)) = front.recv_from(&mut buf) {
                    client = Some(from);
                    for (to, bytes) in route(sent, &buf[..n]) {
                        let _ = back.send_to(&bytes, to);
                    }
                    sent += 1;
                }
                while let Ok((n, _)) = back.recv_from(&mut buf) {
                    if let Some(c) = client {
                        let _ = front.send_to(&buf[..n], c);
                    }
                }
            }
        });
        UdpFront {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for UdpFront {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
