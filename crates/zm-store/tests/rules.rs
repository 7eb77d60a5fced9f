//! `promote_rule` and rule delivery, on every backend: user and project
//! layers, delivery in briefings, pinning, revocation and forced
//! re-promotion, and isolation between two users.
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
    async fn rules_promote_pin_revoke_and_delivery(store: Store, l: &str) {
        let (_, a) = user(&store, "rules-a").await;
        let (_, b) = user(&store, "rules-b").await;
        let pref = mem(&store, &a, l, json!({"content": "Always answer in British English.", "scope": "personal", "kind": "preference"})).await;
        let out = ok(
            call(&store, &a, "promote_rule", json!({"memory_id": pref})).await,
            l,
            "promote",
        );
        assert_eq!(
            (out["target_layer"].as_str(), out["applies_scope"].is_null()),
            (Some("user"), true),
            "[{l}]"
        );
        let project = project_of(&store, &a, l, "/src/rules-project").await;
        let conv = mem(&store, &a, l, json!({"content": "Run make lint before pushing.", "scope": project, "kind": "convention"})).await;
        let out = ok(
            call(
                &store,
                &a,
                "promote_rule",
                json!({"memory_id": conv, "rule_text": "Run `make lint` before every push."}),
            )
            .await,
            l,
            "promote project",
        );
        assert_eq!(
            (out["target_layer"].as_str(), out["applies_scope"].as_str()),
            (Some("project"), Some(project.as_str())),
            "[{l}]"
        );
        let brief = ok(
            call(
                &store,
                &a,
                "build_context",
                json!({"topic": "work", "briefing": true, "project_hint": "/src/rules-project"}),
            )
            .await,
            l,
            "briefing",
        );
        let texts: Vec<&str> = brief["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["text"].as_str().unwrap())
            .collect();
        assert_eq!(
            texts,
            vec![
                "Always answer in British English.",
                "Run `make lint` before every push."
            ],
            "[{l}]"
        );
        // Outside the project only the user layer arrives.
        let plain = ok(
            call(
                &store,
                &a,
                "build_context",
                json!({"topic": "work", "briefing": true}),
            )
            .await,
            l,
            "unpinned briefing",
        );
        assert_eq!(plain["rules"].as_array().unwrap().len(), 1, "[{l}] {plain}");
        // Pinned rules lead.
        store.pin_rule(&a, &conv, true).await.unwrap();
        let brief = ok(
            call(
                &store,
                &a,
                "build_context",
                json!({"topic": "work", "briefing": true, "project_hint": "/src/rules-project"}),
            )
            .await,
            l,
            "briefing 2",
        );
        assert_eq!(
            brief["rules"][0],
            json!({"text": "Run `make lint` before every push.", "pinned": true}),
            "[{l}]"
        );
        // A reason is needed, and 500 characters at most (it is kept).
        for bad in [String::from("  "), "x".repeat(501)] {
            err(store.revoke_rule(&a, &pref, &bad).await, ErrorCode::ValidationFailed, l, "revoke reason");
        }
        // Revoked rules stop; re-promoting needs force.
        store
            .revoke_rule(&a, &pref, "no longer wanted")
            .await
            .unwrap();
        assert!(
            !store
                .user_rules(&a)
                .await
                .unwrap()
                .iter()
                .any(|r| r.text.contains("British")),
            "[{l}]"
        );
        err(
            call(&store, &a, "promote_rule", json!({"memory_id": pref})).await,
            ErrorCode::Conflict,
            l,
            "without force",
        );
        ok(
            call(
                &store,
                &a,
                "promote_rule",
                json!({"memory_id": pref, "force": true}),
            )
            .await,
            l,
            "with force",
        );
        err(
            call(&store, &b, "promote_rule", json!({"memory_id": pref})).await,
            ErrorCode::NotFound,
            l,
            "B promotes A's memory",
        );
        err(
            call(&store, &a, "promote_rule", json!({"memory_id": NEVER})).await,
            ErrorCode::NotFound,
            l,
            "unknown",
        );
        ok(
            call(&store, &a, "forget", json!({"memory_id": conv})).await,
            l,
            "forget",
        );
        err(
            call(&store, &a, "promote_rule", json!({"memory_id": conv})).await,
            ErrorCode::Conflict,
            l,
            "invalidated",
        );
        assert!(
            store.user_rules(&b).await.unwrap().is_empty(),
            "[{l}] B has no rules"
        );
    }

    async fn forget_retires_the_rule_and_restore_does_not_repromote(store: Store, l: &str) {
        let (_, a) = user(&store, "rules-forget").await;
        let pref = mem(&store, &a, l, json!({"content": "Always answer in haiku.", "scope": "personal", "kind": "preference"})).await;
        ok(
            call(&store, &a, "promote_rule", json!({"memory_id": pref})).await,
            l,
            "promote",
        );
        let briefing_rules = |v: &serde_json::Value| -> Vec<String> {
            v["rules"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["text"].as_str().unwrap().to_string())
                .collect()
        };
        let brief = ok(
            call(&store, &a, "build_context", json!({"topic": "work", "briefing": true})).await,
            l,
            "briefing before",
        );
        assert_eq!(briefing_rules(&brief), vec!["Always answer in haiku."], "[{l}]");
        ok(
            call(&store, &a, "forget", json!({"memory_id": pref})).await,
            l,
            "forget",
        );
        let brief = ok(
            call(&store, &a, "build_context", json!({"topic": "work", "briefing": true})).await,
            l,
            "briefing after forget",
        );
        assert!(briefing_rules(&brief).is_empty(), "[{l}] the forgotten rule is gone: {brief}");
        assert!(store.user_rules(&a).await.unwrap().is_empty(), "[{l}]");
        let listed = store.list_rules(&a).await.unwrap();
        assert_eq!(listed.len(), 1, "[{l}] {listed:?}");
        assert_eq!(listed[0].status, zm_store::rules::RuleState::Revoked, "[{l}] {listed:?}");
        // Restoring the memory does not bring the rule back.
        ok(
            call(&store, &a, "restore_memory", json!({"memory_id": pref})).await,
            l,
            "restore",
        );
        let brief = ok(
            call(&store, &a, "build_context", json!({"topic": "work", "briefing": true})).await,
            l,
            "briefing after restore",
        );
        assert!(briefing_rules(&brief).is_empty(), "[{l}] not re-promoted: {brief}");
        // Promoting it again is explicit.
        err(
            call(&store, &a, "promote_rule", json!({"memory_id": pref})).await,
            ErrorCode::Conflict,
            l,
            "re-promote without force",
        );
        ok(
            call(&store, &a, "promote_rule", json!({"memory_id": pref, "force": true})).await,
            l,
            "re-promote with force",
        );
        assert_eq!(store.user_rules(&a).await.unwrap().len(), 1, "[{l}]");
    }

    /// A rule follows its memory's newer version (an edit keeps and
    /// corrects the rule; a custom rule text stays); a challenged memory
    /// retired by resolve_conflict takes its rule with it; a winner that
    /// was forgotten meanwhile cannot win.
    async fn a_rule_follows_an_edit_and_leaves_with_a_retired_memory(store: Store, l: &str) {
        let (_, a) = user(&store, "rules-edit").await;
        let texts = |rules: Vec<zm_contracts::Rule>| -> Vec<String> {
            rules.into_iter().map(|r| r.text).collect()
        };
        let old = mem(&store, &a, l, json!({"content": "Never deploy on Fridays.", "scope": "personal", "kind": "preference"})).await;
        ok(call(&store, &a, "promote_rule", json!({"memory_id": old})).await, l, "promote");
        let custom = mem(&store, &a, l, json!({"content": "Tabs are four spaces wide here.", "scope": "personal", "kind": "preference"})).await;
        ok(
            call(&store, &a, "promote_rule", json!({"memory_id": custom, "rule_text": "Indent with four spaces."})).await,
            l,
            "promote custom",
        );
        store.pin_rule(&a, &old, true).await.unwrap();
        let audit = store.audit_rows(&a.user_id, 5).await.unwrap();
        assert!(
            audit.iter().any(|r| r["command"] == "rule.pin" && r["payload"]["memory_id"] == json!(old)),
            "[{l}] pinning is audited: {audit:?}"
        );
        // Edit both, as the dashboard does: a new memory superseding the old.
        let new = mem(&store, &a, l, json!({"content": "Never deploy on Fridays or before a holiday.", "scope": "personal", "kind": "preference", "links": [{"dst": old, "type": "supersedes"}]})).await;
        let newer = mem(&store, &a, l, json!({"content": "Tabs are four columns wide here.", "scope": "personal", "kind": "preference", "links": [{"dst": custom, "type": "supersedes"}]})).await;
        let mut rules = texts(store.user_rules(&a).await.unwrap());
        rules.sort();
        assert_eq!(
            rules,
            ["Indent with four spaces.", "Never deploy on Fridays or before a holiday."],
            "[{l}] the edited rule has the new text, the custom one its own"
        );
        let listed = store.list_rules(&a).await.unwrap();
        assert!(
            listed.iter().all(|r| r.memory_id.as_str() == new || r.memory_id.as_str() == newer),
            "[{l}] the rules point at the newest versions: {listed:?}"
        );
        assert!(
            listed.iter().any(|r| r.memory_id.as_str() == new && r.pinned),
            "[{l}] in its state: still pinned: {listed:?}"
        );
        // Rewritten into another scope, it does not follow: it retires.
        let project = project_of(&store, &a, l, "/src/rules-edit-elsewhere").await;
        let moved_on = mem(&store, &a, l, json!({"content": "Tabs are eight columns wide in the vendored code.", "scope": project, "kind": "convention", "links": [{"dst": newer, "type": "supersedes"}]})).await;
        let listed = store.list_rules(&a).await.unwrap();
        assert!(
            !listed.iter().any(|r| r.memory_id.as_str() == moved_on),
            "[{l}] no rule follows into another scope: {listed:?}"
        );
        assert!(
            !texts(store.user_rules(&a).await.unwrap()).contains(&"Indent with four spaces.".to_string()),
            "[{l}] the rule left with the version it was promoted from"
        );

        // A promoted memory, challenged and retired: its rule leaves too.
        let doubtful = mem(&store, &a, l, json!({"content": "Always squash merge.", "scope": "personal", "kind": "preference"})).await;
        ok(call(&store, &a, "promote_rule", json!({"memory_id": doubtful})).await, l, "promote doubtful");
        let ch = ok(call(&store, &a, "challenge", json!({"memory_id": doubtful, "reason": "we rebase now"})).await, l, "challenge");
        ok(
            call(&store, &a, "resolve_conflict", json!({"dispute_id": ch["dispute_id"], "retire": true})).await,
            l,
            "retire",
        );
        assert!(
            !texts(store.user_rules(&a).await.unwrap()).contains(&"Always squash merge.".to_string()),
            "[{l}] the retired memory's rule is gone"
        );

        // A pair whose winner was forgotten before the resolve.
        let x = mem(&store, &a, l, json!({"content": "The staging database is db-stage-1.", "scope": "personal", "kind": "fact"})).await;
        let y = mem(&store, &a, l, json!({"content": "The staging database is db-stage-2.", "scope": "personal", "kind": "fact"})).await;
        ok(call(&store, &a, "link", json!({"src": x, "dst": y, "type": "contradicts"})).await, l, "contradicts");
        let listed = ok(call(&store, &a, "list_conflicts", json!({})).await, l, "list");
        let pair = listed["conflicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["memory_b"]["id"] == json!(x) || c["memory_a"]["id"] == json!(x))
            .cloned();
        assert!(pair.is_some(), "[{l}] a contradicts link files a conflict: {listed}");
        if let Some(pair) = pair {
            ok(call(&store, &a, "forget", json!({"memory_id": y})).await, l, "forget the winner");
            err(
                call(&store, &a, "resolve_conflict", json!({"dispute_id": pair["dispute_id"], "winner": y})).await,
                ErrorCode::Conflict,
                l,
                "a forgotten winner",
            );
            let got = ok(call(&store, &a, "get_conflict", json!({"dispute_id": pair["dispute_id"]})).await, l, "get");
            assert_eq!(got["conflict"]["status"], json!("pending"), "[{l}] the refusal settled nothing: {got}");
            let still = ok(call(&store, &a, "recall", json!({"query": "staging database db-stage-1"})).await, l, "recall");
            assert!(
                still["memories"].as_array().unwrap().iter().any(|m| m["id"] == json!(x)),
                "[{l}] the other memory stands: {still}"
            );
        }
    }

    /// A layer delivers at most 12 pinned rules (the newest promotions),
    /// and pinning a 13th in a layer that holds 12 is refused rather than
    /// pinned and never delivered; re-pinning a pinned rule counts nothing.
    async fn pinned_rules_are_capped_per_layer(store: Store, l: &str) {
        let cap = zm_store::search::PINNED_RULES_CAP_PER_LAYER;
        let (_, a) = user(&store, "rules-pin-cap").await;
        let mut mine = Vec::new();
        for i in 0..=cap {
            let id = mem(&store, &a, l, json!({"content": format!("Always run check number {i} first."), "scope": "personal", "kind": "preference"})).await;
            ok(call(&store, &a, "promote_rule", json!({"memory_id": id})).await, l, "promote");
            mine.push(id);
        }
        for id in &mine[..cap] {
            store.pin_rule(&a, id, true).await.expect("pin within the cap");
        }
        store.pin_rule(&a, &mine[0], true).await.expect("a pinned rule pinned again");
        err(store.pin_rule(&a, &mine[cap], true).await, ErrorCode::Conflict, l, "one pin past the cap");
        let rules = store.user_rules(&a).await.unwrap();
        assert_eq!(
            (rules.iter().filter(|r| r.pinned).count(), rules.len()),
            (cap, cap + 1),
            "[{l}] the refused pin left its rule delivered unpinned: {rules:?}"
        );
        store.pin_rule(&a, &mine[3], false).await.unwrap();
        store.pin_rule(&a, &mine[cap], true).await.expect("pinned once one is unpinned");
        // A pin stays with a rule promoted again for where it was pinned,
        // and only there: promoted for a project, a rule pinned among the
        // person's own comes unpinned (each place's pins are capped where
        // they are made), and stays so when promoted back.
        ok(call(&store, &a, "promote_rule", json!({"memory_id": mine[1]})).await, l, "promote again, same place");
        let project = project_of(&store, &a, l, "/src/pin-follows").await;
        mem(&store, &a, l, json!({"content": "The project the pin does not follow to.", "scope": project, "kind": "fact"})).await;
        ok(
            call(&store, &a, "promote_rule", json!({"memory_id": mine[0], "applies_scope": project})).await,
            l,
            "promote again for a project",
        );
        ok(call(&store, &a, "promote_rule", json!({"memory_id": mine[0]})).await, l, "and back");
        let rules = store.user_rules(&a).await.unwrap();
        let pinned = |n: usize| {
            rules
                .iter()
                .find(|r| r.text.contains(&format!("check number {n} first")))
                .map(|r| r.pinned)
        };
        assert_eq!(
            (pinned(1), pinned(0)),
            (Some(true), Some(false)),
            "[{l}] the pin follows only a promotion for the same place: {rules:?}"
        );

        // Two projects' pins in one read set: the layer delivers the
        // newest 12 of them.
        let (_, b) = user(&store, "rules-pin-cap-projects").await;
        let mut promoted = Vec::new();
        for (n, hint) in ["/src/pin-cap-one", "/src/pin-cap-two"].into_iter().enumerate() {
            let project = project_of(&store, &b, l, hint).await;
            for i in 0..cap / 2 + 1 {
                let text = format!("Project {n} convention number {i}.");
                let id = mem(&store, &b, l, json!({"content": text, "scope": project, "kind": "convention"})).await;
                ok(call(&store, &b, "promote_rule", json!({"memory_id": id})).await, l, "promote project rule");
                store.pin_rule(&b, &id, true).await.expect("pin a project rule");
                promoted.push((project.clone(), text));
                // One promotion a millisecond: newest is well defined.
                store.clock().advance_ms(1);
            }
        }
        let scopes: Vec<&str> = vec![&promoted[0].0, &promoted[promoted.len() - 1].0];
        let brief = ok(
            call(&store, &b, "build_context", json!({"topic": "conventions", "briefing": true, "scopes": scopes})).await,
            l,
            "briefing over both projects",
        );
        let delivered: Vec<&str> = brief["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["text"].as_str().unwrap())
            .collect();
        let newest: Vec<&str> = promoted.iter().rev().take(cap).map(|(_, t)| t.as_str()).collect();
        assert_eq!(delivered, newest, "[{l}] the newest {cap} pinned project rules: {brief}");
    }

    async fn briefing_reading_everything_delivers_the_pinned_projects_rules(store: Store, l: &str) {
        let (_, a) = user(&store, "rules-all").await;
        let project = project_of(&store, &a, l, "/src/rules-all-project").await;
        let other = project_of(&store, &a, l, "/src/rules-all-other").await;
        let conv = mem(&store, &a, l, json!({"content": "Run the migrations check before merging.", "scope": project, "kind": "convention"})).await;
        let elsewhere = mem(&store, &a, l, json!({"content": "Deploy only on Tuesdays.", "scope": other, "kind": "convention"})).await;
        for id in [&conv, &elsewhere] {
            ok(
                call(&store, &a, "promote_rule", json!({"memory_id": id})).await,
                l,
                "promote project rule",
            );
        }
        let brief = ok(
            call(
                &store,
                &a,
                "build_context",
                json!({"topic": "work", "briefing": true, "scopes": ["*"], "project_hint": "/src/rules-all-project"}),
            )
            .await,
            l,
            "briefing over everything",
        );
        let texts: Vec<&str> = brief["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["text"].as_str().unwrap())
            .collect();
        assert_eq!(
            texts,
            vec!["Run the migrations check before merging."],
            "[{l}] the pinned project's rule, no other project's: {brief}"
        );
        assert_eq!(brief["project_scope"].as_str(), Some(project.as_str()), "[{l}] {brief}");
    }

    /// A rule holds at most 2000 characters: a longer memory is promoted
    /// only with a `rule_text`, and a rule following its memory's longer
    /// new version is cut to 2000.
    async fn a_rule_holds_at_most_2000_characters(store: Store, l: &str) {
        let (_, a) = user(&store, "rules-long").await;
        let long = mem(&store, &a, l, json!({"content": "Always tag releases. ".repeat(120), "scope": "personal", "kind": "preference"})).await;
        let e = err(call(&store, &a, "promote_rule", json!({"memory_id": long})).await, ErrorCode::ValidationFailed, l, "2520 characters, no rule_text");
        assert!(serde_json::to_string(&e).unwrap().contains("rule_text"), "[{l}] {e:?}");
        ok(call(&store, &a, "promote_rule", json!({"memory_id": long, "rule_text": "Always tag releases."})).await, l, "with rule_text");

        let short = mem(&store, &a, l, json!({"content": "Never push on Fridays.", "scope": "personal", "kind": "preference"})).await;
        ok(call(&store, &a, "promote_rule", json!({"memory_id": short})).await, l, "its content");
        let longer = "Never push on Fridays, nor on the eve of a holiday. ".repeat(50);
        mem(&store, &a, l, json!({"content": longer, "scope": "personal", "kind": "preference", "links": [{"dst": short, "type": "supersedes"}]})).await;
        let brief = ok(call(&store, &a, "build_context", json!({"topic": "push", "briefing": true})).await, l, "briefing");
        let texts: Vec<&str> = brief["rules"].as_array().unwrap().iter().map(|r| r["text"].as_str().unwrap()).collect();
        let followed = texts.iter().find(|t| t.contains("eve of a holiday")).unwrap_or_else(|| panic!("[{l}] the rule follows: {texts:?}"));
        assert_eq!(followed.chars().count(), 2000, "[{l}] cut to 2000");
        assert!(longer.starts_with(followed), "[{l}] its beginning");
        // A cut text still follows the next version.
        let second = brief["rules"].as_array().unwrap().len();
        let b = ok(call(&store, &a, "recall", json!({"query": "eve of a holiday"})).await, l, "recall")["memories"][0]["id"].as_str().unwrap().to_string();
        mem(&store, &a, l, json!({"content": "Never push on Fridays or weekends.", "scope": "personal", "kind": "preference", "links": [{"dst": b, "type": "supersedes"}]})).await;
        let brief = ok(call(&store, &a, "build_context", json!({"topic": "push", "briefing": true})).await, l, "briefing again");
        let texts: Vec<&str> = brief["rules"].as_array().unwrap().iter().map(|r| r["text"].as_str().unwrap()).collect();
        assert_eq!(texts.len(), second, "[{l}] {texts:?}");
        assert!(texts.contains(&"Never push on Fridays or weekends."), "[{l}] the third version's text: {texts:?}");
    }
}
