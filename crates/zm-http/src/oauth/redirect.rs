//! The redirect-URI policy: which URIs a client may register, which a
//! request may name, and how the browser is sent back.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::no_store;

/// Schemes never accepted as redirect URIs.
const FORBIDDEN_SCHEMES: &[&str] = &["javascript", "data", "vbscript", "file", "blob"];
/// Private-use schemes without a dot that are accepted anyway: those of
/// widely used MCP clients (Cursor registers `cursor://anysphere.…`).
const KNOWN_APP_SCHEMES: &[&str] = &["cursor"];
/// Redirect URIs one client may register at most.
const MAX_REDIRECT_URIS: usize = 20;
/// Longest redirect URI.
const MAX_REDIRECT_URI_LEN: usize = 2048;
/// Most characters one client's redirect URIs hold together: a
/// registration is anonymous, so what one may store is bounded (a client
/// registers one to a few short URIs).
const MAX_REDIRECT_URIS_LEN: usize = 8192;

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip == std::net::Ipv4Addr::LOCALHOST,
        Some(url::Host::Ipv6(ip)) => ip == std::net::Ipv6Addr::LOCALHOST,
        None => false,
    }
}

/// The redirect-URI policy: https anywhere; http on loopback only; private-use
/// schemes only reverse-DNS style (with a dot) or a known MCP client's, never
/// the dangerous ones; no fragment; no credentials.
pub(crate) fn check_redirect_uri(raw: &str) -> Result<(), String> {
    if raw.is_empty() || raw.len() > MAX_REDIRECT_URI_LEN {
        return Err(format!("must be 1..{MAX_REDIRECT_URI_LEN} characters"));
    }
    if !raw.is_ascii() {
        return Err("must be ASCII (percent-encode anything else)".into());
    }
    if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("must not contain whitespace or control characters".into());
    }
    if raw.contains('#') {
        return Err("must not contain a fragment".into());
    }
    let url = url::Url::parse(raw).map_err(|_| "is not an absolute URI".to_string())?;
    let scheme = url.scheme();
    if FORBIDDEN_SCHEMES.contains(&scheme) {
        return Err(format!("uses the forbidden scheme {scheme:?}"));
    }
    if !url.username().is_empty() || url.password().is_some() || url.authority().contains('@') {
        return Err("must not embed credentials".into());
    }
    if scheme == "https" && url.host().is_none() {
        return Err("needs a host".into());
    }
    if scheme == "http" && !is_loopback(&url) {
        return Err("may use http only on localhost, 127.0.0.1 or [::1]; use https".into());
    }
    // A private-use scheme must be reverse-DNS style (RFC 8252 §7.1), so
    // it names its app and is not some handler a browser happens to have.
    if scheme != "https"
        && scheme != "http"
        && !scheme.contains('.')
        && !KNOWN_APP_SCHEMES.contains(&scheme)
    {
        return Err(format!(
            "uses the scheme {scheme:?}: use https, loopback http, or a reverse-DNS private scheme such as com.example.app"
        ));
    }
    Ok(())
}

/// The `redirect_uris` of a registration (RFC 7591 §2): 1..20 URIs, each
/// passing [`check_redirect_uri`], deduplicated in order. `Err` is the
/// `invalid_redirect_uri` description.
pub(super) fn registration(uris: Option<&Value>) -> Result<Vec<String>, String> {
    let Some(Value::Array(uris)) = uris else {
        return Err("redirect_uris must be a non-empty array of URIs.".into());
    };
    if uris.is_empty() || uris.len() > MAX_REDIRECT_URIS {
        return Err(format!(
            "redirect_uris must hold 1..{MAX_REDIRECT_URIS} URIs."
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(uris.len());
    for (i, u) in uris.iter().enumerate() {
        let Some(u) = u.as_str() else {
            return Err(format!("redirect_uris[{i}] must be a string."));
        };
        if let Err(why) = check_redirect_uri(u) {
            return Err(format!("redirect_uris[{i}] {why}."));
        }
        if !out.iter().any(|x| x == u) {
            out.push(u.to_string());
        }
    }
    let total: usize = out.iter().map(String::len).sum();
    if total > MAX_REDIRECT_URIS_LEN {
        return Err(format!(
            "redirect_uris must hold at most {MAX_REDIRECT_URIS_LEN} characters together."
        ));
    }
    Ok(out)
}

/// Does `requested` match one of the registered redirect URIs? Exact, except
/// that a loopback http URI ignores the port (host, path and query must
/// still match).
pub(super) fn registered(registered: &[String], requested: &str) -> bool {
    if check_redirect_uri(requested).is_err() {
        return false;
    }
    registered.iter().any(|r| {
        r == requested || {
            match (url::Url::parse(r), url::Url::parse(requested)) {
                (Ok(a), Ok(b)) => {
                    a.scheme() == "http"
                        && b.scheme() == "http"
                        && is_loopback(&a)
                        && is_loopback(&b)
                        && a.host_str() == b.host_str()
                        && a.path() == b.path()
                        && a.query() == b.query()
                }
                _ => false,
            }
        }
    })
}

/// `uri` with query parameters appended (redirect URIs carry no fragment).
pub(super) fn with_query(uri: &str, params: &[(&str, &str)]) -> String {
    let encoded = serde_urlencoded::to_string(params).unwrap_or_default();
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}{encoded}")
}

/// A 302 to `location`, uncached, sending no referrer.
pub(super) fn found(location: &str) -> Response {
    let mut resp = StatusCode::FOUND.into_response();
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(location) {
        h.insert(header::LOCATION, v);
    }
    no_store(h);
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_policy() {
        for ok in [
            "https://app.example.com/cb",
            "https://app.example.com/cb?x=1",
            "http://localhost/cb",
            "http://localhost:33418/callback",
            "http://127.0.0.1:8080/cb",
            "http://[::1]:9000/cb",
            "com.example.app:/oauth2redirect",
            "com.cursor.app://callback",
            "cursor://anysphere.cursor-retrieval/oauth/callback",
        ] {
            assert!(check_redirect_uri(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://example.com/cb",
            "http://localhost.evil.com/cb",
            "http://127.0.0.2/cb",
            "javascript:alert(1)",
            "JavaScript:alert(1)",
            "myapp:/cb",
            "ms-settings:x",
            "data:text/html,hi",
            "vbscript:x",
            "file:///etc/passwd",
            "blob:https://x/y",
            "https://app.example.com/cb#frag",
            "https://user:pw@app.example.com/cb",
            "https://user@app.example.com/cb",
            "myapp://u:p@host/cb",
            "/relative",
            "https://app.example.com/ cb",
            "https://例え.jp/cb",
            "",
        ] {
            assert!(check_redirect_uri(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_redirects_ignore_the_port_only() {
        let reg = vec![
            "http://127.0.0.1/callback".to_string(),
            "https://app.example.com/cb".to_string(),
        ];
        assert!(registered(&reg, "http://127.0.0.1:5555/callback"));
        assert!(registered(&reg, "http://127.0.0.1/callback"));
        assert!(!registered(&reg, "http://127.0.0.1:5555/other"));
        assert!(!registered(&reg, "http://127.0.0.1:5555/callback?x=1"));
        assert!(!registered(&reg, "http://localhost:5555/callback"));
        assert!(!registered(&reg, "https://app.example.com:444/cb"));
        assert!(registered(&reg, "https://app.example.com/cb"));
        assert!(!registered(&reg, "https://app.example.com/cb/"));
    }

    #[test]
    fn the_code_goes_back_appended_to_the_registered_query() {
        let code = [
            ("code", "c 1"),
            ("state", "s&1"),
            ("iss", "https://m.example"),
        ];
        assert_eq!(
            with_query("http://127.0.0.1:5555/cb?a=1", &code),
            "http://127.0.0.1:5555/cb?a=1&code=c+1&state=s%261&iss=https%3A%2F%2Fm.example"
        );
        assert_eq!(
            with_query("com.example.app:/cb", &code[..1]),
            "com.example.app:/cb?code=c+1"
        );
        let resp = found("https://app.example.com/cb?code=x");
        assert_eq!(resp.status(), StatusCode::FOUND);
        let h = resp.headers();
        assert_eq!(h[header::LOCATION], "https://app.example.com/cb?code=x");
        assert_eq!(h[header::CACHE_CONTROL], "no-store");
        assert_eq!(h["referrer-policy"], "no-referrer");
    }

    #[test]
    fn registrations() {
        use serde_json::json;
        let ok = json!([
            "https://a.example/cb",
            "http://127.0.0.1/cb",
            "https://a.example/cb"
        ]);
        assert_eq!(
            registration(Some(&ok)).unwrap(),
            vec!["https://a.example/cb", "http://127.0.0.1/cb"]
        );
        assert!(registration(None).is_err());
        assert!(registration(Some(&json!([]))).is_err());
        assert!(registration(Some(&json!("https://a.example/cb"))).is_err());
        assert_eq!(
            registration(Some(&json!(["https://a.example/cb", 3]))).unwrap_err(),
            "redirect_uris[1] must be a string."
        );
        assert_eq!(
            registration(Some(&json!(["http://example.com/cb"]))).unwrap_err(),
            "redirect_uris[0] may use http only on localhost, 127.0.0.1 or [::1]; use https."
        );
        let many: Vec<String> = (0..21).map(|i| format!("https://a.example/{i}")).collect();
        assert!(registration(Some(&json!(many))).is_err());
        // Four long URIs fit (8,188 characters), a fifth does not.
        let long = |i: usize| format!("https://a.example/{i}/{}", "p".repeat(2027));
        let four: Vec<String> = (0..4).map(long).collect();
        assert_eq!(four.iter().map(String::len).sum::<usize>(), 8188);
        assert_eq!(registration(Some(&json!(four))).unwrap().len(), 4);
        let five: Vec<String> = (0..5).map(long).collect();
        assert_eq!(
            registration(Some(&json!(five))).unwrap_err(),
            "redirect_uris must hold at most 8192 characters together."
        );
    }
}
