//! The content guard on `remember`, on every backend: each of the ten
//! detectors refuses its secret in `content`, `verbatim` and entity names
//! without storing anything or leaking the secret in the error, while
//! ordinary identifiers (emails, hashes, UUIDs, commit ids) are accepted
//! and stored as written.
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::prefixes::Prefix;
use zm_contracts::{ErrorCode, ExportMemoriesInput};
use zm_store::Store;

backend_tests! {
    /// A challenge's secret is refused under the field it was sent in
    /// (`reason` or `evidence`), and nothing is filed.
    async fn a_challenge_names_the_field_that_holds_a_secret(store: Store, label: &str) {
        let (_, caller) = user(&store, "guard-challenge").await;
        let m = mem_id(&store, &caller, label).await;
        let (detector, secret) = fake_secrets().into_iter().next().unwrap();
        for (field, raw) in [
            ("reason", json!({"memory_id": m, "reason": format!("the key {secret} was rotated")})),
            ("evidence", json!({"memory_id": m, "reason": "it was rotated", "evidence": format!("see {secret}")})),
        ] {
            let e = err(call(&store, &caller, "challenge", raw).await, ErrorCode::ValidationFailed, label, field);
            assert_prefix(&e, Prefix::SecretContentRejected, label, field);
            let details = e.details.clone().unwrap_or_default();
            assert_eq!((details["field"].clone(), details["detector"].clone()), (json!(field), json!(detector)), "[{label}] {field}");
        }
        let listed = ok(call(&store, &caller, "list_conflicts", json!({})).await, label, "list");
        assert_eq!(listed["conflicts"], json!([]), "[{label}] nothing filed");
    }

    /// An import's provenance is stored and shown with its memory: a
    /// secret in `source_path`, `source_hash` or `source_tool` is refused
    /// under that field, and nothing is written (not even the ledger row:
    /// the same item without it imports afterwards).
    async fn an_imports_provenance_holds_no_secret(store: Store, label: &str) {
        let (_, caller) = user(&store, "guard-import").await;
        let (detector, secret) = fake_secrets().into_iter().next().unwrap();
        let item = |path: String, hash: String, tool: Option<String>| {
            let mut v = json!({"content": "The deploy key is in the vault.", "kind": "fact", "target": "personal", "source_path": path, "source_hash": hash});
            if let Some(t) = tool {
                v["source_tool"] = json!(t);
            }
            v
        };
        for (field, raw) in [
            ("source_path", item(format!("notes/{secret}.md"), "h-guard-1".into(), None)),
            ("source_hash", item("notes.md".into(), secret.clone(), None)),
            ("source_tool", item("notes.md".into(), "h-guard-1".into(), Some(format!("tool {secret}")))),
        ] {
            let e = err(call(&store, &caller, "import_memory", raw).await, ErrorCode::ValidationFailed, label, field);
            assert_prefix(&e, Prefix::SecretContentRejected, label, field);
            let details = e.details.clone().unwrap_or_default();
            assert_eq!((details["field"].clone(), details["detector"].clone()), (json!(field), json!(detector)), "[{label}] {field}");
        }
        let imported = ok(call(&store, &caller, "import_memory", item("notes.md".into(), "h-guard-1".into(), None)).await, label, "the clean item");
        assert_eq!(imported["skipped"], json!(false), "[{label}] nothing was claimed before: {imported}");
    }

    async fn content_guard_refuses_each_detector_in_each_field(store: Store, label: &str) {
        let (_, caller) = user(&store, "guard").await;
        for (i, (detector, secret)) in fake_secrets().into_iter().enumerate() {
            let marker = format!("guardmarker{i}");
            let cases = [
                (
                    "content",
                    json!({"content": format!("{marker} the deploy credential is {secret}"), "scope": "core"}),
                ),
                (
                    "verbatim",
                    json!({"content": format!("{marker} the deploy credential lives in the vault"), "verbatim": format!("use {secret} to deploy"), "scope": "core"}),
                ),
                (
                    "entities[1].name",
                    json!({"content": format!("{marker} the deploy credential lives in the vault"), "entities": [{"name": "vault"}, {"name": secret.clone()}], "scope": "core"}),
                ),
            ];
            for (field, raw) in cases {
                let what = format!("{detector} in {field}");
                let e = err(
                    remember(&store, &caller, raw).await,
                    ErrorCode::ValidationFailed,
                    label,
                    &what,
                );
                assert_prefix(&e, Prefix::SecretContentRejected, label, &what);
                let details = e.details.clone().unwrap_or_default();
                assert_eq!(
                    details["detector"],
                    json!(detector),
                    "[{label}] {what}: detector"
                );
                assert_eq!(details["field"], json!(field), "[{label}] {what}: field");
                let body = e.to_json().to_string();
                assert!(
                    !body.contains(&secret),
                    "[{label}] {what}: the secret leaks in the error body {body}"
                );
                // The masked sample is at most six characters of the secret.
                assert!(
                    !body.contains(&secret[..secret.len().min(12)]),
                    "[{label}] {what}: more than the masked sample leaks"
                );
            }
            // Nothing was stored, in any scope.
            let seen = recall_ids(
                &store,
                &caller,
                label,
                json!({"query": marker, "scopes": ["*"]}),
            )
            .await;
            assert!(
                seen.is_empty(),
                "[{label}] {detector}: refused write stored {seen:?}"
            );
            let seen = recall_ids(
                &store,
                &caller,
                label,
                json!({"query": "deploy credential vault"}),
            )
            .await;
            assert!(
                seen.is_empty(),
                "[{label}] {detector}: refused write stored {seen:?}"
            );
        }
        // Nothing at all was stored for this user, live or retired.
        let export = ok(
            tools(&store)
                .run::<zm_contracts::catalogue::tool::ExportMemories>(
                    &caller,
                    input!(ExportMemoriesInput, &json!({})),
                )
                .await,
            label,
            "export",
        );
        assert_eq!(
            export.count, 0,
            "[{label}] export after refusals: {:?}",
            export.items
        );
    }

    async fn content_guard_accepts_ordinary_identifiers(store: Store, label: &str) {
        let (_, caller) = user(&store, "guardok").await;
        let texts = [
            "Escalations go to alice.smith@example.com and ops-team@corp.example.org.",
            "The release tarball sha256 is e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855.",
            "The tenant id is 123e4567-e89b-12d3-a456-426614174000 in staging.",
            "The regression was introduced in commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904 (short 4b825dc).",
            "Risk-assessment-document-for-the-task-runner is in the wiki; ask-the-team-lead first.",
        ];
        for text in texts {
            let out = ok(
                remember(&store, &caller, json!({"content": text, "scope": "core", "verbatim": text, "entities": [{"name": "ops team"}]})).await,
                label,
                text,
            );
            let got = ok(
                store.get_memory(&caller, &out.memory_id).await,
                label,
                "get_memory",
            );
            assert_eq!(got.content, text, "[{label}] stored as written");
        }
    }
}

/// A memory of the caller's to challenge.
async fn mem_id(store: &Store, caller: &zm_store::Caller, label: &str) -> String {
    let out = ok(
        remember(
            store,
            caller,
            json!({"content": "The deploy key lives in the vault.", "scope": "core"}),
        )
        .await,
        label,
        "remember",
    );
    out.memory_id.as_str().to_string()
}
