//! The one rejection type of the OAuth endpoints and how each kind is
//! answered.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{no_store, pages};

/// Why an OAuth request fails, rendered as RFC 6749 §5.2 / RFC 7591 §3.2.2
/// requires: a JSON `{error, error_description}` body with the right
/// status (and `Retry-After` / `Allow` where they apply), or — on the
/// browser-facing authorization endpoint — an HTML page, never a redirect
/// to the client (only a sign-in's code goes back there, and that is no
/// rejection). Never cached.
#[derive(Debug)]
pub enum OauthRejection {
    /// 400 with an RFC 6749 / RFC 7591 error code.
    BadRequest {
        error: &'static str,
        description: String,
    },
    /// `invalid_client`: no client has this id, or it sent a secret (this
    /// server issues none). 400 when the client named itself in the body
    /// (RFC 6749 §5.2: a 401 must carry a challenge for a scheme the
    /// client could use, and a public client uses none); 401 with a
    /// `Basic` challenge when it authenticated with HTTP Basic.
    InvalidClient { basic: bool, description: String },
    /// 405 `invalid_request`, with `Allow`.
    MethodNotAllowed(&'static str),
    /// 429 `rate_limited`, with `Retry-After` seconds.
    RateLimited { retry_after: u64 },
    /// The same, to a browser on the sign-in page: a 429 page.
    RateLimitedPage { retry_after: u64 },
    /// 503 `temporarily_unavailable` with `Retry-After`: the database is
    /// too busy to take the request now; nothing was changed.
    Busy,
    /// The same, to a browser on the sign-in page: a 503 page.
    BusyPage,
    /// 500 `server_error`; the cause was logged where it happened.
    ServerError,
    /// Browser-facing, before a user has signed in in this request: an
    /// HTML error page (with the RFC 6749 `error` code when there is one),
    /// never a redirect. Registration is anonymous and takes any https
    /// URI, so even a registered redirect URI may lead anywhere: sending
    /// errors there before anyone signed in would make this server an
    /// open redirector (RFC 9700 §4.11.2).
    Page {
        status: StatusCode,
        error: Option<&'static str>,
        message: String,
    },
}

impl OauthRejection {
    pub fn bad_request(error: &'static str, description: impl Into<String>) -> Self {
        OauthRejection::BadRequest {
            error,
            description: description.into(),
        }
    }

    pub fn invalid_request(description: impl Into<String>) -> Self {
        Self::bad_request("invalid_request", description)
    }

    pub fn page(status: StatusCode, message: impl Into<String>) -> Self {
        OauthRejection::Page {
            status,
            error: None,
            message: message.into(),
        }
    }

    /// A refused authorization request, shown as a 400 page naming its
    /// RFC 6749 `error` code (nothing is sent to the client).
    pub fn request_page(error: &'static str, description: impl Into<String>) -> Self {
        OauthRejection::Page {
            status: StatusCode::BAD_REQUEST,
            error: Some(error),
            message: description.into(),
        }
    }

    /// The same refusal for a browser: malformed parameters on the
    /// authorization endpoint are shown as a 400 page, not a JSON body.
    pub fn into_page(self) -> Self {
        match self {
            OauthRejection::BadRequest { error, description } => {
                Self::request_page(error, description)
            }
            OauthRejection::RateLimited { retry_after } => {
                OauthRejection::RateLimitedPage { retry_after }
            }
            OauthRejection::Busy => OauthRejection::BusyPage,
            other => other,
        }
    }
}

impl IntoResponse for OauthRejection {
    fn into_response(self) -> Response {
        let mut extra = None;
        let (status, error, description) = match self {
            OauthRejection::Page {
                status,
                error,
                message,
            } => return pages::error(status, error, &message),
            OauthRejection::RateLimitedPage { retry_after } => {
                let retry_after = retry_after.max(1);
                let mut resp = pages::error(
                    StatusCode::TOO_MANY_REQUESTS,
                    Some(zm_contracts::ErrorCode::RateLimited.as_str()),
                    &format!(
                        "Too many sign-in attempts from this address. Wait {retry_after} s, then reload this page."
                    ),
                );
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
                return resp;
            }
            OauthRejection::BusyPage => {
                let mut resp = pages::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Some("temporarily_unavailable"),
                    "The server is busy; nothing was changed. Wait a moment, then reload this page.",
                );
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(BUSY_RETRY_S));
                return resp;
            }
            OauthRejection::BadRequest { error, description } => {
                (StatusCode::BAD_REQUEST, error, description)
            }
            OauthRejection::InvalidClient { basic, description } => {
                if basic {
                    extra = Some((
                        header::WWW_AUTHENTICATE,
                        HeaderValue::from_static("Basic realm=\"zero-memory\""),
                    ));
                    (StatusCode::UNAUTHORIZED, "invalid_client", description)
                } else {
                    (StatusCode::BAD_REQUEST, "invalid_client", description)
                }
            }
            OauthRejection::MethodNotAllowed(allow) => {
                extra = Some((header::ALLOW, HeaderValue::from_static(allow)));
                (
                    StatusCode::METHOD_NOT_ALLOWED,
                    "invalid_request",
                    format!("This endpoint accepts {allow} only."),
                )
            }
            OauthRejection::RateLimited { retry_after } => {
                extra = Some((header::RETRY_AFTER, HeaderValue::from(retry_after.max(1))));
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    zm_contracts::ErrorCode::RateLimited.as_str(),
                    "Too many requests. Retry later.".into(),
                )
            }
            OauthRejection::Busy => {
                extra = Some((header::RETRY_AFTER, HeaderValue::from(BUSY_RETRY_S)));
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "temporarily_unavailable",
                    "The server is busy; nothing was changed. Retry shortly.".into(),
                )
            }
            OauthRejection::ServerError => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "Internal server error.".into(),
            ),
        };
        let description = description_chars(&description);
        let mut resp = (
            status,
            axum::Json(json!({"error": error, "error_description": description})),
        )
            .into_response();
        let h = resp.headers_mut();
        no_store(h);
        if let Some((name, value)) = extra {
            h.insert(name, value);
        }
        resp
    }
}

/// `Retry-After` seconds of a [`OauthRejection::Busy`] answer: a write
/// that waited its whole turn (30 s) gave up; the next may get one.
const BUSY_RETRY_S: u64 = 1;

/// A store failure as an OAuth answer, logged here: a busy database, or a
/// write that lost to concurrent ones ([`zm_store::oauth::is_transient`]),
/// is load, not a fault, and the client may retry (`Busy`, a warning);
/// anything else is a `ServerError` (an error). `what` names the step
/// that failed.
pub(crate) fn store_failure(what: &str, e: &zm_contracts::ToolError) -> OauthRejection {
    if zm_store::oauth::is_transient(e) {
        tracing::warn!(target: "zm_http", error = %e, "{what}: the database is busy");
        OauthRejection::Busy
    } else {
        tracing::error!(target: "zm_http", error = %e, "{what} failed");
        OauthRejection::ServerError
    }
}

/// `error_description` in the characters RFC 6749 §5.2 allows (printable
/// ASCII but `"` and `\`; RFC 7591 §3.2.2 says ASCII too): a quote
/// becomes `'`, a backslash `/`, anything else outside the set (an
/// echoed parameter's non-ASCII or control characters) `?`.
fn description_chars(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            ' '..='~' => c,
            _ => '?',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    async fn render(r: OauthRejection) -> (StatusCode, axum::http::HeaderMap, Value) {
        let resp = r.into_response();
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (parts.status, parts.headers, json)
    }

    /// An echoed value (a scope, a parameter's name) never puts a quote,
    /// a backslash, a control or a non-ASCII character in the description.
    #[tokio::test]
    async fn descriptions_keep_to_the_rfc_6749_characters() {
        let r = OauthRejection::invalid_request("Unknown scope \"mcp:ré\\ad\u{7}\".");
        let (_, _, body) = render(r).await;
        let d = body["error_description"].as_str().unwrap();
        assert_eq!(d, "Unknown scope 'mcp:r?/ad?'.");
        assert!(
            d.chars()
                .all(|c| matches!(c, ' '..='!' | '#'..='[' | ']'..='~')),
            "{d}"
        );
    }

    #[tokio::test]
    async fn rfc_6749_bodies_with_their_status() {
        for (r, status, error) in [
            (
                OauthRejection::invalid_request("x is required."),
                400,
                "invalid_request",
            ),
            (
                OauthRejection::bad_request("invalid_grant", "x is required."),
                400,
                "invalid_grant",
            ),
            (
                OauthRejection::InvalidClient {
                    basic: false,
                    description: "Unknown client.".into(),
                },
                400,
                "invalid_client",
            ),
            (
                OauthRejection::InvalidClient {
                    basic: true,
                    description: "Unknown client.".into(),
                },
                401,
                "invalid_client",
            ),
            (
                OauthRejection::MethodNotAllowed("POST"),
                405,
                "invalid_request",
            ),
            (
                OauthRejection::RateLimited { retry_after: 0 },
                429,
                "rate_limited",
            ),
            (OauthRejection::Busy, 503, "temporarily_unavailable"),
            (OauthRejection::ServerError, 500, "server_error"),
        ] {
            let (st, h, body) = render(r).await;
            assert_eq!(st.as_u16(), status, "{body}");
            assert_eq!(body["error"], error);
            assert!(body["error_description"].is_string());
            assert_eq!(body.as_object().unwrap().len(), 2);
            assert_eq!(h[header::CACHE_CONTROL], "no-store");
            assert_eq!(h[header::PRAGMA], "no-cache");
            assert_eq!(
                h.contains_key(header::WWW_AUTHENTICATE),
                status == 401,
                "a 401, and only a 401, carries a challenge"
            );
            match status {
                405 => assert_eq!(h[header::ALLOW], "POST"),
                429 | 503 => assert_eq!(h[header::RETRY_AFTER], "1", "at least one second"),
                _ => {
                    assert!(h.get(header::ALLOW).is_none() && h.get(header::RETRY_AFTER).is_none());
                }
            }
        }
        let (_, h, _) = render(OauthRejection::RateLimited { retry_after: 42 }).await;
        assert_eq!(h[header::RETRY_AFTER], "42");
    }

    #[tokio::test]
    async fn browser_refusals_are_pages_never_redirects() {
        let resp = OauthRejection::invalid_request("Bad <query>.")
            .into_page()
            .into_response();
        let (parts, body) = resp.into_parts();
        assert_eq!(parts.status, StatusCode::BAD_REQUEST);
        let h = parts.headers;
        assert!(
            h[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        assert!(h.get(header::LOCATION).is_none());
        let html = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let html = String::from_utf8(html.to_vec()).unwrap();
        assert!(
            html.contains("<code>invalid_request</code>") && html.contains("Bad &lt;query&gt;."),
            "{html}"
        );
        // A busy database, to a browser: a 503 page that says to reload.
        let resp = OauthRejection::Busy.into_page().into_response();
        let (parts, body) = resp.into_parts();
        assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(parts.headers[header::RETRY_AFTER], "1");
        assert!(parts.headers.get(header::LOCATION).is_none());
        let html = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        let html = String::from_utf8(html.to_vec()).unwrap();
        assert!(
            html.contains("<code>temporarily_unavailable</code>") && html.contains("reload"),
            "{html}"
        );
    }

    /// The store's failures: a busy database, or a write that lost to
    /// concurrent ones, is `Busy` (the client may retry), anything else a
    /// `ServerError`.
    #[test]
    fn a_busy_store_is_not_a_server_error() {
        let busy = zm_contracts::ToolError::rate_limited("The database is busy.");
        assert!(matches!(store_failure("t", &busy), OauthRejection::Busy));
        let lost = zm_contracts::ToolError::conflict("Lost to concurrent writes; retry it.");
        assert!(matches!(store_failure("t", &lost), OauthRejection::Busy));
        let broken = zm_contracts::ToolError::internal();
        assert!(matches!(
            store_failure("t", &broken),
            OauthRejection::ServerError
        ));
    }
}
