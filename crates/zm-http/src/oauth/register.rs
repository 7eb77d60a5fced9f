//! `POST /oauth/register`: RFC 7591 dynamic registration of public clients.

use axum::Extension;
use axum::extract::{FromRequest, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use zm_store::oauth::OAUTH_SCOPES;

use super::limit::Throttled;
use super::params::body_bytes;
use super::{OauthRejection, OauthState, no_store, redirect};
use crate::request::{ClientIp, RequestId, ip_limit_key, ip_network_key, is_json};

fn invalid_metadata(description: impl Into<String>) -> OauthRejection {
    OauthRejection::bad_request("invalid_client_metadata", description)
}

/// Extractor: the client metadata, a JSON object (RFC 7591 §3.1). Rejects
/// `invalid_client_metadata`.
pub(super) struct ClientMetadata(Map<String, Value>);

impl FromRequest<OauthState> for ClientMetadata {
    type Rejection = OauthRejection;

    async fn from_request(req: Request, st: &OauthState) -> Result<Self, OauthRejection> {
        if !is_json(req.headers()) {
            return Err(invalid_metadata(
                "The body must be JSON (Content-Type: application/json).",
            ));
        }
        let bytes = body_bytes(st, req.into_body())
            .await
            .map_err(invalid_metadata)?;
        let Ok(Value::Object(doc)) = serde_json::from_slice::<Value>(&bytes) else {
            return Err(invalid_metadata("The body must be a JSON object."));
        };
        // As many fields as any OAuth request's parameters.
        if doc.len() > super::params::MAX_PARAMS {
            return Err(invalid_metadata(format!(
                "The metadata has more than {} fields.",
                super::params::MAX_PARAMS
            )));
        }
        if let Some(k) = zm_contracts::validate::repeated_key(&bytes) {
            return Err(invalid_metadata(format!("The field {k:?} is repeated.")));
        }
        Ok(ClientMetadata(doc))
    }
}

/// What a client's name shown on the sign-in page may not hold: control
/// characters, format characters (bidirectional overrides such as U+202E
/// and zero-width ones, which can make a name read as another) and line or
/// paragraph separators.
static HIDDEN: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]").expect("the pattern compiles")
});

/// When to try again after a registration refused because too many wait
/// for their first sign-in (they are forgotten an hour after registering).
const REGISTRATIONS_FULL_RETRY_S: u64 = 300;

/// The network a registration counts under for the waiting registrations'
/// per-network share (`zm_store::oauth::MAX_WAITING_PER_NETWORK`): an IPv6
/// address by its /48 (one allocation holds 65,536 /64s), an IPv4 one as
/// it is.
fn registration_network(ip: &str) -> String {
    ip_network_key(ip).unwrap_or_else(|| ip_limit_key(ip))
}

/// `POST /oauth/register`.
pub(super) async fn register(
    State(st): State<OauthState>,
    _: Throttled,
    ClientIp(ip): ClientIp,
    request_id: Option<Extension<RequestId>>,
    ClientMetadata(doc): ClientMetadata,
) -> Result<Response, OauthRejection> {
    let client_name = match doc.get("client_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            let n = s.chars().count();
            if !(1..=256).contains(&n) || HIDDEN.is_match(s) {
                return Err(invalid_metadata(
                    "client_name must be 1..256 characters, without control, format or line-separator characters.",
                ));
            }
            Some(s.clone())
        }
        Some(_) => return Err(invalid_metadata("client_name must be a string.")),
    };
    match doc.get("token_endpoint_auth_method") {
        None | Some(Value::Null) => {}
        Some(Value::String(m)) if m == "none" => {}
        Some(_) => {
            return Err(invalid_metadata(
                "Only public clients are supported: token_endpoint_auth_method must be \"none\".",
            ));
        }
    }
    let redirect_uris = redirect::registration(doc.get("redirect_uris"))
        .map_err(|d| OauthRejection::bad_request("invalid_redirect_uri", d))?;
    let client = st
        .app
        .store
        .register_oauth_client(
            client_name.as_deref(),
            &redirect_uris,
            Some(&registration_network(&ip)),
            request_id.as_ref().map(|Extension(r)| r.as_str()),
        )
        .await
        .map_err(|e| {
            // Too many registrations wait for a sign-in, in all or from
            // this network (the store logged it); a busy database is a
            // 503 worth retrying at once.
            if zm_store::oauth::is_registrations_full(&e) {
                OauthRejection::RateLimited {
                    retry_after: REGISTRATIONS_FULL_RETRY_S,
                }
            } else {
                super::error::store_failure("oauth registration", &e)
            }
        })?;
    let mut body = json!({
        "client_id": client.id,
        "redirect_uris": client.redirect_uris,
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "scope": OAUTH_SCOPES.join(" "),
        "client_id_issued_at": client.created_at / 1000,
    });
    if let Some(n) = &client.client_name {
        body["client_name"] = json!(n);
    }
    let mut resp = (StatusCode::CREATED, axum::Json(body)).into_response();
    no_store(resp.headers_mut());
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::registration_network;

    /// An IPv6 client counts by its /48 (any /64 of one allocation is one
    /// network), an IPv4 one, mapped into IPv6 or not, as its address.
    #[test]
    fn a_registration_counts_under_its_network() {
        assert_eq!(
            registration_network("2001:db8:7:1::5"),
            registration_network("2001:db8:7:ffff::9")
        );
        assert_ne!(
            registration_network("2001:db8:7::1"),
            registration_network("2001:db8:8::1")
        );
        assert_eq!(registration_network("::ffff:203.0.113.7"), "203.0.113.7");
        assert_eq!(registration_network("203.0.113.7"), "203.0.113.7");
        assert_ne!(
            registration_network("203.0.113.7"),
            registration_network("203.0.113.8")
        );
    }
}
