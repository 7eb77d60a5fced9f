//! The start-up every zm-http loopback test shares: a store on a fresh
//! SQLite file, users with tokens, a listener on a free loopback port, and
//! `zm_http::serve` running until the test stops it.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use zm_http::ConnLimits;
use zm_store::{Store, User};

/// How long a stopping server may take before the test fails (never a
/// speed assertion: a generous bound).
const STOP_PATIENCE: Duration = Duration::from_secs(60);

/// A store on a fresh SQLite file; keep the directory as long as the store.
pub(crate) async fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&zm_store::sqlite_url(&dir.path().join("t.db")))
        .await
        .unwrap();
    (dir, store)
}

/// The user `<who>@example.com` (password `password-<who>-123`).
pub(crate) async fn user(store: &Store, who: &str) -> User {
    store
        .create_user(
            &format!("{who}@example.com"),
            &format!("password-{who}-123"),
        )
        .await
        .unwrap()
}

/// A personal access token of `user` with `scopes`.
pub(crate) async fn token(
    store: &Store,
    user: &User,
    name: Option<&str>,
    scopes: &[&str],
) -> String {
    store.create_token(&user.id, name, scopes).await.unwrap().1
}

/// A listener on a free loopback port, and its base URL.
pub(crate) async fn listen() -> (TcpListener, SocketAddr, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr, format!("http://{addr}"))
}

/// `zm_http::serve` running in a task.
pub(crate) struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Serve `app` on `listener` until [`Running::stop`].
pub(crate) fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnLimits,
    cancel: CancellationToken,
) -> Running {
    serve_counting(listener, app, limits, Default::default(), cancel)
}

/// [`serve`], counting refused connections in `refused` (the app's
/// `Metrics::connections_refused`, for `/metrics`).
pub(crate) fn serve_counting(
    listener: TcpListener,
    app: axum::Router,
    limits: ConnLimits,
    refused: std::sync::Arc<std::sync::atomic::AtomicU64>,
    cancel: CancellationToken,
) -> Running {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(zm_http::serve(
        listener,
        app,
        limits,
        refused,
        cancel,
        async move {
            let _ = rx.await;
        },
    ));
    Running {
        stop: Some(tx),
        task,
    }
}

impl Running {
    /// Shut down gracefully; the server must stop without an error.
    pub(crate) async fn stop(mut self) {
        self.signal();
        self.stopped().await;
    }

    /// Send the shutdown signal (the server stops taking connections and
    /// finishes the requests in flight).
    pub(crate) fn signal(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Has the server finished?
    pub(crate) fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Wait for the server to finish; it must end without an error.
    pub(crate) async fn stopped(self) {
        tokio::time::timeout(STOP_PATIENCE, self.task)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
    }
}

/// One MCP POST: status, session id, the JSON-RPC messages.
pub(crate) async fn mcp_post(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    session: Option<&str>,
    body: serde_json::Value,
) -> (u16, Option<String>, Vec<serde_json::Value>) {
    mcp_post_text(http, base, token, session, body.to_string()).await
}

/// [`mcp_post`] of a body as written (JSON a `Value` cannot hold: a key
/// twice in one object).
pub(crate) async fn mcp_post_text(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    session: Option<&str>,
    body: String,
) -> (u16, Option<String>, Vec<serde_json::Value>) {
    let mut rb = http
        .post(format!("{base}/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body);
    if let Some(s) = session {
        rb = rb
            .header("mcp-session-id", s)
            .header("mcp-protocol-version", "2025-11-25");
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let sid = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let text = r.text().await.unwrap();
    let msgs = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(&text).unwrap()]
    } else {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    (status, sid, msgs)
}

/// The account signing in as `email` joins team `slug` with `role` as a
/// member does: invited by `admin`, accepted by them (only the server's
/// owner adds an account directly).
pub(crate) async fn join_team(
    store: &Store,
    admin: &zm_store::Caller,
    slug: &str,
    email: &str,
    role: zm_contracts::TeamRole,
) {
    let invitation = zm_contracts::teams::InviteInput {
        email: email.to_string(),
        role,
        expires_in_days: None,
    };
    let invitation = store
        .invite_team_member(admin, slug, invitation)
        .await
        .expect("invite");
    let user = store
        .user_by_email(email)
        .await
        .expect("user lookup")
        .expect("the invitee has an account");
    store
        .accept_invitation(&zm_store::Caller::new(user.id), &invitation.id)
        .await
        .expect("accept");
}

/// SQLite's write lock on the test store in `dir` (`t.db`, as [`store`]
/// makes it), held by a raw connection: writes wait on it until
/// [`release_write_lock`].
pub(crate) async fn hold_write_lock(dir: &std::path::Path) -> sqlx::AnyConnection {
    let url = zm_store::sqlite_url(&dir.join("t.db"));
    let mut lock = <sqlx::AnyConnection as sqlx::Connection>::connect(&url)
        .await
        .expect("a raw connection");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut lock)
        .await
        .expect("hold the write lock");
    lock
}

/// Let the writes waiting on [`hold_write_lock`] go, once the server has
/// had time to see an impatient client's connection close.
pub(crate) async fn release_write_lock(mut lock: sqlx::AnyConnection) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqlx::query("COMMIT")
        .execute(&mut lock)
        .await
        .expect("release the write lock");
}

/// A client that gives up on an answer after half a second (and follows
/// no redirect).
pub(crate) fn impatient_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
}

/// Wait, with a generous deadline (never a speed assertion), until `done`
/// says a write that outlived its client has landed.
pub(crate) async fn until_landed<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + STOP_PATIENCE;
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "{what} never landed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
