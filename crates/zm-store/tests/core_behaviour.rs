//! Behaviour of the store's part-1 operations on every backend: remember,
//! recall, build_context, forget, restore_memory, close_loop, identity and
//! tokens, scopes and threads.
//!
//! Every test loops over [`common::backends`] (SQLite always, PostgreSQL
//! when `ZM_TEST_DATABASE_URL` is set) and names the backend in each
//! assertion message.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::prefixes::Prefix;
use zm_contracts::{ErrorCode, ExportMemoriesInput, MemoryId, MemoryKind, RecallInput, ToolError};
use zm_store::{SCOPE_READ, SCOPE_WRITE};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

fn assert_prefix(e: &ToolError, prefix: Prefix, label: &str, what: &str) {
    assert_eq!(
        e.code,
        ErrorCode::ValidationFailed,
        "[{label}] {what}: code of {e}"
    );
    assert!(
        e.has_prefix(prefix),
        "[{label}] {what}: message {:?} does not start with {:?}",
        e.message,
        prefix.as_str()
    );
}

/// The message with `id` replaced by a placeholder, so errors about two
/// different ids can be compared.
fn shape(e: &ToolError, id: &str) -> (ErrorCode, String, Option<serde_json::Value>) {
    let details = e
        .details
        .as_ref()
        .map(|d| serde_json::from_str(&d.to_string().replace(id, "<id>")).unwrap());
    (e.code, e.message.replace(id, "<id>"), details)
}

// ---------------------------------------------------------------- routing

#[tokio::test]
async fn write_refusals_and_every_way_out() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, caller) = user(&store, "refuse").await;

        // No scope, no hint, no thread, no attached project.
        let e = err(
            remember(
                &store,
                &caller,
                json!({"content": "The build uses cargo nextest."}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "scope-less write",
        );
        assert_prefix(&e, Prefix::ScopeTargetRequired, label, "scope-less write");
        for way in ["project_hint", "thread", "core", "personal"] {
            assert!(
                e.message.contains(way),
                "[{label}] the refusal names the way out {way:?}: {}",
                e.message
            );
        }

        // A hint that normalises to nothing.
        let e = err(
            remember(
                &store,
                &caller,
                json!({"content": "The build uses cargo nextest.", "project_hint": "///"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "unresolvable hint",
        );
        assert_prefix(&e, Prefix::ProjectHintUnresolvable, label, "hint \"///\"");

        // Nothing was stored by the refusals.
        let seen = recall_ids(
            &store,
            &caller,
            label,
            json!({"query": "nextest", "scopes": ["*"]}),
        )
        .await;
        assert!(seen.is_empty(), "[{label}] refused writes stored {seen:?}");

        // Way out 1 and 2: the shorthands.
        let core = ok(
            remember(
                &store,
                &caller,
                json!({"content": "Rust edition 2024 needs Rust 1.85.", "scope": "core"}),
            )
            .await,
            label,
            "scope core",
        );
        assert_eq!(
            core.scope.as_deref(),
            Some(caller.core_scope().as_str()),
            "[{label}] core"
        );
        let personal = ok(
            remember(
                &store,
                &caller,
                json!({"content": "I prefer short commit subjects.", "kind": "preference", "scope": "personal"}),
            )
            .await,
            label,
            "scope personal",
        );
        assert_eq!(
            personal.scope.as_deref(),
            Some(caller.personal_scope().as_str()),
            "[{label}] personal"
        );

        // Way out 3: a project hint.
        let by_hint = ok(
            remember(
                &store,
                &caller,
                json!({"content": "The API server listens on port 8080.", "project_hint": "/home/dev/src/alpha-service"}),
            )
            .await,
            label,
            "project_hint",
        );
        let project = by_hint.scope.clone().unwrap();
        assert!(
            project.starts_with("proj.") && project.ends_with(".alpha_service"),
            "[{label}] hint routed to {project}"
        );
        // The same hint resolves to the same project again.
        assert_eq!(
            project_of(&store, &caller, label, "/home/dev/src/alpha-service/").await,
            project,
            "[{label}] the binding is stable"
        );

        // Way out 4: a thread token from build_context.
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "port", "briefing": true, "project_hint": "/home/dev/src/alpha-service"}),
            )
            .await,
            label,
            "briefing",
        );
        let thread = ctx.session.unwrap().thread.expect("a thread token");
        let by_thread = ok(
            remember(
                &store,
                &caller,
                json!({"content": "Migrations live in migrations/.", "thread": thread}),
            )
            .await,
            label,
            "thread",
        );
        assert_eq!(
            by_thread.scope.as_deref(),
            Some(project.as_str()),
            "[{label}] thread routes"
        );
        assert_eq!(
            by_thread
                .session
                .as_ref()
                .and_then(|s| s.thread.clone())
                .as_deref(),
            Some(thread.as_str()),
            "[{label}] remember echoes the thread"
        );

        // Way out 5: the connection's attached project.
        let att = attached(&caller, &project);
        let by_session = ok(
            remember(
                &store,
                &att,
                json!({"content": "CI runs on every push to main."}),
            )
            .await,
            label,
            "attached project",
        );
        assert_eq!(
            by_session.scope.as_deref(),
            Some(project.as_str()),
            "[{label}] attached"
        );
        assert_eq!(
            by_session.session.unwrap().attached_project.as_deref(),
            Some(project.as_str()),
            "[{label}] session state"
        );

        // An explicit scope wins over a bad hint (the hint is not resolved).
        let explicit = ok(
            remember(
                &store,
                &caller,
                json!({"content": "Docs are built with mdbook.", "scope": project, "project_hint": "///"}),
            )
            .await,
            label,
            "explicit scope with a bad hint",
        );
        assert_eq!(
            explicit.scope.as_deref(),
            Some(project.as_str()),
            "[{label}] explicit"
        );
    }
}

// ---------------------------------------------------------------- content guard

#[tokio::test]
async fn content_guard_refuses_each_detector_in_each_field() {
    for (label, store) in backends().await {
        let label = label.as_str();
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
}

#[tokio::test]
async fn content_guard_accepts_ordinary_identifiers() {
    for (label, store) in backends().await {
        let label = label.as_str();
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

// ---------------------------------------------------------------- portability

#[tokio::test]
async fn portability_rule_routes_project_kinds_to_the_project() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, caller) = user(&store, "port").await;
        let project = project_of(&store, &caller, label, "git@github.com:acme/widgets.git").await;
        let att = attached(&caller, &project);

        // With a project attached.
        let cases = [
            ("core", "fact", false),
            ("core", "reference", false),
            ("core", "gotcha", false),
            ("core", "decision", true),
            ("core", "convention", true),
            ("core", "preference", true),
            ("core", "task", true),
            ("personal", "preference", false),
            ("personal", "fact", false),
            ("personal", "gotcha", false),
            ("personal", "decision", true),
            ("personal", "convention", true),
            ("personal", "episode", true),
        ];
        for (layer, kind, routed) in cases {
            let what = format!("{layer} + {kind} with a project attached");
            let out = ok(
                remember(
                    &store,
                    &att,
                    json!({"content": format!("Portability probe: a {kind} written to {layer}."), "kind": kind, "scope": layer}),
                )
                .await,
                label,
                &what,
            );
            let layer_scope = if layer == "core" {
                caller.core_scope()
            } else {
                caller.personal_scope()
            };
            if routed {
                assert_eq!(
                    out.scope.as_deref(),
                    Some(project.as_str()),
                    "[{label}] {what}: scope"
                );
                let note = out.routed_to_project.clone().unwrap_or_default();
                assert!(
                    note.contains(&project),
                    "[{label}] {what}: routed_to_project {note:?} names the project"
                );
            } else {
                assert_eq!(
                    out.scope.as_deref(),
                    Some(layer_scope.as_str()),
                    "[{label}] {what}: scope"
                );
                assert_eq!(out.routed_to_project, None, "[{label}] {what}: not routed");
            }
            let stored = ok(
                store.get_memory(&caller, &out.memory_id).await,
                label,
                &what,
            );
            assert_eq!(
                Some(stored.scope),
                out.scope,
                "[{label}] {what}: stored where reported"
            );
        }

        // A live thread is a known project too.
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "x", "project_hint": "git@github.com:acme/widgets.git"}),
            )
            .await,
            label,
            "pinned build_context",
        );
        let thread = ctx.session.unwrap().thread.unwrap();
        let out = ok(
            remember(
                &store,
                &caller,
                json!({"content": "We decided to vendor the protobuf files.", "kind": "decision", "scope": "core", "thread": thread}),
            )
            .await,
            label,
            "core decision with a thread",
        );
        assert_eq!(
            out.scope.as_deref(),
            Some(project.as_str()),
            "[{label}] thread gate"
        );
        assert!(
            out.routed_to_project.is_some(),
            "[{label}] thread gate note"
        );

        // A project named by the write's own hint is a known project too.
        let out = ok(
            remember(
                &store,
                &caller,
                json!({"content": "We use trunk-based development here.", "kind": "convention", "scope": "core", "project_hint": "git@github.com:acme/widgets.git"}),
            )
            .await,
            label,
            "core convention with a hint",
        );
        assert_eq!(
            out.scope.as_deref(),
            Some(project.as_str()),
            "[{label}] hint gate"
        );
        assert!(out.routed_to_project.is_some(), "[{label}] hint gate note");
        let stored = ok(
            store.get_memory(&caller, &out.memory_id).await,
            label,
            "hint gate row",
        );
        assert_eq!(
            stored.source.unwrap_or_default()["routing"]["via"],
            json!("hint"),
            "[{label}] hint gate provenance"
        );
        // ... but a portable kind with a hint stays in core.
        let out = ok(
            remember(
                &store,
                &caller,
                json!({"content": "HTTP 429 means too many requests.", "kind": "fact", "scope": "core", "project_hint": "git@github.com:acme/widgets.git"}),
            )
            .await,
            label,
            "core fact with a hint",
        );
        assert_eq!(
            out.scope.as_deref(),
            Some(caller.core_scope().as_str()),
            "[{label}] fact stays"
        );

        // With no project known, the shorthands are taken at face value.
        for (layer, kind) in [
            ("core", "decision"),
            ("core", "convention"),
            ("personal", "decision"),
        ] {
            let what = format!("{layer} + {kind} with no project");
            let out = ok(
                remember(
                    &store,
                    &caller,
                    json!({"content": format!("Face value probe: a {kind} written to {layer}."), "kind": kind, "scope": layer}),
                )
                .await,
                label,
                &what,
            );
            let expected = if layer == "core" {
                caller.core_scope()
            } else {
                caller.personal_scope()
            };
            assert_eq!(
                out.scope.as_deref(),
                Some(expected.as_str()),
                "[{label}] {what}"
            );
            assert_eq!(out.routed_to_project, None, "[{label}] {what}: not routed");
        }
    }
}

// ---------------------------------------------------------------- dedup and supersede

#[tokio::test]
async fn exact_dedup_only_within_one_scope() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, caller) = user(&store, "dedup").await;
        let text = "The staging cluster runs three replicas.";
        let first = ok(
            remember(&store, &caller, json!({"content": text, "scope": "core"})).await,
            label,
            "first",
        );
        assert_eq!(first.deduplicated, None, "[{label}] first write is new");
        let again = ok(
            remember(
                &store,
                &caller,
                json!({"content": format!("  {text}\n"), "scope": "core"}),
            )
            .await,
            label,
            "identical write",
        );
        assert_eq!(
            again.deduplicated,
            Some(true),
            "[{label}] identical write is absorbed"
        );
        assert_eq!(again.memory_id, first.memory_id, "[{label}] same memory id");

        let other = ok(
            remember(
                &store,
                &caller,
                json!({"content": text, "scope": "personal"}),
            )
            .await,
            label,
            "other scope",
        );
        assert_eq!(other.deduplicated, None, "[{label}] no dedup across scopes");
        assert_ne!(
            other.memory_id, first.memory_id,
            "[{label}] a new memory in another scope"
        );

        let seen = recall_ids(&store, &caller, label, json!({"query": "staging replicas"})).await;
        assert_eq!(seen.len(), 2, "[{label}] exactly two memories: {seen:?}");

        // A forgotten memory does not absorb a new identical write.
        ok(
            forget(&store, &caller, first.memory_id.as_str()).await,
            label,
            "forget",
        );
        let fresh = ok(
            remember(&store, &caller, json!({"content": text, "scope": "core"})).await,
            label,
            "after forget",
        );
        assert_eq!(
            fresh.deduplicated, None,
            "[{label}] no dedup against a retired memory"
        );
        assert_ne!(
            fresh.memory_id, first.memory_id,
            "[{label}] new id after forget"
        );
    }
}

const LONG_ORIGINAL: &str = "The staging database cluster runs PostgreSQL sixteen with the pgvector extension enabled, nightly logical backups shipped to the eu-west object store bucket, connection pooling through pgbouncer in transaction mode, a read replica dedicated to analytics dashboards, and autovacuum tuned aggressively for the events table.";

#[tokio::test]
async fn near_duplicates_are_reported_and_supersedes_retires() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, caller) = user(&store, "neardup").await;
        assert!(LONG_ORIGINAL.chars().count() > 200);
        let old = ok(
            remember(
                &store,
                &caller,
                json!({"content": LONG_ORIGINAL, "scope": "core"}),
            )
            .await,
            label,
            "original",
        );
        let unrelated = ok(
            remember(&store, &caller, json!({"content": "The frontend is written in TypeScript with Svelte.", "scope": "core"})).await,
            label,
            "unrelated",
        );
        let edited = LONG_ORIGINAL.replace("sixteen", "seventeen");
        let new = ok(
            remember(&store, &caller, json!({"content": edited, "scope": "core"})).await,
            label,
            "edit",
        );
        assert_eq!(
            new.deduplicated, None,
            "[{label}] a near-duplicate is not absorbed"
        );
        let similar = new.similar_existing.clone().unwrap_or_default();
        let hit = similar
            .iter()
            .find(|s| s.id == old.memory_id)
            .unwrap_or_else(|| {
                panic!("[{label}] the original is in similar_existing: {similar:?}")
            });
        assert!(
            hit.similarity >= 0.8 && hit.similarity < 1.0,
            "[{label}] similarity {}",
            hit.similarity
        );
        assert!(
            hit.content.chars().count() <= 200,
            "[{label}] preview is capped"
        );
        assert!(
            LONG_ORIGINAL.starts_with(&hit.content),
            "[{label}] preview is the start"
        );
        assert_eq!(hit.kind, MemoryKind::Fact, "[{label}] kind");
        assert_eq!(hit.age_days, 0, "[{label}] age");
        assert!(
            similar
                .iter()
                .all(|s| s.id != unrelated.memory_id && s.id != new.memory_id),
            "[{label}] neither the unrelated memory nor the new one is similar: {similar:?}"
        );
        assert!(
            new.hint.is_some(),
            "[{label}] the hint comes with similar_existing"
        );

        // An unrelated write gets no similar_existing.
        let lone = ok(
            remember(&store, &caller, json!({"content": "Grafana dashboards are provisioned from JSON.", "scope": "core"})).await,
            label,
            "lone",
        );
        assert_eq!(lone.similar_existing, None, "[{label}] nothing similar");

        // `supersedes` retires the target.
        let successor = ok(
            remember(
                &store,
                &caller,
                json!({"content": "The staging database now runs PostgreSQL eighteen.", "scope": "core",
                       "links": [{"dst": old.memory_id.as_str(), "type": "supersedes"}]}),
            )
            .await,
            label,
            "supersede",
        );
        let seen = recall_ids(
            &store,
            &caller,
            label,
            json!({"query": "staging database PostgreSQL", "scopes": ["*"]}),
        )
        .await;
        assert!(
            !seen.contains(&old.memory_id.to_string()),
            "[{label}] the retired memory left recall"
        );
        assert!(
            seen.contains(&successor.memory_id.to_string()),
            "[{label}] successor is live"
        );
        let retired = ok(
            store.get_memory(&caller, &old.memory_id).await,
            label,
            "get retired",
        );
        assert_eq!(
            retired.superseded_by.as_ref(),
            Some(&successor.memory_id),
            "[{label}] superseded_by"
        );
        assert!(retired.invalidated_at.is_some(), "[{label}] invalidated_at");
        err(
            forget(&store, &caller, old.memory_id.as_str()).await,
            ErrorCode::Conflict,
            label,
            "forget a superseded memory",
        );

        // Superseding an open loop closes it.
        let hint = "/work/repos/loopy";
        let task = ok(
            remember(&store, &caller, json!({"content": "Upgrade the TLS certificates before March.", "kind": "task", "project_hint": hint})).await,
            label,
            "task",
        );
        let loops = |o: &zm_contracts::BuildContextOutput| -> Vec<String> {
            o.open_loops.iter().map(|m| m.id.to_string()).collect()
        };
        let before = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "certificates", "briefing": true, "project_hint": hint}),
            )
            .await,
            label,
            "briefing",
        );
        assert!(
            loops(&before).contains(&task.memory_id.to_string()),
            "[{label}] the task is open"
        );
        ok(
            remember(
                &store,
                &caller,
                json!({"content": "The TLS certificates were upgraded on 2 March.", "project_hint": hint,
                       "links": [{"dst": task.memory_id.as_str(), "type": "supersedes"}]}),
            )
            .await,
            label,
            "supersede the task",
        );
        let after = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "certificates", "briefing": true, "project_hint": hint}),
            )
            .await,
            label,
            "briefing",
        );
        assert!(
            !loops(&after).contains(&task.memory_id.to_string()),
            "[{label}] the task is closed"
        );
        assert_eq!(after.open_loops_total, 0, "[{label}] no open loops left");
        err(
            close_loop(&store, &caller, task.memory_id.as_str()).await,
            ErrorCode::Conflict,
            label,
            "close a superseded task",
        );
    }
}

// ---------------------------------------------------------------- read sets

#[tokio::test]
async fn default_read_sets() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, caller) = user(&store, "reads").await;
        let (_, stranger) = user(&store, "reads-other").await;
        let in_alpha = ok(
            remember(&store, &caller, json!({"content": "zebrafish alpha: the alpha service caches sessions.", "project_hint": "/src/alpha"})).await,
            label,
            "alpha",
        );
        let in_beta = ok(
            remember(&store, &caller, json!({"content": "zebrafish beta: the beta service streams events.", "project_hint": "/src/beta"})).await,
            label,
            "beta",
        );
        let in_personal = ok(
            remember(&store, &caller, json!({"content": "zebrafish personal: I like tabs.", "kind": "preference", "scope": "personal"})).await,
            label,
            "personal",
        );
        let in_core = ok(
            remember(
                &store,
                &caller,
                json!({"content": "zebrafish core: UTF-8 everywhere.", "scope": "core"}),
            )
            .await,
            label,
            "core",
        );
        let foreign = ok(
            remember(
                &store,
                &stranger,
                json!({"content": "zebrafish foreign: not yours.", "scope": "core"}),
            )
            .await,
            label,
            "stranger",
        );
        let alpha = in_alpha.scope.clone().unwrap();
        let beta = in_beta.scope.clone().unwrap();
        assert_ne!(alpha, beta, "[{label}] two projects");
        let [a, b, p, c, f] = [&in_alpha, &in_beta, &in_personal, &in_core, &foreign]
            .map(|o| o.memory_id.to_string());
        let sorted = |mut v: Vec<String>| {
            v.sort();
            v
        };

        // Pinned by a hint: the project, personal and core; not the other project.
        let out = ok(
            recall(
                &store,
                &caller,
                json!({"query": "zebrafish", "project_hint": "/src/alpha"}),
            )
            .await,
            label,
            "pinned",
        );
        let ids: Vec<String> = out.memories.iter().map(|m| m.id.to_string()).collect();
        assert_eq!(
            sorted(ids),
            sorted(vec![a.clone(), p.clone(), c.clone()]),
            "[{label}] pinned read set"
        );
        assert_eq!(
            out.project_scope.as_deref(),
            Some(alpha.as_str()),
            "[{label}] project_scope"
        );

        // Nothing pinned: every scope of the user (and nothing of others).
        let ids = recall_ids(&store, &caller, label, json!({"query": "zebrafish"})).await;
        assert_eq!(
            sorted(ids),
            sorted(vec![a.clone(), b.clone(), p.clone(), c.clone()]),
            "[{label}] unpinned"
        );
        let ids = recall_ids(
            &store,
            &caller,
            label,
            json!({"query": "zebrafish", "scopes": ["*"]}),
        )
        .await;
        assert_eq!(
            sorted(ids),
            sorted(vec![a.clone(), b.clone(), p.clone(), c.clone()]),
            "[{label}] *"
        );
        assert!(
            !recall_ids(
                &store,
                &caller,
                label,
                json!({"query": "zebrafish", "scopes": ["*"]})
            )
            .await
            .contains(&f)
        );

        // Explicit scopes are used as given (and win over a hint).
        let ids = recall_ids(
            &store,
            &caller,
            label,
            json!({"query": "zebrafish", "scopes": [beta], "project_hint": "/src/alpha"}),
        )
        .await;
        assert_eq!(ids, vec![b.clone()], "[{label}] explicit project");
        let ids = recall_ids(
            &store,
            &caller,
            label,
            json!({"query": "zebrafish", "scopes": ["core", "personal"]}),
        )
        .await;
        assert_eq!(
            sorted(ids),
            sorted(vec![p.clone(), c.clone()]),
            "[{label}] shorthands"
        );
        let ids = recall_ids(
            &store,
            &caller,
            label,
            json!({"query": "zebrafish", "kinds": ["preference"]}),
        )
        .await;
        assert_eq!(ids, vec![p.clone()], "[{label}] kinds filter");

        // Pinned to beta while the connection is attached to alpha.
        let att = attached(&caller, &alpha);
        let out = ok(
            recall(
                &store,
                &att,
                json!({"query": "zebrafish", "project_hint": "/src/beta"}),
            )
            .await,
            label,
            "cross pin",
        );
        assert_eq!(
            out.project_scope.as_deref(),
            Some(beta.as_str()),
            "[{label}] the read is pinned to beta"
        );
        assert_eq!(
            out.session.as_ref().unwrap().attached_project.as_deref(),
            Some(alpha.as_str()),
            "[{label}] the session stays attached to alpha"
        );
        let ids: Vec<String> = out.memories.iter().map(|m| m.id.to_string()).collect();
        assert_eq!(
            sorted(ids),
            sorted(vec![b.clone(), p.clone(), c.clone()]),
            "[{label}] beta read set"
        );
        // The attached project pins a read with no hint.
        let out = ok(
            recall(&store, &att, json!({"query": "zebrafish"})).await,
            label,
            "attached pin",
        );
        assert_eq!(
            out.project_scope.as_deref(),
            Some(alpha.as_str()),
            "[{label}] attached pin"
        );
        let ids: Vec<String> = out.memories.iter().map(|m| m.id.to_string()).collect();
        assert_eq!(
            sorted(ids),
            sorted(vec![a.clone(), p.clone(), c.clone()]),
            "[{label}] attached read set"
        );
        // An unattached session reports the pin as its attachment.
        let out = ok(
            recall(
                &store,
                &caller,
                json!({"query": "zebrafish", "project_hint": "/src/beta"}),
            )
            .await,
            label,
            "pin",
        );
        assert_eq!(
            out.session.unwrap().attached_project.as_deref(),
            Some(beta.as_str()),
            "[{label}] first attach"
        );

        // A briefing with nothing pinned reads personal and core only.
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "zebrafish", "briefing": true}),
            )
            .await,
            label,
            "unpinned briefing",
        );
        let ids: Vec<String> = ctx.memories.iter().map(|m| m.id.to_string()).collect();
        assert_eq!(
            sorted(ids),
            sorted(vec![p.clone(), c.clone()]),
            "[{label}] unpinned briefing"
        );
        assert_eq!(ctx.project_scope, None, "[{label}] nothing pinned");
        // A pinned briefing reads the project too.
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "zebrafish", "briefing": true, "project_hint": "/src/beta"}),
            )
            .await,
            label,
            "pinned briefing",
        );
        let ids: Vec<String> = ctx.memories.iter().map(|m| m.id.to_string()).collect();
        assert_eq!(
            sorted(ids),
            sorted(vec![b.clone(), p.clone(), c.clone()]),
            "[{label}] pinned briefing"
        );

        // An unresolvable hint never narrows a read.
        let ids = recall_ids(
            &store,
            &caller,
            label,
            json!({"query": "zebrafish", "project_hint": "///"}),
        )
        .await;
        assert_eq!(
            sorted(ids),
            sorted(vec![a, b, p, c]),
            "[{label}] bad hint is ignored"
        );
    }
}

// ---------------------------------------------------------------- threads

#[tokio::test]
async fn thread_tokens_route_across_sessions_and_expire() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, caller) = user(&store, "thread").await;
        let (_, other) = user(&store, "thread-other").await;
        let first = with_session(&caller, "ses_first_connection");
        let ctx = ok(
            build_context(&store, &first, json!({"topic": "setup", "briefing": true, "project_hint": "https://gitlab.com/team/gamma-api.git"})).await,
            label,
            "briefing",
        );
        let project = ctx.project_scope.clone().expect("pinned");
        assert!(
            project.ends_with(".gamma_api"),
            "[{label}] project {project}"
        );
        let token = ctx
            .session
            .as_ref()
            .and_then(|s| s.thread.clone())
            .expect("thread");
        assert!(token.starts_with("thr_"), "[{label}] token {token}");

        // The same conversation asserts the same thread again.
        let again = ok(
            build_context(
                &store,
                &first,
                json!({"topic": "setup", "project_hint": "https://gitlab.com/team/gamma-api"}),
            )
            .await,
            label,
            "second briefing",
        );
        assert_eq!(
            again.session.unwrap().thread.as_deref(),
            Some(token.as_str()),
            "[{label}] same thread"
        );

        // The connection keeps the thread it was given (as zm-mcp's
        // connection state does), so its scope-less writes follow it.
        let first = zm_store::Caller {
            thread: Some(token.clone()),
            ..first
        };
        let own = ok(
            remember(
                &store,
                &first,
                json!({"content": "gamma uses axum for HTTP."}),
            )
            .await,
            label,
            "session write",
        );
        assert_eq!(
            own.scope.as_deref(),
            Some(project.as_str()),
            "[{label}] transport thread routes"
        );

        // A second connection of the same user passes the token.
        let second = with_session(&caller, "ses_second_connection");
        err(
            remember(
                &store,
                &second,
                json!({"content": "gamma deploys with helm."}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "second connection without the token",
        );
        let out = ok(
            remember(
                &store,
                &second,
                json!({"content": "gamma deploys with helm.", "thread": token}),
            )
            .await,
            label,
            "write with the token",
        );
        assert_eq!(
            out.scope.as_deref(),
            Some(project.as_str()),
            "[{label}] the token routes"
        );
        let stored = ok(
            store.get_memory(&caller, &out.memory_id).await,
            label,
            "provenance",
        );
        let source = stored.source.unwrap_or_default();
        assert_eq!(
            source["thread"],
            json!(token),
            "[{label}] provenance thread"
        );
        assert_eq!(
            source["routing"]["via"],
            json!("session"),
            "[{label}] provenance routing"
        );

        // The token pins reads too, and recall echoes it.
        let read = ok(
            recall(&store, &second, json!({"query": "helm", "thread": token})).await,
            label,
            "recall with token",
        );
        assert_eq!(
            read.project_scope.as_deref(),
            Some(project.as_str()),
            "[{label}] token pins reads"
        );
        assert_eq!(
            read.session.unwrap().thread.as_deref(),
            Some(token.as_str()),
            "[{label}] echoed"
        );

        // Another user's token is ignored (fail-open), so nothing routes.
        let e = err(
            remember(
                &store,
                &other,
                json!({"content": "hijack attempt", "thread": token}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "foreign token",
        );
        assert_prefix(&e, Prefix::ScopeTargetRequired, label, "foreign token");
        let other_same_session = with_session(&other, "ses_first_connection");
        let e = err(
            remember(
                &store,
                &other_same_session,
                json!({"content": "hijack attempt"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "foreign session id",
        );
        assert_prefix(&e, Prefix::ScopeTargetRequired, label, "foreign session id");
        let read = ok(
            recall(&store, &other, json!({"query": "helm", "thread": token})).await,
            label,
            "foreign read",
        );
        assert_eq!(
            read.project_scope, None,
            "[{label}] a foreign token pins nothing"
        );
        assert!(read.memories.is_empty(), "[{label}] nothing of the owner");
        assert_eq!(
            read.session.unwrap().thread,
            None,
            "[{label}] a foreign token is not echoed"
        );
        // An unknown, well-formed token is ignored the same way.
        let e = err(
            remember(
                &store,
                &caller,
                json!({"content": "unknown token", "thread": "thr_0123456789abcdef.0123456789"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "unknown token",
        );
        assert_prefix(&e, Prefix::ScopeTargetRequired, label, "unknown token");

        // An explicit scope still records the thread in provenance.
        let explicit = ok(
            remember(
                &store,
                &second,
                json!({"content": "gamma has no GraphQL.", "scope": "core", "thread": token}),
            )
            .await,
            label,
            "explicit scope with a token",
        );
        assert_eq!(
            explicit.scope.as_deref(),
            Some(caller.core_scope().as_str()),
            "[{label}] explicit scope wins"
        );
        let stored = ok(
            store.get_memory(&caller, &explicit.memory_id).await,
            label,
            "provenance",
        );
        assert_eq!(
            stored.source.unwrap_or_default()["thread"],
            json!(token),
            "[{label}] thread marker with explicit scope"
        );

        // A client conversation id asserts its own thread, and the
        // environment wins: a new pin re-pins the conversation with a new
        // token (tokens are self-contained: the earlier one keeps the
        // project it was issued for until it expires).
        let conv = unique("conv-");
        let c1 = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "x", "project_hint": "/src/delta", "conversation_id": conv}),
            )
            .await,
            label,
            "conversation briefing",
        );
        let conv_token = c1.session.unwrap().thread.unwrap();
        assert_ne!(
            conv_token, token,
            "[{label}] a conversation has its own thread"
        );
        let again = ok(
            build_context(
                &store,
                &second,
                json!({"topic": "x", "project_hint": "/src/delta", "conversation_id": conv}),
            )
            .await,
            label,
            "conversation briefing from another connection",
        );
        assert_eq!(
            again.session.unwrap().thread.as_deref(),
            Some(conv_token.as_str()),
            "[{label}] the same conversation and project: the same thread"
        );
        let c2 = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "x", "project_hint": "/src/epsilon", "conversation_id": conv}),
            )
            .await,
            label,
            "conversation re-pinned",
        );
        let repinned = c2.session.unwrap().thread.unwrap();
        assert_ne!(
            repinned, conv_token,
            "[{label}] a re-pin issues a new token"
        );
        let out = ok(
            remember(
                &store,
                &second,
                json!({"content": "epsilon is written in Go.", "thread": repinned}),
            )
            .await,
            label,
            "write on the re-pinned thread",
        );
        assert_eq!(
            out.scope, c2.project_scope,
            "[{label}] the thread follows the environment"
        );
        assert!(
            out.scope.as_deref().unwrap_or("").ends_with(".epsilon"),
            "[{label}] epsilon project"
        );
        let stored = ok(
            store.get_memory(&caller, &out.memory_id).await,
            label,
            "conversation provenance",
        );
        let delta = ok(
            remember(
                &store,
                &second,
                json!({"content": "delta is written in Rust.", "thread": conv_token}),
            )
            .await,
            label,
            "write on the first token of the conversation",
        );
        assert!(
            delta.scope.as_deref().unwrap_or("").ends_with(".delta"),
            "[{label}] an earlier token keeps its project"
        );
        let stored_delta = ok(
            store.get_memory(&caller, &delta.memory_id).await,
            label,
            "conversation provenance",
        );
        assert_eq!(
            stored.source.unwrap_or_default()["conversation"],
            stored_delta.source.unwrap_or_default()["conversation"],
            "[{label}] both tokens stamp the same conversation"
        );

        // Expiry: a day without assertion and the token no longer routes.
        store.clock().advance_ms(25 * HOUR_MS);
        let e = err(
            remember(
                &store,
                &second,
                json!({"content": "gamma uses tokio.", "thread": token}),
            )
            .await,
            ErrorCode::ValidationFailed,
            label,
            "expired token",
        );
        assert_prefix(&e, Prefix::ScopeTargetRequired, label, "expired token");
        let e = err(
            remember(&store, &first, json!({"content": "gamma uses tokio."})).await,
            ErrorCode::ValidationFailed,
            label,
            "expired transport thread",
        );
        assert_prefix(
            &e,
            Prefix::ScopeTargetRequired,
            label,
            "expired transport thread",
        );
        let read = ok(
            recall(&store, &second, json!({"query": "helm", "thread": token})).await,
            label,
            "expired read",
        );
        assert_eq!(
            read.project_scope, None,
            "[{label}] an expired token pins nothing"
        );
    }
}

// ---------------------------------------------------------------- isolation

#[tokio::test]
async fn users_are_isolated_for_every_operation() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, alice) = user(&store, "alice").await;
        let (_, bob) = user(&store, "bob").await;
        let hint = "/home/alice/src/quokka";
        let fact = ok(
            remember(&store, &alice, json!({"content": "quokka launch plan: ship on Friday.", "project_hint": hint, "entities": [{"name": "quokka", "type": "project"}]})).await,
            label,
            "alice fact",
        );
        let task = ok(
            remember(&store, &alice, json!({"content": "quokka task: rotate the signing key.", "kind": "task", "project_hint": hint})).await,
            label,
            "alice task",
        );
        let core = ok(
            remember(
                &store,
                &alice,
                json!({"content": "quokka core: Alice's laptop is a ThinkPad.", "scope": "core"}),
            )
            .await,
            label,
            "alice core",
        );
        let project = fact.scope.clone().unwrap();
        let alice_ids = [&fact, &task, &core].map(|o| o.memory_id.to_string());

        // Reads: nothing of Alice's, however Bob asks.
        for raw in [
            json!({"query": "quokka"}),
            json!({"query": "quokka", "scopes": ["*"]}),
            json!({"query": "quokka", "scopes": [project]}),
            json!({"query": "quokka", "scopes": [alice.core_scope(), alice.personal_scope()]}),
            json!({"query": "quokka", "project_hint": hint}),
            json!({"query": "quokka", "scopes": ["*"], "include_graph": true}),
        ] {
            let out = ok(recall(&store, &bob, raw.clone()).await, label, "bob recall");
            assert!(
                out.memories.is_empty(),
                "[{label}] bob recall {raw} sees {:?}",
                out.memories
            );
            assert!(out.related.is_empty(), "[{label}] bob related {raw}");
        }
        for raw in [
            json!({"topic": "quokka"}),
            json!({"topic": "quokka", "briefing": true, "scopes": ["*"]}),
            json!({"topic": "quokka", "briefing": true, "scopes": [project]}),
            json!({"topic": "quokka", "briefing": true, "project_hint": hint}),
        ] {
            let out = ok(
                build_context(&store, &bob, raw.clone()).await,
                label,
                "bob build_context",
            );
            let all: Vec<String> = out
                .memories
                .iter()
                .chain(&out.linked_memories)
                .chain(&out.recent)
                .chain(&out.open_loops)
                .map(|m| m.id.to_string())
                .collect();
            assert!(
                all.is_empty(),
                "[{label}] bob build_context {raw} sees {all:?}"
            );
            assert_eq!(
                out.open_loops_total, 0,
                "[{label}] bob open_loops_total {raw}"
            );
            assert!(out.entities.is_empty(), "[{label}] bob entities {raw}");
        }
        // Bob's own hint with the same text is Bob's own project.
        let bobs = project_of(&store, &bob, label, hint).await;
        assert_ne!(
            bobs, project,
            "[{label}] the same hint is another project for Bob"
        );

        // Lifecycle on Alice's ids reads exactly like a never-existing id.
        let ghost = MemoryId::generate();
        for id in &alice_ids {
            let pairs = [
                (
                    "forget",
                    forget(&store, &bob, id).await.map(|_| ()),
                    forget(&store, &bob, ghost.as_str()).await.map(|_| ()),
                ),
                (
                    "restore_memory",
                    restore(&store, &bob, id).await.map(|_| ()),
                    restore(&store, &bob, ghost.as_str()).await.map(|_| ()),
                ),
                (
                    "close_loop",
                    close_loop(&store, &bob, id).await.map(|_| ()),
                    close_loop(&store, &bob, ghost.as_str()).await.map(|_| ()),
                ),
                (
                    "get_memory",
                    store
                        .get_memory(&bob, &MemoryId::parse(id).unwrap())
                        .await
                        .map(|_| ()),
                    store.get_memory(&bob, &ghost).await.map(|_| ()),
                ),
            ];
            for (op, foreign, missing) in pairs {
                let a = err(
                    foreign,
                    ErrorCode::NotFound,
                    label,
                    &format!("bob {op} on alice's id"),
                );
                let b = err(
                    missing,
                    ErrorCode::NotFound,
                    label,
                    &format!("bob {op} on a ghost id"),
                );
                assert_eq!(
                    shape(&a, id),
                    shape(&b, ghost.as_str()),
                    "[{label}] {op}: foreign and missing look alike"
                );
            }
            // A link to Alice's memory is a link to nothing.
            let a = err(
                remember(&store, &bob, json!({"content": "bob links", "scope": "core", "links": [{"dst": id, "type": "relates_to"}]})).await,
                ErrorCode::NotFound,
                label,
                "bob links to alice",
            );
            let b = err(
                remember(&store, &bob, json!({"content": "bob links", "scope": "core", "links": [{"dst": ghost.as_str(), "type": "relates_to"}]})).await,
                ErrorCode::NotFound,
                label,
                "bob links to a ghost",
            );
            assert_eq!(
                shape(&a, id),
                shape(&b, ghost.as_str()),
                "[{label}] links: foreign and missing look alike"
            );
            let a = err(
                remember(&store, &bob, json!({"content": "bob supersedes", "scope": "core", "links": [{"dst": id, "type": "supersedes"}]})).await,
                ErrorCode::NotFound,
                label,
                "bob supersedes alice",
            );
            assert_eq!(a.code, ErrorCode::NotFound, "[{label}] supersede");
        }
        // Bob's failed link writes stored nothing.
        let bob_all = recall_ids(
            &store,
            &bob,
            label,
            json!({"query": "bob links supersedes", "scopes": ["*"]}),
        )
        .await;
        assert!(
            bob_all.is_empty(),
            "[{label}] failed writes stored {bob_all:?}"
        );

        // Writes into Alice's scopes are forbidden.
        for scope in [project.clone(), alice.core_scope(), alice.personal_scope()] {
            let e = err(
                remember(
                    &store,
                    &bob,
                    json!({"content": "bob was here", "scope": scope}),
                )
                .await,
                ErrorCode::Forbidden,
                label,
                &format!("bob writes into {scope}"),
            );
            assert!(
                !e.message.contains("quokka"),
                "[{label}] nothing of Alice's leaks"
            );
        }
        let alice_label = zm_contracts::scope::label_for(&alice.user_id);
        err(
            remember(&store, &bob, json!({"content": "bob was here", "scope": format!("proj.{alice_label}.brand_new")})).await,
            ErrorCode::Forbidden,
            label,
            "bob creates a project in alice's namespace",
        );
        // Bob attached to Alice's project path still cannot read it.
        let bob_att = attached(&bob, &project);
        let out = ok(
            recall(&store, &bob_att, json!({"query": "quokka"})).await,
            label,
            "bob attached",
        );
        assert!(
            out.memories.is_empty(),
            "[{label}] attachment grants nothing"
        );

        // Alice's memories are untouched by all of it.
        let mine = recall_ids(
            &store,
            &alice,
            label,
            json!({"query": "quokka", "scopes": ["*"]}),
        )
        .await;
        for id in &alice_ids {
            assert!(
                mine.contains(id),
                "[{label}] alice still sees {id}: {mine:?}"
            );
        }
        for id in &alice_ids {
            let m = ok(
                store
                    .get_memory(&alice, &MemoryId::parse(id).unwrap())
                    .await,
                label,
                "alice get",
            );
            assert_eq!(m.invalidated_at, None, "[{label}] {id} is live");
        }
    }
}

// ---------------------------------------------------------------- full-text safety

fn hostile_queries() -> Vec<String> {
    let mut v: Vec<String> = [
        "\"",
        "'",
        "\"\"",
        "AND OR NOT NEAR",
        "foo*",
        "^bar",
        "-baz",
        "(a OR b)",
        "col:val",
        "NEAR(a b, 3)",
        "a NOT b",
        "{content}: x",
        "🦀🎉",
        "café 日本語",
        "foo' | bar & !baz <-> qux:*",
        "'; DROP TABLE memories; --",
        "\\ \\\\ \\\"",
        "the a an of",
        "%_%",
        "$1 $2 ?",
    ]
    .into_iter()
    .map(str::to_string)
    .collect();
    v.push("x".repeat(2048));
    v
}

#[tokio::test]
async fn hostile_full_text_queries_never_error() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, caller) = user(&store, "hostile").await;
        ok(
            remember(&store, &caller, json!({"content": "café 日本語 foo bar baz col val NEAR the (a OR b)", "scope": "core"})).await,
            label,
            "seed",
        );
        ok(
            remember(
                &store,
                &caller,
                json!({"content": "'; DROP TABLE memories; -- \" ^bar -baz foo*", "scope": "core"}),
            )
            .await,
            label,
            "hostile content",
        );
        for q in hostile_queries() {
            let short: String = q.chars().take(40).collect();
            ok(
                recall(&store, &caller, json!({"query": q})).await,
                label,
                &format!("recall {short:?}"),
            );
            ok(
                recall(
                    &store,
                    &caller,
                    json!({"query": q, "scopes": ["core"], "include_graph": true}),
                )
                .await,
                label,
                &format!("recall scoped {short:?}"),
            );
            ok(
                build_context(&store, &caller, json!({"topic": q, "briefing": true})).await,
                label,
                &format!("build_context {short:?}"),
            );
        }
        // Longer than the schema allows: validation refuses it cleanly, and
        // the store itself copes with it anyway.
        let long_words = (0..1500)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        for q in [long_words, "y".repeat(5000), "\"'*:()".repeat(900)] {
            assert!(q.chars().count() >= 5000);
            let e = zm_contracts::parse_input::<RecallInput>(&json!({"query": q})).unwrap_err();
            assert_eq!(
                e.code,
                ErrorCode::ValidationFailed,
                "[{label}] an over-long query is validation_failed"
            );
            let direct = RecallInput {
                query: q.clone(),
                thread: None,
                scopes: None,
                kinds: None,
                k: 10,
                include_graph: false,
                project_hint: None,
            };
            ok(
                tools(&store)
                    .run::<zm_contracts::catalogue::tool::Recall>(&caller, direct)
                    .await,
                label,
                "recall of a 5000-char query",
            );
        }
        // A hostile query still finds what it names.
        let seen = recall_ids(&store, &caller, label, json!({"query": "café"})).await;
        assert!(!seen.is_empty(), "[{label}] café finds the seeded memory");
        let seen = recall_ids(&store, &caller, label, json!({"query": "(a OR b) NEAR"})).await;
        assert!(!seen.is_empty(), "[{label}] operators are plain words");
    }
}

// ---------------------------------------------------------------- lifecycle

#[tokio::test]
async fn forget_restore_and_close_loop() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, caller) = user(&store, "life").await;
        let fact = ok(
            remember(
                &store,
                &caller,
                json!({"content": "The pager rotation changes on Mondays.", "scope": "core"}),
            )
            .await,
            label,
            "fact",
        );
        let id = fact.memory_id.to_string();
        let q = json!({"query": "pager rotation"});
        assert_eq!(
            recall_ids(&store, &caller, label, q.clone()).await,
            vec![id.clone()],
            "[{label}] live"
        );

        let out = ok(forget(&store, &caller, &id).await, label, "forget");
        assert!(out.invalidated, "[{label}] invalidated");
        assert_eq!(out.memory_id.as_str(), id, "[{label}] id echoed");
        assert!(
            recall_ids(&store, &caller, label, q.clone())
                .await
                .is_empty(),
            "[{label}] forgotten leaves recall"
        );
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "pager rotation", "briefing": true}),
            )
            .await,
            label,
            "briefing",
        );
        assert!(
            ctx.memories.is_empty() && ctx.recent.is_empty(),
            "[{label}] forgotten leaves briefings"
        );
        let m = ok(
            store.get_memory(&caller, &fact.memory_id).await,
            label,
            "get forgotten",
        );
        assert!(
            m.invalidated_at.is_some(),
            "[{label}] add-only: the row is still there"
        );
        err(
            forget(&store, &caller, &id).await,
            ErrorCode::Conflict,
            label,
            "second forget",
        );

        let out = ok(restore(&store, &caller, &id).await, label, "restore");
        assert!(out.restored, "[{label}] restored");
        assert_eq!(
            recall_ids(&store, &caller, label, q.clone()).await,
            vec![id.clone()],
            "[{label}] back in recall"
        );
        err(
            restore(&store, &caller, &id).await,
            ErrorCode::Conflict,
            label,
            "second restore",
        );

        // close_loop: only for open loops.
        let e = err(
            close_loop(&store, &caller, &id).await,
            ErrorCode::ValidationFailed,
            label,
            "close a fact",
        );
        assert!(
            e.message.contains("forget"),
            "[{label}] the refusal points to forget: {}",
            e.message
        );
        let task = ok(
            remember(&store, &caller, json!({"content": "Write the incident report.", "kind": "task", "scope": "personal"})).await,
            label,
            "task",
        );
        let question = ok(
            remember(&store, &caller, json!({"content": "Should we drop Python 3.9?", "kind": "open-question", "scope": "personal"})).await,
            label,
            "question",
        );
        for loop_id in [task.memory_id.to_string(), question.memory_id.to_string()] {
            let out = ok(close_loop(&store, &caller, &loop_id).await, label, "close");
            assert!(out.closed, "[{label}] closed");
            err(
                close_loop(&store, &caller, &loop_id).await,
                ErrorCode::Conflict,
                label,
                "close again",
            );
            err(
                forget(&store, &caller, &loop_id).await,
                ErrorCode::Conflict,
                label,
                "forget a closed loop",
            );
            ok(restore(&store, &caller, &loop_id).await, label, "reopen");
            ok(
                close_loop(&store, &caller, &loop_id).await,
                label,
                "close after reopening",
            );
        }
        // A restored fact is still not a loop.
        err(
            close_loop(&store, &caller, &id).await,
            ErrorCode::ValidationFailed,
            label,
            "close a fact again",
        );
    }
}

#[tokio::test]
async fn supersede_chain_and_restore() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, caller) = user(&store, "chain").await;
        let a = ok(
            remember(
                &store,
                &caller,
                json!({"content": "The release train leaves every two weeks.", "scope": "core"}),
            )
            .await,
            label,
            "A",
        );
        let b = ok(
            remember(
                &store,
                &caller,
                json!({"content": "The release train leaves every week.", "scope": "core",
                "links": [{"dst": a.memory_id.as_str(), "type": "supersedes"}]}),
            )
            .await,
            label,
            "B supersedes A",
        );
        let c = ok(
            remember(
                &store,
                &caller,
                json!({"content": "The release train leaves every day.", "scope": "core",
                "links": [{"dst": b.memory_id.as_str(), "type": "supersedes"}]}),
            )
            .await,
            label,
            "C supersedes B",
        );
        let [ia, ib, ic] = [&a, &b, &c].map(|o| o.memory_id.to_string());
        let q = json!({"query": "release train", "scopes": ["*"]});
        assert_eq!(
            recall_ids(&store, &caller, label, q.clone()).await,
            vec![ic.clone()],
            "[{label}] only C is live"
        );
        let ma = ok(store.get_memory(&caller, &a.memory_id).await, label, "A");
        let mb = ok(store.get_memory(&caller, &b.memory_id).await, label, "B");
        assert_eq!(
            ma.superseded_by.as_ref(),
            Some(&b.memory_id),
            "[{label}] A → B"
        );
        assert_eq!(
            mb.superseded_by.as_ref(),
            Some(&c.memory_id),
            "[{label}] B → C"
        );

        // Superseding an already retired memory does nothing to it.
        let d = ok(
            remember(
                &store,
                &caller,
                json!({"content": "The release train leaves every hour.", "scope": "core",
                "links": [{"dst": ia.clone(), "type": "supersedes"}]}),
            )
            .await,
            label,
            "D supersedes retired A",
        );
        let ma = ok(store.get_memory(&caller, &a.memory_id).await, label, "A");
        assert_eq!(
            ma.superseded_by.as_ref(),
            Some(&b.memory_id),
            "[{label}] A keeps its successor"
        );
        ok(
            forget(&store, &caller, d.memory_id.as_str()).await,
            label,
            "forget D",
        );

        // Restore A: it comes back, with its successor link cleared.
        ok(restore(&store, &caller, &ia).await, label, "restore A");
        let ma = ok(store.get_memory(&caller, &a.memory_id).await, label, "A");
        assert_eq!(
            ma.superseded_by, None,
            "[{label}] restored A has no successor"
        );
        assert_eq!(ma.invalidated_at, None, "[{label}] restored A is live");
        let mut seen = recall_ids(&store, &caller, label, q.clone()).await;
        seen.sort();
        let mut want = vec![ia.clone(), ic.clone()];
        want.sort();
        assert_eq!(seen, want, "[{label}] A and C are live, B is still retired");
        // B is still retired; restoring it brings the whole chain back.
        err(
            forget(&store, &caller, &ib).await,
            ErrorCode::Conflict,
            label,
            "forget retired B",
        );
        ok(restore(&store, &caller, &ib).await, label, "restore B");
        assert_eq!(
            recall_ids(&store, &caller, label, q).await.len(),
            3,
            "[{label}] A, B and C are live"
        );
        // A memory cannot supersede itself (the link is ignored).
        let self_link = ok(
            remember(
                &store,
                &caller,
                json!({"content": "The release train leaves every day.", "scope": "core",
                "links": [{"dst": ic.clone(), "type": "supersedes"}]}),
            )
            .await,
            label,
            "identical write superseding its own twin",
        );
        assert_eq!(
            self_link.deduplicated,
            Some(true),
            "[{label}] absorbed by C"
        );
        let mc = ok(store.get_memory(&caller, &c.memory_id).await, label, "C");
        assert_eq!(mc.invalidated_at, None, "[{label}] C did not retire itself");
    }
}

// ---------------------------------------------------------------- briefings

#[tokio::test]
async fn build_context_caps_and_briefing_legs() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (_, caller) = user(&store, "brief").await;
        for i in 0..6 {
            ok(
                remember(&store, &caller, json!({"content": format!("walrus fact number {i}: walruses haul out on ice floe {i}."), "scope": "core"})).await,
                label,
                "walrus",
            );
        }
        let full = ok(
            build_context(&store, &caller, json!({"topic": "walrus"})).await,
            label,
            "uncapped",
        );
        assert_eq!(full.memories.len(), 6, "[{label}] uncapped returns all six");
        let capped = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "walrus", "max_tokens": 600}),
            )
            .await,
            label,
            "capped",
        );
        assert_eq!(
            capped.memories.len(),
            3,
            "[{label}] max_tokens 600 → 3 memories"
        );
        let tiny = ok(
            build_context(&store, &caller, json!({"topic": "walrus", "max_tokens": 1})).await,
            label,
            "tiny",
        );
        assert_eq!(tiny.memories.len(), 3, "[{label}] the floor is 3 memories");
        let wide = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "walrus", "max_tokens": 1000}),
            )
            .await,
            label,
            "wide",
        );
        assert_eq!(
            wide.memories.len(),
            5,
            "[{label}] max_tokens 1000 → 5 memories"
        );
        // Briefing legs are empty outside briefing mode.
        assert!(
            full.open_loops.is_empty() && full.recent.is_empty(),
            "[{label}] no briefing legs"
        );

        // Open loops: oldest first, capped at 10, with the total.
        let hint = "/srv/git/ledger";
        let mut loops = Vec::new();
        for i in 0..12 {
            let kind = if i % 3 == 2 { "open-question" } else { "task" };
            let out = ok(
                remember(&store, &caller, json!({"content": format!("ledger loop {i}: reconcile batch {i}"), "kind": kind, "project_hint": hint})).await,
                label,
                "loop",
            );
            loops.push(out.memory_id.to_string());
            store.clock().advance_ms(1000);
        }
        // A loop elsewhere and a closed loop do not count.
        ok(remember(&store, &caller, json!({"content": "other project loop", "kind": "task", "project_hint": "/srv/git/other"})).await, label, "other loop");
        let closed = ok(
            remember(
                &store,
                &caller,
                json!({"content": "closed ledger loop", "kind": "task", "project_hint": hint}),
            )
            .await,
            label,
            "closed loop",
        );
        ok(
            close_loop(&store, &caller, closed.memory_id.as_str()).await,
            label,
            "close",
        );
        let fresh_fact = ok(
            remember(&store, &caller, json!({"content": "The ledger service settles at midnight UTC.", "project_hint": hint})).await,
            label,
            "recent fact",
        );
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "kangaroo", "briefing": true, "project_hint": hint}),
            )
            .await,
            label,
            "briefing",
        );
        let got: Vec<String> = ctx.open_loops.iter().map(|m| m.id.to_string()).collect();
        assert_eq!(
            got,
            loops[..10].to_vec(),
            "[{label}] the ten oldest loops, oldest first"
        );
        assert_eq!(
            ctx.open_loops_total, 12,
            "[{label}] open_loops_total counts before the cap"
        );
        let recent: Vec<String> = ctx.recent.iter().map(|m| m.id.to_string()).collect();
        assert!(
            recent.contains(&fresh_fact.memory_id.to_string()),
            "[{label}] recent has the fresh fact: {recent:?}"
        );
        assert!(
            !recent.iter().any(|r| loops.contains(r)),
            "[{label}] loops are not recent facts"
        );
        // An unpinned briefing does not show a project's loops.
        let unpinned = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "kangaroo", "briefing": true}),
            )
            .await,
            label,
            "unpinned briefing",
        );
        assert!(
            unpinned.open_loops.is_empty(),
            "[{label}] project loops need the project: {:?}",
            unpinned.open_loops
        );
        assert_eq!(unpinned.open_loops_total, 0, "[{label}] unpinned total");

        // 15 days later the loops leave the briefing but stay live.
        store.clock().advance_ms(15 * DAY_MS);
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "kangaroo", "briefing": true, "project_hint": hint}),
            )
            .await,
            label,
            "late briefing",
        );
        assert!(
            ctx.open_loops.is_empty(),
            "[{label}] stale loops leave open_loops: {:?}",
            ctx.open_loops
        );
        assert_eq!(ctx.open_loops_total, 0, "[{label}] and the total");
        assert!(
            !ctx.recent.iter().any(|m| m.id == fresh_fact.memory_id),
            "[{label}] a 15-day-old fact is no longer recent"
        );
        let new_loop = ok(
            remember(&store, &caller, json!({"content": "ledger loop new: audit the fees", "kind": "task", "project_hint": hint})).await,
            label,
            "new loop",
        );
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "kangaroo", "briefing": true, "project_hint": hint}),
            )
            .await,
            label,
            "briefing",
        );
        let got: Vec<String> = ctx.open_loops.iter().map(|m| m.id.to_string()).collect();
        assert_eq!(
            got,
            vec![new_loop.memory_id.to_string()],
            "[{label}] only the fresh loop"
        );
        assert_eq!(ctx.open_loops_total, 1, "[{label}] total 1");
        let seen = recall_ids(
            &store,
            &caller,
            label,
            json!({"query": "ledger loop reconcile", "project_hint": hint, "k": 50}),
        )
        .await;
        assert!(
            seen.contains(&loops[0]),
            "[{label}] a stale loop is still recallable"
        );
        let out = ok(
            close_loop(&store, &caller, &loops[0]).await,
            label,
            "close a stale loop",
        );
        assert!(out.closed, "[{label}] a stale loop is still closable");
    }
}

// ---------------------------------------------------------------- identity

#[tokio::test]
async fn tokens_and_passwords() {
    for (label, store) in backends().await {
        let label = label.as_str();
        let (u, _) = user(&store, "tok").await;
        let (other, _) = user(&store, "tok-other").await;

        let (info, secret) = ok(
            store
                .create_token(&u.id, Some("laptop"), &[SCOPE_READ, SCOPE_WRITE])
                .await,
            label,
            "create token",
        );
        assert!(
            secret.starts_with("zm_pat_") && secret.len() > 30,
            "[{label}] secret {secret:?}"
        );
        assert_eq!(info.user_id, u.id, "[{label}] token owner");
        let (_, second) = ok(
            store.create_token(&u.id, None, &[SCOPE_READ]).await,
            label,
            "second token",
        );
        assert_ne!(secret, second, "[{label}] secrets are unique");

        let auth =
            ok(store.authenticate(&secret).await, label, "authenticate").expect("valid token");
        assert_eq!(auth.user_id, u.id, "[{label}] authenticates as its user");
        assert_eq!(auth.token_id, info.id, "[{label}] token id");
        assert!(auth.can_write(), "[{label}] write scope");
        let read_only = ok(
            store.authenticate(&second).await,
            label,
            "authenticate read-only",
        )
        .expect("valid");
        assert!(!read_only.can_write(), "[{label}] read-only token");
        assert_eq!(
            ok(
                store.authenticate("zm_pat_not_a_real_token").await,
                label,
                "bogus"
            ),
            None,
            "[{label}] bogus token"
        );
        let mut tampered = secret.clone();
        tampered.push('x');
        assert_eq!(
            ok(store.authenticate(&tampered).await, label, "tampered"),
            None,
            "[{label}] tampered token"
        );

        // The secret is never listed.
        let listed = ok(store.list_tokens(&u.id).await, label, "list");
        assert_eq!(listed.len(), 2, "[{label}] two tokens");
        assert!(
            !format!("{listed:?}").contains(&secret),
            "[{label}] the listing has no secret"
        );
        assert!(
            ok(store.list_tokens(&other.id).await, label, "list other").is_empty(),
            "[{label}] other lists none"
        );

        // Another user cannot revoke it, and it reads as not found.
        let e = err(
            store.revoke_token(&other.id, &info.id).await,
            ErrorCode::NotFound,
            label,
            "foreign revoke",
        );
        let ghost = err(
            store
                .revoke_token(&other.id, "tok_0123456789abcdef.0123456789")
                .await,
            ErrorCode::NotFound,
            label,
            "ghost revoke",
        );
        assert_eq!(
            e.message, ghost.message,
            "[{label}] foreign and missing look alike"
        );
        assert!(
            ok(store.authenticate(&secret).await, label, "still valid").is_some(),
            "[{label}] still valid"
        );

        ok(store.revoke_token(&u.id, &info.id).await, label, "revoke");
        assert_eq!(
            ok(store.authenticate(&secret).await, label, "revoked"),
            None,
            "[{label}] revoked token fails"
        );
        err(
            store.revoke_token(&u.id, &info.id).await,
            ErrorCode::NotFound,
            label,
            "revoke twice",
        );
        assert!(
            ok(store.authenticate(&second).await, label, "other token").is_some(),
            "[{label}] the other token lives"
        );

        // Passwords.
        let me = ok(
            store.verify_password(&u.email, PASSWORD).await,
            label,
            "right password",
        );
        assert_eq!(
            me.map(|m| m.id),
            Some(u.id.clone()),
            "[{label}] right password"
        );
        let upper = ok(
            store
                .verify_password(&u.email.to_uppercase(), PASSWORD)
                .await,
            label,
            "email case",
        );
        assert_eq!(
            upper.map(|m| m.id),
            Some(u.id.clone()),
            "[{label}] email is case-insensitive"
        );
        assert_eq!(
            ok(
                store.verify_password(&u.email, "wrong password").await,
                label,
                "wrong"
            ),
            None,
            "[{label}] wrong password"
        );
        assert_eq!(
            ok(
                store
                    .verify_password(&other.email, PASSWORD.to_uppercase().as_str())
                    .await,
                label,
                "wrong"
            ),
            None,
            "[{label}] case matters"
        );
        assert_eq!(
            ok(
                store
                    .verify_password(&format!("{}@nowhere.invalid", unique("nobody")), PASSWORD)
                    .await,
                label,
                "unknown"
            ),
            None,
            "[{label}] unknown user"
        );
        // Duplicate emails are a conflict, bad input a validation failure.
        err(
            store.create_user(&u.email, PASSWORD).await,
            ErrorCode::Conflict,
            label,
            "duplicate email",
        );
        err(
            store.create_user("not-an-email", PASSWORD).await,
            ErrorCode::ValidationFailed,
            label,
            "bad email",
        );
        err(
            store
                .create_user(&format!("{}@x.invalid", unique("short")), "short")
                .await,
            ErrorCode::ValidationFailed,
            label,
            "short password",
        );
    }
}
