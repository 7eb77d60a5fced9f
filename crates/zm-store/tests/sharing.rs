//! `share` and `move_memories`, on every backend: sharing into a project,
//! idempotently; per-item failures of a move; and what another user may
//! not share or move.
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
    /// A move in which nothing moves creates no project: the project a
    /// hint names is made by the first memory that lands in it (a team
    /// cannot be given a project that was never written to).
    async fn a_move_that_moves_nothing_creates_no_project(store: Store, l: &str) {
        let (_, a) = user(&store, "phantom-a").await;
        let slug = create_team_of(&store, &a, l, "phantom").await;
        let hint = format!("/src/{}", unique("typo-repo"));
        let out = ok(call(&store, &a, "move_memories", json!({"memory_ids": [NEVER], "project_hint": hint})).await, l, "move nothing");
        assert_eq!(out["moved"], json!([]), "[{l}] {out}");
        let scope = out["scope"].as_str().expect("the target").to_string();
        let share = |scope: String| {
            let (store, a, slug) = (&store, a.clone(), slug.clone());
            async move { store.share_project_with_team(&a, &slug, input!(zm_contracts::teams::ShareProjectInput, &json!({"scope": scope}))).await }
        };
        err(share(scope.clone()).await, ErrorCode::NotFound, l, "no such project");
        // A move that lands one makes it.
        let m = mem(&store, &a, l, json!({"content": "The typo repo builds with make.", "scope": "personal", "kind": "fact"})).await;
        let out = ok(call(&store, &a, "move_memories", json!({"memory_ids": [m], "project_hint": hint})).await, l, "move one");
        assert_eq!(out["scope"], json!(scope), "[{l}] {out}");
        ok(share(scope).await, l, "now there is");
    }

    async fn share_and_move_with_per_item_failures(store: Store, l: &str) {
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
        let failed: Vec<(String, String, String)> = moved["failed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["memory_id"].as_str().unwrap().to_string(),
                    f["code"].as_str().unwrap().to_string(),
                    f["error"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            failed,
            vec![
                (gone.clone(), "conflict".into(), "invalidated".into()),
                (b_mem.clone(), "not_found".into(), "not found".into()),
                (NEVER.into(), "not_found".into(), "not found".into())
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
