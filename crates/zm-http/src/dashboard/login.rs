//! Sign-in and sign-out.
//!
//! The sign-in form is protected before any session exists like the OAuth
//! one: a random pre-session cookie (`zm_login`, `SameSite=Strict`) and a
//! form token that is an HMAC of it under the database's form key. Failed
//! sign-ins back off per account (shared with OAuth) and are limited per
//! client IP. A success makes a server-side session and goes back to the
//! page that asked for it (a path of ours, under the public URL's path
//! prefix, only).

use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use maud::html;
use serde::Deserialize;
use zm_contracts::ToolError;
use zm_store::RequestId;

use super::errors::{self, Failure, field_aria, field_class, field_error};
use super::{Signed, cookie, html, layout, read_form, redirect, set_cookie};
use crate::oauth::csrf;
use crate::oauth::limit::NotNow;
use crate::request::ClientIp;
use crate::state::{AppState, CookieScope, PathPrefix};

const LOGIN_COOKIE: &str = "zm_login";
/// What the sign-in form token is bound to besides the cookie.
const CANONICAL: &str = "dashboard-login";

#[derive(Deserialize)]
pub(crate) struct Next {
    next: Option<String>,
}

/// The public path to go back to after signing in: `next` when it is a
/// path of ours — under the public URL's path `prefix`, then a route that
/// starts with one `/`, holds printable ASCII only and no dot segment —
/// and the memories page otherwise. A browser drops tabs and line breaks
/// from a `Location` before reading it (so `/<TAB>/evil.example` would be
/// `//evil.example`, another site), reads a backslash as `/` and resolves
/// `..` (so `/zm/../app` would be another application on the host).
fn local(prefix: &PathPrefix, next: Option<&str>) -> String {
    prefix.join(next.and_then(|n| local_route(prefix, n)).unwrap_or("/"))
}

/// The route a return-to path `next` (public, as a page sent it) names,
/// when it is one of ours by the rules of [`local`]; `None` otherwise.
/// Every form that returns somewhere it was told goes by it (the sign-in,
/// a rule revoked from a team's page).
pub(super) fn local_route<'a>(prefix: &PathPrefix, next: &'a str) -> Option<&'a str> {
    prefix.strip(next).filter(|r| {
        !r.starts_with("//")
            && r.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'\\')
            && !has_dot_segment(r)
    })
}

/// Does the path of `route` (before its query) hold a `.` or `..`
/// segment, written plainly or percent-encoded (`%2e`), as a browser
/// resolves it, or a percent-encoded slash or backslash (`%2f`, `%5c`)?
/// A browser keeps `..%2F` as one segment, but a reverse proxy in front
/// (nginx) decodes it and resolves the `..` it then finds, routing the
/// request, with the dashboard's cookie, out of the public path.
fn has_dot_segment(route: &str) -> bool {
    let path = route.split(['?', '#']).next().unwrap_or("");
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2f") || lower.contains("%5c") {
        return true;
    }
    path.split('/').any(|seg| {
        let seg = seg.to_ascii_lowercase().replace("%2e", ".");
        seg == "." || seg == ".."
    })
}

fn form_page(
    state: &AppState,
    prefix: &PathPrefix,
    cookie_value: &str,
    next: &str,
    email: &str,
    failure: Option<&Failure>,
) -> String {
    let token = csrf::token(state.store.form_key(), cookie_value, CANONICAL);
    let password_error = failure.and_then(|f| f.field("password"));
    let (password_invalid, password_described) = field_aria("password", password_error.as_deref());
    let body = html! {
        div.signin {
            h1 { "Sign in" }
            p.lead { "Your agents' memory, for you to browse, correct and govern." }
            @if let Some(f) = failure { (f.notice(&["password"])) }
            form #login method="post" action=(prefix.join("/login")) {
                input type="hidden" name="csrf" value=(token);
                input type="hidden" name="next" value=(next);
                div.field {
                    label for="email" { "Email" }
                    input #email type="email" name="email" autocomplete="username" required value=(email);
                }
                div class=(field_class(password_error.as_deref())) {
                    label for="password" { "Password" }
                    input #password type="password" name="password" autocomplete="current-password" required
                        aria-invalid=[password_invalid] aria-describedby=[password_described];
                    (field_error("password", password_error.as_deref()))
                }
                button type="submit" { "Sign in" }
            }
            p.muted { "The account " code { "zero-memory serve" } " created on its first start, or one made with " code { "zero-memory user add" } "." }
        }
    };
    layout::page(prefix, "Sign in", None, None, body)
}

/// The sign-in cookie this browser already holds, or a new one. Kept, so
/// that every sign-in form open in the browser's tabs stays good (each is
/// bound to the cookie); it is replaced on a successful sign-in only.
fn login_cookie(state: &AppState, headers: &HeaderMap) -> String {
    cookie(state, headers, LOGIN_COOKIE)
        .filter(|v| csrf::well_formed(v))
        .unwrap_or_else(csrf::new_cookie)
}

/// `GET /login`.
pub(crate) async fn page(
    State(state): State<AppState>,
    super::PageQuery(q): super::PageQuery<Next>,
    headers: HeaderMap,
) -> Response {
    let prefix = state.cfg.path_prefix();
    let next = local(&prefix, q.next.as_deref());
    if let Some(secret) = super::session_secret(&state, &headers)
        && let Ok(Some(_)) = state.store.web_session(&secret).await
    {
        return redirect(&next);
    }
    let value = login_cookie(&state, &headers);
    let mut resp = html(
        StatusCode::OK,
        form_page(&state, &prefix, &value, &next, "", None),
    );
    if let Ok(v) = set_cookie(&state, LOGIN_COOKIE, &value, 600).parse() {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

/// `POST /login`.
pub(crate) async fn submit(
    State(state): State<AppState>,
    ClientIp(ip): ClientIp,
    axum::Extension(request_id): axum::Extension<RequestId>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = Some(request_id.0.as_str());
    let prefix = state.cfg.path_prefix();
    let form = match read_form(&state, &headers, body, super::ANONYMOUS_FORM_LIMIT, rid).await {
        Ok(f) => f,
        Err(f) => return errors::page(&prefix, None, &f),
    };
    let next = local(&prefix, form.get("next"));
    let email = form.get("email").unwrap_or("").trim().to_string();
    let again = |failure: Failure, status: StatusCode| {
        let value = login_cookie(&state, &headers);
        let mut resp = html(
            status,
            form_page(&state, &prefix, &value, &next, &email, Some(&failure)),
        );
        if let Ok(v) = set_cookie(&state, LOGIN_COOKIE, &value, 600).parse() {
            resp.headers_mut().insert(header::SET_COOKIE, v);
        }
        // A refusal for now says its wait as the form's notice does.
        if failure.retry_after.is_some() {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(failure.retry_secs()));
        }
        resp
    };
    let cookie_value = cookie(&state, &headers, LOGIN_COOKIE).unwrap_or_default();
    if cookie_value.is_empty()
        || !csrf::valid(
            state.store.form_key(),
            &cookie_value,
            form.get("csrf").unwrap_or(""),
            CANONICAL,
        )
    {
        return again(
            Failure::forbidden("The sign-in form expired. Sign in again.", rid),
            StatusCode::FORBIDDEN,
        );
    }
    // Per client IP (an IPv6 one by its /64 and its /48), like the OAuth
    // sign-in.
    if state.cfg.oauth_rate_max > 0
        && let Err(secs) = state
            .limiter
            .hit_client(
                "dashboard:login",
                &ip,
                state.cfg.oauth_rate_max,
                crate::state::CLIENTS_PER_NETWORK,
                state.cfg.oauth_rate_window,
            )
            .await
    {
        state.metrics.rate_limited.fetch_add(1, Ordering::Relaxed);
        let mut f = Failure::from_tool(
            ToolError::rate_limited(format!("Too many sign-in attempts; retry in {secs} s.")),
            rid,
        );
        f.retry_after = Some(secs);
        // The form again, the address and where to go after kept (the
        // error page led to a sign-in without them).
        return again(f, StatusCode::TOO_MANY_REQUESTS);
    }
    // Counted now, before the password check (a success clears it); a
    // browser that last signed in to the account is counted apart.
    let device = state
        .login_backoff
        .known_device(
            &state.store,
            state.store.form_key(),
            &email,
            &headers,
            &CookieScope::of(&state.cfg.public_url, ""),
        )
        .await;
    if let Err(refused) = state.login_backoff.attempt(&email, device.as_deref()).await {
        let secs = match refused {
            NotNow::BackingOff(secs) => secs,
            NotNow::Uncounted(e) => {
                return errors::page(&prefix, None, &Failure::from_tool(e, rid));
            }
        };
        let mut f = Failure::from_tool(
            ToolError::rate_limited(format!(
                "Too many failed sign-ins for this account; retry in {secs} s."
            )),
            rid,
        );
        f.retry_after = Some(secs);
        // The form again, the address and where to go after kept (the
        // error page led to a sign-in without them).
        return again(f, StatusCode::TOO_MANY_REQUESTS);
    }
    let password = form.get("password").unwrap_or("");
    let user = match state.store.verify_password(&email, password).await {
        Ok(u) => u,
        Err(e) => return errors::page(&prefix, None, &Failure::from_tool(e, rid)),
    };
    let Some(user) = user else {
        state
            .metrics
            .unauthorized
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        state.store.audit_web_login(&email, None, rid).await;
        let f = Failure::from_tool(
            ToolError::validation("Wrong email or password.").with_details(serde_json::json!({
                "fields": [{"path": "password", "reason": "wrong email or password"}]
            })),
            rid,
        );
        return again(f, StatusCode::BAD_REQUEST);
    };
    state
        .login_backoff
        .succeeded(&email, device.as_deref())
        .await;
    // A sign-in over a session this browser still holds ends that one: a
    // shared machine's next person does not leave the last one signed in.
    if let Some(old) = super::session_secret(&state, &headers)
        && let Err(e) = state.store.web_session_end(&old).await
    {
        return errors::page(&prefix, None, &Failure::from_tool(e, rid));
    }
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let created = state
        .store
        .web_session_create(&user.id, user.credential, agent)
        .await;
    let (secret, _) = match created {
        Ok(s) => s,
        Err(e) => return errors::page(&prefix, None, &Failure::from_tool(e, rid)),
    };
    // Signed in: the session exists.
    state
        .store
        .audit_web_login(&email, Some(&user.id), rid)
        .await;
    let mut resp = redirect(&next);
    let h = resp.headers_mut();
    let known = state.login_backoff.device_cookie(
        state.store.form_key(),
        &user,
        &email,
        &CookieScope::of(&state.cfg.public_url, ""),
    );
    for c in [
        super::session_cookie(&state, &secret),
        set_cookie(&state, LOGIN_COOKIE, "", 0),
    ]
    .into_iter()
    .chain(known)
    {
        if let Ok(v) = c.parse() {
            h.append(header::SET_COOKIE, v);
        }
    }
    resp
}

/// `POST /logout`: the session ends now, on the server.
pub(crate) async fn logout(
    State(state): State<AppState>,
    signed: Signed,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(f) = super::signed_form(&state, &signed, &headers, body).await {
        return signed.error(&f);
    }
    if let Some(secret) = super::session_secret(&state, &headers)
        && let Err(e) = state.store.web_session_end(&secret).await
    {
        return signed.error(&signed.fail(e));
    }
    let mut resp = signed.see_other("/login");
    if let Ok(v) = super::clear_session_cookie(&state).parse() {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp
}

#[cfg(test)]
mod tests {
    use crate::state::PathPrefix;

    #[test]
    fn only_local_paths_are_followed() {
        let root = PathPrefix::default();
        let local = |next| super::local(&root, next);
        assert_eq!(local(Some("/memories/x")), "/memories/x");
        assert_eq!(local(Some("/?q=a b")), "/?q=a b");
        for bad in [
            "//evil.example",
            "https://evil.example",
            "javascript:x",
            "/\\evil",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r\n",
            "/\u{7f}/evil.example",
            "/é",
            "/../evil",
            "/a/%2E%2e/evil",
        ] {
            assert_eq!(local(Some(bad)), "/", "{bad}");
        }
        assert_eq!(local(None), "/");
    }

    #[test]
    fn behind_a_prefix_only_paths_under_it_are_followed() {
        let zm = PathPrefix::of("https://host.example/zm");
        let local = |next| super::local(&zm, next);
        assert_eq!(local(Some("/zm/memories/x")), "/zm/memories/x");
        assert_eq!(local(Some("/zm/?q=a b")), "/zm/?q=a b");
        assert_eq!(local(Some("/zm")), "/zm/");
        assert_eq!(local(Some("/zm/a/..x/b")), "/zm/a/..x/b");
        // A slash encoded in the query is the query's.
        assert_eq!(local(Some("/zm/?q=a%2Fb")), "/zm/?q=a%2Fb");
        for bad in [
            "/",
            "/memories/x",
            "/zmx/memories",
            "/other/zm/x",
            "/zm//evil.example",
            "/zm/\\evil",
            "/zm/\t/evil.example",
            "/zm/../app",
            "/zm/%2e%2E/app",
            "/zm/./../app",
            "/zm/..%2Fother-app/x",
            "/zm/x%2f..%2f..%2fapp",
            "/zm/a%5C..%5Capp",
            "/zm/..?x",
            "//evil.example/zm/",
            "https://evil.example/zm/",
            "zm/x",
        ] {
            assert_eq!(local(Some(bad)), "/zm/", "{bad}");
        }
        assert_eq!(local(None), "/zm/");
    }
}
