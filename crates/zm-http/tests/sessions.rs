//! MCP-over-HTTP sessions: capped per user and overall without one user
//! ending another's, ended by `DELETE` with 204, and no bookkeeping left
//! behind by sessions that are gone.

mod common;

use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use zm_http::HttpConfig;
use zm_http::mcp::McpEndpoint;

/// How long to wait for a condition before failing (never for speed).
const PATIENCE: Duration = Duration::from_secs(60);

struct Server {
    base: String,
    endpoint: McpEndpoint,
    store: zm_store::Store,
    tokens: Vec<String>,
    running: common::Running,
    _dir: tempfile::TempDir,
    http: reqwest::Client,
}

/// A server with three users (a token each) and `edit`ed settings.
async fn start(edit: impl FnOnce(&mut HttpConfig)) -> Server {
    let (dir, store) = common::store().await;
    let mut tokens = Vec::new();
    for who in ["a", "b", "c"] {
        let u = common::user(&store, who).await;
        tokens.push(common::token(&store, &u, None, &["mcp:read", "mcp:write"]).await);
    }
    let (listener, _, base) = common::listen().await;
    let mut cfg = HttpConfig::local(&base);
    edit(&mut cfg);
    let limits = cfg.conn_limits();
    let cancel = CancellationToken::new();
    let state = zm_http::state(store.clone(), cfg);
    let endpoint = McpEndpoint::new(&state, cancel.clone());
    let app = zm_http::router_with_mcp(state, endpoint.clone());
    Server {
        base,
        endpoint,
        store,
        tokens,
        running: common::serve(listener, app, limits, cancel),
        _dir: dir,
        http: reqwest::Client::new(),
    }
}

impl Server {
    fn request(
        &self,
        method: reqwest::Method,
        token: &str,
        session: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .request(method, format!("{}/mcp", self.base))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json");
        if let Some(s) = session {
            rb = rb
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", "2025-11-25");
        }
        rb
    }

    /// `initialize`: the raw response.
    async fn initialize(&self, token: &str) -> reqwest::Response {
        self.request(reqwest::Method::POST, token, None)
            .body(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "sessions-test", "version": "0"}}}).to_string())
            .send()
            .await
            .unwrap()
    }

    /// A ready session (initialize + initialized).
    async fn open(&self, token: &str) -> String {
        let r = self.initialize(token).await;
        assert_eq!(r.status().as_u16(), 200);
        let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let _ = r.text().await;
        let r = self
            .request(reqwest::Method::POST, token, Some(&sid))
            .body(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 202);
        sid
    }

    /// Does `tools/list` on this session answer 200 for `token`?
    async fn works(&self, token: &str, sid: &str) -> bool {
        let r = self
            .request(reqwest::Method::POST, token, Some(sid))
            .body(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string())
            .send()
            .await
            .unwrap();
        let ok = r.status().as_u16() == 200;
        let _ = r.text().await;
        ok
    }

    async fn delete(&self, token: &str, sid: &str) -> u16 {
        self.request(reqwest::Method::DELETE, token, Some(sid))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }

    async fn stop(self) {
        self.running.stop().await;
    }
}

/// A session ended where its worker does not hear of it (on the
/// dashboard, by another instance) has its worker ended by the looks that
/// follow, not left running until it idles out: the caps count rows, so
/// ending sessions that way could pile up workers without bound. A
/// recorded session's worker is left alone.
#[tokio::test]
async fn a_worker_whose_session_ended_elsewhere_is_ended() {
    let s = start(|_| {}).await;
    let (a, b) = (s.tokens[0].clone(), s.tokens[1].clone());
    let gone = s.open(&a).await;
    let kept = s.open(&b).await;
    s.store.mcp_session_close(&gone).await.unwrap();
    assert_eq!(
        s.endpoint.session_count().await,
        2,
        "the row's removal alone ends no worker"
    );
    // Two looks in a row miss it, with no grace between them (the
    // endpoint's own looks, with theirs, may have taken the first).
    for _ in 0..2 {
        s.endpoint.end_workers_unrecorded_for(Duration::ZERO).await;
    }
    assert_eq!(
        s.endpoint.session_count().await,
        1,
        "the orphan's worker is ended"
    );
    assert!(
        s.works(&b, &kept).await,
        "the recorded session still answers"
    );
    assert!(!s.works(&a, &gone).await, "the ended session stays ended");
    s.stop().await;
}

/// One token opening ten times its cap ends only its own oldest sessions:
/// the other users' sessions all survive.
#[tokio::test]
async fn one_user_cannot_evict_another_users_sessions() {
    let s = start(|c| {
        c.max_sessions = 20;
        c.max_sessions_per_user = 5;
    })
    .await;
    let (a, b) = (s.tokens[0].clone(), s.tokens[1].clone());
    let mut b_sessions = Vec::new();
    for _ in 0..3 {
        b_sessions.push(s.open(&b).await);
    }
    let mut a_sessions = Vec::new();
    for _ in 0..50 {
        a_sessions.push(s.open(&a).await);
    }
    for sid in &b_sessions {
        assert!(s.works(&b, sid).await, "B's session {sid} was ended");
    }
    for sid in &a_sessions[45..] {
        assert!(s.works(&a, sid).await, "A's newest sessions are kept");
    }
    for sid in &a_sessions[..45] {
        assert!(!s.works(&a, sid).await, "A's oldest sessions are ended");
    }
    assert_eq!(s.endpoint.owner_count().await, 8);
    assert_eq!(s.endpoint.session_count().await, 8);
    // Using a session makes it recent: it outlives newer, idle ones.
    assert!(s.works(&a, &a_sessions[45]).await);
    let newest = s.open(&a).await;
    assert!(s.works(&a, &a_sessions[45]).await, "recently used, kept");
    assert!(
        !s.works(&a, &a_sessions[46]).await,
        "least recently used, ended"
    );
    assert!(s.works(&a, &newest).await);
    s.stop().await;
}

/// A full server refuses a new session (503, `Retry-After`, a JSON-RPC
/// error) rather than end anyone's; a user at its own cap still rotates its
/// own sessions.
#[tokio::test]
async fn a_full_server_refuses_new_sessions() {
    let s = start(|c| {
        c.max_sessions = 4;
        c.max_sessions_per_user = 3;
    })
    .await;
    let (a, b, c) = (
        s.tokens[0].clone(),
        s.tokens[1].clone(),
        s.tokens[2].clone(),
    );
    let mut a_sessions = Vec::new();
    for _ in 0..3 {
        a_sessions.push(s.open(&a).await);
    }
    let b1 = s.open(&b).await;
    for token in [&b, &c] {
        let r = s.initialize(token).await;
        assert_eq!(r.status().as_u16(), 503);
        assert_eq!(r.headers()["retry-after"], "60");
        assert!(r.headers().get("mcp-session-id").is_none());
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["jsonrpc"], "2.0");
        assert_eq!(v["error"]["code"], -32000);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("MCP sessions"),
            "{v}"
        );
    }
    for sid in &a_sessions {
        assert!(s.works(&a, sid).await);
    }
    assert!(s.works(&b, &b1).await);
    assert_eq!(s.endpoint.owner_count().await, 4);
    assert_eq!(
        s.endpoint.session_count().await,
        4,
        "refused sessions are closed"
    );
    let metrics = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("zm_overload_refused_total{what=\"mcp_sessions\"} 2\n"),
        "both refusals counted: {metrics}"
    );
    // A, at its cap, replaces its own least recently used session.
    let a4 = s.open(&a).await;
    assert!(!s.works(&a, &a_sessions[0]).await);
    assert!(s.works(&a, &a4).await);
    assert!(s.works(&b, &b1).await);
    // Room made by ending a session is room for anyone.
    assert_eq!(s.delete(&b, &b1).await, 204);
    let c1 = s.open(&c).await;
    assert!(s.works(&c, &c1).await);
    assert_eq!(s.endpoint.session_count().await, 4);
    s.stop().await;
}

/// `DELETE` answers 204 and ends the session; another user's `DELETE`
/// answers 404 like one for an unknown id and ends nothing; a `DELETE` of
/// a session already ended is 404 too (MCP 2025-11-25: a terminated
/// session's id answers 404); and a loop of initialize + `DELETE` leaves
/// no session and no owner behind.
#[tokio::test]
async fn delete_answers_204_and_leaves_nothing_behind() {
    let s = start(|_| {}).await;
    let (a, b) = (s.tokens[0].clone(), s.tokens[1].clone());
    let (owners, sessions) = (
        s.endpoint.owner_count().await,
        s.endpoint.session_count().await,
    );
    let sid = s.open(&a).await;
    assert_eq!(s.delete(&b, &sid).await, 404, "like an unknown id");
    assert_eq!(s.delete(&b, "never-existed-session").await, 404);
    assert!(
        s.works(&a, &sid).await,
        "another user's DELETE ends nothing"
    );
    assert_eq!(s.delete(&a, &sid).await, 204);
    assert!(!s.works(&a, &sid).await, "ended");
    assert_eq!(s.delete(&a, &sid).await, 404, "ended already");
    // Any request naming it: 404 with a JSON-RPC error, for its owner
    // and for anyone else alike.
    for token in [&a, &b] {
        let r = s
            .request(reqwest::Method::POST, token, Some(&sid))
            .body(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 404);
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], -32001, "{v}");
    }
    for _ in 0..200 {
        let sid = s.open(&a).await;
        assert_eq!(s.delete(&a, &sid).await, 204);
    }
    assert_eq!(s.endpoint.owner_count().await, owners);
    assert_eq!(s.endpoint.session_count().await, sessions);
    s.stop().await;
}

/// Sessions that end by idling out lose their owner entry too, the next
/// time a session is opened. (Only `initialize` is sent: nothing here
/// needs a session to outlive the short idle time.)
#[tokio::test]
async fn idle_sessions_lose_their_owner() {
    // Long enough that the first session outlives the second's opening on
    // a loaded machine (then the second prunes no owner), short enough to
    // wait for.
    let s = start(|c| c.session_idle = Duration::from_secs(4)).await;
    let a = s.tokens[0].clone();
    for _ in 0..2 {
        assert_eq!(s.initialize(&a).await.status().as_u16(), 200);
    }
    assert_eq!(s.endpoint.owner_count().await, 2);
    let expired = tokio::time::timeout(PATIENCE, async {
        while s.endpoint.session_count().await > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(expired.is_ok(), "rmcp never ended the idle sessions");
    assert_eq!(s.endpoint.owner_count().await, 2, "not pruned yet");
    assert_eq!(s.initialize(&a).await.status().as_u16(), 200);
    assert_eq!(
        s.endpoint.owner_count().await,
        1,
        "only the new session's owner"
    );
    s.stop().await;
}

/// A second instance of `s` on the same database: its address, its
/// endpoint and its server (stop it before `s`).
async fn beside(s: &Server) -> (String, McpEndpoint, common::Running) {
    let (listener, _, base) = common::listen().await;
    let cfg = HttpConfig::local(&base);
    let limits = cfg.conn_limits();
    let cancel = CancellationToken::new();
    let state = zm_http::state(s.store.clone(), cfg);
    let endpoint = McpEndpoint::new(&state, cancel.clone());
    let app = zm_http::router_with_mcp(state, endpoint.clone());
    (base, endpoint, common::serve(listener, app, limits, cancel))
}

/// Another instance rebuilds a session it holds no worker for from the
/// `initialize` in the database, and a read of it that fails is answered
/// in JSON-RPC's terms, without the database's words (rmcp's restore
/// answered a plain-text 500 holding them).
#[tokio::test]
async fn another_instance_resumes_a_session_and_a_failed_restore_is_json_rpc() {
    let s = start(|_| {}).await;
    let a = s.tokens[0].clone();
    let (base, other, running) = beside(&s).await;
    let sid = s.open(&a).await;
    // `tools/list` on the other instance, in session `sid`.
    let call = |sid: &str, id: u64| {
        s.http
            .post(format!("{base}/mcp"))
            .bearer_auth(&a)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", sid)
            .header("mcp-protocol-version", "2025-11-25")
            .body(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}).to_string())
    };
    let r = call(&sid, 2).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.text().await.unwrap().contains("remember"));
    assert_eq!(other.session_count().await, 1, "a worker rebuilt here");
    // A session the other instance has not rebuilt, whose `initialize`
    // cannot be read.
    let sid2 = s.open(&a).await;
    let url = zm_store::sqlite_url(&s._dir.path().join("t.db"));
    let mut raw = <sqlx::AnyConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    sqlx::query("ALTER TABLE mcp_sessions RENAME COLUMN init_params TO init_params_away")
        .execute(&mut raw)
        .await
        .unwrap();
    let r = call(&sid2, 3).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 500);
    let body = r.text().await.unwrap();
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    assert_eq!(v["error"]["code"], -32603, "{v}");
    assert!(!body.contains("init_params"), "{body}");
    sqlx::query("ALTER TABLE mcp_sessions RENAME COLUMN init_params_away TO init_params")
        .execute(&mut raw)
        .await
        .unwrap();
    assert_eq!(other.session_count().await, 1, "no worker for the second");
    running.stop().await;
    s.stop().await;
}
