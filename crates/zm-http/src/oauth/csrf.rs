//! CSRF protection of the sign-in form: a random cookie, a form token that
//! is an HMAC of that cookie, a timestamp and the validated request, and
//! the `Origin`/`Referer` check.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::state::{CookieScope, origin_of};

/// How long a rendered sign-in form (and a fresh cookie) stays valid.
pub(super) const TTL_SECS: u64 = 600;
/// The cookie's name.
const COOKIE: &str = "zm_oauth_csrf";

/// A fresh random cookie value (32 bytes, base64url).
pub(crate) fn new_cookie() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>())
}

/// The CSRF cookie value of a request to the server at `public_url`, if
/// well-formed.
pub(super) fn cookie(public_url: &str, headers: &HeaderMap) -> Option<String> {
    CookieScope::of(public_url, "/oauth")
        .read(headers, COOKIE)
        .filter(|v| well_formed(v))
}

/// Is `value` shaped like a cookie [`new_cookie`] makes?
pub(crate) fn well_formed(value: &str) -> bool {
    value.len() == 43 && URL_SAFE_NO_PAD.decode(value).is_ok()
}

/// The `Set-Cookie` value for `value` (an empty value and `max_age` 0
/// clear it), scoped to our `/oauth` path under the public URL's
/// ([`CookieScope`]), `Secure` behind https.
pub(super) fn set_cookie(public_url: &str, value: &str, max_age: u64) -> String {
    CookieScope::of(public_url, "/oauth").set_cookie(COOKIE, value, max_age, "Lax")
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn mac(key: &[u8; 32], cookie: &str, ts: u64, canonical: &str) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(b"zm-oauth-csrf/v1\0");
    mac.update(cookie.as_bytes());
    mac.update(b"\0");
    mac.update(ts.to_string().as_bytes());
    mac.update(b"\0");
    mac.update(canonical.as_bytes());
    mac
}

/// The form token binding `cookie` to the request whose canonical form is
/// `canonical`, as of now.
pub(crate) fn token(key: &[u8; 32], cookie: &str, canonical: &str) -> String {
    let ts = now_secs();
    let tag = mac(key, cookie, ts, canonical).finalize().into_bytes();
    format!("{ts}.{}", URL_SAFE_NO_PAD.encode(tag))
}

/// Was `token` made for this cookie and request, and is it unexpired?
pub(crate) fn valid(key: &[u8; 32], cookie: &str, token: &str, canonical: &str) -> bool {
    let Some((ts, tag)) = token.split_once('.') else {
        return false;
    };
    let (Ok(ts), Ok(tag)) = (ts.parse::<u64>(), URL_SAFE_NO_PAD.decode(tag)) else {
        return false;
    };
    let now = now_secs();
    if ts > now + 60 || now.saturating_sub(ts) > TTL_SECS {
        return false;
    }
    mac(key, cookie, ts, canonical).verify_slice(&tag).is_ok()
}

/// `Origin` and `Referer`, when sent, must be ours (`Origin: null` is what
/// our own no-referrer page produces, so it passes).
pub(super) fn same_origin(public_url: &str, headers: &HeaderMap) -> bool {
    let ours = origin_of(public_url);
    if let Some(o) = headers.get(header::ORIGIN) {
        let o = o.to_str().unwrap_or("?");
        if o != "null" && Some(o.to_string()) != ours {
            return false;
        }
    }
    if let Some(r) = headers.get(header::REFERER) {
        let r = r.to_str().unwrap_or("?");
        if origin_of(r) != ours {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn origin_check() {
        let base = "https://memory.example.com";
        let mut h = HeaderMap::new();
        assert!(same_origin(base, &h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(same_origin(base, &h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://memory.example.com"),
        );
        assert!(same_origin(base, &h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!same_origin(base, &h));
        h.remove(header::ORIGIN);
        h.insert(
            header::REFERER,
            HeaderValue::from_static("https://evil.example/x"),
        );
        assert!(!same_origin(base, &h));
    }

    #[test]
    fn tokens_bind_the_cookie_and_the_request() {
        let key = [7u8; 32];
        let c = new_cookie();
        let t = token(&key, &c, "req-1");
        assert!(valid(&key, &c, &t, "req-1"));
        assert!(!valid(&key, &c, &t, "req-2"));
        assert!(!valid(&key, &new_cookie(), &t, "req-1"));
        assert!(!valid(&[8u8; 32], &c, &t, "req-1"));
        let (_, tag) = t.split_once('.').unwrap();
        let old = format!("{}.{tag}", now_secs() - TTL_SECS - 1);
        assert!(!valid(&key, &c, &old, "req-1"));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {COOKIE}={c}")).unwrap(),
        );
        assert_eq!(cookie("http://127.0.0.1:8787", &h), Some(c.clone()));
        // Behind https only the prefixed name is ours.
        assert_eq!(cookie("https://m.example", &h), None);
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("__Secure-{COOKIE}={c}")).unwrap(),
        );
        assert_eq!(cookie("https://m.example", &h), Some(c));
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("zm_oauth_csrf=short"),
        );
        assert_eq!(cookie("http://127.0.0.1:8787", &h), None);
    }
}
