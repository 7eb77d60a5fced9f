//! The teams administration API over real HTTP on loopback: every route
//! of `ADMIN_ROUTES` answers with its declared status, refusals carry the
//! contract's codes, and a removal takes effect on the very next request
//! of an MCP session that is already open.

mod common;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use zm_http::HttpConfig;
use zm_store::{Caller, Store};

struct Server {
    base: String,
    store: Store,
    running: common::Running,
    _dir: tempfile::TempDir,
    http: reqwest::Client,
}

async fn start() -> Server {
    let (dir, store) = common::store().await;
    let (listener, _, base) = common::listen().await;
    let cfg = HttpConfig::local(&base);
    let cancel = CancellationToken::new();
    let limits = cfg.conn_limits();
    let app = zm_http::router(store.clone(), cfg, cancel.clone());
    Server {
        base,
        store,
        running: common::serve(listener, app, limits, cancel),
        _dir: dir,
        http: reqwest::Client::new(),
    }
}

impl Server {
    async fn send(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut rb = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn mcp_session(&self, token: &str) -> String {
        let (status, sid, msgs) = common::mcp_post(
            &self.http,
            &self.base,
            token,
            None,
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "teams-test", "version": "0"}}}),
        )
        .await;
        assert_eq!(status, 200, "{msgs:?}");
        let sid = sid.expect("a session id");
        let (s, _, _) = common::mcp_post(
            &self.http,
            &self.base,
            token,
            Some(&sid),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await;
        assert_eq!(s, 202);
        sid
    }

    /// A `tools/call` in an open session: the tool's structured result (or
    /// the error body) and whether it is an error.
    async fn mcp_call(&self, token: &str, sid: &str, tool: &str, args: Value) -> (Value, bool) {
        let (status, _, msgs) = common::mcp_post(
            &self.http,
            &self.base,
            token,
            Some(sid),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": args}}),
        )
        .await;
        assert_eq!(status, 200, "{msgs:?}");
        let result = &msgs.last().expect("a response")["result"];
        let is_error = result["isError"].as_bool().unwrap_or(false);
        if is_error {
            // A failure's first content block is the error body.
            let text = result["content"][0]["text"].as_str().unwrap_or("null");
            return (serde_json::from_str(text).unwrap_or(Value::Null), true);
        }
        (result["structuredContent"].clone(), false)
    }
}

/// An MCP app's OAuth access token of `user` (the sign-in done through the
/// store, as the consent page does it).
async fn oauth_token(store: &Store, user: &zm_store::User) -> String {
    use zm_store::oauth::{CodeExchange, NewCode};
    const REDIRECT: &str = "http://127.0.0.1:5000/cb";
    const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
    let client = store
        .register_oauth_client(Some("some app"), &[REDIRECT.to_string()], None, None)
        .await
        .unwrap()
        .id;
    let new = NewCode {
        client_id: &client,
        user_id: &user.id,
        credential: user.credential,
        redirect_uri: REDIRECT,
        code_challenge: CHALLENGE,
        resource: None,
        scope: "mcp:read mcp:write",
    };
    let code = store.issue_oauth_code(new, None).await.unwrap();
    let ex = CodeExchange {
        code: &code,
        client_id: &client,
        redirect_uri: REDIRECT,
        verifier_challenge: CHALLENGE,
    };
    store
        .exchange_oauth_code(ex, None, None)
        .await
        .unwrap()
        .access_token
}

#[tokio::test]
async fn teams_over_rest_and_a_removal_mid_session() {
    let s = start().await;
    let a = common::user(&s.store, "ta").await;
    let b = common::user(&s.store, "tb").await;
    let c = common::user(&s.store, "tc").await;
    let rw = ["mcp:read", "mcp:write"];
    let ta = common::token(&s.store, &a, None, &rw).await;
    let ta_ro = common::token(&s.store, &a, None, &["mcp:read"]).await;
    let tb = common::token(&s.store, &b, None, &rw).await;
    let tc = common::token(&s.store, &c, None, &rw).await;

    // An MCP app's OAuth token reads teams but changes none, whatever its
    // scope: its sign-in consented to memories, not to running teams.
    let app = oauth_token(&s.store, &a).await;
    let (st, body) = s
        .send("POST", "/api/teams", &app, Some(json!({"slug": "viaapp"})))
        .await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let (st, body) = s.send("GET", "/api/teams", &app, None).await;
    assert_eq!(st, 200, "{body}");

    // Create: 201; a read-only token, a bad slug and a taken slug are refused.
    let (st, body) = s
        .send(
            "POST",
            "/api/teams",
            &ta_ro,
            Some(json!({"slug": "platform"})),
        )
        .await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let (st, body) = s
        .send(
            "POST",
            "/api/teams",
            &ta,
            Some(json!({"slug": "Not A Slug"})),
        )
        .await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (400, Some("validation_failed")),
        "{body}"
    );
    assert_eq!(
        body["error"]["details"]["fields"][0]["path"], "slug",
        "{body}"
    );
    let (st, body) = s
        .send(
            "POST",
            "/api/teams",
            &ta,
            Some(json!({"slug": "platform", "name": "Platform"})),
        )
        .await;
    assert_eq!(st, 201, "{body}");
    assert_eq!(body["team"]["scope"], "team.platform");
    let (st, body) = s
        .send("POST", "/api/teams", &tb, Some(json!({"slug": "platform"})))
        .await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{body}"
    );

    // A non-member reads it as missing; an admin adds B; B reads it.
    let (st, body) = s.send("GET", "/api/teams/platform", &tb, None).await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let (st, body) = s
        .send(
            "POST",
            "/api/teams/platform/members",
            &ta,
            Some(json!({"email": "tb@example.com", "role": "writer"})),
        )
        .await;
    assert_eq!((st, body["role"].as_str()), (200, Some("writer")), "{body}");
    let (st, body) = s.send("GET", "/api/teams", &tb, None).await;
    assert_eq!(
        (st, body["teams"][0]["slug"].as_str()),
        (200, Some("platform")),
        "{body}"
    );
    let (st, body) = s
        .send(
            "POST",
            "/api/teams/platform/members",
            &tb,
            Some(json!({"email": "tc@example.com", "role": "reader"})),
        )
        .await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (403, Some("forbidden")),
        "a writer adds: {body}"
    );

    // Invitations: C accepts once.
    let (st, inv) = s
        .send(
            "POST",
            "/api/teams/platform/invitations",
            &ta,
            Some(json!({"email": "tc@example.com", "role": "reader"})),
        )
        .await;
    assert_eq!(st, 201, "{inv}");
    let id = inv["id"].as_str().unwrap().to_string();
    let (st, body) = s.send("GET", "/api/invitations", &tc, None).await;
    assert_eq!(
        (st, body["invitations"][0]["id"].as_str()),
        (200, Some(id.as_str())),
        "{body}"
    );
    let (st, body) = s
        .send("POST", &format!("/api/invitations/{id}/accept"), &tb, None)
        .await;
    assert_eq!(st, 404, "another user's invitation: {body}");
    let (st, body) = s
        .send("POST", &format!("/api/invitations/{id}/accept"), &tc, None)
        .await;
    assert_eq!(
        (st, body["team"]["role"].as_str()),
        (200, Some("reader")),
        "{body}"
    );
    let (st, _) = s
        .send("POST", &format!("/api/invitations/{id}/accept"), &tc, None)
        .await;
    assert_eq!(st, 409, "reuse");
    let (st, body) = s
        .send("POST", "/api/invitations/not-an-id/accept", &tc, None)
        .await;
    assert_eq!(
        (st, body["error"]["code"].as_str()),
        (400, Some("validation_failed")),
        "{body}"
    );
    // An admin withdraws an open invitation; the accepted one is a
    // conflict; a member who is not an admin may not.
    let (_, open) = s
        .send(
            "POST",
            "/api/teams/platform/invitations",
            &ta,
            Some(json!({"email": "td@example.com", "role": "writer"})),
        )
        .await;
    let open_id = open["id"].as_str().unwrap().to_string();
    let withdraw = |id: &str| format!("/api/teams/platform/invitations/{id}");
    let (st, body) = s.send("DELETE", &withdraw(&open_id), &tc, None).await;
    assert_eq!(st, 403, "a reader withdraws: {body}");
    let (st, body) = s.send("DELETE", &withdraw(&open_id), &ta, None).await;
    assert_eq!((st, body["removed"].as_bool()), (200, Some(true)), "{body}");
    let (st, body) = s.send("DELETE", &withdraw(&open_id), &ta, None).await;
    assert_eq!(
        (st, body["removed"].as_bool()),
        (200, Some(false)),
        "again: {body}"
    );
    let (st, body) = s.send("DELETE", &withdraw(&id), &ta, None).await;
    assert_eq!(st, 409, "an accepted invitation: {body}");
    let (st, body) = s.send("DELETE", &withdraw("not-an-id"), &ta, None).await;
    assert_eq!(st, 400, "{body}");

    // B, in an open MCP session, writes into the team and reads it back.
    let sid = s.mcp_session(&tb).await;
    let (out, is_err) = s
        .mcp_call(&tb, &sid, "remember", json!({"content": "Canary deploys run for thirty minutes.", "kind": "convention", "scope": "team.platform"}))
        .await;
    assert!(!is_err, "{out}");
    let memory = out["memory_id"].as_str().unwrap().to_string();
    let (out, _) = s
        .mcp_call(
            &tb,
            &sid,
            "recall",
            json!({"query": "canary deploys", "scopes": ["*"]}),
        )
        .await;
    assert_eq!(out["memories"][0]["team"], "platform", "{out}");

    // Lowered to reader: the same session's next write is refused.
    let (st, body) = s
        .send(
            "PATCH",
            &format!("/api/teams/platform/members/{}", b.id),
            &ta,
            Some(json!({"role": "reader"})),
        )
        .await;
    assert_eq!((st, body["role"].as_str()), (200, Some("reader")), "{body}");
    let (out, is_err) = s
        .mcp_call(&tb, &sid, "remember", json!({"content": "Another convention.", "kind": "convention", "scope": "team.platform"}))
        .await;
    assert!(is_err, "{out}");
    assert_eq!(out["error"]["code"], "forbidden", "{out}");

    // Removed: the same session's next read sees nothing of the team.
    let (st, body) = s
        .send(
            "DELETE",
            &format!("/api/teams/platform/members/{}", b.id),
            &ta,
            None,
        )
        .await;
    assert_eq!((st, body["removed"].as_bool()), (200, Some(true)), "{body}");
    let (out, is_err) = s
        .mcp_call(
            &tb,
            &sid,
            "recall",
            json!({"query": "canary deploys", "scopes": ["*"]}),
        )
        .await;
    assert!(
        !is_err && out["memories"].as_array().unwrap().is_empty(),
        "{out}"
    );
    let (st, _) = s
        .send("GET", &format!("/api/memories/{memory}"), &tb, None)
        .await;
    assert_eq!(st, 404);
    let (st, body) = s
        .send("GET", &format!("/api/memories/{memory}"), &tc, None)
        .await;
    assert_eq!(st, 200, "a member still reads it: {body}");

    // Audit (admins), export (admins), delete.
    let (st, body) = s.send("GET", "/api/teams/platform/audit", &ta, None).await;
    assert_eq!(st, 200, "{body}");
    let actions: Vec<&str> = body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions.first(), Some(&"member_removed"), "{actions:?}");
    assert!(
        actions.contains(&"invitation_accepted") && actions.contains(&"team_created"),
        "{actions:?}"
    );
    let (st, _) = s.send("GET", "/api/teams/platform/audit", &tc, None).await;
    assert_eq!(st, 403);
    let (st, body) = s.send("GET", "/api/teams/platform/export", &ta, None).await;
    assert_eq!(
        (st, body["items"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{body}"
    );
    let (st, body) = s.send("DELETE", "/api/teams/platform", &ta, None).await;
    assert_eq!((st, body["memories"].as_u64()), (200, Some(1)), "{body}");
    let (st, _) = s
        .send("GET", &format!("/api/memories/{memory}"), &tc, None)
        .await;
    assert_eq!(st, 404, "nobody reads a deleted team's memory");
    let (st, body) = s.send("GET", "/api/teams/platform/export", &ta, None).await;
    assert_eq!(
        (st, body["items"].as_array().map(Vec::len)),
        (200, Some(1)),
        "the admin exports for 30 days: {body}"
    );
    s.running.stop().await;
}

/// A team's export is streamed page by page: more memories than one page
/// holds arrive as one JSON document of the route's schema, each once.
#[tokio::test]
async fn a_team_export_larger_than_a_page_is_one_document() {
    let s = start().await;
    let a = common::user(&s.store, "big").await;
    let t = common::token(&s.store, &a, None, &["mcp:read", "mcp:write"]).await;
    let (st, body) = s
        .send("POST", "/api/teams", &t, Some(json!({"slug": "bigteam"})))
        .await;
    assert_eq!(st, 201, "{body}");
    let tools = zm_store::ToolService::new(s.store.clone());
    let n = zm_store::teams::TEAM_EXPORT_PAGE as usize + 2;
    for i in 0..n {
        tools
            .call(
                &Caller::new(a.id.clone()),
                zm_contracts::ToolName::Remember,
                &json!({"content": format!("Team fact number {i}."), "kind": "fact", "scope": "team.bigteam"}),
            )
            .await
            .expect("remember");
    }
    let (st, body) = s.send("GET", "/api/teams/bigteam/export", &t, None).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["team"], "bigteam");
    let items = body["items"].as_array().expect("items");
    let ids: std::collections::HashSet<&str> =
        items.iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!((items.len(), ids.len()), (n, n));
    s.running.stop().await;
}

#[tokio::test]
async fn every_declared_route_is_served_and_documented() {
    let s = start().await;
    let a = common::user(&s.store, "doc").await;
    let t = common::token(&s.store, &a, None, &["mcp:read", "mcp:write"]).await;
    let (_, doc) = s.send("GET", "/api/openapi.json", &t, None).await;
    let (_, contract) = s.send("GET", "/api/contract", &t, None).await;
    let listed = contract["admin_api"]
        .as_array()
        .expect("the contract lists the admin API");
    assert_eq!(listed.len(), zm_contracts::ADMIN_ROUTES.len());
    for r in zm_contracts::ADMIN_ROUTES {
        let op = &doc["paths"][r.path][r.method.to_ascii_lowercase()];
        assert_eq!(op["operationId"], r.operation_id, "{} {}", r.method, r.path);
        assert!(
            op["responses"][r.status.to_string()].is_object(),
            "{}",
            r.operation_id
        );
        // Served: an unknown team answers the contract's 404 (or 400 for a
        // malformed id), never the router's own 404/405 for an unknown route.
        let path = r
            .path
            .replace("{team}", "nosuchteam")
            .replace("{user_id}", "usr_0000000000000000.0000000000")
            .replace("{id}", "inv_0000000000000000.0000000000")
            .replace("{scope}", "proj.x.y");
        let body = r.input.map(|_| json!({}));
        let (st, body) = s.send(r.method, &path, &t, body).await;
        assert!(st != 405, "{} {path}: {st} {body}", r.method);
        let code = body["error"]["code"].as_str().unwrap_or("ok");
        assert!(
            ["ok", "not_found", "validation_failed"].contains(&code),
            "{} {path}: {st} {body}",
            r.method
        );
        if code == "not_found" {
            assert_ne!(
                body["error"]["message"], "No route matches this request.",
                "{} {path}",
                r.method
            );
        }
        // Each path parameter in turn given a value outside its advertised
        // pattern: a 400 naming that parameter, never a lookup's 404.
        let good = [
            ("team", "nosuchteam"),
            ("user_id", "usr_0000000000000000.0000000000"),
            ("id", "inv_0000000000000000.0000000000"),
            ("scope", "proj.x.y"),
        ];
        for (name, bad) in [
            ("team", "No-Such-Team"),
            ("user_id", "alice"),
            ("id", "usr_0000000000000000.0000000000"),
            ("scope", "user.alice"),
        ] {
            if !r.path.contains(&format!("{{{name}}}")) {
                continue;
            }
            let mut path = r.path.to_string();
            for (n, v) in good {
                path = path.replace(&format!("{{{n}}}"), if n == name { bad } else { v });
            }
            let (st, body) = s
                .send(r.method, &path, &t, r.input.map(|_| json!({})))
                .await;
            assert_eq!(
                (st, body["error"]["code"].as_str()),
                (400, Some("validation_failed")),
                "{} {path}: {body}",
                r.method
            );
            assert_eq!(
                body["error"]["details"]["fields"][0]["path"], name,
                "{} {path}: {body}",
                r.method
            );
        }
    }
    s.running.stop().await;
}
