//! zm-http over real HTTP on loopback.

mod common;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use zm_http::HttpConfig;
use zm_store::Store;

struct Server {
    base: String,
    store: Store,
    running: common::Running,
    _dir: tempfile::TempDir,
    rw_a: String,
    ro_a: String,
    rw_b: String,
    http: reqwest::Client,
}

async fn start_with(extra: impl FnOnce(axum::Router, zm_http::AppState) -> axum::Router) -> Server {
    start_configured(|_| {}, extra).await
}

async fn start_configured(
    tune: impl FnOnce(&mut HttpConfig),
    extra: impl FnOnce(axum::Router, zm_http::AppState) -> axum::Router,
) -> Server {
    let (dir, store) = common::store().await;
    let a = common::user(&store, "a").await;
    let b = common::user(&store, "b").await;
    let rw_a = common::token(&store, &a, Some("rw"), &["mcp:read", "mcp:write"]).await;
    let ro_a = common::token(&store, &a, Some("ro"), &["mcp:read"]).await;
    let rw_b = common::token(&store, &b, None, &["mcp:read", "mcp:write"]).await;
    let (listener, _, base) = common::listen().await;
    let mut cfg = HttpConfig::local(&base);
    cfg.body_limit = 64 * 1024;
    tune(&mut cfg);
    let cancel = CancellationToken::new();
    let limits = cfg.conn_limits();
    let state = zm_http::state(store.clone(), cfg.clone());
    let app = extra(zm_http::router(store.clone(), cfg, cancel.clone()), state);
    Server {
        base,
        store,
        running: common::serve(listener, app, limits, cancel),
        _dir: dir,
        rw_a,
        ro_a,
        rw_b,
        http: reqwest::Client::new(),
    }
}

async fn start() -> Server {
    start_with(|r, _| r).await
}

impl Server {
    async fn post(&self, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
        let mut rb = self.http.post(format!("{}{path}", self.base)).json(&body);
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
    async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        let mut rb = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        let r = rb.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
    /// One MCP POST; returns status, session id header, and the JSON-RPC messages.
    async fn mcp(
        &self,
        token: &str,
        session: Option<&str>,
        body: Value,
    ) -> (u16, Option<String>, Vec<Value>) {
        common::mcp_post(&self.http, &self.base, token, session, body).await
    }
    async fn mcp_session(&self, token: &str) -> String {
        let (status, sid, msgs) = self
            .mcp(token, None, json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "http-test", "version": "0"}}}))
            .await;
        assert_eq!(status, 200, "{msgs:?}");
        assert_eq!(
            msgs[0]["result"]["capabilities"]["experimental"]["zero-memory/contract"]["version"],
            zm_contracts::CONTRACT_VERSION
        );
        let sid = sid.expect("session id");
        let (s, _, _) = self
            .mcp(
                token,
                Some(&sid),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await;
        assert_eq!(s, 202);
        sid
    }
    async fn stop(self) {
        self.running.stop().await;
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("?")
}

#[tokio::test]
async fn every_error_status_on_the_rest_routes() {
    let s = start().await;
    let (st, v) = s.get("/nope", Some(&s.rw_a)).await;
    assert_eq!((st, code(&v)), (404, "not_found"));
    let (st, v) = s.get("/api/tools/remember", Some(&s.rw_a)).await;
    assert_eq!((st, code(&v)), (404, "not_found"), "wrong method");
    let (st, v) = s
        .post("/api/tools/no_such_tool", Some(&s.rw_a), json!({}))
        .await;
    assert_eq!((st, code(&v)), (404, "not_found"));
    // Malformed JSON and wrong content type.
    let r = s
        .http
        .post(format!("{}/api/tools/recall", s.base))
        .bearer_auth(&s.rw_a)
        .header("content-type", "application/json")
        .body("{nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert_eq!(code(&r.json::<Value>().await.unwrap()), "validation_failed");
    // A key twice in one object: neither value is taken, nothing written.
    let r = s
        .http
        .post(format!("{}/api/tools/remember", s.base))
        .bearer_auth(&s.rw_a)
        .header("content-type", "application/json")
        .body(r#"{"content":"The twice-keyed note.","scope":"personal","scope":"core"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v = r.json::<Value>().await.unwrap();
    assert_eq!(code(&v), "validation_failed");
    assert_eq!(v["error"]["details"]["fields"][0]["path"], "scope", "{v}");
    let (_, v) = s
        .post(
            "/api/tools/recall",
            Some(&s.rw_a),
            json!({"query": "twice-keyed", "scopes": ["personal", "core"]}),
        )
        .await;
    assert_eq!(v["memories"], json!([]), "nothing was written: {v}");
    let r = s
        .http
        .post(format!("{}/api/tools/recall", s.base))
        .bearer_auth(&s.rw_a)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    // No body and no type (`curl -X POST`) is `{}`; a body without a type,
    // or an empty one declared as something else, is refused.
    for (content_type, body, status) in [
        (None, "", 200),
        (None, "{}", 400),
        (Some("text/plain"), "", 400),
        (Some("application/json"), "", 200),
    ] {
        let mut rb = s
            .http
            .post(format!("{}/api/tools/entities", s.base))
            .bearer_auth(&s.rw_a)
            .body(body);
        if let Some(t) = content_type {
            rb = rb.header("content-type", t);
        }
        let r = rb.send().await.unwrap();
        let got = r.status().as_u16();
        let v = r.json::<Value>().await.unwrap();
        assert_eq!(got, status, "{content_type:?} {body:?}: {v}");
        if status == 200 {
            assert!(v["entities"].is_array(), "{v}");
        } else {
            assert_eq!(code(&v), "validation_failed", "{v}");
        }
    }
    // Over the body limit (64 KiB here).
    let big = json!({"content": "x".repeat(70 * 1024), "scope": "core"});
    let (st, v) = s.post("/api/tools/remember", Some(&s.rw_a), big).await;
    assert_eq!((st, code(&v)), (400, "validation_failed"), "{v}");
    // Credentials.
    let r = s
        .http
        .post(format!("{}/api/tools/recall", s.base))
        .json(&json!({"query": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let challenge = r
        .headers()
        .get("www-authenticate")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"{}/.well-known/oauth-protected-resource/mcp\"",
            s.base
        )),
        "{challenge}"
    );
    assert_eq!(code(&r.json::<Value>().await.unwrap()), "unauthorized");
    let (st, v) = s
        .post(
            "/api/tools/recall",
            Some("zm_pat_bogus"),
            json!({"query": "x"}),
        )
        .await;
    assert_eq!((st, code(&v)), (401, "unauthorized"));
    // A read-only token may read, not write.
    let (st, _) = s
        .post("/api/tools/recall", Some(&s.ro_a), json!({"query": "x"}))
        .await;
    assert_eq!(st, 200);
    let (st, v) = s
        .post(
            "/api/tools/remember",
            Some(&s.ro_a),
            json!({"content": "x", "scope": "core"}),
        )
        .await;
    assert_eq!((st, code(&v)), (403, "forbidden"));
    // The refusal names the scopes the call needs (RFC 6750 §3.1): the
    // read-only token's, and a write token's for deleting the account.
    for (token, tool, body, scopes) in [
        (
            &s.ro_a,
            "remember",
            json!({"content": "x", "scope": "core"}),
            "mcp:read mcp:write",
        ),
        (
            &s.rw_a,
            "delete_account",
            json!({}),
            "mcp:read mcp:write account:delete",
        ),
    ] {
        let r = s
            .http
            .post(format!("{}/api/tools/{tool}", s.base))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 403, "{tool}");
        assert_eq!(
            r.headers()["www-authenticate"],
            format!("Bearer error=\"insufficient_scope\", scope=\"{scopes}\"").as_str(),
            "{tool}"
        );
    }
    // Validation, conflict and ids.
    let (st, v) = s
        .post("/api/tools/remember", Some(&s.rw_a), json!({"content": ""}))
        .await;
    assert_eq!((st, code(&v)), (400, "validation_failed"));
    assert_eq!(v["error"]["details"]["fields"][0]["path"], "content");
    // A body that is no object names the whole body, as every schema
    // mismatch names its field.
    for body in [json!([{"query": "x"}]), json!(null), json!("x")] {
        let (st, v) = s
            .post("/api/tools/recall", Some(&s.rw_a), body.clone())
            .await;
        assert_eq!((st, code(&v)), (400, "validation_failed"), "{body}");
        assert_eq!(
            v["error"]["details"]["fields"][0]["path"], "",
            "{body}: {v}"
        );
    }
    let (st, v) = s
        .post(
            "/api/tools/remember",
            Some(&s.rw_a),
            json!({"content": "Deploys go through the staging cluster first.", "scope": "core"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let id = v["memory_id"].as_str().unwrap().to_string();
    let (st, _) = s
        .post("/api/tools/forget", Some(&s.rw_a), json!({"memory_id": id}))
        .await;
    assert_eq!(st, 200);
    let (st, v) = s
        .post("/api/tools/forget", Some(&s.rw_a), json!({"memory_id": id}))
        .await;
    assert_eq!((st, code(&v)), (409, "conflict"));
    let (st, v) = s.get(&format!("/api/memories/{id}"), Some(&s.rw_b)).await;
    assert_eq!((st, code(&v)), (404, "not_found"), "a foreign id");
    let never = zm_contracts::MemoryId::generate();
    let (st2, v2) = s
        .get(&format!("/api/memories/{never}"), Some(&s.rw_b))
        .await;
    assert_eq!(st2, 404);
    assert_eq!(
        v["error"]["message"].as_str().unwrap().replace(&id, "<id>"),
        v2["error"]["message"]
            .as_str()
            .unwrap()
            .replace(never.as_str(), "<id>")
    );
    let (st, v) = s.get("/api/memories/not-an-id", Some(&s.rw_a)).await;
    assert_eq!((st, code(&v)), (400, "validation_failed"));
    let (st, v) = s.get(&format!("/api/memories/{id}"), Some(&s.rw_a)).await;
    assert_eq!(st, 200);
    assert!(v["invalidated_at"].is_string());
    // A user's data: no cache may keep it.
    let r = s
        .http
        .get(format!("{}/api/memories/{id}", s.base))
        .bearer_auth(&s.rw_a)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["cache-control"].to_str().unwrap(), "no-store");
    // Health, readiness, metrics, contract.
    assert_eq!(s.get("/healthz", None).await.0, 200);
    assert_eq!(s.get("/readyz", None).await.0, 200);
    let m = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(m.contains("zm_http_requests_total{status=\"404\"}"), "{m}");
    assert!(!m.contains("Deploys"), "metrics never carry user data");
    // Storage totals (never a user's figures) and the quotas (none here).
    let gauge = |name: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing from\n{m}"))
            .parse()
            .unwrap()
    };
    assert!(gauge("zm_storage_memories") >= 1, "{m}");
    assert!(
        gauge("zm_storage_bytes") > gauge("zm_storage_memories"),
        "{m}"
    );
    assert_eq!(gauge("zm_quota_memories"), 0);
    assert_eq!(gauge("zm_storage_users_at_quota"), 0);
    let (st, c) = s.get("/api/contract", None).await;
    assert_eq!(st, 200);
    assert_eq!(c["version"], zm_contracts::CONTRACT_VERSION);
    assert_eq!(c["tools"].as_array().unwrap().len(), 18);
    assert!(c["deprecations"]["history"].is_array());
    s.stop().await;
}

async fn boom() -> &'static str {
    let fail = std::env::var("ZM_NEVER_SET_VARIABLE").is_err();
    if fail {
        panic!("secret internals");
    }
    "unreachable"
}

#[tokio::test]
async fn a_panic_is_a_generic_500() {
    let s = start_with(|r, state| {
        let boom = axum::Router::new().route("/boom", axum::routing::get(boom));
        zm_http::with_layers(r.merge(boom), state)
    })
    .await;
    let r = s.http.get(format!("{}/boom", s.base)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 500);
    let v: Value = r.json().await.unwrap();
    assert_eq!(code(&v), "internal");
    assert!(!v.to_string().contains("secret internals"));
    s.stop().await;
}

#[tokio::test]
async fn request_ids_are_adopted_when_well_formed() {
    let s = start().await;
    let good = zm_contracts::IdKind::Request.generate();
    let r = s
        .http
        .get(format!("{}/healthz", s.base))
        .header("x-request-id", &good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"].to_str().unwrap(), good);
    let r = s
        .http
        .get(format!("{}/healthz", s.base))
        .header("x-request-id", "<script>")
        .send()
        .await
        .unwrap();
    let echoed = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(echoed.starts_with("req_") && echoed != "<script>");
    s.stop().await;
}

#[tokio::test]
async fn openapi_component_schemas_are_the_contract_schemas() {
    let s = start().await;
    let (st, doc) = s.get("/api/openapi.json", None).await;
    assert_eq!(st, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for t in zm_contracts::CATALOGUE {
        assert_eq!(
            doc["components"]["schemas"][t.input_type],
            (t.input_schema)(),
            "{} input",
            t.name
        );
        assert_eq!(
            doc["components"]["schemas"][t.output_type],
            (t.output_schema)(),
            "{} output",
            t.name
        );
        assert!(
            doc["paths"][format!("/api/tools/{}", t.name)]["post"].is_object(),
            "{}",
            t.name
        );
    }
    // The routes for operators and discovery are documented too, and each
    // answers what its document says it holds.
    for path in [
        "/healthz",
        "/readyz",
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/api/openapi.json",
    ] {
        let op = &doc["paths"][path]["get"];
        assert_eq!(op["security"], json!([]), "{path}: served without a token");
        let (st, body) = s.get(path, None).await;
        assert_eq!(st, 200, "{path}");
        let schema = &op["responses"]["200"]["content"]["application/json"]["schema"];
        for key in schema["required"].as_array().into_iter().flatten() {
            assert!(
                body.get(key.as_str().unwrap()).is_some(),
                "{path}: {key} in {body}"
            );
        }
    }
    let metrics = &doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
    assert!(metrics["text/plain"].is_object(), "{metrics}");
    // What the document says of a tool call holds on the wire: an empty
    // body is read as `{}`, and the headers it declares are sent.
    let op = &doc["paths"]["/api/tools/recall"]["post"];
    assert_eq!(op["requestBody"]["required"], false, "{op}");
    assert_eq!(op["parameters"][0]["$ref"], "#/components/parameters/Agent");
    assert_eq!(
        doc["components"]["parameters"]["Agent"]["name"],
        "X-ZM-Agent"
    );
    let responses = op["responses"].as_object().unwrap();
    assert!(
        responses
            .values()
            .all(|r| r["headers"]["X-Request-Id"].is_object()),
        "{op}"
    );
    assert!(
        responses["429"]["headers"]["Retry-After"].is_object(),
        "{op}"
    );
    assert!(
        responses["401"]["headers"]["WWW-Authenticate"].is_object(),
        "{op}"
    );
    // `remember`'s 403 for a read-only token carries the challenge it
    // declares.
    let remember = &doc["paths"]["/api/tools/remember"]["post"]["responses"];
    assert!(
        remember["403"]["headers"]["WWW-Authenticate"].is_object(),
        "{remember}"
    );
    let r = s
        .http
        .post(format!("{}/api/tools/recall", s.base))
        .bearer_auth(&s.rw_a)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert!(r.headers().contains_key("x-request-id"));
    let (st, v) = (r.status().as_u16(), r.json::<Value>().await.unwrap());
    assert_eq!((st, code(&v)), (400, "validation_failed"), "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("query"),
        "{v}"
    );
    let r = s
        .http
        .post(format!("{}/api/tools/recall", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.headers().contains_key("www-authenticate"));
    s.stop().await;
}

#[tokio::test]
async fn a_rest_call_attaches_nothing_to_the_next() {
    let s = start().await;
    let hint = "git@github.com:acme/rest-attach.git";
    let (st, v) = s
        .post(
            "/api/tools/recall",
            Some(&s.rw_a),
            json!({"query": "deploys", "project_hint": hint}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert!(v["project_scope"].is_string(), "{v}");
    assert!(
        v["session"]["attached_project"].is_null(),
        "REST attaches nothing: {v}"
    );
    let (st, v) = s
        .post(
            "/api/tools/remember",
            Some(&s.rw_a),
            json!({"content": "Deploys go out on Tuesdays.", "kind": "fact"}),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("scope_target_required:"),
        "{v}"
    );
    s.stop().await;
}

#[tokio::test]
async fn rest_and_mcp_give_the_same_results() {
    let s = start().await;
    let (st, v) = s.post("/api/tools/remember", Some(&s.rw_a), json!({"content": "The cache TTL for the search API is 300 seconds.", "scope": "core", "kind": "fact"})).await;
    assert_eq!(st, 200, "{v}");
    let sid = s.mcp_session(&s.rw_a).await;
    let call = |id: i64, name: &str, args: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}});
    let args = json!({"query": "cache TTL search", "scopes": ["*"]});
    let (_, rest) = s
        .post("/api/tools/recall", Some(&s.rw_a), args.clone())
        .await;
    let (st, _, msgs) = s.mcp(&s.rw_a, Some(&sid), call(2, "recall", args)).await;
    assert_eq!(st, 200);
    let result = &msgs.iter().find(|m| m["id"] == 2).unwrap()["result"];
    assert_eq!(result["structuredContent"]["memories"], rest["memories"]);
    let first: Value =
        serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(first, result["structuredContent"]);
    // The same error both ways.
    let bad = json!({"memory_id": "mem_nope"});
    let (st, rest_err) = s
        .post("/api/tools/forget", Some(&s.rw_a), bad.clone())
        .await;
    assert_eq!(st, 400);
    let (_, _, msgs) = s.mcp(&s.rw_a, Some(&sid), call(3, "forget", bad)).await;
    let result = &msgs.iter().find(|m| m["id"] == 3).unwrap()["result"];
    assert_eq!(result["isError"], true);
    let body: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(body, rest_err);
    // Both write attempts are audited with the request id of their HTTP request.
    let a = s
        .store
        .user_by_email("a@example.com")
        .await
        .unwrap()
        .unwrap();
    let rows = s.store.audit_rows(&a.id, 2).await.unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        assert_eq!(r["command"], "forget");
        assert!(
            r["request_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("req_")),
            "{r}"
        );
    }
    assert_ne!(rows[0]["request_id"], rows[1]["request_id"]);
    // A read-only token over MCP.
    let ro_sid = s.mcp_session(&s.ro_a).await;
    let (_, _, msgs) = s
        .mcp(
            &s.ro_a,
            Some(&ro_sid),
            call(4, "remember", json!({"content": "x", "scope": "core"})),
        )
        .await;
    let result = &msgs.iter().find(|m| m["id"] == 4).unwrap()["result"];
    assert_eq!(result["isError"], true);
    assert!(result.get("structuredContent").is_none(), "{result}");
    let first: Value =
        serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(first["error"]["code"], "forbidden");
    // One tool service counted all of it, by transport and error code.
    let m = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "zm_tool_calls_total{tool=\"recall\",transport=\"rest\"} 1",
        "zm_tool_calls_total{tool=\"recall\",transport=\"mcp\"} 1",
        "zm_tool_errors_total{tool=\"forget\",transport=\"rest\",code=\"validation_failed\"} 1",
        "zm_tool_errors_total{tool=\"forget\",transport=\"mcp\",code=\"validation_failed\"} 1",
        "zm_tool_errors_total{tool=\"remember\",transport=\"mcp\",code=\"forbidden\"} 1",
        "zm_tool_duration_seconds_count{tool=\"recall\"} 2",
    ] {
        assert!(m.contains(line), "{line} missing from\n{m}");
    }
    s.stop().await;
}

#[tokio::test]
async fn mcp_needs_a_bearer_and_guards_hosts_and_sessions() {
    let s = start().await;
    let r = s
        .http
        .post(format!("{}/mcp", s.base))
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let h = r.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(h.contains("resource_metadata="), "{h}");
    // No token: no error code, in the challenge or the body (RFC 6750 §3.1).
    let body: Value = r.json().await.unwrap();
    assert!(
        !h.contains("error=") && body.get("error").is_none(),
        "{h} {body}"
    );
    // A token that does not verify: `invalid_token`, in both.
    let r = s
        .http
        .post(format!("{}/mcp", s.base))
        .bearer_auth("zm_pat_bogus")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "invalid_token", "{body}");
    let (st, meta) = s
        .get("/.well-known/oauth-protected-resource/mcp", None)
        .await;
    assert_eq!(st, 200);
    assert_eq!(meta["resource"], format!("{}/mcp", s.base));
    // DNS rebinding: a foreign Host is refused.
    let r = s
        .http
        .post(format!("{}/mcp", s.base))
        .bearer_auth(&s.rw_a)
        .header("host", "evil.example")
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    // A's session id used by B answers exactly like an unknown id.
    let sid = s.mcp_session(&s.rw_a).await;
    let list = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"});
    let (st_a, _, msgs_a) = s.mcp(&s.rw_a, Some(&sid), list.clone()).await;
    assert_eq!(st_a, 200);
    assert_eq!(msgs_a[0]["result"]["tools"].as_array().unwrap().len(), 18);
    let (st_b, _, msgs_b) = s.mcp(&s.rw_b, Some(&sid), list.clone()).await;
    let (st_u, _, msgs_u) = s.mcp(&s.rw_b, Some("never-existed-session"), list).await;
    assert_eq!(st_b, st_u);
    assert_ne!(st_b, 200);
    assert_eq!(msgs_b, msgs_u);
    s.stop().await;
}

/// A page of another site may not drive `/mcp` from the user's browser:
/// its `Origin` is refused (403, before the token is read) unless it is the
/// server's own or the operator listed it. Clients that send no `Origin`
/// (every SDK outside a browser) are not affected.
#[tokio::test]
async fn mcp_refuses_pages_of_other_origins() {
    let s = start_configured(
        |c| c.allowed_origins = vec!["https://app.example.com:443".into()],
        |r, _| r,
    )
    .await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}});
    let send = |origin: Option<String>, token: Option<String>| {
        let mut rb = s
            .http
            .post(format!("{}/mcp", s.base))
            .header("accept", "application/json, text/event-stream")
            .json(&init);
        if let Some(o) = origin {
            rb = rb.header("origin", o);
        }
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        async move {
            let r = rb.send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.text().await.unwrap())
        }
    };
    let port = s.base.rsplit(':').next().unwrap().to_string();
    let other_port = if port == "1" { "2" } else { "1" };
    for foreign in [
        "https://evil.example".to_string(),
        format!("http://127.0.0.1:{other_port}"),
        "https://app.example.com:8443".to_string(),
        "null".to_string(),
    ] {
        for token in [None, Some(s.rw_a.clone())] {
            let (status, body) = send(Some(foreign.clone()), token).await;
            assert_eq!(status, 403, "{foreign}: {body}");
            let body: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(body["error"]["code"], -32000, "{body}");
        }
    }
    for ours in [
        None,
        Some(s.base.clone()),
        Some("https://app.example.com".to_string()),
        Some("HTTPS://APP.EXAMPLE.COM".to_string()),
    ] {
        let (status, body) = send(ours.clone(), Some(s.rw_a.clone())).await;
        assert_eq!(status, 200, "{ours:?}: {body}");
        // Still authenticated: the origin is no credential.
        let (status, _) = send(ours.clone(), None).await;
        assert_eq!(status, 401, "{ours:?}");
    }
    s.stop().await;
}

/// A page at a listed origin (the MCP Inspector's direct mode) can use
/// `/mcp` from a browser: its preflight is answered without a token, and
/// every answer (a 401 too) names the origin and exposes the session id.
/// Another origin's preflight is refused with no CORS headers.
#[tokio::test]
async fn a_listed_origin_gets_cors_on_mcp() {
    let s = start_configured(
        |c| c.allowed_origins = vec!["http://localhost:6274".into()],
        |r, _| r,
    )
    .await;
    let preflight = |origin: &str| {
        s.http
            .request(reqwest::Method::OPTIONS, format!("{}/mcp", s.base))
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "authorization,content-type,mcp-protocol-version,mcp-method,mcp-name,Mcp-Param-Query,x-other",
            )
            .send()
    };
    let ok = preflight("http://localhost:6274").await.unwrap();
    assert_eq!(ok.status().as_u16(), 204);
    let h = ok.headers();
    assert_eq!(h["access-control-allow-origin"], "http://localhost:6274");
    let allowed = h["access-control-allow-headers"].to_str().unwrap();
    // A 2026-07-28 client's too: Mcp-Method and Mcp-Name on every POST,
    // and the Mcp-Param-* headers of a tool call; nothing else it asks.
    let allowed: Vec<&str> = allowed.split(", ").collect();
    for name in [
        "authorization",
        "content-type",
        "mcp-protocol-version",
        "mcp-session-id",
        "mcp-method",
        "mcp-name",
        "mcp-param-query",
    ] {
        assert!(allowed.contains(&name), "{name}: {allowed:?}");
    }
    assert!(!allowed.contains(&"x-other"), "{allowed:?}");
    assert!(
        h["access-control-allow-methods"]
            .to_str()
            .unwrap()
            .contains("POST")
    );
    let refused = preflight("https://evil.example").await.unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    assert!(
        refused
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}});
    for token in [Some(s.rw_a.clone()), None] {
        let mut rb = s
            .http
            .post(format!("{}/mcp", s.base))
            .header("accept", "application/json, text/event-stream")
            .header("origin", "http://localhost:6274")
            .json(&init);
        if let Some(t) = &token {
            rb = rb.bearer_auth(t);
        }
        let r = rb.send().await.unwrap();
        assert_eq!(r.status().as_u16(), if token.is_some() { 200 } else { 401 });
        let h = r.headers();
        assert_eq!(h["access-control-allow-origin"], "http://localhost:6274");
        let exposed = h["access-control-expose-headers"].to_str().unwrap();
        assert!(
            exposed.contains("mcp-session-id") && exposed.contains("retry-after"),
            "{exposed}"
        );
    }
    s.stop().await;
}

/// A 2026-07-28 client over HTTP is told first that nothing attaches
/// between its calls (no session holds a project for it), and still gets
/// the router.
#[tokio::test]
async fn a_stateless_client_is_told_to_pass_its_thread() {
    let s = start().await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "some-agent", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let r = s
        .http
        .post(format!("{}/mcp", s.base))
        .bearer_auth(&s.rw_a)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "server/discover")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers().get("mcp-session-id").is_none(), "stateless");
    let text = r.text().await.unwrap();
    let line = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("data:")
                .map(str::trim)
                .filter(|l| !l.is_empty())
        })
        .unwrap_or(text.as_str());
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"));
    let instructions = v["result"]["instructions"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    assert!(
        instructions.starts_with(zm_mcp::instructions::STATELESS_NOTE),
        "{instructions}"
    );
    assert!(instructions.contains("build_context"), "{instructions}");
    // Over HTTP the server cannot see the client's workspace, and says so.
    assert!(
        instructions.contains(zm_mcp::instructions::ATTACHMENT_NOTE),
        "{instructions}"
    );
    // A call's footer says the same: nothing is set for the next call (it
    // used to offer to "set" a project with a hint).
    let r = s
        .http
        .post(format!("{}/mcp", s.base))
        .bearer_auth(&s.rw_a)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "recall")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": "anything"}, "_meta": meta}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    assert!(text.contains("stateless request"), "{text}");
    assert!(!text.contains("to set one"), "{text}");
    s.stop().await;
}

/// A request body over the limit, before any session exists, is refused
/// whole with 413 and a JSON-RPC error (nothing handled, no session
/// opened).
#[tokio::test]
async fn mcp_refuses_a_body_over_the_limit() {
    let s = start().await;
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x".repeat(70 * 1024), "version": "0"}}});
    let r = s
        .http
        .post(format!("{}/mcp", s.base))
        .bearer_auth(&s.rw_a)
        .header("accept", "application/json, text/event-stream")
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert!(r.headers().get("mcp-session-id").is_none());
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("larger than"),
        "{v}"
    );
    s.stop().await;
}

/// The transport's own refusals come as JSON-RPC errors too, with their
/// status and words (they were plain text): an `Accept` without both
/// types, a `Content-Type` that is not JSON, a protocol version it does
/// not serve.
#[tokio::test]
async fn mcp_answers_the_transports_refusals_as_jsonrpc() {
    let s = start().await;
    let sid = s.mcp_session(&s.rw_a).await;
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}).to_string();
    for (accept, content_type, version, want) in [
        ("application/json", "application/json", "2025-11-25", 406),
        (
            "application/json, text/event-stream",
            "text/plain",
            "2025-11-25",
            415,
        ),
        (
            "application/json, text/event-stream",
            "application/json",
            "1999-01-01",
            400,
        ),
    ] {
        let r = s
            .http
            .post(format!("{}/mcp", s.base))
            .bearer_auth(&s.rw_a)
            .header("accept", accept)
            .header("content-type", content_type)
            .header("mcp-session-id", &sid)
            .header("mcp-protocol-version", version)
            .body(ping.clone())
            .send()
            .await
            .unwrap();
        let what = format!("{accept} / {content_type} / {version}");
        assert_eq!(r.status().as_u16(), want, "{what}");
        assert_eq!(
            r.headers()["content-type"].to_str().unwrap(),
            "application/json",
            "{what}"
        );
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["jsonrpc"], "2.0", "{what}: {v}");
        assert_eq!(v["error"]["code"], -32600, "{what}: {v}");
        assert!(
            !v["error"]["message"].as_str().unwrap().is_empty(),
            "{what}: {v}"
        );
    }
    s.stop().await;
}

/// A POST that is not one JSON-RPC message is refused as JSON-RPC, with
/// a 400, in a session or out of one (the transport answered a body that
/// is not JSON with a plain-text 415).
#[tokio::test]
async fn mcp_refuses_what_is_not_one_jsonrpc_message_as_jsonrpc() {
    let s = start().await;
    let sid = s.mcp_session(&s.rw_a).await;
    for session in [None, Some(sid.as_str())] {
        for (body, want) in [
            ("{not json", -32700),
            (
                "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
                -32600,
            ),
            ("{\"id\":1,\"method\":\"ping\"}", -32600),
            // JSON-RPC 2.0 by its `jsonrpc`, but no message the transport
            // reads (it answered them with a plain-text 415).
            ("{\"jsonrpc\":\"2.0\"}", -32600),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}",
                -32600,
            ),
            ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", -32600),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"result\":1}",
                -32600,
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":[]}",
                -32600,
            ),
        ] {
            let mut rb = s
                .http
                .post(format!("{}/mcp", s.base))
                .bearer_auth(&s.rw_a)
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .body(body);
            if let Some(sid) = session {
                rb = rb
                    .header("mcp-session-id", sid)
                    .header("mcp-protocol-version", "2025-11-25");
            }
            let r = rb.send().await.unwrap();
            assert_eq!(r.status().as_u16(), 400, "{body} in {session:?}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["code"], want, "{body} in {session:?}: {v}");
        }
    }
    // The session is untouched by them.
    let (st, _, msgs) = s
        .mcp(
            &s.rw_a,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        )
        .await;
    assert_eq!(st, 200, "{msgs:?}");
    s.stop().await;
}

/// A `tools/call` whose parameters are not MCP's shape (`arguments` an
/// array or a string, `name` a number) is the caller's to fix: -32602,
/// Invalid params, not -32601 as though the server had no `tools/call`.
/// A method nobody defines is still -32601.
#[tokio::test]
async fn a_tools_call_of_the_wrong_shape_is_invalid_params() {
    let s = start().await;
    let sid = s.mcp_session(&s.rw_a).await;
    for params in [
        json!({"name": "recall", "arguments": []}),
        json!({"name": "recall", "arguments": "x"}),
        json!({"name": 5, "arguments": {}}),
    ] {
        let (st, _, msgs) = s
            .mcp(
                &s.rw_a,
                Some(&sid),
                json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}),
            )
            .await;
        assert_eq!(st, 200, "{params}: {msgs:?}");
        assert_eq!(msgs[0]["error"]["code"], -32602, "{params}: {msgs:?}");
        assert!(
            msgs[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("tools/call"),
            "{msgs:?}"
        );
    }
    let (_, _, msgs) = s
        .mcp(
            &s.rw_a,
            Some(&sid),
            json!({"jsonrpc": "2.0", "id": 4, "method": "no/such-method", "params": {}}),
        )
        .await;
    assert_eq!(msgs[0]["error"]["code"], -32601, "{msgs:?}");
    s.stop().await;
}

/// With no origin configured (the default), `/mcp` still refuses a page
/// of another site and accepts its own origin.
#[tokio::test]
async fn mcp_refuses_other_origins_by_default() {
    let s = start().await;
    let post = |origin: String| {
        s.http
            .post(format!("{}/mcp", s.base))
            .bearer_auth(&s.rw_a)
            .header("accept", "application/json, text/event-stream")
            .header("origin", origin)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}}))
            .send()
    };
    let foreign = post("https://evil.example".into()).await.unwrap();
    assert_eq!(foreign.status().as_u16(), 403);
    let own = post(s.base.clone()).await.unwrap();
    assert_eq!(own.status().as_u16(), 200);
    s.stop().await;
}

/// An HTTP session attached to a project its user has left lets go of it
/// at the next read, in the database too: the next scope-less write is
/// asked for a project (`validation_failed`) instead of being refused in
/// the project left (`forbidden`).
#[tokio::test]
async fn a_session_lets_go_of_a_project_left() {
    let s = start().await;
    let a = s
        .store
        .user_by_email("a@example.com")
        .await
        .unwrap()
        .unwrap();
    let a = zm_store::Caller::new(a.id);
    let b = s
        .store
        .user_by_email("b@example.com")
        .await
        .unwrap()
        .unwrap();
    s.store
        .create_team(
            &a,
            zm_contracts::teams::CreateTeamInput {
                slug: "ledger_team".into(),
                name: None,
            },
        )
        .await
        .unwrap();
    common::join_team(
        &s.store,
        &a,
        "ledger_team",
        "b@example.com",
        zm_contracts::TeamRole::Writer,
    )
    .await;
    let hint = "git@github.com:acme/ledger.git";
    let (st, _) = s
        .post("/api/tools/remember", Some(&s.rw_a), json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": hint}))
        .await;
    assert_eq!(st, 200);
    s.store
        .share_project_with_team(
            &a,
            "ledger_team",
            zm_contracts::teams::ShareProjectInput {
                scope: None,
                project_hint: Some(hint.into()),
            },
        )
        .await
        .unwrap();
    let sid = s.mcp_session(&s.rw_b).await;
    let call = |id: u32, name: &str, args: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}});
    let (_, _, msgs) = s
        .mcp(
            &s.rw_b,
            Some(&sid),
            call(
                3,
                "recall",
                json!({"query": "ledger", "project_hint": hint}),
            ),
        )
        .await;
    let project = msgs[0]["result"]["structuredContent"]["project_scope"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        msgs[0]["result"]["structuredContent"]["session"]["attached_project"],
        json!(project)
    );
    s.store
        .remove_team_member(&a, "ledger_team", &b.id)
        .await
        .unwrap();
    let (_, _, msgs) = s
        .mcp(
            &s.rw_b,
            Some(&sid),
            call(4, "recall", json!({"query": "ledger"})),
        )
        .await;
    assert!(
        msgs[0]["result"]["structuredContent"]["session"]["attached_project"].is_null(),
        "{msgs:?}"
    );
    let (_, _, msgs) = s
        .mcp(
            &s.rw_b,
            Some(&sid),
            call(5, "remember", json!({"content": "A scope-less note."})),
        )
        .await;
    let text = msgs[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("validation_failed"), "{msgs:?}");
    s.stop().await;
}

/// Over an HTTP session as over stdio: a briefing pinned to another
/// project than the session's attachment does not hand the session its
/// thread, so the next scope-less `remember` lands in the attached
/// project, as its footer says.
#[tokio::test]
async fn a_briefing_pinned_elsewhere_leaves_the_session_where_it_is() {
    let s = start().await;
    let sid = s.mcp_session(&s.rw_a).await;
    let call = |id: u32, name: &str, args: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}});
    let (_, _, msgs) = s
        .mcp(
            &s.rw_a,
            Some(&sid),
            call(
                2,
                "recall",
                json!({"query": "x", "project_hint": "git@github.com:acme/home.git"}),
            ),
        )
        .await;
    let home = msgs[0]["result"]["structuredContent"]["project_scope"]
        .as_str()
        .expect("pinned")
        .to_string();
    let (_, _, msgs) = s
        .mcp(&s.rw_a, Some(&sid), call(3, "build_context", json!({"topic": "billing", "briefing": true, "project_hint": "git@github.com:acme/away.git"})))
        .await;
    let away = msgs[0]["result"]["structuredContent"]["project_scope"]
        .as_str()
        .expect("pinned")
        .to_string();
    assert_ne!(home, away);
    assert!(
        msgs[0]["result"]["structuredContent"]["session"]["thread"].is_string(),
        "{msgs:?}"
    );
    let (_, _, msgs) = s
        .mcp(
            &s.rw_a,
            Some(&sid),
            call(
                4,
                "remember",
                json!({"content": "A decision about home.", "kind": "decision"}),
            ),
        )
        .await;
    assert_eq!(
        msgs[0]["result"]["structuredContent"]["scope"],
        json!(home),
        "{msgs:?}"
    );
    s.stop().await;
}

/// A call within a few bytes of the body limit whose arguments repeat a
/// key is still the tool's `validation_failed`: marking the repeat makes
/// the body the transport reads a little longer than the one sent, and
/// that must not become the transport's plain 413.
#[tokio::test]
async fn a_repeated_key_at_the_body_limit_is_still_refused_as_a_tool_error() {
    let s = start().await;
    let sid = s.mcp_session(&s.rw_a).await;
    let limit = 64 * 1024; // the body limit `start` sets
    let shape = |pad: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"remember","arguments":{{"content":"{pad}","kind":"fact","kind":"fact","scope":"personal"}}}}}}"#
        )
    };
    let pad = "x".repeat(limit - shape("").len() - 8);
    let body = shape(&pad);
    assert_eq!(body.len(), limit - 8);
    let (status, _, msgs) =
        common::mcp_post_text(&s.http, &s.base, &s.rw_a, Some(&sid), body).await;
    assert_eq!(status, 200, "{msgs:?}");
    assert_eq!(msgs[0]["result"]["isError"], json!(true), "{msgs:?}");
    let text = msgs[0]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("validation_failed") && text.contains("kind"),
        "{text}"
    );
    s.stop().await;
}

/// A tool call whose arguments hold a key twice is refused as REST refuses
/// such a body (`validation_failed` naming the key), not read as its last
/// value; the same call written once is stored.
#[tokio::test]
async fn an_mcp_tool_argument_given_twice_is_refused() {
    let s = start().await;
    let sid = s.mcp_session(&s.rw_a).await;
    let twice = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"remember","arguments":{"content":"The quarterly freeze starts Monday.","scope":"core","content":"The quarterly freeze starts Friday."}}}"#;
    let (status, _, msgs) =
        common::mcp_post_text(&s.http, &s.base, &s.rw_a, Some(&sid), twice.to_string()).await;
    assert_eq!(status, 200, "{msgs:?}");
    assert_eq!(msgs[0]["result"]["isError"], true, "{msgs:?}");
    let body: Value = serde_json::from_str(
        msgs[0]["result"]["content"][0]["text"]
            .as_str()
            .expect("the error body"),
    )
    .unwrap();
    assert_eq!(body["error"]["code"], "validation_failed", "{body}");
    assert_eq!(
        body["error"]["details"]["fields"][0]["path"], "content",
        "{body}"
    );
    let (_, v) = s
        .post(
            "/api/tools/recall",
            Some(&s.rw_a),
            json!({"query": "quarterly freeze"}),
        )
        .await;
    assert_eq!(v["memories"], json!([]), "nothing was stored: {v}");
    let once = twice.replace(r#","content":"The quarterly freeze starts Friday.""#, "");
    let (_, _, msgs) = common::mcp_post_text(&s.http, &s.base, &s.rw_a, Some(&sid), once).await;
    assert!(
        msgs[0]["result"]["structuredContent"]["memory_id"].is_string(),
        "{msgs:?}"
    );
    s.stop().await;
}

/// A repeated argument key in a body that grows when marked (its numbers
/// written again: `1e9` as `1000000000.0`, three times longer) past what
/// the transport reads is still refused naming the key, not answered
/// with the transport's plain-text 413.
#[tokio::test]
async fn a_repeated_key_in_a_body_that_grows_when_marked_is_still_named() {
    let s = start().await;
    let sid = s.mcp_session(&s.rw_a).await;
    let limit = 64 * 1024; // the body limit `start` sets
    let numbers = vec!["1e9"; (limit - 1024) / 4].join(",");
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"recall","arguments":{{"query":"a","query":"b","pad":[{numbers}]}}}}}}"#
    );
    assert!(body.len() < limit, "sent within the body limit");
    let (status, _, msgs) =
        common::mcp_post_text(&s.http, &s.base, &s.rw_a, Some(&sid), body).await;
    assert_eq!(status, 200, "{msgs:?}");
    let body: Value = serde_json::from_str(
        msgs[0]["result"]["content"][0]["text"]
            .as_str()
            .expect("the error body"),
    )
    .unwrap();
    assert_eq!(body["error"]["code"], "validation_failed", "{body}");
    assert_eq!(
        body["error"]["details"]["fields"][0]["path"], "query",
        "{body}"
    );
    s.stop().await;
}

/// A gate in front of the router for shutdown tests: each request `held`
/// picks announces itself on `arrived` (one permit), then waits until the
/// gate's sender says open.
struct Gate {
    arrived: std::sync::Arc<tokio::sync::Semaphore>,
    open: tokio::sync::watch::Sender<bool>,
}

impl Gate {
    /// The gate, and the router change that puts it in front of the app.
    fn new(
        held: fn(&axum::extract::Request) -> bool,
    ) -> (
        Gate,
        impl FnOnce(axum::Router, zm_http::AppState) -> axum::Router,
    ) {
        let arrived = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        let (open, gate) = tokio::sync::watch::channel(false);
        let on_arrival = arrived.clone();
        let layer = move |router: axum::Router, _| {
            router.layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let (arrived, mut gate) = (on_arrival.clone(), gate.clone());
                    async move {
                        if held(&req) {
                            arrived.add_permits(1);
                            gate.wait_for(|open| *open).await.expect("the gate opens");
                        }
                        next.run(req).await
                    }
                },
            ))
        };
        (Gate { arrived, open }, layer)
    }
}

/// Shutdown with writes in flight: REST writes are held inside the server
/// (a gate in front of the remember route) while the shutdown signal is
/// sent and the server stops taking connections; then the gate opens. Every
/// held write must be acknowledged — after the signal — and every
/// acknowledged id must be in the database when it is opened again.
#[tokio::test]
async fn graceful_shutdown_keeps_every_acknowledged_write() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    const WRITES: usize = 20;
    /// How long to wait for a condition before failing (never for speed).
    const PATIENCE: Duration = Duration::from_secs(60);

    // Each remember request announces itself, then waits for the gate.
    let (gate, layer) = Gate::new(|req| req.uri().path() == "/api/tools/remember");
    let (arrived, open_gate) = (gate.arrived, gate.open);
    let s = start_with(layer).await;

    let signal_sent = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..WRITES {
        let http = s.http.clone();
        let url = format!("{}/api/tools/remember", s.base);
        let token = s.rw_a.clone();
        let signal_sent = signal_sent.clone();
        tasks.push(tokio::spawn(async move {
            let r = http
                .post(url)
                .bearer_auth(token)
                .json(&json!({"content": format!("In-flight write number {i} about shutdown safety."), "scope": "core"}))
                .send()
                .await;
            match r {
                Ok(r) if r.status().as_u16() == 200 => {
                    let after_signal = signal_sent.load(Ordering::SeqCst);
                    let id = r.json::<Value>().await.ok().and_then(|v| v["memory_id"].as_str().map(str::to_string));
                    id.map(|id| (id, after_signal))
                }
                _ => None,
            }
        }));
    }
    // Every write is inside the server, held at the gate.
    let all_in = tokio::time::timeout(
        PATIENCE,
        arrived.acquire_many(u32::try_from(WRITES).unwrap()),
    )
    .await;
    assert!(
        all_in.is_ok(),
        "the {WRITES} writes never all reached the server"
    );

    let owner = s
        .store
        .user_by_email("a@example.com")
        .await
        .unwrap()
        .unwrap();
    let db = s._dir.path().join("t.db");
    let (store, mut running, dir) = (s.store, s.running, s._dir);
    signal_sent.store(true, Ordering::SeqCst);
    running.signal();
    // The server has taken the signal once it refuses new connections.
    let base = s.base;
    let refusing = tokio::time::timeout(PATIENCE, async {
        loop {
            match reqwest::Client::new()
                .get(format!("{base}/healthz"))
                .send()
                .await
            {
                Err(e) if e.is_connect() => break,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await;
    assert!(
        refusing.is_ok(),
        "the server kept accepting connections after the shutdown signal"
    );

    // The held writes keep the server from finishing its shutdown.
    assert!(
        !running.is_finished(),
        "the server finished shutting down with writes in flight"
    );
    // Now let the held writes finish, during the shutdown.
    open_gate.send(true).unwrap();
    let acked: Vec<(String, bool)> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .filter_map(|r| r.unwrap())
        .collect();
    running.stopped().await;
    let after_signal = acked.iter().filter(|(_, after)| *after).count();
    assert!(
        after_signal >= 1,
        "no write was acknowledged after the shutdown signal"
    );
    assert_eq!(
        acked.len(),
        WRITES,
        "every write in flight at the shutdown signal is answered 200"
    );
    assert_eq!(after_signal, WRITES, "all of them after the signal");

    // Restart: a new store on the same file holds every acknowledged write.
    store.close().await;
    drop(store);
    let reopened = Store::open(&zm_store::sqlite_url(&db)).await.unwrap();
    let caller = zm_store::Caller::new(owner.id);
    for (id, _) in &acked {
        let id = zm_contracts::MemoryId::parse(id).unwrap();
        reopened
            .get_memory(&caller, &id)
            .await
            .expect("an acknowledged write survives shutdown");
    }
    reopened.close().await;
    drop(dir);
}

#[tokio::test]
async fn a_body_that_is_not_an_object_is_refused() {
    let s = start().await;
    for body in ["null", "[]", "42", "\"x\""] {
        let r = s
            .http
            .post(format!("{}/api/tools/entities", s.base))
            .bearer_auth(&s.rw_a)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{body}");
        assert_eq!(code(&r.json::<Value>().await.unwrap()), "validation_failed");
    }
    // An empty body is an empty object.
    let r = s
        .http
        .post(format!("{}/api/tools/entities", s.base))
        .bearer_auth(&s.rw_a)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    s.stop().await;
}

/// The request limit counts an account, whichever of its tokens it uses:
/// another token of the same user gets no fresh window; another user does;
/// a write counts once, as a read does.
#[tokio::test]
async fn the_request_limit_counts_an_account_not_a_token() {
    let s = start_configured(|c| c.token_rate_limit = Some(3), |r, _| r).await;
    let recall = json!({"query": "anything"});
    for token in [&s.rw_a, &s.ro_a, &s.rw_a] {
        let (st, v) = s
            .post("/api/tools/recall", Some(token), recall.clone())
            .await;
        assert_eq!(st, 200, "{v}");
    }
    let (st, v) = s
        .post("/api/tools/recall", Some(&s.ro_a), recall.clone())
        .await;
    assert_eq!((st, code(&v)), (429, "rate_limited"), "{v}");
    let (st, v) = s.post("/api/tools/recall", Some(&s.rw_b), recall).await;
    assert_eq!(st, 200, "{v}");
    // A write counts once too (its token is looked up before it takes its
    // place among the writes, and counted on the write's own task).
    for n in 0..2 {
        let (st, v) = s
            .post(
                "/api/tools/remember",
                Some(&s.rw_b),
                json!({"content": format!("Deploy window number {n} is on Tuesdays."), "scope": "personal"}),
            )
            .await;
        assert_eq!(st, 200, "write {n}: {v}");
    }
    let (st, v) = s
        .post(
            "/api/tools/remember",
            Some(&s.rw_b),
            json!({"content": "Deploy window three is on Fridays.", "scope": "personal"}),
        )
        .await;
    assert_eq!((st, code(&v)), (429, "rate_limited"), "{v}");
    s.running.stop().await;
}

/// A path that is not text is answered after authentication, in the
/// contract's error shape: 401 without a token, `validation_failed` with one.
#[tokio::test]
async fn a_path_that_is_not_text_is_refused_in_the_contracts_shape() {
    let s = start().await;
    for path in ["/api/tools/%FF", "/api/memories/%FF%FE"] {
        let url = format!("{}{path}", s.base);
        let request = || {
            if path.starts_with("/api/memories") {
                s.http.get(&url)
            } else {
                s.http.post(&url).json(&json!({}))
            }
        };
        let r = request().send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401, "{path}");
        assert!(r.headers().contains_key("www-authenticate"), "{path}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(code(&v), "unauthorized", "{path}: {v}");
        let r = request().bearer_auth(&s.rw_a).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{path}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(code(&v), "validation_failed", "{path}: {v}");
    }
    s.running.stop().await;
}

/// Shutdown with an MCP call in flight: the call is held inside the server
/// (a gate in front of `/mcp`) while the shutdown signal is sent; then the
/// gate opens. The MCP session must still be open for it — sessions end
/// only once the requests in flight are answered — so the call is answered
/// with its result, and the server then stops, an open event stream of
/// the same session notwithstanding.
#[tokio::test]
async fn graceful_shutdown_answers_an_mcp_call_in_flight() {
    use std::time::Duration;
    const PATIENCE: Duration = Duration::from_secs(60);

    let (gate, layer) = Gate::new(|req| req.headers().contains_key("x-test-hold"));
    let (arrived, open_gate) = (gate.arrived, gate.open);
    let s = start_with(layer).await;
    let (status, sid, _) = common::mcp_post(
        &s.http,
        &s.base,
        &s.rw_a,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "shutdown-test", "version": "0"}}}),
    )
    .await;
    assert_eq!(status, 200);
    let sid = sid.expect("a session");
    let (status, _, _) = common::mcp_post(
        &s.http,
        &s.base,
        &s.rw_a,
        Some(&sid),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(status, 202);
    // The session's standalone event stream, open through the shutdown.
    let stream = s
        .http
        .get(format!("{}/mcp", s.base))
        .bearer_auth(&s.rw_a)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .send();
    let (opened, is_open) = tokio::sync::oneshot::channel();
    let stream = tokio::spawn(async move {
        let r = stream.await.expect("the event stream opens");
        let _ = opened.send(r.status().as_u16());
        // Held open until the server ends it.
        let _ = r.bytes().await;
    });
    let status = tokio::time::timeout(PATIENCE, is_open)
        .await
        .expect("the stream's head")
        .unwrap();
    assert_eq!(status, 200, "the session's event stream is open");
    let held = s
        .http
        .post(format!("{}/mcp", s.base))
        .bearer_auth(&s.rw_a)
        .header("x-test-hold", "1")
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-session-id", &sid)
        .header("mcp-protocol-version", "2025-11-25")
        .body(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "remember", "arguments": {"content": "Written while the server shuts down.", "scope": "core"}}}).to_string())
        .send();
    let held = tokio::spawn(async move {
        let r = held.await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    });
    tokio::time::timeout(PATIENCE, arrived.acquire())
        .await
        .expect("the call reached the server")
        .unwrap()
        .forget();
    let (store, mut running) = (s.store, s.running);
    running.signal();
    let base = s.base;
    tokio::time::timeout(PATIENCE, async {
        while reqwest::Client::new()
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the server stops taking connections");
    assert!(
        !running.is_finished(),
        "the server stopped with a call in flight"
    );
    open_gate.send(true).unwrap();
    let (status, text) = tokio::time::timeout(PATIENCE, held)
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("\"memory_id\"") && !text.contains("\"isError\":true"),
        "the call's result: {text}"
    );
    running.stopped().await;
    tokio::time::timeout(PATIENCE, stream)
        .await
        .expect("the server ended the event stream")
        .unwrap();
    let caller = zm_store::Caller::new(
        store
            .user_by_email("a@example.com")
            .await
            .unwrap()
            .unwrap()
            .id,
    );
    let out = zm_store::ToolService::new(store.clone())
        .call(
            &caller,
            zm_contracts::ToolName::Recall,
            &json!({"query": "shuts down"}),
        )
        .await
        .unwrap()
        .to_json();
    assert!(
        out.to_string()
            .contains("Written while the server shuts down"),
        "{out}"
    );
}

/// A REST write whose client hangs up while it waits for the database
/// still lands once the database frees up, as an MCP write does; a read
/// is dropped with its request. (SQLite's write lock is held by another
/// connection; the client gives up after half a second; the test then
/// waits, with a generous deadline, for the memory to appear.)
#[tokio::test]
async fn a_rest_write_whose_client_hangs_up_still_lands() {
    let s = start().await;
    let lock = common::hold_write_lock(s._dir.path()).await;
    let sent = common::impatient_client()
        .post(format!("{}/api/tools/remember", s.base))
        .bearer_auth(&s.rw_a)
        .json(&json!({"content": "The nightly backup runs at 03:00 UTC.", "scope": "personal", "kind": "fact"}))
        .send()
        .await;
    assert!(sent.is_err(), "the write waits on the lock: {sent:?}");
    common::release_write_lock(lock).await;
    common::until_landed("the write", || async {
        let (st, v) = s
            .post(
                "/api/tools/recall",
                Some(&s.rw_a),
                json!({"query": "nightly backup"}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
        v["memories"].as_array().is_some_and(|m| m.len() == 1)
    })
    .await;
    s.running.stop().await;
}

/// Authentication comes before the address: an anonymous request with an
/// encoded NUL in its path is a 401 with its challenge, an authenticated
/// one `validation_failed`.
#[tokio::test]
async fn an_anonymous_request_is_a_401_whatever_its_path_holds() {
    let s = start().await;
    let r = s
        .http
        .get(format!("{}/api/teams/a%00b", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    assert!(r.headers().contains_key("www-authenticate"));
    let (st, v) = s.get("/api/teams/a%00b", Some(&s.rw_a)).await;
    assert_eq!((st, code(&v)), (400, "validation_failed"), "{v}");
    s.running.stop().await;
}

/// The dashboard's sign-in form as a browser gets it: its pre-session
/// cookie (`name=value`) and the form's CSRF token.
async fn login_form(s: &Server) -> (String, String) {
    let r = s
        .http
        .get(format!("{}/login", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .find(|c| c.starts_with("zm_login="))
        .expect("the sign-in form's cookie")
        .to_string();
    let html = r.text().await.unwrap();
    let needle = "name=\"csrf\" value=\"";
    let start = html.find(needle).expect("a csrf field") + needle.len();
    let end = html[start..].find('"').unwrap() + start;
    (cookie, html[start..end].replace("&amp;", "&"))
}

/// The dashboard's sign-in counts an IPv6 client by its /48 too, as the
/// OAuth endpoints do: moving through the 65,536 /64s of one allocation
/// buys no fresh window; another allocation is another client.
#[tokio::test]
async fn dashboard_sign_ins_count_an_ipv6_client_by_its_48() {
    const LIMIT: u32 = 3;
    let s = start_configured(
        |c| {
            c.oauth_rate_max = LIMIT;
            c.oauth_rate_window = std::time::Duration::from_secs(60);
            c.trust_proxy = true;
        },
        |r, _| r,
    )
    .await;
    let (cookie, csrf) = login_form(&s).await;
    let sign_in = |ip: String, email: String| {
        let form = [
            ("csrf", csrf.clone()),
            ("next", "/".to_string()),
            ("email", email),
            ("password", "a wrong guess".to_string()),
        ];
        s.http
            .post(format!("{}/login", s.base))
            .header("cookie", cookie.as_str())
            .header("origin", s.base.as_str())
            .header("x-forwarded-for", ip)
            .form(&form)
            .send()
    };
    // A /48 gets eight clients' worth (`CLIENTS_PER_NETWORK`), each /64
    // once here: the 25th is refused.
    let network = LIMIT * 8;
    for i in 0..=network {
        let ip = format!("2001:db8:0:{i:x}::1");
        let r = sign_in(ip.clone(), format!("nobody{i}@example.com"))
            .await
            .unwrap();
        // A wrong email or password shows the form again (400); past the
        // limit, 429.
        let want = if i < network { 400 } else { 429 };
        assert_eq!(r.status().as_u16(), want, "from {ip}");
    }
    let r = sign_in("2001:db8:1::1".into(), "nobody@example.com".into())
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400, "another /48");
    s.running.stop().await;
}

/// Behind an https public URL every answer (the dashboard's, the OAuth
/// endpoints', the API's, a page that does not exist) carries
/// `Strict-Transport-Security` (a year, no
/// `includeSubDomains`: the domain may hold sites that are not ours);
/// over plain http, never.
#[tokio::test]
async fn strict_transport_security_is_sent_only_behind_https() {
    let hsts = |r: &reqwest::Response| {
        r.headers()
            .get("strict-transport-security")
            .map(|v| v.to_str().unwrap().to_string())
    };
    let s = start_configured(
        |c| c.public_url = "https://memory.example.com".into(),
        |r, _| r,
    )
    .await;
    for path in [
        "/login",
        "/",
        "/oauth/authorize",
        "/.well-known/oauth-authorization-server",
        "/api/contract",
        "/healthz",
        "/no-such-page",
    ] {
        let r = s
            .http
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(
            hsts(&r).as_deref(),
            Some("max-age=31536000"),
            "GET {path} ({})",
            r.status()
        );
    }
    s.running.stop().await;

    let s = start().await;
    for path in ["/login", "/", "/oauth/authorize", "/api/contract"] {
        let r = s
            .http
            .get(format!("{}{path}", s.base))
            .send()
            .await
            .unwrap();
        assert_eq!(hsts(&r), None, "GET {path} over plain http");
    }
    s.running.stop().await;
}

/// While the writes running to their end are at the cap, a user's write
/// is refused `rate_limited`; a request without a token, or with one that
/// names nobody, is still answered 401, and took no place meanwhile
/// (anonymous requests cannot fill them).
#[tokio::test]
async fn an_anonymous_write_takes_no_place_among_the_running_writes() {
    let s = start().await;
    let body =
        json!({"content": "The staging cluster is rebuilt on Sundays.", "scope": "personal"});
    let (status, _) = s.post("/api/tools/remember", None, body.clone()).await;
    assert_eq!(status, 401, "anonymous");
    // Every place taken by a write that never ends.
    let mut held = Vec::new();
    while let Some(h) = s.store.spawn_write(std::future::pending::<()>()) {
        held.push(h);
    }
    assert_eq!(held.len(), zm_store::store::WRITES_IN_FLIGHT_MAX);
    let (status, _) = s.post("/api/tools/remember", None, body.clone()).await;
    assert_eq!(
        status, 401,
        "anonymous, at the cap: answered, not refused for load"
    );
    let (status, v) = s
        .post("/api/tools/remember", Some("zm_pat_nobody"), body.clone())
        .await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (401, Some("unauthorized")),
        "a token that names nobody, at the cap: answered 401, not refused for load: {v}"
    );
    let (status, v) = s.post("/api/tools/remember", Some(&s.rw_a), body).await;
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (429, Some("rate_limited")),
        "{v}"
    );
    for h in held {
        h.abort();
    }
    // Places free again: the write is authenticated once and lands.
    let mut ok = None;
    for _ in 0..200 {
        let (status, v) = s
            .post(
                "/api/tools/remember",
                Some(&s.rw_a),
                json!({"content": "The staging cluster is rebuilt on Sundays.", "scope": "personal"}),
            )
            .await;
        if status != 429 {
            ok = Some((status, v));
            break;
        }
        tokio::task::yield_now().await;
    }
    let (status, v) = ok.expect("the places are given back once the writes are aborted");
    assert_eq!(status, 200, "{v}");
}
