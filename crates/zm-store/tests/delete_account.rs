//! `delete_account`, on every backend: it erases the caller (memories,
//! entities, tokens, the account) idempotently and leaves another user's
//! memories — even ones linked to the erased user's, or naming an entity
//! the erased user named first — whole.
//!
//! Each test runs once per backend through [`backend_tests!`]:
//! `<test>::sqlite` always, `<test>::postgres` when `ZM_TEST_DATABASE_URL`
//! is set. Assertion messages name the backend.

mod common;

use common::*;
use serde_json::json;
use zm_contracts::ErrorCode;
use zm_store::{Caller, Store, Transport};

backend_tests! {
    async fn delete_account_erases_the_caller_and_leaves_others_whole(store: Store, l: &str) {
        let (_, a) = user(&store, "del-a").await;
        let (b_user, b) = user(&store, "del-b").await;
        let a_mem = mem(&store, &a, l, json!({"content": "A keeps this.", "scope": "core", "entities": [{"name": "KeepMe", "type": "tool"}]})).await;
        let project = project_of(&store, &a, l, "/src/shared-team").await;
        store
            .add_scope_member(&a.user_id, &project, &b.user_id, zm_store::Role::Writer)
            .await
            .unwrap();
        let b_mem = mem(&store, &b, l, json!({"content": "B's decision in A's project.", "scope": project, "kind": "decision", "entities": [{"name": "Billing"}, {"name": "Ledger"}]})).await;
        // A names B's entity too: A's memory anchors to B's entity row.
        let a_billing = mem(&store, &a, l, json!({"content": "A's note on how the invoices are retried.", "scope": project, "entities": [{"name": "billing"}]})).await;
        ok(
            call(
                &store,
                &b,
                "share",
                json!({"memory_id": b_mem, "scope": project}),
            )
            .await,
            l,
            "B shares into A's project",
        );
        // A's memory linked to B's: the link goes with B's memory, A's row stays.
        let a_old = mem(
            &store,
            &a,
            l,
            json!({"content": "A's old note.", "scope": project}),
        )
        .await;
        ok(
            call(
                &store,
                &a,
                "link",
                json!({"src": a_old, "dst": b_mem, "type": "relates_to"}),
            )
            .await,
            l,
            "link to B's memory",
        );
        // A's memories in the project, as A exports them, B's left out
        // (they go).
        let a_in_project = |v: &serde_json::Value| -> Vec<serde_json::Value> {
            v["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["id"] != b_mem.as_str())
                .cloned()
                .collect()
        };
        let project_before = ok(
            call(&store, &a, "export_memories", json!({"scopes": [project]})).await,
            l,
            "A's project before",
        );
        let (_, b_token) = store
            .create_token(&b.user_id, None, &["mcp:read"])
            .await
            .unwrap();
        let before = ok(
            call(
                &store,
                &a,
                "export_memories",
                json!({"scopes": ["core", "personal"]}),
            )
            .await,
            l,
            "A before",
        );
        let out = ok(
            call(&store, &b, "delete_account", json!({})).await,
            l,
            "delete",
        );
        assert_eq!(out["subject"], b_user.id.as_str(), "[{l}]");
        assert_eq!(
            (
                out["memories"].as_u64(),
                out["entities"].as_u64(),
                out["auth_deleted"].as_bool()
            ),
            (Some(1), Some(1), Some(true)),
            "[{l}] {out}"
        );
        assert!(
            store.user_by_id(&b.user_id).await.unwrap().is_none(),
            "[{l}]"
        );
        assert!(
            store.authenticate(&b_token).await.unwrap().is_none(),
            "[{l}] B's token is gone"
        );
        let after = ok(
            call(
                &store,
                &a,
                "export_memories",
                json!({"scopes": ["core", "personal"]}),
            )
            .await,
            l,
            "A after",
        );
        assert_eq!(before, after, "[{l}] A's memories are untouched");
        let project_after = ok(
            call(&store, &a, "export_memories", json!({"scopes": [project]})).await,
            l,
            "A's project after",
        );
        let kept = a_in_project(&project_after);
        assert_eq!(kept.len(), 2, "[{l}] a_billing and a_old: {project_after}");
        assert_eq!(a_in_project(&project_before), kept, "[{l}] A's memories in the project are untouched");
        // The entity A's memory names survives B (only B's Ledger went),
        // still anchored to A's memory.
        let listed = ok(call(&store, &a, "entities", json!({"scope": project})).await, l, "A's entities");
        let names: Vec<&str> = listed["entities"].as_array().unwrap().iter().filter_map(|e| e["name"].as_str()).collect();
        assert_eq!(names, vec!["Billing"], "[{l}] {listed}");
        let pack = ok(call(&store, &a, "build_context", json!({"topic": "invoices retried", "scopes": [project]})).await, l, "A's context");
        let memories = pack["memories"].as_array().unwrap();
        let hit = memories.iter().find(|m| m["id"] == a_billing.as_str()).unwrap_or_else(|| panic!("[{l}] {pack}"));
        assert!(hit.to_string().contains("Billing") || pack["entities"].to_string().contains("Billing"), "[{l}] A's memory keeps its anchor: {pack}");
        store
            .get_memory(&a, &zm_contracts::MemoryId::parse(&a_mem).unwrap())
            .await
            .expect("A's memory");
        store
            .get_memory(&a, &zm_contracts::MemoryId::parse(&a_old).unwrap())
            .await
            .expect("A's linked memory");
        err(
            store
                .get_memory(&a, &zm_contracts::MemoryId::parse(&b_mem).unwrap())
                .await,
            ErrorCode::NotFound,
            l,
            "B's memory is gone",
        );
        // A still writes in the project.
        ok(
            call(
                &store,
                &a,
                "remember",
                json!({"content": "Still here.", "scope": project}),
            )
            .await,
            l,
            "A writes",
        );
        // Idempotent: a second call erases nothing more.
        let again = ok(
            call(&store, &b, "delete_account", json!({})).await,
            l,
            "again",
        );
        assert_eq!(
            (again["memories"].as_u64(), again["auth_deleted"].as_bool()),
            (Some(0), Some(false)),
            "[{l}]"
        );
    }

    /// A project whose owner erases their account goes to its highest
    /// ranked remaining member, who administers it from then on.
    async fn an_erased_owners_project_keeps_an_admin(store: Store, l: &str) {
        let (_, a) = user(&store, "heir-a").await;
        let (_, reader) = user(&store, "heir-r").await;
        let (_, writer) = user(&store, "heir-w").await;
        let (_, later) = user(&store, "heir-l").await;
        let project = project_of(&store, &a, l, &format!("/src/{}", unique("heir"))).await;
        // The reader joined first; the writer outranks them.
        store.add_scope_member(&a.user_id, &project, &reader.user_id, zm_store::Role::Reader).await.unwrap();
        store.add_scope_member(&a.user_id, &project, &writer.user_id, zm_store::Role::Writer).await.unwrap();
        ok(call(&store, &a, "delete_account", json!({})).await, l, "the owner erases their account");
        err(store.add_scope_member(&reader.user_id, &project, &later.user_id, zm_store::Role::Reader).await, ErrorCode::Forbidden, l, "the reader does not administer it");
        store
            .add_scope_member(&writer.user_id, &project, &later.user_id, zm_store::Role::Reader)
            .await
            .unwrap_or_else(|e| panic!("[{l}] the writer administers the project now: {e}"));
        // A grant makes a missing project only in its grantor's own
        // namespace: nobody takes another's project before it exists.
        let theirs = zm_contracts::scope::project_scope(&writer.user_id, "not_yet");
        err(store.add_scope_member(&later.user_id, &theirs, &later.user_id, zm_store::Role::Admin).await, ErrorCode::Forbidden, l, "another's project, before it exists");
        let mine = zm_contracts::scope::project_scope(&later.user_id, "not_yet");
        store.add_scope_member(&later.user_id, &mine, &reader.user_id, zm_store::Role::Reader).await.unwrap_or_else(|e| panic!("[{l}] one's own new project: {e}"));
    }

    /// An owner who erases their account unshares their projects as an
    /// unsharing does, but takes nothing with them: what a teammate shared
    /// there becomes private to that teammate, who can still forget it,
    /// while the project's heir no longer reads it; the teammate's rule
    /// for the project is revoked; the team's audit log records the
    /// unsharing and the owner's departure.
    async fn an_erased_owner_leaves_teammates_their_writes_in_its_projects(store: Store, l: &str) {
        let (_, admin) = user(&store, "ers-admin").await;
        let slug = create_team_of(&store, &admin, l, "ers").await;
        let (_, o) = team_member(&store, &admin, l, &slug, "ers-o", zm_contracts::TeamRole::Admin).await;
        let (_, w) = team_member(&store, &admin, l, &slug, "ers-w", zm_contracts::TeamRole::Writer).await;
        let (_, heir) = user(&store, "ers-heir").await;
        let project = project_of(&store, &o, l, &format!("/src/{}", unique("ers"))).await;
        store.add_scope_member(&o.user_id, &project, &heir.user_id, zm_store::Role::Reader).await.unwrap();
        let input: zm_contracts::teams::ShareProjectInput = input!(zm_contracts::teams::ShareProjectInput, &json!({"scope": project}));
        ok(store.share_project_with_team(&o, &slug, input).await, l, "O shares the project with the team");
        let tag = unique("e").replace('-', "");
        let m = mem(&store, &w, l, json!({"content": format!("Invoices are retried three times ({tag})."), "kind": "convention", "scope": project})).await;
        ok(call(&store, &w, "promote_rule", json!({"memory_id": m})).await, l, "W's rule for the project");
        // And one for the whole team, from another memory of W's there.
        let for_team = mem(&store, &w, l, json!({"content": format!("Refunds need two approvals ({tag})."), "kind": "convention", "scope": project})).await;
        ok(call(&store, &w, "promote_rule", json!({"memory_id": for_team, "applies_scope": format!("team.{slug}")})).await, l, "W's rule for the team");
        // O, an admin, invites someone; the invitation goes with O.
        let (invitee, x) = user(&store, "ers-x").await;
        let invite: zm_contracts::teams::InviteInput = input!(zm_contracts::teams::InviteInput, &json!({"email": invitee.email, "role": "reader"}));
        let sent = ok(store.invite_team_member(&o, &slug, invite).await, l, "O invites");
        let mid = zm_contracts::MemoryId::parse(&m).unwrap();
        ok(store.get_memory(&heir, &mid).await, l, "the project's member reads W's memory");
        ok(call(&store, &o, "delete_account", json!({})).await, l, "O erases their account");
        // The heir administers the project now, and reads nothing of W's.
        err(store.get_memory(&heir, &mid).await, ErrorCode::NotFound, l, "the heir reads W's memory");
        let kept = ok(store.get_memory(&w, &mid).await, l, "W reads their memory");
        assert_eq!(kept.visibility, zm_contracts::Visibility::Private, "[{l}] {kept:?}");
        let rules = store.list_rules(&w).await.unwrap();
        for id in [&m, &for_team] {
            let rule = rules.iter().find(|r| r.memory_id.as_str() == id.as_str()).expect("W keeps the rule's row");
            assert_eq!(rule.status, zm_store::rules::RuleState::Revoked, "[{l}] {id}: {rules:?}");
        }
        err(store.accept_invitation(&x, &sent.id).await, ErrorCode::Conflict, l, "the erased admin's invitation");
        ok(call(&store, &w, "forget", json!({"memory_id": m})).await, l, "W forgets their memory");
        let audit = ok(store.team_audit(&admin, &slug).await, l, "the team's audit");
        let actions: Vec<&str> = audit.events.iter().map(|e| e.action.as_str()).collect();
        // The erased admin's open invitation is withdrawn on the record.
        assert_eq!(&actions[..3], ["member_removed", "invitation_withdrawn", "project_unshared"], "[{l}] newest first: {actions:?}");
    }

    async fn delete_account_from_a_read_write_token_is_forbidden_and_erases_nothing(store: Store, l: &str) {
        let (u, local) = user(&store, "del-rw").await;
        let kept = mem(&store, &local, l, json!({"content": "Survives the injected agent.", "scope": "core"})).await;
        // An ordinary token, as `token create` and the first start mint it.
        let (_, secret) = store
            .create_token(&u.id, Some("agent"), &["mcp:read", "mcp:write"])
            .await
            .unwrap();
        let auth = store.authenticate(&secret).await.unwrap().expect("valid token");
        assert!(!auth.grant().can_delete_account(), "[{l}] {auth:?}");
        let agent = Caller::authenticated(&auth, Transport::Mcp);
        let e = err(
            call(&store, &agent, "delete_account", json!({})).await,
            ErrorCode::Forbidden,
            l,
            "delete_account with mcp:write only",
        );
        assert!(e.message.contains("account:delete"), "[{l}] names the scope: {e}");
        // Nothing was erased: the account, its token and its memory stay.
        assert!(store.user_by_id(&u.id).await.unwrap().is_some(), "[{l}]");
        assert!(store.authenticate(&secret).await.unwrap().is_some(), "[{l}]");
        store
            .get_memory(&local, &zm_contracts::MemoryId::parse(&kept).unwrap())
            .await
            .expect("the memory survives");
        // The same token still writes.
        ok(
            call(&store, &agent, "remember", json!({"content": "Still writing.", "scope": "core"})).await,
            l,
            "write with the same token",
        );
        // account:delete without mcp:write is refused at creation.
        err(
            store.create_token(&u.id, None, &["mcp:read", "account:delete"]).await,
            ErrorCode::ValidationFailed,
            l,
            "account:delete without mcp:write",
        );
    }

    async fn delete_account_with_the_account_delete_scope_succeeds(store: Store, l: &str) {
        let (u, local) = user(&store, "del-ok").await;
        mem(&store, &local, l, json!({"content": "Goes with the account.", "scope": "core"})).await;
        let (info, secret) = store
            .create_token(&u.id, Some("owner"), &["mcp:read", "mcp:write", "account:delete"])
            .await
            .unwrap();
        assert!(info.scopes.iter().any(|s| s == "account:delete"), "[{l}] {info:?}");
        let auth = store.authenticate(&secret).await.unwrap().expect("valid token");
        assert!(auth.grant().can_delete_account(), "[{l}] {auth:?}");
        let caller = Caller::authenticated(&auth, Transport::Rest);
        let out = ok(
            call(&store, &caller, "delete_account", json!({})).await,
            l,
            "delete_account with account:delete",
        );
        assert_eq!(out["subject"], u.id.as_str(), "[{l}] {out}");
        assert_eq!(out["memories"].as_u64(), Some(1), "[{l}] {out}");
        assert!(store.user_by_id(&u.id).await.unwrap().is_none(), "[{l}]");
    }
}
