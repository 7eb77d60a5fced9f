//! The OAuth 2.1 authorization server for MCP clients (`reference.md` §7.4,
//! with our own opaque tokens).
//!
//! - `GET /.well-known/oauth-authorization-server`: RFC 8414 metadata
//!   ([`metadata`]).
//! - `POST /oauth/register`: RFC 7591 dynamic registration of public
//!   clients (`register`).
//! - `GET /oauth/authorize`: validates the request and renders the sign-in
//!   page; `POST /oauth/authorize`: checks the form and the credentials and
//!   redirects back with a single-use code (`authorize`).
//! - `POST /oauth/token`: `authorization_code` (PKCE S256 mandatory) and
//!   `refresh_token` (rotating; a replayed refresh token revokes its family)
//!   (`token`).
//! - `POST /oauth/revoke`: RFC 7009 revocation by the client holding the
//!   token (`token::revoke`).
//!
//! Every failure is an [`OauthRejection`]: an RFC 6749 body
//! `{error, error_description}`, or on the browser-facing endpoint an HTML
//! page (never a redirect: a request's errors are found before anyone has
//! signed in, and a registered redirect URI proves nothing, RFC 9700
//! §4.11.2) — never the taxonomy body. The
//! four POST endpoints and `GET /oauth/authorize` are limited per client
//! IP and endpoint (`limit`); their parameters are read by extractors that
//! refuse repeats and more than 64 parameters (`params`). Failed sign-ins
//! also back off per account, whatever the IP (`limit::LoginBackoff`).
//! A busy database is a 503 `temporarily_unavailable` with `Retry-After`
//! (`error::store_failure`).
//! The redirect-URI rules live in `redirect`, the HTML and its security
//! headers in `pages`; behind an https public URL every answer carries
//! `Strict-Transport-Security` too (`crate::state::strict_transport`).
//!
//! CSRF (`csrf`): `GET /oauth/authorize` sets a random cookie (`HttpOnly`,
//! `SameSite=Lax`) and puts in the form a token that is an HMAC, under a
//! key stored in the database (`server_secrets`: every instance on one
//! database accepts a form another rendered), of that cookie, a timestamp
//! and the validated request. The POST needs the same cookie, an unexpired token over the very
//! same request, and — when the browser sends them — an `Origin`/`Referer`
//! of our public URL. The page's `Referrer-Policy: no-referrer` makes
//! browsers send `Origin: null` on the form post, which is therefore
//! accepted; the cookie-bound token is the real check.

mod authorize;
pub(crate) mod csrf;
mod error;
pub(crate) mod limit;
mod metadata;
mod pages;
mod params;
mod redirect;
mod register;
mod token;

use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::routing::{get, post};

use crate::state::AppState;

pub use error::OauthRejection;
pub use metadata::metadata;

/// What the OAuth routes share: the app state, the CSRF key and the
/// per-account sign-in back-off.
#[derive(Clone)]
pub struct OauthState {
    app: AppState,
    key: Arc<[u8; 32]>,
    backoff: Arc<limit::LoginBackoff>,
}

impl FromRef<OauthState> for AppState {
    fn from_ref(st: &OauthState) -> AppState {
        st.app.clone()
    }
}

/// The OAuth routes (merge into the main router before its layers).
pub fn routes(app: AppState) -> Router {
    let backoff = app.login_backoff.clone();
    let state = OauthState {
        key: Arc::new(*app.store.form_key()),
        app,
        backoff,
    };
    Router::new()
        .route("/.well-known/oauth-authorization-server", get(metadata))
        .route(
            "/oauth/register",
            post(register::register).fallback(post_only),
        )
        .route(
            "/oauth/authorize",
            get(authorize::page)
                .post(authorize::submit)
                .fallback(get_or_post),
        )
        .route("/oauth/token", post(token::token).fallback(post_only))
        .route("/oauth/revoke", post(token::revoke).fallback(post_only))
        .with_state(state)
}

async fn post_only() -> OauthRejection {
    OauthRejection::MethodNotAllowed("POST")
}

async fn get_or_post() -> OauthRejection {
    OauthRejection::MethodNotAllowed("GET, POST")
}

/// Nothing an OAuth endpoint answers may be cached.
fn no_store(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
}

/// The resource indicator (RFC 8707) we accept: our `/mcp`, compared as
/// URLs in the public URL's own spelling (`HTTPS://Memory.Example.com:443/mcp/`
/// is ours when the public URL is `https://memory.example.com`).
fn resource_ok(public_url: &str, resource: &str) -> bool {
    crate::state::normalise_base(resource) == format!("{public_url}/mcp")
}

#[cfg(test)]
mod resource_tests {
    use super::resource_ok;

    #[test]
    fn the_resource_is_compared_as_a_url() {
        let ours = "https://memory.example.com";
        for r in [
            "https://memory.example.com/mcp",
            "https://memory.example.com/mcp/",
            "HTTPS://Memory.Example.com:443/mcp",
        ] {
            assert!(resource_ok(ours, r), "{r}");
        }
        for r in [
            "https://memory.example.com/MCP",
            "https://memory.example.com:8443/mcp",
            "http://memory.example.com/mcp",
            "https://evil.example/mcp",
            "https://memory.example.com/mcp/x",
        ] {
            assert!(!resource_ok(ours, r), "{r}");
        }
    }
}
