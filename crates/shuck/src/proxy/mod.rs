//! The TCP terminator, one of shuck's two jobs beside the HTTP gateway (`gateway/`): the data
//! path of one connection, stage by stage (docs/ARCHITECTURE.md). `listener` accepts and
//! admits, `handshake` runs TLS (`tls_stream`, `client_io`, `record_guard`), the backend is
//! connected (`edge::upstream`), `relay` moves bytes, and `conn` walks the stages in that
//! order. In `--http` mode `conn` hands an HTTP/2 connection to `gateway::h2`, and an
//! HTTP/1.1 one rides the relay with `gateway::h1` as its filter.

pub mod client_io;
pub(crate) mod conn;
pub mod handshake;
pub(crate) mod listener;
pub mod record_guard;
pub(crate) mod relay;
pub mod tls_stream;
#[cfg(feature = "io-uring")]
pub mod uring;
