//! Writes that meet at the same moment, on every backend: two identical
//! `remember`s (a retried call, two sub-agents) are one memory; the same
//! import item twice at once is imported once and skipped once; a pair
//! linked `contradicts` both ways at once files one conflict; edits of one
//! version at once (two dashboard tabs) leave one new version. SQLite's
//! writers take turns anyway; on PostgreSQL these hold the row or lock
//! that orders them (they failed there before: two memories, `internal`,
//! two conflicts). Sign-in attempts of one account at once get no more
//! than the free ones before the back-off. And on a PostgreSQL whose default isolation is
//! REPEATABLE READ the same holds: write transactions pin READ COMMITTED.
//!
//! Each test runs once per backend through [`backend_tests!`]. Nothing
//! waits on the clock: the tasks are started together and joined.

mod common;

use std::collections::HashSet;

use common::*;
use serde_json::{Value, json};
use zm_store::{Caller, OpenOptions, Store};

/// How many calls start at once (the PostgreSQL test pool has 4
/// connections, so at least 4 are in flight together).
const AT_ONCE: usize = 8;

/// Run `tool` with each of `args` at once; every answer, in order.
async fn at_once(
    store: &Store,
    caller: &Caller,
    tool: &'static str,
    args: Vec<Value>,
) -> Vec<Result<Value, String>> {
    let tasks: Vec<_> = args
        .into_iter()
        .map(|a| {
            let (store, caller) = (store.clone(), caller.clone());
            tokio::spawn(async move {
                call(&store, &caller, tool, a)
                    .await
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("the task ran"));
    }
    out
}

/// Identical `remember`s at once answer one memory, stored once.
async fn identical_writes(store: &Store, l: &str) {
    let (_, a) = user(store, "same-write").await;
    for round in 0..4 {
        let content = format!("The release train leaves every {round}th Thursday at noon.");
        let args = vec![json!({"content": content, "kind": "fact", "scope": "personal"}); AT_ONCE];
        let answers = at_once(store, &a, "remember", args).await;
        let ids: HashSet<String> = answers
            .iter()
            .map(|r| {
                ok(r.clone(), l, "remember at once")["memory_id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            ids.len(),
            1,
            "[{l}] round {round}: one memory for identical writes: {ids:?}"
        );
    }
    assert_eq!(
        owned(store, &a, l).await,
        4,
        "[{l}] four memories stored, one per round"
    );
}

backend_tests! {
    async fn identical_remembers_at_once_are_one_memory(store: Store, l: &str) {
        identical_writes(&store, l).await;
    }

    /// The same item imported several times at once: imported once, every
    /// other answer `skipped` with the same memory, none an error.
    async fn one_import_item_at_once_is_imported_once(store: Store, l: &str) {
        let (_, a) = user(&store, "same-import").await;
        for round in 0..4 {
            let args = json!({"content": format!("Use tabs in makefiles, rule {round}."), "kind": "convention", "target": "personal", "source_path": "CLAUDE.md", "source_hash": format!("race-{round}")});
            let answers = at_once(&store, &a, "import_memory", vec![args; AT_ONCE]).await;
            let answers: Vec<Value> = answers.into_iter().map(|r| ok(r, l, "import at once")).collect();
            let imported = answers.iter().filter(|o| o["skipped"] == false).count();
            let ids: HashSet<&str> = answers.iter().filter_map(|o| o["memory_id"].as_str()).collect();
            assert_eq!((imported, ids.len()), (1, 1), "[{l}] round {round}: imported once, one memory: {answers:?}");
        }
        assert_eq!(owned(&store, &a, l).await, 4, "[{l}] four memories");
    }

    /// Edits of one version at once (two dashboard tabs): one lands and
    /// retires it; every other answers `conflict` and writes nothing, so
    /// one live version follows, not several. In turn too: an edit of a
    /// version already edited is refused, and an edit that changes
    /// nothing answers the memory itself.
    async fn edits_of_one_version_at_once_leave_one_version(store: Store, l: &str) {
        let (_, a) = user(&store, "same-edit").await;
        let first = ok(
            remember(&store, &a, json!({"content": "Deploys go out from the blue cluster.", "kind": "fact", "scope": "personal"})).await,
            l,
            "remember",
        )
        .memory_id;
        let tasks: Vec<_> = (0..AT_ONCE)
            .map(|i| {
                let (store, a, old) = (store.clone(), a.clone(), first.clone());
                tokio::spawn(async move {
                    let raw = json!({"content": format!("Deploys go out from cluster number {i}."), "kind": "fact", "scope": "personal", "links": [{"dst": old.to_string(), "type": "supersedes"}]});
                    tools(&store).edit(&a, &raw, &old).await
                })
            })
            .collect();
        let mut landed = Vec::new();
        for t in tasks {
            match t.await.expect("the task ran") {
                Ok(out) => landed.push(out.memory_id),
                Err(e) => assert_eq!(e.code, zm_contracts::ErrorCode::Conflict, "[{l}] a losing edit: {e}"),
            }
        }
        assert_eq!(landed.len(), 1, "[{l}] one edit lands: {landed:?}");
        assert_eq!(owned(&store, &a, l).await, 2, "[{l}] the old version and one new one, nothing else");
        let old = ok(store.get_memory(&a, &first).await, l, "the old version");
        assert_eq!(old.superseded_by.as_ref(), Some(&landed[0]), "[{l}] retired by the edit that landed");

        // In turn: the retired version is edited no more.
        let raw = json!({"content": "Deploys go out from the green cluster.", "kind": "fact", "scope": "personal", "links": [{"dst": first.to_string(), "type": "supersedes"}]});
        err(tools(&store).edit(&a, &raw, &first).await, zm_contracts::ErrorCode::Conflict, l, "edit of a retired version");
        // The newest version with its own text: no change, no new memory.
        let newest = ok(store.get_memory(&a, &landed[0]).await, l, "the newest version");
        let raw = json!({"content": newest.content, "kind": "fact", "scope": "personal", "links": [{"dst": newest.id.to_string(), "type": "supersedes"}]});
        let same = ok(tools(&store).edit(&a, &raw, &newest.id).await, l, "an edit that changes nothing");
        assert_eq!(same.memory_id, newest.id, "[{l}] the memory itself");
        assert_eq!(owned(&store, &a, l).await, 2, "[{l}] still two memories");

        // An edit drawn before the memory moved (the page read it in the
        // personal scope; an agent then moved it to a project): refused,
        // the moved memory left live, nothing written beside it.
        let moved = ok(
            zm_store::ToolService::new(store.clone())
                .call(&a, zm_contracts::ToolName::MoveMemories, &json!({"memory_ids": [newest.id.to_string()], "project_hint": format!("/src/{}", unique("moved"))}))
                .await,
            l,
            "move",
        )
        .to_json();
        assert_eq!(moved["moved"], json!([newest.id.to_string()]), "[{l}] {moved}");
        let raw = json!({"content": "Deploys go out from the red cluster.", "kind": "fact", "scope": "personal", "links": [{"dst": newest.id.to_string(), "type": "supersedes"}]});
        err(tools(&store).edit(&a, &raw, &newest.id).await, zm_contracts::ErrorCode::Conflict, l, "an edit of where it was");
        let still = ok(store.get_memory(&a, &newest.id).await, l, "the moved memory");
        assert!(still.invalidated_at.is_none(), "[{l}] still live: {still:?}");
        assert_eq!(owned(&store, &a, l).await, 2, "[{l}] nothing written beside it");
    }

    /// Sign-in attempts of one account at once (the shared back-off that
    /// several instances on PostgreSQL use): each takes its place in the
    /// count before its password would be checked, so twenty at once get
    /// the five free ones between them and the rest wait out the back-off
    /// the fifth started (a read, then a count after the check, let all
    /// twenty through). A success clears the count.
    async fn sign_in_attempts_at_once_get_only_the_free_ones(store: Store, l: &str) {
        let account = format!("{}@example.com", unique("attempts"));
        let now = store.clock().now_ms();
        let policy = |n: u32| if n >= 5 { 30_000 } else { 0 };
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let (store, account) = (store.clone(), account.clone());
                tokio::spawn(async move { store.login_attempt(&account, now, 3_600_000, policy).await })
            })
            .collect();
        let mut counts = Vec::new();
        let mut refused = 0;
        for t in tasks {
            match ok(t.await.expect("the task ran"), l, "attempt at once") {
                Ok(n) => counts.push(n),
                Err(secs) => {
                    assert_eq!(secs, 30, "[{l}] the honest wait");
                    refused += 1;
                }
            }
        }
        counts.sort_unstable();
        assert_eq!(counts, vec![1, 2, 3, 4, 5], "[{l}] five places, in turn");
        assert_eq!(refused, 15, "[{l}]");
        ok(store.login_succeeded(&account).await, l, "sign in");
        assert_eq!(ok(store.login_attempt(&account, now, 3_600_000, policy).await, l, "after"), Ok(1), "[{l}] cleared");
    }

    /// `x contradicts y` and `y contradicts x` at once: one pending conflict.
    async fn a_pair_linked_both_ways_at_once_is_one_conflict(store: Store, l: &str) {
        let (_, a) = user(&store, "both-ways").await;
        for round in 0..4 {
            let x = mem(&store, &a, l, json!({"content": format!("Deploys freeze on Friday {round}."), "scope": "personal", "kind": "decision"})).await;
            let y = mem(&store, &a, l, json!({"content": format!("Deploys run every day {round}, Fridays too."), "scope": "personal", "kind": "decision"})).await;
            let args: Vec<Value> = (0..AT_ONCE)
                .map(|i| if i % 2 == 0 { json!({"src": x, "dst": y, "type": "contradicts"}) } else { json!({"src": y, "dst": x, "type": "contradicts"}) })
                .collect();
            for r in at_once(&store, &a, "link", args).await {
                ok(r, l, "link at once");
            }
        }
        let listed = ok(call(&store, &a, "list_conflicts", json!({"verdict": "contradiction"})).await, l, "list");
        assert_eq!(listed["conflicts"].as_array().map(Vec::len), Some(4), "[{l}] one conflict a pair: {listed}");
    }
}

/// On a PostgreSQL database whose sessions default to REPEATABLE READ,
/// identical writes at once are still one memory: a write transaction
/// pins READ COMMITTED (under REPEATABLE READ the second write's snapshot
/// would predate the first one's commit, and it would insert a copy).
#[tokio::test]
async fn writes_pin_read_committed_whatever_the_default() {
    let Some(url) = zm_store::test_database_url_repeatable_read() else {
        eprintln!("{PG_ENV} is not set: skipped");
        return;
    };
    let mut opts = OpenOptions::new(url);
    opts.max_connections = 4;
    let store = Store::open_with(opts)
        .await
        .expect("open PostgreSQL with REPEATABLE READ by default");
    identical_writes(&store, "postgres, repeatable read by default").await;
    // The one-statement upserts outside a write transaction too: hits on
    // one rate window at once all count (under REPEATABLE READ most
    // failed with a serialization error).
    let key = unique("race-window");
    let now = store.clock().now_ms();
    let hits =
        futures_util::future::join_all((0..32).map(|_| store.rate_hit(&key, 32, 60_000, now)))
            .await;
    for h in &hits {
        assert!(matches!(h, Ok(Ok(()))), "every hit counted: {hits:?}");
    }
    assert_eq!(
        store
            .rate_hit(&key, 32, 60_000, now)
            .await
            .expect("counted"),
        Err(60),
        "the 33rd is over the limit"
    );
}
