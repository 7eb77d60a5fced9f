//! Bearer authentication: personal access tokens (and OAuth access tokens,
//! which the store verifies the same way).

use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use zm_contracts::ToolError;
use zm_store::Authenticated;

use crate::error::ApiError;
use crate::state::AppState;

/// The bearer token of a request, if it carries one.
pub fn bearer(parts: &Parts) -> Option<String> {
    let v = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// Count one request against the account's budget (`ZM_TOKEN_RATE_LIMIT`
/// requests a minute; none when unset): `Err(seconds to wait)` over it,
/// counted in the metrics. Per account, not per token: a user mints tokens
/// at will (and every OAuth refresh is a new one), so a per-token window
/// would be as many windows as they care to make; the dashboard's session
/// draws on the same budget.
pub(crate) async fn account_budget(state: &AppState, user_id: &str) -> Result<(), u64> {
    let Some(max) = state.cfg.token_rate_limit.filter(|m| *m > 0) else {
        return Ok(());
    };
    let hit = state
        .limiter
        .hit(&format!("user:{user_id}"), max, Duration::from_secs(60))
        .await;
    if hit.is_err() {
        state
            .metrics
            .rate_limited
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    hit
}

/// Resolve the request's credentials, applying the optional per-account
/// rate limit.
pub async fn authenticate(state: &AppState, parts: &Parts) -> Result<Authenticated, ApiError> {
    admit(state, holder(state, parts).await?).await
}

/// Who the request's token names, read only (nothing is written and
/// nothing waits for a write's turn): a 401 with its challenge when it
/// names nobody.
pub(crate) async fn holder(state: &AppState, parts: &Parts) -> Result<Authenticated, ApiError> {
    let challenge = |desc: &str| {
        format!(
            "Bearer error=\"invalid_token\", error_description=\"{desc}\", resource_metadata=\"{}\"",
            state.cfg.resource_metadata_url()
        )
    };
    let Some(token) = bearer(parts) else {
        state
            .metrics
            .unauthorized
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Err(ApiError {
            error: ToolError::unauthorized("Missing bearer token."),
            challenge: Some(format!(
                "Bearer resource_metadata=\"{}\"",
                state.cfg.resource_metadata_url()
            )),
            retry_after: None,
        });
    };
    let Some(auth) = state.store.token_holder(&token).await? else {
        state
            .metrics
            .unauthorized
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Err(ApiError {
            error: ToolError::unauthorized("Invalid or expired access token."),
            challenge: Some(challenge("Invalid or expired access token")),
            retry_after: None,
        });
    };
    Ok(auth)
}

/// Let the token's holder in: the account's budget, then the note of the
/// token's use.
async fn admit(state: &AppState, auth: Authenticated) -> Result<Authenticated, ApiError> {
    if let Err(secs) = account_budget(state, &auth.user_id).await {
        return Err(ApiError {
            error: ToolError::rate_limited(format!(
                "Too many requests for this account; retry in {secs} s."
            )),
            challenge: None,
            retry_after: Some(secs),
        });
    }
    state.store.note_token_use(&auth).await;
    Ok(auth)
}

/// Extractor: an authenticated caller.
pub struct Auth(pub Authenticated);

/// The holder of a write's token, found by the write middleware before
/// the write took its place ([`holder`]), for `Auth` to let in on the
/// write's own task ([`admit`]): the token is looked up once, and what
/// may wait for the database (the account's shared budget, the note of
/// the token's use) is done by the write, which a client's hang-up does
/// not end.
#[derive(Clone)]
struct Carried(Authenticated);

/// Hand `found` to the request's `Auth` extractor.
pub(crate) fn carry(parts: &mut Parts, found: Authenticated) {
    parts.extensions.insert(Carried(found));
}

impl FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let auth = match parts.extensions.remove::<Carried>() {
            Some(Carried(found)) => admit(state, found).await?,
            None => authenticate(state, parts).await?,
        };
        // Only then the address: an anonymous request is a 401 whatever
        // its path holds. An encoded NUL is `validation_failed` before a
        // handler hands the text to the store.
        if crate::request::uri_holds_nul(&parts.uri) {
            return Err(ApiError::new(zm_contracts::ToolError::validation(
                crate::request::NUL_REFUSED,
            )));
        }
        Ok(Auth(auth))
    }
}
