//! Hybrid recall with the bundled model, on every backend: a paraphrase
//! sharing no word with its memory is found once the memory is embedded;
//! a memory without a vector is still found by its words; changing the
//! model's identity makes every memory pending again; vectors never cross
//! users, and a forgotten memory is not found by meaning; reworded
//! near-duplicates become an `unjudged` conflict once embedded, once; a
//! full-text hit holding more of the query's words weighs more; memories
//! the caller cannot read (another team's, or of a kind not asked for)
//! decide nothing about the dense leg's hits, and a project shared with
//! a team is found by meaning at once; what an import brings is
//! not swept for near-duplicates; a hybrid recall returns as many hits as
//! a lexical one; two instances on one database never embed one memory at
//! once; the sweep's three places go to pairs it may file, and long
//! memories sharing a preamble are not paired by meaning alone; a
//! full-text match past the fusion's depth is still `fts_matched`; a
//! sweep backlog past what one statement binds is swept in chunks.

mod common;

use std::sync::Arc;

use common::*;
use serde_json::{Value, json};
use zm_contracts::MemoryId;
use zm_embed::{EmbedError, Encoder};
use zm_store::{Caller, Store};

/// The bundled model.
fn model() -> Arc<dyn Encoder> {
    zm_embed::bundled()
        .expect("the tests are built with the bundled model")
        .expect("the bundled model loads")
}

/// The bundled model under another identity (as a new model version would
/// be): the same vectors, a different name.
struct Renamed(Arc<dyn Encoder>, String);

impl Encoder for Renamed {
    fn model(&self) -> &str {
        &self.1
    }
    fn dims(&self) -> usize {
        self.0.dims()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.0.embed(texts)
    }
}

/// Embed pending memories (newest first) until `ids` are all indexed. On a
/// shared PostgreSQL database other tests' memories are embedded too.
async fn embed(store: &Store, ids: &[&str], l: &str) {
    for _ in 0..200 {
        if ids.iter().all(|id| store.is_embedded(id)) {
            return;
        }
        let n = ok(store.embed_pending(64).await, l, "embed");
        if n == 0 {
            ok(store.refresh_vectors().await, l, "refresh");
        }
    }
    panic!("[{l}] {ids:?} were not embedded");
}

async fn hits(store: &Store, caller: &Caller, query: &str, l: &str) -> Vec<Value> {
    let out = ok(
        call(store, caller, "recall", json!({"query": query, "k": 10})).await,
        l,
        "recall",
    );
    out["memories"].as_array().cloned().unwrap_or_default()
}

/// An encoder of its own identity whose vectors no memory here ever gets
/// (nothing is embedded with it): a recall embeds its query, so ranking
/// takes the hybrid path, and the dense leg has nothing to propose. Other
/// tests embedding pending memories on a shared database write vectors of
/// other models, which this identity never reads.
struct QueryOnly;

impl Encoder for QueryOnly {
    fn model(&self) -> &str {
        "test-query-only"
    }
    fn dims(&self) -> usize {
        384
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut unit = vec![0.0; 384];
        unit[0] = 1.0;
        Ok(texts.iter().map(|_| unit.clone()).collect())
    }
}

/// An encoder that points the query `5433` and any text about a plant one
/// way and every other text another: the dense leg's nearest memory to
/// that query is the plant's (cosine 1), never the one holding the word.
struct Pointing;

impl Encoder for Pointing {
    fn model(&self) -> &str {
        "test-pointing"
    }
    fn dims(&self) -> usize {
        384
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0; 384];
                v[usize::from(!(t.contains("plant") || *t == "5433"))] = 1.0;
                v
            })
            .collect())
    }
}

fn find<'a>(hits: &'a [Value], id: &str) -> Option<&'a Value> {
    hits.iter().find(|h| h["id"] == id)
}

backend_tests! {
    async fn a_paraphrase_is_found_once_embedded(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-a").await;
        let target = mem(&store, &a, l, json!({"content": "We chose Postgres over Mongo for billing because we need transactions.", "kind": "decision", "scope": "personal"})).await;
        let other = mem(&store, &a, l, json!({"content": "The office plant needs water on Fridays.", "kind": "fact", "scope": "personal"})).await;
        let query = "which datastore did we pick for invoices";
        // Lexical: no word in common, nothing found.
        assert!(find(&hits(&store, &a, query, l).await, &target).is_none(), "[{l}] lexical finds no paraphrase");
        store.set_encoder(model());
        // Model loaded, memory not embedded yet: still lexical.
        assert!(find(&hits(&store, &a, query, l).await, &target).is_none(), "[{l}] not embedded yet");
        embed(&store, &[&target, &other], l).await;
        let found = hits(&store, &a, query, l).await;
        let hit = find(&found, &target).unwrap_or_else(|| panic!("[{l}] the paraphrase finds its memory: {found:?}"));
        assert_eq!(hit["fts_matched"], false, "[{l}] found by meaning, not by words");
        let sim = hit["similarity"].as_f64().expect("a similarity");
        assert!(sim > 0.2 && sim <= 1.0, "[{l}] similarity {sim}");
        let pos = |id: &str| found.iter().position(|h| h["id"] == id);
        assert!(pos(&other).is_none_or(|o| o > pos(&target).unwrap()), "[{l}] the paraphrase ranks above the unrelated memory");
        // A query that shares words is found by both legs.
        let both = hits(&store, &a, "Postgres billing transactions", l).await;
        let hit = find(&both, &target).expect("found by its words");
        assert_eq!(hit["fts_matched"], true, "[{l}]");
        assert!(hit["similarity"].as_f64().is_some(), "[{l}] a full-text hit carries its cosine too");
    }

    async fn the_benchmark_sweep_embeds_each_query_once(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-memo").await;
        let m = mem(&store, &a, l, json!({"content": "The nightly backup goes to a bucket in Oslo.", "kind": "fact", "scope": "personal"})).await;
        store.set_encoder(model());
        embed(&store, &[&m], l).await;
        let query = "where are the nightly copies of our data kept";
        let asked = |store: &Store| store.semantic_status().queries;
        let before = asked(&store);
        let first = hits(&store, &a, query, l).await;
        hits(&store, &a, query, l).await;
        assert_eq!(asked(&store) - before, 2, "[{l}] recall embeds every query it is asked");
        // Kept by text from now on: asked twice more, embedded once, and
        // the same answer as the embedded query gave.
        store.keep_query_vectors();
        let kept = hits(&store, &a, query, l).await;
        let again = hits(&store, &a, query, l).await;
        assert_eq!(asked(&store) - before, 3, "[{l}] the kept vector is used");
        let ranked = |h: &[Value]| -> Vec<(Value, Value)> { h.iter().map(|x| (x["id"].clone(), x["similarity"].clone())).collect() };
        assert!(find(&first, &m).is_some_and(|h| h["similarity"].is_f64()), "[{l}] {first:?}");
        assert_eq!(ranked(&kept), ranked(&first), "[{l}]");
        assert_eq!(ranked(&again), ranked(&first), "[{l}]");
        hits(&store, &a, "another question entirely", l).await;
        assert_eq!(asked(&store) - before, 4, "[{l}] a new text is embedded");
    }

    async fn a_memory_without_a_vector_is_found_by_its_words(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-lex").await;
        store.set_encoder(model());
        let m = mem(&store, &a, l, json!({"content": "The ingest queue is Kafka with twelve partitions.", "kind": "fact", "scope": "personal"})).await;
        assert!(!store.is_embedded(&m), "[{l}] remember never embeds inline");
        let found = hits(&store, &a, "Kafka partitions", l).await;
        let hit = find(&found, &m).expect("found by full text");
        assert_eq!(hit["fts_matched"], true, "[{l}]");
        assert!(hit["similarity"].is_null(), "[{l}] no vector, no similarity: {hit}");
    }

    async fn a_new_model_identity_embeds_everything_again(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-model").await;
        let m = mem(&store, &a, l, json!({"content": "Deploys go out on Tuesdays after the change review.", "kind": "convention", "scope": "personal"})).await;
        let base = model();
        store.set_encoder(Arc::clone(&base));
        embed(&store, &[&m], l).await;
        let renamed = format!("{}+test-variant-{}", base.model(), unique(""));
        store.set_encoder(Arc::new(Renamed(Arc::clone(&base), renamed.clone())));
        assert_eq!(store.semantic_status().model.as_deref(), Some(renamed.as_str()));
        assert!(!store.is_embedded(&m), "[{l}] vectors of another model are not compared");
        assert!(ok(store.embedding_queue().await, l, "queue") >= 1, "[{l}] the memory is pending again");
        // What `reindex` without `--all` refuses to replace.
        let other = ok(store.vectors_of_another_model(&renamed).await, l, "other model");
        assert!(other.is_some_and(|(model, n)| model != renamed && n >= 1), "[{l}] the first model's vectors are another model's");
        let found = hits(&store, &a, "when do releases ship", l).await;
        assert!(find(&found, &m).is_none_or(|h| h["fts_matched"] == true), "[{l}] no dense hit before re-embedding");
        embed(&store, &[&m], l).await;
        let found = hits(&store, &a, "what weekday do we release on", l).await;
        let hit = find(&found, &m).unwrap_or_else(|| panic!("[{l}] found by meaning after re-embedding: {found:?}"));
        assert_eq!(hit["fts_matched"], false, "[{l}]");
    }

    async fn vectors_never_cross_users_and_forgotten_memories_are_not_found(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-iso-a").await;
        let (_, b) = user(&store, "hy-iso-b").await;
        let secret = mem(&store, &a, l, json!({"content": "Our acquisition talks with Initech close in March.", "kind": "fact", "scope": "personal"})).await;
        let gone = mem(&store, &a, l, json!({"content": "The staging cluster lives in Frankfurt.", "kind": "fact", "scope": "personal"})).await;
        let own = mem(&store, &b, l, json!({"content": "B keeps a sourdough starter in the fridge.", "kind": "fact", "scope": "personal"})).await;
        store.set_encoder(model());
        embed(&store, &[&secret, &gone, &own], l).await;
        // B asks about A's memory in other words: A's vector is never B's
        // hit, though the same question finds it by meaning for A.
        let asked = "when does the company merger finish";
        let found = hits(&store, &a, asked, l).await;
        let hit = find(&found, &secret).unwrap_or_else(|| panic!("[{l}] A finds it by meaning: {found:?}"));
        assert_eq!(hit["fts_matched"], false, "[{l}] by meaning, not by its words: {hit}");
        let found = hits(&store, &b, asked, l).await;
        assert!(found.iter().all(|h| h["id"] != secret && h["id"] != gone), "[{l}] another user's memory: {found:?}");
        // A finds it; after forgetting, not by meaning either.
        let found = hits(&store, &a, "where is the pre-production environment hosted", l).await;
        assert!(find(&found, &gone).is_some(), "[{l}] A finds its own memory by meaning: {found:?}");
        ok(call(&store, &a, "forget", json!({"memory_id": gone})).await, l, "forget");
        let found = hits(&store, &a, "where is the pre-production environment hosted", l).await;
        assert!(find(&found, &gone).is_none(), "[{l}] a forgotten memory is not recalled: {found:?}");
        ok(call(&store, &a, "restore_memory", json!({"memory_id": gone})).await, l, "restore");
        let found = hits(&store, &a, "where is the pre-production environment hosted", l).await;
        assert!(find(&found, &gone).is_some(), "[{l}] restored, found by meaning again at once: {found:?}");
    }

    async fn reworded_duplicates_become_an_unjudged_conflict_once_embedded(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-dup-a").await;
        let (_, b) = user(&store, "hy-dup-b").await;
        let tag = unique("");
        let first = mem(&store, &a, l, json!({"content": format!("We decided to use Postgres advisory locks for the {tag} job scheduler instead of Redis locks."), "kind": "decision", "scope": "personal"})).await;
        let again = mem(&store, &a, l, json!({"content": format!("Decision: the {tag} job scheduler uses Postgres advisory locks, not Redis locks."), "kind": "decision", "scope": "personal"})).await;
        let other = mem(&store, &a, l, json!({"content": format!("The {tag} office plant needs water on Fridays."), "kind": "fact", "scope": "personal"})).await;
        let theirs = mem(&store, &b, l, json!({"content": format!("We decided to use Postgres advisory locks for the {tag} job scheduler instead of Redis locks."), "kind": "decision", "scope": "personal"})).await;
        let unjudged = |who: Caller, status: &'static str| {
            let store = store.clone();
            async move {
                let out = ok(call(&store, &who, "list_conflicts", json!({"verdict": "unjudged", "status": status})).await, l, "list_conflicts");
                out["conflicts"].as_array().cloned().unwrap_or_default()
            }
        };
        let pair_of = |c: &Value| {
            let mut p = [c["memory_a"]["id"].as_str().unwrap_or_default().to_string(), c["memory_b"]["id"].as_str().unwrap_or_default().to_string()];
            p.sort();
            p
        };
        let mut want = [first.clone(), again.clone()];
        want.sort();
        assert!(unjudged(a.clone(), "pending").await.is_empty(), "[{l}] too few words in common for remember's check");
        let base = model();
        store.set_encoder(Arc::clone(&base));
        embed(&store, &[&first, &again, &other, &theirs], l).await;
        if l == "sqlite" {
            // A database of its own: the embedder's own sweep filed it.
            assert_eq!(unjudged(a.clone(), "pending").await.len(), 1, "[{l}] filed by embed_pending");
        }
        // On a shared PostgreSQL database another test's store may have
        // embedded these first; the sweep is idempotent, run it here too.
        let ids: Vec<MemoryId> = [&first, &again, &other, &theirs].iter().map(|s| MemoryId::from_trusted(s.as_str())).collect();
        ok(store.file_meaning_duplicates(&ids).await, l, "sweep");
        let found = unjudged(a.clone(), "pending").await;
        assert_eq!(found.len(), 1, "[{l}] one pair, filed once: {found:?}");
        assert_eq!(pair_of(&found[0]), want, "[{l}] the reworded pair, not the unrelated memory");
        assert!(found[0]["rationale"].as_str().is_some_and(|r| r.starts_with("Close in meaning")), "[{l}] {found:?}");
        // The same text in another user's scope is never paired with A's.
        assert!(unjudged(b.clone(), "pending").await.is_empty(), "[{l}] no pair across users");
        // A backlog of memories waiting for their sweep larger than either
        // database binds in one statement (the sweep failed on it, and
        // kept it to fail again) is swept in chunks; the pair stays one.
        let backlog: Vec<MemoryId> = (0..70_000)
            .map(|i| MemoryId::from_trusted(format!("mem_{i:026}")))
            .chain(ids.iter().cloned())
            .collect();
        ok(store.file_meaning_duplicates(&backlog).await, l, "sweep a large backlog");
        assert_eq!(unjudged(a.clone(), "pending").await.len(), 1, "[{l}] still one pair");
        // Judged once, never filed again: not by a second sweep, not after
        // every memory is embedded again under a new model identity.
        let dispute = found[0]["dispute_id"].as_str().expect("a dispute id").to_string();
        ok(call(&store, &a, "resolve_conflict", json!({"dispute_id": dispute, "keep_both": true})).await, l, "resolve");
        assert_eq!(ok(store.file_meaning_duplicates(&ids).await, l, "sweep again"), 0, "[{l}]");
        if l == "sqlite" {
            // One model so far (on a shared database another test's
            // memories may bring another).
            assert!(!store.warned_of_a_rival_model(), "[{l}] one model, no warning");
        }
        let renamed = format!("{}+dup-variant-{}", base.model(), unique(""));
        store.set_encoder(Arc::new(Renamed(Arc::clone(&base), renamed)));
        embed(&store, &[&first, &again], l).await;
        // Vectors another model wrote minutes ago were replaced: as two
        // instances on different models would, said in the log.
        assert!(store.warned_of_a_rival_model(), "[{l}] the other model's recent vectors replaced");
        ok(store.file_meaning_duplicates(&ids).await, l, "sweep under the new model");
        let pending = unjudged(a.clone(), "pending").await;
        assert!(pending.is_empty(), "[{l}] the dismissed pair stays dismissed: {pending:?}");
        let dismissed = unjudged(a.clone(), "dismissed").await;
        assert_eq!(dismissed.len(), 1, "[{l}] {dismissed:?}");
        assert_eq!(pair_of(&dismissed[0]), want, "[{l}]");
        if l == "sqlite" {
            // A backlog is not swept: the same kind of pair, written over a
            // week before it is embedded, files nothing. (SQLite only: on a
            // shared database another test's store, with its own clock,
            // may embed these first.)
            let old = mem(&store, &a, l, json!({"content": format!("We decided to use Postgres advisory locks for the {tag} mailer instead of Redis locks."), "kind": "decision", "scope": "personal"})).await;
            let old_again = mem(&store, &a, l, json!({"content": format!("Decision: the {tag} mailer uses Postgres advisory locks, not Redis locks."), "kind": "decision", "scope": "personal"})).await;
            store.clock().advance_ms(8 * 24 * 60 * 60 * 1000);
            embed(&store, &[&old, &old_again], l).await;
            let ids: Vec<MemoryId> = [&old, &old_again].iter().map(|s| MemoryId::from_trusted(s.as_str())).collect();
            assert_eq!(ok(store.file_meaning_duplicates(&ids).await, l, "sweep a backlog"), 0, "[{l}]");
            assert!(unjudged(a.clone(), "pending").await.is_empty(), "[{l}] a week-old pair is not filed");
        }
    }

    async fn what_an_import_brings_files_no_meaning_duplicate(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-imp").await;
        let tag = unique("");
        let import = |content: String, n: u32| {
            let (store, a, tag) = (&store, &a, &tag);
            async move {
                let args = json!({"content": content, "kind": "decision", "target": "personal", "source_path": "notes.md", "source_hash": format!("{tag}-{n}")});
                let out = ok(call(store, a, "import_memory", args).await, l, "import");
                out["memory_id"].as_str().expect("an id").to_string()
            }
        };
        // Two reworded duplicates, both imported (an old export, say).
        let one = import(format!("We decided to use Postgres advisory locks for the {tag} job scheduler instead of Redis locks."), 1).await;
        let two = import(format!("Decision: the {tag} job scheduler uses Postgres advisory locks, not Redis locks."), 2).await;
        let pending = || {
            let (store, a) = (&store, &a);
            async move {
                let out = ok(call(store, a, "list_conflicts", json!({"verdict": "unjudged", "status": "pending"})).await, l, "list_conflicts");
                out["conflicts"].as_array().cloned().unwrap_or_default()
            }
        };
        store.set_encoder(model());
        embed(&store, &[&one, &two], l).await;
        let ids = |v: &[&String]| v.iter().map(|s| MemoryId::from_trusted(s.as_str())).collect::<Vec<_>>();
        assert_eq!(ok(store.file_meaning_duplicates(&ids(&[&one, &two])).await, l, "sweep"), 0, "[{l}]");
        assert!(pending().await.is_empty(), "[{l}] an import files nothing");
        // What an agent writes now is still paired with them.
        let fresh = mem(&store, &a, l, json!({"content": format!("We use Postgres advisory locks, not Redis locks, for the {tag} job scheduler."), "kind": "decision", "scope": "personal"})).await;
        embed(&store, &[&fresh], l).await;
        ok(store.file_meaning_duplicates(&ids(&[&fresh])).await, l, "sweep the fresh one");
        let found = pending().await;
        assert!(!found.is_empty(), "[{l}] a fresh restatement of an imported memory is filed");
        assert!(
            found.iter().all(|c| [&c["memory_a"]["id"], &c["memory_b"]["id"]].contains(&&json!(fresh))),
            "[{l}] every pair holds the fresh memory: {found:?}"
        );
    }

    async fn a_project_shared_with_a_team_is_found_by_meaning_at_once(store: Store, l: &str) {
        let (_, admin) = user(&store, "hy-share-admin").await;
        let (mate_user, mate) = user(&store, "hy-share-mate").await;
        let slug = unique("hyshare").replace('-', "_");
        ok(store.create_team(&admin, input!(zm_contracts::teams::CreateTeamInput, &json!({"slug": slug}))).await, l, "create team");
        join_team(&store, &admin, &slug, &mate_user.email, zm_contracts::TeamRole::Writer, l).await;
        // The teammate's own project, private, embedded while private.
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        let para = mem(&store, &mate, l, json!({"content": "Billing runs on Postgres rather than Mongo since it needs transactions.", "kind": "decision", "project_hint": remote})).await;
        store.set_encoder(model());
        embed(&store, &[&para], l).await;
        let admins = || {
            let (store, admin) = (&store, &admin);
            async move {
                let args = json!({"query": "which datastore did we pick for invoices", "k": 10, "scopes": ["*"]});
                let out = ok(call(store, admin, "recall", args).await, l, "admin recall");
                out["memories"].as_array().cloned().unwrap_or_default()
            }
        };
        assert!(find(&admins().await, &para).is_none(), "[{l}] private: not the admin's to read");
        // Shared with the team (not through a tool): the index learns it at
        // once, not at the next periodic refresh.
        let share = input!(zm_contracts::teams::ShareProjectInput, &json!({"project_hint": remote}));
        ok(store.share_project_with_team(&mate, &slug, share).await, l, "share the project");
        let found = admins().await;
        let hit = find(&found, &para).unwrap_or_else(|| panic!("[{l}] the shared project's paraphrase is found by meaning: {found:?}"));
        assert_eq!(hit["fts_matched"], false, "[{l}] by meaning");
    }

    async fn what_the_caller_cannot_read_decides_nothing_in_the_dense_leg(store: Store, l: &str) {
        let (_, admin) = user(&store, "hy-team-admin").await;
        let (_, outsider) = user(&store, "hy-team-out").await;
        let slug = unique("hyteam").replace('-', "_");
        ok(store.create_team(&admin, input!(zm_contracts::teams::CreateTeamInput, &json!({"slug": slug}))).await, l, "create team");
        let scope = format!("team.{slug}");
        let query = "which datastore did we pick for invoices";
        // A teammate who owns nothing finds the team's paraphrase by
        // meaning: the index proposes the shared memories of their scopes.
        let (mate_user, mate) = user(&store, "hy-team-mate").await;
        join_team(&store, &admin, &slug, &mate_user.email, zm_contracts::TeamRole::Reader, l).await;
        let team_para = mem(&store, &admin, l, json!({"content": "Billing runs on Postgres rather than Mongo since it needs transactions.", "kind": "decision", "scope": scope})).await;
        store.set_encoder(model());
        embed(&store, &[&team_para], l).await;
        let mates = hits(&store, &mate, query, l).await;
        let hit = find(&mates, &team_para).unwrap_or_else(|| panic!("[{l}] a teammate finds the team's paraphrase: {mates:?}"));
        assert_eq!(hit["fts_matched"], false, "[{l}] by meaning");
        // Another team's memory is the query itself: as near as can be.
        let theirs = mem(&store, &admin, l, json!({"content": query, "kind": "decision", "scope": scope})).await;
        // The outsider's paraphrase, and their own memory of another kind
        // that is the query itself too.
        let mine = mem(&store, &outsider, l, json!({"content": "We chose Postgres over Mongo for billing because we need transactions.", "kind": "decision", "scope": "personal"})).await;
        let other_kind = mem(&store, &outsider, l, json!({"content": "Which datastore did we pick for invoices? Ask the billing team.", "kind": "open-question", "scope": "personal"})).await;
        store.set_encoder(model());
        embed(&store, &[&theirs, &mine, &other_kind], l).await;
        let member = hits(&store, &admin, query, l).await;
        assert!(find(&member, &theirs).is_some(), "[{l}] the team's member reads it: {member:?}");
        // Found by meaning only, and far enough below the team's memory
        // that measuring the spread from it would cut it.
        let recall = |args: Value| {
            let (store, outsider) = (&store, &outsider);
            async move {
                let out = ok(call(store, outsider, "recall", args).await, l, "outsider recall");
                out["memories"].as_array().cloned().unwrap_or_default()
            }
        };
        let decisions = recall(json!({"query": query, "k": 10, "kinds": ["decision"]})).await;
        assert!(find(&decisions, &theirs).is_none(), "[{l}] not readable: {decisions:?}");
        let hit = find(&decisions, &mine).unwrap_or_else(|| {
            panic!("[{l}] another team's memory nearer to the query does not push the outsider's own out: {decisions:?}")
        });
        assert_eq!(hit["fts_matched"], false, "[{l}] found by meaning");
        let sim = hit["similarity"].as_f64().expect("a similarity");
        assert!(sim < 1.0 - zm_store::search::DENSE_SPREAD, "[{l}] the test needs a paraphrase below the spread: {sim}");
        // Naming the other team's scope gives it no say either.
        let named = recall(json!({"query": query, "k": 10, "kinds": ["decision"], "scopes": [scope, "personal"]})).await;
        assert!(find(&named, &theirs).is_none(), "[{l}] {named:?}");
        assert!(find(&named, &mine).is_some(), "[{l}] named scopes: {named:?}");
        // Of the caller's own, a memory of a kind not asked for is not the
        // nearest either: the spread is measured among what the recall
        // returns.
        assert!(find(&decisions, &other_kind).is_none(), "[{l}] {decisions:?}");
    }

    async fn a_hybrid_recall_returns_as_many_hits_as_a_lexical_one(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-many").await;
        let word = unique("quokka").replace('-', "");
        let mut ids = Vec::new();
        for i in 0..60 {
            ids.push(mem(&store, &a, l, json!({"content": format!("Note {i} about the {word} enclosure."), "kind": "fact", "scope": "personal"})).await);
        }
        let ask = |k: u32| {
            let (store, a, word) = (&store, &a, &word);
            async move {
                let out = ok(call(store, a, "recall", json!({"query": word, "k": k})).await, l, "recall");
                out["memories"].as_array().cloned().unwrap_or_default()
            }
        };
        assert_eq!(ask(100).await.len(), 60, "[{l}] lexical: every match");
        // A model whose vectors no memory has: the fusion runs, its dense
        // leg empty.
        store.set_encoder(Arc::new(QueryOnly));
        let hybrid = ask(100).await;
        assert_eq!(hybrid.len(), 60, "[{l}] hybrid: every match too, not the fusion's first 50");
        assert!(ids.iter().all(|id| find(&hybrid, id).is_some()), "[{l}]");
        assert_eq!(ask(10).await.len(), 10, "[{l}] k still bounds it");
    }

    /// The contract's promise holds in hybrid mode too: a memory holding
    /// every word of the query ranks first, with a score of at least 0.5,
    /// above a memory the dense leg puts first; a query with no word at
    /// all finds nothing by meaning either.
    async fn a_memory_holding_every_word_ranks_first_in_hybrid_mode_too(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-tier").await;
        let port = mem(&store, &a, l, json!({"content": "The staging database listens on port 5433.", "kind": "fact", "scope": "personal"})).await;
        let plant = mem(&store, &a, l, json!({"content": "The office plant needs water on Fridays.", "kind": "fact", "scope": "personal"})).await;
        store.set_encoder(Arc::new(Pointing));
        embed(&store, &[&port, &plant], l).await;
        let found = hits(&store, &a, "5433", l).await;
        assert_eq!(found.first().map(|h| h["id"].clone()), Some(json!(port)), "[{l}] {found:?}");
        assert!(found[0]["score"].as_f64().unwrap() >= 0.5, "[{l}] {found:?}");
        let by_meaning = find(&found, &plant).unwrap_or_else(|| panic!("[{l}] the dense leg's hit: {found:?}"));
        assert_eq!(by_meaning["fts_matched"], false, "[{l}]");
        assert!(by_meaning["score"].as_f64().unwrap() < 0.5, "[{l}] {found:?}");
        for wordless in ["?!", "((( )))", "🎉"] {
            assert!(hits(&store, &a, wordless, l).await.is_empty(), "[{l}] {wordless:?}");
        }
    }

    async fn a_full_text_hit_holding_more_of_the_query_weighs_more(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-cover").await;
        let remember = |text: &'static str| {
            let (store, a) = (&store, &a);
            async move { mem(store, a, l, json!({"content": text, "kind": "fact", "scope": "personal"})).await }
        };
        // One query word, over and over: full text alone ranks it first.
        let one = remember("Zanzibar zanzibar zanzibar zanzibar zanzibar zanzibar zanzibar.").await;
        // Three of the four words, once each, among memories holding them too.
        let three = remember("The ferry timetable at the harbour changed last week.").await;
        for t in ["The ferry was late again.", "Print the timetable for the kitchen wall.", "The harbour closes at dusk."] {
            remember(t).await;
        }
        let query = "zanzibar ferry timetable harbour";
        let pos = |found: &[Value], id: &str| found.iter().position(|h| h["id"] == id);
        let lexical = hits(&store, &a, query, l).await;
        assert!(
            pos(&lexical, &one).is_some() && pos(&lexical, &one) < pos(&lexical, &three),
            "[{l}] by full-text relevance the repeated word ranks first: {lexical:?}"
        );
        store.set_encoder(Arc::new(QueryOnly));
        let hybrid = hits(&store, &a, query, l).await;
        assert!(
            hybrid.iter().all(|h| h["similarity"].is_null()),
            "[{l}] no memory has a vector of this model: the dense leg proposes nothing: {hybrid:?}"
        );
        assert_eq!(
            pos(&hybrid, &three),
            Some(0),
            "[{l}] three of the four words outweigh one word repeated: {hybrid:?}"
        );
        assert!(pos(&hybrid, &one).is_some(), "[{l}] the one-word hit is still a hit");
        assert!(
            hybrid.iter().all(|h| h["score"].as_f64().is_some_and(|s| s > 0.0)),
            "[{l}] every hit scores above 0: {hybrid:?}"
        );
    }

    /// The sweep by meaning files up to three pairs a memory: pairs SQL
    /// refuses (here: memories the new one links to, nearer than any
    /// other) take none of those places, so a farther reworded duplicate
    /// is still filed.
    async fn pairs_the_sweep_may_not_file_take_no_place(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-places").await;
        let tag = unique("");
        let key = |w: &str| format!("{tag} {w}:");
        store.set_encoder(Arc::new(Placed {
            model: format!("test-placed-{}", unique("")),
            placed: vec![
                (key("new"), axis(0)),
                (key("alpha"), leaning(0.99, 1)),
                (key("bravo"), leaning(0.99, 2)),
                (key("charlie"), leaning(0.99, 3)),
                (key("delta"), leaning(0.93, 4)),
            ],
        }));
        let write = |w: &'static str, text: &'static str, links: Value| {
            let (store, a, key) = (&store, &a, &key);
            async move {
                mem(store, a, l, json!({"content": format!("{} {text}", key(w)), "kind": "fact", "scope": "personal", "links": links})).await
            }
        };
        let alpha = write("alpha", "The billing export runs nightly at two.", json!([])).await;
        let bravo = write("bravo", "Invoices are archived in cold storage yearly.", json!([])).await;
        let charlie = write("charlie", "Refunds above a thousand need a second approver.", json!([])).await;
        let delta = write("delta", "Tax rates are refreshed from the registry every Monday.", json!([])).await;
        embed(&store, &[&alpha, &bravo, &charlie, &delta], l).await;
        let links = json!([
            {"dst": alpha, "type": "relates_to"},
            {"dst": bravo, "type": "relates_to"},
            {"dst": charlie, "type": "relates_to"},
        ]);
        let new = write("new", "The finance team owns every ledger job.", links).await;
        assert!(
            unjudged_pairs(&store, &a, l).await.iter().all(|p| !p.contains(&new)),
            "[{l}] nothing alike by words"
        );
        embed(&store, &[&new], l).await;
        // Idempotent: on a shared database another store may have embedded
        // it first.
        ok(store.file_meaning_duplicates(&[MemoryId::from_trusted(new.as_str())]).await, l, "sweep");
        let mut with_new: Vec<String> = unjudged_pairs(&store, &a, l)
            .await
            .into_iter()
            .filter(|p| p.contains(&new))
            .flat_map(|p| p.into_iter().filter(|id| *id != new))
            .collect();
        with_new.sort();
        assert_eq!(with_new, vec![delta], "[{l}] the linked ones refused, the reworded one filed");
    }

    /// The model reads a text's first 128 tokens: two long memories that
    /// share a preamble have one vector, but are not filed as close in
    /// meaning unless their words are alike too; two short ones with one
    /// vector still are.
    async fn long_memories_sharing_a_preamble_are_not_close_in_meaning(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-preamble").await;
        let tag = unique("");
        let key = |w: &str| format!("{tag} {w}:");
        store.set_encoder(Arc::new(Placed {
            model: format!("test-placed-{}", unique("")),
            placed: vec![(key("long"), axis(5)), (key("short"), axis(6))],
        }));
        let preamble = "This runbook covers the payment gateway: the on-call rotation, its escalation paths and the dashboards to watch. ".repeat(5);
        let body = |w: &str| (0..190).map(|i| format!("{w}{i}")).collect::<Vec<_>>().join(" ");
        let remember = |content: String| {
            let (store, a) = (&store, &a);
            async move { mem(store, a, l, json!({"content": content, "kind": "fact", "scope": "personal"})).await }
        };
        let first = remember(format!("{} {preamble}{}", key("long"), body("north"))).await;
        let second = remember(format!("{} {preamble}{}", key("long"), body("south"))).await;
        let one = remember(format!("{} The cache is warmed at boot.", key("short"))).await;
        let other = remember(format!("{} Nightly jobs rotate the logs.", key("short"))).await;
        assert!(unjudged_pairs(&store, &a, l).await.is_empty(), "[{l}] nothing alike by words");
        embed(&store, &[&first, &second, &one, &other], l).await;
        let ids: Vec<MemoryId> = [&first, &second, &one, &other].iter().map(|s| MemoryId::from_trusted(s.as_str())).collect();
        ok(store.file_meaning_duplicates(&ids).await, l, "sweep");
        let mut short = [one.clone(), other.clone()];
        short.sort();
        assert_eq!(unjudged_pairs(&store, &a, l).await, vec![short], "[{l}] the short pair only");
    }

    /// A memory the full-text leg matched but that fell past the fusion's
    /// depth (50) is still `fts_matched` when the dense leg brings it
    /// back, and, holding every word of the query, keeps the tier the
    /// contract gives such a memory (a score of 0.5 or more).
    async fn a_full_text_match_past_the_fusion_depth_is_still_fts_matched(store: Store, l: &str) {
        let (_, a) = user(&store, "hy-depth").await;
        let word = unique("axolotl");
        let tag = unique("");
        // The oldest and the longest holder of the word: the least relevant.
        let far = mem(&store, &a, l, json!({"content": format!("{tag} far: The {word} tank log, kept since the first season, with feeding times, water changes, filter cleanings, temperature readings and visitor counts."), "kind": "fact", "scope": "personal"})).await;
        store.clock().advance_ms(1000);
        // 52 holders: what the full-text leg of a recall of 13 reads (4 × 13).
        for i in 0..51 {
            mem(&store, &a, l, json!({"content": format!("Note {i} on the {word}."), "kind": "fact", "scope": "personal"})).await;
        }
        store.set_encoder(Arc::new(Placed {
            model: format!("test-placed-{}", unique("")),
            placed: vec![(format!("{tag} far:"), axis(0)), (word.clone(), axis(0))],
        }));
        embed(&store, &[&far], l).await;
        let out = ok(call(&store, &a, "recall", json!({"query": word, "k": 13})).await, l, "recall");
        let found = out["memories"].as_array().cloned().unwrap_or_default();
        let hit = find(&found, &far).unwrap_or_else(|| panic!("[{l}] the dense leg's hit holding the word: {found:?}"));
        assert_eq!(hit["fts_matched"], true, "[{l}] the full-text leg matched it: {hit}");
        assert!(hit["score"].as_f64().is_some_and(|s| s >= 0.5), "[{l}] it holds every word: {hit}");
        assert!(hit["similarity"].as_f64().is_some_and(|s| s > 0.9), "[{l}] {hit}");
        assert_eq!(found[0]["id"], json!(far), "[{l}] nearest by meaning, first in its tier: {found:?}");
    }
}

/// A unit vector along coordinate `i`.
fn axis(i: usize) -> Vec<f32> {
    let mut v = vec![0.0; 384];
    v[i] = 1.0;
    v
}

/// A unit vector at cosine `c` with coordinate 0, leaning towards
/// coordinate `i`.
fn leaning(c: f32, i: usize) -> Vec<f32> {
    let mut v = vec![0.0; 384];
    v[0] = c;
    v[i] = (1.0 - c * c).sqrt();
    v
}

/// An encoder whose vectors the test places: a text starting with one of
/// `placed`'s prefixes gets that prefix's vector (the first that fits);
/// any other a unit vector of its own on none of the first ten
/// coordinates, so it is near none of the placed ones.
struct Placed {
    model: String,
    placed: Vec<(String, Vec<f32>)>,
}

impl Encoder for Placed {
    fn model(&self) -> &str {
        &self.model
    }
    fn dims(&self) -> usize {
        384
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|t| {
                self.placed
                    .iter()
                    .find(|(prefix, _)| t.starts_with(prefix.as_str()))
                    .map_or_else(|| axis(10 + text_hash(t) % 374), |(_, v)| v.clone())
            })
            .collect())
    }
}

/// A unit vector of its own for each text (no two of these memories are
/// near duplicates by meaning).
fn spread(texts: &[&str]) -> Vec<Vec<f32>> {
    texts.iter().map(|t| axis(text_hash(t) % 384)).collect()
}

/// A hash of a text, to give it an axis of its own.
fn text_hash(t: &str) -> usize {
    t.bytes()
        .fold(7usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize))
}

/// An embedder caught in the middle of a batch: it tells the test which
/// texts it was given, then holds them until the test lets it go.
struct Held {
    model: String,
    entered: tokio::sync::mpsc::UnboundedSender<Vec<String>>,
    release: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl Encoder for Held {
    fn model(&self) -> &str {
        &self.model
    }
    fn dims(&self) -> usize {
        384
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let _ = self
            .entered
            .send(texts.iter().map(|t| (*t).to_string()).collect());
        // Let go, or the test ended (its sender dropped).
        let _ = self
            .release
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .recv();
        Ok(spread(texts))
    }
}

/// An embedder that notes every text it embeds.
struct Noted {
    model: String,
    texts: std::sync::Mutex<Vec<String>>,
}

impl Noted {
    /// The texts embedded since the last call.
    fn take(&self) -> Vec<String> {
        std::mem::take(
            &mut *self
                .texts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl Encoder for Noted {
    fn model(&self) -> &str {
        &self.model
    }
    fn dims(&self) -> usize {
        384
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.texts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(texts.iter().map(|t| (*t).to_string()));
        Ok(spread(texts))
    }
}

/// On a fresh SQLite database the embedder settles with nothing written;
/// the first memory written then (`seq` 1) is the next call's to embed,
/// not left lexical-only until the next whole pass ten minutes on.
#[tokio::test]
async fn the_first_memory_of_a_fresh_database_is_embedded_at_once() {
    let l = "sqlite";
    let store = sqlite_store().await;
    store.set_encoder(model());
    assert_eq!(ok(store.embed_pending(64).await, l, "settle on nothing"), 0);
    let (_, a) = user(&store, "hy-first").await;
    let first = mem(&store, &a, l, json!({"content": "The first thing this server ever remembered.", "kind": "fact", "scope": "personal"})).await;
    assert_eq!(
        ok(store.embed_pending(64).await, l, "embed the first memory"),
        1
    );
    ok(store.refresh_vectors().await, l, "refresh");
    assert!(
        store.is_embedded(&first),
        "[{l}] the first memory is embedded"
    );
}

/// Two instances on one database embed different memories: what one is
/// embedding, the other leaves alone (on a shared PostgreSQL database other
/// tests' memories are pending too, so only this test's are compared, and
/// the exact batches are checked on SQLite); the claim of an instance that
/// died lapses, and its memories are taken by the other.
#[tokio::test]
async fn two_instances_never_embed_one_memory_at_once() {
    for (l, first, second) in twin_stores().await {
        let tag = unique("claimed-");
        let (_, a) = user(&first, "claims").await;
        let topics = [
            "harbour", "invoices", "kitchen", "ferry", "garden", "billing",
        ];
        for topic in topics {
            mem(&first, &a, l, json!({"content": format!("{tag} a note about the {topic} schedule"), "kind": "fact", "scope": "personal"})).await;
        }
        let ours = |texts: &[String]| -> std::collections::BTreeSet<String> {
            texts
                .iter()
                .filter(|t| t.starts_with(&tag))
                .cloned()
                .collect()
        };
        let model = unique("test-claims-");
        let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        first.set_encoder(Arc::new(Held {
            model: model.clone(),
            entered: entered_tx,
            release: std::sync::Mutex::new(release_rx),
        }));
        let noted = Arc::new(Noted {
            model: model.clone(),
            texts: std::sync::Mutex::new(Vec::new()),
        });
        second.set_encoder(noted.clone());

        // The first instance holds a batch of this test's memories (on the
        // shared PostgreSQL database a test running alongside may have
        // written newer ones: those batches are let through).
        let mut attempts = 0;
        let (held, in_first) = loop {
            let mut held = tokio::spawn({
                let first = first.clone();
                async move { first.embed_pending(3).await }
            });
            let texts = tokio::select! {
                texts = entered.recv() => texts.expect("the first instance took a batch"),
                r = &mut held => panic!("[{l}] the first instance ended without embedding: {r:?}"),
            };
            if !ours(&texts).is_empty() {
                break (held, texts);
            }
            attempts += 1;
            assert!(
                attempts < 100,
                "[{l}] the first instance never took this test's memories"
            );
            release.send(()).expect("the first instance waits");
            ok(
                held.await.expect("the first instance's task"),
                l,
                "another test's batch",
            );
        };
        // The second embeds until it reaches this test's memories (on
        // PostgreSQL after those of tests running alongside).
        let mut in_second = Vec::new();
        for _ in 0..100 {
            let n = ok(
                second.embed_pending(3).await,
                l,
                "the second instance embeds",
            );
            in_second.extend(noted.take());
            if n == 0 || !ours(&in_second).is_empty() {
                break;
            }
        }
        assert!(
            !ours(&in_second).is_empty(),
            "[{l}] the second instance embedded none of this test's memories"
        );
        assert!(
            ours(&in_first).is_disjoint(&ours(&in_second)),
            "[{l}] the second instance embedded what the first is embedding: {in_first:?} / {in_second:?}"
        );
        if l == "sqlite" {
            assert_eq!(
                ours(&in_first).len(),
                3,
                "[{l}] the first took the three newest: {in_first:?}"
            );
            assert_eq!(
                ours(&in_second).len(),
                3,
                "[{l}] the second took the next three: {in_second:?}"
            );
        }

        // The first instance dies as it is (its claim stays): nothing is
        // the second's to take while the claim holds, but the second does
        // not settle for that; once the claim has lapsed, it embeds them.
        if l == "sqlite" {
            assert_eq!(
                ok(second.embed_pending(3).await, l, "while claimed"),
                0,
                "[{l}]"
            );
            assert_eq!(
                ok(second.embedding_queue().await, l, "queue"),
                3,
                "[{l}] still pending"
            );
        }
        second.clock().advance_ms(2 * 60 * 1000 + 1);
        if l == "sqlite" {
            ok(
                second.embed_pending(3).await,
                l,
                "the second instance retakes",
            );
            assert_eq!(
                ours(&noted.take()),
                ours(&in_first),
                "[{l}] the lapsed claim's memories"
            );
            assert_eq!(
                ok(second.embedding_queue().await, l, "queue"),
                0,
                "[{l}] nothing pending"
            );
        }
        release.send(()).expect("the first instance waits");
        let done = held.await.expect("the first instance's task");
        assert_eq!(ok(done, l, "the first instance's batch"), 3, "[{l}]");
    }
}

/// A server starting with a model reads the stored vectors of its identity
/// before recall uses the model (`load_encoder`): once it returns, a second
/// instance on the same database finds by meaning what the first embedded,
/// and says how many vectors it read. SQLite only: on the shared PostgreSQL
/// test database, other tests' embedders of other identities replace this
/// test's vector while the second instance reads the whole table.
#[tokio::test]
async fn a_starting_instance_reads_the_stored_vectors_before_it_uses_the_model() {
    for (l, first, second) in twin_stores()
        .await
        .into_iter()
        .filter(|(l, ..)| *l == "sqlite")
    {
        let (_, a) = user(&first, "load-a").await;
        let target = mem(&first, &a, l, json!({"content": "We chose Postgres over Mongo for billing because we need transactions.", "kind": "decision", "scope": "personal"})).await;
        first.set_encoder(model());
        embed(&first, &[&target], l).await;
        let read = ok(second.load_encoder(model()).await, l, "load");
        assert!(read >= 1, "[{l}] read {read} vectors");
        let found = hits(&second, &a, "which datastore did we pick for invoices", l).await;
        assert!(
            find(&found, &target).is_some(),
            "[{l}] found by meaning on the second instance: {found:?}"
        );
    }
}

/// A start whose read of the stored vectors fails (the database away)
/// leaves recall lexical: the model is not used on part of the index. The
/// server's embedder tries the read again until it works.
#[tokio::test]
async fn a_failed_vector_read_does_not_start_hybrid_recall() {
    let store = sqlite_store().await;
    store.close().await;
    assert!(
        store.load_encoder(model()).await.is_err(),
        "a closed database"
    );
    assert_eq!(store.semantic_status().model, None, "no model published");
}
