//! Teams, on every backend: the lifecycle (create, list, show, delete,
//! the 30-day export window, the purge), every role against every write
//! into a team scope, removal and demotion taking effect on the very next
//! call, shared projects in both members' briefings with the right rules,
//! invitations, the last-admin rules and the team audit log.
//!
//! Each test runs once per backend through [`backend_tests!`].

mod common;

use common::*;
use serde_json::{Value, json};
use zm_contracts::teams::{
    AddMemberInput, CreateTeamInput, InviteInput, SetRoleInput, ShareProjectInput, TeamAction,
};
use zm_contracts::{ErrorCode, InvitationId, TeamRole, ToolError};
use zm_store::{Caller, Store};

async fn team(store: &Store, admin: &Caller, l: &str, tag: &str) -> String {
    let slug = unique(tag).replace('-', "_");
    let input: CreateTeamInput = input!(CreateTeamInput, &json!({"slug": slug}));
    let made = ok(store.create_team(admin, input).await, l, "create team");
    assert_eq!(made.team.scope, format!("team.{slug}"), "[{l}]");
    assert_eq!(made.team.role, TeamRole::Admin, "[{l}]");
    slug
}

/// `email` joins the team with `role` as a member does: invited by the
/// admin, accepted by them (only the server's owner adds directly).
async fn add(store: &Store, admin: &Caller, l: &str, slug: &str, email: &str, role: TeamRole) {
    join_team(store, admin, slug, email, role, l).await;
}

/// The `remember` refusal for a scope, as (code, message).
async fn refusal(store: &Store, who: &Caller, scope: &str) -> (ErrorCode, String) {
    let e: ToolError = call(
        store,
        who,
        "remember",
        json!({"content": format!("A note for {scope}."), "scope": scope, "kind": "fact"}),
    )
    .await
    .expect_err("the write is refused");
    (e.code, e.message)
}

fn ids(out: &Value) -> Vec<String> {
    out["memories"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| m["id"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// `admin` (not the owner) cannot add `member` directly, whether the
/// address has an account or not; `owner`, admin of its own team, can.
async fn refused_then_owner(
    store: &Store,
    admin: &Caller,
    owner: &Caller,
    member: &zm_store::User,
    member_caller: &Caller,
    l: &str,
) {
    let slug = team(store, admin, l, "direct").await;
    for email in [
        member.email.clone(),
        format!("{}@example.com", unique("nobody")),
    ] {
        let e = err(
            store
                .add_team_member(
                    admin,
                    &slug,
                    AddMemberInput {
                        email,
                        role: TeamRole::Writer,
                    },
                )
                .await,
            ErrorCode::Forbidden,
            l,
            "a direct add by an admin who is not the owner",
        );
        assert!(
            e.message.contains("Invite the address"),
            "[{l}] {}",
            e.message
        );
    }
    assert!(
        store
            .list_teams(member_caller)
            .await
            .unwrap()
            .teams
            .iter()
            .all(|t| t.slug != slug),
        "[{l}] not a member"
    );
    let own = team(store, owner, l, "ownerteam").await;
    ok(
        store
            .add_team_member(
                owner,
                &own,
                AddMemberInput {
                    email: member.email.clone(),
                    role: TeamRole::Reader,
                },
            )
            .await,
        l,
        "the owner adds directly",
    );
    assert!(
        store
            .list_teams(member_caller)
            .await
            .unwrap()
            .teams
            .iter()
            .any(|t| t.slug == own),
        "[{l}] a member of the owner's team"
    );
    // Adding a member again sets their role: made admin, they invite a
    // second address of theirs; made writer the same way, that
    // invitation goes, as with any demotion.
    let direct = |role: TeamRole| AddMemberInput {
        email: member.email.clone(),
        role,
    };
    ok(
        store
            .add_team_member(owner, &own, direct(TeamRole::Admin))
            .await,
        l,
        "made admin",
    );
    let (alt_user, alt) = user(store, "direct-alt").await;
    let back_door = ok(
        store
            .invite_team_member(
                member_caller,
                &own,
                input!(
                    InviteInput,
                    &json!({"email": alt_user.email, "role": "admin"})
                ),
            )
            .await,
        l,
        "a second address invited",
    );
    ok(
        store
            .add_team_member(owner, &own, direct(TeamRole::Writer))
            .await,
        l,
        "made writer",
    );
    err(
        store.accept_invitation(&alt, &back_door.id).await,
        ErrorCode::Conflict,
        l,
        "withdrawn with the demotion",
    );
    // While the sender's account is disabled, what they sent admits
    // nobody (a disabled admin counts as none); enabled again, it does.
    ok(
        store
            .add_team_member(owner, &own, direct(TeamRole::Admin))
            .await,
        l,
        "made admin again",
    );
    let (third_user, third) = user(store, "direct-third").await;
    let sent = ok(
        store
            .invite_team_member(
                member_caller,
                &own,
                input!(
                    InviteInput,
                    &json!({"email": third_user.email, "role": "admin"})
                ),
            )
            .await,
        l,
        "a third address invited",
    );
    store.disable_user(&member.id).await.unwrap();
    let e = err(
        store.accept_invitation(&third, &sent.id).await,
        ErrorCode::Conflict,
        l,
        "sent by a disabled admin",
    );
    assert!(e.message.contains("disabled"), "[{l}] {}", e.message);
    store.enable_user(&member.id).await.unwrap();
    ok(
        store.accept_invitation(&third, &sent.id).await,
        l,
        "accepted once its sender is enabled again",
    );
}

backend_tests! {
    /// Create, list, show, refuse a taken slug, delete: the memories are
    /// readable by nobody at once, exportable by the admins of that moment
    /// for 30 days, then erased — and the slug is free again.
    async fn team_lifecycle(store: Store, l: &str) {
        let (_, a) = user(&store, "tl-a").await;
        let (ub, b) = user(&store, "tl-b").await;
        let (_, outsider) = user(&store, "tl-x").await;
        let slug = team(&store, &a, l, "life").await;
        let scope = format!("team.{slug}");
        let taken = store
            .create_team(&outsider, input!(CreateTeamInput, &json!({"slug": slug})))
            .await;
        err(taken, ErrorCode::Conflict, l, "a taken slug");
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let listed = ok(store.list_teams(&b).await, l, "list");
        assert_eq!(listed.teams.len(), 1, "[{l}] {listed:?}");
        assert_eq!((listed.teams[0].role, listed.teams[0].members), (TeamRole::Writer, 2), "[{l}]");
        err(store.get_team(&outsider, &slug).await, ErrorCode::NotFound, l, "outsider show");
        err(store.get_team(&outsider, "nosuchteamatall").await, ErrorCode::NotFound, l, "missing show");
        let shown = ok(store.get_team(&b, &slug).await, l, "show");
        assert_eq!(shown.members.len(), 2, "[{l}]");
        assert!(shown.invitations.is_empty(), "[{l}] a writer sees no invitations");

        let m = mem(&store, &b, l, json!({"content": "Deploys go through the staging gate.", "scope": scope, "kind": "convention"})).await;
        let mine = mem(&store, &b, l, json!({"content": "Deploy note kept personally.", "scope": "personal", "kind": "fact"})).await;
        assert!(recall_ids(&store, &a, l, json!({"query": "staging gate", "scopes": ["*"]})).await.contains(&m), "[{l}] the admin reads the writer's team memory");

        err(store.delete_team(&b, &slug).await, ErrorCode::Forbidden, l, "a writer deletes");
        let deleted = ok(store.delete_team(&a, &slug).await, l, "delete");
        assert_eq!(deleted.memories, 1, "[{l}]");
        for who in [&a, &b] {
            let seen = recall_ids(&store, who, l, json!({"query": "staging gate deploys", "scopes": ["*"]})).await;
            assert!(!seen.contains(&m), "[{l}] a deleted team's memory is readable by nobody");
            err(call(&store, who, "forget", json!({"memory_id": m})).await, ErrorCode::NotFound, l, "forget a retired memory");
        }
        assert!(recall_ids(&store, &b, l, json!({"query": "deploy note", "scopes": ["*"]})).await.contains(&mine), "[{l}] personal memories are untouched");
        err(store.get_team(&a, &slug).await, ErrorCode::NotFound, l, "show a deleted team");
        assert!(ok(store.list_teams(&a).await, l, "list").teams.is_empty(), "[{l}]");
        let export = ok(store.export_team(&a, &slug).await, l, "export by the admin");
        assert_eq!(export.items.len(), 1, "[{l}]");
        assert_eq!(export.items[0].id.as_str(), m, "[{l}]");
        err(store.export_team(&b, &slug).await, ErrorCode::NotFound, l, "export by a writer");
        err(store.export_team(&outsider, &slug).await, ErrorCode::NotFound, l, "export by an outsider");
        err(store.create_team(&outsider, input!(CreateTeamInput, &json!({"slug": slug}))).await, ErrorCode::Conflict, l, "the slug is held for 30 days");

        assert_eq!(ok(store.purge_deleted_teams().await, l, "early purge"), 0, "[{l}] nothing is due yet");
        store.clock().advance_ms(31 * DAY_MS);
        assert!(ok(store.purge_deleted_teams().await, l, "purge") >= 1, "[{l}]");
        err(store.export_team(&a, &slug).await, ErrorCode::NotFound, l, "export after the purge");
        let again = ok(store.create_team(&outsider, input!(CreateTeamInput, &json!({"slug": slug}))).await, l, "the slug is free");
        assert_eq!(again.members.len(), 1, "[{l}]");
        let old = recall_ids(&store, &outsider, l, json!({"query": "staging gate deploys", "scopes": ["*"]})).await;
        assert!(!old.contains(&m), "[{l}] a new team of the same name sees nothing of the old one");
        assert!(!store.list_users().await.unwrap().iter().any(|u| u.email.ends_with("@teams.invalid")), "[{l}] stewards are not listed as users");
    }

    /// A team of more memories than one purge transaction takes is erased
    /// whole, a chunk at a time, and its slug is free again.
    async fn a_large_team_is_purged_in_chunks(store: Store, l: &str) {
        let (_, a) = user(&store, "pc-a").await;
        let slug = team(&store, &a, l, "purgechunks").await;
        let n = usize::try_from(zm_store::teams::PURGE_CHUNK).unwrap() + 1;
        for i in 0..n {
            mem(&store, &a, l, json!({"content": format!("Chunked team fact number {i} about shard {}.", i * 7919 % 1000), "scope": format!("team.{slug}"), "kind": "fact"})).await;
        }
        let deleted = ok(store.delete_team(&a, &slug).await, l, "delete");
        assert_eq!(deleted.memories, u64::try_from(n).unwrap(), "[{l}]");
        store.clock().advance_ms(31 * DAY_MS);
        assert!(ok(store.purge_deleted_teams().await, l, "purge") >= 1, "[{l}]");
        err(store.export_team(&a, &slug).await, ErrorCode::NotFound, l, "export after the purge");
        ok(store.create_team(&a, input!(CreateTeamInput, &json!({"slug": slug}))).await, l, "the slug is free");
    }

    /// A memory the team's superseded keeps its state when the team is
    /// purged, but no longer names a successor that is gone.
    async fn a_purged_teams_successor_is_no_longer_named(store: Store, l: &str) {
        let (_, a) = user(&store, "ps-a").await;
        let slug = team(&store, &a, l, "purgesuccessor").await;
        let old = mem(&store, &a, l, json!({"content": "Deploys need two approvals.", "scope": "personal", "kind": "convention"})).await;
        let new = mem(&store, &a, l, json!({"content": "Deploys need one approval from the on-call engineer.", "scope": format!("team.{slug}"), "kind": "convention", "links": [{"dst": old, "type": "supersedes"}]})).await;
        let old_id = zm_contracts::MemoryId::parse(&old).unwrap();
        let before = ok(store.get_memory(&a, &old_id).await, l, "get before");
        assert_eq!(before.superseded_by.as_ref().map(|m| m.as_str().to_string()), Some(new), "[{l}]");
        ok(store.delete_team(&a, &slug).await, l, "delete");
        store.clock().advance_ms(31 * DAY_MS);
        assert!(ok(store.purge_deleted_teams().await, l, "purge") >= 1, "[{l}]");
        let after = ok(store.get_memory(&a, &old_id).await, l, "get after");
        assert_eq!(after.superseded_by, None, "[{l}] names a purged memory");
        assert!(after.invalidated_at.is_some(), "[{l}] still retired");
    }

    /// Every role against every write into the team's scope, and what each
    /// reads: writer and admin write; a reader's write is `forbidden`; a
    /// non-member's, a former member's and another team's member's are
    /// refused exactly like a scope that does not exist.
    async fn roles_against_writes(store: Store, l: &str) {
        let (_, admin) = user(&store, "rw-admin").await;
        let (uw, writer) = user(&store, "rw-writer").await;
        let (ur, reader) = user(&store, "rw-reader").await;
        let (uf, former) = user(&store, "rw-former").await;
        let (_, outsider) = user(&store, "rw-out").await;
        let (_, other_admin) = user(&store, "rw-other").await;
        let slug = team(&store, &admin, l, "roles").await;
        let scope = format!("team.{slug}");
        let _other = team(&store, &other_admin, l, "otherteam").await;
        add(&store, &admin, l, &slug, &uw.email, TeamRole::Writer).await;
        add(&store, &admin, l, &slug, &ur.email, TeamRole::Reader).await;
        add(&store, &admin, l, &slug, &uf.email, TeamRole::Writer).await;
        let uf_id = uf.id.clone();
        ok(store.remove_team_member(&admin, &slug, &uf_id).await, l, "remove former");

        let by_admin = mem(&store, &admin, l, json!({"content": "Every service exposes a healthz endpoint on port 8081.", "scope": scope, "kind": "convention"})).await;
        let by_writer = mem(&store, &writer, l, json!({"content": "Feature flags live in the flagd sidecar.", "scope": scope, "kind": "fact"})).await;
        let missing = refusal(&store, &outsider, "team.nosuchteamever").await;
        assert_eq!(missing.0, ErrorCode::Forbidden, "[{l}]");
        let (code, _) = refusal(&store, &reader, &scope).await;
        assert_eq!(code, ErrorCode::Forbidden, "[{l}] a reader writes");
        for (who, name) in [(&outsider, "non-member"), (&former, "former member"), (&other_admin, "another team's admin")] {
            assert_eq!(refusal(&store, who, &scope).await, missing, "[{l}] a {name}'s write reads like a missing scope");
        }
        // share and move need the writer role too.
        let personal = mem(&store, &reader, l, json!({"content": "Reader's own memo about flagd.", "scope": "personal", "kind": "fact"})).await;
        err(call(&store, &reader, "share", json!({"memory_id": personal, "scope": scope})).await, ErrorCode::Forbidden, l, "reader shares");
        err(call(&store, &reader, "move_memories", json!({"memory_ids": [personal], "scope": scope})).await, ErrorCode::Forbidden, l, "reader moves");
        // A link shows in everyone's recall who reads both ends: a reader
        // links none of the team's memories, not even to one of their own.
        for (src, dst, what) in [(&by_admin, &by_writer, "two team memories"), (&personal, &by_admin, "their own to a team memory")] {
            for ty in ["relates_to", "supersedes", "contradicts"] {
                let out = call(&store, &reader, "link", json!({"src": src, "dst": dst, "type": ty})).await;
                err(out, ErrorCode::Forbidden, l, &format!("a reader links {what} ({ty})"));
            }
        }
        // Nor through `remember`'s links, and the refused write leaves nothing.
        let linked_write = call(&store, &reader, "remember", json!({"content": "Zqlinkedwrite: the reader's note on healthz ports.", "scope": "personal", "kind": "fact", "links": [{"dst": by_admin, "type": "relates_to"}]})).await;
        err(linked_write, ErrorCode::Forbidden, l, "a reader's remember linking a team memory");
        assert!(recall_ids(&store, &reader, l, json!({"query": "zqlinkedwrite", "scopes": ["personal"]})).await.is_empty(), "[{l}] nothing written");
        let reader_note = mem(&store, &reader, l, json!({"content": "Reader's second memo: flagd reloads on SIGHUP.", "scope": "personal", "kind": "fact"})).await;
        ok(call(&store, &reader, "link", json!({"src": personal, "dst": reader_note, "type": "relates_to"})).await, l, "a reader links their own memories");
        let linked = ok(call(&store, &writer, "link", json!({"src": by_writer, "dst": by_admin, "type": "relates_to"})).await, l, "a writer links team memories");
        assert_eq!(linked["created"], json!(true), "[{l}]");
        let w_personal = mem(&store, &writer, l, json!({"content": "Writer's memo: the flagd sidecar restarts nightly.", "scope": "personal", "kind": "fact"})).await;
        ok(call(&store, &writer, "share", json!({"memory_id": w_personal, "scope": scope})).await, l, "writer shares");
        let o_personal = mem(&store, &outsider, l, json!({"content": "Outsider memo.", "scope": "personal", "kind": "fact"})).await;
        err(call(&store, &outsider, "share", json!({"memory_id": o_personal, "scope": scope})).await, ErrorCode::Forbidden, l, "outsider shares");
        // A team's own project: a writer creates it, every member reads it.
        let sub = format!("{scope}.web");
        let in_sub = mem(&store, &writer, l, json!({"content": "The web app builds with vite.", "scope": sub, "kind": "fact"})).await;
        assert_eq!(refusal(&store, &outsider, &format!("{scope}.api")).await, missing, "[{l}] an outsider cannot create a team project");
        let (code, _) = refusal(&store, &reader, &format!("{scope}.api")).await;
        assert_eq!(code, ErrorCode::Forbidden, "[{l}]");

        // Reads: members see the team's memories through `*`, labelled
        // with the team; nobody else sees them.
        for who in [&admin, &writer, &reader] {
            let out = ok(call(&store, who, "recall", json!({"query": "healthz flagd sidecar vite", "scopes": ["*"]})).await, l, "member recall");
            let seen = ids(&out);
            for m in [&by_admin, &by_writer, &in_sub, &w_personal] {
                assert!(seen.contains(m), "[{l}] a member reads {m}: {seen:?}");
            }
            for hit in out["memories"].as_array().unwrap() {
                if hit["scope"].as_str().is_some_and(|s| s.starts_with("team.")) {
                    assert_eq!(hit["team"], json!(slug), "[{l}] {hit}");
                }
            }
        }
        for (who, name) in [(&outsider, "outsider"), (&former, "former"), (&other_admin, "other team")] {
            let seen = recall_ids(&store, who, l, json!({"query": "healthz flagd sidecar vite", "scopes": ["*"]})).await;
            for m in [&by_admin, &by_writer, &in_sub, &w_personal] {
                assert!(!seen.contains(m), "[{l}] the {name} reads {m}");
            }
            err(store.get_memory(who, &zm_contracts::MemoryId::parse(&by_admin).unwrap()).await, ErrorCode::NotFound, l, name);
        }
        // A reader may not promote a team rule; a writer may.
        err(call(&store, &reader, "promote_rule", json!({"memory_id": personal, "applies_scope": scope})).await, ErrorCode::Forbidden, l, "reader promotes");
        ok(call(&store, &writer, "promote_rule", json!({"memory_id": by_writer, "applies_scope": scope})).await, l, "writer promotes");
    }

    /// A lowered role and a removal hold from the very next call, and what
    /// the removed member wrote stays with the team, not with them.
    async fn removal_and_demotion_take_effect_at_once(store: Store, l: &str) {
        let (_, a) = user(&store, "rm-a").await;
        let (ub, b) = user(&store, "rm-b").await;
        let slug = team(&store, &a, l, "removal").await;
        let scope = format!("team.{slug}");
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        // An attached session, as an open MCP connection carries it.
        let b_session = attached(&with_session(&b, "ses_removal"), &scope);
        let written = mem(&store, &b_session, l, json!({"content": "Rollbacks use the blue-green switch.", "kind": "convention", "scope": scope})).await;
        // A rule B promotes for the team from a personal memory of B's.
        let own = mem(&store, &b, l, json!({"content": "Every migration ships with its undo script.", "kind": "convention", "scope": "personal"})).await;
        ok(call(&store, &b, "promote_rule", json!({"memory_id": own, "applies_scope": scope})).await, l, "B's rule for the team");
        let rules_of = |who: &Caller| {
            let (store, who) = (&store, who.clone());
            async move {
                let brief = ok(call(store, &who, "build_context", json!({"topic": "migrations", "briefing": true, "scopes": ["*"]})).await, l, "briefing");
                brief["rules"].to_string()
            }
        };
        assert!(rules_of(&a).await.contains("undo script"), "[{l}] the team gets B's rule");
        // And one from a memory B wrote in a project of the team's: that
        // memory stays with the team, and so does its rule.
        let in_team = mem(&store, &b, l, json!({"content": "Every migration is reviewed by the data owner.", "kind": "convention", "scope": format!("{scope}.web")})).await;
        ok(call(&store, &b, "promote_rule", json!({"memory_id": in_team, "applies_scope": scope})).await, l, "B's rule from a team project");
        ok(store.set_team_role(&a, &slug, &ub.id, SetRoleInput { role: TeamRole::Reader }).await, l, "demote");
        let (code, _) = refusal(&store, &b_session, &scope).await;
        assert_eq!(code, ErrorCode::Forbidden, "[{l}] the demoted writer's next write");
        // Nor a rule for the team from the memory B wrote there.
        err(call(&store, &b, "promote_rule", json!({"memory_id": written})).await, ErrorCode::Forbidden, l, "a demoted writer's rule for the team");
        assert!(recall_ids(&store, &b_session, l, json!({"query": "blue-green rollbacks", "scopes": ["*"]})).await.contains(&written), "[{l}] a reader still reads");
        ok(store.remove_team_member(&a, &slug, &ub.id).await, l, "remove");
        let rules = rules_of(&a).await;
        assert!(!rules.contains("undo script"), "[{l}] a removed member's personal rule no longer reaches the team: {rules}");
        assert!(rules.contains("data owner"), "[{l}] the rule on a memory the team keeps stays: {rules}");
        let seen = recall_ids(&store, &b_session, l, json!({"query": "blue-green rollbacks"})).await;
        assert!(seen.is_empty(), "[{l}] the removed member reads nothing of the team: {seen:?}");
        err(store.get_memory(&b, &zm_contracts::MemoryId::parse(&written).unwrap()).await, ErrorCode::NotFound, l, "their own team memory");
        err(call(&store, &b, "forget", json!({"memory_id": written})).await, ErrorCode::NotFound, l, "forget it");
        let brief = ok(call(&store, &b_session, "build_context", json!({"topic": "rollbacks", "briefing": true})).await, l, "briefing");
        assert!(!brief.to_string().contains("blue-green"), "[{l}] nothing in the removed member's briefing: {brief}");
        assert!(recall_ids(&store, &a, l, json!({"query": "blue-green rollbacks", "scopes": ["*"]})).await.contains(&written), "[{l}] the team keeps it");
        err(store.get_team(&b, &slug).await, ErrorCode::NotFound, l, "show after removal");
        // Leaving: a member removes themself; the last admin cannot.
        err(store.remove_team_member(&a, &slug, &a.user_id).await, ErrorCode::Conflict, l, "the last admin leaves");
    }

    /// A leaver's own (user-layer) rule on a memory they moved into a
    /// teammate's shared project stays theirs, revoked, when the memory
    /// goes to the project's owner: it never reaches the heir's
    /// instructions. A writer demoted to reader pins no team rule, and
    /// still revokes their own.
    async fn a_leavers_own_rule_stays_theirs_and_a_reader_pins_no_team_rule(store: Store, l: &str) {
        let (_, b) = user(&store, "own-rule-b").await;
        let (ua, a) = user(&store, "own-rule-a").await;
        let slug = team(&store, &b, l, "ownrule").await;
        add(&store, &b, l, &slug, &ua.email, TeamRole::Writer).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &b, l, json!({"content": "The ledger runs nightly.", "kind": "fact", "project_hint": remote})).await;
        let project = project_of(&store, &b, l, &remote).await;
        ok(store.share_project_with_team(&b, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share");
        let text = format!("Always sign my commits ({}).", unique("t"));
        let own = mem(&store, &a, l, json!({"content": text, "kind": "preference", "scope": "personal"})).await;
        ok(call(&store, &a, "promote_rule", json!({"memory_id": own})).await, l, "a user-layer rule");
        let moved = ok(call(&store, &a, "move_memories", json!({"memory_ids": [own], "scope": project})).await, l, "move into the shared project");
        assert_eq!(moved["moved"].as_array().map(Vec::len), Some(1), "[{l}] {moved}");
        ok(store.remove_team_member(&b, &slug, &a.user_id).await, l, "remove A");
        let heir_rules: Vec<String> = store.user_rules(&b).await.unwrap().into_iter().map(|r| r.text).collect();
        assert!(!heir_rules.contains(&text), "[{l}] A's own rule reaches B: {heir_rules:?}");
        let brief = ok(call(&store, &b, "build_context", json!({"topic": "commits", "briefing": true, "project_hint": remote})).await, l, "B's briefing");
        assert!(!brief["rules"].to_string().contains(&text), "[{l}] nor B's briefing's rules (the memory is B's now): {brief}");
        let listed = store.list_rules(&a).await.unwrap();
        let kept = listed.iter().find(|r| r.memory_id.as_str() == own).expect("A keeps the rule's row");
        assert_eq!(kept.status, zm_store::rules::RuleState::Revoked, "[{l}] {listed:?}");
        // B's own rule following its memory onto the one A left (a write
        // of the same text that supersedes B's, absorbed into A's old
        // memory): it follows; A's revoked row there gives way, it no
        // longer revokes B's rule.
        let older = mem(&store, &b, l, json!({"content": format!("Sign the commits, older wording ({}).", unique("w")), "kind": "preference", "scope": project})).await;
        ok(call(&store, &b, "promote_rule", json!({"memory_id": older})).await, l, "B's rule");
        let absorbed = ok(call(&store, &b, "remember", json!({"content": text, "kind": "preference", "scope": project, "links": [{"dst": older, "type": "supersedes"}]})).await, l, "B's new wording");
        assert_eq!(absorbed["memory_id"], own.as_str(), "[{l}] absorbed into the memory A left: {absorbed}");
        let b_rules = store.list_rules(&b).await.unwrap();
        let followed = b_rules.iter().find(|r| r.memory_id.as_str() == own).unwrap_or_else(|| panic!("[{l}] B's rule did not follow: {b_rules:?}"));
        assert_eq!(followed.status, zm_store::rules::RuleState::Promoted, "[{l}] {b_rules:?}");

        // Pinning a team rule takes the writer role, as promoting it did.
        let (uw, w) = user(&store, "own-rule-w").await;
        add(&store, &b, l, &slug, &uw.email, TeamRole::Writer).await;
        let rule = mem(&store, &w, l, json!({"content": "Every migration is reviewed twice.", "kind": "convention", "scope": format!("team.{slug}")})).await;
        ok(call(&store, &w, "promote_rule", json!({"memory_id": rule})).await, l, "a team rule");
        ok(store.set_team_role(&b, &slug, &uw.id, input!(SetRoleInput, &json!({"role": "reader"}))).await, l, "demote");
        err(store.pin_rule(&w, &rule, true).await, ErrorCode::Forbidden, l, "a reader pins a team rule");
        ok(store.revoke_rule(&w, &rule, "not mine to set any more").await, l, "a reader revokes their own");
    }

    /// A project's rules reach the briefings pinned to it (or naming it in
    /// `scopes`), not every briefing that reads it: a project shared with a
    /// team, or a team's project, is in its members' default read set, yet
    /// its rules are for its own repository. The team's own rules reach
    /// every member's briefing.
    async fn a_projects_rules_stay_in_its_own_briefings(store: Store, l: &str) {
        let (_, a) = user(&store, "prules-a").await;
        let (ub, b) = user(&store, "prules-b").await;
        let slug = team(&store, &a, l, "prules").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let (p, q) = (format!("git@github.com:acme/{}.git", unique("p")), format!("git@github.com:acme/{}.git", unique("q")));
        mem(&store, &a, l, json!({"content": "P builds with cargo.", "kind": "fact", "project_hint": p})).await;
        let q_note = mem(&store, &a, l, json!({"content": "Deploy Q only through make deploy-q.", "kind": "convention", "project_hint": q})).await;
        ok(call(&store, &a, "promote_rule", json!({"memory_id": q_note})).await, l, "Q's rule");
        let q_scope = project_of(&store, &a, l, &q).await;
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": q_scope}))).await, l, "share Q");
        let web = mem(&store, &b, l, json!({"content": "Web pages ship with their own stylesheet.", "kind": "convention", "scope": format!("team.{slug}.web")})).await;
        ok(call(&store, &b, "promote_rule", json!({"memory_id": web})).await, l, "team.web's rule");
        let root = mem(&store, &b, l, json!({"content": "Every change gets a second reviewer.", "kind": "convention", "scope": format!("team.{slug}")})).await;
        ok(call(&store, &b, "promote_rule", json!({"memory_id": root})).await, l, "the team's rule");
        let rules = |who: &Caller, args: Value| {
            let (store, who) = (&store, who.clone());
            async move {
                let mut args = args;
                args["topic"] = json!("deploys");
                args["briefing"] = json!(true);
                let brief = ok(call(store, &who, "build_context", args).await, l, "briefing");
                brief["rules"].to_string()
            }
        };
        for (who, name) in [(&a, "A"), (&b, "B")] {
            let in_p = rules(who, json!({"project_hint": p})).await;
            if name == "A" {
                assert!(!in_p.contains("deploy-q"), "[{l}] {name}: Q's rule in a briefing pinned to P: {in_p}");
            }
            assert!(!in_p.contains("stylesheet"), "[{l}] {name}: team.web's rule pinned to P: {in_p}");
            assert!(in_p.contains("second reviewer"), "[{l}] {name}: the team's own rule everywhere: {in_p}");
            let unpinned = rules(who, json!({})).await;
            assert!(!unpinned.contains("deploy-q") && !unpinned.contains("stylesheet"), "[{l}] {name}: no project's rule unpinned: {unpinned}");
            assert!(unpinned.contains("second reviewer"), "[{l}] {name}: {unpinned}");
            let in_q = rules(who, json!({"project_hint": q})).await;
            assert!(in_q.contains("deploy-q") && !in_q.contains("stylesheet"), "[{l}] {name}: pinned to Q, Q's rule: {in_q}");
            let named = rules(who, json!({"scopes": [format!("team.{slug}.web")]})).await;
            assert!(named.contains("stylesheet") && !named.contains("deploy-q"), "[{l}] {name}: scopes naming team.web: {named}");
            // A briefing pins its hinted project whatever it reads: its
            // rules come with the thread.
            let hinted = rules(who, json!({"scopes": ["personal"], "project_hint": q})).await;
            assert!(hinted.contains("deploy-q") && !hinted.contains("stylesheet"), "[{l}] {name}: scopes and a hint: {hinted}");
        }
        // What `zm://rules` serves follows the briefing: the attached
        // project's rules only.
        let served: Vec<String> = store.rules_resource(&attached(&a, &project_of(&store, &a, l, &p).await)).await.unwrap().into_iter().map(|r| r.text).collect();
        assert!(!served.iter().any(|t| t.contains("deploy-q") || t.contains("stylesheet")), "[{l}] {served:?}");
        assert!(served.iter().any(|t| t.contains("second reviewer")), "[{l}] {served:?}");
    }

    /// A teammate's shared project with a long name still gets a thread
    /// in a member's briefing (a 128-character token held no more than
    /// 67 bytes of a scope not the caller's own), and a scope-less write
    /// echoing it lands there.
    async fn a_long_shared_project_gets_a_thread(store: Store, l: &str) {
        let (_, a) = user(&store, "longthr-a").await;
        let (ub, b) = user(&store, "longthr-b").await;
        let slug = team(&store, &a, l, "longthr").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let remote = format!("git@github.com:acme/customer-analytics-dashboard-{}.git", unique("v2"));
        mem(&store, &a, l, json!({"content": "The dashboard reads the warehouse nightly.", "kind": "fact", "project_hint": remote})).await;
        let project = project_of(&store, &a, l, &remote).await;
        assert!(project.len() > 67, "[{l}] {project}");
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share");
        let brief = ok(call(&store, &b, "build_context", json!({"topic": "warehouse", "briefing": true, "project_hint": remote})).await, l, "B's briefing");
        assert_eq!(brief["project_scope"], json!(project), "[{l}] {brief}");
        let thread = brief["session"]["thread"].as_str().unwrap_or_else(|| panic!("[{l}] no thread: {brief}")).to_string();
        let id = mem(&store, &b, l, json!({"content": "Warehouse loads finish by 04:00.", "kind": "fact", "thread": thread})).await;
        let got = ok(store.get_memory(&b, &zm_contracts::MemoryId::parse(&id).unwrap()).await, l, "get");
        assert_eq!(got.scope, project, "[{l}] the write followed the thread");
        // A hit in the shared project names the team to the member who
        // reads it through the team, not to its owner.
        for (who, team) in [(&b, json!(slug)), (&a, Value::Null)] {
            let out = ok(call(&store, who, "recall", json!({"query": "warehouse loads", "scopes": ["*"]})).await, l, "recall");
            let hit = out["memories"].as_array().and_then(|m| m.iter().find(|h| h["id"] == json!(id))).unwrap_or_else(|| panic!("[{l}] {out}"));
            assert_eq!(hit["team"], team, "[{l}] {hit}");
        }
    }

    /// An imported memory moved into a team's project, purged with the
    /// deleted team, is imported again by the same item: the ledger no
    /// longer holds back what exists nowhere.
    async fn an_import_purged_with_its_team_comes_back(store: Store, l: &str) {
        let (_, a) = user(&store, "reimport-a").await;
        let slug = team(&store, &a, l, "reimport").await;
        let item = json!({"content": "The billing cron runs at 04:00 UTC.", "kind": "fact", "target": "personal", "source_path": "notes.md", "source_hash": unique("h")});
        let first = ok(call(&store, &a, "import_memory", item.clone()).await, l, "import");
        let id = first["memory_id"].as_str().unwrap().to_string();
        ok(call(&store, &a, "move_memories", json!({"memory_ids": [id], "scope": format!("team.{slug}.ops")})).await, l, "move into the team");
        let again = ok(call(&store, &a, "import_memory", item.clone()).await, l, "import again");
        assert_eq!(again["skipped"], true, "[{l}] still there: {again}");
        ok(store.delete_team(&a, &slug).await, l, "delete the team");
        store.clock().advance_ms(31 * DAY_MS);
        assert!(ok(store.purge_deleted_teams().await, l, "purge") >= 1, "[{l}]");
        let back = ok(call(&store, &a, "import_memory", item).await, l, "import after the purge");
        assert_eq!(back["skipped"], false, "[{l}] {back}");
        assert_ne!(back["memory_id"], json!(id), "[{l}] a new memory: {back}");
    }

    /// A memory shared into a team brings its entities, not its author's
    /// personal graph: a teammate's briefing on it shows no edge the
    /// author drew between those entities.
    async fn a_shared_memory_shows_teammates_none_of_its_authors_edges(store: Store, l: &str) {
        let (_, a) = user(&store, "edges-a").await;
        let (ub, b) = user(&store, "edges-b").await;
        let slug = team(&store, &a, l, "edges").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let tag = unique("e").replace('-', "");
        let note = mem(&store, &a, l, json!({"content": format!("Billing calls VendorX for refunds ({tag})."), "kind": "fact", "scope": "personal", "entities": [{"name": "Billing"}, {"name": "VendorX"}]})).await;
        ok(call(&store, &a, "link", json!({"src": "Billing", "dst": "VendorX", "type": "depends_on"})).await, l, "a private edge");
        ok(call(&store, &a, "share", json!({"memory_id": note, "scope": format!("team.{slug}")})).await, l, "share");
        let topic = json!({"topic": format!("billing vendorx refunds {tag}"), "scopes": ["*"]});
        let own = ok(call(&store, &a, "build_context", topic.clone()).await, l, "A's briefing");
        assert_eq!(own["edges"].as_array().map(Vec::len), Some(1), "[{l}] A sees her edge: {own}");
        let mate = ok(call(&store, &b, "build_context", topic).await, l, "B's briefing");
        assert!(mate.to_string().contains(&note), "[{l}] B reads the shared note: {mate}");
        assert_eq!(mate["edges"], json!([]), "[{l}] but not A's edge: {mate}");
    }

    /// A teammate's entity name lasts as long as a memory the reader can
    /// see names it: forgotten, the note takes its names with it.
    async fn a_forgotten_team_note_takes_its_names_along(store: Store, l: &str) {
        let (_, a) = user(&store, "names-a").await;
        let (ub, b) = user(&store, "names-b").await;
        let slug = team(&store, &a, l, "names").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let name = format!("Acme Layoffs {}", unique("n").replace('-', ""));
        let note = mem(&store, &b, l, json!({"content": "A note that names a sensitive subject.", "kind": "fact", "scope": format!("team.{slug}"), "entities": [{"name": name}]})).await;
        let listed = |who: &Caller| {
            let (store, who) = (&store, who.clone());
            async move {
                ok(call(store, &who, "entities", json!({"query": "acme layoffs"})).await, l, "entities").to_string()
            }
        };
        assert!(listed(&a).await.contains(&name), "[{l}] A sees the name while the note stands");
        let on_its_page = |who: &Caller| {
            let (store, who, note, name) = (&store, who.clone(), note.clone(), &name);
            async move {
                let page = store.memory_context(&who, &note).await.unwrap();
                page.entities.iter().any(|(n, _)| n == name)
            }
        };
        assert!(on_its_page(&a).await, "[{l}] the note's page names it for A while it stands");
        // A second note names it too: the first one forgotten, the name
        // stands for A, on the first note's page as well, as `entities`
        // lists it.
        let second = mem(&store, &b, l, json!({"content": "Another note on the same subject.", "kind": "fact", "scope": format!("team.{slug}"), "entities": [{"name": name}]})).await;
        ok(call(&store, &b, "forget", json!({"memory_id": note})).await, l, "forget");
        assert!(listed(&a).await.contains(&name), "[{l}] still named by the second note for A");
        assert!(on_its_page(&a).await, "[{l}] and on the first note's page, as `entities` lists it");
        ok(call(&store, &b, "forget", json!({"memory_id": second})).await, l, "forget the second");
        assert!(!listed(&a).await.contains(&name), "[{l}] gone with the note for A");
        assert!(listed(&b).await.contains(&name), "[{l}] B's own entity stays B's");
        assert!(!on_its_page(&a).await, "[{l}] the forgotten note's page names it no more for A");
        assert!(on_its_page(&b).await, "[{l}] B's page of their own note still does");
    }

    /// A pair conflict half handed over (its other memory went to the team
    /// when its author left) names nothing the leaver can open: their
    /// recall shows no dispute with a memory that is no longer theirs.
    async fn a_conflict_half_handed_over_names_nothing_foreign(store: Store, l: &str) {
        let (_, admin) = user(&store, "half-admin").await;
        let (ua, a) = user(&store, "half-a").await;
        let slug = team(&store, &admin, l, "half").await;
        add(&store, &admin, l, &slug, &ua.email, TeamRole::Writer).await;
        let tag = unique("q").replace('-', "");
        let mine = mem(&store, &a, l, json!({"content": format!("The release train leaves on Tuesdays ({tag})."), "scope": "personal", "kind": "fact"})).await;
        let theirs = mem(&store, &a, l, json!({"content": format!("The release train leaves on Thursdays ({tag})."), "scope": format!("team.{slug}"), "kind": "fact"})).await;
        ok(call(&store, &a, "link", json!({"src": mine, "dst": theirs, "type": "contradicts"})).await, l, "contradicts");
        let hit = |out: &Value| out["memories"].as_array().unwrap().iter().find(|m| m["id"] == json!(mine)).cloned();
        let before = ok(call(&store, &a, "recall", json!({"query": tag, "scopes": ["personal"]})).await, l, "recall before");
        assert_eq!(hit(&before).map(|m| m["disputed"].clone()), Some(json!(true)), "[{l}] {before}");
        ok(store.remove_team_member(&admin, &slug, &a.user_id).await, l, "remove A");
        let after = ok(call(&store, &a, "recall", json!({"query": tag, "scopes": ["personal"]})).await, l, "recall after");
        let m = hit(&after).expect("A's own memory is still found");
        assert!(!m.to_string().contains(&theirs), "[{l}] A's hit names the handed-over memory: {m}");
        assert_eq!(m["disputed"], json!(false), "[{l}] {m}");
        // The split pair was dismissed by the hand-over: pending for nobody.
        let listed = ok(call(&store, &a, "list_conflicts", json!({})).await, l, "A's conflicts");
        assert!(!listed.to_string().contains(&theirs), "[{l}] {listed}");
    }

    /// A private memory in a project a team reads (an import stays
    /// private) is not promoted to a rule of the project from its own
    /// text: every member would receive it. With words of the writer's
    /// own (`rule_text`) it is, and the members receive those.
    async fn a_private_memorys_text_is_no_rule_for_the_team(store: Store, l: &str) {
        let (_, a) = user(&store, "privrule-a").await;
        let (ub, b) = user(&store, "privrule-b").await;
        let slug = team(&store, &a, l, "privrule").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &a, l, json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": remote})).await;
        let project = project_of(&store, &a, l, &remote).await;
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share");
        let secret = format!("Never tell the auditors about the {} spreadsheet.", unique("s"));
        let imported = ok(call(&store, &b, "import_memory", json!({"content": secret, "kind": "convention", "target": "project", "project_hint": remote, "source_path": "notes.md", "source_hash": unique("h")})).await, l, "B imports");
        let private = imported["memory_id"].as_str().expect("an id").to_string();
        let refused = err(call(&store, &b, "promote_rule", json!({"memory_id": private})).await, ErrorCode::Conflict, l, "a rule from a private memory's text");
        assert!(refused.message.contains("rule_text"), "[{l}] {}", refused.message);
        let own_words = format!("Ledger reports go to the auditors as CSV ({}).", unique("w"));
        ok(call(&store, &b, "promote_rule", json!({"memory_id": private, "rule_text": own_words})).await, l, "a rule in B's own words");
        let pack = ok(call(&store, &a, "build_context", json!({"topic": "ledger", "briefing": true, "project_hint": remote})).await, l, "A's briefing");
        let rules = pack["rules"].to_string();
        assert!(rules.contains(&own_words), "[{l}] A receives B's words: {rules}");
        assert!(!pack.to_string().contains(&secret), "[{l}] never the private text: {pack}");
    }

    /// Resolving a contradiction with the team's memory as the winner
    /// links it (`supersedes`), which every member then reads: a writer
    /// demoted to reader since may retire their own memory, not link the
    /// team's (`forbidden`, nothing changed), as `link` would refuse.
    async fn a_reader_resolves_no_link_from_the_teams_memory(store: Store, l: &str) {
        let (_, a) = user(&store, "reswin-a").await;
        let (uw, w) = user(&store, "reswin-w").await;
        let slug = team(&store, &a, l, "reswin").await;
        add(&store, &a, l, &slug, &uw.email, TeamRole::Writer).await;
        let scope = format!("team.{slug}");
        let theirs = mem(&store, &w, l, json!({"content": "Payroll runs on the last Friday of the month.", "kind": "fact", "scope": scope})).await;
        let mine = mem(&store, &w, l, json!({"content": "Payroll runs on the first Monday of the month.", "kind": "fact", "scope": "personal"})).await;
        ok(call(&store, &w, "link", json!({"src": mine, "dst": theirs, "type": "contradicts"})).await, l, "W files a contradiction");
        let listed = ok(call(&store, &w, "list_conflicts", json!({"verdict": "contradiction"})).await, l, "list");
        let dispute = listed["conflicts"][0]["dispute_id"].as_str().expect("a dispute").to_string();
        ok(store.set_team_role(&a, &slug, &uw.id, SetRoleInput { role: TeamRole::Reader }).await, l, "demote W");
        err(call(&store, &w, "resolve_conflict", json!({"dispute_id": dispute, "winner": theirs})).await, ErrorCode::Forbidden, l, "a reader's link from the team's memory");
        let again = ok(call(&store, &w, "list_conflicts", json!({"verdict": "contradiction"})).await, l, "list again");
        assert_eq!(again["conflicts"].as_array().map(Vec::len), Some(1), "[{l}] still pending: {again}");
        let kept = ok(store.get_memory(&w, &zm_contracts::MemoryId::parse(&mine).unwrap()).await, l, "W's own");
        assert!(kept.invalidated_at.is_none(), "[{l}] W's memory not retired: {kept:?}");
    }

    /// What a leaver handed over is what the team could read: a private
    /// memory of theirs in a shared project (an import stays private)
    /// stays theirs, and the project's owner never starts reading it. So
    /// does their challenge of a memory that goes: its reason is theirs.
    async fn a_leavers_private_memory_and_challenge_stay_theirs(store: Store, l: &str) {
        let (_, a) = user(&store, "priv-a").await;
        let (ub, b) = user(&store, "priv-b").await;
        let slug = team(&store, &a, l, "priv").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &a, l, json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": remote})).await;
        let project = project_of(&store, &a, l, &remote).await;
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share");
        let secret = format!("My own draft about the ledger ({}).", unique("s"));
        let imported = ok(call(&store, &b, "import_memory", json!({"content": secret, "kind": "fact", "target": "project", "project_hint": remote, "source_path": "notes.md", "source_hash": unique("h")})).await, l, "B imports");
        let private = imported["memory_id"].as_str().expect("an id").to_string();
        let shared = mem(&store, &b, l, json!({"content": "Ledger exports are CSV.", "kind": "fact", "project_hint": remote})).await;
        let reason = format!("I doubt this ({}).", unique("r"));
        let challenged = ok(call(&store, &b, "challenge", json!({"memory_id": shared, "reason": reason})).await, l, "B challenges");
        let dispute = challenged["dispute_id"].as_str().expect("a dispute id").to_string();
        let get = |who: &Caller, id: &str| {
            let (store, who, id) = (store.clone(), who.clone(), id.to_string());
            async move { store.get_memory(&who, &zm_contracts::MemoryId::parse(&id).expect("an id")).await }
        };
        err(get(&a, &private).await, ErrorCode::NotFound, l, "A reads B's private import before");
        ok(store.remove_team_member(&a, &slug, &b.user_id).await, l, "remove B");
        err(get(&a, &private).await, ErrorCode::NotFound, l, "A reads B's private import after B left");
        ok(get(&b, &private).await, l, "B keeps it");
        ok(get(&a, &shared).await, l, "the shared one is A's now");
        for status in ["pending", "dismissed", "resolved"] {
            let conflicts = ok(call(&store, &a, "list_conflicts", json!({"status": status})).await, l, "A's conflicts");
            assert!(!conflicts.to_string().contains(&reason), "[{l}] B's challenge reached A: {conflicts}");
        }
        // Nor by its id: the challenge did not go with the memory (B no
        // longer reads the memory, so neither does B's challenge answer).
        err(call(&store, &a, "get_conflict", json!({"dispute_id": dispute})).await, ErrorCode::NotFound, l, "A never reads B's challenge");
    }

    /// An import its owner moved into a team's project and left behind is
    /// the team's now: importing the same item again is skipped without
    /// naming the memory, which the importer can no longer read.
    async fn a_skipped_import_names_no_memory_its_importer_left_behind(store: Store, l: &str) {
        let (_, a) = user(&store, "imp-a").await;
        let (ub, b) = user(&store, "imp-b").await;
        let slug = team(&store, &a, l, "imp").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let item = json!({"content": "The invoices cron retries three times.", "kind": "fact", "target": "personal", "source_path": "notes.md", "source_hash": unique("h")});
        let imported = ok(call(&store, &b, "import_memory", item.clone()).await, l, "B imports");
        let id = imported["memory_id"].as_str().expect("an id").to_string();
        let again = ok(call(&store, &b, "import_memory", item.clone()).await, l, "B imports again");
        assert_eq!((again["skipped"].as_bool(), again["memory_id"].as_str()), (Some(true), Some(id.as_str())), "[{l}] still B's: {again}");
        ok(call(&store, &b, "move_memories", json!({"memory_ids": [id], "scope": format!("team.{slug}")})).await, l, "B moves it to the team");
        ok(store.remove_team_member(&a, &slug, &b.user_id).await, l, "remove B");
        err(store.get_memory(&b, &zm_contracts::MemoryId::parse(&id).unwrap()).await, ErrorCode::NotFound, l, "B reads it after leaving");
        let after = ok(call(&store, &b, "import_memory", item).await, l, "B imports a third time");
        assert_eq!(after["skipped"], json!(true), "[{l}] {after}");
        assert!(after.get("memory_id").is_none_or(Value::is_null), "[{l}] names a memory B cannot read: {after}");
    }

    /// A team memory its author superseded with a private one names no
    /// successor to the teammates, who cannot open it; the author still
    /// sees which memory replaced it.
    async fn a_successor_a_teammate_cannot_read_is_not_named(store: Store, l: &str) {
        let (_, a) = user(&store, "succ-a").await;
        let (uw, w) = user(&store, "succ-w").await;
        let slug = team(&store, &a, l, "succ").await;
        add(&store, &a, l, &slug, &uw.email, TeamRole::Writer).await;
        let old = mem(&store, &w, l, json!({"content": "Staging deploys need a ticket.", "kind": "convention", "scope": format!("team.{slug}")})).await;
        let private = mem(&store, &w, l, json!({"content": "Staging deploys need a ticket and my sign-off.", "kind": "convention", "scope": "personal", "links": [{"dst": old, "type": "supersedes"}]})).await;
        let old_id = zm_contracts::MemoryId::parse(&old).unwrap();
        let by_author = ok(store.get_memory(&w, &old_id).await, l, "the author reads it");
        assert_eq!(by_author.superseded_by.as_ref().map(|m| m.as_str().to_string()), Some(private.clone()), "[{l}]");
        let by_mate = ok(store.get_memory(&a, &old_id).await, l, "a teammate reads it");
        assert!(by_mate.invalidated_at.is_some(), "[{l}] retired for everyone");
        assert_eq!(by_mate.superseded_by, None, "[{l}] names a memory the teammate cannot open");
        err(store.get_memory(&a, &zm_contracts::MemoryId::parse(&private).unwrap()).await, ErrorCode::NotFound, l, "the private successor");
        let export = ok(call(&store, &a, "export_memories", json!({"scopes": ["*"]})).await, l, "the teammate's export");
        assert!(export.to_string().contains(&old), "[{l}] exported");
        assert!(!export.to_string().contains(&private), "[{l}] the export names it: {export}");
        let team_export = format!("{:?}", ok(store.export_team(&a, &slug).await, l, "the team's export"));
        assert!(team_export.contains(&old) && !team_export.contains(&private), "[{l}] the team's export names it");
        let mine = ok(call(&store, &w, "export_memories", json!({"scopes": ["*"]})).await, l, "the author's export");
        let item = mine["items"].as_array().unwrap().iter().find(|m| m["id"] == json!(old)).cloned().unwrap();
        assert_eq!(item["superseded_by"], json!(private), "[{l}] {item}");
        // The dashboard's status filter agrees with what each sees: retired
        // without a successor is forgotten, for the teammate; superseded,
        // for the author.
        use zm_store::web::{MemoryFilter, MemoryStatus};
        let listed = |who: &Caller, status: MemoryStatus| {
            let (store, who) = (store.clone(), who.clone());
            let filter = MemoryFilter { scope: Some(format!("team.{slug}")), status, ..MemoryFilter::default() };
            async move {
                let page = store.browse_memories(&who, &filter, None, 50).await.expect("browse");
                let counted = store.memory_facets(&who, &filter).await.expect("facets").statuses.into_iter().find(|(s, _)| *s == status).map(|(_, n)| n);
                (page.items.iter().map(|m| m.id.as_str().to_string()).collect::<Vec<_>>(), counted)
            }
        };
        assert_eq!(listed(&a, MemoryStatus::Forgotten).await, (vec![old.clone()], Some(1)), "[{l}] the teammate's forgotten");
        assert_eq!(listed(&a, MemoryStatus::Superseded).await, (vec![], Some(0)), "[{l}] the teammate's superseded");
        assert_eq!(listed(&w, MemoryStatus::Superseded).await, (vec![old.clone()], Some(1)), "[{l}] the author's superseded");
        assert_eq!(listed(&w, MemoryStatus::Forgotten).await, (vec![], Some(0)), "[{l}] the author's forgotten");
    }

    /// A write into a project shared with the team is the team's to read,
    /// even when the writer holds the same text privately there (an
    /// import): the private row does not absorb it.
    async fn a_shared_write_is_not_absorbed_by_a_private_twin(store: Store, l: &str) {
        let (_, a) = user(&store, "twin-a").await;
        let (ub, b) = user(&store, "twin-b").await;
        let slug = team(&store, &a, l, "twin").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &a, l, json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": remote})).await;
        let project = project_of(&store, &a, l, &remote).await;
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share");
        let tag = unique("t").replace('-', "");
        let text = format!("Ledger exports run at two in the morning ({tag}).");
        let imported = ok(call(&store, &b, "import_memory", json!({"content": text, "kind": "fact", "target": "project", "project_hint": remote, "source_path": "notes.md", "source_hash": unique("h")})).await, l, "B imports");
        let private = imported["memory_id"].as_str().unwrap().to_string();
        assert!(!recall_ids(&store, &a, l, json!({"query": tag, "scopes": ["*"]})).await.contains(&private), "[{l}] an import stays private");
        let wrote = ok(call(&store, &b, "remember", json!({"content": text, "kind": "fact", "project_hint": remote})).await, l, "B remembers it");
        assert_ne!(wrote["deduplicated"], json!(true), "[{l}] {wrote}");
        let shared = wrote["memory_id"].as_str().unwrap().to_string();
        assert_ne!(shared, private, "[{l}]");
        assert!(recall_ids(&store, &a, l, json!({"query": tag, "scopes": ["*"]})).await.contains(&shared), "[{l}] the team reads the write");
        let again = ok(call(&store, &b, "remember", json!({"content": text, "kind": "fact", "project_hint": remote})).await, l, "B remembers it again");
        assert_eq!((again["deduplicated"].clone(), again["memory_id"].clone()), (json!(true), json!(shared)), "[{l}] the shared one absorbs a repeat");
    }

    /// An edit (the dashboard's "new version") of a private memory in a
    /// project shared with the team stays private: saving a typo fix of
    /// an import does not publish it.
    async fn an_edit_of_a_private_memory_in_a_shared_project_stays_private(store: Store, l: &str) {
        let (_, a) = user(&store, "edit-priv-a").await;
        let (ub, b) = user(&store, "edit-priv-b").await;
        let slug = team(&store, &a, l, "editpriv").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &a, l, json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": remote})).await;
        let project = project_of(&store, &a, l, &remote).await;
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share");
        let tag = unique("t").replace('-', "");
        let imported = ok(call(&store, &b, "import_memory", json!({"content": format!("Payroll exports run at two ({tag})."), "kind": "fact", "target": "project", "project_hint": remote, "source_path": "notes.md", "source_hash": unique("h")})).await, l, "B imports");
        let private = zm_contracts::MemoryId::parse(imported["memory_id"].as_str().unwrap()).unwrap();
        // The page offers the edit: a writer writes there.
        assert!(!store.memory_context(&b, private.as_str()).await.unwrap().edit_refused, "[{l}] a writer edits");
        let own = mem(&store, &b, l, json!({"content": format!("B's own repo builds with make ({tag})."), "kind": "fact", "project_hint": format!("/src/{}", unique("own"))})).await;
        assert!(!store.memory_context(&b, &own).await.unwrap().edit_refused, "[{l}] in one's own project");
        let edited = ok(tools(&store).edit(&b, &json!({"content": format!("Payroll exports run at three ({tag})."), "kind": "fact", "scope": project, "links": [{"dst": private.to_string(), "type": "supersedes"}]}), &private).await, l, "B edits it");
        let got = ok(store.get_memory(&b, &edited.memory_id).await, l, "the new version");
        assert_eq!(got.visibility, zm_contracts::Visibility::Private, "[{l}] still private");
        assert!(!recall_ids(&store, &a, l, json!({"query": tag, "scopes": ["*"]})).await.contains(&edited.memory_id.to_string()), "[{l}] the team does not read it");
        // Sharing the project again, or with a second team, publishes no
        // private memory of its sharer there (only the first share does).
        let imported2 = ok(call(&store, &a, "import_memory", json!({"content": format!("Vendor contacts live in the wiki ({tag})."), "kind": "fact", "target": "project", "project_hint": remote, "source_path": "notes.md", "source_hash": unique("h")})).await, l, "A imports");
        let a_private = imported2["memory_id"].as_str().unwrap().to_string();
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share again");
        let other = team(&store, &a, l, "editpriv2").await;
        add(&store, &a, l, &other, &ub.email, TeamRole::Writer).await;
        ok(store.share_project_with_team(&a, &other, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share with a second team");
        assert!(!recall_ids(&store, &b, l, json!({"query": tag, "scopes": ["*"]})).await.contains(&a_private), "[{l}] the import stays private");
        // A plain `remember` there is the team's, as before.
        let wrote = mem(&store, &b, l, json!({"content": format!("Payroll runs monthly ({tag})."), "kind": "fact", "scope": project})).await;
        assert!(recall_ids(&store, &a, l, json!({"query": tag, "scopes": ["*"]})).await.contains(&wrote), "[{l}] the team reads a write");
        // Unshared from both teams, then shared again: what its sharer
        // wrote while nobody else read it is published, the import kept
        // private while a team read it still is not.
        ok(store.unshare_project_from_team(&a, &slug, &project).await, l, "unshare");
        ok(store.unshare_project_from_team(&a, &other, &project).await, l, "unshare from the second");
        let meanwhile = mem(&store, &a, l, json!({"content": format!("Invoices go out on the first ({tag})."), "kind": "fact", "scope": project})).await;
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share once more");
        let read = recall_ids(&store, &b, l, json!({"query": tag, "scopes": ["*"]})).await;
        assert!(read.contains(&meanwhile), "[{l}] the write made while unshared is published: {read:?}");
        assert!(!read.contains(&a_private), "[{l}] the import stays private after every share ended");
    }

    /// A team's export pages: every shared memory of the team's scopes
    /// once, oldest first, across pages of any size; a successor on a
    /// later page is named all the same; every page checks the caller, so
    /// an admin demoted mid-export gets no further page.
    async fn a_team_export_pages_and_checks_every_page(store: Store, l: &str) {
        let (_, a) = user(&store, "page-a").await;
        let (ub, b) = user(&store, "page-b").await;
        let slug = team(&store, &a, l, "page").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Admin).await;
        let scope = format!("team.{slug}");
        let mut written = Vec::new();
        for i in 0..5 {
            store.clock().advance_ms(1000);
            written.push(mem(&store, &a, l, json!({"content": format!("Release train step {i} runs on Mondays."), "scope": scope, "kind": "fact"})).await);
        }
        store.clock().advance_ms(1000);
        let newer = mem(&store, &a, l, json!({"content": "Release train step zero runs on Tuesdays now.", "scope": scope, "kind": "fact", "links": [{"dst": written[0], "type": "supersedes"}]})).await;
        written.push(newer.clone());
        let mut seen = Vec::new();
        let mut first_item = None;
        let mut after = None;
        let mut pages = 0;
        loop {
            let page = ok(store.export_team_page(&b, &slug, after, 2).await, l, "a page");
            assert_eq!(page.team, slug, "[{l}]");
            assert!(page.items.len() <= 2, "[{l}]");
            pages += 1;
            for m in &page.items {
                if m.id.as_str() == written[0] {
                    first_item = Some(m.clone());
                }
                seen.push(m.id.as_str().to_string());
            }
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(pages, 3, "[{l}]");
        assert_eq!(seen, written, "[{l}] every memory once, oldest first");
        let first_item = first_item.expect("the first memory");
        assert_eq!(first_item.superseded_by.as_ref().map(|s| s.as_str().to_string()), Some(newer), "[{l}] a successor on a later page is named");
        // Demoted between two pages: the next page is refused.
        let page = ok(store.export_team_page(&b, &slug, None, 2).await, l, "a first page");
        ok(store.set_team_role(&a, &slug, &ub.id, SetRoleInput { role: TeamRole::Writer }).await, l, "B is demoted");
        err(store.export_team_page(&b, &slug, page.next, 2).await, ErrorCode::Forbidden, l, "the next page after a demotion");
        assert_eq!(ok(store.export_team(&a, &slug).await, l, "the whole export").items.len(), 6, "[{l}]");
    }

    /// A team's export page ends early once its text passes the page's
    /// budget of characters, as an account's export does: a thousand
    /// memories at the highest text limit would otherwise be gigabytes in
    /// one page. The pages together still hold every memory once, in
    /// order.
    async fn a_team_export_page_ends_at_its_budget_of_text(store: Store, l: &str) {
        let store = store.with_limits(zm_store::Limits {
            export_page_chars: 10_000,
            ..zm_store::Limits::default()
        });
        let (_, a) = user(&store, "tpage-chars").await;
        let slug = team(&store, &a, l, "tchars").await;
        let scope = format!("team.{slug}");
        let text = |i: usize, chars: usize| {
            let mut t = format!("Team budget note {i}:");
            let mut w = 0;
            while t.len() < chars {
                t.push_str(&format!(" w{i}x{w}"));
                w += 1;
            }
            t
        };
        let mut written = Vec::new();
        for (i, chars) in [4_000, 4_000, 4_000, 12_000, 4_000, 4_000].into_iter().enumerate() {
            store.clock().advance_ms(1000);
            written.push(mem(&store, &a, l, json!({"content": text(i, chars), "scope": scope, "kind": "fact"})).await);
        }
        let (mut sizes, mut seen, mut after) = (Vec::new(), Vec::new(), None);
        loop {
            let page = ok(store.export_team_page(&a, &slug, after, zm_store::teams::TEAM_EXPORT_PAGE).await, l, "a page");
            sizes.push(page.items.len());
            seen.extend(page.items.iter().map(|m| m.id.as_str().to_string()));
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
            assert!(sizes.len() < 10, "[{l}] the export does not end");
        }
        // 4k + 4k stays under 10k, the third passes it; the 12k memory
        // passes it alone; then the last two.
        assert_eq!(sizes, [3, 1, 2], "[{l}] pages");
        assert_eq!(seen, written, "[{l}] every memory once, in order");
    }

    /// A memory's thread, conversation and transport session are its
    /// writer's: the thread token is signed, not encrypted, and carries
    /// the scope it is pinned to (here a private project's name). A
    /// teammate's read and export, a team's export and the heir of a
    /// hand-over never see them; the writer does, and everyone sees how
    /// the write was routed.
    async fn a_writers_session_provenance_stays_theirs(store: Store, l: &str) {
        let (_, a) = user(&store, "prov-a").await;
        let (ub, b) = user(&store, "prov-b").await;
        let slug = team(&store, &a, l, "prov").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &a, l, json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": remote})).await;
        let project = project_of(&store, &a, l, &remote).await;
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share");
        let session = unique("ses_prov").replace('-', "_");
        let b_in = with_session(&b, &session);
        let ctx = ok(build_context(&store, &b_in, json!({"topic": "falcon", "project_hint": "https://github.com/b/private-falcon"})).await, l, "B's briefing");
        let token = ctx.session.thread.clone().expect("a thread");
        let in_team = mem(&store, &b_in, l, json!({"content": "Team deploys go out on Tuesdays.", "kind": "fact", "scope": format!("team.{slug}"), "thread": token})).await;
        let in_project = mem(&store, &b_in, l, json!({"content": "Ledger exports are CSV.", "kind": "fact", "scope": project, "thread": token})).await;
        let id = |s: &str| zm_contracts::MemoryId::parse(s).expect("an id");
        let writer_keys = ["thread", "conversation", "session"];
        let own = ok(store.get_memory(&b, &id(&in_team)).await, l, "B reads theirs").source.unwrap_or_default();
        assert_eq!((&own["thread"], &own["session"]), (&json!(token), &json!(session)), "[{l}] the writer's own: {own}");
        assert!(own["conversation"].is_string(), "[{l}] {own}");
        let unseen = |what: &str, source: &Value| {
            assert!(source["routing"].is_object(), "[{l}] {what}: the routing is everyone's: {source}");
            for k in writer_keys {
                assert!(source.get(k).is_none(), "[{l}] {what}: {k} reached a reader: {source}");
            }
        };
        for m in [&in_team, &in_project] {
            let read = ok(store.get_memory(&a, &id(m)).await, l, "A reads B's").source.unwrap_or_default();
            unseen("A's read", &read);
        }
        let export = ok(call(&store, &a, "export_memories", json!({"scopes": ["*"]})).await, l, "A's export").to_string();
        assert!(export.contains(&in_team) && export.contains(&in_project), "[{l}] exported: {export}");
        assert!(!export.contains(&token) && !export.contains(&session), "[{l}] A's export: {export}");
        let team_export = format!("{:?}", ok(store.export_team(&a, &slug).await, l, "the team's export"));
        assert!(team_export.contains(&in_team) && !team_export.contains(&token) && !team_export.contains(&session), "[{l}] the team's export: {team_export}");
        // B leaves: the project's memory is its owner's now, the team's
        // the steward's; neither keeps B's session.
        ok(store.remove_team_member(&a, &slug, &b.user_id).await, l, "remove B");
        let handed = ok(store.get_memory(&a, &id(&in_project)).await, l, "A holds B's project memory").source.unwrap_or_default();
        unseen("the heir's read", &handed);
        let mine = ok(call(&store, &a, "export_memories", json!({"scopes": ["*"]})).await, l, "the heir's export").to_string();
        assert!(mine.contains(&in_project) && !mine.contains(&token), "[{l}] the heir's export: {mine}");
        let team_export = format!("{:?}", ok(store.export_team(&a, &slug).await, l, "the team's export after"));
        assert!(team_export.contains(&in_team) && !team_export.contains(&token), "[{l}] the team's export after: {team_export}");
    }

    /// Unsharing a project is a departure for the members who reached it
    /// only through the team: what they shared there goes to the project's
    /// owner with its rules (who may then revoke them), and their rules
    /// for it from memories elsewhere are revoked. No non-member keeps a
    /// standing instruction, or a memory to forget, in someone else's
    /// project. The same holds when the sharer leaves the team.
    async fn unsharing_a_project_hands_the_members_writes_to_its_owner(store: Store, l: &str) {
        for sharer_leaves in [false, true] {
            let l = &format!("{l}, sharer leaves: {sharer_leaves}");
            let (_, admin) = user(&store, "uns-admin").await;
            let (ua, a) = user(&store, "uns-a").await;
            let (ub, b) = user(&store, "uns-b").await;
            let slug = team(&store, &admin, l, "uns").await;
            add(&store, &admin, l, &slug, &ua.email, TeamRole::Writer).await;
            add(&store, &admin, l, &slug, &ub.email, TeamRole::Writer).await;
            let remote = format!("git@github.com:acme/{}.git", unique("repo"));
            mem(&store, &a, l, json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": remote})).await;
            let project = project_of(&store, &a, l, &remote).await;
            ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share");
            let tag = unique("u").replace('-', "");
            let note = mem(&store, &b, l, json!({"content": format!("Ledger entries are never deleted ({tag})."), "kind": "convention", "project_hint": remote})).await;
            ok(call(&store, &b, "promote_rule", json!({"memory_id": note})).await, l, "B's project rule");
            ok(store.pin_rule(&b, &note, true).await, l, "B pins it");
            let elsewhere = mem(&store, &b, l, json!({"content": format!("Always tag ledger releases ({tag})."), "kind": "convention", "scope": "personal"})).await;
            ok(call(&store, &b, "promote_rule", json!({"memory_id": elsewhere, "applies_scope": project})).await, l, "B's rule for the project from a personal memory");
            if sharer_leaves {
                ok(store.remove_team_member(&a, &slug, &a.user_id).await, l, "A leaves");
            } else {
                ok(store.unshare_project_from_team(&a, &slug, &project).await, l, "unshare");
            }
            // The audit log records the unsharing either way.
            let audit = ok(store.team_audit(&admin, &slug).await, l, "audit");
            assert!(
                audit.events.iter().any(|e| e.action == TeamAction::ProjectUnshared && e.subject.as_deref() == Some(project.as_str())),
                "[{l}] {audit:?}"
            );
            // B no longer holds anything there.
            err(call(&store, &b, "forget", json!({"memory_id": note})).await, ErrorCode::NotFound, l, "B forgets the note");
            let b_rules = store.list_rules(&b).await.unwrap();
            let mine = b_rules.iter().find(|r| r.memory_id.as_str() == elsewhere).expect("B keeps the row");
            assert_eq!(mine.status, zm_store::rules::RuleState::Revoked, "[{l}] {b_rules:?}");
            assert!(b_rules.iter().all(|r| r.memory_id.as_str() != note), "[{l}] the note's rule went with it: {b_rules:?}");
            // A owns the note and its rule, and can take the rule down.
            ok(store.get_memory(&a, &zm_contracts::MemoryId::parse(&note).unwrap()).await, l, "A reads the note");
            let brief = ok(call(&store, &a, "build_context", json!({"topic": "ledger", "briefing": true, "project_hint": remote})).await, l, "A's briefing");
            let rules = brief["rules"].to_string();
            assert!(rules.contains(&format!("never deleted ({tag})")) && !rules.contains("Always tag ledger releases"), "[{l}] {rules}");
            ok(store.revoke_rule(&a, &note, "not ours").await, l, "A revokes it");
            let brief = ok(call(&store, &a, "build_context", json!({"topic": "ledger", "briefing": true, "project_hint": remote})).await, l, "A's briefing");
            assert!(!brief["rules"].to_string().contains(&tag), "[{l}] {}", brief["rules"]);
        }
    }

    /// A rule is delivered where its author could set it, and nobody else
    /// rewrites it. A writer's rule for the team from a memory in a
    /// member's shared project is revoked when the memory goes to the
    /// project's owner (who reads the team, but does not write there):
    /// it no longer reaches the team, and the owner's edit of the memory
    /// rewrites nothing. A writer demoted to reader who edits their own
    /// memory behind a rule for the team retires the rule; it does not
    /// carry the new text to every member.
    async fn a_rule_for_a_team_is_rewritten_only_by_its_writers(store: Store, l: &str) {
        let (_, admin) = user(&store, "gov-admin").await;
        let (uo, o) = user(&store, "gov-o").await;
        let (uw, w) = user(&store, "gov-w").await;
        let (ur, r) = user(&store, "gov-r").await;
        let slug = team(&store, &admin, l, "gov").await;
        let scope = format!("team.{slug}");
        add(&store, &admin, l, &slug, &uo.email, TeamRole::Writer).await;
        add(&store, &admin, l, &slug, &uw.email, TeamRole::Writer).await;
        add(&store, &admin, l, &slug, &ur.email, TeamRole::Reader).await;
        let rules_of = |who: &Caller| {
            let (store, who) = (&store, who.clone());
            async move {
                let brief = ok(call(store, &who, "build_context", json!({"topic": "deploys", "briefing": true, "scopes": ["*"]})).await, l, "briefing");
                brief["rules"].to_string()
            }
        };
        let tag = unique("g").replace('-', "");
        // O's project, shared with the team; W's rule for the team from it.
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &o, l, json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": remote})).await;
        let project = project_of(&store, &o, l, &remote).await;
        ok(store.share_project_with_team(&o, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share");
        let m = mem(&store, &w, l, json!({"content": format!("Deploys wait for a green build ({tag})."), "kind": "convention", "project_hint": remote})).await;
        ok(call(&store, &w, "promote_rule", json!({"memory_id": m, "applies_scope": scope})).await, l, "W's rule for the team");
        ok(store.pin_rule(&w, &m, true).await, l, "W pins it");
        assert!(rules_of(&r).await.contains(&format!("green build ({tag})")), "[{l}] the team gets W's rule");
        ok(store.set_team_role(&admin, &slug, &uo.id, SetRoleInput { role: TeamRole::Reader }).await, l, "O is demoted");
        ok(store.remove_team_member(&admin, &slug, &uw.id).await, l, "W is removed");
        // The memory is O's now; its rule for the team is not, and stays
        // W's, revoked: its text and target are not O's to read.
        ok(store.get_memory(&o, &zm_contracts::MemoryId::parse(&m).unwrap()).await, l, "O holds the memory");
        assert!(!rules_of(&r).await.contains(&tag), "[{l}] a rule for the team the project's owner did not set");
        let o_rules = store.list_rules(&o).await.unwrap();
        assert!(o_rules.iter().all(|x| x.memory_id.as_str() != m), "[{l}] W's revoked rule went to O: {o_rules:?}");
        let w_rules = store.list_rules(&w).await.unwrap();
        let kept = w_rules.iter().find(|x| x.memory_id.as_str() == m).expect("W keeps the row");
        assert_eq!(kept.status, zm_store::rules::RuleState::Revoked, "[{l}] {w_rules:?}");
        let edit = json!({"content": format!("Deploys skip the build ({tag})."), "kind": "convention", "scope": project, "links": [{"dst": m, "type": "supersedes"}]});
        ok(call(&store, &o, "remember", edit).await, l, "O edits the memory");
        let seen = rules_of(&r).await;
        assert!(!seen.contains(&tag), "[{l}] O's text reaches the team: {seen}");

        // A writer demoted to reader edits the memory behind their rule.
        let (uv, v) = user(&store, "gov-v").await;
        add(&store, &admin, l, &slug, &uv.email, TeamRole::Writer).await;
        let remote_v = format!("git@github.com:acme/{}.git", unique("repo"));
        let own = mem(&store, &v, l, json!({"content": format!("Hotfixes need two reviews ({tag})."), "kind": "convention", "project_hint": remote_v})).await;
        ok(call(&store, &v, "promote_rule", json!({"memory_id": own, "applies_scope": scope})).await, l, "V's rule for the team");
        assert!(rules_of(&r).await.contains(&format!("two reviews ({tag})")), "[{l}] the team gets V's rule");
        ok(store.set_team_role(&admin, &slug, &uv.id, SetRoleInput { role: TeamRole::Reader }).await, l, "V is demoted");
        let own_scope = ok(store.get_memory(&v, &zm_contracts::MemoryId::parse(&own).unwrap()).await, l, "V's memory").scope;
        let edit = json!({"content": format!("Hotfixes need no review ({tag})."), "kind": "convention", "scope": own_scope, "links": [{"dst": own, "type": "supersedes"}]});
        ok(call(&store, &v, "remember", edit).await, l, "V edits their memory");
        let seen = rules_of(&r).await;
        assert!(!seen.contains("no review"), "[{l}] a reader rewrote the team's rule: {seen}");
    }

    /// A rule pinned by a member who is removed goes to the team's steward
    /// unpinned: nobody can sign in as the steward to unpin it, and
    /// pinning takes the writer role now, which the steward never holds.
    async fn a_removed_members_pin_does_not_outlive_them(store: Store, l: &str) {
        let (_, admin) = user(&store, "pin-admin").await;
        let (uw, w) = user(&store, "pin-w").await;
        let slug = team(&store, &admin, l, "pin").await;
        add(&store, &admin, l, &slug, &uw.email, TeamRole::Writer).await;
        let text = format!("Deploy only on Fridays ({}).", unique("p"));
        let rule = mem(&store, &w, l, json!({"content": text, "kind": "convention", "scope": format!("team.{slug}")})).await;
        ok(call(&store, &w, "promote_rule", json!({"memory_id": rule})).await, l, "team rule");
        ok(store.pin_rule(&w, &rule, true).await, l, "pin");
        let pinned = |out: &Value| {
            out["rules"].as_array().unwrap().iter().find(|r| r["text"] == json!(text)).map(|r| r["pinned"].clone())
        };
        let topic = json!({"topic": "deploys", "briefing": true, "scopes": [format!("team.{slug}")]});
        let before = ok(call(&store, &admin, "build_context", topic.clone()).await, l, "before");
        assert_eq!(pinned(&before), Some(json!(true)), "[{l}] {}", before["rules"]);
        ok(store.remove_team_member(&admin, &slug, &w.user_id).await, l, "remove W");
        let after = ok(call(&store, &admin, "build_context", topic).await, l, "after");
        assert_eq!(pinned(&after), Some(json!(false)), "[{l}] the team keeps the rule, unpinned: {}", after["rules"]);
    }

    /// A writer demoted to reader changes none of what they wrote into the
    /// team: forgetting, closing, restoring, sharing it elsewhere and
    /// moving it away are refused (the members read it), and nothing
    /// changed. Their personal memories stay theirs to change, and the
    /// writer role back lets them again.
    async fn a_demoted_reader_changes_no_team_content(store: Store, l: &str) {
        let (_, admin) = user(&store, "dem-admin").await;
        let (uw, w) = user(&store, "dem-w").await;
        let slug = team(&store, &admin, l, "dem").await;
        let scope = format!("team.{slug}");
        add(&store, &admin, l, &slug, &uw.email, TeamRole::Writer).await;
        let fact = mem(&store, &w, l, json!({"content": "The ledger shards by tenant.", "kind": "fact", "scope": scope})).await;
        let task = mem(&store, &w, l, json!({"content": "Migrate the ledger to the new cluster.", "kind": "task", "scope": scope})).await;
        let gone = mem(&store, &w, l, json!({"content": "The ledger runs on Tuesdays.", "kind": "fact", "scope": scope})).await;
        ok(call(&store, &w, "forget", json!({"memory_id": gone})).await, l, "forget as a writer");
        let own = mem(&store, &w, l, json!({"content": "I prefer short ledger reports.", "kind": "preference", "scope": "personal"})).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &w, l, json!({"content": "My side project exists.", "kind": "fact", "project_hint": remote})).await;
        let elsewhere = project_of(&store, &w, l, &remote).await;
        let ch = ok(call(&store, &w, "challenge", json!({"memory_id": fact, "reason": "it shards by region now"})).await, l, "challenge");
        let demote = |role: &str| input!(SetRoleInput, &json!({"role": role}));
        ok(store.set_team_role(&admin, &slug, &uw.id, demote("reader")).await, l, "demote");
        err(call(&store, &w, "resolve_conflict", json!({"dispute_id": ch["dispute_id"], "retire": true})).await, ErrorCode::Forbidden, l, "retire by a resolve");
        err(call(&store, &w, "remember", json!({"content": "The ledger shards by region.", "kind": "fact", "scope": "personal", "links": [{"dst": fact, "type": "supersedes"}]})).await, ErrorCode::Forbidden, l, "retire by a superseding remember");
        assert!(recall_ids(&store, &w, l, json!({"query": "shards region", "scopes": ["personal"]})).await.is_empty(), "[{l}] the refused remember left nothing");
        for (tool, args) in [
            ("forget", json!({"memory_id": fact})),
            ("close_loop", json!({"memory_id": task})),
            ("restore_memory", json!({"memory_id": gone})),
            ("share", json!({"memory_id": fact, "scope": elsewhere})),
        ] {
            let e = err(call(&store, &w, tool, args).await, ErrorCode::Forbidden, l, tool);
            assert!(e.message.contains("yours is reader"), "[{l}] {tool}: {}", e.message);
        }
        let moved = ok(call(&store, &w, "move_memories", json!({"memory_ids": [fact, task], "scope": elsewhere})).await, l, "move");
        assert_eq!(moved["moved"], json!([]), "[{l}] {moved}");
        assert_eq!(moved["failed"].as_array().map(Vec::len), Some(2), "[{l}] {moved}");
        // Nothing changed: the admin still reads both where they were.
        let hits = recall_ids(&store, &admin, l, json!({"query": "ledger", "scopes": [scope]})).await;
        assert!(hits.contains(&fact) && hits.contains(&task) && !hits.contains(&gone), "[{l}] {hits:?}");
        ok(call(&store, &w, "forget", json!({"memory_id": own})).await, l, "a personal memory stays theirs");
        ok(store.set_team_role(&admin, &slug, &uw.id, demote("writer")).await, l, "writer again");
        ok(call(&store, &w, "close_loop", json!({"memory_id": task})).await, l, "close as a writer");
    }

    /// A thread pinned to a project the caller left pins nothing any more:
    /// a briefing echoing it reads no project and issues no thread for it
    /// (it used to renew the dead thread on every briefing).
    async fn a_thread_to_a_project_left_is_not_renewed(store: Store, l: &str) {
        let (_, a) = user(&store, "thr-a").await;
        let (ub, b) = user(&store, "thr-b").await;
        let slug = team(&store, &a, l, "thr").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &a, l, json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": remote})).await;
        let project = project_of(&store, &a, l, &remote).await;
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, l, "share");
        let brief = ok(call(&store, &b, "build_context", json!({"topic": "ledger", "briefing": true, "project_hint": remote})).await, l, "B's briefing");
        assert_eq!(brief["project_scope"], json!(project), "[{l}] {brief}");
        let thread = brief["session"]["thread"].as_str().expect("a thread").to_string();
        let again = ok(call(&store, &b, "build_context", json!({"topic": "ledger", "thread": thread})).await, l, "echoed");
        assert_eq!(again["project_scope"], json!(project), "[{l}] the thread pins the project while B reaches it");
        ok(store.remove_team_member(&a, &slug, &b.user_id).await, l, "remove B");
        let after = ok(call(&store, &b, "build_context", json!({"topic": "ledger", "thread": thread})).await, l, "after leaving");
        assert_eq!(after["project_scope"], Value::Null, "[{l}] {after}");
        assert_eq!(after["session"]["thread"], Value::Null, "[{l}] no thread is issued for it: {after}");
        let recalled = ok(call(&store, &b, "recall", json!({"query": "ledger", "thread": thread})).await, l, "recall after leaving");
        assert_ne!(recalled["session"]["attached_project"], json!(project), "[{l}] {recalled}");
        // Nor does it route a write: a scope-less remember has nowhere to
        // go (not `forbidden` on a scope B never named), and one into
        // `personal` lands there and hands no thread back.
        let e = err(call(&store, &b, "remember", json!({"content": "The ledger needs an owner.", "kind": "fact", "thread": thread})).await, ErrorCode::ValidationFailed, l, "a scope-less remember after leaving");
        assert_prefix(&e, zm_contracts::prefixes::Prefix::ScopeTargetRequired, l, "nowhere to go");
        let kept = ok(call(&store, &b, "remember", json!({"content": "I reviewed the ledger in March.", "kind": "fact", "scope": "personal", "thread": thread})).await, l, "a personal remember after leaving");
        assert_eq!(kept["session"]["thread"], Value::Null, "[{l}] {kept}");
        assert_eq!(kept["routed_to_project"], Value::Null, "[{l}] {kept}");
    }

    /// A project shared with the team: both members' briefings carry its
    /// memories and its rules, the team layer's rules, pinned first; the
    /// second member's hint for the same repository lands in it; a
    /// reader's hint reads it and writes nothing into it.
    async fn shared_project_in_both_briefings(store: Store, l: &str) {
        let (_, a) = user(&store, "sp-a").await;
        let (ub, b) = user(&store, "sp-b").await;
        let (_, outsider) = user(&store, "sp-x").await;
        let (ur, reader) = user(&store, "sp-r").await;
        let slug = team(&store, &a, l, "shared").await;
        let scope = format!("team.{slug}");
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        add(&store, &a, l, &slug, &ur.email, TeamRole::Reader).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        let fact = mem(&store, &a, l, json!({"content": "The billing service retries webhooks three times.", "kind": "fact", "project_hint": remote})).await;
        let project = project_of(&store, &a, l, &remote).await;
        err(store.share_project_with_team(&outsider, &slug, input!(ShareProjectInput, &json!({"scope": project}))).await, ErrorCode::NotFound, l, "an outsider shares");
        let shared = ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"project_hint": remote}))).await, l, "share");
        assert_eq!((shared.scope.as_str(), shared.owned), (project.as_str(), false), "[{l}]");
        // Rules: a project rule and a pinned team-layer rule.
        let convention = mem(&store, &a, l, json!({"content": "Webhook handlers must be idempotent.", "kind": "convention", "project_hint": remote})).await;
        ok(call(&store, &a, "promote_rule", json!({"memory_id": convention})).await, l, "project rule");
        let team_rule = mem(&store, &a, l, json!({"content": "Every change needs a second reviewer.", "kind": "convention", "scope": scope})).await;
        ok(call(&store, &a, "promote_rule", json!({"memory_id": team_rule})).await, l, "team rule");
        ok(store.pin_rule(&a, &team_rule, true).await, l, "pin");
        // B's hint for the same repository resolves to the shared project.
        assert_eq!(project_of(&store, &b, l, &remote).await, project, "[{l}] B lands in the shared project");
        for (who, name) in [(&a, "A"), (&b, "B")] {
            let brief = ok(call(&store, who, "build_context", json!({"topic": "billing webhooks", "briefing": true, "project_hint": remote})).await, l, "briefing");
            let text = brief.to_string();
            assert!(text.contains(&fact), "[{l}] {name}'s briefing holds the project's fact: {text}");
            let rules: Vec<&str> = brief["rules"].as_array().unwrap().iter().map(|r| r["text"].as_str().unwrap()).collect();
            assert_eq!(rules.first().copied(), Some("Every change needs a second reviewer."), "[{l}] {name}: the pinned team rule leads: {rules:?}");
            assert!(rules.contains(&"Webhook handlers must be idempotent."), "[{l}] {name}: the project rule: {rules:?}");
        }
        // B writes through the hint into the shared project; A reads it.
        let by_b = mem(&store, &b, l, json!({"content": "Webhook signatures use HMAC-SHA256.", "kind": "fact", "project_hint": remote})).await;
        assert!(recall_ids(&store, &a, l, json!({"query": "webhook signatures", "project_hint": remote})).await.contains(&by_b), "[{l}]");
        // The team's reader reads the shared project through the hint but
        // writes nothing into it that way: not by remember, not by a
        // refused kind routed from core, not by import; nothing is left.
        assert_eq!(project_of(&store, &reader, l, &remote).await, project, "[{l}] the reader's hint reads the shared project");
        let tag = unique("planted").replace('-', "");
        let planted = format!("Webhook retries were raised to ten ({tag}).");
        err(call(&store, &reader, "remember", json!({"content": planted, "kind": "fact", "project_hint": remote})).await, ErrorCode::Forbidden, l, "a reader remembers through the hint");
        let routed = call(&store, &reader, "remember", json!({"content": planted, "kind": "task", "scope": "core", "project_hint": remote})).await;
        assert!(routed.as_ref().is_err_and(|e| e.message.contains("you may not write there")), "[{l}] the routing's refusal says why: {routed:?}");
        err(routed, ErrorCode::Forbidden, l, "a reader's task routed by the hint");
        err(call(&store, &reader, "import_memory", json!({"content": planted, "kind": "fact", "target": "project", "project_hint": remote, "source_path": "notes.md", "source_hash": unique("h")})).await, ErrorCode::Forbidden, l, "a reader imports through the hint");
        assert!(recall_ids(&store, &a, l, json!({"query": tag, "scopes": ["*"]})).await.is_empty(), "[{l}] nothing the reader tried was written");
        let outsider_brief = ok(call(&store, &outsider, "build_context", json!({"topic": "billing webhooks", "briefing": true, "project_hint": remote})).await, l, "outsider briefing");
        let text = outsider_brief.to_string();
        assert!(!text.contains("idempotent") && !text.contains(&fact) && !text.contains("second reviewer"), "[{l}] the outsider sees none of it: {text}");
        // Unsharing ends B's access; what B wrote there goes to A on B's removal.
        ok(store.unshare_project_from_team(&a, &slug, &project).await, l, "unshare");
        assert!(!recall_ids(&store, &b, l, json!({"query": "billing webhooks retries", "scopes": ["*"]})).await.contains(&fact), "[{l}] unshared");
    }

    /// A member's own project of a repository's name wins over a
    /// teammate's shared project of the same repository: a member whose
    /// agent wrote there without naming the hint (no binding recorded)
    /// keeps writing there, privately, once a teammate shares theirs.
    async fn an_own_project_wins_over_a_teammates_shared_one(store: Store, l: &str) {
        let (_, a) = user(&store, "own-wins-a").await;
        let (uc, c) = user(&store, "own-wins-c").await;
        let slug = team(&store, &a, l, "ownwins").await;
        add(&store, &a, l, &slug, &uc.email, TeamRole::Writer).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &a, l, json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": remote})).await;
        let shared = project_of(&store, &a, l, &remote).await;
        let name = shared.rsplit('.').next().unwrap().to_string();
        // C's agent wrote into C's own project of that name by its path
        // (as a session attached through the hint does): no binding.
        let own = zm_contracts::scope::project_scope(&c.user_id, &name);
        let before = mem(&store, &c, l, json!({"content": "My ledger notes stay mine.", "kind": "fact", "scope": own})).await;
        ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"project_hint": remote}))).await, l, "A shares");
        assert_eq!(project_of(&store, &c, l, &remote).await, own, "[{l}] C's own project wins");
        let after = mem(&store, &c, l, json!({"content": format!("Ledger exports are CSV ({}).", unique("t")), "kind": "fact", "project_hint": remote})).await;
        for id in [&before, &after] {
            assert!(!recall_ids(&store, &a, l, json!({"query": "ledger", "scopes": ["*"]})).await.contains(id), "[{l}] A reads none of C's");
        }
        // A member without a project of their own lands in the shared one,
        // and so does one whose project of that name is another
        // repository's (bound to another remote); one bound to a checkout
        // path (maybe this repository's) wins, and stays private.
        let (ud, d) = user(&store, "own-wins-d").await;
        add(&store, &a, l, &slug, &ud.email, TeamRole::Writer).await;
        assert_eq!(project_of(&store, &d, l, &remote).await, shared, "[{l}] D lands in A's");
        mem(&store, &d, l, json!({"content": "My fork's web app.", "kind": "fact", "project_hint": format!("git@github.com:someone-else/{name}.git")})).await;
        assert_eq!(project_of(&store, &d, l, &remote).await, shared, "[{l}] D's other repository of that name does not win");
        let (ue, e) = user(&store, "own-wins-e").await;
        add(&store, &a, l, &slug, &ue.email, TeamRole::Writer).await;
        mem(&store, &e, l, json!({"content": "My checkout of the ledger.", "kind": "fact", "project_hint": format!("/home/e/src/{name}")})).await;
        assert_eq!(project_of(&store, &e, l, &remote).await, zm_contracts::scope::project_scope(&e.user_id, &name), "[{l}] E's checkout's project wins");
    }

    /// Deleting a team revokes a member's rule promoted for it from a
    /// memory of their own; the row and its wording stay theirs (it was
    /// deleted), and a rule built on a team memory goes.
    async fn a_deleted_teams_rules_of_members_own_memories_stay_revoked(store: Store, l: &str) {
        let (_, a) = user(&store, "del-rule-a").await;
        let (ub, b) = user(&store, "del-rule-b").await;
        let slug = team(&store, &a, l, "delrule").await;
        let scope = format!("team.{slug}");
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        let own = mem(&store, &b, l, json!({"content": "Sign every commit.", "kind": "preference", "scope": "personal"})).await;
        ok(call(&store, &b, "promote_rule", json!({"memory_id": own, "applies_scope": scope, "rule_text": "Sign every commit with your key."})).await, l, "B's rule for the team");
        let team_note = mem(&store, &b, l, json!({"content": "Every change needs a second reviewer.", "kind": "convention", "scope": scope})).await;
        ok(call(&store, &b, "promote_rule", json!({"memory_id": team_note})).await, l, "a team rule");
        ok(store.delete_team(&a, &slug).await, l, "delete");
        let rules = store.list_rules(&b).await.unwrap();
        let kept = rules.iter().find(|r| r.memory_id.as_str() == own).unwrap_or_else(|| panic!("[{l}] B's own rule is gone: {rules:?}"));
        assert_eq!(kept.status, zm_store::rules::RuleState::Revoked, "[{l}] {rules:?}");
        assert_eq!(kept.text, "Sign every commit with your key.", "[{l}] its wording kept");
        assert!(rules.iter().all(|r| r.memory_id.as_str() != team_note), "[{l}] the team memory's rule goes: {rules:?}");
    }

    /// Two admins demoting each other, or both leaving, at the same moment:
    /// one of them stays admin. (On PostgreSQL each change counted the
    /// admins before the other committed, and both went through.)
    async fn admins_racing_each_other_leave_one_admin(store: Store, l: &str) {
        let (ua, a) = user(&store, "race-a").await;
        let (ub, b) = user(&store, "race-b").await;
        for round in 0..12 {
            let slug = team(&store, &a, l, "race").await;
            add(&store, &a, l, &slug, &ub.email, TeamRole::Admin).await;
            let role = || SetRoleInput { role: TeamRole::Reader };
            let (x, y) = if round % 2 == 0 {
                let (x, y) = tokio::join!(
                    store.set_team_role(&a, &slug, &ub.id, role()),
                    store.set_team_role(&b, &slug, &ua.id, role())
                );
                (x.map(|_| ()), y.map(|_| ()))
            } else {
                let (x, y) = tokio::join!(
                    store.remove_team_member(&a, &slug, &ua.id),
                    store.remove_team_member(&b, &slug, &ub.id)
                );
                (x.map(|_| ()), y.map(|_| ()))
            };
            assert!(x.is_ok() || y.is_ok(), "[{l}] round {round}: one change goes through: {x:?} {y:?}");
            for e in [&x, &y].into_iter().filter_map(|r| r.as_ref().err()) {
                assert!(matches!(e.code, zm_contracts::ErrorCode::Conflict | zm_contracts::ErrorCode::Forbidden | zm_contracts::ErrorCode::NotFound), "[{l}] round {round}: {e:?}");
            }
            // Whoever is still a member shows the team.
            let shown = match store.get_team(&a, &slug).await {
                Ok(t) => t,
                Err(_) => ok(store.get_team(&b, &slug).await, l, "show"),
            };
            let admins = shown.members.iter().filter(|m| m.role == TeamRole::Admin).count();
            assert_eq!(admins, 1, "[{l}] round {round}: {:?}", shown.members);
        }
    }

    /// A member's write into the team racing their removal: either it
    /// lands before the removal and is handed over with the rest, or it is
    /// refused; the removed member never keeps a team memory of their own.
    async fn a_write_racing_the_writers_removal_stays_with_the_team(store: Store, l: &str) {
        let (_, a) = user(&store, "wr-a").await;
        let (ub, b) = user(&store, "wr-b").await;
        let mut landed = 0;
        for round in 0..12 {
            let slug = team(&store, &a, l, "wrace").await;
            add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
            let tag = unique("wrace").replace('-', "");
            let write = json!({"content": format!("Deploys of {tag} need a second reviewer."), "kind": "convention", "scope": format!("team.{slug}")});
            let (wrote, removed) = tokio::join!(call(&store, &b, "remember", write), store.remove_team_member(&a, &slug, &ub.id));
            ok(removed, l, "remove b");
            let theirs = recall_ids(&store, &b, l, json!({"query": tag, "scopes": ["*"]})).await;
            assert!(theirs.is_empty(), "[{l}] round {round}: the removed member keeps nothing of the team: {theirs:?}");
            match wrote {
                Ok(out) => {
                    landed += 1;
                    let id = out["memory_id"].as_str().expect("an id").to_string();
                    let team_reads = recall_ids(&store, &a, l, json!({"query": tag, "scopes": ["*"]})).await;
                    assert!(team_reads.contains(&id), "[{l}] round {round}: the team keeps it: {team_reads:?}");
                }
                Err(e) => assert!(matches!(e.code, zm_contracts::ErrorCode::Forbidden | zm_contracts::ErrorCode::NotFound), "[{l}] round {round}: {e:?}"),
            }
        }
        eprintln!("[{l}] {landed} of 12 racing writes landed before the removal");
    }

    /// Deleting a team hands over only what its own members wrote into a
    /// project it was shared with: a writer who reached the project through
    /// another team keeps theirs.
    async fn deleting_a_team_takes_nothing_from_another_teams_writers(store: Store, l: &str) {
        let (_, alice) = user(&store, "dt-alice").await;
        let (ub, bob) = user(&store, "dt-bob").await;
        let (uc, carol) = user(&store, "dt-carol").await;
        let first = team(&store, &alice, l, "dtone").await;
        let second = team(&store, &alice, l, "dttwo").await;
        add(&store, &alice, l, &first, &ub.email, TeamRole::Writer).await;
        add(&store, &alice, l, &second, &uc.email, TeamRole::Writer).await;
        let remote = format!("git@github.com:acme/{}.git", unique("repo"));
        mem(&store, &alice, l, json!({"content": "The ledger service settles nightly.", "kind": "fact", "project_hint": remote})).await;
        for slug in [&first, &second] {
            ok(store.share_project_with_team(&alice, slug, input!(ShareProjectInput, &json!({"project_hint": remote}))).await, l, "share");
        }
        let tag = unique("dt").replace('-', "");
        let by_bob = mem(&store, &bob, l, json!({"content": format!("Ledger retries back off ({tag} bob)."), "kind": "fact", "project_hint": remote})).await;
        let by_carol = mem(&store, &carol, l, json!({"content": format!("Ledger exports are CSV ({tag} carol)."), "kind": "fact", "project_hint": remote})).await;
        // Bob's rule for the project, from a personal memory of his.
        let project = project_of(&store, &alice, l, &remote).await;
        let personal = mem(&store, &bob, l, json!({"content": "Ledger changes need two approvals.", "kind": "convention", "scope": "personal"})).await;
        ok(call(&store, &bob, "promote_rule", json!({"memory_id": personal, "applies_scope": project})).await, l, "Bob's rule for the project");
        let rules = || {
            let (store, alice, remote) = (&store, &alice, &remote);
            async move {
                let brief = ok(call(store, alice, "build_context", json!({"topic": "ledger", "briefing": true, "project_hint": remote})).await, l, "briefing");
                brief["rules"].to_string()
            }
        };
        assert!(rules().await.contains("two approvals"), "[{l}] the project gets Bob's rule");
        ok(store.delete_team(&alice, &first).await, l, "delete the first team");
        assert!(!rules().await.contains("two approvals"), "[{l}] Bob left with the team: his rule no longer reaches the project");
        // Carol reaches the project through the second team: hers stays hers
        // (she can still forget it); Bob's went to the project's owner.
        assert!(recall_ids(&store, &carol, l, json!({"query": tag, "scopes": ["*"]})).await.contains(&by_carol), "[{l}] Carol still reads hers");
        ok(call(&store, &carol, "forget", json!({"memory_id": by_carol})).await, l, "Carol forgets her own");
        err(call(&store, &bob, "forget", json!({"memory_id": by_bob})).await, ErrorCode::NotFound, l, "Bob's went to the owner");
        ok(call(&store, &alice, "forget", json!({"memory_id": by_bob})).await, l, "the owner has Bob's");
    }

    /// Entities are named per scope: a removed member's names in the team
    /// stay with the team (anchors kept) and leave their listing; a deleted
    /// team's go with it, from everyone's listing.
    async fn a_teams_entities_stay_with_the_team_and_go_with_it(store: Store, l: &str) {
        let (_, a) = user(&store, "ent-a").await;
        let (ub, b) = user(&store, "ent-b").await;
        let slug = team(&store, &a, l, "ents").await;
        let scope = format!("team.{slug}");
        add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
        mem(&store, &b, l, json!({"content": "The switchboard routes pager alerts.", "kind": "fact", "scope": scope, "entities": [{"name": "Switchboard", "type": "service"}]})).await;
        mem(&store, &a, l, json!({"content": "Admins own the pager rota.", "kind": "fact", "scope": scope, "entities": [{"name": "Pager", "type": "service"}]})).await;
        let names = |who: &Caller| {
            let (store, who) = (&store, who.clone());
            async move {
                let out = ok(call(store, &who, "entities", json!({"scope": "*"})).await, l, "entities");
                let mut names: Vec<String> = out["entities"].as_array().unwrap().iter().filter_map(|e| e["name"].as_str().map(str::to_string)).collect();
                names.sort();
                names
            }
        };
        assert_eq!(names(&b).await, vec!["Pager", "Switchboard"], "[{l}] a member reads the team's names");
        ok(store.remove_team_member(&a, &slug, &ub.id).await, l, "remove b");
        assert!(names(&b).await.is_empty(), "[{l}] the removed member keeps none of the team's names");
        assert_eq!(names(&a).await, vec!["Pager", "Switchboard"], "[{l}] the team keeps them");
        ok(store.delete_team(&a, &slug).await, l, "delete the team");
        assert!(names(&a).await.is_empty(), "[{l}] a deleted team's names go with it");
    }

    /// Invitations: accepted once by the addressee; reuse, expiry, another
    /// user, a deleted team, an invitation an admin's later decision
    /// about the member withdrew, and one sent by an admin since demoted
    /// or removed are refused.
    async fn invitations(store: Store, l: &str) {
        let (_, a) = user(&store, "inv-a").await;
        let (uc, c) = user(&store, "inv-c").await;
        let (_, d) = user(&store, "inv-d").await;
        let slug = team(&store, &a, l, "invites").await;
        let inv = ok(store.invite_team_member(&a, &slug, input!(InviteInput, &json!({"email": uc.email.to_uppercase(), "role": "reader"}))).await, l, "invite");
        err(store.invite_team_member(&c, &slug, input!(InviteInput, &json!({"email": "x@example.com", "role": "admin"}))).await, ErrorCode::NotFound, l, "a non-member invites");
        let mine = ok(store.list_invitations(&c).await, l, "list mine");
        assert_eq!(mine.invitations.iter().map(|i| i.id.clone()).collect::<Vec<_>>(), vec![inv.id.clone()], "[{l}]");
        assert!(ok(store.list_invitations(&d).await, l, "list d").invitations.is_empty(), "[{l}]");
        let shown = ok(store.get_team(&a, &slug).await, l, "show");
        assert_eq!(shown.invitations.len(), 1, "[{l}] the admin sees it");
        err(store.accept_invitation(&d, &inv.id).await, ErrorCode::NotFound, l, "the wrong user");
        let joined = ok(store.accept_invitation(&c, &inv.id).await, l, "accept");
        assert_eq!(joined.team.role, TeamRole::Reader, "[{l}]");
        err(store.accept_invitation(&c, &inv.id).await, ErrorCode::Conflict, l, "reuse");
        let never = InvitationId::parse("inv_0000000000000000.0000000000").unwrap();
        err(store.accept_invitation(&c, &never).await, ErrorCode::NotFound, l, "unknown");
        let late = ok(store.invite_team_member(&a, &slug, input!(InviteInput, &json!({"email": uc.email, "role": "writer", "expires_in_days": 1}))).await, l, "invite again");
        store.clock().advance_ms(2 * DAY_MS);
        err(store.accept_invitation(&c, &late.id).await, ErrorCode::Conflict, l, "expired");
        // An admin's decision about a member withdraws their open
        // invitations: demoted or removed, they cannot accept their way
        // back, and nobody sees the withdrawn ones as open.
        let upgrade = ok(store.invite_team_member(&a, &slug, input!(InviteInput, &json!({"email": uc.email, "role": "admin"}))).await, l, "invite c as admin");
        ok(store.set_team_role(&a, &slug, &c.user_id, SetRoleInput { role: TeamRole::Reader }).await, l, "c's role decided");
        err(store.accept_invitation(&c, &upgrade.id).await, ErrorCode::Conflict, l, "withdrawn by a role change");
        assert_eq!(ok(store.get_team(&c, &slug).await, l, "c's view").team.role, TeamRole::Reader, "[{l}] still a reader");
        assert!(ok(store.list_invitations(&c).await, l, "c's list").invitations.is_empty(), "[{l}]");
        assert!(ok(store.get_team(&a, &slug).await, l, "show").invitations.iter().all(|i| i.id != upgrade.id), "[{l}]");
        let rejoin = ok(store.invite_team_member(&a, &slug, input!(InviteInput, &json!({"email": uc.email, "role": "writer"}))).await, l, "invite c again");
        ok(store.remove_team_member(&a, &slug, &c.user_id).await, l, "remove c");
        err(store.accept_invitation(&c, &rejoin.id).await, ErrorCode::Conflict, l, "withdrawn by the removal");
        err(store.get_team(&c, &slug).await, ErrorCode::NotFound, l, "c stays out");
        // An invitation sent after the decision is the admins' new word.
        let welcome = ok(store.invite_team_member(&a, &slug, input!(InviteInput, &json!({"email": uc.email, "role": "reader"}))).await, l, "invite c afresh");
        ok(store.accept_invitation(&c, &welcome.id).await, l, "accept the fresh one");
        // The invitations an admin sent go when they stop being admin:
        // one to a second address of theirs is no way back in.
        let (ux, x) = user(&store, "inv-x").await;
        let (uy, y) = user(&store, "inv-y").await;
        add(&store, &a, l, &slug, &ux.email, TeamRole::Admin).await;
        let back_door = ok(store.invite_team_member(&x, &slug, input!(InviteInput, &json!({"email": uy.email, "role": "admin"}))).await, l, "x invites a second address");
        let by_a = ok(store.invite_team_member(&a, &slug, input!(InviteInput, &json!({"email": uy.email, "role": "reader"}))).await, l, "a invites it too");
        ok(store.set_team_role(&a, &slug, &x.user_id, SetRoleInput { role: TeamRole::Writer }).await, l, "x demoted");
        err(store.accept_invitation(&y, &back_door.id).await, ErrorCode::Conflict, l, "withdrawn with its admin's demotion");
        ok(store.set_team_role(&a, &slug, &x.user_id, SetRoleInput { role: TeamRole::Admin }).await, l, "x admin again");
        let again = ok(store.invite_team_member(&x, &slug, input!(InviteInput, &json!({"email": uy.email, "role": "admin"}))).await, l, "x invites it again");
        ok(store.remove_team_member(&a, &slug, &x.user_id).await, l, "x removed");
        err(store.accept_invitation(&y, &again.id).await, ErrorCode::Conflict, l, "withdrawn with its admin's removal");
        // Another admin's invitation to that address is theirs to keep.
        let joined = ok(store.accept_invitation(&y, &by_a.id).await, l, "y accepts a's invitation");
        assert_eq!(joined.team.role, TeamRole::Reader, "[{l}]");
        // An admin withdraws an open invitation: it cannot be accepted and
        // is no longer listed; again, nothing more to withdraw. One that was
        // accepted is a conflict; a reader may not; another team's admin,
        // or an id that never existed, finds none.
        let (uz, z) = user(&store, "inv-z").await;
        let open = ok(store.invite_team_member(&a, &slug, input!(InviteInput, &json!({"email": uz.email, "role": "writer"}))).await, l, "invite z");
        err(store.withdraw_invitation(&y, &slug, &open.id).await, ErrorCode::Forbidden, l, "a reader withdraws");
        let (_, other_admin) = user(&store, "inv-other").await;
        let other = team(&store, &other_admin, l, "invother").await;
        err(store.withdraw_invitation(&other_admin, &other, &open.id).await, ErrorCode::NotFound, l, "another team's admin");
        err(store.withdraw_invitation(&a, &slug, &never).await, ErrorCode::NotFound, l, "an id that never existed");
        assert!(ok(store.withdraw_invitation(&a, &slug, &open.id).await, l, "withdraw").removed, "[{l}]");
        assert!(!ok(store.withdraw_invitation(&a, &slug, &open.id).await, l, "withdraw again").removed, "[{l}]");
        err(store.accept_invitation(&z, &open.id).await, ErrorCode::Conflict, l, "a withdrawn invitation");
        assert!(ok(store.get_team(&a, &slug).await, l, "show").invitations.iter().all(|i| i.id != open.id), "[{l}]");
        err(store.withdraw_invitation(&a, &slug, &by_a.id).await, ErrorCode::Conflict, l, "an accepted invitation");
        let audit = ok(store.team_audit(&a, &slug).await, l, "audit");
        assert!(audit.events.iter().any(|e| e.action == TeamAction::InvitationWithdrawn && e.subject.as_deref() == Some(uz.email.as_str())), "[{l}] {audit:?}");
        let (ue, e) = user(&store, "inv-e").await;
        let gone = ok(store.invite_team_member(&a, &slug, input!(InviteInput, &json!({"email": ue.email, "role": "writer"}))).await, l, "invite e");
        ok(store.delete_team(&a, &slug).await, l, "delete");
        err(store.accept_invitation(&e, &gone.id).await, ErrorCode::NotFound, l, "a deleted team's invitation");
    }

    /// Joining takes the member's consent: an admin invites, the invitee
    /// accepts. Only the server's owner adds an account directly; another
    /// admin is refused before the address is looked up (a known and an
    /// unknown address get the same answer).
    async fn only_the_owner_adds_an_account_directly(store: Store, l: &str) {
        let (_, a) = user(&store, "direct-a").await;
        let (ub, b) = user(&store, "direct-b").await;
        let owner = store.owner().await.unwrap().expect("the database has an owner");
        let owner = Caller::new(owner.id);
        if owner.user_id == a.user_id {
            // SQLite's fresh database: a is its first user, so its owner;
            // a later user plays the admin who is not.
            let (_, c) = user(&store, "direct-c").await;
            return refused_then_owner(&store, &c, &a, &ub, &b, l).await;
        }
        refused_then_owner(&store, &a, &owner, &ub, &b, l).await;
    }

    /// The audit log lists a team's events in the order they happened, also
    /// those of one change within one millisecond (an accepted invitation
    /// and the membership it grants), which it ordered by their random ids.
    async fn audit_events_keep_their_order_within_a_millisecond(store: Store, l: &str) {
        let (_, a) = user(&store, "order-a").await;
        for round in 0..6 {
            let (ub, _) = user(&store, &format!("order-b{round}")).await;
            let slug = team(&store, &a, l, "order").await;
            add(&store, &a, l, &slug, &ub.email, TeamRole::Writer).await;
            let audit = ok(store.team_audit(&a, &slug).await, l, "audit");
            let actions: Vec<TeamAction> = audit.events.iter().map(|e| e.action).collect();
            assert_eq!(
                actions,
                vec![TeamAction::MemberAdded, TeamAction::InvitationAccepted, TeamAction::InvitationCreated, TeamAction::TeamCreated],
                "[{l}] round {round}: newest first"
            );
        }
    }

    /// The last admin cannot leave, be demoted, or erase their account
    /// while the team stands; the audit log records every change, for
    /// admins only.
    async fn last_admin_and_audit(store: Store, l: &str) {
        let (ua, a) = user(&store, "la-a").await;
        let (ub, b) = user(&store, "la-b").await;
        let slug = team(&store, &a, l, "lastadmin").await;
        err(store.set_team_role(&a, &slug, &a.user_id, SetRoleInput { role: TeamRole::Writer }).await, ErrorCode::Conflict, l, "demote the last admin");
        err(call(&store, &a, "delete_account", json!({})).await, ErrorCode::Conflict, l, "erase the last admin");
        add(&store, &a, l, &slug, &ub.email, TeamRole::Reader).await;
        err(store.team_audit(&b, &slug).await, ErrorCode::Forbidden, l, "a reader reads the audit");
        ok(store.set_team_role(&a, &slug, &ub.id, SetRoleInput { role: TeamRole::Admin }).await, l, "promote b");
        ok(store.remove_team_member(&b, &slug, &a.user_id).await, l, "b removes a");
        let mut audit = ok(store.team_audit(&b, &slug).await, l, "audit");
        // b joined by invitation: its two events aside, the membership
        // changes.
        audit.events.retain(|e| !matches!(e.action, TeamAction::InvitationCreated | TeamAction::InvitationAccepted));
        let actions: Vec<TeamAction> = audit.events.iter().map(|e| e.action).collect();
        assert_eq!(
            actions,
            vec![TeamAction::MemberRemoved, TeamAction::RoleChanged, TeamAction::MemberAdded, TeamAction::TeamCreated],
            "[{l}] newest first"
        );
        assert_eq!(audit.events[0].actor.as_ref().map(zm_contracts::UserId::as_str), Some(b.user_id.as_str()), "[{l}] who");
        assert_eq!(audit.events[0].user_id.as_ref().map(zm_contracts::UserId::as_str), Some(a.user_id.as_str()), "[{l}] whom");
        assert_eq!(audit.events[1].role, Some(TeamRole::Admin), "[{l}]");
        // Each named by their email too, as the account has it now.
        assert_eq!(audit.events[0].actor_email.as_deref(), Some(ub.email.as_str()), "[{l}] who, by email");
        assert_eq!(audit.events[0].user_email.as_deref(), Some(ua.email.as_str()), "[{l}] whom, by email");
        let created = audit.events.last().expect("the team's creation");
        assert_eq!(created.actor_email.as_deref(), Some(ua.email.as_str()), "[{l}]");
        ok(call(&store, &a, "delete_account", json!({})).await, l, "a is no admin any more");
        // An erased account keeps its id in the log, and has no email.
        let audit = ok(store.team_audit(&b, &slug).await, l, "audit after a's erasure");
        let removal = audit.events.iter().find(|e| e.action == TeamAction::MemberRemoved).expect("the removal");
        assert_eq!(removal.user_id.as_ref().map(zm_contracts::UserId::as_str), Some(a.user_id.as_str()), "[{l}]");
        assert_eq!(removal.user_email, None, "[{l}] an erased account's email is gone");
        assert_eq!(removal.actor_email.as_deref(), Some(ub.email.as_str()), "[{l}]");
        // Also from the invitation events, which name their invitee by
        // address: an invited member who erases their account.
        let (uc, c) = user(&store, "la-c").await;
        add(&store, &b, l, &slug, &uc.email, TeamRole::Reader).await;
        let before = ok(store.team_audit(&b, &slug).await, l, "audit with c");
        assert!(format!("{before:?}").contains(&uc.email), "[{l}] the invitation names c while c exists");
        ok(call(&store, &c, "delete_account", json!({})).await, l, "c erases");
        let after = ok(store.team_audit(&b, &slug).await, l, "audit after c's erasure");
        assert!(!format!("{after:?}").contains(&uc.email), "[{l}] c's address is gone: {after:?}");
        assert_eq!(after.events.len(), before.events.len() + 1, "[{l}] no event lost, c's removal added");
    }

    /// Every role × every tool against a team's memory: the admin (its
    /// author), a writer, a reader, a former member, a non-member and
    /// another team's admin. Members read it; writers write into the team;
    /// owner-only changes stay the author's; everyone else gets exactly the
    /// answer a memory that never existed gets.
    async fn every_role_against_every_tool(store: Store, l: &str) {
        let (_, admin) = user(&store, "er-admin").await;
        let (uw, writer) = user(&store, "er-writer").await;
        let (ur, reader) = user(&store, "er-reader").await;
        let (uf, former) = user(&store, "er-former").await;
        let (_, outsider) = user(&store, "er-out").await;
        let (_, stranger) = user(&store, "er-other").await;
        let slug = team(&store, &admin, l, "everyrole").await;
        let scope = format!("team.{slug}");
        team(&store, &stranger, l, "elsewhere").await;
        for (u, role) in [(&uw, TeamRole::Writer), (&ur, TeamRole::Reader), (&uf, TeamRole::Writer)] {
            add(&store, &admin, l, &slug, &u.email, role).await;
        }
        let m = mem(&store, &admin, l, json!({"content": "Team fact: the ledger service shards by tenant.", "kind": "fact", "scope": scope, "entities": [{"name": "ledger-service", "type": "service"}]})).await;
        ok(store.remove_team_member(&admin, &slug, &uf.id).await, l, "remove the former member");
        let roles: [(&str, &Caller, bool, bool); 6] = [
            ("admin", &admin, true, true),
            ("writer", &writer, true, true),
            ("reader", &reader, true, false),
            ("former member", &former, false, false),
            ("non-member", &outsider, false, false),
            ("another team's admin", &stranger, false, false),
        ];
        for (name, who, member, can_write) in roles {
            let what = |tool: &str| format!("{name} × {tool}");
            let is_author = name == "admin";
            // Reads.
            let hits = recall_ids(&store, who, l, json!({"query": "ledger service shards tenant", "scopes": ["*"]})).await;
            assert_eq!(hits.contains(&m), member, "[{l}] {}", what("recall *"));
            let hits = recall_ids(&store, who, l, json!({"query": "ledger service shards tenant", "scopes": [scope]})).await;
            assert_eq!(hits.contains(&m), member, "[{l}] {}", what("recall team scope"));
            let brief = ok(call(&store, who, "build_context", json!({"topic": "ledger shards", "briefing": true})).await, l, "briefing");
            assert_eq!(brief.to_string().contains(&m), member, "[{l}] {}", what("build_context"));
            let export = ok(call(&store, who, "export_memories", json!({"scopes": ["*"]})).await, l, "export");
            assert_eq!(export.to_string().contains(&m), member, "[{l}] {}", what("export_memories"));
            let ents = ok(call(&store, who, "entities", json!({"scope": scope})).await, l, "entities");
            assert_eq!(ents.to_string().contains("ledger-service"), member, "[{l}] {} {ents}", what("entities"));
            let got = store.get_memory(who, &zm_contracts::MemoryId::parse(&m).unwrap()).await;
            assert_eq!(got.is_ok(), member, "[{l}] {}", what("get_memory"));
            // Owner-only changes: only the author may.
            for (tool, extra) in [
                ("forget", json!({})),
                ("restore_memory", json!({})),
                ("close_loop", json!({})),
                ("share", json!({"scope": scope})),
                ("promote_rule", json!({"applies_scope": scope})),
                // Conflicts are their author's review queue.
                ("challenge", json!({"reason": "doubted"})),
            ] {
                if is_author {
                    continue;
                }
                let mut on_m = extra.clone();
                on_m["memory_id"] = json!(m);
                let mut on_never = extra;
                on_never["memory_id"] = json!(NEVER);
                let a = call(&store, who, tool, on_m).await.expect_err(&what(tool));
                // A member reads the memory, but it is another current
                // member's: theirs alone to change (TEAMS.md: `not_found`,
                // admins included), so every change but a share reads
                // like a memory that never existed. A share is checked
                // against its target first: a writer, who may share into
                // the team, is told the memory is not theirs to share
                // (`conflict`); a reader, who shares nothing into it, and
                // anyone outside the team, for whom it reads like a scope
                // that does not exist, are `forbidden`. Everyone outside
                // gets exactly what a memory that never existed gets.
                let expected = match tool {
                    "share" if member && can_write => ErrorCode::Conflict,
                    "share" => ErrorCode::Forbidden,
                    _ => ErrorCode::NotFound,
                };
                assert_eq!(a.code, expected, "[{l}] {} {a:?}", what(tool));
                if !member || expected == ErrorCode::NotFound {
                    let n = call(&store, who, tool, on_never).await.expect_err(&what(tool));
                    assert_eq!(shape(&a, &m), shape(&n, NEVER), "[{l}] {}", what(tool));
                }
            }
            // A link shows in every reader's recall of both ends: writers
            // may link to the team's memory, a reader is `forbidden`, the
            // rest get not_found.
            let own = mem(&store, who, l, json!({"content": format!("{name}'s own note about shards."), "kind": "fact", "scope": "personal"})).await;
            let linked = call(&store, who, "link", json!({"src": own, "dst": m, "type": "relates_to"})).await;
            assert_eq!(linked.is_ok(), can_write, "[{l}] {} {linked:?}", what("link"));
            if member && !can_write {
                assert_eq!(linked.as_ref().unwrap_err().code, ErrorCode::Forbidden, "[{l}] {}", what("link"));
            }
            if !member {
                let never = call(&store, who, "link", json!({"src": own, "dst": NEVER, "type": "relates_to"})).await;
                assert_eq!(shape(&linked.unwrap_err(), &m), shape(&never.unwrap_err(), NEVER), "[{l}] {}", what("link"));
            }
            // Writes into the team.
            let wrote = call(&store, who, "remember", json!({"content": format!("{name} writes a team note."), "kind": "fact", "scope": scope})).await;
            assert_eq!(wrote.is_ok(), can_write, "[{l}] {} {wrote:?}", what("remember"));
            let moved = call(&store, who, "move_memories", json!({"memory_ids": [own], "scope": scope})).await;
            assert_eq!(moved.is_ok(), can_write, "[{l}] {} {moved:?}", what("move_memories"));
            for refused in [wrote, moved].into_iter().filter_map(Result::err) {
                assert_eq!(refused.code, ErrorCode::Forbidden, "[{l}] {}", what("write"));
            }
            // Conflicts of the team's memory are never listed to outsiders.
            let listed = ok(call(&store, who, "list_conflicts", json!({})).await, l, "list_conflicts");
            if !member {
                assert!(!listed.to_string().contains(&m), "[{l}] {} {listed}", what("list_conflicts"));
            }
        }
        // Nor does the team's admin change a current member's memory: it
        // answers exactly like one that never existed (only what the
        // steward holds is the admins' to change for it).
        let by_writer = mem(&store, &writer, l, json!({"content": "Team fact: the ledger service replays its journal at start.", "kind": "fact", "scope": scope})).await;
        for (tool, extra) in [
            ("forget", json!({})),
            ("restore_memory", json!({})),
            ("close_loop", json!({})),
            ("promote_rule", json!({"applies_scope": scope})),
            ("challenge", json!({"reason": "doubted"})),
        ] {
            let mut on_m = extra.clone();
            on_m["memory_id"] = json!(by_writer);
            let mut on_never = extra;
            on_never["memory_id"] = json!(NEVER);
            let what = format!("the admin × {tool} on a writer's memory");
            let a = err(call(&store, &admin, tool, on_m).await, ErrorCode::NotFound, l, &what);
            let n = call(&store, &admin, tool, on_never).await.expect_err(&what);
            assert_eq!(shape(&a, &by_writer), shape(&n, NEVER), "[{l}] {what}");
        }
    }

    /// A disabled admin signs in nowhere, so the last admin whose account
    /// is enabled cannot leave, be demoted or erase their account while
    /// the team stands, however many disabled admins it has; a disabled
    /// admin is still demoted or removed while an enabled one remains.
    /// Enabled again, an admin counts again.
    async fn a_disabled_admin_does_not_count_as_the_last(store: Store, l: &str) {
        let (_, a) = user(&store, "dis-a").await;
        let (ub, _) = user(&store, "dis-b").await;
        let (uc, _) = user(&store, "dis-c").await;
        let slug = team(&store, &a, l, "disabled").await;
        add(&store, &a, l, &slug, &ub.email, TeamRole::Admin).await;
        add(&store, &a, l, &slug, &uc.email, TeamRole::Admin).await;
        for u in [&ub, &uc] {
            assert!(ok(store.disable_user(&u.id).await, l, "disable").is_some(), "[{l}] disabled");
        }
        err(store.remove_team_member(&a, &slug, &a.user_id).await, ErrorCode::Conflict, l, "the last enabled admin leaves");
        err(store.set_team_role(&a, &slug, &a.user_id, SetRoleInput { role: TeamRole::Writer }).await, ErrorCode::Conflict, l, "the last enabled admin is demoted");
        err(call(&store, &a, "delete_account", json!({})).await, ErrorCode::Conflict, l, "the last enabled admin erases their account");
        ok(store.set_team_role(&a, &slug, &ub.id, SetRoleInput { role: TeamRole::Writer }).await, l, "a disabled admin is demoted");
        ok(store.remove_team_member(&a, &slug, &uc.id).await, l, "a disabled admin is removed");
        ok(store.set_team_role(&a, &slug, &ub.id, SetRoleInput { role: TeamRole::Admin }).await, l, "b is admin again");
        assert!(ok(store.enable_user(&ub.id).await, l, "enable b"), "[{l}] enabled");
        ok(store.set_team_role(&a, &slug, &a.user_id, SetRoleInput { role: TeamRole::Writer }).await, l, "a steps down beside an enabled admin");
        let shown = ok(store.get_team(&a, &slug).await, l, "show");
        let admins: Vec<&str> = shown.members.iter().filter(|m| m.role == TeamRole::Admin).map(|m| m.user_id.as_str()).collect();
        assert_eq!(admins, vec![ub.id.as_str()], "[{l}] {:?}", shown.members);
    }

    /// An expired invitation can no longer be accepted: the admins' list
    /// of open invitations leaves it out, as it does a withdrawn one, and
    /// withdrawing it (a page drawn before it expired) marks it withdrawn
    /// (`removed: true`, in the audit log); again, nothing is left to
    /// withdraw.
    async fn an_expired_invitation_is_not_listed_and_can_be_withdrawn(store: Store, l: &str) {
        let (_, a) = user(&store, "exp-a").await;
        let (uc, c) = user(&store, "exp-c").await;
        let slug = team(&store, &a, l, "expired").await;
        let inv = ok(store.invite_team_member(&a, &slug, input!(InviteInput, &json!({"email": uc.email, "role": "writer", "expires_in_days": 1}))).await, l, "invite");
        let open = ok(store.invite_team_member(&a, &slug, input!(InviteInput, &json!({"email": uc.email, "role": "reader", "expires_in_days": 7}))).await, l, "invite for longer");
        let listed = |shown: zm_contracts::teams::TeamDetail| shown.invitations.into_iter().map(|i| i.id).collect::<Vec<_>>();
        let before = listed(ok(store.get_team(&a, &slug).await, l, "show"));
        assert!(before.len() == 2 && before.contains(&inv.id) && before.contains(&open.id), "[{l}] both open: {before:?}");
        store.clock().advance_ms(2 * DAY_MS);
        assert_eq!(listed(ok(store.get_team(&a, &slug).await, l, "show after the expiry")), vec![open.id.clone()], "[{l}] the expired one is left out");
        let theirs: Vec<_> = ok(store.list_invitations(&c).await, l, "c's list").invitations.into_iter().map(|i| i.id).collect();
        assert_eq!(theirs, vec![open.id.clone()], "[{l}] nor does the invitee see it");
        assert!(ok(store.withdraw_invitation(&a, &slug, &inv.id).await, l, "withdraw the expired one").removed, "[{l}] withdrawn");
        assert!(!ok(store.withdraw_invitation(&a, &slug, &inv.id).await, l, "withdraw it again").removed, "[{l}] already withdrawn");
        let e = err(store.accept_invitation(&c, &inv.id).await, ErrorCode::Conflict, l, "accept the withdrawn one");
        assert!(e.message.contains("withdrawn"), "[{l}] {}", e.message);
        let audit = ok(store.team_audit(&a, &slug).await, l, "audit");
        let withdrawn: Vec<_> = audit.events.iter().filter(|e| e.action == TeamAction::InvitationWithdrawn).map(|e| (e.subject.clone(), e.role)).collect();
        assert_eq!(withdrawn, vec![(Some(uc.email.clone()), Some(TeamRole::Writer))], "[{l}] {audit:?}");
    }

    /// An invitation withdrawn by a change of membership goes in the
    /// team's audit log as one an admin withdraws does: by whoever made
    /// the change, naming as the member concerned the one whose change it
    /// was (the invitee whose role was decided or who was removed, the
    /// admin who sent it and was demoted, an account erased).
    async fn withdrawals_by_a_change_of_membership_are_recorded(store: Store, l: &str) {
        let (_, a) = user(&store, "wd-a").await;
        let (uc, c) = user(&store, "wd-c").await;
        let (ux, x) = user(&store, "wd-x").await;
        let (uz, z) = user(&store, "wd-z").await;
        let (uy, _) = user(&store, "wd-y").await;
        let slug = team(&store, &a, l, "withdrawn").await;
        add(&store, &a, l, &slug, &uc.email, TeamRole::Reader).await;
        add(&store, &a, l, &slug, &ux.email, TeamRole::Admin).await;
        add(&store, &a, l, &slug, &uz.email, TeamRole::Admin).await;
        let invite = |by: &Caller, email: &str, role: &str| {
            let (store, slug, by, raw) = (&store, slug.as_str(), by.clone(), json!({"email": email, "role": role}));
            async move { ok(store.invite_team_member(&by, slug, input!(InviteInput, &raw)).await, l, "invite") }
        };
        // The withdrawals in the team's audit log, oldest first: (who,
        // the member concerned, the address, the role).
        let withdrawals = || {
            let (store, slug, a) = (&store, slug.as_str(), a.clone());
            async move {
                let audit = ok(store.team_audit(&a, slug).await, l, "audit");
                let mut events: Vec<Withdrawal> = audit
                    .events
                    .iter()
                    .filter(|e| e.action == TeamAction::InvitationWithdrawn)
                    .map(|e| (e.actor.as_ref().map(|u| u.as_str().to_string()), e.user_id.as_ref().map(|u| u.as_str().to_string()), e.subject.clone(), e.role))
                    .collect();
                events.reverse();
                events
            }
        };
        // c's role decided: the invitation to c goes.
        invite(&a, &uc.email, "admin").await;
        ok(store.set_team_role(&a, &slug, &c.user_id, SetRoleInput { role: TeamRole::Writer }).await, l, "c's role changed");
        let event = |actor: &Caller, concerned: &Caller, email: &str, role: TeamRole| (Some(actor.user_id.clone()), Some(concerned.user_id.clone()), Some(email.to_string()), Some(role));
        let mut expected = vec![event(&a, &c, &uc.email, TeamRole::Admin)];
        assert_eq!(withdrawals().await, expected, "[{l}] by a role change");
        // x demoted: the invitation x sent goes.
        invite(&x, &uy.email, "writer").await;
        ok(store.set_team_role(&a, &slug, &x.user_id, SetRoleInput { role: TeamRole::Writer }).await, l, "x demoted");
        expected.push(event(&a, &x, &uy.email, TeamRole::Writer));
        assert_eq!(withdrawals().await, expected, "[{l}] by the inviter's demotion");
        // c removed: the invitation to c goes.
        invite(&a, &uc.email, "reader").await;
        ok(store.remove_team_member(&a, &slug, &c.user_id).await, l, "c removed");
        expected.push(event(&a, &c, &uc.email, TeamRole::Reader));
        assert_eq!(withdrawals().await, expected, "[{l}] by a removal");
        // z erases their account: the invitation z sent goes, z its actor.
        invite(&z, &uy.email, "reader").await;
        ok(call(&store, &z, "delete_account", json!({})).await, l, "z erases their account");
        expected.push(event(&z, &z, &uy.email, TeamRole::Reader));
        assert_eq!(withdrawals().await, expected, "[{l}] by an erasure");
    }

    /// A project shared by its short name (`proj.<name>`: the caller's own
    /// project of that name) is unshared by the same short name.
    async fn a_project_is_unshared_by_the_name_it_was_shared_by(store: Store, l: &str) {
        let (_, a) = user(&store, "short-a").await;
        let slug = team(&store, &a, l, "short").await;
        let name = unique("ledger");
        let short = format!("proj.{name}");
        let full = format!("proj.{}.{name}", zm_contracts::scope::label_for(&a.user_id));
        let note = mem(&store, &a, l, json!({"content": "The ledger closes at midnight.", "kind": "fact", "scope": short})).await;
        let written = ok(store.get_memory(&a, &zm_contracts::MemoryId::parse(&note).unwrap()).await, l, "the note");
        assert_eq!(written.scope, full, "[{l}] the short name is the caller's own project");
        let shared = ok(store.share_project_with_team(&a, &slug, input!(ShareProjectInput, &json!({"scope": short}))).await, l, "share by the short name");
        assert_eq!(shared.scope, full, "[{l}]");
        let removed = ok(store.unshare_project_from_team(&a, &slug, &short).await, l, "unshare by the short name");
        assert!(removed.removed, "[{l}]");
        assert!(ok(store.get_team(&a, &slug).await, l, "show").projects.is_empty(), "[{l}] no longer shared");
        let audit = ok(store.team_audit(&a, &slug).await, l, "audit");
        assert!(audit.events.iter().any(|e| e.action == TeamAction::ProjectUnshared && e.subject.as_deref() == Some(full.as_str())), "[{l}] {audit:?}");
    }
}

/// A team's export on a pool of one connection (as a pool's worth of
/// exports at once would leave it): the export gives its connection back
/// before it looks up the successors of superseded memories on another,
/// so it answers instead of waiting out the pool's timeout (`internal`).
#[tokio::test]
async fn a_team_export_needs_one_connection_at_a_time() {
    let dir = tempfile::Builder::new()
        .prefix("one-conn-")
        .tempdir_in(scratch_root())
        .expect("create a temporary directory");
    let mut urls = vec![("sqlite", zm_store::sqlite_url(&dir.path().join("zm.db")))];
    if let Some(url) = zm_store::test_database_url() {
        urls.push(("postgres", url));
    }
    for (l, url) in urls {
        let mut opts = zm_store::OpenOptions::new(url);
        opts.max_connections = 1;
        let store = Store::open_with(opts)
            .await
            .expect("open with one connection");
        let (_, a) = user(&store, "one-conn").await;
        let slug = team(&store, &a, l, "oneconn").await;
        let scope = format!("team.{slug}");
        let old = mem(&store, &a, l, json!({"content": "The release train leaves on Tuesdays.", "scope": scope, "kind": "convention"})).await;
        let new = mem(&store, &a, l, json!({"content": "The release train leaves on Wednesdays.", "scope": scope, "kind": "convention",
                                            "links": [{"dst": old, "type": "supersedes"}]})).await;
        let export = ok(
            store.export_team(&a, &slug).await,
            l,
            "export on one connection",
        );
        assert_eq!(export.items.len(), 2, "[{l}]");
        let old_item = export
            .items
            .iter()
            .find(|i| i.id.as_str() == old)
            .expect("the old version");
        assert_eq!(
            old_item
                .superseded_by
                .as_ref()
                .map(zm_contracts::MemoryId::as_str),
            Some(new.as_str()),
            "[{l}]"
        );
        store.close().await;
    }
}

/// PostgreSQL only: while a change of the team holds its row (a role
/// change in progress, demoting admin X), a non-member's change to the
/// team is answered `not_found` without waiting for it, exactly as for a
/// team that does not exist: waiting would tell them the team exists, and
/// let them queue against it. X's own change, a member's, waits, then
/// reads the role the change left (`forbidden`). The non-member's call
/// must come back while the row is still held: the row is released only
/// after it has, or after 20 s, when the test fails.
#[tokio::test]
async fn a_non_member_is_answered_without_queueing_behind_the_teams_changes() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_non_member_is_answered_without_queueing_behind_the_teams_changes")
            .await
    else {
        return;
    };
    let (_, admin) = user(&store, "nq-admin").await;
    let (ux, x) = user(&store, "nq-x").await;
    let (_, outsider) = user(&store, "nq-out").await;
    let slug = team(&store, &admin, l, "nq").await;
    let scope = format!("team.{slug}");
    add(&store, &admin, l, &slug, &ux.email, TeamRole::Admin).await;
    let invitation = |email: &str| input!(InviteInput, &json!({"email": email, "role": "reader"}));
    let missing = unique("nosuchteam");
    let never = err(
        store
            .invite_team_member(&outsider, &missing, invitation("someone@example.com"))
            .await,
        ErrorCode::NotFound,
        l,
        "an invitation to a team that does not exist",
    );
    let (change, pid) = hold_a_demotion(&raw, &slug, &scope, &ux.id).await;
    let answered = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        store.invite_team_member(&outsider, &slug, invitation("someone@example.com")),
    )
    .await;
    let inviting = {
        let (store, x, slug, input) = (
            store.clone(),
            x.clone(),
            slug.clone(),
            invitation("someone-else@example.com"),
        );
        tokio::spawn(async move { store.invite_team_member(&x, &slug, input).await })
    };
    let waited = waits_on(&raw, pid, &inviting).await;
    change.commit().await.expect("commit the role change");
    let done = inviting.await.expect("the member's invitation's task");
    let Ok(answered) = answered else {
        panic!("[{l}] a non-member's change waited on the team's row for 20 s");
    };
    let e = err(
        answered,
        ErrorCode::NotFound,
        l,
        "a non-member's change while the team's row is held",
    );
    assert_eq!(
        shape(&e, &slug),
        shape(&never, &missing),
        "[{l}] it reads like a team that does not exist"
    );
    assert!(
        waited,
        "[{l}] the member's change did not wait for the team's row: {done:?}"
    );
    err(
        done,
        ErrorCode::Forbidden,
        l,
        "a change by an admin demoted meanwhile",
    );
}

/// A withdrawal in a team's audit log: (who, the member concerned, the
/// address, the role).
type Withdrawal = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<TeamRole>,
);
