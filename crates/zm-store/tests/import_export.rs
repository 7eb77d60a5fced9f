//! `import_memory` and `export_memories`, on every backend: imports are
//! idempotent per user and source hash and pass the guard; an export holds
//! the caller's memories (retired ones too) and nobody else's.
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::ErrorCode;
use zm_store::Store;

backend_tests! {
    async fn import_is_idempotent_and_export_is_scoped_to_the_caller(store: Store, l: &str) {
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
