//! What `remember` does with what is already there, on every backend: exact
//! duplicates are absorbed only within one scope and only by live memories;
//! near-duplicates are stored and reported in `similar_existing`; a
//! `supersedes` link retires its target (and closes a superseded loop).
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::{ErrorCode, MemoryKind};
use zm_store::Store;

const LONG_ORIGINAL: &str = "The staging database cluster runs PostgreSQL sixteen with the pgvector extension enabled, nightly logical backups shipped to the eu-west object store bucket, connection pooling through pgbouncer in transaction mode, a read replica dedicated to analytics dashboards, and autovacuum tuned aggressively for the events table.";

backend_tests! {
    /// A near-duplicate whose longest words are stop words ("between",
    /// "through", "because") is found on both backends: PostgreSQL indexes
    /// no stop word, and the probe no longer spends its words on them
    /// (there it never even scored the pair).
    async fn a_near_duplicate_full_of_stop_words_is_found(store: Store, label: &str) {
        let (_, caller) = user(&store, "stopdup").await;
        let first = ok(
            remember(&store, &caller, json!({"content": "Sync between ourselves and the regions runs through queues because of latency against retries themselves", "scope": "core"})).await,
            label,
            "first",
        );
        let second = ok(
            remember(&store, &caller, json!({"content": "Sync between ourselves and the regions flows through queues because of latency against retries themselves", "scope": "core"})).await,
            label,
            "second",
        );
        let similar = second.similar_existing.clone().unwrap_or_default();
        assert!(
            similar.iter().any(|s| s.id == first.memory_id),
            "[{label}] the first is similar: {similar:?}"
        );
    }

    /// `entities: []` names nothing: the content is scanned for known
    /// names and a decision gets the hint to name its subject, as with no
    /// list at all.
    async fn an_empty_entity_list_names_nothing(store: Store, label: &str) {
        let (_, a) = user(&store, "empty-ents").await;
        ok(call(&store, &a, "link", json!({"src": "Ledgerdb", "dst": "Billing", "type": "relates_to"})).await, label, "known names");
        let out = ok(call(&store, &a, "remember", json!({"content": "We moved Ledgerdb to weekly vacuum runs.", "kind": "decision", "scope": "personal", "entities": []})).await, label, "remember");
        assert!(out["anchors"].to_string().contains("Ledgerdb"), "[{label}] scanned: {out}");
        let out = ok(call(&store, &a, "remember", json!({"content": "We picked the second vendor.", "kind": "decision", "scope": "personal", "entities": []})).await, label, "remember");
        assert!(out["anchor_hint"].is_string(), "[{label}] hinted: {out}");
    }

    /// A known name anchors a memory only as whole words of its text:
    /// "Ann" is not in "channel", nor "Redis" in "shared is".
    async fn a_scan_finds_names_as_whole_words(store: Store, label: &str) {
        let (_, a) = user(&store, "whole-words").await;
        ok(call(&store, &a, "link", json!({"src": "Ann", "dst": "Redis", "type": "uses"})).await, label, "known names");
        let out = ok(call(&store, &a, "remember", json!({"content": "Every channel has a planning doc; the cache we shared is stale.", "kind": "fact", "scope": "personal"})).await, label, "remember");
        assert!(out.get("anchors").is_none_or(|a| a.as_array().is_some_and(Vec::is_empty)), "[{label}] nothing named: {out}");
        let out = ok(call(&store, &a, "remember", json!({"content": "Ann moved the sessions to redis.", "kind": "fact", "scope": "personal"})).await, label, "remember");
        let mut anchors: Vec<&str> = out["anchors"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
        anchors.sort_unstable();
        assert_eq!(anchors, ["Ann", "Redis"], "[{label}] {out}");
    }

    async fn exact_dedup_only_within_one_scope(store: Store, label: &str) {
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

    /// The same words as another kind are a memory of their own: a `task`
    /// absorbed into a `fact` would never be an open loop.
    async fn exact_dedup_only_within_one_kind(store: Store, label: &str) {
        let (_, caller) = user(&store, "dedup-kind").await;
        let text = "Rotate the staging database password.";
        let fact = ok(remember(&store, &caller, json!({"content": text, "kind": "fact", "scope": "core"})).await, label, "fact");
        let task = ok(remember(&store, &caller, json!({"content": text, "kind": "task", "scope": "core"})).await, label, "task");
        assert_eq!(task.deduplicated, None, "[{label}] another kind is not absorbed");
        assert_ne!(task.memory_id, fact.memory_id, "[{label}] a memory of its own");
        // Listed as similar, but nothing to judge between the two.
        assert!(task.similar_existing.clone().unwrap_or_default().iter().any(|s| s.id == fact.memory_id), "[{label}] listed");
        let pending = ok(call(&store, &caller, "list_conflicts", json!({"verdict": "unjudged"})).await, label, "conflicts");
        assert_eq!(pending["conflicts"], json!([]), "[{label}] no conflict filed");
        let got = ok(store.get_memory(&caller, &task.memory_id).await, label, "get task");
        assert_eq!(got.kind, MemoryKind::Task, "[{label}] stored as a task");
        let again = ok(remember(&store, &caller, json!({"content": text, "kind": "task", "scope": "core"})).await, label, "task again");
        assert_eq!((again.deduplicated, &again.memory_id), (Some(true), &task.memory_id), "[{label}] the task absorbs a repeat of itself");
        // An import follows the same rule.
        let imported = ok(call(&store, &caller, "import_memory", json!({"content": text, "kind": "decision", "target": "core", "source_hash": "dedup-kind-1", "source_path": "notes.md"})).await, label, "import");
        assert_ne!(imported["deduplicated"], json!(true), "[{label}] an import of another kind is new: {imported}");
        let imported = ok(call(&store, &caller, "import_memory", json!({"content": text, "kind": "fact", "target": "core", "source_hash": "dedup-kind-2", "source_path": "notes.md"})).await, label, "import");
        assert_eq!((&imported["deduplicated"], &imported["memory_id"]), (&json!(true), &json!(fact.memory_id)), "[{label}] an import of the same kind is absorbed");
    }

    /// An edit (the dashboard's new version) keeps the old version's
    /// entities and its own links, which its input does not name; the
    /// `supersedes` it drew is the new version's only.
    async fn an_edit_keeps_entities_and_links(store: Store, label: &str) {
        let (_, caller) = user(&store, "edit-graph").await;
        let other = ok(remember(&store, &caller, json!({"content": "Invoices are archived yearly.", "scope": "core"})).await, label, "other").memory_id;
        let old = ok(remember(&store, &caller, json!({"content": "We bill monthly, in arrears.", "kind": "decision", "scope": "core", "entities": [{"name": "billing-service", "type": "service"}], "links": [{"dst": other, "type": "relates_to"}]})).await, label, "old").memory_id;
        let edited = ok(common::tools(&store).edit(&caller, &json!({"content": "We bill monthly, in arrears, on the first.", "kind": "decision", "scope": "core", "links": [{"dst": old, "type": "supersedes"}]}), &old).await, label, "edit");
        let ctx = store.memory_context(&caller, edited.memory_id.as_str()).await.expect("context");
        assert_eq!(ctx.entities, [("billing-service".to_string(), "service".to_string())], "[{label}] entities kept");
        let mut outgoing: Vec<(String, String)> = ctx.links.iter().filter(|l| l.2).map(|l| (l.0.clone(), l.1.clone())).collect();
        outgoing.sort();
        assert_eq!(outgoing, [("relates_to".to_string(), other.to_string()), ("supersedes".to_string(), old.to_string())], "[{label}] links kept");
    }

    /// A version a person saves in the dashboard is theirs: `human`, in
    /// the memory and in its audit row; an agent's write stays `agent`.
    async fn a_dashboard_edit_is_written_by_a_human(store: Store, label: &str) {
        let (_, caller) = user(&store, "edit-human").await;
        let old = ok(remember(&store, &caller, json!({"content": "Standups are at 09:30.", "kind": "convention", "scope": "core"})).await, label, "old").memory_id;
        let mut person = caller.clone();
        person.transport = zm_store::Transport::Dashboard;
        let edited = ok(common::tools(&store).edit(&person, &json!({"content": "Standups are at 09:45.", "kind": "convention", "scope": "core", "links": [{"dst": old, "type": "supersedes"}]}), &old).await, label, "edit");
        let got = ok(store.get_memory(&caller, &edited.memory_id).await, label, "get edit");
        assert_eq!(got.author_kind, zm_contracts::AuthorKind::Human, "[{label}] {got:?}");
        let was = ok(store.get_memory(&caller, &old).await, label, "get old");
        assert_eq!(was.author_kind, zm_contracts::AuthorKind::Agent, "[{label}] {was:?}");
        let audit = ok(store.audit_rows(&caller.user_id, 10).await, label, "audit");
        let mut kinds: Vec<(&str, &str)> = audit.iter().filter(|r| r["command"] == "remember").filter_map(|r| Some((r["command"].as_str()?, r["author_kind"].as_str()?))).collect();
        kinds.sort_unstable();
        assert_eq!(kinds, [("remember", "agent"), ("remember", "human")], "[{label}] {audit:?}");
    }

    /// Exact copies of a text in other projects never take the places of
    /// `similar_existing`: ten of them (as many as the report lists, and
    /// a better match than anything else) used to fill it before they were
    /// dropped as another project's, so the one-word edit in the writer's
    /// own project was neither listed nor filed for review.
    async fn other_projects_copies_leave_room_for_a_near_duplicate(store: Store, label: &str) {
        let (_, caller) = user(&store, "cross-cap").await;
        for i in 0..10 {
            let copy = ok(
                remember(&store, &caller, json!({"content": LONG_ORIGINAL, "project_hint": format!("/work/repos/cross-cap-p{i}")})).await,
                label,
                "a copy in another project",
            );
            assert!(copy.scope.starts_with("proj."), "[{label}] a project: {}", copy.scope);
        }
        let hint = "/work/repos/cross-cap-x";
        let edited = LONG_ORIGINAL.replace("sixteen", "seventeen");
        let edit = ok(remember(&store, &caller, json!({"content": edited, "project_hint": hint})).await, label, "the edit");
        assert_eq!(edit.similar_existing, None, "[{label}] other projects' copies are not listed");
        let again = ok(remember(&store, &caller, json!({"content": LONG_ORIGINAL, "project_hint": hint})).await, label, "the text in the edit's project");
        assert_eq!(again.scope, edit.scope, "[{label}] one project");
        assert_eq!(again.deduplicated, None, "[{label}] not the same words: stored");
        let similar = again.similar_existing.clone().unwrap_or_default();
        let listed: Vec<_> = similar.iter().map(|s| s.id.clone()).collect();
        assert_eq!(listed, vec![edit.memory_id.clone()], "[{label}] the edit, and only it: {similar:?}");
        let pairs = unjudged_pairs(&store, &caller, label).await;
        let mut want = [edit.memory_id.to_string(), again.memory_id.to_string()];
        want.sort();
        assert_eq!(pairs, vec![want], "[{label}] the pair in one project is filed for review: {pairs:?}");
    }

    async fn near_duplicates_are_reported_and_supersedes_retires(store: Store, label: &str) {
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
