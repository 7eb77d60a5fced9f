//! Batched writes (`ToolService::run_batch`), on every backend: many calls
//! of one write tool in one transaction, each in its own savepoint — a
//! refused call leaves nothing, the others land, every call is audited and
//! counted like a single call.

mod common;

use common::*;
use serde_json::{Value, json};
use zm_contracts::catalogue::tool;
use zm_contracts::{ErrorCode, ImportMemoryInput, RecallInput, ToolName, parse_input};
use zm_store::{Caller, Grant, Limits, Store, ToolService, Transport};

fn import(content: &str, hash: &str) -> ImportMemoryInput {
    parse_input(&json!({
        "content": content,
        "kind": "fact",
        "target": "personal",
        "source_path": "notes/batch.md",
        "source_hash": hash,
    }))
    .expect("a valid import")
}

/// The tool calls' audit rows (not the account's creation), sorted.
fn audited(rows: &[Value]) -> Vec<String> {
    let mut v: Vec<String> = rows
        .iter()
        .filter(|r| r["command"] != "user.add")
        .map(|r| {
            format!(
                "{} {}",
                r["command"].as_str().unwrap_or("?"),
                r["outcome"].as_str().unwrap_or("?")
            )
        })
        .collect();
    v.sort();
    v
}

backend_tests! {
    /// Good imports land; a secret, an over-long text and a repeated source
    /// hash are answered one by one and leave nothing half-written; one
    /// audit row per call, in the batch's transaction.
    async fn a_batch_lands_the_good_calls_and_refuses_the_bad_alone(store: Store, label: &str) {
        let store = store.with_limits(Limits {
            max_text_chars: 2_000,
            ..Limits::default()
        });
        let tools = ToolService::new(store.clone());
        let (_, caller) = user(&store, "batch").await;
        let inputs = vec![
            import("Batch fact one.", "b-1"),
            import("The deploy key is AKIAIOSFODNN7EXAMPLE here.", "b-2"),
            import("Batch fact three.", "b-3"),
            import(&"x".repeat(2_001), "b-4"),
            import("Batch fact three, again under the same hash.", "b-3"),
            import("Batch fact six.", "b-6"),
        ];
        let results = tools
            .run_batch::<tool::ImportMemory>(&caller, inputs)
            .await
            .expect("the batch commits");
        let outcome: Vec<String> = results
            .iter()
            .map(|r| match r {
                Ok(o) if o.skipped => "skipped".to_string(),
                Ok(_) => "imported".to_string(),
                Err(e) => e.code.as_str().to_string(),
            })
            .collect();
        assert_eq!(
            outcome,
            ["imported", "validation_failed", "imported", "validation_failed", "skipped", "imported"],
            "[{label}] {results:?}"
        );
        assert_eq!(owned(&store, &caller, label).await, 3, "[{label}] three landed");
        // The refused ones claimed no source hash: they import once fixed.
        let again = tools
            .run_batch::<tool::ImportMemory>(&caller, vec![import("A clean second attempt.", "b-2"), import("Short now.", "b-4")])
            .await
            .unwrap();
        assert!(again.iter().all(|r| matches!(r, Ok(o) if !o.skipped)), "[{label}] {again:?}");
        let rows = store.audit_rows(&caller.user_id, 100).await.unwrap();
        assert_eq!(
            audited(&rows),
            [
                "import_memory error", "import_memory error",
                "import_memory ok", "import_memory ok", "import_memory ok", "import_memory ok",
                "import_memory ok", "import_memory ok",
            ],
            "[{label}] one audit row per call"
        );
        let counted = |code| tools.metrics().count(ToolName::ImportMemory, Transport::Internal, code);
        assert_eq!(
            (counted(None), counted(Some(ErrorCode::ValidationFailed))),
            (6, 2),
            "[{label}] every call counted"
        );
    }

    /// A quota reached mid-batch refuses the calls past it; the earlier
    /// ones stay.
    async fn a_quota_stops_a_batch_midway(store: Store, label: &str) {
        let store = store.with_limits(Limits {
            quota_memories: Some(2),
            ..Limits::default()
        });
        let tools = ToolService::new(store.clone());
        let (_, caller) = user(&store, "batch-quota").await;
        let results = tools
            .run_batch::<tool::ImportMemory>(
                &caller,
                (0..4).map(|i| import(&format!("Quota batch {i}."), &format!("q-{i}"))).collect(),
            )
            .await
            .unwrap();
        let codes: Vec<Option<ErrorCode>> = results.iter().map(|r| r.as_ref().err().map(|e| e.code)).collect();
        assert_eq!(codes, [None, None, Some(ErrorCode::Forbidden), Some(ErrorCode::Forbidden)], "[{label}]");
        assert_eq!(owned(&store, &caller, label).await, 2, "[{label}]");
    }

    /// A read-only caller's batch writes nothing; a read tool is not batched.
    async fn a_batch_is_authorised_like_single_calls(store: Store, label: &str) {
        let tools = ToolService::new(store.clone());
        let (_, caller) = user(&store, "batch-ro").await;
        let read_only = Caller { grant: Grant::ReadOnly, ..caller.clone() };
        let results = tools
            .run_batch::<tool::ImportMemory>(&read_only, vec![import("Not with a read token.", "ro-1")])
            .await
            .unwrap();
        assert!(matches!(&results[0], Err(e) if e.code == ErrorCode::Forbidden), "[{label}] {results:?}");
        assert_eq!(owned(&store, &caller, label).await, 0, "[{label}]");
        let recall: RecallInput = parse_input(&json!({"query": "anything"})).unwrap();
        let e = tools.run_batch::<tool::Recall>(&caller, vec![recall]).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal, "[{label}]");
    }
}
