//! What a request says about itself, each read in one place: its id (set by
//! the request-id middleware).

use std::convert::Infallible;

use axum::extract::OptionalFromRequestParts;
use axum::http::request::Parts;

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
