//! `/mcp`: the MCP server over Streamable HTTP, behind bearer auth, with
//! session ids that belong to their user.
//!
//! Sessions (the 2025-11-25 era; 2026-07-28 requests are stateless) live in
//! the database (`mcp_sessions`), so that every instance on one database
//! serves every session: a request resumes its session there (owner,
//! idle expiry, attached project, thread), and an instance that has no
//! worker for it rebuilds one by replaying the client's stored
//! `initialize` (rmcp's session-store restore). Another user's id, an
//! ended one and an expired one all read as unknown.
//!
//! Sessions are bounded twice, in the database's admission transaction:
//! per user (`max_sessions_per_user`: opening one more ends that user's
//! least recently used session) and overall (`max_sessions`: a new session
//! beyond it is refused with 503, never made room for by ending another
//! user's). A session ended on one instance stops answering on every
//! instance at once (its row is gone); a worker another instance still
//! holds for it ends with the idle timeout.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::model::InitializeRequestParams;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    SessionManager, SessionState, SessionStore, SessionStoreError,
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tower::ServiceExt;
use zm_contracts::ToolError;
use zm_mcp::{Identity, McpConfig, ZeroMemoryMcp};
use zm_store::{NewSession, SessionCaps, Store};

use crate::state::AppState;

/// `Retry-After` of a session refused because the server is full.
const FULL_RETRY_AFTER_SECS: u32 = 60;

/// How long an `initialize`'s parameters wait for their session's
/// admission or restore ([`KeptParams`]; a request abandoned in between
/// leaves them behind).
const PENDING_TTL: Duration = Duration::from_secs(60);

/// How often this instance looks for session workers whose sessions are
/// no longer recorded (ended on the dashboard, evicted or erased by
/// another instance, the account erased).
const ORPHAN_LOOK_EVERY: Duration = Duration::from_secs(15);

/// How long a worker must have gone without a recorded session before it
/// is ended: longer than a session's admission can wait for the database
/// (the pool's 30 s and SQLite's 30 s busy wait), since rmcp starts the
/// worker before its row is written.
const ORPHAN_GRACE: Duration = Duration::from_secs(90);

/// The largest body the transport reads. Every POST's body is read,
/// within `body_limit`, before the transport gets it; a marked repeated
/// argument key makes it longer than sent (the marker and the key's path,
/// and the numbers written again), and a marked body past this loses its
/// arguments, keeping the mark: a refusable call never becomes the
/// transport's plain-text 413.
fn transport_body_limit(state: &AppState) -> usize {
    state.cfg.body_limit.saturating_mul(2).saturating_add(1024)
}

/// The MCP service and the database its sessions live in.
#[derive(Clone)]
pub struct McpEndpoint {
    service: StreamableHttpService<ZeroMemoryMcp, LocalSessionManager>,
    manager: Arc<LocalSessionManager>,
    sessions: Arc<DbSessions>,
    caps: SessionCaps,
    /// Workers the looks found without a recorded session, since when.
    unrecorded: Arc<tokio::sync::Mutex<HashMap<String, Instant>>>,
}

/// Sessions' `initialize` parameters kept a short while for a step that
/// follows, by session id: each taken once, and any left behind (by a
/// request abandoned in between) gone after [`PENDING_TTL`].
#[derive(Default)]
struct KeptParams(std::sync::Mutex<HashMap<String, (Instant, String)>>);

impl KeptParams {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, String)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn keep(&self, sid: &str, params: String) {
        let now = Instant::now();
        let mut map = self.map();
        map.retain(|_, (at, _)| now.duration_since(*at) < PENDING_TTL);
        map.insert(sid.to_string(), (now, params));
    }

    fn take(&self, sid: &str) -> Option<String> {
        self.map().remove(sid).map(|(_, p)| p)
    }
}

/// rmcp's session store over `mcp_sessions`: `load` gives another
/// instance the `initialize` to replay; `store` holds the parameters until
/// [`handle`] admits the session (it knows the owner); `delete` ends it.
struct DbSessions {
    store: Store,
    idle_ms: i64,
    /// What rmcp stored, until the session's admission.
    pending: KeptParams,
    /// The `initialize` parameters of sessions this instance is about to
    /// rebuild a worker for, read by [`handle`] before the transport sees
    /// the request (so that a database that fails the read is answered in
    /// JSON-RPC's terms, a busy one with 429, where rmcp's restore would
    /// answer a plain-text 500); `load` takes them, `forward` drops what
    /// no restore took.
    restoring: KeptParams,
}

fn store_error(e: &ToolError) -> SessionStoreError {
    Box::new(std::io::Error::other(e.message.clone()))
}

#[async_trait::async_trait]
impl SessionStore for DbSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let kept = self.restoring.take(session_id);
        let params = match kept {
            Some(p) => Some(p),
            None => self
                .store
                .mcp_session_init_params(session_id, self.idle_ms)
                .await
                .map_err(|e| store_error(&e))?,
        };
        Ok(params
            .and_then(|p| serde_json::from_str::<InitializeRequestParams>(&p).ok())
            .map(SessionState::new))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let params = serde_json::to_string(&state.initialize_params)?;
        self.pending.keep(session_id, params);
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.store
            .mcp_session_close(session_id)
            .await
            .map_err(|e| store_error(&e))
    }
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
        let caps = SessionCaps {
            per_user: state.cfg.max_sessions_per_user.max(1),
            total: state.cfg.max_sessions.max(1),
            idle_ms: i64::try_from(state.cfg.session_idle.as_millis()).unwrap_or(i64::MAX),
        };
        let sessions = Arc::new(DbSessions {
            store: state.store.clone(),
            idle_ms: caps.idle_ms,
            pending: KeptParams::default(),
            restoring: KeptParams::default(),
        });
        let mut config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(state.cfg.hosts())
            .with_cancellation_token(cancel.clone())
            .with_max_request_body_bytes(transport_body_limit(state));
        // Origin is checked by `handle`, with the rule the dashboard's forms
        // share (rmcp's own check knows no per-request "same origin").
        config.session_store = Some(sessions.clone());
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
        let endpoint = McpEndpoint {
            service,
            manager,
            sessions,
            caps,
            unrecorded: Arc::default(),
        };
        let looking = endpoint.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(ORPHAN_LOOK_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    _ = every.tick() => {}
                }
                looking.end_unrecorded_workers().await;
            }
        });
        endpoint
    }

    /// Does this instance hold a worker for session `sid`?
    async fn has_worker(&self, sid: &str) -> bool {
        self.manager.sessions.read().await.contains_key(sid)
    }

    /// End this instance's session workers whose sessions the database has
    /// not recorded for [`ORPHAN_GRACE`] (looks in a row found none; a
    /// session rmcp just opened is recorded once [`Self::admit`] runs, at
    /// most the database's wait later); how many were ended. Every request
    /// already finds such a session gone (`404`); this frees what its
    /// worker holds, and keeps the workers within the session caps, which
    /// count rows. Run every [`ORPHAN_LOOK_EVERY`]; a database that cannot
    /// answer leaves the workers to the next look.
    pub async fn end_unrecorded_workers(&self) -> usize {
        self.end_workers_unrecorded_for(ORPHAN_GRACE).await
    }

    /// [`Self::end_unrecorded_workers`] with another grace (tests: zero).
    pub async fn end_workers_unrecorded_for(&self, grace: Duration) -> usize {
        let local: Vec<Arc<str>> = self.manager.sessions.read().await.keys().cloned().collect();
        let mut unrecorded = self.unrecorded.lock().await;
        if local.is_empty() {
            unrecorded.clear();
            return 0;
        }
        let ids: Vec<&str> = local.iter().map(AsRef::as_ref).collect();
        let recorded = match self.sessions.store.mcp_sessions_recorded(&ids).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e.message, "looking for ended sessions' workers failed");
                return 0;
            }
        };
        let now = Instant::now();
        // Since when each worker missing now has been missing: a worker
        // found again, or gone, is forgotten.
        let missing: HashMap<String, Instant> = ids
            .iter()
            .filter(|id| !recorded.contains(**id))
            .map(|id| (id.to_string(), unrecorded.get(*id).copied().unwrap_or(now)))
            .collect();
        let mut ended = 0;
        let mut still = HashMap::new();
        for (id, since) in missing {
            // Seen missing by an earlier look, and long enough.
            if since < now && now.duration_since(since) >= grace {
                let _ = self.manager.close_session(&Arc::from(id.as_str())).await;
                ended += 1;
            } else {
                still.insert(id, since);
            }
        }
        if ended > 0 {
            tracing::debug!(ended, "ended the workers of sessions no longer recorded");
        }
        *unrecorded = still;
        ended
    }

    /// Session workers this instance runs now (tests: nothing leaks).
    pub async fn session_count(&self) -> usize {
        self.manager.sessions.read().await.len()
    }

    /// Sessions recorded in the database now, idle ones not yet swept
    /// included (tests: nothing leaks).
    pub async fn owner_count(&self) -> usize {
        self.sessions.store.mcp_session_count().await.unwrap_or(0)
    }

    /// Record a session rmcp just opened for `user` (see
    /// [`Store::mcp_session_admit`]), end this instance's workers of the
    /// user's sessions the per-user cap ended, and close the new one if it
    /// was refused. An error: the database failed or was busy (the session
    /// is closed).
    async fn admit(&self, sid: &str, user: &str) -> Result<bool, ToolError> {
        let params = self.sessions.pending.take(sid);
        let conn_id = zm_contracts::IdKind::McpSession.generate();
        let admission = self
            .sessions
            .store
            .mcp_session_admit(
                NewSession {
                    id: sid,
                    user_id: user,
                    conn_id: &conn_id,
                    init_params: params.as_deref(),
                },
                self.caps,
            )
            .await;
        let (admitted, evicted) = match admission {
            Ok(a) => (Ok(a.admitted), a.evicted),
            Err(e) => (Err(e), Vec::new()),
        };
        for k in evicted {
            let _ = self.manager.close_session(&Arc::from(k.as_str())).await;
        }
        if !matches!(admitted, Ok(true)) {
            let _ = self.manager.close_session(&Arc::from(sid)).await;
        }
        admitted
    }
}

/// The `/mcp` handler: authenticate, resume the session from the database
/// (owner and expiry checked), forward; then record a new session (or
/// refuse it) and answer a successful `DELETE` with 204.
///
/// A browser page at an accepted origin ([`crate::state::HttpConfig::mcp_origin_ok`]:
/// ours, or one the operator listed) gets CORS: its preflight is answered
/// before any token is asked for (a preflight carries none), and every
/// answer names the origin and exposes the session header. Another
/// origin is refused with 403 and no CORS, so its page reads nothing.
pub async fn handle(state: State<(AppState, McpEndpoint)>, request: Request) -> Response {
    let origin = match request.headers().get(header::ORIGIN) {
        None => None,
        Some(sent) => {
            let host = request
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok());
            match sent.to_str() {
                Ok(o) if state.0.0.cfg.mcp_origin_ok(o, host) => Some(sent.clone()),
                _ => return foreign_origin(),
            }
        }
    };
    let Some(origin) = origin else {
        // An answer that depends on Origin says so, with or without one.
        let mut resp = handle_allowed(state, request).await;
        resp.headers_mut()
            .append(header::VARY, HeaderValue::from_static("origin"));
        return resp;
    };
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = if preflight {
        let mut resp = StatusCode::NO_CONTENT.into_response();
        let h = resp.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST, DELETE"),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            allowed_request_headers(request.headers()),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static("600"),
        );
        resp
    } else {
        handle_allowed(state, request).await
    };
    let h = resp.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.append(header::VARY, HeaderValue::from_static("origin"));
    h.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(
            "mcp-session-id, mcp-protocol-version, www-authenticate, retry-after",
        ),
    );
    resp
}

/// The headers a browser client may send `/mcp`: the transport's own,
/// and every `Mcp-*` header the preflight asks for. From 2026-07-28 each
/// POST carries `Mcp-Method` and `Mcp-Name`, and a tool call its
/// `Mcp-Param-*` headers, whose names depend on the tool's arguments: at
/// most [`PARAM_HEADERS_ALLOWED`] of them are named (the preflight is
/// answered before any token is asked for; a list of thousands is no
/// client's).
fn allowed_request_headers(headers: &HeaderMap) -> HeaderValue {
    const BASE: &str = "authorization, content-type, accept, mcp-protocol-version, mcp-session-id, last-event-id, mcp-method, mcp-name";
    let mut named = std::collections::BTreeSet::new();
    let asked = headers
        .get_all(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim);
    for name in asked {
        let token = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        let Some(param) = name
            .get(..PARAM_PREFIX.len())
            .filter(|p| p.eq_ignore_ascii_case(PARAM_PREFIX))
            .map(|_| &name[PARAM_PREFIX.len()..])
        else {
            continue;
        };
        if token && !param.is_empty() {
            named.insert(name.to_ascii_lowercase());
            if named.len() == PARAM_HEADERS_ALLOWED {
                break;
            }
        }
    }
    let allowed = std::iter::once(BASE.to_string())
        .chain(named)
        .collect::<Vec<_>>()
        .join(", ");
    HeaderValue::from_str(&allowed).unwrap_or_else(|_| HeaderValue::from_static(BASE))
}

/// The prefix of a 2026-07-28 tool call's argument headers.
const PARAM_PREFIX: &str = "mcp-param-";

/// How many `Mcp-Param-*` headers a preflight's answer allows at most.
const PARAM_HEADERS_ALLOWED: usize = 64;

/// [`handle`] once the request's origin (if any) is accepted.
async fn handle_allowed(
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
            kind: zm_store::TokenKind::Pat,
        },
        None => match crate::auth::authenticate(&state, &parts).await {
            Ok(a) => a,
            Err(e) => return mcp_unauthorized(e),
        },
    };
    // Every POST's body is read here, within the limit and the body
    // timeout, and refused in JSON-RPC's own terms when it is not one
    // JSON-RPC message (the transport would answer in plain text, a
    // stalled body as a 500), before its session is looked at: what is
    // refused keeps no session alive.
    let (body, posted) = if parts.method == Method::POST {
        match crate::request::read_body(body, state.cfg.body_limit).await {
            Ok(bytes) => {
                if let Some(refusal) = not_one_jsonrpc_message(&bytes) {
                    return refusal;
                }
                // A tool call's repeated argument key, marked for the tool
                // service to refuse (rmcp's parser keeps the last value).
                let bytes = match zm_mcp::mark_repeated_argument_key_within(
                    &bytes,
                    transport_body_limit(&state),
                ) {
                    Some(marked) => {
                        // The body the transport reads is not the one sent.
                        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
                        axum::body::Bytes::from(marked)
                    }
                    None => bytes,
                };
                (Body::empty(), Some(bytes))
            }
            Err(e) => return body_refused(e),
        }
    } else {
        (body, None)
    };
    let session = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let shared = match session.as_deref() {
        Some(sid) => match state
            .store
            .mcp_session_touch(sid, &auth.user_id, mcp.caps.idle_ms)
            .await
        {
            Ok(s) => s,
            Err(e) => return bookkeeping_failed(&e),
        },
        None => None,
    };
    if session.is_some() && shared.is_none() {
        // Another user's session, or one that ended, expired or was
        // refused, answers exactly like an unknown one: 404 (MCP
        // 2025-11-25, Transports §Session Management), whatever the
        // method, before the transport sees it.
        return session_not_found();
    }
    if let Some(s) = shared {
        parts.extensions.insert(s);
    }
    let delete = parts.method == Method::DELETE;
    // A session this instance holds no worker for is rebuilt from its
    // `initialize`, read here (see `DbSessions::restoring`).
    if let Some(sid) = session.as_deref()
        && !delete
        && !mcp.has_worker(sid).await
    {
        match state
            .store
            .mcp_session_init_params(sid, mcp.caps.idle_ms)
            .await
        {
            Ok(Some(params)) => mcp.sessions.restoring.keep(sid, params),
            Ok(None) => return session_not_found(),
            Err(e) => return bookkeeping_failed(&e),
        }
    }
    // Only an `initialize` opens a session (whatever version it names);
    // any other request without a session (a 2026-07-28 request is
    // stateless) runs inline, so a client that hangs up cancels it as the
    // transport promises (a read stops; a write runs to its end on a task
    // of its own).
    let opens = session.is_none() && posted.as_deref().is_some_and(is_initialize);
    let body = posted.map_or(body, Body::from);
    parts.extensions.insert(auth.clone());
    let request = Request::from_parts(parts, body);
    let work = forward(state, mcp, auth, session, delete, request);
    if opens {
        // A new session: the transport starts its worker before the answer
        // exists, and only admission counts it. Run both to the end even if
        // the client hangs up meanwhile (dropping the handler would cancel
        // admission and leave a worker no cap counts).
        return tokio::spawn(work)
            .await
            .unwrap_or_else(|_| internal_error());
    }
    work.await
}

/// Is this body a JSON-RPC `initialize` request (the one message that
/// opens a session)? A body that is not one, or not JSON at all, is left
/// to the transport to answer.
fn is_initialize(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Method<'_>>(body)
        .ok()
        .and_then(|m| m.method)
        .is_some_and(|m| m == "initialize")
}

/// The refusal of a POST body that is not one JSON-RPC 2.0 message: not
/// JSON (-32700, Parse error), or not a request, notification or
/// response as the transport reads them (-32600, Invalid Request: no
/// `"jsonrpc": "2.0"`, a batch, which is no longer part of MCP, an `id`
/// that is an object, a `method` that is a number, no `method` and no
/// `result`). Both are 400; the transport would answer a plain-text 415.
fn not_one_jsonrpc_message(body: &[u8]) -> Option<Response> {
    if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
        return Some(jsonrpc_error(
            StatusCode::BAD_REQUEST,
            -32700,
            "Parse error: the body is not JSON.",
        ));
    }
    if serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(body).is_err() {
        return Some(jsonrpc_error(
            StatusCode::BAD_REQUEST,
            -32600,
            "Invalid Request: the body must be one JSON-RPC 2.0 message: an object with \"jsonrpc\": \"2.0\", a request (a string \"method\", an \"id\" that is a string or a number, \"params\", when present, an object), a notification or a response.",
        ));
    }
    None
}

/// 404: the request names a session this user does not hold (MCP
/// 2025-11-25, Transports §Session Management).
fn session_not_found() -> Response {
    jsonrpc_error(StatusCode::NOT_FOUND, -32001, "Session not found.")
}

/// 413 (over the body limit) or 400 (cut off, or stalled): nothing was
/// handled.
fn body_refused(e: crate::request::BodyError) -> Response {
    let status = match e {
        crate::request::BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
        crate::request::BodyError::Unreadable => StatusCode::BAD_REQUEST,
    };
    jsonrpc_error(
        status,
        -32600,
        &format!("The request was refused: {}.", e.describe()),
    )
}

/// A refusal of the HTTP layer as a JSON-RPC error: the request's id is
/// not read, so it is `null`.
fn jsonrpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    (
        status,
        axum::Json(serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": code, "message": message},
        })),
    )
        .into_response()
}

/// Hand the request to the transport, then settle the session: close a
/// deleted one, admit (or refuse) a new one.
async fn forward(
    state: AppState,
    mcp: McpEndpoint,
    auth: zm_store::Authenticated,
    session: Option<String>,
    delete: bool,
    request: Request,
) -> Response {
    let mut response = match mcp.service.clone().oneshot(request).await {
        Ok(r) => as_jsonrpc(r.map(Body::new)).await,
        Err(never) => match never {},
    };
    // What `handle` read for a restore the transport did not make (it
    // refused the request first, or another request's restore served it)
    // is not kept.
    if let Some(sid) = session.as_deref() {
        mcp.sessions.restoring.take(sid);
    }
    if delete && response.status().is_success() {
        if let Some(sid) = session.as_deref() {
            // rmcp removed it too; this instance may not have had a worker.
            let _ = state.store.mcp_session_close(sid).await;
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
    {
        match mcp.admit(&sid, &auth.user_id).await {
            Ok(true) => {}
            Ok(false) => {
                state
                    .metrics
                    .mcp_sessions_refused
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return server_full();
            }
            Err(e) => return bookkeeping_failed(&e),
        }
    }
    response
}

/// The transport's own refusals (a 406 for an `Accept` without both
/// types, a 415 for another `Content-Type`, a 400 for a protocol version
/// it does not serve or a request without its session, a 404 for a
/// session it cannot rebuild) are plain text: answered instead as a
/// JSON-RPC error with the same status, headers and words, as every other
/// refusal of `/mcp` is. Any other answer passes unchanged.
async fn as_jsonrpc(response: Response) -> Response {
    /// The most of a refusal's words read (rmcp's are a line).
    const WORDS_MAX: usize = 4096;
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|t| t.starts_with("text/plain"));
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || !plain {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let words = axum::body::to_bytes(body, WORDS_MAX)
        .await
        .ok()
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .filter(|w| !w.is_empty())
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("Refused").to_string());
    let code = match status {
        StatusCode::NOT_FOUND => -32001,
        s if s.is_server_error() => -32603,
        _ => -32600,
    };
    let message = if status.is_server_error() {
        // Nothing of a failure's cause reaches the client.
        "Internal error.".to_string()
    } else {
        words
    };
    let answer = jsonrpc_error(status, code, &message);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let (_, body) = answer.into_parts();
    Response::from_parts(parts, body)
}

/// 500: the session bookkeeping failed (the cause is in the log). A
/// JSON-RPC error without any detail.
fn internal_error() -> Response {
    jsonrpc_error(StatusCode::INTERNAL_SERVER_ERROR, -32603, "Internal error.")
}

/// The session bookkeeping (resuming or admitting a session) failed: a
/// busy database is the caller's to retry (429 `rate_limited` with
/// `Retry-After`, as REST answers it), anything else is ours (500).
fn bookkeeping_failed(e: &ToolError) -> Response {
    if e.code != zm_contracts::ErrorCode::RateLimited {
        return internal_error();
    }
    let mut resp = jsonrpc_error(StatusCode::TOO_MANY_REQUESTS, -32000, &e.message);
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(crate::error::RETRY_AFTER_DEFAULT_SECS),
    );
    resp
}

/// 403: a browser page of another site (its `Origin` is neither ours nor
/// listed in `allowed_origins`). Refused before the token is looked at.
fn foreign_origin() -> Response {
    let mut resp = jsonrpc_error(
        StatusCode::FORBIDDEN,
        -32000,
        "Requests from this Origin are not accepted; the server's operator can list it in ZM_ALLOWED_ORIGINS.",
    );
    resp.headers_mut()
        .insert(header::VARY, HeaderValue::from_static("origin"));
    resp
}

/// 503: the server holds as many sessions as it allows, with
/// `Retry-After`.
fn server_full() -> Response {
    let mut resp = jsonrpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        -32000,
        "This server has as many MCP sessions open as it allows; retry later.",
    );
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(FULL_RETRY_AFTER_SECS),
    );
    resp
}

/// A request refused before it reached MCP: a 401 or a 429 in OAuth's
/// shape (what clients read next to `WWW-Authenticate`); a failure of
/// ours is the JSON-RPC internal error, never a verdict on the token.
fn mcp_unauthorized(e: crate::error::ApiError) -> Response {
    let status = axum::http::StatusCode::from_u16(e.error.code.http_status())
        .unwrap_or(axum::http::StatusCode::UNAUTHORIZED);
    if status.is_server_error() {
        return internal_error();
    }
    // RFC 6750 §3.1: a request without a token gets no error code (the
    // challenge carries none either); a token that did not verify does.
    let presented = e
        .challenge
        .as_deref()
        .is_some_and(|c| c.contains("invalid_token"));
    let mut body = serde_json::json!({"error_description": e.error.message});
    if status == axum::http::StatusCode::TOO_MANY_REQUESTS {
        body["error"] = zm_contracts::ErrorCode::RateLimited.as_str().into();
    } else if presented {
        body["error"] = "invalid_token".into();
    }
    let mut resp = (status, axum::Json(body)).into_response();
    // Every 429 says when to come back, as the API's do.
    let retry_after = e.retry_after_secs();
    if let Some(c) = e.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        resp.headers_mut()
            .insert(axum::http::header::WWW_AUTHENTICATE, c);
    }
    if let Some(s) = retry_after {
        resp.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A preflight names each `Mcp-Param-*` header it is asked for once,
    /// lower-cased, and at most [`PARAM_HEADERS_ALLOWED`] of them however
    /// many it is asked for (it is answered before any token is checked).
    #[test]
    fn a_preflight_allows_a_bounded_set_of_param_headers() {
        let mut asked: Vec<String> = (0..5_000).map(|i| format!("Mcp-Param-X{i}")).collect();
        asked.insert(
            0,
            "mcp-param-query, MCP-PARAM-QUERY, mcp-param-, x-other".into(),
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            HeaderValue::from_str(&asked.join(",")).unwrap(),
        );
        let allowed = allowed_request_headers(&headers);
        let names: Vec<&str> = allowed.to_str().unwrap().split(", ").collect();
        let params: Vec<&&str> = names
            .iter()
            .filter(|n| n.starts_with(PARAM_PREFIX))
            .collect();
        assert_eq!(params.len(), PARAM_HEADERS_ALLOWED, "{names:?}");
        assert_eq!(
            names.iter().filter(|n| **n == "mcp-param-query").count(),
            1,
            "{names:?}"
        );
        assert!(!names.contains(&"mcp-param-"), "{names:?}");
        assert!(!names.contains(&"x-other"), "{names:?}");
        assert!(names.contains(&"mcp-name"), "{names:?}");
    }

    /// A 429 on `/mcp` before the session (the database too busy to
    /// authenticate) says when to come back, as the API's 429s do.
    #[test]
    fn an_unauthorized_429_carries_retry_after() {
        let busy = crate::error::ApiError::new(zm_contracts::ToolError::rate_limited(
            "The database is busy.",
        ));
        let resp = mcp_unauthorized(busy);
        assert_eq!(resp.status().as_u16(), 429);
        assert_eq!(resp.headers()[axum::http::header::RETRY_AFTER], "1");
        let mut waits = crate::error::ApiError::new(zm_contracts::ToolError::rate_limited("Wait."));
        waits.retry_after = Some(30);
        assert_eq!(
            mcp_unauthorized(waits).headers()[axum::http::header::RETRY_AFTER],
            "30"
        );
    }
}
