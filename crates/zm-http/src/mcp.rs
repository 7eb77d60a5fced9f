//! `/mcp`: the MCP server over Streamable HTTP, behind bearer auth, with
//! session ids that belong to their user.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::Mutex;
use tower::ServiceExt;
use zm_mcp::{Identity, McpConfig, ZeroMemoryMcp};

use crate::state::AppState;

/// The MCP service and who owns each of its sessions.
#[derive(Clone)]
pub struct McpEndpoint {
    service: StreamableHttpService<ZeroMemoryMcp, LocalSessionManager>,
    manager: Arc<LocalSessionManager>,
    owners: Arc<Mutex<HashMap<String, (String, Instant)>>>,
}

impl McpEndpoint {
    pub fn new(state: &AppState, cancel: tokio_util::sync::CancellationToken) -> Self {
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(state.cfg.session_idle);
        let manager = Arc::new(manager);
        let tools = state.tools.clone();
        let mcp_cfg = Arc::new(McpConfig {
            capped_clients: state.cfg.capped_clients.clone(),
        });
        let mut config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(state.cfg.hosts())
            .with_cancellation_token(cancel)
            .with_max_request_body_bytes(state.cfg.body_limit);
        if !state.cfg.allowed_origins.is_empty() {
            config = config.with_allowed_origins(state.cfg.allowed_origins.clone());
        }
        let service = StreamableHttpService::new(
            move || {
                Ok(ZeroMemoryMcp::new(
                    tools.clone(),
                    mcp_cfg.clone(),
                    Identity::Http,
                ))
            },
            manager.clone(),
            config,
        );
        McpEndpoint {
            service,
            manager,
            owners: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Evict the least recently used sessions beyond the cap.
    async fn enforce_cap(&self, max: usize) {
        let mut owners = self.owners.lock().await;
        let live = self.manager.sessions.read().await.len();
        if live < max {
            return;
        }
        let mut by_age: Vec<(String, Instant)> =
            owners.iter().map(|(k, (_, t))| (k.clone(), *t)).collect();
        by_age.sort_by_key(|(_, t)| *t);
        for (sid, _) in by_age.into_iter().take(live + 1 - max) {
            owners.remove(&sid);
            let _ = self.manager.close_session(&Arc::from(sid.as_str())).await;
        }
    }
}

/// The `/mcp` handler: authenticate, check session ownership, forward.
pub async fn handle(
    State((state, mcp)): State<(AppState, McpEndpoint)>,
    request: Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let anonymous = state.cfg.test_anonymous_user.as_ref().filter(|_| {
        !parts
            .headers
            .contains_key(axum::http::header::AUTHORIZATION)
    });
    let auth = match anonymous {
        Some(user_id) => zm_store::Authenticated {
            user_id: user_id.clone(),
            token_id: "test-anonymous".into(),
            scopes: vec![zm_store::SCOPE_READ.into(), zm_store::SCOPE_WRITE.into()],
        },
        None => match crate::auth::authenticate(&state, &parts).await {
            Ok(a) => a,
            Err(e) => return mcp_unauthorized(e),
        },
    };
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(sid) = &session {
        let mut owners = mcp.owners.lock().await;
        match owners.get_mut(sid) {
            Some((owner, seen)) if *owner == auth.user_id => *seen = Instant::now(),
            Some(_) => {
                // Another user's session answers exactly like an unknown one:
                // ask the transport about an id that never existed.
                let unknown = format!("unknown-{}", zm_contracts::IdKind::McpSession.generate());
                parts.headers.insert(
                    "mcp-session-id",
                    HeaderValue::from_str(&unknown).expect("ascii"),
                );
            }
            None => {}
        }
    } else if parts.method == axum::http::Method::POST {
        mcp.enforce_cap(state.cfg.max_sessions).await;
    }
    parts.extensions.insert(auth.clone());
    let request = Request::from_parts(parts, body);
    let response = match mcp.service.clone().oneshot(request).await {
        Ok(r) => r.map(Body::new),
        Err(never) => match never {},
    };
    if session.is_none()
        && let Some(sid) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        mcp.owners
            .lock()
            .await
            .insert(sid.to_string(), (auth.user_id.clone(), Instant::now()));
    }
    response
}

fn mcp_unauthorized(e: crate::error::ApiError) -> Response {
    let status = axum::http::StatusCode::from_u16(e.error.code.http_status())
        .unwrap_or(axum::http::StatusCode::UNAUTHORIZED);
    let mut resp = (
        status,
        axum::Json(serde_json::json!({"error": if status == axum::http::StatusCode::TOO_MANY_REQUESTS { "rate_limited" } else { "invalid_token" }, "error_description": e.error.message})),
    )
        .into_response();
    if let Some(c) = e.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        resp.headers_mut()
            .insert(axum::http::header::WWW_AUTHENTICATE, c);
    }
    if let Some(s) = e.retry_after {
        resp.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}
