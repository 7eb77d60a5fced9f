//! The HTML of the browser-facing endpoint — the sign-in form and the
//! error page — and the security headers every page carries.

use std::sync::LazyLock;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

use super::authorize::AuthzRequest;
use super::no_store;

const STYLE: &str = "body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;max-width:28rem;margin:3rem auto;padding:0 1rem;color:#1b1b1b;line-height:1.45}\
h1{font-size:1.4rem}label{display:block;margin:.8rem 0 .2rem}\
input[type=email],input[type=password]{width:100%;box-sizing:border-box;padding:.5rem;font-size:1rem}\
button{margin-top:1.2rem;padding:.6rem 1.2rem;font-size:1rem}\
.muted{color:#555;font-size:.9rem}.error{color:#a40000;font-weight:600}code{word-break:break-all}";

/// The CSP of every page: nothing but our inline style, no framing.
static CSP: LazyLock<String> = LazyLock::new(|| {
    let hash = STANDARD.encode(Sha256::digest(STYLE.as_bytes()));
    format!(
        "default-src 'none'; style-src 'sha256-{hash}'; base-uri 'none'; frame-ancestors 'none'"
    )
});

fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An HTML answer with the security headers every page carries (and a
/// cookie to set, if any).
pub(super) fn html(status: StatusCode, body: String, set_cookie: Option<String>) -> Response {
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    no_store(h);
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if let Ok(v) = HeaderValue::from_str(&CSP) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    if let Some(v) = set_cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(header::SET_COOKIE, v);
    }
    resp
}

fn document(title: &str, main: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<meta name=\"referrer\" content=\"no-referrer\">\
<title>{} — zero-memory</title><style>{STYLE}</style></head>\n<body><main>\n{main}\n</main></body></html>\n",
        esc(title)
    )
}

/// The "Cannot sign in" page, naming the RFC 6749 `error` code if any.
/// It links nowhere: nothing leads the browser on to the application.
pub(super) fn error(status: StatusCode, code: Option<&str>, message: &str) -> Response {
    html(status, error_page(code, message), None)
}

fn error_page(code: Option<&str>, message: &str) -> String {
    let code = code
        .map(|c| format!("<p class=\"muted\">Error: <code>{}</code></p>\n", esc(c)))
        .unwrap_or_default();
    document(
        "Cannot sign in",
        &format!(
            "<h1>Cannot sign in</h1>\n<p class=\"error\">{}</p>\n{code}<p class=\"muted\">Nothing was sent to the application. Close this page and connect again from your application.</p>",
            esc(message)
        ),
    )
}

/// Where the browser goes after sign-in, as shown to the user.
fn destination(redirect_uri: &str) -> String {
    match url::Url::parse(redirect_uri) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u.origin().ascii_serialization(),
        Ok(u) => format!("{}:", u.scheme()),
        Err(_) => redirect_uri.to_string(),
    }
}

/// The sign-in form for a validated request, with its CSRF token, the
/// email to prefill and an error to show.
pub(super) fn login(
    server: &str,
    req: &AuthzRequest,
    csrf: &str,
    email: &str,
    error: Option<&str>,
) -> String {
    let name = req
        .client
        .client_name
        .as_deref()
        .unwrap_or("An unnamed application");
    let access = if req.scope.split(' ').any(|s| s == "mcp:write") {
        "read and write your memories"
    } else {
        "read your memories"
    };
    let mut hidden = String::new();
    let mut field = |n: &str, v: &str| {
        hidden.push_str(&format!(
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">\n",
            esc(n),
            esc(v)
        ));
    };
    field("client_id", &req.client.id);
    field("redirect_uri", &req.redirect_uri);
    field("response_type", "code");
    field("code_challenge", &req.code_challenge);
    field("code_challenge_method", "S256");
    if let Some(s) = &req.state {
        field("state", s);
    }
    if let Some(r) = &req.resource {
        field("resource", r);
    }
    field("scope", &req.scope);
    field("csrf", csrf);
    let error = error
        .map(|e| format!("<p class=\"error\" role=\"alert\">{}</p>\n", esc(e)))
        .unwrap_or_default();
    let main = format!(
        "<h1>Sign in to zero-memory</h1>\n\
<p><strong>{name}</strong> <span class=\"muted\">(name given by the application, not verified)</span> \
wants to {access} on <code>{server}</code>.</p>\n\
<p class=\"muted\">After you sign in you will be sent back to <code>{dest}</code>.</p>\n\
{error}<form method=\"post\" action=\"authorize\">\n{hidden}\
<label for=\"email\">Email</label>\n\
<input id=\"email\" type=\"email\" name=\"email\" value=\"{email}\" autocomplete=\"username\" required maxlength=\"320\">\n\
<label for=\"password\">Password</label>\n\
<input id=\"password\" type=\"password\" name=\"password\" autocomplete=\"current-password\" required>\n\
<button type=\"submit\">Sign in and allow</button>\n</form>\n\
<p class=\"muted\">Only continue if you just asked this application to connect to your memory.</p>",
        name = esc(name),
        access = access,
        server = esc(server),
        dest = esc(&destination(&req.redirect_uri)),
        error = error,
        hidden = hidden,
        email = esc(email),
    );
    document("Sign in", &main)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_destinations() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(
            destination("https://app.example.com:8443/cb?x=1"),
            "https://app.example.com:8443"
        );
        assert_eq!(
            destination("http://127.0.0.1:5555/callback"),
            "http://127.0.0.1:5555"
        );
        assert_eq!(
            destination("cursor://anysphere.cursor-retrieval/cb"),
            "cursor:"
        );
        assert_eq!(destination("not a uri"), "not a uri");
    }

    #[test]
    fn pages_carry_the_security_headers() {
        let r = error(StatusCode::BAD_REQUEST, Some("invalid_request"), "<nope>");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let h = r.headers();
        assert_eq!(h[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert_eq!(h[header::CACHE_CONTROL], "no-store");
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(h["referrer-policy"], "no-referrer");
        assert!(
            h[header::CONTENT_SECURITY_POLICY]
                .to_str()
                .unwrap()
                .contains("style-src 'sha256-")
        );
        assert!(h.get(header::SET_COOKIE).is_none());
    }
}
