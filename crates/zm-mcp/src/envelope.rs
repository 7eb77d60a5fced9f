//! Tool results as MCP sees them: the JSON mirror first, resource links,
//! and the human-readable footer last; failures as `isError` results whose
//! first (and only) block is the error body, with no `structuredContent`.

use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use zm_contracts::uri::MEMORY_PREFIX;
use zm_contracts::{FooterFacts, MemoryId, Rule, SessionState, ToolError, ToolName, ToolOutput};

/// The remember reminder every read ends with.
pub const REMINDER: &str = "--- reminder ---\nIf this conversation has produced a durable fact, decision, convention, preference or gotcha that is not stored yet, call remember now: one atomic fact per call.";

/// What the footer needs to know about the connection.
#[derive(Debug, Clone, Default)]
pub struct FooterContext {
    /// The project attached before this call.
    pub attached_before: Option<String>,
    /// A stateless (2026-07-28) HTTP request: nothing carries over to the
    /// next call, so nothing is attached or set.
    pub stateless: bool,
}

/// The footer's session line. `briefed` is the project a briefing was
/// pinned to: its thread routes there, so when the session stays attached
/// to another project the model is told to pass it only on calls about
/// that one (echoed on every call, it would send the next scope-less
/// writes there, against the line's own "they land in the attached one").
fn session_line(session: Option<&SessionState>, stateless: bool, briefed: Option<&str>) -> String {
    let attached = session.and_then(|s| s.attached_project.as_deref());
    let mut line = match attached {
        Some(p) => format!("session: working in {p} — scope-less writes land there."),
        None if stateless => "session: none (stateless request) — nothing carries over between calls: pass thread or project_hint on every call that should land in a project (a scope-less remember with neither is refused).".to_string(),
        None => "session: NO PROJECT — a scope-less remember will be refused. Pass project_hint (the briefing names it) to set one.".to_string(),
    };
    match (session.and_then(|s| s.thread.as_deref()), attached, briefed) {
        (Some(t), Some(a), Some(b)) if a != b => line.push_str(&format!(
            " This briefing's thread is \"{t}\": pass it only on calls about {b}; without it, calls stay in {a}."
        )),
        (Some(t), _, _) => line.push_str(&format!(
            " Echo thread: \"{t}\" on your next call — it survives reconnects and stamps memories with their conversation."
        )),
        (None, _, _) => {}
    }
    line
}

fn cross_project_note(facts: &FooterFacts<'_>, ctx: &FooterContext) -> Option<String> {
    let pinned = facts.project_scope?;
    let attached = ctx.attached_before.as_deref()?;
    (pinned != attached).then(|| {
        format!(
            "NOTE: this read was pinned to {pinned}; the session stays attached to {attached}. Treat these findings as analogy, and name the project (scope or project_hint) on a write that belongs there."
        )
    })
}

fn rules_block(rules: &[Rule]) -> Option<String> {
    if rules.is_empty() {
        return None;
    }
    let mut out =
        "STANDING RULES — promoted by the user; follow them like system rules:".to_string();
    for (i, r) in rules.iter().enumerate() {
        let pinned = if r.pinned { " [pinned]" } else { "" };
        out.push_str(&format!("\n{}.{} {}", i + 1, pinned, r.text));
    }
    Some(out)
}

/// The footer of remember / recall / build_context; `None` for other tools.
pub fn footer(output: &ToolOutput, ctx: &FooterContext) -> Option<String> {
    let facts = output.footer_facts();
    let segments: Vec<Option<String>> = match output.tool() {
        ToolName::Remember => vec![
            facts
                .routed_to_project
                .map(|s| format!("ROUTED TO PROJECT: {s}")),
            Some(session_line(facts.session, ctx.stateless, None)),
        ],
        ToolName::Recall => vec![
            cross_project_note(&facts, ctx),
            Some(session_line(facts.session, ctx.stateless, None)),
            Some(REMINDER.into()),
        ],
        ToolName::BuildContext => vec![
            cross_project_note(&facts, ctx),
            Some(session_line(
                facts.session,
                ctx.stateless,
                facts.project_scope,
            )),
            rules_block(facts.rules),
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
fn link(id: &MemoryId, priority: f64, codex: bool) -> Value {
    let priority = if codex {
        priority.round()
    } else {
        (priority * 100.0).round() / 100.0
    };
    json!({
        "type": "resource_link",
        "uri": format!("{MEMORY_PREFIX}{id}"),
        "name": id.as_str(),
        "mimeType": "application/json",
        "annotations": {"audience": ["assistant"], "priority": priority},
    })
}

/// Rank priority: 1.0 for the top hit, 0.1 less for each next, at least 0.1.
pub fn rank_priority(index: usize) -> f64 {
    (1.0 - index as f64 * 0.1).max(0.1)
}

/// The flat priority of the memories a read reached besides its hits:
/// recall's related stubs, a briefing's linked memories.
fn linked_priority(tool: ToolName) -> f64 {
    match tool {
        ToolName::BuildContext => 0.3,
        _ => 0.2,
    }
}

/// The resource links of a read result: ranked hits, then linked memories.
pub fn resource_links(output: &ToolOutput, codex: bool) -> Vec<Value> {
    let flat = linked_priority(output.tool());
    output
        .ranked_ids()
        .into_iter()
        .enumerate()
        .map(|(i, id)| link(id, rank_priority(i), codex))
        .chain(
            output
                .linked_ids()
                .into_iter()
                .map(|id| link(id, flat, codex)),
        )
        .collect()
}

/// A successful tool result; `links`: with the resource links of a read
/// (clients of protocol revisions before 2025-06-18 get none).
pub fn success(
    output: &ToolOutput,
    ctx: &FooterContext,
    codex: bool,
    links: bool,
) -> CallToolResult {
    let structured = output.to_json();
    let mut content = vec![json!({"type": "text", "text": structured.to_string()})];
    if links {
        content.extend(resource_links(output, codex));
    }
    if let Some(f) = footer(output, ctx) {
        content.push(json!({"type": "text", "text": f}));
    }
    build(json!({"content": content, "structuredContent": structured, "isError": false}))
}

/// A failed tool result: `isError`, the JSON error body as the first text
/// block, and no `structuredContent`. The error body does not match the
/// tool's `outputSchema`, and clients validate any `structuredContent`
/// against it even on errors: the TypeScript SDK's `callTool` would throw
/// `-32602` instead of handing the error to its caller.
pub fn failure(err: &ToolError) -> CallToolResult {
    let body = err.to_json();
    build(json!({
        "content": [{"type": "text", "text": body.to_string()}],
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
    use zm_contracts::{
        ForgetOutput, MemoryKind, MemoryLinkType, RecallOutput, RelatedStub, SearchHit, Visibility,
    };

    fn id(n: u8) -> MemoryId {
        MemoryId::from_trusted(format!("mem_000000000000000{n}.0000000000"))
    }

    fn hit(n: u8) -> SearchHit {
        SearchHit {
            id: id(n),
            content: "x".into(),
            kind: MemoryKind::Fact,
            scope: "proj.a.x".into(),
            team: None,
            visibility: Visibility::Private,
            created_at: "2026-01-01T00:00:00Z".into(),
            score: 1.0,
            disputed: false,
            dispute_id: None,
            dispute_with: None,
            similarity: None,
            fts_matched: true,
            stale_days: None,
            entities: None,
        }
    }

    fn recall_out(session: SessionState) -> ToolOutput {
        ToolOutput::Recall(RecallOutput {
            memories: vec![hit(1), hit(2)],
            project_scope: Some("proj.a.x".into()),
            session,
            related: vec![RelatedStub {
                id: id(3),
                of: id(1),
                relation: MemoryLinkType::RelatesTo,
                kind: MemoryKind::Fact,
                preview: "p".into(),
            }],
        })
    }

    #[test]
    fn priorities_and_codex_rounding() {
        assert_eq!(rank_priority(0), 1.0);
        assert!((rank_priority(3) - 0.7).abs() < 1e-9);
        assert_eq!(rank_priority(20), 0.1);
        let out = recall_out(SessionState {
            attached_project: None,
            thread: None,
        });
        let links = resource_links(&out, false);
        assert_eq!(links.len(), 3);
        assert_eq!(links[1]["annotations"]["priority"], 0.9);
        assert_eq!(links[2]["annotations"]["priority"], 0.2);
        let codex = resource_links(&out, true);
        assert_eq!(codex[1]["annotations"]["priority"], 1.0);
        assert_eq!(codex[2]["annotations"]["priority"], 0.0);
        let forget = ToolOutput::Forget(ForgetOutput {
            memory_id: id(1),
            invalidated: true,
        });
        assert!(resource_links(&forget, false).is_empty());
    }

    #[test]
    fn footers() {
        let out = recall_out(SessionState {
            attached_project: Some("proj.a.y".into()),
            thread: Some("thr_1".into()),
        });
        let ctx = FooterContext {
            attached_before: Some("proj.a.y".into()),
            stateless: false,
        };
        let f = footer(&out, &ctx).unwrap();
        assert!(f.starts_with("NOTE: this read was pinned to proj.a.x"));
        assert!(f.contains("session: working in proj.a.y"));
        assert!(f.contains("thr_1"));
        assert!(f.ends_with(REMINDER));
        let none = ToolOutput::Remember(zm_contracts::RememberOutput {
            memory_id: id(1),
            deduplicated: None,
            scope: "personal".into(),
            similar_existing: None,
            hint: None,
            length_directive: None,
            anchor_hint: None,
            anchors: None,
            routed_to_project: None,
            session: SessionState {
                attached_project: None,
                thread: None,
            },
        });
        let f = footer(&none, &FooterContext::default()).unwrap();
        assert!(f.contains("NO PROJECT"));
        assert!(!f.contains("reminder"));
        let stateless = FooterContext {
            attached_before: None,
            stateless: true,
        };
        let f = footer(&none, &stateless).unwrap();
        assert!(
            f.contains("stateless request") && !f.contains("to set one"),
            "{f}"
        );
        let forget = ToolOutput::Forget(ForgetOutput {
            memory_id: id(1),
            invalidated: true,
        });
        assert!(footer(&forget, &FooterContext::default()).is_none());
    }

    #[test]
    fn failure_puts_the_body_first() {
        let r = failure(&ToolError::not_found("Memory x not found."));
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["isError"], true);
        let first: Value = serde_json::from_str(v["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(first["error"]["code"], "not_found");
        assert_eq!(v["content"].as_array().map(Vec::len), Some(1));
        assert!(
            v.get("structuredContent").is_none(),
            "a failure carries no structuredContent: {v}"
        );
        assert_eq!(v["resultType"], "complete");
        let ok = success(
            &ToolOutput::Forget(ForgetOutput {
                memory_id: id(1),
                invalidated: true,
            }),
            &FooterContext::default(),
            false,
            true,
        );
        assert_eq!(serde_json::to_value(&ok).unwrap()["resultType"], "complete");
    }
}
