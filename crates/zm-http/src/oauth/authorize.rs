//! `GET /oauth/authorize` (validate the request, render the sign-in form)
//! and `POST /oauth/authorize` (check the form and the credentials, redirect
//! back with a single-use code).

use std::sync::atomic::Ordering;

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use zm_store::oauth::{NewCode, OauthClient, parse_scope};

use super::limit::{NotNow, Throttled};
use super::params::{FormParams, Params, QueryParams};
use super::token::is_s256_challenge;
use super::{OauthRejection, OauthState, csrf, pages, redirect, resource_ok};
use crate::request::RequestId;
use crate::state::CookieScope;

/// Longest `state`.
const MAX_STATE_LEN: usize = 2048;

/// A validated authorization request.
pub(super) struct AuthzRequest {
    pub(super) client: OauthClient,
    pub(super) redirect_uri: String,
    pub(super) code_challenge: String,
    pub(super) state: Option<String>,
    pub(super) resource: Option<String>,
    pub(super) scope: String,
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

/// Validate an authorization request. Every failure is an HTML page on
/// this server, never a redirect: validation runs before anyone has signed
/// in (on the page, and on the form post before the password), and a
/// registered redirect URI proves nothing — registration is anonymous and
/// takes any https URI, so redirecting errors there would make this server
/// an open redirector (RFC 9700 §4.11.2). An unknown client or redirect URI
/// is named as such; any other error by its RFC 6749 code.
async fn validate(st: &OauthState, p: &Params) -> Result<AuthzRequest, OauthRejection> {
    let page = |m: &str| OauthRejection::page(StatusCode::BAD_REQUEST, m);
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
        // A busy database says to reload, as every other step's failure.
        Err(e) => {
            return Err(
                match super::error::store_failure("oauth client lookup", &e) {
                    OauthRejection::Busy => OauthRejection::BusyPage,
                    _ => OauthRejection::page(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "Internal server error.",
                    ),
                },
            );
        }
    };
    let Some(redirect_uri) = p.get("redirect_uri") else {
        return Err(page("The request has no redirect_uri."));
    };
    if !redirect::registered(&client.redirect_uris, redirect_uri) {
        return Err(page(
            "The redirect_uri is not registered for this client, so this server will not send you there.",
        ));
    }
    let redirect_uri = redirect_uri.to_string();
    let state = p.get("state").map(str::to_string);
    let fail = |error: &'static str, description: &str| {
        Err(OauthRejection::request_page(error, description))
    };
    if state.as_ref().is_some_and(|s| s.len() > MAX_STATE_LEN) {
        return fail("invalid_request", "state is longer than 2048 bytes.");
    }
    // A line break or other control character does not come back as it
    // went: the sign-in form carries `state` in a hidden field, and the
    // browser turns CR into LF as it reads the page and LF into CR LF as it
    // sends the form, so the client would be handed back a `state` it
    // never sent (and reject the sign-in the person just made). RFC 6749
    // allows none (Appendix A.5).
    if state
        .as_ref()
        .is_some_and(|s| s.chars().any(char::is_control))
    {
        return fail(
            "invalid_request",
            "state must not contain control characters (such as a line break).",
        );
    }
    match p.get("response_type") {
        Some("code") => {}
        None => return fail("invalid_request", "response_type is required."),
        Some(_) => {
            return fail(
                "unsupported_response_type",
                "Only response_type=code is supported.",
            );
        }
    }
    let Some(challenge) = p.get("code_challenge") else {
        return fail(
            "invalid_request",
            "code_challenge is required (PKCE with S256).",
        );
    };
    if p.get("code_challenge_method") != Some("S256") {
        return fail("invalid_request", "code_challenge_method must be S256.");
    }
    // An S256 challenge is a SHA-256 in base64url without padding: any
    // other string no verifier matches, and the code would be spent on a
    // sign-in that cannot end in a token.
    if !is_s256_challenge(challenge) {
        return fail(
            "invalid_request",
            "code_challenge must be a SHA-256 in base64url without padding (43 characters).",
        );
    }
    let resource = p.get("resource").map(str::to_string);
    // (A control character is refused before the URL parser drops it:
    // the form would send it back changed, as `state` above.)
    if let Some(r) = &resource
        && (r.chars().any(char::is_control) || !resource_ok(&st.app.cfg.public_url, r))
    {
        return fail(
            "invalid_target",
            &format!("resource must be {}/mcp.", st.app.cfg.public_url),
        );
    }
    let scope = match parse_scope(p.get("scope")) {
        Ok(s) => s,
        Err(bad) => {
            return fail(
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

/// `GET /oauth/authorize`: validate, then render the sign-in page. Limited
/// like the POST (a client lookup per request), before the query is read.
pub(super) async fn page(
    State(st): State<OauthState>,
    throttled: Result<Throttled, OauthRejection>,
    headers: HeaderMap,
    query: Result<QueryParams, OauthRejection>,
) -> Result<Response, OauthRejection> {
    throttled.map_err(OauthRejection::into_page)?;
    let QueryParams(p) = query.map_err(OauthRejection::into_page)?;
    let authz = validate(&st, &p).await?;
    // The cookie is sent again with every form, so it lives as long as
    // the form's token does (a form rendered late in the cookie's life
    // would otherwise expire early).
    let cookie = csrf::cookie(&st.app.cfg.public_url, &headers).unwrap_or_else(csrf::new_cookie);
    let set = Some(csrf::set_cookie(
        &st.app.cfg.public_url,
        &cookie,
        csrf::TTL_SECS,
    ));
    let token = csrf::token(&st.key, &cookie, &authz.canonical());
    Ok(pages::html(
        StatusCode::OK,
        pages::login(&st.app.cfg.public_url, &authz, &token, "", None),
        set,
    ))
}

/// `POST /oauth/authorize`: the sign-in form.
pub(super) async fn submit(
    State(st): State<OauthState>,
    throttled: Result<Throttled, OauthRejection>,
    request_id: Option<Extension<RequestId>>,
    headers: HeaderMap,
    form: Result<FormParams, OauthRejection>,
) -> Result<Response, OauthRejection> {
    throttled.map_err(OauthRejection::into_page)?;
    let FormParams(p) = form.map_err(OauthRejection::into_page)?;
    let authz = validate(&st, &p).await?;
    let public_url = st.app.cfg.public_url.as_str();
    if !csrf::same_origin(public_url, &headers) {
        return Err(OauthRejection::page(
            StatusCode::FORBIDDEN,
            "This sign-in form was not submitted from this server's page.",
        ));
    }
    let email = p.get("email").unwrap_or("").trim().to_string();
    // A missing or expired form token: show a fresh form, check nothing.
    let canonical = authz.canonical();
    let cookie = csrf::cookie(public_url, &headers);
    let token_ok = match (&cookie, p.get("csrf")) {
        (Some(c), Some(t)) => csrf::valid(&st.key, c, t, &canonical),
        _ => false,
    };
    if !token_ok {
        // The form again, over the cookie the browser holds, as the page
        // keeps it: a new one would void every other sign-in form open in
        // the same browser. Only a browser with none gets one; not from a
        // post another site made (Lax keeps ours off it), or any page
        // could void a sign-in in progress here by posting.
        let cross_site = headers
            .get("sec-fetch-site")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
        let (c, set) = match &cookie {
            Some(c) => (
                c.clone(),
                Some(csrf::set_cookie(public_url, c, csrf::TTL_SECS)),
            ),
            None if cross_site => (csrf::new_cookie(), None),
            None => {
                let c = csrf::new_cookie();
                let set = csrf::set_cookie(public_url, &c, csrf::TTL_SECS);
                (c, Some(set))
            }
        };
        let token = csrf::token(&st.key, &c, &canonical);
        return Ok(pages::html(
            StatusCode::FORBIDDEN,
            pages::login(
                public_url,
                &authz,
                &token,
                &email,
                Some(
                    "This sign-in form expired or did not come from this page. Please sign in again.",
                ),
            ),
            set,
        ));
    }
    let cookie = cookie.unwrap_or_default();
    let password = p.get("password").unwrap_or("");
    let rid = request_id.as_ref().map(|Extension(r)| r.as_str());
    // A store failure, as a page: a busy database says to reload.
    let failed =
        |what: &str, e: &zm_contracts::ToolError| match super::error::store_failure(what, e) {
            OauthRejection::Busy => OauthRejection::BusyPage,
            _ => OauthRejection::page(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error."),
        };
    // The account backs off after repeated failures, whatever the IP; the
    // password is not even checked meanwhile. The attempt takes its place
    // in the count now, before the (slow) check, so attempts in flight at
    // once get no more than the free ones; a success clears the count. A
    // browser that last signed in to the account is counted apart.
    let device = st
        .backoff
        .known_device(
            &st.app.store,
            st.key.as_slice(),
            &email,
            &headers,
            &CookieScope::of(public_url, ""),
        )
        .await;
    if let Err(refused) = st.backoff.attempt(&email, device.as_deref()).await {
        let secs = match refused {
            NotNow::BackingOff(secs) => secs,
            NotNow::Uncounted(e) => return Err(failed("oauth sign-in count", &e)),
        };
        st.app.metrics.rate_limited.fetch_add(1, Ordering::Relaxed);
        let token = csrf::token(&st.key, &cookie, &canonical);
        let mut resp = pages::html(
            StatusCode::TOO_MANY_REQUESTS,
            pages::login(
                public_url,
                &authz,
                &token,
                &email,
                Some(&format!(
                    "Too many failed sign-ins for this account. Try again in {secs} seconds."
                )),
            ),
            Some(csrf::set_cookie(public_url, &cookie, csrf::TTL_SECS)),
        );
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
        return Ok(resp);
    }
    // Any password the form carries (64 KiB at most): one set before the
    // 4 KiB limit for new passwords still signs in.
    let shaped = (3..=320).contains(&email.chars().count()) && !password.is_empty();
    let user = if shaped {
        st.app
            .store
            .verify_password(&email, password)
            .await
            .map_err(|e| failed("oauth password check", &e))?
    } else {
        None
    };
    let Some(user) = user else {
        st.app
            .metrics
            .unauthorized
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        st.app
            .store
            .audit_oauth_login_failure(&email, &authz.client.id, rid)
            .await;
        let token = csrf::token(&st.key, &cookie, &canonical);
        return Ok(pages::html(
            StatusCode::UNAUTHORIZED,
            pages::login(
                public_url,
                &authz,
                &token,
                &email,
                Some("Invalid email or password."),
            ),
            Some(csrf::set_cookie(public_url, &cookie, csrf::TTL_SECS)),
        ));
    };
    st.backoff.succeeded(&email, device.as_deref()).await;
    // A sign-in that named no resource is for this server's one (the
    // default RFC 8707 §2.1 allows), written down as it is now: a later
    // token request naming what the server calls its own after a move of
    // its public URL is then refused, as for a sign-in that named it.
    let resource = authz
        .resource
        .clone()
        .unwrap_or_else(|| format!("{public_url}/mcp"));
    let issued = st
        .app
        .store
        .issue_oauth_code(
            NewCode {
                client_id: &authz.client.id,
                user_id: &user.id,
                credential: user.credential,
                redirect_uri: &authz.redirect_uri,
                code_challenge: &authz.code_challenge,
                resource: Some(&resource),
                scope: &authz.scope,
            },
            rid,
        )
        .await;
    let code = match issued {
        Ok(code) => code,
        // The password changed or the account was disabled while this
        // sign-in ran: the form again, saying so.
        Err(e) if e.code == zm_contracts::ErrorCode::Unauthorized => {
            let token = csrf::token(&st.key, &cookie, &canonical);
            return Ok(pages::html(
                StatusCode::UNAUTHORIZED,
                pages::login(public_url, &authz, &token, &email, Some(&e.message)),
                Some(csrf::set_cookie(public_url, &cookie, csrf::TTL_SECS)),
            ));
        }
        // The registration was forgotten while the form was open (the
        // waiting registrations turned over): as for an unknown client.
        Err(e) if e.code == zm_contracts::ErrorCode::NotFound => {
            return Err(OauthRejection::page(
                StatusCode::BAD_REQUEST,
                "Unknown client. The application is not registered with this server; ask it to connect again.",
            ));
        }
        Err(e) => return Err(failed("oauth code issue", &e)),
    };
    let mut params = vec![("code", code.as_str())];
    if let Some(s) = &authz.state {
        params.push(("state", s));
    }
    params.push(("iss", public_url));
    let mut resp = redirect::found(&redirect::with_query(&authz.redirect_uri, &params));
    let known = st.backoff.device_cookie(
        st.key.as_slice(),
        &user,
        &email,
        &CookieScope::of(public_url, ""),
    );
    // The CSRF cookie stays (it expires with the forms it signs): another
    // sign-in form open in the same browser would otherwise fail.
    if let Some(c) = known
        && let Ok(v) = HeaderValue::from_str(&c)
    {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    Ok(resp)
}
