//! The memory lifecycle, on every backend: forget, restore_memory and
//! close_loop (add-only: rows are invalidated, never erased), and supersede
//! chains with restoring a retired link of the chain.
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
    async fn forget_restore_and_close_loop(store: Store, label: &str) {
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

    async fn supersede_chain_and_restore(store: Store, label: &str) {
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
