//! What a request says about itself, each read in one place: its id (set by
//! the request-id middleware), the client IP, the media type of its body
//! and the body itself.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

use crate::state::AppState;

/// The request's id (`req_…`): a well-formed incoming `X-Request-Id`, or
/// one minted by the middleware, which puts it in the request extensions
/// (extract it as `Option<Extension<RequestId>>`).
pub use zm_store::RequestId;

/// The client IP: the socket address, or — when the proxy is trusted — the
/// right-most `X-Forwarded-For` hop, the one our proxy appended (every hop
/// to its left came from the client and proves nothing). `"unknown"` when
/// neither is known.
pub fn client_ip(trust_proxy: bool, headers: &HeaderMap, peer: Option<SocketAddr>) -> String {
    if trust_proxy
        && let Some(last) = headers
            .get_all("x-forwarded-for")
            .iter()
            .next_back()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .map(str::trim)
    {
        let ip = last
            .parse::<IpAddr>()
            .ok()
            .or_else(|| last.parse::<SocketAddr>().ok().map(|s| s.ip()));
        if let Some(ip) = ip {
            return ip.to_string();
        }
    }
    peer.map_or_else(|| "unknown".into(), |p| p.ip().to_string())
}

/// What a per-IP limit counts under: an IPv4 address as it is, an IPv6
/// address by its /64 (one subscriber is handed a whole /64, so rotating
/// the low bits must not buy a fresh window). An IPv4-mapped IPv6 address
/// counts as its IPv4 address.
pub fn ip_limit_key(ip: &str) -> String {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return v4.to_string();
            }
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        _ => ip.to_string(),
    }
}

/// The wider network an IPv6 address belongs to, by its /48 (a site's
/// allocation: a subscriber given a /56 or a /48 rotates through 256 or
/// 65,536 /64s), for a limit that must not be bought afresh by moving to
/// another /64 of one allocation. `None` for IPv4, mapped ones included.
pub fn ip_network_key(ip: &str) -> Option<String> {
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            Some(format!("{:x}:{:x}:{:x}::/48", s[0], s[1], s[2]))
        }
        _ => None,
    }
}

/// Extractor: the client IP (see [`client_ip`]), honouring
/// [`crate::HttpConfig::trust_proxy`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIp(pub String);

impl<S> FromRequestParts<S> for ClientIp
where
    AppState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Infallible> {
        let trust_proxy = AppState::from_ref(state).cfg.trust_proxy;
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0);
        Ok(ClientIp(client_ip(trust_proxy, &parts.headers, peer)))
    }
}

/// The kinds of body the HTTP surface reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyType {
    /// `application/json` or any `…+json`.
    Json,
    /// `application/x-www-form-urlencoded`.
    Form,
    /// Anything else, or no `Content-Type` at all.
    Other,
}

/// The body type a request declares: its `Content-Type` without
/// parameters, compared case-insensitively.
pub fn body_type(headers: &HeaderMap) -> BodyType {
    let mime = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "application/json" || mime.ends_with("+json") {
        BodyType::Json
    } else if mime == "application/x-www-form-urlencoded" {
        BodyType::Form
    } else {
        BodyType::Other
    }
}

/// Does the request declare a JSON body?
pub fn is_json(headers: &HeaderMap) -> bool {
    body_type(headers) == BodyType::Json
}

/// Why a request body could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// It is larger than the limit (bytes).
    TooLarge(usize),
    /// It stalled past the body timeout, or the client cut it off.
    Unreadable,
}

impl BodyError {
    /// The sentence a refusal carries (no final period, lowercase first).
    pub fn describe(self) -> String {
        match self {
            BodyError::TooLarge(limit) => format!("the body is larger than {limit} bytes"),
            BodyError::Unreadable => {
                "the body could not be read: it stalled past the body timeout or was cut off".into()
            }
        }
    }
}

/// The whole body, at most `limit` bytes. (The server puts a deadline on
/// every request body, so a stalled one ends as [`BodyError::Unreadable`].)
pub async fn read_body(body: axum::body::Body, limit: usize) -> Result<bytes::Bytes, BodyError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let too_large = matches!(
            std::error::Error::source(&e),
            Some(cause) if cause.is::<http_body_util::LengthLimitError>()
        );
        if too_large {
            BodyError::TooLarge(limit)
        } else {
            BodyError::Unreadable
        }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn urlencoded_text_is_utf8_only_when_every_escape_decodes() {
        assert!(super::urlencoded_is_utf8(
            b"csrf=abc&content=caf%C3%A9+au+lait"
        ));
        assert!(super::urlencoded_is_utf8(b""));
        assert!(!super::urlencoded_is_utf8(b"csrf=abc&content=caf%E9"));
        assert!(!super::urlencoded_is_utf8(b"csrf=abc&%FF=x"));
        assert!(!super::urlencoded_is_utf8(b"content=\xff"));
    }

    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn forwarded_for_only_when_trusted() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("203.0.113.9, 10.0.0.1"),
        );
        let peer: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        // The right-most hop is the one our proxy appended.
        assert_eq!(client_ip(true, &h, Some(peer)), "10.0.0.1");
        assert_eq!(client_ip(false, &h, Some(peer)), "10.0.0.1");
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("1.2.3.4, 203.0.113.9"),
        );
        assert_eq!(client_ip(true, &h, Some(peer)), "203.0.113.9");
        h.append("x-forwarded-for", HeaderValue::from_static("198.51.100.4"));
        assert_eq!(client_ip(true, &h, Some(peer)), "198.51.100.4");
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("[2001:db8::1]:443"),
        );
        assert_eq!(client_ip(true, &h, Some(peer)), "2001:db8::1");
        h.insert("x-forwarded-for", HeaderValue::from_static("garbage"));
        assert_eq!(client_ip(true, &h, Some(peer)), "10.0.0.1");
        assert_eq!(client_ip(true, &h, None), "unknown");
    }

    #[test]
    fn ipv6_counts_by_its_64() {
        assert_eq!(ip_limit_key("203.0.113.9"), "203.0.113.9");
        assert_eq!(ip_limit_key("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(
            ip_limit_key("2001:db8:1:2:ffff:ffff:ffff:fffe"),
            "2001:db8:1:2::/64"
        );
        assert_ne!(ip_limit_key("2001:db8:1:3::1"), "2001:db8:1:2::/64");
        assert_eq!(ip_limit_key("::ffff:192.0.2.1"), "192.0.2.1");
        assert_eq!(
            ip_network_key("2001:db8:1:2:aaaa::1").as_deref(),
            Some("2001:db8:1::/48")
        );
        assert_eq!(
            ip_network_key("2001:db8:1:ff::1"),
            ip_network_key("2001:db8:1:2::1")
        );
        assert_eq!(ip_network_key("203.0.113.9"), None);
        assert_eq!(ip_network_key("::ffff:192.0.2.1"), None);
        assert_eq!(ip_limit_key("unknown"), "unknown");
    }

    #[test]
    fn body_types() {
        let with = |ct: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            body_type(&h)
        };
        assert_eq!(with("application/json"), BodyType::Json);
        assert_eq!(with("Application/JSON; charset=utf-8"), BodyType::Json);
        assert_eq!(with("application/merge-patch+json"), BodyType::Json);
        assert_eq!(
            with("application/x-www-form-urlencoded; charset=UTF-8"),
            BodyType::Form
        );
        assert_eq!(with("text/plain"), BodyType::Other);
        assert_eq!(with("application/jsonx"), BodyType::Other);
        assert_eq!(body_type(&HeaderMap::new()), BodyType::Other);
        assert!(!is_json(&HeaderMap::new()));
    }
}

/// What a request whose path, query or form holds U+0000 is told: no
/// field takes it (PostgreSQL cannot store it, and on SQLite it would
/// cut a name short), so it is refused before anything reads it.
pub(crate) const NUL_REFUSED: &str =
    "The request holds a NUL character (%00), which no field accepts.";

/// Does every name and value of an urlencoded form or query decode to
/// UTF-8? The form decoder replaces what does not with U+FFFD without a
/// word, which would store (or send back) a changed text as if it were
/// what was sent; the dashboard's forms and OAuth's parameters refuse it.
pub(crate) fn urlencoded_is_utf8(bytes: &[u8]) -> bool {
    bytes.split(|b| *b == b'&').all(|piece| {
        percent_encoding::percent_decode(piece)
            .decode_utf8()
            .is_ok()
    })
}

/// Whether the URI's path or query holds an encoded NUL. A raw NUL never
/// gets this far (it is not a URI character), and `%00` is its only
/// encoding; `%2500` is a `%` followed by `00`, not a NUL.
pub(crate) fn uri_holds_nul(uri: &axum::http::Uri) -> bool {
    let encoded = |s: &str| s.as_bytes().windows(3).any(|w| w == b"%00");
    encoded(uri.path()) || uri.query().is_some_and(encoded)
}

#[cfg(test)]
mod nul_tests {
    use super::uri_holds_nul;

    #[test]
    fn an_encoded_nul_is_found_in_the_path_or_the_query_and_nothing_else_is() {
        let holds = |s: &str| uri_holds_nul(&s.parse().unwrap());
        assert!(holds("/api/teams/a%00b"));
        assert!(holds("/?scope=%00"));
        assert!(holds("/x?a=1&b=z%00"));
        assert!(!holds("/api/teams/a%2500b"), "a percent sign and two zeros");
        assert!(!holds("/?q=100%25&n=00"));
        assert!(!holds("/memories/mem_0000"));
    }
}
