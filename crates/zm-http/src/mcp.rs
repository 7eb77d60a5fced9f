//! `/mcp`: the MCP server over Streamable HTTP, behind bearer auth, with
//! session ids that belong to their user.
//!
//! Sessions are bounded twice: per user (`max_sessions_per_user`: opening
//! one more ends that user's least recently used session) and overall
//! (`max_sessions`: a new session beyond it is refused with 503, never made
//! room for by ending another user's). The owner map follows rmcp's session
//! map: an owner is dropped on `DELETE` and, when a session is opened, every
//! owner whose session rmcp no longer has (idle expiry) is pruned.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower::ServiceExt;
use zm_mcp::{Identity, McpConfig, ZeroMemoryMcp};

use crate::state::AppState;

/// `Retry-After` of a session refused because the server is full.
const FULL_RETRY_AFTER_SECS: u32 = 60;

/// Who a session belongs to, when it was opened and last used.
#[derive(Debug)]
struct Owner {
    user: String,
    opened: Instant,
    seen: Instant,
}

/// The MCP service and who owns each of its sessions.
#[derive(Clone)]
pub struct McpEndpoint {
    service: StreamableHttpService<ZeroMemoryMcp, LocalSessionManager>,
    manager: Arc<LocalSessionManager>,
    owners: Arc<std::sync::Mutex<HashMap<String, Owner>>>,
    max_sessions: usize,
    max_per_user: usize,
}

/// Whether a new session may stay.
enum Admission {
    Admitted,
    /// The server holds `max_sessions` already.
    Full,
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
            owners: Arc::default(),
            max_sessions: state.cfg.max_sessions.max(1),
            max_per_user: state.cfg.max_sessions_per_user.max(1),
        }
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Owner>> {
        self.owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sessions rmcp holds now (tests: nothing leaks).
    pub async fn session_count(&self) -> usize {
        self.manager.sessions.read().await.len()
    }

    /// Sessions with a known owner now (tests: nothing leaks).
    pub fn owner_count(&self) -> usize {
        self.owners().len()
    }

    /// Is `sid` a session of `user`? Marks it used if so.
    fn touch(&self, sid: &str, user: &str) -> bool {
        match self.owners().get_mut(sid) {
            Some(o) if o.user == user => {
                o.seen = Instant::now();
                true
            }
            _ => false,
        }
    }

    /// Forget a session's owner (the client ended it).
    fn forget(&self, sid: &str) {
        self.owners().remove(sid);
    }

    /// Record a session rmcp just opened for `user`: prune the owners of
    /// sessions rmcp no longer has, end the user's least recently used
    /// sessions beyond the per-user cap, and refuse (close) the new one if
    /// the server is still full.
    async fn admit(&self, sid: &str, user: &str) -> Admission {
        // Owners recorded after this instant belong to sessions opened after
        // the snapshot below was taken: never prune those.
        let snapshot_at = Instant::now();
        let live: HashSet<String> = self
            .manager
            .sessions
            .read()
            .await
            .keys()
            .map(ToString::to_string)
            .collect();
        let (evicted, admission) = {
            let mut owners = self.owners();
            owners.retain(|k, o| o.opened >= snapshot_at || live.contains(k));
            let now = Instant::now();
            let mut mine: Vec<(Instant, String)> = owners
                .iter()
                .filter(|(_, o)| o.user == user)
                .map(|(k, o)| (o.seen, k.clone()))
                .collect();
            let over = (mine.len() + 1).saturating_sub(self.max_per_user);
            let mut evicted = Vec::with_capacity(over);
            if over > 0 {
                mine.sort_unstable();
                for (_, k) in mine.into_iter().take(over) {
                    owners.remove(&k);
                    evicted.push(k);
                }
            }
            let admission = if owners.len() >= self.max_sessions {
                evicted.push(sid.to_string());
                Admission::Full
            } else {
                owners.insert(
                    sid.to_string(),
                    Owner {
                        user: user.to_string(),
                        opened: now,
                        seen: now,
                    },
                );
                Admission::Admitted
            };
            (evicted, admission)
        };
        for k in evicted {
            let _ = self.manager.close_session(&Arc::from(k.as_str())).await;
        }
        admission
    }
}

/// The `/mcp` handler: authenticate, check session ownership, forward;
/// then record a new session's owner (or refuse it) and answer a
/// successful `DELETE` with 204.
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
    let owned = session
        .as_deref()
        .is_some_and(|sid| mcp.touch(sid, &auth.user_id));
    if session.is_some() && !owned {
        // Another user's session — or one without an owner (ended, or
        // refused) — answers exactly like an unknown one: ask the
        // transport about an id that never existed.
        let unknown = format!("unknown-{}", zm_contracts::IdKind::McpSession.generate());
        parts.headers.insert(
            "mcp-session-id",
            HeaderValue::from_str(&unknown).expect("ascii"),
        );
    }
    let delete = parts.method == Method::DELETE;
    parts.extensions.insert(auth.clone());
    let request = Request::from_parts(parts, body);
    let mut response = match mcp.service.clone().oneshot(request).await {
        Ok(r) => r.map(Body::new),
        Err(never) => match never {},
    };
    if delete && response.status().is_success() {
        if let Some(sid) = session.as_deref().filter(|_| owned) {
            mcp.forget(sid);
        }
        // rmcp answers 202; clients (the Python SDK) expect 200 or 204.
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    if session.is_none()
        && let Some(sid) = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
        && let Admission::Full = mcp.admit(&sid, &auth.user_id).await
    {
        return server_full();
    }
    response
}

/// 503: the server holds as many sessions as it allows. A JSON-RPC error
/// (the request's id is not read, so it is `null`) with `Retry-After`.
fn server_full() -> Response {
    let mut resp = (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {
                "code": -32000,
                "message": "This server has as many MCP sessions open as it allows; retry later.",
            },
        })),
    )
        .into_response();
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(FULL_RETRY_AFTER_SECS),
    );
    resp
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
