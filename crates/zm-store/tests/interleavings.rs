//! Two writes that interleave on PostgreSQL, each forced by a transaction
//! held open on a raw connection (SQLite's writers take turns, so these
//! cannot meet there): the tool under test is started, seen waiting on the
//! held transaction's locks (`pg_locks`, polled in a bounded loop; no
//! assertion waits on the clock), and the held transaction then commits
//! what a concurrent call would have.
//!
//! - A forget or close of the caller's own private memory waits on its
//!   row; meanwhile it was shared into a team where the caller is now a
//!   reader. The role that counts is the one where the memory is now:
//!   `forbidden`, nothing retired.
//!   A supersede and a move of it alike. The same share twice at once
//!   lands once, and a supersede or a move of a memory shared meanwhile
//!   where the caller still writes goes ahead.
//! - A `remember` absorbed into a memory supersedes an older one whose
//!   rule follows it, while a `promote_rule` of the absorbing memory is
//!   inserting that memory's rule: the follow waits for the promotion and
//!   sees its rule (the old rule retires), where it met the one-rule
//!   index as a duplicate and answered `internal`.
//! - A promotion beside a revocation of the same rule (the dashboard's,
//!   which holds the rule's row only) asks for `force` and leaves it
//!   revoked (it promoted it again over the revocation).
//! - A member's link between the project owner's memories beside the
//!   member's erasure waits for it and is refused (it outlived the
//!   account as a link no key tied to it).
//! - An operator disables one of a team's two admins while the other
//!   leaves: the leave waits for the disable and is refused as the last
//!   enabled admin's (it counted the disabled one and left).

mod common;

use common::*;
use serde_json::json;
use zm_contracts::{ErrorCode, IdKind, TeamRole};
use zm_store::{Caller, Store};

/// A transaction begun on `raw`, and its backend's pid (what `waits_on`
/// looks for among the lock holders).
async fn held_transaction(raw: &sqlx::AnyPool) -> (sqlx::Transaction<'static, sqlx::Any>, i32) {
    let mut held = raw.begin().await.expect("begin");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *held)
        .await
        .expect("the backend's pid");
    (held, pid)
}

/// A transaction on `raw` holding `owner`'s writes of new memories (the
/// advisory lock `remember` and an import take), and its backend's pid.
async fn hold_writes_of(
    raw: &sqlx::AnyPool,
    owner: &str,
) -> (sqlx::Transaction<'static, sqlx::Any>, i32) {
    let (mut held, pid) = held_transaction(raw).await;
    let (class, key) = zm_store::db::owner_writes_lock(owner);
    sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
        .bind(class)
        .bind(key)
        .execute(&mut *held)
        .await
        .expect("hold the owner's writes");
    (held, pid)
}

/// A transaction on `raw` holding memory `id`'s row, and its backend's pid.
async fn hold_memory(
    raw: &sqlx::AnyPool,
    id: &str,
) -> (sqlx::Transaction<'static, sqlx::Any>, i32) {
    let (mut held, pid) = held_transaction(raw).await;
    sqlx::query("SELECT id FROM memories WHERE id = $1 FOR NO KEY UPDATE")
        .bind(id)
        .fetch_one(&mut *held)
        .await
        .expect("hold the memory's row");
    (held, pid)
}

/// Whether memory `id` is retired, read on `raw`.
async fn retired(raw: &sqlx::AnyPool, id: &str) -> bool {
    let at: Option<i64> = sqlx::query_scalar("SELECT invalidated_at FROM memories WHERE id = $1")
        .bind(id)
        .fetch_one(raw)
        .await
        .expect("read the memory");
    at.is_some()
}

/// `w`, a writer of team `slug`, starts `op` on their own private memory,
/// which waits on the memory's row; meanwhile the memory is shared into
/// the team and `w` demoted to reader there (committed together). What
/// `op` answered.
async fn own_change_meets_a_share_and_a_demotion<F, Fut, T>(
    store: &Store,
    raw: &sqlx::AnyPool,
    w: &Caller,
    slug: &str,
    memory: &str,
    op: F,
) -> Result<T, zm_contracts::ToolError>
where
    F: FnOnce(Store, Caller, String) -> Fut,
    Fut: std::future::Future<Output = Result<T, zm_contracts::ToolError>> + Send + 'static,
    T: Send + 'static,
{
    let (mut held, pid) = hold_memory(raw, memory).await;
    let task = tokio::spawn(op(store.clone(), w.clone(), memory.to_string()));
    let waited = waits_on(raw, pid, &task).await;
    let scope = format!("team.{slug}");
    sqlx::query(
        "UPDATE memories SET scope = $1, visibility = 'shared', shared_at = 1, shared_by = $2 WHERE id = $3",
    )
    .bind(&scope)
    .bind(&w.user_id)
    .bind(memory)
    .execute(&mut *held)
    .await
    .expect("share it");
    sqlx::query("SELECT id FROM teams WHERE slug = $1 FOR NO KEY UPDATE")
        .bind(slug)
        .fetch_one(&mut *held)
        .await
        .expect("hold the team's row");
    sqlx::query("UPDATE scope_members SET role = 'reader' WHERE scope = $1 AND user_id = $2")
        .bind(&scope)
        .bind(&w.user_id)
        .execute(&mut *held)
        .await
        .expect("demote");
    held.commit()
        .await
        .expect("commit the share and the demotion");
    let done = task.await.expect("the call's task");
    assert!(waited, "the call did not wait on the memory's row");
    done
}

#[tokio::test]
async fn a_forget_or_close_checks_the_role_where_the_memory_is_now() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_forget_or_close_checks_the_role_where_the_memory_is_now").await
    else {
        return;
    };
    let (_, admin) = user(&store, "ilv-admin").await;
    let slug = create_team_of(&store, &admin, l, "ilv").await;
    let (_, w) = team_member(&store, &admin, l, &slug, "ilv-w", TeamRole::Writer).await;
    let loop_ = mem(
        &store,
        &w,
        l,
        json!({"content": "Rotate the staging certificates before Friday.", "kind": "task", "scope": "personal"}),
    )
    .await;
    let fact = mem(
        &store,
        &w,
        l,
        json!({"content": "The staging certificates come from the internal CA.", "kind": "fact", "scope": "personal"}),
    )
    .await;

    let forgot = own_change_meets_a_share_and_a_demotion(
        &store,
        &raw,
        &w,
        &slug,
        &fact,
        |s, c, id| async move { forget(&s, &c, &id).await },
    )
    .await;
    let e = err(
        forgot,
        ErrorCode::Forbidden,
        l,
        "a forget of a memory shared meanwhile where the caller reads",
    );
    assert!(e.message.contains("yours is reader"), "{}", e.message);
    assert!(
        !retired(&raw, &fact).await,
        "the forget retired a team's memory as a reader"
    );

    let closed = own_change_meets_a_share_and_a_demotion(
        &store,
        &raw,
        &w,
        &slug,
        &loop_,
        |s, c, id| async move { close_loop(&s, &c, &id).await },
    )
    .await;
    let e = err(
        closed,
        ErrorCode::Forbidden,
        l,
        "a close of a loop shared meanwhile where the caller reads",
    );
    assert!(e.message.contains("yours is reader"), "{}", e.message);
    assert!(
        !retired(&raw, &loop_).await,
        "the close retired a team's loop as a reader"
    );

    // A supersede and a move of it are checked where it is now, as a
    // forget is.
    let old = mem(
        &store,
        &w,
        l,
        json!({"content": "The staging certificates last ninety days.", "kind": "fact", "scope": "personal"}),
    )
    .await;
    let superseded = own_change_meets_a_share_and_a_demotion(&store, &raw, &w, &slug, &old, |s, c, id| async move {
        call(
            &s,
            &c,
            "remember",
            json!({"content": "The staging certificates last thirty days now.", "kind": "fact", "scope": "personal",
                   "links": [{"dst": id, "type": "supersedes"}]}),
        )
        .await
    })
    .await;
    let e = err(
        superseded,
        ErrorCode::Forbidden,
        l,
        "a remember superseding a memory shared meanwhile where the caller reads",
    );
    assert!(e.message.contains("yours is reader"), "{}", e.message);
    assert!(
        !retired(&raw, &old).await,
        "the supersede retired a team's memory as a reader"
    );

    let kept = mem(
        &store,
        &w,
        l,
        json!({"content": "The staging certificates are renewed by a cron job.", "kind": "fact", "scope": "personal"}),
    )
    .await;
    let moved = own_change_meets_a_share_and_a_demotion(
        &store,
        &raw,
        &w,
        &slug,
        &kept,
        |s, c, id| async move {
            call(
                &s,
                &c,
                "move_memories",
                json!({"memory_ids": [id], "project_hint": "interleavings-elsewhere"}),
            )
            .await
        },
    )
    .await;
    let moved = ok(moved, l, "a move of a memory shared meanwhile");
    assert_eq!(moved["moved"], json!([]), "{moved}");
    assert!(
        moved["failed"][0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("yours is reader")),
        "{moved}"
    );
    assert_eq!(moved["failed"][0]["code"], "forbidden", "{moved}");
    let scope: String = sqlx::query_scalar("SELECT scope FROM memories WHERE id = $1")
        .bind(&kept)
        .fetch_one(&raw)
        .await
        .expect("the memory's scope");
    assert_eq!(
        scope,
        format!("team.{slug}"),
        "a reader moved a team's memory out of it"
    );
}

#[tokio::test]
async fn a_rule_follows_its_memory_after_a_promotion_of_the_absorbing_one() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_rule_follows_its_memory_after_a_promotion_of_the_absorbing_one").await
    else {
        return;
    };
    let (user_row, a) = user(&store, "ilv-rules").await;
    let word = unique("fri").replace('-', "");
    let old = mem(
        &store,
        &a,
        l,
        json!({"content": format!("Never deploy {word} on Fridays."), "kind": "preference", "scope": "personal"}),
    )
    .await;
    ok(
        call(&store, &a, "promote_rule", json!({"memory_id": old})).await,
        l,
        "promote the old preference",
    );
    let absorbing_text = format!("Deploys {word} stop on Fridays and before holidays.");
    let absorbing = mem(
        &store,
        &a,
        l,
        json!({"content": absorbing_text, "kind": "preference", "scope": "personal"}),
    )
    .await;

    // The middle of a `promote_rule` of the absorbing memory: its row
    // held, its rule inserted, not committed.
    let (mut held, pid) = hold_memory(&raw, &absorbing).await;
    sqlx::query(
        "INSERT INTO rules (id, owner_id, memory_id, text, layer, applies_scope, status, pinned, promoted_at, created_at) \
         VALUES ($1, $2, $3, 'The promotion held open', 'user', NULL, 'promoted', 0, 1, 1)",
    )
    .bind(IdKind::RuleCandidate.generate())
    .bind(&user_row.id)
    .bind(&absorbing)
    .execute(&mut *held)
    .await
    .expect("the promotion's rule");

    let task = {
        let (store, a, old, text) = (
            store.clone(),
            a.clone(),
            old.clone(),
            absorbing_text.clone(),
        );
        tokio::spawn(async move {
            call(
                &store,
                &a,
                "remember",
                json!({"content": text, "kind": "preference", "scope": "personal",
                       "links": [{"dst": old, "type": "supersedes"}]}),
            )
            .await
        })
    };
    let waited = waits_on(&raw, pid, &task).await;
    held.commit().await.expect("commit the promotion");
    let done = task.await.expect("the remember's task");
    assert!(
        waited,
        "the remember did not wait for the promotion: {done:?}"
    );
    let out = ok(
        done,
        l,
        "a remember absorbed into a memory promoted meanwhile",
    );
    assert_eq!(out["memory_id"], absorbing.as_str());
    assert_eq!(out["deduplicated"], true);

    let superseded_by: Option<String> =
        sqlx::query_scalar("SELECT superseded_by FROM memories WHERE id = $1")
            .bind(&old)
            .fetch_one(&raw)
            .await
            .expect("the old memory");
    assert_eq!(superseded_by.as_deref(), Some(absorbing.as_str()));
    let kept: (String, String) =
        sqlx::query_as("SELECT text, status FROM rules WHERE memory_id = $1")
            .bind(&absorbing)
            .fetch_one(&raw)
            .await
            .expect("the absorbing memory's rule");
    assert_eq!(
        kept,
        (
            "The promotion held open".to_string(),
            "promoted".to_string()
        )
    );
    let old_rule: String = sqlx::query_scalar("SELECT status FROM rules WHERE memory_id = $1")
        .bind(&old)
        .fetch_one(&raw)
        .await
        .expect("the old memory's rule");
    assert_eq!(old_rule, "revoked", "the old rule retires, as on a forget");
}

/// The other order: a revoked rule follows its memory onto the one being
/// promoted (committed while the promotion waits on the memory's row).
/// The promotion reads the rule the memory has once it holds it: a
/// revoked one asks for `force`, as it would have a moment later.
#[tokio::test]
async fn a_promotion_reads_the_rule_that_followed_meanwhile() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_promotion_reads_the_rule_that_followed_meanwhile").await
    else {
        return;
    };
    let (user_row, a) = user(&store, "ilv-follow").await;
    let word = unique("hol").replace('-', "");
    let target = mem(
        &store,
        &a,
        l,
        json!({"content": format!("Releases {word} wait until after the holidays."), "kind": "preference", "scope": "personal"}),
    )
    .await;
    let (mut held, pid) = hold_memory(&raw, &target).await;
    sqlx::query(
        "INSERT INTO rules (id, owner_id, memory_id, text, layer, applies_scope, status, pinned, promoted_at, created_at, revoked_reason) \
         VALUES ($1, $2, $3, 'A rule revoked before', 'user', NULL, 'revoked', 0, 1, 1, 'revoked by the user')",
    )
    .bind(IdKind::RuleCandidate.generate())
    .bind(&user_row.id)
    .bind(&target)
    .execute(&mut *held)
    .await
    .expect("the rule that followed");
    let task = {
        let (store, a, target) = (store.clone(), a.clone(), target.clone());
        tokio::spawn(
            async move { call(&store, &a, "promote_rule", json!({"memory_id": target})).await },
        )
    };
    let waited = waits_on(&raw, pid, &task).await;
    held.commit().await.expect("commit the follow");
    let done = task.await.expect("the promotion's task");
    assert!(waited, "the promotion did not wait on the memory: {done:?}");
    let e = err(
        done,
        ErrorCode::Conflict,
        l,
        "a promotion over a revoked rule that followed meanwhile",
    );
    assert!(e.message.contains("force"), "{}", e.message);
    let status: String = sqlx::query_scalar("SELECT status FROM rules WHERE memory_id = $1")
        .bind(&target)
        .fetch_one(&raw)
        .await
        .expect("the rule");
    assert_eq!(status, "revoked");
    ok(
        call(
            &store,
            &a,
            "promote_rule",
            json!({"memory_id": target, "force": true}),
        )
        .await,
        l,
        "promote it again, forced",
    );
}

/// A promotion of a memory whose rule is being revoked (from the
/// dashboard, which holds the rule's row, not the memory's) reads the
/// rule once the revocation is done: `force` is asked for, and the rule
/// stays revoked with its reason. The promotion read the rule unheld,
/// and its upsert then promoted it again over the revocation.
#[tokio::test]
async fn a_promotion_beside_a_revocation_does_not_undo_it() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_promotion_beside_a_revocation_does_not_undo_it").await
    else {
        return;
    };
    let (_, a) = user(&store, "ilv-revoke").await;
    let word = unique("frz").replace('-', "");
    let target = mem(
        &store,
        &a,
        l,
        json!({"content": format!("Deploys {word} freeze on Fridays after noon."), "kind": "convention", "scope": "personal"}),
    )
    .await;
    ok(
        call(&store, &a, "promote_rule", json!({"memory_id": target})).await,
        l,
        "promote",
    );
    // The revocation, under way: the rule's row changed, not committed.
    let (mut held, pid) = held_transaction(&raw).await;
    sqlx::query(
        "UPDATE rules SET status = 'revoked', pinned = 0, revoked_reason = 'not any more' WHERE memory_id = $1 AND status = 'promoted'",
    )
    .bind(&target)
    .execute(&mut *held)
    .await
    .expect("revoke");
    let task = {
        let (store, a, target) = (store.clone(), a.clone(), target.clone());
        tokio::spawn(
            async move { call(&store, &a, "promote_rule", json!({"memory_id": target})).await },
        )
    };
    let waited = waits_on(&raw, pid, &task).await;
    held.commit().await.expect("commit the revocation");
    let done = task.await.expect("the promotion's task");
    assert!(waited, "the promotion did not wait on the rule: {done:?}");
    let e = err(
        done,
        ErrorCode::Conflict,
        l,
        "a promotion beside a revocation",
    );
    assert!(e.message.contains("force"), "{}", e.message);
    let (status, reason): (String, Option<String>) =
        sqlx::query_as("SELECT status, revoked_reason FROM rules WHERE memory_id = $1")
            .bind(&target)
            .fetch_one(&raw)
            .await
            .expect("the rule");
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("revoked", Some("not any more"))
    );
}

/// The same share twice at once, and a supersede or a move of a memory
/// shared meanwhile where the caller still writes: each answers as a call
/// a moment later would (the share finds the memory where it asked it to
/// go; the supersede retires it and the move moves it on, checked where
/// it is now).
#[tokio::test]
async fn a_change_that_meets_a_harmless_share_goes_ahead() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_change_that_meets_a_harmless_share_goes_ahead").await
    else {
        return;
    };
    let (_, admin) = user(&store, "ilv-share-admin").await;
    let slug = create_team_of(&store, &admin, l, "ilvs").await;
    let scope = format!("team.{slug}");
    let (_, w) = team_member(&store, &admin, l, &slug, "ilv-share-w", TeamRole::Writer).await;
    for what in ["share", "supersede", "move"] {
        let m = mem(
            &store,
            &w,
            l,
            json!({"content": format!("The {what} runbook lives in the ops wiki."), "kind": "fact", "scope": "personal"}),
        )
        .await;
        let (mut held, pid) = hold_memory(&raw, &m).await;
        let task = {
            let (store, w, m, scope) = (store.clone(), w.clone(), m.clone(), scope.clone());
            tokio::spawn(async move {
                if what == "share" {
                    call(&store, &w, "share", json!({"memory_id": m, "scope": scope})).await
                } else if what == "move" {
                    call(
                        &store,
                        &w,
                        "move_memories",
                        json!({"memory_ids": [m], "project_hint": "interleavings-harmless"}),
                    )
                    .await
                } else {
                    call(
                        &store,
                        &w,
                        "remember",
                        json!({"content": "The runbook moved to the ops handbook.", "kind": "fact", "scope": "personal",
                               "links": [{"dst": m, "type": "supersedes"}]}),
                    )
                    .await
                }
            })
        };
        let waited = waits_on(&raw, pid, &task).await;
        sqlx::query(
            "UPDATE memories SET scope = $1, visibility = 'shared', shared_at = 1, shared_by = $2 WHERE id = $3",
        )
        .bind(&scope)
        .bind(&w.user_id)
        .bind(&m)
        .execute(&mut *held)
        .await
        .expect("share it");
        held.commit().await.expect("commit the share");
        let done = task.await.expect("the call's task");
        assert!(waited, "[{what}] the call did not wait: {done:?}");
        let out = ok(done, l, what);
        if what == "share" {
            assert_eq!(out["shared"], true, "{out}");
            assert!(!retired(&raw, &m).await);
        } else if what == "move" {
            // Moved on from where it was shared meanwhile, as a move a
            // moment later would.
            assert_eq!(out["moved"], json!([m]), "{out}");
            let now: String = sqlx::query_scalar("SELECT scope FROM memories WHERE id = $1")
                .bind(&m)
                .fetch_one(&raw)
                .await
                .expect("the memory's scope");
            assert_eq!(now, out["scope"].as_str().unwrap_or_default(), "{out}");
            assert_ne!(now, scope, "{out}");
        } else {
            let superseded_by: Option<String> =
                sqlx::query_scalar("SELECT superseded_by FROM memories WHERE id = $1")
                    .bind(&m)
                    .fetch_one(&raw)
                    .await
                    .expect("the old memory");
            assert_eq!(
                superseded_by.as_deref(),
                out["memory_id"].as_str(),
                "a writer's supersede of a memory shared meanwhile retires it"
            );
        }
    }
}

/// A write of a new memory into its owner's project, under way (it found
/// the project unshared, so its memory is private) when the owner shares
/// the project with a team for the first time: the share waits for it and
/// publishes it with the rest (it was left private for good: a later share
/// publishes nothing, and the team never saw it).
#[tokio::test]
async fn a_write_under_way_is_published_by_the_projects_first_share() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_write_under_way_is_published_by_the_projects_first_share").await
    else {
        return;
    };
    let (_, a) = user(&store, "ilv-first-share").await;
    let slug = create_team_of(&store, &a, l, "ilvf").await;
    let hint = format!("/src/{}", unique("ilv-first"));
    mem(
        &store,
        &a,
        l,
        json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": hint}),
    )
    .await;
    let project = project_of(&store, &a, l, &hint).await;
    let m = mem(
        &store,
        &a,
        l,
        json!({"content": "Ledger exports are CSV files.", "kind": "fact", "scope": "personal"}),
    )
    .await;
    // The write under way: it holds its owner's writes, as `remember`
    // does, and lands its private memory in the project.
    let (mut held, pid) = hold_writes_of(&raw, &a.user_id).await;
    sqlx::query("UPDATE memories SET scope = $1, visibility = 'private' WHERE id = $2")
        .bind(&project)
        .bind(&m)
        .execute(&mut *held)
        .await
        .expect("the private write");
    let task = {
        let (store, a, slug, project) = (store.clone(), a.clone(), slug.clone(), project.clone());
        tokio::spawn(async move {
            store
                .share_project_with_team(
                    &a,
                    &slug,
                    input!(
                        zm_contracts::teams::ShareProjectInput,
                        &json!({"scope": project})
                    ),
                )
                .await
        })
    };
    let waited = waits_on(&raw, pid, &task).await;
    held.commit().await.expect("commit the write");
    let done = task.await.expect("the share's task");
    assert!(waited, "the share did not wait for the write: {done:?}");
    ok(done, l, "share");
    let visibility: String = sqlx::query_scalar("SELECT visibility FROM memories WHERE id = $1")
        .bind(&m)
        .fetch_one(&raw)
        .await
        .expect("the memory");
    assert_eq!(
        visibility, "shared",
        "published with the project's first share"
    );
}

/// A member of two teams that share one project, removed from both at
/// once: each removal asks whether the member still reaches the project
/// through the other team. The second waits for the first (it holds the
/// project) and then hands the member's memories there to the project's
/// owner; both saw the other's grant, and the member kept shared
/// memories in a project they no longer reached.
#[tokio::test]
async fn removals_from_two_teams_sharing_a_project_hand_over_once() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("removals_from_two_teams_sharing_a_project_hand_over_once").await
    else {
        return;
    };
    let (_, x) = user(&store, "ilv-two-x").await;
    let t1 = create_team_of(&store, &x, l, "ilvt1").await;
    let t2 = create_team_of(&store, &x, l, "ilvt2").await;
    let hint = format!("/src/{}", unique("ilv-two"));
    mem(
        &store,
        &x,
        l,
        json!({"content": "The ledger closes at midnight.", "kind": "fact", "project_hint": hint}),
    )
    .await;
    let project = project_of(&store, &x, l, &hint).await;
    for slug in [&t1, &t2] {
        ok(
            store
                .share_project_with_team(
                    &x,
                    slug,
                    input!(
                        zm_contracts::teams::ShareProjectInput,
                        &json!({"scope": project})
                    ),
                )
                .await,
            l,
            "share",
        );
    }
    let (bob_user, bob) = team_member(&store, &x, l, &t1, "ilv-two-bob", TeamRole::Writer).await;
    join_team(&store, &x, &t2, &bob_user.email, TeamRole::Writer, l).await;
    let written = mem(
        &store,
        &bob,
        l,
        json!({"content": "Ledger exports are CSV files.", "kind": "fact", "scope": project}),
    )
    .await;
    // The other removal, under way: it holds the project, as a removal
    // does, and has taken bob out of the second team.
    let (mut held, pid) = held_transaction(&raw).await;
    sqlx::query("SELECT path FROM scopes WHERE path = $1 FOR NO KEY UPDATE")
        .bind(&project)
        .fetch_one(&mut *held)
        .await
        .expect("hold the project");
    sqlx::query("DELETE FROM scope_members WHERE scope = $1 AND user_id = $2")
        .bind(format!("team.{t2}"))
        .bind(&bob.user_id)
        .execute(&mut *held)
        .await
        .expect("the other removal");
    let task = {
        let (store, x, t1, bob_id) = (store.clone(), x.clone(), t1.clone(), bob.user_id.clone());
        tokio::spawn(async move { store.remove_team_member(&x, &t1, &bob_id).await })
    };
    let waited = waits_on(&raw, pid, &task).await;
    held.commit().await.expect("commit the other removal");
    let done = task.await.expect("the removal's task");
    assert!(waited, "the removal did not wait for the other: {done:?}");
    ok(done, l, "remove bob from the first team");
    let owner: String = sqlx::query_scalar("SELECT owner_id FROM memories WHERE id = $1")
        .bind(&written)
        .fetch_one(&raw)
        .await
        .expect("the memory");
    assert_eq!(owner, x.user_id, "bob's memory went to the project's owner");
}

/// An account erasing itself while it creates a team (its membership row
/// holds the account's row until it commits): the erasure waits and then
/// counts the new team, whose last admin the account is: `conflict`,
/// nothing erased (it left a live team without a member or admin that
/// nobody could act on).
#[tokio::test]
async fn an_erasure_beside_a_team_creation_counts_the_new_team() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("an_erasure_beside_a_team_creation_counts_the_new_team").await
    else {
        return;
    };
    let (_, u) = user(&store, "ilv-erase").await;
    let slug = unique("ilverase").replace('-', "_");
    let scope = format!("team.{slug}");
    let (mut held, pid) = held_transaction(&raw).await;
    for (sql, binds) in [
        (
            "INSERT INTO scopes (path, kind, owner_id, created_at) VALUES ($1, 'team', $2, 1)",
            vec![scope.clone(), u.user_id.clone()],
        ),
        (
            "INSERT INTO teams (id, slug, name, scope, created_by, created_at) VALUES ($1, $2, $2, $3, $4, 1)",
            vec![
                IdKind::Team.generate(),
                slug.clone(),
                scope.clone(),
                u.user_id.clone(),
            ],
        ),
        (
            "INSERT INTO scope_members (scope, user_id, role, created_at) VALUES ($1, $2, 'admin', 1)",
            vec![scope.clone(), u.user_id.clone()],
        ),
    ] {
        let mut q = sqlx::query(sql);
        for b in binds {
            q = q.bind(b);
        }
        q.execute(&mut *held).await.expect("the team's creation");
    }
    let task = {
        let (store, u) = (store.clone(), u.clone());
        tokio::spawn(async move { call(&store, &u, "delete_account", json!({})).await })
    };
    let waited = waits_on(&raw, pid, &task).await;
    held.commit().await.expect("commit the team");
    let done = task.await.expect("the erasure's task");
    assert!(waited, "the erasure did not wait: {done:?}");
    err(
        done,
        ErrorCode::Conflict,
        l,
        "the new team's last admin erases the account",
    );
    let members: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM scope_members WHERE scope = $1")
        .bind(&scope)
        .fetch_one(&raw)
        .await
        .expect("the team's members");
    assert_eq!(members, 1, "the team keeps its admin");
}

/// Writes waiting on their owners' locks (held here as a long import
/// holds them) take writers' turns, not every pooled connection: the
/// test store's pool has four, writes get three (a quarter is kept for
/// reads; the fourth write waits for a turn), and a `recall` answers
/// meanwhile. Each waiting write held a connection of its own, and
/// reads, everyone's, waited the pool's 30 s and failed `internal`.
#[tokio::test]
async fn writes_waiting_on_locks_leave_a_connection_for_reads() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("writes_waiting_on_locks_leave_a_connection_for_reads").await
    else {
        return;
    };
    let (_, r) = user(&store, "ilv-turns-r").await;
    mem(
        &store,
        &r,
        l,
        json!({"content": "The reader's standup is at nine.", "kind": "fact", "scope": "personal"}),
    )
    .await;
    let mut writers = Vec::new();
    for i in 0..4 {
        let (_, w) = user(&store, &format!("ilv-turns-w{i}")).await;
        writers.push(w);
    }
    let (mut held, pid) = held_transaction(&raw).await;
    for w in &writers {
        let (class, key) = zm_store::db::owner_writes_lock(&w.user_id);
        sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
            .bind(class)
            .bind(key)
            .execute(&mut *held)
            .await
            .expect("hold the owners' writes");
    }
    let tasks: Vec<_> = writers
        .iter()
        .map(|w| {
            let (store, w) = (store.clone(), w.clone());
            tokio::spawn(async move {
                remember(
                    &store,
                    &w,
                    json!({"content": "This write waited for the import.", "kind": "fact", "scope": "personal"}),
                )
                .await
            })
        })
        .collect();
    // Three writes reach the locks (set-up, polled in a bounded loop).
    let waiting = until_waiting(&raw, pid, 3).await;
    assert_eq!(waiting, 3, "three writes wait on the locks");
    let read = recall(&store, &r, json!({"query": "standup"})).await;
    let read = ok(read, l, "a read while writes wait");
    assert_eq!(read.memories.len(), 1, "{read:?}");
    assert_eq!(
        waiting_on(&raw, pid).await,
        3,
        "no more than the writers' turns hold a connection on the locks"
    );
    held.commit().await.expect("end the import");
    for t in tasks {
        ok(t.await.expect("the write's task"), l, "a waiting write");
    }
}

/// One user's writes queued on their owner's lock take one writer's turn
/// between them: the others wait for their user's turn holding none, so
/// another user writes meanwhile (the queued writes held every writer's
/// turn, and other users' writes waited 30 s and were refused).
#[tokio::test]
async fn one_users_queued_writes_leave_turns_to_others() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("one_users_queued_writes_leave_turns_to_others").await
    else {
        return;
    };
    let (_, w) = user(&store, "ilv-owner-w").await;
    let (_, r) = user(&store, "ilv-owner-r").await;
    let (held, pid) = hold_writes_of(&raw, &w.user_id).await;
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let (store, w) = (store.clone(), w.clone());
            tokio::spawn(async move {
                remember(
                    &store,
                    &w,
                    json!({"content": format!("Write {i} waited for the import."), "kind": "fact", "scope": "personal"}),
                )
                .await
            })
        })
        .collect();
    let waiting = until_waiting(&raw, pid, 1).await;
    assert_eq!(waiting, 1, "one of the user's writes waits on the lock");
    let other = remember(
        &store,
        &r,
        json!({"content": "Another user's write goes through.", "kind": "fact", "scope": "personal"}),
    )
    .await;
    ok(other, l, "another user's write while the first user's wait");
    assert_eq!(
        waiting_on(&raw, pid).await,
        1,
        "the user's other writes wait for their turn, not on the lock"
    );
    held.commit().await.expect("end the import");
    for t in tasks {
        ok(t.await.expect("the write's task"), l, "a queued write");
    }
}

/// An operator disables admin `a` while the team's other admin `b`
/// leaves. The disable, held up on `a`'s account row (held here), has
/// taken the team's turn first: `b`'s leaving waits for it and then
/// finds no other admin whose account is enabled (`conflict`). The
/// disable took no team lock, so `b` counted `a` as enabled, left, and
/// the team was left with a disabled admin only.
#[tokio::test]
async fn a_disable_takes_its_teams_turn_before_an_admin_leaves() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_disable_takes_its_teams_turn_before_an_admin_leaves").await
    else {
        return;
    };
    let (_, a) = user(&store, "ilv-dis-a").await;
    let slug = create_team_of(&store, &a, l, "ilvdis").await;
    let (_, b) = team_member(&store, &a, l, &slug, "ilv-dis-b", TeamRole::Admin).await;
    let (mut held, pid) = held_transaction(&raw).await;
    sqlx::query("SELECT id FROM users WHERE id = $1 FOR NO KEY UPDATE")
        .bind(&a.user_id)
        .fetch_one(&mut *held)
        .await
        .expect("hold a's account row");
    let disable = {
        let (store, id) = (store.clone(), a.user_id.clone());
        tokio::spawn(async move { store.disable_user(&id).await })
    };
    let waited = waits_on(&raw, pid, &disable).await;
    // The disable's backend: the one waiting on the held transaction.
    let disabler: i32 = sqlx::query_scalar(
        "SELECT pid FROM pg_locks WHERE NOT granted AND $1 = ANY(pg_blocking_pids(pid)) LIMIT 1",
    )
    .bind(pid)
    .fetch_one(&raw)
    .await
    .expect("the disable's backend");
    let leave = {
        let (store, b, slug) = (store.clone(), b.clone(), slug.clone());
        tokio::spawn(async move {
            let id = b.user_id.clone();
            store.remove_team_member(&b, &slug, &id).await
        })
    };
    let leave_waited = waits_on(&raw, disabler, &leave).await;
    held.commit().await.expect("release a's account row");
    let disabled = disable.await.expect("the disable's task");
    let left = leave.await.expect("the leave's task");
    assert!(waited, "the disable did not wait on the account row");
    assert!(matches!(disabled, Ok(Some(_))), "the disable: {disabled:?}");
    assert!(
        leave_waited,
        "the leave did not wait for the disable: {left:?}"
    );
    err(
        left,
        ErrorCode::Conflict,
        l,
        "the last enabled admin leaves",
    );
    let admins: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM scope_members WHERE scope = $1 AND role = 'admin' AND user_id = $2",
    )
    .bind(format!("team.{slug}"))
    .bind(&b.user_id)
    .fetch_one(&raw)
    .await
    .expect("b's membership");
    assert_eq!(admins, 1, "b is still the team's admin");
}

/// A member links two of the project owner's memories on one instance
/// while their account is being erased on another (the erasure holds the
/// account's row, as `delete_account` does): the link waits for the
/// erasure and is refused (`conflict`), and no link is left with the
/// erased account as its owner. Its ends are another's memories, so no
/// key of the account held it back, and the link outlived the account.
#[tokio::test]
async fn a_link_beside_its_owners_erasure_leaves_no_row_behind() {
    let l = "postgres";
    let Some((store, raw)) =
        postgres_with_raw("a_link_beside_its_owners_erasure_leaves_no_row_behind").await
    else {
        return;
    };
    let (_, a) = user(&store, "ilv-erase-owner").await;
    let (ub, b) = user(&store, "ilv-erase-member").await;
    let project = project_of(&store, &a, l, &format!("/src/{}", unique("erase"))).await;
    store
        .add_scope_member(&a.user_id, &project, &ub.id, zm_store::Role::Writer)
        .await
        .expect("B writes in A's project");
    let mut ends = Vec::new();
    for text in [
        "Invoices are numbered per year.",
        "The numbering restarts in January.",
    ] {
        let id = mem(
            &store,
            &a,
            l,
            json!({"content": text, "kind": "fact", "scope": project}),
        )
        .await;
        ok(
            call(
                &store,
                &a,
                "share",
                json!({"memory_id": id, "scope": project}),
            )
            .await,
            l,
            "A shares it in the project",
        );
        ends.push(id);
    }
    let (mut held, pid) = held_transaction(&raw).await;
    sqlx::query("SELECT id FROM users WHERE id = $1 FOR UPDATE")
        .bind(&ub.id)
        .fetch_one(&mut *held)
        .await
        .expect("the erasure holds B's row");
    let task = {
        let (store, b, src, dst) = (store.clone(), b.clone(), ends[0].clone(), ends[1].clone());
        tokio::spawn(async move {
            call(
                &store,
                &b,
                "link",
                json!({"src": src, "dst": dst, "type": "relates_to"}),
            )
            .await
        })
    };
    let waited = waits_on(&raw, pid, &task).await;
    sqlx::query("DELETE FROM users WHERE id = $1")
        .bind(&ub.id)
        .execute(&mut *held)
        .await
        .expect("B's account erased");
    held.commit().await.expect("commit the erasure");
    let done = task.await.expect("the link's task");
    assert!(waited, "the link did not wait on the account: {done:?}");
    err(
        done,
        ErrorCode::Conflict,
        l,
        "a link by an account erased meanwhile",
    );
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM memory_links WHERE owner_id = $1")
        .bind(&ub.id)
        .fetch_one(&raw)
        .await
        .expect("the erased account's links");
    assert_eq!(left, 0, "no link of the erased account is left");
}
