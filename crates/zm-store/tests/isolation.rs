//! Isolation between two users for the part-1 operations, on every
//! backend: recall and build_context never show another user's memories,
//! the lifecycle tools and links treat a foreign id exactly like a missing
//! one, and writes into another user's scopes are forbidden. (The part-2
//! tools check isolation in their own files.)
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::{ErrorCode, MemoryId};
use zm_store::Store;

backend_tests! {
    async fn users_are_isolated_for_every_operation(store: Store, label: &str) {
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
        let project = fact.scope.clone();
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
            // The same call finds Alice's memories for Alice.
            let mine = ok(
                build_context(&store, &alice, raw.clone()).await,
                label,
                "alice build_context",
            );
            assert!(
                !mine.memories.is_empty() || !mine.recent.is_empty() || !mine.open_loops.is_empty(),
                "[{label}] alice build_context {raw} sees nothing of her own"
            );
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
            let b = err(
                remember(&store, &bob, json!({"content": "bob supersedes", "scope": "core", "links": [{"dst": ghost.as_str(), "type": "supersedes"}]})).await,
                ErrorCode::NotFound,
                label,
                "bob supersedes a ghost",
            );
            assert_eq!(
                shape(&a, id),
                shape(&b, ghost.as_str()),
                "[{label}] supersede: foreign and missing look alike"
            );
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
