//! # zm-http — the HTTP surface
//!
//! The axum router: the REST mirror of every tool (`POST /api/tools/{name}`),
//! `GET /api/memories/{id}`, `/api/rules`, `/api/contract`,
//! `/api/openapi.json`, health, readiness and metrics, RFC 9728 metadata,
//! MCP over Streamable HTTP at `/mcp` behind bearer tokens, and the OAuth
//! 2.1 authorization server for MCP clients (`/oauth/*`, RFC 8414 metadata).
//!
//! Architecture invariant: no SQL here, and every error body is a
//! `ToolError` with its code's status — except on the OAuth endpoints, which
//! answer RFC 6749 bodies (`{error, error_description}`) or HTML pages.

pub mod auth;
pub mod dashboard;
pub mod error;
pub mod mcp;
pub mod oauth;
pub mod openapi;
pub mod request;
pub mod routes;
pub mod server;
pub mod state;
pub mod teams;
#[cfg(test)]
mod testing;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{any, get, post};
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use zm_contracts::IdKind;
use zm_store::Store;

pub use server::{ConnLimits, serve};
pub use state::{AppState, Clock, HttpConfig, Metrics, RateLimiter};

/// Build the whole router. `cancel` ends MCP sessions at shutdown.
pub fn router(store: Store, cfg: HttpConfig, cancel: CancellationToken) -> Router {
    router_with_state(state(store, cfg), cancel)
}

/// Build the whole router over a state made by [`state`] (tests keep a
/// handle on it, e.g. on the rate limiter's clock).
pub fn router_with_state(state: AppState, cancel: CancellationToken) -> Router {
    let endpoint = mcp::McpEndpoint::new(&state, cancel);
    router_with_mcp(state, endpoint)
}

/// Build the whole router over a state and an MCP endpoint made from it
/// (tests keep a handle on the endpoint, e.g. to count its sessions).
pub fn router_with_mcp(state: AppState, endpoint: mcp::McpEndpoint) -> Router {
    let api = Router::new()
        .route("/api/tools/{name}", post(routes::call_tool))
        .route("/api/memories/{id}", get(routes::get_memory))
        .route("/api/rules", get(routes::get_rules))
        .merge(teams::routes())
        .route("/api/contract", get(routes::get_contract))
        .route("/api/openapi.json", get(routes::openapi))
        .route("/healthz", get(routes::healthz))
        .route("/readyz", get(routes::readyz))
        .route("/metrics", get(routes::metrics))
        .route(
            "/.well-known/oauth-protected-resource",
            get(routes::protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(routes::protected_resource),
        )
        .method_not_allowed_fallback(routes::fallback)
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            run_writes_to_the_end,
        ))
        .layer(axum::middleware::map_response(no_store))
        .with_state(state.clone());
    let mcp = Router::new()
        .route("/mcp", any(mcp::handle))
        .with_state((state.clone(), endpoint));
    let oauth = oauth::routes(state.clone());
    let dashboard = dashboard::routes(state.clone());
    with_layers(api.merge(mcp).merge(oauth).merge(dashboard), state)
}

/// A write over REST (a write tool, a team change) runs to its end on a
/// task of its own, as MCP's do: a client that hangs up mid-call no longer
/// drops it between its transaction and what follows it (the index's
/// placement, the metrics, a refusal's audit row). Its answer goes unread.
/// Reads stay on the request and end with it. The store's close waits for
/// such writes.
async fn run_writes_to_the_end(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    if reads_only(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    // The token is looked up here, on the connection's task, before the
    // write takes one of the places kept for writes running to their end:
    // a request without a token, or with one that names nobody, is
    // answered 401 and takes none, so anonymous requests cannot use them
    // up and refuse the users' writes. The handler's `Auth` takes who was
    // found, and lets them in on the write's task.
    let (mut parts, body) = req.into_parts();
    match auth::holder(&state, &parts).await {
        Ok(found) => auth::carry(&mut parts, found),
        Err(refused) => return axum::response::IntoResponse::into_response(refused),
    }
    let req = Request::from_parts(parts, body);
    run_to_the_end(&state.store, req, next)
        .await
        .unwrap_or_else(|| {
            // A 429: `ApiError` says `Retry-After: 1`.
            axum::response::IntoResponse::into_response(error::ApiError::new(
                zm_contracts::ToolError::rate_limited(
                    "Too many writes are still running on this server; retry shortly.",
                ),
            ))
        })
}

/// Does a request only read (answered on the connection's own task)? A
/// tool call is a read only when its name, decoded as the router decodes
/// it, is a read tool's: anything else (`rememb%65r` is `remember`) runs
/// to the end like a write. Elsewhere, GET, HEAD and OPTIONS read.
fn reads_only(method: &axum::http::Method, path: &str) -> bool {
    match path.strip_prefix("/api/tools/") {
        Some(name) => percent_encoding::percent_decode_str(name)
            .decode_utf8()
            .ok()
            .and_then(|name| zm_contracts::ToolName::parse(&name))
            .is_some_and(|t| t.access() == zm_contracts::Access::Read),
        None => matches!(
            *method,
            axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
        ),
    }
}

/// `req` answered on a task of its own, which the store's close waits for
/// and a client's hang-up does not end; `None` (nothing started) while
/// too many such writes are still running.
pub(crate) async fn run_to_the_end(store: &Store, req: Request, next: Next) -> Option<Response> {
    // The task logs under the request's span (`spawn_write` keeps it).
    let write = store.spawn_write(next.run(req))?;
    Some(match write.await {
        Ok(resp) => resp,
        Err(e) if e.is_panic() => error::panic_response(e.into_panic()),
        Err(_) => axum::response::IntoResponse::into_response(error::ApiError::new(
            zm_contracts::ToolError::internal(),
        )),
    })
}

/// The API's answers hold a user's data: no cache keeps them (a proxy set
/// to cache everything included), unless a route says otherwise.
async fn no_store(mut resp: Response) -> Response {
    resp.headers_mut()
        .entry(axum::http::header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    resp
}

/// The layers every route gets: the fallback (JSON; a 404 page to a
/// browser outside the API), panic capture (500
/// `internal`, cause only in the log), request ids and metrics.
pub fn with_layers(routes: Router, state: AppState) -> Router {
    let pages = state.clone();
    let cfg = Arc::clone(&state.cfg);
    routes
        .fallback(move |req: axum::extract::Request| dashboard::fallback(pages.clone(), req))
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(axum::middleware::from_fn_with_state(state, request_id))
        .layer(axum::middleware::map_response_with_state(
            cfg,
            state::strict_transport,
        ))
}

/// Build the shared state (exposed for tests that add their own routes).
pub fn state(store: Store, cfg: HttpConfig) -> AppState {
    let limiter = Arc::new(RateLimiter::for_store(&store));
    let clock = limiter.clock().clone();
    let login_backoff = Arc::new(if limiter.is_shared() {
        oauth::limit::LoginBackoff::shared(store.clone(), clock)
    } else {
        oauth::limit::LoginBackoff::new(clock)
    });
    AppState {
        tools: zm_store::ToolService::new(store.clone()),
        limiter,
        login_backoff,
        store,
        cfg: Arc::new(cfg),
        metrics: Arc::new(Metrics::default()),
        openapi: Arc::default(),
    }
}

/// Adopt a well-formed `X-Request-Id` (a `req_…` id) or mint one, hand it
/// to every layer as a [`zm_store::RequestId`] extension (REST handlers,
/// OAuth audit rows and zm-mcp, which finds it in the `http::request::Parts`
/// rmcp hands it), echo it, count the response and log one line per request.
async fn request_id(
    axum::extract::State(state): axum::extract::State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| zm_contracts::ids::parse_id(IdKind::Request, v).ok())
        .unwrap_or_else(|| IdKind::Request.generate());
    let value = HeaderValue::from_str(&id).expect("ids are ascii");
    req.extensions_mut().insert(zm_store::RequestId(id.clone()));
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    // Everything logged while answering (a database failure's cause, a
    // refusal) carries the id a client reports.
    let span = tracing::info_span!("request", request_id = %id);
    let mut resp = tracing::Instrument::instrument(next.run(req), span).await;
    resp.headers_mut().insert("x-request-id", value);
    let status = resp.status().as_u16();
    state.metrics.request(status).await;
    tracing::info!(target: "zm_http", request_id = %id, %method, %path, status, duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX), "request");
    resp
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    /// A tool call reads only when its decoded name is a read tool's: an
    /// escaped write tool's name, or an unknown one, runs to the end.
    #[test]
    fn only_read_tools_and_safe_methods_read() {
        for (method, path, reads) in [
            (Method::POST, "/api/tools/recall", true),
            (Method::POST, "/api/tools/rec%61ll", true),
            (Method::POST, "/api/tools/remember", false),
            (Method::POST, "/api/tools/rememb%65r", false),
            (Method::POST, "/api/tools/no_such_tool", false),
            (Method::POST, "/api/tools/%FF", false),
            (Method::GET, "/api/memories/mem_1", true),
            (Method::DELETE, "/api/teams/a", false),
        ] {
            assert_eq!(super::reads_only(&method, path), reads, "{method} {path}");
        }
    }
}
