//! Where a write lands, on every backend: the refusal of a write with no
//! target and each way out of it (`core`, `personal`, a project hint, a
//! thread token, the attached project, an explicit scope), and the
//! portability rule that routes project-bound kinds written to `core` or
//! `personal` into the known project.
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::ErrorCode;
use zm_contracts::prefixes::Prefix;
use zm_store::Store;

backend_tests! {
    /// A project hint as long as the contract allows, of characters that
    /// take three bytes each, binds its project on both backends (its key
    /// is longer than PostgreSQL indexes), and writes through it again
    /// land in the same project.
    async fn a_hint_longer_than_an_index_takes_binds_its_project(store: Store, label: &str) {
        let (_, caller) = user(&store, "longhint").await;
        // Varied characters: PostgreSQL compresses an index entry first,
        // and a repeated one would fit.
        let varied: String = (0..2_000u32).map(|i| char::from_u32(0x4E00 + (i * 7_919) % 20_000).unwrap()).collect();
        let hint = format!("/{varied}/ledger");
        assert!(hint.chars().count() <= 2_048, "within the contract's limit");
        let first = ok(call(&store, &caller, "remember", json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": hint})).await, label, "first write");
        let second = ok(call(&store, &caller, "remember", json!({"content": "Ledger exports are CSV files.", "kind": "fact", "project_hint": hint})).await, label, "second write");
        assert_eq!(first["scope"], second["scope"], "[{label}] {first} {second}");
        assert!(first["scope"].as_str().is_some_and(|s| s.ends_with(".ledger")), "[{label}] {first}");
    }

    /// The caller's own core or personal layer named by its path is that
    /// layer: a project-bound kind with a project hint goes to the project
    /// as with the shorthand, and a portable one stays.
    async fn a_layer_named_by_its_path_keeps_the_portability_rule(store: Store, label: &str) {
        let (_, caller) = user(&store, "layerpath").await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        for (layer, kind) in [(caller.core_scope(), "decision"), (caller.personal_scope(), "convention")] {
            let out = ok(call(&store, &caller, "remember", json!({"content": format!("Releases are cut from main ({kind})."), "kind": kind, "scope": layer, "project_hint": remote})).await, label, "a project-bound kind");
            assert_ne!(out["scope"], json!(layer), "[{label}] {out}");
            assert!(out["routed_to_project"].is_string(), "[{label}] {out}");
        }
        let fact = ok(call(&store, &caller, "remember", json!({"content": "The office is in Oslo.", "kind": "fact", "scope": caller.core_scope(), "project_hint": remote})).await, label, "a portable kind");
        assert_eq!(fact["scope"], json!(caller.core_scope()), "[{label}] {fact}");
    }

    async fn write_refusals_and_every_way_out(store: Store, label: &str) {
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
        assert_eq!(
            e.details.as_ref().and_then(|d| d["fields"][0]["path"].as_str()),
            Some("project_hint"),
            "[{label}] {e:?}"
        );
        // `move_memories` refuses it with the same prefix, naming the field.
        let mine = ok(call(&store, &caller, "remember", json!({"content": "The build caches live in /tmp.", "scope": "personal"})).await, label, "a memory to move");
        let e = err(
            call(&store, &caller, "move_memories", json!({"memory_ids": [mine["memory_id"]], "project_hint": "///"})).await,
            ErrorCode::ValidationFailed,
            label,
            "move to an unresolvable hint",
        );
        assert_prefix(&e, Prefix::ProjectHintUnresolvable, label, "move to hint \"///\"");
        assert_eq!(
            e.details.as_ref().and_then(|d| d["fields"][0]["path"].as_str()),
            Some("project_hint"),
            "[{label}] {e:?}"
        );

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
            Some(core.scope.as_str()),
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
            Some(personal.scope.as_str()),
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
        let project = by_hint.scope.clone();
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
        let thread = ctx.session.thread.expect("a thread token");
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
            Some(by_thread.scope.as_str()),
            Some(project.as_str()),
            "[{label}] thread routes"
        );
        assert_eq!(
            by_thread.session.thread.as_deref(),
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
            Some(by_session.scope.as_str()),
            Some(project.as_str()),
            "[{label}] attached"
        );
        assert_eq!(
            by_session.session.attached_project.as_deref(),
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
            Some(explicit.scope.as_str()),
            Some(project.as_str()),
            "[{label}] explicit"
        );
    }

    async fn portability_rule_routes_project_kinds_to_the_project(store: Store, label: &str) {
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
                    Some(out.scope.as_str()),
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
                    Some(out.scope.as_str()),
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
                stored.scope,
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
        let thread = ctx.session.thread.unwrap();
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
            Some(out.scope.as_str()),
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
            Some(out.scope.as_str()),
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
            Some(out.scope.as_str()),
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
                Some(out.scope.as_str()),
                Some(expected.as_str()),
                "[{label}] {what}"
            );
            assert_eq!(out.routed_to_project, None, "[{label}] {what}: not routed");
        }
    }
}
