//! `--acme-http-listen`: the http-01 answers at `/.well-known/acme-challenge/TOKEN`, and a
//! 301 to https for every other request (the usual port 80 of a TLS-only site). One
//! request per connection, a bounded head, a deadline: nothing here is worth more.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::answers::answers;

/// Largest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// Time a client has to send its request.
const DEADLINE: Duration = Duration::from_secs(10);
/// Where the answers live.
const PREFIX: &str = "/.well-known/acme-challenge/";

/// Serves `listener` until the task is dropped.
pub async fn serve(listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((tcp, peer)) => {
                tokio::spawn(async move {
                    if let Err(e) = tokio::time::timeout(DEADLINE, answer(tcp)).await {
                        tracing::debug!(
                            name: "http01_no_request",
                            error = %e,
                            client = %peer,
                            "http-01: no request within {e}",
                        );
                    }
                });
            }
            Err(e) => {
                tracing::debug!(
                    name: "http01_accept_failed",
                    error = %e,
                    "http-01: accept failed: {e}",
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(mut tcp: TcpStream) {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut filled = 0;
    let response = loop {
        let n = match tcp.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        filled += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf[..filled]) {
            Ok(httparse::Status::Complete(_)) => break respond(&req),
            Ok(httparse::Status::Partial) if filled < buf.len() => continue,
            Ok(httparse::Status::Partial) => {
                break plain(431, "Request Header Fields Too Large", "")
            }
            Err(_) => break plain(400, "Bad Request", ""),
        }
    };
    let _ = tcp.write_all(response.as_bytes()).await;
    let _ = tcp.shutdown().await;
}

/// The response to the request head in `head`, or `None` while it is incomplete (and
/// `full` says there is no room for more).
pub fn response_to(head: &[u8], full: bool) -> Option<String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => Some(respond(&req)),
        Ok(httparse::Status::Partial) if !full => None,
        Ok(httparse::Status::Partial) => Some(plain(431, "Request Header Fields Too Large", "")),
        Err(_) => Some(plain(400, "Bad Request", "")),
    }
}

fn respond(req: &httparse::Request<'_, '_>) -> String {
    let path = req.path.unwrap_or("/");
    if let Some(token) = path.strip_prefix(PREFIX) {
        return match answers().http(token) {
            Some(key_auth) => {
                tracing::info!(name: "http01_answered", "answered an ACME http-01 challenge");
                plain(200, "OK", &key_auth)
            }
            None => plain(404, "Not Found", ""),
        };
    }
    // One Host, a plain host name or address, as --http mode takes it: nothing else is
    // reflected into the Location.
    let mut hosts = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("host"));
    let host = match (hosts.next(), hosts.next()) {
        (Some(h), None) => crate::http_host::parse(h.value)
            .ok()
            .filter(|a| a.is_plain_name())
            .map(|a| a.host),
        _ => None,
    };
    match host {
        Some(host) if path.starts_with('/') => format!(
            "HTTP/1.1 301 Moved Permanently\r\nLocation: https://{host}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        _ => plain(400, "Bad Request", ""),
    }
}

fn plain(code: u16, reason: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_plain_host_is_reflected() {
        let answer = |head: &str| response_to(head.as_bytes(), false).unwrap();
        let moved = answer("GET /x?y HTTP/1.1\r\nHost: a.test:80\r\n\r\n");
        assert!(
            moved.contains("Location: https://a.test/x?y\r\n"),
            "{moved}"
        );
        let moved = answer("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n");
        assert!(moved.contains("Location: https://[::1]/\r\n"), "{moved}");
        for host in [
            "Host: a.test\r\nHost: b.test",
            "Host: evil.test/x",
            "Host: a@b",
            "Host: a,b",
            "Host: a b",
            "Host: a%2fb",
            "Host: a:99999",
            "Host: [::1",
            "Host: ",
            "X: no host",
        ] {
            let got = answer(&format!("GET / HTTP/1.1\r\n{host}\r\n\r\n"));
            assert!(got.starts_with("HTTP/1.1 400"), "{host}: {got}");
        }
    }
}
