//! shuck: a TLS termination proxy.
//!
//! The crate follows the data path of one connection (see DESIGN.md): [`config`] turns flags
//! into a validated [`config::Config`]; [`runtime`] binds the frontends and starts one worker
//! per core; each worker runs [`proxy`]'s stages (listener → handshake → connect → relay)
//! with certificates from [`tls`] and servers from [`backend`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod clock;
pub mod config;
pub mod counters;
pub mod origin;
pub mod proxy;
pub mod runtime;
pub mod session;
pub mod shutdown;
pub mod stats;
pub mod system;
pub mod tls;
