//! A write that loses to concurrent writes on PostgreSQL — the victim of a
//! deadlock — is run again from scratch by the tool service, transparently:
//! the call succeeds and writes once. One that loses on every attempt
//! answers `conflict`, having written nothing. Team administration, a
//! sign-in and a password change are run again the same way. PostgreSQL only (SQLite's
//! writers queue and never deadlock): skipped, with a note, when
//! `ZM_TEST_DATABASE_URL` is unset.
//!
//! The deadlock is real. The tool is `remember` superseding an older
//! memory: it takes the owner's advisory lock (`hold_writes_of`) before it
//! inserts, then the old memory's row to retire it. The test's own
//! transaction holds that row first (`FOR UPDATE`), waits until the
//! tool's backend queues behind it, then asks for the tool's advisory lock:
//! the tool's backend, which waited first, finds the cycle after
//! `deadlock_timeout` and is the victim (the test's transaction sets its
//! own `deadlock_timeout` to 10 s, so it does not look first). Nothing
//! here waits on the clock for an assertion: the test polls `pg_locks`
//! in a bounded loop.

mod common;

use common::*;
use serde_json::{Value, json};
use sqlx::{Any, AnyPool, Transaction};
use tokio::task::JoinHandle;
use zm_contracts::catalogue::tool;
use zm_contracts::{ErrorCode, RememberInput, ToolError, ToolName};
use zm_store::{Caller, Store, ToolService, Transport};

const L: &str = "postgres";

/// The store and a raw pool on the PostgreSQL test database, or `None`
/// (with a note) when it is not configured.
async fn postgres(test: &str) -> Option<(Store, AnyPool)> {
    let Some(store) = postgres_store().await else {
        eprintln!("{PG_ENV} is not set: skipped {test} (PostgreSQL only)");
        return None;
    };
    let url = std::env::var(PG_ENV).expect("set, since the store opened");
    let raw = AnyPool::connect(url.trim())
        .await
        .expect("a raw connection to the PostgreSQL test database");
    Some((store, raw))
}

/// The test's side of the deadlock: a transaction holding the row of
/// memory `old` (lock A), which never looks for deadlocks before the tool
/// does.
struct Holder {
    tx: Transaction<'static, Any>,
    pid: i32,
}

impl Holder {
    /// The test's transaction, which never looks for deadlocks before the
    /// other side does, holding nothing yet.
    async fn begin(raw: &AnyPool) -> Holder {
        let mut tx = raw.begin().await.expect("begin the test's transaction");
        sqlx::query("SET LOCAL deadlock_timeout = '10s'")
            .execute(&mut *tx)
            .await
            .expect("a superuser may set deadlock_timeout");
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *tx)
            .await
            .expect("the test's backend");
        Holder { tx, pid }
    }

    async fn lock_row(raw: &AnyPool, old: &str) -> Holder {
        let mut holder = Holder::begin(raw).await;
        let held: Option<String> =
            sqlx::query_scalar("SELECT id FROM memories WHERE id = $1 FOR UPDATE")
                .bind(old)
                .fetch_optional(&mut *holder.tx)
                .await
                .expect("lock the old memory's row");
        assert!(held.is_some(), "the old memory exists");
        holder
    }

    /// Wait until a backend waits for a row this transaction holds (not
    /// an advisory lock): the tool's, holding the owner's advisory lock
    /// and about to retire the old memory. Its pid and the two keys of the
    /// advisory lock it holds; `None` if the tool's call ended instead.
    async fn tool_waiting<T>(&self, raw: &AnyPool, call: &JoinHandle<T>) -> Option<(i32, i32)> {
        for _ in 0..6_000 {
            // Another connection: pg_locks is read live there.
            let waiting: Option<i32> = sqlx::query_scalar(
                "SELECT pid FROM pg_locks \
                 WHERE NOT granted AND locktype <> 'advisory' AND $1 = ANY(pg_blocking_pids(pid)) \
                 LIMIT 1",
            )
            .bind(self.pid)
            .fetch_optional(raw)
            .await
            .expect("read pg_locks");
            if let Some(pid) = waiting {
                let keys: (i64, i64) = sqlx::query_as(
                    "SELECT classid::int8, objid::int8 FROM pg_locks \
                     WHERE pid = $1 AND locktype = 'advisory' AND granted AND objsubid = 2",
                )
                .bind(pid)
                .fetch_one(raw)
                .await
                .expect("the tool's backend holds the owner's advisory lock");
                // Advisory keys are int4 shown as oid (unsigned): the same bits.
                let key = |k: i64| u32::try_from(k).expect("an oid").cast_signed();
                return Some((key(keys.0), key(keys.1)));
            }
            if call.is_finished() {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        panic!("the tool's call never waited for the row the test holds");
    }

    /// Ask for the advisory lock the tool's backend holds (lock B): a
    /// deadlock, which the tool's backend detects first and loses. Taken
    /// in a savepoint, so that [`Self::let_go_of_advisory`] gives it back
    /// while the row stays held.
    async fn close_the_cycle(&mut self, (class, key): (i32, i32)) {
        sqlx::query("SAVEPOINT advisory")
            .execute(&mut *self.tx)
            .await
            .expect("savepoint");
        sqlx::query("SELECT pg_advisory_xact_lock($1, $2)")
            .bind(class)
            .bind(key)
            .execute(&mut *self.tx)
            .await
            .expect("the test's transaction is not the deadlock's victim");
    }

    async fn let_go_of_advisory(&mut self) {
        sqlx::query("ROLLBACK TO SAVEPOINT advisory")
            .execute(&mut *self.tx)
            .await
            .expect("rollback to savepoint");
    }

    async fn release(self) {
        self.tx.rollback().await.expect("rollback");
    }
}

/// A user with one memory, and the `remember` that supersedes it.
async fn setup(store: &Store, tag: &str) -> (Caller, String, Value) {
    let (_, caller) = user(store, tag).await;
    let old = mem(
        store,
        &caller,
        L,
        json!({"content": "The deploy window opens at nine on Tuesdays.", "kind": "fact", "scope": "personal"}),
    )
    .await;
    let newer = json!({
        "content": "The deploy window opens at ten on Tuesdays.",
        "kind": "fact",
        "scope": "personal",
        "links": [{"dst": old, "type": "supersedes"}],
    });
    (caller, old, newer)
}

/// `(memories the user owns, the old memory's superseded_by)`.
async fn written(raw: &AnyPool, caller: &Caller, old: &str) -> (i64, Option<String>) {
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM memories WHERE owner_id = $1")
        .bind(&caller.user_id)
        .fetch_one(raw)
        .await
        .expect("count memories");
    let superseded_by: Option<String> =
        sqlx::query_scalar("SELECT superseded_by FROM memories WHERE id = $1")
            .bind(old)
            .fetch_one(raw)
            .await
            .expect("the old memory");
    (count, superseded_by)
}

/// The `remember` rows of the user's audit log, sorted: outcome and error
/// code.
async fn remembered(store: &Store, caller: &Caller) -> Vec<(String, Option<String>)> {
    let mut rows: Vec<(String, Option<String>)> = store
        .audit_rows(&caller.user_id, 50)
        .await
        .expect("audit rows")
        .iter()
        .filter(|r| r["command"] == "remember")
        .map(|r| {
            (
                r["outcome"].as_str().unwrap_or("?").to_string(),
                r["error_code"].as_str().map(str::to_string),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// A `remember` that is the victim of a deadlock once is run again and
/// succeeds: one new memory, the old one superseded by it, one audit row
/// and one call counted. (Without the retry it answered `internal`.)
#[tokio::test]
async fn a_deadlock_victim_is_run_again() {
    let Some((store, raw)) = postgres("a_deadlock_victim_is_run_again").await else {
        return;
    };
    let (caller, old, newer) = setup(&store, "deadlock").await;
    let tools = ToolService::new(store.clone());
    let mut holder = Holder::lock_row(&raw, &old).await;
    let call = {
        let (tools, caller) = (tools.clone(), caller.clone());
        tokio::spawn(async move {
            tools
                .call(&caller, ToolName::parse("remember").unwrap(), &newer)
                .await
                .map(|out| out.to_json())
        })
    };
    let keys = holder
        .tool_waiting(&raw, &call)
        .await
        .expect("the call waits for the old memory's row");
    holder.close_the_cycle(keys).await;
    // The tool's first attempt lost (and let go of its advisory lock, or
    // the line above would still wait); its next attempt waits for this
    // transaction.
    holder.release().await;
    let out = call.await.expect("the call's task");
    let out = ok(out, L, "remember after losing a deadlock");
    let new_id = out["memory_id"].as_str().expect("memory_id").to_string();
    assert_eq!(
        written(&raw, &caller, &old).await,
        (2, Some(new_id)),
        "the old memory and exactly one new one, which superseded it"
    );
    assert_eq!(
        remembered(&store, &caller).await,
        vec![("ok".to_string(), None), ("ok".to_string(), None)],
        "one audit row for the call, whatever its attempts (after the setup's)"
    );
    let counted = |code| {
        tools
            .metrics()
            .count(ToolName::Remember, Transport::Internal, code)
    };
    assert_eq!(
        (counted(None), counted(Some(ErrorCode::Internal))),
        (1, 0),
        "one call counted, a success"
    );
}

/// The same inside a batch: the item that lost is rolled back to its
/// savepoint and run again there; the batch commits it once.
#[tokio::test]
async fn a_batch_item_that_lost_a_deadlock_is_run_again() {
    let Some((store, raw)) = postgres("a_batch_item_that_lost_a_deadlock_is_run_again").await
    else {
        return;
    };
    let (caller, old, newer) = setup(&store, "deadlock-batch").await;
    let tools = ToolService::new(store.clone());
    let mut holder = Holder::lock_row(&raw, &old).await;
    let input: RememberInput = input!(RememberInput, &newer);
    let call = {
        let (tools, caller) = (tools.clone(), caller.clone());
        tokio::spawn(async move {
            tools
                .run_batch::<tool::Remember>(&caller, vec![input])
                .await
        })
    };
    let keys = holder
        .tool_waiting(&raw, &call)
        .await
        .expect("the batch waits for the old memory's row");
    holder.close_the_cycle(keys).await;
    holder.release().await;
    let results = ok(call.await.expect("the batch's task"), L, "the batch");
    let [result] = <[Result<_, ToolError>; 1]>::try_from(results).expect("one result");
    let out = ok(result, L, "the batch's remember after losing a deadlock");
    assert_eq!(
        written(&raw, &caller, &old).await,
        (2, Some(out.memory_id.as_str().to_string())),
        "the old memory and exactly one new one, which superseded it"
    );
    assert_eq!(
        remembered(&store, &caller).await,
        vec![("ok".to_string(), None), ("ok".to_string(), None)],
        "one audit row for the item (after the setup's)"
    );
}

/// A `remember` that is the deadlock's victim on every attempt (4) answers
/// `conflict`, not `internal`, and writes nothing: the old memory is live,
/// no new one exists, and the refusal is audited once.
#[tokio::test]
async fn a_write_that_loses_every_attempt_answers_conflict() {
    let Some((store, raw)) = postgres("a_write_that_loses_every_attempt_answers_conflict").await
    else {
        return;
    };
    let (caller, old, newer) = setup(&store, "deadlock-always").await;
    let tools = ToolService::new(store.clone());
    let mut holder = Holder::lock_row(&raw, &old).await;
    let call = {
        let (tools, caller) = (tools.clone(), caller.clone());
        tokio::spawn(async move {
            tools
                .call(&caller, ToolName::parse("remember").unwrap(), &newer)
                .await
                .map(|out| out.to_json())
        })
    };
    let mut lost = 0;
    while let Some(keys) = holder.tool_waiting(&raw, &call).await {
        holder.close_the_cycle(keys).await;
        lost += 1;
        // Give the advisory lock back, keep the row: the next attempt
        // takes the lock and waits for the row again.
        holder.let_go_of_advisory().await;
    }
    holder.release().await;
    let answer = call.await.expect("the call's task");
    let e = err(
        answer,
        ErrorCode::Conflict,
        L,
        "remember losing every attempt",
    );
    assert!(
        e.message.contains("retry"),
        "the message tells the caller to retry: {e}"
    );
    assert_eq!(lost, 4, "four attempts, each a deadlock's victim");
    assert_eq!(
        written(&raw, &caller, &old).await,
        (1, None),
        "nothing written: the old memory alone, still live"
    );
    assert_eq!(
        remembered(&store, &caller).await,
        vec![
            ("error".to_string(), Some("conflict".to_string())),
            ("ok".to_string(), None)
        ],
        "the refusal audited once (after the setup's write)"
    );
    let counted = |code| {
        tools
            .metrics()
            .count(ToolName::Remember, Transport::Internal, code)
    };
    assert_eq!(
        (counted(None), counted(Some(ErrorCode::Conflict))),
        (0, 1),
        "one call counted, a conflict"
    );
}

/// Make a write a deadlock's victim over two rows: the test's transaction
/// takes `first` (a `SELECT … FOR UPDATE` of one row, with its
/// arguments), then `start`s the write, waits until a backend queues
/// behind that row (the write, which by then holds the row `second`
/// names), then takes `second`. The write's backend, which waited first,
/// finds the cycle and loses; the test's transaction gets its row and
/// lets go. The write's outcome.
async fn lose_a_deadlock<T>(
    raw: &AnyPool,
    first: (&str, &[&str]),
    second: (&str, &[&str]),
    start: impl FnOnce() -> JoinHandle<T>,
) -> T {
    let bound = |(sql, args): (&str, &[&str])| {
        args.iter()
            .fold(sqlx::query(sqlx::AssertSqlSafe(sql.to_owned())), |q, a| {
                q.bind(a.to_string())
            })
    };
    let Holder { mut tx, pid } = Holder::begin(raw).await;
    let held = bound(first)
        .fetch_optional(&mut *tx)
        .await
        .expect("hold the first row");
    assert!(held.is_some(), "the first row exists: {}", first.0);
    let write = start();
    let mut queued = false;
    for _ in 0..6_000 {
        let waiting: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_locks WHERE NOT granted AND $1 = ANY(pg_blocking_pids(pid)) LIMIT 1",
        )
        .bind(pid)
        .fetch_optional(raw)
        .await
        .expect("read pg_locks");
        if waiting.is_some() {
            queued = true;
            break;
        }
        assert!(
            !write.is_finished(),
            "the write ended before it queued behind {}",
            first.0
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(queued, "the write never waited for the row the test holds");
    // Close the cycle: the write's backend loses, this one gets the row.
    bound(second)
        .execute(&mut *tx)
        .await
        .expect("the test's transaction is not the deadlock's victim");
    tx.rollback().await.expect("let go");
    write.await.expect("the write's task")
}

/// Team administration is run again like a tool's write: a role change
/// that is a deadlock's victim lands once, with one audit event. (Without
/// the rerun it answered `internal`: a 500 on the dashboard.)
///
/// The role change holds the team's row (`For::Change`), then writes the
/// member's row in the team's scope. The test's transaction holds that
/// row first, waits until the change queues behind it, then asks for the
/// team's row: the change's backend, which waited first, finds the cycle
/// and is the victim; the test's transaction then lets go.
#[tokio::test]
async fn a_team_change_that_lost_a_deadlock_is_run_again() {
    let Some((store, raw)) = postgres("a_team_change_that_lost_a_deadlock_is_run_again").await
    else {
        return;
    };
    let (_, admin) = user(&store, "ct-admin").await;
    let slug = create_team_of(&store, &admin, L, "ct").await;
    let (member, _) = team_member(
        &store,
        &admin,
        L,
        &slug,
        "ct-w",
        zm_contracts::TeamRole::Writer,
    )
    .await;
    let member_now = lose_a_deadlock(
        &raw,
        (
            "SELECT role FROM scope_members WHERE scope = $1 AND user_id = $2 AND role = 'writer' FOR UPDATE",
            &[&format!("team.{slug}"), &member.id],
        ),
        ("SELECT id FROM teams WHERE slug = $1 FOR UPDATE", &[&slug]),
        || {
            let (store, admin, slug, id) = (
                store.clone(),
                admin.clone(),
                slug.clone(),
                member.id.clone(),
            );
            tokio::spawn(async move {
                let reader = input!(
                    zm_contracts::teams::SetRoleInput,
                    &json!({"role": "reader"})
                );
                store.set_team_role(&admin, &slug, &id, reader).await
            })
        },
    )
    .await
    .expect("run again, the role change lands");
    assert_eq!(member_now.role, zm_contracts::TeamRole::Reader);
    let audit = store
        .team_audit(&admin, &slug)
        .await
        .expect("the team's audit log");
    let changes = audit
        .events
        .iter()
        .filter(|e| {
            e.action == zm_contracts::teams::TeamAction::RoleChanged
                && e.user_id.as_ref().map(ToString::to_string) == Some(member.id.clone())
        })
        .count();
    assert_eq!(changes, 1, "one role change recorded: {:?}", audit.events);
}

/// A sign-in that lost a deadlock is run again, as a tool's write is.
/// The dashboard's sign-in holds the account's row (so that a password
/// change racing it ends it) and drops every ended session. The test's
/// transaction holds an ended session's row, waits until the sign-in
/// queues behind it, then asks for the account's row: the sign-in's
/// backend, which waited first, is the victim; the test lets go, and the
/// sign-in, run again, stores one session.
#[tokio::test]
async fn a_sign_in_that_lost_a_deadlock_is_run_again() {
    let Some((store, raw)) = postgres("a_sign_in_that_lost_a_deadlock_is_run_again").await else {
        return;
    };
    let (signing_in, _) = user(&store, "ct-signin").await;
    let (other, _) = user(&store, "ct-ended").await;
    let ended = unique("wss_ended");
    sqlx::query(
        "INSERT INTO web_sessions (id, token_hash, user_id, created_at, last_seen_at, expires_at) VALUES ($1, $2, $3, 1, 1, 2)",
    )
    .bind(&ended)
    .bind(unique("hash"))
    .bind(&other.id)
    .execute(&raw)
    .await
    .expect("an ended session");
    let (secret, session) = lose_a_deadlock(
        &raw,
        (
            "SELECT id FROM web_sessions WHERE id = $1 FOR UPDATE",
            &[&ended],
        ),
        (
            "SELECT id FROM users WHERE id = $1 FOR UPDATE",
            &[&signing_in.id],
        ),
        || {
            let (store, id, credential) =
                (store.clone(), signing_in.id.clone(), signing_in.credential);
            tokio::spawn(async move {
                store
                    .web_session_create(&id, credential, Some("contention test"))
                    .await
            })
        },
    )
    .await
    .expect("run again, the sign-in lands");
    assert_eq!(session.user_id, signing_in.id);
    let found = store.web_session(&secret).await.expect("read the session");
    assert_eq!(
        found.map(|s| s.id),
        Some(session.id),
        "the session is stored"
    );
    let sessions: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM web_sessions WHERE user_id = $1")
        .bind(&signing_in.id)
        .fetch_one(&raw)
        .await
        .expect("count sessions");
    assert_eq!(sessions, 1, "one session, however many attempts");
    let gone: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM web_sessions WHERE id = $1")
        .bind(&ended)
        .fetch_one(&raw)
        .await
        .expect("count the ended session");
    assert_eq!(gone, 0, "the ended session is dropped");
}

/// User administration is run again too: a password change that lost a
/// deadlock lands once. The change holds the account's row, then ends
/// the account's dashboard sessions; the test's transaction holds one of
/// those sessions' rows, then asks for the account's.
#[tokio::test]
async fn a_password_change_that_lost_a_deadlock_is_run_again() {
    let Some((store, raw)) = postgres("a_password_change_that_lost_a_deadlock_is_run_again").await
    else {
        return;
    };
    let (account, _) = user(&store, "ct-passwd").await;
    let (secret, session) = store
        .web_session_create(&account.id, account.credential, None)
        .await
        .expect("a dashboard session");
    const NEW: &str = "a brand new passphrase for the contention test";
    let revoked = lose_a_deadlock(
        &raw,
        (
            "SELECT id FROM web_sessions WHERE id = $1 FOR UPDATE",
            &[&session.id],
        ),
        (
            "SELECT id FROM users WHERE id = $1 FOR UPDATE",
            &[&account.id],
        ),
        || {
            let (store, id) = (store.clone(), account.id.clone());
            tokio::spawn(async move { store.change_password(&id, NEW, false).await })
        },
    )
    .await
    .expect("run again, the password change lands");
    assert_eq!(revoked.personal_tokens, 0);
    assert!(
        store
            .web_session(&secret)
            .await
            .expect("read the session")
            .is_none(),
        "the old password's session ended"
    );
    let signs_in = |password: &'static str| {
        let (store, email) = (store.clone(), account.email.clone());
        async move {
            store
                .verify_password(&email, password)
                .await
                .expect("verify")
                .is_some()
        }
    };
    assert!(signs_in(NEW).await, "the new password signs in");
    assert!(!signs_in(PASSWORD).await, "the old one does not");
    let audit = store.audit_rows(&account.id, 20).await.expect("audit rows");
    let changes = audit
        .iter()
        .filter(|r| r["command"] == "user.passwd")
        .count();
    assert_eq!(changes, 1, "one password change audited: {audit:?}");
}
