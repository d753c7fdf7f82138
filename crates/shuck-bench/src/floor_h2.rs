//! `floor-h2`: an HTTP/2 gateway to an HTTP/2 origin in clear built of the libraries shuck's
//! is built on and nothing else, the floor under `shuck-bench h2 --h2c`'s figures (issue
//! 49's aims). One thread, as `shuck -n 1`: tokio-rustls and h2's server side towards the
//! clients, h2's client side towards the origin on connections shared by every client, at
//! most [`MAX_STREAMS`] streams on each (shuck's `max-streams`), with shuck's windows on
//! both sides. Each stream's head, body and trailers are passed on as they come; there is
//! no routing, no request hygiene, no forwarding header and no log: what this costs a
//! request, a gateway on these libraries cannot go under.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};

/// Most streams on one origin connection (shuck's default `max-streams`).
const MAX_STREAMS: usize = 100;
/// The client side's windows, as shuck's HTTP/2 backend connections open them.
const STREAM_WINDOW: u32 = 256 * 1024;
const CONN_WINDOW: u32 = 4 * 1024 * 1024;
/// The server side's, as shuck's defaults (`--h2-initial-window-size`, 16 times for the
/// connection, `--h2-max-concurrent-streams`).
const CLIENT_WINDOW: u32 = 65_535;
const CLIENT_STREAMS: u32 = 100;

/// Serves HTTP/2 over TLS on `listen` with the certificate and key in `pem`, passing every
/// stream to the h2c origin at `origin`, on one thread, until killed.
pub fn run(listen: SocketAddr, pem: &Path, origin: SocketAddr) -> anyhow::Result<()> {
    let mut tls = crate::floor::tls13_config(pem)?;
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        let pool = Rc::new(Pool {
            origin,
            conns: RefCell::new(Vec::new()),
            opening: Cell::new(false),
            opened: tokio::sync::Notify::new(),
        });
        loop {
            let (tcp, _) = listener.accept().await?;
            let _ = tcp.set_nodelay(true);
            let (acceptor, pool) = (acceptor.clone(), pool.clone());
            tokio::task::spawn_local(async move {
                let _ = client(acceptor, tcp, pool).await;
            });
        }
    })
}

/// An origin connection and its streams in flight.
type Conn = (SendRequest<Bytes>, Rc<Cell<usize>>);

/// The origin connections.
struct Pool {
    origin: SocketAddr,
    conns: RefCell<Vec<Conn>>,
    /// A connection is being opened: the streams that find no room wait for it, as shuck's
    /// pool does, rather than each opening one of its own.
    opening: Cell<bool>,
    opened: tokio::sync::Notify,
}

/// A stream's place on an origin connection, given back when it ends.
struct Taken(Rc<Cell<usize>>);

impl Drop for Taken {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

impl Pool {
    /// A connection with room for one more stream, opened when none has it.
    async fn take(&self) -> anyhow::Result<(SendRequest<Bytes>, Taken)> {
        loop {
            let found = self
                .conns
                .borrow()
                .iter()
                .find(|(_, n)| n.get() < MAX_STREAMS)
                .map(|(s, n)| (s.clone(), n.clone()));
            if let Some((send, n)) = found {
                n.set(n.get() + 1);
                return Ok((send, Taken(n)));
            }
            if self.opening.replace(true) {
                self.opened.notified().await;
                continue;
            }
            let opened = self.open().await;
            self.opening.set(false);
            self.opened.notify_waiters();
            opened?;
        }
    }

    /// One more origin connection, driven by a task of its own.
    async fn open(&self) -> anyhow::Result<()> {
        let tcp = tokio::net::TcpStream::connect(self.origin).await?;
        tcp.set_nodelay(true)?;
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONN_WINDOW)
            .enable_push(false)
            .handshake::<_, Bytes>(tcp)
            .await?;
        tokio::task::spawn_local(async move {
            let _ = conn.await;
        });
        self.conns.borrow_mut().push((send, Rc::new(Cell::new(0))));
        Ok(())
    }
}

/// One client connection: its handshake, then each stream on a task of its own.
async fn client(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    pool: Rc<Pool>,
) -> anyhow::Result<()> {
    let tls = acceptor.accept(tcp).await?;
    let mut h2 = h2::server::Builder::new()
        .max_concurrent_streams(CLIENT_STREAMS)
        .initial_window_size(CLIENT_WINDOW)
        .initial_connection_window_size(CLIENT_WINDOW * 16)
        .max_send_buffer_size(64 * 1024)
        .handshake::<_, Bytes>(tls)
        .await?;
    while let Some(r) = h2.accept().await {
        let (req, respond) = r?;
        let pool = pool.clone();
        tokio::task::spawn_local(async move {
            let _ = stream(&pool, req, respond).await;
        });
    }
    Ok(())
}

/// One stream: the request to the origin, its answer back.
async fn stream(
    pool: &Pool,
    req: http::Request<RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) -> anyhow::Result<()> {
    let (head, mut body) = req.into_parts();
    let (mut send, _taken) = pool.take().await?;
    poll_fn(|cx| send.poll_ready(cx)).await?;
    let end = body.is_end_stream();
    let (answer, mut up) = send.send_request(http::Request::from_parts(head, ()), end)?;
    if !end {
        relay(&mut body, &mut up).await?;
    }
    let (head, mut body) = answer.await?.into_parts();
    let end = body.is_end_stream();
    let mut down = respond.send_response(http::Response::from_parts(head, ()), end)?;
    if !end {
        relay(&mut body, &mut down).await?;
    }
    Ok(())
}

/// A body and its trailers from one side to the other, within the sending side's window.
async fn relay(from: &mut RecvStream, to: &mut SendStream<Bytes>) -> anyhow::Result<()> {
    while let Some(data) = from.data().await {
        let mut data = data?;
        let len = data.len();
        while !data.is_empty() {
            to.reserve_capacity(data.len());
            let room = poll_fn(|cx| to.poll_capacity(cx))
                .await
                .context("the stream ended while its body was sent")??;
            if room == 0 {
                continue;
            }
            // The body's end goes with its last bytes when no trailers follow.
            let last = room >= data.len() && from.is_end_stream();
            to.send_data(data.split_to(room.min(data.len())), last)?;
            if last {
                from.flow_control().release_capacity(len)?;
                return Ok(());
            }
        }
        from.flow_control().release_capacity(len)?;
    }
    match from.trailers().await? {
        Some(t) => to.send_trailers(t)?,
        None => to.send_data(Bytes::new(), true)?,
    }
    Ok(())
}
