//! Behaviour of the store's part-2 operations on every backend: link,
//! entities, share, move_memories, challenge and the conflict tools,
//! promote_rule and rule delivery, import/export and delete_account — and
//! isolation between two users for each of them.

mod common;

use common::*;
use serde_json::{Value, json};
use zm_contracts::prefixes::Prefix;
use zm_contracts::{ErrorCode, ToolError, ToolName};
use zm_store::{Caller, Store};

async fn call(store: &Store, caller: &Caller, tool: &str, args: Value) -> Result<Value, ToolError> {
    tools(store)
        .call(
            caller,
            ToolName::parse(tool).expect("a catalogue tool"),
            &args,
        )
        .await
        .map(|out| out.to_json())
}

async fn mem(store: &Store, caller: &Caller, label: &str, args: Value) -> String {
    ok(
        call(store, caller, "remember", args).await,
        label,
        "remember",
    )["memory_id"]
        .as_str()
        .unwrap()
        .to_string()
}

const NEVER: &str = "mem_0000000000000000.0000000000";

#[tokio::test]
async fn link_entities_memories_and_isolation() {
    for (label, store) in backends().await {
        let (_, a) = user(&store, "link-a").await;
        let (_, b) = user(&store, "link-b").await;
        let l = label.as_str();
        let e = ok(
            call(
                &store,
                &a,
                "link",
                json!({"src": "Web App", "dst": "PostgreSQL", "type": "depends_on"}),
            )
            .await,
            l,
            "edge",
        );
        assert_eq!(
            (e["kind"].as_str(), e["created"].as_bool()),
            (Some("entity_edge"), Some(true)),
            "[{l}]"
        );
        // The match key ignores case, spaces, `-` and `_`: the same edge again.
        let again = ok(
            call(
                &store,
                &a,
                "link",
                json!({"src": "web_app", "dst": "postgre-sql", "type": "depends_on"}),
            )
            .await,
            l,
            "repeat",
        );
        assert_eq!(again["created"], false, "[{l}]");
        assert_eq!(again["src_id"], e["src_id"], "[{l}]");
        err(
            call(
                &store,
                &a,
                "link",
                json!({"src": NEVER, "dst": "PostgreSQL", "type": "relates_to"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "mixed endpoints",
        );
        err(
            call(
                &store,
                &a,
                "link",
                json!({"src": "A", "dst": "B", "type": "supersedes"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "memory type between entities",
        );
        let secret = format!("ghp_{}", "a1B2c3D4e5".repeat(4));
        let refused = err(
            call(
                &store,
                &a,
                "link",
                json!({"src": secret, "dst": "B", "type": "uses"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "secret name",
        );
        assert!(
            Prefix::SecretContentRejected.matches(&refused.message),
            "[{l}] {refused}"
        );
        // Entities: A sees them, B does not.
        let list = ok(
            call(&store, &a, "entities", json!({"query": "postgre"})).await,
            l,
            "entities",
        );
        assert_eq!(
            list["entities"].as_array().unwrap().len(),
            1,
            "[{l}] {list}"
        );
        let theirs = ok(
            call(&store, &b, "entities", json!({"scope": "*"})).await,
            l,
            "B entities",
        );
        assert!(
            theirs["entities"].as_array().unwrap().is_empty(),
            "[{l}] B sees {theirs}"
        );
        // Memory links: contradicts files a pair conflict; foreign ids read as missing.
        let m1 = mem(
            &store,
            &a,
            l,
            json!({"content": "The API listens on port 8080.", "scope": "core"}),
        )
        .await;
        let m2 = mem(
            &store,
            &a,
            l,
            json!({"content": "The API listens on port 9090 behind the proxy.", "scope": "core"}),
        )
        .await;
        let link = ok(
            call(
                &store,
                &a,
                "link",
                json!({"src": m1, "dst": m2, "type": "contradicts"}),
            )
            .await,
            l,
            "contradicts",
        );
        assert_eq!(link["kind"], "memory_link", "[{l}]");
        let conflicts = ok(
            call(
                &store,
                &a,
                "list_conflicts",
                json!({"verdict": "contradiction"}),
            )
            .await,
            l,
            "list",
        );
        assert_eq!(
            conflicts["conflicts"].as_array().unwrap().len(),
            1,
            "[{l}] {conflicts}"
        );
        let foreign = err(
            call(
                &store,
                &b,
                "link",
                json!({"src": m1, "dst": NEVER.replace('0', "1"), "type": "relates_to"}),
            )
            .await,
            ErrorCode::NotFound,
            l,
            "B links A's memory",
        );
        let missing = err(
            call(
                &store,
                &b,
                "link",
                json!({"src": NEVER, "dst": NEVER.replace('0', "1"), "type": "relates_to"}),
            )
            .await,
            ErrorCode::NotFound,
            l,
            "never existed",
        );
        assert_eq!(
            foreign.message.replace(&m1, "<id>"),
            missing.message.replace(NEVER, "<id>"),
            "[{l}]"
        );
    }
}

#[tokio::test]
async fn share_and_move_with_per_item_failures() {
    for (label, store) in backends().await {
        let l = label.as_str();
        let (_, a) = user(&store, "share-a").await;
        let (_, b) = user(&store, "share-b").await;
        let project = project_of(&store, &a, l, "/src/share-project").await;
        let m = mem(&store, &a, l, json!({"content": "Releases are cut on Tuesdays.", "scope": "personal", "kind": "convention"})).await;
        let out = ok(
            call(
                &store,
                &a,
                "share",
                json!({"memory_id": m, "scope": project}),
            )
            .await,
            l,
            "share",
        );
        assert_eq!(
            (out["shared"].as_bool(), out["scope"].as_str()),
            (Some(true), Some(project.as_str())),
            "[{l}]"
        );
        let again = ok(
            call(
                &store,
                &a,
                "share",
                json!({"memory_id": m, "scope": project}),
            )
            .await,
            l,
            "share again",
        );
        assert_eq!(again, out, "[{l}] re-sharing changes nothing");
        err(
            call(
                &store,
                &a,
                "share",
                json!({"memory_id": NEVER, "scope": project}),
            )
            .await,
            ErrorCode::NotFound,
            l,
            "unknown",
        );
        err(
            call(
                &store,
                &b,
                "share",
                json!({"memory_id": m, "scope": "proj.someone.x"}),
            )
            .await,
            ErrorCode::Forbidden,
            l,
            "B into a scope B cannot write",
        );
        let b_project = project_of(&store, &b, l, "/src/b-project").await;
        err(
            call(
                &store,
                &b,
                "share",
                json!({"memory_id": m, "scope": b_project}),
            )
            .await,
            ErrorCode::NotFound,
            l,
            "B shares A's memory",
        );
        err(
            call(
                &store,
                &a,
                "share",
                json!({"memory_id": m, "scope": b_project}),
            )
            .await,
            ErrorCode::Forbidden,
            l,
            "A into B's project",
        );
        // move_memories: the good ones move, the rest are listed.
        let ok1 = mem(&store, &a, l, json!({"content": "Use pnpm in the web workspace.", "scope": "personal", "kind": "convention"})).await;
        let gone = mem(
            &store,
            &a,
            l,
            json!({"content": "Old build step.", "scope": "personal"}),
        )
        .await;
        ok(
            call(&store, &a, "forget", json!({"memory_id": gone})).await,
            l,
            "forget",
        );
        let b_mem = mem(
            &store,
            &b,
            l,
            json!({"content": "B's own note.", "scope": "personal"}),
        )
        .await;
        let moved = ok(call(&store, &a, "move_memories", json!({"memory_ids": [ok1, gone, b_mem, NEVER], "project_hint": "/src/share-project"})).await, l, "move");
        assert_eq!(moved["scope"], project, "[{l}]");
        assert_eq!(moved["moved"], json!([ok1]), "[{l}] {moved}");
        let failed: Vec<(String, String)> = moved["failed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["memory_id"].as_str().unwrap().to_string(),
                    f["error"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            failed,
            vec![
                (gone.clone(), "invalidated".into()),
                (b_mem.clone(), "not found".into()),
                (NEVER.into(), "not found".into())
            ],
            "[{l}]"
        );
        err(
            call(&store, &a, "move_memories", json!({"memory_ids": [ok1]})).await,
            ErrorCode::ValidationFailed,
            l,
            "no target",
        );
        err(
            call(
                &store,
                &b,
                "move_memories",
                json!({"memory_ids": [b_mem], "scope": project}),
            )
            .await,
            ErrorCode::Forbidden,
            l,
            "B into A's project",
        );
    }
}

#[tokio::test]
async fn conflicts_challenge_list_get_resolve() {
    for (label, store) in backends().await {
        let l = label.as_str();
        let (_, a) = user(&store, "conf-a").await;
        let (_, b) = user(&store, "conf-b").await;
        let m = mem(
            &store,
            &a,
            l,
            json!({"content": "Staging deploys need a manual approval.", "scope": "core"}),
        )
        .await;
        let c = ok(call(&store, &a, "challenge", json!({"memory_id": m, "reason": "approvals were automated", "evidence": "see the pipeline"})).await, l, "challenge");
        assert_eq!(c["already_pending"], false, "[{l}]");
        let dispute = c["dispute_id"].as_str().unwrap().to_string();
        let again = ok(
            call(
                &store,
                &a,
                "challenge",
                json!({"memory_id": m, "reason": "again"}),
            )
            .await,
            l,
            "challenge again",
        );
        assert_eq!(
            (
                again["dispute_id"].as_str(),
                again["already_pending"].as_bool()
            ),
            (Some(dispute.as_str()), Some(true)),
            "[{l}]"
        );
        let hits = ok(
            call(
                &store,
                &a,
                "recall",
                json!({"query": "staging deploys approval", "scopes": ["*"]}),
            )
            .await,
            l,
            "recall",
        );
        assert_eq!(hits["memories"][0]["disputed"], true, "[{l}] {hits}");
        assert_eq!(hits["memories"][0]["dispute_id"], dispute.as_str(), "[{l}]");
        let got = ok(
            call(&store, &a, "get_conflict", json!({"dispute_id": dispute})).await,
            l,
            "get",
        );
        assert_eq!(got["conflict"]["verdict"], "challenged", "[{l}]");
        assert!(
            got["conflict"]["rationale"]
                .as_str()
                .unwrap()
                .contains("Evidence: see the pipeline"),
            "[{l}]"
        );
        // B: A's dispute reads exactly like one that never existed.
        let foreign = err(
            call(&store, &b, "get_conflict", json!({"dispute_id": dispute})).await,
            ErrorCode::NotFound,
            l,
            "B get",
        );
        let never = err(
            call(
                &store,
                &b,
                "get_conflict",
                json!({"dispute_id": "mrq_0000000000000000.0000000000"}),
            )
            .await,
            ErrorCode::NotFound,
            l,
            "never",
        );
        assert_eq!(foreign.message, never.message, "[{l}]");
        err(
            call(
                &store,
                &b,
                "resolve_conflict",
                json!({"dispute_id": dispute, "retire": true}),
            )
            .await,
            ErrorCode::NotFound,
            l,
            "B resolve",
        );
        assert!(
            ok(
                call(&store, &b, "list_conflicts", json!({})).await,
                l,
                "B list"
            )["conflicts"]
                .as_array()
                .unwrap()
                .is_empty(),
            "[{l}]"
        );
        // Single-subject outcomes.
        err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": dispute}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "no decision",
        );
        err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": dispute, "winner": NEVER}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "winner not the subject",
        );
        ok(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": dispute, "keep_both": true}),
            )
            .await,
            l,
            "uphold",
        );
        err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": dispute, "keep_both": true}),
            )
            .await,
            ErrorCode::Conflict,
            l,
            "not pending",
        );
        let dismissed = ok(
            call(&store, &a, "list_conflicts", json!({"status": "dismissed"})).await,
            l,
            "dismissed",
        );
        assert_eq!(dismissed["conflicts"].as_array().unwrap().len(), 1, "[{l}]");
        let second = ok(
            call(
                &store,
                &a,
                "challenge",
                json!({"memory_id": m, "reason": "still wrong"}),
            )
            .await,
            l,
            "challenge 2",
        );
        ok(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": second["dispute_id"], "retire": true}),
            )
            .await,
            l,
            "retire",
        );
        err(
            call(&store, &a, "forget", json!({"memory_id": m})).await,
            ErrorCode::Conflict,
            l,
            "retired memory is invalidated",
        );
        err(
            call(
                &store,
                &a,
                "challenge",
                json!({"memory_id": m, "reason": "x"}),
            )
            .await,
            ErrorCode::Conflict,
            l,
            "challenge an invalidated memory",
        );
        // A pair: the winner supersedes the loser.
        let p1 = mem(
            &store,
            &a,
            l,
            json!({"content": "The queue is RabbitMQ.", "scope": "core"}),
        )
        .await;
        let p2 = mem(
            &store,
            &a,
            l,
            json!({"content": "The queue moved to NATS JetStream.", "scope": "core"}),
        )
        .await;
        ok(
            call(
                &store,
                &a,
                "link",
                json!({"src": p1, "dst": p2, "type": "contradicts"}),
            )
            .await,
            l,
            "contradicts",
        );
        let pair = ok(
            call(
                &store,
                &a,
                "list_conflicts",
                json!({"verdict": "contradiction"}),
            )
            .await,
            l,
            "pair",
        )["conflicts"][0]["dispute_id"]
            .as_str()
            .unwrap()
            .to_string();
        err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": pair, "retire": true}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "retire a pair",
        );
        err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": pair, "winner": m}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "winner outside the pair",
        );
        ok(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": pair, "winner": p2}),
            )
            .await,
            l,
            "winner",
        );
        let row = store
            .get_memory(&a, &zm_contracts::MemoryId::parse(&p1).unwrap())
            .await
            .unwrap();
        assert_eq!(
            row.superseded_by.as_ref().map(|s| s.as_str()),
            Some(p2.as_str()),
            "[{l}] the supersede chain"
        );
        assert!(row.invalidated_at.is_some(), "[{l}]");
        let ids = recall_ids(
            &store,
            &a,
            l,
            json!({"query": "queue RabbitMQ NATS", "scopes": ["*"]}),
        )
        .await;
        assert!(ids.contains(&p2) && !ids.contains(&p1), "[{l}] {ids:?}");
        ok(
            call(&store, &a, "restore_memory", json!({"memory_id": p1})).await,
            l,
            "restore the loser",
        );
    }
}

#[tokio::test]
async fn a_near_identical_memory_files_an_unjudged_pair() {
    for (label, store) in backends().await {
        let l = label.as_str();
        let (_, a) = user(&store, "unjudged").await;
        let text = "The nightly backup job for the billing database runs at two in the morning UTC and keeps thirty days";
        let first = mem(&store, &a, l, json!({"content": text, "scope": "core"})).await;
        let out = ok(
            call(
                &store,
                &a,
                "remember",
                json!({"content": format!("{text}."), "scope": "core"}),
            )
            .await,
            l,
            "near-identical",
        );
        assert_ne!(out["memory_id"], first.as_str(), "[{l}] not exact: stored");
        let conflicts = ok(
            call(&store, &a, "list_conflicts", json!({"verdict": "unjudged"})).await,
            l,
            "list",
        );
        let c = &conflicts["conflicts"][0];
        assert_eq!(c["memory_b"]["id"], first.as_str(), "[{l}] {conflicts}");
        assert!(
            c["confidence"].is_null() && c["rationale"].is_null(),
            "[{l}]"
        );
    }
}

#[tokio::test]
async fn rules_promote_pin_revoke_and_delivery() {
    for (label, store) in backends().await {
        let l = label.as_str();
        let (_, a) = user(&store, "rules-a").await;
        let (_, b) = user(&store, "rules-b").await;
        let pref = mem(&store, &a, l, json!({"content": "Always answer in British English.", "scope": "personal", "kind": "preference"})).await;
        let out = ok(
            call(&store, &a, "promote_rule", json!({"memory_id": pref})).await,
            l,
            "promote",
        );
        assert_eq!(
            (out["target_layer"].as_str(), out["applies_scope"].is_null()),
            (Some("user"), true),
            "[{l}]"
        );
        let project = project_of(&store, &a, l, "/src/rules-project").await;
        let conv = mem(&store, &a, l, json!({"content": "Run make lint before pushing.", "scope": project, "kind": "convention"})).await;
        let out = ok(
            call(
                &store,
                &a,
                "promote_rule",
                json!({"memory_id": conv, "rule_text": "Run `make lint` before every push."}),
            )
            .await,
            l,
            "promote project",
        );
        assert_eq!(
            (out["target_layer"].as_str(), out["applies_scope"].as_str()),
            (Some("project"), Some(project.as_str())),
            "[{l}]"
        );
        let brief = ok(
            call(
                &store,
                &a,
                "build_context",
                json!({"topic": "work", "briefing": true, "project_hint": "/src/rules-project"}),
            )
            .await,
            l,
            "briefing",
        );
        let texts: Vec<&str> = brief["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["text"].as_str().unwrap())
            .collect();
        assert_eq!(
            texts,
            vec![
                "Always answer in British English.",
                "Run `make lint` before every push."
            ],
            "[{l}]"
        );
        // Outside the project only the user layer arrives.
        let plain = ok(
            call(
                &store,
                &a,
                "build_context",
                json!({"topic": "work", "briefing": true}),
            )
            .await,
            l,
            "unpinned briefing",
        );
        assert_eq!(plain["rules"].as_array().unwrap().len(), 1, "[{l}] {plain}");
        // Pinned rules lead.
        store.pin_rule(&a, &conv, true).await.unwrap();
        let brief = ok(
            call(
                &store,
                &a,
                "build_context",
                json!({"topic": "work", "briefing": true, "project_hint": "/src/rules-project"}),
            )
            .await,
            l,
            "briefing 2",
        );
        assert_eq!(
            brief["rules"][0],
            json!({"text": "Run `make lint` before every push.", "pinned": true}),
            "[{l}]"
        );
        // Revoked rules stop; re-promoting needs force.
        store
            .revoke_rule(&a, &pref, "no longer wanted")
            .await
            .unwrap();
        assert!(
            !store
                .user_rules(&a)
                .await
                .unwrap()
                .iter()
                .any(|r| r.text.contains("British")),
            "[{l}]"
        );
        err(
            call(&store, &a, "promote_rule", json!({"memory_id": pref})).await,
            ErrorCode::Conflict,
            l,
            "without force",
        );
        ok(
            call(
                &store,
                &a,
                "promote_rule",
                json!({"memory_id": pref, "force": true}),
            )
            .await,
            l,
            "with force",
        );
        err(
            call(&store, &b, "promote_rule", json!({"memory_id": pref})).await,
            ErrorCode::NotFound,
            l,
            "B promotes A's memory",
        );
        err(
            call(&store, &a, "promote_rule", json!({"memory_id": NEVER})).await,
            ErrorCode::NotFound,
            l,
            "unknown",
        );
        ok(
            call(&store, &a, "forget", json!({"memory_id": conv})).await,
            l,
            "forget",
        );
        err(
            call(&store, &a, "promote_rule", json!({"memory_id": conv})).await,
            ErrorCode::Conflict,
            l,
            "invalidated",
        );
        assert!(
            store.user_rules(&b).await.unwrap().is_empty(),
            "[{l}] B has no rules"
        );
    }
}

#[tokio::test]
async fn import_is_idempotent_and_export_is_scoped_to_the_caller() {
    for (label, store) in backends().await {
        let l = label.as_str();
        let (_, a) = user(&store, "io-a").await;
        let (_, b) = user(&store, "io-b").await;
        let args = json!({"content": "Prefer small pull requests.", "kind": "preference", "target": "personal", "source_path": "CLAUDE.md", "source_hash": "h-1", "source_tool": "claude-code"});
        let first = ok(
            call(&store, &a, "import_memory", args.clone()).await,
            l,
            "import",
        );
        assert_eq!(first["skipped"], false, "[{l}]");
        let second = ok(
            call(&store, &a, "import_memory", args.clone()).await,
            l,
            "import again",
        );
        assert_eq!(
            (second["skipped"].as_bool(), &second["memory_id"]),
            (Some(true), &first["memory_id"]),
            "[{l}]"
        );
        // The same hash for another user is that user's own import.
        let theirs = ok(call(&store, &b, "import_memory", args).await, l, "B import");
        assert_eq!(theirs["skipped"], false, "[{l}]");
        err(call(&store, &a, "import_memory", json!({"content": "x", "kind": "fact", "target": "project", "source_path": "p", "source_hash": "h-2"})).await, ErrorCode::ValidationFailed, l, "project without hint");
        let secret = format!("AKIA{}", "ABCDEFGHIJKLMNOP");
        err(call(&store, &a, "import_memory", json!({"content": format!("key {secret}"), "kind": "fact", "target": "core", "source_path": "p", "source_hash": "h-3"})).await, ErrorCode::ValidationFailed, l, "secret");
        let m = mem(
            &store,
            &a,
            l,
            json!({"content": "Obsolete fact.", "scope": "core"}),
        )
        .await;
        ok(
            call(&store, &a, "forget", json!({"memory_id": m})).await,
            l,
            "forget",
        );
        let export = ok(
            call(&store, &a, "export_memories", json!({})).await,
            l,
            "export",
        );
        let ids: Vec<&str> = export["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect();
        assert_eq!(export["count"], 2, "[{l}] {export}");
        assert!(
            ids.contains(&m.as_str()),
            "[{l}] invalidated memories are exported"
        );
        let item = export["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == first["memory_id"])
            .unwrap();
        assert_eq!(item["source"]["kind"], "import", "[{l}]");
        let b_export = ok(
            call(&store, &b, "export_memories", json!({"scopes": ["*"]})).await,
            l,
            "B export",
        );
        assert_eq!(
            b_export["count"], 1,
            "[{l}] B exports only its own: {b_export}"
        );
    }
}

#[tokio::test]
async fn delete_account_erases_the_caller_and_leaves_others_whole() {
    for (label, store) in backends().await {
        let l = label.as_str();
        let (_, a) = user(&store, "del-a").await;
        let (b_user, b) = user(&store, "del-b").await;
        let a_mem = mem(&store, &a, l, json!({"content": "A keeps this.", "scope": "core", "entities": [{"name": "KeepMe", "type": "tool"}]})).await;
        let project = project_of(&store, &a, l, "/src/shared-team").await;
        store
            .add_scope_member(&a.user_id, &project, &b.user_id, zm_store::Role::Writer)
            .await
            .unwrap();
        let b_mem = mem(&store, &b, l, json!({"content": "B's decision in A's project.", "scope": project, "kind": "decision", "entities": [{"name": "Billing"}]})).await;
        ok(
            call(
                &store,
                &b,
                "share",
                json!({"memory_id": b_mem, "scope": project}),
            )
            .await,
            l,
            "B shares into A's project",
        );
        // A's memory superseded by B's: the pointer is severed, A's row stays.
        let a_old = mem(
            &store,
            &a,
            l,
            json!({"content": "A's old note.", "scope": project}),
        )
        .await;
        ok(
            call(
                &store,
                &a,
                "link",
                json!({"src": a_old, "dst": b_mem, "type": "relates_to"}),
            )
            .await,
            l,
            "link to B's memory",
        );
        let (_, b_token) = store
            .create_token(&b.user_id, None, &["mcp:read"])
            .await
            .unwrap();
        let before = ok(
            call(
                &store,
                &a,
                "export_memories",
                json!({"scopes": ["core", "personal"]}),
            )
            .await,
            l,
            "A before",
        );
        let out = ok(
            call(&store, &b, "delete_account", json!({})).await,
            l,
            "delete",
        );
        assert_eq!(out["subject"], b_user.id.as_str(), "[{l}]");
        assert_eq!(
            (
                out["memories"].as_u64(),
                out["entities"].as_u64(),
                out["auth_deleted"].as_bool()
            ),
            (Some(1), Some(1), Some(true)),
            "[{l}] {out}"
        );
        assert!(
            store.user_by_id(&b.user_id).await.unwrap().is_none(),
            "[{l}]"
        );
        assert!(
            store.authenticate(&b_token).await.unwrap().is_none(),
            "[{l}] B's token is gone"
        );
        let after = ok(
            call(
                &store,
                &a,
                "export_memories",
                json!({"scopes": ["core", "personal"]}),
            )
            .await,
            l,
            "A after",
        );
        assert_eq!(before, after, "[{l}] A's memories are untouched");
        store
            .get_memory(&a, &zm_contracts::MemoryId::parse(&a_mem).unwrap())
            .await
            .expect("A's memory");
        store
            .get_memory(&a, &zm_contracts::MemoryId::parse(&a_old).unwrap())
            .await
            .expect("A's linked memory");
        err(
            store
                .get_memory(&a, &zm_contracts::MemoryId::parse(&b_mem).unwrap())
                .await,
            ErrorCode::NotFound,
            l,
            "B's memory is gone",
        );
        // A still writes in the project.
        ok(
            call(
                &store,
                &a,
                "remember",
                json!({"content": "Still here.", "scope": project}),
            )
            .await,
            l,
            "A writes",
        );
        // Idempotent: a second call erases nothing more.
        let again = ok(
            call(&store, &b, "delete_account", json!({})).await,
            l,
            "again",
        );
        assert_eq!(
            (again["memories"].as_u64(), again["auth_deleted"].as_bool()),
            (Some(0), Some(false)),
            "[{l}]"
        );
    }
}

#[tokio::test]
async fn write_commands_are_audited_without_content_and_reads_are_not() {
    for (label, store) in backends().await {
        let l = label.as_str();
        let (_, a) = user(&store, "audit").await;
        let long = "x".repeat(800);
        ok(
            call(
                &store,
                &a,
                "remember",
                json!({"content": format!("Long memory {long}"), "scope": "core"}),
            )
            .await,
            l,
            "remember",
        );
        let secret = format!("sk-ant-{}", "abcdefghij".repeat(3));
        err(
            call(
                &store,
                &a,
                "remember",
                json!({"content": format!("key {secret}"), "scope": "core"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "secret",
        );
        ok(
            call(&store, &a, "recall", json!({"query": "long"})).await,
            l,
            "recall",
        );
        let rows = store.audit_rows(&a.user_id, 10).await.unwrap();
        assert_eq!(rows.len(), 2, "[{l}] reads are not audited: {rows:?}");
        let text = serde_json::to_string(&rows).unwrap();
        assert!(
            !text.contains(&secret) && !text.contains(&long),
            "[{l}] no secret or long content in the audit log"
        );
        assert_eq!(rows[0]["outcome"], "error", "[{l}]");
        assert_eq!(rows[0]["error_code"], "validation_failed", "[{l}]");
        assert_eq!(rows[1]["command"], "remember", "[{l}]");
        assert_eq!(
            rows[1]["payload"]["scope"], "core",
            "[{l}] structure is kept"
        );
    }
}
