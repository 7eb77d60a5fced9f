//! The MCP surface through a real rmcp client, in process: the handshake of
//! both eras, `tools/list`, resources, prompts and the instructions budget.

mod common;

use common::*;
use rmcp::model::{GetPromptRequestParams, Implementation, ReadResourceRequestParams};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use zm_contracts::Access;
use zm_contracts::catalogue::{DESCRIPTION_BUDGET, tool};
use zm_contracts::{CATALOGUE, CONTRACT_VERSION, MemoryId, PromoteRuleInput};
use zm_mcp::instructions::{INSTRUCTION_BUDGET, LOCAL_UNATTACHED_NOTE, ROUTER_HEAD};

fn peer_info(c: &Client) -> Value {
    serde_json::to_value(c.svc.peer_info().expect("peer info").as_ref()).unwrap()
}

fn check_identity(info: &Value, what: &str) {
    assert_eq!(
        info["capabilities"]["experimental"]["zero-memory/contract"]["version"], CONTRACT_VERSION,
        "{what}: {info:#}"
    );
    let server = &info["serverInfo"];
    assert_eq!(server["name"], "zero-memory", "{what}: {info:#}");
    assert!(
        server["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{what}: {info:#}"
    );
    assert_eq!(server["version"], env!("CARGO_PKG_VERSION"), "{what}");
    for cap in ["tools", "resources", "prompts"] {
        assert!(info["capabilities"][cap].is_object(), "{what}: no {cap}");
    }
    let text = info["instructions"].as_str().expect("instructions");
    assert!(text.starts_with(ROUTER_HEAD), "{what}");
}

#[tokio::test]
async fn initialize_announces_the_contract_server_and_instructions() {
    let env = Env::new().await;
    let uncapped = env.connect_with(UNCAPPED, Era::Legacy).await;
    let info = peer_info(&uncapped);
    check_identity(&info, "initialize, uncapped");
    assert_eq!(info["protocolVersion"], "2025-11-25");
    let text = info["instructions"].as_str().unwrap();
    // The in-process server is a local one (as stdio's) started without
    // a project: its note says so, not that it cannot see the workspace.
    assert!(
        text.contains(LOCAL_UNATTACHED_NOTE),
        "uncapped gets the note"
    );
    let attached = Client::connect(
        env.server()
            .with_attached_project(Some("proj.surface.attached".into())),
        UNCAPPED,
        Era::Legacy,
    )
    .await;
    let info = peer_info(&attached);
    let text = info["instructions"].as_str().unwrap();
    assert!(
        text.contains("already attached to proj.surface.attached"),
        "a local server names the project it attached: {text}"
    );
    assert!(!text.contains(LOCAL_UNATTACHED_NOTE));

    let capped = env.connect_with(CAPPED, Era::Legacy).await;
    let info = peer_info(&capped);
    check_identity(&info, "initialize, claude-code");
    let text = info["instructions"].as_str().unwrap();
    assert!(
        text.chars().count() <= INSTRUCTION_BUDGET,
        "{}",
        text.chars().count()
    );
    assert!(!text.contains("PROJECT ATTACHMENT"));
}

#[tokio::test]
async fn discover_announces_the_same_contract() {
    let env = Env::new().await;
    // The rmcp client in the 2026-07-28 era starts with server/discover.
    let c = env.connect_with(CAPPED, Era::Modern).await;
    let info = peer_info(&c);
    check_identity(&info, "discover (client startup)");
    assert_eq!(info["protocolVersion"], "2026-07-28");
    let text = info["instructions"].as_str().unwrap();
    assert!(
        text.chars().count() <= INSTRUCTION_BUDGET,
        "claude-code over discover"
    );
    // It works for requests afterwards, carrying per-request _meta.
    let tools = c.svc.list_all_tools().await.expect("tools/list");
    assert_eq!(tools.len(), 18);
    // An explicit server/discover from an uncapped client.
    let mut meta = rmcp::model::RequestMetaObject::new();
    meta.set_protocol_version(rmcp::model::ProtocolVersion::V_2026_07_28);
    meta.set_client_info(Implementation::new(UNCAPPED, "1.0.0"));
    meta.set_client_capabilities(Default::default());
    let d = c.svc.discover(meta).await.expect("server/discover");
    let d = serde_json::to_value(&d).unwrap();
    assert_eq!(
        d["capabilities"]["experimental"]["zero-memory/contract"]["version"],
        CONTRACT_VERSION
    );
    let versions: Vec<&str> = d["supportedVersions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(versions.contains(&"2026-07-28") && versions.contains(&"2025-11-25"));
}

/// The 2026-07-28 wire, byte for byte: raw JSON-RPC lines on a pipe, no
/// `initialize`, `_meta` on every request.
#[tokio::test]
async fn discover_and_stateless_calls_on_the_raw_wire() {
    use rmcp::ServiceExt;
    let env = Env::new().await;
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let server = env.server();
    tokio::spawn(async move {
        if let Ok(r) = server.serve(server_io).await {
            let _ = r.waiting().await;
        }
    });
    let (read, mut write) = tokio::io::split(client_io);
    let mut lines = BufReader::new(read).lines();
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "claude-code", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    // Send one request; return its response line, raw.
    let mut send_raw = async |id: u64, method: &str, params: Value| -> String {
        let mut params = params;
        params["_meta"] = meta.clone();
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        loop {
            let l = lines.next_line().await.unwrap().expect("a response line");
            let v: Value = serde_json::from_str(&l).unwrap();
            if v["id"] == id {
                return l;
            }
        }
    };
    macro_rules! send {
        ($($arg:expr),* $(,)?) => {
            serde_json::from_str::<Value>(&send_raw($($arg),*).await).unwrap()
        };
    }
    let d = send!(1, "server/discover", json!({}));
    let r = &d["result"];
    assert_eq!(
        r["capabilities"]["experimental"]["zero-memory/contract"]["version"], CONTRACT_VERSION,
        "{d:#}"
    );
    // rmcp puts serverInfo in the result's `_meta` (the 2026-07-28 form).
    let server_info = if r["serverInfo"].is_object() {
        &r["serverInfo"]
    } else {
        &r["_meta"]["io.modelcontextprotocol/serverInfo"]
    };
    assert_eq!(server_info["name"], "zero-memory", "{d:#}");
    let text = r["instructions"]
        .as_str()
        .expect("instructions in discover");
    assert!(text.chars().count() <= INSTRUCTION_BUDGET);

    let list = send!(2, "tools/list", json!({}));
    assert_eq!(list["result"]["tools"].as_array().unwrap().len(), 18);
    // Every list is one page: a cursor the server never issued is refused.
    for (id, method) in [
        (20, "tools/list"),
        (21, "resources/list"),
        (22, "prompts/list"),
    ] {
        let paged = send!(id, method, json!({"cursor": "bogus"}));
        assert_eq!(paged["error"]["code"], -32602, "{method}: {paged:#}");
    }

    let bad = send!(
        3,
        "tools/call",
        json!({"name": "remember", "arguments": {"content": ""}}),
    );
    assert_eq!(bad["result"]["resultType"], "complete", "{bad:#}");
    let err = check_error(&bad["result"], "validation_failed", "raw remember");
    assert!(field_paths(&err).contains(&"content".to_string()));

    // Priorities travel as written (rmcp keeps them as f32; the wire shows 0.9).
    for (i, n) in [(5, "one"), (6, "two")] {
        let r = send!(
            i,
            "tools/call",
            json!({"name": "remember", "arguments": {"content": format!("Wire note {n} about zebra crossings."), "scope": "personal"}}),
        );
        assert_eq!(r["result"]["isError"], false, "{r:#}");
    }
    let raw = send_raw(
        7,
        "tools/call",
        json!({"name": "recall", "arguments": {"query": "zebra crossings"}}),
    )
    .await;
    let recall: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(recall["result"]["resultType"], "complete", "{raw}");
    assert!(raw.contains(r#""priority":1.0"#), "{raw}");
    assert!(raw.contains(r#""priority":0.9"#), "{raw}");
    assert!(!raw.contains("0.8999"), "{raw}");

    // Every 2026-07-28 result says it is complete.
    let link = recall["result"]["content"][1]["uri"]
        .as_str()
        .unwrap()
        .to_string();
    let read = send!(8, "resources/read", json!({"uri": link}));
    assert_eq!(read["result"]["resultType"], "complete", "{read:#}");
    assert!(read["result"]["ttlMs"].is_u64(), "{read:#}");
    assert!(read["result"]["cacheScope"].is_string(), "{read:#}");
    let prompt = send!(9, "prompts/get", json!({"name": "brief"}));
    assert_eq!(prompt["result"]["resultType"], "complete", "{prompt:#}");

    let unknown = send!(4, "tools/call", json!({"name": "nope", "arguments": {}}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown:#}");
    assert!(unknown.get("result").is_none());
}

/// The 2025-11-25 stdio wire through `serve_io`: a notification before
/// `initialize` (a client's cancelled probe, also after the probe was
/// answered) is dropped, not the end of the session; an `initialize` sent again does not change the era the
/// handshake negotiated (`ping` is a 2025 method).
#[tokio::test]
async fn a_stray_notification_and_a_second_initialize_change_nothing() {
    let env = Env::new().await;
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let server = env.server();
    let (server_read, server_write) = tokio::io::split(server_io);
    tokio::spawn(zm_mcp::serve_io(server, server_read, server_write));
    let (read, mut write) = tokio::io::split(client_io);
    let mut lines = BufReader::new(read).lines();
    let mut send = async |line: Value| -> Option<Value> {
        write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        let id = line.get("id")?.clone();
        loop {
            let l = lines.next_line().await.unwrap().expect("a response line");
            let v: Value = serde_json::from_str(&l).unwrap();
            if v["id"] == id {
                return Some(v);
            }
        }
    };
    // A dual-era client's probe, answered, then cancelled all the same
    // (its answer came too late for the client) before it falls back.
    let discover = send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "codex", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }}}),
    )
    .await
    .unwrap();
    assert!(discover["result"].is_object(), "{discover:#}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 0, "reason": "timeout"}})).await;
    let init = |id: u64, version: &str| json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "codex", "version": "1"}}});
    let first = send(init(1, "2025-11-25")).await.unwrap();
    assert_eq!(
        first["result"]["protocolVersion"], "2025-11-25",
        "{first:#}"
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let ping = send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}))
        .await
        .unwrap();
    assert_eq!(ping["result"], json!({}), "{ping:#}");
    send(init(3, "2099-01-01")).await.unwrap();
    let ping = send(json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}))
        .await
        .unwrap();
    assert_eq!(ping["result"], json!({}), "still the 2025 era: {ping:#}");
}

#[tokio::test]
async fn tools_list_is_the_catalogue_in_both_eras() {
    let env = Env::new().await;
    for era in [Era::Legacy, Era::Modern] {
        let c = env.connect_with(UNCAPPED, era).await;
        let listed = c.svc.list_tools(None).await.expect("tools/list");
        let tools: Vec<Value> = listed
            .tools
            .iter()
            .map(|t| serde_json::to_value(t).unwrap())
            .collect();
        assert_eq!(tools.len(), 18, "{era:?}");
        for (t, spec) in tools.iter().zip(CATALOGUE) {
            let what = format!("{era:?} {}", spec.name);
            assert_eq!(t["name"], spec.name, "order: {what}");
            assert_eq!(t["title"], spec.title, "{what}");
            let desc = t["description"].as_str().unwrap();
            assert_eq!(desc, spec.description, "{what}");
            assert!(
                desc.len() <= DESCRIPTION_BUDGET,
                "{what}: {} bytes",
                desc.len()
            );
            let a = &t["annotations"];
            for hint in [
                "readOnlyHint",
                "destructiveHint",
                "idempotentHint",
                "openWorldHint",
            ] {
                assert!(a[hint].is_boolean(), "{what}: {hint} missing");
            }
            assert_eq!(a["openWorldHint"], false, "{what}");
            assert_eq!(a["readOnlyHint"], spec.annotations.read_only_hint, "{what}");
            assert_eq!(
                a["destructiveHint"], spec.annotations.destructive_hint,
                "{what}"
            );
            assert_eq!(
                a["idempotentHint"], spec.annotations.idempotent_hint,
                "{what}"
            );
            assert_eq!(
                a["readOnlyHint"] == true,
                spec.access == Access::Read,
                "{what}: readOnly iff a read tool"
            );
            assert_eq!(t["inputSchema"], (spec.input_schema)(), "{what}");
            assert_eq!(t["outputSchema"], (spec.output_schema)(), "{what}");
        }
        // The destructive set is exactly these.
        let destructive: Vec<&str> = tools
            .iter()
            .filter(|t| t["annotations"]["destructiveHint"] == true)
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            destructive,
            ["forget", "resolve_conflict", "delete_account"],
            "{era:?}"
        );
    }
}

async fn remember(c: &Client, content: &str, scope: &str) -> String {
    let out = c
        .ok("remember", json!({"content": content, "scope": scope}))
        .await;
    out["memory_id"].as_str().unwrap().to_string()
}

fn resource_text(r: &rmcp::model::ReadResourceResult) -> Value {
    let v = serde_json::to_value(r).unwrap();
    let contents = v["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 1, "{v:#}");
    assert_eq!(contents[0]["mimeType"], "application/json");
    serde_json::from_str(contents[0]["text"].as_str().unwrap()).unwrap()
}

async fn read(c: &Client, uri: &str) -> Result<Value, rmcp::ServiceError> {
    c.svc
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .map(|r| resource_text(&r))
}

fn rpc_error(e: rmcp::ServiceError) -> rmcp::model::ErrorData {
    match e {
        rmcp::ServiceError::McpError(e) => e,
        other => panic!("expected a JSON-RPC error, got {other}"),
    }
}

#[tokio::test]
async fn resources_memory_template_and_rules() {
    let env = Env::new().await;
    let other = env.add_user("other@example.com").await;
    for era in [Era::Legacy, Era::Modern] {
        let c = env.connect_with(UNCAPPED, era).await;
        let templates = c
            .svc
            .list_all_resource_templates()
            .await
            .expect("templates");
        let t = serde_json::to_value(&templates).unwrap();
        assert!(
            t.as_array()
                .unwrap()
                .iter()
                .any(|x| x["uriTemplate"] == "zm://memory/{id}"
                    && x["mimeType"] == "application/json"),
            "{t:#}"
        );
        let listed = serde_json::to_value(c.svc.list_all_resources().await.unwrap()).unwrap();
        assert!(
            listed
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["uri"] == "zm://rules"),
            "{listed:#}"
        );

        // A long memory reads back whole, though recall shows an excerpt.
        let long = format!(
            "The deployment runbook for the billing service. {}",
            "Step: check the canary dashboards before widening the rollout. ".repeat(60)
        );
        let id = remember(&c, &long, "personal").await;
        let row = read(&c, &format!("zm://memory/{id}")).await.expect("read");
        assert_eq!(row["id"], id);
        assert_eq!(row["content"], long.trim());
        for key in [
            "kind",
            "scope",
            "visibility",
            "author_kind",
            "agent_name",
            "source",
            "superseded_by",
            "invalidated_at",
            "created_at",
            "content_original",
            "content_lang",
        ] {
            assert!(row.get(key).is_some(), "row lacks {key}: {row:#}");
        }
        let recall = c
            .ok("recall", json!({"query": "billing canary rollout"}))
            .await;
        let hit = &recall["memories"][0];
        assert_eq!(hit["id"], id);
        assert!(hit["content"].as_str().unwrap().len() < long.len());

        // Another user's memory and a never-existing one read the same.
        let theirs = env.connect_as(&other).await;
        let foreign = remember(&theirs, "Another user's private note.", "personal").await;
        let e1 = rpc_error(
            read(&c, &format!("zm://memory/{foreign}"))
                .await
                .unwrap_err(),
        );
        let e2 = rpc_error(read(&c, &format!("zm://memory/{NEVER}")).await.unwrap_err());
        assert_eq!(e1.code, e2.code, "{era:?}");
        // Resource-not-found is -32002 until 2026-07-28, -32602 from it.
        let not_found = match era {
            Era::Legacy => -32002,
            Era::Modern => -32602,
        };
        assert_eq!(e1.code.0, not_found, "{era:?}: {e1:?}");
        assert_eq!(
            e1.message.replace(&foreign, "<id>"),
            e2.message.replace(NEVER, "<id>"),
            "{era:?}"
        );
        assert!(e1.message.contains("not found"), "{}", e1.message);
        // A malformed id is refused.
        let e3 = rpc_error(read(&c, "zm://memory/not-an-id").await.unwrap_err());
        assert!(e3.message.starts_with("Not a memory id"), "{}", e3.message);
        assert_eq!(e3.code.0, -32602, "{era:?}: {e3:?}");
        let e4 = rpc_error(
            read(&c, "zm://memory/ent_0123456789abcdef.0123456789")
                .await
                .unwrap_err(),
        );
        assert!(e4.message.starts_with("Not a memory id"), "{}", e4.message);
    }

    // zm://rules: promoted rules, pinned first.
    let c = env.connect().await;
    let caller = env.caller();
    let mut ids = Vec::new();
    for text in [
        "Always run the linters before pushing.",
        "Never force-push to main.",
    ] {
        let id = remember(&c, text, "personal").await;
        zm_store::ToolService::new(env.store.clone())
            .run::<tool::PromoteRule>(
                &caller,
                PromoteRuleInput {
                    memory_id: MemoryId::parse(&id).unwrap(),
                    applies_scope: None,
                    rule_text: None,
                    force: None,
                },
            )
            .await
            .expect("promote");
        ids.push(id);
    }
    env.store
        .pin_rule(&caller, &ids[0], true)
        .await
        .expect("pin");
    let rules = read(&c, "zm://rules").await.expect("rules");
    assert_eq!(
        rules,
        json!({"rules": [
            {"text": "Always run the linters before pushing.", "pinned": true},
            {"text": "Never force-push to main.", "pinned": false},
        ]})
    );
}

#[tokio::test]
async fn prompt_brief() {
    let env = Env::new().await;
    let c = env.connect().await;
    let prompts = serde_json::to_value(c.svc.list_all_prompts().await.unwrap()).unwrap();
    let brief = prompts
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "brief")
        .expect("brief prompt");
    assert_eq!(brief["arguments"][0]["name"], "topic");
    assert_eq!(brief["arguments"][0]["required"], false);

    let params: GetPromptRequestParams =
        serde_json::from_value(json!({"name": "brief", "arguments": {"topic": "the billing API"}}))
            .unwrap();
    let got = serde_json::to_value(c.svc.get_prompt(params).await.expect("prompts/get")).unwrap();
    let text = got["messages"][0]["content"]["text"].as_str().unwrap();
    assert!(text.contains("build_context") && text.contains("the billing API"));
    assert!(text.contains("zm://memory/{id}"));
    let params: GetPromptRequestParams = serde_json::from_value(json!({"name": "brief"})).unwrap();
    let got = serde_json::to_value(c.svc.get_prompt(params).await.unwrap()).unwrap();
    assert!(
        got["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("the current project and its active work")
    );
    let params: GetPromptRequestParams = serde_json::from_value(json!({"name": "nope"})).unwrap();
    let e = rpc_error(c.svc.get_prompt(params).await.unwrap_err());
    assert_eq!(e.code.0, -32602, "{e:?}");
}

/// `n` long (≥ 400 characters) user-layer rules promoted from personal memories.
async fn promote_rules(env: &Env, n: usize, pin: usize) -> Vec<String> {
    let caller = env.caller();
    let mut texts = Vec::new();
    for i in 0..n {
        let out = zm_store::ToolService::new(env.store.clone())
            .call(
                &caller,
                zm_contracts::ToolName::Remember,
                &json!({"content": format!("rulesource{i:04}"), "scope": "personal"}),
            )
            .await
            .expect("remember")
            .to_json();
        let id = out["memory_id"].as_str().unwrap().to_string();
        let text = format!(
            "Standing rule {i:03}: {}",
            "when touching the storage layer, write the migration for both backends, run the behaviour suite on SQLite and PostgreSQL, and describe the change in the changelog before asking for review. "
                .repeat(3)
        )
        .trim()
        .to_string();
        assert!(text.chars().count() >= 400);
        zm_store::ToolService::new(env.store.clone())
            .run::<tool::PromoteRule>(
                &caller,
                PromoteRuleInput {
                    memory_id: MemoryId::parse(&id).unwrap(),
                    applies_scope: None,
                    rule_text: Some(text.clone()),
                    force: None,
                },
            )
            .await
            .expect("promote");
        if i < pin {
            env.store.pin_rule(&caller, &id, true).await.expect("pin");
        }
        texts.push(text);
    }
    texts
}

#[tokio::test]
async fn instructions_for_0_1_12_and_500_rules() {
    for (n, pin) in [(0, 0), (1, 0), (12, 2), (500, 5)] {
        let env = Env::new().await;
        let texts = promote_rules(&env, n, pin).await;
        let delivered = env.store.user_rules(&env.caller()).await.unwrap();
        for era in [Era::Legacy, Era::Modern] {
            let what = format!("{n} rules, {era:?}");
            // Capped: under budget, no rule text, the router head intact.
            let capped = env.connect_with(CAPPED, era).await;
            let info = peer_info(&capped);
            let text = info["instructions"].as_str().unwrap();
            assert!(
                text.chars().count() <= INSTRUCTION_BUDGET,
                "{what}: {}",
                text.chars().count()
            );
            assert!(text.starts_with(ROUTER_HEAD), "{what}");
            for t in &texts {
                assert!(!text.contains(t.as_str()), "{what}: rule text leaked");
                assert!(!text.contains(&t[..40]), "{what}: rule text leaked");
            }
            if n > 0 {
                assert!(
                    text.contains(&format!("{} standing rule(s)", delivered.len())),
                    "{what}: {text}"
                );
            } else {
                assert!(!text.contains("OWNER RULES"), "{what}");
            }

            // Uncapped: every delivered rule, whole, pinned first.
            let uncapped = env.connect_with(UNCAPPED, era).await;
            let info = peer_info(&uncapped);
            let text = info["instructions"].as_str().unwrap();
            assert!(text.contains(LOCAL_UNATTACHED_NOTE), "{what}");
            if n == 0 {
                assert!(!text.contains("OWNER RULES"), "{what}");
                continue;
            }
            assert!(
                text.contains(&format!("{} standing instruction(s)", delivered.len())),
                "{what}"
            );
            for (i, r) in delivered.iter().enumerate() {
                let line = format!(
                    "\n{}.{} {}",
                    i + 1,
                    if r.pinned { " [pinned]" } else { "" },
                    r.text
                );
                assert!(text.contains(&line), "{what}: rule {i} missing");
            }
            if n <= 12 {
                // Below the per-layer cap every promoted rule is delivered.
                for t in &texts {
                    assert!(text.contains(t.as_str()), "{what}: a rule is missing");
                }
            } else {
                // Pinned rules lead; unpinned ones are capped like a briefing's.
                assert!(delivered.iter().take(pin).all(|r| r.pinned), "{what}");
                assert_eq!(delivered.len(), pin + 12, "{what}");
            }
        }
    }
}
