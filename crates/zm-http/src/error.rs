//! Every failure on the REST routes is the contract's error body with its
//! code's status.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use zm_contracts::{ErrorCode, ToolError};

/// A `ToolError` on its way out over HTTP.
#[derive(Debug)]
pub struct ApiError {
    pub error: ToolError,
    /// `WWW-Authenticate` for 401s.
    pub challenge: Option<String>,
    /// `Retry-After` seconds for 429s.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(error: ToolError) -> Self {
        ApiError {
            error,
            challenge: None,
            retry_after: None,
        }
    }
    pub fn not_found_route() -> Self {
        Self::new(ToolError::not_found("No route matches this request."))
    }
    pub fn malformed(reason: impl Into<String>) -> Self {
        Self::new(ToolError::validation(format!(
            "Malformed request: {}",
            reason.into()
        )))
    }
}

impl ApiError {
    /// A 403 for a token that lacks a scope: `WWW-Authenticate` names the
    /// scopes the call needs (RFC 6750 §3.1), so a client can ask for them.
    pub fn insufficient_scope(error: ToolError, scopes: &[&str]) -> Self {
        ApiError {
            error,
            challenge: Some(format!(
                "Bearer error=\"insufficient_scope\", scope=\"{}\"",
                scopes.join(" ")
            )),
            retry_after: None,
        }
    }
}

impl From<ToolError> for ApiError {
    fn from(e: ToolError) -> Self {
        ApiError::new(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.error.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let retry_after = self.retry_after_secs();
        let mut resp = (status, axum::Json(self.error.to_json())).into_response();
        let h = resp.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if let Some(c) = self.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            h.insert(header::WWW_AUTHENTICATE, c);
        } else if status == StatusCode::UNAUTHORIZED {
            // Every 401 carries a challenge (RFC 9110 §15.5.2), also one a
            // route raises after authentication (an account erased
            // meanwhile).
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(s) = retry_after {
            h.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

impl ApiError {
    /// The `Retry-After` this refusal sends: its own, and for every 429
    /// at least the default (the store's writer-turn refusal sets no time
    /// of its own: a second).
    pub(crate) fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
            .or((self.error.code == zm_contracts::ErrorCode::RateLimited)
                .then_some(RETRY_AFTER_DEFAULT_SECS))
    }
}

/// The wait a 429 names when whatever refused set none (the store's
/// writer turn, the cap on writes still running): a second.
pub(crate) const RETRY_AFTER_DEFAULT_SECS: u64 = 1;

/// The generic body of a panic: the cause goes to the log only.
#[allow(
    clippy::needless_pass_by_value,
    reason = "the signature CatchPanicLayer::custom calls"
)]
pub fn panic_response(err: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let cause = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| {
            err.downcast_ref::<&str>()
                .map(std::string::ToString::to_string)
        })
        .unwrap_or_else(|| "unknown panic".into());
    tracing::error!(target: "zm_http", %cause, "handler panicked");
    ApiError::new(ToolError::new(
        ErrorCode::Internal,
        "Internal server error.",
    ))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 401 a route raises itself (no challenge passed) still names the
    /// scheme; one with a challenge keeps it.
    #[test]
    fn every_401_carries_a_challenge() {
        let plain = ApiError::new(ToolError::unauthorized("gone")).into_response();
        assert_eq!(plain.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(plain.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let mut given = ApiError::new(ToolError::unauthorized("expired"));
        given.challenge = Some("Bearer error=\"invalid_token\"".into());
        let given = given.into_response();
        assert_eq!(
            given.headers()[header::WWW_AUTHENTICATE],
            "Bearer error=\"invalid_token\""
        );
        let other = ApiError::new(ToolError::forbidden("no")).into_response();
        assert!(!other.headers().contains_key(header::WWW_AUTHENTICATE));
    }

    /// Every 429 says when to come back: the store's refusal sets no time
    /// (a second), a caller's time is kept.
    #[test]
    fn every_429_carries_retry_after() {
        let bare = ApiError::new(ToolError::rate_limited("busy")).into_response();
        assert_eq!(bare.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(bare.headers()[header::RETRY_AFTER], "1");
        let mut given = ApiError::new(ToolError::rate_limited("later"));
        given.retry_after = Some(30);
        assert_eq!(given.into_response().headers()[header::RETRY_AFTER], "30");
        let other = ApiError::new(ToolError::forbidden("no")).into_response();
        assert!(!other.headers().contains_key(header::RETRY_AFTER));
    }
}
