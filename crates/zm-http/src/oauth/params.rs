//! Request parameters: the query of `GET /oauth/authorize`, the form of
//! `POST /oauth/authorize`, the form (or JSON object) of `POST
//! /oauth/token` and `POST /oauth/revoke` — each parameter at most once (RFC 6749 §3.1), and at
//! most [`MAX_PARAMS`] of them: a longer list is refused before it is
//! decoded.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde_json::Value;

use super::{OauthRejection, OauthState};
use crate::request::{BodyType, body_type, read_body};

/// Largest body accepted on the OAuth endpoints.
const OAUTH_BODY_LIMIT: usize = 64 * 1024;

/// Most parameters an OAuth request may carry (a sign-in form has about a
/// dozen).
pub(super) const MAX_PARAMS: usize = 64;

fn too_many() -> String {
    format!("The request has more than {MAX_PARAMS} parameters.")
}

/// Whether an urlencoded string holds more than [`MAX_PARAMS`] pairs,
/// counted as the decoder does (empty pieces are skipped) but without
/// decoding, and without looking past the first one too many.
fn over_cap(encoded: &[u8]) -> bool {
    encoded
        .split(|b| *b == b'&')
        .filter(|piece| !piece.is_empty())
        .nth(MAX_PARAMS)
        .is_some()
}

/// Request parameters, each at most once; an empty value counts as absent
/// (RFC 6749 §3.1).
#[derive(Debug, Default)]
pub(super) struct Params(HashMap<String, String>);

impl Params {
    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Refuses the first name that comes again (one pass, hashed).
    fn from_pairs(pairs: Vec<(String, String)>) -> Result<Params, String> {
        let mut map = HashMap::with_capacity(pairs.len());
        for (k, v) in pairs {
            if k.contains('\0') || v.contains('\0') {
                return Err(crate::request::NUL_REFUSED.to_string());
            }
            match map.entry(k) {
                Entry::Occupied(e) => {
                    return Err(format!("The parameter {:?} is repeated.", e.key()));
                }
                Entry::Vacant(e) => {
                    e.insert(v);
                }
            }
        }
        Ok(Params(map))
    }

    fn from_query(query: Option<&str>) -> Result<Params, String> {
        if over_cap(query.unwrap_or("").as_bytes()) {
            return Err(too_many());
        }
        if !crate::request::urlencoded_is_utf8(query.unwrap_or("").as_bytes()) {
            return Err("The query string holds an escape that is not UTF-8 text.".into());
        }
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query.unwrap_or(""))
            .map_err(|_| "The query string is malformed.".to_string())?;
        Params::from_pairs(pairs)
    }

    fn from_form(bytes: &[u8]) -> Result<Params, String> {
        if over_cap(bytes) {
            return Err(too_many());
        }
        if !crate::request::urlencoded_is_utf8(bytes) {
            return Err("The form body holds text that is not UTF-8.".into());
        }
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(bytes)
            .map_err(|_| "The form body is malformed.".to_string())?;
        Params::from_pairs(pairs)
    }

    /// A JSON object of strings (`null` counts as absent).
    fn from_json(bytes: &[u8]) -> Result<Params, String> {
        let v: Value =
            serde_json::from_slice(bytes).map_err(|_| "The body is not valid JSON.".to_string())?;
        let Value::Object(o) = v else {
            return Err("The body must be a JSON object.".into());
        };
        if o.len() > MAX_PARAMS {
            return Err(too_many());
        }
        // A repeated key, which the object above kept once (the last).
        if let Some(k) = zm_contracts::validate::repeated_key(bytes) {
            return Err(format!("The parameter {k:?} is repeated."));
        }
        let mut pairs = Vec::with_capacity(o.len());
        for (k, v) in o {
            match v {
                Value::String(s) => pairs.push((k, s)),
                Value::Null => {}
                _ => return Err(format!("The parameter {k:?} must be a string.")),
            }
        }
        Params::from_pairs(pairs)
    }
}

/// The body of an OAuth request, within the OAuth body limit.
pub(super) async fn body_bytes(st: &OauthState, body: Body) -> Result<bytes::Bytes, String> {
    let limit = st.app.cfg.body_limit.min(OAUTH_BODY_LIMIT);
    read_body(body, limit).await.map_err(|e| {
        let mut m = e.describe();
        m[..1].make_ascii_uppercase();
        m + "."
    })
}

/// Extractor: the query parameters. Rejects `invalid_request`.
pub(super) struct QueryParams(pub Params);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = OauthRejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, OauthRejection> {
        Params::from_query(parts.uri.query())
            .map(QueryParams)
            .map_err(OauthRejection::invalid_request)
    }
}

/// Extractor: an `application/x-www-form-urlencoded` body. Rejects
/// `invalid_request`.
pub(super) struct FormParams(pub Params);

impl FromRequest<OauthState> for FormParams {
    type Rejection = OauthRejection;

    async fn from_request(req: Request, st: &OauthState) -> Result<Self, OauthRejection> {
        read(req, st, false)
            .await
            .map(FormParams)
            .map_err(OauthRejection::invalid_request)
    }
}

/// Extractor: a form body or a JSON object of strings. Rejects
/// `invalid_request`.
pub(super) struct FormOrJsonParams(pub Params);

impl FromRequest<OauthState> for FormOrJsonParams {
    type Rejection = OauthRejection;

    async fn from_request(req: Request, st: &OauthState) -> Result<Self, OauthRejection> {
        read(req, st, true)
            .await
            .map(FormOrJsonParams)
            .map_err(OauthRejection::invalid_request)
    }
}

/// The body's parameters: a form, or (when `json_ok`) a JSON object. The
/// size limit is checked before the media type.
async fn read(req: Request, st: &OauthState, json_ok: bool) -> Result<Params, String> {
    let kind = body_type(req.headers());
    let bytes = body_bytes(st, req.into_body()).await?;
    match kind {
        BodyType::Form => Params::from_form(&bytes),
        BodyType::Json if json_ok => Params::from_json(&bytes),
        _ if json_ok => {
            Err("The body must be application/x-www-form-urlencoded or application/json.".into())
        }
        _ => Err("The body must be application/x-www-form-urlencoded.".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A parameter whose escapes are not UTF-8 is refused, not decoded to
    /// U+FFFD (a `state` changed so would come back to the client as a
    /// different value).
    #[test]
    fn a_parameter_that_is_not_utf8_is_refused() {
        assert!(Params::from_query(Some("state=caf%E9")).is_err());
        assert!(Params::from_form(b"state=caf%E9").is_err());
        assert_eq!(
            Params::from_query(Some("state=caf%C3%A9"))
                .unwrap()
                .get("state"),
            Some("caf\u{e9}")
        );
    }

    #[test]
    fn each_parameter_once_and_empty_is_absent() {
        let p = Params::from_query(Some("a=1&b=&c=x%20y")).unwrap();
        assert_eq!(p.get("a"), Some("1"));
        assert_eq!(p.get("b"), None);
        assert_eq!(p.get("c"), Some("x y"));
        assert_eq!(p.get("d"), None);
        assert_eq!(
            Params::from_query(Some("a=1&b=2&a=3")).unwrap_err(),
            "The parameter \"a\" is repeated."
        );
        assert!(
            Params::from_query(Some("a=&a=")).is_err(),
            "empty repeats too"
        );
        assert!(Params::from_query(None).unwrap().get("a").is_none());
        assert!(Params::from_form(b"grant_type=x&grant_type=x").is_err());
    }

    #[test]
    fn a_repeat_is_found_among_many_parameters() {
        let mut pairs: Vec<(String, String)> =
            (0..50_000).map(|i| (format!("p{i}"), "v".into())).collect();
        assert_eq!(
            Params::from_pairs(pairs.clone()).unwrap().get("p49999"),
            Some("v")
        );
        pairs.push(("p123".into(), "again".into()));
        assert_eq!(
            Params::from_pairs(pairs).unwrap_err(),
            "The parameter \"p123\" is repeated."
        );
    }

    /// A query of 12,000 distinct parameters is refused by counting, before
    /// anything is decoded: a repeat after the cap is never reached.
    #[test]
    fn more_than_the_cap_is_refused_before_decoding() {
        let query = |n: usize| {
            (0..n)
                .map(|i| format!("p{i}=v"))
                .collect::<Vec<_>>()
                .join("&")
        };
        assert!(Params::from_query(Some(&query(MAX_PARAMS))).is_ok());
        assert!(
            Params::from_query(Some(&format!("{}&&&", query(MAX_PARAMS)))).is_ok(),
            "empty pieces are not parameters"
        );
        for n in [MAX_PARAMS + 1, 12_000] {
            assert_eq!(Params::from_query(Some(&query(n))).unwrap_err(), too_many());
            assert_eq!(
                Params::from_form(query(n).as_bytes()).unwrap_err(),
                too_many()
            );
        }
        let repeat_after_cap = format!("{}&p0=again", query(MAX_PARAMS));
        assert_eq!(
            Params::from_query(Some(&repeat_after_cap)).unwrap_err(),
            too_many()
        );
        let object: serde_json::Map<String, Value> = (0..=MAX_PARAMS)
            .map(|i| (format!("p{i}"), Value::from("v")))
            .collect();
        let json = serde_json::to_vec(&object).unwrap();
        assert_eq!(Params::from_json(&json).unwrap_err(), too_many());
    }

    #[test]
    fn json_bodies_hold_strings() {
        let p = Params::from_json(br#"{"a": "1", "b": null}"#).unwrap();
        assert_eq!((p.get("a"), p.get("b")), (Some("1"), None));
        assert_eq!(
            Params::from_json(br#"{"a": 1}"#).unwrap_err(),
            "The parameter \"a\" must be a string."
        );
        assert!(Params::from_json(b"[]").is_err());
        assert!(Params::from_json(b"{nope").is_err());
    }
}
