//! Per-user storage quotas, on every backend: off by default; when the
//! operator sets one, a write that would take a user past it is
//! `forbidden` and writes nothing, other users are untouched, and the
//! usage the triggers keep matches what is stored.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::ErrorCode;
use zm_store::{Caller, Limits, Store};

/// The usage row's memory count (0 without a row).
async fn usage_memories(store: &Store, caller: &Caller) -> u64 {
    store
        .storage_usage(&caller.user_id)
        .await
        .expect("usage")
        .map_or(0, |u| u.memories)
}

backend_tests! {
    /// Without a quota nothing is refused and nothing is at quota.
    async fn no_quota_by_default(store: Store, label: &str) {
        assert!(!store.limits().has_quota(), "[{label}] no quota by default");
        let (_, a) = user(&store, "quota-off").await;
        for i in 0..5 {
            mem(&store, &a, label, json!({"content": format!("Unlimited fact {i}."), "scope": "core"})).await;
        }
        assert_eq!(usage_memories(&store, &a).await, 5, "[{label}] usage counted");
        if label == "sqlite" {
            let s = store.storage_summary().await.unwrap();
            assert_eq!((s.users, s.memories, s.users_at_quota), (1, 5, 0), "[{label}] summary");
        }
    }

    /// A memory quota refuses the write past it — `remember` and
    /// `import_memory` alike — with `forbidden`, writing nothing; an exact
    /// duplicate (no new row) still succeeds; forgetting does not free
    /// room; another user is unaffected.
    async fn a_memory_quota_refuses_the_write_past_it(store: Store, label: &str) {
        let store = store.with_limits(Limits {
            quota_memories: Some(3),
            ..Limits::default()
        });
        let (_, a) = user(&store, "quota-a").await;
        let (_, b) = user(&store, "quota-b").await;
        let first = mem(&store, &a, label, json!({"content": "Quota fact one.", "scope": "core"})).await;
        mem(&store, &a, label, json!({"content": "Quota fact two.", "scope": "core"})).await;
        mem(&store, &a, label, json!({"content": "Quota fact three.", "scope": "core"})).await;

        let e = err(
            remember(&store, &a, json!({"content": "Quota fact four.", "scope": "core"})).await,
            ErrorCode::Forbidden,
            label,
            "the fourth memory",
        );
        assert!(e.message.contains("quota") && e.message.contains('3'), "[{label}] message: {}", e.message);
        let e = err(
            call(
                &store,
                &a,
                "import_memory",
                json!({"content": "Imported past the quota.", "kind": "fact", "target": "personal", "source_path": "n.md", "source_hash": "quota-1"}),
            )
            .await,
            ErrorCode::Forbidden,
            label,
            "an import past the quota",
        );
        assert!(e.message.contains("quota"), "[{label}] import message: {}", e.message);
        assert_eq!(owned(&store, &a, label).await, 3, "[{label}] nothing written past the quota");
        assert_eq!(usage_memories(&store, &a).await, 3, "[{label}] usage after refusals");

        // The refused import left no ledger row: once there is room it imports.
        let dup = ok(
            remember(&store, &a, json!({"content": "Quota fact two.", "scope": "core"})).await,
            label,
            "an exact duplicate adds no row",
        );
        assert_eq!(dup.deduplicated, Some(true), "[{label}] deduplicated");

        ok(forget(&store, &a, &first).await, label, "forget");
        err(
            remember(&store, &a, json!({"content": "After forgetting.", "scope": "core"})).await,
            ErrorCode::Forbidden,
            label,
            "forgotten memories still count",
        );

        for i in 0..3 {
            mem(&store, &b, label, json!({"content": format!("B's own fact {i}."), "scope": "core"})).await;
        }
        err(
            remember(&store, &b, json!({"content": "B's fourth.", "scope": "core"})).await,
            ErrorCode::Forbidden,
            label,
            "B has the same quota, counted apart",
        );
        assert_eq!(usage_memories(&store, &b).await, 3, "[{label}] B's usage");

        let raised = store.clone().with_limits(Limits {
            quota_memories: Some(4),
            ..Limits::default()
        });
        let out = ok(
            call(
                &raised,
                &a,
                "import_memory",
                json!({"content": "Imported past the quota.", "kind": "fact", "target": "personal", "source_path": "n.md", "source_hash": "quota-1"}),
            )
            .await,
            label,
            "the import once the quota is raised",
        );
        assert_eq!(out["skipped"], json!(false), "[{label}] the refused import claimed nothing");

        let s = store.storage_summary().await.unwrap();
        assert!(s.users_at_quota >= 2, "[{label}] A and B at quota: {s:?}");
        if label == "sqlite" {
            assert_eq!((s.users, s.memories, s.users_at_quota), (2, 7, 2), "[{label}] summary");
        }
    }

    /// A byte quota counts the stored text, `verbatim` included.
    async fn a_byte_quota_counts_the_stored_text(store: Store, label: &str) {
        let (_, a) = user(&store, "quota-bytes").await;
        mem(&store, &a, label, json!({"content": "Small.", "scope": "core"})).await;
        let used = store.storage_usage(&a.user_id).await.unwrap().expect("a row").bytes;
        assert!(used >= 6, "[{label}] at least the content's bytes: {used}");
        let store = store.with_limits(Limits {
            quota_bytes: Some(used + 1_000),
            ..Limits::default()
        });
        mem(&store, &a, label, json!({"content": "Another small fact.", "scope": "core"})).await;
        let e = err(
            remember(
                &store,
                &a,
                json!({"content": "Short content.", "verbatim": "v".repeat(1_000), "scope": "core"}),
            )
            .await,
            ErrorCode::Forbidden,
            label,
            "verbatim past the byte quota",
        );
        assert!(e.message.contains("bytes"), "[{label}] message: {}", e.message);
        assert_eq!(owned(&store, &a, label).await, 2, "[{label}] nothing written");
    }

    /// The usage row follows every write that adds or removes memories:
    /// after remember, move, forget, restore, and `delete_account` (which
    /// leaves no usage behind).
    async fn usage_follows_what_is_stored(store: Store, label: &str) {
        let (_, a) = user(&store, "usage").await;
        let m1 = mem(&store, &a, label, json!({"content": "Usage one.", "scope": "core"})).await;
        mem(&store, &a, label, json!({"content": "Usage two.", "project_hint": "/src/usage-project"})).await;
        let m3 = mem(&store, &a, label, json!({"content": "Usage three.", "scope": "personal"})).await;
        ok(
            call(&store, &a, "move_memories", json!({"memory_ids": [m3], "project_hint": "/src/usage-project"})).await,
            label,
            "move",
        );
        ok(forget(&store, &a, &m1).await, label, "forget");
        ok(restore(&store, &a, &m1).await, label, "restore");
        assert_eq!(usage_memories(&store, &a).await, owned(&store, &a, label).await, "[{label}] usage = owned");
        let before = store.storage_usage(&a.user_id).await.unwrap().unwrap();
        ok(call(&store, &a, "delete_account", json!({})).await, label, "delete_account");
        assert_eq!(usage_memories(&store, &a).await, 0, "[{label}] nothing left after {before:?}");
    }
}
