//! Rules a departed member left to a team's steward, on every backend:
//! nobody signs in as the steward, so the team's admins revoke them (the
//! rule leaves every member's briefing at once, audited as the admin's
//! `rule.revoke`); the team's writers and readers are refused
//! (`forbidden`), an admin of another team, or a former member, finds no
//! such rule (`not_found`, as for an id that never existed), and a rule a
//! current member promoted for the team is revoked by the team's admins
//! too (moderation: every member's agents receive it), audited as
//! `member_rule_revoked`, while its writers are refused and its owner
//! keeps revoking their own.
//!
//! Each test runs once per backend through [`backend_tests!`], except the
//! last: on PostgreSQL only, a revocation takes turns with a role change of
//! the team (it holds the team's row, as the team's changes do).

mod common;

use common::*;
use serde_json::{Value, json};
use zm_contracts::teams::TeamAction;
use zm_contracts::{ErrorCode, TeamRole};
use zm_store::rules::RuleState;
use zm_store::{Caller, Store};

/// `who` remembers a convention in `scope` and promotes it to a rule for
/// that scope; (memory id, rule text).
async fn team_rule(
    store: &Store,
    who: &Caller,
    l: &str,
    scope: &str,
    tag: &str,
) -> (String, String) {
    let text = format!("Every release needs a changelog entry ({tag}).");
    let id = mem(
        store,
        who,
        l,
        json!({"content": text, "kind": "convention", "scope": scope}),
    )
    .await;
    ok(
        call(store, who, "promote_rule", json!({"memory_id": id})).await,
        l,
        "promote the team rule",
    );
    (id, text)
}

/// The rule texts of `who`'s briefing over `scopes`.
async fn briefing_rules(store: &Store, who: &Caller, l: &str, scopes: &[&str]) -> Vec<String> {
    let out = ok(
        call(
            store,
            who,
            "build_context",
            json!({"topic": "releases changelog", "briefing": true, "scopes": scopes}),
        )
        .await,
        l,
        "briefing",
    );
    out["rules"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r["text"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

backend_tests! {
    /// A writer's team rule, in the team's scope and in one of its own
    /// projects, goes to the steward when the writer is removed or leaves;
    /// the team's admin revokes it: it leaves every member's briefing at
    /// once, the steward's listing shows it revoked, and the admin's audit
    /// log records the revocation for the team.
    async fn an_admin_revokes_the_rules_a_departed_writer_left(store: Store, l: &str) {
        for leaves in [false, true] {
            let l = &format!("{l}, the writer leaves: {leaves}");
            let (_, admin) = user(&store, "stw-admin").await;
            let slug = create_team_of(&store, &admin, l, "stw").await;
            let scope = format!("team.{slug}");
            let project = format!("{scope}.web");
            let (uw, w) = team_member(&store, &admin, l, &slug, "stw-w", TeamRole::Writer).await;
            let (_, reader) = team_member(&store, &admin, l, &slug, "stw-r", TeamRole::Reader).await;
            let tag = unique("t");
            let (in_team, team_text) = team_rule(&store, &w, l, &scope, &format!("team {tag}")).await;
            let (in_project, project_text) = team_rule(&store, &w, l, &project, &format!("web {tag}")).await;
            let scopes = [scope.as_str(), project.as_str()];
            if leaves {
                ok(store.remove_team_member(&w, &slug, &uw.id).await, l, "W leaves");
            } else {
                ok(store.remove_team_member(&admin, &slug, &uw.id).await, l, "remove W");
            }
            // The steward holds both, still delivered to the team.
            for id in [&in_team, &in_project] {
                assert_eq!(steward_rule_state(&store, &admin, l, &slug, id).await, Some(RuleState::Promoted), "[{l}] {id}");
            }
            for who in [&admin, &reader] {
                let rules = briefing_rules(&store, who, l, &scopes).await;
                assert!(rules.contains(&team_text) && rules.contains(&project_text), "[{l}] {rules:?}");
            }
            ok(store.revoke_rule(&admin, &in_team, "the team dropped this convention").await, l, "the admin revokes the team rule");
            ok(store.revoke_rule(&admin, &in_project, "the project dropped it").await, l, "the admin revokes the project rule");
            for who in [&admin, &reader] {
                let rules = briefing_rules(&store, who, l, &scopes).await;
                assert!(!rules.contains(&team_text) && !rules.contains(&project_text), "[{l}] revoked rules are delivered: {rules:?}");
            }
            for id in [&in_team, &in_project] {
                assert_eq!(steward_rule_state(&store, &admin, l, &slug, id).await, Some(RuleState::Revoked), "[{l}] {id}");
            }
            // It is not the admin's rule: their own listing stays empty.
            assert!(store.list_rules(&admin).await.unwrap().is_empty(), "[{l}]");
            let audit = store.audit_rows(&admin.user_id, 5).await.unwrap();
            let revoked: Vec<&Value> = audit.iter().filter(|r| r["command"] == "rule.revoke").collect();
            assert_eq!(revoked.len(), 2, "[{l}] {audit:?}");
            assert!(
                revoked.iter().all(|r| r["payload"]["team"] == json!(slug) && r["outcome"] == "ok"),
                "[{l}] audited for the team: {revoked:?}"
            );
            assert!(revoked.iter().any(|r| r["payload"]["memory_id"] == json!(in_team)), "[{l}] {revoked:?}");
            // Revoked is terminal: a second revocation finds no rule.
            err(store.revoke_rule(&admin, &in_team, "again").await, ErrorCode::NotFound, l, "revoke twice");
            // The team's audit log names both revocations, once each.
            let by_admin = |id: &String| (TeamAction::StewardRuleRevoked, admin.user_id.clone(), id.clone());
            assert_eq!(
                steward_events(&store, &admin, l, &slug).await,
                vec![by_admin(&in_team), by_admin(&in_project)],
                "[{l}] the team's audit log"
            );
        }
    }

    /// The team's writers and readers may not revoke the steward's rule
    /// (`forbidden`, naming their role), nor may an admin demoted to
    /// writer; the rule keeps being delivered. The admin role, read now,
    /// decides: promoted again to admin, they revoke it.
    async fn a_writer_or_reader_of_the_team_is_forbidden(store: Store, l: &str) {
        let (_, admin) = user(&store, "stf-admin").await;
        let slug = create_team_of(&store, &admin, l, "stf").await;
        let scope = format!("team.{slug}");
        let (uw, w) = team_member(&store, &admin, l, &slug, "stf-w", TeamRole::Writer).await;
        let (_, writer) = team_member(&store, &admin, l, &slug, "stf-w2", TeamRole::Writer).await;
        let (_, reader) = team_member(&store, &admin, l, &slug, "stf-r", TeamRole::Reader).await;
        let (ua2, admin2) = team_member(&store, &admin, l, &slug, "stf-a2", TeamRole::Admin).await;
        let (rule, text) = team_rule(&store, &w, l, &scope, &unique("f")).await;
        ok(store.remove_team_member(&admin, &slug, &uw.id).await, l, "remove W");
        let role = |r: &str| input!(zm_contracts::teams::SetRoleInput, &json!({"role": r}));
        ok(store.set_team_role(&admin, &slug, &ua2.id, role("writer")).await, l, "demote the second admin");
        for (who, name, held) in [(&writer, "a writer", "writer"), (&reader, "a reader", "reader"), (&admin2, "a demoted admin", "writer")] {
            let e = err(store.revoke_rule(who, &rule, "not wanted").await, ErrorCode::Forbidden, l, name);
            assert!(e.message.contains("admin role") && e.message.contains(&format!("yours is {held}")), "[{l}] {name}: {}", e.message);
        }
        assert_eq!(steward_rule_state(&store, &admin, l, &slug, &rule).await, Some(RuleState::Promoted), "[{l}]");
        assert!(briefing_rules(&store, &reader, l, &[&scope]).await.contains(&text), "[{l}] still delivered");
        // Nothing was written on their behalf.
        for who in [&writer, &reader, &admin2] {
            let audit = store.audit_rows(&who.user_id, 20).await.unwrap();
            assert!(audit.iter().all(|r| r["command"] != "rule.revoke"), "[{l}] {audit:?}");
        }
        ok(store.set_team_role(&admin, &slug, &ua2.id, role("admin")).await, l, "admin again");
        ok(store.revoke_rule(&admin2, &rule, "not wanted").await, l, "revoked as admin");
        assert!(!briefing_rules(&store, &reader, l, &[&scope]).await.contains(&text), "[{l}] no longer delivered");
    }

    /// An admin of another team, an outsider and the departed writer
    /// themself find no such rule: `not_found`, worded as for a memory
    /// that never existed. The team's own admin does revoke it.
    async fn another_teams_admin_finds_no_rule(store: Store, l: &str) {
        let (_, admin) = user(&store, "sto-admin").await;
        let slug = create_team_of(&store, &admin, l, "sto").await;
        let scope = format!("team.{slug}");
        let (uw, w) = team_member(&store, &admin, l, &slug, "sto-w", TeamRole::Writer).await;
        let (rule, text) = team_rule(&store, &w, l, &scope, &unique("o")).await;
        ok(store.remove_team_member(&admin, &slug, &uw.id).await, l, "remove W");
        let (_, other_admin) = user(&store, "sto-other").await;
        let other = create_team_of(&store, &other_admin, l, "stoother").await;
        // The other team's steward holds a rule too: its admin's power
        // stays with that team.
        let (uw2, w2) = team_member(&store, &other_admin, l, &other, "sto-w2", TeamRole::Writer).await;
        team_rule(&store, &w2, l, &format!("team.{other}"), &unique("p")).await;
        ok(store.remove_team_member(&other_admin, &other, &uw2.id).await, l, "remove W2");
        let (_, outsider) = user(&store, "sto-x").await;
        let never = err(store.revoke_rule(&other_admin, NEVER, "why").await, ErrorCode::NotFound, l, "a rule that never existed");
        for (who, name) in [(&other_admin, "another team's admin"), (&outsider, "an outsider"), (&w, "the departed writer")] {
            let e = err(store.revoke_rule(who, &rule, "why").await, ErrorCode::NotFound, l, name);
            assert_eq!(shape(&e, &rule), shape(&never, NEVER), "[{l}] {name}: told apart from a missing rule");
        }
        assert_eq!(steward_rule_state(&store, &admin, l, &slug, &rule).await, Some(RuleState::Promoted), "[{l}]");
        err(store.team_steward_rules(&other_admin, &slug).await, ErrorCode::NotFound, l, "another team's steward listing");
        ok(store.revoke_rule(&admin, &rule, "stale").await, l, "the team's admin revokes it");
        assert!(!briefing_rules(&store, &admin, l, &[&scope]).await.contains(&text), "[{l}]");
    }

    /// An admin revokes a rule a current member promoted for the team too
    /// (every member's agents receive it): it leaves every briefing, the
    /// team's audit log records `member_rule_revoked`, and the admin's page
    /// lists the member's rules. Another writer is refused (`forbidden`),
    /// another team's admin finds nothing, and a member's own rule for a
    /// personal scope is no team's to revoke. Its owner still revokes
    /// their own.
    async fn an_admin_revokes_a_current_members_team_rule(store: Store, l: &str) {
        let (_, admin) = user(&store, "stm-admin").await;
        let slug = create_team_of(&store, &admin, l, "stm").await;
        let scope = format!("team.{slug}");
        let (ugone, gone) = team_member(&store, &admin, l, &slug, "stm-gone", TeamRole::Writer).await;
        let (_, w) = team_member(&store, &admin, l, &slug, "stm-w", TeamRole::Writer).await;
        let (left, left_text) = team_rule(&store, &gone, l, &scope, &unique("left")).await;
        let (theirs, their_text) = team_rule(&store, &w, l, &scope, &unique("kept")).await;
        ok(store.remove_team_member(&admin, &slug, &ugone.id).await, l, "remove the first writer");
        ok(store.revoke_rule(&admin, &left, "stale").await, l, "the steward's rule");
        let listed = ok(store.team_member_rules(&admin, &slug).await, l, "the member rules");
        assert_eq!(
            listed.iter().map(|r| r.memory_id.to_string()).collect::<Vec<_>>(),
            vec![theirs.as_str()],
            "[{l}] the current member's rule only, not the steward's"
        );
        // Another writer of the team may not; another team's admin finds
        // nothing.
        let (_, w2) = team_member(&store, &admin, l, &slug, "stm-w2", TeamRole::Writer).await;
        err(store.revoke_rule(&w2, &theirs, "mine now").await, ErrorCode::Forbidden, l, "another writer");
        err(store.team_member_rules(&w2, &slug).await, ErrorCode::Forbidden, l, "a writer's listing");
        let (_, outsider) = user(&store, "stm-outsider").await;
        create_team_of(&store, &outsider, l, "stm-other").await;
        err(store.revoke_rule(&outsider, &theirs, "x").await, ErrorCode::NotFound, l, "another team's admin");
        // A member's personal rule is no team's.
        let personal = mem(&store, &w, l, json!({"content": "Answer in French.", "kind": "preference", "scope": "personal"})).await;
        ok(call(&store, &w, "promote_rule", json!({"memory_id": personal})).await, l, "a personal rule");
        err(store.revoke_rule(&admin, &personal, "x").await, ErrorCode::NotFound, l, "a member's personal rule");
        assert!(briefing_rules(&store, &admin, l, &[&scope]).await.contains(&their_text), "[{l}] delivered until revoked");
        ok(store.revoke_rule(&admin, &theirs, "contradicts our style guide").await, l, "the admin revokes a member's team rule");
        assert!(!briefing_rules(&store, &admin, l, &[&scope]).await.contains(&their_text), "[{l}] gone from briefings");
        let mine = store.list_rules(&w).await.unwrap();
        assert!(mine.iter().any(|r| r.memory_id.as_str() == theirs && r.status == RuleState::Revoked), "[{l}] {mine:?}");
        let audit = ok(store.team_audit(&admin, &slug).await, l, "audit");
        assert!(
            audit.events.iter().any(|e| e.action == TeamAction::MemberRuleRevoked
                && e.actor.as_ref().map(ToString::to_string) == Some(admin.user_id.clone())
                && e.subject.as_deref() == Some(theirs.as_str())),
            "[{l}] {audit:?}"
        );
        // The owner revokes their own, as ever.
        let (own, own_text) = team_rule(&store, &w, l, &scope, &unique("own")).await;
        ok(store.revoke_rule(&w, &own, "superseded").await, l, "the owner revokes their own");
        assert!(!briefing_rules(&store, &admin, l, &[&scope]).await.contains(&own_text), "[{l}]");
        let _ = left_text;
    }
}

/// PostgreSQL only: a role change in progress — its transaction holds the
/// team's row, as every team change does, and has demoted the admin —
/// makes the admin's revocation wait for it, which then reads the role it
/// left: `forbidden`, the rule untouched. (Read without the team's row, the
/// revocation went by the role committed before the change and revoked
/// the rule under an admin being demoted.) Nothing waits on the clock for
/// an assertion: the test polls `pg_locks` in a bounded loop.
#[tokio::test]
async fn a_revocation_takes_turns_with_a_role_change() {
    let l = "postgres";
    let Some((store, raw)) = postgres_with_raw("a_revocation_takes_turns_with_a_role_change").await
    else {
        return;
    };
    let (_, admin) = user(&store, "str-admin").await;
    let slug = create_team_of(&store, &admin, l, "str").await;
    let scope = format!("team.{slug}");
    let (uw, w) = team_member(&store, &admin, l, &slug, "str-w", TeamRole::Writer).await;
    let (ua2, admin2) = team_member(&store, &admin, l, &slug, "str-a2", TeamRole::Admin).await;
    let (rule, text) = team_rule(&store, &w, l, &scope, &unique("r")).await;
    ok(
        store.remove_team_member(&admin, &slug, &uw.id).await,
        l,
        "remove W",
    );
    // The role change, held open: the team's row, then the new role.
    let (change, pid) = hold_a_demotion(&raw, &slug, &scope, &ua2.id).await;
    let revoke = {
        let (store, admin2, rule) = (store.clone(), admin2.clone(), rule.clone());
        tokio::spawn(async move { store.revoke_rule(&admin2, &rule, "stale").await })
    };
    let waited = waits_on(&raw, pid, &revoke).await;
    change.commit().await.expect("commit the role change");
    let done = revoke.await.expect("the revocation's task");
    assert!(
        waited,
        "[{l}] the revocation did not wait for the role change: {done:?}"
    );
    let e = err(
        done,
        ErrorCode::Forbidden,
        l,
        "a revocation by an admin demoted meanwhile",
    );
    assert!(e.message.contains("yours is writer"), "[{l}] {}", e.message);
    assert_eq!(
        steward_rule_state(&store, &admin, l, &slug, &rule).await,
        Some(RuleState::Promoted),
        "[{l}]"
    );
    assert!(
        briefing_rules(&store, &admin, l, &[&scope])
            .await
            .contains(&text),
        "[{l}] still delivered"
    );
}

/// PostgreSQL only: a member's team rule that its author promotes again
/// for a scope of their own while an admin's revocation waits for the
/// team (its row held by a team change) is not revoked: the revocation
/// wrote only a rule still for the team's scope (`not_found`), and the
/// author's rule for their own project stays promoted.
#[tokio::test]
async fn a_revocation_leaves_a_rule_promoted_elsewhere_meanwhile() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_revocation_leaves_a_rule_promoted_elsewhere_meanwhile").await
    else {
        return;
    };
    let (_, admin) = user(&store, "srp-admin").await;
    let slug = create_team_of(&store, &admin, l, "srp").await;
    let scope = format!("team.{slug}");
    let (_, w) = team_member(&store, &admin, l, &slug, "srp-w", TeamRole::Writer).await;
    let (ux, _) = team_member(&store, &admin, l, &slug, "srp-x", TeamRole::Writer).await;
    let own = project_of(&store, &w, l, "/src/srp-own").await;
    mem(
        &store,
        &w,
        l,
        json!({"content": "The own project builds with make.", "kind": "fact", "scope": own}),
    )
    .await;
    let memory = mem(&store, &w, l, json!({"content": format!("Squash every merge ({}).", unique("m")), "kind": "convention", "scope": "personal"})).await;
    ok(
        call(
            &store,
            &w,
            "promote_rule",
            json!({"memory_id": memory, "applies_scope": scope}),
        )
        .await,
        l,
        "for the team",
    );
    // A team change, held open: the admin's revocation waits for it.
    let (change, pid) = hold_a_demotion(&raw, &slug, &scope, &ux.id).await;
    let revoke = {
        let (store, admin, memory) = (store.clone(), admin.clone(), memory.clone());
        tokio::spawn(async move { store.revoke_rule(&admin, &memory, "not our style").await })
    };
    let waited = waits_on(&raw, pid, &revoke).await;
    ok(
        call(
            &store,
            &w,
            "promote_rule",
            json!({"memory_id": memory, "applies_scope": own}),
        )
        .await,
        l,
        "for their own project meanwhile",
    );
    change.commit().await.expect("commit the team change");
    let done = revoke.await.expect("the revocation's task");
    assert!(
        waited,
        "[{l}] the revocation did not wait for the team: {done:?}"
    );
    err(
        done,
        ErrorCode::NotFound,
        l,
        "a rule no longer for the team",
    );
    let mine = store.list_rules(&w).await.unwrap();
    assert!(
        mine.iter().any(|r| r.memory_id.as_str() == memory
            && r.status == RuleState::Promoted
            && r.applies_scope.as_deref() == Some(own.as_str())),
        "[{l}] still promoted for their project: {mine:?}"
    );
}
