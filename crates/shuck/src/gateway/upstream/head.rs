//! A request's head as an HTTP/2 backend gets it: the same judgement and fields as the
//! HTTP/1.1 head (`request::build` writes both), as HTTP/2's pseudo-headers and fields.

use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Uri};

use crate::gateway::fields::Forwarding;
use crate::gateway::request::HeadOut;

/// The fields of an HTTP/2 request being written by `request::build`.
#[derive(Debug, Default)]
pub struct H2Head {
    method: Option<Method>,
    path: String,
    authority: Vec<u8>,
    headers: HeaderMap,
    /// A WebSocket's upgrade was asked for (not carried to an HTTP/2 backend).
    pub upgrade: bool,
    /// A field that is not one (cannot happen with fields h2 or h3 parsed, but never
    /// passed on if it did).
    bad: bool,
}

impl H2Head {
    fn push(&mut self, name: &[u8], value: &[u8]) {
        match (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            (Ok(n), Ok(v)) => {
                self.headers.append(n, v);
            }
            _ => self.bad = true,
        }
    }

    /// Marks the request as sent in 0-RTT (RFC 8470's `Early-Data: 1`).
    pub fn mark_early(&mut self) {
        self.headers
            .insert("early-data", HeaderValue::from_static("1"));
    }

    /// The request, with `https` as its scheme over TLS.
    pub fn into_request(self, tls: bool) -> Result<Request<()>, &'static str> {
        if self.bad {
            return Err("a field HTTP/2 cannot carry");
        }
        let method = self.method.ok_or("no method")?;
        let uri = Uri::builder()
            .scheme(if tls { "https" } else { "http" })
            .authority(self.authority)
            .path_and_query(self.path)
            .build()
            .map_err(|_| "a target HTTP/2 cannot carry")?;
        let mut req = Request::new(());
        *req.method_mut() = method;
        *req.uri_mut() = uri;
        *req.headers_mut() = self.headers;
        Ok(req)
    }
}

impl HeadOut for H2Head {
    fn start(&mut self, method: &str, path: &str) {
        self.method = Method::from_bytes(method.as_bytes()).ok();
        self.path = path.to_owned();
    }

    fn host(&mut self, host: &[u8]) {
        self.authority = host.to_vec();
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.push(name, value);
    }

    fn header(&mut self, name: &HeaderName, value: &HeaderValue) {
        self.headers.append(name.clone(), value.clone());
    }

    fn rule(&mut self, r: &crate::config::policy::HeaderRule) {
        // Checked at load: no name or value parsed again.
        self.headers.append(r.lower.clone(), r.value.clone());
    }

    fn cookies<'a>(&mut self, crumbs: impl Iterator<Item = &'a HeaderValue>) {
        // HTTP/2 carries the crumbs apart (RFC 9113 §8.2.3), compressed better so.
        for c in crumbs {
            self.headers.append(http::header::COOKIE, c.clone());
        }
    }

    fn te_trailers(&mut self) {
        self.headers
            .insert(http::header::TE, HeaderValue::from_static("trailers"));
    }

    fn chunked(&mut self) {} // HTTP/2 frames a body of any length itself

    fn upgrade(&mut self, _key: &[u8]) {
        self.upgrade = true;
    }

    fn end(&mut self, fwd: &Forwarding) {
        for (name, value) in fwd.fields() {
            self.headers.append(name.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::request::{build, Body};

    #[test]
    fn the_same_fields_as_http1_in_http2s_form() {
        let fwd = Forwarding::new("203.0.113.5".parse().unwrap(), None);
        let req = http::Request::post("https://api.test/svc.Echo/Say")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("x-forwarded-for", "6.6.6.6")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut head = H2Head::default();
        let (body, _) = build(&parts, false, &fwd, None, None, None, &mut head).unwrap();
        assert!(matches!(body, Body::Chunked(_)));
        let req = head.into_request(false).unwrap();
        assert_eq!(req.uri(), "http://api.test/svc.Echo/Say");
        let h = req.headers();
        assert_eq!(h["te"], "trailers");
        assert_eq!(h["x-forwarded-for"], "203.0.113.5");
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h.get_all("cookie").iter().count(), 2);
        assert!(h.get("transfer-encoding").is_none());
        assert!(h.get("host").is_none());
    }
}
