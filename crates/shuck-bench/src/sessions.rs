//! The load client's session store. rustls' in-memory store keeps eight TLS 1.3 tickets per
//! server, fewer than a benchmark with many sessions in flight consumes at once (tickets are
//! single-use), which would turn `--reuse always` into a mix. This one keeps a deep pool for
//! the one server a run targets.

use std::collections::VecDeque;
use std::sync::Mutex;

use rustls::client::{ClientSessionStore, Tls12ClientSessionValue, Tls13ClientSessionValue};
use rustls::pki_types::ServerName;
use rustls::NamedGroup;

/// Most TLS 1.3 tickets kept.
const POOL: usize = 16 * 1024;

#[derive(Debug, Default)]
struct State {
    kx_hint: Option<NamedGroup>,
    tls12: Option<Tls12ClientSessionValue>,
    tls13: VecDeque<Tls13ClientSessionValue>,
}

/// Sessions for the single server of a run (server names are not distinguished).
#[derive(Debug, Default)]
pub struct DeepStore(Mutex<State>);

impl DeepStore {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ClientSessionStore for DeepStore {
    fn set_kx_hint(&self, _: ServerName<'static>, group: NamedGroup) {
        self.state().kx_hint = Some(group);
    }

    fn kx_hint(&self, _: &ServerName<'_>) -> Option<NamedGroup> {
        self.state().kx_hint
    }

    fn set_tls12_session(&self, _: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.state().tls12 = Some(value);
    }

    fn tls12_session(&self, _: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.state().tls12.clone()
    }

    fn remove_tls12_session(&self, _: &ServerName<'static>) {
        self.state().tls12 = None;
    }

    fn insert_tls13_ticket(&self, _: ServerName<'static>, value: Tls13ClientSessionValue) {
        let mut s = self.state();
        if s.tls13.len() == POOL {
            s.tls13.pop_front();
        }
        s.tls13.push_back(value);
    }

    fn take_tls13_ticket(&self, _: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        // Newest first: the freshest ticket is the least likely to have expired.
        self.state().tls13.pop_back()
    }
}
