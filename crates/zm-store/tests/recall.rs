//! What `recall` (and `build_context`) read, on every backend: the default
//! read sets — pinned by a hint, a thread or the attached project, unpinned,
//! explicit scopes, kinds, briefings, an unresolvable hint — and full-text
//! safety: hostile and over-long queries never error, and operators are
//! plain words.
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::{ErrorCode, RecallInput};
use zm_store::Store;

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

backend_tests! {
    async fn default_read_sets(store: Store, label: &str) {
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
        let alpha = in_alpha.scope.clone();
        let beta = in_beta.scope.clone();
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
            out.session.attached_project.as_deref(),
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
            out.session.attached_project.as_deref(),
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

    /// A memory holding every query word ranks above memories holding only
    /// some of them, however often those repeat the rarer word; its score
    /// is at least 0.5 and theirs below. With fewer full matches than `k`,
    /// the partial ones still fill the list.
    async fn memories_with_every_word_rank_first(store: Store, label: &str) {
        let (_, caller) = user(&store, "every-word").await;
        let full = mem(&store, &caller, label, json!({"content": "During the quarterly review we found that the consumer group of the kafkaesque cluster needs a manual rebalanceworthy step after each deploy of the billing service.", "scope": "core"})).await;
        let mut partial = Vec::new();
        for i in 0..6 {
            partial.push(mem(&store, &caller, label, json!({"content": format!("kafkaesque kafkaesque kafkaesque note {i}"), "scope": "core"})).await);
        }
        for i in 0..6 {
            mem(&store, &caller, label, json!({"content": format!("rebalanceworthy item {i} in the queue"), "scope": "core"})).await;
        }
        let out = ok(
            recall(&store, &caller, json!({"query": "kafkaesque rebalanceworthy", "k": 10})).await,
            label,
            "recall",
        );
        assert_eq!(out.memories.first().map(|m| m.id.as_str()), Some(full.as_str()), "[{label}] the full match first: {:?}", out.memories.iter().map(|m| (&m.content, m.score)).collect::<Vec<_>>());
        assert!(out.memories[0].score >= 0.5, "[{label}] full-match score {}", out.memories[0].score);
        assert_eq!(out.memories.len(), 10, "[{label}] partial matches fill k");
        for m in &out.memories[1..] {
            assert!(m.score < 0.5, "[{label}] partial-match score {}", m.score);
        }
        assert!(out.memories.iter().any(|m| partial.contains(&m.id.to_string())), "[{label}] partials listed");
    }

    /// Long memories: ranking reads no content, yet a hit's excerpt is cut
    /// around its matching word even when that word is past the first
    /// thousands of characters; the briefing's other legs (recent, open
    /// loops) show headlines cut from a bounded preview, marked truncated.
    async fn long_memories_are_excerpted_around_the_match(store: Store, label: &str) {
        let (_, caller) = user(&store, "long").await;
        let filler = "lorem ipsum dolor sit amet ".repeat(1_000);
        let long = format!("{filler} the zeppelinmarker sits here at the end.");
        assert!(long.chars().count() > 20_000);
        let id = mem(&store, &caller, label, json!({"content": long, "scope": "core"})).await;
        let loop_text = format!("Open task: {filler}");
        mem(&store, &caller, label, json!({"content": loop_text, "scope": "core", "kind": "task"})).await;

        let out = ok(recall(&store, &caller, json!({"query": "zeppelinmarker"})).await, label, "recall");
        let hit = out.memories.iter().find(|m| m.id.as_str() == id).expect("the long memory is a hit");
        assert!(hit.content.contains("zeppelinmarker"), "[{label}] the excerpt holds the match");
        assert!(hit.content.starts_with('…'), "[{label}] cut before the match");
        assert!(hit.content.chars().count() <= 2_402, "[{label}] excerpt bounded: {}", hit.content.chars().count());

        let ctx = ok(
            build_context(&store, &caller, json!({"topic": "zeppelinmarker", "briefing": true, "scopes": ["core"]})).await,
            label,
            "briefing",
        );
        let m = ctx.memories.iter().find(|m| m.id.as_str() == id).expect("the long memory in the briefing");
        assert!(m.content.contains("zeppelinmarker") && m.truncated == Some(true), "[{label}] briefing excerpt");
        let open = ctx.open_loops.first().expect("the open loop");
        assert_eq!(open.truncated, Some(true), "[{label}] loop headline cut");
        assert!(open.content.chars().count() <= 2_401, "[{label}] loop headline bounded");
        assert!(open.content.starts_with("Open task:"), "[{label}] a headline starts at the start");
    }

    async fn hostile_full_text_queries_never_error(store: Store, label: &str) {
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

    /// A word most memories hold (more than the relevance budget) neither
    /// buries nor slows a rare one: the old memory holding the rare words
    /// is found first although 2,100 newer memories hold the common words,
    /// and a query of the common word alone still answers, with memories
    /// that hold it. The near-duplicate probe finds the old memory too.
    async fn common_words_do_not_bury_rare_ones(store: Store, label: &str) {
        let (_, caller) = user(&store, "common-words").await;
        let tools = zm_store::ToolService::new(store.clone());
        let target = mem(&store, &caller, label, json!({"content": "The zebrafish decision: keep the ledger of every invoice in one table, partitioned by month, with the audit trail beside it.", "scope": "core", "kind": "decision"})).await;
        let budget = usize::try_from(zm_store::search::RELEVANCE_BUDGET).unwrap();
        let imports: Vec<zm_contracts::ImportMemoryInput> = (0..budget + 100)
            .map(|i| {
                zm_contracts::parse_input(&json!({
                    // Distinct texts, the same words.
                    "content": format!("Routine note about the weekly sync{}", "!".repeat(i + 1)),
                    "kind": "fact",
                    "target": "personal",
                    "source_path": "notes/routine.md",
                    "source_hash": format!("routine-{i}"),
                }))
                .unwrap()
            })
            .collect();
        let results = tools
            .run_batch::<zm_contracts::catalogue::tool::ImportMemory>(&caller, imports)
            .await
            .unwrap();
        assert!(results.iter().all(Result::is_ok), "[{label}] the bulk lands");

        let out = ok(recall(&store, &caller, json!({"query": "the zebrafish ledger sync", "k": 5})).await, label, "recall");
        assert_eq!(out.memories.first().map(|m| m.id.as_str()), Some(target.as_str()), "[{label}] {:?}", out.memories.iter().map(|m| (&m.content, m.score)).collect::<Vec<_>>());
        assert_eq!(out.memories.len(), 5, "[{label}] partial matches fill k");

        let out = ok(recall(&store, &caller, json!({"query": "sync", "k": 5})).await, label, "recall");
        assert_eq!(out.memories.len(), 5, "[{label}] a common word alone answers");
        assert!(out.memories.iter().all(|m| m.content.contains("sync")), "[{label}]");

        // The near-duplicate probe searches the rare words: the old memory is
        // found although thousands of newer ones share its common words.
        let near = ok(
            remember(&store, &caller, json!({"content": "The zebrafish decision: keep the ledger of every invoice in one table, partitioned by quarter, with the audit trail beside it.", "scope": "core", "kind": "decision"})).await,
            label,
            "remember",
        );
        let similar = near.similar_existing.unwrap_or_default();
        assert_eq!(similar.first().map(|s| s.id.as_str()), Some(target.as_str()), "[{label}] {similar:?}");

        // A text of common words only is still probed (newest first).
        let common = ok(
            remember(&store, &caller, json!({"content": "Routine note about the weekly sync?", "scope": "personal"})).await,
            label,
            "remember",
        );
        assert!(!common.similar_existing.unwrap_or_default().is_empty(), "[{label}] the newest routine notes are near-duplicates");
    }

    /// A file name, a host or an email address is found by its words on
    /// both backends (PostgreSQL's parser kept each as one token, which no
    /// query could name), in the every-word tier.
    async fn paths_hosts_and_addresses_are_found_by_their_words(store: Store, l: &str) {
        let (_, a) = user(&store, "recall-parts").await;
        let m = mem(&store, &a, l, json!({"content": "The proxy config is /etc/nginx/nginx.conf; alerts go to ops@example.com.", "scope": "personal", "kind": "reference"})).await;
        mem(&store, &a, l, json!({"content": "The deploy notes live in the wiki.", "scope": "personal", "kind": "reference"})).await;
        for q in ["nginx.conf", "ops@example.com", "example.com alerts", "etc nginx"] {
            let hits = ok(recall(&store, &a, json!({"query": q})).await, l, q).memories;
            let first = hits.first().unwrap_or_else(|| panic!("[{l}] {q}: nothing found"));
            assert_eq!(first.id.as_str(), m, "[{l}] {q}");
            assert!(first.score >= 0.5, "[{l}] {q}: every word, score {}", first.score);
        }
    }
}

// ---------------------------------------------------------------- corrupt rows
//
// A stored value this build does not know is a corrupt row: the read that
// meets it answers `internal` (and logs the row), never a default. These
// tests corrupt rows behind the store's back, through a raw connection to
// the same database.

/// A store and a raw connection to its database: a fresh SQLite file, or
/// the PostgreSQL test database (`None` when it is not configured).
async fn store_and_raw(backend: &str) -> Option<(Store, sqlx::AnyPool)> {
    sqlx::any::install_default_drivers();
    if backend == "sqlite" {
        let dir = tempfile::Builder::new()
            .prefix("corrupt-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("a temporary directory");
        let url = zm_store::sqlite_url(&dir.path().join("zm.db"));
        // The directory must outlive the store's connections.
        std::mem::forget(dir);
        let store = Store::open(&url).await.expect("open SQLite");
        let raw = sqlx::AnyPool::connect(&url)
            .await
            .expect("a raw connection");
        return Some((store, raw));
    }
    let url = zm_store::test_database_url();
    let Some(url) = url else {
        eprintln!("{PG_ENV} is not set: skipped the corrupt-row test on postgres");
        return None;
    };
    let store = postgres_store().await?;
    let raw = sqlx::AnyPool::connect(url.trim())
        .await
        .expect("a raw connection");
    Some((store, raw))
}

/// The answer to a read that met a corrupt row: `internal`, nothing else
/// (the `err` helper refuses `internal` as a test's expected failure).
fn internal<T: std::fmt::Debug>(r: Result<T, zm_contracts::ToolError>, label: &str, what: &str) {
    match r {
        Ok(v) => panic!("[{label}] {what}: expected internal, got success {v:?}"),
        Err(e) => assert_eq!(
            e.code,
            ErrorCode::Internal,
            "[{label}] {what}: expected internal, got {e}"
        ),
    }
}

async fn exec(raw: &sqlx::AnyPool, sql: &'static str, id: &str) {
    sqlx::query(sql)
        .bind(id.to_string())
        .execute(raw)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn a_corrupt_stored_enum_is_internal_not_a_default(backend: &str) {
    let Some((store, raw)) = store_and_raw(backend).await else {
        return;
    };
    let label = backend;
    let (_, caller) = user(&store, "corrupt").await;
    let id = mem(
        &store,
        &caller,
        label,
        json!({"content": "The corruption canary nests in the ledger service.", "kind": "fact",
               "scope": "personal", "entities": [{"name": "canary"}, {"name": "ledger"}]}),
    )
    .await;
    ok(
        call(
            &store,
            &caller,
            "link",
            json!({"src": "canary", "dst": "ledger", "type": "depends_on"}),
        )
        .await,
        label,
        "link the entities",
    );
    let memory_id = zm_contracts::MemoryId::parse(&id).unwrap();
    let recall_q = json!({"query": "corruption canary ledger", "include_graph": true});
    let brief_q = json!({"topic": "corruption canary ledger"});
    // Healthy rows read.
    assert_eq!(
        recall_ids(&store, &caller, label, recall_q.clone()).await,
        vec![id.clone()]
    );
    let ctx = ok(
        build_context(&store, &caller, brief_q.clone()).await,
        label,
        "healthy briefing",
    );
    assert_eq!(ctx.edges.len(), 1, "[{label}] the edge between the anchors");
    ok(
        store.get_memory(&caller, &memory_id).await,
        label,
        "healthy get_memory",
    );

    // A kind this build does not know: every read that meets it is internal.
    exec(
        &raw,
        "UPDATE memories SET kind = 'rumour' WHERE id = $1",
        &id,
    )
    .await;
    internal(
        recall(&store, &caller, recall_q.clone()).await,
        label,
        "recall over a corrupt kind",
    );
    internal(
        build_context(&store, &caller, brief_q.clone()).await,
        label,
        "build_context over a corrupt kind",
    );
    internal(
        store.get_memory(&caller, &memory_id).await,
        label,
        "get_memory of a corrupt kind",
    );
    internal(
        call(&store, &caller, "export_memories", json!({})).await,
        label,
        "export over a corrupt kind",
    );
    exec(&raw, "UPDATE memories SET kind = 'fact' WHERE id = $1", &id).await;
    ok(
        store.get_memory(&caller, &memory_id).await,
        label,
        "get_memory once repaired",
    );

    // An edge of an unknown type is not silently dropped from a briefing.
    exec(
        &raw,
        "UPDATE edges SET type = 'befriends' WHERE owner_id = $1",
        &caller.user_id,
    )
    .await;
    internal(
        build_context(&store, &caller, brief_q).await,
        label,
        "build_context over a corrupt edge type",
    );
    // Nor is an entity of an unknown type defaulted.
    exec(
        &raw,
        "UPDATE entities SET type = 'gizmo' WHERE owner_id = $1",
        &caller.user_id,
    )
    .await;
    internal(
        recall(&store, &caller, recall_q).await,
        label,
        "recall with the graph over a corrupt entity type",
    );
    internal(
        call(&store, &caller, "entities", json!({})).await,
        label,
        "entities over a corrupt entity type",
    );
    raw.close().await;
}

mod a_corrupt_stored_enum_is_internal_not_a_default {
    #[tokio::test]
    async fn sqlite() {
        super::a_corrupt_stored_enum_is_internal_not_a_default("sqlite").await;
    }

    #[tokio::test]
    async fn postgres() {
        super::a_corrupt_stored_enum_is_internal_not_a_default("postgres").await;
    }
}
