//! Free-text limits, on every backend: `content` and `verbatim` of
//! `remember` and `import_memory` hold at most `max_text_chars` characters
//! (64 Ki by default, configurable); longer is `validation_failed` naming
//! the field and the limit, and writes nothing.

mod common;

use common::*;
use serde_json::{Value, json};
use zm_contracts::ErrorCode;
use zm_store::{Limits, Store};

/// The free-text limit, in characters.
const LIMIT: usize = 65_536;

/// A refusal names exactly `fields`, each with the default limit.
fn assert_names(e: &zm_contracts::ToolError, fields: &[&str], label: &str, what: &str) {
    assert_names_limit(e, fields, LIMIT, label, what);
}

/// A refusal names exactly `fields`, each with `limit`.
fn assert_names_limit(
    e: &zm_contracts::ToolError,
    fields: &[&str],
    limit: usize,
    label: &str,
    what: &str,
) {
    let limit = limit.to_string();
    let details = e.details.clone().unwrap_or(Value::Null);
    let named: Vec<&str> = details["fields"]
        .as_array()
        .unwrap_or_else(|| panic!("[{label}] {what}: no fields in {details}"))
        .iter()
        .map(|f| f["path"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(named, fields, "[{label}] {what}: fields named");
    for f in details["fields"].as_array().unwrap() {
        assert!(
            f["reason"].as_str().unwrap_or_default().contains(&limit),
            "[{label}] {what}: the limit in {f}"
        );
    }
    for field in fields {
        assert!(
            e.message.contains(field) && e.message.contains(&limit),
            "[{label}] {what}: message {:?}",
            e.message
        );
    }
}

backend_tests! {
    /// `remember` refuses a `content` or `verbatim` over 64 KiB characters,
    /// naming the field and the limit, and writes nothing; exactly the
    /// limit (in characters, not bytes) is accepted.
    async fn remember_refuses_text_over_the_limit(store: Store, label: &str) {
        let (_, caller) = user(&store, "limit").await;
        let over = "a".repeat(LIMIT + 1);
        let e = err(
            remember(&store, &caller, json!({"content": over, "scope": "core"})).await,
            ErrorCode::ValidationFailed,
            label,
            "content over the limit",
        );
        assert_names(&e, &["content"], label, "content");
        let e = err(
            remember(
                &store,
                &caller,
                json!({"content": "short", "verbatim": over, "scope": "core"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "verbatim over the limit",
        );
        assert_names(&e, &["verbatim"], label, "verbatim");
        let e = err(
            remember(
                &store,
                &caller,
                json!({"content": over, "verbatim": over, "scope": "core"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "both over the limit",
        );
        assert_names(&e, &["content", "verbatim"], label, "both");
        assert_eq!(owned(&store, &caller, label).await, 0, "[{label}] nothing written");

        // The limit is in characters: 65,536 two-byte characters fit.
        let at_limit = "é".repeat(LIMIT);
        ok(
            remember(&store, &caller, json!({"content": at_limit, "scope": "core"})).await,
            label,
            "content at the limit",
        );
        assert_eq!(owned(&store, &caller, label).await, 1, "[{label}] written");
    }

    /// `import_memory` refuses a `content` or `verbatim` over the limit and
    /// records nothing: the same import, within the limit, is not skipped.
    async fn import_refuses_text_over_the_limit(store: Store, label: &str) {
        let (_, caller) = user(&store, "limit-import").await;
        let import = |content: String, verbatim: Option<String>| {
            let mut args = json!({
                "content": content,
                "kind": "fact",
                "target": "personal",
                "source_path": "notes/limits.md",
                "source_hash": "limits-0001",
            });
            if let Some(v) = verbatim {
                args["verbatim"] = json!(v);
            }
            args
        };
        let over = "b".repeat(LIMIT + 1);
        let e = err(
            call(&store, &caller, "import_memory", import(over.clone(), None)).await,
            ErrorCode::ValidationFailed,
            label,
            "import content over the limit",
        );
        assert_names(&e, &["content"], label, "import content");
        let e = err(
            call(&store, &caller, "import_memory", import("short".into(), Some(over))).await,
            ErrorCode::ValidationFailed,
            label,
            "import verbatim over the limit",
        );
        assert_names(&e, &["verbatim"], label, "import verbatim");
        assert_eq!(owned(&store, &caller, label).await, 0, "[{label}] nothing written");

        let out = ok(
            call(&store, &caller, "import_memory", import("b".repeat(LIMIT), None)).await,
            label,
            "import at the limit",
        );
        assert_eq!(out["skipped"], json!(false), "[{label}] the refused import left no ledger row");
        assert_eq!(owned(&store, &caller, label).await, 1, "[{label}] written");
    }

    /// The highest limit the server allows (1 Mi characters) stores a
    /// memory of as many distinct words, found by its first word: on
    /// PostgreSQL its full-text column indexes the first 200,000
    /// characters (a tsvector holds at most 1 MiB of words; the insert
    /// failed `internal`).
    async fn a_memory_at_the_highest_limit_is_stored_and_found(store: Store, label: &str) {
        const HIGHEST: usize = 1_048_576;
        let store = store.with_limits(Limits {
            max_text_chars: HIGHEST,
            ..Limits::default()
        });
        let (_, caller) = user(&store, "limit-highest").await;
        let mut content = String::from("Zanzibarite appears first in this dump.");
        let mut i = 0u64;
        while content.len() < HIGHEST - 16 {
            content.push_str(&format!(" q{i:x}z"));
            i += 1;
        }
        assert!(content.chars().count() <= HIGHEST);
        let out = ok(
            remember(&store, &caller, json!({"content": content, "scope": "core"})).await,
            label,
            "a memory of a million characters",
        );
        let found = recall_ids(&store, &caller, label, json!({"query": "zanzibarite"})).await;
        assert_eq!(found, vec![out.memory_id.to_string()], "[{label}] found by its first word");
    }

    /// The operator's `max_text_chars` is the limit every write obeys: one
    /// character over it is refused with that number, exactly it is
    /// accepted, and the default limit no longer applies.
    async fn the_configured_limit_is_the_limit(store: Store, label: &str) {
        const CONFIGURED: usize = 2_000;
        let store = store.with_limits(Limits {
            max_text_chars: CONFIGURED,
            ..Limits::default()
        });
        let (_, caller) = user(&store, "limit-knob").await;
        let e = err(
            remember(
                &store,
                &caller,
                json!({"content": "c".repeat(CONFIGURED + 1), "scope": "core"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "content over the configured limit",
        );
        assert_names_limit(&e, &["content"], CONFIGURED, label, "configured");
        let e = err(
            call(
                &store,
                &caller,
                "import_memory",
                json!({
                    "content": "short",
                    "verbatim": "v".repeat(CONFIGURED + 1),
                    "kind": "fact",
                    "target": "personal",
                    "source_path": "notes/knob.md",
                    "source_hash": "knob-0001",
                }),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "import verbatim over the configured limit",
        );
        assert_names_limit(&e, &["verbatim"], CONFIGURED, label, "configured import");
        assert_eq!(owned(&store, &caller, label).await, 0, "[{label}] nothing written");
        ok(
            remember(
                &store,
                &caller,
                json!({"content": "c".repeat(CONFIGURED), "scope": "core"}),
            )
            .await,
            label,
            "content at the configured limit",
        );
        assert_eq!(owned(&store, &caller, label).await, 1, "[{label}] written");
    }

    /// An item imported while the limit was higher is skipped as imported
    /// before once the operator lowers it, not refused as too long: a
    /// re-run of a finished import still adds nothing and fails nothing.
    async fn an_item_imported_before_a_lower_limit_is_skipped(store: Store, label: &str) {
        let (_, caller) = user(&store, "limit-lowered").await;
        let item = json!({
            "content": "w".repeat(3_000),
            "kind": "fact",
            "target": "personal",
            "source_path": "notes/long.md",
            "source_hash": "long-0001",
        });
        let first = ok(call(&store, &caller, "import_memory", item.clone()).await, label, "import under the default limit");
        assert_eq!(first["skipped"], json!(false), "[{label}]");
        let lowered = store.with_limits(Limits {
            max_text_chars: 2_000,
            ..Limits::default()
        });
        let again = ok(call(&lowered, &caller, "import_memory", item).await, label, "the same item under a lower limit");
        assert_eq!(
            (again["skipped"].clone(), again["memory_id"].clone()),
            (json!(true), first["memory_id"].clone()),
            "[{label}] imported before"
        );
        let fresh = json!({
            "content": "w".repeat(3_000),
            "kind": "fact",
            "target": "personal",
            "source_path": "notes/long.md",
            "source_hash": "long-0002",
        });
        err(call(&lowered, &caller, "import_memory", fresh).await, ErrorCode::ValidationFailed, label, "a new item over the lower limit");
    }
}
