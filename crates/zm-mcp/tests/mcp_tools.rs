//! Every tool through a real rmcp client, in process: each happy path (the
//! result checked against the tool's outputSchema, the JSON mirror, the
//! footer and the resource links), each error path of reference §1 for our
//! 18 tools, schema failures as `validation_failed` tool results, session
//! attachment and threads across connections.

mod common;

use std::collections::BTreeSet;

use common::*;
use serde_json::{Value, json};
use zm_contracts::ToolName;
use zm_contracts::prefixes::Prefix;

const HINT: &str = "/work/repos/zero-memory";

fn s(v: &Value) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .to_string()
}

/// Every tool's happy path, in one era.
async fn happy_paths(era: Era) {
    let env = Env::new().await;
    let c = env.connect_with(UNCAPPED, era).await;
    let mut seen: BTreeSet<&str> = BTreeSet::new();

    // build_context: a briefing that pins a project and issues a thread.
    let bc = c
        .ok_full(
            "build_context",
            json!({"topic": "zero-memory architecture", "briefing": true, "project_hint": HINT}),
        )
        .await;
    seen.insert("build_context");
    let out = &bc["structuredContent"];
    let project = s(&out["project_scope"]);
    assert!(project.starts_with("proj."), "{project}");
    assert_eq!(out["session"]["attached_project"], project.as_str());
    let thread = s(&out["session"]["thread"]);
    assert!(thread.starts_with("thr_"), "{thread}");
    assert!(footer(&bc).contains(&thread), "the footer names the thread");
    assert!(footer(&bc).contains(&format!("session: working in {project}")));

    // remember: through the thread, with entities.
    let fact = c
        .ok_full(
            "remember",
            json!({
                "content": "The REST API uses snake_case JSON field names.",
                "kind": "convention",
                "thread": thread,
                "entities": [{"name": "zero-memory", "type": "project"}],
            }),
        )
        .await;
    seen.insert("remember");
    let fact_out = &fact["structuredContent"];
    let fact_id = s(&fact_out["memory_id"]);
    assert_eq!(fact_out["scope"], project.as_str());
    assert_eq!(fact_out["anchors"], json!(["zero-memory"]));
    assert_eq!(fact_out["session"]["attached_project"], project.as_str());
    // An exact repeat is absorbed.
    let again = c
        .ok(
            "remember",
            json!({"content": "The REST API uses snake_case JSON field names.", "kind": "convention", "thread": thread}),
        )
        .await;
    assert_eq!(again["memory_id"], fact_id.as_str());
    assert_eq!(again["deduplicated"], true);

    // remember: personal, by hint, a task, a decision.
    let pref = c
        .ok(
            "remember",
            json!({"content": "The user prefers short commit messages in the imperative mood.", "kind": "preference", "scope": "personal"}),
        )
        .await;
    let pref_id = s(&pref["memory_id"]);
    assert!(s(&pref["scope"]).starts_with("user."));
    let task = c
        .ok(
            "remember",
            json!({"content": "Write the MCP tests for every tool of the catalogue.", "kind": "task", "project_hint": HINT}),
        )
        .await;
    let task_id = s(&task["memory_id"]);
    assert_eq!(task["scope"], project.as_str());
    let decision = c
        .ok(
            "remember",
            json!({"content": "SQLite is the embedded default backend; PostgreSQL serves larger installs.", "kind": "decision", "project_hint": HINT}),
        )
        .await;
    let decision_id = s(&decision["memory_id"]);
    assert!(decision["anchor_hint"].is_string());
    // A `core` write about how this project works is routed to the project.
    let routed = c
        .ok_full(
            "remember",
            json!({"content": "Run cargo xtask check before every release of this repository.", "kind": "convention", "scope": "core"}),
        )
        .await;
    let routed_out = &routed["structuredContent"];
    assert_eq!(routed_out["scope"], project.as_str(), "{routed:#}");
    assert!(routed_out["routed_to_project"].is_string());
    assert!(footer(&routed).starts_with("ROUTED TO PROJECT:"));
    let routed_id = s(&routed_out["memory_id"]);

    // recall: the top hit gets priority 1.0 (checked by the harness too).
    let r = c
        .ok_full(
            "recall",
            json!({"query": "snake_case JSON field names", "project_hint": HINT}),
        )
        .await;
    seen.insert("recall");
    let hits = r["structuredContent"]["memories"].as_array().unwrap();
    assert_eq!(hits[0]["id"], fact_id.as_str(), "{r:#}");
    assert_eq!(r["structuredContent"]["project_scope"], project.as_str());
    let top_link = &r["content"][1];
    assert_eq!(top_link["type"], "resource_link");
    assert_eq!(top_link["uri"], format!("zm://memory/{fact_id}"));
    assert_eq!(top_link["annotations"]["priority"], 1.0);
    // Everything visible, with the graph, filtered by kind.
    let r = c
        .ok(
            "recall",
            json!({"query": "commit messages", "scopes": ["*"], "include_graph": true, "kinds": ["preference"], "k": 5}),
        )
        .await;
    assert_eq!(r["memories"][0]["id"], pref_id.as_str());
    assert!(r["memories"][0]["entities"].is_array());

    // build_context on the topic: hits with links, the open loop.
    let bc = c
        .ok_full(
            "build_context",
            json!({"topic": "SQLite PostgreSQL backend", "briefing": true, "thread": thread, "max_tokens": 2000}),
        )
        .await;
    let out = &bc["structuredContent"];
    assert_eq!(out["memories"][0]["id"], decision_id.as_str(), "{bc:#}");
    assert_eq!(bc["content"][1]["annotations"]["priority"], 1.0);
    assert!(
        out["open_loops"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == task_id.as_str()),
        "{out:#}"
    );
    assert_eq!(out["session"]["thread"], thread.as_str());

    // forget, then restore_memory.
    let f = c
        .ok(
            "forget",
            json!({"memory_id": routed_id, "reason": "a test"}),
        )
        .await;
    seen.insert("forget");
    assert_eq!(f, json!({"memory_id": routed_id, "invalidated": true}));
    let rm = c
        .ok("restore_memory", json!({"memory_id": routed_id}))
        .await;
    seen.insert("restore_memory");
    assert_eq!(rm, json!({"memory_id": routed_id, "restored": true}));

    // close_loop on the task.
    let cl = c.ok("close_loop", json!({"memory_id": task_id})).await;
    seen.insert("close_loop");
    assert_eq!(cl, json!({"memory_id": task_id, "closed": true}));

    // share: the personal preference into the project.
    let sh = c
        .ok("share", json!({"memory_id": pref_id, "scope": project}))
        .await;
    seen.insert("share");
    assert_eq!(
        sh,
        json!({"memory_id": pref_id, "scope": project, "shared": true})
    );
    // Sharing again changes nothing and still succeeds.
    c.ok("share", json!({"memory_id": pref_id, "scope": project}))
        .await;

    // move_memories: one moves, one never existed.
    let loose = c
        .ok(
            "remember",
            json!({"content": "The CI runs on two cores, so builds are serialised.", "scope": "personal"}),
        )
        .await;
    let loose_id = s(&loose["memory_id"]);
    let mv = c
        .ok(
            "move_memories",
            json!({"memory_ids": [loose_id, NEVER], "project_hint": HINT}),
        )
        .await;
    seen.insert("move_memories");
    assert_eq!(mv["scope"], project.as_str());
    assert_eq!(mv["moved"], json!([loose_id]));
    assert_eq!(mv["failed"][0]["memory_id"], NEVER);
    assert!(mv["failed"][0]["error"].is_string());

    // link: entities, then memories (a contradiction files a conflict).
    let le = c
        .ok(
            "link",
            json!({"src": "web-app", "dst": "PostgreSQL", "type": "depends_on"}),
        )
        .await;
    seen.insert("link");
    assert_eq!(le["kind"], "entity_edge");
    assert_eq!(le["created"], true);
    let le2 = c
        .ok(
            "link",
            json!({"src": "web app", "dst": "postgresql", "type": "depends_on"}),
        )
        .await;
    assert_eq!(
        le2["created"], false,
        "names match ignoring case and spaces"
    );
    let counter = c
        .ok(
            "remember",
            json!({"content": "The REST API uses camelCase JSON field names.", "kind": "convention", "project_hint": HINT}),
        )
        .await;
    let counter_id = s(&counter["memory_id"]);
    let lm = c
        .ok(
            "link",
            json!({"src": counter_id, "dst": fact_id, "type": "contradicts"}),
        )
        .await;
    assert_eq!(lm["kind"], "memory_link");
    assert_eq!(lm["src_id"], counter_id.as_str());
    assert_eq!(lm["created"], true);

    // entities.
    let en = c.ok("entities", json!({"query": "postgres"})).await;
    seen.insert("entities");
    assert!(
        en["entities"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "PostgreSQL"),
        "{en:#}"
    );
    c.ok("entities", json!({})).await;
    c.ok("entities", json!({"scope": "personal"})).await;

    // challenge (and its idempotent repeat).
    let ch = c
        .ok(
            "challenge",
            json!({"memory_id": decision_id, "reason": "We may drop SQLite for embedded installs.", "evidence": "The roadmap discussion."}),
        )
        .await;
    seen.insert("challenge");
    let challenge_id = s(&ch["dispute_id"]);
    assert_eq!(ch["already_pending"], false);
    let ch2 = c
        .ok(
            "challenge",
            json!({"memory_id": decision_id, "reason": "Again."}),
        )
        .await;
    assert_eq!(ch2["dispute_id"], challenge_id.as_str());
    assert_eq!(ch2["already_pending"], true);
    // A disputed recall hit says so.
    let r = c
        .ok(
            "recall",
            json!({"query": "SQLite embedded default backend"}),
        )
        .await;
    let hit = r["memories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == decision_id.as_str())
        .expect("decision recalled");
    assert_eq!(hit["disputed"], true);
    assert_eq!(hit["dispute_id"], challenge_id.as_str());

    // list_conflicts: the challenge and the contradiction.
    let lc = c.ok("list_conflicts", json!({})).await;
    seen.insert("list_conflicts");
    let conflicts = lc["conflicts"].as_array().unwrap();
    let contradiction = conflicts
        .iter()
        .find(|x| x["verdict"] == "contradiction")
        .expect("contradiction listed");
    let contradiction_id = s(&contradiction["dispute_id"]);
    assert!(
        conflicts
            .iter()
            .any(|x| x["dispute_id"] == challenge_id.as_str())
    );
    c.ok(
        "list_conflicts",
        json!({"status": "pending", "verdict": "challenged", "limit": 1}),
    )
    .await;

    // get_conflict.
    let gc = c
        .ok("get_conflict", json!({"dispute_id": challenge_id}))
        .await;
    seen.insert("get_conflict");
    assert_eq!(gc["conflict"]["verdict"], "challenged");
    assert_eq!(gc["conflict"]["memory_a"]["id"], decision_id.as_str());
    assert!(gc["conflict"]["memory_b"].is_null());

    // resolve_conflict: uphold the challenge, settle the pair with a winner.
    let rc = c
        .ok(
            "resolve_conflict",
            json!({"dispute_id": challenge_id, "keep_both": true}),
        )
        .await;
    seen.insert("resolve_conflict");
    assert_eq!(rc, json!({"resolved": true}));
    let rc = c
        .ok(
            "resolve_conflict",
            json!({"dispute_id": contradiction_id, "winner": fact_id}),
        )
        .await;
    assert_eq!(rc, json!({"resolved": true}));
    let resolved = c.ok("list_conflicts", json!({"status": "resolved"})).await;
    assert!(
        resolved["conflicts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["dispute_id"] == contradiction_id.as_str())
    );

    // promote_rule: a user-layer rule from a personal memory, and a project rule.
    let rule_src = c
        .ok(
            "remember",
            json!({"content": "Always answer in British English.", "kind": "preference", "scope": "personal"}),
        )
        .await;
    let pr = c
        .ok("promote_rule", json!({"memory_id": rule_src["memory_id"]}))
        .await;
    seen.insert("promote_rule");
    assert_eq!(pr["target_layer"], "user");
    assert_eq!(pr["status"], "promoted");
    assert_eq!(pr["rule_text"], "Always answer in British English.");
    assert!(pr["applies_scope"].is_null());
    let pr = c
        .ok(
            "promote_rule",
            json!({"memory_id": fact_id, "rule_text": "Use snake_case for every JSON field."}),
        )
        .await;
    assert_eq!(pr["target_layer"], "project");
    assert_eq!(pr["applies_scope"], project.as_str());
    // The next briefing delivers them.
    let bc = c
        .ok_full(
            "build_context",
            json!({"topic": "JSON conventions", "briefing": true, "thread": thread}),
        )
        .await;
    let rules: Vec<&str> = bc["structuredContent"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["text"].as_str().unwrap())
        .collect();
    assert!(
        rules.contains(&"Always answer in British English."),
        "{rules:?}"
    );
    assert!(rules.contains(&"Use snake_case for every JSON field."));
    assert!(footer(&bc).contains("STANDING RULES"));

    // import_memory: personal, project; a repeat is skipped.
    let im = c
        .ok(
            "import_memory",
            json!({"content": "Imported: the user reviews pull requests in the morning.", "kind": "preference", "target": "personal", "source_tool": "claude-code", "source_path": "CLAUDE.md", "source_hash": "sha256-one"}),
        )
        .await;
    seen.insert("import_memory");
    assert_eq!(im["skipped"], false);
    assert!(s(&im["memory_id"]).starts_with("mem_"));
    let again = c
        .ok(
            "import_memory",
            json!({"content": "Imported: the user reviews pull requests in the morning.", "kind": "preference", "target": "personal", "source_path": "CLAUDE.md", "source_hash": "sha256-one"}),
        )
        .await;
    assert_eq!(again["skipped"], true);
    let im = c
        .ok(
            "import_memory",
            json!({"content": "Imported: the project formats with rustfmt edition 2024.", "kind": "convention", "target": "project", "project_hint": HINT, "source_path": ".cursorrules", "source_hash": "sha256-two", "verbatim": "rustfmt 2024"}),
        )
        .await;
    assert_eq!(im["skipped"], false);

    // export_memories: live and invalidated rows.
    let ex = c.ok("export_memories", json!({})).await;
    seen.insert("export_memories");
    let items = ex["items"].as_array().unwrap();
    assert_eq!(ex["count"], items.len());
    let task_row = items
        .iter()
        .find(|m| m["id"] == task_id.as_str())
        .expect("closed task exported");
    assert!(task_row["invalidated_at"].is_string());
    let some = c
        .ok("export_memories", json!({"scopes": ["personal"]}))
        .await;
    assert!(some["count"].as_u64().unwrap() < ex["count"].as_u64().unwrap());

    // delete_account, last.
    let da = c.ok("delete_account", json!({})).await;
    seen.insert("delete_account");
    assert_eq!(da["subject"], env.user.as_str());
    assert_eq!(da["auth_deleted"], true);
    assert!(da["memories"].as_u64().unwrap() >= 8);
    assert!(da["entities"].as_u64().unwrap() >= 3);

    let all: BTreeSet<&str> = ToolName::ALL.iter().map(|t| t.as_str()).collect();
    assert_eq!(seen, all, "every tool's happy path ran");
}

#[tokio::test]
async fn every_tool_happy_path_legacy_era() {
    happy_paths(Era::Legacy).await;
}

#[tokio::test]
async fn every_tool_happy_path_2026_era() {
    happy_paths(Era::Modern).await;
}

#[tokio::test]
async fn codex_clients_get_integer_priorities() {
    let env = Env::new().await;
    let c = env.connect_with("OpenAI Codex", Era::Legacy).await;
    for i in 0..3 {
        c.ok(
            "remember",
            json!({"content": format!("Observability note {i}: traces go to the collector."), "scope": "personal"}),
        )
        .await;
    }
    let r = c
        .ok_full("recall", json!({"query": "observability traces collector"}))
        .await;
    let links: Vec<f64> = r["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "resource_link")
        .map(|b| b["annotations"]["priority"].as_f64().unwrap())
        .collect();
    assert_eq!(links, vec![1.0, 1.0, 1.0]);
}

/// Fixture memories for the error paths.
struct Fixture {
    fact: String,
    task: String,
    forgotten: String,
}

async fn fixture(c: &Client) -> Fixture {
    let fact = c
        .ok(
            "remember",
            json!({"content": "The staging database is rebuilt every night.", "scope": "personal"}),
        )
        .await;
    let task = c
        .ok(
            "remember",
            json!({"content": "Rotate the staging credentials.", "kind": "task", "scope": "personal"}),
        )
        .await;
    let gone = c
        .ok(
            "remember",
            json!({"content": "The old build server was called hermes.", "scope": "personal"}),
        )
        .await;
    let forgotten = s(&gone["memory_id"]);
    c.ok("forget", json!({"memory_id": forgotten})).await;
    Fixture {
        fact: s(&fact["memory_id"]),
        task: s(&task["memory_id"]),
        forgotten,
    }
}

#[tokio::test]
async fn remember_errors() {
    let env = Env::new().await;
    let c = env.connect().await;
    // Empty content (schema) and whitespace-only content (garde).
    let e = c
        .err("remember", json!({"content": ""}), "validation_failed")
        .await;
    assert_eq!(field_paths(&e), ["content"]);
    let e = c
        .err(
            "remember",
            json!({"content": "   ", "scope": "personal"}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["content"]);
    // Invalid kind.
    let e = c
        .err(
            "remember",
            json!({"content": "x", "kind": "rumour", "scope": "personal"}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["kind"]);
    // Secrets: content, verbatim, entity names.
    let secret = fake_secret();
    for (args, field) in [
        (
            json!({"content": format!("The deploy key is {secret}"), "scope": "personal"}),
            "content",
        ),
        (
            json!({"content": "The deploy key lives in the vault.", "verbatim": format!("key {secret}"), "scope": "personal"}),
            "verbatim",
        ),
        (
            json!({"content": "The deploy key lives in the vault.", "entities": [{"name": secret}], "scope": "personal"}),
            "entities[0].name",
        ),
    ] {
        let e = c.err("remember", args, "validation_failed").await;
        let msg = s(&e["message"]);
        assert!(
            msg.starts_with(Prefix::SecretContentRejected.as_str()),
            "{msg}"
        );
        assert!(msg.starts_with("secret_content_rejected:"), "{msg}");
        assert!(!msg.contains(&secret), "the secret is not echoed");
        assert_eq!(e["details"]["field"], field);
    }
    // An unresolvable hint.
    let e = c
        .err(
            "remember",
            json!({"content": "Something about a project.", "project_hint": "///"}),
            "validation_failed",
        )
        .await;
    assert!(
        s(&e["message"]).starts_with("project_hint_unresolvable:"),
        "{e}"
    );
    // No scope, no hint, no thread, no attached project.
    let e = c
        .err(
            "remember",
            json!({"content": "Something with nowhere to go."}),
            "validation_failed",
        )
        .await;
    assert!(
        s(&e["message"]).starts_with("scope_target_required:"),
        "{e}"
    );
    let r = c
        .call(
            "remember",
            json!({"content": "Something with nowhere to go."}),
        )
        .await;
    assert_eq!(
        r["content"].as_array().unwrap().len(),
        1,
        "no footer on errors"
    );
    // A thread that is not ours or does not exist does not route.
    let e = c
        .err(
            "remember",
            json!({"content": "Something with nowhere to go.", "thread": "thr_0000000000000000.0000000000"}),
            "validation_failed",
        )
        .await;
    assert!(s(&e["message"]).starts_with("scope_target_required:"));
    // Invalid scopes.
    for bad in ["proj", "Proj.x.y", "banana.split", "user", "*", "proj..x"] {
        let e = c
            .err(
                "remember",
                json!({"content": "A fact.", "scope": bad}),
                "validation_failed",
            )
            .await;
        assert_eq!(field_paths(&e), ["scope"], "{bad}");
    }
    // An entity name with no letters or digits.
    let e = c
        .err(
            "remember",
            json!({"content": "A fact.", "scope": "personal", "entities": [{"name": "---"}]}),
            "validation_failed",
        )
        .await;
    assert!(s(&e["message"]).contains("entity"), "{e}");
    // A link to a memory that does not exist.
    c.err(
        "remember",
        json!({"content": "A fact.", "scope": "personal", "links": [{"dst": NEVER, "type": "supersedes"}]}),
        "not_found",
    )
    .await;
    // Nothing was written by any of these.
    let ex = c.ok("export_memories", json!({})).await;
    assert_eq!(ex["count"], 0, "{ex:#}");
}

#[tokio::test]
async fn lifecycle_errors() {
    let env = Env::new().await;
    let c = env.connect().await;
    let f = fixture(&c).await;
    // forget: not found, already invalidated.
    c.err("forget", json!({"memory_id": NEVER}), "not_found")
        .await;
    c.err("forget", json!({"memory_id": f.forgotten}), "conflict")
        .await;
    // close_loop: not a loop, not found, already closed.
    let e = c
        .err(
            "close_loop",
            json!({"memory_id": f.fact}),
            "validation_failed",
        )
        .await;
    assert!(s(&e["message"]).contains("forget"), "{e}");
    assert_eq!(field_paths(&e), ["memory_id"]);
    c.err("close_loop", json!({"memory_id": NEVER}), "not_found")
        .await;
    c.ok("close_loop", json!({"memory_id": f.task})).await;
    c.err("close_loop", json!({"memory_id": f.task}), "conflict")
        .await;
    // restore_memory: not found, not invalidated.
    c.err("restore_memory", json!({"memory_id": NEVER}), "not_found")
        .await;
    c.err("restore_memory", json!({"memory_id": f.fact}), "conflict")
        .await;
    // Another user's memory is not found for every lifecycle tool.
    let other = env.add_user("other@example.com").await;
    let o = env.connect_as(&other).await;
    for tool in ["forget", "close_loop", "restore_memory"] {
        o.err(tool, json!({"memory_id": f.task}), "not_found").await;
    }
    o.err(
        "challenge",
        json!({"memory_id": f.fact, "reason": "r"}),
        "not_found",
    )
    .await;
    o.err("promote_rule", json!({"memory_id": f.fact}), "not_found")
        .await;
}

#[tokio::test]
async fn share_and_move_errors() {
    let env = Env::new().await;
    let c = env.connect().await;
    let f = fixture(&c).await;
    let project = c
        .ok(
            "build_context",
            json!({"topic": "anything", "project_hint": HINT}),
        )
        .await["project_scope"]
        .clone();
    let project = s(&project);
    // share: a scope that is not a project/team scope, a malformed one.
    let personal_path = format!("user.{}", zm_contracts::scope::label_for(&env.user));
    for scope in [personal_path.as_str(), "user.someone.core"] {
        let e = c
            .err(
                "share",
                json!({"memory_id": f.fact, "scope": scope}),
                "validation_failed",
            )
            .await;
        assert_eq!(field_paths(&e), ["scope"], "{scope}");
    }
    for scope in ["personal", "core", "proj", ""] {
        let e = c
            .err(
                "share",
                json!({"memory_id": f.fact, "scope": scope}),
                "validation_failed",
            )
            .await;
        assert_eq!(field_paths(&e), ["scope"], "{scope:?}");
    }
    // share: not found, invalidated.
    c.err(
        "share",
        json!({"memory_id": NEVER, "scope": project}),
        "not_found",
    )
    .await;
    c.err(
        "share",
        json!({"memory_id": f.forgotten, "scope": project}),
        "conflict",
    )
    .await;
    // share into a project of someone else's: forbidden.
    let other = env.add_user("other@example.com").await;
    let o = env.connect_as(&other).await;
    let theirs = o
        .ok(
            "build_context",
            json!({"topic": "anything", "project_hint": "/srv/their-repo"}),
        )
        .await["project_scope"]
        .clone();
    c.err(
        "share",
        json!({"memory_id": f.fact, "scope": theirs}),
        "forbidden",
    )
    .await;

    // move_memories: no target, not a project scope, unresolvable hint.
    let e = c
        .err(
            "move_memories",
            json!({"memory_ids": [f.fact]}),
            "validation_failed",
        )
        .await;
    assert!(!field_paths(&e).is_empty(), "{e}");
    let e = c
        .err(
            "move_memories",
            json!({"memory_ids": [f.fact], "scope": personal_path}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["scope"]);
    let e = c
        .err(
            "move_memories",
            json!({"memory_ids": [f.fact], "project_hint": "///"}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["project_hint"]);
    let e = c
        .err(
            "move_memories",
            json!({"memory_ids": []}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["memory_ids"]);
    c.err(
        "move_memories",
        json!({"memory_ids": [f.fact], "scope": theirs}),
        "forbidden",
    )
    .await;
    // Per-item failures: never existed, invalidated, someone else's.
    let their_mem = o
        .ok(
            "remember",
            json!({"content": "Their private fact.", "scope": "personal"}),
        )
        .await["memory_id"]
        .clone();
    let mv = c
        .ok(
            "move_memories",
            json!({"memory_ids": [f.fact, NEVER, f.forgotten, their_mem], "scope": project}),
        )
        .await;
    assert_eq!(mv["moved"], json!([f.fact]));
    let failed: Vec<(String, String)> = mv["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (s(&x["memory_id"]), s(&x["error"])))
        .collect();
    assert_eq!(failed.len(), 3, "{failed:?}");
    assert_eq!(failed[0], (NEVER.to_string(), "not found".to_string()));
    assert_eq!(failed[1].0, f.forgotten);
    assert_eq!(failed[1].1, "invalidated");
    // Someone else's private memory is indistinguishable from a missing one.
    assert_eq!(failed[2], (s(&their_mem), "not found".to_string()));

    // A memory the caller can read but does not own: share is a conflict,
    // move lists it as failed.
    let shared = o
        .ok(
            "remember",
            json!({"content": "Their project convention.", "scope": "personal"}),
        )
        .await["memory_id"]
        .clone();
    o.ok("share", json!({"memory_id": shared, "scope": theirs}))
        .await;
    env.store
        .add_scope_member(&other, &s(&theirs), &env.user, zm_store::Role::Reader)
        .await
        .expect("add member");
    let r = c
        .ok(
            "recall",
            json!({"query": "their project convention", "scopes": ["*"]}),
        )
        .await;
    assert_eq!(
        r["memories"][0]["id"], shared,
        "readable through membership"
    );
    c.err(
        "share",
        json!({"memory_id": shared, "scope": project}),
        "conflict",
    )
    .await;
    let mv = c
        .ok(
            "move_memories",
            json!({"memory_ids": [shared], "scope": project}),
        )
        .await;
    assert_eq!(mv["moved"], json!([]));
    assert_eq!(mv["failed"][0]["error"], "not the owner");
}

#[tokio::test]
async fn link_and_entities_errors() {
    let env = Env::new().await;
    let c = env.connect().await;
    let f = fixture(&c).await;
    // Mixed endpoints.
    let e = c
        .err(
            "link",
            json!({"src": f.fact, "dst": "PostgreSQL", "type": "relates_to"}),
            "validation_failed",
        )
        .await;
    assert!(!field_paths(&e).is_empty());
    c.err(
        "link",
        json!({"src": "PostgreSQL", "dst": f.fact, "type": "relates_to"}),
        "validation_failed",
    )
    .await;
    // An edge type between memories, a memory-link type between entities.
    let e = c
        .err(
            "link",
            json!({"src": f.fact, "dst": f.task, "type": "depends_on"}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["type"]);
    let e = c
        .err(
            "link",
            json!({"src": "web-app", "dst": "PostgreSQL", "type": "contradicts"}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["type"]);
    // A type that does not exist at all.
    let e = c
        .err(
            "link",
            json!({"src": "a", "dst": "b", "type": "loves"}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["type"]);
    // Another id kind is neither a memory nor a name.
    c.err(
        "link",
        json!({"src": "ent_0123456789abcdef.0123456789", "dst": "ent_0123456789abcdef.0123456789", "type": "relates_to"}),
        "validation_failed",
    )
    .await;
    // A memory that does not exist.
    c.err(
        "link",
        json!({"src": f.fact, "dst": NEVER, "type": "relates_to"}),
        "not_found",
    )
    .await;
    // entities: a bad scope.
    let e = c
        .err("entities", json!({"scope": "nope"}), "validation_failed")
        .await;
    assert_eq!(field_paths(&e), ["scope"]);
    // recall / build_context: a bad explicit scope.
    let e = c
        .err(
            "recall",
            json!({"query": "x", "scopes": ["proj"]}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["scopes[0]"]);
    let e = c
        .err(
            "build_context",
            json!({"topic": "x", "scopes": ["personal", "banana"]}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["scopes[1]"]);
}

#[tokio::test]
async fn conflict_errors() {
    let env = Env::new().await;
    let c = env.connect().await;
    let f = fixture(&c).await;
    // challenge: not found, invalidated, a secret in reason or evidence.
    c.err(
        "challenge",
        json!({"memory_id": NEVER, "reason": "wrong"}),
        "not_found",
    )
    .await;
    c.err(
        "challenge",
        json!({"memory_id": f.forgotten, "reason": "wrong"}),
        "conflict",
    )
    .await;
    let secret = fake_secret();
    for args in [
        json!({"memory_id": f.fact, "reason": format!("the key is {secret}")}),
        json!({"memory_id": f.fact, "reason": "wrong", "evidence": format!("see {secret}")}),
    ] {
        let e = c.err("challenge", args, "validation_failed").await;
        assert!(s(&e["message"]).starts_with("secret_content_rejected:"));
    }
    c.err(
        "challenge",
        json!({"memory_id": f.fact, "reason": ""}),
        "validation_failed",
    )
    .await;

    // A challenge and a pair to resolve.
    let ch = c
        .ok(
            "challenge",
            json!({"memory_id": f.fact, "reason": "It is rebuilt weekly now."}),
        )
        .await;
    let challenge = s(&ch["dispute_id"]);
    let other_fact = c
        .ok(
            "remember",
            json!({"content": "The staging database is never rebuilt.", "scope": "personal"}),
        )
        .await["memory_id"]
        .clone();
    c.ok(
        "link",
        json!({"src": other_fact, "dst": f.fact, "type": "contradicts"}),
    )
    .await;
    let pair = c
        .ok("list_conflicts", json!({"verdict": "contradiction"}))
        .await["conflicts"][0]["dispute_id"]
        .clone();
    let pair = s(&pair);

    // get_conflict / resolve_conflict: unknown and foreign ids are not found.
    let other = env.add_user("other@example.com").await;
    let o = env.connect_as(&other).await;
    let theirs = o
        .ok(
            "remember",
            json!({"content": "Their fact.", "scope": "personal"}),
        )
        .await["memory_id"]
        .clone();
    let their_dispute = o
        .ok("challenge", json!({"memory_id": theirs, "reason": "hmm"}))
        .await["dispute_id"]
        .clone();
    let unknown = "mrq_0000000000000000.0000000000";
    let e1 = c
        .err("get_conflict", json!({"dispute_id": unknown}), "not_found")
        .await;
    let e2 = c
        .err(
            "get_conflict",
            json!({"dispute_id": their_dispute}),
            "not_found",
        )
        .await;
    assert_eq!(e1, e2, "foreign reads as missing");
    c.err(
        "get_conflict",
        json!({"dispute_id": "whatever"}),
        "not_found",
    )
    .await;
    for id in [json!(unknown), their_dispute.clone()] {
        c.err(
            "resolve_conflict",
            json!({"dispute_id": id, "keep_both": true}),
            "not_found",
        )
        .await;
    }
    // The other user sees none of ours either.
    let lc = o.ok("list_conflicts", json!({})).await;
    assert_eq!(lc["conflicts"].as_array().unwrap().len(), 1);

    // resolve_conflict validation: nothing chosen, retire on a pair,
    // a winner outside the pair, a challenge winner that is not the subject.
    let e = c
        .err(
            "resolve_conflict",
            json!({"dispute_id": pair}),
            "validation_failed",
        )
        .await;
    assert!(e["details"]["fields"].is_array());
    let e = c
        .err(
            "resolve_conflict",
            json!({"dispute_id": pair, "retire": true}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["retire"]);
    let e = c
        .err(
            "resolve_conflict",
            json!({"dispute_id": pair, "winner": f.task}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["winner"]);
    let e = c
        .err(
            "resolve_conflict",
            json!({"dispute_id": challenge, "winner": f.task}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["winner"]);
    c.err(
        "resolve_conflict",
        json!({"dispute_id": challenge, "winner": "not-an-id"}),
        "validation_failed",
    )
    .await;
    // Resolve, then resolving again is a conflict.
    c.ok(
        "resolve_conflict",
        json!({"dispute_id": challenge, "retire": true}),
    )
    .await;
    c.err(
        "resolve_conflict",
        json!({"dispute_id": challenge, "keep_both": true}),
        "conflict",
    )
    .await;
    c.ok(
        "resolve_conflict",
        json!({"dispute_id": pair, "keep_both": true}),
    )
    .await;
    c.err(
        "resolve_conflict",
        json!({"dispute_id": pair, "winner": other_fact}),
        "conflict",
    )
    .await;
}

#[tokio::test]
async fn rule_and_import_errors() {
    let env = Env::new().await;
    let c = env.connect().await;
    let f = fixture(&c).await;
    // promote_rule: not found, invalidated, dismissed/revoked without force.
    c.err("promote_rule", json!({"memory_id": NEVER}), "not_found")
        .await;
    c.err(
        "promote_rule",
        json!({"memory_id": f.forgotten}),
        "conflict",
    )
    .await;
    c.ok("promote_rule", json!({"memory_id": f.fact})).await;
    env.store
        .revoke_rule(&env.caller(), &f.fact, "no longer true")
        .await
        .unwrap();
    c.err("promote_rule", json!({"memory_id": f.fact}), "conflict")
        .await;
    c.ok("promote_rule", json!({"memory_id": f.fact, "force": true}))
        .await;
    let e = c
        .err(
            "promote_rule",
            json!({"memory_id": f.fact, "rule_text": "x".repeat(2001)}),
            "validation_failed",
        )
        .await;
    assert_eq!(field_paths(&e), ["rule_text"]);
    let e = c
        .err(
            "promote_rule",
            json!({"memory_id": f.fact, "rule_text": format!("use {}", fake_secret())}),
            "validation_failed",
        )
        .await;
    assert!(s(&e["message"]).starts_with("secret_content_rejected:"));
    let e = c
        .err(
            "promote_rule",
            json!({"memory_id": f.fact, "applies_scope": "user.someone.core"}),
            "validation_failed",
        )
        .await;
    assert!(s(&e["message"]).contains("applies_scope"), "{e}");

    // import_memory: a project target without a hint, a secret, bad fields.
    let base = json!({"content": "Imported fact.", "kind": "fact", "target": "project", "source_path": "notes.md", "source_hash": "h1"});
    let e = c
        .err("import_memory", base.clone(), "validation_failed")
        .await;
    assert!(field_paths(&e).contains(&"project_hint".to_string()), "{e}");
    let mut secret = base.clone();
    secret["target"] = json!("personal");
    secret["content"] = json!(format!("The key: {}", fake_secret()));
    let e = c.err("import_memory", secret, "validation_failed").await;
    assert!(s(&e["message"]).starts_with("secret_content_rejected:"));
    let mut bad = base.clone();
    bad["target"] = json!("team");
    let e = c.err("import_memory", bad, "validation_failed").await;
    assert_eq!(field_paths(&e), ["target"]);
    let mut missing = base.clone();
    missing.as_object_mut().unwrap().remove("source_hash");
    let e = c.err("import_memory", missing, "validation_failed").await;
    assert_eq!(field_paths(&e), ["source_hash"]);
    // A project import whose hint names no project degrades to personal.
    let mut degraded = base.clone();
    degraded["project_hint"] = json!("///");
    degraded["source_hash"] = json!("h-degraded");
    let out = c.ok("import_memory", degraded).await;
    let id = s(&out["memory_id"]);
    let ex = c
        .ok("export_memories", json!({"scopes": ["personal"]}))
        .await;
    assert!(
        ex["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == id.as_str()),
        "{ex:#}"
    );
    // A rejected import released its claim: the same hash imports later.
    let mut ok = base.clone();
    ok["target"] = json!("personal");
    let out = c.ok("import_memory", ok).await;
    assert_eq!(out["skipped"], false);
}

/// Arguments that break the input schema are `validation_failed` tool
/// results naming the field, never JSON-RPC errors.
#[tokio::test]
async fn schema_failures_are_tool_results_naming_the_field() {
    let env = Env::new().await;
    let c = env.connect().await;
    let f = fixture(&c).await;
    let cases: Vec<(&str, Value, &str)> = vec![
        // missing required fields
        ("remember", json!({}), "content"),
        ("recall", json!({}), "query"),
        ("build_context", json!({}), "topic"),
        ("forget", json!({}), "memory_id"),
        ("restore_memory", json!({}), "memory_id"),
        ("close_loop", json!({}), "memory_id"),
        ("share", json!({"memory_id": f.fact}), "scope"),
        ("move_memories", json!({}), "memory_ids"),
        ("link", json!({"src": "a", "dst": "b"}), "type"),
        ("challenge", json!({"memory_id": f.fact}), "reason"),
        ("get_conflict", json!({}), "dispute_id"),
        ("resolve_conflict", json!({}), "dispute_id"),
        ("promote_rule", json!({}), "memory_id"),
        (
            "import_memory",
            json!({"content": "x", "kind": "fact", "source_path": "p", "source_hash": "h"}),
            "target",
        ),
        // unknown fields
        (
            "remember",
            json!({"content": "x", "colour": "blue"}),
            "colour",
        ),
        ("recall", json!({"query": "x", "limit": 3}), "limit"),
        ("entities", json!({"name": "x"}), "name"),
        ("list_conflicts", json!({"state": "pending"}), "state"),
        ("export_memories", json!({"format": "csv"}), "format"),
        ("delete_account", json!({"confirm": true}), "confirm"),
        (
            "remember",
            json!({"content": "x", "scope": "personal", "entities": [{"name": "a", "kind": "tool"}]}),
            "entities[0].kind",
        ),
        // wrong types
        ("remember", json!({"content": 42}), "content"),
        ("recall", json!({"query": "x", "k": "ten"}), "k"),
        ("recall", json!({"query": "x", "k": 0}), "k"),
        ("recall", json!({"query": "x", "k": 101}), "k"),
        (
            "recall",
            json!({"query": "x", "scopes": "personal"}),
            "scopes",
        ),
        (
            "build_context",
            json!({"topic": "x", "briefing": "yes"}),
            "briefing",
        ),
        ("list_conflicts", json!({"limit": 0}), "limit"),
        ("list_conflicts", json!({"status": "open"}), "status"),
        ("list_conflicts", json!({"verdict": "maybe"}), "verdict"),
        (
            "resolve_conflict",
            json!({"dispute_id": "mrq_x", "keep_both": "yes"}),
            "keep_both",
        ),
        ("forget", json!({"memory_id": 7}), "memory_id"),
        // malformed ids
        ("forget", json!({"memory_id": "mem_123"}), "memory_id"),
        (
            "forget",
            json!({"memory_id": "ent_0123456789abcdef.0123456789"}),
            "memory_id",
        ),
        (
            "restore_memory",
            json!({"memory_id": "not-an-id"}),
            "memory_id",
        ),
        ("close_loop", json!({"memory_id": ""}), "memory_id"),
        (
            "share",
            json!({"memory_id": "mem_!", "scope": "proj.a.b"}),
            "memory_id",
        ),
        (
            "move_memories",
            json!({"memory_ids": [f.fact, "bogus"], "scope": "proj.a.b"}),
            "memory_ids[1]",
        ),
        (
            "challenge",
            json!({"memory_id": "x", "reason": "r"}),
            "memory_id",
        ),
        (
            "promote_rule",
            json!({"memory_id": "mem_0000000000000000"}),
            "memory_id",
        ),
        (
            "remember",
            json!({"content": "x", "scope": "personal", "links": [{"dst": "mem_bad", "type": "supersedes"}]}),
            "links[0].dst",
        ),
        (
            "resolve_conflict",
            json!({"dispute_id": "mrq_x", "winner": "bogus"}),
            "winner",
        ),
        // bad scopes
        (
            "remember",
            json!({"content": "x", "scope": "Personal"}),
            "scope",
        ),
        ("entities", json!({"scope": "team"}), "scope"),
        ("export_memories", json!({"scopes": ["proj"]}), "scopes[0]"),
        (
            "promote_rule",
            json!({"memory_id": f.fact, "applies_scope": "core"}),
            "applies_scope",
        ),
    ];
    for (tool, args, path) in cases {
        let e = c.err(tool, args.clone(), "validation_failed").await;
        let paths = field_paths(&e);
        assert!(
            paths.iter().any(|p| p == path),
            "{tool}({args}): expected field {path}, got {paths:?} ({e})"
        );
        for field in e["details"]["fields"].as_array().unwrap() {
            assert!(field["reason"].is_string(), "{tool}: {e}");
        }
    }
    // Arguments omitted altogether are an empty object.
    let r = c.try_call("remember", Value::Null).await.unwrap();
    let e = check_error(&r, "validation_failed", "remember()");
    assert_eq!(field_paths(&e), ["content"]);
    let r = c.try_call("delete_account", Value::Null).await;
    assert!(r.is_ok());
    // The connection of the account it erased is refused from then on.
    let r = c.try_call("recall", json!({"query": "x"})).await.unwrap();
    check_error(&r, "unauthorized", "recall after delete_account");
}

#[tokio::test]
async fn unknown_tool_is_a_json_rpc_error() {
    let env = Env::new().await;
    for era in [Era::Legacy, Era::Modern] {
        let c = env.connect_with(UNCAPPED, era).await;
        for name in ["nope", "scan_hygiene", "Remember", ""] {
            match c.try_call(name, json!({})).await {
                Err(rmcp::ServiceError::McpError(e)) => {
                    assert!(e.message.contains("Unknown tool"), "{}", e.message);
                    assert_eq!(e.code.0, -32602, "{era:?} {name:?}");
                }
                other => panic!("{era:?} {name:?}: expected a JSON-RPC error, got {other:?}"),
            }
        }
        // The connection survives it.
        c.ok("recall", json!({"query": "anything"})).await;
    }
}

/// A briefing pinned to another project than the one the connection is
/// attached to serves that read, and its thread routes only the calls that
/// pass it: the connection does not keep it, so the next scope-less
/// `remember` and `recall` stay in the attached project, as the footer
/// says. A briefing for the attached project keeps its thread.
#[tokio::test]
async fn a_briefing_pinned_elsewhere_does_not_move_the_connection() {
    let env = Env::new().await;
    let c = env.connect().await;
    let r = c
        .ok_full("recall", json!({"query": "anything", "project_hint": HINT}))
        .await;
    let project = s(&r["structuredContent"]["project_scope"]);
    let b = c
        .ok_full(
            "build_context",
            json!({"topic": "billing", "briefing": true, "project_hint": "git@github.com:acme/elsewhere.git"}),
        )
        .await;
    let elsewhere = s(&b["structuredContent"]["project_scope"]);
    assert_ne!(elsewhere, project);
    let token = s(&b["structuredContent"]["session"]["thread"]);
    assert!(token.starts_with("thr_"), "{b}");
    // The footer does not tell the model to echo that thread on every
    // call (it would route the next scope-less writes there).
    let f = footer(&b);
    assert!(!f.contains("Echo thread"), "{f}");
    assert!(
        f.contains(&format!("\"{token}\": pass it only on calls about {elsewhere}; without it, calls stay in {project}")),
        "{f}"
    );
    let m = c
        .ok_full(
            "remember",
            json!({"content": "A decision about the attached project.", "kind": "decision"}),
        )
        .await;
    assert_eq!(m["structuredContent"]["scope"], project.as_str(), "{m}");
    assert!(footer(&m).contains(&format!("session: working in {project}")));
    let r = c
        .ok_full("recall", json!({"query": "decision attached"}))
        .await;
    assert_eq!(
        r["structuredContent"]["project_scope"],
        project.as_str(),
        "{r}"
    );
    // Passed explicitly, the thread routes there.
    let there = c
        .ok(
            "remember",
            json!({"content": "A note about billing.", "kind": "fact", "thread": token}),
        )
        .await;
    assert_eq!(there["scope"], elsewhere.as_str());
    // A briefing for the attached project: its thread is kept.
    let own = c
        .ok_full(
            "build_context",
            json!({"topic": "billing", "briefing": true, "project_hint": HINT}),
        )
        .await;
    assert_eq!(own["structuredContent"]["project_scope"], project.as_str());
    let kept = s(&own["structuredContent"]["session"]["thread"]);
    assert_eq!(c.server.thread().as_deref(), Some(kept.as_str()));
    assert!(
        footer(&own).contains(&format!("Echo thread: \"{kept}\" on your next call")),
        "{own}"
    );
}

#[tokio::test]
async fn a_pinned_recall_attaches_an_unattached_connection() {
    let env = Env::new().await;
    let c = env.connect().await;
    // Unattached: the footer says so and a scope-less write is refused.
    let r = c.ok_full("recall", json!({"query": "anything"})).await;
    assert!(r["structuredContent"]["session"]["attached_project"].is_null());
    assert!(footer(&r).contains("NO PROJECT"));
    c.err(
        "remember",
        json!({"content": "Scope-less fact."}),
        "validation_failed",
    )
    .await;
    // A recall pinned by a hint attaches the connection.
    let r = c
        .ok_full("recall", json!({"query": "anything", "project_hint": HINT}))
        .await;
    let project = s(&r["structuredContent"]["project_scope"]);
    assert_eq!(
        r["structuredContent"]["session"]["attached_project"],
        project.as_str()
    );
    assert_eq!(
        c.server.attached_project().as_deref(),
        Some(project.as_str())
    );
    // The next remember without scope lands there.
    let m = c
        .ok_full("remember", json!({"content": "Scope-less fact."}))
        .await;
    assert_eq!(m["structuredContent"]["scope"], project.as_str());
    assert!(footer(&m).contains(&format!("session: working in {project}")));
    // First attach wins: a read pinned elsewhere serves that read only, with a note.
    let r = c
        .ok_full(
            "recall",
            json!({"query": "anything", "project_hint": "git@github.com:acme/other.git"}),
        )
        .await;
    let elsewhere = s(&r["structuredContent"]["project_scope"]);
    assert_ne!(elsewhere, project);
    assert_eq!(
        r["structuredContent"]["session"]["attached_project"],
        project.as_str()
    );
    assert!(footer(&r).starts_with(&format!("NOTE: this read was pinned to {elsewhere}")));
    let m = c
        .ok("remember", json!({"content": "Another scope-less fact."}))
        .await;
    assert_eq!(m["scope"], project.as_str());
    // Another connection is not attached.
    let c2 = env.connect().await;
    c2.err(
        "remember",
        json!({"content": "Scope-less fact."}),
        "validation_failed",
    )
    .await;
}

/// A connection attached to a project its user no longer reaches (they
/// left the team it was shared with) lets go of it at the next read: the
/// read reports no attachment, the connection keeps none, and the next
/// pinned read attaches it anew.
#[tokio::test]
async fn a_connection_lets_go_of_a_project_left() {
    use zm_contracts::teams::{AddMemberInput, CreateTeamInput, ShareProjectInput};
    let env = Env::new().await;
    let owner = env.caller();
    let member_id = env.add_user("member@example.com").await;
    env.store
        .create_team(
            &owner,
            CreateTeamInput {
                slug: "core_team".into(),
                name: None,
            },
        )
        .await
        .unwrap();
    env.store
        .add_team_member(
            &owner,
            "core_team",
            AddMemberInput {
                email: "member@example.com".into(),
                role: zm_contracts::TeamRole::Writer,
            },
        )
        .await
        .unwrap();
    let shared_hint = "git@github.com:acme/ledger.git";
    let c_owner = env.connect().await;
    c_owner
        .ok("remember", json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": shared_hint}))
        .await;
    env.store
        .share_project_with_team(
            &owner,
            "core_team",
            ShareProjectInput {
                scope: None,
                project_hint: Some(shared_hint.into()),
            },
        )
        .await
        .unwrap();
    let c = env.connect_as(&member_id).await;
    let r = c
        .ok(
            "recall",
            json!({"query": "ledger", "project_hint": shared_hint}),
        )
        .await;
    let project = s(&r["project_scope"]);
    assert_eq!(r["session"]["attached_project"], project.as_str());
    assert_eq!(
        c.server.attached_project().as_deref(),
        Some(project.as_str())
    );
    env.store
        .remove_team_member(&owner, "core_team", &member_id)
        .await
        .unwrap();
    let r = c.ok("recall", json!({"query": "ledger"})).await;
    assert!(r["session"]["attached_project"].is_null(), "{r}");
    assert_eq!(c.server.attached_project(), None);
    let r = c
        .ok("recall", json!({"query": "ledger", "project_hint": HINT}))
        .await;
    let own = s(&r["project_scope"]);
    assert_ne!(own, project);
    assert_eq!(c.server.attached_project().as_deref(), Some(own.as_str()));
}

#[tokio::test]
async fn a_thread_carries_the_project_to_a_second_connection() {
    for era in [Era::Legacy, Era::Modern] {
        let env = Env::new().await;
        let first = env.connect_with(UNCAPPED, era).await;
        let bc = first
            .ok(
                "build_context",
                json!({"topic": "start", "briefing": true, "project_hint": HINT, "conversation_id": "conv-1"}),
            )
            .await;
        let project = s(&bc["project_scope"]);
        let thread = s(&bc["session"]["thread"]);
        drop(first);

        // A new server instance, same store and user.
        let second = env.connect_with(UNCAPPED, era).await;
        let m = second
            .ok_full(
                "remember",
                json!({"content": "Written on the second connection.", "thread": thread}),
            )
            .await;
        assert_eq!(m["structuredContent"]["scope"], project.as_str(), "{era:?}");
        // A remember does not attach: without the thread, nowhere to go.
        second
            .err(
                "remember",
                json!({"content": "No thread here."}),
                "validation_failed",
            )
            .await;
        let r = second
            .ok_full(
                "recall",
                json!({"query": "second connection", "thread": thread}),
            )
            .await;
        assert_eq!(r["structuredContent"]["project_scope"], project.as_str());
        assert_eq!(r["structuredContent"]["session"]["thread"], thread.as_str());
        assert_eq!(
            r["structuredContent"]["memories"][0]["id"],
            m["structuredContent"]["memory_id"]
        );
        assert!(footer(&r).contains(&thread));
        // The provenance carries the thread.
        let id = s(&m["structuredContent"]["memory_id"]);
        let row = second
            .svc
            .read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
                "zm://memory/{id}"
            )))
            .await
            .unwrap();
        let row = serde_json::to_value(&row).unwrap();
        let row: Value =
            serde_json::from_str(row["contents"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(row["source"]["thread"], thread.as_str());
        // The writing client's name, from `initialize` or the request's `_meta`.
        assert_eq!(row["agent_name"], UNCAPPED, "{era:?}");
        // The recall pinned by the thread attached this connection too.
        assert_eq!(
            r["structuredContent"]["session"]["attached_project"],
            project.as_str()
        );
        // A build_context echoing the thread returns it unchanged.
        let bc = second
            .ok(
                "build_context",
                json!({"topic": "resume", "thread": thread}),
            )
            .await;
        assert_eq!(bc["session"]["thread"], thread.as_str());
        assert_eq!(bc["project_scope"], project.as_str());
        // Another user's connection cannot use it.
        let other = env.add_user("other@example.com").await;
        let o = env.connect_as(&other).await;
        o.err(
            "remember",
            json!({"content": "Hijack.", "thread": thread}),
            "validation_failed",
        )
        .await;
    }
}

#[tokio::test]
async fn resource_links_follow_the_rank() {
    let env = Env::new().await;
    let c = env.connect().await;
    let mut ids = Vec::new();
    for i in 0..12 {
        let m = c
            .ok(
                "remember",
                json!({"content": format!("Quasar telemetry note {i}: {}", "quasar ".repeat(12 - i)), "scope": "personal"}),
            )
            .await;
        ids.push(s(&m["memory_id"]));
    }
    let neighbour = c
        .ok(
            "remember",
            json!({"content": "The collector buffers spans for thirty seconds.", "scope": "personal"}),
        )
        .await;
    let neighbour = s(&neighbour["memory_id"]);
    c.ok(
        "link",
        json!({"src": ids[0], "dst": neighbour, "type": "relates_to"}),
    )
    .await;

    let priorities = |r: &Value| -> Vec<(String, f64)> {
        r["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["type"] == "resource_link")
            .map(|b| {
                (
                    s(&b["name"]),
                    b["annotations"]["priority"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let r = c
        .ok_full("recall", json!({"query": "quasar telemetry", "k": 12}))
        .await;
    let got = priorities(&r);
    assert_eq!(got.len(), 13, "{got:?}");
    let want = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1, 0.1];
    for (i, w) in want.iter().enumerate() {
        assert!((got[i].1 - w).abs() < 1e-6, "rank {i}: {got:?}");
    }
    assert_eq!(got[12].0, neighbour, "related stub");
    assert!((got[12].1 - 0.2).abs() < 1e-6, "related stub: {got:?}");
    assert_eq!(
        r["structuredContent"]["related"][0]["id"],
        neighbour.as_str()
    );

    let bc = c
        .ok_full(
            "build_context",
            json!({"topic": "quasar telemetry", "max_tokens": 2400}),
        )
        .await;
    let got = priorities(&bc);
    assert_eq!(got.len(), 13, "12 memories and the linked one: {got:?}");
    for (i, w) in want.iter().enumerate() {
        assert!((got[i].1 - w).abs() < 1e-6, "rank {i}: {got:?}");
    }
    assert_eq!(got[12].0, neighbour, "linked memory");
    assert!((got[12].1 - 0.3).abs() < 1e-6, "linked memory: {got:?}");
}

/// A stdio connection reads its account on every request: disabling it
/// (`zero-memory user disable`) refuses the very next call, and enabling
/// it lets the next one in.
#[tokio::test]
async fn a_disabled_account_is_refused_on_its_open_stdio_connection() {
    let env = Env::new().await;
    let uid = env.add_user("stdio-user@example.com").await;
    let client = env.connect_as(&uid).await;
    client.ok("recall", json!({"query": "anything"})).await;
    env.store.disable_user(&uid).await.unwrap();
    let e = client
        .err("recall", json!({"query": "anything"}), "unauthorized")
        .await;
    assert!(e["message"].as_str().unwrap().contains("disabled"), "{e}");
    // A resource read is refused the same way: the contract's code in the
    // JSON-RPC error's data, under an implementation-defined code (not
    // -32600, which would tell the client its request was malformed).
    match client
        .svc
        .read_resource(rmcp::model::ReadResourceRequestParams::new("zm://rules"))
        .await
    {
        Err(rmcp::ServiceError::McpError(e)) => {
            assert_eq!(e.code.0, -32000, "{e:?}");
            let data = e.data.expect("the error body");
            assert_eq!(data["error"]["code"], "unauthorized", "{data}");
        }
        other => panic!("a disabled account's resource read: {other:?}"),
    }
    client
        .err(
            "remember",
            json!({"content": "Written while disabled.", "kind": "fact"}),
            "unauthorized",
        )
        .await;
    env.store.enable_user(&uid).await.unwrap();
    client.ok("recall", json!({"query": "anything"})).await;
}

/// A disabled account's promoted rules (memory-derived text) are not in
/// the instructions a new `initialize` gets, as its tool calls and
/// resource reads are refused; enabled again, they are back.
#[tokio::test]
async fn a_disabled_account_gets_no_rules_in_its_instructions() {
    let env = Env::new().await;
    let uid = env.add_user("stdio-rules@example.com").await;
    let client = env.connect_as(&uid).await;
    let m = client
        .ok(
            "remember",
            json!({"content": "Always run the linter before pushing.", "kind": "preference", "scope": "personal"}),
        )
        .await;
    client
        .ok("promote_rule", json!({"memory_id": m["memory_id"]}))
        .await;
    let instructions = |c: &Client| {
        let info = serde_json::to_value(c.svc.peer_info().expect("peer info").as_ref()).unwrap();
        info["instructions"].as_str().unwrap_or("").to_string()
    };
    let rule = "Always run the linter before pushing.";
    assert!(instructions(&env.connect_as(&uid).await).contains(rule));
    env.store.disable_user(&uid).await.unwrap();
    let text = instructions(&env.connect_as(&uid).await);
    assert!(!text.contains(rule), "{text}");
    env.store.enable_user(&uid).await.unwrap();
    assert!(instructions(&env.connect_as(&uid).await).contains(rule));
}

/// `resource_link` content blocks came with protocol revision 2025-06-18:
/// a client that speaks an older one gets a read's result without them
/// (its SDK refuses a content block of a type it does not know), a newer
/// one with them.
#[tokio::test]
async fn resource_links_go_only_to_clients_whose_revision_has_them() {
    use rmcp::model::ProtocolVersion;
    let env = Env::new().await;
    env.connect()
        .await
        .ok(
            "remember",
            json!({"content": "The ledger closes at midnight.", "kind": "fact", "scope": "core"}),
        )
        .await;
    for (version, links) in [
        (ProtocolVersion::V_2024_11_05, false),
        (ProtocolVersion::V_2025_03_26, false),
        (ProtocolVersion::V_2025_06_18, true),
        (ProtocolVersion::V_2025_11_25, true),
    ] {
        let client = Client::connect_speaking(env.server(), version.clone()).await;
        let result = client
            .call("recall", json!({"query": "ledger midnight"}))
            .await;
        let types: Vec<&str> = result["content"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(
            types.contains(&"resource_link"),
            links,
            "{version:?}: {types:?}"
        );
        assert_eq!(types[0], "text", "{version:?}");
    }
}
