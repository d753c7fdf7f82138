//! One active health check of a server (`backend::check`): a connection, a TLS handshake
//! (the backend's own TLS settings, or any certificate when it has none: the check is that
//! TLS is spoken), an HTTP/1.1 GET whose status must be accepted, or gRPC's health
//! service asked over HTTP/2 (`grpc_health.rs`); a PROXY header first
//! with `check-send-proxy` (a v2 LOCAL header, or v1 `UNKNOWN`, after the backend's kind).
//! The whole check is bounded by the check interval.

use std::sync::{Arc, OnceLock};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_rustls::TlsConnector;

use super::route::Backend;
use crate::backend::check::{CheckSpec, Probe};
use crate::backend::{Address, Server};
use crate::config::Preamble;

/// PROXY v2's signature, version 2 command LOCAL, family UNSPEC, no address.
const PROXY_V2_LOCAL: &[u8] = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00";
/// PROXY v1 for a connection of shuck's own.
const PROXY_V1_UNKNOWN: &[u8] = b"PROXY UNKNOWN\r\n";
/// Longest status line read.
const MAX_LINE: usize = 1024;

/// Checks `server` of `backend` once: `Ok` when it passed, else why not.
pub async fn probe(server: &Server, backend: &Backend, spec: &CheckSpec) -> Result<(), String> {
    match tokio::time::timeout(spec.interval, run(server, backend, spec)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {:?}", spec.interval)),
    }
}

async fn run(server: &Server, backend: &Backend, spec: &CheckSpec) -> Result<(), String> {
    let mut s = server
        .connect(spec.interval)
        .await
        .map_err(|e| e.to_string())?;
    if spec.send_proxy {
        let header = match backend.preamble {
            Preamble::ProxyV2 => PROXY_V2_LOCAL,
            _ => PROXY_V1_UNKNOWN,
        };
        s.write_all(header).await.map_err(|e| e.to_string())?;
    }
    let tls = match &spec.probe {
        Probe::Connect => return Ok(()),
        Probe::Tls => true,
        Probe::Http { tls, .. } => *tls || backend.tls.is_some(),
        Probe::Grpc { .. } => backend.tls.is_some(),
    };
    let host = host_of(server);
    if !tls {
        return match &spec.probe {
            Probe::Grpc { service } => super::grpc_health::check(s, &host, service, false).await,
            _ => http(&mut s, spec, &host).await,
        };
    }
    let (config, name) = match &backend.tls {
        Some(t) => {
            let name = t
                .names
                .iter()
                .find(|(n, _)| **n == *server.name())
                .map(|(_, n)| n.clone());
            (t.config.clone(), name)
        }
        None => (any_certificate()?, None),
    };
    let name = match name {
        Some(n) => n,
        None => ServerName::try_from(host.clone()).map_err(|e| e.to_string())?,
    };
    let mut t = TlsConnector::from(config)
        .connect(name, s)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    match &spec.probe {
        Probe::Tls => {
            let _ = t.shutdown().await;
            Ok(())
        }
        Probe::Grpc { service } => super::grpc_health::check(t, &host, service, true).await,
        _ => http(&mut t, spec, &host).await,
    }
}

/// `check-http`: GET the path, read the status line, accept it or say why not.
async fn http<S>(s: &mut S, spec: &CheckSpec, host: &str) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let Probe::Http { path, .. } = &spec.probe else {
        return Ok(());
    };
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: shuck-check\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut line = Vec::with_capacity(64);
    let mut buf = [0u8; 256];
    while !line.contains(&b'\n') {
        let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before a status line".into());
        }
        line.extend_from_slice(&buf[..n]);
        if line.len() > MAX_LINE {
            return Err("no status line in the first KB".into());
        }
    }
    let first = line.split(|&b| b == b'\n').next().unwrap_or_default();
    let text = String::from_utf8_lossy(first);
    let status = text
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP status line: {:?}", text.trim_end()))?;
    if spec.accepts(status) {
        Ok(())
    } else {
        Err(format!("status {status}"))
    }
}

/// The host a check names (Host, and the TLS name when the backend gives none).
fn host_of(server: &Server) -> String {
    match server.address() {
        Address::Tcp(addrs) => addrs
            .first()
            .map_or_else(|| "localhost".to_owned(), |a| a.ip().to_string()),
        Address::Unix(_) => "localhost".to_owned(),
    }
}

/// For `check-tls` on a backend without TLS settings: any certificate (the check is that
/// the server speaks TLS). Made once.
fn any_certificate() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            crate::tls::upstream::client_config(crate::tls::upstream::Upstream {
                verify: false,
                ca_file: None,
                cert: None,
                alpn: &[],
            })
            .map_err(|e| e.to_string())
        })
        .clone()
}
