//! shuck: a TLS termination proxy.
//!
//! The crate follows the data path of one connection (see docs/ARCHITECTURE.md): [`config`] turns flags
//! into a validated [`config::Config`]; [`runtime`] binds the frontends and starts one worker
//! per core; each worker runs [`proxy`]'s stages (listener → handshake → connect → relay),
//! the TCP terminator, and hands HTTP connections to [`gateway`], the HTTP gateway, both
//! over what [`edge`] holds for them (the worker's state, routes, the way to a backend),
//! with certificates from [`tls`] and servers from `backend`.

// Two `unsafe` blocks in the crate, each allowed where it stands with its proof
// (`proxy::listener::set_tcp_option`, `runtime::fork`), and a third in the io_uring
// prototype built only with `--features io-uring` (`proxy::uring`, its submissions);
// everything else is safe code.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod access;
pub mod acme;
pub mod admin;
pub(crate) mod backend;
pub mod clients;
pub(crate) mod clock;
pub mod codec;
pub mod config;
pub(crate) mod counters;
pub mod ctl;
pub mod edge;
pub mod fuzzing;
pub mod gateway;
pub mod http_host;
pub mod origin;
pub mod proxy;
pub mod redirect;
pub mod runtime;
pub mod session;
pub(crate) mod shutdown;
pub(crate) mod stats;
pub mod system;
pub mod tls;
