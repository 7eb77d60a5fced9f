//! `link` and `entities`, on every backend: entity edges and their match
//! key, refused endpoint mixes and secret names, memory links (`contradicts`
//! files a conflict), and isolation between two users.
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
    /// Refused: an entity linked to itself (by its match key), a name of
    /// punctuation only. One pending conflict a contradicting pair,
    /// whichever way round it is linked.
    async fn self_edges_punctuation_and_a_pair_linked_both_ways(store: Store, l: &str) {
        let (_, a) = user(&store, "self-a").await;
        err(call(&store, &a, "link", json!({"src": "Web App", "dst": "web-app", "type": "relates_to"})).await, ErrorCode::ValidationFailed, l, "a self edge");
        err(call(&store, &a, "link", json!({"src": "!!!", "dst": "Web App", "type": "relates_to"})).await, ErrorCode::ValidationFailed, l, "punctuation only");
        let x = mem(&store, &a, l, json!({"content": "The cache lives for five minutes.", "scope": "personal", "kind": "fact"})).await;
        let y = mem(&store, &a, l, json!({"content": "The cache lives for an hour.", "scope": "personal", "kind": "fact"})).await;
        ok(call(&store, &a, "link", json!({"src": x, "dst": y, "type": "contradicts"})).await, l, "x contradicts y");
        ok(call(&store, &a, "link", json!({"src": y, "dst": x, "type": "contradicts"})).await, l, "y contradicts x");
        let listed = ok(call(&store, &a, "list_conflicts", json!({"verdict": "contradiction"})).await, l, "list");
        assert_eq!(listed["conflicts"].as_array().map(Vec::len), Some(1), "[{l}] one conflict for the pair: {listed}");
    }

    /// A contradiction declared while writing (`remember`'s `links`) goes
    /// to review as one declared with `link` does, once a pair: `link`
    /// afterwards, either way round, files nothing more.
    async fn a_contradiction_remember_declares_goes_to_review(store: Store, l: &str) {
        let (_, a) = user(&store, "rc-a").await;
        let x = mem(&store, &a, l, json!({"content": "Deploys run on Fridays.", "scope": "personal", "kind": "fact"})).await;
        let y = mem(&store, &a, l, json!({"content": "Deploys never run on Fridays.", "scope": "personal", "kind": "fact", "links": [{"dst": x, "type": "contradicts"}]})).await;
        let listed = ok(call(&store, &a, "list_conflicts", json!({"verdict": "contradiction"})).await, l, "list");
        let conflicts = listed["conflicts"].as_array().cloned().unwrap_or_default();
        assert_eq!(conflicts.len(), 1, "[{l}] filed by remember: {listed}");
        assert!(listed.to_string().contains(&x) && listed.to_string().contains(&y), "[{l}] {listed}");
        ok(call(&store, &a, "link", json!({"src": y, "dst": x, "type": "contradicts"})).await, l, "y contradicts x again");
        ok(call(&store, &a, "link", json!({"src": x, "dst": y, "type": "contradicts"})).await, l, "x contradicts y");
        let listed = ok(call(&store, &a, "list_conflicts", json!({"verdict": "contradiction"})).await, l, "list again");
        assert_eq!(listed["conflicts"].as_array().map(Vec::len), Some(1), "[{l}] still one: {listed}");
    }

    /// A teammate who drew `contradicts` between a member's shared memories
    /// first (the link is one row, theirs) leaves the member's own
    /// `link` of the pair filing the contradiction for review; once
    /// settled, drawing it again files nothing.
    async fn a_contradiction_a_teammate_drew_first_still_goes_to_review(store: Store, l: &str) {
        let (_, b) = user(&store, "tc-b").await;
        let slug = create_team_of(&store, &b, l, "tcon").await;
        let scope = format!("team.{slug}");
        let (_, a) = team_member(&store, &b, l, &slug, "tc-a", zm_contracts::TeamRole::Writer).await;
        let x = mem(&store, &b, l, json!({"content": "The cache lives for five minutes.", "scope": scope, "kind": "fact"})).await;
        let y = mem(&store, &b, l, json!({"content": "The cache lives for an hour.", "scope": scope, "kind": "fact"})).await;
        ok(call(&store, &a, "link", json!({"src": x, "dst": y, "type": "contradicts"})).await, l, "the teammate links");
        let count = |who: zm_store::Caller| {
            let store = store.clone();
            async move {
                let listed = ok(call(&store, &who, "list_conflicts", json!({"verdict": "contradiction", "status": "pending"})).await, l, "list");
                listed["conflicts"].as_array().map_or(0, Vec::len)
            }
        };
        assert_eq!(count(b.clone()).await, 0, "[{l}] nothing filed for the teammate's link");
        let out = ok(call(&store, &b, "link", json!({"src": x, "dst": y, "type": "contradicts"})).await, l, "the owner links");
        assert_eq!(out["created"], false, "[{l}] one link: {out}");
        assert_eq!(count(b.clone()).await, 1, "[{l}] filed for the owner");
        let listed = ok(call(&store, &b, "list_conflicts", json!({"verdict": "contradiction"})).await, l, "list");
        let dispute = listed["conflicts"][0]["dispute_id"].as_str().unwrap().to_string();
        ok(call(&store, &b, "resolve_conflict", json!({"dispute_id": dispute, "keep_both": true})).await, l, "keep both");
        ok(call(&store, &b, "link", json!({"src": x, "dst": y, "type": "contradicts"})).await, l, "the owner links again");
        assert_eq!(count(b.clone()).await, 0, "[{l}] settled once: nothing filed again");
    }

    /// One entity whatever Unicode form its name is typed in: a composed
    /// and a decomposed "Café", full-width "ＡＰＩ" and "api" (NFKC).
    async fn entity_names_match_across_unicode_forms(store: Store, l: &str) {
        let (_, a) = user(&store, "nfkc-a").await;
        ok(call(&store, &a, "link", json!({"src": "Caf\u{e9}", "dst": "\u{ff21}\u{ff30}\u{ff29}", "type": "relates_to"})).await, l, "edge");
        let again = ok(call(&store, &a, "link", json!({"src": "Cafe\u{301}", "dst": "api", "type": "relates_to"})).await, l, "the same edge");
        assert_eq!(again["created"].as_bool(), Some(false), "[{l}] the same two entities: {again}");
        err(call(&store, &a, "link", json!({"src": "Cafe\u{301}", "dst": "CAF\u{c9}", "type": "relates_to"})).await, ErrorCode::ValidationFailed, l, "a self edge across forms");
        let out = ok(call(&store, &a, "entities", json!({"query": "cafe\u{301}"})).await, l, "search");
        let names: Vec<&str> = out["entities"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Caf\u{e9}"], "[{l}] one entity, found by the decomposed form");
    }

    /// A briefing's entity `count` is how many of its memories name the
    /// entity: a memory naming it under two types counts once, two
    /// memories twice.
    async fn a_briefings_entity_count_is_of_memories(store: Store, l: &str) {
        let (_, a) = user(&store, "count-a").await;
        let tag = unique("c").replace('-', "");
        mem(&store, &a, l, json!({"content": format!("Ledgerdb stores the invoices ({tag})."), "kind": "fact", "scope": "personal", "entities": [{"name": "Ledgerdb", "type": "service"}, {"name": "Ledgerdb", "type": "concept"}]})).await;
        let pack = ok(call(&store, &a, "build_context", json!({"topic": format!("ledgerdb invoices {tag}")})).await, l, "one memory");
        let ledger = pack["entities"].as_array().unwrap().iter().find(|e| e["name"] == "Ledgerdb").cloned().unwrap_or_else(|| panic!("[{l}] {pack}"));
        assert_eq!(ledger["count"], 1, "[{l}] one memory names it: {ledger}");
        assert_eq!(ledger["types"].as_array().map(Vec::len), Some(2), "[{l}] under two types: {ledger}");
        mem(&store, &a, l, json!({"content": format!("Ledgerdb invoices are kept seven years ({tag})."), "kind": "fact", "scope": "personal", "entities": [{"name": "Ledgerdb", "type": "service"}]})).await;
        let pack = ok(call(&store, &a, "build_context", json!({"topic": format!("ledgerdb invoices {tag}")})).await, l, "two memories");
        let ledger = pack["entities"].as_array().unwrap().iter().find(|e| e["name"] == "Ledgerdb").cloned().unwrap_or_else(|| panic!("[{l}] {pack}"));
        assert_eq!(ledger["count"], 2, "[{l}] {ledger}");
    }

    /// A briefing shows the caller's edges between the entities its
    /// memories name wherever those memories are: `link` names entities
    /// in the personal scope, a project memory names them in its project,
    /// and the edge joins the names.
    async fn a_project_briefing_shows_the_edges_between_its_names(store: Store, l: &str) {
        let (_, a) = user(&store, "pedge-a").await;
        let (_, b) = user(&store, "pedge-b").await;
        let tag = unique("e").replace('-', "");
        let remote = format!("git@github.com:acme/{}.git", unique("edges"));
        mem(&store, &a, l, json!({"content": format!("Billing calls VendorX for refunds ({tag})."), "kind": "fact", "project_hint": remote, "entities": [{"name": "Billing"}, {"name": "VendorX"}]})).await;
        ok(call(&store, &a, "link", json!({"src": "billing", "dst": "VendorX", "type": "depends_on"})).await, l, "edge");
        let topic = format!("billing vendorx refunds {tag}");
        let pack = ok(call(&store, &a, "build_context", json!({"topic": topic, "briefing": true, "project_hint": remote})).await, l, "briefing");
        let edges = pack["edges"].as_array().cloned().unwrap_or_default();
        assert_eq!(edges.len(), 1, "[{l}] {pack}");
        assert_eq!(edges[0]["type"], "depends_on", "[{l}] {pack}");
        // Another user naming the same two entities sees no edge of A's.
        mem(&store, &b, l, json!({"content": format!("Billing calls VendorX for refunds ({tag})."), "kind": "fact", "scope": "personal", "entities": [{"name": "Billing"}, {"name": "VendorX"}]})).await;
        let theirs = ok(call(&store, &b, "build_context", json!({"topic": topic})).await, l, "B's briefing");
        assert_eq!(theirs["edges"], json!([]), "[{l}] {theirs}");
    }

    /// `entities` searches like entity matching: case-insensitive beyond
    /// ASCII (SQLite's LOWER is ASCII only), blind to spaces, `-`, `_`.
    async fn entity_search_folds_case_and_separators(store: Store, l: &str) {
        let (_, a) = user(&store, "search-a").await;
        ok(call(&store, &a, "link", json!({"src": "Émile Zola", "dst": "Staging DB", "type": "relates_to"})).await, l, "edge");
        for (q, want) in [("émile", "Émile Zola"), ("ÉMILE", "Émile Zola"), ("staging-db", "Staging DB"), ("stagingdb", "Staging DB")] {
            let out = ok(call(&store, &a, "entities", json!({"query": q})).await, l, "search");
            let names: Vec<&str> = out["entities"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
            assert!(names.contains(&want), "[{l}] {q:?} finds {want:?}: {names:?}");
        }
    }

    async fn link_entities_memories_and_isolation(store: Store, l: &str) {
        let (_, a) = user(&store, "link-a").await;
        let (_, b) = user(&store, "link-b").await;
        let e = ok(
            call(
                &store,
                &a,
                "link",
                json!({"src": "Web App", "dst": "PostgreSQL", "type": "depends_on"}),
            )
            .await,
            l,
            "edge",
        );
        assert_eq!(
            (e["kind"].as_str(), e["created"].as_bool()),
            (Some("entity_edge"), Some(true)),
            "[{l}]"
        );
        // The match key ignores case, spaces, `-` and `_`: the same edge again.
        let again = ok(
            call(
                &store,
                &a,
                "link",
                json!({"src": "web_app", "dst": "postgre-sql", "type": "depends_on"}),
            )
            .await,
            l,
            "repeat",
        );
        assert_eq!(again["created"], false, "[{l}]");
        assert_eq!(again["src_id"], e["src_id"], "[{l}]");
        err(
            call(
                &store,
                &a,
                "link",
                json!({"src": NEVER, "dst": "PostgreSQL", "type": "relates_to"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "mixed endpoints",
        );
        err(
            call(
                &store,
                &a,
                "link",
                json!({"src": "A", "dst": "B", "type": "supersedes"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "memory type between entities",
        );
        let secret = format!("ghp_{}", "a1B2c3D4e5".repeat(4));
        let refused = err(
            call(
                &store,
                &a,
                "link",
                json!({"src": secret, "dst": "B", "type": "uses"}),
            )
            .await,
            ErrorCode::ValidationFailed,
            l,
            "secret name",
        );
        assert!(
            Prefix::SecretContentRejected.matches(&refused.message),
            "[{l}] {refused}"
        );
        // Entities: A sees them, B does not.
        let list = ok(
            call(&store, &a, "entities", json!({"query": "postgre"})).await,
            l,
            "entities",
        );
        assert_eq!(
            list["entities"].as_array().unwrap().len(),
            1,
            "[{l}] {list}"
        );
        let theirs = ok(
            call(&store, &b, "entities", json!({"scope": "*"})).await,
            l,
            "B entities",
        );
        assert!(
            theirs["entities"].as_array().unwrap().is_empty(),
            "[{l}] B sees {theirs}"
        );
        // Memory links: contradicts files a pair conflict; foreign ids read as missing.
        let m1 = mem(
            &store,
            &a,
            l,
            json!({"content": "The API listens on port 8080.", "scope": "core"}),
        )
        .await;
        let m2 = mem(
            &store,
            &a,
            l,
            json!({"content": "The API listens on port 9090 behind the proxy.", "scope": "core"}),
        )
        .await;
        let link = ok(
            call(
                &store,
                &a,
                "link",
                json!({"src": m1, "dst": m2, "type": "contradicts"}),
            )
            .await,
            l,
            "contradicts",
        );
        assert_eq!(link["kind"], "memory_link", "[{l}]");
        let conflicts = ok(
            call(
                &store,
                &a,
                "list_conflicts",
                json!({"verdict": "contradiction"}),
            )
            .await,
            l,
            "list",
        );
        assert_eq!(
            conflicts["conflicts"].as_array().unwrap().len(),
            1,
            "[{l}] {conflicts}"
        );
        let foreign = err(
            call(
                &store,
                &b,
                "link",
                json!({"src": m1, "dst": NEVER.replace('0', "1"), "type": "relates_to"}),
            )
            .await,
            ErrorCode::NotFound,
            l,
            "B links A's memory",
        );
        let missing = err(
            call(
                &store,
                &b,
                "link",
                json!({"src": NEVER, "dst": NEVER.replace('0', "1"), "type": "relates_to"}),
            )
            .await,
            ErrorCode::NotFound,
            l,
            "never existed",
        );
        assert_eq!(
            foreign.message.replace(&m1, "<id>"),
            missing.message.replace(NEVER, "<id>"),
            "[{l}]"
        );
    }
}

/// Two entities of one name (two types) are one name in a briefing: their
/// edges of one type to one other entity are listed once (inserted here
/// as an older release or an import may have left them; PostgreSQL only,
/// for its raw pool).
#[tokio::test]
async fn a_briefing_lists_an_edge_between_two_names_once() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_briefing_lists_an_edge_between_two_names_once").await
    else {
        return;
    };
    let (_, a) = user(&store, "dedge-a").await;
    let tag = unique("d").replace('-', "");
    mem(&store, &a, l, json!({"content": format!("Ledgerdb bills through Stripe ({tag})."), "kind": "fact", "scope": "personal", "entities": [{"name": "Ledgerdb", "type": "service"}, {"name": "Ledgerdb", "type": "concept"}, {"name": "Stripe", "type": "service"}]})).await;
    let ids: Vec<(String, String)> = sqlx::query_as(
        "SELECT id, match_key FROM entities WHERE owner_id = $1 ORDER BY match_key, id",
    )
    .bind(&a.user_id)
    .fetch_all(&raw)
    .await
    .expect("the entities");
    let (ledger, stripe): (Vec<_>, Vec<_>) = ids.iter().partition(|(_, k)| k.contains("ledger"));
    assert_eq!((ledger.len(), stripe.len()), (2, 1), "[{l}] {ids:?}");
    for (src, _) in &ledger {
        sqlx::query("INSERT INTO edges (id, owner_id, src, dst, type, weight, source_memory, created_at) VALUES ($1, $2, $3, $4, 'depends_on', NULL, NULL, 1)")
            .bind(zm_contracts::IdKind::Edge.generate())
            .bind(&a.user_id)
            .bind(src)
            .bind(&stripe[0].0)
            .execute(&raw)
            .await
            .expect("an edge");
    }
    let pack = ok(
        call(
            &store,
            &a,
            "build_context",
            json!({"topic": format!("ledgerdb stripe {tag}")}),
        )
        .await,
        l,
        "briefing",
    );
    let edges = pack["edges"].as_array().cloned().unwrap_or_default();
    assert_eq!(edges.len(), 1, "[{l}] one edge Ledgerdb → Stripe: {pack}");
    assert_eq!(edges[0]["src"], "Ledgerdb", "[{l}] {pack}");
    assert_eq!(edges[0]["dst"], "Stripe", "[{l}] {pack}");
}
