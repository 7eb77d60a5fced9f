//! `POST /oauth/token`: the authorization-code exchange (PKCE S256) and
//! refresh-token rotation; `POST /oauth/revoke`: RFC 7009 revocation.

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;
use sha2::{Digest, Sha256};
use zm_store::oauth::{CodeExchange, IssuedTokens, OauthClient, OauthError, ResourceCheck};

use super::limit::Throttled;
use super::params::{FormOrJsonParams, Params};
use super::{OauthRejection, OauthState, no_store, resource_ok};
use crate::request::RequestId;

/// `BASE64URL(SHA256(verifier))`.
pub(crate) fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// 43..128 characters of the RFC 3986 unreserved set (PKCE verifiers and
/// challenges).
pub(super) fn is_pkce_string(s: &str) -> bool {
    (43..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// What `s256` gives: 43 characters of the base64url alphabet, the last
/// one of those a 256-bit value can end in (its low two bits unused).
pub(super) fn is_s256_challenge(s: &str) -> bool {
    s.len() == 43
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
        && URL_SAFE_NO_PAD.decode(s).is_ok_and(|d| d.len() == 32)
}

/// `POST /oauth/token`.
pub(super) async fn token(
    State(st): State<OauthState>,
    _: Throttled,
    request_id: Option<Extension<RequestId>>,
    headers: HeaderMap,
    FormOrJsonParams(p): FormOrJsonParams,
) -> Result<Response, OauthRejection> {
    let rid = request_id.as_ref().map(|Extension(r)| r.as_str());
    let public_url = &st.app.cfg.public_url;
    let requested = p.get("resource");
    if let Some(r) = requested
        && !resource_ok(public_url, r)
    {
        return Err(OauthRejection::bad_request(
            "invalid_target",
            format!("resource must be {public_url}/mcp."),
        ));
    }
    // RFC 8707 §2.2: and one the grant covers, the resource its sign-in
    // named, checked by the store against the code or the token family:
    // the requested resource is ours (above), so the grant's must be ours
    // now too (one issued while the public URL was another is not).
    let same = |granted: &str| resource_ok(public_url, granted);
    let resource = requested.map(|_| &same as ResourceCheck<'_>);
    let tokens = match p.get("grant_type") {
        None => return Err(OauthRejection::invalid_request("grant_type is required.")),
        Some("authorization_code") => exchange(&st, &p, &headers, resource, rid).await?,
        Some("refresh_token") => refresh(&st, &p, &headers, resource, rid).await?,
        Some(_) => {
            return Err(OauthRejection::bad_request(
                "unsupported_grant_type",
                "Supported grant types: authorization_code, refresh_token.",
            ));
        }
    };
    let mut resp = axum::Json(json!({
        "access_token": tokens.access_token,
        "token_type": "Bearer",
        "expires_in": tokens.expires_in,
        "refresh_token": tokens.refresh_token,
        "scope": tokens.scope,
    }))
    .into_response();
    no_store(resp.headers_mut());
    Ok(resp)
}

/// `POST /oauth/revoke` (RFC 7009): the client that holds a token ends it
/// (a refresh token with its whole family). `200` with an empty body
/// whether or not the token was known (§2.2); `token_type_hint` is not
/// needed (the store finds the token whatever its type) and any value is
/// accepted. Every
/// client is public, so `client_id` is its identification (§2.1 with RFC
/// 6749 §2.3): required, and it must be the token's.
pub(super) async fn revoke(
    State(st): State<OauthState>,
    _: Throttled,
    request_id: Option<Extension<RequestId>>,
    headers: HeaderMap,
    FormOrJsonParams(p): FormOrJsonParams,
) -> Result<Response, OauthRejection> {
    let rid = request_id.as_ref().map(|Extension(r)| r.as_str());
    let client = ClientId::of(&headers, &p)?;
    let Some(token) = p.get("token") else {
        return Err(OauthRejection::invalid_request("token is required."));
    };
    let client = known_client(&st, &client).await?;
    st.app
        .store
        .revoke_oauth_token(token, &client.id, rid)
        .await
        .map_err(refused)?;
    let mut resp = axum::http::StatusCode::OK.into_response();
    no_store(resp.headers_mut());
    Ok(resp)
}

/// `grant_type=authorization_code`: a single-use code and its PKCE
/// verifier, for the client and redirect URI it was issued to.
async fn exchange(
    st: &OauthState,
    p: &Params,
    headers: &HeaderMap,
    resource: Option<ResourceCheck<'_>>,
    rid: Option<&str>,
) -> Result<IssuedTokens, OauthRejection> {
    for k in ["code", "code_verifier"] {
        if p.get(k).is_none() {
            return Err(OauthRejection::invalid_request(format!("{k} is required.")));
        }
    }
    let client = ClientId::of(headers, p)?;
    if p.get("redirect_uri").is_none() {
        return Err(OauthRejection::invalid_request("redirect_uri is required."));
    }
    let verifier = p.get("code_verifier").unwrap_or("");
    if !is_pkce_string(verifier) {
        return Err(OauthRejection::invalid_request(
            "code_verifier must be 43..128 unreserved characters.",
        ));
    }
    let client = known_client(st, &client).await?;
    st.app
        .store
        .exchange_oauth_code(
            CodeExchange {
                code: p.get("code").unwrap_or(""),
                client_id: &client.id,
                redirect_uri: p.get("redirect_uri").unwrap_or(""),
                verifier_challenge: &s256(verifier),
            },
            resource,
            rid,
        )
        .await
        .map_err(refused)
}

/// `grant_type=refresh_token`: rotation, optionally narrowing the scope,
/// for the resource its family was issued for (a request naming another
/// is `invalid_target`).
/// Every client is public, so `client_id` is its identification (OAuth 2.1
/// §4.3 with §2.4, §3.2.1): required, and the refresh token must have been
/// issued to that client. A refusal here or in the store (a missing or
/// unknown client, another client's token) spends nothing: the token stays
/// as it was, for its own client.
async fn refresh(
    st: &OauthState,
    p: &Params,
    headers: &HeaderMap,
    resource: Option<ResourceCheck<'_>>,
    rid: Option<&str>,
) -> Result<IssuedTokens, OauthRejection> {
    if p.get("refresh_token").is_none() {
        return Err(OauthRejection::invalid_request(
            "refresh_token is required.",
        ));
    }
    let client = known_client(st, &ClientId::of(headers, p)?).await?;
    st.app
        .store
        .refresh_oauth_token(
            p.get("refresh_token").unwrap_or(""),
            &client.id,
            p.get("scope"),
            resource,
            rid,
        )
        .await
        .map_err(refused)
}

/// The store's refusal as an RFC 6749 answer (its failures logged here).
fn refused(e: OauthError) -> OauthRejection {
    match e {
        OauthError::Busy(e) | OauthError::Internal(e) => {
            super::error::store_failure("oauth token", &e)
        }
        e => OauthRejection::bad_request(e.code(), e.description()),
    }
}

/// HTTP Basic credentials' base64, padded or not: both are seen in the wild.
const BASIC_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

/// How a request names its client. Every client is public
/// (`token_endpoint_auth_method: none`): it sends `client_id` in the body,
/// or, as a client written for confidential clients may, as the user
/// name of HTTP Basic with an empty password (RFC 6749 §2.3.1). A
/// client id is of the alphabet `[A-Za-z0-9_.]`, which the form encoding
/// RFC 6749 asks of the user name leaves as it is.
struct ClientId {
    id: String,
    /// Named through HTTP Basic: a refusal is a 401 with its challenge.
    basic: bool,
}

/// Why a client secret is refused, wherever it is sent.
const NO_CLIENT_SECRETS: &str = "This server issues no client secrets: every client is public (token_endpoint_auth_method none).";

impl ClientId {
    fn of(headers: &HeaderMap, p: &Params) -> Result<ClientId, OauthRejection> {
        let in_body = p.get("client_id");
        // A secret in the body is refused as one in Basic is: a client
        // that believes it authenticates with one is told it does not.
        if p.get("client_secret").is_some_and(|s| !s.is_empty()) {
            return Err(OauthRejection::InvalidClient {
                basic: false,
                description: format!("{NO_CLIENT_SECRETS} Send client_id alone."),
            });
        }
        let Some(credentials) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
            .map(|(_, c)| c.trim())
        else {
            return in_body
                .map(|id| ClientId {
                    id: id.to_string(),
                    basic: false,
                })
                .ok_or_else(|| OauthRejection::invalid_request("client_id is required."));
        };
        let refuse = |why: &str| OauthRejection::InvalidClient {
            basic: true,
            description: why.to_string(),
        };
        let decoded = BASIC_BASE64
            .decode(credentials)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| refuse("The Basic credentials are not base64 of user:password."))?;
        let (id, secret) = decoded
            .split_once(':')
            .ok_or_else(|| refuse("The Basic credentials are not base64 of user:password."))?;
        if !secret.is_empty() {
            return Err(refuse(NO_CLIENT_SECRETS));
        }
        if in_body.is_some_and(|b| b != id) {
            return Err(OauthRejection::invalid_request(
                "client_id in the body is not the client named by Authorization.",
            ));
        }
        Ok(ClientId {
            id: id.to_string(),
            basic: true,
        })
    }
}

async fn known_client(st: &OauthState, client: &ClientId) -> Result<OauthClient, OauthRejection> {
    match st.app.store.oauth_client(&client.id).await {
        Ok(Some(c)) => Ok(c),
        Ok(None) => Err(OauthRejection::InvalidClient {
            basic: client.basic,
            description: "Unknown client.".into(),
        }),
        Err(e) => Err(super::error::store_failure("oauth client lookup", &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_s256_matches_rfc_7636_appendix_b() {
        assert_eq!(
            s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        assert!(is_pkce_string(
            "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
        ));
        assert!(!is_pkce_string("short"));
        assert!(is_s256_challenge(&s256(&"v".repeat(43))));
        assert!(!is_s256_challenge(&"a".repeat(44)));
        assert!(!is_s256_challenge(&format!("{}~", "a".repeat(42))));
        assert!(!is_s256_challenge(&"a".repeat(128)));
        assert!(!is_pkce_string(&"a+".repeat(30)));
    }
}
