//! What a request says about itself, each read in one place: its id (set by
//! the request-id middleware) and the media type of its body.

use std::convert::Infallible;

use axum::extract::OptionalFromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};

/// The request's id (`req_…`): a well-formed incoming `X-Request-Id`, or
/// one minted by the middleware, which puts it in the request extensions.
/// Extract it as `Option<RequestId>` (absent only on a router built without
/// [`crate::with_layers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

impl RequestId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for RequestId {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Option<Self>, Infallible> {
        Ok(parts.extensions.get::<RequestId>().cloned())
    }
}

/// The kinds of body the HTTP surface reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyType {
    /// `application/json` or any `…+json`.
    Json,
    /// `application/x-www-form-urlencoded`.
    Form,
    /// Anything else, or no `Content-Type` at all.
    Other,
}

/// The body type a request declares: its `Content-Type` without
/// parameters, compared case-insensitively.
pub fn body_type(headers: &HeaderMap) -> BodyType {
    let mime = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "application/json" || mime.ends_with("+json") {
        BodyType::Json
    } else if mime == "application/x-www-form-urlencoded" {
        BodyType::Form
    } else {
        BodyType::Other
    }
}

/// Does the request declare a JSON body?
pub fn is_json(headers: &HeaderMap) -> bool {
    body_type(headers) == BodyType::Json
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn body_types() {
        let with = |ct: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            body_type(&h)
        };
        assert_eq!(with("application/json"), BodyType::Json);
        assert_eq!(with("Application/JSON; charset=utf-8"), BodyType::Json);
        assert_eq!(with("application/merge-patch+json"), BodyType::Json);
        assert_eq!(
            with("application/x-www-form-urlencoded; charset=UTF-8"),
            BodyType::Form
        );
        assert_eq!(with("text/plain"), BodyType::Other);
        assert_eq!(with("application/jsonx"), BodyType::Other);
        assert_eq!(body_type(&HeaderMap::new()), BodyType::Other);
        assert!(!is_json(&HeaderMap::new()));
    }
}
