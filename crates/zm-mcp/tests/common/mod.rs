//! The in-process harness: a fresh SQLite store in a tempdir, the
//! zero-memory MCP server on one end of an in-memory pipe and the rmcp
//! client on the other, plus the checks every tool result must pass.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
};
use rmcp::service::RunningService;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tempfile::TempDir;
use zm_contracts::{CATALOGUE, ToolName};
use zm_mcp::envelope::REMINDER;
use zm_mcp::{Identity, McpConfig, ZeroMemoryMcp};
use zm_store::{Caller, Store, sqlite_url};

/// The client name the default config caps.
pub(crate) const CAPPED: &str = "claude-code";
/// A client name nobody caps.
pub(crate) const UNCAPPED: &str = "zm-tests";

/// A well-formed memory id that never exists.
pub(crate) const NEVER: &str = "mem_0000000000000000.0000000000";

/// Which protocol era the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2025-11-25: `initialize`, a session.
    Legacy,
    /// 2026-07-28: `server/discover`, per-request `_meta`.
    Modern,
}

/// One store, one owner.
pub(crate) struct Env {
    pub dir: TempDir,
    pub store: Store,
    pub user: String,
}

impl Env {
    pub(crate) async fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&sqlite_url(&dir.path().join("zm.db")))
            .await
            .expect("open store");
        let user = store
            .create_user("owner@example.com", "correct horse battery staple")
            .await
            .expect("create owner")
            .id;
        Env { dir, store, user }
    }

    /// Another account in the same store.
    pub(crate) async fn add_user(&self, email: &str) -> String {
        self.store
            .create_user(email, "correct horse battery staple")
            .await
            .expect("create user")
            .id
    }

    pub(crate) fn caller(&self) -> Caller {
        Caller::new(self.user.clone())
    }

    /// A server for the owner.
    pub(crate) fn server(&self) -> ZeroMemoryMcp {
        self.server_for(&self.user)
    }

    pub(crate) fn server_for(&self, user: &str) -> ZeroMemoryMcp {
        ZeroMemoryMcp::new(
            zm_store::ToolService::new(self.store.clone()),
            Arc::new(McpConfig::default()),
            Identity::User(user.to_string()),
        )
    }

    /// A legacy-era connection of an uncapped client for the owner.
    pub(crate) async fn connect(&self) -> Client {
        Client::connect(self.server(), UNCAPPED, Era::Legacy).await
    }

    pub(crate) async fn connect_as(&self, user: &str) -> Client {
        Client::connect(self.server_for(user), UNCAPPED, Era::Legacy).await
    }

    pub(crate) async fn connect_with(&self, client_name: &str, era: Era) -> Client {
        Client::connect(self.server(), client_name, era).await
    }
}

/// A connected rmcp client.
pub(crate) struct Client {
    pub svc: RunningService<RoleClient, ClientConfig>,
    pub server: ZeroMemoryMcp,
    pub era: Era,
    pub client_name: String,
    /// Output schema validators, by tool name.
    validators: Mutex<HashMap<&'static str, Arc<jsonschema::Validator>>>,
}

impl Client {
    pub(crate) async fn connect(server: ZeroMemoryMcp, client_name: &str, era: Era) -> Client {
        Self::connect_at(server, client_name, era, None).await
    }

    /// A legacy-era connection that asks `initialize` for `version`.
    pub(crate) async fn connect_speaking(
        server: ZeroMemoryMcp,
        version: ProtocolVersion,
    ) -> Client {
        Self::connect_at(server, UNCAPPED, Era::Legacy, Some(version)).await
    }

    async fn connect_at(
        server: ZeroMemoryMcp,
        client_name: &str,
        era: Era,
        version: Option<ProtocolVersion>,
    ) -> Client {
        let (server_io, client_io) = tokio::io::duplex(1 << 20);
        let handler = server.clone();
        tokio::spawn(async move {
            if let Ok(running) = handler.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let mut config = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new(client_name, "1.0.0"),
        );
        if let Some(v) = version {
            config = config.with_protocol_version(v);
        }
        let lifecycle = match era {
            Era::Legacy => ClientLifecycleMode::Initialize,
            Era::Modern => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        };
        let svc = config
            .serve_with_lifecycle(client_io, lifecycle)
            .await
            .expect("client connects");
        Client {
            svc,
            server,
            era,
            client_name: client_name.to_string(),
            validators: Mutex::new(HashMap::new()),
        }
    }

    /// `tools/call`, as raw JSON; `Err` is a JSON-RPC error.
    pub(crate) async fn try_call(
        &self,
        name: &str,
        args: Value,
    ) -> Result<Value, rmcp::ServiceError> {
        let mut params = json!({ "name": name });
        if !args.is_null() {
            params["arguments"] = args;
        }
        let params: CallToolRequestParams = serde_json::from_value(params).expect("params");
        let result = self.svc.call_tool(params).await?;
        let result = serde_json::to_value(&result).expect("result serialises");
        // 2026-07-28 requires `resultType`; older revisions do not know it.
        match self.era {
            Era::Modern => assert_eq!(result["resultType"], "complete", "{name}: {result}"),
            Era::Legacy => assert!(result.get("resultType").is_none(), "{name}: {result}"),
        }
        Ok(result)
    }

    /// `tools/call` that must come back as a tool result (success or tool error).
    pub(crate) async fn call(&self, name: &str, args: Value) -> Value {
        match self.try_call(name, args.clone()).await {
            Ok(v) => v,
            Err(e) => panic!("{name}({args}) came back as a JSON-RPC error: {e}"),
        }
    }

    fn validator(&self, tool: &'static str) -> Arc<jsonschema::Validator> {
        let mut map = self.validators.lock().unwrap();
        map.entry(tool)
            .or_insert_with(|| {
                let spec = CATALOGUE.iter().find(|t| t.name == tool).expect("tool");
                Arc::new(jsonschema::validator_for(&(spec.output_schema)()).expect("output schema"))
            })
            .clone()
    }

    /// A successful call: checks the envelope and returns `structuredContent`.
    pub(crate) async fn ok(&self, name: &str, args: Value) -> Value {
        let result = self.call(name, args.clone()).await;
        self.check_success(name, &args, &result);
        result["structuredContent"].clone()
    }

    /// A successful call, returning the whole result.
    pub(crate) async fn ok_full(&self, name: &str, args: Value) -> Value {
        let result = self.call(name, args.clone()).await;
        self.check_success(name, &args, &result);
        result
    }

    /// The checks every success passes (PRODUCT.md §2.3).
    pub(crate) fn check_success(&self, name: &str, args: &Value, result: &Value) {
        let ctx = format!("{name}({args}) → {result:#}");
        assert_ne!(result["isError"], true, "unexpected tool error: {ctx}");
        let tool = ToolName::parse(name).expect("known tool");
        let structured = &result["structuredContent"];
        assert!(structured.is_object(), "no structuredContent: {ctx}");
        // Valid against the tool's outputSchema.
        let validator = self.validator(tool.as_str());
        let errors: Vec<String> = validator
            .iter_errors(structured)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "structuredContent breaks the outputSchema of {name}: {errors:?}\n{ctx}"
        );
        // The compact JSON mirror first.
        let content = result["content"].as_array().expect("content array");
        assert!(!content.is_empty(), "empty content: {ctx}");
        assert_eq!(content[0]["type"], "text", "first block not text: {ctx}");
        let first = content[0]["text"].as_str().unwrap();
        let mirror: Value = serde_json::from_str(first).expect("first block is JSON");
        assert_eq!(&mirror, structured, "mirror differs: {ctx}");
        assert!(!first.contains('\n'), "mirror is not compact: {ctx}");
        // Footers on the three session tools, and only there.
        let last = content.last().unwrap();
        match tool {
            ToolName::Remember | ToolName::Recall | ToolName::BuildContext => {
                assert!(content.len() >= 2, "no footer: {ctx}");
                assert_eq!(last["type"], "text", "footer not text: {ctx}");
                let footer = last["text"].as_str().unwrap();
                assert!(footer.contains("session:"), "no session line: {ctx}");
                if tool != ToolName::Remember {
                    assert!(footer.ends_with(REMINDER), "no reminder: {ctx}");
                } else {
                    assert!(!footer.contains("--- reminder ---"), "{ctx}");
                }
                // The session object the footer talks about.
                assert!(structured["session"].is_object(), "no session: {ctx}");
                assert!(
                    structured["session"]["attached_project"].is_string()
                        || structured["session"]["attached_project"].is_null(),
                    "{ctx}"
                );
            }
            _ => assert_eq!(content.len(), 1, "unexpected extra blocks: {ctx}"),
        }
        // Resource links on reads: one per surfaced memory, by rank.
        let links: Vec<&Value> = content
            .iter()
            .filter(|b| b["type"] == "resource_link")
            .collect();
        let (ranked, flat, flat_priority) = match tool {
            ToolName::Recall => ("memories", "related", 0.2),
            ToolName::BuildContext => ("memories", "linked_memories", 0.3),
            _ => {
                assert!(links.is_empty(), "links on a non-read tool: {ctx}");
                return;
            }
        };
        let ranked_ids: Vec<&str> = structured[ranked]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        let flat_ids: Vec<&str> = structured[flat]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            links.len(),
            ranked_ids.len() + flat_ids.len(),
            "one link per surfaced memory: {ctx}"
        );
        let codex = self.client_name.to_lowercase().contains("codex");
        for (i, id) in ranked_ids.iter().chain(flat_ids.iter()).enumerate() {
            let l = links[i];
            assert_eq!(l["uri"], format!("zm://memory/{id}"), "{ctx}");
            assert_eq!(l["name"], *id, "{ctx}");
            assert_eq!(l["mimeType"], "application/json", "{ctx}");
            assert_eq!(l["annotations"]["audience"], json!(["assistant"]), "{ctx}");
            let p = l["annotations"]["priority"].as_f64().unwrap();
            let want = if i < ranked_ids.len() {
                (1.0 - i as f64 * 0.1).max(0.1)
            } else {
                flat_priority
            };
            let want = if codex { want.round() } else { want };
            // rmcp keeps priorities as f32: compare at f32 precision.
            assert!((p - want).abs() < 1e-6, "priority {p} != {want}: {ctx}");
        }
        // Links sit between the mirror and the footer.
        if !links.is_empty() {
            assert_eq!(content[1]["type"], "resource_link", "{ctx}");
        }
    }

    /// A tool error with `code`: returns the `error` object.
    pub(crate) async fn err(&self, name: &str, args: Value, code: &str) -> Value {
        let result = self.call(name, args.clone()).await;
        check_error(&result, code, &format!("{name}({args})"))
    }
}

/// The checks every tool error passes: `isError`, the body as the first text
/// block, no `structuredContent` (it would have to match the tool's
/// `outputSchema`), the expected code.
pub(crate) fn check_error(result: &Value, code: &str, what: &str) -> Value {
    let ctx = format!("{what} → {result:#}");
    assert_eq!(result["isError"], true, "expected a tool error: {ctx}");
    let content = result["content"].as_array().expect("content");
    assert_eq!(content[0]["type"], "text", "{ctx}");
    let body: Value =
        serde_json::from_str(content[0]["text"].as_str().unwrap()).expect("first block is JSON");
    let err = body["error"].as_object().expect("{\"error\": {...}}");
    assert_eq!(err["code"], code, "wrong code: {ctx}");
    assert!(err["message"].is_string(), "{ctx}");
    for k in err.keys() {
        assert!(
            ["code", "message", "details"].contains(&k.as_str()),
            "stray key {k}: {ctx}"
        );
    }
    assert!(
        result.get("structuredContent").is_none(),
        "a tool error carries no structuredContent: {ctx}"
    );
    body["error"].clone()
}

/// The `details.fields[*].path`s of a `validation_failed` error.
pub(crate) fn field_paths(err: &Value) -> Vec<String> {
    err["details"]["fields"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|x| x["path"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The footer (last text block) of a result.
pub(crate) fn footer(result: &Value) -> String {
    result["content"]
        .as_array()
        .and_then(|c| c.last())
        .and_then(|b| b["text"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// A fake AWS access key id, assembled at run time.
pub(crate) fn fake_secret() -> String {
    format!("AKIA{}", "QWERTYUIOPASDFGH")
}
