//! RFC 8414 authorization-server metadata.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use zm_store::oauth::OAUTH_SCOPES;

use super::OauthState;

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
            "revocation_endpoint": format!("{base}/oauth/revoke"),
            "revocation_endpoint_auth_methods_supported": ["none"],
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
