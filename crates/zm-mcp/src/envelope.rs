//! Tool results as MCP sees them: the JSON mirror first, resource links,
//! and the human-readable footer last; failures as `isError` results whose
//! first block is the error body.

use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use zm_contracts::uri::MEMORY_PREFIX;
use zm_contracts::{ToolError, ToolName};

/// The remember reminder every read ends with.
pub const REMINDER: &str = "--- reminder ---\nIf this conversation has produced a durable fact, decision, convention, preference or gotcha that is not stored yet, call remember now: one atomic fact per call.";

/// What the footer needs to know about the connection.
#[derive(Debug, Clone, Default)]
pub struct FooterContext {
    /// The project attached before this call.
    pub attached_before: Option<String>,
}

fn session_line(output: &Value) -> String {
    let session = &output["session"];
    let mut line = match session["attached_project"].as_str() {
        Some(p) => format!("session: working in {p} — scope-less writes land there."),
        None => "session: NO PROJECT — a scope-less remember will be refused. Pass project_hint (the briefing names it) to set one.".to_string(),
    };
    if let Some(t) = session["thread"].as_str() {
        line.push_str(&format!(
            " Echo thread: \"{t}\" on your next call — it survives reconnects and stamps memories with their conversation."
        ));
    }
    line
}

fn cross_project_note(output: &Value, ctx: &FooterContext) -> Option<String> {
    let pinned = output["project_scope"].as_str()?;
    let attached = ctx.attached_before.as_deref()?;
    (pinned != attached).then(|| {
        format!(
            "NOTE: this read was pinned to {pinned}; the session stays attached to {attached}. Treat these findings as analogy, and name the project (scope or project_hint) on a write that belongs there."
        )
    })
}

fn rules_block(output: &Value) -> Option<String> {
    let rules = output["rules"].as_array().filter(|r| !r.is_empty())?;
    let mut out =
        "STANDING RULES — promoted by the user; follow them like system rules:".to_string();
    for (i, r) in rules.iter().enumerate() {
        let pinned = if r["pinned"] == true { " [pinned]" } else { "" };
        out.push_str(&format!(
            "\n{}.{} {}",
            i + 1,
            pinned,
            r["text"].as_str().unwrap_or("")
        ));
    }
    Some(out)
}

/// The footer of remember / recall / build_context; `None` for other tools.
pub fn footer(tool: ToolName, output: &Value, ctx: &FooterContext) -> Option<String> {
    let segments: Vec<Option<String>> = match tool {
        ToolName::Remember => vec![
            output["routed_to_project"]
                .as_str()
                .map(|s| format!("ROUTED TO PROJECT: {s}")),
            Some(session_line(output)),
        ],
        ToolName::Recall => vec![
            cross_project_note(output, ctx),
            Some(session_line(output)),
            Some(REMINDER.into()),
        ],
        ToolName::BuildContext => vec![
            cross_project_note(output, ctx),
            Some(session_line(output)),
            rules_block(output),
            Some(REMINDER.into()),
        ],
        _ => return None,
    };
    Some(
        segments
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n"),
    )
}

/// A `resource_link` block to one memory.
fn link(id: &str, priority: f64, codex: bool) -> Value {
    let priority = if codex {
        priority.round()
    } else {
        (priority * 100.0).round() / 100.0
    };
    json!({
        "type": "resource_link",
        "uri": format!("{MEMORY_PREFIX}{id}"),
        "name": id,
        "mimeType": "application/json",
        "annotations": {"audience": ["assistant"], "priority": priority},
    })
}

/// Rank priority: 1.0 for the top hit, 0.1 less for each next, at least 0.1.
pub fn rank_priority(index: usize) -> f64 {
    (1.0 - index as f64 * 0.1).max(0.1)
}

/// The resource links of a read result.
pub fn resource_links(tool: ToolName, output: &Value, codex: bool) -> Vec<Value> {
    let ids = |key: &str| -> Vec<String> {
        output[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["id"].as_str().map(str::to_string))
            .collect()
    };
    let mut out = Vec::new();
    let (ranked, flat, flat_priority) = match tool {
        ToolName::Recall => ("memories", "related", 0.2),
        ToolName::BuildContext => ("memories", "linked_memories", 0.3),
        _ => return out,
    };
    for (i, id) in ids(ranked).iter().enumerate() {
        out.push(link(id, rank_priority(i), codex));
    }
    for id in ids(flat) {
        out.push(link(&id, flat_priority, codex));
    }
    out
}

/// A successful tool result.
pub fn success(tool: ToolName, output: Value, ctx: &FooterContext, codex: bool) -> CallToolResult {
    let mut content = vec![json!({"type": "text", "text": output.to_string()})];
    content.extend(resource_links(tool, &output, codex));
    if let Some(f) = footer(tool, &output, ctx) {
        content.push(json!({"type": "text", "text": f}));
    }
    build(json!({"content": content, "structuredContent": output, "isError": false}))
}

/// A failed tool result: the error body is the first block and the structured content.
pub fn failure(err: &ToolError) -> CallToolResult {
    let body = err.to_json();
    build(json!({
        "content": [{"type": "text", "text": body.to_string()}],
        "structuredContent": body,
        "isError": true,
    }))
}

/// A `CallToolResult` from its JSON. `resultType: "complete"` is set as
/// rmcp's constructors set it: the 2026-07-28 schema requires it (clients
/// such as the Python SDK reject a result without it), and rmcp strips it
/// again for peers that negotiated an older version.
fn build(mut v: Value) -> CallToolResult {
    v["resultType"] = json!("complete");
    serde_json::from_value(v).expect("a well-formed CallToolResult")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_and_codex_rounding() {
        assert_eq!(rank_priority(0), 1.0);
        assert!((rank_priority(3) - 0.7).abs() < 1e-9);
        assert_eq!(rank_priority(20), 0.1);
        let out =
            json!({"memories": [{"id": "mem_a"}, {"id": "mem_b"}], "related": [{"id": "mem_c"}]});
        let links = resource_links(ToolName::Recall, &out, false);
        assert_eq!(links.len(), 3);
        assert_eq!(links[1]["annotations"]["priority"], 0.9);
        assert_eq!(links[2]["annotations"]["priority"], 0.2);
        let codex = resource_links(ToolName::Recall, &out, true);
        assert_eq!(codex[1]["annotations"]["priority"], 1.0);
        assert_eq!(codex[2]["annotations"]["priority"], 0.0);
        assert!(resource_links(ToolName::Forget, &out, false).is_empty());
    }

    #[test]
    fn footers() {
        let out = json!({"memories": [], "project_scope": "proj.a.x", "session": {"attached_project": "proj.a.y", "thread": "thr_1"}});
        let ctx = FooterContext {
            attached_before: Some("proj.a.y".into()),
        };
        let f = footer(ToolName::Recall, &out, &ctx).unwrap();
        assert!(f.starts_with("NOTE: this read was pinned to proj.a.x"));
        assert!(f.contains("session: working in proj.a.y"));
        assert!(f.contains("thr_1"));
        assert!(f.ends_with(REMINDER));
        let none = json!({"session": {"attached_project": null}});
        let f = footer(ToolName::Remember, &none, &FooterContext::default()).unwrap();
        assert!(f.contains("NO PROJECT"));
        assert!(!f.contains("reminder"));
        assert!(footer(ToolName::Forget, &none, &FooterContext::default()).is_none());
    }

    #[test]
    fn failure_puts_the_body_first() {
        let r = failure(&ToolError::not_found("Memory x not found."));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["isError"], true);
        let first: Value = serde_json::from_str(v["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(first["error"]["code"], "not_found");
        assert_eq!(v["structuredContent"], first);
        assert_eq!(v["resultType"], "complete");
        let ok = success(
            ToolName::Forget,
            json!({"memory_id": "m", "invalidated": true}),
            &FooterContext::default(),
            false,
        );
        assert_eq!(serde_json::to_value(&ok).unwrap()["resultType"], "complete");
    }
}
