//! The per-client-IP, per-endpoint limit of the OAuth endpoints that do
//! work: the three POSTs and `GET /oauth/authorize` (a database lookup and
//! a page).

use std::sync::atomic::Ordering;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::{OauthRejection, OauthState};
use crate::request::ClientIp;

/// Extractor: counts the request against `oauth_rate_max` requests per
/// `oauth_rate_window` for its client IP (see [`ClientIp`]) and endpoint
/// (method and route: showing the sign-in page does not use up sign-in
/// attempts); rejects with 429 and `Retry-After`. Refused requests count
/// too, so put it before the parameter extractor.
pub(super) struct Throttled;

impl FromRequestParts<OauthState> for Throttled {
    type Rejection = OauthRejection;

    async fn from_request_parts(
        parts: &mut Parts,
        st: &OauthState,
    ) -> Result<Self, OauthRejection> {
        let cfg = &st.app.cfg;
        if cfg.oauth_rate_max == 0 {
            return Ok(Throttled);
        }
        let Ok(ClientIp(ip)) = ClientIp::from_request_parts(parts, st).await;
        let route = parts.uri.path().rsplit('/').next().unwrap_or("");
        let key = format!("oauth:{}:{route}:{ip}", parts.method);
        match st
            .app
            .limiter
            .hit(&key, cfg.oauth_rate_max, cfg.oauth_rate_window)
            .await
        {
            Ok(()) => Ok(Throttled),
            Err(secs) => {
                st.app.metrics.rate_limited.fetch_add(1, Ordering::Relaxed);
                Err(OauthRejection::RateLimited { retry_after: secs })
            }
        }
    }
}
