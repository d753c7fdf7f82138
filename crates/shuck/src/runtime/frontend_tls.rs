//! Every frontend's TLS state for a configuration: the one path that start, reload and
//! OCSP restapling all take, so the three cannot build a frontend differently.

use std::sync::Arc;

use crate::config::Config;
use crate::session::Resumption;
use crate::tls::{TlsError, TlsState};

/// A frontend whose TLS state could not be built.
#[derive(Debug, thiserror::Error)]
#[error("frontend {frontend}: {source}")]
pub struct FrontendTlsError {
    /// The frontend as written.
    pub frontend: String,
    /// Why.
    pub source: TlsError,
}

/// Builds each frontend's TLS state, in the order of `cfg.frontends`, on the process's
/// session cache and ticket keys. Frontends without certificates or settings of their own
/// share one state built from the global ones.
pub fn build(
    cfg: &Config,
    resumption: &Resumption,
) -> Result<Vec<Arc<TlsState>>, FrontendTlsError> {
    let mut global: Option<Arc<TlsState>> = None;
    cfg.frontends
        .iter()
        .map(|fe| {
            let shared = fe.certs.is_empty()
                && fe.tls.is_none()
                && fe.client_verify.is_none()
                && fe.client_ca.is_none();
            if let (true, Some(g)) = (shared, &global) {
                return Ok(g.clone());
            }
            let mut ft = cfg.frontend_tls(fe);
            ft.settings.tickets = resumption.tickets.clone();
            let state = TlsState::for_frontend(
                &ft.settings,
                &ft.certs,
                ft.default,
                &ft.by_cert,
                resumption,
            )
            .map(Arc::new)
            .map_err(|source| FrontendTlsError {
                frontend: fe.endpoint.to_string(),
                source,
            })?;
            if shared {
                global = Some(state.clone());
            }
            Ok(state)
        })
        .collect()
}
