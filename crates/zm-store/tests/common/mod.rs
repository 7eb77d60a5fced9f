//! The harness of the store's behaviour tests.
//!
//! A behaviour test is written once, inside [`backend_tests!`], and runs as
//! one `#[tokio::test]` per backend: `<name>::sqlite` on a fresh SQLite
//! file always, `<name>::postgres` on `ZM_TEST_DATABASE_URL` when that
//! variable is set (and skipped, passing, when it is not).
//! All PostgreSQL tests share that one database (concurrently), so a test
//! creates its own users with unique emails ([`user`]) and never assumes it
//! is alone in the database. Inputs go through
//! [`zm_contracts::parse_input`], the real validation entry point, before
//! they reach the store: typed tools through the helpers below
//! ([`remember`], [`recall`], …), the rest by name through [`call`].
//!
//! Time is the store's clock: tests move it with `store.clock().advance_ms`
//! and never sleep.

#![allow(dead_code)]

use std::sync::Mutex;

use rand::Rng;
use serde_json::Value;
use zm_contracts::catalogue::tool;
use zm_contracts::prefixes::Prefix;
use zm_contracts::{
    BuildContextInput, BuildContextOutput, CloseLoopInput, CloseLoopOutput, ErrorCode, ForgetInput,
    ForgetOutput, RecallInput, RecallOutput, RememberInput, RememberOutput, RestoreMemoryInput,
    RestoreMemoryOutput, ToolError, ToolName,
};
use zm_store::{Caller, OpenOptions, Store, ToolService, User};

/// The environment variable naming the PostgreSQL test database.
pub(crate) const PG_ENV: &str = "ZM_TEST_DATABASE_URL";

/// Temporary directories of the SQLite stores, kept alive for the whole
/// test process (a store's pool may open new connections at any time).
static KEEP: Mutex<Vec<tempfile::TempDir>> = Mutex::new(Vec::new());

/// Where the SQLite files go: cargo's scratch directory for integration
/// tests (inside `target/`, so `cargo clean` removes leftovers).
pub(crate) fn scratch_root() -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("zm-store-tests");
    std::fs::create_dir_all(&root).expect("create the test scratch directory");
    root
}

/// A store on a fresh SQLite file.
pub(crate) async fn sqlite_store() -> Store {
    let dir = tempfile::Builder::new()
        .prefix("store-")
        .tempdir_in(scratch_root())
        .expect("create a temporary directory");
    let url = zm_store::sqlite_url(&dir.path().join("zm.db"));
    let store = Store::open(&url).await.expect("open the SQLite test store");
    KEEP.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(dir);
    store
}

/// Two handles on one database, as two instances of the server hold it:
/// on a fresh SQLite file always, and on the shared PostgreSQL test
/// database when [`PG_ENV`] is set. Each with its backend's label; each
/// handle has its own pool and its own clock.
pub(crate) async fn twin_stores() -> Vec<(&'static str, Store, Store)> {
    let dir = tempfile::Builder::new()
        .prefix("twins-")
        .tempdir_in(scratch_root())
        .expect("create a temporary directory");
    let url = zm_store::sqlite_url(&dir.path().join("zm.db"));
    let first = Store::open(&url).await.expect("open the SQLite test store");
    let second = Store::open(&url).await.expect("open it again");
    KEEP.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(dir);
    let mut twins = vec![("sqlite", first, second)];
    if let (Some(first), Some(second)) = (postgres_store().await, postgres_store().await) {
        twins.push(("postgres", first, second));
    } else {
        eprintln!("{PG_ENV} is not set: the twin stores are SQLite only");
    }
    twins
}

/// A store on the shared PostgreSQL test database, or `None` when
/// [`PG_ENV`] is not set.
pub(crate) async fn postgres_store() -> Option<Store> {
    let url = zm_store::test_database_url()?;
    let mut opts = OpenOptions::new(url);
    opts.max_connections = 4;
    let store = Store::open_with(opts)
        .await
        .expect("open the PostgreSQL test store (ZM_TEST_DATABASE_URL)");
    Some(store)
}

/// One `#[tokio::test]` per backend for each test written inside it.
///
/// ```ignore
/// backend_tests! {
///     /// What the test shows.
///     async fn forget_and_restore(store: Store, label: &str) {
///         let (_, caller) = user(&store, "life").await;
///         // ... `label` ("sqlite" or "postgres") goes in assertion messages.
///     }
/// }
/// ```
///
/// expands to the `async fn` itself plus a module of the same name holding
/// `forget_and_restore::sqlite` (always runs, on a fresh SQLite file) and
/// `forget_and_restore::postgres` (on [`PG_ENV`]; when that variable is
/// unset it prints that it was skipped and passes). Each test opens its own
/// store. Run one backend with `cargo test -p zm-store -- ::sqlite` (or
/// `::postgres`).
#[macro_export]
macro_rules! backend_tests {
    ($(
        $(#[$meta:meta])*
        async fn $name:ident($store:ident: $store_ty:ty, $label:ident: &str $(,)?) $body:block
    )*) => {$(
        $(#[$meta])*
        async fn $name($store: $store_ty, $label: &str) $body

        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name($crate::common::sqlite_store().await, "sqlite").await;
            }

            #[tokio::test]
            async fn postgres() {
                match $crate::common::postgres_store().await {
                    Some(store) => super::$name(store, "postgres").await,
                    None => eprintln!(
                        "{} is not set: skipped {}::postgres",
                        $crate::common::PG_ENV,
                        stringify!($name)
                    ),
                }
            }
        }
    )*};
}

/// A random lowercase suffix, unique enough to keep tests apart in the
/// shared database.
pub(crate) fn unique(tag: &str) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let suffix: String = (0..12)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{tag}{suffix}")
}

/// The password every test user gets.
pub(crate) const PASSWORD: &str = "correct horse battery staple";

pub(crate) const HOUR_MS: i64 = 3_600_000;
pub(crate) const DAY_MS: i64 = 24 * HOUR_MS;

/// A well-formed memory id that never exists.
pub(crate) const NEVER: &str = "mem_0000000000000000.0000000000";

/// Create a user with a unique email and a caller for it (no session, no
/// attached project).
pub(crate) async fn user(store: &Store, tag: &str) -> (User, Caller) {
    let email = format!("{}@test.zero-memory.invalid", unique(&format!("{tag}-")));
    let u = store
        .create_user(&email, PASSWORD)
        .await
        .expect("create a test user");
    let caller = Caller::new(u.id.clone());
    (u, caller)
}

/// A caller of the same user on another transport session.
pub(crate) fn with_session(caller: &Caller, session: &str) -> Caller {
    Caller {
        session_id: Some(session.to_string()),
        ..caller.clone()
    }
}

/// A caller of the same user whose connection is attached to `project`.
pub(crate) fn attached(caller: &Caller, project: &str) -> Caller {
    Caller {
        attached_project: Some(project.to_string()),
        ..caller.clone()
    }
}

/// Parse a tool input through the real validation entry point; a test
/// input that does not validate is a bug in the test.
///
/// `input!(RememberInput, &json!({...}))`.
#[macro_export]
macro_rules! input {
    ($ty:ty, $raw:expr) => {{
        let raw: &serde_json::Value = $raw;
        match zm_contracts::parse_input::<$ty>(raw) {
            Ok(v) => v,
            Err(e) => panic!("test input {raw} does not validate: {e}"),
        }
    }};
}

/// The tool service over a store: the one way tests call tools, as every
/// transport does.
pub(crate) fn tools(store: &Store) -> ToolService {
    ToolService::new(store.clone())
}

pub(crate) async fn remember(
    store: &Store,
    caller: &Caller,
    raw: Value,
) -> Result<RememberOutput, ToolError> {
    tools(store)
        .run::<tool::Remember>(caller, input!(RememberInput, &raw))
        .await
}

pub(crate) async fn recall(
    store: &Store,
    caller: &Caller,
    raw: Value,
) -> Result<RecallOutput, ToolError> {
    tools(store)
        .run::<tool::Recall>(caller, input!(RecallInput, &raw))
        .await
}

pub(crate) async fn build_context(
    store: &Store,
    caller: &Caller,
    raw: Value,
) -> Result<BuildContextOutput, ToolError> {
    tools(store)
        .run::<tool::BuildContext>(caller, input!(BuildContextInput, &raw))
        .await
}

pub(crate) async fn forget(
    store: &Store,
    caller: &Caller,
    id: &str,
) -> Result<ForgetOutput, ToolError> {
    tools(store)
        .run::<tool::Forget>(
            caller,
            input!(ForgetInput, &serde_json::json!({ "memory_id": id })),
        )
        .await
}

pub(crate) async fn restore(
    store: &Store,
    caller: &Caller,
    id: &str,
) -> Result<RestoreMemoryOutput, ToolError> {
    tools(store)
        .run::<tool::RestoreMemory>(
            caller,
            input!(RestoreMemoryInput, &serde_json::json!({ "memory_id": id })),
        )
        .await
}

pub(crate) async fn close_loop(
    store: &Store,
    caller: &Caller,
    id: &str,
) -> Result<CloseLoopOutput, ToolError> {
    tools(store)
        .run::<tool::CloseLoop>(
            caller,
            input!(CloseLoopInput, &serde_json::json!({ "memory_id": id })),
        )
        .await
}

/// Any tool by name, raw JSON in and contract JSON out, through the same
/// dispatch MCP and REST use (validated, run, audited).
pub(crate) async fn call(
    store: &Store,
    caller: &Caller,
    tool: &str,
    args: Value,
) -> Result<Value, ToolError> {
    tools(store)
        .call(
            caller,
            ToolName::parse(tool).expect("a catalogue tool"),
            &args,
        )
        .await
        .map(|out| out.to_json())
}

/// `remember` through [`call`]; the new (or absorbing) memory's id.
pub(crate) async fn mem(store: &Store, caller: &Caller, label: &str, args: Value) -> String {
    ok(
        call(store, caller, "remember", args).await,
        label,
        "remember",
    )["memory_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The ids a recall returns (panics, naming the backend, if it fails).
pub(crate) async fn recall_ids(
    store: &Store,
    caller: &Caller,
    label: &str,
    raw: Value,
) -> Vec<String> {
    match recall(store, caller, raw.clone()).await {
        Ok(out) => out
            .memories
            .iter()
            .map(|m| m.id.as_str().to_string())
            .collect(),
        Err(e) => panic!("[{label}] recall {raw} failed: {e}"),
    }
}

/// The caller's project scope for a hint (resolved by a pinned read, which
/// records nothing).
pub(crate) async fn project_of(store: &Store, caller: &Caller, label: &str, hint: &str) -> String {
    let out = recall(
        store,
        caller,
        serde_json::json!({ "query": "anything", "project_hint": hint }),
    )
    .await
    .unwrap_or_else(|e| panic!("[{label}] pinned recall for {hint:?} failed: {e}"));
    let scope = out
        .project_scope
        .unwrap_or_else(|| panic!("[{label}] hint {hint:?} pinned no project"));
    assert!(
        scope.starts_with("proj."),
        "[{label}] hint {hint:?} resolved to {scope}, not a project scope"
    );
    scope
}

/// Unwrap a success, naming the backend and the step on failure.
pub(crate) fn ok<T, E: std::fmt::Display>(r: Result<T, E>, label: &str, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("[{label}] {what}: expected success, got {e}"),
    }
}

/// Unwrap a failure with the expected code, naming the backend and the step.
pub(crate) fn err<T: std::fmt::Debug>(
    r: Result<T, ToolError>,
    code: ErrorCode,
    label: &str,
    what: &str,
) -> ToolError {
    match r {
        Ok(v) => panic!("[{label}] {what}: expected {code}, got success {v:?}"),
        Err(e) => {
            assert_eq!(
                e.code, code,
                "[{label}] {what}: expected {code}, got {e} (details {:?})",
                e.details
            );
            assert_ne!(
                e.code,
                ErrorCode::Internal,
                "[{label}] {what}: internal error"
            );
            e
        }
    }
}

/// Assert a `validation_failed` error whose message starts with `prefix`.
pub(crate) fn assert_prefix(e: &ToolError, prefix: Prefix, label: &str, what: &str) {
    assert_eq!(
        e.code,
        ErrorCode::ValidationFailed,
        "[{label}] {what}: code of {e}"
    );
    assert!(
        e.has_prefix(prefix),
        "[{label}] {what}: message {:?} does not start with {:?}",
        e.message,
        prefix.as_str()
    );
}

/// The message with `id` replaced by a placeholder, so errors about two
/// different ids can be compared.
pub(crate) fn shape(e: &ToolError, id: &str) -> (ErrorCode, String, Option<serde_json::Value>) {
    let details = e
        .details
        .as_ref()
        .map(|d| serde_json::from_str(&d.to_string().replace(id, "<id>")).unwrap());
    (e.code, e.message.replace(id, "<id>"), details)
}

// ------------------------------------------------------------ fake secrets
//
// Assembled at run time so this file never contains anything that looks
// like a real credential. One per content-guard detector, keyed by the
// detector id.

fn alnum(n: usize) -> String {
    "aB3dE5gH7jK9mN1pQ2rS4tU6vW8xY0z"
        .chars()
        .cycle()
        .take(n)
        .collect()
}

fn upper_digits(n: usize) -> String {
    "Q7W2E9R4T6Y1U3I8O5P0".chars().cycle().take(n).collect()
}

/// `(detector id, a fake secret it must catch)` for all ten detectors.
pub(crate) fn fake_secrets() -> Vec<(&'static str, String)> {
    let dashes = "-".repeat(5);
    vec![
        (
            "pem-private-key",
            format!("{dashes}BEGIN RSA PRIVATE KEY{dashes}"),
        ),
        (
            "github-token",
            format!("{}{}", "gh".to_owned() + "p_", alnum(36)),
        ),
        (
            "aws-access-key-id",
            format!("{}{}", "AK".to_owned() + "IA", upper_digits(16)),
        ),
        (
            "slack-token",
            format!("{}1234-5678-{}", "xo".to_owned() + "xb-", alnum(12)),
        ),
        (
            "jwt",
            format!(
                "{}{}.{}.{}",
                "ey".to_owned() + "J",
                alnum(20),
                alnum(24),
                alnum(30)
            ),
        ),
        (
            "url-credentials",
            format!(
                "postgres://admin:{}@db.internal:5432/app",
                "hunter2".to_owned() + "x"
            ),
        ),
        (
            "anthropic-api-key",
            format!("{}api03-{}", "sk".to_owned() + "-ant-", alnum(40)),
        ),
        (
            "openai-api-key",
            format!("{}proj-{}", "sk".to_owned() + "-", alnum(40)),
        ),
        (
            "stripe-api-key",
            format!("{}{}", "sk".to_owned() + "_live_", alnum(24)),
        ),
        (
            "google-api-key",
            format!("{}{}", "AI".to_owned() + "za", alnum(33) + "_-"),
        ),
    ]
}

/// How many memories the caller can export (the first page: tests keep
/// fewer than a page), forgotten ones included.
pub(crate) async fn owned(store: &Store, caller: &Caller, label: &str) -> u64 {
    ok(
        call(store, caller, "export_memories", serde_json::json!({})).await,
        label,
        "export",
    )["count"]
        .as_u64()
        .expect("count")
}

/// The account signing in as `email` joins team `slug` with `role` as a
/// member does: invited by `admin`, accepted by them (only the server's
/// owner adds an account directly).
pub(crate) async fn join_team(
    store: &Store,
    admin: &Caller,
    slug: &str,
    email: &str,
    role: zm_contracts::TeamRole,
    label: &str,
) {
    let invitation = zm_contracts::teams::InviteInput {
        email: email.to_string(),
        role,
        expires_in_days: None,
    };
    let invitation = ok(
        store.invite_team_member(admin, slug, invitation).await,
        label,
        "invite",
    );
    let user = store
        .user_by_email(email)
        .await
        .expect("user lookup")
        .expect("the invitee has an account");
    ok(
        store
            .accept_invitation(&Caller::new(user.id), &invitation.id)
            .await,
        label,
        "accept",
    );
}

/// A new team administered by `admin`; its slug (from `tag`, unique).
pub(crate) async fn create_team_of(store: &Store, admin: &Caller, l: &str, tag: &str) -> String {
    let slug = unique(tag).replace('-', "_");
    let input: zm_contracts::teams::CreateTeamInput = input!(
        zm_contracts::teams::CreateTeamInput,
        &serde_json::json!({"slug": slug})
    );
    ok(store.create_team(admin, input).await, l, "create team");
    slug
}

/// A new user, member of team `slug` with `role` (invited, accepted).
pub(crate) async fn team_member(
    store: &Store,
    admin: &Caller,
    l: &str,
    slug: &str,
    tag: &str,
    role: zm_contracts::TeamRole,
) -> (User, Caller) {
    let (u, c) = user(store, tag).await;
    join_team(store, admin, slug, &u.email, role, l).await;
    (u, c)
}

/// The state of the rule from `memory_id` among team `slug`'s steward's
/// rules, as the team's admin lists them.
pub(crate) async fn steward_rule_state(
    store: &Store,
    admin: &Caller,
    l: &str,
    slug: &str,
    memory_id: &str,
) -> Option<zm_store::rules::RuleState> {
    ok(
        store.team_steward_rules(admin, slug).await,
        l,
        "the steward's rules",
    )
    .into_iter()
    .find(|r| r.memory_id.as_str() == memory_id)
    .map(|r| r.status)
}

/// What team `slug`'s audit log records of changes to what its steward
/// holds, oldest first: (action, who, which memory).
pub(crate) async fn steward_events(
    store: &Store,
    admin: &Caller,
    l: &str,
    slug: &str,
) -> Vec<(zm_contracts::teams::TeamAction, String, String)> {
    let audit = ok(
        store.team_audit(admin, slug).await,
        l,
        "the team's audit log",
    );
    let mut events: Vec<_> = audit
        .events
        .into_iter()
        .filter(|e| e.action.is_for_steward())
        .map(|e| {
            let actor = e.actor.map(|a| a.to_string()).unwrap_or_default();
            (e.action, actor, e.subject.unwrap_or_default())
        })
        .collect();
    events.reverse();
    events
}

/// PostgreSQL only: a raw pool on [`PG_ENV`]'s database beside the store,
/// or `None` (with a note naming `test`) when it is not set.
pub(crate) async fn postgres_with_raw(test: &str) -> Option<(Store, sqlx::AnyPool)> {
    let Some(store) = postgres_store().await else {
        eprintln!("{PG_ENV} is not set: skipped {test} (PostgreSQL only)");
        return None;
    };
    let url = std::env::var(PG_ENV).expect("set, since the store opened");
    let raw = sqlx::AnyPool::connect(url.trim())
        .await
        .expect("a raw connection to the PostgreSQL test database");
    Some((store, raw))
}

/// A role change of team `slug` held open on `raw`, as every team change
/// takes turns: the team's row held for change, then `user_id`'s role in
/// `scope` lowered to writer. The transaction (commit it to let waiters
/// on) and its backend's pid.
pub(crate) async fn hold_a_demotion(
    raw: &sqlx::AnyPool,
    slug: &str,
    scope: &str,
    user_id: &str,
) -> (sqlx::Transaction<'static, sqlx::Any>, i32) {
    let mut change = raw.begin().await.expect("begin the role change");
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *change)
        .await
        .expect("the change's backend");
    sqlx::query("SELECT id FROM teams WHERE slug = $1 FOR NO KEY UPDATE")
        .bind(slug)
        .fetch_one(&mut *change)
        .await
        .expect("hold the team's row");
    sqlx::query("UPDATE scope_members SET role = 'writer' WHERE scope = $1 AND user_id = $2")
        .bind(scope)
        .bind(user_id)
        .execute(&mut *change)
        .await
        .expect("demote");
    (change, pid)
}

/// How many transactions wait on a lock `pid` holds, read on `raw`.
pub(crate) async fn waiting_on(raw: &sqlx::AnyPool, pid: i32) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_locks WHERE NOT granted AND $1 = ANY(pg_blocking_pids(pid))",
    )
    .bind(pid)
    .fetch_one(raw)
    .await
    .expect("read pg_locks")
}

/// How many transactions wait on `pid`'s locks once at least `n` do
/// (polled in a bounded loop; what it returns is asserted, not timed).
pub(crate) async fn until_waiting(raw: &sqlx::AnyPool, pid: i32, n: i64) -> i64 {
    let mut waiting = 0;
    for _ in 0..6_000 {
        waiting = waiting_on(raw, pid).await;
        if waiting >= n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    waiting
}

/// Whether some backend comes to wait on backend `pid`'s locks before
/// `task` finishes (polled in a bounded loop of `pg_locks`; no assertion
/// waits on the clock).
pub(crate) async fn waits_on<T>(
    raw: &sqlx::AnyPool,
    pid: i32,
    task: &tokio::task::JoinHandle<T>,
) -> bool {
    for _ in 0..6_000 {
        if waiting_on(raw, pid).await > 0 {
            return true;
        }
        if task.is_finished() {
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    false
}

/// The pairs of `who`'s pending `unjudged` conflicts, each sorted.
pub(crate) async fn unjudged_pairs(store: &Store, who: &Caller, l: &str) -> Vec<[String; 2]> {
    let out = ok(
        call(
            store,
            who,
            "list_conflicts",
            serde_json::json!({"verdict": "unjudged", "status": "pending", "limit": 100}),
        )
        .await,
        l,
        "list_conflicts",
    );
    let mut pairs: Vec<[String; 2]> = out["conflicts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let mut p = [
                c["memory_a"]["id"].as_str().unwrap_or_default().to_string(),
                c["memory_b"]["id"].as_str().unwrap_or_default().to_string(),
            ];
            p.sort();
            p
        })
        .collect();
    pairs.sort();
    pairs
}
