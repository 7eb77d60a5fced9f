//! Memories a departed member left to a team's steward, on every backend:
//! nobody signs in as the steward, so the team's admins forget them (they
//! leave every member's recall, and a rule promoted from one is retired),
//! restore them and close the open loops among them, through the same
//! tools, audited as the admin's calls; the memory stays the steward's.
//! The team's writers and readers are refused (`forbidden`); an admin of
//! another team, an outsider and the departed member find no such memory
//! (`not_found`, as for an id that never existed); a current member's
//! memory stays theirs alone to change.
//!
//! Each test runs once per backend through [`backend_tests!`], except the
//! last: on PostgreSQL only, an admin's forget takes turns with a role
//! change of the team (it holds the team's row, then the memory's).

mod common;

use common::*;
use serde_json::json;
use zm_contracts::teams::TeamAction;
use zm_contracts::{ErrorCode, TeamRole};
use zm_store::rules::RuleState;
use zm_store::{Caller, Store};

/// `who` remembers `kind` in `scope`, its text carrying the run-unique
/// word `word`; the memory's id.
async fn note(store: &Store, who: &Caller, l: &str, scope: &str, kind: &str, word: &str) -> String {
    mem(
        store,
        who,
        l,
        json!({"content": format!("The staging rebuild {word} runs nightly at two."), "kind": kind, "scope": scope}),
    )
    .await
}

/// Whether `who` recalls memory `id` by its word, over every scope they read.
async fn recalls(store: &Store, who: &Caller, l: &str, word: &str, id: &str) -> bool {
    recall_ids(store, who, l, json!({"query": word, "scopes": ["*"]}))
        .await
        .iter()
        .any(|m| m == id)
}

backend_tests! {
    /// A team memory its author superseded with a memory of their own
    /// (in their personal scope) before leaving: the link is the author's,
    /// so the team's admin cannot restore the old version (that would drop
    /// the author's link); it stays superseded.
    async fn an_admin_does_not_restore_what_its_author_superseded(store: Store, l: &str) {
        let (_, admin) = user(&store, "sms-admin").await;
        let slug = create_team_of(&store, &admin, l, "sms").await;
        let scope = format!("team.{slug}");
        let (uw, w) = team_member(&store, &admin, l, &slug, "sms-w", TeamRole::Writer).await;
        let word = unique("old").replace('-', "");
        let old = note(&store, &w, l, &scope, "fact", &word).await;
        mem(
            &store,
            &w,
            l,
            json!({"content": format!("The staging rebuild {word} now runs at four."), "kind": "fact", "scope": "personal",
                   "links": [{"dst": old, "type": "supersedes"}]}),
        )
        .await;
        // A second edit of theirs stays in the team's scope: both
        // versions go to the steward with the writer.
        let word2 = unique("old").replace('-', "");
        let old2 = note(&store, &w, l, &scope, "fact", &word2).await;
        mem(
            &store,
            &w,
            l,
            json!({"content": format!("The staging rebuild {word2} now runs at five."), "kind": "fact", "scope": scope,
                   "links": [{"dst": old2, "type": "supersedes"}]}),
        )
        .await;
        ok(store.remove_team_member(&admin, &slug, &uw.id).await, l, "remove W");
        err(restore(&store, &admin, &old).await, ErrorCode::Conflict, l, "restore what its author superseded");
        assert!(!recalls(&store, &admin, l, &word, &old).await, "[{l}] the old version stays superseded");
        err(restore(&store, &admin, &old2).await, ErrorCode::Conflict, l, "restore a version the steward's newer one superseded");
        assert!(!recalls(&store, &admin, l, &word2, &old2).await, "[{l}] it stays superseded");
    }

    /// A writer's team memory (promoted to a rule) and open loops go to
    /// the steward when the writer is removed or leaves. The team's admin
    /// forgets the memory: it leaves every member's recall and its rule is
    /// retired; restores it: it is back; closes a task and an open
    /// question of theirs. Each call is audited as the admin's; the
    /// memories stay the steward's (not the admin's to export).
    async fn an_admin_forgets_restores_and_closes_what_a_departed_writer_left(store: Store, l: &str) {
        for leaves in [false, true] {
            let l = &format!("{l}, the writer leaves: {leaves}");
            let (_, admin) = user(&store, "smf-admin").await;
            let slug = create_team_of(&store, &admin, l, "smf").await;
            let scope = format!("team.{slug}");
            let (uw, w) = team_member(&store, &admin, l, &slug, "smf-w", TeamRole::Writer).await;
            let (_, reader) = team_member(&store, &admin, l, &slug, "smf-r", TeamRole::Reader).await;
            let word = unique("stale").replace('-', "");
            let fact = note(&store, &w, l, &scope, "fact", &word).await;
            ok(call(&store, &w, "promote_rule", json!({"memory_id": fact})).await, l, "promote");
            let task = note(&store, &w, l, &format!("{scope}.web"), "task", &format!("{word}task")).await;
            let question = note(&store, &w, l, &scope, "open-question", &format!("{word}question")).await;
            let admin_owns = owned(&store, &admin, l).await;
            if leaves {
                ok(store.remove_team_member(&w, &slug, &uw.id).await, l, "W leaves");
            } else {
                ok(store.remove_team_member(&admin, &slug, &uw.id).await, l, "remove W");
            }
            for who in [&admin, &reader] {
                assert!(recalls(&store, who, l, &word, &fact).await, "[{l}] handed over, still read");
            }
            assert_eq!(steward_rule_state(&store, &admin, l, &slug, &fact).await, Some(RuleState::Promoted), "[{l}]");

            ok(forget(&store, &admin, &fact).await, l, "the admin forgets the steward's memory");
            for who in [&admin, &reader] {
                assert!(!recalls(&store, who, l, &word, &fact).await, "[{l}] forgotten for every member");
            }
            assert_eq!(steward_rule_state(&store, &admin, l, &slug, &fact).await, Some(RuleState::Revoked), "[{l}] its rule goes with it");
            err(forget(&store, &admin, &fact).await, ErrorCode::Conflict, l, "forget twice");
            ok(restore(&store, &admin, &fact).await, l, "the admin restores it");
            for who in [&admin, &reader] {
                assert!(recalls(&store, who, l, &word, &fact).await, "[{l}] restored for every member");
            }
            err(restore(&store, &admin, &fact).await, ErrorCode::Conflict, l, "restore a live one");

            for (id, what) in [(&task, "task"), (&question, "open question")] {
                ok(close_loop(&store, &admin, id).await, l, &format!("the admin closes the {what}"));
                err(close_loop(&store, &admin, id).await, ErrorCode::Conflict, l, &format!("close the {what} twice"));
            }
            assert!(!recalls(&store, &reader, l, &format!("{word}task"), &task).await, "[{l}] closed");
            err(close_loop(&store, &admin, &fact).await, ErrorCode::ValidationFailed, l, "close a fact");

            // Still the steward's: nothing became the admin's.
            assert_eq!(owned(&store, &admin, l).await, admin_owns, "[{l}]");
            assert!(!store.owns_memory(&admin, &fact).await.unwrap(), "[{l}]");
            let audit = store.audit_rows(&admin.user_id, 20).await.unwrap();
            for (command, id) in [("forget", &fact), ("restore_memory", &fact), ("close_loop", &task), ("close_loop", &question)] {
                assert!(
                    audit.iter().any(|r| r["command"] == command && r["payload"]["memory_id"] == json!(id) && r["outcome"] == "ok"),
                    "[{l}] {command} {id} audited as the admin's: {audit:?}"
                );
            }
            // And in the team's audit log, each once (the refused second
            // tries left nothing), for its other admins to see.
            let by_admin = |action, id: &String| (action, admin.user_id.clone(), id.clone());
            assert_eq!(
                steward_events(&store, &admin, l, &slug).await,
                vec![
                    by_admin(TeamAction::StewardMemoryForgotten, &fact),
                    by_admin(TeamAction::StewardMemoryRestored, &fact),
                    by_admin(TeamAction::StewardMemoryClosed, &task),
                    by_admin(TeamAction::StewardMemoryClosed, &question),
                ],
                "[{l}] the team's audit log"
            );
        }
    }

    /// The team's writers and readers may not forget, restore or close the
    /// steward's memories (`forbidden`, naming their role), nor may an
    /// admin demoted to writer; the memory stays in recall. Promoted to
    /// admin again, they forget it.
    async fn a_writer_or_reader_of_the_team_is_forbidden(store: Store, l: &str) {
        let (_, admin) = user(&store, "smx-admin").await;
        let slug = create_team_of(&store, &admin, l, "smx").await;
        let scope = format!("team.{slug}");
        let (uw, w) = team_member(&store, &admin, l, &slug, "smx-w", TeamRole::Writer).await;
        let (_, writer) = team_member(&store, &admin, l, &slug, "smx-w2", TeamRole::Writer).await;
        let (_, reader) = team_member(&store, &admin, l, &slug, "smx-r", TeamRole::Reader).await;
        let (ua2, admin2) = team_member(&store, &admin, l, &slug, "smx-a2", TeamRole::Admin).await;
        let word = unique("kept").replace('-', "");
        let fact = note(&store, &w, l, &scope, "fact", &word).await;
        let task = note(&store, &w, l, &scope, "task", &format!("{word}task")).await;
        let gone = note(&store, &w, l, &scope, "fact", &format!("{word}gone")).await;
        ok(store.remove_team_member(&admin, &slug, &uw.id).await, l, "remove W");
        ok(forget(&store, &admin, &gone).await, l, "the admin forgets one");
        let role = |r: &str| input!(zm_contracts::teams::SetRoleInput, &json!({"role": r}));
        ok(store.set_team_role(&admin, &slug, &ua2.id, role("writer")).await, l, "demote the second admin");
        for (who, name, held) in [(&writer, "a writer", "writer"), (&reader, "a reader", "reader"), (&admin2, "a demoted admin", "writer")] {
            for (tool, result) in [
                ("forget", forget(&store, who, &fact).await.map(|_| ())),
                ("close_loop", close_loop(&store, who, &task).await.map(|_| ())),
                ("restore_memory", restore(&store, who, &gone).await.map(|_| ())),
            ] {
                let e = err(result, ErrorCode::Forbidden, l, &format!("{name}: {tool}"));
                assert!(e.message.contains("admin role") && e.message.contains(&format!("yours is {held}")), "[{l}] {name} {tool}: {}", e.message);
            }
        }
        assert!(recalls(&store, &reader, l, &word, &fact).await, "[{l}] still read");
        assert!(recalls(&store, &reader, l, &format!("{word}task"), &task).await, "[{l}] still open");
        assert!(!recalls(&store, &reader, l, &format!("{word}gone"), &gone).await, "[{l}] still forgotten");
        ok(store.set_team_role(&admin, &slug, &ua2.id, role("admin")).await, l, "admin again");
        ok(forget(&store, &admin2, &fact).await, l, "forgotten as admin");
        assert!(!recalls(&store, &reader, l, &word, &fact).await, "[{l}]");
    }

    /// An admin of another team (whose own steward holds memories too),
    /// an outsider and the departed writer themself find no such memory:
    /// `not_found`, worded as for a memory that never existed. The team's
    /// own admin does forget it.
    async fn another_teams_admin_finds_no_memory(store: Store, l: &str) {
        let (_, admin) = user(&store, "smo-admin").await;
        let slug = create_team_of(&store, &admin, l, "smo").await;
        let scope = format!("team.{slug}");
        let (uw, w) = team_member(&store, &admin, l, &slug, "smo-w", TeamRole::Writer).await;
        let word = unique("far").replace('-', "");
        let fact = note(&store, &w, l, &scope, "fact", &word).await;
        let task = note(&store, &w, l, &scope, "task", &format!("{word}task")).await;
        let gone = note(&store, &w, l, &scope, "fact", &format!("{word}gone")).await;
        ok(store.remove_team_member(&admin, &slug, &uw.id).await, l, "remove W");
        ok(forget(&store, &admin, &gone).await, l, "the admin forgets one");
        let (_, other_admin) = user(&store, "smo-other").await;
        let other = create_team_of(&store, &other_admin, l, "smoother").await;
        let (uw2, w2) = team_member(&store, &other_admin, l, &other, "smo-w2", TeamRole::Writer).await;
        note(&store, &w2, l, &format!("team.{other}"), "fact", &unique("x").replace('-', "")).await;
        ok(store.remove_team_member(&other_admin, &other, &uw2.id).await, l, "remove W2");
        let (_, outsider) = user(&store, "smo-x").await;
        let never = err(forget(&store, &other_admin, NEVER).await, ErrorCode::NotFound, l, "a memory that never existed");
        for (who, name) in [(&other_admin, "another team's admin"), (&outsider, "an outsider"), (&w, "the departed writer")] {
            let results: [(&str, &String, Result<(), zm_contracts::ToolError>); 3] = [
                ("forget", &fact, forget(&store, who, &fact).await.map(|_| ())),
                ("close_loop", &task, close_loop(&store, who, &task).await.map(|_| ())),
                ("restore_memory", &gone, restore(&store, who, &gone).await.map(|_| ())),
            ];
            for (tool, id, result) in results {
                let e = err(result, ErrorCode::NotFound, l, &format!("{name}: {tool}"));
                assert_eq!(shape(&e, id), shape(&never, NEVER), "[{l}] {name} {tool}: told apart from a missing memory");
            }
        }
        assert!(recalls(&store, &admin, l, &word, &fact).await, "[{l}] untouched");
        ok(forget(&store, &admin, &fact).await, l, "the team's admin forgets it");
        assert!(!recalls(&store, &admin, l, &word, &fact).await, "[{l}]");
    }

    /// A teammate's `supersedes` link onto a memory the steward holds is
    /// their annotation, not its author's edit: it does not stop the
    /// team's admin from restoring the memory, and the restore leaves it.
    async fn a_teammates_link_does_not_block_a_restore(store: Store, l: &str) {
        let (_, admin) = user(&store, "sml-admin").await;
        let slug = create_team_of(&store, &admin, l, "sml").await;
        let scope = format!("team.{slug}");
        let (ugone, gone) = team_member(&store, &admin, l, &slug, "sml-gone", TeamRole::Writer).await;
        let (_, w) = team_member(&store, &admin, l, &slug, "sml-w", TeamRole::Writer).await;
        let word = unique("lnk").replace('-', "");
        let left = note(&store, &gone, l, &scope, "fact", &word).await;
        ok(store.remove_team_member(&admin, &slug, &ugone.id).await, l, "remove the writer");
        ok(forget(&store, &admin, &left).await, l, "the admin forgets the steward's memory");
        let newer = note(&store, &w, l, &scope, "fact", &format!("{word}newer")).await;
        ok(call(&store, &w, "link", json!({"src": newer, "dst": left, "type": "supersedes"})).await, l, "a teammate links it");
        ok(restore(&store, &admin, &left).await, l, "the admin restores it");
        assert!(recalls(&store, &admin, l, &word, &left).await, "[{l}] live again");
        // The link is still the teammate's: linking again adds nothing.
        let again = ok(call(&store, &w, "link", json!({"src": newer, "dst": left, "type": "supersedes"})).await, l, "link again");
        assert_eq!(again["created"], json!(false), "[{l}] the teammate's link was kept: {again}");
    }

    /// An admin changes the steward's memories only: a current member's
    /// shared memory in the same scope stays theirs (`not_found` to the
    /// admin's forget, close and restore, as before; still read), and its
    /// owner forgets it.
    async fn a_current_members_memory_stays_theirs(store: Store, l: &str) {
        let (_, admin) = user(&store, "smm-admin").await;
        let slug = create_team_of(&store, &admin, l, "smm").await;
        let scope = format!("team.{slug}");
        let (ugone, gone) = team_member(&store, &admin, l, &slug, "smm-gone", TeamRole::Writer).await;
        let (_, w) = team_member(&store, &admin, l, &slug, "smm-w", TeamRole::Writer).await;
        let word = unique("mine").replace('-', "");
        let left = note(&store, &gone, l, &scope, "fact", &format!("{word}left")).await;
        let theirs = note(&store, &w, l, &scope, "task", &word).await;
        let forgotten = note(&store, &w, l, &scope, "fact", &format!("{word}forgotten")).await;
        ok(forget(&store, &w, &forgotten).await, l, "the writer forgets one of theirs");
        ok(store.remove_team_member(&admin, &slug, &ugone.id).await, l, "remove the first writer");
        ok(forget(&store, &admin, &left).await, l, "the steward's memory");
        for (tool, id, result) in [
            ("forget", &theirs, forget(&store, &admin, &theirs).await.map(|_| ())),
            ("close_loop", &theirs, close_loop(&store, &admin, &theirs).await.map(|_| ())),
            ("restore_memory", &forgotten, restore(&store, &admin, &forgotten).await.map(|_| ())),
        ] {
            let e = err(result, ErrorCode::NotFound, l, &format!("a current member's memory: {tool}"));
            assert_eq!(e.message, format!("Memory {id} not found."), "[{l}] {tool}");
        }
        assert!(recalls(&store, &admin, l, &word, &theirs).await, "[{l}] still read");
        ok(forget(&store, &w, &theirs).await, l, "the owner forgets their own");
        assert!(!recalls(&store, &admin, l, &word, &theirs).await, "[{l}]");
        // A member's change to their own memory is theirs: the team's log
        // holds only what was done for the steward.
        assert_eq!(
            steward_events(&store, &admin, l, &slug).await,
            vec![(TeamAction::StewardMemoryForgotten, admin.user_id.clone(), left.clone())],
            "[{l}] the team's audit log"
        );
    }
}

/// PostgreSQL only: a role change in progress — its transaction holds the
/// team's row, as every team change does, and has demoted the admin —
/// makes the admin's forget of the steward's memory wait for it, which
/// then reads the role it left: `forbidden`, the memory untouched. The
/// test polls `pg_locks` in a bounded loop; nothing waits on the clock for
/// an assertion.
#[tokio::test]
async fn a_forget_takes_turns_with_a_role_change() {
    let l = "postgres";
    let Some((store, raw)) = postgres_with_raw("a_forget_takes_turns_with_a_role_change").await
    else {
        return;
    };
    let (_, admin) = user(&store, "smr-admin").await;
    let slug = create_team_of(&store, &admin, l, "smr").await;
    let scope = format!("team.{slug}");
    let (uw, w) = team_member(&store, &admin, l, &slug, "smr-w", TeamRole::Writer).await;
    let (ua2, admin2) = team_member(&store, &admin, l, &slug, "smr-a2", TeamRole::Admin).await;
    let word = unique("race").replace('-', "");
    let fact = note(&store, &w, l, &scope, "fact", &word).await;
    ok(
        store.remove_team_member(&admin, &slug, &uw.id).await,
        l,
        "remove W",
    );
    let (change, pid) = hold_a_demotion(&raw, &slug, &scope, &ua2.id).await;
    let forgetting = {
        let (store, admin2, fact) = (store.clone(), admin2.clone(), fact.clone());
        tokio::spawn(async move { forget(&store, &admin2, &fact).await })
    };
    let waited = waits_on(&raw, pid, &forgetting).await;
    change.commit().await.expect("commit the role change");
    let done = forgetting.await.expect("the forget's task");
    assert!(
        waited,
        "[{l}] the forget did not wait for the role change: {done:?}"
    );
    let e = err(
        done,
        ErrorCode::Forbidden,
        l,
        "a forget by an admin demoted meanwhile",
    );
    assert!(e.message.contains("yours is writer"), "[{l}] {}", e.message);
    assert!(
        recalls(&store, &admin, l, &word, &fact).await,
        "[{l}] still read"
    );
}
