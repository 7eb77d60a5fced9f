//! The OAuth 2.1 authorization server for MCP clients (`reference.md` §7.4,
//! with our own opaque tokens).
//!
//! - `GET /.well-known/oauth-authorization-server`: RFC 8414 metadata.
//! - `POST /oauth/register`: RFC 7591 dynamic registration (public clients).
//! - `GET /oauth/authorize`: validates the request and renders the sign-in
//!   page; `POST /oauth/authorize`: checks the form and the credentials and
//!   redirects back with a single-use code.
//! - `POST /oauth/token`: `authorization_code` (PKCE S256 mandatory) and
//!   `refresh_token` (rotating; a replayed refresh token revokes its family).
//!
//! Every error here is an RFC 6749 body `{error, error_description}` (or an
//! HTML page on the browser-facing endpoint), never the taxonomy body. The
//! three POST endpoints are limited per client IP and route.
//!
//! CSRF: `GET /oauth/authorize` sets a random cookie (`HttpOnly`,
//! `SameSite=Lax`) and puts in the form a token that is an HMAC, under a
//! per-router random key, of that cookie, a timestamp and the validated
//! request. The POST needs the same cookie, an unexpired token over the very
//! same request, and — when the browser sends them — an `Origin`/`Referer`
//! of our public URL. The page's `Referrer-Policy: no-referrer` makes
//! browsers send `Origin: null` on the form post, which is therefore
//! accepted; the cookie-bound token is the real check.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use zm_store::oauth::{
    CodeExchange, IssuedTokens, NewCode, OAUTH_SCOPES, OauthClient, parse_scope,
};

use crate::request::{BodyType, body_type, is_json};
use crate::state::{AppState, origin_of};

/// Largest body accepted on the OAuth endpoints.
const OAUTH_BODY_LIMIT: usize = 64 * 1024;
/// How long a rendered sign-in form stays valid.
const CSRF_TTL_SECS: u64 = 600;
/// The CSRF cookie.
const CSRF_COOKIE: &str = "zm_oauth_csrf";
/// Schemes never accepted as redirect URIs.
const FORBIDDEN_SCHEMES: &[&str] = &["javascript", "data", "vbscript", "file", "blob"];
/// Redirect URIs one client may register at most.
const MAX_REDIRECT_URIS: usize = 20;
/// Longest redirect URI.
const MAX_REDIRECT_URI_LEN: usize = 2048;
/// Longest `state`.
const MAX_STATE_LEN: usize = 2048;

/// What the OAuth routes share: the app state and the CSRF key.
#[derive(Clone)]
pub struct OauthState {
    app: AppState,
    key: Arc<[u8; 32]>,
}

/// The OAuth routes (merge into the main router before its layers).
pub fn routes(app: AppState) -> Router {
    let state = OauthState {
        app,
        key: Arc::new(rand::random()),
    };
    Router::new()
        .route("/.well-known/oauth-authorization-server", get(metadata))
        .route("/oauth/register", post(register).fallback(post_only))
        .route(
            "/oauth/authorize",
            get(authorize_page)
                .post(authorize_submit)
                .fallback(get_or_post),
        )
        .route("/oauth/token", post(token).fallback(post_only))
        .with_state(state)
}

// ---------------------------------------------------------------------------
// Shared helpers

/// An RFC 6749 error body.
fn oauth_error(status: StatusCode, error: &str, description: impl Into<String>) -> Response {
    let mut resp = (
        status,
        axum::Json(json!({"error": error, "error_description": description.into()})),
    )
        .into_response();
    no_store(resp.headers_mut());
    resp
}

fn no_store(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
}

fn bad_request(error: &str, description: impl Into<String>) -> Response {
    oauth_error(StatusCode::BAD_REQUEST, error, description)
}

fn not_allowed(allow: &'static str) -> Response {
    let mut resp = oauth_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request",
        format!("This endpoint accepts {allow} only."),
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

async fn post_only() -> Response {
    not_allowed("POST")
}

async fn get_or_post() -> Response {
    not_allowed("GET, POST")
}

/// The id the request-id middleware adopted or minted.
fn request_id(req: &axum::http::request::Parts) -> Option<String> {
    req.extensions
        .get::<crate::request::RequestId>()
        .map(|r| r.0.clone())
}

/// The client IP: the socket address, or the first `X-Forwarded-For` hop
/// when the proxy is trusted.
pub fn client_ip(trust_proxy: bool, headers: &HeaderMap, peer: Option<SocketAddr>) -> String {
    if trust_proxy
        && let Some(first) = headers
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(str::trim)
    {
        let ip = first
            .parse::<IpAddr>()
            .ok()
            .or_else(|| first.parse::<SocketAddr>().ok().map(|s| s.ip()));
        if let Some(ip) = ip {
            return ip.to_string();
        }
    }
    peer.map(|p| p.ip().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The client IP of a request (see [`client_ip`]).
fn ip_of(st: &OauthState, req: &Request) -> String {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    client_ip(st.app.cfg.trust_proxy, req.headers(), peer)
}

/// The rate-limit key of a request on `route` (`None`: no limit set).
fn limit_key_of(st: &OauthState, route: &str, req: &Request) -> Option<String> {
    (st.app.cfg.oauth_rate_max > 0).then(|| format!("oauth:{route}:{}", ip_of(st, req)))
}

/// Count one request for `key`; the 429 answer when over the limit.
async fn rate_limit(st: &OauthState, key: Option<String>) -> Result<(), Response> {
    let Some(key) = key else { return Ok(()) };
    limit_key(st, key).await
}

async fn limit_key(st: &OauthState, key: String) -> Result<(), Response> {
    let cfg = &st.app.cfg;
    match st
        .app
        .limiter
        .hit(&key, cfg.oauth_rate_max, cfg.oauth_rate_window)
        .await
    {
        Ok(()) => Ok(()),
        Err(secs) => {
            st.app
                .metrics
                .rate_limited
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut resp = oauth_error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                "Too many requests. Retry later.",
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
            Err(resp)
        }
    }
}

/// Request parameters (form or JSON), each at most once; an empty value
/// counts as absent (RFC 6749 §3.1).
#[derive(Debug, Default)]
struct Params(Vec<(String, String)>);

impl Params {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }
    fn from_pairs(pairs: Vec<(String, String)>) -> Result<Params, String> {
        for (i, (k, _)) in pairs.iter().enumerate() {
            if pairs[..i].iter().any(|(p, _)| p == k) {
                return Err(format!("The parameter {k:?} is repeated."));
            }
        }
        Ok(Params(pairs))
    }
    fn from_query(query: Option<&str>) -> Result<Params, String> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
            .map_err(|_| "The query string is malformed.".to_string())?;
        Params::from_pairs(pairs)
    }
}

async fn body_bytes(st: &OauthState, body: Body) -> Result<bytes::Bytes, String> {
    let limit = st.app.cfg.body_limit.min(OAUTH_BODY_LIMIT);
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| format!("The body is larger than {limit} bytes."))
}

/// Parse a form (or, when `json_ok`, a JSON object of strings) body.
async fn read_params(
    st: &OauthState,
    headers: &HeaderMap,
    body: Body,
    json_ok: bool,
) -> Result<Params, String> {
    let kind = body_type(headers);
    let bytes = body_bytes(st, body).await?;
    if kind == BodyType::Form {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes)
            .map_err(|_| "The form body is malformed.".to_string())?;
        return Params::from_pairs(pairs);
    }
    if json_ok && kind == BodyType::Json {
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|_| "The body is not valid JSON.".to_string())?;
        let Value::Object(o) = v else {
            return Err("The body must be a JSON object.".into());
        };
        let mut pairs = Vec::with_capacity(o.len());
        for (k, v) in o {
            match v {
                Value::String(s) => pairs.push((k, s)),
                Value::Null => {}
                _ => return Err(format!("The parameter {k:?} must be a string.")),
            }
        }
        return Params::from_pairs(pairs);
    }
    Err(if json_ok {
        "The body must be application/x-www-form-urlencoded or application/json.".into()
    } else {
        "The body must be application/x-www-form-urlencoded.".into()
    })
}

/// `BASE64URL(SHA256(verifier))`.
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// 43..128 characters of the RFC 3986 unreserved set (PKCE verifiers and
/// challenges).
fn is_pkce_string(s: &str) -> bool {
    (43..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// The resource indicator (RFC 8707) we accept: our `/mcp`.
fn resource_ok(public_url: &str, resource: &str) -> bool {
    resource.trim_end_matches('/') == format!("{public_url}/mcp")
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------
// Redirect URIs

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip == std::net::Ipv4Addr::LOCALHOST,
        Some(url::Host::Ipv6(ip)) => ip == std::net::Ipv6Addr::LOCALHOST,
        None => false,
    }
}

/// The redirect-URI policy: https anywhere; http on loopback only; private-use
/// schemes except the dangerous ones; no fragment; no credentials.
pub fn check_redirect_uri(raw: &str) -> Result<(), String> {
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
    Ok(())
}

/// Does `requested` match one of the registered redirect URIs? Exact, except
/// that a loopback http URI ignores the port (host, path and query must
/// still match).
fn redirect_registered(registered: &[String], requested: &str) -> bool {
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
fn with_query(uri: &str, params: &[(&str, &str)]) -> String {
    let encoded = serde_urlencoded::to_string(params).unwrap_or_default();
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}{encoded}")
}

fn found(location: &str) -> Response {
    let mut resp = StatusCode::FOUND.into_response();
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(location) {
        h.insert(header::LOCATION, v);
    }
    no_store(h);
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    resp
}

// ---------------------------------------------------------------------------
// Metadata and registration

/// RFC 8414 authorization-server metadata.
pub async fn metadata(State(st): State<OauthState>) -> Response {
    let base = &st.app.cfg.public_url;
    (
        [(header::CACHE_CONTROL, "public, max-age=3600")],
        axum::Json(json!({
            "issuer": base,
            "authorization_endpoint": format!("{base}/oauth/authorize"),
            "token_endpoint": format!("{base}/oauth/token"),
            "registration_endpoint": format!("{base}/oauth/register"),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "scopes_supported": OAUTH_SCOPES,
            "authorization_response_iss_parameter_supported": true,
        })),
    )
        .into_response()
}

/// `POST /oauth/register` (RFC 7591).
async fn register(State(st): State<OauthState>, req: Request) -> Response {
    if let Err(r) = rate_limit(&st, limit_key_of(&st, "register", &req)).await {
        return r;
    }
    let (parts, body) = req.into_parts();
    let meta = |d: &str| bad_request("invalid_client_metadata", d);
    if !is_json(&parts.headers) {
        return meta("The body must be JSON (Content-Type: application/json).");
    }
    let bytes = match body_bytes(&st, body).await {
        Ok(b) => b,
        Err(e) => return meta(&e),
    };
    let Ok(Value::Object(doc)) = serde_json::from_slice::<Value>(&bytes) else {
        return meta("The body must be a JSON object.");
    };
    let client_name = match doc.get("client_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            let n = s.chars().count();
            if !(1..=256).contains(&n) || s.chars().any(char::is_control) {
                return meta("client_name must be 1..256 characters, without control characters.");
            }
            Some(s.clone())
        }
        Some(_) => return meta("client_name must be a string."),
    };
    match doc.get("token_endpoint_auth_method") {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if m == "none" => {}
        Some(_) => {
            return meta(
                "Only public clients are supported: token_endpoint_auth_method must be \"none\".",
            );
        }
    }
    let Some(Value::Array(uris)) = doc.get("redirect_uris") else {
        return bad_request(
            "invalid_redirect_uri",
            "redirect_uris must be a non-empty array of URIs.",
        );
    };
    if uris.is_empty() || uris.len() > MAX_REDIRECT_URIS {
        return bad_request(
            "invalid_redirect_uri",
            format!("redirect_uris must hold 1..{MAX_REDIRECT_URIS} URIs."),
        );
    }
    let mut redirect_uris = Vec::with_capacity(uris.len());
    for (i, u) in uris.iter().enumerate() {
        let Some(u) = u.as_str() else {
            return bad_request(
                "invalid_redirect_uri",
                format!("redirect_uris[{i}] must be a string."),
            );
        };
        if let Err(why) = check_redirect_uri(u) {
            return bad_request("invalid_redirect_uri", format!("redirect_uris[{i}] {why}."));
        }
        if !redirect_uris.iter().any(|x: &String| x == u) {
            redirect_uris.push(u.to_string());
        }
    }
    let rid = request_id(&parts);
    let client = match st
        .app
        .store
        .register_oauth_client(client_name.as_deref(), &redirect_uris, rid.as_deref())
        .await
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(target: "zm_http", error = %e, "oauth registration failed");
            return oauth_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "Internal server error.",
            );
        }
    };
    let mut body = json!({
        "client_id": client.id,
        "redirect_uris": client.redirect_uris,
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "scope": OAUTH_SCOPES.join(" "),
        "client_id_issued_at": client.created_at / 1000,
    });
    if let Some(n) = &client.client_name {
        body["client_name"] = json!(n);
    }
    let mut resp = (StatusCode::CREATED, axum::Json(body)).into_response();
    no_store(resp.headers_mut());
    resp
}

// ---------------------------------------------------------------------------
// Authorization

/// A validated authorization request.
struct AuthzRequest {
    client: OauthClient,
    redirect_uri: String,
    code_challenge: String,
    state: Option<String>,
    resource: Option<String>,
    scope: String,
}

impl AuthzRequest {
    /// What the CSRF token covers.
    fn canonical(&self) -> String {
        serde_json::to_string(&[
            self.client.id.as_str(),
            self.redirect_uri.as_str(),
            self.code_challenge.as_str(),
            self.state.as_deref().unwrap_or(""),
            self.resource.as_deref().unwrap_or(""),
            self.scope.as_str(),
        ])
        .unwrap_or_default()
    }
}

/// Why an authorization request fails.
enum AuthzFail {
    /// Client or redirect URI cannot be trusted: an HTML page, never a redirect.
    Page(StatusCode, String),
    /// Everything else, once the redirect URI is known good (RFC 6749 §4.1.2.1).
    Redirect {
        redirect_uri: String,
        state: Option<String>,
        error: &'static str,
        description: String,
    },
}

async fn validate_authz(st: &OauthState, p: &Params) -> Result<AuthzRequest, AuthzFail> {
    let page = |m: &str| AuthzFail::Page(StatusCode::BAD_REQUEST, m.to_string());
    let Some(client_id) = p.get("client_id") else {
        return Err(page("The request names no client (client_id is missing)."));
    };
    let client = match st.app.store.oauth_client(client_id).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Err(page(
                "Unknown client. The application is not registered with this server; ask it to connect again.",
            ));
        }
        Err(_) => {
            return Err(AuthzFail::Page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Internal server error.".into(),
            ));
        }
    };
    let Some(redirect_uri) = p.get("redirect_uri") else {
        return Err(page("The request has no redirect_uri."));
    };
    if !redirect_registered(&client.redirect_uris, redirect_uri) {
        return Err(page(
            "The redirect_uri is not registered for this client, so this server will not send you there.",
        ));
    }
    let redirect_uri = redirect_uri.to_string();
    let state = p.get("state").map(str::to_string);
    let fail = |state: Option<String>, error: &'static str, description: &str| {
        Err(AuthzFail::Redirect {
            redirect_uri: redirect_uri.clone(),
            state,
            error,
            description: description.to_string(),
        })
    };
    if state.as_ref().is_some_and(|s| s.len() > MAX_STATE_LEN) {
        return fail(
            None,
            "invalid_request",
            "state is longer than 2048 characters.",
        );
    }
    match p.get("response_type") {
        Some("code") => {}
        None => return fail(state, "invalid_request", "response_type is required."),
        Some(_) => {
            return fail(
                state,
                "unsupported_response_type",
                "Only response_type=code is supported.",
            );
        }
    }
    let Some(challenge) = p.get("code_challenge") else {
        return fail(
            state,
            "invalid_request",
            "code_challenge is required (PKCE with S256).",
        );
    };
    if !is_pkce_string(challenge) {
        return fail(
            state,
            "invalid_request",
            "code_challenge must be 43..128 unreserved characters.",
        );
    }
    if p.get("code_challenge_method") != Some("S256") {
        return fail(
            state,
            "invalid_request",
            "code_challenge_method must be S256.",
        );
    }
    let resource = p.get("resource").map(str::to_string);
    if let Some(r) = &resource
        && !resource_ok(&st.app.cfg.public_url, r)
    {
        return fail(
            state,
            "invalid_target",
            &format!("resource must be {}/mcp.", st.app.cfg.public_url),
        );
    }
    let scope = match parse_scope(p.get("scope")) {
        Ok(s) => s,
        Err(bad) => {
            return fail(
                state,
                "invalid_scope",
                &format!("Unknown scope {bad:?}; supported: mcp:read mcp:write."),
            );
        }
    };
    Ok(AuthzRequest {
        client,
        code_challenge: challenge.to_string(),
        redirect_uri,
        state,
        resource,
        scope,
    })
}

fn fail_response(st: &OauthState, fail: AuthzFail) -> Response {
    match fail {
        AuthzFail::Page(status, msg) => html(status, error_page(&msg), None),
        AuthzFail::Redirect {
            redirect_uri,
            state,
            error,
            description,
        } => {
            let mut params = vec![
                ("error", error),
                ("error_description", description.as_str()),
            ];
            if let Some(s) = &state {
                params.push(("state", s));
            }
            params.push(("iss", &st.app.cfg.public_url));
            found(&with_query(&redirect_uri, &params))
        }
    }
}

/// The CSRF cookie value of a request, if well-formed.
fn csrf_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == CSRF_COOKIE)
        .map(|(_, v)| v.to_string())
        .filter(|v| v.len() == 43 && URL_SAFE_NO_PAD.decode(v).is_ok())
}

fn csrf_mac(key: &[u8; 32], cookie: &str, ts: u64, canonical: &str) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    mac.update(b"zm-oauth-csrf/v1\0");
    mac.update(cookie.as_bytes());
    mac.update(b"\0");
    mac.update(ts.to_string().as_bytes());
    mac.update(b"\0");
    mac.update(canonical.as_bytes());
    mac
}

fn csrf_token(key: &[u8; 32], cookie: &str, req: &AuthzRequest) -> String {
    let ts = now_secs();
    let tag = csrf_mac(key, cookie, ts, &req.canonical())
        .finalize()
        .into_bytes();
    format!("{ts}.{}", URL_SAFE_NO_PAD.encode(tag))
}

fn csrf_valid(key: &[u8; 32], cookie: &str, token: &str, req: &AuthzRequest) -> bool {
    let Some((ts, tag)) = token.split_once('.') else {
        return false;
    };
    let (Ok(ts), Ok(tag)) = (ts.parse::<u64>(), URL_SAFE_NO_PAD.decode(tag)) else {
        return false;
    };
    let now = now_secs();
    if ts > now + 60 || now.saturating_sub(ts) > CSRF_TTL_SECS {
        return false;
    }
    csrf_mac(key, cookie, ts, &req.canonical())
        .verify_slice(&tag)
        .is_ok()
}

fn csrf_set_cookie(public_url: &str, value: &str, max_age: u64) -> String {
    let (secure, path) = match url::Url::parse(public_url) {
        Ok(u) => (
            u.scheme() == "https",
            format!("{}/oauth", u.path().trim_end_matches('/')),
        ),
        Err(_) => (false, "/oauth".to_string()),
    };
    format!(
        "{CSRF_COOKIE}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Lax{}",
        if secure { "; Secure" } else { "" }
    )
}

/// `Origin` and `Referer`, when sent, must be ours (`Origin: null` is what
/// our own no-referrer page produces, so it passes).
fn same_origin(public_url: &str, headers: &HeaderMap) -> bool {
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

/// `GET /oauth/authorize`: validate, then render the sign-in page.
async fn authorize_page(State(st): State<OauthState>, req: Request) -> Response {
    let p = match Params::from_query(req.uri().query()) {
        Ok(p) => p,
        Err(e) => return html(StatusCode::BAD_REQUEST, error_page(&e), None),
    };
    let authz = match validate_authz(&st, &p).await {
        Ok(a) => a,
        Err(f) => return fail_response(&st, f),
    };
    let (cookie, set) = match csrf_cookie(req.headers()) {
        Some(c) => (c, None),
        None => {
            let c = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
            let set = csrf_set_cookie(&st.app.cfg.public_url, &c, CSRF_TTL_SECS);
            (c, Some(set))
        }
    };
    let token = csrf_token(&st.key, &cookie, &authz);
    html(
        StatusCode::OK,
        login_page(&st, &authz, &token, "", None),
        set,
    )
}

/// `POST /oauth/authorize`: the sign-in form.
async fn authorize_submit(State(st): State<OauthState>, req: Request) -> Response {
    if let Err(r) = rate_limit(&st, limit_key_of(&st, "authorize", &req)).await {
        return r;
    }
    let (parts, body) = req.into_parts();
    let p = match read_params(&st, &parts.headers, body, false).await {
        Ok(p) => p,
        Err(e) => return html(StatusCode::BAD_REQUEST, error_page(&e), None),
    };
    let authz = match validate_authz(&st, &p).await {
        Ok(a) => a,
        Err(f) => return fail_response(&st, f),
    };
    let public_url = st.app.cfg.public_url.clone();
    if !same_origin(&public_url, &parts.headers) {
        return html(
            StatusCode::FORBIDDEN,
            error_page("This sign-in form was not submitted from this server's page."),
            None,
        );
    }
    let email = p.get("email").unwrap_or("").trim().to_string();
    // A missing or expired form token: show a fresh form, check nothing.
    let cookie = csrf_cookie(&parts.headers);
    let token_ok = match (&cookie, p.get("csrf")) {
        (Some(c), Some(t)) => csrf_valid(&st.key, c, t, &authz),
        _ => false,
    };
    if !token_ok {
        let c = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
        let set = csrf_set_cookie(&public_url, &c, CSRF_TTL_SECS);
        let token = csrf_token(&st.key, &c, &authz);
        return html(
            StatusCode::FORBIDDEN,
            login_page(
                &st,
                &authz,
                &token,
                &email,
                Some(
                    "This sign-in form expired or did not come from this page. Please sign in again.",
                ),
            ),
            Some(set),
        );
    }
    let cookie = cookie.unwrap_or_default();
    let password = p.get("password").unwrap_or("");
    let rid = request_id(&parts);
    let shaped = (3..=320).contains(&email.chars().count()) && (1..=1024).contains(&password.len());
    let user = if shaped {
        match st.app.store.verify_password(&email, password).await {
            Ok(u) => u,
            Err(_) => {
                return html(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    error_page("Internal server error."),
                    None,
                );
            }
        }
    } else {
        None
    };
    let Some(user) = user else {
        st.app
            .store
            .audit_oauth_login_failure(&email, &authz.client.id, rid.as_deref())
            .await;
        let token = csrf_token(&st.key, &cookie, &authz);
        return html(
            StatusCode::UNAUTHORIZED,
            login_page(
                &st,
                &authz,
                &token,
                &email,
                Some("Invalid email or password."),
            ),
            None,
        );
    };
    let code = st
        .app
        .store
        .issue_oauth_code(
            NewCode {
                client_id: &authz.client.id,
                user_id: &user.id,
                redirect_uri: &authz.redirect_uri,
                code_challenge: &authz.code_challenge,
                resource: authz.resource.as_deref(),
                scope: &authz.scope,
            },
            rid.as_deref(),
        )
        .await;
    let code = match code {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(target: "zm_http", error = %e, "oauth code issue failed");
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                error_page("Internal server error."),
                None,
            );
        }
    };
    let mut params = vec![("code", code.as_str())];
    if let Some(s) = &authz.state {
        params.push(("state", s));
    }
    params.push(("iss", &public_url));
    let mut resp = found(&with_query(&authz.redirect_uri, &params));
    if let Ok(v) = HeaderValue::from_str(&csrf_set_cookie(&public_url, "", 0)) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

// ---------------------------------------------------------------------------
// Token endpoint

/// `POST /oauth/token`.
async fn token(State(st): State<OauthState>, req: Request) -> Response {
    if let Err(r) = rate_limit(&st, limit_key_of(&st, "token", &req)).await {
        return r;
    }
    let (parts, body) = req.into_parts();
    let p = match read_params(&st, &parts.headers, body, true).await {
        Ok(p) => p,
        Err(e) => return bad_request("invalid_request", e),
    };
    let rid = request_id(&parts);
    let public_url = &st.app.cfg.public_url;
    if let Some(r) = p.get("resource")
        && !resource_ok(public_url, r)
    {
        return bad_request(
            "invalid_target",
            format!("resource must be {public_url}/mcp."),
        );
    }
    let result = match p.get("grant_type") {
        None => return bad_request("invalid_request", "grant_type is required."),
        Some("authorization_code") => {
            let mut missing = None;
            for k in ["code", "code_verifier", "client_id", "redirect_uri"] {
                if p.get(k).is_none() {
                    missing = Some(k);
                    break;
                }
            }
            if let Some(k) = missing {
                return bad_request("invalid_request", format!("{k} is required."));
            }
            let verifier = p.get("code_verifier").unwrap_or("");
            if !is_pkce_string(verifier) {
                return bad_request(
                    "invalid_request",
                    "code_verifier must be 43..128 unreserved characters.",
                );
            }
            let client_id = p.get("client_id").unwrap_or("");
            let client = match known_client(&st, client_id).await {
                Ok(c) => c,
                Err(r) => return r,
            };
            st.app
                .store
                .exchange_oauth_code(
                    CodeExchange {
                        code: p.get("code").unwrap_or(""),
                        client_id: &client.id,
                        redirect_uri: p.get("redirect_uri").unwrap_or(""),
                        verifier_challenge: &s256(verifier),
                    },
                    rid.as_deref(),
                )
                .await
        }
        Some("refresh_token") => {
            let Some(refresh) = p.get("refresh_token") else {
                return bad_request("invalid_request", "refresh_token is required.");
            };
            let client = match p.get("client_id") {
                None => None,
                Some(id) => match known_client(&st, id).await {
                    Ok(c) => Some(c),
                    Err(r) => return r,
                },
            };
            st.app
                .store
                .refresh_oauth_token(
                    refresh,
                    client.as_ref().map(|c| c.id.as_str()),
                    p.get("scope"),
                    rid.as_deref(),
                )
                .await
        }
        Some(_) => {
            return bad_request(
                "unsupported_grant_type",
                "Supported grant types: authorization_code, refresh_token.",
            );
        }
    };
    match result {
        Ok(t) => token_response(&t),
        Err(zm_store::oauth::OauthError::Internal(e)) => {
            tracing::error!(target: "zm_http", error = %e, "oauth token failed");
            oauth_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "Internal server error.",
            )
        }
        Err(e) => bad_request(e.code(), e.description()),
    }
}

async fn known_client(st: &OauthState, id: &str) -> Result<OauthClient, Response> {
    match st.app.store.oauth_client(id).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_client",
            "Unknown client.",
        )),
        Err(_) => Err(oauth_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "Internal server error.",
        )),
    }
}

fn token_response(t: &IssuedTokens) -> Response {
    let mut resp = axum::Json(json!({
        "access_token": t.access_token,
        "token_type": "Bearer",
        "expires_in": t.expires_in,
        "refresh_token": t.refresh_token,
        "scope": t.scope,
    }))
    .into_response();
    no_store(resp.headers_mut());
    resp
}

// ---------------------------------------------------------------------------
// HTML

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

fn html(status: StatusCode, body: String, set_cookie: Option<String>) -> Response {
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

fn error_page(message: &str) -> String {
    document(
        "Cannot sign in",
        &format!(
            "<h1>Cannot sign in</h1>\n<p class=\"error\">{}</p>\n<p class=\"muted\">Nothing was sent to the application. Close this page and connect again from your application.</p>",
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

fn login_page(
    st: &OauthState,
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
<input id=\"password\" type=\"password\" name=\"password\" autocomplete=\"current-password\" required maxlength=\"1024\">\n\
<button type=\"submit\">Sign in and allow</button>\n</form>\n\
<p class=\"muted\">Only continue if you just asked this application to connect to your memory.</p>",
        name = esc(name),
        access = access,
        server = esc(&st.app.cfg.public_url),
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
    fn redirect_policy() {
        for ok in [
            "https://app.example.com/cb",
            "https://app.example.com/cb?x=1",
            "http://localhost/cb",
            "http://localhost:33418/callback",
            "http://127.0.0.1:8080/cb",
            "http://[::1]:9000/cb",
            "cursor://anysphere.cursor-retrieval/oauth/callback",
            "com.example.app:/oauth2redirect",
        ] {
            assert!(check_redirect_uri(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://example.com/cb",
            "http://localhost.evil.com/cb",
            "http://127.0.0.2/cb",
            "javascript:alert(1)",
            "JavaScript:alert(1)",
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
        assert!(redirect_registered(&reg, "http://127.0.0.1:5555/callback"));
        assert!(redirect_registered(&reg, "http://127.0.0.1/callback"));
        assert!(!redirect_registered(&reg, "http://127.0.0.1:5555/other"));
        assert!(!redirect_registered(
            &reg,
            "http://127.0.0.1:5555/callback?x=1"
        ));
        assert!(!redirect_registered(&reg, "http://localhost:5555/callback"));
        assert!(!redirect_registered(&reg, "https://app.example.com:444/cb"));
        assert!(redirect_registered(&reg, "https://app.example.com/cb"));
        assert!(!redirect_registered(&reg, "https://app.example.com/cb/"));
    }

    #[test]
    fn pkce_s256_matches_rfc_7636_appendix_b() {
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert!(is_pkce_string(
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
        ));
        assert!(!is_pkce_string("short"));
        assert!(!is_pkce_string(&"a+".repeat(30)));
    }

    #[test]
    fn forwarded_for_only_when_trusted() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_static("203.0.113.9, 10.0.0.1"),
        );
        let peer: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        assert_eq!(client_ip(true, &h, Some(peer)), "203.0.113.9");
        assert_eq!(client_ip(false, &h, Some(peer)), "10.0.0.1");
        h.insert("x-forwarded-for", HeaderValue::from_static("garbage"));
        assert_eq!(client_ip(true, &h, Some(peer)), "10.0.0.1");
    }

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
}
