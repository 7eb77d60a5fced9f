//! The web dashboard: a person's view of their agents' memory, served at
//! `/` by the same binary. Server-rendered HTML (maud: templates are Rust,
//! checked at compile time), one stylesheet and one small script of
//! progressive enhancement, both compiled in (`assets/`): no build step, no
//! CDN, works offline, and every page works without JavaScript.
//!
//! Every read and change goes through the tool service (the same calls,
//! results and errors as MCP and REST) or a store method; there is no SQL
//! here and no second copy of a rule. A failure is rendered from its
//! error code, never from its message text ([`errors`]).
//!
//! Security: a sign-in makes a server-side session (`zm_store::web`); its
//! random secret lives in an `HttpOnly`, `SameSite=Strict` cookie (`Secure`
//! whenever the public URL is https; its `Path` is the public URL's path,
//! `/` or the prefix a proxy serves it under). Sign-out and `user disable` end it at
//! once. Every form carries a CSRF token (an HMAC of the session secret
//! under the database's form key; the sign-in form binds a pre-session
//! cookie the same way) and every POST must come from our origin. Pages are
//! served with a CSP without `unsafe-inline` and `frame-ancestors 'none'`,
//! and behind an https public URL with `Strict-Transport-Security`.
//! Failed sign-ins back off per account, shared with the OAuth sign-in.
//!
//! Behind a proxy that serves the server under a path (`ZM_PUBLIC_URL=
//! https://host/zm`, the proxy stripping `/zm`), the routes stay at our
//! root while every URL a page, a redirect or a return-to target carries
//! is public: the handlers and templates write routes (`/memories/x`) and
//! turn them into public paths (`/zm/memories/x`) as they emit them, with
//! the one [`PathPrefix`] of the public URL (`Signed::href`,
//! [`see_other`], `layout::page`).

mod access;
mod account;
mod errors;
mod insight;
mod layout;
mod login;
mod memories;
mod review;
mod rules;
mod teams;

use axum::Router;
use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use zm_store::RequestId;
use zm_store::web::WebSession;

use crate::state::{AppState, CookieScope, PathPrefix};

pub(crate) use errors::Failure;

/// The session cookie.
const SESSION_COOKIE: &str = "zm_session";

/// The largest form body accepted, at least: a form carrying a memory's
/// text may take more ([`form_limit`]).
const FORM_LIMIT: usize = 256 * 1024;

/// The largest form body accepted from someone not signed in (`/login`:
/// an email, a password of at most 4,096 bytes, each byte percent-encoded
/// in three, the CSRF token and where to go next). Read before any check
/// of who sends it, so it is kept small rather than sized for a memory's
/// text.
pub(crate) const ANONYMOUS_FORM_LIMIT: usize = 32 * 1024;

/// The largest form body accepted: room for the longest text a memory may
/// hold (`max_text_chars`), each character percent-encoded as the browser
/// sends it (up to four UTF-8 bytes, three characters each), beside the
/// form's other fields.
fn form_limit(state: &AppState) -> usize {
    let text = state.store.limits().max_text_chars.saturating_mul(12);
    FORM_LIMIT.max(text.saturating_add(64 * 1024))
}

/// The dashboard's routes (merged into the main router before its layers).
pub fn routes(state: AppState) -> Router {
    Router::new()
        .route("/", get(memories::index))
        .route("/login", get(login::page).post(login::submit))
        .route("/logout", post(login::logout))
        .route("/memories/bulk", post(memories::bulk))
        .route("/memories/{id}", get(memories::show))
        .route("/memories/{id}/edit", post(memories::edit))
        .route("/memories/{id}/{action}", post(memories::act))
        .route("/review", get(review::index))
        .route("/review/{dispute}", post(review::resolve))
        .route("/rules", get(rules::index))
        .route("/rules/download", get(rules::download))
        .route("/rules/{memory_id}/{action}", post(rules::act))
        .route("/access", get(access::index))
        .route("/access/tokens", post(access::create_token))
        .route("/access/tokens/{id}/revoke", post(access::revoke_token))
        .route("/access/oauth/{id}/revoke", post(access::revoke_client))
        .route("/access/sessions/{id}/end", post(access::end_session))
        .route("/connect", get(access::connect))
        .route("/insight", get(insight::index))
        .route("/account", get(account::index))
        .route("/account/password", post(account::password))
        .route("/account/export", get(account::export))
        .route("/account/delete", post(account::delete))
        .route(
            "/account/import",
            post(account::import)
                .layer(axum::extract::DefaultBodyLimit::max(account::IMPORT_LIMIT)),
        )
        .route("/teams", get(teams::index).post(teams::create))
        .route("/teams/invitations/{id}/accept", post(teams::accept))
        .route("/teams/{slug}", get(teams::show))
        .route("/teams/{slug}/{action}", post(teams::act))
        .route("/teams/{slug}/members/{user}/{action}", post(teams::member))
        .route(
            "/teams/{slug}/invitations/{id}/withdraw",
            post(teams::withdraw),
        )
        .route(CSS.route, get(css))
        .route(JS.route, get(js))
        .method_not_allowed_fallback(not_a_page)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            run_changes_to_the_end,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            refuse_nul_in_uri,
        ))
        .with_state(state)
}

/// A form's change (any `POST`) runs to its end on a task of its own, as
/// a REST or MCP write does: a person who closes the tab or loses the
/// connection mid-change does not drop it between its transaction and
/// what follows it (the index's placement, the metrics, a refusal's audit
/// row). Pages stay on the request and end with it, and so do a sign-in
/// and a form sent without a session cookie: they take none of the
/// places kept for changes running to their end, so that anonymous
/// requests (a sign-in form trickled in a byte at a time) cannot use them
/// up and refuse the users' changes. A sign-in dropped with its
/// connection signed nobody in.
async fn run_changes_to_the_end(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let page = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    let anonymous =
        req.uri().path() == "/login" || cookie(&state, req.headers(), SESSION_COOKIE).is_none();
    if page || anonymous {
        return next.run(req).await;
    }
    let request_id = req.extensions().get::<RequestId>().map(|r| r.0.clone());
    match crate::run_to_the_end(&state.store, req, next).await {
        Some(resp) => resp,
        None => {
            let failure = Failure::from_tool(
                zm_contracts::ToolError::rate_limited(
                    "Too many changes are still running on this server; try again in a moment.",
                ),
                request_id.as_deref(),
            );
            // The page names the wait (a second) and sends it.
            errors::page(&state.cfg.path_prefix(), None, &failure)
        }
    }
}

/// A dashboard address opened with a method it does not take (a `GET` of
/// a form's target, as a reload after a form leaves in the address bar):
/// a page, not an empty 405.
async fn not_a_page(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
) -> Response {
    let opened = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    // Its own page, not "not found": the address is there (a reload of a
    // form's answer, a bookmark of it), only not to be opened.
    let prefix = state.cfg.path_prefix();
    let body = maud::html! {
        h1 { "Not a page" }
        div.flash.error role="alert" data-error-code=(zm_contracts::ErrorCode::NotFound.as_str()) {
            @if opened {
                p { "This address takes a form's answer; it is not a page to open." }
                p { "Go back to the page the form is on, and send it from there." }
            } @else {
                p { "This address does not take this method." }
            }
        }
        p { a href=(prefix.join("/")) { "Back to your memories" } }
    };
    // (axum adds the `Allow` of the address.)
    html(
        StatusCode::METHOD_NOT_ALLOWED,
        layout::page(&prefix, "Not a page", None, None, body),
    )
}

/// What no route answers: the dashboard's 404 page to a browser asking
/// for a page outside the API, MCP and OAuth paths; the API's JSON
/// `not_found` to anything else.
pub(crate) async fn fallback(state: AppState, req: axum::extract::Request) -> Response {
    let wants_page = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"));
    let path = req.uri().path();
    let elsewhere = [
        "/api/",
        "/mcp",
        "/oauth/",
        "/.well-known/",
        "/healthz",
        "/readyz",
        "/metrics",
    ]
    .iter()
    .any(|p| path.starts_with(p));
    if !wants_page || elsewhere {
        return crate::routes::fallback().await.into_response();
    }
    let request_id = req.extensions().get::<RequestId>().map(|r| r.0.clone());
    let failure = Failure::from_tool(
        zm_contracts::ToolError::not_found("No page has this address."),
        request_id.as_deref(),
    );
    errors::page(&state.cfg.path_prefix(), None, &failure)
}

/// Refuse a dashboard request with an encoded NUL in its path or query
/// (`?scope=%00`, `/teams/a%00b`) with the `validation_failed` page,
/// before a handler hands the text to the store.
async fn refuse_nul_in_uri(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if crate::request::uri_holds_nul(req.uri()) {
        let request_id = req.extensions().get::<RequestId>().map(|r| r.0.clone());
        let failure = Failure::invalid(crate::request::NUL_REFUSED, request_id.as_deref());
        return errors::page(&state.cfg.path_prefix(), None, &failure);
    }
    next.run(req).await
}

/// The dashboard's stylesheet and script, compiled in.
const APP_CSS: &str = include_str!("../../assets/app.css");
const APP_JS: &str = include_str!("../../assets/app.js");

/// A compiled-in asset: its route, its body and its version (the first 16
/// hex digits of its SHA-256).
pub(crate) struct Asset {
    route: &'static str,
    body: &'static str,
    version: String,
}

impl Asset {
    fn new(route: &'static str, body: &'static str) -> Asset {
        use sha2::Digest;
        let version = Sha256::digest(body.as_bytes())
            .iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect();
        Asset {
            route,
            body,
            version,
        }
    }

    /// The address a page names it by, relative to the dashboard's root:
    /// its route with its version, so a page always loads the asset of its
    /// own build and an upgrade is never styled by a cached older copy.
    pub(crate) fn href(&self) -> String {
        format!("{}?v={}", self.route, self.version)
    }
}

pub(crate) static CSS: std::sync::LazyLock<Asset> =
    std::sync::LazyLock::new(|| Asset::new("/assets/app.css", APP_CSS));
pub(crate) static JS: std::sync::LazyLock<Asset> =
    std::sync::LazyLock::new(|| Asset::new("/assets/app.js", APP_JS));

async fn css(query: axum::extract::RawQuery) -> Response {
    asset("text/css; charset=utf-8", &CSS, query.0.as_deref())
}

async fn js(query: axum::extract::RawQuery) -> Response {
    asset("text/javascript; charset=utf-8", &JS, query.0.as_deref())
}

fn asset(content_type: &'static str, asset: &Asset, query: Option<&str>) -> Response {
    let mut resp = asset.body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The address a page names (this build's version) never changes
    // content: cached for a year. Any other (an older page's version, or
    // none) is checked again on each use.
    let current = query.and_then(|q| q.strip_prefix("v=")) == Some(asset.version.as_str());
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if current {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// The CSP of every dashboard page: our own script and stylesheet only,
/// nothing inline, no framing, forms post only to us.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// An HTML answer with the headers every page carries.
pub(crate) fn html(status: StatusCode, body: String) -> Response {
    let mut resp = (status, body).into_response();
    secure_headers(resp.headers_mut());
    // A form shown again with a `rate_limited` notice (its failure set no
    // wait of its own: one with a wait gets the error page) says the
    // notice's wait; a page with a wait of its own sets it after this.
    if status == StatusCode::TOO_MANY_REQUESTS {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(crate::error::RETRY_AFTER_DEFAULT_SECS),
        );
    }
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    resp
}

/// A file to download (`content_type`, saved as `file`) with the page
/// headers: it holds memory text others wrote, which no browser may
/// sniff as a page or frame.
pub(crate) fn download(mut resp: Response, content_type: &'static str, file: &str) -> Response {
    let h = resp.headers_mut();
    secure_headers(h);
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{file}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    resp
}

fn secure_headers(h: &mut HeaderMap) {
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
}

/// A `303 See Other` to the route `to` (after a POST), under the public
/// URL's path prefix, with the page headers.
pub(crate) fn see_other(prefix: &PathPrefix, to: &str) -> Response {
    redirect(&prefix.join(to))
}

/// A `303 See Other` to a public path (one already under the prefix: a
/// return-to target), with the page headers.
fn redirect(public: &str) -> Response {
    let mut resp = Redirect::to(public).into_response();
    secure_headers(resp.headers_mut());
    resp
}

/// `/login?next=…` (a route), the sign-in page coming back to the route
/// `back`: `next` is its public path, as the browser will follow it.
pub(crate) fn login_then(prefix: &PathPrefix, back: &str) -> String {
    format!(
        "/login?next={}",
        url::form_urlencoded::byte_serialize(prefix.join(back).as_bytes()).collect::<String>()
    )
}

/// The value of the dashboard's cookie `name` a request carries (under
/// the name [`CookieScope::name`] gives it behind the public URL).
pub(crate) fn cookie(state: &AppState, headers: &HeaderMap, name: &str) -> Option<String> {
    CookieScope::of(&state.cfg.public_url, "")
        .read(headers, name)
        .filter(|v| !v.is_empty() && v.len() <= 128)
}

/// A `Set-Cookie` for the whole dashboard (`max_age` 0 clears it): the
/// dashboard is served at the public URL's root, so its cookies are scoped
/// to that URL's path (`/`, or the prefix it sits under behind a proxy, as
/// the OAuth form's cookie is), `Secure` whenever that URL is https.
pub(crate) fn set_cookie(state: &AppState, name: &str, value: &str, max_age: u64) -> String {
    CookieScope::of(&state.cfg.public_url, "").set_cookie(name, value, max_age, "Strict")
}

/// The CSRF token of a session's forms: an HMAC of its secret under the
/// database's form key (every instance on one database agrees).
pub(crate) fn csrf_token(state: &AppState, session_secret: &str) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(state.store.form_key()).expect("any key length");
    mac.update(b"zm-dashboard-csrf/v1\0");
    mac.update(session_secret.as_bytes());
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

pub(crate) fn csrf_ok(state: &AppState, session_secret: &str, token: &str) -> bool {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(state.store.form_key()).expect("any key length");
    mac.update(b"zm-dashboard-csrf/v1\0");
    mac.update(session_secret.as_bytes());
    URL_SAFE_NO_PAD
        .decode(token)
        .is_ok_and(|tag| mac.verify_slice(&tag).is_ok())
}

/// A signed-in request: the session, its secret (for the CSRF token), the
/// request id and the public URL's path prefix. Without a live session a
/// GET is sent to the sign-in page and back; anything else too.
pub(crate) struct Signed {
    pub(crate) session: WebSession,
    pub(crate) csrf: String,
    pub(crate) secret: String,
    pub(crate) request_id: Option<String>,
    pub(crate) prefix: PathPrefix,
}

impl Signed {
    /// The public path of one of our routes, for a link or a form action:
    /// `/zm/memories/x` for `/memories/x` behind `https://host/zm`.
    pub(crate) fn href(&self, route: &str) -> String {
        self.prefix.join(route)
    }

    /// A `303 See Other` to one of our routes.
    pub(crate) fn see_other(&self, route: &str) -> Response {
        see_other(&self.prefix, route)
    }

    /// The caller the tool service sees.
    pub(crate) fn caller(&self) -> zm_store::Caller {
        self.session.caller(self.request_id.clone())
    }

    /// A tool or store error of this request, to show.
    pub(crate) fn fail(&self, e: zm_contracts::ToolError) -> Failure {
        Failure::from_tool(e, self.request_id.as_deref())
    }

    /// The page of a failure.
    pub(crate) fn error(&self, f: &Failure) -> Response {
        errors::page(&self.prefix, Some(&self.session), f)
    }

    /// A whole page in the section `nav`.
    pub(crate) fn page(
        &self,
        status: StatusCode,
        title: &str,
        nav: &str,
        body: maud::Markup,
    ) -> Response {
        html(
            status,
            layout::page(
                &self.prefix,
                title,
                Some(&self.session),
                Some((nav, &self.csrf)),
                body,
            ),
        )
    }
}

/// A form post that changes one thing: check the form, make the change,
/// go back to `back` — or show the failure, with `back` to return to.
pub(crate) async fn change_then_back<F>(
    state: &AppState,
    signed: &Signed,
    headers: &HeaderMap,
    body: Body,
    back: &str,
    change: F,
) -> Response
where
    F: AsyncFnOnce(Form) -> Result<(), zm_contracts::ToolError>,
{
    let form = match signed_form(state, signed, headers, body).await {
        Ok(f) => f,
        Err(f) => return signed.error(&f.back_to(back)),
    };
    match change(form).await {
        Ok(()) => signed.see_other(back),
        Err(e) => signed.error(&signed.fail(e).back_to(back)),
    }
}

/// The route of the dashboard page a request came from (its `Referer`),
/// when that page is ours (our public URL's origin, a route [`login`]
/// would return to) and not the front page.
fn referer_route(state: &AppState, prefix: &PathPrefix, headers: &HeaderMap) -> Option<String> {
    let from = url::Url::parse(headers.get(header::REFERER)?.to_str().ok()?).ok()?;
    let ours = url::Url::parse(&state.cfg.public_url).ok()?;
    if from.origin() != ours.origin() {
        return None;
    }
    let public = match from.query() {
        Some(q) => format!("{}?{q}", from.path()),
        None => from.path().to_string(),
    };
    login::local_route(prefix, &public)
        .filter(|r| *r != "/" && !r.starts_with("/login"))
        .map(str::to_string)
}

impl FromRequestParts<AppState> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let request_id = parts.extensions.get::<RequestId>().map(|r| r.0.clone());
        let prefix = state.cfg.path_prefix();
        let back = || {
            // The route asked for (the proxy stripped the prefix).
            let route = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let target = if parts.method == axum::http::Method::GET {
                (route != "/").then(|| login_then(&prefix, route))
            } else {
                // A form sent after the session ended: back to the page
                // that held it, when the browser says which (ours only).
                referer_route(state, &prefix, &parts.headers).map(|r| login_then(&prefix, &r))
            };
            let target = target.unwrap_or_else(|| "/login".to_string());
            see_other(&prefix, &target)
        };
        let Some(secret) = cookie(state, &parts.headers, SESSION_COOKIE) else {
            return Err(back());
        };
        match state.store.web_session(&secret).await {
            Ok(Some(session)) => {
                // The account's request budget, the one its tokens draw
                // on: a page runs the same tools.
                if let Err(secs) = crate::auth::account_budget(state, &session.user_id).await {
                    let mut f = Failure::from_tool(
                        zm_contracts::ToolError::rate_limited(format!(
                            "Too many requests for this account; retry in {secs} s."
                        )),
                        request_id.as_deref(),
                    );
                    // The page says the wait and sends it as `Retry-After`.
                    f.retry_after = Some(secs);
                    return Err(errors::page(&prefix, None, &f));
                }
                Ok(Signed {
                    session,
                    csrf: csrf_token(state, &secret),
                    secret,
                    request_id,
                    prefix,
                })
            }
            Ok(None) => Err(back()),
            Err(e) => Err(errors::page(
                &prefix,
                None,
                &Failure::from_tool(e, request_id.as_deref()),
            )),
        }
    }
}

/// A page's query string, read into `T`; one that does not read (a
/// `before` that is not a number, a repeated `next`, an escape that is not
/// UTF-8, which the decoder would turn into U+FFFD) is the
/// `validation_failed` page, not axum's plain-text 400.
pub(crate) struct PageQuery<T>(pub T);

impl<T> FromRequestParts<AppState> for PageQuery<T>
where
    T: serde::de::DeserializeOwned + Send,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        if !crate::request::urlencoded_is_utf8(parts.uri.query().unwrap_or("").as_bytes()) {
            return Err(unreadable_address(
                parts,
                state,
                "an escape in the query is not UTF-8 text",
            ));
        }
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(q)) => Ok(PageQuery(q)),
            Err(e) => Err(unreadable_address(parts, state, &e.body_text())),
        }
    }
}

/// A page's path parameters: one that does not decode (`%FF`, not UTF-8)
/// is the validation page, as an unreadable query is ([`PageQuery`]), not
/// the extractor's plain-text 400.
pub(crate) struct PagePath<T>(pub T);

impl<T> FromRequestParts<AppState> for PagePath<T>
where
    T: serde::de::DeserializeOwned + Send,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(p)) => Ok(PagePath(p)),
            Err(e) => Err(unreadable_address(parts, state, &e.body_text())),
        }
    }
}

/// The validation page for an address whose path or query does not read.
fn unreadable_address(parts: &Parts, state: &AppState, why: &str) -> Response {
    let request_id = parts.extensions.get::<RequestId>().map(|r| r.0.clone());
    let failure = Failure::invalid(
        format!("The address could not be read: {why}."),
        request_id.as_deref(),
    );
    errors::page(&state.cfg.path_prefix(), None, &failure)
}

/// A submitted form: its pairs in order (a name may repeat: `ids`).
pub(crate) struct Form(pub Vec<(String, String)>);

impl Form {
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    pub(crate) fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// Read a form POST of a signed-in person: our origin, the session's CSRF
/// token, at most [`form_limit`] bytes. A forged or stale form is
/// `forbidden`, rendered as such.
pub(crate) async fn signed_form(
    state: &AppState,
    signed: &Signed,
    headers: &HeaderMap,
    body: Body,
) -> Result<Form, Failure> {
    let form = read_form(
        state,
        headers,
        body,
        form_limit(state),
        signed.request_id.as_deref(),
    )
    .await?;
    let token = form.get("csrf").unwrap_or("");
    if !csrf_ok(state, &signed.secret, token) {
        return Err(Failure::forbidden(
            "This form expired or did not come from this dashboard. Reload the page and try again.",
            signed.request_id.as_deref(),
        ));
    }
    Ok(form)
}

/// Read a urlencoded form from our own origin.
pub(crate) async fn read_form(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    request_id: Option<&str>,
) -> Result<Form, Failure> {
    if !same_origin(state, headers) {
        return Err(Failure::forbidden(
            "This form was sent from another site.",
            request_id,
        ));
    }
    let bytes = crate::request::read_body(body, limit)
        .await
        .map_err(|e| Failure::invalid(e.describe(), request_id))?;
    if !crate::request::urlencoded_is_utf8(&bytes) {
        return Err(Failure::invalid(
            "The form holds text that is not UTF-8 (an escape such as %FF): nothing was changed.",
            request_id,
        ));
    }
    // The parser's own words go to the log (with the request id), not to
    // the page.
    let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes).map_err(|e| {
        tracing::info!(target: "zm_http", request_id = request_id.unwrap_or(""), error = %e, "a dashboard form did not read");
        Failure::invalid(
            "The form could not be read: it was not sent as this dashboard's forms are. Nothing was changed; reload the page and try again.",
            request_id,
        )
    })?;
    if pairs
        .iter()
        .any(|(k, v)| k.contains('\0') || v.contains('\0'))
    {
        return Err(Failure::invalid(crate::request::NUL_REFUSED, request_id));
    }
    Ok(Form(pairs))
}

/// `Origin` (or, without it, `Referer`) must be ours when sent: the public
/// URL's, or the loopback or allowed host the request came to
/// ([`HttpConfig::form_origin_ok`](crate::state::HttpConfig::form_origin_ok)).
pub(crate) fn same_origin(state: &AppState, headers: &HeaderMap) -> bool {
    let sent = if let Some(o) = headers.get(header::ORIGIN) {
        o.to_str().ok().map(str::to_string)
    } else if let Some(r) = headers.get(header::REFERER) {
        r.to_str().ok().and_then(crate::state::origin_of)
    } else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    sent.is_some_and(|o| state.cfg.form_origin_ok(&o, host))
}

/// The session cookie of a sign-in, and the one that clears it (the same
/// `Path`: a browser clears a cookie only under the path it was set with).
pub(crate) fn session_cookie(state: &AppState, secret: &str) -> String {
    set_cookie(
        state,
        SESSION_COOKIE,
        secret,
        u64::try_from(zm_store::web::SESSION_MAX_MS / 1000).unwrap_or(0),
    )
}

pub(crate) fn clear_session_cookie(state: &AppState) -> String {
    set_cookie(state, SESSION_COOKIE, "", 0)
}

/// The session secret a request carries, if any (sign-out).
pub(crate) fn session_secret(state: &AppState, headers: &HeaderMap) -> Option<String> {
    cookie(state, headers, SESSION_COOKIE)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_csp_allows_nothing_inline() {
        assert!(!super::CSP.contains("unsafe-inline"));
        assert!(super::CSP.contains("frame-ancestors 'none'"));
    }
}
