//! The REST routes: thin handlers over the store's one dispatcher.

use axum::Extension;
use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use zm_contracts::{MemoryId, ToolError, ToolName};
use zm_store::{Caller, RequestId, Transport};

use crate::auth::Auth;
use crate::error::ApiError;
use crate::request::{is_json, read_body};
use crate::state::AppState;

/// The caller of a REST request: the token's user and grant, the agent
/// name it declares, the request id.
pub(crate) fn caller_of(
    auth: &zm_store::Authenticated,
    headers: &HeaderMap,
    request_id: &RequestId,
) -> Caller {
    let mut caller = Caller::authenticated(auth, Transport::Rest);
    caller.agent_name =
        zm_store::agent_name(headers.get("x-zm-agent").and_then(|v| v.to_str().ok()));
    caller.request_id = Some(request_id.0.clone());
    caller
}

/// Read and parse a JSON body within the limit.
pub(crate) async fn json_body(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Value, ApiError> {
    let bytes = read_body(body, state.cfg.body_limit)
        .await
        .map_err(|e| ApiError::malformed(e.describe()))?;
    // No body at all is `{}` (the document's bodies are optional): a
    // client that sends none (`curl -X POST`) names no type either. A body,
    // or a type that is not JSON, must be JSON.
    let untyped = !headers.contains_key(axum::http::header::CONTENT_TYPE);
    if bytes.is_empty() && (untyped || is_json(headers)) {
        return Ok(Value::Object(Default::default()));
    }
    if !is_json(headers) {
        return Err(ApiError::malformed(
            "the body must be JSON (Content-Type: application/json)",
        ));
    }
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::malformed(format!("the body is not valid JSON ({e})")))?;
    if !value.is_object() {
        // A value of the wrong type is input that does not match its
        // schema: the field named is the whole body (path ""), as an MCP
        // call's `arguments` of the wrong type is.
        return Err(ApiError::new(zm_contracts::validate::validation_error(
            vec![zm_contracts::FieldError {
                path: String::new(),
                reason: "the body must be a JSON object".into(),
            }],
        )));
    }
    // Valid JSON with a key twice in one object: which value counts is
    // the parser's choice, so neither is taken.
    zm_contracts::validate::refuse_repeated_keys(&bytes).map_err(ApiError::new)?;
    Ok(value)
}

/// `POST /api/tools/{name}`: the same input, output and errors as MCP.
pub async fn call_tool(
    State(state): State<AppState>,
    Auth(auth): Auth,
    name: Result<Path<String>, PathRejection>,
    Extension(request_id): Extension<RequestId>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // Authentication first; a path that is not text answers in the
    // contract's error shape, like every other refusal.
    let Path(name) = name.map_err(|e| ApiError::malformed(e.body_text()))?;
    let Some(tool) = ToolName::parse(&name) else {
        return Err(ApiError::new(ToolError::not_found(format!(
            "No tool named {name:?}."
        ))));
    };
    let input = json_body(&state, &headers, body).await?;
    let caller = caller_of(&auth, &headers, &request_id);
    let lacking = zm_store::service::missing_scope(&caller, tool);
    let mut out = state
        .tools
        .call(&caller, tool, &input)
        .await
        .map_err(|e| match lacking {
            Some(_) if e.code == zm_contracts::ErrorCode::Forbidden => {
                match zm_store::service::step_up_scopes(auth.kind, tool) {
                    Some(scopes) => ApiError::insufficient_scope(e, scopes),
                    None => ApiError::new(e),
                }
            }
            _ => ApiError::new(e),
        })?;
    // REST keeps nothing between requests: a hint or a thread attaches
    // this call, not the next one (as a stateless MCP call answers).
    if let Some(session) = out.session_mut() {
        session
            .attached_project
            .clone_from(&caller.attached_project);
    }
    Ok(axum::Json(out).into_response())
}

/// `GET /api/memories/{id}`: what `zm://memory/{id}` returns.
pub async fn get_memory(
    State(state): State<AppState>,
    Auth(auth): Auth,
    id: Result<Path<String>, PathRejection>,
    Extension(request_id): Extension<RequestId>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(|e| ApiError::malformed(e.body_text()))?;
    let id = MemoryId::parse(&id)
        .map_err(|e| zm_contracts::validate::field_error("id", e.to_string()))?;
    let m = state
        .store
        .get_memory(&caller_of(&auth, &headers, &request_id), &id)
        .await?;
    Ok(axum::Json(m).into_response())
}

/// `GET /api/rules`: the caller's standing rules, pinned first.
pub async fn get_rules(
    State(state): State<AppState>,
    Auth(auth): Auth,
    Extension(request_id): Extension<RequestId>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let rules = state
        .store
        .rules_resource(&caller_of(&auth, &headers, &request_id))
        .await?;
    Ok(axum::Json(zm_contracts::RuleList { rules }).into_response())
}

/// `GET /api/contract`: version, error codes, prefixes, tools, ledger.
/// Built once: it is the same for every request, and anyone may ask.
pub async fn get_contract() -> Response {
    static DOC: std::sync::OnceLock<axum::body::Bytes> = std::sync::OnceLock::new();
    let body = DOC.get_or_init(|| {
        let mut doc = zm_contracts::contract::contract_document();
        doc["deprecations"] = serde_json::to_value(zm_contracts::deprecations::Ledger::committed())
            .unwrap_or(Value::Null);
        axum::body::Bytes::from(serde_json::to_vec(&doc).expect("the contract serialises"))
    });
    json_bytes(body.clone())
}

/// `GET /api/openapi.json`, built once per server (it names its public URL).
pub async fn openapi(State(state): State<AppState>) -> Response {
    let body = state.openapi.get_or_init(|| {
        axum::body::Bytes::from(
            serde_json::to_vec(&crate::openapi::document(&state.cfg.public_url))
                .expect("the OpenAPI document serialises"),
        )
    });
    json_bytes(body.clone())
}

/// A JSON document already serialised.
fn json_bytes(body: axum::body::Bytes) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(body),
    )
        .into_response()
}

/// `GET /healthz`: the process is alive.
pub async fn healthz() -> Response {
    axum::Json(json!({"ok": true, "version": env!("CARGO_PKG_VERSION"), "contract": zm_contracts::CONTRACT_VERSION})).into_response()
}

/// `GET /readyz`: the database answers (within two seconds).
pub async fn readyz(State(state): State<AppState>) -> Response {
    // A database that does not answer within this is as good as down for
    // a balancer's probe (the pool's own wait for a connection is 30 s).
    const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
    let db = tokio::time::timeout(READY_WAIT, state.store.ping())
        .await
        .unwrap_or(false);
    let status = if db {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        axum::Json(json!({"ok": db, "checks": {"database": db}})),
    )
        .into_response()
}

/// `GET /metrics`: Prometheus text, counts and totals only (never a
/// user's figures).
pub async fn metrics(State(state): State<AppState>) -> Response {
    // The storage gauges need the database; without it the counters are
    // still served (and `/readyz` reports the database).
    let asked = std::time::Instant::now();
    let gauges = state
        .metrics
        .db_gauges(asked, async {
            let storage = match state.store.storage_summary().await {
                Ok(summary) => summary.render(state.store.limits()),
                Err(e) => {
                    tracing::warn!(target: "zm_http", error = %e.message, "metrics: storage summary unavailable");
                    String::new()
                }
            };
            format!("{storage}{}", state.store.semantic_metrics().await)
        })
        .await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        format!(
            "{}{}{gauges}",
            state.metrics.render(state.store.writes_refused()).await,
            state.tools.metrics().render(),
        ),
    )
        .into_response()
}

/// RFC 9728 protected-resource metadata.
pub async fn protected_resource(State(state): State<AppState>) -> Response {
    let base = &state.cfg.public_url;
    (
        [(header::CACHE_CONTROL, "public, max-age=3600")],
        axum::Json(json!({
            "resource": format!("{base}/mcp"),
            "authorization_servers": [base],
            "scopes_supported": ["mcp:read", "mcp:write"],
            "bearer_methods_supported": ["header"],
            "resource_name": "zero-memory",
        })),
    )
        .into_response()
}

/// Unknown routes and wrong methods.
pub async fn fallback() -> ApiError {
    ApiError::not_found_route()
}
