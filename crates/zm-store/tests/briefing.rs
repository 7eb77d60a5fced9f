//! `build_context`, on every backend: the `max_tokens` caps and their
//! floor, and the briefing legs — open loops (oldest first, capped at ten,
//! with the total, only for the pinned project, leaving after two weeks but
//! staying live) and recent facts.
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_store::Store;

backend_tests! {
    async fn build_context_caps_and_briefing_legs(store: Store, label: &str) {
        let (_, caller) = user(&store, "brief").await;
        for i in 0..6 {
            ok(
                remember(&store, &caller, json!({"content": format!("walrus fact number {i}: walruses haul out on ice floe {i}."), "scope": "core"})).await,
                label,
                "walrus",
            );
        }
        let full = ok(
            build_context(&store, &caller, json!({"topic": "walrus"})).await,
            label,
            "uncapped",
        );
        assert_eq!(full.memories.len(), 6, "[{label}] uncapped returns all six");
        let capped = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "walrus", "max_tokens": 600}),
            )
            .await,
            label,
            "capped",
        );
        assert_eq!(
            capped.memories.len(),
            3,
            "[{label}] max_tokens 600 → 3 memories"
        );
        let tiny = ok(
            build_context(&store, &caller, json!({"topic": "walrus", "max_tokens": 1})).await,
            label,
            "tiny",
        );
        assert_eq!(tiny.memories.len(), 3, "[{label}] the floor is 3 memories");
        let wide = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "walrus", "max_tokens": 1000}),
            )
            .await,
            label,
            "wide",
        );
        assert_eq!(
            wide.memories.len(),
            5,
            "[{label}] max_tokens 1000 → 5 memories"
        );
        // Briefing legs are empty outside briefing mode.
        assert!(
            full.open_loops.is_empty() && full.recent.is_empty(),
            "[{label}] no briefing legs"
        );

        // Open loops: oldest first, capped at 10, with the total.
        let hint = "/srv/git/ledger";
        let mut loops = Vec::new();
        for i in 0..12 {
            let kind = if i % 3 == 2 { "open-question" } else { "task" };
            let out = ok(
                remember(&store, &caller, json!({"content": format!("ledger loop {i}: reconcile batch {i}"), "kind": kind, "project_hint": hint})).await,
                label,
                "loop",
            );
            loops.push(out.memory_id.to_string());
            store.clock().advance_ms(1000);
        }
        // A loop elsewhere and a closed loop do not count.
        ok(remember(&store, &caller, json!({"content": "other project loop", "kind": "task", "project_hint": "/srv/git/other"})).await, label, "other loop");
        let closed = ok(
            remember(
                &store,
                &caller,
                json!({"content": "closed ledger loop", "kind": "task", "project_hint": hint}),
            )
            .await,
            label,
            "closed loop",
        );
        ok(
            close_loop(&store, &caller, closed.memory_id.as_str()).await,
            label,
            "close",
        );
        let fresh_fact = ok(
            remember(&store, &caller, json!({"content": "The ledger service settles at midnight UTC.", "project_hint": hint})).await,
            label,
            "recent fact",
        );
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "kangaroo", "briefing": true, "project_hint": hint}),
            )
            .await,
            label,
            "briefing",
        );
        let got: Vec<String> = ctx.open_loops.iter().map(|m| m.id.to_string()).collect();
        assert_eq!(
            got,
            loops[..10].to_vec(),
            "[{label}] the ten oldest loops, oldest first"
        );
        assert_eq!(
            ctx.open_loops_total, 12,
            "[{label}] open_loops_total counts before the cap"
        );
        let recent: Vec<String> = ctx.recent.iter().map(|m| m.id.to_string()).collect();
        assert!(
            recent.contains(&fresh_fact.memory_id.to_string()),
            "[{label}] recent has the fresh fact: {recent:?}"
        );
        assert!(
            !recent.iter().any(|r| loops.contains(r)),
            "[{label}] loops are not recent facts"
        );
        // An unpinned briefing does not show a project's loops.
        let unpinned = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "kangaroo", "briefing": true}),
            )
            .await,
            label,
            "unpinned briefing",
        );
        assert!(
            unpinned.open_loops.is_empty(),
            "[{label}] project loops need the project: {:?}",
            unpinned.open_loops
        );
        assert_eq!(unpinned.open_loops_total, 0, "[{label}] unpinned total");

        // 15 days later the loops leave the briefing but stay live.
        store.clock().advance_ms(15 * DAY_MS);
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "kangaroo", "briefing": true, "project_hint": hint}),
            )
            .await,
            label,
            "late briefing",
        );
        assert!(
            ctx.open_loops.is_empty(),
            "[{label}] stale loops leave open_loops: {:?}",
            ctx.open_loops
        );
        assert_eq!(ctx.open_loops_total, 0, "[{label}] and the total");
        assert!(
            !ctx.recent.iter().any(|m| m.id == fresh_fact.memory_id),
            "[{label}] a 15-day-old fact is no longer recent"
        );
        let new_loop = ok(
            remember(&store, &caller, json!({"content": "ledger loop new: audit the fees", "kind": "task", "project_hint": hint})).await,
            label,
            "new loop",
        );
        let ctx = ok(
            build_context(
                &store,
                &caller,
                json!({"topic": "kangaroo", "briefing": true, "project_hint": hint}),
            )
            .await,
            label,
            "briefing",
        );
        let got: Vec<String> = ctx.open_loops.iter().map(|m| m.id.to_string()).collect();
        assert_eq!(
            got,
            vec![new_loop.memory_id.to_string()],
            "[{label}] only the fresh loop"
        );
        assert_eq!(ctx.open_loops_total, 1, "[{label}] total 1");
        let seen = recall_ids(
            &store,
            &caller,
            label,
            json!({"query": "ledger loop reconcile", "project_hint": hint, "k": 50}),
        )
        .await;
        assert!(
            seen.contains(&loops[0]),
            "[{label}] a stale loop is still recallable"
        );
        let out = ok(
            close_loop(&store, &caller, &loops[0]).await,
            label,
            "close a stale loop",
        );
        assert!(out.closed, "[{label}] a stale loop is still closable");
    }

    /// A memory delivered as a rule is not listed again among the linked
    /// memories (a hit naming the same entity used to bring it back).
    async fn a_rule_is_not_listed_again_as_a_linked_memory(store: Store, label: &str) {
        let (_, caller) = user(&store, "brief-ruled").await;
        let rule = ok(remember(&store, &caller, json!({"content": "Always dry-run pelican migrations first.", "scope": "personal", "kind": "preference", "entities": [{"name": "pelican", "type": "tool"}]})).await, label, "rule memory").memory_id;
        ok(call(&store, &caller, "promote_rule", json!({"memory_id": rule})).await, label, "promote");
        ok(remember(&store, &caller, json!({"content": "The pelican job runs nightly at two.", "scope": "personal", "kind": "fact", "entities": [{"name": "pelican", "type": "tool"}]})).await, label, "hit");
        let pack = ok(build_context(&store, &caller, json!({"topic": "pelican nightly job", "briefing": true})).await, label, "briefing");
        assert!(pack.rules.iter().any(|r| r.text.contains("dry-run pelican")), "[{label}] delivered as a rule: {:?}", pack.rules);
        let listed: Vec<_> = pack.memories.iter().chain(&pack.linked_memories).map(|m| m.id.clone()).collect();
        assert!(!listed.contains(&rule), "[{label}] listed again: {listed:?}");
    }

    /// A hundred newer episodes naming an entity do not hide its one
    /// decision from the linked memories: the kinds the pack does not
    /// link (episodes have a leg of their own) are left out before the
    /// co-mentions are cut to their hundred.
    async fn newer_episodes_do_not_hide_a_linked_decision(store: Store, label: &str) {
        let (_, caller) = user(&store, "brief-episodes").await;
        let hint = "/work/repos/heron";
        let heron = json!([{"name": "heron-pipeline", "type": "service"}]);
        let decision = ok(remember(&store, &caller, json!({"content": "We shard the intake by tenant so one noisy customer cannot stall the others.", "kind": "decision", "project_hint": hint, "entities": heron})).await, label, "decision").memory_id;
        for i in 0..105 {
            ok(remember(&store, &caller, json!({"content": format!("Session {i}: replayed batch {i} through the intake and watched the lag graphs."), "kind": "episode", "project_hint": hint, "entities": heron})).await, label, "episode");
        }
        let hit = ok(remember(&store, &caller, json!({"content": "The intake queue feeding it is called kestrel.", "kind": "fact", "project_hint": hint, "entities": heron})).await, label, "hit").memory_id;
        let pack = ok(build_context(&store, &caller, json!({"topic": "kestrel", "project_hint": hint})).await, label, "briefing");
        assert_eq!(pack.memories.iter().map(|m| m.id.clone()).collect::<Vec<_>>(), vec![hit], "[{label}] the one hit");
        let linked: Vec<_> = pack.linked_memories.iter().map(|m| m.id.clone()).collect();
        assert_eq!(linked, vec![decision], "[{label}] the decision, linked through the entity; no episode: {:?}", pack.linked_memories);
    }

    /// A memory naming two of the hits' entities is linked once, and the
    /// linked memories come newest first.
    async fn a_memory_naming_two_entities_is_linked_once(store: Store, label: &str) {
        let (_, caller) = user(&store, "brief-two").await;
        let hint = "/work/repos/osprey";
        let both = json!([{"name": "osprey-api", "type": "service"}, {"name": "osprey-db", "type": "service"}]);
        let older = ok(remember(&store, &caller, json!({"content": "The API writes through a connection pool of twelve.", "kind": "decision", "project_hint": hint, "entities": both})).await, label, "older").memory_id;
        store.clock().advance_ms(1_000);
        let newer = ok(remember(&store, &caller, json!({"content": "Schema changes ship behind a feature flag first.", "kind": "convention", "project_hint": hint, "entities": [{"name": "osprey-api", "type": "service"}]})).await, label, "newer").memory_id;
        store.clock().advance_ms(1_000);
        let hit = ok(remember(&store, &caller, json!({"content": "The pelican cache fronts both of them.", "kind": "fact", "project_hint": hint, "entities": both})).await, label, "hit").memory_id;
        let pack = ok(build_context(&store, &caller, json!({"topic": "pelican", "project_hint": hint})).await, label, "briefing");
        assert_eq!(pack.memories.iter().map(|m| m.id.clone()).collect::<Vec<_>>(), vec![hit], "[{label}] the one hit");
        let linked: Vec<_> = pack.linked_memories.iter().map(|m| m.id.clone()).collect();
        assert_eq!(linked, vec![newer, older], "[{label}] once each, newest first: {:?}", pack.linked_memories);
    }

    /// `max_tokens` bounds what the pack inlines: memories and linked
    /// memories share about four characters a token (each at least 400).
    async fn a_small_budget_cuts_what_the_pack_inlines(store: Store, label: &str) {
        let (_, caller) = user(&store, "brief-budget").await;
        for i in 0..6 {
            let body = format!("Quasar calibration note {i}. ") + &"The telescope mirror is realigned before each run. ".repeat(100);
            ok(remember(&store, &caller, json!({"content": body, "scope": "core", "kind": "fact", "entities": [{"name": "quasar-rig", "type": "tool"}]})).await, label, "long");
        }
        let pack = ok(build_context(&store, &caller, json!({"topic": "quasar calibration", "max_tokens": 600})).await, label, "600");
        let chars: usize = pack
            .memories
            .iter()
            .chain(&pack.linked_memories)
            .map(|m| m.content.chars().count())
            .sum();
        assert_eq!(pack.memories.len(), 3, "[{label}]");
        assert!(!pack.linked_memories.is_empty(), "[{label}] linked through the entity");
        assert!(chars <= 600 * 4 + 10, "[{label}] {chars} characters for 600 tokens");
        assert!(pack.memories.iter().all(|m| m.truncated == Some(true)), "[{label}] cut, and said so");
        let wide = ok(build_context(&store, &caller, json!({"topic": "quasar calibration"})).await, label, "no budget");
        assert!(wide.memories.iter().all(|m| m.content.chars().count() > 2000), "[{label}] without a budget, 2400 each");
    }

    /// A briefing leaves out only the memories it delivers as rules: one
    /// whose rule is past its 90 days is listed again; `recent` fills its
    /// five from older writes when the newest are the briefing's hits.
    async fn a_briefing_lists_a_promoted_memory_whose_rule_it_does_not_deliver(store: Store, label: &str) {
        let (_, caller) = user(&store, "brief-ruled").await;
        for i in 0..3 {
            ok(remember(&store, &caller, json!({"content": format!("Older fact {i}: the staging cluster has {i} spare nodes."), "scope": "personal", "kind": "fact"})).await, label, "older");
        }
        let m = ok(remember(&store, &caller, json!({"content": "Always run the pelican migrations with a dry run first.", "scope": "personal", "kind": "preference"})).await, label, "pref").memory_id;
        ok(call(&store, &caller, "promote_rule", json!({"memory_id": m})).await, label, "promote");
        for i in 0..22 {
            ok(remember(&store, &caller, json!({"content": format!("Pelican fact {i}: the pelican job {i} ran clean."), "scope": "personal", "kind": "fact"})).await, label, "pelican");
        }
        let brief = |store: Store, caller: zm_store::Caller| async move {
            build_context(&store, &caller, json!({"topic": "pelican", "briefing": true, "max_tokens": 4800})).await
        };
        let now = ok(brief(store.clone(), caller.clone()).await, label, "briefing");
        assert!(now.rules.iter().any(|r| r.text.contains("dry run")), "[{label}] delivered as a rule");
        assert!(now.memories.iter().all(|h| h.id != m), "[{label}] and not listed again");
        let recent: Vec<&str> = now.recent.iter().map(|r| r.content.as_str()).collect();
        assert_eq!(recent.len(), 3, "[{label}] the three older facts: {recent:?}");
        assert!(recent.iter().all(|r| r.starts_with("Older fact")), "[{label}] {recent:?}");

        store.clock().advance_ms(91 * 24 * 60 * 60 * 1000);
        let later = ok(brief(store.clone(), caller.clone()).await, label, "91 days on");
        assert!(later.rules.is_empty(), "[{label}] the rule is past its 90 days");
        assert!(later.memories.iter().any(|h| h.id == m), "[{label}] so the memory is listed");
    }
}
