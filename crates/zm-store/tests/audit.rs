//! The audit log, on every backend: write commands are audited — failures
//! too — without content or secrets, newest first; reads are not audited.
//! So are an account's creation and its personal access tokens' creation
//! and revocation.
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::ErrorCode;
use zm_store::{Store, Transport};

backend_tests! {
    async fn write_commands_are_audited_without_content_and_reads_are_not(store: Store, l: &str) {
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
        // The rows come back newest first by occurred_at; ids minted in the
        // same millisecond are in random order, so the second write must
        // happen at a later time than the first.
        store.clock().advance_ms(1_000);
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
        // The account's creation, then the two writes.
        assert_eq!(rows.len(), 3, "[{l}] reads are not audited: {rows:?}");
        assert_eq!(rows[2]["command"], "user.add", "[{l}]");
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

    /// A secret given as an object's key (an unknown field, a key of
    /// `source`) stays out of the log too: not as the payload's key, not
    /// in the refusal's message that names the unknown field; a long key
    /// is kept by its length; an ordinary key stays as it came.
    async fn a_secret_given_as_a_key_stays_out_of_the_log(store: Store, l: &str) {
        let (_, a) = user(&store, "audit-keys").await;
        let secret = format!("ghp_{}", "a1B2c3D4e5".repeat(4));
        let long_key = "k".repeat(200);
        err(call(&store, &a, "remember", json!({"content": "Deploys run on Tuesdays.", "scope": "core", secret.clone(): true})).await, ErrorCode::ValidationFailed, l, "unknown field");
        err(call(&store, &a, "remember", json!({"content": "Deploys run on Tuesdays.", "scope": "core", long_key.clone(): true, "kindd": "fact"})).await, ErrorCode::ValidationFailed, l, "long unknown field");
        let rows = store.audit_rows(&a.user_id, 10).await.unwrap();
        let text = serde_json::to_string(&rows).unwrap();
        assert!(!text.contains(&secret), "[{l}] {text}");
        let payloads: String = rows.iter().map(|r| r["payload"].to_string()).collect();
        assert!(!payloads.contains(&long_key), "[{l}] {payloads}");
        assert!(payloads.contains("kindd") && payloads.contains("200 chars"), "[{l}] {payloads}");
    }

    /// A secret in a field the log keeps whole (an identifier's) is kept
    /// out of it all the same: a `link` to an entity named like a token,
    /// an `import_memory` whose `source_tool` is one, both refused, are
    /// audited with the field's length only; so is an entity's name given
    /// as `dst` (free text), while a memory id there is kept.
    async fn a_secret_in_a_structural_field_stays_out_of_the_log(store: Store, l: &str) {
        let (_, a) = user(&store, "audit-structural").await;
        let secret = format!("ghp_{}", "a1B2c3D4e5".repeat(4));
        err(call(&store, &a, "link", json!({"src": "deploy", "dst": secret, "type": "uses"})).await, ErrorCode::ValidationFailed, l, "link");
        store.clock().advance_ms(1_000);
        err(call(&store, &a, "import_memory", json!({"content": "Deploys go out on Tuesdays.", "kind": "fact", "target": "personal", "source_tool": secret, "source_path": "notes.md", "source_hash": "h-1"})).await, ErrorCode::ValidationFailed, l, "import");
        store.clock().advance_ms(1_000);
        ok(call(&store, &a, "link", json!({"src": "deploy", "dst": "Ada Lovelace", "type": "relates_to"})).await, l, "a named entity");
        store.clock().advance_ms(1_000);
        let note = mem(&store, &a, l, json!({"content": "The deploy script lives in ops/.", "kind": "fact", "scope": "personal"})).await;
        store.clock().advance_ms(1_000);
        let other = mem(&store, &a, l, json!({"content": "Releases are tagged on main.", "kind": "fact", "scope": "personal"})).await;
        store.clock().advance_ms(1_000);
        ok(call(&store, &a, "link", json!({"src": note, "dst": other, "type": "relates_to"})).await, l, "two memories");
        let rows = store.audit_rows(&a.user_id, 20).await.unwrap();
        let text = serde_json::to_string(&rows).unwrap();
        assert!(!text.contains(&secret), "[{l}] {text}");
        assert!(!text.contains("Lovelace"), "[{l}] an entity's name is free text: {text}");
        assert_eq!(rows[0]["payload"]["dst"], serde_json::json!(other), "[{l}] a memory id is kept: {}", rows[0]);
    }

    /// An account's creation and its personal access tokens' creation and
    /// revocation are audited in their own transactions, under the
    /// account, without the secret; a refused revocation leaves no row.
    async fn account_and_token_changes_are_audited_without_secrets(store: Store, l: &str) {
        let (u, _) = user(&store, "audit-tokens").await;
        store.clock().advance_ms(5);
        let (info, secret) = store
            .create_expiring_token(&u.id, Some("laptop"), &["mcp:read"], Some(3_600_000))
            .await
            .unwrap();
        // Rows of one millisecond have no order among them: a step apart.
        store.clock().advance_ms(5);
        ok(store.revoke_token(&u.id, &info.id, Transport::Dashboard).await, l, "revoke");
        err(store.revoke_token(&u.id, &info.id, Transport::Cli).await, ErrorCode::NotFound, l, "revoke twice");
        let rows = store.audit_rows(&u.id, 10).await.unwrap();
        let commands: Vec<&str> = rows.iter().filter_map(|r| r["command"].as_str()).collect();
        assert_eq!(commands, ["token.revoke", "token.create", "user.add"], "[{l}] newest first");
        assert!(rows.iter().all(|r| r["outcome"] == "ok"), "[{l}] {rows:?}");
        assert_eq!(rows[1]["payload"]["token_id"], info.id.as_str(), "[{l}]");
        assert_eq!(rows[1]["payload"]["scopes"], json!(["mcp:read"]), "[{l}]");
        assert!(rows[1]["payload"].get("name").is_none(), "[{l}] not the token's name");
        assert_eq!(rows[0]["payload"]["token_id"], info.id.as_str(), "[{l}]");
        // Revoked by the person on the dashboard: theirs, not an agent's.
        assert_eq!(rows[0]["author_kind"], "human", "[{l}] {}", rows[0]);
        assert_eq!(rows[1]["author_kind"], "agent", "[{l}] the CLI's token: {}", rows[1]);
        assert_eq!(rows[2]["payload"]["is_owner"], json!(u.is_owner), "[{l}]");
        let text = serde_json::to_string(&rows).unwrap();
        assert!(!text.contains(&secret), "[{l}] no secret in the audit log");
        assert!(!text.contains(&u.email), "[{l}] no email in the audit log");
    }
}
