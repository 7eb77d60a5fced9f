//! `challenge` and the conflict tools (`list_conflicts`, `get_conflict`,
//! `resolve_conflict`), on every backend: single-subject disputes and pairs,
//! each outcome, foreign disputes reading as missing, and the unjudged pair
//! a near-identical write files.
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
    /// Challenges of one memory at once: one dispute, the others told it is
    /// already pending — never `internal`. (On PostgreSQL two transactions
    /// can both find no pending challenge; the insert then defers to the
    /// one-pending-challenge index instead of failing on it. This run does
    /// not reliably interleave them there: it checks the answers.)
    async fn challenges_at_once_share_one_dispute(store: Store, l: &str) {
        let (_, a) = user(&store, "challenge-race").await;
        let m = mem(&store, &a, l, json!({"content": "Backups are kept for ninety days.", "scope": "personal", "kind": "fact"})).await;
        let tasks: Vec<_> = (0..6)
            .map(|i| {
                let (store, a, m) = (store.clone(), a.clone(), m.clone());
                tokio::spawn(async move {
                    call(&store, &a, "challenge", json!({"memory_id": m, "reason": format!("doubt {i}")})).await
                })
            })
            .collect();
        let mut disputes = std::collections::HashSet::new();
        let mut fresh = 0;
        for t in tasks {
            let out = ok(t.await.unwrap(), l, "a challenge at once");
            disputes.insert(out["dispute_id"].as_str().unwrap().to_string());
            if out["already_pending"] == json!(false) {
                fresh += 1;
            }
        }
        assert_eq!((disputes.len(), fresh), (1, 1), "[{l}] one dispute, made once");
    }

    /// `list_conflicts` pages newest first with a cursor: every conflict
    /// once, in the order one long page gives, even when one already seen
    /// is settled between pages; the cursor is the caller's own.
    async fn conflicts_page_with_a_cursor(store: Store, l: &str) {
        let (_, a) = user(&store, "conf-pages").await;
        let (_, b) = user(&store, "conf-pages-b").await;
        for i in 0..7 {
            let m = mem(&store, &a, l, json!({"content": format!("Release train {i} leaves on a Tuesday."), "scope": "personal", "kind": "fact"})).await;
            ok(call(&store, &a, "challenge", json!({"memory_id": m, "reason": format!("doubt {i}")})).await, l, "challenge");
        }
        let ids = |page: &serde_json::Value| -> Vec<String> {
            page["conflicts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["dispute_id"].as_str().unwrap().to_string())
                .collect()
        };
        let all = ok(call(&store, &a, "list_conflicts", json!({"limit": 100})).await, l, "one page");
        assert!(all.get("next_cursor").is_none(), "[{l}] one page, no cursor: {all}");
        let all = ids(&all);
        assert_eq!(all.len(), 7, "[{l}]");

        let mut seen = Vec::new();
        let mut args = json!({"limit": 3});
        let mut pages = 0;
        loop {
            let page = ok(call(&store, &a, "list_conflicts", args.clone()).await, l, "a page");
            pages += 1;
            seen.extend(ids(&page));
            if pages == 1 {
                // Settle one already listed: the next page does not move.
                ok(call(&store, &a, "resolve_conflict", json!({"dispute_id": seen[0], "keep_both": true})).await, l, "resolve");
            }
            match page.get("next_cursor") {
                Some(c) => {
                    let c = c.as_str().unwrap().to_string();
                    assert!(c.starts_with("cfc_"), "[{l}] {c}");
                    // Another user's cursor, or an altered one: not a position.
                    for (who, bad) in [(&b, c.clone()), (&a, format!("{c}A")), (&a, "exc_AAAA".to_string())] {
                        let e = err(call(&store, who, "list_conflicts", json!({"cursor": bad})).await, ErrorCode::ValidationFailed, l, "a cursor not theirs");
                        assert!(serde_json::to_string(&e).unwrap().contains("cursor"), "[{l}] {e:?}");
                    }
                    args["cursor"] = json!(c);
                }
                None => break,
            }
        }
        assert_eq!((pages, seen), (3, all.clone()), "[{l}] 3 + 3 + 1, each once, newest first");
        // The cursor is only a position: with the other status it lists the
        // settled one only when it is older than the position.
        // (A challenge kept alongside is `dismissed`.)
        let settled = ok(call(&store, &a, "list_conflicts", json!({"status": "dismissed"})).await, l, "dismissed");
        assert_eq!(ids(&settled), vec![all[0].clone()], "[{l}] the settled one");
        let first = ok(call(&store, &a, "list_conflicts", json!({"limit": 1})).await, l, "first");
        let after = ok(call(&store, &a, "list_conflicts", json!({"status": "dismissed", "cursor": first["next_cursor"]})).await, l, "dismissed after");
        assert_eq!(ids(&after), Vec::<String>::new(), "[{l}] the settled one is newer than the position");
    }

    async fn conflicts_challenge_list_get_resolve(store: Store, l: &str) {
        let (_, a) = user(&store, "conf-a").await;
        let (_, b) = user(&store, "conf-b").await;
        let m = mem(
            &store,
            &a,
            l,
            json!({"content": "Staging deploys need a manual approval.", "scope": "core"}),
        )
        .await;
        let c = ok(call(&store, &a, "challenge", json!({"memory_id": m, "reason": "approvals were automated", "evidence": "see the pipeline"})).await, l, "challenge");
        assert_eq!(c["already_pending"], false, "[{l}]");
        let dispute = c["dispute_id"].as_str().unwrap().to_string();
        let again = ok(
            call(
                &store,
                &a,
                "challenge",
                json!({"memory_id": m, "reason": "again"}),
            )
            .await,
            l,
            "challenge again",
        );
        assert_eq!(
            (
                again["dispute_id"].as_str(),
                again["already_pending"].as_bool()
            ),
            (Some(dispute.as_str()), Some(true)),
            "[{l}]"
        );
        let hits = ok(
            call(
                &store,
                &a,
                "recall",
                json!({"query": "staging deploys approval", "scopes": ["*"]}),
            )
            .await,
            l,
            "recall",
        );
        assert_eq!(hits["memories"][0]["disputed"], true, "[{l}] {hits}");
        assert_eq!(hits["memories"][0]["dispute_id"], dispute.as_str(), "[{l}]");
        let got = ok(
            call(&store, &a, "get_conflict", json!({"dispute_id": dispute})).await,
            l,
            "get",
        );
        assert_eq!(got["conflict"]["verdict"], "challenged", "[{l}]");
        assert!(
            got["conflict"]["rationale"]
                .as_str()
                .unwrap()
                .contains("Evidence: see the pipeline"),
            "[{l}]"
        );
        // B: A's dispute reads exactly like one that never existed.
        let foreign = err(
            call(&store, &b, "get_conflict", json!({"dispute_id": dispute})).await,
            ErrorCode::NotFound,
            l,
            "B get",
        );
        let never = err(
            call(
                &store,
                &b,
                "get_conflict",
                json!({"dispute_id": "mrq_0000000000000000.0000000000"}),
            )
            .await,
            ErrorCode::NotFound,
            l,
            "never",
        );
        assert_eq!(foreign.message, never.message, "[{l}]");
        err(
            call(
                &store,
                &b,
                "resolve_conflict",
                json!({"dispute_id": dispute, "retire": true}),
            )
            .await,
            ErrorCode::NotFound,
            l,
            "B resolve",
        );
        assert!(
            ok(
                call(&store, &b, "list_conflicts", json!({})).await,
                l,
                "B list"
            )["conflicts"]
                .as_array()
                .unwrap()
                .is_empty(),
            "[{l}]"
        );
        // Single-subject outcomes.
        err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": dispute}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "no decision",
        );
        err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": dispute, "winner": NEVER}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "winner not the subject",
        );
        ok(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": dispute, "keep_both": true}),
            )
            .await,
            l,
            "uphold",
        );
        err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": dispute, "keep_both": true}),
            )
            .await,
            ErrorCode::Conflict,
            l,
            "not pending",
        );
        let dismissed = ok(
            call(&store, &a, "list_conflicts", json!({"status": "dismissed"})).await,
            l,
            "dismissed",
        );
        assert_eq!(dismissed["conflicts"].as_array().unwrap().len(), 1, "[{l}]");
        let second = ok(
            call(
                &store,
                &a,
                "challenge",
                json!({"memory_id": m, "reason": "still wrong"}),
            )
            .await,
            l,
            "challenge 2",
        );
        ok(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": second["dispute_id"], "retire": true}),
            )
            .await,
            l,
            "retire",
        );
        err(
            call(&store, &a, "forget", json!({"memory_id": m})).await,
            ErrorCode::Conflict,
            l,
            "retired memory is invalidated",
        );
        err(
            call(
                &store,
                &a,
                "challenge",
                json!({"memory_id": m, "reason": "x"}),
            )
            .await,
            ErrorCode::Conflict,
            l,
            "challenge an invalidated memory",
        );
        // A pair: the winner supersedes the loser.
        let p1 = mem(
            &store,
            &a,
            l,
            json!({"content": "The queue is RabbitMQ.", "scope": "core"}),
        )
        .await;
        let p2 = mem(
            &store,
            &a,
            l,
            json!({"content": "The queue moved to NATS JetStream.", "scope": "core"}),
        )
        .await;
        ok(
            call(
                &store,
                &a,
                "link",
                json!({"src": p1, "dst": p2, "type": "contradicts"}),
            )
            .await,
            l,
            "contradicts",
        );
        let pair = ok(
            call(
                &store,
                &a,
                "list_conflicts",
                json!({"verdict": "contradiction"}),
            )
            .await,
            l,
            "pair",
        )["conflicts"][0]["dispute_id"]
            .as_str()
            .unwrap()
            .to_string();
        err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": pair, "retire": true}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "retire a pair",
        );
        err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": pair, "winner": m}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "winner outside the pair",
        );
        ok(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": pair, "winner": p2}),
            )
            .await,
            l,
            "winner",
        );
        let row = store
            .get_memory(&a, &zm_contracts::MemoryId::parse(&p1).unwrap())
            .await
            .unwrap();
        assert_eq!(
            row.superseded_by.as_ref().map(zm_contracts::MemoryId::as_str),
            Some(p2.as_str()),
            "[{l}] the supersede chain"
        );
        assert!(row.invalidated_at.is_some(), "[{l}]");
        // A retry naming the retired memory is told the conflict is
        // settled, not to restore that memory first.
        let e = err(
            call(
                &store,
                &a,
                "resolve_conflict",
                json!({"dispute_id": pair, "winner": p1}),
            )
            .await,
            ErrorCode::Conflict,
            l,
            "settled",
        );
        assert!(e.message.contains("not pending"), "[{l}] {}", e.message);
        let ids = recall_ids(
            &store,
            &a,
            l,
            json!({"query": "queue RabbitMQ NATS", "scopes": ["*"]}),
        )
        .await;
        assert!(ids.contains(&p2) && !ids.contains(&p1), "[{l}] {ids:?}");
        ok(
            call(&store, &a, "restore_memory", json!({"memory_id": p1})).await,
            l,
            "restore the loser",
        );
    }

    async fn a_near_identical_memory_files_an_unjudged_pair(store: Store, l: &str) {
        let (_, a) = user(&store, "unjudged").await;
        let text = "The nightly backup job for the billing database runs at two in the morning UTC and keeps thirty days";
        let first = mem(&store, &a, l, json!({"content": text, "scope": "core"})).await;
        let out = ok(
            call(
                &store,
                &a,
                "remember",
                json!({"content": format!("{text}."), "scope": "core"}),
            )
            .await,
            l,
            "near-identical",
        );
        assert_ne!(out["memory_id"], first.as_str(), "[{l}] not exact: stored");
        let conflicts = ok(
            call(&store, &a, "list_conflicts", json!({"verdict": "unjudged"})).await,
            l,
            "list",
        );
        let c = &conflicts["conflicts"][0];
        assert_eq!(c["memory_b"]["id"], first.as_str(), "[{l}] {conflicts}");
        assert!(
            c["confidence"].is_null() && c["rationale"].is_null(),
            "[{l}]"
        );
    }

    /// One pending conflict a pair: a near-identical memory written as
    /// contradicting the other files the contradiction alone, and a
    /// `contradicts` link drawn between a pair already in review as
    /// near-duplicates judges that conflict instead of filing a second.
    async fn a_pair_has_one_pending_conflict(store: Store, l: &str) {
        let (_, a) = user(&store, "one-pair").await;
        let pending = |label: &'static str| {
            let (store, a) = (&store, a.clone());
            async move {
                let out = ok(call(store, &a, "list_conflicts", json!({})).await, l, label);
                out["conflicts"].as_array().unwrap().iter().map(|c| c["verdict"].as_str().unwrap().to_string()).collect::<Vec<_>>()
            }
        };
        let text = "The nightly backup of the billing database runs at two UTC on the third replica and keeps fourteen daily snapshots";
        let first = mem(&store, &a, l, json!({"content": text, "scope": "core"})).await;
        mem(&store, &a, l, json!({"content": format!("{text}."), "scope": "core", "links": [{"dst": first, "type": "contradicts"}]})).await;
        assert_eq!(pending("written contradicting").await, ["contradiction"], "[{l}]");
        let text = "The nightly export of the payroll database runs at four UTC on the second replica and keeps seven weekly snapshots";
        let older = mem(&store, &a, l, json!({"content": text, "scope": "core"})).await;
        let newer = mem(&store, &a, l, json!({"content": format!("{text}!"), "scope": "core"})).await;
        assert_eq!(pending("near-duplicates").await, ["unjudged", "contradiction"], "[{l}]");
        ok(call(&store, &a, "link", json!({"src": newer, "dst": older, "type": "contradicts"})).await, l, "link");
        assert_eq!(pending("judged").await, ["contradiction", "contradiction"], "[{l}] judged, not filed again");
    }

    /// Doing what `similar_existing` suggests (supersede the older with
    /// the newer) leaves no pending pair and no disputed hit: a conflict
    /// one of whose memories is retired is moot, and back once that
    /// memory is restored.
    async fn a_pair_whose_side_is_retired_is_moot(store: Store, l: &str) {
        let (_, a) = user(&store, "moot").await;
        let text = "The nightly backup job for the ledger database runs at three in the morning UTC and keeps sixty days";
        let first = mem(&store, &a, l, json!({"content": text, "scope": "core"})).await;
        let second = mem(&store, &a, l, json!({"content": format!("{text}."), "scope": "core"})).await;
        let pending = |who: &zm_store::Caller| {
            let (store, who) = (&store, who.clone());
            async move {
                let out = ok(call(store, &who, "list_conflicts", json!({"verdict": "unjudged"})).await, l, "list");
                out["conflicts"].as_array().map_or(0, Vec::len)
            }
        };
        let disputed = |who: &zm_store::Caller| {
            let (store, who, second) = (&store, who.clone(), second.clone());
            async move {
                let out = ok(call(store, &who, "recall", json!({"query": "nightly backup ledger database"})).await, l, "recall");
                let hit = out["memories"].as_array().and_then(|m| m.iter().find(|h| h["id"] == json!(second))).cloned();
                hit.unwrap_or_else(|| panic!("[{l}] {out}"))["disputed"].as_bool()
            }
        };
        assert_eq!(pending(&a).await, 1, "[{l}] filed");
        assert_eq!(disputed(&a).await, Some(true), "[{l}]");
        ok(call(&store, &a, "remember", json!({"content": format!("{text}."), "scope": "core", "links": [{"dst": first, "type": "supersedes"}]})).await, l, "supersede the older");
        assert_eq!(pending(&a).await, 0, "[{l}] moot once a side is retired");
        assert_eq!(disputed(&a).await, Some(false), "[{l}]");
        // The memory's page says so too, instead of the stored `pending`.
        let page_status = |who: &zm_store::Caller| {
            let (store, who, second) = (&store, who.clone(), second.clone());
            async move {
                let ctx = store.memory_context(&who, &second).await.expect("context");
                ctx.conflicts.iter().map(|(_, _, status)| status.clone()).collect::<Vec<_>>()
            }
        };
        assert_eq!(page_status(&a).await, ["moot"], "[{l}] the page");
        ok(call(&store, &a, "restore_memory", json!({"memory_id": first})).await, l, "restore");
        assert_eq!(pending(&a).await, 1, "[{l}] back with the memory");
        assert_eq!(page_status(&a).await, ["pending"], "[{l}] the page");
        // Settled for the newer while the older is forgotten: the older
        // keeps its own story (no successor, no `supersedes` link drawn).
        let listed = ok(call(&store, &a, "list_conflicts", json!({"verdict": "unjudged"})).await, l, "list");
        let dispute = listed["conflicts"][0]["dispute_id"].as_str().unwrap_or_else(|| panic!("[{l}] {listed}")).to_string();
        ok(call(&store, &a, "forget", json!({"memory_id": first})).await, l, "forget the older");
        ok(call(&store, &a, "resolve_conflict", json!({"dispute_id": dispute, "winner": second})).await, l, "settle for the newer");
        let older = store.get_memory(&a, &first.parse().unwrap()).await.expect("the older");
        assert!(older.superseded_by.is_none(), "[{l}] {older:?}");
        let ctx = store.memory_context(&a, &second).await.expect("context");
        let links = ctx.links.iter().filter(|(t, other, _, _)| t == "supersedes" && *other == first).count();
        assert_eq!(links, 0, "[{l}] no supersedes link for a retirement that did not happen: {:?}", ctx.links);
    }
}
